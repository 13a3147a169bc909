/* metrics.c — statistics of a dumped tensor and the FP32-vs-AMP comparison metrics.
 *
 * Everything is accumulated in double.  The definitions (what counts as a mismatch, 0/0) are
 * in dump.h; they are the ones the compare table and the unit tests use.
 */
#include <math.h>

#include "dump.h"

void dump_stats_compute(const unsigned char *data, dump_dtype dt, size_t n, dump_stats *out)
{
	dump_stats s = {.count = n, .min = HUGE_VAL, .max = -HUGE_VAL, .absmax = 0.0};
	for (size_t i = 0; i < n; i++) {
		double v = dump_element(data, dt, i);
		if (isnan(v)) {
			s.nan++;
		} else if (isinf(v)) {
			s.inf++;
		} else {
			s.finite++;
			if (v < s.min)
				s.min = v;
			if (v > s.max)
				s.max = v;
			if (fabs(v) > s.absmax)
				s.absmax = fabs(v);
		}
	}
	if (!s.finite)
		s.min = s.max = s.absmax = (double)NAN;
	*out = s;
}

void dump_diff_compute(const double *a, const double *b, size_t n, dump_diff *out)
{
	double dot = 0.0, na = 0.0, nb = 0.0, max_abs = 0.0, max_rel = 0.0;
	uint64_t finite = 0, mismatch = 0;
	int nan_involved = 0;

	for (size_t i = 0; i < n; i++) {
		double x = a[i], y = b[i];
		if (isfinite(x) && isfinite(y)) {
			finite++;
			dot += x * y;
			na += x * x;
			nb += y * y;
			double d = fabs(x - y);
			double r = x != 0.0 ? d / fabs(x) : (d == 0.0 ? 0.0 : HUGE_VAL);
			if (d > max_abs)
				max_abs = d;
			if (r > max_rel)
				max_rel = r;
		} else if (isnan(x) && isnan(y)) {
			continue; /* the same kind of non-finite on both sides: agree */
		} else if (x == y) {
			continue; /* +Inf and +Inf, -Inf and -Inf */
		} else {
			mismatch++;
			if (isnan(x) || isnan(y))
				nan_involved = 1;
		}
	}

	double cosine;
	if (na == 0.0 && nb == 0.0)
		cosine = 1.0;
	else if (na == 0.0 || nb == 0.0)
		cosine = 0.0;
	else
		cosine = dot / (sqrt(na) * sqrt(nb));
	if (cosine > 1.0)
		cosine = 1.0; /* rounding of nearly identical vectors */
	else if (cosine < -1.0)
		cosine = -1.0;
	if (mismatch) {
		max_abs = nan_involved ? (double)NAN : HUGE_VAL;
		max_rel = max_abs;
	}
	out->count = n;
	out->finite = finite;
	out->mismatch = mismatch;
	out->cosine = cosine;
	out->max_abs = max_abs;
	out->max_rel = max_rel;
}

int dump_diff_exceeds(const dump_diff *d, double min_cosine, double max_abs)
{
	if (d->mismatch || isnan(d->cosine) || isnan(d->max_abs))
		return 1;
	return d->cosine < min_cosine || d->max_abs > max_abs;
}

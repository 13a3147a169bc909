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
	double norm_ratio = na == nb ? 1.0 : na == 0.0 ? HUGE_VAL : sqrt(nb) / sqrt(na);
	if (finite == 0 && n > 0)
		cosine = norm_ratio = (double)NAN; /* nothing to measure them on */
	if (mismatch) {
		max_abs = nan_involved ? (double)NAN : HUGE_VAL;
		max_rel = max_abs;
	}
	out->count = n;
	out->finite = finite;
	out->mismatch = mismatch;
	out->cosine = cosine;
	out->norm_ratio = norm_ratio;
	out->max_abs = max_abs;
	out->max_rel = max_rel;
}

void dump_closeness_compute(const double *a, const double *b, size_t n, double atol, double rtol,
                            dump_closeness *out)
{
	dump_closeness c = {0};
	for (size_t i = 0; i < n; i++) {
		double x = a[i], y = b[i];
		int fx = isfinite(x), fy = isfinite(y);
		if (fx != fy) {
			if (fx)
				c.only_b++;
			else
				c.only_a++;
			continue;
		}
		if (!fx)
			continue;
		double d = fabs(x - y), tol = atol + rtol * fabs(x);
		if (d > tol)
			c.over++;
		double r = tol > 0.0 ? d / tol : (d > 0.0 ? HUGE_VAL : 0.0);
		if (r > c.worst)
			c.worst = r;
	}
	*out = c;
}

double dump_default_rtol(dump_dtype a, dump_dtype b)
{
	if (a == DUMP_DT_BF16 || b == DUMP_DT_BF16)
		return 0x1p-7;
	if (a == DUMP_DT_F16 || b == DUMP_DT_F16)
		return 0x1p-10;
	return 0.0;
}

unsigned dump_verdict(const dump_diff *d, uint64_t over_max_abs, uint64_t over_ceiling,
                      const dump_limits *l)
{
	unsigned why = 0;
	if (d->mismatch)
		why |= DUMP_FLAG_NONFINITE;
	if (d->finite == 0) /* no cosine or norm to judge: the mismatches say it all */
		return why | (over_ceiling ? DUMP_FLAG_CEILING : 0);
	int moved = !(d->cosine >= l->min_cosine) || /* NaN is beyond */
	            !(fabs(d->norm_ratio - 1.0) <= l->max_norm_diff);
	if (moved && over_max_abs)
		why |= DUMP_FLAG_DRIFT;
	if (!(d->cosine >= l->cosine_floor))
		why |= DUMP_FLAG_FLOOR;
	if (over_ceiling)
		why |= DUMP_FLAG_CEILING;
	return why;
}

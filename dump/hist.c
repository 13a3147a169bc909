/* hist.c — `ampdump --hist`: the exponent histograms of the checked tensors on FP16's range
 * (schema/profile_hist.h), per tensor name over the run or at one step (--step).  Without
 * --tensor, one row per tensor: its values per zone (zero, subnormal, normal, overflow), the
 * lowest and highest normal binade used and the shape of the histogram in one column; with
 * --tensor, that tensor's bins one per row, each with its range, zone, count and a bar.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dump.h"
#include "profile_db.h"
#include "profile_hist.h"

static const amp_column sum_cols[] = {
    {"tensor", AMP_COL_TEXT},  {"dtype", AMP_COL_TEXT},   {"rows", AMP_COL_INT},
    {"values", AMP_COL_INT},   {"zero", AMP_COL_INT},     {"subnormal", AMP_COL_INT},
    {"normal", AMP_COL_INT},   {"overflow", AMP_COL_INT}, {"lowest", AMP_COL_TEXT},
    {"highest", AMP_COL_TEXT}, {"shape", AMP_COL_TEXT},
};
#define SUM_NCOLS ((int)(sizeof sum_cols / sizeof sum_cols[0]))

static const amp_column bin_cols[] = {
    {"bin", AMP_COL_INT},   {"range", AMP_COL_TEXT}, {"zone", AMP_COL_TEXT},
    {"count", AMP_COL_INT}, {"share", AMP_COL_REAL}, {"bar", AMP_COL_TEXT},
};
#define BIN_NCOLS ((int)(sizeof bin_cols / sizeof bin_cols[0]))

#define BAR_MAX 40

/* The histogram in one line: a character per bin, '_' empty, then . : - = + * # by the
 * share of the tallest bin, with '|' between the zones: zero|subnormal|normal...|overflow. */
static void shape_of(const amp_hist_tensor *t, char *buf, size_t len)
{
	static const char ramp[] = ".:-=+*#";
	uint64_t top = 0;
	size_t k = 0;
	for (int b = 0; b < AMP_HIST_BINS; b++)
		top = t->bins[b] > top ? t->bins[b] : top;
	for (int b = 0; b < AMP_HIST_BINS && k + 3 < len; b++) {
		if (b == 1 || b == 2 || b == AMP_HIST_BINS - 1)
			buf[k++] = '|';
		if (!t->bins[b])
			buf[k++] = '_';
		else
			buf[k++] = ramp[(size_t)((double)t->bins[b] / (double)top * 6.999)];
	}
	buf[k] = '\0';
}

static void binade(const amp_hist_tensor *t, int highest, char *buf, size_t len)
{
	buf[0] = '\0';
	for (int i = 2; i < AMP_HIST_BINS - 1; i++) {
		int b = highest ? AMP_HIST_BINS - 1 - i + 1 : i;
		if (t->bins[b]) {
			snprintf(buf, len, "2^%d", amp_hist_bin_exp(b));
			return;
		}
	}
}

/* The steps whose tensor statistics carry a histogram, as "0, 10, 20" (the first few, then
 * "..."), into buf; returns how many there are (0 when none, or on an error). */
static long hist_steps(sqlite3 *db, char *buf, size_t len)
{
	sqlite3_stmt *st = NULL;
	long n = 0;
	size_t at = 0;
	buf[0] = '\0';
	if (sqlite3_prepare_v2(db, "SELECT DISTINCT step FROM tensor_stats WHERE exp_hist IS NOT NULL "
	                           "ORDER BY step", -1, &st, NULL) != SQLITE_OK) {
		sqlite3_finalize(st);
		return 0;
	}
	while (sqlite3_step(st) == SQLITE_ROW) {
		if (n < 8 && at < len)
			at += (size_t)snprintf(buf + at, len - at, "%s%lld", n ? ", " : "",
			                       (long long)sqlite3_column_int64(st, 0));
		else if (n == 8 && at < len)
			at += (size_t)snprintf(buf + at, len - at, ", ...");
		n++;
	}
	sqlite3_finalize(st);
	return n;
}

int dump_cmd_hist(const char *db_path, int64_t step, const char *tensor, amp_format fmt, FILE *out)
{
	amp_hist_tensor *h = NULL;
	amp_table *t = NULL;
	int code = DUMP_EXIT_FAIL;
	char err[512], a[64], b[64], shape[64], steps[200];
	sqlite3 *db = step >= 0 ? dump_open_step(db_path, step) : dump_open_profile(db_path);
	if (!db)
		return DUMP_EXIT_FAIL;
	long n = amp_hist_read(db, step, tensor, &h, err, sizeof err);
	if (n < 0) {
		dump_error(NULL, "cannot read '%s': %s", db_path, err);
		goto out;
	}
	if (n == 0) {
		if (tensor)
			dump_error("'ampdump --hist' lists the tensors with a histogram",
			           "no tensor named '%s' has a histogram in '%s'%s", tensor,
			           db_path, step >= 0 ? " at that step" : "");
		else if (step >= 0 && hist_steps(db, steps, sizeof steps) > 0)
			dump_error("'ampdump --hist' without --step adds up the whole run",
			           "no exponent histogram at step %lld in '%s' (steps with one: %s)",
			           (long long)step, db_path, steps);
		else
			dump_error("profile with statistics on (ampprof --stats-every)",
			           "'%s' holds no exponent histogram", db_path);
		goto out;
	}
	t = tensor ? amp_table_new(bin_cols, BIN_NCOLS) : amp_table_new(sum_cols, SUM_NCOLS);
	if (!t) {
		dump_error(NULL, "out of memory");
		goto out;
	}
	int e = 0;
	if (tensor) {
		uint64_t top = 0;
		for (int k = 0; k < AMP_HIST_BINS; k++)
			top = h[0].bins[k] > top ? h[0].bins[k] : top;
		for (int k = 0; k < AMP_HIST_BINS && !e; k++) {
			char bar[BAR_MAX + 1];
			int w = top ? (int)ceil((double)h[0].bins[k] / (double)top * BAR_MAX) : 0;
			memset(bar, '#', (size_t)w);
			bar[w] = '\0';
			amp_hist_bin_range(k, a, sizeof a);
			e |= amp_table_add_row(t);
			e |= amp_table_set_int(t, 0, k);
			e |= amp_table_set_text(t, 1, a);
			e |= amp_table_set_text(t, 2, amp_hist_zone_name(amp_hist_zone_of(k)));
			e |= amp_table_set_int(t, 3, (int64_t)h[0].bins[k]);
			snprintf(b, sizeof b, "%.4f",
			         h[0].count ? (double)h[0].bins[k] / (double)h[0].count : 0.0);
			e |= amp_table_set_text(t, 4, b);
			e |= amp_table_set_text(t, 5, bar);
		}
	} else {
		for (long i = 0; i < n && !e; i++) {
			e |= amp_table_add_row(t);
			e |= amp_table_set_text(t, 0, h[i].name);
			e |= amp_table_set_text(t, 1, h[i].dtype);
			e |= amp_table_set_int(t, 2, h[i].rows);
			e |= amp_table_set_int(t, 3, (int64_t)h[i].count);
			for (int z = 0; z < 4; z++)
				e |= amp_table_set_int(t, 4 + z, h[i].zone[z]);
			binade(&h[i], 0, a, sizeof a);
			binade(&h[i], 1, b, sizeof b);
			e |= amp_table_set_text(t, 8, a[0] ? a : NULL);
			e |= amp_table_set_text(t, 9, b[0] ? b : NULL);
			shape_of(&h[i], shape, sizeof shape);
			e |= amp_table_set_text(t, 10, shape);
		}
	}
	if (e) {
		dump_error(NULL, "out of memory");
		goto out;
	}
	if (fmt == AMP_FMT_TEXT) {
		char where[48] = "the whole run";
		if (step >= 0)
			snprintf(where, sizeof where, "step %lld", (long long)step);
		if (tensor)
			fprintf(out,
			        "%s, %s: %s (%s), %llu values in %lld rows; FP16 zones: zero, "
			        "subnormal below 2^-14, normal 2^-14..65504, overflow\n",
			        db_path, where, h[0].name, h[0].dtype,
			        (unsigned long long)h[0].count, (long long)h[0].rows);
		else
			fprintf(
			    out,
			    "%s, %s: exponent histograms of %ld tensors on FP16's range; shape: "
			    "zero|subnormal|2^-14 .. 2^15|overflow\n",
			    db_path, where, n);
	}
	if (amp_table_print(t, fmt, out) != 0) {
		dump_error(NULL, "cannot write the output");
		goto out;
	}
	code = DUMP_EXIT_OK;
out:
	amp_table_free(t);
	free(h);
	amp_profile_close(db);
	return code;
}

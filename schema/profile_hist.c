/* profile_hist.c — exponent histograms on FP16's range (see profile_hist.h). */
#include "profile_hist.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

amp_hist_zone amp_hist_zone_of(int bin)
{
	if (bin <= 0)
		return AMP_HIST_ZERO;
	if (bin == 1)
		return AMP_HIST_SUBNORMAL;
	if (bin >= AMP_HIST_BINS - 1)
		return AMP_HIST_OVERFLOW;
	return AMP_HIST_NORMAL;
}

const char *amp_hist_zone_name(amp_hist_zone z)
{
	switch (z) {
	case AMP_HIST_ZERO: return "zero";
	case AMP_HIST_SUBNORMAL: return "subnormal";
	case AMP_HIST_NORMAL: return "normal";
	case AMP_HIST_OVERFLOW: return "overflow";
	}
	return "?";
}

int amp_hist_bin_exp(int bin)
{
	return bin - 16;
}

void amp_hist_bin_range(int bin, char *buf, size_t len)
{
	switch (amp_hist_zone_of(bin)) {
	case AMP_HIST_ZERO: snprintf(buf, len, "0"); break;
	case AMP_HIST_SUBNORMAL: snprintf(buf, len, "(0, 2^-14)"); break;
	case AMP_HIST_OVERFLOW: snprintf(buf, len, ">= 2^16, inf, nan"); break;
	case AMP_HIST_NORMAL:
		snprintf(buf, len, "[2^%d, 2^%d)", amp_hist_bin_exp(bin),
		         amp_hist_bin_exp(bin) + 1);
		break;
	}
}

static void add_dtype(amp_hist_tensor *t, const char *dtype)
{
	if (!dtype || !*dtype)
		return;
	/* the dtypes seen, comma-separated, each once */
	for (const char *p = t->dtype; *p;) {
		size_t n = strcspn(p, ",");
		if (n == strlen(dtype) && strncmp(p, dtype, n) == 0)
			return;
		p += n + (p[n] == ',');
	}
	size_t used = strlen(t->dtype);
	snprintf(t->dtype + used, sizeof t->dtype - used, "%s%s", used ? "," : "", dtype);
}

long amp_hist_read(sqlite3 *db, int64_t step, const char *name, amp_hist_tensor **out, char *err,
                   size_t errlen)
{
	sqlite3_stmt *st = NULL;
	amp_hist_tensor *v = NULL;
	long n = 0, cap = 0;
	int rc;
	*out = NULL;
	if (sqlite3_prepare_v2(db,
	                       "SELECT coalesce(name, '-'), dtype, exp_hist FROM tensor_stats "
	                       "WHERE (?1 < 0 OR step = ?1) AND (?2 IS NULL OR name = ?2) "
	                       "AND exp_hist IS NOT NULL ORDER BY 1, dtype",
	                       -1, &st, NULL) != SQLITE_OK)
		goto fail;
	sqlite3_bind_int64(st, 1, step);
	if (name)
		sqlite3_bind_text(st, 2, name, -1, SQLITE_TRANSIENT);
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		const char *nm = (const char *)sqlite3_column_text(st, 0);
		if (n == 0 || strcmp(v[n - 1].name, nm ? nm : "") != 0) {
			if (n == cap) {
				long c = cap ? cap * 2 : 32;
				amp_hist_tensor *w = realloc(v, (size_t)c * sizeof *w);
				if (!w) {
					snprintf(err, errlen, "out of memory");
					goto out_fail;
				}
				v = w, cap = c;
			}
			memset(&v[n], 0, sizeof v[n]);
			snprintf(v[n].name, sizeof v[n].name, "%s", nm ? nm : "");
			n++;
		}
		amp_hist_tensor *t = &v[n - 1];
		add_dtype(t, (const char *)sqlite3_column_text(st, 1));
		const unsigned char *blob = sqlite3_column_blob(st, 2);
		int bytes = sqlite3_column_bytes(st, 2);
		t->rows++;
		for (int b = 0; b < AMP_HIST_BINS && (b + 1) * 4 <= bytes; b++) {
			uint32_t c = (uint32_t)blob[4 * b] | (uint32_t)blob[4 * b + 1] << 8 |
			             (uint32_t)blob[4 * b + 2] << 16 |
			             (uint32_t)blob[4 * b + 3] << 24;
			t->bins[b] += c;
			t->count += c;
			t->zone[amp_hist_zone_of(b)] += c;
		}
	}
	if (rc != SQLITE_DONE)
		goto fail;
	sqlite3_finalize(st);
	*out = v;
	return n;
fail:
	snprintf(err, errlen, "%s", sqlite3_errmsg(db));
out_fail:
	sqlite3_finalize(st);
	free(v);
	return -1;
}

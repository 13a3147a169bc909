/* model_ext.c — the readers of the memory panel, the exponent panel, the steps filter, the loss
 * beside the loss scale and the run's warnings (see model.h).  Each is one query through the
 * model's connection; what they return is owned by the caller.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "model.h"
#include "profile_db.h"

const char *view_mem_cat_name(int i)
{
	static const char *const names[VIEW_MEM_CATS] = {"master", "working", "activations",
	                                                 "grads", "optimizer"};
	return i >= 0 && i < VIEW_MEM_CATS ? names[i] : "?";
}

/* The step filter as a LIKE pattern: "%text%" with LIKE's wildcards escaped by '\'. */
static void like_pattern(const char *filter, char *buf, size_t len)
{
	size_t k = 0;
	if (len < 4) {
		buf[0] = '\0';
		return;
	}
	buf[k++] = '%';
	for (const char *p = filter ? filter : ""; *p && k + 3 < len; p++) {
		if (*p == '%' || *p == '_' || *p == '\\')
			buf[k++] = '\\';
		buf[k++] = *p;
	}
	buf[k++] = '%';
	buf[k] = '\0';
}

/* into sql: before, a step's memory (amp_profile_memory_steps: step, the five categories,
 * total, peak) of the steps whose number matches ?1 (a LIKE pattern), after. */
static const char *mem_query(view_model *m, const char *before, const char *after, char *sql,
                             size_t len)
{
	return amp_profile_memory_steps(view_model_db(m), before,
	                                "CAST(step AS TEXT) LIKE ?1 ESCAPE '\\'", after, sql, len);
}

static int prepare(view_model *m, const char *sql, sqlite3_stmt **st)
{
	*st = NULL;
	if (sql && sqlite3_prepare_v2(view_model_db(m), sql, -1, st, NULL) == SQLITE_OK)
		return 0;
	sqlite3_finalize(*st);
	*st = NULL;
	return VIEW_EDB;
}

static void mem_row(sqlite3_stmt *st, view_mem_row *r)
{
	r->step = sqlite3_column_int64(st, 0);
	for (int c = 0; c < VIEW_MEM_CATS; c++)
		r->cat[c] = sqlite3_column_int64(st, 1 + c);
	r->total = sqlite3_column_int64(st, 6);
	r->peak = sqlite3_column_int64(st, 7);
	if (r->total == 0)
		for (int c = 0; c < VIEW_MEM_CATS; c++)
			r->total += r->cat[c];
}

int64_t view_model_memory_count(view_model *m, const char *filter)
{
	char pat[160], sql[2048];
	sqlite3_stmt *st = NULL;
	int64_t n = 0;
	like_pattern(filter, pat, sizeof pat);
	if (prepare(m, mem_query(m, "SELECT count(*) FROM (", ")", sql, sizeof sql), &st))
		return VIEW_EDB;
	sqlite3_bind_text(st, 1, pat, -1, SQLITE_TRANSIENT);
	if (sqlite3_step(st) == SQLITE_ROW)
		n = sqlite3_column_int64(st, 0);
	sqlite3_finalize(st);
	return n;
}

long view_model_memory(view_model *m, const char *filter, int64_t offset, view_mem_row *rows,
                       long max)
{
	char pat[160], sql[2048];
	sqlite3_stmt *st = NULL;
	long n = 0;
	like_pattern(filter, pat, sizeof pat);
	if (prepare(m, mem_query(m, "", " ORDER BY step LIMIT ?2 OFFSET ?3", sql, sizeof sql), &st))
		return VIEW_EDB;
	sqlite3_bind_text(st, 1, pat, -1, SQLITE_TRANSIENT);
	sqlite3_bind_int64(st, 2, max);
	sqlite3_bind_int64(st, 3, offset);
	while (n < max && sqlite3_step(st) == SQLITE_ROW)
		mem_row(st, &rows[n++]);
	sqlite3_finalize(st);
	return n;
}

int view_model_memory_peak(view_model *m, view_mem_row *row)
{
	sqlite3_stmt *st = NULL;
	char sql[2048];
	int rc = 1;
	if (prepare(m, mem_query(m, "", " ORDER BY 8 DESC, 7 DESC, step LIMIT 1", sql, sizeof sql),
	            &st))
		return VIEW_EDB;
	sqlite3_bind_text(st, 1, "%", -1, SQLITE_STATIC);
	if (sqlite3_step(st) == SQLITE_ROW) {
		mem_row(st, row);
		rc = 0;
	}
	sqlite3_finalize(st);
	return rc;
}

long view_model_hist(view_model *m, int64_t step, amp_hist_tensor **rows)
{
	char err[256];
	long n = amp_hist_read(view_model_db(m), step, NULL, rows, err, sizeof err);
	return n < 0 ? VIEW_EDB : n;
}

long view_model_steps_matching(view_model *m, const char *filter, int64_t **steps)
{
	char pat[160];
	sqlite3_stmt *st = NULL;
	long n = 0, cap = 0;
	int64_t *v = NULL;
	*steps = NULL;
	like_pattern(filter, pat, sizeof pat);
	if (prepare(m,
	            "SELECT step FROM steps WHERE CAST(step AS TEXT) LIKE ?1 ESCAPE '\\' "
	            "OR (overflow = 1 AND 'overflow' LIKE ?1 ESCAPE '\\') "
	            "OR (skipped = 1 AND 'skipped' LIKE ?1 ESCAPE '\\') "
	            "OR (dur_ns IS NULL AND 'unended' LIKE ?1 ESCAPE '\\') ORDER BY step",
	            &st))
		return VIEW_EDB;
	sqlite3_bind_text(st, 1, pat, -1, SQLITE_TRANSIENT);
	while (sqlite3_step(st) == SQLITE_ROW) {
		if (n == cap) {
			long c = cap ? cap * 2 : 256;
			int64_t *w = realloc(v, (size_t)c * sizeof *w);
			if (!w) {
				free(v);
				sqlite3_finalize(st);
				return VIEW_ENOMEM;
			}
			v = w, cap = c;
		}
		v[n++] = sqlite3_column_int64(st, 0);
	}
	sqlite3_finalize(st);
	*steps = v;
	return n;
}

long view_model_loss_buckets(view_model *m, const view_scale_bucket *b, long n,
                             view_loss_bucket *out)
{
	sqlite3_stmt *st = NULL;
	for (long i = 0; i < n; i++)
		out[i] = (view_loss_bucket){.lo = NAN, .hi = NAN};
	if (n <= 0)
		return 0;
	int states = amp_profile_has_column(view_model_db(m), "steps", "loss_state");
	if (prepare(m,
	            states
	                ? "SELECT step, loss, loss_state FROM steps WHERE loss IS NOT NULL OR"
	                  " loss_state IN ('nan', 'inf', '-inf') ORDER BY step"
	                : "SELECT step, loss, NULL FROM steps WHERE loss IS NOT NULL ORDER BY step",
	            &st))
		return VIEW_EDB;
	long i = 0;
	while (sqlite3_step(st) == SQLITE_ROW) {
		int64_t step = sqlite3_column_int64(st, 0);
		const char *state = (const char *)sqlite3_column_text(st, 2);
		while (i < n && step > b[i].last)
			i++;
		if (i == n)
			break;
		if (step < b[i].first)
			continue;
		view_loss_bucket *k = &out[i];
		if (state && strcmp(state, "finite") != 0) {
			if (k->nonfinite++ == 0) {
				k->first_nonfinite = step;
				snprintf(k->first_state, sizeof k->first_state, "%s", state);
			}
			continue;
		}
		double loss = sqlite3_column_double(st, 1);
		if (sqlite3_column_type(st, 1) == SQLITE_NULL || !isfinite(loss))
			continue;
		if (isnan(k->lo) || loss < k->lo)
			k->lo = loss;
		if (isnan(k->hi) || loss > k->hi)
			k->hi = loss;
	}
	sqlite3_finalize(st);
	return n;
}

const char *view_model_callsite_warning(view_model *m)
{
	return amp_profile_callsites_static(view_model_db(m));
}

int view_model_ended_since_open(view_model *m, const view_run *r)
{
	char end[32] = "";
	if (strcmp(r->end, "collecting") != 0 || r->complete)
		return 0;
	return amp_profile_meta_get(view_model_db(m), "end", end, sizeof end) == AMP_PROFILE_OK &&
	       strcmp(end, "collecting") != 0;
}

int view_model_being_written(view_model *m)
{
	char end[32] = "";
	if (amp_profile_meta_get(view_model_db(m), "end", end, sizeof end) != AMP_PROFILE_OK ||
	    strcmp(end, "collecting") != 0)
		return 0;
	/* the collector (ampprof, or ampdump re-running a step) holds the profile's output lock
	 * while it records; a killed one holds nothing, whatever became of its pid */
	return amp_profile_live(view_model_run(m)->path) == 1;
}

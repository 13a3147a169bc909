/* profile_diff.c — two profiles' timings side by side (see profile_diff.h). */
#include "profile_diff.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "profile_db.h"

const char *amp_diff_kind_name(amp_diff_kind k)
{
	switch (k) {
	case AMP_DIFF_OP: return "op";
	case AMP_DIFF_LAYER: return "layer";
	case AMP_DIFF_PHASE: return "phase";
	case AMP_DIFF_KINDS: break;
	}
	return "?";
}

/* One side's figure for a key, before pairing. */
typedef struct entry {
	amp_diff_kind kind;
	char name[128];
	char dtype[24];
	int64_t calls, ns;
} entry;

typedef struct side {
	entry *e;
	size_t n, cap;
} side;

static int push(side *s, amp_diff_kind kind, const char *name, const char *dtype, int64_t calls,
                int64_t ns)
{
	if (s->n == s->cap) {
		size_t cap = s->cap ? s->cap * 2 : 64;
		entry *e = realloc(s->e, cap * sizeof *e);
		if (!e)
			return -1;
		s->e = e, s->cap = cap;
	}
	entry *x = &s->e[s->n++];
	x->kind = kind;
	snprintf(x->name, sizeof x->name, "%s", name ? name : "");
	snprintf(x->dtype, sizeof x->dtype, "%s", dtype ? dtype : "");
	x->calls = calls;
	x->ns = ns;
	return 0;
}

/* Runs sql (columns: name, dtypes, calls, ns) and adds a row of kind per result row; prefix
 * (or NULL) goes before each name. */
static int collect(sqlite3 *db, const char *sql, amp_diff_kind kind, const char *prefix, side *s,
                   char *err, size_t errlen)
{
	sqlite3_stmt *st = NULL;
	int rc = -1, step;
	if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
		goto out;
	while ((step = sqlite3_step(st)) == SQLITE_ROW) {
		const char *name = (const char *)sqlite3_column_text(st, 0);
		char full[128];
		snprintf(full, sizeof full, "%s%s", prefix ? prefix : "", name ? name : "-");
		if (push(s, kind, full, (const char *)sqlite3_column_text(st, 1),
		         sqlite3_column_int64(st, 2), sqlite3_column_int64(st, 3)) < 0) {
			snprintf(err, errlen, "out of memory");
			sqlite3_finalize(st);
			return -1;
		}
	}
	rc = step == SQLITE_DONE ? 0 : -1;
out:
	if (rc < 0 && !(err[0]))
		snprintf(err, errlen, "%s", sqlite3_errmsg(db));
	sqlite3_finalize(st);
	return rc;
}

/* A traced step that did not end (a killed run's last one, on some rank) leaves its events
 * out: the rows are per step that ended, as the header's time per step.  The events'
 * filter then, "" without such a step. */
#define ENDED_STEPS_ONLY                                                                           \
	" JOIN main.steps st ON st.step = e.step AND st.rank IS e.rank AND st.detail = 1 AND"      \
	" st.dur_ns IS NOT NULL"
static int has_unended(sqlite3 *db)
{
	int64_t n = 0;
	if (!amp_profile_has_column(db, "op_events", "rank"))
		return 0;
	amp_profile_query_int64(
	    db, &n, "SELECT count(*) FROM main.steps WHERE detail = 1 AND dur_ns IS NULL", NULL);
	return n > 0;
}

/* The op signatures with their calls and time: stored by finalize, or counted from the
 * events of a profile that was not finalized or has a traced step that did not end. */
static const char *op_source(sqlite3 *db)
{
	int64_t unset = 1;
	amp_profile_query_int64(db, &unset, "SELECT count(*) FROM op_sigs WHERE calls IS NULL",
	                        NULL);
	if (has_unended(db))
		return "SELECT s.op, s.label, s.phase, s.exec_dtype, count(*) AS n, sum(e.dur_ns) "
		       "AS t "
		       "FROM op_events e JOIN op_sigs s ON s.id = e.sig" ENDED_STEPS_ONLY
		       " GROUP BY e.sig";
	return unset == 0 ? "SELECT op, label, phase, exec_dtype, calls AS n, total_ns AS t "
	                    "FROM op_sigs WHERE calls > 0"
	                  : "SELECT s.op, s.label, s.phase, s.exec_dtype, count(*) AS n, "
	                    "sum(e.dur_ns) AS t FROM op_events e JOIN op_sigs s ON s.id = e.sig "
	                    "GROUP BY e.sig";
}

static const char *copy_source(sqlite3 *db)
{
	int64_t unset = 1;
	amp_profile_query_int64(db, &unset, "SELECT count(*) FROM copy_sigs WHERE calls IS NULL",
	                        NULL);
	if (has_unended(db))
		return "SELECT s.kind, count(*) AS n, sum(e.dur_ns) AS t FROM copy_events e JOIN "
		       "copy_sigs s ON s.id = e.sig" ENDED_STEPS_ONLY " GROUP BY e.sig";
	return unset == 0 ? "SELECT kind, calls AS n, total_ns AS t FROM copy_sigs WHERE calls > 0"
	                  : "SELECT s.kind, count(*) AS n, sum(e.dur_ns) AS t FROM copy_events e "
	                    "JOIN copy_sigs s ON s.id = e.sig GROUP BY e.sig";
}

/* A data-parallel run's gradient all-reduces (the buckets: not the averaging of parameters
 * without gradients, bucket NULL, FP32 whatever the setting) in the traced steps of each rank,
 * or in all its steps when none was traced (the totals the other rows give then): their time
 * ('comm', with the payload dtypes) and the part of it the rank blocked waiting ('comm wait').
 * Nothing for a profile without them (one process, or a version before the comm table).  The
 * tables are main's: ampview shadows `steps` with one rank's rows, where every rank's count. */
static int read_comm(sqlite3 *db, int traced, side *s, char *err, size_t errlen)
{
	if (!amp_profile_has_column(db, "comm", "rank") ||
	    !amp_profile_has_column(db, "steps", "rank"))
		return 0;
	const char *src =
	    traced ? "SELECT c.dtype AS dtype, c.dur_ns AS dur, c.wait_ns AS wait FROM main.comm c "
	             "JOIN main.steps s ON s.step = c.step AND s.rank = c.rank AND s.detail = 1 "
	             "AND s.dur_ns IS NOT NULL WHERE c.kind = 'allreduce' AND c.bucket IS NOT NULL"
	           : "SELECT dtype, dur_ns AS dur, wait_ns AS wait FROM main.comm WHERE kind = "
	             "'allreduce' AND bucket IS NOT NULL";
	char sql[768];
	snprintf(sql, sizeof sql,
	         "WITH src AS (%s), agg AS (SELECT count(*) AS n, coalesce(sum(dur), 0) AS t, "
	         "coalesce(sum(wait), 0) AS w FROM src) SELECT 'comm', (SELECT group_concat(d, "
	         "',') FROM (SELECT DISTINCT dtype AS d FROM src ORDER BY d)), n, t FROM agg WHERE "
	         "n > 0 UNION ALL SELECT 'comm wait', '', n, w FROM agg WHERE n > 0",
	         src);
	return collect(db, sql, AMP_DIFF_PHASE, NULL, s, err, errlen);
}

static int read_side(sqlite3 *db, side *s, int64_t *steps, int64_t *ranks, double *step_ns,
                     char *err, size_t errlen)
{
	char sql[1024];
	const char *ops = op_source(db), *copies = copy_source(db);
	/* key expression, filter, kind */
	static const struct {
		const char *key, *where;
		amp_diff_kind kind;
	} groups[] = {
	    {"op", "1", AMP_DIFF_OP},
	    {"label", "label IS NOT NULL AND label <> ''", AMP_DIFF_LAYER},
	    {"phase", "1", AMP_DIFF_PHASE},
	};
	int64_t n = 0, t = 0;
	int64_t timed = 0, all = 0, all_t = 0;
	amp_profile_query_int64(db, &n, "SELECT count(*) FROM main.steps WHERE detail = 1", NULL);
	amp_profile_query_int64(
	    db, &timed, "SELECT count(*) FROM main.steps WHERE detail = 1 AND dur_ns IS NOT NULL",
	    NULL);
	amp_profile_query_int64(db, &t,
	                        "SELECT coalesce(sum(dur_ns), 0) FROM main.steps WHERE detail = 1 "
	                        "AND dur_ns IS NOT NULL",
	                        NULL);
	/* no traced step: the steps' own totals, as every other row's */
	amp_profile_query_int64(db, &all,
	                        "SELECT count(*) FROM main.steps WHERE dur_ns IS NOT NULL", NULL);
	amp_profile_query_int64(
	    db, &all_t,
	    "SELECT coalesce(sum(dur_ns), 0) FROM main.steps WHERE dur_ns IS NOT "
	    "NULL",
	    NULL);
	/* the traced steps that ended; all of them when none did (then no time per step) */
	*steps = timed > 0 ? timed : n;
	*ranks = 1;
	if (amp_profile_has_column(db, "steps", "rank"))
		amp_profile_query_int64(db, ranks,
		                        "SELECT max(1, count(DISTINCT rank)) FROM main.steps", NULL);
	/* the mean of the steps that ended (a killed run's last one has no duration), as the
	 * report's */
	*step_ns = timed > 0 ? (double)t / (double)timed : 0.0;
	for (size_t g = 0; g < sizeof groups / sizeof groups[0]; g++) {
		snprintf(sql, sizeof sql,
		         "WITH src AS (%s) SELECT %s, (SELECT group_concat(d, ',') FROM (SELECT "
		         "DISTINCT exec_dtype AS d FROM src s2 WHERE s2.%s = src.%s ORDER BY d)), "
		         "sum(n), sum(t) FROM src WHERE %s GROUP BY %s",
		         ops, groups[g].key, groups[g].key, groups[g].key, groups[g].where,
		         groups[g].key);
		if (collect(db, sql, groups[g].kind, NULL, s, err, errlen) < 0)
			return -1;
	}
	/* copies: each kind, then all of them (the kinds they were as the dtype column) */
	snprintf(sql, sizeof sql,
	         "WITH src AS (%s) SELECT kind, '', sum(n), sum(t) FROM src GROUP BY kind", copies);
	if (collect(db, sql, AMP_DIFF_PHASE, "copy ", s, err, errlen) < 0)
		return -1;
	snprintf(
	    sql, sizeof sql,
	    "WITH src AS (%s) SELECT 'copies', (SELECT group_concat(k, ',') FROM (SELECT "
	    "DISTINCT kind AS k FROM src ORDER BY k)), coalesce(sum(n), 0), coalesce(sum(t), 0) "
	    "FROM src",
	    copies);
	if (collect(db, sql, AMP_DIFF_PHASE, NULL, s, err, errlen) < 0)
		return -1;
	if (read_comm(db, n > 0, s, err, errlen) < 0)
		return -1;
	/* the step row: the steps that ended (a killed run's last one has no duration); without a
	 * traced step, the totals of all steps, as the other rows' */
	if (push(s, AMP_DIFF_PHASE, "step", "", n > 0 ? timed : all, n > 0 ? t : all_t) < 0) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	return 0;
}

static int cmp_row(const void *pa, const void *pb)
{
	const amp_diff_row *a = pa, *b = pb;
	if (a->kind != b->kind)
		return a->kind < b->kind ? -1 : 1;
	double x = fabs(a->delta_ns), y = fabs(b->delta_ns);
	if (x != y)
		return x < y ? 1 : -1;
	return strcmp(a->name, b->name);
}

int amp_diff_compute(sqlite3 *a, sqlite3 *b, amp_diff *out, char *err, size_t errlen)
{
	side s[2] = {{0}, {0}};
	sqlite3 *db[2] = {a, b};
	int rc = -1;
	memset(out, 0, sizeof *out);
	if (errlen)
		err[0] = '\0';
	for (int i = 0; i < 2; i++)
		if (read_side(db[i], &s[i], &out->steps[i], &out->ranks[i], &out->step_ns[i], err,
		              errlen) < 0)
			goto out;
	out->rows = calloc(s[0].n + s[1].n + 1, sizeof *out->rows);
	if (!out->rows) {
		snprintf(err, errlen, "out of memory");
		goto out;
	}
	char *paired = calloc(s[1].n + 1, 1);
	if (!paired) {
		snprintf(err, errlen, "out of memory");
		goto out;
	}
	/* every key of A with its match in B, then the keys only B has */
	for (int pass = 0; pass < 2; pass++) {
		const side *from = &s[pass];
		for (size_t i = 0; i < from->n; i++) {
			const entry *e[2] = {NULL, NULL};
			if (pass == 1 && paired[i])
				continue;
			e[pass] = &from->e[i];
			if (pass == 0)
				for (size_t j = 0; j < s[1].n && !e[1]; j++)
					if (!paired[j] && s[1].e[j].kind == e[0]->kind &&
					    strcmp(s[1].e[j].name, e[0]->name) == 0) {
						e[1] = &s[1].e[j];
						paired[j] = 1;
					}
			amp_diff_row *r = &out->rows[out->nrows++];
			r->kind = from->e[i].kind;
			snprintf(r->name, sizeof r->name, "%s", from->e[i].name);
			for (int k = 0; k < 2; k++) {
				if (!e[k])
					continue;
				snprintf(r->dtype[k], sizeof r->dtype[k], "%s", e[k]->dtype);
				r->calls[k] = e[k]->calls;
				/* no traced step: the figures are totals */
				r->ns_per_step[k] = (double)e[k]->ns /
				                    (double)(out->steps[k] > 0 ? out->steps[k] : 1);
			}
			r->delta_ns = r->ns_per_step[1] - r->ns_per_step[0];
			r->ratio = r->ns_per_step[0] > 0   ? r->ns_per_step[1] / r->ns_per_step[0]
			           : r->ns_per_step[1] > 0 ? (double)INFINITY
			                                   : 1.0;
		}
	}
	free(paired);
	qsort(out->rows, out->nrows, sizeof *out->rows, cmp_row);
	rc = 0;
out:
	free(s[0].e);
	free(s[1].e);
	if (rc < 0)
		amp_diff_release(out);
	return rc;
}

void amp_diff_release(amp_diff *d)
{
	if (!d)
		return;
	free(d->rows);
	d->rows = NULL;
	d->nrows = 0;
}

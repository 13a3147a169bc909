/* memsum.c — a rank's tensor memory with its contexts together, for profiles where contexts may
 * not have coexisted (schema/profile.sql, memory_sum).
 *
 * Each context reports its own memory at the end of its steps.  Adding the reports of equal
 * step numbers, as a profile of one context per thread may, is wrong when the contexts did not
 * live at the same time: two trained one after another in a thread, an exec'd image of the
 * process, threads that never overlapped.  So the reports are swept in time order per rank,
 * keeping each context's last report while it is alive: from its first report until it was
 * freed (context_ends), or, when no end was reported (a process that exited or was killed with
 * the context, an exec), until its last report.  A context left alive without stepping and
 * never freed is therefore not counted after its last step.  A context is its run-wide id
 * (memory.context); rows without one (a runtime that predates it) take their thread as their
 * context.  Each report gives one memory_sum row: the alive contexts' categories and peaks
 * added.
 */
#include <stdlib.h>
#include <string.h>

#include "prof.h"
#include "profile_db.h"

#define NCAT 5

/* A context of a rank: its run-wide id, or -2 - thread for a row without one. */
#define CTX_KEY "coalesce(context, -2 - coalesce(thread, -1))"

typedef struct live_ctx {
	int64_t key;
	int64_t cat[NCAT], peak;
	int64_t end; /* the time from which it is gone */
} live_ctx;

typedef struct ctx_end {
	int64_t rank, key, end;
} ctx_end;

static int cmp_end(const void *a, const void *b)
{
	const ctx_end *x = a, *y = b;
	if (x->rank != y->rank)
		return (x->rank > y->rank) - (x->rank < y->rank);
	return (x->key > y->key) - (x->key < y->key);
}

/* *out: every context with the time it is gone (its end, else its last report), sorted by
 * rank and key; *n their count. */
static int context_ends(sqlite3 *db, ctx_end **out, size_t *n)
{
	sqlite3_stmt *st = NULL;
	ctx_end *v = NULL;
	size_t k = 0, cap = 0;
	*out = NULL, *n = 0;
	if (sqlite3_prepare_v2(db,
	                       "SELECT rank, key, max(t_ns) FROM (SELECT rank, " CTX_KEY " AS key,"
	                       " t_ns FROM memory UNION ALL SELECT rank, " CTX_KEY " AS key, t_ns"
	                       " FROM context_ends) GROUP BY rank, key",
	                       -1, &st, NULL) != SQLITE_OK)
		return -1;
	int sc;
	while ((sc = sqlite3_step(st)) == SQLITE_ROW) {
		if (k == cap) {
			size_t want = cap ? 2 * cap : 16;
			ctx_end *p = realloc(v, want * sizeof *p);
			if (!p)
				break;
			v = p, cap = want;
		}
		v[k].rank = sqlite3_column_int64(st, 0);
		v[k].key = sqlite3_column_int64(st, 1);
		v[k++].end = sqlite3_column_int64(st, 2);
	}
	sqlite3_finalize(st);
	if (sc != SQLITE_DONE) {
		free(v);
		return -1;
	}
	if (k)
		qsort(v, k, sizeof *v, cmp_end);
	*out = v, *n = k;
	return 0;
}

static int64_t end_of(const ctx_end *v, size_t n, int64_t rank, int64_t key)
{
	ctx_end q = {rank, key, 0};
	const ctx_end *e = n ? bsearch(&q, v, n, sizeof *v, cmp_end) : NULL;
	return e ? e->end : INT64_MAX;
}

/* a + b, held at the int64 limits: a producer's byte counts are untrusted (a damaged or
 * hostile one sends anything), and SQL's total() of the same rows would not wrap either */
static int64_t add_sat(int64_t a, int64_t b)
{
	int64_t r;
	if (!__builtin_add_overflow(a, b, &r))
		return r;
	return b > 0 ? INT64_MAX : INT64_MIN;
}

int prof_memory_sum(sqlite3 *db)
{
	if (sqlite3_exec(db, "DELETE FROM memory_sum", NULL, NULL, NULL) != SQLITE_OK)
		return -1;
	/* one context per rank: its rows are the sums already */
	int64_t several = 0;
	amp_profile_query_int64(db, &several,
	                        "SELECT EXISTS (SELECT 1 FROM memory GROUP BY rank HAVING"
	                        " count(DISTINCT " CTX_KEY ") > 1)",
	                        NULL);
	if (!several)
		return 0;
	sqlite3_stmt *rd = NULL, *wr = NULL;
	live_ctx *live = NULL;
	ctx_end *ends = NULL;
	size_t n = 0, cap = 0, nends = 0;
	int rc = -1;
	if (context_ends(db, &ends, &nends) != 0 ||
	    sqlite3_prepare_v2(db,
	                       "SELECT rank, " CTX_KEY ", step, t_ns, master_weights, working_copies,"
	                       " activations, grads, optimizer_state, peak FROM memory"
	                       " ORDER BY rank, t_ns, rowid",
	                       -1, &rd, NULL) != SQLITE_OK ||
	    sqlite3_prepare_v2(db,
	                       "INSERT INTO memory_sum(step, t_ns, master_weights, working_copies,"
	                       " activations, grads, optimizer_state, total, peak, rank) VALUES"
	                       " (?,?,?,?,?,?,?,?,?,?)",
	                       -1, &wr, NULL) != SQLITE_OK)
		goto out;
	int64_t rank = 0;
	int sc;
	while ((sc = sqlite3_step(rd)) == SQLITE_ROW) {
		int64_t r = sqlite3_column_int64(rd, 0), key = sqlite3_column_int64(rd, 1);
		int64_t t = sqlite3_column_int64(rd, 3);
		if (n && r != rank)
			n = 0; /* each rank's memory is its own */
		rank = r;
		/* contexts gone by now, and this one's earlier report */
		size_t k = 0;
		for (size_t i = 0; i < n; i++)
			if (live[i].end >= t && live[i].key != key)
				live[k++] = live[i];
		n = k;
		if (n == cap) {
			size_t want = cap ? 2 * cap : 16;
			live_ctx *p = realloc(live, want * sizeof *p);
			if (!p)
				goto out;
			live = p, cap = want;
		}
		live_ctx *c = &live[n++];
		c->key = key;
		for (int i = 0; i < NCAT; i++)
			c->cat[i] = sqlite3_column_int64(rd, 4 + i);
		c->peak = sqlite3_column_int64(rd, 9);
		c->end = end_of(ends, nends, rank, key);
		int64_t sum[NCAT] = {0}, total = 0, peak = 0;
		for (size_t i = 0; i < n; i++) {
			for (int j = 0; j < NCAT; j++) {
				sum[j] = add_sat(sum[j], live[i].cat[j]);
				total = add_sat(total, live[i].cat[j]);
			}
			peak = add_sat(peak, live[i].peak);
		}
		sqlite3_bind_int64(wr, 1, sqlite3_column_int64(rd, 2));
		sqlite3_bind_int64(wr, 2, t);
		for (int j = 0; j < NCAT; j++)
			sqlite3_bind_int64(wr, 3 + j, sum[j]);
		sqlite3_bind_int64(wr, 8, total);
		sqlite3_bind_int64(wr, 9, peak);
		sqlite3_bind_int64(wr, 10, rank);
		if (sqlite3_step(wr) != SQLITE_DONE)
			goto out;
		sqlite3_reset(wr);
	}
	rc = sc == SQLITE_DONE ? 0 : -1;
out:
	free(live);
	free(ends);
	sqlite3_finalize(rd);
	sqlite3_finalize(wr);
	return rc;
}

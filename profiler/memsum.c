/* memsum.c — a rank's tensor memory with its contexts together, for profiles where contexts may
 * not have coexisted (schema/profile.sql, memory_sum).
 *
 * Each context reports its own memory at the end of its steps.  Adding the reports of equal
 * step numbers, as a profile of one context per thread may, is wrong when the contexts did not
 * live at the same time: two trained one after another in a thread, an exec'd image of the
 * process, threads that never overlapped.  So the reports are swept in time order per rank,
 * keeping each context's last report while it is alive: from its first report until it is
 * freed (context_ends), or until the first report of a later image of its process
 * thread (same pid and tid: the thread of the earlier image is gone, as after an exec).  Each
 * report gives one memory_sum row: the alive contexts' categories and peaks added.
 */
#include <stdlib.h>
#include <string.h>

#include "prof.h"
#include "profile_db.h"

#define NCAT 5

typedef struct live_ctx {
	int64_t thread, context;
	int64_t cat[NCAT], peak;
	int64_t gone_at; /* a later image of its thread reported then: INT64_MAX if none */
} live_ctx;

/* Each thread's time from which its contexts are gone: the first report of a later thread of
 * the same rank, pid and tid (INT64_MAX if none). */
typedef struct thread_end {
	int64_t thread, gone_at;
} thread_end;

static int cmp_thread(const void *a, const void *b)
{
	int64_t x = ((const thread_end *)a)->thread, y = ((const thread_end *)b)->thread;
	return (x > y) - (x < y);
}

/* *out: the threads that report memory with their ends, sorted by thread; *n their count. */
static int thread_ends(sqlite3 *db, thread_end **out, size_t *n)
{
	sqlite3_stmt *st = NULL;
	thread_end *v = NULL;
	size_t k = 0, cap = 0;
	*out = NULL, *n = 0;
	if (sqlite3_prepare_v2(db,
	                       "WITH f AS (SELECT thread, min(t_ns) AS first FROM memory WHERE thread"
	                       " IS NOT NULL GROUP BY thread) SELECT f.thread, (SELECT min(f2.first)"
	                       " FROM f f2 JOIN threads t2 ON t2.id = f2.thread WHERE t2.pid = t.pid"
	                       " AND t2.tid = t.tid AND t2.rank IS t.rank AND f2.first > f.first)"
	                       " FROM f LEFT JOIN threads t ON t.id = f.thread",
	                       -1, &st, NULL) != SQLITE_OK)
		return -1;
	int sc;
	while ((sc = sqlite3_step(st)) == SQLITE_ROW) {
		if (k == cap) {
			size_t want = cap ? 2 * cap : 16;
			thread_end *p = realloc(v, want * sizeof *p);
			if (!p)
				break;
			v = p, cap = want;
		}
		v[k].thread = sqlite3_column_int64(st, 0);
		v[k++].gone_at = sqlite3_column_type(st, 1) == SQLITE_NULL ? INT64_MAX
		                                                             : sqlite3_column_int64(st, 1);
	}
	sqlite3_finalize(st);
	if (sc != SQLITE_DONE) {
		free(v);
		return -1;
	}
	if (k)
		qsort(v, k, sizeof *v, cmp_thread);
	*out = v, *n = k;
	return 0;
}

static int64_t gone_at(const thread_end *v, size_t n, int64_t thread)
{
	thread_end key = {thread, 0};
	const thread_end *e = n ? bsearch(&key, v, n, sizeof *v, cmp_thread) : NULL;
	return e ? e->gone_at : INT64_MAX;
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
	                        " count(DISTINCT coalesce(thread, -1) || '.' || coalesce(context,"
	                        " 0)) > 1)",
	                        NULL);
	if (!several)
		return 0;
	sqlite3_stmt *rd = NULL, *wr = NULL;
	live_ctx *live = NULL;
	thread_end *ends = NULL;
	size_t n = 0, cap = 0, nends = 0;
	int rc = -1;
	if (thread_ends(db, &ends, &nends) != 0 ||
	    sqlite3_prepare_v2(db,
	                       "SELECT rank, coalesce(thread, -1), coalesce(context, 0), step, t_ns,"
	                       " master_weights, working_copies, activations, grads,"
	                       " optimizer_state, peak, 0 AS ended FROM memory UNION ALL SELECT rank,"
	                       " coalesce(thread, -1), coalesce(context, 0), step, t_ns, 0, 0, 0, 0,"
	                       " 0, 0, 1 FROM context_ends ORDER BY 1, 5, 12",
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
		int64_t r = sqlite3_column_int64(rd, 0), thread = sqlite3_column_int64(rd, 1);
		int64_t context = sqlite3_column_int64(rd, 2), t = sqlite3_column_int64(rd, 4);
		if (n && r != rank)
			n = 0; /* each rank's memory is its own */
		rank = r;
		/* contexts gone by now, and this one's earlier report */
		size_t k = 0;
		for (size_t i = 0; i < n; i++)
			if (live[i].gone_at > t && !(live[i].thread == thread && live[i].context == context))
				live[k++] = live[i];
		n = k;
		if (sqlite3_column_int(rd, 11) == 1)
			continue; /* freed: no report of its own */
		if (n == cap) {
			size_t want = cap ? 2 * cap : 16;
			live_ctx *p = realloc(live, want * sizeof *p);
			if (!p)
				goto out;
			live = p, cap = want;
		}
		live_ctx *c = &live[n++];
		c->thread = thread, c->context = context;
		for (int i = 0; i < NCAT; i++)
			c->cat[i] = sqlite3_column_int64(rd, 5 + i);
		c->peak = sqlite3_column_int64(rd, 10);
		c->gone_at = gone_at(ends, nends, thread);
		int64_t sum[NCAT] = {0}, total = 0, peak = 0;
		for (size_t i = 0; i < n; i++) {
			for (int j = 0; j < NCAT; j++) {
				sum[j] = add_sat(sum[j], live[i].cat[j]);
				total = add_sat(total, live[i].cat[j]);
			}
			peak = add_sat(peak, live[i].peak);
		}
		sqlite3_bind_int64(wr, 1, sqlite3_column_int64(rd, 3));
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

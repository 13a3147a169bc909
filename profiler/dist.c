/* dist.c — ampprof's side of data-parallel runs: the per-rank summary (rank_summary), the
 * communication share and the rank spread of run_summary, the communication advice rules, and
 * the report's "data parallel" section.
 *
 * Definitions (docs/ARCHITECTURE.md §5):
 *   communication share = all-reduce time the ranks spent blocked (comm.wait_ns: what was not
 *                         hidden behind backward) / step time, over all ranks;
 *   busy time of a rank = its step time minus that wait: what it computed.  A rank that waits
 *                         for a slower one has a long step but a short busy time, so the spread
 *                         and the straggler rule compare busy time per step.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "amp_text.h"
#include "prof.h"
#include "profile_db.h"

/* The least lateness a straggler has: 0.1 ms of busy time a step. */
#define STRAGGLER_MIN_NS 1e5

static const char *const rank_summary_sql =
    "DELETE FROM rank_summary;"
    "WITH r AS (SELECT rank FROM steps UNION SELECT rank FROM comm UNION SELECT rank FROM threads"
    /* a profile whose rows name no rank is rank 0's (a killed ampprof leaves no threads
     * rows, but its steps still say whose they are) */
    "  UNION SELECT 0 WHERE NOT EXISTS (SELECT 1 FROM threads) AND NOT EXISTS (SELECT 1 FROM"
    "  steps) AND NOT EXISTS (SELECT 1 FROM comm)),"
    " s AS (SELECT rank, count(dur_ns) AS n, total(dur_ns) AS ns, avg(dur_ns) AS mean,"
    "  total(overflow = 1) AS ov FROM steps GROUP BY rank),"
    " o AS (SELECT rank, total(dur_ns) AS ns FROM op_events GROUP BY rank),"
    " c AS (SELECT rank, total(dur_ns) AS ns, total(wait_ns) AS w, total(bytes) AS b,"
    "  total(local_overflow = 1) AS lo FROM comm WHERE kind = 'allreduce' GROUP BY rank)"
    " INSERT INTO rank_summary(rank, steps, step_ns, mean_step_ns, compute_ns, comm_ns, wait_ns,"
    "  comm_bytes, overflow_steps, local_overflows, end)"
    " SELECT r.rank, coalesce(s.n, 0), CAST(coalesce(s.ns, 0) AS INTEGER), s.mean,"
    "  CAST(coalesce(o.ns, 0) AS INTEGER), CAST(c.ns AS INTEGER), CAST(c.w AS INTEGER),"
    "  CAST(c.b AS INTEGER), CAST(coalesce(s.ov, 0) AS INTEGER), CAST(coalesce(c.lo, 0) AS INTEGER),"
    "  coalesce((SELECT value FROM meta WHERE key = 'rank.' || r.rank || '.end'),"
    "           (SELECT value FROM meta WHERE key = 'end'))"
    " FROM r LEFT JOIN s USING (rank) LEFT JOIN o USING (rank) LEFT JOIN c USING (rank)"
    " ORDER BY r.rank;"
    /* busy time per step of each rank: (step time - wait) / steps */
    "UPDATE run_summary SET ranks = (SELECT count(*) FROM rank_summary),"
    " comm_share = (SELECT CASE WHEN count(*) = 0 THEN NULL ELSE total(wait_ns) END FROM comm"
    "   WHERE kind = 'allreduce') / nullif((SELECT total(dur_ns) FROM steps), 0),"
    " rank_spread = (SELECT CASE WHEN count(*) > 1 THEN max(b) / nullif(min(b), 0) - 1 END"
    "   FROM (SELECT CAST(step_ns - coalesce(wait_ns, 0) AS REAL) / steps AS b FROM rank_summary"
    "   WHERE steps > 0));";

int prof_dist_summary(sqlite3 *db, char **msg)
{
	return sqlite3_exec(db, rank_summary_sql, NULL, NULL, msg);
}

/* ---- advice ------------------------------------------------------------------------------- */
static double q_double(sqlite3 *db, const char *sql, double dflt)
{
	amp_profile_query_double(db, &dflt, sql, NULL);
	return dflt;
}

static void q_text(sqlite3 *db, const char *sql, char *buf, size_t len)
{
	buf[0] = '\0';
	amp_profile_query_text(db, buf, len, sql, NULL);
}

/* The rank whose busy time per step (step time minus its wait at the all-reduces) is the
 * longest, if it exceeds the other ranks' mean by more than 10 % (and STRAGGLER_MIN_NS): 1
 * with *rank, *busy and *others (ns per step) set, 0 if none, -1 on an SQL error. */
static int find_straggler(sqlite3 *db, int64_t *rank, double *busy, double *others)
{
	sqlite3_stmt *st = NULL;
	if (sqlite3_prepare_v2(db,
	                       "WITH b AS (SELECT rank, CAST(step_ns - coalesce(wait_ns, 0) AS REAL)"
	                       "  / steps AS busy FROM rank_summary WHERE steps > 0)"
	                       " SELECT b.rank, b.busy, (SELECT avg(o.busy) FROM b o"
	                       "  WHERE o.rank <> b.rank) AS others FROM b"
	                       " WHERE (SELECT count(*) FROM b) > 1 ORDER BY b.busy DESC LIMIT 1",
	                       -1, &st, NULL) != SQLITE_OK)
		return -1;
	int found = 0;
	if (sqlite3_step(st) == SQLITE_ROW) {
		*rank = sqlite3_column_int64(st, 0);
		*busy = sqlite3_column_double(st, 1);
		*others = sqlite3_column_double(st, 2);
		/* and by 0.1 ms a step: steps of a fraction of a millisecond differ by more
		 * than 10 % from scheduling noise alone */
		found = *others > 0 && *busy > *others * 1.10 && *busy - *others > STRAGGLER_MIN_NS;
	}
	sqlite3_finalize(st);
	return found;
}

static const char *advised_half(sqlite3 *db);

/* Communication share above 10 %, with the buckets that cost most (waited longest). */
static int rule_comm_share(sqlite3 *db)
{
	double share = q_double(db, "SELECT comm_share FROM run_summary", NAN);
	if (!(share > 0.10))
		return 0;
	char ev[1024] = "", dtype[16];
	size_t used = 0;
	sqlite3_stmt *st = NULL;
	/* n: the all-reduces of the bucket (with optimizer_sharding a gradient bucket's is two
	 * rows, its reduce-scatter and the exchange after the update); the bytes a rank's */
	if (sqlite3_prepare_v2(db,
	                       "WITH c AS (SELECT bucket, bytes, wait_ns, dur_ns, rank, CASE WHEN"
	                       "  bucket IS NOT NULL AND (SELECT value FROM meta WHERE key ="
	                       "  'optimizer_sharding') = 'on' THEN 2 ELSE 1 END AS rows_per"
	                       "  FROM comm WHERE kind = 'allreduce'),"
	                       " b AS (SELECT bucket, total(wait_ns) AS w, total(dur_ns) AS d,"
	                       "  total(bytes) AS by, count(DISTINCT rank) AS ranks,"
	                       "  CAST(count(*) / max(rows_per) / count(DISTINCT rank) AS INTEGER)"
	                       "  AS n FROM c GROUP BY bucket)"
	                       " SELECT bucket, by / max(n * ranks, 1), w, d, n, ranks FROM b"
	                       " ORDER BY w DESC, bucket LIMIT 3",
	                       -1, &st, NULL) != SQLITE_OK)
		return -1;
	while (sqlite3_step(st) == SQLITE_ROW && used < sizeof ev) {
		char what[64] = "parameters without gradients (averaged)";
		if (sqlite3_column_type(st, 0) != SQLITE_NULL)
			snprintf(what, sizeof what, "bucket %" PRId64, (int64_t)sqlite3_column_int64(st, 0));
		int64_t n = sqlite3_column_int64(st, 4), ranks = sqlite3_column_int64(st, 5);
		used += (size_t)snprintf(
		    ev + used, sizeof ev - used,
		    "%s%s: %.2f MB a rank, %" PRId64 " all-reduce%s on %" PRId64
		    " rank%s: waited %.3f ms of %.3f ms (the ranks' times added)",
		    used ? "\n" : "", what, sqlite3_column_double(st, 1) / 1e6, n,
		    n == 1 ? "" : "s", ranks, ranks == 1 ? "" : "s",
		    sqlite3_column_double(st, 2) / 1e6, sqlite3_column_double(st, 3) / 1e6);
	}
	sqlite3_finalize(st);
	q_text(db, "SELECT value FROM meta WHERE key = 'allreduce_dtype'", dtype, sizeof dtype);
	int64_t slow = -1;
	double busy = 0, others = 0;
	int straggler = find_straggler(db, &slow, &busy, &others);
	if (straggler < 0)
		return -1;
	char msg[512], remedy[256];
	/* a wait for a straggler is its lateness, which fewer bytes do not shorten */
	if (straggler)
		snprintf(remedy, sizeof remedy,
		         "the ranks wait mostly for rank %" PRId64 ", which computes %.1f %% longer "
		         "(see straggler): even out their load first; the all-reduce's bytes are not "
		         "what holds them", slow, (busy / others - 1) * 100);
	else if (strcmp(dtype, "fp32") == 0 && advised_half(db))
		snprintf(remedy, sizeof remedy, "allreduce_dtype = %s halves the bytes; a larger "
		         "allreduce_bucket_kb posts fewer, larger collectives", advised_half(db));
	else
		snprintf(remedy, sizeof remedy, "%s",
		         "a larger allreduce_bucket_kb posts fewer, larger collectives; a larger "
		         "batch per rank gives backward more to hide them behind");
	snprintf(msg, sizeof msg,
	         "communication takes %.1f %% of the step time (all-reduce not hidden behind "
	         "backward, above 10 %%): %s",
	         share * 100, remedy);
	return prof_advice_add(db, "comm_share", "warning", msg, ev, NULL, -1, -1);
}

/* A rank whose busy time per step exceeds the others' mean by more than 10 % (and 0.1 ms). */
static int rule_straggler(sqlite3 *db)
{
	int64_t rank = -1;
	double busy = 0, others = 0;
	int found = find_straggler(db, &rank, &busy, &others);
	if (found <= 0)
		return found;
	char msg[320], ev[256];
	snprintf(msg, sizeof msg,
	         "rank %" PRId64 " is a straggler: its steps compute %.1f %% longer than the other "
	         "ranks', which wait for it at every all-reduce (an uneven shard, a slower core, or "
	         "another load on its CPU)",
	         rank, (busy / others - 1) * 100);
	snprintf(ev, sizeof ev,
	         "rank %" PRId64 ": %.3f ms busy per step\nothers: %.3f ms busy per step"
	         " (step time minus the wait at the all-reduce)",
	         rank, busy / 1e6, others / 1e6);
	return prof_advice_add(db, "straggler", "warning", msg, ev, NULL, -1, -1);
}

/* Bytes per step and rank of the gradient buckets all-reduced in dtype (the averaged
 * parameters without gradients, bucket NULL, are fp32 whatever the setting); 0 if none. */
static double bucket_bytes(sqlite3 *db, const char *dtype)
{
	char q[256];
	snprintf(q, sizeof q, "SELECT total(bytes) / count(DISTINCT step) / count(DISTINCT rank)"
	                      " FROM comm WHERE kind = 'allreduce' AND dtype = '%s' AND bucket IS"
	                      " NOT NULL", dtype);
	return q_double(db, q, 0);
}

/* The run's precision mode into mode[len] ("" if unknown). */
static void run_mode(sqlite3 *db, char *mode, size_t len)
{
	q_text(db, "SELECT value FROM meta WHERE key IN ('precision_mode', 'app.precision_mode')"
	           " ORDER BY key = 'precision_mode' DESC LIMIT 1", mode, len);
}

/* The half all-reduce dtype to advise for this run: fp16 where a loss scale above 1 lifts
 * small gradients into its range before the cast, bf16 (FP32's range) where the scale stayed
 * at 1 or below; NULL in a mode that keeps FP32 (no half type to send). */
static const char *advised_half(sqlite3 *db)
{
	char mode[64];
	run_mode(db, mode, sizeof mode);
	if (strcmp(mode, "force_fp32") == 0 || strcmp(mode, "must_keep_origin_dtype") == 0)
		return NULL;
	return q_double(db, "SELECT max(scale) FROM steps", NAN) > 1.0 ? "fp16" : "bf16";
}

/* An FP16 all-reduce in a run without loss scaling (scale 1 throughout): the gradients go
 * through FP16 as they are, and those below its smallest normal lose bits or vanish. */
static int rule_unscaled_fp16_allreduce(sqlite3 *db)
{
	double bytes = bucket_bytes(db, "fp16");
	double top = q_double(db, "SELECT max(scale) FROM steps", NAN);
	if (!(bytes > 0) || !(top <= 1.0))
		return 0;
	char mode[64], msg[448], ev[256];
	run_mode(db, mode, sizeof mode);
	snprintf(msg, sizeof msg,
	         "the gradient all-reduce sends FP16 in a run without loss scaling (%s, scale "
	         "%.9g): gradients below 6.1e-05, FP16's smallest normal, lose bits or flush to zero "
	         "on the way; allreduce_dtype = bf16 sends the same bytes with FP32's range",
	         mode[0] ? mode : "?", top);
	snprintf(ev, sizeof ev, "%.2f MB per step per rank in fp16; the loss scale stayed %.9g",
	         bytes / 1e6, top);
	return prof_advice_add(db, "unscaled_fp16_allreduce", "warning", msg, ev, NULL, -1, -1);
}

/* FP32 all-reduce in a run whose loss scaling would let FP16 carry the gradients. */
static int rule_fp32_allreduce(sqlite3 *db)
{
	double bytes = bucket_bytes(db, "fp32");
	char mode[64];
	run_mode(db, mode, sizeof mode);
	const char *half = advised_half(db);
	if (!(bytes > 0) || !mode[0] || !half)
		return 0;
	char msg[384], ev[256];
	snprintf(msg, sizeof msg,
	         "the gradient all-reduce sends FP32 in a mixed-precision run (%s): "
	         "allreduce_dtype = %s (or AMP_ALLREDUCE_DTYPE=%s) sends half the bytes, %s",
	         mode, half, half,
	         strcmp(half, "fp16") == 0
	             ? "the loss scale applied before the cast keeps small gradients"
	             : "with FP32's range (the loss scale stayed at 1: FP16 would flush small "
	               "gradients)");
	snprintf(ev, sizeof ev, "%.2f MB per step per rank in fp32; %s would send %.2f MB",
	         bytes / 1e6, half, bytes / 2e6);
	return prof_advice_add(db, "fp32_allreduce", "info", msg, ev, NULL, -1, -1);
}

/* Steps whose gradients overflowed on some ranks but not all. */
static int rule_one_rank_overflow(sqlite3 *db)
{
	sqlite3_stmt *st = NULL;
	if (sqlite3_prepare_v2(db,
	                       "WITH o AS (SELECT step, rank, max(local_overflow) AS ov FROM comm"
	                       "  WHERE kind = 'allreduce' GROUP BY step, rank),"
	                       " n AS (SELECT count(DISTINCT rank) AS ranks FROM comm"
	                       "  WHERE kind = 'allreduce')"
	                       " SELECT step, group_concat(rank, ', '), count(*) FROM"
	                       "  (SELECT step, rank FROM o WHERE ov = 1 ORDER BY step, rank)"
	                       " GROUP BY step HAVING count(*) < (SELECT ranks FROM n)"
	                       " AND (SELECT ranks FROM n) > 1 ORDER BY step",
	                       -1, &st, NULL) != SQLITE_OK)
		return -1;
	char ev[1024] = "";
	size_t used = 0;
	int64_t first = -1, n = 0;
	char first_ranks[128] = "";
	while (sqlite3_step(st) == SQLITE_ROW) {
		const char *ranks = (const char *)sqlite3_column_text(st, 1);
		int64_t step = sqlite3_column_int64(st, 0);
		if (n++ == 0) {
			first = step;
			snprintf(first_ranks, sizeof first_ranks, "%s", ranks ? ranks : "?");
		}
		if (n <= 8 && used < sizeof ev)
			used += (size_t)snprintf(ev + used, sizeof ev - used, "%sstep %" PRId64
			                         ": overflow on rank %s only", used ? "\n" : "", step,
			                         ranks ? ranks : "?");
	}
	sqlite3_finalize(st);
	if (n == 0)
		return 0;
	char msg[384];
	snprintf(msg, sizeof msg,
	         "%" PRId64 " step(s) overflowed on some ranks only (first: step %" PRId64
	         ", rank %s): every rank skipped them together, but the cause is in that rank's "
	         "share of the batch; its profile's non-finite origin names the op",
	         n, first, first_ranks);
	return prof_advice_add(db, "rank_overflow", "warning", msg, ev, NULL, first, -1);
}

int prof_dist_rules(sqlite3 *db)
{
	if (!amp_profile_has_table(db, "comm"))
		return 0;
	if (rule_comm_share(db) || rule_straggler(db) || rule_fp32_allreduce(db) ||
	    rule_unscaled_fp16_allreduce(db) || rule_one_rank_overflow(db))
		return -1;
	return 0;
}

/* ---- report ------------------------------------------------------------------------------- */
/* What the report says of a data-parallel run, text and JSON alike. */
typedef struct comm_summary {
	double share, spread;  /* run_summary's comm_share, rank_spread (NAN if none) */
	char dtype[16];        /* meta allreduce_dtype, "" if none */
	char world[16];        /* meta ranks (merged) or world_size, "" if none */
} comm_summary;

/* The per-rank rows, in rank order, for both reports. */
/* Column 9: the steps that all-reduced (evaluation steps have none), what the bytes are
 * per. */
static const char rank_rows_sql[] =
    "SELECT r.rank, r.steps, r.mean_step_ns, r.step_ns, r.compute_ns, r.comm_ns, r.wait_ns,"
    " r.comm_bytes, r.end, (SELECT count(DISTINCT c.step) FROM comm c WHERE c.rank IS r.rank"
    " AND c.kind = 'allreduce') FROM rank_summary r ORDER BY r.rank";

/* 1 with *s filled for a run with collectives, 0 without. */
static int comm_summary_load(sqlite3 *db, comm_summary *s)
{
	int64_t comm_rows = 0;
	amp_profile_query_int64(db, &comm_rows, "SELECT count(*) FROM comm", NULL);
	if (comm_rows == 0)
		return 0;
	s->share = q_double(db, "SELECT comm_share FROM run_summary", NAN);
	s->spread = q_double(db, "SELECT rank_spread FROM run_summary", NAN);
	q_text(db, "SELECT value FROM meta WHERE key = 'allreduce_dtype'", s->dtype,
	       sizeof s->dtype);
	q_text(db, "SELECT value FROM meta WHERE key IN ('ranks', 'world_size')"
	           " ORDER BY key = 'ranks' DESC LIMIT 1", s->world, sizeof s->world);
	return 1;
}

int prof_report_dist_text(sqlite3 *db, FILE *f)
{
	comm_summary cs;
	if (!comm_summary_load(db, &cs))
		return 0;
	const double share = cs.share, spread = cs.spread;
	const char *dtype = cs.dtype, *world = cs.world;
	fprintf(f, "  comm share   ");
	if (share == share)
		fprintf(f, "%.1f %% of step time  %s (threshold 10 %%)", share * 100,
		        share > 0.10 ? "HIGH" : "ok");
	else
		fprintf(f, "n/a");
	fprintf(f, ", all-reduce in %s, %s %s", dtype[0] ? dtype : "?", world[0] ? world : "?",
	        strcmp(world, "1") == 0 ? "rank" : "ranks");
	if (spread == spread)
		fprintf(f, ", rank spread %.1f %%", spread * 100);
	fprintf(f, "\n");
	sqlite3_stmt *st = NULL;
	if (sqlite3_prepare_v2(db, rank_rows_sql, -1, &st, NULL) != SQLITE_OK)
		return -1;
	fprintf(f, "  ranks:\n    %4s %6s %10s %10s %10s %10s %10s %10s  %s\n", "rank", "steps",
	        "step ms", "busy ms", "compute ms", "comm ms", "wait ms", "MB", "end");
	while (sqlite3_step(st) == SQLITE_ROW) {
		int64_t steps = sqlite3_column_int64(st, 1);
		double n = steps > 0 ? (double)steps : 1;
		double step_ns = sqlite3_column_double(st, 3), wait = sqlite3_column_double(st, 6);
		const char *end = (const char *)sqlite3_column_text(st, 8);
		int64_t reduced = sqlite3_column_int64(st, 9);
		fprintf(f, "    %4" PRId64 " %6" PRId64 " %10.3f %10.3f %10.3f %10.3f %10.3f %10.2f  ",
		        (int64_t)sqlite3_column_int64(st, 0), steps, sqlite3_column_double(st, 2) / 1e6,
		        (step_ns - wait) / n / 1e6, sqlite3_column_double(st, 4) / n / 1e6,
		        sqlite3_column_double(st, 5) / n / 1e6, wait / n / 1e6,
		        sqlite3_column_double(st, 7) / (double)(reduced > 0 ? reduced : 1) / 1e6);
		amp_text_put(f, end ? end : "?");
		fputc('\n', f);
	}
	sqlite3_finalize(st);
	fprintf(f, "    (per step; busy = step - wait: what the rank computed; comm adds up the\n"
	        "    buckets, which overlap, so it may pass the step; MB per step that all-reduced)\n");
	return 0;
}

/* `sep"key": v`, a NaN (no value) as null. */
static void json_real_or_null(FILE *f, const char *sep, const char *key, double v)
{
	if (isnan(v))
		fprintf(f, "%s\"%s\": null", sep, key);
	else
		amp_json_member_real(f, sep, key, v);
}

int prof_report_dist_json(sqlite3 *db, FILE *f)
{
	comm_summary cs;
	if (!comm_summary_load(db, &cs)) {
		fputs("null", f);
		return 0;
	}
	const double share = cs.share;
	const char *dtype = cs.dtype, *world = cs.world;
	json_real_or_null(f, "{", "share", share);
	amp_json_member_real(f, ", ", "threshold", 0.10);
	fprintf(f, ", \"ok\": %s", share == share ? (share > 0.10 ? "false" : "true") : "null");
	fputs(", \"allreduce_dtype\": ", f);
	if (dtype[0])
		amp_json_string(f, dtype);
	else
		fputs("null", f);
	fprintf(f, ", \"world_size\": %s", world[0] ? world : "null");
	json_real_or_null(f, ", ", "rank_spread", cs.spread);
	sqlite3_stmt *st = NULL;
	if (sqlite3_prepare_v2(db, rank_rows_sql, -1, &st, NULL) != SQLITE_OK)
		return -1;
	/* per step, as the text table: busy = step - wait */
	fputs(", \"ranks\": [", f);
	for (int i = 0; sqlite3_step(st) == SQLITE_ROW; i++) {
		int64_t steps = sqlite3_column_int64(st, 1);
		double n = steps > 0 ? (double)steps : 1;
		double step_ns = sqlite3_column_double(st, 3), wait = sqlite3_column_double(st, 6);
		const char *end = (const char *)sqlite3_column_text(st, 8);
		fprintf(f, "%s{\"rank\": %" PRId64 ", \"steps\": %" PRId64, i ? ", " : "",
		        (int64_t)sqlite3_column_int64(st, 0), steps);
		amp_json_member_real(f, ", ", "step_ns", sqlite3_column_double(st, 2));
		amp_json_member_real(f, ", ", "busy_ns", (step_ns - wait) / n);
		amp_json_member_real(f, ", ", "compute_ns", sqlite3_column_double(st, 4) / n);
		amp_json_member_real(f, ", ", "comm_ns", sqlite3_column_double(st, 5) / n);
		amp_json_member_real(f, ", ", "wait_ns", wait / n);
		amp_json_member_real(f, ", ", "comm_bytes", sqlite3_column_double(st, 7) / n);
		fputs(", \"end\": ", f);
		if (end)
			amp_json_string(f, end);
		else
			fputs("null", f);
		fputc('}', f);
	}
	sqlite3_finalize(st);
	fputs("]}", f);
	return 0;
}

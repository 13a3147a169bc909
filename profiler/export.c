/* export.c — `ampprof export`: the profile as a Chrome trace (chrome://tracing, Perfetto) or
 * as CSV of one table, on stdout or a file.
 *
 * Chrome trace (Trace Event Format, tests/e2e/trace_check.py validates it): a track per
 * producing thread with its real pid and tid and a thread_name; one complete event ("X") per
 * step, op and copy on its thread's track (steps hold their ops; the collector's time
 * conversion keeps a thread's slices nested or apart), timestamps in microseconds; the loss
 * scale and the memory by category as counters per thread ("id": threads.id); "cat" on every
 * event; otherData.format_version versions the layout.  CSV goes through the tools' table writer
 * (amp_table.h), strings of both through amp_text.h (valid UTF-8, no raw control characters).
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "amp_progress.h"
#include "amp_table.h"
#include "amp_text.h"
#include "prof.h"
#include "profile_db.h"

/* Every string of the trace through amp_json_string: valid UTF-8, controls escaped. */
static void json_text(FILE *f, const unsigned char *s)
{
	amp_json_string(f, (const char *)(s ? s : (const unsigned char *)""));
}

/* A real column: %.9g, null when NULL or not finite (the trace's arguments carry no
 * "<key>_nonfinite" flag: a null loss is a step whose loss was not finite or not recorded). */
static void json_real_col(FILE *f, sqlite3_stmt *st, int i)
{
	if (sqlite3_column_type(st, i) == SQLITE_NULL)
		fputs("null", f);
	else
		amp_json_number(f, sqlite3_column_double(st, i));
}

/* The tracks: every thread of the profile (threads, or only named by its events) with its
 * real pid and tid; a thread the threads table lacks (a collector that died before writing
 * it) gets the run's pid and a tid above any Linux tid (pid_max <= 2^22).  In a merged
 * profile of several ranks the process of a track is its rank plus one (pids of ranks on
 * other hosts may be equal; trace viewers treat pid 0 as the idle task), and real_pid the
 * pid.  Reads the temporary view xthreads (id, pid, tid, rank) that prof_export_chrome makes. */
#define TRACKS_CTE                                                                                 \
	"WITH ids(id) AS (SELECT id FROM xthreads UNION SELECT thread FROM steps"                  \
	"  UNION SELECT thread FROM op_events UNION SELECT thread FROM copy_events),"              \
	" tr0(id, pid, tid, rank) AS (SELECT i.id, coalesce(t.pid, (SELECT CAST(value AS INTEGER)" \
	"  FROM meta WHERE key = 'pid'), 1), coalesce(t.tid, 1073741824 + i.id),"                  \
	"  coalesce(t.rank, 0) FROM ids i LEFT JOIN xthreads t ON t.id = i.id WHERE i.id IS NOT"   \
	"  NULL),"                                                                                 \
	" tr(id, pid, tid, real_pid, rank) AS (SELECT id, CASE WHEN (SELECT count(DISTINCT rank)"  \
	"  FROM tr0) > 1 THEN rank + 1 ELSE pid END, tid, pid, rank FROM tr0) "

enum trace_kind { TRACE_STEP, TRACE_OP, TRACE_COPY, TRACE_SCALE, TRACE_MEMORY, TRACE_COMM };

/* Writes the events of one query; every query's columns start with ts (ns), dur (ns), pid,
 * tid, thread (threads.id).  Returns 0 or -1 (SQLite error). */
static int emit_rows(sqlite3 *db, FILE *f, const char *sql, enum trace_kind kind,
                     amp_progress *pr, uint64_t *done)
{
	sqlite3_stmt *st = NULL;
	if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
		return -1;
	int rc;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		double ts = (double)sqlite3_column_int64(st, 0) / 1e3;
		double dur = (double)sqlite3_column_int64(st, 1) / 1e3;
		int64_t pid = sqlite3_column_int64(st, 2), tid = sqlite3_column_int64(st, 3);
		int64_t thread = sqlite3_column_int64(st, 4);
		if ((++*done & 255) == 0)
			amp_progress_set(pr, "events", *done);
		fputs(",\n", f);
		switch (kind) {
		case TRACE_STEP: /* step, loss, scale, overflow, skipped, samples, ended */
			fprintf(f, "{\"name\":\"step %" PRId64 "\",\"cat\":\"step\",\"ph\":\"X\","
			        "\"ts\":%.3f,\"dur\":%.3f,\"pid\":%" PRId64 ",\"tid\":%" PRId64
			        ",\"args\":{\"step\":%" PRId64 ",\"loss\":",
			        (int64_t)sqlite3_column_int64(st, 5), ts, dur, pid, tid,
			        (int64_t)sqlite3_column_int64(st, 5));
			json_real_col(f, st, 6);
			fputs(",\"scale\":", f);
			json_real_col(f, st, 7);
			fprintf(f,
			        ",\"overflow\":%d,\"skipped\":%d,\"samples\":%" PRId64
			        ",\"ended\":%s}}",
			        sqlite3_column_int(st, 8), sqlite3_column_int(st, 9),
			        (int64_t)sqlite3_column_int64(st, 10),
			        sqlite3_column_int(st, 11) ? "true" : "false");
			break;
		case TRACE_OP: /* op, dtype, label, shape, step, seq, phase, engine */
			fputs("{\"name\":", f);
			json_text(f, sqlite3_column_text(st, 5));
			fprintf(f, ",\"cat\":\"op\",\"ph\":\"X\",\"ts\":%.3f,\"dur\":%.3f,\"pid\":%" PRId64
			        ",\"tid\":%" PRId64 ",\"args\":{\"dtype\":", ts, dur, pid, tid);
			json_text(f, sqlite3_column_text(st, 6));
			fputs(",\"label\":", f);
			json_text(f, sqlite3_column_text(st, 7));
			fputs(",\"shape\":", f);
			json_text(f, sqlite3_column_text(st, 8));
			fprintf(f, ",\"step\":%" PRId64 ",\"seq\":%" PRId64 ",\"phase\":",
			        (int64_t)sqlite3_column_int64(st, 9), (int64_t)sqlite3_column_int64(st, 10));
			json_text(f, sqlite3_column_text(st, 11));
			fputs(",\"engine\":", f);
			json_text(f, sqlite3_column_text(st, 12));
			fputs("}}", f);
			break;
		case TRACE_COPY: /* kind, src, dst, bytes, label, step */
			fputs("{\"name\":", f);
			json_text(f, sqlite3_column_text(st, 5));
			fprintf(f, ",\"cat\":\"copy\",\"ph\":\"X\",\"ts\":%.3f,\"dur\":%.3f,\"pid\":%" PRId64
			        ",\"tid\":%" PRId64 ",\"args\":{\"src\":", ts, dur, pid, tid);
			json_text(f, sqlite3_column_text(st, 6));
			fputs(",\"dst\":", f);
			json_text(f, sqlite3_column_text(st, 7));
			fprintf(f, ",\"bytes\":%" PRId64 ",\"label\":", (int64_t)sqlite3_column_int64(st, 8));
			json_text(f, sqlite3_column_text(st, 9));
			fprintf(f, ",\"step\":%" PRId64 "}}", (int64_t)sqlite3_column_int64(st, 10));
			break;
		case TRACE_COMM: /* kind, bytes, dtype, bucket, wait_ns, local_overflow, step */
			fputs("{\"name\":", f);
			json_text(f, sqlite3_column_text(st, 5));
			fprintf(f, ",\"cat\":\"comm\",\"ph\":\"X\",\"ts\":%.3f,\"dur\":%.3f,\"pid\":%" PRId64
			        ",\"tid\":%" PRId64 ",\"args\":{\"bytes\":%" PRId64 ",\"dtype\":",
			        ts, dur, pid, tid, (int64_t)sqlite3_column_int64(st, 6));
			json_text(f, sqlite3_column_text(st, 7));
			fputs(",\"bucket\":", f);
			if (sqlite3_column_type(st, 8) == SQLITE_NULL)
				fputs("null", f);
			else
				fprintf(f, "%" PRId64, (int64_t)sqlite3_column_int64(st, 8));
			fprintf(f, ",\"wait_us\":%.3f,\"local_overflow\":%d,\"step\":%" PRId64 "}}",
			        (double)sqlite3_column_int64(st, 9) / 1e3, sqlite3_column_int(st, 10),
			        (int64_t)sqlite3_column_int64(st, 11));
			break;
		case TRACE_SCALE: /* new_scale (finite: counters take numbers only) */
			fprintf(f, "{\"name\":\"loss_scale\",\"cat\":\"loss_scale\",\"ph\":\"C\","
			        "\"ts\":%.3f,\"pid\":%" PRId64 ",\"tid\":%" PRId64 ",\"id\":\"%" PRId64
			        "\",\"args\":{\"scale\":", ts, pid, tid, thread);
			amp_json_number(f, sqlite3_column_double(st, 5));
			fputs("}}", f);
			break;
		case TRACE_MEMORY: /* the categories, then peak */
			fprintf(f, "{\"name\":\"memory\",\"cat\":\"memory\",\"ph\":\"C\",\"ts\":%.3f,"
			        "\"pid\":%" PRId64 ",\"tid\":%" PRId64 ",\"id\":\"%" PRId64 "\",\"args\":{",
			        ts, pid, tid, thread);
			for (int i = 0; i < AMP_MEM_NCAT; i++)
				fprintf(f, "%s\"%s\":%" PRId64, i ? "," : "",
				        amp_mem_category_name((amp_mem_category)i),
				        (int64_t)sqlite3_column_int64(st, 5 + i));
			fprintf(f, "}},\n{\"name\":\"memory_peak\",\"cat\":\"memory\",\"ph\":\"C\","
			        "\"ts\":%.3f,\"pid\":%" PRId64 ",\"tid\":%" PRId64 ",\"id\":\"%" PRId64
			        "\",\"args\":{\"peak\":%" PRId64 "}}", ts, pid, tid, thread,
			        (int64_t)sqlite3_column_int64(st, 5 + AMP_MEM_NCAT));
			break;
		}
	}
	sqlite3_finalize(st);
	return rc == SQLITE_DONE ? 0 : -1;
}

/* Metadata: process_name per pid (the program's name), thread_name per track ("main" for the
 * thread whose tid is its pid, else "thread <threads.id>").  Returns 0 or -1. */
static int emit_names(sqlite3 *db, FILE *f)
{
	char command[512] = "", prog[128] = "ampkit";
	amp_profile_query_text(db, command, sizeof command,
	                       "SELECT value FROM meta WHERE key = 'command'", NULL);
	/* the first word of the command, without its directory */
	size_t len = strcspn(command, " \t");
	command[len] = '\0';
	const char *base = strrchr(command, '/');
	base = base ? base + 1 : command;
	if (*base)
		snprintf(prog, sizeof prog, "%.*s", (int)sizeof prog - 1, base); /* cut to fit */
	sqlite3_stmt *st = NULL;
	if (sqlite3_prepare_v2(db, TRACKS_CTE "SELECT pid, min(real_pid), min(rank),"
	                       " (SELECT count(DISTINCT rank) FROM tr) FROM tr GROUP BY pid"
	                       " ORDER BY pid", -1, &st, NULL) != SQLITE_OK)
		return -1;
	int rc, first = 1;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		fputs(first ? "\n" : ",\n", f);
		first = 0;
		int64_t pid = sqlite3_column_int64(st, 0);
		fprintf(f, "{\"name\":\"process_name\",\"cat\":\"__metadata\",\"ph\":\"M\",\"pid\":%" PRId64
		        ",\"args\":{\"name\":", pid);
		char name[200];
		if (sqlite3_column_int64(st, 3) > 1) /* a rank of a merged profile */
			snprintf(name, sizeof name, "rank %" PRId64 ": %s (pid %" PRId64 ")",
			         (int64_t)sqlite3_column_int64(st, 2), prog,
			         (int64_t)sqlite3_column_int64(st, 1));
		else
			snprintf(name, sizeof name, "%s", prog);
		amp_json_string(f, name);
		fputs("}}", f);
		fprintf(f, ",\n{\"name\":\"process_sort_index\",\"cat\":\"__metadata\",\"ph\":\"M\","
		        "\"pid\":%" PRId64 ",\"args\":{\"sort_index\":%" PRId64 "}}", pid,
		        (int64_t)sqlite3_column_int64(st, 2));
	}
	sqlite3_finalize(st);
	if (rc != SQLITE_DONE)
		return -1;
	if (first) /* no thread at all: still one process, so the document is not empty */
		fputs("\n{\"name\":\"process_name\",\"cat\":\"__metadata\",\"ph\":\"M\",\"pid\":1,"
		      "\"args\":{\"name\":\"ampkit\"}}", f);
	if (sqlite3_prepare_v2(db, TRACKS_CTE "SELECT id, pid, tid, real_pid FROM tr ORDER BY id",
	                       -1, &st, NULL) != SQLITE_OK)
		return -1;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		int64_t id = sqlite3_column_int64(st, 0), pid = sqlite3_column_int64(st, 1),
		        tid = sqlite3_column_int64(st, 2), real_pid = sqlite3_column_int64(st, 3);
		char name[48];
		if (tid == real_pid)
			snprintf(name, sizeof name, "main");
		else
			snprintf(name, sizeof name, "thread %" PRId64, id);
		fprintf(f, ",\n{\"name\":\"thread_name\",\"cat\":\"__metadata\",\"ph\":\"M\",\"pid\":%" PRId64
		        ",\"tid\":%" PRId64 ",\"args\":{\"name\":\"%s\"}}", pid, tid, name);
		fprintf(f, ",\n{\"name\":\"thread_sort_index\",\"cat\":\"__metadata\",\"ph\":\"M\","
		        "\"pid\":%" PRId64 ",\"tid\":%" PRId64 ",\"args\":{\"sort_index\":%" PRId64 "}}",
		        pid, tid, id);
	}
	sqlite3_finalize(st);
	return rc == SQLITE_DONE ? 0 : -1;
}

/* The track of a collective (a comm row c): the buckets' all-reduces are in flight together,
 * beside the ops, so each bucket has a track of its own in its rank's process (slices on one
 * track must nest): base + 2 + bucket, base + 1 for the averaged parameters without gradients
 * (bucket NULL), base for the start-up broadcast and barriers.  Above the tids of threads the
 * threads table lacks (1073741824 + id). */
#define COMM_TID_BASE "1610612736"
#define COMM_TID                                                                                   \
	"(" COMM_TID_BASE " + CASE WHEN c.kind = 'allreduce' THEN 2 + coalesce(c.bucket, -1) ELSE 0" \
	" END)"

/* thread_name and thread_sort_index of the collectives' tracks.  Returns 0 or -1. */
static int emit_comm_names(sqlite3 *db, FILE *f)
{
	sqlite3_stmt *st = NULL;
	if (sqlite3_prepare_v2(db,
	                       TRACKS_CTE "SELECT DISTINCT tr.pid, " COMM_TID " AS t FROM comm c"
	                       " JOIN tr ON tr.id = coalesce(c.thread, (SELECT min(id) FROM tr))"
	                       " ORDER BY 1, 2",
	                       -1, &st, NULL) != SQLITE_OK)
		return -1;
	int rc;
	const int64_t base = 1610612736;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		int64_t pid = sqlite3_column_int64(st, 0), tid = sqlite3_column_int64(st, 1);
		char name[64];
		if (tid == base)
			snprintf(name, sizeof name, "collectives (start-up)");
		else if (tid == base + 1)
			snprintf(name, sizeof name, "all-reduce (parameters without gradients)");
		else
			snprintf(name, sizeof name, "all-reduce bucket %" PRId64, tid - base - 2);
		fprintf(f, ",\n{\"name\":\"thread_name\",\"cat\":\"__metadata\",\"ph\":\"M\",\"pid\":%" PRId64
		        ",\"tid\":%" PRId64 ",\"args\":{\"name\":\"%s\"}}", pid, tid, name);
		fprintf(f, ",\n{\"name\":\"thread_sort_index\",\"cat\":\"__metadata\",\"ph\":\"M\","
		        "\"pid\":%" PRId64 ",\"tid\":%" PRId64 ",\"args\":{\"sort_index\":%" PRId64 "}}",
		        pid, tid, tid - base + 1000000);
	}
	sqlite3_finalize(st);
	return rc == SQLITE_DONE ? 0 : -1;
}

int prof_export_chrome(sqlite3 *db, FILE *f)
{
	/* the threads with their rank (0 in a profile from before the rank column) */
	if (sqlite3_exec(db,
	                 amp_profile_has_column(db, "threads", "rank")
	                     ? "CREATE TEMP VIEW IF NOT EXISTS xthreads AS SELECT id, pid, tid, rank"
	                       " FROM threads"
	                     : "CREATE TEMP VIEW IF NOT EXISTS xthreads AS SELECT id, pid, tid, 0 AS"
	                       " rank FROM threads",
	                 NULL, NULL, NULL) != SQLITE_OK)
		return -1;
	int comm = amp_profile_has_table(db, "comm");
	int mem_thread = amp_profile_has_column(db, "memory", "thread");
	int scale_thread = amp_profile_has_column(db, "loss_scale", "thread");
	int64_t rows = 0;
	amp_profile_query_int64(db, &rows,
	                        "SELECT (SELECT count(*) FROM steps) + (SELECT count(*) FROM op_events)"
	                        " + (SELECT count(*) FROM copy_events) + (SELECT count(*) FROM"
	                        " loss_scale) + (SELECT count(*) FROM memory)", NULL);
	amp_progress pr;
	uint64_t done = 0;
	amp_progress_begin(&pr, "ampprof", "export", rows > 0 ? (uint64_t)rows : 0);
	amp_progress_watch(&pr, db);
	amp_progress_set(&pr, "events", 0);
	fprintf(f, "{\"displayTimeUnit\":\"ns\",\"otherData\":{\"format_version\":%d},"
	        "\"traceEvents\":[", AMP_JSON_FORMAT_VERSION);
	if (emit_names(db, f) != 0 ||
	    emit_rows(db, f,
	              /* a step that never ended (a killed run's last) lasts to the end of its
	               * last op or copy, so that it holds them as a step does */
	              TRACKS_CTE
	              "SELECT s.start_ns, coalesce(s.dur_ns, max(0, max(coalesce((SELECT"
	              " max(e.start_ns + e.dur_ns) FROM op_events e WHERE e.thread = s.thread AND"
	              " e.step = s.step), s.start_ns), coalesce((SELECT max(e.start_ns + e.dur_ns)"
	              " FROM copy_events e WHERE e.thread = s.thread AND e.step = s.step),"
	              " s.start_ns)) - s.start_ns)), tr.pid, tr.tid, s.thread, s.step, s.loss,"
	              " s.scale,"
	              " coalesce(s.overflow, 0), coalesce(s.skipped, 0), coalesce(s.samples, 0),"
	              " s.dur_ns IS NOT NULL FROM steps s JOIN tr ON tr.id = s.thread"
	              " ORDER BY s.start_ns, s.step",
	              TRACE_STEP, &pr, &done) != 0 ||
	    emit_rows(
	        db, f,
	        TRACKS_CTE
	        "SELECT e.start_ns, e.dur_ns, tr.pid, tr.tid, e.thread, s.op,"
	        " s.exec_dtype, coalesce(s.label, ''), s.shape, e.step, e.seq, s.phase,"
	        " coalesce(s.engine, 'unknown') FROM op_events e JOIN op_sigs s ON s.id = e.sig"
	        " JOIN tr ON tr.id = e.thread ORDER BY e.id",
	        TRACE_OP, &pr, &done) != 0 ||
	    emit_rows(db, f,
	              TRACKS_CTE "SELECT e.start_ns, e.dur_ns, tr.pid, tr.tid, e.thread, s.kind,"
	                         " s.src_dtype, s.dst_dtype, s.bytes, coalesce(s.label, ''), e.step"
	                         " FROM copy_events e JOIN copy_sigs s ON s.id = e.sig"
	                         " JOIN tr ON tr.id = e.thread ORDER BY e.id",
	              TRACE_COPY, &pr, &done) != 0 ||
	    /* rows of a version-2 profile have no thread: the first track's */
	    emit_rows(db, f,
	              scale_thread ? TRACKS_CTE
	                  "SELECT l.t_ns, 0, tr.pid, tr.tid, tr.id, l.new_scale FROM"
	                  " loss_scale l JOIN tr ON tr.id = coalesce(l.thread,"
	                  " (SELECT min(id) FROM tr)) WHERE l.new_scale BETWEEN -1e308 AND 1e308"
	                  " ORDER BY l.t_ns, l.step"
	                           : TRACKS_CTE
	                  "SELECT l.t_ns, 0, tr.pid, tr.tid, tr.id, l.new_scale FROM"
	                  " loss_scale l JOIN tr ON tr.id = (SELECT min(id) FROM tr)"
	                  " WHERE l.new_scale BETWEEN -1e308 AND 1e308 ORDER BY l.t_ns, l.step",
	              TRACE_SCALE, &pr, &done) != 0 ||
	    emit_rows(db, f,
	              mem_thread ? TRACKS_CTE
	                  "SELECT m.t_ns, 0, tr.pid, tr.tid, tr.id, m.master_weights,"
	                  " m.working_copies, m.activations, m.grads, m.optimizer_state, m.peak"
	                  " FROM memory m JOIN tr ON tr.id = coalesce(m.thread,"
	                  " (SELECT min(id) FROM tr)) ORDER BY m.t_ns, m.step"
	                         : TRACKS_CTE
	                  "SELECT m.t_ns, 0, tr.pid, tr.tid, tr.id, m.master_weights,"
	                  " m.working_copies, m.activations, m.grads, m.optimizer_state, m.peak"
	                  " FROM memory m JOIN tr ON tr.id = (SELECT min(id) FROM tr)"
	                  " ORDER BY m.t_ns, m.step",
	              TRACE_MEMORY, &pr, &done) != 0 ||
	    /* the collectives of a data-parallel run, on tracks of their own (COMM_TID) */
	    (comm &&
	     (emit_comm_names(db, f) != 0 ||
	      emit_rows(db, f,
	                TRACKS_CTE "SELECT c.start_ns, coalesce(c.dur_ns, 0), tr.pid, " COMM_TID
	                           ", tr.id, c.kind, coalesce(c.bytes, 0), c.dtype, c.bucket,"
	                           " coalesce(c.wait_ns, 0), coalesce(c.local_overflow, 0), c.step"
	                           " FROM comm c JOIN tr ON tr.id = coalesce(c.thread,"
	                           " (SELECT min(id) FROM tr)) ORDER BY c.start_ns, c.id",
	                TRACE_COMM, &pr, &done) != 0))) {
		amp_progress_end(&pr);
		return -1;
	}
	amp_progress_end(&pr);
	fputs("\n]}\n", f);
	return ferror(f) ? -1 : 0;
}

int prof_export_csv(sqlite3 *db, FILE *f, const char *table)
{
	static const struct {
		const char *name, *order;
	} tables[] = {
	    {"ops", "id"}, {"copies", "id"}, {"steps", "step, start_ns"},
	    {"loss_scale", "step, t_ns"}, {"memory", "step, t_ns"}, {"op_summary", "total_ns DESC, op"},
	    {"callsites", "id"}, {"advice", "id"}, {"tensor_stats", "id"}, {"meta", "key"},
	    {"crashes", "id"}, {"threads", "id"}, {"comm", "id"}, {"rank_summary", "rank"},
	    {"memory_sum", "rank, t_ns"}, {"context_ends", "rank, t_ns"},
	};
	const char *order = NULL;
	for (size_t i = 0; i < sizeof tables / sizeof tables[0]; i++)
		if (strcmp(tables[i].name, table) == 0)
			order = tables[i].order;
	if (!order) {
		prof_error("tables: ops, copies, steps, loss_scale, memory, op_summary, callsites, "
		           "advice, tensor_stats, meta, crashes, threads, comm, rank_summary, "
		           "memory_sum, context_ends",
		           "cannot export table '%s': unknown table", table);
		return -2;
	}
	char sql[256];
	snprintf(sql, sizeof sql, "SELECT * FROM %s ORDER BY %s", table, order);
	sqlite3_stmt *st = NULL;
	amp_column *cols = NULL;
	amp_table *t = NULL;
	amp_progress pr = {0};
	int rc = SQLITE_ERROR, ok = 0;
	if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
		return -1;
	int ncol = sqlite3_column_count(st);
	/* column names stay valid while st lives; every column is text to the CSV writer */
	cols = calloc((size_t)(ncol > 0 ? ncol : 1), sizeof *cols);
	if (!cols)
		goto out;
	for (int i = 0; i < ncol; i++)
		cols[i] = (amp_column){sqlite3_column_name(st, i), AMP_COL_TEXT};
	if (!(t = amp_table_new(cols, ncol)) || amp_table_stream(t, AMP_FMT_CSV, f) != 0)
		goto out;
	int64_t rows = 0;
	char count[128];
	snprintf(count, sizeof count, "SELECT count(*) FROM %s", table);
	amp_profile_query_int64(db, &rows, count, NULL);
	amp_progress_begin(&pr, "ampprof", "export", rows > 0 ? (uint64_t)rows : 0);
	amp_progress_watch(&pr, db);
	amp_progress_set(&pr, "rows", 0);
	for (uint64_t done = 1; (rc = sqlite3_step(st)) == SQLITE_ROW; done++) {
		if ((done & 255) == 0)
			amp_progress_set(&pr, "rows", done);
		if (amp_table_add_row(t) != 0)
			goto out;
		for (int i = 0; i < ncol; i++) {
			char blob[32];
			int set = 0;
			switch (sqlite3_column_type(st, i)) {
			case SQLITE_NULL: break;
			case SQLITE_INTEGER: set = amp_table_set_int(t, i, sqlite3_column_int64(st, i)); break;
			case SQLITE_FLOAT: set = amp_table_set_real(t, i, sqlite3_column_double(st, i)); break;
			case SQLITE_BLOB:
				snprintf(blob, sizeof blob, "<%d bytes>", sqlite3_column_bytes(st, i));
				set = amp_table_set_text(t, i, blob);
				break;
			default:
				set = amp_table_set_text(t, i, (const char *)sqlite3_column_text(st, i));
				break;
			}
			if (set != 0)
				goto out;
		}
	}
	ok = rc == SQLITE_DONE && amp_table_print(t, AMP_FMT_CSV, f) == 0;
out:
	amp_progress_end(&pr);
	amp_table_free(t);
	free(cols);
	sqlite3_finalize(st);
	return ok ? 0 : -1;
}

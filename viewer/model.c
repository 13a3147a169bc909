/* model.c — profile -> view structs (see model.h).
 *
 * Per-signature call counts and times come from the temp view `vsig`/`vcsig`: a plain view of
 * op_sigs/copy_sigs when finalize filled them, or a temp table aggregated once from the events
 * when it did not (a collector that died).  Event tables are only read by step ranges.
 */
#include "model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

#include "amp_events.h"
#include "profile_db.h"

#define HALF_SQL "('fp16', 'bf16', 'half')"

struct view_model {
	sqlite3 *db;
	view_run run;
	view_advice *advice;
	size_t nadvice;
	view_op_group *groups[2];
	long ngroups[2];
	view_headroom *headroom;
	long nheadroom;
	view_callsite *sites;
	long nsites;
	char *source_root;  /* NULL until view_model_source_root */
	int tstats_scanned; /* scan_tstats ran */
	int64_t nsteps, max_step_ns, nanomalies;
	char anomaly_where[160]; /* "" until anomaly_where() */
	char errmsg[256];
	int damaged;        /* a query met SQLITE_CORRUPT or SQLITE_NOTADB */
	int64_t step_rank;  /* a merged profile: the rank whose steps the step panels show
	                       (make_rank_views); -1 otherwise */
};

/* ---- small SQLite helpers ------------------------------------------------------------------- */
/* Keeps SQLite's last message for view_model_error, and whether it says the file is damaged
 * (every query goes through here on failure, so no loop can take a damaged file for a short
 * one). */
static void note_error(view_model *m)
{
	int ec = sqlite3_errcode(m->db) & 0xff;
	if (ec == SQLITE_CORRUPT || ec == SQLITE_NOTADB)
		m->damaged = 1;
	snprintf(m->errmsg, sizeof m->errmsg, "%s", sqlite3_errmsg(m->db));
}

static sqlite3_stmt *prep(view_model *m, const char *sql)
{
	sqlite3_stmt *st = NULL;
	if (sqlite3_prepare_v2(m->db, sql, -1, &st, NULL) != SQLITE_OK) {
		note_error(m);
		sqlite3_finalize(st);
		return NULL;
	}
	return st;
}

static int step_row(view_model *m, sqlite3_stmt *st)
{
	int rc = sqlite3_step(st);
	if (rc != SQLITE_ROW && rc != SQLITE_DONE)
		note_error(m);
	return rc;
}

static void col_text(sqlite3_stmt *st, int i, char *buf, size_t len)
{
	const unsigned char *t = sqlite3_column_text(st, i);
	snprintf(buf, len, "%s", t ? (const char *)t : "");
}

static int64_t col_i64(sqlite3_stmt *st, int i, int64_t dflt)
{
	return sqlite3_column_type(st, i) == SQLITE_NULL ? dflt : sqlite3_column_int64(st, i);
}

static double col_dbl(sqlite3_stmt *st, int i, double dflt)
{
	return sqlite3_column_type(st, i) == SQLITE_NULL ? dflt : sqlite3_column_double(st, i);
}

/* prep, with the parameters ?1..?n bound to args[0..n). */
static sqlite3_stmt *prep_args(view_model *m, const char *sql, const int64_t *args, int n)
{
	sqlite3_stmt *st = prep(m, sql);
	for (int i = 0; st && i < n; i++)
		sqlite3_bind_int64(st, i + 1, args[i]);
	return st;
}

/* One integer from a query whose ?1 is arg (profile_db's single-value helper); dflt on NULL,
 * no row or error (which view_model_error then says). */
static int64_t query_i64_arg(view_model *m, const char *sql, int64_t arg, int64_t dflt)
{
	int64_t v = dflt;
	if (amp_profile_query_int64(m->db, &v, sql, "i", arg) == AMP_PROFILE_EIO)
		note_error(m);
	return v;
}

/* The same for a query with no parameters. */
static int64_t query_i64(view_model *m, const char *sql, int64_t dflt)
{
	int64_t v = dflt;
	if (amp_profile_query_int64(m->db, &v, sql, NULL) == AMP_PROFILE_EIO)
		note_error(m);
	return v;
}

/* Fills one row (a view struct) from the current row of st. */
typedef void (*row_reader)(sqlite3_stmt *st, void *row);

/* Reads up to max rows of st into rows (size bytes each, zeroed before read fills one) and
 * finalizes st.  Returns the count, or VIEW_EDB when st is NULL (prep failed) or stepping
 * failed (a damaged file, a lock): never a short list as if whole; view_model_error says
 * why. */
static long read_rows(view_model *m, sqlite3_stmt *st, void *rows, size_t size, long max,
                      row_reader read)
{
	if (!st)
		return VIEW_EDB;
	long n = 0;
	int rc = SQLITE_DONE;
	while (n < max && (rc = step_row(m, st)) == SQLITE_ROW) {
		void *row = (char *)rows + (size_t)n++ * size;
		memset(row, 0, size);
		read(st, row);
	}
	sqlite3_finalize(st);
	return rc == SQLITE_ROW || rc == SQLITE_DONE ? n : VIEW_EDB;
}

/* Steps st to its end through step_row and finalizes it: VIEW_OK, or VIEW_EDB if a step
 * failed.  For loops written as `while ((rc = step_row(m, st)) == SQLITE_ROW)`. */
static int loop_end(sqlite3_stmt *st, int rc)
{
	sqlite3_finalize(st);
	return rc == SQLITE_DONE ? VIEW_OK : VIEW_EDB;
}

static int exec(view_model *m, const char *sql)
{
	char *msg = NULL;
	if (sqlite3_exec(m->db, sql, NULL, NULL, &msg) != SQLITE_OK) {
		snprintf(m->errmsg, sizeof m->errmsg, "%s", msg ? msg : "error");
		sqlite3_free(msg);
		return -1;
	}
	return 0;
}

int view_model_damaged(const view_model *m)
{
	return m->damaged;
}

const char *view_model_error(const view_model *m)
{
	return m->errmsg;
}

const view_run *view_model_run(const view_model *m)
{
	return &m->run;
}

sqlite3 *view_model_db(view_model *m)
{
	return m->db;
}

/* ---- open ----------------------------------------------------------------------------------- */
static void read_meta(view_model *m, double *meta_fp16, double *meta_copy)
{
	view_run *r = &m->run;
	sqlite3_stmt *st = prep(m, "SELECT key, value FROM meta");
	r->exit_status = -1;
	while (st && step_row(m, st) == SQLITE_ROW) {
		const char *k = (const char *)sqlite3_column_text(st, 0);
		const char *v = (const char *)sqlite3_column_text(st, 1);
		if (!k || !v)
			continue;
		if (!strcmp(k, "command"))
			snprintf(r->command, sizeof r->command, "%s", v);
		else if (!strcmp(k, "start_time"))
			snprintf(r->start_time, sizeof r->start_time, "%s", v);
		else if (!strcmp(k, "host"))
			snprintf(r->host, sizeof r->host, "%s", v);
		else if (!strcmp(k, "precision_mode"))
			snprintf(r->precision_mode, sizeof r->precision_mode, "%s", v);
		else if (!strcmp(k, "loss_scale") || (!strcmp(k, "app.loss_scale") && !r->scaling[0]))
			snprintf(r->scaling, sizeof r->scaling, "%s", v);
		else if (!strcmp(k, "end"))
			snprintf(r->end, sizeof r->end, "%s", v);
		else if (!strcmp(k, "exit_signal"))
			snprintf(r->exit_signal, sizeof r->exit_signal, "%s", v);
		else if (!strcmp(k, "exit_status"))
			r->exit_status = atoi(v);
		else if (!strcmp(k, "complete"))
			r->complete = atoi(v) == 1;
		else if (!strcmp(k, "incomplete"))
			snprintf(r->incomplete, sizeof r->incomplete, "%s", v);
		else if (!strcmp(k, "dropped_events"))
			r->dropped_events = strtoll(v, NULL, 10);
		else if (!strcmp(k, "wall_ns"))
			r->wall_ns = strtoll(v, NULL, 10);
		else if (!strcmp(k, "options.fp16_threshold") || !strcmp(k, "fp16_threshold"))
			*meta_fp16 = strtod(v, NULL);
		else if (!strcmp(k, "options.memcpy_threshold") || !strcmp(k, "memcpy_threshold"))
			*meta_copy = strtod(v, NULL);
	}
	sqlite3_finalize(st);
}

/* vsig / vcsig: (id, calls, total_ns) per signature. */
static int make_sig_views(view_model *m, int *finalized)
{
	int64_t missing = query_i64(m, "SELECT count(*) FROM op_sigs WHERE calls IS NULL", 0) +
	                  query_i64(m, "SELECT count(*) FROM copy_sigs WHERE calls IS NULL", 0);
	*finalized = missing == 0;
	if (missing == 0)
		return exec(m,
		            "CREATE TEMP VIEW vsig AS SELECT id, calls, total_ns FROM op_sigs;"
		            "CREATE TEMP VIEW vcsig AS SELECT id, calls, total_ns FROM copy_sigs;");
	return exec(m, "CREATE TEMP TABLE vsig AS SELECT sig AS id, count(*) AS calls, "
	               "sum(dur_ns) AS total_ns FROM op_events GROUP BY sig;"
	               "CREATE TEMP TABLE vcsig AS SELECT sig AS id, count(*) AS calls, "
	               "sum(dur_ns) AS total_ns FROM copy_events GROUP BY sig;");
}

/* A merged data-parallel profile has each step and each scaler decision once per rank, taken
 * together: the panels about steps (Steps, Scale, the step counts) read the lowest rank's rows,
 * as the report does, through temporary views that shadow the tables; the ops panels keep every
 * rank's work, and the Ranks block compares the ranks. */
static int make_rank_views(view_model *m)
{
	m->step_rank = -1;
	if (!amp_profile_has_column(m->db, "steps", "rank") ||
	    query_i64(m, "SELECT count(DISTINCT rank) FROM steps", 0) < 2)
		return 0;
	m->step_rank = query_i64(m, "SELECT min(rank) FROM steps", 0);
	static const char *const tables[] = {"steps", "loss_scale"};
	if (amp_profile_shadow_rank(m->db, m->step_rank, tables, 2) == AMP_PROFILE_OK)
		return 0;
	note_error(m);
	return -1;
}

/* The native half share and the half types: from run_summary when it has them, else from the
 * signatures (an unfinalized profile), else unknown (a version-1 profile). */
static int read_engines(view_model *m)
{
	view_run *r = &m->run;
	char engines[256], sql[1024];
	size_t used = (size_t)snprintf(engines, sizeof engines, "(");
	for (unsigned e = 0, n = 0; e < AMP_ENGINE_COUNT && used < sizeof engines; e++)
		if (amp_engine_is_half((amp_engine)e))
			used += (size_t)snprintf(engines + used, sizeof engines - used, "%s'%s'",
			                         n++ ? ", " : "", amp_engine_name((amp_engine)e));
	if (used < sizeof engines)
		snprintf(engines + used, sizeof engines - used, ")");
	r->native_half_share = NAN;
	r->half_types[0] = '\0';
	sqlite3_stmt *st = NULL;
	if (r->finalized && amp_profile_has_column(m->db, "run_summary", "native_half_share"))
		st = prep(m, "SELECT native_half_share, half_types FROM run_summary LIMIT 1");
	else if (!r->finalized && amp_profile_has_column(m->db, "op_sigs", "engine")) {
		snprintf(sql, sizeof sql,
		         "SELECT CASE WHEN count(s.engine) = 0 THEN NULL ELSE CAST(sum(CASE WHEN "
		         "s.engine IN %s THEN v.total_ns ELSE 0 END) AS REAL) / nullif(sum(v.total_ns), "
		         "0) END, (SELECT group_concat(exec_dtype, '+') FROM (SELECT DISTINCT exec_dtype "
		         "FROM op_sigs WHERE exec_dtype IN " HALF_SQL " ORDER BY exec_dtype DESC)) "
		         "FROM op_sigs s JOIN vsig v ON v.id = s.id", engines);
		st = prep(m, sql);
	} else {
		st = prep(m, r->finalized ? "SELECT NULL, NULL"
		                          : "SELECT NULL, (SELECT group_concat(exec_dtype, '+') FROM "
		                            "(SELECT DISTINCT exec_dtype FROM op_sigs WHERE exec_dtype "
		                            "IN " HALF_SQL " ORDER BY exec_dtype DESC))");
	}
	if (!st)
		return VIEW_EDB;
	if (step_row(m, st) == SQLITE_ROW) {
		r->native_half_share = col_dbl(st, 0, NAN);
		const unsigned char *t = sqlite3_column_text(st, 1);
		snprintf(r->half_types, sizeof r->half_types, "%s", t ? (const char *)t : "");
	}
	sqlite3_finalize(st);
	r->half_label = amp_profile_half_label(r->half_types);
	return VIEW_OK;
}

/* The loss-scale history finalize classified (schema version 3). */
static void read_scale_history(view_model *m)
{
	view_run *r = &m->run;
	r->scale_history[0] = r->scale_history_steps[0] = '\0';
	if (!amp_profile_has_column(m->db, "run_summary", "scale_history"))
		return;
	sqlite3_stmt *st = prep(m, "SELECT scale_history, scale_history_steps FROM run_summary "
	                           "LIMIT 1");
	if (st && step_row(m, st) == SQLITE_ROW) {
		col_text(st, 0, r->scale_history, sizeof r->scale_history);
		col_text(st, 1, r->scale_history_steps, sizeof r->scale_history_steps);
	}
	sqlite3_finalize(st);
}

static int read_summary(view_model *m)
{
	view_run *r = &m->run;
	read_scale_history(m);
	sqlite3_stmt *st = prep(m, "SELECT fp16_share, fp16_flop_share, copy_share, steps, "
	                           "overflow_steps, skipped_steps, min_scale, max_scale, wall_ns, "
	                           "step_ns, op_count, copy_count, op_ns, copy_ns, peak_bytes "
	                           "FROM run_summary LIMIT 1");
	if (!st)
		return VIEW_EDB;
	if (step_row(m, st) == SQLITE_ROW) {
		r->finalized = 1;
		r->fp16_share = col_dbl(st, 0, 0);
		r->fp16_flop_share = col_dbl(st, 1, 0);
		r->copy_share = col_dbl(st, 2, 0);
		r->steps = col_i64(st, 3, 0);
		r->overflow_steps = col_i64(st, 4, 0);
		r->skipped_steps = col_i64(st, 5, 0);
		r->min_scale = col_dbl(st, 6, NAN);
		r->max_scale = col_dbl(st, 7, NAN);
		r->wall_ns = col_i64(st, 8, r->wall_ns);
		r->step_ns = col_i64(st, 9, 0);
		r->op_count = col_i64(st, 10, 0);
		r->copy_count = col_i64(st, 11, 0);
		r->op_ns = col_i64(st, 12, 0);
		r->copy_ns = col_i64(st, 13, 0);
		r->peak_bytes = col_i64(st, 14, 0);
	}
	sqlite3_finalize(st);
	if (r->finalized)
		return read_engines(m);
	/* Not finalized: the same figures from the steps and the per-signature aggregates. */
	st = prep(m,
	          "SELECT count(*), sum(overflow), sum(skipped), min(scale), max(scale), "
	          "sum(CASE WHEN detail = 1 THEN dur_ns END), max(start_ns + coalesce(dur_ns, 0)) "
	          "FROM steps");
	if (!st)
		return VIEW_EDB;
	if (step_row(m, st) == SQLITE_ROW) {
		r->steps = col_i64(st, 0, 0);
		r->overflow_steps = col_i64(st, 1, 0);
		r->skipped_steps = col_i64(st, 2, 0);
		r->min_scale = col_dbl(st, 3, NAN);
		r->max_scale = col_dbl(st, 4, NAN);
		r->step_ns = col_i64(st, 5, 0);
		if (r->wall_ns <= 0)
			r->wall_ns = col_i64(st, 6, 0);
	}
	sqlite3_finalize(st);
	st =
	    prep(m, "SELECT sum(v.total_ns), sum(CASE WHEN s.exec_dtype IN " HALF_SQL
	            " THEN v.total_ns ELSE 0 END), sum(s.flops * v.calls), sum(CASE WHEN "
	            "s.exec_dtype IN " HALF_SQL " THEN s.flops * v.calls ELSE 0 END), sum(v.calls) "
	            "FROM op_sigs s JOIN vsig v ON v.id = s.id");
	if (!st)
		return VIEW_EDB;
	if (step_row(m, st) == SQLITE_ROW) {
		r->op_ns = col_i64(st, 0, 0);
		double half = col_dbl(st, 1, 0), fl = col_dbl(st, 2, 0), fl16 = col_dbl(st, 3, 0);
		r->fp16_share = r->op_ns > 0 ? half / (double)r->op_ns : 0;
		r->fp16_flop_share = fl > 0 ? fl16 / fl : 0;
		r->op_count = col_i64(st, 4, 0);
	}
	sqlite3_finalize(st);
	st = prep(m, "SELECT sum(total_ns), sum(calls) FROM vcsig");
	if (!st)
		return VIEW_EDB;
	if (step_row(m, st) == SQLITE_ROW) {
		r->copy_ns = col_i64(st, 0, 0);
		r->copy_count = col_i64(st, 1, 0);
	}
	sqlite3_finalize(st);
	r->copy_share = r->step_ns > 0 ? (double)r->copy_ns / (double)r->step_ns : 0;
	/* a step's memory (every context's alive then together), of the rank that has the most
	 * (each rank's memory is its own), as the memory panel and the report */
	char sql[2048];
	r->peak_bytes = amp_profile_memory_steps(m->db, "SELECT CAST(max(peak) AS INTEGER) FROM (",
	                                         NULL, ")", sql, sizeof sql)
	                    ? query_i64(m, sql, 0)
	                    : 0;
	return read_engines(m);
}

/* Fills an origin from a query whose row is (step, seq, op, name, role, function, file, line). */
static int origin_from(view_model *m, sqlite3_stmt *st)
{
	view_run *r = &m->run;
	if (!st || step_row(m, st) != SQLITE_ROW)
		return 0;
	r->has_origin = 1;
	r->origin_step = col_i64(st, 0, 0);
	r->origin_seq = col_i64(st, 1, 0);
	col_text(st, 2, r->origin_op, sizeof r->origin_op);
	col_text(st, 3, r->origin_label, sizeof r->origin_label);
	col_text(st, 4, r->origin_role, sizeof r->origin_role);
	col_text(st, 5, r->origin_function, sizeof r->origin_function);
	col_text(st, 6, r->origin_file, sizeof r->origin_file);
	r->origin_line = (int)col_i64(st, 7, 0);
	return 1;
}

#define ORIGIN_COLS                                                                                \
	"t.step, t.seq, t.op, t.name, t.role, coalesce(c.function, '?\?'), coalesce(c.file, "      \
	"'?\?'), "                                                                                 \
	"coalesce(c.line, 0) FROM tensor_stats t LEFT JOIN callsites c ON c.id = t.callsite "

/* The first non-finite origin: the origin row of the first overflow step (both served by
 * indexes).  Without any overflow step, tensor_stats is searched only if it is small. */
/* The crash's frame to name, from its backtrace ('function file:line (module+offset)' a
 * line, innermost first): the innermost outside the C library (an abort's or a raise's own
 * frames are not where the program went wrong), else the innermost.  Its function, file and
 * line, or the whole frame (crash_frame) when the symbolizer named no file. */
static void crash_site(view_run *r, const char *frames)
{
	r->crash_frame[0] = r->crash_function[0] = r->crash_file[0] = '\0';
	r->crash_line = 0;
	if (!frames || !*frames)
		return;
	const char *pick = frames;
	for (const char *p = frames; *p;) {
		size_t n = strcspn(p, "\n");
		const char *mod = memmem(p, n, " (", 2);
		int libc = mod && (strncmp(mod + 2, "libc.so", 7) == 0 ||
		                   strncmp(mod + 2, "ld-linux", 8) == 0 ||
		                   strncmp(mod + 2, "libpthread", 10) == 0);
		if (!libc) {
			pick = p;
			break;
		}
		p += n + (p[n] == '\n');
	}
	size_t n = strcspn(pick, "\n");
	snprintf(r->crash_frame, sizeof r->crash_frame, "%.*s", (int)n, pick);
	/* function, then file:line up to the module's " (" */
	char *sp = strchr(r->crash_frame, ' ');
	char *mod = strstr(r->crash_frame, " (");
	char *colon = NULL;
	if (sp && sp != mod)
		for (char *c = sp + 1; *c && c != mod; c++)
			if (*c == ':')
				colon = c;
	int line = colon ? atoi(colon + 1) : 0;
	if (!sp || !colon || line <= 0 || strncmp(sp + 1, "??", 2) == 0)
		return; /* no file: the frame as it is, module and offset included */
	snprintf(r->crash_function, sizeof r->crash_function, "%.*s", (int)(sp - r->crash_frame),
	         r->crash_frame);
	snprintf(r->crash_file, sizeof r->crash_file, "%.*s", (int)(colon - sp - 1), sp + 1);
	r->crash_line = line;
}

static void read_origin(view_model *m)
{
	int64_t first =
	    query_i64(m, "SELECT step FROM steps WHERE overflow = 1 ORDER BY step LIMIT 1", -1);
	sqlite3_stmt *st;
	if (first >= 0) {
		st = prep_args(m,
		               "SELECT " ORIGIN_COLS "WHERE t.step = ? AND t.origin = 1 "
		               "ORDER BY t.seq LIMIT 1",
		               &first, 1);
		int found = origin_from(m, st);
		sqlite3_finalize(st);
		if (found)
			return;
	}
	if (query_i64(m, "SELECT max(rowid) FROM tensor_stats", 0) > 1000000)
		return;
	st = prep(m, "SELECT " ORIGIN_COLS "WHERE t.origin = 1 ORDER BY t.step, t.seq LIMIT 1");
	origin_from(m, st);
	sqlite3_finalize(st);
}

static int read_advice(view_model *m)
{
	size_t n = (size_t)query_i64(m, "SELECT count(*) FROM advice", 0);
	if (n == 0)
		return VIEW_OK;
	m->advice = calloc(n, sizeof *m->advice);
	if (!m->advice)
		return VIEW_ENOMEM;
	sqlite3_stmt *st = prep(m, "SELECT rule, severity, message, evidence, step, callsite "
	                           "FROM advice ORDER BY CASE severity WHEN 'error' THEN 0 "
	                           "WHEN 'warning' THEN 1 ELSE 2 END, id");
	if (!st)
		return VIEW_EDB;
	while (m->nadvice < n && step_row(m, st) == SQLITE_ROW) {
		view_advice *a = &m->advice[m->nadvice++];
		col_text(st, 0, a->rule, sizeof a->rule);
		col_text(st, 1, a->severity, sizeof a->severity);
		col_text(st, 2, a->message, sizeof a->message);
		col_text(st, 3, a->evidence, sizeof a->evidence);
		a->step = col_i64(st, 4, -1);
		a->callsite = col_i64(st, 5, -1);
	}
	sqlite3_finalize(st);
	return VIEW_OK;
}

int view_model_open(const char *path, const view_model_opts *opts, view_model **out, char *err,
                    size_t errlen)
{
	view_model *m = calloc(1, sizeof *m);
	double meta_fp16 = -1, meta_copy = -1;
	int rc;
	*out = NULL;
	if (!m) {
		snprintf(err, errlen, "cannot open '%s': out of memory", path);
		return VIEW_ENOMEM;
	}
	m->nsteps = m->max_step_ns = m->nanomalies = -1;
	m->ngroups[0] = m->ngroups[1] = -1;
	m->nheadroom = m->nsites = -1;
	if (amp_profile_open(path, 0, &m->db, err, errlen) != AMP_PROFILE_OK) {
		rc = VIEW_EOPEN;
		goto fail;
	}
	view_run *r = &m->run;
	snprintf(r->path, sizeof r->path, "%s", path);
	read_meta(m, &meta_fp16, &meta_copy);
	if (make_sig_views(m, &r->finalized) != 0 || make_rank_views(m) != 0 ||
	    (rc = read_summary(m)) != VIEW_OK) {
		rc = VIEW_EDB;
		snprintf(err, errlen, "cannot open '%s': %s", path, m->errmsg);
		goto fail;
	}
	if (r->steps <= 0)
		r->steps = query_i64(m, "SELECT count(*) FROM steps", 0);
	if (r->steps <= 0) {
		rc = VIEW_EEMPTY;
		snprintf(err, errlen, "cannot open '%s': the profile holds no steps (empty run)",
		         path);
		goto fail;
	}
	r->first_step = query_i64(m, "SELECT min(step) FROM steps", 0);
	r->last_step = query_i64(m, "SELECT max(step) FROM steps", 0);
	{
		uint64_t d = (uint64_t)r->last_step - (uint64_t)r->first_step;
		r->step_span = r->last_step < r->first_step ? 0
		               : d >= (UINT64_C(1) << 62) ? INT64_C(1) << 62 : (int64_t)d + 1;
	}
	{
		/* the scale the run ended with: the scaler's last decision (at the end of the last
		 * step, which the steps' scale in force during them does not show), else the scale
		 * of the last step that recorded one (a killed run's last step did not) */
		sqlite3_stmt *st = prep(m, "SELECT scale FROM steps WHERE scale IS NOT NULL "
		                           "ORDER BY step DESC LIMIT 1");
		r->last_scale = NAN;
		if (st && step_row(m, st) == SQLITE_ROW)
			r->last_scale = col_dbl(st, 0, NAN);
		sqlite3_finalize(st);
		/* the lowest thread's last decision, as finalize's story (version 3 has the
		 * threads; before, one context's) */
		char sql[400];
		snprintf(
		    sql, sizeof sql,
		    "SELECT new_scale FROM loss_scale WHERE new_scale IS NOT NULL AND %s step >= "
		    "(SELECT max(step) FROM steps WHERE scale IS NOT NULL) "
		    "ORDER BY step DESC, rowid DESC LIMIT 1",
		    amp_profile_has_column(m->db, "loss_scale", "thread")
		        ? "coalesce(thread, -1) = (SELECT min(coalesce(thread, -1)) FROM "
		          "loss_scale) AND"
		        : "");
		st = prep(m, sql);
		if (st && step_row(m, st) == SQLITE_ROW)
			r->last_scale = col_dbl(st, 0, r->last_scale);
		sqlite3_finalize(st);
	}
	r->crashes = query_i64(m, "SELECT count(*) FROM crashes", 0);
	sqlite3_stmt *st =
	    r->crashes > 0 ? prep(m, "SELECT signal, frames FROM crashes ORDER BY t_ns, id LIMIT 1")
	                   : NULL;
	if (st && step_row(m, st) == SQLITE_ROW) {
		const char *sig = (const char *)sqlite3_column_text(st, 0);
		snprintf(r->crash_signal, sizeof r->crash_signal, "%s", sig ? sig : "");
		crash_site(r, (const char *)sqlite3_column_text(st, 1));
	}
	sqlite3_finalize(st);
	r->untraced_steps = query_i64(m, "SELECT count(*) FROM steps WHERE detail = 0", 0);
	/* a NaN or Inf loss (loss_state, schema version 3) is a loss */
	r->lossless_steps = query_i64(m,
	                              amp_profile_has_column(m->db, "steps", "loss_state")
	                                  ? "SELECT count(*) FROM steps WHERE loss IS NULL AND "
	                                    "overflow = 0 AND dur_ns IS NOT NULL AND "
	                                    "loss_state IS NULL"
	                                  : "SELECT count(*) FROM steps WHERE loss IS NULL AND "
	                                    "overflow = 0 AND dur_ns IS NOT NULL",
	                              0);
	/* damage in what the overview's first lines hold refuses the profile; in tensor_stats
	 * (the origin) or the advice, it is shown with the rest, said on every frame
	 * (view_model_damaged), and ampview exits 1 */
	if (m->damaged) {
		rc = VIEW_EDB;
		snprintf(err, errlen, "cannot open '%s': the profile is damaged (%s)", path, m->errmsg);
		goto fail;
	}
	read_origin(m);
	r->origin_unread = m->damaged;
	if ((rc = read_advice(m)) == VIEW_ENOMEM || (rc != VIEW_OK && !m->damaged)) {
		snprintf(err, errlen, "cannot open '%s': %s", path,
		         rc == VIEW_ENOMEM ? "out of memory" : m->errmsg);
		goto fail;
	}
	if (opts && opts->fp16_threshold >= 0) {
		r->fp16_threshold = opts->fp16_threshold;
		snprintf(r->threshold_source, sizeof r->threshold_source, "option");
	} else if (meta_fp16 >= 0) {
		r->fp16_threshold = meta_fp16;
		snprintf(r->threshold_source, sizeof r->threshold_source, "profile");
	} else {
		r->fp16_threshold = 70;
		snprintf(r->threshold_source, sizeof r->threshold_source, "default");
	}
	r->memcpy_threshold = opts && opts->memcpy_threshold >= 0 ? opts->memcpy_threshold
	                      : meta_copy >= 0                    ? meta_copy
	                                                          : 15;
	*out = m;
	return VIEW_OK;
fail:
	view_model_free(m);
	return rc;
}

void view_model_free(view_model *m)
{
	if (!m)
		return;
	amp_profile_close(m->db);
	free(m->advice);
	free(m->groups[0]);
	free(m->groups[1]);
	free(m->headroom);
	free(m->sites);
	free(m->source_root);
	free(m);
}

size_t view_model_advice(view_model *m, const view_advice **rows)
{
	*rows = m->advice;
	return m->nadvice;
}

/* ---- ops ------------------------------------------------------------------------------------ */
long view_model_op_groups(view_model *m, int by_label, const view_op_group **rows)
{
	by_label = by_label ? 1 : 0;
	if (m->ngroups[by_label] >= 0) {
		*rows = m->groups[by_label];
		return m->ngroups[by_label];
	}
	const char *sql[2] = {
	    "SELECT s.op, '', s.exec_dtype, coalesce(t.list, 'none'), sum(v.calls), "
	    "sum(v.total_ns), sum(s.flops * v.calls), count(*) FROM op_sigs s "
	    "JOIN vsig v ON v.id = s.id LEFT JOIN op_types t ON t.name = s.op "
	    "GROUP BY s.op, s.exec_dtype ORDER BY sum(v.total_ns) DESC, s.op, s.exec_dtype",
	    "SELECT s.op, coalesce(s.label, ''), s.exec_dtype, coalesce(t.list, 'none'), "
	    "sum(v.calls), sum(v.total_ns), sum(s.flops * v.calls), count(*) FROM op_sigs s "
	    "JOIN vsig v ON v.id = s.id LEFT JOIN op_types t ON t.name = s.op "
	    "GROUP BY s.op, coalesce(s.label, ''), s.exec_dtype "
	    "ORDER BY sum(v.total_ns) DESC, s.op, 2, s.exec_dtype",
	};
	sqlite3_stmt *st = prep(m, sql[by_label]);
	if (!st)
		return VIEW_EDB;
	size_t cap = 0, n = 0;
	view_op_group *g = NULL;
	int64_t all = 0;
	int rc;
	while ((rc = step_row(m, st)) == SQLITE_ROW) {
		if (n == cap) {
			size_t nc = cap ? cap * 2 : 64;
			view_op_group *ng = realloc(g, nc * sizeof *g);
			if (!ng) {
				free(g);
				sqlite3_finalize(st);
				return VIEW_ENOMEM;
			}
			g = ng;
			cap = nc;
		}
		view_op_group *x = &g[n++];
		memset(x, 0, sizeof *x);
		col_text(st, 0, x->op, sizeof x->op);
		col_text(st, 1, x->label, sizeof x->label);
		col_text(st, 2, x->dtype, sizeof x->dtype);
		col_text(st, 3, x->list, sizeof x->list);
		x->calls = col_i64(st, 4, 0);
		x->total_ns = col_i64(st, 5, 0);
		x->flops = col_i64(st, 6, 0);
		x->nsigs = (int)col_i64(st, 7, 0);
		x->mean_ns = x->calls ? (double)x->total_ns / (double)x->calls : 0;
		x->half = !strcmp(x->dtype, "fp16") || !strcmp(x->dtype, "bf16") ||
		          !strcmp(x->dtype, "half");
		x->candidate = !x->half && (!strcmp(x->list, "white") || !strcmp(x->list, "gray"));
		all += x->total_ns;
	}
	sqlite3_finalize(st);
	if (rc != SQLITE_DONE) {
		free(g);
		return VIEW_EDB;
	}
	for (size_t i = 0; i < n; i++)
		g[i].share = all > 0 ? (double)g[i].total_ns / (double)all : 0;
	m->groups[by_label] = g;
	m->ngroups[by_label] = (long)n;
	*rows = g;
	return (long)n;
}

#define GROUP_WHERE "s.op = ?1 AND s.exec_dtype = ?2 AND (?3 IS NULL OR coalesce(s.label, '') = ?3)"

static void bind_group(sqlite3_stmt *st, const view_op_group *g, int by_label)
{
	sqlite3_bind_text(st, 1, g->op, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 2, g->dtype, -1, SQLITE_STATIC);
	if (by_label)
		sqlite3_bind_text(st, 3, g->label, -1, SQLITE_STATIC);
	else
		sqlite3_bind_null(st, 3);
}

static void read_site_row(sqlite3_stmt *st, void *row)
{
	view_site_row *r = row;
	r->id = col_i64(st, 0, 0);
	col_text(st, 1, r->function, sizeof r->function);
	col_text(st, 2, r->file, sizeof r->file);
	r->line = (int)col_i64(st, 3, 0);
	r->calls = col_i64(st, 4, 0);
	r->total_ns = col_i64(st, 5, 0);
	col_text(st, 6, r->shape, sizeof r->shape);
	col_text(st, 7, r->phase, sizeof r->phase);
}

long view_model_group_sites(view_model *m, const view_op_group *g, int by_label,
                            view_site_row *rows, long max)
{
	sqlite3_stmt *st =
	    prep(m, "SELECT coalesce(c.id, 0), coalesce(c.function, '?\?'), "
	            "coalesce(c.file, '?\?'), coalesce(c.line, 0), sum(v.calls), "
	            "sum(v.total_ns), min(s.shape), min(s.phase) FROM op_sigs s "
	            "JOIN vsig v ON v.id = s.id "
	            "LEFT JOIN callsites c ON c.id = s.callsite WHERE " GROUP_WHERE
	            " GROUP BY s.callsite ORDER BY sum(v.total_ns) DESC, 1 LIMIT ?4");
	if (st) {
		bind_group(st, g, by_label);
		sqlite3_bind_int64(st, 4, max);
	}
	return read_rows(m, st, rows, sizeof *rows, max, read_site_row);
}

static void read_group_step(sqlite3_stmt *st, void *row)
{
	view_group_step *r = row;
	r->step = col_i64(st, 0, 0);
	r->calls = col_i64(st, 1, 0);
	r->total_ns = col_i64(st, 2, 0);
}

long view_model_group_steps(view_model *m, const view_op_group *g, int by_label, int64_t step_lo,
                            int64_t step_hi, view_group_step *rows, long max)
{
	sqlite3_stmt *st = prep(m, "SELECT e.step, count(*), sum(e.dur_ns) FROM op_events e "
	                           "WHERE e.step BETWEEN ?4 AND ?5 AND e.sig IN "
	                           "(SELECT s.id FROM op_sigs s WHERE " GROUP_WHERE ") "
	                           "GROUP BY e.step ORDER BY e.step LIMIT ?6");
	if (st) {
		bind_group(st, g, by_label);
		sqlite3_bind_int64(st, 4, step_lo);
		sqlite3_bind_int64(st, 5, step_hi);
		sqlite3_bind_int64(st, 6, max);
	}
	return read_rows(m, st, rows, sizeof *rows, max, read_group_step);
}

/* ---- steps ---------------------------------------------------------------------------------- */
int64_t view_model_step_count(view_model *m)
{
	if (m->nsteps < 0)
		m->nsteps = query_i64(m, "SELECT count(*) FROM steps", 0);
	return m->nsteps;
}

int64_t view_model_step_index(view_model *m, int64_t step)
{
	return query_i64_arg(m, "SELECT count(*) FROM steps WHERE step < ?", step, 0);
}

int64_t view_model_max_step_ns(view_model *m)
{
	if (m->max_step_ns < 0)
		m->max_step_ns = query_i64(m, "SELECT max(dur_ns) FROM steps", 0);
	return m->max_step_ns;
}

static view_step *find_step(view_step *rows, long n, int64_t step)
{
	long lo = 0, hi = n;
	while (lo < hi) {
		long mid = (lo + hi) / 2;
		if (rows[mid].step == step)
			return &rows[mid];
		if (rows[mid].step < step)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

static void read_step(sqlite3_stmt *st, void *row)
{
	view_step *s = row;
	s->step = col_i64(st, 0, 0);
	s->start_ns = col_i64(st, 1, 0);
	s->dur_ns = col_i64(st, 2, -1);
	s->loss = col_dbl(st, 3, NAN);
	s->scale = col_dbl(st, 4, NAN);
	s->overflow = (int)col_i64(st, 5, 0);
	s->skipped = (int)col_i64(st, 6, 0);
	s->detail = (int)col_i64(st, 7, 0);
	const unsigned char *state = sqlite3_column_text(st, 8);
	s->loss_nonfinite = 0;
	if (state && strcmp((const char *)state, "finite") != 0) {
		s->loss_nonfinite = 1;
		s->loss = strcmp((const char *)state, "nan") == 0    ? (double)NAN
		          : strcmp((const char *)state, "-inf") == 0 ? -(double)INFINITY
		                                                      : (double)INFINITY;
	}
	s->fp16_ns = s->fp32_ns = s->copy_ns = s->other_ns = -1;
}

long view_model_steps(view_model *m, int64_t offset, view_step *rows, long max)
{
	/* loss_state since schema version 3 */
	const char *sql = amp_profile_has_column(m->db, "steps", "loss_state")
	                      ? "SELECT step, start_ns, dur_ns, loss, scale, overflow, skipped, "
	                        "detail, loss_state FROM steps ORDER BY step LIMIT ? OFFSET ?"
	                      : "SELECT step, start_ns, dur_ns, loss, scale, overflow, skipped, "
	                        "detail, NULL FROM steps ORDER BY step LIMIT ? OFFSET ?";
	long n = read_rows(m, prep_args(m, sql, (const int64_t[]){max, offset}, 2), rows,
	                   sizeof *rows, max, read_step);
	if (n <= 0)
		return n;
	/* the split of the page's steps: one range query per event table */
	const int64_t range[2] = {rows[0].step, rows[n - 1].step};
	/* a merged profile: the events of the rank whose steps these are */
	char rank_e[48] = "", rank_c[48] = "", sql_ops[512], sql_copies[256];
	if (m->step_rank >= 0) {
		snprintf(rank_e, sizeof rank_e, " AND e.rank = %lld", (long long)m->step_rank);
		snprintf(rank_c, sizeof rank_c, " AND rank = %lld", (long long)m->step_rank);
	}
	snprintf(sql_ops, sizeof sql_ops,
	         "SELECT e.step, sum(CASE WHEN s.exec_dtype IN " HALF_SQL " THEN e.dur_ns "
	         "ELSE 0 END), sum(CASE WHEN s.exec_dtype IN " HALF_SQL " THEN 0 ELSE e.dur_ns "
	         "END) FROM op_events e JOIN op_sigs s ON s.id = e.sig "
	         "WHERE e.step BETWEEN ? AND ?%s GROUP BY e.step", rank_e);
	snprintf(sql_copies, sizeof sql_copies,
	         "SELECT step, sum(dur_ns) FROM copy_events WHERE step BETWEEN ? AND ?%s "
	         "GROUP BY step", rank_c);
	sqlite3_stmt *st = prep_args(m, sql_ops, range, 2);
	if (!st)
		return VIEW_EDB;
	int rc;
	while ((rc = step_row(m, st)) == SQLITE_ROW) {
		view_step *s = find_step(rows, n, col_i64(st, 0, 0));
		if (s) {
			s->fp16_ns = col_i64(st, 1, 0);
			s->fp32_ns = col_i64(st, 2, 0);
			s->copy_ns = 0;
		}
	}
	if (loop_end(st, rc) != VIEW_OK)
		return VIEW_EDB;
	st = prep_args(m, sql_copies, range, 2);
	if (!st)
		return VIEW_EDB;
	while ((rc = step_row(m, st)) == SQLITE_ROW) {
		view_step *s = find_step(rows, n, col_i64(st, 0, 0));
		if (s) {
			if (s->fp16_ns < 0)
				s->fp16_ns = s->fp32_ns = 0;
			s->copy_ns = col_i64(st, 1, 0);
		}
	}
	if (loop_end(st, rc) != VIEW_OK)
		return VIEW_EDB;
	for (long i = 0; i < n; i++) {
		view_step *s = &rows[i];
		if (s->fp16_ns < 0)
			continue;
		int64_t busy = s->fp16_ns + s->fp32_ns + s->copy_ns;
		s->other_ns = s->dur_ns > busy ? s->dur_ns - busy : 0;
	}
	return n;
}

/* ---- loss scale ----------------------------------------------------------------------------- */
long view_model_scale_buckets(view_model *m, view_scale_bucket *b, long n)
{
	const view_run *r = &m->run;
	if (n <= 0 || r->last_step < r->first_step)
		return 0;
	/* steps are the application's numbers, any int64: the span and the bucket of a step are
	 * computed in 128 bits (span = 2^64 when the steps cover every int64) */
	__extension__ typedef unsigned __int128 u128;
	u128 span = (u128)((uint64_t)r->last_step - (uint64_t)r->first_step) + 1;
	if (span < (u128)n)
		n = (long)span;
	for (long i = 0; i < n; i++) {
		b[i] = (view_scale_bucket){0};
		/* column i holds the steps off with floor(off n / span) = i, the rule the rows
		 * below are put in by: off from ceil(span i / n) to ceil(span (i + 1) / n) - 1 */
		u128 f = (span * (u128)i + (u128)n - 1) / (u128)n,
		     l = (span * (u128)(i + 1) + (u128)n - 1) / (u128)n - 1;
		b[i].first = (int64_t)((uint64_t)r->first_step + (uint64_t)f);
		b[i].last = (int64_t)((uint64_t)r->first_step + (uint64_t)l);
		b[i].min_scale = INFINITY;
		b[i].max_scale = -INFINITY;
		b[i].first_overflow = -1;
	}
	sqlite3_stmt *st =
	    prep(m, "SELECT step, scale, overflow, skipped FROM steps ORDER BY step");
	if (!st)
		return VIEW_EDB;
	int rc;
	while ((rc = step_row(m, st)) == SQLITE_ROW) {
		int64_t step = col_i64(st, 0, 0);
		if (step < r->first_step || step > r->last_step)
			continue;
		u128 off = (u128)((uint64_t)step - (uint64_t)r->first_step);
		long i = (long)(off * (u128)n / span);
		if (i < 0 || i >= n)
			continue;
		view_scale_bucket *x = &b[i];
		double s = col_dbl(st, 1, NAN);
		if (!isnan(s)) {
			x->min_scale = s < x->min_scale ? s : x->min_scale;
			x->max_scale = s > x->max_scale ? s : x->max_scale;
		}
		if (col_i64(st, 2, 0)) {
			if (x->first_overflow < 0)
				x->first_overflow = step;
			x->overflows++;
		}
		x->skipped += col_i64(st, 3, 0) ? 1 : 0;
		x->n++;
	}
	return loop_end(st, rc) == VIEW_OK ? n : VIEW_EDB;
}

/* ---- anomalies ------------------------------------------------------------------------------ */
/* The steps that are anomalies, as ampdump --list and the report count them: an overflow, a
 * non-finite loss (schema version 3) or a non-finite origin (a NaN from an invalid operation
 * whose gradients stayed finite, say). */
static const char *anomaly_where(view_model *m)
{
	if (!m->anomaly_where[0])
		snprintf(m->anomaly_where, sizeof m->anomaly_where, "(overflow = 1%s%s)",
		         amp_profile_has_column(m->db, "steps", "loss_state")
		             ? " OR loss_state IN ('nan', 'inf', '-inf')" : "",
		         amp_profile_has_table(m->db, "nonfinite")
		             ? " OR step IN (SELECT step FROM nonfinite)" : "");
	return m->anomaly_where;
}

int64_t view_model_anomaly_count(view_model *m)
{
	if (m->nanomalies < 0) {
		char sql[256];
		snprintf(sql, sizeof sql, "SELECT count(DISTINCT step) FROM steps WHERE %s",
		         anomaly_where(m));
		m->nanomalies = query_i64(m, sql, 0);
	}
	return m->nanomalies;
}

int64_t view_model_next_overflow(view_model *m, int64_t after, int dir)
{
	return query_i64_arg(m,
	                     dir < 0 ? "SELECT step FROM steps WHERE overflow = 1 AND step < ? "
	                               "ORDER BY step DESC LIMIT 1"
	                             : "SELECT step FROM steps WHERE overflow = 1 AND step > ? "
	                               "ORDER BY step LIMIT 1",
	                     after, -1);
}

int64_t view_model_anomaly_index(view_model *m, int64_t step)
{
	/* NULL, so -1, unless step itself is an anomaly */
	char sql[512];
	const char *w = anomaly_where(m);
	snprintf(sql, sizeof sql,
	         "SELECT CASE WHEN EXISTS (SELECT 1 FROM steps WHERE %s AND step = ?1) THEN "
	         "(SELECT count(DISTINCT step) FROM steps WHERE %s AND step < ?1) END", w, w);
	return query_i64_arg(m, sql, step, -1);
}

static void read_anomaly(sqlite3_stmt *st, void *row)
{
	view_anomaly *a = row;
	a->step = col_i64(st, 0, 0);
	a->scale = col_dbl(st, 1, NAN);
	a->skipped = (int)col_i64(st, 2, 0);
}

long view_model_anomalies(view_model *m, int64_t offset, view_anomaly *rows, long max)
{
	char sql[640];
	snprintf(sql, sizeof sql, "SELECT step, min(scale), max(skipped) FROM steps WHERE %s "
	                          "GROUP BY step ORDER BY step LIMIT ? OFFSET ?", anomaly_where(m));
	long n = read_rows(m, prep_args(m, sql, (const int64_t[]){max, offset}, 2), rows,
	                   sizeof *rows, max, read_anomaly);
	if (n < 0)
		return n;
	/* the class finalize gave the origin (no nonfinite table: an older or unfinalized profile) */
	int classes = amp_profile_has_table(m->db, "nonfinite");
	/* several ranks: the detail shows one rank's tensors, the origin's (else the lowest with
	 * non-finite values, else the lowest); counted in tensor_stats, as `steps` holds the
	 * lowest rank's rows alone here (model_open) */
	int ranked = amp_profile_has_column(m->db, "tensor_stats", "rank") &&
	             amp_profile_has_column(m->db, "nonfinite", "rank") &&
	             query_i64(m, "SELECT count(DISTINCT rank) FROM tensor_stats", 1) > 1;
	/* the origin, and the count of non-finite tensors, of that rank (?2) */
	snprintf(sql, sizeof sql,
	         "SELECT t.op, t.name, coalesce(c.file, '?\?'), coalesce(c.line, 0), %s FROM "
	         "tensor_stats t LEFT JOIN callsites c ON c.id = t.callsite WHERE t.step = ?1 AND "
	         "t.origin = 1 %s ORDER BY t.seq LIMIT 1",
	         !classes ? "NULL"
	         : ranked ? "(SELECT class FROM nonfinite n WHERE n.step = t.step AND n.seq = t.seq "
	                    "AND n.rank IS t.rank LIMIT 1)"
	                  : "(SELECT class FROM nonfinite n WHERE n.step = t.step AND n.seq = t.seq "
	                    "LIMIT 1)",
	         ranked ? "AND t.rank = ?2" : "AND ?2 < 0");
	sqlite3_stmt *org = prep(m, sql);
	sqlite3_stmt *cnt = prep(m, ranked ? "SELECT count(*) FROM tensor_stats WHERE step = ?1 AND "
	                                     "(nan > 0 OR inf > 0) AND rank = ?2"
	                                   : "SELECT count(*) FROM tensor_stats WHERE step = ?1 AND "
	                                     "(nan > 0 OR inf > 0) AND ?2 < 0");
	sqlite3_stmt *rk = ranked ? prep(m, "SELECT rank FROM tensor_stats WHERE step = ? ORDER BY "
	                                    "origin = 1 DESC, (nan > 0 OR inf > 0) DESC, rank "
	                                    "LIMIT 1")
	                          : NULL;
	for (long i = 0; org && cnt && i < n; i++) {
		view_anomaly *a = &rows[i];
		a->rank = -1;
		if (rk) {
			sqlite3_bind_int64(rk, 1, a->step);
			if (step_row(m, rk) == SQLITE_ROW)
				a->rank = col_i64(rk, 0, -1);
			sqlite3_reset(rk);
		}
		sqlite3_bind_int64(org, 1, a->step);
		sqlite3_bind_int64(org, 2, a->rank);
		if (step_row(m, org) == SQLITE_ROW) {
			a->has_origin = 1;
			col_text(org, 0, a->origin_op, sizeof a->origin_op);
			col_text(org, 1, a->origin_label, sizeof a->origin_label);
			col_text(org, 2, a->origin_file, sizeof a->origin_file);
			a->origin_line = (int)col_i64(org, 3, 0);
			char cls[32] = "";
			col_text(org, 4, cls, sizeof cls);
			a->origin_cast = strcmp(cls, "cast_overflow") == 0;
		}
		sqlite3_reset(org);
		sqlite3_bind_int64(cnt, 1, a->step);
		sqlite3_bind_int64(cnt, 2, a->rank);
		if (step_row(m, cnt) == SQLITE_ROW)
			a->nonfinite = col_i64(cnt, 0, 0);
		sqlite3_reset(cnt);
	}
	sqlite3_finalize(org);
	sqlite3_finalize(cnt);
	sqlite3_finalize(rk);
	return n;
}

int64_t view_model_step_tstat_count(view_model *m, int64_t step, int64_t rank)
{
	sqlite3_stmt *st =
	    rank < 0 ? prep_args(m, "SELECT count(*) FROM tensor_stats WHERE step = ?1",
	                         (const int64_t[]){step}, 1)
	             : prep_args(m, "SELECT count(*) FROM tensor_stats WHERE step = ?1 AND rank = ?2",
	                         (const int64_t[]){step, rank}, 2);
	int64_t n = 0;
	if (st && step_row(m, st) == SQLITE_ROW)
		n = col_i64(st, 0, 0);
	sqlite3_finalize(st);
	return n;
}

static void read_tstat(sqlite3_stmt *st, void *row)
{
	view_tstat *t = row;
	t->seq = col_i64(st, 0, 0);
	col_text(st, 1, t->op, sizeof t->op);
	col_text(st, 2, t->role, sizeof t->role);
	col_text(st, 3, t->name, sizeof t->name);
	col_text(st, 4, t->dtype, sizeof t->dtype);
	t->count = col_i64(st, 5, 0);
	t->nan = col_i64(st, 6, 0);
	t->inf = col_i64(st, 7, 0);
	t->underflow = col_i64(st, 8, 0);
	t->near_overflow = col_i64(st, 9, 0);
	t->min = col_dbl(st, 10, NAN);
	t->max = col_dbl(st, 11, NAN);
	t->absmax = col_dbl(st, 12, NAN);
	t->origin = (int)col_i64(st, 13, 0);
	col_text(st, 14, t->function, sizeof t->function);
	col_text(st, 15, t->file, sizeof t->file);
	t->line = (int)col_i64(st, 16, 0);
}

long view_model_step_tstats(view_model *m, int64_t step, int64_t rank, int64_t offset,
                            view_tstat *rows, long max)
{
	char sql[900];
	snprintf(sql, sizeof sql,
	         "SELECT t.seq, t.op, t.role, t.name, t.dtype, t.count, t.nan, "
	         "t.inf, CASE WHEN t.dtype = 'bf16' THEN 0 ELSE t.underflow END, "
	         "CASE WHEN t.dtype = 'bf16' THEN 0 ELSE t.near_overflow END, t.min, t.max, "
	         "t.absmax, "
	         "t.origin, coalesce(c.function, '?\?'), coalesce(c.file, '?\?'), "
	         "coalesce(c.line, 0) FROM tensor_stats t LEFT JOIN callsites c "
	         "ON c.id = t.callsite WHERE t.step = ?1 %s"
	         "ORDER BY t.origin DESC, (t.nan > 0 OR t.inf > 0) DESC, t.seq, "
	         "t.id LIMIT ?3 OFFSET ?4",
	         rank >= 0 ? "AND t.rank = ?2 " : "AND ?2 < 0 ");
	sqlite3_stmt *st = prep_args(m, sql, (const int64_t[]){step, rank, max, offset}, 4);
	return read_rows(m, st, rows, sizeof *rows, max, read_tstat);
}

/* Headroom per layer name, the worst HEADROOM_MAX into m->headroom: one pass over
 * tensor_stats aggregated in a hash table (no sort of the rows, no temp b-tree). */
#define HEADROOM_MAX 200
/* count, underflow, near_overflow of a row, FP16's headroom: a bf16 tensor has about FP32's
 * range, so it counts for neither (no false warnings above 32768); fp32 tensors count, as an
 * FP32 run's FP16 readiness. */
#define HEADROOM_COLS                                                                          \
	"CASE WHEN dtype = 'bf16' THEN 0 ELSE count END, "                                        \
	"CASE WHEN dtype = 'bf16' THEN 0 ELSE underflow END, "                                    \
	"CASE WHEN dtype = 'bf16' THEN 0 ELSE near_overflow END"

typedef struct name_agg {
	char *name;
	int64_t count, underflow, near_overflow, nonfinite;
} name_agg;

static uint64_t hash_str(const char *s)
{
	uint64_t h = 1469598103934665603ULL;
	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 1099511628211ULL;
	return h;
}

static int cmp_headroom(const void *pa, const void *pb)
{
	const name_agg *a = pa, *b = pb;
	/* worst first: a tensor that went non-finite before one that may */
	if (a->nonfinite != b->nonfinite)
		return a->nonfinite < b->nonfinite ? 1 : -1;
	double x = a->count ? (double)a->near_overflow / (double)a->count : 0;
	double y = b->count ? (double)b->near_overflow / (double)b->count : 0;
	if (x != y)
		return x < y ? 1 : -1;
	x = a->count ? (double)a->underflow / (double)a->count : 0;
	y = b->count ? (double)b->underflow / (double)b->count : 0;
	if (x != y)
		return x < y ? 1 : -1;
	return strcmp(a->name, b->name);
}

/* *acc += v, saturating at the ends of int64: the counts are the application's numbers. */
static void add_sat(int64_t *acc, int64_t v)
{
	if (__builtin_add_overflow(*acc, v, acc))
		*acc = v > 0 ? INT64_MAX : INT64_MIN;
}

static int scan_headroom(view_model *m)
{
	if (m->tstats_scanned)
		return VIEW_OK;
	size_t cap = 1024, used = 0;
	name_agg *tab = calloc(cap, sizeof *tab);
	sqlite3_stmt *st =
	    prep(m, "SELECT coalesce(name, op, '?'), " HEADROOM_COLS ", nan > 0 OR inf > 0 "
	            "FROM tensor_stats");
	int rc = VIEW_OK;
	if (!tab)
		rc = VIEW_ENOMEM;
	else if (!st)
		rc = VIEW_EDB;
	int step_rc = SQLITE_DONE;
	while (rc == VIEW_OK && (step_rc = step_row(m, st)) == SQLITE_ROW) {
		const char *name = (const char *)sqlite3_column_text(st, 0);
		int bad = (int)col_i64(st, 4, 0);
		if (!name)
			continue;
		if (2 * (used + 1) > cap) { /* grow and rehash */
			size_t ncap = cap * 2;
			name_agg *nt = calloc(ncap, sizeof *nt);
			if (!nt) {
				rc = VIEW_ENOMEM;
				break;
			}
			for (size_t i = 0; i < cap; i++)
				if (tab[i].name) {
					size_t j = hash_str(tab[i].name) & (ncap - 1);
					while (nt[j].name)
						j = (j + 1) & (ncap - 1);
					nt[j] = tab[i];
				}
			free(tab);
			tab = nt;
			cap = ncap;
		}
		size_t j = hash_str(name) & (cap - 1);
		while (tab[j].name && strcmp(tab[j].name, name) != 0)
			j = (j + 1) & (cap - 1);
		if (!tab[j].name) {
			tab[j].name = strdup(name);
			if (!tab[j].name) {
				rc = VIEW_ENOMEM;
				break;
			}
			used++;
		}
		add_sat(&tab[j].count, col_i64(st, 1, 0));
		add_sat(&tab[j].underflow, col_i64(st, 2, 0));
		add_sat(&tab[j].near_overflow, col_i64(st, 3, 0));
		add_sat(&tab[j].nonfinite, bad);
	}
	if (rc == VIEW_OK && step_rc != SQLITE_DONE && step_rc != SQLITE_ROW)
		rc = VIEW_EDB;
	sqlite3_finalize(st);
	if (rc == VIEW_OK) {
		size_t n = 0;
		for (size_t i = 0; i < cap; i++)
			if (tab[i].name && tab[i].count > 0)
				tab[n++] = tab[i];
			else if (tab[i].name) {
				free(tab[i].name);
				tab[i].name = NULL;
			}
		qsort(tab, n, sizeof *tab, cmp_headroom);
		long keep = n < HEADROOM_MAX ? (long)n : HEADROOM_MAX;
		m->headroom = calloc((size_t)(keep ? keep : 1), sizeof *m->headroom);
		if (!m->headroom)
			rc = VIEW_ENOMEM;
		for (long i = 0; m->headroom && i < keep; i++) {
			view_headroom *h = &m->headroom[i];
			snprintf(h->name, sizeof h->name, "%s", tab[i].name);
			h->count = tab[i].count;
			h->underflow = tab[i].underflow;
			h->near_overflow = tab[i].near_overflow;
			h->nonfinite = tab[i].nonfinite;
		}
		m->nheadroom = m->headroom ? keep : -1;
		for (size_t i = 0; i < n; i++)
			free(tab[i].name);
	} else {
		for (size_t i = 0; tab && i < cap; i++)
			free(tab[i].name);
	}
	free(tab);
	if (rc == VIEW_OK)
		m->tstats_scanned = 1;
	return rc;
}

long view_model_headroom(view_model *m, const view_headroom **rows)
{
	int rc = scan_headroom(m);
	if (rc != VIEW_OK)
		return rc;
	*rows = m->headroom;
	return m->nheadroom;
}

/* ---- call sites ----------------------------------------------------------------------------- */
/* Sites by id: an index sorted by id, for the per-site queries that come back in id order
 * while the sites are kept in order of time (a profile may hold thousands of them). */
typedef struct site_index {
	int64_t id;
	long at;
} site_index;

static int cmp_site_index(const void *pa, const void *pb)
{
	const site_index *a = pa, *b = pb;
	return a->id < b->id ? -1 : a->id > b->id;
}

/* Returns the index of n sites (free with free()), NULL if out of memory. */
static site_index *index_sites(const view_callsite *s, long n)
{
	site_index *x = malloc((size_t)(n > 0 ? n : 1) * sizeof *x);
	for (long i = 0; x && i < n; i++)
		x[i] = (site_index){s[i].id, i};
	if (x)
		qsort(x, (size_t)n, sizeof *x, cmp_site_index);
	return x;
}

static view_callsite *site_by_id(view_callsite *s, const site_index *x, long n, int64_t id)
{
	site_index key = {id, 0};
	const site_index *hit = bsearch(&key, x, (size_t)n, sizeof *x, cmp_site_index);
	return hit ? &s[hit->at] : NULL;
}

/* Fills what[] of each site from its op types (by time) or, for a site that launched no op,
 * its copy kinds.  Two launches on one source line (amp_backward and a read, say) are two
 * sites with the same file:line; this is what tells them apart.  Best effort: on an SQLite
 * error the descriptions stay empty. */
static void describe_sites(view_model *m, view_callsite *s, const site_index *ix, long n)
{
	/* per site: distinct op types, op types outside the backward phase, copy kinds */
	typedef struct mix {
		int ops, forward, copies;
		char op[64], copy[32];
	} mix;
	mix *x = calloc((size_t)(n > 0 ? n : 1), sizeof *x);
	sqlite3_stmt *st =
	    prep(m, "SELECT s.callsite, 0, s.op, max(s.phase <> 'backward'), sum(v.total_ns) "
	            "FROM op_sigs s JOIN vsig v ON v.id = s.id WHERE s.callsite IS NOT NULL "
	            "GROUP BY s.callsite, s.op "
	            "UNION ALL SELECT s.callsite, 1, s.kind, 0, sum(v.total_ns) FROM copy_sigs s "
	            "JOIN vcsig v ON v.id = s.id WHERE s.callsite IS NOT NULL "
	            "GROUP BY s.callsite, s.kind ORDER BY 1, 2, 5 DESC, 3");
	while (x && st && step_row(m, st) == SQLITE_ROW) {
		view_callsite *c = site_by_id(s, ix, n, col_i64(st, 0, -1));
		if (!c)
			continue;
		mix *k = &x[c - s];
		if (col_i64(st, 1, 0) == 0) {
			if (k->ops++ == 0)
				col_text(st, 2, k->op, sizeof k->op);
			k->forward += col_i64(st, 3, 0) != 0;
		} else if (k->copies++ == 0) {
			col_text(st, 2, k->copy, sizeof k->copy);
		}
	}
	sqlite3_finalize(st);
	for (long i = 0; x && i < n; i++) {
		const mix *k = &x[i];
		char *w = s[i].what;
		size_t len = sizeof s[i].what;
		if (k->ops > 1 && k->forward == 0)
			snprintf(w, len, "backward");
		else if (k->ops > 1)
			snprintf(w, len, "%s+%d", k->op, k->ops - 1);
		else if (k->ops == 1)
			snprintf(w, len, "%s", k->op);
		else if (k->copies > 1)
			snprintf(w, len, "copy %s+%d", k->copy, k->copies - 1);
		else if (k->copies == 1)
			snprintf(w, len, "copy %s", k->copy);
	}
	free(x);
}

const char *view_model_source_root(view_model *m)
{
	if (m->source_root)
		return m->source_root;
	char root[512] = "";
	size_t rlen = 0, min_dlen = SIZE_MAX;
	int any = 0, relative = 0;
	sqlite3_stmt *st = prep(m, "SELECT DISTINCT file FROM callsites WHERE file IS NOT NULL "
	                           "AND file NOT IN ('', '?\?') ORDER BY file");
	while (st && step_row(m, st) == SQLITE_ROW) {
		const char *f = (const char *)sqlite3_column_text(st, 0);
		if (!f || f[0] != '/') {
			relative = 1;
			break;
		}
		size_t dlen = (size_t)(strrchr(f, '/') - f) + 1; /* f's directory with its '/' */
		min_dlen = dlen < min_dlen ? dlen : min_dlen;
		if (!any++) {
			rlen = dlen < sizeof root ? dlen : 0;
			memcpy(root, f, rlen);
			continue;
		}
		/* the longest common prefix that ends with '/' */
		size_t i = 0;
		while (i < rlen && i < dlen && root[i] == f[i])
			i++;
		while (i > 0 && root[i - 1] != '/')
			i--;
		rlen = i;
	}
	sqlite3_finalize(st);
	/* a file directly in the common directory would show as a bare name: keep the
	 * directory's own name in the paths */
	if (rlen > 1 && min_dlen == rlen) {
		rlen--;
		while (rlen > 0 && root[rlen - 1] != '/')
			rlen--;
	}
	if (relative || rlen <= 1)
		rlen = 0;
	root[rlen] = '\0';
	m->source_root = strdup(root);
	return m->source_root ? m->source_root : "";
}

const char *view_model_short_path(view_model *m, const char *file)
{
	const char *root = view_model_source_root(m);
	size_t n = strlen(root);
	if (n && file && !strncmp(file, root, n) && file[n])
		return file + n;
	return file;
}

static void read_callsite(sqlite3_stmt *st, void *row)
{
	view_callsite *c = row;
	c->id = col_i64(st, 0, 0);
	col_text(st, 1, c->function, sizeof c->function);
	col_text(st, 2, c->file, sizeof c->file);
	c->line = (int)col_i64(st, 3, 0);
	c->op_calls = col_i64(st, 4, 0);
	c->op_ns = col_i64(st, 5, 0);
	c->copy_calls = col_i64(st, 6, 0);
	c->copy_ns = col_i64(st, 7, 0);
}

long view_model_callsites(view_model *m, const view_callsite **rows)
{
	if (m->nsites >= 0) {
		*rows = m->sites;
		return m->nsites;
	}
	int64_t total = query_i64(m, "SELECT count(*) FROM callsites", 0);
	view_callsite *s = calloc((size_t)(total > 0 ? total : 1), sizeof *s);
	if (!s)
		return VIEW_ENOMEM;
	sqlite3_stmt *st = prep(
	    m, "SELECT c.id, coalesce(c.function, '?\?'), coalesce(c.file, '?\?'), "
	       "coalesce(c.line, 0), "
	       "coalesce(o.calls, 0), coalesce(o.ns, 0), coalesce(k.calls, 0), coalesce(k.ns, 0) "
	       "FROM callsites c "
	       "LEFT JOIN (SELECT s.callsite AS cs, sum(v.calls) AS calls, sum(v.total_ns) AS ns "
	       "FROM op_sigs s JOIN vsig v ON v.id = s.id GROUP BY s.callsite) o ON o.cs = c.id "
	       "LEFT JOIN (SELECT s.callsite AS cs, sum(v.calls) AS calls, sum(v.total_ns) AS ns "
	       "FROM copy_sigs s JOIN vcsig v ON v.id = s.id GROUP BY s.callsite) k ON k.cs = c.id "
	       "ORDER BY coalesce(o.ns, 0) + coalesce(k.ns, 0) DESC, c.id");
	long n = read_rows(m, st, s, sizeof *s, (long)total, read_callsite);
	if (n < 0) {
		free(s);
		return n;
	}
	/* anomalies per site: SQLite skips the clean rows itself, which is cheaper than
	 * handing every tensor_stats row to C */
	st = prep(m, "SELECT callsite, sum(nan > 0 OR inf > 0), sum(origin) FROM tensor_stats "
	             "WHERE nan > 0 OR inf > 0 OR origin = 1 GROUP BY callsite");
	site_index *ix = index_sites(s, n);
	if (!ix) {
		sqlite3_finalize(st);
		free(s);
		return VIEW_ENOMEM;
	}
	while (st && step_row(m, st) == SQLITE_ROW) {
		view_callsite *c = site_by_id(s, ix, n, col_i64(st, 0, -1));
		if (c) {
			c->anomalies = col_i64(st, 1, 0);
			c->origins = col_i64(st, 2, 0);
		}
	}
	sqlite3_finalize(st);
	describe_sites(m, s, ix, n);
	free(ix);
	m->sites = s;
	m->nsites = n;
	*rows = s;
	return n;
}

int view_model_callsite_frames(view_model *m, int64_t id, char *buf, size_t len)
{
	sqlite3_stmt *st =
	    prep_args(m, "SELECT coalesce(frames, '') FROM callsites WHERE id = ?", &id, 1);
	int rc = VIEW_EDB;
	if (len)
		buf[0] = '\0';
	if (st && step_row(m, st) == SQLITE_ROW) {
		col_text(st, 0, buf, len);
		rc = VIEW_OK;
	}
	sqlite3_finalize(st);
	return rc;
}

/* ---- ranks of a data-parallel profile --------------------------------------------------------- */
static void read_rank(sqlite3_stmt *st, void *row)
{
	view_rank *r = row;
	r->rank = col_i64(st, 0, 0);
	r->steps = col_i64(st, 1, 0);
	double n = r->steps > 0 ? (double)r->steps : 1;
	r->step_ns = col_dbl(st, 2, 0);
	r->wait_ns = col_dbl(st, 5, 0) / n;
	r->busy_ns = col_dbl(st, 6, 0) / n - r->wait_ns;
	r->compute_ns = col_dbl(st, 3, 0) / n;
	r->comm_ns = col_dbl(st, 4, 0) / n;
	r->comm_bytes = col_i64(st, 7, 0);
	col_text(st, 8, r->end, sizeof r->end);
}

long view_model_ranks(view_model *m, view_rank *rows, long max, double *comm_share,
                      double *rank_spread)
{
	if (comm_share)
		*comm_share = NAN;
	if (rank_spread)
		*rank_spread = NAN;
	if (!amp_profile_has_table(m->db, "rank_summary"))
		return 0;
	if (comm_share)
		amp_profile_query_double(m->db, comm_share, "SELECT comm_share FROM run_summary", NULL);
	if (rank_spread)
		amp_profile_query_double(m->db, rank_spread, "SELECT rank_spread FROM run_summary", NULL);
	return read_rows(m,
	                 prep(m, "SELECT rank, steps, mean_step_ns, compute_ns, comm_ns, wait_ns, "
	                         "step_ns, comm_bytes, end FROM rank_summary ORDER BY rank"),
	                 rows, sizeof *rows, max, read_rank);
}

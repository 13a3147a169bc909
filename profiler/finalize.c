/* finalize.c — indexes, summary tables and advice rules, computed once after collection.
 *
 * Works from the per-signature aggregates (op_sigs.calls/total_ns), so it is fast on large
 * profiles; a profile whose collector died before filling them gets them recomputed from the
 * event tables first.  The non-finite origins the writer listed in `nonfinite` are classified
 * (forward overflow, scaled-gradient overflow, invalid operation).  The rules are those of
 * docs/ARCHITECTURE.md §9; each writes a row into `advice` with the figures that made it fire.
 */
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "amp_text.h"
#include "prof.h"
#include "profile_db.h"

static const char *const finalize_sql =
    "CREATE INDEX IF NOT EXISTS op_events_step ON op_events(step);"
    "CREATE INDEX IF NOT EXISTS op_events_sig ON op_events(sig);"
    "CREATE INDEX IF NOT EXISTS copy_events_step ON copy_events(step);"
    "CREATE INDEX IF NOT EXISTS copy_events_sig ON copy_events(sig);"
    "CREATE INDEX IF NOT EXISTS steps_step ON steps(step);"
    "CREATE INDEX IF NOT EXISTS loss_scale_step ON loss_scale(step);"
    "CREATE INDEX IF NOT EXISTS memory_step ON memory(step);"
    "CREATE INDEX IF NOT EXISTS tensor_stats_step ON tensor_stats(step, seq);"
    "CREATE INDEX IF NOT EXISTS dumps_step ON dumps(step, seq);"
    "UPDATE op_sigs SET calls = (SELECT count(*) FROM op_events WHERE sig = op_sigs.id),"
    "  total_ns = (SELECT CAST(total(dur_ns) AS INTEGER) FROM op_events WHERE sig = op_sigs.id)"
    "  WHERE calls IS NULL;"
    "UPDATE copy_sigs SET calls = (SELECT count(*) FROM copy_events WHERE sig = copy_sigs.id),"
    "  total_ns = (SELECT CAST(total(dur_ns) AS INTEGER) FROM copy_events WHERE sig = copy_sigs.id)"
    "  WHERE calls IS NULL;"
    "DELETE FROM advice;";

/* op_summary and run_summary; the %s are the SQL list of the half engines, then three times
 * that of the half dtypes (both lists from schema/amp_names.c).  half_types lists the half
 * dtypes that ran, fp16 first ('fp16' sorts after 'bf16'). */
#define SUMMARY_SQL \
    "DELETE FROM op_summary;" \
    "INSERT INTO op_summary(op, exec_dtype, calls, total_ns, mean_ns, flops, native_ns)" \
    "  SELECT op, exec_dtype, CAST(total(calls) AS INTEGER), CAST(total(total_ns) AS INTEGER)," \
    "         total(total_ns) / max(total(calls), 1), CAST(total(flops * calls) AS INTEGER)," \
    "         CASE WHEN count(engine) = 0 THEN NULL ELSE CAST(total(CASE WHEN engine IN %s" \
    "           THEN total_ns ELSE 0 END) AS INTEGER) END" \
    "  FROM op_sigs GROUP BY op, exec_dtype;" \
    "UPDATE op_summary SET share = CAST(total_ns AS REAL) /" \
    "  nullif((SELECT total(total_ns) FROM op_summary), 0);" \
    "DELETE FROM run_summary;" \
    "INSERT INTO run_summary(fp16_share, fp16_flop_share, copy_share, steps, overflow_steps," \
    " skipped_steps, min_scale, max_scale, complete, wall_ns, step_ns, op_count, copy_count," \
    " op_ns, copy_ns, peak_bytes, native_half_share, half_types) SELECT" \
    " (SELECT total(CASE WHEN exec_dtype IN %s THEN total_ns ELSE 0 END)" \
    "   / nullif(total(total_ns), 0) FROM op_summary)," \
    " (SELECT total(CASE WHEN exec_dtype IN %s THEN flops ELSE 0 END)" \
    "   / nullif(total(flops), 0) FROM op_summary)," \
    " (SELECT total(total_ns) FROM copy_sigs) /" \
    "   nullif((SELECT total(dur_ns) FROM steps WHERE detail = 1), 0)," \
    " (SELECT count(*) FROM steps)," \
    " (SELECT count(*) FROM steps WHERE overflow = 1)," \
    " (SELECT count(*) FROM steps WHERE skipped = 1)," \
    " (SELECT min(scale) FROM steps), (SELECT max(scale) FROM steps)," \
    " coalesce((SELECT CAST(value AS INTEGER) FROM meta WHERE key = 'complete'), 0)," \
    " (SELECT CAST(value AS INTEGER) FROM meta WHERE key = 'wall_ns')," \
    " (SELECT CAST(total(dur_ns) AS INTEGER) FROM steps)," \
    " (SELECT CAST(total(calls) AS INTEGER) FROM op_sigs)," \
    " (SELECT CAST(total(calls) AS INTEGER) FROM copy_sigs)," \
    " (SELECT CAST(total(total_ns) AS INTEGER) FROM op_sigs)," \
    " (SELECT CAST(total(total_ns) AS INTEGER) FROM copy_sigs)," \
    " (SELECT max(peak) FROM memory)," \
    " (SELECT CASE WHEN count(native_ns) = 0 THEN NULL" \
    "   ELSE total(native_ns) / nullif(total(total_ns), 0) END FROM op_summary)," \
    " (SELECT group_concat(exec_dtype, '+') FROM (SELECT DISTINCT exec_dtype FROM op_summary" \
    "   WHERE exec_dtype IN %s AND calls > 0 ORDER BY exec_dtype DESC));"

/* SQL list "('a', 'b')" of the names n of 0..count-1 that pass keep (never empty: "('')"). */
static void sql_name_list(char *buf, size_t len, unsigned count, int (*keep)(unsigned),
                          const char *(*name)(unsigned))
{
	size_t used = (size_t)snprintf(buf, len, "(");
	int n = 0;
	for (unsigned i = 0; i < count && used < len; i++)
		if (keep(i))
			used += (size_t)snprintf(buf + used, len - used, "%s'%s'", n++ ? ", " : "",
			                         name(i));
	if (used < len)
		snprintf(buf + used, len - used, "%s)", n ? "" : "''");
}

static int engine_half(unsigned e) { return amp_engine_is_half((amp_engine)e); }
/* Engines that do arithmetic without half operands: where a half-typed op is emulated. */
static int engine_emulating(unsigned e)
{
	return e != AMP_ENGINE_NONE && !amp_engine_is_half((amp_engine)e);
}
static const char *engine_name(unsigned e) { return amp_engine_name((amp_engine)e); }
static int dtype_half(unsigned d) { return amp_dtype_code_is_half(d); }
static const char *dtype_name(unsigned d) { return amp_dtype_code_name(d); }

typedef struct advice_buf {
	char text[4096];
	size_t used;
} advice_buf;

static void buf_add(advice_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void buf_add(advice_buf *b, const char *fmt, ...)
{
	if (b->used >= sizeof b->text)
		return;
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(b->text + b->used, sizeof b->text - b->used, fmt, ap);
	va_end(ap);
	if (n > 0)
		b->used += (size_t)n;
	if (b->used > sizeof b->text)
		b->used = sizeof b->text;
}

static int add_advice(sqlite3 *db, const char *rule, const char *severity, const char *message,
                      const char *evidence, const char *op, int64_t step, int64_t callsite)
{
	sqlite3_stmt *st = NULL;
	int rc = -1;
	if (sqlite3_prepare_v2(db,
	                       "INSERT INTO advice(rule, severity, message, evidence, op, step, "
	                       "callsite) VALUES (?,?,?,?,?,?,?)", -1, &st, NULL) != SQLITE_OK)
		goto out;
	sqlite3_bind_text(st, 1, rule, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 2, severity, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 3, message, -1, SQLITE_TRANSIENT);
	if (evidence && *evidence)
		sqlite3_bind_text(st, 4, evidence, -1, SQLITE_TRANSIENT);
	if (op)
		sqlite3_bind_text(st, 5, op, -1, SQLITE_TRANSIENT);
	if (step >= 0)
		sqlite3_bind_int64(st, 6, step);
	if (callsite > 0)
		sqlite3_bind_int64(st, 7, callsite);
	rc = sqlite3_step(st) == SQLITE_DONE ? 0 : -1;
out:
	sqlite3_finalize(st);
	return rc;
}

/* The first column of sql's first row, dflt on NULL, no row or error. */
static double query_double(sqlite3 *db, const char *sql, double dflt)
{
	amp_profile_query_double(db, &dflt, sql, NULL);
	return dflt;
}

/* The same as text into buf, "" on NULL, no row or error. */
static void query_text(sqlite3 *db, const char *sql, char *buf, size_t len)
{
	buf[0] = '\0';
	amp_profile_query_text(db, buf, len, sql, NULL);
}

/* The precision mode the run used (meta precision_mode), canonical: allow_mix_precision is
 * the fp16 mixed mode's other name.  "" if the runtime did not say. */
static void mode_in_force(sqlite3 *db, char *buf, size_t len)
{
	query_text(db, "SELECT value FROM meta WHERE key IN ('precision_mode', 'app.precision_mode') "
	               "ORDER BY key = 'precision_mode' DESC LIMIT 1", buf, len);
	if (strcmp(buf, "allow_mix_precision") == 0)
		snprintf(buf, len, "allow_mix_precision_fp16");
}

static int same_mode(const char *in_force, const char *mode)
{
	char m[64];
	snprintf(m, sizeof m, "%s", strcmp(mode, "allow_mix_precision") == 0
	                                ? "allow_mix_precision_fp16" : mode);
	return strcmp(in_force, m) == 0;
}

/* Text of column i for a message or an evidence line: op names, labels and file names come
 * from the application, so they are sanitized (amp_sanitize: one line, no escapes, valid
 * UTF-8) before they are written into advice — a newline in a label cannot forge an evidence
 * line.  The result lives in one of COL_TEXT_BUFS rotating buffers: enough for the columns
 * one row of a rule uses at once. */
#define COL_TEXT_BUFS 16
static const char *col_text(sqlite3_stmt *st, int i)
{
	static char bufs[COL_TEXT_BUFS][AMP_STRING_MAX + 16];
	static unsigned next;
	const unsigned char *t = sqlite3_column_text(st, i);
	char *b = bufs[next++ % COL_TEXT_BUFS];
	amp_sanitize(t ? (const char *)t : "", b, sizeof bufs[0]);
	return b;
}

/* Low half share (labelled by the half types that ran): list the FP32 ops whose type has a half
 * kernel and is not black-listed; the mode that would run them in half is suggested only when
 * a mixed mode is not already in force. */
static int rule_fp16(sqlite3 *db, double thr)
{
	double share = query_double(db, "SELECT fp16_share FROM run_summary", (double)NAN);
	if (!(share == share) || share * 100.0 >= thr)
		return 0;
	char types[32], mode[64];
	query_text(db, "SELECT half_types FROM run_summary", types, sizeof types);
	mode_in_force(db, mode, sizeof mode);
	const char *label = amp_profile_half_label(types);
	int bf16 = strcmp(types, "bf16") == 0;
	const char *half = bf16 ? "BF16" : strcmp(types, "fp16+bf16") == 0 ? "a half type" : "FP16";
	const char *want = bf16 ? "allow_mix_precision_bf16" : "allow_mix_precision";
	char use[160];
	if (strncmp(mode, "allow_mix_precision", 19) == 0)
		snprintf(use, sizeof use, "add them to custom_white_list");
	else
		snprintf(use, sizeof use, "use precision_mode = %s or add them to custom_white_list",
		         want);
	advice_buf ev = {.used = 0};
	sqlite3_stmt *st = NULL;
	int n = 0;
	double total = query_double(db, "SELECT total(total_ns) FROM op_summary", 0);
	if (sqlite3_prepare_v2(db,
	                       "SELECT s.op, total(s.total_ns), total(s.calls) FROM op_sigs s "
	                       "JOIN op_types t ON t.name = s.op "
	                       "WHERE s.exec_dtype = 'fp32' AND t.list IN ('white', 'gray') "
	                       "GROUP BY s.op ORDER BY 2 DESC, 1 LIMIT 8", -1, &st, NULL) != SQLITE_OK)
		return -1;
	char names[512] = "";
	size_t nl = 0;
	while (sqlite3_step(st) == SQLITE_ROW) {
		double t = sqlite3_column_double(st, 1);
		buf_add(&ev, "%s%s in fp32: %.3f ms over %" PRId64 " calls (%.1f %% of op time)",
		        n ? "\n" : "", col_text(st, 0), t / 1e6, (int64_t)sqlite3_column_int64(st, 2),
		        total > 0 ? 100.0 * t / total : 0.0);
		if (nl < sizeof names)
			nl += (size_t)snprintf(names + nl, sizeof names - nl, "%s%s", n ? "," : "",
			                       col_text(st, 0));
		n++;
	}
	sqlite3_finalize(st);
	char msg[1024];
	if (n)
		snprintf(msg, sizeof msg,
		         "%s is %.1f %% (below %.0f %%): %d op type(s) run in FP32 but could "
		         "run in %s; %s (%s)", label, share * 100.0, thr, n, half, use, names);
	else
		snprintf(msg, sizeof msg,
		         "%s is %.1f %% (below %.0f %%): the time goes to black-list ops; "
		         "check whether they need FP32", label, share * 100.0, thr);
	/* "FP16 share" at the start of a sentence */
	msg[0] = (char)(msg[0] == 'h' ? 'H' : msg[0]);
	return add_advice(db, "low_fp16_share", "warning", msg, ev.text, NULL, -1, -1);
}

/* Copy share above threshold: top sources by kind, label and call site. */
static int rule_copies(sqlite3 *db, double thr)
{
	double share = query_double(db, "SELECT copy_share FROM run_summary", (double)NAN);
	if (!(share == share) || share * 100.0 <= thr)
		return 0;
	advice_buf ev = {.used = 0};
	sqlite3_stmt *st = NULL;
	if (sqlite3_prepare_v2(db,
	                       "SELECT s.kind, coalesce(s.label, '-'), coalesce(c.file, '-'),"
	                       " coalesce(c.line, 0), total(s.total_ns), total(s.calls), s.callsite "
	                       "FROM copy_sigs s LEFT JOIN callsites c ON c.id = s.callsite "
	                       "GROUP BY s.kind, s.label, s.callsite ORDER BY 5 DESC, 1, 2 LIMIT 5",
	                       -1, &st, NULL) != SQLITE_OK)
		return -1;
	int n = 0, casts = 0;
	int64_t top_site = -1;
	while (sqlite3_step(st) == SQLITE_ROW) {
		const char *kind = col_text(st, 0);
		if (strcmp(kind, "cast") == 0 || strcmp(kind, "master") == 0)
			casts++;
		if (n == 0 && sqlite3_column_type(st, 6) != SQLITE_NULL)
			top_site = sqlite3_column_int64(st, 6);
		buf_add(&ev, "%s%s %s at %s:%d: %.3f ms over %" PRId64 " copies", n ? "\n" : "", kind,
		        col_text(st, 1), col_text(st, 2), sqlite3_column_int(st, 3),
		        sqlite3_column_double(st, 4) / 1e6, (int64_t)sqlite3_column_int64(st, 5));
		n++;
	}
	sqlite3_finalize(st);
	char msg[512];
	snprintf(msg, sizeof msg,
	         "memory copies take %.1f %% of step time (above %.0f %%)%s", share * 100.0, thr,
	         casts ? ": dtype casts dominate (cast thrash or repeated master-weight casts); keep "
	                 "neighbouring ops in one precision or cache the casts"
	               : "");
	return add_advice(db, "copy_share", "warning", msg, ev.text, NULL, -1, top_site);
}

/* Nonzero if a shape text "(a,b,...)" has a dimension that is not a multiple of 8. */
static int shape_unaligned(const char *shape)
{
	for (const char *p = shape; *p;) {
		if (*p >= '0' && *p <= '9') {
			char *end;
			long long d = strtoll(p, &end, 10);
			if (d % 8 != 0)
				return 1;
			p = end;
		} else {
			p++;
		}
	}
	return 0;
}

/* GEMMs whose dims are not multiples of 8 miss the fast path (the runtime's aligned flag,
 * confirmed on the recorded shape). */
static int rule_gemm(sqlite3 *db)
{
	sqlite3_stmt *st = NULL;
	double total = query_double(db, "SELECT total(total_ns) FROM op_summary", 0);
	if (sqlite3_prepare_v2(db,
	                       "SELECT op, shape, coalesce(label, '-'), total(total_ns), total(calls), "
	                       "min(callsite) FROM op_sigs WHERE aligned = 0 AND op IN "
	                       "('MatMul', 'BatchMatMul', 'Linear', 'Conv2D') "
	                       "GROUP BY op, shape, label ORDER BY 4 DESC, 1, 2", -1, &st,
	                       NULL) != SQLITE_OK)
		return -1;
	advice_buf ev = {.used = 0};
	int n = 0;
	double t_all = 0;
	char first_op[64] = "";
	int64_t site = -1;
	while (sqlite3_step(st) == SQLITE_ROW) {
		if (!shape_unaligned(col_text(st, 1)))
			continue;
		double t = sqlite3_column_double(st, 3);
		t_all += t;
		if (n >= 6) {
			n++;
			continue;
		}
		if (!n) {
			snprintf(first_op, sizeof first_op, "%s", col_text(st, 0));
			if (sqlite3_column_type(st, 5) != SQLITE_NULL)
				site = sqlite3_column_int64(st, 5);
		}
		buf_add(&ev, "%s%s %s %s: %.3f ms over %" PRId64 " calls", n ? "\n" : "",
		        col_text(st, 0), col_text(st, 2), col_text(st, 1), t / 1e6,
		        (int64_t)sqlite3_column_int64(st, 4));
		n++;
	}
	sqlite3_finalize(st);
	if (!n)
		return 0;
	char msg[512];
	snprintf(msg, sizeof msg,
	         "%d GEMM shape(s) have dimensions that are not multiples of 8 (%.1f %% of op "
	         "time): pad hidden sizes and batch to multiples of 8 for the fast FP16 path",
	         n, total > 0 ? 100.0 * t_all / total : 0.0);
	return add_advice(db, "gemm_unaligned", total > 0 && t_all / total > 0.05 ? "warning" : "info",
	                  msg, ev.text, first_op, -1, site);
}

/* Loss scale stuck at its floor or collapsing (dynamic scaling only), or outside [8, 1024]
 * (not for a static scale in a BF16 mode, which needs none). */
static int rule_scale(sqlite3 *db)
{
	double steps = query_double(db, "SELECT count(*) FROM steps WHERE scale IS NOT NULL", 0);
	if (steps <= 0)
		return 0;
	double floor_cfg = query_double(db,
	                                "SELECT CAST(value AS REAL) FROM meta WHERE key IN "
	                                "('loss_scale_min', 'app.loss_scale_min') LIMIT 1", 1.0);
	double min_scale = query_double(db, "SELECT min(scale) FROM steps", 0);
	/* the scale the run ended with: after the scaler's last decision, not the one the last
	 * step used (they differ when the last step overflowed) */
	double last = query_double(db, "SELECT scale FROM steps WHERE scale IS NOT NULL "
	                                "ORDER BY step DESC LIMIT 1", 0);
	last = query_double(db, "SELECT new_scale FROM loss_scale WHERE new_scale IS NOT NULL "
	                        "ORDER BY step DESC, rowid DESC LIMIT 1", last);
	double first = query_double(db, "SELECT scale FROM steps WHERE scale IS NOT NULL "
	                                 "ORDER BY step LIMIT 1", 0);
	double overflow = query_double(db, "SELECT count(*) FROM steps WHERE overflow = 1", 0);
	double first_overflow = query_double(db, "SELECT min(step) FROM steps WHERE overflow = 1", -1);
	char msg[512], ev[1024];
	int rc = 0;
	snprintf(ev, sizeof ev,
	         "steps %.0f, overflow steps %.0f, first scale %.9g, final %.9g, min %.9g", steps,
	         overflow, first, last, min_scale);
	/* a static scale (the BF16 modes' default, static 1) has no floor to get stuck at and
	 * cannot collapse: those rules are about dynamic scaling; and BF16, with FP32's range,
	 * needs no loss scale, so a static one outside [8, 1024] is no finding there */
	char scaling[64], mode[64];
	query_text(db, "SELECT value FROM meta WHERE key IN ('loss_scale', 'app.loss_scale') "
	               "ORDER BY key = 'loss_scale' DESC LIMIT 1", scaling, sizeof scaling);
	mode_in_force(db, mode, sizeof mode);
	double decisions = query_double(db, "SELECT count(*) FROM loss_scale WHERE reason IN "
	                                    "('hold', 'growth', 'overflow')", 0);
	double statics = query_double(db, "SELECT count(*) FROM loss_scale WHERE reason = 'static'",
	                              0);
	int is_static = (scaling[0] && strcmp(scaling, "dynamic") != 0) ||
	                (statics > 0 && decisions == 0);
	int bf16_mode = strstr(mode, "bf16") != NULL;
	if (is_static) {
		/* no floor or collapse rule */
	} else if (min_scale <= floor_cfg) {
		double at_floor = 0;
		amp_profile_query_double(db, &at_floor, "SELECT count(*) FROM steps WHERE scale <= ?",
		                         "d", floor_cfg);
		snprintf(msg, sizeof msg,
		         "loss scale reached its floor %.9g and stayed there for %.0f step(s): gradients "
		         "overflow even unscaled; look for the op that produces Inf (ampdump) and move "
		         "it to custom_black_list", floor_cfg, at_floor);
		rc |= add_advice(db, "loss_scale_floor", "error", msg, ev, NULL,
		                 (int64_t)first_overflow, -1);
	} else if (overflow >= 4 && (overflow / steps > 0.05 || last <= first / 256.0)) {
		snprintf(msg, sizeof msg,
		         "loss scale is collapsing: %.0f overflow step(s) out of %.0f, scale %.9g -> "
		         "%.9g; check the ops that overflow in FP16", overflow, steps, first, last);
		rc |= add_advice(db, "loss_scale_collapse", "warning", msg, ev, NULL,
		                 (int64_t)first_overflow, -1);
	}
	if (last > 0 && (last < 8 || last > 1024) && !(is_static && bf16_mode)) {
		snprintf(msg, sizeof msg,
		         "final loss scale %.9g is outside the usual range [8, 1024]", last);
		rc |= add_advice(db, "loss_scale_unusual", "info", msg, ev, NULL, -1, -1);
	}
	return rc;
}

/* Classifies the non-finite origins the writer listed in `nonfinite` (see profile.sql), adds a
 * row for each overflow step without a recorded origin, and copies in each step's loss and
 * loss-scaler decision.  A NaN with no Inf is an invalid operation only where overflowing
 * cannot make one: a GEMM or a reduction turns an Inf partial sum meeting its opposite into a
 * NaN, and an input that already held Inf (an overflowing cast) is an overflow too. */
static const char *const nonfinite_sql =
    "UPDATE nonfinite SET phase = CASE WHEN role = 'grad' THEN 'backward' ELSE 'forward' END"
    "  WHERE phase IS NULL AND stats_id IS NOT NULL;"
    "UPDATE nonfinite SET class = CASE"
    "  WHEN nan > 0 AND inf = 0 AND op NOT IN ('MatMul', 'BatchMatMul', 'Linear', 'Conv2D',"
    "    'Sum', 'Mean', 'LayerNorm', 'Softmax', 'LogSoftmax', 'CrossEntropy', 'Optimizer')"
    "   AND NOT EXISTS (SELECT 1 FROM tensor_stats i WHERE i.step = nonfinite.step"
    "    AND i.seq = nonfinite.seq AND i.role = 'input' AND i.inf > 0"
    "    AND (i.thread IS NULL OR nonfinite.thread IS NULL OR i.thread = nonfinite.thread))"
    "   THEN 'invalid_operation'"
    "  WHEN phase = 'forward' THEN 'forward_overflow'"
    "  ELSE 'scaled_grad_overflow' END"
    "  WHERE stats_id IS NOT NULL;"
    "DELETE FROM nonfinite WHERE stats_id IS NULL;"
    "INSERT INTO nonfinite(step, class, thread)"
    "  SELECT step, CASE WHEN loss IS NULL THEN 'forward_overflow'"
    "                    ELSE 'scaled_grad_overflow' END, thread FROM steps s"
    "  WHERE overflow = 1 AND NOT EXISTS (SELECT 1 FROM nonfinite n WHERE n.step = s.step"
    "    AND (n.thread IS NULL OR s.thread IS NULL OR n.thread = s.thread));"
    "UPDATE nonfinite SET"
    "  loss = (SELECT loss FROM steps s WHERE s.step = nonfinite.step AND (nonfinite.thread IS"
    "    NULL OR s.thread = nonfinite.thread) ORDER BY s.rowid LIMIT 1),"
    "  overflow = (SELECT overflow FROM steps s WHERE s.step = nonfinite.step AND"
    "    (nonfinite.thread IS NULL OR s.thread = nonfinite.thread) ORDER BY s.rowid LIMIT 1),"
    "  skipped = (SELECT skipped FROM steps s WHERE s.step = nonfinite.step AND"
    "    (nonfinite.thread IS NULL OR s.thread = nonfinite.thread) ORDER BY s.rowid LIMIT 1),"
    "  old_scale = (SELECT old_scale FROM loss_scale l WHERE l.step = nonfinite.step AND"
    "    l.reason <> 'init' ORDER BY l.reason = 'overflow' DESC, l.rowid LIMIT 1),"
    "  new_scale = (SELECT new_scale FROM loss_scale l WHERE l.step = nonfinite.step AND"
    "    l.reason <> 'init' ORDER BY l.reason = 'overflow' DESC, l.rowid LIMIT 1),"
    "  reason = (SELECT reason FROM loss_scale l WHERE l.step = nonfinite.step AND"
    "    l.reason <> 'init' ORDER BY l.reason = 'overflow' DESC, l.rowid LIMIT 1);";

/* "file:line" of a call site, or "" when it was not recorded or not symbolized. */
static void site_text(char *buf, size_t len, const char *file, int line)
{
	if (file && *file && strcmp(file, "??") != 0)
		snprintf(buf, len, "%s:%d", file, line);
	else
		buf[0] = '\0';
}

/* One advice row per class of the nonfinite table: its first step, how many steps, and the
 * origin of the first step, with what to do about it. */
static int rule_nonfinite(sqlite3 *db)
{
	static const char *const classes[] = {"forward_overflow", "invalid_operation",
	                                      "scaled_grad_overflow"};
	int rc = 0;
	for (size_t k = 0; k < sizeof classes / sizeof classes[0] && rc == 0; k++) {
		const char *cls = classes[k];
		sqlite3_stmt *st = NULL;
		if (sqlite3_prepare_v2(db,
		                       "SELECT n.step, n.op, coalesce(n.label, '-'), n.phase, n.role,"
		                       " n.dtype, n.nan, n.inf, n.neg_inf, c.file, c.line, n.loss,"
		                       " n.old_scale, n.new_scale, n.reason, n.callsite, n.stats_id,"
		                       " (SELECT count(DISTINCT step) FROM nonfinite WHERE class = ?1),"
		                       " (SELECT count(DISTINCT step) FROM nonfinite WHERE class = ?1"
		                       "   AND reason = 'overflow')"
		                       " FROM nonfinite n LEFT JOIN callsites c ON c.id = n.callsite"
		                       " WHERE n.class = ?1 ORDER BY n.step, n.stats_id IS NULL,"
		                       " n.stats_id LIMIT 1", -1, &st, NULL) != SQLITE_OK)
			return -1;
		sqlite3_bind_text(st, 1, cls, -1, SQLITE_STATIC);
		if (sqlite3_step(st) != SQLITE_ROW) {
			sqlite3_finalize(st);
			continue;
		}
		int64_t step = sqlite3_column_int64(st, 0);
		int have_origin = sqlite3_column_type(st, 16) != SQLITE_NULL;
		char op[64], label[128], phase[16], role[16], dtype[16], site[600], at[640];
		snprintf(op, sizeof op, "%s", col_text(st, 1));
		snprintf(label, sizeof label, "%s", col_text(st, 2));
		snprintf(phase, sizeof phase, "%s", col_text(st, 3));
		snprintf(role, sizeof role, "%s", col_text(st, 4));
		snprintf(dtype, sizeof dtype, "%s", col_text(st, 5));
		int64_t nan = sqlite3_column_int64(st, 6), inf = sqlite3_column_int64(st, 7);
		int64_t neg_inf = sqlite3_column_type(st, 8) == SQLITE_NULL ? -1
		                                                            : sqlite3_column_int64(st, 8);
		site_text(site, sizeof site, (const char *)sqlite3_column_text(st, 9),
		          sqlite3_column_int(st, 10));
		if (site[0])
			snprintf(at, sizeof at, ", called at %s", site);
		else
			at[0] = '\0';
		int loss_finite = sqlite3_column_type(st, 11) != SQLITE_NULL;
		int have_scale = sqlite3_column_type(st, 12) != SQLITE_NULL;
		double old_scale = sqlite3_column_double(st, 12), new_scale = sqlite3_column_double(st, 13);
		char reason[16];
		snprintf(reason, sizeof reason, "%s", col_text(st, 14));
		int backed_off = strcmp(reason, "overflow") == 0;
		int64_t callsite =
		    sqlite3_column_type(st, 15) == SQLITE_NULL ? -1 : sqlite3_column_int64(st, 15);
		int64_t nsteps = sqlite3_column_int64(st, 17), handled = sqlite3_column_int64(st, 18);
		sqlite3_finalize(st);

		char values[128], more[64], msg[1536];
		if (neg_inf > 0)
			snprintf(values, sizeof values, "%" PRId64 " NaN, %" PRId64 " Inf of which %" PRId64
			         " -Inf", nan, inf, neg_inf);
		else
			snprintf(values, sizeof values, "%" PRId64 " NaN, %" PRId64 " Inf", nan, inf);
		if (nsteps > 1)
			snprintf(more, sizeof more, " (first of %" PRId64 " steps)", nsteps);
		else
			snprintf(more, sizeof more, " (1 step)");
		const char *severity = "error";
		if (strcmp(cls, "forward_overflow") == 0) {
			if (have_origin)
				snprintf(msg, sizeof msg,
				         "forward overflow at step %" PRId64 "%s: %s (%s) output went "
				         "non-finite in %s (%s)%s; run %s in FP32 (custom_black_list = %s) or "
				         "keep its input in range", step, more, op, label, dtype, values, at, op,
				         op);
			else
				snprintf(msg, sizeof msg,
				         "forward overflow at step %" PRId64 "%s: the loss was not finite and "
				         "no origin was recorded; profile with --nan-check=op to name the op",
				         step, more);
		} else if (strcmp(cls, "invalid_operation") == 0) {
			snprintf(msg, sizeof msg,
			         "NaN from an invalid operation at step %" PRId64 "%s: %s (%s) %s in %s "
			         "has NaN and no Inf (%s) from finite inputs%s: an input outside the op's "
			         "domain (log or sqrt of a negative, 0/0, 0*Inf); fix the values fed to it",
			         step, more, op, label, role, dtype, values, at);
		} else {
			char how[256];
			if (have_scale && backed_off)
				snprintf(how, sizeof how, "handled by the loss scaler (scale %.9g -> %.9g%s)",
				         old_scale, new_scale,
				         handled < nsteps ? ", other steps not backed off" : "");
			else if (have_scale)
				snprintf(how, sizeof how, "NOT handled: the scaler kept its scale %.9g (%s); "
				         "use a dynamic loss scale or a lower static one", new_scale, reason);
			else
				snprintf(how, sizeof how, "no loss-scaler decision was recorded");
			if (have_origin)
				snprintf(msg, sizeof msg,
				         "overflow only in the scaled gradients at step %" PRId64 "%s: %s (%s) "
				         "%s in %s (%s)%s; the loss was %s; %s", step, more, op, label, phase,
				         dtype, values, at, loss_finite ? "finite" : "not finite", how);
			else
				snprintf(msg, sizeof msg,
				         "overflow only in the scaled gradients at step %" PRId64 "%s, no origin "
				         "recorded; the loss was finite; %s", step, more, how);
			severity = have_scale && backed_off ? "info" : "warning";
		}
		/* evidence: the first few steps of the class */
		advice_buf ev = {.used = 0};
		if (sqlite3_prepare_v2(db,
		                       "SELECT step, op, coalesce(label, '-'), coalesce(role, '-'),"
		                       " coalesce(dtype, '-'), nan, inf, old_scale, new_scale, reason"
		                       " FROM nonfinite WHERE class = ? ORDER BY step, stats_id LIMIT 5",
		                       -1, &st, NULL) != SQLITE_OK)
			return -1;
		sqlite3_bind_text(st, 1, cls, -1, SQLITE_STATIC);
		for (int i = 0; sqlite3_step(st) == SQLITE_ROW; i++) {
			buf_add(&ev, "%sstep %" PRId64 ": ", i ? "\n" : "",
			        (int64_t)sqlite3_column_int64(st, 0));
			if (sqlite3_column_type(st, 1) == SQLITE_NULL)
				buf_add(&ev, "no origin recorded");
			else
				buf_add(&ev, "%s %s %s %s", col_text(st, 1), col_text(st, 2), col_text(st, 3),
				        col_text(st, 4));
			if (sqlite3_column_type(st, 5) != SQLITE_NULL)
				buf_add(&ev, ", nan %" PRId64 ", inf %" PRId64,
				        (int64_t)sqlite3_column_int64(st, 5), (int64_t)sqlite3_column_int64(st, 6));
			if (sqlite3_column_type(st, 7) != SQLITE_NULL)
				buf_add(&ev, ", scale %.9g -> %.9g (%s)", sqlite3_column_double(st, 7),
				        sqlite3_column_double(st, 8), col_text(st, 9));
		}
		sqlite3_finalize(st);
		rc = add_advice(db, cls, severity, msg, ev.text, have_origin ? op : NULL, step, callsite);
	}
	return rc;
}

/* A sensitive op (Exp, Log, Softmax) that overflowed in FP16 belongs on the black list. */
static int rule_sensitive(sqlite3 *db)
{
	sqlite3_stmt *st = NULL;
	if (sqlite3_prepare_v2(db,
	                       "SELECT op, coalesce(name, '-'), min(step), count(*), total(nan), "
	                       "total(inf), min(callsite) FROM tensor_stats WHERE dtype = 'fp16' AND "
	                       "(nan > 0 OR inf > 0) AND role = 'output' AND op IN ('Exp', 'Log', "
	                       "'Softmax', 'LogSoftmax', 'Pow') GROUP BY op ORDER BY 3, 1", -1, &st,
	                       NULL) != SQLITE_OK)
		return -1;
	int rc = 0;
	while (sqlite3_step(st) == SQLITE_ROW) {
		char msg[512], ev[512];
		const char *op = col_text(st, 0);
		snprintf(msg, sizeof msg,
		         "%s overflowed in FP16 (first at step %" PRId64 "): add it to "
		         "custom_black_list = %s so it runs in FP32", op,
		         (int64_t)sqlite3_column_int64(st, 2), op);
		snprintf(ev, sizeof ev, "%s %s: %" PRId64 " tensor(s) with %" PRId64 " NaN, %" PRId64
		         " Inf", op, col_text(st, 1), (int64_t)sqlite3_column_int64(st, 3),
		         (int64_t)sqlite3_column_int64(st, 4), (int64_t)sqlite3_column_int64(st, 5));
		rc |= add_advice(db, "sensitive_op_overflow", "error", msg, ev, op,
		                 sqlite3_column_int64(st, 2),
		                 sqlite3_column_type(st, 6) == SQLITE_NULL ? -1
		                                                           : sqlite3_column_int64(st, 6));
	}
	sqlite3_finalize(st);
	return rc;
}

/* The half engines, what they need and which mode uses them, for the emulated_half rule.
 * gemm_ratio is the engine's GEMM rate over the runtime's FP32 GEMM (fp32-fma) on the square
 * and mlp shapes, as bench/bench_kernels prints it ("<dtype> GEMM vs FP32"); the bench keeps
 * these figures up to date, per CPU class measured.  0 means not measured yet: the advice then
 * names the engine without a ratio (a guessed ratio would be worse than none). */
static const struct half_engine {
	amp_engine engine;
	const char *dtype;           /* the half type it computes */
	const char *features[2];     /* meta cpu_half_features names it needs, all of them */
	const char *feature_label;   /* how the advice names what it needs */
	const char *mode;            /* the precision mode that runs the white list on it */
	int elementwise;             /* also has elementwise half arithmetic (not only products) */
	double gemm_ratio;           /* see above */
	const char *measured_on;     /* the CPU class of gemm_ratio, NULL when it is 0 */
} half_engines[] = {
    /* Intel class (Sapphire Rapids) only; no AMX GEMM path in the library yet, so nothing to
     * measure */
    {AMP_ENGINE_AMX_BF16, "bf16", {"amx_bf16", "amx_tile"}, "AMX-BF16",
     "allow_mix_precision_bf16", 0, 0, NULL},
    /* bench_kernels on the AMD class (Zen 5, 1 thread, medians of interleaved repeats): bf16
     * GEMM / fp32 GEMM smallest ratio 1.86 on the square shapes, 1.84 on the mlp shapes; the
     * smaller is kept.  Not measured on the Intel class yet. */
    {AMP_ENGINE_AVX512_BF16, "bf16", {"avx512_bf16", NULL}, "AVX512_BF16",
     "allow_mix_precision_bf16", 0, 1.84, "the AMD class"},
    /* Intel class only; not measured yet */
    {AMP_ENGINE_AVX512_FP16, "fp16", {"avx512_fp16", NULL}, "AVX512-FP16",
     "allow_mix_precision_fp16", 1, 0, NULL},
};
#define N_HALF_ENGINES (sizeof half_engines / sizeof half_engines[0])

/* Nonzero if the space-separated list has word. */
static int has_word(const char *list, const char *word)
{
	size_t n = strlen(word);
	for (const char *p = list; (p = strstr(p, word)) != NULL; p += n)
		if ((p == list || p[-1] == ' ') && (p[n] == '\0' || p[n] == ' '))
			return 1;
	return 0;
}

static int engine_available(const struct half_engine *e, const char *features)
{
	for (int i = 0; i < 2; i++)
		if (e->features[i] && !has_word(features, e->features[i]))
			return 0;
	return 1;
}

/* Half types with an engine that has elementwise arithmetic: "('fp16')". */
static void elementwise_dtypes(char *buf, size_t len)
{
	size_t used = (size_t)snprintf(buf, len, "(''");
	for (size_t i = 0; i < N_HALF_ENGINES && used < len; i++)
		if (half_engines[i].elementwise)
			used += (size_t)snprintf(buf + used, len - used, ", '%s'", half_engines[i].dtype);
	if (used < len)
		snprintf(buf + used, len - used, ")");
}

/* Half-typed ops that ran on FP32 or scalar arithmetic where a half engine could have run
 * them (the white-list ops, whose products the half engines compute; other ops only in a half
 * type with elementwise half arithmetic, fp16: a bf16 Add converting in registers is as native
 * as bf16 gets): name them (top by time), their share of op time, the CPU features their half
 * type lacks here (from meta cpu_half_features), and, where the CPU has an engine for the
 * other half type, the mode that would use it, with the GEMM rate ratio of the two engines
 * when it was measured.  Never suggests the mode in force. */
static int rule_emulated(sqlite3 *db)
{
	char dtypes[128], emul[128], elem[64], sql[1024];
	sql_name_list(dtypes, sizeof dtypes, AMP_DTYPE_COUNT, dtype_half, dtype_name);
	sql_name_list(emul, sizeof emul, AMP_ENGINE_COUNT, engine_emulating, engine_name);
	elementwise_dtypes(elem, sizeof elem);
	snprintf(sql, sizeof sql,
	         "SELECT exec_dtype, op, engine, total(total_ns), total(calls), min(callsite) "
	         "FROM op_sigs WHERE exec_dtype IN %s AND engine IN %s AND (exec_dtype IN %s OR "
	         "op IN (SELECT name FROM op_types WHERE list = 'white')) "
	         "GROUP BY exec_dtype, op, engine ORDER BY 4 DESC, 2, 1", dtypes, emul, elem);
	double total = query_double(db, "SELECT total(total_ns) FROM op_summary", 0);
	sqlite3_stmt *st = NULL;
	if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
		return -1;
	advice_buf ev = {.used = 0};
	char names[256] = "", first_op[64] = "", engines[64] = "";
	size_t nl = 0;
	int n = 0, fp16 = 0, bf16 = 0;
	double t_all = 0;
	int64_t site = -1;
	while (sqlite3_step(st) == SQLITE_ROW) {
		const char *dt = col_text(st, 0), *op = col_text(st, 1), *eng = col_text(st, 2);
		double t = sqlite3_column_double(st, 3);
		t_all += t;
		fp16 |= strcmp(dt, "fp16") == 0;
		bf16 |= strcmp(dt, "bf16") == 0;
		if (!has_word(engines, eng))
			snprintf(engines + strlen(engines), sizeof engines - strlen(engines), "%s%s",
			         engines[0] ? " " : "", eng);
		if (n == 0) {
			snprintf(first_op, sizeof first_op, "%s", op);
			if (sqlite3_column_type(st, 5) != SQLITE_NULL)
				site = sqlite3_column_int64(st, 5);
		}
		if (n < 6) {
			buf_add(&ev, "%s%s %s on %s: %.3f ms over %" PRId64 " calls (%.1f %% of op time)",
			        n ? "\n" : "", dt, op, eng, t / 1e6, (int64_t)sqlite3_column_int64(st, 4),
			        total > 0 ? 100.0 * t / total : 0.0);
			if (n < 4 && nl < sizeof names)
				nl += (size_t)snprintf(names + nl, sizeof names - nl, "%s%s %s",
				                       n ? ", " : "", dt, op);
		}
		n++;
	}
	sqlite3_finalize(st);
	if (n == 0)
		return 0;
	if (n > 4 && nl < sizeof names)
		snprintf(names + nl, sizeof names - nl, " and %d more", n - 4);
	for (size_t i = 0; engines[i]; i++)
		if (engines[i] == ' ')
			engines[i] = '/';

	char features[256], mode[64];
	query_text(db, "SELECT value FROM meta WHERE key = 'cpu_half_features'", features,
	           sizeof features);
	int known = features[0] != '\0';
	mode_in_force(db, mode, sizeof mode);
	/* what each emulated half type lacks here, and an engine of the other type it has */
	char lacks[256] = "", alt[512] = "";
	size_t ll = 0;
	for (int pass = 0; pass < 2; pass++) {
		const char *dt = pass ? "bf16" : "fp16";
		if (!(pass ? bf16 : fp16))
			continue;
		char need[96] = "";
		int has_one = 0;
		for (size_t i = 0; i < N_HALF_ENGINES; i++)
			if (strcmp(half_engines[i].dtype, dt) == 0) {
				if (known && engine_available(&half_engines[i], features))
					has_one = 1;
				snprintf(need + strlen(need), sizeof need - strlen(need), "%s%s",
				         need[0] ? " or " : "", half_engines[i].feature_label);
			}
		if (!known)
			ll += (size_t)snprintf(lacks + ll, sizeof lacks - ll, "; %s arithmetic needs %s "
			                       "(this profile does not say what the CPU has)", dt, need);
		else if (has_one)
			ll += (size_t)snprintf(lacks + ll, sizeof lacks - ll, "; the CPU has %s but these "
			                       "ops did not use it (a library built without the path, or "
			                       "a path forced)", need);
		else
			ll += (size_t)snprintf(lacks + ll, sizeof lacks - ll, "; the CPU lacks %s, so "
			                       "%s is storage only here", need, dt);
		if (ll >= sizeof lacks)
			ll = sizeof lacks - 1;
		if (has_one || !known || alt[0])
			continue;
		for (size_t i = 0; i < N_HALF_ENGINES && !alt[0]; i++) {
			const struct half_engine *e = &half_engines[i];
			if (strcmp(e->dtype, dt) == 0 || !engine_available(e, features) ||
			    same_mode(mode, e->mode))
				continue;
			char ratio[96] = "";
			if (e->gemm_ratio > 0)
				snprintf(ratio, sizeof ratio, ", whose GEMM runs %.2fx the FP32 GEMM on %s",
				         e->gemm_ratio, e->measured_on);
			snprintf(alt, sizeof alt, "; it has %s (%s%s): precision_mode = %s would run the "
			         "white list in %s on it", e->feature_label, amp_engine_name(e->engine),
			         ratio, e->mode, e->dtype);
		}
	}
	char msg[1536];
	double share = total > 0 ? t_all / total : 0;
	snprintf(msg, sizeof msg,
	         "half-typed ops ran emulated on %s arithmetic for %.1f %% of op time (%s)%s%s",
	         engines, 100.0 * share, names, lacks, alt);
	return add_advice(db, "emulated_half", share > 0.1 ? "warning" : "info", msg, ev.text,
	                  first_op, -1, site);
}

/* The rules behind one signature for the rule table of prof_summarize. */
static int run_nonfinite(sqlite3 *db, double fp16, double copy)
{
	(void)fp16, (void)copy;
	return rule_nonfinite(db);
}
static int run_sensitive(sqlite3 *db, double fp16, double copy)
{
	(void)fp16, (void)copy;
	return rule_sensitive(db);
}
static int run_scale(sqlite3 *db, double fp16, double copy)
{
	(void)fp16, (void)copy;
	return rule_scale(db);
}
static int run_fp16(sqlite3 *db, double fp16, double copy)
{
	(void)copy;
	return rule_fp16(db, fp16);
}
static int run_emulated(sqlite3 *db, double fp16, double copy)
{
	(void)fp16, (void)copy;
	return rule_emulated(db);
}
static int run_copies(sqlite3 *db, double fp16, double copy)
{
	(void)fp16;
	return rule_copies(db, copy);
}
static int run_gemm(sqlite3 *db, double fp16, double copy)
{
	(void)fp16, (void)copy;
	return rule_gemm(db);
}

/* Runs summary_sql with the half dtypes and engines of the schema's tables. */
/* A profile that does not hold the whole run (meta incomplete: threads that found no ring,
 * records dropped in drop mode): said first, since every figure and rule below then reads a
 * part or a sample of the run. */
static int run_incomplete(sqlite3 *db, double fp16, double copy)
{
	(void)fp16;
	(void)copy;
	char why[1024], msg[1400];
	if (amp_profile_meta_get(db, "incomplete", why, sizeof why) != AMP_PROFILE_OK || !why[0])
		return 0;
	snprintf(msg, sizeof msg, "the profile does not hold the whole run: %s; the figures and "
	         "the advice here cover what was recorded (run without --drop, or with a larger "
	         "--ring-size or --rings, to record all of it)", why);
	return add_advice(db, "incomplete", "warning", msg, NULL, NULL, -1, -1);
}

static int run_summary_sql(sqlite3 *db, char **msg)
{
	char dtypes[128], engines[256];
	sql_name_list(dtypes, sizeof dtypes, AMP_DTYPE_COUNT, dtype_half, dtype_name);
	sql_name_list(engines, sizeof engines, AMP_ENGINE_COUNT, engine_half, engine_name);
	char sql[sizeof SUMMARY_SQL + 4 * sizeof dtypes + sizeof engines];
	snprintf(sql, sizeof sql, SUMMARY_SQL, engines, dtypes, dtypes, dtypes);
	return sqlite3_exec(db, sql, NULL, NULL, msg);
}

int prof_summarize(sqlite3 *db, double fp16_threshold, double memcpy_threshold)
{
	char *msg = NULL;
	int listed = amp_profile_has_table(db, "nonfinite");
	if (sqlite3_exec(db, "BEGIN", NULL, NULL, &msg) != SQLITE_OK ||
	    amp_profile_upgrade(db) != AMP_PROFILE_OK ||
	    /* a profile written before the writer listed the origins: find them once */
	    (!listed &&
	     sqlite3_exec(db, "INSERT INTO nonfinite(step, op, label, phase, role, dtype, nan, inf,"
	                      " neg_inf, callsite, seq, stats_id, thread) SELECT step, op, name,"
	                      " phase, role, dtype, nan, inf, neg_inf, callsite, seq, id, thread"
	                      " FROM tensor_stats WHERE origin = 1", NULL, NULL, &msg) != SQLITE_OK) ||
	    sqlite3_exec(db, finalize_sql, NULL, NULL, &msg) != SQLITE_OK ||
	    run_summary_sql(db, &msg) != SQLITE_OK ||
	    sqlite3_exec(db, nonfinite_sql, NULL, NULL, &msg) != SQLITE_OK) {
		prof_error(NULL, "cannot finalize the profile: %s", msg ? msg : sqlite3_errmsg(db));
		sqlite3_free(msg);
		sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
		return -1;
	}
	/* the advice rules, in order of importance; the thresholds are percentages */
	static const struct {
		const char *name;
		int (*run)(sqlite3 *db, double fp16_threshold, double memcpy_threshold);
	} rules[] = {
	    {"incomplete", run_incomplete},
	    {"nonfinite", run_nonfinite}, {"sensitive", run_sensitive}, {"scale", run_scale},
	    {"fp16", run_fp16},           {"emulated", run_emulated},   {"copies", run_copies},
	    {"gemm", run_gemm},
	};
	for (size_t i = 0; i < sizeof rules / sizeof rules[0]; i++)
		if (rules[i].run(db, fp16_threshold, memcpy_threshold) != 0) {
			prof_error(NULL, "cannot write advice (rule %s): %s", rules[i].name,
			           sqlite3_errmsg(db));
			sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
			return -1;
		}
	if (sqlite3_exec(db, "COMMIT", NULL, NULL, &msg) != SQLITE_OK) {
		prof_error(NULL, "cannot finalize the profile: %s", msg ? msg : sqlite3_errmsg(db));
		sqlite3_free(msg);
		return -1;
	}
	return 0;
}

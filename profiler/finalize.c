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

#include "amp_progress.h"
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
    " (SELECT count(*) FROM run_steps)," \
    " (SELECT count(*) FROM run_steps WHERE overflow = 1)," \
    " (SELECT count(*) FROM run_steps WHERE skipped = 1)," \
    " (SELECT min(scale) FROM run_steps), (SELECT max(scale) FROM run_steps)," \
    " coalesce((SELECT CAST(value AS INTEGER) FROM meta WHERE key = 'complete'), 0)," \
    " (SELECT CAST(value AS INTEGER) FROM meta WHERE key = 'wall_ns')," \
    " (SELECT CAST(total(dur_ns) AS INTEGER) FROM steps)," \
    " (SELECT CAST(total(calls) AS INTEGER) FROM op_sigs)," \
    " (SELECT CAST(total(calls) AS INTEGER) FROM copy_sigs)," \
    " (SELECT CAST(total(total_ns) AS INTEGER) FROM op_sigs)," \
    " (SELECT CAST(total(total_ns) AS INTEGER) FROM copy_sigs)," \
    " coalesce((SELECT max(peak) FROM memory_sum), (SELECT CAST(max(p) AS INTEGER) FROM" \
    "   (SELECT total(peak) AS p FROM memory GROUP BY step, rank)))," \
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

int prof_advice_add(sqlite3 *db, const char *rule, const char *severity, const char *message,
                    const char *evidence, const char *op, int64_t step, int64_t callsite)
{
	return add_advice(db, rule, severity, message, evidence, op, step, callsite);
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

/* "file:line" of a call site, or "" when it was not recorded or not symbolized. */
static void site_text(char *buf, size_t len, const char *file, int line)
{
	if (file && *file && strcmp(file, "??") != 0)
		snprintf(buf, len, "%s:%d", file, line);
	else
		buf[0] = '\0';
}

/* Nonzero if the list text of a custom list key ("Linear, Softmax") names op. */
static int list_names(const char *list, const char *op)
{
	size_t n = strlen(op);
	for (const char *p = list; *p;) {
		while (*p == ',' || *p == ' ' || *p == '\t')
			p++;
		const char *start = p;
		while (*p && *p != ',' && *p != ' ' && *p != '\t')
			p++;
		if ((size_t)(p - start) == n && strncmp(start, op, n) == 0)
			return 1;
	}
	return 0;
}

/* The custom_black_list value that adds op to the run's own (meta custom_black_list), into
 * buf: "Exp,Scale" after a run with Exp there, so that following the advice keeps what the list
 * held; op alone when it was empty; the run's list when op is in it already. */
static const char *black_list_with(sqlite3 *db, const char *op, char *buf, size_t len)
{
	char cur[512] = "";
	query_text(db,
	           "SELECT value FROM meta WHERE key IN ('custom_black_list', "
	           "'app.custom_black_list') ORDER BY key = 'custom_black_list' DESC LIMIT 1",
	           cur, sizeof cur);
	size_t n = strlen(cur);
	while (n > 0 && (cur[n - 1] == ' ' || cur[n - 1] == ',' || cur[n - 1] == '\t'))
		cur[--n] = '\0';
	const char *start = cur + strspn(cur, " ,\t");
	if (!*start)
		snprintf(buf, len, "%s", op);
	else if (list_names(start, op))
		snprintf(buf, len, "%s", start);
	else
		snprintf(buf, len, "%s,%s", start, op);
	return buf;
}

/* Where a configuration key was set, from meta '<key>_source' ("amp.cfg:2", "environment
 * AMP_CUSTOM_BLACK_LIST", "amp_config_set"); "" if the runtime did not say. */
static void key_source(sqlite3 *db, const char *key, char *buf, size_t len)
{
	char k[96];
	snprintf(k, sizeof k, "%s_source", key);
	buf[0] = '\0';
	amp_profile_query_text(db, buf, len,
	                       "SELECT value FROM meta WHERE key IN (?1, 'app.' || ?1) "
	                       "ORDER BY key = ?1 DESC LIMIT 1", "t", k);
}

/* " (set at amp.cfg:2)", " (set by environment AMP_X)", " (set by amp_config_set)" or "". */
static void key_source_text(sqlite3 *db, const char *key, char *buf, size_t len)
{
	char src[160];
	key_source(db, key, src, sizeof src);
	if (!src[0])
		buf[0] = '\0';
	else
		snprintf(buf, len, " (set %s %s)", strncmp(src, "environment ", 12) == 0 ||
		                                          strcmp(src, "amp_config_set") == 0 ? "by" : "at",
		         src);
}

/* Low half share (labelled by the half types that ran): list the FP32 ops whose type has a half
 * kernel and is not black-listed by default.  An op type the run's custom_black_list keeps in
 * FP32 is named with that key and where it was set (remove it from the list); the others could
 * join custom_white_list (one already there is not suggested again); the mode that would run
 * them in half is suggested only when a mixed mode is not already in force, with where the mode
 * in force was set. */
static int rule_fp16(sqlite3 *db, double thr)
{
	double share = query_double(db, "SELECT fp16_share FROM run_summary", (double)NAN);
	if (!(share == share) || share * 100.0 >= thr)
		return 0;
	char types[32], mode[64], black[512], white[512];
	query_text(db, "SELECT half_types FROM run_summary", types, sizeof types);
	mode_in_force(db, mode, sizeof mode);
	query_text(db, "SELECT value FROM meta WHERE key IN ('custom_black_list', "
	               "'app.custom_black_list') ORDER BY key = 'custom_black_list' DESC LIMIT 1",
	           black, sizeof black);
	query_text(db, "SELECT value FROM meta WHERE key IN ('custom_white_list', "
	               "'app.custom_white_list') ORDER BY key = 'custom_white_list' DESC LIMIT 1",
	           white, sizeof white);
	const char *label = amp_profile_half_label(types);
	int bf16 = strcmp(types, "bf16") == 0;
	const char *half = bf16 ? "BF16" : strcmp(types, "fp16+bf16") == 0 ? "a half type" : "FP16";
	const char *want = bf16 ? "allow_mix_precision_bf16" : "allow_mix_precision";
	int mixed = strncmp(mode, "allow_mix_precision", 19) == 0;
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
	char names[512] = "", blocked[512] = "", listed[512] = "", ranged[512] = "";
	size_t nl = 0, bl = 0, wl = 0, rl = 0;
	int n_names = 0, n_blocked = 0, n_listed = 0, n_ranged = 0;
	while (sqlite3_step(st) == SQLITE_ROW) {
		const char *op = col_text(st, 0);
		double t = sqlite3_column_double(st, 1);
		/* an op whose FP32 values pass 32768 would overflow FP16 (or come near it): it is
		 * no candidate for FP16, whatever the share (BF16 has FP32's range) */
		double absmax = 0;
		if (!bf16)
			amp_profile_query_double(db, &absmax,
			                         "SELECT max(absmax) FROM tensor_stats WHERE op = ? AND "
			                         "dtype = 'fp32' AND role <> 'grad'", "t", op);
		if (absmax > 32768.0) {
			buf_add(&ev, "%s%s in fp32: its values reach %.3g, past FP16's range",
			        n + n_ranged ? "\n" : "", op, absmax);
			if (rl < sizeof ranged)
				rl += (size_t)snprintf(ranged + rl, sizeof ranged - rl, "%s%s (%.3g)",
				                       rl ? ", " : "", op, absmax);
			n_ranged++;
			continue;
		}
		buf_add(&ev, "%s%s in fp32: %.3f ms over %" PRId64 " calls (%.1f %% of op time)",
		        n + n_ranged ? "\n" : "", op, t / 1e6, (int64_t)sqlite3_column_int64(st, 2),
		        total > 0 ? 100.0 * t / total : 0.0);
		if (list_names(black, op)) {
			if (bl < sizeof blocked)
				bl += (size_t)snprintf(blocked + bl, sizeof blocked - bl, "%s%s",
				                       n_blocked ? ", " : "", op);
			n_blocked++;
		} else if (list_names(white, op)) {
			if (wl < sizeof listed)
				wl += (size_t)snprintf(listed + wl, sizeof listed - wl, "%s%s",
				                       n_listed ? ", " : "", op);
			n_listed++;
		} else {
			if (nl < sizeof names)
				nl += (size_t)snprintf(names + nl, sizeof names - nl, "%s%s",
				                       n_names ? "," : "", op);
			n_names++;
		}
		n++;
	}
	sqlite3_finalize(st);
	char msg[2048], what[1536] = "", src[200];
	size_t wu = 0;
	if (n_blocked) {
		key_source_text(db, "custom_black_list", src, sizeof src);
		wu += (size_t)snprintf(what + wu, sizeof what - wu,
		                       "; custom_black_list = %s%s keeps %s in FP32: remove %s from that list",
		                       black, src, blocked, blocked);
	}
	if (n_names && wu < sizeof what) {
		if (mixed)
			wu += (size_t)snprintf(what + wu, sizeof what - wu,
			                       "; add them to custom_white_list (%s)", names);
		else {
			key_source_text(db, "precision_mode", src, sizeof src);
			wu += (size_t)snprintf(what + wu, sizeof what - wu,
			                       "; the mode in force is %s%s: use precision_mode = %s or add "
			                       "them to custom_white_list (%s)", mode[0] ? mode : "unknown",
			                       src, want, names);
		}
	}
	if (rl && wu < sizeof what)
		wu += (size_t)snprintf(what + wu, sizeof what - wu,
		                       "; keep %s in FP32: %s values pass 32768 (FP16 ends at 65504)",
		                       ranged, strchr(ranged, ',') ? "their" : "its");
	/* the profile has no graph: an FP32 output past FP16's range may feed any of the ops
	 * named, whose input would then overflow in the cast (cast_overflow) */
	char big_op[64] = "", big_label[128] = "";
	double big = 0;
	if (!bf16 && n_names &&
	    amp_profile_query_double(db, &big, "SELECT max(absmax) FROM tensor_stats WHERE "
	                                       "dtype = 'fp32' AND role = 'output'", NULL) ==
	        AMP_PROFILE_OK &&
	    big > 65504.0 && wu < sizeof what) {
		amp_profile_query_text(db, big_op, sizeof big_op,
		                       "SELECT op FROM tensor_stats WHERE dtype = 'fp32' AND role = "
		                       "'output' ORDER BY absmax DESC LIMIT 1", NULL);
		amp_profile_query_text(db, big_label, sizeof big_label,
		                       "SELECT name FROM tensor_stats WHERE dtype = 'fp32' AND role = "
		                       "'output' ORDER BY absmax DESC LIMIT 1", NULL);
		wu += (size_t)snprintf(what + wu, sizeof what - wu,
		                       "; but an FP32 output reaches %.3g (%s '%s'), past FP16's 65504: "
		                       "an op listed that reads it would overflow in its cast "
		                       "(cast_overflow), so list only ops that do not",
		                       big, big_op, big_label);
	}
	if (n_listed && wu < sizeof what) {
		key_source_text(db, "precision_mode", src, sizeof src);
		wu += (size_t)snprintf(what + wu, sizeof what - wu,
		                       "; %s already on custom_white_list but ran in FP32 under %s%s%s",
		                       listed, mode[0] ? mode : "the mode in force", src,
		                       mixed ? "" : ": use a mixed precision_mode");
	}
	if (n)
		snprintf(msg, sizeof msg,
		         "%s is %.1f %% (below %g %%): %d op type(s) run in FP32 but could "
		         "run in %s%s", label, share * 100.0, thr, n, half, what);
	else if (n_ranged)
		snprintf(msg, sizeof msg,
		         "%s is %.1f %% (below %g %%): the FP32 time is in ops whose values pass "
		         "FP16's range%s", label, share * 100.0, thr, what);
	else {
		/* every FP32 op is on the black list: say which take the time, and that the
		 * optimizer's FP32 master update is there by design */
		char top[512] = "";
		size_t tu = 0;
		int has_optim = 0;
		if (sqlite3_prepare_v2(db,
		                       "SELECT op, total(total_ns) FROM op_summary WHERE exec_dtype = "
		                       "'fp32' GROUP BY op ORDER BY 2 DESC, 1 LIMIT 3",
		                       -1, &st, NULL) != SQLITE_OK)
			return -1;
		while (sqlite3_step(st) == SQLITE_ROW && tu < sizeof top) {
			const char *op = col_text(st, 0);
			has_optim |= strcmp(op, "Optimizer") == 0;
			tu += (size_t)snprintf(top + tu, sizeof top - tu, "%s%s %.1f %%", tu ? ", " : "",
			                       op, total > 0 ? 100.0 * sqlite3_column_double(st, 1) /
			                                           total
			                                     : 0.0);
		}
		sqlite3_finalize(st);
		snprintf(msg, sizeof msg,
		         "%s is %.1f %% (below %g %%): the FP32 time is in black-list ops (%s)%s",
		         label, share * 100.0, thr, top[0] ? top : "none recorded",
		         has_optim ? "; the optimizer updates the FP32 master weights by design: more "
		                     "compute per update (a larger batch) raises the share"
		                   : "; check whether they need FP32");
	}
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
	int n = 0;
	int64_t top_site = -1;
	while (sqlite3_step(st) == SQLITE_ROW) {
		const char *kind = col_text(st, 0);
		if (n == 0 && sqlite3_column_type(st, 6) != SQLITE_NULL)
			top_site = sqlite3_column_int64(st, 6);
		buf_add(&ev, "%s%s %s at %s:%d: %.3f ms over %" PRId64 " copies", n ? "\n" : "", kind,
		        col_text(st, 1), col_text(st, 2), sqlite3_column_int(st, 3),
		        sqlite3_column_double(st, 4) / 1e6, (int64_t)sqlite3_column_int64(st, 5));
		n++;
	}
	sqlite3_finalize(st);
	/* casts dominate when their time is more than half of all copy time */
	double cast_ns = query_double(db, "SELECT total(total_ns) FROM copy_sigs WHERE kind IN "
	                                  "('cast', 'master')", 0);
	double all_ns = query_double(db, "SELECT total(total_ns) FROM copy_sigs", 0);
	int casts = all_ns > 0 && cast_ns > 0.5 * all_ns;
	char msg[512];
	snprintf(msg, sizeof msg,
	         "memory copies take %.1f %% of step time (above %g %%)%s", share * 100.0, thr,
	         casts ? ": dtype casts dominate (cast thrash or repeated master-weight casts); keep "
	                 "neighbouring ops in one precision or cache the casts"
	               : "");
	return add_advice(db, "copy_share", "warning", msg, ev.text, NULL, -1, top_site);
}

/* One unaligned GEMM layer (op, label, shape), forward and backward together (rule_gemm). */
typedef struct gemm_layer {
	char op[32], label[96], shape[64];
	double ns, calls, m, n, k, save;
	int64_t site;
} gemm_layer;

static double ceil8(double d) { return ceil(d / 8.0) * 8.0; }

/* M, N and K of a GEMM op's signature: the shape is the output's ('(rows,out)', '(batch,M,N)',
 * Conv2D '(N,O,OH,OW)': M = O, N = OH*OW), K comes from the FLOPs of one forward call
 * (2 M N K per GEMM).  0 when the shape has no dimensions. */
static int gemm_dims(const char *op, const char *shape, double flops, double *m, double *n,
                     double *k)
{
	double d[8];
	int nd = 0;
	for (const char *p = shape; *p && nd < 8;) {
		if (*p >= '0' && *p <= '9') {
			char *end;
			d[nd++] = (double)strtoll(p, &end, 10);
			p = end;
		} else {
			p++;
		}
	}
	if (nd < 2)
		return 0;
	double numel = 1;
	for (int i = 0; i < nd; i++)
		numel *= d[i];
	if (strcmp(op, "Conv2D") == 0 && nd == 4) {
		*m = d[1];
		*n = d[2] * d[3];
	} else {
		*n = d[nd - 1];
		*m = numel / *n;
	}
	*k = numel > 0 ? round(flops / (2.0 * numel)) : 0;
	return *m > 0 && *n > 0 && *k > 0;
}

/* GEMMs whose M, N or K is not a multiple of 8 miss the fast path (the runtime's aligned flag,
 * forward and backward).  They are ranked by the time padding could save, on a model: the fast
 * path runs GEMM_PAD_GAIN times the rate per FLOP, and padding each dimension to a multiple of
 * 8 adds its work.  The kernels mask their edges rather than fall back to a slow loop, so the
 * gain is small: measured on 2026-12-05 (Intel class, fp32, fp16 and bf16 engines, shapes from
 * 37x100x30 to 1000^3 against the same padded), 0.95-1.19 per FLOP, median 1.03, and the padded
 * GEMM as fast or slower in most; 1.05 here (docs/PERFORMANCE.md).  A model of twice the rate,
 * as before, promised ten times what padding saved.  A
 * narrow GEMM is counted, not recommended: one that padding would make do more work than the
 * fast path saves (a single-column head, N = 1: 8 times the work), and a Linear layer of at most
 * NARROW_LINEAR_N outputs (a classifier's head), whose forward the kernels run as dot products
 * (x w^T with N <= 24: FP16N_DOT_N, GEMM_DOT_N), where padding only adds work (the fp16 head
 * 128 x 10 x 1024 takes twice as long padded to N = 16). */
#define NARROW_LINEAR_N 24
#define GEMM_PAD_GAIN   1.05
static int rule_gemm(sqlite3 *db)
{
	sqlite3_stmt *st = NULL;
	double total = query_double(db, "SELECT total(total_ns) FROM op_summary", 0);
	if (sqlite3_prepare_v2(db,
	                       "SELECT op, coalesce(label, '-'), shape, total(total_ns), total(calls),"
	                       " min(CASE WHEN phase = 'forward' THEN callsite END), min(callsite),"
	                       " max(CASE WHEN phase = 'forward' THEN flops END), max(flops)"
	                       " FROM op_sigs WHERE aligned = 0 AND op IN"
	                       " ('MatMul', 'BatchMatMul', 'Linear', 'Conv2D') AND calls > 0"
	                       " GROUP BY op, label, shape ORDER BY 4 DESC, 1, 2, 3", -1, &st,
	                       NULL) != SQLITE_OK)
		return -1;
	enum { MAX_LAYERS = 64 };
	gemm_layer g[MAX_LAYERS];
	int n = 0, narrow = 0;
	double t_save = 0, t_narrow = 0;
	while (sqlite3_step(st) == SQLITE_ROW && n < MAX_LAYERS) {
		gemm_layer *l = &g[n];
		memset(l, 0, sizeof *l);
		snprintf(l->op, sizeof l->op, "%s", col_text(st, 0));
		snprintf(l->label, sizeof l->label, "%s", col_text(st, 1));
		snprintf(l->shape, sizeof l->shape, "%s", col_text(st, 2));
		l->ns = sqlite3_column_double(st, 3);
		l->calls = sqlite3_column_double(st, 4);
		int fwd = sqlite3_column_type(st, 5) != SQLITE_NULL;
		l->site = sqlite3_column_type(st, fwd ? 5 : 6) == SQLITE_NULL
		              ? -1
		              : sqlite3_column_int64(st, fwd ? 5 : 6);
		double flops = sqlite3_column_double(st, sqlite3_column_type(st, 7) != SQLITE_NULL ? 7 : 8);
		if (!gemm_dims(l->op, l->shape, flops, &l->m, &l->n, &l->k))
			continue;
		double grow = ceil8(l->m) * ceil8(l->n) * ceil8(l->k) / (l->m * l->n * l->k);
		l->save = l->ns * (1.0 - grow / GEMM_PAD_GAIN);
		if (l->save <= 0 || (!strcmp(l->op, "Linear") && l->n <= NARROW_LINEAR_N)) {
			narrow++;
			t_narrow += l->ns;
			continue;
		}
		t_save += l->save;
		n++;
	}
	sqlite3_finalize(st);
	if (!n)
		return 0;
	/* rank by the time padding could save */
	for (int i = 1; i < n; i++)
		for (int j = i; j > 0 && g[j].save > g[j - 1].save; j--) {
			gemm_layer t = g[j];
			g[j] = g[j - 1];
			g[j - 1] = t;
		}
	advice_buf ev = {.used = 0};
	for (int i = 0; i < n && i < 6; i++)
		buf_add(&ev, "%s%s %s %s: M %.0f, N %.0f, K %.0f; %.3f ms over %.0f calls, padding could "
		        "save about %.3f ms", i ? "\n" : "", g[i].op, g[i].label, g[i].shape, g[i].m,
		        g[i].n, g[i].k, g[i].ns / 1e6, g[i].calls, g[i].save / 1e6);
	if (narrow)
		buf_add(
		    &ev,
		    "\n%d narrow GEMM(s) left out (%.3f ms): padded, they would do more work "
		    "than the fast path saves, or (a Linear layer of at most %d outputs) they run "
		    "as dot products, which padding only slows",
		    narrow, t_narrow / 1e6, NARROW_LINEAR_N);
	char msg[1024], more[160] = "";
	if (narrow)
		snprintf(more, sizeof more, " (%d narrow GEMM(s), such as classifier heads, left out: "
		         "padding them would not pay)", narrow);
	snprintf(msg, sizeof msg,
	         "%d GEMM shape(s) miss the fast path (M, N or K not a multiple of 8); padding could "
	         "save about %.3f ms (%.1f %% of op time), most in %s '%s' (M %.0f, N %.0f, K %.0f): "
	         "pad hidden sizes, input widths and batch to multiples of 8%s", n, t_save / 1e6,
	         total > 0 ? 100.0 * t_save / total : 0.0, g[0].op, g[0].label, g[0].m, g[0].n,
	         g[0].k, more);
	return add_advice(db, "gemm_unaligned", total > 0 && t_save / total > 0.05 ? "warning" : "info",
	                  msg, ev.text, g[0].op, -1, g[0].site);
}

/* The loss scaling in force: 1 for dynamic, 0 for a static scale (the key, or a run whose
 * scaler only ever said 'static') or a scaler that never decided (an FP32 mode: no scaling). */
static int scale_is_dynamic(sqlite3 *db)
{
	char scaling[64];
	query_text(db, "SELECT value FROM meta WHERE key IN ('loss_scale', 'app.loss_scale') "
	               "ORDER BY key = 'loss_scale' DESC LIMIT 1", scaling, sizeof scaling);
	double decisions = query_double(db, "SELECT count(*) FROM run_loss_scale WHERE reason IN "
	                                    "('hold', 'growth', 'overflow', 'nan')", 0);
	return !((scaling[0] && strcmp(scaling, "dynamic") != 0) || decisions == 0);
}

/* Loss scale stuck at its floor or collapsing (dynamic scaling only), or outside [8, 1024]
 * (not for a static scale in a BF16 mode, which needs none). */
static int rule_scale(sqlite3 *db)
{
	double steps = query_double(db, "SELECT count(*) FROM run_steps WHERE scale IS NOT NULL", 0);
	if (steps <= 0)
		return 0;
	double floor_cfg = query_double(db,
	                                "SELECT CAST(value AS REAL) FROM meta WHERE key IN "
	                                "('loss_scale_min', 'app.loss_scale_min') LIMIT 1", 1.0);
	double min_scale = query_double(db, "SELECT min(scale) FROM run_steps", 0);
	/* the scale the run ended with: after the scaler's last decision, not the one the last
	 * step used (they differ when the last step overflowed) */
	double last = query_double(db, "SELECT scale FROM run_steps WHERE scale IS NOT NULL "
	                                "ORDER BY step DESC LIMIT 1", 0);
	last = query_double(db, "SELECT new_scale FROM run_loss_scale WHERE new_scale IS NOT NULL "
	                        "ORDER BY step DESC, rowid DESC LIMIT 1", last);
	double first = query_double(db, "SELECT scale FROM run_steps WHERE scale IS NOT NULL "
	                                 "ORDER BY step LIMIT 1", 0);
	double overflow = query_double(db, "SELECT count(*) FROM run_steps WHERE overflow = 1", 0);
	double first_overflow = query_double(db, "SELECT min(step) FROM run_steps WHERE overflow = 1", -1);
	char msg[512], ev[1024];
	int rc = 0;
	snprintf(ev, sizeof ev,
	         "steps %.0f, overflow steps %.0f, first scale %.9g, final %.9g, min %.9g", steps,
	         overflow, first, last, min_scale);
	/* a static scale (the BF16 modes' default, static 1) has no floor to get stuck at and
	 * cannot collapse: those rules are about dynamic scaling; nor has a scaler that never
	 * decided (an FP32 mode); and BF16, with FP32's range, needs no loss scale, so a static one
	 * outside [8, 1024] is no finding there */
	char mode[64];
	mode_in_force(db, mode, sizeof mode);
	int is_static = !scale_is_dynamic(db);
	int wide_range = strstr(mode, "bf16") != NULL || strstr(mode, "fp32") != NULL;
	/* the floor is a finding only where the scale overflowed on it: a floor the run merely
	 * started at (loss_scale_init = loss_scale_min) or reached without overflowing there is
	 * the user's setting at work */
	double over_at_floor = 0;
	amp_profile_query_double(db, &over_at_floor,
	                         "SELECT count(*) FROM run_steps WHERE scale <= ? AND overflow = 1",
	                         "d", floor_cfg);
	if (is_static) {
		/* no floor or collapse rule */
	} else if (min_scale <= floor_cfg && over_at_floor > 0) {
		double at_floor = 0;
		amp_profile_query_double(db, &at_floor, "SELECT count(*) FROM run_steps WHERE scale <= ?",
		                         "d", floor_cfg);
		/* a forward fault (overflow, cast overflow, underflow, invalid operation) defeats
		 * every scale: then the floor is its symptom, not a gradient problem */
		char fwd_class[32] = "";
		amp_profile_query_text(db, fwd_class, sizeof fwd_class,
		                       "SELECT class FROM nonfinite WHERE class <> 'scaled_grad_overflow'"
		                       " AND step IN (SELECT step FROM run_steps WHERE scale <= ?1)"
		                       " GROUP BY class ORDER BY count(*) DESC, class LIMIT 1", "d",
		                       floor_cfg);
		if (fwd_class[0])
			snprintf(msg, sizeof msg,
			         "loss scale reached its floor %.9g and stayed there for %.0f step(s): the "
			         "forward pass goes non-finite (%s) whatever the scale; fix that first (its "
			         "advice names the op)", floor_cfg, at_floor, fwd_class);
		else
			snprintf(msg, sizeof msg,
			         "loss scale reached its floor %.9g and stayed there for %.0f step(s): "
			         "gradients overflow even unscaled; look for the op that produces Inf "
			         "(ampdump) and move it to custom_black_list", floor_cfg, at_floor);
		rc |= add_advice(db, "loss_scale_floor", "error", msg, ev, NULL,
		                 (int64_t)first_overflow, -1);
	}
	/* a collapsing scale is loss_scale_history's finding: the classifier tells it from a
	 * scaler that grows often and so overflows often (probing), which an overflow rate alone
	 * does not */
	if (last > 0 && (last < 8 || last > 1024) && !(is_static && wide_range)) {
		snprintf(msg, sizeof msg,
		         "final loss scale %.9g is outside the usual range [8, 1024]", last);
		rc |= add_advice(db, "loss_scale_unusual", "info", msg, ev, NULL, -1, -1);
	}
	return rc;
}

/* One parameter gradient's rows, summed over the steps checked (rule_grad_underflow). */
typedef struct grad_tally {
	char name[128], op[64], dtype[16];
	double count, zero, tiny, absmax, scale_lo, scale_hi;
	int64_t step, src_seq, thread, steps;
} grad_tally;

/* Gradient underflow: a parameter's gradient in a half type whose values are mostly zero or
 * subnormal (FP16 exponent histogram bins 0 and 1) at the scale in force stops its layer
 * learning.  Per parameter gradient: its share of such values, its layer (the forward op's
 * label and call site) and the scale; the advice is to enable dynamic scaling (if it is not on)
 * or raise the scale, to a value that keeps the run's largest gradient below 32768. */
static int rule_grad_underflow(sqlite3 *db)
{
	/* FP16 only: the bins are FP16's range, which BF16 (FP32's range) does not have */
	const char *dtypes = "('fp16')";
	char sql[1024];
	snprintf(sql, sizeof sql,
	         "SELECT t.name, t.op, t.dtype, t.count, t.exp_hist, t.absmax, t.step, t.src_seq,"
	         " t.thread, (SELECT scale FROM steps s WHERE s.step = t.step ORDER BY s.rowid"
	         " LIMIT 1) FROM tensor_stats t WHERE t.role = 'grad' AND t.param_grad = 1"
	         " AND t.dtype IN %s AND length(t.exp_hist) >= 8 AND t.count > 0"
	         " ORDER BY t.name, t.step, t.id", dtypes);
	sqlite3_stmt *st = NULL;
	if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
		return -1;
	enum { MAX_GRADS = 32 };
	grad_tally g[MAX_GRADS];
	int n = 0;
	while (sqlite3_step(st) == SQLITE_ROW) {
		const char *name = col_text(st, 0);
		if (n == 0 || strcmp(g[n - 1].name, name) != 0) {
			if (n == MAX_GRADS)
				break;
			grad_tally *t = &g[n++];
			memset(t, 0, sizeof *t);
			snprintf(t->name, sizeof t->name, "%s", name);
			snprintf(t->op, sizeof t->op, "%s", col_text(st, 1));
			snprintf(t->dtype, sizeof t->dtype, "%s", col_text(st, 2));
			t->scale_lo = INFINITY;
			t->scale_hi = 0;
			t->src_seq = -1;
		}
		grad_tally *t = &g[n - 1];
		const unsigned char *h = sqlite3_column_blob(st, 4);
		uint32_t bins[2];
		memcpy(bins, h, sizeof bins); /* little-endian, as the wire and the host */
		t->count += sqlite3_column_double(st, 3);
		t->zero += bins[0];
		t->tiny += (double)bins[0] + bins[1];
		t->absmax = fmax(t->absmax, sqlite3_column_double(st, 5));
		t->step = sqlite3_column_int64(st, 6);
		if (sqlite3_column_type(st, 7) != SQLITE_NULL)
			t->src_seq = sqlite3_column_int64(st, 7);
		t->thread = sqlite3_column_type(st, 8) == SQLITE_NULL ? -1 : sqlite3_column_int64(st, 8);
		if (sqlite3_column_type(st, 9) != SQLITE_NULL) {
			t->scale_lo = fmin(t->scale_lo, sqlite3_column_double(st, 9));
			t->scale_hi = fmax(t->scale_hi, sqlite3_column_double(st, 9));
		}
		t->steps++;
	}
	sqlite3_finalize(st);
	int dynamic = scale_is_dynamic(db);
	char gmax_sql[256];
	snprintf(gmax_sql, sizeof gmax_sql,
	         "SELECT max(absmax) FROM tensor_stats WHERE role = 'grad' AND dtype IN %s", dtypes);
	double gmax = query_double(db, gmax_sql, 0);
	int rc = 0;
	for (int i = 0; i < n && rc == 0; i++) {
		grad_tally *t = &g[i];
		double share = t->tiny / t->count;
		/* zeros alone are no sign of underflow (a ReLU's or a pooling's gradient holds as
		 * many in FP32): the values left must be largely subnormal, or nearly none left */
		double nonzero = t->count - t->zero;
		double sub_share = nonzero > 0 ? (t->tiny - t->zero) / nonzero : 0;
		if (share < 0.5 || !(sub_share >= 0.25 || t->zero >= 0.9 * t->count))
			continue;
		/* the layer: the forward op whose backward wrote the gradient */
		char label[128] = "", file[512] = "";
		int line = 0;
		int64_t site = -1;
		if (t->src_seq >= 0) {
			if (sqlite3_prepare_v2(db,
			                       "SELECT s.label, s.callsite, c.file, c.line FROM op_events e"
			                       " JOIN op_sigs s ON s.id = e.sig LEFT JOIN callsites c"
			                       " ON c.id = s.callsite WHERE e.step = ?1 AND e.seq = ?2"
			                       " AND (?3 < 0 OR e.thread IS NULL OR e.thread = ?3) LIMIT 1",
			                       -1, &st, NULL) != SQLITE_OK)
				return -1;
			sqlite3_bind_int64(st, 1, t->step);
			sqlite3_bind_int64(st, 2, t->src_seq);
			sqlite3_bind_int64(st, 3, t->thread);
			if (sqlite3_step(st) == SQLITE_ROW) {
				snprintf(label, sizeof label, "%s", col_text(st, 0));
				if (sqlite3_column_type(st, 1) != SQLITE_NULL)
					site = sqlite3_column_int64(st, 1);
				snprintf(file, sizeof file, "%s", col_text(st, 2));
				line = sqlite3_column_int(st, 3);
			}
			sqlite3_finalize(st);
		}
		char layer[800], at[640], scale[160], fix[320];
		site_text(at, sizeof at, file, line);
		if (label[0])
			snprintf(layer, sizeof layer, "layer '%s' (%s%s%s)", label, t->op,
			         at[0] ? ", called at " : "", at);
		else
			snprintf(layer, sizeof layer, "%.127s", t->name);
		if (t->scale_lo > t->scale_hi)
			snprintf(scale, sizeof scale, "at an unrecorded loss scale");
		else if (t->scale_lo == t->scale_hi)
			snprintf(scale, sizeof scale, "at the %s loss scale %.9g",
			         dynamic ? "dynamic" : "static", t->scale_hi);
		else
			snprintf(scale, sizeof scale, "at dynamic loss scales %.9g to %.9g", t->scale_lo,
			         t->scale_hi);
		/* a scale that keeps the run's largest gradient below 32768, a power of two */
		double now = t->scale_hi > 0 ? t->scale_hi : 1, want = 0;
		if (gmax > 0)
			want = fmin(now * exp2(floor(log2(32768.0 / gmax))), 16777216.0);
		char raise[200] = "";
		if (want > now)
			snprintf(
			    raise, sizeof raise,
			    " (loss_scale = %.9g keeps the run's largest gradient below 32768: "
			    "%.3g at the scale %.9g, %.3g at %.9g)",
			    want, gmax, now, gmax * want / now, want);
		if (dynamic)
			snprintf(fix, sizeof fix, "raise the scale: loss_scale_init and loss_scale_min%s",
			         raise);
		else
			snprintf(fix, sizeof fix, "enable dynamic loss scaling (loss_scale = dynamic) or "
			         "raise the static scale%s", raise);
		/* every value exactly zero may also be a gradient that is zero in any precision: a
		 * parameter the loss does not depend on (a bias that a softmax or a normalization
		 * cancels), which no scale mends */
		char zero[320] = "";
		if (t->zero >= t->count)
			snprintf(
			    zero, sizeof zero,
			    "; or, every value being exactly zero, the loss may not depend on this "
			    "parameter at all (a bias that a softmax or a normalization cancels), "
			    "which no scale mends: a run in FP32 (precision_mode = force_fp32) "
			    "tells which");
		char msg[2048], ev[512];
		snprintf(
		    msg, sizeof msg,
		    "gradient underflow: the gradient %.127s of %s is %.1f %% zero or subnormal "
		    "in %.15s (%.1f %% exact zeros) %s: the layer stops learning; %s%s",
		    t->name, layer, 100.0 * share, t->dtype, 100.0 * t->zero / t->count, scale, fix,
		    zero);
		snprintf(ev, sizeof ev, "%.63s %.127s: %.0f values over %" PRId64 " step(s), %.0f zero, %.0f "
		         "subnormal, absmax %.3g", t->op, t->name, t->count, t->steps, t->zero,
		         t->tiny - t->zero, t->absmax);
		rc = add_advice(db, "gradient_underflow", "warning", msg, ev, t->op, t->step, site);
	}
	return rc;
}

/* Classifies the non-finite origins the writer listed in `nonfinite` (see profile.sql), adds a
 * row for each overflow step without a recorded origin (on any rank: in a merged profile of a
 * data-parallel run every rank skips the step one rank's origin overflowed), and copies in
 * each step's loss and loss-scaler decision.  A NaN with no Inf is an invalid operation only
 * where overflowing cannot make one: a GEMM or a reduction turns an Inf partial sum meeting its
 * opposite into a NaN, and an input that already held Inf (an overflowing cast) is an overflow
 * too. */
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
    "INSERT INTO nonfinite(step, class, thread, rank)"
    "  SELECT step, CASE WHEN loss IS NULL THEN 'forward_overflow'"
    "                    ELSE 'scaled_grad_overflow' END, thread, rank FROM steps s"
    "  WHERE overflow = 1 AND NOT EXISTS (SELECT 1 FROM nonfinite n WHERE n.step = s.step"
    "    AND (n.rank IS NOT s.rank OR n.thread IS NULL OR s.thread IS NULL"
    "      OR n.thread = s.thread));"
    "UPDATE nonfinite SET"
    "  loss = (SELECT loss FROM steps s WHERE s.step = nonfinite.step AND (nonfinite.thread IS"
    "    NULL OR s.thread = nonfinite.thread) ORDER BY s.rowid LIMIT 1),"
    "  overflow = (SELECT overflow FROM steps s WHERE s.step = nonfinite.step AND"
    "    (nonfinite.thread IS NULL OR s.thread = nonfinite.thread) ORDER BY s.rowid LIMIT 1),"
    "  skipped = (SELECT skipped FROM steps s WHERE s.step = nonfinite.step AND"
    "    (nonfinite.thread IS NULL OR s.thread = nonfinite.thread) ORDER BY s.rowid LIMIT 1),"
    "  old_scale = (SELECT old_scale FROM loss_scale l WHERE l.step = nonfinite.step AND"
    "    l.reason <> 'init' AND (nonfinite.thread IS NULL OR l.thread IS NULL OR"
    "    l.thread = nonfinite.thread) ORDER BY l.reason = 'overflow' DESC, l.rowid LIMIT 1),"
    "  new_scale = (SELECT new_scale FROM loss_scale l WHERE l.step = nonfinite.step AND"
    "    l.reason <> 'init' AND (nonfinite.thread IS NULL OR l.thread IS NULL OR"
    "    l.thread = nonfinite.thread) ORDER BY l.reason = 'overflow' DESC, l.rowid LIMIT 1),"
    "  reason = (SELECT reason FROM loss_scale l WHERE l.step = nonfinite.step AND"
    "    l.reason <> 'init' AND (nonfinite.thread IS NULL OR l.thread IS NULL OR"
    "    l.thread = nonfinite.thread) ORDER BY l.reason = 'overflow' DESC, l.rowid LIMIT 1);";

/* What the writer's origin rows leave implicit, from the rows the runtime sent beside them (see
 * tensor_stats.src_seq, .cast_source, .tiny_at_nonfinite): an origin fed by an automatic cast
 * that overflowed is a 'cast_overflow', its FP32 source the cause; an origin whose non-finite
 * values sit on zeros or subnormals that an op running in a half type produced is an
 * 'underflow', that op the cause; then the cause's op, label, dtype and call site, and for a
 * gradient the call site of its forward op.  The %s are the SQL list of the half dtypes. */
#define THREAD_MATCH(a, b) "(" a ".thread IS NULL OR " b ".thread IS NULL OR " a ".thread = " b ".thread)"
#define CAUSE_SQL \
    "UPDATE nonfinite SET class = 'cast_overflow', src_tensor = i.name, src_absmax = i.absmax," \
    "  src_seq = i.src_seq" \
    "  FROM (SELECT step, seq, thread, name, absmax, src_seq, min(id) FROM tensor_stats" \
    "        WHERE role = 'input' AND cast_source = 1 GROUP BY step, seq, thread) i" \
    "  WHERE nonfinite.stats_id IS NOT NULL AND i.step = nonfinite.step" \
    "    AND i.seq = nonfinite.seq AND " THREAD_MATCH("i", "nonfinite") ";" \
    "UPDATE nonfinite SET class = 'underflow', src_tensor = i.name, src_absmax = i.absmax," \
    "  src_seq = i.src_seq" \
    "  FROM (SELECT step, seq, thread, name, absmax, src_seq, min(id) FROM tensor_stats t" \
    "        WHERE role = 'input' AND tiny_at_nonfinite = 1 AND src_seq IS NOT NULL AND (" \
    "          EXISTS (SELECT 1 FROM op_events e JOIN op_sigs s ON s.id = e.sig" \
    "            WHERE e.step = t.step AND e.seq = t.src_seq AND s.exec_dtype IN %s" \
    "            AND " THREAD_MATCH("e", "t") ")" \
    "          OR EXISTS (SELECT 1 FROM tensor_stats o WHERE o.step = t.step" \
    "            AND o.seq = t.src_seq AND o.role = 'output' AND o.dtype IN %s" \
    "            AND " THREAD_MATCH("o", "t") "))" \
    "        GROUP BY step, seq, thread) i" \
    "  WHERE nonfinite.stats_id IS NOT NULL AND nonfinite.class <> 'cast_overflow'" \
    "    AND nonfinite.phase = 'forward' AND i.step = nonfinite.step" \
    "    AND i.seq = nonfinite.seq AND " THREAD_MATCH("i", "nonfinite") ";" \
    "UPDATE nonfinite SET src_op = s.op, src_label = s.label, src_dtype = s.exec_dtype," \
    "  src_callsite = s.callsite FROM op_events e JOIN op_sigs s ON s.id = e.sig" \
    "  WHERE nonfinite.src_seq IS NOT NULL AND e.step = nonfinite.step" \
    "    AND e.seq = nonfinite.src_seq AND " THREAD_MATCH("e", "nonfinite") ";" \
    "UPDATE nonfinite SET src_op = o.op, src_label = o.name, src_dtype = o.dtype," \
    "  src_callsite = o.callsite FROM tensor_stats o" \
    "  WHERE nonfinite.src_seq IS NOT NULL AND nonfinite.src_op IS NULL" \
    "    AND o.step = nonfinite.step AND o.seq = nonfinite.src_seq AND o.role = 'output'" \
    "    AND " THREAD_MATCH("o", "nonfinite") ";" \
    "UPDATE nonfinite SET fwd_callsite = (SELECT s.callsite FROM tensor_stats g" \
    "  JOIN op_events e ON e.step = g.step AND e.seq = g.src_seq AND " THREAD_MATCH("e", "g") \
    "  JOIN op_sigs s ON s.id = e.sig WHERE g.id = nonfinite.stats_id LIMIT 1)" \
    "  WHERE phase = 'backward' AND stats_id IS NOT NULL;" \
    "UPDATE nonfinite SET fwd_callsite = (SELECT o.callsite FROM tensor_stats g" \
    "  JOIN tensor_stats o ON o.step = g.step AND o.seq = g.src_seq AND o.role = 'output'" \
    "  AND " THREAD_MATCH("o", "g") " WHERE g.id = nonfinite.stats_id LIMIT 1)" \
    "  WHERE phase = 'backward' AND stats_id IS NOT NULL AND fwd_callsite IS NULL;"

static int run_cause_sql(sqlite3 *db, char **msg)
{
	char dtypes[128];
	sql_name_list(dtypes, sizeof dtypes, AMP_DTYPE_COUNT, dtype_half, dtype_name);
	char sql[sizeof CAUSE_SQL + 2 * sizeof dtypes];
	snprintf(sql, sizeof sql, CAUSE_SQL, dtypes, dtypes);
	return sqlite3_exec(db, sql, NULL, NULL, msg);
}

/* One advice row per class of the nonfinite table: its first step, how many steps, and the
 * origin of the first step, with what to do about it. */
static int rule_nonfinite(sqlite3 *db)
{
	static const char *const classes[] = {"forward_overflow", "cast_overflow", "underflow",
	                                      "invalid_operation", "scaled_grad_overflow"};
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
		                       "   AND reason IN ('overflow', 'nan')),"
		                       " n.src_op, coalesce(n.src_label, '-'), n.src_dtype, sc.file, sc.line,"
		                       " n.src_tensor, n.src_absmax, fc.file, fc.line, n.src_callsite"
		                       " FROM nonfinite n LEFT JOIN callsites c ON c.id = n.callsite"
		                       " LEFT JOIN callsites sc ON sc.id = n.src_callsite"
		                       " LEFT JOIN callsites fc ON fc.id = n.fwd_callsite"
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
		int backed_off = strcmp(reason, "overflow") == 0 || strcmp(reason, "nan") == 0;
		int64_t callsite =
		    sqlite3_column_type(st, 15) == SQLITE_NULL ? -1 : sqlite3_column_int64(st, 15);
		int64_t nsteps = sqlite3_column_int64(st, 17), handled = sqlite3_column_int64(st, 18);
		/* the cause upstream (underflow, cast_overflow) and a gradient's forward call site */
		int have_src = sqlite3_column_type(st, 19) != SQLITE_NULL;
		char src_op[64], src_label[128], src_dtype[16], src_site[600], src_at[640];
		char src_tensor[128], fwd_site[600], fwd_at[640];
		snprintf(src_op, sizeof src_op, "%s", col_text(st, 19));
		snprintf(src_label, sizeof src_label, "%s", col_text(st, 20));
		snprintf(src_dtype, sizeof src_dtype, "%s", col_text(st, 21));
		site_text(src_site, sizeof src_site, (const char *)sqlite3_column_text(st, 22),
		          sqlite3_column_int(st, 23));
		snprintf(src_at, sizeof src_at, "%s%s", src_site[0] ? ", called at " : "", src_site);
		snprintf(src_tensor, sizeof src_tensor, "%s", col_text(st, 24));
		double src_absmax = sqlite3_column_double(st, 25);
		site_text(fwd_site, sizeof fwd_site, (const char *)sqlite3_column_text(st, 26),
		          sqlite3_column_int(st, 27));
		snprintf(fwd_at, sizeof fwd_at, "%s%s", fwd_site[0] ? "; its forward op was called at "
		                                                    : "", fwd_site);
		int64_t src_callsite =
		    sqlite3_column_type(st, 28) == SQLITE_NULL ? -1 : sqlite3_column_int64(st, 28);
		sqlite3_finalize(st);
		const char *advice_op = have_origin ? op : NULL;

		char values[128], more[64], msg[4096];
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
		char bl[600]; /* custom_black_list with the op to move (black_list_with) */
		int half = amp_dtype_code_is_half((unsigned)amp_dtype_code_from_name(dtype)) &&
		           amp_dtype_code_from_name(dtype) >= 0;
		if (strcmp(cls, "forward_overflow") == 0) {
			if (have_origin && half)
				/* clang-format off */
				snprintf(msg, sizeof msg,
				         "forward overflow at step %" PRId64 "%s: %s (%s) output went "
				         "non-finite in %s (%s)%s; run %s in FP32 (custom_black_list = %s) or "
				         "keep its input in range",
				         step, more, op, label, dtype, values, at, op,
				         black_list_with(db, op, bl, sizeof bl));
				/* clang-format on */
			else if (have_origin) /* it ran in FP32 already: no list would change that */
				snprintf(msg, sizeof msg,
				         "forward overflow at step %" PRId64 "%s: %s (%s) output went "
				         "non-finite in %s (%s)%s, beyond even FP32's range; keep its input in "
				         "range", step, more, op, label, dtype, values, at);
			else
				snprintf(msg, sizeof msg,
				         "forward overflow at step %" PRId64 "%s: the loss was not finite and "
				         "no origin was recorded; profile with --nan-check=op to name the op",
				         step, more);
		} else if (strcmp(cls, "underflow") == 0) {
			/* the op to fix is the one upstream that flushed the values */
			if (have_src) {
				/* clang-format off */
				snprintf(msg, sizeof msg,
				         "underflow at step %" PRId64 "%s: %s (%s) ran in %s and flushed values "
				         "to zero or subnormal%s; %s (%s) then produced %s from them in %s%s; "
				         "the cause is the %s, not %s: run %s in FP32 (custom_black_list = %s) "
				         "or scale its inputs up",
				         step, more, src_op, src_label, src_dtype, src_at, op, label, values,
				         dtype, at, src_op, op, src_op, black_list_with(db, src_op, bl, sizeof bl));
				/* clang-format on */
				advice_op = src_op;
				if (src_callsite > 0)
					callsite = src_callsite;
			} else {
				snprintf(msg, sizeof msg,
				         "underflow at step %" PRId64 "%s: %s (%s) made %s in %s%s from zero or "
				         "subnormal inputs that an op in a half type produced upstream", step,
				         more, op, label, values, dtype, at);
			}
		} else if (strcmp(cls, "cast_overflow") == 0) {
			char src[1024];
			if (have_src)
				snprintf(src, sizeof src, "the FP32 output of %s (%s)%s", src_op, src_label,
				         src_at);
			else
				snprintf(src, sizeof src, "a leaf or parameter (%s)", src_tensor);
			/* clang-format off */
			snprintf(msg, sizeof msg,
			         "automatic cast overflow at step %" PRId64 "%s: the cast to %s in front of "
			         "%s (%s)%s overflowed: its source '%s', %s, holds %.9g, above the %s "
			         "maximum; the cast is the origin, not %s: keep those values in range "
			         "(normalize or scale them down) or run %s in FP32 (custom_black_list = %s)",
			         step, more, dtype, op, label, at, src_tensor, src, src_absmax, dtype, op, op,
			         black_list_with(db, op, bl, sizeof bl));
			/* clang-format on */
			if (have_src) {
				advice_op = src_op;
				if (src_callsite > 0)
					callsite = src_callsite;
			}
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
				         "%s in %s (%s)%s%s; the loss was %s; %s", step, more, op, label, phase,
				         dtype, values, at, fwd_at, loss_finite ? "finite" : "not finite", how);
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
		rc = add_advice(db, cls, severity, msg, ev.text, advice_op, step, callsite);
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
		char bl[600];
		snprintf(msg, sizeof msg,
		         "%s overflowed in FP16 (first at step %" PRId64 "): add it to "
		         "custom_black_list = %s so it runs in FP32",
		         op, (int64_t)sqlite3_column_int64(st, 2),
		         black_list_with(db, op, bl, sizeof bl));
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
 * gemm_ratio is the engine's GEMM rate over the runtime's FP32 GEMM (fp32-fma): the smallest
 * ratio on the square shapes and the mlp shapes of at least 128 in every dimension, as
 * bench/bench_kernels prints it ("the advice's figure", naming this table) on the CPU class it
 * runs on: a table the kernel bench's runs keep up to date, copied here by whoever measured a
 * class (the advice says the figure is the kernel bench's).  0 means not measured yet: the
 * advice then names the engine without a ratio (a guessed ratio would be worse than none). */
static const struct half_engine {
	amp_engine engine;
	const char *dtype;           /* the half type it computes */
	const char *features[2];     /* meta cpu_half_features names it needs, all of them */
	const char *feature_label;   /* how the advice names what it needs */
	const char *mode;            /* the precision mode that runs the white list on it */
	int elementwise;             /* also has elementwise half arithmetic (not only products) */
	double gemm_ratio;           /* see above */
	const char *measured_on;     /* the CPU class of gemm_ratio, NULL when it is 0 */
	const char *unused_on;       /* meta cpu_vendor whose cores run it slower than FP32 FMA,
	                              * so that the library does not use it there, or NULL */
} half_engines[] = {
    /* bench_kernels on the Intel class with AMX (1 thread, each GEMM in its own bursts):
     * the smallest on the square and >= 128 MLP shapes, the median of three runs on
     * 2026-12-04, evening (5.24, 5.42, 5.43; mlp fc2 fwd 128x1024x1024); 4.74-4.91 that
     * morning in single calls in turn, which gave bf16 the pace the fp32 GEMM left */
    {AMP_ENGINE_AMX_BF16, "bf16", {"amx_bf16", "amx_tile"}, "AMX-BF16",
     "allow_mix_precision_bf16", 0, 5.42, "the Intel class", NULL},
    /* bench_kernels on the AMD class (Zen 5, 1 thread): smallest 1.76 (mlp fc1 dX), the table
     * of the README's Performance section.  Not measured on the Intel class (AMX serves bf16
     * there).  Intel cores issue vdpbf16ps at half the product rate of FP32 FMA (runtime/
     * kernels/dispatch.c, CPU_DPBF16_HALF_RATE): without AMX their bf16 runs on FP32 FMA. */
    {AMP_ENGINE_AVX512_BF16, "bf16", {"avx512_bf16", NULL}, "AVX512_BF16",
     "allow_mix_precision_bf16", 0, 1.76, "the AMD class", "GenuineIntel"},
    /* bench_kernels on the Intel class, as for AMX: 1.77, 1.80, 1.81 (1024^3) on 2026-12-04,
     * evening; 1.62-1.65 (mlp fc1/fc2 dW) that morning in single calls in turn */
    {AMP_ENGINE_AVX512_FP16, "fp16", {"avx512_fp16", NULL}, "AVX512-FP16",
     "allow_mix_precision_fp16", 1, 1.80, "the Intel class", NULL},
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

/* The CPU has the engine and the library uses it on this vendor's cores. */
static int engine_used(const struct half_engine *e, const char *features, const char *vendor)
{
	return engine_available(e, features) && !(e->unused_on && strcmp(vendor, e->unused_on) == 0);
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
	         "SELECT exec_dtype, op, engine, total(total_ns), total(calls), min(callsite), "
	         "op IN (SELECT name FROM op_types WHERE list = 'white') "
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
	int n = 0, fp16 = 0, bf16 = 0, white = 0; /* white: a GEMM op, which has half kernels */
	double t_all = 0;
	int64_t site = -1;
	while (sqlite3_step(st) == SQLITE_ROW) {
		const char *dt = col_text(st, 0), *op = col_text(st, 1), *eng = col_text(st, 2);
		double t = sqlite3_column_double(st, 3);
		t_all += t;
		fp16 |= strcmp(dt, "fp16") == 0;
		bf16 |= strcmp(dt, "bf16") == 0;
		white |= sqlite3_column_int(st, 6) != 0;
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

	char features[256], vendor[64], mode[64];
	query_text(db, "SELECT value FROM meta WHERE key = 'cpu_half_features'", features,
	           sizeof features);
	query_text(db, "SELECT value FROM meta WHERE key = 'cpu_vendor'", vendor, sizeof vendor);
	int known = features[0] != '\0';
	mode_in_force(db, mode, sizeof mode);
	/* the kernel path as configured: "auto" (or, from an older library, the widest path's
	 * name, which says nothing of a forced one) */
	char forced[64] = "";
	query_text(db, "SELECT value FROM meta WHERE key = 'kernels' AND EXISTS (SELECT 1 FROM meta"
	               " WHERE key = 'kernels_top') AND value <> 'auto'", forced, sizeof forced);
	/* said after a reason that the forced path does not change */
	char forced_note[96] = "";
	if (forced[0])
		snprintf(forced_note, sizeof forced_note, " (and the run forced kernels = %s)", forced);
	/* what each emulated half type lacks here, and an engine of the other type it has */
	char lacks[512] = "", alt[512] = "";
	size_t ll = 0;
	for (int pass = 0; pass < 2; pass++) {
		const char *dt = pass ? "bf16" : "fp16";
		if (!(pass ? bf16 : fp16))
			continue;
		char need[96] = "", slow[96] = "";
		int has_one = 0;
		for (size_t i = 0; i < N_HALF_ENGINES; i++)
			if (strcmp(half_engines[i].dtype, dt) == 0) {
				const struct half_engine *e = &half_engines[i];
				if (known && engine_used(e, features, vendor))
					has_one = 1;
				else if (known && engine_available(e, features))
					snprintf(slow + strlen(slow), sizeof slow - strlen(slow), "%s%s",
					         slow[0] ? " and " : "", e->feature_label);
				snprintf(need + strlen(need), sizeof need - strlen(need), "%s%s",
				         need[0] ? " or " : "", e->feature_label);
			}
		if (!known)
			ll += (size_t)snprintf(lacks + ll, sizeof lacks - ll, "; %s arithmetic needs %s "
			                       "(this profile does not say what the CPU has)", dt, need);
		else if (has_one && forced[0])
			ll += (size_t)snprintf(lacks + ll, sizeof lacks - ll, "; the CPU has %s but these "
			                       "ops did not use it: the run forced kernels = %s", need,
			                       forced);
		else if (has_one && white)
			ll += (size_t)snprintf(lacks + ll, sizeof lacks - ll, "; the CPU has %s but these "
			                       "ops did not use it (a library built without the path, or "
			                       "a path forced)", need);
		else if (has_one)
			ll += (size_t)snprintf(lacks + ll, sizeof lacks - ll, "; the CPU has %s and the "
			                       "library used it where it has a %s kernel: these ops have "
			                       "none (they compute in FP32 on %s storage)", need, dt, dt);
		else if (slow[0])
			ll += (size_t)snprintf(lacks + ll, sizeof lacks - ll, "; the CPU has %s, but on "
			                       "%s cores it computes fewer products per cycle than FP32 "
			                       "FMA, so the library runs %s products on FP32 FMA%s",
			                       slow, vendor, dt, forced_note);
		else
			ll += (size_t)snprintf(lacks + ll, sizeof lacks - ll, "; the CPU lacks %s, so "
			                       "%s is storage only here%s", need, dt, forced_note);
		if (ll >= sizeof lacks)
			ll = sizeof lacks - 1;
		if (has_one || !known || alt[0])
			continue;
		for (size_t i = 0; i < N_HALF_ENGINES && !alt[0]; i++) {
			const struct half_engine *e = &half_engines[i];
			if (strcmp(e->dtype, dt) == 0 || !engine_used(e, features, vendor) ||
			    same_mode(mode, e->mode))
				continue;
			char ratio[96] = "";
			if (e->gemm_ratio > 0)
				snprintf(ratio, sizeof ratio, ", whose GEMM runs %.2fx the FP32 GEMM on %s "
				         "in the kernel bench", e->gemm_ratio, e->measured_on);
			/* a forced path may lack the engine too: the mode needs the automatic choice */
			snprintf(alt, sizeof alt, "; it has %s (%s%s): precision_mode = %s%s would run "
			         "the white list in %s on it", e->feature_label, amp_engine_name(e->engine),
			         ratio, e->mode, forced[0] ? " with kernels = auto" : "", e->dtype);
		}
	}
	/* A CPU with no half engine that the library uses: no mode helps, so the finding is
	 * information (what the half types buy here), not a warning to act on. */
	int none = known, any = 0;
	for (size_t i = 0; i < N_HALF_ENGINES; i++) {
		none = none && !engine_used(&half_engines[i], features, vendor);
		any = any || engine_available(&half_engines[i], features);
	}
	char msg[1536];
	double share = total > 0 ? t_all / total : 0;
	snprintf(msg, sizeof msg,
	         "half-typed ops ran emulated on %s arithmetic for %.1f %% of op time (%s)%s%s%s",
	         engines, 100.0 * share, names, lacks, alt,
	         !none ? ""
	         : any ? "; no half arithmetic of this CPU beats its FP32 FMA: the half types save "
	                 "memory here (activations, working copies), not time"
	               : "; this CPU has no half arithmetic of any type (AMX-BF16, AVX512_BF16, "
	                 "AVX512-FP16): the half types save memory here (activations, working "
	                 "copies), not time");
	return add_advice(db, "emulated_half", share > 0.1 && !none ? "warning" : "info", msg,
	                  ev.text, first_op, -1, site);
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
static int run_grad_underflow(sqlite3 *db, double fp16, double copy)
{
	(void)fp16, (void)copy;
	return rule_grad_underflow(db);
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

/* ---- why the scale changed ------------------------------------------------------------------ */

/* Each loss-scale decision linked to its cause: a back-off to the step's first non-finite value
 * (its nonfinite row: class, op, tensor, call sites) and that tensor's largest finite magnitude
 * in the last step before, when it was checked; a back-off on NaN gradients that no overflow
 * made (an invalid operation) gets the reason 'nan'.  Growth and hold rows get their count of
 * clean steps (explain_scale). */
static const char *const scale_cause_sql =
    "UPDATE loss_scale SET reason = 'nan' WHERE reason = 'overflow'"
    "  AND step IN (SELECT step FROM nonfinite WHERE class = 'invalid_operation')"
    "  AND step NOT IN (SELECT step FROM nonfinite WHERE class <> 'invalid_operation');"
    "UPDATE nonfinite SET reason = 'nan' WHERE reason = 'overflow'"
    "  AND EXISTS (SELECT 1 FROM loss_scale l WHERE l.step = nonfinite.step"
    "    AND l.reason = 'nan' AND (nonfinite.thread IS NULL OR l.thread IS NULL OR"
    "    l.thread = nonfinite.thread));"
    "UPDATE loss_scale SET cause_class = n.class, cause_op = n.op, cause_tensor = n.label,"
    "  cause_callsite = n.callsite, cause_fwd_callsite = n.fwd_callsite"
    "  FROM (SELECT step, rank, class, op, label, callsite, fwd_callsite, min(rowid) FROM nonfinite"
    "        GROUP BY step, rank) n"
    "  WHERE loss_scale.reason IN ('overflow', 'nan') AND n.step = loss_scale.step"
    "  AND n.rank IS loss_scale.rank;"
    /* a merged profile: a rank that backed off for another rank's overflow takes its cause */
    "UPDATE loss_scale SET cause_class = n.class, cause_op = n.op, cause_tensor = n.label,"
    "  cause_callsite = n.callsite, cause_fwd_callsite = n.fwd_callsite"
    "  FROM (SELECT step, class, op, label, callsite, fwd_callsite, min(rank * 4294967296 + rowid)"
    "        FROM nonfinite GROUP BY step) n"
    "  WHERE loss_scale.reason IN ('overflow', 'nan') AND n.step = loss_scale.step"
    "  AND loss_scale.cause_class IS NULL;"
    /* the cause's magnitude the steps before, on the rank it was seen on */
    "UPDATE loss_scale SET cause_absmax = (SELECT t.absmax FROM tensor_stats t"
    "  WHERE t.step BETWEEN loss_scale.step - 64 AND loss_scale.step - 1"
    "  AND t.name = loss_scale.cause_tensor AND t.nan = 0 AND t.inf = 0"
    "  AND t.rank IS coalesce((SELECT n.rank FROM nonfinite n WHERE n.step = loss_scale.step"
    "    AND n.label = loss_scale.cause_tensor AND n.rank IS loss_scale.rank LIMIT 1),"
    "    (SELECT min(n.rank) FROM nonfinite n WHERE n.step = loss_scale.step"
    "    AND n.label = loss_scale.cause_tensor), loss_scale.rank)"
    "  ORDER BY t.step DESC, t.id LIMIT 1)"
    "  WHERE cause_tensor IS NOT NULL;";

/* The scale history of a dynamic scaler (run_summary.scale_history): a back-off on an overflow
 * is a probe when it comes at the first or second step at a scale that a growth, the initial
 * scale or another probe set (the scaler looking for its level); any other back-off (a 'nan'
 * one included: no scale makes an invalid operation) is a spike.  'collapsing': at least 3 back-offs, more than the growths, and the scale ended at
 * an eighth of where it started or within 16x of its floor; else 'probing' when most back-offs
 * are probes, 'isolated_spikes' when not; 'steady' without back-offs.  Also sets clean_steps
 * on hold and growth rows, and run_summary.skipped_share. */
#define PROBE_STEPS 2 /* the first or second step at the new scale */
/* The steps that ran an optimizer step: those with a loss-scaler decision (every update or
 * skip makes one; an evaluation step none); all steps in a profile without decisions. */
#define OPT_STEPS_SQL                                                                              \
	"coalesce(nullif((SELECT count(*) FROM run_steps WHERE step IN (SELECT step FROM "         \
	"loss_scale WHERE reason <> 'init')), 0), (SELECT count(*) FROM run_steps))"

#define SCALE_STEPS_SHOWN 32 /* steps a history lists (scale_history_steps), then ",..." */

/* Appends step to buf (len bytes), the comma-separated list of *n steps so far: the first
 * SCALE_STEPS_SHOWN, each whole, then ",..." once. */
static void steps_add(char *buf, size_t len, int *n, int64_t step)
{
	if (*n > SCALE_STEPS_SHOWN)
		return;
	char item[32];
	if (*n == SCALE_STEPS_SHOWN)
		snprintf(item, sizeof item, ",...");
	else
		snprintf(item, sizeof item, "%s%" PRId64, *n ? "," : "", step);
	size_t used = strlen(buf);
	if (used + strlen(item) < len)
		memcpy(buf + used, item, strlen(item) + 1);
	(*n)++;
}

static int explain_scale(sqlite3 *db)
{
	sqlite3_stmt *st = NULL, *up = NULL;
	int rc = -1;
	if (sqlite3_exec(db, scale_cause_sql, NULL, NULL, NULL) != SQLITE_OK ||
	    sqlite3_exec(db, "UPDATE run_summary SET skipped_share = CAST(skipped_steps AS REAL) /"
	                     " nullif(" OPT_STEPS_SQL ", 0)", NULL, NULL, NULL) != SQLITE_OK)
		return -1;
	/* each history in turn: a rank's (a merged profile: identical histories), and within it
	 * each context (one scaler each: contexts of their own threads, or one after another in a
	 * thread); the first one, the lowest rank's first thread's first context, tells the story
	 */
	if (sqlite3_prepare_v2(db,
	                       "SELECT rowid, step, reason, old_scale, new_scale, rank,"
	                       " coalesce(thread, -1), coalesce(context, 0) FROM loss_scale"
	                       " ORDER BY rank, coalesce(thread, -1), coalesce(context, 0), step,"
	                       " rowid",
	                       -1, &st, NULL) != SQLITE_OK ||
	    sqlite3_prepare_v2(db, "UPDATE loss_scale SET clean_steps = ? WHERE rowid = ?", -1, &up,
	                       NULL) != SQLITE_OK)
		goto out;
	int64_t clean = 0, last_change = 0, backoffs = 0, growths = 0, probes = 0;
	int have_change = 0; /* last_change is the step whose end made the scale in force */
	int last_up = 0; /* the last change was a growth, the init or a probe */
	double first = NAN, final = NAN;
	/* probes, spikes, both (back-offs) and growths, SCALE_STEPS_SHOWN of each */
	char probe_steps[700] = "", spike_steps[700] = "", backoff_steps[700] = "",
	     growth_steps[700] = "";
	int pl = 0, sl = 0, bl = 0, gl = 0;
	int64_t rank = 0, thread = 0, context = 0;
	int ranks = 0; /* histories seen: the first one's rows tell the story, every row gets
	                  its clean steps */
	while (sqlite3_step(st) == SQLITE_ROW) {
		int64_t step = sqlite3_column_int64(st, 1);
		const char *reason = col_text(st, 2);
		if (ranks == 0 || sqlite3_column_int64(st, 5) != rank ||
		    sqlite3_column_int64(st, 6) != thread || sqlite3_column_int64(st, 7) != context) {
			rank = sqlite3_column_int64(st, 5);
			thread = sqlite3_column_int64(st, 6);
			context = sqlite3_column_int64(st, 7);
			ranks++;
			clean = last_change = 0;
			have_change = last_up = 0;
		}
		const int story = ranks == 1;
		if (story && first != first)
			first = sqlite3_column_double(st, 3);
		if (story)
			final = sqlite3_column_double(st, 4);
		if (strcmp(reason, "init") == 0) {
			last_change = step - 1; /* its scale is in force from this very step */
			have_change = last_up = 1;
		} else if (strcmp(reason, "overflow") == 0 || strcmp(reason, "nan") == 0) {
			int probe = strcmp(reason, "overflow") == 0 && last_up && have_change &&
			            step - last_change <= PROBE_STEPS;
			if (story) {
				backoffs++;
				probes += probe;
				if (probe)
					steps_add(probe_steps, sizeof probe_steps, &pl, step);
				else
					steps_add(spike_steps, sizeof spike_steps, &sl, step);
				steps_add(backoff_steps, sizeof backoff_steps, &bl, step);
			}
			last_change = step;
			have_change = 1;
			last_up = probe;
			clean = 0;
		} else if (strcmp(reason, "hold") == 0 || strcmp(reason, "growth") == 0) {
			clean++;
			sqlite3_bind_int64(up, 1, clean);
			sqlite3_bind_int64(up, 2, sqlite3_column_int64(st, 0));
			if (sqlite3_step(up) != SQLITE_DONE)
				goto out;
			sqlite3_reset(up);
			if (strcmp(reason, "growth") == 0) {
				if (story) {
					growths++;
					steps_add(growth_steps, sizeof growth_steps, &gl, step);
				}
				last_change = step;
				have_change = last_up = 1;
				clean = 0;
			}
		}
	}
	if (!scale_is_dynamic(db)) {
		rc = 0;
		goto out;
	}
	double floor_cfg = query_double(db, "SELECT CAST(value AS REAL) FROM meta WHERE key IN "
	                                    "('loss_scale_min', 'app.loss_scale_min') LIMIT 1", 1.0);
	const char *history;
	char shown[800];
	if (backoffs == 0) {
		history = "steady";
		snprintf(shown, sizeof shown, "%s", growth_steps);
	} else if (backoffs >= 3 && backoffs > growths &&
	           (final <= first / 8.0 || final <= 16.0 * floor_cfg)) {
		history = "collapsing";
		snprintf(shown, sizeof shown, "%s", backoff_steps);
	} else if (2 * probes >= backoffs) {
		history = "probing";
		snprintf(shown, sizeof shown, "%s", probe_steps);
	} else {
		history = "isolated_spikes";
		snprintf(shown, sizeof shown, "%s", spike_steps);
	}
	sqlite3_finalize(up);
	up = NULL;
	if (sqlite3_prepare_v2(db, "UPDATE run_summary SET scale_history = ?, scale_history_steps = ?",
	                       -1, &up, NULL) != SQLITE_OK)
		goto out;
	sqlite3_bind_text(up, 1, history, -1, SQLITE_STATIC);
	if (shown[0])
		sqlite3_bind_text(up, 2, shown, -1, SQLITE_TRANSIENT);
	rc = sqlite3_step(up) == SQLITE_DONE ? 0 : -1;
out:
	sqlite3_finalize(st);
	sqlite3_finalize(up);
	return rc;
}

/* The scale history in words, with its steps and the first back-off's cause; and skipped
 * optimizer steps frequent enough to shift a learning-rate schedule (more than 2 % of the
 * steps, at least 3): a schedule counted in steps then runs ahead of the updates. */
static int rule_scale_history(sqlite3 *db)
{
	char history[32], steps[800];
	query_text(db, "SELECT scale_history FROM run_summary", history, sizeof history);
	query_text(db, "SELECT scale_history_steps FROM run_summary", steps, sizeof steps);
	double nsteps = query_double(db, "SELECT " OPT_STEPS_SQL, 0);
	double skipped = query_double(db, "SELECT skipped_steps FROM run_summary", 0);
	double backoffs = query_double(db, "SELECT count(*) FROM run_loss_scale WHERE reason IN "
	                                   "('overflow', 'nan')", 0);
	double growths = query_double(db, "SELECT count(*) FROM run_loss_scale WHERE reason = 'growth'",
	                              0);
	int rc = 0;
	if (history[0] && strcmp(history, "steady") != 0) {
		/* the first back-off and its cause */
		char cause[1400] = "";
		sqlite3_stmt *st = NULL;
		if (sqlite3_prepare_v2(db,
		                       "SELECT l.step, l.old_scale, l.new_scale, l.reason, l.cause_op,"
		                       " l.cause_tensor, c.file, c.line, f.file, f.line, l.cause_absmax"
		                       " FROM run_loss_scale l LEFT JOIN callsites c ON c.id = l.cause_callsite"
		                       " LEFT JOIN callsites f ON f.id = l.cause_fwd_callsite"
		                       " WHERE l.reason IN ('overflow', 'nan') ORDER BY l.step, l.rowid"
		                       " LIMIT 1", -1, &st, NULL) != SQLITE_OK)
			return -1;
		if (sqlite3_step(st) == SQLITE_ROW) {
			char site[600], fwd[600], absmax[160] = "";
			site_text(site, sizeof site, (const char *)sqlite3_column_text(st, 6),
			          sqlite3_column_int(st, 7));
			site_text(fwd, sizeof fwd, (const char *)sqlite3_column_text(st, 8),
			          sqlite3_column_int(st, 9));
			/* the absmax before the overflow; a gradient's as what the scale made of it (a
			 * forward tensor is not scaled: its absmax is its own) */
			const char *ct = col_text(st, 5);
			size_t ctl = strlen(ct);
			int grad = sqlite3_column_type(st, 8) != SQLITE_NULL ||
			           (ctl >= 5 && strcmp(ct + ctl - 5, ".grad") == 0);
			if (sqlite3_column_type(st, 10) != SQLITE_NULL && sqlite3_column_double(st, 1) > 0 &&
			    grad)
				snprintf(absmax, sizeof absmax, ", absmax %.9g = %.9g x scale %.9g the step "
				         "before", sqlite3_column_double(st, 10),
				         sqlite3_column_double(st, 10) / sqlite3_column_double(st, 1),
				         sqlite3_column_double(st, 1));
			else if (sqlite3_column_type(st, 10) != SQLITE_NULL)
				snprintf(absmax, sizeof absmax, ", absmax %.9g the step before",
				         sqlite3_column_double(st, 10));
			size_t cl = (size_t)snprintf(cause, sizeof cause,
			                             "; first back-off at step %" PRId64 " (%.9g -> %.9g, %s)",
			                             (int64_t)sqlite3_column_int64(st, 0),
			                             sqlite3_column_double(st, 1),
			                             sqlite3_column_double(st, 2), col_text(st, 3));
			if (sqlite3_column_type(st, 4) != SQLITE_NULL && cl < sizeof cause)
				snprintf(cause + cl, sizeof cause - cl, ": %s %s%s%s%s%s%s", col_text(st, 4),
				         col_text(st, 5), site[0] ? " at " : "", site,
				         fwd[0] ? ", forward at " : "", fwd, absmax);
		}
		sqlite3_finalize(st);
		char msg[2048];
		const char *what = strcmp(history, "probing") == 0
		                       ? "probing (normal: the scaler grows, overflows, backs off and "
		                         "recovers)"
		                   : strcmp(history, "collapsing") == 0
		                       ? "collapsing (back-offs outpacing growth, the floor in reach)"
		                       : "isolated spikes (back-offs with the scale settled, not "
		                         "right after it grew)";
		snprintf(msg, sizeof msg,
		         "loss scale history: %s: %.0f back-off(s), %.0f growth(s), at steps %s%s", what,
		         backoffs, growths, steps[0] ? steps : "-", cause);
		rc |= add_advice(db, "loss_scale_history",
		                 strcmp(history, "collapsing") == 0 ? "warning" : "info", msg, NULL,
		                 NULL, -1, -1);
	}
	if (nsteps > 0 && skipped >= 3 && skipped / nsteps > 0.02) {
		char msg[512];
		snprintf(msg, sizeof msg,
		         "%.0f of %.0f optimizer steps (%.1f %%) were skipped by the loss scaler: a "
		         "learning-rate schedule counted in steps runs %.1f %% ahead of the updates "
		         "(warm-up and decay come early); count the schedule in applied updates or fix "
		         "what overflows", skipped, nsteps, 100.0 * skipped / nsteps,
		         100.0 * skipped / nsteps);
		rc |= add_advice(db, "skipped_steps", "warning", msg, NULL, NULL,
		                 (int64_t)query_double(db, "SELECT min(step) FROM run_steps WHERE skipped = 1",
		                                       -1),
		                 -1);
	}
	return rc;
}

static int run_scale_history(sqlite3 *db, double fp16, double copy)
{
	(void)fp16, (void)copy;
	return rule_scale_history(db);
}

/* ---- overflow forecast and FP16 readiness ----------------------------------------------------- */

#define FP16_MAX 65504.0
#define FP16_NORMAL_MIN 0x1p-14

/* One tensor's series of checked steps, as least-squares sums (forecast). */
typedef struct series {
	char name[128], op[64], role[16];
	double n, sx, sy, sxx, sxy, syy, su, sxu;
	int64_t first, last, callsite;
	double absmax, share;
} series;

static int series_flush(sqlite3 *db, sqlite3_stmt *ins, const series *s, double final_scale)
{
	if (s->n < 8)
		return 0;
	double det = s->n * s->sxx - s->sx * s->sx;
	if (det <= 0)
		return 0;
	double b = (s->n * s->sxy - s->sx * s->sy) / det, a = (s->sy - b * s->sx) / s->n;
	double vy = s->n * s->syy - s->sy * s->sy;
	double r2 = vy > 0 ? (s->n * s->sxy - s->sx * s->sy) * (s->n * s->sxy - s->sx * s->sy) /
	                         (det * vy)
	                   : 0;
	double drift = (s->n * s->sxu - s->sx * s->su) / det;
	int grad = strcmp(s->role, "grad") == 0;
	double limit = grad ? FP16_MAX / (final_scale > 0 ? final_scale : 1) : FP16_MAX;
	int grows = b > 0 && r2 >= 0.5;
	int drifts = drift > 0 && s->share > 0.01;
	if (!grows && !drifts)
		return 0;
	(void)db;
	sqlite3_bind_text(ins, 1, s->name, -1, SQLITE_TRANSIENT);
	sqlite3_bind_text(ins, 2, s->op, -1, SQLITE_TRANSIENT);
	sqlite3_bind_text(ins, 3, s->role, -1, SQLITE_TRANSIENT);
	if (s->callsite > 0)
		sqlite3_bind_int64(ins, 4, s->callsite);
	sqlite3_bind_int64(ins, 5, (int64_t)s->n);
	sqlite3_bind_int64(ins, 6, s->first);
	sqlite3_bind_int64(ins, 7, s->last);
	sqlite3_bind_double(ins, 8, s->absmax);
	sqlite3_bind_double(ins, 9, exp(b));
	sqlite3_bind_double(ins, 10, r2);
	sqlite3_bind_double(ins, 11, limit);
	if (grows) {
		double at = (log(limit) - a) / b;
		sqlite3_bind_double(ins, 12, at);
		sqlite3_bind_double(ins, 13, at - (double)s->last);
	}
	sqlite3_bind_double(ins, 14, s->share);
	sqlite3_bind_double(ins, 15, drift);
	int rc = sqlite3_step(ins) == SQLITE_DONE ? 0 : -1;
	sqlite3_reset(ins);
	sqlite3_clear_bindings(ins);
	return rc;
}

/* The forecast table (see profile.sql): one pass over the FP16 tensors' finite rows in series
 * order.  Gradients are divided by their step's scale, so a back-off is not a trend. */
static int build_forecast(sqlite3 *db)
{
	sqlite3_stmt *st = NULL, *ins = NULL;
	int rc = -1;
	double final_scale = query_double(db, "SELECT new_scale FROM run_loss_scale WHERE new_scale IS "
	                                      "NOT NULL ORDER BY step DESC, rowid DESC LIMIT 1", 1);
	if (sqlite3_exec(db, "DELETE FROM forecast", NULL, NULL, NULL) != SQLITE_OK ||
	    sqlite3_prepare_v2(db,
	                       "SELECT t.name, t.op, t.role, t.step, t.absmax, t.count, t.underflow,"
	                       " t.callsite, (SELECT scale FROM steps s WHERE s.step = t.step"
	                       " ORDER BY s.rowid LIMIT 1) FROM tensor_stats t WHERE t.dtype = 'fp16'"
	                       " AND t.role IN ('output', 'grad') AND t.nan = 0 AND t.inf = 0"
	                       " AND t.count > 0 AND t.name IS NOT NULL"
	                       /* a merged profile: one rank's series (the ranks' interleaved
	                        * would be no series; their tensors grow alike) */
	                       " AND t.rank = (SELECT min(rank) FROM tensor_stats)"
	                       " ORDER BY t.name, t.role, t.op, t.step, t.id", -1, &st,
	                       NULL) != SQLITE_OK ||
	    sqlite3_prepare_v2(db,
	                       "INSERT INTO forecast(name, op, role, dtype, callsite, points,"
	                       " first_step, last_step, absmax, growth, r2, limit_value,"
	                       " overflow_step, steps_left, underflow_share, underflow_drift)"
	                       " VALUES (?1, ?2, ?3, 'fp16', ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12,"
	                       " ?13, ?14, ?15)", -1, &ins, NULL) != SQLITE_OK)
		goto out;
	series cur;
	memset(&cur, 0, sizeof cur);
	int have = 0;
	while (sqlite3_step(st) == SQLITE_ROW) {
		const char *name = col_text(st, 0), *op = col_text(st, 1), *role = col_text(st, 2);
		if (!have || strcmp(cur.name, name) != 0 || strcmp(cur.op, op) != 0 ||
		    strcmp(cur.role, role) != 0) {
			if (have && series_flush(db, ins, &cur, final_scale) != 0)
				goto out;
			memset(&cur, 0, sizeof cur);
			snprintf(cur.name, sizeof cur.name, "%s", name);
			snprintf(cur.op, sizeof cur.op, "%s", op);
			snprintf(cur.role, sizeof cur.role, "%s", role);
			cur.first = sqlite3_column_int64(st, 3);
			have = 1;
		}
		double x = (double)sqlite3_column_int64(st, 3), absmax = sqlite3_column_double(st, 4);
		double count = sqlite3_column_double(st, 5), under = sqlite3_column_double(st, 6);
		double scale = sqlite3_column_type(st, 8) == SQLITE_NULL ? 1 : sqlite3_column_double(st, 8);
		double u = under / count;
		cur.last = (int64_t)x;
		cur.absmax = absmax;
		cur.share = u;
		cur.callsite = sqlite3_column_type(st, 7) == SQLITE_NULL ? -1 : sqlite3_column_int64(st, 7);
		cur.su += u;
		cur.sxu += x * u;
		if (!(absmax > 0))
			continue; /* all zeros: no magnitude to fit */
		double y = log(strcmp(role, "grad") == 0 && scale > 0 ? absmax / scale : absmax);
		cur.n += 1;
		cur.sx += x;
		cur.sy += y;
		cur.sxx += x * x;
		cur.sxy += x * y;
		cur.syy += y * y;
	}
	if (have && series_flush(db, ins, &cur, final_scale) != 0)
		goto out;
	rc = 0;
out:
	sqlite3_finalize(st);
	sqlite3_finalize(ins);
	return rc;
}

/* The nearest predicted overflows, as advice (the report and ampview show them): up to 5 series
 * whose overflow is predicted ahead of the last step fitted.  An Exp's output grows by the
 * factor its input grows by in the exponent: said that way ("its input grows 0.0198 per
 * step").  Also the underflow drift of the series furthest under FP16's normal range. */
/* How far ahead a trend is trusted: as many steps as it was fitted over, 100 at least.  A
 * slow drift far from the limit (logits growing as training converges: x1.003 a step at 10,
 * "overflowing" 2600 steps on) is extrapolated from a curve that is not exponential; the
 * forecast table keeps it, the advice does not warn of it. */
#define FORECAST_HORIZON_MIN 100

static int rule_forecast(sqlite3 *db)
{
	sqlite3_stmt *st = NULL;
	if (sqlite3_prepare_v2(db,
	                       "SELECT f.name, f.op, f.role, f.growth, f.overflow_step, f.steps_left,"
	                       " f.limit_value, f.last_step, c.file, c.line, f.callsite, f.absmax"
	                       " FROM forecast f LEFT JOIN callsites c ON c.id = f.callsite"
	                       " WHERE f.steps_left > 0 AND f.steps_left <="
	                       " max(f.last_step - f.first_step, ?1)"
	                       " ORDER BY f.steps_left, f.name LIMIT 5",
	                       -1, &st, NULL) != SQLITE_OK)
		return -1;
	sqlite3_bind_int(st, 1, FORECAST_HORIZON_MIN);
	advice_buf ev = {.used = 0};
	char first[1024] = "", first_op[64] = "";
	int64_t site = -1;
	int n = 0;
	while (sqlite3_step(st) == SQLITE_ROW) {
		const char *name = col_text(st, 0), *op = col_text(st, 1), *role = col_text(st, 2);
		double g = sqlite3_column_double(st, 3), at = sqlite3_column_double(st, 4);
		char how[160], where[600];
		if (strcmp(op, "Exp") == 0 && strcmp(role, "output") == 0)
			snprintf(how, sizeof how, "Exp input grows %.3g per step (its output x%.4g)",
			         log(g), g);
		else
			snprintf(how, sizeof how, "%s %s grows x%.4g per step", op,
			         strcmp(role, "grad") == 0 ? "gradient (unscaled)" : "output", g);
		site_text(where, sizeof where, (const char *)sqlite3_column_text(st, 8),
		          sqlite3_column_int(st, 9));
		/* a tensor that went non-finite already (the fit reads its finite steps): said, so
		 * that the forecast does not read as the first warning of it */
		char already[160] = "";
		int64_t first_bad = -1, bad_steps = 0;
		if (amp_profile_query_int64(
		        db, &bad_steps,
		        "SELECT count(DISTINCT step) FROM tensor_stats WHERE name = ?"
		        " AND role = ? AND (inf > 0 OR nan > 0)",
		        "tt", name, role) == AMP_PROFILE_OK &&
		    bad_steps > 0 &&
		    amp_profile_query_int64(db, &first_bad,
		                            "SELECT min(step) FROM tensor_stats WHERE name = ? AND"
		                            " role = ? AND (inf > 0 OR nan > 0)",
		                            "tt", name, role) == AMP_PROFILE_OK)
			snprintf(already, sizeof already,
			         " (it went non-finite already at step %" PRId64 ", %" PRId64
			         " step(s) in all)",
			         first_bad, bad_steps);
		buf_add(&ev,
		        "%s%.127s: %s, overflows FP16 (%.9g) around step %.0f%s, %.0f step(s) "
		        "after the last one fitted (absmax %.6g at step %" PRId64 ")%s%s",
		        n ? "\n" : "", name, how, sqlite3_column_double(st, 6), at, already,
		        sqlite3_column_double(st, 5), sqlite3_column_double(st, 11),
		        (int64_t)sqlite3_column_int64(st, 7), where[0] ? ", called at " : "",
		        where);
		if (!n) {
			snprintf(first, sizeof first,
			         "%.127s: %s, overflows FP16 around step %.0f%s", name, how, at,
			         already);
			snprintf(first_op, sizeof first_op, "%s", op);
			site = sqlite3_column_type(st, 10) == SQLITE_NULL ? -1 : sqlite3_column_int64(st, 10);
		}
		n++;
	}
	sqlite3_finalize(st);
	int rc = 0;
	if (n) {
		char msg[1400];
		snprintf(msg, sizeof msg, "overflow forecast: %s%s; keep it in range, run it in FP32 or "
		         "lower the loss scale before then", first,
		         n > 1 ? " (and more: see the evidence)" : "");
		/* no advice step: the predicted one has not run (the message names it) */
		rc |= add_advice(db, "overflow_forecast", "warning", msg, ev.text, first_op, -1, site);
	}
	/* underflow drift: the series with the largest share under FP16's normal range, rising */
	if (sqlite3_prepare_v2(db,
	                       "SELECT name, op, role, underflow_share, underflow_drift, last_step"
	                       " FROM forecast WHERE underflow_drift > 0 AND underflow_share > 0.01"
	                       " ORDER BY underflow_share DESC, name LIMIT 1", -1, &st,
	                       NULL) != SQLITE_OK)
		return -1;
	if (sqlite3_step(st) == SQLITE_ROW) {
		char msg[600];
		snprintf(msg, sizeof msg,
		         "underflow drift: %.1f %% of %.127s (%s %s) sits under FP16's normal range "
		         "(6.1e-5) at step %" PRId64 ", rising %.3g points per 100 steps",
		         100.0 * sqlite3_column_double(st, 3), col_text(st, 0), col_text(st, 1),
		         col_text(st, 2), (int64_t)sqlite3_column_int64(st, 5),
		         1e4 * sqlite3_column_double(st, 4));
		rc |= add_advice(db, "underflow_drift", "info", msg, NULL, col_text(st, 1), -1, -1);
	}
	sqlite3_finalize(st);
	return rc;
}

/* FP16 readiness of an FP32 run (no half type ran): from its checked tensors' absmax and
 * headroom counts, which would overflow FP16 (absmax above 65504) and which gradients hold
 * values under its normal range (they would flush without a loss scale); the verdict goes to
 * run_summary.fp16_ready and an advice row. */
static int rule_fp16_ready(sqlite3 *db)
{
	char types[32];
	query_text(db, "SELECT coalesce(half_types, '') FROM run_summary", types, sizeof types);
	double rows = query_double(db, "SELECT count(*) FROM tensor_stats WHERE dtype = 'fp32'", 0);
	if (types[0] || rows <= 0)
		return 0;
	/* no half op recorded is not an FP32 run when the mode is a half one, or half tensors
	 * were checked (a --steps range the run never reached records no op at all) */
	char mode[64];
	mode_in_force(db, mode, sizeof mode);
	if ((mode[0] && strcmp(mode, "force_fp32") != 0 &&
	     strcmp(mode, "must_keep_origin_dtype") != 0) ||
	    query_double(db, "SELECT count(*) FROM tensor_stats WHERE dtype IN ('fp16', 'bf16')",
	                 0) > 0)
		return 0;
	sqlite3_stmt *st = NULL;
	advice_buf ev = {.used = 0};
	char over[512] = "", under[512] = "";
	size_t ol = 0, ul = 0;
	int n_over = 0, n_under = 0;
	if (sqlite3_prepare_v2(db,
	                       "SELECT name, op, role, max(absmax), min(step) FROM tensor_stats"
	                       " WHERE dtype = 'fp32' AND absmax > 65504 AND role <> 'input'"
	                       " GROUP BY name, op, role ORDER BY 4 DESC, 1 LIMIT 8", -1, &st,
	                       NULL) != SQLITE_OK)
		return -1;
	while (sqlite3_step(st) == SQLITE_ROW) {
		buf_add(&ev, "%s%.127s (%s %s): absmax %.6g above 65504, first at step %" PRId64,
		        ev.used ? "\n" : "", col_text(st, 0), col_text(st, 1), col_text(st, 2),
		        sqlite3_column_double(st, 3), (int64_t)sqlite3_column_int64(st, 4));
		if (n_over < 4 && ol < sizeof over)
			ol += (size_t)snprintf(over + ol, sizeof over - ol, "%s%.100s (%s, from step %"
			                       PRId64 ")", n_over ? ", " : "", col_text(st, 0),
			                       col_text(st, 1), (int64_t)sqlite3_column_int64(st, 4));
		n_over++;
	}
	sqlite3_finalize(st);
	if (sqlite3_prepare_v2(db,
	                       "SELECT name, op, total(underflow) / total(count), max(absmax)"
	                       " FROM tensor_stats WHERE dtype = 'fp32' AND role = 'grad'"
	                       " AND count > 0 GROUP BY name, op HAVING total(underflow) / total(count)"
	                       " > 0.01 ORDER BY 3 DESC, 1 LIMIT 8", -1, &st, NULL) != SQLITE_OK)
		return -1;
	while (sqlite3_step(st) == SQLITE_ROW) {
		buf_add(&ev, "%s%.127s (%s gradient): %.1f %% of its values under 6.1e-5", 
		        ev.used ? "\n" : "", col_text(st, 0), col_text(st, 1),
		        100.0 * sqlite3_column_double(st, 2));
		if (n_under < 4 && ul < sizeof under)
			ul += (size_t)snprintf(under + ul, sizeof under - ul, "%s%.100s (%.1f %%)",
			                       n_under ? ", " : "", col_text(st, 0),
			                       100.0 * sqlite3_column_double(st, 2));
		n_under++;
	}
	sqlite3_finalize(st);
	double gmax = query_double(db, "SELECT max(absmax) FROM tensor_stats WHERE dtype = 'fp32' "
	                               "AND role = 'grad'", 0);
	const char *verdict = n_over ? "overflows" : n_under ? "needs_loss_scale" : "ready";
	char msg[2048], scale[160] = "";
	if (n_under && gmax > 0)
		snprintf(scale, sizeof scale, "; a static scale of %.9g would keep the largest gradient "
		         "(%.3g) below 32768", fmin(exp2(floor(log2(32768.0 / gmax))), 16777216.0),
		         gmax);
	size_t ml = (size_t)snprintf(msg, sizeof msg, "FP16 readiness of this FP32 run: ");
	if (!n_over && !n_under)
		snprintf(msg + ml, sizeof msg - ml, "every checked tensor fits FP16's range (no absmax "
		         "above 65504, gradients above its normal range): it can run in "
		         "allow_mix_precision as it is");
	else {
		if (n_over && ml < sizeof msg)
			ml += (size_t)snprintf(msg + ml, sizeof msg - ml, "%d tensor(s) would overflow "
			                       "FP16: %s; keep them in FP32 (custom_black_list) or in range",
			                       n_over, over);
		if (n_under && ml < sizeof msg)
			snprintf(msg + ml, sizeof msg - ml, "%s%d gradient(s) would underflow without a "
			         "loss scale: %s; the run needs one (dynamic scaling, the FP16 default)%s",
			         n_over ? "; " : "", n_under, under, scale);
	}
	sqlite3_stmt *up = NULL;
	if (sqlite3_prepare_v2(db, "UPDATE run_summary SET fp16_ready = ?", -1, &up, NULL) !=
	    SQLITE_OK)
		return -1;
	sqlite3_bind_text(up, 1, verdict, -1, SQLITE_STATIC);
	int rc = sqlite3_step(up) == SQLITE_DONE ? 0 : -1;
	sqlite3_finalize(up);
	return rc | add_advice(db, "fp16_readiness", n_over ? "warning" : "info", msg, ev.text, NULL,
	                       -1, -1);
}

static int run_forecast(sqlite3 *db, double fp16, double copy)
{
	(void)fp16, (void)copy;
	return build_forecast(db) || rule_forecast(db) || rule_fp16_ready(db) ? -1 : 0;
}

static int run_dist(sqlite3 *db, double fp16, double copy)
{
	(void)fp16, (void)copy;
	return prof_dist_rules(db);
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
	/* each cause in why carries its own remedy */
	snprintf(msg, sizeof msg, "the profile does not hold the whole run: %s; the figures and "
	         "the advice here cover what was recorded", why);
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

/* The executions of each op_summary row (op, exec_dtype), by op_summary.rowid. */
#define OP_GROUP_FROM \
    " FROM op_events e JOIN op_sigs s ON s.id = e.sig JOIN op_summary g" \
    " ON g.op = s.op AND g.exec_dtype = s.exec_dtype"

typedef struct dur_acc {
	int64_t rowid, n, i;         /* group, its count, values seen */
	int64_t min, max, lo, hi;    /* lo, hi: the middle values (equal for an odd count) */
	double mean, m2;             /* Welford's running mean and sum of squared deviations */
} dur_acc;

static int dur_flush(sqlite3_stmt *upd, const dur_acc *a)
{
	if (a->i == 0)
		return 0;
	sqlite3_bind_int64(upd, 1, a->rowid);
	sqlite3_bind_double(upd, 2, ((double)a->lo + (double)a->hi) / 2);
	sqlite3_bind_int64(upd, 3, a->min);
	sqlite3_bind_int64(upd, 4, a->max);
	sqlite3_bind_double(upd, 5, sqrt(a->m2 / (double)a->i));
	int rc = sqlite3_step(upd);
	sqlite3_reset(upd);
	return rc == SQLITE_DONE ? 0 : -1;
}

/* op_summary's duration statistics (median, min, max, standard deviation of dur_ns) from one
 * scan of the executions sorted by group and duration, after a count per group that places
 * the middle.  Returns 0 or -1 (SQLite error). */
static int op_duration_stats(sqlite3 *db)
{
	sqlite3_stmt *cnt = NULL, *dur = NULL, *upd = NULL;
	int rc = -1, step;
	dur_acc a = {.rowid = -1};
	if (sqlite3_prepare_v2(db, "SELECT g.rowid, count(*)" OP_GROUP_FROM " WHERE e.dur_ns IS NOT"
	                       " NULL GROUP BY g.rowid ORDER BY g.rowid", -1, &cnt, NULL) != SQLITE_OK ||
	    sqlite3_prepare_v2(db, "SELECT g.rowid, e.dur_ns" OP_GROUP_FROM
	                       " WHERE e.dur_ns IS NOT NULL ORDER BY g.rowid, e.dur_ns", -1, &dur,
	                       NULL) != SQLITE_OK ||
	    sqlite3_prepare_v2(db, "UPDATE op_summary SET median_ns = ?2, min_ns = ?3, max_ns = ?4,"
	                       " stddev_ns = ?5 WHERE rowid = ?1", -1, &upd, NULL) != SQLITE_OK)
		goto out;
	while ((step = sqlite3_step(dur)) == SQLITE_ROW) {
		int64_t rowid = sqlite3_column_int64(dur, 0), d = sqlite3_column_int64(dur, 1);
		if (rowid != a.rowid) {
			if (dur_flush(upd, &a) != 0)
				goto out;
			a = (dur_acc){.rowid = rowid};
			while (sqlite3_step(cnt) == SQLITE_ROW)
				if (sqlite3_column_int64(cnt, 0) == rowid) {
					a.n = sqlite3_column_int64(cnt, 1);
					break;
				}
			a.min = d;
		}
		if (a.i == (a.n - 1) / 2)
			a.lo = d;
		if (a.i == a.n / 2)
			a.hi = d;
		a.max = d;
		a.i++;
		double delta = (double)d - a.mean;
		a.mean += delta / (double)a.i;
		a.m2 += delta * ((double)d - a.mean);
	}
	if (step == SQLITE_DONE && dur_flush(upd, &a) == 0)
		rc = 0;
out:
	sqlite3_finalize(cnt);
	sqlite3_finalize(dur);
	sqlite3_finalize(upd);
	return rc;
}

/* The run's steps and loss-scale decisions, once each: a merged data-parallel profile has a
 * row per rank for each, and the ranks take every step and every scaler decision together
 * (their scale histories are identical), so the step counts, the scale's story and the rules
 * about it read the lowest rank's rows; and of those the first thread's, one context's scaler
 * (threads that train contexts of their own each have one; explain_scale tells the same
 * one).  Times (step_ns, the shares) add up every rank's. */
static const char run_views_sql[] =
    "DROP VIEW IF EXISTS temp.run_steps; DROP VIEW IF EXISTS temp.run_loss_scale;"
    "CREATE TEMP VIEW run_steps AS SELECT * FROM main.steps"
    "  WHERE rank IS (SELECT min(rank) FROM main.steps);"
    "CREATE TEMP VIEW run_loss_scale AS SELECT * FROM main.loss_scale"
    "  WHERE rank IS (SELECT min(rank) FROM main.loss_scale)"
    "  AND coalesce(thread, -1) = (SELECT min(coalesce(thread, -1)) FROM main.loss_scale"
    "    WHERE rank IS (SELECT min(rank) FROM main.loss_scale));";

/* One rank's own profile of a data-parallel run (meta rank, written by libamprt_mpi; not a
 * merged one) says that rank in its rows, as the merge of it will. */
static int own_rank(sqlite3 *db, char **msg)
{
	int64_t rank = 0;
	char from[8];
	if (amp_profile_query_int64(db, &rank, "SELECT CAST(value AS INTEGER) FROM meta"
	                                       " WHERE key = 'rank'", NULL) != AMP_PROFILE_OK ||
	    rank == 0 || amp_profile_meta_get(db, "merged_from", from, sizeof from) == AMP_PROFILE_OK)
		return SQLITE_OK;
	static const char *const tables[] = {"threads", "op_events", "copy_events", "steps",
	                                     "loss_scale", "memory", "tensor_stats", "dumps",
	                                     "crashes", "nonfinite", "comm", "context_ends"};
	for (size_t i = 0; i < sizeof tables / sizeof tables[0]; i++) {
		if (!amp_profile_has_column(db, tables[i], "rank"))
			continue;
		char sql[160];
		snprintf(sql, sizeof sql, "UPDATE %s SET rank = %lld WHERE rank IS NOT %lld", tables[i],
		         (long long)rank, (long long)rank);
		int rc = sqlite3_exec(db, sql, NULL, NULL, msg);
		if (rc != SQLITE_OK)
			return rc;
	}
	return SQLITE_OK;
}

int prof_summarize(sqlite3 *db, double fp16_threshold, double memcpy_threshold)
{
	char *msg = NULL;
	/* the advice rules, in order of importance; the thresholds are percentages */
	static const struct {
		const char *name;
		int (*run)(sqlite3 *db, double fp16_threshold, double memcpy_threshold);
	} rules[] = {
	    {"incomplete", run_incomplete},
	    {"nonfinite", run_nonfinite}, {"sensitive", run_sensitive}, {"scale", run_scale},
	    {"scale_history", run_scale_history}, {"grad_underflow", run_grad_underflow},
	    {"forecast", run_forecast},
	    {"fp16", run_fp16},           {"emulated", run_emulated},   {"copies", run_copies},
	    {"gemm", run_gemm},           {"dist", run_dist},
	};
	enum { N_RULES = sizeof rules / sizeof rules[0] };
	amp_progress pr;
	amp_progress_begin(&pr, "ampprof", "finalize", 4 + N_RULES);
	amp_progress_watch(&pr, db);
	int listed = amp_profile_has_table(db, "nonfinite");
	if (sqlite3_exec(db, "BEGIN", NULL, NULL, &msg) != SQLITE_OK ||
	    amp_profile_upgrade(db) != AMP_PROFILE_OK || own_rank(db, &msg) != SQLITE_OK ||
	    sqlite3_exec(db, run_views_sql, NULL, NULL, &msg) != SQLITE_OK ||
	    /* a profile written before the writer listed the origins: find them once */
	    (!listed &&
	     sqlite3_exec(db, "INSERT INTO nonfinite(step, op, label, phase, role, dtype, nan, inf,"
	                      " neg_inf, callsite, seq, stats_id, thread, rank) SELECT step, op, name,"
	                      " phase, role, dtype, nan, inf, neg_inf, callsite, seq, id, thread, rank"
	                      " FROM tensor_stats WHERE origin = 1", NULL, NULL, &msg) != SQLITE_OK) ||
	    (amp_progress_set(&pr, "totals and indexes", 0),
	     sqlite3_exec(db, finalize_sql, NULL, NULL, &msg) != SQLITE_OK) ||
	    (amp_progress_set(&pr, "summaries", 1), prof_memory_sum(db) != 0 ||
	     run_summary_sql(db, &msg) != SQLITE_OK ||
	     prof_dist_summary(db, &msg) != SQLITE_OK) ||
	    (amp_progress_set(&pr, "op duration statistics", 2), op_duration_stats(db) != 0) ||
	    (amp_progress_set(&pr, "non-finite values", 3),
	     sqlite3_exec(db, nonfinite_sql, NULL, NULL, &msg) != SQLITE_OK ||
	     run_cause_sql(db, &msg) != SQLITE_OK || explain_scale(db) != 0)) {
		amp_progress_end(&pr);
		prof_error(NULL, "cannot finalize the profile: %s", msg ? msg : sqlite3_errmsg(db));
		sqlite3_free(msg);
		sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
		return -1;
	}
	/* the advice rules, in order of importance; the thresholds are percentages */
	for (size_t i = 0; i < N_RULES; i++) {
		amp_progress_set(&pr, "advice", 4 + i);
		if (rules[i].run(db, fp16_threshold, memcpy_threshold) != 0) {
			amp_progress_end(&pr);
			prof_error(NULL, "cannot write advice (rule %s): %s", rules[i].name,
			           sqlite3_errmsg(db));
			sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
			return -1;
		}
	}
	amp_progress_set(&pr, "commit", 4 + N_RULES);
	int committed = sqlite3_exec(db, "COMMIT", NULL, NULL, &msg);
	amp_progress_end(&pr);
	if (committed != SQLITE_OK) {
		prof_error(NULL, "cannot finalize the profile: %s", msg ? msg : sqlite3_errmsg(db));
		sqlite3_free(msg);
		return -1;
	}
	return 0;
}

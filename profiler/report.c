/* report.c — the run summary, as text (the end of every profile run, `ampprof report`) or
 * JSON (`ampprof report --format=json`), read from run_summary, op_summary, nonfinite, advice
 * and meta: the figures, the non-finite values by class, the dumps written and skipped, the
 * ampdump command for the first origin, the top ops and the advice.
 *
 * Both formats show the same figures; JSON keys are stable, with "format_version".  Strings
 * from the application are sanitized in text and escaped in JSON, and numbers follow one rule
 * (amp_text.h): %.9g, and a JSON number that is not finite is null plus "<key>_nonfinite".
 * The half share: JSON "fp16_share" (the key predates bf16) and its copy "half_share" count
 * fp16 and bf16 ops; "half_types" ("fp16", "bf16", "fp16+bf16" or null) and "half_label"
 * (the text's label) say which ran; "native_half_share" is the time on half engines (null if
 * the profile predates engines).
 */
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "amp_text.h"
#include "prof.h"
#include "profile_db.h"

typedef struct summary {
	double fp16_share, fp16_flop_share, copy_share, min_scale, max_scale;
	int64_t steps, overflow_steps, skipped_steps, complete, wall_ns, step_ns, op_count,
	    copy_count, peak_bytes;
	int have;
	double fp16_thr, copy_thr;
	char command[1024], end[64], exit_status[32], exit_signal[32], dropped[32];
	char incomplete[1024];       /* meta incomplete: what the run did not record, "" if all */
	double native_share;         /* NAN if unknown */
	int engines;                 /* the profile records engines (version 2 on) */
	char half_types[16];         /* "" for an FP32 run */
	int64_t ranks;               /* of a merged profile (steps counts each step once, step_ns
	                                adds every rank's); 1 otherwise */
	int64_t timed_steps;         /* step rows with a time, every rank's: step_ns's count */
} summary;

static double col_real(sqlite3_stmt *st, int i)
{
	return sqlite3_column_type(st, i) == SQLITE_NULL ? (double)NAN : sqlite3_column_double(st, i);
}

static int64_t col_int(sqlite3_stmt *st, int i)
{
	return sqlite3_column_type(st, i) == SQLITE_NULL ? -1 : sqlite3_column_int64(st, i);
}

static const char *col_str(sqlite3_stmt *st, int i)
{
	const unsigned char *t = sqlite3_column_text(st, i);
	return t ? (const char *)t : "";
}

static double meta_double(sqlite3 *db, const char *key, double dflt)
{
	char buf[64];
	if (amp_profile_meta_get(db, key, buf, sizeof buf) != AMP_PROFILE_OK || !buf[0])
		return dflt;
	return strtod(buf, NULL);
}

static int load_summary(sqlite3 *db, summary *s)
{
	sqlite3_stmt *st = NULL;
	memset(s, 0, sizeof *s);
	s->fp16_thr = meta_double(db, "options.fp16_threshold", 70);
	s->copy_thr = meta_double(db, "options.memcpy_threshold", 15);
	amp_profile_meta_get(db, "command", s->command, sizeof s->command);
	amp_profile_meta_get(db, "end", s->end, sizeof s->end);
	amp_profile_meta_get(db, "exit_status", s->exit_status, sizeof s->exit_status);
	amp_profile_meta_get(db, "exit_signal", s->exit_signal, sizeof s->exit_signal);
	amp_profile_meta_get(db, "dropped_events", s->dropped, sizeof s->dropped);
	amp_profile_meta_get(db, "incomplete", s->incomplete, sizeof s->incomplete);
	if (sqlite3_prepare_v2(db,
	                       "SELECT fp16_share, fp16_flop_share, copy_share, steps, overflow_steps,"
	                       " skipped_steps, min_scale, max_scale, complete, wall_ns, step_ns,"
	                       " op_count, copy_count, peak_bytes FROM run_summary", -1, &st,
	                       NULL) != SQLITE_OK)
		return -1;
	if (sqlite3_step(st) == SQLITE_ROW) {
		s->have = 1;
		s->fp16_share = col_real(st, 0);
		s->fp16_flop_share = col_real(st, 1);
		s->copy_share = col_real(st, 2);
		s->steps = col_int(st, 3);
		s->overflow_steps = col_int(st, 4);
		s->skipped_steps = col_int(st, 5);
		s->min_scale = col_real(st, 6);
		s->max_scale = col_real(st, 7);
		s->complete = col_int(st, 8);
		s->wall_ns = col_int(st, 9);
		s->step_ns = col_int(st, 10);
		s->op_count = col_int(st, 11);
		s->copy_count = col_int(st, 12);
		s->peak_bytes = col_int(st, 13);
	}
	sqlite3_finalize(st);
	/* version 2 columns: a version-1 profile has neither (unknown) */
	s->native_share = (double)NAN;
	s->engines = 0;
	s->half_types[0] = '\0';
	s->ranks = 1;
	if (sqlite3_prepare_v2(db, "SELECT ranks FROM run_summary", -1, &st, NULL) == SQLITE_OK &&
	    sqlite3_step(st) == SQLITE_ROW && sqlite3_column_int64(st, 0) > 1)
		s->ranks = sqlite3_column_int64(st, 0);
	sqlite3_finalize(st);
	s->timed_steps = 0;
	if (sqlite3_prepare_v2(db, "SELECT count(dur_ns) FROM steps", -1, &st, NULL) == SQLITE_OK &&
	    sqlite3_step(st) == SQLITE_ROW)
		s->timed_steps = sqlite3_column_int64(st, 0);
	sqlite3_finalize(st);
	if (sqlite3_prepare_v2(db, "SELECT native_half_share, half_types FROM run_summary", -1, &st,
	                       NULL) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW) {
		s->engines = 1;
		s->native_share = col_real(st, 0);
		if (sqlite3_column_type(st, 1) != SQLITE_NULL)
			snprintf(s->half_types, sizeof s->half_types, "%s", sqlite3_column_text(st, 1));
	}
	sqlite3_finalize(st);
	return 0;
}

static const char *mark(double share, double thr, int above_is_bad)
{
	if (!(share == share))
		return "n/a";
	double pct = share * 100.0;
	if (above_is_bad)
		return pct > thr ? "HIGH" : "ok";
	return pct < thr ? "LOW" : "ok";
}

static void pct(char *buf, size_t len, double share)
{
	if (share == share)
		snprintf(buf, len, "%.1f %%", share * 100.0);
	else
		snprintf(buf, len, "n/a");
}

void prof_bytes_text(char *buf, size_t len, int64_t b)
{
	if (b < 0)
		snprintf(buf, len, "n/a");
	else if (b >= 1 << 30)
		snprintf(buf, len, "%.2f GiB", (double)b / (1 << 30));
	else if (b >= 1 << 20)
		snprintf(buf, len, "%.2f MiB", (double)b / (1 << 20));
	else
		snprintf(buf, len, "%.1f KiB", (double)b / 1024);
}

/* The dump counters the runtime reported (meta), or what the dumps table holds without them. */
typedef struct dump_counts {
	int on;                      /* --dump=nonfinite or --dump-steps given */
	int64_t written, bytes, skipped, skipped_bytes;
	int64_t by_reason[AMP_DUMP_SKIP_REASONS]; /* in the order of amp_dump_skip_reasons */
} dump_counts;

static int64_t meta_int(sqlite3 *db, const char *key, int64_t dflt)
{
	char buf[64];
	if (amp_profile_meta_get(db, key, buf, sizeof buf) != AMP_PROFILE_OK || !buf[0])
		return dflt;
	return strtoll(buf, NULL, 10);
}

/* The single integer sql yields, or dflt (no row, NULL or an error). */
static int64_t query_int(sqlite3 *db, const char *sql, int64_t dflt)
{
	int64_t v = dflt;
	amp_profile_query_int64(db, &v, sql, NULL);
	return v;
}

static void load_dumps(sqlite3 *db, dump_counts *d)
{
	char buf[64];
	memset(d, 0, sizeof *d);
	d->on = (amp_profile_meta_get(db, "options.dump", buf, sizeof buf) == AMP_PROFILE_OK &&
	         strcmp(buf, "nonfinite") == 0) ||
	        (amp_profile_meta_get(db, "options.dump_steps", buf, sizeof buf) == AMP_PROFILE_OK &&
	         buf[0]);
	d->written = meta_int(db, "dumps_written", -1);
	d->bytes = meta_int(db, "dumps_bytes", -1);
	if (d->written < 0 || d->bytes < 0) {
		d->written = query_int(db, "SELECT count(*) FROM dumps", 0);
		d->bytes = query_int(db, "SELECT CAST(total(bytes) AS INTEGER) FROM dumps", 0);
	}
	d->skipped = meta_int(db, "dumps_skipped", 0);
	d->skipped_bytes = meta_int(db, "dumps_skipped_bytes", 0);
	for (int i = 0; i < AMP_DUMP_SKIP_REASONS; i++)
		d->by_reason[i] = meta_int(db, amp_dump_skip_reasons[i].key, 0);
	if (d->written > 0 || d->skipped > 0)
		d->on = 1;
}

/* First step with a recorded non-finite origin, or -1; in a profile of several ranks, the
 * lowest rank that has it there (*rank, else -1). */
static int64_t first_origin_step(sqlite3 *db, int64_t *rank)
{
	*rank = -1;
	if (!amp_profile_has_table(db, "nonfinite"))
		return -1;
	int64_t step = query_int(db, "SELECT min(step) FROM nonfinite WHERE stats_id IS NOT NULL", -1);
	if (step >= 0 && amp_profile_has_column(db, "nonfinite", "rank") &&
	    query_int(db, "SELECT count(DISTINCT rank) FROM steps", 1) > 1)
		amp_profile_query_int64(db, rank,
		                        "SELECT min(rank) FROM nonfinite WHERE stats_id IS NOT NULL AND "
		                        "step = ?1", "i", step);
	return step;
}

/* The ampdump command line that shows step (its origin first), on rank (-1: one rank); with
 * located, ampdump as a user here runs it (build/bin/ampdump beside build/bin/ampprof), else
 * by its name (the JSON's, the same everywhere). */
static void ampdump_command(char *buf, size_t len, int64_t step, int64_t rank, const char *path,
                            int located)
{
	char r[32] = "", tool[1100] = "ampdump";
	if (rank >= 0)
		snprintf(r, sizeof r, " --rank %" PRId64, rank);
	if (located)
		prof_tool_command("ampdump", tool, sizeof tool);
	if (strcmp(path, "profile.db") == 0)
		snprintf(buf, len, "%s --step %" PRId64 "%s", tool, step, r);
	else
		snprintf(buf, len, "%s --step %" PRId64 "%s --db %s", tool, step, r, path);
}

/* Advice names ops and labels of the application: message and each evidence line are
 * sanitized (a newline in a label cannot forge an "evidence:" line). */
static void print_advice_row(FILE *f, sqlite3_stmt *st)
{
	fputs("    ", f);
	size_t w = amp_text_put(f, col_str(st, 0));
	fprintf(f, "%*s ", w < 8 ? (int)(8 - w) : 0, "");
	amp_text_put(f, col_str(st, 1));
	fputs(": ", f);
	amp_text_put(f, col_str(st, 2));
	fputc('\n', f);
	const char *ev = col_str(st, 3);
	char line[4096];
	while (*ev) {
		size_t n = strcspn(ev, "\n");
		snprintf(line, sizeof line, "%.*s", (int)(n < sizeof line ? n : sizeof line - 1), ev);
		fputs("             evidence: ", f);
		amp_text_put(f, line);
		fputc('\n', f);
		ev += n + (ev[n] == '\n');
	}
}

/* s sanitized for the terminal, left-aligned in width columns (at least one column more). */
static void put_padded(FILE *f, const char *s, size_t width)
{
	size_t w = amp_text_put(f, s);
	fprintf(f, "%*s", w < width ? (int)(width - w) : 0, "");
}

/* The op types (per exec dtype) the report lists. */
#define TOP_OPS 10

/* " %9.2f" of ns in microseconds, "      n/a" when unknown (NAN). */
static void us_col(FILE *f, double ns)
{
	if (ns == ns)
		fprintf(f, " %9.2f", ns / 1e3);
	else
		fprintf(f, " %9s", "n/a");
}

/* The rules of the nonfinite classes, shown under their own heading. */
#define NONFINITE_RULES                                                                           \
	"('forward_overflow', 'cast_overflow', 'underflow', 'invalid_operation', "                    \
	"'scaled_grad_overflow')"

/* non-finite: one advice row per class; dumps: what was written and skipped; next: ampdump. */
static int print_nonfinite(sqlite3 *db, FILE *f, const char *path)
{
	sqlite3_stmt *st = NULL;
	char a[64], b[64];
	if (sqlite3_prepare_v2(db,
	                       "SELECT severity, rule, message, evidence FROM advice WHERE rule IN "
	                       NONFINITE_RULES " ORDER BY id", -1, &st, NULL) != SQLITE_OK)
		return -1;
	int n = 0;
	while (sqlite3_step(st) == SQLITE_ROW) {
		if (!n++)
			fprintf(f, "  non-finite:\n");
		print_advice_row(f, st);
	}
	sqlite3_finalize(st);
	/* a profile older than the nonfinite table says nothing either way */
	if (!n && amp_profile_has_table(db, "nonfinite"))
		fprintf(f, "  non-finite   none\n");
	dump_counts d;
	load_dumps(db, &d);
	if (d.on) {
		prof_bytes_text(a, sizeof a, d.bytes);
		fprintf(f, "  dumps        %" PRId64 " written (%s), %" PRId64 " skipped", d.written, a,
		        d.skipped);
		if (d.skipped > 0) {
			prof_bytes_text(b, sizeof b, d.skipped_bytes);
			fprintf(f, " (%s:", b);
			for (int i = 0, k = 0; i < AMP_DUMP_SKIP_REASONS; i++)
				if (d.by_reason[i] > 0)
					fprintf(f, "%s %" PRId64 " %s", k++ ? "," : "", d.by_reason[i],
					        amp_dump_skip_reasons[i].text);
			fprintf(f, ")");
		}
		fprintf(f, "\n");
	} else if (n) {
		fprintf(f, "  dumps        off (ampprof --dump=nonfinite dumps the origin's tensors)\n");
	}
	char unnamed[1400];
	const char *static_link = amp_profile_callsites_static(db);
	if (amp_profile_meta_get(db, "callsites_unnamed", unnamed, sizeof unnamed) == AMP_PROFILE_OK) {
		fprintf(f, "  call sites   unnamed: ");
		amp_text_put(f, unnamed); /* a path of the application's */
		fputc('\n', f);
	} else if (static_link[0]) {
		fprintf(f, "  call sites   %s\n", static_link);
	}
	int64_t origin_rank, first = first_origin_step(db, &origin_rank);
	if (first >= 0) {
		char cmd[4200], on[40] = "";
		ampdump_command(cmd, sizeof cmd, first, origin_rank, path, 1);
		if (origin_rank >= 0)
			snprintf(on, sizeof on, ", rank %" PRId64, origin_rank);
		fprintf(f, "  next         %s   (the first origin, step %" PRId64 "%s)\n", cmd, first,
		        on);
	}
	return 0;
}

/* A merged profile one of whose ranks failed (meta end 'rank-failed'): how each rank ended,
 * from its rank.N.* meta: the failed ranks first, those ended by SIGTERM after them (what a
 * launcher sends the others when one rank dies), then those that exited with status 0. */
static void print_rank_endings(sqlite3 *db, FILE *f)
{
	sqlite3_stmt *st = NULL;
	fputs("failed on a rank:", f);
	if (sqlite3_prepare_v2(
	        db,
	        "WITH e AS (SELECT CAST(substr(key, 6, length(key) - 9) AS INTEGER) AS r,"
	        "  value AS how FROM meta WHERE key LIKE 'rank.%.end'),"
	        " x AS (SELECT r, how, (SELECT value FROM meta WHERE key = 'rank.' || r ||"
	        "  '.exit_status') AS status, (SELECT value FROM meta WHERE key = 'rank.' || r ||"
	        "  '.exit_signal') AS sig FROM e)"
	        " SELECT r, how, status, sig FROM x"
	        " ORDER BY how = 'exited' AND coalesce(status, '') = '0',"
	        "  coalesce(sig, '') = 'SIGTERM', how = 'exited', r",
	        -1, &st, NULL) != SQLITE_OK) {
		fputs(" see the ranks below\n", f);
		return;
	}
	const char *sep = " ";
	while (sqlite3_step(st) == SQLITE_ROW) {
		const char *end = col_str(st, 1), *status = col_str(st, 2), *sig = col_str(st, 3);
		fprintf(f, "%srank %lld ", sep, (long long)sqlite3_column_int64(st, 0));
		if (strcmp(end, "exited") == 0)
			fprintf(f, "exited with status %s", status[0] ? status : "?");
		else if (sig[0])
			fprintf(f, "%s (%s)", strcmp(end, "crash") == 0 ? "crashed" : "was killed", sig);
		else
			amp_text_put(f, end[0] ? end : "ended unknown");
		sep = ", ";
	}
	sqlite3_finalize(st);
	fputc('\n', f);
}

/* The crashes' query: signal, code, address, frames, pid and tid of the thread, rank, signal
 * number, in time order (the text report shows the first CRASHES_SHOWN, the JSON all).  Each
 * crash's backtrace is printed up to CRASH_FRAMES_SHOWN frames (the innermost: where it crashed and
 * the calls that led there). */
#define CRASHES_SQL                                                                                \
	"SELECT c.signal, c.code, c.addr, c.frames, t.pid, t.tid, c.rank, c.signo FROM crashes c"  \
	" LEFT JOIN threads t ON t.id = c.thread ORDER BY c.t_ns, c.id"
#define CRASHES_SHOWN      4
#define CRASH_FRAMES_SHOWN 16

/* Whether a signal's si_addr is an address: the faulting one of SIGSEGV, SIGBUS, SIGILL and
 * SIGFPE; a sent signal (an abort's SIGABRT) has the sender's pid and uid there instead. */
static int crash_has_addr(int signo)
{
	return signo == SIGSEGV || signo == SIGBUS || signo == SIGILL || signo == SIGFPE;
}

/* "  crash" lines: where the application crashed, frame by frame (what meta end 'crash'
 * alone does not say). */
static void print_crashes(sqlite3 *db, FILE *f)
{
	sqlite3_stmt *st = NULL;
	if (!amp_profile_has_table(db, "crashes") ||
	    sqlite3_prepare_v2(db, CRASHES_SQL, -1, &st, NULL) != SQLITE_OK)
		return;
	int shown = 0, more = 0;
	while (sqlite3_step(st) == SQLITE_ROW) {
		if (shown == CRASHES_SHOWN) {
			more++;
			continue;
		}
		shown++;
		fputs("  crash        ", f);
		amp_text_put(f, col_str(st, 0));
		if (crash_has_addr(sqlite3_column_int(st, 7)))
			fprintf(f, " (code %d, address 0x%llx)", sqlite3_column_int(st, 1),
			        (unsigned long long)sqlite3_column_int64(st, 2));
		else
			fprintf(f, " (code %d)", sqlite3_column_int(st, 1));
		if (sqlite3_column_type(st, 4) != SQLITE_NULL)
			fprintf(f, " in pid %lld tid %lld", (long long)sqlite3_column_int64(st, 4),
			        (long long)sqlite3_column_int64(st, 5));
		if (sqlite3_column_int64(st, 6) > 0)
			fprintf(f, " on rank %lld", (long long)sqlite3_column_int64(st, 6));
		const char *p = col_str(st, 3);
		if (!*p) {
			fputs(", no backtrace\n", f);
			continue;
		}
		fputs(":\n", f);
		int n = 0;
		for (; *p; n++) {
			size_t len = strcspn(p, "\n");
			if (n < CRASH_FRAMES_SHOWN) {
				char *line = strndup(p, len);
				fputs("                 ", f);
				amp_text_put(f, line ? line : "");
				fputc('\n', f);
				free(line);
			}
			p += len + (p[len] == '\n');
		}
		if (n > CRASH_FRAMES_SHOWN)
			fprintf(f,
			        "                 ... %d more frame(s): ampprof export "
			        "--table=crashes\n",
			        n - CRASH_FRAMES_SHOWN);
	}
	sqlite3_finalize(st);
	if (more)
		fprintf(f, "  crash        ... %d more crash(es): ampprof export --table=crashes\n",
		        more);
}

/* The lines of a profile whose recording stopped (meta end 'collector-failed'). */
static void print_collector_failed(sqlite3 *db, FILE *f, const summary *s)
{
	char why[256] = "", from[32] = "", ns[32] = "";
	amp_profile_meta_get(db, "collector_error", why, sizeof why);
	amp_profile_meta_get(db, "missing_from_step", from, sizeof from);
	amp_profile_meta_get(db, "missing_from_ns", ns, sizeof ns);
	fprintf(f, "  INCOMPLETE   recording stopped");
	if (ns[0])
		fprintf(f, " at %.3f s", strtod(ns, NULL) / 1e9);
	if (from[0])
		fprintf(f, " in step %s (the steps before it are whole)", from);
	fprintf(f, ": the profile could not be written (%s)\n", why[0] ? why : "reason unknown");
	if (s->exit_signal[0])
		fprintf(f, "               the application ran to its end: %s\n", s->exit_signal);
	else if (s->exit_status[0])
		fprintf(f, "               the application ran to its end: exit status %s\n",
		        s->exit_status);
}

/* The scale history finalize classified (schema version 3): history and its steps, "" when
 * there is none (a static scale, an older profile); the skipped share, NAN if unknown. */
static void load_scale_history(sqlite3 *db, char *history, size_t hl, char *steps, size_t sl,
                               double *skipped_share)
{
	history[0] = steps[0] = '\0';
	*skipped_share = (double)NAN;
	if (!amp_profile_has_column(db, "run_summary", "scale_history"))
		return;
	amp_profile_query_text(db, history, hl, "SELECT scale_history FROM run_summary", NULL);
	amp_profile_query_text(db, steps, sl, "SELECT scale_history_steps FROM run_summary", NULL);
	amp_profile_query_double(db, skipped_share, "SELECT skipped_share FROM run_summary", NULL);
}

int prof_report_text(sqlite3 *db, FILE *f, const char *path)
{
	summary s;
	sqlite3_stmt *st = NULL;
	char a[64], b[64];
	if (load_summary(db, &s) != 0)
		return -1;
	/* the command line was the application's: sanitized, as every string it wrote */
	fprintf(f, "ampprof: %s: '", path);
	amp_text_put(f, s.command);
	fputs("' ", f);
	if (strcmp(s.end, "rank-failed") == 0)
		print_rank_endings(db, f);
	else if (strcmp(s.end, "exited") == 0)
		fprintf(f, "exited with status %s\n", s.exit_status);
	else if (s.exit_signal[0])
		fprintf(f, "%s (%s)\n", strcmp(s.end, "crash") == 0 ? "crashed" : "was killed",
		        s.exit_signal);
	else
		fprintf(f, "ended: %s\n", s.end[0] ? s.end : "unknown");
	if (strcmp(s.end, "collector-failed") == 0) {
		print_collector_failed(db, f, &s);
	} else if (s.incomplete[0]) {
		fputs("  INCOMPLETE   ", f);
		amp_text_put(f, s.incomplete);
		fputc('\n', f);
	} else if (strcmp(s.end, "collecting") == 0) {
		/* nothing finished the profile and nothing records it (a live one is refused
		 * before this, prof_refuse_live): its collector was killed */
		fputs("  INCOMPLETE   the collector stopped before it finished this profile (ampprof "
		      "was killed): what it holds is what reached the disk\n", f);
	}
	print_crashes(db, f);
	if (!s.have) {
		fprintf(f, "  (no summary: the profile was not finalized)\n");
		return 0;
	}
	fprintf(f, "  steps        %" PRId64, s.steps);
	if (s.ranks > 1)
		fprintf(f, " on %" PRId64 " ranks (%" PRId64 " rank-steps)", s.ranks, s.timed_steps);
	if (s.step_ns > 0 && s.timed_steps > 0)
		fprintf(f, " in %.3f s%s (%.3f ms/step)", (double)s.step_ns / 1e9,
		        s.ranks > 1 ? " of rank time" : "",
		        (double)s.step_ns / 1e6 / (double)s.timed_steps);
	if (s.wall_ns > 0)
		fprintf(f, ", wall %.3f s", (double)s.wall_ns / 1e9);
	fprintf(f, "\n");
	pct(a, sizeof a, s.fp16_share);
	pct(b, sizeof b, s.fp16_flop_share);
	fprintf(f, "  %-12s %s of op time  %s (threshold %g %%), %s of FLOPs\n",
	        amp_profile_half_label(s.half_types), a, mark(s.fp16_share, s.fp16_thr, 0),
	        s.fp16_thr, b);
	pct(a, sizeof a, s.native_share);
	char range[240] = "";
	if (s.op_count == 0) {
		/* ops ran, but only the --steps range records them: one the run never reached */
		char steps[160];
		if (amp_profile_meta_get(db, "options.steps", steps, sizeof steps) ==
		        AMP_PROFILE_OK &&
		    strcmp(steps, "all") != 0 && steps[0])
			snprintf(range, sizeof range,
			         " (no op recorded: --steps=%s matched no step the run reached)",
			         steps);
	}
	fprintf(f, "  native half  %s of op time on half engines%s\n", a,
	        s.native_share == s.native_share ? ""
	        : !s.engines                     ? " (the profile predates engines)"
	        : s.op_count > 0                 ? " (no op recorded its engine)"
	        : range[0]                       ? range
	                                         : " (no op ran)");
	pct(a, sizeof a, s.copy_share);
	fprintf(f, "  copy share   %s of step time  %s (threshold %g %%)\n", a,
	        mark(s.copy_share, s.copy_thr, 1), s.copy_thr);
	if (s.min_scale == s.min_scale) {
		/* the range is of the scales the steps used; a back-off at the last steps leaves
		 * the scale below it: said, as the advice's "final" */
		double final = NAN;
		char fin[64] = "";
		amp_profile_query_double(
		    db, &final,
		    "SELECT new_scale FROM loss_scale WHERE new_scale IS NOT NULL"
		    " AND rank IS (SELECT min(rank) FROM loss_scale)"
		    " AND coalesce(thread, -1) = (SELECT min(coalesce(thread, -1))"
		    " FROM loss_scale WHERE rank IS (SELECT min(rank) FROM"
		    " loss_scale)) ORDER BY step DESC, rowid DESC LIMIT 1",
		    NULL);
		if (final < s.min_scale || final > s.max_scale)
			snprintf(fin, sizeof fin, " (final %.9g)", final);
		fprintf(f,
		        "  loss scale   %.9g .. %.9g%s, %" PRId64 " overflow step(s), %" PRId64
		        " skipped\n",
		        s.min_scale, s.max_scale, fin, s.overflow_steps, s.skipped_steps);
	} else
		fprintf(f, "  loss scale   n/a, %" PRId64 " overflow step(s), %" PRId64 " skipped\n",
		        s.overflow_steps, s.skipped_steps);
	{
		char history[32], steps[800];
		double skipped;
		load_scale_history(db, history, sizeof history, steps, sizeof steps, &skipped);
		if (history[0])
			fprintf(f, "  scaling      %s%s%s; %" PRId64 " skipped (%.1f %% of the optimizer steps)\n",
			        strcmp(history, "probing") == 0 ? "probing (normal)"
			        : strcmp(history, "isolated_spikes") == 0 ? "isolated spikes" : history,
			        steps[0] ? " at steps " : "", steps, s.skipped_steps,
			        skipped == skipped ? 100.0 * skipped : 0.0);
	}
	prof_bytes_text(a, sizeof a, s.peak_bytes);
	fprintf(f, "  memory peak  %s;  %" PRId64 " ops, %" PRId64 " copies recorded", a, s.op_count,
	        s.copy_count);
	if (s.dropped[0] && strcmp(s.dropped, "0") != 0)
		fprintf(f, ", %s events DROPPED", s.dropped);
	fprintf(f, "\n");
	if (prof_report_dist_text(db, f) != 0)
		return -1;
	prof_report_memory_text(db, f);
	if (print_nonfinite(db, f, path) != 0)
		return -1;
	amp_op_stats ops[TOP_OPS];
	size_t n_ops = 0;
	if (amp_profile_op_stats(db, ops, TOP_OPS, &n_ops) != AMP_PROFILE_OK)
		return -1;
	if (n_ops)
		fprintf(f, "  top ops by time (durations in us):\n    %-14s %-6s %9s %11s %6s %9s %9s %9s "
		        "%9s %9s\n", "op", "dtype", "calls", "total ms", "share", "mean", "median", "min",
		        "max", "stddev");
	for (size_t i = 0; i < n_ops; i++) {
		const amp_op_stats *o = &ops[i];
		fputs("    ", f);
		put_padded(f, o->op, 14);
		fputc(' ', f);
		put_padded(f, o->exec_dtype, 6);
		fprintf(f, " %9" PRId64 " %11.3f %5.1f%%", o->calls, (double)o->total_ns / 1e6,
		        o->share * 100.0);
		us_col(f, o->mean_ns);
		us_col(f, o->median_ns);
		us_col(f, o->min_ns < 0 ? (double)NAN : (double)o->min_ns);
		us_col(f, o->max_ns < 0 ? (double)NAN : (double)o->max_ns);
		us_col(f, o->stddev_ns);
		fputc('\n', f);
	}
	int first = 1;
	if (sqlite3_prepare_v2(db,
	                       "SELECT severity, rule, message, evidence FROM advice WHERE rule NOT IN "
	                       NONFINITE_RULES " ORDER BY id", -1, &st, NULL) != SQLITE_OK)
		return -1;
	while (sqlite3_step(st) == SQLITE_ROW) {
		if (first) {
			if (s.dropped[0] && strtoll(s.dropped, NULL, 10) > 0)
				fprintf(f, "  advice (from a sample: %s records were dropped):\n", s.dropped);
			else
				fprintf(f, "  advice:\n");
			first = 0;
		}
		print_advice_row(f, st);
	}
	sqlite3_finalize(st);
	if (first)
		fprintf(f, "  advice: none\n");
	return 0;
}

/* ---- JSON ---------------------------------------------------------------------------------- */
/* Every string through amp_json_string (valid UTF-8, controls escaped), every real through
 * json_real (amp_text.h's rule: not finite = null plus "<key>_nonfinite"). */
static void json_str(FILE *f, const char *s)
{
	amp_json_string(f, s);
}

/* The member `sep"key": v`.  NaN here means "no value" (a NULL column or no summary: SQLite
 * stores no NaN), written as a plain null; an infinity follows the non-finite rule. */
static void json_real(FILE *f, const char *sep, const char *key, double v)
{
	if (isnan(v)) {
		fprintf(f, "%s\"%s\": null", sep, key);
		return;
	}
	amp_json_member_real(f, sep, key, v);
}

/* Text of one item per line (advice evidence) as a JSON array of strings: [] for NULL or "". */
static void json_lines(FILE *f, const unsigned char *text)
{
	fputc('[', f);
	const char *p = (const char *)text;
	for (int i = 0; p && *p; i++) {
		size_t n = strcspn(p, "\n");
		char *line = strndup(p, n);
		fputs(i ? ", " : "", f);
		json_str(f, line ? line : "");
		free(line);
		p += n;
		if (*p == '\n')
			p++;
	}
	fputc(']', f);
}

static void json_int(FILE *f, int64_t v, int null_if_negative)
{
	if (null_if_negative && v < 0)
		fputs("null", f);
	else
		fprintf(f, "%" PRId64, v);
}

static void json_int_or_null(FILE *f, sqlite3_stmt *st, int i)
{
	if (sqlite3_column_type(st, i) == SQLITE_NULL)
		fputs("null", f);
	else
		fprintf(f, "%" PRId64, (int64_t)sqlite3_column_int64(st, i));
}

static void json_text_or_null(FILE *f, sqlite3_stmt *st, int i)
{
	if (sqlite3_column_type(st, i) == SQLITE_NULL)
		fputs("null", f);
	else
		json_str(f, col_str(st, i));
}

/* The overflow forecast (schema version 3): the nearest predicted overflows first, up to 10. */
static int json_forecast(sqlite3 *db, FILE *f)
{
	if (!amp_profile_has_table(db, "forecast"))
		return 0;
	sqlite3_stmt *st = NULL;
	if (sqlite3_prepare_v2(db,
	                       "SELECT f.name, f.op, f.role, f.growth, f.overflow_step, f.steps_left,"
	                       " f.limit_value, f.first_step, f.last_step, f.absmax, f.r2,"
	                       " f.underflow_share, f.underflow_drift, c.file, c.line"
	                       " FROM forecast f LEFT JOIN callsites c ON c.id = f.callsite"
	                       " WHERE f.steps_left > 0 ORDER BY f.steps_left, f.name LIMIT 10",
	                       -1, &st, NULL) != SQLITE_OK)
		return -1;
	for (int i = 0; sqlite3_step(st) == SQLITE_ROW; i++) {
		fputs(i ? ",\n  {\"name\": " : "\n  {\"name\": ", f);
		json_text_or_null(f, st, 0);
		fputs(", \"op\": ", f);
		json_text_or_null(f, st, 1);
		fputs(", \"role\": ", f);
		json_text_or_null(f, st, 2);
		json_real(f, ", ", "growth_per_step", col_real(st, 3));
		json_real(f, ", ", "overflow_step", col_real(st, 4));
		json_real(f, ", ", "steps_left", col_real(st, 5));
		json_real(f, ", ", "limit", col_real(st, 6));
		fprintf(f, ", \"first_step\": %" PRId64 ", \"last_step\": %" PRId64, col_int(st, 7),
		        col_int(st, 8));
		json_real(f, ", ", "absmax", col_real(st, 9));
		json_real(f, ", ", "r2", col_real(st, 10));
		json_real(f, ", ", "underflow_share", col_real(st, 11));
		json_real(f, ", ", "underflow_drift", col_real(st, 12));
		fputs(", \"file\": ", f);
		json_text_or_null(f, st, 13);
		fputs(", \"line\": ", f);
		json_int(f, sqlite3_column_type(st, 14) == SQLITE_NULL ? -1 : col_int(st, 14), 1);
		fputc('}', f);
	}
	sqlite3_finalize(st);
	return 0;
}

/* The classes of the nonfinite table: first step, steps, the first step's origin. */
static int json_nonfinite(sqlite3 *db, FILE *f)
{
	if (!amp_profile_has_table(db, "nonfinite"))
		return 0;
	sqlite3_stmt *st = NULL;
	/* the version-3 columns: the cause upstream, the forward call site, the loss's state */
	int v3 = amp_profile_has_column(db, "nonfinite", "src_op") &&
	         amp_profile_has_column(db, "steps", "loss_state");
	char sql[2048];
	snprintf(sql, sizeof sql,
	         "SELECT n.class, a.severity, n.step, (SELECT count(DISTINCT step) FROM"
	         " nonfinite WHERE class = n.class), n.op, n.label, n.phase, n.role,"
	         " n.dtype, n.nan, n.inf, n.neg_inf, c.file, c.line, n.loss IS NOT NULL,"
	         " n.old_scale, n.new_scale, n.reason, a.message, %s"
	         " FROM nonfinite n LEFT JOIN callsites c ON c.id = n.callsite"
	         " LEFT JOIN advice a ON a.rule = n.class%s"
	         " WHERE n.rowid = (SELECT rowid FROM nonfinite WHERE class = n.class"
	         "   ORDER BY step, stats_id IS NULL, stats_id LIMIT 1)"
	         " ORDER BY a.id, n.class",
	         v3 ? "n.src_op, n.src_label, n.src_dtype, sc.file, sc.line, n.src_tensor,"
	              " n.src_absmax, fc.file, fc.line, (SELECT loss_state FROM steps s WHERE"
	              " s.step = n.step AND s.loss_state IS NOT NULL ORDER BY s.rowid LIMIT 1)"
	            : "NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL",
	         v3 ? " LEFT JOIN callsites sc ON sc.id = n.src_callsite"
	              " LEFT JOIN callsites fc ON fc.id = n.fwd_callsite" : "");
	if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
		return -1;
	for (int i = 0; sqlite3_step(st) == SQLITE_ROW; i++) {
		fputs(i ? ",\n  {\"class\": " : "\n  {\"class\": ", f);
		json_str(f, col_str(st, 0));
		fputs(", \"severity\": ", f);
		json_text_or_null(f, st, 1);
		fprintf(f, ", \"first_step\": %" PRId64 ", \"steps\": %" PRId64 ", \"op\": ",
		        col_int(st, 2), col_int(st, 3));
		json_text_or_null(f, st, 4);
		fputs(", \"label\": ", f);
		json_text_or_null(f, st, 5);
		fputs(", \"phase\": ", f);
		json_text_or_null(f, st, 6);
		fputs(", \"role\": ", f);
		json_text_or_null(f, st, 7);
		fputs(", \"dtype\": ", f);
		json_text_or_null(f, st, 8);
		fputs(", \"nan\": ", f);
		json_int(f, col_int(st, 9), 1);
		fputs(", \"inf\": ", f);
		json_int(f, col_int(st, 10), 1);
		fputs(", \"neg_inf\": ", f);
		json_int(f, col_int(st, 11), 1);
		fputs(", \"file\": ", f);
		json_text_or_null(f, st, 12);
		fputs(", \"line\": ", f);
		json_int(f, col_int(st, 13), 1);
		fprintf(f, ", \"loss_finite\": %s", sqlite3_column_int(st, 14) ? "true" : "false");
		json_real(f, ", ", "old_scale", col_real(st, 15));
		json_real(f, ", ", "new_scale", col_real(st, 16));
		fputs(", \"scale_reason\": ", f);
		json_text_or_null(f, st, 17);
		fputs(", \"message\": ", f);
		json_text_or_null(f, st, 18);
		/* the cause upstream: an underflow's half op, a cast overflow's FP32 source */
		fputs(", \"src_op\": ", f);
		json_text_or_null(f, st, 19);
		fputs(", \"src_label\": ", f);
		json_text_or_null(f, st, 20);
		fputs(", \"src_dtype\": ", f);
		json_text_or_null(f, st, 21);
		fputs(", \"src_file\": ", f);
		json_text_or_null(f, st, 22);
		fputs(", \"src_line\": ", f);
		json_int(f, sqlite3_column_type(st, 23) == SQLITE_NULL ? -1 : col_int(st, 23), 1);
		fputs(", \"src_tensor\": ", f);
		json_text_or_null(f, st, 24);
		json_real(f, ", ", "src_absmax",
		          sqlite3_column_type(st, 25) == SQLITE_NULL ? (double)NAN : col_real(st, 25));
		fputs(", \"forward_file\": ", f);
		json_text_or_null(f, st, 26);
		fputs(", \"forward_line\": ", f);
		json_int(f, sqlite3_column_type(st, 27) == SQLITE_NULL ? -1 : col_int(st, 27), 1);
		fputs(", \"loss_state\": ", f);
		json_text_or_null(f, st, 28);
		fputc('}', f);
	}
	sqlite3_finalize(st);
	return 0;
}

int prof_report_json(sqlite3 *db, FILE *f, const char *path)
{
	summary s;
	sqlite3_stmt *st = NULL;
	if (load_summary(db, &s) != 0)
		return -1;
	fprintf(f, "{\"format_version\": %d, \"profile\": ", AMP_JSON_FORMAT_VERSION);
	json_str(f, path);
	fputs(", \"command\": ", f);
	json_str(f, s.command);
	fputs(", \"end\": ", f);
	json_str(f, s.end);
	fputs(", \"exit_status\": ", f);
	json_int(f, s.exit_status[0] ? strtoll(s.exit_status, NULL, 10) : -1, 1);
	fputs(", \"finalized\": ", f);
	fputs(s.have ? "true" : "false", f);
	fputs(", \"complete\": ", f);
	json_int(f, s.complete, 1);
	fputs(", \"incomplete\": ", f);
	if (s.incomplete[0])
		json_str(f, s.incomplete);
	else
		fputs("null", f);
	fputs(", \"crashes\": [", f);
	if (amp_profile_has_table(db, "crashes") &&
	    sqlite3_prepare_v2(db, CRASHES_SQL, -1, &st, NULL) == SQLITE_OK) {
		for (int i = 0; sqlite3_step(st) == SQLITE_ROW; i++) {
			fputs(i ? ", {\"signal\": " : "{\"signal\": ", f);
			json_str(f, col_str(st, 0));
			fprintf(f, ", \"code\": %d, \"addr\": ", sqlite3_column_int(st, 1));
			if (crash_has_addr(sqlite3_column_int(st, 7)))
				fprintf(f, "%lld", (long long)sqlite3_column_int64(st, 2));
			else
				fputs("null", f);
			fputs(", \"pid\": ", f);
			json_int_or_null(f, st, 4);
			fputs(", \"tid\": ", f);
			json_int_or_null(f, st, 5);
			fprintf(f, ", \"rank\": %lld, \"frames\": ",
			        (long long)sqlite3_column_int64(st, 6));
			json_lines(f, sqlite3_column_text(st, 3));
			fputc('}', f);
		}
	}
	sqlite3_finalize(st);
	st = NULL;
	fputc(']', f);
	/* without a summary (a read-only unfinalized profile) these are unknown, not 0 */
	fputs(", \"steps\": ", f);
	json_int(f, s.have ? s.steps : -1, 1);
	fputs(", \"wall_ns\": ", f);
	json_int(f, s.have || s.wall_ns > 0 ? s.wall_ns : -1, 1);
	fputs(", \"step_ns\": ", f);
	json_int(f, s.have ? s.step_ns : -1, 1);
	/* a merged profile: step_ns adds the ranks' timed steps (rank_steps), steps counts each
	 * step once */
	fputs(", \"ranks\": ", f);
	json_int(f, s.ranks, 1);
	fputs(", \"rank_steps\": ", f);
	json_int(f, s.timed_steps, 1);
	fputs(", \"comm\": ", f);
	if (prof_report_dist_json(db, f) != 0)
		return -1;
	json_real(f, ", ", "fp16_share", s.have ? s.fp16_share : (double)NAN);
	json_real(f, ", ", "half_share", s.have ? s.fp16_share : (double)NAN);
	fputs(", \"half_types\": ", f);
	if (s.half_types[0])
		json_str(f, s.half_types);
	else
		fputs("null", f);
	fputs(", \"half_label\": ", f);
	json_str(f, amp_profile_half_label(s.half_types));
	json_real(f, ", ", "native_half_share", s.have ? s.native_share : (double)NAN);
	json_real(f, ", ", "fp16_flop_share", s.have ? s.fp16_flop_share : (double)NAN);
	json_real(f, ", ", "fp16_threshold", s.fp16_thr / 100.0);
	fprintf(f, ", \"fp16_ok\": %s", s.have && s.fp16_share == s.fp16_share
	                                    ? (s.fp16_share * 100.0 >= s.fp16_thr ? "true" : "false")
	                                    : "null");
	json_real(f, ", ", "copy_share", s.have ? s.copy_share : (double)NAN);
	json_real(f, ", ", "copy_threshold", s.copy_thr / 100.0);
	fprintf(f, ", \"copy_ok\": %s", s.have && s.copy_share == s.copy_share
	                                    ? (s.copy_share * 100.0 <= s.copy_thr ? "true" : "false")
	                                    : "null");
	json_real(f, ", ", "min_scale", s.have ? s.min_scale : (double)NAN);
	json_real(f, ", ", "max_scale", s.have ? s.max_scale : (double)NAN);
	fputs(", \"overflow_steps\": ", f);
	json_int(f, s.have ? s.overflow_steps : -1, 1);
	fputs(", \"skipped_steps\": ", f);
	json_int(f, s.have ? s.skipped_steps : -1, 1);
	{
		char history[32], steps[800];
		double skipped;
		load_scale_history(db, history, sizeof history, steps, sizeof steps, &skipped);
		json_real(f, ", ", "skipped_share", skipped);
		fputs(", \"scale_history\": ", f);
		if (history[0])
			json_str(f, history);
		else
			fputs("null", f);
		fputs(", \"scale_history_steps\": [", f);
		for (const char *p = steps; *p;) {
			char *end;
			long long v = strtoll(p, &end, 10);
			if (end == p)
				break;
			fprintf(f, "%s%lld", p == steps ? "" : ", ", v);
			p = *end == ',' ? end + 1 : end;
		}
		/* finalize lists the first 32, then ",..." */
		size_t n = strlen(steps);
		fprintf(f, "], \"scale_history_steps_more\": %s",
		        n >= 3 && strcmp(steps + n - 3, "...") == 0 ? "true" : "false");
	}
	fputs(", \"peak_bytes\": ", f);
	json_int(f, s.have ? s.peak_bytes : -1, 1);
	fputs(", \"op_count\": ", f);
	json_int(f, s.have ? s.op_count : -1, 1);
	fputs(", \"copy_count\": ", f);
	json_int(f, s.have ? s.copy_count : -1, 1);
	fputs(", \"dropped_events\": ", f);
	json_int(f, s.dropped[0] ? strtoll(s.dropped, NULL, 10) : -1, 1);
	/* drop mode: what was dropped, by kind; the figures then cover a sample */
	fputs(", \"sampled\": ", f);
	fputs(s.dropped[0] && strtoll(s.dropped, NULL, 10) > 0 ? "true" : "false", f);
	fputs(", \"dropped\": {", f);
	for (unsigned k = 0; k < AMP_DROP_KINDS; k++) {
		char key[64];
		snprintf(key, sizeof key, "dropped.%s", amp_drop_kind_name(k));
		fprintf(f, "%s\"%s\": ", k ? ", " : "", amp_drop_kind_name(k));
		json_int(f, meta_int(db, key, -1), 1);
	}
	fputs("}", f);
	if (prof_report_memory_json(db, f) != 0 || prof_report_history_json(db, f) != 0)
		return -1;
	fputs(",\n \"top_ops\": [", f);
	amp_op_stats ops[TOP_OPS];
	size_t n_ops = 0;
	if (amp_profile_op_stats(db, ops, TOP_OPS, &n_ops) != AMP_PROFILE_OK)
		return -1;
	for (size_t i = 0; i < n_ops; i++) {
		const amp_op_stats *o = &ops[i];
		fputs(i ? ",\n  {\"op\": " : "\n  {\"op\": ", f);
		json_str(f, o->op);
		fputs(", \"dtype\": ", f);
		json_str(f, o->exec_dtype);
		fprintf(f, ", \"calls\": %" PRId64 ", \"total_ns\": %" PRId64, o->calls, o->total_ns);
		json_real(f, ", ", "mean_ns", o->mean_ns);
		json_real(f, ", ", "median_ns", o->median_ns);
		fputs(", \"min_ns\": ", f);
		json_int(f, o->min_ns, 1);
		fputs(", \"max_ns\": ", f);
		json_int(f, o->max_ns, 1);
		json_real(f, ", ", "stddev_ns", o->stddev_ns);
		fprintf(f, ", \"flops\": %" PRId64, o->flops);
		json_real(f, ", ", "share", o->share);
		fputc('}', f);
	}
	sqlite3_finalize(st);
	fputs("],\n \"forecast\": [", f);
	if (json_forecast(db, f) != 0)
		return -1;
	fputs("],\n \"fp16_ready\": ", f);
	{
		char ready[32] = "";
		if (amp_profile_has_column(db, "run_summary", "fp16_ready"))
			amp_profile_query_text(db, ready, sizeof ready,
			                       "SELECT fp16_ready FROM run_summary", NULL);
		if (ready[0])
			json_str(f, ready);
		else
			fputs("null", f);
	}
	fputs(",\n \"nonfinite\": [", f);
	if (json_nonfinite(db, f) != 0)
		return -1;
	dump_counts d;
	load_dumps(db, &d);
	fprintf(f, "],\n \"dumps\": {\"on\": %s, \"written\": %" PRId64 ", \"bytes\": %" PRId64
	        ", \"skipped\": %" PRId64 ", \"skipped_bytes\": %" PRId64 ", \"skipped_by_reason\": {",
	        d.on ? "true" : "false", d.written, d.bytes, d.skipped, d.skipped_bytes);
	for (int i = 0; i < AMP_DUMP_SKIP_REASONS; i++)
		fprintf(f, "%s\"%s\": %" PRId64, i ? ", " : "", amp_dump_skip_reasons[i].json, d.by_reason[i]);
	fputs("}},\n \"next\": ", f);
	int64_t origin_rank, origin_step = first_origin_step(db, &origin_rank);
	if (origin_step >= 0) {
		char cmd[4200];
		ampdump_command(cmd, sizeof cmd, origin_step, origin_rank, path, 0);
		json_str(f, cmd);
	} else {
		fputs("null", f);
	}
	fputs(",\n \"advice\": [", f);
	if (sqlite3_prepare_v2(db,
	                       "SELECT rule, severity, message, evidence, op, step, callsite "
	                       "FROM advice ORDER BY id", -1, &st, NULL) != SQLITE_OK)
		return -1;
	for (int i = 0; sqlite3_step(st) == SQLITE_ROW; i++) {
		fputs(i ? ",\n  {\"rule\": " : "\n  {\"rule\": ", f);
		json_str(f, col_str(st, 0));
		fputs(", \"severity\": ", f);
		json_str(f, col_str(st, 1));
		fputs(", \"message\": ", f);
		json_str(f, col_str(st, 2));
		fputs(", \"evidence\": ", f);
		json_lines(f, sqlite3_column_text(st, 3));
		fputs(", \"op\": ", f);
		if (sqlite3_column_type(st, 4) == SQLITE_NULL)
			fputs("null", f);
		else
			json_str(f, col_str(st, 4));
		fputs(", \"step\": ", f);
		json_int(f, col_int(st, 5), 1);
		fputs(", \"callsite\": ", f);
		json_int(f, col_int(st, 6), 1);
		fputc('}', f);
	}
	sqlite3_finalize(st);
	fputs("]}\n", f);
	return 0;
}

/* main.c — ampprof's command line: the command table (profile, report, export), each command
 * with its option table (amp_opt.h), from which its --help is printed.
 *
 *   ampprof [options] --application="prog args"     profile (through /bin/sh -c)
 *   ampprof [options] -- prog args                   profile (exec'd directly)
 *   ampprof report [--format=text|json] [profile.db]
 *   ampprof export --format=chrome|csv [--table=T] [--output=FILE] [profile.db]
 *   ampprof info [--format=text|json] [--library=<file>]
 *   ampprof help [<command>]
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "amp_opt.h"
#include "prof.h"
#include "profile_db.h"

enum {
	OPT_APPLICATION = 256, OPT_STEPS, OPT_CALLSTACK, OPT_NAN_CHECK, OPT_DUMP, OPT_DUMP_STEPS,
	OPT_DUMP_LIMIT, OPT_FP16, OPT_MEMCPY, OPT_DROP, OPT_RING_SIZE, OPT_VERSION, OPT_FORMAT,
	OPT_TABLE, OPT_STATS_EVERY, OPT_FAIL_ON, OPT_RINGS,
};

_Static_assert(AMP_MAX_RANGES == 16, "the --steps and --dump-steps hints name the limit");

static const char *const profile_usage[] = {
    "ampprof [<options>] --application=<command>",
    "ampprof [<options>] -- <program> [<args>...]",
    "ampprof report [--format=text|json] [--fail-on=error|warning] [<profile.db>]",
    "ampprof export --format=chrome|csv [--table=<t>] [--output=<file>] [<profile.db>]",
    "ampprof info [--format=text|json] [--library=<file>]",
    "ampprof help [<command>]",
    "ampprof diff [--format=text|csv|json] [--kind=op|layer|phase] [--limit=<n>] <a.db> <b.db>",
    "ampprof merge [--force] -o <merged.db> <rank0.db> <rank1.db>...",
    NULL,
};

static const amp_opt profile_opts[] = {
    {OPT_APPLICATION, 0, "application", "<cmd>", "command line run by /bin/sh -c (exec'd when one command)", NULL},
    {'o', 'o', "output", "<file>", "database to write; %r is the MPI rank (from the\n"
     "launcher's environment, 0 without one), %p ampprof's pid", "profile.db"},
    {'f', 'f', "force", NULL, "overwrite an existing output (a regular file\n"
     "that no other ampprof is writing)", NULL},
    {OPT_STEPS, 0, "steps", "<range>", "steps traced in full detail, e.g. 10-20,50\n"
     "(step rows are written for every step)", "all"},
    {OPT_CALLSTACK, 0, "callstack", "on|off", "record the user call site of every op", "on"},
    {OPT_NAN_CHECK, 0, "nan-check", "op|step|off", "non-finite checks", "op"},
    {OPT_STATS_EVERY, 0, "stats-every", "<n>", "full tensor statistics every n steps; the\n"
     "other steps count non-finite values only (default:\n"
     "$AMPPROF_STATS_EVERY if set, as inherited)", "1"},
    {OPT_DUMP, 0, "dump", "nonfinite|off", "dump the tensors of the first non-finite op", "nonfinite"},
    {OPT_DUMP_STEPS, 0, "dump-steps", "<list>", "steps whose tensors are all dumped", NULL},
    {OPT_DUMP_LIMIT, 0, "dump-limit", "<size>", "total bytes of dumps, e.g. 1G", "256M"},
    {OPT_FP16, 0, "fp16-threshold", "<pct>", "FP16 share below this is flagged", "70"},
    {OPT_MEMCPY, 0, "memcpy-threshold", "<pct>", "copy share above this is flagged", "15"},
    {OPT_DROP, 0, "drop", NULL, "drop events when a ring is full instead of waiting\n"
     "(counted by kind; definitions and steps are kept;\n"
     "the profile then covers a sample)", NULL},
    {OPT_RING_SIZE, 0, "ring-size", "<slots>", "64-byte slots per thread ring", "32768"},
    {OPT_RINGS, 0, "rings", "<n>", "threads and processes recording at once (a\n"
     "ring is reused when its owner ends; a thread\n"
     "that finds none makes the profile incomplete)", "64"},
    {'q', 'q', "quiet", NULL, "no status line and no summary", NULL},
    {'h', 'h', "help", NULL, "show this help ('ampprof <command> --help' for a command's)",
     NULL},
    {OPT_VERSION, 0, "version", NULL, "versions of ampprof, the schema and the wire format",
     NULL},
};

static const amp_opt_spec profile_spec = {
    .tool = "ampprof",
    .usage = profile_usage,
    .about = "Profiles a mixed-precision training run into one SQLite database.\n"
             "Commands: report (the summary of a profile), export (Chrome trace or CSV),\n"
             "info (the CPU, the library's kernel paths and engines), diff (two profiles'\n"
             "timings side by side), merge (the per-rank profiles of a data-parallel run into\n"
             "one); `ampprof help <command>` or `ampprof <command> --help` prints a command's\n"
             "help.",
    .opts = profile_opts,
    .n_opts = sizeof profile_opts / sizeof profile_opts[0],
    .footer = "Long options may be abbreviated to any unambiguous prefix.\n"
              "\n"
              "Exit status: the application's own (its exit code, or 128 + signal number), except\n"
              "when ampprof itself fails, with the codes env(1) and timeout(1) use:\n"
              "  125  ampprof failed: the output database could not be created, an internal\n"
              "       error, or the application sent no events (not linked with libamprt);\n"
              "       the application's own status is then in the message and in the\n"
              "       profile's meta exit_status\n"
              "  126  the application was found but cannot be executed\n"
              "  127  the application was not found\n"
              "    2  usage error (nothing was run)\n"
              "A database that fills up during the run stops the recording, not the run: the\n"
              "application runs to its end, its status is returned, and the profile says\n"
              "'collector-failed'.  ampprof's own failures always print an 'ampprof: ' line on\n"
              "stderr.\n",
    .in_order = 1,
};

/* 0, or 1 when stdout cannot take it (as --help) */
static int print_version(void)
{
	printf("ampprof %s (profile schema %d, wire format %u)\n", AMP_VERSION, AMP_PROFILE_VERSION,
	       AMP_WIRE_VERSION);
	return amp_opt_stdout_done(&profile_spec);
}

/* A usage error of spec: the message, the usage lines and the hint (or where the help is). */
static int usage_error(const amp_opt_spec *spec, const char *hint, const char *fmt,
                       const char *arg) __attribute__((format(printf, 3, 0)));
static int usage_error(const amp_opt_spec *spec, const char *hint, const char *fmt,
                       const char *arg)
{
	char msg[1024];
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
	snprintf(msg, sizeof msg, fmt, arg);
#pragma GCC diagnostic pop
	amp_opt_error(spec, hint, "%s", msg);
	return PROF_EXIT_USAGE;
}

/* Prints spec's help on stdout; 0, or 1 if stdout cannot be written. */
static int print_help(const amp_opt_spec *spec)
{
	amp_opt_help(spec, stdout);
	return amp_opt_stdout_done(spec);
}

static int parse_pct(const char *text, double *out)
{
	char *end;
	double v = strtod(text, &end);
	if (end == text || *end || !(v >= 0 && v <= 100))
		return -1;
	*out = v;
	return 0;
}

static int cmd_profile(int argc, char **argv)
{
	const amp_opt_spec *sp = &profile_spec;
	prof_options o;
	memset(&o, 0, sizeof o);
	o.output = "profile.db";
	o.callstack = 1;
	o.nan_check = AMP_NAN_CHECK_OP;
	/* the first NaN of a run has its tensors when the user first looks (bounded by the limits) */
	o.dump = AMP_DUMP_NONFINITE;
	o.dump_limit = 256ull << 20;
	o.fp16_threshold = 70;
	o.memcpy_threshold = 15;
	o.ring_slots = 32768;
	o.ring_count = 64;
	amp_opt_state ps;
	const char *optarg_;
	int c;
	amp_opt_begin(&ps, sp, argc, argv);
	while ((c = amp_opt_next(&ps, &optarg_)) != AMP_OPT_END) {
		const char *val = optarg_;
		switch (c) {
		case AMP_OPT_ERROR: return PROF_EXIT_USAGE;
		case OPT_APPLICATION: o.application = val; break;
		case 'o': o.output = val; break;
		case 'f': o.force = 1; break;
		case 'q': o.quiet = 1; break;
		case 'h': return print_help(sp);
		case OPT_VERSION: return print_version();
		case OPT_DROP: o.drop = 1; break;
		case OPT_STEPS:
			o.n_steps = prof_parse_ranges(val, o.steps, AMP_MAX_RANGES);
			if (o.n_steps < 0)
				return usage_error(sp, "expected steps like 10, 10-20, 100- or 1,5-7 (at most 16 "
				                       "ranges)",
				                   "invalid value '%s' for --steps", val);
			break;
		case OPT_DUMP_STEPS:
			o.n_dump_steps = prof_parse_ranges(val, o.dump_steps, AMP_MAX_RANGES);
			if (o.n_dump_steps < 0)
				return usage_error(sp, "expected steps like 10, 10-20 or 1,5-7 (at most 16 ranges)",
				                   "invalid value '%s' for --dump-steps", val);
			break;
		case OPT_CALLSTACK:
			if (strcmp(val, "on") == 0)
				o.callstack = 1;
			else if (strcmp(val, "off") == 0)
				o.callstack = 0;
			else
				return usage_error(sp, "expected on or off",
				                   "invalid value '%s' for --callstack", val);
			break;
		case OPT_NAN_CHECK:
			if (strcmp(val, "op") == 0)
				o.nan_check = AMP_NAN_CHECK_OP;
			else if (strcmp(val, "step") == 0)
				o.nan_check = AMP_NAN_CHECK_STEP;
			else if (strcmp(val, "off") == 0)
				o.nan_check = AMP_NAN_CHECK_OFF;
			else
				return usage_error(sp, "expected op, step or off",
				                   "invalid value '%s' for --nan-check", val);
			break;
		case OPT_STATS_EVERY: {
			char *end;
			unsigned long v = strtoul(val, &end, 10);
			if (end == val || *end || val[0] == '-' || v < 1 || v > 1000000)
				return usage_error(sp, "expected a number of steps from 1 to 1000000",
				                   "invalid value '%s' for --stats-every", val);
			o.stats_every = (uint32_t)v;
			break;
		}
		case OPT_DUMP:
			if (strcmp(val, "nonfinite") == 0)
				o.dump = AMP_DUMP_NONFINITE;
			else if (strcmp(val, "off") == 0)
				o.dump = AMP_DUMP_OFF;
			else
				return usage_error(sp, "expected nonfinite or off",
				                   "invalid value '%s' for --dump", val);
			break;
		case OPT_DUMP_LIMIT:
			if (prof_parse_size(val, &o.dump_limit) != 0)
				return usage_error(sp, "expected a size like 512M or 2G",
				                   "invalid value '%s' for --dump-limit", val);
			break;
		case OPT_FP16:
			if (parse_pct(val, &o.fp16_threshold) != 0)
				return usage_error(sp, "expected a percentage from 0 to 100",
				                   "invalid value '%s' for --fp16-threshold", val);
			break;
		case OPT_MEMCPY:
			if (parse_pct(val, &o.memcpy_threshold) != 0)
				return usage_error(sp, "expected a percentage from 0 to 100",
				                   "invalid value '%s' for --memcpy-threshold", val);
			break;
		case OPT_RING_SIZE: {
			uint64_t v;
			if (prof_parse_size(val, &v) != 0 || v < 1024 || v > (1u << 24) || (v & (v - 1)))
				return usage_error(sp, "expected a power of two from 1024 to 16777216",
				                   "invalid value '%s' for --ring-size", val);
			o.ring_slots = (uint32_t)v;
			break;
		}
		case OPT_RINGS: {
			char *end;
			unsigned long v = strtoul(val, &end, 10);
			if (end == val || *end || val[0] == '-' || v < 1 || v > 4096)
				return usage_error(sp, "expected a number of rings from 1 to 4096",
				                   "invalid value '%s' for --rings", val);
			o.ring_count = (uint32_t)v;
			break;
		}
		default: return usage_error(sp, NULL, "unhandled option '%s'", argv[ps.optind - 1]);
		}
	}
	if (ps.optind < argc)
		o.argv = argv + ps.optind;
	if (o.application && o.argv)
		return usage_error(sp, "give either --application=\"cmd\" or -- cmd, not both",
		                   "%s", "both --application and a program were given");
	if (!o.application && !o.argv)
		return usage_error(sp, NULL, "%s", "no application to profile");
	if (!o.output[0])
		return usage_error(sp, NULL, "%s", "--output is empty");
	static char expanded[4096];
	const char *bad;
	if (prof_output_expand(o.output, expanded, sizeof expanded, &bad) != 0)
		return usage_error(sp, "%r is the MPI rank, %p ampprof's pid, %% a '%'",
		                   "invalid --output pattern at '%s'", bad);
	o.output = expanded;
	return prof_run(&o);
}

/* Opens a profile for report/export: never one that is still being recorded (it has no
 * summary yet, and what it holds is a snapshot that will not last), and recomputes the summary
 * of one that was not finalized (its collector was killed) when the file is writable.  0, or
 * -1 after saying why. */
static int open_profile(const char *path, sqlite3 **db)
{
	char err[1024];
	int rc = amp_profile_open(path, 0, db, err, sizeof err);
	if (rc != AMP_PROFILE_OK) {
		prof_error(rc == AMP_PROFILE_ENEWER ? "upgrade ampkit to read it"
		           : rc == AMP_PROFILE_ENOENT ? "give the profile path, or run ampprof first"
		                                      : NULL,
		           "%s", err);
		return -1;
	}
	if (prof_refuse_live(*db, path,
	                     "ampprof prints the summary when the run ends; run this again then"))
		goto fail;
	int64_t have = 0;
	if (amp_profile_query_int64(*db, &have, "SELECT count(*) FROM run_summary", NULL) ==
	    AMP_PROFILE_EIO) {
		prof_error(NULL, "cannot read '%s': %s", path, sqlite3_errmsg(*db));
		goto fail;
	}
	if (have > 0)
		return 0;
	sqlite3 *rw = NULL;
	rc = amp_profile_open(path, 1, &rw, err, sizeof err);
	if (rc == AMP_PROFILE_EACCES)
		return 0; /* read-only file: shown without a summary */
	if (rc != AMP_PROFILE_OK) {
		prof_error(NULL, "%s", err);
		goto fail;
	}
	char buf[64];
	double fp16 = 70, copy = 15;
	if (amp_profile_meta_get(rw, "options.fp16_threshold", buf, sizeof buf) == 0)
		fp16 = strtod(buf, NULL);
	if (amp_profile_meta_get(rw, "options.memcpy_threshold", buf, sizeof buf) == 0)
		copy = strtod(buf, NULL);
	prof_error(NULL, "'%s' was not finalized (its collector stopped early); "
	           "summarizing what it holds", path);
	/* another process holding the write lock (for longer than the busy timeout) is an
	 * error, never a report without its summary */
	if (sqlite3_exec(rw, "BEGIN IMMEDIATE; ROLLBACK", NULL, NULL, NULL) != SQLITE_OK) {
		int ec = sqlite3_errcode(rw) & 0xff;
		if (ec == SQLITE_BUSY || ec == SQLITE_LOCKED) {
			prof_error(NULL, "cannot summarize '%s': %s (another process writes it)", path,
			           sqlite3_errmsg(rw));
			amp_profile_close(rw);
			goto fail;
		}
	}
	rc = prof_summarize(rw, fp16, copy);
	amp_profile_close(rw);
	if (rc != 0) { /* a full disk, a read-only medium: shown without a summary */
		prof_error("ampview computes the summary in memory", "'%s' is shown without a summary",
		           path);
		return 0;
	}
	amp_profile_close(*db);
	*db = NULL;
	if (amp_profile_open(path, 0, db, err, sizeof err) != AMP_PROFILE_OK) {
		prof_error(NULL, "%s", err);
		return -1;
	}
	return 0;
fail:
	amp_profile_close(*db);
	*db = NULL;
	return -1;
}

static const char *const report_usage[] = {
    "ampprof report [--format=text|json] [--fail-on=error|warning] [<profile.db>]", NULL};

static const amp_opt report_opts[] = {
    {OPT_FORMAT, 0, "format", "text|json", "output format", "text"},
    {OPT_FAIL_ON, 0, "fail-on", "error|warning", "exit 1 if the advice has a finding of this\n"
     "severity or worse (for CI)", NULL},
    {'h', 'h', "help", NULL, "show this help", NULL},
};

static const amp_opt_spec report_spec = {
    .tool = "ampprof",
    .usage = report_usage,
    .about = "Prints the summary of a profile: the figures, the non-finite values, the dumps,\n"
             "the top ops and the advice.  The profile defaults to profile.db.  JSON keys are\n"
             "stable; a number that is not finite is null with \"<key>_nonfinite\" set to\n"
             "\"nan\", \"inf\" or \"-inf\" beside it; an advice's evidence is an array of\n"
             "strings, one per item; top_ops carry the count, total, mean, median, min, max\n"
             "and standard deviation of each op's durations.",
    .opts = report_opts,
    .n_opts = sizeof report_opts / sizeof report_opts[0],
    .footer = "Exit status: 0; 1 with --fail-on, when the advice has a finding at that level or\n"
              "worse (the report is printed all the same); 2 usage error; 4 the report could\n"
              "not be written; 6 the profile could not be read, or not all of it (damaged,\n"
              "locked by another process, or still being recorded).\n",
    .in_order = 1,
};

/* Exit status of `report --fail-on` when the advice has a finding at the level. */
#define PROF_EXIT_FAIL_ON 1

/* Advice rows of severity level ("error") or worse ("warning": warnings and errors) into *n.
 * Returns 0, or -1 on an SQLite error. */
static int count_findings(sqlite3 *db, const char *level, int64_t *n)
{
	sqlite3_stmt *st = NULL;
	int rc = -1;
	if (sqlite3_prepare_v2(db,
	                       "SELECT count(*) FROM advice WHERE severity = 'error' OR "
	                       "(?1 = 'warning' AND severity = 'warning')",
	                       -1, &st, NULL) != SQLITE_OK)
		return -1;
	sqlite3_bind_text(st, 1, level, -1, SQLITE_STATIC);
	if (sqlite3_step(st) == SQLITE_ROW) {
		*n = sqlite3_column_int64(st, 0);
		rc = 0;
	}
	sqlite3_finalize(st);
	return rc;
}

static int cmd_report(int argc, char **argv)
{
	const amp_opt_spec *sp = &report_spec;
	const char *format = "text", *val, *fail_on = NULL;
	amp_opt_state ps;
	int c;
	amp_opt_begin(&ps, sp, argc, argv);
	while ((c = amp_opt_next(&ps, &val)) != AMP_OPT_END) {
		switch (c) {
		case AMP_OPT_ERROR: return PROF_EXIT_USAGE;
		case OPT_FORMAT:
			if (strcmp(val, "text") != 0 && strcmp(val, "json") != 0)
				return usage_error(sp, "expected text or json",
				                   "invalid value '%s' for --format", val);
			format = val;
			break;
		case OPT_FAIL_ON:
			if (strcmp(val, "error") != 0 && strcmp(val, "warning") != 0)
				return usage_error(sp, "expected error or warning",
				                   "invalid value '%s' for --fail-on", val);
			fail_on = val;
			break;
		case 'h': return print_help(sp);
		default: return usage_error(sp, NULL, "unhandled option '%s'", argv[ps.optind - 1]);
		}
	}
	if (argc - ps.optind > 1)
		return usage_error(sp, NULL, "too many arguments: '%s'", argv[ps.optind + 1]);
	const char *path = ps.optind < argc ? argv[ps.optind] : "profile.db";
	sqlite3 *db = NULL;
	if (open_profile(path, &db) != 0)
		return PROF_EXIT_PROFILE;
	int rc, json = strcmp(format, "json") == 0;
	if (json) {
		/* a JSON document is whole or absent: written once it is complete and the profile
		 * read without damage (a reader would choke on half of one) */
		char *doc = NULL;
		size_t len = 0;
		FILE *m = open_memstream(&doc, &len);
		rc = m ? prof_report_json(db, m, path) : -1;
		if (m && fclose(m) != 0)
			rc = -1;
		if (rc == 0 && !amp_profile_damaged(NULL, 0))
			fwrite(doc, 1, len, stdout);
		free(doc);
	} else {
		rc = prof_report_text(db, stdout, path);
	}
	int64_t findings = 0;
	if (rc == 0 && fail_on)
		rc = count_findings(db, fail_on, &findings);
	errno = 0;
	if (fflush(stdout) != 0 || ferror(stdout)) {
		prof_error(NULL, "cannot write the report: %s", strerror(errno ? errno : EIO));
		amp_profile_close(db);
		return PROF_EXIT_DB;
	}
	char why[256];
	if (amp_profile_damaged(why, sizeof why))
		prof_error(json ? "no JSON was written: record the run again"
		                : "the report above is incomplete",
		           "cannot read all of '%s': %s", path, why);
	else if (rc != 0)
		prof_error(NULL, "cannot read '%s': %s", path, sqlite3_errmsg(db));
	amp_profile_close(db);
	if (rc != 0 || amp_profile_damaged(NULL, 0))
		return PROF_EXIT_PROFILE;
	if (findings > 0) {
		prof_error(NULL, "%lld finding(s) of severity %s%s in the advice (--fail-on=%s)",
		           (long long)findings, fail_on, strcmp(fail_on, "warning") == 0 ? " or error" : "",
		           fail_on);
		return PROF_EXIT_FAIL_ON;
	}
	return 0;
}

static const char *const export_usage[] = {
    "ampprof export --format=chrome|csv [--table=<t>] [--output=<file>] [<profile.db>]", NULL};

static const amp_opt export_opts[] = {
    {OPT_FORMAT, 0, "format", "chrome|csv", "Chrome trace (JSON) or CSV of one table", NULL},
    {OPT_TABLE, 0, "table", "<t>", "table written as CSV: ops, copies, steps,\n"
     "loss_scale, memory, op_summary, callsites, advice,\ntensor_stats, meta, crashes, threads, comm,\nrank_summary, memory_sum, context_ends", "ops"},
    {'o', 'o', "output", "<file>", "file to write", "stdout"},
    {'h', 'h', "help", NULL, "show this help", NULL},
};

static const amp_opt_spec export_spec = {
    .tool = "ampprof",
    .usage = export_usage,
    .about = "Writes a profile as a Chrome trace (chrome://tracing, Perfetto) or one of its\n"
             "tables as CSV.  The profile defaults to profile.db.  Strings are valid UTF-8\n"
             "(invalid bytes become U+FFFD); CSV replaces control characters other than\n"
             "tab, CR and LF with U+FFFD (a field holding those is quoted, RFC 4180);\n"
             "a trace number that is not finite is null.",
    .opts = export_opts,
    .n_opts = sizeof export_opts / sizeof export_opts[0],
    .footer = "Exit status: 0, 2 usage error, 4 the output cannot be written, 6 the profile\n"
              "could not be read (damaged, locked, or still being recorded).\n",
    .in_order = 1,
};

static int cmd_export(int argc, char **argv)
{
	const amp_opt_spec *sp = &export_spec;
	const char *format = NULL, *table = NULL, *output = NULL, *val;
	amp_opt_state ps;
	int c;
	amp_opt_begin(&ps, sp, argc, argv);
	while ((c = amp_opt_next(&ps, &val)) != AMP_OPT_END) {
		switch (c) {
		case AMP_OPT_ERROR: return PROF_EXIT_USAGE;
		case OPT_FORMAT:
			if (strcmp(val, "chrome") != 0 && strcmp(val, "csv") != 0)
				return usage_error(sp, "expected chrome or csv",
				                   "invalid value '%s' for --format", val);
			format = val;
			break;
		case OPT_TABLE: table = val; break;
		case 'o': output = val; break;
		case 'h': return print_help(sp);
		default: return usage_error(sp, NULL, "unhandled option '%s'", argv[ps.optind - 1]);
		}
	}
	if (!format)
		return usage_error(sp, "use --format=chrome or --format=csv", "%s",
		                   "export needs --format");
	if (table && strcmp(format, "chrome") == 0)
		return usage_error(sp,
		                   "a Chrome trace holds every table's events; --table is for CSV",
		                   "--table=%s cannot be used with --format=chrome", table);
	if (!table)
		table = "ops";
	if (argc - ps.optind > 1)
		return usage_error(sp, NULL, "too many arguments: '%s'", argv[ps.optind + 1]);
	const char *path = ps.optind < argc ? argv[ps.optind] : "profile.db";
	if (output && prof_same_file(output, path))
		return usage_error(sp, "name another file with --output",
		                   "the output '%s' is the profile being exported", output);
	sqlite3 *db = NULL;
	prof_out out = {0};
	int code = PROF_EXIT_PROFILE;
	if (open_profile(path, &db) != 0)
		goto out;
	if (prof_out_open(&out, output) != 0) {
		prof_error(NULL, "cannot write '%s': %s", output, strerror(errno));
		code = PROF_EXIT_DB;
		goto out;
	}
	int rc = strcmp(format, "chrome") == 0 ? prof_export_chrome(db, out.f)
	                                       : prof_export_csv(db, out.f, table);
	char why[256];
	int replaced = out.tmp[0] != '\0'; /* a regular file: the old one stays on failure */
	if (rc == -2) {
		code = PROF_EXIT_USAGE;
	} else if (ferror(out.f)) {
		code = PROF_EXIT_DB; /* said when it is closed */
	} else if (amp_profile_damaged(why, sizeof why)) {
		prof_error(NULL, "cannot export '%s': part of it is damaged: %s", path, why);
	} else if (rc != 0) {
		prof_error(NULL, "cannot export '%s': %s", path, sqlite3_errmsg(db));
	} else {
		code = 0;
	}
	if (prof_out_close(&out, code == 0) != 0 && (code == 0 || code == PROF_EXIT_DB)) {
		if (output)
			prof_error(replaced ? "nothing was put in its place" : NULL,
			           "cannot write '%s': %s", output, strerror(errno));
		else
			prof_error(NULL, "cannot write the standard output: %s", strerror(errno));
		code = PROF_EXIT_DB;
	}
out:
	amp_profile_close(db);
	return code;
}

static int cmd_help(int argc, char **argv);

static const struct prof_command {
	const char *name;
	int (*run)(int argc, char **argv);
	const amp_opt_spec *spec; /* its --help, or NULL when the command prints its own */
} commands[] = {
    {"report", cmd_report, &report_spec},
    {"export", cmd_export, &export_spec},
    {"info", prof_cmd_info, NULL},
    {"diff", prof_cmd_diff, NULL},
    {"merge", prof_cmd_merge, NULL},
    {"help", cmd_help, NULL},
};

/* `ampprof help [<command>]`: the help of the command (as `ampprof <command> --help`), or
 * ampprof's own. */
static int cmd_help(int argc, char **argv)
{
	if (argc < 2)
		return print_help(&profile_spec);
	if (argc > 2)
		return usage_error(&profile_spec, NULL, "too many arguments: '%s'", argv[2]);
	for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) {
		if (strcmp(argv[1], commands[i].name) != 0 || commands[i].run == cmd_help)
			continue;
		if (commands[i].spec)
			return print_help(commands[i].spec);
		char *args[] = {argv[1], (char *)"--help", NULL};
		return commands[i].run(2, args);
	}
	return usage_error(&profile_spec, "commands: report, export, info, diff, merge, help",
	                   "no command '%s'", argv[1]);
}

int main(int argc, char **argv)
{
	prof_signals_save();
	prof_set_invoked_as(argv[0]);
	if (argc < 2) {
		amp_opt_usage(&profile_spec, stderr);
		return PROF_EXIT_USAGE;
	}
	for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
		if (strcmp(argv[1], commands[i].name) == 0)
			return commands[i].run(argc - 1, argv + 1);
	return cmd_profile(argc, argv);
}

/* main.c — ampprof's command line: the command table (profile, report, export) and options.
 *
 *   ampprof [options] --application="prog args"     profile (through /bin/sh -c)
 *   ampprof [options] -- prog args                   profile (exec'd directly)
 *   ampprof report [--format=text|json] [profile.db]
 *   ampprof export --format=chrome|csv [--table=T] [--output=FILE] [profile.db]
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* memfd_create, pipe2, dladdr1, sigabbrev_np */
#endif
#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include "prof.h"
#include "profile_db.h"

static const char profile_usage[] =
    "usage: ampprof [<options>] --application=<command>\n"
    "   or: ampprof [<options>] -- <program> [<args>...]\n"
    "   or: ampprof report [--format=text|json] [<profile.db>]\n"
    "   or: ampprof export --format=chrome|csv [--table=<t>] [--output=<file>] [<profile.db>]\n"
    "\n"
    "Profiles a mixed-precision training run into one SQLite database.\n"
    "\n"
    "    --application=<cmd>     command line run by /bin/sh -c\n"
    "    -o, --output=<file>     database to write                     (profile.db)\n"
    "    -f, --force             overwrite an existing output\n"
    "    --steps=<range>         steps traced in full detail, e.g. 10-20,50  (all)\n"
    "                            (step rows are written for every step)\n"
    "    --callstack=on|off      record the user call site of every op     (on)\n"
    "    --nan-check=op|step|off non-finite checks                          (op)\n"
    "    --stats-every=<n>       full tensor statistics every n steps; the other\n"
    "                            steps count non-finite values only        (1)\n"
    "    --dump=nonfinite|off    dump the tensors of the first non-finite op (off)\n"
    "    --dump-steps=<list>     steps whose tensors are all dumped\n"
    "    --dump-limit=<size>     total bytes of dumps, e.g. 1G              (256M)\n"
    "    --fp16-threshold=<pct>  FP16 share below this is flagged           (70)\n"
    "    --memcpy-threshold=<pct> copy share above this is flagged          (15)\n"
    "    --drop                  drop events when a ring is full (counted) instead of waiting\n"
    "    --ring-size=<slots>     64-byte slots per thread ring              (32768)\n"
    "    -q, --quiet             no status line and no summary\n"
    "    -h, --help              this help\n"
    "    --version               versions of ampprof, the schema and the wire format\n"
    "\n"
    "Exit status: the application's own (its exit code, or 128 + signal number), except:\n"
    "    2  usage error (bad option or value)\n"
    "    3  the application could not be started (missing, not executable)\n"
    "    4  the output database could not be created or written\n"
    "    5  internal error\n"
    "    6  report/export: the profile could not be read\n"
    "    7  the application sent no events (not linked with libamprt)\n";

static void print_version(void)
{
	printf("ampprof %s (profile schema %d, wire format %u)\n", AMP_VERSION, AMP_PROFILE_VERSION,
	       AMP_WIRE_VERSION);
}

static int usage_error(const char *hint, const char *fmt, const char *arg)
    __attribute__((format(printf, 2, 0)));
static int usage_error(const char *hint, const char *fmt, const char *arg)
{
	char msg[1024];
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
	snprintf(msg, sizeof msg, fmt, arg);
#pragma GCC diagnostic pop
	prof_error(hint ? hint : "see 'ampprof --help'", "%s", msg);
	return PROF_EXIT_USAGE;
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

enum {
	OPT_APPLICATION = 256, OPT_STEPS, OPT_CALLSTACK, OPT_NAN_CHECK, OPT_DUMP, OPT_DUMP_STEPS,
	OPT_DUMP_LIMIT, OPT_FP16, OPT_MEMCPY, OPT_DROP, OPT_RING_SIZE, OPT_VERSION, OPT_FORMAT,
	OPT_TABLE, OPT_STATS_EVERY,
};

static int cmd_profile(int argc, char **argv)
{
	static const struct option longopts[] = {
	    {"application", required_argument, NULL, OPT_APPLICATION},
	    {"output", required_argument, NULL, 'o'},
	    {"force", no_argument, NULL, 'f'},
	    {"steps", required_argument, NULL, OPT_STEPS},
	    {"callstack", required_argument, NULL, OPT_CALLSTACK},
	    {"nan-check", required_argument, NULL, OPT_NAN_CHECK},
	    {"stats-every", required_argument, NULL, OPT_STATS_EVERY},
	    {"dump", required_argument, NULL, OPT_DUMP},
	    {"dump-steps", required_argument, NULL, OPT_DUMP_STEPS},
	    {"dump-limit", required_argument, NULL, OPT_DUMP_LIMIT},
	    {"fp16-threshold", required_argument, NULL, OPT_FP16},
	    {"memcpy-threshold", required_argument, NULL, OPT_MEMCPY},
	    {"drop", no_argument, NULL, OPT_DROP},
	    {"ring-size", required_argument, NULL, OPT_RING_SIZE},
	    {"quiet", no_argument, NULL, 'q'},
	    {"help", no_argument, NULL, 'h'},
	    {"version", no_argument, NULL, OPT_VERSION},
	    {NULL, 0, NULL, 0},
	};
	prof_options o;
	memset(&o, 0, sizeof o);
	o.output = "profile.db";
	o.callstack = 1;
	o.nan_check = AMP_NAN_CHECK_OP;
	o.dump = AMP_DUMP_OFF;
	o.dump_limit = 256ull << 20;
	o.fp16_threshold = 70;
	o.memcpy_threshold = 15;
	o.ring_slots = 32768;
	o.ring_count = 16;
	int c;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "+o:fqh", longopts, NULL)) != -1) {
		switch (c) {
		case OPT_APPLICATION: o.application = optarg; break;
		case 'o': o.output = optarg; break;
		case 'f': o.force = 1; break;
		case 'q': o.quiet = 1; break;
		case 'h': fputs(profile_usage, stdout); return 0;
		case OPT_VERSION: print_version(); return 0;
		case OPT_DROP: o.drop = 1; break;
		case OPT_STEPS:
			o.n_steps = prof_parse_ranges(optarg, o.steps, AMP_MAX_RANGES);
			if (o.n_steps < 0)
				return usage_error("expected steps like 10, 10-20, 100- or 1,5-7",
				                   "invalid value '%s' for --steps", optarg);
			break;
		case OPT_DUMP_STEPS:
			o.n_dump_steps = prof_parse_ranges(optarg, o.dump_steps, AMP_MAX_RANGES);
			if (o.n_dump_steps < 0)
				return usage_error("expected steps like 10, 10-20 or 1,5-7",
				                   "invalid value '%s' for --dump-steps", optarg);
			break;
		case OPT_CALLSTACK:
			if (strcmp(optarg, "on") == 0)
				o.callstack = 1;
			else if (strcmp(optarg, "off") == 0)
				o.callstack = 0;
			else
				return usage_error("expected on or off", "invalid value '%s' for --callstack",
				                   optarg);
			break;
		case OPT_NAN_CHECK:
			if (strcmp(optarg, "op") == 0)
				o.nan_check = AMP_NAN_CHECK_OP;
			else if (strcmp(optarg, "step") == 0)
				o.nan_check = AMP_NAN_CHECK_STEP;
			else if (strcmp(optarg, "off") == 0)
				o.nan_check = AMP_NAN_CHECK_OFF;
			else
				return usage_error("expected op, step or off",
				                   "invalid value '%s' for --nan-check", optarg);
			break;
		case OPT_STATS_EVERY: {
			char *end;
			unsigned long v = strtoul(optarg, &end, 10);
			if (end == optarg || *end || optarg[0] == '-' || v < 1 || v > 1000000)
				return usage_error("expected a number of steps from 1 to 1000000",
				                   "invalid value '%s' for --stats-every", optarg);
			o.stats_every = (uint32_t)v;
			break;
		}
		case OPT_DUMP:
			if (strcmp(optarg, "nonfinite") == 0)
				o.dump = AMP_DUMP_NONFINITE;
			else if (strcmp(optarg, "off") == 0)
				o.dump = AMP_DUMP_OFF;
			else
				return usage_error("expected nonfinite or off", "invalid value '%s' for --dump",
				                   optarg);
			break;
		case OPT_DUMP_LIMIT:
			if (prof_parse_size(optarg, &o.dump_limit) != 0)
				return usage_error("expected a size like 512M or 2G",
				                   "invalid value '%s' for --dump-limit", optarg);
			break;
		case OPT_FP16:
			if (parse_pct(optarg, &o.fp16_threshold) != 0)
				return usage_error("expected a percentage from 0 to 100",
				                   "invalid value '%s' for --fp16-threshold", optarg);
			break;
		case OPT_MEMCPY:
			if (parse_pct(optarg, &o.memcpy_threshold) != 0)
				return usage_error("expected a percentage from 0 to 100",
				                   "invalid value '%s' for --memcpy-threshold", optarg);
			break;
		case OPT_RING_SIZE: {
			uint64_t v;
			if (prof_parse_size(optarg, &v) != 0 || v < 1024 || v > (1u << 24) || (v & (v - 1)))
				return usage_error("expected a power of two from 1024 to 16777216",
				                   "invalid value '%s' for --ring-size", optarg);
			o.ring_slots = (uint32_t)v;
			break;
		}
		case ':':
			return usage_error(NULL, "option '%s' needs a value", argv[optind - 1]);
		default:
			return usage_error(NULL, "unknown option '%s'", argv[optind - 1]);
		}
	}
	if (optind < argc)
		o.argv = argv + optind;
	if (o.application && o.argv)
		return usage_error("give either --application=\"cmd\" or -- cmd, not both",
		                   "%s", "both --application and a program were given");
	if (!o.application && !o.argv)
		return usage_error(NULL, "%s", "no application to profile");
	if (!o.output[0])
		return usage_error(NULL, "%s", "--output is empty");
	return prof_run(&o);
}

/* Opens a profile for report/export; recomputes the summary of one that was not finalized
 * (its collector was killed) when the file is writable. */
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
	sqlite3_stmt *st = NULL;
	int have = 0;
	if (sqlite3_prepare_v2(*db, "SELECT count(*) FROM run_summary", -1, &st, NULL) == SQLITE_OK &&
	    sqlite3_step(st) == SQLITE_ROW)
		have = sqlite3_column_int(st, 0) > 0;
	sqlite3_finalize(st);
	if (have)
		return 0;
	sqlite3 *rw = NULL;
	if (amp_profile_open(path, 1, &rw, err, sizeof err) == AMP_PROFILE_OK) {
		char buf[64];
		double fp16 = 70, copy = 15;
		if (amp_profile_meta_get(rw, "options.fp16_threshold", buf, sizeof buf) == 0)
			fp16 = strtod(buf, NULL);
		if (amp_profile_meta_get(rw, "options.memcpy_threshold", buf, sizeof buf) == 0)
			copy = strtod(buf, NULL);
		prof_error(NULL, "'%s' was not finalized (its collector stopped early); "
		           "summarizing what it holds", path);
		prof_summarize(rw, fp16, copy);
		amp_profile_close(rw);
		amp_profile_close(*db);
		return amp_profile_open(path, 0, db, err, sizeof err) == AMP_PROFILE_OK ? 0 : -1;
	}
	return 0;
}

static int cmd_report(int argc, char **argv)
{
	static const struct option longopts[] = {
	    {"format", required_argument, NULL, OPT_FORMAT},
	    {"help", no_argument, NULL, 'h'},
	    {NULL, 0, NULL, 0},
	};
	const char *format = "text";
	int c;
	opterr = 0;
	optind = 1;
	while ((c = getopt_long(argc, argv, "+h", longopts, NULL)) != -1) {
		switch (c) {
		case OPT_FORMAT:
			if (strcmp(optarg, "text") != 0 && strcmp(optarg, "json") != 0)
				return usage_error("expected text or json", "invalid value '%s' for --format",
				                   optarg);
			format = optarg;
			break;
		case 'h': fputs(profile_usage, stdout); return 0;
		default: return usage_error(NULL, "unknown option '%s'", argv[optind - 1]);
		}
	}
	if (argc - optind > 1)
		return usage_error(NULL, "too many arguments: '%s'", argv[optind + 1]);
	const char *path = optind < argc ? argv[optind] : "profile.db";
	sqlite3 *db = NULL;
	if (open_profile(path, &db) != 0)
		return PROF_EXIT_PROFILE;
	int rc = strcmp(format, "json") == 0 ? prof_report_json(db, stdout, path)
	                                     : prof_report_text(db, stdout, path);
	if (rc != 0)
		prof_error(NULL, "cannot read '%s': %s", path, sqlite3_errmsg(db));
	amp_profile_close(db);
	return rc == 0 ? 0 : PROF_EXIT_PROFILE;
}

static int cmd_export(int argc, char **argv)
{
	static const struct option longopts[] = {
	    {"format", required_argument, NULL, OPT_FORMAT},
	    {"table", required_argument, NULL, OPT_TABLE},
	    {"output", required_argument, NULL, 'o'},
	    {"help", no_argument, NULL, 'h'},
	    {NULL, 0, NULL, 0},
	};
	const char *format = NULL, *table = "ops", *output = NULL;
	int c;
	opterr = 0;
	optind = 1;
	while ((c = getopt_long(argc, argv, "+o:h", longopts, NULL)) != -1) {
		switch (c) {
		case OPT_FORMAT:
			if (strcmp(optarg, "chrome") != 0 && strcmp(optarg, "csv") != 0)
				return usage_error("expected chrome or csv", "invalid value '%s' for --format",
				                   optarg);
			format = optarg;
			break;
		case OPT_TABLE: table = optarg; break;
		case 'o': output = optarg; break;
		case 'h': fputs(profile_usage, stdout); return 0;
		default: return usage_error(NULL, "unknown option '%s'", argv[optind - 1]);
		}
	}
	if (!format)
		return usage_error("use --format=chrome or --format=csv", "%s", "export needs --format");
	if (argc - optind > 1)
		return usage_error(NULL, "too many arguments: '%s'", argv[optind + 1]);
	const char *path = optind < argc ? argv[optind] : "profile.db";
	sqlite3 *db = NULL;
	FILE *f = stdout;
	int code = PROF_EXIT_PROFILE;
	if (open_profile(path, &db) != 0)
		goto out;
	if (output && !(f = fopen(output, "w"))) {
		prof_error(NULL, "cannot write '%s': %s", output, strerror(errno));
		f = stdout;
		code = PROF_EXIT_DB;
		goto out;
	}
	int rc = strcmp(format, "chrome") == 0 ? prof_export_chrome(db, f)
	                                       : prof_export_csv(db, f, table);
	if (rc == -2)
		code = PROF_EXIT_USAGE;
	else if (rc != 0)
		prof_error(NULL, "cannot export '%s': %s", path, sqlite3_errmsg(db));
	else
		code = 0;
out:
	if (f != stdout && fclose(f) != 0 && code == 0) {
		prof_error(NULL, "cannot write '%s': %s", output, strerror(errno));
		code = PROF_EXIT_DB;
	}
	amp_profile_close(db);
	return code;
}

static const struct prof_command {
	const char *name;
	int (*run)(int argc, char **argv);
} commands[] = {
    {"report", cmd_report},
    {"export", cmd_export},
};

int main(int argc, char **argv)
{
	if (argc < 2) {
		fputs(profile_usage, stderr);
		return PROF_EXIT_USAGE;
	}
	for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
		if (strcmp(argv[1], commands[i].name) == 0)
			return commands[i].run(argc - 1, argv + 1);
	return cmd_profile(argc, argv);
}

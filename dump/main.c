/* main.c — ampdump: tensor dumps by step, .npy export, FP32-vs-AMP comparison, re-runs.
 *
 * The command line is an option table (amp_opt.h) that also prints --help; the chosen mode
 * runs one subcommand of libampdump.
 * Exit status: 0 ok, 1 bad input (unknown step or tensor, unreadable profile, unwritable
 * directory), 2 usage error.
 */
#include <errno.h>
#include <stddef.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amp_opt.h"
#include "dump.h"
#include "profile_db.h"

#ifndef AMP_VERSION
#define AMP_VERSION "0.0.0"
#endif

static const char *const usage_lines[] = {
    "ampdump --step=<n> [--db=<profile.db>] [--format=text|csv|json]",
    "ampdump --list [--db=<profile.db>] [--format=text|csv|json]",
    "ampdump --hist [--step=<n>] [--tensor=<name>] [--db=<profile.db>] [--format=text|csv|json]",
    "ampdump --step=<n> [--tensor=<id|name>] --npy=<dir> [--force] [--db=<profile.db>]",
    "ampdump --compare <a.db> <b.db> [--step=<n>] [--cosine=<x>] [--max-abs=<x>]\n"
    "                 [--norm-diff=<x>] [--cosine-floor=<x>] [--max-abs-ceiling=<x>]\n"
    "                 [--rtol=<x>]",
    "ampdump --application=<cmd> --step=<n> [--output=<dump.db>] [--force]",
    NULL,
};

static const char about[] =
    "Shows the tensors a profile recorded at a step (origin of the first non-finite value\n"
    "first, marked *), exports dumped tensors as .npy files, compares the dumps of two runs\n"
    "op by op, or re-runs a program to dump one step in full.\n"
    "\n"
    "--hist shows the exponent histograms of the checked tensors on FP16's range, per tensor\n"
    "over the run (or at --step): the values that are zero, subnormal (below 2^-14), normal\n"
    "(2^-14 .. 65504) and beyond it (overflow: >= 2^16, Inf, NaN); with --tensor=<name> that\n"
    "tensor's bins, one binade per row.\n"
    "\n"
    "--compare flags a tensor (column why) when its Inf/NaN differ (nonfinite); when its\n"
    "cosine similarity is below --cosine, or its norm is off the reference's by more than\n"
    "--norm-diff, and an element has |a-b| > max-abs + rtol*|a| (drift; a: the reference);\n"
    "when its cosine is below --cosine-floor (floor); or when an element has\n"
    "|a-b| > max-abs-ceiling + rtol*|a| (ceiling).  Gradients are first divided by their\n"
    "run's loss scale.  The first divergence is the first tensor with Inf/NaN where the other\n"
    "run is finite, else the first one flagged.  With no element finite on both sides the\n"
    "cosine, norm ratio and tolerance ratio are empty (null in JSON): they measure nothing.\n"
    "A tensor whose shapes differ has status shape and B's shape in column why.\n"
    "\n"
    "--npy writes fp32 as <f4, fp16 as <f2, int32 as <i4, and bf16 as exact fp32 (<f4):\n"
    "numpy has no bf16 dtype, and every bf16 value is an fp32 value.\n"
    "\n"
    "JSON output is {\"format_version\": 1, \"rows\": [...]}, and --compare's has\n"
    "\"first_divergence\": the index in rows of the first divergence, or null.  A number\n"
    "that is not finite is null, with \"<key>_nonfinite\": \"nan\", \"inf\" or \"-inf\" beside\n"
    "it.  Names from the application are valid UTF-8 in JSON and CSV (invalid bytes become\n"
    "U+FFFD) and shown with their control characters as '?' in text.";

enum {
	OPT_DB = 256, OPT_STEP, OPT_LIST, OPT_FORMAT, OPT_TENSOR, OPT_NPY, OPT_FORCE, OPT_COMPARE,
	OPT_COSINE, OPT_MAX_ABS, OPT_NORM_DIFF, OPT_COSINE_FLOOR, OPT_MAX_ABS_CEILING, OPT_RTOL,
	OPT_APPLICATION, OPT_OUTPUT, OPT_VERBOSE, OPT_VERSION, OPT_HIST, OPT_RANK,
};

static const amp_opt options[] = {
    {OPT_DB, 0, "db", "<file>", "profile to read (also as the argument)", "profile.db"},
    {OPT_STEP, 0, "step", "<n>", "step to show, export, compare or dump (from 0)", NULL},
    {OPT_RANK, 0, "rank", "<r>", "a merged profile: the rank to read (--compare: r or a,b)",
     "--step alone: where its non-finite values began; else the lowest"},
    {OPT_LIST, 0, "list", NULL, "list the steps with anomalies or dumps", NULL},
    {OPT_HIST, 0, "hist", NULL, "exponent histograms on FP16's range, per tensor", NULL},
    {OPT_FORMAT, 0, "format", "<fmt>", "text, csv or json", "text"},
    {OPT_TENSOR, 0, "tensor", "<id|name>", "tensor to export: dump_id or name", "every dump"},
    {OPT_NPY, 0, "npy", "<dir>", "write .npy files into dir (created if missing);\n"
     "bf16 is written as exact fp32 (<f4)", NULL},
    {OPT_FORCE, 0, "force", NULL, "overwrite existing files", NULL},
    {OPT_COMPARE, 0, "compare", NULL, "compare two profiles: a (reference) and b", NULL},
    {OPT_COSINE, 0, "cosine", "<x>", "drift: cosine similarity below x, or ...", "0.99"},
    {OPT_NORM_DIFF, 0, "norm-diff", "<x>", "... norm ratio |b|/|a| off 1 by more than x",
     "0.1"},
    {OPT_MAX_ABS, 0, "max-abs", "<x>", "... with an error above x + rtol*|a|", "0.001"},
    {OPT_COSINE_FLOOR, 0, "cosine-floor", "<x>", "floor: cosine similarity below x alone", "0.9"},
    {OPT_MAX_ABS_CEILING, 0, "max-abs-ceiling", "<x>", "ceiling: an error above x + rtol*|a| alone",
     "1"},
    {OPT_RTOL, 0, "rtol", "<x>", "relative part of both errors: 0.0078125 = 2^-7\n"
     "with a bf16 side, else 0.0009765625 = 2^-10 with\nan fp16 side, else 0", "by dtype"},
    {OPT_APPLICATION, 0, "application", "<cmd>", "re-run cmd under ampprof and dump --step in full",
     NULL},
    {OPT_OUTPUT, 0, "output", "<file>", "database of the re-run", "dump.db"},
    {OPT_VERBOSE, 0, "verbose", NULL, "show ampprof's progress and summary during the re-run",
     NULL},
    {'h', 'h', "help", NULL, "show this help", NULL},
    {OPT_VERSION, 0, "version", NULL, "show the version", NULL},
};

static const amp_opt_spec spec = {
    .tool = "ampdump",
    .usage = usage_lines,
    .about = about,
    .opts = options,
    .n_opts = sizeof options / sizeof options[0],
    .footer = "Long options may be abbreviated to any unambiguous prefix.\n"
              "\n"
              "Exit status: 0 ok, 1 bad input (unknown step or tensor, unreadable profile,\n"
              "unwritable directory), 2 usage error.  --compare exits as cmp(1) does: 0 when no\n"
              "tensor is flagged, 1 when one is (a divergence) or differs in shape, 2 on a usage\n"
              "error or bad input, or when nothing could be compared.\n",
};

typedef struct cli {
	const char *db, *format, *tensor, *npy, *application, *output;
	const char *step_text, *cosine_text, *max_abs_text, *rtol_text;
	const char *norm_text, *floor_text, *ceiling_text, *rank_text;
	int list, hist, force, compare, verbose, help, version;
	const char *pos[3];
	int npos;
} cli;

static int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int usage_error(const char *fmt, ...)
{
	char msg[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	amp_opt_error(&spec, NULL, "%s", msg);
	return DUMP_EXIT_USAGE;
}

/* Parses argv into c.  Returns 0 or DUMP_EXIT_USAGE (message printed). */
static int parse_args(int argc, char **argv, cli *c)
{
	amp_opt_state st;
	const char *v;
	int id;
	amp_opt_begin(&st, &spec, argc, argv);
	while ((id = amp_opt_next(&st, &v)) != AMP_OPT_END) {
		switch (id) {
		case AMP_OPT_ERROR: return DUMP_EXIT_USAGE;
		case OPT_DB: c->db = v; break;
		case OPT_STEP: c->step_text = v; break;
		case OPT_RANK: c->rank_text = v; break;
		case OPT_LIST: c->list = 1; break;
		case OPT_HIST: c->hist = 1; break;
		case OPT_FORMAT: c->format = v; break;
		case OPT_TENSOR: c->tensor = v; break;
		case OPT_NPY: c->npy = v; break;
		case OPT_FORCE: c->force = 1; break;
		case OPT_COMPARE: c->compare = 1; break;
		case OPT_COSINE: c->cosine_text = v; break;
		case OPT_MAX_ABS: c->max_abs_text = v; break;
		case OPT_NORM_DIFF: c->norm_text = v; break;
		case OPT_COSINE_FLOOR: c->floor_text = v; break;
		case OPT_MAX_ABS_CEILING: c->ceiling_text = v; break;
		case OPT_RTOL: c->rtol_text = v; break;
		case OPT_APPLICATION: c->application = v; break;
		case OPT_OUTPUT: c->output = v; break;
		case OPT_VERBOSE: c->verbose = 1; break;
		case 'h': c->help = 1; break;
		case OPT_VERSION: c->version = 1; break;
		default: return usage_error("unhandled option '%s'", argv[st.optind - 1]);
		}
	}
	for (int i = st.optind; i < argc; i++) {
		if (c->npos == 3)
			return usage_error("too many arguments ('%s')", argv[i]);
		c->pos[c->npos++] = argv[i];
	}
	return 0;
}

static int parse_step(const char *text, int64_t *out)
{
	char *end;
	if (!text || !*text || *text == '-' || *text == '+' || *text == ' ')
		return -1;
	errno = 0;
	long long v = strtoll(text, &end, 10);
	if (errno || *end)
		return -1;
	*out = v;
	return 0;
}

static int parse_real(const char *text, double *out)
{
	char *end;
	if (!text || !*text)
		return -1;
	errno = 0;
	double v = strtod(text, &end);
	if (errno || *end || isnan(v))
		return -1;
	*out = v;
	return 0;
}

/* What a mode accepts besides its own option (see stray_option). */
enum {
	TAKES_DB = 1 << 0,
	TAKES_STEP = 1 << 1,
	TAKES_FORMAT = 1 << 2,
	TAKES_TENSOR = 1 << 3,
	TAKES_NPY = 1 << 4,
	TAKES_FORCE = 1 << 5,
	TAKES_THRESHOLDS = 1 << 6,
	TAKES_OUTPUT = 1 << 7,
	TAKES_LIST = 1 << 8,
	TAKES_PROFILE_ARG = 1 << 9,
	TAKES_HIST = 1 << 10,
};

/* Names the first option given that a mode accepting `takes` does not take, or NULL. */
static const char *stray_option(const cli *c, int takes)
{
	if (c->db && !(takes & TAKES_DB))
		return "--db";
	if (c->step_text && !(takes & TAKES_STEP))
		return "--step";
	if (c->format && !(takes & TAKES_FORMAT))
		return "--format";
	if (c->tensor && !(takes & TAKES_TENSOR))
		return "--tensor";
	if (c->npy && !(takes & TAKES_NPY))
		return "--npy";
	if (c->force && !(takes & TAKES_FORCE))
		return "--force";
	if (c->cosine_text && !(takes & TAKES_THRESHOLDS))
		return "--cosine";
	if (c->max_abs_text && !(takes & TAKES_THRESHOLDS))
		return "--max-abs";
	if (c->rtol_text && !(takes & TAKES_THRESHOLDS))
		return "--rtol";
	if (c->norm_text && !(takes & TAKES_THRESHOLDS))
		return "--norm-diff";
	if (c->floor_text && !(takes & TAKES_THRESHOLDS))
		return "--cosine-floor";
	if (c->ceiling_text && !(takes & TAKES_THRESHOLDS))
		return "--max-abs-ceiling";
	if (c->output && !(takes & TAKES_OUTPUT))
		return "--output";
	if (c->verbose && !(takes & TAKES_OUTPUT))
		return "--verbose";
	if (c->list && !(takes & TAKES_LIST))
		return "--list";
	if (c->hist && !(takes & TAKES_HIST))
		return "--hist";
	if (c->npos && !(takes & TAKES_PROFILE_ARG))
		return c->pos[0];
	return NULL;
}

static int dump_main(int argc, char **argv, int *comparing)
{
	cli c;
	memset(&c, 0, sizeof c);
	int rc = parse_args(argc, argv, &c);
	if (rc)
		return rc;
	*comparing = c.compare != 0;
	if (c.help) {
		amp_opt_help(&spec, stdout);
		return amp_opt_stdout_done(&spec) == 0 ? DUMP_EXIT_OK : DUMP_EXIT_FAIL;
	}
	if (c.version) {
		printf("ampdump %s\n", AMP_VERSION);
		return amp_opt_stdout_done(&spec) == 0 ? DUMP_EXIT_OK : DUMP_EXIT_FAIL;
	}
	if (c.rank_text) {
		/* "A,B" with --compare: rank A of the first profile, rank B of the second */
		char first[32];
		const char *comma = strchr(c.rank_text, ',');
		snprintf(first, sizeof first, "%.*s",
		         (int)(comma ? (size_t)(comma - c.rank_text) : strlen(c.rank_text)), c.rank_text);
		int64_t r, rb = -1;
		if (parse_step(first, &r) != 0 || (comma && parse_step(comma + 1, &rb) != 0))
			return usage_error("--rank wants a rank, 0 or more, or with --compare two, A,B "
			                   "(got '%s')", c.rank_text);
		if (comma && !c.compare)
			return usage_error("--rank A,B (a rank for each profile) is for --compare");
		dump_select_rank(r);
		dump_select_rank_second(comma ? rb : r);
	}

	amp_format fmt = AMP_FMT_TEXT;
	if (c.format) {
		if (strcmp(c.format, "text") == 0)
			fmt = AMP_FMT_TEXT;
		else if (strcmp(c.format, "csv") == 0)
			fmt = AMP_FMT_CSV;
		else if (strcmp(c.format, "json") == 0)
			fmt = AMP_FMT_JSON;
		else
			return usage_error("invalid --format '%s': expected text, csv or json",
			                   c.format);
	}
	int64_t step = -1;
	if (c.step_text && parse_step(c.step_text, &step) != 0)
		return usage_error("invalid --step '%s': expected a step number (0, 1, 2, ...)",
		                   c.step_text);
	if (step >= 0 && !c.rank_text && !c.compare)
		dump_select_rank_for_step(step);
	const char *stray;

	if (c.application) {
		if ((stray =
		         stray_option(&c, TAKES_STEP | TAKES_FORMAT | TAKES_FORCE | TAKES_OUTPUT)))
			return usage_error("%s cannot be used with --application", stray);
		if (!c.application[0])
			return usage_error("%s", "--application needs a command");
		if (step < 0)
			return usage_error("%s",
			                   "--application needs --step=<n>: the step to dump");
		dump_rerun_opts ro = {.application = c.application,
		                      .step = step,
		                      .output = c.output ? c.output : "dump.db",
		                      .force = c.force,
		                      .verbose = c.verbose,
		                      .fmt = fmt};
		return dump_cmd_rerun(&ro, stdout);
	}
	if (c.compare) {
		if ((stray = stray_option(&c, TAKES_STEP | TAKES_FORMAT | TAKES_THRESHOLDS |
		                                  TAKES_PROFILE_ARG)))
			return usage_error("%s cannot be used with --compare", stray);
		if (c.npos != 2)
			return usage_error("%s", "--compare needs two profiles: <a.db> <b.db>");
		dump_compare_opts co = {.step = step,
		                        .limits = {.min_cosine = 0.99,
		                                   .max_norm_diff = 0.1,
		                                   .max_abs = 1e-3,
		                                   .cosine_floor = 0.9,
		                                   .max_abs_ceiling = 1.0},
		                        .rtol = -1.0,
		                        .fmt = fmt};
		const struct {
			const char *name, *text;
			double *to;
			int cosine; /* a cosine in [-1, 1], else a number >= 0 */
		} limits[] = {
		    {"--cosine", c.cosine_text, &co.limits.min_cosine, 1},
		    {"--norm-diff", c.norm_text, &co.limits.max_norm_diff, 0},
		    {"--max-abs", c.max_abs_text, &co.limits.max_abs, 0},
		    {"--cosine-floor", c.floor_text, &co.limits.cosine_floor, 1},
		    {"--max-abs-ceiling", c.ceiling_text, &co.limits.max_abs_ceiling, 0},
		    {"--rtol", c.rtol_text, &co.rtol, 0},
		};
		for (size_t k = 0; k < sizeof limits / sizeof limits[0]; k++) {
			if (!limits[k].text)
				continue;
			int bad =
			    parse_real(limits[k].text, limits[k].to) ||
			    (limits[k].cosine ? fabs(*limits[k].to) > 1.0 : *limits[k].to < 0.0);
			if (bad)
				return usage_error(
				    "invalid %s '%s': expected %s", limits[k].name, limits[k].text,
				    limits[k].cosine ? "a number in [-1, 1]" : "a number >= 0");
		}
		return dump_cmd_compare(c.pos[0], c.pos[1], &co, stdout);
	}

	if (c.npos > 1)
		return usage_error("too many arguments ('%s')", c.pos[1]);
	if (c.npos && c.db)
		return usage_error("give the profile once: --db or '%s'", c.pos[0]);
	const char *db = c.db ? c.db : c.npos ? c.pos[0] : "profile.db";

	if (c.list) {
		if ((stray = stray_option(&c, TAKES_DB | TAKES_FORMAT | TAKES_LIST |
		                                  TAKES_PROFILE_ARG)))
			return usage_error("%s cannot be used with --list", stray);
		return dump_cmd_list(db, fmt, stdout);
	}
	if (c.hist) {
		if ((stray = stray_option(&c, TAKES_DB | TAKES_STEP | TAKES_TENSOR | TAKES_FORMAT |
		                                  TAKES_HIST | TAKES_PROFILE_ARG)))
			return usage_error("%s cannot be used with --hist", stray);
		return dump_cmd_hist(db, step, c.tensor, fmt, stdout);
	}
	if (c.npy || c.tensor) {
		if ((stray = stray_option(&c, TAKES_DB | TAKES_STEP | TAKES_TENSOR | TAKES_NPY |
		                                  TAKES_FORCE | TAKES_PROFILE_ARG)))
			return usage_error("%s cannot be used with --npy", stray);
		if (!c.npy)
			return usage_error("%s", "--tensor needs --npy=<dir>: where to write it");
		if (step < 0)
			return usage_error("%s", "--npy needs --step=<n>: the step of the tensor");
		if (!c.npy[0])
			return usage_error("%s", "--npy needs a directory");
		return dump_cmd_npy(db, step, c.tensor, c.npy, c.force, stdout);
	}
	if (step >= 0) {
		if ((stray = stray_option(&c, TAKES_DB | TAKES_STEP | TAKES_FORMAT |
		                                  TAKES_PROFILE_ARG)))
			return usage_error("%s cannot be used with --step alone", stray);
		return dump_cmd_step(db, step, fmt, stdout);
	}
	if ((stray = stray_option(&c, TAKES_DB | TAKES_PROFILE_ARG)))
		return usage_error("%s needs a mode: --step, --list, --compare or --application",
		                   stray);
	return usage_error("%s", "nothing to do: give --step=<n>, --list, --compare or "
	                         "--application");
}

int main(int argc, char **argv)
{
	int comparing = 0;
	int rc = dump_main(argc, argv, &comparing);
	/* a damaged page ends a query as if it had no more rows: what was shown as a result
	 * (a failure has said why already) is not all */
	char why[256];
	int shown = comparing ? rc != DUMP_EXIT_CMP_TROUBLE : rc == DUMP_EXIT_OK;
	if (shown && amp_profile_damaged(why, sizeof why)) {
		fprintf(stderr, "ampdump: cannot read all of the profile: %s; what was shown is "
		        "incomplete\n", why);
		return comparing ? DUMP_EXIT_CMP_TROUBLE : DUMP_EXIT_FAIL;
	}
	return rc;
}

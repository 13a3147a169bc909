/* main.c — ampdump: tensor dumps by step, .npy export, FP32-vs-AMP comparison, re-runs.
 *
 * The command line is an option table; the chosen mode runs one subcommand of libampdump.
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

#include "dump.h"

#ifndef AMP_VERSION
#define AMP_VERSION "0.0.0"
#endif

static const char usage_head[] =
    "usage: ampdump --step=<n> [--db=<profile.db>] [--format=text|csv|json]\n"
    "   or: ampdump --list [--db=<profile.db>] [--format=text|csv|json]\n"
    "   or: ampdump --step=<n> [--tensor=<id|name>] --npy=<dir> [--force] [--db=<profile.db>]\n"
    "   or: ampdump --compare <a.db> <b.db> [--step=<n>] [--cosine=<x>] [--max-abs=<x>]\n"
    "                 [--norm-diff=<x>] [--cosine-floor=<x>] [--max-abs-ceiling=<x>]\n"
    "                 [--rtol=<x>]\n"
    "   or: ampdump --application=<cmd> --step=<n> [--output=<dump.db>] [--force]\n";

static const char usage_body[] =
    "\n"
    "Shows the tensors a profile recorded at a step (origin of the first non-finite value\n"
    "first, marked *), exports dumped tensors as .npy files, compares the dumps of two runs\n"
    "op by op, or re-runs a program to dump one step in full.\n"
    "\n"
    "--compare flags a tensor (column why) when its Inf/NaN differ (nonfinite); when its\n"
    "cosine similarity is below --cosine, or its norm is off the reference's by more than\n"
    "--norm-diff, and an element has |a-b| > max-abs + rtol*|a| (drift; a: the reference);\n"
    "when its cosine is below --cosine-floor (floor); or when an element has\n"
    "|a-b| > max-abs-ceiling + rtol*|a| (ceiling).  Gradients are first divided by their\n"
    "run's loss scale.  The first divergence is the first tensor with Inf/NaN where the other\n"
    "run is finite, else the first one flagged.\n"
    "\n"
    "    --db=<file>            profile to read (default profile.db; also as the argument)\n"
    "    --step=<n>             step to show, export, compare or dump (from 0)\n"
    "    --list                 list the steps with anomalies or dumps\n"
    "    --format=<fmt>         text, csv or json (default text)\n"
    "    --tensor=<id|name>     tensor to export: dump_id or name (default: every dump)\n"
    "    --npy=<dir>            write .npy files into dir (created if missing)\n"
    "    --force                overwrite existing files\n"
    "    --compare              compare two profiles: a (reference) and b\n"
    "    --cosine=<x>           drift: cosine similarity below x (default 0.99), or ...\n"
    "    --norm-diff=<x>        ... norm ratio |b|/|a| off 1 by more than x (default 0.1) ...\n"
    "    --max-abs=<x>          ... with an error above x + rtol*|a| (default 0.001)\n"
    "    --cosine-floor=<x>     floor: cosine similarity below x alone (default 0.9)\n"
    "    --max-abs-ceiling=<x>  ceiling: an error above x + rtol*|a| alone (default 1)\n"
    "    --rtol=<x>             relative part of both errors (default 0.0009765625 = 2^-10\n"
    "                           with an fp16 side, 0.0078125 = 2^-7 with bf16, else 0)\n"
    "    --application=<cmd>    re-run cmd under ampprof and dump --step in full\n"
    "    --output=<file>        database of the re-run (default dump.db)\n"
    "    --verbose              show ampprof's progress and summary during the re-run\n"
    "    -h, --help             show this help\n"
    "    --version              show the version\n";

typedef struct cli {
	const char *db, *format, *tensor, *npy, *application, *output;
	const char *step_text, *cosine_text, *max_abs_text, *rtol_text;
	const char *norm_text, *floor_text, *ceiling_text;
	int list, force, compare, verbose, help, version;
	const char *pos[3];
	int npos;
} cli;

typedef enum { ARG_NONE, ARG_VALUE } arg_kind;

typedef struct option_def {
	const char *name; /* without the leading "--" */
	arg_kind kind;
	size_t offset; /* of the const char * (ARG_VALUE) or int (ARG_NONE) in cli */
} option_def;

static const option_def options[] = {
    {"db", ARG_VALUE, offsetof(cli, db)},
    {"step", ARG_VALUE, offsetof(cli, step_text)},
    {"list", ARG_NONE, offsetof(cli, list)},
    {"format", ARG_VALUE, offsetof(cli, format)},
    {"tensor", ARG_VALUE, offsetof(cli, tensor)},
    {"npy", ARG_VALUE, offsetof(cli, npy)},
    {"force", ARG_NONE, offsetof(cli, force)},
    {"compare", ARG_NONE, offsetof(cli, compare)},
    {"cosine", ARG_VALUE, offsetof(cli, cosine_text)},
    {"max-abs", ARG_VALUE, offsetof(cli, max_abs_text)},
    {"norm-diff", ARG_VALUE, offsetof(cli, norm_text)},
    {"cosine-floor", ARG_VALUE, offsetof(cli, floor_text)},
    {"max-abs-ceiling", ARG_VALUE, offsetof(cli, ceiling_text)},
    {"rtol", ARG_VALUE, offsetof(cli, rtol_text)},
    {"application", ARG_VALUE, offsetof(cli, application)},
    {"output", ARG_VALUE, offsetof(cli, output)},
    {"verbose", ARG_NONE, offsetof(cli, verbose)},
    {"help", ARG_NONE, offsetof(cli, help)},
    {"version", ARG_NONE, offsetof(cli, version)},
};

static int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int usage_error(const char *fmt, ...)
{
	va_list ap;
	fputs("ampdump: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	fputs(usage_head, stderr);
	fputs("hint: `ampdump --help` describes every option\n", stderr);
	return DUMP_EXIT_USAGE;
}

/* Parses argv into c.  Returns 0 or DUMP_EXIT_USAGE (message printed). */
static int parse_args(int argc, char **argv, cli *c)
{
	int only_positional = 0;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (only_positional || a[0] != '-' || a[1] == '\0') {
			if (c->npos == 3)
				return usage_error("too many arguments ('%s')", a);
			c->pos[c->npos++] = a;
			continue;
		}
		if (strcmp(a, "--") == 0) {
			only_positional = 1;
			continue;
		}
		if (strcmp(a, "-h") == 0) {
			c->help = 1;
			continue;
		}
		if (a[1] != '-')
			return usage_error("unknown option '%s'", a);
		const char *name = a + 2, *eq = strchr(name, '=');
		size_t len = eq ? (size_t)(eq - name) : strlen(name);
		const option_def *o = NULL;
		for (size_t k = 0; k < sizeof options / sizeof options[0]; k++)
			if (strlen(options[k].name) == len &&
			    strncmp(options[k].name, name, len) == 0)
				o = &options[k];
		if (!o)
			return usage_error("unknown option '%s'", a);
		char *field = (char *)c + o->offset;
		if (o->kind == ARG_NONE) {
			if (eq)
				return usage_error("option '%s' takes no value", a);
			*(int *)(void *)field = 1;
			continue;
		}
		const char *value = eq ? eq + 1 : NULL;
		if (!value) {
			if (i + 1 >= argc)
				return usage_error("option '%s' needs a value", a);
			value = argv[++i];
		}
		*(const char **)(void *)field = value;
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
	if (c->npos && !(takes & TAKES_PROFILE_ARG))
		return c->pos[0];
	return NULL;
}

int main(int argc, char **argv)
{
	cli c;
	memset(&c, 0, sizeof c);
	int rc = parse_args(argc, argv, &c);
	if (rc)
		return rc;
	if (c.help) {
		fputs(usage_head, stdout);
		fputs(usage_body, stdout);
		return DUMP_EXIT_OK;
	}
	if (c.version) {
		printf("ampdump %s\n", AMP_VERSION);
		return DUMP_EXIT_OK;
	}

	dump_format fmt = DUMP_FMT_TEXT;
	if (c.format) {
		if (strcmp(c.format, "text") == 0)
			fmt = DUMP_FMT_TEXT;
		else if (strcmp(c.format, "csv") == 0)
			fmt = DUMP_FMT_CSV;
		else if (strcmp(c.format, "json") == 0)
			fmt = DUMP_FMT_JSON;
		else
			return usage_error("invalid --format '%s': expected text, csv or json",
			                   c.format);
	}
	int64_t step = -1;
	if (c.step_text && parse_step(c.step_text, &step) != 0)
		return usage_error("invalid --step '%s': expected a step number (0, 1, 2, ...)",
		                   c.step_text);
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

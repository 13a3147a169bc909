/* cli.c — shared flag parsing, usage text, context setup and the JSON result line of the
 * example programs.
 *
 * Flags are rows of an option table (amp_opt.h: "--name VALUE" or "--name=VALUE", unambiguous
 * prefixes accepted, --help generated); numbers are checked whole (no trailing junk).
 */
#include "cli.h"

#include "amp_opt.h"

#include <errno.h>
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- parsing ------------------------------------------------------------------------------- */

enum {
	COMMON_PRECISION,
	COMMON_EPOCHS,
	COMMON_STEPS,
	COMMON_BATCH,
	COMMON_LR,
	COMMON_SEED,
	COMMON_CONFIG,
	COMMON_JSON,
	COMMON_LOG_EVERY,
	COMMON_HELP,
	COMMON_N
};

/* The common flags as an option table bound to c (help text shared with the usage); the rows
 * prog's flags leave out have no name. */
static void common_table(const ex_program *prog, ex_common *c, ex_option t[COMMON_N])
{
	t[COMMON_PRECISION] = (ex_option){"precision", EX_OPT_STRING, &c->precision, "MODE",
	                                  "fp32 (force_fp32) | amp (allow_mix_precision,\n"
	                                  "= allow_mix_precision_fp16) | fp16 (force_fp16) |\n"
	                                  "bf16 (allow_mix_precision_bf16)"};
	t[COMMON_EPOCHS] =
	    (ex_option){"epochs", EX_OPT_INT, &c->epochs, "N", "passes over the training data"};
	t[COMMON_STEPS] =
	    (ex_option){"steps", EX_OPT_INT, &c->steps, "N",
	                prog->flags & EX_STEPS_LIMIT ? "training steps (days of data)"
	                                             : "stop after N training steps (0: no limit)"};
	t[COMMON_BATCH] = (ex_option){"batch", EX_OPT_INT, &c->batch, "N", "samples per step"};
	t[COMMON_LR] = (ex_option){"lr", EX_OPT_FLOAT, &c->lr, "X", "learning rate"};
	t[COMMON_SEED] = (ex_option){"seed", EX_OPT_INT, &c->seed, "N",
	                             "seed for initialisation and shuffling (-1: the config's)"};
	t[COMMON_CONFIG] = (ex_option){"config", EX_OPT_STRING, &c->config, "FILE",
	                               "amp.cfg file (default $AMP_CONFIG)"};
	t[COMMON_JSON] =
	    (ex_option){"json", EX_OPT_FLAG, &c->json, NULL, "end with one JSON line of results"};
	t[COMMON_LOG_EVERY] = (ex_option){"log-every", EX_OPT_INT, &c->log_every, "N",
	                                  "progress line every N steps (0: none)"};
	t[COMMON_HELP] = (ex_option){"help", EX_OPT_FLAG, NULL, NULL, "show this help"};
	if (prog->flags & EX_NO_EPOCHS)
		t[COMMON_EPOCHS].name = NULL;
}

/* Every flag (common first, then the example's) as rows of an option table, with the value
 * placeholders ("<n>") and the current values as defaults in buffers of their own. */
#define EX_MAX_OPTIONS AMP_OPT_MAX
typedef struct ex_table {
	amp_opt rows[EX_MAX_OPTIONS];
	const ex_option *src[EX_MAX_OPTIONS];
	char arg[EX_MAX_OPTIONS][24];
	char dflt[EX_MAX_OPTIONS][48];
	const char *usage[2];
	char usage_line[128];
	amp_opt_spec spec;
} ex_table;

static const char *default_text(const ex_option *o, char *buf, size_t len)
{
	if (!o->value)
		return NULL;
	switch (o->type) {
	case EX_OPT_INT: snprintf(buf, len, "%" PRId64, *(const int64_t *)o->value); return buf;
	case EX_OPT_FLOAT: snprintf(buf, len, "%g", *(const double *)o->value); return buf;
	case EX_OPT_STRING: {
		const char *s = *(const char *const *)o->value;
		if (!s)
			return NULL;
		snprintf(buf, len, "%s", s);
		return buf;
	}
	case EX_OPT_FLAG: return NULL;
	}
	return NULL;
}

static void add_row(ex_table *t, const ex_option *o)
{
	size_t i = t->spec.n_opts;
	if (i >= EX_MAX_OPTIONS)
		return;
	t->src[i] = o;
	const char *arg = NULL;
	if (o->arg) {
		size_t k = 0;
		t->arg[i][k++] = '<';
		for (const char *p = o->arg; *p && k + 2 < sizeof t->arg[i]; p++)
			t->arg[i][k++] = (char)((*p >= 'A' && *p <= 'Z') ? *p - 'A' + 'a' : *p);
		t->arg[i][k++] = '>';
		t->arg[i][k] = '\0';
		arg = t->arg[i];
	} else if (o->type != EX_OPT_FLAG) {
		arg = "<value>";
	}
	t->rows[i] = (amp_opt){(int)(256 + i), 0, o->name, arg, o->help,
	                       default_text(o, t->dflt[i], sizeof t->dflt[i])};
	t->spec.n_opts = i + 1;
}

static void build_table(ex_table *t, const ex_program *prog, const ex_option *common)
{
	memset(t, 0, sizeof *t);
	snprintf(t->usage_line, sizeof t->usage_line, "%s [<options>]", prog->name);
	t->usage[0] = t->usage_line;
	t->usage[1] = NULL;
	t->spec = (amp_opt_spec){.tool = prog->name,
	                         .usage = t->usage,
	                         .about = prog->summary,
	                         .opts = t->rows,
	                         .footer = "Long options may be abbreviated to any unambiguous "
	                                   "prefix.\n"};
	for (int i = 0; i < COMMON_N; i++)
		if (common[i].name)
			add_row(t, &common[i]);
	for (int i = 0; prog->extra && i < prog->n_extra; i++)
		add_row(t, &prog->extra[i]);
}

int ex_usage_error(const ex_program *prog, const ex_common *c, const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	ex_common copy = *c;
	ex_option common[COMMON_N];
	common_table(prog, &copy, common);
	static ex_table t; /* large; parsing is single-threaded */
	build_table(&t, prog, common);
	return amp_opt_error(&t.spec, NULL, "%s", msg);
}

static int set_value(const ex_program *prog, const ex_common *c, const ex_option *o, const char *v)
{
	char *end;
	errno = 0;
	switch (o->type) {
	case EX_OPT_INT: {
		long long x = strtoll(v, &end, 10);
		if (errno || end == v || *end)
			return ex_usage_error(prog, c, "--%s: expected an integer, got '%s'",
			                      o->name, v);
		*(int64_t *)o->value = x;
		return 0;
	}
	case EX_OPT_FLOAT: {
		double x = strtod(v, &end);
		if (errno || end == v || *end || !isfinite(x))
			return ex_usage_error(prog, c, "--%s: expected a number, got '%s'", o->name,
			                      v);
		*(double *)o->value = x;
		return 0;
	}
	case EX_OPT_STRING: *(const char **)o->value = v; return 0;
	case EX_OPT_FLAG: *(int *)o->value = 1; return 0;
	}
	return 0;
}

#define EX_MAX_EPOCHS 1000000
#define EX_MAX_BATCH  (1 << 24)

/* Checks the values that have a fixed domain. */
static int check_common(const ex_program *prog, const ex_common *c)
{
	if (c->precision && strcmp(c->precision, "fp32") != 0 && strcmp(c->precision, "amp") != 0 &&
	    strcmp(c->precision, "fp16") != 0 && strcmp(c->precision, "bf16") != 0)
		return ex_usage_error(prog, c,
		                      "--precision: expected fp32, amp, fp16 or bf16, got '%s'",
		                      c->precision);
	/* bounded so that steps = epochs x steps an epoch, and batch x sample sizes, stay far
	 * inside int64_t and size_t */
	int rc;
	if ((rc = ex_check_int(prog, c, "epochs", c->epochs, 1, EX_MAX_EPOCHS)) ||
	    (rc = ex_check_int(prog, c, "steps", c->steps, prog->flags & EX_STEPS_LIMIT ? 1 : 0,
	                       INT64_MAX)) ||
	    (rc = ex_check_int(prog, c, "batch", c->batch, 1, EX_MAX_BATCH)))
		return rc;
	/* the optimizers take a float: a rate it rounds to 0 or Inf would not train */
	if (!(c->lr >= (double)FLT_MIN && c->lr <= (double)FLT_MAX))
		return ex_usage_error(
		    prog, c, "--lr: expected a positive number from %.9g to %.9g, got %.9g",
		    (double)FLT_MIN, (double)FLT_MAX, c->lr);
	if (c->seed < -1)
		return ex_usage_error(prog, c, "--seed: expected a non-negative integer");
	if (c->log_every < 0)
		return ex_usage_error(prog, c, "--log-every: expected 0 or more");
	return 0;
}

int ex_check_int(const ex_program *prog, const ex_common *c, const char *name, int64_t v,
                 int64_t lo, int64_t hi)
{
	if (v >= lo && v <= hi)
		return 0;
	if (hi == INT64_MAX)
		return ex_usage_error(prog, c, "--%s: expected at least %" PRId64 ", got %" PRId64,
		                      name, lo, v);
	return ex_usage_error(prog, c, "--%s: expected %" PRId64 " to %" PRId64 ", got %" PRId64,
	                      name, lo, hi, v);
}

int ex_parse_args(const ex_program *prog, ex_common *c, int argc, char **argv)
{
	ex_option common[COMMON_N];
	common_table(prog, c, common);
	static ex_table t; /* large; parsing is single-threaded */
	build_table(&t, prog, common);
	amp_opt_state st;
	const char *v;
	int id;
	if (amp_opt_begin(&st, &t.spec, argc, argv) != 0)
		return ex_usage_error(prog, c, "too many options in the table");
	while ((id = amp_opt_next(&st, &v)) != AMP_OPT_END) {
		if (id == AMP_OPT_ERROR)
			return 2;
		const ex_option *o = t.src[id - 256];
		if (o == &common[COMMON_HELP]) {
			ex_usage(prog, c, stdout);
			return 1;
		}
		int rc = set_value(prog, c, o, v);
		if (rc)
			return rc;
	}
	if (st.optind < argc)
		return ex_usage_error(prog, c, "unexpected argument '%s'", argv[st.optind]);
	return check_common(prog, c);
}

void ex_usage(const ex_program *prog, const ex_common *c, FILE *f)
{
	ex_common copy = *c;
	ex_option common[COMMON_N];
	common_table(prog, &copy, common);
	static ex_table t; /* large; printing the usage is single-threaded */
	build_table(&t, prog, common);
	amp_opt_help(&t.spec, f);
}

/* ---- context ------------------------------------------------------------------------------- */

static const char *mode_for(const char *precision)
{
	if (strcmp(precision, "fp32") == 0)
		return "force_fp32";
	if (strcmp(precision, "fp16") == 0)
		return "force_fp16";
	if (strcmp(precision, "bf16") == 0)
		return "allow_mix_precision_bf16";
	return "allow_mix_precision";
}

int ex_ctx_open(const ex_program *prog, const ex_common *c, amp_ctx **out)
{
	char err[512] = "";
	*out = NULL;
	int rc = amp_ctx_new(c->config, out, err, sizeof err);
	if (rc) {
		fprintf(stderr, "%s: %s\n", prog->name, err[0] ? err : amp_strerror(rc));
		return -1;
	}
	if (c->precision && amp_config_set(*out, "precision_mode", mode_for(c->precision))) {
		/* a mode this runtime does not have is a bad command line, not a failed run */
		fprintf(stderr, "%s: --precision=%s: %s\n", prog->name, c->precision,
		        amp_ctx_error(*out));
		amp_ctx_free(*out);
		*out = NULL;
		exit(AMP_OPT_EXIT_USAGE);
	}
	if (c->seed >= 0) {
		char buf[32];
		snprintf(buf, sizeof buf, "%" PRId64, c->seed);
		rc = amp_config_set(*out, "seed", buf);
	}
	if (rc) {
		fprintf(stderr, "%s: %s\n", prog->name, amp_ctx_error(*out));
		amp_ctx_free(*out);
		*out = NULL;
		return -1;
	}
	return 0;
}

const char *ex_precision_name(amp_ctx *ctx)
{
	const char *m = amp_config_get(ctx, "precision_mode");
	if (!m)
		return "unknown";
	if (strcmp(m, "force_fp32") == 0)
		return "fp32";
	if (strcmp(m, "allow_mix_precision") == 0 || strcmp(m, "allow_mix_precision_fp16") == 0)
		return "amp";
	if (strcmp(m, "allow_mix_precision_bf16") == 0)
		return "bf16";
	if (strcmp(m, "force_fp16") == 0)
		return "fp16";
	if (strcmp(m, "force_bf16") == 0)
		return "force_bf16"; /* no --precision names it: the mode's own name */
	return "keep";
}

uint64_t ex_ctx_seed(amp_ctx *ctx)
{
	const char *s = amp_config_get(ctx, "seed");
	return s ? strtoull(s, NULL, 10) : 1;
}

int ex_fail(const ex_program *prog, amp_ctx *ctx, const char *what, int rc)
{
	const char *msg = ctx ? amp_ctx_error(ctx) : "";
	fprintf(stderr, "%s: %s: %s\n", prog->name, what, msg && *msg ? msg : amp_strerror(rc));
	return 1;
}

double ex_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- JSON ---------------------------------------------------------------------------------- */

/* Appends to the object; a field that does not fit is dropped whole. */
static void json_put(ex_json *j, const char *fmt, ...)
{
	char field[512];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(field, sizeof field, fmt, ap);
	va_end(ap);
	/* Keep room for the closing brace and the terminator. */
	if (n < 0 || (size_t)n >= sizeof field || j->len + (size_t)n + 2 > sizeof j->buf)
		return;
	memcpy(j->buf + j->len, field, (size_t)n + 1);
	j->len += (size_t)n;
	j->n++;
}

void ex_json_begin(ex_json *j)
{
	j->buf[0] = '{';
	j->buf[1] = 0;
	j->len = 1;
	j->n = 0;
}

void ex_json_str(ex_json *j, const char *key, const char *value)
{
	char esc[256];
	size_t k = 0;
	for (const char *p = value ? value : ""; *p && k + 7 < sizeof esc; p++) {
		unsigned char ch = (unsigned char)*p;
		if (ch == '"' || ch == '\\') {
			esc[k++] = '\\';
			esc[k++] = (char)ch;
		} else if (ch < 0x20) {
			k += (size_t)snprintf(esc + k, sizeof esc - k, "\\u%04x", ch);
		} else {
			esc[k++] = (char)ch;
		}
	}
	esc[k] = 0;
	json_put(j, "%s\"%s\":\"%s\"", j->n ? "," : "", key, esc);
}

void ex_json_num(ex_json *j, const char *key, double value)
{
	if (isfinite(value))
		json_put(j, "%s\"%s\":%.9g", j->n ? "," : "", key, value);
	else
		json_put(j, "%s\"%s\":null", j->n ? "," : "", key);
}

void ex_json_int(ex_json *j, const char *key, int64_t value)
{
	json_put(j, "%s\"%s\":%" PRId64, j->n ? "," : "", key, value);
}

void ex_json_run_stats(ex_json *j, amp_ctx *ctx)
{
	amp_run_stats st;
	amp_run_stats_get(ctx, &st);
	ex_json_int(j, "peak_bytes", (int64_t)st.peak_bytes);
	ex_json_int(j, "param_act_peak_bytes", (int64_t)st.peak_param_act_bytes);
	ex_json_int(j, "overflow_steps", st.overflow_steps);
	ex_json_int(j, "skipped_steps", st.skipped_steps);
	ex_json_num(j, "final_scale", amp_loss_scale(ctx));
}

const char *ex_json_end(ex_json *j)
{
	j->buf[j->len] = '}';
	j->buf[j->len + 1] = 0;
	return j->buf;
}

void ex_json_run_begin(ex_json *j, const char *example, amp_ctx *ctx, int64_t steps)
{
	ex_json_begin(j);
	ex_json_str(j, "example", example);
	ex_json_str(j, "precision", ex_precision_name(ctx));
	ex_json_int(j, "steps", steps);
}

void ex_json_throughput(ex_json *j, double train_seconds, int64_t samples)
{
	ex_json_num(j, "train_seconds", train_seconds);
	ex_json_num(j, "samples_per_sec", train_seconds > 0 ? (double)samples / train_seconds : 0);
}

void ex_json_run_print(ex_json *j, amp_ctx *ctx)
{
	ex_json_run_stats(j, ctx);
	printf("%s\n", ex_json_end(j));
}

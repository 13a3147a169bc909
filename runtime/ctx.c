/* ctx.c — context lifecycle, error messages and configuration (amp.cfg, AMP_* overrides).
 *
 * Configuration is applied in order: defaults, the file (argument or $AMP_CONFIG), AMP_*
 * environment variables, then amp_config_set() calls.  Every key has one parser in the table
 * below, shared by all three sources.
 */
#include "internal.h"
#include "alloc.h"

#include <ctype.h>
#include <errno.h>
#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *amp_strerror(int code)
{
	switch (code) {
	case AMP_OK: return "success";
	case AMP_EINVAL: return "invalid argument";
	case AMP_ENOMEM: return "out of memory";
	case AMP_ESHAPE: return "shape mismatch";
	case AMP_EDTYPE: return "dtype mismatch";
	case AMP_ECONFIG: return "configuration error";
	case AMP_EIO: return "input/output error";
	case AMP_ESTATE: return "call out of order";
	case AMP_ELIMIT: return "memory limit exceeded";
	case AMP_EFORMAT: return "bad checkpoint";
	}
	return "unknown error";
}

int amp_fail(amp_ctx *ctx, int code, const char *fmt, ...)
{
	/* An allocation memory_limit refused: its message (op, bytes) is the one to keep, and the
	 * caller's "out of memory" is that refusal. */
	if (ctx && ctx->limit_hit && code == AMP_ENOMEM)
		return AMP_ELIMIT;
	if (ctx) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(ctx->err, sizeof ctx->err, fmt, ap);
		va_end(ap);
	}
	return code;
}

int amp_oom(const amp_ctx *ctx)
{
	return ctx && ctx->limit_hit ? AMP_ELIMIT : AMP_ENOMEM;
}

const char *amp_ctx_error(const amp_ctx *ctx)
{
	return ctx ? ctx->err : "no context";
}

/* ---- precision modes ---------------------------------------------------------------------- */

static const amp_mode_info modes[AMP_MODE_COUNT] = {
    [AMP_MODE_FORCE_FP32] = {"force_fp32", AMP_KIND_FP32, AMP_F16},
    [AMP_MODE_MIX] = {"allow_mix_precision", AMP_KIND_MIX, AMP_F16},
    [AMP_MODE_MIX_FP16] = {"allow_mix_precision_fp16", AMP_KIND_MIX, AMP_F16},
    [AMP_MODE_MIX_BF16] = {"allow_mix_precision_bf16", AMP_KIND_MIX, AMP_BF16},
    [AMP_MODE_FORCE_FP16] = {"force_fp16", AMP_KIND_FORCE, AMP_F16},
    [AMP_MODE_FORCE_BF16] = {"force_bf16", AMP_KIND_FORCE, AMP_BF16},
    [AMP_MODE_KEEP_ORIGIN] = {"must_keep_origin_dtype", AMP_KIND_KEEP, AMP_F16},
};

const amp_mode_info *amp_mode_info_of(amp_precision_mode mode)
{
	return &modes[mode];
}

/* ---- configuration keys ------------------------------------------------------------------ */

static int parse_double(const char *s, double *out)
{
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	while (*end && isspace((unsigned char)*end))
		end++;
	if (errno || end == s || *end || !isfinite(v))
		return -1;
	*out = v;
	return 0;
}

typedef struct config_key config_key;
/* The buffer of the key amp_config_get is reading. */
#define GETBUF(ctx) ((ctx)->getbuf[(ctx)->get_slot])

struct config_key {
	const char *name;
	/* Parses v into the context's configuration; 0 or an AMP_E* code (message set). */
	int (*set)(amp_ctx *ctx, const config_key *k, const char *v);
	/* The value as text, in GETBUF(ctx) or static storage. */
	const char *(*get)(amp_ctx *ctx, const config_key *k);
	size_t field;         /* scaler keys: offset of the double or int64 in amp_scaler */
	double lo, hi;        /* scaler keys: accepted range, lo < v <= hi (or lo <= v with
	                         lo_closed) */
	int lo_closed;
	int scaler;           /* a loss-scaler key: set before the first step, restarts the scaler */
};

static int set_mode(amp_ctx *ctx, const config_key *k, const char *v)
{
	(void)k;
	for (int i = 0; i < AMP_MODE_COUNT; i++)
		if (strcmp(v, modes[i].name) == 0) {
			ctx->cfg.mode = (amp_precision_mode)i;
			ctx->half = modes[i].half;
			return 0;
		}
	char names[256];
	size_t off = 0;
	for (int i = 0; i < AMP_MODE_COUNT && off < sizeof names; i++)
		off += (size_t)snprintf(names + off, sizeof names - off, "%s%s", i ? ", " : "",
		                        modes[i].name);
	return amp_fail(ctx, AMP_ECONFIG, "precision_mode: unknown mode '%s' (%s)", v, names);
}

static const char *get_mode(amp_ctx *ctx, const config_key *k)
{
	(void)k;
	return modes[ctx->cfg.mode].name;
}

/* Parses "MatMul, Softmax" into the custom list table with the class of the key; an op the
 * other list holds moves into this one (the later setting wins: the environment's over the
 * file's), and the other list's text is rewritten without it. */
static int set_list(amp_ctx *ctx, const config_key *k, const char *v)
{
	amp_op_list cls = strcmp(k->name, "custom_white_list") == 0 ? AMP_LIST_WHITE : AMP_LIST_BLACK;
	char *text = cls == AMP_LIST_WHITE ? ctx->cfg.white_list_text : ctx->cfg.black_list_text;
	signed char next[AMP_OP_COUNT];
	int moved = 0; /* an op taken from the other list */
	memcpy(next, ctx->cfg.custom, sizeof next);
	for (int i = 0; i < AMP_OP_COUNT; i++)
		if (next[i] == (signed char)cls)
			next[i] = -1;
	const char *p = v;
	while (*p) {
		while (*p == ',' || isspace((unsigned char)*p))
			p++;
		if (!*p)
			break;
		const char *start = p;
		while (*p && *p != ',' && !isspace((unsigned char)*p))
			p++;
		char name[64];
		size_t n = (size_t)(p - start);
		if (n >= sizeof name)
			n = sizeof name - 1;
		memcpy(name, start, n);
		name[n] = 0;
		int op = amp_op_from_name(name);
		if (op < 0)
			return amp_fail(ctx, AMP_ECONFIG, "%s: unknown op name '%s'", k->name, name);
		if (next[op] >= 0 && next[op] != (signed char)cls)
			moved = 1;
		next[op] = (signed char)cls;
	}
	memcpy(ctx->cfg.custom, next, sizeof next);
	snprintf(text, sizeof ctx->cfg.white_list_text, "%s", v);
	if (moved) { /* the other list, as it now stands, is what it and the profile say */
		char *ot = cls == AMP_LIST_WHITE ? ctx->cfg.black_list_text : ctx->cfg.white_list_text;
		size_t off = 0;
		ot[0] = 0;
		for (int i = 0; i < AMP_OP_COUNT; i++)
			if (next[i] >= 0 && next[i] != (signed char)cls &&
			    off < sizeof ctx->cfg.white_list_text)
				off += (size_t)snprintf(ot + off, sizeof ctx->cfg.white_list_text - off,
				                        "%s%s", off ? ", " : "", amp_op_name((amp_op_type)i));
	}
	return 0;
}

static const char *get_list(amp_ctx *ctx, const config_key *k)
{
	return strcmp(k->name, "custom_white_list") == 0 ? ctx->cfg.white_list_text
	                                                 : ctx->cfg.black_list_text;
}

/* loss_scale = dynamic | <static scale>.  Unset, the mode decides: dynamic for FP16, a static
 * 1 (no scaling) for BF16, whose range is FP32's. */
static int set_loss_scale(amp_ctx *ctx, const config_key *k, const char *v)
{
	(void)k;
	double d;
	if (strcmp(v, "dynamic") == 0) {
		ctx->cfg.scaler_set = 1;
		ctx->cfg.scaler_init.dynamic = 1;
		return 0;
	}
	/* the seed gradient is a float: a larger scale would be Inf, every step skipped; below
	 * 2^-126 the unscaling factor 1/scale would be */
	if (parse_double(v, &d) || d < (double)FLT_MIN || d > (double)FLT_MAX)
		return amp_fail(ctx, AMP_ECONFIG,
		                "loss_scale: expected 'dynamic' or a number in [%g, %g], got '%s'",
		                (double)FLT_MIN, (double)FLT_MAX, v);
	ctx->cfg.scaler_set = 1;
	ctx->cfg.scaler_init.dynamic = 0;
	ctx->cfg.static_scale = d;
	return 0;
}

static int scaler_dynamic(const amp_ctx *ctx)
{
	return ctx->cfg.scaler_set ? ctx->cfg.scaler_init.dynamic
	                           : modes[ctx->cfg.mode].half != AMP_BF16;
}

static const char *get_loss_scale(amp_ctx *ctx, const config_key *k)
{
	(void)k;
	if (scaler_dynamic(ctx))
		return "dynamic";
	snprintf(GETBUF(ctx), sizeof GETBUF(ctx), "%.9g",
	         ctx->cfg.scaler_set ? ctx->cfg.static_scale : 1.0);
	return GETBUF(ctx);
}

/* A number in the scaler at k->field, in k's range (growth_interval: a whole number). */
static int set_scaler_number(amp_ctx *ctx, const config_key *k, const char *v)
{
	double d;
	int interval = k->field == offsetof(amp_scaler, growth_interval);
	if (parse_double(v, &d))
		return amp_fail(ctx, AMP_ECONFIG, "%s: expected a number, got '%s'", k->name, v);
	if (!(k->lo_closed ? d >= k->lo : d > k->lo) || d > k->hi || (interval && d != floor(d))) {
		if (interval)
			return amp_fail(ctx, AMP_ECONFIG, "%s: value '%s' out of range (a whole number "
			                                  "from 1)", k->name, v);
		/* an upper bound just below what %g prints (the backoff factor's, below 1) is an
		 * open end */
		char hb[32];
		snprintf(hb, sizeof hb, "%g", k->hi);
		return amp_fail(ctx, AMP_ECONFIG, "%s: value '%s' out of range %c%g, %s%c", k->name, v,
		                k->lo_closed ? '[' : '(', k->lo, hb, strtod(hb, NULL) > k->hi ? ')' : ']');
	}
	char *field = (char *)&ctx->cfg.scaler_init + k->field;
	if (interval) {
		int64_t n = (int64_t)d;
		memcpy(field, &n, sizeof n);
	} else {
		memcpy(field, &d, sizeof d);
	}
	return 0;
}

static const char *get_scaler_number(amp_ctx *ctx, const config_key *k)
{
	const char *field = (const char *)&ctx->cfg.scaler_init + k->field;
	if (k->field == offsetof(amp_scaler, growth_interval)) {
		int64_t n;
		memcpy(&n, field, sizeof n);
		snprintf(GETBUF(ctx), sizeof GETBUF(ctx), "%lld", (long long)n);
	} else {
		double d;
		memcpy(&d, field, sizeof d);
		snprintf(GETBUF(ctx), sizeof GETBUF(ctx), "%.9g", d);
	}
	return GETBUF(ctx);
}

static int set_seed(amp_ctx *ctx, const config_key *k, const char *v)
{
	(void)k;
	/* strtoull, not a double: every 64-bit seed is exact and none overflows a cast. */
	char *end;
	errno = 0;
	unsigned long long seed = strtoull(v, &end, 10);
	while (*end && isspace((unsigned char)*end))
		end++;
	if (!isdigit((unsigned char)*v) || errno || *end)
		return amp_fail(ctx, AMP_ECONFIG, "seed: expected a non-negative integer, got '%s'", v);
	ctx->cfg.seed = (uint64_t)seed;
	ctx->rng_state = ctx->cfg.seed * 0x9E3779B97F4A7C15ull + 1;
	return 0;
}

static const char *get_seed(amp_ctx *ctx, const config_key *k)
{
	(void)k;
	snprintf(GETBUF(ctx), sizeof GETBUF(ctx), "%llu", (unsigned long long)ctx->cfg.seed);
	return GETBUF(ctx);
}

static int set_threads(amp_ctx *ctx, const config_key *k, const char *v)
{
	(void)k;
	double d;
	if (parse_double(v, &d) || d < 1 || d > 256 || d != floor(d))
		return amp_fail(ctx, AMP_ECONFIG, "num_threads: expected 1..256, got '%s'", v);
	amp_kernels_set_threads((int)d); /* process-wide: the GEMM pool */
	return 0;
}

static const char *get_threads(amp_ctx *ctx, const config_key *k)
{
	(void)k;
	/* the process's, which the last context to set it chose */
	snprintf(GETBUF(ctx), sizeof GETBUF(ctx), "%d", amp_kernels_threads());
	return GETBUF(ctx);
}

static int set_kernels(amp_ctx *ctx, const config_key *k, const char *v)
{
	(void)k;
	if (amp_kernels_select(v) < 0) {
		char why[400];
		amp_kernels_select_error(v, why, sizeof why);
		return amp_fail(ctx, AMP_ECONFIG, "kernels: %s", why);
	}
	return 0;
}

static const char *get_kernels(amp_ctx *ctx, const config_key *k)
{
	(void)k, (void)ctx;
	return amp_kernels_selection(); /* the process's, as num_threads */
}

/* The all-reduce's keys lay out its buckets, which the backend does once, when it attaches. */
static int dist_attached(amp_ctx *ctx, const config_key *k)
{
	return ctx->dist ? amp_fail(ctx, AMP_ESTATE,
	                            "%s: set before the data-parallel attach "
	                            "(amp_mpi_attach lays the gradient buckets out by it)",
	                            k->name)
	                 : 0;
}

static int set_allreduce_dtype(amp_ctx *ctx, const config_key *k, const char *v)
{
	if (dist_attached(ctx, k))
		return AMP_ESTATE;
	if (strcmp(v, "fp32") == 0)
		ctx->cfg.allreduce_dtype = AMP_F32;
	else if (strcmp(v, "fp16") == 0)
		ctx->cfg.allreduce_dtype = AMP_F16;
	else if (strcmp(v, "bf16") == 0)
		ctx->cfg.allreduce_dtype = AMP_BF16;
	else
		return amp_fail(ctx, AMP_ECONFIG, "allreduce_dtype: expected fp32, fp16 or bf16, got '%s'",
		                v);
	return 0;
}

static const char *get_allreduce_dtype(amp_ctx *ctx, const config_key *k)
{
	(void)k;
	return amp_dtype_name(ctx->cfg.allreduce_dtype);
}

static int set_bucket_kb(amp_ctx *ctx, const config_key *k, const char *v)
{
	if (dist_attached(ctx, k))
		return AMP_ESTATE;
	double d;
	if (parse_double(v, &d) || d < 1 || d > 1048576 || d != floor(d))
		return amp_fail(ctx, AMP_ECONFIG, "allreduce_bucket_kb: expected 1..1048576, got '%s'", v);
	ctx->cfg.allreduce_bucket_kb = (int64_t)d;
	return 0;
}

static const char *get_bucket_kb(amp_ctx *ctx, const config_key *k)
{
	(void)k;
	snprintf(GETBUF(ctx), sizeof GETBUF(ctx), "%lld", (long long)ctx->cfg.allreduce_bucket_kb);
	return GETBUF(ctx);
}

/* optimizer_sharding = on | off: the ranks split each update (amp/amp_mpi.h). */
static int set_sharding(amp_ctx *ctx, const config_key *k, const char *v)
{
	if (dist_attached(ctx, k))
		return AMP_ESTATE;
	int on = strcmp(v, "on") == 0;
	if (!on && strcmp(v, "off") != 0)
		return amp_fail(ctx, AMP_ECONFIG, "%s: expected 'on' or 'off', got '%s'", k->name,
		                v);
	ctx->cfg.optimizer_sharding = on;
	return 0;
}

static const char *get_sharding(amp_ctx *ctx, const config_key *k)
{
	(void)k;
	return ctx->cfg.optimizer_sharding ? "on" : "off";
}

/* gradient_clipping = <max norm>, 0 = off. */
static int set_clip(amp_ctx *ctx, const config_key *k, const char *v)
{
	double d;
	if (parse_double(v, &d) || d < 0)
		return amp_fail(ctx, AMP_ECONFIG, "%s: expected a norm >= 0 (0: off), got '%s'",
		                k->name, v);
	ctx->cfg.clip_norm = d;
	return 0;
}

static const char *get_clip(amp_ctx *ctx, const config_key *k)
{
	(void)k;
	snprintf(GETBUF(ctx), sizeof GETBUF(ctx), "%.9g", ctx->cfg.clip_norm);
	return GETBUF(ctx);
}

static int set_accum(amp_ctx *ctx, const config_key *k, const char *v)
{
	double d;
	if (parse_double(v, &d) || d < 1 || d > 65536 || d != floor(d))
		return amp_fail(ctx, AMP_ECONFIG, "%s: expected a whole number 1..65536, got '%s'",
		                k->name, v);
	if (ctx->in_step)
		return amp_fail(ctx, AMP_ESTATE, "%s: cannot change inside a step", k->name);
	ctx->cfg.accum_steps = (int64_t)d;
	return 0;
}

static const char *get_accum(amp_ctx *ctx, const config_key *k)
{
	(void)k;
	snprintf(GETBUF(ctx), sizeof GETBUF(ctx), "%lld", (long long)ctx->cfg.accum_steps);
	return GETBUF(ctx);
}

static int set_memopt(amp_ctx *ctx, const config_key *k, const char *v)
{
	int on = strcmp(v, "on") == 0;
	if (!on && strcmp(v, "off") != 0)
		return amp_fail(ctx, AMP_ECONFIG, "%s: expected 'on' or 'off', got '%s'", k->name, v);
	if (ctx->in_step)
		return amp_fail(ctx, AMP_ESTATE, "%s: cannot change inside a step", k->name);
	ctx->cfg.memory_optimize = on;
	return 0;
}

static const char *get_memopt(amp_ctx *ctx, const config_key *k)
{
	(void)k;
	return ctx->cfg.memory_optimize ? "on" : "off";
}

/* memory_limit = <bytes>[k|m|g] (KiB, MiB, GiB), 0 = none. */
static int set_memlimit(amp_ctx *ctx, const config_key *k, const char *v)
{
	char *end;
	errno = 0;
	unsigned long long n = strtoull(v, &end, 10);
	unsigned shift = 0;
	switch (*end) {
	case 'k': case 'K': shift = 10; end++; break;
	case 'm': case 'M': shift = 20; end++; break;
	case 'g': case 'G': shift = 30; end++; break;
	}
	while (*end && isspace((unsigned char)*end))
		end++;
	if (!isdigit((unsigned char)*v) || errno || *end || n > (UINT64_MAX >> shift))
		return amp_fail(ctx, AMP_ECONFIG,
		                "%s: expected bytes with an optional k, m or g suffix (0: none), got '%s'",
		                k->name, v);
	ctx->cfg.memory_limit = (uint64_t)n << shift;
	return 0;
}

static const char *get_memlimit(amp_ctx *ctx, const config_key *k)
{
	(void)k;
	snprintf(GETBUF(ctx), sizeof GETBUF(ctx), "%llu",
	         (unsigned long long)ctx->cfg.memory_limit);
	return GETBUF(ctx);
}

#define SCALER_NUM(key, member, lo, hi, closed)                                                   \
	{key, set_scaler_number, get_scaler_number, offsetof(amp_scaler, member), lo, hi, closed, 1}

/* Every key of amp.cfg, AMP_* variables and amp_config_set (amp.h documents them). */
static const config_key config_keys[] = {
    {"precision_mode", set_mode, get_mode, 0, 0, 0, 0, 0},
    {"custom_white_list", set_list, get_list, 0, 0, 0, 0, 0},
    {"custom_black_list", set_list, get_list, 0, 0, 0, 0, 0},
    {"loss_scale", set_loss_scale, get_loss_scale, 0, 0, 0, 0, 1},
    /* scales in [2^-126, FLT_MAX]: 1/scale below it is Inf, every gradient NaN or Inf */
    SCALER_NUM("loss_scale_init", scale, FLT_MIN, FLT_MAX, 1),
    SCALER_NUM("loss_scale_growth_interval", growth_interval, 1, 1e15, 1),
    SCALER_NUM("loss_scale_growth_factor", growth_factor, 1, DBL_MAX, 0),
    SCALER_NUM("loss_scale_backoff_factor", backoff_factor, 0, 0x1.fffffffffffffp-1, 0),
    SCALER_NUM("loss_scale_min", min_scale, FLT_MIN, FLT_MAX, 1),
    SCALER_NUM("loss_scale_max", max_scale, FLT_MIN, FLT_MAX, 1),
    {"seed", set_seed, get_seed, 0, 0, 0, 0, 0},
    {"num_threads", set_threads, get_threads, 0, 0, 0, 0, 0},
    {"kernels", set_kernels, get_kernels, 0, 0, 0, 0, 0},
    {"allreduce_dtype", set_allreduce_dtype, get_allreduce_dtype, 0, 0, 0, 0, 0},
    {"allreduce_bucket_kb", set_bucket_kb, get_bucket_kb, 0, 0, 0, 0, 0},
    {"optimizer_sharding", set_sharding, get_sharding, 0, 0, 0, 0, 0},
    {"gradient_clipping", set_clip, get_clip, 0, 0, 0, 0, 0},
    {"gradient_accumulation_steps", set_accum, get_accum, 0, 0, 0, 0, 0},
    {"memory_optimize", set_memopt, get_memopt, 0, 0, 0, 0, 0},
    {"memory_limit", set_memlimit, get_memlimit, 0, 0, 0, 0, 0},
};

_Static_assert(sizeof config_keys / sizeof *config_keys <= AMP_CONFIG_KEYS,
               "amp_config.source has a row per key");

static const config_key *find_key(const char *name)
{
	for (size_t i = 0; i < sizeof config_keys / sizeof *config_keys; i++)
		if (strcmp(config_keys[i].name, name) == 0)
			return &config_keys[i];
	return NULL;
}


/* The live scaler starts from the configured one: dynamic or static by the key or the mode,
 * a dynamic scale clamped to [min, max]. */
static void scaler_reset(amp_ctx *ctx)
{
	amp_scaler *s = &ctx->scaler;
	*s = ctx->cfg.scaler_init;
	s->dynamic = scaler_dynamic(ctx);
	if (s->dynamic)
		s->scale = fmin(fmax(s->scale, s->min_scale), s->max_scale);
	else
		s->scale = ctx->cfg.scaler_set ? ctx->cfg.static_scale : 1.0;
}

int amp_config_check(amp_ctx *ctx)
{
	/* pairs of keys, checked once both may have been set (in either order) */
	const amp_scaler *s = &ctx->cfg.scaler_init;
	const char *lo = ctx->cfg.source[find_key("loss_scale_min") - config_keys];
	const char *hi = ctx->cfg.source[find_key("loss_scale_max") - config_keys];
	if (s->min_scale > s->max_scale)
		return amp_fail(ctx, AMP_ECONFIG, "loss_scale_min (%g, from %s) is above loss_scale_max "
		                "(%g, from %s)", s->min_scale, *lo ? lo : "the default", s->max_scale,
		                *hi ? hi : "the default");
	return AMP_OK;
}

int amp_config_set(amp_ctx *ctx, const char *key, const char *value)
{
	if (!ctx || !key || !value)
		return amp_fail(ctx, AMP_EINVAL, "amp_config_set: NULL argument");
	const config_key *k = find_key(key);
	if (!k)
		return amp_fail(ctx, AMP_ECONFIG, "unknown key '%s'", key);
	if (ctx->step >= 0 && k->scaler)
		return amp_fail(ctx, AMP_ESTATE, "%s: the loss scaler is configured before the first step",
		                key);
	amp_precision_mode old_mode = ctx->cfg.mode;
	/* a setting the user made in the environment, which the program now overrides: said, as
	 * the variable would otherwise seem to do nothing (what the program sets wins) */
	const char *was = ctx->cfg.source[k - config_keys];
	char env_value[128] = "";
	if (!ctx->config_source && strncmp(was, "environment ", 12) == 0) {
		const char *v = getenv(was + 12);
		snprintf(env_value, sizeof env_value, "%s", v ? v : "");
	}
	int rc = k->set(ctx, k, value);
	if (rc == 0 && env_value[0] && strcmp(env_value, value) != 0)
		fprintf(stderr,
		        "libamprt: warning: environment %s=%s is overridden by the program: "
		        "amp_config_set(%s, %s)\n",
		        was + 12, env_value, key, value);
	/* The mode picks the kind of loss scaling (dynamic in fp16, static 1 in bf16), which is
	 * fixed from the first step on: a later mode must keep it.  An FP32 mode scales nothing:
	 * it may follow any mode (the scaler waits as it was), and any mode may follow it while
	 * the scaler is unused (FP32 from the first step: it starts of the new kind); a scaler
	 * that decided steps before the FP32 ones is kept, as without them. */
	if (rc == 0 && ctx->step >= 0 && k->set == set_mode &&
	    scaler_dynamic(ctx) != ctx->scaler.dynamic &&
	    modes[ctx->cfg.mode].kind != AMP_KIND_FP32 && /* FP32 scales nothing */
	    modes[old_mode].kind == AMP_KIND_FP32 && !ctx->scaler_used) {
		scaler_reset(ctx); /* unused so far: it starts now, of the kind the new mode needs */
	} else if (rc == 0 && ctx->step >= 0 && k->set == set_mode &&
	           scaler_dynamic(ctx) != ctx->scaler.dynamic &&
	           modes[ctx->cfg.mode].kind != AMP_KIND_FP32) {
		const char *want = scaler_dynamic(ctx) ? "dynamic" : "static";
		ctx->cfg.mode = old_mode;
		ctx->half = modes[old_mode].half;
		return amp_fail(ctx, AMP_ESTATE,
		                "%s: %s needs %s loss scaling, and the scaler is fixed from the first "
		                "step (set the mode before it, or loss_scale)", key, value, want);
	}
	if (rc == 0)
		snprintf(ctx->cfg.source[k - config_keys], sizeof ctx->cfg.source[0], "%s",
		         ctx->config_source ? ctx->config_source : "amp_config_set");
	/* A scaler key, or a mode (which picks the default scaling), restarts the live scaler:
	 * possible before the first step only. */
	if (rc == 0 && ctx->step < 0 && (k->scaler || k->set == set_mode))
		scaler_reset(ctx);
	return rc;
}

const char *amp_config_get(amp_ctx *ctx, const char *key)
{
	if (!ctx || !key)
		return NULL;
	const config_key *k = find_key(key);
	if (!k)
		return NULL;
	ctx->get_slot = (int)(k - config_keys);
	return k->get(ctx, k);
}

static char *trim(char *s)
{
	while (isspace((unsigned char)*s))
		s++;
	char *e = s + strlen(s);
	while (e > s && isspace((unsigned char)e[-1]))
		*--e = 0;
	return s;
}

int amp_config_load(amp_ctx *ctx, const char *path)
{
	if (!ctx || !path)
		return amp_fail(ctx, AMP_EINVAL, "amp_config_load: NULL argument");
	FILE *f = fopen(path, "r");
	if (!f)
		return amp_fail(ctx, AMP_EIO, "cannot open config '%s': %s", path, strerror(errno));
	char *line = NULL;
	size_t cap = 0;
	ssize_t len;
	int lineno = 0, rc = AMP_OK;
	errno = 0;
	while ((len = getline(&line, &cap, f)) >= 0) {
		lineno++;
		if (memchr(line, 0, (size_t)len)) {
			rc = amp_fail(ctx, AMP_ECONFIG, "%s:%d: a NUL byte (not a text file?)", path,
			              lineno);
			break;
		}
		char *hash = strchr(line, '#');
		if (hash)
			*hash = 0;
		char *s = trim(line);
		if (!*s)
			continue;
		char *eq = strchr(s, '=');
		if (!eq) {
			rc = amp_fail(ctx, AMP_ECONFIG, "%s:%d: expected 'key = value'", path, lineno);
			break;
		}
		*eq = 0;
		char *key = trim(s), *val = trim(eq + 1);
		char msg[sizeof ctx->err], where[160];
		snprintf(where, sizeof where, "%s:%d", path, lineno);
		ctx->config_source = where;
		rc = amp_config_set(ctx, key, val);
		ctx->config_source = NULL;
		if (rc) {
			snprintf(msg, sizeof msg, "%s", ctx->err);
			amp_fail(ctx, rc, "%s:%d: %s", path, lineno, msg);
			break;
		}
	}
	/* a read error (a directory: EISDIR) is not the end of the file */
	if (rc == AMP_OK && ferror(f))
		rc = amp_fail(ctx, AMP_EIO, "cannot read config '%s': %s", path,
		              strerror(errno ? errno : EIO));
	free(line);
	fclose(f);
	return rc;
}

/* AMP_<KEY> of config key i, upper case. */
static void env_name(size_t i, char *name, size_t len)
{
	size_t j = 4;
	memcpy(name, "AMP_", 5);
	for (const char *k = config_keys[i].name; *k && j < len - 1; k++)
		name[j++] = (char)toupper((unsigned char)*k);
	name[j] = 0;
}

/* Edit distance of a and b (substitutions, insertions, deletions), capped at 3. */
static int near_miss(const char *a, const char *b)
{
	size_t n = strlen(b), prev[64], cur[64];
	if (n >= 64 || strlen(a) >= 64)
		return 3;
	for (size_t j = 0; j <= n; j++)
		prev[j] = j;
	for (size_t i = 1; a[i - 1]; i++) {
		cur[0] = i;
		for (size_t j = 1; j <= n; j++) {
			size_t sub = prev[j - 1] + (toupper((unsigned char)a[i - 1]) != b[j - 1]);
			size_t del = prev[j] + 1, ins = cur[j - 1] + 1;
			cur[j] = sub < del ? (sub < ins ? sub : ins) : (del < ins ? del : ins);
		}
		memcpy(prev, cur, (n + 1) * sizeof *prev);
	}
	return prev[n] < 3 ? (int)prev[n] : 3;
}

/* An AMP_* variable within two edits of a setting's (AMP_PRECISON_MODE, AMP_precision_mode)
 * would be ignored in silence: said once per process on stderr, with the setting it was
 * probably meant to be.  Others (AMP_CONFIG, other programs' AMP_ names) are not libamprt's to
 * judge. */
static void warn_unknown_env(void)
{
	static int said;
	extern char **environ;
	if (__atomic_exchange_n(&said, 1, __ATOMIC_ACQ_REL))
		return;
	for (char **e = environ; e && *e; e++) {
		if (strncmp(*e, "AMP_", 4) != 0)
			continue;
		char var[64];
		size_t len = strcspn(*e, "=");
		if (len >= sizeof var)
			continue;
		memcpy(var, *e, len);
		var[len] = 0;
		int known = 0, best = 3;
		char guess[64] = "";
		for (size_t i = 0; i < sizeof config_keys / sizeof *config_keys && !known; i++) {
			char name[64];
			env_name(i, name, sizeof name);
			known = strcmp(var, name) == 0;
			int d = near_miss(var, name);
			if (d < best) {
				best = d;
				snprintf(guess, sizeof guess, "%s", name);
			}
		}
		if (!known && guess[0])
			fprintf(stderr, "libamprt: warning: environment %s is not one of its settings and is "
			        "ignored (did you mean %s?)\n", var, guess);
	}
}

/* AMP_PRECISION_MODE=force_fp16 sets precision_mode, and so on for every key. */
static int apply_env(amp_ctx *ctx)
{
	warn_unknown_env();
	for (size_t i = 0; i < sizeof config_keys / sizeof *config_keys; i++) {
		char name[64];
		env_name(i, name, sizeof name);
		const char *v = getenv(name);
		if (!v)
			continue;
		char msg[sizeof ctx->err], where[96];
		snprintf(where, sizeof where, "environment %s", name);
		ctx->config_source = where;
		int rc = amp_config_set(ctx, config_keys[i].name, v);
		ctx->config_source = NULL;
		if (rc) {
			snprintf(msg, sizeof msg, "%s", ctx->err);
			return amp_fail(ctx, rc, "environment %s: %s", name, msg);
		}
	}
	return AMP_OK;
}

/* ---- the live contexts ---------------------------------------------------------------------
 * The process's live contexts, for the data a forked child needs (amp_ctx_live_add).  The ops a
 * child reports to ampprof must be its own, or the parent's would count twice: at fork the
 * child's thread counters (amp_tl_ops) start again from 0. */
static pthread_mutex_t live_lock = PTHREAD_MUTEX_INITIALIZER;
static amp_ctx *live_head;
static pthread_once_t live_once = PTHREAD_ONCE_INIT;

static void live_prepare(void) { pthread_mutex_lock(&live_lock); }
static void live_parent(void) { pthread_mutex_unlock(&live_lock); }
__thread int64_t amp_tl_ops, amp_tl_copies;

static void live_child(void)
{
	amp_tl_ops = amp_tl_copies = 0; /* the forking thread's, counted by the parent's ring */
	pthread_mutex_unlock(&live_lock);
}

static void live_init(void)
{
	pthread_atfork(live_prepare, live_parent, live_child);
}

void amp_ctx_live_add(amp_ctx *ctx)
{
	pthread_once(&live_once, live_init);
	pthread_mutex_lock(&live_lock);
	ctx->live_prev = NULL;
	ctx->live_next = live_head;
	if (live_head)
		live_head->live_prev = ctx;
	live_head = ctx;
	pthread_mutex_unlock(&live_lock);
}

void amp_ctx_live_remove(amp_ctx *ctx)
{
	pthread_mutex_lock(&live_lock);
	if (ctx->live_prev)
		ctx->live_prev->live_next = ctx->live_next;
	else if (live_head == ctx)
		live_head = ctx->live_next;
	if (ctx->live_next)
		ctx->live_next->live_prev = ctx->live_prev;
	ctx->live_prev = ctx->live_next = NULL;
	pthread_mutex_unlock(&live_lock);
}

int amp_ctx_new(const char *config_path, amp_ctx **out, char *errbuf, size_t errlen)
{
	if (!out)
		return AMP_EINVAL;
	*out = NULL;
	amp_ctx *ctx = amp_mem_calloc(1, sizeof *ctx);
	if (!ctx) {
		if (errbuf && errlen)
			snprintf(errbuf, errlen, "out of memory");
		return AMP_ENOMEM;
	}
	ctx->cfg.mode = AMP_MODE_MIX;
	ctx->half = modes[AMP_MODE_MIX].half;
	memset(ctx->cfg.custom, -1, sizeof ctx->cfg.custom);
	ctx->cfg.scaler_init = (amp_scaler){.dynamic = 1,
	                                    .scale = 128,
	                                    .growth_factor = 2,
	                                    .backoff_factor = 0.5,
	                                    .min_scale = 1,
	                                    .max_scale = 16777216.0,
	                                    .growth_interval = 2000};
	ctx->cfg.seed = 1;
	ctx->cfg.accum_steps = 1;
	ctx->grad_norm = (double)NAN;
	ctx->cur_op = AMP_OP_COUNT;
	ctx->cfg.allreduce_dtype = AMP_F32;
	ctx->cfg.allreduce_bucket_kb = 1024;
	ctx->rng_state = ctx->cfg.seed * 0x9E3779B97F4A7C15ull + 1;
	ctx->training = 1;
	ctx->step = -1;
	ctx->step_loss = NAN;

	int rc = AMP_OK;
	const char *path = config_path ? config_path : getenv("AMP_CONFIG");
	if (path && *path)
		rc = amp_config_load(ctx, path);
	if (rc == AMP_OK)
		rc = apply_env(ctx);
	if (rc == AMP_OK)
		rc = amp_config_check(ctx);
	if (rc) {
		if (errbuf && errlen)
			snprintf(errbuf, errlen, "%s", ctx->err);
		amp_ctx_free(ctx);
		return rc;
	}
	scaler_reset(ctx);
	ctx->trace_id = amp_trace_context_id();
	amp_ctx_live_add(ctx);
	*out = ctx;
	return AMP_OK;
}

void amp_config_trace_sources(amp_ctx *ctx)
{
	for (size_t i = 0; i < sizeof config_keys / sizeof *config_keys; i++) {
		if (!ctx->cfg.source[i][0])
			continue;
		char key[96];
		snprintf(key, sizeof key, "%s_source", config_keys[i].name);
		amp_trace_meta(key, ctx->cfg.source[i]);
	}
}

void amp_set_training(amp_ctx *ctx, int training)
{
	if (ctx)
		ctx->training = training != 0;
}

double amp_loss_scale(const amp_ctx *ctx)
{
	if (!ctx)
		return (double)NAN;
	return modes[ctx->cfg.mode].kind == AMP_KIND_FP32 ? 1.0 : ctx->scaler.scale;
}

void amp_run_stats_get(const amp_ctx *ctx, amp_run_stats *out)
{
	if (!out)
		return;
	if (!ctx) {
		*out = (amp_run_stats){0};
		return;
	}
	*out = ctx->stats;
	out->peak_bytes = ctx->mem_peak;
	out->peak_param_act_bytes = ctx->mem_peak_param_act;
	out->bytes_master = ctx->mem[AMP_MEM_MASTER];
	out->bytes_working = ctx->mem[AMP_MEM_WORKING];
	out->bytes_activations = ctx->mem[AMP_MEM_ACTIVATIONS];
	out->bytes_grads = ctx->mem[AMP_MEM_GRADS];
	out->bytes_optimizer = ctx->mem[AMP_MEM_OPTIMIZER];
	out->peak_bytes_unoptimized = ctx->mem_peak_unopt;
}

double amp_grad_norm(const amp_ctx *ctx)
{
	return ctx ? ctx->grad_norm : (double)NAN;
}

int amp_grad_clipped(const amp_ctx *ctx)
{
	return ctx ? ctx->grad_clipped : 0;
}

/* ---- RNG: splitmix64, deterministic across machines ---------------------------------------- */
uint64_t amp_rng_next(uint64_t *state)
{
	uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

float amp_rng_uniform(uint64_t *state)
{
	return (float)(amp_rng_next(state) >> 40) * (1.0f / 16777216.0f);
}

float amp_rng_normal(uint64_t *state)
{
	/* Box-Muller in double so the result does not depend on libm's float paths. */
	double u1 = ((double)(amp_rng_next(state) >> 11) + 1.0) * (1.0 / 9007199254740992.0);
	double u2 = (double)(amp_rng_next(state) >> 11) * (1.0 / 9007199254740992.0);
	return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

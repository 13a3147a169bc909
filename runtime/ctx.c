/* ctx.c — context lifecycle, error messages and configuration (amp.cfg, AMP_* overrides).
 *
 * Configuration is applied in order: defaults, the file (argument or $AMP_CONFIG), AMP_*
 * environment variables, then amp_config_set() calls.  Every key has one parser in the table
 * below, shared by all three sources.
 */
#include "internal.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
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
	}
	return "unknown error";
}

int amp_fail(amp_ctx *ctx, int code, const char *fmt, ...)
{
	if (ctx) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(ctx->err, sizeof ctx->err, fmt, ap);
		va_end(ap);
	}
	return code;
}

const char *amp_ctx_error(const amp_ctx *ctx)
{
	return ctx ? ctx->err : "no context";
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

static const char *const mode_names[] = {"force_fp32", "allow_mix_precision", "force_fp16",
                                         "must_keep_origin_dtype"};

static int set_mode(amp_ctx *ctx, const char *v)
{
	for (int i = 0; i < 4; i++)
		if (strcmp(v, mode_names[i]) == 0) {
			ctx->cfg.mode = (amp_precision_mode)i;
			return 0;
		}
	return amp_fail(ctx, AMP_ECONFIG,
	                "precision_mode: unknown mode '%s' (force_fp32, allow_mix_precision, "
	                "force_fp16, must_keep_origin_dtype)", v);
}

/* Parses "MatMul, Softmax" into the custom list table with the given class. */
static int set_list(amp_ctx *ctx, const char *key, const char *v, amp_op_list cls, char *text,
                    size_t textlen)
{
	signed char next[AMP_OP_COUNT];
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
			return amp_fail(ctx, AMP_ECONFIG, "%s: unknown op name '%s'", key, name);
		next[op] = (signed char)cls;
	}
	memcpy(ctx->cfg.custom, next, sizeof next);
	snprintf(text, textlen, "%s", v);
	return 0;
}

static int set_scale(amp_ctx *ctx, const char *key, const char *v)
{
	amp_scaler *s = &ctx->cfg.scaler_init;
	double d;
	if (strcmp(key, "loss_scale") == 0) {
		if (strcmp(v, "dynamic") == 0) {
			s->dynamic = 1;
			return 0;
		}
		if (parse_double(v, &d) || d <= 0)
			return amp_fail(ctx, AMP_ECONFIG,
			                "loss_scale: expected 'dynamic' or a positive number, got '%s'", v);
		s->dynamic = 0;
		s->scale = d;
		return 0;
	}
	if (parse_double(v, &d))
		return amp_fail(ctx, AMP_ECONFIG, "%s: expected a number, got '%s'", key, v);
	if (strcmp(key, "loss_scale_init") == 0 && d > 0)
		s->scale = d;
	else if (strcmp(key, "loss_scale_growth_interval") == 0 && d >= 1 && d <= 1e15 &&
	         d == floor(d))
		s->growth_interval = (int64_t)d;
	else if (strcmp(key, "loss_scale_growth_factor") == 0 && d > 1)
		s->growth_factor = d;
	else if (strcmp(key, "loss_scale_backoff_factor") == 0 && d > 0 && d < 1)
		s->backoff_factor = d;
	else if (strcmp(key, "loss_scale_min") == 0 && d > 0)
		s->min_scale = d;
	else if (strcmp(key, "loss_scale_max") == 0 && d > 0)
		s->max_scale = d;
	else
		return amp_fail(ctx, AMP_ECONFIG, "%s: value '%s' out of range", key, v);
	return 0;
}

static int set_key(amp_ctx *ctx, const char *key, const char *v)
{
	double d;
	if (strcmp(key, "precision_mode") == 0)
		return set_mode(ctx, v);
	if (strcmp(key, "custom_white_list") == 0)
		return set_list(ctx, key, v, AMP_LIST_WHITE, ctx->cfg.white_list_text,
		                sizeof ctx->cfg.white_list_text);
	if (strcmp(key, "custom_black_list") == 0)
		return set_list(ctx, key, v, AMP_LIST_BLACK, ctx->cfg.black_list_text,
		                sizeof ctx->cfg.black_list_text);
	if (strncmp(key, "loss_scale", 10) == 0 &&
	    (key[10] == 0 || strcmp(key + 10, "_init") == 0 ||
	     strcmp(key + 10, "_growth_interval") == 0 || strcmp(key + 10, "_growth_factor") == 0 ||
	     strcmp(key + 10, "_backoff_factor") == 0 || strcmp(key + 10, "_min") == 0 ||
	     strcmp(key + 10, "_max") == 0))
		return set_scale(ctx, key, v);
	if (strcmp(key, "seed") == 0) {
		/* strtoull, not a double: every 64-bit seed is exact and none overflows a cast. */
		char *end;
		errno = 0;
		unsigned long long seed = strtoull(v, &end, 10);
		while (*end && isspace((unsigned char)*end))
			end++;
		if (!isdigit((unsigned char)*v) || errno || *end)
			return amp_fail(ctx, AMP_ECONFIG, "seed: expected a non-negative integer, got '%s'",
			                v);
		ctx->cfg.seed = (uint64_t)seed;
		ctx->rng_state = ctx->cfg.seed * 0x9E3779B97F4A7C15ull + 1;
		return 0;
	}
	if (strcmp(key, "num_threads") == 0) {
		if (parse_double(v, &d) || d < 1 || d > 256 || d != floor(d))
			return amp_fail(ctx, AMP_ECONFIG, "num_threads: expected 1..256, got '%s'", v);
		ctx->cfg.num_threads = (int)d;
		amp_kernels_set_threads(ctx->cfg.num_threads);  /* process-wide: the GEMM pool */
		return 0;
	}
	if (strcmp(key, "kernels") == 0) {
		if (amp_kernels_select(v) < 0) {
			char why[400];
			amp_kernels_select_error(v, why, sizeof why);
			return amp_fail(ctx, AMP_ECONFIG, "kernels: %s", why);
		}
		snprintf(ctx->cfg.kernels, sizeof ctx->cfg.kernels, "%s", v);
		return 0;
	}
	return amp_fail(ctx, AMP_ECONFIG, "unknown key '%s'", key);
}

/* The live scaler starts from the configured one, a dynamic scale clamped to [min, max]. */
static void scaler_reset(amp_ctx *ctx)
{
	amp_scaler *s = &ctx->scaler;
	*s = ctx->cfg.scaler_init;
	if (s->dynamic)
		s->scale = fmin(fmax(s->scale, s->min_scale), s->max_scale);
}

int amp_config_set(amp_ctx *ctx, const char *key, const char *value)
{
	if (!ctx || !key || !value)
		return amp_fail(ctx, AMP_EINVAL, "amp_config_set: NULL argument");
	if (ctx->step >= 0 && strncmp(key, "loss_scale", 10) == 0)
		return amp_fail(ctx, AMP_ESTATE, "%s: the loss scaler is configured before the first step",
		                key);
	int rc = set_key(ctx, key, value);
	/* Only a scaler key restarts the live scaler (possible before the first step only). */
	if (rc == 0 && strncmp(key, "loss_scale", 10) == 0)
		scaler_reset(ctx);
	return rc;
}

const char *amp_config_get(amp_ctx *ctx, const char *key)
{
	if (!ctx || !key)
		return NULL;
	const amp_scaler *s = &ctx->cfg.scaler_init;
	char *b = ctx->getbuf;
	size_t n = sizeof ctx->getbuf;
	if (strcmp(key, "precision_mode") == 0)
		return mode_names[ctx->cfg.mode];
	if (strcmp(key, "custom_white_list") == 0)
		return ctx->cfg.white_list_text;
	if (strcmp(key, "custom_black_list") == 0)
		return ctx->cfg.black_list_text;
	if (strcmp(key, "loss_scale") == 0) {
		if (s->dynamic)
			return "dynamic";
		snprintf(b, n, "%.9g", s->scale);
	} else if (strcmp(key, "loss_scale_init") == 0)
		snprintf(b, n, "%.9g", s->scale);
	else if (strcmp(key, "loss_scale_growth_interval") == 0)
		snprintf(b, n, "%lld", (long long)s->growth_interval);
	else if (strcmp(key, "loss_scale_growth_factor") == 0)
		snprintf(b, n, "%.9g", s->growth_factor);
	else if (strcmp(key, "loss_scale_backoff_factor") == 0)
		snprintf(b, n, "%.9g", s->backoff_factor);
	else if (strcmp(key, "loss_scale_min") == 0)
		snprintf(b, n, "%.9g", s->min_scale);
	else if (strcmp(key, "loss_scale_max") == 0)
		snprintf(b, n, "%.9g", s->max_scale);
	else if (strcmp(key, "seed") == 0)
		snprintf(b, n, "%llu", (unsigned long long)ctx->cfg.seed);
	else if (strcmp(key, "num_threads") == 0)
		snprintf(b, n, "%d", ctx->cfg.num_threads);
	else if (strcmp(key, "kernels") == 0)
		return ctx->cfg.kernels;
	else
		return NULL;
	return b;
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
	char line[1024];
	int lineno = 0, rc = AMP_OK;
	while (fgets(line, sizeof line, f)) {
		lineno++;
		/* A line fgets split would be misread as two, with wrong line numbers. */
		if (!strchr(line, '\n') && getc(f) != EOF) {
			rc = amp_fail(ctx, AMP_ECONFIG, "%s:%d: line longer than %zu characters", path,
			              lineno, sizeof line - 2);
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
		char msg[sizeof ctx->err];
		rc = amp_config_set(ctx, key, val);
		if (rc) {
			snprintf(msg, sizeof msg, "%s", ctx->err);
			amp_fail(ctx, rc, "%s:%d: %s", path, lineno, msg);
			break;
		}
	}
	fclose(f);
	return rc;
}

/* AMP_PRECISION_MODE=force_fp16 sets precision_mode, and so on for every key. */
static int apply_env(amp_ctx *ctx)
{
	static const char *const keys[] = {
	    "precision_mode", "custom_white_list", "custom_black_list", "loss_scale",
	    "loss_scale_init", "loss_scale_growth_interval", "loss_scale_growth_factor",
	    "loss_scale_backoff_factor", "loss_scale_min", "loss_scale_max", "seed", "num_threads",
	    "kernels"};
	for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
		char name[64] = "AMP_";
		size_t j = 4;
		for (const char *k = keys[i]; *k && j < sizeof name - 1; k++)
			name[j++] = (char)toupper((unsigned char)*k);
		name[j] = 0;
		const char *v = getenv(name);
		if (!v)
			continue;
		char msg[sizeof ctx->err];
		int rc = amp_config_set(ctx, keys[i], v);
		if (rc) {
			snprintf(msg, sizeof msg, "%s", ctx->err);
			return amp_fail(ctx, rc, "environment %s: %s", name, msg);
		}
	}
	return AMP_OK;
}

int amp_ctx_new(const char *config_path, amp_ctx **out, char *errbuf, size_t errlen)
{
	if (!out)
		return AMP_EINVAL;
	*out = NULL;
	amp_ctx *ctx = calloc(1, sizeof *ctx);
	if (!ctx) {
		if (errbuf && errlen)
			snprintf(errbuf, errlen, "out of memory");
		return AMP_ENOMEM;
	}
	ctx->cfg.mode = AMP_MODE_MIX;
	memset(ctx->cfg.custom, -1, sizeof ctx->cfg.custom);
	ctx->cfg.scaler_init = (amp_scaler){.dynamic = 1,
	                                    .scale = 128,
	                                    .growth_factor = 2,
	                                    .backoff_factor = 0.5,
	                                    .min_scale = 1,
	                                    .max_scale = 16777216.0,
	                                    .growth_interval = 2000};
	ctx->cfg.seed = 1;
	ctx->cfg.num_threads = 1;
	snprintf(ctx->cfg.kernels, sizeof ctx->cfg.kernels, "auto");
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
	if (rc) {
		if (errbuf && errlen)
			snprintf(errbuf, errlen, "%s", ctx->err);
		amp_ctx_free(ctx);
		return rc;
	}
	scaler_reset(ctx);
	*out = ctx;
	return AMP_OK;
}

void amp_set_training(amp_ctx *ctx, int training)
{
	if (ctx)
		ctx->training = training != 0;
}

double amp_loss_scale(const amp_ctx *ctx)
{
	return ctx->cfg.mode == AMP_MODE_FORCE_FP32 ? 1.0 : ctx->scaler.scale;
}

void amp_run_stats_get(const amp_ctx *ctx, amp_run_stats *out)
{
	*out = ctx->stats;
	out->peak_bytes = ctx->mem_peak;
	out->bytes_master = ctx->mem[AMP_MEM_MASTER];
	out->bytes_working = ctx->mem[AMP_MEM_WORKING];
	out->bytes_activations = ctx->mem[AMP_MEM_ACTIVATIONS];
	out->bytes_grads = ctx->mem[AMP_MEM_GRADS];
	out->bytes_optimizer = ctx->mem[AMP_MEM_OPTIMIZER];
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

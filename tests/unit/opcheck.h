/* opcheck.h — shared helpers for op tests: seeded data, running an op on host arrays, and a
 * central-difference gradient check through the real autograd.
 *
 * An op under test is wrapped in an opcheck_fn that builds its output from parameter tensors
 * holding the inputs.  Header-only (static functions) so each test binary stays one file.
 */
#ifndef AMP_TEST_OPCHECK_H
#define AMP_TEST_OPCHECK_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define OPCHECK_MAX_IN 4

/* Builds the op's output from in[0..n).  Integer side inputs (ids, targets) travel in arg. */
typedef int (*opcheck_fn)(amp_ctx *ctx, amp_tensor **in, amp_tensor **out, void *arg);

static inline void opcheck_fill(float *v, int64_t n, uint64_t seed, float lo, float hi)
{
	uint64_t s = seed;
	for (int64_t i = 0; i < n; i++)
		v[i] = lo + (hi - lo) * amp_rng_uniform(&s);
}

static inline amp_ctx *opcheck_ctx(const char *mode)
{
	amp_ctx *ctx = NULL;
	if (amp_ctx_new(NULL, &ctx, NULL, 0) != AMP_OK)
		return NULL;
	if (amp_config_set(ctx, "precision_mode", mode) != AMP_OK) {
		amp_ctx_free(ctx);
		return NULL;
	}
	return ctx;
}

/* Runs fn once in `mode` on inputs vals (shapes[i]) and copies the output into y (host fp32;
 * *ny receives its element count; y may be NULL to only count).  Returns the op's code. */
static inline int opcheck_run(const char *mode, int n, const amp_shape *shapes, float **vals,
                              opcheck_fn fn, void *arg, float *y, int64_t *ny)
{
	amp_ctx *ctx = opcheck_ctx(mode);
	if (!ctx)
		return AMP_ENOMEM;
	amp_tensor *in[OPCHECK_MAX_IN] = {0}, *out = NULL;
	int rc = AMP_OK;
	for (int i = 0; i < n && rc == AMP_OK; i++) {
		rc = amp_param_new(ctx, "in", shapes[i], AMP_INIT_ZEROS, 0, &in[i]);
		if (rc == AMP_OK)
			rc = amp_param_load(ctx, in[i], vals[i]);
	}
	if (rc == AMP_OK)
		rc = amp_step_begin(ctx);
	if (rc == AMP_OK)
		rc = fn(ctx, in, &out, arg);
	if (rc == AMP_OK) {
		if (ny)
			*ny = out->numel;
		if (y)
			rc = amp_tensor_read_f32(ctx, out, y);
	}
	amp_ctx_free(ctx);
	return rc;
}

/* Loss sum(out * r) in double, r drawn from a fixed seed. */
static inline double opcheck_loss(const float *y, int64_t n)
{
	uint64_t s = 99;
	double l = 0;
	for (int64_t i = 0; i < n; i++)
		l += (double)y[i] * (double)(amp_rng_uniform(&s) - 0.5f);
	return l;
}

/* Gradient check in force_fp32: analytic gradients (autograd with seed r) against central
 * differences with step h, on up to `samples` elements per input.  Returns the largest error
 * |analytic - numeric| / max(1, |numeric|). */
static inline double opcheck_grad(int n, const amp_shape *shapes, float **vals, opcheck_fn fn,
                                  void *arg, float h, int samples)
{
	amp_ctx *ctx = opcheck_ctx("force_fp32");
	amp_tensor *in[OPCHECK_MAX_IN] = {0}, *out = NULL;
	double worst = INFINITY;
	float *grads[OPCHECK_MAX_IN] = {0};
	float *seed = NULL, *y = NULL;
	int64_t ny = 0;
	if (!ctx)
		return worst;
	for (int i = 0; i < n; i++)
		if (amp_param_new(ctx, "in", shapes[i], AMP_INIT_ZEROS, 0, &in[i]) ||
		    amp_param_load(ctx, in[i], vals[i]))
			goto out;
	if (amp_step_begin(ctx) || fn(ctx, in, &out, arg))
		goto out;
	ny = out->numel;
	seed = malloc((size_t)ny * sizeof(float));
	y = malloc((size_t)ny * sizeof(float));
	if (!seed || !y)
		goto out;
	{
		uint64_t s = 99;
		for (int64_t i = 0; i < ny; i++)
			seed[i] = amp_rng_uniform(&s) - 0.5f;
	}
	if (amp_backward_seeded(ctx, out, seed))
		goto out;
	for (int i = 0; i < n; i++) {
		grads[i] = calloc((size_t)in[i]->numel, sizeof(float));
		if (!grads[i])
			goto out;
		if (in[i]->grad)
			memcpy(grads[i], in[i]->grad->data, (size_t)in[i]->numel * sizeof(float));
	}
	worst = 0;
	for (int i = 0; i < n; i++) {
		int64_t cnt = amp_shape_numel(shapes[i]);
		int64_t stride = cnt > samples ? cnt / samples : 1;
		for (int64_t k = 0; k < cnt; k += stride) {
			float keep = vals[i][k];
			vals[i][k] = keep + h;
			opcheck_run("force_fp32", n, shapes, vals, fn, arg, y, NULL);
			double lp = opcheck_loss(y, ny);
			vals[i][k] = keep - h;
			opcheck_run("force_fp32", n, shapes, vals, fn, arg, y, NULL);
			double lm = opcheck_loss(y, ny);
			vals[i][k] = keep;
			double num = (lp - lm) / (2.0 * (double)h);
			double err = fabs((double)grads[i][k] - num) / fmax(1.0, fabs(num));
			if (err > worst)
				worst = err;
		}
	}
out:
	for (int i = 0; i < n; i++)
		free(grads[i]);
	free(seed);
	free(y);
	amp_ctx_free(ctx);
	return worst;
}

#endif

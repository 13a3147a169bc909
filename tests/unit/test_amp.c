/* test_amp.c — end-to-end training determinism: a tiny 2-layer MLP (Linear, ReLU, Linear,
 * CrossEntropy) trained for 20 steps on generated data must give a bit-identical loss
 * sequence and final weights in two separate contexts with the same seed, in fp32, in AMP
 * (FP16 and BF16) and in force_fp16 / force_bf16; AMP must track fp32 closely and all learn.
 */
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <math.h>
#include <string.h>

#include "internal.h"

#define N_IN      16
#define N_HID     32
#define N_OUT     4
#define BATCH     32
#define N_BATCHES 4
#define STEPS     20

typedef struct run_result {
	double loss[STEPS];
	double scale[STEPS];
	int skipped[STEPS];
	float w1[N_HID * N_IN], w2[N_OUT * N_HID];
} run_result;

/* Generated data: x ~ U(-1, 1), label = argmax of a fixed random linear map of x. */
static void make_data(float *x, int32_t *y)
{
	uint64_t s = 12345;
	float teacher[N_OUT * N_IN];
	for (int i = 0; i < N_OUT * N_IN; i++)
		teacher[i] = amp_rng_normal(&s);
	for (int r = 0; r < N_BATCHES * BATCH; r++) {
		float best = -INFINITY;
		for (int i = 0; i < N_IN; i++)
			x[r * N_IN + i] = 2 * amp_rng_uniform(&s) - 1;
		for (int o = 0; o < N_OUT; o++) {
			float z = 0;
			for (int i = 0; i < N_IN; i++)
				z += teacher[o * N_IN + i] * x[r * N_IN + i];
			if (z > best) {
				best = z;
				y[r] = o;
			}
		}
	}
}

/* Trains in `mode` with `seed`; extra_key/extra_val (may be NULL) is one more setting. */
static void train_cfg(const char *mode, const char *seed, const char *optim, const char *extra_key,
                      const char *extra_val, run_result *res)
{
	static float X[N_BATCHES * BATCH * N_IN];
	static int32_t Y[N_BATCHES * BATCH];
	make_data(X, Y);
	memset(res, 0, sizeof *res);
	amp_ctx *ctx;
	cr_assert_eq(amp_ctx_new(NULL, &ctx, NULL, 0), AMP_OK);
	cr_assert_eq(amp_config_set(ctx, "precision_mode", mode), AMP_OK);
	cr_assert_eq(amp_config_set(ctx, "seed", seed), AMP_OK);
	if (extra_key)
		cr_assert_eq(amp_config_set(ctx, extra_key, extra_val), AMP_OK);
	amp_tensor *w1, *b1, *w2, *b2;
	cr_assert_eq(amp_param_new(ctx, "fc1.w", amp_shape2(N_HID, N_IN), AMP_INIT_KAIMING, 1, &w1),
	             AMP_OK);
	cr_assert_eq(amp_param_new(ctx, "fc1.b", amp_shape1(N_HID), AMP_INIT_ZEROS, 0, &b1),
	             AMP_OK);
	cr_assert_eq(
	    amp_param_new(ctx, "fc2.w", amp_shape2(N_OUT, N_HID), AMP_INIT_KAIMING, 1, &w2),
	    AMP_OK);
	cr_assert_eq(amp_param_new(ctx, "fc2.b", amp_shape1(N_OUT), AMP_INIT_ZEROS, 0, &b2),
	             AMP_OK);
	amp_optim *opt;
	if (strcmp(optim, "sgd") == 0) {
		amp_sgd_options so = {.lr = 0.1f, .momentum = 0.9f, .weight_decay = 1e-4f};
		cr_assert_eq(amp_optim_sgd_new(ctx, &so, &opt), AMP_OK);
	} else {
		amp_adamw_options ao = {.lr = 0.01f,
		                        .beta1 = 0.9f,
		                        .beta2 = 0.999f,
		                        .eps = 1e-8f,
		                        .weight_decay = 0.01f};
		cr_assert_eq(amp_optim_adamw_new(ctx, &ao, &opt), AMP_OK);
	}
	for (int step = 0; step < STEPS; step++) {
		int b = step % N_BATCHES;
		amp_tensor *x, *t, *h, *a, *z, *loss;
		cr_assert_eq(amp_step_begin(ctx), AMP_OK);
		cr_assert_eq(amp_tensor_from_f32(ctx, X + b * BATCH * N_IN, amp_shape2(BATCH, N_IN),
		                                 AMP_F32, &x),
		             AMP_OK);
		cr_assert_eq(amp_tensor_from_i32(ctx, Y + b * BATCH, amp_shape1(BATCH), &t),
		             AMP_OK);
		cr_assert_eq(amp_linear(ctx, "fc1", x, w1, b1, &h), AMP_OK, "%s",
		             amp_ctx_error(ctx));
		cr_assert_eq(amp_relu(ctx, "relu", h, &a), AMP_OK, "%s", amp_ctx_error(ctx));
		cr_assert_eq(amp_linear(ctx, "fc2", a, w2, b2, &z), AMP_OK, "%s",
		             amp_ctx_error(ctx));
		cr_assert_eq(amp_cross_entropy(ctx, "loss", z, t, &loss), AMP_OK, "%s",
		             amp_ctx_error(ctx));
		res->loss[step] = amp_tensor_item(ctx, loss);
		res->scale[step] = amp_loss_scale(ctx);
		cr_assert_eq(amp_backward(ctx, loss), AMP_OK, "%s", amp_ctx_error(ctx));
		cr_assert_eq(ctx->step_loss, res->loss[step]);
		cr_assert_eq(amp_optim_step(opt, &res->skipped[step]), AMP_OK, "%s",
		             amp_ctx_error(ctx));
		cr_assert_eq(amp_step_end(ctx), AMP_OK);
	}
	memcpy(res->w1, w1->data, sizeof res->w1);
	memcpy(res->w2, w2->data, sizeof res->w2);
	amp_ctx_free(ctx);
}

static void train(const char *mode, const char *seed, const char *optim, run_result *res)
{
	train_cfg(mode, seed, optim, NULL, NULL, res);
}

static void log_run(const char *name, const run_result *r)
{
	cr_log_info("%s: loss %.6f -> %.6f (step 10 %.6f), scale %g, skipped %d", name, r->loss[0],
	            r->loss[STEPS - 1], r->loss[10], r->scale[STEPS - 1], r->skipped[0]);
}

static void check_deterministic(const char *mode, const char *optim)
{
	static run_result a, b;
	train(mode, "7", optim, &a);
	train(mode, "7", optim, &b);
	log_run(mode, &a);
	for (int i = 0; i < STEPS; i++)
		cr_assert_eq(memcmp(&a.loss[i], &b.loss[i], sizeof(double)), 0,
		             "%s/%s step %d: loss %.17g vs %.17g", mode, optim, i, a.loss[i],
		             b.loss[i]);
	cr_assert_eq(memcmp(a.w1, b.w1, sizeof a.w1), 0, "%s: fc1.w differs", mode);
	cr_assert_eq(memcmp(a.w2, b.w2, sizeof a.w2), 0, "%s: fc2.w differs", mode);
	for (int i = 0; i < STEPS; i++)
		cr_assert(isfinite(a.loss[i]), "step %d loss %g", i, a.loss[i]);
	/* Learning: the loss of the last pass over the data is below the first. */
	double first = 0, last = 0;
	for (int i = 0; i < N_BATCHES; i++) {
		first += a.loss[i];
		last += a.loss[STEPS - N_BATCHES + i];
	}
	cr_assert_lt(last, 0.8 * first, "%s/%s did not learn: %g -> %g", mode, optim,
	             first / N_BATCHES, last / N_BATCHES);
	/* A different seed gives a different run. */
	train(mode, "8", optim, &b);
	cr_assert_neq(memcmp(a.loss, b.loss, sizeof a.loss), 0);
}

Test(determinism, fp32_sgd)
{
	check_deterministic("force_fp32", "sgd");
}
Test(determinism, amp_sgd)
{
	check_deterministic("allow_mix_precision", "sgd");
}
Test(determinism, amp_adamw)
{
	check_deterministic("allow_mix_precision", "adamw");
}
Test(determinism, force_fp16_sgd)
{
	check_deterministic("force_fp16", "sgd");
}

Test(determinism, amp_bf16_sgd)
{
	check_deterministic("allow_mix_precision_bf16", "sgd");
}
Test(determinism, amp_bf16_adamw)
{
	check_deterministic("allow_mix_precision_bf16", "adamw");
}
Test(determinism, force_bf16_sgd)
{
	check_deterministic("force_bf16", "sgd");
}

/* A mixed-precision mode tracks fp32: the losses of the same seed stay within tol, no step is
 * skipped, and the mode runs at its scale (FP16: the dynamic 128; BF16, with FP32's range: a
 * static 1).  The first step's loss comes from the same weights, so only the half forward
 * differs there. */
static void check_tracks_fp32(const char *mode, double tol, double scale)
{
	static run_result f, m;
	train("force_fp32", "7", "sgd", &f);
	train(mode, "7", "sgd", &m);
	double worst = 0;
	for (int i = 0; i < STEPS; i++)
		worst = fmax(worst, fabs(f.loss[i] - m.loss[i]));
	cr_log_info("max |loss_fp32 - loss_%s| over %d steps = %.3g (tol %g)", mode, STEPS, worst,
	            tol);
	cr_assert_leq(worst, tol);
	for (int i = 0; i < STEPS; i++) {
		cr_assert_eq(m.skipped[i], 0, "%s step %d skipped", mode, i);
		cr_assert_eq(m.scale[i], scale);
		cr_assert_eq(f.scale[i], 1.0);
	}
	cr_assert_leq(fabs(f.loss[0] - m.loss[0]), tol);
}

Test(determinism, bf16_tracks_fp32)
{
	check_tracks_fp32("allow_mix_precision_bf16", 3e-2, 1.0);
}

Test(determinism, amp_tracks_fp32)
{
	check_tracks_fp32("allow_mix_precision", 5e-3, 128.0);
}

Test(determinism, amp_overflow_recovery_reproduces)
{
	/* Starting at the 2^24 ceiling, the fp16 gradients overflow: the first steps are skipped
	 * and the scale halves until they fit.  Two runs skip the same steps at the same scales. */
	static run_result a, b;
	train_cfg("allow_mix_precision", "7", "sgd", "loss_scale_init", "16777216", &a);
	train_cfg("allow_mix_precision", "7", "sgd", "loss_scale_init", "16777216", &b);
	int skips = 0;
	for (int i = 0; i < STEPS; i++) {
		cr_assert_eq(a.skipped[i], b.skipped[i], "step %d", i);
		cr_assert_eq(a.scale[i], b.scale[i], "step %d", i);
		cr_assert_eq(memcmp(&a.loss[i], &b.loss[i], sizeof(double)), 0, "step %d", i);
		skips += a.skipped[i];
	}
	cr_log_info("2^24 start: %d skipped steps, scale %g -> %g, loss %.6f -> %.6f", skips,
	            a.scale[0], a.scale[STEPS - 1], a.loss[0], a.loss[STEPS - 1]);
	cr_assert_geq(skips, 1);
	cr_assert_eq(a.skipped[0], 1);
	cr_assert_lt(a.scale[STEPS - 1], 16777216.0);
	/* Step 0's forward sees the initial weights whatever the scale. */
	static run_result c;
	train("allow_mix_precision", "7", "sgd", &c);
	cr_assert_eq(a.loss[0], c.loss[0]);
}

/* test_optim.c — the dynamic loss scaler's state machine (pure and through real steps), SGD
 * with momentum and weight decay and AdamW against hand computations in double, and skipped
 * steps leaving weights and optimizer state untouched.
 *
 * Gradients are driven through real ops (Mul on an fp16 input, so the parameter goes through
 * its fp16 working copy) and amp_backward / amp_backward_seeded.
 */
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* Context with key/value pairs applied in order (NULL-terminated). */
static amp_ctx *mkctx(const char *key, ...)
{
	amp_ctx *ctx = NULL;
	cr_assert_eq(amp_ctx_new(NULL, &ctx, NULL, 0), AMP_OK);
	va_list ap;
	va_start(ap, key);
	for (const char *k = key; k; k = va_arg(ap, const char *)) {
		const char *v = va_arg(ap, const char *);
		cr_assert_eq(amp_config_set(ctx, k, v), AMP_OK, "%s = %s: %s", k, v,
		             amp_ctx_error(ctx));
	}
	va_end(ap);
	return ctx;
}

static amp_scaler default_scaler(void)
{
	return (amp_scaler){.dynamic = 1,
	                    .scale = 128,
	                    .growth_factor = 2,
	                    .backoff_factor = 0.5,
	                    .min_scale = 1,
	                    .max_scale = 16777216.0,
	                    .growth_interval = 2000};
}

/* ---- scaler state machine (pure) --------------------------------------------------------- */

Test(scaler, defaults_from_context)
{
	amp_ctx *ctx = mkctx(NULL);
	amp_scaler d = default_scaler();
	cr_assert_eq(ctx->scaler.dynamic, d.dynamic);
	cr_assert_eq(ctx->scaler.scale, d.scale);
	cr_assert_eq(ctx->scaler.growth_factor, d.growth_factor);
	cr_assert_eq(ctx->scaler.backoff_factor, d.backoff_factor);
	cr_assert_eq(ctx->scaler.min_scale, d.min_scale);
	cr_assert_eq(ctx->scaler.max_scale, d.max_scale);
	cr_assert_eq(ctx->scaler.growth_interval, d.growth_interval);
	cr_assert_eq(ctx->scaler.clean_steps, 0);
	amp_ctx_free(ctx);
}

Test(scaler, growth_after_default_interval)
{
	amp_scaler s = default_scaler();
	for (int i = 0; i < 1999; i++) {
		cr_assert_eq(amp_scaler_update(&s, 0), AMP_SCALE_HOLD, "step %d", i);
		cr_assert_eq(s.scale, 128.0);
	}
	cr_assert_eq(s.clean_steps, 1999);
	cr_assert_eq(amp_scaler_update(&s, 0), AMP_SCALE_GROWTH);
	cr_assert_eq(s.scale, 256.0);
	cr_assert_eq(s.clean_steps, 0);
	/* The count restarts after growth. */
	for (int i = 0; i < 1999; i++)
		cr_assert_eq(amp_scaler_update(&s, 0), AMP_SCALE_HOLD);
	cr_assert_eq(amp_scaler_update(&s, 0), AMP_SCALE_GROWTH);
	cr_assert_eq(s.scale, 512.0);
}

Test(scaler, overflow_backs_off_and_restarts_count)
{
	amp_scaler s = default_scaler();
	for (int i = 0; i < 1500; i++)
		amp_scaler_update(&s, 0);
	cr_assert_eq(amp_scaler_update(&s, 1), AMP_SCALE_OVERFLOW);
	cr_assert_eq(s.scale, 64.0);
	cr_assert_eq(s.clean_steps, 0);
	/* 1500 + 1999 clean steps around the overflow: no growth, since the count restarted. */
	for (int i = 0; i < 1999; i++)
		cr_assert_eq(amp_scaler_update(&s, 0), AMP_SCALE_HOLD);
	cr_assert_eq(amp_scaler_update(&s, 0), AMP_SCALE_GROWTH);
	cr_assert_eq(s.scale, 128.0);
	/* Consecutive overflows halve each time. */
	amp_scaler_update(&s, 1);
	amp_scaler_update(&s, 1);
	amp_scaler_update(&s, 1);
	cr_assert_eq(s.scale, 16.0);
}

Test(scaler, small_interval_sequence)
{
	amp_scaler s = default_scaler();
	s.growth_interval = 3;
	/* o = overflow, . = clean; expected scale and reason after each. */
	static const struct {
		int overflow;
		double scale;
		amp_scale_reason why;
	} seq[] = {
	    {0, 128, AMP_SCALE_HOLD}, {0, 128, AMP_SCALE_HOLD},     {0, 256, AMP_SCALE_GROWTH},
	    {0, 256, AMP_SCALE_HOLD}, {1, 128, AMP_SCALE_OVERFLOW}, {0, 128, AMP_SCALE_HOLD},
	    {0, 128, AMP_SCALE_HOLD}, {1, 64, AMP_SCALE_OVERFLOW},  {1, 32, AMP_SCALE_OVERFLOW},
	    {0, 32, AMP_SCALE_HOLD},  {0, 32, AMP_SCALE_HOLD},      {0, 64, AMP_SCALE_GROWTH},
	    {0, 64, AMP_SCALE_HOLD},  {0, 64, AMP_SCALE_HOLD},      {0, 128, AMP_SCALE_GROWTH},
	};
	for (size_t i = 0; i < sizeof seq / sizeof seq[0]; i++) {
		amp_scale_reason why = amp_scaler_update(&s, seq[i].overflow);
		cr_assert_eq(why, seq[i].why, "step %zu: reason %s, expected %s", i,
		             amp_scale_reason_name(why), amp_scale_reason_name(seq[i].why));
		cr_assert_eq(s.scale, seq[i].scale, "step %zu: scale %g, expected %g", i, s.scale,
		             seq[i].scale);
	}
}

Test(scaler, clamps)
{
	amp_scaler s = default_scaler();
	s.growth_interval = 1;
	s.scale = 4194304; /* 2^22 */
	amp_scaler_update(&s, 0);
	cr_assert_eq(s.scale, 8388608.0);
	amp_scaler_update(&s, 0);
	cr_assert_eq(s.scale, 16777216.0);
	for (int i = 0; i < 5; i++) {
		/* At the ceiling the decision is a hold: the scale did not change. */
		cr_assert_eq(amp_scaler_update(&s, 0), AMP_SCALE_HOLD);
		cr_assert_eq(s.scale, 16777216.0, "grew past 2^24: %g", s.scale);
	}
	/* Growth factor that overshoots the max lands on the max. */
	s.scale = 12e6;
	amp_scaler_update(&s, 0);
	cr_assert_eq(s.scale, 16777216.0);

	s.scale = 4;
	for (int i = 0; i < 5; i++)
		cr_assert_eq(amp_scaler_update(&s, 1), AMP_SCALE_OVERFLOW);
	cr_assert_eq(s.scale, 1.0, "fell below 1: %g", s.scale);
	s.scale = 1.5;
	amp_scaler_update(&s, 1);
	cr_assert_eq(s.scale, 1.0);

	/* Configured clamps and factors. */
	s = default_scaler();
	s.min_scale = 8;
	s.max_scale = 1024;
	s.backoff_factor = 0.25;
	s.growth_factor = 4;
	s.growth_interval = 2;
	s.scale = 64;
	amp_scaler_update(&s, 1);
	cr_assert_eq(s.scale, 16.0);
	amp_scaler_update(&s, 1);
	cr_assert_eq(s.scale, 8.0);
	for (int i = 0; i < 10; i++)
		amp_scaler_update(&s, 0);
	cr_assert_eq(s.scale, 1024.0);
}

Test(scaler, static_never_moves)
{
	amp_scaler s = default_scaler();
	s.dynamic = 0;
	s.scale = 1000;
	s.growth_interval = 1;
	for (int i = 0; i < 10; i++) {
		cr_assert_eq(amp_scaler_update(&s, i % 3 == 0), AMP_SCALE_STATIC);
		cr_assert_eq(s.scale, 1000.0);
	}
}

/* ---- scaler through real steps ----------------------------------------------------------- */

/* One step: loss = x * w with x an fp16 scalar holding xv, so w goes through its fp16 working
 * copy and its scaled gradient scale * xv is computed in fp16 (Inf beyond 65504). */
static void mul_step(amp_ctx *ctx, amp_optim *o, amp_tensor *w, float xv, int *skipped)
{
	amp_tensor *x, *y;
	cr_assert_eq(amp_step_begin(ctx), AMP_OK);
	cr_assert_eq(amp_tensor_from_f32(ctx, &xv, amp_shape1(1), AMP_F16, &x), AMP_OK);
	cr_assert_eq(amp_mul(ctx, "mul", x, w, &y), AMP_OK, "%s", amp_ctx_error(ctx));
	cr_assert_eq(amp_backward(ctx, y), AMP_OK, "%s", amp_ctx_error(ctx));
	cr_assert_eq(amp_optim_step(o, skipped), AMP_OK, "%s", amp_ctx_error(ctx));
	cr_assert_eq(amp_step_end(ctx), AMP_OK);
}

Test(scaler, dynamic_through_steps)
{
	amp_ctx *ctx = mkctx("loss_scale_growth_interval", "3", NULL);
	amp_tensor *w;
	amp_optim *o;
	const float w0 = 0.5f;
	cr_assert_eq(amp_param_new(ctx, "w", amp_shape1(1), AMP_INIT_ZEROS, 0, &w), AMP_OK);
	cr_assert_eq(amp_param_load(ctx, w, &w0), AMP_OK);
	amp_sgd_options so = {.lr = 0.001f};
	cr_assert_eq(amp_optim_sgd_new(ctx, &so, &o), AMP_OK);

	/* x = 1000: 128 * 1000 overflows fp16, 64 * 1000 does not. */
	static const struct {
		float x;
		int skipped;
		double scale_after;
	} seq[] = {
	    {1000, 1, 64}, {1000, 0, 64}, {1, 0, 64}, {1, 0, 128}, {1000, 1, 64}, {1, 0, 64},
	};
	float wprev = w0;
	int nskip = 0;
	for (size_t i = 0; i < sizeof seq / sizeof seq[0]; i++) {
		double scale_before = amp_loss_scale(ctx);
		int skipped = -1;
		mul_step(ctx, o, w, seq[i].x, &skipped);
		float wnow = ((float *)w->data)[0];
		cr_log_info("step %zu: x=%g scale %g -> %g skipped=%d w=%.9g", i, (double)seq[i].x,
		            scale_before, amp_loss_scale(ctx), skipped, (double)wnow);
		cr_assert_eq(skipped, seq[i].skipped, "step %zu", i);
		cr_assert_eq(ctx->step_skipped, seq[i].skipped);
		cr_assert_eq(ctx->step_overflow, seq[i].skipped);
		cr_assert_eq(ctx->step_scale, scale_before);
		cr_assert_eq(amp_loss_scale(ctx), seq[i].scale_after, "step %zu: scale %g", i,
		             amp_loss_scale(ctx));
		if (seq[i].skipped) {
			cr_assert_eq(wnow, wprev, "skipped step changed w");
			nskip++;
		} else {
			/* Plain SGD: w -= lr * x (the unscaled gradient). */
			float expect = wprev - so.lr * seq[i].x;
			cr_assert_float_eq(wnow, expect, 1e-6f, "w %.9g expected %.9g",
			                   (double)wnow, (double)expect);
		}
		/* Gradients are cleared either way (as the accessor shows them: zero in meaning,
		 * zeroed in memory when read before the next step's first gradient). */
		cr_assert_eq(((float *)amp_tensor_grad(w)->data)[0], 0.0f);
		wprev = wnow;
	}
	amp_run_stats st;
	amp_run_stats_get(ctx, &st);
	cr_assert_eq(st.steps, 6);
	cr_assert_eq(st.overflow_steps, nskip);
	cr_assert_eq(st.skipped_steps, nskip);
	amp_ctx_free(ctx);
}

Test(scaler, static_through_steps)
{
	amp_ctx *ctx = mkctx("loss_scale", "64", NULL);
	amp_tensor *w;
	amp_optim *o;
	cr_assert_eq(amp_param_new(ctx, "w", amp_shape1(1), AMP_INIT_ONES, 0, &w), AMP_OK);
	amp_sgd_options so = {.lr = 0.01f};
	cr_assert_eq(amp_optim_sgd_new(ctx, &so, &o), AMP_OK);
	int skipped;
	mul_step(ctx, o, w, 2000, &skipped); /* 128000 overflows fp16 */
	cr_assert_eq(skipped, 1);
	cr_assert_eq(amp_loss_scale(ctx), 64.0);
	cr_assert_eq(((float *)w->data)[0], 1.0f);
	for (int i = 0; i < 5; i++) {
		mul_step(ctx, o, w, 1, &skipped);
		cr_assert_eq(skipped, 0);
		cr_assert_eq(amp_loss_scale(ctx), 64.0);
	}
	cr_assert_float_eq(((float *)w->data)[0], 1.0f - 5 * 0.01f, 1e-6f);
	amp_ctx_free(ctx);
}

Test(scaler, force_fp32_no_scaling_but_nan_skips)
{
	amp_ctx *ctx =
	    mkctx("precision_mode", "force_fp32", "loss_scale_growth_interval", "1", NULL);
	amp_tensor *w;
	amp_optim *o;
	cr_assert_eq(amp_param_new(ctx, "w", amp_shape1(1), AMP_INIT_ONES, 0, &w), AMP_OK);
	amp_sgd_options so = {.lr = 0.5f};
	cr_assert_eq(amp_optim_sgd_new(ctx, &so, &o), AMP_OK);
	int skipped;
	/* In fp32, x = 1e6 is a perfectly fine gradient. */
	mul_step(ctx, o, w, 1000, &skipped);
	cr_assert_eq(skipped, 0);
	cr_assert_eq(amp_loss_scale(ctx), 1.0);
	cr_assert_eq(ctx->scaler.scale, 128.0, "force_fp32 moved the scaler");
	cr_assert_eq(((float *)w->data)[0], 1.0f - 500.0f);
	/* A NaN gradient still skips the step. */
	amp_tensor *x, *y;
	float nanv = NAN;
	cr_assert_eq(amp_step_begin(ctx), AMP_OK);
	cr_assert_eq(amp_tensor_from_f32(ctx, &nanv, amp_shape1(1), AMP_F32, &x), AMP_OK);
	cr_assert_eq(amp_mul(ctx, "mul", x, w, &y), AMP_OK);
	cr_assert_eq(amp_backward(ctx, y), AMP_OK);
	cr_assert_eq(amp_optim_step(o, &skipped), AMP_OK);
	cr_assert_eq(skipped, 1);
	cr_assert_eq(amp_step_end(ctx), AMP_OK);
	cr_assert_eq(((float *)w->data)[0], 1.0f - 500.0f);
	cr_assert_eq(ctx->scaler.scale, 128.0);
	amp_ctx_free(ctx);
}

Test(scaler, fp16_loss_seed_beyond_half_range_overflows)
{
	/* An fp16 loss carries its seed (the scale) in fp16: above 65504 that is Inf, so the step
	 * overflows and the scale backs off into range. */
	amp_ctx *ctx = mkctx("loss_scale_init", "131072", NULL);
	amp_tensor *w;
	amp_optim *o;
	cr_assert_eq(amp_param_new(ctx, "w", amp_shape1(1), AMP_INIT_ONES, 0, &w), AMP_OK);
	amp_sgd_options so = {.lr = 0.01f};
	cr_assert_eq(amp_optim_sgd_new(ctx, &so, &o), AMP_OK);
	int skipped;
	mul_step(ctx, o, w, 0.001f, &skipped);
	cr_assert_eq(skipped, 1);
	cr_assert_eq(amp_loss_scale(ctx), 65536.0);
	mul_step(ctx, o, w, 0.001f, &skipped); /* 65536 > 65504: still Inf */
	cr_assert_eq(skipped, 1);
	cr_assert_eq(amp_loss_scale(ctx), 32768.0);
	mul_step(ctx, o, w, 0.001f, &skipped);
	cr_assert_eq(skipped, 0);
	amp_ctx_free(ctx);
}

/* ---- optimizers against hand computations ------------------------------------------------ */

static const float W0[6] = {0.5f, -1.0f, 2.0f, 0.25f, -0.125f, 3.0f};
static const float C0[6] = {1.0f, -2.0f, 0.5f, 3.0f, 0.75f, -0.25f};

/* One step: y = c * w (c an input of dtype cdt), seeded with step_scale * gfac, then the
 * optimizer.  The master gradient after unscaling is gfac * c. */
static void lin_step(amp_ctx *ctx, amp_optim *o, amp_tensor *w, amp_dtype cdt, float gfac,
                     int *skipped)
{
	amp_tensor *c, *y;
	float seed[6];
	cr_assert_eq(amp_step_begin(ctx), AMP_OK);
	cr_assert_eq(amp_tensor_from_f32(ctx, C0, amp_shape1(6), cdt, &c), AMP_OK);
	cr_assert_eq(amp_mul(ctx, "mul", c, w, &y), AMP_OK, "%s", amp_ctx_error(ctx));
	for (int i = 0; i < 6; i++)
		seed[i] = (float)ctx->step_scale * gfac;
	cr_assert_eq(amp_backward_seeded(ctx, y, seed), AMP_OK, "%s", amp_ctx_error(ctx));
	cr_assert_eq(amp_optim_step(o, skipped), AMP_OK, "%s", amp_ctx_error(ctx));
	cr_assert_eq(amp_step_end(ctx), AMP_OK);
}

static amp_tensor *mkparam(amp_ctx *ctx)
{
	amp_tensor *w;
	cr_assert_eq(amp_param_new(ctx, "w", amp_shape1(6), AMP_INIT_ZEROS, 0, &w), AMP_OK);
	cr_assert_eq(amp_param_load(ctx, w, W0), AMP_OK);
	return w;
}

static double max_diff(const float *a, const double *b, int n)
{
	double m = 0;
	for (int i = 0; i < n; i++)
		m = fmax(m, fabs((double)a[i] - b[i]));
	return m;
}

static void check_sgd(const char *mode, amp_dtype cdt)
{
	amp_ctx *ctx = mkctx("precision_mode", mode, NULL);
	amp_tensor *w = mkparam(ctx);
	amp_optim *o;
	amp_sgd_options so = {.lr = 0.1f, .momentum = 0.9f, .weight_decay = 0.01f};
	cr_assert_eq(amp_optim_sgd_new(ctx, &so, &o), AMP_OK);
	double wr[6], m[6] = {0};
	for (int i = 0; i < 6; i++)
		wr[i] = (double)W0[i];
	const double tol = 1e-6;
	for (int step = 0; step < 3; step++) {
		int skipped;
		lin_step(ctx, o, w, cdt, 1.0f, &skipped);
		cr_assert_eq(skipped, 0);
		/* m = mu m + g + wd w;  w -= lr m */
		for (int i = 0; i < 6; i++) {
			m[i] = 0.9 * m[i] + (double)C0[i] + 0.01 * wr[i];
			wr[i] -= 0.1 * m[i];
		}
		double d = max_diff(w->data, wr, 6);
		cr_log_info("SGD %s step %d: max |w - ref| = %.3g (tol %.0e)", mode, step, d, tol);
		cr_assert_leq(d, tol);
		double dm = max_diff(w->param->opt_m->data, m, 6);
		cr_assert_leq(dm, tol, "momentum buffer differs by %.3g", dm);
	}
	amp_run_stats st;
	amp_run_stats_get(ctx, &st);
	cr_assert_eq(st.bytes_optimizer, 6 * sizeof(float));
	amp_ctx_free(ctx);
}

Test(optim, sgd_momentum_fp32)
{
	check_sgd("force_fp32", AMP_F32);
}
Test(optim, sgd_momentum_amp_fp16_path)
{
	check_sgd("allow_mix_precision", AMP_F16);
}
Test(optim, sgd_momentum_amp_fp32_path)
{
	check_sgd("allow_mix_precision", AMP_F32);
}

Test(optim, sgd_plain_weight_decay)
{
	amp_ctx *ctx = mkctx("precision_mode", "force_fp32", NULL);
	amp_tensor *w = mkparam(ctx);
	amp_optim *o;
	amp_sgd_options so = {.lr = 0.05f, .weight_decay = 0.1f};
	cr_assert_eq(amp_optim_sgd_new(ctx, &so, &o), AMP_OK);
	int skipped;
	lin_step(ctx, o, w, AMP_F32, 1.0f, &skipped);
	double wr[6];
	for (int i = 0; i < 6; i++)
		wr[i] = (double)W0[i] - 0.05 * ((double)C0[i] + 0.1 * (double)W0[i]);
	double d = max_diff(w->data, wr, 6);
	cr_log_info("plain SGD: max diff %.3g (tol 1e-6)", d);
	cr_assert_leq(d, 1e-6);
	cr_assert_null(w->param->opt_m, "plain SGD needs no state");
	amp_ctx_free(ctx);
}

static void check_adamw(const char *mode, amp_dtype cdt)
{
	amp_ctx *ctx = mkctx("precision_mode", mode, NULL);
	amp_tensor *w = mkparam(ctx);
	amp_optim *o;
	amp_adamw_options ao = {
	    .lr = 0.01f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.1f};
	cr_assert_eq(amp_optim_adamw_new(ctx, &ao, &o), AMP_OK);
	double wr[6], m[6] = {0}, v[6] = {0};
	for (int i = 0; i < 6; i++)
		wr[i] = (double)W0[i];
	const double b1 = (double)ao.beta1, b2 = (double)ao.beta2, lr = (double)ao.lr,
	             eps = (double)ao.eps, wd = (double)ao.weight_decay;
	const double tol = 2e-6;
	for (int t = 1; t <= 3; t++) {
		int skipped;
		/* A different gradient each step (gfac = t) so the moments matter. */
		lin_step(ctx, o, w, cdt, (float)t, &skipped);
		cr_assert_eq(skipped, 0);
		for (int i = 0; i < 6; i++) {
			double g = t * (double)C0[i];
			m[i] = b1 * m[i] + (1 - b1) * g;
			v[i] = b2 * v[i] + (1 - b2) * g * g;
			double mh = m[i] / (1 - pow(b1, t)), vh = v[i] / (1 - pow(b2, t));
			wr[i] = wr[i] * (1 - lr * wd) - lr * mh / (sqrt(vh) + eps);
		}
		double d = max_diff(w->data, wr, 6);
		cr_log_info("AdamW %s step %d: max |w - ref| = %.3g (tol %.0e)", mode, t, d, tol);
		cr_assert_leq(d, tol);
		cr_assert_leq(max_diff(w->param->opt_m->data, m, 6), 1e-6);
		cr_assert_leq(max_diff(w->param->opt_v->data, v, 6), 1e-6);
	}
	amp_run_stats st;
	amp_run_stats_get(ctx, &st);
	cr_assert_eq(st.bytes_optimizer, 2 * 6 * sizeof(float));
	amp_ctx_free(ctx);
}

Test(optim, adamw_fp32)
{
	check_adamw("force_fp32", AMP_F32);
}
Test(optim, adamw_amp_fp16_path)
{
	check_adamw("allow_mix_precision", AMP_F16);
}

Test(optim, adamw_first_step_by_hand)
{
	/* Step 1 by hand: mhat = g, vhat = g^2, so w1 = w0 (1 - lr wd) - lr g / (|g| + eps). */
	amp_ctx *ctx = mkctx("precision_mode", "force_fp32", NULL);
	amp_tensor *w = mkparam(ctx);
	amp_optim *o;
	amp_adamw_options ao = {
	    .lr = 0.001f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.01f};
	cr_assert_eq(amp_optim_adamw_new(ctx, &ao, &o), AMP_OK);
	int skipped;
	lin_step(ctx, o, w, AMP_F32, 1.0f, &skipped);
	double wr[6];
	for (int i = 0; i < 6; i++) {
		double g = (double)C0[i];
		wr[i] = (double)W0[i] * (1 - 0.001 * 0.01) - 0.001 * g / (fabs(g) + 1e-8);
	}
	double d = max_diff(w->data, wr, 6);
	cr_log_info("AdamW step 1: max diff %.3g (tol 1e-6)", d);
	cr_assert_leq(d, 1e-6);
	amp_ctx_free(ctx);
}

/* A skipped step leaves weights, moments and the bias-correction count as they were: a run
 * (skip, clean) ends bit-identical to a run (clean). */
static void skip_then_clean(const char *kind, int with_skip, float out[6])
{
	amp_ctx *ctx = mkctx(NULL);
	amp_tensor *w = mkparam(ctx);
	amp_optim *o;
	if (strcmp(kind, "sgd") == 0) {
		amp_sgd_options so = {.lr = 0.1f, .momentum = 0.9f, .weight_decay = 0.01f};
		cr_assert_eq(amp_optim_sgd_new(ctx, &so, &o), AMP_OK);
	} else {
		amp_adamw_options ao = {.lr = 0.01f,
		                        .beta1 = 0.9f,
		                        .beta2 = 0.999f,
		                        .eps = 1e-8f,
		                        .weight_decay = 0.1f};
		cr_assert_eq(amp_optim_adamw_new(ctx, &ao, &o), AMP_OK);
	}
	int skipped;
	if (with_skip) {
		lin_step(ctx, o, w, AMP_F16, 1e6f, &skipped); /* seed Inf in fp16 */
		cr_assert_eq(skipped, 1);
		cr_assert_eq(memcmp(w->data, W0, sizeof W0), 0, "%s: skipped step changed w", kind);
		if (w->param->opt_m) {
			for (int i = 0; i < 6; i++)
				cr_assert_eq(((float *)w->param->opt_m->data)[i], 0.0f);
		}
		for (int i = 0; i < 6; i++)
			cr_assert_eq(((float *)amp_tensor_grad(w)->data)[i], 0.0f, "grad not cleared");
		cr_assert_eq(amp_loss_scale(ctx), 64.0);
	}
	lin_step(ctx, o, w, AMP_F16, 1.0f, &skipped);
	cr_assert_eq(skipped, 0);
	memcpy(out, w->data, sizeof W0);
	amp_ctx_free(ctx);
}

Test(optim, skipped_step_changes_nothing)
{
	const char *kinds[] = {"sgd", "adamw"};
	for (int k = 0; k < 2; k++) {
		float a[6], b[6];
		skip_then_clean(kinds[k], 1, a);
		skip_then_clean(kinds[k], 0, b);
		cr_assert_eq(memcmp(a, b, sizeof a), 0, "%s: skip then clean != clean", kinds[k]);
		cr_assert_neq(memcmp(a, W0, sizeof a), 0);
	}
}

Test(optim, options_validated)
{
	amp_ctx *ctx = mkctx(NULL);
	amp_optim *o = NULL;
	amp_sgd_options bad_sgd[] = {
	    {.lr = -1},
	    {.lr = NAN},
	    {.lr = 0.1f, .momentum = 1},
	    {.lr = 0.1f, .momentum = -0.5f},
	    {.lr = 0.1f, .weight_decay = -1},
	    {.lr = INFINITY},
	    {.lr = 0.1f, .momentum = NAN},
	    {.lr = 0.1f, .weight_decay = NAN},
	    {.lr = 0.1f, .weight_decay = INFINITY},
	};
	for (size_t i = 0; i < sizeof bad_sgd / sizeof bad_sgd[0]; i++)
		cr_assert_eq(amp_optim_sgd_new(ctx, &bad_sgd[i], &o), AMP_EINVAL, "case %zu", i);
	cr_assert_eq(amp_optim_sgd_new(ctx, NULL, &o), AMP_EINVAL);
	/* an lr of 0, as amp_optim_set_lr takes it: a warm-up from 0 */
	cr_assert_eq(amp_optim_sgd_new(ctx, &(amp_sgd_options){.lr = 0}, &o), AMP_OK);
	cr_assert_eq(
	    amp_optim_adamw_new(
	        ctx, &(amp_adamw_options){.lr = 0, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f},
	        &o),
	    AMP_OK);
	amp_adamw_options bad_adam[] = {
	    {.lr = 1e-3f, .beta1 = 1, .beta2 = 0.999f, .eps = 1e-8f},
	    {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 1, .eps = 1e-8f},
	    {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 0},
	    {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = -1},
	    {.lr = 1e-3f, .beta1 = NAN, .beta2 = 0.999f, .eps = 1e-8f},
	    {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = NAN, .eps = 1e-8f},
	    {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = INFINITY},
	    {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = NAN},
	};
	for (size_t i = 0; i < sizeof bad_adam / sizeof bad_adam[0]; i++)
		cr_assert_eq(amp_optim_adamw_new(ctx, &bad_adam[i], &o), AMP_EINVAL, "case %zu", i);
	amp_sgd_options ok = {.lr = 0.1f};
	cr_assert_eq(amp_optim_sgd_new(ctx, &ok, NULL), AMP_EINVAL);
	cr_assert_eq(amp_optim_sgd_new(ctx, &ok, &o), AMP_OK);
	amp_optim_set_lr(o, -1); /* ignored */
	amp_optim_set_lr(NULL, 1);
	amp_ctx_free(ctx);
}

Test(optim, step_state_errors)
{
	amp_ctx *ctx = mkctx("precision_mode", "force_fp32", NULL);
	amp_tensor *w = mkparam(ctx);
	amp_optim *o;
	amp_sgd_options so = {.lr = 0.1f, .momentum = 0.9f};
	cr_assert_eq(amp_optim_sgd_new(ctx, &so, &o), AMP_OK);
	int skipped = 7;
	cr_assert_eq(amp_optim_step(NULL, &skipped), AMP_EINVAL);
	cr_assert_eq(amp_optim_step(o, &skipped), AMP_ESTATE);
	cr_assert_eq(skipped, 0);
	/* Twice in one step would update twice and count the scaler twice. */
	int skip2;
	lin_step(ctx, o, w, AMP_F32, 1.0f, &skip2);
	cr_assert_eq(amp_step_begin(ctx), AMP_OK);
	cr_assert_eq(amp_optim_step(o, NULL), AMP_OK);
	cr_assert_eq(amp_optim_step(o, NULL), AMP_ESTATE, "second optimizer step accepted");
	cr_assert_eq(amp_step_end(ctx), AMP_OK);
	amp_ctx_free(ctx);
}

Test(optim, set_lr)
{
	amp_ctx *ctx = mkctx("precision_mode", "force_fp32", NULL);
	amp_tensor *w = mkparam(ctx);
	amp_optim *o;
	amp_sgd_options so = {.lr = 0.1f};
	cr_assert_eq(amp_optim_sgd_new(ctx, &so, &o), AMP_OK);
	amp_optim_set_lr(o, 0.5f);
	amp_optim_set_lr(o, NAN);      /* ignored */
	amp_optim_set_lr(o, INFINITY); /* ignored */
	int skipped;
	lin_step(ctx, o, w, AMP_F32, 1.0f, &skipped);
	for (int i = 0; i < 6; i++)
		cr_assert_float_eq(((float *)w->data)[i], W0[i] - 0.5f * C0[i], 1e-6f);
	/* 0 is a rate (a warm-up starts there): the next step leaves the weights alone */
	float before[6];
	memcpy(before, w->data, sizeof before);
	amp_optim_set_lr(o, 0);
	lin_step(ctx, o, w, AMP_F32, 1.0f, &skipped);
	cr_assert_eq(memcmp(before, w->data, sizeof before), 0, "lr 0 took a step");
	amp_ctx_free(ctx);
}

/* Two optimizers on one context: the parameters hold one set of moments, so the one that
 * takes over from the other starts afresh (zero moments, its first update), as a new one
 * would; before, SGD with momentum after AdamW stepped by 0.1 x (0.9 x Adam's m + g). */
Test(optim, second_optimizer_starts_afresh)
{
	amp_ctx *ctx = mkctx("precision_mode", "force_fp32", NULL);
	amp_tensor *w = mkparam(ctx);
	amp_optim *adam, *sgd;
	amp_adamw_options ao = {.lr = 0.01f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f};
	amp_sgd_options so = {.lr = 0.1f, .momentum = 0.9f};
	cr_assert_eq(amp_optim_adamw_new(ctx, &ao, &adam), AMP_OK);
	cr_assert_eq(amp_optim_sgd_new(ctx, &so, &sgd), AMP_OK);
	int skipped;
	for (int i = 0; i < 3; i++)
		lin_step(ctx, adam, w, AMP_F32, 1.0f, &skipped);
	float before[6];
	memcpy(before, w->data, sizeof before);
	lin_step(ctx, sgd, w, AMP_F32, 1.0f, &skipped);
	for (int i = 0; i < 6; i++) /* a fresh momentum: the plain step lr * g */
		cr_assert_float_eq(((float *)w->data)[i], before[i] - 0.1f * C0[i], 1e-6f, "%d", i);
	/* back to AdamW: its first update again, |step| = lr for every element (m/sqrt(v) = 1) */
	memcpy(before, w->data, sizeof before);
	lin_step(ctx, adam, w, AMP_F32, 1.0f, &skipped);
	for (int i = 0; i < 6; i++)
		if (C0[i] != 0)
			cr_assert_float_eq(fabsf(((float *)w->data)[i] - before[i]), 0.01f, 1e-5f, "%d", i);
	amp_ctx_free(ctx);
}

/* After an update a master gradient is zero in meaning, and the next step's first gradient is
 * written over it: a parameter the next step's tape does not reach is updated with zeros (its
 * weight unchanged under plain SGD), one it reaches gets exactly that step's gradient (not the
 * sum with the last one), and the accessor shows both. */
Test(optim, gradients_start_from_zero_each_step)
{
	amp_ctx *ctx = mkctx(NULL);
	amp_tensor *w = mkparam(ctx), *v;
	cr_assert_eq(amp_param_new(ctx, "v", amp_shape1(6), AMP_INIT_ZEROS, 0, &v), AMP_OK);
	cr_assert_eq(amp_param_load(ctx, v, W0), AMP_OK);
	amp_sgd_options so = {.lr = 0.5f};
	amp_optim *o;
	cr_assert_eq(amp_optim_sgd_new(ctx, &so, &o), AMP_OK);
	int skipped;
	for (int step = 0; step < 2; step++) { /* both reached: gradients C0 each */
		amp_tensor *c, *y, *z, *s;
		cr_assert_eq(amp_step_begin(ctx), AMP_OK);
		cr_assert_eq(amp_tensor_from_f32(ctx, C0, amp_shape1(6), AMP_F32, &c), AMP_OK);
		cr_assert_eq(amp_mul(ctx, "mw", c, w, &y), AMP_OK, "%s", amp_ctx_error(ctx));
		cr_assert_eq(amp_mul(ctx, "mv", c, v, &z), AMP_OK, "%s", amp_ctx_error(ctx));
		cr_assert_eq(amp_add(ctx, "add", y, z, &s), AMP_OK, "%s", amp_ctx_error(ctx));
		float seed[6];
		for (int i = 0; i < 6; i++)
			seed[i] = (float)ctx->step_scale;
		cr_assert_eq(amp_backward_seeded(ctx, s, seed), AMP_OK, "%s", amp_ctx_error(ctx));
		for (int i = 0; i < 6; i++)
			cr_assert_eq(((float *)amp_tensor_grad(v)->data)[i], C0[i] * seed[i],
			             "step %d: dv[%d] is this step's alone", step, i);
		cr_assert_eq(amp_optim_step(o, &skipped), AMP_OK, "%s", amp_ctx_error(ctx));
		cr_assert_eq(amp_step_end(ctx), AMP_OK);
	}
	float vbefore[6];
	memcpy(vbefore, amp_tensor_data(v), sizeof vbefore);
	lin_step(ctx, o, w, AMP_F32, 1.0f, &skipped); /* v not reached */
	cr_assert_eq(skipped, 0);
	cr_assert_eq(memcmp(amp_tensor_data(v), vbefore, sizeof vbefore), 0,
	             "an unreached parameter moved: its last gradient was used again");
	for (int i = 0; i < 6; i++)
		cr_assert_eq(((float *)amp_tensor_grad(v)->data)[i], 0.0f);
	amp_ctx_free(ctx);
}

/* A master's first gradient of a step brings its NaN/Inf count along (widened from fp16); a
 * second contribution (here the second micro-batch's) voids that count, so an overflow in
 * either one skips the step, whichever reaches the master first. */
Test(scaler, overflow_in_a_second_contribution_skips)
{
	static const float xs[2][2] = {{1.0f, 1e6f}, {1e6f, 1.0f}};
	for (int order = 0; order < 2; order++) {
		amp_ctx *ctx = mkctx("gradient_accumulation_steps", "2", NULL);
		amp_tensor *w;
		const float w0 = 0.5f;
		cr_assert_eq(amp_param_new(ctx, "w", amp_shape1(1), AMP_INIT_ZEROS, 0, &w), AMP_OK);
		cr_assert_eq(amp_param_load(ctx, w, &w0), AMP_OK);
		amp_sgd_options so = {.lr = 0.001f};
		amp_optim *o;
		cr_assert_eq(amp_optim_sgd_new(ctx, &so, &o), AMP_OK);
		cr_assert_eq(amp_step_begin(ctx), AMP_OK);
		for (int mb = 0; mb < 2; mb++) {
			amp_tensor *x, *y;
			cr_assert_eq(amp_micro_batch_begin(ctx), AMP_OK, "%s", amp_ctx_error(ctx));
			cr_assert_eq(amp_tensor_from_f32(ctx, &xs[order][mb], amp_shape1(1), AMP_F16, &x),
			             AMP_OK);
			cr_assert_eq(amp_mul(ctx, "mul", x, w, &y), AMP_OK, "%s", amp_ctx_error(ctx));
			cr_assert_eq(amp_backward(ctx, y), AMP_OK, "%s", amp_ctx_error(ctx));
		}
		int skipped = -1;
		cr_assert_eq(amp_optim_step(o, &skipped), AMP_OK, "%s", amp_ctx_error(ctx));
		cr_assert_eq(skipped, 1, "order %d: 1e6 * scale overflows fp16", order);
		cr_assert_eq(((float *)amp_tensor_data(w))[0], w0);
		cr_assert_eq(amp_step_end(ctx), AMP_OK);
		amp_ctx_free(ctx);
	}
}

/* ---- master gradients kept in half ------------------------------------------------------- */

#define KEPT_N 5000 /* more than one of the update's blocks, and a partial one */

/* One step of y = c * w with c in half dtype dt (w through its working copy in dt), seeded with
 * scale * gfac[i]; read: the gradient is read through the accessor before the update (so the
 * master takes it in FP32 at once), else the master keeps the half one for the update to widen
 * if it is the first (fresh: the last step updated); no_optim: the step ends without an
 * update. */
static void kept_step(amp_ctx *ctx, amp_optim *o, amp_tensor *w, amp_dtype dt, const float *c0,
                      float gfac, int read, int fresh, int no_optim, int *skipped)
{
	amp_tensor *c, *y;
	static float seed[KEPT_N];
	cr_assert_eq(amp_step_begin(ctx), AMP_OK);
	cr_assert_eq(amp_tensor_from_f32(ctx, c0, amp_shape1(KEPT_N), dt, &c), AMP_OK);
	cr_assert_eq(amp_mul(ctx, "mul", c, w, &y), AMP_OK, "%s", amp_ctx_error(ctx));
	for (int i = 0; i < KEPT_N; i++)
		seed[i] = (float)ctx->step_scale * gfac * (float)(1 + i % 7);
	cr_assert_eq(amp_backward_seeded(ctx, y, seed), AMP_OK, "%s", amp_ctx_error(ctx));
	if (read)
		cr_assert_not_null(amp_tensor_grad(w));
	else if (fresh)
		cr_assert_not_null(w->param->grad_kept, "the step's first half gradient is kept");
	else
		cr_assert_null(w->param->grad_kept, "a gradient added to the last step's is not");
	*skipped = 0;
	if (!no_optim)
		cr_assert_eq(amp_optim_step(o, skipped), AMP_OK, "%s", amp_ctx_error(ctx));
	cr_assert_eq(amp_step_end(ctx), AMP_OK);
	cr_assert_null(w->param->grad_kept, "nothing kept past the step");
}

/* The update that widens a kept half gradient block by block gives the bits of the one that
 * reads it widened first, in every case the optimizer has: SGD with momentum and AdamW, fp16
 * and bf16, a scale to unscale (dynamic fp16) and none (bf16), an overflowed step skipped, and
 * a step with no update whose gradient the next step's is added to. */
Test(optim, kept_half_gradients_update_as_widened_ones)
{
	static float c0[KEPT_N], w0[KEPT_N], got[2][KEPT_N];
	uint64_t s = 7;
	for (int i = 0; i < KEPT_N; i++) {
		c0[i] = amp_rng_uniform(&s) - 0.5f;
		w0[i] = amp_rng_uniform(&s) - 0.5f;
	}
	const char *modes[] = {"allow_mix_precision_fp16", "allow_mix_precision_bf16"};
	for (int m = 0; m < 2; m++)
		for (int adam = 0; adam < 2; adam++) {
			int skips = 0;
			for (int read = 0; read < 2; read++) {
				amp_ctx *ctx = mkctx("precision_mode", modes[m], NULL);
				amp_tensor *w;
				cr_assert_eq(amp_param_new(ctx, "w", amp_shape1(KEPT_N), AMP_INIT_ZEROS, 0,
				                           &w),
				             AMP_OK);
				cr_assert_eq(amp_param_load(ctx, w, w0), AMP_OK);
				amp_optim *o;
				amp_sgd_options so = {.lr = 0.05f, .momentum = 0.9f, .weight_decay = 1e-3f};
				amp_adamw_options ao = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f,
				                        .eps = 1e-8f, .weight_decay = 1e-2f};
				cr_assert_eq(adam ? amp_optim_adamw_new(ctx, &ao, &o)
				                  : amp_optim_sgd_new(ctx, &so, &o),
				             AMP_OK);
				/* step 2: 1e4 * scale overflows fp16 (bf16 takes it); step 3 has no
				 * update, its gradient adds to step 4's */
				const float gfac[6] = {1.0f, 0.5f, 1e4f, 2.0f, 1.0f, 0.25f};
				skips = 0;
				for (int step = 0; step < 6; step++) {
					int skipped;
					kept_step(ctx, o, w, m ? AMP_BF16 : AMP_F16, c0, gfac[step], read,
					          step != 4, step == 3, &skipped);
					skips += skipped;
				}
				memcpy(got[read], amp_tensor_data(w), sizeof got[read]);
				amp_ctx_free(ctx);
			}
			cr_log_info("%s %s: %d skipped", modes[m], adam ? "adamw" : "sgd", skips);
			cr_assert_eq(skips, m == 0 ? 1 : 0, "%s: the overflow skips fp16 only", modes[m]);
			for (int i = 0; i < KEPT_N; i++)
				cr_assert_eq(got[0][i], got[1][i], "%s %s: w[%d] %a vs %a", modes[m],
				             adam ? "adamw" : "sgd", i, (double)got[0][i],
				             (double)got[1][i]);
			cr_assert_neq(memcmp(got[0], w0, sizeof w0), 0, "trained");
		}
}

/* A data-parallel backend hands the optimizer each parameter's sum where it lies, in its
 * payload dtype (amp_param_grad_set): the update reads it there and gives the bits of the one
 * that reads the same values written into the FP32 master gradient; a NaN count the backend
 * gives is taken as it is, and one it does not give is counted; the backend reads the
 * gradient where it was set (amp_param_grad_data). */
Test(optim, gradient_set_in_place_updates_as_a_written_one)
{
	static float w0[KEPT_N], vals[KEPT_N], got[2][KEPT_N];
	static uint16_t half[KEPT_N];
	uint64_t s = 11;
	for (int i = 0; i < KEPT_N; i++)
		w0[i] = amp_rng_uniform(&s) - 0.5f;
	const amp_dtype dts[] = {AMP_F32, AMP_F16, AMP_BF16};
	for (int d = 0; d < 3; d++) {
		int skips[2] = {0, 0};
		for (int set = 0; set < 2; set++) {
			uint64_t r = 99; /* the same sums on both paths */
			amp_ctx *ctx = mkctx("precision_mode", "allow_mix_precision_fp16", NULL);
			amp_tensor *w;
			cr_assert_eq(amp_param_new(ctx, "w", amp_shape1(KEPT_N), AMP_INIT_ZEROS, 0, &w),
			             AMP_OK);
			cr_assert_eq(amp_param_load(ctx, w, w0), AMP_OK);
			amp_optim *o;
			amp_sgd_options so = {.lr = 0.05f, .momentum = 0.9f};
			cr_assert_eq(amp_optim_sgd_new(ctx, &so, &o), AMP_OK);
			for (int step = 0; step < 6; step++) {
				/* the sums: scaled gradients, rounded to the payload dtype */
				for (int i = 0; i < KEPT_N; i++)
					vals[i] = (float)amp_loss_scale(ctx) * (amp_rng_uniform(&r) - 0.5f);
				/* NaN at steps 1 and 2; step 3's only on the written path, where the
				 * set path says 1 NaN of finite values (the optimizer takes the count) */
				if (step == 1 || step == 2 || (step == 3 && !set))
					vals[KEPT_N - 1] = NAN;
				const void *payload = vals;
				if (dts[d] != AMP_F32) {
					amp_cvt(dts[d], half, AMP_F32, vals, KEPT_N);
					amp_cvt(AMP_F32, vals, dts[d], half, KEPT_N);
					payload = half;
				}
				int skipped = 0;
				cr_assert_eq(amp_step_begin(ctx), AMP_OK);
				if (set) {
					/* counted by the optimizer (-1) or given */
					static const int64_t counts[6] = {0, -1, 1, 1, 0, -1};
					int64_t count = counts[step];
					cr_assert_eq(amp_param_grad_set(ctx, 0, dts[d], payload, count), AMP_OK,
					             "%s", amp_ctx_error(ctx));
					amp_dtype got_dt;
					int64_t bad;
					cr_assert_eq(amp_param_grad_data(ctx, 0, &got_dt, &bad), payload,
					             "read where it was set");
					cr_assert_eq(got_dt, dts[d]);
				} else {
					amp_tensor *g = amp_tensor_grad(w);
					if (!g) { /* the first step: a gradient made by backward */
						amp_tensor *c, *y;
						cr_assert_eq(amp_tensor_from_f32(ctx, w0, amp_shape1(KEPT_N), AMP_F32,
						                                 &c),
						             AMP_OK);
						cr_assert_eq(amp_mul(ctx, "mul", c, w, &y), AMP_OK);
						cr_assert_eq(amp_backward_seeded(ctx, y, vals), AMP_OK);
						g = amp_tensor_grad(w);
					}
					memcpy(amp_tensor_data(g), vals, sizeof vals);
				}
				cr_assert_eq(amp_optim_step(o, &skipped), AMP_OK, "%s", amp_ctx_error(ctx));
				cr_assert_eq(amp_step_end(ctx), AMP_OK);
				skips[set] += skipped;
			}
			memcpy(got[set], amp_tensor_data(w), sizeof got[set]);
			amp_ctx_free(ctx);
		}
		cr_assert_eq(skips[0], 3, "%s: the NaNs skip their steps", amp_dtype_name(dts[d]));
		cr_assert_eq(skips[1], 3, "%s: the counts given and counted skip", amp_dtype_name(dts[d]));
		for (int i = 0; i < KEPT_N; i++)
			cr_assert_eq(got[0][i], got[1][i], "%s: w[%d] %a vs %a", amp_dtype_name(dts[d]), i,
			             (double)got[0][i], (double)got[1][i]);
		cr_assert_neq(memcmp(got[1], w0, sizeof w0), 0, "trained");
	}
}

/* test_train.c — the training features around the optimizer step: gradient clipping by the
 * global norm of the unscaled gradients, gradient accumulation over micro-batches (one scale,
 * one overflow check and one scaler decision per optimizer step), checkpoints (a resumed run
 * bit-identical with one that never stopped; damaged, truncated, newer and mismatched files
 * refused), memory_optimize (bit-identical results, lower peak, the unoptimized figure equal
 * to a run without it) and memory_limit (the refused step names the op and the bytes).
 *
 * Gradients with exact values come from loss = sum(w * c) on FP32 tensors: the gradient of w
 * is c times the loss scale, exactly, so every expected update is computed in the test.
 */
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <dirent.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "amp/amp_dist.h"
#include "alloc.h"
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

static char tmpdir[64];

static void mktmp(void)
{
	snprintf(tmpdir, sizeof tmpdir, "/tmp/test_train.XXXXXX");
	cr_assert_not_null(mkdtemp(tmpdir));
}

static void rmtmp(void)
{
	DIR *d = opendir(tmpdir);
	if (!d)
		return;
	struct dirent *e;
	char p[512];
	while ((e = readdir(d)))
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
			snprintf(p, sizeof p, "%s/%s", tmpdir, e->d_name);
			unlink(p);
		}
	closedir(d);
	rmdir(tmpdir);
}

static const char *in_tmp(const char *name)
{
	static char p[512];
	snprintf(p, sizeof p, "%s/%s", tmpdir, name);
	return p;
}

/* loss = sum(w * c) for a parameter w and an fp32 constant c of n values; backward run. */
static void linear_loss(amp_ctx *ctx, amp_tensor *w, const float *c, int n)
{
	amp_tensor *ct, *y, *loss;
	cr_assert_eq(amp_tensor_from_f32(ctx, c, amp_shape1(n), AMP_F32, &ct), AMP_OK);
	cr_assert_eq(amp_mul(ctx, "wc", w, ct, &y), AMP_OK, "%s", amp_ctx_error(ctx));
	cr_assert_eq(amp_sum(ctx, "loss", y, &loss), AMP_OK);
	cr_assert_eq(amp_backward(ctx, loss), AMP_OK, "%s", amp_ctx_error(ctx));
}

/* ---- configuration keys ------------------------------------------------------------------ */

Test(train_config, keys_parse_and_read_back)
{
	amp_ctx *ctx = mkctx("gradient_clipping", "1.5", "gradient_accumulation_steps", "4",
	                     "memory_optimize", "on", "memory_limit", "64k", NULL);
	cr_assert_str_eq(amp_config_get(ctx, "gradient_clipping"), "1.5");
	cr_assert_str_eq(amp_config_get(ctx, "gradient_accumulation_steps"), "4");
	cr_assert_str_eq(amp_config_get(ctx, "memory_optimize"), "on");
	cr_assert_str_eq(amp_config_get(ctx, "memory_limit"), "65536");
	cr_assert_eq(amp_config_set(ctx, "memory_limit", "2M"), AMP_OK);
	cr_assert_str_eq(amp_config_get(ctx, "memory_limit"), "2097152");
	cr_assert_eq(amp_config_set(ctx, "memory_limit", "1g"), AMP_OK);
	cr_assert_str_eq(amp_config_get(ctx, "memory_limit"), "1073741824");
	cr_assert_eq(amp_config_set(ctx, "memory_optimize", "off"), AMP_OK);
	cr_assert_str_eq(amp_config_get(ctx, "memory_optimize"), "off");
	amp_ctx_free(ctx);
	ctx = mkctx(NULL);
	cr_assert_str_eq(amp_config_get(ctx, "gradient_clipping"), "0");
	cr_assert_str_eq(amp_config_get(ctx, "gradient_accumulation_steps"), "1");
	cr_assert_str_eq(amp_config_get(ctx, "memory_optimize"), "off");
	cr_assert_str_eq(amp_config_get(ctx, "memory_limit"), "0");
	amp_ctx_free(ctx);
}

Test(train_config, bad_values_refused)
{
	amp_ctx *ctx = mkctx(NULL);
	static const char *bad[][2] = {
	    {"gradient_clipping", "-1"},           {"gradient_clipping", "x"},
	    {"gradient_accumulation_steps", "0"},  {"gradient_accumulation_steps", "1.5"},
	    {"gradient_accumulation_steps", "1e9"}, {"memory_optimize", "yes"},
	    {"memory_limit", "10x"},               {"memory_limit", "-5"},
	    {"memory_limit", "99999999999999999999"},
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		cr_assert_eq(amp_config_set(ctx, bad[i][0], bad[i][1]), AMP_ECONFIG, "%s = %s",
		             bad[i][0], bad[i][1]);
		cr_assert(strstr(amp_ctx_error(ctx), bad[i][0]), "message names the key: %s",
		          amp_ctx_error(ctx));
	}
	amp_ctx_free(ctx);
}

Test(train_config, from_environment)
{
	setenv("AMP_GRADIENT_ACCUMULATION_STEPS", "3", 1);
	setenv("AMP_MEMORY_OPTIMIZE", "on", 1);
	amp_ctx *ctx = mkctx(NULL);
	unsetenv("AMP_GRADIENT_ACCUMULATION_STEPS");
	unsetenv("AMP_MEMORY_OPTIMIZE");
	cr_assert_eq(ctx->cfg.accum_steps, 3);
	cr_assert_eq(ctx->cfg.memory_optimize, 1);
	amp_ctx_free(ctx);
}

/* ---- gradient clipping ------------------------------------------------------------------- */

/* One SGD (lr 1) step on loss = sum(w * c) with w = 1, under a static loss scale of 1024. */
static void clip_step(const char *clip, float *w_out, double *norm, int *clipped)
{
	amp_ctx *ctx = mkctx("loss_scale", "1024", "gradient_clipping", clip, NULL);
	amp_tensor *w;
	cr_assert_eq(amp_param_new(ctx, "w", amp_shape1(4), AMP_INIT_ONES, 1, &w), AMP_OK);
	amp_optim *opt;
	amp_sgd_options so = {.lr = 1};
	cr_assert_eq(amp_optim_sgd_new(ctx, &so, &opt), AMP_OK);
	static const float c[4] = {3, 4, 0, 0};
	cr_assert_eq(amp_step_begin(ctx), AMP_OK);
	linear_loss(ctx, w, c, 4);
	cr_assert_float_eq(((float *)w->grad->data)[1], 4096.0f, 0, "scaled gradient");
	int skipped = -1;
	cr_assert_eq(amp_optim_step(opt, &skipped), AMP_OK, "%s", amp_ctx_error(ctx));
	cr_assert_eq(skipped, 0);
	cr_assert_eq(amp_step_end(ctx), AMP_OK);
	memcpy(w_out, w->data, 4 * sizeof(float));
	*norm = amp_grad_norm(ctx);
	*clipped = amp_grad_clipped(ctx);
	amp_run_stats st;
	amp_run_stats_get(ctx, &st);
	cr_assert_eq(st.clipped_steps, *clipped);
	amp_ctx_free(ctx);
}

Test(clipping, norm_of_unscaled_gradients)
{
	float w[4];
	double norm;
	int clipped;
	/* |c| = 5 > 1: the gradient is scaled to norm 1 — of the unscaled gradient (clipping the
	 * scaled one, norm 5120, would leave an update 1024 times smaller). */
	clip_step("1", w, &norm, &clipped);
	cr_assert_eq(norm, 5.0, "norm %.17g", norm);
	cr_assert_eq(clipped, 1);
	float coef = (float)(1.0 / (5.0 + 1e-6));
	cr_assert_eq(w[0], 1.0f - 3.0f * coef, "w0 %.9g", (double)w[0]);
	cr_assert_eq(w[1], 1.0f - 4.0f * coef, "w1 %.9g", (double)w[1]);
	cr_assert_eq(w[2], 1.0f);
	cr_assert_float_eq(w[0], 0.4f, 1e-6);
	cr_assert_float_eq(w[1], 0.2f, 1e-6);
}

Test(clipping, below_threshold_untouched)
{
	float w[4];
	double norm;
	int clipped;
	clip_step("10", w, &norm, &clipped);
	cr_assert_eq(norm, 5.0);
	cr_assert_eq(clipped, 0);
	cr_assert_eq(w[0], -2.0f);
	cr_assert_eq(w[1], -3.0f);
}

Test(clipping, off_takes_no_norm)
{
	float w[4];
	double norm;
	int clipped;
	clip_step("0", w, &norm, &clipped);
	cr_assert(isnan(norm));
	cr_assert_eq(clipped, 0);
	cr_assert_eq(w[1], -3.0f);
}

/* An overflowed step is skipped before any norm: weights and scale as a skipped step leaves
 * them, no norm, not clipped. */
Test(clipping, overflow_skips_cleanly)
{
	amp_ctx *ctx = mkctx("gradient_clipping", "1", NULL);
	amp_tensor *w;
	cr_assert_eq(amp_param_new(ctx, "w", amp_shape1(2), AMP_INIT_ONES, 1, &w), AMP_OK);
	amp_optim *opt;
	amp_sgd_options so = {.lr = 1};
	cr_assert_eq(amp_optim_sgd_new(ctx, &so, &opt), AMP_OK);
	static const float c[2] = {1e38f, 1};
	cr_assert_eq(amp_step_begin(ctx), AMP_OK);
	linear_loss(ctx, w, c, 2); /* 1e38 * 128 = Inf */
	int skipped = 0;
	cr_assert_eq(amp_optim_step(opt, &skipped), AMP_OK);
	cr_assert_eq(skipped, 1);
	cr_assert(isnan(amp_grad_norm(ctx)));
	cr_assert_eq(amp_grad_clipped(ctx), 0);
	cr_assert_eq(((float *)w->data)[0], 1.0f);
	cr_assert_eq(((float *)w->data)[1], 1.0f);
	cr_assert_eq(((float *)amp_tensor_grad(w)->data)[1], 0.0f, "gradients cleared");
	cr_assert_eq(amp_loss_scale(ctx), 64.0);
	cr_assert_eq(amp_step_end(ctx), AMP_OK);
	/* The next, clean step clips again. */
	static const float c2[2] = {30, 40};
	cr_assert_eq(amp_step_begin(ctx), AMP_OK);
	linear_loss(ctx, w, c2, 2);
	cr_assert_eq(amp_optim_step(opt, &skipped), AMP_OK);
	cr_assert_eq(skipped, 0);
	cr_assert_eq(amp_grad_norm(ctx), 50.0);
	cr_assert_eq(amp_grad_clipped(ctx), 1);
	cr_assert_eq(amp_step_end(ctx), AMP_OK);
	amp_ctx_free(ctx);
}

/* ---- gradient accumulation --------------------------------------------------------------- */

/* Two micro-batches with c1 and c2 give the update of one batch with their mean. */
Test(accumulation, equals_the_mean_batch)
{
	static const float c1[4] = {1, 2, 3, 4}, c2[4] = {3, 2, 1, 0}, mean[4] = {2, 2, 2, 2};
	float wa[4], wb[4];
	for (int run = 0; run < 2; run++) {
		amp_ctx *ctx = run ? mkctx("gradient_accumulation_steps", "2", NULL) : mkctx(NULL);
		amp_tensor *w;
		cr_assert_eq(amp_param_new(ctx, "w", amp_shape1(4), AMP_INIT_ONES, 1, &w), AMP_OK);
		amp_optim *opt;
		amp_sgd_options so = {.lr = 0.5f};
		cr_assert_eq(amp_optim_sgd_new(ctx, &so, &opt), AMP_OK);
		cr_assert_eq(amp_step_begin(ctx), AMP_OK);
		if (run) {
			cr_assert_eq(amp_micro_batch_begin(ctx), AMP_OK);
			linear_loss(ctx, w, c1, 4);
			cr_assert_eq(amp_micro_batch_begin(ctx), AMP_OK, "%s", amp_ctx_error(ctx));
			linear_loss(ctx, w, c2, 4);
			cr_assert_float_eq(((float *)w->grad->data)[0], 4 * 128.0f, 0,
			                   "summed, scaled gradients");
			cr_assert_eq(ctx->step_loss, (10.0 + 6.0) / 2, "mean loss %g", ctx->step_loss);
		} else {
			linear_loss(ctx, w, mean, 4);
		}
		int skipped = -1;
		cr_assert_eq(amp_optim_step(opt, &skipped), AMP_OK, "%s", amp_ctx_error(ctx));
		cr_assert_eq(skipped, 0);
		cr_assert_eq(ctx->scaler.clean_steps, 1, "one scaler decision per optimizer step");
		cr_assert_eq(amp_step_end(ctx), AMP_OK);
		memcpy(run ? wb : wa, w->data, sizeof wa);
		amp_ctx_free(ctx);
	}
	cr_assert_eq(memcmp(wa, wb, sizeof wa), 0, "%g %g", (double)wa[0], (double)wb[0]);
	cr_assert_eq(wa[0], 0.0f);
}

/* A micro-batch's activations are released when the next begins: the step never holds more
 * than one micro-batch of them. */
Test(accumulation, micro_batches_release_activations)
{
	amp_ctx *ctx = mkctx("gradient_accumulation_steps", "3", NULL);
	amp_tensor *w;
	cr_assert_eq(amp_param_new(ctx, "w", amp_shape1(1024), AMP_INIT_ONES, 1, &w), AMP_OK);
	amp_optim *opt;
	amp_sgd_options so = {.lr = 0.1f};
	cr_assert_eq(amp_optim_sgd_new(ctx, &so, &opt), AMP_OK);
	float *c = calloc(1024, sizeof(float));
	cr_assert_eq(amp_step_begin(ctx), AMP_OK);
	uint64_t act[3];
	for (int m = 0; m < 3; m++) {
		cr_assert_eq(amp_micro_batch_begin(ctx), AMP_OK, "%s", amp_ctx_error(ctx));
		linear_loss(ctx, w, c, 1024);
		amp_run_stats st;
		amp_run_stats_get(ctx, &st);
		act[m] = st.bytes_activations;
	}
	cr_assert_gt(act[0], 4096);
	cr_assert_eq(act[1], act[0]);
	cr_assert_eq(act[2], act[0]);
	cr_assert_eq(amp_optim_step(opt, NULL), AMP_OK, "%s", amp_ctx_error(ctx));
	cr_assert_eq(amp_step_end(ctx), AMP_OK);
	free(c);
	amp_ctx_free(ctx);
}

Test(accumulation, out_of_order_calls_refused)
{
	amp_ctx *ctx = mkctx("gradient_accumulation_steps", "2", NULL);
	amp_tensor *w, *ct, *y, *loss;
	cr_assert_eq(amp_param_new(ctx, "w", amp_shape1(2), AMP_INIT_ONES, 1, &w), AMP_OK);
	amp_optim *opt;
	amp_sgd_options so = {.lr = 0.1f};
	cr_assert_eq(amp_optim_sgd_new(ctx, &so, &opt), AMP_OK);
	static const float c[2] = {1, 2};
	cr_assert_eq(amp_micro_batch_begin(ctx), AMP_ESTATE, "no step begun");
	cr_assert_eq(amp_step_begin(ctx), AMP_OK);
	linear_loss(ctx, w, c, 2);
	/* a second backward in the same micro-batch */
	cr_assert_eq(amp_tensor_from_f32(ctx, c, amp_shape1(2), AMP_F32, &ct), AMP_OK);
	cr_assert_eq(amp_mul(ctx, "wc", w, ct, &y), AMP_OK);
	cr_assert_eq(amp_sum(ctx, "loss", y, &loss), AMP_OK);
	cr_assert_eq(amp_backward(ctx, loss), AMP_ESTATE);
	cr_assert(strstr(amp_ctx_error(ctx), "amp_micro_batch_begin"), "%s", amp_ctx_error(ctx));
	/* the optimizer before the window is full */
	cr_assert_eq(amp_optim_step(opt, NULL), AMP_ESTATE);
	cr_assert(strstr(amp_ctx_error(ctx), "ran 1 of its 2 micro-batches"), "%s",
	          amp_ctx_error(ctx));
	cr_assert_eq(amp_micro_batch_begin(ctx), AMP_OK);
	linear_loss(ctx, w, c, 2);
	cr_assert_eq(amp_micro_batch_begin(ctx), AMP_ESTATE, "a third micro-batch");
	cr_assert_eq(amp_optim_step(opt, NULL), AMP_OK, "%s", amp_ctx_error(ctx));
	cr_assert_eq(amp_micro_batch_begin(ctx), AMP_ESTATE, "after the optimizer");
	cr_assert_eq(amp_step_end(ctx), AMP_OK);
	amp_ctx_free(ctx);
}

/* An overflow in one micro-batch skips the whole optimizer step, with one backoff; the scale
 * used by every micro-batch of the step is the same. */
Test(accumulation, one_overflow_check_per_step)
{
	amp_ctx *ctx = mkctx("gradient_accumulation_steps", "2", NULL);
	amp_tensor *w;
	cr_assert_eq(amp_param_new(ctx, "w", amp_shape1(2), AMP_INIT_ONES, 1, &w), AMP_OK);
	amp_optim *opt;
	amp_sgd_options so = {.lr = 0.1f};
	cr_assert_eq(amp_optim_sgd_new(ctx, &so, &opt), AMP_OK);
	static const float big[2] = {1e38f, 0}, c[2] = {1, 1};
	cr_assert_eq(amp_step_begin(ctx), AMP_OK);
	linear_loss(ctx, w, big, 2);
	cr_assert_eq(ctx->step_scale, 128.0);
	cr_assert_eq(amp_micro_batch_begin(ctx), AMP_OK);
	linear_loss(ctx, w, c, 2);
	cr_assert_eq(ctx->step_scale, 128.0);
	int skipped = 0;
	cr_assert_eq(amp_optim_step(opt, &skipped), AMP_OK);
	cr_assert_eq(skipped, 1);
	cr_assert_eq(amp_loss_scale(ctx), 64.0, "one backoff, not two");
	cr_assert_eq(((float *)w->data)[1], 1.0f);
	cr_assert_eq(amp_step_end(ctx), AMP_OK);
	amp_run_stats st;
	amp_run_stats_get(ctx, &st);
	cr_assert_eq(st.skipped_steps, 1);
	cr_assert_eq(st.overflow_steps, 1);
	amp_ctx_free(ctx);
}

/* ---- a small network for checkpoints and memory_optimize ---------------------------------- */

typedef struct net {
	amp_ctx *ctx;
	amp_tensor *w1, *b1, *w2, *b2;
	amp_optim *opt;
} net;

#define NB 16 /* batch */
#define NI 12 /* inputs */
#define NH 32 /* hidden */
#define NC 5  /* classes */

static void net_new(net *n, const char *mode, const char *extra_key, const char *extra_val)
{
	n->ctx = mkctx("precision_mode", mode, "loss_scale_growth_interval", "3",
	               "gradient_clipping", "2", NULL);
	if (extra_key)
		cr_assert_eq(amp_config_set(n->ctx, extra_key, extra_val), AMP_OK);
	cr_assert_eq(amp_param_new(n->ctx, "fc1.w", amp_shape2(NH, NI), AMP_INIT_KAIMING, 1, &n->w1),
	             AMP_OK);
	cr_assert_eq(amp_param_new(n->ctx, "fc1.b", amp_shape1(NH), AMP_INIT_ZEROS, 1, &n->b1),
	             AMP_OK);
	cr_assert_eq(amp_param_new(n->ctx, "fc2.w", amp_shape2(NC, NH), AMP_INIT_KAIMING, 1, &n->w2),
	             AMP_OK);
	cr_assert_eq(amp_param_new(n->ctx, "fc2.b", amp_shape1(NC), AMP_INIT_ZEROS, 1, &n->b2),
	             AMP_OK);
	amp_adamw_options ao = {.lr = 3e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,
	                        .weight_decay = 0.01f};
	cr_assert_eq(amp_optim_adamw_new(n->ctx, &ao, &n->opt), AMP_OK);
}

/* Begins a step and runs its forward pass on data that depends only on the step index. */
static amp_tensor *net_forward(net *n)
{
	amp_ctx *ctx = n->ctx;
	cr_assert_eq(amp_step_begin(ctx), AMP_OK, "%s", amp_ctx_error(ctx));
	int64_t s = amp_step_index(ctx);
	float x[NB * NI];
	int32_t t[NB];
	for (int i = 0; i < NB * NI; i++)
		x[i] = (float)sin(0.37 * (double)i + 1.3 * (double)s);
	for (int i = 0; i < NB; i++)
		t[i] = (int32_t)((i + s) % NC);
	amp_tensor *xt, *tt, *h, *a, *d, *lo, *loss;
	cr_assert_eq(amp_tensor_from_f32(ctx, x, amp_shape2(NB, NI), AMP_F32, &xt), AMP_OK);
	cr_assert_eq(amp_tensor_from_i32(ctx, t, amp_shape1(NB), &tt), AMP_OK);
	cr_assert_eq(amp_linear(ctx, "fc1", xt, n->w1, n->b1, &h), AMP_OK, "%s", amp_ctx_error(ctx));
	cr_assert_eq(amp_gelu(ctx, "act", h, &a), AMP_OK);
	cr_assert_eq(amp_dropout(ctx, "drop", a, 0.2f, &d), AMP_OK);
	cr_assert_eq(amp_linear(ctx, "fc2", d, n->w2, n->b2, &lo), AMP_OK);
	cr_assert_eq(amp_cross_entropy(ctx, "ce", lo, tt, &loss), AMP_OK);
	return loss;
}

/* One training step (net_forward, backward, update); returns the loss. */
static double net_step(net *n)
{
	amp_ctx *ctx = n->ctx;
	cr_assert_eq(amp_backward(ctx, net_forward(n)), AMP_OK, "%s", amp_ctx_error(ctx));
	cr_assert_eq(amp_optim_step(n->opt, NULL), AMP_OK, "%s", amp_ctx_error(ctx));
	double l = ctx->step_loss;
	cr_assert_eq(amp_step_end(ctx), AMP_OK);
	return l;
}

/* The masters, concatenated. */
static void net_weights(net *n, float *out)
{
	amp_tensor *ps[4] = {n->w1, n->b1, n->w2, n->b2};
	for (int i = 0; i < 4; i++) {
		memcpy(out, ps[i]->data, (size_t)ps[i]->numel * sizeof(float));
		out += ps[i]->numel;
	}
}

#define NW (NH * NI + NH + NC * NH + NC)
#define STEPS 12
#define STOP 5

/* ---- checkpoints ------------------------------------------------------------------------- */

/* In a fresh temporary folder: ck (cap bytes) = the path of file name there, and n a new
 * allow_mix_precision net that has run STOP steps. */
static void net_at_stop(net *n, char *ck, size_t cap, const char *name)
{
	mktmp();
	snprintf(ck, cap, "%s", in_tmp(name));
	net_new(n, "allow_mix_precision", NULL, NULL);
	for (int s = 0; s < STOP; s++)
		net_step(n);
}

static void resume_bit_identical(const char *mode)
{
	mktmp();
	const char *ck = in_tmp("run.ckpt");
	double la[STEPS], lb[STEPS];
	float wa[NW], wb[NW];
	net n;
	net_new(&n, mode, NULL, NULL);
	for (int s = 0; s < STEPS; s++)
		la[s] = net_step(&n);
	net_weights(&n, wa);
	double scale_a = amp_loss_scale(n.ctx);
	amp_ctx_free(n.ctx);

	net_new(&n, mode, NULL, NULL);
	for (int s = 0; s < STOP; s++)
		lb[s] = net_step(&n);
	cr_assert_eq(amp_checkpoint_save(n.ctx, ck), AMP_OK, "%s", amp_ctx_error(n.ctx));
	amp_ctx_free(n.ctx);

	/* A new process, as it were: same program, same configuration, fresh initialisation
	 * (which consumes the RNG differently than the run did by step 5) — then the load. */
	net_new(&n, mode, NULL, NULL);
	cr_assert_eq(amp_checkpoint_load(n.ctx, ck), AMP_OK, "%s", amp_ctx_error(n.ctx));
	cr_assert_eq(amp_step_index(n.ctx), STOP - 1);
	for (int s = STOP; s < STEPS; s++)
		lb[s] = net_step(&n);
	net_weights(&n, wb);
	for (int s = 0; s < STEPS; s++)
		cr_assert_eq(memcmp(&la[s], &lb[s], sizeof la[s]), 0, "%s step %d: %.17g vs %.17g",
		             mode, s, la[s], lb[s]);
	cr_assert_eq(memcmp(wa, wb, sizeof wa), 0, "%s: final weights differ", mode);
	cr_assert_eq(amp_loss_scale(n.ctx), scale_a);
	amp_run_stats st;
	amp_run_stats_get(n.ctx, &st);
	cr_assert_eq(st.steps, STEPS);
	amp_ctx_free(n.ctx);
	rmtmp();
}

Test(checkpoint, resume_bit_identical_fp16) { resume_bit_identical("allow_mix_precision"); }
Test(checkpoint, resume_bit_identical_bf16) { resume_bit_identical("allow_mix_precision_bf16"); }
Test(checkpoint, resume_bit_identical_fp32) { resume_bit_identical("force_fp32"); }

/* The scaler's state is in the file: a run whose scale grew resumes at the grown scale with
 * its clean-step count. */
Test(checkpoint, scaler_state_restored)
{
	mktmp();
	net n;
	net_new(&n, "allow_mix_precision", NULL, NULL);
	for (int s = 0; s < 4; s++)
		net_step(&n);
	amp_scaler before = n.ctx->scaler;
	uint64_t rng = n.ctx->rng_state;
	cr_assert_eq(amp_checkpoint_save(n.ctx, in_tmp("s.ckpt")), AMP_OK);
	amp_ctx_free(n.ctx);
	net_new(&n, "allow_mix_precision", NULL, NULL);
	cr_assert_eq(amp_checkpoint_load(n.ctx, in_tmp("s.ckpt")), AMP_OK, "%s", amp_ctx_error(n.ctx));
	cr_assert_eq(n.ctx->scaler.scale, before.scale);
	cr_assert_gt(before.scale, 128.0, "the scale grew (interval 3)");
	cr_assert_eq(n.ctx->scaler.clean_steps, before.clean_steps);
	cr_assert_eq(n.ctx->rng_state, rng);
	amp_ctx_free(n.ctx);
	rmtmp();
}

/* A label of any length round-trips (labels are copied whole, the file holds its length). */
Test(checkpoint, long_label_round_trip)
{
	mktmp();
	static char label[5000];
	memset(label, 'w', sizeof label - 1);
	amp_ctx *a, *b;
	amp_tensor *wa, *wb;
	cr_assert_eq(amp_ctx_new(NULL, &a, NULL, 0), AMP_OK);
	cr_assert_eq(amp_ctx_new(NULL, &b, NULL, 0), AMP_OK);
	cr_assert_eq(amp_param_new(a, label, amp_shape1(2), AMP_INIT_NORMAL, 1, &wa), AMP_OK);
	cr_assert_eq(amp_param_new(b, label, amp_shape1(2), AMP_INIT_ZEROS, 0, &wb), AMP_OK);
	cr_assert_eq(amp_checkpoint_save(a, in_tmp("l.ckpt")), AMP_OK, "%s", amp_ctx_error(a));
	cr_assert_eq(amp_checkpoint_load(b, in_tmp("l.ckpt")), AMP_OK, "%s", amp_ctx_error(b));
	cr_assert_eq(memcmp(amp_tensor_data(wa), amp_tensor_data(wb), 2 * sizeof(float)), 0);
	amp_ctx_free(a);
	amp_ctx_free(b);
	rmtmp();
}

/* Save writes a temporary file and renames it: afterwards only the checkpoint is there, and
 * saving again replaces it whole. */
Test(checkpoint, atomic_replace_leaves_no_temporary)
{
	mktmp();
	net n;
	net_new(&n, "allow_mix_precision", NULL, NULL);
	net_step(&n);
	cr_assert_eq(amp_checkpoint_save(n.ctx, in_tmp("a.ckpt")), AMP_OK);
	net_step(&n);
	cr_assert_eq(amp_checkpoint_save(n.ctx, in_tmp("a.ckpt")), AMP_OK);
	DIR *d = opendir(tmpdir);
	struct dirent *e;
	int files = 0;
	while ((e = readdir(d)))
		if (e->d_name[0] != '.') {
			files++;
			cr_assert_str_eq(e->d_name, "a.ckpt");
		}
	closedir(d);
	cr_assert_eq(files, 1);
	/* the second save is the one in the file */
	amp_ctx_free(n.ctx);
	net_new(&n, "allow_mix_precision", NULL, NULL);
	cr_assert_eq(amp_checkpoint_load(n.ctx, in_tmp("a.ckpt")), AMP_OK);
	cr_assert_eq(amp_step_index(n.ctx), 1);
	cr_assert_eq(amp_checkpoint_save(n.ctx, "/nonexistent-dir/x.ckpt"), AMP_EIO);
	cr_assert(strstr(amp_ctx_error(n.ctx), "/nonexistent-dir/x.ckpt"), "%s",
	          amp_ctx_error(n.ctx));
	amp_ctx_free(n.ctx);
	rmtmp();
}

static long file_size(const char *p)
{
	FILE *f = fopen(p, "rb");
	cr_assert_not_null(f);
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	fclose(f);
	return n;
}

/* Rewrites byte off of p with v (or truncates it to off when v < 0). */
static void patch(const char *p, long off, int v)
{
	if (v < 0) {
		cr_assert_eq(truncate(p, off), 0);
		return;
	}
	FILE *f = fopen(p, "r+b");
	cr_assert_not_null(f);
	fseek(f, off, SEEK_SET);
	fputc(v, f);
	fclose(f);
}

/* Inverts every bit of byte off of p. */
static void flip(const char *p, long off)
{
	FILE *f = fopen(p, "r+b");
	cr_assert_not_null(f);
	fseek(f, off, SEEK_SET);
	int c = getc(f);
	fseek(f, off, SEEK_SET);
	fputc(c ^ 0xff, f);
	fclose(f);
}

static void copy_file(const char *from, const char *to)
{
	FILE *a = fopen(from, "rb"), *b = fopen(to, "wb");
	cr_assert(a && b);
	int c;
	while ((c = getc(a)) != EOF)
		putc(c, b);
	fclose(a);
	fclose(b);
}

/* A refused checkpoint says why and leaves the context as it was. */
static void refused(net *n, const char *p, int code, const char *why)
{
	float before[NW], after[NW];
	net_weights(n, before);
	int64_t step = amp_step_index(n->ctx);
	cr_assert_eq(amp_checkpoint_load(n->ctx, p), code, "%s: %s", why, amp_ctx_error(n->ctx));
	cr_assert(strstr(amp_ctx_error(n->ctx), why), "expected '%s' in: %s", why,
	          amp_ctx_error(n->ctx));
	net_weights(n, after);
	cr_assert_eq(memcmp(before, after, sizeof before), 0, "context changed by a refused load");
	cr_assert_eq(amp_step_index(n->ctx), step);
}

Test(checkpoint, damaged_newer_and_mismatched_refused)
{
	mktmp();
	net n;
	net_new(&n, "allow_mix_precision", NULL, NULL);
	for (int s = 0; s < 3; s++)
		net_step(&n);
	char good[512], p[512];
	snprintf(good, sizeof good, "%s", in_tmp("good.ckpt"));
	cr_assert_eq(amp_checkpoint_save(n.ctx, good), AMP_OK);
	amp_ctx_free(n.ctx);
	long size = file_size(good);
	net_new(&n, "allow_mix_precision", NULL, NULL);

	snprintf(p, sizeof p, "%s", in_tmp("flip.ckpt"));
	copy_file(good, p);
	flip(p, size / 2);
	refused(&n, p, AMP_EFORMAT, "checksum mismatch");

	snprintf(p, sizeof p, "%s", in_tmp("short.ckpt"));
	copy_file(good, p);
	patch(p, size - 7, -1);
	refused(&n, p, AMP_EFORMAT, "truncated");
	patch(p, 20, -1);
	refused(&n, p, AMP_EFORMAT, "truncated");

	snprintf(p, sizeof p, "%s", in_tmp("newer.ckpt"));
	copy_file(good, p);
	patch(p, 8, 4); /* format version 4 */
	refused(&n, p, AMP_EFORMAT, "format version 4 is newer");

	snprintf(p, sizeof p, "%s", in_tmp("magic.ckpt"));
	copy_file(good, p);
	patch(p, 0, 'X');
	refused(&n, p, AMP_EFORMAT, "not an ampkit checkpoint");

	refused(&n, in_tmp("missing.ckpt"), AMP_EIO, "cannot open");
	amp_ctx_free(n.ctx);

	/* another model: a parameter of another shape */
	amp_ctx *ctx = mkctx(NULL);
	amp_tensor *w;
	cr_assert_eq(amp_param_new(ctx, "fc1.w", amp_shape2(NH, NI + 1), AMP_INIT_ZEROS, 1, &w),
	             AMP_OK);
	cr_assert_eq(amp_checkpoint_load(ctx, good), AMP_EFORMAT);
	cr_assert(strstr(amp_ctx_error(ctx), "holds 4 parameters, this context has 1"), "%s",
	          amp_ctx_error(ctx));
	amp_ctx_free(ctx);
	net_new(&n, "allow_mix_precision", NULL, NULL);
	amp_ctx_free(n.ctx);
	/* same count, one shape differs */
	ctx = mkctx(NULL);
	amp_tensor *t;
	cr_assert_eq(amp_param_new(ctx, "fc1.w", amp_shape2(NH, NI), AMP_INIT_ZEROS, 1, &t), AMP_OK);
	cr_assert_eq(amp_param_new(ctx, "fc1.b", amp_shape1(NH), AMP_INIT_ZEROS, 1, &t), AMP_OK);
	cr_assert_eq(amp_param_new(ctx, "fc2.w", amp_shape2(NC + 1, NH), AMP_INIT_ZEROS, 1, &t),
	             AMP_OK);
	cr_assert_eq(amp_param_new(ctx, "fc2.b", amp_shape1(NC), AMP_INIT_ZEROS, 1, &t), AMP_OK);
	cr_assert_eq(amp_checkpoint_load(ctx, good), AMP_EFORMAT);
	cr_assert(strstr(amp_ctx_error(ctx), "parameter 'fc2.w' (5,32) in the file, 'fc2.w' (6,32)"),
	          "%s", amp_ctx_error(ctx));
	amp_ctx_free(ctx);
	rmtmp();
}

/* A checkpoint saved under one kind of loss scaling is refused under another (its scale would
 * run under the wrong rules): bf16's static 1 into a dynamic fp16 context, and back; a static
 * scale into a context with another. */
Test(checkpoint, other_loss_scaling_refused)
{
	mktmp();
	net n;
	net_new(&n, "allow_mix_precision_bf16", NULL, NULL);
	net_step(&n);
	cr_assert_eq(amp_checkpoint_save(n.ctx, in_tmp("bf16.ckpt")), AMP_OK);
	amp_ctx_free(n.ctx);
	net_new(&n, "allow_mix_precision", NULL, NULL);
	net_step(&n);
	cr_assert_eq(amp_checkpoint_save(n.ctx, in_tmp("fp16.ckpt")), AMP_OK);
	cr_assert_eq(amp_checkpoint_load(n.ctx, in_tmp("bf16.ckpt")), AMP_ECONFIG);
	cr_assert(strstr(amp_ctx_error(n.ctx), "saved with a static loss scale of 1, this context "
	                                       "has dynamic loss scaling"),
	          "%s", amp_ctx_error(n.ctx));
	cr_assert_eq(n.ctx->scaler.dynamic, 1);
	amp_ctx_free(n.ctx);
	net_new(&n, "allow_mix_precision_bf16", NULL, NULL);
	cr_assert_eq(amp_checkpoint_load(n.ctx, in_tmp("fp16.ckpt")), AMP_ECONFIG);
	amp_ctx_free(n.ctx);
	net_new(&n, "allow_mix_precision_bf16", "loss_scale", "1024");
	cr_assert_eq(amp_checkpoint_load(n.ctx, in_tmp("bf16.ckpt")), AMP_ECONFIG);
	cr_assert(strstr(amp_ctx_error(n.ctx), "this context has a static loss scale of 1024"),
	          "%s", amp_ctx_error(n.ctx));
	amp_ctx_free(n.ctx);
	net_new(&n, "allow_mix_precision_bf16", NULL, NULL);
	cr_assert_eq(amp_checkpoint_load(n.ctx, in_tmp("bf16.ckpt")), AMP_OK, "%s",
	             amp_ctx_error(n.ctx));
	amp_ctx_free(n.ctx);
	rmtmp();
}

/* An FP32 mode scales nothing: its checkpoints load under any mode, and any mode's load
 * under it; the kind of scaling is checked between the scaling modes only. */
Test(checkpoint, fp32_loads_across_scaling_kinds)
{
	mktmp();
	net n;
	net_new(&n, "force_fp32", NULL, NULL);
	net_step(&n);
	cr_assert_eq(amp_checkpoint_save(n.ctx, in_tmp("fp32.ckpt")), AMP_OK);
	amp_ctx_free(n.ctx);
	net_new(&n, "allow_mix_precision_bf16", NULL, NULL);
	net_step(&n);
	cr_assert_eq(amp_checkpoint_save(n.ctx, in_tmp("bf16.ckpt")), AMP_OK);
	cr_assert_eq(amp_checkpoint_load(n.ctx, in_tmp("fp32.ckpt")), AMP_OK, "%s",
	             amp_ctx_error(n.ctx));
	cr_assert_eq(n.ctx->scaler.dynamic, 0, "the bf16 context keeps its own scaler");
	cr_assert_eq(amp_loss_scale(n.ctx), 1.0);
	amp_ctx_free(n.ctx);
	net_new(&n, "force_fp32", NULL, NULL);
	cr_assert_eq(amp_checkpoint_load(n.ctx, in_tmp("bf16.ckpt")), AMP_OK, "%s",
	             amp_ctx_error(n.ctx));
	/* and on to bf16 mid-run: the scaler it took is bf16's */
	cr_assert_eq(amp_config_set(n.ctx, "precision_mode", "allow_mix_precision_bf16"), AMP_OK,
	             "%s", amp_ctx_error(n.ctx));
	net_step(&n);
	cr_assert_eq(amp_loss_scale(n.ctx), 1.0);
	amp_ctx_free(n.ctx);
	rmtmp();
}

/* A run that went fp16 -> force_fp32 and saved there keeps the scaler it will use again: a
 * resume that goes back to fp16 has the scale the run had (it waited, unused, under FP32);
 * and an lr of 0 (a warm-up's start) is saved and loaded like any other. */
Test(checkpoint, scaler_kept_through_fp32_and_lr_zero)
{
	mktmp();
	net a, b;
	net_new(&a, "allow_mix_precision", NULL, NULL);
	net_new(&b, "allow_mix_precision", NULL, NULL);
	for (int i = 0; i < 7; i++)
		net_step(&a); /* growth interval 3: the scale grew */
	double grown = amp_loss_scale(a.ctx);
	cr_assert_gt(grown, amp_loss_scale(b.ctx));
	cr_assert_eq(amp_config_set(a.ctx, "precision_mode", "force_fp32"), AMP_OK);
	net_step(&a);
	amp_optim_set_lr(a.opt, 0);
	cr_assert_eq(amp_checkpoint_save(a.ctx, in_tmp("f32.ckpt")), AMP_OK);
	cr_assert_eq(amp_checkpoint_load(b.ctx, in_tmp("f32.ckpt")), AMP_OK, "%s",
	             amp_ctx_error(b.ctx));
	cr_assert_eq(amp_config_set(a.ctx, "precision_mode", "allow_mix_precision"), AMP_OK);
	cr_assert_eq(amp_config_set(b.ctx, "precision_mode", "allow_mix_precision"), AMP_OK);
	cr_assert_eq(amp_loss_scale(b.ctx), amp_loss_scale(a.ctx));
	cr_assert_eq(amp_loss_scale(b.ctx), grown);
	float w[NW];
	net_weights(&b, w);
	net_step(&b); /* lr 0 came back with the rest: the weights stay */
	float w2[NW];
	net_weights(&b, w2);
	cr_assert_eq(memcmp(w, w2, sizeof w), 0, "lr 0 was not restored");
	amp_ctx_free(a.ctx);
	amp_ctx_free(b.ctx);
	rmtmp();
}

/* Rolling back to a checkpoint after a bad step continues exactly as a run that never saw
 * it: the gradients the bad step left are not the checkpoint's, and are dropped. */
Test(checkpoint, rollback_drops_held_gradients)
{
	mktmp();
	net a, b;
	net_new(&a, "allow_mix_precision", NULL, NULL);
	net_new(&b, "allow_mix_precision", NULL, NULL);
	for (int i = 0; i < 3; i++) {
		net_step(&a);
		net_step(&b);
	}
	cr_assert_eq(amp_checkpoint_save(b.ctx, in_tmp("ok.ckpt")), AMP_OK);
	/* b: a step whose backward ran but whose update the program chose not to take */
	cr_assert_eq(amp_backward(b.ctx, net_forward(&b)), AMP_OK);
	cr_assert_eq(amp_step_end(b.ctx), AMP_OK);
	cr_assert_eq(amp_checkpoint_load(b.ctx, in_tmp("ok.ckpt")), AMP_OK, "%s",
	             amp_ctx_error(b.ctx));
	for (int i = 0; i < 3; i++) {
		net_step(&a);
		net_step(&b);
	}
	float wa[NW], wb[NW];
	net_weights(&a, wa);
	net_weights(&b, wb);
	cr_assert_eq(memcmp(wa, wb, sizeof wa), 0, "the rolled-back run differs");
	cr_assert_eq(amp_loss_scale(a.ctx), amp_loss_scale(b.ctx));
	amp_ctx_free(a.ctx);
	amp_ctx_free(b.ctx);
	rmtmp();
}

/* A step that ran backward and no update leaves its gradient held for the next steps to add
 * to; a checkpoint saved then holds it, and the resumed run goes on bit-identically with the
 * run that never stopped (it used to lose it: the next update saw one step's gradient). */
Test(checkpoint, resume_keeps_held_gradients)
{
	mktmp();
	const char *ck = in_tmp("held.ckpt");
	float wa[NW], wb[NW];
	net n;
	for (int run = 0; run < 2; run++) {
		net_new(&n, "allow_mix_precision", NULL, NULL);
		for (int s = 0; s < STEPS; s++) {
			if (s != STOP - 1) {
				net_step(&n);
			} else { /* backward only: its gradient is held past the step */
				cr_assert_eq(amp_backward(n.ctx, net_forward(&n)), AMP_OK);
				cr_assert_eq(amp_step_end(n.ctx), AMP_OK);
			}
			if (run == 1 && s == STOP - 1) { /* a new process, as it were */
				cr_assert_eq(amp_checkpoint_save(n.ctx, ck), AMP_OK, "%s",
				             amp_ctx_error(n.ctx));
				amp_ctx_free(n.ctx);
				net_new(&n, "allow_mix_precision", NULL, NULL);
				cr_assert_eq(amp_checkpoint_load(n.ctx, ck), AMP_OK, "%s",
				             amp_ctx_error(n.ctx));
			}
		}
		net_weights(&n, run ? wb : wa);
		amp_ctx_free(n.ctx);
	}
	cr_assert_eq(memcmp(wa, wb, sizeof wa), 0, "the resumed run differs from the one that "
	                                           "never stopped");
	rmtmp();
}

/* A load that needs more memory than memory_limit leaves (the moments and held gradients it
 * allocates) is refused before it changes anything. */
Test(checkpoint, memory_limit_refuses_before_any_change)
{
	mktmp();
	char ck[512];
	snprintf(ck, sizeof ck, "%s", in_tmp("held.ckpt"));
	net n;
	net_new(&n, "allow_mix_precision", NULL, NULL);
	net_step(&n);
	cr_assert_eq(amp_backward(n.ctx, net_forward(&n)), AMP_OK); /* a gradient held */
	cr_assert_eq(amp_step_end(n.ctx), AMP_OK);
	cr_assert_eq(amp_checkpoint_save(n.ctx, ck), AMP_OK);
	amp_ctx_free(n.ctx);
	char limit[32]; /* the masters fit, not the moments and gradients the load adds */
	snprintf(limit, sizeof limit, "%d", NW * 4 + 4096);
	net_new(&n, "allow_mix_precision", "memory_limit", limit);
	refused(&n, ck, AMP_ELIMIT, "amp_checkpoint_load needs");
	cr_assert_eq(amp_step_index(n.ctx), -1);
	cr_assert_eq(amp_config_set(n.ctx, "memory_limit", "0"), AMP_OK);
	cr_assert_eq(amp_checkpoint_load(n.ctx, ck), AMP_OK, "%s", amp_ctx_error(n.ctx));
	amp_ctx_free(n.ctx);
	rmtmp();
}

/* A load whose allocations fail (moments and a held gradient the context lacks) leaves the
 * context as it was: weights, step, note; the allocations come before any copy.  Then the
 * same load succeeds and resumes the run. */
Test(checkpoint, failed_allocation_changes_nothing)
{
	char ck[512];
	net n;
	net_at_stop(&n, ck, sizeof ck, "oom.ckpt");
	cr_assert_eq(amp_backward(n.ctx, net_forward(&n)), AMP_OK); /* a gradient held */
	cr_assert_eq(amp_step_end(n.ctx), AMP_OK);
	cr_assert_eq(amp_checkpoint_set_note(n.ctx, "saved"), AMP_OK);
	cr_assert_eq(amp_checkpoint_save(n.ctx, ck), AMP_OK);
	amp_ctx_free(n.ctx);
	int failed = 0;
	for (int64_t at = 0; at < 64; at++) {
		net_new(&n, "allow_mix_precision", NULL, NULL); /* no moments, no gradient yet */
		cr_assert_eq(amp_checkpoint_set_note(n.ctx, "mine"), AMP_OK);
		float before[NW], after[NW];
		net_weights(&n, before);
		amp_mem_fail_at(at, 0);
		int rc = amp_checkpoint_load(n.ctx, ck);
		amp_mem_fail_at(-1, 0);
		if (rc == AMP_OK) {
			amp_ctx_free(n.ctx);
			break; /* past the load's last allocation */
		}
		failed++;
		cr_assert_eq(rc, AMP_ENOMEM, "allocation %lld: %s", (long long)at,
		             amp_ctx_error(n.ctx));
		net_weights(&n, after);
		cr_assert_eq(memcmp(before, after, sizeof before), 0,
		             "allocation %lld failed: the weights changed", (long long)at);
		cr_assert_eq(amp_step_index(n.ctx), -1);
		cr_assert_str_eq(amp_checkpoint_note(n.ctx), "mine");
		cr_assert_eq(amp_checkpoint_load(n.ctx, ck), AMP_OK, "%s", amp_ctx_error(n.ctx));
		cr_assert_eq(amp_step_index(n.ctx), STOP);
		net_step(&n); /* and it trains on */
		amp_ctx_free(n.ctx);
	}
	cr_assert_geq(failed, 3, "the load allocates moments and a gradient: %d failures", failed);
	rmtmp();
}

/* A file of an older format, made from a format-3 file ck without a note: the note's length
 * (its payload's first 4 bytes, 0) cut, and for format 1 the last 4 bytes too (the gradient
 * flags of its 4 parameters, none set); version written into the header, at name. */
static const char *older_format(const char *ck, uint32_t version, const char *name)
{
	long size = file_size(ck);
	unsigned char *b = malloc((size_t)size);
	FILE *f = fopen(ck, "rb");
	cr_assert(b && f && fread(b, 1, (size_t)size, f) == (size_t)size);
	fclose(f);
	for (long i = 32; i < 36; i++) /* no note */
		cr_assert_eq(b[i], 0);
	memmove(b + 32, b + 36, (size_t)(size - 36));
	size -= 4;
	if (version < 2) {
		for (long i = size - 4; i < size; i++) /* no held gradient */
			cr_assert_eq(b[i], 0);
		size -= 4;
	}
	uint32_t crc = (uint32_t)crc32(0, b + 32, (uInt)(size - 32));
	uint64_t len = (uint64_t)size - 32;
	memcpy(b + 8, &version, 4);
	memcpy(b + 16, &len, 8);
	memcpy(b + 24, &crc, 4);
	const char *out = in_tmp(name);
	f = fopen(out, "wb");
	cr_assert(f && fwrite(b, 1, (size_t)size, f) == (size_t)size);
	fclose(f);
	free(b);
	return out;
}

/* Files of formats 1 (no held gradients, no note) and 2 (no note) still load and resume. */
Test(checkpoint, format1_and_2_files_load)
{
	char ck[512];
	net n;
	net_at_stop(&n, ck, sizeof ck, "v3.ckpt");
	cr_assert_eq(amp_checkpoint_save(n.ctx, ck), AMP_OK);
	float wa[NW], wb[NW];
	for (int s = STOP; s < STEPS; s++)
		net_step(&n);
	net_weights(&n, wa);
	amp_ctx_free(n.ctx);

	const struct {
		uint32_t version;
		const char *name;
	} older[] = {{2, "v2.ckpt"}, {1, "v1.ckpt"}};
	for (int i = 0; i < 2; i++) {
		char path[512];
		snprintf(path, sizeof path, "%s",
		         older_format(ck, older[i].version, older[i].name));
		char *note = NULL;
		cr_assert_eq(amp_checkpoint_read_note(path, &note, NULL, 0), AMP_OK);
		cr_assert_str_eq(note, "");
		free(note);
		net_new(&n, "allow_mix_precision", NULL, NULL);
		cr_assert_eq(amp_checkpoint_set_note(n.ctx, "set before the load"), AMP_OK);
		cr_assert_eq(amp_checkpoint_load(n.ctx, path), AMP_OK, "%s", amp_ctx_error(n.ctx));
		cr_assert_str_eq(amp_checkpoint_note(n.ctx), "",
		                 "a format-%u file has no note: the context's is cleared",
		                 older[i].version);
		for (int s = STOP; s < STEPS; s++)
			net_step(&n);
		net_weights(&n, wb);
		cr_assert_eq(memcmp(wa, wb, sizeof wa), 0, "the format-%u file resumed another run",
		             older[i].version);
		amp_ctx_free(n.ctx);
	}
	rmtmp();
}

/* The program's note goes with every save after it is set and comes back with the load,
 * replacing the loading context's; NULL and "" clear it, past the limit is refused. */
Test(checkpoint, note_round_trip)
{
	mktmp();
	char ck[512];
	snprintf(ck, sizeof ck, "%s", in_tmp("n.ckpt"));
	net a, b;
	net_new(&a, "allow_mix_precision", NULL, NULL);
	net_new(&b, "allow_mix_precision", NULL, NULL);
	cr_assert_str_eq(amp_checkpoint_note(a.ctx), "");
	cr_assert_str_eq(amp_checkpoint_note(NULL), "");
	const char *note = "batch 64\nlr 0.05\nlosses 3 0x1p+0 nan\n";
	cr_assert_eq(amp_checkpoint_set_note(a.ctx, note), AMP_OK);
	cr_assert_str_eq(amp_checkpoint_note(a.ctx), note);
	net_step(&a);
	cr_assert_eq(amp_checkpoint_save(a.ctx, ck), AMP_OK, "%s", amp_ctx_error(a.ctx));
	cr_assert_eq(amp_checkpoint_set_note(b.ctx, "b's own"), AMP_OK);
	char *read = NULL;
	cr_assert_eq(amp_checkpoint_read_note(ck, &read, NULL, 0), AMP_OK);
	cr_assert_str_eq(read, note, "read without a context");
	free(read);
	cr_assert_eq(amp_checkpoint_read_note(in_tmp("none.ckpt"), &read, NULL, 0), AMP_EIO);
	cr_assert_null(read);
	cr_assert_eq(amp_checkpoint_load(b.ctx, ck), AMP_OK, "%s", amp_ctx_error(b.ctx));
	cr_assert_str_eq(amp_checkpoint_note(b.ctx), note, "the loaded note replaces b's");

	/* cleared: the next save has none, and its load clears the loader's */
	cr_assert_eq(amp_checkpoint_set_note(a.ctx, NULL), AMP_OK);
	cr_assert_str_eq(amp_checkpoint_note(a.ctx), "");
	cr_assert_eq(amp_checkpoint_save(a.ctx, ck), AMP_OK);
	cr_assert_eq(amp_checkpoint_load(b.ctx, ck), AMP_OK, "%s", amp_ctx_error(b.ctx));
	cr_assert_str_eq(amp_checkpoint_note(b.ctx), "");
	cr_assert_eq(amp_checkpoint_set_note(a.ctx, "x"), AMP_OK);
	cr_assert_eq(amp_checkpoint_set_note(a.ctx, ""), AMP_OK);
	cr_assert_str_eq(amp_checkpoint_note(a.ctx), "");

	/* the largest note round-trips; one byte more is refused and the old note kept */
	size_t max = AMP_CHECKPOINT_NOTE_MAX;
	char *big = malloc(max + 2);
	cr_assert(big);
	memset(big, 'n', max + 1);
	big[max] = '\0';
	cr_assert_eq(amp_checkpoint_set_note(a.ctx, big), AMP_OK);
	cr_assert_eq(amp_checkpoint_save(a.ctx, ck), AMP_OK);
	cr_assert_eq(amp_checkpoint_load(b.ctx, ck), AMP_OK, "%s", amp_ctx_error(b.ctx));
	cr_assert_eq(strlen(amp_checkpoint_note(b.ctx)), max);
	big[max] = 'n';
	big[max + 1] = '\0';
	cr_assert_eq(amp_checkpoint_set_note(a.ctx, big), AMP_EINVAL);
	cr_assert(strstr(amp_ctx_error(a.ctx), "at most"), "%s", amp_ctx_error(a.ctx));
	cr_assert_eq(strlen(amp_checkpoint_note(a.ctx)), max, "a refused note changes nothing");
	free(big);
	amp_ctx_free(a.ctx);
	amp_ctx_free(b.ctx);
	rmtmp();
}

/* Writes n bytes at payload offset off of checkpoint p, with the header's checksum made
 * right again: a file whose damage the checksum cannot see. */
static void patch_payload(const char *p, long off, const void *bytes, size_t n)
{
	long size = file_size(p);
	unsigned char *b = malloc((size_t)size);
	FILE *f = fopen(p, "r+b");
	cr_assert(b && f && fread(b, 1, (size_t)size, f) == (size_t)size);
	memcpy(b + 32 + off, bytes, n);
	uint32_t crc = (uint32_t)crc32(0, b + 32, (uInt)(size - 32));
	memcpy(b + 24, &crc, 4);
	rewind(f);
	cr_assert_eq(fwrite(b, 1, (size_t)size, f), (size_t)size);
	fclose(f);
	free(b);
}

/* A scale no scaler can hold (1/scale must be finite) is damage, even with a good checksum. */
Test(checkpoint, scale_out_of_range_refused)
{
	mktmp();
	net n;
	net_new(&n, "allow_mix_precision", NULL, NULL);
	net_step(&n);
	char good[512], p[512];
	snprintf(good, sizeof good, "%s", in_tmp("good.ckpt"));
	snprintf(p, sizeof p, "%s", in_tmp("scale.ckpt"));
	cr_assert_eq(amp_checkpoint_save(n.ctx, good), AMP_OK);
	const double bad_scales[] = {1e-300, 0x1p-127, -1, INFINITY, NAN};
	for (size_t i = 0; i < sizeof bad_scales / sizeof *bad_scales; i++) {
		copy_file(good, p);
		patch_payload(p, 68, &bad_scales[i],
		              sizeof(double)); /* note length, 7 counters, 2 words */
		refused(&n, p, AMP_EFORMAT, "loss scale out of range");
	}
	copy_file(good, p);
	const double fine = 0x1p-126;
	patch_payload(p, 68, &fine, sizeof fine);
	cr_assert_eq(amp_checkpoint_load(n.ctx, p), AMP_OK, "%s", amp_ctx_error(n.ctx));
	cr_assert_eq(amp_loss_scale(n.ctx), fine);
	amp_ctx_free(n.ctx);
	rmtmp();
}

/* A note with a NUL in it, or a length past its bytes, is damage even with a good checksum,
 * and the refused load leaves the context's note as it was. */
Test(checkpoint, damaged_note_refused)
{
	mktmp();
	net n;
	net_new(&n, "allow_mix_precision", NULL, NULL);
	net_step(&n);
	char good[512], p[512];
	snprintf(good, sizeof good, "%s", in_tmp("good.ckpt"));
	snprintf(p, sizeof p, "%s", in_tmp("note.ckpt"));
	cr_assert_eq(amp_checkpoint_set_note(n.ctx, "abcd"), AMP_OK);
	cr_assert_eq(amp_checkpoint_save(n.ctx, good), AMP_OK);
	cr_assert_eq(amp_checkpoint_set_note(n.ctx, "kept"), AMP_OK);
	/* the payload starts with the note's length (4) and its 4 bytes */
	copy_file(good, p);
	patch_payload(p, 4 + 2, "\0", 1);
	refused(&n, p, AMP_EFORMAT, "damaged (the note)");
	cr_assert_str_eq(amp_checkpoint_note(n.ctx), "kept");
	char *note = NULL, err[256] = "";
	cr_assert_eq(amp_checkpoint_read_note(p, &note, err, sizeof err), AMP_EFORMAT);
	cr_assert_null(note);
	cr_assert(strstr(err, "damaged (the note)"), "%s", err);
	copy_file(good, p);
	uint32_t longer = (uint32_t)file_size(good); /* past the payload's end */
	patch_payload(p, 0, &longer, 4);
	refused(&n, p, AMP_EFORMAT, "truncated (inside the note)");
	copy_file(good, p);
	uint32_t huge = 0xffffffffu; /* past AMP_CHECKPOINT_NOTE_MAX: damage, not a short file */
	patch_payload(p, 0, &huge, 4);
	refused(&n, p, AMP_EFORMAT, "damaged (the note)");
	/* read_note checks the whole payload's checksum, past the note, as a load does */
	copy_file(good, p);
	flip(p, file_size(good) - 1);
	cr_assert_eq(amp_checkpoint_read_note(p, &note, err, sizeof err), AMP_EFORMAT);
	cr_assert(strstr(err, "checksum mismatch"), "%s", err);
	cr_assert_eq(amp_checkpoint_load(n.ctx, good), AMP_OK, "%s", amp_ctx_error(n.ctx));
	cr_assert_str_eq(amp_checkpoint_note(n.ctx), "abcd");
	amp_ctx_free(n.ctx);
	rmtmp();
}

/* Saving replaces the file the path names: through a symbolic link its target (the link
 * stays), and never a file that is not a regular one (a FIFO here; a device alike), which
 * loading refuses without waiting for a writer. */
Test(checkpoint, links_followed_and_special_files_refused)
{
	mktmp();
	net n;
	net_new(&n, "force_fp32", NULL, NULL);
	net_step(&n);
	char target[512];
	snprintf(target, sizeof target, "%s", in_tmp("ckpt-1"));
	cr_assert_eq(amp_checkpoint_save(n.ctx, target), AMP_OK);
	cr_assert_eq(symlink("ckpt-1", in_tmp("latest")), 0);
	net_step(&n);
	cr_assert_eq(amp_checkpoint_save(n.ctx, in_tmp("latest")), AMP_OK, "%s",
	             amp_ctx_error(n.ctx));
	struct stat st;
	cr_assert_eq(lstat(in_tmp("latest"), &st), 0);
	cr_assert(S_ISLNK(st.st_mode), "the link was replaced");
	cr_assert_eq(amp_checkpoint_load(n.ctx, target), AMP_OK, "%s", amp_ctx_error(n.ctx));
	cr_assert_eq(amp_step_index(n.ctx), 1, "the target holds the second save");
	cr_assert_eq(mkfifo(in_tmp("fifo"), 0600), 0);
	cr_assert_eq(amp_checkpoint_save(n.ctx, in_tmp("fifo")), AMP_EIO);
	cr_assert(strstr(amp_ctx_error(n.ctx), "exists and is not a regular file"), "%s",
	          amp_ctx_error(n.ctx));
	cr_assert_eq(lstat(in_tmp("fifo"), &st), 0);
	cr_assert(S_ISFIFO(st.st_mode), "the FIFO was replaced");
	cr_assert_eq(amp_checkpoint_load(n.ctx, in_tmp("fifo")), AMP_EIO);
	cr_assert(strstr(amp_ctx_error(n.ctx), "not a regular file"), "%s", amp_ctx_error(n.ctx));
	cr_assert_eq(symlink("nowhere", in_tmp("dangling")), 0);
	cr_assert_eq(amp_checkpoint_save(n.ctx, in_tmp("dangling")), AMP_EIO);
	amp_ctx_free(n.ctx);
	rmtmp();
}

Test(checkpoint, between_steps_only)
{
	mktmp();
	amp_ctx *ctx = mkctx(NULL);
	cr_assert_eq(amp_step_begin(ctx), AMP_OK);
	cr_assert_eq(amp_checkpoint_save(ctx, in_tmp("x.ckpt")), AMP_ESTATE);
	cr_assert_eq(amp_checkpoint_load(ctx, in_tmp("x.ckpt")), AMP_ESTATE);
	cr_assert_eq(amp_step_end(ctx), AMP_OK);
	amp_ctx_free(ctx);
	rmtmp();
}

/* ---- memory_optimize and memory_limit ---------------------------------------------------- */

static void memopt_identical(const char *mode)
{
	double la[STEPS], lb[STEPS];
	float wa[NW], wb[NW];
	amp_run_stats sa, sb;
	net n;
	net_new(&n, mode, NULL, NULL);
	for (int s = 0; s < STEPS; s++)
		la[s] = net_step(&n);
	net_weights(&n, wa);
	amp_run_stats_get(n.ctx, &sa);
	amp_ctx_free(n.ctx);
	net_new(&n, mode, "memory_optimize", "on");
	for (int s = 0; s < STEPS; s++)
		lb[s] = net_step(&n);
	net_weights(&n, wb);
	amp_run_stats_get(n.ctx, &sb);
	amp_ctx_free(n.ctx);
	for (int s = 0; s < STEPS; s++)
		cr_assert_eq(memcmp(&la[s], &lb[s], sizeof la[s]), 0, "%s step %d: %.17g vs %.17g",
		             mode, s, la[s], lb[s]);
	cr_assert_eq(memcmp(wa, wb, sizeof wa), 0, "%s: weights differ", mode);
	/* without it, the unoptimized figure is the peak; with it, that figure is what the run
	 * without it measured, and the real peak is lower */
	cr_assert_eq(sa.peak_bytes_unoptimized, sa.peak_bytes);
	cr_assert_eq(sb.peak_bytes_unoptimized, sa.peak_bytes, "%llu vs %llu",
	             (unsigned long long)sb.peak_bytes_unoptimized,
	             (unsigned long long)sa.peak_bytes);
	cr_assert_lt(sb.peak_bytes, sa.peak_bytes, "peak %llu with, %llu without",
	             (unsigned long long)sb.peak_bytes, (unsigned long long)sa.peak_bytes);
	cr_log_info("%s: peak %llu bytes with memory_optimize, %llu without\n", mode,
	            (unsigned long long)sb.peak_bytes, (unsigned long long)sa.peak_bytes);
}

Test(memory_optimize, bit_identical_and_lower_peak_fp16) { memopt_identical("allow_mix_precision"); }
Test(memory_optimize, bit_identical_and_lower_peak_fp32) { memopt_identical("force_fp32"); }
Test(memory_optimize, bit_identical_and_lower_peak_bf16)
{
	memopt_identical("allow_mix_precision_bf16");
}

/* Activations and their gradients go back to the arena during backward: at the end of the
 * step the two categories hold less than without it. */
Test(memory_optimize, releases_during_backward)
{
	amp_run_stats st[2];
	for (int on = 0; on < 2; on++) {
		net n;
		net_new(&n, "allow_mix_precision", "memory_optimize", on ? "on" : "off");
		amp_ctx *ctx = n.ctx;
		cr_assert_eq(amp_step_begin(ctx), AMP_OK);
		float x[NB * NI] = {0};
		int32_t t[NB] = {0};
		amp_tensor *xt, *tt, *h, *a, *lo, *loss;
		cr_assert_eq(amp_tensor_from_f32(ctx, x, amp_shape2(NB, NI), AMP_F32, &xt), AMP_OK);
		cr_assert_eq(amp_tensor_from_i32(ctx, t, amp_shape1(NB), &tt), AMP_OK);
		cr_assert_eq(amp_linear(ctx, "fc1", xt, n.w1, n.b1, &h), AMP_OK);
		cr_assert_eq(amp_relu(ctx, "act", h, &a), AMP_OK);
		cr_assert_eq(amp_linear(ctx, "fc2", a, n.w2, n.b2, &lo), AMP_OK);
		cr_assert_eq(amp_cross_entropy(ctx, "ce", lo, tt, &loss), AMP_OK);
		cr_assert_eq(amp_backward(ctx, loss), AMP_OK);
		amp_run_stats_get(ctx, &st[on]);
		cr_assert_eq(h->released, on, "the hidden activation released with it on");
		cr_assert_eq(loss->released, 0, "the loss is kept");
		/* what was released cannot be read or used again: said, not garbage */
		float hv[NB * NH];
		amp_tensor *late;
		cr_assert_eq(amp_tensor_read_f32(ctx, h, hv), on ? AMP_ESTATE : AMP_OK);
		cr_assert_eq(amp_relu(ctx, "late", h, &late), on ? AMP_ESTATE : AMP_OK);
		if (on)
			cr_assert(strstr(amp_ctx_error(ctx), "ReLU 'late': input 0: the tensor was "
			                                     "released by memory_optimize"),
			          "%s", amp_ctx_error(ctx));
		/* no pointer into memory the step reuses; the metadata stays */
		cr_assert_eq(amp_tensor_data(h) == NULL, on);
		cr_assert_eq(amp_tensor_grad(h) == NULL, on || !h->grad);
		cr_assert_eq(amp_tensor_numel(h), NB * NH);
		cr_assert_float_eq(amp_tensor_item(ctx, loss), log((double)NC), 1e-3);
		cr_assert_eq(amp_step_end(ctx), AMP_OK);
		amp_ctx_free(ctx);
	}
	cr_assert_lt(st[1].bytes_activations, st[0].bytes_activations);
	cr_assert_lt(st[1].bytes_grads, st[0].bytes_grads);
	/* the parameters' master gradients stay: grads hold at least those */
	cr_assert_geq(st[1].bytes_grads, (uint64_t)NW * 4);
}

/* A step that would pass the limit is refused at the op that would pass it, naming the op,
 * its layer and the bytes; the rest of the step is refused too; the next step runs. */
Test(memory_limit, refuses_the_step_naming_the_op)
{
	amp_ctx *ctx = mkctx("memory_limit", "39k", NULL);
	amp_tensor *w, *x, *y, *z;
	cr_assert_eq(amp_param_new(ctx, "fc.w", amp_shape2(64, 64), AMP_INIT_ONES, 1, &w), AMP_OK);
	float *xv = calloc(64 * 64, sizeof(float));
	cr_assert_eq(amp_step_begin(ctx), AMP_OK);
	cr_assert_eq(amp_tensor_from_f32(ctx, xv, amp_shape2(64, 64), AMP_F16, &x), AMP_OK);
	/* 16 KiB master + 8 KiB input + 8 KiB working copy: the 8 KiB output does not fit */
	int rc = amp_linear(ctx, "fc", x, w, NULL, &y);
	cr_assert_eq(rc, AMP_ELIMIT, "rc %d: %s", rc, amp_ctx_error(ctx));
	const char *e = amp_ctx_error(ctx);
	cr_assert(strstr(e, "memory_limit: Linear 'fc' needs 8192 bytes more in step 0"), "%s", e);
	cr_assert(strstr(e, "with 32768 of the limit of 39936 bytes in use"), "%s", e);
	cr_assert_eq(amp_relu(ctx, "after", x, &z), AMP_ELIMIT);
	cr_assert(strstr(amp_ctx_error(ctx), "refused by memory_limit"), "%s", amp_ctx_error(ctx));
	cr_assert_eq(amp_step_end(ctx), AMP_OK);
	/* a smaller step fits */
	cr_assert_eq(amp_step_begin(ctx), AMP_OK);
	cr_assert_eq(amp_tensor_from_f32(ctx, xv, amp_shape2(8, 64), AMP_F16, &x), AMP_OK);
	cr_assert_eq(amp_linear(ctx, "fc", x, w, NULL, &y), AMP_OK, "%s", amp_ctx_error(ctx));
	cr_assert_eq(amp_step_end(ctx), AMP_OK);
	/* a parameter past the limit, outside any step */
	cr_assert_eq(amp_param_new(ctx, "big", amp_shape1(1 << 14), AMP_INIT_ZEROS, 1, &w),
	             AMP_ELIMIT);
	cr_assert(strstr(amp_ctx_error(ctx), "parameter 'big' needs 65536 bytes"), "%s",
	          amp_ctx_error(ctx));
	free(xv);
	amp_ctx_free(ctx);
}

/* After a warm-up step, a step whose backward memory_limit stops part way under limit:
 * 1 if it stopped with some master gradient already written in it (else it was refused
 * before, or not at all).  The step is left open. */
static int partial_backward(net *n, uint64_t limit)
{
	net_step(n);
	amp_tensor *loss = net_forward(n);
	char v[32];
	snprintf(v, sizeof v, "%llu", (unsigned long long)limit);
	cr_assert_eq(amp_config_set(n->ctx, "memory_limit", v), AMP_OK);
	if (amp_backward(n->ctx, loss) != AMP_ELIMIT)
		return 0;
	amp_tensor *ps[4] = {n->w1, n->b1, n->w2, n->b2};
	int written = 0;
	for (int i = 0; i < 4; i++)
		written |= !ps[i]->param->grad_stale;
	return written;
}

/* A step whose backward memory_limit stopped part way (some master gradients added to, others
 * not) leaves nothing behind: the optimizer refuses it, and after it the training goes on as
 * if the step had had no backward at all. */
Test(memory_limit, a_backward_stopped_part_way_leaves_no_gradient)
{
	/* a limit that stops the backward after it wrote a master gradient */
	uint64_t limit = 0;
	for (uint64_t l = 200000; l > 1024 && !limit; l -= 256) {
		net t;
		net_new(&t, "force_fp32", NULL, NULL);
		if (partial_backward(&t, l))
			limit = l;
		amp_ctx_free(t.ctx);
	}
	cr_assert_neq(limit, 0, "no limit stops the backward part way");
	float got[NW], want[NW];
	net n;
	net_new(&n, "force_fp32", NULL, NULL);
	cr_assert(partial_backward(&n, limit));
	cr_assert_eq(amp_optim_step(n.opt, NULL), AMP_ESTATE);
	cr_assert(strstr(amp_ctx_error(n.ctx), "backward of step 1 failed"), "%s",
	          amp_ctx_error(n.ctx));
	cr_assert_eq(amp_step_end(n.ctx), AMP_OK);
	cr_assert_eq(amp_config_set(n.ctx, "memory_limit", "0"), AMP_OK);
	net_step(&n);
	net_weights(&n, got);
	amp_ctx_free(n.ctx);
	/* the same steps, the second without a backward */
	net_new(&n, "force_fp32", NULL, NULL);
	net_step(&n);
	(void)net_forward(&n);
	cr_assert_eq(amp_step_end(n.ctx), AMP_OK);
	net_step(&n);
	net_weights(&n, want);
	amp_ctx_free(n.ctx);
	cr_assert_eq(memcmp(got, want, sizeof got), 0, "the stopped backward reached the update");
}

/* With memory_optimize the backward of the same step fits a limit that refuses it without. */
Test(memory_limit, memory_optimize_fits_more)
{
	uint64_t peak_with;
	{
		net n;
		net_new(&n, "allow_mix_precision", "memory_optimize", "on");
		net_step(&n);
		amp_run_stats st;
		amp_run_stats_get(n.ctx, &st);
		peak_with = st.peak_bytes;
		cr_assert_lt(st.peak_bytes, st.peak_bytes_unoptimized);
		amp_ctx_free(n.ctx);
	}
	char lim[32];
	snprintf(lim, sizeof lim, "%llu", (unsigned long long)peak_with);
	for (int on = 0; on < 2; on++) {
		net n;
		net_new(&n, "allow_mix_precision", "memory_optimize", on ? "on" : "off");
		cr_assert_eq(amp_config_set(n.ctx, "memory_limit", lim), AMP_OK);
		amp_ctx *ctx = n.ctx;
		cr_assert_eq(amp_step_begin(ctx), AMP_OK);
		float x[NB * NI] = {0};
		int32_t t[NB] = {0};
		amp_tensor *xt, *tt, *h, *a, *d, *lo, *loss;
		cr_assert_eq(amp_tensor_from_f32(ctx, x, amp_shape2(NB, NI), AMP_F32, &xt), AMP_OK);
		cr_assert_eq(amp_tensor_from_i32(ctx, t, amp_shape1(NB), &tt), AMP_OK);
		cr_assert_eq(amp_linear(ctx, "fc1", xt, n.w1, n.b1, &h), AMP_OK);
		cr_assert_eq(amp_gelu(ctx, "act", h, &a), AMP_OK);
		cr_assert_eq(amp_dropout(ctx, "drop", a, 0.2f, &d), AMP_OK);
		cr_assert_eq(amp_linear(ctx, "fc2", d, n.w2, n.b2, &lo), AMP_OK);
		cr_assert_eq(amp_cross_entropy(ctx, "ce", lo, tt, &loss), AMP_OK);
		int rc = amp_backward(ctx, loss);
		if (on) {
			cr_assert_eq(rc, AMP_OK, "%s", amp_ctx_error(ctx));
			cr_assert_eq(amp_optim_step(n.opt, NULL), AMP_OK, "%s", amp_ctx_error(ctx));
		} else {
			cr_assert_eq(rc, AMP_ELIMIT, "rc %d", rc);
			cr_assert(strstr(amp_ctx_error(ctx), "memory_limit: backward of "), "%s",
			          amp_ctx_error(ctx));
		}
		cr_assert_eq(amp_step_end(ctx), AMP_OK);
		amp_ctx_free(ctx);
	}
}

/* ---- memory_optimize on a small BatchNorm and max-pooling network --------------------------
 * x (CB,1,8,8) -> conv1 (C1) -> bn1 -> gelu, + bn1 -> maxpool 2 -> conv2 (C2) -> bn2
 * -> maxpool 2 -> relu -> (CB, C2*2*2) -> linear -> cross-entropy.  With memory_optimize the
 * max pools keep no argmax (found again from their inputs in backward) and the BatchNorm
 * outputs are dropped when backward begins and recomputed for the nodes that read them: bn1's
 * for GELU (whose gradient reads the values, not only their signs) but not for the Add (which
 * reads none), bn2's for the pool, whose argmax then comes from the recomputed values.  With alias set, bn1's output
 * is also read through a reshape (the mean of its squares joins the loss): a tensor sharing
 * its storage, which the drop would not reach, so it is kept. */

typedef struct cnet {
	amp_ctx *ctx;
	amp_tensor *p[12]; /* conv1, bn1 (gamma, beta, mean, var), conv2, bn2 (...), fc.w, fc.b */
	amp_optim *opt;
	int alias;
	int micro; /* micro-batches per step (gradient_accumulation_steps) */
	/* the last step's tensors the tests measure */
	amp_tensor *bn1, *bn2, *pool1, *pool2;
	uint64_t act_at_backward; /* activation bytes when the backward began */
	int fail_step_end;        /* the probe backend's step_end fails */
} cnet;

#define CB  4 /* batch */
#define CS  8 /* image side */
#define C1  3
#define C2  5
#define CNW (C1 * 9 + 4 * C1 + C2 * C1 * 9 + 4 * C2 + NC * C2 * 4 + NC)

static void cnet_new(cnet *n, const char *mode, int memopt, int alias, int micro)
{
	char mb[16];
	snprintf(mb, sizeof mb, "%d", micro);
	n->ctx = mkctx("precision_mode", mode, "loss_scale_growth_interval", "3", "memory_optimize",
	               memopt ? "on" : "off", "gradient_accumulation_steps", mb, NULL);
	n->alias = alias;
	n->micro = micro;
	n->fail_step_end = 0;
	n->act_at_backward = 0;
	static const struct {
		const char *label;
		int64_t d0, d1, d2, d3;
		int ndim;
		amp_init init;
	} spec[12] = {
	    {"conv1", C1, 1, 3, 3, 4, AMP_INIT_KAIMING},
	    {"bn1.gamma", C1, 0, 0, 0, 1, AMP_INIT_ONES},
	    {"bn1.beta", C1, 0, 0, 0, 1, AMP_INIT_ZEROS},
	    {"bn1.mean", C1, 0, 0, 0, 1, AMP_INIT_ZEROS},
	    {"bn1.var", C1, 0, 0, 0, 1, AMP_INIT_ONES},
	    {"conv2", C2, C1, 3, 3, 4, AMP_INIT_KAIMING},
	    {"bn2.gamma", C2, 0, 0, 0, 1, AMP_INIT_ONES},
	    {"bn2.beta", C2, 0, 0, 0, 1, AMP_INIT_ZEROS},
	    {"bn2.mean", C2, 0, 0, 0, 1, AMP_INIT_ZEROS},
	    {"bn2.var", C2, 0, 0, 0, 1, AMP_INIT_ONES},
	    {"fc.w", NC, C2 * 4, 0, 0, 2, AMP_INIT_KAIMING},
	    {"fc.b", NC, 0, 0, 0, 1, AMP_INIT_ZEROS},
	};
	for (int i = 0; i < 12; i++) {
		amp_shape s = spec[i].ndim == 4
		                  ? amp_shape4(spec[i].d0, spec[i].d1, spec[i].d2, spec[i].d3)
		              : spec[i].ndim == 2 ? amp_shape2(spec[i].d0, spec[i].d1)
		                                  : amp_shape1(spec[i].d0);
		cr_assert_eq(amp_param_new(n->ctx, spec[i].label, s, spec[i].init, 1, &n->p[i]),
		             AMP_OK, "%s", amp_ctx_error(n->ctx));
	}
	amp_adamw_options ao = {
	    .lr = 3e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.01f};
	cr_assert_eq(amp_optim_adamw_new(n->ctx, &ao, &n->opt), AMP_OK);
}

/* A data-parallel backend that only records the activation bytes when backward begins (after
 * memory_optimize dropped what it recomputes). */
static void probe_begin(void *state, amp_ctx *ctx)
{
	amp_run_stats st;
	amp_run_stats_get(ctx, &st);
	((cnet *)state)->act_at_backward = st.bytes_activations;
}
static void probe_ready(void *state, amp_ctx *ctx, int i)
{
	(void)state, (void)ctx, (void)i;
}
static void probe_ctx(void *state, amp_ctx *ctx)
{
	(void)state, (void)ctx;
}
static int probe_end(void *state, amp_ctx *ctx)
{
	(void)state, (void)ctx;
	return AMP_OK;
}
static int probe_reduce(void *state, amp_ctx *ctx, double *divisor)
{
	(void)state, (void)ctx;
	*divisor = 1;
	return AMP_OK;
}
static int probe_step_end(void *state, amp_ctx *ctx)
{
	cnet *n = state;
	return n->fail_step_end ? amp_dist_fail(ctx, AMP_EIO, "probe: the step's reduction failed")
	                        : AMP_OK;
}
static const amp_dist_ops probe_ops = {.backward_begin = probe_begin,
                                       .grad_ready = probe_ready,
                                       .progress = probe_ctx,
                                       .backward_end = probe_end,
                                       .reduce = probe_reduce,
                                       .step_end = probe_step_end,
                                       .detach = probe_ctx};

/* The forward of one step on data that depends only on the step index; the loss. */
static amp_tensor *cnet_forward(cnet *n)
{
	amp_ctx *ctx = n->ctx;
	int64_t s = amp_step_index(ctx);
	float x[CB * CS * CS];
	int32_t t[CB];
	for (int i = 0; i < CB * CS * CS; i++)
		x[i] = (float)sin(0.53 * (double)i + 1.7 * (double)s);
	for (int i = 0; i < CB; i++)
		t[i] = (int32_t)((3 * i + s) % NC);
	amp_tensor *xt, *tt, *c1, *r1, *a1, *c2, *r2, *flat, *lo, *loss, **p = n->p;
	cr_assert_eq(amp_tensor_from_f32(ctx, x, amp_shape4(CB, 1, CS, CS), AMP_F32, &xt), AMP_OK);
	cr_assert_eq(amp_tensor_from_i32(ctx, t, amp_shape1(CB), &tt), AMP_OK);
#define OK(call) cr_assert_eq((call), AMP_OK, "%s", amp_ctx_error(ctx))
	OK(amp_conv2d(ctx, "conv1", xt, p[0], NULL, 1, 1, &c1));
	OK(amp_batch_norm2d(ctx, "bn1", c1, p[1], p[2], p[3], p[4], 0.1f, 1e-5f, &n->bn1));
	OK(amp_gelu(ctx, "gelu1", n->bn1, &r1));
	OK(amp_add(ctx, "res1", r1, n->bn1, &a1));
	OK(amp_maxpool2d(ctx, "pool1", a1, 2, 2, &n->pool1)); /* (CB,C1,4,4) */
	OK(amp_conv2d(ctx, "conv2", n->pool1, p[5], NULL, 1, 1, &c2));
	OK(amp_batch_norm2d(ctx, "bn2", c2, p[6], p[7], p[8], p[9], 0.1f, 1e-5f, &n->bn2));
	OK(amp_maxpool2d(ctx, "pool2", n->bn2, 2, 2, &n->pool2)); /* (CB,C2,2,2) */
	OK(amp_relu(ctx, "relu2", n->pool2, &r2));
	OK(amp_reshape(ctx, "flat", r2, amp_shape2(CB, C2 * 4), &flat));
	OK(amp_linear(ctx, "fc", flat, p[10], p[11], &lo));
	OK(amp_cross_entropy(ctx, "ce", lo, tt, &loss));
	if (n->alias) {
		amp_tensor *v, *sq, *m, *sm, *sum;
		OK(amp_reshape(ctx, "bn1.flat", n->bn1, amp_shape2(CB, C1 * CS * CS), &v));
		OK(amp_mul(ctx, "bn1.sq", v, v, &sq)); /* its backward reads v */
		OK(amp_mean(ctx, "bn1.mean", sq, &m));
		OK(amp_scale(ctx, "bn1.scale", m, 0.25f, &sm));
		OK(amp_add(ctx, "loss", loss, sm, &sum));
		loss = sum;
	}
#undef OK
	return loss;
}

/* One step: the loss, and the masters' gradients after backward into grads (CNW floats). */
static double cnet_step(cnet *n, float *grads)
{
	amp_ctx *ctx = n->ctx;
	cr_assert_eq(amp_step_begin(ctx), AMP_OK, "%s", amp_ctx_error(ctx));
	for (int m = 0; m < n->micro; m++) {
		if (n->micro > 1)
			cr_assert_eq(amp_micro_batch_begin(ctx), AMP_OK, "%s", amp_ctx_error(ctx));
		amp_tensor *loss = cnet_forward(n);
		cr_assert_eq(amp_backward(ctx, loss), AMP_OK, "%s", amp_ctx_error(ctx));
	}
	for (int i = 0; i < 12; i++) {
		const amp_tensor *g = amp_tensor_grad(n->p[i]);
		int64_t len = n->p[i]->numel;
		if (g)
			memcpy(grads, g->data, (size_t)len * sizeof(float));
		else
			memset(grads, 0, (size_t)len * sizeof(float));
		grads += len;
	}
	cr_assert_eq(amp_optim_step(n->opt, NULL), AMP_OK, "%s", amp_ctx_error(ctx));
	double l = ctx->step_loss;
	cr_assert_eq(amp_step_end(ctx), AMP_OK);
	return l;
}

/* The same losses, master gradients and weights (running statistics included) bit for bit
 * with memory_optimize on as off; with it on, the unoptimized peak is the peak without it. */
static void cnet_identical(const char *mode, int alias, int micro)
{
	double loss[2][STEPS];
	static float grads[2][STEPS][CNW], weights[2][CNW];
	amp_run_stats st[2];
	for (int on = 0; on < 2; on++) {
		cnet n;
		cnet_new(&n, mode, on, alias, micro);
		for (int s = 0; s < STEPS; s++)
			loss[on][s] = cnet_step(&n, grads[on][s]);
		float *w = weights[on];
		for (int i = 0; i < 12; i++) {
			memcpy(w, n.p[i]->data, (size_t)n.p[i]->numel * sizeof(float));
			w += n.p[i]->numel;
		}
		amp_run_stats_get(n.ctx, &st[on]);
		amp_ctx_free(n.ctx);
	}
	for (int s = 0; s < STEPS; s++) {
		cr_assert_eq(memcmp(&loss[0][s], &loss[1][s], sizeof loss[0][s]), 0,
		             "%s step %d: loss %.17g off, %.17g on", mode, s, loss[0][s],
		             loss[1][s]);
		cr_assert_eq(memcmp(grads[0][s], grads[1][s], sizeof grads[0][s]), 0,
		             "%s step %d: gradients differ", mode, s);
	}
	cr_assert_eq(memcmp(weights[0], weights[1], sizeof weights[0]), 0, "%s: weights differ",
	             mode);
	cr_assert(isfinite(loss[0][STEPS - 1]), "%s: loss %.9g", mode, loss[0][STEPS - 1]);
	cr_assert_eq(st[1].peak_bytes_unoptimized, st[0].peak_bytes, "%s: %llu vs %llu", mode,
	             (unsigned long long)st[1].peak_bytes_unoptimized,
	             (unsigned long long)st[0].peak_bytes);
	cr_assert_lt(st[1].peak_bytes, st[0].peak_bytes);
}

Test(memory_optimize, bn_pool_bit_identical_fp32)
{
	cnet_identical("force_fp32", 0, 1);
}
Test(memory_optimize, bn_pool_bit_identical_fp16)
{
	cnet_identical("allow_mix_precision", 0, 1);
}
Test(memory_optimize, bn_pool_bit_identical_bf16)
{
	cnet_identical("allow_mix_precision_bf16", 0, 1);
}
/* BatchNorm and pooling in the half type itself: the recompute reads and writes fp16 blocks */
Test(memory_optimize, bn_pool_bit_identical_force_fp16)
{
	cnet_identical("force_fp16", 0, 1);
}
/* with micro-batches: each backward drops and recomputes its own micro-batch's outputs */
Test(memory_optimize, bn_pool_bit_identical_micro_batches)
{
	cnet_identical("allow_mix_precision", 0, 2);
}
Test(memory_optimize, bn_output_read_through_an_alias)
{
	cnet_identical("allow_mix_precision", 1, 1);
}

/* The activation bytes drop by what is not kept: after the forward, the two pools' argmax
 * (int32 per output); when backward begins, the two BatchNorm outputs as well.  The
 * unoptimized ledger still counts them all.  The backward runs two ops more: the two
 * recomputes (none for the Add). */
static void cnet_saving(const char *mode)
{
	amp_run_stats fwd[2], end[2];
	uint64_t at_backward[2], argmax = 0, bn_out = 0;
	for (int on = 0; on < 2; on++) {
		cnet n;
		cnet_new(&n, mode, on, 0, 1);
		cr_assert_eq(amp_dist_attach(n.ctx, &probe_ops, &n), AMP_OK);
		amp_ctx *ctx = n.ctx;
		cr_assert_eq(amp_step_begin(ctx), AMP_OK);
		amp_tensor *loss = cnet_forward(&n);
		amp_run_stats_get(ctx, &fwd[on]);
		argmax = (uint64_t)(n.pool1->numel + n.pool2->numel) * sizeof(int32_t);
		bn_out = (uint64_t)n.bn1->numel * amp_dtype_size(n.bn1->dtype) +
		         (uint64_t)n.bn2->numel * amp_dtype_size(n.bn2->dtype);
		cr_assert_eq(amp_backward(ctx, loss), AMP_OK, "%s", amp_ctx_error(ctx));
		at_backward[on] = n.act_at_backward;
		cr_assert_eq(
		    ctx->mem_unopt[AMP_MEM_ACTIVATIONS] - ctx->mem[AMP_MEM_ACTIVATIONS] > 0, on);
		cr_assert_eq(amp_optim_step(n.opt, NULL), AMP_OK, "%s", amp_ctx_error(ctx));
		cr_assert_eq(amp_step_end(ctx), AMP_OK);
		amp_run_stats_get(ctx, &end[on]);
		amp_ctx_free(ctx);
	}
	cr_assert_eq(end[1].ops_dispatched - end[0].ops_dispatched, 2, "%s: %lld ops on, %lld off",
	             mode, (long long)end[1].ops_dispatched, (long long)end[0].ops_dispatched);
	cr_assert_eq(fwd[0].bytes_activations - fwd[1].bytes_activations, argmax,
	             "%s after the forward: %llu off, %llu on, argmax %llu bytes", mode,
	             (unsigned long long)fwd[0].bytes_activations,
	             (unsigned long long)fwd[1].bytes_activations, (unsigned long long)argmax);
	cr_assert_eq(
	    at_backward[0] - at_backward[1], argmax + bn_out,
	    "%s when backward begins: %llu off, %llu on, argmax %llu + BatchNorm %llu bytes", mode,
	    (unsigned long long)at_backward[0], (unsigned long long)at_backward[1],
	    (unsigned long long)argmax, (unsigned long long)bn_out);
	cr_assert_eq(at_backward[0], fwd[0].bytes_activations, "nothing dropped without it");
	cr_log_info("%s: %llu activation bytes off, %llu on after the forward; %llu on when "
	            "backward begins\n",
	            mode, (unsigned long long)fwd[0].bytes_activations,
	            (unsigned long long)fwd[1].bytes_activations,
	            (unsigned long long)at_backward[1]);
}

Test(memory_optimize, bn_pool_activation_bytes_fp32)
{
	cnet_saving("force_fp32");
}
Test(memory_optimize, bn_pool_activation_bytes_fp16)
{
	cnet_saving("allow_mix_precision");
}
Test(memory_optimize, bn_pool_activation_bytes_bf16)
{
	cnet_saving("allow_mix_precision_bf16");
}

/* Without a tape node (not training) a max pool keeps no argmax, in either ledger. */
Test(memory_optimize, pool_keeps_no_argmax_when_not_training)
{
	for (int on = 0; on < 2; on++) {
		amp_ctx *ctx = mkctx("memory_optimize", on ? "on" : "off", NULL);
		amp_set_training(ctx, 0);
		static float x[2 * 3 * 8 * 8];
		amp_tensor *xt, *y;
		cr_assert_eq(amp_step_begin(ctx), AMP_OK);
		cr_assert_eq(amp_tensor_from_f32(ctx, x, amp_shape4(2, 3, 8, 8), AMP_F32, &xt),
		             AMP_OK);
		amp_run_stats before, after;
		amp_run_stats_get(ctx, &before);
		cr_assert_eq(amp_maxpool2d(ctx, "pool", xt, 2, 2, &y), AMP_OK, "%s",
		             amp_ctx_error(ctx));
		amp_run_stats_get(ctx, &after);
		uint64_t out = (uint64_t)y->numel * sizeof(float);
		cr_assert_eq(after.bytes_activations - before.bytes_activations, out);
		cr_assert_eq(ctx->mem_unopt[AMP_MEM_ACTIVATIONS], ctx->mem[AMP_MEM_ACTIVATIONS]);
		cr_assert_eq(amp_step_end(ctx), AMP_OK);
		amp_ctx_free(ctx);
	}
}

/* A backend's failure at the step's end (a reduction it had to complete there) reaches the
 * caller of amp_step_end, with its message, and the step has ended all the same. */
Test(dist, step_end_error_returned_after_the_step_ended)
{
	cnet n;
	cnet_new(&n, "allow_mix_precision_fp16", 0, 0, 1);
	amp_ctx *ctx = n.ctx;
	cr_assert_eq(amp_dist_attach(ctx, &probe_ops, &n), AMP_OK);
	n.fail_step_end = 1;
	cr_assert_eq(amp_step_begin(ctx), AMP_OK);
	cr_assert_eq(amp_backward(ctx, cnet_forward(&n)), AMP_OK, "%s", amp_ctx_error(ctx));
	cr_assert_eq(amp_step_end(ctx), AMP_EIO);
	cr_assert(strstr(amp_ctx_error(ctx), "the step's reduction failed"), "%s", amp_ctx_error(ctx));
	n.fail_step_end = 0;
	cr_assert_eq(amp_step_begin(ctx), AMP_OK, "the step ended: %s", amp_ctx_error(ctx));
	cr_assert_eq(amp_step_end(ctx), AMP_OK);
	amp_ctx_free(ctx);
}

/* y (n values of dt) holds want (FP32 results) rounded once to dt: the same bits, NaN for NaN. */
static void expect_rounded(amp_dtype dt, const void *y, float *want, int64_t n, const char *what,
                           const float *operand)
{
	static char w[4 * 4096];
	static float got[4096];
	cr_assert(n <= 4096);
	amp_cvt(dt, w, AMP_F32, want, n);
	amp_cvt(AMP_F32, want, dt, w, n);
	amp_cvt(AMP_F32, got, dt, y, n);
	for (int64_t i = 0; i < n; i++)
		cr_assert(memcmp(&want[i], &got[i], 4) == 0 || (isnan(want[i]) && isnan(got[i])),
		          "%s %s [%lld] of %a: %a, want %a", amp_dtype_name(dt), what, (long long)i,
		          (double)operand[i], (double)got[i], (double)want[i]);
}

/* The data-parallel backend's arithmetic: y += x and y *= f, each result the FP32 one rounded
 * once to the dtype, on every float dtype, specials and subnormals among the values. */
Test(dist, add_and_scale_round_once)
{
	enum { N = 3000 };
	static const uint32_t special[] = {0x7f800000u, 0xff800000u, 0x00000001u, 0x80000000u,
	                                   0x477fe000u, 0x33800000u, 0x7f7fffffu, 0x3f800000u};
	const amp_dtype dts[] = {AMP_F32, AMP_F16, AMP_BF16};
	uint64_t s = 77;
	for (int d = 0; d < 3; d++) {
		size_t esz = amp_dtype_size(dts[d]);
		static float xf[N], yf[N], want[N];
		static char x[N * 4], y[N * 4], y2[N * 4];
		for (int i = 0; i < N; i++) {
			s = s * 6364136223846793005ull + 1442695040888963407ull;
			uint32_t bits = (uint32_t)(s >> 32);
			float v = i % 17 == 0 ? 0 : (float)((int32_t)bits) / 2147483648.0f *
			                               ldexpf(1.0f, (int)(bits % 40) - 24);
			if (i % 97 == 0)
				memcpy(&v, &special[(i / 97) % 8], sizeof v);
			(i % 2 ? xf : yf)[i / 2] = v;
			(i % 2 ? yf : xf)[N - 1 - i / 2] = -v * 0.75f;
		}
		/* the operands as the dtype holds them */
		amp_cvt(dts[d], x, AMP_F32, xf, N);
		amp_cvt(dts[d], y, AMP_F32, yf, N);
		amp_cvt(AMP_F32, xf, dts[d], x, N);
		amp_cvt(AMP_F32, yf, dts[d], y, N);
		memcpy(y2, y, (size_t)N * esz);
		amp_dist_add(dts[d], y, x, N);
		for (int i = 0; i < N; i++)
			want[i] = yf[i] + xf[i];
		expect_rounded(dts[d], y, want, N, "y + x", yf);
		amp_dist_scale(dts[d], y2, 0.5f, N);
		for (int i = 0; i < N; i++)
			want[i] = yf[i] * 0.5f;
		expect_rounded(dts[d], y2, want, N, "y / 2", yf);
	}
}

/* ---- what data-parallel ranks compare (amp_dist_shared_state) ------------------------------ */

static char *shared(amp_ctx *ctx, const char *name)
{
	static char buf[512];
	int n = amp_dist_shared_state(ctx, name, buf, sizeof buf);
	cr_assert(n >= 0 && (size_t)n < sizeof buf, "%s: %d", name, n);
	return buf;
}

/* The lists in force, whatever their spelling; a key's value without overwriting the text
 * amp_config_get returned; snprintf's contract; unknown names. */
Test(dist_state, lists_keys_and_lengths)
{
	amp_ctx *a = mkctx("custom_black_list", "Linear,ReLU", "custom_white_list", "Softmax", NULL);
	amp_ctx *b = mkctx("custom_white_list", " Softmax ", "custom_black_list", "ReLU , Linear", NULL);
	char la[512];
	snprintf(la, sizeof la, "%s", shared(a, "custom lists"));
	cr_assert_str_eq(la, "white: Softmax; black: Linear, ReLU");
	cr_assert_str_eq(shared(b, "custom lists"), la);
	amp_ctx *c = mkctx(NULL);
	cr_assert_str_eq(shared(c, "custom lists"), "none");

	const char *seed = amp_config_get(a, "seed");
	char was[64];
	snprintf(was, sizeof was, "%s", seed);
	cr_assert_str_eq(shared(a, "loss_scale_max"), amp_config_get(b, "loss_scale_max"));
	cr_assert_str_eq(seed, was, "amp_config_get's text was overwritten");

	char small[8];
	int n = amp_dist_shared_state(a, "custom lists", small, sizeof small);
	cr_assert_eq(n, (int)strlen(la));
	cr_assert_str_eq(small, "white: ");
	cr_assert_eq(amp_dist_shared_state(a, "custom lists", NULL, 0), n);
	cr_assert_eq(amp_dist_shared_state(a, "no such thing", small, sizeof small), -1);
	amp_ctx_free(a);
	amp_ctx_free(b);
	amp_ctx_free(c);
}

/* "updates" follows the hyperparameters each update used, so that a learning rate changed
 * and put back between backward and the update shows; a load starts it again. */
Test(dist_state, updates_follow_the_hyperparameters)
{
	mktmp();
	char ck[512], ha[128], hb[128], oa[512], ob[512];
	snprintf(ck, sizeof ck, "%s", in_tmp("u.ckpt"));
	net a, b;
	net_new(&a, "allow_mix_precision", NULL, NULL);
	net_new(&b, "allow_mix_precision", NULL, NULL);
	snprintf(ha, sizeof ha, "%s", shared(a.ctx, "updates"));
	net_step(&a);
	net_step(&b);
	cr_assert_str_neq(shared(a.ctx, "updates"), ha, "an update leaves no trace");
	snprintf(ha, sizeof ha, "%s", shared(a.ctx, "updates"));
	cr_assert_str_eq(shared(b.ctx, "updates"), ha);
	/* the same step on both; b's learning rate changed and put back around its update */
	cr_assert_eq(amp_backward(a.ctx, net_forward(&a)), AMP_OK);
	cr_assert_eq(amp_optim_step(a.opt, NULL), AMP_OK);
	cr_assert_eq(amp_step_end(a.ctx), AMP_OK);
	cr_assert_eq(amp_backward(b.ctx, net_forward(&b)), AMP_OK);
	amp_optim_set_lr(b.opt, 0.5f);
	cr_assert_eq(amp_optim_step(b.opt, NULL), AMP_OK);
	amp_optim_set_lr(b.opt, 3e-3f);
	cr_assert_eq(amp_step_end(b.ctx), AMP_OK);
	snprintf(oa, sizeof oa, "%s", shared(a.ctx, "optimizers"));
	snprintf(ob, sizeof ob, "%s", shared(b.ctx, "optimizers"));
	cr_assert_str_eq(oa, ob, "the optimizers look alike now");
	snprintf(ha, sizeof ha, "%s", shared(a.ctx, "updates"));
	snprintf(hb, sizeof hb, "%s", shared(b.ctx, "updates"));
	cr_assert_str_neq(ha, hb, "the updates that differed do not show");
	/* the same with gradient clipping, which the update reads too */
	cr_assert_eq(amp_checkpoint_save(a.ctx, ck), AMP_OK);
	cr_assert_eq(amp_checkpoint_load(a.ctx, ck), AMP_OK);
	cr_assert_eq(amp_checkpoint_load(b.ctx, ck), AMP_OK);
	cr_assert_eq(amp_backward(a.ctx, net_forward(&a)), AMP_OK);
	cr_assert_eq(amp_optim_step(a.opt, NULL), AMP_OK);
	cr_assert_eq(amp_step_end(a.ctx), AMP_OK);
	cr_assert_eq(amp_backward(b.ctx, net_forward(&b)), AMP_OK);
	cr_assert_eq(amp_config_set(b.ctx, "gradient_clipping", "0.5"), AMP_OK);
	cr_assert_eq(amp_optim_step(b.opt, NULL), AMP_OK);
	cr_assert_eq(amp_config_set(b.ctx, "gradient_clipping", "2"), AMP_OK);
	cr_assert_eq(amp_step_end(b.ctx), AMP_OK);
	snprintf(ha, sizeof ha, "%s", shared(a.ctx, "updates"));
	snprintf(hb, sizeof hb, "%s", shared(b.ctx, "updates"));
	cr_assert_str_neq(ha, hb, "clipping changed around the update does not show");
	/* both load the same file: the histories start again, alike */
	cr_assert_eq(amp_checkpoint_save(a.ctx, ck), AMP_OK);
	cr_assert_eq(amp_checkpoint_load(a.ctx, ck), AMP_OK);
	cr_assert_eq(amp_checkpoint_load(b.ctx, ck), AMP_OK);
	snprintf(ha, sizeof ha, "%s", shared(a.ctx, "updates"));
	cr_assert_str_eq(shared(b.ctx, "updates"), ha);
	amp_ctx_free(a.ctx);
	amp_ctx_free(b.ctx);
	rmtmp();
}

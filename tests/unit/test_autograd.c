/* test_autograd.c — the step lifecycle, tensors and parameters, memory accounting, the tape
 * and the reverse pass, and the errors for calls out of order or bad arguments.
 *
 * Gradients are checked against hand derivatives on small fp32 graphs built from Add, Mul and
 * Scale (exact in fp32 for the values used).
 */
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "internal.h"

static amp_ctx *mkctx(const char *mode)
{
	amp_ctx *ctx = NULL;
	cr_assert_eq(amp_ctx_new(NULL, &ctx, NULL, 0), AMP_OK);
	cr_assert_eq(amp_config_set(ctx, "precision_mode", mode), AMP_OK);
	return ctx;
}

static void expect_err(amp_ctx *ctx, int rc, int code, const char *needle)
{
	cr_assert_eq(rc, code, "rc %d (%s), expected %d", rc, amp_ctx_error(ctx), code);
	if (needle)
		cr_assert_not_null(strstr(amp_ctx_error(ctx), needle),
		                   "message \"%s\" lacks \"%s\"", amp_ctx_error(ctx), needle);
}

/* ---- order of calls ---------------------------------------------------------------------- */

Test(autograd, op_before_step_begin)
{
	amp_ctx *ctx = mkctx("allow_mix_precision");
	amp_tensor *w, *y = NULL, *t;
	cr_assert_eq(amp_param_new(ctx, "w", amp_shape1(4), AMP_INIT_ONES, 0, &w), AMP_OK);
	expect_err(ctx, amp_add(ctx, "first", w, w, &y), AMP_ESTATE, "Add 'first': no step begun");
	cr_assert_null(y);
	expect_err(ctx, amp_scale(ctx, NULL, w, 2, &y), AMP_ESTATE, "Scale '-'");
	float v = 1;
	expect_err(ctx, amp_tensor_new(ctx, AMP_F32, amp_shape1(1), &t), AMP_ESTATE, "no step");
	expect_err(ctx, amp_tensor_from_f32(ctx, &v, amp_shape1(1), AMP_F32, &t), AMP_ESTATE, NULL);
	int32_t i = 0;
	expect_err(ctx, amp_tensor_from_i32(ctx, &i, amp_shape1(1), &t), AMP_ESTATE, NULL);
	expect_err(ctx, amp_backward(ctx, w), AMP_ESTATE, "amp_backward");
	expect_err(ctx, amp_step_end(ctx), AMP_ESTATE, "amp_step_end");
	/* After a step ends, ops are refused again. */
	cr_assert_eq(amp_step_begin(ctx), AMP_OK);
	cr_assert_eq(amp_add(ctx, "ok", w, w, &y), AMP_OK);
	cr_assert_eq(amp_step_end(ctx), AMP_OK);
	expect_err(ctx, amp_add(ctx, "late", w, w, &y), AMP_ESTATE, "Add 'late'");
	amp_ctx_free(ctx);
}

Test(autograd, step_begin_twice_and_index)
{
	amp_ctx *ctx = mkctx("allow_mix_precision");
	cr_assert_eq(amp_step_index(ctx), -1);
	cr_assert_eq(amp_step_begin(ctx), AMP_OK);
	cr_assert_eq(amp_step_index(ctx), 0);
	expect_err(ctx, amp_step_begin(ctx), AMP_ESTATE, "still open");
	cr_assert_eq(amp_step_index(ctx), 0);
	amp_step_set_samples(ctx, 32);
	cr_assert_eq(ctx->samples, 32);
	cr_assert_eq(amp_step_end(ctx), AMP_OK);
	cr_assert_eq(amp_step_begin(ctx), AMP_OK);
	cr_assert_eq(amp_step_index(ctx), 1);
	cr_assert_eq(ctx->samples, 0);
	cr_assert_eq(amp_step_end(ctx), AMP_OK);
	amp_run_stats st;
	amp_run_stats_get(ctx, &st);
	cr_assert_eq(st.steps, 2);
	cr_assert_eq(amp_step_begin(NULL), AMP_EINVAL);
	cr_assert_eq(amp_step_end(NULL), AMP_EINVAL);
	amp_ctx_free(ctx);
}

Test(autograd, backward_twice)
{
	amp_ctx *ctx = mkctx("force_fp32");
	amp_tensor *w, *y;
	cr_assert_eq(amp_param_new(ctx, "w", amp_shape1(1), AMP_INIT_ONES, 0, &w), AMP_OK);
	cr_assert_eq(amp_step_begin(ctx), AMP_OK);
	cr_assert_eq(amp_scale(ctx, "y", w, 3, &y), AMP_OK);
	cr_assert_eq(amp_backward(ctx, y), AMP_OK);
	cr_assert_eq(((float *)w->grad->data)[0], 3.0f);
	expect_err(ctx, amp_backward(ctx, y), AMP_ESTATE, "already run in step 0");
	cr_assert_eq(((float *)w->grad->data)[0], 3.0f, "second backward accumulated");
	cr_assert_eq(amp_step_end(ctx), AMP_OK);
	/* A new step may run backward again; without an optimizer step, grads accumulate. */
	cr_assert_eq(amp_step_begin(ctx), AMP_OK);
	cr_assert_eq(amp_scale(ctx, "y", w, 3, &y), AMP_OK);
	cr_assert_eq(amp_backward(ctx, y), AMP_OK);
	cr_assert_eq(((float *)w->grad->data)[0], 6.0f);
	amp_ctx_free(ctx);
}

Test(autograd, backward_bad_arguments)
{
	amp_ctx *ctx = mkctx("force_fp32");
	amp_tensor *w, *y, *c;
	cr_assert_eq(amp_param_new(ctx, "w", amp_shape1(3), AMP_INIT_ONES, 0, &w), AMP_OK);
	cr_assert_eq(amp_step_begin(ctx), AMP_OK);
	cr_assert_eq(amp_scale(ctx, "y", w, 3, &y), AMP_OK);
	expect_err(ctx, amp_backward(ctx, y), AMP_ESHAPE, "scalar");
	expect_err(ctx, amp_backward(ctx, NULL), AMP_EINVAL, NULL);
	cr_assert_eq(amp_backward(NULL, y), AMP_EINVAL);
	int32_t lab = 1;
	cr_assert_eq(amp_tensor_from_i32(ctx, &lab, amp_shape1(1), &c), AMP_OK);
	expect_err(ctx, amp_backward(ctx, c), AMP_ESHAPE, NULL);
	/* A loss that needs no gradient: its value is recorded and nothing else happens. */
	float v = 2.5f;
	cr_assert_eq(amp_tensor_from_f32(ctx, &v, amp_shape1(1), AMP_F32, &c), AMP_OK);
	cr_assert_eq(amp_backward(ctx, c), AMP_OK);
	cr_assert_eq(ctx->step_loss, 2.5);
	cr_assert_null(w->grad);
	expect_err(ctx, amp_backward(ctx, c), AMP_ESTATE, NULL);
	amp_ctx_free(ctx);
}

Test(autograd, op_argument_errors)
{
	amp_ctx *ctx = mkctx("allow_mix_precision");
	cr_assert_eq(amp_step_begin(ctx), AMP_OK);
	amp_tensor *a, *b, *i, *y = NULL;
	int32_t iv[4] = {0, 1, 2, 3};
	cr_assert_eq(amp_tensor_new(ctx, AMP_F32, amp_shape2(2, 4), &a), AMP_OK);
	cr_assert_eq(amp_tensor_new(ctx, AMP_F32, amp_shape1(3), &b), AMP_OK);
	cr_assert_eq(amp_tensor_from_i32(ctx, iv, amp_shape1(4), &i), AMP_OK);
	expect_err(ctx, amp_add(ctx, "bc", a, b, &y), AMP_ESHAPE,
	           "Add 'bc': shapes (2,4) and (3) do not broadcast");
	expect_err(ctx, amp_mul(ctx, "ty", a, i, &y), AMP_EDTYPE, "Mul 'ty': input 1 is int32");
	expect_err(ctx, amp_add(ctx, "nul", a, NULL, &y), AMP_EINVAL, "Add 'nul': input 1 is NULL");
	cr_assert_null(y);
	cr_assert_eq(amp_add(NULL, "x", a, a, &y), AMP_EINVAL);
	amp_ctx_free(ctx);
}

/* ---- tensors, parameters, shapes --------------------------------------------------------- */

Test(autograd, tensors_and_shapes)
{
	amp_ctx *ctx = mkctx("allow_mix_precision");
	cr_assert_eq(amp_step_begin(ctx), AMP_OK);
	amp_tensor *t;
	const float v[6] = {1, -2, 0.5f, 65504, 1e-8f, 3};
	cr_assert_eq(amp_tensor_from_f32(ctx, v, amp_shape2(2, 3), AMP_F16, &t), AMP_OK);
	cr_assert_eq(amp_tensor_dtype(t), AMP_F16);
	cr_assert_eq(amp_tensor_numel(t), 6);
	cr_assert(amp_shape_eq(amp_tensor_shape(t), amp_shape2(2, 3)));
	cr_assert_eq((uintptr_t)amp_tensor_data(t) % 64, 0, "not 64-byte aligned");
	float back[6];
	cr_assert_eq(amp_tensor_read_f32(ctx, t, back), AMP_OK);
	for (int k = 0; k < 6; k++)
		cr_assert_eq(back[k], amp_f16_to_f32(amp_f32_to_f16(v[k])));
	cr_assert_eq(amp_tensor_read_f32(ctx, t, NULL), AMP_EINVAL);
	cr_assert(isnan(amp_tensor_item(ctx, t)), "item of a 6-element tensor");
	cr_assert(strstr(amp_ctx_error(ctx), "amp_tensor_item: tensor of shape") != NULL,
	          "the error says why, not the previous one: '%s'", amp_ctx_error(ctx));
	amp_tensor *s;
	cr_assert_eq(amp_tensor_from_f32(ctx, v + 2, (amp_shape){0, {0}}, AMP_F32, &s), AMP_OK);
	cr_assert_eq(amp_tensor_numel(s), 1);
	cr_assert_eq(amp_tensor_item(ctx, s), 0.5);
	cr_assert_eq(amp_tensor_from_f32(ctx, v, amp_shape1(1), AMP_I32, &s), AMP_EINVAL);
	expect_err(ctx, amp_tensor_new(ctx, (amp_dtype)1000, amp_shape1(4), &t), AMP_EINVAL,
	           "unknown dtype");

	static const amp_shape bad[] = {
	    {1, {0, 0, 0, 0}},
	    {2, {3, -1, 0, 0}},
	    {5, {1, 1, 1, 1}},
	    {-1, {1, 0, 0, 0}},
	    {4, {1 << 30, 1 << 30, 1 << 30, 1 << 30}},
	};
	for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
		expect_err(ctx, amp_tensor_new(ctx, AMP_F32, bad[k], &t), AMP_ESHAPE,
		           "invalid tensor shape");
		expect_err(ctx, amp_param_new(ctx, "p", bad[k], AMP_INIT_ZEROS, 0, &t), AMP_ESHAPE,
		           NULL);
	}
	cr_assert_str_eq(amp_dtype_name(AMP_F32), "fp32");
	cr_assert_str_eq(amp_dtype_name(AMP_F16), "fp16");
	cr_assert_str_eq(amp_dtype_name(AMP_I32), "int32");
	cr_assert_eq(amp_dtype_size(AMP_F16), 2);
	cr_assert_eq(amp_dtype_size(AMP_F32), 4);
	cr_assert_eq(amp_dtype_size(AMP_I32), 4);
	cr_assert_null(amp_tensor_grad(NULL));
	char buf[64];
	cr_assert_str_eq(amp_shape_str(amp_shape3(2, 784, 1), buf, sizeof buf), "(2,784,1)");
	cr_assert_str_eq(amp_shape_str((amp_shape){0, {0}}, buf, sizeof buf), "()");
	amp_ctx_free(ctx);
}

Test(autograd, param_init_deterministic)
{
	float a[64], b[64], c[64];
	for (int run = 0; run < 3; run++) {
		amp_ctx *ctx = mkctx("allow_mix_precision");
		cr_assert_eq(amp_config_set(ctx, "seed", run == 2 ? "2" : "1"), AMP_OK);
		amp_tensor *w, *k;
		cr_assert_eq(amp_param_new(ctx, "w", amp_shape2(8, 8), AMP_INIT_NORMAL, 0.1f, &w),
		             AMP_OK);
		cr_assert_eq(amp_param_new(ctx, "k", amp_shape2(4, 16), AMP_INIT_KAIMING, 1, &k),
		             AMP_OK);
		cr_assert_str_eq(w->param->label, "w");
		cr_assert(w->requires_grad && w->persistent && w->param->master == w);
		float bound = sqrtf(6.0f / 16.0f);
		for (int i = 0; i < 64; i++)
			cr_assert_leq(fabsf(((float *)k->data)[i]), bound);
		memcpy(run == 0 ? a : run == 1 ? b : c, w->data, sizeof a);
		amp_ctx_free(ctx);
	}
	cr_assert_eq(memcmp(a, b, sizeof a), 0, "same seed, different init");
	cr_assert_neq(memcmp(a, c, sizeof a), 0, "different seeds, same init");
	double mean = 0, var = 0;
	for (int i = 0; i < 64; i++)
		mean += (double)a[i] / 64;
	for (int i = 0; i < 64; i++)
		var += ((double)a[i] - mean) * ((double)a[i] - mean) / 63;
	cr_log_info("N(0, 0.1^2) init: mean %.4f std %.4f", mean, sqrt(var));
	cr_assert(fabs(mean) < 0.05 && sqrt(var) > 0.06 && sqrt(var) < 0.14);

	amp_ctx *ctx = mkctx("allow_mix_precision");
	amp_tensor *w;
	cr_assert_eq(amp_param_new(ctx, NULL, amp_shape1(4), AMP_INIT_ONES, 0, &w), AMP_OK);
	cr_assert_str_eq(w->param->label, "param");
	cr_assert_eq(amp_param_load(ctx, NULL, a), AMP_EINVAL);
	cr_assert_eq(amp_step_begin(ctx), AMP_OK);
	amp_tensor *t;
	cr_assert_eq(amp_tensor_new(ctx, AMP_F32, amp_shape1(4), &t), AMP_OK);
	expect_err(ctx, amp_param_load(ctx, t, a), AMP_EINVAL, "not a parameter");
	expect_err(ctx, amp_param_load(ctx, w, NULL), AMP_EINVAL, "NULL argument");
	/* an init outside the enum, a scale that is not finite: refused, nothing made */
	amp_tensor *bad = NULL;
	expect_err(ctx, amp_param_new(ctx, "u", amp_shape1(4), (amp_init)77, 1, &bad), AMP_EINVAL,
	           "amp_param_new 'u': unknown init 77");
	expect_err(ctx, amp_param_new(ctx, "v", amp_shape1(4), AMP_INIT_UNIFORM, NAN, &bad),
	           AMP_EINVAL, "scale nan is not finite");
	expect_err(ctx, amp_param_new(ctx, "v", amp_shape1(4), AMP_INIT_KAIMING, INFINITY, &bad),
	           AMP_EINVAL, "not finite");
	cr_assert_null(bad);
	cr_assert_eq(amp_param_new(ctx, "z", amp_shape1(4), AMP_INIT_ZEROS, NAN, &bad), AMP_OK,
	             "ZEROS and ONES take no scale");
	amp_ctx_free(ctx);
}

/* A tensor or parameter of one context given to another is refused by name, whatever the
 * call: before, the other context's backward wrote into its master gradient and, once it was
 * freed, read freed memory. */
Test(autograd, tensor_of_another_context_refused)
{
	amp_ctx *a = mkctx("allow_mix_precision"), *b = mkctx("allow_mix_precision");
	amp_tensor *z, *w, *x, *y, *xb, *l, *ids;
	cr_assert_eq(amp_param_new(b, "z", amp_shape2(3, 4), AMP_INIT_ONES, 0, &z), AMP_OK);
	cr_assert_eq(amp_param_new(a, "w", amp_shape2(3, 4), AMP_INIT_ONES, 0, &w), AMP_OK);
	cr_assert_eq(amp_step_begin(a), AMP_OK);
	cr_assert_eq(amp_step_begin(b), AMP_OK);
	cr_assert_eq(amp_tensor_new(a, AMP_F32, amp_shape2(2, 4), &x), AMP_OK);
	cr_assert_eq(amp_tensor_new(b, AMP_F32, amp_shape2(2, 4), &xb), AMP_OK);
	expect_err(a, amp_linear(a, "fc", x, z, NULL, &y), AMP_EINVAL,
	           "Linear 'fc': input 1: it belongs to another context");
	expect_err(a, amp_add(a, "add", x, xb, &y), AMP_EINVAL, "Add 'add': input 1: it belongs");
	int32_t iv[2] = {0, 1};
	cr_assert_eq(amp_tensor_from_i32(b, iv, amp_shape1(2), &ids), AMP_OK);
	expect_err(a, amp_embedding(a, "emb", w, ids, &y), AMP_EINVAL, "Embedding 'emb': ids: it");
	cr_assert_eq(amp_linear(a, "fc", x, w, NULL, &y), AMP_OK);
	expect_err(a, amp_cross_entropy(a, "ce", y, ids, &l), AMP_EINVAL, "targets: it belongs");
	cr_assert_eq(amp_sum(b, "s", xb, &l), AMP_OK);
	expect_err(a, amp_backward(a, l), AMP_EINVAL, "amp_backward: the loss: it belongs");
	float v[12];
	expect_err(a, amp_tensor_read_f32(a, xb, v), AMP_EINVAL, "belongs to another context");
	expect_err(a, amp_param_load(a, z, v), AMP_EINVAL, "belongs to another context");
	amp_ctx_free(b);
	amp_ctx_free(a);
}

/* The getters that return no code answer a NULL with a neutral value instead of crashing. */
Test(autograd, getters_take_null)
{
	cr_assert_eq(amp_tensor_numel(NULL), 0);
	cr_assert_eq(amp_tensor_shape(NULL).ndim, 0);
	cr_assert_eq(amp_tensor_dtype(NULL), AMP_F32);
	cr_assert_null(amp_tensor_data(NULL));
	cr_assert_null(amp_tensor_grad(NULL));
	cr_assert_eq(amp_step_index(NULL), -1);
	amp_step_set_samples(NULL, 5);
	cr_assert(isnan(amp_loss_scale(NULL)));
	amp_run_stats st;
	memset(&st, 0xff, sizeof st);
	amp_run_stats_get(NULL, &st);
	cr_assert_eq(st.steps, 0);
	cr_assert_eq(st.peak_bytes, 0);
	amp_ctx *ctx = mkctx("force_fp32");
	amp_run_stats_get(ctx, NULL);
	cr_assert_eq(amp_step_index(ctx), -1, "before the first step");
	amp_ctx_free(ctx);
}

/* ---- memory ------------------------------------------------------------------------------ */

Test(autograd, memory_accounting)
{
	amp_ctx *ctx = mkctx("allow_mix_precision");
	amp_tensor *w, *y, *x;
	cr_assert_eq(amp_param_new(ctx, "w", amp_shape1(1000), AMP_INIT_ONES, 0, &w), AMP_OK);
	amp_run_stats st;
	amp_run_stats_get(ctx, &st);
	cr_assert_eq(st.bytes_master, 4000);
	cr_assert_eq(st.bytes_activations + st.bytes_working + st.bytes_grads, 0);
	amp_optim *o;
	amp_adamw_options ao = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f};
	cr_assert_eq(amp_optim_adamw_new(ctx, &ao, &o), AMP_OK);
	uint64_t peak1 = 0;
	for (int step = 0; step < 3; step++) {
		cr_assert_eq(amp_step_begin(ctx), AMP_OK);
		cr_assert_eq(amp_tensor_new(ctx, AMP_F16, amp_shape1(1000), &x), AMP_OK);
		cr_assert_eq(amp_mul(ctx, "m", x, w, &y), AMP_OK);
		amp_run_stats_get(ctx, &st);
		cr_assert_eq(st.bytes_working, 2000);
		cr_assert_eq(st.bytes_activations, 2000 + 2000);
		float seed[1000];
		for (int i = 0; i < 1000; i++)
			seed[i] = 1;
		cr_assert_eq(amp_backward_seeded(ctx, y, seed), AMP_OK);
		cr_assert_eq(amp_optim_step(o, NULL), AMP_OK);
		amp_run_stats_get(ctx, &st);
		/* y's and the working copy's fp16 grads (step), the master's fp32 grad (kept). */
		cr_assert_eq(st.bytes_grads, 2000 + 2000 + 4000, "grads %llu",
		             (unsigned long long)st.bytes_grads);
		cr_assert_eq(st.bytes_optimizer, 8000);
		uint64_t live = st.bytes_master + st.bytes_working + st.bytes_activations +
		                st.bytes_grads + st.bytes_optimizer;
		cr_assert_geq(st.peak_bytes, live);
		cr_assert_eq(amp_step_end(ctx), AMP_OK);
		amp_run_stats_get(ctx, &st);
		cr_assert_eq(st.bytes_activations, 0);
		/* the working copy stays: the optimizer refreshes it as it updates the master */
		cr_assert_eq(st.bytes_working, 2000);
		cr_assert_eq(st.bytes_grads, 4000);
		if (step == 0)
			peak1 = st.peak_bytes;
		cr_assert_eq(st.peak_bytes, peak1, "peak grew in a steady state");
	}
	amp_ctx_free(ctx);
}

Test(autograd, arena_reused_across_steps)
{
	amp_ctx *ctx = mkctx("force_fp32");
	void *first[3] = {0};
	amp_tensor *big;
	for (int step = 0; step < 3; step++) {
		cr_assert_eq(amp_step_begin(ctx), AMP_OK);
		amp_tensor *t;
		cr_assert_eq(amp_tensor_new(ctx, AMP_F32, amp_shape1(100), &t), AMP_OK);
		first[step] = t->data;
		/* Larger than one chunk (8 MiB). */
		cr_assert_eq(amp_tensor_new(ctx, AMP_F32, amp_shape2(1024, 3000), &big), AMP_OK);
		cr_assert_eq((uintptr_t)big->data % 64, 0);
		float *d = big->data;
		for (int64_t i = 0; i < big->numel; i += 4096)
			cr_assert_eq(d[i], 0.0f, "arena memory not zeroed");
		d[0] = d[big->numel - 1] = 1;
		cr_assert_eq(amp_step_end(ctx), AMP_OK);
	}
	cr_assert_eq(first[1], first[0], "arena chunk not reused");
	cr_assert_eq(first[2], first[0]);
	cr_assert_eq(ctx->arena.used_total, 0);
	amp_ctx_free(ctx);
}

Test(autograd, free_with_open_step)
{
	amp_ctx *ctx = mkctx("allow_mix_precision");
	amp_tensor *w, *y;
	cr_assert_eq(amp_param_new(ctx, "w", amp_shape1(4), AMP_INIT_ONES, 0, &w), AMP_OK);
	cr_assert_eq(amp_step_begin(ctx), AMP_OK);
	cr_assert_eq(amp_scale(ctx, "s", w, 2, &y), AMP_OK);
	amp_ctx_free(ctx); /* ASan builds check nothing leaks */
	amp_ctx_free(NULL);
}

/* ---- the reverse pass -------------------------------------------------------------------- */

Test(autograd, hand_derivatives)
{
	/* y = 3 * (a * b + a), with a, b parameters: dy/da = 3 (b + 1), dy/db = 3 a. */
	amp_ctx *ctx = mkctx("force_fp32");
	const float av[4] = {1, -2, 0.5f, 4}, bv[4] = {3, 0.25f, -1, 2};
	amp_tensor *a, *b, *ab, *s, *y;
	cr_assert_eq(amp_param_new(ctx, "a", amp_shape1(4), AMP_INIT_ZEROS, 0, &a), AMP_OK);
	cr_assert_eq(amp_param_new(ctx, "b", amp_shape1(4), AMP_INIT_ZEROS, 0, &b), AMP_OK);
	cr_assert_eq(amp_param_load(ctx, a, av), AMP_OK);
	cr_assert_eq(amp_param_load(ctx, b, bv), AMP_OK);
	cr_assert_eq(amp_step_begin(ctx), AMP_OK);
	cr_assert_eq(amp_mul(ctx, "ab", a, b, &ab), AMP_OK);
	cr_assert_eq(amp_add(ctx, "s", ab, a, &s), AMP_OK);
	cr_assert_eq(amp_scale(ctx, "y", s, 3, &y), AMP_OK);
	int nodes = 0;
	for (amp_node *n = ctx->tape; n; n = n->prev)
		nodes++;
	cr_assert_eq(nodes, 3);
	cr_assert_eq(ctx->tape->op, AMP_OP_SCALE);
	cr_assert_str_eq(ctx->tape->label, "y");
	const float seed[4] = {1, 1, 1, 1};
	cr_assert_eq(amp_backward_seeded(ctx, y, seed), AMP_OK);
	for (int i = 0; i < 4; i++) {
		cr_assert_eq(((float *)a->grad->data)[i], 3 * (bv[i] + 1), "da[%d]", i);
		cr_assert_eq(((float *)b->grad->data)[i], 3 * av[i], "db[%d]", i);
	}
	/* Intermediate gradients exist and are step-scoped. */
	cr_assert_not_null(ab->grad);
	cr_assert_eq(ab->grad->persistent, 0);
	cr_assert(a->grad->persistent);
	amp_ctx_free(ctx);
}

Test(autograd, broadcast_and_branches)
{
	/* y = x * w + w with x (3,2) an input, w (2) broadcast over rows:
	 * dy/dw = sum over rows of (seed * x) + sum over rows of seed. */
	amp_ctx *ctx = mkctx("force_fp32");
	amp_tensor *w, *x, *xw, *y;
	const float wv[2] = {2, -1}, xv[6] = {1, 2, 3, 4, 5, 6}, sd[6] = {1, 0.5f, -1, 2, 0.25f, 1};
	cr_assert_eq(amp_param_new(ctx, "w", amp_shape1(2), AMP_INIT_ZEROS, 0, &w), AMP_OK);
	cr_assert_eq(amp_param_load(ctx, w, wv), AMP_OK);
	cr_assert_eq(amp_step_begin(ctx), AMP_OK);
	cr_assert_eq(amp_tensor_from_f32(ctx, xv, amp_shape2(3, 2), AMP_F32, &x), AMP_OK);
	cr_assert_eq(amp_mul(ctx, "xw", x, w, &xw), AMP_OK);
	cr_assert_eq(amp_add(ctx, "y", xw, w, &y), AMP_OK);
	cr_assert_eq(amp_backward_seeded(ctx, y, sd), AMP_OK);
	for (int j = 0; j < 2; j++) {
		float e = 0;
		for (int r = 0; r < 3; r++)
			e += sd[r * 2 + j] * xv[r * 2 + j] + sd[r * 2 + j];
		cr_assert_float_eq(((float *)w->grad->data)[j], e, 1e-6f, "dw[%d] %g vs %g", j,
		                   (double)((float *)w->grad->data)[j], (double)e);
	}
	cr_assert_null(x->grad);
	amp_ctx_free(ctx);
}

Test(autograd, loss_scale_seed)
{
	/* amp_backward seeds with the loss scale; the master gradient holds scale * dL/dw until
	 * the optimizer unscales it. */
	amp_ctx *ctx = mkctx("allow_mix_precision");
	amp_tensor *w, *y;
	cr_assert_eq(amp_param_new(ctx, "w", amp_shape1(1), AMP_INIT_ONES, 0, &w), AMP_OK);
	cr_assert_eq(amp_step_begin(ctx), AMP_OK);
	cr_assert_eq(amp_scale(ctx, "y", w, 0.5f, &y), AMP_OK);
	cr_assert_eq(y->dtype, AMP_F32); /* gray with only a parameter: fp32 */
	cr_assert_eq(amp_backward(ctx, y), AMP_OK);
	cr_assert_eq(ctx->step_scale, 128.0);
	cr_assert_eq(ctx->step_loss, 0.5);
	cr_assert_eq(((float *)w->grad->data)[0], 64.0f);
	amp_ctx_free(ctx);
}

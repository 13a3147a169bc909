/* test_policy.c — precision modes and white/black/gray lists, the casts the policy inserts
 * (counted as copies, recorded on the tape), FP32 master -> FP16 working copies made once per
 * step per parameter, and gradients reaching the masters through those casts.
 *
 * The decision table is checked on amp_policy_exec directly; real ops (MatMul, Softmax, Add,
 * Linear, CrossEntropy) then confirm that outputs carry the chosen dtype.
 */
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <math.h>
#include <stdarg.h>
#include <string.h>

#include "internal.h"

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

static amp_tensor *input(amp_ctx *ctx, amp_dtype dt, amp_shape s, uint64_t seed)
{
	float v[256];
	int64_t n = amp_shape_numel(s);
	cr_assert_leq(n, 256);
	uint64_t st = seed;
	for (int64_t i = 0; i < n; i++)
		v[i] = amp_rng_uniform(&st) - 0.5f;
	amp_tensor *t;
	cr_assert_eq(amp_tensor_from_f32(ctx, v, s, dt, &t), AMP_OK, "%s", amp_ctx_error(ctx));
	return t;
}

static amp_tensor *param(amp_ctx *ctx, const char *label, amp_shape s)
{
	amp_tensor *t;
	cr_assert_eq(amp_param_new(ctx, label, s, AMP_INIT_UNIFORM, 0.5f, &t), AMP_OK);
	return t;
}

static int count_casts(const amp_ctx *ctx, const amp_tensor *src)
{
	int n = 0;
	for (const amp_node *nd = ctx->tape; nd; nd = nd->prev)
		if (nd->op == AMP_OP_COUNT && (!src || nd->in[0] == src))
			n++;
	return n;
}

static const amp_op_type white_ops[] = {AMP_OP_MATMUL, AMP_OP_BATCH_MATMUL, AMP_OP_LINEAR,
                                        AMP_OP_CONV2D};
static const amp_op_type black_ops[] = {
    AMP_OP_SOFTMAX, AMP_OP_LOG_SOFTMAX, AMP_OP_LOG,           AMP_OP_EXP, AMP_OP_SQRT,
    AMP_OP_POW,     AMP_OP_LAYER_NORM,  AMP_OP_CROSS_ENTROPY, AMP_OP_SUM, AMP_OP_MEAN};
static const amp_op_type gray_ops[] = {AMP_OP_ADD,       AMP_OP_MUL,     AMP_OP_SCALE,
                                       AMP_OP_BIAS_ADD,  AMP_OP_RELU,    AMP_OP_GELU,
                                       AMP_OP_MAXPOOL2D, AMP_OP_RESHAPE, AMP_OP_TRANSPOSE,
                                       AMP_OP_EMBEDDING, AMP_OP_DROPOUT};
#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

/* ---- the decision table ------------------------------------------------------------------ */

Test(policy, default_lists)
{
	amp_ctx *ctx = mkctx(NULL);
	for (size_t i = 0; i < NELEM(white_ops); i++)
		cr_assert_eq(amp_policy_list(ctx, white_ops[i]), AMP_LIST_WHITE, "%s",
		             amp_op_name(white_ops[i]));
	for (size_t i = 0; i < NELEM(black_ops); i++)
		cr_assert_eq(amp_policy_list(ctx, black_ops[i]), AMP_LIST_BLACK, "%s",
		             amp_op_name(black_ops[i]));
	for (size_t i = 0; i < NELEM(gray_ops); i++)
		cr_assert_eq(amp_policy_list(ctx, gray_ops[i]), AMP_LIST_GRAY, "%s",
		             amp_op_name(gray_ops[i]));
	amp_ctx_free(ctx);
}

Test(policy, mix_decisions)
{
	amp_ctx *ctx = mkctx(NULL);
	cr_assert_eq(amp_step_begin(ctx), AMP_OK);
	amp_tensor *h = input(ctx, AMP_F16, amp_shape1(4), 1),
	           *f = input(ctx, AMP_F32, amp_shape1(4), 2);
	amp_tensor *w = param(ctx, "w", amp_shape1(4)), *w2 = param(ctx, "w2", amp_shape1(4));
	amp_tensor *hh[2] = {h, h}, *fh[2] = {f, h}, *hf[2] = {h, f}, *ff[2] = {f, f};
	amp_tensor *hw[2] = {h, w}, *wh[2] = {w, h}, *fw[2] = {f, w}, *ww[2] = {w, w2};
	for (size_t i = 0; i < NELEM(white_ops); i++) {
		cr_assert_eq(amp_policy_exec(ctx, white_ops[i], ff, 2), AMP_F16);
		cr_assert_eq(amp_policy_exec(ctx, white_ops[i], fw, 2), AMP_F16);
	}
	for (size_t i = 0; i < NELEM(black_ops); i++) {
		cr_assert_eq(amp_policy_exec(ctx, black_ops[i], hh, 2), AMP_F32);
		cr_assert_eq(amp_policy_exec(ctx, black_ops[i], hh, 1), AMP_F32);
	}
	/* Gray follows its activations; parameters do not vote. */
	for (size_t i = 0; i < NELEM(gray_ops); i++) {
		amp_op_type op = gray_ops[i];
		cr_assert_eq(amp_policy_exec(ctx, op, hh, 2), AMP_F16, "%s", amp_op_name(op));
		cr_assert_eq(amp_policy_exec(ctx, op, hh, 1), AMP_F16);
		cr_assert_eq(amp_policy_exec(ctx, op, fh, 2), AMP_F32);
		cr_assert_eq(amp_policy_exec(ctx, op, hf, 2), AMP_F32);
		cr_assert_eq(amp_policy_exec(ctx, op, ff, 2), AMP_F32);
		cr_assert_eq(amp_policy_exec(ctx, op, hw, 2), AMP_F16);
		cr_assert_eq(amp_policy_exec(ctx, op, wh, 2), AMP_F16);
		cr_assert_eq(amp_policy_exec(ctx, op, fw, 2), AMP_F32);
		cr_assert_eq(amp_policy_exec(ctx, op, ww, 2), AMP_F32);
	}
	amp_tensor *hn[2] = {h, NULL};
	cr_assert_eq(amp_policy_exec(ctx, AMP_OP_ADD, hn, 2), AMP_F16); /* NULL ignored */
	amp_ctx_free(ctx);
}

Test(policy, custom_lists_move_ops)
{
	amp_ctx *ctx =
	    mkctx("custom_white_list", "Softmax, Add", "custom_black_list", "MatMul,ReLU", NULL);
	cr_assert_eq(amp_step_begin(ctx), AMP_OK);
	amp_tensor *h = input(ctx, AMP_F16, amp_shape1(4), 1),
	           *f = input(ctx, AMP_F32, amp_shape1(4), 2);
	amp_tensor *hh[2] = {h, h}, *ff[2] = {f, f};
	cr_assert_eq(amp_policy_exec(ctx, AMP_OP_SOFTMAX, ff, 1), AMP_F16);
	cr_assert_eq(amp_policy_exec(ctx, AMP_OP_ADD, ff, 2), AMP_F16);
	cr_assert_eq(amp_policy_exec(ctx, AMP_OP_MATMUL, hh, 2), AMP_F32);
	cr_assert_eq(amp_policy_exec(ctx, AMP_OP_RELU, hh, 1), AMP_F32);
	/* Untouched ops keep their defaults. */
	cr_assert_eq(amp_policy_exec(ctx, AMP_OP_LINEAR, ff, 2), AMP_F16);
	cr_assert_eq(amp_policy_exec(ctx, AMP_OP_LOG_SOFTMAX, hh, 1), AMP_F32);
	cr_assert_eq(amp_policy_exec(ctx, AMP_OP_MUL, hh, 2), AMP_F16);
	/* An op named in both lists takes the later setting. */
	cr_assert_eq(amp_config_set(ctx, "custom_black_list", "Softmax"), AMP_OK);
	cr_assert_eq(amp_policy_exec(ctx, AMP_OP_SOFTMAX, ff, 1), AMP_F32);
	cr_assert_eq(amp_policy_exec(ctx, AMP_OP_MATMUL, hh, 2), AMP_F16); /* MatMul released */
	amp_ctx_free(ctx);
}

Test(policy, force_fp32_everything_fp32)
{
	amp_ctx *ctx = mkctx("precision_mode", "force_fp32", "custom_white_list", "Softmax", NULL);
	cr_assert_eq(amp_step_begin(ctx), AMP_OK);
	amp_tensor *h = input(ctx, AMP_F16, amp_shape1(4), 1);
	amp_tensor *hh[2] = {h, h};
	for (int op = 0; op < AMP_OP_COUNT; op++)
		cr_assert_eq(amp_policy_exec(ctx, (amp_op_type)op, hh, 2), AMP_F32, "%s",
		             amp_op_name((amp_op_type)op));
	amp_ctx_free(ctx);
}

Test(policy, force_fp16_black_list_in_fp16)
{
	amp_ctx *ctx = mkctx("precision_mode", "force_fp16", NULL);
	cr_assert_eq(amp_step_begin(ctx), AMP_OK);
	amp_tensor *f = input(ctx, AMP_F32, amp_shape1(4), 1);
	amp_tensor *ff[2] = {f, f};
	for (int op = 0; op < AMP_OP_COUNT; op++) {
		if (op == AMP_OP_OPTIMIZER)
			continue;
		cr_assert_eq(amp_policy_exec(ctx, (amp_op_type)op, ff, 2), AMP_F16, "%s",
		             amp_op_name((amp_op_type)op));
	}
	/* A custom black list is still honoured: the way to exempt one op from force_fp16. */
	cr_assert_eq(amp_config_set(ctx, "custom_black_list", "Exp"), AMP_OK);
	cr_assert_eq(amp_policy_exec(ctx, AMP_OP_EXP, ff, 1), AMP_F32);
	cr_assert_eq(amp_policy_exec(ctx, AMP_OP_LOG, ff, 1), AMP_F16);
	amp_ctx_free(ctx);
}

Test(policy, keep_origin_follows_first_input)
{
	amp_ctx *ctx = mkctx("precision_mode", "must_keep_origin_dtype", NULL);
	cr_assert_eq(amp_step_begin(ctx), AMP_OK);
	amp_tensor *h = input(ctx, AMP_F16, amp_shape1(4), 1),
	           *f = input(ctx, AMP_F32, amp_shape1(4), 2);
	amp_tensor *hf[2] = {h, f}, *fh[2] = {f, h};
	cr_assert_eq(amp_policy_exec(ctx, AMP_OP_MATMUL, fh, 2), AMP_F32);
	cr_assert_eq(amp_policy_exec(ctx, AMP_OP_SOFTMAX, hf, 1), AMP_F16);
	cr_assert_eq(amp_policy_exec(ctx, AMP_OP_ADD, hf, 2), AMP_F16);
	cr_assert_eq(amp_policy_exec(ctx, AMP_OP_ADD, fh, 2), AMP_F32);
	amp_ctx_free(ctx);
}

/* ---- real ops ---------------------------------------------------------------------------- */

Test(policy, mix_real_ops)
{
	amp_ctx *ctx = mkctx(NULL);
	amp_tensor *w = param(ctx, "w", amp_shape2(8, 8));
	cr_assert_eq(amp_step_begin(ctx), AMP_OK);
	amp_tensor *x = input(ctx, AMP_F32, amp_shape2(4, 8), 3), *y, *p, *s, *s2, *h;
	cr_assert_eq(amp_matmul(ctx, "mm", x, w, 0, 1, &y), AMP_OK, "%s", amp_ctx_error(ctx));
	cr_assert_eq(amp_tensor_dtype(y), AMP_F16, "MatMul ran in %s", amp_dtype_name(y->dtype));
	cr_assert_eq(amp_softmax(ctx, "sm", y, 0, &p), AMP_OK, "%s", amp_ctx_error(ctx));
	cr_assert_eq(amp_tensor_dtype(p), AMP_F32, "Softmax ran in %s", amp_dtype_name(p->dtype));
	cr_assert_eq(amp_add(ctx, "add16", y, y, &s), AMP_OK);
	cr_assert_eq(amp_tensor_dtype(s), AMP_F16);
	cr_assert_eq(amp_add(ctx, "add32", p, y, &s2), AMP_OK);
	cr_assert_eq(amp_tensor_dtype(s2), AMP_F32);
	h = input(ctx, AMP_F16, amp_shape2(4, 8), 4);
	cr_assert_eq(amp_mul(ctx, "mul", h, s, &s2), AMP_OK);
	cr_assert_eq(amp_tensor_dtype(s2), AMP_F16);
	amp_ctx_free(ctx);
}

Test(policy, custom_lists_real_ops)
{
	amp_ctx *ctx = mkctx("custom_white_list", "Softmax", "custom_black_list", "MatMul", NULL);
	amp_tensor *w = param(ctx, "w", amp_shape2(8, 8));
	cr_assert_eq(amp_step_begin(ctx), AMP_OK);
	amp_tensor *x = input(ctx, AMP_F32, amp_shape2(4, 8), 3), *y, *p;
	cr_assert_eq(amp_matmul(ctx, "mm", x, w, 0, 1, &y), AMP_OK, "%s", amp_ctx_error(ctx));
	cr_assert_eq(amp_tensor_dtype(y), AMP_F32);
	cr_assert_null(w->param->working, "black-listed MatMul made a working copy");
	cr_assert_eq(amp_softmax(ctx, "sm", y, 0, &p), AMP_OK, "%s", amp_ctx_error(ctx));
	cr_assert_eq(amp_tensor_dtype(p), AMP_F16);
	amp_run_stats st;
	amp_run_stats_get(ctx, &st);
	cr_assert_eq(st.bytes_working, 0);
	amp_ctx_free(ctx);
}

/* A 2-layer MLP forward + backward in `mode`; returns the copies counted. */
static int64_t mlp_copies(const char *mode, amp_dtype *logits_dt, amp_dtype *loss_dt)
{
	amp_ctx *ctx = mkctx("precision_mode", mode, NULL);
	amp_tensor *w1 = param(ctx, "fc1.w", amp_shape2(16, 8)),
	           *b1 = param(ctx, "fc1.b", amp_shape1(16));
	amp_tensor *w2 = param(ctx, "fc2.w", amp_shape2(4, 16)),
	           *b2 = param(ctx, "fc2.b", amp_shape1(4));
	cr_assert_eq(amp_step_begin(ctx), AMP_OK);
	amp_tensor *x = input(ctx, AMP_F32, amp_shape2(8, 8), 5), *t, *h, *a, *z, *loss;
	int32_t tg[8] = {0, 1, 2, 3, 3, 2, 1, 0};
	cr_assert_eq(amp_tensor_from_i32(ctx, tg, amp_shape1(8), &t), AMP_OK);
	cr_assert_eq(amp_linear(ctx, "fc1", x, w1, b1, &h), AMP_OK, "%s", amp_ctx_error(ctx));
	cr_assert_eq(amp_relu(ctx, "relu", h, &a), AMP_OK, "%s", amp_ctx_error(ctx));
	cr_assert_eq(amp_linear(ctx, "fc2", a, w2, b2, &z), AMP_OK, "%s", amp_ctx_error(ctx));
	cr_assert_eq(amp_cross_entropy(ctx, "ce", z, t, &loss), AMP_OK, "%s", amp_ctx_error(ctx));
	cr_assert_eq(amp_backward(ctx, loss), AMP_OK, "%s", amp_ctx_error(ctx));
	*logits_dt = z->dtype;
	*loss_dt = loss->dtype;
	for (amp_param *p = ctx->params; p; p = p->next)
		cr_assert(p->master->grad && p->master->grad->dtype == AMP_F32, "%s: no fp32 grad",
		          p->label);
	int64_t c = ctx->stats.copies;
	amp_ctx_free(ctx);
	return c;
}

Test(policy, force_fp32_never_casts)
{
	amp_dtype zd, ld;
	int64_t c = mlp_copies("force_fp32", &zd, &ld);
	cr_assert_eq(zd, AMP_F32);
	cr_assert_eq(ld, AMP_F32);
	/* Only the two h2d stagings (x and the targets). */
	cr_log_info("force_fp32 copies: %lld", (long long)c);
	cr_assert_eq(c, 2);
}

Test(policy, mix_mlp_casts)
{
	amp_dtype zd, ld;
	int64_t c = mlp_copies("allow_mix_precision", &zd, &ld);
	cr_assert_eq(zd, AMP_F16);
	cr_assert_eq(ld, AMP_F32);
	/* 2 h2d + 4 working copies + x -> fp16 + logits -> fp32, and in backward the logits'
	 * gradient back to fp16; x needs none, and the 4 working-copy gradients are no copies:
	 * the masters keep them in fp16 for the optimizer's update to widen in its own pass. */
	cr_log_info("allow_mix_precision copies: %lld", (long long)c);
	cr_assert_eq(c, 2 + 4 + 1 + 1 + 1);
}

Test(policy, force_fp16_runs_black_list_in_fp16)
{
	amp_dtype zd, ld;
	mlp_copies("force_fp16", &zd, &ld);
	cr_assert_eq(zd, AMP_F16);
	cr_assert_eq(ld, AMP_F16, "CrossEntropy ran in %s", amp_dtype_name(ld));
	amp_ctx *ctx = mkctx("precision_mode", "force_fp16", NULL);
	cr_assert_eq(amp_step_begin(ctx), AMP_OK);
	amp_tensor *x = input(ctx, AMP_F32, amp_shape2(2, 4), 7), *p;
	cr_assert_eq(amp_softmax(ctx, "sm", x, 0, &p), AMP_OK, "%s", amp_ctx_error(ctx));
	cr_assert_eq(p->dtype, AMP_F16);
	amp_ctx_free(ctx);
}

/* ---- working copies ---------------------------------------------------------------------- */

/* A parameter's working copy is made at its first use (a master copy event), used by every
 * op of the step through one cast node on the tape, and kept: with the master unchanged the
 * next steps reuse it without converting again. */
Test(policy, working_copy_once_per_step)
{
	amp_ctx *ctx = mkctx(NULL);
	amp_tensor *w = param(ctx, "w", amp_shape2(8, 8));
	amp_param *p = w->param;
	cr_assert_eq(p->master, w);
	cr_assert_null(p->working);
	for (int step = 0; step < 3; step++) {
		cr_assert_eq(amp_step_begin(ctx), AMP_OK);
		int64_t c0 = ctx->stats.copies;
		amp_tensor *x = input(ctx, AMP_F16, amp_shape2(4, 8), 3), *y1, *y2, *y3;
		cr_assert_eq(ctx->stats.copies, c0 + 1); /* h2d */
		cr_assert_eq(amp_matmul(ctx, "mm1", x, w, 0, 1, &y1), AMP_OK, "%s",
		             amp_ctx_error(ctx));
		amp_tensor *wc = p->working;
		cr_assert_not_null(wc);
		cr_assert_eq(wc->dtype, AMP_F16);
		cr_assert_eq(p->working_step, step);
		cr_assert_eq(ctx->stats.copies, c0 + (step == 0 ? 2 : 1),
		             "step %d: the master copy is made once, then kept", step);
		cr_assert_eq(amp_matmul(ctx, "mm2", x, w, 0, 1, &y2), AMP_OK);
		cr_assert_eq(amp_mul(ctx, "mul", y1, y2, &y3), AMP_OK);
		cr_assert_eq(amp_matmul(ctx, "mm3", y3, w, 0, 1, &y3), AMP_OK);
		cr_assert_eq(ctx->stats.copies, c0 + (step == 0 ? 2 : 1),
		             "working copy remade within a step");
		cr_assert_eq(p->working, wc);
		/* Every MatMul saw the same working copy; one cast node on the tape. */
		int mm = 0;
		for (amp_node *nd = ctx->tape; nd; nd = nd->prev)
			if (nd->op == AMP_OP_MATMUL) {
				cr_assert_eq(nd->in[1], wc);
				mm++;
			}
		cr_assert_eq(mm, 3);
		cr_assert_eq(count_casts(ctx, w), 1);
		cr_assert_eq(count_casts(ctx, NULL), 1);
		/* Its values are the master's, rounded to fp16. */
		for (int i = 0; i < 64; i++)
			cr_assert_eq(((uint16_t *)wc->data)[i],
			             amp_f32_to_f16(((float *)w->data)[i]));
		amp_run_stats st;
		amp_run_stats_get(ctx, &st);
		cr_assert_eq(st.bytes_working, 64 * 2);
		cr_assert_eq(st.bytes_master, 64 * 4);
		cr_assert_eq(amp_step_end(ctx), AMP_OK);
		cr_assert_null(p->working);
		amp_run_stats_get(ctx, &st);
		cr_assert_eq(st.bytes_working, 64 * 2, "the working copy outlives the step");
		cr_assert_eq(st.bytes_activations, 0);
	}
	amp_ctx_free(ctx);
}

/* The optimizer rewrites the working copy as it updates the master (no copy event, values
 * exact); amp_param_load and a write through amp_tensor_data make it stale, and the next use
 * converts again. */
Test(policy, working_copy_refreshed_after_update_and_load)
{
	amp_ctx *ctx = mkctx(NULL);
	amp_tensor *w = param(ctx, "w", amp_shape1(4));
	amp_optim *o;
	amp_sgd_options so = {.lr = 0.25f};
	cr_assert_eq(amp_optim_sgd_new(ctx, &so, &o), AMP_OK);
	cr_assert_eq(amp_step_begin(ctx), AMP_OK);
	amp_tensor *x = input(ctx, AMP_F16, amp_shape1(4), 1), *y, *y2;
	cr_assert_eq(amp_mul(ctx, "mul", x, w, &y), AMP_OK);
	amp_tensor *wc1 = w->param->working;
	float seed[4] = {128, 128, 128, 128};
	cr_assert_eq(amp_backward_seeded(ctx, y, seed), AMP_OK);
	int skipped;
	int64_t c0 = ctx->stats.copies;
	cr_assert_eq(amp_optim_step(o, &skipped), AMP_OK);
	cr_assert_eq(skipped, 0);
	/* The master moved and its working copy with it: the next use in the same step gets a
	 * new tensor (its own tape node) over the refreshed copy, with no conversion. */
	cr_assert_eq(amp_mul(ctx, "mul2", x, w, &y2), AMP_OK);
	cr_assert_eq(ctx->stats.copies, c0);
	cr_assert_neq(w->param->working, wc1);
	for (int i = 0; i < 4; i++)
		cr_assert_eq(((uint16_t *)w->param->working->data)[i],
		             amp_f32_to_f16(((float *)w->data)[i]));
	/* amp_param_load makes it stale. */
	const float nv[4] = {1, 2, 3, 4};
	cr_assert_eq(amp_param_load(ctx, w, nv), AMP_OK);
	cr_assert_eq(amp_mul(ctx, "mul3", x, w, &y2), AMP_OK);
	cr_assert_eq(ctx->stats.copies, c0 + 1);
	cr_assert_eq(amp_f16_to_f32(((uint16_t *)w->param->working->data)[3]), 4.0f);
	/* So does a write through amp_tensor_data, at the next step. */
	cr_assert_eq(amp_step_end(ctx), AMP_OK);
	((float *)amp_tensor_data(w))[3] = 8.0f;
	cr_assert_eq(amp_step_begin(ctx), AMP_OK);
	x = input(ctx, AMP_F16, amp_shape1(4), 1);
	int64_t c1 = ctx->stats.copies;
	cr_assert_eq(amp_mul(ctx, "mul4", x, w, &y2), AMP_OK);
	cr_assert_eq(ctx->stats.copies, c1 + 1);
	cr_assert_eq(amp_f16_to_f32(((uint16_t *)w->param->working->data)[3]), 8.0f);
	amp_ctx_free(ctx);
}

Test(policy, gradients_reach_masters_through_casts)
{
	/* y = x1 * w + x2 * w in fp16 (w's working copy used twice), seeded with s:
	 * dL/dw = s * (x1 + x2), accumulated in the fp16 working copy's gradient, then cast
	 * once to the fp32 master gradient. */
	amp_ctx *ctx = mkctx(NULL);
	amp_tensor *w = param(ctx, "w", amp_shape1(4));
	cr_assert_eq(amp_step_begin(ctx), AMP_OK);
	const float x1v[4] = {0.5f, -1, 2, 0.25f}, x2v[4] = {1, 1, -3, 0.125f};
	amp_tensor *x1, *x2, *a, *b, *y;
	cr_assert_eq(amp_tensor_from_f32(ctx, x1v, amp_shape1(4), AMP_F16, &x1), AMP_OK);
	cr_assert_eq(amp_tensor_from_f32(ctx, x2v, amp_shape1(4), AMP_F16, &x2), AMP_OK);
	cr_assert_eq(amp_mul(ctx, "a", x1, w, &a), AMP_OK);
	cr_assert_eq(amp_mul(ctx, "b", x2, w, &b), AMP_OK);
	cr_assert_eq(amp_add(ctx, "y", a, b, &y), AMP_OK);
	cr_assert_eq(y->dtype, AMP_F16);
	int64_t c0 = ctx->stats.copies;
	const float s[4] = {128, 128, 128, 128};
	cr_assert_eq(amp_backward_seeded(ctx, y, s), AMP_OK, "%s", amp_ctx_error(ctx));
	/* kept by the master in fp16 (no copy), widened when read */
	cr_assert_eq(ctx->stats.copies, c0, "the gradient kept in fp16, not copied");
	cr_assert_eq(w->param->grad_kept, w->param->working->grad);
	cr_assert_not_null(w->param->working->grad);
	cr_assert_eq(w->param->working->grad->dtype, AMP_F16);
	amp_tensor *g = amp_tensor_grad(w);
	cr_assert_not_null(g);
	cr_assert_eq(g->dtype, AMP_F32);
	cr_assert(g->persistent);
	for (int i = 0; i < 4; i++) {
		float expect = 128 * (x1v[i] + x2v[i]);
		cr_assert_eq(((float *)g->data)[i], expect, "grad[%d] = %g, expected %g", i,
		             (double)((float *)g->data)[i], (double)expect);
	}
	/* Inputs that do not require grad get none. */
	cr_assert_null(x1->grad);
	amp_ctx_free(ctx);
}

Test(policy, activation_casts_on_tape)
{
	/* An fp32 activation that requires grad, cast to fp16 for a MatMul, then an fp16 result
	 * cast to fp32 for Softmax: both casts are tape nodes that carry the gradient back. */
	amp_ctx *ctx = mkctx(NULL);
	amp_tensor *v = param(ctx, "v", amp_shape2(4, 8)), *w = param(ctx, "w", amp_shape2(8, 8));
	cr_assert_eq(amp_step_begin(ctx), AMP_OK);
	amp_tensor *x = input(ctx, AMP_F32, amp_shape2(4, 8), 9), *h, *y, *p;
	cr_assert_eq(amp_mul(ctx, "h", x, v, &h), AMP_OK); /* gray, fp32 */
	cr_assert_eq(h->dtype, AMP_F32);
	cr_assert(h->requires_grad);
	cr_assert_eq(amp_matmul(ctx, "mm", h, w, 0, 1, &y), AMP_OK);
	cr_assert_eq(count_casts(ctx, h), 1);
	cr_assert_eq(amp_softmax(ctx, "sm", y, 0, &p), AMP_OK);
	cr_assert_eq(count_casts(ctx, y), 1);
	cr_assert_eq(count_casts(ctx, x), 0, "x needs no gradient, so its cast is not on the tape");
	float seed[32];
	for (int i = 0; i < 32; i++)
		seed[i] = 128.0f * (float)((i % 5) - 2);
	cr_assert_eq(amp_backward_seeded(ctx, p, seed), AMP_OK, "%s", amp_ctx_error(ctx));
	cr_assert_not_null(h->grad);
	cr_assert_eq(h->grad->dtype, AMP_F32);
	cr_assert_not_null(y->grad);
	cr_assert_eq(y->grad->dtype, AMP_F16);
	cr_assert_not_null(v->grad);
	cr_assert_not_null(w->grad);
	/* v's gradient is x * dL/dh exactly (Mul backward in fp32). */
	const float *xv = x->data, *gh = h->grad->data, *gv = v->grad->data;
	for (int i = 0; i < 32; i++)
		cr_assert_eq(gv[i], xv[i] * gh[i]);
	amp_ctx_free(ctx);
}

Test(policy, inference_records_no_tape)
{
	amp_ctx *ctx = mkctx(NULL);
	amp_tensor *w = param(ctx, "w", amp_shape2(8, 8));
	amp_set_training(ctx, 0);
	cr_assert_eq(amp_step_begin(ctx), AMP_OK);
	amp_tensor *x = input(ctx, AMP_F32, amp_shape2(4, 8), 3), *y, *y2;
	cr_assert_eq(amp_matmul(ctx, "mm", x, w, 0, 1, &y), AMP_OK);
	cr_assert_eq(amp_matmul(ctx, "mm", x, w, 0, 1, &y2), AMP_OK);
	cr_assert_null(ctx->tape);
	cr_assert_eq(y->requires_grad, 0);
	cr_assert_not_null(w->param->working);
	/* h2d + x cast twice (activations are not cached) + one working copy. */
	cr_assert_eq(ctx->stats.copies, 1 + 2 + 1);
	amp_ctx_free(ctx);
}

/* ---- BF16 modes ----------------------------------------------------------------------------- */

/* allow_mix_precision_bf16 makes the same decisions as the FP16 mix with BF16 as the half
 * type: an fp16 activation is not "the half type" there, so gray ops on it run in FP32. */
Test(policy, mix_bf16_decisions)
{
	amp_ctx *ctx = mkctx("precision_mode", "allow_mix_precision_bf16", NULL);
	cr_assert_eq(ctx->half, AMP_BF16);
	cr_assert_eq(amp_step_begin(ctx), AMP_OK);
	amp_tensor *b = input(ctx, AMP_BF16, amp_shape1(4), 1),
	           *h = input(ctx, AMP_F16, amp_shape1(4), 2),
	           *f = input(ctx, AMP_F32, amp_shape1(4), 3);
	amp_tensor *w = param(ctx, "w", amp_shape1(4));
	amp_tensor *bb[2] = {b, b}, *bw[2] = {b, w}, *hh[2] = {h, h}, *ff[2] = {f, f},
	           *bf[2] = {b, f};
	for (size_t i = 0; i < NELEM(white_ops); i++)
		cr_assert_eq(amp_policy_exec(ctx, white_ops[i], ff, 2), AMP_BF16);
	for (size_t i = 0; i < NELEM(black_ops); i++)
		cr_assert_eq(amp_policy_exec(ctx, black_ops[i], bb, 2), AMP_F32);
	for (size_t i = 0; i < NELEM(gray_ops); i++) {
		amp_op_type op = gray_ops[i];
		cr_assert_eq(amp_policy_exec(ctx, op, bb, 2), AMP_BF16, "%s", amp_op_name(op));
		cr_assert_eq(amp_policy_exec(ctx, op, bw, 2), AMP_BF16);
		cr_assert_eq(amp_policy_exec(ctx, op, bf, 2), AMP_F32);
		cr_assert_eq(amp_policy_exec(ctx, op, hh, 2), AMP_F32);
	}
	amp_ctx_free(ctx);
}

Test(policy, force_bf16_and_keep_origin)
{
	amp_ctx *ctx = mkctx("precision_mode", "force_bf16", "custom_black_list", "Exp", NULL);
	cr_assert_eq(amp_step_begin(ctx), AMP_OK);
	amp_tensor *f = input(ctx, AMP_F32, amp_shape1(4), 3), *ff[1] = {f};
	for (size_t i = 0; i < NELEM(black_ops); i++)
		if (black_ops[i] != AMP_OP_EXP)
			cr_assert_eq(amp_policy_exec(ctx, black_ops[i], ff, 1), AMP_BF16);
	cr_assert_eq(amp_policy_exec(ctx, AMP_OP_EXP, ff, 1), AMP_F32);
	amp_ctx_free(ctx);

	ctx = mkctx("precision_mode", "must_keep_origin_dtype", NULL);
	cr_assert_eq(amp_step_begin(ctx), AMP_OK);
	amp_tensor *b = input(ctx, AMP_BF16, amp_shape1(4), 1), *h = input(ctx, AMP_F16, amp_shape1(4), 2);
	amp_tensor *bx[1] = {b}, *hx[1] = {h};
	cr_assert_eq(amp_policy_exec(ctx, AMP_OP_MATMUL, bx, 1), AMP_BF16);
	cr_assert_eq(amp_policy_exec(ctx, AMP_OP_MATMUL, hx, 1), AMP_F16);
	amp_ctx_free(ctx);
}

/* Under must_keep_origin_dtype a parameter used by an fp16 and a bf16 input each step gets a
 * working copy of each type: two buffers at most, however many steps (a new one every flip
 * grew without bound: 262 KB a step here), and each op reads its own type's values. */
Test(policy, keep_origin_flips_reuse_two_buffers)
{
	amp_ctx *ctx = mkctx("precision_mode", "must_keep_origin_dtype", NULL);
	amp_tensor *w = param(ctx, "w", amp_shape2(3, 4));
	for (int s = 0; s < 20; s++) {
		cr_assert_eq(amp_step_begin(ctx), AMP_OK);
		amp_tensor *xh = input(ctx, AMP_F16, amp_shape2(2, 4), 5);
		amp_tensor *xb = input(ctx, AMP_BF16, amp_shape2(2, 4), 5);
		amp_tensor *yh = NULL, *yb = NULL;
		cr_assert_eq(amp_linear(ctx, "h", xh, w, NULL, &yh), AMP_OK, "%s", amp_ctx_error(ctx));
		cr_assert_eq(amp_linear(ctx, "b", xb, w, NULL, &yb), AMP_OK, "%s", amp_ctx_error(ctx));
		cr_assert_eq(amp_tensor_dtype(yh), AMP_F16);
		cr_assert_eq(amp_tensor_dtype(yb), AMP_BF16);
		float vh[6], vb[6];
		cr_assert_eq(amp_tensor_read_f32(ctx, yh, vh), AMP_OK);
		cr_assert_eq(amp_tensor_read_f32(ctx, yb, vb), AMP_OK);
		for (int i = 0; i < 6; i++) /* the same product in two roundings */
			cr_assert_float_eq(vh[i], vb[i], 0.02f * (fabsf(vh[i]) + 1), "step %d: %g vs %g",
			                   s, (double)vh[i], (double)vb[i]);
		cr_assert_eq(amp_step_end(ctx), AMP_OK);
	}
	cr_assert_eq(ctx->mem[AMP_MEM_WORKING], (uint64_t)(2 * 12 * 2), "%llu",
	             (unsigned long long)ctx->mem[AMP_MEM_WORKING]);
	amp_ctx_free(ctx);
}

/* Under BF16 the parameters get BF16 working copies, made once per step, counted as working
 * memory, and their gradients still reach the FP32 masters. */
Test(policy, bf16_working_copies)
{
	amp_ctx *ctx = mkctx("precision_mode", "allow_mix_precision_bf16", NULL);
	amp_tensor *w = param(ctx, "w", amp_shape2(3, 4));
	cr_assert_eq(amp_step_begin(ctx), AMP_OK);
	amp_tensor *x = input(ctx, AMP_F32, amp_shape2(2, 4), 5), *y = NULL, *y2 = NULL, *l = NULL;
	cr_assert_eq(amp_linear(ctx, "fc", x, w, NULL, &y), AMP_OK, "%s", amp_ctx_error(ctx));
	cr_assert_eq(amp_tensor_dtype(y), AMP_BF16);
	cr_assert_eq(amp_linear(ctx, "fc2", x, w, NULL, &y2), AMP_OK);
	cr_assert_eq(w->param->working->dtype, AMP_BF16);
	cr_assert_eq(count_casts(ctx, w), 1, "one working copy per step");
	cr_assert_eq(ctx->mem[AMP_MEM_WORKING], (uint64_t)(12 * 2));
	cr_assert_eq(amp_sum(ctx, "sum", y, &l), AMP_OK);
	cr_assert_eq(amp_backward(ctx, l), AMP_OK, "%s", amp_ctx_error(ctx));
	cr_assert_not_null(w->grad);
	cr_assert_eq(w->grad->dtype, AMP_F32);
	/* d sum(x w^T) / dw[o][i] = sum over rows of x[r][i], bf16-rounded x, scale 1 */
	float xv[8], gv[12];
	cr_assert_eq(amp_tensor_read_f32(ctx, x, xv), AMP_OK);
	memcpy(gv, amp_tensor_grad(w)->data, sizeof gv); /* widened from the kept bf16 one */
	for (int o = 0; o < 3; o++)
		for (int i = 0; i < 4; i++) {
			double want = (double)xv[i] + (double)xv[4 + i];
			cr_assert_leq(fabs((double)gv[o * 4 + i] - want), 0x1p-7 * (fabs(want) + 0.5),
			              "dw[%d][%d] %g want %g", o, i, (double)gv[o * 4 + i], want);
		}
	amp_ctx_free(ctx);
}

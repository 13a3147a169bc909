/* policy.c — the precision policy (CANN-style modes and white/black/gray lists) and the casts
 * it inserts at precision boundaries, including FP32 master -> FP16 working-copy refreshes.
 *
 * Every cast is a copy event and, when it sits on a gradient path, a tape node whose backward
 * casts the gradient back to the source dtype.
 */
#include "check.h"
#include "internal.h"

#include <string.h>

amp_op_list amp_policy_list(const amp_ctx *ctx, amp_op_type op)
{
	if (ctx->cfg.custom[op] >= 0)
		return (amp_op_list)ctx->cfg.custom[op];
	return amp_op_default_list(op);
}

amp_dtype amp_policy_exec(const amp_ctx *ctx, amp_op_type op, amp_tensor *const *in, int n)
{
	switch (ctx->cfg.mode) {
	case AMP_MODE_FORCE_FP32:
		return AMP_F32;
	case AMP_MODE_KEEP_ORIGIN:
		return n > 0 && in[0] && in[0]->dtype == AMP_F16 ? AMP_F16 : AMP_F32;
	case AMP_MODE_FORCE_FP16:
		return ctx->cfg.custom[op] == AMP_LIST_BLACK ? AMP_F32 : AMP_F16;
	case AMP_MODE_MIX:
		break;
	}
	switch (amp_policy_list(ctx, op)) {
	case AMP_LIST_WHITE: return AMP_F16;
	case AMP_LIST_BLACK: return AMP_F32;
	case AMP_LIST_GRAY: break;
	}
	/* Gray follows its activations: FP16 only when every non-parameter float input is FP16.
	 * Parameters do not vote; they are cast to their working copies. */
	int activations = 0;
	for (int i = 0; i < n; i++) {
		if (!in[i] || in[i]->param || in[i]->dtype == AMP_I32)
			continue;
		activations++;
		if (in[i]->dtype != AMP_F16)
			return AMP_F32;
	}
	return activations ? AMP_F16 : AMP_F32;
}

/* Backward of a cast: the gradient goes back to the source dtype. */
static int cast_backward(amp_ctx *ctx, amp_node *node)
{
	amp_tensor *src = node->in[0];
	if (!src->requires_grad)
		return AMP_OK;
	uint64_t t0 = AMP_TRACING() ? amp_trace_clock() : 0;
	const amp_tensor *g = node->out->grad;
	int rc = amp_grad_acc(ctx, src, g);
	ctx->stats.copies++;
	if (AMP_TRACING())
		amp_trace_copy(AMP_COPY_CAST, (uint64_t)g->numel * (amp_dtype_size(g->dtype) +
		                                                    amp_dtype_size(src->dtype)),
		               g->dtype, src->dtype, t0, ctx->step, node->label);
	return rc;
}

amp_tensor *amp_cast_to(amp_ctx *ctx, amp_tensor *t, amp_dtype dt, const char *label)
{
	if (t->dtype == dt || t->dtype == AMP_I32)
		return t;
	amp_param *p = t->param;
	if (p && dt == AMP_F16 && p->working && p->working_step == ctx->step)
		return p->working;

	uint64_t t0 = AMP_TRACING() ? amp_trace_clock() : 0;
	amp_mem_category cat = p && dt == AMP_F16 ? AMP_MEM_WORKING : AMP_MEM_ACTIVATIONS;
	amp_tensor *c = amp_alloc_raw(ctx, dt, t->shape, cat); /* converted in full below */
	if (!c)
		return NULL;
	int64_t nonfinite = 0; /* of an FP16 result, counted by the conversion */
	if (dt == AMP_F16)
		nonfinite = amp_cvt_f32_f16(t->data, c->data, t->numel);
	else
		amp_cvt_f16_f32(t->data, c->data, t->numel);
	ctx->stats.copies++;
	amp_copy_kind kind = cat == AMP_MEM_WORKING ? AMP_COPY_MASTER : AMP_COPY_CAST;
	const char *name = p ? p->label : label;
	if (AMP_TRACING()) {
		amp_trace_copy(kind, (uint64_t)t->numel * (amp_dtype_size(t->dtype) + amp_dtype_size(dt)),
		               t->dtype, dt, t0, ctx->step, name);
		amp_check_cast(ctx, t, c, nonfinite);
	}

	if (t->requires_grad && ctx->training && !ctx->in_backward) {
		amp_node *node = amp_arena_alloc(ctx, sizeof *node);
		if (!node) {
			amp_fail(ctx, AMP_ENOMEM, "out of memory");
			return NULL;
		}
		node->op = AMP_OP_COUNT; /* a cast, not an op */
		node->label = amp_arena_strdup(ctx, name);
		node->backward = cast_backward;
		node->in[0] = t;
		node->n_in = 1;
		node->out = c;
		node->exec = dt;
		node->prev = ctx->tape;
		ctx->tape = node;
		c->node = node;
		c->requires_grad = 1;
	}
	if (p && dt == AMP_F16) {
		p->working = c;
		p->working_step = ctx->step;
	}
	return c;
}

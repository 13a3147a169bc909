/* policy.c — the precision policy (CANN-style modes and white/black/gray lists) and the casts
 * it inserts at precision boundaries, including FP32 master -> half working-copy refreshes.
 * The half type is the mode's (ctx->half): FP16 or BF16.
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
	amp_dtype half = ctx->half;
	switch (amp_mode_info_of(ctx->cfg.mode)->kind) {
	case AMP_KIND_FP32:
		return AMP_F32;
	case AMP_KIND_KEEP:
		return n > 0 && in[0] && amp_dt(in[0]->dtype)->is_half ? in[0]->dtype : AMP_F32;
	case AMP_KIND_FORCE:
		return ctx->cfg.custom[op] == AMP_LIST_BLACK ? AMP_F32 : half;
	case AMP_KIND_MIX:
		break;
	}
	switch (amp_policy_list(ctx, op)) {
	case AMP_LIST_WHITE: return half;
	case AMP_LIST_BLACK: return AMP_F32;
	case AMP_LIST_GRAY: break;
	}
	/* Gray follows its activations: the half type only when every non-parameter float input
	 * has it.  Parameters do not vote; they are cast to their working copies. */
	int activations = 0;
	for (int i = 0; i < n; i++) {
		if (!in[i] || in[i]->param || !amp_dt(in[i]->dtype)->is_float)
			continue;
		activations++;
		if (in[i]->dtype != half)
			return AMP_F32;
	}
	return activations ? half : AMP_F32;
}

/* Backward of a cast: the gradient goes back to the source dtype. */
static int cast_backward(amp_ctx *ctx, amp_node *node)
{
	amp_tensor *src = node->in[0];
	if (!src->requires_grad)
		return AMP_OK;
	uint64_t t0 = AMP_TRACING() ? amp_trace_clock() : 0;
	const amp_tensor *g = node->out->grad;
	/* A working copy's gradient stays in the arena to the step's end unless memory_optimize
	 * releases it after this node: otherwise the master may keep it as it is, for the
	 * optimizer to widen in its update pass and data parallel to send (no copy). */
	int rc = src->param && !ctx->cfg.memory_optimize
	             ? amp_grad_acc_kept(ctx, src, g)
	             : amp_grad_acc(ctx, src, g);
	if (rc != AMP_OK)
		return rc > 0 ? AMP_OK : rc;
	amp_count_copy(ctx);
	if (AMP_TRACING())
		amp_trace_copy(AMP_COPY_CAST, (uint64_t)g->numel * (amp_dtype_size(g->dtype) +
		                                                    amp_dtype_size(src->dtype)),
		               g->dtype, src->dtype, t0, ctx->step, node->label);
	return rc;
}

/* The working copy of p in dt for this step: the persistent buffer, made (a master copy event)
 * when it is missing, of another dtype or stale, else as the optimizer left it; then a
 * step-scoped tensor over it.  NULL (error set) on failure. */
static amp_tensor *working_copy(amp_ctx *ctx, amp_param *p, amp_dtype dt, uint64_t t0)
{
	amp_tensor *m = p->master;
	if (p->work && p->work_dtype != dt && p->work_alt && p->work_alt_dtype == dt) {
		/* fp16 <-> bf16 (must_keep_origin_dtype with inputs of both): the other buffer,
		 * refreshed; this step's tensors over the first keep theirs */
		void *w = p->work;
		amp_dtype wd = p->work_dtype;
		p->work = p->work_alt;
		p->work_dtype = dt;
		p->work_alt = w;
		p->work_alt_dtype = wd;
		p->work_valid = 0;
	} else if (!p->work || p->work_dtype != dt) {
		if (amp_mem_check(ctx, (uint64_t)m->numel * amp_dt(dt)->size))
			return NULL;
		void *old = p->work;
		p->work = amp_persist_alloc(ctx, (size_t)m->numel * amp_dt(dt)->size);
		if (!p->work) {
			p->work = old;
			amp_fail(ctx, AMP_ENOMEM, "out of memory for the working copy of '%s'", p->label);
			return NULL;
		}
		amp_mem_account(ctx, AMP_MEM_WORKING, (int64_t)(m->numel * (int64_t)amp_dt(dt)->size));
		if (old && !p->work_alt) { /* kept for a flip back: one per half type */
			p->work_alt = old;
			p->work_alt_dtype = p->work_dtype;
		}
		p->work_dtype = dt;
		p->work_valid = 0;
	}
	amp_tensor *c = amp_alias(ctx, m, m->shape);
	if (!c)
		return NULL;
	c->dtype = dt;
	c->data = p->work;
	c->param = NULL;
	c->requires_grad = 0;
	if (!p->work_valid) {
		p->work_nonfinite = amp_cvt(dt, p->work, AMP_F32, m->data, m->numel);
		p->work_valid = 1;
		amp_count_copy(ctx);
		if (AMP_TRACING())
			amp_trace_copy(AMP_COPY_MASTER,
			               (uint64_t)m->numel * (amp_dt(AMP_F32)->size + amp_dt(dt)->size),
			               AMP_F32, dt, t0, ctx->step, p->label);
	}
	if (AMP_TRACING())
		amp_check_cast(ctx, m, c, p->work_nonfinite);
	return c;
}

amp_tensor *amp_cast_to(amp_ctx *ctx, amp_tensor *t, amp_dtype dt, const char *label)
{
	amp_param *p = t->param;
	/* A master that a sharded update left current in this rank's share only (the ranks
	 * gathered its working copy) cannot be read itself or make a working copy of it. */
	if (p && p->master_partial &&
	    (dt == t->dtype || !p->work || !p->work_valid || p->work_dtype != dt)) {
		amp_fail(
		    ctx, AMP_ESTATE,
		    "parameter '%s': optimizer_sharding left its master current only in this "
		    "rank's share (the ranks exchanged its %s working copy); it is now read in "
		    "%s: call amp_mpi_consolidate on every rank first",
		    p->label, p->work ? amp_dtype_name(p->work_dtype) : "half", amp_dtype_name(dt));
		return NULL;
	}
	if (p && dt == t->dtype)
		p->f32_step = ctx->step; /* the master itself read: a sharded update gathers it */
	if (t->dtype == dt || !amp_dt(t->dtype)->is_float)
		return t;
	int working = p && amp_dt(dt)->is_half; /* a master's half working copy */
	if (working && p->working && p->working->dtype == dt && p->working_step == ctx->step)
		return p->working;

	uint64_t t0 = AMP_TRACING() ? amp_trace_clock() : 0;
	const char *name = p ? p->label : label;
	amp_tensor *c;
	if (working) {
		if (!(c = working_copy(ctx, p, dt, t0)))
			return NULL;
	} else {
		c = amp_alloc_raw(ctx, dt, t->shape, AMP_MEM_ACTIVATIONS); /* converted in full */
		if (!c)
			return NULL;
		/* of a half result, counted by the conversion */
		int64_t nonfinite = amp_cvt(dt, c->data, t->dtype, t->data, t->numel);
		amp_count_copy(ctx);
		if (AMP_TRACING()) {
			amp_trace_copy(AMP_COPY_CAST,
			               (uint64_t)t->numel * (amp_dtype_size(t->dtype) + amp_dtype_size(dt)),
			               t->dtype, dt, t0, ctx->step, name);
			amp_check_cast(ctx, t, c, nonfinite);
		}
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
		node->in_unread = 1; /* it converts the gradient back */
		node->in[0] = t;
		node->n_in = 1;
		node->out = c;
		node->exec = dt;
		node->prev = ctx->tape;
		ctx->tape = node;
		c->node = node;
		c->requires_grad = 1;
	}
	if (working) {
		p->working = c;
		p->working_step = ctx->step;
	}
	return c;
}

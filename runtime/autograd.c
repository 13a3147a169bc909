/* autograd.c — op dispatch bookkeeping (validation, tracing, tape recording) and the
 * reverse-mode pass over the step's tape.
 *
 * Gradients have the dtype of the tensor they belong to, so an FP16 activation gets an FP16
 * gradient: that is where scaled gradients can overflow, and what the loss scaler is for.
 * Parameter masters get persistent FP32 gradients.
 */
#include "check.h"
#include "internal.h"

#include <math.h>
#include <string.h>

int amp_op_begin(amp_ctx *ctx, amp_op_call *call, amp_op_type op, const char *label,
                 amp_tensor *const *in, int n)
{
	if (!ctx)
		return AMP_EINVAL;
	memset(call, 0, sizeof *call);
	call->op = op;
	call->label = label;
	const char *lb = label ? label : "-";
	if (!ctx->in_step)
		return amp_fail(ctx, AMP_ESTATE, "%s '%s': no step begun (call amp_step_begin first)",
		                amp_op_name(op), lb);
	if (ctx->limit_hit)
		return amp_fail(ctx, AMP_ELIMIT, "%s '%s': step %lld was refused by memory_limit",
		                amp_op_name(op), lb, (long long)ctx->step);
	ctx->cur_op = op;
	ctx->cur_label = label;
	ctx->cur_what = NULL;
	for (int i = 0; i < n; i++) {
		if (!in[i])
			return amp_fail(ctx, AMP_EINVAL, "%s '%s': input %d is NULL", amp_op_name(op), lb, i);
		if (in[i]->owner != ctx)
			return amp_fail(ctx, AMP_EINVAL, "%s '%s': input %d: %s", amp_op_name(op), lb, i,
			                amp_foreign_why);
		if (in[i]->released)
			return amp_fail(ctx, AMP_ESTATE, "%s '%s': input %d: %s", amp_op_name(op), lb, i,
			                amp_released_why);
		if (!amp_dt(in[i]->dtype)->is_float)
			return amp_fail(ctx, AMP_EDTYPE, "%s '%s': input %d is int32, expected a float tensor",
			                amp_op_name(op), lb, i);
	}
	call->exec = amp_policy_exec(ctx, op, in, n);
	call->engine = amp_kernels_vec_engine(); /* the GEMM ops record their GEMM's */
	call->in_dtype = n > 0 ? in[0]->dtype : AMP_F32;
	return AMP_OK;
}

void amp_op_start_timer(amp_op_call *call)
{
	call->t0 = AMP_TRACING() ? amp_trace_clock() : 0;
}

int amp_op_setup_f32(amp_ctx *ctx, amp_op_call *call, amp_tensor **in, int n,
                     const float **views, amp_tensor **y, float **y32)
{
	for (int i = 0; i < n; i++)
		if (!(in[i] = amp_cast_to(ctx, in[i], call->exec, call->label)))
			return amp_oom(ctx);
	amp_op_start_timer(call);
	if (!(*y = amp_alloc(ctx, call->exec, in[0]->shape, AMP_MEM_ACTIVATIONS)))
		return amp_oom(ctx);
	int missing = 0;
	for (int i = 0; i < n; i++)
		if (!(views[i] = amp_f32_view(ctx, in[i])))
			missing = 1;
	*y32 = (*y)->dtype == AMP_F32 ? (*y)->data
	                              : amp_arena_alloc(ctx, (size_t)(*y)->numel * sizeof(float));
	if (missing || !*y32)
		return amp_fail(ctx, AMP_ENOMEM, "%s '%s': out of memory", amp_op_name(call->op),
		                call->label ? call->label : "-");
	return AMP_OK;
}

void amp_trace_kernel(amp_ctx *ctx, amp_op_type op, const char *label, amp_dtype exec,
                      amp_engine engine, amp_phase phase, uint64_t t0, uint64_t flops,
                      uint64_t bytes, amp_shape shape)
{
	amp_trace_kernel_gemm(ctx, op, label, exec, engine, phase, t0, flops, bytes, shape, 0);
}

void amp_trace_kernel_gemm(amp_ctx *ctx, amp_op_type op, const char *label, amp_dtype exec,
                           amp_engine engine, amp_phase phase, uint64_t t0, uint64_t flops,
                           uint64_t bytes, amp_shape shape, int aligned)
{
	uint64_t seq = ctx->seq++;
	amp_count_op(ctx);
	if (!AMP_TRACING())
		return;
	amp_trace_op rec = {
	    .op = op,
	    .phase = phase,
	    .exec_dtype = exec,
	    .in_dtype = exec,
	    .out_dtype = exec,
	    .label = label,
	    .step = ctx->step,
	    .seq = seq,
	    .t_begin = t0,
	    .flops = flops,
	    .bytes = bytes,
	    .ndim = shape.ndim,
	    .aligned = aligned,
	    .engine = engine,
	};
	for (int i = 0; i < shape.ndim && i < 4; i++)
		rec.shape[i] = shape.d[i];
	amp_trace_op_end(&rec);
}

int amp_op_end(amp_ctx *ctx, amp_op_call *call, amp_tensor *out, amp_tensor *const *in, int n,
               amp_backward_fn backward, amp_node **nodep)
{
	if (nodep)
		*nodep = NULL;
	uint64_t seq = ctx->seq++;
	amp_count_op(ctx);
	if (AMP_TRACING()) {
		amp_trace_op rec = {
		    .op = call->op,
		    .phase = ctx->in_backward ? AMP_PHASE_BACKWARD : AMP_PHASE_FORWARD,
		    .exec_dtype = call->exec,
		    .in_dtype = call->in_dtype,
		    .out_dtype = out->dtype,
		    .label = call->label,
		    .step = ctx->step,
		    .seq = seq,
		    .t_begin = call->t0,
		    .flops = call->flops,
		    .bytes = call->bytes,
		    .ndim = out->shape.ndim,
		    .aligned = call->aligned,
		    .engine = call->engine,
		};
		for (int i = 0; i < out->shape.ndim; i++)
			rec.shape[i] = out->shape.d[i];
		amp_trace_op_end(&rec);
		amp_check_op(ctx, call, seq, out, in, n);
	}
	int requires = 0;
	for (int i = 0; i < n; i++)
		requires |= in[i] && in[i]->requires_grad;
	if (!requires || !ctx->training || ctx->in_backward || !backward)
		return AMP_OK;
	amp_node *node = amp_arena_alloc(ctx, sizeof *node);
	if (!node)
		return amp_fail(ctx, AMP_ENOMEM, "out of memory recording %s", amp_op_name(call->op));
	node->op = call->op;
	node->label = amp_arena_strdup(ctx, call->label);
	node->backward = backward;
	for (int i = 0; i < n && i < AMP_NODE_MAX_IN; i++)
		node->in[i] = in[i];
	node->n_in = n;
	node->out = out;
	node->exec = call->exec;
	node->seq = seq;
	node->prev = ctx->tape;
	ctx->tape = node;
	out->node = node;
	out->requires_grad = 1;
	if (nodep)
		*nodep = node;
	return AMP_OK;
}

/* ---- gradient accumulation --------------------------------------------------------------- */

static amp_tensor *grad_of(amp_ctx *ctx, amp_tensor *t, int *fresh)
{
	*fresh = 0;
	if (t->param) {
		if (t->param->grad_kept)
			amp_param_grad_settle(t->param); /* a second gradient: added to the first */
		t->param->grad_counted = 0;          /* a writer: the count, if any, no longer holds */
	}
	if (t->grad) {
		t->grad->nonfinite_known = 0; /* a writer: the checks' count no longer holds */
		if (t->param && t->param->grad_stale) { /* zero in meaning: written over */
			t->param->grad_stale = 0;
			*fresh = 1;
		}
		return t->grad;
	}
	/* a fresh step-scoped gradient is written in full by every caller: not zeroed */
	if (t->param)
		t->grad = amp_alloc_persistent(ctx, AMP_F32, t->shape, AMP_MEM_GRADS);
	else
		t->grad = amp_alloc_raw(ctx, t->dtype, t->shape, AMP_MEM_GRADS);
	*fresh = 1;
	return t->grad;
}

void amp_param_grad_settle(amp_param *p)
{
	amp_tensor *g = p->master->grad;
	if (g && p->grad_kept) {
		const amp_tensor *h = p->grad_kept;
		amp_dt(h->dtype)->to_f32(h->data, g->data, h->numel);
	} else if (g && p->grad_stale) {
		memset(g->data, 0, (size_t)g->numel * sizeof(float));
	}
	p->grad_kept = NULL;
	p->grad_stale = 0;
}

amp_tensor *amp_grad_open(amp_ctx *ctx, amp_tensor *t, int *fresh)
{
	amp_tensor *g = grad_of(ctx, t, fresh);
	if (!g)
		amp_fail(ctx, AMP_ENOMEM, "out of memory for a gradient");
	return g;
}

float *amp_grad_block_dst(amp_tensor *g, int fresh, int64_t i0, float *buf)
{
	return fresh ? amp_block_dst(g, i0, buf) : buf;
}

void amp_grad_block_end(amp_tensor *g, int fresh, int64_t i0, int64_t n, const float *dx)
{
	if (fresh) {
		amp_block_write(g, i0, n, dx);
		return;
	}
	if (g->dtype == AMP_F32) {
		float *d = (float *)g->data + i0;
		amp_vadd_f32(d, dx, d, n);
		return;
	}
	float acc[AMP_BLOCK];
	const float *old = amp_block_read(g, i0, n, acc);
	amp_vadd_f32(old, dx, acc, n);
	amp_block_write(g, i0, n, acc);
}

amp_tensor *amp_grad_dst(amp_ctx *ctx, amp_tensor *t, amp_dtype dt, int *fresh)
{
	*fresh = 0;
	if (t->grad ? t->grad->dtype != dt : (t->param ? AMP_F32 : t->dtype) != dt)
		return NULL;
	amp_tensor *g = grad_of(ctx, t, fresh);
	if (!g)
		*fresh = -1;
	return g;
}

int amp_grad_acc_f32(amp_ctx *ctx, amp_tensor *t, const float *g32)
{
	int fresh;
	amp_tensor *g = grad_of(ctx, t, &fresh);
	if (!g)
		return amp_oom(ctx);
	if (g->dtype == AMP_F32) {
		if (fresh)
			memcpy(g->data, g32, (size_t)g->numel * sizeof(float));
		else
			amp_vadd_f32(g->data, g32, g->data, g->numel);
		return AMP_OK;
	}
	const amp_dtype_info *di = amp_dt(g->dtype);
	if (fresh) {
		di->from_f32(g32, g->data, g->numel);
		return AMP_OK;
	}
	float *acc = amp_arena_alloc_raw(ctx, (size_t)g->numel * sizeof(float));
	if (!acc)
		return amp_fail(ctx, AMP_ENOMEM, "out of memory");
	di->to_f32(g->data, acc, g->numel);
	amp_vadd_f32(acc, g32, acc, g->numel);
	di->from_f32(acc, g->data, g->numel);
	return AMP_OK;
}

/* amp_grad_acc; keep: g may become the master's grad_kept (amp_grad_acc_kept), 1 returned. */
static int grad_acc(amp_ctx *ctx, amp_tensor *t, const amp_tensor *g, int keep)
{
	if (g->numel != t->numel)
		return amp_fail(ctx, AMP_ESHAPE, "gradient of %lld elements for a tensor of %lld",
		                (long long)g->numel, (long long)t->numel);
	int fresh;
	amp_tensor *dst = grad_of(ctx, t, &fresh);
	if (!dst)
		return amp_oom(ctx);
	if (fresh && dst->dtype == g->dtype) {
		memcpy(dst->data, g->data, (size_t)g->numel * amp_dtype_size(g->dtype));
		return AMP_OK;
	}
	if (keep && fresh && t->param && dst->dtype == AMP_F32 && amp_dt(g->dtype)->is_half) {
		/* counted now, while the kernel that wrote it has it in cache (or by the checks,
		 * under a profiler); widened by the optimizer's update block by block (no pass of
		 * its own, no FP32 copy written) */
		t->param->grad_kept = g;
		/* data parallel: the backend counts the sums over the ranks (alone, the optimizer
		 * counts it), so a count of this rank's own would be a pass for nothing */
		t->param->grad_counted = g->nonfinite_known || !ctx->dist;
		t->param->grad_nonfinite =
		    g->nonfinite_known ? g->nonfinite /* the checks' scan of it */
		    : ctx->dist        ? 0
		                       : amp_dt(g->dtype)->nonfinite(g->data, g->numel);
		return 1;
	}
	if (fresh && t->param && g->dtype != AMP_F32) {
		/* a master's first gradient of the step, widened from a half one: its NaN/Inf count
		 * comes with the widening, so the optimizer need not read it again to check it */
		t->param->grad_nonfinite = amp_cvt_widen_count(g->dtype, g->data, dst->data, g->numel);
		t->param->grad_counted = 1;
		return AMP_OK;
	}
	if (fresh) {
		/* grad_of made a new buffer; converting straight into it is the whole job. */
		amp_cvt(dst->dtype, dst->data, g->dtype, g->data, g->numel);
		return AMP_OK;
	}
	if (dst->dtype == AMP_F32 && g->dtype != AMP_F32) {
		/* a half gradient into an FP32 one (a master's): widened block by block, added while
		 * the block is in L1 (one pass over each; the same sums as a whole-tensor view) */
		float buf[AMP_BLOCK];
		float *d = dst->data;
		for (int64_t i0 = 0; i0 < g->numel; i0 += AMP_BLOCK) {
			int64_t n = g->numel - i0 < AMP_BLOCK ? g->numel - i0 : AMP_BLOCK;
			const float *gb = amp_block_read(g, i0, n, buf);
			amp_vadd_f32(d + i0, gb, d + i0, n);
		}
		return AMP_OK;
	}
	const float *g32 = amp_f32_view(ctx, g);
	if (!g32)
		return amp_fail(ctx, AMP_ENOMEM, "out of memory");
	return amp_grad_acc_f32(ctx, t, g32);
}

int amp_grad_acc(amp_ctx *ctx, amp_tensor *t, const amp_tensor *g)
{
	int rc = grad_acc(ctx, t, g, 0);
	return rc > 0 ? AMP_OK : rc;
}

int amp_grad_acc_kept(amp_ctx *ctx, amp_tensor *t, const amp_tensor *g)
{
	return grad_acc(ctx, t, g, 1);
}

const float *amp_grad_out_f32(amp_ctx *ctx, amp_node *node)
{
	const float *g = amp_f32_view(ctx, node->out->grad);
	if (!g)
		amp_fail(ctx, AMP_ENOMEM, "out of memory");
	return g;
}

/* ---- the reverse pass -------------------------------------------------------------------- */

/* The inputs a node lists in in[] (Concat keeps more in its saved state; its backward reads
 * none of their values). */
static int node_inputs(const amp_node *node)
{
	return node->n_in < AMP_NODE_MAX_IN ? node->n_in : AMP_NODE_MAX_IN;
}

/* Data parallel (amp/amp_dist.h): each master's last use on the tape is the oldest node that
 * reads it; once that node's backward has run, the master's gradient is final and its bucket
 * may start reducing while the rest of the tape runs.  A node with more inputs than in[] holds
 * (a Concat of many) counts as a use of every master: its other inputs are not listed. */
static void dist_backward_begin(amp_ctx *ctx)
{
	for (amp_param *p = ctx->params; p; p = p->next)
		p->last_use = NULL;
	for (amp_node *node = ctx->tape; node; node = node->prev) {
		if (node->n_in > AMP_NODE_MAX_IN) {
			for (amp_param *p = ctx->params; p; p = p->next)
				p->last_use = node;
			continue;
		}
		for (int i = 0; i < node->n_in; i++)
			if (node->in[i] && node->in[i]->param)
				node->in[i]->param->last_use = node;
	}
	ctx->dist->backward_begin(ctx->dist_state, ctx);
}

/* The kernels' poll (amp_kernels_set_poll) while a backward's reductions run: they move on
 * inside long GEMMs too (the MLP's 1024-wide dW: a few hundred us), not only between nodes. */
static void dist_poll(void *arg)
{
	amp_ctx *ctx = arg;
	ctx->dist->progress(ctx->dist_state, ctx);
}

static void dist_node_done(amp_ctx *ctx, amp_node *node)
{
	for (amp_param *p = ctx->params; p; p = p->next)
		if (p->last_use == node) {
			p->last_use = NULL;
			ctx->dist->grad_ready(ctx->dist_state, ctx, p->index);
		}
	ctx->dist->progress(ctx->dist_state, ctx);
}

int amp_backward(amp_ctx *ctx, amp_tensor *loss)
{
	if (!ctx || !loss)
		return amp_fail(ctx, AMP_EINVAL, "amp_backward: NULL argument");
	if (loss->owner != ctx)
		return amp_fail(ctx, AMP_EINVAL, "amp_backward: the loss: %s", amp_foreign_why);
	if (!ctx->in_step)
		return amp_fail(ctx, AMP_ESTATE, "amp_backward: no step begun");
	if (ctx->backward_done)
		return ctx->cfg.accum_steps > 1 && ctx->micro_done < ctx->cfg.accum_steps
		           ? amp_fail(ctx, AMP_ESTATE,
		                      "amp_backward: micro-batch %lld of step %lld has run its "
		                      "backward; call amp_micro_batch_begin for the next",
		                      (long long)ctx->micro_done, (long long)ctx->step)
		           : amp_fail(ctx, AMP_ESTATE, "amp_backward: already run in step %lld",
		                      (long long)ctx->step);
	if (ctx->optim_done)
		return amp_fail(ctx, AMP_ESTATE, "amp_backward: the optimizer already ran in step %lld",
		                (long long)ctx->step);
	if (loss->numel != 1 || !amp_dt(loss->dtype)->is_float)
		return amp_fail(ctx, AMP_ESHAPE, "amp_backward: the loss must be a float scalar");
	if (ctx->limit_hit)
		return amp_fail(ctx, AMP_ELIMIT, "amp_backward: step %lld was refused by memory_limit",
		                (long long)ctx->step);
	ctx->backward_done = 1;
	ctx->micro_done++;
	float v;
	amp_dt(loss->dtype)->to_f32(loss->data, &v, 1);
	/* the step's loss: the mean over its micro-batches */
	ctx->step_loss_sum += (double)v;
	ctx->step_loss = ctx->step_loss_sum / (double)ctx->micro_done;
	if (AMP_TRACING())
		amp_check_loss(ctx, loss);
	if (!loss->requires_grad)
		return AMP_OK;

	/* The scale of the whole step (the loss scale is fixed inside an accumulation window). */
	double scale = ctx->micro_done > 1 ? ctx->step_scale : amp_loss_scale(ctx);
	ctx->step_scale = scale;
	float seed = (float)scale;
	int rc = amp_backward_seeded(ctx, loss, &seed);
	if (rc)
		ctx->backward_failed = 1;
	return rc;
}

/* Whether a tensor on the tape other than y shares y's storage (an alias of it, which is read
 * through its own header and would not see y dropped). */
static int storage_shared(const amp_ctx *ctx, const amp_tensor *y)
{
	const char *lo = y->data, *hi = lo + (size_t)y->numel * amp_dtype_size(y->dtype);
	for (const amp_node *node = ctx->tape; node; node = node->prev)
		for (int k = -1; k < node_inputs(node); k++) {
			const amp_tensor *t = k < 0 ? node->out : node->in[k];
			if (!t || t == y || t->released)
				continue;
			const char *a = t->data,
			           *b = a + (size_t)t->numel * amp_dtype_size(t->dtype);
			if (a < hi && lo < b)
				return 1;
		}
	return 0;
}

/* memory_optimize: the outputs of this micro-batch's nodes that can recompute them
 * (node->recompute: their own backward does not read them) go back to the arena before the
 * backward starts; each node whose backward reads one gets it back for that backward only
 * (amp_node_inputs_back).  Kept: the seeded output, an output whose storage is shared, and one
 * whose node reads a tensor that is itself recomputable (it could not be rebuilt from it). */
static void drop_recomputable(amp_ctx *ctx, const amp_tensor *seeded)
{
	for (amp_node *node = ctx->tape; node && node != ctx->mark_tape; node = node->prev) {
		amp_tensor *y = node->out;
		if (!node->recompute || y == seeded || !y->owns_data || y->released)
			continue;
		int chained = 0;
		for (int k = 0; k < node_inputs(node); k++)
			chained |= node->in[k] && node->in[k]->node && node->in[k]->node->recompute;
		if (!chained && !storage_shared(ctx, y))
			amp_tensor_release(ctx, y);
	}
}

int amp_node_inputs_back(amp_ctx *ctx, const amp_node *node, int all, amp_tensor **got, int *n_got)
{
	*n_got = 0;
	amp_op_type cur_op = ctx->cur_op;
	const char *cur_label = ctx->cur_label;
	int rc = AMP_OK;
	for (int k = 0; (all || !node->in_unread) && k < node_inputs(node) && !rc; k++) {
		amp_tensor *t = node->in[k];
		/* released before its producer's backward ran: dropped, not done with */
		if (!t || !t->released || !t->node || !t->node->recompute)
			continue;
		ctx->cur_op = t->node->op; /* what memory_limit names if it refuses the space */
		ctx->cur_label = t->node->label;
		if ((rc = amp_tensor_reacquire(ctx, t)))
			break;
		got[(*n_got)++] = t;
		rc = t->node->recompute(ctx, t->node);
	}
	ctx->cur_op = cur_op;
	ctx->cur_label = cur_label;
	return rc;
}

void amp_node_inputs_release(amp_ctx *ctx, amp_tensor **got, int n_got)
{
	for (int k = 0; k < n_got; k++)
		amp_tensor_release(ctx, got[k]);
}

int amp_backward_seeded(amp_ctx *ctx, amp_tensor *out, const float *seed)
{
	int rc = amp_grad_acc_f32(ctx, out, seed);
	if (rc)
		return rc;
	ctx->backward_done = 1;
	ctx->in_backward = 1;
	if (ctx->cfg.memory_optimize)
		drop_recomputable(ctx, out);
	/* Data parallel: the ranks reduce the step's gradients once they are whole, in the last
	 * micro-batch's backward (the earlier ones only add to them). */
	const int reduce = ctx->dist && ctx->micro_done >= ctx->cfg.accum_steps;
	if (reduce) {
		dist_backward_begin(ctx);
		amp_kernels_set_poll(dist_poll, ctx);
	}
	/* memory_optimize: the tape is a list newest first, and a tensor's consumers come after
	 * its producer, so once a node's backward has run, nothing left on the tape reads its
	 * output or that output's gradient: both go back to the arena.  Nodes from before this
	 * step's micro-batches (the mark) run again in the next micro-batch: they keep theirs. */
	int release = ctx->cfg.memory_optimize;
	for (amp_node *node = ctx->tape; node; node = node->prev) {
		if (node == ctx->mark_tape)
			release = 0;
		if (!node->out->grad)
			continue; /* not on the path from the loss */
		amp_tensor *got[AMP_NODE_MAX_IN];
		int n_got = 0;
		ctx->cur_what = NULL;
		if ((rc = amp_node_inputs_back(ctx, node, 0, got, &n_got)))
			break;
		uint64_t seq_before = ctx->seq;
		ctx->cur_op = node->op;
		ctx->cur_label = node->label;
		rc = node->backward(ctx, node);
		if (rc)
			break;
		if (AMP_TRACING())
			amp_check_backward(ctx, node, seq_before);
		if (reduce)
			dist_node_done(ctx, node);
		amp_node_inputs_release(ctx, got, n_got);
		if (release && node->out != out) {
			amp_tensor_release(ctx, node->out->grad);
			amp_tensor_release(ctx, node->out);
		}
	}
	if (reduce)
		amp_kernels_set_poll(NULL, NULL);
	if (reduce && rc == AMP_OK)
		rc = ctx->dist->backward_end(ctx->dist_state, ctx);
	ctx->in_backward = 0;
	ctx->cur_op = AMP_OP_COUNT;
	return rc;
}

/* ops_reduce.c — full reductions to a scalar: Sum and Mean.
 *
 * Elements are read in FP32 and accumulated in double in index order, so the result is accurate
 * to the final rounding and bit-identical from run to run, whatever the exec dtype.
 */
#include "internal.h"

static int reduce_backward(amp_ctx *ctx, amp_node *node)
{
	uint64_t t0 = AMP_TRACING() ? amp_trace_clock() : 0;
	amp_tensor *x = node->in[0];
	const float *g = amp_grad_out_f32(ctx, node);
	float *dx = amp_arena_alloc(ctx, (size_t)x->numel * sizeof(float));
	if (!g || !dx)
		return amp_fail(ctx, AMP_ENOMEM, "%s '%s': out of memory", amp_op_name(node->op),
		                node->label ? node->label : "-");
	/* g: () -> dx: x's shape, every element g (Sum) or g / numel (Mean). */
	float v = node->op == AMP_OP_MEAN ? (float)((double)g[0] / (double)x->numel) : g[0];
	for (int64_t i = 0; i < x->numel; i++)
		dx[i] = v;
	int rc = amp_grad_acc_f32(ctx, x, dx);
	amp_trace_kernel(ctx, node->op, node->label, node->exec, amp_kernels_vec_engine(), AMP_PHASE_BACKWARD, t0,
	                 (uint64_t)x->numel, (uint64_t)x->numel * amp_dtype_size(node->exec),
	                 x->shape);
	return rc;
}

static int reduce(amp_ctx *ctx, amp_op_type op, const char *label, amp_tensor *x, amp_tensor **out)
{
	amp_op_call call;
	amp_tensor *in[1] = {x};
	int rc = amp_op_begin(ctx, &call, op, label, in, 1);
	if (rc)
		return rc;
	if (!out)
		return amp_fail(ctx, AMP_EINVAL, "%s '%s': NULL out", amp_op_name(op),
		                label ? label : "-");
	if (!(in[0] = amp_cast_to(ctx, x, call.exec, label)))
		return amp_oom(ctx);
	amp_op_start_timer(&call);
	amp_shape scalar = {0, {0, 0, 0, 0}};
	amp_tensor *y = amp_alloc(ctx, call.exec, scalar, AMP_MEM_ACTIVATIONS);
	if (!y)
		return amp_oom(ctx);
	const float *xv = amp_f32_view(ctx, in[0]);
	if (!xv)
		return amp_fail(ctx, AMP_ENOMEM, "%s '%s': out of memory", amp_op_name(op),
		                label ? label : "-");
	/* x: (n) -> y: () */
	double acc = 0;
	for (int64_t i = 0; i < x->numel; i++)
		acc += (double)xv[i];
	if (op == AMP_OP_MEAN)
		acc /= (double)x->numel;
	float v = (float)acc;
	amp_store_f32(y, &v);
	call.flops = (uint64_t)x->numel;
	call.bytes = (uint64_t)(x->numel + 1) * amp_dtype_size(call.exec);
	if ((rc = amp_op_end(ctx, &call, y, in, 1, reduce_backward, NULL)))
		return rc;
	*out = y;
	return AMP_OK;
}

int amp_sum(amp_ctx *ctx, const char *label, amp_tensor *x, amp_tensor **out)
{
	return reduce(ctx, AMP_OP_SUM, label, x, out);
}

int amp_mean(amp_ctx *ctx, const char *label, amp_tensor *x, amp_tensor **out)
{
	return reduce(ctx, AMP_OP_MEAN, label, x, out);
}

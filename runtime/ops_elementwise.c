/* ops_elementwise.c — elementwise ops: Add, Mul (with trailing broadcast), Scale.
 *
 * FP16 tensors are computed in FP32 registers and stored back as FP16 (amp_f32_view /
 * amp_store_f32); FP32 ones in place.  This file is the model for every op: begin, cast,
 * allocate, compute, end with a backward function.
 */
#include "internal.h"

#include <string.h>

/* b's shape must equal a's or a trailing part of it. */
static int check_broadcast(amp_ctx *ctx, amp_op_type op, const char *label, const amp_tensor *a,
                           const amp_tensor *b)
{
	int ok = b->shape.ndim <= a->shape.ndim;
	for (int i = 0; ok && i < b->shape.ndim; i++)
		ok = b->shape.d[b->shape.ndim - 1 - i] == a->shape.d[a->shape.ndim - 1 - i];
	if (ok)
		return AMP_OK;
	char sa[64], sb[64];
	return amp_fail(ctx, AMP_ESHAPE, "%s '%s': shape %s does not broadcast to %s",
	                amp_op_name(op), label ? label : "-", amp_shape_str(b->shape, sb, sizeof sb),
	                amp_shape_str(a->shape, sa, sizeof sa));
}

/* Sums g (n = reps * m) over its leading repetitions into (m) floats. */
static float *reduce_reps(amp_ctx *ctx, const float *g, int64_t reps, int64_t m)
{
	float *r = amp_arena_alloc(ctx, (size_t)m * sizeof(float));
	if (!r)
		return NULL;
	for (int64_t k = 0; k < reps; k++)
		amp_vadd_f32(r, g + k * m, r, m);
	return r;
}

static int binary_forward(amp_ctx *ctx, amp_op_type op, const char *label, amp_tensor *a,
                          amp_tensor *b, amp_backward_fn backward, amp_tensor **out)
{
	amp_op_call call;
	amp_tensor *in[2] = {a, b};
	int rc = amp_op_begin(ctx, &call, op, label, in, 2);
	if (rc)
		return rc;
	if ((rc = check_broadcast(ctx, op, label, a, b)))
		return rc;
	if (!(in[0] = amp_cast_to(ctx, a, call.exec, label)) ||
	    !(in[1] = amp_cast_to(ctx, b, call.exec, label)))
		return AMP_ENOMEM;
	amp_op_start_timer(&call);
	amp_tensor *y = amp_alloc(ctx, call.exec, a->shape, AMP_MEM_ACTIVATIONS);
	const float *x0 = amp_f32_view(ctx, in[0]), *x1 = amp_f32_view(ctx, in[1]);
	float *y32 = y && call.exec == AMP_F16 ? amp_arena_alloc(ctx, (size_t)y->numel * 4)
	                                       : (y ? y->data : NULL);
	if (!y || !x0 || !x1 || !y32)
		return amp_fail(ctx, AMP_ENOMEM, "out of memory");
	int64_t m = in[1]->numel, reps = y->numel / m;
	for (int64_t k = 0; k < reps; k++) {
		if (op == AMP_OP_ADD)
			amp_vadd_f32(x0 + k * m, x1, y32 + k * m, m);
		else
			amp_vmul_f32(x0 + k * m, x1, y32 + k * m, m);
	}
	amp_store_f32(y, y32);
	call.flops = (uint64_t)y->numel;
	call.bytes = (uint64_t)(y->numel * 2 + m) * amp_dtype_size(call.exec);
	if ((rc = amp_op_end(ctx, &call, y, in, 2, backward, NULL)))
		return rc;
	*out = y;
	return AMP_OK;
}

static int add_backward(amp_ctx *ctx, amp_node *node)
{
	uint64_t t0 = AMP_TRACING() ? amp_trace_clock() : 0;
	amp_tensor *a = node->in[0], *b = node->in[1];
	const float *g = amp_grad_out_f32(ctx, node);
	if (!g)
		return AMP_ENOMEM;
	int rc = AMP_OK;
	if (a->requires_grad)
		rc = amp_grad_acc_f32(ctx, a, g);
	if (rc == AMP_OK && b->requires_grad) {
		const float *gb = b->numel == a->numel ? g : reduce_reps(ctx, g, a->numel / b->numel,
		                                                         b->numel);
		rc = gb ? amp_grad_acc_f32(ctx, b, gb) : amp_fail(ctx, AMP_ENOMEM, "out of memory");
	}
	amp_trace_kernel(ctx, node->op, node->label, node->exec, AMP_ENGINE_NONE, AMP_PHASE_BACKWARD, t0,
	                 (uint64_t)a->numel, (uint64_t)a->numel * 3 * amp_dtype_size(node->exec),
	                 a->shape);
	return rc;
}

static int mul_backward(amp_ctx *ctx, amp_node *node)
{
	uint64_t t0 = AMP_TRACING() ? amp_trace_clock() : 0;
	amp_tensor *a = node->in[0], *b = node->in[1];
	const float *g = amp_grad_out_f32(ctx, node);
	const float *av = amp_f32_view(ctx, a), *bv = amp_f32_view(ctx, b);
	float *tmp = amp_arena_alloc(ctx, (size_t)a->numel * sizeof(float));
	if (!g || !av || !bv || !tmp)
		return amp_fail(ctx, AMP_ENOMEM, "out of memory");
	int64_t m = b->numel, reps = a->numel / m;
	int rc = AMP_OK;
	if (a->requires_grad) {
		for (int64_t k = 0; k < reps; k++)
			amp_vmul_f32(g + k * m, bv, tmp + k * m, m);
		rc = amp_grad_acc_f32(ctx, a, tmp);
	}
	if (rc == AMP_OK && b->requires_grad) {
		amp_vmul_f32(g, av, tmp, a->numel);
		const float *gb = reps == 1 ? tmp : reduce_reps(ctx, tmp, reps, m);
		rc = gb ? amp_grad_acc_f32(ctx, b, gb) : amp_fail(ctx, AMP_ENOMEM, "out of memory");
	}
	amp_trace_kernel(ctx, node->op, node->label, node->exec, AMP_ENGINE_NONE, AMP_PHASE_BACKWARD, t0,
	                 (uint64_t)a->numel * 2, (uint64_t)a->numel * 4 * amp_dtype_size(node->exec),
	                 a->shape);
	return rc;
}

int amp_add(amp_ctx *ctx, const char *label, amp_tensor *a, amp_tensor *b, amp_tensor **out)
{
	return binary_forward(ctx, AMP_OP_ADD, label, a, b, add_backward, out);
}

int amp_mul(amp_ctx *ctx, const char *label, amp_tensor *a, amp_tensor *b, amp_tensor **out)
{
	return binary_forward(ctx, AMP_OP_MUL, label, a, b, mul_backward, out);
}

static int scale_backward(amp_ctx *ctx, amp_node *node)
{
	uint64_t t0 = AMP_TRACING() ? amp_trace_clock() : 0;
	amp_tensor *x = node->in[0];
	const float *g = amp_grad_out_f32(ctx, node);
	float *tmp = amp_arena_alloc(ctx, (size_t)x->numel * sizeof(float));
	if (!g || !tmp)
		return amp_fail(ctx, AMP_ENOMEM, "out of memory");
	amp_vscale_f32(g, node->f[0], tmp, x->numel);
	int rc = amp_grad_acc_f32(ctx, x, tmp);
	amp_trace_kernel(ctx, node->op, node->label, node->exec, AMP_ENGINE_NONE, AMP_PHASE_BACKWARD, t0,
	                 (uint64_t)x->numel, (uint64_t)x->numel * 2 * amp_dtype_size(node->exec),
	                 x->shape);
	return rc;
}

int amp_scale(amp_ctx *ctx, const char *label, amp_tensor *x, float s, amp_tensor **out)
{
	amp_op_call call;
	amp_tensor *in[1] = {x};
	int rc = amp_op_begin(ctx, &call, AMP_OP_SCALE, label, in, 1);
	if (rc)
		return rc;
	if (!(in[0] = amp_cast_to(ctx, x, call.exec, label)))
		return AMP_ENOMEM;
	amp_op_start_timer(&call);
	amp_tensor *y = amp_alloc(ctx, call.exec, x->shape, AMP_MEM_ACTIVATIONS);
	const float *xv = y ? amp_f32_view(ctx, in[0]) : NULL;
	float *y32 = y && call.exec == AMP_F16 ? amp_arena_alloc(ctx, (size_t)y->numel * 4)
	                                       : (y ? y->data : NULL);
	if (!xv || !y32)
		return amp_fail(ctx, AMP_ENOMEM, "out of memory");
	amp_vscale_f32(xv, s, y32, y->numel);
	amp_store_f32(y, y32);
	call.flops = (uint64_t)y->numel;
	call.bytes = (uint64_t)y->numel * 2 * amp_dtype_size(call.exec);
	amp_node *node;
	if ((rc = amp_op_end(ctx, &call, y, in, 1, scale_backward, &node)))
		return rc;
	if (node)
		node->f[0] = s;
	*out = y;
	return AMP_OK;
}

/* ops_elementwise.c — elementwise ops: Add, Mul (with trailing broadcast), Scale.
 *
 * Half tensors are computed in FP32 block by block (amp_block_read / amp_block_write: blocks
 * converted in L1, never an FP32 copy of a whole tensor); FP32 ones in place.  This file is the
 * model for every op: begin, cast, allocate, compute, end with a backward function.
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

static int64_t block_len(int64_t total, int64_t at)
{
	return total - at < AMP_BLOCK ? total - at : AMP_BLOCK;
}

int amp_binary_blocks(amp_ctx *ctx, amp_op_type op, const amp_tensor *a, const amp_tensor *b,
                      amp_tensor *y)
{
	int64_t m = b->numel, reps = a->numel / m;
	/* a broadcast b is read whole once (it is a trailing part of a); an equal one block-wise */
	const float *bview = reps > 1 ? amp_f32_view(ctx, b) : NULL;
	if (reps > 1 && !bview)
		return amp_fail(ctx, AMP_ENOMEM, "out of memory");
	float abuf[AMP_BLOCK], bbuf[AMP_BLOCK], ybuf[AMP_BLOCK];
	for (int64_t k = 0; k < reps; k++)
		for (int64_t j0 = 0; j0 < m; j0 += AMP_BLOCK) {
			int64_t n = block_len(m, j0), i0 = k * m + j0;
			const float *xa = amp_block_read(a, i0, n, abuf);
			const float *xb = bview ? bview + j0 : amp_block_read(b, j0, n, bbuf);
			float *yb = amp_block_dst(y, i0, ybuf);
			if (op == AMP_OP_MUL)
				amp_vmul_f32(xa, xb, yb, n);
			else
				amp_vadd_f32(xa, xb, yb, n);
			amp_block_write(y, i0, n, yb);
		}
	return AMP_OK;
}

/* The gradient of t (reps repetitions of m elements of g, each times f[i % m] when f is not
 * NULL; f is an fp32 (m) array or the float tensor ft read block-wise), added into t's
 * gradient.  With sum, t has m elements and receives the sum over the repetitions. */
static int grad_into(amp_ctx *ctx, amp_tensor *t, const amp_tensor *gy, int64_t reps, int64_t m,
                     const float *f, const amp_tensor *ft, int sum)
{
	float gbuf[AMP_BLOCK], fbuf[AMP_BLOCK], dbuf[AMP_BLOCK];
	if (sum) {
		float *r = amp_arena_alloc(ctx, (size_t)m * sizeof(float)); /* zeroed */
		if (!r)
			return amp_fail(ctx, AMP_ENOMEM, "out of memory");
		for (int64_t k = 0; k < reps; k++)
			for (int64_t j0 = 0; j0 < m; j0 += AMP_BLOCK) {
				int64_t n = block_len(m, j0), i0 = k * m + j0;
				const float *g = amp_block_read(gy, i0, n, gbuf);
				if (ft) {
					amp_vmul_f32(g, amp_block_read(ft, i0, n, fbuf), dbuf, n);
					g = dbuf;
				}
				amp_vadd_f32(r + j0, g, r + j0, n);
			}
		return amp_grad_acc_f32(ctx, t, r);
	}
	int fresh;
	amp_tensor *gt = amp_grad_open(ctx, t, &fresh);
	if (!gt)
		return amp_oom(ctx);
	for (int64_t k = 0; k < reps; k++)
		for (int64_t j0 = 0; j0 < m; j0 += AMP_BLOCK) {
			int64_t n = block_len(m, j0), i0 = k * m + j0;
			const float *g = amp_block_read(gy, i0, n, gbuf);
			float *dx = amp_grad_block_dst(gt, fresh, i0, dbuf);
			if (f)
				amp_vmul_f32(g, f + j0, dx, n);
			else if (ft)
				amp_vmul_f32(g, amp_block_read(ft, j0, n, fbuf), dx, n);
			else if (dx != g)
				memcpy(dx, g, (size_t)n * sizeof(float));
			amp_grad_block_end(gt, fresh, i0, n, dx);
		}
	return AMP_OK;
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
		return amp_oom(ctx);
	amp_op_start_timer(&call);
	amp_tensor *y = amp_alloc_raw(ctx, call.exec, a->shape, AMP_MEM_ACTIVATIONS); /* in full */
	if (!y)
		return amp_fail(ctx, AMP_ENOMEM, "out of memory");
	if ((rc = amp_binary_blocks(ctx, op, in[0], in[1], y)))
		return rc;
	int64_t m = in[1]->numel;
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
	amp_tensor *a = node->in[0], *b = node->in[1], *gy = node->out->grad;
	int64_t m = b->numel, reps = a->numel / m;
	int rc = AMP_OK;
	if (a->requires_grad)
		rc = grad_into(ctx, a, gy, 1, a->numel, NULL, NULL, 0);
	if (rc == AMP_OK && b->requires_grad)
		rc = grad_into(ctx, b, gy, reps, m, NULL, NULL, reps > 1);
	amp_trace_kernel(ctx, node->op, node->label, node->exec, amp_kernels_vec_engine(),
	                 AMP_PHASE_BACKWARD, t0,
	                 (uint64_t)a->numel, (uint64_t)a->numel * 3 * amp_dtype_size(node->exec),
	                 a->shape);
	return rc;
}

/* da = g * b (b broadcast over a's repetitions), db = g * a (summed over them). */
static int mul_backward(amp_ctx *ctx, amp_node *node)
{
	uint64_t t0 = AMP_TRACING() ? amp_trace_clock() : 0;
	amp_tensor *a = node->in[0], *b = node->in[1], *gy = node->out->grad;
	int64_t m = b->numel, reps = a->numel / m;
	int rc = AMP_OK;
	if (a->requires_grad) {
		const float *bv = reps > 1 ? amp_f32_view(ctx, b) : NULL;
		if (reps > 1 && !bv)
			return amp_fail(ctx, AMP_ENOMEM, "out of memory");
		rc = grad_into(ctx, a, gy, reps, m, bv, bv ? NULL : b, 0);
	}
	if (rc == AMP_OK && b->requires_grad)
		rc = grad_into(ctx, b, gy, reps, m, NULL, a, reps > 1);
	amp_trace_kernel(ctx, node->op, node->label, node->exec, amp_kernels_vec_engine(),
	                 AMP_PHASE_BACKWARD, t0,
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
	amp_tensor *x = node->in[0], *gy = node->out->grad;
	int fresh;
	amp_tensor *gx = amp_grad_open(ctx, x, &fresh);
	if (!gx)
		return amp_oom(ctx);
	float gbuf[AMP_BLOCK], dbuf[AMP_BLOCK];
	for (int64_t i0 = 0; i0 < x->numel; i0 += AMP_BLOCK) {
		int64_t n = block_len(x->numel, i0);
		float *dx = amp_grad_block_dst(gx, fresh, i0, dbuf);
		amp_vscale_f32(amp_block_read(gy, i0, n, gbuf), node->f[0], dx, n);
		amp_grad_block_end(gx, fresh, i0, n, dx);
	}
	amp_trace_kernel(ctx, node->op, node->label, node->exec, amp_kernels_vec_engine(),
	                 AMP_PHASE_BACKWARD, t0,
	                 (uint64_t)x->numel, (uint64_t)x->numel * 2 * amp_dtype_size(node->exec),
	                 x->shape);
	return AMP_OK;
}

int amp_scale(amp_ctx *ctx, const char *label, amp_tensor *x, float s, amp_tensor **out)
{
	amp_op_call call;
	amp_tensor *in[1] = {x};
	int rc = amp_op_begin(ctx, &call, AMP_OP_SCALE, label, in, 1);
	if (rc)
		return rc;
	if (!(in[0] = amp_cast_to(ctx, x, call.exec, label)))
		return amp_oom(ctx);
	amp_op_start_timer(&call);
	amp_tensor *y = amp_alloc_raw(ctx, call.exec, x->shape, AMP_MEM_ACTIVATIONS); /* in full */
	if (!y)
		return amp_fail(ctx, AMP_ENOMEM, "out of memory");
	float xbuf[AMP_BLOCK], ybuf[AMP_BLOCK];
	for (int64_t i0 = 0; i0 < y->numel; i0 += AMP_BLOCK) {
		int64_t n = block_len(y->numel, i0);
		float *yb = amp_block_dst(y, i0, ybuf);
		amp_vscale_f32(amp_block_read(in[0], i0, n, xbuf), s, yb, n);
		amp_block_write(y, i0, n, yb);
	}
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

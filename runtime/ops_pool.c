/* ops_pool.c — average pooling: AvgPool2D (k x k windows at a stride, no padding) and
 * GlobalAvgPool2D (the mean of each (H,W) plane), forward and backward, NCHW.
 *
 * Both compute in FP32 whatever the exec dtype: a half input is read a plane (AvgPool2D) or a
 * block (GlobalAvgPool2D) at a time through an FP32 buffer, and the result rounded once.
 */
#include "internal.h"

#include <string.h>

static const char *lbl(const char *label)
{
	return label ? label : "-";
}

static int64_t block_len(int64_t total, int64_t at)
{
	return total - at < AMP_BLOCK ? total - at : AMP_BLOCK;
}

/* ---- AvgPool2D --------------------------------------------------------------------------- */

/* x: (H,W) one plane fp32 -> y: (OH,OW) fp32, window means. */
static void avgpool_plane(const float *x, int64_t W, int k, int stride, int64_t OH, int64_t OW,
                          float *y)
{
	float inv = 1.0f / (float)(k * k);
	for (int64_t oh = 0; oh < OH; oh++)
		for (int64_t ow = 0; ow < OW; ow++) {
			const float *w0 = x + oh * stride * W + ow * stride;
			float s = 0.0f;
			for (int i = 0; i < k; i++)
				for (int j = 0; j < k; j++)
					s += w0[i * W + j];
			y[oh * OW + ow] = s * inv;
		}
}

/* Each window's output gradient, divided by k*k, added to every input of the window; one
 * (H,W) plane at a time through an fp32 plane buffer. */
static int avgpool2d_backward(amp_ctx *ctx, amp_node *node)
{
	uint64_t t0 = AMP_TRACING() ? amp_trace_clock() : 0;
	amp_tensor *x = node->in[0], *y = node->out;
	int k = (int)node->i[0], stride = (int)node->i[1];
	int64_t H = x->shape.d[2], W = x->shape.d[3], OH = y->shape.d[2], OW = y->shape.d[3];
	int64_t plane_in = H * W, plane_out = OH * OW, planes = x->shape.d[0] * x->shape.d[1];
	int fresh;
	amp_tensor *gx = amp_grad_open(ctx, x, &fresh);
	/* the input plane's gradient, then the output plane's (converted for a half gradient) */
	float *d = gx ? amp_arena_alloc_raw(ctx, (size_t)(plane_in + plane_out) * sizeof(float))
	              : NULL;
	if (!d)
		return amp_fail(ctx, AMP_ENOMEM, "AvgPool2D '%s': out of memory in backward",
		                lbl(node->label));
	float inv = 1.0f / (float)(k * k), *gbuf = d + plane_in;
	const amp_dtype_info *gi = amp_dt(y->grad->dtype);
	for (int64_t p = 0; p < planes; p++) {
		const char *graw = (const char *)y->grad->data + (size_t)(p * plane_out) * gi->size;
		const float *gp = (const float *)graw;
		if (y->grad->dtype != AMP_F32) {
			gi->to_f32(graw, gbuf, plane_out);
			gp = gbuf;
		}
		memset(d, 0, (size_t)plane_in * sizeof(float));
		for (int64_t oh = 0; oh < OH; oh++)
			for (int64_t ow = 0; ow < OW; ow++) {
				float v = gp[oh * OW + ow] * inv;
				float *w0 = d + oh * stride * W + ow * stride;
				for (int i = 0; i < k; i++)
					for (int j = 0; j < k; j++)
						w0[i * W + j] += v;
			}
		float buf[AMP_BLOCK];
		for (int64_t j0 = 0; j0 < plane_in; j0 += AMP_BLOCK) {
			int64_t n = block_len(plane_in, j0);
			float *dx = amp_grad_block_dst(gx, fresh, p * plane_in + j0, buf);
			if (dx != d + j0)
				memcpy(dx, d + j0, (size_t)n * sizeof(float));
			amp_grad_block_end(gx, fresh, p * plane_in + j0, n, dx);
		}
	}
	size_t es = amp_dtype_size(node->exec);
	amp_trace_kernel(ctx, node->op, node->label, node->exec, amp_kernels_vec_engine(),
	                 AMP_PHASE_BACKWARD, t0, (uint64_t)(y->numel * k * k),
	                 (uint64_t)(x->numel + y->numel) * es, y->shape);
	return AMP_OK;
}

int amp_avgpool2d(amp_ctx *ctx, const char *label, amp_tensor *x, int k, int stride,
                  amp_tensor **out)
{
	amp_op_call call;
	amp_tensor *in[1] = {x};
	int rc = amp_op_begin(ctx, &call, AMP_OP_AVGPOOL2D, label, in, 1);
	if (rc)
		return rc;
	const char *lb = lbl(label);
	char sx[64];
	amp_shape_str(x->shape, sx, sizeof sx);
	if (!out)
		return amp_fail(ctx, AMP_EINVAL, "AvgPool2D '%s': NULL out", lb);
	if (k < 1 || stride < 1)
		return amp_fail(ctx, AMP_EINVAL,
		                "AvgPool2D '%s': window %d, stride %d: expected both >= 1", lb, k,
		                stride);
	if (x->shape.ndim != 4 || x->shape.d[2] < k || x->shape.d[3] < k)
		return amp_fail(ctx, AMP_ESHAPE,
		                "AvgPool2D '%s': x %s: expected (N,C,H,W) with H, W >= window %d",
		                lb, sx, k);
	if (!(in[0] = amp_cast_to(ctx, x, call.exec, label)))
		return amp_oom(ctx);
	amp_op_start_timer(&call);
	int64_t N = x->shape.d[0], C = x->shape.d[1], H = x->shape.d[2], W = x->shape.d[3];
	int64_t OH = (H - k) / stride + 1, OW = (W - k) / stride + 1, plane_out = OH * OW;
	amp_tensor *y =
	    amp_alloc_raw(ctx, call.exec, amp_shape4(N, C, OH, OW), AMP_MEM_ACTIVATIONS);
	int f32 = call.exec == AMP_F32;
	float *pbuf = y && !f32
	                  ? amp_arena_alloc_raw(ctx, (size_t)(H * W + plane_out) * sizeof(float))
	                  : NULL;
	if (!y || (!f32 && !pbuf))
		return amp_fail(ctx, AMP_ENOMEM, "AvgPool2D '%s': out of memory", lb);
	const amp_dtype_info *di = amp_dt(call.exec);
	/* x: (N,C,H,W) -> y: (N,C,OH,OW), one (H,W) plane at a time */
	for (int64_t p = 0; p < N * C; p++) {
		const char *xp = (const char *)in[0]->data + (size_t)(p * H * W) * di->size;
		char *yp = (char *)y->data + (size_t)(p * plane_out) * di->size;
		if (f32) {
			avgpool_plane((const float *)xp, W, k, stride, OH, OW, (float *)yp);
			continue;
		}
		di->to_f32(xp, pbuf, H * W);
		avgpool_plane(pbuf, W, k, stride, OH, OW, pbuf + H * W);
		di->from_f32(pbuf + H * W, yp, plane_out);
	}
	call.flops = (uint64_t)(y->numel * k * k);
	call.bytes = (uint64_t)(x->numel + y->numel) * di->size;
	amp_node *node;
	if ((rc = amp_op_end(ctx, &call, y, in, 1, avgpool2d_backward, &node)))
		return rc;
	if (node) {
		node->i[0] = k;
		node->i[1] = stride;
	}
	*out = y;
	return AMP_OK;
}

/* ---- GlobalAvgPool2D --------------------------------------------------------------------- */

/* dx[p, :] = g[p] / (H*W), block by block. */
static int global_avgpool2d_backward(amp_ctx *ctx, amp_node *node)
{
	uint64_t t0 = AMP_TRACING() ? amp_trace_clock() : 0;
	amp_tensor *x = node->in[0];
	int64_t hw = x->shape.d[2] * x->shape.d[3], planes = x->shape.d[0] * x->shape.d[1];
	const float *g = amp_grad_out_f32(ctx, node);
	int fresh;
	amp_tensor *gx = g ? amp_grad_open(ctx, x, &fresh) : NULL;
	if (!gx)
		return amp_oom(ctx);
	float inv = (float)(1.0 / (double)hw), buf[AMP_BLOCK];
	for (int64_t p = 0; p < planes; p++) {
		float v = g[p] * inv;
		for (int64_t j0 = 0; j0 < hw; j0 += AMP_BLOCK) {
			int64_t n = block_len(hw, j0);
			float *dx = amp_grad_block_dst(gx, fresh, p * hw + j0, buf);
			for (int64_t i = 0; i < n; i++)
				dx[i] = v;
			amp_grad_block_end(gx, fresh, p * hw + j0, n, dx);
		}
	}
	amp_trace_kernel(ctx, node->op, node->label, node->exec, amp_kernels_vec_engine(),
	                 AMP_PHASE_BACKWARD, t0, (uint64_t)x->numel,
	                 (uint64_t)(x->numel + planes) * amp_dtype_size(node->exec), x->shape);
	return AMP_OK;
}

int amp_global_avgpool2d(amp_ctx *ctx, const char *label, amp_tensor *x, amp_tensor **out)
{
	amp_op_call call;
	amp_tensor *in[1] = {x};
	int rc = amp_op_begin(ctx, &call, AMP_OP_GLOBAL_AVGPOOL2D, label, in, 1);
	if (rc)
		return rc;
	if (!out)
		return amp_fail(ctx, AMP_EINVAL, "GlobalAvgPool2D '%s': NULL out", lbl(label));
	if (x->shape.ndim != 4 || x->shape.d[2] * x->shape.d[3] == 0) {
		char sx[64];
		return amp_fail(ctx, AMP_ESHAPE,
		                "GlobalAvgPool2D '%s': x %s: expected (N,C,H,W) with H, W >= 1",
		                lbl(label), amp_shape_str(x->shape, sx, sizeof sx));
	}
	if (!(in[0] = amp_cast_to(ctx, x, call.exec, label)))
		return amp_oom(ctx);
	amp_op_start_timer(&call);
	int64_t hw = x->shape.d[2] * x->shape.d[3], planes = x->shape.d[0] * x->shape.d[1];
	amp_tensor *y = amp_alloc_raw(ctx, call.exec, amp_shape2(x->shape.d[0], x->shape.d[1]),
	                              AMP_MEM_ACTIVATIONS);
	float *y32 = y ? amp_arena_alloc_raw(ctx, (size_t)planes * sizeof(float)) : NULL;
	if (!y32)
		return amp_fail(ctx, AMP_ENOMEM, "GlobalAvgPool2D '%s': out of memory", lbl(label));
	/* x: (N,C,H,W) -> y: (N,C), each plane summed in double */
	float buf[AMP_BLOCK];
	for (int64_t p = 0; p < planes; p++) {
		double s = 0;
		for (int64_t j0 = 0; j0 < hw; j0 += AMP_BLOCK) {
			int64_t n = block_len(hw, j0);
			const float *xv = amp_block_read(in[0], p * hw + j0, n, buf);
			for (int64_t i = 0; i < n; i++)
				s += (double)xv[i];
		}
		y32[p] = (float)(s / (double)hw);
	}
	amp_store_f32(y, y32);
	call.flops = (uint64_t)x->numel;
	call.bytes = (uint64_t)(x->numel + planes) * amp_dtype_size(call.exec);
	if ((rc = amp_op_end(ctx, &call, y, in, 1, global_avgpool2d_backward, NULL)))
		return rc;
	*out = y;
	return AMP_OK;
}

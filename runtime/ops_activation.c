/* ops_activation.c — BiasAdd and the pointwise functions: ReLU, GELU (tanh approximation),
 * Sigmoid, Tanh, Neg, Abs, Clamp, Log, Exp, Sqrt and Pow (scalar exponent).
 *
 * Every kernel computes in FP32.  The pointwise functions read and write half tensors block by
 * block (amp_block_read / amp_block_write: converted in L1, no FP32 copy of the tensor), so a
 * half result that does not fit becomes Inf, as it would on the device.  ReLU, a selection,
 * works on a half tensor's bits instead (amp_relu_h16: nothing to convert or round), and an
 * fp16 BiasAdd is the fp16 row kernel (amp_binary_blocks); both record the engine those ran
 * on (avx512-fp16 where the path has fp16 arithmetic).  GELU is a kernel of its own
 * (amp_gelu_f32, amp_gelu_grad_f32: libm-free, at the path's vector width).
 */
#include "amp_half.h"
#include "internal.h"

#include <math.h>
#include <string.h>

static int oom(amp_ctx *ctx, amp_op_type op, const char *label)
{
	return amp_fail(ctx, AMP_ENOMEM, "%s '%s': out of memory", amp_op_name(op),
	                label ? label : "-");
}

/* ---- BiasAdd ----------------------------------------------------------------------------- */

/* g: (R,C) fp32 -> gb: (C) fp32, summed over rows in double so long batches stay exact. */
static int bias_add_backward(amp_ctx *ctx, amp_node *node)
{
	uint64_t t0 = AMP_TRACING() ? amp_trace_clock() : 0;
	amp_tensor *x = node->in[0], *b = node->in[1];
	const float *g = amp_grad_out_f32(ctx, node);
	if (!g)
		return amp_oom(ctx);
	int64_t c = b->numel, rows = x->numel / c;
	int rc = AMP_OK;
	if (x->requires_grad)
		rc = amp_grad_acc_f32(ctx, x, g);
	if (rc == AMP_OK && b->requires_grad) {
		double *acc = amp_arena_alloc(ctx, (size_t)c * sizeof(double));
		float *gb = amp_arena_alloc(ctx, (size_t)c * sizeof(float));
		if (!acc || !gb)
			return oom(ctx, node->op, node->label);
		for (int64_t r = 0; r < rows; r++)
			for (int64_t j = 0; j < c; j++)
				acc[j] += (double)g[r * c + j];
		for (int64_t j = 0; j < c; j++)
			gb[j] = (float)acc[j];
		rc = amp_grad_acc_f32(ctx, b, gb);
	}
	amp_trace_kernel(ctx, node->op, node->label, node->exec, amp_kernels_vec_engine(), AMP_PHASE_BACKWARD, t0,
	                 (uint64_t)x->numel,
	                 (uint64_t)(x->numel * 2 + c) * amp_dtype_size(node->exec), x->shape);
	return rc;
}

int amp_bias_add(amp_ctx *ctx, const char *label, amp_tensor *x, amp_tensor *bias, amp_tensor **out)
{
	amp_op_call call;
	amp_tensor *in[2] = {x, bias};
	int rc = amp_op_begin(ctx, &call, AMP_OP_BIAS_ADD, label, in, 2);
	if (rc)
		return rc;
	if (!out)
		return amp_fail(ctx, AMP_EINVAL, "BiasAdd '%s': NULL out", label ? label : "-");
	if (x->shape.ndim < 1 || bias->shape.ndim != 1 ||
	    bias->shape.d[0] != x->shape.d[x->shape.ndim - 1]) {
		char sx[64], sb[64];
		return amp_fail(ctx, AMP_ESHAPE,
		                "BiasAdd '%s': bias %s does not match the last dimension of x %s",
		                label ? label : "-", amp_shape_str(bias->shape, sb, sizeof sb),
		                amp_shape_str(x->shape, sx, sizeof sx));
	}
	for (int i = 0; i < 2; i++)
		if (!(in[i] = amp_cast_to(ctx, in[i], call.exec, label)))
			return amp_oom(ctx);
	amp_op_start_timer(&call);
	amp_tensor *y = amp_alloc_raw(ctx, call.exec, x->shape, AMP_MEM_ACTIVATIONS); /* in full */
	if (!y)
		return oom(ctx, AMP_OP_BIAS_ADD, label);
	/* x: (R,C), bias: (C) -> y: (R,C) */
	if ((rc = amp_binary_blocks(ctx, AMP_OP_ADD, in[0], in[1], y, &call.engine)))
		return rc;
	int64_t c = bias->numel;
	call.flops = (uint64_t)y->numel;
	call.bytes = (uint64_t)(y->numel * 2 + c) * amp_dtype_size(call.exec);
	if ((rc = amp_op_end(ctx, &call, y, in, 2, bias_add_backward, NULL)))
		return rc;
	*out = y;
	return AMP_OK;
}

/* ---- pointwise functions ----------------------------------------------------------------- */

/* Rough flops per element, for the trace. */
static uint64_t pointwise_flops(amp_op_type op)
{
	switch (op) {
	case AMP_OP_GELU: return 10;
	case AMP_OP_POW:
	case AMP_OP_SIGMOID:
	case AMP_OP_TANH: return 4;
	case AMP_OP_LOG:
	case AMP_OP_CLAMP:
	case AMP_OP_EXP: return 2;
	default: return 1;
	}
}

/* 1 / (1 + exp(-x)), never exp of a large positive argument. */
static float sigmoid_f32(float x)
{
	if (x >= 0.0f)
		return 1.0f / (1.0f + expf(-x));
	float e = expf(x);
	return e / (1.0f + e);
}

/* x: (n) fp32 -> y: (n) fp32; e is Pow's exponent, or Clamp's bounds [e, e2]. */
static void pointwise_forward(amp_op_type op, const float *x, float *y, int64_t n, float e,
                              float e2)
{
	switch (op) {
	case AMP_OP_SIGMOID:
		for (int64_t i = 0; i < n; i++)
			y[i] = sigmoid_f32(x[i]);
		break;
	case AMP_OP_TANH:
		for (int64_t i = 0; i < n; i++)
			y[i] = tanhf(x[i]);
		break;
	case AMP_OP_NEG:
		for (int64_t i = 0; i < n; i++)
			y[i] = -x[i];
		break;
	case AMP_OP_ABS:
		for (int64_t i = 0; i < n; i++)
			y[i] = fabsf(x[i]);
		break;
	case AMP_OP_CLAMP:
		/* comparisons that keep a NaN x as it is */
		for (int64_t i = 0; i < n; i++) {
			float v = x[i] < e ? e : x[i];
			y[i] = v > e2 ? e2 : v;
		}
		break;
	case AMP_OP_RELU:
		amp_relu_f32(x, y, n);
		break;
	case AMP_OP_GELU: amp_gelu_f32(x, y, n); break;
	case AMP_OP_LOG:
		for (int64_t i = 0; i < n; i++)
			y[i] = logf(x[i]);
		break;
	case AMP_OP_EXP:
		for (int64_t i = 0; i < n; i++)
			y[i] = expf(x[i]);
		break;
	case AMP_OP_SQRT:
		for (int64_t i = 0; i < n; i++)
			y[i] = sqrtf(x[i]);
		break;
	case AMP_OP_POW:
		for (int64_t i = 0; i < n; i++)
			y[i] = powf(x[i], e);
		break;
	default: break;
	}
}

/* The ops whose backward reads their output y rather than their input x. */
static int pointwise_uses_y(amp_op_type op)
{
	return op == AMP_OP_EXP || op == AMP_OP_SQRT || op == AMP_OP_SIGMOID || op == AMP_OP_TANH;
}

/* g, x, y: (n) fp32 -> dx: (n) fp32.  Exp, Sqrt, Sigmoid and Tanh use the saved output y. */
static void pointwise_backward_kernel(amp_op_type op, const float *g, const float *x,
                                      const float *y, float *dx, int64_t n, float e, float e2)
{
	switch (op) {
	case AMP_OP_SIGMOID:
		for (int64_t i = 0; i < n; i++)
			dx[i] = g[i] * y[i] * (1.0f - y[i]);
		break;
	case AMP_OP_TANH:
		for (int64_t i = 0; i < n; i++)
			dx[i] = g[i] * (1.0f - y[i] * y[i]);
		break;
	case AMP_OP_NEG:
		for (int64_t i = 0; i < n; i++)
			dx[i] = -g[i];
		break;
	case AMP_OP_ABS:
		for (int64_t i = 0; i < n; i++)
			dx[i] = x[i] > 0.0f ? g[i] : x[i] < 0.0f ? -g[i] : 0.0f;
		break;
	case AMP_OP_CLAMP:
		for (int64_t i = 0; i < n; i++)
			dx[i] = x[i] >= e && x[i] <= e2 ? g[i] : 0.0f;
		break;
	case AMP_OP_RELU:
		amp_relu_grad_f32(x, g, dx, n);
		break;
	case AMP_OP_GELU: amp_gelu_grad_f32(x, g, dx, n); break;
	case AMP_OP_LOG:
		for (int64_t i = 0; i < n; i++)
			dx[i] = g[i] / x[i];
		break;
	case AMP_OP_EXP:
		for (int64_t i = 0; i < n; i++)
			dx[i] = g[i] * y[i];
		break;
	case AMP_OP_SQRT:
		for (int64_t i = 0; i < n; i++)
			dx[i] = g[i] * 0.5f / y[i];
		break;
	case AMP_OP_POW:
		if (e == 0.0f) {
			memset(dx, 0, (size_t)n * sizeof(float));
			break;
		}
		for (int64_t i = 0; i < n; i++)
			dx[i] = g[i] * e * powf(x[i], e - 1.0f);
		break;
	default: break;
	}
}

static int pointwise_backward(amp_ctx *ctx, amp_node *node)
{
	uint64_t t0 = AMP_TRACING() ? amp_trace_clock() : 0;
	amp_tensor *x = node->in[0], *gy = node->out->grad;
	int uses_y = pointwise_uses_y(node->op);
	const amp_tensor *saved = uses_y ? node->out : x;
	int fresh;
	amp_tensor *gx = amp_grad_open(ctx, x, &fresh);
	if (!gx)
		return amp_oom(ctx);
	const amp_dtype_info *di = amp_dt(node->exec);
	/* ReLU's gradient is a selection: on the bits, when it is written fresh in the dtype of x
	 * and of its output's gradient (a half chain) */
	int on_bits = node->op == AMP_OP_RELU && di->is_half && fresh && gx->dtype == node->exec &&
	              gy->dtype == node->exec && x->dtype == node->exec;
	amp_engine engine = amp_kernels_vec_engine();
	if (on_bits)
		engine = amp_relu_grad_h16(x->data, gy->data, gx->data, x->numel,
		                           (uint16_t)di->inf_bits);
	float gbuf[AMP_BLOCK], sbuf[AMP_BLOCK], dbuf[AMP_BLOCK];
	/* g, x or y: (n) in the exec dtype -> dx: (n), block by block */
	for (int64_t i0 = 0; !on_bits && i0 < x->numel; i0 += AMP_BLOCK) {
		int64_t n = x->numel - i0 < AMP_BLOCK ? x->numel - i0 : AMP_BLOCK;
		const float *g = amp_block_read(gy, i0, n, gbuf), *v = amp_block_read(saved, i0, n, sbuf);
		float *dx = amp_grad_block_dst(gx, fresh, i0, dbuf);
		pointwise_backward_kernel(node->op, g, uses_y ? NULL : v, uses_y ? v : NULL, dx, n,
		                          node->f[0], node->f[1]);
		amp_grad_block_end(gx, fresh, i0, n, dx);
	}
	amp_trace_kernel(ctx, node->op, node->label, node->exec, engine, AMP_PHASE_BACKWARD, t0,
	                 (uint64_t)x->numel * (pointwise_flops(node->op) + 1),
	                 (uint64_t)x->numel * 3 * amp_dtype_size(node->exec), x->shape);
	return AMP_OK;
}

static int pointwise(amp_ctx *ctx, amp_op_type op, const char *label, amp_tensor *x, float e,
                     float e2, amp_tensor **out)
{
	amp_op_call call;
	amp_tensor *in[1] = {x};
	int rc = amp_op_begin(ctx, &call, op, label, in, 1);
	if (rc)
		return rc;
	if (!out)
		return amp_fail(ctx, AMP_EINVAL, "%s '%s': NULL out", amp_op_name(op),
		                label ? label : "-");
	if (op == AMP_OP_POW && !isfinite(e))
		return amp_fail(ctx, AMP_EINVAL, "Pow '%s': exponent %g must be finite",
		                label ? label : "-", (double)e);
	if (op == AMP_OP_CLAMP && !(e <= e2))
		return amp_fail(ctx, AMP_EINVAL, "Clamp '%s': bounds [%g, %g] must satisfy lo <= hi",
		                label ? label : "-", (double)e, (double)e2);
	if (!(in[0] = amp_cast_to(ctx, x, call.exec, label)))
		return amp_oom(ctx);
	amp_op_start_timer(&call);
	amp_tensor *y = amp_alloc_raw(ctx, call.exec, x->shape, AMP_MEM_ACTIVATIONS); /* in full */
	if (!y)
		return oom(ctx, op, label);
	const amp_dtype_info *di = amp_dt(call.exec);
	/* ReLU is a selection: a half x is done on its bits, in one pass */
	int on_bits = op == AMP_OP_RELU && di->is_half;
	if (on_bits)
		call.engine = amp_relu_h16(in[0]->data, y->data, y->numel, (uint16_t)di->inf_bits);
	float xbuf[AMP_BLOCK], ybuf[AMP_BLOCK];
	/* x: (n) -> y: (n) in the exec dtype, block by block */
	for (int64_t i0 = 0; !on_bits && i0 < y->numel; i0 += AMP_BLOCK) {
		int64_t n = y->numel - i0 < AMP_BLOCK ? y->numel - i0 : AMP_BLOCK;
		float *yb = amp_block_dst(y, i0, ybuf);
		pointwise_forward(op, amp_block_read(in[0], i0, n, xbuf), yb, n, e, e2);
		amp_block_write(y, i0, n, yb);
	}
	call.flops = (uint64_t)y->numel * pointwise_flops(op);
	call.bytes = (uint64_t)y->numel * 2 * amp_dtype_size(call.exec);
	amp_node *node;
	if ((rc = amp_op_end(ctx, &call, y, in, 1, pointwise_backward, &node)))
		return rc;
	if (node) {
		node->f[0] = e;
		node->f[1] = e2;
	}
	*out = y;
	return AMP_OK;
}

int amp_relu(amp_ctx *ctx, const char *label, amp_tensor *x, amp_tensor **out)
{
	return pointwise(ctx, AMP_OP_RELU, label, x, 0.0f, 0.0f, out);
}

int amp_gelu(amp_ctx *ctx, const char *label, amp_tensor *x, amp_tensor **out)
{
	return pointwise(ctx, AMP_OP_GELU, label, x, 0.0f, 0.0f, out);
}

int amp_log(amp_ctx *ctx, const char *label, amp_tensor *x, amp_tensor **out)
{
	return pointwise(ctx, AMP_OP_LOG, label, x, 0.0f, 0.0f, out);
}

int amp_exp(amp_ctx *ctx, const char *label, amp_tensor *x, amp_tensor **out)
{
	return pointwise(ctx, AMP_OP_EXP, label, x, 0.0f, 0.0f, out);
}

int amp_sqrt(amp_ctx *ctx, const char *label, amp_tensor *x, amp_tensor **out)
{
	return pointwise(ctx, AMP_OP_SQRT, label, x, 0.0f, 0.0f, out);
}

int amp_pow(amp_ctx *ctx, const char *label, amp_tensor *x, float exponent, amp_tensor **out)
{
	return pointwise(ctx, AMP_OP_POW, label, x, exponent, 0.0f, out);
}

int amp_sigmoid(amp_ctx *ctx, const char *label, amp_tensor *x, amp_tensor **out)
{
	return pointwise(ctx, AMP_OP_SIGMOID, label, x, 0.0f, 0.0f, out);
}

int amp_tanh(amp_ctx *ctx, const char *label, amp_tensor *x, amp_tensor **out)
{
	return pointwise(ctx, AMP_OP_TANH, label, x, 0.0f, 0.0f, out);
}

int amp_neg(amp_ctx *ctx, const char *label, amp_tensor *x, amp_tensor **out)
{
	return pointwise(ctx, AMP_OP_NEG, label, x, 0.0f, 0.0f, out);
}

int amp_abs(amp_ctx *ctx, const char *label, amp_tensor *x, amp_tensor **out)
{
	return pointwise(ctx, AMP_OP_ABS, label, x, 0.0f, 0.0f, out);
}

int amp_clamp(amp_ctx *ctx, const char *label, amp_tensor *x, float lo, float hi,
              amp_tensor **out)
{
	return pointwise(ctx, AMP_OP_CLAMP, label, x, lo, hi, out);
}

/* ops_reduce.c — reductions: Sum and Mean of all elements to a scalar, and Sum, Mean and Max
 * over one axis (keepdim or not).
 *
 * Elements are read in FP32 and accumulated in double in index order, so the result is accurate
 * to the final rounding and bit-identical from run to run, whatever the exec dtype.
 */
#include "internal.h"

#include <string.h>

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

/* ---- over one axis: Sum, Mean, Max --------------------------------------------------------
 * x viewed as (outer, len, inner) around the axis -> y (outer, inner).  Rows of inner
 * contiguous elements are read block by block; Max keeps the position of its winner. */

typedef struct axis_geom {
	int64_t outer, len, inner;
} axis_geom;

/* The normalized axis of x (negative counts from the end), the geometry and the output shape;
 * AMP_OK or an error naming the op, the label, the axis and the shape. */
static int axis_setup(amp_ctx *ctx, amp_op_type op, const char *label, const amp_tensor *x,
                      int *axis, int keepdim, axis_geom *g, amp_shape *ys)
{
	int nd = x->shape.ndim, a = *axis < 0 ? *axis + nd : *axis;
	if (a < 0 || a >= nd) {
		char sx[64];
		return amp_fail(ctx, AMP_EINVAL, "%s '%s': axis %d out of range for x %s",
		                amp_op_name(op), label ? label : "-", *axis,
		                amp_shape_str(x->shape, sx, sizeof sx));
	}
	*axis = a;
	g->outer = g->inner = 1;
	for (int k = 0; k < a; k++)
		g->outer *= x->shape.d[k];
	for (int k = a + 1; k < nd; k++)
		g->inner *= x->shape.d[k];
	g->len = x->shape.d[a];
	if (g->len == 0) {
		char sx[64];
		return amp_fail(ctx, AMP_ESHAPE, "%s '%s': axis %d of x %s is empty", amp_op_name(op),
		                label ? label : "-", a, amp_shape_str(x->shape, sx, sizeof sx));
	}
	amp_shape s = {0, {0, 0, 0, 0}};
	for (int k = 0; k < nd; k++)
		if (k != a)
			s.d[s.ndim++] = x->shape.d[k];
		else if (keepdim)
			s.d[s.ndim++] = 1;
	*ys = s;
	return AMP_OK;
}

/* Saved for backward: the geometry, and Max's winners (outer*inner int32 positions). */
typedef struct axis_saved {
	axis_geom g;
	int32_t *arg;
} axis_saved;

/* dx[o, i, j] = g[o, j] (Sum), g[o, j] / len (Mean), g[o, j] at i = arg[o, j] only (Max). */
static int axis_backward(amp_ctx *ctx, amp_node *node)
{
	uint64_t t0 = AMP_TRACING() ? amp_trace_clock() : 0;
	amp_tensor *x = node->in[0], *gy = node->out->grad;
	const axis_saved *sv = node->saved;
	axis_geom g = sv->g;
	const float *gv = amp_grad_out_f32(ctx, node);
	int fresh;
	amp_tensor *gx = gv ? amp_grad_open(ctx, x, &fresh) : NULL;
	if (!gx)
		return amp_oom(ctx);
	float f = node->op == AMP_OP_MEAN ? (float)(1.0 / (double)g.len) : 1.0f;
	float dbuf[AMP_BLOCK];
	if (g.inner == 1) /* rows along the last axis */
		for (int64_t o = 0; o < g.outer; o++)
			for (int64_t j0 = 0; j0 < g.len; j0 += AMP_BLOCK) {
				int64_t n = g.len - j0 < AMP_BLOCK ? g.len - j0 : AMP_BLOCK;
				float *dx = amp_grad_block_dst(gx, fresh, o * g.len + j0, dbuf);
				float v = gv[o] * f;
				for (int64_t j = 0; j < n; j++)
					dx[j] = !sv->arg ? v : sv->arg[o] == j0 + j ? gv[o] : 0.0f;
				amp_grad_block_end(gx, fresh, o * g.len + j0, n, dx);
			}
	for (int64_t o = 0; g.inner > 1 && o < g.outer; o++)
		for (int64_t i = 0; i < g.len; i++)
			for (int64_t j0 = 0; j0 < g.inner; j0 += AMP_BLOCK) {
				int64_t n = g.inner - j0 < AMP_BLOCK ? g.inner - j0 : AMP_BLOCK;
				int64_t i0 = (o * g.len + i) * g.inner + j0;
				const float *gr = gv + o * g.inner + j0;
				float *dx = amp_grad_block_dst(gx, fresh, i0, dbuf);
				if (sv->arg) {
					const int32_t *ar = sv->arg + o * g.inner + j0;
					for (int64_t j = 0; j < n; j++)
						dx[j] = ar[j] == i ? gr[j] : 0.0f;
				} else {
					amp_vscale_f32(gr, f, dx, n);
				}
				amp_grad_block_end(gx, fresh, i0, n, dx);
			}
	amp_trace_kernel(ctx, node->op, node->label, node->exec, amp_kernels_vec_engine(),
	                 AMP_PHASE_BACKWARD, t0, (uint64_t)x->numel,
	                 (uint64_t)(x->numel + gy->numel) * amp_dtype_size(node->exec), x->shape);
	return AMP_OK;
}

static int reduce_axis(amp_ctx *ctx, amp_op_type op, const char *label, amp_tensor *x, int axis,
                       int keepdim, amp_tensor **out, amp_tensor **index)
{
	amp_op_call call;
	amp_tensor *in[1] = {x};
	int rc = amp_op_begin(ctx, &call, op, label, in, 1);
	if (rc)
		return rc;
	if (!out)
		return amp_fail(ctx, AMP_EINVAL, "%s '%s': NULL out", amp_op_name(op),
		                label ? label : "-");
	axis_geom g;
	amp_shape ys;
	if ((rc = axis_setup(ctx, op, label, x, &axis, keepdim, &g, &ys)))
		return rc;
	if (op == AMP_OP_MAX && g.len > INT32_MAX)
		return amp_fail(ctx, AMP_ESHAPE, "Max '%s': axis of %lld elements is too long",
		                label ? label : "-", (long long)g.len);
	if (!(in[0] = amp_cast_to(ctx, x, call.exec, label)))
		return amp_oom(ctx);
	amp_op_start_timer(&call);
	amp_tensor *y = amp_alloc_raw(ctx, call.exec, ys, AMP_MEM_ACTIVATIONS); /* in full */
	axis_saved *sv = y ? amp_arena_alloc(ctx, sizeof *sv) : NULL;
	/* per output row: double sums (Sum, Mean) or the running maximum and its position */
	double *acc = sv && op != AMP_OP_MAX
	                  ? amp_arena_alloc_raw(ctx, (size_t)g.inner * sizeof(double))
	                  : NULL;
	float *best = sv && op == AMP_OP_MAX
	                  ? amp_arena_alloc_raw(ctx, (size_t)g.inner * sizeof(float))
	                  : NULL;
	int32_t *arg = best ? amp_arena_alloc_raw(ctx, (size_t)(g.outer * g.inner) * sizeof(int32_t))
	                    : NULL;
	float *row = sv ? amp_arena_alloc_raw(ctx, (size_t)g.inner * sizeof(float)) : NULL;
	if (!row || (op != AMP_OP_MAX && !acc) || (op == AMP_OP_MAX && !arg))
		return amp_fail(ctx, AMP_ENOMEM, "%s '%s': out of memory", amp_op_name(op),
		                label ? label : "-");
	sv->g = g;
	sv->arg = arg;
	float buf[AMP_BLOCK];
	if (g.inner == 1) {
		/* over the last axis: each row (len) is contiguous -> y: (outer) */
		float *y32 = amp_arena_alloc_raw(ctx, (size_t)g.outer * sizeof(float));
		if (!y32)
			return amp_fail(ctx, AMP_ENOMEM, "%s '%s': out of memory", amp_op_name(op),
			                label ? label : "-");
		for (int64_t o = 0; o < g.outer; o++) {
			double s = 0;
			float bv = 0.0f;
			int32_t bi = 0;
			for (int64_t j0 = 0; j0 < g.len; j0 += AMP_BLOCK) {
				int64_t n = g.len - j0 < AMP_BLOCK ? g.len - j0 : AMP_BLOCK;
				const float *xr = amp_block_read(in[0], o * g.len + j0, n, buf);
				if (op != AMP_OP_MAX) {
					for (int64_t j = 0; j < n; j++)
						s += (double)xr[j];
					continue;
				}
				for (int64_t j = 0; j < n; j++) {
					int take = (j0 == 0 && j == 0) || xr[j] > bv ||
					           (xr[j] != xr[j] && bv == bv);
					bv = take ? xr[j] : bv;
					bi = take ? (int32_t)(j0 + j) : bi;
				}
			}
			if (arg)
				arg[o] = bi;
			y32[o] = op == AMP_OP_MAX    ? bv
			         : op == AMP_OP_MEAN ? (float)(s / (double)g.len)
			                             : (float)s;
		}
		amp_store_f32(y, y32);
	}
	/* x: (outer, len, inner) -> y: (outer, inner) */
	for (int64_t o = 0; g.inner > 1 && o < g.outer; o++) {
		int32_t *ao = arg ? arg + o * g.inner : NULL;
		for (int64_t i = 0; i < g.len; i++)
			for (int64_t j0 = 0; j0 < g.inner; j0 += AMP_BLOCK) {
				int64_t n = g.inner - j0 < AMP_BLOCK ? g.inner - j0 : AMP_BLOCK;
				const float *xr = amp_block_read(in[0], (o * g.len + i) * g.inner + j0, n, buf);
				if (op != AMP_OP_MAX) {
					double *ar = acc + j0;
					if (i == 0)
						for (int64_t j = 0; j < n; j++)
							ar[j] = (double)xr[j];
					else
						for (int64_t j = 0; j < n; j++)
							ar[j] += (double)xr[j];
				} else if (i == 0) {
					memcpy(best + j0, xr, (size_t)n * sizeof(float));
					memset(ao + j0, 0, (size_t)n * sizeof(int32_t));
				} else {
					float *br = best + j0;
					int32_t *ar = ao + j0;
					for (int64_t j = 0; j < n; j++) {
						/* larger, or the first NaN (a NaN best stays) */
						int take = xr[j] > br[j] || (xr[j] != xr[j] && br[j] == br[j]);
						br[j] = take ? xr[j] : br[j];
						ar[j] = take ? (int32_t)i : ar[j];
					}
				}
			}
		if (op == AMP_OP_MAX) {
			memcpy(row, best, (size_t)g.inner * sizeof(float));
		} else {
			double f = op == AMP_OP_MEAN ? 1.0 / (double)g.len : 1.0;
			for (int64_t j = 0; j < g.inner; j++)
				row[j] = (float)(acc[j] * f);
		}
		for (int64_t j0 = 0; j0 < g.inner; j0 += AMP_BLOCK) {
			int64_t n = g.inner - j0 < AMP_BLOCK ? g.inner - j0 : AMP_BLOCK;
			float *yb = amp_block_dst(y, o * g.inner + j0, buf);
			memcpy(yb, row + j0, (size_t)n * sizeof(float));
			amp_block_write(y, o * g.inner + j0, n, yb);
		}
	}
	if (index) {
		amp_tensor *ix = NULL;
		if (op != AMP_OP_MAX || !(ix = amp_alloc_raw(ctx, AMP_I32, ys, AMP_MEM_ACTIVATIONS)))
			return op != AMP_OP_MAX ? AMP_EINVAL : AMP_ENOMEM;
		memcpy(ix->data, arg, (size_t)ix->numel * sizeof(int32_t));
		*index = ix;
	}
	call.flops = (uint64_t)x->numel;
	call.bytes = (uint64_t)(x->numel + y->numel) * amp_dtype_size(call.exec);
	amp_node *node;
	if ((rc = amp_op_end(ctx, &call, y, in, 1, axis_backward, &node)))
		return rc;
	if (node)
		node->saved = sv;
	*out = y;
	return AMP_OK;
}

int amp_sum_axis(amp_ctx *ctx, const char *label, amp_tensor *x, int axis, int keepdim,
                 amp_tensor **out)
{
	return reduce_axis(ctx, AMP_OP_SUM, label, x, axis, keepdim, out, NULL);
}

int amp_mean_axis(amp_ctx *ctx, const char *label, amp_tensor *x, int axis, int keepdim,
                  amp_tensor **out)
{
	return reduce_axis(ctx, AMP_OP_MEAN, label, x, axis, keepdim, out, NULL);
}

int amp_max_axis(amp_ctx *ctx, const char *label, amp_tensor *x, int axis, int keepdim,
                 amp_tensor **out, amp_tensor **index)
{
	return reduce_axis(ctx, AMP_OP_MAX, label, x, axis, keepdim, out, index);
}

/* ops_shape.c — ops that move data rather than compute: Reshape (an alias, no copy), Transpose
 * (a contiguous copy with two dimensions swapped), Embedding (row gather from an int32 id
 * tensor, scatter-add backward), Dropout (inverted, mask from the context's RNG stream), and
 * Concat and Slice along an axis.
 *
 * Reshape, Transpose, Concat and Slice copy raw elements, so half data moves without
 * conversions.
 */
#include "internal.h"

#include <math.h>
#include <string.h>

static const char *lbl(const char *label)
{
	return label ? label : "-";
}

static int oom(amp_ctx *ctx, amp_op_type op, const char *label)
{
	return amp_fail(ctx, AMP_ENOMEM, "%s '%s': out of memory", amp_op_name(op), lbl(label));
}

/* Backward of an alias (Reshape, identity Dropout): the gradient goes back as it is, under the
 * input's shape; no conversion since input and output share the dtype. */
static int passthrough_backward(amp_ctx *ctx, amp_node *node)
{
	uint64_t t0 = AMP_TRACING() ? amp_trace_clock() : 0;
	amp_tensor *x = node->in[0];
	int rc = amp_grad_acc(ctx, x, node->out->grad);
	amp_trace_kernel(ctx, node->op, node->label, node->exec, AMP_ENGINE_NONE,
	                 AMP_PHASE_BACKWARD, t0, 0,
	                 (uint64_t)x->numel * 2 * amp_dtype_size(node->exec), x->shape);
	return rc;
}

/* Output of an alias op: shares x's storage, carries no gradient state of its own until
 * amp_op_end decides (the copied requires_grad of x must not leak into it). */
static amp_tensor *alias_out(amp_ctx *ctx, amp_tensor *x, amp_shape shape)
{
	amp_tensor *y = amp_alias(ctx, x, shape);
	if (y)
		y->requires_grad = 0;
	return y;
}

/* ---- Reshape ----------------------------------------------------------------------------- */

int amp_reshape(amp_ctx *ctx, const char *label, amp_tensor *x, amp_shape shape, amp_tensor **out)
{
	amp_op_call call;
	amp_tensor *in[1] = {x};
	int rc = amp_op_begin(ctx, &call, AMP_OP_RESHAPE, label, in, 1);
	if (rc)
		return rc;
	call.engine = AMP_ENGINE_NONE; /* data movement, no arithmetic */
	if (!out)
		return amp_fail(ctx, AMP_EINVAL, "Reshape '%s': NULL out", lbl(label));
	char sx[64], ss[64];
	if (shape.ndim < 0 || shape.ndim > AMP_MAX_DIMS)
		return amp_fail(ctx, AMP_ESHAPE, "Reshape '%s': cannot view x %s with %d dims",
		                lbl(label), amp_shape_str(x->shape, sx, sizeof sx), shape.ndim);
	int ok = 1;
	for (int i = 0; i < AMP_MAX_DIMS; i++) {
		if (i >= shape.ndim)
			shape.d[i] = 0;
		else if (shape.d[i] <= 0)
			ok = 0;
	}
	if (!ok || !amp_shape_valid(shape) || amp_shape_numel(shape) != x->numel)
		return amp_fail(ctx, AMP_ESHAPE, "Reshape '%s': cannot view x %s as %s", lbl(label),
		                amp_shape_str(x->shape, sx, sizeof sx),
		                amp_shape_str(shape, ss, sizeof ss));
	if (!(in[0] = amp_cast_to(ctx, x, call.exec, label)))
		return amp_oom(ctx);
	amp_op_start_timer(&call);
	amp_tensor *y = alias_out(ctx, in[0], shape);
	if (!y)
		return amp_oom(ctx);
	if ((rc = amp_op_end(ctx, &call, y, in, 1, passthrough_backward, NULL)))
		return rc;
	*out = y;
	return AMP_OK;
}

/* ---- Transpose --------------------------------------------------------------------------- */

/* src: dims (4, outermost first) -> dst: the same with dims a and b swapped, contiguous.
 * esize is 2 (fp16) or 4 (fp32); elements are moved bit for bit. */
static void transpose_copy(const void *src, void *dst, size_t esize, const int64_t dims[4], int a,
                           int b)
{
	int64_t stride[4], od[4], os[4];
	stride[3] = 1;
	for (int k = 2; k >= 0; k--)
		stride[k] = stride[k + 1] * dims[k + 1];
	for (int k = 0; k < 4; k++) {
		od[k] = dims[k];
		os[k] = stride[k];
	}
	od[a] = dims[b];
	od[b] = dims[a];
	os[a] = stride[b];
	os[b] = stride[a];
	const uint16_t *s16 = src;
	const uint32_t *s32 = src;
	uint16_t *d16 = dst;
	uint32_t *d32 = dst;
	int64_t o = 0;
	for (int64_t i0 = 0; i0 < od[0]; i0++)
		for (int64_t i1 = 0; i1 < od[1]; i1++)
			for (int64_t i2 = 0; i2 < od[2]; i2++) {
				int64_t base = i0 * os[0] + i1 * os[1] + i2 * os[2];
				if (esize == 2)
					for (int64_t i3 = 0; i3 < od[3]; i3++)
						d16[o++] = s16[base + i3 * os[3]];
				else
					for (int64_t i3 = 0; i3 < od[3]; i3++)
						d32[o++] = s32[base + i3 * os[3]];
			}
}

/* Pads shape s to 4 dims with leading 1s; returns the offset added to dimension indices. */
static int pad4(amp_shape s, int64_t dims[4])
{
	int off = 4 - s.ndim;
	for (int k = 0; k < 4; k++)
		dims[k] = k < off ? 1 : s.d[k - off];
	return off;
}

static int transpose_backward(amp_ctx *ctx, amp_node *node)
{
	uint64_t t0 = AMP_TRACING() ? amp_trace_clock() : 0;
	amp_tensor *x = node->in[0];
	const float *g = amp_grad_out_f32(ctx, node);
	float *dx = amp_arena_alloc(ctx, (size_t)x->numel * sizeof(float));
	if (!g || !dx)
		return oom(ctx, node->op, node->label);
	/* g has the output's shape; swapping the same two dims again gives x's layout. */
	int64_t dims[4];
	int off = pad4(node->out->shape, dims);
	transpose_copy(g, dx, sizeof(float), dims, (int)node->i[0] + off, (int)node->i[1] + off);
	int rc = amp_grad_acc_f32(ctx, x, dx);
	amp_trace_kernel(ctx, node->op, node->label, node->exec, AMP_ENGINE_NONE,
	                 AMP_PHASE_BACKWARD, t0, 0,
	                 (uint64_t)x->numel * 2 * amp_dtype_size(node->exec), x->shape);
	return rc;
}

int amp_transpose(amp_ctx *ctx, const char *label, amp_tensor *x, int d0, int d1, amp_tensor **out)
{
	amp_op_call call;
	amp_tensor *in[1] = {x};
	int rc = amp_op_begin(ctx, &call, AMP_OP_TRANSPOSE, label, in, 1);
	if (rc)
		return rc;
	call.engine = AMP_ENGINE_NONE; /* data movement, no arithmetic */
	if (!out)
		return amp_fail(ctx, AMP_EINVAL, "Transpose '%s': NULL out", lbl(label));
	int nd = x->shape.ndim;
	if (d0 < 0 || d0 >= nd || d1 < 0 || d1 >= nd) {
		char sx[64];
		return amp_fail(ctx, AMP_EINVAL, "Transpose '%s': dims %d,%d out of range for x %s",
		                lbl(label), d0, d1, amp_shape_str(x->shape, sx, sizeof sx));
	}
	if (!(in[0] = amp_cast_to(ctx, x, call.exec, label)))
		return amp_oom(ctx);
	amp_op_start_timer(&call);
	amp_shape ys = x->shape;
	ys.d[d0] = x->shape.d[d1];
	ys.d[d1] = x->shape.d[d0];
	amp_tensor *y = amp_alloc(ctx, call.exec, ys, AMP_MEM_ACTIVATIONS);
	if (!y)
		return amp_oom(ctx);
	/* x: (a0,..,ad0,..,ad1,..) -> y: (a0,..,ad1,..,ad0,..) */
	int64_t dims[4];
	int off = pad4(x->shape, dims);
	transpose_copy(in[0]->data, y->data, amp_dtype_size(call.exec), dims, d0 + off, d1 + off);
	call.bytes = (uint64_t)y->numel * 2 * amp_dtype_size(call.exec);
	amp_node *node;
	if ((rc = amp_op_end(ctx, &call, y, in, 1, transpose_backward, &node)))
		return rc;
	if (node) {
		node->i[0] = d0;
		node->i[1] = d1;
	}
	*out = y;
	return AMP_OK;
}

/* ---- Embedding --------------------------------------------------------------------------- */

/* Saved ids: (n) int32 copied into the step arena. */
static int embedding_backward(amp_ctx *ctx, amp_node *node)
{
	uint64_t t0 = AMP_TRACING() ? amp_trace_clock() : 0;
	amp_tensor *table = node->in[0];
	const int32_t *ids = node->saved;
	int64_t c = table->shape.d[1], n = node->i[0];
	const float *g = amp_grad_out_f32(ctx, node);
	float *dt = amp_arena_alloc(ctx, (size_t)table->numel * sizeof(float));
	if (!g || !dt)
		return oom(ctx, node->op, node->label);
	/* g: (n,C) fp32 -> dt: (V,C) fp32, rows scatter-added in id order (deterministic). */
	for (int64_t k = 0; k < n; k++)
		amp_vadd_f32(dt + (int64_t)ids[k] * c, g + k * c, dt + (int64_t)ids[k] * c, c);
	int rc = amp_grad_acc_f32(ctx, table, dt);
	amp_trace_kernel(ctx, node->op, node->label, node->exec, amp_kernels_vec_engine(), AMP_PHASE_BACKWARD, t0,
	                 (uint64_t)(n * c),
	                 (uint64_t)(n * c) * amp_dtype_size(node->exec) +
	                     (uint64_t)table->numel * 4 + (uint64_t)n * 4,
	                 table->shape);
	return rc;
}

int amp_embedding(amp_ctx *ctx, const char *label, amp_tensor *table, amp_tensor *ids,
                  amp_tensor **out)
{
	amp_op_call call;
	amp_tensor *in[1] = {table};
	/* Only the table goes through amp_op_begin: it rejects int32, and ids carry no grad. */
	int rc = amp_op_begin(ctx, &call, AMP_OP_EMBEDDING, label, in, 1);
	if (rc)
		return rc;
	call.engine = AMP_ENGINE_NONE; /* data movement, no arithmetic */
	if (!out)
		return amp_fail(ctx, AMP_EINVAL, "Embedding '%s': NULL out", lbl(label));
	char st[64], si[64];
	if (table->shape.ndim != 2)
		return amp_fail(ctx, AMP_ESHAPE, "Embedding '%s': table %s must be (V,C)",
		                lbl(label), amp_shape_str(table->shape, st, sizeof st));
	if (!ids)
		return amp_fail(ctx, AMP_EINVAL, "Embedding '%s': ids is NULL", lbl(label));
	if (ids->owner != ctx)
		return amp_fail(ctx, AMP_EINVAL, "Embedding '%s': ids: %s", lbl(label),
		                amp_foreign_why);
	if (ids->dtype != AMP_I32)
		return amp_fail(ctx, AMP_EDTYPE, "Embedding '%s': ids are %s, expected int32",
		                lbl(label), amp_dtype_name(ids->dtype));
	if (ids->shape.ndim >= AMP_MAX_DIMS)
		return amp_fail(ctx, AMP_ESHAPE,
		                "Embedding '%s': ids %s leave no room for the embedding dimension "
		                "(at most %d dims)",
		                lbl(label), amp_shape_str(ids->shape, si, sizeof si),
		                AMP_MAX_DIMS - 1);
	int64_t v = table->shape.d[0], c = table->shape.d[1], n = ids->numel;
	const int32_t *idv = ids->data;
	for (int64_t k = 0; k < n; k++)
		if (idv[k] < 0 || idv[k] >= v)
			return amp_fail(
			    ctx, AMP_EINVAL,
			    "Embedding '%s': id %d at position %lld is out of range [0,%lld) "
			    "for table %s",
			    lbl(label), (int)idv[k], (long long)k, (long long)v,
			    amp_shape_str(table->shape, st, sizeof st));
	if (!(in[0] = amp_cast_to(ctx, table, call.exec, label)))
		return amp_oom(ctx);
	amp_op_start_timer(&call);
	amp_shape ys = ids->shape;
	ys.d[ys.ndim++] = c;
	amp_tensor *y = amp_alloc(ctx, call.exec, ys, AMP_MEM_ACTIVATIONS);
	int32_t *saved = amp_arena_alloc(ctx, (size_t)n * sizeof(int32_t));
	if (!y || !saved)
		return y ? oom(ctx, AMP_OP_EMBEDDING, label) : AMP_ENOMEM;
	memcpy(saved, idv, (size_t)n * sizeof(int32_t));
	/* table: (V,C), ids: (S) -> y: (S,C), rows copied raw in the exec dtype */
	size_t row = (size_t)c * amp_dtype_size(call.exec);
	const unsigned char *src = in[0]->data;
	unsigned char *dst = y->data;
	for (int64_t k = 0; k < n; k++)
		memcpy(dst + (size_t)k * row, src + (size_t)idv[k] * row, row);
	call.bytes = (uint64_t)n * (2 * row + 4);
	amp_node *node;
	if ((rc = amp_op_end(ctx, &call, y, in, 1, embedding_backward, &node)))
		return rc;
	if (node) {
		node->saved = saved;
		node->i[0] = n;
	}
	*out = y;
	return AMP_OK;
}

/* ---- Dropout ----------------------------------------------------------------------------- */

/* Saved mask: (n) bytes, 1 = kept.  dx = g * mask / (1 - p). */
static int dropout_backward(amp_ctx *ctx, amp_node *node)
{
	uint64_t t0 = AMP_TRACING() ? amp_trace_clock() : 0;
	amp_tensor *x = node->in[0];
	const unsigned char *mask = node->saved;
	float scale = node->f[0], p = node->f[1];
	/* memory_optimize kept no mask: the same stream, from the state the forward started at */
	uint64_t rng = (uint64_t)node->i[0];
	int fresh;
	amp_tensor *gx = amp_grad_open(ctx, x, &fresh);
	if (!gx)
		return amp_oom(ctx);
	float gbuf[AMP_BLOCK], dbuf[AMP_BLOCK];
	for (int64_t i0 = 0; i0 < x->numel; i0 += AMP_BLOCK) {
		int64_t n = x->numel - i0 < AMP_BLOCK ? x->numel - i0 : AMP_BLOCK;
		const float *g = amp_block_read(node->out->grad, i0, n, gbuf);
		float *dx = amp_grad_block_dst(gx, fresh, i0, dbuf);
		for (int64_t i = 0; i < n; i++) {
			int keep = mask ? mask[i0 + i] : amp_rng_uniform(&rng) >= p;
			dx[i] = g[i] * (keep ? scale : 0.0f);
		}
		amp_grad_block_end(gx, fresh, i0, n, dx);
	}
	int rc = AMP_OK;
	amp_trace_kernel(ctx, node->op, node->label, node->exec, amp_kernels_vec_engine(),
	                 AMP_PHASE_BACKWARD, t0,
	                 (uint64_t)x->numel,
	                 (uint64_t)x->numel * (2 * amp_dtype_size(node->exec) + 1), x->shape);
	return rc;
}

int amp_dropout(amp_ctx *ctx, const char *label, amp_tensor *x, float p, amp_tensor **out)
{
	amp_op_call call;
	amp_tensor *in[1] = {x};
	int rc = amp_op_begin(ctx, &call, AMP_OP_DROPOUT, label, in, 1);
	if (rc)
		return rc;
	if (!out)
		return amp_fail(ctx, AMP_EINVAL, "Dropout '%s': NULL out", lbl(label));
	if (!(p >= 0.0f && p < 1.0f))
		return amp_fail(ctx, AMP_EINVAL, "Dropout '%s': p = %g is outside [0,1)",
		                lbl(label), (double)p);
	if (!(in[0] = amp_cast_to(ctx, x, call.exec, label)))
		return amp_oom(ctx);
	amp_op_start_timer(&call);
	amp_tensor *y;
	if (!ctx->training || p == 0.0f) {
		/* Identity: an alias, still traced as an op. */
		if (!(y = alias_out(ctx, in[0], in[0]->shape)))
			return amp_oom(ctx);
		if ((rc = amp_op_end(ctx, &call, y, in, 1, passthrough_backward, NULL)))
			return rc;
		*out = y;
		return AMP_OK;
	}
	y = amp_alloc_raw(ctx, call.exec, x->shape, AMP_MEM_ACTIVATIONS); /* written in full */
	if (!y)
		return amp_oom(ctx);
	/* The mask is saved state for the backward (an activation); memory_optimize recomputes
	 * it there from the RNG state it starts at instead. */
	uint64_t rng0 = ctx->rng_state;
	unsigned char *mask = NULL;
	if (ctx->cfg.memory_optimize)
		amp_mem_unopt_only(ctx, AMP_MEM_ACTIVATIONS, (uint64_t)y->numel);
	else if (!(mask = amp_arena_alloc_counted(ctx, (size_t)y->numel, AMP_MEM_ACTIVATIONS)))
		return oom(ctx, AMP_OP_DROPOUT, label);
	/* x: (n) -> y: (n) = x * keep / (1 - p), keep ~ Bernoulli(1 - p).  Multiplying (rather
	 * than writing 0) keeps a NaN in a dropped element visible. */
	float scale = 1.0f / (1.0f - p), xbuf[AMP_BLOCK], ybuf[AMP_BLOCK];
	for (int64_t i0 = 0; i0 < y->numel; i0 += AMP_BLOCK) {
		int64_t n = y->numel - i0 < AMP_BLOCK ? y->numel - i0 : AMP_BLOCK;
		const float *xv = amp_block_read(in[0], i0, n, xbuf);
		float *yb = amp_block_dst(y, i0, ybuf);
		for (int64_t i = 0; i < n; i++) {
			unsigned char keep = amp_rng_uniform(&ctx->rng_state) >= p;
			if (mask)
				mask[i0 + i] = keep;
			yb[i] = xv[i] * (keep ? scale : 0.0f);
		}
		amp_block_write(y, i0, n, yb);
	}
	call.flops = (uint64_t)y->numel * 2;
	call.bytes = (uint64_t)y->numel * (2 * amp_dtype_size(call.exec) + 1);
	amp_node *node;
	if ((rc = amp_op_end(ctx, &call, y, in, 1, dropout_backward, &node)))
		return rc;
	if (node) {
		node->saved = mask;
		node->f[0] = scale;
		node->f[1] = p;
		node->i[0] = (int64_t)rng0;
	}
	*out = y;
	return AMP_OK;
}

/* ---- Concat and Slice ---------------------------------------------------------------------
 * Both see a tensor as (outer, len, inner) around the axis: what moves is runs of len * inner
 * contiguous elements, copied raw in the exec dtype (no conversion, exact in every dtype). */

/* The normalized axis of shape s (negative counts from the end), or -1. */
static int norm_axis(amp_shape s, int axis)
{
	int a = axis < 0 ? axis + s.ndim : axis;
	return a >= 0 && a < s.ndim ? a : -1;
}

static void outer_inner(amp_shape s, int axis, int64_t *outer, int64_t *inner)
{
	*outer = *inner = 1;
	for (int k = 0; k < axis; k++)
		*outer *= s.d[k];
	for (int k = axis + 1; k < s.ndim; k++)
		*inner *= s.d[k];
}

/* Adds into t's gradient (opened as gt, fresh) at [i0, i0+n) the values of src at s0.. (a
 * tensor read block-wise), or zeros when src is NULL (written only when fresh). */
static void grad_run(amp_tensor *gt, int fresh, int64_t i0, int64_t n, const amp_tensor *src,
                     int64_t s0)
{
	float sbuf[AMP_BLOCK], dbuf[AMP_BLOCK];
	if (!src && !fresh)
		return;
	for (int64_t j0 = 0; j0 < n; j0 += AMP_BLOCK) {
		int64_t m = n - j0 < AMP_BLOCK ? n - j0 : AMP_BLOCK;
		float *dx = amp_grad_block_dst(gt, fresh, i0 + j0, dbuf);
		if (src) {
			const float *v = amp_block_read(src, s0 + j0, m, sbuf);
			if (v != dx)
				memcpy(dx, v, (size_t)m * sizeof(float));
		} else {
			memset(dx, 0, (size_t)m * sizeof(float));
		}
		amp_grad_block_end(gt, fresh, i0 + j0, m, dx);
	}
}

typedef struct concat_saved {
	int n, axis;
	amp_tensor **in; /* the n inputs as the op saw them (after casts) */
} concat_saved;

/* dx_k = the slice of g that input k filled. */
static int concat_backward(amp_ctx *ctx, amp_node *node)
{
	uint64_t t0 = AMP_TRACING() ? amp_trace_clock() : 0;
	const concat_saved *sv = node->saved;
	amp_tensor *gy = node->out->grad;
	int64_t outer, inner, total = node->out->shape.d[sv->axis], at = 0;
	outer_inner(node->out->shape, sv->axis, &outer, &inner);
	for (int k = 0; k < sv->n; k++) {
		amp_tensor *x = sv->in[k];
		int64_t len = x->shape.d[sv->axis];
		if (x->requires_grad) {
			int fresh;
			amp_tensor *gx = amp_grad_open(ctx, x, &fresh);
			if (!gx)
				return amp_oom(ctx);
			for (int64_t o = 0; o < outer; o++)
				grad_run(gx, fresh, o * len * inner, len * inner, gy,
				         (o * total + at) * inner);
		}
		at += len;
	}
	amp_trace_kernel(ctx, node->op, node->label, node->exec, AMP_ENGINE_NONE,
	                 AMP_PHASE_BACKWARD, t0, 0,
	                 (uint64_t)gy->numel * 2 * amp_dtype_size(node->exec), gy->shape);
	return AMP_OK;
}

int amp_concat(amp_ctx *ctx, const char *label, amp_tensor *const *x, int n, int axis,
               amp_tensor **out)
{
	amp_op_call call;
	if (!ctx)
		return AMP_EINVAL;
	if (!x || n < 1)
		return amp_fail(ctx, AMP_EINVAL, "Concat '%s': %d inputs, expected at least 1",
		                lbl(label), x ? n : 0);
	int rc = amp_op_begin(ctx, &call, AMP_OP_CONCAT, label, x, n);
	if (rc)
		return rc;
	call.engine = AMP_ENGINE_NONE; /* data movement, no arithmetic */
	if (!out)
		return amp_fail(ctx, AMP_EINVAL, "Concat '%s': NULL out", lbl(label));
	char s0[64], sk[64];
	int a = norm_axis(x[0]->shape, axis);
	if (a < 0)
		return amp_fail(ctx, AMP_EINVAL, "Concat '%s': axis %d out of range for input 0 %s",
		                lbl(label), axis, amp_shape_str(x[0]->shape, s0, sizeof s0));
	amp_shape ys = x[0]->shape;
	for (int k = 1; k < n; k++) {
		int ok = x[k]->shape.ndim == ys.ndim;
		for (int d = 0; ok && d < ys.ndim; d++)
			ok = d == a || x[k]->shape.d[d] == ys.d[d];
		if (!ok)
			return amp_fail(ctx, AMP_ESHAPE,
			                "Concat '%s': input %d %s does not match input 0 %s outside "
			                "axis %d",
			                lbl(label), k, amp_shape_str(x[k]->shape, sk, sizeof sk),
			                amp_shape_str(x[0]->shape, s0, sizeof s0), a);
		ys.d[a] += x[k]->shape.d[a];
	}
	concat_saved *sv = amp_arena_alloc(ctx, sizeof *sv);
	amp_tensor **in = sv ? amp_arena_alloc(ctx, (size_t)n * sizeof *in) : NULL;
	if (!in)
		return oom(ctx, AMP_OP_CONCAT, label);
	for (int k = 0; k < n; k++)
		if (!(in[k] = amp_cast_to(ctx, x[k], call.exec, label)))
			return amp_oom(ctx);
	amp_op_start_timer(&call);
	amp_tensor *y = amp_alloc_raw(ctx, call.exec, ys, AMP_MEM_ACTIVATIONS); /* in full */
	if (!y)
		return amp_oom(ctx);
	/* x_k: (outer, len_k, inner) -> y: (outer, sum len_k, inner) */
	size_t es = amp_dtype_size(call.exec);
	int64_t outer, inner, at = 0;
	outer_inner(ys, a, &outer, &inner);
	for (int k = 0; k < n; k++) {
		size_t run = (size_t)(in[k]->shape.d[a] * inner) * es;
		for (int64_t o = 0; o < outer; o++)
			memcpy((char *)y->data + (size_t)((o * ys.d[a] + at) * inner) * es,
			       (const char *)in[k]->data + (size_t)o * run, run);
		at += in[k]->shape.d[a];
	}
	call.bytes = (uint64_t)y->numel * 2 * es;
	sv->n = n;
	sv->axis = a;
	sv->in = in;
	amp_node *node;
	if ((rc = amp_op_end(ctx, &call, y, in, n, concat_backward, &node)))
		return rc;
	if (node)
		node->saved = sv;
	*out = y;
	return AMP_OK;
}

/* dx: g in the slice [start, start + len) along the axis, 0 elsewhere. */
static int slice_backward(amp_ctx *ctx, amp_node *node)
{
	uint64_t t0 = AMP_TRACING() ? amp_trace_clock() : 0;
	amp_tensor *x = node->in[0], *gy = node->out->grad;
	int axis = (int)node->i[0];
	int64_t start = node->i[1], len = node->i[2], ext = x->shape.d[axis], outer, inner;
	outer_inner(x->shape, axis, &outer, &inner);
	int fresh;
	amp_tensor *gx = amp_grad_open(ctx, x, &fresh);
	if (!gx)
		return amp_oom(ctx);
	for (int64_t o = 0; o < outer; o++) {
		int64_t base = o * ext * inner;
		grad_run(gx, fresh, base, start * inner, NULL, 0);
		grad_run(gx, fresh, base + start * inner, len * inner, gy, o * len * inner);
		grad_run(gx, fresh, base + (start + len) * inner, (ext - start - len) * inner, NULL,
		         0);
	}
	amp_trace_kernel(ctx, node->op, node->label, node->exec, AMP_ENGINE_NONE,
	                 AMP_PHASE_BACKWARD, t0, 0,
	                 (uint64_t)(x->numel + gy->numel) * amp_dtype_size(node->exec), x->shape);
	return AMP_OK;
}

int amp_slice(amp_ctx *ctx, const char *label, amp_tensor *x, int axis, int64_t start,
              int64_t len, amp_tensor **out)
{
	amp_op_call call;
	amp_tensor *in[1] = {x};
	int rc = amp_op_begin(ctx, &call, AMP_OP_SLICE, label, in, 1);
	if (rc)
		return rc;
	call.engine = AMP_ENGINE_NONE; /* data movement, no arithmetic */
	if (!out)
		return amp_fail(ctx, AMP_EINVAL, "Slice '%s': NULL out", lbl(label));
	char sx[64];
	int a = norm_axis(x->shape, axis);
	if (a < 0)
		return amp_fail(ctx, AMP_EINVAL, "Slice '%s': axis %d out of range for x %s",
		                lbl(label), axis, amp_shape_str(x->shape, sx, sizeof sx));
	if (start < 0 || len < 1 || start > x->shape.d[a] - len)
		return amp_fail(ctx, AMP_ESHAPE,
		                "Slice '%s': start %lld, length %lld is outside [0, %lld) on axis %d "
		                "of x %s",
		                lbl(label), (long long)start, (long long)len,
		                (long long)x->shape.d[a], a, amp_shape_str(x->shape, sx, sizeof sx));
	if (!(in[0] = amp_cast_to(ctx, x, call.exec, label)))
		return amp_oom(ctx);
	amp_op_start_timer(&call);
	amp_shape ys = x->shape;
	ys.d[a] = len;
	amp_tensor *y = amp_alloc_raw(ctx, call.exec, ys, AMP_MEM_ACTIVATIONS); /* in full */
	if (!y)
		return amp_oom(ctx);
	/* x: (outer, ext, inner) -> y: (outer, len, inner) */
	size_t es = amp_dtype_size(call.exec);
	int64_t outer, inner;
	outer_inner(x->shape, a, &outer, &inner);
	size_t run = (size_t)(len * inner) * es;
	for (int64_t o = 0; o < outer; o++)
		memcpy((char *)y->data + (size_t)o * run,
		       (const char *)in[0]->data + (size_t)((o * x->shape.d[a] + start) * inner) * es,
		       run);
	call.bytes = (uint64_t)y->numel * 2 * es;
	amp_node *node;
	if ((rc = amp_op_end(ctx, &call, y, in, 1, slice_backward, &node)))
		return rc;
	if (node) {
		node->i[0] = a;
		node->i[1] = start;
		node->i[2] = len;
	}
	*out = y;
	return AMP_OK;
}

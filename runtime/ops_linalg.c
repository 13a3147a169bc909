/* ops_linalg.c — MatMul, BatchMatMul and Linear (fused GEMM + bias), forward and backward.
 *
 * Every product runs in the op's exec dtype on amp_gemm (a half type in and out, FP32
 * accumulation), with no per-op conversion; the op records the engine the GEMM ran on.
 * Backward runs the transposed products in the same dtype; bias gradients are summed in FP32.
 * When the checks want statistics, a half GEMM that writes a whole output or gradient takes
 * them in its epilogue and hands them to the check of its op.
 */
#include "internal.h"
#include "check.h"
#include "kernels/stats.h"

#include <string.h>

/* The statistics of a tensor written by one or more half GEMMs (the batches of a MatMul),
 * taken in their epilogues when the checks want them, and handed to the check of the op;
 * and the engine the GEMMs ran on. */
typedef struct out_stats {
	int on;            /* taking them */
	int64_t got;       /* elements seen so far */
	amp_engine engine; /* of the last GEMM */
	amp_stats s;
} out_stats;

static void out_stats_begin(amp_ctx *ctx, amp_dtype dt, out_stats *o)
{
	o->on = amp_dt(dt)->is_half && AMP_TRACING() && amp_check_wants_stats(ctx);
	o->got = 0;
	o->engine = AMP_ENGINE_NONE;
	if (o->on)
		amp_stats_init(&o->s);
}

/* amp_gemm of an M x N block at C (ldc N) of the tensor, merging its statistics into o. */
static void gemm_part(out_stats *o, amp_dtype dt, int ta, int tb, int64_t M, int64_t N, int64_t K,
                      const void *A, int64_t lda, const void *B, int64_t ldb, float beta, void *C)
{
	if (!o->on) {
		o->engine = amp_gemm(dt, ta, tb, M, N, K, A, lda, B, ldb, beta, C, N, NULL);
		return;
	}
	amp_stats s;
	o->engine = amp_gemm(dt, ta, tb, M, N, K, A, lda, B, ldb, beta, C, N, &s);
	amp_stats_merge(&o->s, &s);
	o->got += M * N;
}

/* Hands o to the check of t when the GEMMs wrote all of t. */
static void out_stats_end(amp_ctx *ctx, const out_stats *o, const amp_tensor *t)
{
	if (o->on && o->got == t->numel)
		amp_check_hint(ctx, t, &o->s);
}

/* amp_gemm into the whole of tensor t (C = t->data, M * N = t->numel, ldc = N), its
 * statistics taken on the way when the checks want them; returns the engine. */
static amp_engine gemm_into(amp_ctx *ctx, const amp_tensor *t, amp_dtype dt, int ta, int tb, int64_t M,
                      int64_t N, int64_t K, const void *A, int64_t lda, const void *B,
                      int64_t ldb, float beta)
{
	out_stats o;
	out_stats_begin(ctx, dt, &o);
	gemm_part(&o, dt, ta, tb, M, N, K, A, lda, B, ldb, beta, t->data);
	out_stats_end(ctx, &o, t);
	return o.engine;
}

static int gemm_aligned(int64_t M, int64_t N, int64_t K)
{
	return M % 8 == 0 && N % 8 == 0 && K % 8 == 0;
}

static int oom(amp_ctx *ctx, amp_op_type op, const char *label)
{
	return amp_fail(ctx, AMP_ENOMEM, "%s '%s': out of memory", amp_op_name(op),
	                label ? label : "-");
}

/* Where a backward GEMM writes an input's gradient: straight into the input's gradient when
 * it is (or will be) in the exec dtype, adding to it (beta 1) or overwriting a new one (beta
 * 0), else into a step-scoped temporary (beta 0) that grad_dst_close() adds in with
 * amp_grad_acc(). */
typedef struct grad_dst {
	amp_tensor *input;
	amp_tensor *tmp; /* NULL when accumulating in place */
	amp_tensor *to;  /* what the GEMM writes: input->grad, or tmp */
	float beta;
} grad_dst;

static int grad_dst_open(amp_ctx *ctx, amp_tensor *input, amp_dtype exec, grad_dst *d)
{
	d->input = input;
	d->tmp = NULL;
	int fresh;
	amp_tensor *g = amp_grad_dst(ctx, input, exec, &fresh);
	if (fresh < 0)
		return amp_oom(ctx);
	if (g) {
		d->to = g;
		d->beta = fresh ? 0.0f : 1.0f;
		return AMP_OK;
	}
	d->tmp = amp_alloc_raw(ctx, exec, input->shape, AMP_MEM_GRADS); /* beta 0: written in full */
	if (!d->tmp)
		return amp_oom(ctx);
	d->to = d->tmp;
	d->beta = 0.0f;
	return AMP_OK;
}

static int grad_dst_close(amp_ctx *ctx, grad_dst *d)
{
	return d->tmp ? amp_grad_acc(ctx, d->input, d->tmp) : AMP_OK;
}

/* ---- MatMul and BatchMatMul --------------------------------------------------------------- */

/* Batch count and GEMM dims of op(a) (M,K) op(b) (K,N) over the last two dimensions. */
typedef struct mm_dims {
	int64_t batch, M, N, K;
	int64_t lda, ldb; /* a's and b's last extents */
} mm_dims;

static mm_dims mm_dims_of(const amp_tensor *a, const amp_tensor *b, int ta, int tb)
{
	int nd = a->shape.ndim;
	int64_t ar = a->shape.d[nd - 2], ac = a->shape.d[nd - 1];
	int64_t br = b->shape.d[nd - 2], bc = b->shape.d[nd - 1];
	mm_dims m = {
	    .batch = a->numel / (ar * ac),
	    .M = ta ? ac : ar,
	    .K = ta ? ar : ac,
	    .N = tb ? br : bc,
	    .lda = ac,
	    .ldb = bc,
	};
	return m;
}

/* MatMul: both 2-D.  BatchMatMul: both 3-D or both 4-D with equal leading (batch) extents. */
static int mm_check(amp_ctx *ctx, amp_op_type op, const char *label, const amp_tensor *a,
                    const amp_tensor *b, int ta, int tb)
{
	char sa[64], sb[64];
	const char *lb = label ? label : "-";
	int nd = a->shape.ndim;
	amp_shape_str(a->shape, sa, sizeof sa);
	amp_shape_str(b->shape, sb, sizeof sb);
	int ok = op == AMP_OP_MATMUL ? nd == 2 && b->shape.ndim == 2
	                             : (nd == 3 || nd == 4) && b->shape.ndim == nd;
	for (int i = 0; ok && i < nd - 2; i++)
		ok = a->shape.d[i] == b->shape.d[i];
	if (!ok)
		return amp_fail(ctx, AMP_ESHAPE, "%s '%s': a %s and b %s: expected %s",
		                amp_op_name(op), lb, sa, sb,
		                op == AMP_OP_MATMUL
		                    ? "two 2-D tensors"
		                    : "two 3-D or two 4-D tensors with equal batch dims");
	int64_t ka = ta ? a->shape.d[nd - 2] : a->shape.d[nd - 1];
	int64_t kb = tb ? b->shape.d[nd - 1] : b->shape.d[nd - 2];
	if (ka != kb)
		return amp_fail(
		    ctx, AMP_ESHAPE,
		    "%s '%s': inner dimensions differ: a %s%s has K=%lld, b %s%s has K=%lld",
		    amp_op_name(op), lb, sa, ta ? " (transposed)" : "", (long long)ka, sb,
		    tb ? " (transposed)" : "", (long long)kb);
	return AMP_OK;
}

/* Gradients of C = op(A) op(B) with G = dC, per batch:
 *   dA = G op(B)^T  (A (M,K))        dA = op(B) G^T  (A stored (K,M))
 *   dB = op(A)^T G  (B (K,N))        dB = G^T op(A)  (B stored (N,K)) */
static int matmul_backward(amp_ctx *ctx, amp_node *node)
{
	uint64_t t0 = AMP_TRACING() ? amp_trace_clock() : 0;
	amp_tensor *a = node->in[0], *b = node->in[1];
	int ta = (int)node->i[0], tb = (int)node->i[1];
	amp_dtype dt = node->exec;
	size_t es = amp_dtype_size(dt);
	mm_dims m = mm_dims_of(a, b, ta, tb);
	const char *g = node->out->grad->data; /* (batch,M,N) in the exec dtype */
	int64_t sa = m.M * m.K, sb = m.K * m.N, sg = m.M * m.N;
	uint64_t flops = 0;
	int rc = AMP_OK;
	grad_dst d;

	out_stats o;
	if (a->requires_grad && !(rc = grad_dst_open(ctx, a, dt, &d))) {
		out_stats_begin(ctx, dt, &o);
		for (int64_t i = 0; i < m.batch; i++) {
			const char *gi = g + (size_t)(i * sg) * es,
			           *bi = (const char *)b->data + (size_t)(i * sb) * es;
			char *dai = (char *)d.to->data + (size_t)(i * sa) * es;
			if (!ta)
				gemm_part(&o, dt, 0, !tb, m.M, m.K, m.N, gi, m.N, bi, m.ldb, d.beta,
				          dai);
			else
				gemm_part(&o, dt, tb, 1, m.K, m.M, m.N, bi, m.ldb, gi, m.N, d.beta,
				          dai);
		}
		out_stats_end(ctx, &o, d.to);
		rc = grad_dst_close(ctx, &d);
		flops += (uint64_t)(2 * m.batch * m.M * m.N * m.K);
	}
	if (rc == AMP_OK && b->requires_grad && !(rc = grad_dst_open(ctx, b, dt, &d))) {
		out_stats_begin(ctx, dt, &o);
		for (int64_t i = 0; i < m.batch; i++) {
			const char *gi = g + (size_t)(i * sg) * es,
			           *ai = (const char *)a->data + (size_t)(i * sa) * es;
			char *dbi = (char *)d.to->data + (size_t)(i * sb) * es;
			if (!tb)
				gemm_part(&o, dt, !ta, 0, m.K, m.N, m.M, ai, m.lda, gi, m.N, d.beta,
				          dbi);
			else
				gemm_part(&o, dt, 1, ta, m.N, m.K, m.M, gi, m.N, ai, m.lda, d.beta,
				          dbi);
		}
		out_stats_end(ctx, &o, d.to);
		rc = grad_dst_close(ctx, &d);
		flops += (uint64_t)(2 * m.batch * m.M * m.N * m.K);
	}
	amp_trace_kernel_gemm(ctx, node->op, node->label, dt, amp_kernels_gemm_engine(dt),
	                      AMP_PHASE_BACKWARD, t0, flops,
	                      (uint64_t)(2 * (a->numel + b->numel) + node->out->numel) * es,
	                      node->out->shape, gemm_aligned(m.M, m.N, m.K));
	return rc;
}

static int matmul_forward(amp_ctx *ctx, amp_op_type op, const char *label, amp_tensor *a,
                          amp_tensor *b, int ta, int tb, amp_tensor **out)
{
	amp_op_call call;
	amp_tensor *in[2] = {a, b};
	int rc = amp_op_begin(ctx, &call, op, label, in, 2);
	if (rc)
		return rc;
	if (!out)
		return amp_fail(ctx, AMP_EINVAL, "%s '%s': NULL out", amp_op_name(op),
		                label ? label : "-");
	ta = ta != 0;
	tb = tb != 0;
	if ((rc = mm_check(ctx, op, label, a, b, ta, tb)))
		return rc;
	if (!(in[0] = amp_cast_to(ctx, a, call.exec, label)) ||
	    !(in[1] = amp_cast_to(ctx, b, call.exec, label)))
		return amp_oom(ctx);
	amp_op_start_timer(&call);
	mm_dims m = mm_dims_of(a, b, ta, tb);
	amp_shape ys = a->shape;
	ys.d[ys.ndim - 2] = m.M;
	ys.d[ys.ndim - 1] = m.N;
	amp_tensor *y = amp_alloc_raw(ctx, call.exec, ys, AMP_MEM_ACTIVATIONS); /* written in full */
	if (!y)
		return oom(ctx, op, label);
	size_t es = amp_dtype_size(call.exec);
	/* a: (batch,M,K) or (batch,K,M), b: (batch,K,N) or (batch,N,K) -> y: (batch,M,N) */
	out_stats o;
	out_stats_begin(ctx, call.exec, &o);
	for (int64_t i = 0; i < m.batch; i++)
		gemm_part(&o, call.exec, ta, tb, m.M, m.N, m.K,
		          (const char *)in[0]->data + (size_t)(i * m.M * m.K) * es, m.lda,
		          (const char *)in[1]->data + (size_t)(i * m.K * m.N) * es, m.ldb, 0.0f,
		          (char *)y->data + (size_t)(i * m.M * m.N) * es);
	out_stats_end(ctx, &o, y);
	call.engine = o.engine;
	call.flops = (uint64_t)(2 * m.batch * m.M * m.N * m.K);
	call.bytes = (uint64_t)(a->numel + b->numel + y->numel) * es;
	call.aligned = gemm_aligned(m.M, m.N, m.K);
	amp_node *node;
	if ((rc = amp_op_end(ctx, &call, y, in, 2, matmul_backward, &node)))
		return rc;
	if (node) {
		node->i[0] = ta;
		node->i[1] = tb;
	}
	*out = y;
	return AMP_OK;
}

int amp_matmul(amp_ctx *ctx, const char *label, amp_tensor *a, amp_tensor *b, int trans_a,
               int trans_b, amp_tensor **out)
{
	return matmul_forward(ctx, AMP_OP_MATMUL, label, a, b, trans_a, trans_b, out);
}

int amp_batch_matmul(amp_ctx *ctx, const char *label, amp_tensor *a, amp_tensor *b, int trans_a,
                     int trans_b, amp_tensor **out)
{
	return matmul_forward(ctx, AMP_OP_BATCH_MATMUL, label, a, b, trans_a, trans_b, out);
}

/* ---- Linear ------------------------------------------------------------------------------- */

/* x (rows,in), w (out,in), bias (out) or absent; g = dy (rows,out) in the exec dtype.
 *   dx = g w (rows,in),  dw = g^T x (out,in),  dbias = sum over rows of g (in FP32). */
static int linear_backward(amp_ctx *ctx, amp_node *node)
{
	uint64_t t0 = AMP_TRACING() ? amp_trace_clock() : 0;
	amp_tensor *x = node->in[0], *w = node->in[1], *bias = node->n_in > 2 ? node->in[2] : NULL;
	amp_dtype dt = node->exec;
	size_t es = amp_dtype_size(dt);
	int64_t nout = w->shape.d[0], nin = w->shape.d[1], rows = x->numel / nin;
	const void *g = node->out->grad->data;
	uint64_t flops = 0;
	int rc = AMP_OK;
	grad_dst d;

	if (x->requires_grad && !(rc = grad_dst_open(ctx, x, dt, &d))) {
		gemm_into(ctx, d.to, dt, 0, 0, rows, nin, nout, g, nout, w->data, nin, d.beta);
		rc = grad_dst_close(ctx, &d);
		flops += (uint64_t)(2 * rows * nin * nout);
	}
	if (rc == AMP_OK && w->requires_grad && !(rc = grad_dst_open(ctx, w, dt, &d))) {
		gemm_into(ctx, d.to, dt, 1, 0, nout, nin, rows, g, nout, x->data, nin, d.beta);
		rc = grad_dst_close(ctx, &d);
		flops += (uint64_t)(2 * rows * nin * nout);
	}
	if (rc == AMP_OK && bias && bias->requires_grad) {
		float *sum = amp_arena_alloc(ctx, (size_t)nout * sizeof(float));
		int half = amp_dt(dt)->is_half;
		float *row = half ? amp_arena_alloc(ctx, (size_t)nout * sizeof(float)) : NULL;
		if (!sum || (half && !row))
			rc = oom(ctx, node->op, node->label);
		for (int64_t r = 0; rc == AMP_OK && r < rows; r++) {
			const float *gr = (const float *)g + r * nout;
			if (half) {
				amp_dt(dt)->to_f32((const uint16_t *)g + r * nout, row, nout);
				gr = row;
			}
			amp_vadd_f32(sum, gr, sum, nout);
		}
		if (rc == AMP_OK)
			rc = amp_grad_acc_f32(ctx, bias, sum);
		flops += (uint64_t)(rows * nout);
	}
	amp_trace_kernel_gemm(ctx, node->op, node->label, dt, amp_kernels_gemm_engine(dt),
	                      AMP_PHASE_BACKWARD, t0, flops,
	                      (uint64_t)(2 * (x->numel + w->numel) + node->out->numel) * es,
	                      node->out->shape, gemm_aligned(rows, nout, nin));
	return rc;
}

static int linear_check(amp_ctx *ctx, const char *label, const amp_tensor *x, const amp_tensor *w,
                        const amp_tensor *bias)
{
	char sx[64], sw[64], sbias[64];
	const char *lb = label ? label : "-";
	amp_shape_str(x->shape, sx, sizeof sx);
	amp_shape_str(w->shape, sw, sizeof sw);
	if (x->shape.ndim < 2 || w->shape.ndim != 2)
		return amp_fail(ctx, AMP_ESHAPE,
		                "Linear '%s': x %s and w %s: expected x (...,in) and w (out,in)",
		                lb, sx, sw);
	if (x->shape.d[x->shape.ndim - 1] != w->shape.d[1])
		return amp_fail(
		    ctx, AMP_ESHAPE,
		    "Linear '%s': inner dimensions differ: x %s has in=%lld, w %s has in=%lld", lb,
		    sx, (long long)x->shape.d[x->shape.ndim - 1], sw, (long long)w->shape.d[1]);
	if (bias && (bias->shape.ndim != 1 || bias->shape.d[0] != w->shape.d[0]))
		return amp_fail(ctx, AMP_ESHAPE,
		                "Linear '%s': bias %s does not match w %s (expected (%lld))", lb,
		                amp_shape_str(bias->shape, sbias, sizeof sbias), sw,
		                (long long)w->shape.d[0]);
	return AMP_OK;
}

/* x (..., in) is taken as (rows, in) with the leading dims flattened; y has x's leading dims. */
int amp_linear(amp_ctx *ctx, const char *label, amp_tensor *x, amp_tensor *w, amp_tensor *bias,
               amp_tensor **out)
{
	amp_op_call call;
	amp_tensor *in[3] = {x, w, bias};
	int n = bias ? 3 : 2;
	int rc = amp_op_begin(ctx, &call, AMP_OP_LINEAR, label, in, n);
	if (rc)
		return rc;
	if (!out)
		return amp_fail(ctx, AMP_EINVAL, "Linear '%s': NULL out", label ? label : "-");
	if ((rc = linear_check(ctx, label, x, w, bias)))
		return rc;
	for (int i = 0; i < n; i++)
		if (!(in[i] = amp_cast_to(ctx, in[i], call.exec, label)))
			return amp_oom(ctx);
	amp_op_start_timer(&call);
	int64_t nout = w->shape.d[0], nin = w->shape.d[1], rows = x->numel / nin;
	amp_shape ys = x->shape;
	ys.d[ys.ndim - 1] = nout;
	amp_tensor *y = amp_alloc_raw(ctx, call.exec, ys, AMP_MEM_ACTIVATIONS); /* written in full */
	if (!y)
		return oom(ctx, AMP_OP_LINEAR, label);
	size_t es = amp_dtype_size(call.exec);
	/* Fused bias: y starts as the bias rows and the GEMM accumulates onto it (beta 1), so an
	 * fp16 result is rounded once, after the bias is added in FP32. */
	float beta = 0.0f;
	if (bias) {
		for (int64_t r = 0; r < rows; r++)
			memcpy((char *)y->data + (size_t)(r * nout) * es, in[2]->data,
			       (size_t)nout * es);
		beta = 1.0f;
	}
	/* x: (rows,in), w: (out,in) -> y: (rows,out) = x w^T [+ bias] */
	call.engine = gemm_into(ctx, y, call.exec, 0, 1, rows, nout, nin, in[0]->data, nin,
	                        in[1]->data, nin, beta);
	call.flops = (uint64_t)(2 * rows * nout * nin);
	call.bytes = (uint64_t)(x->numel + w->numel + (bias ? bias->numel : 0) + y->numel) * es;
	call.aligned = gemm_aligned(rows, nout, nin);
	if ((rc = amp_op_end(ctx, &call, y, in, n, linear_backward, NULL)))
		return rc;
	*out = y;
	return AMP_OK;
}

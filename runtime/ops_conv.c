/* ops_conv.c — Conv2D (im2col + GEMM, fused bias) and MaxPool2D, forward and backward.
 *
 * Conv2D lowers each image to a column matrix in the exec dtype (part of the op, not a copy
 * event) and multiplies it on amp_gemm in that dtype; backward recomputes the columns
 * rather than keeping them, and sums weight, bias and input gradients in FP32.  MaxPool2D
 * saves its argmax indices for backward in node->saved (none without a tape node), or under
 * memory_optimize finds them again in backward from its input, plane by plane.  Layout is
 * NCHW throughout.
 */
#include "internal.h"

#include <math.h>
#include <string.h>

static const char *lbl(const char *label)
{
	return label ? label : "-";
}

/* C (M,N) = op(A) op(B) + beta C in dtype dt; returns the engine that ran it. */
static amp_engine gemm_exec(amp_dtype dt, int ta, int tb, int64_t M, int64_t N, int64_t K,
                            const void *A, int64_t lda, const void *B, int64_t ldb, float beta,
                            void *C, int64_t ldc)
{
	return amp_gemm(dt, ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc, NULL);
}

/* ---- Conv2D ------------------------------------------------------------------------------- */

typedef struct conv_geom {
	int64_t N, C, H, W; /* input */
	int64_t O, KH, KW;  /* filters */
	int64_t OH, OW;     /* output */
	int64_t stride, pad;
	int64_t ckk, ohw; /* GEMM dims: K = C*KH*KW, N = OH*OW */
} conv_geom;

static conv_geom conv_geom_of(const amp_tensor *x, const amp_tensor *w, int64_t stride, int64_t pad)
{
	conv_geom g = {
	    .N = x->shape.d[0],
	    .C = x->shape.d[1],
	    .H = x->shape.d[2],
	    .W = x->shape.d[3],
	    .O = w->shape.d[0],
	    .KH = w->shape.d[2],
	    .KW = w->shape.d[3],
	    .stride = stride,
	    .pad = pad,
	};
	g.OH = (g.H + 2 * pad - g.KH) / stride + 1;
	g.OW = (g.W + 2 * pad - g.KW) / stride + 1;
	g.ckk = g.C * g.KH * g.KW;
	g.ohw = g.OH * g.OW;
	return g;
}

/* A 1x1 filter at stride 1 without padding reads the image itself as its column matrix. */
static int conv_is_pointwise(const conv_geom *g)
{
	return g->KH == 1 && g->KW == 1 && g->stride == 1 && g->pad == 0;
}

/* The kernels' view of one image's convolution. */
static amp_conv_shape conv_shape(const conv_geom *g)
{
	return (amp_conv_shape){.C = g->C, .H = g->H, .W = g->W, .KH = g->KH, .KW = g->KW,
	                        .OH = g->OH, .OW = g->OW, .stride = g->stride, .pad = g->pad};
}

/* Column matrix of image n in the exec dtype: the image itself for a pointwise conv, else
 * written into col. */
static const void *conv_columns(const conv_geom *g, amp_dtype dt, const void *x, int64_t n,
                                void *col)
{
	size_t es = amp_dtype_size(dt);
	const char *xn = (const char *)x + (size_t)(n * g->C * g->H * g->W) * es;
	if (conv_is_pointwise(g))
		return xn;
	amp_conv_shape s = conv_shape(g);
	amp_im2col(&s, es, xn, col);
	return col;
}

/* The sum of v: (n) in 16 running partial sums combined in a fixed order: vectorized, and the
 * same result for the same input on every run (a single running sum would be one serial
 * chain of n dependent adds).  The partial sums are four 4-lane vector variables (partial
 * sum l is lane l % 4 of acc[l / 4]), which the compiler keeps in registers: as an array
 * of 16 they went through memory, a store and a reload per 4 adds (3.5 % of a cnn_fashion
 * run). */
typedef float sum_vec __attribute__((vector_size(16)));

static float sum_f32(const float *v, int64_t n)
{
	sum_vec a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
	int64_t i = 0;
	for (; i + 16 <= n; i += 16) {
		sum_vec x0, x1, x2, x3;
		memcpy(&x0, v + i, sizeof x0);
		memcpy(&x1, v + i + 4, sizeof x1);
		memcpy(&x2, v + i + 8, sizeof x2);
		memcpy(&x3, v + i + 12, sizeof x3);
		a0 += x0, a1 += x1, a2 += x2, a3 += x3;
	}
	float part[16];
	memcpy(part, &a0, sizeof a0);
	memcpy(part + 4, &a1, sizeof a1);
	memcpy(part + 8, &a2, sizeof a2);
	memcpy(part + 12, &a3, sizeof a3);
	for (int l = 0; i < n; i++, l++)
		part[l] += v[i];
	for (int w = 8; w >= 1; w /= 2)
		for (int l = 0; l < w; l++)
			part[l] += part[l + w];
	return part[0];
}

/* Backward, per image n with G_n = dy_n (O, OH*OW) in the exec dtype and col_n its columns:
 *   dw (O, CKK) += G_n col_n^T       dcol (CKK, OH*OW) = w^T G_n -> col2im -> dx_n
 *   dbias (O)   += row sums of G_n
 * The GEMMs run in the exec dtype; the sums over images are kept in FP32. */
static int conv2d_backward(amp_ctx *ctx, amp_node *node)
{
	uint64_t t0 = AMP_TRACING() ? amp_trace_clock() : 0;
	amp_tensor *x = node->in[0], *w = node->in[1], *bias = node->n_in > 2 ? node->in[2] : NULL;
	amp_dtype dt = node->exec;
	size_t es = amp_dtype_size(dt);
	conv_geom g = conv_geom_of(x, w, node->i[0], node->i[1]);
	amp_conv_shape shape = conv_shape(&g);
	const char *gy = node->out->grad->data; /* (N,O,OH,OW) in the exec dtype */
	int need_x = x->requires_grad, need_w = w->requires_grad;
	int need_b = bias && bias->requires_grad;
	int f16 = amp_dt(dt)->is_half; /* a half gradient's bias rows are widened in tmp32 */
	void (*to_f32)(const void *, float *, int64_t) = amp_dt(dt)->to_f32;
	int64_t cols = g.ckk * g.ohw;
	int64_t gn_stride = g.O * g.ohw;

	/* FP32 accumulators (zeroed); the columns in the exec dtype and their gradient in FP32
	 * (amp_gemm_acc32: the GEMMs' sums are kept in FP32, not rounded per image), written in
	 * full before they are read: not zeroed. */
	float *dx = need_x ? amp_arena_alloc(ctx, (size_t)x->numel * sizeof(float)) : NULL;
	/* dw: the first image's GEMM writes it (beta 0), the others add */
	float *dw = need_w ? amp_arena_alloc_raw(ctx, (size_t)w->numel * sizeof(float)) : NULL;
	float *db = need_b ? amp_arena_alloc(ctx, (size_t)g.O * sizeof(float)) : NULL;
	void *col =
	    need_w && !conv_is_pointwise(&g) ? amp_arena_alloc_raw(ctx, (size_t)cols * es) : NULL;
	float *dcol = need_x ? amp_arena_alloc_raw(ctx, (size_t)cols * sizeof(float)) : NULL;
	float *tmp32 = f16 && need_b ? amp_arena_alloc_raw(ctx, (size_t)g.ohw * sizeof(float)) : NULL;
	if ((need_x && !dcol) || (need_w && (!dw || (!col && !conv_is_pointwise(&g)))) ||
	    (need_b && (!db || (f16 && !tmp32))) || (need_x && !dx))
		return amp_fail(ctx, AMP_ENOMEM, "Conv2D '%s': out of memory in backward",
		                lbl(node->label));

	for (int64_t n = 0; n < g.N; n++) {
		const char *gn = gy + (size_t)(n * gn_stride) * es;
		if (need_w) {
			const void *cn = conv_columns(&g, dt, x->data, n, col);
			/* G_n (O,OHW) . col^T (OHW,CKK) -> dw (O,CKK) += in FP32 */
			amp_gemm_acc32(dt, 0, 1, g.O, g.ckk, g.ohw, gn, g.ohw, cn, g.ohw, n ? 1.0f : 0.0f,
			               dw, g.ckk);
		}
		if (need_x) {
			/* w^T (CKK,O) . G_n (O,OHW) -> dcol (CKK,OHW) in FP32 */
			amp_gemm_acc32(dt, 1, 0, g.ckk, g.ohw, g.O, w->data, g.ckk, gn, g.ohw, 0.0f, dcol,
			               g.ohw);
			float *dxn = dx + n * g.C * g.H * g.W;
			if (conv_is_pointwise(&g))
				amp_vadd_f32(dxn, dcol, dxn, cols);
			else
				amp_col2im_add_f32(&shape, dcol, dxn);
		}
		if (need_b) {
			for (int64_t o = 0; o < g.O; o++) {
				const char *go = gn + (size_t)(o * g.ohw) * es;
				const float *v = (const float *)go;
				if (f16) {
					to_f32(go, tmp32, g.ohw);
					v = tmp32;
				}
				db[o] += sum_f32(v, g.ohw);
			}
		}
	}

	int rc = AMP_OK;
	if (need_x)
		rc = amp_grad_acc_f32(ctx, x, dx);
	if (rc == AMP_OK && need_w)
		rc = amp_grad_acc_f32(ctx, w, dw);
	if (rc == AMP_OK && need_b)
		rc = amp_grad_acc_f32(ctx, bias, db);
	uint64_t gemm_flops = (uint64_t)(2 * g.N * g.O * g.ohw * g.ckk);
	amp_trace_kernel_gemm(ctx, node->op, node->label, dt, amp_kernels_gemm_engine(dt),
	                      AMP_PHASE_BACKWARD, t0, gemm_flops * (uint64_t)(need_x + need_w),
	                      (uint64_t)(2 * (x->numel + w->numel) + node->out->numel) * es,
	                      node->out->shape, g.O % 8 == 0 && g.ohw % 8 == 0 && g.ckk % 8 == 0);
	return rc;
}

static int conv2d_check(amp_ctx *ctx, const char *label, const amp_tensor *x, const amp_tensor *w,
                        const amp_tensor *bias, int stride, int pad)
{
	char sx[64], sw[64], sb[64];
	const char *lb = lbl(label);
	amp_shape_str(x->shape, sx, sizeof sx);
	amp_shape_str(w->shape, sw, sizeof sw);
	if (stride < 1 || pad < 0)
		return amp_fail(ctx, AMP_EINVAL,
		                "Conv2D '%s': stride %d, pad %d: expected stride >= 1 and pad >= 0",
		                lb, stride, pad);
	if (x->shape.ndim != 4 || w->shape.ndim != 4)
		return amp_fail(
		    ctx, AMP_ESHAPE,
		    "Conv2D '%s': x %s and w %s: expected x (N,C,H,W) and w (O,C,KH,KW)", lb, sx,
		    sw);
	if (x->shape.d[1] != w->shape.d[1])
		return amp_fail(ctx, AMP_ESHAPE,
		                "Conv2D '%s': channels differ: x %s has C=%lld, w %s has C=%lld",
		                lb, sx, (long long)x->shape.d[1], sw, (long long)w->shape.d[1]);
	if (x->shape.d[2] + 2 * pad < w->shape.d[2] || x->shape.d[3] + 2 * pad < w->shape.d[3])
		return amp_fail(
		    ctx, AMP_ESHAPE,
		    "Conv2D '%s': filter w %s larger than the padded image x %s (pad %d)", lb, sw,
		    sx, pad);
	if (bias && (bias->shape.ndim != 1 || bias->shape.d[0] != w->shape.d[0]))
		return amp_fail(
		    ctx, AMP_ESHAPE, "Conv2D '%s': bias %s does not match w %s (expected (%lld))",
		    lb, amp_shape_str(bias->shape, sb, sizeof sb), sw, (long long)w->shape.d[0]);
	return AMP_OK;
}

int amp_conv2d(amp_ctx *ctx, const char *label, amp_tensor *x, amp_tensor *w, amp_tensor *bias,
               int stride, int pad, amp_tensor **out)
{
	amp_op_call call;
	amp_tensor *in[3] = {x, w, bias};
	int n_in = bias ? 3 : 2;
	int rc = amp_op_begin(ctx, &call, AMP_OP_CONV2D, label, in, n_in);
	if (rc)
		return rc;
	if (!out)
		return amp_fail(ctx, AMP_EINVAL, "Conv2D '%s': NULL out", lbl(label));
	if ((rc = conv2d_check(ctx, label, x, w, bias, stride, pad)))
		return rc;
	for (int i = 0; i < n_in; i++)
		if (!(in[i] = amp_cast_to(ctx, in[i], call.exec, label)))
			return amp_oom(ctx);
	amp_op_start_timer(&call);
	amp_dtype dt = call.exec;
	size_t es = amp_dtype_size(dt);
	conv_geom g = conv_geom_of(x, w, stride, pad);
	/* y: each plane is the bias, then GEMM-accumulated, or GEMM-written (beta 0); col: written
	 * in full by im2col.  Neither is zeroed first. */
	amp_tensor *y = amp_alloc_raw(ctx, dt, amp_shape4(g.N, g.O, g.OH, g.OW), AMP_MEM_ACTIVATIONS);
	void *col = y && !conv_is_pointwise(&g)
	                ? amp_arena_alloc_raw(ctx, (size_t)(g.ckk * g.ohw) * es)
	                : NULL;
	if (!y || (!col && !conv_is_pointwise(&g)))
		return amp_fail(ctx, AMP_ENOMEM, "Conv2D '%s': out of memory", lbl(label));

	for (int64_t n = 0; n < g.N; n++) {
		char *yn = (char *)y->data + (size_t)(n * g.O * g.ohw) * es;
		/* Fused bias: each output plane starts at its bias and the GEMM accumulates onto
		 * it (beta 1), so an fp16 result is rounded once. */
		if (bias) {
			for (int64_t o = 0; o < g.O; o++) {
				char *plane = yn + (size_t)(o * g.ohw) * es;
				if (es == 2) {
					uint16_t b = ((const uint16_t *)in[2]->data)[o];
					for (int64_t i = 0; i < g.ohw; i++)
						((uint16_t *)plane)[i] = b;
				} else {
					float b = ((const float *)in[2]->data)[o];
					for (int64_t i = 0; i < g.ohw; i++)
						((float *)plane)[i] = b;
				}
			}
		}
		const void *cn = conv_columns(&g, dt, in[0]->data, n, col);
		/* w: (O,CKK) . col: (CKK,OHW) -> y_n: (O,OHW) */
		call.engine = gemm_exec(dt, 0, 0, g.O, g.ohw, g.ckk, in[1]->data, g.ckk, cn, g.ohw,
		                        bias ? 1.0f : 0.0f, yn, g.ohw);
	}
	call.flops = (uint64_t)(2 * g.N * g.O * g.ohw * g.ckk);
	call.bytes = (uint64_t)(x->numel + w->numel + (bias ? bias->numel : 0) + y->numel) * es;
	call.aligned = g.O % 8 == 0 && g.ohw % 8 == 0 && g.ckk % 8 == 0;
	amp_node *node;
	if ((rc = amp_op_end(ctx, &call, y, in, n_in, conv2d_backward, &node)))
		return rc;
	if (node) {
		node->i[0] = stride;
		node->i[1] = pad;
	}
	*out = y;
	return AMP_OK;
}

/* ---- MaxPool2D ---------------------------------------------------------------------------- */

/* g = dy (N,C,OH,OW); saved argmax (N,C,OH,OW) int32 offsets within each (H,W) plane, or
 * none (memory_optimize): then each plane's are found again from x by the forward's kernel,
 * the same comparisons in the same order, so the same offsets (node->i: window, stride).
 * dx of each input plane: zero but at the argmax of each window, where the window's output
 * gradient is added; written plane by plane, through an fp32 plane buffer for half
 * gradients or one that is added to.  Windows that do not overlap (stride >= k) give each
 * input at most one window's gradient: a fresh half gradient of the op's dtype is then that
 * gradient's bits scattered (maxpool_scatter_bits), no arithmetic. */

/* A half value v as 0 + v in FP32 rounds it back: itself, but +0 for -0 and a NaN quiet
 * (quiet: the dtype's quiet bit). */
static inline uint16_t maxpool_zero_plus(uint16_t v, uint16_t inf, uint16_t quiet)
{
	if (v == 0x8000u)
		return 0;
	return (uint16_t)(v & 0x7fffu) > inf ? (uint16_t)(v | quiet) : v;
}

/* dx (planes of plane_in halves) = 0 but dx[arg[i]] = g[i] per plane, the windows' arguments
 * distinct within a plane; recomputed (arg NULL) from x as the forward did. */
static void maxpool_scatter_bits(const amp_node *node, const int32_t *arg, int32_t *abuf,
                                 void *mbuf, uint16_t *dx)
{
	const amp_tensor *x = node->in[0], *y = node->out;
	const uint16_t inf = (uint16_t)amp_dt(node->exec)->inf_bits;
	const uint16_t quiet = node->exec == AMP_F16 ? 0x0200u : 0x0040u; /* bf16 */
	int k = (int)node->i[0], stride = (int)node->i[1];
	int64_t W = x->shape.d[3], plane_in = x->shape.d[2] * W;
	int64_t OH = y->shape.d[2], OW = y->shape.d[3], plane_out = OH * OW;
	int64_t planes = x->shape.d[0] * x->shape.d[1];
	const uint16_t *g = y->grad->data;
	memset(dx, 0, (size_t)(planes * plane_in) * sizeof(uint16_t));
	for (int64_t p = 0; p < planes; p++, dx += plane_in, g += plane_out) {
		const int32_t *ap = arg ? arg + p * plane_out : abuf;
		if (!arg)
			amp_maxpool_plane(node->exec, (const uint16_t *)x->data + p * plane_in, W,
			                  k, stride, OH, OW, mbuf, abuf);
		for (int64_t i = 0; i < plane_out; i++)
			dx[ap[i]] = maxpool_zero_plus(g[i], inf, quiet);
	}
}

static int maxpool2d_backward(amp_ctx *ctx, amp_node *node)
{
	uint64_t t0 = AMP_TRACING() ? amp_trace_clock() : 0;
	amp_tensor *x = node->in[0], *y = node->out;
	const int32_t *arg = node->saved;
	int k = (int)node->i[0], stride = (int)node->i[1];
	int64_t H = x->shape.d[2], W = x->shape.d[3], plane_in = H * W;
	int64_t OH = y->shape.d[2], OW = y->shape.d[3], plane_out = OH * OW;
	int64_t planes = x->shape.d[0] * x->shape.d[1];
	size_t es = amp_dtype_size(node->exec);
	int fresh;
	amp_tensor *gx = amp_grad_open(ctx, x, &fresh);
	int direct = gx && fresh && gx->dtype == AMP_F32; /* scatter into the gradient itself */
	int on_bits = gx && fresh && k <= stride && amp_dt(node->exec)->is_half &&
	              gx->dtype == node->exec && y->grad->dtype == node->exec;
	float *pbuf = gx && !direct && !on_bits
	                  ? amp_arena_alloc_raw(ctx, (size_t)plane_in * sizeof(float))
	                  : NULL;
	float *gbuf =
	    gx && !on_bits ? amp_arena_alloc_raw(ctx, (size_t)plane_out * sizeof(float)) : NULL;
	/* recomputed: one plane's argmax, and the maxima the kernel writes beside them */
	int32_t *abuf =
	    gx && !arg ? amp_arena_alloc_raw(ctx, (size_t)plane_out * sizeof(int32_t)) : NULL;
	void *mbuf = abuf ? amp_arena_alloc_raw(ctx, (size_t)plane_out * es) : NULL;
	if (!gx || (!direct && !on_bits && !pbuf) || (!on_bits && !gbuf) || (!arg && !mbuf))
		return amp_fail(ctx, AMP_ENOMEM, "MaxPool2D '%s': out of memory in backward",
		                lbl(node->label));
	if (on_bits)
		maxpool_scatter_bits(node, arg, abuf, mbuf, gx->data);
	const amp_dtype_info *gi = amp_dt(y->grad->dtype);
	for (int64_t p = 0; !on_bits && p < planes; p++) {
		const float *g = gbuf;
		if (y->grad->dtype == AMP_F32)
			g = (const float *)y->grad->data + p * plane_out;
		else
			gi->to_f32((const char *)y->grad->data + (size_t)(p * plane_out) * gi->size, gbuf,
			           plane_out);
		float *d = direct ? (float *)gx->data + p * plane_in : pbuf;
		memset(d, 0, (size_t)plane_in * sizeof(float));
		const int32_t *ap = arg ? arg + p * plane_out : abuf;
		if (!arg)
			amp_maxpool_plane(node->exec,
			                  (const char *)x->data + (size_t)(p * plane_in) * es, W, k,
			                  stride, OH, OW, mbuf, abuf);
		for (int64_t i = 0; i < plane_out; i++)
			d[ap[i]] += g[i];
		for (int64_t j = 0; !direct && j < plane_in; j += AMP_BLOCK)
			amp_grad_block_end(gx, fresh, p * plane_in + j,
			                   plane_in - j < AMP_BLOCK ? plane_in - j : AMP_BLOCK, d + j);
	}
	/* the scatter's engine: none, unless the argmax was recomputed (the forward's kernel) */
	amp_engine engine = on_bits && arg ? AMP_ENGINE_NONE : amp_kernels_vec_engine();
	amp_trace_kernel(ctx, node->op, node->label, node->exec, engine, AMP_PHASE_BACKWARD, t0,
	                 (uint64_t)y->numel * (arg ? 1 : (uint64_t)(k * k)),
	                 (uint64_t)(x->numel + y->numel) * es, y->shape);
	return AMP_OK;
}

int amp_maxpool2d(amp_ctx *ctx, const char *label, amp_tensor *x, int k, int stride,
                  amp_tensor **out)
{
	amp_op_call call;
	amp_tensor *in[1] = {x};
	int rc = amp_op_begin(ctx, &call, AMP_OP_MAXPOOL2D, label, in, 1);
	if (rc)
		return rc;
	const char *lb = lbl(label);
	char sx[64];
	amp_shape_str(x->shape, sx, sizeof sx);
	if (!out)
		return amp_fail(ctx, AMP_EINVAL, "MaxPool2D '%s': NULL out", lb);
	if (k < 1 || stride < 1)
		return amp_fail(ctx, AMP_EINVAL,
		                "MaxPool2D '%s': window %d, stride %d: expected both >= 1", lb, k,
		                stride);
	if (x->shape.ndim != 4 || x->shape.d[2] < k || x->shape.d[3] < k ||
	    x->shape.d[2] * x->shape.d[3] > INT32_MAX)
		return amp_fail(ctx, AMP_ESHAPE,
		                "MaxPool2D '%s': x %s: expected (N,C,H,W) with H, W >= window %d",
		                lb, sx, k);
	if (!(in[0] = amp_cast_to(ctx, x, call.exec, label)))
		return amp_oom(ctx);
	amp_op_start_timer(&call);
	int64_t N = x->shape.d[0], C = x->shape.d[1], H = x->shape.d[2], W = x->shape.d[3];
	int64_t OH = (H - k) / stride + 1, OW = (W - k) / stride + 1;
	/* y and arg are written in full */
	amp_tensor *y = amp_alloc_raw(ctx, call.exec, amp_shape4(N, C, OH, OW), AMP_MEM_ACTIVATIONS);
	if (!y)
		return amp_oom(ctx);
	int64_t plane_out = OH * OW;
	/* The argmax is saved state for the backward (an activation), when there is one (the
	 * tape records a node: amp_op_end); memory_optimize finds it again there from x instead.
	 * Not kept, the forward holds one plane's at a time. */
	int taped = ctx->training && !ctx->in_backward && in[0]->requires_grad;
	int keep = taped && !ctx->cfg.memory_optimize;
	size_t arg_bytes = (size_t)y->numel * sizeof(int32_t);
	int32_t *arg;
	if (keep) {
		arg = amp_arena_alloc_counted(ctx, arg_bytes, AMP_MEM_ACTIVATIONS);
	} else {
		if (taped)
			amp_mem_unopt_only(ctx, AMP_MEM_ACTIVATIONS, arg_bytes);
		arg = amp_arena_alloc_raw(ctx, (size_t)plane_out * sizeof(int32_t));
	}
	if (!arg)
		return keep ? amp_oom(ctx)
		            : amp_fail(ctx, AMP_ENOMEM, "MaxPool2D '%s': out of memory", lb);

	/* x: (N,C,H,W) -> y: (N,C,OH,OW), one (H,W) plane at a time, in the exec dtype. */
	size_t es = amp_dtype_size(call.exec);
	for (int64_t p = 0; p < N * C; p++)
		call.engine = amp_maxpool_plane(
		    call.exec, (const char *)in[0]->data + (size_t)(p * H * W) * es, W, k, stride,
		    OH, OW, (char *)y->data + (size_t)(p * plane_out) * es,
		    keep ? arg + p * plane_out : arg);
	call.flops = (uint64_t)(y->numel * k * k);
	call.bytes = (uint64_t)(x->numel + y->numel) * es;
	amp_node *node;
	if ((rc = amp_op_end(ctx, &call, y, in, 1, maxpool2d_backward, &node)))
		return rc;
	if (node) {
		node->saved = keep ? arg : NULL;
		node->i[0] = k;
		node->i[1] = stride;
	}
	*out = y;
	return AMP_OK;
}

/* ops_softmax.c — row-wise normalisations over the last dimension: Softmax (optionally causal),
 * LogSoftmax, LayerNorm, and CrossEntropy (fused log-softmax + NLL on int32 targets).
 *
 * All of them compute in FP32 with the row maximum subtracted, whatever the exec dtype; only the
 * final store rounds to FP16 (and may overflow there, which is what force_fp16 is for).
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

/* Number of leading entries of row r that take part: all C, or r % T + 1 when causal. */
static int64_t row_len(int64_t r, int64_t c, int causal)
{
	return causal ? r % c + 1 : c;
}

/* ---- Softmax and LogSoftmax -------------------------------------------------------------- */

/* x: (R,C) fp32 -> y: (R,C) fp32.  Excluded (causal) entries get exactly 0, never -Inf. */
static void softmax_forward(const float *x, float *y, int64_t rows, int64_t c, int causal,
                            int log_out)
{
	for (int64_t r = 0; r < rows; r++) {
		const float *xr = x + r * c;
		float *yr = y + r * c;
		int64_t n = row_len(r, c, causal);
		float m = -INFINITY;
		for (int64_t j = 0; j < n; j++)
			m = fmaxf(m, xr[j]);
		float sum = 0.0f;
		if (log_out) {
			for (int64_t j = 0; j < n; j++)
				sum += expf(xr[j] - m);
			/* (x - m) - log(sum), not x - (m + log(sum)): m + log(sum) rounded at the
			 * magnitude of m (1e-3 apart at 1e4) would swamp log-probabilities near 0 */
			float ls = logf(sum);
			for (int64_t j = 0; j < n; j++)
				yr[j] = (xr[j] - m) - ls;
		} else {
			for (int64_t j = 0; j < n; j++) {
				yr[j] = expf(xr[j] - m);
				sum += yr[j];
			}
			float inv = 1.0f / sum;
			for (int64_t j = 0; j < n; j++)
				yr[j] *= inv;
		}
		for (int64_t j = n; j < c; j++)
			yr[j] = 0.0f;
	}
}

/* Softmax: dx = y * (g - sum(g * y)).  LogSoftmax: dx = g - exp(y) * sum(g).
 * g, y: (R,C) fp32 -> dx: (R,C) fp32. */
static void softmax_backward_kernel(const float *g, const float *y, float *dx, int64_t rows,
                                    int64_t c, int causal, int log_out)
{
	for (int64_t r = 0; r < rows; r++) {
		const float *gr = g + r * c, *yr = y + r * c;
		float *dr = dx + r * c;
		int64_t n = row_len(r, c, causal);
		float dot = 0.0f;
		if (log_out) {
			for (int64_t j = 0; j < n; j++)
				dot += gr[j];
			for (int64_t j = 0; j < n; j++)
				dr[j] = gr[j] - expf(yr[j]) * dot;
		} else {
			for (int64_t j = 0; j < n; j++)
				dot += gr[j] * yr[j];
			for (int64_t j = 0; j < n; j++)
				dr[j] = yr[j] * (gr[j] - dot);
		}
		for (int64_t j = n; j < c; j++)
			dr[j] = 0.0f;
	}
}

static int softmax_backward(amp_ctx *ctx, amp_node *node)
{
	uint64_t t0 = AMP_TRACING() ? amp_trace_clock() : 0;
	amp_tensor *x = node->in[0];
	int causal = (int)node->i[0], log_out = node->op == AMP_OP_LOG_SOFTMAX;
	int64_t c = x->shape.d[x->shape.ndim - 1], rows = x->numel / c;
	const float *g = amp_grad_out_f32(ctx, node);
	const float *y = amp_f32_view(ctx, node->out);
	float *dx = amp_arena_alloc(ctx, (size_t)x->numel * sizeof(float));
	if (!g || !y || !dx)
		return oom(ctx, node->op, node->label);
	softmax_backward_kernel(g, y, dx, rows, c, causal, log_out);
	int rc = amp_grad_acc_f32(ctx, x, dx);
	amp_trace_kernel(ctx, node->op, node->label, node->exec, amp_kernels_vec_engine(), AMP_PHASE_BACKWARD, t0,
	                 (uint64_t)x->numel * 4,
	                 (uint64_t)x->numel * 3 * amp_dtype_size(node->exec), x->shape);
	return rc;
}

static int softmax_common(amp_ctx *ctx, amp_op_type op, const char *label, amp_tensor *x,
                          int causal, amp_tensor **out)
{
	amp_op_call call;
	amp_tensor *in[1] = {x};
	int rc = amp_op_begin(ctx, &call, op, label, in, 1);
	if (rc)
		return rc;
	if (!out)
		return amp_fail(ctx, AMP_EINVAL, "%s '%s': NULL out", amp_op_name(op), lbl(label));
	int nd = x->shape.ndim;
	if (nd < 1 || (causal && (nd < 2 || x->shape.d[nd - 2] != x->shape.d[nd - 1]))) {
		char sx[64];
		return amp_fail(ctx, AMP_ESHAPE, "%s '%s': x %s must be %s", amp_op_name(op),
		                lbl(label), amp_shape_str(x->shape, sx, sizeof sx),
		                causal ? "(...,T,T) for a causal softmax" : "at least 1-D");
	}
	amp_tensor *y;
	const float *xv;
	float *y32;
	if ((rc = amp_op_setup_f32(ctx, &call, in, 1, &xv, &y, &y32)))
		return rc;
	int64_t c = x->shape.d[nd - 1], rows = x->numel / c;
	softmax_forward(xv, y32, rows, c, causal, op == AMP_OP_LOG_SOFTMAX);
	amp_store_f32(y, y32);
	call.flops = (uint64_t)y->numel * 5;
	call.bytes = (uint64_t)y->numel * 2 * amp_dtype_size(call.exec);
	amp_node *node;
	if ((rc = amp_op_end(ctx, &call, y, in, 1, softmax_backward, &node)))
		return rc;
	if (node)
		node->i[0] = causal != 0;
	*out = y;
	return AMP_OK;
}

int amp_softmax(amp_ctx *ctx, const char *label, amp_tensor *x, int causal, amp_tensor **out)
{
	return softmax_common(ctx, AMP_OP_SOFTMAX, label, x, causal != 0, out);
}

int amp_log_softmax(amp_ctx *ctx, const char *label, amp_tensor *x, amp_tensor **out)
{
	return softmax_common(ctx, AMP_OP_LOG_SOFTMAX, label, x, 0, out);
}

/* ---- LayerNorm --------------------------------------------------------------------------- */

/* x: (R,C) fp32, gamma, beta: (C) fp32 -> y: (R,C) fp32, stats: (R,2) fp32 (mean, rstd).
 * Two-pass moments accumulated in double: no cancellation when |mean| >> std. */
static void layer_norm_forward(const float *x, const float *gamma, const float *beta, float *y,
                               float *stats, int64_t rows, int64_t c, float eps)
{
	for (int64_t r = 0; r < rows; r++) {
		const float *xr = x + r * c;
		float *yr = y + r * c;
		double s = 0;
		for (int64_t j = 0; j < c; j++)
			s += (double)xr[j];
		double mean = s / (double)c, v = 0;
		for (int64_t j = 0; j < c; j++) {
			double d = (double)xr[j] - mean;
			v += d * d;
		}
		float m = (float)mean;
		float rstd = (float)(1.0 / sqrt(v / (double)c + (double)eps));
		for (int64_t j = 0; j < c; j++)
			yr[j] = (xr[j] - m) * rstd * gamma[j] + beta[j];
		stats[2 * r] = m;
		stats[2 * r + 1] = rstd;
	}
}

/* dxhat = g * gamma;  dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat));
 * dgamma = sum_rows(g * xhat);  dbeta = sum_rows(g).  Row sums in double. */
static int layer_norm_backward(amp_ctx *ctx, amp_node *node)
{
	uint64_t t0 = AMP_TRACING() ? amp_trace_clock() : 0;
	amp_tensor *x = node->in[0], *gamma = node->in[1], *beta = node->in[2];
	int64_t c = gamma->numel, rows = x->numel / c;
	const float *stats = node->saved;
	const float *g = amp_grad_out_f32(ctx, node);
	const float *xv = amp_f32_view(ctx, x), *gv = amp_f32_view(ctx, gamma);
	float *dx = amp_arena_alloc(ctx, (size_t)x->numel * sizeof(float));
	double *dgam = amp_arena_alloc(ctx, (size_t)c * 2 * sizeof(double));
	float *dpar = amp_arena_alloc(ctx, (size_t)c * 2 * sizeof(float));
	if (!g || !xv || !gv || !dx || !dgam || !dpar)
		return oom(ctx, node->op, node->label);
	double *dbet = dgam + c;
	for (int64_t r = 0; r < rows; r++) {
		const float *xr = xv + r * c, *gr = g + r * c;
		float *dr = dx + r * c;
		float m = stats[2 * r], rstd = stats[2 * r + 1];
		double s1 = 0, s2 = 0;
		for (int64_t j = 0; j < c; j++) {
			float xhat = (xr[j] - m) * rstd;
			float dxhat = gr[j] * gv[j];
			s1 += (double)dxhat;
			s2 += (double)dxhat * (double)xhat;
			dgam[j] += (double)gr[j] * (double)xhat;
			dbet[j] += (double)gr[j];
		}
		float mean1 = (float)(s1 / (double)c), mean2 = (float)(s2 / (double)c);
		for (int64_t j = 0; j < c; j++) {
			float xhat = (xr[j] - m) * rstd;
			dr[j] = rstd * (gr[j] * gv[j] - mean1 - xhat * mean2);
		}
	}
	for (int64_t j = 0; j < 2 * c; j++)
		dpar[j] = (float)dgam[j];
	int rc = AMP_OK;
	if (x->requires_grad)
		rc = amp_grad_acc_f32(ctx, x, dx);
	if (rc == AMP_OK && gamma->requires_grad)
		rc = amp_grad_acc_f32(ctx, gamma, dpar);
	if (rc == AMP_OK && beta->requires_grad)
		rc = amp_grad_acc_f32(ctx, beta, dpar + c);
	amp_trace_kernel(ctx, node->op, node->label, node->exec, amp_kernels_vec_engine(), AMP_PHASE_BACKWARD, t0,
	                 (uint64_t)x->numel * 12,
	                 (uint64_t)(x->numel * 3 + c * 4) * amp_dtype_size(node->exec), x->shape);
	return rc;
}

int amp_layer_norm(amp_ctx *ctx, const char *label, amp_tensor *x, amp_tensor *gamma,
                   amp_tensor *beta, float eps, amp_tensor **out)
{
	amp_op_call call;
	amp_tensor *in[3] = {x, gamma, beta};
	int rc = amp_op_begin(ctx, &call, AMP_OP_LAYER_NORM, label, in, 3);
	if (rc)
		return rc;
	if (!out)
		return amp_fail(ctx, AMP_EINVAL, "LayerNorm '%s': NULL out", lbl(label));
	int nd = x->shape.ndim;
	int64_t c = nd > 0 ? x->shape.d[nd - 1] : 0;
	if (nd < 1 || gamma->shape.ndim != 1 || gamma->shape.d[0] != c || beta->shape.ndim != 1 ||
	    beta->shape.d[0] != c) {
		char sx[64], sg[64], sb[64];
		return amp_fail(ctx, AMP_ESHAPE,
		                "LayerNorm '%s': gamma %s and beta %s must be (C) for x %s (...,C)",
		                lbl(label), amp_shape_str(gamma->shape, sg, sizeof sg),
		                amp_shape_str(beta->shape, sb, sizeof sb),
		                amp_shape_str(x->shape, sx, sizeof sx));
	}
	if (!(eps >= 0.0f) || !isfinite(eps))
		return amp_fail(ctx, AMP_EINVAL, "LayerNorm '%s': eps %g must be finite and >= 0",
		                lbl(label), (double)eps);
	amp_tensor *y;
	const float *v[3];
	float *y32;
	if ((rc = amp_op_setup_f32(ctx, &call, in, 3, v, &y, &y32)))
		return rc;
	int64_t rows = x->numel / c;
	float *stats = amp_arena_alloc(ctx, (size_t)rows * 2 * sizeof(float));
	if (!stats)
		return oom(ctx, AMP_OP_LAYER_NORM, label);
	layer_norm_forward(v[0], v[1], v[2], y32, stats, rows, c, eps);
	amp_store_f32(y, y32);
	call.flops = (uint64_t)y->numel * 8;
	call.bytes = (uint64_t)(y->numel * 2 + c * 2) * amp_dtype_size(call.exec);
	amp_node *node;
	if ((rc = amp_op_end(ctx, &call, y, in, 3, layer_norm_backward, &node)))
		return rc;
	if (node) {
		node->saved = stats;
		node->f[0] = eps;
	}
	*out = y;
	return AMP_OK;
}

/* ---- CrossEntropy ------------------------------------------------------------------------ */

/* Saved between forward and backward. */
typedef struct ce_saved {
	const int32_t *targets; /* (N), copied into the step arena */
	float *probs;           /* (N,C) fp32 softmax of the logits */
} ce_saved;

/* dlogits = g * (softmax - onehot) / N, g the scalar gradient of the mean loss. */
static int cross_entropy_backward(amp_ctx *ctx, amp_node *node)
{
	uint64_t t0 = AMP_TRACING() ? amp_trace_clock() : 0;
	amp_tensor *logits = node->in[0];
	const ce_saved *sv = node->saved;
	int64_t n = logits->shape.d[0], c = logits->shape.d[1];
	const float *g = amp_grad_out_f32(ctx, node);
	float *dx = amp_arena_alloc(ctx, (size_t)logits->numel * sizeof(float));
	if (!g || !dx)
		return oom(ctx, node->op, node->label);
	float s = g[0] / (float)n;
	for (int64_t r = 0; r < n; r++) {
		const float *pr = sv->probs + r * c;
		float *dr = dx + r * c;
		for (int64_t j = 0; j < c; j++)
			dr[j] = s * pr[j];
		dr[sv->targets[r]] -= s;
	}
	int rc = amp_grad_acc_f32(ctx, logits, dx);
	amp_trace_kernel(ctx, node->op, node->label, node->exec, amp_kernels_vec_engine(), AMP_PHASE_BACKWARD, t0,
	                 (uint64_t)logits->numel * 2,
	                 (uint64_t)logits->numel * (4 + amp_dtype_size(node->exec)) +
	                     (uint64_t)n * 4,
	                 logits->shape);
	return rc;
}

/* targets must be int32 (N) with values in [0, C). */
static int check_targets(amp_ctx *ctx, const char *label, const amp_tensor *logits,
                         const amp_tensor *targets)
{
	char sl[64], st[64];
	if (logits->shape.ndim != 2)
		return amp_fail(ctx, AMP_ESHAPE, "CrossEntropy '%s': logits %s must be (N,C)",
		                lbl(label), amp_shape_str(logits->shape, sl, sizeof sl));
	if (!targets)
		return amp_fail(ctx, AMP_EINVAL, "CrossEntropy '%s': targets is NULL", lbl(label));
	if (targets->owner != ctx)
		return amp_fail(ctx, AMP_EINVAL, "CrossEntropy '%s': targets: %s", lbl(label),
		                amp_foreign_why);
	if (targets->dtype != AMP_I32)
		return amp_fail(ctx, AMP_EDTYPE,
		                "CrossEntropy '%s': targets are %s, expected int32", lbl(label),
		                amp_dtype_name(targets->dtype));
	int64_t n = logits->shape.d[0], c = logits->shape.d[1];
	if (targets->shape.ndim != 1 || targets->shape.d[0] != n)
		return amp_fail(ctx, AMP_ESHAPE,
		                "CrossEntropy '%s': targets %s must be (N) for logits %s",
		                lbl(label), amp_shape_str(targets->shape, st, sizeof st),
		                amp_shape_str(logits->shape, sl, sizeof sl));
	const int32_t *t = targets->data;
	for (int64_t r = 0; r < n; r++)
		if (t[r] < 0 || t[r] >= c)
			return amp_fail(
			    ctx, AMP_EINVAL,
			    "CrossEntropy '%s': target %d at row %lld is out of range [0,%lld) "
			    "for logits %s",
			    lbl(label), (int)t[r], (long long)r, (long long)c,
			    amp_shape_str(logits->shape, sl, sizeof sl));
	return AMP_OK;
}

int amp_cross_entropy(amp_ctx *ctx, const char *label, amp_tensor *logits, amp_tensor *targets,
                      amp_tensor **out)
{
	amp_op_call call;
	amp_tensor *in[1] = {logits};
	/* Only the logits go through amp_op_begin: it rejects int32, and targets carry no grad. */
	int rc = amp_op_begin(ctx, &call, AMP_OP_CROSS_ENTROPY, label, in, 1);
	if (rc)
		return rc;
	if (!out)
		return amp_fail(ctx, AMP_EINVAL, "CrossEntropy '%s': NULL out", lbl(label));
	if ((rc = check_targets(ctx, label, logits, targets)))
		return rc;
	if (!(in[0] = amp_cast_to(ctx, logits, call.exec, label)))
		return amp_oom(ctx);
	amp_op_start_timer(&call);
	int64_t n = logits->shape.d[0], c = logits->shape.d[1];
	amp_shape scalar = {0, {0, 0, 0, 0}};
	amp_tensor *y = amp_alloc(ctx, call.exec, scalar, AMP_MEM_ACTIVATIONS);
	if (!y)
		return amp_oom(ctx);
	const float *xv = amp_f32_view(ctx, in[0]);
	ce_saved *sv = amp_arena_alloc(ctx, sizeof *sv);
	float *probs = amp_arena_alloc(ctx, (size_t)logits->numel * sizeof(float));
	int32_t *tcopy = amp_arena_alloc(ctx, (size_t)n * sizeof(int32_t));
	if (!xv || !sv || !probs || !tcopy)
		return oom(ctx, AMP_OP_CROSS_ENTROPY, label);
	memcpy(tcopy, targets->data, (size_t)n * sizeof(int32_t));
	/* logits: (N,C), targets: (N) -> loss: () = mean_r(logsumexp(x_r) - x_r[t_r]) */
	double nll = 0;
	for (int64_t r = 0; r < n; r++) {
		const float *xr = xv + r * c;
		float *pr = probs + r * c;
		float m = -INFINITY, sum = 0.0f;
		for (int64_t j = 0; j < c; j++)
			m = fmaxf(m, xr[j]);
		for (int64_t j = 0; j < c; j++) {
			pr[j] = expf(xr[j] - m);
			sum += pr[j];
		}
		/* as LogSoftmax: the target's logit against the max first (exact in double) */
		nll += (double)logf(sum) - ((double)xr[tcopy[r]] - (double)m);
		float inv = 1.0f / sum;
		for (int64_t j = 0; j < c; j++)
			pr[j] *= inv;
	}
	float loss = (float)(nll / (double)n);
	amp_store_f32(y, &loss);
	call.flops = (uint64_t)logits->numel * 5;
	call.bytes = (uint64_t)logits->numel * amp_dtype_size(call.exec) + (uint64_t)n * 4 +
	             amp_dtype_size(call.exec);
	sv->targets = tcopy;
	sv->probs = probs;
	amp_node *node;
	if ((rc = amp_op_end(ctx, &call, y, in, 1, cross_entropy_backward, &node)))
		return rc;
	if (node)
		node->saved = sv;
	*out = y;
	return AMP_OK;
}

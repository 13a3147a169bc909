/* ops_batchnorm.c — BatchNorm2D: per-channel normalisation of (N,C,H,W) over (N,H,W), with
 * batch statistics in training and running statistics in inference.
 *
 * The statistics are summed in double, two passes (no cancellation when |mean| >> std), and the
 * running mean and variance are FP32 parameters updated in place, whatever the exec dtype: the
 * op is on the black list, but under force_fp16 / force_bf16 it reads and writes half tensors
 * plane block by plane block, computing in FP32.  Backward reads the input and recomputes
 * the normalised values from it and the saved per-channel mean and 1/std; it never reads the
 * output, which memory_optimize therefore drops and recomputes for the consumers that read it.
 */
#include "internal.h"

#include <math.h>
#include <string.h>

static const char *lbl(const char *label)
{
	return label ? label : "-";
}

static int oom(amp_ctx *ctx, const char *label)
{
	return amp_fail(ctx, AMP_ENOMEM, "BatchNorm2D '%s': out of memory", lbl(label));
}

/* Saved for backward: per channel mean and 1/sqrt(var + eps) of the batch. */
typedef struct bn_saved {
	float *mean, *rstd; /* (C) each */
} bn_saved;

typedef struct bn_geom {
	int64_t N, C, HW;
} bn_geom;

/* Runs BODY for each block of channel c of an (N,C,HW) tensor: n elements from element i0. */
#define BN_CHANNEL_BLOCKS(gm, c, i0, n, BODY)                                                      \
	for (int64_t bn_n = 0; bn_n < (gm).N; bn_n++)                                              \
		for (int64_t bn_j = 0; bn_j < (gm).HW; bn_j += AMP_BLOCK) {                        \
			int64_t n = (gm).HW - bn_j < AMP_BLOCK ? (gm).HW - bn_j : AMP_BLOCK;       \
			int64_t i0 = (bn_n * (gm).C + (c)) * (gm).HW + bn_j;                       \
			BODY                                                                       \
		}

/* Batch mean and biased variance of channel c of x, in double. */
static void bn_moments(const amp_tensor *x, bn_geom g, int64_t c, double *mean, double *var)
{
	float buf[AMP_BLOCK];
	double s = 0, v = 0, cnt = (double)(g.N * g.HW);
	BN_CHANNEL_BLOCKS(g, c, i0, n, {
		const float *xv = amp_block_read(x, i0, n, buf);
		for (int64_t i = 0; i < n; i++)
			s += (double)xv[i];
	})
	double m = s / cnt;
	BN_CHANNEL_BLOCKS(g, c, i0, n, {
		const float *xv = amp_block_read(x, i0, n, buf);
		for (int64_t i = 0; i < n; i++) {
			double d = (double)xv[i] - m;
			v += d * d;
		}
	})
	*mean = m;
	*var = v / cnt;
}

/* y = (x - m) scale + shift over channel c: the one formula of the forward and of the
 * recompute, so both write the same bits. */
static void bn_write_channel(const amp_tensor *x, amp_tensor *y, bn_geom g, int64_t c, float m,
                             float scale, float shift)
{
	float xbuf[AMP_BLOCK], ybuf[AMP_BLOCK];
	BN_CHANNEL_BLOCKS(g, c, i0, n, {
		const float *xv = amp_block_read(x, i0, n, xbuf);
		float *yb = amp_block_dst(y, i0, ybuf);
		for (int64_t i = 0; i < n; i++)
			yb[i] = (xv[i] - m) * scale + shift;
		amp_block_write(y, i0, n, yb);
	})
}

/* memory_optimize: the output again, from the input the backward keeps, the saved mean and
 * 1/std and gamma and beta (unchanged until the optimizer runs); traced as a backward op. */
static int batch_norm2d_recompute(amp_ctx *ctx, amp_node *node)
{
	uint64_t t0 = AMP_TRACING() ? amp_trace_clock() : 0;
	amp_tensor *x = node->in[0], *y = node->out;
	const bn_saved *sv = node->saved;
	bn_geom g = {x->shape.d[0], x->shape.d[1], x->shape.d[2] * x->shape.d[3]};
	const float *gv = amp_f32_view(ctx, node->in[1]);
	const float *bv = gv ? amp_f32_view(ctx, node->in[2]) : NULL;
	if (!bv)
		return oom(ctx, node->label);
	for (int64_t c = 0; c < g.C; c++)
		bn_write_channel(x, y, g, c, sv->mean[c], sv->rstd[c] * gv[c], bv[c]);
	amp_trace_kernel(ctx, node->op, node->label, node->exec, amp_kernels_vec_engine(),
	                 AMP_PHASE_BACKWARD, t0, (uint64_t)y->numel * 3,
	                 (uint64_t)(y->numel * 2 + g.C * 4) * amp_dtype_size(node->exec), y->shape);
	return AMP_OK;
}

/* dxhat = g gamma;  dx = rstd (dxhat - mean(dxhat) - xhat mean(dxhat xhat)), the means over
 * the channel's N*H*W elements;  dgamma = sum(g xhat), dbeta = sum(g).  Sums in double. */
static int batch_norm2d_backward(amp_ctx *ctx, amp_node *node)
{
	uint64_t t0 = AMP_TRACING() ? amp_trace_clock() : 0;
	amp_tensor *x = node->in[0], *gamma = node->in[1], *beta = node->in[2];
	amp_tensor *gy = node->out->grad;
	const bn_saved *sv = node->saved;
	bn_geom g = {x->shape.d[0], x->shape.d[1], x->shape.d[2] * x->shape.d[3]};
	const float *gv = amp_f32_view(ctx, gamma);
	float *dpar = amp_arena_alloc(ctx, (size_t)g.C * 2 * sizeof(float));
	if (!gv || !dpar)
		return oom(ctx, node->label);
	int fresh = 0;
	amp_tensor *gx = NULL;
	if (x->requires_grad && !(gx = amp_grad_open(ctx, x, &fresh)))
		return amp_oom(ctx);
	double cnt = (double)(g.N * g.HW);
	float gbuf[AMP_BLOCK], xbuf[AMP_BLOCK], dbuf[AMP_BLOCK];
	for (int64_t c = 0; c < g.C; c++) {
		float m = sv->mean[c], rstd = sv->rstd[c];
		double sg = 0, sgx = 0;
		BN_CHANNEL_BLOCKS(g, c, i0, n, {
			const float *gr = amp_block_read(gy, i0, n, gbuf);
			const float *xr = amp_block_read(x, i0, n, xbuf);
			for (int64_t i = 0; i < n; i++) {
				sg += (double)gr[i];
				sgx += (double)gr[i] * (double)((xr[i] - m) * rstd);
			}
		})
		dpar[c] = (float)sgx;
		dpar[g.C + c] = (float)sg;
		if (!gx)
			continue;
		float gam = gv[c], mean1 = (float)(sg / cnt), mean2 = (float)(sgx / cnt);
		BN_CHANNEL_BLOCKS(g, c, i0, n, {
			const float *gr = amp_block_read(gy, i0, n, gbuf);
			const float *xr = amp_block_read(x, i0, n, xbuf);
			float *dx = amp_grad_block_dst(gx, fresh, i0, dbuf);
			for (int64_t i = 0; i < n; i++) {
				float xhat = (xr[i] - m) * rstd;
				dx[i] = rstd * gam * (gr[i] - mean1 - xhat * mean2);
			}
			amp_grad_block_end(gx, fresh, i0, n, dx);
		})
	}
	int rc = AMP_OK;
	if (gamma->requires_grad)
		rc = amp_grad_acc_f32(ctx, gamma, dpar);
	if (rc == AMP_OK && beta->requires_grad)
		rc = amp_grad_acc_f32(ctx, beta, dpar + g.C);
	amp_trace_kernel(ctx, node->op, node->label, node->exec, amp_kernels_vec_engine(),
	                 AMP_PHASE_BACKWARD, t0, (uint64_t)x->numel * 10,
	                 (uint64_t)(x->numel * 5 + g.C * 4) * amp_dtype_size(node->exec), x->shape);
	return rc;
}

/* A running statistic: NULL, or an FP32 (C) parameter. */
static int running_ok(const amp_tensor *t, int64_t c)
{
	return !t || (t->dtype == AMP_F32 && t->param && t->shape.ndim == 1 && t->shape.d[0] == c);
}

static int bn_check(amp_ctx *ctx, const char *label, const amp_tensor *x, const amp_tensor *gamma,
                    const amp_tensor *beta, const amp_tensor *rm, const amp_tensor *rv,
                    float momentum, float eps)
{
	char sx[64], sg[64], sb[64];
	const char *lb = lbl(label);
	amp_shape_str(x->shape, sx, sizeof sx);
	if (x->shape.ndim != 4)
		return amp_fail(ctx, AMP_ESHAPE, "BatchNorm2D '%s': x %s must be (N,C,H,W)", lb,
		                sx);
	int64_t c = x->shape.d[1];
	if (gamma->shape.ndim != 1 || gamma->shape.d[0] != c || beta->shape.ndim != 1 ||
	    beta->shape.d[0] != c)
		return amp_fail(
		    ctx, AMP_ESHAPE,
		    "BatchNorm2D '%s': gamma %s and beta %s must be (C) for x %s (N,C,H,W)", lb,
		    amp_shape_str(gamma->shape, sg, sizeof sg),
		    amp_shape_str(beta->shape, sb, sizeof sb), sx);
	if (!running_ok(rm, c) || !running_ok(rv, c) || (!rm) != (!rv))
		return amp_fail(
		    ctx, AMP_EINVAL,
		    "BatchNorm2D '%s': running_mean and running_var must both be NULL or "
		    "both fp32 (%lld) parameters (amp_param_new) for x %s",
		    lb, (long long)c, sx);
	if ((rm && rm->owner != ctx) || (rv && rv->owner != ctx))
		return amp_fail(ctx, AMP_EINVAL, "BatchNorm2D '%s': running statistics: %s", lb,
		                amp_foreign_why);
	if (!ctx->training && !rm)
		return amp_fail(ctx, AMP_EINVAL,
		                "BatchNorm2D '%s': inference needs running_mean and running_var",
		                lb);
	if (ctx->training && x->shape.d[0] * x->shape.d[2] * x->shape.d[3] < 2)
		return amp_fail(ctx, AMP_ESHAPE,
		                "BatchNorm2D '%s': x %s has one value per channel; training needs "
		                "more than one",
		                lb, sx);
	if (!(momentum >= 0.0f && momentum <= 1.0f))
		return amp_fail(ctx, AMP_EINVAL, "BatchNorm2D '%s': momentum %g must be in [0,1]",
		                lb, (double)momentum);
	if (!(eps >= 0.0f) || !isfinite(eps))
		return amp_fail(ctx, AMP_EINVAL, "BatchNorm2D '%s': eps %g must be finite and >= 0",
		                lb, (double)eps);
	return AMP_OK;
}

int amp_batch_norm2d(amp_ctx *ctx, const char *label, amp_tensor *x, amp_tensor *gamma,
                     amp_tensor *beta, amp_tensor *running_mean, amp_tensor *running_var,
                     float momentum, float eps, amp_tensor **out)
{
	amp_op_call call;
	amp_tensor *in[3] = {x, gamma, beta};
	int rc = amp_op_begin(ctx, &call, AMP_OP_BATCH_NORM2D, label, in, 3);
	if (rc)
		return rc;
	if (!out)
		return amp_fail(ctx, AMP_EINVAL, "BatchNorm2D '%s': NULL out", lbl(label));
	if ((rc = bn_check(ctx, label, x, gamma, beta, running_mean, running_var, momentum, eps)))
		return rc;
	for (int i = 0; i < 3; i++)
		if (!(in[i] = amp_cast_to(ctx, in[i], call.exec, label)))
			return amp_oom(ctx);
	amp_op_start_timer(&call);
	bn_geom g = {x->shape.d[0], x->shape.d[1], x->shape.d[2] * x->shape.d[3]};
	amp_tensor *y = amp_alloc_raw(ctx, call.exec, x->shape, AMP_MEM_ACTIVATIONS); /* in full */
	bn_saved *sv = y ? amp_arena_alloc(ctx, sizeof *sv) : NULL;
	float *stats = sv ? amp_arena_alloc_raw(ctx, (size_t)g.C * 2 * sizeof(float)) : NULL;
	const float *gv = stats ? amp_f32_view(ctx, in[1]) : NULL;
	const float *bv = gv ? amp_f32_view(ctx, in[2]) : NULL;
	if (!bv)
		return oom(ctx, label);
	sv->mean = stats;
	sv->rstd = stats + g.C;
	float *rm = running_mean ? running_mean->data : NULL;
	float *rv = running_var ? running_var->data : NULL;
	double cnt = (double)(g.N * g.HW);
	/* x: (N,C,H,W) -> y: (N,C,H,W), channel by channel */
	for (int64_t c = 0; c < g.C; c++) {
		double mean, var;
		if (ctx->training) {
			bn_moments(in[0], g, c, &mean, &var);
			if (rm) {
				double unbiased = var * cnt / (cnt - 1.0), mo = (double)momentum;
				rm[c] = (float)((1.0 - mo) * (double)rm[c] + mo * mean);
				rv[c] = (float)((1.0 - mo) * (double)rv[c] + mo * unbiased);
			}
		} else {
			mean = (double)rm[c];
			var = (double)rv[c];
		}
		float m = (float)mean, rstd = (float)(1.0 / sqrt(var + (double)eps));
		float scale = rstd * gv[c], shift = bv[c];
		sv->mean[c] = m;
		sv->rstd[c] = rstd;
		bn_write_channel(in[0], y, g, c, m, scale, shift);
	}
	if (ctx->training && rm) {
		amp_param_touched(running_mean->param);
		amp_param_touched(running_var->param);
	}
	call.flops = (uint64_t)y->numel * (ctx->training ? 7 : 3);
	call.bytes =
	    (uint64_t)(y->numel * (ctx->training ? 4 : 2) + g.C * 4) * amp_dtype_size(call.exec);
	amp_node *node;
	if ((rc = amp_op_end(ctx, &call, y, in, 3, batch_norm2d_backward, &node)))
		return rc;
	if (node) {
		node->saved = sv;
		node->recompute = batch_norm2d_recompute;
		node->f[0] = eps;
		node->f[1] = momentum;
	}
	*out = y;
	return AMP_OK;
}

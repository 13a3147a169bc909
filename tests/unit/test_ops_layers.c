/* test_ops_layers.c — the layer ops of the ResNet- and BERT-style models: BatchNorm2D (batch and
 * running statistics, inference), Sum / Mean / Max over an axis (keepdim), AvgPool2D,
 * GlobalAvgPool2D, Concat and Slice.  Forward against FP64 references in fp32, fp16 and bf16,
 * gradients by central differences and in each half type against FP32, and the errors.
 *
 * Tolerances are opcheck_cr.h's for the forward; gradients |analytic - numeric| /
 * max(1, |numeric|) <= 2e-3; half backward err/scale <= 1e-2 (fp16), 8e-2 (bf16).
 */
#include <criterion/criterion.h>
#include <criterion/logging.h>

#include "opcheck_cr.h"

#define TOL_GRAD     2e-3
#define TOL_BWD_BF16 (8 * TOL_F16)

/* ---- BatchNorm2D ------------------------------------------------------------------------- */

static int fn_bn(amp_ctx *c, amp_tensor **in, amp_tensor **out, void *arg)
{
	(void)arg;
	return amp_batch_norm2d(c, "bn", in[0], in[1], in[2], NULL, NULL, 0.1f, 1e-5f, out);
}

/* Batch mean and biased variance per channel of x (N,C,HW), and y. */
static void bn_ref(const float *x, const float *gm, const float *bt, int64_t N, int64_t C,
                   int64_t HW, double eps, double *mean, double *var, double *y)
{
	for (int64_t c = 0; c < C; c++) {
		double s = 0, v = 0, cnt = (double)(N * HW);
		for (int64_t n = 0; n < N; n++)
			for (int64_t j = 0; j < HW; j++)
				s += (double)x[(n * C + c) * HW + j];
		mean[c] = s / cnt;
		for (int64_t n = 0; n < N; n++)
			for (int64_t j = 0; j < HW; j++) {
				double d = (double)x[(n * C + c) * HW + j] - mean[c];
				v += d * d;
			}
		var[c] = v / cnt;
		for (int64_t n = 0; n < N; n++)
			for (int64_t j = 0; j < HW; j++) {
				int64_t i = (n * C + c) * HW + j;
				y[i] =
				    ((double)x[i] - mean[c]) / sqrt(var[c] + eps) * (double)gm[c] +
				    (double)bt[c];
			}
	}
}

Test(ops_layers, batch_norm2d)
{
	int64_t N = 4, C = 3, H = 5, W = 6, HW = H * W, nx = N * C * HW;
	amp_shape sh[3] = {amp_shape4(N, C, H, W), amp_shape1(C), amp_shape1(C)};
	float *x = fill(nx, 1, -2, 2), *gm = fill(C, 2, 0.5f, 1.5f), *bt = fill(C, 3, -1, 1);
	float *vals[3] = {x, gm, bt};
	double *ref = dalloc(nx), mean[3], var[3];
	/* channel 1 far from zero mean: fine only with two-pass statistics */
	for (int64_t n = 0; n < N; n++)
		for (int64_t j = 0; j < HW; j++)
			x[(n * C + 1) * HW + j] += 30.0f;
	bn_ref(x, gm, bt, N, C, HW, 1e-5, mean, var, ref);
	double e32 = fwd_err("force_fp32", 3, sh, vals, fn_bn, NULL, ref, nx, AMP_F32);
	cr_log_info("BatchNorm2D forward (a channel at mean 30): fp32 max rel err %.3g (tol %g)",
	            e32, TOL_F32);
	cr_expect(e32 <= TOL_F32);
	for (int64_t n = 0; n < N; n++)
		for (int64_t j = 0; j < HW; j++)
			x[(n * C + 1) * HW + j] -= 30.0f;
	bn_ref(x, gm, bt, N, C, HW, 1e-5, mean, var, ref);
	check_fwd("BatchNorm2D", 3, sh, vals, fn_bn, NULL, ref, nx);
	check_grad("BatchNorm2D", 3, sh, vals, fn_bn, NULL, 1e-2f, 30, TOL_GRAD);
	check_bwd_half("BatchNorm2D", 3, sh, vals, fn_bn, NULL, TOL_F16, TOL_BWD_BF16);
	free(x), free(gm), free(bt), free(ref);
}

/* Two training steps update the running statistics as (1 - m) r + m batch (variance
 * unbiased); inference then normalises with them; the op is black-listed. */
Test(ops_layers, batch_norm2d_running_stats_and_inference)
{
	int64_t N = 2, C = 2, H = 3, W = 3, HW = H * W, nx = N * C * HW;
	float momentum = 0.25f, eps = 1e-3f;
	amp_ctx *ctx = opcheck_ctx("allow_mix_precision");
	amp_tensor *gm, *bt, *rm, *rv, *x, *y;
	cr_assert_eq(amp_param_new(ctx, "bn.w", amp_shape1(C), AMP_INIT_ONES, 0, &gm), AMP_OK);
	cr_assert_eq(amp_param_new(ctx, "bn.b", amp_shape1(C), AMP_INIT_ZEROS, 0, &bt), AMP_OK);
	cr_assert_eq(amp_param_new(ctx, "bn.mean", amp_shape1(C), AMP_INIT_ZEROS, 0, &rm), AMP_OK);
	cr_assert_eq(amp_param_new(ctx, "bn.var", amp_shape1(C), AMP_INIT_ONES, 0, &rv), AMP_OK);
	double want_m[2] = {0, 0}, want_v[2] = {1, 1};
	float ones[2] = {1, 1}, zeros[2] = {0, 0};
	double m[2], v[2], *yr = dalloc(nx);
	for (int step = 0; step < 2; step++) {
		float *xv = fill(nx, 40 + (uint64_t)step, -1, 3);
		cr_assert_eq(amp_step_begin(ctx), AMP_OK);
		cr_assert_eq(amp_tensor_from_f32(ctx, xv, amp_shape4(N, C, H, W), AMP_F16, &x),
		             AMP_OK);
		cr_assert_eq(amp_batch_norm2d(ctx, "bn", x, gm, bt, rm, rv, momentum, eps, &y),
		             AMP_OK, "%s", amp_ctx_error(ctx));
		cr_expect_eq(y->dtype, AMP_F32,
		             "BatchNorm2D (black) runs in fp32 on an fp16 input");
		float xr[36];
		cr_assert_eq(amp_tensor_read_f32(ctx, x, xr), AMP_OK); /* the rounded input */
		bn_ref(xr, ones, zeros, N, C, HW, (double)eps, m, v, yr);
		for (int c = 0; c < 2; c++) {
			want_m[c] = (1 - (double)momentum) * want_m[c] + (double)momentum * m[c];
			want_v[c] = (1 - (double)momentum) * want_v[c] + (double)momentum * v[c] *
			                                                     (double)(N * HW) /
			                                                     (double)(N * HW - 1);
		}
		cr_assert_eq(amp_step_end(ctx), AMP_OK);
		free(xv);
	}
	const float *rmv = rm->data, *rvv = rv->data;
	double err = 0;
	for (int c = 0; c < 2; c++)
		err = fmax(
		    err, fmax(fabs((double)rmv[c] - want_m[c]), fabs((double)rvv[c] - want_v[c])));
	cr_log_info("running mean %.6g %.6g, var %.6g %.6g after 2 steps: max err %.3g (tol 1e-6)",
	            (double)rmv[0], (double)rmv[1], (double)rvv[0], (double)rvv[1], err);
	cr_expect(err <= 1e-6);
	cr_expect(!rm->grad && !rv->grad, "running statistics get no gradient");

	amp_set_training(ctx, 0);
	float *xv = fill(nx, 77, -1, 3);
	cr_assert_eq(amp_step_begin(ctx), AMP_OK);
	cr_assert_eq(amp_tensor_from_f32(ctx, xv, amp_shape4(N, C, H, W), AMP_F32, &x), AMP_OK);
	cr_assert_eq(amp_batch_norm2d(ctx, "bn", x, gm, bt, rm, rv, momentum, eps, &y), AMP_OK);
	float out[36];
	cr_assert_eq(amp_tensor_read_f32(ctx, y, out), AMP_OK);
	err = 0;
	for (int64_t i = 0; i < nx; i++) {
		int64_t c = (i / HW) % C;
		double r = ((double)xv[i] - (double)rmv[c]) / sqrt((double)rvv[c] + (double)eps);
		err = fmax(err, fabs((double)out[i] - r) / fmax(1.0, fabs(r)));
	}
	cr_log_info("BatchNorm2D inference with the running statistics: max rel err %.3g (tol %g)",
	            err, TOL_F32);
	cr_expect(err <= TOL_F32);
	cr_expect((double)rmv[0] == (double)((float)want_m[0]) ||
	              fabs((double)rmv[0] - want_m[0]) <= 1e-6,
	          "inference leaves the running statistics alone");
	/* inference without running statistics is an error */
	cr_expect_eq(amp_batch_norm2d(ctx, "bn", x, gm, bt, NULL, NULL, momentum, eps, &y),
	             AMP_EINVAL);
	cr_expect(strstr(amp_ctx_error(ctx), "BatchNorm2D 'bn'"), "message: %s",
	          amp_ctx_error(ctx));
	cr_expect_eq(amp_op_default_list(AMP_OP_BATCH_NORM2D), AMP_LIST_BLACK);
	free(xv), free(yr);
	amp_ctx_free(ctx);
}

Test(ops_layers, batch_norm2d_errors)
{
	amp_shape sh[3] = {amp_shape4(2, 3, 2, 2), amp_shape1(4), amp_shape1(3)};
	float v[32] = {0};
	float *vals[3] = {v, v, v};
	fixture f;
	fx_open(&f, "force_fp32", 3, sh, vals);
	cr_expect_eq(amp_batch_norm2d(f.ctx, "bn1", f.in[0], f.in[1], f.in[2], NULL, NULL, 0.1f,
	                              1e-5f, &f.out),
	             AMP_ESHAPE);
	const char *e = amp_ctx_error(f.ctx);
	cr_log_info("bad gamma: %s", e);
	cr_expect(strstr(e, "BatchNorm2D 'bn1'") && strstr(e, "(4)") && strstr(e, "(2,3,2,2)"),
	          "message: %s", e);
	cr_expect_eq(amp_batch_norm2d(f.ctx, "bn1", f.in[0], f.in[2], f.in[2], NULL, NULL, 1.5f,
	                              1e-5f, &f.out),
	             AMP_EINVAL);
	/* a step-scoped tensor is not a running statistic */
	amp_tensor *t;
	cr_assert_eq(amp_tensor_new(f.ctx, AMP_F32, amp_shape1(3), &t), AMP_OK);
	cr_expect_eq(
	    amp_batch_norm2d(f.ctx, "bn1", f.in[0], f.in[2], f.in[2], t, t, 0.1f, 1e-5f, &f.out),
	    AMP_EINVAL);
	cr_expect(strstr(amp_ctx_error(f.ctx), "running_mean"), "message: %s",
	          amp_ctx_error(f.ctx));
	amp_ctx_free(f.ctx);
}

/* ---- reductions over an axis ------------------------------------------------------------- */

typedef struct axis_arg {
	int op; /* 0 Sum, 1 Mean, 2 Max */
	int axis, keepdim;
} axis_arg;

static int fn_axis(amp_ctx *c, amp_tensor **in, amp_tensor **out, void *arg)
{
	const axis_arg *a = arg;
	switch (a->op) {
	case 0: return amp_sum_axis(c, "sum", in[0], a->axis, a->keepdim, out);
	case 1: return amp_mean_axis(c, "mean", in[0], a->axis, a->keepdim, out);
	default: return amp_max_axis(c, "max", in[0], a->axis, a->keepdim, out, NULL);
	}
}

/* Reference over (outer, len, inner). */
static void axis_ref(const float *x, amp_shape s, int axis, int op, double *y, int32_t *arg)
{
	int64_t outer = 1, inner = 1, len = s.d[axis];
	for (int k = 0; k < axis; k++)
		outer *= s.d[k];
	for (int k = axis + 1; k < s.ndim; k++)
		inner *= s.d[k];
	for (int64_t o = 0; o < outer; o++)
		for (int64_t j = 0; j < inner; j++) {
			double acc = op == 2 ? -INFINITY : 0;
			int32_t best = 0;
			for (int64_t i = 0; i < len; i++) {
				double v = (double)x[(o * len + i) * inner + j];
				if (op == 2 && v > acc) {
					acc = v;
					best = (int32_t)i;
				} else if (op != 2) {
					acc += v;
				}
			}
			y[o * inner + j] = op == 1 ? acc / (double)len : acc;
			if (arg)
				arg[o * inner + j] = best;
		}
}

Test(ops_layers, axis_reductions)
{
	static const char *const names[3] = {"Sum", "Mean", "Max"};
	amp_shape shapes[2] = {amp_shape3(3, 4, 5), amp_shape3(2, 3, 2500)};
	int cases = 0;
	for (int si = 0; si < 2; si++) {
		amp_shape s = shapes[si];
		int64_t nx = amp_shape_numel(s);
		float *x0 = fill(nx, 60 + (uint64_t)si, -2, 2), *x = fill(nx, 0, 0, 0);
		/* the small shape: distinct values 0.01 apart, so Max's winner does not move under
		 * central differences of h 1e-3 */
		for (int64_t i = 0; si == 0 && i < nx; i++)
			x0[i] = 0.01f * (float)((i * 7919) % nx) - 0.005f * (float)nx;
		float *vals[1] = {x};
		for (int op = 0; op < 3; op++)
			for (int axis = -1; axis < 3; axis++)
				for (int keep = 0; keep < 2; keep++) {
					if (si == 1 && axis == 0)
						continue; /* the big shape: rows or runs over blocks */
					int a = axis < 0 ? axis + 3 : axis;
					memcpy(x, x0, (size_t)nx * sizeof(float));
					if (si == 1 && op == 2) {
						/* values in [-2,2] repeat: one clear winner per output,
						 * which half rounding keeps too */
						int64_t len = s.d[a], in = a == 1 ? s.d[2] : 1;
						for (int64_t o = 0; o < nx / len; o++) {
							int64_t outer = o / in, j = o % in;
							int64_t at = (outer * len + (o * 7) % len) * in + j;
							x[at] = 3.0f + 0.01f * (float)(o % 50);
						}
					}
					axis_arg arg = {op, axis, keep};
					int64_t ny = nx / s.d[a];
					double *ref = dalloc(ny);
					axis_ref(x, s, a, op, ref, NULL);
					char what[64];
					snprintf(what, sizeof what,
					         "%s axis %d%s of (%lld,%lld,%lld)", names[op],
					         axis, keep ? " keepdim" : "", (long long)s.d[0],
					         (long long)s.d[1], (long long)s.d[2]);
					check_fwd(what, 1, &s, vals, fn_axis, &arg, ref, ny);
					check_grad(what, 1, &s, vals, fn_axis, &arg, 1e-3f, 20,
					           TOL_GRAD);
					check_bwd_half(what, 1, &s, vals, fn_axis, &arg, TOL_F16,
					               TOL_BWD_BF16);
					/* the shape: the axis removed, or kept as 1 */
					fixture f;
					fx_open(&f, "force_fp32", 1, &s, vals);
					cr_assert_eq(fn_axis(f.ctx, f.in, &f.out, &arg), AMP_OK);
					amp_shape want = s;
					if (keep) {
						want.d[a] = 1;
					} else {
						for (int k = a; k < 2; k++)
							want.d[k] = s.d[k + 1];
						want.d[2] = 0;
						want.ndim = 2;
					}
					char sg[32], sw[32];
					cr_expect(amp_shape_eq(f.out->shape, want),
					          "%s: shape %s, want %s", what,
					          amp_shape_str(f.out->shape, sg, sizeof sg),
					          amp_shape_str(want, sw, sizeof sw));
					amp_ctx_free(f.ctx);
					free(ref);
					cases++;
				}
		free(x), free(x0);
	}
	cr_log_info("axis reductions: %d cases", cases);
}

/* Max returns the winner's index; ties go to the first, NaN wins; Sum and Mean are black, Max
 * too (a reduction); a bad axis names the op, the label and the shape. */
Test(ops_layers, max_axis_index_and_errors)
{
	float x[8] = {1, 5, 5, 2, /* row 1: */ 3, NAN, 9, 1};
	amp_shape s = amp_shape2(2, 4);
	float *vals[1] = {x};
	fixture f;
	fx_open(&f, "force_fp32", 1, &s, vals);
	amp_tensor *ix;
	cr_assert_eq(amp_max_axis(f.ctx, "m", f.in[0], -1, 1, &f.out, &ix), AMP_OK);
	cr_expect(amp_shape_eq(ix->shape, amp_shape2(2, 1)) && ix->dtype == AMP_I32);
	const int32_t *iv = ix->data;
	float y[2];
	cr_assert_eq(amp_tensor_read_f32(f.ctx, f.out, y), AMP_OK);
	cr_expect(iv[0] == 1 && iv[1] == 1 && y[0] == 5.0f && isnan(y[1]),
	          "index %d %d, values %g %g", iv[0], iv[1], (double)y[0], (double)y[1]);
	float seed[2] = {2, 3};
	cr_assert_eq(amp_backward_seeded(f.ctx, f.out, seed), AMP_OK);
	const float *g = f.in[0]->grad->data;
	cr_expect(g[1] == 2.0f && g[2] == 0.0f && g[5] == 3.0f && g[6] == 0.0f,
	          "max gradient to the first winner: %g %g %g %g", (double)g[1], (double)g[2],
	          (double)g[5], (double)g[6]);
	cr_expect_eq(amp_mean_axis(f.ctx, "m", f.in[0], 2, 0, &f.out), AMP_EINVAL);
	const char *e = amp_ctx_error(f.ctx);
	cr_expect(strstr(e, "Mean 'm'") && strstr(e, "axis 2") && strstr(e, "(2,4)"), "message: %s",
	          e);
	cr_expect_eq(amp_sum_axis(f.ctx, "s", f.in[0], -3, 0, &f.out), AMP_EINVAL);
	amp_ctx_free(f.ctx);
	cr_expect_eq(amp_op_default_list(AMP_OP_SUM), AMP_LIST_BLACK);
	cr_expect_eq(amp_op_default_list(AMP_OP_MAX), AMP_LIST_BLACK);
}

/* ---- pooling ----------------------------------------------------------------------------- */

typedef struct pool_arg {
	int k, stride;
} pool_arg;

static int fn_avgpool(amp_ctx *c, amp_tensor **in, amp_tensor **out, void *arg)
{
	const pool_arg *p = arg;
	return amp_avgpool2d(c, "pool", in[0], p->k, p->stride, out);
}

static int fn_gap(amp_ctx *c, amp_tensor **in, amp_tensor **out, void *arg)
{
	(void)arg;
	return amp_global_avgpool2d(c, "gap", in[0], out);
}

Test(ops_layers, avgpool2d)
{
	static const pool_arg cases[] = {{2, 2}, {3, 2}, {3, 1}};
	amp_shape s = amp_shape4(2, 3, 7, 8);
	int64_t N = 2, C = 3, H = 7, W = 8, nx = N * C * H * W;
	float *x = fill(nx, 70, -2, 2);
	float *vals[1] = {x};
	for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
		pool_arg p = cases[k];
		int64_t OH = (H - p.k) / p.stride + 1, OW = (W - p.k) / p.stride + 1;
		int64_t ny = N * C * OH * OW;
		double *ref = dalloc(ny);
		for (int64_t pl = 0; pl < N * C; pl++)
			for (int64_t oh = 0; oh < OH; oh++)
				for (int64_t ow = 0; ow < OW; ow++) {
					double acc = 0;
					for (int i = 0; i < p.k; i++)
						for (int j = 0; j < p.k; j++)
							acc += (double)
							    x[pl * H * W + (oh * p.stride + i) * W +
							      ow * p.stride + j];
					ref[(pl * OH + oh) * OW + ow] = acc / (double)(p.k * p.k);
				}
		char what[48];
		snprintf(what, sizeof what, "AvgPool2D k%d s%d", p.k, p.stride);
		check_fwd(what, 1, &s, vals, fn_avgpool, &p, ref, ny);
		check_grad(what, 1, &s, vals, fn_avgpool, &p, 1e-2f, 30, TOL_GRAD);
		check_bwd_half(what, 1, &s, vals, fn_avgpool, &p, TOL_F16, TOL_BWD_BF16);
		free(ref);
	}
	fixture f;
	fx_open(&f, "force_fp32", 1, &s, vals);
	cr_expect_eq(amp_avgpool2d(f.ctx, "pool1", f.in[0], 8, 1, &f.out), AMP_ESHAPE);
	cr_expect(strstr(amp_ctx_error(f.ctx), "AvgPool2D 'pool1'") &&
	              strstr(amp_ctx_error(f.ctx), "(2,3,7,8)"),
	          "message: %s", amp_ctx_error(f.ctx));
	cr_expect_eq(amp_avgpool2d(f.ctx, "pool1", f.in[0], 2, 0, &f.out), AMP_EINVAL);
	amp_ctx_free(f.ctx);
	free(x);
}

Test(ops_layers, global_avgpool2d)
{
	amp_shape shapes[2] = {amp_shape4(2, 3, 5, 7),
	                       amp_shape4(1, 2, 50, 50)}; /* planes of 2500 */
	for (int si = 0; si < 2; si++) {
		amp_shape s = shapes[si];
		int64_t planes = s.d[0] * s.d[1], hw = s.d[2] * s.d[3];
		float *x = fill(planes * hw, 80 + (uint64_t)si, -2, 2);
		float *vals[1] = {x};
		double *ref = dalloc(planes);
		for (int64_t p = 0; p < planes; p++) {
			for (int64_t j = 0; j < hw; j++)
				ref[p] += (double)x[p * hw + j];
			ref[p] /= (double)hw;
		}
		check_fwd("GlobalAvgPool2D", 1, &s, vals, fn_gap, NULL, ref, planes);
		check_grad("GlobalAvgPool2D", 1, &s, vals, fn_gap, NULL, 1e-2f, 20, TOL_GRAD);
		check_bwd_half("GlobalAvgPool2D", 1, &s, vals, fn_gap, NULL, TOL_F16, TOL_BWD_BF16);
		fixture f;
		fx_open(&f, "force_fp32", 1, &s, vals);
		cr_assert_eq(fn_gap(f.ctx, f.in, &f.out, NULL), AMP_OK);
		cr_expect(amp_shape_eq(f.out->shape, amp_shape2(s.d[0], s.d[1])),
		          "(N,C,H,W) -> (N,C)");
		amp_ctx_free(f.ctx);
		free(x), free(ref);
	}
	float v[6] = {0};
	amp_shape bad = amp_shape2(2, 3);
	float *vals[1] = {v};
	fixture f;
	fx_open(&f, "force_fp32", 1, &bad, vals);
	cr_expect_eq(amp_global_avgpool2d(f.ctx, "gap", f.in[0], &f.out), AMP_ESHAPE);
	cr_expect(strstr(amp_ctx_error(f.ctx), "GlobalAvgPool2D 'gap'") &&
	              strstr(amp_ctx_error(f.ctx), "(2,3)"),
	          "message: %s", amp_ctx_error(f.ctx));
	amp_ctx_free(f.ctx);
}

/* ---- Concat and Slice -------------------------------------------------------------------- */

typedef struct cat_arg {
	int n, axis;
} cat_arg;

static int fn_concat(amp_ctx *c, amp_tensor **in, amp_tensor **out, void *arg)
{
	const cat_arg *a = arg;
	return amp_concat(c, "cat", in, a->n, a->axis, out);
}

typedef struct slice_arg {
	int axis;
	int64_t start, len;
} slice_arg;

static int fn_slice(amp_ctx *c, amp_tensor **in, amp_tensor **out, void *arg)
{
	const slice_arg *a = arg;
	return amp_slice(c, "sl", in[0], a->axis, a->start, a->len, out);
}

Test(ops_layers, concat)
{
	amp_shape sh[3] = {amp_shape3(2, 3, 4), amp_shape3(2, 1, 4), amp_shape3(2, 2, 4)};
	float *x[3] = {fill(24, 90, -2, 2), fill(8, 91, -2, 2), fill(16, 92, -2, 2)};
	double ref[48];
	/* along axis 1: y[o, :, :] = x0[o] then x1[o] then x2[o] */
	int64_t at = 0;
	for (int64_t o = 0; o < 2; o++)
		for (int k = 0; k < 3; k++) {
			int64_t run = sh[k].d[1] * 4;
			for (int64_t j = 0; j < run; j++)
				ref[at++] = (double)x[k][o * run + j];
		}
	cat_arg arg = {3, 1};
	check_fwd("Concat axis 1", 3, sh, x, fn_concat, &arg, ref, 48);
	check_grad("Concat axis 1", 3, sh, x, fn_concat, &arg, 1e-2f, 24, TOL_GRAD);
	check_bwd_half("Concat axis 1", 3, sh, x, fn_concat, &arg, TOL_F16, TOL_BWD_BF16);
	cat_arg last = {2, -1};
	amp_shape sl[2] = {amp_shape2(3, 2), amp_shape2(3, 5)};
	float *xl[2] = {fill(6, 93, -2, 2), fill(15, 94, -2, 2)};
	check_grad("Concat axis -1", 2, sl, xl, fn_concat, &last, 1e-2f, 24, TOL_GRAD);
	free(xl[0]), free(xl[1]);

	fixture f;
	fx_open(&f, "force_fp32", 3, sh, x);
	cr_assert_eq(fn_concat(f.ctx, f.in, &f.out, &arg), AMP_OK);
	cr_expect(amp_shape_eq(f.out->shape, amp_shape3(2, 6, 4)));
	cat_arg bad = {3, 2};
	cr_expect_eq(fn_concat(f.ctx, f.in, &f.out, &bad), AMP_ESHAPE);
	const char *e = amp_ctx_error(f.ctx);
	cr_log_info("bad concat: %s", e);
	cr_expect(strstr(e, "Concat 'cat'") && strstr(e, "(2,1,4)") && strstr(e, "(2,3,4)"),
	          "message: %s", e);
	cr_expect_eq(amp_concat(f.ctx, "cat", f.in, 0, 0, &f.out), AMP_EINVAL);
	amp_ctx_free(f.ctx);
	for (int k = 0; k < 3; k++)
		free(x[k]);
}

/* More inputs than a tape node holds: every one still gets its part of the gradient. */
Test(ops_layers, concat_many_inputs)
{
	enum { K = 6 };
	amp_ctx *ctx = opcheck_ctx("force_fp32");
	amp_tensor *in[K], *y;
	for (int k = 0; k < K; k++) {
		float v[2] = {(float)k, (float)k + 0.5f};
		cr_assert_eq(amp_param_new(ctx, "p", amp_shape2(1, 2), AMP_INIT_ZEROS, 0, &in[k]),
		             AMP_OK);
		cr_assert_eq(amp_param_load(ctx, in[k], v), AMP_OK);
	}
	cr_assert_eq(amp_step_begin(ctx), AMP_OK);
	cr_assert_eq(amp_concat(ctx, "heads", in, K, 0, &y), AMP_OK, "%s", amp_ctx_error(ctx));
	cr_expect(amp_shape_eq(y->shape, amp_shape2(K, 2)));
	float seed[2 * K];
	for (int i = 0; i < 2 * K; i++)
		seed[i] = (float)(i + 1);
	cr_assert_eq(amp_backward_seeded(ctx, y, seed), AMP_OK);
	int ok = 1;
	for (int k = 0; k < K; k++) {
		const float *g = in[k]->grad ? in[k]->grad->data : NULL;
		ok &= g && g[0] == seed[2 * k] && g[1] == seed[2 * k + 1];
	}
	cr_expect(ok, "each of %d inputs gets its rows of the gradient", K);
	amp_ctx_free(ctx);
}

Test(ops_layers, slice)
{
	amp_shape s = amp_shape3(3, 5, 4);
	float *x = fill(60, 95, -2, 2);
	float *vals[1] = {x};
	slice_arg cases[3] = {{1, 1, 3}, {-1, 2, 2}, {0, 0, 1}};
	for (int c = 0; c < 3; c++) {
		slice_arg a = cases[c];
		int ax = a.axis < 0 ? a.axis + 3 : a.axis;
		amp_shape ys = s;
		ys.d[ax] = a.len;
		int64_t ny = amp_shape_numel(ys);
		double *ref = dalloc(ny);
		int64_t o = 0;
		for (int64_t i = 0; i < 3; i++)
			for (int64_t j = 0; j < 5; j++)
				for (int64_t k = 0; k < 4; k++) {
					int64_t at = ax == 0 ? i : ax == 1 ? j : k;
					if (at >= a.start && at < a.start + a.len)
						ref[o++] = (double)x[(i * 5 + j) * 4 + k];
				}
		char what[48];
		snprintf(what, sizeof what, "Slice axis %d [%lld,+%lld)", a.axis,
		         (long long)a.start, (long long)a.len);
		check_fwd(what, 1, &s, vals, fn_slice, &a, ref, ny);
		check_grad(what, 1, &s, vals, fn_slice, &a, 1e-2f, 30, TOL_GRAD);
		check_bwd_half(what, 1, &s, vals, fn_slice, &a, TOL_F16, TOL_BWD_BF16);
		free(ref);
	}
	fixture f;
	fx_open(&f, "force_fp32", 1, &s, vals);
	cr_expect_eq(amp_slice(f.ctx, "sl", f.in[0], 1, 3, 3, &f.out), AMP_ESHAPE);
	const char *e = amp_ctx_error(f.ctx);
	cr_expect(strstr(e, "Slice 'sl'") && strstr(e, "start 3, length 3 is outside [0, 5)") &&
	              strstr(e, "(3,5,4)"),
	          "message: %s", e);
	cr_expect_eq(amp_slice(f.ctx, "sl", f.in[0], 1, 2, INT64_MAX, &f.out), AMP_ESHAPE);
	cr_expect_eq(amp_slice(f.ctx, "sl", f.in[0], 1, INT64_MAX, 2, &f.out), AMP_ESHAPE);
	cr_expect_eq(amp_slice(f.ctx, "sl", f.in[0], 3, 0, 1, &f.out), AMP_EINVAL);
	amp_ctx_free(f.ctx);
	free(x);
}

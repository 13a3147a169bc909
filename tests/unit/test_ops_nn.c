/* test_ops_nn.c — the network ops (activations, softmax family, layer norm, cross-entropy,
 * reductions, shape ops, embedding, dropout): forward against FP64 references written here,
 * backward by central differences through the real autograd, and their error paths.
 *
 * Forward tolerances are opcheck_cr.h's (bf16 measured up to 6.2e-3 here); gradient checks as
 * stated per test (opcheck_grad's measure).
 */
#include <criterion/criterion.h>
#include <criterion/logging.h>

#include "opcheck_cr.h"

/* ---- op wrappers (opcheck_fn) ------------------------------------------------------------ */

static int fn_bias_add(amp_ctx *c, amp_tensor **in, amp_tensor **out, void *arg)
{
	(void)arg;
	return amp_bias_add(c, "bias", in[0], in[1], out);
}

typedef int (*unary_op)(amp_ctx *, const char *, amp_tensor *, amp_tensor **);

static int fn_unary(amp_ctx *c, amp_tensor **in, amp_tensor **out, void *arg)
{
	unary_op op = *(unary_op *)arg;
	return op(c, "act", in[0], out);
}

static int fn_pow(amp_ctx *c, amp_tensor **in, amp_tensor **out, void *arg)
{
	return amp_pow(c, "pow", in[0], *(float *)arg, out);
}

static int fn_softmax(amp_ctx *c, amp_tensor **in, amp_tensor **out, void *arg)
{
	return amp_softmax(c, "attn", in[0], *(int *)arg, out);
}

static int fn_log_softmax(amp_ctx *c, amp_tensor **in, amp_tensor **out, void *arg)
{
	(void)arg;
	return amp_log_softmax(c, "lsm", in[0], out);
}

static int fn_layer_norm(amp_ctx *c, amp_tensor **in, amp_tensor **out, void *arg)
{
	return amp_layer_norm(c, "ln", in[0], in[1], in[2], *(float *)arg, out);
}

typedef struct int_arg {
	const int32_t *v;
	amp_shape shape;
} int_arg;

static int fn_cross_entropy(amp_ctx *c, amp_tensor **in, amp_tensor **out, void *arg)
{
	const int_arg *t = arg;
	amp_tensor *targets;
	int rc = amp_tensor_from_i32(c, t->v, t->shape, &targets);
	return rc ? rc : amp_cross_entropy(c, "loss", in[0], targets, out);
}

static int fn_sum(amp_ctx *c, amp_tensor **in, amp_tensor **out, void *arg)
{
	(void)arg;
	return amp_sum(c, "sum", in[0], out);
}

static int fn_mean(amp_ctx *c, amp_tensor **in, amp_tensor **out, void *arg)
{
	(void)arg;
	return amp_mean(c, "mean", in[0], out);
}

static int fn_reshape(amp_ctx *c, amp_tensor **in, amp_tensor **out, void *arg)
{
	return amp_reshape(c, "view", in[0], *(amp_shape *)arg, out);
}

static int fn_transpose(amp_ctx *c, amp_tensor **in, amp_tensor **out, void *arg)
{
	const int *d = arg;
	return amp_transpose(c, "tr", in[0], d[0], d[1], out);
}

static int fn_embedding(amp_ctx *c, amp_tensor **in, amp_tensor **out, void *arg)
{
	const int_arg *ids = arg;
	amp_tensor *t;
	int rc = amp_tensor_from_i32(c, ids->v, ids->shape, &t);
	return rc ? rc : amp_embedding(c, "emb", in[0], t, out);
}

static int fn_dropout(amp_ctx *c, amp_tensor **in, amp_tensor **out, void *arg)
{
	return amp_dropout(c, "drop", in[0], *(float *)arg, out);
}

/* ---- BiasAdd ----------------------------------------------------------------------------- */

Test(ops_nn, bias_add)
{
	amp_shape sh[2] = {amp_shape3(5, 3, 8), amp_shape1(8)};
	float *x = fill(120, 1, -3, 3), *b = fill(8, 2, -1, 1);
	float *vals[2] = {x, b};
	double *ref = dalloc(120);
	for (int i = 0; i < 120; i++)
		ref[i] = (double)x[i] + (double)b[i % 8];
	check_fwd("BiasAdd", 2, sh, vals, fn_bias_add, NULL, ref, 120);
	check_grad("BiasAdd", 2, sh, vals, fn_bias_add, NULL, 1e-2f, 24, 1e-3);

	fixture f;
	amp_shape bad[2] = {amp_shape2(4, 8), amp_shape1(7)};
	fx_open(&f, "force_fp32", 2, bad, vals);
	cr_expect_eq(amp_bias_add(f.ctx, "fc1", f.in[0], f.in[1], &f.out), AMP_ESHAPE);
	cr_expect(strstr(amp_ctx_error(f.ctx), "BiasAdd 'fc1'") &&
	              strstr(amp_ctx_error(f.ctx), "(7)") && strstr(amp_ctx_error(f.ctx), "(4,8)"),
	          "message: %s", amp_ctx_error(f.ctx));
	amp_ctx_free(f.ctx);
	free(x), free(b), free(ref);
}

/* ---- pointwise --------------------------------------------------------------------------- */

static double gelu_ref(double x)
{
	return 0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
}

typedef struct pointwise_case {
	const char *name;
	unary_op op; /* NULL: Pow with exponent e */
	float e;
	float lo, hi; /* input range */
	double (*ref)(double);
	float h;
	double grad_tol;
} pointwise_case;

static double relu_ref(double x)
{
	return x > 0 ? x : 0;
}
static double sq_pow_ref(double x)
{
	return pow(x, 2.5);
}
static double neg_pow_ref(double x)
{
	return pow(x, -1.5);
}
static double cube_ref(double x)
{
	return pow(x, 3.0);
}

static const pointwise_case pointwise_cases[] = {
    {"ReLU", amp_relu, 0, -2, 2, relu_ref, 1e-3f, 1e-3},
    {"GELU", amp_gelu, 0, -4, 4, gelu_ref, 1e-2f, 1e-3},
    {"Log", amp_log, 0, 0.5f, 4, log, 1e-2f, 1e-3},
    {"Exp", amp_exp, 0, -3, 3, exp, 1e-2f, 1e-3},
    {"Sqrt", amp_sqrt, 0, 0.5f, 4, sqrt, 1e-2f, 1e-3},
    {"Pow^2.5", NULL, 2.5f, 0.5f, 2, sq_pow_ref, 1e-2f, 1e-3},
    {"Pow^-1.5", NULL, -1.5f, 0.5f, 2, neg_pow_ref, 2e-3f, 1e-3},
    {"Pow^3 (negative x)", NULL, 3.0f, -2, 2, cube_ref, 1e-2f, 1e-3},
};

Test(ops_nn, pointwise)
{
	amp_shape sh[1] = {amp_shape2(6, 10)};
	for (size_t k = 0; k < sizeof pointwise_cases / sizeof *pointwise_cases; k++) {
		const pointwise_case *pc = &pointwise_cases[k];
		float *x = fill(60, 10 + k, pc->lo, pc->hi);
		if (pc->op == amp_relu) /* keep central differences off the kink */
			for (int i = 0; i < 60; i++)
				if (fabsf(x[i]) < 0.05f)
					x[i] = x[i] < 0 ? -0.05f : 0.05f;
		float *vals[1] = {x};
		double *ref = dalloc(60);
		for (int i = 0; i < 60; i++)
			ref[i] = pc->ref((double)x[i]);
		opcheck_fn fn = pc->op ? fn_unary : fn_pow;
		void *arg = pc->op ? (void *)&pc->op : (void *)&pc->e;
		check_fwd(pc->name, 1, sh, vals, fn, arg, ref, 60);
		check_grad(pc->name, 1, sh, vals, fn, arg, pc->h, 30, pc->grad_tol);
		free(x), free(ref);
	}
}

/* The GELU derivative is that of the tanh approximation, checked pointwise against FP64. */
Test(ops_nn, gelu_derivative_exact)
{
	float x[41];
	for (int i = 0; i < 41; i++)
		x[i] = -10.0f + 0.5f * (float)i;
	amp_shape sh[1] = {amp_shape1(41)};
	float *vals[1] = {x};
	fixture f;
	fx_open(&f, "force_fp32", 1, sh, vals);
	cr_assert_eq(amp_gelu(f.ctx, "g", f.in[0], &f.out), AMP_OK);
	float ones[41];
	for (int i = 0; i < 41; i++)
		ones[i] = 1.0f;
	cr_assert_eq(amp_backward_seeded(f.ctx, f.out, ones), AMP_OK);
	const float *g = f.in[0]->grad->data;
	double worst = 0;
	for (int i = 0; i < 41; i++) {
		double xd = x[i], k = 0.7978845608028654, a = 0.044715;
		double t = tanh(k * (xd + a * xd * xd * xd));
		double d = 0.5 * (1 + t) + 0.5 * xd * (1 - t * t) * k * (1 + 3 * a * xd * xd);
		worst = fmax(worst, fabs((double)g[i] - d) / fmax(1.0, fabs(d)));
	}
	cr_log_info("GELU derivative on [-10,10]: max err %.3g vs FP64 (tol 1e-6)", worst);
	cr_expect(worst <= 1e-6);
	amp_ctx_free(f.ctx);
}

/* GELU is computed without libm (an exp polynomial, branch-free): over a dense grid it stays
 * within FP32 rounding of the FP64 tanh approximation, forward and backward, and its special
 * values are those of the formula's limits: saturated ends, NaN propagated. */
Test(ops_nn, gelu_dense_and_special)
{
	enum { N = 24001, S = 8 };
	static float x[N + S], ones[N + S];
	for (int i = 0; i < N; i++)
		x[i] = -12.0f + 0.001f * (float)i;
	const float special[S] = {NAN, INFINITY, 1e30f, -1e30f, 0.0f, -0.0f, 1e-30f, -50.0f};
	for (int i = 0; i < S; i++)
		x[N + i] = special[i];
	for (int i = 0; i < N + S; i++)
		ones[i] = 1.0f;
	amp_shape sh[1] = {amp_shape1(N + S)};
	float *vals[1] = {x};
	fixture f;
	fx_open(&f, "force_fp32", 1, sh, vals);
	cr_assert_eq(amp_gelu(f.ctx, "g", f.in[0], &f.out), AMP_OK);
	cr_assert_eq(amp_backward_seeded(f.ctx, f.out, ones), AMP_OK);
	const float *y = f.out->data, *g = f.in[0]->grad->data;
	double worst_y = 0, worst_g = 0;
	for (int i = 0; i < N; i++) {
		double xd = x[i], k = 0.7978845608028654, a = 0.044715;
		double t = tanh(k * (xd + a * xd * xd * xd));
		double yr = 0.5 * xd * (1 + t);
		double d = 0.5 * (1 + t) + 0.5 * xd * (1 - t * t) * k * (1 + 3 * a * xd * xd);
		worst_y = fmax(worst_y, fabs((double)y[i] - yr) / fmax(1.0, fabs(yr)));
		worst_g = fmax(worst_g, fabs((double)g[i] - d) / fmax(1.0, fabs(d)));
	}
	cr_log_info("GELU on [-12,12] step 1e-3: forward max err %.3g, derivative %.3g (tol 1e-6)",
	            worst_y, worst_g);
	cr_expect(worst_y <= 1e-6);
	cr_expect(worst_g <= 1e-6);
	const float *ys = y + N, *gs = g + N;
	cr_expect(isnan(ys[0]) && isnan(gs[0]), "NaN: %g, %g", (double)ys[0], (double)gs[0]);
	cr_expect(ys[1] == INFINITY && gs[1] == 1.0f, "+Inf: %g, %g", (double)ys[1], (double)gs[1]);
	cr_expect(ys[2] == 1e30f && gs[2] == 1.0f, "1e30: %g, %g", (double)ys[2], (double)gs[2]);
	cr_expect(ys[3] == 0.0f && gs[3] == 0.0f, "-1e30: %g, %g", (double)ys[3], (double)gs[3]);
	cr_expect(ys[4] == 0.0f && gs[4] == 0.5f, "0: %g, %g", (double)ys[4], (double)gs[4]);
	cr_expect(ys[5] == 0.0f && gs[5] == 0.5f, "-0: %g, %g", (double)ys[5], (double)gs[5]);
	cr_expect(ys[6] == 0.5e-30f && gs[6] == 0.5f, "1e-30: %g, %g", (double)ys[6], (double)gs[6]);
	cr_expect(ys[7] == 0.0f && gs[7] == 0.0f, "-50: %g, %g", (double)ys[7], (double)gs[7]);
	amp_ctx_free(f.ctx);
}

/* exp(12) = 162755 > 65504: stored as +Inf in force_fp16; Exp is black-listed in
 * allow_mix_precision, so it runs in FP32 and stays finite. */
Test(ops_nn, exp_overflow_fp16)
{
	float x[4] = {12.0f, 1.0f, -2.0f, 10.0f};
	amp_shape sh[1] = {amp_shape1(4)};
	float *vals[1] = {x};
	unary_op op = amp_exp;
	float y[4];
	fixture f;

	fx_open(&f, "force_fp16", 1, sh, vals);
	cr_assert_eq(fn_unary(f.ctx, f.in, &f.out, &op), AMP_OK);
	cr_expect_eq(f.out->dtype, AMP_F16);
	cr_assert_eq(amp_tensor_read_f32(f.ctx, f.out, y), AMP_OK);
	cr_expect(isinf(y[0]) && y[0] > 0, "exp(12) in fp16 gave %g, expected +Inf", (double)y[0]);
	cr_expect(isfinite(y[3]), "exp(10) = 22026 fits fp16, got %g", (double)y[3]);
	cr_expect(amp_tensor_nonfinite(f.out));
	amp_ctx_free(f.ctx);

	fx_open(&f, "allow_mix_precision", 1, sh, vals);
	cr_assert_eq(fn_unary(f.ctx, f.in, &f.out, &op), AMP_OK);
	cr_expect_eq(f.out->dtype, AMP_F32);
	cr_assert_eq(amp_tensor_read_f32(f.ctx, f.out, y), AMP_OK);
	double e = fabs((double)y[0] - exp(12.0)) / exp(12.0);
	cr_log_info("exp(12): +Inf in force_fp16; %.9g in allow_mix_precision (rel err %.3g)",
	            (double)y[0], e);
	cr_expect(e <= TOL_F32);
	cr_expect(!amp_tensor_nonfinite(f.out));
	amp_ctx_free(f.ctx);
}

Test(ops_nn, pow_rejects_nonfinite_exponent)
{
	amp_ctx *ctx = opcheck_ctx("force_fp32");
	amp_tensor *x, *y;
	float v[2] = {1, 2};
	cr_assert_eq(amp_step_begin(ctx), AMP_OK);
	cr_assert_eq(amp_tensor_from_f32(ctx, v, amp_shape1(2), AMP_F32, &x), AMP_OK);
	cr_expect_eq(amp_pow(ctx, "p", x, NAN, &y), AMP_EINVAL);
	cr_expect(strstr(amp_ctx_error(ctx), "Pow 'p'"), "message: %s", amp_ctx_error(ctx));
	amp_ctx_free(ctx);
}

/* ---- Softmax family ---------------------------------------------------------------------- */

static void softmax_ref(const float *x, double *y, int64_t rows, int64_t c, int causal, int lg)
{
	for (int64_t r = 0; r < rows; r++) {
		int64_t n = causal ? r % c + 1 : c;
		double m = -INFINITY, s = 0;
		for (int64_t j = 0; j < n; j++)
			m = fmax(m, (double)x[r * c + j]);
		for (int64_t j = 0; j < n; j++)
			s += exp((double)x[r * c + j] - m);
		for (int64_t j = 0; j < c; j++)
			y[r * c + j] = j >= n ? 0.0
			               : lg   ? (double)x[r * c + j] - m - log(s)
			                      : exp((double)x[r * c + j] - m) / s;
	}
}

Test(ops_nn, softmax)
{
	/* Logits shifted by 1000: fine only with the max subtracted. */
	amp_shape sh[1] = {amp_shape3(3, 4, 9)};
	float *x = fill(108, 21, -4, 4);
	for (int i = 0; i < 36; i++)
		x[i] += 1000.0f;
	float *vals[1] = {x};
	double *ref = dalloc(108);
	int causal = 0;
	softmax_ref(x, ref, 12, 9, 0, 0);
	/* fp16 cannot hold 1000 + x precisely enough; compare it on the unshifted rows only. */
	double e32 = fwd_err("force_fp32", 1, sh, vals, fn_softmax, &causal, ref, 108, AMP_F32);
	cr_log_info("Softmax forward (rows shifted by 1000): fp32 max rel err %.3g (tol %g)", e32,
	            TOL_F32);
	cr_expect(e32 <= TOL_F32);
	for (int i = 0; i < 36; i++)
		x[i] -= 1000.0f;
	softmax_ref(x, ref, 12, 9, 0, 0);
	check_fwd("Softmax", 1, sh, vals, fn_softmax, &causal, ref, 108);

	/* Rows sum to 1 (fp32 output, summed in double). */
	float y[108];
	cr_assert_eq(opcheck_run("force_fp32", 1, sh, vals, fn_softmax, &causal, y, NULL), AMP_OK);
	double worst = 0;
	for (int r = 0; r < 12; r++) {
		double s = 0;
		for (int j = 0; j < 9; j++)
			s += (double)y[r * 9 + j];
		worst = fmax(worst, fabs(s - 1.0));
	}
	cr_log_info("Softmax row sums: max |sum - 1| %.3g (tol 1e-6)", worst);
	cr_expect(worst <= 1e-6);
	check_grad("Softmax", 1, sh, vals, fn_softmax, &causal, 1e-2f, 40, 1e-3);
	free(x), free(ref);
}

Test(ops_nn, softmax_causal)
{
	/* (B,T,T) = (2,6,6) */
	amp_shape sh[1] = {amp_shape3(2, 6, 6)};
	float *x = fill(72, 31, -3, 3);
	x[5] = 60000.0f; /* excluded (j > i in row 0): must not leak in, even as a huge value */
	float *vals[1] = {x};
	double *ref = dalloc(72);
	int causal = 1;
	softmax_ref(x, ref, 12, 6, 1, 0);
	check_fwd("Softmax causal", 1, sh, vals, fn_softmax, &causal, ref, 72);

	const char *modes[2] = {"force_fp32", "force_fp16"};
	for (int m = 0; m < 2; m++) {
		float y[72];
		cr_assert_eq(opcheck_run(modes[m], 1, sh, vals, fn_softmax, &causal, y, NULL),
		             AMP_OK);
		int zeros_ok = 1, finite = 1;
		double worst = 0;
		for (int r = 0; r < 12; r++) {
			int i = r % 6;
			double s = 0;
			for (int j = 0; j < 6; j++) {
				finite &= isfinite(y[r * 6 + j]) != 0;
				if (j > i)
					zeros_ok &= y[r * 6 + j] == 0.0f;
				s += (double)y[r * 6 + j];
			}
			worst = fmax(worst, fabs(s - 1.0));
		}
		cr_log_info(
		    "Softmax causal %s: excluded entries exactly 0: %s; max |row sum - 1| %.3g",
		    modes[m], zeros_ok ? "yes" : "NO", worst);
		cr_expect(zeros_ok && finite, "%s: causal entries not exactly 0 or not finite",
		          modes[m]);
		cr_expect(worst <= (m ? 5e-3 : 1e-6), "%s row sums off by %.3g", modes[m], worst);
	}
	check_grad("Softmax causal", 1, sh, vals, fn_softmax, &causal, 1e-2f, 36, 1e-3);

	/* Causal needs (...,T,T). */
	fixture f;
	amp_shape bad[1] = {amp_shape2(4, 6)};
	fx_open(&f, "force_fp32", 1, bad, vals);
	cr_expect_eq(amp_softmax(f.ctx, "attn", f.in[0], 1, &f.out), AMP_ESHAPE);
	cr_expect(strstr(amp_ctx_error(f.ctx), "Softmax 'attn'"), "message: %s",
	          amp_ctx_error(f.ctx));
	amp_ctx_free(f.ctx);
	free(x), free(ref);
}

Test(ops_nn, log_softmax)
{
	amp_shape sh[1] = {amp_shape2(7, 11)};
	float *x = fill(77, 41, -5, 5);
	float *vals[1] = {x};
	double *ref = dalloc(77);
	softmax_ref(x, ref, 7, 11, 0, 1);
	check_fwd("LogSoftmax", 1, sh, vals, fn_log_softmax, NULL, ref, 77);
	check_grad("LogSoftmax", 1, sh, vals, fn_log_softmax, NULL, 1e-2f, 40, 1e-3);
	free(x), free(ref);
}

/* Large logits: the log-probabilities near 0 keep their precision (the row's max subtracted
 * before the log of the sum is: at 1e4 the float spacing is 1e-3), in LogSoftmax and in
 * CrossEntropy alike: absolute errors of the float sum's rounding, not of the logits' size. */
Test(ops_nn, log_softmax_and_cross_entropy_of_large_logits)
{
	const float rows[3][2] = {{10000.0f, 9990.0f}, {-10000.0f, -10000.001f}, {3e4f, 3e4f - 20}};
	for (int r = 0; r < 3; r++) {
		amp_shape sh[1] = {amp_shape2(1, 2)};
		float x[2] = {rows[r][0], rows[r][1]};
		float *vals[1] = {x};
		double d = (double)x[1] - (double)x[0];
		double lse = log1p(exp(d)); /* log(1 + e^(x1 - x0)), relative to x0 */
		double want[2] = {-lse, d - lse};
		float y[2];
		int64_t ny;
		cr_assert_eq(opcheck_run("force_fp32", 1, sh, vals, fn_log_softmax, NULL, y, &ny),
		             AMP_OK);
		for (int j = 0; j < 2; j++)
			cr_expect(fabs((double)y[j] - want[j]) <= 1e-6 * fmax(1.0, fabs(want[j])) + 1e-9,
			          "LogSoftmax row %d [%d]: %.9g, want %.9g", r, j, (double)y[j], want[j]);
		int32_t t[1] = {0};
		int_arg arg = {t, amp_shape1(1)};
		float ce;
		cr_assert_eq(opcheck_run("force_fp32", 1, sh, vals, fn_cross_entropy, &arg, &ce, &ny),
		             AMP_OK);
		/* within a float's rounding of the sum near 1 (it was 4.5e-5 off: exactly 0) */
		cr_expect(fabs((double)ce - lse) <= 1e-7, "CrossEntropy row %d: %.9g, want %.9g", r,
		          (double)ce, lse);
	}
}

/* ---- LayerNorm --------------------------------------------------------------------------- */

Test(ops_nn, layer_norm)
{
	int64_t rows = 10, c = 16;
	amp_shape sh[3] = {amp_shape3(2, 5, 16), amp_shape1(16), amp_shape1(16)};
	float *x = fill(rows * c, 51, -2, 2), *gm = fill(c, 52, 0.5f, 1.5f),
	      *bt = fill(c, 53, -1, 1);
	for (int64_t i = 0; i < c; i++) /* a row far from zero mean */
		x[i] += 30.0f;
	float *vals[3] = {x, gm, bt};
	float eps = 1e-5f;
	double *ref = dalloc(rows * c), *mean = dalloc(rows), *rstd = dalloc(rows);
	for (int64_t r = 0; r < rows; r++) {
		double s = 0, v = 0;
		for (int64_t j = 0; j < c; j++)
			s += (double)x[r * c + j];
		mean[r] = s / (double)c;
		for (int64_t j = 0; j < c; j++)
			v += ((double)x[r * c + j] - mean[r]) * ((double)x[r * c + j] - mean[r]);
		rstd[r] = 1.0 / sqrt(v / (double)c + (double)eps);
		for (int64_t j = 0; j < c; j++)
			ref[r * c + j] =
			    ((double)x[r * c + j] - mean[r]) * rstd[r] * (double)gm[j] +
			    (double)bt[j];
	}
	/* fp16 rounds the input of the shifted row to 2^-6; compare fp16 on unshifted rows. */
	double e32 =
	    fwd_err("force_fp32", 3, sh, vals, fn_layer_norm, &eps, ref, rows * c, AMP_F32);
	cr_log_info("LayerNorm forward (one row at mean 30): fp32 max rel err %.3g (tol %g)", e32,
	            TOL_F32);
	cr_expect(e32 <= TOL_F32);

	/* mean and rstd saved on the node */
	fixture f;
	fx_open(&f, "force_fp32", 3, sh, vals);
	cr_assert_eq(amp_layer_norm(f.ctx, "ln", f.in[0], f.in[1], f.in[2], eps, &f.out), AMP_OK);
	cr_assert_not_null(f.out->node);
	const float *stats = f.out->node->saved;
	cr_assert_not_null(stats);
	double serr = 0;
	for (int64_t r = 0; r < rows; r++) {
		serr = fmax(serr, fabs((double)stats[2 * r] - mean[r]) / fmax(1.0, fabs(mean[r])));
		serr = fmax(serr, fabs((double)stats[2 * r + 1] - rstd[r]) / rstd[r]);
	}
	cr_log_info("LayerNorm saved mean/rstd: max rel err %.3g (tol 1e-6)", serr);
	cr_expect(serr <= 1e-6);
	amp_ctx_free(f.ctx);

	for (int64_t i = 0; i < c; i++)
		x[i] -= 30.0f;
	{ /* row 0's reference again, from the unshifted values */
		double s = 0, v = 0;
		for (int64_t j = 0; j < c; j++)
			s += (double)x[j];
		double m0 = s / (double)c;
		for (int64_t j = 0; j < c; j++)
			v += ((double)x[j] - m0) * ((double)x[j] - m0);
		double r0 = 1.0 / sqrt(v / (double)c + (double)eps);
		for (int64_t j = 0; j < c; j++)
			ref[j] = ((double)x[j] - m0) * r0 * (double)gm[j] + (double)bt[j];
	}
	check_fwd("LayerNorm", 3, sh, vals, fn_layer_norm, &eps, ref, rows * c);
	check_grad("LayerNorm", 3, sh, vals, fn_layer_norm, &eps, 1e-2f, 24, 2e-3);

	amp_shape bad[3] = {amp_shape2(4, 16), amp_shape1(16), amp_shape1(15)};
	fx_open(&f, "force_fp32", 3, bad, vals);
	cr_expect_eq(amp_layer_norm(f.ctx, "ln1", f.in[0], f.in[1], f.in[2], eps, &f.out),
	             AMP_ESHAPE);
	cr_expect(strstr(amp_ctx_error(f.ctx), "LayerNorm 'ln1'") &&
	              strstr(amp_ctx_error(f.ctx), "(15)"),
	          "message: %s", amp_ctx_error(f.ctx));
	amp_ctx_free(f.ctx);
	free(x), free(gm), free(bt), free(ref), free(mean), free(rstd);
}

/* ---- CrossEntropy ------------------------------------------------------------------------ */

Test(ops_nn, cross_entropy_hand_case)
{
	/* rows (1,2,3) target 2 and (1,1,1) target 0:
	 * loss = (log(e + e^2 + e^3) - 3 + log 3) / 2 = (0.40760596444 + 1.09861228867) / 2 */
	float logits[6] = {1, 2, 3, 1, 1, 1};
	int32_t t[2] = {2, 0};
	int_arg arg = {t, amp_shape1(2)};
	amp_shape sh[1] = {amp_shape2(2, 3)};
	float *vals[1] = {logits};
	double want = 0.75310912655;
	const char *modes[3] = {"force_fp32", "allow_mix_precision", "force_fp16"};
	for (int m = 0; m < 3; m++) {
		float y;
		int64_t ny;
		cr_assert_eq(opcheck_run(modes[m], 1, sh, vals, fn_cross_entropy, &arg, &y, &ny),
		             AMP_OK);
		cr_expect_eq(ny, 1);
		double e = fabs((double)y - want) / want;
		cr_log_info("CrossEntropy hand case %s: %.9g vs %.9g (rel err %.3g)", modes[m],
		            (double)y, want, e);
		cr_expect(e <= (m == 2 ? 1e-3 : 1e-6), "%s: %.9g", modes[m], (double)y);
	}

	/* Gradient by hand: (softmax - onehot) / N. */
	fixture f;
	fx_open(&f, "force_fp32", 1, sh, vals);
	cr_assert_eq(fn_cross_entropy(f.ctx, f.in, &f.out, &arg), AMP_OK);
	cr_assert_eq(f.out->shape.ndim, 0);
	float one = 1.0f;
	cr_assert_eq(amp_backward_seeded(f.ctx, f.out, &one), AMP_OK);
	const float *g = f.in[0]->grad->data;
	double s = exp(1.0) + exp(2.0) + exp(3.0);
	double gw[6] = {exp(1.0) / s / 2,  exp(2.0) / s / 2, (exp(3.0) / s - 1) / 2,
	                (1.0 / 3 - 1) / 2, 1.0 / 6,          1.0 / 6};
	double worst = 0;
	for (int i = 0; i < 6; i++)
		worst = fmax(worst, fabs((double)g[i] - gw[i]));
	cr_log_info("CrossEntropy hand gradient: max abs err %.3g (tol 1e-7)", worst);
	cr_expect(worst <= 1e-7);
	amp_ctx_free(f.ctx);
}

Test(ops_nn, cross_entropy)
{
	int64_t n = 8, c = 10;
	amp_shape sh[1] = {amp_shape2(8, 10)};
	float *x = fill(n * c, 61, -4, 4);
	int32_t t[8] = {0, 9, 3, 3, 7, 1, 5, 2};
	int_arg arg = {t, amp_shape1(8)};
	float *vals[1] = {x};
	double ref = 0;
	for (int64_t r = 0; r < n; r++) {
		double m = -INFINITY, s = 0;
		for (int64_t j = 0; j < c; j++)
			m = fmax(m, (double)x[r * c + j]);
		for (int64_t j = 0; j < c; j++)
			s += exp((double)x[r * c + j] - m);
		ref += m + log(s) - (double)x[r * c + t[r]];
	}
	ref /= (double)n;
	check_fwd("CrossEntropy", 1, sh, vals, fn_cross_entropy, &arg, &ref, 1);
	check_grad("CrossEntropy", 1, sh, vals, fn_cross_entropy, &arg, 1e-2f, 40, 1e-3);

	/* Stable for logits near the fp16 limit: computed in fp32 with the max subtracted. */
	for (int64_t i = 0; i < n * c; i++)
		x[i] = x[i] * 100.0f + 30000.0f;
	float y;
	cr_assert_eq(opcheck_run("force_fp16", 1, sh, vals, fn_cross_entropy, &arg, &y, NULL),
	             AMP_OK);
	cr_log_info("CrossEntropy with logits ~3e4 in force_fp16: %g (finite)", (double)y);
	cr_expect(isfinite(y) && y >= 0);
	free(x);
}

Test(ops_nn, cross_entropy_errors)
{
	float logits[6] = {1, 2, 3, 1, 1, 1};
	amp_shape sh[1] = {amp_shape2(2, 3)};
	float *vals[1] = {logits};
	int32_t bad[2] = {1, 3};
	int32_t neg[2] = {-1, 0};
	int_arg a1 = {bad, amp_shape1(2)}, a2 = {neg, amp_shape1(2)}, a3 = {bad, amp_shape1(1)};
	fixture f;
	fx_open(&f, "force_fp32", 1, sh, vals);
	cr_expect_eq(fn_cross_entropy(f.ctx, f.in, &f.out, &a1), AMP_EINVAL);
	cr_log_info("out-of-range target: %s", amp_ctx_error(f.ctx));
	cr_expect(strstr(amp_ctx_error(f.ctx), "CrossEntropy 'loss'") &&
	              strstr(amp_ctx_error(f.ctx), "target 3") &&
	              strstr(amp_ctx_error(f.ctx), "[0,3)"),
	          "message: %s", amp_ctx_error(f.ctx));
	cr_expect_eq(fn_cross_entropy(f.ctx, f.in, &f.out, &a2), AMP_EINVAL);
	cr_expect(strstr(amp_ctx_error(f.ctx), "target -1"), "message: %s", amp_ctx_error(f.ctx));
	cr_expect_eq(fn_cross_entropy(f.ctx, f.in, &f.out, &a3), AMP_ESHAPE);
	/* float targets are refused; NULL targets too */
	amp_tensor *ft;
	cr_assert_eq(amp_tensor_from_f32(f.ctx, logits, amp_shape1(2), AMP_F32, &ft), AMP_OK);
	cr_expect_eq(amp_cross_entropy(f.ctx, "loss", f.in[0], ft, &f.out), AMP_EDTYPE);
	cr_expect_eq(amp_cross_entropy(f.ctx, "loss", f.in[0], NULL, &f.out), AMP_EINVAL);
	/* int32 logits are refused by amp_op_begin */
	amp_tensor *it;
	cr_assert_eq(amp_tensor_from_i32(f.ctx, bad, amp_shape2(1, 2), &it), AMP_OK);
	cr_expect_eq(amp_cross_entropy(f.ctx, "loss", it, it, &f.out), AMP_EDTYPE);
	amp_ctx_free(f.ctx);
}

/* ---- Sum and Mean ------------------------------------------------------------------------ */

Test(ops_nn, sum_mean)
{
	amp_shape sh[1] = {amp_shape3(3, 7, 5)};
	float *x = fill(105, 71, -2, 3);
	float *vals[1] = {x};
	double s = 0;
	for (int i = 0; i < 105; i++)
		s += (double)x[i];
	double m = s / 105;
	check_fwd("Sum", 1, sh, vals, fn_sum, NULL, &s, 1);
	check_fwd("Mean", 1, sh, vals, fn_mean, NULL, &m, 1);
	check_grad("Sum", 1, sh, vals, fn_sum, NULL, 1e-2f, 20, 1e-3);
	check_grad("Mean", 1, sh, vals, fn_mean, NULL, 1e-2f, 20, 1e-3);
	free(x);

	/* 2^20 values of 0.1f: a naive fp32 loop drifts by ~1e-2 relative; double does not. */
	int64_t n = 1 << 20;
	float *big = malloc((size_t)n * sizeof(float));
	cr_assert_not_null(big);
	for (int64_t i = 0; i < n; i++)
		big[i] = 0.1f;
	amp_shape bs[1] = {amp_shape1(n)};
	float *bv[1] = {big};
	double want = (double)0.1f * (double)n, wm = (double)0.1f;
	double e1 = fwd_err("force_fp32", 1, bs, bv, fn_sum, NULL, &want, 1, AMP_F32);
	double e2 = fwd_err("force_fp32", 1, bs, bv, fn_mean, NULL, &wm, 1, AMP_F32);
	cr_log_info("Sum/Mean of 2^20 x 0.1f: rel err %.3g / %.3g (tol 1e-7)", e1, e2);
	cr_expect(e1 <= 1e-7 && e2 <= 1e-7);
	free(big);
}

/* ---- Reshape ----------------------------------------------------------------------------- */

Test(ops_nn, reshape)
{
	amp_shape sh[1] = {amp_shape3(2, 3, 4)};
	float *x = fill(24, 81, -1, 1);
	float *vals[1] = {x};
	amp_shape ns = amp_shape2(6, 4);
	double ref[24];
	for (int i = 0; i < 24; i++)
		ref[i] = (double)x[i];
	double e32 = fwd_err("force_fp32", 1, sh, vals, fn_reshape, &ns, ref, 24, AMP_F32);
	cr_expect(e32 == 0, "reshape changed values (%.3g)", e32);
	check_grad("Reshape", 1, sh, vals, fn_reshape, &ns, 1e-2f, 24, 1e-3);

	/* An alias: same storage, new shape, no copy; the grad comes back in x's shape. */
	fixture f;
	fx_open(&f, "force_fp32", 1, sh, vals);
	cr_assert_eq(amp_reshape(f.ctx, "view", f.in[0], ns, &f.out), AMP_OK);
	cr_expect_eq(f.out->data, f.in[0]->data);
	cr_expect(amp_shape_eq(f.out->shape, ns));
	amp_tensor *s;
	cr_assert_eq(amp_sum(f.ctx, "s", f.out, &s), AMP_OK);
	float one = 1.0f;
	cr_assert_eq(amp_backward_seeded(f.ctx, s, &one), AMP_OK);
	cr_assert_not_null(f.in[0]->grad);
	cr_expect(amp_shape_eq(f.in[0]->grad->shape, sh[0]));
	cr_expect_eq(((float *)f.in[0]->grad->data)[23], 1.0f);
	/* Bad shapes */
	cr_expect_eq(amp_reshape(f.ctx, "view", f.in[0], amp_shape2(5, 5), &f.out), AMP_ESHAPE);
	cr_expect(strstr(amp_ctx_error(f.ctx), "Reshape 'view'") &&
	              strstr(amp_ctx_error(f.ctx), "(2,3,4)") &&
	              strstr(amp_ctx_error(f.ctx), "(5,5)"),
	          "message: %s", amp_ctx_error(f.ctx));
	cr_expect_eq(amp_reshape(f.ctx, "view", f.in[0], amp_shape2(-4, -6), &f.out), AMP_ESHAPE);
	/* extents whose product wraps around to 24 */
	cr_expect_eq(amp_reshape(f.ctx, "view", f.in[0], amp_shape2(((int64_t)1 << 62) + 6, 4),
	                         &f.out),
	             AMP_ESHAPE);
	amp_ctx_free(f.ctx);

	/* In inference the alias of a parameter carries no gradient state. */
	fx_open(&f, "force_fp32", 1, sh, vals);
	amp_set_training(f.ctx, 0);
	cr_assert_eq(amp_reshape(f.ctx, "view", f.in[0], ns, &f.out), AMP_OK);
	cr_expect(!f.out->requires_grad && !f.out->node);
	amp_ctx_free(f.ctx);
	free(x);
}

/* ---- Transpose --------------------------------------------------------------------------- */

Test(ops_nn, transpose)
{
	amp_shape s4 = amp_shape4(2, 3, 4, 5);
	float *x = fill(120, 91, -1, 1);
	for (int i = 0; i < 120; i++) /* exactly representable in fp16: the copy must be exact */
		x[i] = roundf(x[i] * 1024.0f) / 1024.0f;
	float *vals[1] = {x};
	amp_shape sh[1] = {s4};
	double ref[120];
	int pairs = 0;
	double worst = 0;
	for (int a = 0; a < 4; a++)
		for (int b = 0; b < 4; b++) {
			int d[2] = {a, b};
			int64_t dims[4] = {2, 3, 4, 5}, od[4] = {2, 3, 4, 5};
			od[a] = dims[b];
			od[b] = dims[a];
			for (int64_t i0 = 0; i0 < od[0]; i0++)
				for (int64_t i1 = 0; i1 < od[1]; i1++)
					for (int64_t i2 = 0; i2 < od[2]; i2++)
						for (int64_t i3 = 0; i3 < od[3]; i3++) {
							int64_t o[4] = {i0, i1, i2, i3},
							        src[4] = {i0, i1, i2, i3};
							src[a] = o[b];
							src[b] = o[a];
							int64_t si =
							    ((src[0] * 3 + src[1]) * 4 + src[2]) *
							        5 +
							    src[3];
							int64_t oi =
							    ((i0 * od[1] + i1) * od[2] + i2) *
							        od[3] +
							    i3;
							ref[oi] = (double)x[si];
						}
			worst = fmax(worst, fwd_err("force_fp32", 1, sh, vals, fn_transpose, d, ref,
			                            120, AMP_F32));
			worst = fmax(worst, fwd_err("force_fp16", 1, sh, vals, fn_transpose, d, ref,
			                            120, AMP_F16));
			pairs++;
		}
	cr_log_info("Transpose: %d dim pairs of (2,3,4,5), fp32 and fp16, max err %.3g (exact)",
	            pairs, worst);
	cr_expect(worst == 0);

	/* Output shape, lower ranks, gradient. */
	fixture f;
	fx_open(&f, "force_fp32", 1, sh, vals);
	cr_assert_eq(amp_transpose(f.ctx, "tr", f.in[0], 1, 3, &f.out), AMP_OK);
	cr_expect(amp_shape_eq(f.out->shape, amp_shape4(2, 5, 4, 3)));
	cr_expect_eq(amp_transpose(f.ctx, "tr", f.in[0], 0, 4, &f.out), AMP_EINVAL);
	cr_expect(strstr(amp_ctx_error(f.ctx), "Transpose 'tr'"), "message: %s",
	          amp_ctx_error(f.ctx));
	amp_ctx_free(f.ctx);
	int d13[2] = {1, 3}, d01[2] = {0, 1};
	check_grad("Transpose (1,3) of 4-D", 1, sh, vals, fn_transpose, d13, 1e-2f, 30, 1e-3);
	amp_shape s2[1] = {amp_shape2(6, 7)};
	check_grad("Transpose of 2-D", 1, s2, vals, fn_transpose, d01, 1e-2f, 30, 1e-3);
	free(x);
}

/* ---- Embedding --------------------------------------------------------------------------- */

Test(ops_nn, embedding)
{
	int64_t v = 7, c = 5;
	amp_shape sh[1] = {amp_shape2(7, 5)};
	float *tab = fill(v * c, 101, -1, 1);
	float *vals[1] = {tab};
	int32_t ids[6] = {3, 0, 6, 3, 3, 1}; /* repeats: the backward must add them up */
	int_arg arg = {ids, amp_shape2(2, 3)};
	double ref[30];
	for (int k = 0; k < 6; k++)
		for (int64_t j = 0; j < c; j++)
			ref[k * c + j] = (double)tab[ids[k] * c + j];
	check_fwd("Embedding", 1, sh, vals, fn_embedding, &arg, ref, 30);
	check_grad("Embedding", 1, sh, vals, fn_embedding, &arg, 1e-2f, 35, 1e-3);

	fixture f;
	fx_open(&f, "force_fp32", 1, sh, vals);
	cr_assert_eq(fn_embedding(f.ctx, f.in, &f.out, &arg), AMP_OK);
	cr_expect(amp_shape_eq(f.out->shape, amp_shape3(2, 3, 5)));
	amp_tensor *s;
	cr_assert_eq(amp_sum(f.ctx, "s", f.out, &s), AMP_OK);
	float one = 1.0f;
	cr_assert_eq(amp_backward_seeded(f.ctx, s, &one), AMP_OK);
	const float *g = f.in[0]->grad->data;
	cr_expect(g[3 * c] == 3.0f && g[0] == 1.0f && g[2 * c] == 0.0f && g[6 * c + 4] == 1.0f,
	          "scatter-add counts: row3 %g row0 %g row2 %g row6 %g", (double)g[3 * c],
	          (double)g[0], (double)g[2 * c], (double)g[6 * c + 4]);

	int32_t bad[3] = {0, 7, 1};
	int_arg barg = {bad, amp_shape1(3)};
	cr_expect_eq(fn_embedding(f.ctx, f.in, &f.out, &barg), AMP_EINVAL);
	cr_log_info("out-of-range id: %s", amp_ctx_error(f.ctx));
	cr_expect(strstr(amp_ctx_error(f.ctx), "Embedding 'emb'") &&
	              strstr(amp_ctx_error(f.ctx), "id 7") && strstr(amp_ctx_error(f.ctx), "[0,7)"),
	          "message: %s", amp_ctx_error(f.ctx));
	bad[1] = -2;
	cr_expect_eq(fn_embedding(f.ctx, f.in, &f.out, &barg), AMP_EINVAL);
	amp_tensor *fl;
	cr_assert_eq(amp_tensor_from_f32(f.ctx, tab, amp_shape1(3), AMP_F32, &fl), AMP_OK);
	cr_expect_eq(amp_embedding(f.ctx, "emb", f.in[0], fl, &f.out), AMP_EDTYPE);
	cr_expect_eq(amp_embedding(f.ctx, "emb", f.in[0], NULL, &f.out), AMP_EINVAL);
	amp_ctx_free(f.ctx);
	free(tab);
}

/* ---- Dropout ----------------------------------------------------------------------------- */

/* Runs dropout(p) on ones(n) in a fresh context with the given seed; y receives the output. */
static void dropout_ones(const char *seed, float p, int training, float *y, int64_t n,
                         amp_dtype *dt)
{
	amp_ctx *ctx = opcheck_ctx("force_fp32");
	cr_assert_not_null(ctx);
	cr_assert_eq(amp_config_set(ctx, "seed", seed), AMP_OK);
	amp_set_training(ctx, training);
	float *ones = malloc((size_t)n * sizeof(float));
	cr_assert_not_null(ones);
	for (int64_t i = 0; i < n; i++)
		ones[i] = 1.0f;
	amp_tensor *x, *out;
	cr_assert_eq(amp_step_begin(ctx), AMP_OK);
	cr_assert_eq(amp_tensor_from_f32(ctx, ones, amp_shape1(n), AMP_F32, &x), AMP_OK);
	cr_assert_eq(amp_dropout(ctx, "drop", x, p, &out), AMP_OK, "%s", amp_ctx_error(ctx));
	cr_assert_eq(amp_tensor_read_f32(ctx, out, y), AMP_OK);
	if (dt)
		*dt = out->dtype;
	free(ones);
	amp_ctx_free(ctx);
}

Test(ops_nn, dropout)
{
	enum { N = 20000 };
	static float a[N], b[N], c[N];
	float p = 0.3f, scale = 1.0f / (1.0f - p);
	dropout_ones("7", p, 1, a, N, NULL);
	dropout_ones("7", p, 1, b, N, NULL);
	dropout_ones("8", p, 1, c, N, NULL);
	cr_expect(memcmp(a, b, sizeof a) == 0, "same seed must give the same mask");
	cr_expect(memcmp(a, c, sizeof a) != 0, "another seed should give another mask");
	int64_t kept = 0, odd = 0;
	for (int i = 0; i < N; i++) {
		kept += a[i] != 0.0f;
		odd += a[i] != 0.0f && a[i] != scale;
	}
	double frac = (double)kept / N;
	cr_log_info("Dropout p=0.3 on %d ones: kept %.4f (expect 0.7 +- 0.015), kept values all "
	            "1/(1-p) = %.7g: %s",
	            N, frac, (double)scale, odd ? "NO" : "yes");
	cr_expect(odd == 0);
	cr_expect(fabs(frac - 0.7) <= 0.015);

	/* Not training, or p == 0: identity. */
	dropout_ones("7", p, 0, c, N, NULL);
	int same = 1;
	for (int i = 0; i < N; i++)
		same &= c[i] == 1.0f;
	cr_expect(same, "inference dropout must be the identity");
	dropout_ones("7", 0.0f, 1, c, N, NULL);
	for (int i = 0; i < N; i++)
		same &= c[i] == 1.0f;
	cr_expect(same, "p = 0 must be the identity");

	/* Gradient: g * mask / (1 - p).  Each opcheck run uses the default seed, so the mask is
	 * the same in every evaluation. */
	amp_shape sh[1] = {amp_shape2(6, 9)};
	float *x = fill(54, 111, -2, 2);
	float *vals[1] = {x};
	check_grad("Dropout", 1, sh, vals, fn_dropout, &p, 1e-2f, 54, 1e-3);
	float zero = 0.0f;
	check_grad("Dropout p=0", 1, sh, vals, fn_dropout, &zero, 1e-2f, 20, 1e-3);

	/* p outside [0,1) */
	fixture f;
	fx_open(&f, "force_fp32", 1, sh, vals);
	float badp[3] = {1.0f, -0.1f, NAN};
	for (int i = 0; i < 3; i++) {
		cr_expect_eq(amp_dropout(f.ctx, "drop", f.in[0], badp[i], &f.out), AMP_EINVAL);
		cr_expect(strstr(amp_ctx_error(f.ctx), "Dropout 'drop'"), "message: %s",
		          amp_ctx_error(f.ctx));
	}
	/* fp16 path: kept values are x / (1 - p) within fp16 rounding. */
	amp_ctx_free(f.ctx);
	fx_open(&f, "force_fp16", 1, sh, vals);
	cr_assert_eq(amp_dropout(f.ctx, "drop", f.in[0], p, &f.out), AMP_OK);
	cr_expect_eq(f.out->dtype, AMP_F16);
	float y[54];
	cr_assert_eq(amp_tensor_read_f32(f.ctx, f.out, y), AMP_OK);
	double worst = 0;
	for (int i = 0; i < 54; i++)
		if (y[i] != 0.0f)
			worst = fmax(worst, fabs((double)y[i] - (double)x[i] / 0.7) / 2.0 / 0.7);
	cr_log_info("Dropout fp16: kept values max err/scale %.3g (tol %g)", worst, TOL_F16);
	cr_expect(worst <= TOL_F16);
	amp_ctx_free(f.ctx);
	free(x);
}

/* ---- misc -------------------------------------------------------------------------------- */

Test(ops_nn, no_step_and_null)
{
	amp_ctx *ctx = opcheck_ctx("force_fp32");
	amp_tensor *y = NULL;
	cr_expect_eq(amp_relu(ctx, "r", NULL, &y), AMP_ESTATE);
	cr_assert_eq(amp_step_begin(ctx), AMP_OK);
	cr_expect_eq(amp_relu(ctx, "r", NULL, &y), AMP_EINVAL);
	cr_expect(strstr(amp_ctx_error(ctx), "ReLU 'r'"), "message: %s", amp_ctx_error(ctx));
	cr_expect_eq(amp_softmax(ctx, NULL, NULL, 0, &y), AMP_EINVAL);
	cr_expect_eq(amp_embedding(ctx, "e", NULL, NULL, &y), AMP_EINVAL);
	amp_ctx_free(ctx);
}

/* Mixed precision: gray ops follow fp16 activations; black ones run in fp32. */
Test(ops_nn, policy_dtypes)
{
	amp_ctx *ctx = opcheck_ctx("allow_mix_precision");
	float v[8] = {0.5f, 1, 1.5f, 2, 2.5f, 3, 3.5f, 4};
	amp_tensor *h, *y;
	cr_assert_eq(amp_step_begin(ctx), AMP_OK);
	cr_assert_eq(amp_tensor_from_f32(ctx, v, amp_shape2(2, 4), AMP_F16, &h), AMP_OK);
	cr_assert_eq(amp_relu(ctx, "r", h, &y), AMP_OK);
	cr_expect_eq(y->dtype, AMP_F16, "ReLU (gray) on fp16 runs in fp16");
	cr_assert_eq(amp_gelu(ctx, "g", h, &y), AMP_OK);
	cr_expect_eq(y->dtype, AMP_F16);
	cr_assert_eq(amp_transpose(ctx, "t", h, 0, 1, &y), AMP_OK);
	cr_expect_eq(y->dtype, AMP_F16);
	cr_assert_eq(amp_softmax(ctx, "s", h, 0, &y), AMP_OK);
	cr_expect_eq(y->dtype, AMP_F32, "Softmax (black) runs in fp32");
	cr_assert_eq(amp_layer_norm(ctx, "ln", h, NULL, NULL, 1e-5f, &y), AMP_EINVAL);
	cr_assert_eq(amp_sum(ctx, "sum", h, &y), AMP_OK);
	cr_expect_eq(y->dtype, AMP_F32);
	cr_expect_float_eq(amp_tensor_item(ctx, y), 18.0, 1e-12);
	amp_ctx_free(ctx);
}

/* ---- backward through fp16 ----------------------------------------------------------------
 * The same gradients computed in force_fp16 (fp16 activations and activation grads, fp32
 * masters) against force_fp32: |g16 - g32| / max|g32| <= 1e-2 per input. */

typedef struct bwd_case {
	const char *name;
	opcheck_fn fn;
	void *arg;
	int n;
	amp_shape shapes[3];
	float lo, hi;
} bwd_case;

Test(ops_nn, backward_fp16)
{
	static unary_op relu = amp_relu, gelu = amp_gelu, lg = amp_log, ex = amp_exp, sq = amp_sqrt;
	static float e = 2.5f, eps = 1e-5f, p = 0.25f;
	static int causal = 1, plain = 0, d12[2] = {1, 2};
	static amp_shape view;
	static const int32_t ids[6] = {2, 0, 2, 5, 1, 2}, tg[6] = {1, 4, 0, 4, 2, 3};
	static int_arg ids_arg = {ids, {2, {2, 3, 0, 0}}}, tg_arg = {tg, {1, {6, 0, 0, 0}}};
	view = amp_shape2(12, 4);
	const bwd_case cases[] = {
	    {"BiasAdd", fn_bias_add, NULL, 2, {amp_shape2(6, 8), amp_shape1(8)}, -2, 2},
	    {"ReLU", fn_unary, &relu, 1, {amp_shape2(6, 8)}, -2, 2},
	    {"GELU", fn_unary, &gelu, 1, {amp_shape2(6, 8)}, -3, 3},
	    {"Log", fn_unary, &lg, 1, {amp_shape2(6, 8)}, 0.5f, 3},
	    {"Exp", fn_unary, &ex, 1, {amp_shape2(6, 8)}, -2, 2},
	    {"Sqrt", fn_unary, &sq, 1, {amp_shape2(6, 8)}, 0.5f, 3},
	    {"Pow", fn_pow, &e, 1, {amp_shape2(6, 8)}, 0.5f, 2},
	    {"Softmax", fn_softmax, &plain, 1, {amp_shape2(6, 8)}, -3, 3},
	    {"Softmax causal", fn_softmax, &causal, 1, {amp_shape3(2, 5, 5)}, -3, 3},
	    {"LogSoftmax", fn_log_softmax, NULL, 1, {amp_shape2(6, 8)}, -3, 3},
	    {"LayerNorm",
	     fn_layer_norm,
	     &eps,
	     3,
	     {amp_shape2(6, 8), amp_shape1(8), amp_shape1(8)},
	     0.5f,
	     2},
	    {"CrossEntropy", fn_cross_entropy, &tg_arg, 1, {amp_shape2(6, 5)}, -3, 3},
	    {"Sum", fn_sum, NULL, 1, {amp_shape2(6, 8)}, -2, 2},
	    {"Mean", fn_mean, NULL, 1, {amp_shape2(6, 8)}, -2, 2},
	    {"Reshape", fn_reshape, &view, 1, {amp_shape3(2, 6, 4)}, -2, 2},
	    {"Transpose", fn_transpose, d12, 1, {amp_shape3(2, 3, 4)}, -2, 2},
	    {"Embedding", fn_embedding, &ids_arg, 1, {amp_shape2(6, 4)}, -2, 2},
	    {"Dropout", fn_dropout, &p, 1, {amp_shape2(6, 8)}, -2, 2},
	};
	double worst_all = 0;
	for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
		const bwd_case *bc = &cases[k];
		float *vals[3] = {0}, *g32[3] = {0}, *g16[3] = {0};
		for (int i = 0; i < bc->n; i++)
			vals[i] = fill(amp_shape_numel(bc->shapes[i]), 200 + 10 * k + (size_t)i,
			               bc->lo, bc->hi);
		if (bc->fn == fn_unary && bc->arg == &relu)
			for (int64_t i = 0; i < 48; i++)
				if (fabsf(vals[0][i]) < 0.01f)
					vals[0][i] = 0.01f;
		grads_in_mode("force_fp32", bc->n, bc->shapes, vals, bc->fn, bc->arg, g32);
		grads_in_mode("force_fp16", bc->n, bc->shapes, vals, bc->fn, bc->arg, g16);
		double worst = 0;
		for (int i = 0; i < bc->n; i++) {
			int64_t cnt = amp_shape_numel(bc->shapes[i]);
			double scale = 0, d = 0;
			for (int64_t j = 0; j < cnt; j++)
				scale = fmax(scale, fabs((double)g32[i][j]));
			for (int64_t j = 0; j < cnt; j++)
				d = fmax(d, fabs((double)g16[i][j] - (double)g32[i][j]));
			double err = d / fmax(scale, 1e-30);
			if (!(err <= worst))
				worst = err;
			free(vals[i]), free(g32[i]), free(g16[i]);
		}
		cr_expect(worst <= TOL_F16, "%s: fp16 backward err/scale %.3g", bc->name, worst);
		if (!(worst <= worst_all))
			worst_all = worst;
	}
	cr_log_info("backward in force_fp16 vs force_fp32, %zu ops: max err/scale %.3g (tol %g)",
	            sizeof cases / sizeof *cases, worst_all, TOL_F16);
}

/* A tensor used by two pointwise ops gets the sum of both gradients: the second backward adds
 * block by block into the gradient the first wrote, in every dtype.  5000 elements span three
 * blocks, the last one partial. */
Test(ops_nn, pointwise_gradients_accumulate_blockwise)
{
	static const char *const modes[] = {"force_fp32", "force_fp16", "force_bf16"};
	enum { N = 5000 };
	static float xv[N], seed[N], g1[N], g2[N];
	opcheck_fill(xv, N, 3, -2.0f, 2.0f);
	for (int i = 0; i < N; i++)
		seed[i] = 1.0f;
	for (int m = 0; m < 3; m++) {
		for (int twice = 0; twice <= 1; twice++) {
			amp_ctx *ctx = opcheck_ctx(modes[m]);
			cr_assert_not_null(ctx);
			amp_tensor *x, *a, *b, *y;
			cr_assert_eq(amp_param_new(ctx, "x", amp_shape1(N), AMP_INIT_ZEROS, 0, &x), AMP_OK);
			cr_assert_eq(amp_param_load(ctx, x, xv), AMP_OK);
			cr_assert_eq(amp_step_begin(ctx), AMP_OK);
			cr_assert_eq(amp_gelu(ctx, "g", x, &a), AMP_OK, "%s", amp_ctx_error(ctx));
			y = a;
			if (twice) {
				cr_assert_eq(amp_gelu(ctx, "g2", x, &b), AMP_OK);
				cr_assert_eq(amp_add(ctx, "sum", a, b, &y), AMP_OK);
			}
			cr_assert_eq(amp_backward_seeded(ctx, y, seed), AMP_OK, "%s", amp_ctx_error(ctx));
			memcpy(twice ? g2 : g1, x->grad->data, sizeof g1);
			amp_ctx_free(ctx);
		}
		double worst = 0;
		for (int i = 0; i < N; i++)
			worst = fmax(worst, fabs((double)g2[i] - 2.0 * (double)g1[i]) /
			                        fmax(1.0, fabs(2.0 * (double)g1[i])));
		/* The two gradients are the same values, so their sum is exactly twice one in any
		 * dtype: a lost or doubled block shows as a difference. */
		cr_log_info("%s: two uses vs twice one use, max rel diff %.3g (exact)", modes[m], worst);
		cr_assert_eq(worst, 0.0, "%s: %.3g", modes[m], worst);
	}
}

/* ---- Add and Mul ------------------------------------------------------------------------- */

static int fn_add(amp_ctx *ctx, amp_tensor **in, amp_tensor **out, void *arg)
{
	(void)arg;
	return amp_add(ctx, "add", in[0], in[1], out);
}

static int fn_mul(amp_ctx *ctx, amp_tensor **in, amp_tensor **out, void *arg)
{
	(void)arg;
	return amp_mul(ctx, "mul", in[0], in[1], out);
}

/* a (reps, m) with b (m) broadcast, or b of a's shape: forward against FP64 in every dtype,
 * gradients by central differences; m = 2500 spans two blocks of 2048, m = 7 is a short row
 * repeated 300 times. */
Test(ops_nn, add_mul_broadcast)
{
	static const int64_t dims[][2] = {{3, 2500}, {300, 7}, {1, 5000}};
	for (size_t d = 0; d < sizeof dims / sizeof *dims; d++) {
		int64_t reps = dims[d][0], m = dims[d][1];
		for (int same = 0; same <= 1; same++) {
			amp_shape sh[2] = {amp_shape2(reps, m), same ? amp_shape2(reps, m) : amp_shape1(m)};
			int64_t na = reps * m, nb = same ? na : m;
			float *a = fill(na, 11 + d, -2.0f, 2.0f), *b = fill(nb, 17 + d, -2.0f, 2.0f);
			float *vals[2] = {a, b};
			double *ra = malloc((size_t)na * sizeof(double)), *rm = malloc((size_t)na * sizeof(double));
			cr_assert(ra && rm);
			for (int64_t i = 0; i < na; i++) {
				double bv = (double)b[same ? i : i % m];
				ra[i] = (double)a[i] + bv;
				rm[i] = (double)a[i] * bv;
			}
			char what[64];
			snprintf(what, sizeof what, "Add (%lld,%lld)%s", (long long)reps, (long long)m,
			         same ? "" : " broadcast");
			check_fwd(what, 2, sh, vals, fn_add, NULL, ra, na);
			check_grad(what, 2, sh, vals, fn_add, NULL, 1e-2f, 24, 1e-3);
			snprintf(what, sizeof what, "Mul (%lld,%lld)%s", (long long)reps, (long long)m,
			         same ? "" : " broadcast");
			check_fwd(what, 2, sh, vals, fn_mul, NULL, rm, na);
			check_grad(what, 2, sh, vals, fn_mul, NULL, 1e-2f, 24, 2e-3);
			free(a);
			free(b);
			free(ra);
			free(rm);
		}
	}
}

/* test_ops_linalg.c — MatMul, BatchMatMul, Linear, Conv2D and MaxPool2D against FP64
 * references written here: forward in FP32, FP16 and BF16, on every kernel path; backward by
 * central differences (FP32) and against FP64 gradients (FP16, BF16); shape errors; dtype
 * policy.
 *
 * Tolerances (relative to the largest |reference| value of the tensor compared):
 *   forward FP32 1e-5, forward FP16 2e-3, backward FP16 3e-3;
 *   forward BF16 2^-7 and backward BF16 1.2e-2: inputs and output rounded to 8 significant
 *   bits (2^-9 relative each) with FP32 sums, so about 2^-8 of the largest value (measured:
 *   up to 5.7e-3 forward, 5.3e-3 backward);
 *   FP32 gradient check (opcheck_grad, h = 1e-2 on inputs in [-1,1]) 2e-2.
 */
#include <criterion/criterion.h>

#include "amp_half.h"
#include "kpath.h"
#include "opcheck.h"

#define TOL_F32       1e-5
#define TOL_F16       2e-3
#define TOL_F16_GRAD  3e-3
#define TOL_BF16      0x1p-7
#define TOL_BF16_GRAD 1.2e-2
#define TOL_GRADCHECK 2e-2
#define GRAD_H        1e-2f
#define GRAD_SAMPLES  24

/* ---- test cases ----------------------------------------------------------------------------- */

typedef struct tcase tcase;
/* FP64 forward: x[i] holds input i (numel of shapes[i]), y the output (numel of yshape). */
typedef void (*ref_fn)(const tcase *c, double *const *x, double *y);

struct tcase {
	const char *name;
	opcheck_fn fn;
	ref_fn ref;
	int n; /* inputs */
	amp_shape shapes[3];
	amp_shape yshape;
	int64_t batch, M, N, K; /* GEMM ops */
	int ta, tb;
	int stride, pad, k; /* conv, pool */
	int distinct;       /* inputs must be well separated (max pool) */
};

static int fn_matmul(amp_ctx *ctx, amp_tensor **in, amp_tensor **out, void *arg)
{
	const tcase *c = arg;
	return amp_matmul(ctx, "mm", in[0], in[1], c->ta, c->tb, out);
}

static int fn_batch_matmul(amp_ctx *ctx, amp_tensor **in, amp_tensor **out, void *arg)
{
	const tcase *c = arg;
	return amp_batch_matmul(ctx, "bmm", in[0], in[1], c->ta, c->tb, out);
}

static int fn_linear(amp_ctx *ctx, amp_tensor **in, amp_tensor **out, void *arg)
{
	const tcase *c = arg;
	return amp_linear(ctx, "fc", in[0], in[1], c->n > 2 ? in[2] : NULL, out);
}

static int fn_conv2d(amp_ctx *ctx, amp_tensor **in, amp_tensor **out, void *arg)
{
	const tcase *c = arg;
	return amp_conv2d(ctx, "conv", in[0], in[1], c->n > 2 ? in[2] : NULL, c->stride, c->pad,
	                  out);
}

static int fn_maxpool2d(amp_ctx *ctx, amp_tensor **in, amp_tensor **out, void *arg)
{
	const tcase *c = arg;
	return amp_maxpool2d(ctx, "pool", in[0], c->k, c->stride, out);
}

/* a gram product: the same tensor on both sides, so its gradient is accumulated twice */
static int fn_gram(amp_ctx *ctx, amp_tensor **in, amp_tensor **out, void *arg)
{
	const tcase *c = arg;
	return amp_matmul(ctx, "gram", in[0], in[0], c->ta, c->tb, out);
}

static void ref_matmul(const tcase *c, double *const *x, double *y)
{
	int64_t M = c->M, N = c->N, K = c->K;
	for (int64_t b = 0; b < c->batch; b++) {
		const double *A = x[0] + b * M * K, *B = x[1] + b * K * N;
		for (int64_t i = 0; i < M; i++)
			for (int64_t j = 0; j < N; j++) {
				double s = 0;
				for (int64_t k = 0; k < K; k++)
					s += (c->ta ? A[k * M + i] : A[i * K + k]) *
					     (c->tb ? B[j * K + k] : B[k * N + j]);
				y[(b * M + i) * N + j] = s;
			}
	}
}

static void ref_gram(const tcase *c, double *const *x, double *y)
{
	double *xx[2] = {x[0], x[0]};
	ref_matmul(c, xx, y);
}

/* x (rows,in), w (out,in), bias (out) */
static void ref_linear(const tcase *c, double *const *x, double *y)
{
	for (int64_t r = 0; r < c->M; r++)
		for (int64_t o = 0; o < c->N; o++) {
			double s = c->n > 2 ? x[2][o] : 0;
			for (int64_t i = 0; i < c->K; i++)
				s += x[0][r * c->K + i] * x[1][o * c->K + i];
			y[r * c->N + o] = s;
		}
}

static void ref_conv2d(const tcase *c, double *const *x, double *y)
{
	const int64_t *xs = c->shapes[0].d, *ws = c->shapes[1].d, *ys = c->yshape.d;
	int64_t N = xs[0], C = xs[1], H = xs[2], W = xs[3], O = ws[0], KH = ws[2], KW = ws[3];
	int64_t OH = ys[2], OW = ys[3];
	for (int64_t n = 0; n < N; n++)
		for (int64_t o = 0; o < O; o++)
			for (int64_t oh = 0; oh < OH; oh++)
				for (int64_t ow = 0; ow < OW; ow++) {
					double s = c->n > 2 ? x[2][o] : 0;
					for (int64_t ci = 0; ci < C; ci++)
						for (int64_t kh = 0; kh < KH; kh++)
							for (int64_t kw = 0; kw < KW; kw++) {
								int64_t ih =
								    oh * c->stride - c->pad + kh;
								int64_t iw =
								    ow * c->stride - c->pad + kw;
								if (ih < 0 || ih >= H || iw < 0 ||
								    iw >= W)
									continue;
								s += x[0]
								      [((n * C + ci) * H + ih) * W +
								       iw] *
								     x[1][((o * C + ci) * KH + kh) *
								              KW +
								          kw];
							}
					y[((n * O + o) * OH + oh) * OW + ow] = s;
				}
}

static void ref_maxpool2d(const tcase *c, double *const *x, double *y)
{
	const int64_t *xs = c->shapes[0].d, *ys = c->yshape.d;
	int64_t H = xs[2], W = xs[3], OH = ys[2], OW = ys[3];
	for (int64_t p = 0; p < xs[0] * xs[1]; p++)
		for (int64_t oh = 0; oh < OH; oh++)
			for (int64_t ow = 0; ow < OW; ow++) {
				double m = -INFINITY;
				for (int i = 0; i < c->k; i++)
					for (int j = 0; j < c->k; j++)
						m = fmax(m, x[0][(p * H + oh * c->stride + i) * W +
						                 ow * c->stride + j]);
				y[(p * OH + oh) * OW + ow] = m;
			}
}

static tcase mm_case(int64_t M, int64_t N, int64_t K, int ta, int tb)
{
	tcase c = {.name = "MatMul",
	           .fn = fn_matmul,
	           .ref = ref_matmul,
	           .n = 2,
	           .batch = 1,
	           .M = M,
	           .N = N,
	           .K = K,
	           .ta = ta,
	           .tb = tb};
	c.shapes[0] = ta ? amp_shape2(K, M) : amp_shape2(M, K);
	c.shapes[1] = tb ? amp_shape2(N, K) : amp_shape2(K, N);
	c.yshape = amp_shape2(M, N);
	return c;
}

/* lead: 1 or 2 leading dims (3-D or 4-D operands) whose product is the batch */
static tcase bmm_case(int64_t b0, int64_t b1, int64_t M, int64_t N, int64_t K, int ta, int tb)
{
	tcase c = {.name = "BatchMatMul",
	           .fn = fn_batch_matmul,
	           .ref = ref_matmul,
	           .n = 2,
	           .batch = b0 * (b1 ? b1 : 1),
	           .M = M,
	           .N = N,
	           .K = K,
	           .ta = ta,
	           .tb = tb};
	int64_t ar = ta ? K : M, ac = ta ? M : K, br = tb ? N : K, bc = tb ? K : N;
	if (b1) {
		c.shapes[0] = amp_shape4(b0, b1, ar, ac);
		c.shapes[1] = amp_shape4(b0, b1, br, bc);
		c.yshape = amp_shape4(b0, b1, M, N);
	} else {
		c.shapes[0] = amp_shape3(b0, ar, ac);
		c.shapes[1] = amp_shape3(b0, br, bc);
		c.yshape = amp_shape3(b0, M, N);
	}
	return c;
}

static tcase linear_case(int64_t rows, int64_t nin, int64_t nout, int bias)
{
	tcase c = {.name = "Linear",
	           .fn = fn_linear,
	           .ref = ref_linear,
	           .n = bias ? 3 : 2,
	           .batch = 1,
	           .M = rows,
	           .N = nout,
	           .K = nin};
	c.shapes[0] = amp_shape2(rows, nin);
	c.shapes[1] = amp_shape2(nout, nin);
	c.shapes[2] = amp_shape1(nout);
	c.yshape = amp_shape2(rows, nout);
	return c;
}

static tcase conv_case(amp_shape x, amp_shape w, int bias, int stride, int pad)
{
	tcase c = {.name = "Conv2D",
	           .fn = fn_conv2d,
	           .ref = ref_conv2d,
	           .n = bias ? 3 : 2,
	           .stride = stride,
	           .pad = pad};
	c.shapes[0] = x;
	c.shapes[1] = w;
	c.shapes[2] = amp_shape1(w.d[0]);
	c.yshape = amp_shape4(x.d[0], w.d[0], (x.d[2] + 2 * pad - w.d[2]) / stride + 1,
	                      (x.d[3] + 2 * pad - w.d[3]) / stride + 1);
	return c;
}

static tcase pool_case(amp_shape x, int k, int stride)
{
	tcase c = {.name = "MaxPool2D",
	           .fn = fn_maxpool2d,
	           .ref = ref_maxpool2d,
	           .n = 1,
	           .k = k,
	           .stride = stride,
	           .distinct = 1};
	c.shapes[0] = x;
	c.yshape = amp_shape4(x.d[0], x.d[1], (x.d[2] - k) / stride + 1, (x.d[3] - k) / stride + 1);
	return c;
}

/* ---- data and runs -------------------------------------------------------------------------- */

typedef struct inputs {
	int n;
	float *f[3];
	double *d[3];
} inputs;

/* Seeded values in [-1,1]; for `distinct` cases a shuffled even grid (spacing 2/numel) so
 * that no two inputs are within a finite-difference step of each other. */
static inputs inputs_make(const tcase *c)
{
	inputs in = {.n = c->n};
	for (int i = 0; i < c->n; i++) {
		int64_t n = amp_shape_numel(c->shapes[i]);
		in.f[i] = malloc((size_t)n * sizeof(float));
		in.d[i] = malloc((size_t)n * sizeof(double));
		cr_assert(in.f[i] && in.d[i]);
		opcheck_fill(in.f[i], n, 1000 + (uint64_t)i, -1.0f, 1.0f);
		if (c->distinct) {
			uint64_t s = 7;
			for (int64_t k = 0; k < n; k++)
				in.f[i][k] = -1.0f + 2.0f * (float)k / (float)n;
			for (int64_t k = n - 1; k > 0; k--) {
				int64_t j = (int64_t)(amp_rng_next(&s) % (uint64_t)(k + 1));
				float t = in.f[i][k];
				in.f[i][k] = in.f[i][j];
				in.f[i][j] = t;
			}
		}
		for (int64_t k = 0; k < n; k++)
			in.d[i][k] = (double)in.f[i][k];
	}
	return in;
}

static void inputs_free(inputs *in)
{
	for (int i = 0; i < in->n; i++) {
		free(in->f[i]);
		free(in->d[i]);
	}
}

/* max |got - want| / max |want| over n values */
static double rel_err(const float *got, const double *want, int64_t n)
{
	double diff = 0, scale = 0;
	for (int64_t i = 0; i < n; i++) {
		diff = fmax(diff, fabs((double)got[i] - want[i]));
		scale = fmax(scale, fabs(want[i]));
	}
	return diff / fmax(scale, 1e-30);
}

/* Builds a context in mode (with kernel path kern selected after it, if not NULL) holding the
 * case's inputs as parameters, begins a step and runs the op.  The caller frees *ctxp. */
static amp_tensor *run_op(const tcase *c, const char *mode, const char *kern, inputs *vals,
                          amp_ctx **ctxp, amp_tensor **in)
{
	amp_ctx *ctx = opcheck_ctx(mode);
	cr_assert(ctx, "context for %s", mode);
	*ctxp = ctx;
	if (kern)
		cr_assert_geq(amp_kernels_select(kern), 0, "kernel path %s", kern);
	for (int i = 0; i < c->n; i++) {
		cr_assert_eq(amp_param_new(ctx, "in", c->shapes[i], AMP_INIT_ZEROS, 0, &in[i]),
		             AMP_OK);
		cr_assert_eq(amp_param_load(ctx, in[i], vals->f[i]), AMP_OK);
	}
	cr_assert_eq(amp_step_begin(ctx), AMP_OK);
	amp_tensor *out = NULL;
	int rc = c->fn(ctx, in, &out, (void *)c);
	cr_assert_eq(rc, AMP_OK, "%s in %s: %s", c->name, mode, amp_ctx_error(ctx));
	cr_assert(amp_shape_eq(amp_tensor_shape(out), c->yshape), "%s: output shape", c->name);
	return out;
}

/* Forward error of case c in mode against the FP64 reference; *dt receives the output dtype. */
static double fwd_err(const tcase *c, const char *mode, const char *kern, amp_dtype *dt)
{
	inputs vals = inputs_make(c);
	int64_t ny = amp_shape_numel(c->yshape);
	double *want = malloc((size_t)ny * sizeof(double));
	float *got = malloc((size_t)ny * sizeof(float));
	cr_assert(want && got);
	c->ref(c, vals.d, want);
	amp_ctx *ctx;
	amp_tensor *in[3];
	amp_tensor *out = run_op(c, mode, kern, &vals, &ctx, in);
	if (kern) {
		cr_assert_str_eq(amp_isa_name(amp_kernels_isa()), kern, "path %s not active", kern);
	}
	*dt = amp_tensor_dtype(out);
	cr_assert_eq(amp_tensor_read_f32(ctx, out, got), AMP_OK);
	double err = rel_err(got, want, ny);
	amp_ctx_free(ctx);
	free(want);
	free(got);
	inputs_free(&vals);
	return err;
}

/* Checks the forward of c in force_fp32 and in the FP16 modes; returns the worst FP16 error. */
static double check_forward(const tcase *c, const char *kern, double *worst32)
{
	amp_dtype dt;
	double e32 = fwd_err(c, "force_fp32", kern, &dt);
	cr_assert_eq(dt, AMP_F32);
	cr_assert_leq(e32, TOL_F32, "%s fp32 (ta %d tb %d stride %d pad %d): err %.3g > %.1g",
	              c->name, c->ta, c->tb, c->stride, c->pad, e32, TOL_F32);
	double e16 = fwd_err(c, "force_fp16", kern, &dt);
	cr_assert_eq(dt, AMP_F16);
	cr_assert_leq(e16, TOL_F16, "%s fp16 (ta %d tb %d stride %d pad %d): err %.3g > %.1g",
	              c->name, c->ta, c->tb, c->stride, c->pad, e16, TOL_F16);
	double eb = fwd_err(c, "force_bf16", kern, &dt);
	cr_assert_eq(dt, AMP_BF16);
	cr_assert_leq(eb, TOL_BF16, "%s bf16 (ta %d tb %d stride %d pad %d): err %.3g > %.1g",
	              c->name, c->ta, c->tb, c->stride, c->pad, eb, TOL_BF16);
	if (c->fn != fn_maxpool2d) { /* gray: with parameter inputs it runs in FP32 */
		double em = fwd_err(c, "allow_mix_precision", kern, &dt);
		cr_assert_eq(dt, AMP_F16);
		cr_assert_leq(em, TOL_F16, "%s mix: err %.3g", c->name, em);
		e16 = fmax(e16, em);
		double emb = fwd_err(c, "allow_mix_precision_bf16", kern, &dt);
		cr_assert_eq(dt, AMP_BF16);
		cr_assert_leq(emb, TOL_BF16, "%s mix bf16: err %.3g", c->name, emb);
		eb = fmax(eb, emb);
	}
	cr_log_info("%s: bf16 forward err %.3g (tol %.2g)", c->name, eb, TOL_BF16);
	*worst32 = fmax(*worst32, e32);
	return e16;
}

/* FP32 central-difference check of every input's gradient through the real autograd. */
static double check_gradcheck(const tcase *c, float h)
{
	inputs vals = inputs_make(c);
	double err = opcheck_grad(c->n, c->shapes, vals.f, c->fn, (void *)c, h, GRAD_SAMPLES);
	inputs_free(&vals);
	cr_assert_leq(err, TOL_GRADCHECK, "%s gradcheck (ta %d tb %d stride %d pad %d): %.3g",
	              c->name, c->ta, c->tb, c->stride, c->pad, err);
	return err;
}

/* Backward in a half mode against FP64 gradients of sum(y * seed).  The FP64 gradient is a
 * central difference of the FP64 reference with step 1e-4: exact up to rounding for these
 * ops, which are linear in each single input (max pool: on well-separated inputs). */
static double check_backward_half(const tcase *c, const char *mode, amp_dtype half, double tol)
{
	inputs vals = inputs_make(c);
	int64_t ny = amp_shape_numel(c->yshape);
	float *seed = malloc((size_t)ny * sizeof(float));
	double *y = malloc((size_t)ny * sizeof(double));
	cr_assert(seed && y);
	uint64_t s = 99;
	for (int64_t i = 0; i < ny; i++)
		seed[i] = amp_rng_uniform(&s) - 0.5f;

	amp_ctx *ctx;
	amp_tensor *in[3];
	amp_tensor *out = run_op(c, mode, NULL, &vals, &ctx, in);
	cr_assert_eq(amp_tensor_dtype(out), half);
	cr_assert_eq(amp_backward_seeded(ctx, out, seed), AMP_OK, "%s", amp_ctx_error(ctx));
	cr_assert(out->grad && out->grad->dtype == half, "the grad of a %s output is %s",
	          amp_dtype_name(half), amp_dtype_name(half));

	double worst = 0;
	const double h = 1e-4;
	for (int i = 0; i < c->n; i++) {
		int64_t n = amp_shape_numel(c->shapes[i]);
		double *want = malloc((size_t)n * sizeof(double));
		float *got = malloc((size_t)n * sizeof(float));
		cr_assert(want && got);
		amp_tensor *gi = amp_tensor_grad(in[i]); /* a master's: settled */
		cr_assert(gi, "%s input %d has no gradient", c->name, i);
		cr_assert_eq(amp_tensor_read_f32(ctx, gi, got), AMP_OK);
		for (int64_t k = 0; k < n; k++) {
			double keep = vals.d[i][k], lp = 0, lm = 0;
			vals.d[i][k] = keep + h;
			c->ref(c, vals.d, y);
			for (int64_t j = 0; j < ny; j++)
				lp += y[j] * (double)seed[j];
			vals.d[i][k] = keep - h;
			c->ref(c, vals.d, y);
			for (int64_t j = 0; j < ny; j++)
				lm += y[j] * (double)seed[j];
			vals.d[i][k] = keep;
			want[k] = (lp - lm) / (2 * h);
		}
		double e = rel_err(got, want, n);
		cr_assert_leq(e, tol, "%s %s grad of input %d: err %.3g > %.2g", c->name, mode, i, e,
		              tol);
		worst = fmax(worst, e);
		free(want);
		free(got);
	}
	amp_ctx_free(ctx);
	free(seed);
	free(y);
	inputs_free(&vals);
	return worst;
}

/* ---- the cases --------------------------------------------------------------------------------
 */

static int conv_cases(tcase *out)
{
	int n = 0;
	for (int stride = 1; stride <= 2; stride++)
		for (int pad = 0; pad <= 1; pad++)
			out[n++] = conv_case(amp_shape4(2, 3, 7, 9), amp_shape4(4, 3, 3, 3), 1,
			                     stride, pad);
	out[n++] = conv_case(amp_shape4(2, 3, 6, 5), amp_shape4(5, 3, 2, 3), 0, 2, 1);
	out[n++] = conv_case(amp_shape4(2, 3, 5, 4), amp_shape4(6, 3, 1, 1), 1, 1, 0); /* 1x1 */
	out[n++] = conv_case(amp_shape4(1, 2, 4, 6), amp_shape4(3, 2, 4, 6), 1, 1, 0); /* full */
	return n;
}

static int pool_cases(tcase *out)
{
	out[0] = pool_case(amp_shape4(2, 3, 6, 8), 2, 2);
	out[1] = pool_case(amp_shape4(1, 2, 7, 5), 3, 1);
	out[2] = pool_case(amp_shape4(2, 1, 7, 9), 3, 2);
	return 3;
}

/* ---- forward ------------------------------------------------------------------------------- */

Test(linalg, matmul_forward_all_transposes)
{
	static const int64_t dims[][3] = {{7, 5, 13}, {16, 24, 32}, {1, 9, 3}, {9, 11, 300}};
	double w32 = 0, w16 = 0;
	for (size_t d = 0; d < sizeof dims / sizeof dims[0]; d++)
		for (int ta = 0; ta <= 1; ta++)
			for (int tb = 0; tb <= 1; tb++) {
				tcase c = mm_case(dims[d][0], dims[d][1], dims[d][2], ta, tb);
				w16 = fmax(w16, check_forward(&c, NULL, &w32));
			}
	cr_log_info("MatMul forward: max rel err fp32 %.3g (tol %.1g), fp16 %.3g (tol %.1g)", w32,
	            TOL_F32, w16, TOL_F16);
}

Test(linalg, batch_matmul_forward)
{
	double w32 = 0, w16 = 0;
	for (int ta = 0; ta <= 1; ta++)
		for (int tb = 0; tb <= 1; tb++) {
			tcase c3 = bmm_case(3, 0, 7, 5, 13, ta, tb);
			tcase c4 = bmm_case(2, 3, 4, 6, 5, ta, tb);
			w16 = fmax(w16, check_forward(&c3, NULL, &w32));
			w16 = fmax(w16, check_forward(&c4, NULL, &w32));
		}
	cr_log_info("BatchMatMul forward: max rel err fp32 %.3g, fp16 %.3g", w32, w16);
}

Test(linalg, linear_forward)
{
	double w32 = 0, w16 = 0;
	tcase cases[] = {linear_case(7, 13, 5, 1), linear_case(7, 13, 5, 0),
	                 linear_case(32, 64, 16, 1), linear_case(1, 300, 3, 1)};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
		w16 = fmax(w16, check_forward(&cases[i], NULL, &w32));
	cr_log_info("Linear forward: max rel err fp32 %.3g, fp16 %.3g", w32, w16);
}

/* x (..., in) with leading dims is taken as (rows, in). */
Test(linalg, linear_forward_3d_input)
{
	tcase c = linear_case(6, 13, 5, 1);
	c.shapes[0] = amp_shape3(2, 3, 13);
	c.yshape = amp_shape3(2, 3, 5);
	double w32 = 0, w16 = check_forward(&c, NULL, &w32);
	cr_log_info("Linear 3-D forward: max rel err fp32 %.3g, fp16 %.3g", w32, w16);
}

Test(linalg, conv2d_forward)
{
	tcase cases[8];
	int n = conv_cases(cases);
	double w32 = 0, w16 = 0;
	for (int i = 0; i < n; i++)
		w16 = fmax(w16, check_forward(&cases[i], NULL, &w32));
	cr_log_info("Conv2D forward (%d cases): max rel err fp32 %.3g, fp16 %.3g", n, w32, w16);
}

Test(linalg, maxpool2d_forward)
{
	tcase cases[4];
	int n = pool_cases(cases);
	double w32 = 0, w16 = 0;
	for (int i = 0; i < n; i++)
		w16 = fmax(w16, check_forward(&cases[i], NULL, &w32));
	cr_assert_eq(w32, 0.0, "an fp32 max pool is exact");
	cr_log_info("MaxPool2D forward: max rel err fp32 %.3g, fp16 %.3g", w32, w16);
}

/* The same forward checks on every kernel path (one the CPU lacks is skipped, and said so). */
Test(linalg, forward_every_kernel_path)
{
	static const char *const paths[] = {"scalar", "avx2", "avx512", "avx512-bf16", "avx512-fp16",
	                                    "amx-bf16"};
	tcase conv[8];
	int nconv = conv_cases(conv);
	for (size_t p = 0; p < sizeof paths / sizeof *paths; p++) {
		if (!kpath_force(paths[p]))
			continue;
		double w32 = 0, w16 = 0;
		for (int ta = 0; ta <= 1; ta++)
			for (int tb = 0; tb <= 1; tb++) {
				tcase a = mm_case(7, 5, 13, ta, tb),
				      b = mm_case(9, 11, 300, ta, tb);
				tcase bm = bmm_case(3, 0, 7, 5, 13, ta, tb);
				w16 = fmax(w16, check_forward(&a, paths[p], &w32));
				w16 = fmax(w16, check_forward(&b, paths[p], &w32));
				w16 = fmax(w16, check_forward(&bm, paths[p], &w32));
			}
		tcase lin = linear_case(7, 13, 5, 1);
		w16 = fmax(w16, check_forward(&lin, paths[p], &w32));
		for (int i = 0; i < nconv; i++)
			w16 = fmax(w16, check_forward(&conv[i], paths[p], &w32));
		cr_log_info("path %s (active %s): max rel err fp32 %.3g, fp16 %.3g", paths[p],
		            amp_isa_name(amp_kernels_isa()), w32, w16);
	}
	cr_assert_geq(amp_kernels_select("auto"), 0);
	cr_assert_eq(amp_kernels_isa(), amp_kernels_best());
}

/* ---- backward ------------------------------------------------------------------------------ */

Test(linalg, matmul_gradcheck)
{
	double worst = 0;
	for (int ta = 0; ta <= 1; ta++)
		for (int tb = 0; tb <= 1; tb++) {
			tcase c = mm_case(7, 5, 13, ta, tb);
			worst = fmax(worst, check_gradcheck(&c, GRAD_H));
		}
	/* a a^T and a^T a: both gradients land in the same tensor */
	for (int t = 0; t <= 1; t++) {
		tcase g = mm_case(t ? 13 : 7, t ? 13 : 7, t ? 7 : 13, t, !t);
		g.fn = fn_gram;
		g.n = 1;
		worst = fmax(worst, check_gradcheck(&g, GRAD_H));
	}
	cr_log_info("MatMul gradcheck: max err %.3g (tol %.1g, h %.0e)", worst, TOL_GRADCHECK,
	            (double)GRAD_H);
}

Test(linalg, batch_matmul_gradcheck)
{
	double worst = 0;
	for (int ta = 0; ta <= 1; ta++)
		for (int tb = 0; tb <= 1; tb++) {
			tcase c = bmm_case(2, 0, 4, 3, 5, ta, tb);
			worst = fmax(worst, check_gradcheck(&c, GRAD_H));
		}
	tcase c4 = bmm_case(2, 2, 3, 4, 5, 0, 1);
	worst = fmax(worst, check_gradcheck(&c4, GRAD_H));
	cr_log_info("BatchMatMul gradcheck: max err %.3g (tol %.1g)", worst, TOL_GRADCHECK);
}

Test(linalg, linear_gradcheck)
{
	tcase b = linear_case(7, 13, 5, 1), nb = linear_case(7, 13, 5, 0);
	double worst = fmax(check_gradcheck(&b, GRAD_H), check_gradcheck(&nb, GRAD_H));
	cr_log_info("Linear gradcheck: max err %.3g (tol %.1g)", worst, TOL_GRADCHECK);
}

Test(linalg, conv2d_gradcheck)
{
	tcase cases[8];
	int n = conv_cases(cases);
	double worst = 0;
	for (int i = 0; i < n; i++)
		worst = fmax(worst, check_gradcheck(&cases[i], GRAD_H));
	cr_log_info("Conv2D gradcheck (%d cases): max err %.3g (tol %.1g)", n, worst,
	            TOL_GRADCHECK);
}

/* Inputs are a shuffled grid with spacing >= 2/numel > 2h, so no step changes an argmax. */
Test(linalg, maxpool2d_gradcheck)
{
	tcase cases[4];
	int n = pool_cases(cases);
	double worst = 0;
	for (int i = 0; i < n; i++)
		worst = fmax(worst, check_gradcheck(&cases[i], 1e-3f));
	cr_log_info("MaxPool2D gradcheck: max err %.3g (tol %.1g, h 1e-3)", worst, TOL_GRADCHECK);
}

Test(linalg, backward_half)
{
	static const struct {
		const char *mode;
		amp_dtype half;
		double tol;
		int force; /* force modes run gray max pool in the half type on parameters */
	} modes[] = {
	    {"allow_mix_precision", AMP_F16, TOL_F16_GRAD, 0},
	    {"force_fp16", AMP_F16, TOL_F16_GRAD, 1},
	    {"allow_mix_precision_bf16", AMP_BF16, TOL_BF16_GRAD, 0},
	    {"force_bf16", AMP_BF16, TOL_BF16_GRAD, 1},
	};
	tcase conv[8], pool[4];
	int nconv = conv_cases(conv);
	pool_cases(pool);
	for (size_t m = 0; m < sizeof modes / sizeof *modes; m++) {
		const char *mode = modes[m].mode;
		amp_dtype h = modes[m].half;
		double tol = modes[m].tol, worst = 0;
		for (int ta = 0; ta <= 1; ta++)
			for (int tb = 0; tb <= 1; tb++) {
				tcase c = mm_case(7, 5, 13, ta, tb),
				      b = bmm_case(2, 0, 4, 3, 5, ta, tb);
				worst = fmax(worst, check_backward_half(&c, mode, h, tol));
				worst = fmax(worst, check_backward_half(&b, mode, h, tol));
			}
		tcase g = mm_case(7, 7, 13, 0, 1);
		g.fn = fn_gram;
		g.ref = ref_gram;
		g.n = 1;
		worst = fmax(worst, check_backward_half(&g, mode, h, tol));
		tcase lb = linear_case(7, 13, 5, 1), l = linear_case(16, 64, 8, 0);
		worst = fmax(worst, check_backward_half(&lb, mode, h, tol));
		worst = fmax(worst, check_backward_half(&l, mode, h, tol));
		for (int i = 0; i < nconv; i++)
			worst = fmax(worst, check_backward_half(&conv[i], mode, h, tol));
		if (modes[m].force)
			worst = fmax(worst, check_backward_half(&pool[0], mode, h, tol));
		cr_log_info("backward %s: max rel err of gradients %.3g (tol %.2g)", mode, worst, tol);
	}
}

/* ---- errors and policy --------------------------------------------------------------------- */

static amp_tensor *host_tensor(amp_ctx *ctx, amp_shape s)
{
	int64_t n = amp_shape_numel(s);
	float *v = calloc((size_t)n, sizeof(float));
	amp_tensor *t = NULL;
	cr_assert(v);
	cr_assert_eq(amp_tensor_from_f32(ctx, v, s, AMP_F32, &t), AMP_OK);
	free(v);
	return t;
}

static void expect_error(amp_ctx *ctx, int rc, int code, const char *const *parts)
{
	const char *msg = amp_ctx_error(ctx);
	cr_assert_eq(rc, code, "rc %d (%s), message: %s", rc, amp_strerror(rc), msg);
	for (; *parts; parts++)
		cr_assert(strstr(msg, *parts), "'%s' not in the message: %s", *parts, msg);
}

Test(linalg, shape_errors_name_op_label_and_shapes)
{
	amp_ctx *ctx = opcheck_ctx("force_fp32");
	cr_assert(ctx);
	cr_assert_eq(amp_step_begin(ctx), AMP_OK);
	amp_tensor *out = NULL;
	amp_tensor *a = host_tensor(ctx, amp_shape2(7, 13)),
	           *b = host_tensor(ctx, amp_shape2(5, 4));
	int rc = amp_matmul(ctx, "attn_q", a, b, 0, 0, &out);
	expect_error(ctx, rc, AMP_ESHAPE,
	             (const char *[]){"MatMul", "attn_q", "(7,13)", "(5,4)", NULL});
	/* transposes change which extent is K: (13,7)^T (7,13) -> K 13 vs 7 */
	amp_tensor *at = host_tensor(ctx, amp_shape2(13, 7));
	rc = amp_matmul(ctx, "mm_t", at, a, 1, 0, &out);
	expect_error(ctx, rc, AMP_ESHAPE,
	             (const char *[]){"MatMul", "mm_t", "(13,7)", "(7,13)", NULL});
	cr_assert_eq(amp_matmul(ctx, "mm_ok", at, a, 1, 1, &out), AMP_OK, "%s", amp_ctx_error(ctx));
	cr_assert(amp_shape_eq(amp_tensor_shape(out), amp_shape2(7, 7)));

	amp_tensor *a3 = host_tensor(ctx, amp_shape3(2, 3, 4)),
	           *b3 = host_tensor(ctx, amp_shape3(2, 5, 6));
	rc = amp_batch_matmul(ctx, "heads", a3, b3, 0, 0, &out);
	expect_error(ctx, rc, AMP_ESHAPE,
	             (const char *[]){"BatchMatMul", "heads", "(2,3,4)", "(2,5,6)", NULL});
	amp_tensor *c3 = host_tensor(ctx, amp_shape3(3, 4, 6));
	rc = amp_batch_matmul(ctx, "heads", a3, c3, 0, 0, &out);
	expect_error(ctx, rc, AMP_ESHAPE,
	             (const char *[]){"BatchMatMul", "heads", "(2,3,4)", "(3,4,6)", NULL});
	rc = amp_matmul(ctx, "flat", a3, b, 0, 0, &out);
	expect_error(ctx, rc, AMP_ESHAPE, (const char *[]){"MatMul", "flat", "(2,3,4)", NULL});

	amp_tensor *w = host_tensor(ctx, amp_shape2(5, 12)),
	           *bias = host_tensor(ctx, amp_shape1(4));
	rc = amp_linear(ctx, "fc1", a, w, NULL, &out);
	expect_error(ctx, rc, AMP_ESHAPE,
	             (const char *[]){"Linear", "fc1", "(7,13)", "(5,12)", NULL});
	amp_tensor *w13 = host_tensor(ctx, amp_shape2(5, 13));
	rc = amp_linear(ctx, "fc1", a, w13, bias, &out);
	expect_error(ctx, rc, AMP_ESHAPE, (const char *[]){"Linear", "fc1", "(4)", "(5,13)", NULL});

	amp_tensor *x = host_tensor(ctx, amp_shape4(2, 3, 7, 9));
	amp_tensor *wc = host_tensor(ctx, amp_shape4(4, 2, 3, 3));
	rc = amp_conv2d(ctx, "conv1", x, wc, NULL, 1, 0, &out);
	expect_error(ctx, rc, AMP_ESHAPE,
	             (const char *[]){"Conv2D", "conv1", "(2,3,7,9)", "(4,2,3,3)", NULL});
	amp_tensor *wbig = host_tensor(ctx, amp_shape4(4, 3, 9, 3));
	rc = amp_conv2d(ctx, "conv1", x, wbig, NULL, 1, 0, &out);
	expect_error(ctx, rc, AMP_ESHAPE,
	             (const char *[]){"Conv2D", "conv1", "(2,3,7,9)", "(4,3,9,3)", NULL});
	rc = amp_conv2d(ctx, "conv1", x, wc, NULL, 0, 0, &out);
	expect_error(ctx, rc, AMP_EINVAL, (const char *[]){"Conv2D", "conv1", "stride", NULL});

	rc = amp_maxpool2d(ctx, "pool1", x, 8, 1, &out);
	expect_error(ctx, rc, AMP_ESHAPE,
	             (const char *[]){"MaxPool2D", "pool1", "(2,3,7,9)", NULL});
	rc = amp_maxpool2d(ctx, "pool1", a, 2, 2, &out);
	expect_error(ctx, rc, AMP_ESHAPE, (const char *[]){"MaxPool2D", "pool1", "(7,13)", NULL});
	rc = amp_matmul(ctx, "mm", a, NULL, 0, 0, &out);
	expect_error(ctx, rc, AMP_EINVAL, (const char *[]){"MatMul", NULL});
	amp_ctx_free(ctx);
}

/* Output dtypes follow the precision mode: white-list GEMM ops run in FP16 under
 * allow_mix_precision and in FP32 under force_fp32; max pool (gray) follows its input. */
Test(linalg, output_dtype_follows_policy)
{
	static const struct {
		const char *mode;
		amp_dtype want;
	} modes[] = {
	    {"allow_mix_precision", AMP_F16},      {"force_fp32", AMP_F32},
	    {"force_fp16", AMP_F16},               {"allow_mix_precision_fp16", AMP_F16},
	    {"allow_mix_precision_bf16", AMP_BF16}, {"force_bf16", AMP_BF16}};
	for (size_t m = 0; m < sizeof modes / sizeof *modes; m++) {
		amp_ctx *ctx = opcheck_ctx(modes[m].mode);
		cr_assert(ctx);
		cr_assert_eq(amp_step_begin(ctx), AMP_OK);
		amp_tensor *a = host_tensor(ctx, amp_shape2(4, 8)),
		           *b = host_tensor(ctx, amp_shape2(8, 3));
		amp_tensor *x = host_tensor(ctx, amp_shape4(1, 2, 5, 5));
		amp_tensor *w = host_tensor(ctx, amp_shape4(3, 2, 3, 3));
		amp_tensor *wl = host_tensor(ctx, amp_shape2(3, 8));
		amp_tensor *y = NULL, *yb = NULL, *yl = NULL, *yc = NULL, *yp = NULL;
		cr_assert_eq(amp_matmul(ctx, "mm", a, b, 0, 0, &y), AMP_OK);
		cr_assert_eq(amp_tensor_dtype(y), modes[m].want, "MatMul in %s gave %s",
		             modes[m].mode, amp_dtype_name(amp_tensor_dtype(y)));
		amp_tensor *a3 = host_tensor(ctx, amp_shape3(2, 4, 8)),
		           *b3 = host_tensor(ctx, amp_shape3(2, 8, 3));
		cr_assert_eq(amp_batch_matmul(ctx, "bmm", a3, b3, 0, 0, &yb), AMP_OK);
		cr_assert_eq(amp_tensor_dtype(yb), modes[m].want);
		cr_assert_eq(amp_linear(ctx, "fc", a, wl, NULL, &yl), AMP_OK);
		cr_assert_eq(amp_tensor_dtype(yl), modes[m].want);
		cr_assert_eq(amp_conv2d(ctx, "conv", x, w, NULL, 1, 1, &yc), AMP_OK);
		cr_assert_eq(amp_tensor_dtype(yc), modes[m].want);
		cr_assert_eq(amp_maxpool2d(ctx, "pool", yc, 2, 2, &yp), AMP_OK);
		cr_assert_eq(amp_tensor_dtype(yp), amp_tensor_dtype(yc), "gray pool follows input");
		amp_ctx_free(ctx);
	}
}

/* NaN in a pooling window propagates (the origin of a non-finite must stay visible). */
Test(linalg, maxpool2d_propagates_nan)
{
	amp_ctx *ctx = opcheck_ctx("force_fp32");
	cr_assert(ctx);
	cr_assert_eq(amp_step_begin(ctx), AMP_OK);
	float v[16];
	for (int i = 0; i < 16; i++)
		v[i] = (float)i;
	v[5] = NAN;
	amp_tensor *x = NULL, *y = NULL;
	cr_assert_eq(amp_tensor_from_f32(ctx, v, amp_shape4(1, 1, 4, 4), AMP_F32, &x), AMP_OK);
	cr_assert_eq(amp_maxpool2d(ctx, "pool", x, 2, 2, &y), AMP_OK);
	float o[4];
	cr_assert_eq(amp_tensor_read_f32(ctx, y, o), AMP_OK);
	cr_assert(isnan(o[0]), "window with NaN gave %g", (double)o[0]);
	cr_assert_eq(o[1], 7.0f);
	cr_assert_eq(o[2], 13.0f);
	cr_assert_eq(o[3], 15.0f);
	amp_ctx_free(ctx);
}

/* ---- MaxPool2D's half gradient, bit for bit ------------------------------------------------
 * A fresh fp16 or bf16 gradient of non-overlapping windows (stride >= k) is the output
 * gradient's bits scattered to the argmaxes; overlapping windows add in FP32.  Either way each
 * element must be what the FP32 sum of the gradients that reach it rounds to once: 0 + g is g,
 * but +0 for -0 and a NaN quiet.  Checked against that rounding computed here from argmaxes
 * found here (the first NaN of a window, else its first maximum), on data with ties, signed
 * zeros, Inf and NaN, with the argmaxes saved and recomputed (memory_optimize). */

static uint16_t pool_bits(uint64_t *s, amp_dtype dt)
{
	static const float pick[] = {-0.0f, 0.0f, 1.0f, -1.0f, 2.0f, INFINITY, -INFINITY, NAN};
	uint64_t r = amp_rng_next(s);
	float v = r % 4 == 0 ? pick[(r >> 8) % 8] : (float)((int64_t)(r >> 16) % 2001 - 1000) / 64;
	return dt == AMP_F16 ? amp_half_f32_to_f16(v) : amp_half_f32_to_bf16(v);
}

static float pool_val(uint16_t h, amp_dtype dt)
{
	return dt == AMP_F16 ? amp_half_f16_to_f32(h) : amp_half_bf16_to_f32(h);
}

static void check_pool_grad_bits(amp_dtype dt, int k, int stride, int memopt)
{
	enum { N = 2, C = 3, H = 11, W = 13 };
	const char *mode = dt == AMP_F16 ? "force_fp16" : "force_bf16";
	amp_ctx *ctx = opcheck_ctx(mode);
	cr_assert_not_null(ctx);
	cr_assert_eq(amp_config_set(ctx, "memory_optimize", memopt ? "on" : "off"), AMP_OK);
	uint64_t s = 5 + (uint64_t)(k * 10 + stride);
	amp_tensor *p, *x, *y;
	static float v[N * C * H * W];
	for (int i = 0; i < N * C * H * W; i++)
		v[i] = pool_val(pool_bits(&s, dt), dt);
	cr_assert_eq(amp_param_new(ctx, "p", amp_shape4(N, C, H, W), AMP_INIT_ZEROS, 0, &p),
	             AMP_OK);
	cr_assert_eq(amp_param_load(ctx, p, v), AMP_OK);
	cr_assert_eq(amp_step_begin(ctx), AMP_OK);
	cr_assert_eq(amp_scale(ctx, "x", p, 1.0f, &x), AMP_OK); /* a half activation */
	const uint16_t *xd = x->data;
	cr_assert_eq(amp_maxpool2d(ctx, "pool", x, k, stride, &y), AMP_OK, "%s",
	             amp_ctx_error(ctx));
	int64_t OH = (H - k) / stride + 1, OW = (W - k) / stride + 1, ny = N * C * OH * OW;
	float *seed = malloc((size_t)ny * sizeof(float));
	float *sum = calloc(N * C * H * W, sizeof(float));
	cr_assert(seed && sum);
	for (int64_t i = 0; i < ny; i++)
		seed[i] = pool_val(pool_bits(&s, dt), dt);
	for (int64_t pl = 0; pl < N * C; pl++)
		for (int64_t oh = 0; oh < OH; oh++)
			for (int64_t ow = 0; ow < OW; ow++) {
				int64_t best = -1;
				float bv = 0;
				for (int i = 0; i < k; i++)
					for (int j = 0; j < k; j++) {
						int64_t at = pl * H * W + (oh * stride + i) * W +
						             ow * stride + j;
						float xv = pool_val(xd[at], dt);
						if (best >= 0 &&
						    (isnan(bv) || !(xv > bv || isnan(xv))))
							continue;
						best = at, bv = xv;
					}
				sum[best] += seed[(pl * OH + oh) * OW + ow];
			}
	cr_assert_eq(amp_backward_seeded(ctx, y, seed), AMP_OK, "%s", amp_ctx_error(ctx));
	/* x's half gradient reaches p's FP32 one through Scale by 1 and the cast back, both exact
	 * (x's own may be released by memory_optimize) */
	const amp_tensor *pg = amp_tensor_grad(p);
	cr_assert(pg && pg->dtype == AMP_F32);
	const float *gp = pg->data;
	for (int i = 0; i < N * C * H * W; i++) {
		uint16_t want =
		    dt == AMP_F16 ? amp_half_f32_to_f16(sum[i]) : amp_half_f32_to_bf16(sum[i]);
		float w = pool_val(want, dt);
		cr_assert(memcmp(&gp[i], &w, sizeof w) == 0 || (isnan(gp[i]) && isnan(w)),
		          "%s k %d stride %d memopt %d: dx[%d] %a, want %a", mode, k, stride,
		          memopt, i, (double)gp[i], (double)w);
	}
	free(seed), free(sum);
	amp_ctx_free(ctx);
}

Test(linalg, maxpool2d_half_grad_bits)
{
	static const amp_dtype dts[] = {AMP_F16, AMP_BF16};
	static const int ks[][2] = {
	    {2, 2}, {3, 3}, {2, 3}, {3, 2}}; /* k, stride; the last overlaps */
	for (int d = 0; d < 2; d++)
		for (int c = 0; c < 4; c++)
			for (int m = 0; m <= 1; m++)
				check_pool_grad_bits(dts[d], ks[c][0], ks[c][1], m);
}

/* test_ops_elementwise.c — the broadcasting binary ops (Add, Sub, Mul, Div, Maximum, Minimum)
 * and the pointwise Sigmoid, Tanh, Neg, Abs and Clamp: forward against FP64 references in
 * fp32, fp16 and bf16, gradients by central differences and in each half type against FP32,
 * NumPy broadcasting shapes, ties and NaN, the policy and the errors.
 *
 * Tolerances are opcheck_cr.h's for the forward; gradients |analytic - numeric| /
 * max(1, |numeric|) <= 2e-3; half backward err/scale <= 1e-2 (fp16), 8e-2 (bf16: three
 * significant bits fewer; a broadcast operand's gradient sums thousands of rounded terms).
 */
#include <criterion/criterion.h>
#include <criterion/logging.h>

#include "amp_half.h"
#include "kpath.h"
#include "opcheck_cr.h"

#define TOL_GRAD     2e-3
#define TOL_BWD_BF16 (8 * TOL_F16)

typedef int (*binary_op)(amp_ctx *, const char *, amp_tensor *, amp_tensor *, amp_tensor **);
typedef int (*unary_op)(amp_ctx *, const char *, amp_tensor *, amp_tensor **);

static int fn_binary(amp_ctx *c, amp_tensor **in, amp_tensor **out, void *arg)
{
	binary_op op = *(binary_op *)arg;
	return op(c, "bin", in[0], in[1], out);
}

/* The broadcast shape of a and b by NumPy's rules (the test's own reading of them). */
static amp_shape numpy_shape(amp_shape a, amp_shape b)
{
	amp_shape s = {a.ndim > b.ndim ? a.ndim : b.ndim, {0, 0, 0, 0}};
	for (int k = 0; k < s.ndim; k++) {
		int ka = k - (s.ndim - a.ndim), kb = k - (s.ndim - b.ndim);
		int64_t ea = ka >= 0 ? a.d[ka] : 1, eb = kb >= 0 ? b.d[kb] : 1;
		s.d[k] = ea == 1 ? eb : ea;
	}
	return s;
}

/* Index into t (shape ts) of output element i of shape os under broadcasting. */
static int64_t numpy_index(amp_shape os, amp_shape ts, int64_t i)
{
	int64_t idx = 0, mul = 1;
	for (int k = os.ndim - 1; k >= 0; k--) {
		int64_t c = i % os.d[k];
		i /= os.d[k];
		int kt = k - (os.ndim - ts.ndim);
		if (kt >= 0) {
			if (ts.d[kt] != 1)
				idx += c * mul;
			mul *= ts.d[kt];
		}
	}
	return idx;
}

typedef struct binary_case {
	const char *name;
	binary_op op;
	double (*ref)(double, double);
} binary_case;

static double add_ref(double a, double b)
{
	return a + b;
}
static double sub_ref(double a, double b)
{
	return a - b;
}
static double mul_ref(double a, double b)
{
	return a * b;
}
static double div_ref(double a, double b)
{
	return a / b;
}
static double max_ref(double a, double b)
{
	return a > b ? a : b;
}
static double min_ref(double a, double b)
{
	return a < b ? a : b;
}

static const binary_case binary_cases[] = {
    {"Add", amp_add, add_ref}, {"Sub", amp_sub, sub_ref},         {"Mul", amp_mul, mul_ref},
    {"Div", amp_div, div_ref}, {"Maximum", amp_maximum, max_ref}, {"Minimum", amp_minimum, min_ref},
};

/* Shape pairs: equal, trailing, middle and leading broadcasts, both sides at once, a one-element
 * operand, rows spanning two blocks, and a constant run longer than a block. */
static const amp_shape shape_pairs[][2] = {
    {{3, {2, 3, 4, 0}}, {3, {2, 3, 4, 0}}},    {{3, {2, 3, 4, 0}}, {1, {4, 0, 0, 0}}},
    {{3, {2, 3, 4, 0}}, {2, {3, 1, 0, 0}}},    {{2, {4, 1, 0, 0}}, {1, {3, 0, 0, 0}}},
    {{3, {2, 1, 4, 0}}, {3, {1, 3, 1, 0}}},    {{4, {2, 3, 4, 5}}, {4, {1, 3, 1, 1}}},
    {{1, {1, 0, 0, 0}}, {2, {2, 3, 0, 0}}},    {{2, {3, 2500, 0, 0}}, {1, {2500, 0, 0, 0}}},
    {{2, {2, 3000, 0, 0}}, {2, {2, 1, 0, 0}}},
};

Test(ops_elementwise, broadcast_forward_backward)
{
	int cases = 0;
	for (size_t c = 0; c < sizeof binary_cases / sizeof *binary_cases; c++)
		for (size_t s = 0; s < sizeof shape_pairs / sizeof *shape_pairs; s++) {
			const binary_case *bc = &binary_cases[c];
			amp_shape sh[2] = {shape_pairs[s][0], shape_pairs[s][1]};
			amp_shape os = numpy_shape(sh[0], sh[1]);
			int64_t na = amp_shape_numel(sh[0]), nb = amp_shape_numel(sh[1]);
			int64_t ny = amp_shape_numel(os);
			float *a = fill(na, 100 + s, -2, 2), *b = fill(nb, 200 + s, -2, 2);
			/* a on odd tenths, b on even ones: never within 0.1 of each other, so
			 * Maximum / Minimum stay off their kink under central differences; Div's
			 * divisor kept away from 0. */
			for (int64_t i = 0; i < na; i++)
				a[i] = 0.2f * roundf(a[i] * 5.0f) + 0.1f;
			for (int64_t i = 0; i < nb; i++) {
				b[i] = 0.2f * roundf(b[i] * 5.0f);
				if (bc->op == amp_div && fabsf(b[i]) < 0.5f)
					b[i] = b[i] < 0 ? -0.6f : 0.6f;
			}
			float *vals[2] = {a, b};
			double *ref = dalloc(ny);
			for (int64_t i = 0; i < ny; i++)
				ref[i] = bc->ref((double)a[numpy_index(os, sh[0], i)],
				                 (double)b[numpy_index(os, sh[1], i)]);
			char what[96], sa[32], sb[32];
			snprintf(what, sizeof what, "%s %s %s", bc->name,
			         amp_shape_str(sh[0], sa, sizeof sa),
			         amp_shape_str(sh[1], sb, sizeof sb));
			void *arg = (void *)&bc->op;
			check_fwd(what, 2, sh, vals, fn_binary, arg, ref, ny);
			/* the big shapes are sampled sparsely: each sample reruns the op twice */
			check_grad(what, 2, sh, vals, fn_binary, arg, 1e-2f, ny > 1000 ? 8 : 24,
			           TOL_GRAD);
			check_bwd_half(what, 2, sh, vals, fn_binary, arg, TOL_F16, TOL_BWD_BF16);
			free(a), free(b), free(ref);
			cases++;
		}
	cr_log_info("broadcast binary ops: %d op x shape cases", cases);
}

Test(ops_elementwise, broadcast_shapes)
{
	fixture f;
	float v[64] = {0};
	float *vals[2] = {v, v};
	amp_shape sh[2] = {amp_shape2(4, 1), amp_shape1(3)};
	fx_open(&f, "force_fp32", 2, sh, vals);
	cr_assert_eq(amp_sub(f.ctx, "d", f.in[0], f.in[1], &f.out), AMP_OK);
	cr_expect(amp_shape_eq(f.out->shape, amp_shape2(4, 3)), "(4,1) - (3) must be (4,3)");
	cr_assert_eq(amp_div(f.ctx, "d", f.in[1], f.in[0], &f.out), AMP_OK);
	cr_expect(amp_shape_eq(f.out->shape, amp_shape2(4, 3)), "(3) / (4,1) must be (4,3)");
	amp_ctx_free(f.ctx);

	amp_shape bad[2] = {amp_shape2(2, 3), amp_shape1(4)};
	fx_open(&f, "force_fp32", 2, bad, vals);
	cr_expect_eq(amp_sub(f.ctx, "res", f.in[0], f.in[1], &f.out), AMP_ESHAPE);
	const char *e = amp_ctx_error(f.ctx);
	cr_log_info("bad broadcast: %s", e);
	cr_expect(strstr(e, "Sub 'res'") && strstr(e, "(2,3)") && strstr(e, "(4)"), "message: %s",
	          e);
	amp_shape bad2[2] = {amp_shape3(2, 3, 4), amp_shape2(2, 4)};
	amp_ctx_free(f.ctx);
	fx_open(&f, "force_fp32", 2, bad2, vals);
	cr_expect_eq(amp_maximum(f.ctx, "m", f.in[0], f.in[1], &f.out), AMP_ESHAPE);
	cr_expect(strstr(amp_ctx_error(f.ctx), "Maximum 'm'"), "message: %s", amp_ctx_error(f.ctx));
	amp_ctx_free(f.ctx);
}

/* Scalars (the results of full reductions) combine with each other and with tensors: two
 * losses added, a tensor divided by its sum; the gradients reach both sides. */
Test(ops_elementwise, scalar_operands)
{
	float v[6] = {1, 2, 3, 4, 5, 6};
	amp_shape sh[1] = {amp_shape2(2, 3)};
	float *vals[1] = {v};
	fixture f;
	fx_open(&f, "force_fp32", 1, sh, vals);
	amp_tensor *s, *m, *l, *q;
	cr_assert_eq(amp_sum(f.ctx, "s", f.in[0], &s), AMP_OK);
	cr_assert_eq(amp_mean(f.ctx, "m", f.in[0], &m), AMP_OK);
	cr_assert_eq(amp_add(f.ctx, "l", s, m, &l), AMP_OK, "%s", amp_ctx_error(f.ctx));
	cr_expect_eq(l->shape.ndim, 0, "scalar + scalar is a scalar");
	cr_expect_float_eq(amp_tensor_item(f.ctx, l), 21.0 + 3.5, 1e-9);
	cr_assert_eq(amp_div(f.ctx, "q", f.in[0], s, &q), AMP_OK, "%s", amp_ctx_error(f.ctx));
	cr_expect(amp_shape_eq(q->shape, amp_shape2(2, 3)));
	amp_tensor *t;
	cr_assert_eq(amp_sum(f.ctx, "t", q, &t), AMP_OK);
	cr_assert_eq(amp_add(f.ctx, "all", t, l, &l), AMP_OK);
	float one = 1.0f;
	cr_assert_eq(amp_backward_seeded(f.ctx, l, &one), AMP_OK, "%s", amp_ctx_error(f.ctx));
	/* d/dx_i of sum(x) + mean(x) + sum(x / sum(x)) = 1 + 1/6 + 0 (the last is constant 1) */
	const float *g = f.in[0]->grad->data;
	double worst = 0;
	for (int i = 0; i < 6; i++)
		worst = fmax(worst, fabs((double)g[i] - (1.0 + 1.0 / 6.0)));
	cr_log_info("scalar operands: gradient max err %.3g (tol 1e-6)", worst);
	cr_expect(worst <= 1e-6);
	amp_ctx_free(f.ctx);
}

/* maximum(x, x): a tie everywhere; each side gets half the gradient, their sum all of it.
 * NaN on either side wins. */
Test(ops_elementwise, maximum_ties_and_nan)
{
	float x[4] = {1, -2, 3, 0.5f};
	amp_shape sh[1] = {amp_shape1(4)};
	float *vals[1] = {x};
	fixture f;
	fx_open(&f, "force_fp32", 1, sh, vals);
	cr_assert_eq(amp_maximum(f.ctx, "tie", f.in[0], f.in[0], &f.out), AMP_OK);
	float seed[4] = {1, 2, 3, 4};
	cr_assert_eq(amp_backward_seeded(f.ctx, f.out, seed), AMP_OK);
	const float *g = f.in[0]->grad->data;
	for (int i = 0; i < 4; i++)
		cr_expect_eq(g[i], seed[i], "maximum(x, x) grad %d: %g, want %g", i, (double)g[i],
		             (double)seed[i]);
	amp_ctx_free(f.ctx);

	float a[3] = {NAN, 1, 2}, b[3] = {1, NAN, 3};
	amp_shape s2[2] = {amp_shape1(3), amp_shape1(3)};
	float *v2[2] = {a, b};
	for (int mx = 0; mx < 2; mx++) {
		float y[3];
		binary_op op = mx ? amp_maximum : amp_minimum;
		cr_assert_eq(opcheck_run("force_fp32", 2, s2, v2, fn_binary, &op, y, NULL), AMP_OK);
		cr_expect(isnan(y[0]) && isnan(y[1]) && y[2] == (mx ? 3.0f : 2.0f), "%s: %g %g %g",
		          mx ? "Maximum" : "Minimum", (double)y[0], (double)y[1], (double)y[2]);
	}
}

/* Gray: half when every activation is half, FP32 otherwise; a parameter does not vote. */
Test(ops_elementwise, policy_gray)
{
	amp_ctx *ctx = opcheck_ctx("allow_mix_precision_bf16");
	float v[6] = {1, 2, 3, 4, 5, 6};
	amp_tensor *h, *f32, *p, *y;
	cr_assert_eq(amp_param_new(ctx, "p", amp_shape1(3), AMP_INIT_ONES, 0, &p), AMP_OK);
	cr_assert_eq(amp_step_begin(ctx), AMP_OK);
	cr_assert_eq(amp_tensor_from_f32(ctx, v, amp_shape2(2, 3), AMP_BF16, &h), AMP_OK);
	cr_assert_eq(amp_tensor_from_f32(ctx, v, amp_shape2(2, 3), AMP_F32, &f32), AMP_OK);
	binary_op ops[] = {amp_sub, amp_div, amp_maximum, amp_minimum};
	for (int i = 0; i < 4; i++) {
		cr_assert_eq(ops[i](ctx, "o", h, p, &y), AMP_OK, "%s", amp_ctx_error(ctx));
		cr_expect_eq(y->dtype, AMP_BF16, "op %d on bf16 with a parameter runs in bf16", i);
		cr_assert_eq(ops[i](ctx, "o", h, f32, &y), AMP_OK);
		cr_expect_eq(y->dtype, AMP_F32, "op %d on bf16 and fp32 runs in fp32", i);
	}
	unary_op un[] = {amp_sigmoid, amp_tanh, amp_neg, amp_abs};
	for (int i = 0; i < 4; i++) {
		cr_assert_eq(un[i](ctx, "u", h, &y), AMP_OK);
		cr_expect_eq(y->dtype, AMP_BF16, "unary op %d on bf16 runs in bf16", i);
	}
	cr_assert_eq(amp_clamp(ctx, "c", h, 0, 1, &y), AMP_OK);
	cr_expect_eq(y->dtype, AMP_BF16);
	static const char *const gray[] = {"Sub",     "Div",   "Neg",     "Abs", "Maximum",
	                                   "Minimum", "Clamp", "Sigmoid", "Tanh"};
	for (size_t i = 0; i < sizeof gray / sizeof *gray; i++) {
		int op = amp_op_from_name(gray[i]);
		cr_assert(op >= 0, "%s is an op name", gray[i]);
		cr_expect_eq(amp_op_default_list((amp_op_type)op), AMP_LIST_GRAY, "%s is gray",
		             gray[i]);
	}
	amp_ctx_free(ctx);
}

/* ---- pointwise --------------------------------------------------------------------------- */

static double sigmoid_ref(double x)
{
	return 1.0 / (1.0 + exp(-x));
}
static double neg_ref(double x)
{
	return -x;
}
static double clamp_ref(double x)
{
	return x < -0.5 ? -0.5 : x > 0.7 ? 0.7 : x;
}

static int fn_unary(amp_ctx *c, amp_tensor **in, amp_tensor **out, void *arg)
{
	unary_op op = *(unary_op *)arg;
	return op(c, "act", in[0], out);
}

static int fn_clamp(amp_ctx *c, amp_tensor **in, amp_tensor **out, void *arg)
{
	(void)arg;
	return amp_clamp(c, "clip", in[0], -0.5f, 0.7f, out);
}

typedef struct pointwise_case {
	const char *name;
	unary_op op; /* NULL: Clamp to [-0.5, 0.7] */
	float lo, hi;
	double (*ref)(double);
	float avoid[2]; /* kinks kept 0.02 away from the inputs (NAN: none) */
} pointwise_case;

static const pointwise_case pointwise_cases[] = {
    {"Sigmoid", amp_sigmoid, -6, 6, sigmoid_ref, {NAN, NAN}},
    {"Tanh", amp_tanh, -3, 3, tanh, {NAN, NAN}},
    {"Neg", amp_neg, -3, 3, neg_ref, {NAN, NAN}},
    {"Abs", amp_abs, -3, 3, fabs, {0, NAN}},
    {"Clamp", NULL, -2, 2, clamp_ref, {-0.5f, 0.7f}},
};

Test(ops_elementwise, pointwise)
{
	amp_shape sh[1] = {amp_shape2(6, 10)};
	for (size_t k = 0; k < sizeof pointwise_cases / sizeof *pointwise_cases; k++) {
		const pointwise_case *pc = &pointwise_cases[k];
		float *x = fill(60, 30 + k, pc->lo, pc->hi);
		for (int i = 0; i < 60; i++)
			for (int j = 0; j < 2; j++)
				if (!isnan(pc->avoid[j]) && fabsf(x[i] - pc->avoid[j]) < 0.02f)
					x[i] =
					    pc->avoid[j] + (x[i] < pc->avoid[j] ? -0.02f : 0.02f);
		float *vals[1] = {x};
		double *ref = dalloc(60);
		for (int i = 0; i < 60; i++)
			ref[i] = pc->ref((double)x[i]);
		opcheck_fn fn = pc->op ? fn_unary : fn_clamp;
		void *arg = pc->op ? (void *)&pc->op : NULL;
		check_fwd(pc->name, 1, sh, vals, fn, arg, ref, 60);
		check_grad(pc->name, 1, sh, vals, fn, arg, 1e-2f, 30, TOL_GRAD);
		check_bwd_half(pc->name, 1, sh, vals, fn, arg, TOL_F16, TOL_BWD_BF16);
		free(x), free(ref);
	}
}

/* Sigmoid never evaluates exp of a large positive number: finite and exact at the extremes;
 * Clamp keeps NaN, and refuses bounds that are not ordered. */
Test(ops_elementwise, pointwise_extremes)
{
	float x[4] = {-100, 100, -1e30f, NAN};
	amp_shape sh[1] = {amp_shape1(4)};
	float *vals[1] = {x}, y[4];
	unary_op op = amp_sigmoid;
	cr_assert_eq(opcheck_run("force_fp32", 1, sh, vals, fn_unary, &op, y, NULL), AMP_OK);
	cr_expect(y[0] >= 0.0f && y[0] < 1e-40f && y[1] == 1.0f && y[2] == 0.0f && isnan(y[3]),
	          "sigmoid: %g %g %g %g", (double)y[0], (double)y[1], (double)y[2], (double)y[3]);
	cr_assert_eq(opcheck_run("force_fp32", 1, sh, vals, fn_clamp, NULL, y, NULL), AMP_OK);
	cr_expect(y[0] == -0.5f && y[1] == 0.7f && isnan(y[3]), "clamp: %g %g %g", (double)y[0],
	          (double)y[1], (double)y[3]);

	fixture f;
	fx_open(&f, "force_fp32", 1, sh, vals);
	cr_expect_eq(amp_clamp(f.ctx, "clip", f.in[0], 1.0f, -1.0f, &f.out), AMP_EINVAL);
	cr_expect(strstr(amp_ctx_error(f.ctx), "Clamp 'clip'"), "message: %s",
	          amp_ctx_error(f.ctx));
	cr_expect_eq(amp_clamp(f.ctx, "clip", f.in[0], NAN, 1.0f, &f.out), AMP_EINVAL);
	cr_expect_eq(amp_clamp(f.ctx, "clip", f.in[0], -INFINITY, INFINITY, &f.out), AMP_OK);
	amp_ctx_free(f.ctx);
}

/* ---- fp16 on native fp16 arithmetic -------------------------------------------------------
 * The avx512-fp16 path runs fp16 Add, Sub, Mul (equal shapes, a row, a column, a scalar, both
 * operands broadcast), BiasAdd, Scale and ReLU in fp16 itself; the outputs must be the avx512
 * path's (FP32 blocks, rounded once) bit for bit, NaN as NaN, on data with subnormals, values
 * near 65504 (results that overflow), signed zeros, Inf and NaN.  Zero difference allowed. */

#define H16_CASES 13

static uint16_t h16_bits(uint64_t *s)
{
	uint16_t r = (uint16_t)(amp_rng_next(s) >> 17);
	switch (amp_rng_next(s) % 10) {
	case 0: return r & 0x83ffu;                         /* subnormal or zero */
	case 1: return (uint16_t)((r & 0x80ffu) | 0x7b00u); /* near 65504 */
	case 2: return r & 1 ? 0x7c00u : 0xfc00u;           /* +-Inf */
	case 3: return (uint16_t)(0x7c01u | (r & 0x81ffu)); /* NaN */
	case 4: return r & 0x8000u;                         /* +-0 */
	default: return (uint16_t)((r & 0xbfffu) | 0x3000u); /* ordinary: 2^-3 .. 2^16 */
	}
}

/* A new fp16 tensor of shape sh holding h16_bits from seed. */
static amp_tensor *h16_tensor(amp_ctx *ctx, amp_shape sh, uint64_t seed)
{
	amp_tensor *t;
	cr_assert_eq(amp_tensor_new(ctx, AMP_F16, sh, &t), AMP_OK);
	uint16_t *d = amp_tensor_data(t);
	for (int64_t i = 0; i < amp_tensor_numel(t); i++)
		d[i] = h16_bits(&seed);
	return t;
}

/* Runs the cases on the active path: out[c] (malloc'ed, n[c] halves) = case c's output. */
static void h16_run_cases(uint16_t *out[H16_CASES], int64_t n[H16_CASES])
{
	amp_ctx *ctx = opcheck_ctx("allow_mix_precision");
	cr_assert_not_null(ctx);
	cr_assert_eq(amp_step_begin(ctx), AMP_OK);
	amp_tensor *x = h16_tensor(ctx, amp_shape2(37, 129), 1);
	amp_tensor *z = h16_tensor(ctx, amp_shape2(37, 129), 2);
	amp_tensor *row = h16_tensor(ctx, amp_shape1(129), 3);
	amp_tensor *col = h16_tensor(ctx, amp_shape2(37, 1), 4);
	amp_tensor *one = h16_tensor(ctx, amp_shape1(1), 5);
	amp_tensor *u = h16_tensor(ctx, amp_shape3(4, 1, 5), 6);
	amp_tensor *v = h16_tensor(ctx, amp_shape2(3, 5), 7);
	amp_tensor *y[H16_CASES] = {0};
	cr_assert_eq(amp_add(ctx, "same", x, z, &y[0]), AMP_OK, "%s", amp_ctx_error(ctx));
	cr_assert_eq(amp_sub(ctx, "same", x, z, &y[1]), AMP_OK);
	cr_assert_eq(amp_mul(ctx, "same", x, z, &y[2]), AMP_OK);
	cr_assert_eq(amp_add(ctx, "row", x, row, &y[3]), AMP_OK);
	cr_assert_eq(amp_mul(ctx, "row_first", row, x, &y[4]), AMP_OK);
	cr_assert_eq(amp_sub(ctx, "row", row, x, &y[5]), AMP_OK);
	cr_assert_eq(amp_add(ctx, "col", x, col, &y[6]), AMP_OK);
	cr_assert_eq(amp_mul(ctx, "scalar", one, z, &y[7]), AMP_OK);
	cr_assert_eq(amp_add(ctx, "both", u, v, &y[8]), AMP_OK);
	cr_assert_eq(amp_bias_add(ctx, "bias", x, row, &y[9]), AMP_OK);
	cr_assert_eq(amp_scale(ctx, "half", x, 0.5f, &y[10]), AMP_OK);
	cr_assert_eq(amp_scale(ctx, "tenth", x, 0.1f, &y[11]), AMP_OK);
	cr_assert_eq(amp_relu(ctx, "relu", x, &y[12]), AMP_OK);
	for (int c = 0; c < H16_CASES; c++) {
		cr_assert_eq(amp_tensor_dtype(y[c]), AMP_F16, "case %d runs in fp16", c);
		n[c] = amp_tensor_numel(y[c]);
		out[c] = malloc((size_t)n[c] * sizeof(uint16_t));
		cr_assert_not_null(out[c]);
		memcpy(out[c], amp_tensor_data(y[c]), (size_t)n[c] * sizeof(uint16_t));
	}
	amp_ctx_free(ctx);
}

static int h16_nan(uint16_t h)
{
	return (h & 0x7c00u) == 0x7c00u && (h & 0x03ffu) != 0;
}

Test(ops_elementwise, fp16_native_is_the_fp32_blocks_bits, .fini = kpath_restore)
{
	if (!kpath_force("avx512"))
		return;
	uint16_t *ref[H16_CASES], *got[H16_CASES];
	int64_t nref[H16_CASES], ngot[H16_CASES];
	h16_run_cases(ref, nref);
	if (!kpath_force("avx512-fp16"))
		return;
	h16_run_cases(got, ngot);
	int64_t compared = 0, nans = 0;
	for (int c = 0; c < H16_CASES; c++) {
		cr_assert_eq(ngot[c], nref[c]);
		for (int64_t i = 0; i < nref[c]; i++) {
			uint16_t g = got[c][i], r = ref[c][i];
			cr_assert(g == r || (h16_nan(g) && h16_nan(r)),
			          "case %d i=%lld: avx512-fp16 %04x, avx512 %04x", c, (long long)i, g, r);
			nans += h16_nan(r);
		}
		compared += nref[c];
		free(ref[c]), free(got[c]);
	}
	cr_assert_gt(nans, 0, "the data must reach NaN results");
	cr_log_info("fp16 ops on avx512-fp16 vs avx512: %lld outputs (%lld NaN), max difference 0",
	            (long long)compared, (long long)nans);
}

/* ---- fp16 gradients on fp16 storage -------------------------------------------------------
 * The backward of an fp16 Add, Sub or Mul whose operand has the output's shape writes that
 * operand's gradient on fp16 storage (a copy, a sign flip, vmul_h16; vadd_h16 or vsub_h16 into
 * a gradient already there).  Each element must be the FP32 computation rounded once, as the
 * FP32 blocks give it, on every path: checked against that rounding computed here, on data
 * with subnormals, values near 65504, signed zeros, Inf and NaN.  a + a and a - a add into the
 * gradient the first operand wrote; in a b + a, Mul adds g b to the gradient Add wrote, with
 * the blocks' one rounding of g + g b (two roundings would differ).  Scale's gradient too. */

enum {
	GH_ADD,
	GH_SUB,
	GH_MUL,
	GH_ADD_SELF,
	GH_SUB_SELF,
	GH_MUL_ADDED,
	GH_SCALE_HALF,  /* Scale by 0.5: fp16 holds it, native on avx512-fp16 */
	GH_SCALE_TENTH, /* by 0.1: it does not, FP32 arithmetic on every path */
	GH_CASES
};

static float h2f(uint16_t h)
{
	return amp_half_f16_to_f32(h);
}

static int h16_same(uint16_t got, uint16_t want)
{
	return got == want || (h16_nan(got) && h16_nan(want));
}

static void check_grad_h16_case(const char *path, int c)
{
	enum { R = 37, C = 129, N = R * C };
	amp_ctx *ctx = opcheck_ctx("force_fp16");
	cr_assert_not_null(ctx);
	uint64_t sa = 11 + (uint64_t)c, sb = 23 + (uint64_t)c, sg = 37 + (uint64_t)c;
	static float va[N], vb[N], seed[N];
	for (int i = 0; i < N; i++) {
		va[i] = h2f(h16_bits(&sa));
		vb[i] = h2f(h16_bits(&sb));
		seed[i] = h2f(h16_bits(&sg));
	}
	amp_tensor *pa, *pb, *a, *b, *y = NULL;
	cr_assert_eq(amp_param_new(ctx, "pa", amp_shape2(R, C), AMP_INIT_ZEROS, 0, &pa), AMP_OK);
	cr_assert_eq(amp_param_new(ctx, "pb", amp_shape2(R, C), AMP_INIT_ZEROS, 0, &pb), AMP_OK);
	cr_assert_eq(amp_param_load(ctx, pa, va), AMP_OK);
	cr_assert_eq(amp_param_load(ctx, pb, vb), AMP_OK);
	cr_assert_eq(amp_step_begin(ctx), AMP_OK);
	/* fp16 activations (Scale by 1 is exact), whose gradients are fp16 */
	cr_assert_eq(amp_scale(ctx, "a", pa, 1.0f, &a), AMP_OK);
	cr_assert_eq(amp_scale(ctx, "b", pb, 1.0f, &b), AMP_OK);
	int self = c == GH_ADD_SELF || c == GH_SUB_SELF;
	amp_tensor *rhs = self ? a : b, *ab = NULL;
	const float s = c == GH_SCALE_HALF ? 0.5f : 0.1f;
	int rc = c == GH_ADD || c == GH_ADD_SELF   ? amp_add(ctx, "y", a, rhs, &y)
	         : c == GH_SUB || c == GH_SUB_SELF ? amp_sub(ctx, "y", a, rhs, &y)
	         : c >= GH_SCALE_HALF              ? amp_scale(ctx, "y", a, s, &y)
	                              : amp_mul(ctx, "ab", a, b, c == GH_MUL ? &y : &ab);
	if (rc == AMP_OK && c == GH_MUL_ADDED)
		rc = amp_add(ctx, "y", ab, a, &y);
	cr_assert_eq(rc, AMP_OK, "%s", amp_ctx_error(ctx));
	cr_assert_eq(amp_tensor_dtype(y), AMP_F16);
	cr_assert_eq(amp_backward_seeded(ctx, y, seed), AMP_OK, "%s", amp_ctx_error(ctx));
	cr_assert(a->grad && a->grad->dtype == AMP_F16, "a's gradient is fp16");
	const uint16_t *ad = a->data, *bd = b->data, *ga = a->grad->data;
	const uint16_t *gb = self || c >= GH_SCALE_HALF ? NULL : b->grad->data;
	for (int i = 0; i < N; i++) {
		float g = seed[i], x = h2f(ad[i]), z = h2f(bd[i]);
		uint16_t wa, wb = 0;
		switch (c) {
		case GH_ADD: wa = wb = amp_half_f32_to_f16(g); break;
		case GH_SUB:
			wa = amp_half_f32_to_f16(g);
			wb = amp_half_f32_to_f16(-g);
			break;
		case GH_MUL:
			wa = amp_half_f32_to_f16(g * z);
			wb = amp_half_f32_to_f16(g * x);
			break;
		case GH_MUL_ADDED:
			wa = amp_half_f32_to_f16(g + g * z);
			wb = amp_half_f32_to_f16(g * x);
			break;
		case GH_ADD_SELF: wa = amp_half_f32_to_f16(g + g); break;
		case GH_SUB_SELF: wa = amp_half_f32_to_f16(g + -g); break;
		default: wa = amp_half_f32_to_f16(g * s); break;
		}
		cr_assert(h16_same(ga[i], wa),
		          "%s case %d i=%d: da %04x, want %04x (g %a, a %a, b %a)", path, c, i,
		          ga[i], wa, (double)g, (double)x, (double)z);
		if (gb)
			cr_assert(h16_same(gb[i], wb), "%s case %d i=%d: db %04x, want %04x", path,
			          c, i, gb[i], wb);
	}
	amp_ctx_free(ctx);
}

static void check_grad_h16(const char *path)
{
	if (!kpath_force(path))
		return;
	for (int c = 0; c < GH_CASES; c++)
		check_grad_h16_case(path, c);
}

Test(ops_elementwise, fp16_grad_scalar, .fini = kpath_restore)
{
	check_grad_h16("scalar");
}
Test(ops_elementwise, fp16_grad_avx512, .fini = kpath_restore)
{
	check_grad_h16("avx512");
}
Test(ops_elementwise, fp16_grad_avx512_fp16, .fini = kpath_restore)
{
	check_grad_h16("avx512-fp16");
}

/* test_layer_kernels.c — the layer kernels of kernels.h (ReLU on fp32 and half bits, GELU,
 * im2col, its adjoint, max pooling) on every kernel path, against plain reference loops written
 * here from the definitions (GELU: FP64, and the scalar path's bits): bit-exact results, no
 * write outside the output, NaN, -0 and ties.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "amp_half.h"
#include "kernels/kernels.h"
#include "kpath.h"

static uint64_t rng_state;

static uint32_t rng_u32(void)
{
	rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
	return (uint32_t)(rng_state >> 33);
}

static uint32_t bits_f32(float f)
{
	uint32_t u;
	memcpy(&u, &f, sizeof u);
	return u;
}

static float f32_bits(uint32_t u)
{
	float f;
	memcpy(&f, &u, sizeof f);
	return f;
}

/* A value of the kind that trips a select: small integers (ties), signed zeros, NaN, Inf. */
static float tricky(void)
{
	switch (rng_u32() % 16) {
	case 0: return -0.0f;
	case 1: return 0.0f;
	case 2: return f32_bits(0x7fc00000u | (rng_u32() & 0xffff0000u & 0x003f0000u)); /* NaN */
	case 3: return f32_bits(0xffc00000u);                                            /* -NaN */
	case 4: return rng_u32() & 1 ? INFINITY : -INFINITY;
	case 5: return (float)((int)(rng_u32() % 5) - 2); /* ties */
	default: return ((float)(rng_u32() % 20001) - 10000.0f) / 1000.0f;
	}
}

/* x: (n) in dtype dt's storage: fp32 values, or the half bits of tricky values. */
static void fill(amp_dtype dt, void *x, int64_t n)
{
	for (int64_t i = 0; i < n; i++) {
		float v = tricky();
		if (dt == AMP_F32)
			((float *)x)[i] = v;
		else if (dt == AMP_BF16)
			((uint16_t *)x)[i] = amp_half_f32_to_bf16(v);
		else
			((uint16_t *)x)[i] = amp_half_f32_to_f16(v);
	}
}

static float value_at(amp_dtype dt, const void *x, int64_t i)
{
	if (dt == AMP_F32)
		return ((const float *)x)[i];
	uint16_t h = ((const uint16_t *)x)[i];
	return dt == AMP_BF16 ? amp_half_bf16_to_f32(h) : amp_half_f16_to_f32(h);
}

static uint32_t raw_at(amp_dtype dt, const void *x, int64_t i)
{
	return dt == AMP_F32 ? bits_f32(((const float *)x)[i]) : ((const uint16_t *)x)[i];
}

static size_t esize(amp_dtype dt)
{
	return dt == AMP_F32 ? 4 : 2;
}

static const amp_dtype dtypes[] = {AMP_F32, AMP_BF16, AMP_F16};
static const char *const dtype_names[] = {"fp32", "bf16", "fp16"};

#define GUARD 64 /* elements past each output that must stay untouched */

/* The engine a path's half kernels must report for dtype dt: native fp16 arithmetic only for
 * fp16 on avx512-fp16, else the path's FP32 engine (scalar C on scalar). */
static amp_engine engine_of(const char *path, amp_dtype dt)
{
	if (strcmp(path, "scalar") == 0)
		return AMP_ENGINE_SCALAR;
	return dt == AMP_F16 && strcmp(path, "avx512-fp16") == 0 ? AMP_ENGINE_AVX512_FP16
	                                                         : AMP_ENGINE_FP32_FMA;
}

/* ---- ReLU --------------------------------------------------------------------------------- */

static void check_relu(const char *path)
{
	if (!kpath_force(path))
		return;
	rng_state = 7;
	for (int d = 0; d < 3; d++) {
		amp_dtype dt = dtypes[d];
		size_t es = esize(dt);
		uint32_t inf = dt == AMP_F16 ? 0x7c00u : 0x7f80u;
		for (int64_t n = 0; n < 300; n += n < 70 ? 1 : 37) {
			char *x = malloc((size_t)(n + GUARD) * es), *g = malloc((size_t)(n + GUARD) * es);
			char *y = malloc((size_t)(n + GUARD) * es), *dx = malloc((size_t)(n + GUARD) * es);
			cr_assert(x && g && y && dx);
			fill(dt, x, n);
			fill(dt, g, n);
			memset(y, 0xa5, (size_t)(n + GUARD) * es);
			memset(dx, 0xa5, (size_t)(n + GUARD) * es);
			if (dt == AMP_F32) {
				amp_relu_f32((float *)x, (float *)y, n);
				amp_relu_grad_f32((float *)x, (float *)g, (float *)dx, n);
			} else {
				amp_engine e = amp_relu_h16((uint16_t *)x, (uint16_t *)y, n, (uint16_t)inf);
				cr_assert_eq(e, engine_of(path, dt), "%s %s relu engine %s", path,
				             dtype_names[d], amp_engine_name(e));
				e = amp_relu_grad_h16((uint16_t *)x, (uint16_t *)g, (uint16_t *)dx, n,
				                      (uint16_t)inf);
				cr_assert_eq(e, engine_of(path, dt), "%s %s relu grad engine %s", path,
				             dtype_names[d], amp_engine_name(e));
			}
			for (int64_t i = 0; i < n; i++) {
				float v = value_at(dt, x, i);
				/* y: x itself unless x < 0 (NaN and -0 pass through); dx: g where x > 0 */
				uint32_t want_y = v < 0.0f ? 0u : raw_at(dt, x, i);
				uint32_t want_dx = v > 0.0f ? raw_at(dt, g, i) : 0u;
				cr_assert_eq(raw_at(dt, y, i), want_y, "%s %s relu n=%lld i=%lld x=%g", path,
				             dtype_names[d], (long long)n, (long long)i, (double)v);
				cr_assert_eq(raw_at(dt, dx, i), want_dx, "%s %s relu grad n=%lld i=%lld x=%g",
				             path, dtype_names[d], (long long)n, (long long)i, (double)v);
			}
			for (size_t b = (size_t)n * es; b < (size_t)(n + GUARD) * es; b++)
				cr_assert(y[b] == (char)0xa5 && dx[b] == (char)0xa5,
				          "%s %s relu n=%lld wrote past the end", path, dtype_names[d],
				          (long long)n);
			free(x), free(g), free(y), free(dx);
		}
	}
}

/* ---- GELU ---------------------------------------------------------------------------------- */

/* The tanh approximation and its derivative in FP64. */
static void gelu_fp64(double x, double *y, double *d)
{
	const double k = 0.7978845608028654, a = 0.044715;
	double t = tanh(k * (x + a * x * x * x));
	*y = 0.5 * x * (1 + t);
	*d = 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * k * (1 + 3 * a * x * x);
}

/* GELU forward and backward on the path: within FP32 rounding of FP64 on a dense grid of
 * [-12, 12], the formula's limits at the special values, the bits of the scalar path on every
 * input (the grid, tricky values, every length up to 70 and past it), in place too, and nothing
 * written past the end. */
static void check_gelu(const char *path)
{
	if (!kpath_force(path))
		return;
	enum { GRID = 24001, SPECIAL = 10, N = GRID + SPECIAL + 300 };
	static float x[N], g[N], y[N + GUARD], dx[N + GUARD], y0[N], dx0[N], t[N];
	const float special[SPECIAL] = {NAN,  INFINITY, -INFINITY, 1e30f,  -1e30f,
	                                0.0f, -0.0f,    1e-30f,    -50.0f, 0x1p-140f};
	rng_state = 11;
	for (int i = 0; i < GRID; i++)
		x[i] = -12.0f + 0.001f * (float)i;
	for (int i = 0; i < SPECIAL; i++)
		x[GRID + i] = special[i];
	for (int i = GRID + SPECIAL; i < N; i++)
		x[i] = tricky();
	for (int i = 0; i < N; i++)
		g[i] = i % 3 == 0 ? 1.0f : tricky();
	memset(y, 0xa5, sizeof y);
	memset(dx, 0xa5, sizeof dx);
	amp_gelu_f32(x, y, N);
	amp_gelu_grad_f32(x, g, dx, N);
	for (int i = 0; i < GUARD; i++)
		cr_assert(bits_f32(y[N + i]) == 0xa5a5a5a5u && bits_f32(dx[N + i]) == 0xa5a5a5a5u,
		          "%s: gelu wrote past the end", path);
	double worst_y = 0, worst_d = 0;
	for (int i = 0; i < GRID; i++) {
		double yr, dr;
		gelu_fp64(x[i], &yr, &dr);
		worst_y = fmax(worst_y, fabs((double)y[i] - yr) / fmax(1.0, fabs(yr)));
		worst_d =
		    fmax(worst_d, fabs((double)dx[i] / (double)g[i] - dr) / fmax(1.0, fabs(dr)));
	}
	cr_expect(worst_y <= 1e-6 && worst_d <= 1e-6,
	          "%s: gelu max err %.3g, derivative %.3g vs FP64 (tol 1e-6)", path, worst_y,
	          worst_d);
	/* the limits: saturated ends, NaN kept; -Inf gives NaN as the formula does (-Inf times a
	 * saturated 0); g is 1 at these indexes (i % 3 == 0) or not */
	const float *ys = y + GRID, *ds = dx + GRID, *gs = g + GRID;
	const float want_y[SPECIAL] = {NAN,  INFINITY, NAN,      1e30f, 0.0f,
	                               0.0f, 0.0f,     0.5e-30f, 0.0f,  0x1p-141f};
	const float want_d[SPECIAL] = {NAN, 1.0f, 0.0f, 1.0f, 0.0f, 0.5f, 0.5f, 0.5f, 0.0f, 0.5f};
	for (int i = 0; i < SPECIAL; i++) {
		float wd = want_d[i] * gs[i];
		cr_expect(isnan(want_y[i]) ? isnan(ys[i]) : ys[i] == want_y[i],
		          "%s: gelu(%a) = %a, want %a", path, (double)special[i], (double)ys[i],
		          (double)want_y[i]);
		cr_expect(isnan(wd) ? isnan(ds[i]) : ds[i] == wd,
		          "%s: gelu'(%a) * %a = %a, want %a", path, (double)special[i],
		          (double)gs[i], (double)ds[i], (double)wd);
	}
	/* in place: the same bits */
	memcpy(t, x, sizeof t);
	amp_gelu_f32(t, t, N);
	cr_assert(memcmp(t, y, sizeof t) == 0, "%s: gelu in place differs", path);
	memcpy(t, g, sizeof t);
	amp_gelu_grad_f32(x, t, t, N);
	cr_assert(memcmp(t, dx, sizeof t) == 0, "%s: gelu grad in place differs", path);
	/* the scalar path's bits, on the whole input and on every short length (the tails) */
	cr_assert_geq(amp_kernels_select("scalar"), 0);
	amp_gelu_f32(x, y0, N);
	amp_gelu_grad_f32(x, g, dx0, N);
	for (int i = 0; i < N; i++)
		cr_assert(bits_f32(y[i]) == bits_f32(y0[i]) && bits_f32(dx[i]) == bits_f32(dx0[i]),
		          "%s: gelu(%a) = %a, gelu' %a; the scalar path %a, %a", path, (double)x[i],
		          (double)y[i], (double)dx[i], (double)y0[i], (double)dx0[i]);
	for (int64_t n = 1; n <= 70; n++) {
		const float *xs = x + GRID + SPECIAL + n, *gn = g + GRID + SPECIAL + n;
		cr_assert_geq(amp_kernels_select(path), 0);
		memset(y, 0xa5, (size_t)(n + GUARD) * sizeof(float));
		amp_gelu_f32(xs, y, n);
		amp_gelu_grad_f32(xs, gn, dx, n);
		cr_assert_geq(amp_kernels_select("scalar"), 0);
		amp_gelu_f32(xs, y0, n);
		amp_gelu_grad_f32(xs, gn, dx0, n);
		cr_assert(memcmp(y, y0, (size_t)n * sizeof(float)) == 0 &&
		              memcmp(dx, dx0, (size_t)n * sizeof(float)) == 0,
		          "%s: gelu of %lld elements differs from the scalar path", path,
		          (long long)n);
		cr_assert(bits_f32(y[n]) == 0xa5a5a5a5u, "%s: gelu of %lld wrote past the end",
		          path, (long long)n);
	}
}

/* ---- im2col and col2im -------------------------------------------------------------------- */

typedef struct geo {
	int64_t C, H, W, K, stride, pad;
} geo;

static const geo geos[] = {
    {1, 28, 28, 3, 1, 1},
    {3, 14, 14, 3, 1, 1},
    {2, 5, 7, 3, 1, 0},
    {2, 9, 40, 3, 1, 2},
    {1, 6, 33, 5, 1, 2},
    {2, 8, 8, 3, 2, 1},
    {1, 11, 70, 1, 1, 0},
    {2, 7, 65, 3, 1, 1},
    /* "same" convolutions whose rows are shorter than a vector, down to one pixel */
    {16, 14, 14, 3, 1, 1},
    {2, 9, 3, 3, 1, 1},
    {1, 40, 1, 3, 1, 1},
    {3, 5, 32, 7, 1, 3},
    {2, 2, 9, 7, 1, 3},
};

static amp_conv_shape shape_of(const geo *g)
{
	amp_conv_shape s = {.C = g->C, .H = g->H, .W = g->W, .KH = g->K, .KW = g->K,
	                    .stride = g->stride, .pad = g->pad};
	s.OH = (g->H + 2 * g->pad - g->K) / g->stride + 1;
	s.OW = (g->W + 2 * g->pad - g->K) / g->stride + 1;
	return s;
}

/* The input element filter tap (c,kh,kw) reads for output (oh,ow), or -1 in the padding. */
static int64_t source(const amp_conv_shape *s, int64_t c, int64_t kh, int64_t kw, int64_t oh,
                      int64_t ow)
{
	int64_t ih = oh * s->stride - s->pad + kh, iw = ow * s->stride - s->pad + kw;
	if (ih < 0 || ih >= s->H || iw < 0 || iw >= s->W)
		return -1;
	return (c * s->H + ih) * s->W + iw;
}

static void check_im2col(const char *path)
{
	if (!kpath_force(path))
		return;
	rng_state = 11;
	for (size_t gi = 0; gi < sizeof geos / sizeof *geos; gi++) {
		amp_conv_shape s = shape_of(&geos[gi]);
		int64_t nx = s.C * s.H * s.W, rows = s.C * s.KH * s.KW, ohw = s.OH * s.OW;
		for (int d = 0; d < 3; d++) {
			amp_dtype dt = dtypes[d];
			size_t es = esize(dt);
			char *x = malloc((size_t)nx * es);
			char *col = malloc((size_t)(rows * ohw + GUARD) * es);
			cr_assert(x && col);
			fill(dt, x, nx);
			memset(col, 0xa5, (size_t)(rows * ohw + GUARD) * es);
			amp_im2col(&s, es, x, col);
			for (int64_t c = 0; c < s.C; c++)
				for (int64_t kh = 0; kh < s.KH; kh++)
					for (int64_t kw = 0; kw < s.KW; kw++)
						for (int64_t oh = 0; oh < s.OH; oh++)
							for (int64_t ow = 0; ow < s.OW; ow++) {
								int64_t r = (c * s.KH + kh) * s.KW + kw;
								int64_t at = r * ohw + oh * s.OW + ow;
								int64_t src = source(&s, c, kh, kw, oh, ow);
								uint32_t want = src < 0 ? 0u : raw_at(dt, x, src);
								cr_assert_eq(raw_at(dt, col, at), want,
								             "%s %s geometry %zu: row %lld column %lld",
								             path, dtype_names[d], gi, (long long)r,
								             (long long)(oh * s.OW + ow));
							}
			for (size_t b = (size_t)(rows * ohw) * es; b < (size_t)(rows * ohw + GUARD) * es;
			     b++)
				cr_assert(col[b] == (char)0xa5, "%s %s geometry %zu: im2col wrote past col",
				          path, dtype_names[d], gi);
			free(x), free(col);
		}
		/* col2im: dx += each entry at its pixel, in (kh, kw) order, the first sum from dx */
		float *col = malloc((size_t)(rows * ohw) * sizeof(float));
		float *dx = malloc((size_t)(nx + GUARD) * sizeof(float));
		float *want = malloc((size_t)nx * sizeof(float));
		cr_assert(col && dx && want);
		fill(AMP_F32, col, rows * ohw);
		for (int64_t i = 0; i < rows * ohw; i++) /* finite entries: sums to compare bitwise */
			if (!isfinite(col[i]))
				col[i] = -0.0f;
		for (int64_t i = 0; i < nx; i++)
			dx[i] = want[i] = i % 3 ? ((float)(rng_u32() % 200) - 100.0f) / 64.0f : -0.0f;
		for (int64_t i = nx; i < nx + GUARD; i++)
			dx[i] = 12345.0f;
		for (int64_t c = 0; c < s.C; c++)
			for (int64_t kh = 0; kh < s.KH; kh++)
				for (int64_t kw = 0; kw < s.KW; kw++)
					for (int64_t oh = 0; oh < s.OH; oh++)
						for (int64_t ow = 0; ow < s.OW; ow++) {
							int64_t src = source(&s, c, kh, kw, oh, ow);
							if (src >= 0)
								want[src] += col[((c * s.KH + kh) * s.KW + kw) * ohw +
								                  oh * s.OW + ow];
						}
		amp_col2im_add_f32(&s, col, dx);
		for (int64_t i = 0; i < nx; i++)
			cr_assert_eq(bits_f32(dx[i]), bits_f32(want[i]),
			             "%s geometry %zu: col2im pixel %lld: %.9g, want %.9g", path, gi,
			             (long long)i, (double)dx[i], (double)want[i]);
		for (int64_t i = nx; i < nx + GUARD; i++)
			cr_assert_eq(dx[i], 12345.0f, "%s geometry %zu: col2im wrote past dx", path, gi);
		free(col), free(dx), free(want);
	}
}

/* ---- max pooling --------------------------------------------------------------------------- */

static void check_maxpool(const char *path)
{
	if (!kpath_force(path))
		return;
	rng_state = 13;
	static const int64_t planes[][4] = {
	    /* H, W, k, stride */
	    {28, 28, 2, 2}, {14, 14, 2, 2}, {7, 7, 2, 2}, {5, 67, 2, 2},
	    {4, 40, 2, 2},  {9, 9, 3, 2},   {6, 8, 3, 3}, {5, 5, 1, 1},
	    {3, 200, 2, 2}, {2, 129, 2, 2}, /* several chunks of 32 outputs, odd widths */
	};
	for (size_t pi = 0; pi < sizeof planes / sizeof *planes; pi++) {
		int64_t H = planes[pi][0], W = planes[pi][1];
		int k = (int)planes[pi][2], stride = (int)planes[pi][3];
		int64_t OH = (H - k) / stride + 1, OW = (W - k) / stride + 1;
		for (int d = 0; d < 3; d++) {
			amp_dtype dt = dtypes[d];
			size_t es = esize(dt);
			char *x = malloc((size_t)(H * W) * es), *y = malloc((size_t)(OH * OW + GUARD) * es);
			int32_t *arg = malloc((size_t)(OH * OW + GUARD) * sizeof(int32_t));
			cr_assert(x && y && arg);
			fill(dt, x, H * W);
			memset(y, 0xa5, (size_t)(OH * OW + GUARD) * es);
			memset(arg, 0xa5, (size_t)(OH * OW + GUARD) * sizeof(int32_t));
			amp_engine e = amp_maxpool_plane(dt, x, W, k, stride, OH, OW, y, arg);
			/* fp16 2x2 windows at stride 2 are compared in fp16 where the path can */
			amp_engine want_e = engine_of(path, k == 2 && stride == 2 ? dt : AMP_F32);
			cr_assert_eq(e, want_e, "%s %s plane %zu: engine %s", path, dtype_names[d], pi,
			             amp_engine_name(e));
			for (int64_t oh = 0; oh < OH; oh++)
				for (int64_t ow = 0; ow < OW; ow++) {
					/* row-major scan: a larger value, or the window's first NaN, wins */
					int64_t best = oh * stride * W + ow * stride;
					for (int i = 0; i < k; i++)
						for (int j = 0; j < k; j++) {
							int64_t at = (oh * stride + i) * W + ow * stride + j;
							float v = value_at(dt, x, at), bv = value_at(dt, x, best);
							if (v > bv || (isnan(v) && !isnan(bv)))
								best = at;
						}
					int64_t o = oh * OW + ow;
					cr_assert_eq(arg[o], best, "%s %s plane %zu: window (%lld,%lld) argmax %d, "
					             "want %lld", path, dtype_names[d], pi, (long long)oh,
					             (long long)ow, arg[o], (long long)best);
					cr_assert_eq(raw_at(dt, y, o), raw_at(dt, x, best),
					             "%s %s plane %zu: window (%lld,%lld) value", path,
					             dtype_names[d], pi, (long long)oh, (long long)ow);
				}
			for (size_t b = (size_t)(OH * OW) * es; b < (size_t)(OH * OW + GUARD) * es; b++)
				cr_assert(y[b] == (char)0xa5, "%s %s plane %zu: wrote past y", path,
				          dtype_names[d], pi);
			cr_assert_eq(arg[OH * OW], (int32_t)0xa5a5a5a5, "%s: wrote past arg", path);
			free(x), free(y), free(arg);
		}
	}
}

#define LAYER_TESTS(name, fn)                                                            \
	Test(layer, name##_scalar, .fini = kpath_restore) { fn("scalar"); }              \
	Test(layer, name##_avx2, .fini = kpath_restore) { fn("avx2"); }                  \
	Test(layer, name##_avx512, .fini = kpath_restore) { fn("avx512"); }              \
	Test(layer, name##_avx512_bf16, .fini = kpath_restore) { fn("avx512-bf16"); }    \
	Test(layer, name##_avx512_fp16, .fini = kpath_restore) { fn("avx512-fp16"); }    \
	Test(layer, name##_amx_bf16, .fini = kpath_restore) { fn("amx-bf16"); }

LAYER_TESTS(relu, check_relu)
LAYER_TESTS(gelu, check_gelu)
LAYER_TESTS(im2col, check_im2col)
LAYER_TESTS(maxpool, check_maxpool)

/* nn_impl.h — the layer kernels that are not GEMMs: ReLU forward and backward on fp32 and on
 * 16-bit halves, GELU forward and backward on fp32, the im2col copy and its adjoint, and max
 * pooling.  Written once in plain C (GCC vector extensions where the loop needs them) and
 * included by each path file after its conversions (cvt_h2f, cvt_b2f), so that its target
 * pragma decides the instructions.
 * Every path gives the same bits: these kernels only select, copy and add in one fixed order,
 * or (GELU) run one sequence of IEEE operations on every lane.
 */
#include <stdint.h>
#include <string.h>

#include "amp_half.h"

/* ---- ReLU ----------------------------------------------------------------------------------
 * A half's sign is its top bit and its magnitude bits order like integers, so x < 0 on the
 * bits is "sign set, magnitude in (0, inf]" and x > 0 is "bits in [1, inf]", where inf is the
 * dtype's +Inf pattern (0x7c00 fp16, 0x7f80 bf16): NaN and -0 are neither, as in fp32. */

/* x: (n) fp32 -> y: (n) fp32, x < 0 ? 0 : x (NaN and -0 pass through). */
static void relu_f32(const float *restrict x, float *restrict y, int64_t n)
{
	for (int64_t i = 0; i < n; i++)
		y[i] = x[i] < 0.0f ? 0.0f : x[i];
}

/* x: (n) half bits -> y: (n), the same rule on the bits. */
static void relu_h16(const uint16_t *restrict x, uint16_t *restrict y, int64_t n, uint16_t inf)
{
	const uint16_t neg_inf = (uint16_t)(0x8000u | inf);
	for (int64_t i = 0; i < n; i++) {
		uint16_t v = x[i];
		y[i] = v > 0x8000u && v <= neg_inf ? 0 : v;
	}
}

/* x, g: (n) fp32 -> dx: (n) fp32, x > 0 ? g : 0. */
static void relu_grad_f32(const float *restrict x, const float *restrict g, float *restrict dx,
                          int64_t n)
{
	for (int64_t i = 0; i < n; i++) {
		const float gi = g[i]; /* loaded unconditionally: a select, not a branch */
		dx[i] = x[i] > 0.0f ? gi : 0.0f;
	}
}

/* x, g: (n) half bits of one dtype -> dx: (n) of that dtype, x > 0 ? g : +0. */
static void relu_grad_h16(const uint16_t *restrict x, const uint16_t *restrict g,
                          uint16_t *restrict dx, int64_t n, uint16_t inf)
{
	for (int64_t i = 0; i < n; i++) {
		const uint16_t gi = g[i], v = x[i];
		dx[i] = v >= 1u && v <= inf ? gi : 0;
	}
}

/* ---- GELU (tanh approximation) -------------------------------------------------------------
 * gelu(x) = 0.5 x (1 + tanh u), u = K (x + A x^3), without libm (glibc's tanhf is a scalar call
 * of some 40 ns, which made GELU a third of a transformer step).  With E = exp(-2|u|),
 *   0.5 (1 + tanh u) = (x >= 0 ? 1 : E) / (1 + E),   sech^2 u = 4 E / (1 + E)^2,
 * both free of the cancellation 1 + tanh u suffers for negative x.  Written once on a vector
 * type (the path's width, 16 bytes on the scalar path: GCC lowers it to what the target has),
 * branch-free (selections on integer masks, which cannot trap) and with no FMA to contract
 * (-std=c11), so every path gives the same bits; a tail shorter than a vector goes through the
 * same code in a padded vector. */
#define GELU_K 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_A 0.044715f
#ifdef VEC_BYTES
#define GELU_VBYTES VEC_BYTES
#else
#define GELU_VBYTES 16
#endif
#define GELU_LANES (GELU_VBYTES / 4)
typedef float gelu_vf __attribute__((vector_size(GELU_VBYTES)));
typedef uint32_t gelu_vu __attribute__((vector_size(GELU_VBYTES)));

/* exp(v) for v in [-80, 0] within 2^-23: n = round(v log2 e) (read from the low mantissa bits
 * of v log2 e + 1.5 * 2^23), r = v - n ln 2 in two parts, exp(r) by its Taylor polynomial of
 * degree 7 on |r| <= ln2 / 2, and 2^n written into the exponent bits. */
static inline gelu_vf gelu_exp_nonpos(gelu_vf v)
{
	const float log2e = 1.44269504088896341f, ln2_hi = 0.693145751953125f,
	            ln2_lo = 1.42860682030941723e-6f, shifter = 12582912.0f;
	gelu_vf t = v * log2e + shifter;
	gelu_vf nf = t - shifter;
	gelu_vf r = (v - nf * ln2_hi) - nf * ln2_lo;
	gelu_vf p = r * (1.0f / 5040) + 1.0f / 720;
	p = p * r + 1.0f / 120;
	p = p * r + 1.0f / 24;
	p = p * r + 1.0f / 6;
	p = p * r + 0.5f;
	p = p * r + 1.0f;
	p = p * r + 1.0f;
	return p * (gelu_vf)((((gelu_vu)t - 0x4B400000u) + 127u) << 23);
}

/* E = exp(-2|u|) (0 past |u| = 40, where tanh u is +-1 in FP32, and for a NaN x), sel = 1 for
 * x >= 0 and E for x < 0 (on the sign bit: -0 counts as negative, E being 1 there), sat all
 * ones where E was set to 0. */
typedef struct gelu_parts {
	gelu_vf e, sel;
	gelu_vu sat;
} gelu_parts;

static inline gelu_parts gelu_split(gelu_vf x)
{
	gelu_parts g;
	const uint32_t forty = 0x42200000u; /* 40.0f */
	gelu_vf u = GELU_K * (x + GELU_A * x * x * x);
	gelu_vu ub = (gelu_vu)u & 0x7fffffffu;
	g.sat = (gelu_vu)(ub > forty);
	g.e = gelu_exp_nonpos(-2.0f * (gelu_vf)((ub & ~g.sat) | (forty & g.sat)));
	g.e = (gelu_vf)((gelu_vu)g.e & ~g.sat);
	gelu_vu neg = 0u - ((gelu_vu)x >> 31);
	const gelu_vf one = (gelu_vf){0} + 1.0f;
	g.sel = (gelu_vf)(((gelu_vu)g.e & neg) | ((gelu_vu)one & ~neg));
	return g;
}

static inline gelu_vf gelu_v(gelu_vf x)
{
	gelu_parts g = gelu_split(x);
	return x * g.sel / (1.0f + g.e);
}

/* d/dx of gelu_v (the derivative of the approximation itself, not of the exact GELU):
 * 0.5 (1 + tanh u) + 0.5 x sech^2(u) K (1 + 3 A x^2).  Saturated, the second term is exactly 0
 * (masked: for a huge x it would be 0 * Inf); a NaN x gives NaN. */
static inline gelu_vf gelu_grad_v(gelu_vf x)
{
	gelu_parts g = gelu_split(x);
	gelu_vf d = 1.0f + g.e;
	gelu_vf sech2 = 4.0f * g.e / (d * d);
	gelu_vf inner = 0.5f * x * sech2 * GELU_K * (1.0f + 3.0f * GELU_A * x * x);
	gelu_vu nan = (gelu_vu)(((gelu_vu)x & 0x7fffffffu) > 0x7f800000u);
	return g.sel / d + (gelu_vf)(((gelu_vu)inner & ~g.sat) | ((gelu_vu)x & nan));
}

/* x: (n) fp32 -> y: (n) fp32, gelu(x); y may be x. */
static void gelu_f32(const float *x, float *y, int64_t n)
{
	int64_t i = 0;
	gelu_vf v;
	for (; i + GELU_LANES <= n; i += GELU_LANES) {
		memcpy(&v, x + i, sizeof v);
		v = gelu_v(v);
		memcpy(y + i, &v, sizeof v);
	}
	if (i < n) {
		v = (gelu_vf){0};
		memcpy(&v, x + i, (size_t)(n - i) * sizeof(float));
		v = gelu_v(v);
		memcpy(y + i, &v, (size_t)(n - i) * sizeof(float));
	}
}

/* x, g: (n) fp32 -> dx: (n) fp32, g gelu'(x); dx may be x or g. */
static void gelu_grad_f32(const float *x, const float *g, float *dx, int64_t n)
{
	int64_t i = 0;
	gelu_vf v, w;
	for (; i + GELU_LANES <= n; i += GELU_LANES) {
		memcpy(&v, x + i, sizeof v);
		memcpy(&w, g + i, sizeof w);
		v = w * gelu_grad_v(v);
		memcpy(dx + i, &v, sizeof v);
	}
	if (i < n) {
		v = w = (gelu_vf){0};
		memcpy(&v, x + i, (size_t)(n - i) * sizeof(float));
		memcpy(&w, g + i, (size_t)(n - i) * sizeof(float));
		v = w * gelu_grad_v(v);
		memcpy(dx + i, &v, (size_t)(n - i) * sizeof(float));
	}
}

/* ---- im2col and its adjoint ------------------------------------------------------------ */

/* Output columns [*lo, *hi) of a row whose input column ow * stride - pad + kw is inside the
 * image; the others read padding. */
static void conv_cols(const amp_conv_shape *s, int64_t kw, int64_t *lo, int64_t *hi)
{
	int64_t a = 0, b = s->OW;
	while (a < b && a * s->stride - s->pad + kw < 0)
		a++;
	while (b > a && (b - 1) * s->stride - s->pad + kw >= s->W)
		b--;
	*lo = a;
	*hi = b;
}

/* dst: (n) = src[0], src[stride], ... with lo leading and trail trailing zeros around it;
 * elements of T.  Inline loops: the rows are a few dozen elements, too short for a call. */
#define IM2COL_ROW(T)                                                                     \
	static void im2col_row_##T(T *restrict dst, const T *restrict src, int64_t lo,    \
	                           int64_t n, int64_t trail, int64_t stride)              \
	{                                                                                 \
		for (int64_t i = 0; i < lo; i++)                                          \
			dst[i] = 0;                                                       \
		dst += lo;                                                                \
		if (stride == 1)                                                          \
			for (int64_t i = 0; i < n; i++)                                   \
				dst[i] = src[i];                                          \
		else                                                                      \
			for (int64_t i = 0; i < n; i++)                                   \
				dst[i] = src[i * stride];                                 \
		dst += n;                                                                 \
		for (int64_t i = 0; i < trail; i++)                                       \
			dst[i] = 0;                                                       \
	}
IM2COL_ROW(uint16_t)
IM2COL_ROW(uint32_t)
#undef IM2COL_ROW

/* A "same" convolution (stride 1, output the image's size): row (c,kh,kw) of col is plane c
 * shifted by dh = kh - pad rows and dw = kw - pad columns, the pixels shifted in from outside
 * zeroed.  The run of whole rows the shift keeps is one copy; entries outside it are zero, and
 * so are the |dw| entries at the edge of each row that wrapped round from the next or the
 * previous row.  (A copy that would start before the plane or end after it starts or ends
 * at the plane's edge: the entries it leaves out are such wrapped ones.) */
static void im2col_same(const amp_conv_shape *s, size_t es, const void *x, void *col)
{
	const int64_t W = s->W, hw = s->H * s->W;
	char *dst = col;
	for (int64_t c = 0; c < s->C; c++)
		for (int64_t kh = 0; kh < s->KH; kh++)
			for (int64_t kw = 0; kw < s->KW; kw++, dst += (size_t)hw * es) {
				int64_t dh = kh - s->pad, dw = kw - s->pad, shift = dh * W + dw;
				int64_t lo = dh < 0 ? -dh * W : 0,
				        hi = dh > 0 ? (s->H - dh) * W : hw;
				int64_t a = lo + shift < 0 ? -shift : lo;
				int64_t b = hi + shift > hw ? hw - shift : hi;
				if (b < a) /* a shift past the plane (pad >= H) */
					a = b = 0;
				const char *src = (const char *)x + (size_t)(c * hw + shift) * es;
				memset(dst, 0, (size_t)a * es);
				memcpy(dst + (size_t)a * es, src + (size_t)a * es,
				       (size_t)(b - a) * es);
				memset(dst + (size_t)b * es, 0, (size_t)(hw - b) * es);
				/* columns with ow + dw outside [0, W): the first -dw, last dw */
				int64_t z0 = dw < 0 ? 0 : W - dw, zn = dw < 0 ? -dw : dw;
				for (int64_t r = lo; r < hi; r += W)
					memset(dst + (size_t)(r + z0) * es, 0, (size_t)zn * es);
			}
}

/* x: (C,H,W) one image -> col: (C*KH*KW, OH*OW): row (c,kh,kw), column (oh,ow), padding 0;
 * elements of es bytes (4: fp32, 2: a half), only copied. */
static void im2col(const amp_conv_shape *s, size_t es, const void *x, void *col)
{
	if (s->stride == 1 && s->OH == s->H && s->OW == s->W && s->pad < s->W) {
		im2col_same(s, es, x, col);
		return;
	}
	int64_t ohw = s->OH * s->OW;
	for (int64_t c = 0; c < s->C; c++)
		for (int64_t kh = 0; kh < s->KH; kh++)
			for (int64_t kw = 0; kw < s->KW; kw++) {
				int64_t row = (c * s->KH + kh) * s->KW + kw, lo, hi;
				conv_cols(s, kw, &lo, &hi);
				for (int64_t oh = 0; oh < s->OH; oh++) {
					int64_t ih = oh * s->stride - s->pad + kh;
					int64_t at = row * ohw + oh * s->OW;
					int64_t n = ih < 0 || ih >= s->H ? 0 : hi - lo;
					int64_t l = n ? lo : s->OW;
					/* input offset of output column lo: (c, ih, lo * stride - pad + kw) */
					int64_t from = n ? (c * s->H + ih) * s->W + lo * s->stride - s->pad + kw : 0;
					if (es == 2)
						im2col_row_uint16_t((uint16_t *)col + at, (const uint16_t *)x + from,
						                    l, n, s->OW - l - n, s->stride);
					else
						im2col_row_uint32_t((uint32_t *)col + at, (const uint32_t *)x + from,
						                    l, n, s->OW - l - n, s->stride);
				}
			}
}

/* col: (C*KH*KW, OH*OW) fp32 -> dx: (C,H,W) fp32 += each column entry at the pixel it was
 * read from (the adjoint of im2col), in row order. */
static void col2im_add_f32(const amp_conv_shape *s, const float *col, float *dx)
{
	int64_t ohw = s->OH * s->OW;
	for (int64_t c = 0; c < s->C; c++)
		for (int64_t kh = 0; kh < s->KH; kh++)
			for (int64_t kw = 0; kw < s->KW; kw++) {
				const float *row = col + ((c * s->KH + kh) * s->KW + kw) * ohw;
				int64_t lo, hi;
				conv_cols(s, kw, &lo, &hi);
				for (int64_t oh = 0; oh < s->OH; oh++) {
					int64_t ih = oh * s->stride - s->pad + kh;
					if (ih < 0 || ih >= s->H)
						continue;
					float *restrict d =
					    dx + (c * s->H + ih) * s->W + lo * s->stride - s->pad + kw;
					const float *restrict r = row + oh * s->OW + lo;
					if (s->stride == 1)
						for (int64_t i = 0; i < hi - lo; i++)
							d[i] += r[i];
					else
						for (int64_t i = 0; i < hi - lo; i++)
							d[i * s->stride] += r[i];
				}
			}
}

/* ---- max pooling ----------------------------------------------------------------------- */

/* The running window maximum: v replaces the best bv when it is larger, or when it is the
 * window's first NaN (a NaN best is never replaced), so non-finite values propagate. */
static inline int32_t pool_takes(float v, float bv)
{
	return (int32_t)(v > bv) | ((int32_t)(v != v) & (int32_t)(bv == bv));
}

/* n values of x (dtype dt) from element at -> dst fp32. */
static void pool_load(amp_dtype dt, const void *x, int64_t at, int64_t n, float *dst)
{
	if (dt == AMP_F32)
		memcpy(dst, (const float *)x + at, (size_t)n * sizeof(float));
	else if (dt == AMP_BF16)
		cvt_b2f((const uint16_t *)x + at, dst, n);
	else
		cvt_h2f((const uint16_t *)x + at, dst, n);
}

#define POOL_ROW_MAX 1024 /* widest output row of the two-pass 2x2 window */

/* r: one input row, pairs (r[2j], r[2j+1]) -> m[j] their maximum, i[j] 0 or 1 for which. */
static void pool_pairs(const float *restrict r, int64_t n, float *restrict m,
                       int32_t *restrict i)
{
	for (int64_t j = 0; j < n; j++) {
		float a = r[2 * j], b = r[2 * j + 1];
		int32_t t = pool_takes(b, a);
		m[j] = t ? b : a;
		i[j] = t;
	}
}

/* x: (H,W) one plane of dtype dt -> arg: (OH,OW) the offset in the plane of each k x k
 * window's maximum at stride (the first of equal ones, or the first NaN), y: (OH,OW) the
 * stored value there (bit-exact).  2x2 windows at stride 2 take two passes that vectorize:
 * each row's pairs (the right one wins only when larger, or the first NaN), then the two
 * rows (row 1 only when larger, or the first NaN) — the order of a row-major scan. */
static void maxpool_plane(amp_dtype dt, const void *x, int64_t W, int k, int stride, int64_t OH,
                          int64_t OW, void *y, int32_t *arg)
{
	if (k == 2 && stride == 2 && OW <= POOL_ROW_MAX) {
		float r0[2 * POOL_ROW_MAX], r1[2 * POOL_ROW_MAX], m0[POOL_ROW_MAX], m1[POOL_ROW_MAX];
		int32_t i0[POOL_ROW_MAX], i1[POOL_ROW_MAX];
		for (int64_t oh = 0; oh < OH; oh++) {
			int32_t *ao = arg + oh * OW, base = (int32_t)(2 * oh * W), w = (int32_t)W;
			pool_load(dt, x, 2 * oh * W, 2 * OW, r0);
			pool_load(dt, x, (2 * oh + 1) * W, 2 * OW, r1);
			pool_pairs(r0, OW, m0, i0);
			pool_pairs(r1, OW, m1, i1);
			for (int64_t ow = 0; ow < OW; ow++) {
				int32_t t = pool_takes(m1[ow], m0[ow]);
				ao[ow] = base + 2 * (int32_t)ow + (t ? w + i1[ow] : i0[ow]);
			}
		}
	} else {
		float v[64]; /* one window row at a time */
		for (int64_t oh = 0; oh < OH; oh++)
			for (int64_t ow = 0; ow < OW; ow++) {
				int64_t at0 = oh * stride * W + ow * stride, best = at0;
				float bv;
				pool_load(dt, x, at0, 1, &bv);
				for (int i = 0; i < k; i++)
					for (int j0 = 0; j0 < k; j0 += 64) {
						int nj = k - j0 < 64 ? k - j0 : 64;
						pool_load(dt, x, at0 + i * W + j0, nj, v);
						for (int j = 0; j < nj; j++) {
							int take = pool_takes(v[j], bv);
							best = take ? at0 + i * W + j0 + j : best;
							bv = take ? v[j] : bv;
						}
					}
				arg[oh * OW + ow] = (int32_t)best;
			}
	}
	/* the winners' stored bits, exact in every dtype */
	if (dt == AMP_F32)
		for (int64_t i = 0; i < OH * OW; i++)
			((uint32_t *)y)[i] = ((const uint32_t *)x)[arg[i]];
	else
		for (int64_t i = 0; i < OH * OW; i++)
			((uint16_t *)y)[i] = ((const uint16_t *)x)[arg[i]];
}

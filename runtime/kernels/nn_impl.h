/* nn_impl.h — the layer kernels that are not GEMMs: ReLU forward and backward on fp32 and on
 * 16-bit halves, the im2col copy and its adjoint, and max pooling.  Written once in plain C
 * (GCC vector extensions where the loop needs them) and included by each path file after its
 * conversions (cvt_h2f, cvt_b2f), so that its target pragma decides the instructions.
 * Every path gives the same bits: these kernels only select, copy and add in one fixed order.
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

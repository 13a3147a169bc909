/* vec_impl.h — elementwise fp32 kernels and non-finite counters, written once with GCC vector
 * extensions and included by each path file, whose target pragma decides the instructions.
 * Also the bf16 counter and integer conversions (no bf16 instructions needed).
 * The includer may define VEC_BYTES (16, 32, 64); without it the loops are plain scalar C.
 * No FMA contraction (-std=c11 implies -ffp-contract=off), so every path is bit-identical.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "amp_half.h"

#ifdef VEC_BYTES
#define VEC_F32 (VEC_BYTES / 4)
#define VEC_F16 (VEC_BYTES / 2)
typedef float vec_f32 __attribute__((vector_size(VEC_BYTES)));
typedef int32_t vec_i32 __attribute__((vector_size(VEC_BYTES)));
typedef int16_t vec_i16 __attribute__((vector_size(VEC_BYTES)));

static inline vec_f32 vload_f32(const float *p)
{
	vec_f32 v;
	memcpy(&v, p, sizeof v);
	return v;
}

static inline void vstore_f32(float *p, vec_f32 v)
{
	memcpy(p, &v, sizeof v);
}
#endif

/* a, b, dst: (n) fp32; dst may be a or b. */
static void vadd_f32(const float *a, const float *b, float *dst, int64_t n)
{
	int64_t i = 0;
#ifdef VEC_BYTES
	for (; i + VEC_F32 <= n; i += VEC_F32)
		vstore_f32(dst + i, vload_f32(a + i) + vload_f32(b + i));
#endif
	for (; i < n; i++)
		dst[i] = a[i] + b[i];
}

/* a, b, dst: (n) fp32, dst = a - b; dst may be a or b. */
static void vsub_f32(const float *a, const float *b, float *dst, int64_t n)
{
	int64_t i = 0;
#ifdef VEC_BYTES
	for (; i + VEC_F32 <= n; i += VEC_F32)
		vstore_f32(dst + i, vload_f32(a + i) - vload_f32(b + i));
#endif
	for (; i < n; i++)
		dst[i] = a[i] - b[i];
}

/* a, b, dst: (n) fp32; dst may be a or b. */
static void vmul_f32(const float *a, const float *b, float *dst, int64_t n)
{
	int64_t i = 0;
#ifdef VEC_BYTES
	for (; i + VEC_F32 <= n; i += VEC_F32)
		vstore_f32(dst + i, vload_f32(a + i) * vload_f32(b + i));
#endif
	for (; i < n; i++)
		dst[i] = a[i] * b[i];
}

/* a, dst: (n) fp32; dst may be a. */
static void vscale_f32(const float *a, float s, float *dst, int64_t n)
{
	int64_t i = 0;
#ifdef VEC_BYTES
	for (; i + VEC_F32 <= n; i += VEC_F32)
		vstore_f32(dst + i, vload_f32(a + i) * s);
#endif
	for (; i < n; i++)
		dst[i] = a[i] * s;
}

/* a, dst: (n) fp32; dst += s * a, rounded twice (no FMA) like the scalar path. */
static void vaxpy_f32(float s, const float *a, float *dst, int64_t n)
{
	int64_t i = 0;
#ifdef VEC_BYTES
	for (; i + VEC_F32 <= n; i += VEC_F32)
		vstore_f32(dst + i, vload_f32(dst + i) + vload_f32(a + i) * s);
#endif
	for (; i < n; i++)
		dst[i] = dst[i] + a[i] * s;
}

/* The optimizers' update of n parameters (optim.c): g[i] * inv is the unscaled gradient
 * (inv 1: g[i] as it is, not multiplied); the same operations in the same order on every path:
 *   SGD, m NULL (no momentum): w = w - lr (g + wd w)
 *   SGD with momentum:        m = mu m + g + wd w;  w = w - lr m
 * g is only read. */
static void sgd_update_f32(float *w, float *m, const float *g, float inv, float lr, float mu,
                           float wd, int64_t n)
{
	int64_t i = 0;
#ifdef VEC_BYTES
	for (; i + VEC_F32 <= n; i += VEC_F32) {
		vec_f32 gv = vload_f32(g + i), wv = vload_f32(w + i);
		if (inv != 1.0f)
			gv = gv * inv;
		if (m) {
			vec_f32 mv = mu * vload_f32(m + i) + gv + wd * wv;
			vstore_f32(m + i, mv);
			vstore_f32(w + i, wv - lr * mv);
		} else {
			vstore_f32(w + i, wv - lr * (gv + wd * wv));
		}
	}
#endif
	for (; i < n; i++) {
		float gi = inv != 1.0f ? g[i] * inv : g[i];
		if (m) {
			m[i] = mu * m[i] + gi + wd * w[i];
			w[i] -= lr * m[i];
		} else {
			w[i] -= lr * (gi + wd * w[i]);
		}
	}
}

#ifdef VEC_BYTES
/* IEEE square roots, lane by lane (correctly rounded, as sqrtf). */
static inline vec_f32 vsqrt_f32(vec_f32 x)
{
#if VEC_BYTES == 64
	return (vec_f32)_mm512_sqrt_ps((__m512)x);
#elif VEC_BYTES == 32
	return (vec_f32)_mm256_sqrt_ps((__m256)x);
#else
	return (vec_f32)_mm_sqrt_ps((__m128)x);
#endif
}
#endif

/* AdamW (optim.c; c: its coefficients for this step, g as for sgd_update_f32):
 *   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g g
 *   w = w decay - lr (m / c1) / (sqrt(v / c2) + eps) */
static void adamw_update_f32(float *w, float *m, float *v, const float *g, float inv,
                             const amp_adamw_coef *c, int64_t n)
{
	const float b1 = c->beta1, b2 = c->beta2, nb1 = c->one_minus_beta1,
	            nb2 = c->one_minus_beta2, c1 = c->c1, c2 = c->c2, lr = c->lr, eps = c->eps,
	            decay = c->decay;
	int64_t i = 0;
#ifdef VEC_BYTES
	for (; i + VEC_F32 <= n; i += VEC_F32) {
		vec_f32 gv = vload_f32(g + i);
		if (inv != 1.0f)
			gv = gv * inv;
		vec_f32 mv = b1 * vload_f32(m + i) + nb1 * gv;
		vec_f32 vv = b2 * vload_f32(v + i) + nb2 * gv * gv;
		vstore_f32(m + i, mv);
		vstore_f32(v + i, vv);
		vstore_f32(w + i,
		           vload_f32(w + i) * decay - lr * (mv / c1) / (vsqrt_f32(vv / c2) + eps));
	}
#endif
	for (; i < n; i++) {
		float gi = inv != 1.0f ? g[i] * inv : g[i];
		m[i] = b1 * m[i] + nb1 * gi;
		v[i] = b2 * v[i] + nb2 * gi * gi;
		w[i] = w[i] * decay - lr * (m[i] / c1) / (sqrtf(v[i] / c2) + eps);
	}
}

/* a: (n) fp32.  Non-finite means all exponent bits set (Inf or NaN). */
static int64_t count_nonfinite_f32(const float *a, int64_t n)
{
	int64_t count = 0, i = 0;
#ifdef VEC_BYTES
	/* Lanes count in int32; flush them well before they could overflow. */
	while (i + VEC_F32 <= n) {
		int64_t end = n - VEC_F32;
		if (end > i + ((int64_t)1 << 20))
			end = i + ((int64_t)1 << 20);
		vec_i32 acc = {0};
		for (; i <= end; i += VEC_F32) {
			vec_i32 x;
			memcpy(&x, a + i, sizeof x);
			acc -= (x & 0x7f800000) == 0x7f800000;  /* true lanes are -1 */
		}
		for (int l = 0; l < VEC_F32; l++)
			count += acc[l];
	}
#endif
	for (; i < n; i++) {
		uint32_t x;
		memcpy(&x, a + i, sizeof x);
		count += (x & 0x7f800000u) == 0x7f800000u;
	}
	return count;
}

/* a: (n) fp16.  Non-finite means exponent bits == 0x1f (Inf or NaN). */
static int64_t count_nonfinite_f16(const uint16_t *a, int64_t n)
{
	int64_t count = 0, i = 0;
#ifdef VEC_BYTES
	/* Lanes count in int16: flush every 2^14 vectors. */
	while (i + VEC_F16 <= n) {
		int64_t end = n - VEC_F16;
		if (end > i + (int64_t)VEC_F16 * 16384)
			end = i + (int64_t)VEC_F16 * 16384;
		vec_i16 acc = {0};
		for (; i <= end; i += VEC_F16) {
			vec_i16 x;
			memcpy(&x, a + i, sizeof x);
			acc -= (x & 0x7c00) == 0x7c00;
		}
		for (int l = 0; l < VEC_F16; l++)
			count += (uint16_t)acc[l];
	}
#endif
	for (; i < n; i++)
		count += (a[i] & 0x7c00u) == 0x7c00u;
	return count;
}

/* a: (n) bf16.  Non-finite means exponent bits == 0xff (0x7f80 set: Inf or NaN). */
static int64_t count_nonfinite_bf16(const uint16_t *a, int64_t n)
{
	int64_t count = 0, i = 0;
#ifdef VEC_BYTES
	/* Lanes count in int16: flush every 2^14 vectors. */
	while (i + VEC_F16 <= n) {
		int64_t end = n - VEC_F16;
		if (end > i + (int64_t)VEC_F16 * 16384)
			end = i + (int64_t)VEC_F16 * 16384;
		vec_i16 acc = {0};
		for (; i <= end; i += VEC_F16) {
			vec_i16 x;
			memcpy(&x, a + i, sizeof x);
			acc -= (x & 0x7f80) == 0x7f80;
		}
		for (int l = 0; l < VEC_F16; l++)
			count += (uint16_t)acc[l];
	}
#endif
	for (; i < n; i++)
		count += (a[i] & 0x7f80u) == 0x7f80u;
	return count;
}

/* src: (n) fp32 -> dst: (n) bf16 in integer arithmetic, amp_half_f32_to_bf16 lane by lane:
 * round to nearest even on the 16 dropped bits (subnormals too), NaN quieted (bit 6) with its
 * sign and top payload bits.  Returns the NaN and Inf bf16 written, counted in registers. */
static int64_t cvt_f2b_int(const float *src, uint16_t *dst, int64_t n)
{
	int64_t bad = 0, i = 0;
#ifdef VEC_BYTES
	typedef uint32_t vec_u32 __attribute__((vector_size(VEC_BYTES)));
	typedef uint16_t vec_u16n __attribute__((vector_size(VEC_BYTES / 2)));
	while (i + VEC_F32 <= n) {
		int64_t end = n - VEC_F32;
		if (end > i + ((int64_t)1 << 20))
			end = i + ((int64_t)1 << 20);
		vec_i32 acc = {0};
		for (; i <= end; i += VEC_F32) {
			vec_u32 x;
			memcpy(&x, src + i, sizeof x);
			vec_u32 r = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
			vec_u32 nan = (vec_u32)((x & 0x7fffffffu) > 0x7f800000u);
			r = (r & ~nan) | (((x >> 16) | 0x40u) & nan);
			acc -= (vec_i32)((r & 0x7f80u) == 0x7f80u);
			vec_u16n h = __builtin_convertvector(r, vec_u16n);
			memcpy(dst + i, &h, sizeof h);
		}
		for (int l = 0; l < VEC_F32; l++)
			bad += acc[l];
	}
#endif
	for (; i < n; i++) {
		uint16_t b = amp_half_f32_to_bf16(src[i]);
		dst[i] = b;
		bad += (b & 0x7f80u) == 0x7f80u;
	}
	return bad;
}

/* src: (n) bf16 -> dst: (n) fp32, exact (a shift). */
static void cvt_b2f(const uint16_t *src, float *dst, int64_t n)
{
	int64_t i = 0;
#ifdef VEC_BYTES
	typedef uint32_t vec_u32 __attribute__((vector_size(VEC_BYTES)));
	typedef uint16_t vec_u16n __attribute__((vector_size(VEC_BYTES / 2)));
	for (; i + VEC_F32 <= n; i += VEC_F32) {
		vec_u16n h;
		memcpy(&h, src + i, sizeof h);
		vec_u32 x = __builtin_convertvector(h, vec_u32) << 16;
		memcpy(dst + i, &x, sizeof x);
	}
#endif
	for (; i < n; i++)
		dst[i] = amp_half_bf16_to_f32(src[i]);
}

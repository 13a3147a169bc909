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
typedef uint32_t vec_u32 __attribute__((vector_size(VEC_BYTES)));
typedef uint16_t vec_u16h __attribute__((vector_size(VEC_BYTES / 2))); /* a vec_f32's halves */

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

/* VEC_F32 bf16 at p -> fp32, exact (a shift). */
static inline vec_f32 vwiden_bf16(const uint16_t *p)
{
	vec_u16h h;
	memcpy(&h, p, sizeof h);
	return (vec_f32)(__builtin_convertvector(h, vec_u32) << 16);
}

/* The bits of VEC_F32 fp32 -> their bf16 in the low halves, amp_half_f32_to_bf16 lane by lane:
 * round to nearest even on the 16 dropped bits, NaN quieted (bit 6) with its sign and top
 * payload bits. */
static inline vec_u32 vbf16_of(vec_u32 x)
{
	vec_u32 r = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
	vec_u32 nan = (vec_u32)((x & 0x7fffffffu) > 0x7f800000u);
	return (r & ~nan) | (((x >> 16) | 0x40u) & nan);
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

/* ---- the optimizers' update (optim.c), one pass over memory -------------------------------
 * Each element's gradient is read in its own dtype (fp16 and bf16 widened exactly in
 * registers), the master and the moments are updated, and the new master rounded once into
 * the working copy (io->work, if any) before the next element: no buffer between the steps.
 * The arithmetic is the same on every path (kernels.h).  A vector path defines
 *   VEC_WIDEN_F16(p)      VEC_F32 fp16 at p -> vec_f32 (exact)
 *   VEC_NARROW_F16(p, v)  v rounded to nearest even -> VEC_F32 fp16 at p
 * before it includes this file; bf16 is converted here in integer arithmetic. */

/* fp16 from this magnitude up rounds to Inf (halfway past 65504, ties to the even Inf). */
#define UPD_F16_INF 65520.0f

static inline __attribute__((always_inline)) float upd_g1(const void *g, amp_dtype dt, int64_t i)
{
	if (dt == AMP_F16)
		return amp_half_f16_to_f32(((const uint16_t *)g)[i]);
	if (dt == AMP_BF16)
		return amp_half_bf16_to_f32(((const uint16_t *)g)[i]);
	return ((const float *)g)[i];
}

/* w rounded into work[i] (dt fp16 or bf16); returns 1 if that is Inf or NaN. */
static inline __attribute__((always_inline)) int upd_work1(void *work, amp_dtype dt, int64_t i,
                                                           float w)
{
	uint16_t h;
	if (dt == AMP_F16) {
		h = amp_half_f32_to_f16(w);
		((uint16_t *)work)[i] = h;
		return (h & 0x7c00u) == 0x7c00u;
	}
	h = amp_half_f32_to_bf16(w);
	((uint16_t *)work)[i] = h;
	return (h & 0x7f80u) == 0x7f80u;
}

#ifdef VEC_BYTES
static inline __attribute__((always_inline)) vec_f32 upd_g(const void *g, amp_dtype dt, int64_t i)
{
	if (dt == AMP_F16)
		return VEC_WIDEN_F16((const uint16_t *)g + i);
	if (dt == AMP_BF16)
		return vwiden_bf16((const uint16_t *)g + i);
	return vload_f32((const float *)g + i);
}

/* w rounded into work + i; returns -1 in the lanes whose result is Inf or NaN. */
static inline __attribute__((always_inline)) vec_i32 upd_work(void *work, amp_dtype dt, int64_t i,
                                                              vec_f32 w)
{
	if (dt == AMP_F16) {
		VEC_NARROW_F16((uint16_t *)work + i, w);
		vec_f32 a = (vec_f32)((vec_i32)w & 0x7fffffff);
		return (a < UPD_F16_INF) == 0; /* NaN compares false: counted */
	}
	vec_u32 r = vbf16_of((vec_u32)w);
	vec_u16h h = __builtin_convertvector(r, vec_u16h);
	memcpy((uint16_t *)work + i, &h, sizeof h);
	return (vec_i32)((r & 0x7f80u) == 0x7f80u);
}
#endif

/* Elements ahead of the one being updated that the vector loop prefetches.  In a mixed-
 * precision step nothing but the update reads the masters and the moments (the forward and
 * backward read the working copy), so they arrive from far away (measured: the update of
 * mlp_fashion's 1.86 M masters 17-33 % shorter on the AVX2 path, 4-5 % on AVX-512). */
#define UPD_AHEAD 512

/* Prefetches element i + UPD_AHEAD of the array at p (elements of es bytes), rw 1 for
 * writing, 0 for reading; the address is computed in integers (past the end it is no
 * pointer). */
#define UPD_PREFETCH(p, i, es, rw)                                                                 \
	__builtin_prefetch((const void *)((uintptr_t)(p) + (uintptr_t)(((i) + UPD_AHEAD) * (es))), \
	                   rw)

/* The elements [0, n) of a loop over vectors and then single elements: X(gv, wv, i) for each
 * vector at i (gv: the widened gradient; X sets wv, the new master, and prefetches what it
 * reads, UPD_PREFETCH), then S(gi, wi, i) for each single one; g and work are locals (not
 * io's fields, which a store could alias).  bad += the NaN/Inf values written to the working
 * copy; lanes count in int32, flushed every 2^20 vectors. */
#ifdef VEC_BYTES
#define UPD_VECTORS(g, work, gdt, wdt, n, bad, X)                                                  \
	do {                                                                                       \
		const int64_t ges = gdt == AMP_F32 ? 4 : 2;                                        \
		while (i + VEC_F32 <= (n)) {                                                       \
			int64_t end = (n) - VEC_F32;                                               \
			if (end > i + ((int64_t)1 << 20))                                          \
				end = i + ((int64_t)1 << 20);                                      \
			vec_i32 acc = {0};                                                         \
			for (; i <= end; i += VEC_F32) {                                           \
				UPD_PREFETCH(g, i, ges, 0);                                        \
				if (wdt != AMP_F32)                                                \
					UPD_PREFETCH(work, i, 2, 1);                               \
				vec_f32 gv = upd_g(g, gdt, i), wv;                                 \
				X(gv, wv, i);                                                      \
				if (wdt != AMP_F32)                                                \
					acc -= upd_work(work, wdt, i, wv);                         \
			}                                                                          \
			for (int l = 0; l < VEC_F32; l++)                                          \
				bad += acc[l];                                                     \
		}                                                                                  \
	} while (0)
#else
#define UPD_VECTORS(g, work, gdt, wdt, n, bad, X) ((void)0)
#endif
#define UPD_LOOP(g, work, gdt, wdt, n, bad, X, S)                                                  \
	do {                                                                                       \
		int64_t i = 0;                                                                     \
		UPD_VECTORS(g, work, gdt, wdt, n, bad, X);                                         \
		for (; i < (n); i++) {                                                             \
			float gi = upd_g1(g, gdt, i), wi;                                          \
			S(gi, wi, i);                                                              \
			if (wdt != AMP_F32)                                                        \
				bad += upd_work1(work, wdt, i, wi);                                \
		}                                                                                  \
	} while (0)

/* Calls BODY(gdt, wdt) with both as constants, so that each pair gets a loop of its own (no
 * dtype test per element); wdt AMP_F32 stands for no working copy. */
#define UPD_DISPATCH(io, BODY)                                                                     \
	do {                                                                                       \
		amp_dtype w_ = (io)->work ? (io)->wdt : AMP_F32;                                   \
		if ((io)->gdt == AMP_F16)                                                          \
			return w_ == AMP_F16    ? BODY(AMP_F16, AMP_F16)                           \
			       : w_ == AMP_BF16 ? BODY(AMP_F16, AMP_BF16)                          \
			                        : BODY(AMP_F16, AMP_F32);                          \
		if ((io)->gdt == AMP_BF16)                                                         \
			return w_ == AMP_F16    ? BODY(AMP_BF16, AMP_F16)                          \
			       : w_ == AMP_BF16 ? BODY(AMP_BF16, AMP_BF16)                         \
			                        : BODY(AMP_BF16, AMP_F32);                         \
		return w_ == AMP_F16    ? BODY(AMP_F32, AMP_F16)                                   \
		       : w_ == AMP_BF16 ? BODY(AMP_F32, AMP_BF16)                                  \
		                        : BODY(AMP_F32, AMP_F32);                                  \
	} while (0)

/* SGD (kernels.h): g times inv is the unscaled gradient (inv 1: not multiplied);
 *   m NULL (no momentum): w = w - lr (g + wd w);  else m = mu m + g + wd w, w = w - lr m. */
static inline __attribute__((always_inline)) int64_t
sgd_body(float *w, float *m, const amp_update_io *io, amp_dtype gdt, amp_dtype wdt, float inv,
         float lr, float mu, float wd, int64_t n)
{
	const void *g = io->g;
	void *work = io->work;
	int64_t bad = 0;
#define SGD_STEP(gx, wx, i)                                                                        \
	do {                                                                                       \
		if (inv != 1.0f)                                                                   \
			gx = gx * inv;                                                             \
		__typeof__(gx) w0;                                                                 \
		memcpy(&w0, w + (i), sizeof w0);                                                   \
		if (m) {                                                                           \
			__typeof__(gx) m0;                                                         \
			memcpy(&m0, m + (i), sizeof m0);                                           \
			m0 = mu * m0 + gx + wd * w0;                                               \
			memcpy(m + (i), &m0, sizeof m0);                                           \
			wx = w0 - lr * m0;                                                         \
		} else {                                                                           \
			wx = w0 - lr * (gx + wd * w0);                                             \
		}                                                                                  \
		memcpy(w + (i), &wx, sizeof wx);                                                   \
	} while (0)
#define SGD_VEC(gx, wx, i)                                                                         \
	do {                                                                                       \
		UPD_PREFETCH(w, i, 4, 1);                                                          \
		if (m)                                                                             \
			UPD_PREFETCH(m, i, 4, 1);                                                  \
		SGD_STEP(gx, wx, i);                                                               \
	} while (0)
	UPD_LOOP(g, work, gdt, wdt, n, bad, SGD_VEC, SGD_STEP);
#undef SGD_VEC
#undef SGD_STEP
	return bad;
}

static int64_t sgd_update(float *w, float *m, const amp_update_io *io, float inv, float lr,
                          float mu, float wd, int64_t n)
{
#define SGD_BODY(G, W) sgd_body(w, m, io, G, W, inv, lr, mu, wd, n)
	UPD_DISPATCH(io, SGD_BODY);
#undef SGD_BODY
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
static inline float vsqrt_1(float x)
{
	return sqrtf(x);
}

/* AdamW (kernels.h; c: its coefficients for this step, g as for sgd_update):
 *   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g g
 *   w = w decay - lr (m / c1) / (sqrt(v / c2) + eps) */
static inline __attribute__((always_inline)) int64_t
adamw_body(float *w, float *m, float *v, const amp_update_io *io, amp_dtype gdt, amp_dtype wdt,
           float inv, const amp_adamw_coef *c, int64_t n)
{
	const float b1 = c->beta1, b2 = c->beta2, nb1 = c->one_minus_beta1,
	            nb2 = c->one_minus_beta2, c1 = c->c1, c2 = c->c2, lr = c->lr, eps = c->eps,
	            decay = c->decay;
	const void *g = io->g;
	void *work = io->work;
	int64_t bad = 0;
#define ADAMW_STEP(gx, wx, i, SQRT)                                                                \
	do {                                                                                       \
		if (inv != 1.0f)                                                                   \
			gx = gx * inv;                                                             \
		__typeof__(gx) m0, v0;                                                             \
		memcpy(&m0, m + (i), sizeof m0);                                                   \
		memcpy(&v0, v + (i), sizeof v0);                                                   \
		memcpy(&wx, w + (i), sizeof wx);                                                   \
		m0 = b1 * m0 + nb1 * gx;                                                           \
		v0 = b2 * v0 + nb2 * gx * gx;                                                      \
		memcpy(m + (i), &m0, sizeof m0);                                                   \
		memcpy(v + (i), &v0, sizeof v0);                                                   \
		wx = wx * decay - lr * (m0 / c1) / (SQRT(v0 / c2) + eps);                          \
		memcpy(w + (i), &wx, sizeof wx);                                                   \
	} while (0)
#define ADAMW_VEC(gx, wx, i)                                                                       \
	do {                                                                                       \
		UPD_PREFETCH(w, i, 4, 1);                                                          \
		UPD_PREFETCH(m, i, 4, 1);                                                          \
		UPD_PREFETCH(v, i, 4, 1);                                                          \
		ADAMW_STEP(gx, wx, i, vsqrt_f32);                                                  \
	} while (0)
#define ADAMW_ONE(gx, wx, i) ADAMW_STEP(gx, wx, i, vsqrt_1)
	UPD_LOOP(g, work, gdt, wdt, n, bad, ADAMW_VEC, ADAMW_ONE);
#undef ADAMW_ONE
#undef ADAMW_VEC
#undef ADAMW_STEP
	return bad;
}

static int64_t adamw_update(float *w, float *m, float *v, const amp_update_io *io, float inv,
                            const amp_adamw_coef *c, int64_t n)
{
#define ADAMW_BODY(G, W) adamw_body(w, m, v, io, G, W, inv, c, n)
	UPD_DISPATCH(io, ADAMW_BODY);
#undef ADAMW_BODY
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
	while (i + VEC_F32 <= n) {
		int64_t end = n - VEC_F32;
		if (end > i + ((int64_t)1 << 20))
			end = i + ((int64_t)1 << 20);
		vec_i32 acc = {0};
		for (; i <= end; i += VEC_F32) {
			vec_u32 x;
			memcpy(&x, src + i, sizeof x);
			vec_u32 r = vbf16_of(x);
			acc -= (vec_i32)((r & 0x7f80u) == 0x7f80u);
			vec_u16h h = __builtin_convertvector(r, vec_u16h);
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
	for (; i + VEC_F32 <= n; i += VEC_F32)
		vstore_f32(dst + i, vwiden_bf16(src + i));
#endif
	for (; i < n; i++)
		dst[i] = amp_half_bf16_to_f32(src[i]);
}

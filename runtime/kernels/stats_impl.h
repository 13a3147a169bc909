/* stats_impl.h — the parts of the statistics kernels every path shares, included by each
 * stats_<path>.c after its target pragma: the accumulator, the per-element reference step
 * (scalar path and vector tails), and the fix-up pass over a block that holds large or
 * non-finite values.  A vector path defines VEC_BYTES (32, 64) first: the fix-up needs it.
 *
 * The avx2 and avx512bw paths run blocks of STATS_BLOCK elements in two steps: a pass that
 * computes each element's histogram bin (a byte "code") and the block's min/max, then bin
 * counting over the codes, which sit in L1 (the avx512ext path counts bit planes instead, see
 * stats_avx512.c).  NaN/Inf counts and |x| > 32768 only matter in blocks whose largest code is
 * 31 or 32; those blocks, rare, take the exact fix-up pass.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels/stats.h"

#define STATS_BLOCK 4096  /* elements per block: <= 255 code vectors of 16 bytes or more */

#define F32_ABS 0x7fffffffu
#define F32_INF 0x7f800000u
#define F32_NEAR 0x47000000u  /* 32768 */
#define F32_TINY 0x38800000u  /* 2^-14 */
#define F16_ABS 0x7fffu
#define F16_INF 0x7c00u
#define F16_NEAR 0x7800u      /* 32768 */

typedef struct stats_acc {
	uint64_t count, nan, pinf, ninf, near;
	uint64_t hist[AMP_STATS_BINS];
	float min, max;           /* finite values seen so far (+inf / -inf before any) */
} stats_acc;

static inline void acc_init(stats_acc *s)
{
	memset(s, 0, sizeof *s);
	s->min = INFINITY;
	s->max = -INFINITY;
}

/* As acc_init, but hist left for the caller to fill in whole. */
static inline void acc_init_counts(stats_acc *s)
{
	s->count = s->nan = s->pinf = s->ninf = s->near = 0;
	s->min = INFINITY;
	s->max = -INFINITY;
}

static inline void acc_minmax(stats_acc *s, float lo, float hi)
{
	if (lo < s->min)
		s->min = lo;
	if (hi > s->max)
		s->max = hi;
}

static inline float f32_of(uint32_t u)
{
	float f;
	memcpy(&f, &u, sizeof f);
	return f;
}

/* Exact value of an fp16 (no dependence on the conversion kernels). */
static inline float f16_value(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
	float mag;
	if (e == 0)
		mag = (float)m * 0x1p-24f;
	else
		mag = f32_of(((e + 112u) << 23) | (m << 13));
	return sign ? -mag : mag;
}

/* Bin of a finite fp32 magnitude (bits a); see stats.h. */
static inline unsigned bin_f32(uint32_t a)
{
	if (a == 0)
		return 0;
	if (a < F32_TINY)
		return 1;
	unsigned e = a >> 23;
	return e >= 143 ? 32 : e - 111;
}

static inline void elem_f32(stats_acc *s, float v)
{
	uint32_t u;
	memcpy(&u, &v, sizeof u);
	uint32_t a = u & F32_ABS;
	s->count++;
	if (a >= F32_INF) {
		if (a > F32_INF)
			s->nan++;
		else if (u >> 31)
			s->ninf++;
		else
			s->pinf++;
		s->hist[32]++;
		return;
	}
	s->hist[bin_f32(a)]++;
	s->near += a > F32_NEAR;
	acc_minmax(s, v, v);
}

static inline void elem_f16(stats_acc *s, uint16_t h)
{
	unsigned a = h & F16_ABS;
	s->count++;
	if (a >= F16_INF) {
		if (a > F16_INF)
			s->nan++;
		else if (h >> 15)
			s->ninf++;
		else
			s->pinf++;
		s->hist[32]++;
		return;
	}
	s->hist[a == 0 ? 0 : (a >> 10) + 1]++;
	s->near += a > F16_NEAR;
	float v = f16_value(h);
	acc_minmax(s, v, v);
}

/* Every field of *st is assigned (no memset: it costs more than the rest on small tensors). */
static inline void acc_finish(const stats_acc *s, amp_stats *st)
{
	st->count = s->count;
	st->nan = s->nan;
	st->pinf = s->pinf;
	st->ninf = s->ninf;
	st->near_overflow = s->near;
	st->underflow = s->hist[1];
	memcpy(st->exp_hist, s->hist, sizeof st->exp_hist);
	if (s->count - s->nan - s->pinf - s->ninf == 0) {
		st->min = st->max = st->absmax = NAN;
		return;
	}
	/* +0.0 for a zero extreme, whichever sign the path met first: bit-identical paths. */
	st->min = s->min == 0.0f ? 0.0 : (double)s->min;
	st->max = s->max == 0.0f ? 0.0 : (double)s->max;
	st->absmax = fmax(-st->min, st->max);
}

/* Defines `static void NAME(const T *x, int64_t n, amp_stats *st)`: the tensor is cut into
 * blocks of at most STATS_BLOCK elements, whole multiples of STEPN, each summed by BLOCK; the
 * last fewer-than-STEPN elements go one by one through ELEM.  One driver for every path. */
#define STATS_DRIVER(NAME, T, BLOCK, ELEM, STEPN)                                            \
	static void NAME(const T *x, int64_t n, amp_stats *st)                               \
	{                                                                                     \
		stats_acc s;                                                                  \
		acc_init(&s);                                                                 \
		int64_t i = 0;                                                                \
		while (n - i >= (STEPN)) {                                                    \
			int64_t len = n - i < STATS_BLOCK ? (n - i) / (STEPN) * (STEPN)       \
			                                  : STATS_BLOCK;                      \
			BLOCK(x + i, len, &s);                                                \
			i += len;                                                             \
		}                                                                             \
		for (; i < n; i++)                                                            \
			ELEM(&s, x[i]);                                                       \
		acc_finish(&s, st);                                                           \
	}

/* ---- fix-up of one block: exact NaN/Inf/near-overflow counts and finite min/max ---------- */
#ifdef VEC_BYTES
#define FIX_W32 (VEC_BYTES / 4)
#define FIX_W16 (VEC_BYTES / 2)
typedef uint32_t sv_u32 __attribute__((vector_size(VEC_BYTES)));
typedef int32_t sv_i32 __attribute__((vector_size(VEC_BYTES)));
typedef float sv_f32 __attribute__((vector_size(VEC_BYTES)));
typedef uint16_t sv_u16 __attribute__((vector_size(VEC_BYTES)));
typedef int16_t sv_i16 __attribute__((vector_size(VEC_BYTES)));

/* x: (n) fp32, n <= STATS_BLOCK.  Adds the block's nan/inf/near counts to s and returns its
 * finite min/max in *lo, *hi (+inf/-inf if none). */
static void fix_f32(const float *x, int64_t n, stats_acc *s, float *lo, float *hi)
{
	float mn = INFINITY, mx = -INFINITY;
	int64_t i = 0;
	sv_i32 cnan = {0}, cpinf = {0}, cninf = {0}, cnear = {0};
	sv_f32 vmn, vmx;
	for (int l = 0; l < FIX_W32; l++) {
		vmn[l] = INFINITY;
		vmx[l] = -INFINITY;
	}
	for (; i + FIX_W32 <= n; i += FIX_W32) {
		sv_u32 u;
		sv_f32 v;
		memcpy(&u, x + i, sizeof u);
		memcpy(&v, x + i, sizeof v);
		sv_u32 a = u & F32_ABS;
		sv_i32 fin = (sv_i32)(a < F32_INF);
		cnan -= (sv_i32)(a > F32_INF);
		cpinf -= (sv_i32)(u == F32_INF);
		cninf -= (sv_i32)(u == (F32_INF | 0x80000000u));
		cnear -= fin & (sv_i32)(a > F32_NEAR);
		sv_i32 take = fin & (sv_i32)(v < vmn);
		vmn = (sv_f32)((take & (sv_i32)v) | (~take & (sv_i32)vmn));
		take = fin & (sv_i32)(v > vmx);
		vmx = (sv_f32)((take & (sv_i32)v) | (~take & (sv_i32)vmx));
	}
	for (int l = 0; l < FIX_W32; l++) {
		s->nan += (uint64_t)cnan[l];
		s->pinf += (uint64_t)cpinf[l];
		s->ninf += (uint64_t)cninf[l];
		s->near += (uint64_t)cnear[l];
		if (vmn[l] < mn)
			mn = vmn[l];
		if (vmx[l] > mx)
			mx = vmx[l];
	}
	for (; i < n; i++) {
		uint32_t u;
		memcpy(&u, x + i, sizeof u);
		uint32_t a = u & F32_ABS;
		if (a > F32_INF) {
			s->nan++;
		} else if (a == F32_INF) {
			if (u >> 31)
				s->ninf++;
			else
				s->pinf++;
		} else {
			s->near += a > F32_NEAR;
			if (x[i] < mn)
				mn = x[i];
			if (x[i] > mx)
				mx = x[i];
		}
	}
	*lo = mn;
	*hi = mx;
}

/* Order-preserving int16 key of an fp16 (sign-magnitude to two's complement). */
static inline int16_t f16_key(uint16_t h)
{
	return (int16_t)(h & 0x8000u ? h ^ 0x7fffu : h);
}

static inline float f16_of_key(int16_t k)
{
	uint16_t h = (uint16_t)k;
	return f16_value((uint16_t)(h & 0x8000u ? h ^ 0x7fffu : h));
}

/* x: (n) fp16, n <= STATS_BLOCK.  As fix_f32. */
static void fix_f16(const uint16_t *x, int64_t n, stats_acc *s, float *lo, float *hi)
{
	int16_t kmn = INT16_MAX, kmx = INT16_MIN;
	int64_t i = 0;
	/* int16 lane counters: at most STATS_BLOCK / FIX_W16 = 256 per lane. */
	sv_i16 cnan = {0}, cpinf = {0}, cninf = {0}, cnear = {0};
	sv_i16 vmn, vmx;
	for (int l = 0; l < FIX_W16; l++) {
		vmn[l] = INT16_MAX;
		vmx[l] = INT16_MIN;
	}
	for (; i + FIX_W16 <= n; i += FIX_W16) {
		sv_u16 h;
		memcpy(&h, x + i, sizeof h);
		sv_u16 a = h & F16_ABS;
		sv_i16 fin = (sv_i16)(a < F16_INF);
		cnan -= (sv_i16)(a > F16_INF);
		cpinf -= (sv_i16)(h == F16_INF);
		cninf -= (sv_i16)(h == (F16_INF | 0x8000u));
		cnear -= fin & (sv_i16)(a > F16_NEAR);
		sv_i16 sign = (sv_i16)h >> 15;
		sv_i16 key = (sv_i16)h ^ (sign & (int16_t)F16_ABS);
		sv_i16 take = fin & (key < vmn);
		vmn = (take & key) | (~take & vmn);
		take = fin & (key > vmx);
		vmx = (take & key) | (~take & vmx);
	}
	for (int l = 0; l < FIX_W16; l++) {
		s->nan += (uint16_t)cnan[l];
		s->pinf += (uint16_t)cpinf[l];
		s->ninf += (uint16_t)cninf[l];
		s->near += (uint16_t)cnear[l];
		if (vmn[l] < kmn)
			kmn = vmn[l];
		if (vmx[l] > kmx)
			kmx = vmx[l];
	}
	for (; i < n; i++) {
		unsigned a = x[i] & F16_ABS;
		if (a > F16_INF) {
			s->nan++;
		} else if (a == F16_INF) {
			if (x[i] >> 15)
				s->ninf++;
			else
				s->pinf++;
		} else {
			s->near += a > F16_NEAR;
			int16_t k = f16_key(x[i]);
			if (k < kmn)
				kmn = k;
			if (k > kmx)
				kmx = k;
		}
	}
	*lo = kmn > kmx ? INFINITY : f16_of_key(kmn);
	*hi = kmn > kmx ? -INFINITY : f16_of_key(kmx);
}
#endif /* VEC_BYTES */

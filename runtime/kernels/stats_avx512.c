/* stats_avx512.c — the AVX-512 (F, BW) statistics path: 64 elements per step, their histogram
 * codes packed to bytes, bins counted with byte compares into mask-added byte counters.
 * Only called after dispatch.c has seen AVX-512 F/BW/VL/DQ and OS ZMM support.
 */
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq")

#include <immintrin.h>

#define VEC_BYTES 64
#include "kernels/stats_impl.h"

#define STEP 64  /* elements per packed code vector */

/* Smallest and largest byte of v. */
static void bytes_range(__m512i lo, __m512i hi, unsigned *kmin, unsigned *kmax)
{
	__m256i l = _mm256_min_epu8(_mm512_castsi512_si256(lo), _mm512_extracti64x4_epi64(lo, 1));
	__m256i h = _mm256_max_epu8(_mm512_castsi512_si256(hi), _mm512_extracti64x4_epi64(hi, 1));
	__m128i l2 = _mm_min_epu8(_mm256_castsi256_si128(l), _mm256_extracti128_si256(l, 1));
	__m128i h2 = _mm_max_epu8(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
	uint8_t lb[16], hb[16];
	_mm_storeu_si128((__m128i *)lb, l2);
	_mm_storeu_si128((__m128i *)hb, h2);
	unsigned mn = 255, mx = 0;
	for (int i = 0; i < 16; i++) {
		mn = lb[i] < mn ? lb[i] : mn;
		mx = hb[i] > mx ? hb[i] : mx;
	}
	*kmin = mn;
	*kmax = mx;
}

/* codes: (n) bytes, n a multiple of 64, 64-byte aligned -> hist[k] += #(code == k), k in
 * [lo, hi].  Byte counters: n / 64 <= 255. */
static void count_codes(const uint8_t *codes, int64_t n, unsigned lo, unsigned hi, uint64_t *hist)
{
	const __m512i one = _mm512_set1_epi8(1), zero = _mm512_setzero_si512();
	for (unsigned k = lo; k <= hi; k++) {
		const __m512i kv = _mm512_set1_epi8((char)k);
		__m512i c0 = zero, c1 = zero;
		int64_t i = 0;
		for (; i + 2 * STEP <= n; i += 2 * STEP) {
			__mmask64 m0 = _mm512_cmpeq_epi8_mask(_mm512_load_si512(codes + i), kv);
			__mmask64 m1 = _mm512_cmpeq_epi8_mask(_mm512_load_si512(codes + i + STEP), kv);
			c0 = _mm512_mask_add_epi8(c0, m0, c0, one);
			c1 = _mm512_mask_add_epi8(c1, m1, c1, one);
		}
		if (i < n)
			c0 = _mm512_mask_add_epi8(
			    c0, _mm512_cmpeq_epi8_mask(_mm512_load_si512(codes + i), kv), c0, one);
		__m512i s = _mm512_add_epi64(_mm512_sad_epu8(c0, zero), _mm512_sad_epu8(c1, zero));
		hist[k] += (uint64_t)_mm512_reduce_add_epi64(s);
	}
}

/* x: (n) fp32, n a multiple of 64, <= STATS_BLOCK -> s. */
static void block_f32(const float *x, int64_t n, stats_acc *s)
{
	_Alignas(64) uint8_t codes[STATS_BLOCK];
	const __m512i abs = _mm512_set1_epi32((int)F32_ABS), one = _mm512_set1_epi32(1);
	const __m512i b111 = _mm512_set1_epi8(111), b1 = _mm512_set1_epi8(1),
	              b32 = _mm512_set1_epi8(32);
	__m512 vmn = _mm512_set1_ps(INFINITY), vmx = _mm512_set1_ps(-INFINITY);
	__m512i cmn = _mm512_set1_epi8(-1), cmx = _mm512_setzero_si512();
	for (int64_t i = 0; i < n; i += STEP) {
		__m512i e[4];
		for (int j = 0; j < 4; j++) {
			__m512 v = _mm512_loadu_ps(x + i + 16 * j);
			vmn = _mm512_min_ps(vmn, v);
			vmx = _mm512_max_ps(vmx, v);
			__m512i a = _mm512_and_si512(_mm512_castps_si512(v), abs);
			/* biased exponent, 1 for subnormals, 0 for zeros */
			e[j] = _mm512_max_epu32(_mm512_srli_epi32(a, 23), _mm512_min_epu32(a, one));
		}
		/* lane order is lost in the packs; the histogram does not care */
		__m512i c = _mm512_packus_epi16(_mm512_packs_epi32(e[0], e[1]),
		                                _mm512_packs_epi32(e[2], e[3]));
		/* 0 -> 0, 1..112 -> 1, 113..142 -> 2..31, >= 143 -> 32 */
		c = _mm512_min_epu8(_mm512_max_epu8(_mm512_subs_epu8(c, b111), _mm512_min_epu8(c, b1)),
		                    b32);
		_mm512_store_si512(codes + i, c);
		cmn = _mm512_min_epu8(cmn, c);
		cmx = _mm512_max_epu8(cmx, c);
	}
	unsigned kmin, kmax;
	bytes_range(cmn, cmx, &kmin, &kmax);
	count_codes(codes, n, kmin, kmax, s->hist);
	float lo, hi;
	if (kmax >= 31) {
		fix_f32(x, n, s, &lo, &hi);
	} else {
		lo = _mm512_reduce_min_ps(vmn);
		hi = _mm512_reduce_max_ps(vmx);
	}
	acc_minmax(s, lo, hi);
	s->count += (uint64_t)n;
}

/* Smallest and largest int16 of v. */
static void i16_range(__m512i lo, __m512i hi, int16_t *mn, int16_t *mx)
{
	_Alignas(64) int16_t lb[32], hb[32];
	_mm512_store_si512(lb, lo);
	_mm512_store_si512(hb, hi);
	int16_t a = INT16_MAX, b = INT16_MIN;
	for (int i = 0; i < 32; i++) {
		a = lb[i] < a ? lb[i] : a;
		b = hb[i] > b ? hb[i] : b;
	}
	*mn = a;
	*mx = b;
}

/* x: (n) fp16, n a multiple of 64, <= STATS_BLOCK -> s. */
static void block_f16(const uint16_t *x, int64_t n, stats_acc *s)
{
	_Alignas(64) uint8_t codes[STATS_BLOCK];
	const __m512i abs = _mm512_set1_epi16((short)F16_ABS), one = _mm512_set1_epi16(1);
	__m512i kmn = _mm512_set1_epi16(INT16_MAX), kmx = _mm512_set1_epi16(INT16_MIN);
	__m512i cmn = _mm512_set1_epi8(-1), cmx = _mm512_setzero_si512();
	for (int64_t i = 0; i < n; i += STEP) {
		__m512i c[2];
		for (int j = 0; j < 2; j++) {
			__m512i h = _mm512_loadu_si512(x + i + 32 * j);
			/* order-preserving key: h ^ (sign ? 0x7fff : 0) */
			__m512i key = _mm512_ternarylogic_epi32(h, _mm512_srai_epi16(h, 15), abs, 0x78);
			kmn = _mm512_min_epi16(kmn, key);
			kmx = _mm512_max_epi16(kmx, key);
			__m512i a = _mm512_and_si512(h, abs);
			/* exponent + 1, 0 for zeros: the bin itself (Inf/NaN -> 32) */
			c[j] = _mm512_add_epi16(_mm512_srli_epi16(a, 10), _mm512_min_epu16(a, one));
		}
		__m512i b = _mm512_packus_epi16(c[0], c[1]);
		_mm512_store_si512(codes + i, b);
		cmn = _mm512_min_epu8(cmn, b);
		cmx = _mm512_max_epu8(cmx, b);
	}
	unsigned kmin, kmax;
	bytes_range(cmn, cmx, &kmin, &kmax);
	count_codes(codes, n, kmin, kmax, s->hist);
	float lo, hi;
	if (kmax >= 31) {
		fix_f16(x, n, s, &lo, &hi);
	} else {
		int16_t a, b;
		i16_range(kmn, kmx, &a, &b);
		lo = f16_of_key(a);
		hi = f16_of_key(b);
	}
	acc_minmax(s, lo, hi);
	s->count += (uint64_t)n;
}

/* x: (n) fp32 -> st. */
static void stats_f32(const float *x, int64_t n, amp_stats *st)
{
	stats_acc s;
	acc_init(&s);
	int64_t i = 0;
	while (n - i >= STEP) {
		int64_t len = n - i < STATS_BLOCK ? (n - i) / STEP * STEP : STATS_BLOCK;
		block_f32(x + i, len, &s);
		i += len;
	}
	for (; i < n; i++)
		elem_f32(&s, x[i]);
	acc_finish(&s, st);
}

/* x: (n) fp16 -> st. */
static void stats_f16(const uint16_t *x, int64_t n, amp_stats *st)
{
	stats_acc s;
	acc_init(&s);
	int64_t i = 0;
	while (n - i >= STEP) {
		int64_t len = n - i < STATS_BLOCK ? (n - i) / STEP * STEP : STATS_BLOCK;
		block_f16(x + i, len, &s);
		i += len;
	}
	for (; i < n; i++)
		elem_f16(&s, x[i]);
	acc_finish(&s, st);
}

const amp_stats_table amp_stats_avx512_table = {
	.f32 = stats_f32,
	.f16 = stats_f16,
};

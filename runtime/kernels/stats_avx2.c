/* stats_avx2.c — the AVX2 statistics path: 32 elements per step, their histogram codes packed
 * to bytes, bins counted with byte compares.  Only called after dispatch.c has seen avx2 (and
 * OS YMM support).
 */
#pragma GCC target("avx2")

#include <immintrin.h>

#define VEC_BYTES 32
#include "kernels/stats_impl.h"

#define STEP 32  /* elements per packed code vector */

static void bytes_range(__m256i lo, __m256i hi, unsigned *kmin, unsigned *kmax)
{
	__m128i l = _mm_min_epu8(_mm256_castsi256_si128(lo), _mm256_extracti128_si256(lo, 1));
	__m128i h = _mm_max_epu8(_mm256_castsi256_si128(hi), _mm256_extracti128_si256(hi, 1));
	uint8_t lb[16], hb[16];
	_mm_storeu_si128((__m128i *)lb, l);
	_mm_storeu_si128((__m128i *)hb, h);
	unsigned mn = 255, mx = 0;
	for (int i = 0; i < 16; i++) {
		mn = lb[i] < mn ? lb[i] : mn;
		mx = hb[i] > mx ? hb[i] : mx;
	}
	*kmin = mn;
	*kmax = mx;
}

/* codes: (n) bytes, n a multiple of 32, 32-byte aligned -> hist[k] += #(code == k), k in
 * [lo, hi].  Byte counters: n / 32 <= 128. */
static void count_codes(const uint8_t *codes, int64_t n, unsigned lo, unsigned hi, uint64_t *hist)
{
	const __m256i zero = _mm256_setzero_si256();
	for (unsigned k = lo; k <= hi; k++) {
		const __m256i kv = _mm256_set1_epi8((char)k);
		__m256i c0 = zero, c1 = zero;
		int64_t i = 0;
		for (; i + 2 * STEP <= n; i += 2 * STEP) {
			__m256i v0 = _mm256_load_si256((const __m256i *)(codes + i));
			__m256i v1 = _mm256_load_si256((const __m256i *)(codes + i + STEP));
			c0 = _mm256_sub_epi8(c0, _mm256_cmpeq_epi8(v0, kv));
			c1 = _mm256_sub_epi8(c1, _mm256_cmpeq_epi8(v1, kv));
		}
		if (i < n)
			c0 = _mm256_sub_epi8(
			    c0, _mm256_cmpeq_epi8(_mm256_load_si256((const __m256i *)(codes + i)), kv));
		__m256i s = _mm256_add_epi64(_mm256_sad_epu8(c0, zero), _mm256_sad_epu8(c1, zero));
		uint64_t t[4];
		_mm256_storeu_si256((__m256i *)t, s);
		hist[k] += t[0] + t[1] + t[2] + t[3];
	}
}

static float hmin_ps(__m256 v)
{
	__m128 m = _mm_min_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
	m = _mm_min_ps(m, _mm_movehl_ps(m, m));
	m = _mm_min_ss(m, _mm_shuffle_ps(m, m, 1));
	return _mm_cvtss_f32(m);
}

static float hmax_ps(__m256 v)
{
	__m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
	m = _mm_max_ps(m, _mm_movehl_ps(m, m));
	m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
	return _mm_cvtss_f32(m);
}

/* x: (n) fp32, n a multiple of 32, <= STATS_BLOCK -> s. */
static void block_f32(const float *x, int64_t n, stats_acc *s)
{
	_Alignas(32) uint8_t codes[STATS_BLOCK];
	const __m256i abs = _mm256_set1_epi32((int)F32_ABS), one = _mm256_set1_epi32(1);
	const __m256i b111 = _mm256_set1_epi8(111), b1 = _mm256_set1_epi8(1),
	              b32 = _mm256_set1_epi8(32);
	__m256 vmn = _mm256_set1_ps(INFINITY), vmx = _mm256_set1_ps(-INFINITY);
	__m256i cmn = _mm256_set1_epi8(-1), cmx = _mm256_setzero_si256();
	for (int64_t i = 0; i < n; i += STEP) {
		__m256i e[4];
		for (int j = 0; j < 4; j++) {
			__m256 v = _mm256_loadu_ps(x + i + 8 * j);
			vmn = _mm256_min_ps(vmn, v);
			vmx = _mm256_max_ps(vmx, v);
			__m256i a = _mm256_and_si256(_mm256_castps_si256(v), abs);
			e[j] = _mm256_max_epu32(_mm256_srli_epi32(a, 23), _mm256_min_epu32(a, one));
		}
		__m256i c = _mm256_packus_epi16(_mm256_packs_epi32(e[0], e[1]),
		                                _mm256_packs_epi32(e[2], e[3]));
		c = _mm256_min_epu8(_mm256_max_epu8(_mm256_subs_epu8(c, b111), _mm256_min_epu8(c, b1)),
		                    b32);
		_mm256_store_si256((__m256i *)(codes + i), c);
		cmn = _mm256_min_epu8(cmn, c);
		cmx = _mm256_max_epu8(cmx, c);
	}
	unsigned kmin, kmax;
	bytes_range(cmn, cmx, &kmin, &kmax);
	count_codes(codes, n, kmin, kmax, s->hist);
	float lo, hi;
	if (kmax >= 31) {
		fix_f32(x, n, s, &lo, &hi);
	} else {
		lo = hmin_ps(vmn);
		hi = hmax_ps(vmx);
	}
	acc_minmax(s, lo, hi);
	s->count += (uint64_t)n;
}

/* x: (n) fp16, n a multiple of 32, <= STATS_BLOCK -> s. */
static void block_f16(const uint16_t *x, int64_t n, stats_acc *s)
{
	_Alignas(32) uint8_t codes[STATS_BLOCK];
	const __m256i abs = _mm256_set1_epi16((short)F16_ABS), one = _mm256_set1_epi16(1);
	__m256i kmn = _mm256_set1_epi16(INT16_MAX), kmx = _mm256_set1_epi16(INT16_MIN);
	__m256i cmn = _mm256_set1_epi8(-1), cmx = _mm256_setzero_si256();
	for (int64_t i = 0; i < n; i += STEP) {
		__m256i c[2];
		for (int j = 0; j < 2; j++) {
			__m256i h = _mm256_loadu_si256((const __m256i *)(x + i + 16 * j));
			__m256i key = _mm256_xor_si256(h, _mm256_and_si256(_mm256_srai_epi16(h, 15), abs));
			kmn = _mm256_min_epi16(kmn, key);
			kmx = _mm256_max_epi16(kmx, key);
			__m256i a = _mm256_and_si256(h, abs);
			c[j] = _mm256_add_epi16(_mm256_srli_epi16(a, 10), _mm256_min_epu16(a, one));
		}
		__m256i b = _mm256_packus_epi16(c[0], c[1]);
		_mm256_store_si256((__m256i *)(codes + i), b);
		cmn = _mm256_min_epu8(cmn, b);
		cmx = _mm256_max_epu8(cmx, b);
	}
	unsigned kmin, kmax;
	bytes_range(cmn, cmx, &kmin, &kmax);
	count_codes(codes, n, kmin, kmax, s->hist);
	float lo, hi;
	if (kmax >= 31) {
		fix_f16(x, n, s, &lo, &hi);
	} else {
		_Alignas(32) int16_t lb[16], hb[16];
		_mm256_store_si256((__m256i *)lb, kmn);
		_mm256_store_si256((__m256i *)hb, kmx);
		int16_t a = INT16_MAX, b = INT16_MIN;
		for (int i = 0; i < 16; i++) {
			a = lb[i] < a ? lb[i] : a;
			b = hb[i] > b ? hb[i] : b;
		}
		lo = f16_of_key(a);
		hi = f16_of_key(b);
	}
	acc_minmax(s, lo, hi);
	s->count += (uint64_t)n;
}

/* x: (n) fp32 -> st. */
STATS_DRIVER(stats_f32, float, block_f32, elem_f32, STEP)

/* x: (n) fp16 -> st. */
STATS_DRIVER(stats_f16, uint16_t, block_f16, elem_f16, STEP)

const amp_stats_table amp_stats_avx2_table = {
	.f32 = stats_f32,
	.f16 = stats_f16,
};

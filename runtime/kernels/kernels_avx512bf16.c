/* kernels_avx512bf16.c — the avx512-bf16 path: what AVX512_BF16 does better than the avx512
 * path it falls back to for everything else.  fp32 -> bf16 conversion with vcvtneps2bf16.
 *
 * vcvtneps2bf16 rounds to nearest even and quiets NaNs exactly as amp_half_f32_to_bf16 does,
 * except that it reads fp32 subnormal inputs as zero (DAZ; measured over all 2^32 patterns, see
 * test_half.c): it gives the signed zero where correct rounding gives a bf16 subnormal, or
 * 0x0080 / 0x8080 for the largest ones.  Those lanes are found with two bit tests and
 * recomputed in integer arithmetic, so this path gives the bits of every other path.
 * Only called after dispatch.c has seen the avx512 features, AVX512_BF16 and OS ZMM support.
 */
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,fma,f16c,popcnt")

#include <immintrin.h>

#include "kernels/kernels_impl.h"

/* The low n bits set (n clamped to 0..16). */
static inline __mmask16 mask_n(int64_t n)
{
	return n >= 16 ? (__mmask16)0xffff : n <= 0 ? (__mmask16)0 : (__mmask16)((1u << n) - 1u);
}

/* 16 fp32 -> 16 bf16, round to nearest even, subnormal inputs rounded (not read as zero). */
static inline __m256i f32x16_to_bf16(__m512 v)
{
	__m256i b = (__m256i)_mm512_cvtneps_pbh(v);
	__m512i x = _mm512_castps_si512(v);
	__mmask16 sub = _mm512_testn_epi32_mask(x, _mm512_set1_epi32(0x7f800000)) &
	                _mm512_test_epi32_mask(x, _mm512_set1_epi32(0x007fffff));
	if (__builtin_expect(sub != 0, 0)) {
		/* (x + 0x7fff + lsb) >> 16: no carry into the sign from a subnormal. */
		__m512i lsb = _mm512_and_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(1));
		__m512i r = _mm512_add_epi32(_mm512_add_epi32(x, _mm512_set1_epi32(0x7fff)), lsb);
		b = _mm256_mask_mov_epi16(b, sub, _mm512_cvtepi32_epi16(_mm512_srli_epi32(r, 16)));
	}
	return b;
}

/* Lanes of b (16 bf16, by mask m) that are NaN or Inf. */
static inline int nonfinite16(__m256i b, __mmask16 m)
{
	const __m256i e = _mm256_set1_epi16(0x7f80);
	return __builtin_popcount(_mm256_mask_cmpeq_epi16_mask(m, _mm256_and_si256(b, e), e));
}

/* src: (n) fp32 -> dst: (n) bf16.  Returns the NaN and Inf bf16 written, counted on the
 * converted registers. */
static int64_t cvt_f2b(const float *src, uint16_t *dst, int64_t n)
{
	int64_t i = 0, bad = 0;
	for (; i + 32 <= n; i += 32) {
		__m256i b0 = f32x16_to_bf16(_mm512_loadu_ps(src + i));
		__m256i b1 = f32x16_to_bf16(_mm512_loadu_ps(src + i + 16));
		_mm256_storeu_si256((__m256i *)(dst + i), b0);
		_mm256_storeu_si256((__m256i *)(dst + i + 16), b1);
		bad += nonfinite16(b0, 0xffff) + nonfinite16(b1, 0xffff);
	}
	for (; i < n; i += 16) {
		__mmask16 m = mask_n(n - i);
		__m256i b = f32x16_to_bf16(_mm512_maskz_loadu_ps(m, src + i));
		_mm256_mask_storeu_epi16(dst + i, m, b);
		bad += nonfinite16(b, m);
	}
	return bad;
}

const amp_kernel_table amp_kernels_avx512bf16_table = {
	.isa = AMP_ISA_AVX512_BF16,
	.cvt_f32_bf16 = cvt_f2b,
};

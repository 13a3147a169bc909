/* kernels_avx512.c — the AVX-512 (F, BW, VL, DQ) path with F16C-style conversions: masked
 * tails, a 12x32 fp32 FMA microkernel, and the shared elementwise and GEMM templates compiled
 * for this ISA.  fp16 GEMM here is fp16 storage with fp32 compute; a native AVX512-FP16
 * microkernel would be a separate path with its own table.
 */
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,f16c,fma")

#include <immintrin.h>

#include "kernels/kernels_impl.h"

#define VEC_BYTES 64
#include "vec_impl.h"

/* src: (n) fp32 -> dst: (n) fp16, round to nearest even. */
static void cvt_f2h(const float *src, uint16_t *dst, int64_t n)
{
	int64_t i = 0;
	for (; i + 32 <= n; i += 32) {
		__m256i h0 = _mm512_cvtps_ph(_mm512_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
		__m256i h1 = _mm512_cvtps_ph(_mm512_loadu_ps(src + i + 16), _MM_FROUND_TO_NEAREST_INT);
		_mm256_storeu_si256((__m256i *)(dst + i), h0);
		_mm256_storeu_si256((__m256i *)(dst + i + 16), h1);
	}
	for (; i < n; i += 16) {
		__mmask16 m = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1u);
		__m256i h = _mm512_cvtps_ph(_mm512_maskz_loadu_ps(m, src + i),
		                            _MM_FROUND_TO_NEAREST_INT);
		_mm256_mask_storeu_epi16(dst + i, m, h);
	}
}

/* src: (n) fp16 -> dst: (n) fp32 (exact). */
static void cvt_h2f(const uint16_t *src, float *dst, int64_t n)
{
	int64_t i = 0;
	for (; i + 32 <= n; i += 32) {
		__m512 f0 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(src + i)));
		__m512 f1 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(src + i + 16)));
		_mm512_storeu_ps(dst + i, f0);
		_mm512_storeu_ps(dst + i + 16, f1);
	}
	for (; i < n; i += 16) {
		__mmask16 m = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1u);
		_mm512_mask_storeu_ps(dst + i, m, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, src + i)));
	}
}

#define GEMM_MR 12
#define GEMM_NR 32
#define GEMM_MC 144
#define GEMM_KC 256
#define GEMM_NC 1024

/* ap: (kc, 12) fp32, bp: (kc, 32) fp32 -> c: (12, 32) fp32 at row stride ldc, [+]=. */
static void gemm_ukr(int64_t kc, const float *restrict ap, const float *restrict bp,
                     float *restrict c, int64_t ldc, int accumulate)
{
	__m512 c0[GEMM_MR], c1[GEMM_MR];
#pragma GCC unroll 16
	for (int r = 0; r < GEMM_MR; r++)
		c0[r] = c1[r] = _mm512_setzero_ps();
	for (int64_t k = 0; k < kc; k++) {
		__m512 b0 = _mm512_load_ps(bp + k * GEMM_NR);
		__m512 b1 = _mm512_load_ps(bp + k * GEMM_NR + 16);
#pragma GCC unroll 16
		for (int r = 0; r < GEMM_MR; r++) {
			__m512 av = _mm512_set1_ps(ap[k * GEMM_MR + r]);
			c0[r] = _mm512_fmadd_ps(av, b0, c0[r]);
			c1[r] = _mm512_fmadd_ps(av, b1, c1[r]);
		}
	}
#pragma GCC unroll 16
	for (int r = 0; r < GEMM_MR; r++) {
		float *cr = c + r * ldc;
		if (accumulate) {
			c0[r] = _mm512_add_ps(c0[r], _mm512_loadu_ps(cr));
			c1[r] = _mm512_add_ps(c1[r], _mm512_loadu_ps(cr + 16));
		}
		_mm512_storeu_ps(cr, c0[r]);
		_mm512_storeu_ps(cr + 16, c1[r]);
	}
}

#include "gemm_impl.h"

const amp_kernel_table amp_kernels_avx512_table = {
	.isa = AMP_ISA_AVX512,
	.cvt_f32_f16 = cvt_f2h,
	.cvt_f16_f32 = cvt_h2f,
	.gemm_f32 = gemm_f32,
	.gemm_f16 = gemm_f16,
	.vadd_f32 = vadd_f32,
	.vmul_f32 = vmul_f32,
	.vscale_f32 = vscale_f32,
	.vaxpy_f32 = vaxpy_f32,
	.count_nonfinite_f32 = count_nonfinite_f32,
	.count_nonfinite_f16 = count_nonfinite_f16,
};

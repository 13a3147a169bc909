/* kernels_avx2.c — the AVX2 + FMA + F16C path: F16C conversions, a 6x16 fp32 FMA
 * microkernel, and the shared elementwise and GEMM templates compiled for this ISA.
 * Only called after dispatch.c has seen avx2, fma and f16c (and OS YMM support).
 */
#pragma GCC target("avx2,fma,f16c,popcnt")

#include <immintrin.h>

#include "kernels/kernels_impl.h"

#define VEC_BYTES 32
#include "vec_impl.h"

/* Byte mask (two bits per half) of the NaN and Inf halves of h. */
static inline unsigned nonfinite_bits(__m128i h)
{
	const __m128i e = _mm_set1_epi16(0x7c00);
	return (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi16(_mm_and_si128(h, e), e));
}

/* src: (n) fp32 -> dst: (n) fp16, round to nearest even.  Returns the NaN and Inf halves
 * written, counted on the converted registers. */
static int64_t cvt_f2h(const float *src, uint16_t *dst, int64_t n)
{
	int64_t i = 0, bits = 0;
	for (; i + 16 <= n; i += 16) {
		__m128i h0 = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
		__m128i h1 = _mm256_cvtps_ph(_mm256_loadu_ps(src + i + 8), _MM_FROUND_TO_NEAREST_INT);
		_mm_storeu_si128((__m128i *)(dst + i), h0);
		_mm_storeu_si128((__m128i *)(dst + i + 8), h1);
		bits += __builtin_popcount(nonfinite_bits(h0) | nonfinite_bits(h1) << 16);
	}
	for (; i + 8 <= n; i += 8) {
		__m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
		_mm_storeu_si128((__m128i *)(dst + i), h);
		bits += __builtin_popcount(nonfinite_bits(h));
	}
	if (i < n) {
		/* Tail through a zero-padded buffer, so it is converted by the same instruction;
		 * the padding converts to zeros, which are not counted. */
		float f[8] = {0};
		uint16_t h[8];
		memcpy(f, src + i, (size_t)(n - i) * sizeof *f);
		__m128i v = _mm256_cvtps_ph(_mm256_loadu_ps(f), _MM_FROUND_TO_NEAREST_INT);
		_mm_storeu_si128((__m128i *)h, v);
		memcpy(dst + i, h, (size_t)(n - i) * sizeof *h);
		bits += __builtin_popcount(nonfinite_bits(v));
	}
	return bits / 2;
}

/* src: (n) fp16 -> dst: (n) fp32 (exact). */
static void cvt_h2f(const uint16_t *src, float *dst, int64_t n)
{
	int64_t i = 0;
	for (; i + 16 <= n; i += 16) {
		__m256 f0 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i)));
		__m256 f1 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i + 8)));
		_mm256_storeu_ps(dst + i, f0);
		_mm256_storeu_ps(dst + i + 8, f1);
	}
	for (; i + 8 <= n; i += 8)
		_mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
	if (i < n) {
		uint16_t h[8] = {0};
		float f[8];
		memcpy(h, src + i, (size_t)(n - i) * sizeof *h);
		_mm256_storeu_ps(f, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)h)));
		memcpy(dst + i, f, (size_t)(n - i) * sizeof *f);
	}
}

/* src: (n) fp32 -> dst: (n) bf16 (integer round to nearest even, vec_impl.h). */
static int64_t cvt_f2b(const float *src, uint16_t *dst, int64_t n)
{
	return cvt_f2b_int(src, dst, n);
}

#define GEMM_MR 6
#define GEMM_NR 16
#define GEMM_MC 96
#define GEMM_KC 256
#define GEMM_NC 1024

/* ap: (kc, 6) fp32, bp: (kc, 16) fp32 -> c: (6, 16) fp32 at row stride ldc, [+]=. */
static void gemm_ukr(int64_t kc, const float *restrict ap, const float *restrict bp,
                     float *restrict c, int64_t ldc, int accumulate, int mr, int nr)
{
	(void)mr, (void)nr;  /* always a full tile: no GEMM_UKR_EDGES here */
	__m256 c0[GEMM_MR], c1[GEMM_MR];
#pragma GCC unroll 8
	for (int r = 0; r < GEMM_MR; r++)
		c0[r] = c1[r] = _mm256_setzero_ps();
	for (int64_t k = 0; k < kc; k++) {
		__m256 b0 = _mm256_load_ps(bp + k * GEMM_NR);
		__m256 b1 = _mm256_load_ps(bp + k * GEMM_NR + 8);
#pragma GCC unroll 8
		for (int r = 0; r < GEMM_MR; r++) {
			__m256 av = _mm256_broadcast_ss(ap + k * GEMM_MR + r);
			c0[r] = _mm256_fmadd_ps(av, b0, c0[r]);
			c1[r] = _mm256_fmadd_ps(av, b1, c1[r]);
		}
	}
#pragma GCC unroll 8
	for (int r = 0; r < GEMM_MR; r++) {
		float *cr = c + r * ldc;
		if (accumulate) {
			c0[r] = _mm256_add_ps(c0[r], _mm256_loadu_ps(cr));
			c1[r] = _mm256_add_ps(c1[r], _mm256_loadu_ps(cr + 8));
		}
		_mm256_storeu_ps(cr, c0[r]);
		_mm256_storeu_ps(cr + 8, c1[r]);
	}
}

#include "gemm_impl.h"
#include "nn_impl.h"
#define VECH16_ENGINE AMP_ENGINE_FP32_FMA
#include "vech16_impl.h"

const amp_kernel_table amp_kernels_avx2_table = {
	.isa = AMP_ISA_AVX2,
	.vec_engine = AMP_ENGINE_FP32_FMA,
	.vec_engine_h16 = AMP_ENGINE_FP32_FMA,
	.cvt_f32_f16 = cvt_f2h,
	.cvt_f16_f32 = cvt_h2f,
	.cvt_f32_bf16 = cvt_f2b,
	.cvt_bf16_f32 = cvt_b2f,
	.gemm = {[AMP_F32] = gemm_f32, [AMP_F16] = gemm_f16, [AMP_BF16] = gemm_bf16},
	.gemm_acc32 = {[AMP_F16] = gemm_f16_acc32, [AMP_BF16] = gemm_bf16_acc32},
	.gemm_engine = {[AMP_F32] = AMP_ENGINE_FP32_FMA, [AMP_F16] = AMP_ENGINE_FP32_FMA,
	                [AMP_BF16] = AMP_ENGINE_FP32_FMA},
	.vadd_f32 = vadd_f32,
	.vmul_f32 = vmul_f32,
	.vscale_f32 = vscale_f32,
	.vaxpy_f32 = vaxpy_f32,
	.vadd_h16 = vadd_h16,
	.vsub_h16 = vsub_h16,
	.vmul_h16 = vmul_h16,
	.vadd_rows_h16 = vadd_rows_h16,
	.vmul_rows_h16 = vmul_rows_h16,
	.vscale_h16 = vscale_h16,
	.count_nonfinite_f32 = count_nonfinite_f32,
	.count_nonfinite_f16 = count_nonfinite_f16,
	.count_nonfinite_bf16 = count_nonfinite_bf16,
	.relu_f32 = relu_f32,
	.relu_h16 = relu_h16,
	.relu_grad_f32 = relu_grad_f32,
	.relu_grad_h16 = relu_grad_h16,
	.im2col = im2col,
	.col2im_add_f32 = col2im_add_f32,
	.maxpool_plane = maxpool_plane,
};

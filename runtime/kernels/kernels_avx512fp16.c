/* kernels_avx512fp16.c — the avx512-fp16 path's table: the CPU-feature set of AVX512_FP16
 * (cpuid 7.0 EDX bit 23, vfmadd231ph).  It supplies the native fp16 GEMM (gemm_avx512fp16.c:
 * FP16 products and sums over blocks of k, each block promoted to an FP32 accumulator);
 * every other kernel falls back to the avx512 path.
 */
#include "kernels/gemm_blind.h"
#include "kernels/kernels_impl.h"

/* The fp16 slot (amp_gemm_fn): st arrives initialised and receives the statistics of C too.
 * The GEMM runs on the calling thread, so its results do not depend on the thread count. */
static void gemm_f16_native(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K,
                            const void *A, int64_t lda, const void *B, int64_t ldb, float beta,
                            void *C, int64_t ldc, amp_stats *st)
{
	amp_stats s;
	amp_gemm_f16_avx512fp16(trans_a, trans_b, M, N, K, A, lda, B, ldb, beta, C, ldc,
	                        st ? &s : NULL);
	if (st)
		amp_stats_merge(st, &s);
}

/* The acc32 slot: the same GEMM's FP32 sums stored in an fp32 C (st unused), so that its
 * engine is the fp16 GEMM's and its sums are the ones that GEMM rounds. */
static void gemm_f16_native_acc32(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K,
                                  const void *A, int64_t lda, const void *B, int64_t ldb,
                                  float beta, void *C, int64_t ldc, amp_stats *st)
{
	(void)st;
	amp_gemm_f16_avx512fp16_acc32(trans_a, trans_b, M, N, K, A, lda, B, ldb, beta, C, ldc);
}

const amp_kernel_table amp_kernels_avx512fp16_table = {
	.isa = AMP_ISA_AVX512_FP16,
	.gemm = {[AMP_F16] = gemm_f16_native},
	.gemm_acc32 = {[AMP_F16] = gemm_f16_native_acc32},
	.gemm_engine = {[AMP_F16] = AMP_ENGINE_AVX512_FP16},
};

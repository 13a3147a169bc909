/* kernels_amxbf16.c — the amx-bf16 path's table: the CPU-feature set of AMX-TILE + AMX-BF16
 * (tdpbf16ps), available once Linux grants the tile state (dispatch.c's amx_init).  It
 * supplies the bf16 GEMM (gemm_amx.c: tiles, B packed in the pair-interleaved VNNI layout,
 * FP32 accumulation); every other kernel falls back to the avx512-bf16 path.
 */
#include "kernels/gemm_blind.h"
#include "kernels/kernels_impl.h"

/* The bf16 slot (amp_gemm_fn): st arrives initialised and receives the statistics of C too.
 * The tile GEMM runs on the calling thread, so its results do not depend on the thread count. */
static void gemm_bf16_amx(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K,
                          const void *A, int64_t lda, const void *B, int64_t ldb, float beta,
                          void *C, int64_t ldc, amp_stats *st)
{
	amp_stats s;
	amp_gemm_bf16_amx(trans_a, trans_b, M, N, K, A, lda, B, ldb, beta, C, ldc, st ? &s : NULL);
	if (st)
		amp_stats_merge(st, &s);
}

/* The acc32 slot: the tile GEMM's FP32 sums stored in an fp32 C (st unused). */
static void gemm_bf16_amx_acc32(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K,
                                const void *A, int64_t lda, const void *B, int64_t ldb,
                                float beta, void *C, int64_t ldc, amp_stats *st)
{
	(void)st;
	amp_gemm_bf16_amx_acc32(trans_a, trans_b, M, N, K, A, lda, B, ldb, beta, C, ldc);
}

const amp_kernel_table amp_kernels_amxbf16_table = {
	.isa = AMP_ISA_AMX_BF16,
	.gemm = {[AMP_BF16] = gemm_bf16_amx},
	.gemm_acc32 = {[AMP_BF16] = gemm_bf16_amx_acc32},
	.gemm_engine = {[AMP_BF16] = AMP_ENGINE_AMX_BF16},
};

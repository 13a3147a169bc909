/* bf16_interim.h — portable BF16 kernels used until the dispatched ones land in
 * runtime/kernels (same names and contracts as there); removed then. */
#ifndef AMP_BF16_INTERIM_H
#define AMP_BF16_INTERIM_H
#include <stdint.h>
#include "amp/amp.h"
#include "amp_events.h"
#include "kernels/stats.h"
int64_t amp_cvt_f32_bf16(const float *src, uint16_t *dst, int64_t n);
void amp_cvt_bf16_f32(const uint16_t *src, float *dst, int64_t n);
int64_t amp_count_nonfinite_bf16(const uint16_t *a, int64_t n);
void amp_stats_bf16(const uint16_t *x, int64_t n, amp_stats *st);
amp_engine amp_gemm(amp_dtype dt, int trans_a, int trans_b, int64_t M, int64_t N, int64_t K,
                    const void *A, int64_t lda, const void *B, int64_t ldb, float beta, void *C,
                    int64_t ldc, amp_stats *st);
amp_engine amp_kernels_gemm_engine(amp_dtype dt);
amp_engine amp_kernels_vec_engine(void);
#endif

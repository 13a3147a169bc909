/* stats.h — one-pass tensor statistics for the non-finite checks (runtime/check.c): NaN and
 * +-Inf counts, finite min/max/absmax, FP16 headroom counts and an FP16-exponent histogram.
 *
 * Dispatched like the other kernels (amp_kernels_isa(): avx512 and the paths above it, avx2,
 * scalar; the avx512 statistics use VBMI, GFNI and VPOPCNTDQ where the CPU has them); every
 * path gives bit-identical results.  FP16 data is classified through its exponent bits only;
 * bf16 data as the fp32 it widens to.
 */
#ifndef AMP_KERNELS_STATS_H
#define AMP_KERNELS_STATS_H

#include <stdint.h>

#include "kernels/kernels.h"

/* Histogram bins, laid out as amp_rec_tstats.exp_hist (schema/amp_events.h):
 *   [0]      exact zeros (either sign)
 *   [1]      non-zero |x| < 2^-14 (FP16 subnormal range, and anything smaller)
 *   [k]      k = 2..31: FP16 biased exponent k-1, i.e. 2^(k-16) <= |x| < 2^(k-15)
 *   [32]     Inf and NaN; for fp32 data also finite |x| >= 65536 (they overflow FP16)
 * An fp32 value is binned by its own exponent (no rounding to FP16 first), so 65504 < |x| <
 * 65536, which rounds to Inf in FP16, still lands in [31]. */
#define AMP_STATS_BINS 33

/* Underflow: non-zero |x| < AMP_STATS_TINY (2^-14 = 6.1035e-5, the smallest FP16 normal).
 * Near overflow: finite |x| > AMP_STATS_NEAR (32768, half of FP16's range). */
#define AMP_STATS_TINY 0x1p-14
#define AMP_STATS_NEAR 32768.0

typedef struct amp_stats {
	uint64_t count;          /* elements */
	uint64_t nan;            /* NaNs (any payload, either sign) */
	uint64_t pinf, ninf;     /* +Inf, -Inf */
	uint64_t underflow;      /* non-zero |x| < 2^-14 (== exp_hist[1]) */
	uint64_t near_overflow;  /* finite |x| > 32768 */
	double min, max;         /* over finite values; NaN when there is none */
	double absmax;           /* largest finite |x|; NaN when there is none */
	uint64_t exp_hist[AMP_STATS_BINS];
} amp_stats;

/* x: (n) fp32 -> *st (overwritten).  n may be 0.  Thread-safe; allocates nothing. */
void amp_stats_f32(const float *x, int64_t n, amp_stats *st);
/* x: (n) fp16 (IEEE binary16 bits) -> *st (overwritten). */
void amp_stats_f16(const uint16_t *x, int64_t n, amp_stats *st);
/* x: (n) bf16 -> *st (overwritten).  A widened bf16 is an exact fp32, so this is
 * amp_stats_f32 of the widened values, bins as for fp32 (|x| >= 65536 in [32]). */
void amp_stats_bf16(const uint16_t *x, int64_t n, amp_stats *st);

/* *st = the statistics of no element (count 0, extremes NaN). */
void amp_stats_init(amp_stats *st);
/* *into = the statistics of the elements of both: counts and histogram added, extremes
 * combined.  Exact, so the statistics of a tensor are the merge of those of its parts. */
void amp_stats_merge(amp_stats *into, const amp_stats *s);

/* amp_gemm_f16 whose epilogue also takes the statistics of the C it writes, block by block
 * while the block is in cache: *st = amp_stats_f16 of the final C (M rows of N at stride
 * ldc), without a second pass over it. */
void amp_gemm_f16_stats(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K,
                        const uint16_t *A, int64_t lda, const uint16_t *B, int64_t ldb,
                        float beta, uint16_t *C, int64_t ldc, amp_stats *st);
/* The same for amp_gemm_bf16: *st = amp_stats_bf16 of the final C. */
void amp_gemm_bf16_stats(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K,
                         const uint16_t *A, int64_t lda, const uint16_t *B, int64_t ldb,
                         float beta, uint16_t *C, int64_t ldc, amp_stats *st);

/* Same on an explicit path (tests, benchmarks); a path the CPU lacks falls back to the
 * nearest one it has (amp_kernels_usable).  The paths above avx512 use its statistics. */
void amp_stats_f32_on(amp_isa isa, const float *x, int64_t n, amp_stats *st);
void amp_stats_f16_on(amp_isa isa, const uint16_t *x, int64_t n, amp_stats *st);
void amp_stats_bf16_on(amp_isa isa, const uint16_t *x, int64_t n, amp_stats *st);

/* ---- private to runtime/kernels/stats_*.c ------------------------------------------------ */
typedef struct amp_stats_table {
	void (*f32)(const float *x, int64_t n, amp_stats *st);
	void (*f16)(const uint16_t *x, int64_t n, amp_stats *st);
	/* NULL: bf16 blocks widened, then f32 */
	void (*bf16)(const uint16_t *x, int64_t n, amp_stats *st);
} amp_stats_table;

extern const amp_stats_table amp_stats_scalar_table;
extern const amp_stats_table amp_stats_avx2_table;
extern const amp_stats_table amp_stats_avx512bw_table;  /* F/BW/VL/DQ */
extern const amp_stats_table amp_stats_avx512ext_table; /* and VBMI, GFNI, VPOPCNTDQ */
/* 1 if the CPU has what amp_stats_avx512ext_table needs beyond the avx512 path, else 0 (the
 * avx512 path then uses amp_stats_avx512bw_table).  Probed once, then a relaxed load. */
int amp_stats_avx512_ext(void);

#endif

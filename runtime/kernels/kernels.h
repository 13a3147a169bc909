/* kernels.h — compute kernels on raw row-major buffers, dispatched on CPU features at run time.
 *
 * Three paths: AVX-512 (F, BW, VL, with F16C conversions), AVX2 + FMA + F16C, and portable C.
 * amp_kernels_init() picks the best the CPU has; AMP_KERNELS=avx512|avx2|scalar forces one.
 * Halves are IEEE binary16 stored as uint16_t.  All kernels are thread-safe and allocate no
 * memory on the caller's behalf except the GEMM's internal packing buffers (thread-local) and
 * a small pool of worker threads for large GEMMs (see amp_kernels_set_threads).
 */
#ifndef AMP_KERNELS_H
#define AMP_KERNELS_H

#include <stdint.h>

typedef enum { AMP_ISA_SCALAR = 0, AMP_ISA_AVX2 = 1, AMP_ISA_AVX512 = 2 } amp_isa;

/* Selects the path: name is "auto", "avx512", "avx2" or "scalar" (NULL = $AMP_KERNELS or auto).
 * A path the CPU lacks falls back to the best one it has.  Returns the amp_isa now active
 * (>= 0), or -1 for an unknown name (the active path is then unchanged).  Thread-safe; kernels
 * already running on other threads finish on the path they started with. */
int amp_kernels_select(const char *name);
/* Applies $AMP_KERNELS once (thread-safe; the kernels also do it lazily on first use, unless a
 * select() came first).  Returns 0, or -1 if $AMP_KERNELS names no path (auto is used then). */
int amp_kernels_init(void);
/* The active path, and its name ("avx512", "avx2", "scalar"). */
amp_isa amp_kernels_isa(void);
const char *amp_isa_name(amp_isa isa);
/* Best path this CPU supports. */
amp_isa amp_kernels_best(void);

/* Threads the GEMMs may use (the caller's included), process-wide: n in 1..64 (larger is
 * clamped); returns 0, or -1 if n < 1 (nothing changed).  Until it is called the count comes
 * from $AMP_NUM_THREADS, else 1.  Workers start lazily on the first GEMM that uses them.  Small
 * GEMMs stay on the calling thread; every C element is summed by one thread in the same
 * k order whatever the count, so results are bit-identical for any thread count.  Thread-safe. */
int amp_kernels_set_threads(int n);
/* The thread count the GEMMs use now (>= 1). */
int amp_kernels_threads(void);

/* ---- conversions (round to nearest even, subnormals, Inf and NaN preserved) ------------- */
uint16_t amp_f32_to_f16(float f);
float amp_f16_to_f32(uint16_t h);
/* src: (n) fp32 -> dst: (n) fp16, and back.  amp_cvt_f32_f16 returns the number of NaN and
 * Inf halves it wrote (what amp_count_nonfinite_f16 of dst would), counted as they are
 * stored: an overflowing cast is seen without reading dst again. */
int64_t amp_cvt_f32_f16(const float *src, uint16_t *dst, int64_t n);
void amp_cvt_f16_f32(const uint16_t *src, float *dst, int64_t n);

/* ---- GEMM ---------------------------------------------------------------------------------
 * C (M,N) = op(A) op(B) + beta * C, row-major, leading dimensions in elements.
 * op(A) is A (M,K) with lda >= K, or A^T from A (K,M) with lda >= M when trans_a.
 * op(B) is B (K,N) with ldb >= N, or B^T from B (N,K) with ldb >= K when trans_b.
 * beta is 0 (C overwritten, may hold garbage) or 1 (accumulate). */
void amp_gemm_f32(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, const float *A,
                  int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc);
/* Same with fp16 A, B, C.  Products are summed in FP32 (partial sums promoted at least every 64
 * steps of k), beta applied in FP32, the result rounded once to fp16. */
void amp_gemm_f16(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, const uint16_t *A,
                  int64_t lda, const uint16_t *B, int64_t ldb, float beta, uint16_t *C,
                  int64_t ldc);

/* ---- elementwise on fp32 (n elements; dst may alias an input) --------------------------- */
void amp_vadd_f32(const float *a, const float *b, float *dst, int64_t n);
void amp_vmul_f32(const float *a, const float *b, float *dst, int64_t n);
void amp_vscale_f32(const float *a, float s, float *dst, int64_t n);
/* dst += s * a */
void amp_vaxpy_f32(float s, const float *a, float *dst, int64_t n);
/* Returns the number of non-finite values (NaN or +-Inf). */
int64_t amp_count_nonfinite_f32(const float *a, int64_t n);
int64_t amp_count_nonfinite_f16(const uint16_t *a, int64_t n);

#endif

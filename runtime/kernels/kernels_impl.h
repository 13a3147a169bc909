/* kernels_impl.h — private to runtime/kernels: the per-path table of kernel functions behind
 * the public entry points (dispatch.c), and the thread-local GEMM workspace (gemm_ws.c).
 * Each path file (kernels_scalar.c, kernels_avx2.c, kernels_avx512.c, kernels_avx512bf16.c,
 * kernels_avx512fp16.c, kernels_amxbf16.c) defines one table; a NULL slot falls back to the
 * path's fallback (dispatch.c), so only the scalar table must fill every slot.  A new path is
 * one amp_isa value, one file with its table and one row in dispatch.c's paths[].
 */
#ifndef AMP_KERNELS_IMPL_H
#define AMP_KERNELS_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/kernels.h"
#include "kernels/stats.h"

/* One GEMM slot: A, B, C of the slot's dtype, semantics of amp_gemm (st NULL, or += the
 * statistics of C: the caller initialises it). */
typedef void (*amp_gemm_fn)(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K,
                            const void *A, int64_t lda, const void *B, int64_t ldb, float beta,
                            void *C, int64_t ldc, amp_stats *st);

/* Signatures and semantics are those of the public amp_* function of the same name.  gemm is
 * indexed by dtype (AMP_I32 stays NULL); gemm_engine[dt] is what gemm[dt] runs on, vec_engine
 * what the elementwise kernels and conversions run on (meaningful where vadd_f32 is set),
 * vec_engine_h16 what the fp16 arithmetic slots (vadd_h16 .. vscale_h16, and relu_h16,
 * relu_grad_h16 and maxpool_plane's 2x2 windows on fp16) run on (meaningful where vadd_h16 is
 * set: a table that fills one of those slots natively fills them all, so that the engine
 * resolved with vadd_h16 is theirs).
 * isa is the path's own value in every table. */
typedef struct amp_kernel_table {
	amp_isa isa;
	amp_engine vec_engine;
	amp_engine vec_engine_h16;
	int64_t (*cvt_f32_f16)(const float *src, uint16_t *dst, int64_t n);
	void (*cvt_f16_f32)(const uint16_t *src, float *dst, int64_t n);
	int64_t (*cvt_f32_bf16)(const float *src, uint16_t *dst, int64_t n);
	void (*cvt_bf16_f32)(const uint16_t *src, float *dst, int64_t n);
	amp_gemm_fn gemm[AMP_DTYPE_COUNT];
	amp_engine gemm_engine[AMP_DTYPE_COUNT];
	/* amp_gemm_acc32: half A and B (fp16, bf16 slots), C fp32; its engine is gemm_engine's of
	 * the table that fills it (kept in acc32_engine once resolved) */
	amp_gemm_fn gemm_acc32[AMP_DTYPE_COUNT];
	amp_engine acc32_engine[AMP_DTYPE_COUNT];
	void (*vadd_f32)(const float *a, const float *b, float *dst, int64_t n);
	void (*vmul_f32)(const float *a, const float *b, float *dst, int64_t n);
	void (*vscale_f32)(const float *a, float s, float *dst, int64_t n);
	void (*vaxpy_f32)(float s, const float *a, float *dst, int64_t n);
	int64_t (*sgd_update)(float *w, float *m, const amp_update_io *io, float inv, float lr,
	                      float mu, float wd, int64_t n);
	int64_t (*adamw_update)(float *w, float *m, float *v, const amp_update_io *io, float inv,
	                        const amp_adamw_coef *c, int64_t n);
	void (*vadd_h16)(const uint16_t *a, const uint16_t *b, uint16_t *dst, int64_t n);
	void (*vsub_h16)(const uint16_t *a, const uint16_t *b, uint16_t *dst, int64_t n);
	void (*vmul_h16)(const uint16_t *a, const uint16_t *b, uint16_t *dst, int64_t n);
	void (*vadd_rows_h16)(const uint16_t *x, const uint16_t *row, uint16_t *y, int64_t rows,
	                      int64_t cols);
	void (*vmul_rows_h16)(const uint16_t *x, const uint16_t *row, uint16_t *y, int64_t rows,
	                      int64_t cols);
	/* returns the engine it ran on: a path with fp16 arithmetic uses it only for an s that
	 * fp16 holds exactly (amp_vscale_h16) */
	amp_engine (*vscale_h16)(const uint16_t *a, float s, uint16_t *dst, int64_t n);
	int64_t (*count_nonfinite_f32)(const float *a, int64_t n);
	int64_t (*count_nonfinite_f16)(const uint16_t *a, int64_t n);
	int64_t (*count_nonfinite_bf16)(const uint16_t *a, int64_t n);
	void (*relu_f32)(const float *x, float *y, int64_t n);
	void (*relu_h16)(const uint16_t *x, uint16_t *y, int64_t n, uint16_t inf);
	void (*relu_grad_f32)(const float *x, const float *g, float *dx, int64_t n);
	void (*relu_grad_h16)(const uint16_t *x, const uint16_t *g, uint16_t *dx, int64_t n,
	                      uint16_t inf);
	void (*gelu_f32)(const float *x, float *y, int64_t n);
	void (*gelu_grad_f32)(const float *x, const float *g, float *dx, int64_t n);
	void (*im2col)(const amp_conv_shape *s, size_t es, const void *x, void *col);
	void (*col2im_add_f32)(const amp_conv_shape *s, const float *col, float *dx);
	/* fp16 2x2 windows at stride 2 run on vec_engine_h16, the rest on vec_engine */
	void (*maxpool_plane)(amp_dtype dt, const void *x, int64_t W, int k, int stride,
	                      int64_t OH, int64_t OW, void *y, int32_t *arg);
} amp_kernel_table;

extern const amp_kernel_table amp_kernels_scalar_table;
extern const amp_kernel_table amp_kernels_avx2_table;
extern const amp_kernel_table amp_kernels_avx512_table;
extern const amp_kernel_table amp_kernels_avx512bf16_table;
extern const amp_kernel_table amp_kernels_avx512fp16_table;
extern const amp_kernel_table amp_kernels_amxbf16_table;

/* The avx512 path's fp16 GEMM (c_f32 0) or its acc32 form (1), never as dot products
 * (kernels_avx512.c). */
void amp_gemm_f16_avx512_nodots(int c_f32, int trans_a, int trans_b, int64_t M, int64_t N,
                                int64_t K, const void *A, int64_t lda, const void *B, int64_t ldb,
                                float beta, void *C, int64_t ldc);

/* A GEMM operand as the packers see it: element (r, c) of op(X) is at p + r * rs + c * cs, in
 * elements of dtype dt (AMP_F32, AMP_F16 or AMP_BF16).  One of rs, cs is always 1. */
typedef struct gemm_operand {
	const void *p;
	int64_t rs, cs;
	amp_dtype dt;
} gemm_operand;

/* Runs fn(arg, t, n) once for each share t = 0 .. n-1, on the caller and the pool's workers
 * (which thread runs which share is not fixed), and returns n when all are done.  n is `want`,
 * or 1 when want <= 1, the thread count is 1, this is called from inside a job, or another
 * thread owns the pool: fn must accept any n >= 1. */
int amp_kernels_parallel(int want, void (*fn)(void *arg, int t, int n), void *arg);

/* GEMM scratch: packed A block, packed B block, fp32 accumulator for the fp16 GEMM. */
typedef enum {
	AMP_WS_PACK_A = 0,
	AMP_WS_PACK_B = 1,
	AMP_WS_ACC = 2,
	AMP_WS_SAVED_C = 3,  /* C as it was, for the native fp16 GEMM's second look (beta != 0) */
	AMP_WS_SECOND_C = 4, /* that second look's C, on FP32 arithmetic */
	AMP_WS_COUNT
} amp_ws_slot;

/* Returns this thread's buffer for `slot`, 64-byte aligned, holding at least nfloats floats
 * (contents unspecified), or NULL if it cannot be allocated.  Owned by the thread: valid until
 * the next call for the same slot on this thread, freed when the thread exits. */
float *amp_kernels_workspace(amp_ws_slot slot, size_t nfloats);

#endif

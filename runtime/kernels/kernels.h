/* kernels.h — compute kernels on raw row-major buffers, dispatched on CPU features at run time.
 *
 * Paths (below) from portable C to AMX; amp_kernels_init() picks the best kernels the CPU has;
 * AMP_KERNELS=<path name> forces one path.
 * Halves are stored as uint16_t: IEEE binary16 (fp16) or bfloat16 (bf16, the upper half of an
 * fp32).  All kernels are thread-safe and allocate no memory on the caller's behalf except the
 * GEMM's internal packing buffers (thread-local) and a small pool of worker threads for large
 * GEMMs (see amp_kernels_set_threads).
 */
#ifndef AMP_KERNELS_H
#define AMP_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "amp/amp.h"     /* amp_dtype */
#include "amp_events.h"  /* amp_engine */

typedef struct amp_stats amp_stats;  /* kernels/stats.h */

/* The kernel paths.  They are CPU-feature sets, not one ladder (the AMD class has avx512-bf16
 * without avx512-fp16; the Intel class has both and amx-bf16): each needs the features of the
 * path it falls back to plus its own, and supplies only the kernels it does better.
 *   scalar       portable C                       (needs nothing)
 *   avx2         avx2 + fma + f16c                (falls back to scalar)
 *   avx512       avx512 f, bw, vl, dq             (to avx2)
 *   avx512-bf16  avx512_bf16: vdpbf16ps GEMM, vcvtneps2bf16 conversions   (to avx512)
 *   avx512-fp16  avx512_fp16: native fp16 GEMM    (to avx512)
 *   amx-bf16     amx_tile + amx_bf16: tile GEMM, after Linux grants the tile state  (to
 *                avx512-bf16)
 * "auto" takes each kernel from the best path this CPU has that supplies it (amx-bf16, then
 * avx512-fp16, avx512-bf16, avx512, avx2, scalar). */
typedef enum {
	AMP_ISA_SCALAR = 0,
	AMP_ISA_AVX2 = 1,
	AMP_ISA_AVX512 = 2,
	AMP_ISA_AVX512_BF16 = 3,
	AMP_ISA_AVX512_FP16 = 4,
	AMP_ISA_AMX_BF16 = 5,
} amp_isa;
#define AMP_ISA_COUNT 6

/* Selects the path: name is "auto" or a path name above (NULL = $AMP_KERNELS or auto).
 * Returns the amp_isa now active (>= 0; for auto, the best path the CPU has), or -1 for a
 * name that is no path or a path this CPU lacks (the active path is then unchanged;
 * amp_kernels_select_error says why).  Thread-safe; kernels already running on other threads
 * finish on the path they started with. */
int amp_kernels_select(const char *name);
/* What the active selection was made as: "auto" or the path's name. */
const char *amp_kernels_selection(void);
/* Applies $AMP_KERNELS once (thread-safe; the kernels also do it lazily on first use, unless a
 * select() came first).  Returns 0, or -1 if $AMP_KERNELS names no path this CPU has (auto is
 * used then; amp_kernels_env_error says why). */
int amp_kernels_init(void);
/* Why $AMP_KERNELS was refused (static text, as amp_kernels_select_error), or NULL. */
const char *amp_kernels_env_error(void);
/* NULL when `name` is a path this CPU can run (amp_kernels_select would take it), else what
 * is missing: static text naming the CPU features it needs that this CPU lacks ("amx_tile+
 * amx_bf16"), what failed when it has them ("the OS to grant the AMX tile state ..."), or "a
 * path of that name" for an unknown name.  Thread-safe. */
const char *amp_kernels_path_missing(const char *name);
/* buf (cap bytes, NUL-terminated, truncated if need be) = why amp_kernels_select(name) is
 * refused, naming the paths this CPU has ("no kernel path 'sse2'; this CPU has: auto, scalar,
 * avx2, avx512, avx512-bf16"); returns its length, or 0 (buf "") when name is accepted. */
int amp_kernels_select_error(const char *name, char *buf, size_t cap);
/* The active path, and a path's name ("avx512-bf16"; "unknown" for no path). */
amp_isa amp_kernels_isa(void);
const char *amp_isa_name(amp_isa isa);
/* The path "auto" reports: the best one this CPU has (first of the auto order). */
amp_isa amp_kernels_best(void);
/* Nonzero if this CPU runs path isa; isa itself if so, else the nearest path it falls back
 * to that the CPU runs (scalar at worst). */
int amp_kernels_has(amp_isa isa);
amp_isa amp_kernels_usable(amp_isa isa);
/* Nonzero if this CPU runs the avx512-bf16 path but its vdpbf16ps is slower than FP32 FMA
 * (Intel cores), so that "auto" takes the bf16 GEMM from the avx512 path. */
int amp_kernels_dpbf16_half_rate(void);

/* Threads the GEMMs may use (the caller's included), process-wide: n in 1..64 (larger is
 * clamped); returns 0, or -1 if n < 1 (nothing changed).  Until it is called the count comes
 * from $AMP_NUM_THREADS, else 1.  Workers start lazily on the first GEMM that uses them.  Small
 * GEMMs stay on the calling thread; every C element is summed by one thread in the same
 * k order whatever the count, so results are bit-identical for any thread count (but for the
 * sign and payload of a NaN, which follow the operand order of the tile that computes it).
 * Thread-safe. */
int amp_kernels_set_threads(int n);
/* The thread count the GEMMs use now (>= 1). */
int amp_kernels_threads(void);

/* A function the long kernels (the GEMMs' blocked loop nests, between their blocks of rows;
 * not the narrow and direct paths, which are short) call on the thread that set it, at most
 * every AMP_KERNELS_POLL_NS: data-parallel training's all-reduces move on there (MPI
 * progresses them only inside its calls) instead of waiting for the next tape node.  The
 * poll must not call a GEMM (its packing buffers are in use).  NULL: none (the default).
 * Per thread. */
#define AMP_KERNELS_POLL_NS 50000
void amp_kernels_set_poll(void (*fn)(void *arg), void *arg);
extern __thread void (*amp_kernels_poll_fn)(void *arg);
void amp_kernels_poll_due(void);
static inline void amp_kernels_poll(void)
{
	if (__builtin_expect(amp_kernels_poll_fn != NULL, 0))
		amp_kernels_poll_due();
}

/* ---- conversions (round to nearest even, subnormals, Inf and NaN preserved) ------------- */
uint16_t amp_f32_to_f16(float f);
float amp_f16_to_f32(uint16_t h);
/* src: (n) fp32 -> dst: (n) fp16, and back.  amp_cvt_f32_f16 returns the number of NaN and
 * Inf halves it wrote (what amp_count_nonfinite_f16 of dst would), counted as they are
 * stored: an overflowing cast is seen without reading dst again. */
int64_t amp_cvt_f32_f16(const float *src, uint16_t *dst, int64_t n);
void amp_cvt_f16_f32(const uint16_t *src, float *dst, int64_t n);
/* src: (n) fp32 -> dst: (n) bf16, round to nearest even with subnormals rounded like any other
 * value (no DAZ/FTZ; schema/amp_half.h is the reference, every path gives its bits), overflow
 * to +-Inf, NaN quiet with its sign kept.  Returns the number of NaN and Inf bf16 written. */
int64_t amp_cvt_f32_bf16(const float *src, uint16_t *dst, int64_t n);
/* src: (n) bf16 -> dst: (n) fp32, exact. */
void amp_cvt_bf16_f32(const uint16_t *src, float *dst, int64_t n);
/* src: (n) of src_dt -> dst: (n) of dst_dt, for the float dtypes (AMP_F32, AMP_F16, AMP_BF16);
 * the same dtype is a copy (src and dst must not overlap), half to half goes through fp32
 * exactly (one rounding).  Returns the NaN/Inf count of what it wrote when dst_dt is a half
 * type, else 0; -1 (nothing written) if either dtype is not a float dtype. */
int64_t amp_cvt(amp_dtype dst_dt, void *dst, amp_dtype src_dt, const void *src, int64_t n);
/* src: (n) of the half dtype src_dt -> dst: (n) fp32, exact; returns the NaN/Inf count of src
 * (so of dst), taken block by block while each block is in L1: one pass over memory. */
int64_t amp_cvt_widen_count(amp_dtype src_dt, const uint16_t *src, float *dst, int64_t n);

/* ---- GEMM ---------------------------------------------------------------------------------
 * C (M,N) = op(A) op(B) + beta * C, row-major, leading dimensions in elements.
 * op(A) is A (M,K) with lda >= K, or A^T from A (K,M) with lda >= M when trans_a.
 * op(B) is B (K,N) with ldb >= N, or B^T from B (N,K) with ldb >= K when trans_b.
 * beta is 0 (C overwritten, may hold garbage) or 1 (accumulate). */
void amp_gemm_f32(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, const float *A,
                  int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc);
/* Same with fp16 A, B, C, beta applied in FP32, the result rounded once to fp16.  On FP32
 * arithmetic (every path but avx512-fp16) the products and sums are FP32.  The native
 * avx512-fp16 path (DESIGN's blocked promotion) forms products and partial sums of up to 48
 * steps of k in FP16 (blocks of 24, added in pairs) and adds those partials in FP32: its error
 * is bounded by about 25 FP16 roundings per pair, relative to the sum of |products| (not to
 * |C|: cancelling terms, or a large one beside many small ones, lose what FP16 cannot hold)
 * and a product under 2^-24 is lost; an element that a partial sum past 65504 made non-finite
 * is summed again in FP32 (MXCSR's flags say when to look).  The tests hold every shape to
 * that bound; on random data it is under 2e-3 of max|C|. */
void amp_gemm_f16(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, const uint16_t *A,
                  int64_t lda, const uint16_t *B, int64_t ldb, float beta, uint16_t *C,
                  int64_t ldc);
/* Same with bf16 A, B, C: FP32 products and sums, beta applied in FP32, C rounded once to
 * bf16 as amp_cvt_f32_bf16 does. */
void amp_gemm_bf16(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, const uint16_t *A,
                   int64_t lda, const uint16_t *B, int64_t ldb, float beta, uint16_t *C,
                   int64_t ldc);
/* The one GEMM entry, indexed by dtype: A, B and C all of dtype dt (AMP_F32, AMP_F16 or
 * AMP_BF16), semantics of amp_gemm_f32 / _f16 / _bf16.  st is NULL or receives (overwritten)
 * the statistics of the final C, taken in the epilogue (amp_gemm_f16_stats).  Returns the
 * engine that ran it (schema/amp_events.h), AMP_ENGINE_NONE when nothing ran: M or N <= 0 (st
 * then holds no element) or dt not a float dtype (C and st untouched). */
amp_engine amp_gemm(amp_dtype dt, int trans_a, int trans_b, int64_t M, int64_t N, int64_t K,
                    const void *A, int64_t lda, const void *B, int64_t ldb, float beta, void *C,
                    int64_t ldc, amp_stats *st);
/* C (M,N) fp32 = op(A) op(B) + beta C with A, B of dtype dt (fp32, fp16 or bf16): the GEMM of
 * amp_gemm(dt) whose FP32 sums are stored in C instead of being rounded to dt, for gradients
 * summed in FP32 over the parts of a batch.  Returns the engine that ran it.  Thread-safe. */
amp_engine amp_gemm_acc32(amp_dtype dt, int trans_a, int trans_b, int64_t M, int64_t N,
                          int64_t K, const void *A, int64_t lda, const void *B, int64_t ldb,
                          float beta, float *C, int64_t ldc);
/* The engine amp_gemm(dt, ...) would run on now (AMP_ENGINE_NONE for a non-float dt), and the
 * engine of the fp32 elementwise kernels and conversions on the active path (scalar or
 * fp32-fma; amp_kernels_h16_engine is the fp16 kernels'). */
amp_engine amp_kernels_gemm_engine(amp_dtype dt);
amp_engine amp_kernels_vec_engine(void);

/* ---- elementwise on fp32 (n elements; dst may alias an input) --------------------------- */
void amp_vadd_f32(const float *a, const float *b, float *dst, int64_t n);
void amp_vmul_f32(const float *a, const float *b, float *dst, int64_t n);
void amp_vscale_f32(const float *a, float s, float *dst, int64_t n);
/* dst += s * a */
void amp_vaxpy_f32(float s, const float *a, float *dst, int64_t n);

/* ---- the optimizers' update of FP32 master weights (n of them, in place) ------------------
 * The gradient is read in its own dtype (io->gdt: fp32, or fp16 / bf16 widened exactly);
 * g[i] * inv is the unscaled gradient (inv 1: g[i], not multiplied); g is only read.  Every
 * path computes the same operations in the same order, each rounded to FP32 (no FMA): the
 * bits of optim.c's scalar loops.
 *   SGD: m NULL (no momentum) w = w - lr (g + wd w); else m = mu m + g + wd w, w = w - lr m.
 *   AdamW: m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g g;
 *          w = w decay - lr (m / c1) / (sqrt(v / c2) + eps).
 * With a working copy (io->work, of dtype io->wdt: fp16 or bf16) each new w is also rounded
 * into it, as amp_cvt_f32_f16 / amp_cvt_f32_bf16 would: the same pass over memory, not a
 * second one.  They return the NaN and Inf values written to the working copy (0 without). */
typedef struct amp_adamw_coef {
	float beta1, beta2, one_minus_beta1, one_minus_beta2; /* 1 - b rounded to FP32 */
	float c1, c2;                                         /* the bias corrections 1 - b^t */
	float lr, eps;
	float decay; /* 1 - lr weight_decay */
} amp_adamw_coef;
typedef struct amp_update_io {
	const void *g; /* (n) gradient of dtype gdt */
	amp_dtype gdt;
	void *work; /* (n) working copy of dtype wdt, or NULL */
	amp_dtype wdt;
} amp_update_io;
int64_t amp_sgd_update(float *w, float *m, const amp_update_io *io, float inv, float lr, float mu,
                       float wd, int64_t n);
int64_t amp_adamw_update(float *w, float *m, float *v, const amp_update_io *io, float inv,
                         const amp_adamw_coef *c, int64_t n);

/* ---- elementwise on fp16 (n elements; dst may alias an input) ----------------------------
 * Each result is the one of computing in FP32 and rounding once to fp16 (what widening the
 * operands, amp_vadd_f32 and amp_cvt_f32_f16 give): IEEE add, subtract and multiply of fp16
 * operands done in fp16 directly round to those same bits (FP32 holds 24 >= 2 * 11 + 2
 * significant bits, so rounding twice is innocuous), which lets a path with fp16 arithmetic
 * (avx512-fp16: vaddph, vmulph) compute them natively.  NaN results are NaN (their payloads
 * may differ between paths), Inf and subnormals as IEEE says.  Each returns the engine that
 * ran it: AMP_ENGINE_AVX512_FP16 for native fp16 arithmetic, else the path's FP32 one
 * (fp32-fma, with F16C conversions in registers) or AMP_ENGINE_SCALAR.  Thread-safe. */
amp_engine amp_vadd_h16(const uint16_t *a, const uint16_t *b, uint16_t *dst, int64_t n);
amp_engine amp_vsub_h16(const uint16_t *a, const uint16_t *b, uint16_t *dst, int64_t n);
amp_engine amp_vmul_h16(const uint16_t *a, const uint16_t *b, uint16_t *dst, int64_t n);
/* x, y: (rows, cols) fp16, row: (cols) fp16 -> y = x + row (a bias) or x * row on each row;
 * y may be x, row must not overlap y. */
amp_engine amp_vadd_rows_h16(const uint16_t *x, const uint16_t *row, uint16_t *y, int64_t rows,
                             int64_t cols);
amp_engine amp_vmul_rows_h16(const uint16_t *x, const uint16_t *row, uint16_t *y, int64_t rows,
                             int64_t cols);
/* dst = a * s rounded once to fp16, for any float s: native fp16 arithmetic only where s is
 * an fp16 value (or NaN), since rounding s to fp16 first would change the results; other
 * factors are applied in FP32 (the engine returned says which). */
amp_engine amp_vscale_h16(const uint16_t *a, float s, uint16_t *dst, int64_t n);
/* The engine the fp16 slots above (and ReLU on fp16) run on on the active path. */
amp_engine amp_kernels_h16_engine(void);

/* Returns the number of non-finite values (NaN or +-Inf). */
int64_t amp_count_nonfinite_f32(const float *a, int64_t n);
int64_t amp_count_nonfinite_f16(const uint16_t *a, int64_t n);
/* a: (n) bf16; NaN and Inf are the patterns with all exponent bits set (0x7f80). */
int64_t amp_count_nonfinite_bf16(const uint16_t *a, int64_t n);

/* ---- layer kernels: ReLU, GELU, im2col, max pooling (nn_impl.h) ------------------------
 * Selects, copies and adds only, or (GELU) one fixed sequence of IEEE operations, so every
 * path gives the same bits.  Half tensors are handled
 * on their bits: inf is the dtype's +Inf pattern (0x7c00 fp16, 0x7f80 bf16). */
/* y = x < 0 ? 0 : x (NaN and -0 pass through); y must not overlap x.  The half forms return
 * the engine they ran on: amp_kernels_h16_engine() for fp16 (inf 0x7c00; avx512-fp16 does it
 * as vmaxph(0, x), whose operand order gives exactly this rule), amp_kernels_vec_engine() for
 * bf16. */
void amp_relu_f32(const float *x, float *y, int64_t n);
amp_engine amp_relu_h16(const uint16_t *x, uint16_t *y, int64_t n, uint16_t inf);
/* dx = x > 0 ? g : 0 (0 for NaN x); dx must not overlap x or g. */
void amp_relu_grad_f32(const float *x, const float *g, float *dx, int64_t n);
amp_engine amp_relu_grad_h16(const uint16_t *x, const uint16_t *g, uint16_t *dx, int64_t n,
                             uint16_t inf);

/* GELU, tanh approximation: y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), and
 * dx = g * dy/dx (the derivative of the approximation); fp32 arithmetic, the same bits on every
 * path; y may be x, dx may be x or g. */
void amp_gelu_f32(const float *x, float *y, int64_t n);
void amp_gelu_grad_f32(const float *x, const float *g, float *dx, int64_t n);

/* The geometry of one image's convolution: input (C,H,W), filters KH x KW at stride with pad
 * zeros on every side, output (OH,OW). */
typedef struct amp_conv_shape {
	int64_t C, H, W, KH, KW, OH, OW, stride, pad;
} amp_conv_shape;
/* x: (C,H,W) of es-byte elements (4 or 2) -> col: (C*KH*KW, OH*OW), row (c,kh,kw) and column
 * (oh,ow) the input pixel that filter tap reads, 0 in the padding. */
void amp_im2col(const amp_conv_shape *s, size_t es, const void *x, void *col);
/* The adjoint: dx (C,H,W) fp32 += every entry of col (C*KH*KW, OH*OW) fp32 at its pixel. */
void amp_col2im_add_f32(const amp_conv_shape *s, const float *col, float *dx);

/* x: (H,W) one plane of dtype dt (fp32, fp16 or bf16) -> arg: (OH,OW) the offset in the plane
 * of each k x k window's maximum at stride (the first of equal values, or the first NaN), and
 * y: (OH,OW) of dt, the value stored there (bit-exact).  k <= 64 per window row is not
 * required; OH, OW are (H - k) / stride + 1 and (W - k) / stride + 1.  Returns the engine of
 * the comparisons: amp_kernels_h16_engine() for fp16 2x2 windows at stride 2 (avx512-fp16
 * compares them in fp16), else amp_kernels_vec_engine(). */
amp_engine amp_maxpool_plane(amp_dtype dt, const void *x, int64_t W, int k, int stride,
                             int64_t OH, int64_t OW, void *y, int32_t *arg);

#endif

/* kernels_avx512fp16.c — the avx512-fp16 path's table: the CPU-feature set of AVX512_FP16
 * (cpuid 7.0 EDX bit 23, vfmadd231ph).  It supplies the native fp16 GEMM (gemm_avx512fp16.c:
 * FP16 products and sums over blocks of k, each block promoted to an FP32 accumulator) and the
 * fp16 elementwise arithmetic in fp16 itself (vaddph, vsubph, vmulph; ReLU as vmaxph; 2x2 max
 * pooling on vcmpph), whose results are the bits of the FP32 computation rounded once
 * (kernels.h); every other kernel falls back to the avx512 path.  The functions carry their target attribute (FP16_TARGET)
 * instead of a file-wide pragma, so the shared headers compile as for any path.
 */
#include <immintrin.h>

#include "kernels/gemm_blind.h"
#include "kernels/gemm_split.h"
#include "kernels/kernels_impl.h"

#define FP16_TARGET __attribute__((target("avx512fp16,avx512f,avx512bw,avx512vl,avx512dq,f16c")))

/* ---- elementwise fp16 arithmetic ----------------------------------------------------------- */

/* The low n lanes of 32 (n clamped to 0..32). */
static inline __mmask32 lanes32(int64_t n)
{
	return n >= 32 ? (__mmask32)0xffffffffu : n <= 0 ? (__mmask32)0 : (__mmask32)((1u << n) - 1u);
}

typedef enum { H16_ADD, H16_SUB, H16_MUL } h16_op;

/* One vector of a op b in fp16 (IEEE, round to nearest even: MXCSR's default, and fp16
 * instructions ignore DAZ and FTZ). */
static inline FP16_TARGET __m512h h16_apply(h16_op op, __m512h a, __m512h b)
{
	switch (op) {
	case H16_SUB: return _mm512_sub_ph(a, b);
	case H16_MUL: return _mm512_mul_ph(a, b);
	case H16_ADD: break;
	}
	return _mm512_add_ph(a, b);
}

/* a, b, dst: (n) fp16, dst = a op b, 32 lanes at a time, the tail masked (its dead lanes load
 * as zeros, which raise nothing). */
static inline FP16_TARGET __attribute__((always_inline)) void
h16_binary_native(h16_op op, const uint16_t *a, const uint16_t *b, uint16_t *dst, int64_t n)
{
	int64_t i = 0;
	for (; i + 32 <= n; i += 32)
		_mm512_storeu_ph(dst + i, h16_apply(op, _mm512_loadu_ph(a + i), _mm512_loadu_ph(b + i)));
	if (i < n) {
		__mmask32 m = lanes32(n - i);
		__m512h va = _mm512_castsi512_ph(_mm512_maskz_loadu_epi16(m, a + i));
		__m512h vb = _mm512_castsi512_ph(_mm512_maskz_loadu_epi16(m, b + i));
		_mm512_mask_storeu_epi16(dst + i, m, _mm512_castph_si512(h16_apply(op, va, vb)));
	}
}

static FP16_TARGET void vadd_h16_native(const uint16_t *a, const uint16_t *b, uint16_t *dst,
                                        int64_t n)
{
	h16_binary_native(H16_ADD, a, b, dst, n);
}

static FP16_TARGET void vsub_h16_native(const uint16_t *a, const uint16_t *b, uint16_t *dst,
                                        int64_t n)
{
	h16_binary_native(H16_SUB, a, b, dst, n);
}

static FP16_TARGET void vmul_h16_native(const uint16_t *a, const uint16_t *b, uint16_t *dst,
                                        int64_t n)
{
	h16_binary_native(H16_MUL, a, b, dst, n);
}

/* x, y: (rows, cols) fp16, row: (cols) -> y = x op row on each row.  Rows of up to 32 keep the
 * row in one register; longer ones go row by row through h16_binary_native. */
static inline FP16_TARGET __attribute__((always_inline)) void
h16_rows_native(h16_op op, const uint16_t *x, const uint16_t *row, uint16_t *y, int64_t rows,
                int64_t cols)
{
	if (cols > 32) {
		for (int64_t r = 0; r < rows; r++)
			h16_binary_native(op, x + r * cols, row, y + r * cols, cols);
		return;
	}
	__mmask32 m = lanes32(cols);
	__m512h vr = _mm512_castsi512_ph(_mm512_maskz_loadu_epi16(m, row));
	for (int64_t r = 0; r < rows; r++) {
		__m512h vx = _mm512_castsi512_ph(_mm512_maskz_loadu_epi16(m, x + r * cols));
		_mm512_mask_storeu_epi16(y + r * cols, m, _mm512_castph_si512(h16_apply(op, vx, vr)));
	}
}

static FP16_TARGET void vadd_rows_h16_native(const uint16_t *x, const uint16_t *row, uint16_t *y,
                                             int64_t rows, int64_t cols)
{
	h16_rows_native(H16_ADD, x, row, y, rows, cols);
}

static FP16_TARGET void vmul_rows_h16_native(const uint16_t *x, const uint16_t *row, uint16_t *y,
                                             int64_t rows, int64_t cols)
{
	h16_rows_native(H16_MUL, x, row, y, rows, cols);
}

/* a, dst: (n) fp16, dst = a * s.  An s that fp16 holds (or a NaN) multiplies in fp16: the
 * product of two fp16 values is exact in FP32, so one rounding either way.  Any other s stays
 * FP32 (rounding it to fp16 first would change the results): F16C widening in registers, an
 * FP32 multiply and one rounding, the avx512 path's bits. */
static FP16_TARGET amp_engine vscale_h16_native(const uint16_t *a, float s, uint16_t *dst,
                                                int64_t n)
{
	uint16_t sh = amp_f32_to_f16(s);
	int64_t i = 0;
	if (amp_f16_to_f32(sh) == s || s != s) {
		__m512h vs = _mm512_castsi512_ph(_mm512_set1_epi16((short)sh));
		for (; i + 32 <= n; i += 32)
			_mm512_storeu_ph(dst + i, _mm512_mul_ph(_mm512_loadu_ph(a + i), vs));
		if (i < n) {
			__mmask32 m = lanes32(n - i);
			__m512h va = _mm512_castsi512_ph(_mm512_maskz_loadu_epi16(m, a + i));
			_mm512_mask_storeu_epi16(dst + i, m, _mm512_castph_si512(_mm512_mul_ph(va, vs)));
		}
		return AMP_ENGINE_AVX512_FP16;
	}
	__m512 vs = _mm512_set1_ps(s);
	for (; i < n; i += 16) {
		__mmask16 m = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1u);
		__m512 v = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, a + i));
		_mm256_mask_storeu_epi16(dst + i, m,
		                         _mm512_cvtps_ph(_mm512_mul_ps(v, vs), _MM_FROUND_TO_NEAREST_INT));
	}
	return AMP_ENGINE_FP32_FMA;
}

/* ---- ReLU ------------------------------------------------------------------------------------
 * fp16 (inf 0x7c00): y = vmaxph(0, x).  vmaxph returns its second operand when either is NaN
 * or both are zeros, so x's NaN (its bits) and -0 pass through and a negative x gives +0: the
 * rule of nn_impl.h exactly.  The gradient: vcmpph x > 0 (ordered: false for NaN) selects g.
 * bf16 takes nn_impl.h's rule on the bits, in 16-bit integer compares. */

/* x: (n) half bits -> y: (n), x < 0 ? +0 : x. */
static FP16_TARGET void relu_h16_native(const uint16_t *restrict x, uint16_t *restrict y,
                                        int64_t n, uint16_t inf)
{
	const __m512i neg_inf = _mm512_set1_epi16((short)(0x8000u | inf));
	const __m512i sign = _mm512_set1_epi16((short)0x8000);
	const int f16 = inf == 0x7c00u;
	for (int64_t i = 0; i < n; i += 32) {
		__mmask32 m = lanes32(n - i);
		__m512i v = _mm512_maskz_loadu_epi16(m, x + i);
		__m512i r;
		if (f16) {
			r = _mm512_castph_si512(_mm512_max_ph(_mm512_setzero_ph(), _mm512_castsi512_ph(v)));
		} else {
			__mmask32 neg = _mm512_cmpgt_epu16_mask(v, sign) & _mm512_cmple_epu16_mask(v, neg_inf);
			r = _mm512_maskz_mov_epi16((__mmask32)~neg, v);
		}
		_mm512_mask_storeu_epi16(y + i, m, r);
	}
}

/* x, g: (n) half bits of one dtype -> dx: (n), x > 0 ? g : +0. */
static FP16_TARGET void relu_grad_h16_native(const uint16_t *restrict x, const uint16_t *restrict g,
                                             uint16_t *restrict dx, int64_t n, uint16_t inf)
{
	const __m512i one = _mm512_set1_epi16(1), pinf = _mm512_set1_epi16((short)inf);
	const int f16 = inf == 0x7c00u;
	for (int64_t i = 0; i < n; i += 32) {
		__mmask32 m = lanes32(n - i);
		__m512i v = _mm512_maskz_loadu_epi16(m, x + i);
		__mmask32 pos;
		if (f16)
			pos = _mm512_cmp_ph_mask(_mm512_castsi512_ph(v), _mm512_setzero_ph(), _CMP_GT_OQ);
		else
			pos = _mm512_cmpge_epu16_mask(v, one) & _mm512_cmple_epu16_mask(v, pinf);
		_mm512_mask_storeu_epi16(dx + i, m, _mm512_maskz_loadu_epi16(pos & m, g + i));
	}
}

/* ---- max pooling -----------------------------------------------------------------------------
 * 2x2 windows at stride 2 on fp16, 32 outputs at a time, compared in fp16 (vcmpph) without
 * widening: widening is exact and keeps the order, the ties and the NaNs, so the winners are
 * the ones maxpool_plane (nn_impl.h) picks.  Each output row's two input rows are loaded
 * (masked at the edge) and split into even and odd columns (vpermt2w); the right one wins when
 * larger or the first NaN, then row 1 when larger or the first NaN; y takes the winner's bits.
 * Other dtypes and windows: the avx512 path's kernel. */

static FP16_TARGET void maxpool_plane_native(amp_dtype dt, const void *x, int64_t W, int k,
                                             int stride, int64_t OH, int64_t OW, void *y,
                                             int32_t *arg)
{
	if (dt != AMP_F16 || k != 2 || stride != 2) {
		amp_kernels_avx512_table.maxpool_plane(dt, x, W, k, stride, OH, OW, y, arg);
		return;
	}
	static const uint16_t even_idx[32] = {0,  2,  4,  6,  8,  10, 12, 14, 16, 18, 20,
	                                      22, 24, 26, 28, 30, 32, 34, 36, 38, 40, 42,
	                                      44, 46, 48, 50, 52, 54, 56, 58, 60, 62};
	const __m512i even = _mm512_loadu_si512(even_idx);
	const __m512i odd = _mm512_add_epi16(even, _mm512_set1_epi16(1));
	const __m512i even32 = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26,
	                                         28, 30);
	const __m512i w32 = _mm512_set1_epi32((int32_t)W), one32 = _mm512_set1_epi32(1);
	const uint16_t *xs = x;
	uint16_t *ys = y;
	for (int64_t oh = 0; oh < OH; oh++)
		for (int64_t ow0 = 0; ow0 < OW; ow0 += 32) {
			int64_t nn = OW - ow0 < 32 ? OW - ow0 : 32;
			__mmask64 in_m = nn == 32 ? ~0ull : (1ull << (2 * nn)) - 1;
			__mmask32 out_m = lanes32(nn);
			__m512i m[2];
			__mmask32 mi[2];
			for (int r = 0; r < 2; r++) {
				const uint16_t *p = xs + (2 * oh + r) * W + 2 * ow0;
				__m512i lo = _mm512_maskz_loadu_epi16((__mmask32)in_m, p);
				__m512i hi = _mm512_maskz_loadu_epi16((__mmask32)(in_m >> 32), p + 32);
				__m512i a = _mm512_permutex2var_epi16(lo, even, hi);
				__m512i b = _mm512_permutex2var_epi16(lo, odd, hi);
				__m512h ah = _mm512_castsi512_ph(a), bh = _mm512_castsi512_ph(b);
				__mmask32 t = _mm512_cmp_ph_mask(bh, ah, _CMP_GT_OQ) |
				              (_mm512_cmp_ph_mask(bh, bh, _CMP_UNORD_Q) &
				               _mm512_cmp_ph_mask(ah, ah, _CMP_ORD_Q));
				m[r] = _mm512_mask_blend_epi16(t, a, b);
				mi[r] = t;
			}
			__m512h m0 = _mm512_castsi512_ph(m[0]), m1 = _mm512_castsi512_ph(m[1]);
			__mmask32 t = _mm512_cmp_ph_mask(m1, m0, _CMP_GT_OQ) |
			              (_mm512_cmp_ph_mask(m1, m1, _CMP_UNORD_Q) &
			               _mm512_cmp_ph_mask(m0, m0, _CMP_ORD_Q));
			_mm512_mask_storeu_epi16(ys + oh * OW + ow0, out_m,
			                         _mm512_mask_blend_epi16(t, m[0], m[1]));
			/* the column in the pair of the row that won */
			__mmask32 sel = (t & mi[1]) | (~t & mi[0]);
			for (int h = 0; h < 2; h++) {
				__mmask16 om = (__mmask16)(out_m >> (16 * h));
				if (!om)
					break;
				/* offset: 2 * oh * W + 2 * ow + (row 1 ? W : 0) + the column in the pair */
				__m512i off = _mm512_add_epi32(
				    _mm512_set1_epi32((int32_t)(2 * oh * W + 2 * (ow0 + 16 * h))), even32);
				off = _mm512_mask_add_epi32(off, (__mmask16)(t >> (16 * h)), off, w32);
				off = _mm512_mask_add_epi32(off, (__mmask16)(sel >> (16 * h)), off, one32);
				_mm512_mask_storeu_epi32(arg + oh * OW + ow0 + 16 * h, om, off);
			}
		}
}

/* ---- GEMM ----------------------------------------------------------------------------------- */

/* The native GEMM on one thread's range of C (gemm_split_fn). */
/* ---- partial sums past FP16's range ---------------------------------------------------------
 * The native GEMM adds up to FP16N_KP products in FP16 before FP32 takes over: such a partial
 * sum can pass 65504 (Inf, then NaN where an opposite Inf meets it) where the FP32 sum of the
 * same products is finite.  MXCSR's sticky overflow and invalid flags (FP16 arithmetic sets
 * them too) tell whether any operation of the call overflowed or was invalid; only then are
 * the elements of C that came out non-finite summed again, one by one in FP32 (in k order, beta
 * applied as the store applies it), so that an element is finite wherever the paths on FP32
 * arithmetic make it finite.  An element is taken again because it is non-finite, whatever
 * the split over threads: the bits stay the same for any thread count.  With beta != 0 the
 * call keeps C as it was (a copy), since the GEMM writes over it. */
#define FP16N_FLAGS (_MM_EXCEPT_OVERFLOW | _MM_EXCEPT_INVALID)

/* Runs the native GEMM part with the flags cleared; returns the MXCSR flags it raised (the
 * caller's restored, with them added). */
static unsigned fp16n_run_flagged(void (*run)(void *), void *arg)
{
	unsigned csr = _mm_getcsr();
	_mm_setcsr(csr & ~(unsigned)_MM_EXCEPT_MASK);
	run(arg);
	unsigned raised = _mm_getcsr() & (unsigned)_MM_EXCEPT_MASK;
	_mm_setcsr(csr | raised);
	return raised;
}

typedef struct fp16n_call {
	int dot; /* the whole GEMM runs as dot products (fp16n_dot_fits) */
	int trans_a, trans_b, c_f32;
	int64_t M, N, K;
	const uint16_t *A, *B;
	int64_t lda, ldb, ldc;
	float beta;
	void *C;
	amp_stats *st;
} fp16n_call;

static void fp16n_run(void *arg)
{
	const fp16n_call *c = arg;
	if (c->c_f32)
		amp_gemm_f16_avx512fp16_acc32_range(c->dot, c->trans_a, c->trans_b, c->M, c->N,
		                                    c->K, c->A, c->lda, c->B, c->ldb, c->beta, c->C,
		                                    c->ldc);
	else
		amp_gemm_f16_avx512fp16_range(c->dot, c->trans_a, c->trans_b, c->M, c->N, c->K,
		                              c->A, c->lda, c->B, c->ldb, c->beta, c->C, c->ldc,
		                              c->st);
}

/* Whether element (i, j) of the part's C is Inf or NaN. */
static inline int fp16n_elem_nonfinite(const fp16n_call *c, int64_t i, int64_t j)
{
	size_t at = (size_t)(i * c->ldc + j);
	if (c->c_f32)
		return !isfinite(((const float *)c->C)[at]);
	return (((const uint16_t *)c->C)[at] & 0x7c00u) == 0x7c00u;
}

/* The part with its second look at the elements a partial sum made non-finite. */
static void fp16n_part_checked(fp16n_call *c)
{
	size_t esz = c->c_f32 ? sizeof(float) : sizeof(uint16_t);
	void *saved = NULL;
	if (c->beta != 0.0f) {
		saved = amp_kernels_workspace(AMP_WS_SAVED_C,
		                              ((size_t)(c->M * c->N) * esz + sizeof(float) - 1) /
		                                  sizeof(float));
		for (int64_t i = 0; saved && i < c->M; i++)
			memcpy((char *)saved + (size_t)(i * c->N) * esz,
			       (const char *)c->C + (size_t)(i * c->ldc) * esz, (size_t)c->N * esz);
	}
	if (!(fp16n_run_flagged(fp16n_run, c) & FP16N_FLAGS))
		return;
	if (c->beta != 0.0f && !saved)
		return; /* no memory for the copy: C stays as the GEMM left it */
	int64_t bad = 0;
	for (int64_t i = 0; i < c->M; i++)
		for (int64_t j = 0; j < c->N; j++)
			bad += fp16n_elem_nonfinite(c, i, j);
	if (bad == 0)
		return;
	/* the part again on FP32 arithmetic (the avx512 path's GEMM, vectorized: a few times
	 * the native time, on this call only) into a buffer laid out as C with ldc N, the saved
	 * C first when beta != 0; its elements replace the non-finite ones (a scalar dot product
	 * per element made a step that overflowed everywhere 200 times slower) */
	void *t = amp_kernels_workspace(AMP_WS_SECOND_C,
	                                ((size_t)(c->M * c->N) * esz + sizeof(float) - 1) /
	                                    sizeof(float));
	if (!t)
		return;
	if (c->beta != 0.0f)
		memcpy(t, saved, (size_t)(c->M * c->N) * esz);
	/* the range takes the whole GEMM's path there too: a column range of a wider GEMM can be
	 * narrow enough for the dot products when the whole is not (nodots); when the whole runs
	 * as dot products every range has its N and K, so the avx512 path decides alike for all */
	if (c->dot) {
		amp_gemm_fn fp32 = c->c_f32 ? amp_kernels_avx512_table.gemm_acc32[AMP_F16]
		                            : amp_kernels_avx512_table.gemm[AMP_F16];
		fp32(c->trans_a, c->trans_b, c->M, c->N, c->K, c->A, c->lda, c->B, c->ldb, c->beta,
		     t, c->N, NULL);
	} else {
		amp_gemm_f16_avx512_nodots(c->c_f32, c->trans_a, c->trans_b, c->M, c->N, c->K, c->A,
		                           c->lda, c->B, c->ldb, c->beta, t, c->N);
	}
	int64_t fixed = 0;
	for (int64_t i = 0; i < c->M; i++)
		for (int64_t j = 0; j < c->N; j++) {
			if (!fp16n_elem_nonfinite(c, i, j))
				continue;
			memcpy((char *)c->C + (size_t)(i * c->ldc + j) * esz,
			       (const char *)t + (size_t)(i * c->N + j) * esz, esz);
			fixed++;
		}
	if (fixed && c->st) { /* the statistics are of the C it leaves */
		amp_stats_init(c->st);
		blind_stats_rows(amp_stats_f16, c->C, c->ldc, 0, c->M, 0, c->N, c->st);
	}
}

/* The range functions (gemm_split_fn) of a GEMM that runs as dot products (_dot) or not: fp16
 * C, or fp32 C (acc32). */
/* clang-format off */
#define FP16N_PART(NAME, DOT, C_F32)                                                               \
	static void NAME(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K,                \
	                 const uint16_t *A, int64_t lda, const uint16_t *B, int64_t ldb,           \
	                 float beta, void *C, int64_t ldc, amp_stats *st)                          \
	{                                                                                          \
		fp16n_call c = {.dot = DOT, .trans_a = trans_a, .trans_b = trans_b,                \
		                .c_f32 = C_F32, .M = M, .N = N, .K = K, .A = A, .B = B,            \
		                .lda = lda, .ldb = ldb, .ldc = ldc, .beta = beta, .C = C,          \
		                .st = C_F32 ? NULL : st};                                          \
		fp16n_part_checked(&c);                                                            \
	}
/* clang-format on */
FP16N_PART(fp16n_part, 0, 0)
FP16N_PART(fp16n_part_dot, 1, 0)
FP16N_PART(fp16n_part_acc32, 0, 1)
FP16N_PART(fp16n_part_acc32_dot, 1, 1)

/* The fp16 slot (amp_gemm_fn): st arrives initialised and receives the statistics of C too.
 * Split over the kernel threads in ranges of 64 rows or columns (whole register tiles): every
 * element's blocks of k are the same, so are its bits, for any thread count.  Whether the
 * GEMM runs as dot products is decided here, on the whole (its N): such a GEMM (N <=
 * FP16N_DOT_N) is cut into row ranges only, and no range of another one takes that path. */
static void gemm_f16_native(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K,
                            const void *A, int64_t lda, const void *B, int64_t ldb, float beta,
                            void *C, int64_t ldc, amp_stats *st)
{
	amp_stats s;
	gemm_split_run(fp16n_dot_fits(trans_a, trans_b, N, K) ? fp16n_part_dot : fp16n_part, 64,
	               trans_a, trans_b, M, N, K, A, lda, B, ldb, beta, C, ldc, sizeof(uint16_t),
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
	gemm_split_run(
	    fp16n_dot_fits(trans_a, trans_b, N, K) ? fp16n_part_acc32_dot : fp16n_part_acc32, 64,
	    trans_a, trans_b, M, N, K, A, lda, B, ldb, beta, C, ldc, sizeof(float), NULL);
}

const amp_kernel_table amp_kernels_avx512fp16_table = {
	.isa = AMP_ISA_AVX512_FP16,
	.vec_engine_h16 = AMP_ENGINE_AVX512_FP16,
	.vadd_h16 = vadd_h16_native,
	.vsub_h16 = vsub_h16_native,
	.vmul_h16 = vmul_h16_native,
	.vadd_rows_h16 = vadd_rows_h16_native,
	.vmul_rows_h16 = vmul_rows_h16_native,
	.vscale_h16 = vscale_h16_native,
	.relu_h16 = relu_h16_native,
	.relu_grad_h16 = relu_grad_h16_native,
	.maxpool_plane = maxpool_plane_native,
	.gemm = {[AMP_F16] = gemm_f16_native},
	.gemm_acc32 = {[AMP_F16] = gemm_f16_native_acc32},
	.gemm_engine = {[AMP_F16] = AMP_ENGINE_AVX512_FP16},
};

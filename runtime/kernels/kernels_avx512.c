/* kernels_avx512.c — the AVX-512 (F, BW, VL, DQ) path with F16C-style conversions: masked
 * tails, a 12x32 fp32 FMA microkernel, and the shared elementwise and GEMM templates compiled
 * for this ISA.  fp16 GEMM here is fp16 storage with fp32 compute; a native AVX512-FP16
 * microkernel would be a separate path with its own table.
 */
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,f16c,fma,popcnt")

#include <immintrin.h>

#include "kernels/dot_avx512.h"
#include "kernels/kernels_impl.h"

#define VEC_BYTES 64
#define VEC_WIDEN_F16(p) ((vec_f32)_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p))))
#define VEC_NARROW_F16(p, v)                                                                       \
	_mm256_storeu_si256((__m256i *)(p), _mm512_cvtps_ph((__m512)(v), _MM_FROUND_TO_NEAREST_INT))
#include "vec_impl.h"

/* src: (n) fp32 -> dst: (n) fp16, round to nearest even.  Returns the NaN and Inf halves
 * written, counted on the converted registers. */
static int64_t cvt_f2h(const float *src, uint16_t *dst, int64_t n)
{
	const __m512i e = _mm512_set1_epi16(0x7c00);
	int64_t i = 0, bad = 0;
	for (; i + 32 <= n; i += 32) {
		__m256i h0 = _mm512_cvtps_ph(_mm512_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
		__m256i h1 = _mm512_cvtps_ph(_mm512_loadu_ps(src + i + 16), _MM_FROUND_TO_NEAREST_INT);
		_mm256_storeu_si256((__m256i *)(dst + i), h0);
		_mm256_storeu_si256((__m256i *)(dst + i + 16), h1);
		__m512i h = _mm512_inserti64x4(_mm512_castsi256_si512(h0), h1, 1);
		bad += __builtin_popcount(_mm512_cmpeq_epi16_mask(_mm512_and_si512(h, e), e));
	}
	for (; i < n; i += 16) {
		__mmask16 m = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1u);
		__m256i h = _mm512_cvtps_ph(_mm512_maskz_loadu_ps(m, src + i),
		                            _MM_FROUND_TO_NEAREST_INT);
		_mm256_mask_storeu_epi16(dst + i, m, h);
		__m256i e16 = _mm512_castsi512_si256(e);
		bad += __builtin_popcount(
		    _mm256_mask_cmpeq_epi16_mask(m, _mm256_and_si256(h, e16), e16));
	}
	return bad;
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

/* src: (n) fp32 -> dst: (n) bf16 (integer round to nearest even, vec_impl.h). */
static int64_t cvt_f2b(const float *src, uint16_t *dst, int64_t n)
{
	return cvt_f2b_int(src, dst, n);
}

#define GEMM_MR 12
#define GEMM_NR 32
#define GEMM_MC 144
#define GEMM_KC 256
#define GEMM_NC 1024
#define GEMM_UKR_EDGES
#define GEMM_UKR_NARROW
#define GEMM_PACK_FAST
#define GEMM_PACK_BLOCK_FAST
#define GEMM_UKR_DIRECT_A

/* The low n bits set (n clamped to 0..16). */
static inline __mmask16 mask_n(int64_t n)
{
	return n >= 16 ? (__mmask16)0xffff : n <= 0 ? (__mmask16)0 : (__mmask16)((1u << n) - 1u);
}

/* 16 fp32 sums -> bf16, the bits of cvt_f2b (vec_impl.h's cvt_f2b_int): round to nearest even
 * on the dropped 16 bits, NaN quieted with its sign and top payload bits. */
static inline __m256i narrow_bf16(__m512 v)
{
	__m512i x = _mm512_castps_si512(v);
	__m512i r = _mm512_srli_epi32(
	    _mm512_add_epi32(_mm512_add_epi32(x, _mm512_set1_epi32(0x7fff)),
	                     _mm512_and_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(1))),
	    16);
	__mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(x, _mm512_set1_epi32(0x7fffffff)),
	                                        _mm512_set1_epi32(0x7f800000));
	r = _mm512_mask_or_epi32(r, nan, _mm512_srli_epi32(x, 16), _mm512_set1_epi32(0x40));
	return _mm512_cvtepi32_epi16(r);
}

/* The lanes m of v rounded to the half dtype dt (the bits of cvt_f2h / cvt_f2b) at p. */
static inline void store_half(uint16_t *p, __mmask16 m, __m512 v, amp_dtype dt)
{
	__m256i h = dt == AMP_BF16 ? narrow_bf16(v) : _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT);
	_mm256_mask_storeu_epi16(p, m, h);
}

/* Row r of a tile's sums out: [+ c], then stored to c, or with out rounded into out's row. */
static inline __attribute__((always_inline)) void
tile_row_out(__m512 s0, __m512 s1, float *cr, int accumulate, __mmask16 m0, __mmask16 m1,
             int nv, uint16_t *outr, amp_dtype dt)
{
	if (accumulate)
		s0 = _mm512_add_ps(s0, _mm512_maskz_loadu_ps(m0, cr));
	if (outr)
		store_half(outr, m0, s0, dt);
	else
		_mm512_mask_storeu_ps(cr, m0, s0);
	if (nv > 1) {
		if (accumulate)
			s1 = _mm512_add_ps(s1, _mm512_maskz_loadu_ps(m1, cr + 16));
		if (outr)
			store_half(outr + 16, m1, s1, dt);
		else
			_mm512_mask_storeu_ps(cr + 16, m1, s1);
	}
}

/* ap: (kc, 12) fp32, bp: (kc, 32) fp32 -> c: (mr, nr) fp32 at row stride ldc, [+]=, with nv
 * 16-wide column vectors (2, or 1 when nr <= 16).  The accumulators hold full 12-row tiles
 * (the packed panels are zero-padded); only rows < mr and columns < nr of c are touched.
 * Each c element is one FMA chain over k in order, whatever nv, mr and nr.  With out, the
 * sums [+ c] are rounded into out (row stride ldo) as the half dtype dt instead. */
static inline __attribute__((always_inline)) void
gemm_ukr_nv(int64_t kc, const float *restrict ap, const float *restrict bp, float *restrict c,
            int64_t ldc, int accumulate, int mr, int nr, const int nv, uint16_t *out,
            int64_t ldo, amp_dtype dt)
{
	__m512 c0[GEMM_MR], c1[GEMM_MR];
#pragma GCC unroll 16
	for (int r = 0; r < GEMM_MR; r++) {
		c0[r] = c1[r] = _mm512_setzero_ps();
		if (r < mr)
			_mm_prefetch((const char *)(c + r * ldc), _MM_HINT_T0);
	}
	for (int64_t k = 0; k < kc; k++) {
		__m512 b0 = _mm512_load_ps(bp + k * GEMM_NR);
		__m512 b1 = nv > 1 ? _mm512_load_ps(bp + k * GEMM_NR + 16) : b0;
#pragma GCC unroll 16
		for (int r = 0; r < GEMM_MR; r++) {
			__m512 av = _mm512_set1_ps(ap[k * GEMM_MR + r]);
			c0[r] = _mm512_fmadd_ps(av, b0, c0[r]);
			if (nv > 1)
				c1[r] = _mm512_fmadd_ps(av, b1, c1[r]);
		}
	}
	__mmask16 m0 = mask_n(nr), m1 = mask_n(nr - 16);
#pragma GCC unroll 16
	for (int r = 0; r < GEMM_MR; r++) {
		if (r >= mr)
			break;
		tile_row_out(c0[r], c1[r], c + r * ldc, accumulate, m0, m1, nv,
		             out ? out + r * ldo : NULL, dt);
	}
}

static void gemm_ukr(int64_t kc, const float *restrict ap, const float *restrict bp,
                     float *restrict c, int64_t ldc, int accumulate, int mr, int nr)
{
	if (nr > 16)
		gemm_ukr_nv(kc, ap, bp, c, ldc, accumulate, mr, nr, 2, NULL, 0, AMP_F32);
	else
		gemm_ukr_nv(kc, ap, bp, c, ldc, accumulate, mr, nr, 1, NULL, 0, AMP_F32);
}

/* As gemm_ukr, the result rounded once into out (mr, nr) of the half dtype dt at row stride
 * ldo instead of being stored in c: the last k block of a half GEMM writes C itself. */
static void gemm_ukr_narrow(int64_t kc, const float *restrict ap, const float *restrict bp,
                            const float *c, int64_t ldc, int accumulate, uint16_t *out,
                            int64_t ldo, int mr, int nr, amp_dtype dt)
{
	float *cw = (float *)c; /* only read: out is given */
	if (nr > 16)
		gemm_ukr_nv(kc, ap, bp, cw, ldc, accumulate, mr, nr, 2, out, ldo, dt);
	else
		gemm_ukr_nv(kc, ap, bp, cw, ldc, accumulate, mr, nr, 1, out, ldo, dt);
}

/* As gemm_ukr with a full 12-row tile read straight from fp32 A: rows a + r * lda, k at stride
 * 1 (no packing; the broadcasts come from 12 row streams).  Same FMA chains as gemm_ukr; out
 * (or NULL) as gemm_ukr_narrow's. */
static void gemm_ukr_direct_a(int64_t kc, const float *restrict a, int64_t lda,
                              const float *restrict bp, float *restrict c, int64_t ldc,
                              int accumulate, int nr, uint16_t *out, int64_t ldo, amp_dtype dt)
{
	__m512 c0[GEMM_MR], c1[GEMM_MR];
#pragma GCC unroll 16
	for (int r = 0; r < GEMM_MR; r++) {
		c0[r] = c1[r] = _mm512_setzero_ps();
		_mm_prefetch((const char *)(c + r * ldc), _MM_HINT_T0);
	}
	const float *a4 = a + 4 * lda, *a8 = a + 8 * lda;
	int64_t l2 = 2 * lda, l3 = 3 * lda;
	for (int64_t k = 0; k < kc; k++) {
		__m512 b0 = _mm512_load_ps(bp + k * GEMM_NR);
		__m512 b1 = _mm512_load_ps(bp + k * GEMM_NR + 16);
		const float *p[3] = {a + k, a4 + k, a8 + k};
#pragma GCC unroll 16
		for (int r = 0; r < GEMM_MR; r++) {
			const float *q = p[r / 4];
			int64_t off = r % 4 == 0 ? 0 : r % 4 == 1 ? lda : r % 4 == 2 ? l2 : l3;
			__m512 av = _mm512_set1_ps(q[off]);
			c0[r] = _mm512_fmadd_ps(av, b0, c0[r]);
			c1[r] = _mm512_fmadd_ps(av, b1, c1[r]);
		}
	}
	__mmask16 m0 = mask_n(nr), m1 = mask_n(nr - 16);
#pragma GCC unroll 16
	for (int r = 0; r < GEMM_MR; r++)
		tile_row_out(c0[r], c1[r], c + r * ldc, accumulate, m0, m1, 2,
		             out ? out + r * ldo : NULL, dt);
}

/* r: 16 rows of 16 fp32 -> their transpose, in registers (unpack, shuffle, two lane swaps). */
static inline void transpose16(__m512 r[16])
{
	__m512 t[16];
#pragma GCC unroll 8
	for (int i = 0; i < 8; i++) {
		t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
		t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
	}
	/* r[4i + j], 128-bit lane L: rows 4i .. 4i+3 of column 4L + j. */
#pragma GCC unroll 4
	for (int i = 0; i < 4; i++) {
		r[4 * i] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], _MM_SHUFFLE(1, 0, 1, 0));
		r[4 * i + 1] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], _MM_SHUFFLE(3, 2, 3, 2));
		r[4 * i + 2] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], _MM_SHUFFLE(1, 0, 1, 0));
		r[4 * i + 3] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], _MM_SHUFFLE(3, 2, 3, 2));
	}
#pragma GCC unroll 4
	for (int j = 0; j < 4; j++) {
		__m512 u0 = _mm512_shuffle_f32x4(r[j], r[4 + j], 0x88);
		__m512 u1 = _mm512_shuffle_f32x4(r[j], r[4 + j], 0xdd);
		__m512 u2 = _mm512_shuffle_f32x4(r[8 + j], r[12 + j], 0x88);
		__m512 u3 = _mm512_shuffle_f32x4(r[8 + j], r[12 + j], 0xdd);
		t[j] = _mm512_shuffle_f32x4(u0, u2, 0x88);
		t[4 + j] = _mm512_shuffle_f32x4(u1, u3, 0x88);
		t[8 + j] = _mm512_shuffle_f32x4(u0, u2, 0xdd);
		t[12 + j] = _mm512_shuffle_f32x4(u1, u3, 0xdd);
	}
#pragma GCC unroll 16
	for (int i = 0; i < 16; i++)
		r[i] = t[i];
}

/* n (<= 16, by mask m) elements of X at element offset off, fp32, fp16 or bf16 -> fp32 lanes
 * (exact). */
static inline __m512 load_run(const gemm_operand *x, int64_t off, __mmask16 m)
{
	switch (x->dt) {
	case AMP_F16:
		return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, (const uint16_t *)x->p + off));
	case AMP_BF16:
		return _mm512_castsi512_ps(_mm512_slli_epi32(
		    _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, (const uint16_t *)x->p + off)),
		    16));
	case AMP_F32:
	case AMP_I32: break;
	}
	return _mm512_maskz_loadu_ps(m, (const float *)x->p + off);
}

/* gemm_pack_block for contiguous panel rows (rs == 1): op(X) rows [r0, r0+n), k [c0, c0+kc)
 * -> ceil(n/pr) panels of (kc, pr), widened from a half type if need be.  Walks X along its rows
 * (k outer), so each row of X in the block is read once, in order. */
static int gemm_pack_block_fast(const gemm_operand *x, int64_t r0, int64_t n, int64_t c0,
                                int64_t kc, int pr, float *restrict out)
{
	if (x->rs != 1)
		return 0;
	int64_t np = (n + pr - 1) / pr;
	/* Eight k at a time per panel: the panels lie kc * pr floats apart, often a multiple of
	 * 4 KiB, and writing all of them for each k would thrash one L1 set. */
	for (int64_t k0 = 0; k0 < kc; k0 += 8) {
		int64_t k1 = k0 + 8 < kc ? k0 + 8 : kc;
		for (int64_t p = 0; p < np; p++) {
			__mmask16 ml = mask_n(n - p * pr), mh = mask_n(n - p * pr - 16);
			float *o = out + p * kc * pr;
			for (int64_t k = k0; k < k1; k++) {
				int64_t off = r0 + (c0 + k) * x->cs + p * pr;
				_mm512_mask_storeu_ps(o + k * pr, mask_n(pr), load_run(x, off, ml));
				if (pr > 16)
					_mm512_mask_storeu_ps(o + k * pr + 16, mask_n(pr - 16),
					                      load_run(x, off + 16, mh));
			}
		}
	}
	return 1;
}

/* gemm_pack_panel for both layouts, halves widened on the way: op(X)[r0 .. r0+nr)
 * [c0 .. c0+kc) -> out: (kc, pr) fp32, rows past nr zero.  Contiguous panel rows (rs == 1) are
 * copied as masked runs; strided ones (cs == 1) go through 16 x 16 register transposes. */
static int gemm_pack_fast(const gemm_operand *x, int64_t r0, int64_t nr, int64_t c0, int64_t kc,
                          int pr, float *restrict out)
{
	if (x->rs == 1) {
		for (int64_t k = 0; k < kc; k++) {
			float *o = out + k * pr;
			int64_t off = r0 + (c0 + k) * x->cs;
			for (int g = 0; g < pr; g += 16)
				_mm512_mask_storeu_ps(o + g, mask_n(pr - g),
				                      load_run(x, off + g, mask_n(nr - g)));
		}
		return 1;
	}
	if (x->cs != 1)
		return 0;
	for (int64_t k0 = 0; k0 < kc; k0 += 16) {
		int kn = kc - k0 < 16 ? (int)(kc - k0) : 16;
		__mmask16 mk = mask_n(kn);
		for (int g = 0; g < pr; g += 16) {
			__m512 v[16];
#pragma GCC unroll 16
			for (int r = 0; r < 16; r++) {
				if (g + r >= nr) {
					v[r] = _mm512_setzero_ps();
					continue;
				}
				int64_t off = (r0 + g + r) * x->rs + c0 + k0;
				/* Rows far apart defeat the hardware prefetchers: fetch 512 bytes ahead. */
				_mm_prefetch(x->dt != AMP_F32
				                 ? (const char *)((const uint16_t *)x->p + off + 256)
				                 : (const char *)((const float *)x->p + off + 128),
				             _MM_HINT_T0);
				v[r] = load_run(x, off, mk);
			}
			transpose16(v);
			__mmask16 mw = mask_n(pr - g);
			for (int k = 0; k < kn; k++)
				_mm512_mask_storeu_ps(out + (k0 + k) * pr + g, mw, v[k]);
		}
	}
	return 1;
}

/* x w^T with few columns as dot products (gemm_impl.h), fp32 or a half type widened to fp32
 * (gemm_dots): a tile of 4 rows of A by 5 rows of B, 20 zmm of 16 lanes' sums (lane l of step s: k
 * = 16 s + l, zero past K), 9 loads for 20 FMAs a step; then each element's lanes added by halves
 * (l + 8, l + 4, l + 2, l + 1, four elements at once), C = that + beta C (rounded once to a half
 * C).  Measured against the loop nest on 128 x N x K, fp32, rows 64-byte aligned (Intel class,
 * GFLOP/s): N = 10: K = 1024 149 against 50, K = 256 123 against 51, K = 128 100 against 52,
 * K = 64 67 against 49; N = 16: K = 256 106 against 80, K = 128 85 against 86; N = 20, 24, 32
 * (K = 1024): 146, 142, 135 against 93, 115, 154. */
#define GEMM_DOT_N    24
#define GEMM_DOT_KMIN 128
/* Half storage (widened as loaded, B once into the workspace), 128 x N x K against the loop
 * nest, FP16: N = 10, K = 1024 129 against 51; K = 512: N = 10 123 against 52, N = 16 98
 * against 77, N = 24 106-112 against 107-114; K = 256: N = 16 74 against 76-81, N = 24
 * 70-93 against 110-113. */
#define GEMM_DOT_KMIN_HALF 512
#define GEMM_DOT_MR   4
#define GEMM_DOT_NR   5

#include "gemm_impl.h"

/* 16 values of dtype DT at p + k (elements), zero where m is clear, as fp32. */
#define GEMM_DOT_LOAD(DT, p, k, m)                                                                 \
	((DT) == AMP_F32 ? _mm512_maskz_loadu_ps(m, (const float *)(p) + (k))                      \
	 : (DT) == AMP_F16                                                                         \
	     ? _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, (const uint16_t *)(p) + (k)))           \
	     : _mm512_castsi512_ps(                                                                \
	           _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(               \
	                                 m, (const uint16_t *)(p) + (k))),                         \
	                             16)))

static inline __attribute__((always_inline)) void gemm_dot_step(__m512 *c, amp_dtype dt,
                                                                amp_dtype dtb, const void *const *a,
                                                                const void *const *b, int64_t k,
                                                                __mmask16 m)
{
	__m512 bv[GEMM_DOT_NR];
#pragma GCC unroll 5
	for (int j = 0; j < GEMM_DOT_NR; j++)
		bv[j] = GEMM_DOT_LOAD(dtb, b[j], k, m);
#pragma GCC unroll 4
	for (int r = 0; r < GEMM_DOT_MR; r++) {
		__m512 av = GEMM_DOT_LOAD(dt, a[r], k, m);
#pragma GCC unroll 5
		for (int j = 0; j < GEMM_DOT_NR; j++)
			c[r * GEMM_DOT_NR + j] = _mm512_fmadd_ps(av, bv[j], c[r * GEMM_DOT_NR + j]);
	}
}

/* The dot products for A of dtype dt and B of dtype dtb (constants where it is inlined); C of
 * dtype dt, or fp32 when c_f32 (the fp32 GEMM, and the acc32 slots' sums). */
static inline __attribute__((always_inline)) void
gemm_dot_dt(amp_dtype dt, amp_dtype dtb, int64_t M, int64_t N, int64_t K, const void *A,
            int64_t lda, const void *B, int64_t ldb, float beta, void *C, int64_t ldc, int c_f32)
{
	size_t es = dt == AMP_F32 ? sizeof(float) : sizeof(uint16_t);
	size_t esb = dtb == AMP_F32 ? sizeof(float) : sizeof(uint16_t);
	int64_t full = K / 16;
	__mmask16 tail = mask_n(K % 16);
	const __m512i quad = _mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 12, 8, 4, 0);
	for (int64_t i0 = 0; i0 < M; i0 += GEMM_DOT_MR)
		for (int64_t j0 = 0; j0 < N; j0 += GEMM_DOT_NR) {
			/* rows past M or N repeat the tile's first; their sums are not stored */
			const void *a[GEMM_DOT_MR], *b[GEMM_DOT_NR];
			for (int r = 0; r < GEMM_DOT_MR; r++)
				a[r] = (const char *)A +
				       (size_t)((i0 + r < M ? i0 + r : i0) * lda) * es;
			for (int j = 0; j < GEMM_DOT_NR; j++)
				b[j] = (const char *)B +
				       (size_t)((j0 + j < N ? j0 + j : j0) * ldb) * esb;
			__m512 c[GEMM_DOT_MR * GEMM_DOT_NR];
#pragma GCC unroll 20
			for (int t = 0; t < GEMM_DOT_MR * GEMM_DOT_NR; t++)
				c[t] = _mm512_setzero_ps();
			for (int64_t s = 0; s < full; s++)
				gemm_dot_step(c, dt, dtb, a, b, 16 * s, 0xffffu);
			if (K % 16)
				gemm_dot_step(c, dt, dtb, a, b, 16 * full, tail);
			/* c indexed by constants only (unrolled), so that it stays in registers */
			_Alignas(16) float sum[GEMM_DOT_MR * GEMM_DOT_NR];
#pragma GCC unroll 5
			for (int t = 0; t < GEMM_DOT_MR * GEMM_DOT_NR; t += 4)
				_mm_store_ps(sum + t,
				             _mm512_castps512_ps128(_mm512_permutexvar_ps(
				                 quad, amp_dot_reduce4(c[t], c[t + 1], c[t + 2],
				                                        c[t + 3]))));
			int64_t w = N - j0 < GEMM_DOT_NR ? N - j0 : GEMM_DOT_NR;
			__mmask16 m = mask_n(w);
			for (int r = 0; r < GEMM_DOT_MR && i0 + r < M; r++) {
				__m512 v = _mm512_maskz_loadu_ps(m, sum + r * GEMM_DOT_NR);
				int64_t at = (i0 + r) * ldc + j0;
				if (c_f32 || dt == AMP_F32) {
					float *d = (float *)C + at;
					if (beta != 0.0f)
						v = _mm512_add_ps(
						    v, _mm512_mul_ps(_mm512_set1_ps(beta),
						                     _mm512_maskz_loadu_ps(m, d)));
					_mm512_mask_storeu_ps(d, m, v);
					continue;
				}
				uint16_t *d = (uint16_t *)C + at;
				if (beta != 0.0f)
					v = _mm512_add_ps(
					    v, _mm512_mul_ps(_mm512_set1_ps(beta),
					                     GEMM_DOT_LOAD(dt, d, 0, m)));
				_Alignas(64) float f[16];
				_Alignas(32) uint16_t h[16];
				_mm512_store_ps(f, v);
				gemm_narrow(dt, f, h, w); /* the loop nest's rounding */
				_mm256_mask_storeu_epi16(d, m,
				                         _mm256_load_si256((const __m256i *)h));
			}
		}
}

/* Half A and B: B's few rows are widened into the workspace once a call (a thread's share;
 * each is read for every 4 rows of A; widened as they were loaded, 128 x 10 x 1024 ran at 101
 * GFLOP/s against 142 for fp32), A as it is loaded. */
static void gemm_dots(amp_dtype dt, int64_t M, int64_t N, int64_t K, const void *A, int64_t lda,
                      const void *B, int64_t ldb, float beta, void *C, int64_t ldc, int c_f32)
{
	if (dt == AMP_F32 || dt == AMP_I32) {
		gemm_dot_dt(AMP_F32, AMP_F32, M, N, K, A, lda, B, ldb, beta, C, ldc, 1);
		return;
	}
	float *bw = amp_kernels_workspace(AMP_WS_PACK_B, (size_t)(N * K));
	if (bw)
		for (int64_t j = 0; j < N; j++)
			gemm_widen(dt, (const uint16_t *)B + j * ldb, K, bw + j * K);
	if (dt == AMP_F16) {
		if (bw)
			gemm_dot_dt(AMP_F16, AMP_F32, M, N, K, A, lda, bw, K, beta, C, ldc, c_f32);
		else
			gemm_dot_dt(AMP_F16, AMP_F16, M, N, K, A, lda, B, ldb, beta, C, ldc, c_f32);
		return;
	}
	if (bw)
		gemm_dot_dt(AMP_BF16, AMP_F32, M, N, K, A, lda, bw, K, beta, C, ldc, c_f32);
	else
		gemm_dot_dt(AMP_BF16, AMP_BF16, M, N, K, A, lda, B, ldb, beta, C, ldc, c_f32);
}

/* The fp16 GEMM of this path (c_f32 0) or its acc32 form (1) on its loop nest only, never the
 * dot products: for a caller that computes a range of a larger GEMM which does not take them
 * (kernels_avx512fp16.c's second look at sums that left FP16's range). */
void amp_gemm_f16_avx512_nodots(int c_f32, int trans_a, int trans_b, int64_t M, int64_t N,
                                int64_t K, const void *A, int64_t lda, const void *B, int64_t ldb,
                                float beta, void *C, int64_t ldc)
{
	gemm_run_c(trans_a, trans_b, M, N, K, A, lda, B, ldb, beta, C, ldc, AMP_F16, NULL, c_f32,
	           0);
}

#include "nn_impl.h"
#define VECH16_ENGINE AMP_ENGINE_FP32_FMA
#include "vech16_impl.h"

/* Lanes [lo, hi) of a chunk of `lanes` starting at column c0 (bit j = column c0 + j). */
static inline uint64_t col_mask(int64_t c0, int64_t lanes, int64_t lo, int64_t hi)
{
	int64_t a = lo - c0 < 0 ? 0 : lo - c0, b = hi - c0 > lanes ? lanes : hi - c0;
	if (b <= a)
		return 0;
	uint64_t upto = b >= 64 ? ~0ull : (1ull << b) - 1;
	return upto & ~((1ull << a) - 1);
}

/* ---- "same" convolutions: stride 1, output as large as the image --------------------------
 * Then row (c,kh,kw) of col is plane c shifted by dh = kh - pad rows and dw = kw - pad columns,
 * the pixels shifted in from outside the plane zeroed, and im2col and its adjoint run over the
 * flat plane: one masked load and one store per 32 halves or 16 floats of a row (the rows of a
 * 14 x 14 plane are 14 long; a chunk of the plane covers two of them).  Which lanes of a chunk
 * are in the plane depends on dh (a run of whole rows) and on the lanes' columns and dw; the
 * columns of a chunk's lanes are kept in a vector, one step of lanes % W per chunk. */
#define SAME_K_MAX 8  /* filter rows and columns */
#define SAME_SEG   32 /* chunks per segment of the plane whose lanes are tabled */

static int conv_same(const amp_conv_shape *s)
{
	return s->stride == 1 && s->OH == s->H && s->OW == s->W && s->KH <= SAME_K_MAX &&
	       s->KW <= SAME_K_MAX && s->W < 32768;
}

/* The columns (j % W) of the lanes of a chunk starting at element j of a plane, as 16-bit
 * lanes (es 2: 32 of them) or 32-bit lanes (es 4: 16), and the step to the next chunk. */
typedef struct same_cols {
	__m512i col, step, w;
	int half;
} same_cols;

static same_cols same_cols_init(int64_t W, size_t es)
{
	same_cols sc = {.half = es == 2};
	int64_t lanes = sc.half ? 32 : 16;
	uint16_t c16[32];
	uint32_t c32[16];
	for (int64_t l = 0; l < lanes; l++)
		if (sc.half)
			c16[l] = (uint16_t)(l % W);
		else
			c32[l] = (uint32_t)(l % W);
	sc.col = sc.half ? _mm512_loadu_si512(c16) : _mm512_loadu_si512(c32);
	sc.step =
	    sc.half ? _mm512_set1_epi16((short)(lanes % W)) : _mm512_set1_epi32((int)(lanes % W));
	sc.w = sc.half ? _mm512_set1_epi16((short)W) : _mm512_set1_epi32((int)W);
	return sc;
}

static inline void same_cols_next(same_cols *sc)
{
	if (sc->half) {
		__m512i c = _mm512_add_epi16(sc->col, sc->step);
		sc->col =
		    _mm512_min_epu16(c, _mm512_sub_epi16(c, sc->w)); /* c - W wraps if c < W */
	} else {
		__m512i c = _mm512_add_epi32(sc->col, sc->step);
		sc->col = _mm512_min_epu32(c, _mm512_sub_epi32(c, sc->w));
	}
}

/* Lanes whose column plus d is inside the plane: 0 <= col + d < W, unsigned. */
static inline uint32_t same_cols_in(const same_cols *sc, int64_t d)
{
	if (sc->half)
		return _mm512_cmplt_epu16_mask(
		    _mm512_add_epi16(sc->col, _mm512_set1_epi16((short)d)), sc->w);
	return _mm512_cmplt_epu32_mask(_mm512_add_epi32(sc->col, _mm512_set1_epi32((int)d)), sc->w);
}

/* The lanes of chunks [j0, j0 + n * lanes) of a plane in the plane for each tap row and tap
 * column (a chunk's lanes of tap (kh, kw): row[kh][q] & col[kw][q]), and the lanes of each
 * chunk inside the plane (end).  dir 1: entry j reads pixel j + shift (im2col); -1: pixel p is
 * read by entry p - shift (its adjoint).  sc is at chunk j0 and is moved past the last. */
typedef struct same_masks {
	uint32_t row[SAME_K_MAX][SAME_SEG], col[SAME_K_MAX][SAME_SEG], end[SAME_SEG];
} same_masks;

static void same_masks_fill(same_masks *t, const amp_conv_shape *s, int64_t lanes, int dir,
                            int64_t j0, int64_t n, same_cols *sc)
{
	const int64_t W = s->W, H = s->H, hw = H * W;
	for (int64_t q = 0; q < n; q++, same_cols_next(sc)) {
		int64_t j = j0 + q * lanes;
		for (int64_t kw = 0; kw < s->KW; kw++)
			t->col[kw][q] = same_cols_in(sc, dir * (kw - s->pad));
		for (int64_t kh = 0; kh < s->KH; kh++) {
			int64_t dh = dir * (kh - s->pad);
			t->row[kh][q] = (uint32_t)col_mask(j, lanes, dh < 0 ? -dh * W : 0,
			                                   dh > 0 ? (H - dh) * W : hw);
		}
		t->end[q] = (uint32_t)col_mask(j, lanes, 0, hw);
	}
}

/* Segment by segment of the plane, tap by tap; a chunk's lanes are the same for every
 * channel. */
static void im2col_same_avx512(const amp_conv_shape *s, size_t es, const void *x, void *col)
{
	const int64_t hw = s->H * s->W, lanes = es == 2 ? 32 : 16, C = s->C;
	const size_t cstride = (size_t)(s->KH * s->KW * hw) * es; /* from row (c,kh,kw) to c + 1 */
	same_cols sc = same_cols_init(s->W, es);
	same_masks t;
	for (int64_t j0 = 0; j0 < hw; j0 += SAME_SEG * lanes) {
		int64_t n = (hw - j0 + lanes - 1) / lanes;
		n = n < SAME_SEG ? n : SAME_SEG;
		same_masks_fill(&t, s, lanes, 1, j0, n, &sc);
		for (int64_t kh = 0; kh < s->KH; kh++)
			for (int64_t kw = 0; kw < s->KW; kw++) {
				int64_t shift = (kh - s->pad) * s->W + kw - s->pad;
				const char *src = (const char *)x + (size_t)(j0 + shift) * es;
				char *dst =
				    (char *)col + (size_t)((kh * s->KW + kw) * hw + j0) * es;
				for (int64_t q = 0; q < n; q++) {
					uint32_t m = t.row[kh][q] & t.col[kw][q];
					/* the last chunk of a row is stored masked: the next row
					 * may be written already */
					uint32_t st = t.end[q];
					const char *sp = src + (size_t)(q * lanes) * es;
					char *dp = dst + (size_t)(q * lanes) * es;
					for (int64_t c = 0; c < C;
					     c++, sp += hw * es, dp += cstride) {
						if (es == 2)
							_mm512_mask_storeu_epi16(
							    dp, st,
							    _mm512_maskz_loadu_epi16(m, sp));
						else
							_mm512_mask_storeu_epi32(
							    dp, (__mmask16)st,
							    _mm512_maskz_loadu_epi32((__mmask16)m,
							                             sp));
					}
				}
			}
	}
}

/* The adjoint: each pixel of a chunk of plane c adds the entries that read it, tap by tap in
 * (kh, kw) order as col2im_add_f32 (the same sums). */
static void col2im_same_avx512(const amp_conv_shape *s, const float *col, float *dx)
{
	const int64_t hw = s->H * s->W, taps = s->KH * s->KW, C = s->C;
	same_cols sc = same_cols_init(s->W, sizeof(float));
	same_masks t;
	for (int64_t j0 = 0; j0 < hw; j0 += SAME_SEG * 16) {
		int64_t n = (hw - j0 + 15) / 16;
		n = n < SAME_SEG ? n : SAME_SEG;
		same_masks_fill(&t, s, 16, -1, j0, n, &sc);
		for (int64_t q = 0; q < n; q++) {
			int64_t p0 = j0 + q * 16;
			__mmask16 m[SAME_K_MAX * SAME_K_MAX], dm = (__mmask16)t.end[q];
			for (int64_t kh = 0; kh < s->KH; kh++)
				for (int64_t kw = 0; kw < s->KW; kw++)
					m[kh * s->KW + kw] =
					    (__mmask16)(t.row[kh][q] & t.col[kw][q]);
			for (int64_t c = 0; c < C; c++) {
				float *d = dx + c * hw + p0;
				const float *r = col + c * taps * hw + p0;
				__m512 acc = _mm512_maskz_loadu_ps(dm, d);
				for (int64_t kh = 0, i = 0; kh < s->KH; kh++)
					for (int64_t kw = 0; kw < s->KW; kw++, i++, r += hw) {
						int64_t shift = (kh - s->pad) * s->W + kw - s->pad;
						/* only the lanes that read it add (-0 stays -0) */
						acc = _mm512_mask_add_ps(
						    acc, m[i], acc,
						    _mm512_maskz_loadu_ps(m[i], r - shift));
					}
				_mm512_mask_storeu_ps(d, dm, acc);
			}
		}
	}
}

/* im2col at stride 1: each output row is one load and one store per 32 halves or 16 floats,
 * the padding lanes zeroed in registers (a load that would leave the image is masked instead,
 * so they are never read).  The masks depend on the filter column and the chunk only, so the
 * rows are the inner loop.  A row of one chunk is stored full width: the rows of col are
 * consecutive, so its lanes past the row are rewritten by the next rows' stores (the rows
 * near the end of col are stored masked).  Same convolutions go to im2col_same_avx512, other
 * strides to im2col. */
static void im2col_avx512(const amp_conv_shape *s, size_t es, const void *x, void *col)
{
	if (conv_same(s)) {
		im2col_same_avx512(s, es, x, col);
		return;
	}
	if (s->stride != 1) {
		im2col(s, es, x, col);
		return;
	}
	const int64_t C = s->C, H = s->H, W = s->W, KH = s->KH, KW = s->KW, OH = s->OH;
	const int64_t OW = s->OW, pad = s->pad, lanes = es == 2 ? 32 : 16;
	const int64_t end = C * H * W; /* elements of x */
	char *out = col;               /* the first output row of the current filter tap */
	const char *stop = (const char *)col + (size_t)(C * KH * KW * OH * OW) * es; /* its end */
	for (int64_t c = 0; c < C; c++)
		for (int64_t kh = 0; kh < KH; kh++)
			for (int64_t kw = 0; kw < KW; kw++, out += (size_t)(OH * OW) * es) {
				int64_t lo, hi;
				conv_cols(s, kw, &lo, &hi);
				for (int64_t c0 = 0; c0 < OW; c0 += lanes) {
					int64_t n = OW - c0 < lanes ? OW - c0 : lanes;
					__mmask64 ld = col_mask(c0, lanes, lo, hi);
					/* one chunk: full width unless it would pass the end of col; else
					 * the tail chunk masked */
					__mmask64 st_n = n == lanes ? ~0ull : (1ull << n) - 1;
					__mmask64 st = OW <= lanes ? ~0ull : st_n;
					__m512i keep = es == 2 ? _mm512_movm_epi16((__mmask32)ld)
					                       : _mm512_movm_epi32((__mmask16)ld);
					for (int64_t oh = 0; oh < OH; oh++) {
						int64_t ih = oh - pad + kh;
						/* element of x that output column c0 reads */
						int64_t from = (c * H + ih) * W - pad + kw + c0;
						char *dst = out + (size_t)(oh * OW + c0) * es;
						__mmask64 m = dst + lanes * es <= stop ? st : st_n;
						__m512i v;
						if (ih < 0 || ih >= H)
							v = _mm512_setzero_si512();
						else if (from >= 0 && from + lanes <= end)
							v = _mm512_and_si512(
							    _mm512_loadu_si512((const char *)x + (size_t)from * es), keep);
						else if (es == 2)
							v = _mm512_maskz_loadu_epi16((__mmask32)ld,
							                             (const uint16_t *)x + from);
						else
							v = _mm512_maskz_loadu_epi32((__mmask16)ld,
							                             (const uint32_t *)x + from);
						if (es == 2)
							_mm512_mask_storeu_epi16(dst, (__mmask32)m, v);
						else
							_mm512_mask_storeu_epi32(dst, (__mmask16)m, v);
					}
				}
			}
}

/* col2im_add_f32 at stride 1, by input row: 16 pixels of a row gather their column entries
 * (one masked load per filter tap) in the (kh, kw) order of col2im_add_f32, so every pixel's
 * sum is the same, and are stored once.  Same convolutions go to col2im_same_avx512, other
 * strides to col2im_add_f32. */
static void col2im_add_avx512(const amp_conv_shape *s, const float *col, float *dx)
{
	if (conv_same(s)) {
		col2im_same_avx512(s, col, dx);
		return;
	}
	if (s->stride != 1) {
		col2im_add_f32(s, col, dx);
		return;
	}
	int64_t ohw = s->OH * s->OW;
	for (int64_t c = 0; c < s->C; c++)
		for (int64_t ih = 0; ih < s->H; ih++) {
			float *d = dx + (c * s->H + ih) * s->W;
			for (int64_t i0 = 0; i0 < s->W; i0 += 16) {
				__mmask16 dm = (__mmask16)col_mask(i0, 16, 0, s->W);
				__m512 acc = _mm512_maskz_loadu_ps(dm, d + i0);
				for (int64_t kh = 0; kh < s->KH; kh++) {
					int64_t oh = ih + s->pad - kh; /* the output row that read row ih */
					if (oh < 0 || oh >= s->OH)
						continue;
					for (int64_t kw = 0; kw < s->KW; kw++) {
						/* pixel iw was read by output column iw + pad - kw */
						int64_t shift = s->pad - kw;
						const float *r = col + ((c * s->KH + kh) * s->KW + kw) * ohw +
						                 oh * s->OW + shift;
						__mmask16 m = (__mmask16)col_mask(i0, 16, -shift, s->OW - shift) & dm;
						/* only the lanes that read it add (-0 stays -0) */
						acc = _mm512_mask_add_ps(acc, m, acc,
						                         _mm512_maskz_loadu_ps(m, r + i0));
					}
				}
				_mm512_mask_storeu_ps(d + i0, dm, acc);
			}
		}
}

/* 2x2 windows at stride 2 (the usual pooling layer) in registers, 16 outputs at a time:
 * each output row's two input rows are loaded (masked at the edge), widened to fp32 for the
 * comparisons, split into even and odd columns and compared as maxpool_plane does (the right
 * one only when larger or the first NaN, then row 1 only when larger or the first NaN); the
 * output takes the winner's stored bits.  Other windows go to maxpool_plane. */
static void maxpool_plane_avx512(amp_dtype dt, const void *x, int64_t W, int k, int stride,
                                 int64_t OH, int64_t OW, void *y, int32_t *arg)
{
	if (k != 2 || stride != 2) {
		maxpool_plane(dt, x, W, k, stride, OH, OW, y, arg);
		return;
	}
	const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26,
	                                       28, 30);
	const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
	const __m512i one = _mm512_set1_epi32(1);
	for (int64_t oh = 0; oh < OH; oh++)
		for (int64_t ow0 = 0; ow0 < OW; ow0 += 16) {
			int64_t nn = OW - ow0 < 16 ? OW - ow0 : 16;
			__mmask32 in_m = nn == 16 ? 0xffffffffu : (__mmask32)((1ull << (2 * nn)) - 1);
			__mmask16 out_m = (__mmask16)((1u << nn) - 1);
			__m512 m[2];
			__m512i mb[2], mi[2];
			for (int r = 0; r < 2; r++) {
				int64_t at = (2 * oh + r) * W + 2 * ow0;
				__m512 lo, hi;
				__m512i blo, bhi; /* the stored bits, zero-extended to 32 */
				if (dt == AMP_F32) {
					const float *p = (const float *)x + at;
					lo = _mm512_maskz_loadu_ps((__mmask16)in_m, p);
					hi = _mm512_maskz_loadu_ps((__mmask16)(in_m >> 16), p + 16);
					blo = _mm512_castps_si512(lo);
					bhi = _mm512_castps_si512(hi);
				} else {
					__m512i h = _mm512_maskz_loadu_epi16(in_m, (const uint16_t *)x + at);
					__m256i h0 = _mm512_castsi512_si256(h);
					__m256i h1 = _mm512_extracti64x4_epi64(h, 1);
					blo = _mm512_cvtepu16_epi32(h0);
					bhi = _mm512_cvtepu16_epi32(h1);
					if (dt == AMP_BF16) {
						lo = _mm512_castsi512_ps(_mm512_slli_epi32(blo, 16));
						hi = _mm512_castsi512_ps(_mm512_slli_epi32(bhi, 16));
					} else {
						lo = _mm512_cvtph_ps(h0);
						hi = _mm512_cvtph_ps(h1);
					}
				}
				__m512 a = _mm512_permutex2var_ps(lo, even, hi);
				__m512 b = _mm512_permutex2var_ps(lo, odd, hi);
				__mmask16 t = _mm512_cmp_ps_mask(b, a, _CMP_GT_OQ) |
				              (_mm512_cmp_ps_mask(b, b, _CMP_UNORD_Q) &
				               _mm512_cmp_ps_mask(a, a, _CMP_ORD_Q));
				m[r] = _mm512_mask_blend_ps(t, a, b);
				mb[r] = _mm512_mask_blend_epi32(t, _mm512_permutex2var_epi32(blo, even, bhi),
				                                _mm512_permutex2var_epi32(blo, odd, bhi));
				mi[r] = _mm512_maskz_mov_epi32(t, one);
			}
			__mmask16 t = _mm512_cmp_ps_mask(m[1], m[0], _CMP_GT_OQ) |
			              (_mm512_cmp_ps_mask(m[1], m[1], _CMP_UNORD_Q) &
			               _mm512_cmp_ps_mask(m[0], m[0], _CMP_ORD_Q));
			/* offset: 2 * oh * W + 2 * ow + (row 1 ? W : 0) + the column in the pair */
			__m512i col = _mm512_add_epi32(_mm512_set1_epi32((int32_t)(2 * oh * W + 2 * ow0)),
			                               even); /* even: 2 * ow - 2 * ow0 */
			__m512i off = _mm512_mask_add_epi32(mi[0], t, mi[1], _mm512_set1_epi32((int32_t)W));
			_mm512_mask_storeu_epi32(arg + oh * OW + ow0, out_m, _mm512_add_epi32(col, off));
			__m512i yb = _mm512_mask_blend_epi32(t, mb[0], mb[1]);
			if (dt == AMP_F32)
				_mm512_mask_storeu_epi32((float *)y + oh * OW + ow0, out_m, yb);
			else
				_mm512_mask_cvtepi32_storeu_epi16((uint16_t *)y + oh * OW + ow0, out_m, yb);
		}
}

const amp_kernel_table amp_kernels_avx512_table = {
	.isa = AMP_ISA_AVX512,
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
	.sgd_update = sgd_update,
	.adamw_update = adamw_update,
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
	.gelu_f32 = gelu_f32,
	.gelu_grad_f32 = gelu_grad_f32,
	.im2col = im2col_avx512,
	.col2im_add_f32 = col2im_add_avx512,
	.maxpool_plane = maxpool_plane_avx512,
};

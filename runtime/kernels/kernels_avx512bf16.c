/* kernels_avx512bf16.c — the avx512-bf16 path: what AVX512_BF16 does better than the avx512
 * path it falls back to for everything else: the bf16 GEMM on vdpbf16ps and the fp32 -> bf16
 * conversion with vcvtneps2bf16.
 *
 * GEMM: gemm_impl.h's driver with bf16 panels in k pairs (k, k+1 in one 32-bit lane, as
 * vdpbf16ps reads them), packed here; a 12 x 32 register tile of fp32 sums (24 zmm), each
 * vdpbf16ps adding two products per lane; C rounded once to bf16 after the fp32 accumulator
 * block (beta applied in fp32), its statistics taken in the epilogue.  vdpbf16ps reads bf16
 * subnormals as zero and flushes fp32 subnormal sums (DAZ/FTZ, no MXCSR), so results below
 * 2^-126 in magnitude differ from the other paths; the error bound is that of any fp32
 * summation (one rounding per product pair step).
 *
 * vcvtneps2bf16 rounds to nearest even and quiets NaNs exactly as amp_half_f32_to_bf16 does,
 * except that it reads fp32 subnormal inputs as zero (DAZ; measured over all 2^32 patterns, see
 * test_half.c): it gives the signed zero where correct rounding gives a bf16 subnormal, or
 * 0x0080 / 0x8080 for the largest ones.  Those lanes are found with two bit tests and
 * recomputed in integer arithmetic, so this path gives the bits of every other path.
 * Only called after dispatch.c has seen the avx512 features, AVX512_BF16 and OS ZMM support.
 */
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,fma,f16c,popcnt")

#include <immintrin.h>
#include <string.h>

#include "kernels/kernels_impl.h"

/* The low n bits set (n clamped to 0..16). */
static inline __mmask16 mask_n(int64_t n)
{
	return n >= 16 ? (__mmask16)0xffff : n <= 0 ? (__mmask16)0 : (__mmask16)((1u << n) - 1u);
}

/* 16 fp32 -> 16 bf16 in integer arithmetic, (x + 0x7fff + lsb) >> 16: right for the
 * subnormals (no carry into the sign), the only lanes it is used for. */
static inline __m256i bf16_int(__m512 v)
{
	__m512i x = _mm512_castps_si512(v);
	__m512i lsb = _mm512_and_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(1));
	__m512i r = _mm512_add_epi32(_mm512_add_epi32(x, _mm512_set1_epi32(0x7fff)), lsb);
	return _mm512_cvtepi32_epi16(_mm512_srli_epi32(r, 16));
}

/* 16 fp32 -> 16 bf16, round to nearest even, subnormal inputs rounded (not read as zero). */
static inline __m256i f32x16_to_bf16(__m512 v)
{
	__m256i b = (__m256i)_mm512_cvtneps_pbh(v);
	__mmask16 sub = _mm512_fpclass_ps_mask(v, 0x20);  /* denormal lanes */
	if (__builtin_expect(sub != 0, 0))
		b = _mm256_mask_mov_epi16(b, sub, bf16_int(v));
	return b;
}

/* 32 fp32 (lo, hi) -> 32 bf16 in one register, as f32x16_to_bf16 lane by lane. */
static inline __m512i f32x32_to_bf16(__m512 lo, __m512 hi)
{
	__m512i b = (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
	__mmask32 sub = (__mmask32)_mm512_fpclass_ps_mask(lo, 0x20) |
	                (__mmask32)_mm512_fpclass_ps_mask(hi, 0x20) << 16;
	if (__builtin_expect(sub != 0, 0)) {
		__m512i r = _mm512_inserti64x4(_mm512_castsi256_si512(bf16_int(lo)), bf16_int(hi), 1);
		b = _mm512_mask_mov_epi16(b, sub, r);
	}
	return b;
}

/* Lanes of b (16 bf16, by mask m) that are NaN or Inf. */
static inline int nonfinite16(__m256i b, __mmask16 m)
{
	const __m256i e = _mm256_set1_epi16(0x7f80);
	return __builtin_popcount(_mm256_mask_cmpeq_epi16_mask(m, _mm256_and_si256(b, e), e));
}

/* src: (n) fp32 -> dst: (n) bf16.  Returns the NaN and Inf bf16 written, counted on the
 * converted registers. */
static int64_t cvt_f2b(const float *src, uint16_t *dst, int64_t n)
{
	int64_t i = 0, bad = 0;
	for (; i + 32 <= n; i += 32) {
		__m256i b0 = f32x16_to_bf16(_mm512_loadu_ps(src + i));
		__m256i b1 = f32x16_to_bf16(_mm512_loadu_ps(src + i + 16));
		_mm256_storeu_si256((__m256i *)(dst + i), b0);
		_mm256_storeu_si256((__m256i *)(dst + i + 16), b1);
		bad += nonfinite16(b0, 0xffff) + nonfinite16(b1, 0xffff);
	}
	for (; i < n; i += 16) {
		__mmask16 m = mask_n(n - i);
		__m256i b = f32x16_to_bf16(_mm512_maskz_loadu_ps(m, src + i));
		_mm256_mask_storeu_epi16(dst + i, m, b);
		bad += nonfinite16(b, m);
	}
	return bad;
}

/* src: (n) bf16 -> dst: (n) fp32, exact. */
static void cvt_b2f(const uint16_t *src, float *dst, int64_t n)
{
	for (int64_t i = 0; i < n; i += 16) {
		__mmask16 m = mask_n(n - i);
		__m512i w = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, src + i));
		_mm512_mask_storeu_ps(dst + i, m, _mm512_castsi512_ps(_mm512_slli_epi32(w, 16)));
	}
}

#define GEMM_MR 12
#define GEMM_NR 32
#define GEMM_MC 144
#define GEMM_KC 512
#define GEMM_NC 1024
#define GEMM_PANEL_T uint16_t
#define GEMM_KP 2
#define GEMM_UKR_EDGES
#define GEMM_PACK_PATH
#define GEMM_BF16_ONLY
#define GEMM_UKR_NARROW
#define GEMM_UKR_DIRECT_PAIRS

/* r: 16 rows of 16 32-bit lanes -> their transpose, in registers. */
static inline void transpose16(__m512i r[16])
{
	__m512i t[16];
#pragma GCC unroll 8
	for (int i = 0; i < 8; i++) {
		t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
		t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
	}
#pragma GCC unroll 4
	for (int i = 0; i < 4; i++) {
		r[4 * i] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
		r[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
		r[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
		r[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
	}
	/* r[4i + j], 128-bit lane L: rows 4i .. 4i+3 of column 4L + j. */
#pragma GCC unroll 4
	for (int j = 0; j < 4; j++) {
		__m512i u0 = _mm512_shuffle_i32x4(r[j], r[4 + j], 0x88);
		__m512i u1 = _mm512_shuffle_i32x4(r[j], r[4 + j], 0xdd);
		__m512i u2 = _mm512_shuffle_i32x4(r[8 + j], r[12 + j], 0x88);
		__m512i u3 = _mm512_shuffle_i32x4(r[8 + j], r[12 + j], 0xdd);
		t[j] = _mm512_shuffle_i32x4(u0, u2, 0x88);
		t[4 + j] = _mm512_shuffle_i32x4(u1, u3, 0x88);
		t[8 + j] = _mm512_shuffle_i32x4(u0, u2, 0xdd);
		t[12 + j] = _mm512_shuffle_i32x4(u1, u3, 0xdd);
	}
#pragma GCC unroll 16
	for (int i = 0; i < 16; i++)
		r[i] = t[i];
}

/* op(X) rows [r0, r0+n), k [c0, c0+kc), bf16 -> ceil(n/pr) panels of (kc/2 rounded up, pr)
 * 32-bit pairs (k even in the low half), rows past n and the k past kc zero.  With k
 * contiguous in memory (cs == 1) each row already holds its pairs: 16 rows x 16 pairs go
 * through a 32-bit transpose in registers.  With rows contiguous (rs == 1) rows k and k+1 are
 * interleaved, 16 columns at a time. */
static void gemm_pack_path(const gemm_operand *x, int64_t r0, int64_t n, int64_t c0, int64_t kc,
                           int pr, uint16_t *restrict out)
{
	const uint16_t *p = x->p;
	int64_t kq = (kc + 1) / 2, np = (n + pr - 1) / pr;
	if (x->rs == 1) {
		/* Element (r, k) at r + k cs.  Eight pairs (16 rows of X) at a time for every panel:
		 * the panels lie a multiple of 4 KiB apart, and writing all of them for each pair
		 * would thrash one L1 set, while the 16 rows stay in L1 across the panels. */
		for (int64_t q0 = 0; q0 < kq; q0 += 8) {
			int64_t q1 = q0 + 8 < kq ? q0 + 8 : kq;
			for (int64_t pi = 0; pi < np; pi++) {
				int64_t rb = r0 + pi * pr, nr = n - pi * pr < pr ? n - pi * pr : pr;
				uint32_t *o = (uint32_t *)(void *)(out + pi * kq * 2 * pr);
				for (int64_t q = q0; q < q1; q++) {
					const uint16_t *k0 = p + rb + (c0 + 2 * q) * x->cs;
					int has1 = 2 * q + 1 < kc;
					int g = 0;
					if (has1 && nr >= 32 && pr >= 32) {
						/* Rows k and k+1 interleaved by 16-bit unpacks, lanes put back
						 * in order by a two-source qword permute. */
						const __m512i i0 = _mm512_set_epi64(11, 10, 3, 2, 9, 8, 1, 0);
						const __m512i i1 = _mm512_set_epi64(15, 14, 7, 6, 13, 12, 5, 4);
						__m512i a = _mm512_loadu_si512(k0), b = _mm512_loadu_si512(k0 + x->cs);
						__m512i lo = _mm512_unpacklo_epi16(a, b), hi = _mm512_unpackhi_epi16(a, b);
						_mm512_storeu_si512(o + q * pr, _mm512_permutex2var_epi64(lo, i0, hi));
						_mm512_storeu_si512(o + q * pr + 16,
						                    _mm512_permutex2var_epi64(lo, i1, hi));
						g = 32;
					}
					for (; g < pr; g += 16) {
						__mmask16 m = mask_n(nr - g);
						__m512i lo = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, k0 + g));
						__m512i hi = has1 ? _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(
						                        m, k0 + x->cs + g))
						                  : _mm512_setzero_si512();
						_mm512_mask_storeu_epi32(o + q * pr + g, mask_n(pr - g),
						                         _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16)));
					}
				}
			}
		}
		return;
	}
	for (int64_t pi = 0; pi < np; pi++) {
		int64_t rb = r0 + pi * pr, nr = n - pi * pr < pr ? n - pi * pr : pr;
		uint32_t *o = (uint32_t *)(void *)(out + pi * kq * 2 * pr);
		/* cs == 1: 16 rows x 16 pairs through a transpose. */
		for (int64_t q0 = 0; q0 < kq; q0 += 16) {
			int64_t kn = kc - 2 * q0;  /* halves left in each row */
			__mmask32 mk = kn >= 32 ? (__mmask32)0xffffffffu : (__mmask32)((1u << kn) - 1u);
			int qn = kq - q0 < 16 ? (int)(kq - q0) : 16;
			for (int g = 0; g < pr; g += 16) {
				__m512i v[16];
#pragma GCC unroll 16
				for (int r = 0; r < 16; r++) {
					if (g + r >= nr) {
						v[r] = _mm512_setzero_si512();
						continue;
					}
					const uint16_t *row = p + (rb + g + r) * x->rs + c0 + 2 * q0;
					_mm_prefetch((const char *)(row + 256), _MM_HINT_T0);
					v[r] = _mm512_maskz_loadu_epi16(mk, row);
				}
				transpose16(v);
				__mmask16 mw = mask_n(pr - g);
				for (int q = 0; q < qn; q++)
					_mm512_mask_storeu_epi32(o + (q0 + q) * pr + g, mw, v[q]);
			}
		}
	}
}

/* ap: (kc/2, 12) pairs (lda 0), or 12 rows of bf16 A in place at row stride lda (kc even),
 * bp: (kc/2, 32) pairs -> c: (mr, nr) fp32 at row stride ldc, [+]=,
 * with nv 16-wide column vectors (2, or 1 when nr <= 16); or, with out, the same fp32 values
 * rounded to bf16 into out (row stride ldo) and c only read.  Each element is one chain of
 * vdpbf16ps over the k pairs in order, whatever nv, mr and nr. */
static inline __attribute__((always_inline)) void
gemm_ukr_nv(int64_t kc, const uint16_t *restrict ap, int64_t lda, const uint16_t *restrict bp,
            float *restrict c, int64_t ldc, int accumulate, uint16_t *restrict out, int64_t ldo,
            int mr, int nr, const int nv)
{
	__m512 c0[GEMM_MR], c1[GEMM_MR];
#pragma GCC unroll 16
	for (int r = 0; r < GEMM_MR; r++) {
		c0[r] = c1[r] = _mm512_setzero_ps();
		if (r < mr && (accumulate || out == NULL))
			_mm_prefetch((const char *)(c + r * ldc), _MM_HINT_T0);
	}
	int64_t kq = (kc + 1) / 2;
	const int32_t *a32 = (const int32_t *)(const void *)ap;
	for (int64_t q = 0; q < kq; q++) {
		__m512bh b0 = (__m512bh)_mm512_loadu_si512(bp + q * 2 * GEMM_NR);
		__m512bh b1 = nv > 1 ? (__m512bh)_mm512_loadu_si512(bp + q * 2 * GEMM_NR + 32) : b0;
#pragma GCC unroll 16
		for (int r = 0; r < GEMM_MR; r++) {
			int32_t w;
			if (lda)
				memcpy(&w, ap + r * lda + 2 * q, sizeof w);
			else
				w = a32[q * GEMM_MR + r];
			__m512bh av = (__m512bh)_mm512_set1_epi32(w);
			c0[r] = _mm512_dpbf16_ps(c0[r], av, b0);
			if (nv > 1)
				c1[r] = _mm512_dpbf16_ps(c1[r], av, b1);
		}
	}
	__mmask16 m0 = mask_n(nr), m1 = mask_n(nr - 16);
#pragma GCC unroll 16
	for (int r = 0; r < GEMM_MR; r++) {
		if (r >= mr)
			break;
		float *cr = c + r * ldc;
		if (accumulate)
			c0[r] = _mm512_add_ps(c0[r], _mm512_maskz_loadu_ps(m0, cr));
		if (nv > 1 && accumulate)
			c1[r] = _mm512_add_ps(c1[r], _mm512_maskz_loadu_ps(m1, cr + 16));
		if (out) {
			uint16_t *o = out + r * ldo;
			if (nv > 1)
				_mm512_mask_storeu_epi16(o, (__mmask32)m0 | (__mmask32)m1 << 16,
				                         f32x32_to_bf16(c0[r], c1[r]));
			else
				_mm256_mask_storeu_epi16(o, m0, f32x16_to_bf16(c0[r]));
			continue;
		}
		_mm512_mask_storeu_ps(cr, m0, c0[r]);
		if (nv > 1)
			_mm512_mask_storeu_ps(cr + 16, m1, c1[r]);
	}
}

static void gemm_ukr(int64_t kc, const uint16_t *restrict ap, const uint16_t *restrict bp,
                     float *restrict c, int64_t ldc, int accumulate, int mr, int nr)
{
	if (nr > 16)
		gemm_ukr_nv(kc, ap, 0, bp, c, ldc, accumulate, NULL, 0, mr, nr, 2);
	else
		gemm_ukr_nv(kc, ap, 0, bp, c, ldc, accumulate, NULL, 0, mr, nr, 1);
}

static void gemm_ukr_narrow(int64_t kc, const uint16_t *restrict ap, const uint16_t *restrict bp,
                            const float *c, int64_t ldc, int accumulate, uint16_t *restrict out,
                            int64_t ldo, int mr, int nr, amp_dtype dt)
{
	(void)dt;  /* this path's GEMMs are bf16 only */
	float *cw = (float *)(uintptr_t)c;  /* only read under out */
	if (nr > 16)
		gemm_ukr_nv(kc, ap, 0, bp, cw, ldc, accumulate, out, ldo, mr, nr, 2);
	else
		gemm_ukr_nv(kc, ap, 0, bp, cw, ldc, accumulate, out, ldo, mr, nr, 1);
}

static void gemm_ukr_direct_pairs(int64_t kc, const uint16_t *restrict a, int64_t lda,
                                  const uint16_t *restrict bp, float *c, int64_t ldc,
                                  int accumulate, uint16_t *restrict out, int64_t ldo, int nr)
{
	if (nr > 16)
		gemm_ukr_nv(kc, a, lda, bp, c, ldc, accumulate, out, ldo, GEMM_MR, nr, 2);
	else
		gemm_ukr_nv(kc, a, lda, bp, c, ldc, accumulate, out, ldo, GEMM_MR, nr, 1);
}

#include "gemm_impl.h"

const amp_kernel_table amp_kernels_avx512bf16_table = {
	.isa = AMP_ISA_AVX512_BF16,
	.cvt_f32_bf16 = cvt_f2b,
	.cvt_bf16_f32 = cvt_b2f,
	.gemm = {[AMP_BF16] = gemm_bf16},
	.gemm_acc32 = {[AMP_BF16] = gemm_bf16_acc32},
	.gemm_engine = {[AMP_BF16] = AMP_ENGINE_AVX512_BF16},
};

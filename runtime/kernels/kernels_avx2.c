/* kernels_avx2.c — the AVX2 + FMA + F16C path: F16C conversions, a 6x16 fp32 FMA
 * microkernel, and the shared elementwise and GEMM templates compiled for this ISA.
 * Only called after dispatch.c has seen avx2, fma and f16c (and OS YMM support).
 */
#pragma GCC target("avx2,fma,f16c,popcnt")

#include <immintrin.h>

#include "kernels/kernels_impl.h"

#define VEC_BYTES 32
#define VEC_WIDEN_F16(p) ((vec_f32)_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p))))
#define VEC_NARROW_F16(p, v)                                                                       \
	_mm_storeu_si128((__m128i *)(p), _mm256_cvtps_ph((__m256)(v), _MM_FROUND_TO_NEAREST_INT))
#include "vec_impl.h"

/* Byte mask (two bits per half) of the NaN and Inf halves of h. */
static inline unsigned nonfinite_bits(__m128i h)
{
	const __m128i e = _mm_set1_epi16(0x7c00);
	return (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi16(_mm_and_si128(h, e), e));
}

/* src: (n) fp32 -> dst: (n) fp16, round to nearest even.  Returns the NaN and Inf halves
 * written, counted on the converted registers. */
static int64_t cvt_f2h(const float *src, uint16_t *dst, int64_t n)
{
	int64_t i = 0, bits = 0;
	for (; i + 16 <= n; i += 16) {
		__m128i h0 = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
		__m128i h1 = _mm256_cvtps_ph(_mm256_loadu_ps(src + i + 8), _MM_FROUND_TO_NEAREST_INT);
		_mm_storeu_si128((__m128i *)(dst + i), h0);
		_mm_storeu_si128((__m128i *)(dst + i + 8), h1);
		bits += __builtin_popcount(nonfinite_bits(h0) | nonfinite_bits(h1) << 16);
	}
	for (; i + 8 <= n; i += 8) {
		__m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
		_mm_storeu_si128((__m128i *)(dst + i), h);
		bits += __builtin_popcount(nonfinite_bits(h));
	}
	if (i < n) {
		/* Tail through a zero-padded buffer, so it is converted by the same instruction;
		 * the padding converts to zeros, which are not counted. */
		float f[8] = {0};
		uint16_t h[8];
		memcpy(f, src + i, (size_t)(n - i) * sizeof *f);
		__m128i v = _mm256_cvtps_ph(_mm256_loadu_ps(f), _MM_FROUND_TO_NEAREST_INT);
		_mm_storeu_si128((__m128i *)h, v);
		memcpy(dst + i, h, (size_t)(n - i) * sizeof *h);
		bits += __builtin_popcount(nonfinite_bits(v));
	}
	return bits / 2;
}

/* src: (n) fp16 -> dst: (n) fp32 (exact). */
static void cvt_h2f(const uint16_t *src, float *dst, int64_t n)
{
	int64_t i = 0;
	for (; i + 16 <= n; i += 16) {
		__m256 f0 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i)));
		__m256 f1 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i + 8)));
		_mm256_storeu_ps(dst + i, f0);
		_mm256_storeu_ps(dst + i + 8, f1);
	}
	for (; i + 8 <= n; i += 8)
		_mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
	if (i < n) {
		uint16_t h[8] = {0};
		float f[8];
		memcpy(h, src + i, (size_t)(n - i) * sizeof *h);
		_mm256_storeu_ps(f, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)h)));
		memcpy(dst + i, f, (size_t)(n - i) * sizeof *f);
	}
}

/* src: (n) fp32 -> dst: (n) bf16 (integer round to nearest even, vec_impl.h). */
static int64_t cvt_f2b(const float *src, uint16_t *dst, int64_t n)
{
	return cvt_f2b_int(src, dst, n);
}

#define GEMM_MR 6
#define GEMM_NR 16
#define GEMM_MC 96
#define GEMM_KC 256
#define GEMM_NC 1024
#define GEMM_PACK_FAST
#define GEMM_PACK_BLOCK_FAST

#define GEMM_UKR_EDGES
#define GEMM_UKR_NARROW

/* acc: the 6 x 16 fp32 sums ap (kc, 6) . bp (kc, 16), fp32 panels; one FMA chain per element,
 * over k in order. */
static inline __attribute__((always_inline)) void
gemm_sums(int64_t kc, const float *restrict ap, const float *restrict bp, __m256 acc[2 * GEMM_MR])
{
#pragma GCC unroll 12
	for (int r = 0; r < 2 * GEMM_MR; r++)
		acc[r] = _mm256_setzero_ps();
	for (int64_t k = 0; k < kc; k++) {
		__m256 b0 = _mm256_load_ps(bp + k * GEMM_NR);
		__m256 b1 = _mm256_load_ps(bp + k * GEMM_NR + 8);
#pragma GCC unroll 8
		for (int r = 0; r < GEMM_MR; r++) {
			__m256 av = _mm256_broadcast_ss(ap + k * GEMM_MR + r);
			acc[2 * r] = _mm256_fmadd_ps(av, b0, acc[2 * r]);
			acc[2 * r + 1] = _mm256_fmadd_ps(av, b1, acc[2 * r + 1]);
		}
	}
}

/* The tile of a partial (mr, nr) result: every accumulator stored (constant indices, so
 * that the accumulators stay in registers through the k loop), c's rows < mr and columns < nr
 * added when accumulating, in gemm_ukr's order (sum + c). */
static inline __attribute__((always_inline)) void
gemm_edge_tile(const __m256 acc[2 * GEMM_MR], const float *c, int64_t ldc, int accumulate,
               int mr, int nr, float tile[GEMM_MR * GEMM_NR])
{
#pragma GCC unroll 12
	for (int r = 0; r < 2 * GEMM_MR; r++)
		_mm256_store_ps(tile + 8 * r, acc[r]);
	if (accumulate)
		for (int r = 0; r < mr; r++)
			for (int j = 0; j < nr; j++)
				tile[r * GEMM_NR + j] += c[r * ldc + j];
}

/* acc[2r + h] += c's row r, columns 8h .. 8h+7, for a full tile. */
static inline __attribute__((always_inline)) void
gemm_add_c(__m256 acc[2 * GEMM_MR], const float *restrict c, int64_t ldc)
{
#pragma GCC unroll 8
	for (int r = 0; r < GEMM_MR; r++) {
		acc[2 * r] = _mm256_add_ps(acc[2 * r], _mm256_loadu_ps(c + r * ldc));
		acc[2 * r + 1] = _mm256_add_ps(acc[2 * r + 1], _mm256_loadu_ps(c + r * ldc + 8));
	}
}

/* ap: (kc, 6) fp32, bp: (kc, 16) fp32 -> c: (mr, nr) fp32 at row stride ldc, [+]=; only rows
 * < mr and columns < nr of c are touched. */
static void gemm_ukr(int64_t kc, const float *restrict ap, const float *restrict bp,
                     float *restrict c, int64_t ldc, int accumulate, int mr, int nr)
{
	__m256 acc[2 * GEMM_MR];
	gemm_sums(kc, ap, bp, acc);
	if (mr == GEMM_MR && nr == GEMM_NR) {
		if (accumulate)
			gemm_add_c(acc, c, ldc);
#pragma GCC unroll 8
		for (int r = 0; r < GEMM_MR; r++) {
			_mm256_storeu_ps(c + r * ldc, acc[2 * r]);
			_mm256_storeu_ps(c + r * ldc + 8, acc[2 * r + 1]);
		}
		return;
	}
	float tile[GEMM_MR * GEMM_NR] __attribute__((aligned(32)));
	gemm_edge_tile(acc, c, ldc, accumulate, mr, nr, tile);
	for (int r = 0; r < mr; r++)
		memcpy(c + r * ldc, tile + r * GEMM_NR, (size_t)nr * sizeof *tile);
}

/* v: 8 fp32 -> their bf16 in the low halves of 8 dwords, rounded as cvt_f2b_int (vec_impl.h):
 * to nearest even on the dropped 16 bits, NaN quieted with its sign and top payload bits. */
static inline __m256i round_bf16(__m256 v)
{
	__m256i x = _mm256_castps_si256(v), hi = _mm256_srli_epi32(x, 16);
	__m256i r = _mm256_srli_epi32(
	    _mm256_add_epi32(_mm256_add_epi32(x, _mm256_set1_epi32(0x7fff)),
	                     _mm256_and_si256(hi, _mm256_set1_epi32(1))),
	    16);
	__m256i nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
	return _mm256_blendv_epi8(r, _mm256_or_si256(hi, _mm256_set1_epi32(0x40)), nan);
}

/* v: 8 fp32 -> 8 bf16 (round_bf16). */
static inline __m128i narrow_bf16(__m256 v)
{
	__m256i r = round_bf16(v);
	return _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
}

/* lo, hi: 16 fp32 -> 16 bf16 in order (round_bf16): one pack and one lane shuffle for both. */
static inline __m256i narrow2_bf16(__m256 lo, __m256 hi)
{
	/* packus interleaves the 128-bit lanes: lo 0-3, hi 0-3, lo 4-7, hi 4-7 */
	__m256i p = _mm256_packus_epi32(round_bf16(lo), round_bf16(hi));
	return _mm256_permute4x64_epi64(p, 0xd8);
}

/* As gemm_ukr, the result rounded once into out (mr, nr) of the GEMM's half dtype dt at row
 * stride ldo (F16C for fp16, narrow_bf16 for bf16: the bits of cvt_f2h / cvt_f2b) instead of
 * being stored in c: the last k block of a half GEMM writes C itself. */
static void gemm_ukr_narrow(int64_t kc, const float *restrict ap, const float *restrict bp,
                            const float *c, int64_t ldc, int accumulate, uint16_t *out,
                            int64_t ldo, int mr, int nr, amp_dtype dt)
{
	__m256 acc[2 * GEMM_MR];
	gemm_sums(kc, ap, bp, acc);
	int full = mr == GEMM_MR && nr == GEMM_NR;
	if (full && accumulate)
		gemm_add_c(acc, c, ldc);
	if (!full) {
		float tile[GEMM_MR * GEMM_NR] __attribute__((aligned(32)));
		gemm_edge_tile(acc, c, ldc, accumulate, mr, nr, tile);
#pragma GCC unroll 12
		for (int r = 0; r < 2 * GEMM_MR; r++)
			acc[r] = _mm256_load_ps(tile + 8 * r);
	}
	if (dt == AMP_BF16 && full) { /* a row's 16 in one store */
#pragma GCC unroll 8
		for (int r = 0; r < GEMM_MR; r++)
			_mm256_storeu_si256((__m256i *)(out + r * ldo),
			                    narrow2_bf16(acc[2 * r], acc[2 * r + 1]));
		return;
	}
	__m128i h[2 * GEMM_MR];
	if (dt == AMP_BF16) {
#pragma GCC unroll 12
		for (int r = 0; r < 2 * GEMM_MR; r++)
			h[r] = narrow_bf16(acc[r]);
	} else {
#pragma GCC unroll 12
		for (int r = 0; r < 2 * GEMM_MR; r++)
			h[r] = _mm256_cvtps_ph(acc[r], _MM_FROUND_TO_NEAREST_INT);
	}
	if (full) {
#pragma GCC unroll 8
		for (int r = 0; r < GEMM_MR; r++) {
			_mm_storeu_si128((__m128i *)(out + r * ldo), h[2 * r]);
			_mm_storeu_si128((__m128i *)(out + r * ldo + 8), h[2 * r + 1]);
		}
		return;
	}
	uint16_t t[GEMM_MR * GEMM_NR] __attribute__((aligned(16)));
#pragma GCC unroll 12
	for (int r = 0; r < 2 * GEMM_MR; r++)
		_mm_store_si128((__m128i *)(t + 8 * r), h[r]);
	for (int r = 0; r < mr; r++)
		memcpy(out + r * ldo, t + r * GEMM_NR, (size_t)nr * sizeof *t);
}

/* The first n (0..8) elements of X at element offset off, fp32, fp16 or bf16 -> the low n
 * fp32 lanes (exact), the others zero; reads no element past the n-th.  Whole vectors and the
 * six of a 6-row panel are loaded directly, other short runs through a zeroed buffer (AVX2 has
 * no masked 16-bit loads). */
static inline __m256 load_run8(const gemm_operand *x, int64_t off, int64_t n)
{
	if (x->dt == AMP_F32) {
		const float *p = (const float *)x->p + off;
		if (n >= 8)
			return _mm256_loadu_ps(p);
		if (n == 6)
			return _mm256_insertf128_ps(_mm256_castps128_ps256(_mm_loadu_ps(p)),
			                            _mm_castsi128_ps(_mm_loadl_epi64((const __m128i *)(p + 4))), 1);
		float f[8] = {0};
		if (n > 0)
			memcpy(f, p, (size_t)n * sizeof *f);
		return _mm256_loadu_ps(f);
	}
	const uint16_t *p = (const uint16_t *)x->p + off;
	__m128i h;
	if (n >= 8) {
		h = _mm_loadu_si128((const __m128i *)p);
	} else if (n == 6) {
		int32_t last;
		memcpy(&last, p + 4, sizeof last);
		h = _mm_insert_epi32(_mm_loadl_epi64((const __m128i *)p), last, 2);
	} else {
		uint16_t b[8] = {0};
		if (n > 0)
			memcpy(b, p, (size_t)n * sizeof *b);
		h = _mm_loadu_si128((const __m128i *)b);
	}
	if (x->dt == AMP_F16)
		return _mm256_cvtph_ps(h);
	return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

static inline int64_t clamp8(int64_t n, int w)
{
	return n < w ? n : w;
}

/* r: 8 rows of 8 fp32 -> their transpose, in registers. */
static inline void transpose8(__m256 r[8])
{
	__m256 t[8], u[8];
#pragma GCC unroll 4
	for (int i = 0; i < 4; i++) {
		t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
		t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
	}
	/* u[4i + j], 128-bit lane L: rows 4i .. 4i+3 of column 4L + j */
#pragma GCC unroll 2
	for (int i = 0; i < 2; i++) {
		u[4 * i] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], _MM_SHUFFLE(1, 0, 1, 0));
		u[4 * i + 1] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], _MM_SHUFFLE(3, 2, 3, 2));
		u[4 * i + 2] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], _MM_SHUFFLE(1, 0, 1, 0));
		u[4 * i + 3] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], _MM_SHUFFLE(3, 2, 3, 2));
	}
#pragma GCC unroll 4
	for (int j = 0; j < 4; j++) {
		r[j] = _mm256_permute2f128_ps(u[j], u[4 + j], 0x20);
		r[4 + j] = _mm256_permute2f128_ps(u[j], u[4 + j], 0x31);
	}
}

/* Stores the low w (1..8) lanes of v at o. */
static inline void store_lanes(float *o, __m256 v, int w)
{
	if (w == 8) {
		_mm256_storeu_ps(o, v);
		return;
	}
	if (w == 6) {
		_mm_storeu_ps(o, _mm256_castps256_ps128(v));
		_mm_storel_epi64((__m128i *)(o + 4), _mm_castps_si128(_mm256_extractf128_ps(v, 1)));
		return;
	}
	float f[8];
	_mm256_storeu_ps(f, v);
	memcpy(o, f, (size_t)w * sizeof *f);
}

/* gemm_pack_block for contiguous panel rows (rs == 1): op(X) rows [r0, r0+n), k [c0, c0+kc)
 * -> ceil(n/pr) panels of (kc, pr), widened from a half type if need be.  Walks X along its
 * rows (k outer), eight k at a time per panel (the panels lie kc * pr floats apart, often a
 * multiple of 4 KiB: writing all of them for each k would thrash one L1 set). */
static int gemm_pack_block_fast(const gemm_operand *x, int64_t r0, int64_t n, int64_t c0,
                                int64_t kc, int pr, float *restrict out)
{
	if (x->rs != 1)
		return 0;
	int64_t np = (n + pr - 1) / pr;
	for (int64_t k0 = 0; k0 < kc; k0 += 8) {
		int64_t k1 = k0 + 8 < kc ? k0 + 8 : kc;
		for (int64_t p = 0; p < np; p++) {
			float *o = out + p * kc * pr;
			for (int64_t k = k0; k < k1; k++) {
				int64_t off = r0 + (c0 + k) * x->cs + p * pr;
				for (int g = 0; g < pr; g += 8)
				{
					int w = pr - g < 8 ? pr - g : 8;
					store_lanes(o + k * pr + g, load_run8(x, off + g, clamp8(n - p * pr - g, w)),
					            w);
				}
			}
		}
	}
	return 1;
}

/* gemm_pack_panel for both layouts, halves widened on the way: op(X)[r0 .. r0+nr)
 * [c0 .. c0+kc) -> out: (kc, pr) fp32, rows past nr zero.  Contiguous panel rows (rs == 1) are
 * copied as runs; strided ones (cs == 1) go through 8 x 8 register transposes. */
static int gemm_pack_fast(const gemm_operand *x, int64_t r0, int64_t nr, int64_t c0, int64_t kc,
                          int pr, float *restrict out)
{
	if (x->rs == 1) {
		for (int64_t k = 0; k < kc; k++) {
			int64_t off = r0 + (c0 + k) * x->cs;
			for (int g = 0; g < pr; g += 8)
			{
				int w = pr - g < 8 ? pr - g : 8;
				store_lanes(out + k * pr + g, load_run8(x, off + g, clamp8(nr - g, w)), w);
			}
		}
		return 1;
	}
	if (x->cs != 1)
		return 0;
	for (int64_t k0 = 0; k0 < kc; k0 += 8) {
		int kn = kc - k0 < 8 ? (int)(kc - k0) : 8;
		for (int g = 0; g < pr; g += 8) {
			int w = pr - g < 8 ? pr - g : 8;
			__m256 v[8];
#pragma GCC unroll 8
			for (int r = 0; r < 8; r++)
				v[r] = g + r < nr ? load_run8(x, (r0 + g + r) * x->rs + c0 + k0, kn)
				                  : _mm256_setzero_ps();
			transpose8(v);
			for (int k = 0; k < kn; k++)
				store_lanes(out + (k0 + k) * pr + g, v[k], w);
		}
	}
	return 1;
}

#include "gemm_impl.h"
#include "nn_impl.h"
#define VECH16_ENGINE AMP_ENGINE_FP32_FMA
#include "vech16_impl.h"

/* The 16 values of X (dtype dt) from element at as two fp32 vectors, and their stored bits
 * zero-extended to 32.  Only the first n (<= 16) are read when avail, the elements that may be
 * read from at on, is less than 16 (the rest are then zero); otherwise all 16 are loaded and
 * the lanes past n hold whatever follows (the comparisons are lane by lane). */
static inline void pool_row16(amp_dtype dt, const void *x, int64_t at, int64_t n, int64_t avail,
                              __m256 v[2], __m256i bits[2])
{
	if (dt == AMP_F32) {
		const float *p = (const float *)x + at;
		float buf[16] = {0};
		if (avail < 16) {
			memcpy(buf, p, (size_t)n * sizeof *buf);
			p = buf;
		}
		v[0] = _mm256_loadu_ps(p);
		v[1] = _mm256_loadu_ps(p + 8);
		bits[0] = _mm256_castps_si256(v[0]);
		bits[1] = _mm256_castps_si256(v[1]);
		return;
	}
	const uint16_t *p = (const uint16_t *)x + at;
	uint16_t buf[16] = {0};
	if (avail < 16) {
		memcpy(buf, p, (size_t)n * sizeof *buf);
		p = buf;
	}
	__m128i h0 = _mm_loadu_si128((const __m128i *)p), h1 = _mm_loadu_si128((const __m128i *)(p + 8));
	bits[0] = _mm256_cvtepu16_epi32(h0);
	bits[1] = _mm256_cvtepu16_epi32(h1);
	if (dt == AMP_BF16) {
		v[0] = _mm256_castsi256_ps(_mm256_slli_epi32(bits[0], 16));
		v[1] = _mm256_castsi256_ps(_mm256_slli_epi32(bits[1], 16));
	} else {
		v[0] = _mm256_cvtph_ps(h0);
		v[1] = _mm256_cvtph_ps(h1);
	}
}

/* All-ones lanes where v takes over from bv: v larger, or v the first NaN (pool_takes). */
static inline __m256 pool_takes8(__m256 v, __m256 bv)
{
	return _mm256_or_ps(_mm256_cmp_ps(v, bv, _CMP_GT_OQ),
	                    _mm256_and_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q),
	                                  _mm256_cmp_ps(bv, bv, _CMP_ORD_Q)));
}

/* 2x2 windows at stride 2 in registers, 8 outputs at a time: each output row's two input rows
 * widened to fp32, split into even and odd columns and compared as maxpool_plane does (the
 * right one only when larger or the first NaN, then row 1 only when larger or the first NaN);
 * the output takes the winner's stored bits.  Rows are short (7, 14 outputs): whole vectors are
 * loaded and stored past a row's end wherever the plane goes on (a later row's store puts its
 * own values there), so only the plane's last elements take the byte-exact way.  Other windows
 * go to maxpool_plane. */
static void maxpool_plane_avx2(amp_dtype dt, const void *x, int64_t W, int k, int stride,
                               int64_t OH, int64_t OW, void *y, int32_t *arg)
{
	if (k != 2 || stride != 2) {
		maxpool_plane(dt, x, W, k, stride, OH, OW, y, arg);
		return;
	}
	const __m256i one = _mm256_set1_epi32(1), wv = _mm256_set1_epi32((int32_t)W);
	const __m256i even = _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14);
	const int64_t in_end = 2 * OH * W, out_end = OH * OW; /* what may be read, written */
	for (int64_t oh = 0; oh < OH; oh++)
		for (int64_t ow0 = 0; ow0 < OW; ow0 += 8) {
			int64_t nn = OW - ow0 < 8 ? OW - ow0 : 8;
			__m256 m[2];
			__m256i mb[2], mi[2];
			for (int r = 0; r < 2; r++) {
				__m256 v[2];
				__m256i b[2];
				int64_t at = (2 * oh + r) * W + 2 * ow0;
				pool_row16(dt, x, at, 2 * nn, in_end - at, v, b);
				/* columns 0, 2, .. 14 and 1, 3, .. 15: in-lane shuffles, then the qwords
				 * put in order */
				__m256 ev = _mm256_castpd_ps(_mm256_permute4x64_pd(
				    _mm256_castps_pd(_mm256_shuffle_ps(v[0], v[1], _MM_SHUFFLE(2, 0, 2, 0))),
				    0xd8));
				__m256 od = _mm256_castpd_ps(_mm256_permute4x64_pd(
				    _mm256_castps_pd(_mm256_shuffle_ps(v[0], v[1], _MM_SHUFFLE(3, 1, 3, 1))),
				    0xd8));
				__m256 bl = _mm256_castsi256_ps(b[0]), bh = _mm256_castsi256_ps(b[1]);
				__m256i eb = _mm256_castpd_si256(_mm256_permute4x64_pd(
				    _mm256_castps_pd(_mm256_shuffle_ps(bl, bh, _MM_SHUFFLE(2, 0, 2, 0))), 0xd8));
				__m256i ob = _mm256_castpd_si256(_mm256_permute4x64_pd(
				    _mm256_castps_pd(_mm256_shuffle_ps(bl, bh, _MM_SHUFFLE(3, 1, 3, 1))), 0xd8));
				__m256 t = pool_takes8(od, ev);
				m[r] = _mm256_blendv_ps(ev, od, t);
				mb[r] = _mm256_blendv_epi8(eb, ob, _mm256_castps_si256(t));
				mi[r] = _mm256_and_si256(_mm256_castps_si256(t), one);
			}
			__m256i t = _mm256_castps_si256(pool_takes8(m[1], m[0]));
			/* offset: 2 * oh * W + 2 * ow + (row 1 ? W : 0) + the column in the pair */
			__m256i col = _mm256_add_epi32(_mm256_set1_epi32((int32_t)(2 * oh * W + 2 * ow0)),
			                               even);
			__m256i off = _mm256_add_epi32(
			    col, _mm256_blendv_epi8(mi[0], _mm256_add_epi32(mi[1], wv), t));
			__m256i yb = _mm256_blendv_epi8(mb[0], mb[1], t);
			int64_t o = oh * OW + ow0;
			/* a half's bits, zero-extended: packed back to 16 (fp32 stores yb itself) */
			__m128i yh = dt == AMP_F32 ? _mm_setzero_si128()
			                           : _mm_packus_epi32(_mm256_castsi256_si128(yb),
			                                              _mm256_extracti128_si256(yb, 1));
			if (o + 8 <= out_end) {
				_mm256_storeu_si256((__m256i *)(arg + o), off);
				if (dt == AMP_F32)
					_mm256_storeu_si256((__m256i *)((float *)y + o), yb);
				else
					_mm_storeu_si128((__m128i *)((uint16_t *)y + o), yh);
				continue;
			}
			int32_t ao[8], yo[8];
			uint16_t y16[8];
			_mm256_storeu_si256((__m256i *)ao, off);
			_mm256_storeu_si256((__m256i *)yo, yb);
			_mm_storeu_si128((__m128i *)y16, yh);
			memcpy(arg + o, ao, (size_t)nn * sizeof *ao);
			if (dt == AMP_F32)
				memcpy((float *)y + o, yo, (size_t)nn * sizeof *yo);
			else
				memcpy((uint16_t *)y + o, y16, (size_t)nn * sizeof *y16);
		}
}

const amp_kernel_table amp_kernels_avx2_table = {
	.isa = AMP_ISA_AVX2,
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
	.im2col = im2col,
	.col2im_add_f32 = col2im_add_f32,
	.maxpool_plane = maxpool_plane_avx2,
};

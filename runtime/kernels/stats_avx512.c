/* stats_avx512.c — the AVX-512 statistics paths.  With VBMI, GFNI and VPOPCNTDQ (Ice Lake,
 * Zen 4 and later): one pass per block, the exponent histogram counted on bit planes.  With
 * F/BW only: 64 elements per step, their histogram codes packed to bytes, bins counted with
 * byte compares into mask-added byte counters.  Only called after dispatch.c has seen AVX-512
 * F/BW/VL/DQ and OS ZMM support; the extensions are checked here.
 */
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq")

#include <cpuid.h>
#include <immintrin.h>

#define VEC_BYTES 64
#include "kernels/stats_impl.h"

#define STEP 64  /* elements per packed code vector (F/BW path) */

/* Smallest and largest byte of v. */
static void bytes_range(__m512i lo, __m512i hi, unsigned *kmin, unsigned *kmax)
{
	__m256i l = _mm256_min_epu8(_mm512_castsi512_si256(lo), _mm512_extracti64x4_epi64(lo, 1));
	__m256i h = _mm256_max_epu8(_mm512_castsi512_si256(hi), _mm512_extracti64x4_epi64(hi, 1));
	__m128i l2 = _mm_min_epu8(_mm256_castsi256_si128(l), _mm256_extracti128_si256(l, 1));
	__m128i h2 = _mm_max_epu8(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
	uint8_t lb[16], hb[16];
	_mm_storeu_si128((__m128i *)lb, l2);
	_mm_storeu_si128((__m128i *)hb, h2);
	unsigned mn = 255, mx = 0;
	for (int i = 0; i < 16; i++) {
		mn = lb[i] < mn ? lb[i] : mn;
		mx = hb[i] > mx ? hb[i] : mx;
	}
	*kmin = mn;
	*kmax = mx;
}

/* codes: (n) bytes, n a multiple of 64, 64-byte aligned -> hist[k] += #(code == k), k in
 * [lo, hi].  Byte counters: n / 64 <= 255. */
static void count_codes(const uint8_t *codes, int64_t n, unsigned lo, unsigned hi, uint64_t *hist)
{
	const __m512i one = _mm512_set1_epi8(1), zero = _mm512_setzero_si512();
	for (unsigned k = lo; k <= hi; k++) {
		const __m512i kv = _mm512_set1_epi8((char)k);
		__m512i c0 = zero, c1 = zero;
		int64_t i = 0;
		for (; i + 2 * STEP <= n; i += 2 * STEP) {
			__mmask64 m0 = _mm512_cmpeq_epi8_mask(_mm512_load_si512(codes + i), kv);
			__mmask64 m1 = _mm512_cmpeq_epi8_mask(_mm512_load_si512(codes + i + STEP), kv);
			c0 = _mm512_mask_add_epi8(c0, m0, c0, one);
			c1 = _mm512_mask_add_epi8(c1, m1, c1, one);
		}
		if (i < n)
			c0 = _mm512_mask_add_epi8(
			    c0, _mm512_cmpeq_epi8_mask(_mm512_load_si512(codes + i), kv), c0, one);
		__m512i s = _mm512_add_epi64(_mm512_sad_epu8(c0, zero), _mm512_sad_epu8(c1, zero));
		hist[k] += (uint64_t)_mm512_reduce_add_epi64(s);
	}
}

/* x: (n) fp32, n a multiple of 64, <= STATS_BLOCK -> s. */
static void block_f32_bw(const float *x, int64_t n, stats_acc *s)
{
	_Alignas(64) uint8_t codes[STATS_BLOCK];
	const __m512i abs = _mm512_set1_epi32((int)F32_ABS), one = _mm512_set1_epi32(1);
	const __m512i b111 = _mm512_set1_epi8(111), b1 = _mm512_set1_epi8(1),
	              b32 = _mm512_set1_epi8(32);
	__m512 vmn = _mm512_set1_ps(INFINITY), vmx = _mm512_set1_ps(-INFINITY);
	__m512i cmn = _mm512_set1_epi8(-1), cmx = _mm512_setzero_si512();
	for (int64_t i = 0; i < n; i += STEP) {
		__m512i e[4];
		for (int j = 0; j < 4; j++) {
			__m512 v = _mm512_loadu_ps(x + i + 16 * j);
			vmn = _mm512_min_ps(vmn, v);
			vmx = _mm512_max_ps(vmx, v);
			__m512i a = _mm512_and_si512(_mm512_castps_si512(v), abs);
			/* biased exponent, 1 for subnormals, 0 for zeros */
			e[j] = _mm512_max_epu32(_mm512_srli_epi32(a, 23), _mm512_min_epu32(a, one));
		}
		/* lane order is lost in the packs; the histogram does not care */
		__m512i c = _mm512_packus_epi16(_mm512_packs_epi32(e[0], e[1]),
		                                _mm512_packs_epi32(e[2], e[3]));
		/* 0 -> 0, 1..112 -> 1, 113..142 -> 2..31, >= 143 -> 32 */
		c = _mm512_min_epu8(_mm512_max_epu8(_mm512_subs_epu8(c, b111), _mm512_min_epu8(c, b1)),
		                    b32);
		_mm512_store_si512(codes + i, c);
		cmn = _mm512_min_epu8(cmn, c);
		cmx = _mm512_max_epu8(cmx, c);
	}
	unsigned kmin, kmax;
	bytes_range(cmn, cmx, &kmin, &kmax);
	count_codes(codes, n, kmin, kmax, s->hist);
	float lo, hi;
	if (kmax >= 31) {
		fix_f32(x, n, s, &lo, &hi);
	} else {
		lo = _mm512_reduce_min_ps(vmn);
		hi = _mm512_reduce_max_ps(vmx);
	}
	acc_minmax(s, lo, hi);
	s->count += (uint64_t)n;
}

/* Smallest and largest int16 of v. */
static void i16_range(__m512i lo, __m512i hi, int16_t *mn, int16_t *mx)
{
	_Alignas(64) int16_t lb[32], hb[32];
	_mm512_store_si512(lb, lo);
	_mm512_store_si512(hb, hi);
	int16_t a = INT16_MAX, b = INT16_MIN;
	for (int i = 0; i < 32; i++) {
		a = lb[i] < a ? lb[i] : a;
		b = hb[i] > b ? hb[i] : b;
	}
	*mn = a;
	*mx = b;
}

/* x: (n) fp16, n a multiple of 64, <= STATS_BLOCK -> s. */
static void block_f16_bw(const uint16_t *x, int64_t n, stats_acc *s)
{
	_Alignas(64) uint8_t codes[STATS_BLOCK];
	const __m512i abs = _mm512_set1_epi16((short)F16_ABS), one = _mm512_set1_epi16(1);
	__m512i kmn = _mm512_set1_epi16(INT16_MAX), kmx = _mm512_set1_epi16(INT16_MIN);
	__m512i cmn = _mm512_set1_epi8(-1), cmx = _mm512_setzero_si512();
	for (int64_t i = 0; i < n; i += STEP) {
		__m512i c[2];
		for (int j = 0; j < 2; j++) {
			__m512i h = _mm512_loadu_si512(x + i + 32 * j);
			/* order-preserving key: h ^ (sign ? 0x7fff : 0) */
			__m512i key = _mm512_ternarylogic_epi32(h, _mm512_srai_epi16(h, 15), abs, 0x78);
			kmn = _mm512_min_epi16(kmn, key);
			kmx = _mm512_max_epi16(kmx, key);
			__m512i a = _mm512_and_si512(h, abs);
			/* exponent + 1, 0 for zeros: the bin itself (Inf/NaN -> 32) */
			c[j] = _mm512_add_epi16(_mm512_srli_epi16(a, 10), _mm512_min_epu16(a, one));
		}
		__m512i b = _mm512_packus_epi16(c[0], c[1]);
		_mm512_store_si512(codes + i, b);
		cmn = _mm512_min_epu8(cmn, b);
		cmx = _mm512_max_epu8(cmx, b);
	}
	unsigned kmin, kmax;
	bytes_range(cmn, cmx, &kmin, &kmax);
	count_codes(codes, n, kmin, kmax, s->hist);
	float lo, hi;
	if (kmax >= 31) {
		fix_f16(x, n, s, &lo, &hi);
	} else {
		int16_t a, b;
		i16_range(kmn, kmx, &a, &b);
		lo = f16_of_key(a);
		hi = f16_of_key(b);
	}
	acc_minmax(s, lo, hi);
	s->count += (uint64_t)n;
}

/* x: (n) fp32 -> st. */
STATS_DRIVER(stats_f32_bw, float, block_f32_bw, elem_f32, STEP)

/* x: (n) fp16 -> st. */
STATS_DRIVER(stats_f16_bw, uint16_t, block_f16_bw, elem_f16, STEP)

/* ---- VBMI + GFNI + VPOPCNTDQ: one pass, the bins counted on bit planes --------------------
 *
 * Each element has a 5-bit exponent e (fp16: its biased exponent; fp32: its exponent minus 112,
 * clamped to 0..31), and bin e + 1, or 0 for a zero.  A group of 512 elements becomes five
 * 512-bit planes, plane k holding bit k of every e: vpermt2b gathers the 64 bytes that carry
 * the exponents of 64 elements, gf2p8affineqb transposes each 8x8 bit block (byte k of qword q
 * = bit k of bytes 8q..8q+7), and a tree of 19 vpermt2b over the group's 8 chunks of 64 moves
 * byte k of every qword into plane k.  Bit B of every plane is element B ^ 7 of the group.
 *
 * For each of the 31 non-empty subsets S of the planes, sub[S] sums popcount(AND of S): the
 * number of elements whose e has all the bits of S set.  The count of each value of e follows
 * by Moebius inversion at the end (finish_ext).  26 ANDs, 31 popcounts and 31 adds per 512
 * elements whatever the spread of the data, where compares cost a pass per bin; the 16
 * subsets with plane 4 are skipped in a block without e >= 16 (|x| < 2, the common case).
 *
 * Finite min/max come from running maxima (signed and unsigned of the fp16 bits, vminps and
 * vmaxps on fp32) per block of STATS_BLOCK.  A block with e == 31 (Inf, NaN; fp32 also
 * |x| >= 65536) takes the exact fix-up; one with e == 30 (32768 <= |x| < 65536), or an fp16
 * block all of one sign and without zeros, is read again (from L1) for its near-overflow count
 * and smallest magnitude.  Zeros: fp16 counts them inline with mask popcounts on the integer
 * units, fp32 reads again the blocks that have e == 0.
 */
#define EXT_TARGET __attribute__((target("avx512vbmi,gfni,avx512vpopcntdq")))
#define EXT_INLINE static inline __attribute__((always_inline)) EXT_TARGET

#define GROUP    512  /* elements per plane set */
#define NPL      6    /* vectors per plane set: the 5 planes and the e == 0 mask (fp32) */
#define PREFETCH 2048 /* elements ahead (the next block is read while this one is counted) */

/* Byte-index tables for vpermt2b, one 64-byte row each, built from their formula. */
#define I8(F, b) F(b), F(b + 1), F(b + 2), F(b + 3), F(b + 4), F(b + 5), F(b + 6), F(b + 7)
#define I64(F)   I8(F, 0), I8(F, 8), I8(F, 16), I8(F, 24), I8(F, 32), I8(F, 40), I8(F, 48), I8(F, 56)
/* the odd bytes of two vectors: the high byte of each of 64 fp16 */
#define IX_HI(i) (2 * (i) + 1)
/* level 1, sources a, b: byte i = plane i / 16 (0..3) of source (i / 8) % 2, qword i % 8 */
#define IX_L1A(i) ((((i) >> 3) & 1) * 64 + ((i)&7) * 8 + ((i) >> 4))
/* level 1: plane 4 of both sources in bytes 0..15 (repeated) */
#define IX_L1B(i) ((((i) >> 3) & 1) * 64 + ((i)&7) * 8 + 4)
/* level 2, two level-1 vectors: planes 0, 1 (lo) or 2, 3 (hi), byte i = plane i / 32 */
#define IX_L2LO(i) ((((i) >> 4) & 1) * 64 + ((i) >> 5) * 16 + ((i)&15))
#define IX_L2HI(i) ((((i) >> 4) & 1) * 64 + (2 + ((i) >> 5)) * 16 + ((i)&15))
/* level 2: plane 4 of two level-1 vectors in bytes 0..31 (repeated) */
#define IX_L2P4(i) ((((i) >> 4) & 1) * 64 + ((i)&15))
/* level 3: the first (A) or second (B) half of two level-2 vectors */
#define IX_L3A(i) (((i) >> 5) * 64 + ((i)&31))
#define IX_L3B(i) (((i) >> 5) * 64 + 32 + ((i)&31))

static const uint8_t ix_tab[8][64] __attribute__((aligned(64))) = {
    {I64(IX_HI)},   {I64(IX_L1A)},  {I64(IX_L1B)}, {I64(IX_L2LO)},
    {I64(IX_L2HI)}, {I64(IX_L2P4)}, {I64(IX_L3A)}, {I64(IX_L3B)},
};
enum { T_HI, T_L1A, T_L1B, T_L2LO, T_L2HI, T_L2P4, T_L3A, T_L3B };

/* the odd words of two vectors: the high half of each of 32 fp32 */
static const uint16_t ix_hiw[32] __attribute__((aligned(64))) = {
    1,  3,  5,  7,  9,  11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31,
    33, 35, 37, 39, 41, 43, 45, 47, 49, 51, 53, 55, 57, 59, 61, 63,
};

typedef struct ext_acc {
	__m512i sub[32]; /* [S], S = 1..31: qword sums of popcount(AND of the planes in S) */
} ext_acc;

/* t: 8 transposed chunks -> p: the five planes, and unless e0 is NULL, in p[5] the elements
 * with e == 0, which *e0 gathers too. */
EXT_INLINE void transpose_planes(const __m512i t[8], __m512i p[NPL], __m512i *e0)
{
	const __m512i l1a = _mm512_load_si512(ix_tab[T_L1A]),
	              l1b = _mm512_load_si512(ix_tab[T_L1B]);
	const __m512i l2lo = _mm512_load_si512(ix_tab[T_L2LO]);
	const __m512i l2hi = _mm512_load_si512(ix_tab[T_L2HI]);
	const __m512i l2p4 = _mm512_load_si512(ix_tab[T_L2P4]);
	const __m512i l3a = _mm512_load_si512(ix_tab[T_L3A]),
	              l3b = _mm512_load_si512(ix_tab[T_L3B]);
	__m512i a01 = _mm512_permutex2var_epi8(t[0], l1a, t[1]);
	__m512i a23 = _mm512_permutex2var_epi8(t[2], l1a, t[3]);
	__m512i a45 = _mm512_permutex2var_epi8(t[4], l1a, t[5]);
	__m512i a67 = _mm512_permutex2var_epi8(t[6], l1a, t[7]);
	__m512i b01 = _mm512_permutex2var_epi8(t[0], l1b, t[1]);
	__m512i b23 = _mm512_permutex2var_epi8(t[2], l1b, t[3]);
	__m512i b45 = _mm512_permutex2var_epi8(t[4], l1b, t[5]);
	__m512i b67 = _mm512_permutex2var_epi8(t[6], l1b, t[7]);
	__m512i clo0 = _mm512_permutex2var_epi8(a01, l2lo, a23);
	__m512i chi0 = _mm512_permutex2var_epi8(a01, l2hi, a23);
	__m512i clo1 = _mm512_permutex2var_epi8(a45, l2lo, a67);
	__m512i chi1 = _mm512_permutex2var_epi8(a45, l2hi, a67);
	__m512i d0 = _mm512_permutex2var_epi8(b01, l2p4, b23);
	__m512i d1 = _mm512_permutex2var_epi8(b45, l2p4, b67);
	p[0] = _mm512_permutex2var_epi8(clo0, l3a, clo1);
	p[1] = _mm512_permutex2var_epi8(clo0, l3b, clo1);
	p[2] = _mm512_permutex2var_epi8(chi0, l3a, chi1);
	p[3] = _mm512_permutex2var_epi8(chi0, l3b, chi1);
	p[4] = _mm512_permutex2var_epi8(d0, l3a, d1);
	if (e0) {
		/* ternary logic 0xfe: a | b | c, 0x01: ~(a | b | c) */
		__m512i any = _mm512_ternarylogic_epi64(p[0], p[1], p[2], 0xfe);
		p[5] = _mm512_ternarylogic_epi64(any, p[3], p[4], 0x01);
		*e0 = _mm512_or_si512(*e0, p[5]);
	}
}

#define POP(acc, v) acc = _mm512_add_epi64(acc, _mm512_popcnt_epi64(v))

/* p: ng plane sets -> a->sub[S] for every S (set rather than added to if first); *e30 gets
 * the elements with e >= 30, *e31 those with e == 31.  Two loops, the subsets without plane 4
 * and those with it, so that each keeps its 15 or 16 sums in registers. */
static EXT_TARGET void count_planes(const __m512i *p, int ng, ext_acc *a, int first, __m512i *e30,
                                    __m512i *e31)
{
	__m512i c1, c2, c3, c4, c5, c6, c7, c8, c9, c10, c11, c12, c13, c14, c15;
	c1 = c2 = c3 = c4 = c5 = c6 = c7 = c8 = c9 = c10 = c11 = c12 = c13 = c14 = c15 =
	    _mm512_setzero_si512();
	for (int g = 0; g < ng; g++) {
		const __m512i *q = p + NPL * g;
		__m512i p0 = q[0], p1 = q[1], p2 = q[2], p3 = q[3];
		__m512i s3 = _mm512_and_si512(p0, p1), s5 = _mm512_and_si512(p0, p2);
		__m512i s9 = _mm512_and_si512(p0, p3), s6 = _mm512_and_si512(p1, p2);
		__m512i s10 = _mm512_and_si512(p1, p3), s12 = _mm512_and_si512(p2, p3);
		__m512i s7 = _mm512_and_si512(s3, p2), s11 = _mm512_and_si512(s3, p3);
		__m512i s13 = _mm512_and_si512(s5, p3), s14 = _mm512_and_si512(s6, p3);
		__m512i s15 = _mm512_and_si512(s7, p3);
		POP(c1, p0), POP(c2, p1), POP(c4, p2), POP(c8, p3), POP(c3, s3), POP(c5, s5);
		POP(c9, s9), POP(c6, s6), POP(c10, s10), POP(c12, s12), POP(c7, s7), POP(c11, s11);
		POP(c13, s13), POP(c14, s14), POP(c15, s15);
	}
	__m512i *sub = a->sub;
#define PUT(S, c) sub[S] = first ? (c) : _mm512_add_epi64(sub[S], c)
	PUT(1, c1), PUT(2, c2), PUT(3, c3), PUT(4, c4), PUT(5, c5), PUT(6, c6), PUT(7, c7);
	PUT(8, c8), PUT(9, c9), PUT(10, c10), PUT(11, c11), PUT(12, c12), PUT(13, c13);
	PUT(14, c14), PUT(15, c15);

	/* with plane 4: the same subsets of r_k = p_k & p4, and p4 itself; none if no element
	 * of the block has e >= 16 (|x| >= 2), as is common */
	__m512i any4 = _mm512_setzero_si512();
	for (int g = 0; g < ng; g++)
		any4 = _mm512_or_si512(any4, p[NPL * g + 4]);
	if (!_mm512_test_epi64_mask(any4, any4)) {
		if (first)
			for (int S = 16; S < 32; S++)
				sub[S] = _mm512_setzero_si512();
		return;
	}
	__m512i d0, d1, d2, d3, d4, d5, d6, d7, d8, d9, d10, d11, d12, d13, d14, d15, f30, f31;
	d0 = d1 = d2 = d3 = d4 = d5 = d6 = d7 = d8 = d9 = d10 = d11 = d12 = d13 = d14 = d15 = f30 =
	    f31 = _mm512_setzero_si512();
	for (int g = 0; g < ng; g++) {
		const __m512i *q = p + NPL * g;
		__m512i p4 = q[4];
		__m512i r0 = _mm512_and_si512(q[0], p4), r1 = _mm512_and_si512(q[1], p4);
		__m512i r2 = _mm512_and_si512(q[2], p4), r3 = _mm512_and_si512(q[3], p4);
		__m512i s3 = _mm512_and_si512(r0, r1), s5 = _mm512_and_si512(r0, r2);
		__m512i s9 = _mm512_and_si512(r0, r3), s6 = _mm512_and_si512(r1, r2);
		__m512i s10 = _mm512_and_si512(r1, r3), s12 = _mm512_and_si512(r2, r3);
		__m512i s7 = _mm512_and_si512(s3, r2), s11 = _mm512_and_si512(s3, r3);
		__m512i s13 = _mm512_and_si512(s5, r3), s14 = _mm512_and_si512(s6, r3);
		__m512i s15 = _mm512_and_si512(s7, r3);
		f30 = _mm512_or_si512(f30, s14), f31 = _mm512_or_si512(f31, s15);
		POP(d0, p4), POP(d1, r0), POP(d2, r1), POP(d4, r2), POP(d8, r3), POP(d3, s3);
		POP(d5, s5), POP(d9, s9), POP(d6, s6), POP(d10, s10), POP(d12, s12), POP(d7, s7);
		POP(d11, s11), POP(d13, s13), POP(d14, s14), POP(d15, s15);
	}
	*e30 = _mm512_or_si512(*e30, f30), *e31 = _mm512_or_si512(*e31, f31);
	PUT(16, d0), PUT(17, d1), PUT(18, d2), PUT(19, d3), PUT(20, d4), PUT(21, d5), PUT(22, d6);
	PUT(23, d7), PUT(24, d8), PUT(25, d9), PUT(26, d10), PUT(27, d11), PUT(28, d12);
	PUT(29, d13), PUT(30, d14), PUT(31, d15);
#undef PUT
}
#undef POP

/* Lanes [64c + 32h, +32) of a group of len elements (chunk c, half h): the mask of those
 * below len. */
static inline __mmask32 tail_mask32(int64_t len, int c, int h)
{
	int64_t k = len - 64 * c - 32 * h;
	return k >= 32 ? 0xffffffffu : k <= 0 ? 0 : (__mmask32)((1u << k) - 1);
}

/* Lanes [64c + 16q, +16) of a group (chunk c, quarter q), as tail_mask32. */
static inline __mmask16 tail_mask16(int64_t len, int c, int q)
{
	int64_t k = len - 64 * c - 16 * q;
	return k >= 16 ? 0xffff : k <= 0 ? 0 : (__mmask16)((1u << k) - 1);
}

/* The exponent-plane bytes of 64 fp32 high halves (or bf16 values) in w0, w1: each exponent,
 * from the high byte once shifted left, clamped to e = clamp(exponent - 112, 0, 31), its bits
 * gathered by plane (sel).  Shared by group_f32 and group_h16. */
EXT_INLINE __m512i exp_planes(__m512i w0, __m512i w1, __m512i hi, __m512i sel)
{
	__m512i e = _mm512_permutex2var_epi8(_mm512_slli_epi16(w0, 1), hi, _mm512_slli_epi16(w1, 1));
	e = _mm512_min_epu8(_mm512_subs_epu8(e, _mm512_set1_epi8(112)), _mm512_set1_epi8(31));
	return _mm512_gf2p8affine_epi64_epi8(sel, e, 0);
}

/* x: (len) fp32, 0 < len <= GROUP (the lanes past len read as +0) -> p: the plane set of
 * e = clamp(exponent - 112, 0, 31); running min/max. */
EXT_INLINE void group_f32(const float *x, int64_t len, __m512i p[NPL], __m512 *mn, __m512 *mx,
                          __m512i *e0)
{
	const __m512i hi = _mm512_load_si512(ix_tab[T_HI]), hiw = _mm512_load_si512(ix_hiw);
	/* byte k of a qword <- bit k of each exponent byte; bytes 5-7 <- 0 */
	const __m512i sel = _mm512_set1_epi64(0x0000001008040201);
	__m512i t[8];
#define CHUNK(c)                                                                                   \
	do {                                                                                       \
		__m512 v[4];                                                                       \
		for (int q = 0; q < 4; q++) {                                                      \
			if (len == GROUP) {                                                        \
				_mm_prefetch((const char *)(x + 64 * (c) + 16 * q + PREFETCH),     \
				             _MM_HINT_T0);                                         \
				v[q] = _mm512_loadu_ps(x + 64 * (c) + 16 * q);                     \
				*mn = _mm512_min_ps(*mn, v[q]);                                    \
				*mx = _mm512_max_ps(*mx, v[q]);                                    \
			} else {                                                                   \
				__mmask16 k = tail_mask16(len, c, q);                              \
				v[q] = k ? _mm512_maskz_loadu_ps(k, x + 64 * (c) + 16 * q)         \
				         : _mm512_setzero_ps();                                    \
				*mn = _mm512_mask_min_ps(*mn, k, *mn, v[q]);                       \
				*mx = _mm512_mask_max_ps(*mx, k, *mx, v[q]);                       \
			}                                                                          \
		}                                                                                  \
		/* high halves (sign, exponent, 7 mantissa bits) shifted left once: the            \
		 * exponent in the high byte */                                                    \
		__m512i w0 = _mm512_permutex2var_epi16(_mm512_castps_si512(v[0]), hiw,             \
		                                       _mm512_castps_si512(v[1]));                 \
		__m512i w1 = _mm512_permutex2var_epi16(_mm512_castps_si512(v[2]), hiw,             \
		                                       _mm512_castps_si512(v[3]));                 \
		t[c] = exp_planes(w0, w1, hi, sel);                                                \
	} while (0)
	CHUNK(0);
	CHUNK(1);
	CHUNK(2);
	CHUNK(3);
	CHUNK(4);
	CHUNK(5);
	CHUNK(6);
	CHUNK(7);
#undef CHUNK
	transpose_planes(t, p, e0);
}

/* x: (len) fp16 or bf16 (bf16 constant after inlining), 0 < len <= GROUP (the lanes past len
 * read as +0) -> p: the plane set (fp16: of its biased exponents; bf16: group_f32's, of the
 * widened values, from the loaded halves as they are); running signed and unsigned maxima of
 * the bits (both types order as sign and magnitude), and the non-zeros added to *nz (by mask
 * and popcnt: the integer units are idle).  Spelled out by chunk, not a loop, so that the 8
 * chunks stay in registers. */
EXT_INLINE void group_h16(const uint16_t *x, int64_t len, __m512i p[NPL], __m512i *smax,
                          __m512i *umax, uint64_t *nz, const int bf16)
{
	const __m512i hi = _mm512_load_si512(ix_tab[T_HI]), abs = _mm512_set1_epi16(0x7fff);
	/* byte k of a qword <- bit k of each exponent byte (bf16, via exp_planes) or bit 2 + k of
	 * each high byte (fp16); bytes 5-7 <- 0 */
	const __m512i sel = _mm512_set1_epi64(bf16 ? 0x0000001008040201 : 0x0000004020100804);
	__m512i t[8];
#define CHUNK(c)                                                                                   \
	do {                                                                                       \
		__m512i va, vb;                                                                    \
		if (len == GROUP) {                                                                \
			_mm_prefetch((const char *)(x + 64 * (c) + PREFETCH), _MM_HINT_T0);        \
			_mm_prefetch((const char *)(x + 64 * (c) + PREFETCH + 32), _MM_HINT_T0);   \
			va = _mm512_loadu_si512(x + 64 * (c));                                     \
			vb = _mm512_loadu_si512(x + 64 * (c) + 32);                                \
			*smax = _mm512_max_epi16(*smax, _mm512_max_epi16(va, vb));                 \
			*umax = _mm512_max_epu16(*umax, _mm512_max_epu16(va, vb));                 \
		} else {                                                                           \
			/* no load past the end at all: a masked load whose dropped lanes          \
			 * fall on the next page can take a slow fault-suppression path */         \
			__mmask32 ka = tail_mask32(len, c, 0), kb = tail_mask32(len, c, 1);        \
			va = ka ? _mm512_maskz_loadu_epi16(ka, x + 64 * (c))                       \
			        : _mm512_setzero_si512();                                          \
			vb = kb ? _mm512_maskz_loadu_epi16(kb, x + 64 * (c) + 32)                  \
			        : _mm512_setzero_si512();                                          \
			*smax = _mm512_mask_max_epi16(*smax, ka, *smax, va);                       \
			*smax = _mm512_mask_max_epi16(*smax, kb, *smax, vb);                       \
			*umax = _mm512_mask_max_epu16(*umax, ka, *umax, va);                       \
			*umax = _mm512_mask_max_epu16(*umax, kb, *umax, vb);                       \
		}                                                                                  \
		*nz += (uint64_t)__builtin_popcountll(                                             \
		    _cvtmask64_u64(_mm512_kunpackd((__mmask64)_mm512_test_epi16_mask(vb, abs),     \
		                                   (__mmask64)_mm512_test_epi16_mask(va, abs))));  \
		t[c] = bf16 ? exp_planes(va, vb, hi, sel)                                          \
		            : _mm512_gf2p8affine_epi64_epi8(                                       \
		                  sel, _mm512_permutex2var_epi8(va, hi, vb), 0);                   \
	} while (0)
	CHUNK(0);
	CHUNK(1);
	CHUNK(2);
	CHUNK(3);
	CHUNK(4);
	CHUNK(5);
	CHUNK(6);
	CHUNK(7);
#undef CHUNK
	transpose_planes(t, p, NULL);
}

/* Largest signed / unsigned 16-bit lane of v; sum of the 16-bit lanes. */
static inline int16_t hmax_epi16(__m512i v)
{
	__m256i h = _mm256_max_epi16(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1));
	__m128i q = _mm_max_epi16(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
	q = _mm_max_epi16(q, _mm_shuffle_epi32(q, 0x4e));
	q = _mm_max_epi16(q, _mm_shuffle_epi32(q, 0xb1));
	q = _mm_max_epi16(q, _mm_srli_epi32(q, 16));
	return (int16_t)_mm_cvtsi128_si32(q);
}

static inline uint16_t hmax_epu16(__m512i v)
{
	__m256i h = _mm256_max_epu16(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1));
	__m128i q = _mm_max_epu16(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
	q = _mm_max_epu16(q, _mm_shuffle_epi32(q, 0x4e));
	q = _mm_max_epu16(q, _mm_shuffle_epi32(q, 0xb1));
	q = _mm_max_epu16(q, _mm_srli_epi32(q, 16));
	return (uint16_t)_mm_cvtsi128_si32(q);
}

static inline uint64_t hsum_epu16(__m512i v)
{
	return (uint64_t)_mm512_reduce_add_epi32(_mm512_madd_epi16(v, _mm512_set1_epi16(1)));
}

/* x: (n) fp16 or bf16, n <= STATS_BLOCK, holding no Inf or NaN -> its smallest bits as unsigned
 * (0xffff if n == 0) and its count of |x| > 32768, whose bits are near_bits (F16_NEAR; for
 * bf16 the fp32 threshold's high half: a bf16 is exactly its fp32). */
static void rescan_h16(const uint16_t *x, int64_t n, uint16_t near_bits, uint16_t *umin,
                       uint64_t *near)
{
	const __m512i abs = _mm512_set1_epi16(0x7fff), one = _mm512_set1_epi16(1);
	const __m512i fnear = _mm512_set1_epi16((short)near_bits);
	__m512i mn = _mm512_set1_epi16(-1), cn = _mm512_setzero_si512();
	for (int64_t i = 0; i < n; i += 32) {
		__mmask32 k = n - i >= 32 ? 0xffffffffu : (__mmask32)((1u << (n - i)) - 1);
		__m512i h = _mm512_maskz_loadu_epi16(k, x + i);
		mn = _mm512_mask_min_epu16(mn, k, mn, h);
		__mmask32 kn = _mm512_cmpgt_epu16_mask(_mm512_and_si512(h, abs), fnear);
		cn = _mm512_mask_add_epi16(cn, kn, cn, one);
	}
	*umin = (uint16_t)~hmax_epu16(_mm512_xor_si512(mn, _mm512_set1_epi16(-1)));
	*near = hsum_epu16(cn);
}

/* x: (n) fp32, n <= STATS_BLOCK -> its zeros (either sign), and with nnear != NULL its count
 * of |x| > 32768 (the block holds no Inf or NaN).  Two sets of 32-bit counters keep the
 * dependency chains short. */
static void rescan_f32(const float *x, int64_t n, uint64_t *zeros, uint64_t *nnear)
{
	const __m512i abs = _mm512_set1_epi32((int)F32_ABS), one = _mm512_set1_epi32(1);
	const __m512i fnear = _mm512_set1_epi32((int)F32_NEAR);
	__m512i nz0 = _mm512_setzero_si512(), nz1 = nz0, cn = nz0;
	for (int64_t i = 0; i < n; i += 32) {
		__mmask16 k0 = n - i >= 16 ? 0xffff : (__mmask16)((1u << (n - i)) - 1);
		__mmask16 k1 = n - i >= 32   ? 0xffff
		               : n - i <= 16 ? 0
		                             : (__mmask16)((1u << (n - i - 16)) - 1);
		__m512i u0 = _mm512_maskz_loadu_epi32(k0, x + i);
		__m512i u1 = k1 ? _mm512_maskz_loadu_epi32(k1, x + i + 16) : _mm512_setzero_si512();
		/* min(u << 1, 1): 1 for a non-zero (the lanes past n read as +0) */
		nz0 = _mm512_add_epi32(nz0, _mm512_min_epu32(_mm512_slli_epi32(u0, 1), one));
		nz1 = _mm512_add_epi32(nz1, _mm512_min_epu32(_mm512_slli_epi32(u1, 1), one));
		if (nnear) {
			__mmask16 c0 = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u0, abs), fnear);
			__mmask16 c1 = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u1, abs), fnear);
			cn = _mm512_mask_add_epi32(cn, c0, cn, one);
			cn = _mm512_mask_add_epi32(cn, c1, cn, one);
		}
	}
	*zeros = (uint64_t)n - (uint64_t)_mm512_reduce_add_epi32(_mm512_add_epi32(nz0, nz1));
	if (nnear)
		*nnear = (uint64_t)_mm512_reduce_add_epi32(cn);
}

/* x: (n) fp16 or bf16, n <= STATS_BLOCK -> a (set if first, else added to), s (nan/inf/near,
 * min/max), *zeros, *pad (lanes read past the end, as +0).  bf16 gives block_f32_ext's record
 * of the widened values; its fix-up for Inf/NaN/|x| >= 65536 runs on a widened copy. */
EXT_INLINE void block_h16_ext(const uint16_t *x, int64_t n, ext_acc *a, int first, stats_acc *s,
                              uint64_t *zeros, uint64_t *pad, const int bf16)
{
	__m512i smax = _mm512_set1_epi16(INT16_MIN), umax = _mm512_setzero_si512();
	__m512i e30 = _mm512_setzero_si512(), e31 = e30;
	uint64_t nz = 0;
	__m512i planes[STATS_BLOCK / GROUP * NPL];
	int ng = 0;
	int64_t i = 0;
	for (; i + GROUP <= n; i += GROUP, ng++)
		group_h16(x + i, GROUP, planes + NPL * ng, &smax, &umax, &nz, bf16);
	if (i < n) {
		group_h16(x + i, n - i, planes + NPL * ng++, &smax, &umax, &nz, bf16);
		*pad += (uint64_t)(GROUP - (n - i));
	}
	count_planes(planes, ng, a, first, &e30, &e31);
	uint64_t z = (uint64_t)n - nz, near = 0;
	float lo, hi;
	if (_mm512_test_epi64_mask(e31, e31) && !bf16) {
		/* Inf or NaN: the maxima are not the finite extremes */
		fix_f16(x, n, s, &lo, &hi);
	} else if (_mm512_test_epi64_mask(e31, e31)) {
		/* Inf, NaN or |x| >= 65536 */
		_Alignas(64) float w[STATS_BLOCK];
		for (int64_t j = 0; j < n; j += 16) {
			__mmask16 k = n - j >= 16 ? 0xffff : (__mmask16)((1u << (n - j)) - 1);
			__m256i h = _mm256_maskz_loadu_epi16(k, x + j);
			_mm512_mask_storeu_ps(w + j, k,
			                      _mm512_castsi512_ps(
			                          _mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)));
		}
		fix_f32(w, n, s, &lo, &hi);
	} else {
		int16_t smx = hmax_epi16(smax);
		uint16_t umx = hmax_epu16(umax), umin = 0;
		int pos = smx >= 0, neg = umx >= 0x8000u;
		/* all of one sign: the extreme nearest zero is needed too, a zero (+0 or -0, both
		 * reported as +0) if there is one */
		if (_mm512_test_epi64_mask(e30, e30) || ((!pos || !neg) && z == 0))
			rescan_h16(x, n, bf16 ? (uint16_t)(F32_NEAR >> 16) : F16_NEAR, &umin, &near);
		uint16_t h = pos ? (uint16_t)smx : umin, l = neg ? umx : umin;
		hi = bf16 ? f32_of((uint32_t)h << 16) : f16_value(h);
		lo = bf16 ? f32_of((uint32_t)l << 16) : f16_value(l);
		s->near += near;
	}
	*zeros += z;
	acc_minmax(s, lo, hi);
}

static EXT_TARGET void block_f16_ext(const uint16_t *x, int64_t n, ext_acc *a, int first,
                                     stats_acc *s, uint64_t *zeros, uint64_t *pad)
{
	block_h16_ext(x, n, a, first, s, zeros, pad, 0);
}

static EXT_TARGET void block_bf16_ext(const uint16_t *x, int64_t n, ext_acc *a, int first,
                                      stats_acc *s, uint64_t *zeros, uint64_t *pad)
{
	block_h16_ext(x, n, a, first, s, zeros, pad, 1);
}

/* x: (n) fp32, n <= STATS_BLOCK -> a, s (nan/inf/near, min/max), *zeros, *pad. */
static EXT_TARGET void block_f32_ext(const float *x, int64_t n, ext_acc *a, int first, stats_acc *s,
                                     uint64_t *zeros, uint64_t *pad)
{
	__m512 mn = _mm512_set1_ps(INFINITY), mx = _mm512_set1_ps(-INFINITY);
	__m512i e0 = _mm512_setzero_si512(), e30 = e0, e31 = e0;
	__m512i planes[STATS_BLOCK / GROUP * NPL];
	int ng = 0;
	int64_t i = 0;
	for (; i + GROUP <= n; i += GROUP, ng++)
		group_f32(x + i, GROUP, planes + NPL * ng, &mn, &mx, &e0);
	if (i < n) {
		group_f32(x + i, n - i, planes + NPL * ng++, &mn, &mx, &e0);
		*pad += (uint64_t)(GROUP - (n - i));
	}
	count_planes(planes, ng, a, first, &e30, &e31);
	int low = _mm512_test_epi64_mask(e0, e0) != 0;
	uint64_t z = 0, near = 0;
	float lo, hi;
	if (_mm512_test_epi64_mask(e31, e31)) {
		/* Inf, NaN or |x| >= 65536: the extremes and counts from the fix-up */
		fix_f32(x, n, s, &lo, &hi);
		if (low)
			rescan_f32(x, n, &z, NULL);
	} else {
		lo = _mm512_reduce_min_ps(mn);
		hi = _mm512_reduce_max_ps(mx);
		if (_mm512_test_epi64_mask(e30, e30))
			rescan_f32(x, n, &z, &near);
		else if (low)
			rescan_f32(x, n, &z, NULL);
		s->near += near;
	}
	*zeros += z;
	acc_minmax(s, lo, hi);
}

/* Sums of the qword lanes of v[0..7], in that order. */
static inline EXT_TARGET __m512i hsum8_epi64(const __m512i v[8])
{
	__m512i s[4];
	for (int j = 0; j < 4; j++)
		s[j] = _mm512_add_epi64(_mm512_unpacklo_epi64(v[2 * j], v[2 * j + 1]),
		                        _mm512_unpackhi_epi64(v[2 * j], v[2 * j + 1]));
	/* s[j]: in each 128-bit lane, the partial sums of v[2j], v[2j + 1] */
	__m512i b0 = _mm512_add_epi64(_mm512_shuffle_i64x2(s[0], s[1], 0x88),
	                              _mm512_shuffle_i64x2(s[0], s[1], 0xdd));
	__m512i b1 = _mm512_add_epi64(_mm512_shuffle_i64x2(s[2], s[3], 0x88),
	                              _mm512_shuffle_i64x2(s[2], s[3], 0xdd));
	return _mm512_add_epi64(_mm512_shuffle_i64x2(b0, b1, 0x88),
	                        _mm512_shuffle_i64x2(b0, b1, 0xdd));
}

/* The bins from the subset sums (n elements, pad lanes read as +0), then the record.
 * m[S] (lane S % 8 of m[S / 8]) counts the elements whose exponent has all the bits of S,
 * m[0] all of them; Moebius inversion, m[S] -= m[S | b] for each bit b not in S, leaves the
 * count of exponent S itself. */
static EXT_TARGET void finish_ext(const ext_acc *a, int64_t n, uint64_t zeros, uint64_t pad,
                                  stats_acc *s, amp_stats *st)
{
	__m512i m[4];
	for (int j = 0; j < 4; j++)
		m[j] = hsum8_epi64(a->sub + 8 * j);
	m[0] = _mm512_mask_set1_epi64(m[0], 1, (long long)((uint64_t)n + pad));
	for (int j = 0; j < 4; j++) {
		/* bits 1, 2, 4: lanes; 0x55, 0x33, 0x0f: the lanes without the bit */
		m[j] = _mm512_mask_sub_epi64(m[j], 0x55, m[j], _mm512_shuffle_epi32(m[j], 0x4e));
		m[j] = _mm512_mask_sub_epi64(m[j], 0x33, m[j], _mm512_permutex_epi64(m[j], 0x4e));
		m[j] =
		    _mm512_mask_sub_epi64(m[j], 0x0f, m[j], _mm512_shuffle_i64x2(m[j], m[j], 0x4e));
	}
	/* bits 8, 16: vectors */
	m[0] = _mm512_sub_epi64(m[0], m[1]), m[2] = _mm512_sub_epi64(m[2], m[3]);
	m[0] = _mm512_sub_epi64(m[0], m[2]), m[1] = _mm512_sub_epi64(m[1], m[3]);
	uint64_t cnt[32];
	for (int j = 0; j < 4; j++)
		_mm512_storeu_si512(cnt + 8 * j, m[j]);
	s->count = (uint64_t)n;
	s->hist[0] = zeros;
	s->hist[1] = cnt[0] - pad - zeros;
	memcpy(s->hist + 2, cnt + 1, 31 * sizeof *cnt);
	acc_finish(s, st);
}

/* x: (n) T -> st: tensors under 32 elements element by element, else whole blocks of the
 * one-pass kernel BLOCK, finished together. */
#define EXT_DRIVER(NAME, T, BLOCK, ELEM)                                                     \
	static EXT_TARGET void NAME(const T *x, int64_t n, amp_stats *st)                    \
	{                                                                                     \
		stats_acc s;                                                                  \
		if (n < 32) {                                                                 \
			acc_init(&s);                                                         \
			for (int64_t i = 0; i < n; i++)                                       \
				ELEM(&s, x[i]);                                               \
			acc_finish(&s, st);                                                   \
			return;                                                               \
		}                                                                             \
		acc_init_counts(&s);                                                          \
		ext_acc a;                                                                    \
		uint64_t zeros = 0, pad = 0;                                                  \
		for (int64_t i = 0; i < n; i += STATS_BLOCK)                                  \
			BLOCK(x + i, n - i < STATS_BLOCK ? n - i : STATS_BLOCK, &a, i == 0,   \
			      &s, &zeros, &pad);                                              \
		finish_ext(&a, n, zeros, pad, &s, st);                                        \
	}

EXT_DRIVER(stats_f16_ext, uint16_t, block_f16_ext, elem_f16)
EXT_DRIVER(stats_f32_ext, float, block_f32_ext, elem_f32)

/* One bf16 element as the fp32 it widens to. */
static inline void elem_bf16(stats_acc *s, uint16_t h)
{
	elem_f32(s, f32_of((uint32_t)h << 16));
}

EXT_DRIVER(stats_bf16_ext, uint16_t, block_bf16_ext, elem_bf16)

/* VBMI, GFNI and VPOPCNTDQ (cpuid 7.0 ECX bits 1, 8, 14); dispatch.c checked the rest. */
int amp_stats_avx512_ext(void)
{
	static int have = -1;
	int h = __atomic_load_n(&have, __ATOMIC_RELAXED);
	if (h < 0) {
		unsigned a, b, c, d;
		h = __get_cpuid_count(7, 0, &a, &b, &c, &d) && (c >> 1 & 1) && (c >> 8 & 1) &&
		    (c >> 14 & 1);
		__atomic_store_n(&have, h, __ATOMIC_RELAXED);
	}
	return h;
}


const amp_stats_table amp_stats_avx512bw_table = {
    .f32 = stats_f32_bw,
    .f16 = stats_f16_bw,
};

const amp_stats_table amp_stats_avx512ext_table = {
    .f32 = stats_f32_ext,
    .f16 = stats_f16_ext,
    .bf16 = stats_bf16_ext,
};

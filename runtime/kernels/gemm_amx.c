/* gemm_amx.c — bf16 GEMM on AMX tiles (tdpbf16ps, FP32 accumulation), Sapphire Rapids class.
 *
 * Built into every library with per-function target attributes; only amp_gemm_bf16_amx's micro-
 * kernel executes tile instructions, and only after amp_amx_init() has succeeded.  The loop
 * nest, packers and the semantics of the store are in gemm_blind.h, shared with the model.
 */
#include <cpuid.h>
#include <immintrin.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "kernels/gemm_blind.h"

#define AMX_ARCH_GET_XCOMP_PERM 0x1022
#define AMX_ARCH_REQ_XCOMP_PERM 0x1023
#define AMX_XFEATURE_XTILECFG   17
#define AMX_XFEATURE_XTILEDATA  18

/* ---- permission ---------------------------------------------------------------------------- */

static pthread_once_t amx_once = PTHREAD_ONCE_INIT;
static int amx_ok;

static uint64_t amx_xgetbv0(void)
{
	uint32_t lo, hi;
	__asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
	return ((uint64_t)hi << 32) | lo;
}

/* AMX-TILE, AMX-BF16 and the AVX-512 the packers and the store use, enabled by the OS. */
static int amx_cpu_ok(void)
{
	unsigned a, b, c, d;
	if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27))) /* OSXSAVE */
		return 0;
	if (__get_cpuid_max(0, NULL) < 7)
		return 0;
	__cpuid_count(7, 0, a, b, c, d);
	int has = (d & (1u << 24)) && (d & (1u << 22)) /* AMX-TILE, AMX-BF16 */
	          && (b & (1u << 16)) && (b & (1u << 30)) && (b & (1u << 31)); /* F, BW, VL */
	if (!has)
		return 0;
	uint64_t xcr0 = amx_xgetbv0();
	uint64_t want = (1u << 1) | (1u << 2) | (7u << 5) | (1u << AMX_XFEATURE_XTILECFG) |
	                (1u << AMX_XFEATURE_XTILEDATA);
	return (xcr0 & want) == want;
}

static void amx_probe(void)
{
	if (!amx_cpu_ok())
		return;
	if (syscall(SYS_arch_prctl, AMX_ARCH_REQ_XCOMP_PERM, AMX_XFEATURE_XTILEDATA) != 0)
		return;
	unsigned long mask = 0;
	if (syscall(SYS_arch_prctl, AMX_ARCH_GET_XCOMP_PERM, &mask) != 0)
		return;
	amx_ok = (mask & (1ul << AMX_XFEATURE_XTILEDATA)) != 0;
}

int amp_amx_init(void)
{
	pthread_once(&amx_once, amx_probe);
	return amx_ok ? 0 : -1;
}

/* ---- the real micro-kernel and store ------------------------------------------------------- */

/* Palette 1 configuration, 64 bytes: tiles 0..7 all 16 rows x 64 bytes. */
typedef struct amx_tilecfg {
	uint8_t palette_id;
	uint8_t start_row;
	uint8_t reserved[14];
	uint16_t colsb[16];
	uint8_t rows[16];
} amx_tilecfg;
_Static_assert(sizeof(amx_tilecfg) == 64, "the tile configuration is 64 bytes");

#define AMX_TARGET    __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bf16")))
#define AVX512_TARGET __attribute__((target("avx512f,avx512bw,avx512vl")))

/* Mirrors amx_ukr_ref: tile t of acc is tmm t (t = 2i + j: rows 16i.., columns 16j..), A
 * tiles tmm4, tmm5, B tiles tmm6, tmm7; B and acc tile rows are 64 bytes apart, A's a->ld
 * elements.  i1 / j1: the second row / column of tiles is live (constants after inlining). */
AMX_TARGET static inline __attribute__((always_inline)) void
amx_ukr_body(int64_t ks, const amx_a_tiles *a, const uint16_t *bp, float *acc, int load,
             const int i1, const int j1)
{
	const size_t lda = (size_t)a->ld * sizeof(uint16_t);
	/* X(t) for each live accumulator tile t (tile numbers must be constants) */
#define AMX_EACH_ACC(X)                                                                            \
	do {                                                                                       \
		X(0);                                                                              \
		if (j1)                                                                            \
			X(1);                                                                      \
		if (i1)                                                                            \
			X(2);                                                                      \
		if (i1 && j1)                                                                      \
			X(3);                                                                      \
	} while (0)
#define AMX_LOAD_ACC(t)  _tile_loadd(t, acc + (t)*256, 64)
#define AMX_STORE_ACC(t) _tile_stored(t, acc + (t)*256, 64)
	if (load)
		AMX_EACH_ACC(AMX_LOAD_ACC);
	else
		AMX_EACH_ACC(_tile_zero);
	for (int64_t s = 0; s < ks; s++) {
		/* a block of <= 16 columns has one B tile per k step (amx_b_tiles) */
		const uint16_t *a0 = a->p + s * a->step,
		               *b0 = bp + s * (j1 ? 2 : 1) * AMX_TILE_ELEMS;
		_tile_loadd(4, a0, lda);
		if (i1)
			_tile_loadd(5, a0 + a->half, lda);
		_tile_loadd(6, b0, 64);
		if (j1)
			_tile_loadd(7, b0 + AMX_TILE_ELEMS, 64);
		_tile_dpbf16ps(0, 4, 6);
		if (j1)
			_tile_dpbf16ps(1, 4, 7);
		if (i1)
			_tile_dpbf16ps(2, 5, 6);
		if (i1 && j1)
			_tile_dpbf16ps(3, 5, 7);
	}
	AMX_EACH_ACC(AMX_STORE_ACC);
#undef AMX_STORE_ACC
#undef AMX_LOAD_ACC
#undef AMX_EACH_ACC
}

AMX_TARGET static void amx_ukr_tiles(int64_t ks, const amx_a_tiles *a, const uint16_t *bp,
                                     float *acc, int load, unsigned live)
{
	switch (live) {
	case AMX_LIVE_ALL:
		amx_ukr_body(ks, a, bp, acc, load, 1, 1);
		break;
	case 0x3u:
		amx_ukr_body(ks, a, bp, acc, load, 0, 1);
		break;
	case 0x5u:
		amx_ukr_body(ks, a, bp, acc, load, 1, 0);
		break;
	default:
		amx_ukr_body(ks, a, bp, acc, load, 0, 0);
		break;
	}
}

/* ---- the packers, AVX-512 ------------------------------------------------------------------ */

/* r[0..15] (16 x 16 dwords) transposed in place.  Stage d swaps bit d of the row index with bit
 * d of the column index: row i (bit d clear) takes its columns with bit d set from row i + d,
 * and row i + d its columns with bit d clear from row i.  The four stages make the transpose.
 * The index vectors are constants and the loops unrolled, so that r stays in registers (a
 * loop over d that built its indexes at run time kept r on the stack: the head's B panel took
 * a third of its GEMM). */
/* clang-format off */
#define AMX_TR_LO(d, c) ((c) & (d) ? 16 + (c) - (d) : (c))
#define AMX_TR_HI(d, c) ((c) & (d) ? 16 + (c) : (c) + (d))
#define AMX_TR_ROW(F, d)                                                                           \
	{F(d, 0), F(d, 1), F(d, 2),  F(d, 3),  F(d, 4),  F(d, 5),  F(d, 6),  F(d, 7),               \
	 F(d, 8), F(d, 9), F(d, 10), F(d, 11), F(d, 12), F(d, 13), F(d, 14), F(d, 15)}
static const int32_t amx_tr_lo[4][16] __attribute__((aligned(64))) = {
	AMX_TR_ROW(AMX_TR_LO, 8), AMX_TR_ROW(AMX_TR_LO, 4), AMX_TR_ROW(AMX_TR_LO, 2),
	AMX_TR_ROW(AMX_TR_LO, 1)};
static const int32_t amx_tr_hi[4][16] __attribute__((aligned(64))) = {
	AMX_TR_ROW(AMX_TR_HI, 8), AMX_TR_ROW(AMX_TR_HI, 4), AMX_TR_ROW(AMX_TR_HI, 2),
	AMX_TR_ROW(AMX_TR_HI, 1)};
/* clang-format on */
#undef AMX_TR_ROW
#undef AMX_TR_HI
#undef AMX_TR_LO

AVX512_TARGET static inline __attribute__((always_inline)) void
amx_transpose16_epi32(__m512i r[16])
{
#pragma GCC unroll 4
	for (int s = 0; s < 4; s++) {
		const int d = 8 >> s;
		__m512i va = _mm512_load_si512(amx_tr_lo[s]), vb = _mm512_load_si512(amx_tr_hi[s]);
#pragma GCC unroll 16
		for (int i = 0; i < 16; i++) {
			if (i & d)
				continue;
			__m512i x = r[i], y = r[i + d];
			r[i] = _mm512_permutex2var_epi32(x, va, y);
			r[i + d] = _mm512_permutex2var_epi32(x, vb, y);
		}
	}
}

AVX512_TARGET void amp_amx_acc_transpose_avx512(const float *restrict src, float *restrict dst)
{
	for (int t = 0; t < 4; t++) {
		__m512i r[16];
		for (int i = 0; i < 16; i++)
			r[i] = _mm512_load_si512(src + t * 256 + i * 16);
		amx_transpose16_epi32(r);
		int tt = (t % 2) * 2 + t / 2; /* tile (i, j) -> (j, i) */
		for (int i = 0; i < 16; i++)
			_mm512_store_si512(dst + tt * 256 + i * 16, r[i]);
	}
}

/* Mask of the first n (<= 32) 16-bit lanes; n <= 0: none. */
static inline __mmask32 amx_mask32(int64_t n)
{
	return n >= 32 ? 0xffffffffu : n <= 0 ? 0u : (__mmask32)((1u << n) - 1u);
}

/* The layout of amx_pack_a_ref.  Rows of op(A) contiguous (cs 1): each tile row is one masked
 * 64-byte copy.  op(A) = A^T (rs 1): per pair of k, the two 16-row runs interleaved into 16
 * dwords (row m's pair), 16 pairs transposed into the 16 tile rows. */
AVX512_TARGET void amp_amx_pack_a_avx512(const blind_mat *a, int64_t m0, int64_t rows, int64_t k0,
                                         int64_t kc, int64_t ks, uint16_t *restrict out)
{
	if (a->cs == 1) {
		for (int64_t r = 0; r < 32; r++) {
			const uint16_t *src = a->p + (m0 + r) * a->rs + k0;
			for (int64_t s = 0; s < ks; s++) {
				__mmask32 m = r < rows ? amx_mask32(kc - s * AMX_KSTEP) : 0;
				uint16_t *o = out + ((s * 2 + r / 16) * 16 + r % 16) * 32;
				_mm512_storeu_si512(o, _mm512_maskz_loadu_epi16(m, src + s * AMX_KSTEP));
			}
		}
		return;
	}
	if (a->rs != 1) {
		amx_pack_a_ref(a, m0, rows, k0, kc, ks, out);
		return;
	}
	static const uint16_t ilv[32] = {0, 16, 1, 17, 2,  18, 3,  19, 4,  20, 5,  21, 6,  22, 7,  23,
	                                 8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
	const __m512i vi = _mm512_loadu_si512(ilv);
	for (int64_t s = 0; s < ks; s++)
		for (int64_t h = 0; h < 2; h++) {
			int64_t live = rows - 16 * h;
			uint16_t *o = out + (s * 2 + h) * AMX_TILE_ELEMS;
			if (live <= 0) { /* a tile of padding rows: zeros, without the transpose */
				for (int i = 0; i < 16; i++)
					_mm512_storeu_si512(o + i * 32, _mm512_setzero_si512());
				continue;
			}
			__mmask16 mm = live >= 16 ? 0xffff : (__mmask16)((1u << live) - 1u);
			__m512i t[16];
			for (int64_t p = 0; p < 16; p++) {
				int64_t k = s * AMX_KSTEP + 2 * p;
				const uint16_t *src = a->p + (k0 + k) * a->cs + m0 + 16 * h;
				__m256i lo = k < kc ? _mm256_maskz_loadu_epi16(mm, src) : _mm256_setzero_si256();
				__m256i hi = k + 1 < kc ? _mm256_maskz_loadu_epi16(mm, src + a->cs)
				                        : _mm256_setzero_si256();
				__m512i both = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
				t[p] = _mm512_permutexvar_epi16(vi, both);
			}
			amx_transpose16_epi32(t);
			for (int i = 0; i < 16; i++)
				_mm512_storeu_si512(o + i * 32, t[i]);
		}
}

/* The layout of amx_pack_b_vnni_ref.  Rows of op(B) contiguous (cs 1): rows k and k + 1
 * interleaved, 32 columns at a time, into the rows of two tiles.  op(B) = B^T (rs 1): a tile is
 * 16 columns' runs of 16 k pairs (dwords), transposed.  Column blocks go AMX_PACK_B_GROUP at a
 * time (gemm_blind.h says why). */
AVX512_TARGET void amp_amx_pack_b_avx512(const blind_mat *b, int64_t k0, int64_t kc, int64_t ks,
                                         int64_t n0, int64_t cols, uint16_t *restrict out)
{
	int64_t nblk = (cols + 31) / 32;
	if (b->cs == 1) {
		static const uint16_t i0[32] = {0,  32, 1,  33, 2,  34, 3,  35, 4,  36, 5,
		                                37, 6,  38, 7,  39, 8,  40, 9,  41, 10, 42,
		                                11, 43, 12, 44, 13, 45, 14, 46, 15, 47};
		const __m512i v0 = _mm512_loadu_si512(i0);
		const __m512i v1 = _mm512_add_epi16(v0, _mm512_set1_epi16(16));
		for (int64_t g = 0; g < nblk; g += AMX_PACK_B_GROUP) {
			int64_t gend = blind_min(nblk, g + AMX_PACK_B_GROUP);
			for (int64_t s = 0; s < ks; s++)
				for (int64_t p = 0; p < 16; p++) {
					int64_t k = s * AMX_KSTEP + 2 * p;
					const uint16_t *r0 = b->p + (k0 + k) * b->rs + n0, *r1 = r0 + b->rs;
					for (int64_t nb = g; nb < gend; nb++) {
						uint16_t *o =
						    out + amx_b_at(ks, cols, nb, s, 0) + p * 32;
						int two = amx_b_tiles(cols - nb * 32) == 2;
						/* padding rows (K = 9 or 10): zeros */
						if (k >= kc) {
							_mm512_storeu_si512(o,
							                    _mm512_setzero_si512());
							if (two)
								_mm512_storeu_si512(
								    o + AMX_TILE_ELEMS,
								    _mm512_setzero_si512());
							continue;
						}
						__mmask32 m = amx_mask32(cols - nb * 32);
						__m512i x =
						    _mm512_maskz_loadu_epi16(m, r0 + nb * 32);
						__m512i y =
						    k + 1 < kc
						        ? _mm512_maskz_loadu_epi16(m, r1 + nb * 32)
						        : _mm512_setzero_si512();
						_mm512_storeu_si512(o, _mm512_permutex2var_epi16(x, v0, y));
						if (two)
							_mm512_storeu_si512(
							    o + AMX_TILE_ELEMS,
							    _mm512_permutex2var_epi16(x, v1, y));
					}
				}
		}
		return;
	}
	if (b->rs != 1) {
		amx_pack_b_vnni_ref(b, k0, kc, ks, n0, cols, out);
		return;
	}
	for (int64_t nb = 0; nb < nblk; nb++)
		for (int64_t s = 0; s < ks; s++) {
			__mmask32 mk = amx_mask32(kc - s * AMX_KSTEP);
			for (int64_t j = 0; j < amx_b_tiles(cols - nb * 32); j++) {
				uint16_t *o = out + amx_b_at(ks, cols, nb, s, j);
				int64_t n = nb * 32 + j * 16;
				const uint16_t *src = b->p + (n0 + n) * b->cs + k0 + s * AMX_KSTEP;
				__m512i t[16];
#pragma GCC unroll 16 /* t in registers */
				for (int64_t c = 0; c < 16; c++)
					t[c] = n + c < cols
					           ? _mm512_maskz_loadu_epi16(mk, src + c * b->cs)
					           : _mm512_setzero_si512();
				amx_transpose16_epi32(t);
#pragma GCC unroll 16
				for (int p = 0; p < 16; p++)
					_mm512_storeu_si512(o + p * 32, t[p]);
			}
		}
}

/* 16 fp32 -> 16 bf16 exactly as blind_f32_to_bf16. */
AVX512_TARGET static inline __m256i amx_round_bf16(__m512 v)
{
	__m512i u = _mm512_castps_si512(v);
	__m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
	__m512i r = _mm512_srli_epi32(
	    _mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))), 16);
	__mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
	__m512i q = _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
	return _mm512_cvtepi32_epi16(_mm512_mask_mov_epi32(r, nan, q));
}

AVX512_TARGET void amp_amx_store_avx512(const float *acc, int64_t rows, int64_t cols, float beta,
                                        void *Cv, int64_t ldc)
{
	uint16_t *C = Cv;
	__m512 vb = _mm512_set1_ps(beta);
	for (int64_t r = 0; r < rows; r++) {
		for (int64_t j = 0; j * 16 < cols; j++) {
			int64_t w = blind_min(16, cols - j * 16);
			__mmask16 m = (__mmask16)((1u << w) - 1u);
			const float *src = acc + ((r / 16) * 2 + j) * 256 + (r % 16) * 16;
			uint16_t *dst = C + r * ldc + j * 16;
			__m512 v = _mm512_load_ps(src);
			if (beta != 0.0f) {
				__m256i h = _mm256_maskz_loadu_epi16(m, dst);
				__m512 c = _mm512_castsi512_ps(
				    _mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
				v = _mm512_add_ps(v, _mm512_mul_ps(vb, c));
			}
			_mm256_mask_storeu_epi16(dst, m, amx_round_bf16(v));
		}
	}
}

AVX512_TARGET void amp_amx_store_f32_avx512(const float *acc, int64_t rows, int64_t cols,
                                            float beta, void *Cv, int64_t ldc)
{
	float *C = Cv;
	__m512 vb = _mm512_set1_ps(beta);
	for (int64_t r = 0; r < rows; r++)
		for (int64_t j = 0; j * 16 < cols; j++) {
			int64_t w = blind_min(16, cols - j * 16);
			__mmask16 m = (__mmask16)((1u << w) - 1u);
			float *dst = C + r * ldc + j * 16;
			__m512 v = _mm512_load_ps(acc + ((r / 16) * 2 + j) * 256 + (r % 16) * 16);
			if (beta != 0.0f) /* a product, then a sum: no FMA, as the model */
				v = _mm512_add_ps(v, _mm512_mul_ps(vb, _mm512_maskz_loadu_ps(m, dst)));
			_mm512_mask_storeu_ps(dst, m, v);
		}
}

#define AVX512BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")))

/* amp_amx_store_avx512 with vcvtneps2bf16 (every AMX-BF16 CPU has AVX512-BF16): the same bits.
 * The instruction reads fp32 subnormals as zero; tdpbf16ps flushes its sums to zero, so only a
 * beta C term can make one, and those lanes are rounded in integer arithmetic as
 * blind_f32_to_bf16 does. */
AVX512BF16_TARGET void amp_amx_store_avx512bf16(const float *acc, int64_t rows, int64_t cols,
                                                float beta, void *Cv, int64_t ldc)
{
	uint16_t *C = Cv;
	if (beta == 0.0f && cols == 32) {
		/* the common block: a row is 32 sums from two tiles, one 64-byte store */
		for (int64_t r = 0; r < rows; r++) {
			const float *src = acc + (r / 16) * 2 * 256 + (r % 16) * 16;
			__m512 lo = _mm512_load_ps(src), hi = _mm512_load_ps(src + 256);
			/* no subnormal lanes: the tiles' sums are flushed to zero */
			_mm512_storeu_si512(C + r * ldc, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
		}
		return;
	}
	__m512 vb = _mm512_set1_ps(beta);
	__mmask16 m0 = (__mmask16)(cols >= 16 ? 0xffffu : (1u << cols) - 1u);
	__mmask16 m1 = (__mmask16)(cols >= 32 ? 0xffffu : cols <= 16 ? 0u : (1u << (cols - 16)) - 1u);
	for (int64_t r = 0; r < rows; r++) {
		const float *src = acc + (r / 16) * 2 * 256 + (r % 16) * 16;
		uint16_t *dst = C + r * ldc;
		for (int j = 0; j < 2; j++) {
			__mmask16 m = j ? m1 : m0;
			if (!m)
				break;
			__m512 v = _mm512_load_ps(src + j * 256);
			if (beta != 0.0f) {
				__m256i h = _mm256_maskz_loadu_epi16(m, dst + j * 16);
				__m512 c = _mm512_castsi512_ps(
				    _mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
				v = _mm512_add_ps(v, _mm512_mul_ps(vb, c));
			}
			__m256i b = (__m256i)_mm512_cvtneps_pbh(v);
			__mmask16 sub = _mm512_fpclass_ps_mask(v, 0x20); /* denormal lanes */
			if (__builtin_expect(sub != 0, 0))
				b = _mm256_mask_mov_epi16(b, sub, amx_round_bf16(v));
			_mm256_mask_storeu_epi16(dst + j * 16, m, b);
		}
	}
}

/* The shared loop nest on the tile micro-kernel, inside one tile configuration. */
AMX_TARGET static void amx_gemm_tiles(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K,
                                      const uint16_t *A, int64_t lda, const uint16_t *B,
                                      int64_t ldb, float beta, void *C, int64_t ldc, int c_f32,
                                      amp_stats *st)
{
	_Alignas(64) amx_tilecfg cfg;
	memset(&cfg, 0, sizeof cfg);
	cfg.palette_id = 1;
	for (int t = 0; t < 8; t++) {
		cfg.colsb[t] = 64;
		cfg.rows[t] = 16;
	}
	_tile_loadconfig(&cfg);
	if (c_f32)
		amx_gemm_drive(amp_amx_pack_a_avx512, amp_amx_pack_b_avx512, amx_ukr_tiles,
		               amp_amx_store_f32_avx512, amp_amx_acc_transpose_avx512, amp_stats_bf16, trans_a, trans_b, M, N, K, A,
		               lda, B, ldb, beta, C, ldc, 1, NULL);
	else
		amx_gemm_drive(amp_amx_pack_a_avx512, amp_amx_pack_b_avx512, amx_ukr_tiles,
		               amp_amx_store_avx512bf16, amp_amx_acc_transpose_avx512, amp_stats_bf16, trans_a, trans_b, M, N, K, A,
		               lda, B, ldb, beta, C, ldc, 0, st);
	_tile_release();
}

AVX512_TARGET void amp_amx_gemm_model_avx512(int trans_a, int trans_b, int64_t M, int64_t N,
                                             int64_t K, const uint16_t *A, int64_t lda,
                                             const uint16_t *B, int64_t ldb, float beta,
                                             uint16_t *C, int64_t ldc, amp_stats *st)
{
	amx_gemm_drive(amp_amx_pack_a_avx512, amp_amx_pack_b_avx512, amx_ukr_ref, amp_amx_store_avx512, amp_amx_acc_transpose_avx512, amp_stats_bf16, trans_a, trans_b, M, N, K,
	               A, lda, B, ldb, beta, C, ldc, 0, st);
}

/* Without permission the model's micro-kernel stands in (the same results up to the order of
 * the two FP32 sums inside a tdpbf16ps, see amx_tile_dp_bf16_ref), compiled for any x86-64. */
void amp_gemm_bf16_amx(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, const uint16_t *A,
                       int64_t lda, const uint16_t *B, int64_t ldb, float beta, uint16_t *C,
                       int64_t ldc, amp_stats *st)
{
	if (amp_amx_init() != 0) {
		amx_gemm_drive(amx_pack_a_ref, amx_pack_b_vnni_ref, amx_ukr_ref, amx_store_ref, amx_acc_transpose_ref, amp_stats_bf16, trans_a, trans_b, M, N,
		               K, A, lda, B, ldb, beta, C, ldc, 0, st);
		return;
	}
	amx_gemm_tiles(trans_a, trans_b, M, N, K, A, lda, B, ldb, beta, C, ldc, 0, st);
}

void amp_gemm_bf16_amx_acc32(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K,
                             const uint16_t *A, int64_t lda, const uint16_t *B, int64_t ldb,
                             float beta, float *C, int64_t ldc)
{
	if (amp_amx_init() != 0) {
		amx_gemm_drive(amx_pack_a_ref, amx_pack_b_vnni_ref, amx_ukr_ref, amx_store_f32_ref, amx_acc_transpose_ref,
		               amp_stats_bf16, trans_a, trans_b, M, N, K, A, lda, B, ldb, beta, C,
		               ldc, 1, NULL);
		return;
	}
	amx_gemm_tiles(trans_a, trans_b, M, N, K, A, lda, B, ldb, beta, C, ldc, 1, NULL);
}

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
 * tiles tmm4, tmm5, B tiles tmm6, tmm7; every tile row is 64 bytes apart. */
AMX_TARGET static void amx_ukr_tiles(int64_t ks, const uint16_t *ap, const uint16_t *bp, float *acc,
                                     int load)
{
	if (load) {
		_tile_loadd(0, acc + 0 * 256, 64);
		_tile_loadd(1, acc + 1 * 256, 64);
		_tile_loadd(2, acc + 2 * 256, 64);
		_tile_loadd(3, acc + 3 * 256, 64);
	} else {
		_tile_zero(0);
		_tile_zero(1);
		_tile_zero(2);
		_tile_zero(3);
	}
	for (int64_t s = 0; s < ks; s++) {
		const uint16_t *a0 = ap + s * 2 * AMX_TILE_ELEMS, *b0 = bp + s * 2 * AMX_TILE_ELEMS;
		_tile_loadd(4, a0, 64);
		_tile_loadd(5, a0 + AMX_TILE_ELEMS, 64);
		_tile_loadd(6, b0, 64);
		_tile_loadd(7, b0 + AMX_TILE_ELEMS, 64);
		_tile_dpbf16ps(0, 4, 6);
		_tile_dpbf16ps(1, 4, 7);
		_tile_dpbf16ps(2, 5, 6);
		_tile_dpbf16ps(3, 5, 7);
	}
	_tile_stored(0, acc + 0 * 256, 64);
	_tile_stored(1, acc + 1 * 256, 64);
	_tile_stored(2, acc + 2 * 256, 64);
	_tile_stored(3, acc + 3 * 256, 64);
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
                                        uint16_t *C, int64_t ldc)
{
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

/* The shared loop nest on the tile micro-kernel, inside one tile configuration. */
AMX_TARGET static void amx_gemm_tiles(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K,
                                      const uint16_t *A, int64_t lda, const uint16_t *B,
                                      int64_t ldb, float beta, uint16_t *C, int64_t ldc,
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
	amx_gemm_drive(amx_ukr_tiles, amp_amx_store_avx512, amp_stats_bf16, trans_a, trans_b, M, N,
	               K, A, lda, B, ldb, beta, C, ldc, st);
	_tile_release();
}

AVX512_TARGET void amp_amx_gemm_model_avx512(int trans_a, int trans_b, int64_t M, int64_t N,
                                             int64_t K, const uint16_t *A, int64_t lda,
                                             const uint16_t *B, int64_t ldb, float beta,
                                             uint16_t *C, int64_t ldc, amp_stats *st)
{
	amx_gemm_drive(amx_ukr_ref, amp_amx_store_avx512, amp_stats_bf16, trans_a, trans_b, M, N, K,
	               A, lda, B, ldb, beta, C, ldc, st);
}

/* Without permission the model's micro-kernel stands in (the same results up to the order of
 * the two FP32 sums inside a tdpbf16ps, see amx_tile_dp_bf16_ref), compiled for any x86-64. */
void amp_gemm_bf16_amx(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, const uint16_t *A,
                       int64_t lda, const uint16_t *B, int64_t ldb, float beta, uint16_t *C,
                       int64_t ldc, amp_stats *st)
{
	if (amp_amx_init() != 0) {
		amx_gemm_drive(amx_ukr_ref, amx_store_ref, amp_stats_bf16, trans_a, trans_b, M, N,
		               K, A, lda, B, ldb, beta, C, ldc, st);
		return;
	}
	amx_gemm_tiles(trans_a, trans_b, M, N, K, A, lda, B, ldb, beta, C, ldc, st);
}

/* gemm_avx512fp16.c — fp16 GEMM on native FP16 arithmetic (vfmadd231ph), Sapphire Rapids class,
 * with blocked promotion of the partial sums to FP32 (DeepSeek-V3's idea, DESIGN §2).
 *
 * Built into every library with per-function target attributes; the micro-kernel runs only
 * where amp_fp16n_cpu_ok().  Loop nest, packers and store semantics: gemm_blind.h.
 */
#include <cpuid.h>
#include <immintrin.h>
#include <pthread.h>

#include "kernels/gemm_blind.h"

/* ---- CPU check ----------------------------------------------------------------------------- */

static pthread_once_t fp16n_once = PTHREAD_ONCE_INIT;
static int fp16n_ok;

static void fp16n_probe(void)
{
	unsigned a, b, c, d;
	if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27))) /* OSXSAVE */
		return;
	if (__get_cpuid_max(0, NULL) < 7)
		return;
	__cpuid_count(7, 0, a, b, c, d);
	if (!((d & (1u << 23)) && (b & (1u << 16)) && (b & (1u << 30)) && (b & (1u << 31))))
		return; /* AVX512-FP16, F, BW, VL */
	uint32_t lo, hi;
	__asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
	uint32_t want = (1u << 1) | (1u << 2) | (7u << 5); /* SSE, AVX, opmask + ZMM state */
	fp16n_ok = (lo & want) == want;
	(void)hi;
}

int amp_fp16n_cpu_ok(void)
{
	pthread_once(&fp16n_once, fp16n_probe);
	return fp16n_ok;
}

/* ---- the real micro-kernel and store ------------------------------------------------------- */

#define FP16_TARGET   __attribute__((target("avx512fp16,avx512f,avx512bw,avx512vl")))
#define AVX512_TARGET __attribute__((target("avx512f,avx512bw,avx512vl")))

/* acc += b * broadcast(*p), one vfmadd231ph with a {1to32} memory operand.  Written as asm
 * because GCC turns _mm512_fmadd_ph(_mm512_set1_ph(x), ...) with two uses of the broadcast
 * into one vpbroadcastw (a load plus a port-5 shuffle, which competes with the FMAs on
 * port 5) instead of two embedded broadcasts (pure loads).  Same arithmetic either way. */
#define FP16N_FMA_BCAST(acc, b, p)                                                                 \
	__asm__("vfmadd231ph %2%{1to32%}, %1, %0" : "+v"(acc) : "v"(b), "m"(*(p)))

/* acc row r, columns 32j .. 32j+31 (+)= the 32 fp16 sums in s. */
FP16_TARGET static inline void fp16n_promote(float *acc, __m512h s)
{
	__m512i si = _mm512_castph_si512(s);
	__m512 lo = _mm512_cvtxph_ps(_mm256_castsi256_ph(_mm512_castsi512_si256(si)));
	__m512 hi = _mm512_cvtxph_ps(_mm256_castsi256_ph(_mm512_extracti64x4_epi64(si, 1)));
	_mm512_store_ps(acc, _mm512_add_ps(_mm512_load_ps(acc), lo));
	_mm512_store_ps(acc + 16, _mm512_add_ps(_mm512_load_ps(acc + 16), hi));
}

#define FP16N_ROW(r)                                                                               \
	do {                                                                                       \
		FP16N_FMA_BCAST(c##r##0, b0, ak + (r));                                            \
		FP16N_FMA_BCAST(c##r##1, b1, ak + (r));                                            \
	} while (0)
#define FP16N_PROMOTE(r)                                                                           \
	do {                                                                                       \
		fp16n_promote(acc + (r)*FP16N_NR, c##r##0);                                        \
		fp16n_promote(acc + (r)*FP16N_NR + 32, c##r##1);                                   \
	} while (0)

/* Mirrors fp16n_ukr_ref: zmm c<r><j> holds row r, columns 32j .. 32j+31 of the block sums. */
FP16_TARGET static void fp16n_ukr_zmm(int64_t kc, const uint16_t *ap, const uint16_t *bp,
                                      float *acc, int load)
{
	if (!load)
		memset(acc, 0, FP16N_ACC_ELEMS * sizeof *acc);
	for (int64_t k0 = 0; k0 < kc; k0 += FP16N_KB) {
		__m512h z = _mm512_setzero_ph();
		__m512h c00 = z, c01 = z, c10 = z, c11 = z, c20 = z, c21 = z, c30 = z, c31 = z;
		__m512h c40 = z, c41 = z, c50 = z, c51 = z, c60 = z, c61 = z, c70 = z, c71 = z;
		int64_t k1 = blind_min(kc, k0 + FP16N_KB);
		for (int64_t k = k0; k < k1; k++) {
			const uint16_t *ak = ap + k * FP16N_MR;
			__m512h b0 = _mm512_load_ph(bp + k * FP16N_NR);
			__m512h b1 = _mm512_load_ph(bp + k * FP16N_NR + 32);
			FP16N_ROW(0);
			FP16N_ROW(1);
			FP16N_ROW(2);
			FP16N_ROW(3);
			FP16N_ROW(4);
			FP16N_ROW(5);
			FP16N_ROW(6);
			FP16N_ROW(7);
		}
		FP16N_PROMOTE(0);
		FP16N_PROMOTE(1);
		FP16N_PROMOTE(2);
		FP16N_PROMOTE(3);
		FP16N_PROMOTE(4);
		FP16N_PROMOTE(5);
		FP16N_PROMOTE(6);
		FP16N_PROMOTE(7);
	}
}

AVX512_TARGET void amp_fp16n_store_avx512(const float *acc, int64_t rows, int64_t cols, float beta,
                                          uint16_t *C, int64_t ldc)
{
	__m512 vb = _mm512_set1_ps(beta);
	for (int64_t r = 0; r < rows; r++) {
		for (int64_t j = 0; j * 16 < cols; j++) {
			int64_t w = blind_min(16, cols - j * 16);
			__mmask16 m = (__mmask16)((1u << w) - 1u);
			uint16_t *dst = C + r * ldc + j * 16;
			__m512 v = _mm512_load_ps(acc + r * FP16N_NR + j * 16);
			if (beta != 0.0f) {
				__m512 c = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, dst));
				v = _mm512_add_ps(v, _mm512_mul_ps(vb, c));
			}
			_mm256_mask_storeu_epi16(
			    dst, m,
			    _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
		}
	}
}

/* ---- the real packers ---------------------------------------------------------------------- */

/* x[r] holds 32 consecutive halves of row r (r < 8); returns in c[j] the 8 rows of column
 * 8L + j in 128-bit lane L: three rounds of in-lane interleaves (16-, 32-, 64-bit), 24 shuffles
 * for 256 halves.  The scalar packers' element copies cost one load and one store each. */
AVX512_TARGET static inline void fp16n_tr8(const __m512i x[8], __m512i c[8])
{
	__m512i a[8], b[8];
	for (int i = 0; i < 4; i++) {
		a[2 * i] = _mm512_unpacklo_epi16(x[2 * i], x[2 * i + 1]);
		a[2 * i + 1] = _mm512_unpackhi_epi16(x[2 * i], x[2 * i + 1]);
	}
	/* a[2i] lane L: columns 8L + 0..3 of rows 2i, 2i+1; a[2i+1]: columns 8L + 4..7 */
	for (int h = 0; h < 2; h++)
		for (int i = 0; i < 2; i++) {
			b[4 * h + 2 * i] = _mm512_unpacklo_epi32(a[4 * h + i], a[4 * h + 2 + i]);
			b[4 * h + 2 * i + 1] = _mm512_unpackhi_epi32(a[4 * h + i], a[4 * h + 2 + i]);
		}
	/* b[4h + q] lane L: columns 8L + 2q, 8L + 2q + 1 of rows 4h .. 4h+3 */
	for (int q = 0; q < 4; q++) {
		c[2 * q] = _mm512_unpacklo_epi64(b[q], b[4 + q]);
		c[2 * q + 1] = _mm512_unpackhi_epi64(b[q], b[4 + q]);
	}
}

/* o[L] = lane L of c[0], c[1], c[2], c[3] (a 4 x 4 transpose of 128-bit lanes). */
AVX512_TARGET static inline void fp16n_lanes4(const __m512i c[4], __m512i o[4])
{
	__m512i d0 = _mm512_shuffle_i64x2(c[0], c[1], 0x44), d1 = _mm512_shuffle_i64x2(c[0], c[1], 0xee);
	__m512i d2 = _mm512_shuffle_i64x2(c[2], c[3], 0x44), d3 = _mm512_shuffle_i64x2(c[2], c[3], 0xee);
	o[0] = _mm512_shuffle_i64x2(d0, d2, 0x88);
	o[1] = _mm512_shuffle_i64x2(d0, d2, 0xdd);
	o[2] = _mm512_shuffle_i64x2(d1, d3, 0x88);
	o[3] = _mm512_shuffle_i64x2(d1, d3, 0xdd);
}

static inline __mmask32 fp16n_mask32(int64_t n)
{
	return n >= 32 ? 0xffffffffu : (__mmask32)((1u << n) - 1u);
}

AVX512_TARGET void amp_fp16n_pack_a_avx512(const blind_mat *a, int64_t m0, int64_t rows, int64_t k0,
                                           int64_t kc, uint16_t *restrict out)
{
	if (a->rs == 1) {
		/* op(A) = A^T: the rows of one k are contiguous, one masked 16-byte copy per k (the
		 * mask zero-fills past rows) */
		__mmask8 m = (__mmask8)((1u << rows) - 1u);
		const uint16_t *src = a->p + k0 * a->cs + m0;
		for (int64_t k = 0; k < kc; k++)
			_mm_storeu_si128((__m128i *)(out + k * FP16N_MR),
			                 _mm_maskz_loadu_epi16(m, src + k * a->cs));
		return;
	}
	if (a->cs != 1) {
		fp16n_pack_a_ref(a, m0, rows, k0, kc, out);
		return;
	}
	/* rows of op(A) contiguous in k: transpose 8 rows x 32 k at a time */
	for (int64_t k = 0; k < kc; k += 32) {
		int64_t n = blind_min(32, kc - k);
		__mmask32 km = fp16n_mask32(n);
		__m512i x[8], c[8], o[8];
		for (int r = 0; r < FP16N_MR; r++)
			x[r] = r < rows ? _mm512_maskz_loadu_epi16(km, a->p + (m0 + r) * a->rs + k0 + k)
			                : _mm512_setzero_si512();
		fp16n_tr8(x, c);
		/* c[j] lane L holds k + 8L + j; output zmm o holds k + 4o .. 4o+3 */
		fp16n_lanes4(c, o);     /* o[L] = k + 8L + 0..3 */
		fp16n_lanes4(c + 4, o + 4); /* o[4 + L] = k + 8L + 4..7 */
		uint16_t *dst = out + k * FP16N_MR;
		if (n == 32) {
			for (int L = 0; L < 4; L++) {
				_mm512_storeu_si512(dst + 64 * L, o[L]);
				_mm512_storeu_si512(dst + 64 * L + 32, o[4 + L]);
			}
		} else {
			_Alignas(64) uint16_t tmp[32 * FP16N_MR];
			for (int L = 0; L < 4; L++) {
				_mm512_store_si512(tmp + 64 * L, o[L]);
				_mm512_store_si512(tmp + 64 * L + 32, o[4 + L]);
			}
			memcpy(dst, tmp, (size_t)(n * FP16N_MR) * sizeof *dst);
		}
	}
}

AVX512_TARGET void amp_fp16n_pack_b_avx512(const blind_mat *b, int64_t k0, int64_t kc, int64_t n0,
                                           int64_t cols, uint16_t *restrict out)
{
	int64_t nq = (cols + FP16N_NR - 1) / FP16N_NR;
	if (b->cs == 1) {
		/* rows of op(B) contiguous in n: two masked 32-half copies per k (zero past cols) */
		for (int64_t q = 0; q < nq; q++) {
			int64_t w = blind_min(FP16N_NR, cols - q * FP16N_NR);
			__mmask32 m0 = fp16n_mask32(w), m1 = fp16n_mask32(w > 32 ? w - 32 : 0);
			const uint16_t *src = b->p + k0 * b->rs + n0 + q * FP16N_NR;
			uint16_t *o = out + q * kc * FP16N_NR;
			for (int64_t k = 0; k < kc; k++) {
				_mm512_storeu_si512(o + k * FP16N_NR,
				                    _mm512_maskz_loadu_epi16(m0, src + k * b->rs));
				_mm512_storeu_si512(o + k * FP16N_NR + 32,
				                    _mm512_maskz_loadu_epi16(m1, src + k * b->rs + 32));
			}
		}
		return;
	}
	if (b->rs != 1) {
		fp16n_pack_b_ref(b, k0, kc, n0, cols, out);
		return;
	}
	/* op(B) = B^T: columns of op(B) contiguous in k; transpose 32 x 32 blocks (four 8-column
	 * groups, then the 128-bit lanes across the groups: 160 shuffles for 1024 halves) */
	for (int64_t q = 0; q < nq; q++)
		for (int h = 0; h < 2; h++) {
			int64_t c0 = q * FP16N_NR + 32 * h;
			int64_t w = cols > c0 ? blind_min(32, cols - c0) : 0;
			uint16_t *o = out + q * kc * FP16N_NR + 32 * h;
			if (w == 0) {
				for (int64_t k = 0; k < kc; k++)
					_mm512_storeu_si512(o + k * FP16N_NR, _mm512_setzero_si512());
				continue;
			}
			for (int64_t k = 0; k < kc; k += 32) {
				int64_t n = blind_min(32, kc - k);
				__mmask32 km = fp16n_mask32(n);
				__m512i c[4][8];
				for (int g = 0; g < 4; g++) {
					__m512i x[8];
					for (int i = 0; i < 8; i++) {
						int64_t cc = 8 * g + i;
						x[i] = cc < w ? _mm512_maskz_loadu_epi16(
						                    km, b->p + (n0 + c0 + cc) * b->cs + k0 + k)
						              : _mm512_setzero_si512();
					}
					fp16n_tr8(x, c[g]); /* c[g][j] lane L: k + 8L + j, columns 8g .. 8g+7 */
				}
				for (int j = 0; j < 8; j++) {
					__m512i t[4] = {c[0][j], c[1][j], c[2][j], c[3][j]}, y[4];
					fp16n_lanes4(t, y); /* y[L]: k + 8L + j, columns 0 .. 31 */
					for (int L = 0; L < 4; L++)
						if (8 * L + j < n)
							_mm512_storeu_si512(o + (k + 8 * L + j) * FP16N_NR, y[L]);
				}
			}
		}
}

/* The shared loop nest on the FP16 micro-kernel and the AVX-512 packers. */
FP16_TARGET static void fp16n_gemm_zmm(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K,
                                       const uint16_t *A, int64_t lda, const uint16_t *B,
                                       int64_t ldb, float beta, uint16_t *C, int64_t ldc,
                                       amp_stats *st)
{
	fp16n_gemm_drive(amp_fp16n_pack_a_avx512, amp_fp16n_pack_b_avx512, fp16n_ukr_zmm,
	                 amp_fp16n_store_avx512, trans_a, trans_b, M, N, K, A, lda, B, ldb, beta, C,
	                 ldc, st);
}

AVX512_TARGET void amp_fp16n_gemm_model_avx512(int trans_a, int trans_b, int64_t M, int64_t N,
                                               int64_t K, const uint16_t *A, int64_t lda,
                                               const uint16_t *B, int64_t ldb, float beta,
                                               uint16_t *C, int64_t ldc, amp_stats *st)
{
	fp16n_gemm_drive(amp_fp16n_pack_a_avx512, amp_fp16n_pack_b_avx512, fp16n_ukr_ref,
	                 amp_fp16n_store_avx512, trans_a, trans_b, M, N, K, A, lda, B, ldb, beta, C,
	                 ldc, st);
}

/* Without AVX512-FP16 the model's micro-kernel and store stand in (the same operations in the
 * same order: the same bits, but for which payload survives when two NaNs meet), compiled for
 * any x86-64. */
void amp_gemm_f16_avx512fp16(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K,
                             const uint16_t *A, int64_t lda, const uint16_t *B, int64_t ldb,
                             float beta, uint16_t *C, int64_t ldc, amp_stats *st)
{
	if (!amp_fp16n_cpu_ok()) {
		fp16n_gemm_drive(fp16n_pack_a_ref, fp16n_pack_b_ref, fp16n_ukr_ref, fp16n_store_ref,
		                 trans_a, trans_b, M, N, K, A, lda, B, ldb, beta, C, ldc, st);
		return;
	}
	fp16n_gemm_zmm(trans_a, trans_b, M, N, K, A, lda, B, ldb, beta, C, ldc, st);
}

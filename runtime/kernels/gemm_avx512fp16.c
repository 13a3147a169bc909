/* gemm_avx512fp16.c — fp16 GEMM on native FP16 arithmetic (vfmadd231ph), Sapphire Rapids class,
 * with blocked promotion of the partial sums to FP32 (DeepSeek-V3's idea, DESIGN §2).
 *
 * Built into every library with per-function target attributes; the micro-kernel runs only
 * where amp_fp16n_cpu_ok().  Loop nest, packers and store semantics: gemm_blind.h.
 */
#include <cpuid.h>
#include <immintrin.h>
#include <pthread.h>

#include "kernels/dot_avx512.h"
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

/* One k step: c<r><j> += b<j> * broadcast(A(r, k)) for the 8 rows, each a vfmadd231ph with a
 * {1to32} memory operand (a pure load: SPR's three load ports keep up with 16 of them and the
 * 2 B loads per 8 cycles).  Written as asm because GCC turns _mm512_fmadd_ph(_mm512_set1_ph(x),
 * ...) into vpbroadcastw, and because with per-row operands it walks the rows with a chain of
 * 7 adds per k step and shuffles an accumulator between two registers; here the rows are
 * addressed from two bases, a0 (row 0) and a4 (row 4), and the byte strides s1 (one row) and s3
 * (three rows): rows 0..3 at a0, a0 + s1, a0 + 2 s1, a0 + s3, rows 4..7 likewise from a4.  A is
 * only read, and never written while a GEMM runs, so no memory operand need tell the compiler
 * about those reads.  Same arithmetic as the intrinsics. */
/* clang-format off */
#define FP16N_F(a, c, b) "vfmadd231ph " a "%{1to32%}, %[" b "], %[" c "]\n\t"
#define FP16N_R0         "(%[a])"
#define FP16N_R1         "(%[a],%[s1],1)"
#define FP16N_R2         "(%[a],%[s1],2)"
#define FP16N_R3         "(%[a],%[s3],1)"
/* Four rows from base a (two asm statements per step: GCC allows 30 operands). */
#define FP16N_QUAD2(a_, w, x, y, z)                                                                \
	__asm__(FP16N_F(FP16N_R0, "p0", "b0") FP16N_F(FP16N_R0, "q0", "b1")                        \
	        FP16N_F(FP16N_R1, "p1", "b0") FP16N_F(FP16N_R1, "q1", "b1")                        \
	        FP16N_F(FP16N_R2, "p2", "b0") FP16N_F(FP16N_R2, "q2", "b1")                        \
	        FP16N_F(FP16N_R3, "p3", "b0") FP16N_F(FP16N_R3, "q3", "b1")                        \
	        : [p0] "+v"(c##w##0), [q0] "+v"(c##w##1), [p1] "+v"(c##x##0), [q1] "+v"(c##x##1),  \
	          [p2] "+v"(c##y##0), [q2] "+v"(c##y##1), [p3] "+v"(c##z##0), [q3] "+v"(c##z##1)   \
	        : [b0] "v"(b0), [b1] "v"(b1), [a] "r"(a_), [s1] "r"(s1), [s3] "r"(s3))
#define FP16N_QUAD1(a_, w, x, y, z)                                                                \
	__asm__(FP16N_F(FP16N_R0, "p0", "b0") FP16N_F(FP16N_R1, "p1", "b0")                        \
	        FP16N_F(FP16N_R2, "p2", "b0") FP16N_F(FP16N_R3, "p3", "b0")                        \
	        : [p0] "+v"(c##w##0), [p1] "+v"(c##x##0), [p2] "+v"(c##y##0), [p3] "+v"(c##z##0)   \
	        : [b0] "v"(b0), [a] "r"(a_), [s1] "r"(s1), [s3] "r"(s3))
/* The same on the second accumulator set (c<r>1) and B zmm b0: the second tile of a pair. */
#define FP16N_QUAD1B(a_, w, x, y, z)                                                               \
	__asm__(FP16N_F(FP16N_R0, "p0", "b0") FP16N_F(FP16N_R1, "p1", "b0")                        \
	        FP16N_F(FP16N_R2, "p2", "b0") FP16N_F(FP16N_R3, "p3", "b0")                        \
	        : [p0] "+v"(c##w##1), [p1] "+v"(c##x##1), [p2] "+v"(c##y##1), [p3] "+v"(c##z##1)   \
	        : [b0] "v"(b0), [a] "r"(a_), [s1] "r"(s1), [s3] "r"(s3))
/* clang-format on */
#define FP16N_STEP2()                                                                              \
	do {                                                                                       \
		FP16N_QUAD2(a0, 0, 1, 2, 3);                                                       \
		FP16N_QUAD2(a4, 4, 5, 6, 7);                                                       \
	} while (0)
#define FP16N_STEP1()                                                                              \
	do {                                                                                       \
		FP16N_QUAD1(a0, 0, 1, 2, 3);                                                       \
		FP16N_QUAD1(a4, 4, 5, 6, 7);                                                       \
	} while (0)

#define FP16N_Z _mm512_setzero_ph()

static inline __mmask32 fp16n_mask32(int64_t n)
{
	return n >= 32 ? 0xffffffffu : (__mmask32)((1u << n) - 1u);
}

#define FP16N_SAVE1(r) _mm512_store_ph(s + (r)*FP16N_NR, c##r##0)
#define FP16N_SAVE2(r)                                                                             \
	do {                                                                                       \
		_mm512_store_ph(s + (r)*FP16N_NR, c##r##0);                                        \
		_mm512_store_ph(s + (r)*FP16N_NR + 32, c##r##1);                                   \
	} while (0)
#define FP16N_SAVES(NJ)                                                                            \
	do {                                                                                       \
		FP16N_SAVE##NJ(0);                                                                 \
		FP16N_SAVE##NJ(1);                                                                 \
		FP16N_SAVE##NJ(2);                                                                 \
		FP16N_SAVE##NJ(3);                                                                 \
		FP16N_SAVE##NJ(4);                                                                 \
		FP16N_SAVE##NJ(5);                                                                 \
		FP16N_SAVE##NJ(6);                                                                 \
		FP16N_SAVE##NJ(7);                                                                 \
	} while (0)

/* fp32 of the 16 halves at p, vcvtph2psx from memory: written as asm because GCC otherwise
 * forwards the stored sums back from their registers (a vextracti64x4 each, the port-5 uop this
 * path avoids) and then spills the converted halves it computed early. */
FP16_TARGET static inline __m512 fp16n_cvt_mem(const uint16_t *p)
{
	__m512 v;
	__asm__("vcvtph2psx %1, %0" : "=v"(v) : "m"(*(const __m256i *)p));
	return v;
}

/* acc[r * 64 + j] = fp32(s[r * 64 + j]) for the 8 rows, j < w (a multiple of 32): the first
 * pair of a tile. */
FP16_TARGET static inline void fp16n_promote_first(const uint16_t *s, float *acc, int w)
{
#pragma GCC unroll 8
	for (int r = 0; r < FP16N_MR; r++)
#pragma GCC unroll 4
		for (int j = 0; j < w; j += 16)
			_mm512_store_ps(acc + r * FP16N_NR + j,
			                fp16n_cvt_mem(s + r * FP16N_NR + j));
}

/* acc[r * 64 + j] += fp32(s[r * 64 + j]) (acc first, as the model adds). */
FP16_TARGET static inline void fp16n_promote_add(const uint16_t *s, float *acc, int w)
{
#pragma GCC unroll 8
	for (int r = 0; r < FP16N_MR; r++)
#pragma GCC unroll 4
		for (int j = 0; j < w; j += 16) {
			float *d = acc + r * FP16N_NR + j;
			_mm512_store_ps(d, _mm512_add_ps(_mm512_load_ps(d),
			                                 fp16n_cvt_mem(s + r * FP16N_NR + j)));
		}
}

/* The tile's FP32 sums of earlier k panels sit in L2 (the accumulators of a whole row block
 * of C, 1 MB at most); asking for them at the start hides the misses of the first promotion
 * behind the block's FMAs. */
AVX512_TARGET static inline void fp16n_prefetch_acc(const float *acc, int w)
{
#pragma GCC unroll 8
	for (int r = 0; r < FP16N_MR; r++)
#pragma GCC unroll 4
		for (int j = 0; j < w; j += 16)
			_mm_prefetch((const char *)(acc + r * FP16N_NR + j), _MM_HINT_T0);
}

/* A read in place: its 8 rows cross into new cache lines at the same k (every 32 steps when
 * the rows are aligned), 8 or 16 misses at once that the hardware prefetchers, each tracking
 * one load, did not hide; so each block asks for the lines of the next block's 24 halves of
 * every row, its first and its last (left > FP16N_KB: a next block exists). */
AVX512_TARGET static inline void fp16n_prefetch_rows(const uint16_t *a, int64_t ars, int64_t left)
{
	if (left <= FP16N_KB)
		return;
#pragma GCC unroll 8
	for (int r = 0; r < FP16N_MR; r++) {
		_mm_prefetch((const char *)(a + r * ars), _MM_HINT_T0);
		_mm_prefetch((const char *)(a + r * ars + FP16N_KB - 1), _MM_HINT_T0);
	}
}

/* c<r><j> = c<r><j> + buf[r * 64 + off ..]: the second block of a pair adds the first's sums
 * (vaddph, one rounding) */
#define FP16N_ADD(buf, j, off)                                                                     \
	do {                                                                                       \
		c0##j = _mm512_add_ph(c0##j, _mm512_load_ph(buf + 0 * FP16N_NR + (off)));          \
		c1##j = _mm512_add_ph(c1##j, _mm512_load_ph(buf + 1 * FP16N_NR + (off)));          \
		c2##j = _mm512_add_ph(c2##j, _mm512_load_ph(buf + 2 * FP16N_NR + (off)));          \
		c3##j = _mm512_add_ph(c3##j, _mm512_load_ph(buf + 3 * FP16N_NR + (off)));          \
		c4##j = _mm512_add_ph(c4##j, _mm512_load_ph(buf + 4 * FP16N_NR + (off)));          \
		c5##j = _mm512_add_ph(c5##j, _mm512_load_ph(buf + 5 * FP16N_NR + (off)));          \
		c6##j = _mm512_add_ph(c6##j, _mm512_load_ph(buf + 6 * FP16N_NR + (off)));          \
		c7##j = _mm512_add_ph(c7##j, _mm512_load_ph(buf + 7 * FP16N_NR + (off)));          \
	} while (0)
#define FP16N_ADDS1() FP16N_ADD(s, 0, 0)
#define FP16N_ADDS2()                                                                              \
	do {                                                                                       \
		FP16N_ADD(s, 0, 0);                                                                \
		FP16N_ADD(s, 1, 32);                                                               \
	} while (0)

/* The first 32 NJ columns of fp16n_ukr_ref's tile (the others are not computed: the caller
 * stores only those).  zmm c<r><j> holds row r, columns 32j .. 32j+31 of a block's sums.
 * Blocks go in pairs (gemm_blind.h): the first block's sums are stored, the second block
 * starts from zero and adds them at its end, and the pair is promoted.
 * The promotion goes through memory: the sums are stored (store ports, idle here) and
 * converted by vcvtph2psx from memory, which saves the vextracti64x4 (port 5, shared with the
 * FMAs) that the upper 16 halves of a zmm would need; the 16 sums die at the stores, so the
 * compiler has no reason to spill them.  The first pair of a tile (load 0) stores its FP32
 * sums instead of adding them to a zeroed accumulator: no memset, no adds, the model's order
 * (fp16n_ukr_ref does the same). */
#define FP16N_UKR(NJ, NAME, ARS, AKS)                                                              \
	FP16_TARGET static void NAME(int64_t kc, const uint16_t *ap, int64_t ars_arg,              \
	                             const uint16_t *bp, int64_t bks, float *acc, int load)        \
	{                                                                                          \
		const int64_t ars = (ARS), s1 = ars * 2, s3 = ars * 6; /* bytes */                 \
		(void)ars_arg;                                                                     \
		_Alignas(64) uint16_t s[FP16N_ACC_ELEMS];                                          \
		if (kc == 0 && !load)                                                              \
			memset(acc, 0, FP16N_ACC_ELEMS * sizeof *acc);                             \
		if (load)                                                                          \
			fp16n_prefetch_acc(acc, 32 * NJ);                                          \
		for (int64_t k0 = 0; k0 < kc; k0 += FP16N_KB) {                                    \
			if ((AKS) == 1)                                                            \
				fp16n_prefetch_rows(ap + k0 + FP16N_KB, ars, kc - k0);             \
			__m512h c00 = FP16N_Z, c10 = FP16N_Z, c20 = FP16N_Z, c30 = FP16N_Z;        \
			__m512h c40 = FP16N_Z, c50 = FP16N_Z, c60 = FP16N_Z, c70 = FP16N_Z;        \
			__m512h c01 = FP16N_Z, c11 = FP16N_Z, c21 = FP16N_Z, c31 = FP16N_Z;        \
			__m512h c41 = FP16N_Z, c51 = FP16N_Z, c61 = FP16N_Z, c71 = FP16N_Z;        \
			int64_t k1 = blind_min(kc, k0 + FP16N_KB);                                 \
			for (int64_t k = k0; k < k1; k++) {                                        \
				const uint16_t *a0 = ap + k * (AKS), *a4 = a0 + 4 * ars;           \
				__m512h b0 = _mm512_loadu_ph(bp + k * bks);                        \
				__m512h b1 =                                                       \
				    NJ == 2 ? _mm512_loadu_ph(bp + k * bks + 32) : FP16N_Z;        \
				(void)b1;                                                          \
				FP16N_STEP##NJ();                                                  \
			}                                                                          \
			int g = (int)(k0 / FP16N_KB) % FP16N_GROUP; /* block g of its group */     \
			if (g > 0)                                                                 \
				FP16N_ADDS##NJ();                                                  \
			FP16N_SAVES(NJ);                                                           \
			(void)c01, (void)c11, (void)c21, (void)c31, (void)c41, (void)c51,          \
			    (void)c61, (void)c71;                                                  \
			if (g < FP16N_GROUP - 1 && k1 < kc)                                        \
				continue; /* the next block adds the sums in s */                  \
			if (!load && k0 < FP16N_KP)                                                \
				fp16n_promote_first(s, acc, 32 * NJ);                              \
			else                                                                       \
				fp16n_promote_add(s, acc, 32 * NJ);                                \
		}                                                                                  \
	}
FP16N_UKR(1, fp16n_ukr_zmm1, 1, FP16N_MR)
FP16N_UKR(2, fp16n_ukr_zmm2, 1, FP16N_MR)
FP16N_UKR(1, fp16n_ukr_zmm1_direct, ars_arg, 1)
FP16N_UKR(2, fp16n_ukr_zmm2_direct, ars_arg, 1)

/* The second tile's sums (c<r>1) to s2. */
#define FP16N_SAVES_B()                                                                            \
	do {                                                                                       \
		_mm512_store_ph(s2 + 0 * FP16N_NR, c01);                                           \
		_mm512_store_ph(s2 + 1 * FP16N_NR, c11);                                           \
		_mm512_store_ph(s2 + 2 * FP16N_NR, c21);                                           \
		_mm512_store_ph(s2 + 3 * FP16N_NR, c31);                                           \
		_mm512_store_ph(s2 + 4 * FP16N_NR, c41);                                           \
		_mm512_store_ph(s2 + 5 * FP16N_NR, c51);                                           \
		_mm512_store_ph(s2 + 6 * FP16N_NR, c61);                                           \
		_mm512_store_ph(s2 + 7 * FP16N_NR, c71);                                           \
	} while (0)
/* Two tiles of <= 32 columns on one B micro-panel: 16 rows, 16 accumulators (c<r>0 for the
 * tile at ap, c<r>1 for the one at ap2), one B load and 16 FMAs a k step. */
#define FP16N_UKR_PAIR(NAME, ARS, AKS)                                                             \
	FP16_TARGET static void NAME(int64_t kc, const uint16_t *ap, const uint16_t *ap2,          \
	                             int64_t ars_arg, const uint16_t *bp, float *acc, float *acc2, \
	                             int load)                                                     \
	{                                                                                          \
		const int64_t ars = (ARS), s1 = ars * 2, s3 = ars * 6; /* bytes */                 \
		(void)ars_arg;                                                                     \
		_Alignas(64) uint16_t s[FP16N_ACC_ELEMS], s2[FP16N_ACC_ELEMS];                     \
		if (kc == 0 && !load) {                                                            \
			memset(acc, 0, FP16N_ACC_ELEMS * sizeof *acc);                             \
			memset(acc2, 0, FP16N_ACC_ELEMS * sizeof *acc2);                           \
		}                                                                                  \
		if (load) {                                                                        \
			fp16n_prefetch_acc(acc, 32);                                               \
			fp16n_prefetch_acc(acc2, 32);                                              \
		}                                                                                  \
		for (int64_t k0 = 0; k0 < kc; k0 += FP16N_KB) {                                    \
			if ((AKS) == 1) {                                                          \
				fp16n_prefetch_rows(ap + k0 + FP16N_KB, ars, kc - k0);             \
				fp16n_prefetch_rows(ap2 + k0 + FP16N_KB, ars, kc - k0);            \
			}                                                                          \
			__m512h c00 = FP16N_Z, c10 = FP16N_Z, c20 = FP16N_Z, c30 = FP16N_Z;        \
			__m512h c40 = FP16N_Z, c50 = FP16N_Z, c60 = FP16N_Z, c70 = FP16N_Z;        \
			__m512h c01 = FP16N_Z, c11 = FP16N_Z, c21 = FP16N_Z, c31 = FP16N_Z;        \
			__m512h c41 = FP16N_Z, c51 = FP16N_Z, c61 = FP16N_Z, c71 = FP16N_Z;        \
			int64_t k1 = blind_min(kc, k0 + FP16N_KB);                                 \
			for (int64_t k = k0; k < k1; k++) {                                        \
				const uint16_t *a0 = ap + k * (AKS), *a4 = a0 + 4 * ars;           \
				const uint16_t *a8 = ap2 + k * (AKS), *a12 = a8 + 4 * ars;         \
				__m512h b0 = _mm512_load_ph(bp + k * FP16N_NR);                    \
				FP16N_QUAD1(a0, 0, 1, 2, 3);                                       \
				FP16N_QUAD1(a4, 4, 5, 6, 7);                                       \
				FP16N_QUAD1B(a8, 0, 1, 2, 3);                                      \
				FP16N_QUAD1B(a12, 4, 5, 6, 7);                                     \
			}                                                                          \
			int g = (int)(k0 / FP16N_KB) % FP16N_GROUP; /* block g of its group */     \
			if (g > 0) {                                                               \
				FP16N_ADD(s, 0, 0);                                                \
				FP16N_ADD(s2, 1, 0);                                               \
			}                                                                          \
			FP16N_SAVES(1);                                                            \
			FP16N_SAVES_B();                                                           \
			if (g < FP16N_GROUP - 1 && k1 < kc)                                        \
				continue; /* the next block adds the sums in s, s2 */              \
			if (!load && k0 < FP16N_KP) {                                              \
				fp16n_promote_first(s, acc, 32);                                   \
				fp16n_promote_first(s2, acc2, 32);                                 \
			} else {                                                                   \
				fp16n_promote_add(s, acc, 32);                                     \
				fp16n_promote_add(s2, acc2, 32);                                   \
			}                                                                          \
		}                                                                                  \
	}
FP16N_UKR_PAIR(fp16n_ukr_pair, 1, FP16N_MR)
FP16N_UKR_PAIR(fp16n_ukr_pair_direct, ars_arg, 1)

/* fp16n_ukr_c_fn: one group of blocks (kc <= FP16N_KP) of 8 x 64 sums, A at any strides,
 * stored as they are to the rows < rows and columns < cols of C. */
FP16_TARGET static void fp16n_ukr_c_zmm(int64_t kc, const uint16_t *ap, int64_t ars, int64_t aks,
                                        const uint16_t *bp, int64_t rows, int64_t cols, uint16_t *C,
                                        int64_t ldc)
{
	const int64_t s1 = ars * 2, s3 = ars * 6; /* bytes */
	_Alignas(64) uint16_t s[FP16N_ACC_ELEMS];
	for (int64_t k0 = 0; k0 < kc; k0 += FP16N_KB) {
		__m512h c00 = FP16N_Z, c10 = FP16N_Z, c20 = FP16N_Z, c30 = FP16N_Z;
		__m512h c40 = FP16N_Z, c50 = FP16N_Z, c60 = FP16N_Z, c70 = FP16N_Z;
		__m512h c01 = FP16N_Z, c11 = FP16N_Z, c21 = FP16N_Z, c31 = FP16N_Z;
		__m512h c41 = FP16N_Z, c51 = FP16N_Z, c61 = FP16N_Z, c71 = FP16N_Z;
		int64_t k1 = blind_min(kc, k0 + FP16N_KB);
		for (int64_t k = k0; k < k1; k++) {
			const uint16_t *a0 = ap + k * aks, *a4 = a0 + 4 * ars;
			__m512h b0 = _mm512_load_ph(bp + k * FP16N_NR);
			__m512h b1 = _mm512_load_ph(bp + k * FP16N_NR + 32);
			FP16N_STEP2();
		}
		if (k0 > 0)
			FP16N_ADDS2();
		FP16N_SAVES(2);
	}
	__mmask32 m0 = fp16n_mask32(cols), m1 = fp16n_mask32(cols > 32 ? cols - 32 : 0);
	for (int64_t r = 0; r < rows; r++) {
		_mm512_mask_storeu_epi16(C + r * ldc, m0, _mm512_load_si512(s + r * FP16N_NR));
		_mm512_mask_storeu_epi16(C + r * ldc + 32, m1,
		                         _mm512_load_si512(s + r * FP16N_NR + 32));
	}
}

/* The micro-kernel for a tile of cols columns: one zmm of B per k step when they fit in 32;
 * A packed (aks 8, ars 1) or read in place from rows of op(A) contiguous in k (aks 1). */
FP16_TARGET static void fp16n_ukr_zmm(int64_t kc, const uint16_t *ap, const uint16_t *ap2,
                                      int64_t ars, int64_t aks, const uint16_t *bp, int64_t bks,
                                      float *acc, float *acc2, int load, int64_t cols)
{
	if (ap2) {
		if (aks == 1)
			fp16n_ukr_pair_direct(kc, ap, ap2, ars, bp, acc, acc2, load);
		else
			fp16n_ukr_pair(kc, ap, ap2, ars, bp, acc, acc2, load);
		return;
	}
	if (aks == 1) {
		if (cols <= 32)
			fp16n_ukr_zmm1_direct(kc, ap, ars, bp, bks, acc, load);
		else
			fp16n_ukr_zmm2_direct(kc, ap, ars, bp, bks, acc, load);
	} else if (cols <= 32) {
		fp16n_ukr_zmm1(kc, ap, ars, bp, bks, acc, load);
	} else {
		fp16n_ukr_zmm2(kc, ap, ars, bp, bks, acc, load);
	}
}

AVX512_TARGET void amp_fp16n_store_avx512(const float *acc, int64_t rows, int64_t cols, float beta,
                                          void *Cv, int64_t ldc)
{
	uint16_t *C = Cv;
	__m512 vb = _mm512_set1_ps(beta);
	if (cols == FP16N_NR && beta == 0.0f) {
		/* full-width tiles under beta 0, the common case: no masks, no C loads; for small K
		 * (the dW GEMMs, K = batch) the generic loop's bookkeeping took a tenth */
		for (int64_t r = 0; r < rows; r++)
#pragma GCC unroll 4
			for (int j = 0; j < FP16N_NR; j += 16)
				_mm256_storeu_si256(
				    (__m256i *)(C + r * ldc + j),
				    _mm512_cvtps_ph(_mm512_load_ps(acc + r * FP16N_NR + j),
				                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
		return;
	}
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

/* The acc32 store: C fp32 = acc (+ beta * C, a product then a sum, as the fp16 store adds). */
AVX512_TARGET void amp_fp16n_store_f32_avx512(const float *acc, int64_t rows, int64_t cols,
                                              float beta, void *Cv, int64_t ldc)
{
	float *C = Cv;
	__m512 vb = _mm512_set1_ps(beta);
	for (int64_t r = 0; r < rows; r++) {
		for (int64_t j = 0; j * 16 < cols; j++) {
			int64_t w = blind_min(16, cols - j * 16);
			__mmask16 m = (__mmask16)((1u << w) - 1u);
			float *dst = C + r * ldc + j * 16;
			__m512 v = _mm512_load_ps(acc + r * FP16N_NR + j * 16);
			if (beta != 0.0f)
				v = _mm512_add_ps(v,
				                  _mm512_mul_ps(vb, _mm512_maskz_loadu_ps(m, dst)));
			_mm512_mask_storeu_ps(dst, m, v);
		}
	}
}

/* ---- the real packers ---------------------------------------------------------------------- */

/* x[r] holds 32 consecutive halves of row r (r < 8); returns in c[j] the 8 rows of column
 * 8L + j in 128-bit lane L: three rounds of in-lane interleaves (16-, 32-, 64-bit), 24 shuffles
 * for 256 halves.  The scalar packers' element copies cost one load and one store each. */
AVX512_TARGET static inline __attribute__((always_inline)) void fp16n_tr8(const __m512i x[8],
                                                                          __m512i c[8])
{
	__m512i a[8], b[8];
#pragma GCC unroll 4 /* here and below: unrolled, the arrays stay in registers */
	for (int i = 0; i < 4; i++) {
		a[2 * i] = _mm512_unpacklo_epi16(x[2 * i], x[2 * i + 1]);
		a[2 * i + 1] = _mm512_unpackhi_epi16(x[2 * i], x[2 * i + 1]);
	}
	/* a[2i] lane L: columns 8L + 0..3 of rows 2i, 2i+1; a[2i+1]: columns 8L + 4..7 */
#pragma GCC unroll 2
	for (int h = 0; h < 2; h++)
#pragma GCC unroll 2
		for (int i = 0; i < 2; i++) {
			b[4 * h + 2 * i] = _mm512_unpacklo_epi32(a[4 * h + i], a[4 * h + 2 + i]);
			b[4 * h + 2 * i + 1] =
			    _mm512_unpackhi_epi32(a[4 * h + i], a[4 * h + 2 + i]);
		}
	/* b[4h + q] lane L: columns 8L + 2q, 8L + 2q + 1 of rows 4h .. 4h+3 */
#pragma GCC unroll 4
	for (int q = 0; q < 4; q++) {
		c[2 * q] = _mm512_unpacklo_epi64(b[q], b[4 + q]);
		c[2 * q + 1] = _mm512_unpackhi_epi64(b[q], b[4 + q]);
	}
}

/* o[L] = lane L of c[0], c[1], c[2], c[3] (a 4 x 4 transpose of 128-bit lanes). */
AVX512_TARGET static inline __attribute__((always_inline)) void fp16n_lanes4(const __m512i c[4],
                                                                             __m512i o[4])
{
	__m512i d0 = _mm512_shuffle_i64x2(c[0], c[1], 0x44),
	        d1 = _mm512_shuffle_i64x2(c[0], c[1], 0xee);
	__m512i d2 = _mm512_shuffle_i64x2(c[2], c[3], 0x44),
	        d3 = _mm512_shuffle_i64x2(c[2], c[3], 0xee);
	o[0] = _mm512_shuffle_i64x2(d0, d2, 0x88);
	o[1] = _mm512_shuffle_i64x2(d0, d2, 0xdd);
	o[2] = _mm512_shuffle_i64x2(d1, d3, 0x88);
	o[3] = _mm512_shuffle_i64x2(d1, d3, 0xdd);
}

/* One micro-panel (rows <= 8) of an op(A) whose rows are contiguous in k. */
AVX512_TARGET static void fp16n_pack_a_rows(const blind_mat *a, int64_t m0, int64_t rows,
                                            int64_t k0, int64_t kc, uint16_t *restrict out)
{
	/* rows of op(A) contiguous in k: transpose 8 rows x 32 k at a time */
	for (int64_t k = 0; k < kc; k += 32) {
		int64_t n = blind_min(32, kc - k);
		__mmask32 km = fp16n_mask32(n);
		__m512i x[8], c[8], o[8];
#pragma GCC unroll 8
		for (int r = 0; r < FP16N_MR; r++)
			x[r] = r < rows
			           ? _mm512_maskz_loadu_epi16(km, a->p + (m0 + r) * a->rs + k0 + k)
			           : _mm512_setzero_si512();
		fp16n_tr8(x, c);
		/* c[j] lane L holds k + 8L + j; output zmm o holds k + 4o .. 4o+3 */
		fp16n_lanes4(c, o);         /* o[L] = k + 8L + 0..3 */
		fp16n_lanes4(c + 4, o + 4); /* o[4 + L] = k + 8L + 4..7 */
		uint16_t *dst = out + k * FP16N_MR;
		if (n == 32) {
#pragma GCC unroll 4
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

AVX512_TARGET void amp_fp16n_pack_a_avx512(const blind_mat *a, int64_t m0, int64_t rows, int64_t k0,
                                           int64_t kc, uint16_t *restrict out)
{
	int64_t np = (rows + FP16N_MR - 1) / FP16N_MR;
	if (a->rs == 1) {
		/* op(A) = A^T: the rows of one k are contiguous; a masked 64-byte load (32 rows,
		 * zero past rows) feeds four micro-panels, 16 bytes each, so that each line of A is
		 * read once: with one 16-byte copy per micro-panel and k, a leading dimension of
		 * 1024 put all the lines of a k panel in two L1 sets, and every read missed */
		for (int64_t i = 0; i < np; i += 4) {
			int64_t r0 = i * FP16N_MR;
			__mmask32 m = fp16n_mask32(rows - r0);
			const uint16_t *src = a->p + k0 * a->cs + m0 + r0;
			uint16_t *o = out + i * FP16N_MR * kc;
			int64_t nw = blind_min(4, np - i);
			for (int64_t k = 0; k < kc; k++) {
				__m512i v = _mm512_maskz_loadu_epi16(m, src + k * a->cs);
				_mm_storeu_si128((__m128i *)(o + k * FP16N_MR),
				                 _mm512_castsi512_si128(v));
				if (nw > 1)
					_mm_storeu_si128(
					    (__m128i *)(o + FP16N_MR * kc + k * FP16N_MR),
					    _mm512_extracti32x4_epi32(v, 1));
				if (nw > 2)
					_mm_storeu_si128(
					    (__m128i *)(o + 2 * FP16N_MR * kc + k * FP16N_MR),
					    _mm512_extracti32x4_epi32(v, 2));
				if (nw > 3)
					_mm_storeu_si128(
					    (__m128i *)(o + 3 * FP16N_MR * kc + k * FP16N_MR),
					    _mm512_extracti32x4_epi32(v, 3));
			}
		}
		return;
	}
	for (int64_t i = 0; i < np; i++) {
		int64_t r = blind_min(FP16N_MR, rows - i * FP16N_MR);
		if (a->cs == 1)
			fp16n_pack_a_rows(a, m0 + i * FP16N_MR, r, k0, kc, out + i * FP16N_MR * kc);
		else
			fp16n_pack_a_ref(a, m0 + i * FP16N_MR, r, k0, kc, out + i * FP16N_MR * kc);
	}
}

AVX512_TARGET void amp_fp16n_pack_b_avx512(const blind_mat *b, int64_t k0, int64_t kc, int64_t n0,
                                           int64_t cols, uint16_t *restrict out)
{
	int64_t nq = (cols + FP16N_NR - 1) / FP16N_NR;
	if (b->cs == 1) {
		/* rows of op(B) contiguous in n: two masked 32-half copies a k (zero past cols) */
		for (int64_t q = 0; q < nq; q++) {
			int64_t w = blind_min(FP16N_NR, cols - q * FP16N_NR);
			__mmask32 m0 = fp16n_mask32(w), m1 = fp16n_mask32(w > 32 ? w - 32 : 0);
			const uint16_t *src = b->p + k0 * b->rs + n0 + q * FP16N_NR;
			uint16_t *o = out + q * kc * FP16N_NR;
			for (int64_t k = 0; k < kc; k++) {
				_mm512_storeu_si512(o + k * FP16N_NR,
				                    _mm512_maskz_loadu_epi16(m0, src + k * b->rs));
				_mm512_storeu_si512(
				    o + k * FP16N_NR + 32,
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
					_mm512_storeu_si512(o + k * FP16N_NR,
					                    _mm512_setzero_si512());
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
						x[i] = cc < w
						           ? _mm512_maskz_loadu_epi16(
						                 km, b->p + (n0 + c0 + cc) * b->cs +
						                         k0 + k)
						           : _mm512_setzero_si512();
					}
					fp16n_tr8(x, c[g]); /* c[g][j] lane L: k + 8L + j, columns
					                       8g .. 8g+7 */
				}
				for (int j = 0; j < 8; j++) {
					__m512i t[4] = {c[0][j], c[1][j], c[2][j], c[3][j]}, y[4];
					fp16n_lanes4(t, y); /* y[L]: k + 8L + j, columns 0 .. 31 */
					for (int L = 0; L < 4; L++)
						if (8 * L + j < n)
							_mm512_storeu_si512(
							    o + (k + 8 * L + j) * FP16N_NR, y[L]);
				}
			}
		}
}

/* fp16n_store_fn for a transposed C: element (r, c) of the tile goes to C[c * ldc + r] (r <
 * rows <= 8, c < cols <= 64).  The tile goes through the plain store into a local block, the
 * same arithmetic hence the same bits (C gathered into it first when beta != 0, a rare case
 * here), and then out 16 bytes (8 rows) per column of it, transposed with the packers'
 * shuffles. */
AVX512_TARGET static void fp16n_store_t_avx512(const float *acc, int64_t rows, int64_t cols,
                                               float beta, void *Cv, int64_t ldc)
{
	uint16_t *C = Cv;
	_Alignas(64) uint16_t t[FP16N_ACC_ELEMS];
	if (rows < FP16N_MR)
		memset(t, 0, sizeof t);
	if (beta != 0.0f)
		for (int64_t c = 0; c < cols; c++)
			for (int64_t r = 0; r < rows; r++)
				t[r * FP16N_NR + c] = C[c * ldc + r];
	amp_fp16n_store_avx512(acc, rows, cols, beta, t, FP16N_NR);
	__mmask8 rm = (__mmask8)((1u << rows) - 1u);
	for (int64_t h = 0; h * 32 < cols; h++) {
		__m512i x[8], c[8];
		for (int r = 0; r < FP16N_MR; r++)
			x[r] = _mm512_load_si512(t + r * FP16N_NR + 32 * h);
		fp16n_tr8(x, c); /* c[j] lane L: the 8 rows of column 32h + 8L + j */
		for (int j = 0; j < 8; j++) {
			__m128i l[4] = {
			    _mm512_castsi512_si128(c[j]), _mm512_extracti32x4_epi32(c[j], 1),
			    _mm512_extracti32x4_epi32(c[j], 2), _mm512_extracti32x4_epi32(c[j], 3)};
			for (int L = 0; L < 4; L++) {
				int64_t col = 32 * h + 8 * L + j;
				if (col < cols)
					_mm_mask_storeu_epi16(C + col * ldc, rm, l[L]);
			}
		}
	}
}

/* ---- narrow x w^T: the dot products of gemm_blind.h ------------------------------------------
 * A tile of 4 rows of A by 5 rows of B: 20 zmm of 32 lanes' sums, 9 loads for 20 FMAs a step
 * (10 outputs, two tiles across).  Rows past M or N repeat the tile's first; their sums are
 * not stored. */
#define FP16N_DOT_MR 4
#define FP16N_DOT_NR 5
#define FP16N_DOT_T  (FP16N_DOT_MR * FP16N_DOT_NR)
_Static_assert(FP16N_GROUP == 2, "the dot tile adds the blocks of a pair");

/* c[r * 5 + j] += A row r . B row j over the 32 halves at k (zero where m is clear). */
FP16_TARGET static inline __attribute__((always_inline)) void
fp16n_dot_step(__m512h *c, const uint16_t *const *a, const uint16_t *const *b, int64_t k,
               __mmask32 m)
{
	__m512h bv[FP16N_DOT_NR];
#pragma GCC unroll 5
	for (int j = 0; j < FP16N_DOT_NR; j++)
		bv[j] = _mm512_castsi512_ph(_mm512_maskz_loadu_epi16(m, b[j] + k));
#pragma GCC unroll 4
	for (int r = 0; r < FP16N_DOT_MR; r++) {
		__m512h av = _mm512_castsi512_ph(_mm512_maskz_loadu_epi16(m, a[r] + k));
#pragma GCC unroll 5
		for (int j = 0; j < FP16N_DOT_NR; j++)
			c[r * FP16N_DOT_NR + j] =
			    _mm512_fmadd_ph(av, bv[j], c[r * FP16N_DOT_NR + j]);
	}
}

/* c = the sums of steps [s0, s1) from zero; steps from `full` on (one at most) are masked by
 * tail. */
FP16_TARGET static inline __attribute__((always_inline)) void
fp16n_dot_block(__m512h *c, const uint16_t *const *a, const uint16_t *const *b, int64_t s0,
                int64_t s1, int64_t full, __mmask32 tail)
{
#pragma GCC unroll 20
	for (int t = 0; t < FP16N_DOT_T; t++)
		c[t] = FP16N_Z;
	int64_t e = blind_min(s1, full);
	for (int64_t s = s0; s < e; s++)
		fp16n_dot_step(c, a, b, 32 * s, 0xffffffffu);
	if (s1 > full)
		fp16n_dot_step(c, a, b, 32 * full, tail);
}

FP16_TARGET static void fp16n_dot_zmm(int64_t M, int64_t N, int64_t K, const uint16_t *A,
                                      int64_t lda, const uint16_t *B, int64_t ldb, float beta,
                                      void *C, int64_t ldc, int c_f32)
{
	int64_t full = K / 32, steps = (K + 31) / 32;
	__mmask32 tail = fp16n_mask32(K % 32);
	_Alignas(64) uint16_t p[FP16N_DOT_T * 32]; /* a pair's sums */
	_Alignas(64) float f[FP16N_DOT_T * 32];    /* the lanes' FP32 sums of earlier pairs */
	/* the tile's sums as the stores take them (16 lanes a row read, 5 written: zeroed once, so
	 * that no stale lane raises an MXCSR flag in the beta add) */
	_Alignas(64) float acc[FP16N_DOT_MR * FP16N_NR];
	memset(acc, 0, sizeof acc);
	const __m512i quad = _mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 12, 8, 4, 0);
	for (int64_t i0 = 0; i0 < M; i0 += FP16N_DOT_MR)
		for (int64_t j0 = 0; j0 < N; j0 += FP16N_DOT_NR) {
			const uint16_t *a[FP16N_DOT_MR], *b[FP16N_DOT_NR];
			for (int r = 0; r < FP16N_DOT_MR; r++)
				a[r] = A + (i0 + r < M ? i0 + r : i0) * lda;
			for (int j = 0; j < FP16N_DOT_NR; j++)
				b[j] = B + (j0 + j < N ? j0 + j : j0) * ldb;
			int64_t s0 = 0;
			for (;; s0 += FP16N_KP) {
				__m512h c[FP16N_DOT_T];
				int64_t s1 = blind_min(steps, s0 + FP16N_KB);
				fp16n_dot_block(c, a, b, s0, s1, full, tail);
				if (s1 < steps) {
					/* the pair's second block adds the first's sums */
#pragma GCC unroll 20
					for (int t = 0; t < FP16N_DOT_T; t++)
						_mm512_store_ph(p + 32 * t, c[t]);
					fp16n_dot_block(c, a, b, s1,
					                blind_min(steps, s1 + FP16N_KB), full,
					                tail);
#pragma GCC unroll 20
					for (int t = 0; t < FP16N_DOT_T; t++)
						c[t] =
						    _mm512_add_ph(c[t], _mm512_load_ph(p + 32 * t));
				}
#pragma GCC unroll 20
				for (int t = 0; t < FP16N_DOT_T; t++)
					_mm512_store_ph(p + 32 * t, c[t]);
				if (s0 + FP16N_KP >= steps)
					break; /* the last pair is promoted as it is reduced */
#pragma GCC unroll 4
				for (int h = 0; h < 32 * FP16N_DOT_T; h += 16) {
					__m512 v = fp16n_cvt_mem(p + h);
					_mm512_store_ps(
					    f + h,
					    s0 == 0 ? v : _mm512_add_ps(_mm512_load_ps(f + h), v));
				}
			}
			/* the last promotion (stored by a first pair, else added) and the halvings
			 */
			for (int t0 = 0; t0 < FP16N_DOT_T; t0 += 4) {
				__m512 x[4];
#pragma GCC unroll 4
				for (int q = 0; q < 4; q++) {
					const uint16_t *ps = p + 32 * (t0 + q);
					const float *fs = f + 32 * (t0 + q);
					__m512 lo = fp16n_cvt_mem(ps), hi = fp16n_cvt_mem(ps + 16);
					if (s0 > 0) {
						lo = _mm512_add_ps(_mm512_load_ps(fs), lo);
						hi = _mm512_add_ps(_mm512_load_ps(fs + 16), hi);
					}
					x[q] = _mm512_add_ps(lo, hi);
				}
				__m128 d = _mm512_castps512_ps128(_mm512_permutexvar_ps(
				    quad, amp_dot_reduce4(x[0], x[1], x[2], x[3])));
				_Alignas(16) float v[4];
				_mm_store_ps(v, d);
				for (int q = 0; q < 4; q++) {
					int t = t0 + q;
					acc[(t / FP16N_DOT_NR) * FP16N_NR + t % FP16N_DOT_NR] =
					    v[q];
				}
			}
			int64_t rows = blind_min(FP16N_DOT_MR, M - i0),
			        cols = blind_min(FP16N_DOT_NR, N - j0);
			if (c_f32)
				amp_fp16n_store_f32_avx512(acc, rows, cols, beta,
				                           (float *)C + i0 * ldc + j0, ldc);
			else
				amp_fp16n_store_avx512(acc, rows, cols, beta,
				                       (uint16_t *)C + i0 * ldc + j0, ldc);
		}
}

/* The shared loop nest on the FP16 micro-kernel and the AVX-512 packers.  When op(B) is B^T
 * it computes C^T = op(B)^T op(A)^T instead if that packs less (and the bits are the same: each
 * element sees the same products, fp16 multiplication commuting, in the same order): op(B)^T is
 * then B itself, rows contiguous in k, read in place, and the packed side is op(A)^T — a copy
 * for A^T (the tt GEMMs), or a transpose of the smaller operand when M < N (the forward nt
 * GEMMs of a layer, M = batch: the transposing pack of the weights took a sixth of their time).
 * Not when the GEMM runs as dot products (fp16n_dot_fits): their order differs, and row ranges
 * of C must take the whole GEMM's path whatever their M. */
__attribute__((always_inline)) static inline void
fp16n_gemm_avx512(fp16n_ukr_fn ukr, fp16n_ukr_c_fn ukr_c, fp16n_dot_fn dot, int trans_a,
                  int trans_b, int64_t M, int64_t N, int64_t K, const uint16_t *A, int64_t lda,
                  const uint16_t *B, int64_t ldb, float beta, uint16_t *C, int64_t ldc,
                  amp_stats *st)
{
	if (trans_b && (trans_a || M < N) && !(dot && fp16n_dot_fits(trans_a, trans_b, N, K))) {
		fp16n_gemm_drive(amp_fp16n_pack_a_avx512, amp_fp16n_pack_b_avx512, ukr, NULL, dot,
		                 fp16n_store_t_avx512, 0, !trans_a, N, M, K, B, ldb, A, lda, beta,
		                 C, ldc, 0, 1, NULL);
		if (st) {
			amp_stats_init(st);
			blind_stats_rows(amp_stats_f16, C, ldc, 0, M, 0, N, st);
		}
		return;
	}
	fp16n_gemm_drive(amp_fp16n_pack_a_avx512, amp_fp16n_pack_b_avx512, ukr, ukr_c, dot,
	                 amp_fp16n_store_avx512, trans_a, trans_b, M, N, K, A, lda, B, ldb, beta, C,
	                 ldc, 0, 0, st);
}

FP16_TARGET static void fp16n_gemm_zmm(int dot, int trans_a, int trans_b, int64_t M, int64_t N,
                                       int64_t K, const uint16_t *A, int64_t lda, const uint16_t *B,
                                       int64_t ldb, float beta, uint16_t *C, int64_t ldc,
                                       amp_stats *st)
{
	fp16n_gemm_avx512(fp16n_ukr_zmm, fp16n_ukr_c_zmm, dot ? fp16n_dot_zmm : NULL, trans_a,
	                  trans_b, M, N, K, A, lda, B, ldb, beta, C, ldc, st);
}

/* The same loop nests (and choice of the transposed problem) on the model's micro-kernel. */
AVX512_TARGET void amp_fp16n_gemm_model_avx512(int trans_a, int trans_b, int64_t M, int64_t N,
                                               int64_t K, const uint16_t *A, int64_t lda,
                                               const uint16_t *B, int64_t ldb, float beta,
                                               uint16_t *C, int64_t ldc, amp_stats *st)
{
	fp16n_gemm_avx512(fp16n_ukr_ref, NULL, fp16n_dot_ref, trans_a, trans_b, M, N, K, A, lda, B,
	                  ldb, beta, C, ldc, st);
}

/* Without AVX512-FP16 the model's micro-kernel and store stand in (the same operations in the
 * same order: the same bits, but for which payload survives when two NaNs meet), compiled for
 * any x86-64. */
void amp_gemm_f16_avx512fp16_range(int dot, int trans_a, int trans_b, int64_t M, int64_t N,
                                   int64_t K, const uint16_t *A, int64_t lda, const uint16_t *B,
                                   int64_t ldb, float beta, uint16_t *C, int64_t ldc, amp_stats *st)
{
	if (!amp_fp16n_cpu_ok()) {
		fp16n_gemm_drive(fp16n_pack_a_panels_ref, fp16n_pack_b_ref, fp16n_ukr_ref, NULL,
		                 dot ? fp16n_dot_ref : NULL, fp16n_store_ref, trans_a, trans_b, M,
		                 N, K, A, lda, B, ldb, beta, C, ldc, 0, 0, st);
		return;
	}
	fp16n_gemm_zmm(dot, trans_a, trans_b, M, N, K, A, lda, B, ldb, beta, C, ldc, st);
}

void amp_gemm_f16_avx512fp16(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K,
                             const uint16_t *A, int64_t lda, const uint16_t *B, int64_t ldb,
                             float beta, uint16_t *C, int64_t ldc, amp_stats *st)
{
	amp_gemm_f16_avx512fp16_range(fp16n_dot_fits(trans_a, trans_b, N, K), trans_a, trans_b, M,
	                              N, K, A, lda, B, ldb, beta, C, ldc, st);
}

/* The acc32 store for a transposed C (fp16n_store_t_avx512's for FP32): each 8 x 8 block of
 * the tile transposed in registers, so that column c of it is 8 contiguous floats of C at
 * C[c * ldc] (masked to the rows), then the plain acc32 store's arithmetic on it: acc + (beta *
 * C), a product then a sum, the same bits. */
AVX512_TARGET static void fp16n_store_t_f32_avx512(const float *acc, int64_t rows, int64_t cols,
                                                   float beta, void *Cv, int64_t ldc)
{
	float *C = Cv;
	const __mmask8 rm = (__mmask8)((1u << rows) - 1u);
	const __m256 vb = _mm256_set1_ps(beta);
	for (int64_t j0 = 0; j0 < cols; j0 += 8) {
		__m256 r[8], t[8], u[8], c[8];
		for (int i = 0; i < 8; i++) /* rows past `rows` hold sums no store reads */
			r[i] = _mm256_load_ps(acc + i * FP16N_NR + j0);
		for (int i = 0; i < 8; i += 2) {
			t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
			t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
		}
		for (int h = 0; h < 8; h += 4) {
			u[h] = _mm256_shuffle_ps(t[h], t[h + 2], 0x44);
			u[h + 1] = _mm256_shuffle_ps(t[h], t[h + 2], 0xee);
			u[h + 2] = _mm256_shuffle_ps(t[h + 1], t[h + 3], 0x44);
			u[h + 3] = _mm256_shuffle_ps(t[h + 1], t[h + 3], 0xee);
		}
		for (int i = 0; i < 4; i++) {
			c[i] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x20);
			c[i + 4] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x31);
		}
		/* c[i]: column j0 + i of the tile, rows 0 .. 7 */
		int64_t w = cols - j0 < 8 ? cols - j0 : 8;
		for (int64_t i = 0; i < w; i++) {
			float *dst = C + (j0 + i) * ldc;
			__m256 v = c[i];
			if (beta != 0.0f)
				v = _mm256_add_ps(v, _mm256_mul_ps(vb, _mm256_maskz_loadu_ps(rm, dst)));
			_mm256_mask_storeu_ps(dst, rm, v);
		}
	}
}

/* The acc32 entry: the same loop nest with the FP32 store (the model's pieces without
 * AVX512-FP16), on the transposed problem when op(B) is B^T, as fp16n_gemm_avx512 chooses
 * (the weight gradient of a convolution, G (O, OHW) . col^T: col is then read in place and
 * only the thin G is transposed while packing, not the columns of every image). */
FP16_TARGET static void fp16n_gemm_zmm_acc32(int dot, int trans_a, int trans_b, int64_t M,
                                             int64_t N, int64_t K, const uint16_t *A, int64_t lda,
                                             const uint16_t *B, int64_t ldb, float beta, float *C,
                                             int64_t ldc)
{
	if (dot && fp16n_dot_fits(trans_a, trans_b, N, K)) {
		fp16n_dot_zmm(M, N, K, A, lda, B, ldb, beta, C, ldc, 1);
		return;
	}
	if (trans_b && (trans_a || M < N)) {
		fp16n_gemm_drive(amp_fp16n_pack_a_avx512, amp_fp16n_pack_b_avx512, fp16n_ukr_zmm,
		                 NULL, NULL, fp16n_store_t_f32_avx512, 0, !trans_a, N, M, K, B, ldb,
		                 A, lda, beta, C, ldc, 1, 1, NULL);
		return;
	}
	fp16n_gemm_drive(amp_fp16n_pack_a_avx512, amp_fp16n_pack_b_avx512, fp16n_ukr_zmm, NULL,
	                 NULL, amp_fp16n_store_f32_avx512, trans_a, trans_b, M, N, K, A, lda, B,
	                 ldb, beta, C, ldc, 1, 0, NULL);
}

void amp_gemm_f16_avx512fp16_acc32_range(int dot, int trans_a, int trans_b, int64_t M, int64_t N,
                                         int64_t K, const uint16_t *A, int64_t lda,
                                         const uint16_t *B, int64_t ldb, float beta, float *C,
                                         int64_t ldc)
{
	if (!amp_fp16n_cpu_ok()) {
		fp16n_gemm_drive(fp16n_pack_a_panels_ref, fp16n_pack_b_ref, fp16n_ukr_ref, NULL,
		                 dot ? fp16n_dot_ref : NULL, fp16n_store_f32_ref, trans_a, trans_b,
		                 M, N, K, A, lda, B, ldb, beta, C, ldc, 1, 0, NULL);
		return;
	}
	fp16n_gemm_zmm_acc32(dot, trans_a, trans_b, M, N, K, A, lda, B, ldb, beta, C, ldc);
}

void amp_gemm_f16_avx512fp16_acc32(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K,
                                   const uint16_t *A, int64_t lda, const uint16_t *B, int64_t ldb,
                                   float beta, float *C, int64_t ldc)
{
	amp_gemm_f16_avx512fp16_acc32_range(fp16n_dot_fits(trans_a, trans_b, N, K), trans_a,
	                                    trans_b, M, N, K, A, lda, B, ldb, beta, C, ldc);
}

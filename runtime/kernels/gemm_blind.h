/* gemm_blind.h — private to gemm_amx.c and gemm_avx512fp16.c: the AMX-BF16 GEMM and the native
 * AVX512-FP16 GEMM of the Intel class, and a plain-C model of each (they were first written on
 * an AMD-class machine that lacks both, against the models; since tested on the hardware too).
 *
 * The packers, the loop nests (drivers) and the store epilogues' semantics live here and are
 * shared by the real kernels and by the models; only the micro-kernels (tile / FP16 FMA loops)
 * differ: the real one issues the instructions, the model emulates them as the Intel SDM
 * specifies.  So a CPU without the features still runs everything but those few instructions.
 */
#ifndef AMP_KERNELS_GEMM_BLIND_H
#define AMP_KERNELS_GEMM_BLIND_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels/kernels.h"
#include "kernels/kernels_impl.h"
#include "kernels/stats.h"

/* ---- public to the runtime's dispatch ------------------------------------------------------ */

/* Asks Linux for permission to use the AMX tile data (arch_prctl ARCH_REQ_XCOMP_PERM,
 * XFEATURE_XTILEDATA) after checking that the CPU has AMX-TILE, AMX-BF16, AVX512-F/BW/VL and
 * that the OS enabled the tile and AVX-512 state (XCR0).  Returns 0 if amp_gemm_bf16_amx may
 * issue tile instructions, -1 otherwise.  Idempotent and thread-safe (the permission is per
 * process, asked once). */
int amp_amx_init(void);

/* C (M,N) = op(A) op(B) + beta C, all bf16 (bit patterns), row-major, leading dimensions in
 * elements: op(A) is A (M,K), lda >= K, or A^T from A (K,M), lda >= M, when trans_a; op(B) is
 * B (K,N), ldb >= N, or B^T from B (N,K), ldb >= K, when trans_b.  M, N >= 1, K >= 0.  beta 0:
 * C is overwritten and never read (it may hold garbage); otherwise beta C is added in FP32.
 * Products accumulate in FP32 tiles (tdpbf16ps); C is rounded once to bf16 (nearest even, NaN
 * quieted).  st: NULL, or receives (overwritten) the statistics of the final C (amp_stats_bf16).
 * Runs on the calling thread only (the kernel tables split the work over the threads:
 * gemm_split.h); uses this thread's GEMM workspace.  The sum over k runs in an order fixed by K alone.  Without AMX (amp_amx_init()
 * != 0) it computes the same result with the model's micro-kernel, slowly, instead of faulting. */
void amp_gemm_bf16_amx(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, const uint16_t *A,
                       int64_t lda, const uint16_t *B, int64_t ldb, float beta, uint16_t *C,
                       int64_t ldc, amp_stats *st);
/* The same GEMM with C fp32: the FP32 sums stored, not rounded (amp_gemm_acc32's contract). */
void amp_gemm_bf16_amx_acc32(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K,
                             const uint16_t *A, int64_t lda, const uint16_t *B, int64_t ldb,
                             float beta, float *C, int64_t ldc);

/* The same contract with fp16 A, B, C (IEEE binary16 bit patterns) and the statistics of
 * amp_stats_f16.  FP16 products and sums (vfmadd231ph) over blocks of FP16N_KB steps of k, the
 * partial sums of each pair of blocks added in FP16 and promoted to an FP32 accumulator; C
 * rounded once to fp16.  Without
 * AVX512-FP16 (amp_fp16n_cpu_ok() == 0) it runs the model's micro-kernel instead. */
void amp_gemm_f16_avx512fp16(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K,
                             const uint16_t *A, int64_t lda, const uint16_t *B, int64_t ldb,
                             float beta, uint16_t *C, int64_t ldc, amp_stats *st);
/* 1 if the CPU and OS support AVX512-FP16 (with F, BW, VL), else 0.  Probed once. */
int amp_fp16n_cpu_ok(void);
/* The two on a range of C of a larger GEMM (gemm_split.h), which takes the whole GEMM's path:
 * dot = fp16n_dot_fits of the whole (a column range of a wider GEMM can be as narrow as one that
 * runs as dot products; it must not, to keep the whole's bits). */
void amp_gemm_f16_avx512fp16_range(int dot, int trans_a, int trans_b, int64_t M, int64_t N,
                                   int64_t K, const uint16_t *A, int64_t lda, const uint16_t *B,
                                   int64_t ldb, float beta, uint16_t *C, int64_t ldc,
                                   amp_stats *st);
void amp_gemm_f16_avx512fp16_acc32_range(int dot, int trans_a, int trans_b, int64_t M, int64_t N,
                                         int64_t K, const uint16_t *A, int64_t lda,
                                         const uint16_t *B, int64_t ldb, float beta, float *C,
                                         int64_t ldc);

/* ---- shared by the kernels and the models -------------------------------------------------- */

/* Element (r, c) of an operand as the packers see it is p[r * rs + c * cs]; for A (r, c) =
 * (m, k) of op(A), for B (r, c) = (k, n) of op(B). */
typedef struct blind_mat {
	const uint16_t *p;
	int64_t rs, cs;
} blind_mat;

static inline blind_mat blind_op_a(int trans_a, const uint16_t *A, int64_t lda)
{
	blind_mat m = {A, trans_a ? 1 : lda, trans_a ? lda : 1};
	return m;
}

static inline blind_mat blind_op_b(int trans_b, const uint16_t *B, int64_t ldb)
{
	blind_mat m = {B, trans_b ? 1 : ldb, trans_b ? ldb : 1};
	return m;
}

static inline int64_t blind_min(int64_t a, int64_t b)
{
	return a < b ? a : b;
}

static inline float blind_f32_of_bits(uint32_t u)
{
	float f;
	memcpy(&f, &u, sizeof f);
	return f;
}

static inline uint32_t blind_bits_of_f32(float f)
{
	uint32_t u;
	memcpy(&u, &f, sizeof u);
	return u;
}

static inline float blind_bf16_to_f32(uint16_t h)
{
	return blind_f32_of_bits((uint32_t)h << 16);
}

/* fp32 -> bf16, round to nearest even; NaN quieted with its sign and top payload bits kept;
 * overflow to +-Inf; subnormals rounded like any other value (no flush). */
static inline uint16_t blind_f32_to_bf16(float f)
{
	uint32_t u = blind_bits_of_f32(f);
	if ((u & 0x7fffffffu) > 0x7f800000u)
		return (uint16_t)((u >> 16) | 0x40u);
	return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

typedef void (*blind_stats_fn)(const uint16_t *x, int64_t n, amp_stats *st);

/* *st (already initialised) += the statistics of rows [r0, r0+rows) x [c0, c0+cols) of C: one
 * call over a contiguous region (each call ends with a fixed cost), else one per row. */
static inline void blind_stats_rows(blind_stats_fn fn, const uint16_t *C, int64_t ldc, int64_t r0,
                                    int64_t rows, int64_t c0, int64_t cols, amp_stats *st)
{
	if (ldc == cols) {
		amp_stats s;
		fn(C + r0 * ldc, rows * cols, &s);
		amp_stats_merge(st, &s);
		return;
	}
	for (int64_t r = 0; r < rows; r++) {
		amp_stats s;
		fn(C + (r0 + r) * ldc + c0, cols, &s);
		amp_stats_merge(st, &s);
	}
}

/* ==== AMX-BF16 ================================================================================
 * Tiles: 8 registers of 16 rows x 64 bytes (palette 1), all configured full size.  A 32x32 block
 * of C is four FP32 tiles (tmm0..3: rows 0-15/16-31 x cols 0-15/16-31); each k step of 32 loads
 * two A tiles (tmm4, 5: 16 rows x 32 bf16) and two B tiles (tmm6, 7: 16 k pairs x 16 columns x
 * 2 bf16, the pair-interleaved "VNNI" layout), then issues four tdpbf16ps.
 * Loops: N by AMX_NC, M by AMX_MC, K by AMX_KC (B packed once per k panel for all AMX_MC rows,
 * i.e. once for M <= 1024), 32-row A blocks (packed, stay in L1), 32-column blocks of the
 * packed B panel (in L2).  FP32 partial sums of a k panel go to the workspace (exact), so the
 * result does not depend on the blocking: only on K.  When N fits one 32-column block, the k
 * panel is AMX_KC_ONE long and full A blocks are loaded in place (amx_a_tiles); blocks of <= 16
 * rows or columns compute two of the four tiles (amx_live). */
#define AMX_KSTEP 32
#define AMX_KC    256  /* k per panel: a 32-row A block (16 KB) and a B block (16 KB) share L1 (measured
                       * on the amx-bf16 class: 256 beat 512 and 1024 on the mlp and square shapes) */
#define AMX_NC    1024 /* columns per B panel: 512 KB of packed B (measured on the amx-bf16 class:
                       * 1024 beat 512 by 5-15 % on 1024^3 and the mlp dW shapes, A is read
                       * half as often) */
#define AMX_KC_ONE 2048 /* k per panel when N fits one 32-column block: the sums stay in the
                       * tiles, A is read in place (below) and B's block is at most 128 KB */
/* Column blocks the real packer (amp_amx_pack_b_avx512) packs together, each k pair's rows read
 * for that many blocks at a time: one at a time, the reads of a block's k rows are 64 bytes per
 * row, 2 KB apart on the MLP's 1024-wide rows; all of them at a time, each pair of rows is read
 * whole but the writes go to nblk streams 2 ks KB apart, which share a few L1 sets.  Two: the
 * head's weight gradient (10 x 1024 x 128, B packed for ten rows) 2.1x -> 2.7x FP32, the others
 * the same or better.  Also the group that a single row block packs just before its use. */
#define AMX_PACK_B_GROUP 2
#define AMX_MC    1024 /* rows whose FP32 partial sums are kept across k panels (4 MB) */

/* One tile's memory image: 16 rows of 32 bf16 (A, B) or 16 fp32 (C), 64 bytes per row. */
#define AMX_TILE_ELEMS 512  /* bf16 elements of an A or B tile */
#define AMX_ACC_ELEMS  1024 /* fp32 elements of a 32x32 C block: tiles (0,0) (0,1) (1,0) (1,1) */

/* Packs op(A)[m0 .. m0+rows) [k0 .. k0+kc) (rows <= 32, kc <= ks * 32) into out: ks k steps
 * of two A tiles, out[((s * 2 + h) * 16 + i) * 32 + j] = op(A)(m0 + 16h + i, k0 + 32s + j),
 * zero past rows and kc. */
static inline void amx_pack_a_ref(const blind_mat *a, int64_t m0, int64_t rows, int64_t k0,
                                  int64_t kc, int64_t ks, uint16_t *restrict out)
{
	if (rows < 32 || kc % AMX_KSTEP)
		memset(out, 0, (size_t)(ks * 2 * AMX_TILE_ELEMS) * sizeof *out);
	if (a->cs == 1) {
		/* rows of op(A) are contiguous: one 32-element run per tile row */
		for (int64_t r = 0; r < rows; r++) {
			const uint16_t *src = a->p + (m0 + r) * a->rs + k0;
			for (int64_t s = 0; s < ks; s++) {
				int64_t n = blind_min(AMX_KSTEP, kc - s * AMX_KSTEP);
				uint16_t *o = out + ((s * 2 + r / 16) * 16 + r % 16) * 32;
				memcpy(o, src + s * AMX_KSTEP, (size_t)n * sizeof *o);
			}
		}
	} else {
		/* op(A) = A^T: for each k the rows are contiguous in memory */
		for (int64_t k = 0; k < kc; k++) {
			const uint16_t *src = a->p + (k0 + k) * a->cs + m0;
			uint16_t *o = out + (k / AMX_KSTEP) * 2 * AMX_TILE_ELEMS + k % AMX_KSTEP;
			for (int64_t r = 0; r < rows; r++)
				o[((r / 16) * 16 + r % 16) * 32] = src[r * a->rs];
		}
	}
}

/* B tiles per k step of a packed 32-column block of cols columns: two, or one for a block of
 * <= 16 columns (the last block of a narrow op(B), the head's 10 outputs), which the
 * micro-kernel reads with one B tile (amx_live); a tile of nothing but padding would be written
 * for nothing (and doubled the head's panel past L1). */
static inline int64_t amx_b_tiles(int64_t cols)
{
	return cols > 16 ? 2 : 1;
}

/* Where tile j of k step s of 32-column block nb is in a panel of ks k steps and cols columns
 * (elements from its start): every block but a narrow last one holds ks * 2 tiles. */
static inline int64_t amx_b_at(int64_t ks, int64_t cols, int64_t nb, int64_t s, int64_t j)
{
	return ((nb * ks * 2) + s * amx_b_tiles(cols - nb * 32) + j) * AMX_TILE_ELEMS;
}

/* Elements of a packed panel of ks k steps and cols columns. */
static inline int64_t amx_b_elems(int64_t ks, int64_t cols)
{
	int64_t nblk = (cols + 31) / 32;
	return nblk ? amx_b_at(ks, cols, nblk - 1, ks, 0) : 0;
}

/* Packs op(B)[k0 .. k0+kc) [n0 .. n0+cols) into out, per 32-column block nb, k step s and
 * 16-column half j (j = 0 only in a block of <= 16 columns) one B tile in the VNNI layout:
 *   out[amx_b_at(ks, cols, nb, s, j) + p * 32 + c * 2 + e] = op(B)(k0 + 32s + 2p + e,
 *                                                               n0 + 32nb + 16j + c),
 * zero past kc and cols (ks k steps, nblk = ceil(cols / 32) blocks). */
static inline void amx_pack_b_vnni_ref(const blind_mat *b, int64_t k0, int64_t kc, int64_t ks,
                                       int64_t n0, int64_t cols, uint16_t *restrict out)
{
	if (cols % 32 || kc % AMX_KSTEP)
		memset(out, 0, (size_t)amx_b_elems(ks, cols) * sizeof *out);
	if (b->rs == 1 && b->cs != 1) {
		/* op(B) = B^T: walk each column of op(B) (a row of B) along k; pairs are contiguous
		 */
		for (int64_t n = 0; n < cols; n++) {
			const uint16_t *src = b->p + (n0 + n) * b->cs + k0;
			for (int64_t k = 0; k < kc; k += 2) {
				uint16_t *o =
				    out + amx_b_at(ks, cols, n / 32, k / AMX_KSTEP, (n % 32) / 16) +
				    ((k % AMX_KSTEP) / 2) * 32 + (n % 16) * 2;
				memcpy(o, src + k, (k + 1 < kc ? 2 : 1) * sizeof *o);
			}
		}
		return;
	}
	for (int64_t k = 0; k < kc; k += 2) {
		int64_t s = k / AMX_KSTEP, p = (k % AMX_KSTEP) / 2;
		const uint16_t *r0 = b->p + (k0 + k) * b->rs + n0 * b->cs, *r1 = r0 + b->rs;
		int pair = k + 1 < kc;
		for (int64_t n = 0; n < cols; n += 16) {
			int64_t w = blind_min(16, cols - n);
			uint16_t *o = out + amx_b_at(ks, cols, n / 32, s, (n % 32) / 16) + p * 32;
			if (b->cs == 1 && pair) {
				/* rows k, k+1 contiguous in n: interleave them */
				for (int64_t c = 0; c < w; c++) {
					o[2 * c] = r0[n + c];
					o[2 * c + 1] = r1[n + c];
				}
			} else {
				for (int64_t c = 0; c < w; c++) {
					o[2 * c] = r0[(n + c) * b->cs];
					if (pair)
						o[2 * c + 1] = r1[(n + c) * b->cs];
				}
			}
		}
	}
}

/* The packers' signatures (the _ref ones above; gemm_amx.c has the AVX-512 ones). */
typedef void (*amx_pack_a_fn)(const blind_mat *a, int64_t m0, int64_t rows, int64_t k0, int64_t kc,
                              int64_t ks, uint16_t *restrict out);
typedef void (*amx_pack_b_fn)(const blind_mat *b, int64_t k0, int64_t kc, int64_t ks, int64_t n0,
                              int64_t cols, uint16_t *restrict out);

/* dst = the 32 x 32 block in src transposed, in the same four-tile layout: tile (j, i) of dst
 * is tile (i, j) of src transposed. */
typedef void (*amx_acc_transpose_fn)(const float *restrict src, float *restrict dst);

static inline void amx_acc_transpose_ref(const float *restrict src, float *restrict dst)
{
	for (int r = 0; r < 32; r++)
		for (int c = 0; c < 32; c++)
			dst[((c / 16) * 2 + r / 16) * 256 + (c % 16) * 16 + r % 16] =
			    src[((r / 16) * 2 + c / 16) * 256 + (r % 16) * 16 + c % 16];
}

/* Where the A tiles of a 32-row block are: tile h (rows 16h .. 16h + 15) of k step s starts at
 * p + s * step + h * half, its 16 rows ld elements apart.  The packed block is (ld 32, step
 * 1024, half 512); a full block of an op(A) whose rows are contiguous in k is op(A) in place
 * (ld = its row stride, step 32, half 16 ld). */
typedef struct amx_a_tiles {
	const uint16_t *p;
	int64_t ld, step, half;
} amx_a_tiles;

/* The C tiles a block needs: tile t = 2i + j (rows 16i.., columns 16j..) when bit t is set.  A
 * block of <= 16 rows needs tiles 0 and 1, one of <= 16 columns tiles 0 and 2. */
#define AMX_LIVE_ALL 0xfu
static inline unsigned amx_live(int64_t rows, int64_t cols)
{
	unsigned live = AMX_LIVE_ALL;
	if (rows <= 16)
		live &= 0x3u;
	if (cols <= 16)
		live &= 0x5u;
	return live;
}

/* The live tiles of acc (AMX_ACC_ELEMS fp32) = [acc +] the products of ks k steps of A (a) and
 * one 32-column block of packed B (bp); load 0 starts from zero.  Tiles not live are neither
 * read nor written: their A or B tiles are not loaded, their products not computed. */
typedef void (*amx_ukr_fn)(int64_t ks, const amx_a_tiles *a, const uint16_t *bp, float *acc,
                           int load, unsigned live);
/* C[0 .. rows) [0 .. cols) (rows, cols <= 32) = bf16(acc + beta C) (C not read if beta 0); the
 * acc32 stores keep the FP32 sums: C fp32 = acc + beta C. */
typedef void (*amx_store_fn)(const float *acc, int64_t rows, int64_t cols, float beta, void *C,
                             int64_t ldc);

/* ---- the model of tdpbf16ps ----------------------------------------------------------------
 * Intel SDM (TDPBF16PS, Operation): per row m of the destination, a temporary of 2 x 16 FP32
 * lanes starts at zero; for each k pair the even products accumulate into the even lanes and
 * the odd products into the odd lanes, each an FP32 FMA with DAZ = FTZ = 1 and round to nearest
 * even, MXCSR neither read nor written; then dst[m][n] += temp[2n] + temp[2n+1] (again DAZ/FTZ,
 * RNE).  (The intrinsics guide shows instead both products added to dst in turn; the two orders
 * agree whenever the sums are exact, which is what the tests compare bit for bit.)  A product of
 * two bf16 values is exact in FP32, except that it may underflow. */
static inline float amx_daz(float x)
{
	return fabsf(x) < 0x1p-126f ? copysignf(0.0f, x) : x;
}

static inline float amx_fma_daz_ftz(float a, float b, float c)
{
	return amx_daz(fmaf(amx_daz(a), amx_daz(b), amx_daz(c)));
}

/* c: one FP32 tile (16 x 16) += a (16 rows x 32 bf16) . b (16 k pairs x 16 columns x 2). */
static inline void amx_tile_dp_bf16_ref(float *restrict c, const uint16_t *restrict a,
                                        const uint16_t *restrict b)
{
	for (int m = 0; m < 16; m++) {
		float temp[32] = {0};
		for (int k = 0; k < 16; k++)
			for (int n = 0; n < 16; n++) {
				temp[2 * n] = amx_fma_daz_ftz(blind_bf16_to_f32(a[m * 32 + 2 * k]),
				                              blind_bf16_to_f32(b[k * 32 + 2 * n]),
				                              temp[2 * n]);
				temp[2 * n + 1] = amx_fma_daz_ftz(
				    blind_bf16_to_f32(a[m * 32 + 2 * k + 1]),
				    blind_bf16_to_f32(b[k * 32 + 2 * n + 1]), temp[2 * n + 1]);
			}
		for (int n = 0; n < 16; n++) {
			float t = amx_daz(temp[2 * n] + temp[2 * n + 1]);
			c[m * 16 + n] = amx_daz(amx_daz(c[m * 16 + n]) + t);
		}
	}
}

/* The model of the real micro-kernel: the same tiles, addresses and order of tile operations. */
static inline void amx_ukr_ref(int64_t ks, const amx_a_tiles *a, const uint16_t *bp, float *acc,
                               int load, unsigned live)
{
	float t[4][256];
	for (int i = 0; i < 4; i++)
		if (load)
			memcpy(t[i], acc + i * 256, sizeof t[i]);
		else
			memset(t[i], 0, sizeof t[i]);
	for (int64_t s = 0; s < ks; s++) {
		uint16_t at[2][AMX_TILE_ELEMS]; /* the tile loads of A: 16 rows of 64 bytes */
		for (int h = 0; h < 2; h++)
			if (live & (3u << 2 * h))
				for (int r = 0; r < 16; r++)
					memcpy(at[h] + r * 32, a->p + s * a->step + h * a->half + r * a->ld,
					       64);
		/* a block of <= 16 columns has one B tile per k step (amx_b_tiles) */
		const uint16_t *b0 = bp + s * (live & 0x2u ? 2 : 1) * AMX_TILE_ELEMS;
		const uint16_t *b1 = b0 + AMX_TILE_ELEMS;
		for (int i = 0; i < 4; i++)
			if (live & (1u << i))
				amx_tile_dp_bf16_ref(t[i], at[i / 2], i % 2 ? b1 : b0);
	}
	for (int i = 0; i < 4; i++)
		if (live & (1u << i))
			memcpy(acc + i * 256, t[i], sizeof t[i]);
}

/* The store epilogue's semantics: v = acc (+ beta * C in FP32: a product, then a sum), rounded
 * once by blind_f32_to_bf16.  The real store (amp_amx_store_avx512) gives the same bits. */
static inline void amx_store_ref(const float *acc, int64_t rows, int64_t cols, float beta,
                                 void *Cv, int64_t ldc)
{
	uint16_t *C = Cv;
	for (int64_t r = 0; r < rows; r++)
		for (int64_t c = 0; c < cols; c++) {
			float v = acc[((r / 16) * 2 + c / 16) * 256 + (r % 16) * 16 + c % 16];
			if (beta != 0.0f)
				v = v + beta * blind_bf16_to_f32(C[r * ldc + c]);
			C[r * ldc + c] = blind_f32_to_bf16(v);
		}
}

/* The acc32 store's semantics: C fp32 = acc (+ beta * C: a product, then a sum). */
static inline void amx_store_f32_ref(const float *acc, int64_t rows, int64_t cols, float beta,
                                     void *Cv, int64_t ldc)
{
	float *C = Cv;
	for (int64_t r = 0; r < rows; r++)
		for (int64_t c = 0; c < cols; c++) {
			float v = acc[((r / 16) * 2 + c / 16) * 256 + (r % 16) * 16 + c % 16];
			C[r * ldc + c] = beta != 0.0f ? v + beta * C[r * ldc + c] : v;
		}
}

/* Unpacked fallback when the workspace cannot be allocated: FP32 sums in k order, the same
 * epilogue semantics (c_f32: C fp32, the sums stored).  Slow; needs no memory. */
static inline void amx_gemm_unpacked(const blind_mat *a, const blind_mat *b, int64_t M, int64_t N,
                                     int64_t K, float beta, void *Cv, int64_t ldc, int c_f32)
{
	uint16_t *C = Cv;
	float *Cf = Cv;
	for (int64_t i = 0; i < M; i++)
		for (int64_t j = 0; j < N; j++) {
			float s = 0.0f;
			for (int64_t k = 0; k < K; k++)
				s = fmaf(blind_bf16_to_f32(a->p[i * a->rs + k * a->cs]),
				         blind_bf16_to_f32(b->p[k * b->rs + j * b->cs]), s);
			if (c_f32) {
				Cf[i * ldc + j] = beta != 0.0f ? s + beta * Cf[i * ldc + j] : s;
				continue;
			}
			if (beta != 0.0f)
				s = s + beta * blind_bf16_to_f32(C[i * ldc + j]);
			C[i * ldc + j] = blind_f32_to_bf16(s);
		}
}

/* Rows of the next A block, spread over the nblk micro-kernel calls of this one (call nb of
 * nblk fetches its share), into L2 before they are packed: the packer's loads otherwise wait on
 * memory (op(A) with rows contiguous in k only; the transposing packer reads whole lines).  Not
 * for a single column block (N <= 32): all the prefetches would go out at once before its one
 * call, and on the head's forward (a 64 KB A block already in L2) they took a sixth of the
 * time; the head's forward and the conv weight gradient ran 1.2x faster without them. */
static inline void amx_prefetch_next_a(const blind_mat *a, int64_t m_next, int64_t rows,
                                       int64_t k0, int64_t kc, int64_t nb, int64_t nblk)
{
	if (a->cs != 1 || rows == 0 || nblk == 1)
		return;
	int64_t per = (rows + nblk - 1) / nblk;
	for (int64_t r = nb * per; r < (nb + 1) * per && r < rows; r++) {
		const char *src = (const char *)(a->p + (m_next + r) * a->rs + k0);
		for (int64_t off = 0; off < kc * (int64_t)sizeof(uint16_t); off += 64)
			__builtin_prefetch(src + off, 0, 2); /* to L2: into L1 they held up B's loads */
	}
}

/* What the steps of amx_gemm_drive share: the functions, op(A) (after the swap), C. */
typedef struct amx_nest {
	amx_pack_a_fn pack_a;
	amx_pack_b_fn pack_b; /* set: B packed block by block just before its use (bpk: one group) */
	const blind_mat *b;
	amx_ukr_fn ukr;
	amx_store_fn store;
	amx_acc_transpose_fn tr;
	blind_mat a;
	int swap;
	float beta;
	void *C;
	int64_t ldc;
	size_t csize;
	uint16_t *ap;  /* the packed A block */
	uint16_t *bp1; /* one group of B blocks (pack_b set) */
	float *acc_t;  /* a transposed block of sums */
} amx_nest;

/* One step of the loop nests: rows [r0, r0 + rows) of op(A) (rows <= 32) times one k panel
 * [k0, k0 + kc) of B packed in bpk, for its nblk 32-column blocks (ncw columns from n0).  Block
 * nb's sums are in blks + nb * bstride (bstride 0: one block in L1, the panel being the only
 * one), loaded unless first; the last panel stores them.  The A block of the next step (rows
 * nrows from nr0, k from nk0, nkc of them) is prefetched meanwhile. */
__attribute__((always_inline)) static inline void
amx_row_step(const amx_nest *j, int64_t r0, int64_t rows, int64_t k0, int64_t kc, int first,
             int last, const uint16_t *bpk, int64_t n0, int64_t ncw, float *blks, int64_t bstride,
             int64_t nr0, int64_t nrows, int64_t nk0, int64_t nkc)
{
	const blind_mat *a = &j->a;
	int64_t ks = (kc + AMX_KSTEP - 1) / AMX_KSTEP, nblk = (ncw + 31) / 32;
	/* a block that meets one B block is read in place, not copied first: nothing would
	 * reuse the copy */
	amx_a_tiles at = {j->ap, 32, 2 * AMX_TILE_ELEMS, AMX_TILE_ELEMS};
	if (nblk == 1 && a->cs == 1 && rows == 32 && kc % AMX_KSTEP == 0)
		at = (amx_a_tiles){a->p + r0 * a->rs + k0, a->rs, AMX_KSTEP, 16 * a->rs};
	else
		j->pack_a(a, r0, rows, k0, kc, ks, j->ap);
	for (int64_t nb = 0; nb < nblk; nb++) {
		int64_t cols = blind_min(32, ncw - nb * 32), c0 = n0 + nb * 32;
		float *blk = blks + nb * bstride;
		const uint16_t *bblk = bpk + nb * ks * 2 * AMX_TILE_ELEMS;
		if (j->pack_b) {
			int64_t g = nb % AMX_PACK_B_GROUP;
			if (g == 0)
				j->pack_b(j->b, k0, kc, ks, c0,
				          blind_min(32 * AMX_PACK_B_GROUP, ncw - nb * 32), j->bp1);
			bblk = j->bp1 + g * ks * 2 * AMX_TILE_ELEMS;
		}
		amx_prefetch_next_a(a, nr0, nrows, nk0, nkc, nb, nblk);
		j->ukr(ks, &at, bblk, blk, !first, amx_live(rows, cols));
		if (!last)
			continue;
		if (!j->swap) {
			j->store(blk, rows, cols, j->beta,
			         (char *)j->C + (size_t)(r0 * j->ldc + c0) * j->csize, j->ldc);
			continue;
		}
		j->tr(blk, j->acc_t);
		j->store(j->acc_t, cols, rows, j->beta,
		         (char *)j->C + (size_t)(c0 * j->ldc + r0) * j->csize, j->ldc);
	}
}

/* The loop nest of amp_gemm_bf16_amx (see its contract), on the given micro-kernel and store.
 * Inlined into the real kernel with its functions, called by the tests with the model's.
 * c_f32: C is fp32 and the store an acc32 one (st NULL).
 *
 * A x B^T with fewer rows than columns (Linear's forward: x w^T, w the larger) is computed as
 * its transpose, C^T = B A^T: then the large operand is packed as A (row copies) instead of
 * through the 16 x 16 transposes of a B^T panel, the small one as B, and each 32 x 32 block of
 * sums is transposed back (tr) before its store.  Every element is the same dot product of
 * the same pairs in the same k order (tdpbf16ps's sums do not depend on which operand is A),
 * so the bits do not change.
 *
 * Two loop orders over the same steps.  While the FP32 sums of all rows of a B panel fit in
 * L2 (AMX_ACC_FIT), k panels go outside the row blocks: B is packed one k panel at a time and
 * A once.  Past that (1024^3: 4 MB of sums, written to L3 and read back for every k panel),
 * B is packed for all k at once, in AMX_B_ALLK bytes or fewer columns, and each row block runs
 * all its k panels before the next, its sums in L2: 10-30 % faster on 512^3 to 2048^3, A being
 * packed once per B panel instead of once. */
#define AMX_ACC_FIT (512 * 1024)  /* bytes of FP32 sums (MLP's 128 x 1024: 512 KB) */
#define AMX_B_ALLK  (1024 * 1024) /* bytes of B packed for all k (1024 x 512) */
__attribute__((always_inline)) static inline void
amx_gemm_drive(amx_pack_a_fn pack_a, amx_pack_b_fn pack_b, amx_ukr_fn ukr, amx_store_fn store,
               amx_acc_transpose_fn tr, blind_stats_fn stats, int trans_a, int trans_b, int64_t M,
               int64_t N, int64_t K, const uint16_t *A, int64_t lda, const uint16_t *B,
               int64_t ldb, float beta, void *C, int64_t ldc, int c_f32, amp_stats *st)
{
	size_t csize = c_f32 ? sizeof(float) : sizeof(uint16_t);
	blind_mat a = blind_op_a(trans_a, A, lda), b = blind_op_b(trans_b, B, ldb);
	if (st)
		amp_stats_init(st);
	int swap = !trans_a && trans_b && M < N;
	if (swap) {
		int64_t t = M;
		M = N;
		N = t;
	}
	/* Where the k panels start does not change the bits: a panel's FP32 sums leave the tiles
	 * and come back exactly, and only the last k step of all is ever zero-padded. */
	int64_t kpanel = N <= 32 ? AMX_KC_ONE : AMX_KC;
	int64_t npanel = K > 0 ? (K + kpanel - 1) / kpanel : 1;
	int64_t kcmax = blind_min(kpanel, (K + AMX_KSTEP - 1) / AMX_KSTEP * AMX_KSTEP);
	int64_t ncmax = blind_min(AMX_NC, (N + 31) / 32 * 32);
	int64_t mcmax = blind_min(AMX_MC, (M + 31) / 32 * 32);
	int rowwise = npanel > 1 && mcmax * ncmax * (int64_t)sizeof(float) > AMX_ACC_FIT;
	/* rowwise: the columns of a B panel packed for all k */
	int64_t ncr = AMX_B_ALLK / (npanel * kpanel * (int64_t)sizeof(uint16_t)) / 32 * 32;
	ncr = blind_min(ncmax, ncr < 32 ? 32 : ncr);
	/* workspace sizes in floats: bf16 panels take half a float per element */
	size_t bsize = rowwise ? (size_t)(npanel * kpanel * ncr) : (size_t)(kcmax * ncmax);
	size_t accsize = rowwise       ? (size_t)(ncr * 32)
	                 : npanel == 1 ? (size_t)AMX_ACC_ELEMS /* the sums go through acc_l1 */
	                               : (size_t)(mcmax * ncmax);
	uint16_t *ap =
	    (uint16_t *)amp_kernels_workspace(AMP_WS_PACK_A, (size_t)(32 * kcmax / 2 + 16));
	uint16_t *bp = (uint16_t *)amp_kernels_workspace(AMP_WS_PACK_B, bsize / 2 + 16);
	float *acc = amp_kernels_workspace(AMP_WS_ACC, accsize);
	_Alignas(64) float acc_t[AMX_ACC_ELEMS], acc_l1[AMX_ACC_ELEMS];
	memset(acc_l1, 0, sizeof acc_l1); /* tiles a narrow block leaves out are read, not used, by tr */
	if (ap == NULL || bp == NULL || acc == NULL) {
		int64_t m = swap ? N : M, n = swap ? M : N;
		amx_gemm_unpacked(&a, &b, m, n, K, beta, C, ldc, c_f32);
		if (st)
			blind_stats_rows(stats, C, ldc, 0, m, 0, n, st);
		return;
	}
	if (swap) { /* op(A') = B (N, K) as stored, op(B') = A^T */
		a = blind_op_a(0, B, ldb);
		b = blind_op_b(1, A, lda);
	}
	/* One row block (M <= 32): each B block is used once, so it is packed just before its
	 * use into a buffer that stays in L1, not written whole to L2 and read back. */
	int bfused = !rowwise && M <= 32 && N > 32;
	const amx_nest j = {pack_a, bfused ? pack_b : NULL, &b, ukr, store, tr, a, swap, beta,
	                    C, ldc, csize, ap, bp, acc_t};
	if (rowwise) {
		for (int64_t n0 = 0; n0 < N; n0 += ncr) {
			int64_t ncw = blind_min(ncr, N - n0), nblk = (ncw + 31) / 32;
			int64_t pstride = kpanel / AMX_KSTEP * 2 * AMX_TILE_ELEMS * nblk;
			for (int64_t p = 0; p < npanel; p++) {
				int64_t k0 = p * kpanel, kc = blind_min(kpanel, K - k0);
				pack_b(&b, k0, kc, (kc + AMX_KSTEP - 1) / AMX_KSTEP, n0, ncw,
				       bp + p * pstride);
			}
			for (int64_t r0 = 0; r0 < M; r0 += 32, amp_kernels_poll())
				for (int64_t p = 0; p < npanel; p++) {
					int64_t k0 = p * kpanel, more = p + 1 < npanel;
					int64_t nr0 = more ? r0 : r0 + 32, nk0 = more ? k0 + kpanel : 0;
					amx_row_step(&j, r0, blind_min(32, M - r0), k0,
					             blind_min(kpanel, K - k0), p == 0, !more,
					             bp + p * pstride, n0, ncw, acc, AMX_ACC_ELEMS, nr0,
					             nr0 < M ? blind_min(32, M - nr0) : 0, nk0,
					             blind_min(kpanel, K - nk0));
				}
		}
	} else {
		for (int64_t n0 = 0; n0 < N; n0 += AMX_NC) {
			int64_t ncw = blind_min(AMX_NC, N - n0), nblk = (ncw + 31) / 32;
			for (int64_t m0 = 0; m0 < M; m0 += AMX_MC) {
				int64_t mcw = blind_min(AMX_MC, M - m0);
				for (int64_t p = 0; p < npanel; p++) {
					int64_t k0 = p * kpanel, kc = blind_min(kpanel, K - k0);
					if (!bfused)
						pack_b(&b, k0, kc, (kc + AMX_KSTEP - 1) / AMX_KSTEP,
						       n0, ncw, bp);
					for (int64_t r = 0; r < mcw; r += 32, amp_kernels_poll()) {
						int64_t nr = r + 32 < mcw ? 32 : 0;
						amx_row_step(&j, m0 + r, blind_min(32, mcw - r), k0, kc, p == 0,
						             p == npanel - 1, bp, n0, ncw,
						             npanel == 1 ? acc_l1 : acc + r / 32 * nblk * AMX_ACC_ELEMS,
						             npanel == 1 ? 0 : AMX_ACC_ELEMS, m0 + r + 32, nr, k0,
						             kc);
					}
				}
			}
		}
	}
	/* the statistics of the final C in one pass over it (in L2 or L3 by now), not per block:
	 * a block of a swapped C is 32 columns, a region of short rows; and another pass between
	 * the steps pushed the operands out of L2 (measured: the profiled step slower) */
	if (st)
		blind_stats_rows(stats, C, ldc, 0, swap ? N : M, 0, swap ? M : N, st);
}

/* ==== native FP16 ==============================================================================
 * Register tile: 8 rows x 64 columns of C as 16 zmm of 32 fp16 partial sums; per k step two
 * 32-half loads of packed B and 8 broadcasts of A ({1to32} memory operands of vfmadd231ph),
 * from the packed A or, for full tiles of an op(A) whose rows are contiguous in k, from op(A)
 * in place.  Tiles of <= 32 columns use one zmm of B and go in pairs (16 rows), so that 16
 * accumulators cover the FMA latency.  The blocks of FP16N_KB steps go in pairs: the first
 * block's sums wait in memory, the second block starts from zero and adds them (one vaddph a
 * zmm), and the pair's sums are converted to FP32 and added to an FP32 accumulator (8 x 64
 * floats per tile, kept in the workspace across k panels); the first pair of a tile stores its
 * sums instead.  Loops: N by FP16N_NC, M by FP16N_MC, K by FP16N_KC (B packed once per panel
 * and row block), all A micro-panels of the row block, then per B micro-panel (in L1) every A
 * micro-panel (from L2).  On Sapphire Rapids the promotion's 2 conversions (2 port-0/5 uops
 * each) and 2 adds, with the pair's add, come to 7 uops per 48 FMAs of a zmm on the FMA ports
 * (a cap of 87 % of the FMA peak); a promotion per block of 32, as before the pairs, was 6 per
 * 32 (84 %), and measured 4-8 % slower in bench_kernels on every shape class.
 *
 * Why blocks of FP16N_KB = 24 in pairs (u = 2^-11, the fp16 unit roundoff): the worst case of
 * an FP16 sum of b products is b u sum |a b| (1.2 % at b = 24), so the bound that matters is
 * statistical.  Each FMA rounding is about uniform in +-u |s_j| (RMS u/sqrt(3) |s_j|), and with
 * inputs in [-1,1] (products of RMS sigma = 1/3) the partial sums grow like sigma sqrt(j): a
 * block's error has RMS (u/sqrt(3)) sigma b/sqrt(2).  The blocks' errors add as a random walk
 * (the FP32 promotion adds 2^-24 per pair), so over K the RMS error is (u/sqrt(3)) sigma
 * sqrt(b K / 2) against |C| of RMS sigma sqrt(K): a norm-wise relative error of (u/sqrt(3))
 * sqrt(b/2), independent of K (no promotion: 1.3e-2 at K = 4096), plus the final fp16 rounding
 * (2.8e-4).  A pair adds one rounding of its sum, RMS (u/sqrt(3)) sigma sqrt(2b): sqrt(b/2)
 * becomes sqrt(b/2 + 1) — sqrt(13) at b = 24, against sqrt(16) for single blocks of 32 and
 * sqrt(17) for pairs of 32 (which failed the 2e-3 of an op test, MatMul 9x11x300: 2.14e-3).
 * Simulated over K = 48 .. 4080 ([-1,1) data, FMAs rounded as vfmadd231ph rounds): 7.6e-4 ..
 * 8.2e-4 norm-wise, 8.1e-4 .. 8.8e-4 in single blocks of 32.  The tests measure 8.4e-4
 * norm-wise for K up to 4096, max |C - R| / max |R| 1.3e-3 and max |C - R| / |R| 1.9e-3 on
 * positive data (2.1e-3 and 2.7e-3 in single blocks of 32). */
#define FP16N_KB        24
#define FP16N_GROUP     2 /* blocks per promotion */
#define FP16N_KP        (FP16N_GROUP * FP16N_KB) /* k steps per promotion */
#define FP16N_MR        8
#define FP16N_NR        64
#define FP16N_KC        240 /* k per panel, a multiple of FP16N_KP: a B micro-panel is 30 KB */
#define FP16N_NC        512 /* columns per B panel: 256 KB */
#define FP16N_DIRECT_B_ROWS 32 /* M up to which B is read in place (fp16n_gemm_drive) */
#define FP16N_MC        512 /* rows whose FP32 sums are kept across k panels (1 MB) */
#define FP16N_ACC_ELEMS (FP16N_MR * FP16N_NR)

/* out[k * 8 + r] = op(A)(m0 + r, k0 + k) for r < rows (<= 8), k < kc; zero past rows. */
static inline void fp16n_pack_a_ref(const blind_mat *a, int64_t m0, int64_t rows, int64_t k0,
                                    int64_t kc, uint16_t *restrict out)
{
	if (rows < FP16N_MR)
		memset(out, 0, (size_t)(kc * FP16N_MR) * sizeof *out);
	if (a->rs == 1) {
		for (int64_t k = 0; k < kc; k++)
			memcpy(out + k * FP16N_MR, a->p + (k0 + k) * a->cs + m0,
			       (size_t)rows * sizeof *out);
	} else {
		for (int64_t r = 0; r < rows; r++) {
			const uint16_t *src = a->p + (m0 + r) * a->rs + k0;
			for (int64_t k = 0; k < kc; k++)
				out[k * FP16N_MR + r] = src[k];
		}
	}
}

/* out[(q * kc + k) * 64 + c] = op(B)(k0 + k, n0 + 64q + c) for c < cols; zero past cols. */
static inline void fp16n_pack_b_ref(const blind_mat *b, int64_t k0, int64_t kc, int64_t n0,
                                    int64_t cols, uint16_t *restrict out)
{
	int64_t nq = (cols + FP16N_NR - 1) / FP16N_NR;
	if (cols % FP16N_NR)
		memset(out + (nq - 1) * kc * FP16N_NR, 0, (size_t)(kc * FP16N_NR) * sizeof *out);
	for (int64_t q = 0; q < nq; q++) {
		int64_t w = blind_min(FP16N_NR, cols - q * FP16N_NR);
		uint16_t *o = out + q * kc * FP16N_NR;
		if (b->cs == 1) {
			for (int64_t k = 0; k < kc; k++)
				memcpy(o + k * FP16N_NR,
				       b->p + (k0 + k) * b->rs + n0 + q * FP16N_NR,
				       (size_t)w * sizeof *o);
		} else {
			for (int64_t c = 0; c < w; c++) {
				const uint16_t *src = b->p + (n0 + q * FP16N_NR + c) * b->cs + k0;
				for (int64_t k = 0; k < kc; k++)
					o[k * FP16N_NR + c] = src[k];
			}
		}
	}
}

/* rows <= FP16N_MC: ceil(rows / 8) micro-panels one after another, micro-panel i (rows
 * m0 + 8i ..) at out + i * 8 * kc as fp16n_pack_a_ref packs it.  One call for the row block
 * lets the AVX-512 packer read each 64-byte line of an A^T once for four micro-panels. */
static inline void fp16n_pack_a_panels_ref(const blind_mat *a, int64_t m0, int64_t rows, int64_t k0,
                                           int64_t kc, uint16_t *restrict out)
{
	for (int64_t i = 0; i * FP16N_MR < rows; i++)
		fp16n_pack_a_ref(a, m0 + i * FP16N_MR, blind_min(FP16N_MR, rows - i * FP16N_MR), k0,
		                 kc, out + i * FP16N_MR * kc);
}

/* The packers' contracts (fp16n_pack_a_panels_ref / fp16n_pack_b_ref above): the real kernel
 * passes the AVX-512 ones below, the model the plain-C ones; both write the same bits. */
typedef void (*fp16n_pack_a_fn)(const blind_mat *a, int64_t m0, int64_t rows, int64_t k0,
                                int64_t kc, uint16_t *restrict out);
typedef void (*fp16n_pack_b_fn)(const blind_mat *b, int64_t k0, int64_t kc, int64_t n0,
                                int64_t cols, uint16_t *restrict out);

/* acc (8 x 64 fp32) = [acc +] A (8, kc) . bp (kc, 64), blocked as described above, A (r, k) at
 * ap[r * ars + k * aks]: the packed A (ars 1, aks 8) or, for full 8-row tiles of an op(A) whose
 * rows are contiguous in k, op(A) itself (ars its row stride, aks 1), which saves the transposing
 * pack (most of the time of thin GEMMs, N <= 64, where each A panel meets one or two tiles);
 * the values, hence the bits, are the same.  load 0: the first pair's FP32 sums are stored, not
 * added (so -0 stays -0).  Only columns < cols (<= 64) need be computed: the store reads no
 * others.  ap2, acc2: NULL, or a second tile on the same B with its A at ap2 (same strides),
 * computed as by a second call: the drive pairs tiles of <= 32 columns, whose 8 accumulators
 * alone cannot cover the FMA latency (4 cycles at 2 a cycle). */
typedef void (*fp16n_ukr_fn)(int64_t kc, const uint16_t *ap, const uint16_t *ap2, int64_t ars,
                             int64_t aks, const uint16_t *bp, int64_t bks, float *acc, float *acc2,
                             int load, int64_t cols);
/* Optional (the real kernel's; NULL in the model): for K <= FP16N_KP under beta 0 the one
 * group's fp16 sums are C itself, fp16(fp32(s)) being s for every s (NaNs from an FMA are
 * quiet, so their payloads survive too): the tile's sums stored straight to C[0 .. rows)
 * [0 .. cols), without the promotion and the store's conversions (most of the time at K = 10). */
typedef void (*fp16n_ukr_c_fn)(int64_t kc, const uint16_t *ap, int64_t ars, int64_t aks,
                               const uint16_t *bp, int64_t rows, int64_t cols, uint16_t *C,
                               int64_t ldc);
/* C[0 .. rows) [0 .. cols) (rows <= 8, cols <= 64) = fp16(acc + beta C) (C unread if beta 0);
 * the acc32 stores keep the FP32 sums: C fp32 = acc + beta C. */
typedef void (*fp16n_store_fn)(const float *acc, int64_t rows, int64_t cols, float beta, void *C,
                               int64_t ldc);

/* double -> fp16, round to nearest even (exact argument, one rounding). */
static inline uint16_t fp16n_from_double(double x)
{
	uint16_t sign = signbit(x) ? 0x8000u : 0u;
	double ax = fabs(x);
	if (isnan(x))
		return (uint16_t)(sign | 0x7e00u);
	if (ax >= 65520.0) /* halfway between 65504 and 2^16 rounds to even, i.e. up: Inf */
		return (uint16_t)(sign | 0x7c00u);
	if (ax == 0.0)
		return sign;
	int e;
	(void)frexp(ax, &e); /* ax = f 2^e, f in [0.5, 1) */
	int ue = e - 1;      /* ax in [2^ue, 2^(ue+1)) */
	if (ue < -14)
		ue = -14; /* subnormal: fixed quantum 2^-24 */
	double q = ldexp(ax, 10 - ue), r = floor(q), d = q - r;
	if (d > 0.5 || (d == 0.5 && fmod(r, 2.0) != 0.0))
		r += 1.0;
	/* r in [0, 2048]; for normals [1024, 2048] (2048 carries into the exponent), for
	 * subnormals [0, 1024] (1024 is the smallest normal): the encoding adds up either way */
	uint32_t bits = (uint32_t)(ue + 14) * 1024u + (uint32_t)r;
	return (uint16_t)(sign | bits);
}

/* The model of one vfmadd231ph lane: fp16(a * b + c) with one rounding (MXCSR at its default:
 * nearest even, no DAZ/FTZ; fp16 subnormals are handled).  a * b is exact in double; the sum is
 * rounded to odd in double (TwoSum, then the odd neighbour when inexact) so that the final
 * rounding to fp16 is the single correct one. */
static inline uint16_t fp16n_fma_ref(uint16_t a, uint16_t b, uint16_t c)
{
	double x = (double)amp_f16_to_f32(a) * (double)amp_f16_to_f32(b);
	double y = (double)amp_f16_to_f32(c);
	double s = x + y;
	if (isfinite(s)) {
		double bb = s - x, err = (x - (s - bb)) + (y - bb);
		uint64_t u;
		memcpy(&u, &s, sizeof u);
		if (err != 0.0 && (u & 1u) == 0)
			s = nextafter(s, err > 0.0 ? INFINITY : -INFINITY);
	}
	return fp16n_from_double(s);
}

/* The model of the real FP16 micro-kernel: the same blocks and order of operations (all 64
 * columns, whatever cols). */
static inline void fp16n_ukr_ref1(int64_t kc, const uint16_t *ap, int64_t ars, int64_t aks,
                                  const uint16_t *bp, int64_t bks, float *acc, int load)
{
	if (!load && kc == 0)
		memset(acc, 0, FP16N_ACC_ELEMS * sizeof *acc);
	uint16_t p[FP16N_ACC_ELEMS]; /* the sums of the group's earlier blocks */
	for (int64_t k0 = 0; k0 < kc; k0 += FP16N_KB) {
		uint16_t s[FP16N_ACC_ELEMS] = {0}; /* the block's sums */
		int g = (int)(k0 / FP16N_KB) % FP16N_GROUP; /* block g of its group */
		int64_t k1 = blind_min(kc, k0 + FP16N_KB);
		for (int64_t k = k0; k < k1; k++)
			for (int r = 0; r < FP16N_MR; r++)
				for (int c = 0; c < FP16N_NR; c++)
					s[r * FP16N_NR + c] = fp16n_fma_ref(ap[r * ars + k * aks],
					                                    bp[k * bks + c],
					                                    s[r * FP16N_NR + c]);
		if (g > 0) /* fp16(s + p), one rounding: s * 1 + p */
			for (int i = 0; i < FP16N_ACC_ELEMS; i++)
				s[i] = fp16n_fma_ref(s[i], 0x3c00u, p[i]);
		if (g < FP16N_GROUP - 1 && k1 < kc) {
			memcpy(p, s, sizeof p);
			continue;
		}
		int first = !load && k0 < FP16N_KP;
		for (int i = 0; i < FP16N_ACC_ELEMS; i++)
			acc[i] = first ? amp_f16_to_f32(s[i]) : acc[i] + amp_f16_to_f32(s[i]);
	}
}

static inline void fp16n_ukr_ref(int64_t kc, const uint16_t *ap, const uint16_t *ap2, int64_t ars,
                                 int64_t aks, const uint16_t *bp, int64_t bks, float *acc,
                                 float *acc2, int load, int64_t cols)
{
	(void)cols;
	fp16n_ukr_ref1(kc, ap, ars, aks, bp, bks, acc, load);
	if (ap2)
		fp16n_ukr_ref1(kc, ap2, ars, aks, bp, bks, acc2, load);
}

/* The store epilogue's semantics: v = acc (+ beta * C in FP32: a product, then a sum), rounded
 * once to fp16 (amp_f32_to_f16).  The real store (amp_fp16n_store_avx512) gives the same bits. */
static inline void fp16n_store_ref(const float *acc, int64_t rows, int64_t cols, float beta,
                                   void *Cv, int64_t ldc)
{
	uint16_t *C = Cv;
	for (int64_t r = 0; r < rows; r++)
		for (int64_t c = 0; c < cols; c++) {
			float v = acc[r * FP16N_NR + c];
			if (beta != 0.0f)
				v = v + beta * amp_f16_to_f32(C[r * ldc + c]);
			C[r * ldc + c] = amp_f32_to_f16(v);
		}
}

/* The acc32 store's semantics: C fp32 = acc (+ beta * C: a product, then a sum), the value the
 * fp16 store rounds when C holds the same start. */
static inline void fp16n_store_f32_ref(const float *acc, int64_t rows, int64_t cols, float beta,
                                       void *Cv, int64_t ldc)
{
	float *C = Cv;
	for (int64_t r = 0; r < rows; r++)
		for (int64_t c = 0; c < cols; c++) {
			float v = acc[r * FP16N_NR + c];
			if (beta != 0.0f) {
				float p = beta * C[r * ldc + c];
				v = v + p;
			}
			C[r * ldc + c] = v;
		}
}

/* Unpacked fallback without workspace: FP32 sums of exact products, the same epilogue (c_f32:
 * C fp32, the sums stored). */
static inline void fp16n_gemm_unpacked(const blind_mat *a, const blind_mat *b, int64_t M, int64_t N,
                                       int64_t K, float beta, void *Cv, int64_t ldc, int c_f32)
{
	uint16_t *C = Cv;
	float *Cf = Cv;
	for (int64_t i = 0; i < M; i++)
		for (int64_t j = 0; j < N; j++) {
			float s = 0.0f;
			for (int64_t k = 0; k < K; k++)
				s = fmaf(amp_f16_to_f32(a->p[i * a->rs + k * a->cs]),
				         amp_f16_to_f32(b->p[k * b->rs + j * b->cs]), s);
			if (c_f32) {
				if (beta != 0.0f) {
					float p = beta * Cf[i * ldc + j];
					s = s + p;
				}
				Cf[i * ldc + j] = s;
				continue;
			}
			if (beta != 0.0f)
				s = s + beta * amp_f16_to_f32(C[i * ldc + j]);
			C[i * ldc + j] = amp_f32_to_f16(s);
		}
}

/* ---- narrow x w^T: dot products along k ----------------------------------------------------
 * op(A) = A with rows contiguous in k, op(B) = B^T (B's rows contiguous in k) and few columns (a
 * classifier's 10 outputs): the register tile of the loop nest above would hold N of its 64
 * columns, and the transposed problem packs A^T.  Each element is instead a dot product of two
 * contiguous rows, 32 k at a time: lane l of step s holds k = 32 s + l (zero past K).  Each lane
 * sums its products as a column of the tile above sums its k: FP16 FMAs over blocks of
 * FP16N_KB steps, the blocks in pairs, each pair's sum promoted to an FP32 accumulator (stored
 * by the first pair, added by the others); then the 32 FP32 lanes are added by halves, l + 16,
 * l + 8, l + 4, l + 2, l + 1, and C is stored as the loop nest's stores do (one rounding of the
 * sum [+ beta C]).  A lane sums K / 32 products, not K: the promotions come 32 times less often
 * per element, and the error is the same model's (above) or smaller.  The order depends on K
 * only, and on the GEMM taking this path (fp16n_dot_fits: the transposes, N and K, never M), so
 * row ranges of C computed apart have the bits of the whole. */
#define FP16N_DOT_N    24  /* x w^T runs as dot products with at most this many columns */
#define FP16N_DOT_KMIN 512 /* and at least this K */

/* 1 if the GEMM runs as dot products: op(A) = A, op(B) = B^T, N <= FP16N_DOT_N, K >=
 * FP16N_DOT_KMIN.  Measured against the loop nest on 128 x N x K, rows 64-byte aligned (Intel
 * class, GFLOP/s): N = 10: K = 1024 288 against 91, K = 512 216 against 90, K = 256 136
 * against 86, K = 128 84 against 88; N = 16: K = 1024 226 against 141, K = 512 176 against
 * 143, K = 256 118 against 137; N = 20, 24, 32 (K = 1024): 286, 265, 248 against 173, 211, 271
 * (each element's promotions and its sum of 32 lanes weigh more as K shrinks). */
static inline int fp16n_dot_fits(int trans_a, int trans_b, int64_t N, int64_t K)
{
	return !trans_a && trans_b && N <= FP16N_DOT_N && K >= FP16N_DOT_KMIN;
}

/* C (M, N) = A (M, K) . B (N, K)^T [+ beta C], as above; c_f32: C fp32 (the sums stored). */
typedef void (*fp16n_dot_fn)(int64_t M, int64_t N, int64_t K, const uint16_t *A, int64_t lda,
                             const uint16_t *B, int64_t ldb, float beta, void *C, int64_t ldc,
                             int c_f32);

/* The 32 lanes' FP32 sums f added by halves (f is overwritten): the dot product. */
static inline float fp16n_dot_lanes(float *f)
{
	for (int w = 16; w >= 1; w /= 2)
		for (int l = 0; l < w; l++)
			f[l] = f[l] + f[l + w];
	return f[0];
}

/* C[i] = v [+ beta C[i]] as the loop nest's stores write it: their model on a 1 x 1 tile. */
static inline void fp16n_dot_put(float v, float beta, void *C, int64_t i, int c_f32)
{
	if (c_f32)
		fp16n_store_f32_ref(&v, 1, 1, beta, (float *)C + i, 1);
	else
		fp16n_store_ref(&v, 1, 1, beta, (uint16_t *)C + i, 1);
}

/* The model of the dot products (fp16n_fma_ref for each lane's FMAs and the pairs' adds). */
static inline void fp16n_dot_ref(int64_t M, int64_t N, int64_t K, const uint16_t *A, int64_t lda,
                                 const uint16_t *B, int64_t ldb, float beta, void *C, int64_t ldc,
                                 int c_f32)
{
	int64_t steps = (K + 31) / 32;
	for (int64_t i = 0; i < M; i++)
		for (int64_t j = 0; j < N; j++) {
			float f[32] = {0};
			uint16_t p[32]; /* the pair's first block */
			for (int64_t s0 = 0; s0 < steps; s0 += FP16N_KB) {
				uint16_t s[32] = {0};
				int g = (int)(s0 / FP16N_KB) % FP16N_GROUP;
				int64_t s1 = blind_min(steps, s0 + FP16N_KB);
				for (int64_t t = s0; t < s1; t++)
					for (int l = 0; l < 32; l++) {
						int64_t k = 32 * t + l;
						uint16_t a = k < K ? A[i * lda + k] : 0;
						uint16_t b = k < K ? B[j * ldb + k] : 0;
						s[l] = fp16n_fma_ref(a, b, s[l]);
					}
				if (g > 0)
					for (int l = 0; l < 32; l++)
						s[l] = fp16n_fma_ref(s[l], 0x3c00u, p[l]);
				if (g < FP16N_GROUP - 1 && s1 < steps) {
					memcpy(p, s, sizeof p);
					continue;
				}
				for (int l = 0; l < 32; l++)
					f[l] = s0 < FP16N_KP ? amp_f16_to_f32(s[l])
					                     : f[l] + amp_f16_to_f32(s[l]);
			}
			fp16n_dot_put(fp16n_dot_lanes(f), beta, C, i * ldc + j, c_f32);
		}
}

/* The loop nest of amp_gemm_f16_avx512fp16, on the given packers, micro-kernel and store.
 * c_f32: C is fp32 and the store an acc32 one (st NULL).  dot: NULL (never), or the dot
 * products that the GEMMs fp16n_dot_fits takes run on (only when ct is 0: callers do not
 * transpose those).  ct: the problem is the transpose of the caller's, C^T = op(B)^T op(A)^T:
 * element (i, j) of this C goes to C[j * ldc + i], through a store that writes its tile so (st
 * NULL, ukr_c NULL; with c_f32 an acc32 one). */
__attribute__((always_inline)) static inline void
fp16n_gemm_drive(fp16n_pack_a_fn pack_a, fp16n_pack_b_fn pack_b, fp16n_ukr_fn ukr,
                 fp16n_ukr_c_fn ukr_c, fp16n_dot_fn dot, fp16n_store_fn store, int trans_a,
                 int trans_b, int64_t M, int64_t N, int64_t K, const uint16_t *A, int64_t lda,
                 const uint16_t *B, int64_t ldb, float beta, void *C, int64_t ldc, int c_f32,
                 int ct, amp_stats *st)
{
	size_t csize = c_f32 ? sizeof(float) : sizeof(uint16_t);
	blind_mat a = blind_op_a(trans_a, A, lda), b = blind_op_b(trans_b, B, ldb);
	if (st)
		amp_stats_init(st);
	if (dot && !ct && fp16n_dot_fits(trans_a, trans_b, N, K)) {
		dot(M, N, K, A, lda, B, ldb, beta, C, ldc, c_f32);
		if (st)
			blind_stats_rows(amp_stats_f16, C, ldc, 0, M, 0, N, st);
		return;
	}
	int64_t kcmax = blind_min(FP16N_KC, K);
	int64_t ncmax = blind_min(FP16N_NC, (N + FP16N_NR - 1) / FP16N_NR * FP16N_NR);
	int64_t mcmax = blind_min(FP16N_MC, (M + FP16N_MR - 1) / FP16N_MR * FP16N_MR);
	uint16_t *ap =
	    (uint16_t *)amp_kernels_workspace(AMP_WS_PACK_A, (size_t)(mcmax * kcmax / 2 + 16));
	uint16_t *bp =
	    (uint16_t *)amp_kernels_workspace(AMP_WS_PACK_B, (size_t)(kcmax * ncmax / 2 + 16));
	/* k panels start at multiples of FP16N_KC, itself a multiple of FP16N_KP: the promotion
	 * points are the multiples of FP16N_KP whatever the panel.  With one k panel each tile's
	 * FP32 sums are stored by the panel that made them, so two tiles' worth in L1 serve every
	 * tile, not a workspace slot per tile (up to 1 MB streamed through L2): 2-3 % on the mlp
	 * dW shapes, K = 128 */
	int64_t npanel = K > 0 ? (K + FP16N_KC - 1) / FP16N_KC : 1;
	_Alignas(64) float acc_l1[2 * FP16N_ACC_ELEMS];
	float *acc =
	    npanel == 1 ? acc_l1 : amp_kernels_workspace(AMP_WS_ACC, (size_t)(mcmax * ncmax));
	if (ap == NULL || bp == NULL || acc == NULL) {
		if (ct) {
			/* the caller's problem: op(A)(m, k) = b(k, m), op(B)(k, n) = a(n, k) */
			blind_mat at = {b.p, b.cs, b.rs}, bt = {a.p, a.cs, a.rs};
			fp16n_gemm_unpacked(&at, &bt, N, M, K, beta, C, ldc, c_f32);
			return;
		}
		fp16n_gemm_unpacked(&a, &b, M, N, K, beta, C, ldc, c_f32);
		if (st)
			blind_stats_rows(amp_stats_f16, C, ldc, 0, M, 0, N, st);
		return;
	}
	int sums_are_c = ukr_c != NULL && K > 0 && K <= FP16N_KP && beta == 0.0f && !c_f32;
	/* Thin M (a conv layer's 32 filters) with rows of op(B) contiguous in n: the full
	 * 64-column tiles read B in place (its k stride b.rs), the same values as the packed copy,
	 * so the same bits; only a narrower last tile is packed (a copy that pads with zeros).
	 * Each B element meets M / 8 tiles: at M <= 32 the copy cost a quarter of the products'
	 * time.  Not for larger M: a B panel read in place at a power-of-two stride falls into a
	 * few L1 sets, and the many tiles that stream past it would find it evicted. */
	int direct_b = b.cs == 1 && !sums_are_c && M <= FP16N_DIRECT_B_ROWS;
	/* Rows of op(A) contiguous in k are read in place by full tiles, unless their stride is a
	 * multiple of 2 KB and each A micro-panel meets at least 4 B micro-panels: the 8 rows of a
	 * tile then fall into 2 L1 sets' worth of lines (and every tile of the row block into the
	 * same ones), evicting the B micro-panel there, and the copy is cheaper (1024^3: +2.7 % in
	 * 6 of 6 alternating runs; 128x1024x1024 nn unchanged; the thin and transposed-problem
	 * shapes, whose panels meet one or two B micro-panels, 15-40 % slower with the copy). */
	int direct_a = a.cs == 1 && (a.rs % 1024 != 0 || N < 4 * FP16N_NR);
	for (int64_t n0 = 0; n0 < N; n0 += FP16N_NC) {
		int64_t ncw = blind_min(FP16N_NC, N - n0), nq = (ncw + FP16N_NR - 1) / FP16N_NR;
		for (int64_t m0 = 0; m0 < M; m0 += FP16N_MC) {
			int64_t mcw = blind_min(FP16N_MC, M - m0);
			int64_t mq = (mcw + FP16N_MR - 1) / FP16N_MR;
			for (int64_t p = 0; p < npanel; p++) {
				int64_t k0 = p * FP16N_KC, kc = blind_min(FP16N_KC, K - k0);
				int last = p == npanel - 1;
				if (!direct_b)
					pack_b(&b, k0, kc, n0, ncw, bp);
				else if (ncw % FP16N_NR)
					pack_b(&b, k0, kc, n0 + (nq - 1) * FP16N_NR, ncw % FP16N_NR,
					       bp + (nq - 1) * kc * FP16N_NR);
				/* every A micro-panel of the row block first (in place where the
				 * rows are contiguous in k), then each B micro-panel stays in L1
				 * while all of them stream past it: 16 bytes of A per k step come
				 * from L2 instead of 128 bytes of B */
				if (!direct_a)
					pack_a(&a, m0, mcw, k0, kc, ap);
				else if (mcw % FP16N_MR)
					pack_a(&a, m0 + (mq - 1) * FP16N_MR, mcw % FP16N_MR, k0, kc,
					       ap + (mq - 1) * FP16N_MR * kc);
				for (int64_t q = 0; q < nq; q++, amp_kernels_poll()) {
					int64_t cols = blind_min(FP16N_NR, ncw - q * FP16N_NR);
					for (int64_t mi = 0; mi < mq;) {
						/* tile mi, and mi + 1 with it when narrow and read
						 * alike */
						int64_t rows =
						    blind_min(FP16N_MR, mcw - mi * FP16N_MR);
						int64_t rows2 =
						    mi + 1 < mq
						        ? blind_min(FP16N_MR,
						                    mcw - (mi + 1) * FP16N_MR)
						        : 0;
						int direct = rows == FP16N_MR && direct_a;
						int pair =
						    cols <= 32 && rows2 > 0 &&
						    direct == (rows2 == FP16N_MR && direct_a);
						const uint16_t *at = ap + mi * FP16N_MR * kc;
						int64_t ars = 1, aks = FP16N_MR;
						if (direct) {
							at = a.p + (m0 + mi * FP16N_MR) * a.rs + k0;
							ars = a.rs, aks = 1;
						}
						if (sums_are_c) {
							ukr_c(kc, at, ars, aks,
							      bp + q * kc * FP16N_NR, rows, cols,
							      (uint16_t *)C +
							          (m0 + mi * FP16N_MR) * ldc + n0 +
							          q * FP16N_NR,
							      ldc);
							mi++;
							continue;
						}
						const uint16_t *at2 = !pair ? NULL
						                      : direct
						                          ? at + FP16N_MR * a.rs
						                          : at + FP16N_MR * kc;
						float *blk =
						    npanel == 1
						        ? acc
						        : acc + (q * mq + mi) * FP16N_ACC_ELEMS;
						float *blk2 = pair ? blk + FP16N_ACC_ELEMS : NULL;
						int in_place = direct_b && cols == FP16N_NR;
						const uint16_t *bq =
						    in_place ? b.p + k0 * b.rs + n0 + q * FP16N_NR
						             : bp + q * kc * FP16N_NR;
						ukr(kc, at, at2, ars, aks, bq,
						    in_place ? b.rs : FP16N_NR, blk, blk2, p > 0, cols);
						for (int t = 0; last && t <= pair; t++) {
							int64_t i0 = m0 + (mi + t) * FP16N_MR,
							        j0 = n0 + q * FP16N_NR;
							store(blk + t * FP16N_ACC_ELEMS,
							      t ? rows2 : rows, cols, beta,
							      (char *)C +
							          (size_t)(ct ? j0 * ldc + i0
							                      : i0 * ldc + j0) *
							              csize,
							      ldc);
						}
						mi += 1 + pair;
					}
				}
			}
		}
	}
	/* the statistics of the final C in one pass over it, one call when it is contiguous:
	 * per row block they were one call per row of each panel, each with its fixed cost */
	if (st)
		blind_stats_rows(amp_stats_f16, C, ldc, 0, M, 0, N, st);
}

/* The real stores, AVX-512 F/BW/VL (they run on any AVX-512 CPU; tests compare them with the
 * models above).  Same contract as amx_store_fn / fp16n_store_fn. */
void amp_amx_store_avx512(const float *acc, int64_t rows, int64_t cols, float beta, void *C,
                          int64_t ldc);
/* The acc32 store (amx_store_f32_ref's semantics), AVX-512 F. */
void amp_amx_store_f32_avx512(const float *acc, int64_t rows, int64_t cols, float beta, void *C,
                              int64_t ldc);
/* The AMX kernel's store: amp_amx_store_avx512's bits with vcvtneps2bf16 (needs AVX512-BF16). */
void amp_amx_store_avx512bf16(const float *acc, int64_t rows, int64_t cols, float beta, void *C,
                              int64_t ldc);

/* The AMX kernel's packers, AVX-512 F/BW/VL: the same output as amx_pack_a_ref and
 * amx_pack_b_vnni_ref, bit for bit (tests compare them). */
void amp_amx_pack_a_avx512(const blind_mat *a, int64_t m0, int64_t rows, int64_t k0, int64_t kc,
                           int64_t ks, uint16_t *restrict out);
void amp_amx_pack_b_avx512(const blind_mat *b, int64_t k0, int64_t kc, int64_t ks, int64_t n0,
                           int64_t cols, uint16_t *restrict out);
/* amx_acc_transpose_ref's result with four 16 x 16 register transposes, AVX-512 F. */
void amp_amx_acc_transpose_avx512(const float *restrict src, float *restrict dst);
void amp_fp16n_store_avx512(const float *acc, int64_t rows, int64_t cols, float beta, void *C,
                            int64_t ldc);
void amp_fp16n_store_f32_avx512(const float *acc, int64_t rows, int64_t cols, float beta, void *C,
                                int64_t ldc);
/* amp_gemm_f16_avx512fp16 with C fp32: the FP32 sums stored, not rounded (amp_gemm_acc32's
 * contract; the same bits as the fp16 GEMM's sums). */
void amp_gemm_f16_avx512fp16_acc32(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K,
                                   const uint16_t *A, int64_t lda, const uint16_t *B, int64_t ldb,
                                   float beta, float *C, int64_t ldc);
/* The real packers, AVX-512 F/BW/VL: the same bits as fp16n_pack_a_panels_ref / fp16n_pack_b_ref
 * for every operand (transposed or not, partial rows, columns and k; any other strides fall
 * back to the plain-C ones). */
void amp_fp16n_pack_a_avx512(const blind_mat *a, int64_t m0, int64_t rows, int64_t k0, int64_t kc,
                             uint16_t *restrict out);
void amp_fp16n_pack_b_avx512(const blind_mat *b, int64_t k0, int64_t kc, int64_t n0, int64_t cols,
                             uint16_t *restrict out);

/* The real kernels' loop nests exactly as compiled for them (packers vectorised for AVX-512, the
 * real stores) but on the models' micro-kernels: what an AVX-512 CPU without the features can
 * run of the real path.  Same contracts as the kernels; for tests.  Need AVX-512 F/BW/VL. */
void amp_amx_gemm_model_avx512(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K,
                               const uint16_t *A, int64_t lda, const uint16_t *B, int64_t ldb,
                               float beta, uint16_t *C, int64_t ldc, amp_stats *st);
void amp_fp16n_gemm_model_avx512(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K,
                                 const uint16_t *A, int64_t lda, const uint16_t *B, int64_t ldb,
                                 float beta, uint16_t *C, int64_t ldc, amp_stats *st);

#endif

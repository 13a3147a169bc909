/* gemm_impl.h — the blocked, packed GEMM driver shared by every path (GotoBLAS/BLIS loop
 * order: N by NC, K by KC, M by MC, then MR x NR register tiles).  Included by a path file
 * after it defines GEMM_MR, GEMM_NR, GEMM_MC, GEMM_KC, GEMM_NC (MC a multiple of MR) and
 *   static void gemm_ukr(int64_t kc, const float *ap, const float *bp, float *c, int64_t ldc,
 *                        int accumulate);   c (MR,NR) = [c +] ap (MR,kc) . bp (kc,NR)
 *   static void cvt_h2f(const uint16_t *src, float *dst, int64_t n);
 *   static void cvt_f2h(const float *src, uint16_t *dst, int64_t n);
 * Both dtypes are packed into fp32 panels; the fp16 GEMM converts while packing, sums in an
 * fp32 accumulator block and rounds to fp16 once at the end.
 */
#include <stdint.h>
#include <string.h>

#include "kernels/kernels_impl.h"

/* Rows of C per fp16 accumulator block: bounds the workspace at GEMM_F16_MROWS x NC floats. */
#define GEMM_F16_MROWS (4 * GEMM_MC)

/* op(X)[r][c] = X[r * rs + c * cs], elements fp32 or fp16. */
typedef struct gemm_operand {
	const void *p;
	int64_t rs, cs;
	int f16;
} gemm_operand;

static inline int64_t gemm_min(int64_t a, int64_t b)
{
	return a < b ? a : b;
}

/* src: (n) at stride 1, fp32 or fp16 -> dst: (n) fp32. */
static inline void gemm_load_run(const gemm_operand *x, int64_t off, int64_t n, float *dst)
{
	if (x->f16)
		cvt_h2f((const uint16_t *)x->p + off, dst, n);
	else
		memcpy(dst, (const float *)x->p + off, (size_t)n * sizeof(float));
}

/* Packs op(X)[r0 .. r0+nr) [c0 .. c0+kc) into out: (kc, pr) fp32, rows past nr zeroed.
 * For A the panel rows are rows of op(A); for B they are columns of op(B). */
static void gemm_pack_panel(const gemm_operand *x, int64_t r0, int64_t nr, int64_t c0,
                            int64_t kc, int pr, float *restrict out)
{
	if (x->rs == 1) {
		/* Panel rows are contiguous in memory: one run per k. */
		for (int64_t k = 0; k < kc; k++) {
			float *o = out + k * pr;
			gemm_load_run(x, r0 + (c0 + k) * x->cs, nr, o);
			for (int64_t r = nr; r < pr; r++)
				o[r] = 0.0f;
		}
		return;
	}
	float row[GEMM_KC] __attribute__((aligned(64)));
	for (int64_t r = 0; r < nr; r++) {
		const float *src = row;
		if (x->f16 || x->cs != 1) {
			if (x->cs == 1)
				gemm_load_run(x, (r0 + r) * x->rs + c0, kc, row);
			else if (x->f16)
				for (int64_t k = 0; k < kc; k++)
					row[k] = amp_f16_to_f32(((const uint16_t *)x->p)
					                        [(r0 + r) * x->rs + (c0 + k) * x->cs]);
			else
				for (int64_t k = 0; k < kc; k++)
					row[k] = ((const float *)x->p)[(r0 + r) * x->rs + (c0 + k) * x->cs];
		} else {
			src = (const float *)x->p + (r0 + r) * x->rs + c0;
		}
		for (int64_t k = 0; k < kc; k++)
			out[k * pr + r] = src[k];
	}
	for (int64_t r = nr; r < pr; r++)
		for (int64_t k = 0; k < kc; k++)
			out[k * pr + r] = 0.0f;
}

/* op(A) rows [i0, i0+mc), k [p0, p0+kc) -> ap: ceil(mc/MR) panels of (kc, MR). */
static void gemm_pack_a(const gemm_operand *a, int64_t i0, int64_t mc, int64_t p0, int64_t kc,
                        float *ap)
{
	for (int64_t i = 0; i < mc; i += GEMM_MR)
		gemm_pack_panel(a, i0 + i, gemm_min(GEMM_MR, mc - i), p0, kc, GEMM_MR,
		                ap + i * kc);
}

/* op(B) k [p0, p0+kc), columns [j0, j0+nc) -> bp: ceil(nc/NR) panels of (kc, NR). */
static void gemm_pack_b(const gemm_operand *b, int64_t p0, int64_t kc, int64_t j0, int64_t nc,
                        float *bp)
{
	for (int64_t j = 0; j < nc; j += GEMM_NR)
		gemm_pack_panel(b, j0 + j, gemm_min(GEMM_NR, nc - j), p0, kc, GEMM_NR,
		                bp + j * kc);
}

/* C (M,N) fp32 [+]= op(A) op(B) for one jc/pc block, over all row blocks of M.
 * c may be padded (pad != 0: rows and columns rounded up to MR and NR, every tile full). */
static void gemm_macro(const gemm_operand *a, int64_t M, int64_t nc, int64_t p0, int64_t kc,
                       const float *bp, float *ap, float *c, int64_t ldc, int accumulate, int pad)
{
	float tile[GEMM_MR * GEMM_NR] __attribute__((aligned(64)));
	for (int64_t ic = 0; ic < M; ic += GEMM_MC) {
		int64_t mc = gemm_min(GEMM_MC, M - ic);
		gemm_pack_a(a, ic, mc, p0, kc, ap);
		for (int64_t jr = 0; jr < nc; jr += GEMM_NR) {
			int64_t nr = gemm_min(GEMM_NR, nc - jr);
			const float *bpanel = bp + jr * kc;
			for (int64_t ir = 0; ir < mc; ir += GEMM_MR) {
				int64_t mr = gemm_min(GEMM_MR, mc - ir);
				float *ct = c + (ic + ir) * ldc + jr;
				if (pad || (mr == GEMM_MR && nr == GEMM_NR)) {
					gemm_ukr(kc, ap + ir * kc, bpanel, ct, ldc, accumulate);
					continue;
				}
				gemm_ukr(kc, ap + ir * kc, bpanel, tile, GEMM_NR, 0);
				for (int64_t r = 0; r < mr; r++)
					for (int64_t j = 0; j < nr; j++)
						ct[r * ldc + j] = accumulate
						        ? ct[r * ldc + j] + tile[r * GEMM_NR + j]
						        : tile[r * GEMM_NR + j];
			}
		}
	}
}

static void gemm_operands(int trans_a, int trans_b, const void *A, int64_t lda, const void *B,
                          int64_t ldb, int f16, gemm_operand *a, gemm_operand *b)
{
	a->p = A;
	a->rs = trans_a ? 1 : lda;
	a->cs = trans_a ? lda : 1;
	a->f16 = f16;
	/* B is packed as op(B)^T: panel rows are the columns j of op(B). */
	b->p = B;
	b->rs = trans_b ? ldb : 1;
	b->cs = trans_b ? 1 : ldb;
	b->f16 = f16;
}

/* Unpacked fallback, used only when the workspace cannot be allocated.  c: (M,N) fp32. */
static float gemm_dot(const gemm_operand *a, const gemm_operand *b, int64_t i, int64_t j,
                      int64_t K)
{
	float s = 0.0f;
	for (int64_t k = 0; k < K; k++) {
		float x, y;
		if (a->f16) {
			x = amp_f16_to_f32(((const uint16_t *)a->p)[i * a->rs + k * a->cs]);
			y = amp_f16_to_f32(((const uint16_t *)b->p)[j * b->rs + k * b->cs]);
		} else {
			x = ((const float *)a->p)[i * a->rs + k * a->cs];
			y = ((const float *)b->p)[j * b->rs + k * b->cs];
		}
		s += x * y;
	}
	return s;
}

/* A, B, C as amp_gemm_f32: C (M,N) fp32 = op(A) (M,K) . op(B) (K,N) + beta C. */
static void gemm_f32(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, const float *A,
                     int64_t lda, const float *B, int64_t ldb, float beta, float *C,
                     int64_t ldc)
{
	if (M <= 0 || N <= 0)
		return;
	if (beta != 0.0f && beta != 1.0f) {
		for (int64_t i = 0; i < M; i++)
			for (int64_t j = 0; j < N; j++)
				C[i * ldc + j] *= beta;
		beta = 1.0f;
	}
	if (K <= 0) {
		if (beta == 0.0f)
			for (int64_t i = 0; i < M; i++)
				memset(C + i * ldc, 0, (size_t)N * sizeof(float));
		return;
	}
	gemm_operand a, b;
	gemm_operands(trans_a, trans_b, A, lda, B, ldb, 0, &a, &b);

	int64_t ncmax = gemm_min(GEMM_NC, (N + GEMM_NR - 1) / GEMM_NR * GEMM_NR);
	float *bp = amp_kernels_workspace(AMP_WS_PACK_B, (size_t)(GEMM_KC * ncmax));
	float *ap = amp_kernels_workspace(AMP_WS_PACK_A, (size_t)(GEMM_KC * GEMM_MC));
	if (ap == NULL || bp == NULL) {
		for (int64_t i = 0; i < M; i++)
			for (int64_t j = 0; j < N; j++) {
				float s = gemm_dot(&a, &b, i, j, K);
				C[i * ldc + j] = beta != 0.0f ? C[i * ldc + j] + s : s;
			}
		return;
	}
	for (int64_t jc = 0; jc < N; jc += GEMM_NC) {
		int64_t nc = gemm_min(GEMM_NC, N - jc);
		for (int64_t pc = 0; pc < K; pc += GEMM_KC) {
			int64_t kc = gemm_min(GEMM_KC, K - pc);
			gemm_pack_b(&b, pc, kc, jc, nc, bp);
			gemm_macro(&a, M, nc, pc, kc, bp, ap, C + jc, ldc, pc > 0 || beta != 0.0f, 0);
		}
	}
}

/* A, B, C as amp_gemm_f16: fp16 storage, fp32 products and sums, C rounded once to fp16. */
static void gemm_f16(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K,
                     const uint16_t *A, int64_t lda, const uint16_t *B, int64_t ldb, float beta,
                     uint16_t *C, int64_t ldc)
{
	if (M <= 0 || N <= 0)
		return;
	gemm_operand a, b;
	gemm_operands(trans_a, trans_b, A, lda, B, ldb, 1, &a, &b);
	if (K <= 0)
		K = 0;

	int64_t ncmax = gemm_min(GEMM_NC, (N + GEMM_NR - 1) / GEMM_NR * GEMM_NR);
	int64_t mrows = gemm_min(GEMM_F16_MROWS, (M + GEMM_MR - 1) / GEMM_MR * GEMM_MR);
	float *bp = amp_kernels_workspace(AMP_WS_PACK_B, (size_t)(GEMM_KC * ncmax));
	float *ap = amp_kernels_workspace(AMP_WS_PACK_A, (size_t)(GEMM_KC * GEMM_MC));
	float *acc = amp_kernels_workspace(AMP_WS_ACC, (size_t)(mrows * ncmax));
	if (ap == NULL || bp == NULL || acc == NULL) {
		for (int64_t i = 0; i < M; i++)
			for (int64_t j = 0; j < N; j++) {
				float s = gemm_dot(&a, &b, i, j, K);
				if (beta != 0.0f)
					s += beta * amp_f16_to_f32(C[i * ldc + j]);
				C[i * ldc + j] = amp_f32_to_f16(s);
			}
		return;
	}
	for (int64_t jc = 0; jc < N; jc += GEMM_NC) {
		int64_t nc = gemm_min(GEMM_NC, N - jc);
		for (int64_t i0 = 0; i0 < M; i0 += GEMM_F16_MROWS) {
			int64_t mb = gemm_min(GEMM_F16_MROWS, M - i0);
			gemm_operand ab = a;  /* op(A) rows from i0 on */
			ab.p = (const uint16_t *)a.p + i0 * a.rs;
			uint16_t *cb = C + i0 * ldc + jc;
			if (beta != 0.0f) {
				for (int64_t i = 0; i < mb; i++) {
					float *ar = acc + i * ncmax;
					cvt_h2f(cb + i * ldc, ar, nc);
					if (beta != 1.0f)
						for (int64_t j = 0; j < nc; j++)
							ar[j] *= beta;
				}
			} else if (K == 0) {
				memset(acc, 0, (size_t)(mb * ncmax) * sizeof(float));
			}
			for (int64_t pc = 0; pc < K; pc += GEMM_KC) {
				int64_t kc = gemm_min(GEMM_KC, K - pc);
				gemm_pack_b(&b, pc, kc, jc, nc, bp);
				gemm_macro(&ab, mb, nc, pc, kc, bp, ap, acc, ncmax,
				           pc > 0 || beta != 0.0f, 1);
			}
			for (int64_t i = 0; i < mb; i++)
				cvt_f2h(acc + i * ncmax, cb + i * ldc, nc);
		}
	}
}

/* gemm_impl.h — the blocked, packed GEMM driver shared by every path (GotoBLAS/BLIS loop
 * order: N by NC, K by kc, M by MC, then MR x NR register tiles), split over the kernel threads.
 * Included by a path file after it defines GEMM_MR, GEMM_NR, GEMM_MC, GEMM_KC, GEMM_NC (MC a
 * multiple of MR), cvt_h2f / cvt_f2h (n elements, fp16 <-> fp32), cvt_b2f / cvt_f2b (bf16 <->
 * fp32; the narrowing ones return their NaN/Inf count) and
 *   static void gemm_ukr(int64_t kc, const gemm_pt *ap, const gemm_pt *bp, float *c,
 *                        int64_t ldc, int accumulate, int mr, int nr);
 *        c (mr,nr) = [c +] ap (MR,kc) . bp (kc,NR); if GEMM_UKR_EDGES is not defined it is only
 *        called with mr = MR, nr = NR (edges go through a tile here).
 * The panels: gemm_pt is GEMM_PANEL_T (default float) and GEMM_KP (default 1) the k-pairing:
 * a panel of pr rows over kc is (kc/KP rounded up, pr, KP) elements, k = KP q + e at
 * [(q pr + r) KP + e], the missing k of the last group zero.  With the defaults (fp32, no
 * pairing) the driver packs every dtype itself, widening halves, optionally helped by
 *   GEMM_PACK_FAST: static int gemm_pack_fast(const gemm_operand *x, int64_t r0, int64_t nr,
 *                             int64_t c0, int64_t kc, int pr, float *out);  as gemm_pack_panel,
 *                             or 0;
 *   GEMM_PACK_BLOCK_FAST: static int gemm_pack_block_fast(same, n rows);  as gemm_pack_a /
 *                             gemm_pack_b, or 0;
 *   GEMM_UKR_DIRECT_A: gemm_ukr_direct_a (a full MR-row tile of row-major fp32 A, at any row
 *                             stride, read in place; same arithmetic as gemm_ukr; with
 *                             GEMM_UKR_NARROW it takes out, ldo and dt as gemm_ukr_narrow,
 *                             out NULL for c [+]=).
 * A path with other panels (bf16 pairs for vdpbf16ps) defines GEMM_PACK_PATH and packs them:
 *   static void gemm_pack_path(const gemm_operand *x, int64_t r0, int64_t n, int64_t c0,
 *                              int64_t kc, int pr, gemm_pt *out);
 *        op(X) rows [r0, r0+n), k [c0, c0+kc) -> ceil(n/pr) panels of the layout above;
 * and GEMM_BF16_ONLY if it builds only the bf16 GEMM (then it need not define cvt_h2f/f2h).
 * A half path may define GEMM_UKR_NARROW (with GEMM_UKR_EDGES) and
 *   static void gemm_ukr_narrow(int64_t kc, const gemm_pt *ap, const gemm_pt *bp,
 *                               const float *c, int64_t ldc, int accumulate, uint16_t *out,
 *                               int64_t ldo, int mr, int nr, amp_dtype dt);
 *        out (mr,nr) = dt([c +] ap . bp), the sums and the add as gemm_ukr's, rounded as
 *        cvt_f2h / cvt_f2b: the last k block writes C itself instead of the accumulator block;
 * and GEMM_UKR_DIRECT_PAIRS (with GEMM_UKR_NARROW, GEMM_KP 2) with gemm_ukr_direct_pairs: as
 *        gemm_ukr_narrow (out may be NULL: then c [+]= as gemm_ukr) for a full MR-row tile of
 *        bf16 A read in place, rows a + r * lda holding their k pairs (k contiguous, kc even).
 * A path may define GEMM_DOT_N, GEMM_DOT_KMIN and GEMM_DOT_KMIN_HALF with
 *   static void gemm_dots(amp_dtype dt, int64_t M, int64_t N, int64_t K, const void *A,
 *                        int64_t lda, const void *B, int64_t ldb, float beta, void *C,
 *                        int64_t ldc, int c_f32);
 *        C (M,N) = A (M,K) . B (N,K)^T + beta C, A and B of dtype dt, C of dtype dt (rounded
 *        once, as gemm_narrow) or fp32 (c_f32, or dt fp32), each element a dot product of two
 *        rows contiguous in k (its order fixed by K alone): the x w^T GEMMs with N <=
 *        GEMM_DOT_N and K >= GEMM_DOT_KMIN (fp32) or GEMM_DOT_KMIN_HALF (half types) run on
 *        it (a classifier's few outputs, which a register tile of NR columns would mostly
 *        leave empty), threads taking row ranges.
 * The half GEMMs (fp16, bf16) sum in an fp32 accumulator block and round to their type once at
 * the end.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "amp_half.h"
#include "kernels/kernels_impl.h"

/* Rows of C per half accumulator block: bounds the workspace at GEMM_F16_MROWS x NC floats. */
#define GEMM_F16_MROWS (4 * GEMM_MC)
#ifndef GEMM_PANEL_T
#define GEMM_PANEL_T float
#endif
#ifndef GEMM_KP
#define GEMM_KP 1
#endif
typedef GEMM_PANEL_T gemm_pt;
#if defined(GEMM_PACK_PATH) && !defined(GEMM_BF16_ONLY)
#error "a path's own panels serve its bf16 GEMM only: define GEMM_BF16_ONLY"
#endif

/* Largest k block: K is cut into equal blocks of at most this (see gemm_kc). */
#define GEMM_KC_MAX (GEMM_KC + GEMM_KC / 4)
/* GEMMs with M N K below this stay on the calling thread (about 20 us of work). */
#define GEMM_PAR_MIN ((double)(1 << 21))

static inline int64_t gemm_min(int64_t a, int64_t b)
{
	return a < b ? a : b;
}

/* kc rounded up to whole k groups: a panel row's extent in the packed layout. */
static inline int64_t gemm_kpad(int64_t kc)
{
	return (kc + GEMM_KP - 1) / GEMM_KP * GEMM_KP;
}

/* Workspace floats that hold n panel elements. */
#define GEMM_WS_FLOATS(n) (((size_t)(n) * sizeof(gemm_pt) + sizeof(float) - 1) / sizeof(float))

/* The k block for this K: blocks of equal size, none larger than GEMM_KC_MAX.  It depends on K
 * alone, so every thread and every sub-block sums over k in the same order. */
static int64_t gemm_kc(int64_t K)
{
	int64_t nb = (K + GEMM_KC_MAX - 1) / GEMM_KC_MAX;
	return nb > 0 ? (K + nb - 1) / nb : 1;
}

/* src: (n) of dtype dt at p -> dst: (n) fp32 (exact). */
static inline void gemm_widen(amp_dtype dt, const void *p, int64_t n, float *dst)
{
	switch (dt) {
	case AMP_F16:
#ifndef GEMM_BF16_ONLY
		cvt_h2f(p, dst, n);
		return;
#endif
	case AMP_BF16: cvt_b2f(p, dst, n); return;
	case AMP_F32:
	case AMP_I32: break;
	}
	memcpy(dst, p, (size_t)n * sizeof(float));
}

/* src: (n) at stride 1, fp32 or a half type -> dst: (n) fp32. */
static inline void gemm_load_run(const gemm_operand *x, int64_t off, int64_t n, float *dst)
{
	if (x->dt == AMP_F32)
		memcpy(dst, (const float *)x->p + off, (size_t)n * sizeof(float));
	else
		gemm_widen(x->dt, (const uint16_t *)x->p + off, n, dst);
}

/* Element off of X, as fp32. */
static inline float gemm_elem(const gemm_operand *x, int64_t off)
{
	switch (x->dt) {
	case AMP_F16: return amp_f16_to_f32(((const uint16_t *)x->p)[off]);
	case AMP_BF16: return amp_half_bf16_to_f32(((const uint16_t *)x->p)[off]);
	case AMP_F32:
	case AMP_I32: break;
	}
	return ((const float *)x->p)[off];
}

/* op(X) shifted down by r0 rows. */
static inline gemm_operand gemm_shift(const gemm_operand *x, int64_t r0)
{
	gemm_operand y = *x;
	if (x->dt == AMP_F32)
		y.p = (const float *)x->p + r0 * x->rs;
	else
		y.p = (const uint16_t *)x->p + r0 * x->rs;
	return y;
}

#ifndef GEMM_PACK_PATH
/* Packs op(X)[r0 .. r0+nr) [c0 .. c0+kc) into out: (kc, pr) fp32, rows past nr zeroed.
 * For A the panel rows are rows of op(A); for B they are columns of op(B). */
static void gemm_pack_panel(const gemm_operand *x, int64_t r0, int64_t nr, int64_t c0,
                            int64_t kc, int pr, float *restrict out)
{
#ifdef GEMM_PACK_FAST
	if (gemm_pack_fast(x, r0, nr, c0, kc, pr, out))
		return;
#endif
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
	float row[GEMM_KC_MAX] __attribute__((aligned(64)));
	for (int64_t r = 0; r < nr; r++) {
		const float *src = row;
		if (x->dt != AMP_F32 || x->cs != 1) {
			if (x->cs == 1)
				gemm_load_run(x, (r0 + r) * x->rs + c0, kc, row);
			else
				for (int64_t k = 0; k < kc; k++)
					row[k] = gemm_elem(x, (r0 + r) * x->rs + (c0 + k) * x->cs);
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

#endif

/* op(A) rows [i0, i0+mc), k [p0, p0+kc) -> ap: ceil(mc/MR) panels of (kc, MR). */
static void gemm_pack_a(const gemm_operand *a, int64_t i0, int64_t mc, int64_t p0, int64_t kc,
                        gemm_pt *ap)
{
#ifdef GEMM_PACK_PATH
	gemm_pack_path(a, i0, mc, p0, kc, GEMM_MR, ap);
#else
#ifdef GEMM_PACK_BLOCK_FAST
	if (gemm_pack_block_fast(a, i0, mc, p0, kc, GEMM_MR, ap))
		return;
#endif
	for (int64_t i = 0; i < mc; i += GEMM_MR)
		gemm_pack_panel(a, i0 + i, gemm_min(GEMM_MR, mc - i), p0, kc, GEMM_MR,
		                ap + i * kc);
#endif
}

/* op(B) k [p0, p0+kc), columns [j0, j0+nc) -> bp: ceil(nc/NR) panels of (kc, NR). */
static void gemm_pack_b(const gemm_operand *b, int64_t p0, int64_t kc, int64_t j0, int64_t nc,
                        gemm_pt *bp)
{
#ifdef GEMM_PACK_PATH
	gemm_pack_path(b, j0, nc, p0, kc, GEMM_NR, bp);
#else
#ifdef GEMM_PACK_BLOCK_FAST
	if (gemm_pack_block_fast(b, j0, nc, p0, kc, GEMM_NR, bp))
		return;
#endif
	for (int64_t j = 0; j < nc; j += GEMM_NR)
		gemm_pack_panel(b, j0 + j, gemm_min(GEMM_NR, nc - j), p0, kc, GEMM_NR,
		                bp + j * kc);
#endif
}

/* c (mr,nr) [+]= one register tile, edges included. */
static inline void gemm_tile(int64_t kc, const gemm_pt *ap, const gemm_pt *bp, float *c,
                             int64_t ldc,
                             int accumulate, int64_t mr, int64_t nr)
{
#ifdef GEMM_UKR_EDGES
	gemm_ukr(kc, ap, bp, c, ldc, accumulate, (int)mr, (int)nr);
#else
	if (mr == GEMM_MR && nr == GEMM_NR) {
		gemm_ukr(kc, ap, bp, c, ldc, accumulate, GEMM_MR, GEMM_NR);
		return;
	}
	float tile[GEMM_MR * GEMM_NR] __attribute__((aligned(64)));
	gemm_ukr(kc, ap, bp, tile, GEMM_NR, 0, GEMM_MR, GEMM_NR);
	for (int64_t r = 0; r < mr; r++)
		for (int64_t j = 0; j < nr; j++)
			c[r * ldc + j] = accumulate ? c[r * ldc + j] + tile[r * GEMM_NR + j]
			                            : tile[r * GEMM_NR + j];
#endif
}

/* C (M,nc) fp32 [+]= op(A) op(B) for one jc/pc block, over all row blocks of M. */
/* One tile of gemm_macro: c [+]= ap . bp, or with out its rounding into out. */
static inline void gemm_tile_out(int64_t kc, const gemm_pt *ap, const gemm_pt *bp, float *c,
                                 int64_t ldc, int accumulate, uint16_t *out, int64_t ldo,
                                 amp_dtype dt, int64_t mr, int64_t nr)
{
#ifdef GEMM_UKR_NARROW
	if (out) {
		gemm_ukr_narrow(kc, ap, bp, c, ldc, accumulate, out, ldo, (int)mr, (int)nr, dt);
		return;
	}
#else
	(void)out, (void)ldo, (void)dt;
#endif
	gemm_tile(kc, ap, bp, c, ldc, accumulate, mr, nr);
}

/* out (or NULL): with GEMM_UKR_NARROW, the half C (at row stride ldo) the tiles round into. */
static void gemm_macro(const gemm_operand *a, int64_t M, int64_t nc, int64_t p0, int64_t kc,
                       const gemm_pt *bp, gemm_pt *ap, float *c, int64_t ldc, int accumulate,
                       uint16_t *out, int64_t ldo)
{
	int64_t kp = gemm_kpad(kc);  /* a panel row's extent */
#ifdef GEMM_UKR_DIRECT_PAIRS
	/* As GEMM_UKR_DIRECT_A with pair panels: with one or two column panels, full row tiles
	 * read the k pairs of bf16 A in place when k is contiguous and the block is whole pairs. */
	if (a->cs == 1 && nc <= 2 * GEMM_NR && kc % 2 == 0 && p0 % 2 == 0) {
		int64_t mfull = M / GEMM_MR * GEMM_MR;
		const gemm_pt *pa = (const gemm_pt *)a->p;
		for (int64_t ir = 0; ir < mfull; ir += GEMM_MR)
			for (int64_t jr = 0; jr < nc; jr += GEMM_NR)
				gemm_ukr_direct_pairs(kc, pa + ir * a->rs + p0, a->rs, bp + jr * kp,
				                      c + ir * ldc + jr, ldc, accumulate,
				                      out ? out + ir * ldo + jr : NULL, ldo,
				                      (int)gemm_min(GEMM_NR, nc - jr));
		if (mfull == M)
			return;
		gemm_pack_a(a, mfull, M - mfull, p0, kc, ap);
		for (int64_t jr = 0; jr < nc; jr += GEMM_NR)
			gemm_tile_out(kc, ap, bp + jr * kp, c + mfull * ldc + jr, ldc, accumulate,
			              out ? out + mfull * ldo + jr : NULL, ldo, a->dt, M - mfull,
			              gemm_min(GEMM_NR, nc - jr));
		return;
	}
#endif
#ifdef GEMM_UKR_DIRECT_A
	/* With one or two column panels each A element serves at most two tiles: packing A would
	 * cost about what it saves, so full row tiles read fp32 A in place (half A widened to a
	 * row-major fp32 tile first, no transpose). */
	if (a->cs == 1 && nc <= 2 * GEMM_NR) {
		int64_t mfull = M / GEMM_MR * GEMM_MR;
		for (int64_t ir = 0; ir < mfull; ir += GEMM_MR) {
			const float *at;
			int64_t ld;
			if (a->dt != AMP_F32) {
				for (int r = 0; r < GEMM_MR; r++)
					gemm_load_run(a, (ir + r) * a->rs + p0, kc, ap + r * kc);
				at = ap;
				ld = kc;
			} else {
				at = (const float *)a->p + ir * a->rs + p0;
				ld = a->rs;
			}
			for (int64_t jr = 0; jr < nc; jr += GEMM_NR)
				gemm_ukr_direct_a(kc, at, ld, bp + jr * kc, c + ir * ldc + jr, ldc,
				                  accumulate, (int)gemm_min(GEMM_NR, nc - jr)
#ifdef GEMM_UKR_NARROW
				                  , out ? out + ir * ldo + jr : NULL, ldo, a->dt
#endif
				);
		}
		if (mfull == M)
			return;
		gemm_pack_a(a, mfull, M - mfull, p0, kc, ap);
		for (int64_t jr = 0; jr < nc; jr += GEMM_NR)
			gemm_tile_out(kc, ap, bp + jr * kc, c + mfull * ldc + jr, ldc, accumulate,
			              out ? out + mfull * ldo + jr : NULL, ldo, a->dt, M - mfull,
			              gemm_min(GEMM_NR, nc - jr));
		return;
	}
#endif
	for (int64_t ic = 0; ic < M; ic += GEMM_MC, amp_kernels_poll()) {
		int64_t mc = gemm_min(GEMM_MC, M - ic);
		gemm_pack_a(a, ic, mc, p0, kc, ap);
		for (int64_t jr = 0; jr < nc; jr += GEMM_NR) {
			int64_t nr = gemm_min(GEMM_NR, nc - jr);
			const gemm_pt *bpanel = bp + jr * kp;
			for (int64_t ir = 0; ir < mc; ir += GEMM_MR)
				gemm_tile_out(kc, ap + ir * kp, bpanel, c + (ic + ir) * ldc + jr, ldc,
				              accumulate, out ? out + (ic + ir) * ldo + jr : NULL, ldo, a->dt,
				              gemm_min(GEMM_MR, mc - ir), nr);
		}
	}
}

/* Unpacked fallback, used only when the workspace cannot be allocated. */
static float gemm_dot(const gemm_operand *a, const gemm_operand *b, int64_t i, int64_t j,
                      int64_t K)
{
	float s = 0.0f;
	for (int64_t k = 0; k < K; k++)
		s += gemm_elem(a, i * a->rs + k * a->cs) * gemm_elem(b, j * b->rs + k * b->cs);
	return s;
}

/* One GEMM, its blocking fixed before it is split over threads. */
typedef struct gemm_job {
	gemm_operand a, b;  /* op(A) rows; op(B) columns as panel rows */
	int64_t M, N, K, kc;
	void *C;            /* of dtype a.dt */
	int64_t ldc;
	float beta;
	int split_n;        /* threads take column ranges (1) or row ranges (0) */
	int64_t units;      /* NR-wide column or MR-high row units to share out */
	amp_stats *parts;   /* with statistics: one per share, else NULL */
	int c_f32;          /* half A and B, C fp32: the sums are stored, not rounded (acc32) */
	int dot;            /* x w^T on gemm_dots (GEMM_DOT_N) */
} gemm_job;


/* *st = the statistics of (n) elements of dtype dt at c. */
static void gemm_stats_of(amp_dtype dt, const void *c, int64_t n, amp_stats *st)
{
	switch (dt) {
	case AMP_F16: amp_stats_f16(c, n, st); return;
	case AMP_BF16: amp_stats_bf16(c, n, st); return;
	case AMP_F32:
	case AMP_I32: break;
	}
	amp_stats_f32(c, n, st);
}

/* part += the statistics of the rows c (m rows of n at stride ldc, dtype dt): one call over
 * the block when its rows are contiguous, else one per row. */
static void gemm_stats_rows(amp_stats *part, amp_dtype dt, const void *c, int64_t m, int64_t n,
                            int64_t ldc)
{
	size_t es = dt == AMP_F32 ? sizeof(float) : sizeof(uint16_t);
	amp_stats s;
	if (ldc == n) {
		gemm_stats_of(dt, c, m * n, &s);
		amp_stats_merge(part, &s);
		return;
	}
	for (int64_t i = 0; i < m; i++) {
		gemm_stats_of(dt, (const char *)c + (size_t)(i * ldc) * es, n, &s);
		amp_stats_merge(part, &s);
	}
}

/* src: (n) fp32 -> dst: (n) of the half dtype dt, rounded once. */
static inline void gemm_narrow(amp_dtype dt, const float *src, uint16_t *dst, int64_t n)
{
#ifdef GEMM_BF16_ONLY
	(void)dt;
	cvt_f2b(src, dst, n);
#else
	if (dt == AMP_BF16)
		cvt_f2b(src, dst, n);
	else
		cvt_f2h(src, dst, n);
#endif
}

/* C[i0 .. i0+mb) [j0 .. j0+nb) of a half GEMM (fp16 or bf16, as g->a.dt): fp32 sums in a
 * block of acc, rounded once; part (or NULL) += the statistics of the block, each piece taken
 * right after it is rounded. */
static void gemm_block_half(const gemm_job *g, int64_t i0, int64_t mb, int64_t j0, int64_t nb,
                           amp_stats *part)
{
	uint16_t *C = (uint16_t *)g->C + i0 * g->ldc + j0;
	int64_t ldc = g->ldc, K = g->K > 0 ? g->K : 0;
	float beta = g->beta;
	gemm_operand a = gemm_shift(&g->a, i0), b = gemm_shift(&g->b, j0);
	int64_t ncmax = gemm_min(GEMM_NC, (nb + GEMM_NR - 1) / GEMM_NR * GEMM_NR);
#ifdef GEMM_UKR_NARROW
	/* One k block and no C to add in: the tiles round their sums straight into C and never
	 * read the accumulator, so all rows go as one block (B packed once, not once per
	 * GEMM_F16_MROWS rows) over an accumulator of one row at stride 0. */
	const int direct = beta == 0.0f && K > 0 && K <= g->kc;
#else
	const int direct = 0;
#endif
	int64_t mstep = direct ? mb : GEMM_F16_MROWS, accld = direct ? 0 : ncmax;
	int64_t mrows = direct ? 1 : gemm_min(GEMM_F16_MROWS, mb);
	gemm_pt *bp = (gemm_pt *)amp_kernels_workspace(
	    AMP_WS_PACK_B, GEMM_WS_FLOATS((GEMM_KC_MAX + GEMM_KP) * ncmax));
	gemm_pt *ap = (gemm_pt *)amp_kernels_workspace(
	    AMP_WS_PACK_A, GEMM_WS_FLOATS((GEMM_KC_MAX + GEMM_KP) * GEMM_MC));
	float *acc = amp_kernels_workspace(AMP_WS_ACC, (size_t)(mrows * ncmax + GEMM_NR));
	if (ap == NULL || bp == NULL || acc == NULL) {
		for (int64_t i = 0; i < mb; i++)
			for (int64_t j = 0; j < nb; j++) {
				float s = gemm_dot(&a, &b, i, j, K), c;
				if (beta != 0.0f) {
					gemm_widen(g->a.dt, C + i * ldc + j, 1, &c);
					s += beta * c;
				}
				gemm_narrow(g->a.dt, &s, C + i * ldc + j, 1);
			}
		if (part)
			gemm_stats_rows(part, g->a.dt, C, mb, nb, ldc);
		return;
	}
	for (int64_t jc = 0; jc < nb; jc += GEMM_NC) {
		int64_t nc = gemm_min(GEMM_NC, nb - jc);
		for (int64_t ib = 0; ib < mb; ib += mstep) {
			int64_t mc = gemm_min(mstep, mb - ib);
			gemm_operand ab = gemm_shift(&a, ib);
			uint16_t *cb = C + ib * ldc + jc;
			if (beta != 0.0f) {
				for (int64_t i = 0; i < mc; i++) {
					float *ar = acc + i * ncmax;
					gemm_widen(g->a.dt, cb + i * ldc, nc, ar);
					if (beta != 1.0f)
						for (int64_t j = 0; j < nc; j++)
							ar[j] *= beta;
				}
			} else if (K == 0) {
				for (int64_t i = 0; i < mc; i++)
					memset(acc + i * ncmax, 0, (size_t)nc * sizeof(float));
			}
			int narrowed = 0;  /* C written by the last k block's tiles */
			for (int64_t pc = 0; pc < K; pc += g->kc) {
				int64_t kc = gemm_min(g->kc, K - pc);
				uint16_t *out = NULL;
#ifdef GEMM_UKR_NARROW
				if (pc + kc >= K)
					out = cb, narrowed = 1;
#endif
				gemm_pack_b(&b, pc, kc, jc, nc, bp);
				gemm_macro(&ab, mc, nc, pc, kc, bp, ap, acc, accld,
				           pc > 0 || beta != 0.0f, out, ldc);
			}
			for (int64_t i = 0; i < mc && !narrowed; i++)
				gemm_narrow(g->a.dt, acc + i * ncmax, cb + i * ldc, nc);
			if (part)
				gemm_stats_rows(part, g->a.dt, cb, mc, nc, ldc);
		}
	}
}

/* C[i0 .. i0+mb) [j0 .. j0+nb) fp32 = op(A) op(B) [+ beta C], A and B of dtype g->a.dt: the
 * fp32 GEMM, and the acc32 slots' half one, whose fp32 sums are stored as they are (a gradient
 * summed over images or batches in FP32 without a rounding per part). */
static void gemm_block_c32(const gemm_job *g, int64_t i0, int64_t mb, int64_t j0, int64_t nb)
{
	float *C = (float *)g->C + i0 * g->ldc + j0;
	int64_t ldc = g->ldc, K = g->K;
	float beta = g->beta;
	if (beta != 0.0f && beta != 1.0f) {
		for (int64_t i = 0; i < mb; i++)
			for (int64_t j = 0; j < nb; j++)
				C[i * ldc + j] *= beta;
		beta = 1.0f;
	}
	if (K <= 0) {
		if (beta == 0.0f)
			for (int64_t i = 0; i < mb; i++)
				memset(C + i * ldc, 0, (size_t)nb * sizeof(float));
		return;
	}
	gemm_operand a = gemm_shift(&g->a, i0), b = gemm_shift(&g->b, j0);
	int64_t ncmax = gemm_min(GEMM_NC, (nb + GEMM_NR - 1) / GEMM_NR * GEMM_NR);
	gemm_pt *bp = (gemm_pt *)amp_kernels_workspace(
	    AMP_WS_PACK_B, GEMM_WS_FLOATS((GEMM_KC_MAX + GEMM_KP) * ncmax));
	gemm_pt *ap = (gemm_pt *)amp_kernels_workspace(
	    AMP_WS_PACK_A, GEMM_WS_FLOATS((GEMM_KC_MAX + GEMM_KP) * GEMM_MC));
	if (ap == NULL || bp == NULL) {
		for (int64_t i = 0; i < mb; i++)
			for (int64_t j = 0; j < nb; j++) {
				float s = gemm_dot(&a, &b, i, j, K);
				C[i * ldc + j] = beta != 0.0f ? C[i * ldc + j] + s : s;
			}
		return;
	}
	for (int64_t jc = 0; jc < nb; jc += GEMM_NC) {
		int64_t nc = gemm_min(GEMM_NC, nb - jc);
		for (int64_t pc = 0; pc < K; pc += g->kc) {
			int64_t kc = gemm_min(g->kc, K - pc);
			gemm_pack_b(&b, pc, kc, jc, nc, bp);
			gemm_macro(&a, mb, nc, pc, kc, bp, ap, C + jc, ldc, pc > 0 || beta != 0.0f, NULL,
			           0);
		}
	}
}

#ifdef GEMM_DOT_N
static void gemm_dots(amp_dtype dt, int64_t M, int64_t N, int64_t K, const void *A, int64_t lda,
                      const void *B, int64_t ldb, float beta, void *C, int64_t ldc, int c_f32);
#endif

/* Thread t of n: its share of the units, as a row or column range of C. */
static void gemm_task(void *arg, int t, int n)
{
	const gemm_job *g = arg;
	int64_t u0 = g->units * t / n, u1 = g->units * (t + 1) / n;
	int64_t i0 = 0, mb = g->M, j0 = 0, nb = g->N;
	if (g->split_n) {
		j0 = u0 * GEMM_NR;
		nb = gemm_min(u1 * GEMM_NR, g->N) - j0;
	} else {
		i0 = u0 * GEMM_MR;
		mb = gemm_min(u1 * GEMM_MR, g->M) - i0;
	}
	if (mb <= 0 || nb <= 0)
		return;
#ifdef GEMM_DOT_N
	if (g->dot) {
		amp_dtype dt = g->a.dt;
		size_t es = dt == AMP_F32 ? sizeof(float) : sizeof(uint16_t);
		int c_f32 = g->c_f32 || dt == AMP_F32;
		void *c = (char *)g->C + (size_t)(i0 * g->ldc) * (c_f32 ? sizeof(float) : es);
		gemm_dots(dt, mb, g->N, g->K, (const char *)g->a.p + (size_t)(i0 * g->a.rs) * es,
		          g->a.rs, g->b.p, g->b.rs, g->beta, c, g->ldc, c_f32);
		if (g->parts && !c_f32)
			gemm_stats_rows(&g->parts[t], dt, c, mb, g->N, g->ldc);
		return;
	}
#endif
	if (g->c_f32 || g->a.dt == AMP_F32) {
		gemm_block_c32(g, i0, mb, j0, nb);
		return;
	}
	gemm_block_half(g, i0, mb, j0, nb, g->parts ? &g->parts[t] : NULL);
}

/* Sets up the job and runs it on as many threads as it is worth; with c_f32, C is fp32 for
 * half A and B (no statistics then).  dots 0: never the dot products (GEMM_DOT_N), for a
 * caller that runs a range of a larger GEMM which does not take them. */
static void gemm_run_c(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, const void *A,
                       int64_t lda, const void *B, int64_t ldb, float beta, void *C, int64_t ldc,
                       amp_dtype dt, amp_stats *st, int c_f32, int dots)
{
	if (M <= 0 || N <= 0)
		return;
	gemm_job g = {
		.a = {A, trans_a ? 1 : lda, trans_a ? lda : 1, dt},
		/* B is packed as op(B)^T: panel rows are the columns j of op(B). */
		.b = {B, trans_b ? ldb : 1, trans_b ? 1 : ldb, dt},
		.M = M, .N = N, .K = K, .kc = gemm_kc(K), .C = C, .ldc = ldc, .beta = beta,
		.c_f32 = c_f32,
	};
	if (c_f32)
		st = NULL;
#ifdef GEMM_DOT_N
	g.dot = dots && !trans_a && trans_b && N <= GEMM_DOT_N &&
	        K >= (dt == AMP_F32 ? GEMM_DOT_KMIN : GEMM_DOT_KMIN_HALF);
#else
	(void)dots;
#endif
	int want = amp_kernels_threads();
	double work = (double)M * (double)N * (double)(K > 0 ? K : 1);
	if (work < GEMM_PAR_MIN)
		want = 1;
	else if (want > 1 && work >= 32 * GEMM_PAR_MIN)
		want *= 2;  /* two shares a thread: a thread that is held up delays only half as much */
	int64_t mu = (M + GEMM_MR - 1) / GEMM_MR, nu = (N + GEMM_NR - 1) / GEMM_NR;
	/* Each thread packs all of the operand it does not split: split the longer side. */
	g.split_n = !g.dot && nu >= want && (N >= M || mu < want);
	g.units = g.split_n ? nu : mu;
	if (want > g.units)
		want = (int)g.units;
	amp_stats local[4], *parts = NULL;
	if (st) {
		parts = want <= 4 ? local : malloc((size_t)want * sizeof *parts);
		if (!parts) { /* no room for the shares' statistics: one pass over C after */
			amp_kernels_parallel(want, gemm_task, &g);
			gemm_stats_rows(st, dt, C, M, N, ldc);
			return;
		}
		for (int t = 0; t < want; t++)
			amp_stats_init(&parts[t]);
		g.parts = parts;
	}
	amp_kernels_parallel(want, gemm_task, &g);
	if (st) {
		for (int t = 0; t < want; t++)
			amp_stats_merge(st, &parts[t]);
		if (parts != local)
			free(parts);
	}
}

static void gemm_run(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, const void *A,
                     int64_t lda, const void *B, int64_t ldb, float beta, void *C, int64_t ldc,
                     amp_dtype dt, amp_stats *st)
{
	gemm_run_c(trans_a, trans_b, M, N, K, A, lda, B, ldb, beta, C, ldc, dt, st, 0, 1);
}

/* The GEMM slots (amp_gemm_fn): A, B, C of the slot's dtype as amp_gemm; st (or NULL) += the
 * statistics of C.  fp32: C (M,N) fp32 = op(A) (M,K) . op(B) (K,N) + beta C.  fp16, bf16: half
 * storage, fp32 products and sums, C rounded once. */
#ifndef GEMM_BF16_ONLY
static void gemm_f32(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, const void *A,
                     int64_t lda, const void *B, int64_t ldb, float beta, void *C, int64_t ldc,
                     amp_stats *st)
{
	gemm_run(trans_a, trans_b, M, N, K, A, lda, B, ldb, beta, C, ldc, AMP_F32, NULL);
	if (st && M > 0 && N > 0)
		gemm_stats_rows(st, AMP_F32, C, M, N, ldc);
}

static void gemm_f16(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, const void *A,
                     int64_t lda, const void *B, int64_t ldb, float beta, void *C, int64_t ldc,
                     amp_stats *st)
{
	gemm_run(trans_a, trans_b, M, N, K, A, lda, B, ldb, beta, C, ldc, AMP_F16, st);
}

#endif

static void gemm_bf16(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, const void *A,
                      int64_t lda, const void *B, int64_t ldb, float beta, void *C, int64_t ldc,
                      amp_stats *st)
{
	gemm_run(trans_a, trans_b, M, N, K, A, lda, B, ldb, beta, C, ldc, AMP_BF16, st);
}

/* The acc32 slots (amp_gemm_acc32): half A and B, C fp32 (st unused). */
static void gemm_bf16_acc32(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K,
                            const void *A, int64_t lda, const void *B, int64_t ldb, float beta,
                            void *C, int64_t ldc, amp_stats *st)
{
	(void)st;
	gemm_run_c(trans_a, trans_b, M, N, K, A, lda, B, ldb, beta, C, ldc, AMP_BF16, NULL, 1, 1);
}

#ifndef GEMM_BF16_ONLY
static void gemm_f16_acc32(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K,
                           const void *A, int64_t lda, const void *B, int64_t ldb, float beta,
                           void *C, int64_t ldc, amp_stats *st)
{
	(void)st;
	gemm_run_c(trans_a, trans_b, M, N, K, A, lda, B, ldb, beta, C, ldc, AMP_F16, NULL, 1, 1);
}
#endif

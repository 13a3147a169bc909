/* gemm_split.h — private to the kernel tables of the single-thread half GEMMs (kernels_amxbf16.c,
 * kernels_avx512fp16.c): runs such a GEMM over the kernel threads.
 *
 * C is cut into row ranges (or column ranges when it has few rows), each a whole number of the
 * kernel's blocks (unit rows or columns), and every thread runs the kernel on its own range with
 * its own workspace.  A range is a set of whole dot products over the same K, summed in an order
 * fixed by K and by the path the kernel takes for the whole GEMM (which the caller passes on to
 * the ranges where they could differ), so C has the same bits for any thread count; the
 * statistics of the ranges are merged exactly (amp_stats_merge).
 */
#ifndef AMP_KERNELS_GEMM_SPLIT_H
#define AMP_KERNELS_GEMM_SPLIT_H

#include <stdint.h>
#include <stdlib.h>

#include "kernels/kernels.h"
#include "kernels/kernels_impl.h"
#include "kernels/stats.h"

/* The single-thread kernel: amp_gemm's contract, C of csize bytes an element; st NULL or
 * overwritten with the statistics of its C. */
typedef void (*gemm_split_fn)(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K,
                              const uint16_t *A, int64_t lda, const uint16_t *B, int64_t ldb,
                              float beta, void *C, int64_t ldc, amp_stats *st);

/* Work (M N K) below which one thread does it all: a share must outweigh waking a worker. */
#define GEMM_SPLIT_MIN ((double)(1 << 22))

typedef struct gemm_split_job {
	gemm_split_fn fn;
	int trans_a, trans_b;
	int64_t M, N, K, lda, ldb, ldc, unit, units;
	const uint16_t *A, *B;
	float beta;
	char *C;
	size_t csize;
	int by_cols;
	amp_stats *parts; /* one per share, or NULL */
} gemm_split_job;

/* Share t of n: its row (or column) range of C, and the operand it reads there. */
static void gemm_split_task(void *arg, int t, int n)
{
	const gemm_split_job *g = arg;
	int64_t u0 = g->units * t / n, u1 = g->units * (t + 1) / n;
	int64_t lo = u0 * g->unit, hi = (u1 * g->unit < (g->by_cols ? g->N : g->M))
	                                    ? u1 * g->unit
	                                    : (g->by_cols ? g->N : g->M);
	amp_stats *st = g->parts ? &g->parts[t] : NULL;
	if (hi <= lo) {
		if (st)
			amp_stats_init(st);
		return;
	}
	if (g->by_cols) {
		/* columns lo..hi of op(B): B's columns, or B^T's rows */
		const uint16_t *b = g->trans_b ? g->B + lo * g->ldb : g->B + lo;
		g->fn(g->trans_a, g->trans_b, g->M, hi - lo, g->K, g->A, g->lda, b, g->ldb, g->beta,
		      g->C + (size_t)lo * g->csize, g->ldc, st);
	} else {
		/* rows lo..hi of op(A): A's rows, or A^T's columns */
		const uint16_t *a = g->trans_a ? g->A + lo : g->A + lo * g->lda;
		g->fn(g->trans_a, g->trans_b, hi - lo, g->N, g->K, a, g->lda, g->B, g->ldb, g->beta,
		      g->C + (size_t)(lo * g->ldc) * g->csize, g->ldc, st);
	}
}

/* C = op(A) op(B) + beta C on fn over the kernel threads (unit: the kernel's block edge);
 * st NULL or overwritten with the statistics of C. */
static inline void gemm_split_run(gemm_split_fn fn, int64_t unit, int trans_a, int trans_b,
                                  int64_t M, int64_t N, int64_t K, const uint16_t *A,
                                  int64_t lda, const uint16_t *B, int64_t ldb, float beta,
                                  void *C, int64_t ldc, size_t csize, amp_stats *st)
{
	int want = amp_kernels_threads();
	double work = (double)M * (double)N * (double)(K > 0 ? K : 1);
	int64_t mu = (M + unit - 1) / unit, nu = (N + unit - 1) / unit;
	gemm_split_job g = {fn,  trans_a, trans_b, M,     N,         K,    lda,     ldb,
	                    ldc, unit,    0,       A,     B,         beta, C,       csize,
	                    mu < want && nu > mu, NULL};
	g.units = g.by_cols ? nu : mu;
	if (want > g.units)
		want = (int)g.units;
	if (want <= 1 || work < GEMM_SPLIT_MIN) {
		fn(trans_a, trans_b, M, N, K, A, lda, B, ldb, beta, C, ldc, st);
		return;
	}
	amp_stats local[8];
	if (st) {
		g.parts = want <= 8 ? local : malloc((size_t)want * sizeof *g.parts);
		if (!g.parts) { /* no room for the shares' statistics: one thread */
			fn(trans_a, trans_b, M, N, K, A, lda, B, ldb, beta, C, ldc, st);
			return;
		}
	}
	int n = amp_kernels_parallel(want, gemm_split_task, &g);
	if (st) {
		amp_stats_init(st);
		for (int t = 0; t < n; t++)
			amp_stats_merge(st, &g.parts[t]);
		if (g.parts != local)
			free(g.parts);
	}
}

#endif

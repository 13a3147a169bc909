/* dist.h — `--dist` for the examples: data-parallel training over MPI (amp/amp_mpi.h).
 *
 * Launched with `mpirun -np N`, each rank trains on its share of every global batch (the
 * batch size stays the global one) and the gradients are all-reduced; evaluation splits the
 * test set and sums the counts over the ranks.  Only rank 0 prints progress and results.
 * Without MPI at build time, --dist is refused with a message that says so.
 */
#ifndef AMP_EX_DIST_H
#define AMP_EX_DIST_H

#include <stdint.h>

#include "amp/amp.h"

typedef struct ex_dist {
	int on;          /* --dist given and MPI started */
	int rank, size;  /* 0 and 1 without --dist */
} ex_dist;

/* Starts MPI (MPI_Init) when on is set.  Returns 0, or -1 after printing why to stderr. */
int ex_dist_init(ex_dist *d, int on, const char *prog, int *argc, char ***argv);
/* Makes ctx data-parallel (after its parameters exist): amp_mpi_attach over the world. */
int ex_dist_attach(const ex_dist *d, amp_ctx *ctx);
/* Every rank's masters and optimizer moments whole again (amp_mpi_consolidate: after
 * optimizer_sharding, before a checkpoint); collective, on every rank. */
int ex_dist_consolidate(const ex_dist *d, amp_ctx *ctx);
/* This rank's part [*start, *start + *count) of n items. */
void ex_dist_shard(const ex_dist *d, int64_t n, int64_t *start, int64_t *count);
/* Sum of v over the ranks (v itself without --dist). */
int64_t ex_dist_sum_i64(const ex_dist *d, int64_t v);
/* The mean over the whole global batch of a per-sample mean (loss over this rank's n samples,
 * NAN or anything when n is 0): the ranks' means weighted by their shares. */
double ex_dist_mean(const ex_dist *d, double mean, int64_t n);
/* v[0..n) = its sums over the ranks, in place (unchanged without --dist). */
void ex_dist_sum(const ex_dist *d, double *v, int n);
/* Stops MPI (after the context is freed).  status != 0 (this rank failed): aborts the job
 * instead, since the other ranks would wait for it in their next collective forever. */
void ex_dist_finish(ex_dist *d, int status);

#endif

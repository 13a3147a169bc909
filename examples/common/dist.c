/* dist.c — `--dist` for the examples (dist.h): MPI start-up, shards, sums over the ranks. */
#include "dist.h"

#include <stdio.h>

#ifdef AMP_HAVE_MPI
#include "amp/amp_mpi.h"
#endif

int ex_dist_init(ex_dist *d, int on, const char *prog, int *argc, char ***argv)
{
	d->on = 0;
	d->rank = 0;
	d->size = 1;
	if (!on)
		return 0;
#ifdef AMP_HAVE_MPI
	if (MPI_Init(argc, argv) != MPI_SUCCESS) {
		fprintf(stderr, "%s: --dist: MPI_Init failed\n", prog);
		return -1;
	}
	d->on = 1;
	MPI_Comm_rank(MPI_COMM_WORLD, &d->rank);
	MPI_Comm_size(MPI_COMM_WORLD, &d->size);
	return 0;
#else
	(void)argc;
	(void)argv;
	fprintf(stderr, "%s: --dist: built without MPI (install libopenmpi-dev and rebuild)\n",
	        prog);
	return -1;
#endif
}

int ex_dist_attach(const ex_dist *d, amp_ctx *ctx)
{
#ifdef AMP_HAVE_MPI
	if (d->on)
		return amp_mpi_attach(ctx, MPI_COMM_WORLD);
#else
	(void)d;
	(void)ctx;
#endif
	return AMP_OK;
}

int ex_dist_consolidate(const ex_dist *d, amp_ctx *ctx)
{
#ifdef AMP_HAVE_MPI
	if (d->on)
		return amp_mpi_consolidate(ctx);
#else
	(void)d;
	(void)ctx;
#endif
	return AMP_OK;
}

void ex_dist_shard(const ex_dist *d, int64_t n, int64_t *start, int64_t *count)
{
	int64_t lo = n * d->rank / d->size, hi = n * (d->rank + 1) / d->size;
	*start = lo;
	*count = hi - lo;
}

int64_t ex_dist_sum_i64(const ex_dist *d, int64_t v)
{
#ifdef AMP_HAVE_MPI
	if (d->on) {
		int64_t sum = 0;
		MPI_Allreduce(&v, &sum, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
		return sum;
	}
#else
	(void)d;
#endif
	return v;
}

void ex_dist_sum(const ex_dist *d, double *v, int n)
{
#ifdef AMP_HAVE_MPI
	if (d->on)
		MPI_Allreduce(MPI_IN_PLACE, v, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
#else
	(void)d;
	(void)v;
	(void)n;
#endif
}

double ex_dist_mean(const ex_dist *d, double mean, int64_t n)
{
	if (!d->on)
		return mean;
	double v[2] = {n > 0 ? mean * (double)n : 0.0, (double)n};
	ex_dist_sum(d, v, 2);
	return v[1] > 0 ? v[0] / v[1] : mean;
}

void ex_dist_finish(ex_dist *d, int status)
{
#ifdef AMP_HAVE_MPI
	if (d->on && status != 0) {
		fflush(NULL);
		MPI_Abort(MPI_COMM_WORLD, status);
	}
	if (d->on)
		MPI_Finalize();
#else
	(void)status;
#endif
	d->on = 0;
}

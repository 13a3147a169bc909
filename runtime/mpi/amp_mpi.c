/* amp_mpi.c — libamprt_mpi: data-parallel training over an MPI communicator (amp/amp_mpi.h).
 *
 * The parameters are split once, at attach, into buckets of about allreduce_bucket_kb KiB of
 * FP32 values, newest parameter first (the order backward finishes them), a parameter of that
 * size or more in a bucket of its own.  During backward the
 * runtime reports each parameter's gradient as final (amp/amp_dist.h); when every gradient of
 * the next bucket is final, the bucket is packed in the all-reduce dtype (from the gradients
 * where backward left them, a half one copied or converted as it is) and its ring starts (see
 * "the ring" below).  Buckets start strictly in index order and each ring's sums are taken in
 * a fixed order, so the result does not depend on timing.  Between tape nodes the rings in
 * flight are tested and moved on, which is what overlaps them with the rest of backward.
 * The end of backward completes what is left and hands each parameter its sum where it lies
 * in the payload (amp_param_grad_set): the optimizer's update widens it from there.  A step
 * that ends without amp_optim_step keeps the mean (step_end).
 *
 * Half payloads carry the scaled gradients (the loss scale was applied by backward's seed) and
 * are added in FP32, rounded once per hop.
 */
#include "amp/amp_mpi.h"
#include "amp/amp_dist.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef enum { B_IDLE = 0, B_POSTED = 1, B_DONE = 2 } bucket_state;

typedef struct bucket {
	int first, count;      /* parameters order[first .. first+count) */
	int64_t elems;         /* their elements */
	int64_t chunk;         /* elements of each rank's share in the ring: elems / size, up (the
	                          last share may be shorter, or empty) */
	void *buf;             /* elems values of the payload dtype */
	void *data;            /* the payload this step: buf, or the one parameter's gradient
	                          itself when it is already in the payload dtype (no copy) */
	void *in;              /* chunk values: a share received to be added */
	int ready;             /* parameters of it whose gradient is final this step */
	bucket_state state;
	int hop;               /* ring steps done: 0 .. 2 (size - 1) */
	MPI_Request req[2];    /* the current hop's send and receive */
	uint64_t t_post, t_wait, t_end; /* trace clock */
	int waited;            /* the training thread blocked on it */
	int err;               /* MPI error code of its last flight */
	unsigned flags;        /* AMP_COMM_LOCAL_OVERFLOW */
} bucket;

typedef struct dist {
	MPI_Comm comm;
	int rank, size;
	amp_dtype dtype;       /* payload */
	MPI_Datatype mpi_type; /* a payload value as MPI moves it (bytes only: the ring adds) */
	int n_params;
	int *order;            /* parameter indexes, newest first */
	int *bucket_of;        /* per parameter index: its bucket */
	int64_t *numel;        /* per parameter index: its elements */
	int64_t *bad;          /* per parameter index: NaN/Inf in its sum this step (the ring
	                          counts the shares each rank finishes; reduce adds them up),
	                          then at n_params + index: the ranks where it has a gradient,
	                          at 2 n_params + index: the ranks where its values moved,
	                          then SAME_SLOTS: the settings' fingerprint (same_fingerprint),
	                          then SHARD_SLOT: the ranks that can shard the step's update */
	char *ready;           /* per parameter index: its gradient is final this step */
	int n_buckets;
	bucket *b;
	int64_t *offset;       /* per parameter index: where its values start in its bucket */
	int shard;             /* optimizer_sharding: the rings stop after their reduce-scatter
	                          hops, each rank updates the share whose sums it holds and the
	                          updated values go round after the update (hook_updated) */
	int hops_target;       /* the rings' hops this step: size - 1 when sharding (more when a
	                          step turns out not to be sharded: complete_rings), else
	                          2 (size - 1) */
	int sharded_step;      /* every rank can shard this step's update (amp_dist_shardable) */
	int *agree;            /* 1 + 2 n_params ints: what the ranks agree on after a sharded
	                          update (hook_updated) */
	int next_post;         /* first bucket not yet posted */
	int in_flight;         /* posted, not yet seen complete */
	int began;             /* a backward began the buckets, not all of them complete */
	int handed;            /* the sums are the parameters' gradients, and no amp_optim_step
	                          has taken them yet */
	double *buffers;       /* parameters without a gradient on any rank (BatchNorm's running
	                          statistics), averaged over the ranks: their values (n_buffer) */
	int64_t n_buffer;
	float *scratch;        /* largest parameter, fp32 (the broadcast) */
	char *text;            /* a value of same_keys, hashed each step (text_len bytes) */
	size_t text_len;
} dist;

enum { SAME_SLOTS = 6, SHARD_SLOT = SAME_SLOTS, EXTRA_SLOTS = SAME_SLOTS + 1 };
static int check_same(dist *d, amp_ctx *ctx, const char *who);
static void same_fingerprint(dist *d, amp_ctx *ctx, int64_t *slot);
static int same_everywhere(const dist *d, const int64_t *sum);

/* ---- buckets ------------------------------------------------------------------------------- */
static int64_t numel_of(amp_ctx *ctx, int i)
{
	return amp_tensor_numel(amp_param_at(ctx, i));
}

/* Elements of share s (0 <= s < size) of bucket bk. */
static int64_t share_len(const bucket *bk, int s)
{
	int64_t left = bk->elems - (int64_t)s * bk->chunk;
	return left <= 0 ? 0 : left < bk->chunk ? left : bk->chunk;
}

/* The share received (bk->in) added into share s of bucket bk.  On the ring's last adding hop
 * (last) the share's sums are final: its NaN/Inf values are counted too, into the counts of
 * the parameters whose values it holds, block by block while the sums are in L1 (one pass
 * over the share, not an add and then a count). */
#define ADD_BLOCK 4096
static void add_share(dist *d, const bucket *bk, int s, int last)
{
	size_t esz = amp_dtype_size(d->dtype);
	int64_t lo = (int64_t)s * bk->chunk, hi = lo + share_len(bk, s), at = 0;
	char *sum = bk->data;
	const char *in = (const char *)bk->in - (size_t)lo * esz; /* indexed as the payload */
	if (!last) {
		amp_dist_add(d->dtype, sum + (size_t)lo * esz, in + (size_t)lo * esz, hi - lo);
		return;
	}
	for (int k = bk->first; k < bk->first + bk->count && at < hi; k++) {
		int i = d->order[k];
		int64_t a = at > lo ? at : lo, b = at + d->numel[i] < hi ? at + d->numel[i] : hi;
		for (int64_t j = a; j < b; j += ADD_BLOCK) {
			int64_t n = b - j < ADD_BLOCK ? b - j : ADD_BLOCK;
			amp_dist_add(d->dtype, sum + (size_t)j * esz, in + (size_t)j * esz, n);
			d->bad[i] += amp_dist_count_nonfinite(d->dtype, sum + (size_t)j * esz, n);
		}
		at += d->numel[i];
	}
}

/* The bucket's gradients into its payload, converted where backward left them in another
 * dtype; a gradient the step did not reach contributes zeros.  A bucket of one parameter whose
 * gradient is already in the payload dtype is summed where it lies (the step's own copy,
 * which nothing reads before the optimizer).  Under a profiler, flags a local NaN/Inf
 * (counted by the runtime already where it could). */
static void pack(dist *d, amp_ctx *ctx, bucket *bk)
{
	size_t esz = amp_dtype_size(d->dtype);
	char *dst = bk->buf;
	bk->flags = 0;
	bk->data = bk->buf;
	for (int k = bk->first; k < bk->first + bk->count; k++) {
		int i = d->order[k];
		int64_t n = d->numel[i], bad;
		amp_dtype dt;
		const void *src = amp_param_grad_data(ctx, i, &dt, &bad);
		d->bad[d->n_params + i] = amp_param_has_grad(ctx, i);
		if (src && bad < 0 && amp_dist_tracing()) /* the flag is the profile's alone */
			bad = amp_dist_count_nonfinite(dt, src, n);
		if (src && bad > 0)
			bk->flags |= AMP_COMM_LOCAL_OVERFLOW;
		if (!src)
			memset(dst, 0, (size_t)n * esz);
		else if (bk->count == 1 && dt == d->dtype)
			bk->data = (void *)src;
		else if (amp_dist_convert(d->dtype, dst, dt, src, n) > 0 && amp_dist_tracing())
			bk->flags |= AMP_COMM_LOCAL_OVERFLOW; /* values the payload dtype cannot hold */
		dst += (size_t)n * esz;
	}
}

/* The sums become the gradients where they are: the optimizer reads the payload in place,
 * with the NaN/Inf counts of the ring (with one rank, it counts them itself), and divides by
 * the number of ranks. */
static int unpack(dist *d, amp_ctx *ctx, bucket *bk)
{
	size_t esz = amp_dtype_size(d->dtype);
	const char *src = bk->data;
	for (int k = bk->first; k < bk->first + bk->count; k++) {
		int i = d->order[k];
		/* a parameter no rank's tapes ever reached has no gradient, as in one process: the
		 * optimizer leaves it alone */
		int rc = d->bad[d->n_params + i] == 0
		             ? AMP_OK
		             : amp_param_grad_set(ctx, i, d->dtype, src, d->size > 1 ? d->bad[i] : -1);
		if (rc != AMP_OK)
			return rc;
		src += (size_t)d->numel[i] * esz;
	}
	return AMP_OK;
}

static int mpi_fail(amp_ctx *ctx, int err, const char *what)
{
	char msg[MPI_MAX_ERROR_STRING + 128], text[MPI_MAX_ERROR_STRING];
	int len = 0;
	text[0] = 0;
	MPI_Error_string(err, text, &len);
	snprintf(msg, sizeof msg, "amp_mpi: %s: %s", what, text);
	return amp_dist_fail(ctx, AMP_EIO, msg);
}

/* ---- the ring ------------------------------------------------------------------------------
 * A bucket is summed by a ring over the ranks, on MPI's point-to-point messages: the payload is
 * cut into one share per rank, and in each of size - 1 hops every rank sends a share to the
 * next rank and adds the one it receives from the previous rank into its own (after them,
 * rank r holds the whole sum of share r + 1); in size - 1 more hops the finished shares go
 * round and are copied in.  Each rank sends and receives 2 (size - 1) / size of the payload and
 * adds (size - 1) / size of it, with no copy of its own: what the bandwidth-bound all-reduce of
 * large buffers needs (MPI_Iallreduce's choice for few ranks reduces everything on one rank
 * and sends it back).  A share's sum is taken in the same order on every run, and every rank
 * ends with the same bits (the finished shares are copied, not summed again).  The hops of a
 * bucket travel under its index as the tag; MPI keeps messages of one tag in order. */
static int wrap(const dist *d, int s)
{
	return ((s % d->size) + d->size) % d->size;
}

static void *share(const dist *d, const bucket *bk, int s)
{
	return (char *)bk->data + (size_t)s * (size_t)bk->chunk * amp_dtype_size(d->dtype);
}

/* Posts hop bk->hop: its send to the next rank and its receive from the previous one. */
static int ring_post(dist *d, bucket *bk, int tag)
{
	int r = d->rank, p = d->size, h = bk->hop, gather = h >= p - 1;
	int next = (r + 1) % p, prev = (r + p - 1) % p;
	int so = wrap(d, gather ? r + 1 - (h - (p - 1)) : r - h);
	int si = wrap(d, gather ? r - (h - (p - 1)) : r - h - 1);
	void *in = gather ? share(d, bk, si) : bk->in;
	int err = MPI_Irecv(in, (int)share_len(bk, si), d->mpi_type, prev, tag, d->comm,
	                    &bk->req[1]);
	if (err == MPI_SUCCESS)
		err = MPI_Isend(share(d, bk, so), (int)share_len(bk, so), d->mpi_type, next, tag,
		                d->comm, &bk->req[0]);
	return err;
}

/* Moves bucket k's ring on: the hops that completed (all of them when wait) are finished and
 * the next ones posted.  Returns an MPI error code, MPI_SUCCESS while all is well. */
static int ring_advance(dist *d, int k, int wait)
{
	bucket *bk = &d->b[k];
	int p = d->size, hops = d->hops_target;
	while (bk->hop < hops) {
		int done = 1, err;
		err = wait ? MPI_Waitall(2, bk->req, MPI_STATUSES_IGNORE)
		           : MPI_Testall(2, bk->req, &done, MPI_STATUSES_IGNORE);
		if (err != MPI_SUCCESS)
			return err;
		if (!done)
			return MPI_SUCCESS;
		/* the share received joins this rank's own; after the last such hop it is the
		 * share's whole sum, which this rank counts */
		if (bk->hop < p - 1)
			add_share(d, bk, wrap(d, d->rank - bk->hop - 1), bk->hop == p - 2);
		if (++bk->hop < hops && (err = ring_post(d, bk, k)) != MPI_SUCCESS)
			return err;
	}
	return MPI_SUCCESS;
}

/* Bucket k leaves the flight: complete, or failed with err. */
static void land(dist *d, int k, int err)
{
	bucket *bk = &d->b[k];
	bk->t_end = amp_dist_clock();
	if (!bk->waited)
		bk->t_wait = bk->t_end;
	bk->err = err;
	bk->state = B_DONE;
	d->in_flight--;
}

/* Posts the buckets whose gradients are all final, in index order. */
static void post_ready(dist *d, amp_ctx *ctx)
{
	while (d->next_post < d->n_buckets) {
		int k = d->next_post;
		bucket *bk = &d->b[k];
		if (bk->ready < bk->count)
			return;
		pack(d, ctx, bk);
		bk->t_post = amp_dist_clock();
		bk->waited = 0;
		bk->hop = 0;
		bk->state = B_POSTED;
		d->in_flight++;
		d->next_post++;
		int err = d->size > 1 ? ring_post(d, bk, k) : MPI_SUCCESS;
		if (d->size == 1 || err != MPI_SUCCESS)
			land(d, k, err); /* an error comes back from reduce */
	}
}

static void test_posted(dist *d)
{
	for (int k = 0; k < d->next_post && d->in_flight > 0; k++) {
		bucket *bk = &d->b[k];
		if (bk->state != B_POSTED)
			continue;
		int err = ring_advance(d, k, 0);
		if (err != MPI_SUCCESS || bk->hop == d->hops_target)
			land(d, k, err);
	}
}

static void mark_ready(dist *d, int i)
{
	if (i < 0 || i >= d->n_params || d->ready[i])
		return;
	d->ready[i] = 1;
	d->b[d->bucket_of[i]].ready++;
}

/* Rings still in flight are completed: before their buffers are packed again, or the
 * communicator is freed. */
static void land_all(dist *d)
{
	for (int k = 0; k < d->n_buckets; k++)
		if (d->b[k].state == B_POSTED)
			land(d, k, ring_advance(d, k, 1));
}

/* The step's buckets start again from nothing. */
static void reset(dist *d)
{
	memset(d->ready, 0, (size_t)d->n_params);
	memset(d->bad, 0, 3 * (size_t)d->n_params * sizeof *d->bad);
	for (int k = 0; k < d->n_buckets; k++) {
		d->b[k].ready = 0;
		d->b[k].state = B_IDLE;
		d->b[k].data = d->b[k].buf;
	}
	d->next_post = 0;
	d->in_flight = 0;
	d->began = 0;
	d->handed = 0;
	d->hops_target = d->shard ? d->size - 1 : 2 * (d->size - 1);
	d->sharded_step = 0;
}

/* Every parameter's gradient is final (the tape is done, or there was none): the buckets not
 * posted yet are. */
static void post_all(dist *d, amp_ctx *ctx)
{
	for (int i = 0; i < d->n_params; i++)
		mark_ready(d, i);
	post_ready(d, ctx);
}

/* Parameter i has no gradient on any rank and its values moved on one at least: the forward
 * pass updates it in place (BatchNorm's running statistics). */
static int is_buffer(const dist *d, int i)
{
	return d->bad[d->n_params + i] == 0 && d->bad[2 * d->n_params + i] > 0;
}

/* The buffers: each rank's share of the data moved them differently, so they are averaged —
 * summed on rank 0 in double (exact for values that agree: those stay bit for bit), divided
 * there, rounded once to float and sent to every rank, so that every rank holds the same
 * bits.  Parameters without gradients that nothing writes (frozen ones) are left alone. */
static int average_buffers(dist *d, amp_ctx *ctx)
{
	int64_t n = 0;
	for (int i = 0; i < d->n_params; i++)
		if (is_buffer(d, i))
			n += d->numel[i];
	if (n == 0 || d->size == 1)
		return AMP_OK;
	if (n > d->n_buffer) {
		double *p = realloc(d->buffers, (size_t)n * 2 * sizeof *p);
		if (!p)
			return amp_dist_fail(ctx, AMP_ENOMEM, "out of memory");
		d->buffers = p;
		d->n_buffer = n;
	}
	double *mine = d->buffers, *sum = d->buffers + n;
	int64_t at = 0;
	for (int i = 0; i < d->n_params; i++) {
		if (!is_buffer(d, i))
			continue;
		const float *v = amp_tensor_data(amp_param_at(ctx, i));
		for (int64_t j = 0; j < d->numel[i]; j++)
			mine[at + j] = v[j];
		at += d->numel[i];
	}
	uint64_t t0 = amp_dist_clock();
	int err = MPI_Reduce(mine, sum, (int)n, MPI_DOUBLE, MPI_SUM, 0, d->comm);
	if (err == MPI_SUCCESS && d->rank == 0)
		for (int64_t j = 0; j < n; j++)
			sum[j] = (double)(float)(sum[j] / d->size);
	if (err == MPI_SUCCESS)
		err = MPI_Bcast(sum, (int)n, MPI_DOUBLE, 0, d->comm);
	if (err != MPI_SUCCESS)
		return mpi_fail(ctx, err, "averaging the parameters without gradients");
	uint64_t t1 = amp_dist_clock();
	amp_dist_trace(amp_step_index(ctx), AMP_COMM_ALLREDUCE, AMP_F32, -1,
	               (uint64_t)n * sizeof(float), t0, t0, t1, 0);
	at = 0;
	for (int i = 0; i < d->n_params; i++) {
		if (!is_buffer(d, i))
			continue;
		float *v = amp_tensor_data(amp_param_at(ctx, i));
		for (int64_t j = 0; j < d->numel[i]; j++)
			v[j] = (float)sum[at + j];
		at += d->numel[i];
		amp_param_moved(ctx, i); /* by the average, not by a step: it moves them no further */
	}
	return AMP_OK;
}

/* Completes the reductions of the step's backward (every bucket, the ones not posted yet too:
 * the other ranks are waiting on them), adds up the ranks' NaN/Inf counts, averages the
 * parameters without gradients and hands each parameter the sum over the ranks as its
 * gradient (amp_param_grad_set: where it lies in the payload).  Every rank calls it at the
 * same point of the same step: the end of its backward, or amp_optim_step in a step without
 * one. */
static int complete_rings(dist *d, amp_ctx *ctx);

static int finish(dist *d, amp_ctx *ctx)
{
	post_all(d, ctx);
	int rc = AMP_OK;
	for (int k = 0; k < d->n_buckets; k++) {
		bucket *bk = &d->b[k];
		if (bk->state == B_POSTED) {
			bk->t_wait = amp_dist_clock();
			bk->waited = 1;
			land(d, k, ring_advance(d, k, 1));
		}
		if (bk->err != MPI_SUCCESS && rc == AMP_OK)
			rc = mpi_fail(ctx, bk->err, "gradient all-reduce");
	}
	/* every rank counted the shares it finished: the sums' counts are the totals (and the
	 * ranks where each parameter has a gradient, where its values moved) */
	for (int i = 0; i < d->n_params; i++)
		d->bad[2 * d->n_params + i] = amp_param_moved(ctx, i);
	int64_t *same = d->bad + 3 * d->n_params;
	if (d->size > 1)
		same_fingerprint(d, ctx, same);
	same[SHARD_SLOT] = d->shard && amp_dist_shardable(ctx);
	int err = MPI_SUCCESS;
	int64_t step = amp_step_index(ctx);
	if (rc == AMP_OK && d->size > 1 &&
	    (err = MPI_Allreduce(MPI_IN_PLACE, d->bad, 3 * d->n_params + EXTRA_SLOTS, MPI_INT64_T,
	                         MPI_SUM, d->comm)) != MPI_SUCCESS)
		rc = mpi_fail(ctx, err, "NaN/Inf counts of the sums");
	d->sharded_step = rc == AMP_OK && d->shard && same[SHARD_SLOT] == d->size;
	/* a step that cannot be split hands whole sums, as without sharding */
	if (rc == AMP_OK && !d->sharded_step)
		rc = complete_rings(d, ctx);
	if (rc == AMP_OK && d->size > 1 && !same_everywhere(d, same)) {
		char who[48];
		snprintf(who, sizeof who, "amp_mpi (step %lld)", (long long)step);
		rc = check_same(d, ctx, who);
	}
	for (int k = 0; k < d->n_buckets; k++) {
		bucket *bk = &d->b[k];
		if (rc == AMP_OK)
			rc = unpack(d, ctx, bk);
		/* a sharded step's rings stop halfway: half the bytes (the rest go round after the
		 * update, complete_rings or hook_updated) */
		uint64_t bytes = (uint64_t)bk->elems * amp_dtype_size(d->dtype);
		if (d->shard)
			bytes /= 2; /* the other half's row: complete_rings' or hook_updated's */
		amp_dist_trace(step, AMP_COMM_ALLREDUCE, d->dtype, k, bytes, bk->t_post,
		               bk->waited ? bk->t_wait : bk->t_end, bk->t_end, bk->flags);
	}
	if (rc == AMP_OK)
		rc = average_buffers(d, ctx);
	d->began = 0;
	d->handed = rc == AMP_OK;
	return rc;
}

/* A step whose gradients were summed and that ends without amp_optim_step: every rank keeps
 * the mean, widened into its master gradient, so that the next steps add to what the ranks
 * have in common and their sum is what one process would have accumulated. */
static void keep_mean(dist *d, amp_ctx *ctx)
{
	for (int i = 0; i < d->n_params; i++) {
		if (d->bad[d->n_params + i] == 0)
			continue;
		amp_tensor *g = amp_tensor_grad(amp_param_at(ctx, i)); /* the sum, widened */
		if (g)
			amp_dist_scale(AMP_F32, amp_tensor_data(g), 1.0f / (float)d->size, d->numel[i]);
	}
}

static int check_params(dist *d, amp_ctx *ctx)
{
	return amp_param_count(ctx) == d->n_params
	           ? AMP_OK
	           : amp_dist_fail(ctx, AMP_ESTATE, "amp_mpi: parameters were added after "
	                                            "amp_mpi_attach");
}

static const amp_dist_ops mpi_ops;

/* ---- optimizer sharding ---------------------------------------------------------------------
 * With optimizer_sharding on, a step whose update every rank can split (amp_dist_shardable,
 * agreed in finish's all-reduce) leaves each rank with the sums of one share of every bucket
 * (the rings stop after their size - 1 adding hops), the share ring_advance's last adding hop
 * completes: share rank + 1.  The optimizer unscales, checks, clips and updates those elements
 * only (owned), the verdict and the clipping norm summed over the ranks (sum), and then every
 * rank sends the values it updated to the others (hook_updated): the working copies the
 * forward pass reads, or the masters (the ranks agree which, amp_param_shard_view).  The rest
 * of a rank's master and moments is then stale until amp_mpi_consolidate.  A step that cannot
 * be split completes its rings in finish and gathers what earlier steps left partial before
 * its update (hook_reduce); one that ends without an update completes them in step_end.
 * Each element is updated by the same arithmetic on the same sum either way, so the bits do
 * not change. */

/* Elements [*lo, *hi) of parameter i in share s of its bucket (empty: *lo == *hi). */
static void share_of_param(const dist *d, int i, int s, int64_t *lo, int64_t *hi)
{
	const bucket *bk = &d->b[d->bucket_of[i]];
	int64_t a = (int64_t)s * bk->chunk, b = a + share_len(bk, s), off = d->offset[i];
	a = a > off ? a : off;
	b = b < off + d->numel[i] ? b : off + d->numel[i];
	*lo = a < b ? a - off : 0;
	*hi = a < b ? b - off : 0;
}

/* The rings of a step that turned out not to be sharded go on to their gather hops, so that
 * every rank holds every sum (blocking: nothing is left to overlap them with). */
static int complete_rings(dist *d, amp_ctx *ctx)
{
	int full = 2 * (d->size - 1);
	if (d->hops_target == full)
		return AMP_OK;
	d->hops_target = full;
	for (int k = 0; k < d->n_buckets; k++) {
		bucket *bk = &d->b[k];
		if (bk->err != MPI_SUCCESS || bk->hop >= full)
			continue;
		uint64_t t0 = amp_dist_clock();
		int err = ring_post(d, bk, k);
		if (err == MPI_SUCCESS)
			err = ring_advance(d, k, 1);
		if (err != MPI_SUCCESS)
			return mpi_fail(ctx, err, "gradient all-reduce");
		uint64_t t1 = amp_dist_clock();
		amp_dist_trace(amp_step_index(ctx), AMP_COMM_ALLREDUCE, d->dtype, k,
		               (uint64_t)bk->elems * amp_dtype_size(d->dtype) / 2, t0, t0, t1, 0);
	}
	return AMP_OK;
}

static int hook_owned(void *state, amp_ctx *ctx, int i, int64_t *lo, int64_t *hi)
{
	(void)ctx;
	dist *d = state;
	*lo = 0;
	*hi = i >= 0 && i < d->n_params ? d->numel[i] : 0;
	if (!d->sharded_step || i < 0 || i >= d->n_params)
		return 0;
	share_of_param(d, i, wrap(d, d->rank + 1), lo, hi);
	return 1;
}

/* v summed over the ranks in rank order, the same bits on every rank (an MPI_SUM may add in
 * another order on each). */
static int hook_sum(void *state, amp_ctx *ctx, double *v)
{
	dist *d = state;
	double all[64], *each = d->size <= 64 ? all : malloc((size_t)d->size * sizeof *each);
	if (!each)
		return amp_dist_fail(ctx, AMP_ENOMEM, "out of memory");
	int err = MPI_Allgather(v, 1, MPI_DOUBLE, each, 1, MPI_DOUBLE, d->comm);
	if (err == MPI_SUCCESS) {
		*v = 0;
		for (int r = 0; r < d->size; r++)
			*v += each[r];
	}
	if (each != all)
		free(each);
	return err == MPI_SUCCESS ? AMP_OK : mpi_fail(ctx, err, "sharded update's sum");
}

/* The values at base (elements of esz bytes) of parameter i: every rank's share s = rank + 1
 * to every rank, in place, by a ring of size - 1 hops (each rank passes on the share it
 * received last), the same messages as the gradients' gather hops.  Only between the rings
 * (none in flight), so one tag serves. */
static int gather_shares(dist *d, int i, void *base, size_t esz)
{
	int next = wrap(d, d->rank + 1), prev = wrap(d, d->rank - 1);
	for (int h = 0; h < d->size - 1; h++) {
		int64_t slo, shi, rlo, rhi;
		share_of_param(d, i, wrap(d, d->rank + 1 - h), &slo, &shi);
		share_of_param(d, i, wrap(d, d->rank - h), &rlo, &rhi);
		int err = MPI_Sendrecv(
		    (char *)base + (size_t)slo * esz, (int)((shi - slo) * (int64_t)esz), MPI_BYTE,
		    next, 0, (char *)base + (size_t)rlo * esz, (int)((rhi - rlo) * (int64_t)esz),
		    MPI_BYTE, prev, 0, d->comm, MPI_STATUS_IGNORE);
		if (err != MPI_SUCCESS)
			return err;
	}
	return MPI_SUCCESS;
}

/* After a sharded update: first the ranks agree (one all-reduce) that every rank's update
 * succeeded and, per parameter, on the buffer to exchange: the working copies when every rank
 * names its working copy of one same dtype (amp_param_shard_view), else the masters; then each
 * rank's updated values go to every rank, bucket by bucket (a comm row each: half the bytes of
 * the exchanged buffers, the reduce-scatter's row having the other half). */
static int hook_updated(void *state, amp_ctx *ctx, int updated, int ok)
{
	dist *d = state;
	int sharded = d->sharded_step, n = d->n_params, *v = d->agree;
	d->sharded_step = 0;
	if (!sharded)
		return AMP_OK;
	v[0] = !ok;
	for (int i = 0; i < n; i++) {
		amp_dtype dt;
		void *b = amp_param_shard_view(ctx, i, &dt);
		int code = !b || dt == AMP_F32 ? -1 : (int)dt; /* -1: the master */
		v[1 + i] = code;
		v[1 + n + i] = -code;
	}
	int err = MPI_Allreduce(MPI_IN_PLACE, v, 1 + 2 * n, MPI_INT, MPI_MAX, d->comm);
	if (err != MPI_SUCCESS)
		return mpi_fail(ctx, err, "sharded update's agreement");
	if (v[0])
		return amp_dist_fail(ctx, AMP_EIO,
		                     "amp_mpi: a rank's part of the sharded update failed "
		                     "(its own error says why): the step fails on every "
		                     "rank");
	if (!updated)
		return AMP_OK;
	for (int k = 0; k < d->n_buckets; k++) {
		const bucket *bk = &d->b[k];
		uint64_t t0 = amp_dist_clock(), bytes = 0;
		amp_dtype dtype = AMP_F32;
		for (int j = bk->first; j < bk->first + bk->count; j++) {
			int i = d->order[j];
			if (!amp_param_has_grad(ctx, i))
				continue; /* not updated on any rank: nothing moved */
			/* the masters when a rank names its master, or the ranks' dtypes differ */
			int master = -v[1 + n + i] == -1 || v[1 + i] != -v[1 + n + i];
			amp_dtype dt = AMP_F32;
			void *buf = master ? amp_tensor_data(amp_param_at(ctx, i))
			                   : amp_param_shard_view(ctx, i, &dt);
			if ((err = gather_shares(d, i, buf, amp_dtype_size(dt))) != MPI_SUCCESS)
				return mpi_fail(ctx, err, "sharded update's exchange");
			amp_param_exchanged(ctx, i, master);
			bytes += (uint64_t)d->numel[i] * amp_dtype_size(dt);
			dtype = dt;
		}
		/* the second half of the bucket's all-reduce, as its reduce-scatter's row: half
		 * the payload, of the dtype exchanged */
		if (bytes)
			amp_dist_trace(amp_step_index(ctx), AMP_COMM_ALLREDUCE, dtype, k, bytes / 2,
			               t0, t0, amp_dist_clock(), 0);
	}
	return AMP_OK;
}

/* Every parameter's master and moments whole on every rank, when any rank has one partial. */
static int consolidate(dist *d, amp_ctx *ctx)
{
	int any = 0, all = 0;
	for (int i = 0; i < d->n_params; i++)
		any |= amp_param_master_partial(ctx, i);
	int err = MPI_Allreduce(&any, &all, 1, MPI_INT, MPI_MAX, d->comm);
	if (err != MPI_SUCCESS)
		return mpi_fail(ctx, err, "amp_mpi_consolidate");
	if (!all)
		return AMP_OK;
	for (int i = 0; i < d->n_params; i++) {
		float *w[3];
		int rc = amp_param_master_state(ctx, i, &w[0], &w[1], &w[2]);
		if (rc != AMP_OK)
			return amp_dist_fail(ctx, rc, "amp_mpi_consolidate: parameters changed");
		/* every rank gathers every parameter's: which ones a rank left partial depends on
		 * the shares it owns, and a collective needs them all */
		for (int s = 0; s < 3; s++) {
			/* moments exist alike on every rank (every rank's update makes them) */
			int have = w[s] != NULL;
			err = MPI_Allreduce(&have, &all, 1, MPI_INT, MPI_MIN, d->comm);
			if (err == MPI_SUCCESS && all)
				err = gather_shares(d, i, w[s], sizeof(float));
			if (err != MPI_SUCCESS)
				return mpi_fail(ctx, err, "amp_mpi_consolidate");
		}
		amp_param_master_gathered(ctx, i);
	}
	return AMP_OK;
}

int amp_mpi_consolidate(amp_ctx *ctx)
{
	dist *d = amp_dist_state(ctx, &mpi_ops);
	return d && d->shard ? consolidate(d, ctx) : AMP_OK;
}

static void hook_backward_begin(void *state, amp_ctx *ctx)
{
	(void)ctx;
	dist *d = state;
	land_all(d);
	reset(d);
	d->began = 1;
}

static void hook_grad_ready(void *state, amp_ctx *ctx, int i)
{
	dist *d = state;
	mark_ready(d, i);
	post_ready(d, ctx);
}

static void hook_progress(void *state, amp_ctx *ctx)
{
	(void)ctx;
	dist *d = state;
	if (d->in_flight)
		test_posted(d);
}

/* The rings still in flight complete when backward ends, not in amp_optim_step: nothing else
 * runs in between to overlap them with (MPI progresses them only inside its calls), and so
 * the gradients amp_backward leaves are the sums over the ranks, which the caller may read
 * and change (amp_tensor_grad) before amp_optim_step, as in one process (in a step the ranks
 * split, the sums of the rank's share only: amp_mpi.h). */
static int hook_backward_end(void *state, amp_ctx *ctx)
{
	dist *d = state;
	int rc = check_params(d, ctx);
	return rc != AMP_OK ? rc : finish(d, ctx);
}

static int hook_reduce(void *state, amp_ctx *ctx, double *divisor)
{
	dist *d = state;
	int rc = check_params(d, ctx);
	if (rc != AMP_OK)
		return rc;
	/* A step without backward (or one that ended early) still takes part in every collective:
	 * the other ranks are waiting on it.  Its gradients are what it has: zeros, or what
	 * earlier steps without an update left. */
	if (!d->began && !d->handed)
		hook_backward_begin(d, ctx);
	if (d->began)
		rc = finish(d, ctx);
	/* an update that is not split, after split ones, reads every element of the masters and
	 * moments: whole first */
	if (rc == AMP_OK && d->shard && !d->sharded_step)
		rc = consolidate(d, ctx);
	d->handed = 0; /* the optimizer takes them */
	*divisor = d->size;
	return rc;
}

/* A step that ends without amp_optim_step: reductions its backward left unfinished (it
 * failed) complete, and every rank keeps the mean gradient (keep_mean).  (Every rank must do
 * the same: a backward in the same steps, as any collective asks.)  One rank keeps its own
 * gradient: its payload, copy or not, holds nothing else. */
static int hook_step_end(void *state, amp_ctx *ctx)
{
	dist *d = state;
	int rc = AMP_OK;
	if (d->began && d->size > 1)
		rc = check_params(d, ctx) == AMP_OK ? finish(d, ctx) : AMP_ESTATE;
	if (rc == AMP_OK && d->handed && d->size > 1 && d->sharded_step) {
		/* the split step's rings go on to whole sums, handed again (a gradient read
		 * since took the share's sums alone) */
		rc = complete_rings(d, ctx);
		for (int k = 0; k < d->n_buckets && rc == AMP_OK; k++)
			rc = unpack(d, ctx, &d->b[k]);
		d->sharded_step = 0;
	}
	if (rc == AMP_OK && d->handed && d->size > 1)
		keep_mean(d, ctx);
	land_all(d); /* after an error: nothing of the step may still be written to */
	reset(d);
	return rc;
}

static void hook_detach(void *state, amp_ctx *ctx)
{
	(void)ctx;
	dist *d = state;
	int finalized = 0;
	MPI_Finalized(&finalized);
	if (!finalized) {
		land_all(d);
		MPI_Comm_free(&d->comm);
	}
	for (int k = 0; k < d->n_buckets; k++) {
		free(d->b[k].buf);
		free(d->b[k].in);
	}
	free(d->b);
	free(d->order);
	free(d->bucket_of);
	free(d->numel);
	free(d->bad);
	free(d->ready);
	free(d->offset);
	free(d->agree);
	free(d->scratch);
	free(d->buffers);
	free(d->text);
	free(d);
}

static const amp_dist_ops mpi_ops = {
    .backward_begin = hook_backward_begin,
    .grad_ready = hook_grad_ready,
    .progress = hook_progress,
    .backward_end = hook_backward_end,
    .reduce = hook_reduce,
    .step_end = hook_step_end,
    .detach = hook_detach,
    .owned = hook_owned,
    .sum = hook_sum,
    .updated = hook_updated,
};

/* Start-up barriers recorded for the clock alignment of `ampprof merge`. */
#define BARRIER_ROUNDS 5

/* ---- attach -------------------------------------------------------------------------------- */
static int make_buckets(dist *d, amp_ctx *ctx, int64_t cap_bytes)
{
	int n = d->n_params;
	d->order = calloc((size_t)n + 1, sizeof *d->order);
	d->bucket_of = calloc((size_t)n + 1, sizeof *d->bucket_of);
	d->numel = calloc((size_t)n + 1, sizeof *d->numel);
	d->bad = calloc(3 * (size_t)n + EXTRA_SLOTS, sizeof *d->bad);
	d->offset = calloc((size_t)n + 1, sizeof *d->offset);
	d->agree = calloc(2 * (size_t)n + 1, sizeof *d->agree);
	d->ready = calloc((size_t)n + 1, 1);
	d->b = calloc((size_t)n + 1, sizeof *d->b);
	if (!d->order || !d->bucket_of || !d->numel || !d->bad || !d->ready || !d->b ||
	    !d->offset || !d->agree)
		return AMP_ENOMEM;
	int64_t largest = 1;
	for (int k = 0; k < n; k++) {
		int i = n - 1 - k; /* newest first: the order backward finishes them */
		d->order[k] = i;
		int64_t e = d->numel[i] = numel_of(ctx, i);
		if (e > INT32_MAX / 4)
			d->shard = 0; /* a gather's byte counts are ints: not this one */
		if (e > largest)
			largest = e;
		bucket *bk = &d->b[d->n_buckets];
		/* a parameter of a bucket's size or more has one of its own: its gradient, when
		 * backward leaves it in the payload dtype, is then summed where it lies */
		if (bk->count > 0 && e * 4 >= cap_bytes)
			bk = &d->b[++d->n_buckets];
		if (bk->count == 0)
			bk->first = k;
		bk->count++;
		d->offset[i] = bk->elems;
		bk->elems += e;
		d->bucket_of[i] = d->n_buckets;
		if (bk->elems * 4 >= cap_bytes || k == n - 1)
			d->n_buckets++;
	}
	size_t esz = amp_dtype_size(d->dtype);
	for (int k = 0; k < d->n_buckets; k++) {
		bucket *bk = &d->b[k];
		if (bk->elems > INT32_MAX)
			return AMP_EINVAL;
		bk->chunk = (bk->elems + d->size - 1) / d->size;
		bk->buf = bk->data = malloc((size_t)bk->elems * esz + 1);
		bk->in = malloc((size_t)bk->chunk * esz);
		if (!bk->buf || !bk->in)
			return AMP_ENOMEM;
	}
	d->scratch = malloc((size_t)largest * sizeof(float));
	return d->scratch ? AMP_OK : AMP_ENOMEM;
}

/* What every rank must hold alike with rank 0: the all-reduce's settings (the rings exchange
 * buffers laid out by them), the training's (the payload is the gradient scaled by each
 * rank's own loss scale and divided by its accumulation; a rank in another precision mode
 * trains another model), and the state that decides the update: the loss scaler, the
 * optimizers (their learning rates and update counts, and the hyperparameters each update
 * used) and the checkpoints loaded.  Compared in full at attach; at every step a fingerprint
 * of it rides on the NaN/Inf counts' all-reduce (same_everywhere), and a difference is named
 * by the full comparison.  The checkpoints come before the state a load sets, so that a load
 * on one rank is named as that.  Values are amp_dist_shared_state's texts. */
typedef struct same_key {
	const char *name;
	const char *other; /* "another" or "other", before the name */
	const char *remedy;
} same_key;

#define SETTINGS "every rank needs the same settings (set alike on every rank, at the same step)"
static const same_key same_keys[] = {
    {"allreduce_dtype", "another", SETTINGS},
    {"allreduce_bucket_kb", "another", SETTINGS},
    {"optimizer_sharding", "another", SETTINGS},
    {"precision_mode", "another", SETTINGS},
    {"custom lists", "other", SETTINGS},
    {"loss_scale", "another", SETTINGS},
    {"loss_scale_init", "another", SETTINGS},
    {"loss_scale_growth_interval", "another", SETTINGS},
    {"loss_scale_growth_factor", "another", SETTINGS},
    {"loss_scale_backoff_factor", "another", SETTINGS},
    {"loss_scale_min", "another", SETTINGS},
    {"loss_scale_max", "another", SETTINGS},
    {"gradient_clipping", "another", SETTINGS},
    {"gradient_accumulation_steps", "another", SETTINGS},
    {"checkpoints", "other", "every rank loads the same checkpoint at the same point"},
    {"loss scaler", "another",
     "every rank starts from the same loss scaler (the same "
     "checkpoint loaded on every rank, or none)"},
    {"optimizers", "other",
     "every rank creates the same optimizers and changes them alike "
     "(amp_optim_set_lr at the same step)"},
    {"updates", "other",
     "every rank's updates use the same hyperparameters "
     "(amp_optim_set_lr on every rank at the same point of a step)"},
};
#undef SETTINGS
enum { N_SAME = sizeof same_keys / sizeof same_keys[0] };

static uint64_t hash_bytes(const char *s, size_t n)
{
	uint64_t h = 1469598103934665603u; /* FNV-1a */
	for (size_t i = 0; i < n; i++)
		h = (h ^ (unsigned char)s[i]) * 1099511628211u;
	return h;
}

static uint64_t hash_text(const char *s)
{
	return hash_bytes(s, s ? strlen(s) : 0);
}

/* The hash of key k's whole value on this rank (buf: scratch of len bytes, reallocated when
 * the value is longer; NULL when memory runs out, which hashes as an empty value). */
static uint64_t hash_value(amp_ctx *ctx, int k, char **buf, size_t *len)
{
	int n = amp_dist_shared_state(ctx, same_keys[k].name, *buf, *len);
	if (n >= 0 && (size_t)n >= *len) {
		char *b = realloc(*buf, (size_t)n + 1);
		if (!b)
			return 0;
		*buf = b;
		*len = (size_t)n + 1;
		n = amp_dist_shared_state(ctx, same_keys[k].name, *buf, *len);
	}
	return hash_bytes(*buf, n > 0 ? (size_t)n : 0);
}

/* Key k's value on this rank, malloc'ed (NULL when memory runs out). */
static char *value_of(amp_ctx *ctx, int k)
{
	int n = amp_dist_shared_state(ctx, same_keys[k].name, NULL, 0);
	char *v = malloc(n > 0 ? (size_t)n + 1 : 1);
	if (v)
		amp_dist_shared_state(ctx, same_keys[k].name, v, n > 0 ? (size_t)n + 1 : 1);
	return v;
}

/* Sends root's text (NULL: "") to every rank, where it returns malloc'ed (NULL when memory
 * runs out there). */
static int bcast_text(dist *d, const char *text, int root, char **out)
{
	int64_t n = d->rank == root && text ? (int64_t)strlen(text) : 0;
	int err = MPI_Bcast(&n, 1, MPI_INT64_T, root, d->comm);
	*out = err == MPI_SUCCESS ? calloc((size_t)n + 1, 1) : NULL;
	if (err == MPI_SUCCESS && *out && d->rank == root && text)
		memcpy(*out, text, (size_t)n);
	/* in chunks, the same on every rank: one without the memory takes part through scratch */
	char scratch[256];
	for (int64_t off = 0; err == MPI_SUCCESS && off < n; off += (int64_t)sizeof scratch) {
		int m = (int)(n - off < (int64_t)sizeof scratch ? n - off : (int64_t)sizeof scratch);
		char *at = d->rank == root && text ? (char *)text + off : *out ? *out + off : scratch;
		err = MPI_Bcast(at, m, MPI_CHAR, root, d->comm);
	}
	return err;
}

/* a and b for a message: whole when short, else from a little before where they first
 * differ, each cut to about 100 characters. */
static void excerpt(const char *a, const char *b, char *xa, char *xb, size_t len)
{
	size_t la = strlen(a), lb = strlen(b), i = 0, keep = 100, start;
	while (i < la && i < lb && a[i] == b[i])
		i++;
	start = la <= keep && lb <= keep ? 0 : i > 30 ? i - 30 : 0;
	snprintf(xa, len, "%s%.100s%s", start ? "..." : "", a + start, la - start > keep ? "..." : "");
	snprintf(xb, len, "%s%.100s%s", start ? "..." : "", b + start, lb - start > keep ? "..." : "");
}

/* Every rank has the same parameters (count and sizes) and same_keys as rank 0; who says
 * where the check runs ("amp_mpi_attach", "amp_mpi (step 12)") for the message, which every
 * rank gets, with both values. */
static int check_same(dist *d, amp_ctx *ctx, const char *who)
{
	/* the sizes hashed in unsigned arithmetic (it wraps; a signed product would overflow) */
	uint64_t h = 0;
	for (int i = 0; i < d->n_params; i++)
		h = h * 1000003u + (uint64_t)numel_of(ctx, i);
	int64_t mine[2 + N_SAME], root[2 + N_SAME];
	mine[0] = d->n_params;
	mine[1] = (int64_t)(h >> 1);
	char *buf = NULL;
	size_t len = 0;
	for (int k = 0; k < N_SAME; k++)
		mine[2 + k] = (int64_t)(hash_value(ctx, k, &buf, &len) >> 1);
	free(buf);
	memcpy(root, mine, sizeof root);
	int err = MPI_Bcast(root, 2 + N_SAME, MPI_INT64_T, 0, d->comm);
	if (err != MPI_SUCCESS)
		return mpi_fail(ctx, err, "parameter check");
	/* the first rank that differs, and where, for every rank's message */
	int what = -1;
	for (int k = 0; k < 2 + N_SAME && what < 0; k++)
		if (mine[k] != root[k])
			what = k < 2 ? 0 : k;
	int first[2] = {what >= 0 ? d->rank : d->size, 0}, any[2];
	err = MPI_Allreduce(first, any, 1, MPI_INT, MPI_MIN, d->comm);
	if (err == MPI_SUCCESS && any[0] < d->size) { /* what differs there */
		first[1] = d->rank == any[0] ? what : 0;
		err = MPI_Allreduce(&first[1], &any[1], 1, MPI_INT, MPI_MAX, d->comm);
	}
	char *there = NULL, *at0 = NULL;
	if (err == MPI_SUCCESS && any[0] < d->size && any[1] > 0) { /* both values, to all */
		char *v = d->rank == any[0] || d->rank == 0 ? value_of(ctx, any[1] - 2) : NULL;
		err = bcast_text(d, v, any[0], &there);
		if (err == MPI_SUCCESS)
			err = bcast_text(d, v, 0, &at0);
		free(v);
	}
	int rc = AMP_OK;
	if (err != MPI_SUCCESS) {
		rc = mpi_fail(ctx, err, "parameter check");
	} else if (any[0] < d->size && any[1] == 0) {
		char msg[400];
		snprintf(msg, sizeof msg, "%s: rank %d's parameters differ from rank 0's in number or "
		         "size (this rank, %d, has %d): every rank creates the same parameters in the "
		         "same order", who, any[0], d->rank, d->n_params);
		rc = amp_dist_fail(ctx, AMP_EINVAL, msg);
	} else if (any[0] < d->size) {
		const same_key *k = &same_keys[any[1] - 2];
		char xa[160], xb[160], msg[800];
		excerpt(there ? there : "?", at0 ? at0 : "?", xa, xb, sizeof xa);
		snprintf(msg, sizeof msg, "%s: rank %d has %s %s than rank 0 ('%s' there, '%s' on "
		         "rank 0): %s", who, any[0], k->other, k->name, xa, xb, k->remedy);
		rc = amp_dist_fail(ctx, AMP_EINVAL, msg);
	}
	free(there);
	free(at0);
	return rc;
}

/* The fingerprint of same_keys at this step: three 16-bit words of their hashes, each with its
 * square, added up over the ranks by the NaN/Inf counts' all-reduce (dist.bad).  The words
 * are short so that the sums cannot overflow: below 2^31 ranks, 2^31 * 2^32 < 2^63. */
static void same_fingerprint(dist *d, amp_ctx *ctx, int64_t *slot)
{
	uint64_t h = 0;
	for (int k = 0; k < N_SAME; k++)
		h = h * 1099511628211u ^ hash_value(ctx, k, &d->text, &d->text_len);
	for (int w = 0; w < SAME_SLOTS / 2; w++) {
		int64_t x = (int64_t)((h >> (16 * w)) & 0xFFFF);
		slot[2 * w] = x;
		slot[2 * w + 1] = x * x;
	}
}

/* Whether the ranks' fingerprints, summed, are all the same: for n values x_r, n sum(x_r^2)
 * equals (sum x_r)^2 exactly when they are (Cauchy-Schwarz).  (sum x_r)^2 < 2^62 below 2^15
 * ranks; in 128 bits for more. */
__extension__ typedef __int128 i128;
static int same_everywhere(const dist *d, const int64_t *sum)
{
	for (int w = 0; w < SAME_SLOTS / 2; w++) {
		i128 s = sum[2 * w], s2 = sum[2 * w + 1];
		if ((i128)d->size * s2 != s * s)
			return 0;
	}
	return 1;
}

static int broadcast(dist *d, amp_ctx *ctx)
{
	uint64_t t0 = amp_dist_clock(), bytes = 0;
	for (int i = 0; i < d->n_params; i++) {
		amp_tensor *w = amp_param_at(ctx, i);
		int64_t n = amp_tensor_numel(w);
		memcpy(d->scratch, amp_tensor_data(w), (size_t)n * sizeof(float));
		int err = MPI_Bcast(d->scratch, (int)n, MPI_FLOAT, 0, d->comm);
		if (err != MPI_SUCCESS)
			return mpi_fail(ctx, err, "parameter broadcast");
		int rc = amp_param_load(ctx, w, d->scratch);
		if (rc != AMP_OK)
			return rc;
		bytes += (uint64_t)n * sizeof(float);
		amp_param_moved(ctx, i); /* the same values on every rank now */
	}
	uint64_t t1 = amp_dist_clock();
	amp_dist_trace(-1, AMP_COMM_BROADCAST, AMP_F32, -1, bytes, t0, t0, t1, 0);
	return AMP_OK;
}

/* The run's profile meta: rank, world size, the all-reduce settings, and a run id rank 0
 * draws and every rank records, by which ampprof merge tells the ranks of one run from
 * profiles of another. */
static int note_meta(dist *d, amp_ctx *ctx)
{
	char v[64];
	uint64_t id = 0;
	if (d->rank == 0) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		snprintf(v, sizeof v, "%lld.%ld.%ld", (long long)ts.tv_sec, ts.tv_nsec, (long)getpid());
		id = hash_text(v);
	}
	int err = MPI_Bcast(&id, 1, MPI_UINT64_T, 0, d->comm);
	if (err != MPI_SUCCESS)
		return mpi_fail(ctx, err, "run id");
	snprintf(v, sizeof v, "%016llx", (unsigned long long)id);
	amp_dist_meta("run_id", v);
	snprintf(v, sizeof v, "%d", d->rank);
	amp_dist_meta("rank", v);
	snprintf(v, sizeof v, "%d", d->size);
	amp_dist_meta("world_size", v);
	amp_dist_meta("allreduce_dtype", amp_dtype_name(d->dtype));
	amp_dist_meta("allreduce_bucket_kb", amp_config_get(ctx, "allreduce_bucket_kb"));
	amp_dist_meta("optimizer_sharding", d->shard ? "on" : "off");
	snprintf(v, sizeof v, "%d", d->n_buckets);
	amp_dist_meta("allreduce_buckets", v);
	return AMP_OK;
}

int amp_mpi_attach(amp_ctx *ctx, MPI_Comm comm)
{
	if (!ctx)
		return AMP_EINVAL;
	int inited = 0;
	MPI_Initialized(&inited);
	if (!inited)
		return amp_dist_fail(ctx, AMP_ESTATE, "amp_mpi_attach: call MPI_Init first");
	if (amp_dist_state(ctx, &mpi_ops))
		return amp_dist_fail(ctx, AMP_ESTATE, "amp_mpi_attach: already attached");
	dist *d = calloc(1, sizeof *d);
	if (!d)
		return amp_dist_fail(ctx, AMP_ENOMEM, "out of memory");
	int err = MPI_Comm_dup(comm, &d->comm);
	if (err != MPI_SUCCESS) {
		free(d);
		return mpi_fail(ctx, err, "MPI_Comm_dup");
	}
	MPI_Comm_set_errhandler(d->comm, MPI_ERRORS_RETURN);
	MPI_Comm_rank(d->comm, &d->rank);
	MPI_Comm_size(d->comm, &d->size);
	d->n_params = amp_param_count(ctx);
	const char *dt = amp_config_get(ctx, "allreduce_dtype");
	d->dtype = strcmp(dt, "fp16") == 0 ? AMP_F16 : strcmp(dt, "bf16") == 0 ? AMP_BF16 : AMP_F32;
	d->mpi_type = d->dtype == AMP_F32 ? MPI_FLOAT : MPI_UINT16_T;
	int64_t kb = strtoll(amp_config_get(ctx, "allreduce_bucket_kb"), NULL, 10);
	d->shard = d->size > 1 && strcmp(amp_config_get(ctx, "optimizer_sharding"), "on") == 0;
	int rc = make_buckets(d, ctx, kb * 1024);
	reset(d);
	if (rc != AMP_OK) {
		hook_detach(d, ctx);
		return amp_dist_fail(ctx, rc, rc == AMP_ENOMEM ? "out of memory"
		                                               : "amp_mpi_attach: a bucket over 2^31 values");
	}
	rc = check_same(d, ctx, "amp_mpi_attach");
	if (rc == AMP_OK)
		rc = note_meta(d, ctx);
	/* The start-up barriers: every rank leaves each at about the same instant, which is what
	 * the merge of the ranks' profiles aligns their clocks on (the median over the rounds, so
	 * that a rank descheduled on its way out of one does not move the others). */
	for (int round = 0; rc == AMP_OK && round < BARRIER_ROUNDS; round++) {
		uint64_t t0 = amp_dist_clock();
		if ((err = MPI_Barrier(d->comm)) != MPI_SUCCESS)
			rc = mpi_fail(ctx, err, "start-up barrier");
		uint64_t t1 = amp_dist_clock();
		amp_dist_trace(-1, AMP_COMM_BARRIER, AMP_F32, round, 0, t0, t0, t1, 0);
	}
	if (rc == AMP_OK)
		rc = broadcast(d, ctx);
	if (rc == AMP_OK)
		rc = amp_dist_attach(ctx, &mpi_ops, d);
	if (rc != AMP_OK)
		hook_detach(d, ctx);
	return rc;
}

int amp_mpi_rank(const amp_ctx *ctx)
{
	const dist *d = amp_dist_state(ctx, &mpi_ops);
	return d ? d->rank : 0;
}

int amp_mpi_size(const amp_ctx *ctx)
{
	const dist *d = amp_dist_state(ctx, &mpi_ops);
	return d ? d->size : 1;
}

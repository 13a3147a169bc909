/* dist_cases.c — small data-parallel trainings (amp/amp_mpi.h) for the end-to-end tests.
 *
 * A 64-128-128-10 ReLU MLP fitted on a fixed synthetic data set with SGD and momentum.  Every
 * step takes a global batch of --batch samples; under --dist (mpirun -np N) each rank trains on
 * its contiguous share of it, otherwise the one process trains on the whole batch, so that the
 * two can be compared weight for weight.
 *   dist_cases [--dist] [--steps N] [--batch B] [--overflow-rank R --overflow-step S]
 *              [--die-rank R --die-step S] [--split-bias] [--micro M] [--skip-update S]
 *              [--unused] [--no-backward S [--no-backward-rank R]] [--freeze P] [--bn]
 *              [--weights FILE] [--lr-rank R --lr-step S [--lr-between]]
 *              [--set KEY=VALUE --set-step S
 *              [--set-rank R]] [--save FILE] [--load FILE [--load-rank R] [--load-first]]
 *              [--no-consolidate]
 * --overflow-rank R --overflow-step S put a huge value into rank R's inputs at step S, so that
 * only that rank's gradients overflow (under allow_mix_precision the FP16 GEMM sees it).
 * --die-rank R --die-step S: rank R kills itself with SIGKILL at the start of step S (the
 * other ranks then wait at the next all-reduce until the launcher ends them).
 * --split-bias makes fc3's bias a Concat of five parameters of two elements each: a tape node
 * with more inputs than it lists, whose parameters are reduced all the same.
 * --micro M trains each step's share in M micro-batches (gradient_accumulation_steps M): the
 * ranks reduce once, after the last.  --skip-update S ends step S without amp_optim_step (its
 * all-reduce is left in flight for the step's end to complete).  --unused adds a parameter
 * of 8 values that no op reads (written last with --weights) and a weight decay of 0.01: the
 * optimizer must leave it alone, as it does in one process.
 * --no-backward S: step S runs forward only (on rank R alone with --no-backward-rank R), its
 * update as usual.  A rank whose share of
 * the batch is empty (more ranks than samples) runs no forward and takes part in the update.
 * --freeze P zeroes parameter P's gradient (registration order) between amp_backward and
 * amp_optim_step, through amp_tensor_grad, on every rank: the parameter keeps its values, as
 * in one process.  --bn puts a BatchNorm over fc1's outputs (its running mean and variance,
 * parameters without gradients, written last with --weights).
 * --lr-rank R --lr-step S: rank R alone lowers the learning rate to 0.01 before step S; with
 * --lr-between, between that step's backward and its update, and back to 0.05 after it.
 * --set KEY=VALUE --set-step S: amp_config_set before step S, on every rank or on rank R alone
 * (--set-rank R).  --save FILE writes a checkpoint at the end (rank 0; every rank its own
 * when FILE has "%r"); --load FILE loads one after amp_mpi_attach (before it with
 * --load-first), on every rank or on rank R alone (--load-rank R); "%r" is the rank.
 * --weights FILE writes the FP32 master weights (every parameter, registration order, raw
 * little-endian floats) at the end; "%r" in FILE is the rank.  Under --dist every rank calls
 * amp_mpi_consolidate after the last step (optimizer_sharding leaves the masters partial),
 * unless --no-consolidate.  Each step prints one line
 * "step S loss L scale X skipped K" (rank 0 only unless --all-ranks).  The precision mode and
 * the all-reduce dtype come from AMP_PRECISION_MODE and AMP_ALLREDUCE_DTYPE.
 */
#include <amp/amp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef AMP_HAVE_MPI
#include <amp/amp_mpi.h>
#endif

#define IN 64
#define HID 128
#define OUT 10
#define DATA 512

typedef struct opts {
	int dist, steps, batch, overflow_rank, overflow_step, all_ranks, die_rank, die_step,
	    split_bias, micro, skip_update, unused, no_backward, no_backward_rank, freeze, bn,
	    lr_rank, lr_step, lr_between, set_step, set_rank, load_rank, load_first, no_consolidate;
	const char *weights, *set, *save, *load;
} opts;

static float g_x[DATA * IN];
static int32_t g_y[DATA];

static void make_data(void)
{
	uint64_t s = 12345;
	for (int i = 0; i < DATA * IN; i++) {
		s = s * 6364136223846793005ull + 1442695040888963407ull;
		g_x[i] = (float)((double)(s >> 40) / 16777216.0 * 2 - 1);
	}
	for (int i = 0; i < DATA; i++) /* a label the inputs decide */
		g_y[i] = (int32_t)(((g_x[i * IN] > 0) * 5 + (int)((g_x[i * IN + 1] + 1) * 2.5f)) % OUT);
}

static int parse(int argc, char **argv, opts *o)
{
	*o = (opts){.steps = 20,
	            .batch = 32,
	            .overflow_rank = -1,
	            .overflow_step = -1,
	            .die_rank = -1,
	            .die_step = -1,
	            .micro = 1,
	            .skip_update = -1,
	            .no_backward = -1,
	            .no_backward_rank = -1,
	            .freeze = -1,
	            .lr_rank = -1,
	            .lr_step = -1,
	            .set_step = -1,
	            .set_rank = -1,
	            .load_rank = -1};
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (strcmp(a, "--dist") == 0)
			o->dist = 1;
		else if (strcmp(a, "--all-ranks") == 0)
			o->all_ranks = 1;
		else if (strcmp(a, "--split-bias") == 0)
			o->split_bias = 1;
		else if (strcmp(a, "--unused") == 0)
			o->unused = 1;
		else if (strcmp(a, "--bn") == 0)
			o->bn = 1;
		else if (v && strcmp(a, "--freeze") == 0)
			o->freeze = atoi(argv[++i]);
		else if (v && strcmp(a, "--steps") == 0)
			o->steps = atoi(argv[++i]);
		else if (v && strcmp(a, "--batch") == 0)
			o->batch = atoi(argv[++i]);
		else if (v && strcmp(a, "--overflow-rank") == 0)
			o->overflow_rank = atoi(argv[++i]);
		else if (v && strcmp(a, "--overflow-step") == 0)
			o->overflow_step = atoi(argv[++i]);
		else if (v && strcmp(a, "--die-rank") == 0)
			o->die_rank = atoi(argv[++i]);
		else if (v && strcmp(a, "--die-step") == 0)
			o->die_step = atoi(argv[++i]);
		else if (v && strcmp(a, "--skip-update") == 0)
			o->skip_update = atoi(argv[++i]);
		else if (v && strcmp(a, "--no-backward") == 0)
			o->no_backward = atoi(argv[++i]);
		else if (v && strcmp(a, "--no-backward-rank") == 0)
			o->no_backward_rank = atoi(argv[++i]);
		else if (v && strcmp(a, "--micro") == 0)
			o->micro = atoi(argv[++i]);
		else if (v && strcmp(a, "--weights") == 0)
			o->weights = argv[++i];
		else if (v && strcmp(a, "--lr-rank") == 0)
			o->lr_rank = atoi(argv[++i]);
		else if (v && strcmp(a, "--lr-step") == 0)
			o->lr_step = atoi(argv[++i]);
		else if (v && strcmp(a, "--set") == 0 && strchr(v, '='))
			o->set = argv[++i];
		else if (v && strcmp(a, "--set-step") == 0)
			o->set_step = atoi(argv[++i]);
		else if (v && strcmp(a, "--set-rank") == 0)
			o->set_rank = atoi(argv[++i]);
		else if (v && strcmp(a, "--save") == 0)
			o->save = argv[++i];
		else if (v && strcmp(a, "--load") == 0)
			o->load = argv[++i];
		else if (v && strcmp(a, "--load-rank") == 0)
			o->load_rank = atoi(argv[++i]);
		else if (strcmp(a, "--load-first") == 0)
			o->load_first = 1;
		else if (strcmp(a, "--no-consolidate") == 0)
			o->no_consolidate = 1;
		else if (strcmp(a, "--lr-between") == 0)
			o->lr_between = 1;
		else {
			fprintf(stderr, "dist_cases: unknown argument '%s'\n", a);
			return 2;
		}
	}
	if (o->batch < 1 || o->batch > DATA || o->steps < 1 || o->micro < 1) {
		fprintf(stderr, "dist_cases: --batch 1..%d, --steps >= 1, --micro >= 1\n", DATA);
		return 2;
	}
	return 0;
}

/* pattern with "%r" replaced by the rank, in path (512 bytes). */
static const char *rank_path(char *path, const char *pattern, int rank)
{
	const char *r = strstr(pattern, "%r");
	if (r)
		snprintf(path, 512, "%.*s%d%s", (int)(r - pattern), pattern, rank, r + 2);
	else
		snprintf(path, 512, "%s", pattern);
	return path;
}

static int write_weights(amp_ctx *ctx, amp_tensor **p, int n, const char *pattern, int rank)
{
	char path[512];
	FILE *f = fopen(rank_path(path, pattern, rank), "wb");
	if (!f)
		return 1;
	for (int i = 0; i < n; i++) {
		int64_t k = amp_tensor_numel(p[i]);
		float *buf = malloc((size_t)k * sizeof(float));
		if (!buf || amp_tensor_read_f32(ctx, p[i], buf) != AMP_OK ||
		    fwrite(buf, sizeof(float), (size_t)k, f) != (size_t)k) {
			free(buf);
			fclose(f);
			return 1;
		}
		free(buf);
	}
	return fclose(f) != 0;
}

#define CHECK(call)                                                                               \
	do {                                                                                      \
		if ((call) != AMP_OK) {                                                               \
			fprintf(stderr, "dist_cases: rank %d: %s: %s\n", rank, #call,                     \
			        amp_ctx_error(ctx));                                                      \
			goto out;                                                                         \
		}                                                                                     \
	} while (0)

int main(int argc, char **argv)
{
	opts o;
	int rc = parse(argc, argv, &o), rank = 0, size = 1, status = 1;
	if (rc)
		return rc;
#ifdef AMP_HAVE_MPI
	if (o.dist) {
		MPI_Init(&argc, &argv);
		MPI_Comm_rank(MPI_COMM_WORLD, &rank);
		MPI_Comm_size(MPI_COMM_WORLD, &size);
	}
#else
	if (o.dist) {
		fprintf(stderr, "dist_cases: built without MPI\n");
		return 1;
	}
#endif
	make_data();
	amp_ctx *ctx = NULL;
	char err[256];
	if (amp_ctx_new(NULL, &ctx, err, sizeof err) != AMP_OK) {
		fprintf(stderr, "dist_cases: %s\n", err);
		goto out;
	}
	amp_tensor *p[15]; /* fc3.bias is p[5], or p[5..9] with --split-bias; then "unused", then
	                      BatchNorm's gamma, beta, running mean and variance */
	int np = o.split_bias ? 10 : 6;
	amp_optim *opt;
	/* Rank 0's seed makes the weights; the others start elsewhere until the broadcast. */
	char seed[16];
	snprintf(seed, sizeof seed, "%d", 7 + rank);
	CHECK(amp_config_set(ctx, "seed", seed));
	char micro[16];
	snprintf(micro, sizeof micro, "%d", o.micro);
	CHECK(amp_config_set(ctx, "gradient_accumulation_steps", micro));
	CHECK(amp_param_new(ctx, "fc1", amp_shape2(HID, IN), AMP_INIT_KAIMING, 1, &p[0]));
	CHECK(amp_param_new(ctx, "fc1.bias", amp_shape1(HID), AMP_INIT_UNIFORM, 0.1f, &p[1]));
	CHECK(amp_param_new(ctx, "fc2", amp_shape2(HID, HID), AMP_INIT_KAIMING, 1, &p[2]));
	CHECK(amp_param_new(ctx, "fc2.bias", amp_shape1(HID), AMP_INIT_UNIFORM, 0.1f, &p[3]));
	CHECK(amp_param_new(ctx, "fc3", amp_shape2(OUT, HID), AMP_INIT_KAIMING, 1, &p[4]));
	if (!o.split_bias)
		CHECK(amp_param_new(ctx, "fc3.bias", amp_shape1(OUT), AMP_INIT_ZEROS, 0, &p[5]));
	for (int i = 0; i < np - 5 && o.split_bias; i++) {
		char name[32];
		snprintf(name, sizeof name, "fc3.bias.%d", i);
		CHECK(amp_param_new(ctx, name, amp_shape1(OUT / 5), AMP_INIT_ZEROS, 0, &p[5 + i]));
	}
	if (o.unused)
		CHECK(amp_param_new(ctx, "unused", amp_shape1(8), AMP_INIT_UNIFORM, 0.5f, &p[np++]));
	int bn = np;
	if (o.bn) {
		CHECK(amp_param_new(ctx, "bn.gamma", amp_shape1(HID), AMP_INIT_ONES, 0, &p[np++]));
		CHECK(amp_param_new(ctx, "bn.beta", amp_shape1(HID), AMP_INIT_ZEROS, 0, &p[np++]));
		CHECK(amp_param_new(ctx, "bn.mean", amp_shape1(HID), AMP_INIT_ZEROS, 0, &p[np++]));
		CHECK(amp_param_new(ctx, "bn.var", amp_shape1(HID), AMP_INIT_ONES, 0, &p[np++]));
	}
	CHECK(amp_optim_sgd_new(ctx,
	                        &(amp_sgd_options){.lr = 0.05f, .momentum = 0.9f,
	                                           .weight_decay = o.unused ? 0.01f : 0.0f},
	                        &opt));
	int load = o.load && (o.load_rank < 0 || rank == o.load_rank);
	char ck[512];
	if (load && o.load_first)
		CHECK(amp_checkpoint_load(ctx, rank_path(ck, o.load, rank)));
#ifdef AMP_HAVE_MPI
	if (o.dist)
		CHECK(amp_mpi_attach(ctx, MPI_COMM_WORLD));
#endif
	if (load && !o.load_first)
		CHECK(amp_checkpoint_load(ctx, rank_path(ck, o.load, rank)));
	float *x = malloc((size_t)o.batch * IN * sizeof(float));
	if (!x)
		goto out;
	for (int step = 0; step < o.steps; step++) {
		int start = (step * o.batch) % (DATA - o.batch + 1);
		int lo = o.batch * rank / size, hi = o.batch * (rank + 1) / size, n = hi - lo;
		memcpy(x, g_x + (size_t)(start + lo) * IN, (size_t)n * IN * sizeof(float));
		if (rank == o.die_rank && step == o.die_step) {
			fflush(stdout);
			raise(SIGKILL);
		}
		if (rank == o.overflow_rank && step == o.overflow_step)
			x[3] = 3e38f;
		int lr_here = rank == o.lr_rank && step == o.lr_step;
		if (lr_here && !o.lr_between)
			amp_optim_set_lr(opt, 0.01f);
		if (o.set && step == o.set_step && (o.set_rank < 0 || rank == o.set_rank)) {
			char key[64];
			snprintf(key, sizeof key, "%.*s", (int)(strchr(o.set, '=') - o.set), o.set);
			CHECK(amp_config_set(ctx, key, strchr(o.set, '=') + 1));
		}
		amp_tensor *xt, *yt, *h1, *a1, *h2, *a2, *b3 = p[5], *lg, *l = NULL;
		int skipped = 0;
		CHECK(amp_step_begin(ctx));
		int backward =
		    step != o.no_backward || (o.no_backward_rank >= 0 && rank != o.no_backward_rank);
		for (int mb = 0; n > 0 && mb < o.micro; mb++) { /* the rank's share in o.micro micro-batches */
			int m0 = n * mb / o.micro, m = n * (mb + 1) / o.micro - m0;
			if (o.micro > 1)
				CHECK(amp_micro_batch_begin(ctx));
			CHECK(amp_tensor_from_f32(ctx, x + (size_t)m0 * IN, amp_shape2(m, IN), AMP_F32,
			                          &xt));
			CHECK(amp_tensor_from_i32(ctx, g_y + start + lo + m0, amp_shape1(m), &yt));
			CHECK(amp_linear(ctx, "fc1", xt, p[0], p[1], &h1));
			if (o.bn) {
				amp_tensor *h4, *n4;
				CHECK(amp_reshape(ctx, "bn.in", h1, amp_shape4(m, HID, 1, 1), &h4));
				CHECK(amp_batch_norm2d(ctx, "bn", h4, p[bn], p[bn + 1], p[bn + 2], p[bn + 3],
				                       0.1f, 1e-5f, &n4));
				CHECK(amp_reshape(ctx, "bn.out", n4, amp_shape2(m, HID), &h1));
			}
			CHECK(amp_relu(ctx, "relu1", h1, &a1));
			CHECK(amp_linear(ctx, "fc2", a1, p[2], p[3], &h2));
			CHECK(amp_relu(ctx, "relu2", h2, &a2));
			if (o.split_bias)
				CHECK(amp_concat(ctx, "fc3.bias", p + 5, 5, 0, &b3));
			CHECK(amp_linear(ctx, "fc3", a2, p[4], b3, &lg));
			CHECK(amp_cross_entropy(ctx, "loss", lg, yt, &l));
			if (backward)
				CHECK(amp_backward(ctx, l));
		}
		if (o.freeze >= 0 && o.freeze < np && backward && n > 0) {
			amp_tensor *g = amp_tensor_grad(p[o.freeze]);
			if (g)
				memset(amp_tensor_data(g), 0, (size_t)amp_tensor_numel(g) * sizeof(float));
		}
		double scale = amp_loss_scale(ctx);
		if (lr_here && o.lr_between)
			amp_optim_set_lr(opt, 0.01f);
		if (step != o.skip_update)
			CHECK(amp_optim_step(opt, &skipped));
		if (lr_here && o.lr_between)
			amp_optim_set_lr(opt, 0.05f);
		double loss = l ? amp_tensor_item(ctx, l) : 0.0;
		amp_step_set_samples(ctx, n);
		CHECK(amp_step_end(ctx));
		if (rank == 0 || o.all_ranks)
			printf("rank %d step %d loss %.9g scale %.9g skipped %d\n", rank, step, loss, scale,
			       skipped);
	}
	free(x);
#ifdef AMP_HAVE_MPI
	if (o.dist && !o.no_consolidate)
		CHECK(amp_mpi_consolidate(ctx));
#endif
	if (o.save && (rank == 0 || strstr(o.save, "%r")))
		CHECK(amp_checkpoint_save(ctx, rank_path(ck, o.save, rank)));
	if (o.weights && write_weights(ctx, p, np, o.weights, rank)) {
		fprintf(stderr, "dist_cases: cannot write %s\n", o.weights);
		goto out;
	}
	status = 0;
out:
	amp_ctx_free(ctx);
#ifdef AMP_HAVE_MPI
	if (o.dist && status != 0) /* the other ranks may be waiting on this one: end them too */
		MPI_Abort(MPI_COMM_WORLD, 1);
	if (o.dist)
		MPI_Finalize();
#endif
	return status;
}

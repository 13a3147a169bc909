/* runtime_cases.c — small real trainings through libamprt for ampprof's end-to-end tests: the
 * cases the examples do not cover.
 *
 * Each step fits y = log(x w^T * x w^T + c) to nothing in particular (the loss is its mean):
 * Linear runs in FP16 under AMP, Log in FP32 (black list).  c is 1, except on the --bad-step
 * steps where it is -100, so that Log gets negative inputs: NaN with no Inf, from finite inputs
 * (an invalid operation, not an overflow).  The loss is then NaN, the gradients too, and the
 * loss scaler skips the step.
 *   runtime_cases [--steps N] [--bad-step S]... [--threads T] [--procs P] [--fork-at S]
 *                 [--orphan-at S] [--die-at S] [--chdir DIR] [--label-prefix P] [--serial K]
 *                 [--exec N] [--exec-live N] [--interleave K] [--hand-off T]
 * --threads T trains T contexts at once, one per thread (each its own trace ring); --procs P
 * trains P contexts at once, one per child process.  --fork-at S forks at step S: the child
 * goes on training the parent's context to the last step, while the parent waits for it and
 * stops.  --orphan-at S forks at step S too, but the parent exits 0 at once: the child, an
 * orphan, trains to the last step.  --die-at S: the process training at step S kills itself
 * with SIGKILL there.  --chdir DIR changes the working directory before the first step (dumps must
 * still reach the spool).  --label-prefix P puts P before every op's label (hostile text for the
 * tools' outputs: escapes, newlines, invalid UTF-8).  --serial K trains K contexts one after
 * another in each thread (each made, trained for --steps and freed).  --exec N: then the process
 * execs itself with --exec N-1 (N more images of it, one after another, in one process).
 * --exec-live N: the same, but each image execs right after its last step, its context not
 * freed (no end of it reported: the next image's reports tell that it is gone).
 * --interleave K: K contexts alive at once in one thread, trained step by step in turn.
 * --hand-off T: one context made by the main thread, trained for --steps steps by each of T
 * threads in turn (one after another), then freed by the main thread.
 */
#include <amp/amp.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define BATCH 16
#define FEATURES 8
#define MAX_BAD 8
#define MAX_THREADS 32

typedef struct cases_opts {
	int steps, threads, procs, fork_at, n_bad;
	int bad[MAX_BAD];
	int serial, orphan_at, die_at;
} cases_opts;

static cases_opts g_opts = {6, 1, 0, -1, 0, {0}, 1, -1, -1};
static const char *g_prefix = "";
static char **g_argv;       /* the command line, for --exec and --exec-live */
static int g_exec_more = 0; /* images still to exec */
static int g_exec_at = -1;  /* argv index of its count */
static int g_exec_live = 0; /* exec before the context is freed */

/* Execs this program again with one image fewer to go; returns only on failure. */
static int exec_again(void)
{
	char next[16];
	snprintf(next, sizeof next, "%d", g_exec_more - 1);
	g_argv[g_exec_at] = next;
	fflush(NULL);
	execv("/proc/self/exe", g_argv);
	perror("runtime_cases: exec");
	return 1;
}

/* The label of an op: --label-prefix, then name (a static buffer per call site's name). */
static const char *label(char *buf, size_t len, const char *name)
{
	snprintf(buf, len, "%s%s", g_prefix, name);
	return buf;
}

static int is_bad(int step)
{
	for (int i = 0; i < g_opts.n_bad; i++)
		if (g_opts.bad[i] == step)
			return 1;
	return 0;
}

/* A context with its weight and optimizer, or NULL with a message printed. */
static amp_ctx *make_ctx(amp_tensor **w, amp_optim **opt)
{
	amp_ctx *ctx = NULL;
	char err[256];
	if (amp_ctx_new(NULL, &ctx, err, sizeof err) != AMP_OK) {
		fprintf(stderr, "runtime_cases: %s\n", err);
		return NULL;
	}
	if (amp_config_set(ctx, "precision_mode", "allow_mix_precision") != AMP_OK ||
	    amp_param_new(ctx, "fc", amp_shape2(FEATURES, FEATURES), AMP_INIT_KAIMING, 1, w) !=
	        AMP_OK ||
	    amp_optim_sgd_new(ctx, &(amp_sgd_options){.lr = 1e-3f}, opt) != AMP_OK) {
		fprintf(stderr, "runtime_cases: %s\n", amp_ctx_error(ctx));
		amp_ctx_free(ctx);
		return NULL;
	}
	return ctx;
}

/* One training step of context id; 0, or -1 with the context's error set. */
static int train_step(amp_ctx *ctx, amp_tensor *w, amp_optim *opt, int id, int step,
                      double *loss_out, int *skipped)
{
	float x[BATCH * FEATURES], c[BATCH * FEATURES];
	for (int i = 0; i < BATCH * FEATURES; i++) {
		x[i] = (float)((i * 7 + step * 3 + id) % 17) / 8.0f - 1.0f;
		c[i] = is_bad(step) ? -100.0f : 1.0f;
	}
	amp_tensor *xt, *ct, *h, *sq, *a, *y, *loss;
	char l_fc[256], l_sq[256], l_shift[256], l_log[256], l_loss[256];
	*skipped = 0;
	if (amp_step_begin(ctx) != AMP_OK ||
	    amp_tensor_from_f32(ctx, x, amp_shape2(BATCH, FEATURES), AMP_F32, &xt) != AMP_OK ||
	    amp_tensor_from_f32(ctx, c, amp_shape2(BATCH, FEATURES), AMP_F32, &ct) != AMP_OK ||
	    amp_linear(ctx, label(l_fc, sizeof l_fc, "fc"), xt, w, NULL, &h) != AMP_OK ||
	    amp_mul(ctx, label(l_sq, sizeof l_sq, "sq"), h, h, &sq) != AMP_OK ||
	    amp_add(ctx, label(l_shift, sizeof l_shift, "shift"), sq, ct, &a) != AMP_OK ||
	    amp_log(ctx, label(l_log, sizeof l_log, "log"), a, &y) != AMP_OK || /* RUNTIME_CASES_LOG_LINE */
	    amp_mean(ctx, label(l_loss, sizeof l_loss, "loss"), y, &loss) != AMP_OK ||
	    amp_backward(ctx, loss) != AMP_OK ||
	    amp_optim_step(opt, skipped) != AMP_OK)
		return -1;
	*loss_out = amp_tensor_item(ctx, loss);
	return amp_step_end(ctx) == AMP_OK ? 0 : -1;
}

/* Trains one context; returns 0 or 1 with a message printed. */
static int train(int id)
{
	amp_tensor *w;
	amp_optim *opt;
	int status = 1;
	amp_ctx *ctx = make_ctx(&w, &opt);
	if (!ctx)
		return 1;
	for (int step = 0; step < g_opts.steps; step++) {
		if (step == g_opts.die_at) {
			fflush(NULL);
			raise(SIGKILL);
		}
		if (step == g_opts.orphan_at) {
			fflush(NULL);
			pid_t pid = fork();
			if (pid < 0)
				goto fail;
			if (pid > 0)
				_exit(0);
		}
		if (step == g_opts.fork_at) {
			fflush(NULL);
			pid_t pid = fork();
			if (pid < 0)
				goto fail;
			if (pid > 0) {
				int st = 0;
				while (waitpid(pid, &st, 0) < 0)
					;
				status = WIFEXITED(st) ? WEXITSTATUS(st) : 1;
				goto out;
			}
		}
		double l = 0;
		int skipped = 0;
		if (train_step(ctx, w, opt, id, step, &l, &skipped) != 0)
			goto fail;
		if (g_opts.threads == 1 && g_opts.procs == 0)
			printf("step %d  loss %.6g  scale %g%s\n", step, l, amp_loss_scale(ctx),
			       skipped ? "  (skipped)" : "");
	}
	status = 0;
	if (g_exec_live && g_exec_more > 0 && id == 0)
		status = exec_again(); /* the context is not freed */
	goto out;
fail:
	fprintf(stderr, "runtime_cases: %s\n", amp_ctx_error(ctx));
out:
	amp_ctx_free(ctx);
	return status;
}

/* --interleave K: K contexts alive at once in this thread, each step of each in turn */
static int train_interleaved(int k)
{
	amp_ctx *ctx[MAX_THREADS] = {NULL};
	amp_tensor *w[MAX_THREADS];
	amp_optim *opt[MAX_THREADS];
	int status = 1;
	for (int i = 0; i < k; i++)
		if (!(ctx[i] = make_ctx(&w[i], &opt[i])))
			goto out;
	for (int step = 0; step < g_opts.steps; step++)
		for (int i = 0; i < k; i++) {
			double l;
			int skipped;
			if (train_step(ctx[i], w[i], opt[i], i, step, &l, &skipped) != 0) {
				fprintf(stderr, "runtime_cases: %s\n", amp_ctx_error(ctx[i]));
				goto out;
			}
		}
	status = 0;
out:
	for (int i = 0; i < k; i++)
		amp_ctx_free(ctx[i]);
	return status;
}

/* --hand-off: one context, its steps in one thread after another */
typedef struct hand_off {
	amp_ctx *ctx;
	amp_tensor *w;
	amp_optim *opt;
	int first, status;
} hand_off;

static void *hand_off_main(void *arg)
{
	hand_off *h = arg;
	for (int s = 0; s < g_opts.steps && !h->status; s++) {
		double l;
		int skipped;
		if (train_step(h->ctx, h->w, h->opt, 0, h->first + s, &l, &skipped) != 0) {
			fprintf(stderr, "runtime_cases: %s\n", amp_ctx_error(h->ctx));
			h->status = 1;
		}
	}
	return NULL;
}

static int train_handed_off(int threads)
{
	hand_off h = {0};
	if (!(h.ctx = make_ctx(&h.w, &h.opt)))
		return 1;
	for (int t = 0; t < threads && !h.status; t++) {
		pthread_t th;
		h.first = t * g_opts.steps;
		if (pthread_create(&th, NULL, hand_off_main, &h) != 0) {
			h.status = 1;
			break;
		}
		pthread_join(th, NULL);
	}
	amp_ctx_free(h.ctx);
	return h.status;
}

/* --serial contexts, one after another */
static int train_serial(int id)
{
	int status = 0;
	for (int k = 0; k < g_opts.serial && !status; k++)
		status = train(id + k);
	return status;
}

static void *thread_main(void *arg)
{
	return (void *)(intptr_t)train_serial((int)(intptr_t)arg);
}

int main(int argc, char **argv)
{
	const char *dir = NULL;
	int interleave = 0, hand = 0;
	g_argv = argv;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!v) {
			fprintf(stderr, "runtime_cases: option '%s' needs a value\n", a);
			return 2;
		}
		if (strcmp(a, "--steps") == 0)
			g_opts.steps = atoi(v);
		else if (strcmp(a, "--threads") == 0)
			g_opts.threads = atoi(v);
		else if (strcmp(a, "--procs") == 0)
			g_opts.procs = atoi(v);
		else if (strcmp(a, "--fork-at") == 0)
			g_opts.fork_at = atoi(v);
		else if (strcmp(a, "--orphan-at") == 0)
			g_opts.orphan_at = atoi(v);
		else if (strcmp(a, "--die-at") == 0)
			g_opts.die_at = atoi(v);
		else if (strcmp(a, "--bad-step") == 0 && g_opts.n_bad < MAX_BAD)
			g_opts.bad[g_opts.n_bad++] = atoi(v);
		else if (strcmp(a, "--chdir") == 0)
			dir = v;
		else if (strcmp(a, "--label-prefix") == 0)
			g_prefix = v;
		else if (strcmp(a, "--serial") == 0)
			g_opts.serial = atoi(v);
		else if (strcmp(a, "--interleave") == 0)
			interleave = atoi(v);
		else if (strcmp(a, "--hand-off") == 0)
			hand = atoi(v);
		else if (strcmp(a, "--exec") == 0 || strcmp(a, "--exec-live") == 0) {
			g_exec_more = atoi(v);
			g_exec_at = i + 1;
			g_exec_live = strcmp(a, "--exec-live") == 0;
		} else {
			fprintf(stderr, "runtime_cases: unknown option '%s'\n", a);
			return 2;
		}
		i++;
	}
	if (g_opts.threads < 1 || g_opts.threads > MAX_THREADS || g_opts.procs < 0 ||
	    g_opts.procs > MAX_THREADS || g_opts.steps < 1 || g_opts.serial < 1) {
		fprintf(stderr, "runtime_cases: --threads 1..%d, --procs 0..%d, --steps and --serial at "
		        "least 1\n", MAX_THREADS, MAX_THREADS);
		return 2;
	}
	if (dir && chdir(dir) != 0) {
		perror("runtime_cases: chdir");
		return 1;
	}
	if (interleave > 0)
		return interleave > MAX_THREADS ? 2 : train_interleaved(interleave);
	if (hand > 0)
		return hand > MAX_THREADS ? 2 : train_handed_off(hand);
	if (g_opts.procs > 0) {
		pid_t pids[MAX_THREADS];
		int status = 0;
		fflush(NULL);
		for (int p = 0; p < g_opts.procs; p++) {
			pids[p] = fork();
			if (pids[p] == 0)
				exit(train(p));
			if (pids[p] < 0)
				return 1;
		}
		for (int p = 0; p < g_opts.procs; p++) {
			int st = 0;
			while (waitpid(pids[p], &st, 0) < 0)
				;
			status |= !WIFEXITED(st) || WEXITSTATUS(st) != 0;
		}
		return status;
	}
	pthread_t th[MAX_THREADS];
	int status = 0;
	for (int t = 1; t < g_opts.threads; t++)
		if (pthread_create(&th[t], NULL, thread_main, (void *)(intptr_t)t) != 0)
			return 1;
	status |= train_serial(0);
	for (int t = 1; t < g_opts.threads; t++) {
		void *rc;
		pthread_join(th[t], &rc);
		status |= (int)(intptr_t)rc;
	}
	if (!status && g_exec_more > 0)
		return exec_again();
	return status;
}

/* classify.c — the Fashion-MNIST classifier driver: flags, data, SGD with a cosine or constant
 * learning rate, the shuffled epoch loop, test accuracy and the result line.
 *
 * final_loss in the result line is the mean training loss over the last EX_LOSS_WINDOW steps.
 */
#include "classify.h"

#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <libgen.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "batch.h"
#include "data.h"
#include "dist.h"

/* The training set's pixel mean and standard deviation, used for both splits. */
#define FASHION_MEAN 0.2860f
#define FASHION_STD  0.3530f
#define EVAL_BATCH   1000

/* One run: its options, data, context and what training did.  Released by run_release. */
typedef struct run {
	const ex_classifier *c;
	ex_common opt;
	int cosine;            /* learning rate: cosine to 0 over the run, else constant */
	double momentum, weight_decay; /* SGD's */
	ex_images train, test; /* standardized */
	int64_t test_n;        /* the first test_n test images are evaluated (--test-limit) */
	amp_ctx *ctx;          /* owns the model's parameters and sgd */
	amp_optim *sgd;
	float *x;       /* (batch, 784) the batch's pixels */
	int32_t *y;     /* (batch) its labels */
	int32_t *order; /* (train.n) sample order of the current epoch */
	ex_rng rng;     /* shuffling */
	const char *checkpoint; /* --checkpoint: saved after every epoch, or NULL */
	int64_t first_epoch;    /* 1, or the epoch after the one a resumed checkpoint ended */
	int64_t stop_after;     /* --stop-after: epochs to train in this run (0: all) */
	/* What training did: steps, epochs begun, samples seen, seconds, the last losses. */
	int64_t steps, epochs, samples;
	double train_seconds;
	ex_loss_window losses; /* the steps' losses; with --dist this rank's loss times its share */
	ex_loss_window shares; /* with --dist: this rank's share of each of those steps */
	int64_t log_every;     /* --log-every, on every rank (only rank 0 prints) */
	const char *failed;    /* what failed in train_epochs when not a training step */
	ex_dist dist;   /* --dist: this rank's share of each batch and of the test set */
} run;

static void run_release(run *r)
{
	free(r->x);
	free(r->y);
	free(r->order);
	amp_ctx_free(r->ctx);
	ex_images_free(&r->train);
	ex_images_free(&r->test);
}

/* The losses of the last EX_LOSS_WINDOW steps, of the global batches with --dist (a
 * collective: every rank calls it). */
static void global_window(const run *r, ex_loss_window *w)
{
	if (!r->dist.on) {
		*w = r->losses;
		return;
	}
	double v[2 * EX_LOSS_WINDOW];
	memcpy(v, r->losses.loss, sizeof r->losses.loss);
	memcpy(v + EX_LOSS_WINDOW, r->shares.loss, sizeof r->shares.loss);
	ex_dist_sum(&r->dist, v, 2 * EX_LOSS_WINDOW);
	*w = (ex_loss_window){.n = r->losses.n};
	for (int k = 0; k < EX_LOSS_WINDOW; k++)
		w->loss[k] = v[EX_LOSS_WINDOW + k] > 0 ? v[k] / v[EX_LOSS_WINDOW + k] : (double)NAN;
}

/* The mean training loss of the last EX_LOSS_WINDOW steps (a collective with --dist). */
static double final_loss(const run *r)
{
	ex_loss_window w;
	global_window(r, &w);
	return ex_loss_window_mean(&w);
}

/* Steps of an epoch: the last batch may be short. */
static int64_t steps_per_epoch(const run *r)
{
	return (r->train.n + r->opt.batch - 1) / r->opt.batch;
}

/* Steps of the learning-rate schedule: the cosine spans the whole run, all epochs or --steps
 * if that ends it first. */
static int64_t schedule_steps(const run *r)
{
	int64_t total = steps_per_epoch(r) * r->opt.epochs;
	return r->opt.steps && r->opt.steps < total ? r->opt.steps : total;
}

/* ---- the checkpoint's note ------------------------------------------------------------------
 * What --resume needs that the context does not hold: the settings the run was written with
 * (a resume continues that run, so they must match) and the loss window (final_loss covers
 * steps before the checkpoint too).  One "key value" line each; the keys name the flags, the
 * ranks and configuration keys ("config.<key>", values cut at 200 bytes). */
#define NOTE_MAX 8192 /* the settings take under 3 KB, the loss window under 1.3 KB */

/* x in the fewest significant digits that read back as x (as the flag was typed, mostly). */
static const char *shortest(double x, char *buf, size_t len)
{
	for (int digits = 1; digits <= 17; digits++) {
		snprintf(buf, len, "%.*g", digits, x);
		if (strtod(buf, NULL) == x)
			break;
	}
	return buf;
}

/* The configuration keys that shape a run's numbers beyond the flags (amp.cfg, AMP_*): a
 * resume under others is another run.  Not the ones a run is bit-identical across (threads,
 * memory_optimize, optimizer_sharding, bucket sizes) nor the loss scale's start (the scale is
 * the checkpoint's). */
static const char *const note_config_keys[] = {
    "custom_white_list",
    "custom_black_list",
    "loss_scale",
    "loss_scale_growth_interval",
    "loss_scale_growth_factor",
    "loss_scale_backoff_factor",
    "loss_scale_min",
    "loss_scale_max",
    "gradient_clipping",
    "gradient_accumulation_steps",
    "allreduce_dtype",
};

/* The settings lines: the flags that shape training (the schedule's length comes from
 * --epochs and --steps, and matters only to the cosine), the data-parallel ranks (they split
 * each batch and sum in their order), and the configuration keys above ("config.<key>"). */
static void note_settings(const run *r, char *buf, size_t len)
{
	char sched[64];
	if (r->cosine)
		snprintf(sched, sizeof sched, "cosine over %lld steps",
		         (long long)schedule_steps(r));
	else
		snprintf(sched, sizeof sched, "constant");
	char lr[32], mom[32], wd[32];
	size_t n = (size_t)snprintf(
	    buf, len,
	    "example %s\nbatch %lld\nprecision %s\nseed %llu\nlr %s\nmomentum %s\n"
	    "weight-decay %s\nschedule %s\nranks %d\n",
	    r->c->name, (long long)r->opt.batch, ex_precision_name(r->ctx),
	    (unsigned long long)ex_ctx_seed(r->ctx), shortest(r->opt.lr, lr, sizeof lr),
	    shortest(r->momentum, mom, sizeof mom), shortest(r->weight_decay, wd, sizeof wd), sched,
	    r->dist.on ? r->dist.size : 1);
	for (size_t i = 0; i < sizeof note_config_keys / sizeof *note_config_keys && n < len; i++) {
		const char *v = amp_config_get(r->ctx, note_config_keys[i]);
		n += (size_t)snprintf(buf + n, len - n, "config.%s %.200s\n", note_config_keys[i],
		                      v && *v ? v : "-");
	}
}

/* The note of a checkpoint: the settings and the global loss window w (hex floats: exact). */
static void note_make(const run *r, const ex_loss_window *w, char *buf, size_t len)
{
	note_settings(r, buf, len);
	size_t n = strlen(buf);
	n += (size_t)snprintf(buf + n, len - n, "losses %lld", (long long)w->n);
	for (int k = 0; k < EX_LOSS_WINDOW && n < len; k++)
		n += (size_t)snprintf(buf + n, len - n, " %a", w->loss[k]);
	if (n < len)
		snprintf(buf + n, len - n, "\n");
}

/* The value of key's line in note (up to the line's end, *len bytes), or NULL. */
static const char *note_value(const char *note, const char *key, size_t *len)
{
	size_t kl = strlen(key);
	while (*note) {
		const char *eol = strchr(note, '\n');
		size_t ll = eol ? (size_t)(eol - note) : strlen(note);
		if (ll > kl && strncmp(note, key, kl) == 0 && note[kl] == ' ') {
			*len = ll - kl - 1;
			return note + kl + 1;
		}
		note += ll + (eol != NULL);
	}
	return NULL;
}

/* 0 when the checkpoint's note (file) was written with this run's settings, else AMP_EINVAL
 * with err naming the first setting that differs (a note without it differs). */
static int note_check(const run *r, const char *file, const char *path, char *err, size_t errlen)
{
	char mine[NOTE_MAX];
	note_settings(r, mine, sizeof mine);
	for (const char *line = mine; *line;) {
		const char *sp = strchr(line, ' '), *eol = strchr(line, '\n');
		char key[64];
		snprintf(key, sizeof key, "%.*s", (int)(sp - line), line);
		size_t flen = 0, mlen = (size_t)(eol - sp - 1);
		const char *fv = note_value(file, key, &flen);
		if (!fv || flen != mlen || memcmp(fv, sp + 1, mlen) != 0) {
			char flag[96];
			if (strcmp(key, "example") == 0)
				snprintf(flag, sizeof flag, "the example");
			else if (strcmp(key, "ranks") == 0)
				snprintf(flag, sizeof flag, "data-parallel ranks");
			else if (strncmp(key, "config.", 7) == 0)
				snprintf(flag, sizeof flag, "the configuration's %s", key + 7);
			else
				snprintf(flag, sizeof flag, "--%s", key);
			snprintf(
			    err, errlen,
			    "checkpoint '%s' was written with %s %.*s, this run has %s %.*s (%sa "
			    "resume continues that run: give it the settings it was written with)",
			    path, flag, fv ? (int)(flen < 200 ? flen : 200) : 6, fv ? fv : "(none)",
			    flag, (int)mlen, sp + 1,
			    strcmp(key, "schedule") == 0 ? "--epochs and --steps set its length; "
			                                 : "");
			return AMP_EINVAL;
		}
		line = eol + 1;
	}
	return AMP_OK;
}

/* The loss window from the checkpoint's note, of a run that took `done` steps: 0, or -1
 * when the line is missing or damaged.  With --dist rank 0 holds the global losses (share 1)
 * and the others nothing, so that global_window's sums give them back bit for bit. */
static int note_losses(run *r, const char *file, int64_t done)
{
	size_t len;
	const char *v = note_value(file, "losses", &len);
	if (!v)
		return -1;
	char *end;
	errno = 0;
	ex_loss_window w = {.n = strtoll(v, &end, 10)};
	if (errno || w.n < 0 || w.n > done) /* a loss a step */
		return -1;
	for (int k = 0; k < EX_LOSS_WINDOW; k++) {
		const char *p = end;
		w.loss[k] = strtod(p, &end);
		if (end == p)
			return -1;
	}
	if (end != v + len)
		return -1;
	ex_loss_window none = {.n = w.n}, ones = {.n = w.n};
	for (int k = 0; k < EX_LOSS_WINDOW; k++)
		ones.loss[k] = 1;
	r->losses = r->dist.rank == 0 ? w : none;
	r->shares = r->dist.rank == 0 ? ones : none;
	return 0;
}

/* Trains for opt.epochs passes over the training set or opt.steps steps, whichever ends first,
 * printing progress lines and one line per epoch.  Returns AMP_OK or the failing step's code. */
static int train_epochs(run *r)
{
	const ex_common *opt = &r->opt;
	const int64_t n_train = r->train.n;
	const int64_t total_steps = schedule_steps(r);
	ex_meter meter;
	ex_meter_start(&meter, opt->log_every, "samples/s");
	int done = opt->steps && r->steps >= opt->steps, rc; /* resumed at or past --steps */
	int64_t epoch;
	for (epoch = r->first_epoch; epoch <= opt->epochs && !done; epoch++) {
		if (r->stop_after && epoch - r->first_epoch >= r->stop_after)
			break;
		double t_epoch = ex_now();
		int cut = 0; /* --steps ended the run inside this epoch */
		ex_shuffle(r->order, n_train, &r->rng);
		for (int64_t start = 0; start < n_train; start += opt->batch) {
			const int64_t global = n_train - start < opt->batch ? n_train - start : opt->batch;
			int64_t from, n; /* this rank's part of the global batch */
			ex_dist_shard(&r->dist, global, &from, &n);
			ex_gather(&r->train, r->order, start + from, n, r->x, r->y);
			if (r->cosine)
				amp_optim_set_lr(r->sgd, (float)(opt->lr * 0.5 *
				                                 (1 + cos(M_PI * (double)r->steps /
				                                          (double)total_steps))));
			double loss = NAN;
			/* a rank whose share of a short last batch is empty still takes part in the
			 * step's reductions (with no gradient of its own) */
			if ((rc = amp_step_begin(r->ctx)) ||
			    (rc = n > 0 ? r->c->train(r->ctx, r->c->model, r->sgd, r->x, r->y, n, &loss)
			                : amp_optim_step(r->sgd, NULL)))
				return rc;
			amp_step_set_samples(r->ctx, n);
			if ((rc = amp_step_end(r->ctx)))
				return rc;
			/* the global batch's loss, summed over the ranks only where it is shown (a
			 * collective every step would be one more wait for the slowest rank) */
			ex_loss_window_add(&r->losses, !r->dist.on ? loss : n > 0 ? loss * (double)n : 0);
			ex_loss_window_add(&r->shares, (double)n);
			r->steps++;
			if (r->log_every && r->steps % r->log_every == 0)
				loss = ex_dist_mean(&r->dist, loss, n);
			r->samples += global; /* the global batch: throughput of the run */
			ex_meter_step(&meter, r->steps, epoch, loss, amp_loss_scale(r->ctx), global);
			if (opt->steps && r->steps >= opt->steps) {
				done = 1;
				cut = start + opt->batch < n_train;
				break;
			}
		}
		double dt = ex_now() - t_epoch;
		r->train_seconds += dt;
		r->epochs = epoch;
		if (r->dist.rank == 0)
			printf("epoch %lld: %.1f s\n", (long long)epoch, dt);
		/* between steps, before evaluation steps move the step counter; with --dist every
		 * rank holds the same state (made whole on every rank first: optimizer_sharding
		 * leaves each rank's masters current in its share only), and rank 0 writes it */
		if (r->checkpoint && !cut && (rc = ex_dist_consolidate(&r->dist, r->ctx)))
			return rc;
		ex_loss_window w;
		if (r->checkpoint && !cut)
			global_window(r, &w); /* a collective */
		if (r->checkpoint && !cut && r->dist.rank == 0) {
			char note[NOTE_MAX];
			note_make(r, &w, note, sizeof note);
			if ((rc = amp_checkpoint_set_note(r->ctx, note)) ||
			    (rc = amp_checkpoint_save(r->ctx, r->checkpoint))) {
				r->failed = "saving the checkpoint";
				return rc;
			}
			printf("checkpoint %s: step %lld, epoch %lld\n", r->checkpoint,
			       (long long)amp_step_index(r->ctx), (long long)epoch);
		}
		/* a checkpoint is an epoch's end (--resume replays whole epochs): said, not left
		 * for the user to find missing */
		if (r->checkpoint && cut && r->dist.rank == 0)
			printf("checkpoint %s: not written for epoch %lld: --steps %lld ended the run "
			       "inside it (checkpoints are taken at epoch ends)\n",
			       r->checkpoint, (long long)epoch, (long long)opt->steps);
	}
	return AMP_OK;
}

/* Whether a --checkpoint path can be written, before any training: a regular file or none
 * there, in a folder that exists and takes new files (the save writes a temporary file beside
 * it and renames it).  0, or -1 with the reason in why. */
static int checkpoint_path_ok(const char *path, char *why, size_t len)
{
	struct stat st;
	if (!*path) {
		snprintf(why, len, "an empty path");
		return -1;
	}
	/* a symbolic link is written through (amp_checkpoint_save): its target is what counts */
	char target[PATH_MAX];
	if (lstat(path, &st) == 0 && S_ISLNK(st.st_mode)) {
		if (!realpath(path, target)) {
			snprintf(why, len, "a symbolic link to nowhere");
			return -1;
		}
		path = target;
	}
	if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
		snprintf(why, len, "not a regular file");
		return -1;
	}
	char buf[PATH_MAX + 64];
	snprintf(buf, sizeof buf, "%s", path);
	const char *dir = dirname(buf); /* "." for a bare name, "/" for "/x" */
	if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
		snprintf(why, len, "its folder '%s' does not exist", dir);
		return -1;
	}
	/* the save writes a file beside it and renames it: whether the folder takes one is
	 * known by making one (permissions alone do not tell for root, /proc or a read-only
	 * mount) */
	char probe[PATH_MAX + 96];
	snprintf(probe, sizeof probe, "%s/.ampkit-probe.%ld", dir, (long)getpid());
	int fd = open(probe, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0) {
		snprintf(why, len, "its folder '%s' cannot be written (%s)", dir, strerror(errno));
		return -1;
	}
	close(fd);
	unlink(probe);
	return 0;
}

/* --resume: loads the checkpoint and replays the epochs' shuffles it covers, so that the run
 * continues with the data order, the step count and the schedule of one that never stopped.
 * A checkpoint must end on an epoch (as --checkpoint writes them). */
static int resume(run *r, const char *path, char *err, size_t errlen)
{
	/* the flags first, from the note alone: a checkpoint of another example or precision
	 * would stop the load on its parameters or its loss scaling, not naming the flag */
	char *first = NULL;
	int rc = AMP_OK;
	if (amp_checkpoint_read_note(path, &first, NULL, 0) == AMP_OK && *first)
		rc = note_check(r, first, path, err, errlen);
	free(first);
	if (rc)
		return rc;
	if ((rc = amp_checkpoint_load(r->ctx, path))) {
		snprintf(err, errlen, "%s", amp_ctx_error(r->ctx));
		return rc;
	}
	const char *note = amp_checkpoint_note(r->ctx);
	int64_t per_epoch = steps_per_epoch(r);
	int64_t done = amp_step_index(r->ctx) + 1;
	if (done % per_epoch) {
		snprintf(err, errlen, "checkpoint '%s' ends at step %lld, inside an epoch of %lld steps "
		         "(batch %lld): resume with the batch size it was written with", path,
		         (long long)done, (long long)per_epoch, (long long)r->opt.batch);
		return AMP_EINVAL;
	}
	if (*note && note_losses(r, note, done) != 0) {
		snprintf(err, errlen, "checkpoint '%s': its note's loss window is damaged", path);
		return AMP_EINVAL;
	}
	for (int64_t e = 0; e < done / per_epoch; e++)
		ex_shuffle(r->order, r->train.n, &r->rng);
	r->steps = done;
	r->epochs = done / per_epoch;
	r->first_epoch = r->epochs + 1;
	if (r->dist.rank != 0) /* rank 0 speaks for all */
		return AMP_OK;
	printf("resumed from %s: step %lld, epoch %lld\n", path, (long long)amp_step_index(r->ctx),
	       (long long)r->epochs);
	if (!*note)
		printf("resumed from %s: it has no note of the flags it was written with (an older "
		       "ampkit, or another program): they are not checked, and final_loss covers "
		       "only the steps after it\n",
		       path);
	if (r->opt.steps && done >= r->opt.steps)
		printf("resumed from %s: --steps %lld already reached, nothing to train\n", path,
		       (long long)r->opt.steps);
	else if (r->epochs >= r->opt.epochs)
		printf("resumed from %s: --epochs %lld already reached, nothing to train\n", path,
		       (long long)r->opt.epochs);
	return AMP_OK;
}

/* Accuracy on the first r->test_n test images in inference mode, EVAL_BATCH images a step; with
 * --dist each rank takes its share and the counts are summed over the ranks. */
static int evaluate(run *r, double *accuracy)
{
	const ex_images *test = &r->test;
	int64_t lo, count;
	ex_dist_shard(&r->dist, r->test_n, &lo, &count);
	const int64_t px = (int64_t)test->rows * test->cols;
	float *x = malloc((size_t)(EVAL_BATCH * px) * sizeof(float));
	float *logits = malloc((size_t)EVAL_BATCH * EX_FASHION_CLASSES * sizeof(float));
	int32_t *y = malloc((size_t)EVAL_BATCH * sizeof(int32_t));
	int64_t correct = 0;
	int rc = x && logits && y ? AMP_OK : AMP_ENOMEM;
	amp_set_training(r->ctx, 0);
	for (int64_t start = lo; rc == AMP_OK && start < lo + count; start += EVAL_BATCH) {
		int64_t n = lo + count - start < EVAL_BATCH ? lo + count - start : EVAL_BATCH;
		ex_gather(test, NULL, start, n, x, y);
		if ((rc = amp_step_begin(r->ctx)))
			break;
		if ((rc = r->c->predict(r->ctx, r->c->model, x, n, logits)) == AMP_OK)
			correct += ex_count_correct(logits, y, n, EX_FASHION_CLASSES);
		int rc_end = amp_step_end(r->ctx);
		if (rc == AMP_OK)
			rc = rc_end;
	}
	amp_set_training(r->ctx, 1);
	correct = ex_dist_sum_i64(&r->dist, rc == AMP_OK ? correct : -1);
	if (correct < 0 && rc == AMP_OK)
		rc = AMP_EINVAL; /* another rank failed */
	*accuracy = r->test_n ? (double)correct / (double)r->test_n : 0;
	free(x);
	free(logits);
	free(y);
	return rc;
}

/* The summary line and, with --json, the result line. */
static void report(const run *r, double accuracy, double loss)
{
	const char *precision = ex_precision_name(r->ctx);
	if (r->test_n < r->test.n)
		printf("test accuracy %.2f %% (first %lld test images) after %lld steps (%s)\n",
		       100 * accuracy, (long long)r->test_n, (long long)r->steps, precision);
	else
		printf("test accuracy %.2f %% after %lld steps (%s)\n", 100 * accuracy,
		       (long long)r->steps, precision);
	if (!r->opt.json)
		return;
	ex_json j;
	ex_json_run_begin(&j, r->c->name, r->ctx, r->steps);
	ex_json_int(&j, "epochs", r->epochs);
	ex_json_int(&j, "batch", r->opt.batch);
	ex_json_num(&j, "test_accuracy", accuracy);
	ex_json_int(&j, "test_samples", r->test_n); /* the first test_samples test images */
	ex_json_num(&j, "final_loss", loss);
	ex_json_throughput(&j, r->train_seconds, r->samples);
	ex_json_run_print(&j, r->ctx);
}

int ex_classify_main(const ex_classifier *c, const ex_common *defaults, int argc, char **argv)
{
	const char *data_dir = EX_FASHION_DIR;
	double momentum = 0.9, weight_decay = c->weight_decay;
	const char *schedule = "cosine", *checkpoint = NULL, *resume_path = NULL;
	int64_t stop_after = 0, test_limit = 0;
	int dist = 0;
	const ex_option extra[] = {
	    {"dist", EX_OPT_FLAG, &dist, NULL,
	     "data parallel over MPI (mpirun -np N): each rank trains on\n"
	     "its share of every batch (--batch stays the global batch)"},
	    {"data", EX_OPT_STRING, &data_dir, "DIR", "Fashion-MNIST directory"},
	    {"momentum", EX_OPT_FLOAT, &momentum, "X", "SGD momentum"},
	    {"weight-decay", EX_OPT_FLOAT, &weight_decay, "X", "L2 weight decay"},
	    {"schedule", EX_OPT_STRING, &schedule, "NAME",
	     "learning rate schedule: cosine (to 0 over the run) | constant"},
	    {"checkpoint", EX_OPT_STRING, &checkpoint, "FILE",
	     "save a checkpoint after every epoch (replaced atomically)"},
	    {"resume", EX_OPT_STRING, &resume_path, "FILE",
	     "continue a run from its checkpoint (same flags), bit-identically"},
	    {"stop-after", EX_OPT_INT, &stop_after, "N",
	     "stop after N epochs of this run, as if interrupted (0: none)"},
	    {"test-limit", EX_OPT_INT, &test_limit, "N",
	     "evaluate on the first N test images only (0: all 10000);\n"
	     "the summary and test_samples in --json say how many"},
	};
	const ex_program prog = {c->name, c->summary, extra, (int)(sizeof extra / sizeof extra[0]),
	                         0};
	run r = {.c = c, .opt = *defaults, .first_epoch = 1};
	int status = ex_parse_args(&prog, &r.opt, argc, argv);
	if (status)
		return status == 1 ? 0 : 2;
	if (strcmp(schedule, "cosine") != 0 && strcmp(schedule, "constant") != 0)
		return ex_usage_error(
		    &prog, &r.opt, "--schedule: expected cosine or constant, got '%s'", schedule);
	r.cosine = strcmp(schedule, "cosine") == 0; /* (both begin with a c) */
	r.momentum = momentum;
	r.weight_decay = weight_decay;
	/* the optimizer's own domain, said as a usage error before the data is loaded */
	if (!(momentum >= 0 && (float)momentum < 1)) /* as the optimizer's float holds it */
		return ex_usage_error(
		    &prog, &r.opt, "--momentum: expected 0 <= X < 1, got %.9g%s", momentum,
		    momentum >= 0 && momentum < 1 ? " (1 in the optimizer's float)" : "");
	if (!(weight_decay >= 0 && weight_decay <= (double)FLT_MAX))
		return ex_usage_error(&prog, &r.opt, "--weight-decay: expected 0 or more, got %g",
		                      weight_decay);
	if ((status = ex_check_int(&prog, &r.opt, "test-limit", test_limit, 0, INT64_MAX)) ||
	    (status = ex_check_int(&prog, &r.opt, "stop-after", stop_after, 0, INT64_MAX)))
		return status;
	if (ex_dist_init(&r.dist, dist, prog.name, &argc, &argv))
		return 1;
	r.log_every = r.opt.log_every;
	if (r.dist.rank != 0)
		r.opt.log_every = 0; /* rank 0 speaks for all */
	/* said now, not after an epoch of training */
	char why[4200];
	if (checkpoint && checkpoint_path_ok(checkpoint, why, sizeof why) != 0) {
		fprintf(stderr, "%s: --checkpoint '%s': %s\n", prog.name, checkpoint, why);
		return 2;
	}
	r.checkpoint = checkpoint;
	r.stop_after = stop_after;

	char err[1024];
	status = 1;
	if (ex_fashion_load(data_dir, "train", &r.train, err, sizeof err) ||
	    ex_fashion_load(data_dir, "t10k", &r.test, err, sizeof err)) {
		fprintf(stderr, "%s: %s\n", prog.name, err);
		goto out;
	}
	if (r.opt.batch > r.train.n) { /* a step would take the whole set and say it took more */
		status = ex_usage_error(&prog, &r.opt,
		                        "--batch: expected at most %lld (the training "
		                        "images), got %lld",
		                        (long long)r.train.n, (long long)r.opt.batch);
		goto out;
	}
	ex_images_standardize(&r.train, FASHION_MEAN, FASHION_STD);
	ex_images_standardize(&r.test, FASHION_MEAN, FASHION_STD);
	r.test_n = test_limit > 0 && test_limit < r.test.n ? test_limit : r.test.n;
	if (ex_ctx_open(&prog, &r.opt, &r.ctx))
		goto out;

	amp_sgd_options so = {.lr = (float)r.opt.lr,
	                      .momentum = (float)momentum,
	                      .weight_decay = (float)weight_decay};
	int rc;
	if ((rc = c->init(r.ctx, c->model)) || (rc = amp_optim_sgd_new(r.ctx, &so, &r.sgd)) ||
	    (rc = ex_dist_attach(&r.dist, r.ctx))) {
		status = ex_fail(&prog, r.ctx, "setup", rc);
		goto out;
	}
	const int64_t px = (int64_t)r.train.rows * r.train.cols;
	r.x = malloc((size_t)(r.opt.batch * px) * sizeof(float));
	r.y = malloc((size_t)r.opt.batch * sizeof(int32_t));
	r.order = malloc((size_t)r.train.n * sizeof(int32_t));
	if (!r.x || !r.y || !r.order) {
		fprintf(stderr, "%s: out of memory\n", prog.name);
		goto out;
	}
	ex_rng_seed(&r.rng, ex_ctx_seed(r.ctx));
	ex_iota(r.order, r.train.n);
	if (r.dist.rank == 0)
		printf("%s: %s, %lld train / %lld test images, batch %lld, lr %g, %lld epoch(s)%s\n",
		       prog.name, ex_precision_name(r.ctx), (long long)r.train.n, (long long)r.test_n,
		       (long long)r.opt.batch, r.opt.lr, (long long)r.opt.epochs,
		       r.dist.on ? ", data parallel" : "");
	if (r.dist.on && r.dist.rank == 0) {
		int64_t lo = r.opt.batch / r.dist.size, hi = (r.opt.batch + r.dist.size - 1) / r.dist.size;
		char each[48];
		snprintf(each, sizeof each, lo == hi ? "%lld" : "%lld-%lld", (long long)lo, (long long)hi);
		printf("%s: %d rank%s, %s samples each per step, all-reduce in %s%s\n", prog.name,
		       r.dist.size, r.dist.size == 1 ? "" : "s", each,
		       amp_config_get(r.ctx, "allreduce_dtype"),
		       strcmp(amp_config_get(r.ctx, "optimizer_sharding"), "on") == 0
		           ? ", the update sharded over the ranks"
		           : "");
	}
	if (resume_path && (rc = resume(&r, resume_path, err, sizeof err))) {
		fprintf(stderr, "%s: --resume: %s\n", prog.name, err);
		goto out;
	}

	if ((rc = train_epochs(&r))) {
		status = ex_fail(&prog, r.ctx, r.failed ? r.failed : "training step", rc);
		goto out;
	}
	double accuracy;
	if ((rc = evaluate(&r, &accuracy))) {
		status = ex_fail(&prog, r.ctx, "evaluation", rc);
		goto out;
	}
	double loss = final_loss(&r);
	if (r.dist.rank == 0)
		report(&r, accuracy, loss);
	status = 0;
out:
	run_release(&r);
	ex_dist_finish(&r.dist, status);
	return status;
}

/* cnn_fashion.c — a small CNN on Fashion-MNIST: conv3x3(C1) ReLU maxpool2, conv3x3(C2) ReLU
 * maxpool2, one fully connected layer to the 10 classes; SGD + momentum.
 *
 * `cnn_fashion --epochs 2` (batch 64) reaches about 89 % test accuracy in fp32 and in amp.
 * The ops are called right here so that profiled call sites point at these lines.  final_loss in
 * the JSON line is the mean training loss over the last 50 steps.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amp/amp.h"
#include "common/batch.h"
#include "common/cli.h"
#include "common/data.h"

#define SIDE        28
#define IN          (SIDE * SIDE)
#define C1          16
#define C2          32
#define FLAT        (C2 * (SIDE / 4) * (SIDE / 4))
#define CLASSES     10
#define LOSS_WINDOW 50
#define EVAL_BATCH  1000

typedef struct cnn {
	amp_tensor *k1, *b1, *k2, *b2, *w3, *b3;
} cnn;

static int cnn_init(amp_ctx *ctx, cnn *m)
{
	int rc;
	if ((rc = amp_param_new(ctx, "conv1", amp_shape4(C1, 1, 3, 3), AMP_INIT_KAIMING, 1,
	                        &m->k1)) ||
	    (rc = amp_param_new(ctx, "conv1.bias", amp_shape1(C1), AMP_INIT_ZEROS, 0, &m->b1)) ||
	    (rc = amp_param_new(ctx, "conv2", amp_shape4(C2, C1, 3, 3), AMP_INIT_KAIMING, 1,
	                        &m->k2)) ||
	    (rc = amp_param_new(ctx, "conv2.bias", amp_shape1(C2), AMP_INIT_ZEROS, 0, &m->b2)) ||
	    (rc = amp_param_new(ctx, "fc", amp_shape2(CLASSES, FLAT), AMP_INIT_KAIMING, 0.5f,
	                        &m->w3)) ||
	    (rc = amp_param_new(ctx, "fc.bias", amp_shape1(CLASSES), AMP_INIT_ZEROS, 0, &m->b3)))
		return rc;
	return AMP_OK;
}

/* x: (N,1,28,28) -> logits (N,10). */
static int cnn_forward(amp_ctx *ctx, const cnn *m, amp_tensor *x, amp_tensor **logits)
{
	amp_tensor *c1, *r1, *p1, *c2, *r2, *p2, *flat;
	int64_t n = amp_tensor_shape(x).d[0];
	int rc;
	if ((rc = amp_conv2d(ctx, "conv1", x, m->k1, m->b1, 1, 1, &c1)) || /* (N,C1,28,28) */
	    (rc = amp_relu(ctx, "relu1", c1, &r1)) ||
	    (rc = amp_maxpool2d(ctx, "pool1", r1, 2, 2, &p1)) ||            /* (N,C1,14,14) */
	    (rc = amp_conv2d(ctx, "conv2", p1, m->k2, m->b2, 1, 1, &c2)) || /* (N,C2,14,14) */
	    (rc = amp_relu(ctx, "relu2", c2, &r2)) ||
	    (rc = amp_maxpool2d(ctx, "pool2", r2, 2, 2, &p2)) || /* (N,C2,7,7) */
	    (rc = amp_reshape(ctx, "flatten", p2, amp_shape2(n, FLAT), &flat)) ||
	    (rc = amp_linear(ctx, "fc", flat, m->w3, m->b3, logits))) /* (N,10) */
		return rc;
	return AMP_OK;
}

/* Accuracy on the test set in inference mode. */
static int evaluate(amp_ctx *ctx, const cnn *m, const ex_images *test, double *accuracy)
{
	float *x = malloc((size_t)EVAL_BATCH * IN * sizeof(float));
	float *logits = malloc((size_t)EVAL_BATCH * CLASSES * sizeof(float));
	int32_t *y = malloc((size_t)EVAL_BATCH * sizeof(int32_t));
	int64_t correct = 0;
	int rc = x && logits && y ? AMP_OK : AMP_ENOMEM;
	amp_set_training(ctx, 0);
	for (int64_t start = 0; rc == AMP_OK && start < test->n; start += EVAL_BATCH) {
		int64_t n = test->n - start < EVAL_BATCH ? test->n - start : EVAL_BATCH;
		amp_tensor *xt, *out;
		ex_gather(test, NULL, start, n, x, y);
		if ((rc = amp_step_begin(ctx)))
			break;
		if ((rc = amp_tensor_from_f32(ctx, x, amp_shape4(n, 1, SIDE, SIDE), AMP_F32,
		                              &xt)) == AMP_OK &&
		    (rc = cnn_forward(ctx, m, xt, &out)) == AMP_OK &&
		    (rc = amp_tensor_read_f32(ctx, out, logits)) == AMP_OK)
			correct += ex_count_correct(logits, y, n, CLASSES);
		int rc_end = amp_step_end(ctx);
		if (rc == AMP_OK)
			rc = rc_end;
	}
	amp_set_training(ctx, 1);
	*accuracy = test->n ? (double)correct / (double)test->n : 0;
	free(x);
	free(logits);
	free(y);
	return rc;
}

int main(int argc, char **argv)
{
	const char *data_dir = EX_FASHION_DIR;
	double momentum = 0.9, weight_decay = 0;
	const char *schedule = "cosine";
	const ex_option extra[] = {
	    {"data", EX_OPT_STRING, &data_dir, "DIR", "Fashion-MNIST directory"},
	    {"momentum", EX_OPT_FLOAT, &momentum, "X", "SGD momentum"},
	    {"weight-decay", EX_OPT_FLOAT, &weight_decay, "X", "L2 weight decay"},
	    {"schedule", EX_OPT_STRING, &schedule, "NAME",
	     "learning rate schedule: cosine (to 0 over the run) | constant"},
	};
	const ex_program prog = {"cnn_fashion",
	                         "Trains a two-layer CNN on Fashion-MNIST (SGD + momentum).", extra,
	                         (int)(sizeof extra / sizeof extra[0])};
	ex_common opt = {.epochs = 2, .batch = 64, .lr = 0.05, .seed = -1, .log_every = 200};
	int status = ex_parse_args(&prog, &opt, argc, argv);
	if (status)
		return status == 1 ? 0 : 2;
	if (strcmp(schedule, "cosine") != 0 && strcmp(schedule, "constant") != 0) {
		fprintf(stderr, "%s: --schedule: expected cosine or constant, got '%s'\n",
		        prog.name, schedule);
		ex_usage(&prog, &opt, stderr);
		return 2;
	}

	char err[1024];
	ex_images train = {0}, test = {0};
	amp_ctx *ctx = NULL;
	float *x = NULL;
	int32_t *y = NULL, *order = NULL;
	status = 1;
	if (ex_fashion_load(data_dir, "train", &train, err, sizeof err) ||
	    ex_fashion_load(data_dir, "t10k", &test, err, sizeof err)) {
		fprintf(stderr, "cnn_fashion: %s\n", err);
		goto out;
	}
	/* Standardize with the training set's statistics (about 0.286 and 0.353). */
	ex_images_standardize(&train, 0.2860f, 0.3530f);
	ex_images_standardize(&test, 0.2860f, 0.3530f);
	if (ex_ctx_open(&prog, &opt, &ctx))
		goto out;

	cnn m;
	amp_optim *sgd;
	amp_sgd_options so = {
	    .lr = (float)opt.lr, .momentum = (float)momentum, .weight_decay = (float)weight_decay};
	int rc;
	if ((rc = cnn_init(ctx, &m)) || (rc = amp_optim_sgd_new(ctx, &so, &sgd))) {
		status = ex_fail(&prog, ctx, "setup", rc);
		goto out;
	}
	x = malloc((size_t)opt.batch * IN * sizeof(float));
	y = malloc((size_t)opt.batch * sizeof(int32_t));
	order = malloc((size_t)train.n * sizeof(int32_t));
	if (!x || !y || !order) {
		fprintf(stderr, "cnn_fashion: out of memory\n");
		goto out;
	}
	ex_rng rng;
	ex_rng_seed(&rng, ex_ctx_seed(ctx));
	ex_iota(order, train.n);
	printf("cnn_fashion: %s, %lld train / %lld test images, batch %lld, lr %g, %lld epoch(s)\n",
	       ex_precision_name(ctx), (long long)train.n, (long long)test.n, (long long)opt.batch,
	       opt.lr, (long long)opt.epochs);

	/* The cosine schedule spans the whole run: all epochs, or --steps if that ends it first. */
	int64_t per_epoch = (train.n + opt.batch - 1) / opt.batch;
	int64_t total_steps = per_epoch * opt.epochs;
	if (opt.steps && opt.steps < total_steps)
		total_steps = opt.steps;
	double losses[LOSS_WINDOW] = {0}, train_time = 0;
	int64_t step = 0, samples = 0, epoch = 0, log_samples = 0;
	double log_t0 = ex_now();
	int done = 0;
	for (epoch = 1; epoch <= opt.epochs && !done; epoch++) {
		double t_epoch = ex_now();
		ex_shuffle(order, train.n, &rng);
		for (int64_t start = 0; start < train.n; start += opt.batch) {
			int64_t n = train.n - start < opt.batch ? train.n - start : opt.batch;
			ex_gather(&train, order, start, n, x, y);
			if (schedule[0] == 'c')
				amp_optim_set_lr(sgd, (float)(opt.lr * 0.5 *
				                              (1 + cos(M_PI * (double)step /
				                                       (double)total_steps))));
			amp_tensor *xt, *yt, *logits, *loss;
			if ((rc = amp_step_begin(ctx)) ||
			    (rc = amp_tensor_from_f32(ctx, x, amp_shape4(n, 1, SIDE, SIDE), AMP_F32,
			                              &xt)) ||
			    (rc = amp_tensor_from_i32(ctx, y, amp_shape1(n), &yt)) ||
			    (rc = cnn_forward(ctx, &m, xt, &logits)) ||
			    (rc = amp_cross_entropy(ctx, "loss", logits, yt, &loss)) ||
			    (rc = amp_backward(ctx, loss)) || (rc = amp_optim_step(sgd, NULL))) {
				status = ex_fail(&prog, ctx, "training step", rc);
				goto out;
			}
			losses[step % LOSS_WINDOW] = amp_tensor_item(ctx, loss);
			amp_step_set_samples(ctx, n);
			if ((rc = amp_step_end(ctx))) {
				status = ex_fail(&prog, ctx, "training step", rc);
				goto out;
			}
			step++;
			samples += n;
			log_samples += n;
			if (opt.log_every && step % opt.log_every == 0) {
				double now = ex_now();
				ex_progress(step, epoch, losses[(step - 1) % LOSS_WINDOW],
				            amp_loss_scale(ctx),
				            (double)log_samples / (now - log_t0), "samples/s");
				log_t0 = now;
				log_samples = 0;
			}
			if (opt.steps && step >= opt.steps) {
				done = 1;
				break;
			}
		}
		double dt = ex_now() - t_epoch;
		train_time += dt;
		printf("epoch %lld: %.1f s\n", (long long)epoch, dt);
	}

	double accuracy;
	if ((rc = evaluate(ctx, &m, &test, &accuracy))) {
		status = ex_fail(&prog, ctx, "evaluation", rc);
		goto out;
	}
	int64_t window = step < LOSS_WINDOW ? step : LOSS_WINDOW;
	double final_loss = 0;
	for (int64_t i = 0; i < window; i++)
		final_loss += losses[i];
	final_loss = window ? final_loss / (double)window : (double)NAN;
	printf("test accuracy %.2f %% after %lld steps (%s)\n", 100 * accuracy, (long long)step,
	       ex_precision_name(ctx));
	if (opt.json) {
		ex_json j;
		ex_json_begin(&j);
		ex_json_str(&j, "example", "cnn_fashion");
		ex_json_str(&j, "precision", ex_precision_name(ctx));
		ex_json_int(&j, "steps", step);
		ex_json_int(&j, "epochs", epoch - 1);
		ex_json_int(&j, "batch", opt.batch);
		ex_json_num(&j, "test_accuracy", accuracy);
		ex_json_num(&j, "final_loss", final_loss);
		ex_json_num(&j, "train_seconds", train_time);
		ex_json_num(&j, "samples_per_sec",
		            train_time > 0 ? (double)samples / train_time : 0);
		ex_json_run_stats(&j, ctx);
		printf("%s\n", ex_json_end(&j));
	}
	status = 0;
out:
	free(x);
	free(y);
	free(order);
	amp_ctx_free(ctx);
	ex_images_free(&train);
	ex_images_free(&test);
	return status;
}

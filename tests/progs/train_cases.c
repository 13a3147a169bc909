/* train_cases.c — a small real training through libamprt for the end-to-end tests of the
 * training features: gradient clipping, gradient accumulation, checkpoints, memory_optimize and
 * memory_limit, each switched on from the command line.
 *
 * A two-layer MLP (Linear, GELU, Dropout, Linear, CrossEntropy; AdamW) learns a fixed random
 * labelling of inputs that depend only on the step and micro-batch index, so a resumed run
 * sees the same data as one that never stopped.
 *   train_cases [--steps N] [--mode M] [--batch B] [--hidden H] [--clip C] [--accum N]
 *               [--memopt] [--limit BYTES] [--overflow-step S] [--save PATH] [--resume PATH]
 *               [--print]
 * --save writes a checkpoint after the last step; --resume loads one before the first, and
 * the run then continues to step N-1.  --overflow-step S scales the inputs of step S by 1e30,
 * so that its gradients overflow.  --print prints "step S loss L" (%.17g) per step.  Exit
 * status 0; 3 when memory_limit refused a step (the message on stderr); 1 on another error.
 */
#include <amp/amp.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FEATURES 24
#define CLASSES 6

typedef struct opts {
	int steps, batch, hidden, accum, memopt, print;
	long overflow_step;
	const char *mode, *clip, *limit, *save, *resume;
} opts;

static int usage(void)
{
	fprintf(stderr, "usage: train_cases [--steps N] [--mode M] [--batch B] [--hidden H] "
	                "[--clip C] [--accum N] [--memopt] [--limit BYTES] [--overflow-step S] "
	                "[--save PATH] [--resume PATH] [--print]\n");
	return 2;
}

static int fail(amp_ctx *ctx, int rc, const char *what)
{
	fprintf(stderr, "train_cases: %s: %s\n", what, amp_ctx_error(ctx));
	return rc == AMP_ELIMIT ? 3 : 1;
}

#define TRY(call, what)                                                                           \
	do {                                                                                      \
		int rc_ = (call);                                                                 \
		if (rc_ != AMP_OK) {                                                              \
			status = fail(ctx, rc_, what);                                            \
			goto out;                                                                 \
		}                                                                                 \
	} while (0)

int main(int argc, char **argv)
{
	opts o = {.steps = 8, .batch = 32, .hidden = 64, .accum = 1, .overflow_step = -1,
	          .mode = "allow_mix_precision"};
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (strcmp(a, "--memopt") == 0) { o.memopt = 1; continue; }
		if (strcmp(a, "--print") == 0) { o.print = 1; continue; }
		if (!v)
			return usage();
		i++;
		if (strcmp(a, "--steps") == 0) o.steps = atoi(v);
		else if (strcmp(a, "--batch") == 0) o.batch = atoi(v);
		else if (strcmp(a, "--hidden") == 0) o.hidden = atoi(v);
		else if (strcmp(a, "--accum") == 0) o.accum = atoi(v);
		else if (strcmp(a, "--overflow-step") == 0) o.overflow_step = atol(v);
		else if (strcmp(a, "--mode") == 0) o.mode = v;
		else if (strcmp(a, "--clip") == 0) o.clip = v;
		else if (strcmp(a, "--limit") == 0) o.limit = v;
		else if (strcmp(a, "--save") == 0) o.save = v;
		else if (strcmp(a, "--resume") == 0) o.resume = v;
		else return usage();
	}
	if (o.steps < 1 || o.batch < 1 || o.hidden < 1 || o.accum < 1)
		return usage();

	amp_ctx *ctx = NULL;
	char err[512], accum[16];
	if (amp_ctx_new(NULL, &ctx, err, sizeof err) != AMP_OK) {
		fprintf(stderr, "train_cases: %s\n", err);
		return 1;
	}
	int status = 0;
	float *x = malloc(sizeof(float) * (size_t)o.batch * FEATURES);
	int32_t *t = malloc(sizeof(int32_t) * (size_t)o.batch);
	amp_tensor *w1, *b1, *w2, *b2;
	amp_optim *opt;
	snprintf(accum, sizeof accum, "%d", o.accum);
	TRY(amp_config_set(ctx, "precision_mode", o.mode), "precision_mode");
	TRY(amp_config_set(ctx, "loss_scale_growth_interval", "4"), "config");
	TRY(amp_config_set(ctx, "gradient_accumulation_steps", accum), "config");
	if (o.clip)
		TRY(amp_config_set(ctx, "gradient_clipping", o.clip), "gradient_clipping");
	if (o.memopt)
		TRY(amp_config_set(ctx, "memory_optimize", "on"), "memory_optimize");
	if (o.limit)
		TRY(amp_config_set(ctx, "memory_limit", o.limit), "memory_limit");
	TRY(amp_param_new(ctx, "fc1.w", amp_shape2(o.hidden, FEATURES), AMP_INIT_KAIMING, 1, &w1),
	    "parameter");
	TRY(amp_param_new(ctx, "fc1.b", amp_shape1(o.hidden), AMP_INIT_ZEROS, 1, &b1), "parameter");
	TRY(amp_param_new(ctx, "fc2.w", amp_shape2(CLASSES, o.hidden), AMP_INIT_KAIMING, 1, &w2),
	    "parameter");
	TRY(amp_param_new(ctx, "fc2.b", amp_shape1(CLASSES), AMP_INIT_ZEROS, 1, &b2), "parameter");
	amp_adamw_options ao = {.lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,
	                        .weight_decay = 0.01f};
	TRY(amp_optim_adamw_new(ctx, &ao, &opt), "optimizer");
	if (o.resume)
		TRY(amp_checkpoint_load(ctx, o.resume), "resume");

	while (amp_step_index(ctx) + 1 < o.steps) {
		TRY(amp_step_begin(ctx), "step");
		int64_t s = amp_step_index(ctx);
		double lsum = 0;
		for (int m = 0; m < o.accum; m++) {
			TRY(amp_micro_batch_begin(ctx), "micro-batch");
			double big = s == o.overflow_step ? 1e30 : 1.0;
			for (int i = 0; i < o.batch * FEATURES; i++)
				x[i] = (float)(big * sin(0.7 * (double)i + 1.9 * (double)(s * o.accum + m)));
			for (int i = 0; i < o.batch; i++)
				t[i] = (int32_t)(((unsigned)(i * 2654435761u) >> 7) % CLASSES);
			amp_tensor *xt, *tt, *h, *a, *d, *lo, *loss;
			TRY(amp_tensor_from_f32(ctx, x, amp_shape2(o.batch, FEATURES), AMP_F32, &xt),
			    "input");
			TRY(amp_tensor_from_i32(ctx, t, amp_shape1(o.batch), &tt), "input");
			TRY(amp_linear(ctx, "fc1", xt, w1, b1, &h), "forward");
			TRY(amp_gelu(ctx, "act", h, &a), "forward");
			TRY(amp_dropout(ctx, "drop", a, 0.1f, &d), "forward");
			TRY(amp_linear(ctx, "fc2", d, w2, b2, &lo), "forward");
			TRY(amp_cross_entropy(ctx, "loss", lo, tt, &loss), "forward");
			if (o.print)
				lsum += amp_tensor_item(ctx, loss);
			TRY(amp_backward(ctx, loss), "backward");
		}
		amp_step_set_samples(ctx, (int64_t)o.batch * o.accum);
		TRY(amp_optim_step(opt, NULL), "optimizer");
		TRY(amp_step_end(ctx), "step end");
		if (o.print) {
			/* the step's loss, as the profile has it: the mean over its micro-batches */
			printf("step %lld loss %.17g norm %.17g clipped %d scale %.9g\n", (long long)s,
			       lsum / o.accum, amp_grad_norm(ctx), amp_grad_clipped(ctx),
			       amp_loss_scale(ctx));
		}
	}
	if (o.save)
		TRY(amp_checkpoint_save(ctx, o.save), "save");
out:
	free(x);
	free(t);
	amp_ctx_free(ctx);
	return status;
}

/* ops_tour.c — a small training through the ops of the ResNet- and BERT-style models, for the
 * end-to-end test that ampprof labels each of them (tests/e2e/ops.sh): BatchNorm2D, Sigmoid,
 * Tanh, Sub, Maximum, Minimum, Clamp, Abs, Neg, Div, AvgPool2D, GlobalAvgPool2D, Concat, Slice,
 * Sum / Mean / Max over an axis, all forward and backward, the optimizer updating the
 * parameters and BatchNorm2D's running statistics following the batches.
 *   ops_tour [--steps N] [--precision MODE]     (MODE: a precision_mode value)
 * Prints the loss of each step; exits 0 when every loss is finite.
 */
#include <amp/amp.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N 4
#define C 3
#define HW 6

#define CHECK(call)                                                                                \
	do {                                                                                       \
		if ((call) != AMP_OK) {                                                            \
			fprintf(stderr, "ops_tour: %s\n", amp_ctx_error(ctx));                     \
			goto out;                                                                  \
		}                                                                                  \
	} while (0)

int main(int argc, char **argv)
{
	int steps = 3, status = 1;
	const char *mode = "allow_mix_precision";
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--steps") == 0 && i + 1 < argc)
			steps = atoi(argv[++i]);
		else if (strcmp(argv[i], "--precision") == 0 && i + 1 < argc)
			mode = argv[++i];
		else {
			fprintf(stderr, "usage: ops_tour [--steps N] [--precision MODE]\n");
			return 2;
		}
	}
	amp_ctx *ctx = NULL;
	char err[256];
	if (amp_ctx_new(NULL, &ctx, err, sizeof err) != AMP_OK) {
		fprintf(stderr, "ops_tour: %s\n", err);
		return 1;
	}
	amp_tensor *gamma, *beta, *rmean, *rvar, *div, *xt;
	amp_optim *opt;
	CHECK(amp_config_set(ctx, "precision_mode", mode));
	CHECK(amp_param_new(ctx, "bn.weight", amp_shape1(C), AMP_INIT_ONES, 0, &gamma));
	CHECK(amp_param_new(ctx, "bn.bias", amp_shape1(C), AMP_INIT_ZEROS, 0, &beta));
	CHECK(amp_param_new(ctx, "bn.running_mean", amp_shape1(C), AMP_INIT_ZEROS, 0, &rmean));
	CHECK(amp_param_new(ctx, "bn.running_var", amp_shape1(C), AMP_INIT_ONES, 0, &rvar));
	CHECK(amp_param_new(ctx, "div", amp_shape4(1, C, 1, 1), AMP_INIT_UNIFORM, 0.5f, &div));
	CHECK(amp_optim_sgd_new(ctx, &(amp_sgd_options){.lr = 1e-2f}, &opt));
	static float x[N * C * HW * HW];
	for (int step = 0; step < steps; step++) {
		for (int i = 0; i < N * C * HW * HW; i++)
			x[i] = sinf(0.37f * (float)i + (float)step) * 2.0f + 0.5f;
		amp_tensor *bn, *sg, *th, *d, *mx, *mn, *cl, *ab, *ng, *two, *den, *q, *p, *g, *cat, *sl;
		amp_tensor *ms, *mm, *sm, *comb, *loss;
		CHECK(amp_step_begin(ctx));
		CHECK(amp_tensor_from_f32(ctx, x, amp_shape4(N, C, HW, HW), AMP_F32, &xt));
		CHECK(amp_batch_norm2d(ctx, "bn", xt, gamma, beta, rmean, rvar, 0.1f, 1e-5f, &bn));
		CHECK(amp_sigmoid(ctx, "gate", bn, &sg));
		CHECK(amp_tanh(ctx, "act", bn, &th));
		CHECK(amp_sub(ctx, "diff", sg, th, &d));
		CHECK(amp_maximum(ctx, "hi", d, th, &mx));
		CHECK(amp_minimum(ctx, "lo", mx, sg, &mn));
		CHECK(amp_clamp(ctx, "clip", mn, -0.5f, 0.5f, &cl));
		CHECK(amp_abs(ctx, "mag", cl, &ab));
		CHECK(amp_neg(ctx, "flip", ab, &ng));
		/* divisor 2 + |w|: (1,C,1,1) broadcast over (N,C,H,W), never near 0 */
		float twos[C] = {2, 2, 2};
		CHECK(amp_tensor_from_f32(ctx, twos, amp_shape4(1, C, 1, 1), AMP_F32, &two));
		CHECK(amp_abs(ctx, "div.abs", div, &den));
		CHECK(amp_add(ctx, "div.shift", den, two, &den));
		CHECK(amp_div(ctx, "norm", ng, den, &q));
		CHECK(amp_avgpool2d(ctx, "pool", q, 2, 2, &p));
		CHECK(amp_global_avgpool2d(ctx, "gap", p, &g));
		amp_tensor *parts[2] = {g, g};
		CHECK(amp_concat(ctx, "cat", parts, 2, 1, &cat));
		CHECK(amp_slice(ctx, "crop", cat, 1, 1, 4, &sl));
		CHECK(amp_mean_axis(ctx, "row.mean", sl, 1, 0, &ms));
		CHECK(amp_max_axis(ctx, "col.max", sl, 0, 1, &mm, NULL));
		CHECK(amp_sum_axis(ctx, "col.sum", sl, 0, 1, &sm));
		CHECK(amp_add(ctx, "comb", mm, sm, &comb));
		CHECK(amp_add(ctx, "comb2", comb, ms, &comb)); /* (1,4) + (4) */
		CHECK(amp_mean(ctx, "loss", comb, &loss));
		CHECK(amp_backward(ctx, loss));
		CHECK(amp_optim_step(opt, NULL));
		double l = amp_tensor_item(ctx, loss);
		CHECK(amp_step_end(ctx));
		printf("step %d  loss %.6f\n", step, l);
		if (!isfinite(l))
			goto out;
	}
	status = 0;
out:
	amp_ctx_free(ctx);
	return status;
}

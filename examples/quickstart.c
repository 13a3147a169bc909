/* quickstart.c — the smallest complete libamprt training program (shown in the README).
 *
 * Learns y = sin(3x) with a 1-64-1 MLP under AMP (allow_mix_precision: the Linear layers run in
 * FP16 on FP16 working copies of FP32 master weights, the loss in FP32, gradients scaled by a
 * dynamic loss scale).  Prints the loss every 100 steps; exits 0 when it fell below 0.01.
 */
#include <amp/amp.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#define CHECK(call)                                                                         \
	do {                                                                                \
		if ((call) != AMP_OK) {                                                     \
			fprintf(stderr, "quickstart: %s\n", amp_ctx_error(ctx));            \
			goto out;                                                           \
		}                                                                           \
	} while (0)

int main(int argc, char **argv)
{
	enum { BATCH = 64, HIDDEN = 64, STEPS = 1500 };
	if (argc > 1) { /* no options; --help says so */
		int help = argc == 2 && strcmp(argv[1], "--help") == 0;
		fprintf(help ? stdout : stderr,
		        "usage: %s (no options: it trains, prints and exits)\n", argv[0]);
		return help ? 0 : 2;
	}
	amp_ctx *ctx = NULL;
	amp_tensor *w1, *b1, *w2, *b2;
	amp_optim *opt;
	char err[256];
	float x[BATCH], y[BATCH];
	double loss = INFINITY;

	if (amp_ctx_new(NULL, &ctx, err, sizeof err) != AMP_OK) {
		fprintf(stderr, "quickstart: %s\n", err);
		return 1;
	}
	CHECK(amp_config_set(ctx, "precision_mode", "allow_mix_precision"));
	CHECK(amp_param_new(ctx, "fc1.w", amp_shape2(HIDDEN, 1), AMP_INIT_KAIMING, 1, &w1));
	CHECK(amp_param_new(ctx, "fc1.b", amp_shape1(HIDDEN), AMP_INIT_ZEROS, 0, &b1));
	CHECK(amp_param_new(ctx, "fc2.w", amp_shape2(1, HIDDEN), AMP_INIT_KAIMING, 1, &w2));
	CHECK(amp_param_new(ctx, "fc2.b", amp_shape1(1), AMP_INIT_ZEROS, 0, &b2));
	CHECK(amp_optim_adamw_new(ctx, &(amp_adamw_options){.lr = 3e-3f, .beta1 = 0.9f,
	                                                    .beta2 = 0.999f, .eps = 1e-8f},
	                          &opt));

	for (int step = 0; step < STEPS; step++) {
		for (int i = 0; i < BATCH; i++) {
			x[i] = (float)((step * BATCH + i) % 997) / 498.5f - 1.0f;
			y[i] = sinf(3 * x[i]);
		}
		amp_tensor *xt, *yt, *h, *a, *p, *d, *sq, *l;
		CHECK(amp_step_begin(ctx));
		CHECK(amp_tensor_from_f32(ctx, x, amp_shape2(BATCH, 1), AMP_F32, &xt));
		CHECK(amp_tensor_from_f32(ctx, y, amp_shape2(BATCH, 1), AMP_F32, &yt));
		CHECK(amp_linear(ctx, "fc1", xt, w1, b1, &h));
		CHECK(amp_gelu(ctx, "act", h, &a));
		CHECK(amp_linear(ctx, "fc2", a, w2, b2, &p));
		CHECK(amp_scale(ctx, "neg", yt, -1.0f, &d));
		CHECK(amp_add(ctx, "err", p, d, &d));
		CHECK(amp_mul(ctx, "sq", d, d, &sq));
		CHECK(amp_mean(ctx, "mse", sq, &l));
		CHECK(amp_backward(ctx, l));
		CHECK(amp_optim_step(opt, NULL));
		loss = amp_tensor_item(ctx, l);
		CHECK(amp_step_end(ctx));
		if (step % 100 == 0 || step == STEPS - 1)
			printf("step %4d  loss %.6f  scale %g\n", step, loss, amp_loss_scale(ctx));
	}
out:
	amp_ctx_free(ctx);
	return loss < 0.01 ? 0 : 1;
}

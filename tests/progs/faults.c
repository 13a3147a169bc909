/* faults.c — small trainings through libamprt, each with one known mixed-precision fault, for the
 * diagnostics' end-to-end tests (tests/e2e/diagnostics.sh): the tests check that ampprof names
 * the fault's op, step, source line, class and advice.  The lines the verdicts must name carry
 * a FAULTS_* marker comment, which the tests look up.
 *   faults --fault NAME [--steps N] [--bad-step S]
 * NAME (the fault happens at step S, default 2, unless said otherwise):
 *   underflow    a Mul in FP16 squares values of 1e-5: they flush to zero, and the Log after it
 *                (black list: FP32) takes log 0 = -Inf.  The Mul is to blame, not the Log.
 *   cast         a Scale in FP32 makes values above 65504; the Linear after it (white list)
 *                casts them to FP16 automatically: the cast overflows.
 *   gradunder    a static loss scale of 1 with FP16 gradients: the weight gradient of layer
 *                'fc' is almost all zeros in FP16 (tiny inputs, a mean over many outputs), every
 *                step, with no overflow at all.
 *   gemm         GEMMs whose K is 514 ('wide', misses the fast path) and a single-column head
 *                ('head', N = 1, which padding cannot speed up), every step.
 *   blacklist    allow_mix_precision with custom_black_list = Linear from the config file given
 *                with --config (the test writes it): the white-list Linear runs in FP32.
 *   gradoverflow a dynamic loss scale starting at 2^20: the scaled gradients overflow in the
 *                backward of 'fc2' at step 0 (then the scaler backs off).
 *   invalid      the square root of values shifted below zero: NaN from an invalid operation,
 *                no overflow; the NaN reaches the gradients (the scaler skips the step).
 * --bad-step -1 makes every step the bad one.
 */
#include <amp/amp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BATCH 16
#define FEAT 8

typedef struct faults_opts {
	const char *fault, *config;
	int steps, bad;
} faults_opts;

static faults_opts g = {NULL, NULL, 4, 2};

static int bad(int step) { return g.bad < 0 || step == g.bad; }

#define CHECK(call)                                                                               \
	do {                                                                                          \
		if ((call) != AMP_OK)                                                                     \
			goto fail;                                                                            \
	} while (0)

static void fill(float *x, int n, float base, int step)
{
	for (int i = 0; i < n; i++)
		x[i] = base * (0.5f + (float)((i * 7 + step * 3) % 11) / 22.0f);
}

/* y = mean(log(h * h)), h = x w^T: at the bad step x is 1e-5 (w starts as the identity), h
 * about the same, and h * h, about 1e-10, is zero in FP16 (not in FP32). */
static int step_underflow(amp_ctx *ctx, amp_tensor *w, int step, amp_tensor **loss)
{
	float x[BATCH * FEAT];
	fill(x, BATCH * FEAT, bad(step) ? 2e-5f : 1.0f, step);
	amp_tensor *xt, *h, *sq, *y;
	CHECK(amp_tensor_from_f32(ctx, x, amp_shape2(BATCH, FEAT), AMP_F32, &xt));
	CHECK(amp_linear(ctx, "proj", xt, w, NULL, &h));
	CHECK(amp_mul(ctx, "sq", h, h, &sq)); /* FAULTS_UNDERFLOW_MUL */
	CHECK(amp_log(ctx, "log", sq, &y));   /* FAULTS_UNDERFLOW_LOG */
	CHECK(amp_mean(ctx, "loss", y, loss));
	return 0;
fail:
	return -1;
}

/* loss = mean(fc(boost(x))): at the bad step boost multiplies by 1e5 in FP32. */
static int step_cast(amp_ctx *ctx, amp_tensor *w, int step, amp_tensor **loss)
{
	float x[BATCH * FEAT];
	fill(x, BATCH * FEAT, 1.0f, step);
	amp_tensor *xt, *b, *h;
	CHECK(amp_tensor_from_f32(ctx, x, amp_shape2(BATCH, FEAT), AMP_F32, &xt));
	CHECK(amp_scale(ctx, "boost", xt, bad(step) ? 1e5f : 1.0f, &b)); /* FAULTS_CAST_SRC */
	CHECK(amp_linear(ctx, "fc", b, w, NULL, &h));                          /* FAULTS_CAST_USE */
	CHECK(amp_mean(ctx, "loss", h, loss));
	return 0;
fail:
	return -1;
}

/* loss = mean(fc(x)) over 256 x 256 outputs: each output's gradient is 1/65536 at scale 1, the
 * inputs are 1e-6, so the weight gradient (256 terms of 1.5e-11) is below FP16's smallest
 * subnormal. */
#define GU_ROWS 256
static int step_gradunder(amp_ctx *ctx, amp_tensor *w, int step, amp_tensor **loss)
{
	static float x[GU_ROWS * GU_ROWS];
	fill(x, GU_ROWS * GU_ROWS, 1e-6f, step);
	amp_tensor *xt, *h;
	CHECK(amp_tensor_from_f32(ctx, x, amp_shape2(GU_ROWS, GU_ROWS), AMP_F32, &xt));
	CHECK(amp_linear(ctx, "fc", xt, w, NULL, &h)); /* FAULTS_GRADUNDER_FC */
	CHECK(amp_mean(ctx, "loss", h, loss));
	return 0;
fail:
	return -1;
}

/* 64 x 514 inputs through 'wide' (K = 514) to 64 features, then a one-column 'head'. */
#define GM_ROWS 64
#define GM_IN 514
static int step_gemm(amp_ctx *ctx, amp_tensor *w, amp_tensor *w2, int step, amp_tensor **loss)
{
	static float x[GM_ROWS * GM_IN];
	fill(x, GM_ROWS * GM_IN, 1.0f, step);
	amp_tensor *xt, *h, *r, *y;
	CHECK(amp_tensor_from_f32(ctx, x, amp_shape2(GM_ROWS, GM_IN), AMP_F32, &xt));
	CHECK(amp_linear(ctx, "wide", xt, w, NULL, &h)); /* FAULTS_GEMM_WIDE */
	CHECK(amp_relu(ctx, "act", h, &r));
	CHECK(amp_linear(ctx, "head", r, w2, NULL, &y)); /* FAULTS_GEMM_HEAD */
	CHECK(amp_mean(ctx, "loss", y, loss));
	return 0;
fail:
	return -1;
}

/* loss = mean(sqrt(fc(x)^2 + c)): c is 1, -100 at the bad step (sqrt of negatives: NaN, and
 * NaN gradients through sqrt's backward). */
static int step_invalid(amp_ctx *ctx, amp_tensor *w, int step, amp_tensor **loss)
{
	float x[BATCH * FEAT], c[BATCH * FEAT];
	fill(x, BATCH * FEAT, 1.0f, step);
	for (int i = 0; i < BATCH * FEAT; i++)
		c[i] = bad(step) ? -100.0f : 1.0f;
	amp_tensor *xt, *ct, *h, *sq, *a, *y;
	CHECK(amp_tensor_from_f32(ctx, x, amp_shape2(BATCH, FEAT), AMP_F32, &xt));
	CHECK(amp_tensor_from_f32(ctx, c, amp_shape2(BATCH, FEAT), AMP_F32, &ct));
	CHECK(amp_linear(ctx, "fc", xt, w, NULL, &h));
	CHECK(amp_mul(ctx, "sq", h, h, &sq));
	CHECK(amp_add(ctx, "shift", sq, ct, &a));
	CHECK(amp_sqrt(ctx, "root", a, &y)); /* FAULTS_INVALID_SQRT */
	CHECK(amp_mean(ctx, "loss", y, loss));
	return 0;
fail:
	return -1;
}

/* loss = mean(fc2(relu(fc1(x)))), every step. */
static int step_mlp(amp_ctx *ctx, amp_tensor *w, amp_tensor *w2, int step, amp_tensor **loss)
{
	float x[BATCH * FEAT];
	fill(x, BATCH * FEAT, 1.0f, step);
	amp_tensor *xt, *h, *r, *y;
	CHECK(amp_tensor_from_f32(ctx, x, amp_shape2(BATCH, FEAT), AMP_F32, &xt));
	CHECK(amp_linear(ctx, "fc1", xt, w, NULL, &h)); /* FAULTS_MLP_FC1 */
	CHECK(amp_relu(ctx, "act", h, &r));
	CHECK(amp_linear(ctx, "fc2", r, w2, NULL, &y)); /* FAULTS_MLP_FC2 */
	CHECK(amp_mean(ctx, "loss", y, loss));
	return 0;
fail:
	return -1;
}

static int run(void)
{
	amp_ctx *ctx = NULL;
	amp_tensor *w = NULL, *w2 = NULL;
	amp_optim *opt;
	char err[512];
	const char *f = g.fault;
	int status = 1;
	if (amp_ctx_new(g.config, &ctx, err, sizeof err) != AMP_OK) {
		fprintf(stderr, "faults: %s\n", err);
		return 1;
	}
	int in = FEAT, out = FEAT, in2 = 0, out2 = 0;
	if (strcmp(f, "gradunder") == 0) {
		CHECK(amp_config_set(ctx, "loss_scale", "1"));
		in = out = GU_ROWS;
	} else if (strcmp(f, "gemm") == 0) {
		in = GM_IN, out = 64, in2 = 64, out2 = 1;
	} else if (strcmp(f, "gradoverflow") == 0) {
		CHECK(amp_config_set(ctx, "loss_scale_init", "1048576"));
		in2 = FEAT, out2 = FEAT;
	} else if (strcmp(f, "blacklist") == 0) {
		in2 = FEAT, out2 = FEAT;
	}
	CHECK(amp_param_new(ctx, "w", amp_shape2(out, in), AMP_INIT_KAIMING, 1, &w));
	if (in2)
		CHECK(amp_param_new(ctx, "w2", amp_shape2(out2, in2), AMP_INIT_KAIMING, 1, &w2));
	if (strcmp(f, "underflow") == 0) {
		float id[FEAT * FEAT] = {0};
		for (int i = 0; i < FEAT; i++)
			id[i * FEAT + i] = 1.0f;
		CHECK(amp_param_load(ctx, w, id));
	}
	CHECK(amp_optim_sgd_new(ctx, &(amp_sgd_options){.lr = 1e-3f}, &opt));
	for (int step = 0; step < g.steps; step++) {
		amp_tensor *loss = NULL;
		int skipped = 0, rc;
		CHECK(amp_step_begin(ctx));
		if (strcmp(f, "underflow") == 0)
			rc = step_underflow(ctx, w, step, &loss);
		else if (strcmp(f, "cast") == 0)
			rc = step_cast(ctx, w, step, &loss);
		else if (strcmp(f, "gradunder") == 0)
			rc = step_gradunder(ctx, w, step, &loss);
		else if (strcmp(f, "gemm") == 0)
			rc = step_gemm(ctx, w, w2, step, &loss);
		else if (strcmp(f, "invalid") == 0)
			rc = step_invalid(ctx, w, step, &loss);
		else
			rc = step_mlp(ctx, w, w2, step, &loss);
		if (rc != 0)
			goto fail;
		CHECK(amp_backward(ctx, loss));
		CHECK(amp_optim_step(opt, &skipped));
		double l = amp_tensor_item(ctx, loss);
		CHECK(amp_step_end(ctx));
		printf("step %d  loss %.6g  scale %g%s\n", step, l, amp_loss_scale(ctx),
		       skipped ? "  (skipped)" : "");
	}
	status = 0;
	goto out;
fail:
	fprintf(stderr, "faults: %s\n", amp_ctx_error(ctx));
out:
	amp_ctx_free(ctx);
	return status;
}

int main(int argc, char **argv)
{
	static const char *const names[] = {"underflow", "cast",         "gradunder", "gemm",
	                                    "blacklist", "gradoverflow", "invalid"};
	for (int i = 1; i < argc; i += 2) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!v) {
			fprintf(stderr, "faults: option '%s' needs a value\n", a);
			return 2;
		}
		if (strcmp(a, "--fault") == 0)
			g.fault = v;
		else if (strcmp(a, "--steps") == 0)
			g.steps = atoi(v);
		else if (strcmp(a, "--bad-step") == 0)
			g.bad = atoi(v);
		else if (strcmp(a, "--config") == 0)
			g.config = v;
		else {
			fprintf(stderr, "faults: unknown option '%s'\n", a);
			return 2;
		}
	}
	int known = 0;
	for (size_t i = 0; g.fault && i < sizeof names / sizeof names[0]; i++)
		known |= strcmp(g.fault, names[i]) == 0;
	if (!known || g.steps < 1) {
		fprintf(stderr, "usage: faults --fault underflow|cast|gradunder|gemm|blacklist|"
		                "gradoverflow|invalid [--steps N] [--bad-step S] [--config FILE]\n");
		return 2;
	}
	return run();
}

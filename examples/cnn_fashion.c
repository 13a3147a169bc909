/* cnn_fashion.c — a small CNN on Fashion-MNIST: conv3x3(C1) ReLU maxpool2, conv3x3(C2) ReLU
 * maxpool2, one fully connected layer to the 10 classes; SGD + momentum.
 *
 * `cnn_fashion --epochs 2` (batch 64) reaches about 89 % test accuracy in fp32 and in amp.
 * The ops are called right here so that profiled call sites point at these lines.  final_loss in
 * the JSON line is the mean training loss over the last 50 steps; the flags, the training loop
 * and the result line are common/classify.c's.
 */
#include "amp/amp.h"
#include "common/classify.h"
#include "common/data.h"

#define SIDE    28
#define C1      16
#define C2      32
#define FLAT    (C2 * (SIDE / 4) * (SIDE / 4))
#define CLASSES EX_FASHION_CLASSES

typedef struct cnn {
	amp_tensor *k1, *b1, *k2, *b2, *w3, *b3;
} cnn;

static int cnn_init(amp_ctx *ctx, void *model)
{
	cnn *m = model;
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

/* One training step, x: (n,28*28) fp32 host pixels, y: (n) labels. */
static int cnn_train(amp_ctx *ctx, const void *model, amp_optim *opt, const float *x,
                     const int32_t *y, int64_t n, double *loss)
{
	amp_tensor *xt, *yt, *logits, *l;
	int rc;
	if ((rc = amp_tensor_from_f32(ctx, x, amp_shape4(n, 1, SIDE, SIDE), AMP_F32, &xt)) ||
	    (rc = amp_tensor_from_i32(ctx, y, amp_shape1(n), &yt)) ||
	    (rc = cnn_forward(ctx, model, xt, &logits)) ||
	    (rc = amp_cross_entropy(ctx, "loss", logits, yt, &l)) || (rc = amp_backward(ctx, l)) ||
	    (rc = amp_optim_step(opt, NULL)))
		return rc;
	*loss = amp_tensor_item(ctx, l);
	return AMP_OK;
}

/* Logits (n,10) of x: (n,28*28) fp32 host pixels, copied into logits. */
static int cnn_predict(amp_ctx *ctx, const void *model, const float *x, int64_t n, float *logits)
{
	amp_tensor *xt, *out;
	int rc;
	if ((rc = amp_tensor_from_f32(ctx, x, amp_shape4(n, 1, SIDE, SIDE), AMP_F32, &xt)) ||
	    (rc = cnn_forward(ctx, model, xt, &out)))
		return rc;
	return amp_tensor_read_f32(ctx, out, logits);
}

int main(int argc, char **argv)
{
	cnn m;
	const ex_classifier c = {
	    .name = "cnn_fashion",
	    .summary = "Trains a two-layer CNN on Fashion-MNIST (SGD + momentum).",
	    .model = &m,
	    .init = cnn_init,
	    .train = cnn_train,
	    .predict = cnn_predict,
	};
	const ex_common defaults = {
	    .epochs = 2, .batch = 64, .lr = 0.05, .seed = -1, .log_every = 200};
	return ex_classify_main(&c, &defaults, argc, argv);
}

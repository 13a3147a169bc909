/* classify.h — the training driver of the Fashion-MNIST classifiers (mlp_fashion, cnn_fashion,
 * resnet_fashion): flags, data, SGD + momentum with its schedule, the epoch loop, test accuracy
 * and the result line.
 *
 * The example supplies its model as callbacks, and every amp_* call that runs an op or copies a
 * tensor (staging, the forward pass, cross-entropy, backward, the optimizer step, reading results
 * back) stays in them, so that profiled call sites point at the example's own lines.  The driver
 * only brackets steps (amp_step_begin/amp_step_end) and sets the learning rate.
 */
#ifndef AMP_EX_CLASSIFY_H
#define AMP_EX_CLASSIFY_H

#include <stdint.h>

#include "amp/amp.h"
#include "cli.h"

/* One Fashion-MNIST model.  The driver passes x as n images of 28*28 standardized fp32 pixels
 * (row-major, host memory) and y as their n labels 0..EX_FASHION_CLASSES-1; both belong to the
 * driver and are valid only during the call.  Every callback returns AMP_OK or the AMP_E* code of
 * the failing call (the driver reports amp_ctx_error). */
typedef struct ex_classifier {
	const char *name;    /* program name for messages, usage and JSON: "mlp_fashion" */
	const char *summary; /* one line for the usage */
	void *model;         /* passed to the callbacks; owned by the example */
	/* Creates the model's parameters, once, after the context is set up and before the
	 * optimizer (so parameter initialisation draws from the seeded context first). */
	int (*init)(amp_ctx *ctx, void *model);
	/* One training step inside an open step: stages x and y, runs the model, cross-entropy,
	 * backward and opt's update (amp_optim_step), and sets *loss to the batch's mean loss. */
	int (*train)(amp_ctx *ctx, const void *model, amp_optim *opt, const float *x,
	             const int32_t *y, int64_t n, double *loss);
	/* Inference inside an open step, in inference mode: stages x, runs the model and copies
	 * its logits, (n, EX_FASHION_CLASSES) fp32, into the driver's host buffer logits. */
	int (*predict)(amp_ctx *ctx, const void *model, const float *x, int64_t n, float *logits);
	double weight_decay; /* the default of --weight-decay (0: none) */
} ex_classifier;

/* Runs a classifier program: parses argv (the common flags with defaults as their defaults,
 * plus --dist, --data, --momentum, --weight-decay, --schedule, --checkpoint, --resume,
 * --stop-after and --test-limit), loads and standardizes the data, trains, measures test
 * accuracy (on the first --test-limit test images, or all) and prints progress, a summary and
 * (--json) the result line on stdout; errors go to stderr as "name: message".  Everything it
 * allocates, the context included, is released before it returns.  Not thread-safe (it prints).
 * Returns the process's exit status: 0 (done, or --help), 1 (failure), 2 (usage error). */
int ex_classify_main(const ex_classifier *c, const ex_common *defaults, int argc, char **argv);

#endif

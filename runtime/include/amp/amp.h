/* amp.h — public API of libamprt, the ampkit mixed-precision training runtime.
 *
 * A context owns everything: configuration, tensors (64-byte aligned, in a per-step arena or
 * persistent), the autograd tape, the loss scaler.  Every function returns AMP_OK (0) or a
 * negative AMP_E* code; amp_ctx_error() then holds a message naming the op, its layer label and
 * the shapes.  The library never exits or aborts on bad input, and prints one thing only: a
 * warning on stderr for an AMP_* environment variable that is no setting (a misspelt one,
 * with the setting it resembles).  A tensor or parameter belongs to the context that made it;
 * given to another, it is refused (AMP_EINVAL).  The getters that return no code answer NULL
 * with a neutral value (0, NULL, NAN, -1).  A context is used by one thread at a time.
 */
#ifndef AMP_AMP_H
#define AMP_AMP_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- version ----------------------------------------------------------------------------- */
/* The version of this header; amp_version() is the library's at run time.  The shared
 * library's SONAME is libamprt.so.<AMP_VERSION_MAJOR>. */
#define AMP_VERSION_MAJOR 0
#define AMP_VERSION_MINOR 1
#define AMP_VERSION_PATCH 0
/* One number for #if tests: major * 10000 + minor * 100 + patch (0.1.0 is 100). */
#define AMP_VERSION_NUMBER (AMP_VERSION_MAJOR * 10000 + AMP_VERSION_MINOR * 100 + AMP_VERSION_PATCH)
#define AMP_VERSION_STR_(a, b, c) #a "." #b "." #c
#define AMP_VERSION_STR(a, b, c) AMP_VERSION_STR_(a, b, c)
/* "0.1.0" */
#define AMP_VERSION_STRING AMP_VERSION_STR(AMP_VERSION_MAJOR, AMP_VERSION_MINOR, AMP_VERSION_PATCH)

/* ---- errors ------------------------------------------------------------------------------ */
enum {
	AMP_OK = 0,
	AMP_EINVAL = -1,   /* bad argument (NULL, out of range) */
	AMP_ENOMEM = -2,   /* allocation failed */
	AMP_ESHAPE = -3,   /* shapes do not fit the op */
	AMP_EDTYPE = -4,   /* dtype not accepted by the op */
	AMP_ECONFIG = -5,  /* bad configuration key, value or op name */
	AMP_EIO = -6,      /* file could not be read */
	AMP_ESTATE = -7,   /* call out of order (backward twice, no step begun) */
	AMP_ELIMIT = -8,   /* the step would exceed memory_limit (the message names the op) */
	AMP_EFORMAT = -9,  /* a checkpoint is damaged, truncated, of a newer format or of
	                      another model */
};
/* Static description of an error code; never NULL. */
const char *amp_strerror(int code);

/* ---- dtypes and shapes ------------------------------------------------------------------- */
typedef enum {
	AMP_F32 = 0, /* IEEE binary32 */
	AMP_F16 = 1, /* IEEE binary16 */
	AMP_I32 = 2, /* int32 indices (class labels, token ids); never a compute dtype */
	AMP_BF16 = 3, /* bfloat16: the upper 16 bits of an IEEE binary32 */
} amp_dtype;

#define AMP_MAX_DIMS 4
typedef struct amp_shape {
	int ndim;                 /* 0 (scalar) to AMP_MAX_DIMS */
	int64_t d[AMP_MAX_DIMS];  /* extents, outermost first; unused entries are 0 */
} amp_shape;

static inline amp_shape amp_shape1(int64_t a) { amp_shape s = {1, {a, 0, 0, 0}}; return s; }
static inline amp_shape amp_shape2(int64_t a, int64_t b) { amp_shape s = {2, {a, b, 0, 0}}; return s; }
static inline amp_shape amp_shape3(int64_t a, int64_t b, int64_t c)
{ amp_shape s = {3, {a, b, c, 0}}; return s; }
static inline amp_shape amp_shape4(int64_t a, int64_t b, int64_t c, int64_t d)
{ amp_shape s = {4, {a, b, c, d}}; return s; }

/* Name of a dtype: "fp32", "fp16", "int32", "bf16". */
const char *amp_dtype_name(amp_dtype dt);
/* Bytes per element. */
size_t amp_dtype_size(amp_dtype dt);

/* ---- context ----------------------------------------------------------------------------- */
typedef struct amp_ctx amp_ctx;
typedef struct amp_tensor amp_tensor;

/* Creates a context.  config_path names an amp.cfg file, or NULL to use $AMP_CONFIG if set;
 * AMP_* environment variables then override the file (see amp_config_set for the keys).
 * On failure *out is NULL and, for configuration errors, errbuf (if not NULL) receives a
 * message naming the file and line.  Free with amp_ctx_free(). */
int amp_ctx_new(const char *config_path, amp_ctx **out, char *errbuf, size_t errlen);
/* Frees the context and every tensor, parameter and optimizer it owns.  NULL is a no-op. */
void amp_ctx_free(amp_ctx *ctx);
/* Message of the last error on this context ("" if none).  Valid until the next call. */
const char *amp_ctx_error(const amp_ctx *ctx);

/* Sets one configuration key, exactly as an amp.cfg line "key = value" would.  Keys:
 *   precision_mode      force_fp32 | allow_mix_precision (= allow_mix_precision_fp16) |
 *                       allow_mix_precision_bf16 | force_fp16 | force_bf16 |
 *                       must_keep_origin_dtype.  The mixed modes run the white list in the
 *                       half type (FP16 or BF16), the black list in FP32, gray ops as their
 *                       inputs; the force modes run every op in the half type but a custom
 *                       black list.  force_fp32 runs every op in FP32 with no loss scaling
 *                       (amp_loss_scale() is 1 whatever loss_scale says; amp_config_get
 *                       still returns the setting); must_keep_origin_dtype runs each op in
 *                       the dtype of its first input (a half type, else FP32), with the loss
 *                       scaling of loss_scale (dynamic unless set).  Default
 *                       allow_mix_precision.
 *   custom_white_list   comma-separated op names forced to the half type (e.g. "Softmax,Exp")
 *   custom_black_list   comma-separated op names forced to FP32
 *   loss_scale          dynamic | <number> (static scale).  Unset, the mode decides: dynamic
 *                       in the FP16 modes, a static 1 (no scaling) in the BF16 modes
 *   loss_scale_init     initial dynamic scale (default 128)
 *   loss_scale_growth_interval  clean steps before growth (default 2000)
 *   loss_scale_growth_factor    default 2;  loss_scale_backoff_factor  default 0.5
 *   loss_scale_min, loss_scale_max  clamps (default 1 and 16777216)
 *   seed                RNG seed for initialisation and dropout (default 1)
 *   num_threads         kernel threads (default 1; also AMP_NUM_THREADS).  This key and
 *                       kernels are the process's, not the context's (one thread pool, one
 *                       dispatch table): the last context to set one sets it for all, and
 *                       amp_config_get reads what is in force
 *   kernels             auto or a kernel path: scalar, avx2, avx512, avx512-bf16, avx512-fp16,
 *                       amx-bf16 (also AMP_KERNELS); one this CPU lacks is refused, naming
 *                       the paths it has
 *   allreduce_dtype     data parallel (amp/amp_mpi.h): fp32 | fp16 | bf16, the payload of the
 *                       gradient all-reduce (default fp32; also AMP_ALLREDUCE_DTYPE).  A half
 *                       payload sends half the bytes; it carries the scaled gradients and is
 *                       summed in FP32 on every hop
 *   allreduce_bucket_kb data parallel: gradients are reduced in buckets of about this many KiB
 *                       of FP32 values, each started as soon as backward has produced it
 *                       (default 1024).  Both all-reduce keys are set before amp_mpi_attach
 *                       (AMP_ESTATE after)
 *   optimizer_sharding  data parallel: on | off (default off; also AMP_OPTIMIZER_SHARDING).  On,
 *                       each rank updates its share of every parameter and the ranks exchange
 *                       the updated values (amp/amp_mpi.h says what that changes); set before
 *                       amp_mpi_attach
 *   gradient_clipping   max global L2 norm of the unscaled gradients (default 0: off); see
 *                       amp_optim_step
 *   gradient_accumulation_steps  micro-batches per optimizer step (default 1); see
 *                       amp_micro_batch_begin
 *   memory_optimize     on | off (default off).  On, the backward pass releases each
 *                       activation and activation gradient once the tape no longer needs it
 *                       (its space is reused by later buffers of the step), and cheap saved
 *                       state is recomputed instead of kept: dropout masks (from the RNG
 *                       state their forward started at), max-pooling argmax (from the
 *                       pool's input) and BatchNorm2D outputs (dropped when backward begins,
 *                       recomputed from their input for each backward that reads them).
 *                       Read what you need from a step's intermediate tensors (logits for
 *                       accuracy) before amp_backward; the loss itself is kept.  Results are
 *                       bit-identical with it off
 *   memory_limit        bytes of tensor memory a step may hold (the sum of the categories
 *                       of amp_run_stats), with an optional k, m or g suffix (KiB, MiB,
 *                       GiB); 0 (default) is no limit.  An allocation past it fails with
 *                       AMP_ELIMIT, naming the op, its layer and the bytes
 * Returns AMP_ECONFIG for an unknown key, bad value or unknown op name; AMP_ESTATE for a
 * loss_scale* key after the first step, memory_optimize inside a step, or a precision mode
 * whose kind of loss scaling differs from the scaler's once it has decided a step. */
int amp_config_set(amp_ctx *ctx, const char *key, const char *value);
/* Reads an amp.cfg file of "key = value" lines ('#' starts a comment). */
int amp_config_load(amp_ctx *ctx, const char *path);
/* Current value of a key as text, or NULL for an unknown key.  Valid until the next set (or
 * read) of that key, whatever other keys are read meanwhile. */
const char *amp_config_get(amp_ctx *ctx, const char *key);

/* Training mode (default on) records the tape and applies dropout; off is inference. */
void amp_set_training(amp_ctx *ctx, int training);

/* ---- steps ------------------------------------------------------------------------------- */
/* A step brackets one iteration.  Tensors made during a step (activations, gradients of
 * activations, inputs) live in the step arena and are released by amp_step_end(): their
 * handles must not be used after it (the next step reuses the memory, handles included, so
 * such a use cannot be told apart).  With memory_optimize, a tensor the backward released is
 * refused by every call (AMP_ESTATE); amp_tensor_data and amp_tensor_grad return NULL for it,
 * its dtype, shape and numel stay readable. */
int amp_step_begin(amp_ctx *ctx);
int amp_step_end(amp_ctx *ctx);
/* Index of the current (or last) step, from 0; -1 before the first amp_step_begin (and for a
 * NULL context). */
int64_t amp_step_index(const amp_ctx *ctx);
/* Samples processed in this step, for throughput in the profile (optional). */
void amp_step_set_samples(amp_ctx *ctx, int64_t samples);
/* Gradient accumulation.  With gradient_accumulation_steps = N a step holds N micro-batches,
 * each a forward pass and an amp_backward; amp_micro_batch_begin() starts the next one and
 * releases the previous micro-batch's step-scoped tensors (activations, inputs, their
 * gradients), while the parameters' master gradients keep accumulating.  Calling it before
 * the first micro-batch is allowed (it then marks where the micro-batches' tensors start).
 * The loss scale stays fixed for the whole step; amp_optim_step() runs once, after the N-th
 * backward, and divides the sum by N (the gradient of the mean loss): one overflow check and
 * one loss-scaler decision per optimizer step.  The step's loss is the mean of the
 * micro-batches' losses.  With N = 1 it is a no-op before the backward. */
int amp_micro_batch_begin(amp_ctx *ctx);

/* ---- tensors ----------------------------------------------------------------------------- */
/* New zeroed step-scoped tensor. */
int amp_tensor_new(amp_ctx *ctx, amp_dtype dt, amp_shape shape, amp_tensor **out);
/* Step-scoped tensor staged from host floats (recorded as an h2d copy).  With dt = AMP_F16 or
 * AMP_BF16 the values are rounded to nearest even on the way in. */
int amp_tensor_from_f32(amp_ctx *ctx, const float *src, amp_shape shape, amp_dtype dt,
                        amp_tensor **out);
/* Step-scoped int32 tensor (labels, token ids), staged as an h2d copy. */
int amp_tensor_from_i32(amp_ctx *ctx, const int32_t *src, amp_shape shape, amp_tensor **out);

amp_dtype amp_tensor_dtype(const amp_tensor *t);
amp_shape amp_tensor_shape(const amp_tensor *t);
int64_t amp_tensor_numel(const amp_tensor *t);
/* Raw storage (float, uint16_t halves or int32_t); owned by the context.  NULL for a NULL
 * tensor or one memory_optimize released. */
void *amp_tensor_data(amp_tensor *t);
/* Copies the tensor into dst (numel floats), converting halves (recorded as a d2h copy). */
int amp_tensor_read_f32(amp_ctx *ctx, const amp_tensor *t, float *dst);
/* Value of a one-element tensor as a double; NAN on error (no tensor, not one element), with
 * amp_ctx_error() saying which. */
double amp_tensor_item(amp_ctx *ctx, const amp_tensor *t);
/* Gradient of a parameter or tensor after amp_backward, or NULL.  For parameters this is the
 * FP32 master gradient, still multiplied by the loss scale; amp_optim_step() unscales, uses and
 * clears it.  Data parallel (amp/amp_mpi.h): after the step's last backward, the sum over the
 * ranks (amp_optim_step divides by their number).  The caller may change it before
 * amp_optim_step. */
amp_tensor *amp_tensor_grad(const amp_tensor *t);

/* ---- parameters -------------------------------------------------------------------------- */
typedef enum {
	AMP_INIT_ZEROS,
	AMP_INIT_ONES,
	AMP_INIT_NORMAL,   /* N(0, scale^2) */
	AMP_INIT_UNIFORM,  /* U(-scale, scale) */
	AMP_INIT_KAIMING,  /* U(-b, b), b = sqrt(6 / fan_in) * scale; fan_in = prod(d[1:]) */
} amp_init;

/* Trainable parameter: an FP32 master tensor that lives as long as the context.  Under AMP the
 * ops use a working copy in the mode's half type (FP16 or BF16) refreshed once per step
 * (recorded as a master copy).  label names
 * it in errors and profiles and is copied.  AMP_EINVAL for an init outside amp_init or a
 * scale that is not finite (NORMAL, UNIFORM, KAIMING). */
int amp_param_new(amp_ctx *ctx, const char *label, amp_shape shape, amp_init init, float scale,
                  amp_tensor **out);
/* Overwrites a parameter's master values from host floats (numel of them). */
int amp_param_load(amp_ctx *ctx, amp_tensor *param, const float *src);

/* ---- ops ----------------------------------------------------------------------------------
 * Every op takes the context, a layer label (may be NULL; a profile keeps its first 1008
 * bytes) and its inputs, and stores a new step-scoped tensor in *out.  The precision policy picks the dtype the op executes in and
 * inserts casts; the result has that dtype.  Shapes are outermost first. */

/* a (M,K) or (K,M) if trans_a; b (K,N) or (N,K) if trans_b -> (M,N). White list. */
int amp_matmul(amp_ctx *ctx, const char *label, amp_tensor *a, amp_tensor *b, int trans_a,
               int trans_b, amp_tensor **out);
/* a (B,M,K), b (B,K,N) with the same transposes per batch -> (B,M,N). White list. */
int amp_batch_matmul(amp_ctx *ctx, const char *label, amp_tensor *a, amp_tensor *b, int trans_a,
                     int trans_b, amp_tensor **out);
/* x (N,in), w (out,in), bias (out) or NULL -> (N,out) = x w^T + bias.  White list. */
int amp_linear(amp_ctx *ctx, const char *label, amp_tensor *x, amp_tensor *w, amp_tensor *bias,
               amp_tensor **out);
/* x (N,C,H,W), w (O,C,KH,KW), bias (O) or NULL -> (N,O,OH,OW).  White list. */
int amp_conv2d(amp_ctx *ctx, const char *label, amp_tensor *x, amp_tensor *w, amp_tensor *bias,
               int stride, int pad, amp_tensor **out);
/* x (N,C,H,W) -> (N,C,(H-k)/stride+1,(W-k)/stride+1).  Gray. */
int amp_maxpool2d(amp_ctx *ctx, const char *label, amp_tensor *x, int k, int stride,
                  amp_tensor **out);
/* Elementwise a + b, a - b, a * b, a / b, max(a, b), min(a, b) with NumPy broadcasting: the
 * shapes are aligned on their last dimension and each pair of extents must be equal or one of
 * them 1 (or missing); the result has the larger extent of each pair, e.g. (N,C,H,W) and
 * (1,C,1,1) -> (N,C,H,W), (4,1) and (3) -> (4,3).  Gradients are summed over the broadcast
 * dimensions.  Maximum and Minimum propagate NaN and split the gradient of a tie evenly.
 * Gray. */
int amp_add(amp_ctx *ctx, const char *label, amp_tensor *a, amp_tensor *b, amp_tensor **out);
int amp_sub(amp_ctx *ctx, const char *label, amp_tensor *a, amp_tensor *b, amp_tensor **out);
int amp_mul(amp_ctx *ctx, const char *label, amp_tensor *a, amp_tensor *b, amp_tensor **out);
int amp_div(amp_ctx *ctx, const char *label, amp_tensor *a, amp_tensor *b, amp_tensor **out);
int amp_maximum(amp_ctx *ctx, const char *label, amp_tensor *a, amp_tensor *b,
                amp_tensor **out);
int amp_minimum(amp_ctx *ctx, const char *label, amp_tensor *a, amp_tensor *b,
                amp_tensor **out);
/* x * s for a scalar s.  Gray. */
int amp_scale(amp_ctx *ctx, const char *label, amp_tensor *x, float s, amp_tensor **out);
/* x (..., C) + bias (C).  Gray. */
int amp_bias_add(amp_ctx *ctx, const char *label, amp_tensor *x, amp_tensor *bias,
                 amp_tensor **out);
/* Gray activations and pointwise functions. GELU uses the tanh approximation; Abs has
 * gradient 0 at 0. */
int amp_relu(amp_ctx *ctx, const char *label, amp_tensor *x, amp_tensor **out);
int amp_gelu(amp_ctx *ctx, const char *label, amp_tensor *x, amp_tensor **out);
int amp_sigmoid(amp_ctx *ctx, const char *label, amp_tensor *x, amp_tensor **out);
int amp_tanh(amp_ctx *ctx, const char *label, amp_tensor *x, amp_tensor **out);
int amp_neg(amp_ctx *ctx, const char *label, amp_tensor *x, amp_tensor **out);
int amp_abs(amp_ctx *ctx, const char *label, amp_tensor *x, amp_tensor **out);
/* min(max(x, lo), hi); lo <= hi, either may be -INFINITY / INFINITY (no bound).  The gradient
 * passes where lo <= x <= hi.  Gray. */
int amp_clamp(amp_ctx *ctx, const char *label, amp_tensor *x, float lo, float hi,
              amp_tensor **out);
/* Over the last dimension.  With causal set, x is (..., T, T) and entries j > i of row i are
 * excluded (probability 0).  Black list. */
int amp_softmax(amp_ctx *ctx, const char *label, amp_tensor *x, int causal, amp_tensor **out);
int amp_log_softmax(amp_ctx *ctx, const char *label, amp_tensor *x, amp_tensor **out);
/* Elementwise, black list. */
int amp_log(amp_ctx *ctx, const char *label, amp_tensor *x, amp_tensor **out);
int amp_exp(amp_ctx *ctx, const char *label, amp_tensor *x, amp_tensor **out);
int amp_sqrt(amp_ctx *ctx, const char *label, amp_tensor *x, amp_tensor **out);
int amp_pow(amp_ctx *ctx, const char *label, amp_tensor *x, float exponent, amp_tensor **out);
/* Over the last dimension C; gamma, beta (C).  Black list. */
int amp_layer_norm(amp_ctx *ctx, const char *label, amp_tensor *x, amp_tensor *gamma,
                   amp_tensor *beta, float eps, amp_tensor **out);
/* logits (N,C), targets int32 (N) -> scalar mean negative log-likelihood (fused log-softmax
 * and NLL).  Black list. */
int amp_cross_entropy(amp_ctx *ctx, const char *label, amp_tensor *logits, amp_tensor *targets,
                      amp_tensor **out);
/* Sum / mean of all elements -> scalar.  Black list. */
int amp_sum(amp_ctx *ctx, const char *label, amp_tensor *x, amp_tensor **out);
int amp_mean(amp_ctx *ctx, const char *label, amp_tensor *x, amp_tensor **out);
/* Sum, mean or maximum over one axis (negative counts from the end: -1 is the last).  The
 * axis is removed from the shape, or kept with extent 1 when keepdim is set: x (N,T,C), axis 1
 * -> (N,C) or (N,1,C).  Sums are accumulated in double.  amp_max_axis takes the first of equal
 * maxima (a NaN wins) and routes the gradient to it; index (may be NULL) receives its position
 * along the axis as a step-scoped int32 tensor of the output's shape.  Op types Sum, Mean and
 * Max; black list. */
int amp_sum_axis(amp_ctx *ctx, const char *label, amp_tensor *x, int axis, int keepdim,
                 amp_tensor **out);
int amp_mean_axis(amp_ctx *ctx, const char *label, amp_tensor *x, int axis, int keepdim,
                  amp_tensor **out);
int amp_max_axis(amp_ctx *ctx, const char *label, amp_tensor *x, int axis, int keepdim,
                 amp_tensor **out, amp_tensor **index);
/* Batch normalisation over (N,H,W) per channel of x (N,C,H,W); gamma, beta (C).  Training
 * (amp_set_training on) normalises with the batch's mean and biased variance and updates the
 * running statistics: running = (1 - momentum) * running + momentum * batch (the variance
 * unbiased, n/(n-1)); inference normalises with the running statistics.  running_mean and
 * running_var are (C) FP32 parameters made with amp_param_new (AMP_INIT_ZEROS and
 * AMP_INIT_ONES): they persist across steps, receive no gradient (so optimizers leave them
 * alone) and are saved with the parameters; both may be NULL in training (no tracking).  The
 * statistics are summed in double.  Black list. */
int amp_batch_norm2d(amp_ctx *ctx, const char *label, amp_tensor *x, amp_tensor *gamma,
                     amp_tensor *beta, amp_tensor *running_mean, amp_tensor *running_var,
                     float momentum, float eps, amp_tensor **out);
/* x (N,C,H,W) -> (N,C,(H-k)/stride+1,(W-k)/stride+1), each output the mean of its k x k
 * window.  Gray. */
int amp_avgpool2d(amp_ctx *ctx, const char *label, amp_tensor *x, int k, int stride,
                  amp_tensor **out);
/* x (N,C,H,W) -> (N,C), the mean of each (H,W) plane.  Gray. */
int amp_global_avgpool2d(amp_ctx *ctx, const char *label, amp_tensor *x, amp_tensor **out);
/* Joins n >= 1 tensors along axis (negative counts from the end); all other extents must be
 * equal.  Gray (half only when every input is). */
int amp_concat(amp_ctx *ctx, const char *label, amp_tensor *const *x, int n, int axis,
               amp_tensor **out);
/* Elements [start, start + len) of x along axis (negative counts from the end): the same
 * shape with extent len there.  Gray. */
int amp_slice(amp_ctx *ctx, const char *label, amp_tensor *x, int axis, int64_t start,
              int64_t len, amp_tensor **out);
/* Same data, new shape (numel must match).  Gray. */
int amp_reshape(amp_ctx *ctx, const char *label, amp_tensor *x, amp_shape shape,
                amp_tensor **out);
/* Swaps dimensions d0 and d1.  Gray. */
int amp_transpose(amp_ctx *ctx, const char *label, amp_tensor *x, int d0, int d1,
                  amp_tensor **out);
/* table (V,C), ids int32 of any shape S -> (S..., C).  Gray. */
int amp_embedding(amp_ctx *ctx, const char *label, amp_tensor *table, amp_tensor *ids,
                  amp_tensor **out);
/* Inverted dropout with probability p, seeded from the context; identity when not training.
 * Gray. */
int amp_dropout(amp_ctx *ctx, const char *label, amp_tensor *x, float p, amp_tensor **out);

/* ---- autograd ---------------------------------------------------------------------------- */
/* Reverse-mode pass from a scalar loss through the step's tape.  Under dynamic or static loss
 * scaling the seed gradient is the loss scale.  Gradients accumulate into parameters' master
 * gradients (scaled until the optimizer unscales them). */
int amp_backward(amp_ctx *ctx, amp_tensor *loss);

/* ---- optimizers -------------------------------------------------------------------------- */
typedef struct amp_optim amp_optim;
typedef struct amp_sgd_options {
	float lr;           /* learning rate */
	float momentum;     /* 0 for plain SGD */
	float weight_decay; /* L2 added to the gradient */
} amp_sgd_options;
typedef struct amp_adamw_options {
	float lr, beta1, beta2, eps; /* usual defaults 1e-3, 0.9, 0.999, 1e-8 */
	float weight_decay;          /* decoupled, applied as p -= lr * wd * p */
} amp_adamw_options;

/* Optimizers act on every parameter of the context.  Owned by the context.  AMP_EINVAL for
 * NULL options or out, or a value out of range: lr finite and >= 0 (0: a warm-up from 0,
 * amp_optim_set_lr), momentum and betas in [0, 1), eps finite and > 0, weight_decay finite and
 * >= 0. */
int amp_optim_sgd_new(amp_ctx *ctx, const amp_sgd_options *opt, amp_optim **out);
int amp_optim_adamw_new(amp_ctx *ctx, const amp_adamw_options *opt, amp_optim **out);
/* A new learning rate from the next amp_optim_step (0 included: a warm-up from 0, a decay to
 * 0); ignored unless finite and >= 0. */
void amp_optim_set_lr(amp_optim *opt, float lr);
/* Unscales the master gradients, checks them for Inf/NaN, lets the loss scaler decide, and
 * updates the masters unless the step overflowed (then the step is skipped).  With
 * gradient_clipping = c > 0, the global L2 norm of the unscaled gradients is taken after the
 * overflow check and, above c, every gradient is multiplied by c / (norm + 1e-6) before the
 * update; an overflowed step is skipped before any norm is taken.  Clears the gradients either
 * way.  *skipped (may be NULL) is set to 1 for a skipped step.  The gradients are the masters'
 * as they stand: written by this step's amp_backward, or by hand (amp_tensor_grad, or
 * amp_dist.h's amp_param_grad_set), or zero (momentum and weight decay still apply).  A step
 * whose amp_backward failed part way is refused (AMP_ESTATE): amp_step_end discards what it
 * wrote. */
int amp_optim_step(amp_optim *opt, int *skipped);
/* Global L2 norm of the unscaled gradients of the last optimizer step (before clipping), NAN
 * when gradient_clipping is off or the step overflowed; and whether that step clipped. */
double amp_grad_norm(const amp_ctx *ctx);
int amp_grad_clipped(const amp_ctx *ctx);

/* ---- checkpoints --------------------------------------------------------------------------
 * One file holds what a run needs to continue exactly where it stopped: every parameter's
 * master values, the optimizers' state (moments, update count, learning rate), the loss
 * scaler (scale, clean steps), the RNG state, the step counter and the gradients held between
 * steps (what steps without amp_optim_step accumulated).  Save between steps; load
 * into a context that created the same parameters (labels and shapes, in the same order) and
 * the same optimizers, before its next step: the run then continues bit-identically with one
 * that never stopped (same binary, configuration and thread count).  The file is versioned and
 * checksummed; save writes a temporary file in the same directory, fsyncs it and renames it
 * over path, so a crash leaves the old checkpoint or the new one, never a torn one.  Load
 * returns AMP_EIO when the file cannot be read, AMP_EFORMAT when it is damaged, truncated,
 * of a newer format or does not fit the context, and AMP_ECONFIG when it was saved under
 * another kind of loss scaling than the context's (a static scale of 1, as the BF16 modes
 * default to, against dynamic scaling); the message says which.  A load that fails leaves the
 * context as it was. */
int amp_checkpoint_save(amp_ctx *ctx, const char *path);
int amp_checkpoint_load(amp_ctx *ctx, const char *path);
/* The program's note, saved with every later checkpoint: text of at most
 * AMP_CHECKPOINT_NOTE_MAX bytes (the settings a resume must match, say, or what the program
 * needs to continue that the context does not hold).  NULL or "" clears it.  A load replaces
 * the context's note with the file's ("" for files from before notes), so that after
 * amp_checkpoint_load amp_checkpoint_note returns what the saving run set; the string is the
 * context's, valid until the next set, load or amp_ctx_free.  AMP_EINVAL past the limit. */
#define AMP_CHECKPOINT_NOTE_MAX (1 << 20)
int amp_checkpoint_set_note(amp_ctx *ctx, const char *note);
const char *amp_checkpoint_note(const amp_ctx *ctx);
/* The note of the checkpoint at path, read without loading it and without a context: what a
 * program checks before amp_checkpoint_load (its own settings against the saving run's; a
 * load of another model or scaling would stop at that first).  The whole file's checksum is
 * checked as a load checks it, the file streamed (memory of the note's size, not the model's).
 * *note is malloc'd text ("" for a file without a note; free() it), NULL on failure.  Returns
 * AMP_OK, AMP_EIO (cannot be read), AMP_EFORMAT (damaged, truncated, newer, not a checkpoint),
 * AMP_ENOMEM or AMP_EINVAL (NULL path or note), the reason in err (errlen bytes, may be NULL). */
int amp_checkpoint_read_note(const char *path, char **note, char *err, size_t errlen);

/* ---- loss scaling and statistics --------------------------------------------------------- */
double amp_loss_scale(const amp_ctx *ctx);
typedef struct amp_run_stats {
	int64_t steps;           /* steps ended */
	int64_t overflow_steps;  /* steps whose gradients held Inf/NaN */
	int64_t skipped_steps;   /* steps whose update was skipped */
	int64_t ops_dispatched;  /* op executions, forward and backward and optimizer */
	int64_t copies;          /* copy and cast events */
	uint64_t peak_bytes;     /* peak of all tensor memory */
	uint64_t peak_param_act_bytes; /* peak of master weights + working copies + activations:
	                                  what the half types save (gradients and optimizer state
	                                  stay FP32) */
	uint64_t bytes_master, bytes_working, bytes_activations, bytes_grads, bytes_optimizer;
	                         /* current bytes by category */
	int64_t clipped_steps;   /* optimizer steps whose gradients gradient_clipping scaled down */
	uint64_t peak_bytes_unoptimized; /* peak_bytes without memory_optimize (what the released
	                                    and recomputed buffers would have added); equal to
	                                    peak_bytes when it is off */
} amp_run_stats;
void amp_run_stats_get(const amp_ctx *ctx, amp_run_stats *out);

/* ---- the library and the CPU ------------------------------------------------------------- */
/* The library's version (AMP_VERSION_STRING of the amp.h it was built with), and the version of the profiling wire format it speaks. */
const char *amp_version(void);
unsigned amp_wire_version(void);
/* The kernel paths this library was built with, i = 0 .. amp_kernel_path_count() - 1, from
 * portable C up: its name ("avx512-bf16"), and NULL if this CPU runs it, else what is missing
 * ("avx512_fp16").  Static strings; NULL name for i out of range. */
int amp_kernel_path_count(void);
const char *amp_kernel_path_name(int i);
const char *amp_kernel_path_missing(int i);
/* The engine ("amx-bf16", "avx512-bf16", "fp32-fma", ...) the GEMMs of dtype dt (AMP_F32,
 * AMP_F16, AMP_BF16) run on with the active kernel path; the engine of the FP32 elementwise
 * ops, and of those of dt (fp16 has its own where the CPU has FP16 arithmetic; bf16 converts
 * in registers on the FP32 one); and the active path's name. */
const char *amp_gemm_engine(amp_dtype dt);
const char *amp_elementwise_engine(void);
const char *amp_elementwise_engine_of(amp_dtype dt);
const char *amp_kernel_path_active(void);
/* Why the GEMMs of dt do not run on a half engine that this CPU has (a static sentence), or
 * NULL when they do or the CPU has none for dt: "auto" leaves out an engine that is slower than
 * FP32 FMA on this CPU (vdpbf16ps on Intel cores). */
const char *amp_gemm_engine_note(amp_dtype dt);

#ifdef __cplusplus
}
#endif
#endif

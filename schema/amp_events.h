/* amp_events.h — the event vocabulary shared by libamprt (producer) and ampprof (collector).
 *
 * This header is the contract between processes: enum values are stored in the profile
 * database as integers and must never be renumbered; add new values at the end.  The ring
 * record layout that carries them is defined below the enums.
 */
#ifndef AMP_EVENTS_H
#define AMP_EVENTS_H

#include <stdint.h>

/* Op types.  Names (amp_op_name) are the ones used in white/black lists and in the database. */
typedef enum {
	AMP_OP_MATMUL = 0,
	AMP_OP_BATCH_MATMUL,
	AMP_OP_LINEAR,
	AMP_OP_CONV2D,
	AMP_OP_MAXPOOL2D,
	AMP_OP_ADD,
	AMP_OP_MUL,
	AMP_OP_SCALE,
	AMP_OP_BIAS_ADD,
	AMP_OP_RELU,
	AMP_OP_GELU,
	AMP_OP_SOFTMAX,
	AMP_OP_LOG_SOFTMAX,
	AMP_OP_LOG,
	AMP_OP_EXP,
	AMP_OP_SQRT,
	AMP_OP_POW,
	AMP_OP_LAYER_NORM,
	AMP_OP_CROSS_ENTROPY,
	AMP_OP_SUM,
	AMP_OP_MEAN,
	AMP_OP_RESHAPE,
	AMP_OP_TRANSPOSE,
	AMP_OP_EMBEDDING,
	AMP_OP_DROPOUT,
	AMP_OP_OPTIMIZER,   /* one optimizer update over all parameters */
	AMP_OP_COUNT
} amp_op_type;

/* Precision class of an op type under allow_mix_precision. */
typedef enum { AMP_LIST_GRAY = 0, AMP_LIST_WHITE = 1, AMP_LIST_BLACK = 2 } amp_op_list;

typedef enum {
	AMP_PHASE_FORWARD = 0,
	AMP_PHASE_BACKWARD = 1,
	AMP_PHASE_OPTIMIZER = 2,
} amp_phase;

/* Memory-copy kinds (the `copies` table). */
typedef enum {
	AMP_COPY_H2D = 0,     /* input staging */
	AMP_COPY_D2H = 1,     /* readback */
	AMP_COPY_D2D = 2,     /* same-dtype copy (contiguous transpose, grad accumulation copy) */
	AMP_COPY_CAST = 3,    /* dtype conversion at a precision boundary */
	AMP_COPY_LAYOUT = 4,  /* layout transform (im2col, transposes) */
	AMP_COPY_MASTER = 5,  /* FP32 master weight -> FP16 working copy refresh (a cast) */
} amp_copy_kind;

/* Loss-scaler decisions (the `loss_scale` table). */
typedef enum {
	AMP_SCALE_HOLD = 0,      /* clean step, below the growth interval */
	AMP_SCALE_GROWTH = 1,    /* growth interval reached: scale *= growth factor */
	AMP_SCALE_OVERFLOW = 2,  /* Inf/NaN in gradients: scale *= backoff, step skipped */
	AMP_SCALE_INIT = 3,      /* initial scale */
	AMP_SCALE_STATIC = 4,    /* static scale in use */
} amp_scale_reason;

/* Memory categories (the `memory` table). */
typedef enum {
	AMP_MEM_MASTER = 0,       /* FP32 master weights */
	AMP_MEM_WORKING = 1,      /* FP16 working copies of weights */
	AMP_MEM_ACTIVATIONS = 2,  /* step-scoped activations and inputs */
	AMP_MEM_GRADS = 3,        /* gradients */
	AMP_MEM_OPTIMIZER = 4,    /* optimizer state (momentum, Adam moments) */
	AMP_MEM_NCAT
} amp_mem_category;

const char *amp_op_name(amp_op_type op);
/* Op type for a name as used in lists ("MatMul"), or -1. */
int amp_op_from_name(const char *name);
const char *amp_phase_name(amp_phase ph);
const char *amp_copy_kind_name(amp_copy_kind k);
const char *amp_scale_reason_name(amp_scale_reason r);
const char *amp_mem_category_name(amp_mem_category c);

#endif

/* optim_int.h — the optimizer object, shared by optim.c (which runs it) and checkpoint.c
 * (which saves and restores its state). */
#ifndef AMP_OPTIM_INT_H
#define AMP_OPTIM_INT_H

#include "internal.h"

typedef enum { OPTIM_SGD, OPTIM_ADAMW } optim_kind;

struct amp_optim {
	amp_ctx *ctx;
	optim_kind kind;
	amp_sgd_options sgd;
	amp_adamw_options adamw;
	int64_t t;       /* update count (AdamW's bias correction) */
	amp_optim *next; /* the context's optimizers, newest first */
};

#endif

/* transformer.h — the pre-LayerNorm transformer both KJV examples train (charlm: causal, a
 * language model; bert_kjv: bidirectional, masked characters): hyperparameters, the parameters
 * of each block with their labels, and the model's parameters.  Every op (the forward passes,
 * their head splits) stays in the examples, so that profiled call sites point at their lines.
 */
#ifndef AMP_EX_TRANSFORMER_H
#define AMP_EX_TRANSFORMER_H

#include <stdint.h>

#include "amp/amp.h"
#include "cli.h"

#define MAX_LAYERS 8 /* blocks a model may have */

typedef struct hparams {
	int64_t ctx_len, d_model, layers, heads, vocab;
} hparams;

/* The flags both KJV examples share, each named with its range when out of it (ex_usage_error):
 * the model's sizes (hp's vocab unused; the context from min_context), the batch, the
 * evaluations, the warm-up, the time limit.  Returns 0, or 2 after the message. */
int tf_check_options(const ex_program *prog, const ex_common *opt, const hparams *hp,
                     int64_t min_context, int64_t eval_batches, int64_t eval_every, int64_t warmup,
                     double minutes);

/* Op labels of one block, "attn0.q" and so on, so that profiles tell the layers apart. */
enum {
	L_LN1,
	L_Q,
	L_K,
	L_V,
	L_SPLIT,
	L_SCORES,
	L_SCALE,
	L_SOFTMAX,
	L_MIX,
	L_MERGE,
	L_PROJ,
	L_RESID1,
	L_LN2,
	L_FC,
	L_GELU,
	L_FCPROJ,
	L_RESID2,
	L_COUNT
};

typedef struct block {
	amp_tensor *ln1_g, *ln1_b, *wq, *bq, *wk, *bk, *wv, *bv, *wo, *bo;
	amp_tensor *ln2_g, *ln2_b, *w_fc, *b_fc, *w_proj, *b_proj;
	char label[L_COUNT][24];
} block;

typedef struct model {
	hparams hp;
	amp_tensor *tok_emb, *pos_emb, *lnf_g, *lnf_b, *w_head, *b_head;
	block blk[MAX_LAYERS];
} model;

/* The model's parameters: embeddings of m->hp.vocab tokens and m->hp.ctx_len positions,
 * m->hp.layers blocks (each op label "attn0.q" and so on in block.label), a final LayerNorm and
 * a head of head_out outputs.  Returns AMP_OK or the runtime's error. */
int tf_model_init(amp_ctx *ctx, model *m, int64_t head_out);

#endif

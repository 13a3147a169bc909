/* bert_kjv.c — a BERT-style character encoder on the King James Bible: token + position
 * embeddings (the positions start as sinusoids), pre-LayerNorm blocks of bidirectional
 * multi-head self-attention (Softmax) and a GELU MLP, a final LayerNorm and a linear head,
 * trained with the masked-token objective:
 * 15 % of each window's characters are chosen, 80 % of those replaced by a [MASK] token, 10 %
 * by a random character, 10 % kept, and the loss is the cross-entropy of the original
 * characters at the chosen positions only (their hidden states are gathered with an
 * Embedding lookup into the final activations).  AdamW.
 *
 * Training stops at --steps, after --epochs passes over the training tokens, or after --minutes,
 * whichever comes first; the last 5 % of the text is the validation set, masked the same way
 * with a fixed seed.  --memory-optimize and --memory-limit set the runtime's keys of those
 * names (bench/memopt_batch.sh searches the batch that fits).  The ops are called right here so
 * that profiled call sites point at these lines.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amp/amp.h"
#include "common/batch.h"
#include "common/cli.h"
#include "common/data.h"
#include "common/transformer.h"

/* (B,T,D) -> (B*H,T,hd): split the model dimension into heads. */
static int split_heads(amp_ctx *ctx, const char *label, amp_tensor *x, const hparams *hp, int64_t B,
                           int64_t T, amp_tensor **out)
{
	const int64_t H = hp->heads, hd = hp->d_model / hp->heads;
	amp_tensor *r, *t;
	int rc;
	if ((rc = amp_reshape(ctx, label, x, amp_shape4(B, T, H, hd), &r)) ||
	    (rc = amp_transpose(ctx, label, r, 1, 2, &t)) || /* (B,H,T,hd) */
	    (rc = amp_reshape(ctx, label, t, amp_shape3(B * H, T, hd), out)))
		return rc;
	return AMP_OK;
}

/* The position table starts as the sinusoids of the original transformer (sin and cos of
 * t / 10000^(2i/D) on dimensions 2i and 2i+1), at the token embeddings' RMS (0.1), instead of
 * tf_model_init's noise of 0.02.  It is still learned.  With noise the masked-character
 * objective sits on the unigram plateau (about 2.75 nats) for many hundred steps: predicting
 * a character needs attention to its neighbours, and positions that are noise under a
 * LayerNorm dominated by the token give the queries and keys nothing to find them by; the
 * sinusoids' dot products fall off with the distance |t - s| from the first step. */
static int init_positions(amp_ctx *ctx, const model *m)
{
	const int64_t T = m->hp.ctx_len, D = m->hp.d_model;
	float *pe = malloc((size_t)(T * D) * sizeof(float));
	if (!pe)
		return AMP_ENOMEM;
	const double scale = 0.1 * sqrt(2.0); /* a row's RMS: scale / sqrt(2) */
	for (int64_t t = 0; t < T; t++)
		for (int64_t i = 0; i < D; i++) {
			double w = pow(10000.0, -(double)(i - i % 2) / (double)D);
			pe[t * D + i] = (float)(scale * (i % 2 ? cos((double)t * w) : sin((double)t * w)));
		}
	int rc = amp_param_load(ctx, m->pos_emb, pe);
	free(pe);
	return rc;
}

/* ids: (B,T) int32 token ids (the vocabulary and [MASK]), picks: (P) int32 positions b*T+t
 * of the chosen characters -> logits (P, V - 1) at those positions. */
static int model_forward(amp_ctx *ctx, const model *m, amp_tensor *ids, amp_tensor *pos_ids,
                         amp_tensor *picks, int64_t B, int64_t T, amp_tensor **logits)
{
	const hparams *hp = &m->hp;
	const int64_t D = hp->d_model, H = hp->heads, hd = D / H;
	const float att_scale = 1.0f / sqrtf((float)hd), eps = 1e-5f;
	amp_tensor *tok, *pos, *x, *flat;
	int rc;
	if ((rc = amp_embedding(ctx, "tok_emb", m->tok_emb, ids, &tok)) ||     /* (B,T,D) */
	    (rc = amp_embedding(ctx, "pos_emb", m->pos_emb, pos_ids, &pos)) || /* (T,D) */
	    (rc = amp_add(ctx, "embed", tok, pos, &x)))
		return rc;
	for (int64_t l = 0; l < hp->layers; l++) {
		const block *b = &m->blk[l];
		amp_tensor *h, *q, *k, *v, *qh, *kh, *vh, *att, *att_s, *p, *yh, *y4, *yt, *y, *o;
		amp_tensor *x2, *h2, *f, *g, *f2;
		/* Bidirectional self-attention, all heads at once as a batch of (T,hd) matrices:
		 * scores and probabilities (B*H,T,T), mix (B*H,T,hd), merged back to (B,T,D). */
		if ((rc = amp_layer_norm(ctx, b->label[L_LN1], x, b->ln1_g, b->ln1_b, eps, &h)) ||
		    (rc = amp_linear(ctx, b->label[L_Q], h, b->wq, b->bq, &q)) ||
		    (rc = amp_linear(ctx, b->label[L_K], h, b->wk, b->bk, &k)) ||
		    (rc = amp_linear(ctx, b->label[L_V], h, b->wv, b->bv, &v)) ||
		    (rc = split_heads(ctx, b->label[L_SPLIT], q, hp, B, T, &qh)) ||
		    (rc = split_heads(ctx, b->label[L_SPLIT], k, hp, B, T, &kh)) ||
		    (rc = split_heads(ctx, b->label[L_SPLIT], v, hp, B, T, &vh)) ||
		    (rc = amp_batch_matmul(ctx, b->label[L_SCORES], qh, kh, 0, 1, &att)) ||
		    (rc = amp_scale(ctx, b->label[L_SCALE], att, att_scale, &att_s)) ||
		    (rc = amp_softmax(ctx, b->label[L_SOFTMAX], att_s, 0, &p)) ||
		    (rc = amp_batch_matmul(ctx, b->label[L_MIX], p, vh, 0, 0, &yh)) ||
		    (rc = amp_reshape(ctx, b->label[L_MERGE], yh, amp_shape4(B, H, T, hd), &y4)) ||
		    (rc = amp_transpose(ctx, b->label[L_MERGE], y4, 1, 2, &yt)) ||
		    (rc = amp_reshape(ctx, b->label[L_MERGE], yt, amp_shape3(B, T, D), &y)) ||
		    (rc = amp_linear(ctx, b->label[L_PROJ], y, b->wo, b->bo, &o)) ||
		    (rc = amp_add(ctx, b->label[L_RESID1], x, o, &x2)))
			return rc;
		/* MLP: D -> 4D -> GELU -> D. */
		if ((rc = amp_layer_norm(ctx, b->label[L_LN2], x2, b->ln2_g, b->ln2_b, eps, &h2)) ||
		    (rc = amp_linear(ctx, b->label[L_FC], h2, b->w_fc, b->b_fc, &f)) ||
		    (rc = amp_gelu(ctx, b->label[L_GELU], f, &g)) ||
		    (rc = amp_linear(ctx, b->label[L_FCPROJ], g, b->w_proj, b->b_proj, &f2)) ||
		    (rc = amp_add(ctx, b->label[L_RESID2], x2, f2, &x)))
			return rc;
	}
	/* only the chosen positions go through the head: (B*T,D) rows gathered to (P,D) */
	amp_tensor *picked, *hf;
	if ((rc = amp_reshape(ctx, "pick", x, amp_shape2(B * T, D), &flat)) ||
	    (rc = amp_embedding(ctx, "pick", flat, picks, &picked)) ||
	    (rc = amp_layer_norm(ctx, "lnf", picked, m->lnf_g, m->lnf_b, eps, &hf)) ||
	    (rc = amp_linear(ctx, "head", hf, m->w_head, m->b_head, logits))) /* (P,V-1) */
		return rc;
	return AMP_OK;
}

/* Host buffers for one batch of B windows of T tokens, P = B * picks_per_window chosen. */
typedef struct batch_buf {
	int32_t *ids, *pos, *picks, *targets;
	int64_t per_window; /* chosen characters per window: 15 % of T, rounded */
	int32_t mask_id;    /* [MASK]: the id after the vocabulary's */
	int32_t n_chars;    /* the vocabulary's size */
} batch_buf;

/* Fills ids from windows starting at starts[0..B) and chooses per_window distinct positions of
 * each (a partial Fisher-Yates shuffle with rng): 80 % become [MASK], 10 % a random
 * character, 10 % stay; picks and targets get their flat positions and original characters. */
static void fill_batch(const int32_t *tokens, const int64_t *starts, int64_t B, int64_t T,
                       batch_buf *bb, ex_rng *rng)
{
	int32_t order[1024];
	const int64_t P = bb->per_window;
	for (int64_t b = 0; b < B; b++) {
		for (int64_t t = 0; t < T; t++) {
			bb->ids[b * T + t] = tokens[starts[b] + t];
			order[t] = (int32_t)t;
		}
		for (int64_t j = 0; j < P; j++) {
			int64_t k = j + (int64_t)ex_rng_below(rng, (uint64_t)(T - j));
			int32_t tmp = order[j];
			order[j] = order[k];
			order[k] = tmp;
			int64_t at = b * T + order[j];
			bb->picks[b * P + j] = (int32_t)at;
			bb->targets[b * P + j] = bb->ids[at];
			double u = ex_rng_uniform(rng);
			if (u < 0.8)
				bb->ids[at] = bb->mask_id;
			else if (u < 0.9)
				bb->ids[at] = (int32_t)ex_rng_below(rng, (uint64_t)bb->n_chars);
		}
	}
}

/* One forward (and, when training, backward + update) step over bb; *loss gets its value. */
static int run_step(amp_ctx *ctx, const model *m, amp_optim *opt, const batch_buf *bb, int64_t B,
                    int64_t T, double *loss)
{
	amp_tensor *ids, *tgt, *pos, *picks, *logits, *l;
	const int64_t P = B * bb->per_window;
	int rc;
	if ((rc = amp_step_begin(ctx)))
		return rc;
	if ((rc = amp_tensor_from_i32(ctx, bb->ids, amp_shape2(B, T), &ids)) ||
	    (rc = amp_tensor_from_i32(ctx, bb->targets, amp_shape1(P), &tgt)) ||
	    (rc = amp_tensor_from_i32(ctx, bb->pos, amp_shape1(T), &pos)) ||
	    (rc = amp_tensor_from_i32(ctx, bb->picks, amp_shape1(P), &picks)) ||
	    (rc = model_forward(ctx, m, ids, pos, picks, B, T, &logits)) ||
	    (rc = amp_cross_entropy(ctx, "loss", logits, tgt, &l)))
		goto out;
	*loss = amp_tensor_item(ctx, l);
	if (opt && ((rc = amp_backward(ctx, l)) || (rc = amp_optim_step(opt, NULL))))
		goto out;
	amp_step_set_samples(ctx, B);
out:;
	int rc_end = amp_step_end(ctx);
	return rc ? rc : rc_end;
}

/* The validation text and the first crossing of --target by its loss. */
typedef struct validation {
	const int32_t *tokens;    /* the last 5 % of the text */
	int64_t n, batches;       /* tokens; batches per evaluation */
	double target;            /* nats/char */
	double loss;              /* of the last evaluation; NAN before the first */
	int64_t steps_to_target;  /* first step whose evaluation fell below target; -1: none */
	double seconds_to_target; /* training seconds by then; NAN: none */
} validation;

/* Mean loss over n_batches fixed, evenly spaced windows of the validation tokens. */
static int evaluate(amp_ctx *ctx, const model *m, const int32_t *val, int64_t n_val,
                    int64_t n_batches, int64_t B, batch_buf *bb, double *val_loss)
{
	ex_rng rng; /* the same masks at every evaluation */
	ex_rng_seed(&rng, 12345);
	const int64_t T = m->hp.ctx_len, windows = n_batches * B;
	const int64_t span = n_val - T - 1;
	int64_t starts[512];
	double sum = 0;
	int rc = AMP_OK;
	amp_set_training(ctx, 0);
	for (int64_t i = 0; i < n_batches && rc == AMP_OK; i++) {
		for (int64_t b = 0; b < B; b++)
			starts[b] = span * (i * B + b) / windows;
		fill_batch(val, starts, B, T, bb, &rng);
		double l = 0;
		rc = run_step(ctx, m, NULL, bb, B, T, &l);
		sum += l;
	}
	amp_set_training(ctx, 1);
	*val_loss = sum / (double)n_batches;
	return rc;
}

/* Evaluates after step, prints "step S  val_loss L  (T s of training)" and records in v the
 * first loss below the target, announcing it when announce is set. */
static int validate(amp_ctx *ctx, const model *m, validation *v, int64_t B, batch_buf *bb,
                    int64_t step, double train_time, int announce)
{
	int rc = evaluate(ctx, m, v->tokens, v->n, v->batches, B, bb, &v->loss);
	if (rc)
		return rc;
	printf("step %6lld  val_loss %.4f  (%.0f s of training)\n", (long long)step, v->loss,
	       train_time);
	if (v->steps_to_target < 0 && v->loss < v->target) {
		v->steps_to_target = step;
		v->seconds_to_target = train_time;
		if (announce)
			printf("validation loss below %g nats/char at step %lld after %.1f s\n",
			       v->target, (long long)step, train_time);
	}
	return AMP_OK;
}

int main(int argc, char **argv)
{
	int64_t ctx_len = 32, d_model = 128, layers = 2, heads = 8;
	int64_t eval_every = 200, eval_batches = 16, warmup = 100;
	double minutes = 10, weight_decay = 0.01, target = 1.6;
	const char *text_path = NULL, *memory_limit = NULL;
	int memory_optimize = 0;
	const ex_option extra[] = {
	    {"minutes", EX_OPT_FLOAT, &minutes, "X", "stop training after X minutes (0: no limit)"},
	    {"context", EX_OPT_INT, &ctx_len, "N", "context length in characters"},
	    {"d-model", EX_OPT_INT, &d_model, "N", "model width"},
	    {"layers", EX_OPT_INT, &layers, "N", "transformer blocks"},
	    {"heads", EX_OPT_INT, &heads, "N", "attention heads"},
	    {"weight-decay", EX_OPT_FLOAT, &weight_decay, "X", "AdamW decoupled weight decay"},
	    {"warmup", EX_OPT_INT, &warmup, "N", "linear learning-rate warm-up steps"},
	    {"eval-every", EX_OPT_INT, &eval_every, "N",
	     "validation every N steps (0: at the end)"},
	    {"eval-batches", EX_OPT_INT, &eval_batches, "N", "validation batches per evaluation"},
	    {"target", EX_OPT_FLOAT, &target, "X",
	     "validation loss (nats/char) whose first crossing is timed"},
	    {"text", EX_OPT_STRING, &text_path, "FILE", "train on this text instead of the KJV"},
	    {"memory-optimize", EX_OPT_FLAG, &memory_optimize, NULL,
	     "memory_optimize = on (release what the backward pass is done with)"},
	    {"memory-limit", EX_OPT_STRING, &memory_limit, "BYTES",
	     "memory_limit (bytes, k/m/g suffixes): a step past it fails"},
	};
	const ex_program prog = {"bert_kjv",
	                         "Trains a BERT-style character encoder on the King James Bible "
	                         "with the masked-token objective (AdamW).",
	                         extra, (int)(sizeof extra / sizeof extra[0]), 0};
	ex_common opt = {.epochs = 1, .batch = 32, .lr = 3e-3, .seed = -1, .log_every = 50};
	int status = ex_parse_args(&prog, &opt, argc, argv);
	if (status)
		return status == 1 ? 0 : 2;
	const hparams hp = {ctx_len, d_model, layers, heads, 0};
	if ((status =
	         tf_check_options(&prog, &opt, &hp, 7, eval_batches, eval_every, warmup, minutes)))
		return status;

	char err[1024];
	ex_text text = {0};
	amp_ctx *ctx = NULL;
	int32_t *tokens = NULL;
	batch_buf bb = {0};
	status = 1;
	if (text_path ? ex_text_load_file(text_path, &text, err, sizeof err)
	              : ex_kjv_load(&text, err, sizeof err)) {
		fprintf(stderr, "bert_kjv: %s\n", err);
		goto out;
	}
	ex_vocab vocab;
	ex_vocab_build(&vocab, text.data, text.len);
	tokens = malloc(text.len * sizeof(int32_t));
	bb.per_window = (ctx_len * 15 + 50) / 100;
	bb.mask_id = (int32_t)vocab.size;
	bb.n_chars = (int32_t)vocab.size;
	bb.ids = malloc((size_t)(opt.batch * ctx_len) * sizeof(int32_t));
	bb.targets = malloc((size_t)(opt.batch * bb.per_window) * sizeof(int32_t));
	bb.picks = malloc((size_t)(opt.batch * bb.per_window) * sizeof(int32_t));
	bb.pos = malloc((size_t)ctx_len * sizeof(int32_t));
	if (!tokens || !bb.ids || !bb.targets || !bb.picks || !bb.pos) {
		fprintf(stderr, "bert_kjv: out of memory\n");
		goto out;
	}
	for (size_t i = 0; i < text.len; i++)
		tokens[i] = vocab.ids[(unsigned char)text.data[i]];
	for (int64_t t = 0; t < ctx_len; t++)
		bb.pos[t] = (int32_t)t;
	/* Fixed split: the last 5 % (Revelation and the end of the New Testament) validates. */
	const int64_t n_train = (int64_t)text.len * 95 / 100, n_val = (int64_t)text.len - n_train;
	if (n_val < ctx_len + 2 || n_train < ctx_len + 2) {
		fprintf(stderr, "bert_kjv: text too short (%zu bytes) for context %lld\n", text.len,
		        (long long)ctx_len);
		goto out;
	}
	if (ex_ctx_open(&prog, &opt, &ctx))
		goto out;
	int rc;
	if ((memory_optimize && (rc = amp_config_set(ctx, "memory_optimize", "on"))) ||
	    (memory_limit && (rc = amp_config_set(ctx, "memory_limit", memory_limit)))) {
		status = ex_fail(&prog, ctx, "configuration", rc);
		goto out;
	}

	/* the vocabulary and [MASK] in, the vocabulary out */
	model m = {.hp = {ctx_len, d_model, layers, heads, vocab.size + 1}};
	amp_optim *adamw;
	amp_adamw_options ao = {.lr = (float)opt.lr,
	                        .beta1 = 0.9f,
	                        .beta2 = 0.99f,
	                        .eps = 1e-8f,
	                        .weight_decay = (float)weight_decay};
	/* the head predicts characters, not [MASK] */
	if ((rc = tf_model_init(ctx, &m, m.hp.vocab - 1)) || (rc = init_positions(ctx, &m)) ||
	    (rc = amp_optim_adamw_new(ctx, &ao, &adamw))) {
		status = ex_fail(&prog, ctx, "setup", rc);
		goto out;
	}
	ex_rng rng;
	ex_rng_seed(&rng, ex_ctx_seed(ctx));
	const int64_t tokens_per_step = opt.batch * ctx_len;
	int64_t max_steps = (n_train * opt.epochs + tokens_per_step - 1) / tokens_per_step;
	if (opt.steps && opt.steps < max_steps)
		max_steps = opt.steps;
	printf("bert_kjv: %s, %zu characters (vocabulary %d + [MASK]), %lld train / %lld validation; "
	       "context %lld, d_model %lld, %lld layers, %lld heads, batch %lld; at most %lld "
	       "steps or %g minutes\n",
	       ex_precision_name(ctx), text.len, vocab.size, (long long)n_train, (long long)n_val,
	       (long long)ctx_len, (long long)d_model, (long long)layers, (long long)heads,
	       (long long)opt.batch, (long long)max_steps, minutes);

	validation val = {.tokens = tokens + n_train,
	                  .n = n_val,
	                  .batches = eval_batches,
	                  .target = target,
	                  .loss = NAN,
	                  .steps_to_target = -1,
	                  .seconds_to_target = NAN};
	ex_loss_window losses = {0};
	ex_meter meter;
	ex_meter_start(&meter, opt.log_every, "tokens/s");
	double train_time = 0;
	int64_t step = 0, starts[512], last_eval = -1;
	while (step < max_steps) {
		if (minutes > 0 && train_time >= minutes * 60) {
			printf("time limit of %g minutes reached\n", minutes);
			break;
		}
		double t0 = ex_now();
		float lr = (float)opt.lr;
		if (step < warmup)
			lr *= (float)(step + 1) / (float)warmup;
		amp_optim_set_lr(adamw, lr);
		for (int64_t b = 0; b < opt.batch; b++)
			starts[b] = (int64_t)ex_rng_below(&rng, (uint64_t)(n_train - ctx_len - 1));
		fill_batch(tokens, starts, opt.batch, ctx_len, &bb, &rng);
		double loss = NAN;
		if ((rc = run_step(ctx, &m, adamw, &bb, opt.batch, ctx_len, &loss))) {
			status = ex_fail(&prog, ctx, "training step", rc);
			goto out;
		}
		train_time += ex_now() - t0;
		ex_loss_window_add(&losses, loss);
		step++;
		ex_meter_step(&meter, step, 1 + step * tokens_per_step / n_train, loss,
		              amp_loss_scale(ctx), tokens_per_step);
		if ((eval_every && step % eval_every == 0) || step == max_steps) {
			last_eval = step;
			if ((rc = validate(ctx, &m, &val, opt.batch, &bb, step, train_time, 1))) {
				status = ex_fail(&prog, ctx, "evaluation", rc);
				goto out;
			}
		}
	}
	/* Stopped by the clock between evaluations. */
	if (last_eval != step &&
	    (rc = validate(ctx, &m, &val, opt.batch, &bb, step, train_time, 0))) {
		status = ex_fail(&prog, ctx, "evaluation", rc);
		goto out;
	}
	printf("final masked-character validation loss %.4f nats after %lld steps, %.1f s (%s)\n", val.loss,
	       (long long)step, train_time, ex_precision_name(ctx));

	if (opt.json) {
		ex_json j;
		ex_json_run_begin(&j, "bert_kjv", ctx, step);
		ex_json_int(&j, "batch", opt.batch);
		ex_json_int(&j, "context", ctx_len);
		ex_json_num(&j, "val_loss", val.loss);
		ex_json_num(&j, "final_loss", ex_loss_window_mean(&losses));
		ex_json_num(&j, "target_val_loss", target);
		ex_json_int(&j, "steps_to_target", val.steps_to_target);
		ex_json_num(&j, "seconds_to_target", val.seconds_to_target);
		ex_json_throughput(&j, train_time, step * opt.batch);
		ex_json_num(&j, "tokens_per_sec",
		            train_time > 0 ? (double)(step * tokens_per_step) / train_time : 0);
		ex_json_run_print(&j, ctx);
	}
	status = 0;
out:
	free(tokens);
	free(bb.ids);
	free(bb.targets);
	free(bb.picks);
	free(bb.pos);
	amp_ctx_free(ctx);
	ex_text_free(&text);
	return status;
}

/* charlm.c — a small character-level transformer language model on the King James Bible:
 * token + position embeddings, two pre-LayerNorm blocks of causal multi-head self-attention
 * (Softmax) and a GELU MLP, a final LayerNorm and a linear head; AdamW.
 *
 * Training stops at --steps, after --epochs passes over the training tokens, or after --minutes,
 * whichever comes first; the last 5 % of the text is the validation set.  The ops are called
 * right here so that profiled call sites point at these lines.  Ends with a generated sample.
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

/* ids: (B,T) int32 token ids -> logits (B*T, V). */
static int model_forward(amp_ctx *ctx, const model *m, amp_tensor *ids, amp_tensor *pos_ids,
                         int64_t B, int64_t T, amp_tensor **logits)
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
		/* Causal self-attention, all heads at once as a batch of (T,hd) matrices:
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
		    (rc = amp_softmax(ctx, b->label[L_SOFTMAX], att_s, 1, &p)) ||
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
	amp_tensor *hf, *out;
	if ((rc = amp_layer_norm(ctx, "lnf", x, m->lnf_g, m->lnf_b, eps, &hf)) ||
	    (rc = amp_linear(ctx, "head", hf, m->w_head, m->b_head, &out)) || /* (B,T,V) */
	    (rc = amp_reshape(ctx, "head", out, amp_shape2(B * T, hp->vocab), &flat)))
		return rc;
	*logits = flat;
	return AMP_OK;
}

/* Host buffers for one batch of B windows of T+1 tokens. */
typedef struct batch_buf {
	int32_t *ids, *targets, *pos;
} batch_buf;

/* Fills ids/targets from windows starting at starts[0..B). */
static void fill_batch(const int32_t *tokens, const int64_t *starts, int64_t B, int64_t T,
                       batch_buf *bb)
{
	for (int64_t b = 0; b < B; b++)
		for (int64_t t = 0; t < T; t++) {
			bb->ids[b * T + t] = tokens[starts[b] + t];
			bb->targets[b * T + t] = tokens[starts[b] + t + 1];
		}
}

/* One forward (and, when training, backward + update) step over bb; *loss gets its value. */
static int run_step(amp_ctx *ctx, const model *m, amp_optim *opt, const batch_buf *bb, int64_t B,
                    int64_t T, double *loss)
{
	amp_tensor *ids, *tgt, *pos, *logits, *l;
	int rc;
	if ((rc = amp_step_begin(ctx)))
		return rc;
	if ((rc = amp_tensor_from_i32(ctx, bb->ids, amp_shape2(B, T), &ids)) ||
	    (rc = amp_tensor_from_i32(ctx, bb->targets, amp_shape1(B * T), &tgt)) ||
	    (rc = amp_tensor_from_i32(ctx, bb->pos, amp_shape1(T), &pos)) ||
	    (rc = model_forward(ctx, m, ids, pos, B, T, &logits)) ||
	    (rc = amp_cross_entropy(ctx, "loss", logits, tgt, &l)))
		goto out;
	*loss = amp_tensor_item(ctx, l);
	if (opt && ((rc = amp_backward(ctx, l)) || (rc = amp_optim_step(opt, NULL))))
		goto out;
	amp_step_set_samples(ctx, B * T);
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
	const int64_t T = m->hp.ctx_len, windows = n_batches * B;
	const int64_t span = n_val - T - 1;
	int64_t starts[512];
	double sum = 0;
	int rc = AMP_OK;
	amp_set_training(ctx, 0);
	for (int64_t i = 0; i < n_batches && rc == AMP_OK; i++) {
		for (int64_t b = 0; b < B; b++)
			starts[b] = span * (i * B + b) / windows;
		fill_batch(val, starts, B, T, bb);
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

/* Samples n characters after prompt with temperature sampling, printing them as they come. */
static int generate(amp_ctx *ctx, const model *m, const ex_vocab *vocab, const char *prompt,
                    int64_t n, double temperature, ex_rng *rng)
{
	const int64_t T = m->hp.ctx_len, V = m->hp.vocab;
	size_t plen = strlen(prompt);
	int64_t cap = (int64_t)plen + n + 1; /* + the newline an empty prompt starts from */
	int32_t *seq = malloc((size_t)cap * sizeof(int32_t)), pos[1024];
	float *logits = malloc((size_t)(T * V) * sizeof(float));
	double *p = malloc((size_t)V * sizeof(double));
	int rc = seq && logits && p ? AMP_OK : AMP_ENOMEM;
	int64_t len = 0;
	for (size_t i = 0; i < plen && rc == AMP_OK; i++) {
		/* A character the text never uses becomes token 0. */
		int id = vocab->ids[(unsigned char)prompt[i]];
		seq[len++] = id >= 0 ? id : 0;
	}
	if (len == 0 && rc == AMP_OK)
		seq[len++] = vocab->ids['\n'] >= 0 ? vocab->ids['\n'] : 0;
	for (int64_t t = 0; t < T; t++)
		pos[t] = (int32_t)t;
	fputs(prompt, stdout);
	amp_set_training(ctx, 0);
	for (int64_t i = 0; i < n && rc == AMP_OK; i++) {
		int64_t t = len < T ? len : T;
		const int32_t *window = seq + len - t;
		amp_tensor *ids, *pt, *out;
		if ((rc = amp_step_begin(ctx)))
			break;
		if ((rc = amp_tensor_from_i32(ctx, window, amp_shape2(1, t), &ids)) == AMP_OK &&
		    (rc = amp_tensor_from_i32(ctx, pos, amp_shape1(t), &pt)) == AMP_OK &&
		    (rc = model_forward(ctx, m, ids, pt, 1, t, &out)) == AMP_OK)
			rc = amp_tensor_read_f32(ctx, out, logits);
		int rc_end = amp_step_end(ctx);
		if (rc || (rc = rc_end))
			break;
		/* Softmax of the last position at the given temperature, then one draw. */
		const float *last = logits + (t - 1) * V;
		double mx = (double)last[0], total = 0;
		for (int64_t c = 1; c < V; c++)
			mx = fmax(mx, (double)last[c]);
		for (int64_t c = 0; c < V; c++)
			total += p[c] = exp(((double)last[c] - mx) / temperature);
		double u = ex_rng_uniform(rng) * total;
		int64_t c = 0;
		while (c < V - 1 && (u -= p[c]) > 0)
			c++;
		seq[len++] = (int32_t)c;
		putchar(vocab->chars[c]);
	}
	putchar('\n');
	amp_set_training(ctx, 1);
	free(seq);
	free(logits);
	free(p);
	return rc;
}

int main(int argc, char **argv)
{
	int64_t ctx_len = 64, d_model = 128, layers = 2, heads = 4, sample_len = 300;
	int64_t eval_every = 200, eval_batches = 16, warmup = 100;
	double minutes = 10, temperature = 0.8, weight_decay = 0.01, target = 2.0;
	const char *text_path = NULL, *prompt = "And God said";
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
	    {"sample-len", EX_OPT_INT, &sample_len, "N", "characters to generate at the end"},
	    {"temperature", EX_OPT_FLOAT, &temperature, "X", "sampling temperature"},
	    {"prompt", EX_OPT_STRING, &prompt, "TEXT", "start of the generated sample"},
	};
	const ex_program prog = {"charlm",
	                         "Trains a small character-level transformer on the King James "
	                         "Bible (AdamW) and samples from it.",
	                         extra, (int)(sizeof extra / sizeof extra[0]), 0};
	ex_common opt = {.epochs = 1, .batch = 32, .lr = 2e-3, .seed = -1, .log_every = 50};
	int status = ex_parse_args(&prog, &opt, argc, argv);
	if (status)
		return status == 1 ? 0 : 2;
	const hparams hp = {ctx_len, d_model, layers, heads, 0};
	if ((status =
	         tf_check_options(&prog, &opt, &hp, 2, eval_batches, eval_every, warmup, minutes)))
		return status;
	if ((status = ex_check_int(&prog, &opt, "sample-len", sample_len, 0, 1 << 20)))
		return status;
	if (!(temperature > 0))
		return ex_usage_error(&prog, &opt, "--temperature: expected more than 0, got %g",
		                      temperature);

	char err[1024];
	ex_text text = {0};
	amp_ctx *ctx = NULL;
	int32_t *tokens = NULL;
	batch_buf bb = {0};
	status = 1;
	if (text_path ? ex_text_load_file(text_path, &text, err, sizeof err)
	              : ex_kjv_load(&text, err, sizeof err)) {
		fprintf(stderr, "charlm: %s\n", err);
		goto out;
	}
	ex_vocab vocab;
	ex_vocab_build(&vocab, text.data, text.len);
	tokens = malloc(text.len * sizeof(int32_t));
	bb.ids = malloc((size_t)(opt.batch * ctx_len) * sizeof(int32_t));
	bb.targets = malloc((size_t)(opt.batch * ctx_len) * sizeof(int32_t));
	bb.pos = malloc((size_t)ctx_len * sizeof(int32_t));
	if (!tokens || !bb.ids || !bb.targets || !bb.pos) {
		fprintf(stderr, "charlm: out of memory\n");
		goto out;
	}
	for (size_t i = 0; i < text.len; i++)
		tokens[i] = vocab.ids[(unsigned char)text.data[i]];
	for (int64_t t = 0; t < ctx_len; t++)
		bb.pos[t] = (int32_t)t;
	/* Fixed split: the last 5 % (Revelation and the end of the New Testament) validates. */
	const int64_t n_train = (int64_t)text.len * 95 / 100, n_val = (int64_t)text.len - n_train;
	if (n_val < ctx_len + 2 || n_train < ctx_len + 2) {
		fprintf(stderr, "charlm: text too short (%zu bytes) for context %lld\n", text.len,
		        (long long)ctx_len);
		goto out;
	}
	if (ex_ctx_open(&prog, &opt, &ctx))
		goto out;

	model m = {.hp = {ctx_len, d_model, layers, heads, vocab.size}};
	amp_optim *adamw;
	amp_adamw_options ao = {.lr = (float)opt.lr,
	                        .beta1 = 0.9f,
	                        .beta2 = 0.99f,
	                        .eps = 1e-8f,
	                        .weight_decay = (float)weight_decay};
	int rc;
	if ((rc = tf_model_init(ctx, &m, m.hp.vocab)) ||
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
	printf("charlm: %s, %zu characters (vocabulary %d), %lld train / %lld validation; "
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
		fill_batch(tokens, starts, opt.batch, ctx_len, &bb);
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
	printf("final validation loss %.4f nats/char after %lld steps, %.1f s (%s)\n", val.loss,
	       (long long)step, train_time, ex_precision_name(ctx));

	if (sample_len > 0) {
		printf("--- sample (temperature %g) ---\n", temperature);
		if ((rc = generate(ctx, &m, &vocab, prompt, sample_len, temperature, &rng))) {
			status = ex_fail(&prog, ctx, "sampling", rc);
			goto out;
		}
		printf("---\n");
	}
	if (opt.json) {
		ex_json j;
		ex_json_run_begin(&j, "charlm", ctx, step);
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
	free(bb.pos);
	amp_ctx_free(ctx);
	ex_text_free(&text);
	return status;
}

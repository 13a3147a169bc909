/* test_bert_model.c — bert_kjv's model as a whole, on a tiny configuration: the example's own
 * forward pass (its ops stay in the example so that profiled call sites point there; its source
 * is included here with main renamed), checked against central differences of its loss for
 * every parameter in FP32; what a prediction depends on (both sides of it, not the other
 * windows); and its batches: only the chosen positions are scored, with their original
 * characters, and their inputs are replaced 80/10/10.
 */
#include <criterion/criterion.h>
#include <criterion/logging.h>

int bert_kjv_main(int argc, char **argv);
#define main bert_kjv_main
#include "../../examples/bert_kjv.c"
#undef main

enum { B = 2, T = 16, D = 8, H = 2, L = 2, V = 6, PW = 2 /* (16 * 15 + 50) / 100 */ };

typedef struct fixture {
	amp_ctx *ctx;
	model m;
	batch_buf bb;
	int32_t ids[B * T], pos[T], picks[B * PW], targets[B * PW];
	amp_tensor *params[4 + 16 * L + 2];
	const char *names[4 + 16 * L + 2];
	int np;
} fixture;

static void add(fixture *f, amp_tensor *p, const char *name)
{
	f->params[f->np] = p;
	f->names[f->np++] = name;
}

/* The model of the example (sinusoidal positions included) with every parameter moved off its
 * initial value (LayerNorm gains of 1 and zero biases would hide mistakes), and one batch. */
static void fx_open(fixture *f)
{
	memset(f, 0, sizeof *f);
	char err[256];
	cr_assert_eq(amp_ctx_new(NULL, &f->ctx, err, sizeof err), AMP_OK, "%s", err);
	cr_assert_eq(amp_config_set(f->ctx, "precision_mode", "force_fp32"), AMP_OK);
	f->m.hp = (hparams){T, D, L, H, V + 1};
	cr_assert_eq(tf_model_init(f->ctx, &f->m, V), AMP_OK, "%s", amp_ctx_error(f->ctx));
	cr_assert_eq(init_positions(f->ctx, &f->m), AMP_OK);
	add(f, f->m.tok_emb, "tok_emb");
	add(f, f->m.pos_emb, "pos_emb");
	for (int l = 0; l < L; l++) {
		block *b = &f->m.blk[l];
		amp_tensor *bp[16] = {b->ln1_g, b->ln1_b, b->wq, b->bq, b->wk, b->bk,
		                      b->wv, b->bv, b->wo, b->bo, b->ln2_g, b->ln2_b,
		                      b->w_fc, b->b_fc, b->w_proj, b->b_proj};
		static const char *bn[16] = {"ln1.gamma", "ln1.beta", "q", "q.bias", "k", "k.bias",
		                             "v", "v.bias", "proj", "proj.bias", "ln2.gamma",
		                             "ln2.beta", "fc", "fc.bias", "mlp.proj", "mlp.proj.bias"};
		for (int i = 0; i < 16; i++)
			add(f, bp[i], bn[i]);
	}
	add(f, f->m.lnf_g, "lnf.gamma");
	add(f, f->m.lnf_b, "lnf.beta");
	add(f, f->m.w_head, "head");
	add(f, f->m.b_head, "head.bias");
	ex_rng rng;
	ex_rng_seed(&rng, 5);
	static float buf[4 * D * D];
	for (int i = 0; i < f->np; i++) {
		int64_t n = amp_tensor_numel(f->params[i]);
		cr_assert(n <= (int64_t)(sizeof buf / sizeof *buf));
		cr_assert_eq(amp_tensor_read_f32(f->ctx, f->params[i], buf), AMP_OK);
		for (int64_t k = 0; k < n; k++)
			buf[k] += 0.3f * (float)(ex_rng_uniform(&rng) - 0.5);
		cr_assert_eq(amp_param_load(f->ctx, f->params[i], buf), AMP_OK);
	}
	static int32_t text[4 * T];
	for (int i = 0; i < 4 * T; i++)
		text[i] = (int32_t)ex_rng_below(&rng, V);
	f->bb = (batch_buf){f->ids, f->pos, f->picks, f->targets, PW, V, V};
	for (int t = 0; t < T; t++)
		f->pos[t] = t;
	int64_t starts[B] = {0, 2 * T + 3};
	fill_batch(text, starts, B, T, &f->bb, &rng);
}

static double loss_of(fixture *f)
{
	double l = NAN;
	cr_assert_eq(run_step(f->ctx, &f->m, NULL, &f->bb, B, T, &l), AMP_OK, "%s",
	             amp_ctx_error(f->ctx));
	return l;
}

/* The gradient of the masked-character loss through attention (heads split and merged),
 * LayerNorm, GELU, the residuals, both embeddings and the gather of the chosen positions:
 * central differences (h 3e-3, whose truncation error is some 3e-3 here) for every element of
 * every parameter. */
Test(bert_model, gradient_by_central_differences)
{
	fixture f;
	fx_open(&f);
	amp_tensor *ids, *tgt, *pos, *picks, *logits, *loss;
	cr_assert_eq(amp_step_begin(f.ctx), AMP_OK);
	cr_assert_eq(amp_tensor_from_i32(f.ctx, f.ids, amp_shape2(B, T), &ids), AMP_OK);
	cr_assert_eq(amp_tensor_from_i32(f.ctx, f.targets, amp_shape1(B * PW), &tgt), AMP_OK);
	cr_assert_eq(amp_tensor_from_i32(f.ctx, f.pos, amp_shape1(T), &pos), AMP_OK);
	cr_assert_eq(amp_tensor_from_i32(f.ctx, f.picks, amp_shape1(B * PW), &picks), AMP_OK);
	cr_assert_eq(model_forward(f.ctx, &f.m, ids, pos, picks, B, T, &logits), AMP_OK);
	cr_assert_eq(amp_cross_entropy(f.ctx, "loss", logits, tgt, &loss), AMP_OK);
	cr_assert_eq(amp_backward(f.ctx, loss), AMP_OK, "%s", amp_ctx_error(f.ctx));
	static float grads[4 + 16 * L + 2][4 * D * D];
	for (int i = 0; i < f.np; i++) {
		amp_tensor *g = amp_tensor_grad(f.params[i]);
		cr_assert(g, "%s has no gradient", f.names[i]);
		cr_assert_eq(amp_tensor_read_f32(f.ctx, g, grads[i]), AMP_OK);
	}
	cr_assert_eq(amp_step_end(f.ctx), AMP_OK);

	static float buf[4 * D * D];
	double worst = 0;
	const char *worst_name = "";
	for (int i = 0; i < f.np; i++) {
		int64_t n = amp_tensor_numel(f.params[i]);
		cr_assert_eq(amp_tensor_read_f32(f.ctx, f.params[i], buf), AMP_OK);
		for (int64_t k = 0; k < n; k++) {
			const float h = 3e-3f, x = buf[k];
			buf[k] = x + h;
			cr_assert_eq(amp_param_load(f.ctx, f.params[i], buf), AMP_OK);
			double lp = loss_of(&f);
			buf[k] = x - h;
			cr_assert_eq(amp_param_load(f.ctx, f.params[i], buf), AMP_OK);
			double lm = loss_of(&f);
			buf[k] = x;
			cr_assert_eq(amp_param_load(f.ctx, f.params[i], buf), AMP_OK);
			double fd = (lp - lm) / (2.0 * (double)h);
			double err = fabs(fd - (double)grads[i][k]) / (1e-2 + fabs(fd));
			if (err > worst) {
				worst = err;
				worst_name = f.names[i];
			}
			cr_expect(err <= 2e-2, "%s[%lld]: analytic %g, central difference %g", f.names[i],
			          (long long)k, (double)grads[i][k], fd);
		}
	}
	cr_log_info("bert_kjv model gradient: worst |analytic - central| / (0.01 + |central|) "
	            "%.3g (%s; tol 2e-2)",
	            worst, worst_name);
	amp_ctx_free(f.ctx);
}

/* Logits (B * PW, V) of the fixture's batch as it stands. */
static void logits_of(fixture *f, float *out)
{
	amp_tensor *ids, *pos, *picks, *logits;
	cr_assert_eq(amp_step_begin(f->ctx), AMP_OK);
	cr_assert_eq(amp_tensor_from_i32(f->ctx, f->ids, amp_shape2(B, T), &ids), AMP_OK);
	cr_assert_eq(amp_tensor_from_i32(f->ctx, f->pos, amp_shape1(T), &pos), AMP_OK);
	cr_assert_eq(amp_tensor_from_i32(f->ctx, f->picks, amp_shape1(B * PW), &picks), AMP_OK);
	cr_assert_eq(model_forward(f->ctx, &f->m, ids, pos, picks, B, T, &logits), AMP_OK);
	cr_assert_eq(amp_tensor_read_f32(f->ctx, logits, out), AMP_OK);
	cr_assert_eq(amp_step_end(f->ctx), AMP_OK);
}

/* Largest difference between rows [r0, r1) of two (B * PW, V) logits. */
static double rows_diff(const float *a, const float *b, int r0, int r1)
{
	double d = 0;
	for (int i = r0 * V; i < r1 * V; i++)
		d = fmax(d, fabs((double)a[i] - (double)b[i]));
	return d;
}

/* What the forward pass sees: a chosen position's prediction depends on the characters on both
 * sides of it (bidirectional attention) and on nothing in the other windows of the batch (the
 * head split and merge keep windows apart). */
Test(bert_model, context_both_sides_and_windows_apart)
{
	fixture f;
	fx_open(&f);
	static float base[B * PW * V], now[B * PW * V];
	logits_of(&f, base);
	/* window 0's first chosen position and a position before and after it, not chosen */
	int at = f.picks[0], before = -1, after = -1;
	for (int t = 0; t < T; t++) {
		int chosen = 0;
		for (int j = 0; j < PW; j++)
			chosen |= f.picks[j] == t;
		if (!chosen && t < at)
			before = t;
		if (!chosen && t > at && after < 0)
			after = t;
	}
	cr_assert(before >= 0 || after >= 0);
	for (int side = 0; side < 2; side++) {
		int t = side ? after : before;
		if (t < 0)
			continue;
		int32_t keep = f.ids[t];
		f.ids[t] = (keep + 1) % V;
		logits_of(&f, now);
		f.ids[t] = keep;
		cr_expect(rows_diff(base, now, 0, 1) > 1e-4,
		          "the prediction at %d ignores the character at %d", at, t);
		cr_expect(rows_diff(base, now, PW, B * PW) == 0.0,
		          "window 1 changed with a character of window 0");
	}
	/* every character of window 1 changed: window 0's logits stay the same bits */
	for (int t = 0; t < T; t++)
		f.ids[T + t] = (f.ids[T + t] + 3) % (V + 1);
	logits_of(&f, now);
	cr_expect(rows_diff(base, now, 0, PW) == 0.0, "window 0 changed with window 1's text");
	cr_expect(rows_diff(base, now, PW, B * PW) > 1e-4);
	amp_ctx_free(f.ctx);
}

/* fill_batch: per_window distinct positions per window, the targets are the text's characters
 * there, every other position keeps its character, and a chosen position holds [MASK], a
 * character, or its own (80/10/10 over many windows). */
Test(bert_model, masked_batches)
{
	enum { NB = 400, TT = 40, P = 6 };
	static int32_t text[NB * TT], ids[NB * TT], picks[NB * P], targets[NB * P], pos[TT];
	ex_rng rng;
	ex_rng_seed(&rng, 9);
	for (int i = 0; i < NB * TT; i++)
		text[i] = (int32_t)ex_rng_below(&rng, 20);
	int64_t starts[NB];
	for (int b = 0; b < NB; b++)
		starts[b] = b * TT;
	batch_buf bb = {ids, pos, picks, targets, P, 20, 20};
	fill_batch(text, starts, NB, TT, &bb, &rng);
	int masked = 0, kept = 0, other = 0;
	for (int b = 0; b < NB; b++) {
		int chosen[TT] = {0};
		for (int j = 0; j < P; j++) {
			int at = picks[b * P + j];
			cr_assert(at >= b * TT && at < (b + 1) * TT, "pick %d outside window %d", at, b);
			cr_assert(!chosen[at - b * TT], "position %d chosen twice", at);
			chosen[at - b * TT] = 1;
			cr_assert_eq(targets[b * P + j], text[at]);
			if (ids[at] == 20)
				masked++;
			else if (ids[at] == text[at])
				kept++;
			else
				other++;
		}
		for (int t = 0; t < TT; t++)
			if (!chosen[t])
				cr_assert_eq(ids[b * TT + t], text[b * TT + t]);
	}
	double n = NB * P;
	cr_log_info("chosen: %.3f [MASK], %.3f other characters, %.3f kept", masked / n,
	            other / n, kept / n);
	cr_expect(fabs(masked / n - 0.8) < 0.03);
	/* a random character is the original one time in 20 */
	cr_expect(fabs(other / n - 0.1 * 19 / 20) < 0.02);
	cr_expect(fabs(kept / n - (0.1 + 0.1 / 20)) < 0.02);
}

/* transformer.c — the parameters of the KJV examples' transformer (transformer.h). */
#include "transformer.h"

#include <math.h>
#include <stdio.h>

static const char *const op_names[L_COUNT][2] = {
    {"ln", ".1"},       {"attn", ".q"},      {"attn", ".k"},     {"attn", ".v"},
    {"attn", ".split"}, {"attn", ".scores"}, {"attn", ".scale"}, {"attn", ".softmax"},
    {"attn", ".mix"},   {"attn", ".merge"},  {"attn", ".proj"},  {"resid", ".1"},
    {"ln", ".2"},       {"mlp", ".fc"},      {"mlp", ".gelu"},   {"mlp", ".proj"},
    {"resid", ".2"}};

/* One parameter with a label "prefix.name" (labels are copied by the runtime). */
static int param(amp_ctx *ctx, const char *prefix, const char *name, amp_shape s, amp_init init,
                 float scale, amp_tensor **out)
{
	char label[64];
	if (prefix)
		snprintf(label, sizeof label, "%s.%s", prefix, name);
	else
		snprintf(label, sizeof label, "%s", name);
	return amp_param_new(ctx, label, s, init, scale, out);
}

int tf_model_init(amp_ctx *ctx, model *m, int64_t head_out)
{
	const int64_t D = m->hp.d_model, V = m->hp.vocab;
	/* Kaiming-uniform with scale 1/sqrt(2) gives variance 1/fan_in; residual projections are
	 * scaled down further by 1/sqrt(2 * layers), as in GPT-2. */
	const float w = 0.70710678f, wres = w / sqrtf(2.0f * (float)m->hp.layers);
	const amp_shape vec = amp_shape1(D), sq = amp_shape2(D, D);
	const amp_shape up = amp_shape2(4 * D, D), down = amp_shape2(D, 4 * D);
	int rc;
	if ((rc = param(ctx, NULL, "tok_emb", amp_shape2(V, D), AMP_INIT_NORMAL, 0.1f,
	                &m->tok_emb)) ||
	    (rc = param(ctx, NULL, "pos_emb", amp_shape2(m->hp.ctx_len, D), AMP_INIT_NORMAL, 0.02f,
	                &m->pos_emb)))
		return rc;
	for (int64_t l = 0; l < m->hp.layers; l++) {
		block *b = &m->blk[l];
		const int li = (int)l; /* < MAX_LAYERS */
		char ln1[16], attn[16], ln2[16], mlp[16];
		for (int i = 0; i < L_COUNT; i++)
			snprintf(b->label[i], sizeof b->label[i], "%s%d%s", op_names[i][0], li,
			         op_names[i][1]);
		snprintf(ln1, sizeof ln1, "ln%d.1", li);
		snprintf(attn, sizeof attn, "attn%d", li);
		snprintf(ln2, sizeof ln2, "ln%d.2", li);
		snprintf(mlp, sizeof mlp, "mlp%d", li);
		if ((rc = param(ctx, ln1, "gamma", vec, AMP_INIT_ONES, 0, &b->ln1_g)) ||
		    (rc = param(ctx, ln1, "beta", vec, AMP_INIT_ZEROS, 0, &b->ln1_b)) ||
		    (rc = param(ctx, attn, "q", sq, AMP_INIT_KAIMING, w, &b->wq)) ||
		    (rc = param(ctx, attn, "q.bias", vec, AMP_INIT_ZEROS, 0, &b->bq)) ||
		    (rc = param(ctx, attn, "k", sq, AMP_INIT_KAIMING, w, &b->wk)) ||
		    (rc = param(ctx, attn, "k.bias", vec, AMP_INIT_ZEROS, 0, &b->bk)) ||
		    (rc = param(ctx, attn, "v", sq, AMP_INIT_KAIMING, w, &b->wv)) ||
		    (rc = param(ctx, attn, "v.bias", vec, AMP_INIT_ZEROS, 0, &b->bv)) ||
		    (rc = param(ctx, attn, "proj", sq, AMP_INIT_KAIMING, wres, &b->wo)) ||
		    (rc = param(ctx, attn, "proj.bias", vec, AMP_INIT_ZEROS, 0, &b->bo)) ||
		    (rc = param(ctx, ln2, "gamma", vec, AMP_INIT_ONES, 0, &b->ln2_g)) ||
		    (rc = param(ctx, ln2, "beta", vec, AMP_INIT_ZEROS, 0, &b->ln2_b)) ||
		    (rc = param(ctx, mlp, "fc", up, AMP_INIT_KAIMING, w, &b->w_fc)) ||
		    (rc = param(ctx, mlp, "fc.bias", amp_shape1(4 * D), AMP_INIT_ZEROS, 0,
		                &b->b_fc)) ||
		    (rc = param(ctx, mlp, "proj", down, AMP_INIT_KAIMING, wres, &b->w_proj)) ||
		    (rc = param(ctx, mlp, "proj.bias", vec, AMP_INIT_ZEROS, 0, &b->b_proj)))
			return rc;
	}
	if ((rc = param(ctx, "lnf", "gamma", vec, AMP_INIT_ONES, 0, &m->lnf_g)) ||
	    (rc = param(ctx, "lnf", "beta", vec, AMP_INIT_ZEROS, 0, &m->lnf_b)) ||
	    (rc = param(ctx, NULL, "head", amp_shape2(head_out, D), AMP_INIT_KAIMING, w, &m->w_head)) ||
	    (rc = param(ctx, NULL, "head.bias", amp_shape1(head_out), AMP_INIT_ZEROS, 0, &m->b_head)))
		return rc;
	return AMP_OK;
}

int tf_check_options(const ex_program *prog, const ex_common *opt, const hparams *hp,
                     int64_t min_context, int64_t eval_batches, int64_t eval_every, int64_t warmup,
                     double minutes)
{
	/* bounded so that batch x context x width stays far inside int */
	int rc;
	if ((rc = ex_check_int(prog, opt, "context", hp->ctx_len, min_context, 1024)) ||
	    (rc = ex_check_int(prog, opt, "d-model", hp->d_model, 1, 4096)) ||
	    (rc = ex_check_int(prog, opt, "heads", hp->heads, 1, hp->d_model)) ||
	    (rc = ex_check_int(prog, opt, "layers", hp->layers, 1, MAX_LAYERS)) ||
	    (rc = ex_check_int(prog, opt, "batch", opt->batch, 1, 512)) ||
	    (rc = ex_check_int(prog, opt, "eval-batches", eval_batches, 1, 1 << 20)) ||
	    (rc = ex_check_int(prog, opt, "warmup", warmup, 0, INT64_MAX)) ||
	    (rc = ex_check_int(prog, opt, "eval-every", eval_every, 0, INT64_MAX)))
		return rc;
	if (hp->d_model % hp->heads)
		return ex_usage_error(prog, opt, "--heads: %lld does not divide --d-model %lld",
		                      (long long)hp->heads, (long long)hp->d_model);
	if (!(minutes >= 0))
		return ex_usage_error(prog, opt, "--minutes: expected 0 or more, got %g", minutes);
	return 0;
}

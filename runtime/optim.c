/* optim.c — the dynamic loss scaler and the optimizers (SGD with momentum, AdamW) that update
 * the FP32 master weights.
 *
 * amp_optim_step() is the one place a step's fate is decided: unscale the master gradients,
 * look for Inf/NaN, let the scaler decide (every decision is a trace event), then update or
 * skip.  The scaler's state machine is amp_scaler_update(), kept pure for its tests.
 */
#include "amp/amp_dist.h"
#include "check.h"
#include "internal.h"
#include "optim_int.h"

#include <math.h>
#include <string.h>


amp_scale_reason amp_scaler_update(amp_scaler *s, int overflow)
{
	if (!s->dynamic)
		return AMP_SCALE_STATIC;
	if (overflow) {
		s->scale = fmax(s->scale * s->backoff_factor, s->min_scale);
		s->clean_steps = 0;
		return AMP_SCALE_OVERFLOW;
	}
	if (++s->clean_steps >= s->growth_interval) {
		double old = s->scale;
		s->scale = fmin(s->scale * s->growth_factor, s->max_scale);
		s->clean_steps = 0;
		return s->scale > old ? AMP_SCALE_GROWTH : AMP_SCALE_HOLD; /* at the ceiling: hold */
	}
	return AMP_SCALE_HOLD;
}

static int optim_new(amp_ctx *ctx, optim_kind kind, amp_optim **out)
{
	if (!ctx || !out)
		return amp_fail(ctx, AMP_EINVAL, "optimizer: NULL argument");
	amp_optim *o = amp_persist_alloc(ctx, sizeof *o);
	if (!o)
		return amp_fail(ctx, AMP_ENOMEM, "out of memory");
	o->ctx = ctx;
	o->kind = kind;
	o->next = ctx->optims;
	ctx->optims = o;
	*out = o;
	return AMP_OK;
}

int amp_optim_sgd_new(amp_ctx *ctx, const amp_sgd_options *opt, amp_optim **out)
{
	/* written so that NaN fails every test, and Inf the lr's and weight decay's; an lr of 0
	 * as amp_optim_set_lr takes (a warm-up from 0) */
	if (!opt || !out)
		return amp_fail(ctx, AMP_EINVAL, "amp_optim_sgd_new: NULL %s",
		                opt ? "out" : "options");
	if (!(opt->lr >= 0 && isfinite(opt->lr)) || !(opt->momentum >= 0 && opt->momentum < 1) ||
	    !(opt->weight_decay >= 0 && isfinite(opt->weight_decay)))
		return amp_fail(ctx, AMP_EINVAL,
		                "SGD: lr must be finite and >= 0, momentum in [0,1), "
		                "weight_decay finite and >= 0");
	int rc = optim_new(ctx, OPTIM_SGD, out);
	if (rc == AMP_OK)
		(*out)->sgd = *opt;
	return rc;
}

int amp_optim_adamw_new(amp_ctx *ctx, const amp_adamw_options *opt, amp_optim **out)
{
	if (!opt || !out)
		return amp_fail(ctx, AMP_EINVAL, "amp_optim_adamw_new: NULL %s",
		                opt ? "out" : "options");
	if (!(opt->lr >= 0 && isfinite(opt->lr)) || !(opt->beta1 >= 0 && opt->beta1 < 1) ||
	    !(opt->beta2 >= 0 && opt->beta2 < 1) || !(opt->eps > 0 && isfinite(opt->eps)) ||
	    !(opt->weight_decay >= 0 && isfinite(opt->weight_decay)))
		return amp_fail(ctx, AMP_EINVAL,
		                "AdamW: lr finite and >= 0, betas in [0,1), eps "
		                "finite and > 0, weight_decay finite and >= 0");
	int rc = optim_new(ctx, OPTIM_ADAMW, out);
	if (rc == AMP_OK)
		(*out)->adamw = *opt;
	return rc;
}

void amp_optim_set_lr(amp_optim *opt, float lr)
{
	if (opt && lr >= 0 && isfinite(lr)) {
		opt->sgd.lr = lr;
		opt->adamw.lr = lr;
	}
}

static int state(amp_ctx *ctx, amp_tensor **slot, amp_shape shape)
{
	if (!*slot)
		*slot = amp_alloc_persistent(ctx, AMP_F32, shape, AMP_MEM_OPTIMIZER);
	return *slot ? AMP_OK : AMP_ENOMEM;
}

/* Elements the unscale-and-count pass (amp_optim_step) handles at a time: a block is unscaled
 * and counted while it is in L1, one pass over memory. */
#define UNSCALE_BLOCK 2048

/* w: (n) fp32 master, its gradient times inv the unscaled one (the unscale folded into the
 * update: the same products, so the same bits as a pass of its own), read where it is: kept
 * in its own dtype (grad_kept: a half one, or the ranks' sum) or master->grad.  The update is
 * a kernel (amp_sgd_update, amp_adamw_update: vectors on the active path, the same bits on
 * every path) that widens a half gradient and rewrites the working copy, if it is current,
 * element by element in the same pass over memory. */
static int update_param(amp_optim *o, amp_param *p, float inv)
{
	amp_ctx *ctx = o->ctx;
	amp_tensor *w = p->master;
	const amp_tensor *half = p->grad_kept;
	float *m = NULL, *v = NULL;
	if (o->kind == OPTIM_ADAMW || o->sgd.momentum != 0) {
		if (state(ctx, &p->opt_m, w->shape))
			return amp_fail(ctx, AMP_ENOMEM, "out of memory for optimizer state");
		m = p->opt_m->data;
	}
	if (o->kind == OPTIM_ADAMW) {
		if (state(ctx, &p->opt_v, w->shape))
			return amp_fail(ctx, AMP_ENOMEM, "out of memory for optimizer state");
		v = p->opt_v->data;
	}
	const amp_adamw_options *a = &o->adamw;
	const amp_adamw_coef coef = {
	    .beta1 = a->beta1,
	    .beta2 = a->beta2,
	    .one_minus_beta1 = 1 - a->beta1,
	    .one_minus_beta2 = 1 - a->beta2,
	    .c1 = 1.0f - (float)pow((double)a->beta1, (double)o->t),
	    .c2 = 1.0f - (float)pow((double)a->beta2, (double)o->t),
	    .lr = a->lr,
	    .eps = a->eps,
	    .decay = 1.0f - a->lr * a->weight_decay,
	};
	/* with optimizer_sharding, the elements this rank owns (the ranks then exchange them) */
	const int64_t lo = p->own_lo, n = p->own_hi - p->own_lo;
	const amp_tensor *g = half ? half : w->grad;
	const int work = p->work && p->work_valid;
	const amp_update_io io = {
	    .g = (const char *)g->data + (size_t)lo * amp_dtype_size(g->dtype),
	    .gdt = g->dtype,
	    .work = work ? (char *)p->work + (size_t)lo * amp_dtype_size(p->work_dtype) : NULL,
	    .wdt = p->work_dtype,
	};
	float *wv = (float *)w->data + lo;
	int64_t bad;
	if (o->kind == OPTIM_SGD)
		bad = amp_sgd_update(wv, m ? m + lo : NULL, &io, inv, o->sgd.lr, o->sgd.momentum,
		                     o->sgd.weight_decay, n);
	else
		bad = amp_adamw_update(wv, m + lo, v + lo, &io, inv, &coef, n);
	p->work_nonfinite = bad; /* 0 without a working copy */
	p->grad_kept = NULL;
	p->grad_stale = 1; /* used: zero in meaning, the next step's first gradient written over */
	return AMP_OK;
}

/* NaN/Inf values of p's gradient in the elements this rank updates, where it is: kept in its
 * own dtype, or master->grad. */
static int64_t count_grad(const amp_param *p)
{
	const amp_tensor *k = p->grad_kept, *g = p->master->grad;
	int64_t n = p->own_hi - p->own_lo;
	return k ? amp_dt(k->dtype)->nonfinite(
	               (const char *)k->data + (size_t)p->own_lo * amp_dtype_size(k->dtype), n)
	         : amp_count_nonfinite_f32((const float *)g->data + p->own_lo, n);
}

/* The hyperparameters an update used (the optimizer's, gradient clipping, accumulation),
 * mixed into ctx->update_hist (FNV-1a over their bits): data-parallel ranks compare it, which
 * catches a learning rate or clipping changed on one rank between its backward and its update
 * (a time the ranks' comparison at the end of backward misses). */
static void mix_update(amp_ctx *ctx, const amp_optim *o)
{
	float v[5] = {o->sgd.lr, o->sgd.momentum, o->sgd.weight_decay, 0, 0};
	if (o->kind == OPTIM_ADAMW)
		memcpy(v, (float[5]){o->adamw.lr, o->adamw.beta1, o->adamw.beta2, o->adamw.eps,
		                     o->adamw.weight_decay},
		       sizeof v);
	/* and what else the update reads of the configuration: clipping, accumulation */
	double clip = ctx->cfg.clip_norm;
	int64_t accum = ctx->cfg.accum_steps;
	unsigned char b[sizeof v + sizeof o->t + sizeof clip + sizeof accum + 1];
	memcpy(b, v, sizeof v);
	memcpy(b + sizeof v, &o->t, sizeof o->t);
	memcpy(b + sizeof v + sizeof o->t, &clip, sizeof clip);
	memcpy(b + sizeof v + sizeof o->t + sizeof clip, &accum, sizeof accum);
	b[sizeof b - 1] = (unsigned char)o->kind;
	uint64_t h = ctx->update_hist ^ 1469598103934665603u;
	for (size_t i = 0; i < sizeof b; i++)
		h = (h ^ b[i]) * 1099511628211u;
	ctx->update_hist = h;
}

int amp_optim_step(amp_optim *o, int *skipped)
{
	if (!o)
		return AMP_EINVAL;
	amp_ctx *ctx = o->ctx;
	if (skipped)
		*skipped = 0;
	if (!ctx->in_step)
		return amp_fail(ctx, AMP_ESTATE, "amp_optim_step: no step begun");
	/* A second update would reuse cleared gradients and count the step twice in the scaler. */
	if (ctx->optim_done)
		return amp_fail(ctx, AMP_ESTATE, "amp_optim_step: already run in step %lld",
		                (long long)ctx->step);
	/* (data parallel: a rank with no data in a step ran none, and takes part all the same) */
	if (ctx->cfg.accum_steps > 1 && ctx->micro_done != ctx->cfg.accum_steps &&
	    !(ctx->dist && ctx->micro_done == 0))
		return amp_fail(ctx, AMP_ESTATE,
		                "amp_optim_step: step %lld ran %lld of its %lld micro-batches "
		                "(gradient_accumulation_steps)",
		                (long long)ctx->step, (long long)ctx->micro_done,
		                (long long)ctx->cfg.accum_steps);
	if (ctx->backward_failed)
		return amp_fail(ctx, AMP_ESTATE,
		                "amp_optim_step: the backward of step %lld failed; its gradients are "
		                "incomplete (end the step and run it again)", (long long)ctx->step);
	ctx->optim_done = 1;
	/* Data parallel: the backend has completed the step's reductions (at the end of backward,
	 * or does now in a step without one), so that every rank unscales, checks and decides on
	 * the same summed gradients (and skips together).  Its wait is a comm row of its own, not
	 * optimizer time.  (Before the moments change hands: what the ranks compare there is the
	 * state their backward ended with.) */
	double divisor = 1;
	if (ctx->dist) {
		int rc = ctx->dist->reduce(ctx->dist_state, ctx, &divisor);
		if (rc != AMP_OK)
			return rc;
	}
	/* Optimizer sharding: each rank holds the sums of its share of the elements, and
	 * unscales, checks, clips and updates those; the backend then sends the updated values
	 * to every rank (updated, below).  The verdict and the clipping norm are summed over the
	 * ranks, so that every rank decides alike. */
	int sharded = 0;
	for (amp_param *p = ctx->params; p; p = p->next) {
		p->own_lo = 0;
		p->own_hi = p->master->numel;
		if (ctx->dist && ctx->dist->owned && ctx->dist->sum && ctx->dist->updated)
			sharded |= ctx->dist->owned(ctx->dist_state, ctx, p->index, &p->own_lo,
			                            &p->own_hi);
	}
	if (ctx->state_owner && ctx->state_owner != o) {
		/* the parameters' moments are another optimizer's: this one starts from zero
		 * moments and its first update, as a new optimizer would */
		for (amp_param *p = ctx->params; p; p = p->next) {
			if (p->opt_m)
				memset(p->opt_m->data, 0, (size_t)p->opt_m->numel * sizeof(float));
			if (p->opt_v)
				memset(p->opt_v->data, 0, (size_t)p->opt_v->numel * sizeof(float));
		}
		o->t = 0;
	}
	ctx->state_owner = o;
	ctx->cur_op = AMP_OP_OPTIMIZER;
	ctx->cur_label = o->kind == OPTIM_SGD ? "sgd" : "adamw";
	ctx->cur_what = NULL;
	uint64_t t0 = AMP_TRACING() ? amp_trace_clock() : 0;

	/* Unscale and look for Inf/NaN in one pass over each gradient; the ranks' sum and
	 * accumulated micro-batches are averaged in the same multiplication (the scale was the
	 * same for all of them). */
	const float inv =
	    (float)(1.0 / (ctx->step_scale * divisor * (double)ctx->cfg.accum_steps));
	/* Where nothing reads the unscaled gradients in memory before the update (no clipping
	 * norm), the unscale moves into the update's own pass, and this one only counts: a finite
	 * gradient times inv <= 1 stays finite, so the scaled ones count the same.  Statistics of
	 * the unscaled gradients (nan_check=step) read them block by block in L1, unscaled there
	 * as the update will unscale them (the same products), without writing them. */
	const int stats = AMP_TRACING() && amp_check_master_grad_stats();
	const float fold = !(ctx->cfg.clip_norm > 0) && inv <= 1.0f ? inv : 1.0f;
	/* Gradients kept in half stay so for the update to widen, unless something reads them
	 * in FP32 before it: the clipping norm, an unscale in place (inv > 1). */
	const int in_f32 = ctx->cfg.clip_norm > 0 || (fold == 1.0f && inv != 1.0f);
	int overflow = 0;
	uint64_t elems = 0;
	for (amp_param *p = ctx->params; p; p = p->next)
		if (in_f32 || !p->grad_kept)
			amp_param_grad_settle(p); /* and a master this step's tape did not reach: zeros */
	for (amp_param *p = ctx->params; p; p = p->next) {
		amp_tensor *g = p->master->grad;
		if (!g)
			continue;
		if (stats) {
			if (fold == 1.0f && inv != 1.0f)
				amp_vscale_f32(g->data, inv, g->data, g->numel);
			overflow |= amp_check_master_grad(ctx, p, fold) != 0;
		} else if (fold != 1.0f || inv == 1.0f) {
			/* counted as it was widened from its half gradient, or counted here */
			overflow |= (p->grad_counted ? p->grad_nonfinite : count_grad(p)) != 0;
		} else {
			/* unscaled and counted block by block: one pass over memory, not two */
			float *gv = g->data;
			int64_t bad = 0;
			for (int64_t i0 = p->own_lo; i0 < p->own_hi; i0 += UNSCALE_BLOCK) {
				int64_t n =
				    p->own_hi - i0 < UNSCALE_BLOCK ? p->own_hi - i0 : UNSCALE_BLOCK;
				amp_vscale_f32(gv + i0, inv, gv + i0, n);
				bad += amp_count_nonfinite_f32(gv + i0, n);
			}
			overflow |= bad != 0;
		}
		p->grad_counted = 0; /* used: a step that does not reach p counts again */
		elems += (uint64_t)(p->own_hi - p->own_lo); /* what this rank updates */
	}

	int rc = AMP_OK;
	/* A sharded step's counts cover this rank's share (or are the backend's counts of the
	 * sums, alike on every rank): the ranks add their verdicts, always, so that they skip or
	 * update together whatever path each took. */
	if (sharded) {
		double v = overflow;
		if ((rc = ctx->dist->sum(ctx->dist_state, ctx, &v)) != AMP_OK) {
			ctx->cur_op = AMP_OP_COUNT;
			return rc;
		}
		overflow = v > 0;
	}

	/* Clipping by the global norm, of the unscaled gradients (clipping scaled ones would clip
	 * by a norm the loss scale inflated); an overflowed step is skipped before any norm. */
	ctx->grad_norm = (double)NAN;
	ctx->grad_clipped = 0;
	if (!overflow && ctx->cfg.clip_norm > 0) {
		double sq = 0;
		for (amp_param *p = ctx->params; p; p = p->next) {
			amp_tensor *g = p->master->grad;
			if (!g)
				continue;
			const float *gv = g->data;
			for (int64_t i = p->own_lo; i < p->own_hi; i++)
				sq += (double)gv[i] * (double)gv[i];
		}
		if (sharded && (rc = ctx->dist->sum(ctx->dist_state, ctx, &sq)) != AMP_OK) {
			ctx->cur_op = AMP_OP_COUNT;
			return rc;
		}
		ctx->grad_norm = sqrt(sq);
		if (ctx->grad_norm > ctx->cfg.clip_norm) {
			const float coef = (float)(ctx->cfg.clip_norm / (ctx->grad_norm + 1e-6));
			for (amp_param *p = ctx->params; p; p = p->next)
				if (p->master->grad)
					amp_vscale_f32(p->master->grad->data, coef, p->master->grad->data,
					               p->master->grad->numel);
			ctx->grad_clipped = 1;
			ctx->stats.clipped_steps++;
		}
	}

	const int scaled = amp_mode_info_of(ctx->cfg.mode)->kind != AMP_KIND_FP32;
	const double old_scale = ctx->scaler.scale;
	amp_scale_reason why = AMP_SCALE_STATIC;
	if (scaled) {
		why = amp_scaler_update(&ctx->scaler, overflow);
		ctx->scaler_used = 1;
	}
	if (overflow) {
		ctx->step_overflow = 1;
		ctx->step_skipped = 1;
		ctx->stats.overflow_steps++;
		ctx->stats.skipped_steps++;
		if (skipped)
			*skipped = 1;
	} else {
		o->t++;
		mix_update(ctx, o);
		for (amp_param *p = ctx->params; p && rc == AMP_OK; p = p->next)
			if (p->master->grad)
				rc = update_param(o, p, fold);
		/* Masters changed (their working copies with them): the next use in this step gets a
		 * new tensor over the working copy, with its own tape node. */
		for (amp_param *p = ctx->params; p; p = p->next)
			p->working_step = -1;
	}
	if (overflow || rc != AMP_OK) /* as an update leaves the gradients it used */
		for (amp_param *p = ctx->params; p; p = p->next) {
			p->grad_kept = NULL;
			p->grad_stale = p->master->grad != NULL;
		}
	if (sharded) {
		/* the ranks exchange what each updated (amp_param_exchanged marks what is left
		 * partial); a rank whose update failed makes every rank's step fail */
		int rc2 = ctx->dist->updated(ctx->dist_state, ctx, !overflow, rc == AMP_OK);
		if (rc == AMP_OK)
			rc = rc2;
	}

	amp_trace_kernel(ctx, AMP_OP_OPTIMIZER, o->kind == OPTIM_SGD ? "sgd" : "adamw", AMP_F32,
	                 amp_kernels_vec_engine(), AMP_PHASE_OPTIMIZER, t0, elems * (o->kind == OPTIM_SGD ? 4 : 12),
	                 elems * 4 * (o->kind == OPTIM_SGD ? 4 : 6), amp_shape1((int64_t)elems));
	/* the scaler's decision is recorded after the op's end: a record that waits for ring
	 * space (definition records wait even under --drop) would otherwise bill the wait to
	 * the optimizer's time */
	if (scaled && AMP_TRACING())
		amp_trace_scale(ctx->trace_id, ctx->step, old_scale, ctx->scaler.scale, why);
	ctx->cur_op = AMP_OP_COUNT;
	return rc;
}

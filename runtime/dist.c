/* dist.c — the hooks a data-parallel backend attaches to a context (amp/amp_dist.h), and the
 * few functions it needs from the runtime: the parameters in registration order, its error
 * message, and the trace of its collectives.  The backend itself (runtime/mpi/) is a library
 * of its own, so that libamprt never links a transport.
 */
#include "amp/amp_dist.h"
#include "check.h"
#include "internal.h"
#include "optim_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

_Static_assert((int)AMP_COMM_ALLREDUCE == (int)AMP_COMM_KIND_ALLREDUCE &&
               (int)AMP_COMM_BROADCAST == (int)AMP_COMM_KIND_BROADCAST &&
               (int)AMP_COMM_BARRIER == (int)AMP_COMM_KIND_BARRIER &&
               (int)AMP_COMM_LOCAL_OVERFLOW == (int)AMP_COMM_FLAG_LOCAL_OVERFLOW,
               "amp_dist.h's collective codes are the wire's");

int amp_dist_attach(amp_ctx *ctx, const amp_dist_ops *ops, void *state)
{
	if (!ctx)
		return AMP_EINVAL;
	if (ops && ctx->dist)
		return amp_fail(ctx, AMP_ESTATE, "amp_dist_attach: a backend is already attached");
	if (ops && ctx->in_step)
		return amp_fail(ctx, AMP_ESTATE, "amp_dist_attach: attach between steps");
	ctx->dist = ops;
	ctx->dist_state = ops ? state : NULL;
	return AMP_OK;
}

void *amp_dist_state(const amp_ctx *ctx, const amp_dist_ops *ops)
{
	return ctx && ops && ctx->dist == ops ? ctx->dist_state : NULL;
}

int amp_dist_fail(amp_ctx *ctx, int code, const char *msg)
{
	return amp_fail(ctx, code, "%s", msg ? msg : "data-parallel backend failed");
}

/* v with the fewest digits that read back as v ("0.01", not "0.00999999978"). */
static const char *shortest(float v, char *b, size_t n)
{
	for (int digits = 6; digits <= 9; digits++) {
		snprintf(b, n, "%.*g", digits, (double)v);
		if (strtof(b, NULL) == v)
			break;
	}
	return b;
}

int amp_dist_shared_state(amp_ctx *ctx, const char *name, char *buf, size_t len)
{
	if (!ctx || !name || (!buf && len))
		return -1;
	size_t n = 0; /* the length of the whole text, written or not */
	char dummy[1];
	if (!len) {
		buf = dummy;
		len = 1;
	}
	buf[0] = '\0';
#define ADD(...)                                                                                  \
	do {                                                                                      \
		int w_ = snprintf(buf + (n < len ? n : len - 1), n < len ? len - n : 1, __VA_ARGS__); \
		n += w_ > 0 ? (size_t)w_ : 0;                                                      \
	} while (0)
	if (strcmp(name, "optimizers") == 0) {
		char a[24], b[24], c[24], d[24], e[24];
		for (amp_optim *o = ctx->optims; o; o = o->next) /* newest first */
			if (o->kind == OPTIM_SGD)
				ADD("%ssgd lr %s momentum %s weight_decay %s, %lld updates%s", n ? "; " : "",
				    shortest(o->sgd.lr, a, sizeof a), shortest(o->sgd.momentum, b, sizeof b),
				    shortest(o->sgd.weight_decay, c, sizeof c), (long long)o->t,
				    o == ctx->state_owner ? ", holds the moments" : "");
			else
				ADD("%sadamw lr %s betas %s %s eps %s weight_decay %s, %lld updates%s",
				    n ? "; " : "", shortest(o->adamw.lr, a, sizeof a),
				    shortest(o->adamw.beta1, b, sizeof b), shortest(o->adamw.beta2, c, sizeof c),
				    shortest(o->adamw.eps, d, sizeof d),
				    shortest(o->adamw.weight_decay, e, sizeof e), (long long)o->t,
				    o == ctx->state_owner ? ", holds the moments" : "");
		if (!ctx->optims)
			ADD("none");
	} else if (strcmp(name, "updates") == 0) {
		ADD("hyperparameter hash %016llx", (unsigned long long)ctx->update_hist);
	} else if (strcmp(name, "loss scaler") == 0) {
		ADD("%s, scale %.17g, %lld clean steps", ctx->scaler.dynamic ? "dynamic" : "static",
		    ctx->scaler.scale, (long long)ctx->scaler.clean_steps);
	} else if (strcmp(name, "checkpoints") == 0) {
		if (ctx->ckpt_loads == 0)
			ADD("none loaded");
		else
			ADD("%lld loaded, the last with checksum %08x", (long long)ctx->ckpt_loads,
			    ctx->ckpt_crc);
	} else if (strcmp(name, "custom lists") == 0) {
		/* the lists in force, in the op table's order: the same lists however typed */
		static const struct {
			amp_op_list list;
			const char *name;
		} lists[] = {{AMP_LIST_WHITE, "white"}, {AMP_LIST_BLACK, "black"}};
		for (size_t l = 0; l < sizeof lists / sizeof *lists; l++) {
			int first = 1;
			for (int i = 0; i < AMP_OP_COUNT; i++)
				if (ctx->cfg.custom[i] == (signed char)lists[l].list) {
					if (first)
						ADD("%s%s: ", n ? "; " : "", lists[l].name);
					ADD("%s%s", first ? "" : ", ", amp_op_name((amp_op_type)i));
					first = 0;
				}
		}
		if (n == 0)
			ADD("none");
	} else {
		/* a configuration key (its own buffer: a value the program holds of another key
		 * stays as it was) */
		const char *v = amp_config_get(ctx, name);
		if (!v)
			return -1;
		ADD("%s", v);
	}
#undef ADD
	return n > INT32_MAX ? INT32_MAX : (int)n;
}

static amp_param *param_at(const amp_ctx *ctx, int i)
{
	if (!ctx || i < 0 || i >= ctx->n_params)
		return NULL;
	for (amp_param *p = ctx->params; p; p = p->next) /* newest first */
		if (p->index == i)
			return p;
	return NULL;
}

int amp_param_count(const amp_ctx *ctx)
{
	return ctx ? ctx->n_params : 0;
}

amp_tensor *amp_param_at(amp_ctx *ctx, int i)
{
	amp_param *p = param_at(ctx, i);
	return p ? p->master : NULL;
}

const char *amp_param_label(amp_ctx *ctx, int i)
{
	amp_param *p = param_at(ctx, i);
	return p ? p->label : NULL;
}

int amp_dist_shardable(amp_ctx *ctx)
{
	return ctx && ctx->cfg.optimizer_sharding && ctx->cfg.accum_steps == 1 &&
	       !(AMP_TRACING() && amp_check_master_grad_stats());
}

void *amp_param_shard_view(amp_ctx *ctx, int i, amp_dtype *dtype)
{
	amp_param *p = param_at(ctx, i);
	*dtype = AMP_F32;
	if (!p)
		return NULL;
	if (p->work && p->work_valid && p->f32_step != ctx->step) {
		*dtype = p->work_dtype;
		return p->work;
	}
	return p->master->data;
}

int amp_param_master_state(amp_ctx *ctx, int i, float **master, float **m, float **v)
{
	amp_param *p = param_at(ctx, i);
	if (!p)
		return AMP_EINVAL;
	*master = p->master->data;
	*m = p->opt_m ? p->opt_m->data : NULL;
	*v = p->opt_v ? p->opt_v->data : NULL;
	return AMP_OK;
}

void amp_param_exchanged(amp_ctx *ctx, int i, int master)
{
	amp_param *p = param_at(ctx, i);
	if (!p)
		return;
	p->master_partial = !master;
	p->moments_partial |= p->opt_m != NULL;
	if (master) {
		p->work_valid = 0; /* its other elements are another rank's update's */
		p->working_step = -1;
	}
}

void amp_param_master_gathered(amp_ctx *ctx, int i)
{
	amp_param *p = param_at(ctx, i);
	if (p)
		p->master_partial = p->moments_partial = 0;
}

int amp_param_master_partial(amp_ctx *ctx, int i)
{
	amp_param *p = param_at(ctx, i);
	return p && (p->master_partial || p->moments_partial);
}

int amp_dist_tracing(void)
{
	return AMP_TRACING();
}

uint64_t amp_dist_clock(void)
{
	return AMP_TRACING() ? amp_trace_clock() : 0;
}

void amp_dist_trace(int64_t step, unsigned kind, amp_dtype dtype, int32_t bucket, uint64_t bytes,
                    uint64_t t_begin, uint64_t t_wait, uint64_t t_end, unsigned flags)
{
	if (AMP_TRACING() && kind < AMP_COMM_KIND_COUNT)
		amp_trace_comm(step, kind, (unsigned)dtype, bucket, bytes, t_begin, t_wait, t_end, flags);
}

void amp_dist_meta(const char *key, const char *value)
{
	if (AMP_TRACING())
		amp_trace_meta(key, value);
}

int64_t amp_dist_convert(amp_dtype dst_dtype, void *dst, amp_dtype src_dtype, const void *src,
                         int64_t n)
{
	return amp_cvt(dst_dtype, dst, src_dtype, src, n);
}

/* Elements of a bf16 block widened on the stack (8 KiB of fp32 for each operand). */
#define BF16_BLOCK 1024

/* bf16 y = y + x (x not NULL) or y * f, block by block: widened exactly, computed in FP32,
 * rounded once. */
static void bf16_blocks(uint16_t *y, const uint16_t *x, float f, int64_t n)
{
	float a[BF16_BLOCK], b[BF16_BLOCK];
	for (int64_t i0 = 0; i0 < n; i0 += BF16_BLOCK) {
		int64_t m = n - i0 < BF16_BLOCK ? n - i0 : BF16_BLOCK;
		amp_cvt(AMP_F32, b, AMP_BF16, y + i0, m);
		if (x) {
			amp_cvt(AMP_F32, a, AMP_BF16, x + i0, m);
			amp_vadd_f32(b, a, b, m);
		} else {
			amp_vscale_f32(b, f, b, m);
		}
		amp_cvt(AMP_BF16, y + i0, AMP_F32, b, m);
	}
}

void amp_dist_add(amp_dtype dtype, void *y, const void *x, int64_t n)
{
	if (dtype == AMP_F32)
		amp_vadd_f32(y, x, y, n);
	else if (dtype == AMP_F16)
		amp_vadd_h16(y, x, y, n);
	else if (dtype == AMP_BF16)
		bf16_blocks(y, x, 1.0f, n);
}

void amp_dist_scale(amp_dtype dtype, void *y, float f, int64_t n)
{
	if (dtype == AMP_F32)
		amp_vscale_f32(y, f, y, n);
	else if (dtype == AMP_F16)
		amp_vscale_h16(y, f, y, n);
	else if (dtype == AMP_BF16)
		bf16_blocks(y, NULL, f, n);
}

int64_t amp_dist_count_nonfinite(amp_dtype dtype, const void *x, int64_t n)
{
	return amp_dtype_valid((int)dtype) && amp_dt(dtype)->is_float ? amp_dt(dtype)->nonfinite(x, n)
	                                                              : 0;
}

const void *amp_param_grad_data(amp_ctx *ctx, int i, amp_dtype *dtype, int64_t *nonfinite)
{
	amp_param *p = param_at(ctx, i);
	*dtype = AMP_F32;
	*nonfinite = -1;
	if (!p)
		return NULL;
	if (p->grad_kept) {
		*dtype = p->grad_kept->dtype;
		*nonfinite = p->grad_counted ? p->grad_nonfinite : -1;
		return p->grad_kept->data;
	}
	if (!p->master->grad || p->grad_stale)
		return NULL;
	*nonfinite = p->grad_counted ? p->grad_nonfinite : -1;
	return p->master->grad->data;
}

int amp_param_moved(amp_ctx *ctx, int i)
{
	amp_param *p = param_at(ctx, i);
	int moved = p && p->moved;
	if (p)
		p->moved = 0;
	return moved;
}

int amp_param_has_grad(amp_ctx *ctx, int i)
{
	amp_param *p = param_at(ctx, i);
	return p && (p->grad_kept || p->master->grad);
}

int amp_param_grad_set(amp_ctx *ctx, int i, amp_dtype dtype, const void *data, int64_t nonfinite)
{
	amp_param *p = param_at(ctx, i);
	if (!p || !data || !amp_dtype_valid((int)dtype) || !amp_dt(dtype)->is_float)
		return amp_fail(ctx, AMP_EINVAL, "amp_param_grad_set: no parameter %d, no data, or "
		                                 "not a float dtype", i);
	if (!ctx->in_step)
		return amp_fail(ctx, AMP_ESTATE, "amp_param_grad_set: no step begun");
	amp_tensor *g = p->master->grad;
	if (!g) /* a parameter this rank's tapes never reached: the others' sum is its gradient */
		g = p->master->grad = amp_alloc_persistent(ctx, AMP_F32, p->master->shape,
		                                           AMP_MEM_GRADS);
	if (!g)
		return amp_fail(ctx, AMP_ENOMEM, "out of memory");
	amp_tensor *t = NULL;
	if (data != g->data || dtype != AMP_F32) { /* else summed in the master gradient itself */
		t = amp_arena_alloc(ctx, sizeof *t);
		if (!t)
			return amp_fail(ctx, AMP_ENOMEM, "out of memory");
		*t = (amp_tensor){.owner = ctx, .dtype = dtype, .shape = g->shape, .numel = g->numel,
		                  .data = (void *)data, .id = ctx->next_tensor_id++};
	}
	p->grad_kept = t;
	p->grad_stale = 0;
	p->grad_counted = nonfinite >= 0; /* else the optimizer counts it */
	p->grad_nonfinite = nonfinite >= 0 ? nonfinite : 0;
	return AMP_OK;
}

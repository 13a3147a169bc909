/* check.c — non-finite checks, tensor statistics, origin detection and dumps (see check.h).
 *
 * Every hook runs on the training thread right after the tensor was written.  The per-step
 * state of a context (origin found, dumps made, the last cast that overflowed) is reset lazily
 * when a hook first sees a new step.  The configuration, the process-wide counters and the
 * dumps (spool files and their budget) are in check_dump.c.
 */
#include "check.h"
#include "check_int.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kernels/stats.h"

/* ---- per-context state -------------------------------------------------------------------- */
static struct amp_check_ctx *state(amp_ctx *ctx, const amp_check_config *cfg)
{
	struct amp_check_ctx *st = ctx->check;
	if (__builtin_expect(st != NULL && st->step == ctx->step, 1))
		return st;
	if (!st) {
		st = amp_persist_alloc(ctx, sizeof *st);
		if (!st)
			return NULL;
		ctx->check = st;
		amp_check_first_state();
	} else {
		amp_check_step_ended();  /* a step ended: what its dumps skipped reaches meta now */
	}
	memset(st, 0, sizeof *st);
	st->step = ctx->step;
	st->origin.step = -1;
	st->full = cfg->stats_every <= 1 || ctx->step % cfg->stats_every == 0;
	st->dump_all = cfg->n_dump_steps > 0 && amp_check_in_dump_steps(cfg, ctx->step);
	return st;
}

void amp_check_origin_get(const amp_ctx *ctx, amp_check_origin *out)
{
	memset(out, 0, sizeof *out);
	out->step = -1;
	const struct amp_check_ctx *st = ctx ? ctx->check : NULL;
	if (st && st->step == ctx->step)
		*out = st->origin;
}

/* ---- scanning ----------------------------------------------------------------------------- */

static void tensor_stats(const amp_tensor *t, amp_stats *s)
{
	amp_dt(t->dtype)->stats(t->data, t->numel, s);
}

static int64_t tensor_nonfinite(const amp_tensor *t)
{
	if (!is_float(t))
		return 0;
	return amp_dt(t->dtype)->nonfinite(t->data, t->numel);
}

/* The statistics a kernel took of t while writing it, into *s and forgotten: 1, else 0. */
static int take_hint(struct amp_check_ctx *st, const amp_tensor *t, amp_stats *s)
{
	for (int i = 0; i < st->n_hints; i++)
		if (st->hint[i].data == t->data && st->hint[i].numel == t->numel) {
			*s = st->hint[i].s;
			st->hint[i] = st->hint[--st->n_hints];
			return 1;
		}
	return 0;
}

/* Statistics of the values of t times mul (mul <= 1), as if they were unscaled in place: each
 * block widened and multiplied in L1 (the same products as amp_vscale_f32's), its statistics
 * merged into *s. */
#define SCALED_BLOCK 2048
static void stats_scaled(const amp_tensor *t, float mul, amp_stats *s)
{
	const amp_dtype_info *d = amp_dt(t->dtype);
	float buf[SCALED_BLOCK];
	amp_stats part;
	amp_stats_init(s);
	for (int64_t i0 = 0; i0 < t->numel; i0 += SCALED_BLOCK) {
		int64_t n = t->numel - i0 < SCALED_BLOCK ? t->numel - i0 : SCALED_BLOCK;
		d->to_f32((const char *)t->data + (size_t)i0 * d->size, buf, n);
		amp_vscale_f32(buf, mul, buf, n);
		amp_stats_f32(buf, n, &part);
		amp_stats_merge(s, &part);
	}
}

/* One pass over t (its values times mul <= 1: 1 for t as it is): full statistics on
 * statistics steps (*have = 1), taken from a kernel's hint when there is one, else a non-finite
 * count (a finite value times mul stays finite: the same count), followed by statistics if it
 * found any.  Returns the NaN + Inf count. */
static int64_t scan(struct amp_check_ctx *st, const amp_tensor *t, float mul, amp_stats *s,
                    int *have)
{
	__atomic_add_fetch(&amp_check_cnt.checked, 1, __ATOMIC_RELAXED);
	int64_t bad = st->full ? 1 : tensor_nonfinite(t);
	if (bad != 0) {
		if (mul != 1.0f)
			stats_scaled(t, mul, s);
		else if (!st->full || !take_hint(st, t, s))
			tensor_stats(t, s);
		bad = (int64_t)(s->nan + s->pinf + s->ninf);
	}
	*have = st->full || bad != 0;
	return bad;
}

/* flags: AMP_TSTATS_SRC (src_seq is the related op), _CAST_SRC, _TINY_AT_NF. */
static void emit_stats(const amp_ctx *ctx, uint64_t seq, amp_op_type op, amp_phase phase,
                       int role, const amp_tensor *t, const char *name, const amp_stats *s,
                       int origin, uint32_t flags, uint64_t src_seq)
{
	amp_trace_tstats r = {
	    .step = ctx->step,
	    .seq = seq,
	    .op = op,
	    .role = role,
	    .dtype = t->dtype,
	    .origin = origin,
	    .phase = phase,
	    .name = name,
	    .count = s->count,
	    .nan = s->nan,
	    .inf = s->pinf + s->ninf,
	    .ninf = s->ninf,
	    .underflow = s->underflow,
	    .near_overflow = s->near_overflow,
	    .min = s->min,
	    .max = s->max,
	    .absmax = s->absmax,
	    .flags = flags,
	    .src_seq = src_seq,
	};
	for (int k = 0; k < AMP_STATS_BINS; k++)
		r.exp_hist[k] = s->exp_hist[k] > UINT32_MAX ? UINT32_MAX : (uint32_t)s->exp_hist[k];
	__atomic_add_fetch(&amp_check_cnt.stats, 1, __ATOMIC_RELAXED);
	amp_check_observer obs = amp_check_observer_fn;
	if (obs)
		obs(amp_check_observer_arg, &r, NULL);
	amp_trace_tensor_stats(&r);
}

/* Statistics of t computed now (inputs of an origin). */
static void emit_stats_now(const amp_ctx *ctx, uint64_t seq, amp_op_type op, amp_phase phase,
                           int role, const amp_tensor *t, const char *name, uint32_t flags,
                           uint64_t src_seq)
{
	amp_stats s;
	tensor_stats(t, &s);
	emit_stats(ctx, seq, op, phase, role, t, name, &s, 0, flags, src_seq);
}

/* ---- producers ---------------------------------------------------------------------------- */
static void note_producer(struct amp_check_ctx *st, const void *data, const void *cast_of,
                          uint64_t seq)
{
	unsigned i = st->n_prod++ % CHECK_PRODUCERS;
	st->prod[i].data = data;
	st->prod[i].cast_of = cast_of;
	st->prod[i].seq = seq;
}

/* The seq of the op of this step that wrote data, through the automatic casts in between:
 * AMP_TSTATS_SRC with *seq, or 0 (a leaf, a parameter, or written too long ago). */
static uint32_t producer_of(const struct amp_check_ctx *st, const void *data, uint64_t *seq)
{
	unsigned n = st->n_prod < CHECK_PRODUCERS ? st->n_prod : CHECK_PRODUCERS;
	for (int hops = 0; hops < 4 && data; hops++) {
		const void *next = NULL;
		for (unsigned k = 0; k < n; k++) {
			unsigned i = (st->n_prod - 1 - k) % CHECK_PRODUCERS;
			if (st->prod[i].data != data)
				continue;
			if (!st->prod[i].cast_of) {
				*seq = st->prod[i].seq;
				return AMP_TSTATS_SRC;
			}
			next = st->prod[i].cast_of;
			break;
		}
		data = next;
	}
	return 0;
}

/* AMP_TSTATS_TINY_AT_NF if the input x of an elementwise origin is zero or below FP16's normal
 * range where its output y is not finite (log 0, x / 0, 0 * Inf): the values an underflow
 * upstream left.  Runs at an origin only (FP32 views in the step arena). */
static uint32_t tiny_at_nonfinite(amp_ctx *ctx, const amp_tensor *x, const amp_tensor *y)
{
	if (x->numel != y->numel)
		return 0;
	const float *xv = amp_f32_view(ctx, x), *yv = amp_f32_view(ctx, y);
	if (!xv || !yv)
		return 0;
	for (int64_t j = 0; j < x->numel; j++)
		if (!isfinite(yv[j]) && isfinite(xv[j]) && fabsf(xv[j]) < 0x1p-14f)
			return AMP_TSTATS_TINY_AT_NF;
	return 0;
}

/* ---- dumps -------------------------------------------------------------------------------- */

/* ---- origin ------------------------------------------------------------------------------- */
/* A checked tensor's name: its op's label (or the op) and a suffix ("/in0", ".grad", ...).  A
 * profile keeps AMP_STRING_MAX bytes of a name, so a longer label is cut before the suffix, at
 * a UTF-8 boundary: the names of one op's tensors stay distinct however long its label. */
typedef char check_name[AMP_STRING_MAX + 1];
__attribute__((format(printf, 3, 4))) static const char *
tensor_name(check_name name, const char *base, const char *fmt, ...)
{
	char suffix[48];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(suffix, sizeof suffix, fmt, ap);
	va_end(ap);
	size_t room = AMP_STRING_MAX - strlen(suffix), n = strnlen(base, room);
	while (n == room && n > 0 && ((unsigned char)base[n] & 0xC0) == 0x80)
		room = --n; /* base[n] continues a sequence: cut before its first byte */
	memcpy(name, base, n);
	strcpy(name + n, suffix);
	return name;
}

static const char *label_or_op(const char *label, amp_op_type op)
{
	return label && *label ? label : amp_op_name(op);
}

static void set_origin(amp_ctx *ctx, struct amp_check_ctx *st, uint64_t seq, amp_op_type op,
                       amp_phase phase, const char *label, const amp_stats *s, int via_cast)
{
	amp_check_origin *o = &st->origin;
	o->step = ctx->step;
	o->seq = seq;
	o->op = op;
	o->phase = phase;
	o->nan = s->nan;
	o->inf = s->pinf + s->ninf;
	o->via_cast = via_cast;
	snprintf(o->label, sizeof o->label, "%s", label ? label : "");
	__atomic_add_fetch(&amp_check_cnt.origins, 1, __ATOMIC_RELAXED);
}

/* Forward inputs all finite?  A cast input whose FP32 source was finite counts as finite: the
 * op and the casts the policy put in front of it are one unit.  *via_cast tells it happened. */
static int inputs_finite(const struct amp_check_ctx *st, amp_tensor *const *in, int n,
                         int *via_cast)
{
	*via_cast = 0;
	for (int i = 0; i < n; i++) {
		if (!is_float(in[i]))
			continue;
		if (st->cast_bad && in[i] == st->cast_bad) {
			*via_cast = 1;
			continue;
		}
		if (tensor_nonfinite(in[i]))
			return 0;
	}
	return 1;
}

/* ---- statistics taken by kernels ---------------------------------------------------------- */
int amp_check_wants_stats(amp_ctx *ctx)
{
	const amp_check_config *cfg = amp_check_config_now();
	if (cfg->nan_check != AMP_NAN_CHECK_OP)
		return 0;
	struct amp_check_ctx *st = state(ctx, cfg);
	return st && st->full;
}

void amp_check_hint(amp_ctx *ctx, const amp_tensor *t, const amp_stats *s)
{
	struct amp_check_ctx *st = ctx->check;
	if (!st || st->step != ctx->step)
		return;
	int i = 0;
	while (i < st->n_hints && st->hint[i].data != t->data)
		i++;
	if (i == st->n_hints) {
		if (st->n_hints == CHECK_HINTS)
			return; /* no room: the check reads t itself */
		st->n_hints++;
	}
	st->hint[i].data = t->data;
	st->hint[i].numel = t->numel;
	st->hint[i].s = *s;
}

/* ---- hooks -------------------------------------------------------------------------------- */
void amp_check_op(amp_ctx *ctx, const amp_op_call *call, uint64_t seq, const amp_tensor *out,
                  amp_tensor *const *in, int n)
{
	const amp_check_config *cfg = amp_check_config_now();
	if (cfg->nan_check == AMP_NAN_CHECK_OFF && cfg->n_dump_steps == 0)
		return;
	uint64_t t0 = amp_check_now_ns();
	struct amp_check_ctx *st = state(ctx, cfg);
	if (!st || !out)
		return;
	st->last_out = out;
	st->last_seq = seq;
	st->last_op = call->op;
	const char *base = label_or_op(call->label, call->op);
	int backward = ctx->in_backward != 0;
	int role = backward ? AMP_ROLE_GRAD : AMP_ROLE_OUTPUT;
	amp_phase phase = backward ? AMP_PHASE_BACKWARD : AMP_PHASE_FORWARD;
	check_name name;
	/* An alias (reshape) holds the very values of its input: nothing new to check. */
	int alias = n > 0 && in[0] && in[0]->data == out->data;
	if (!alias && !backward)
		note_producer(st, out->data, NULL, seq);
	if (cfg->nan_check == AMP_NAN_CHECK_OP && is_float(out) && !alias) {
		amp_stats s;
		int have, via_cast = 0;
		int64_t bad = scan(st, out, 1.0f, &s, &have);
		int origin = bad && st->origin.step < 0 && inputs_finite(st, in, n, &via_cast);
		if (have)
			emit_stats(ctx, seq, call->op, phase, role, out, base, &s, origin, 0, 0);
		if (origin) {
			set_origin(ctx, st, seq, call->op, phase, call->label, &s, via_cast);
			int dump = cfg->dump == AMP_DUMP_NONFINITE && !st->dump_all;
			for (int i = 0; i < n; i++) {
				if (!is_float(in[i]))
					continue;
				uint64_t src = 0;
				uint32_t fl = producer_of(st, in[i]->data, &src);
				if (in[i] != st->cast_bad)
					fl |= tiny_at_nonfinite(ctx, in[i], out);
				tensor_name(name, base, "/in%d", i);
				emit_stats_now(ctx, seq, call->op, phase, AMP_ROLE_INPUT, in[i], name, fl, src);
				dump_what w = {seq, call->op, AMP_ROLE_INPUT, "in", i, name,
				               AMP_DUMP_REASON_NONFINITE, backward};
				if (dump)
					amp_check_dump_tensor(ctx, st, cfg, &w, in[i]);
				if (in[i] == st->cast_bad && st->cast_src) {
					tensor_name(name, base, "/in%d.precast", i);
					src = 0;
					fl = AMP_TSTATS_CAST_SRC | producer_of(st, st->cast_src->data, &src);
					emit_stats_now(ctx, seq, call->op, phase, AMP_ROLE_INPUT, st->cast_src,
					               name, fl, src);
					w.tag = "src";
					if (dump)
						amp_check_dump_tensor(ctx, st, cfg, &w, st->cast_src);
				}
			}
			dump_what w = {seq, call->op, role, "out", 0, base, AMP_DUMP_REASON_NONFINITE,
			               backward};
			if (dump)
				amp_check_dump_tensor(ctx, st, cfg, &w, out);
		}
	}
	if (st->dump_all) {
		for (int i = 0; i < n; i++) {
			tensor_name(name, base, "/in%d", i);
			dump_what w = {seq, call->op, AMP_ROLE_INPUT, "in", i, name, AMP_DUMP_REASON_STEP, 0};
			amp_check_dump_tensor(ctx, st, cfg, &w, in[i]);
		}
		dump_what w = {seq, call->op, role, "out", 0, base, AMP_DUMP_REASON_STEP, 0};
		amp_check_dump_tensor(ctx, st, cfg, &w, out);
	}
	st->n_hints = 0; /* a hint lives until the check of its op */
	amp_check_spent_since(t0);
}

/* Backward of a forward FP16 -> FP32 cast: the FP32 gradient is rounded to FP16 into the
 * source's gradient, where a scaled gradient overflows.  A cast has no op record: this is
 * charged to the backward op that ran last, its consumer (the tape runs newest first). */
static void check_cast_backward(amp_ctx *ctx, const amp_node *node)
{
	const amp_tensor *src = node->in[0], *dy = node->out ? node->out->grad : NULL;
	if (!src || !amp_dt(src->dtype)->is_half || !src->requires_grad || !is_float(src->grad) ||
	    !is_float(dy) || dy->dtype != AMP_F32)
		return; /* FP32 -> half forward casts (master weights) go back to FP32: no overflow */
	const amp_check_config *cfg = amp_check_config_now();
	if (cfg->nan_check != AMP_NAN_CHECK_OP)
		return;
	uint64_t t0 = amp_check_now_ns();
	struct amp_check_ctx *st = state(ctx, cfg);
	if (!st)
		return;
	uint64_t seq = st->bw_valid ? st->bw_seq : st->last_seq;
	amp_op_type op = st->bw_valid ? st->bw_op : st->last_op;
	const char *base = node->label && *node->label ? node->label : "cast";
	check_name name;
	amp_stats s;
	int have;
	int64_t bad = scan(st, src->grad, 1.0f, &s, &have);
	int origin = bad && st->origin.step < 0 && !tensor_nonfinite(dy);
	tensor_name(name, base, ".cast.grad");
	if (have)
		emit_stats(ctx, seq, op, AMP_PHASE_BACKWARD, AMP_ROLE_GRAD, src->grad, name, &s, origin,
		           0, 0);
	if (origin) {
		set_origin(ctx, st, seq, op, AMP_PHASE_BACKWARD, node->label, &s, 1);
		if (cfg->dump == AMP_DUMP_NONFINITE && !st->dump_all) {
			dump_what w = {seq, op, AMP_ROLE_GRAD, "grad", 0, name, AMP_DUMP_REASON_NONFINITE, 1};
			amp_check_dump_tensor(ctx, st, cfg, &w, src->grad);
			tensor_name(name, base, ".cast.grad.fp32");
			w.tag = "dy";
			amp_check_dump_tensor(ctx, st, cfg, &w, dy);
		}
	}
	amp_check_spent_since(t0);
}

/* AMP_TSTATS_PARAM if x is a parameter's master or its working copy (a cast of the master). */
static uint32_t param_grad(const amp_tensor *x)
{
	const amp_node *n = x->node;
	int param = x->param != NULL ||
	            (n && n->op >= AMP_OP_COUNT && n->n_in > 0 && n->in[0] && n->in[0]->param);
	return param ? AMP_TSTATS_PARAM : 0;
}

void amp_check_backward(amp_ctx *ctx, const amp_node *node, uint64_t seq_before)
{
	if (node->op >= AMP_OP_COUNT) {
		check_cast_backward(ctx, node);
		return;
	}
	if (ctx->seq == seq_before)
		return; /* nothing traced */
	const amp_check_config *cfg = amp_check_config_now();
	if (cfg->nan_check == AMP_NAN_CHECK_OFF && cfg->n_dump_steps == 0)
		return;
	uint64_t t0 = amp_check_now_ns();
	struct amp_check_ctx *st = state(ctx, cfg);
	if (!st)
		return;
	uint64_t seq = ctx->seq - 1; /* the backward function traces its kernel last */
	st->bw_valid = 1;
	st->bw_seq = seq;
	st->bw_op = node->op;
	const char *base = label_or_op(node->label, node->op);
	check_name name;
	const amp_tensor *dy = node->out ? node->out->grad : NULL;

	/* the gradients this node produced, one per distinct input */
	amp_tensor *grads[AMP_NODE_MAX_IN] = {0};
	int idx[AMP_NODE_MAX_IN], ng = 0;
	for (int i = 0; i < node->n_in && i < AMP_NODE_MAX_IN; i++) {
		const amp_tensor *x = node->in[i];
		int dup = 0;
		for (int j = 0; j < i; j++)
			dup |= node->in[j] == x;
		if (!x || dup || !x->requires_grad || !is_float(x->grad))
			continue;
		grads[ng] = x->grad;
		idx[ng++] = i;
	}

	/* the forward op of this backward: its call site is the layer's */
	uint32_t fwd = node->seq <= seq ? AMP_TSTATS_SRC : 0;
	if (cfg->nan_check == AMP_NAN_CHECK_OP) {
		amp_stats s[AMP_NODE_MAX_IN];
		int have[AMP_NODE_MAX_IN], origin_at = -1;
		for (int g = 0; g < ng; g++) {
			int64_t bad = scan(st, grads[g], 1.0f, &s[g], &have[g]);
			grads[g]->nonfinite = bad; /* until its next writer (amp_grad_acc_kept) */
			grads[g]->nonfinite_known = 1;
			if (bad && origin_at < 0 && st->origin.step < 0)
				origin_at = g;
		}
		/* inputs memory_optimize dropped come back for the checks that read them */
		amp_tensor *back[AMP_NODE_MAX_IN];
		int n_back = 0;
		if (origin_at >= 0 && amp_node_inputs_back(ctx, node, 1, back, &n_back) != AMP_OK)
			origin_at =
			    -1; /* memory_limit refused the space: so is the rest of the step */
		if (origin_at >= 0) {
			/* inputs of a backward op: the incoming gradient and the forward inputs */
			int finite = !tensor_nonfinite(dy);
			for (int i = 0; finite && i < node->n_in && i < AMP_NODE_MAX_IN; i++)
				finite = !tensor_nonfinite(node->in[i]);
			if (!finite)
				origin_at = -1;
		}
		for (int g = 0; g < ng; g++) {
			if (!have[g])
				continue;
			tensor_name(name, base, "/in%d.grad", idx[g]);
			emit_stats(ctx, seq, node->op, AMP_PHASE_BACKWARD, AMP_ROLE_GRAD, grads[g], name, &s[g],
			           g == origin_at, fwd | param_grad(node->in[idx[g]]), node->seq);
		}
		if (origin_at >= 0) {
			set_origin(ctx, st, seq, node->op, AMP_PHASE_BACKWARD, node->label, &s[origin_at], 0);
			int dump = cfg->dump == AMP_DUMP_NONFINITE && !st->dump_all;
			if (is_float(dy)) {
				tensor_name(name, base, ".grad");
				emit_stats_now(ctx, seq, node->op, AMP_PHASE_BACKWARD, AMP_ROLE_GRAD, dy, name, fwd,
				               node->seq);
				dump_what w = {seq, node->op, AMP_ROLE_GRAD, "dy", 0, name,
				               AMP_DUMP_REASON_NONFINITE, 1};
				if (dump)
					amp_check_dump_tensor(ctx, st, cfg, &w, dy);
			}
			for (int i = 0; i < node->n_in && i < AMP_NODE_MAX_IN; i++) {
				if (!is_float(node->in[i]))
					continue;
				tensor_name(name, base, "/in%d", i);
				emit_stats_now(ctx, seq, node->op, AMP_PHASE_BACKWARD, AMP_ROLE_INPUT, node->in[i],
				               name, fwd, node->seq);
				dump_what w = {seq, node->op, AMP_ROLE_INPUT, "in", i, name,
				               AMP_DUMP_REASON_NONFINITE, 1};
				if (dump)
					amp_check_dump_tensor(ctx, st, cfg, &w, node->in[i]);
			}
			for (int g = 0; dump && g < ng; g++) {
				tensor_name(name, base, "/in%d.grad", idx[g]);
				dump_what w = {seq, node->op, AMP_ROLE_GRAD, "grad", idx[g], name,
				               AMP_DUMP_REASON_NONFINITE, 1};
				amp_check_dump_tensor(ctx, st, cfg, &w, grads[g]);
			}
		}
		amp_node_inputs_release(ctx, back, n_back);
	}
	if (st->dump_all) {
		tensor_name(name, base, ".grad");
		dump_what w = {seq, node->op, AMP_ROLE_GRAD, "dy", 0, name, AMP_DUMP_REASON_STEP, 0};
		amp_check_dump_tensor(ctx, st, cfg, &w, dy);
		for (int g = 0; g < ng; g++) {
			tensor_name(name, base, "/in%d.grad", idx[g]);
			dump_what wg = {seq, node->op, AMP_ROLE_GRAD, "grad", idx[g], name,
			                AMP_DUMP_REASON_STEP, 0};
			amp_check_dump_tensor(ctx, st, cfg, &wg, grads[g]);
		}
	}
	st->n_hints = 0; /* a hint lives until the check of its op */
	amp_check_spent_since(t0);
}

void amp_check_cast(amp_ctx *ctx, const amp_tensor *src, const amp_tensor *dst,
                    int64_t dst_nonfinite)
{
	const amp_check_config *cfg = amp_check_config_now();
	if (cfg->nan_check != AMP_NAN_CHECK_OP)
		return;
	struct amp_check_ctx *st = state(ctx, cfg);
	if (!st)
		return;
	if (!ctx->in_backward) /* a few stores, every cast: not timed */
		note_producer(st, dst->data, src->data, 0);
	if (st->origin.step >= 0 || !dst_nonfinite || !amp_dt(dst->dtype)->is_half ||
	    src->dtype != AMP_F32)
		return;
	uint64_t t0 = amp_check_now_ns();
	if (!amp_count_nonfinite_f32(src->data, src->numel)) {
		st->cast_bad = dst;
		st->cast_src = src;
	}
	amp_check_spent_since(t0);
}

void amp_check_loss(amp_ctx *ctx, const amp_tensor *loss)
{
	const amp_check_config *cfg = amp_check_config_now();
	if (cfg->nan_check != AMP_NAN_CHECK_STEP || !is_float(loss))
		return;
	struct amp_check_ctx *st = state(ctx, cfg);
	if (!st)
		return;
	int mine = loss == st->last_out;
	amp_stats s;
	tensor_stats(loss, &s);
	__atomic_add_fetch(&amp_check_cnt.checked, 1, __ATOMIC_RELAXED);
	/* the loss is normally the output of the step's last op */
	emit_stats(ctx, mine ? st->last_seq : (ctx->seq ? ctx->seq - 1 : 0), st->last_op,
	           AMP_PHASE_FORWARD, AMP_ROLE_OUTPUT, loss, "loss", &s, 0, 0, 0);
}

int amp_check_master_grad_stats(void)
{
	return amp_check_config_now()->nan_check == AMP_NAN_CHECK_STEP;
}

int64_t amp_check_master_grad(amp_ctx *ctx, const amp_param *p, float mul)
{
	const amp_tensor *g = p->master->grad;
	/* the values to read: the half gradient the update will widen, while it is kept */
	const amp_tensor *v = p->grad_kept ? p->grad_kept : g;
	const amp_check_config *cfg = amp_check_config_now();
	if (cfg->nan_check != AMP_NAN_CHECK_STEP)
		return tensor_nonfinite(v);
	uint64_t t0 = amp_check_now_ns();
	struct amp_check_ctx *st = state(ctx, cfg);
	if (!st)
		return tensor_nonfinite(v);
	amp_stats s;
	int have;
	int64_t bad = scan(st, v, mul, &s, &have);
	if (have) {
		check_name name;
		tensor_name(name, p->label ? p->label : "param", ".grad");
		/* the optimizer's own op record takes the next seq */
		emit_stats(ctx, ctx->seq, AMP_OP_OPTIMIZER, AMP_PHASE_OPTIMIZER, AMP_ROLE_GRAD, g, name,
		           &s, 0, 0, 0);
	}
	amp_check_spent_since(t0);
	return bad;
}

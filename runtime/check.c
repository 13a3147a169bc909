/* check.c — non-finite checks, tensor statistics, origin detection and dumps (see check.h).
 *
 * Every hook runs on the training thread right after the tensor was written.  The per-step
 * state of a context (origin found, dumps made, the last cast that overflowed) is reset lazily
 * when a hook first sees a new step.  Dump files are the one place where the training thread
 * writes: raw little-endian elements in the session's 0700 spool directory, created O_EXCL
 * with mode 0600, then announced with amp_trace_dump(); the collector loads and unlinks them.
 */
#include "check.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kernels/stats.h"

#define CHECK_HINTS 4 /* an op's outputs, a backward op's gradients */

struct amp_check_ctx {
	int64_t step;                  /* step this state belongs to */
	int full;                      /* full statistics in this step */
	int dump_all;                  /* one of the --dump-steps */
	amp_check_origin origin;       /* origin.step < 0: none yet */
	int nf_dumps;                  /* non-finite dumps written in this step */
	int nf_admitted;               /* 0: undecided, 1: within the steps cap, -1: refused */
	const amp_tensor *cast_bad;    /* FP16 cast of finite FP32 data that holds Inf/NaN */
	const amp_tensor *cast_src;    /* its FP32 source */
	const amp_tensor *last_out;    /* output of the last op (the loss, at amp_backward) */
	uint64_t last_seq;
	amp_op_type last_op;
	int bw_valid;                  /* a backward op ran in this step: */
	uint64_t bw_seq;               /* the last one, which a cast's backward is charged to */
	amp_op_type bw_op;
	int n_hints;                   /* statistics kernels took of tensors they wrote */
	struct {
		const void *data;
		int64_t numel;
		amp_stats s;
	} hint[CHECK_HINTS];
};

/* ---- configuration ------------------------------------------------------------------------ */
static pthread_once_t g_cfg_once = PTHREAD_ONCE_INIT;
static amp_check_config g_session_cfg, g_override_cfg;
static const amp_check_config *g_cfg;
static char g_spool[256], g_override_spool[256];

static void session_config_init(void)
{
	amp_check_config *c = &g_session_cfg;
	const amp_trace_config *tc = amp_trace_session_config();
	c->nan_check = AMP_NAN_CHECK_OP;
	c->dumps_per_step = AMP_CHECK_DUMPS_PER_STEP;
	c->dump_steps_max = AMP_CHECK_DUMP_STEPS;
	c->grad_dump_steps_max = AMP_CHECK_GRAD_DUMP_STEPS;
	c->stats_every = 1;
	c->spool_dir = g_spool;
	if (tc) {
		c->nan_check = tc->nan_check;
		c->dump = tc->dump;
		c->dump_limit = tc->dump_limit;
		c->n_dump_steps = tc->n_dump_steps;
		c->dump_steps = tc->dump_steps;
		snprintf(g_spool, sizeof g_spool, "%s", tc->spool_dir ? tc->spool_dir : "");
	}
	const char *every = getenv(AMP_CHECK_STATS_EVERY_ENV);
	if (every && *every) {
		char *end;
		long v = strtol(every, &end, 10);
		if (*end == '\0' && v >= 1 && v <= 1000000)
			c->stats_every = (int)v;
	}
	if (!g_cfg)
		g_cfg = c;
}

static inline const amp_check_config *config(void)
{
	if (__builtin_expect(g_cfg == NULL, 0))
		pthread_once(&g_cfg_once, session_config_init);
	return g_cfg;
}

void amp_check_configure(const amp_check_config *cfg)
{
	pthread_once(&g_cfg_once, session_config_init);
	if (!cfg) {
		g_cfg = &g_session_cfg;
		return;
	}
	g_override_cfg = *cfg;
	snprintf(g_override_spool, sizeof g_override_spool, "%s", cfg->spool_dir ? cfg->spool_dir : "");
	g_override_cfg.spool_dir = g_override_spool;
	if (g_override_cfg.stats_every < 1)
		g_override_cfg.stats_every = 1;
	g_cfg = &g_override_cfg;
}

const amp_check_config *amp_check_get_config(void)
{
	return config();
}

static int in_dump_steps(const amp_check_config *cfg, int64_t step)
{
	for (int i = 0; i < cfg->n_dump_steps; i++)
		if (step >= cfg->dump_steps[i].lo && step <= cfg->dump_steps[i].hi)
			return 1;
	return 0;
}

/* ---- process-wide counters and dump budget ------------------------------------------------ */
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static amp_check_counters g_cnt;       /* dump fields under g_mu; checked/stats atomic */
static amp_check_counters g_reported;  /* last values sent to meta */
static uint64_t g_dump_used;           /* bytes reserved or written */
static int g_nf_steps, g_grad_nf_steps;
static int g_spool_fd = -1;            /* -1: not opened yet, -2: cannot be opened */
static uint64_t g_name_serial;
static pthread_once_t g_exit_once = PTHREAD_ONCE_INIT;
static amp_check_observer g_observer;
static void *g_observer_arg;

void amp_check_counters_get(amp_check_counters *out)
{
	pthread_mutex_lock(&g_mu);
	*out = g_cnt;
	out->checked = __atomic_load_n(&g_cnt.checked, __ATOMIC_RELAXED);
	out->stats = __atomic_load_n(&g_cnt.stats, __ATOMIC_RELAXED);
	out->check_ns = __atomic_load_n(&g_cnt.check_ns, __ATOMIC_RELAXED);
	pthread_mutex_unlock(&g_mu);
}

void amp_check_reset_counters(void)
{
	pthread_mutex_lock(&g_mu);
	memset(&g_cnt, 0, sizeof g_cnt);
	memset(&g_reported, 0, sizeof g_reported);
	g_dump_used = 0;
	g_nf_steps = g_grad_nf_steps = 0;
	if (g_spool_fd >= 0)
		close(g_spool_fd);
	g_spool_fd = -1;
	pthread_mutex_unlock(&g_mu);
}

void amp_check_set_observer(amp_check_observer fn, void *arg)
{
	g_observer_arg = arg;
	g_observer = fn;
}

/* The dump counters as meta keys; `all` adds the check counters (at exit). */
static void report(int all)
{
	amp_check_counters c;
	amp_check_counters_get(&c);
	pthread_mutex_lock(&g_mu);
	int changed = memcmp(&c.dumps, &g_reported.dumps,
	                     offsetof(amp_check_counters, check_ns) -
	                         offsetof(amp_check_counters, dumps)) != 0;
	g_reported = c;
	pthread_mutex_unlock(&g_mu);
	if (!changed && !all)
		return;
	/* process-wide totals, which any thread may send: the collector keeps the largest */
	amp_trace_counter_process("dumps_written", (int64_t)c.dumps);
	amp_trace_counter_process("dumps_bytes", (int64_t)c.dump_bytes);
	amp_trace_counter_process("dumps_skipped", (int64_t)c.skipped);
	amp_trace_counter_process("dumps_skipped_bytes", (int64_t)c.skipped_bytes);
	amp_trace_counter_process("dumps_skipped_limit", (int64_t)c.skipped_limit);
	amp_trace_counter_process("dumps_skipped_step_cap", (int64_t)c.skipped_step_cap);
	amp_trace_counter_process("dumps_skipped_steps_cap", (int64_t)c.skipped_steps_cap);
	amp_trace_counter_process("dumps_skipped_nospool", (int64_t)c.skipped_nospool);
	amp_trace_counter_process("dumps_failed", (int64_t)c.failed);
	if (all) {
		amp_trace_counter_process("nonfinite_origins", (int64_t)c.origins);
		amp_trace_counter_process("tensors_checked", (int64_t)c.checked);
		amp_trace_counter_process("tensor_stats_records", (int64_t)c.stats);
		amp_trace_counter_process("check_ns", (int64_t)c.check_ns);
	}
}

void amp_check_report(void)
{
	report(1);
}

static void report_at_exit(void)
{
	if (AMP_TRACING())
		report(1);
}

static void register_exit(void)
{
	atexit(report_at_exit);
}

/* The hooks time themselves (vDSO clock, ~20 ns a read) so that a profile states what the
 * diagnostics cost ("check_ns" in meta). */
static inline uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static inline void spent_since(uint64_t t0)
{
	__atomic_add_fetch(&g_cnt.check_ns, now_ns() - t0, __ATOMIC_RELAXED);
}

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
		pthread_once(&g_exit_once, register_exit);
	} else {
		report(0);  /* a step ended: what its dumps skipped reaches meta now */
	}
	memset(st, 0, sizeof *st);
	st->step = ctx->step;
	st->origin.step = -1;
	st->full = cfg->stats_every <= 1 || ctx->step % cfg->stats_every == 0;
	st->dump_all = cfg->n_dump_steps > 0 && in_dump_steps(cfg, ctx->step);
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
static inline int is_float(const amp_tensor *t)
{
	return t && amp_dt(t->dtype)->is_float && t->numel > 0;
}

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

/* One pass over t: full statistics on statistics steps (*have = 1), taken from a kernel's
 * hint when there is one, else a non-finite count, followed by statistics if it found any.
 * Returns the NaN + Inf count. */
static int64_t scan(struct amp_check_ctx *st, const amp_tensor *t, amp_stats *s, int *have)
{
	__atomic_add_fetch(&g_cnt.checked, 1, __ATOMIC_RELAXED);
	int64_t bad;
	if (st->full) {
		if (!take_hint(st, t, s))
			tensor_stats(t, s);
		bad = (int64_t)(s->nan + s->pinf + s->ninf);
	} else if ((bad = tensor_nonfinite(t)) != 0) {
		tensor_stats(t, s);
	}
	*have = st->full || bad != 0;
	return bad;
}

static void emit_stats(const amp_ctx *ctx, uint64_t seq, amp_op_type op, amp_phase phase,
                       int role, const amp_tensor *t, const char *name, const amp_stats *s,
                       int origin)
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
	};
	for (int k = 0; k < AMP_STATS_BINS; k++)
		r.exp_hist[k] = s->exp_hist[k] > UINT32_MAX ? UINT32_MAX : (uint32_t)s->exp_hist[k];
	__atomic_add_fetch(&g_cnt.stats, 1, __ATOMIC_RELAXED);
	amp_check_observer obs = g_observer;
	if (obs)
		obs(g_observer_arg, &r, NULL);
	amp_trace_tensor_stats(&r);
}

/* Statistics of t computed now (inputs of an origin). */
static void emit_stats_now(const amp_ctx *ctx, uint64_t seq, amp_op_type op, amp_phase phase,
                           int role, const amp_tensor *t, const char *name)
{
	amp_stats s;
	tensor_stats(t, &s);
	emit_stats(ctx, seq, op, phase, role, t, name, &s, 0);
}

/* ---- dumps -------------------------------------------------------------------------------- */
typedef struct dump_what {
	uint64_t seq;
	amp_op_type op;
	int role;
	const char *tag;   /* file name part: in, out, grad, dy, src */
	int index;
	const char *name;  /* tensor name for the dumps table */
	int reason;
	int grad_origin;   /* a non-finite dump of a backward origin */
} dump_what;

static int write_all(int fd, const void *data, size_t n)
{
	const char *p = data;
	while (n > 0) {
		ssize_t w = write(fd, p, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

/* Creates file `name` in the spool directory (O_EXCL, 0600) holding bytes of data; on a name
 * clash (another context or process) a unique suffix is added to name (room: len). */
static int spool_write(int dirfd, char *name, size_t len, const void *data, size_t bytes)
{
	int fd = openat(dirfd, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0 && errno == EEXIST) {
		size_t base = strlen(name) - 4; /* before ".bin" */
		uint64_t serial = __atomic_add_fetch(&g_name_serial, 1, __ATOMIC_RELAXED);
		snprintf(name + base, len - base, "_p%ld_%" PRIu64 ".bin", (long)getpid(), serial);
		fd = openat(dirfd, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
	}
	if (fd < 0)
		return -1;
	int rc = write_all(fd, data, bytes);
	if (close(fd) != 0)
		rc = -1;
	if (rc != 0)
		unlinkat(dirfd, name, 0);
	return rc;
}

/* Counts a dump that is not written (under g_mu). */
static void skip_locked(uint64_t bytes, uint64_t *reason)
{
	(*reason)++;
	g_cnt.skipped++;
	g_cnt.skipped_bytes += bytes;
}

static void dump_tensor(amp_ctx *ctx, struct amp_check_ctx *st, const amp_check_config *cfg,
                        const dump_what *w, const amp_tensor *t)
{
	if (!is_float(t))
		return;
	uint64_t bytes = (uint64_t)t->numel * amp_dtype_size(t->dtype);
	int dirfd;
	pthread_mutex_lock(&g_mu);
	if (w->reason == AMP_DUMP_REASON_NONFINITE) {
		if (st->nf_admitted == 0) {
			int over = g_nf_steps >= cfg->dump_steps_max ||
			           (w->grad_origin && g_grad_nf_steps >= cfg->grad_dump_steps_max);
			st->nf_admitted = over ? -1 : 1;
			if (!over) {
				g_nf_steps++;
				g_grad_nf_steps += w->grad_origin;
			}
		}
		if (st->nf_admitted < 0) {
			skip_locked(bytes, &g_cnt.skipped_steps_cap);
			goto refused;
		}
		if (st->nf_dumps >= cfg->dumps_per_step) {
			skip_locked(bytes, &g_cnt.skipped_step_cap);
			goto refused;
		}
	}
	if (g_spool_fd == -1 && cfg->spool_dir && cfg->spool_dir[0]) {
		g_spool_fd = open(cfg->spool_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (g_spool_fd < 0)
			g_spool_fd = -2;
	}
	if (g_spool_fd < 0) {
		skip_locked(bytes, &g_cnt.skipped_nospool);
		goto refused;
	}
	if (bytes > cfg->dump_limit || g_dump_used > cfg->dump_limit - bytes) {
		skip_locked(bytes, &g_cnt.skipped_limit);
		goto refused;
	}
	g_dump_used += bytes;
	dirfd = g_spool_fd;
	if (w->reason == AMP_DUMP_REASON_NONFINITE)
		st->nf_dumps++;
	pthread_mutex_unlock(&g_mu);

	char file[96];
	snprintf(file, sizeof file, "s%" PRId64 "_q%" PRIu64 "_%s%d.bin", ctx->step, w->seq, w->tag,
	         w->index);
	int rc = spool_write(dirfd, file, sizeof file, t->data, (size_t)bytes);
	pthread_mutex_lock(&g_mu);
	if (rc != 0) {
		g_dump_used -= bytes;
		skip_locked(bytes, &g_cnt.failed);
		if (w->reason == AMP_DUMP_REASON_NONFINITE)
			st->nf_dumps--;
		pthread_mutex_unlock(&g_mu);
		return;
	}
	g_cnt.dumps++;
	g_cnt.dump_bytes += bytes;
	pthread_mutex_unlock(&g_mu);

	amp_trace_dump_ref d = {
	    .step = ctx->step,
	    .seq = w->seq,
	    .op = w->op,
	    .role = w->role,
	    .dtype = t->dtype,
	    .reason = w->reason,
	    .name = w->name,
	    .file = file,
	    .bytes = bytes,
	    .ndim = t->shape.ndim,
	};
	for (int i = 0; i < t->shape.ndim && i < 4; i++)
		d.shape[i] = t->shape.d[i];
	amp_check_observer obs = g_observer;
	if (obs)
		obs(g_observer_arg, NULL, &d);
	amp_trace_dump(&d);
	return;
refused:
	pthread_mutex_unlock(&g_mu);
}

/* ---- origin ------------------------------------------------------------------------------- */
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
	__atomic_add_fetch(&g_cnt.origins, 1, __ATOMIC_RELAXED);
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
	const amp_check_config *cfg = config();
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
	const amp_check_config *cfg = config();
	if (cfg->nan_check == AMP_NAN_CHECK_OFF && cfg->n_dump_steps == 0)
		return;
	uint64_t t0 = now_ns();
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
	char name[96];
	/* An alias (reshape) holds the very values of its input: nothing new to check. */
	int alias = n > 0 && in[0] && in[0]->data == out->data;
	if (cfg->nan_check == AMP_NAN_CHECK_OP && is_float(out) && !alias) {
		amp_stats s;
		int have, via_cast = 0;
		int64_t bad = scan(st, out, &s, &have);
		int origin = bad && st->origin.step < 0 && inputs_finite(st, in, n, &via_cast);
		if (have)
			emit_stats(ctx, seq, call->op, phase, role, out, base, &s, origin);
		if (origin) {
			set_origin(ctx, st, seq, call->op, phase, call->label, &s, via_cast);
			int dump = cfg->dump == AMP_DUMP_NONFINITE && !st->dump_all;
			for (int i = 0; i < n; i++) {
				if (!is_float(in[i]))
					continue;
				snprintf(name, sizeof name, "%s/in%d", base, i);
				emit_stats_now(ctx, seq, call->op, phase, AMP_ROLE_INPUT, in[i], name);
				dump_what w = {seq, call->op, AMP_ROLE_INPUT, "in", i, name,
				               AMP_DUMP_REASON_NONFINITE, backward};
				if (dump)
					dump_tensor(ctx, st, cfg, &w, in[i]);
				if (in[i] == st->cast_bad && st->cast_src) {
					snprintf(name, sizeof name, "%s/in%d.precast", base, i);
					emit_stats_now(ctx, seq, call->op, phase, AMP_ROLE_INPUT, st->cast_src,
					               name);
					w.tag = "src";
					if (dump)
						dump_tensor(ctx, st, cfg, &w, st->cast_src);
				}
			}
			dump_what w = {seq, call->op, role, "out", 0, base, AMP_DUMP_REASON_NONFINITE,
			               backward};
			if (dump)
				dump_tensor(ctx, st, cfg, &w, out);
		}
	}
	if (st->dump_all) {
		for (int i = 0; i < n; i++) {
			snprintf(name, sizeof name, "%s/in%d", base, i);
			dump_what w = {seq, call->op, AMP_ROLE_INPUT, "in", i, name, AMP_DUMP_REASON_STEP, 0};
			dump_tensor(ctx, st, cfg, &w, in[i]);
		}
		dump_what w = {seq, call->op, role, "out", 0, base, AMP_DUMP_REASON_STEP, 0};
		dump_tensor(ctx, st, cfg, &w, out);
	}
	st->n_hints = 0; /* a hint lives until the check of its op */
	spent_since(t0);
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
	const amp_check_config *cfg = config();
	if (cfg->nan_check != AMP_NAN_CHECK_OP)
		return;
	uint64_t t0 = now_ns();
	struct amp_check_ctx *st = state(ctx, cfg);
	if (!st)
		return;
	uint64_t seq = st->bw_valid ? st->bw_seq : st->last_seq;
	amp_op_type op = st->bw_valid ? st->bw_op : st->last_op;
	const char *base = node->label && *node->label ? node->label : "cast";
	char name[96];
	amp_stats s;
	int have;
	int64_t bad = scan(st, src->grad, &s, &have);
	int origin = bad && st->origin.step < 0 && !tensor_nonfinite(dy);
	snprintf(name, sizeof name, "%s.cast.grad", base);
	if (have)
		emit_stats(ctx, seq, op, AMP_PHASE_BACKWARD, AMP_ROLE_GRAD, src->grad, name, &s, origin);
	if (origin) {
		set_origin(ctx, st, seq, op, AMP_PHASE_BACKWARD, node->label, &s, 1);
		if (cfg->dump == AMP_DUMP_NONFINITE && !st->dump_all) {
			dump_what w = {seq, op, AMP_ROLE_GRAD, "grad", 0, name, AMP_DUMP_REASON_NONFINITE, 1};
			dump_tensor(ctx, st, cfg, &w, src->grad);
			snprintf(name, sizeof name, "%s.cast.grad.fp32", base);
			w.tag = "dy";
			dump_tensor(ctx, st, cfg, &w, dy);
		}
	}
	spent_since(t0);
}

void amp_check_backward(amp_ctx *ctx, const amp_node *node, uint64_t seq_before)
{
	if (node->op >= AMP_OP_COUNT) {
		check_cast_backward(ctx, node);
		return;
	}
	if (ctx->seq == seq_before)
		return; /* nothing traced */
	const amp_check_config *cfg = config();
	if (cfg->nan_check == AMP_NAN_CHECK_OFF && cfg->n_dump_steps == 0)
		return;
	uint64_t t0 = now_ns();
	struct amp_check_ctx *st = state(ctx, cfg);
	if (!st)
		return;
	uint64_t seq = ctx->seq - 1; /* the backward function traces its kernel last */
	st->bw_valid = 1;
	st->bw_seq = seq;
	st->bw_op = node->op;
	const char *base = label_or_op(node->label, node->op);
	char name[96];
	const amp_tensor *dy = node->out ? node->out->grad : NULL;

	/* the gradients this node produced, one per distinct input */
	const amp_tensor *grads[AMP_NODE_MAX_IN] = {0};
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

	if (cfg->nan_check == AMP_NAN_CHECK_OP) {
		amp_stats s[AMP_NODE_MAX_IN];
		int have[AMP_NODE_MAX_IN], origin_at = -1;
		for (int g = 0; g < ng; g++) {
			int64_t bad = scan(st, grads[g], &s[g], &have[g]);
			if (bad && origin_at < 0 && st->origin.step < 0)
				origin_at = g;
		}
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
			snprintf(name, sizeof name, "%s/in%d.grad", base, idx[g]);
			emit_stats(ctx, seq, node->op, AMP_PHASE_BACKWARD, AMP_ROLE_GRAD, grads[g], name, &s[g],
			           g == origin_at);
		}
		if (origin_at >= 0) {
			set_origin(ctx, st, seq, node->op, AMP_PHASE_BACKWARD, node->label, &s[origin_at], 0);
			int dump = cfg->dump == AMP_DUMP_NONFINITE && !st->dump_all;
			if (is_float(dy)) {
				snprintf(name, sizeof name, "%s.grad", base);
				emit_stats_now(ctx, seq, node->op, AMP_PHASE_BACKWARD, AMP_ROLE_GRAD, dy, name);
				dump_what w = {seq, node->op, AMP_ROLE_GRAD, "dy", 0, name,
				               AMP_DUMP_REASON_NONFINITE, 1};
				if (dump)
					dump_tensor(ctx, st, cfg, &w, dy);
			}
			for (int i = 0; i < node->n_in && i < AMP_NODE_MAX_IN; i++) {
				if (!is_float(node->in[i]))
					continue;
				snprintf(name, sizeof name, "%s/in%d", base, i);
				emit_stats_now(ctx, seq, node->op, AMP_PHASE_BACKWARD, AMP_ROLE_INPUT, node->in[i],
				               name);
				dump_what w = {seq, node->op, AMP_ROLE_INPUT, "in", i, name,
				               AMP_DUMP_REASON_NONFINITE, 1};
				if (dump)
					dump_tensor(ctx, st, cfg, &w, node->in[i]);
			}
			for (int g = 0; dump && g < ng; g++) {
				snprintf(name, sizeof name, "%s/in%d.grad", base, idx[g]);
				dump_what w = {seq, node->op, AMP_ROLE_GRAD, "grad", idx[g], name,
				               AMP_DUMP_REASON_NONFINITE, 1};
				dump_tensor(ctx, st, cfg, &w, grads[g]);
			}
		}
	}
	if (st->dump_all) {
		snprintf(name, sizeof name, "%s.grad", base);
		dump_what w = {seq, node->op, AMP_ROLE_GRAD, "dy", 0, name, AMP_DUMP_REASON_STEP, 0};
		dump_tensor(ctx, st, cfg, &w, dy);
		for (int g = 0; g < ng; g++) {
			snprintf(name, sizeof name, "%s/in%d.grad", base, idx[g]);
			dump_what wg = {seq, node->op, AMP_ROLE_GRAD, "grad", idx[g], name,
			                AMP_DUMP_REASON_STEP, 0};
			dump_tensor(ctx, st, cfg, &wg, grads[g]);
		}
	}
	st->n_hints = 0; /* a hint lives until the check of its op */
	spent_since(t0);
}

void amp_check_cast(amp_ctx *ctx, const amp_tensor *src, const amp_tensor *dst,
                    int64_t dst_nonfinite)
{
	const amp_check_config *cfg = config();
	if (cfg->nan_check != AMP_NAN_CHECK_OP || !amp_dt(dst->dtype)->is_half ||
	    src->dtype != AMP_F32)
		return;
	uint64_t t0 = now_ns();
	struct amp_check_ctx *st = state(ctx, cfg);
	if (st && st->origin.step < 0 && dst_nonfinite &&
	    !amp_count_nonfinite_f32(src->data, src->numel)) {
		st->cast_bad = dst;
		st->cast_src = src;
	}
	spent_since(t0);
}

void amp_check_loss(amp_ctx *ctx, const amp_tensor *loss)
{
	const amp_check_config *cfg = config();
	if (cfg->nan_check != AMP_NAN_CHECK_STEP || !is_float(loss))
		return;
	struct amp_check_ctx *st = state(ctx, cfg);
	if (!st)
		return;
	int mine = loss == st->last_out;
	amp_stats s;
	tensor_stats(loss, &s);
	__atomic_add_fetch(&g_cnt.checked, 1, __ATOMIC_RELAXED);
	/* the loss is normally the output of the step's last op */
	emit_stats(ctx, mine ? st->last_seq : (ctx->seq ? ctx->seq - 1 : 0), st->last_op,
	           AMP_PHASE_FORWARD, AMP_ROLE_OUTPUT, loss, "loss", &s, 0);
}

int64_t amp_check_master_grad(amp_ctx *ctx, const amp_param *p)
{
	const amp_tensor *g = p->master->grad;
	const amp_check_config *cfg = config();
	if (cfg->nan_check != AMP_NAN_CHECK_STEP)
		return amp_count_nonfinite_f32(g->data, g->numel);
	uint64_t t0 = now_ns();
	struct amp_check_ctx *st = state(ctx, cfg);
	if (!st)
		return amp_count_nonfinite_f32(g->data, g->numel);
	amp_stats s;
	int have;
	int64_t bad = scan(st, g, &s, &have);
	if (have) {
		char name[96];
		snprintf(name, sizeof name, "%s.grad", p->label ? p->label : "param");
		/* the optimizer's own op record takes the next seq */
		emit_stats(ctx, ctx->seq, AMP_OP_OPTIMIZER, AMP_PHASE_OPTIMIZER, AMP_ROLE_GRAD, g, name,
		           &s, 0);
	}
	spent_since(t0);
	return bad;
}

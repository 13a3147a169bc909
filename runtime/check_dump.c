/* check_dump.c — the checks' configuration (the session's, or a test's), the process-wide
 * counters reported into meta, and tensor dumps: the one place where the training thread
 * writes a file — raw little-endian elements in the session's 0700 spool directory, created
 * O_EXCL with mode 0600, then announced with amp_trace_dump(); the collector loads and unlinks
 * them.  The dump budget's bytes are the run's (the session's counter, every process drawing on
 * it); its caps (dumps per step, steps with dumps) are per process, under g_mu.
 */
#include "check_int.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- configuration ------------------------------------------------------------------------ */
static pthread_once_t g_cfg_once = PTHREAD_ONCE_INIT;
static amp_check_config g_session_cfg, g_override_cfg;
const amp_check_config *amp_check_cfg;
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
	const char *every = secure_getenv(AMP_CHECK_STATS_EVERY_ENV);
	if (every && *every) {
		char *end;
		long v = strtol(every, &end, 10);
		if (*end == '\0' && v >= 1 && v <= 1000000)
			c->stats_every = (int)v;
	}
	if (!amp_check_cfg)
		amp_check_cfg = c;
}

void amp_check_config_init(void)
{
	pthread_once(&g_cfg_once, session_config_init);
}

void amp_check_configure(const amp_check_config *cfg)
{
	pthread_once(&g_cfg_once, session_config_init);
	if (!cfg) {
		amp_check_cfg = &g_session_cfg;
		return;
	}
	g_override_cfg = *cfg;
	snprintf(g_override_spool, sizeof g_override_spool, "%s", cfg->spool_dir ? cfg->spool_dir : "");
	g_override_cfg.spool_dir = g_override_spool;
	if (g_override_cfg.stats_every < 1)
		g_override_cfg.stats_every = 1;
	amp_check_cfg = &g_override_cfg;
}

const amp_check_config *amp_check_get_config(void)
{
	return amp_check_config_now();
}

int amp_check_in_dump_steps(const amp_check_config *cfg, int64_t step)
{
	for (int i = 0; i < cfg->n_dump_steps; i++)
		if (step >= cfg->dump_steps[i].lo && step <= cfg->dump_steps[i].hi)
			return 1;
	return 0;
}

/* ---- process-wide counters and dump budget ------------------------------------------------ */
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
amp_check_counters amp_check_cnt;       /* dump fields under g_mu; checked/stats atomic */
static amp_check_counters g_reported;  /* last values sent to meta */
static uint64_t g_dump_used;           /* bytes reserved or written, without a session */
static int g_nf_steps, g_grad_nf_steps;
static int g_spool_fd = -1;            /* -1: not opened yet, -2: cannot be opened */
static uint64_t g_name_serial;
static pthread_once_t g_exit_once = PTHREAD_ONCE_INIT;
amp_check_observer amp_check_observer_fn;
void *amp_check_observer_arg;

void amp_check_counters_get(amp_check_counters *out)
{
	pthread_mutex_lock(&g_mu);
	*out = amp_check_cnt;
	out->checked = __atomic_load_n(&amp_check_cnt.checked, __ATOMIC_RELAXED);
	out->stats = __atomic_load_n(&amp_check_cnt.stats, __ATOMIC_RELAXED);
	out->check_ns = __atomic_load_n(&amp_check_cnt.check_ns, __ATOMIC_RELAXED);
	pthread_mutex_unlock(&g_mu);
}

void amp_check_reset_counters(void)
{
	pthread_mutex_lock(&g_mu);
	memset(&amp_check_cnt, 0, sizeof amp_check_cnt);
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
	amp_check_observer_arg = arg;
	amp_check_observer_fn = fn;
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

/* fork: the child reports its own counts (the parent's process reported what came before, and
 * counters of one name add up over processes); the budget already used stays used */
static void fork_prepare(void) { pthread_mutex_lock(&g_mu); }
static void fork_parent(void) { pthread_mutex_unlock(&g_mu); }
static void fork_child(void)
{
	memset(&amp_check_cnt, 0, sizeof amp_check_cnt);
	memset(&g_reported, 0, sizeof g_reported);
	pthread_mutex_unlock(&g_mu);
}

static void register_exit(void)
{
	atexit(report_at_exit);
	pthread_atfork(fork_prepare, fork_parent, fork_child);
}

void amp_check_first_state(void)
{
	pthread_once(&g_exit_once, register_exit);
}

void amp_check_step_ended(void)
{
	report(0);
}

/* ---- spool files -------------------------------------------------------------------------- */
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
	amp_check_cnt.skipped++;
	amp_check_cnt.skipped_bytes += bytes;
}

/* The run's dump bytes: under ampprof the session's counter, which every process of the run
 * (a forked child too) draws on, so that --dump-limit bounds the run; else this process's. */
static uint64_t *dump_budget(void)
{
	uint64_t *shared = amp_trace_dump_used();
	return shared ? shared : &g_dump_used;
}

/* Takes bytes of the budget if they fit under limit: 1, else 0. */
static int budget_take(uint64_t bytes, uint64_t limit)
{
	uint64_t *b = dump_budget();
	uint64_t used = __atomic_load_n(b, __ATOMIC_RELAXED);
	do {
		if (bytes > limit || used > limit - bytes)
			return 0;
	} while (!__atomic_compare_exchange_n(b, &used, used + bytes, 1, __ATOMIC_ACQ_REL,
	                                      __ATOMIC_RELAXED));
	return 1;
}

void amp_check_dump_tensor(amp_ctx *ctx, struct amp_check_ctx *st, const amp_check_config *cfg,
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
			skip_locked(bytes, &amp_check_cnt.skipped_steps_cap);
			goto refused;
		}
		if (st->nf_dumps >= cfg->dumps_per_step) {
			skip_locked(bytes, &amp_check_cnt.skipped_step_cap);
			goto refused;
		}
	}
	if (g_spool_fd == -1 && cfg->spool_dir && cfg->spool_dir[0]) {
		g_spool_fd = open(cfg->spool_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (g_spool_fd < 0)
			g_spool_fd = -2;
	}
	if (g_spool_fd < 0) {
		skip_locked(bytes, &amp_check_cnt.skipped_nospool);
		goto refused;
	}
	if (!budget_take(bytes, cfg->dump_limit)) {
		skip_locked(bytes, &amp_check_cnt.skipped_limit);
		goto refused;
	}
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
		__atomic_sub_fetch(dump_budget(), bytes, __ATOMIC_ACQ_REL); /* not written */
		skip_locked(bytes, &amp_check_cnt.failed);
		if (w->reason == AMP_DUMP_REASON_NONFINITE)
			st->nf_dumps--;
		pthread_mutex_unlock(&g_mu);
		return;
	}
	amp_check_cnt.dumps++;
	amp_check_cnt.dump_bytes += bytes;
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
	amp_check_observer obs = amp_check_observer_fn;
	if (obs)
		obs(amp_check_observer_arg, NULL, &d);
	amp_trace_dump(&d);
	return;
refused:
	pthread_mutex_unlock(&g_mu);
}


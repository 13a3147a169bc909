/* trace_ring.c — the emitter's rings: the clock, publishing and waiting on a full ring, the
 * per-ring string table, and claiming a ring for a thread on its first event.  The hot path
 * (reserve, commit, intern) is inline in trace_int.h; this is what it falls back to.
 */
#include "trace_int.h"

#include <errno.h>
#include <link.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <linux/futex.h>
#include <unistd.h>

__thread trace_ring *amp_trace_tl_ring __attribute__((tls_model("initial-exec")));
__thread int amp_trace_tl_no_ring __attribute__((tls_model("initial-exec")));
__thread int amp_trace_tl_in_signal __attribute__((tls_model("initial-exec")));

/* ---- clock ------------------------------------------------------------------------------- */
static uint64_t mono_ns(clockid_t id)
{
	struct timespec ts;
	clock_gettime(id, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint64_t amp_trace_clock_mono(void)
{
	return mono_ns(CLOCK_MONOTONIC);
}

int amp_trace_tsc_invariant(void)
{
#if TRACE_HAVE_TSC
	unsigned a, b, c, d;
	if (!__get_cpuid(0x80000000u, &a, &b, &c, &d) || a < 0x80000007u)
		return 0;
	__get_cpuid(0x80000007u, &a, &b, &c, &d);
	return (d >> 8) & 1u;
#else
	return 0;
#endif
}

/* ---- ring writing ------------------------------------------------------------------------ */
/* Wakes the collector out of its sleep between polls (it sleeps up to tens of milliseconds when
 * the rings fill slowly).  One syscall; async-signal-safe. */
void amp_trace_collector_wake(void)
{
	__atomic_add_fetch(&amp_trace_sess->wake, 1, __ATOMIC_RELEASE);
	syscall(SYS_futex, &amp_trace_sess->wake, FUTEX_WAKE, 1, NULL, NULL, 0);
}


static int collector_alive(void)
{
	pid_t pid = (pid_t)amp_trace_sess->collector_pid;
	return pid <= 0 || kill(pid, 0) == 0 || errno != ESRCH;
}

/* Waits until `need` slots are free (and, for an event record of kind >= 0, the ring's reserve
 * besides).  Returns 0 when they are, -1 when the record must be dropped (an event in drop
 * mode, a dead collector, or a signal handler that may not wait long). */
int amp_trace_ring_wait(trace_ring *r, uint64_t need, int kind)
{
	uint64_t keep = kind >= 0 ? r->reserve : 0;
	ring_publish(r);
	if (r->head + need + keep - r->tail_cache > r->nslots)
		amp_trace_collector_wake();
	for (unsigned spin = 0;; spin++) {
		r->tail_cache = __atomic_load_n(&r->hdr->tail, __ATOMIC_ACQUIRE);
		if (r->head + need + keep - r->tail_cache <= r->nslots)
			return 0;
		if ((amp_trace_drop_mode && kind >= 0) || r->dead ||
		    (amp_trace_tl_in_signal && spin > 2000))
			return -1;
		if (spin < 64) {
			sched_yield();
			continue;
		}
		struct timespec ts = {0, 100000}; /* 100 us: the collector was woken above */
		nanosleep(&ts, NULL);
		if (spin % 1024 == 0 && !collector_alive()) {
			r->dead = 1;
			return -1;
		}
	}
}



void amp_trace_emit_clock(trace_ring *r)
{
	amp_rec_clock *c = ring_reserve(r, 1);
	if (!c)
		return;
	c->ticks = amp_trace_clock();
	c->mono_ns = mono_ns(CLOCK_MONOTONIC);
	c->real_ns = mono_ns(CLOCK_REALTIME);
	ring_commit(r, c, AMP_REC_CLOCK, 1, 0);
}

/* ---- strings ----------------------------------------------------------------------------- */
static uint64_t str_hash(const char *s, size_t n)
{
	uint64_t h = 1469598103934665603ull;
	for (size_t i = 0; i < n; i++)
		h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
	return h;
}

int amp_trace_str_table_grow(trace_ring *r)
{
	uint32_t cap = r->str_table_cap ? r->str_table_cap * 2 : 256;
	uint32_t *t = calloc(cap, sizeof *t);
	if (!t)
		return -1;
	for (uint32_t id = 1; id <= r->n_strings; id++) {
		const char *s = r->texts[id];
		uint64_t i = str_hash(s, strlen(s));
		while (t[i & (cap - 1)])
			i++;
		t[i & (cap - 1)] = id;
	}
	free(r->str_table);
	r->str_table = t;
	r->str_table_cap = cap;
	return 0;
}

static void emit_string(trace_ring *r, uint32_t id, const char *s, size_t n)
{
	unsigned slots = (unsigned)((AMP_REC_STRING_FIXED + n + AMP_SLOT_SIZE - 1) / AMP_SLOT_SIZE);
	amp_rec_string *rec = ring_reserve(r, slots);
	if (!rec)
		return;
	rec->id = id;
	rec->pad = 0;
	memcpy((char *)rec + AMP_REC_STRING_FIXED, s, n);
	ring_commit(r, rec, AMP_REC_STRING, slots, (unsigned)n);
}

/* Id of the string with this content, defining it on first use; 0 on allocation failure. */
uint32_t amp_trace_intern_content(trace_ring *r, const char *s)
{
	size_t n = strnlen(s, AMP_STRING_MAX);
	uint64_t h = str_hash(s, n);
	if (r->n_strings + 1 >= r->str_table_cap / 2 && amp_trace_str_table_grow(r) != 0)
		return 0;
	uint32_t cap = r->str_table_cap;
	uint64_t i = h;
	for (;; i++) {
		uint32_t id = r->str_table[i & (cap - 1)];
		if (id == 0)
			break;
		const char *t = r->texts[id];
		if (strncmp(t, s, n) == 0 && t[n] == '\0')
			return id;
	}
	if (r->n_strings + 2 > r->cap_strings) {
		uint32_t nc = r->cap_strings ? r->cap_strings * 2 : 64;
		char **nt = realloc(r->texts, nc * sizeof *nt);
		if (!nt)
			return 0;
		r->texts = nt;
		r->cap_strings = nc;
	}
	char *copy = malloc(n + 1);
	if (!copy)
		return 0;
	memcpy(copy, s, n);
	copy[n] = '\0';
	uint32_t id = ++r->n_strings;
	r->texts[id] = copy;
	r->str_table[i & (cap - 1)] = id;
	emit_string(r, id, copy, n);
	return id;
}



/* ---- rings ------------------------------------------------------------------------------- */
void amp_trace_ring_close(trace_ring *r)
{
	ring_publish(r);
	__atomic_store_n(&r->hdr->state, AMP_RING_CLOSED, __ATOMIC_RELEASE);
}

void amp_trace_ring_free(trace_ring *r)
{
	if (r->altstack) {
		stack_t ss = {.ss_sp = NULL, .ss_flags = SS_DISABLE, .ss_size = 0};
		sigaltstack(&ss, NULL);
		free(r->altstack);
	}
	for (uint32_t id = 1; id <= r->n_strings; id++)
		free(r->texts[id]);
	free(r->texts);
	free(r->str_table);
	free(r->cs_keys);
	free(r->cs_ids);
	free(r->mod_bias);
	free(r);
}

void amp_trace_ring_key_destructor(void *arg)
{
	trace_ring *r = arg;
	if (r && amp_trace_tl_ring == r) {
		amp_trace_ring_close(r);
		amp_trace_tl_ring = NULL;
		amp_trace_ring_free(r);
	}
}

static void ring_setup_altstack(trace_ring *r)
{
	stack_t ss;
	r->altstack = malloc(TRACE_ALTSTACK);
	if (!r->altstack)
		return;
	ss.ss_sp = r->altstack;
	ss.ss_size = TRACE_ALTSTACK;
	ss.ss_flags = 0;
	sigaltstack(&ss, NULL);
}

/* Maps every page of a ring now, so the first pass of the producer over it takes no page
 * faults (a fault on a shared page costs microseconds, and a ring of 2 MiB at a few KiB per
 * training step is written for hundreds of steps before it wraps).  Kernels before 5.14 lack
 * MADV_POPULATE_WRITE: each page is then rewritten with its own first byte. */
static void ring_prefault(unsigned char *base, uint64_t bytes)
{
	uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
	if (page == 0 || page == (uintptr_t)-1)
		page = 4096;
	uintptr_t lo = (uintptr_t)base & ~(page - 1);
	uintptr_t hi = ((uintptr_t)base + bytes + page - 1) & ~(page - 1);
#ifdef MADV_POPULATE_WRITE
	if (madvise((void *)lo, hi - lo, MADV_POPULATE_WRITE) == 0)
		return;
#endif
	for (uintptr_t p = (uintptr_t)base; p < (uintptr_t)base + bytes; p = (p & ~(page - 1)) + page) {
		volatile unsigned char *b = (volatile unsigned char *)p;
		*b = *b;
	}
}

#define RING_CLAIM_WAIT_MS 1000u /* longest wait of a new thread for a closed ring's reclaim */

/* ---- counters of threads without a ring --------------------------------------------------- */
__thread int64_t amp_trace_tl_lost[AMP_LOST_COUNTERS] __attribute__((tls_model("initial-exec")));

/* The session's lost-counter slot named name, naming a free one; -1 if all are taken. */
static int lost_slot(const char *name)
{
	amp_lost_counter *lc = amp_trace_sess->lost;
	size_t n = strnlen(name, AMP_LOST_NAME - 1);
	for (int pass = 0; pass < 1000; pass++) {
		int pending = 0, free_slot = -1;
		for (int i = 0; i < AMP_LOST_COUNTERS; i++) {
			uint32_t st = __atomic_load_n(&lc[i].state, __ATOMIC_ACQUIRE);
			if (st == 2 && strncmp(lc[i].name, name, n) == 0 && lc[i].name[n] == '\0')
				return i;
			pending |= st == 1;
			if (st == 0 && free_slot < 0)
				free_slot = i;
		}
		/* a slot being named may be getting this name: a second slot of one name would
		 * split its count, so wait for it before naming one */
		if (!pending) {
			if (free_slot < 0)
				return -1;
			uint32_t want = 0;
			if (__atomic_compare_exchange_n(&lc[free_slot].state, &want, 1, 0,
			                                __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
				memcpy(lc[free_slot].name, name, n);
				lc[free_slot].name[n] = '\0';
				__atomic_store_n(&lc[free_slot].state, 2, __ATOMIC_RELEASE);
				return free_slot;
			}
		}
		sched_yield();
	}
	return -1;
}

void amp_trace_lost_counter(const char *name, int64_t value)
{
	if (!amp_trace_sess || amp_trace_tl_in_signal)
		return;
	int i = lost_slot(name);
	if (i < 0)
		return;
	int64_t delta = (int64_t)((uint64_t)value - (uint64_t)amp_trace_tl_lost[i]);
	amp_trace_tl_lost[i] = value;
	__atomic_add_fetch(&amp_trace_sess->lost[i].value, delta, __ATOMIC_RELAXED);
}

/* Index of a ring for this thread: a fresh one while any is left, else one the collector
 * reclaimed (REUSABLE -> CLAIMING).  -1 if none. */
static int64_t ring_claim(void)
{
	amp_session_hdr *s = amp_trace_sess;
	uint32_t count = s->ring_count;
	if (__atomic_load_n(&s->rings_claimed, __ATOMIC_ACQUIRE) < count) {
		uint32_t idx = __atomic_fetch_add(&s->rings_claimed, 1, __ATOMIC_ACQ_REL);
		if (idx < count)
			return idx;
	}
	/* every ring was claimed once: take one the collector reclaimed; while some ring's thread
	 * has ended (CLOSED)
	 * or its process died, and the collector has yet to reclaim it, wake the collector and wait a
	 * little (at this thread's first event only; up to RING_CLAIM_WAIT_MS) */
	for (unsigned wait = 0;; wait++) {
		int closed = 0;
		for (uint32_t i = 0; i < count; i++) {
			amp_ring_hdr *h = (amp_ring_hdr *)((unsigned char *)s + s->ring_offset +
			                                   (uint64_t)i * s->ring_stride);
			uint32_t st = __atomic_load_n(&h->state, __ATOMIC_RELAXED), want = st;
			if (st == AMP_RING_REUSABLE &&
			    __atomic_compare_exchange_n(&h->state, &want, AMP_RING_CLAIMING, 0,
			                                __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
				return i;
			/* a ring whose process is gone (killed) is reclaimed as well */
			closed |= st == AMP_RING_CLOSED ||
			          (st == AMP_RING_OPEN && h->pid != 0 && kill((pid_t)h->pid, 0) != 0 &&
			           errno == ESRCH);
		}
		if (!closed || wait >= RING_CLAIM_WAIT_MS || !collector_alive())
			return -1;
		amp_trace_collector_wake();
		struct timespec ts = {0, 1000000};
		nanosleep(&ts, NULL);
	}
}

/* After a failed attach: a reusable ring claimed goes back (a fresh one is only marked
 * CLOSED, drained empty and then reclaimed by the collector); the thread counts as missing. */
static void ring_give_back(int64_t idx)
{
	if (idx >= 0) {
		amp_ring_hdr *h = (amp_ring_hdr *)((unsigned char *)amp_trace_sess +
		                                   amp_trace_sess->ring_offset +
		                                   (uint64_t)idx * amp_trace_sess->ring_stride);
		uint32_t want = AMP_RING_CLAIMING;
		if (!__atomic_compare_exchange_n(&h->state, &want, AMP_RING_REUSABLE, 0,
		                                 __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
			__atomic_store_n(&h->state, AMP_RING_CLOSED, __ATOMIC_RELEASE);
	}
	__atomic_add_fetch(&amp_trace_sess->rings_missing, 1, __ATOMIC_RELAXED);
	amp_trace_tl_no_ring = 1;
}

/* Claims a ring for this thread (first event of the thread).  NULL if none is left: the
 * thread is counted in rings_missing and never tries again. */
trace_ring *amp_trace_ring_attach(void)
{
	if (!amp_trace_sess || amp_trace_tl_no_ring || amp_trace_tl_in_signal)
		return NULL;
	int64_t idx = ring_claim();
	trace_ring *r = NULL;
	if (idx < 0 || !(r = calloc(1, sizeof *r))) {
		ring_give_back(idx);
		return NULL;
	}
	unsigned char *base = (unsigned char *)amp_trace_sess + amp_trace_sess->ring_offset +
	                      (uint64_t)idx * amp_trace_sess->ring_stride;
	r->hdr = (amp_ring_hdr *)base;
	r->slots = base + AMP_RING_HDR_SIZE;
	r->nslots = amp_trace_sess->ring_slots;
	r->mask = r->nslots - 1;
	r->reserve = amp_trace_drop_mode ? r->nslots / AMP_DROP_RESERVE_DIV : 0;
	r->head = r->published = r->tail_cache = __atomic_load_n(&r->hdr->tail, __ATOMIC_ACQUIRE);
	r->woke = r->head;
	ring_prefault(base, AMP_RING_HDR_SIZE + (uint64_t)r->nslots * AMP_SLOT_SIZE);

	pthread_attr_t attr;
	void *stack_addr = NULL;
	size_t stack_size = 0;
	if (pthread_getattr_np(pthread_self(), &attr) == 0) {
		pthread_attr_getstack(&attr, &stack_addr, &stack_size);
		pthread_attr_destroy(&attr);
	}
	r->stack_hi = (uintptr_t)stack_addr + stack_size;
	if (amp_trace_str_table_grow(r) != 0 || amp_trace_callsite_table_grow(r) != 0) {
		free(r->str_table);
		free(r->cs_keys);
		free(r->cs_ids);
		free(r);
		ring_give_back(idx);
		return NULL;
	}
	r->hdr->pid = (uint32_t)getpid();
	r->hdr->tid = (uint32_t)syscall(SYS_gettid);
	r->hdr->clock = amp_trace_use_tsc ? AMP_CLOCK_TSC : AMP_CLOCK_MONO;
	__atomic_store_n(&r->hdr->state, AMP_RING_OPEN, __ATOMIC_RELEASE);
	amp_trace_tl_ring = r;
	amp_trace_emit_clock(r);
	dl_iterate_phdr(amp_trace_module_cb, r);
	ring_publish(r);
	if (amp_trace_key_ok)
		pthread_setspecific(amp_trace_ring_key, r);
	stack_t cur;
	if (sigaltstack(NULL, &cur) == 0 && (cur.ss_flags & SS_DISABLE))
		ring_setup_altstack(r);
	return r;
}

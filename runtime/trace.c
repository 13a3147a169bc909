/* trace.c — the trace emitter: writes the runtime's events into a shared-memory ring per thread.
 *
 * A library constructor looks for $AMPPROF_SESSION (an inherited memfd laid out by ampprof, see
 * amp_events.h), maps it and turns tracing on.  Each producing thread claims its own ring and
 * is its only writer; strings and call sites are defined once per ring and referred to by id.
 * Timestamps are raw TSC ticks (CLOCK_MONOTONIC ns without an invariant TSC), calibrated by
 * AMP_REC_CLOCK records.  Nothing here does file I/O or symbolization on the hot path; the
 * fatal-signal handler uses only async-signal-safe code and libunwind's local unwinder.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* memfd_create, pipe2, dladdr1, sigabbrev_np */
#endif
#include "trace.h"

#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <linux/futex.h>
#include <unistd.h>

#define UNW_LOCAL_ONLY
#include <libunwind.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <x86intrin.h>
#define TRACE_HAVE_TSC 1
#else
#define TRACE_HAVE_TSC 0
#endif

int amp_trace_active;

#define TRACE_PUBLISH_EVERY 16u  /* records between head publications */
#define TRACE_WARM 24u           /* slots ahead of the head prefetched for writing */
#define TRACE_PCACHE 256u        /* direct-mapped label pointer cache */
#define TRACE_MAX_FRAMES 64      /* frame-pointer walk depth limit */
#define TRACE_ALTSTACK (64u * 1024u)

/* One thread's ring and its intern tables; allocated when the thread first emits. */
typedef struct trace_ring {
	amp_ring_hdr *hdr;
	unsigned char *slots;
	uint64_t nslots, mask;
	uint64_t head;           /* next position to write */
	uint64_t published;      /* last head stored into hdr->head */
	uint64_t tail_cache;     /* last tail read from hdr->tail */
	uint64_t woke;           /* head when the collector was last woken */
	uint64_t warm;           /* slots before this position were prefetched for writing */
	unsigned since_publish;
	int dead;                /* collector gone: drop everything */
	uintptr_t stack_hi;      /* top of this thread's stack (frame walk bound) */
	/* strings: id -> text, content hash table, pointer cache */
	uint32_t n_strings, cap_strings;
	char **texts;            /* texts[id], id >= 1 */
	uint32_t *str_table;     /* open addressing over ids, 0 = empty */
	uint32_t str_table_cap;
	struct {
		const char *ptr;
		uint32_t id;
	} pcache[TRACE_PCACHE];
	uint32_t op_ids[AMP_OP_COUNT]; /* string id of each op type's name, 0 = not sent yet */
	/* call sites: key (return address) -> id */
	uintptr_t *cs_keys;
	uint32_t *cs_ids;
	uint32_t cs_cap, n_callsites;
	/* modules already announced (by load bias) */
	uintptr_t *mod_bias;
	uint32_t n_mods, cap_mods;
	void *altstack;
} trace_ring;

static amp_session_hdr *g_sess;
static size_t g_sess_size;
static int g_use_tsc;
static uintptr_t g_rt_lo, g_rt_hi;   /* libamprt's executable text */
static amp_trace_config g_cfg;
static int g_callstack, g_drop;
static int g_nsteps;
static amp_step_range g_steps[AMP_MAX_RANGES];
static char g_spool[256];
static pthread_key_t g_ring_key;
static int g_key_ok;

static __thread trace_ring *tl_ring __attribute__((tls_model("initial-exec")));
static __thread int tl_no_ring __attribute__((tls_model("initial-exec")));
static __thread int tl_in_signal __attribute__((tls_model("initial-exec")));

/* ---- clock ------------------------------------------------------------------------------- */
static uint64_t mono_ns(clockid_t id)
{
	struct timespec ts;
	clock_gettime(id, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint64_t amp_trace_clock(void)
{
#if TRACE_HAVE_TSC
	if (__builtin_expect(g_use_tsc, 1))
		return __rdtsc();
#endif
	return mono_ns(CLOCK_MONOTONIC);
}

static int tsc_invariant(void)
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
static void collector_wake(void)
{
	__atomic_add_fetch(&g_sess->wake, 1, __ATOMIC_RELEASE);
	syscall(SYS_futex, &g_sess->wake, FUTEX_WAKE, 1, NULL, NULL, 0);
}

/* Publishes the head.  The collector polls at a pace set by how fast the rings filled so far;
 * a burst that takes the ring past half full wakes it at once (once per quarter ring), so the
 * producer rarely finds the ring full. */
static void ring_publish(trace_ring *r)
{
	__atomic_store_n(&r->hdr->head, r->head, __ATOMIC_RELEASE);
	r->published = r->head;
	r->since_publish = 0;
	r->tail_cache = __atomic_load_n(&r->hdr->tail, __ATOMIC_ACQUIRE);
	if (__builtin_expect(r->head - r->tail_cache > r->nslots / 2, 0) &&
	    r->head - r->woke > r->nslots / 4) {
		r->woke = r->head;
		collector_wake();
	}
}

static int collector_alive(void)
{
	pid_t pid = (pid_t)g_sess->collector_pid;
	return pid <= 0 || kill(pid, 0) == 0 || errno != ESRCH;
}

/* Waits until `need` slots are free.  Returns 0 when they are, -1 when the record must be
 * dropped (drop mode, dead collector, or a signal handler that may not wait long). */
static int ring_wait(trace_ring *r, uint64_t need)
{
	ring_publish(r);
	if (r->head + need - r->tail_cache > r->nslots)
		collector_wake();
	for (unsigned spin = 0;; spin++) {
		r->tail_cache = __atomic_load_n(&r->hdr->tail, __ATOMIC_ACQUIRE);
		if (r->head + need - r->tail_cache <= r->nslots)
			return 0;
		if (g_drop || r->dead || (tl_in_signal && spin > 2000))
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

/* Room for a record of n slots at the head, contiguous; NULL when it is dropped. */
static inline void *ring_reserve(trace_ring *r, unsigned n)
{
	uint64_t idx = r->head & r->mask;
	uint64_t pad = idx + n > r->nslots ? r->nslots - idx : 0;
	if (__builtin_expect(r->head + pad + n - r->tail_cache > r->nslots, 0)) {
		if (ring_wait(r, pad + n) != 0) {
			__atomic_add_fetch(&r->hdr->dropped, 1, __ATOMIC_RELAXED);
			return NULL;
		}
	}
	if (__builtin_expect(pad != 0, 0)) {
		amp_rec_hdr *ph = (amp_rec_hdr *)(r->slots + idx * AMP_SLOT_SIZE);
		ph->type = AMP_REC_PAD;
		ph->nslots = (uint8_t)pad;
		ph->len = 0;
		__atomic_signal_fence(__ATOMIC_RELEASE);
		ph->stamp = (uint32_t)r->head;
		r->head += pad;
		idx = 0;
	}
	return r->slots + idx * AMP_SLOT_SIZE;
}

/* Seals the record (stamp last) and advances the head; publishes every few records. */
static inline void ring_commit(trace_ring *r, void *rec, unsigned type, unsigned n, unsigned len)
{
	amp_rec_hdr *h = rec;
	h->type = (uint8_t)type;
	h->nslots = (uint8_t)n;
	h->len = (uint16_t)len;
	__atomic_signal_fence(__ATOMIC_RELEASE);
	h->stamp = (uint32_t)r->head;
	r->head += n;
	if (++r->since_publish >= TRACE_PUBLISH_EVERY)
		ring_publish(r);
	/* The next TRACE_WARM slots, for writing: an op's record is followed by its check's
	 * statistics records, and between ops the program streams megabytes, so a store into
	 * a slot not asked for early waits for its line (a microsecond here). */
	if (r->warm < r->head)
		r->warm = r->head;
	for (; r->warm < r->head + TRACE_WARM; r->warm++)
		__builtin_prefetch(r->slots + (r->warm & r->mask) * AMP_SLOT_SIZE, 1, 3);
}

static void emit_clock(trace_ring *r)
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

static int str_table_grow(trace_ring *r)
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
static uint32_t intern_content(trace_ring *r, const char *s)
{
	size_t n = strnlen(s, AMP_STRING_MAX);
	uint64_t h = str_hash(s, n);
	if (r->n_strings + 1 >= r->str_table_cap / 2 && str_table_grow(r) != 0)
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

/* Labels live in the step arena, so a pointer may come back with other content: the cache
 * hit is confirmed by comparing the text. */
static inline uint32_t intern(trace_ring *r, const char *s)
{
	if (!s)
		return 0;
	unsigned slot = (unsigned)(((uintptr_t)s >> 3) ^ ((uintptr_t)s >> 11)) & (TRACE_PCACHE - 1);
	uint32_t id = r->pcache[slot].id;
	if (r->pcache[slot].ptr == s && strcmp(s, r->texts[id]) == 0)
		return id;
	id = intern_content(r, s);
	if (id) {
		r->pcache[slot].ptr = s;
		r->pcache[slot].id = id;
	}
	return id;
}

/* String id of an op type's name (wire v2's op_name): name when given (an op outside
 * amp_op_type), else the runtime's name of op, sent once per ring.  0 on failure. */
static inline uint32_t op_name_id(trace_ring *r, int op, const char *name)
{
	if (name)
		return intern(r, name);
	if ((unsigned)op >= AMP_OP_COUNT)
		return 0;
	uint32_t id = r->op_ids[op];
	if (__builtin_expect(id == 0, 0))
		id = r->op_ids[op] = intern_content(r, amp_op_name((amp_op_type)op));
	return id;
}

/* ---- call sites -------------------------------------------------------------------------- */
struct extent_query {
	uintptr_t bias;
	uintptr_t lo, hi;
	int found;
};

static int extent_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
	struct extent_query *q = arg;
	(void)size;
	if (info->dlpi_addr != q->bias)
		return 0;
	uintptr_t lo = UINTPTR_MAX, hi = 0;
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		if (ph->p_type != PT_LOAD)
			continue;
		uintptr_t a = info->dlpi_addr + ph->p_vaddr;
		if (a < lo)
			lo = a;
		if (a + ph->p_memsz > hi)
			hi = a + ph->p_memsz;
	}
	if (hi == 0)
		return 0;
	q->lo = lo;
	q->hi = hi;
	q->found = 1;
	return 1;
}

/* Load bias and path of the object holding addr; 0 if unknown. */
static int module_of(uintptr_t addr, uintptr_t *bias, const char **path)
{
	Dl_info info;
	struct link_map *lm = NULL;
	if (!dladdr1((void *)addr, &info, (void **)&lm, RTLD_DL_LINKMAP) || !lm)
		return 0;
	*bias = lm->l_addr;
	*path = lm->l_name && lm->l_name[0] ? lm->l_name : NULL;
	return 1;
}

static char g_exe_path[512];

static uint32_t announce_module(trace_ring *r, uintptr_t bias, const char *path)
{
	for (uint32_t i = 0; i < r->n_mods; i++)
		if (r->mod_bias[i] == bias)
			goto named;
	if (r->n_mods == r->cap_mods) {
		uint32_t nc = r->cap_mods ? r->cap_mods * 2 : 16;
		uintptr_t *nb = realloc(r->mod_bias, nc * sizeof *nb);
		if (!nb)
			return 0;
		r->mod_bias = nb;
		r->cap_mods = nc;
	}
	r->mod_bias[r->n_mods++] = bias;
	struct extent_query q = {bias, 0, 0, 0};
	dl_iterate_phdr(extent_cb, &q);
	uint32_t pid = intern_content(r, path ? path : g_exe_path);
	amp_rec_module *m = ring_reserve(r, 1);
	if (m) {
		m->bias = bias;
		m->lo = q.lo;
		m->hi = q.hi;
		m->path = pid;
		m->pad = 0;
		ring_commit(r, m, AMP_REC_MODULE, 1, 0);
	}
	return pid;
named:
	return intern_content(r, path ? path : g_exe_path);
}

static int module_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
	trace_ring *r = arg;
	(void)size;
	const char *name = info->dlpi_name && info->dlpi_name[0] ? info->dlpi_name : NULL;
	if (name && (strncmp(name, "linux-vdso", 10) == 0 || strncmp(name, "linux-gate", 10) == 0))
		return 0;
	announce_module(r, info->dlpi_addr, name);
	return 0;
}

/* Defines a call site (cold: once per distinct key per ring). */
static uint32_t callsite_define(trace_ring *r, uintptr_t key, uintptr_t fp, uint32_t slot)
{
	amp_rec_callsite cs;
	memset(&cs, 0, sizeof cs);
	unsigned n = 0;
	cs.frames[n++] = key;
	/* callers of the key frame: fp is the frame whose return address is key */
	for (uintptr_t f = fp; n < AMP_CALLSITE_FRAMES;) {
		uintptr_t next = ((const uintptr_t *)f)[0];
		if (next <= f || next + 16 > r->stack_hi || (next & 7))
			break;
		uintptr_t ret = ((const uintptr_t *)next)[1];
		if (ret < 4096)
			break;
		cs.frames[n++] = ret;
		f = next;
	}
	for (unsigned i = 0; i < n; i++) {
		uintptr_t bias = 0;
		const char *path = NULL;
		if (module_of(cs.frames[i], &bias, &path)) {
			cs.biases[i] = bias;
			cs.paths[i] = announce_module(r, bias, path);
		}
	}
	uint32_t id = ++r->n_callsites;
	cs.id = id;
	cs.nframes = n;
	unsigned slots = AMP_REC_SLOTS(amp_rec_callsite);
	void *rec = ring_reserve(r, slots);
	if (rec) {
		memcpy((char *)rec + sizeof(amp_rec_hdr), (char *)&cs + sizeof(amp_rec_hdr),
		       sizeof cs - sizeof(amp_rec_hdr));
		ring_commit(r, rec, AMP_REC_CALLSITE, slots, 0);
	}
	r->cs_keys[slot] = key;
	r->cs_ids[slot] = id;
	return id;
}

static int callsite_table_grow(trace_ring *r)
{
	uint32_t cap = r->cs_cap ? r->cs_cap * 2 : 256;
	uintptr_t *keys = calloc(cap, sizeof *keys);
	uint32_t *ids = calloc(cap, sizeof *ids);
	if (!keys || !ids) {
		free(keys);
		free(ids);
		return -1;
	}
	for (uint32_t i = 0; i < r->cs_cap; i++) {
		if (!r->cs_keys[i])
			continue;
		uint32_t j = (uint32_t)((r->cs_keys[i] * 0x9E3779B97F4A7C15ull) >> 40) & (cap - 1);
		while (keys[j])
			j = (j + 1) & (cap - 1);
		keys[j] = r->cs_keys[i];
		ids[j] = r->cs_ids[i];
	}
	free(r->cs_keys);
	free(r->cs_ids);
	r->cs_keys = keys;
	r->cs_ids = ids;
	r->cs_cap = cap;
	return 0;
}

/* Walks frame pointers from the emitter's frame to the first return address outside
 * libamprt's text.  Every frame pointer is checked against the stack bounds and alignment
 * before it is read, so a frame without a frame pointer ends the walk instead of faulting. */
static inline uint32_t callsite_capture(trace_ring *r, uintptr_t fp)
{
	if (!g_callstack)
		return 0;
	uintptr_t lo = fp;
	for (int depth = 0; depth < TRACE_MAX_FRAMES; depth++) {
		if (fp < lo || fp + 16 > r->stack_hi || (fp & 7))
			return 0;
		uintptr_t ret = ((const uintptr_t *)fp)[1];
		if (ret < g_rt_lo || ret >= g_rt_hi) {
			if (ret < 4096)
				return 0;
			if (r->n_callsites + 1 >= r->cs_cap / 2 && callsite_table_grow(r) != 0)
				return 0;
			uint32_t j = (uint32_t)((ret * 0x9E3779B97F4A7C15ull) >> 40) & (r->cs_cap - 1);
			for (;;) {
				if (r->cs_keys[j] == ret)
					return r->cs_ids[j];
				if (!r->cs_keys[j])
					return callsite_define(r, ret, fp, j);
				j = (j + 1) & (r->cs_cap - 1);
			}
		}
		uintptr_t next = ((const uintptr_t *)fp)[0];
		if (next <= fp)
			return 0;
		fp = next;
	}
	return 0;
}

/* ---- rings ------------------------------------------------------------------------------- */
static void ring_close(trace_ring *r)
{
	ring_publish(r);
	__atomic_store_n(&r->hdr->state, AMP_RING_CLOSED, __ATOMIC_RELEASE);
}

static void ring_key_destructor(void *arg)
{
	trace_ring *r = arg;
	if (r && tl_ring == r) {
		ring_close(r);
		tl_ring = NULL;
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

/* Claims a ring for this thread (first event of the thread).  NULL if none is left. */
static trace_ring *ring_attach_thread(void)
{
	if (!g_sess || tl_no_ring || tl_in_signal)
		return NULL;
	uint32_t idx = __atomic_fetch_add(&g_sess->rings_claimed, 1, __ATOMIC_ACQ_REL);
	trace_ring *r = NULL;
	if (idx >= g_sess->ring_count || !(r = calloc(1, sizeof *r))) {
		__atomic_add_fetch(&g_sess->rings_missing, 1, __ATOMIC_RELAXED);
		tl_no_ring = 1;
		return NULL;
	}
	unsigned char *base = (unsigned char *)g_sess + g_sess->ring_offset +
	                      (uint64_t)idx * g_sess->ring_stride;
	r->hdr = (amp_ring_hdr *)base;
	r->slots = base + AMP_RING_HDR_SIZE;
	r->nslots = g_sess->ring_slots;
	r->mask = r->nslots - 1;
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
	if (str_table_grow(r) != 0 || callsite_table_grow(r) != 0) {
		free(r->str_table);
		free(r->cs_keys);
		free(r->cs_ids);
		free(r);
		tl_no_ring = 1;
		return NULL;
	}
	r->hdr->pid = (uint32_t)getpid();
	r->hdr->tid = (uint32_t)syscall(SYS_gettid);
	r->hdr->clock = g_use_tsc ? AMP_CLOCK_TSC : AMP_CLOCK_MONO;
	__atomic_store_n(&r->hdr->state, AMP_RING_OPEN, __ATOMIC_RELEASE);
	tl_ring = r;
	emit_clock(r);
	dl_iterate_phdr(module_cb, r);
	ring_publish(r);
	if (g_key_ok)
		pthread_setspecific(g_ring_key, r);
	stack_t cur;
	if (sigaltstack(NULL, &cur) == 0 && (cur.ss_flags & SS_DISABLE))
		ring_setup_altstack(r);
	return r;
}

static inline trace_ring *ring_get(void)
{
	trace_ring *r = tl_ring;
	if (__builtin_expect(r != NULL, 1))
		return r;
	return ring_attach_thread();
}

static inline int step_detailed(int64_t step)
{
	if (__builtin_expect(g_nsteps == 0, 1))
		return 1;
	for (int i = 0; i < g_nsteps; i++)
		if (step >= g_steps[i].lo && step <= g_steps[i].hi)
			return 1;
	return 0;
}

/* ---- events ------------------------------------------------------------------------------ */
/* Op and dump records: the first ndim dims of shape, zeros after; returns ndim clamped to
 * [0, 4].  Inlined: the same stores and selects as written out, no extra branch. */
static inline uint8_t pack_shape(int64_t out[4], const int64_t shape[4], int ndim)
{
	for (int i = 0; i < 4; i++)
		out[i] = i < ndim ? shape[i] : 0;
	return (uint8_t)(ndim < 0 ? 0 : ndim > 4 ? 4 : ndim);
}

void amp_trace_op_end(const amp_trace_op *op)
{
	uint64_t t_end = amp_trace_clock();
	trace_ring *r = ring_get();
	if (!r || !step_detailed(op->step))
		return;
	uint32_t cs = callsite_capture(r, (uintptr_t)__builtin_frame_address(0));
	uint32_t label = intern(r, op->label);
	uint32_t op_name = op_name_id(r, op->op, op->op_name);
	amp_rec_op *rec = ring_reserve(r, 2);
	if (!rec)
		return;
	rec->t_begin = op->t_begin;
	rec->t_end = t_end;
	rec->step = op->step;
	rec->seq = op->seq;
	rec->flops = op->flops;
	rec->bytes = op->bytes;
	rec->ndim = pack_shape(rec->shape, op->shape, op->ndim);
	rec->label = label;
	rec->callsite = cs;
	rec->op = (uint8_t)(op->op_name ? AMP_OP_BY_NAME : op->op);
	rec->op_name = op_name;
	rec->phase = (uint8_t)op->phase;
	rec->exec_dtype = (uint8_t)op->exec_dtype;
	rec->in_dtype = (uint8_t)op->in_dtype;
	rec->out_dtype = (uint8_t)op->out_dtype;
	rec->aligned = (uint8_t)(op->aligned != 0);
	rec->engine = (uint8_t)op->engine;
	ring_commit(r, rec, AMP_REC_OP, 2, 0);
}

void amp_trace_copy(amp_copy_kind kind, uint64_t bytes, int src_dtype, int dst_dtype,
                    uint64_t t_begin, int64_t step, const char *label)
{
	uint64_t t_end = amp_trace_clock();
	trace_ring *r = ring_get();
	if (!r || !step_detailed(step))
		return;
	uint32_t cs = callsite_capture(r, (uintptr_t)__builtin_frame_address(0));
	uint32_t lid = intern(r, label);
	amp_rec_copy *rec = ring_reserve(r, 1);
	if (!rec)
		return;
	rec->t_begin = t_begin;
	rec->t_end = t_end;
	rec->step = step;
	rec->bytes = bytes;
	rec->label = lid;
	rec->callsite = cs;
	rec->kind = (uint8_t)kind;
	rec->src_dtype = (uint8_t)src_dtype;
	rec->dst_dtype = (uint8_t)dst_dtype;
	memset(rec->pad, 0, sizeof rec->pad);
	ring_commit(r, rec, AMP_REC_COPY, 1, 0);
}

void amp_trace_step_begin(int64_t step)
{
	uint64_t t = amp_trace_clock();
	trace_ring *r = ring_get();
	if (!r)
		return;
	amp_rec_step *rec = ring_reserve(r, 1);
	if (!rec)
		return;
	memset((char *)rec + sizeof rec->h, 0, sizeof *rec - sizeof rec->h);
	rec->step = step;
	rec->t_begin = t;
	ring_commit(r, rec, AMP_REC_STEP_BEGIN, 1, 0);
}

void amp_trace_step_end(int64_t step, uint64_t t_begin, double loss, double scale, int overflow,
                        int skipped, int64_t samples)
{
	uint64_t t = amp_trace_clock();
	trace_ring *r = ring_get();
	if (!r)
		return;
	amp_rec_step *rec = ring_reserve(r, 1);
	if (!rec)
		return;
	rec->step = step;
	rec->t_begin = t_begin;
	rec->t_end = t;
	rec->loss = loss;
	rec->scale = scale;
	rec->samples = samples;
	rec->overflow = (uint8_t)(overflow != 0);
	rec->skipped = (uint8_t)(skipped != 0);
	memset(rec->pad, 0, sizeof rec->pad);
	ring_commit(r, rec, AMP_REC_STEP_END, 1, 0);
	emit_clock(r);
	ring_publish(r);
}

void amp_trace_scale(int64_t step, double old_scale, double new_scale, amp_scale_reason reason)
{
	trace_ring *r = ring_get();
	if (!r)
		return;
	amp_rec_scale *rec = ring_reserve(r, 1);
	if (!rec)
		return;
	rec->step = step;
	rec->t = amp_trace_clock();
	rec->old_scale = old_scale;
	rec->new_scale = new_scale;
	rec->reason = (uint32_t)reason;
	rec->pad = 0;
	ring_commit(r, rec, AMP_REC_SCALE, 1, 0);
}

void amp_trace_memory(int64_t step, const uint64_t bytes[AMP_MEM_NCAT], uint64_t peak)
{
	trace_ring *r = ring_get();
	if (!r)
		return;
	amp_rec_memory *rec = ring_reserve(r, AMP_REC_SLOTS(amp_rec_memory));
	if (!rec)
		return;
	rec->step = step;
	rec->t = amp_trace_clock();
	memcpy(rec->bytes, bytes, sizeof rec->bytes);
	rec->peak = peak;
	ring_commit(r, rec, AMP_REC_MEMORY, AMP_REC_SLOTS(amp_rec_memory), 0);
}

void amp_trace_meta(const char *key, const char *value)
{
	trace_ring *r = ring_get();
	if (!r || !key)
		return;
	if (!value)
		value = "";
	size_t room = AMP_REC_MAX_SLOTS * AMP_SLOT_SIZE - AMP_REC_META_FIXED;
	size_t kl = strnlen(key, 255), vl = strnlen(value, room - kl);
	unsigned slots = (unsigned)((AMP_REC_META_FIXED + kl + vl + AMP_SLOT_SIZE - 1) / AMP_SLOT_SIZE);
	amp_rec_meta *rec = ring_reserve(r, slots);
	if (!rec)
		return;
	rec->klen = (uint16_t)kl;
	rec->vlen = (uint16_t)vl;
	rec->pad = 0;
	memcpy((char *)rec + AMP_REC_META_FIXED, key, kl);
	memcpy((char *)rec + AMP_REC_META_FIXED + kl, value, vl);
	ring_commit(r, rec, AMP_REC_META, slots, (unsigned)(kl + vl));
	ring_publish(r);
}

static void counter_emit(const char *name, int64_t value, uint32_t scope)
{
	trace_ring *r = ring_get();
	if (!r || !name)
		return;
	uint32_t id = intern_content(r, name);
	amp_rec_counter *rec = ring_reserve(r, 1);
	if (!rec)
		return;
	rec->name = id;
	rec->scope = scope;
	rec->value = value;
	rec->t = amp_trace_clock();
	ring_commit(r, rec, AMP_REC_COUNTER, 1, 0);
	ring_publish(r);
}

void amp_trace_counter(const char *name, int64_t value)
{
	counter_emit(name, value, AMP_COUNTER_RING);
}

void amp_trace_counter_process(const char *name, int64_t value)
{
	counter_emit(name, value, AMP_COUNTER_PROCESS);
}

void amp_trace_flush(void)
{
	trace_ring *r = tl_ring;
	if (r)
		ring_publish(r);
}

void amp_trace_tensor_stats(const amp_trace_tstats *st)
{
	trace_ring *r = ring_get();
	if (!r || !st)
		return;
	uint32_t name = intern(r, st->name);
	uint32_t op_name = op_name_id(r, st->op, NULL);
	unsigned slots = AMP_REC_SLOTS(amp_rec_tstats);
	amp_rec_tstats *rec = ring_reserve(r, slots);
	if (!rec)
		return;
	memset((char *)rec + sizeof rec->h, 0, sizeof *rec - sizeof rec->h);
	rec->step = st->step;
	rec->seq = st->seq;
	rec->count = st->count;
	rec->nan = st->nan;
	rec->inf = st->inf;
	rec->ninf = st->ninf <= st->inf ? st->ninf : st->inf;
	rec->underflow = st->underflow;
	rec->near_overflow = st->near_overflow;
	rec->min = st->min;
	rec->max = st->max;
	rec->absmax = st->absmax;
	rec->name = name;
	rec->callsite = callsite_capture(r, (uintptr_t)__builtin_frame_address(0));
	rec->op = (uint8_t)st->op;
	rec->op_name = op_name;
	rec->role = (uint8_t)st->role;
	rec->dtype = (uint8_t)st->dtype;
	rec->origin = (uint8_t)(st->origin != 0);
	rec->phase = (uint8_t)(st->phase <= AMP_PHASE_OPTIMIZER ? st->phase : AMP_PHASE_FORWARD);
	rec->flags = AMP_TSTATS_EXT;
	memcpy(rec->exp_hist, st->exp_hist, sizeof rec->exp_hist);
	ring_commit(r, rec, AMP_REC_TSTATS, slots, 0);
}

void amp_trace_dump(const amp_trace_dump_ref *d)
{
	trace_ring *r = ring_get();
	if (!r || !d)
		return;
	uint32_t file = intern_content(r, d->file ? d->file : "");
	uint32_t name = intern(r, d->name);
	uint32_t op_name = op_name_id(r, d->op, NULL);
	unsigned slots = AMP_REC_SLOTS(amp_rec_dump);
	amp_rec_dump *rec = ring_reserve(r, slots);
	if (!rec)
		return;
	memset((char *)rec + sizeof rec->h, 0, sizeof *rec - sizeof rec->h);
	rec->step = d->step;
	rec->seq = d->seq;
	rec->bytes = d->bytes;
	rec->ndim = pack_shape(rec->shape, d->shape, d->ndim);
	rec->file = file;
	rec->name = name;
	rec->op = (uint8_t)d->op;
	rec->op_name = op_name;
	rec->role = (uint8_t)d->role;
	rec->dtype = (uint8_t)d->dtype;
	rec->reason = (uint8_t)d->reason;
	ring_commit(r, rec, AMP_REC_DUMP, slots, 0);
	ring_publish(r);
}

const amp_trace_config *amp_trace_session_config(void)
{
	return g_sess ? &g_cfg : NULL;
}

int amp_trace_dump_step(int64_t step)
{
	for (int i = 0; i < g_cfg.n_dump_steps; i++)
		if (step >= g_cfg.dump_steps[i].lo && step <= g_cfg.dump_steps[i].hi)
			return 1;
	return 0;
}

/* ---- crash handler ----------------------------------------------------------------------- */
static const int g_fatal_signals[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
#define N_FATAL ((int)(sizeof g_fatal_signals / sizeof g_fatal_signals[0]))

/* Async-signal-safe: plain stores into the mapped ring, libunwind's local unwinder, sigaction
 * and raise.  The record is written only by the thread that owns the ring. */
static void trace_on_fatal(int signo, siginfo_t *si, void *uctx)
{
	int saved_errno = errno;
	(void)uctx;
	trace_ring *r = tl_ring;
	if (r && !tl_in_signal) {
		tl_in_signal = 1;
		unsigned slots = AMP_REC_SLOTS(amp_rec_crash);
		amp_rec_crash *rec = ring_reserve(r, slots);
		if (rec) {
			void *frames[AMP_CRASH_FRAMES];
			int n = unw_backtrace(frames, AMP_CRASH_FRAMES);
			if (n < 0)
				n = 0;
			rec->signo = signo;
			rec->code = si ? si->si_code : 0;
			rec->addr = si ? (uint64_t)(uintptr_t)si->si_addr : 0;
			rec->t = amp_trace_clock();
			rec->nframes = (uint32_t)n;
			rec->pad = 0;
			for (int i = 0; i < AMP_CRASH_FRAMES; i++)
				rec->frames[i] = i < n ? (uint64_t)(uintptr_t)frames[i] : 0;
			ring_commit(r, rec, AMP_REC_CRASH, slots, 0);
		}
		ring_close(r);
	}
	struct sigaction dfl;
	memset(&dfl, 0, sizeof dfl);
	dfl.sa_handler = SIG_DFL;
	sigemptyset(&dfl.sa_mask);
	sigaction(signo, &dfl, NULL);
	errno = saved_errno;
	raise(signo);
}

static void install_fatal_handlers(void)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_sigaction = trace_on_fatal;
	sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
	sigemptyset(&sa.sa_mask);
	for (int i = 0; i < N_FATAL; i++) {
		struct sigaction old;
		/* leave a handler the program installed before us alone */
		if (sigaction(g_fatal_signals[i], NULL, &old) == 0 && old.sa_handler != SIG_DFL)
			continue;
		sigaction(g_fatal_signals[i], &sa, NULL);
	}
}

/* ---- session ----------------------------------------------------------------------------- */
static void trace_at_fork_child(void)
{
	/* the parent's ring stays the parent's; the child claims its own on first event */
	tl_ring = NULL;
	tl_no_ring = 0;
}

static void trace_at_exit(void)
{
	trace_ring *r = tl_ring;
	if (r)
		ring_close(r);
}

static int session_valid(const amp_session_hdr *s, size_t size)
{
	if (size < AMP_SESSION_HDR_SIZE || s->magic != AMP_SESSION_MAGIC ||
	    s->version != AMP_WIRE_VERSION || s->hdr_size != AMP_SESSION_HDR_SIZE ||
	    s->total_size != size)
		return 0;
	if (s->ring_slots < 64 || (s->ring_slots & (s->ring_slots - 1)) || s->ring_count == 0)
		return 0;
	if (s->ring_stride < AMP_RING_HDR_SIZE + (uint64_t)s->ring_slots * AMP_SLOT_SIZE ||
	    s->ring_offset < AMP_SESSION_HDR_SIZE ||
	    s->ring_offset + (uint64_t)s->ring_count * s->ring_stride > size)
		return 0;
	return s->n_steps <= AMP_MAX_RANGES && s->n_dump_steps <= AMP_MAX_RANGES;
}

__attribute__((constructor)) static void trace_attach(void)
{
	const char *env = getenv(AMP_SESSION_ENV);
	if (!env || !*env)
		return;
	char *end;
	long fd = strtol(env, &end, 10);
	struct stat st;
	if (*end || fd < 0 || fd > 1 << 20 || fstat((int)fd, &st) != 0 || st.st_size <= 0)
		return;
	void *map = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, (int)fd, 0);
	if (map == MAP_FAILED)
		return;
	/* say which wire version this library speaks, so that a collector of another version can
	 * name both instead of reporting a run that sent nothing */
	amp_session_hdr *hdr = map;
	if ((size_t)st.st_size >= AMP_SESSION_HDR_SIZE && hdr->magic == AMP_SESSION_MAGIC)
		__atomic_store_n(&hdr->producer_wire, AMP_WIRE_VERSION, __ATOMIC_RELEASE);
	if (!session_valid(map, (size_t)st.st_size)) {
		munmap(map, (size_t)st.st_size);
		return;
	}
	g_sess = map;
	g_sess_size = (size_t)st.st_size;
	g_use_tsc = tsc_invariant();
	g_callstack = (g_sess->flags & AMP_SESS_CALLSTACK) != 0;
	g_drop = (g_sess->flags & AMP_SESS_DROP) != 0;
	g_nsteps = (int)g_sess->n_steps;
	memcpy(g_steps, g_sess->steps, sizeof g_steps);
	memcpy(g_spool, g_sess->spool_dir, sizeof g_spool);
	g_spool[sizeof g_spool - 1] = '\0';
	g_cfg.nan_check = (int)g_sess->nan_check;
	g_cfg.dump = (int)g_sess->dump;
	g_cfg.dump_limit = g_sess->dump_limit;
	g_cfg.n_dump_steps = (int)g_sess->n_dump_steps;
	g_cfg.dump_steps = g_sess->dump_steps;
	g_cfg.spool_dir = g_spool;
	g_cfg.callstack = g_callstack;

	ssize_t n = readlink("/proc/self/exe", g_exe_path, sizeof g_exe_path - 1);
	g_exe_path[n > 0 ? n : 0] = '\0';
	uintptr_t bias;
	const char *path;
	if (module_of((uintptr_t)&amp_trace_op_end, &bias, &path)) {
		struct extent_query q = {bias, 0, 0, 0};
		dl_iterate_phdr(extent_cb, &q);
		if (q.found) {
			g_rt_lo = q.lo;
			g_rt_hi = q.hi;
		}
	}
	g_key_ok = pthread_key_create(&g_ring_key, ring_key_destructor) == 0;
	pthread_atfork(NULL, NULL, trace_at_fork_child);
	atexit(trace_at_exit);
	install_fatal_handlers();
	__atomic_add_fetch(&g_sess->attached, 1, __ATOMIC_ACQ_REL);
	amp_trace_active = 1;
}

/* trace_int.h — the trace emitter's insides, shared by its files: the per-thread ring and its
 * hot path (reserve, commit, interning, call-site capture: inline, so an op event costs no
 * call beyond the clock), the session's globals and the functions behind the slow paths.
 *   trace.c          the events (amp_trace_op_end, ..., the public API of trace.h)
 *   trace_ring.c     the clock, ring writing and waiting, strings, claiming a thread's ring
 *   trace_callsite.c modules and call sites (frame-pointer walk, module records)
 *   trace_crash.c    the fatal-signal handler
 *   trace_session.c  attaching to ampprof's session (the library constructor)
 * Everything here is hidden in libamprt.so; nothing but trace.h is an interface.
 */
#ifndef AMP_TRACE_INT_H
#define AMP_TRACE_INT_H

#include <limits.h>
#include <link.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "trace.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <x86intrin.h>
#define TRACE_HAVE_TSC 1
#else
#define TRACE_HAVE_TSC 0
#endif

#define TRACE_HIDDEN __attribute__((visibility("hidden")))

#define TRACE_PUBLISH_EVERY 16u  /* records between head publications */
#define TRACE_WARM 24u           /* slots ahead of the head prefetched for writing */
#define TRACE_PCACHE 256u        /* direct-mapped label pointer cache (the slot: the top 8 bits of a
                                  * multiplicative hash) */
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
	uint64_t reserve;        /* drop mode: slots event records leave free (0 otherwise) */
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
	uint32_t cs_cap, n_callsites; /* n_callsites: the last id given */
	uint32_t cs_live;             /* keys in the table */
	/* modules already announced (by load bias) */
	uintptr_t *mod_bias;
	uint32_t n_mods, cap_mods;
	/* the loader's load and unload counts when the two tables above were last valid: an
	 * object unloaded and another loaded at its addresses make both stale */
	unsigned long long dl_adds, dl_subs;
	void *altstack;
} trace_ring;

/* ---- the session's globals (trace_session.c) and this thread's ring (trace_ring.c) -------- */
extern TRACE_HIDDEN amp_session_hdr *amp_trace_sess;
extern TRACE_HIDDEN size_t amp_trace_sess_size;
extern TRACE_HIDDEN uintptr_t amp_trace_rt_lo, amp_trace_rt_hi;
extern TRACE_HIDDEN amp_trace_config amp_trace_cfg;
extern TRACE_HIDDEN int amp_trace_callstack_on, amp_trace_drop_mode;
extern TRACE_HIDDEN int amp_trace_nsteps;
extern TRACE_HIDDEN amp_step_range amp_trace_steps[AMP_MAX_RANGES];
extern TRACE_HIDDEN char amp_trace_spool[256];
extern TRACE_HIDDEN pthread_key_t amp_trace_ring_key;
extern TRACE_HIDDEN int amp_trace_key_ok;
extern TRACE_HIDDEN char amp_trace_exe_path[PATH_MAX]; /* /proc/self/exe (trace_callsite.c) */
extern __thread trace_ring *amp_trace_tl_ring TRACE_HIDDEN
    __attribute__((tls_model("initial-exec")));
extern __thread int amp_trace_tl_no_ring TRACE_HIDDEN __attribute__((tls_model("initial-exec")));
extern __thread int amp_trace_tl_in_signal TRACE_HIDDEN __attribute__((tls_model("initial-exec")));
/* This thread's last value of each lost counter (amp_session_hdr.lost), when it has no ring. */
extern __thread int64_t amp_trace_tl_lost[AMP_LOST_COUNTERS] TRACE_HIDDEN
    __attribute__((tls_model("initial-exec")));

/* A query of dl_iterate_phdr for the extent of the object loaded at bias. */
struct extent_query {
	uintptr_t bias;
	uintptr_t lo, hi;
	int found;
};

/* ---- slow paths ------------------------------------------------------------------------------ */
TRACE_HIDDEN int amp_trace_tsc_invariant(void);
TRACE_HIDDEN void amp_trace_collector_wake(void);
TRACE_HIDDEN int amp_trace_ring_wait(trace_ring *r, uint64_t need, int kind);
/* A ring-scoped counter of a thread that has no ring, added to the session's lost counters. */
TRACE_HIDDEN void amp_trace_lost_counter(const char *name, int64_t value);
TRACE_HIDDEN void amp_trace_emit_clock(trace_ring *r);
TRACE_HIDDEN int amp_trace_str_table_grow(trace_ring *r);
TRACE_HIDDEN uint32_t amp_trace_intern_content(trace_ring *r, const char *s);
TRACE_HIDDEN int amp_trace_extent_cb(struct dl_phdr_info *info, size_t size, void *arg);
TRACE_HIDDEN int amp_trace_module_of(uintptr_t addr, uintptr_t *bias, const char **path);
TRACE_HIDDEN int amp_trace_module_cb(struct dl_phdr_info *info, size_t size, void *arg);
TRACE_HIDDEN uint32_t amp_trace_callsite_define(trace_ring *r, uintptr_t key, uintptr_t fp,
                                               uint32_t slot);
TRACE_HIDDEN int amp_trace_callsite_table_grow(trace_ring *r);
/* Forgets r's call sites and modules when an object was unloaded since the last call (their
 * addresses may hold another object now).  Once a step. */
TRACE_HIDDEN void amp_trace_callsites_check(trace_ring *r);
TRACE_HIDDEN void amp_trace_ring_close(trace_ring *r);
/* Frees a thread's ring state once its ring is closed (the ring itself is the collector's to
 * reclaim); the alternate signal stack goes with it, unregistered first. */
TRACE_HIDDEN void amp_trace_ring_free(trace_ring *r);
TRACE_HIDDEN void amp_trace_ring_key_destructor(void *arg);
TRACE_HIDDEN trace_ring *amp_trace_ring_attach(void);
TRACE_HIDDEN void amp_trace_install_fatal_handlers(void);

/* ---- the hot path ---------------------------------------------------------------------------- */
/* Publishes the head.  The collector polls at a pace set by how fast the rings filled so far;
 * a burst that takes the ring past half full wakes it at once (once per quarter ring), so the
 * producer rarely finds the ring full. */
static inline void ring_publish(trace_ring *r)
{
	__atomic_store_n(&r->hdr->head, r->head, __ATOMIC_RELEASE);
	r->published = r->head;
	r->since_publish = 0;
	r->tail_cache = __atomic_load_n(&r->hdr->tail, __ATOMIC_ACQUIRE);
	if (__builtin_expect(r->head - r->tail_cache > r->nslots / 2, 0) &&
	    r->head - r->woke > r->nslots / 4) {
		r->woke = r->head;
		amp_trace_collector_wake();
	}
}

/* Room for a record of n slots at the head, contiguous; NULL when it is dropped (counted).
 * kind: the amp_drop_kind of an event record, which drop mode drops rather than let it into
 * the ring's reserve (r->reserve slots kept free); or -1 for a definition or boundary (string,
 * call site, module, clock, step, scale, meta, counter, crash), which may use the reserve and
 * which drop mode never drops: it waits as outside drop mode (only a dead collector, or a
 * signal handler that may not wait, drops it).  kind is a constant at every call site. */
static inline void *ring_reserve_kind(trace_ring *r, unsigned n, int kind)
{
	uint64_t idx = r->head & r->mask;
	uint64_t pad = idx + n > r->nslots ? r->nslots - idx : 0;
	uint64_t keep = kind >= 0 ? r->reserve : 0;
	if (__builtin_expect(r->head + pad + n + keep - r->tail_cache > r->nslots, 0)) {
		if (amp_trace_ring_wait(r, pad + n, kind) != 0) {
			__atomic_add_fetch(&r->hdr->dropped, 1, __ATOMIC_RELAXED);
			__atomic_add_fetch(&r->hdr->dropped_kind[kind >= 0 ? kind : AMP_DROP_OTHER], 1,
			                   __ATOMIC_RELAXED);
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

/* A definition or boundary record: never dropped by drop mode (see ring_reserve_kind). */
static inline void *ring_reserve(trace_ring *r, unsigned n)
{
	return ring_reserve_kind(r, n, -1);
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

_Static_assert(TRACE_PCACHE == 256u, "intern's slot is 8 bits of the hash");

/* Labels live in the step arena, so a pointer may come back with other content: the cache
 * hit is confirmed by comparing the text. */
static inline uint32_t intern(trace_ring *r, const char *s)
{
	if (!s)
		return 0;
	/* every bit of the pointer counts: string literals sit a few bytes apart ("fc1", "fc2") */
	unsigned slot = (unsigned)(((uint64_t)(uintptr_t)s * 0x9e3779b97f4a7c15ull) >> 56) &
	                (TRACE_PCACHE - 1);
	uint32_t id = r->pcache[slot].id;
	if (r->pcache[slot].ptr == s) {
		/* inline: a label is a few bytes, and a call to strcmp cost more than comparing */
		const char *a = s, *b = r->texts[id];
		while (*a && *a == *b)
			a++, b++;
		if (*a == *b)
			return id;
	}
	id = amp_trace_intern_content(r, s);
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
		id = r->op_ids[op] = amp_trace_intern_content(r, amp_op_name((amp_op_type)op));
	return id;
}

/* Walks frame pointers from the emitter's frame to the first return address outside
 * libamprt's text.  Every frame pointer is checked against the stack bounds and alignment
 * before it is read, so a frame without a frame pointer ends the walk instead of faulting. */
static inline uint32_t callsite_capture(trace_ring *r, uintptr_t fp)
{
	if (!amp_trace_callstack_on)
		return 0;
	uintptr_t lo = fp;
	for (int depth = 0; depth < TRACE_MAX_FRAMES; depth++) {
		if (fp < lo || fp + 16 > r->stack_hi || (fp & 7))
			return 0;
		uintptr_t ret = ((const uintptr_t *)fp)[1];
		if (ret < amp_trace_rt_lo || ret >= amp_trace_rt_hi) {
			if (ret < 4096)
				return 0;
			if (r->cs_live + 1 >= r->cs_cap / 2 && amp_trace_callsite_table_grow(r) != 0)
				return 0;
			uint32_t j = (uint32_t)((ret * 0x9E3779B97F4A7C15ull) >> 40) & (r->cs_cap - 1);
			for (;;) {
				if (r->cs_keys[j] == ret)
					return r->cs_ids[j];
				if (!r->cs_keys[j])
					return amp_trace_callsite_define(r, ret, fp, j);
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

static inline trace_ring *ring_get(void)
{
	trace_ring *r = amp_trace_tl_ring;
	if (__builtin_expect(r != NULL, 1))
		return r;
	return amp_trace_ring_attach();
}

static inline int step_detailed(int64_t step)
{
	if (__builtin_expect(amp_trace_nsteps == 0, 1))
		return 1;
	for (int i = 0; i < amp_trace_nsteps; i++)
		if (step >= amp_trace_steps[i].lo && step <= amp_trace_steps[i].hi)
			return 1;
	return 0;
}

#endif

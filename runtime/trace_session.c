/* trace_session.c — attaching to ampprof's session: the library constructor finds
 * $AMPPROF_SESSION, validates and maps the memfd, reads its configuration and turns tracing on;
 * fork and exit handling.  Also the session's configuration as the runtime reads it.
 */
#include "trace_int.h"

#include <dlfcn.h>
#include <link.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

int amp_trace_active;
amp_session_hdr *amp_trace_sess;
size_t amp_trace_sess_size;
int amp_trace_use_tsc;
uintptr_t amp_trace_rt_lo, amp_trace_rt_hi;   /* libamprt's executable text */
amp_trace_config amp_trace_cfg;
int amp_trace_callstack_on, amp_trace_drop_mode;
int amp_trace_nsteps;
amp_step_range amp_trace_steps[AMP_MAX_RANGES];
char amp_trace_spool[256];
pthread_key_t amp_trace_ring_key;
int amp_trace_key_ok;

/* ---- session ----------------------------------------------------------------------------- */
static void trace_at_fork_child(void)
{
	/* the parent's ring stays the parent's; the child claims its own on first event, and the
	 * copy of the parent's ring state it inherited goes */
	trace_ring *inherited = amp_trace_tl_ring;
	amp_trace_tl_ring = NULL;
	amp_trace_tl_no_ring = 0;
	memset(amp_trace_tl_lost, 0, sizeof amp_trace_tl_lost);
	if (inherited) {
		if (amp_trace_key_ok)
			pthread_setspecific(amp_trace_ring_key, NULL);
		amp_trace_ring_free(inherited);
	}
}

static void trace_at_exit(void)
{
	trace_ring *r = amp_trace_tl_ring;
	if (r) {
		/* a closed ring may be given to another thread: nothing more is written into it */
		amp_trace_ring_close(r);
		amp_trace_tl_ring = NULL;
		amp_trace_tl_no_ring = 1;
		amp_trace_ring_free(r);
	}
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

/* Rings this process still holds open are its previous image's (it exec'd: no atexit ran, and
 * this image has claimed none yet, its constructors running first): they are closed, so that
 * the collector drains and reclaims them as a thread's that ended (a program that exec'd
 * itself 100 times took a ring each time and ran out of them). */
static void close_previous_image(amp_session_hdr *s)
{
	uint32_t self = (uint32_t)getpid();
	for (uint32_t i = 0; i < s->ring_count; i++) {
		amp_ring_hdr *h = (amp_ring_hdr *)((unsigned char *)s + s->ring_offset +
		                                   (uint64_t)i * s->ring_stride);
		if (__atomic_load_n(&h->state, __ATOMIC_ACQUIRE) == AMP_RING_OPEN && h->pid == self)
			__atomic_store_n(&h->state, AMP_RING_CLOSED, __ATOMIC_RELEASE);
	}
}

__attribute__((constructor)) static void trace_attach(void)
{
	/* not in a setuid or setgid program: a session (its spool directory) from whoever started
	 * it would have the program write as its owner */
	const char *env = secure_getenv(AMP_SESSION_ENV);
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
	amp_trace_sess = map;
	amp_trace_sess_size = (size_t)st.st_size;
	close_previous_image(amp_trace_sess);
	amp_trace_use_tsc = amp_trace_tsc_invariant();
	amp_trace_callstack_on = (amp_trace_sess->flags & AMP_SESS_CALLSTACK) != 0;
	amp_trace_drop_mode = (amp_trace_sess->flags & AMP_SESS_DROP) != 0;
	amp_trace_nsteps = (int)amp_trace_sess->n_steps;
	memcpy(amp_trace_steps, amp_trace_sess->steps, sizeof amp_trace_steps);
	memcpy(amp_trace_spool, amp_trace_sess->spool_dir, sizeof amp_trace_spool);
	amp_trace_spool[sizeof amp_trace_spool - 1] = '\0';
	amp_trace_cfg.nan_check = (int)amp_trace_sess->nan_check;
	amp_trace_cfg.dump = (int)amp_trace_sess->dump;
	amp_trace_cfg.dump_limit = amp_trace_sess->dump_limit;
	amp_trace_cfg.n_dump_steps = (int)amp_trace_sess->n_dump_steps;
	amp_trace_cfg.dump_steps = amp_trace_sess->dump_steps;
	amp_trace_cfg.spool_dir = amp_trace_spool;
	amp_trace_cfg.callstack = amp_trace_callstack_on;

	ssize_t n = readlink("/proc/self/exe", amp_trace_exe_path, sizeof amp_trace_exe_path - 1);
	amp_trace_exe_path[n > 0 ? n : 0] = '\0';
	uintptr_t bias;
	const char *path;
	if (amp_trace_module_of((uintptr_t)&amp_trace_op_end, &bias, &path)) {
		struct extent_query q = {bias, 0, 0, 0};
		dl_iterate_phdr(amp_trace_extent_cb, &q);
		if (q.found) {
			amp_trace_rt_lo = q.lo;
			amp_trace_rt_hi = q.hi;
		}
	}
	amp_trace_key_ok = pthread_key_create(&amp_trace_ring_key, amp_trace_ring_key_destructor) == 0;
	pthread_atfork(NULL, NULL, trace_at_fork_child);
	atexit(trace_at_exit);
	amp_trace_install_fatal_handlers();
	__atomic_add_fetch(&amp_trace_sess->attached, 1, __ATOMIC_ACQ_REL);
	amp_trace_active = 1;
}

uint32_t amp_trace_context_id(void)
{
	static _Atomic uint32_t local; /* not profiled: the process's own count */
	_Atomic uint32_t *n =
	    amp_trace_sess ? (_Atomic uint32_t *)&amp_trace_sess->contexts : &local;
	uint32_t id;
	while ((id = __atomic_add_fetch(n, 1, __ATOMIC_RELAXED)) == 0)
		; /* 0 means "no context" on the wire */
	return id;
}

uint64_t *amp_trace_dump_used(void)
{
	return amp_trace_sess ? &amp_trace_sess->dump_used : NULL;
}

const amp_trace_config *amp_trace_session_config(void)
{
	return amp_trace_sess ? &amp_trace_cfg : NULL;
}

int amp_trace_dump_step(int64_t step)
{
	for (int i = 0; i < amp_trace_cfg.n_dump_steps; i++)
		if (step >= amp_trace_cfg.dump_steps[i].lo && step <= amp_trace_cfg.dump_steps[i].hi)
			return 1;
	return 0;
}

/* pool.c — the kernels' small persistent thread pool: workers created lazily, one job at a time.
 *
 * A job is n shares fn(arg, t, n); the caller and the workers claim shares from one atomic
 * counter, so a worker that is late (asleep, or its core busy) costs nothing: the caller takes
 * its share.  One caller owns the pool at a time (trylock); another caller, or a job inside a
 * job, runs alone.  Idle workers spin briefly, then sleep on a condition variable.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

#include "kernels/kernels_impl.h"

#define POOL_MAX 64
/* Waiting threads spin this long before they sleep: waking a sleeping thread costs tens of
 * microseconds, as much as a small GEMM, and GEMMs come in quick succession when training. */
#define SPIN_NS 100000
#define CALLER_SPIN_NS 100000

static pthread_mutex_t submit_lock = PTHREAD_MUTEX_INITIALIZER;  /* owner of the pool */
static pthread_mutex_t pool_mu = PTHREAD_MUTEX_INITIALIZER;      /* for sleeping only */
static pthread_cond_t pool_start = PTHREAD_COND_INITIALIZER;
static pthread_cond_t pool_done = PTHREAD_COND_INITIALIZER;

static int nworkers;  /* started so far (under submit_lock) */
/* The job: (generation << 16) | next share to claim.  A new generation is posted only after
 * every share of the last one has finished, and its fields are written before it is posted. */
static _Atomic uint64_t job_claim;
static _Atomic(void (*)(void *, int, int)) job_fn;
static _Atomic(void *) job_arg;
static _Atomic int job_n;          /* shares */
static _Atomic int job_done;       /* shares finished */
static _Atomic int sleepers;       /* workers asleep or about to sleep on pool_start */
static _Atomic int caller_asleep;  /* the caller sleeps on pool_done */

static _Atomic int want_threads;   /* 0: not set yet, read $AMP_NUM_THREADS */
static _Thread_local int in_job;

static int64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#endif
}

/* Runs shares of generation gen until none is left. */
static void run_shares(uint64_t gen)
{
	for (;;) {
		uint64_t v = atomic_load(&job_claim);
		if (v >> 16 != gen)
			return;
		/* Read before the claim; a successful claim proves they belong to gen. */
		void (*fn)(void *, int, int) = atomic_load_explicit(&job_fn, memory_order_relaxed);
		void *arg = atomic_load_explicit(&job_arg, memory_order_relaxed);
		int n = atomic_load_explicit(&job_n, memory_order_relaxed);
		int t = (int)(v & 0xffff);
		if (t >= n)
			return;
		if (!atomic_compare_exchange_weak(&job_claim, &v, v + 1))
			continue;
		fn(arg, t, n);
		if (atomic_fetch_add(&job_done, 1) == n - 1 && atomic_load(&caller_asleep)) {
			pthread_mutex_lock(&pool_mu);
			pthread_cond_signal(&pool_done);
			pthread_mutex_unlock(&pool_mu);
		}
	}
}

static void *worker_main(void *arg)
{
	(void)arg;
	in_job = 1;
	uint64_t seen = atomic_load(&job_claim) >> 16;
	for (;;) {
		int64_t end = 0;
		for (unsigned i = 0; atomic_load(&job_claim) >> 16 == seen; i++) {
			cpu_relax();
			if ((i & 255) != 255)
				continue;
			if (end == 0) {
				end = now_ns() + SPIN_NS;
			} else if (now_ns() > end) {
				pthread_mutex_lock(&pool_mu);
				atomic_fetch_add(&sleepers, 1);
				while (atomic_load(&job_claim) >> 16 == seen)
					pthread_cond_wait(&pool_start, &pool_mu);
				atomic_fetch_sub(&sleepers, 1);
				pthread_mutex_unlock(&pool_mu);
			}
		}
		/* A late worker may see a newer job than the one it was woken for: fine. */
		seen = atomic_load(&job_claim) >> 16;
		run_shares(seen);
	}
	return NULL;
}

/* 1..POOL_MAX from $AMP_NUM_THREADS, else 1. */
static int threads_from_env(void)
{
	const char *v = getenv("AMP_NUM_THREADS");
	if (v == NULL || *v == '\0')
		return 1;
	char *end;
	long n = strtol(v, &end, 10);
	if (*end != '\0' || n < 1)
		return 1;
	return n > POOL_MAX ? POOL_MAX : (int)n;
}

int amp_kernels_set_threads(int n)
{
	if (n < 1)
		return -1;
	atomic_store(&want_threads, n > POOL_MAX ? POOL_MAX : n);
	return 0;
}

int amp_kernels_threads(void)
{
	int n = atomic_load(&want_threads);
	if (n == 0) {
		int expected = 0;
		atomic_compare_exchange_strong(&want_threads, &expected, threads_from_env());
		n = atomic_load(&want_threads);
	}
	return n;
}

/* ---- polls ---------------------------------------------------------------------------- */

__thread void (*amp_kernels_poll_fn)(void *arg);
static __thread void *poll_arg;
static __thread int64_t poll_next; /* now_ns() when the next poll is due */

void amp_kernels_set_poll(void (*fn)(void *arg), void *arg)
{
	amp_kernels_poll_fn = fn;
	poll_arg = arg;
	poll_next = 0;
}

void amp_kernels_poll_due(void)
{
	int64_t now = now_ns();
	if (now < poll_next)
		return;
	poll_next = now + AMP_KERNELS_POLL_NS;
	amp_kernels_poll_fn(poll_arg);
}

/* Starts workers until the pool has n threads with the caller; returns the pool's size. */
static int pool_grow(int n)
{
	static pthread_attr_t attr;
	static int attr_ok;
	if (!attr_ok) {
		if (pthread_attr_init(&attr) != 0)
			return 1 + nworkers;
		pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
		attr_ok = 1;
	}
	while (nworkers + 1 < n) {
		pthread_t th;
		if (pthread_create(&th, &attr, worker_main, NULL) != 0)
			break;
		nworkers++;
	}
	return 1 + nworkers;
}

int amp_kernels_parallel(int want, void (*fn)(void *arg, int t, int n), void *arg)
{
	int threads = amp_kernels_threads();
	if (want > 0xffff)
		want = 0xffff;
	if (want <= 1 || threads <= 1 || in_job || pthread_mutex_trylock(&submit_lock) != 0) {
		int was = in_job;
		in_job = 1;  /* a job inside this one stays serial too */
		fn(arg, 0, 1);
		in_job = was;
		return 1;
	}
	int size = pool_grow(threads < want ? threads : want);
	uint64_t gen = (atomic_load(&job_claim) >> 16) + 1;
	atomic_store_explicit(&job_fn, fn, memory_order_relaxed);
	atomic_store_explicit(&job_arg, arg, memory_order_relaxed);
	atomic_store_explicit(&job_n, want, memory_order_relaxed);
	atomic_store(&job_done, 0);
	atomic_store(&job_claim, gen << 16);  /* posts the job */
	if (size > 1 && atomic_load(&sleepers) > 0) {
		pthread_mutex_lock(&pool_mu);
		pthread_cond_broadcast(&pool_start);
		pthread_mutex_unlock(&pool_mu);
	}
	in_job = 1;
	run_shares(gen);
	in_job = 0;
	int64_t end = now_ns() + CALLER_SPIN_NS;
	for (unsigned i = 0; atomic_load(&job_done) < want; i++) {
		cpu_relax();
		if ((i & 255) == 255)
			amp_kernels_poll(); /* the caller's poll, while the workers finish */
		if ((i & 255) == 255 && now_ns() > end) {
			pthread_mutex_lock(&pool_mu);
			atomic_store(&caller_asleep, 1);
			while (atomic_load(&job_done) < want)
				pthread_cond_wait(&pool_done, &pool_mu);
			atomic_store(&caller_asleep, 0);
			pthread_mutex_unlock(&pool_mu);
			break;
		}
	}
	pthread_mutex_unlock(&submit_lock);
	return want;
}

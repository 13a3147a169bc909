/* alloc.c — see alloc.h.  The counters are atomics: kernels may allocate from worker threads
 * while a test walks the failure point on its own thread. */
#include "alloc.h"

#include <stdatomic.h>
#include <stdlib.h>

static _Atomic int64_t fail_countdown = -1; /* allocations left before the failing one; -1 off */
static _Atomic int fail_persistent;
static _Atomic int64_t failures, outstanding;

/* 1 if this allocation is to fail. */
static int should_fail(void)
{
	int64_t left = atomic_load_explicit(&fail_countdown, memory_order_relaxed);
	if (left < 0)
		return 0;
	if (left > 0) {
		atomic_fetch_sub_explicit(&fail_countdown, 1, memory_order_relaxed);
		return 0;
	}
	if (!atomic_load_explicit(&fail_persistent, memory_order_relaxed))
		atomic_store_explicit(&fail_countdown, -1, memory_order_relaxed);
	atomic_fetch_add_explicit(&failures, 1, memory_order_relaxed);
	return 1;
}

static void *taken(void *p)
{
	if (p)
		atomic_fetch_add_explicit(&outstanding, 1, memory_order_relaxed);
	return p;
}

void *amp_mem_malloc(size_t size)
{
	return should_fail() ? NULL : taken(malloc(size));
}

void *amp_mem_calloc(size_t n, size_t size)
{
	return should_fail() ? NULL : taken(calloc(n, size));
}

void *amp_mem_realloc(void *p, size_t size)
{
	if (should_fail())
		return NULL;
	void *q = realloc(p, size);
	return p ? q : taken(q);
}

void *amp_mem_aligned(size_t align, size_t size)
{
	void *p = NULL;
	if (should_fail() || posix_memalign(&p, align, size) != 0)
		return NULL;
	return taken(p);
}

void amp_mem_free(void *p)
{
	if (!p)
		return;
	atomic_fetch_sub_explicit(&outstanding, 1, memory_order_relaxed);
	free(p);
}

void amp_mem_fail_at(int64_t n, int persistent)
{
	atomic_store_explicit(&fail_persistent, persistent != 0, memory_order_relaxed);
	atomic_store_explicit(&failures, 0, memory_order_relaxed);
	atomic_store_explicit(&fail_countdown, n < 0 ? -1 : n, memory_order_relaxed);
}

int64_t amp_mem_failures(void)
{
	return atomic_load_explicit(&failures, memory_order_relaxed);
}

int64_t amp_mem_outstanding(void)
{
	return atomic_load_explicit(&outstanding, memory_order_relaxed);
}

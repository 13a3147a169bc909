/* alloc.h — the runtime's heap: every block a context owns is taken and given back here, so
 * that tests can fail the Nth allocation on purpose and count the blocks still held (the
 * discipline of SQLite's test_malloc.c).  Thread-safe.  The GEMM workspaces (thread-local,
 * with an unpacked fallback) and the profiling session's rings use the C library directly.
 */
#ifndef AMP_ALLOC_H
#define AMP_ALLOC_H

#include <stddef.h>
#include <stdint.h>

/* As malloc, calloc, realloc and posix_memalign (which returns the block or NULL); NULL when
 * the allocation fails or is made to fail.  amp_mem_free(NULL) does nothing. */
void *amp_mem_malloc(size_t size);
void *amp_mem_calloc(size_t n, size_t size);
void *amp_mem_realloc(void *p, size_t size);
void *amp_mem_aligned(size_t align, size_t size);
void amp_mem_free(void *p);

/* Test hooks.  amp_mem_fail_at(n, persistent): the allocation n allocations from now (0: the
 * next one) fails, and with persistent every one after it too; n < 0 turns failing off.
 * amp_mem_failures() counts the allocations made to fail since; amp_mem_outstanding() is the
 * number of blocks taken and not given back. */
void amp_mem_fail_at(int64_t n, int persistent);
int64_t amp_mem_failures(void);
int64_t amp_mem_outstanding(void);

#endif

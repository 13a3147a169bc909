/* keytab.h — ampprof's interning table of fixed-size keys (key -> id) and its hash.
 *
 * The writer interns signatures, call sites, modules and op type names with it; ids are dense
 * (index + 1), so parallel arrays indexed by id hold what goes with a key.  Not thread-safe
 * (ampprof is single-threaded).
 */
#ifndef PROF_KEYTAB_H
#define PROF_KEYTAB_H

#include <stddef.h>
#include <stdint.h>

/* Zero-initialize, set key_size, then intern; release frees.  Keys are compared bytewise, so a
 * key struct must be zeroed (padding included) before it is filled. */
typedef struct prof_keytab {
	unsigned char *keys;
	size_t key_size;
	uint32_t n, cap;
	uint32_t *ht;       /* ids, 0 = empty */
	uint32_t ht_cap;
} prof_keytab;

/* A 64-bit hash of n bytes (not cryptographic; the ids are the application's, not hostile
 * enough to flood a table the collector sizes itself). */
uint64_t prof_hash_bytes(const void *p, size_t n);
/* Id (>= 1) of key, inserting a copy of it if absent (*added set then).  0 when out of memory. */
uint32_t prof_keytab_intern(prof_keytab *t, const void *key, int *added);
/* The key of id (1 .. t->n); valid until the next intern. */
const void *prof_keytab_key(const prof_keytab *t, uint32_t id);
/* Frees the table's memory; the struct may be reused after zeroing. */
void prof_keytab_release(prof_keytab *t);

#endif

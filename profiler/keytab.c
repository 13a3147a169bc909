/* keytab.c — the interning table of fixed-size keys (see keytab.h): open addressing over dense
 * ids, rehashed at half load; keys stored contiguously in id order.
 */
#include "keytab.h"

#include <stdlib.h>
#include <string.h>

uint64_t prof_hash_bytes(const void *p, size_t n)
{
	const unsigned char *b = p;
	uint64_t h = 0x9E3779B97F4A7C15ull ^ n;
	size_t i = 0;
	for (; i + 8 <= n; i += 8) {
		uint64_t v;
		memcpy(&v, b + i, 8);
		h = (h ^ v) * 0xff51afd7ed558ccdull;
		h ^= h >> 32;
	}
	for (; i < n; i++)
		h = (h ^ b[i]) * 0x100000001b3ull;
	h ^= h >> 29;
	return h * 0xc4ceb9fe1a85ec53ull;
}

static int keytab_rehash(prof_keytab *t)
{
	uint32_t cap = t->ht_cap ? t->ht_cap * 2 : 64;
	uint32_t *ht = calloc(cap, sizeof *ht);
	if (!ht)
		return -1;
	for (uint32_t id = 1; id <= t->n; id++) {
		uint64_t i = prof_hash_bytes(t->keys + (size_t)(id - 1) * t->key_size, t->key_size);
		while (ht[i & (cap - 1)])
			i++;
		ht[i & (cap - 1)] = id;
	}
	free(t->ht);
	t->ht = ht;
	t->ht_cap = cap;
	return 0;
}

/* Id of key, inserting it if absent (*added set).  0 when out of memory. */
uint32_t prof_keytab_intern(prof_keytab *t, const void *key, int *added)
{
	*added = 0;
	if ((t->n + 1) * 2 > t->ht_cap && keytab_rehash(t) != 0)
		return 0;
	uint64_t i = prof_hash_bytes(key, t->key_size);
	for (;; i++) {
		uint32_t id = t->ht[i & (t->ht_cap - 1)];
		if (!id)
			break;
		if (memcmp(t->keys + (size_t)(id - 1) * t->key_size, key, t->key_size) == 0)
			return id;
	}
	if (t->n == t->cap) {
		uint32_t nc = t->cap ? t->cap * 2 : 64;
		unsigned char *nk = realloc(t->keys, (size_t)nc * t->key_size);
		if (!nk)
			return 0;
		t->keys = nk;
		t->cap = nc;
	}
	memcpy(t->keys + (size_t)t->n * t->key_size, key, t->key_size);
	uint32_t id = ++t->n;
	t->ht[i & (t->ht_cap - 1)] = id;
	*added = 1;
	return id;
}

const void *prof_keytab_key(const prof_keytab *t, uint32_t id)
{
	return t->keys + (size_t)(id - 1) * t->key_size;
}

void prof_keytab_release(prof_keytab *t)
{
	free(t->keys);
	free(t->ht);
}

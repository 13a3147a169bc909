/* trace_callsite.c — call sites and modules: the loaded objects announced once per ring
 * (AMP_REC_MODULE), and a call site defined once per distinct first return address outside
 * libamprt, from a frame-pointer walk (AMP_REC_CALLSITE).  Symbolization is the collector's.
 */
#include "trace_int.h"

#include <link.h>
#include <stdlib.h>
#include <unistd.h>

int amp_trace_extent_cb(struct dl_phdr_info *info, size_t size, void *arg)
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
int amp_trace_module_of(uintptr_t addr, uintptr_t *bias, const char **path)
{
	Dl_info info;
	struct link_map *lm = NULL;
	if (!dladdr1((void *)addr, &info, (void **)&lm, RTLD_DL_LINKMAP) || !lm)
		return 0;
	*bias = lm->l_addr;
	*path = lm->l_name && lm->l_name[0] ? lm->l_name : NULL;
	return 1;
}

char amp_trace_exe_path[PATH_MAX];

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
	dl_iterate_phdr(amp_trace_extent_cb, &q);
	uint32_t pid = amp_trace_intern_content(r, path ? path : amp_trace_exe_path);
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
	return amp_trace_intern_content(r, path ? path : amp_trace_exe_path);
}

int amp_trace_module_cb(struct dl_phdr_info *info, size_t size, void *arg)
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
uint32_t amp_trace_callsite_define(trace_ring *r, uintptr_t key, uintptr_t fp, uint32_t slot)
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
		if (amp_trace_module_of(cs.frames[i], &bias, &path)) {
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
	r->cs_live++;
	return id;
}

static int load_counts_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
	unsigned long long *counts = arg;
	if (size < offsetof(struct dl_phdr_info, dlpi_subs) + sizeof info->dlpi_subs)
		return 1; /* a loader without the counts: never stale */
	counts[0] = info->dlpi_adds;
	counts[1] = info->dlpi_subs;
	return 1; /* the same in every entry */
}

void amp_trace_callsites_check(trace_ring *r)
{
	unsigned long long counts[2] = {0, 0};
	dl_iterate_phdr(load_counts_cb, counts);
	if (counts[0] == r->dl_adds && counts[1] == r->dl_subs)
		return;
	/* an object unloaded since (dlclose; its addresses may hold another one now): the call
	 * sites and modules known by address are defined again as they are met */
	if (counts[1] != r->dl_subs && r->cs_keys) {
		memset(r->cs_keys, 0, r->cs_cap * sizeof *r->cs_keys);
		r->cs_live = 0;
		r->n_mods = 0;
	}
	r->dl_adds = counts[0];
	r->dl_subs = counts[1];
}

int amp_trace_callsite_table_grow(trace_ring *r)
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
			continue; /* (cs_live stays: the same keys move) */
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

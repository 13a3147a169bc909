/* writer.c — turns decoded ring records into rows of the profile database.
 *
 * Counters are running totals: the latest value of each ring is kept, and meta holds their
 * sum over rings (or, for process-wide ones, over processes), so several producing threads
 * add up instead of overwriting each other.  Non-finite origins are listed in `nonfinite` as
 * they arrive, for finalize to classify.
 *
 * Prepared statements, one open transaction committed by the collector at least every 100 ms.
 * Per-ring ids (strings, call sites) are mapped to database ids; repeated parts of op and copy
 * events are interned as signatures (op_sigs, copy_sigs) so event rows stay small.  Ticks are
 * converted to nanoseconds since the run start with the current TSC calibration.  Content
 * from the application is untrusted: unknown ids map to NULL, out-of-range values are clamped.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* memfd_create, pipe2, dladdr1, sigabbrev_np */
#endif
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "prof.h"
#include "profile_db.h"

#define PROF_MAX_RING_IDS (1u << 20)  /* per-ring string / call-site ids accepted */
#define PROF_MAX_DUMP_BYTES (1ull << 30)

/* ---- an interning table of fixed-size keys: key -> id (index + 1) ------------------------ */
typedef struct keytab {
	unsigned char *keys;
	size_t key_size;
	uint32_t n, cap;
	uint32_t *ht;       /* ids, 0 = empty */
	uint32_t ht_cap;
} keytab;

static uint64_t hash_bytes(const void *p, size_t n)
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

static int keytab_rehash(keytab *t)
{
	uint32_t cap = t->ht_cap ? t->ht_cap * 2 : 64;
	uint32_t *ht = calloc(cap, sizeof *ht);
	if (!ht)
		return -1;
	for (uint32_t id = 1; id <= t->n; id++) {
		uint64_t i = hash_bytes(t->keys + (size_t)(id - 1) * t->key_size, t->key_size);
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
static uint32_t keytab_intern(keytab *t, const void *key, int *added)
{
	*added = 0;
	if ((t->n + 1) * 2 > t->ht_cap && keytab_rehash(t) != 0)
		return 0;
	uint64_t i = hash_bytes(key, t->key_size);
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

static const void *keytab_key(const keytab *t, uint32_t id)
{
	return t->keys + (size_t)(id - 1) * t->key_size;
}

static void keytab_release(keytab *t)
{
	free(t->keys);
	free(t->ht);
}

/* ---- keys --------------------------------------------------------------------------------- */
typedef struct op_sig_key {
	int64_t shape[4];
	uint64_t flops, bytes;
	uint32_t label, callsite;    /* database ids */
	uint32_t op, pad;            /* database string id of the op type's name */
	uint8_t phase, exec, in, out, ndim, aligned, engine, pad2;
} op_sig_key;

typedef struct copy_sig_key {
	uint64_t bytes;
	uint32_t label, callsite;
	uint8_t kind, src, dst, pad[5];
} copy_sig_key;

typedef struct callsite_key {
	uint64_t offset;             /* file address of frames[0] */
	uint32_t path;               /* database string id of the module path */
	uint32_t pad;
} callsite_key;

typedef struct module_key {
	uint64_t bias, lo, hi;
	uint32_t path;
	uint32_t pad;
} module_key;

typedef struct callsite_info {
	uint32_t nframes;
	uint64_t frames[AMP_CALLSITE_FRAMES];  /* absolute return addresses */
	uint64_t biases[AMP_CALLSITE_FRAMES];
	uint32_t paths[AMP_CALLSITE_FRAMES];   /* database string ids */
} callsite_info;

typedef struct crash_info {
	sqlite3_int64 row;
	uint32_t nframes;
	uint64_t frames[AMP_CRASH_FRAMES];
} crash_info;

/* The last value a ring sent for a counter. */
typedef struct ring_counter {
	uint32_t name;               /* database string id */
	uint32_t scope;              /* AMP_COUNTER_* */
	int64_t value;
} ring_counter;

typedef struct ring_map {
	uint32_t *strs;              /* ring string id -> database id */
	uint32_t n_strs;
	uint32_t *sites;             /* ring call-site id -> database id */
	uint32_t n_sites;
	int seen;
	uint32_t pid, tid;
	uint64_t dropped;
	int has_open_step;
	int64_t open_step;
	uint64_t open_step_t;
	unsigned clock;
	ring_counter *counters;      /* the last value of each counter this ring sent */
	uint32_t n_counters, cap_counters;
} ring_map;

struct prof_writer {
	sqlite3 *db;
	const prof_options *opts;
	uint64_t run_start;
	/* calibration: anchor pair and the latest one far enough from it */
	int cal_have;
	uint64_t cal_t0, cal_m0;
	double ns_per_tick;
	/* strings: database id -> text, and a content hash */
	char **texts;
	uint32_t n_texts, cap_texts;
	uint32_t *str_ht;
	uint32_t str_ht_cap;
	keytab modules, callsites, op_sigs, copy_sigs;
	keytab op_types;             /* op type names (database string ids) known to op_types */
	uint32_t op_str[AMP_OP_COUNT]; /* database string id of amp_op_name(op), 0 = not yet */
	callsite_info *cs_info;      /* parallel to callsites */
	uint32_t cs_info_cap;
	uint64_t *op_calls, *op_total, *cp_calls, *cp_total;
	uint32_t op_agg_cap, cp_agg_cap;
	crash_info *crashes;
	uint32_t n_crashes;
	ring_map *rings;
	uint32_t n_rings;
	uint64_t events, rejected;
	int64_t last_step;
	char spool[256];             /* spool directory of dump payloads, "" if none */
	sqlite3_stmt *st_string, *st_callsite, *st_opsig, *st_op, *st_copysig, *st_copy, *st_step,
	    *st_scale, *st_mem, *st_meta, *st_tstats, *st_dump, *st_crash, *st_nonfinite,
	    *st_optype;
};

static int db_error(prof_writer *w, const char *what)
{
	prof_error(NULL, "cannot write '%s': %s (%s)", w->opts->output, sqlite3_errmsg(w->db), what);
	return -1;
}

static int run_stmt(prof_writer *w, sqlite3_stmt *st, const char *what)
{
	int rc = sqlite3_step(st);
	sqlite3_reset(st);
	sqlite3_clear_bindings(st);
	if (rc != SQLITE_DONE)
		return db_error(w, what);
	return 0;
}

/* run_stmt for statements whose every parameter is bound on every row (the per-event inserts):
 * no clear_bindings. */
static int run_stmt_all_bound(prof_writer *w, sqlite3_stmt *st, const char *what)
{
	int rc = sqlite3_step(st);
	sqlite3_reset(st);
	if (rc != SQLITE_DONE)
		return db_error(w, what);
	return 0;
}

/* ---- time ---------------------------------------------------------------------------------- */
void prof_writer_calibrate(prof_writer *w, uint64_t ticks, uint64_t mono)
{
	if (!w->cal_have) {
		w->cal_have = 1;
		w->cal_t0 = ticks;
		w->cal_m0 = mono;
		return;
	}
	if (ticks > w->cal_t0 && mono > w->cal_m0 + 5000000u)
		w->ns_per_tick = (double)(mono - w->cal_m0) / (double)(ticks - w->cal_t0);
}

static int64_t clamp_i64(double v)
{
	if (!(v == v))
		return 0;
	if (v > 9.0e18)
		return INT64_C(9000000000000000000);
	if (v < -9.0e18)
		return -INT64_C(9000000000000000000);
	return (int64_t)v;
}

static int64_t to_ns(const prof_writer *w, unsigned clock, uint64_t t)
{
	if (clock == AMP_CLOCK_MONO || !w->cal_have)
		return (int64_t)(t - w->run_start);
	double d = (double)(int64_t)(t - w->cal_t0) * w->ns_per_tick;
	return clamp_i64(d + (double)(int64_t)(w->cal_m0 - w->run_start));
}

static int64_t dur_ns(const prof_writer *w, unsigned clock, uint64_t t0, uint64_t t1)
{
	if (t1 <= t0)
		return 0;
	if (clock == AMP_CLOCK_MONO || !w->cal_have)
		return clamp_i64((double)(t1 - t0));
	return clamp_i64((double)(t1 - t0) * w->ns_per_tick);
}

/* ---- strings -------------------------------------------------------------------------------- */
static uint64_t hash_text(const char *s, size_t n)
{
	return hash_bytes(s, n);
}

/* Database id of text (n bytes), inserting it.  0 on failure. */
static uint32_t string_intern(prof_writer *w, const char *s, size_t n)
{
	if ((w->n_texts + 1) * 2 > w->str_ht_cap) {
		uint32_t cap = w->str_ht_cap ? w->str_ht_cap * 2 : 256;
		uint32_t *ht = calloc(cap, sizeof *ht);
		if (!ht)
			return 0;
		for (uint32_t id = 1; id <= w->n_texts; id++) {
			uint64_t i = hash_text(w->texts[id], strlen(w->texts[id]));
			while (ht[i & (cap - 1)])
				i++;
			ht[i & (cap - 1)] = id;
		}
		free(w->str_ht);
		w->str_ht = ht;
		w->str_ht_cap = cap;
	}
	/* text stops at an embedded NUL: the database holds C strings */
	n = strnlen(s, n);
	uint64_t i = hash_text(s, n);
	for (;; i++) {
		uint32_t id = w->str_ht[i & (w->str_ht_cap - 1)];
		if (!id)
			break;
		if (strncmp(w->texts[id], s, n) == 0 && w->texts[id][n] == '\0')
			return id;
	}
	if (w->n_texts + 2 > w->cap_texts) {
		uint32_t nc = w->cap_texts ? w->cap_texts * 2 : 256;
		char **nt = realloc(w->texts, (size_t)nc * sizeof *nt);
		if (!nt)
			return 0;
		w->texts = nt;
		w->cap_texts = nc;
	}
	char *copy = malloc(n + 1);
	if (!copy)
		return 0;
	memcpy(copy, s, n);
	copy[n] = '\0';
	uint32_t id = ++w->n_texts;
	w->texts[id] = copy;
	w->str_ht[i & (w->str_ht_cap - 1)] = id;
	sqlite3_bind_int64(w->st_string, 1, id);
	sqlite3_bind_text(w->st_string, 2, copy, -1, SQLITE_STATIC);
	if (run_stmt(w, w->st_string, "strings") != 0)
		return 0;
	return id;
}

static const char *text_of(const prof_writer *w, uint32_t id)
{
	return id && id <= w->n_texts ? w->texts[id] : NULL;
}

static ring_map *ring_get(prof_writer *w, uint32_t ring)
{
	if (ring >= w->n_rings)
		return NULL;
	return &w->rings[ring];
}

/* Grows a ring's id map to hold id.  Returns 0 or -1 (id too large / no memory). */
static int map_reserve(uint32_t **map, uint32_t *n, uint32_t id)
{
	if (id == 0 || id >= PROF_MAX_RING_IDS)
		return -1;
	if (id < *n)
		return 0;
	uint32_t nn = *n ? *n : 64;
	while (nn <= id)
		nn *= 2;
	uint32_t *m = realloc(*map, (size_t)nn * sizeof *m);
	if (!m)
		return -1;
	memset(m + *n, 0, (size_t)(nn - *n) * sizeof *m);
	*map = m;
	*n = nn;
	return 0;
}

static uint32_t ring_string(const ring_map *rm, uint32_t id)
{
	return id && id < rm->n_strs ? rm->strs[id] : 0;
}

static uint32_t ring_site(const ring_map *rm, uint32_t id)
{
	return id && id < rm->n_sites ? rm->sites[id] : 0;
}

/* ---- setup ---------------------------------------------------------------------------------- */
/* Every prepared statement of the writer: its field in prof_writer and its SQL.  new prepares
 * them in this order and free finalizes them, so a statement is added in one place. */
static const struct {
	size_t field;                /* offsetof the sqlite3_stmt * in prof_writer */
	const char *sql;
} writer_stmts[] = {
	{offsetof(prof_writer, st_string), "INSERT INTO strings(id, value) VALUES (?, ?)"},
	{offsetof(prof_writer, st_callsite),
	 "INSERT INTO callsites(id, address, module, offset) VALUES (?, ?, ?, ?)"},
	{offsetof(prof_writer, st_opsig),
	 "INSERT INTO op_sigs(id, op, phase, exec_dtype, in_dtype, out_dtype, label, "
	 "shape, flops, bytes, aligned, callsite, engine) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)"},
	{offsetof(prof_writer, st_op),
	 "INSERT INTO op_events(step, seq, sig, start_ns, dur_ns, thread) VALUES (?,?,?,?,?,?)"},
	{offsetof(prof_writer, st_copysig),
	 "INSERT INTO copy_sigs(id, kind, bytes, src_dtype, dst_dtype, label, callsite) "
	 "VALUES (?,?,?,?,?,?,?)"},
	{offsetof(prof_writer, st_copy),
	 "INSERT INTO copy_events(step, sig, start_ns, dur_ns, thread) VALUES (?,?,?,?,?)"},
	{offsetof(prof_writer, st_step),
	 "INSERT INTO steps(step, start_ns, dur_ns, loss, scale, overflow, skipped, "
	 "samples, detail, thread) VALUES (?,?,?,?,?,?,?,?,?,?)"},
	{offsetof(prof_writer, st_scale),
	 "INSERT INTO loss_scale(step, t_ns, old_scale, new_scale, reason) VALUES (?,?,?,?,?)"},
	{offsetof(prof_writer, st_mem),
	 "INSERT INTO memory(step, t_ns, master_weights, working_copies, activations, "
	 "grads, optimizer_state, total, peak) VALUES (?,?,?,?,?,?,?,?,?)"},
	{offsetof(prof_writer, st_meta), "INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)"},
	{offsetof(prof_writer, st_tstats),
	 "INSERT INTO tensor_stats(step, seq, op, role, name, dtype, count, nan, inf, "
	 "underflow, near_overflow, min, max, absmax, origin, exp_hist, callsite, "
	 "neg_inf, phase, thread) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)"},
	{offsetof(prof_writer, st_dump),
	 "INSERT INTO dumps(step, seq, op, role, name, dtype, shape, reason, bytes, data) "
	 "VALUES (?,?,?,?,?,?,?,?,?,?)"},
	{offsetof(prof_writer, st_crash),
	 "INSERT INTO crashes(thread, signo, signal, code, addr, t_ns, frames) "
	 "VALUES (?,?,?,?,?,?,?)"},
	/* origins are listed as they arrive, so finalize never scans tensor_stats for them;
	 * it classifies them (class and the step's columns) */
	/* an op type a producer named that this schema does not know: gray until a list says */
	{offsetof(prof_writer, st_optype),
	 "INSERT INTO op_types(name, list) SELECT ?1, 'gray' WHERE NOT EXISTS "
	 "(SELECT 1 FROM op_types WHERE name = ?1)"},
	{offsetof(prof_writer, st_nonfinite),
	 "INSERT INTO nonfinite(step, op, label, phase, role, dtype, nan, inf, neg_inf, "
	 "callsite, seq, stats_id, thread) SELECT step, op, name, phase, role, dtype, nan, "
	 "inf, neg_inf, callsite, seq, id, thread FROM tensor_stats WHERE id = ?"},
};
#define N_WRITER_STMTS (sizeof writer_stmts / sizeof writer_stmts[0])

static sqlite3_stmt **writer_stmt(prof_writer *w, size_t i)
{
	return (sqlite3_stmt **)((char *)w + writer_stmts[i].field);
}

prof_writer *prof_writer_new(sqlite3 *db, const prof_options *opts, uint64_t run_start_mono)
{
	prof_writer *w = calloc(1, sizeof *w);
	if (!w) {
		prof_error(NULL, "out of memory");
		return NULL;
	}
	w->db = db;
	w->opts = opts;
	w->run_start = run_start_mono;
	w->ns_per_tick = 1.0;
	w->last_step = -1;
	w->modules.key_size = sizeof(module_key);
	w->callsites.key_size = sizeof(callsite_key);
	w->op_sigs.key_size = sizeof(op_sig_key);
	w->copy_sigs.key_size = sizeof(copy_sig_key);
	w->op_types.key_size = sizeof(uint32_t);
	w->n_rings = opts->ring_count;
	w->rings = calloc(w->n_rings ? w->n_rings : 1, sizeof *w->rings);
	if (!w->rings) {
		prof_error(NULL, "out of memory");
		goto fail;
	}
	for (size_t i = 0; i < N_WRITER_STMTS; i++)
		if (sqlite3_prepare_v3(db, writer_stmts[i].sql, -1, SQLITE_PREPARE_PERSISTENT,
		                       writer_stmt(w, i), NULL) != SQLITE_OK) {
			db_error(w, "prepare");
			goto fail;
		}
	if (sqlite3_exec(db, "BEGIN", NULL, NULL, NULL) != SQLITE_OK) {
		db_error(w, "begin");
		goto fail;
	}
	return w;
fail:
	prof_writer_free(w);
	return NULL;
}

void prof_writer_free(prof_writer *w)
{
	if (!w)
		return;
	for (size_t i = 0; i < N_WRITER_STMTS; i++)
		sqlite3_finalize(*writer_stmt(w, i));
	for (uint32_t i = 1; i <= w->n_texts; i++)
		free(w->texts[i]);
	free(w->texts);
	free(w->str_ht);
	keytab_release(&w->modules);
	keytab_release(&w->callsites);
	keytab_release(&w->op_sigs);
	keytab_release(&w->copy_sigs);
	keytab_release(&w->op_types);
	free(w->cs_info);
	free(w->op_calls);
	free(w->op_total);
	free(w->cp_calls);
	free(w->cp_total);
	free(w->crashes);
	for (uint32_t i = 0; i < w->n_rings; i++) {
		free(w->rings[i].strs);
		free(w->rings[i].sites);
		free(w->rings[i].counters);
	}
	free(w->rings);
	free(w);
}

int prof_writer_commit(prof_writer *w)
{
	if (sqlite3_exec(w->db, "COMMIT; BEGIN", NULL, NULL, NULL) != SQLITE_OK)
		return db_error(w, "commit");
	return 0;
}

uint64_t prof_writer_events(const prof_writer *w) { return w->events; }
uint64_t prof_writer_rejected(const prof_writer *w) { return w->rejected; }
int64_t prof_writer_last_step(const prof_writer *w) { return w->last_step; }

void prof_writer_thread(prof_writer *w, uint32_t ring, uint32_t pid, uint32_t tid,
                        uint64_t dropped)
{
	ring_map *rm = ring_get(w, ring);
	if (!rm)
		return;
	rm->seen = 1;
	rm->pid = pid;
	rm->tid = tid;
	rm->dropped = dropped;
}

/* ---- records ------------------------------------------------------------------------------- */
static int step_detailed(const prof_options *o, int64_t step)
{
	if (o->n_steps == 0)
		return 1;
	for (int i = 0; i < o->n_steps; i++)
		if (step >= o->steps[i].lo && step <= o->steps[i].hi)
			return 1;
	return 0;
}

static void bind_text_or_null(sqlite3_stmt *st, int col, const char *s)
{
	if (s)
		sqlite3_bind_text(st, col, s, -1, SQLITE_STATIC);
	else
		sqlite3_bind_null(st, col);
}

static void bind_id_or_null(sqlite3_stmt *st, int col, uint32_t id)
{
	if (id)
		sqlite3_bind_int64(st, col, id);
	else
		sqlite3_bind_null(st, col);
}

static void shape_text(char *buf, size_t len, const int64_t *shape, unsigned ndim)
{
	size_t used = 0;
	buf[used++] = '(';
	for (unsigned i = 0; i < ndim && i < 4 && used < len; i++)
		used += (size_t)snprintf(buf + used, len - used, i ? ",%" PRId64 : "%" PRId64,
		                         shape[i]);
	if (used + 2 <= len) {
		buf[used++] = ')';
		buf[used] = '\0';
	} else {
		buf[len - 1] = '\0';
	}
}

static int grow_u64(uint64_t **a, uint64_t **b, uint32_t *cap, uint32_t need)
{
	if (need <= *cap)
		return 0;
	uint32_t nc = *cap ? *cap : 64;
	while (nc < need)
		nc *= 2;
	uint64_t *na = realloc(*a, (size_t)nc * sizeof *na);
	if (!na)
		return -1;
	*a = na;
	uint64_t *nb = realloc(*b, (size_t)nc * sizeof *nb);
	if (!nb)
		return -1;
	*b = nb;
	memset(*a + *cap, 0, (size_t)(nc - *cap) * sizeof **a);
	memset(*b + *cap, 0, (size_t)(nc - *cap) * sizeof **b);
	*cap = nc;
	return 0;
}

/* Database string id of a record's op type: the name the producer sent (op_name, a ring string
 * id), else the runtime's name of op; an op_types row is added the first time a name this
 * schema does not know is seen.  0 when neither names a type (stored as "?"), -1 on an SQLite
 * or memory failure (reported). */
static int64_t op_type(prof_writer *w, const ring_map *rm, unsigned op, uint32_t op_name)
{
	uint32_t id = ring_string(rm, op_name);
	if (!id && op < AMP_OP_COUNT) {
		id = w->op_str[op];
		if (!id) {
			const char *name = amp_op_name((amp_op_type)op);
			id = w->op_str[op] = string_intern(w, name, strlen(name));
			if (!id)
				return -1;
		}
	}
	if (!id)
		return 0;
	int added;
	if (!keytab_intern(&w->op_types, &id, &added)) {
		prof_error(NULL, "out of memory");
		return -1;
	}
	if (added && amp_op_from_name(text_of(w, id)) < 0) {
		sqlite3_bind_text(w->st_optype, 1, text_of(w, id), -1, SQLITE_STATIC);
		if (run_stmt(w, w->st_optype, "op_types") != 0)
			return -1;
	}
	return id;
}

static const char *op_type_text(const prof_writer *w, int64_t id)
{
	const char *t = id > 0 ? text_of(w, (uint32_t)id) : NULL;
	return t ? t : "?";
}

static int put_op(prof_writer *w, uint32_t ring, ring_map *rm, const amp_rec_op *o)
{
	int64_t op = op_type(w, rm, o->op, o->op_name);
	if (op < 0)
		return -1;
	op_sig_key k;
	memset(&k, 0, sizeof k);
	for (unsigned i = 0; i < 4; i++)
		k.shape[i] = i < o->ndim ? o->shape[i] : 0;
	k.flops = o->flops;
	k.bytes = o->bytes;
	k.label = ring_string(rm, o->label);
	k.callsite = ring_site(rm, o->callsite);
	k.op = (uint32_t)op;
	k.phase = o->phase;
	k.exec = o->exec_dtype;
	k.in = o->in_dtype;
	k.out = o->out_dtype;
	k.ndim = o->ndim;
	k.aligned = o->aligned ? 1 : 0;
	k.engine = o->engine;
	int added;
	uint32_t sig = keytab_intern(&w->op_sigs, &k, &added);
	if (!sig || grow_u64(&w->op_calls, &w->op_total, &w->op_agg_cap, sig + 1) != 0) {
		prof_error(NULL, "out of memory");
		return -1;
	}
	if (added) {
		char shape[128];
		shape_text(shape, sizeof shape, k.shape, k.ndim);
		sqlite3_stmt *st = w->st_opsig;
		sqlite3_bind_int64(st, 1, sig);
		sqlite3_bind_text(st, 2, op_type_text(w, k.op), -1, SQLITE_STATIC);
		sqlite3_bind_text(st, 3, amp_phase_name((amp_phase)k.phase), -1, SQLITE_STATIC);
		sqlite3_bind_text(st, 4, prof_dtype_name(k.exec), -1, SQLITE_STATIC);
		sqlite3_bind_text(st, 5, prof_dtype_name(k.in), -1, SQLITE_STATIC);
		sqlite3_bind_text(st, 6, prof_dtype_name(k.out), -1, SQLITE_STATIC);
		bind_text_or_null(st, 7, text_of(w, k.label));
		sqlite3_bind_text(st, 8, shape, -1, SQLITE_TRANSIENT);
		sqlite3_bind_int64(st, 9, (sqlite3_int64)k.flops);
		sqlite3_bind_int64(st, 10, (sqlite3_int64)k.bytes);
		sqlite3_bind_int(st, 11, k.aligned);
		bind_id_or_null(st, 12, k.callsite);
		bind_text_or_null(st, 13, k.engine < AMP_ENGINE_COUNT
		                              ? amp_engine_name((amp_engine)k.engine) : NULL);
		if (run_stmt(w, st, "op_sigs") != 0)
			return -1;
	}
	int64_t d = dur_ns(w, rm->clock, o->t_begin, o->t_end);
	w->op_calls[sig]++;
	w->op_total[sig] += (uint64_t)d;
	sqlite3_stmt *st = w->st_op;
	sqlite3_bind_int64(st, 1, o->step);
	sqlite3_bind_int64(st, 2, (sqlite3_int64)o->seq);
	sqlite3_bind_int64(st, 3, sig);
	sqlite3_bind_int64(st, 4, to_ns(w, rm->clock, o->t_begin));
	sqlite3_bind_int64(st, 5, d);
	sqlite3_bind_int64(st, 6, ring);
	return run_stmt_all_bound(w, st, "op_events");
}

static int put_copy(prof_writer *w, uint32_t ring, ring_map *rm, const amp_rec_copy *c)
{
	copy_sig_key k;
	memset(&k, 0, sizeof k);
	k.bytes = c->bytes;
	k.label = ring_string(rm, c->label);
	k.callsite = ring_site(rm, c->callsite);
	k.kind = c->kind;
	k.src = c->src_dtype;
	k.dst = c->dst_dtype;
	int added;
	uint32_t sig = keytab_intern(&w->copy_sigs, &k, &added);
	if (!sig || grow_u64(&w->cp_calls, &w->cp_total, &w->cp_agg_cap, sig + 1) != 0) {
		prof_error(NULL, "out of memory");
		return -1;
	}
	if (added) {
		sqlite3_stmt *st = w->st_copysig;
		sqlite3_bind_int64(st, 1, sig);
		sqlite3_bind_text(st, 2, amp_copy_kind_name((amp_copy_kind)k.kind), -1, SQLITE_STATIC);
		sqlite3_bind_int64(st, 3, (sqlite3_int64)k.bytes);
		sqlite3_bind_text(st, 4, prof_dtype_name(k.src), -1, SQLITE_STATIC);
		sqlite3_bind_text(st, 5, prof_dtype_name(k.dst), -1, SQLITE_STATIC);
		bind_text_or_null(st, 6, text_of(w, k.label));
		bind_id_or_null(st, 7, k.callsite);
		if (run_stmt(w, st, "copy_sigs") != 0)
			return -1;
	}
	int64_t d = dur_ns(w, rm->clock, c->t_begin, c->t_end);
	w->cp_calls[sig]++;
	w->cp_total[sig] += (uint64_t)d;
	sqlite3_stmt *st = w->st_copy;
	sqlite3_bind_int64(st, 1, c->step);
	sqlite3_bind_int64(st, 2, sig);
	sqlite3_bind_int64(st, 3, to_ns(w, rm->clock, c->t_begin));
	sqlite3_bind_int64(st, 4, d);
	sqlite3_bind_int64(st, 5, ring);
	return run_stmt_all_bound(w, st, "copy_events");
}

static int put_step_row(prof_writer *w, uint32_t ring, ring_map *rm, int64_t step,
                        uint64_t t_begin, const amp_rec_step *s)
{
	sqlite3_stmt *st = w->st_step;
	sqlite3_bind_int64(st, 1, step);
	sqlite3_bind_int64(st, 2, to_ns(w, rm->clock, t_begin));
	if (s) {
		sqlite3_bind_int64(st, 3, dur_ns(w, rm->clock, s->t_begin, s->t_end));
		if (isfinite(s->loss))
			sqlite3_bind_double(st, 4, s->loss);
		else
			sqlite3_bind_null(st, 4);
		if (isfinite(s->scale))
			sqlite3_bind_double(st, 5, s->scale);
		else
			sqlite3_bind_null(st, 5);
		sqlite3_bind_int(st, 6, s->overflow ? 1 : 0);
		sqlite3_bind_int(st, 7, s->skipped ? 1 : 0);
		sqlite3_bind_int64(st, 8, s->samples);
	}
	sqlite3_bind_int(st, 9, step_detailed(w->opts, step));
	sqlite3_bind_int64(st, 10, ring);
	if (step > w->last_step)
		w->last_step = step;
	return run_stmt(w, st, "steps");
}

static const char *meta_reserved[] = {
	"schema_version", "ampprof_version", "wire_version", "command", "argv", "cwd", "pid",
	"host", "cpu", "cpu_half_features", "start_time", "start_mono_ns", "clock", "ticks_per_ns",
	"end", "exit_status", "exit_signal", "complete", "events", "dropped_events",
	"rings_missing", "wall_ns", "finalized_at", "output", "rejected_events",
	"producer_wire_version",
};

static int put_meta(prof_writer *w, const char *key, size_t kl, const char *val, size_t vl)
{
	char k[300];
	int reserved = 0;
	kl = strnlen(key, kl);
	vl = strnlen(val, vl);
	if (kl >= 256)
		kl = 255;
	for (size_t i = 0; i < sizeof meta_reserved / sizeof meta_reserved[0]; i++)
		if (strlen(meta_reserved[i]) == kl && strncmp(meta_reserved[i], key, kl) == 0)
			reserved = 1;
	snprintf(k, sizeof k, "%s%.*s", reserved || strncmp(key, "options.", kl < 8 ? kl : 8) == 0
	                                    ? "app." : "", (int)kl, key);
	sqlite3_bind_text(w->st_meta, 1, k, -1, SQLITE_TRANSIENT);
	sqlite3_bind_text(w->st_meta, 2, val, (int)vl, SQLITE_TRANSIENT);
	return run_stmt(w, w->st_meta, "meta");
}

static const char *role_name(unsigned role)
{
	static const char *const names[] = {"input", "output", "grad"};
	return role < 3 ? names[role] : "?";
}

/* Reads a dump payload from the spool directory; the name must be a plain file name. */
static void *read_spool(const prof_writer *w, const char *name, uint64_t want, size_t *got)
{
	*got = 0;
	if (!w->spool[0] || !name || !*name || strchr(name, '/') || strcmp(name, "..") == 0 ||
	    strcmp(name, ".") == 0 || want > PROF_MAX_DUMP_BYTES)
		return NULL;
	char path[600];
	snprintf(path, sizeof path, "%s/%s", w->spool, name);
	int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return NULL;
	struct stat st;
	void *data = NULL;
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size > PROF_MAX_DUMP_BYTES)
		goto out;
	data = malloc((size_t)st.st_size + 1);
	if (!data)
		goto out;
	size_t off = 0;
	while (off < (size_t)st.st_size) {
		ssize_t n = read(fd, (char *)data + off, (size_t)st.st_size - off);
		if (n <= 0)
			break;
		off += (size_t)n;
	}
	*got = off;
out:
	close(fd);
	unlink(path);
	return data;
}

void prof_writer_set_spool(prof_writer *w, const char *dir)
{
	snprintf(w->spool, sizeof w->spool, "%s", dir ? dir : "");
}

/* Records value as ring rm's latest for counter name (database string id) and computes the
 * run's total in *total: ring-scoped counters summed over rings, process-scoped ones as the
 * largest value per process summed over processes (see amp_rec_counter).  An unknown scope
 * counts as ring-scoped.  Returns 0 or -1 (out of memory). */
static int counter_update(prof_writer *w, ring_map *rm, uint32_t name, uint32_t scope,
                          int64_t value, int64_t *total)
{
	uint32_t i = 0;
	while (i < rm->n_counters && rm->counters[i].name != name)
		i++;
	if (i == rm->n_counters) {
		if (rm->n_counters == rm->cap_counters) {
			uint32_t nc = rm->cap_counters ? rm->cap_counters * 2 : 16;
			ring_counter *n = realloc(rm->counters, (size_t)nc * sizeof *n);
			if (!n) {
				prof_error(NULL, "out of memory");
				return -1;
			}
			rm->counters = n;
			rm->cap_counters = nc;
		}
		rm->n_counters++;
	}
	rm->counters[i] = (ring_counter){name, scope == AMP_COUNTER_PROCESS ? scope : 0, value};
	/* the rings' latest values of this counter (a handful of rings, a few dozen counters) */
	*total = 0;
	for (uint32_t a = 0; a < w->n_rings; a++) {
		const ring_map *ra = &w->rings[a];
		for (uint32_t k = 0; k < ra->n_counters; k++) {
			const ring_counter *ca = &ra->counters[k];
			if (ca->name != name)
				continue;
			if (ca->scope == AMP_COUNTER_PROCESS) {
				/* counted once per process: by its ring with the largest value, the first
				 * of them on a tie */
				int beaten = 0;
				for (uint32_t b = 0; b < w->n_rings && !beaten; b++) {
					const ring_map *rb = &w->rings[b];
					if (b == a || rb->pid != ra->pid)
						continue;
					for (uint32_t j = 0; j < rb->n_counters; j++)
						if (rb->counters[j].name == name &&
						    (rb->counters[j].value > ca->value ||
						     (rb->counters[j].value == ca->value && b < a)))
							beaten = 1;
				}
				if (beaten)
					continue;
			}
			/* wraps instead of overflowing on hostile values */
			*total = (int64_t)((uint64_t)*total + (uint64_t)ca->value);
		}
	}
	return 0;
}

int prof_writer_put(prof_writer *w, uint32_t ring, unsigned clock, const prof_record *r)
{
	ring_map *rm = ring_get(w, ring);
	if (!rm || r->type == AMP_REC_PAD || !r->rec)
		return 0;
	rm->clock = clock == AMP_CLOCK_MONO ? AMP_CLOCK_MONO : AMP_CLOCK_TSC;
	w->events++;
	const unsigned char *p = r->rec;
	switch (r->type) {
	case AMP_REC_CLOCK: {
		amp_rec_clock c;
		memcpy(&c, p, sizeof c);
		if (rm->clock == AMP_CLOCK_TSC)
			prof_writer_calibrate(w, c.ticks, c.mono_ns);
		return 0;
	}
	case AMP_REC_STRING: {
		amp_rec_string s;
		memcpy(&s, p, sizeof s);
		if (map_reserve(&rm->strs, &rm->n_strs, s.id) != 0) {
			w->rejected++;
			return 0;
		}
		uint32_t id = string_intern(w, (const char *)p + AMP_REC_STRING_FIXED, s.h.len);
		if (!id)
			return -1;
		rm->strs[s.id] = id;
		return 0;
	}
	case AMP_REC_MODULE: {
		amp_rec_module m;
		memcpy(&m, p, sizeof m);
		module_key k;
		memset(&k, 0, sizeof k);
		k.bias = m.bias;
		k.lo = m.lo;
		k.hi = m.hi;
		k.path = ring_string(rm, m.path);
		int added;
		if (k.path && !keytab_intern(&w->modules, &k, &added))
			return -1;
		return 0;
	}
	case AMP_REC_CALLSITE: {
		amp_rec_callsite c;
		memcpy(&c, p, sizeof c);
		if (map_reserve(&rm->sites, &rm->n_sites, c.id) != 0) {
			w->rejected++;
			return 0;
		}
		callsite_key k;
		memset(&k, 0, sizeof k);
		k.path = ring_string(rm, c.paths[0]);
		k.offset = c.frames[0] - c.biases[0];
		int added;
		uint32_t id = keytab_intern(&w->callsites, &k, &added);
		if (!id)
			return -1;
		if (added) {
			if (id > w->cs_info_cap) {
				uint32_t nc = w->cs_info_cap ? w->cs_info_cap * 2 : 64;
				while (nc < id)
					nc *= 2;
				callsite_info *ni = realloc(w->cs_info, (size_t)nc * sizeof *ni);
				if (!ni)
					return -1;
				w->cs_info = ni;
				w->cs_info_cap = nc;
			}
			callsite_info *ci = &w->cs_info[id - 1];
			memset(ci, 0, sizeof *ci);
			ci->nframes = c.nframes;
			for (unsigned i = 0; i < c.nframes; i++) {
				ci->frames[i] = c.frames[i];
				ci->biases[i] = c.biases[i];
				ci->paths[i] = ring_string(rm, c.paths[i]);
			}
			sqlite3_bind_int64(w->st_callsite, 1, id);
			sqlite3_bind_int64(w->st_callsite, 2, (sqlite3_int64)c.frames[0]);
			bind_text_or_null(w->st_callsite, 3, text_of(w, k.path));
			sqlite3_bind_int64(w->st_callsite, 4, (sqlite3_int64)k.offset);
			if (run_stmt(w, w->st_callsite, "callsites") != 0)
				return -1;
		}
		rm->sites[c.id] = id;
		return 0;
	}
	case AMP_REC_OP: {
		amp_rec_op o;
		memcpy(&o, p, sizeof o);
		return put_op(w, ring, rm, &o);
	}
	case AMP_REC_COPY: {
		amp_rec_copy c;
		memcpy(&c, p, sizeof c);
		return put_copy(w, ring, rm, &c);
	}
	case AMP_REC_STEP_BEGIN: {
		amp_rec_step s;
		memcpy(&s, p, sizeof s);
		rm->has_open_step = 1;
		rm->open_step = s.step;
		rm->open_step_t = s.t_begin;
		return 0;
	}
	case AMP_REC_STEP_END: {
		amp_rec_step s;
		memcpy(&s, p, sizeof s);
		if (rm->has_open_step && rm->open_step == s.step)
			rm->has_open_step = 0;
		return put_step_row(w, ring, rm, s.step, s.t_begin, &s);
	}
	case AMP_REC_SCALE: {
		amp_rec_scale s;
		memcpy(&s, p, sizeof s);
		sqlite3_stmt *st = w->st_scale;
		sqlite3_bind_int64(st, 1, s.step);
		sqlite3_bind_int64(st, 2, to_ns(w, rm->clock, s.t));
		sqlite3_bind_double(st, 3, s.old_scale);
		sqlite3_bind_double(st, 4, s.new_scale);
		sqlite3_bind_text(st, 5, amp_scale_reason_name((amp_scale_reason)s.reason), -1,
		                  SQLITE_STATIC);
		return run_stmt(w, st, "loss_scale");
	}
	case AMP_REC_MEMORY: {
		amp_rec_memory m;
		memcpy(&m, p, sizeof m);
		sqlite3_stmt *st = w->st_mem;
		uint64_t total = 0;
		sqlite3_bind_int64(st, 1, m.step);
		sqlite3_bind_int64(st, 2, to_ns(w, rm->clock, m.t));
		for (int i = 0; i < AMP_MEM_NCAT; i++) {
			sqlite3_bind_int64(st, 3 + i, (sqlite3_int64)m.bytes[i]);
			total += m.bytes[i];
		}
		sqlite3_bind_int64(st, 8, (sqlite3_int64)total);
		sqlite3_bind_int64(st, 9, (sqlite3_int64)m.peak);
		return run_stmt(w, st, "memory");
	}
	case AMP_REC_META: {
		amp_rec_meta m;
		memcpy(&m, p, sizeof m);
		const char *text = (const char *)p + AMP_REC_META_FIXED;
		return put_meta(w, text, m.klen, text + m.klen, m.vlen);
	}
	case AMP_REC_COUNTER: {
		amp_rec_counter c;
		memcpy(&c, p, sizeof c);
		const char *name = text_of(w, ring_string(rm, c.name));
		if (!name) {
			w->rejected++;
			return 0;
		}
		int64_t total;
		if (counter_update(w, rm, ring_string(rm, c.name), c.scope, c.value, &total) != 0)
			return -1;
		char val[32];
		snprintf(val, sizeof val, "%" PRId64, total);
		return put_meta(w, name, strlen(name), val, strlen(val));
	}
	case AMP_REC_CRASH: {
		amp_rec_crash c;
		memcpy(&c, p, sizeof c);
		char frames[AMP_CRASH_FRAMES * 20 + 1];
		size_t used = 0;
		frames[0] = '\0';
		for (uint32_t i = 0; i < c.nframes; i++)
			used += (size_t)snprintf(frames + used, sizeof frames - used, "%s0x%" PRIx64,
			                         i ? "\n" : "", c.frames[i]);
		sqlite3_stmt *st = w->st_crash;
		sqlite3_bind_int64(st, 1, ring);
		sqlite3_bind_int(st, 2, c.signo);
		sqlite3_bind_text(st, 3, prof_signal_name(c.signo), -1, SQLITE_TRANSIENT);
		sqlite3_bind_int(st, 4, c.code);
		sqlite3_bind_int64(st, 5, (sqlite3_int64)c.addr);
		sqlite3_bind_int64(st, 6, to_ns(w, rm->clock, c.t));
		sqlite3_bind_text(st, 7, frames, -1, SQLITE_TRANSIENT);
		if (run_stmt(w, st, "crashes") != 0)
			return -1;
		crash_info *nc = realloc(w->crashes, (w->n_crashes + 1) * sizeof *nc);
		if (!nc)
			return -1;
		w->crashes = nc;
		crash_info *ci = &w->crashes[w->n_crashes++];
		ci->row = sqlite3_last_insert_rowid(w->db);
		ci->nframes = c.nframes;
		memcpy(ci->frames, c.frames, sizeof ci->frames);
		return 0;
	}
	case AMP_REC_TSTATS: {
		amp_rec_tstats t;
		memcpy(&t, p, sizeof t);
		int64_t op = op_type(w, rm, t.op, t.op_name);
		if (op < 0)
			return -1;
		sqlite3_stmt *st = w->st_tstats;
		sqlite3_bind_int64(st, 1, t.step);
		sqlite3_bind_int64(st, 2, (sqlite3_int64)t.seq);
		sqlite3_bind_text(st, 3, op_type_text(w, op), -1, SQLITE_STATIC);
		sqlite3_bind_text(st, 4, role_name(t.role), -1, SQLITE_STATIC);
		bind_text_or_null(st, 5, text_of(w, ring_string(rm, t.name)));
		sqlite3_bind_text(st, 6, prof_dtype_name(t.dtype), -1, SQLITE_STATIC);
		sqlite3_bind_int64(st, 7, (sqlite3_int64)t.count);
		sqlite3_bind_int64(st, 8, (sqlite3_int64)t.nan);
		sqlite3_bind_int64(st, 9, (sqlite3_int64)t.inf);
		sqlite3_bind_int64(st, 10, (sqlite3_int64)t.underflow);
		sqlite3_bind_int64(st, 11, (sqlite3_int64)t.near_overflow);
		sqlite3_bind_double(st, 12, t.min);
		sqlite3_bind_double(st, 13, t.max);
		sqlite3_bind_double(st, 14, t.absmax);
		sqlite3_bind_int(st, 15, t.origin ? 1 : 0);
		sqlite3_bind_blob(st, 16, t.exp_hist, sizeof t.exp_hist, SQLITE_TRANSIENT);
		bind_id_or_null(st, 17, ring_site(rm, t.callsite));
		if (t.flags & AMP_TSTATS_EXT) {
			sqlite3_bind_int64(st, 18, (sqlite3_int64)(t.ninf <= t.inf ? t.ninf : t.inf));
			sqlite3_bind_text(st, 19, amp_phase_name((amp_phase)t.phase), -1, SQLITE_STATIC);
		}
		sqlite3_bind_int64(st, 20, ring);
		if (run_stmt(w, st, "tensor_stats") != 0)
			return -1;
		if (!t.origin)
			return 0;
		sqlite3_bind_int64(w->st_nonfinite, 1, sqlite3_last_insert_rowid(w->db));
		return run_stmt(w, w->st_nonfinite, "nonfinite");
	}
	case AMP_REC_DUMP: {
		amp_rec_dump d;
		memcpy(&d, p, sizeof d);
		int64_t op = op_type(w, rm, d.op, d.op_name);
		if (op < 0)
			return -1;
		char shape[128];
		static const char *const reasons[] = {"nonfinite", "step", "manual"};
		shape_text(shape, sizeof shape, d.shape, d.ndim);
		size_t got = 0;
		void *data = read_spool(w, text_of(w, ring_string(rm, d.file)), d.bytes, &got);
		sqlite3_stmt *st = w->st_dump;
		sqlite3_bind_int64(st, 1, d.step);
		sqlite3_bind_int64(st, 2, (sqlite3_int64)d.seq);
		sqlite3_bind_text(st, 3, op_type_text(w, op), -1, SQLITE_STATIC);
		sqlite3_bind_text(st, 4, role_name(d.role), -1, SQLITE_STATIC);
		bind_text_or_null(st, 5, text_of(w, ring_string(rm, d.name)));
		sqlite3_bind_text(st, 6, prof_dtype_name(d.dtype), -1, SQLITE_STATIC);
		sqlite3_bind_text(st, 7, shape, -1, SQLITE_TRANSIENT);
		sqlite3_bind_text(st, 8, reasons[d.reason], -1, SQLITE_STATIC);
		sqlite3_bind_int64(st, 9, (sqlite3_int64)(data ? got : d.bytes));
		if (data)
			sqlite3_bind_blob64(st, 10, data, got, free);
		else
			sqlite3_bind_null(st, 10);
		return run_stmt(w, st, "dumps");
	}
	default:
		w->rejected++;
		return 0;
	}
}

/* ---- finish -------------------------------------------------------------------------------- */
typedef struct sym_req {
	uint32_t path;               /* module path string id */
	uint64_t addr;               /* file address to symbolize */
	prof_symbol sym;
} sym_req;

static int cmp_req(const void *a, const void *b)
{
	const sym_req *x = a, *y = b;
	if (x->path != y->path)
		return x->path < y->path ? -1 : 1;
	return x->addr < y->addr ? -1 : x->addr > y->addr;
}

static sym_req *find_req(sym_req *reqs, size_t n, uint32_t path, uint64_t addr)
{
	size_t lo = 0, hi = n;
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		sym_req key = {path, addr, {{0}, {0}, 0}};
		int c = cmp_req(&reqs[mid], &key);
		if (c == 0)
			return &reqs[mid];
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

/* Module (path, bias) holding an absolute pc, from the module records. */
static int module_for_pc(const prof_writer *w, uint64_t pc, uint32_t *path, uint64_t *bias)
{
	for (uint32_t id = 1; id <= w->modules.n; id++) {
		const module_key *m = keytab_key(&w->modules, id);
		if (pc >= m->lo && pc < m->hi) {
			*path = m->path;
			*bias = m->bias;
			return 1;
		}
	}
	return 0;
}

static const char *base_name(const char *path)
{
	const char *s = strrchr(path, '/');
	return s ? s + 1 : path;
}

/* Symbolizes every call-site frame and crash frame with one addr2line run per module. */
static int symbolize_all(prof_writer *w)
{
	size_t cap = 0, n = 0;
	for (uint32_t i = 0; i < w->callsites.n; i++)
		cap += w->cs_info[i].nframes;
	for (uint32_t i = 0; i < w->n_crashes; i++)
		cap += w->crashes[i].nframes;
	if (cap == 0)
		return 0;
	sym_req *reqs = calloc(cap, sizeof *reqs);
	if (!reqs)
		return -1;
	for (uint32_t i = 0; i < w->callsites.n; i++) {
		const callsite_info *ci = &w->cs_info[i];
		for (uint32_t f = 0; f < ci->nframes; f++)
			if (ci->paths[f] && ci->frames[f]) {
				reqs[n].path = ci->paths[f];
				reqs[n].addr = ci->frames[f] - ci->biases[f] - 1;
				n++;
			}
	}
	for (uint32_t i = 0; i < w->n_crashes; i++) {
		const crash_info *c = &w->crashes[i];
		for (uint32_t f = 0; f < c->nframes; f++) {
			uint32_t path;
			uint64_t bias;
			if (module_for_pc(w, c->frames[f], &path, &bias)) {
				reqs[n].path = path;
				reqs[n].addr = c->frames[f] - bias - (f ? 1 : 0);
				n++;
			}
		}
	}
	qsort(reqs, n, sizeof *reqs, cmp_req);
	size_t u = 0;
	for (size_t i = 0; i < n; i++)
		if (u == 0 || cmp_req(&reqs[u - 1], &reqs[i]) != 0)
			reqs[u++] = reqs[i];
	n = u;
	uint64_t *addrs = malloc((n ? n : 1) * sizeof *addrs);
	prof_symbol *syms = malloc((n ? n : 1) * sizeof *syms);
	int rc = -1;
	if (!addrs || !syms)
		goto out;
	for (size_t i = 0; i < n;) {
		size_t j = i;
		while (j < n && reqs[j].path == reqs[i].path) {
			addrs[j - i] = reqs[j].addr;
			j++;
		}
		prof_symbolize(text_of(w, reqs[i].path), addrs, j - i, syms);
		for (size_t k = i; k < j; k++)
			reqs[k].sym = syms[k - i];
		i = j;
	}
	sqlite3_stmt *st = NULL;
	if (sqlite3_prepare_v2(w->db,
	                       "UPDATE callsites SET function = ?, file = ?, line = ?, frames = ? "
	                       "WHERE id = ?", -1, &st, NULL) != SQLITE_OK)
		goto out;
	for (uint32_t i = 0; i < w->callsites.n; i++) {
		const callsite_info *ci = &w->cs_info[i];
		char frames[AMP_CALLSITE_FRAMES * 800];
		size_t used = 0;
		const prof_symbol *top = NULL;
		frames[0] = '\0';
		for (uint32_t f = 0; f < ci->nframes; f++) {
			sym_req *r = ci->paths[f] ? find_req(reqs, n, ci->paths[f],
			                                     ci->frames[f] - ci->biases[f] - 1)
			                          : NULL;
			if (f == 0)
				top = r ? &r->sym : NULL;
			if (used < sizeof frames)
				used += (size_t)snprintf(frames + used, sizeof frames - used, "%s%s %s:%d",
				                         f ? "\n" : "", r ? r->sym.function : "??",
				                         r ? r->sym.file : "??", r ? r->sym.line : 0);
		}
		sqlite3_bind_text(st, 1, top ? top->function : "??", -1, SQLITE_TRANSIENT);
		sqlite3_bind_text(st, 2, top ? top->file : "??", -1, SQLITE_TRANSIENT);
		sqlite3_bind_int(st, 3, top ? top->line : 0);
		sqlite3_bind_text(st, 4, frames, -1, SQLITE_TRANSIENT);
		sqlite3_bind_int64(st, 5, i + 1);
		if (run_stmt(w, st, "callsites") != 0)
			goto out_st;
	}
	sqlite3_finalize(st);
	st = NULL;
	if (sqlite3_prepare_v2(w->db, "UPDATE crashes SET frames = ? WHERE id = ?", -1, &st, NULL) !=
	    SQLITE_OK)
		goto out;
	for (uint32_t i = 0; i < w->n_crashes; i++) {
		const crash_info *c = &w->crashes[i];
		char frames[AMP_CRASH_FRAMES * 900];
		size_t used = 0;
		frames[0] = '\0';
		for (uint32_t f = 0; f < c->nframes && used < sizeof frames; f++) {
			uint32_t path = 0;
			uint64_t bias = 0;
			sym_req *r = NULL;
			if (module_for_pc(w, c->frames[f], &path, &bias))
				r = find_req(reqs, n, path, c->frames[f] - bias - (f ? 1 : 0));
			if (r)
				used += (size_t)snprintf(frames + used, sizeof frames - used,
				                         "%s%s %s:%d (%s+0x%" PRIx64 ")", f ? "\n" : "",
				                         r->sym.function, r->sym.file, r->sym.line,
				                         base_name(text_of(w, path)), c->frames[f] - bias);
			else
				used += (size_t)snprintf(frames + used, sizeof frames - used,
				                         "%s?? (0x%" PRIx64 ")", f ? "\n" : "", c->frames[f]);
		}
		sqlite3_bind_text(st, 1, frames, -1, SQLITE_TRANSIENT);
		sqlite3_bind_int64(st, 2, c->row);
		if (run_stmt(w, st, "crashes") != 0)
			goto out_st;
	}
	rc = 0;
out_st:
	sqlite3_finalize(st);
out:
	free(addrs);
	free(syms);
	free(reqs);
	return rc;
}

/* Stores the call count and total time gathered for signatures 1..n (calls[id], total[id]) with
 * update_sql, an UPDATE of (calls, total_ns) by id on table.  Returns 0 or -1 (reported). */
static int put_sig_totals(prof_writer *w, const char *update_sql, const char *table, uint32_t n,
                          const uint64_t *calls, const uint64_t *total)
{
	sqlite3_stmt *st = NULL;
	if (sqlite3_prepare_v2(w->db, update_sql, -1, &st, NULL) != SQLITE_OK)
		return db_error(w, table);
	int rc = 0;
	for (uint32_t id = 1; id <= n && rc == 0; id++) {
		sqlite3_bind_int64(st, 1, (sqlite3_int64)calls[id]);
		sqlite3_bind_int64(st, 2, (sqlite3_int64)total[id]);
		sqlite3_bind_int64(st, 3, id);
		rc = run_stmt(w, st, table);
	}
	sqlite3_finalize(st);
	return rc;
}

int prof_writer_finish(prof_writer *w)
{
	for (uint32_t i = 0; i < w->n_rings; i++) {
		ring_map *rm = &w->rings[i];
		if (rm->has_open_step) {
			if (put_step_row(w, i, rm, rm->open_step, rm->open_step_t, NULL) != 0)
				return -1;
			rm->has_open_step = 0;
		}
	}
	if (symbolize_all(w) != 0)
		prof_error(NULL, "call sites could not be symbolized");
	if (put_sig_totals(w, "UPDATE op_sigs SET calls = ?, total_ns = ? WHERE id = ?", "op_sigs",
	                   w->op_sigs.n, w->op_calls, w->op_total) != 0 ||
	    put_sig_totals(w, "UPDATE copy_sigs SET calls = ?, total_ns = ? WHERE id = ?",
	                   "copy_sigs", w->copy_sigs.n, w->cp_calls, w->cp_total) != 0)
		return -1;
	sqlite3_stmt *st = NULL;
	int rc = -1;
	if (sqlite3_prepare_v2(w->db, "INSERT INTO threads(id, pid, tid, dropped) VALUES (?,?,?,?)",
	                       -1, &st, NULL) != SQLITE_OK)
		return db_error(w, "threads");
	for (uint32_t i = 0; i < w->n_rings; i++) {
		if (!w->rings[i].seen)
			continue;
		sqlite3_bind_int64(st, 1, i);
		sqlite3_bind_int64(st, 2, w->rings[i].pid);
		sqlite3_bind_int64(st, 3, w->rings[i].tid);
		sqlite3_bind_int64(st, 4, (sqlite3_int64)w->rings[i].dropped);
		if (run_stmt(w, st, "threads") != 0)
			goto out;
	}
	if (sqlite3_exec(w->db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK)
		db_error(w, "commit");
	else
		rc = 0;
out:
	sqlite3_finalize(st);
	return rc;
}

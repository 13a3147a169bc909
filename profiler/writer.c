/* writer.c — turns decoded ring records into rows of the profile database: its lifecycle,
 * the string table, time conversion and the finish at the end of a run.  What each record type
 * writes is its row in records.c's table; call sites are symbolized by symbolize.c.
 *
 * Prepared statements, one open transaction committed by the collector at least every 100 ms.
 * Per-ring ids (strings, call sites) are mapped to database ids.  Ticks are converted to
 * nanoseconds since the run start by one increasing function refined as calibration pairs
 * arrive (never moving a time already converted).
 */
#include <inttypes.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "writer_int.h"

int prof_writer_fail(prof_writer *w, const char *what)
{
	prof_error(NULL, "cannot write '%s': %s (%s)", w->opts->output, sqlite3_errmsg(w->db), what);
	return -1;
}

int prof_writer_run(prof_writer *w, sqlite3_stmt *st, const char *what)
{
	int rc = sqlite3_step(st);
	sqlite3_reset(st);
	sqlite3_clear_bindings(st);
	if (rc != SQLITE_DONE)
		return prof_writer_fail(w, what);
	return 0;
}

/* run_stmt for statements whose every parameter is bound on every row (the per-event inserts):
 * no clear_bindings. */
int prof_writer_run_bound(prof_writer *w, sqlite3_stmt *st, const char *what)
{
	int rc = sqlite3_step(st);
	sqlite3_reset(st);
	if (rc != SQLITE_DONE)
		return prof_writer_fail(w, what);
	return 0;
}

/* ---- time ---------------------------------------------------------------------------------- */
/* Every pair refines the slope; a refined slope is put to use when its baseline has doubled
 * since the last one (a handful of segments per run), as a new segment that continues the
 * function where it stands, from a tick past every tick converted so far.  The first slope
 * replaces the placeholder of the first segment while nothing has been converted. */
void prof_writer_calibrate(prof_writer *w, uint64_t ticks, uint64_t mono)
{
	if (!w->cal_have) {
		w->cal_have = 1;
		w->cal_t0 = ticks;
		w->cal_m0 = mono;
		w->segs[0] = (struct prof_tick_seg){ticks, (double)(int64_t)(mono - w->run_start),
		                                    w->ns_per_tick};
		w->n_segs = 1;
		return;
	}
	if (!(ticks > w->cal_t0 && mono > w->cal_m0 + 5000000u))
		return;
	uint64_t span = mono - w->cal_m0;
	double k = (double)span / (double)(ticks - w->cal_t0);
	if (!(k > 0) || (w->cal_span && span < 2 * w->cal_span))
		return;
	w->ns_per_tick = k;
	w->cal_span = span;
	struct prof_tick_seg *last = &w->segs[w->n_segs - 1];
	if (w->max_tick == 0) {
		last->k = k;
		return;
	}
	if (w->n_segs == PROF_TICK_SEGS)
		return;
	uint64_t at = ticks > w->max_tick ? ticks : w->max_tick + 1;
	double ns = last->ns + (double)(at - last->t) * last->k;
	w->segs[w->n_segs++] = (struct prof_tick_seg){at, ns, k};
	w->max_tick = 0;
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

int64_t prof_writer_ns(prof_writer *w, unsigned clock, uint64_t t)
{
	if (clock == AMP_CLOCK_MONO || !w->cal_have)
		return (int64_t)(t - w->run_start);
	uint32_t i = w->n_segs - 1;
	while (i > 0 && t < w->segs[i].t)
		i--;
	const struct prof_tick_seg *g = &w->segs[i];
	if (i == w->n_segs - 1 && t > w->max_tick)
		w->max_tick = t;
	/* floor, so that the order of ticks is kept exactly */
	double d = g->ns + (double)(int64_t)(t - g->t) * g->k;
	return clamp_i64(floor(d));
}

int64_t prof_writer_dur(prof_writer *w, unsigned clock, uint64_t t0, uint64_t t1)
{
	if (t1 <= t0)
		return 0;
	int64_t d;
	/* hostile ticks can map to both ends of int64: saturate rather than overflow */
	if (__builtin_sub_overflow(prof_writer_ns(w, clock, t1), prof_writer_ns(w, clock, t0), &d))
		return INT64_MAX;
	return d > 0 ? d : 0;
}

/* ---- strings -------------------------------------------------------------------------------- */
static uint64_t hash_text(const char *s, size_t n)
{
	return prof_hash_bytes(s, n);
}

/* Database id of text (n bytes), inserting it.  0 on failure. */
uint32_t prof_writer_intern(prof_writer *w, const char *s, size_t n)
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
	if (prof_writer_run(w, w->st_string, "strings") != 0)
		return 0;
	return id;
}

const char *prof_writer_text(const prof_writer *w, uint32_t id)
{
	return id && id <= w->n_texts ? w->texts[id] : NULL;
}

static ring_map *ring_get(prof_writer *w, uint32_t ring)
{
	if (ring >= w->n_rings)
		return NULL;
	return &w->rings[ring];
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
	 "samples, detail, thread, loss_state, grad_norm, clipped, micro_batches, context) "
	 "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)"},
	{offsetof(prof_writer, st_scale),
	 "INSERT INTO loss_scale(step, t_ns, old_scale, new_scale, reason, thread, context) "
	 "VALUES (?,?,?,?,?,?,?)"},
	{offsetof(prof_writer, st_mem),
	 "INSERT INTO memory(step, t_ns, master_weights, working_copies, activations, "
	 "grads, optimizer_state, total, peak, thread, master_weights_unopt, working_copies_unopt, "
	 "activations_unopt, grads_unopt, optimizer_state_unopt, total_unopt, peak_unopt, "
	 "context) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)"},
	{offsetof(prof_writer, st_ctx_end),
	 "INSERT INTO context_ends(thread, context, step, t_ns) VALUES (?,?,?,?)"},
	{offsetof(prof_writer, st_meta), "INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)"},
	{offsetof(prof_writer, st_tstats),
	 "INSERT INTO tensor_stats(step, seq, op, role, name, dtype, count, nan, inf, "
	 "underflow, near_overflow, min, max, absmax, origin, exp_hist, callsite, "
	 "neg_inf, phase, thread, src_seq, cast_source, tiny_at_nonfinite, param_grad) "
	 "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)"},
	{offsetof(prof_writer, st_dump),
	 "INSERT INTO dumps(step, seq, op, role, name, dtype, shape, reason, bytes, data) "
	 "VALUES (?,?,?,?,?,?,?,?,?,?)"},
	{offsetof(prof_writer, st_comm),
	 "INSERT INTO comm(step, kind, bytes, dtype, bucket, start_ns, dur_ns, wait_ns, "
	 "local_overflow, thread) VALUES (?,?,?,?,?,?,?,?,?,?)"},
	{offsetof(prof_writer, st_crash),
	 "INSERT INTO crashes(thread, signo, signal, code, addr, t_ns, frames) "
	 "VALUES (?,?,?,?,?,?,?)"},
	/* origins are listed as they arrive, so finalize never scans tensor_stats for them;
	 * it classifies them (class and the step's columns) */
	/* an op type a producer named that this schema does not know: gray until a list says */
	{offsetof(prof_writer, st_optype),
	 "INSERT INTO op_types(name, list) SELECT ?1, 'gray' WHERE NOT EXISTS "
	 "(SELECT 1 FROM op_types WHERE name = ?1)"},
	{offsetof(prof_writer, st_thread), "INSERT INTO threads(id, pid, tid, dropped) VALUES (?,?,?,?)"},
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
	for (uint32_t i = 0; i < w->n_rings; i++)
		w->rings[i].thread = i;
	w->next_thread = w->n_rings;
	for (size_t i = 0; i < N_WRITER_STMTS; i++)
		if (sqlite3_prepare_v3(db, writer_stmts[i].sql, -1, SQLITE_PREPARE_PERSISTENT,
		                       writer_stmt(w, i), NULL) != SQLITE_OK) {
			prof_writer_fail(w, "prepare");
			goto fail;
		}
	if (sqlite3_exec(db, "BEGIN", NULL, NULL, NULL) != SQLITE_OK) {
		prof_writer_fail(w, "begin");
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
	prof_keytab_release(&w->modules);
	prof_keytab_release(&w->callsites);
	prof_keytab_release(&w->op_sigs);
	prof_keytab_release(&w->copy_sigs);
	prof_keytab_release(&w->op_types);
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
	free(w->retired);
	free(w);
}

int prof_writer_commit(prof_writer *w)
{
	if (sqlite3_exec(w->db, "COMMIT; BEGIN", NULL, NULL, NULL) != SQLITE_OK)
		return prof_writer_fail(w, "commit");
	return 0;
}

uint64_t prof_writer_events(const prof_writer *w) { return w->events; }
uint64_t prof_writer_rejected(const prof_writer *w) { return w->rejected; }
int64_t prof_writer_last_step(const prof_writer *w) { return w->last_step; }

void prof_writer_thread(prof_writer *w, uint32_t ring, uint32_t pid, uint32_t tid,
                        uint64_t dropped, const uint64_t dropped_kind[AMP_DROP_KINDS])
{
	ring_map *rm = ring_get(w, ring);
	if (!rm)
		return;
	rm->seen = 1;
	rm->pid = pid;
	rm->tid = tid;
	rm->dropped = dropped;
	memcpy(rm->dropped_kind, dropped_kind, sizeof rm->dropped_kind);
}

/* The threads row of ring map rm.  0 or -1 (reported). */
static int thread_row(prof_writer *w, const ring_map *rm)
{
	sqlite3_bind_int64(w->st_thread, 1, rm->thread);
	sqlite3_bind_int64(w->st_thread, 2, rm->pid);
	sqlite3_bind_int64(w->st_thread, 3, rm->tid);
	sqlite3_bind_int64(w->st_thread, 4, (sqlite3_int64)rm->dropped);
	return prof_writer_run(w, w->st_thread, "threads");
}

int prof_writer_ring_retire(prof_writer *w, uint32_t ring)
{
	ring_map *rm = ring_get(w, ring);
	if (!rm)
		return 0;
	if (rm->has_open_step &&
	    prof_writer_step_row(w, ring, rm, rm->open_step, rm->open_step_t, NULL) != 0)
		return -1;
	if (rm->seen && thread_row(w, rm) != 0)
		return -1;
	w->dropped_retired += rm->dropped;
	for (int k = 0; k < AMP_DROP_KINDS; k++)
		w->dropped_kind_retired[k] += rm->dropped_kind[k];
	/* the ring's counters move to the retired ones (taken off the ring first, so that the
	 * totals stored meanwhile count them once) */
	ring_counter *counters = rm->counters;
	uint32_t n = rm->n_counters;
	uint32_t pid = rm->pid;
	rm->counters = NULL;
	rm->n_counters = rm->cap_counters = 0;
	int rc = 0;
	for (uint32_t i = 0; i < n && rc == 0; i++)
		rc = prof_writer_counter_retire(w, counters[i].name, counters[i].scope, pid,
		                                counters[i].value);
	free(counters);
	free(rm->strs);
	free(rm->sites);
	uint32_t thread = w->next_thread++;
	memset(rm, 0, sizeof *rm);
	rm->thread = thread;
	return rc;
}

int prof_writer_lost_counter(prof_writer *w, const char *name, int64_t value)
{
	uint32_t id = prof_writer_intern(w, name, strlen(name));
	if (!id)
		return -1;
	char key[AMP_LOST_NAME + 16], val[32];
	snprintf(key, sizeof key, "unrecorded.%s", name);
	snprintf(val, sizeof val, "%" PRId64, value);
	sqlite3_bind_text(w->st_meta, 1, key, -1, SQLITE_TRANSIENT);
	sqlite3_bind_text(w->st_meta, 2, val, -1, SQLITE_TRANSIENT);
	if (prof_writer_run(w, w->st_meta, "meta") != 0)
		return -1;
	return prof_writer_counter_retire(w, id, AMP_COUNTER_RING, 0, value);
}

uint64_t prof_writer_dropped(const prof_writer *w, uint64_t by_kind[AMP_DROP_KINDS])
{
	uint64_t total = w->dropped_retired;
	memcpy(by_kind, w->dropped_kind_retired, sizeof w->dropped_kind_retired);
	for (uint32_t i = 0; i < w->n_rings; i++) {
		total += w->rings[i].dropped;
		for (int k = 0; k < AMP_DROP_KINDS; k++)
			by_kind[k] += w->rings[i].dropped_kind[k];
	}
	return total;
}

/* ---- records: one row of records.c's table each -------------------------------------------- */
int prof_writer_put(prof_writer *w, uint32_t ring, unsigned clock, const prof_record *r)
{
	ring_map *rm = ring_get(w, ring);
	if (!rm || r->type == AMP_REC_PAD || !r->rec)
		return 0;
	rm->clock = clock == AMP_CLOCK_MONO ? AMP_CLOCK_MONO : AMP_CLOCK_TSC;
	w->events++;
	if (r->type >= AMP_REC_TYPE_COUNT || !prof_rec_types[r->type].write) {
		w->rejected++;
		return 0;
	}
	return prof_rec_types[r->type].write(w, ring, rm, r->rec);
}

/* ---- finish -------------------------------------------------------------------------------- */
/* Stores the call count and total time gathered for signatures 1..n (calls[id], total[id]) with
 * update_sql, an UPDATE of (calls, total_ns) by id on table.  Returns 0 or -1 (reported). */
static int put_sig_totals(prof_writer *w, const char *update_sql, const char *table, uint32_t n,
                          const uint64_t *calls, const uint64_t *total)
{
	sqlite3_stmt *st = NULL;
	if (sqlite3_prepare_v2(w->db, update_sql, -1, &st, NULL) != SQLITE_OK)
		return prof_writer_fail(w, table);
	int rc = 0;
	for (uint32_t id = 1; id <= n && rc == 0; id++) {
		sqlite3_bind_int64(st, 1, (sqlite3_int64)calls[id]);
		sqlite3_bind_int64(st, 2, (sqlite3_int64)total[id]);
		sqlite3_bind_int64(st, 3, id);
		rc = prof_writer_run(w, st, table);
	}
	sqlite3_finalize(st);
	return rc;
}

int prof_writer_finish(prof_writer *w)
{
	for (uint32_t i = 0; i < w->n_rings; i++) {
		ring_map *rm = &w->rings[i];
		if (rm->has_open_step) {
			if (prof_writer_step_row(w, i, rm, rm->open_step, rm->open_step_t, NULL) != 0)
				return -1;
			rm->has_open_step = 0;
		}
	}
	if (prof_writer_symbolize(w) != 0)
		prof_error(NULL, "call sites could not be symbolized");
	if (put_sig_totals(w, "UPDATE op_sigs SET calls = ?, total_ns = ? WHERE id = ?", "op_sigs",
	                   w->op_sigs.n, w->op_calls, w->op_total) != 0 ||
	    put_sig_totals(w, "UPDATE copy_sigs SET calls = ?, total_ns = ? WHERE id = ?",
	                   "copy_sigs", w->copy_sigs.n, w->cp_calls, w->cp_total) != 0)
		return -1;
	for (uint32_t i = 0; i < w->n_rings; i++)
		if (w->rings[i].seen && thread_row(w, &w->rings[i]) != 0)
			return -1;
	if (sqlite3_exec(w->db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK)
		return prof_writer_fail(w, "commit");
	return 0;
}

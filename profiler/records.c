/* records.c — the record types of the wire format as one table: the slots each spans, the
 * checks that make a copied record valid (run by the decoder, decode.c) and the row it writes
 * (run by the writer, writer.c), with the helpers the rows need.
 *
 * Counters are running totals: the latest value of each ring is kept, and meta holds their
 * sum over rings (or, for process-wide ones, over processes), so several producing threads
 * add up instead of overwriting each other.  Non-finite origins are listed in `nonfinite` as
 * they arrive, for finalize to classify.  Repeated parts of op and copy events are interned as
 * signatures (op_sigs, copy_sigs) so event rows stay small.  Content from the application is
 * untrusted: unknown ids map to NULL, out-of-range values are clamped.
 */
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "writer_int.h"

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
 * id), else the runtime's name of op.  0 when neither names a type (stored as "?"), -1 on an
 * SQLite or memory failure (reported). */
static int64_t op_type(prof_writer *w, const ring_map *rm, unsigned op, uint32_t op_name)
{
	uint32_t id = ring_string(rm, op_name);
	if (!id && op < AMP_OP_COUNT) {
		id = w->op_str[op];
		if (!id) {
			const char *name = amp_op_name((amp_op_type)op);
			id = w->op_str[op] = prof_writer_intern(w, name, strlen(name));
			if (!id)
				return -1;
		}
	}
	return id;
}

/* Adds the op_types row of op type id (from op_type) the first time a name this schema does
 * not know is seen: called for a new signature, not per event.  0 or -1 (reported). */
static int op_type_listed(prof_writer *w, int64_t id)
{
	int added;
	uint32_t key = (uint32_t)id;
	if (id <= 0)
		return 0;
	if (!prof_keytab_intern(&w->op_types, &key, &added)) {
		prof_error(NULL, "out of memory");
		return -1;
	}
	if (added && amp_op_from_name(prof_writer_text(w, key)) < 0) {
		sqlite3_bind_text(w->st_optype, 1, prof_writer_text(w, key), -1, SQLITE_STATIC);
		if (prof_writer_run(w, w->st_optype, "op_types") != 0)
			return -1;
	}
	return 0;
}

static const char *op_type_text(const prof_writer *w, int64_t id)
{
	const char *t = id > 0 ? prof_writer_text(w, (uint32_t)id) : NULL;
	return t ? t : "?";
}

static int put_op(prof_writer *w, uint32_t ring, ring_map *rm, const amp_rec_op *o)
{
	(void)ring;
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
	uint32_t sig = prof_keytab_intern(&w->op_sigs, &k, &added);
	if (!sig || grow_u64(&w->op_calls, &w->op_total, &w->op_agg_cap, sig + 1) != 0) {
		prof_error(NULL, "out of memory");
		return -1;
	}
	if (added) {
		if (op_type_listed(w, op) != 0)
			return -1;
		char shape[128];
		shape_text(shape, sizeof shape, k.shape, k.ndim);
		sqlite3_stmt *st = w->st_opsig;
		sqlite3_bind_int64(st, 1, sig);
		sqlite3_bind_text(st, 2, op_type_text(w, k.op), -1, SQLITE_STATIC);
		sqlite3_bind_text(st, 3, amp_phase_name((amp_phase)k.phase), -1, SQLITE_STATIC);
		sqlite3_bind_text(st, 4, prof_dtype_name(k.exec), -1, SQLITE_STATIC);
		sqlite3_bind_text(st, 5, prof_dtype_name(k.in), -1, SQLITE_STATIC);
		sqlite3_bind_text(st, 6, prof_dtype_name(k.out), -1, SQLITE_STATIC);
		bind_text_or_null(st, 7, prof_writer_text(w, k.label));
		sqlite3_bind_text(st, 8, shape, -1, SQLITE_TRANSIENT);
		sqlite3_bind_int64(st, 9, (sqlite3_int64)k.flops);
		sqlite3_bind_int64(st, 10, (sqlite3_int64)k.bytes);
		sqlite3_bind_int(st, 11, k.aligned);
		bind_id_or_null(st, 12, k.callsite);
		bind_text_or_null(st, 13, k.engine < AMP_ENGINE_COUNT
		                              ? amp_engine_name((amp_engine)k.engine) : NULL);
		if (prof_writer_run(w, st, "op_sigs") != 0)
			return -1;
	}
	int64_t d = prof_writer_dur(w, rm->clock, o->t_begin, o->t_end);
	w->op_calls[sig]++;
	w->op_total[sig] += (uint64_t)d;
	sqlite3_stmt *st = w->st_op;
	sqlite3_bind_int64(st, 1, o->step);
	sqlite3_bind_int64(st, 2, (sqlite3_int64)o->seq);
	sqlite3_bind_int64(st, 3, sig);
	sqlite3_bind_int64(st, 4, prof_writer_ns(w, rm->clock, o->t_begin));
	sqlite3_bind_int64(st, 5, d);
	sqlite3_bind_int64(st, 6, rm->thread);
	return prof_writer_run_bound(w, st, "op_events");
}

static int put_copy(prof_writer *w, uint32_t ring, ring_map *rm, const amp_rec_copy *c)
{
	(void)ring;
	copy_sig_key k;
	memset(&k, 0, sizeof k);
	k.bytes = c->bytes;
	k.label = ring_string(rm, c->label);
	k.callsite = ring_site(rm, c->callsite);
	k.kind = c->kind;
	k.src = c->src_dtype;
	k.dst = c->dst_dtype;
	int added;
	uint32_t sig = prof_keytab_intern(&w->copy_sigs, &k, &added);
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
		bind_text_or_null(st, 6, prof_writer_text(w, k.label));
		bind_id_or_null(st, 7, k.callsite);
		if (prof_writer_run(w, st, "copy_sigs") != 0)
			return -1;
	}
	int64_t d = prof_writer_dur(w, rm->clock, c->t_begin, c->t_end);
	w->cp_calls[sig]++;
	w->cp_total[sig] += (uint64_t)d;
	sqlite3_stmt *st = w->st_copy;
	sqlite3_bind_int64(st, 1, c->step);
	sqlite3_bind_int64(st, 2, sig);
	sqlite3_bind_int64(st, 3, prof_writer_ns(w, rm->clock, c->t_begin));
	sqlite3_bind_int64(st, 4, d);
	sqlite3_bind_int64(st, 5, rm->thread);
	return prof_writer_run_bound(w, st, "copy_events");
}

int prof_writer_step_row(prof_writer *w, uint32_t ring, ring_map *rm, int64_t step,
                        uint64_t t_begin, const amp_rec_step *s)
{
	(void)ring;
	sqlite3_stmt *st = w->st_step;
	sqlite3_bind_int64(st, 1, step);
	sqlite3_bind_int64(st, 2, prof_writer_ns(w, rm->clock, t_begin));
	if (s) {
		sqlite3_bind_int64(st, 3, prof_writer_dur(w, rm->clock, s->t_begin, s->t_end));
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
		const char *state = NULL;
		if (isfinite(s->loss))
			state = "finite";
		else if (s->flags & AMP_STEP_LOSS)
			state = isnan(s->loss) ? "nan" : s->loss < 0 ? "-inf" : "inf";
		if (state)
			sqlite3_bind_text(st, 11, state, -1, SQLITE_STATIC);
		else
			sqlite3_bind_null(st, 11);
		if (isfinite(s->grad_norm))
			sqlite3_bind_double(st, 12, s->grad_norm);
		else
			sqlite3_bind_null(st, 12);
		if (isfinite(s->grad_norm) || s->clipped)
			sqlite3_bind_int(st, 13, s->clipped ? 1 : 0);
		else
			sqlite3_bind_null(st, 13);
		sqlite3_bind_int64(st, 14, s->micro_batches);
	}
	sqlite3_bind_int(st, 9, step_detailed(w->opts, step));
	sqlite3_bind_int64(st, 10, rm->thread);
	uint32_t ctx = s ? s->ctx : rm->open_step_ctx; /* an unended step: its begin's */
	if (ctx)
		sqlite3_bind_int64(st, 15, ctx);
	if (step > w->last_step)
		w->last_step = step;
	return prof_writer_run(w, st, "steps");
}

static const char *meta_reserved[] = {
	"schema_version", "ampprof_version", "wire_version", "command", "argv", "cwd", "pid",
	"host", "cpu", "cpu_vendor", "cpu_half_features", "start_time", "start_mono_ns", "clock",
	"ticks_per_ns", "end", "exit_status", "exit_signal", "complete", "events", "dropped_events",
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
	return prof_writer_run(w, w->st_meta, "meta");
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

/* The run's total of counter name (database string id) in *total: ring-scoped values (each
 * live ring's latest, plus the sums kept for retired rings and for threads that had no ring)
 * summed; process-scoped ones as the largest value per process, live and retired rings alike,
 * summed over processes (see amp_rec_counter).  Returns 0 or -1 (out of memory). */
static int counter_total(const prof_writer *w, uint32_t name, int64_t *total)
{
	struct cand {
		uint32_t pid;
		int64_t value;
	} *c = malloc(((size_t)w->n_rings + w->n_retired + 1) * sizeof *c);
	if (!c) {
		prof_error(NULL, "out of memory");
		return -1;
	}
	size_t n = 0;
	uint64_t sum = 0; /* wraps instead of overflowing on hostile values */
	for (uint32_t a = 0; a < w->n_rings; a++) {
		const ring_map *ra = &w->rings[a];
		for (uint32_t k = 0; k < ra->n_counters; k++) {
			if (ra->counters[k].name != name)
				continue;
			if (ra->counters[k].scope == AMP_COUNTER_PROCESS)
				c[n++] = (struct cand){ra->pid, ra->counters[k].value};
			else
				sum += (uint64_t)ra->counters[k].value;
		}
	}
	for (uint32_t e = 0; e < w->n_retired; e++) {
		const retired_counter *rc = &w->retired[e];
		if (rc->name != name)
			continue;
		if (rc->scope == AMP_COUNTER_PROCESS)
			c[n++] = (struct cand){rc->pid, rc->value};
		else
			sum += (uint64_t)rc->value;
	}
	/* a process counts once: its largest value, the first of them on a tie */
	for (size_t i = 0; i < n; i++) {
		int beaten = 0;
		for (size_t j = 0; j < n && !beaten; j++)
			beaten = j != i && c[j].pid == c[i].pid &&
			         (c[j].value > c[i].value || (c[j].value == c[i].value && j < i));
		if (!beaten)
			sum += (uint64_t)c[i].value;
	}
	free(c);
	*total = (int64_t)sum;
	return 0;
}

int prof_writer_counter_store(prof_writer *w, uint32_t name)
{
	const char *text = prof_writer_text(w, name);
	int64_t total;
	if (!text)
		return 0;
	if (counter_total(w, name, &total) != 0)
		return -1;
	char val[32];
	snprintf(val, sizeof val, "%" PRId64, total);
	return put_meta(w, text, strlen(text), val, strlen(val));
}

int prof_writer_counter_retire(prof_writer *w, uint32_t name, uint32_t scope, uint32_t pid,
                               int64_t value)
{
	scope = scope == AMP_COUNTER_PROCESS ? scope : AMP_COUNTER_RING;
	if (scope == AMP_COUNTER_RING)
		pid = 0;
	uint32_t i = 0;
	while (i < w->n_retired && !(w->retired[i].name == name && w->retired[i].scope == scope &&
	                             w->retired[i].pid == pid))
		i++;
	if (i == w->n_retired) {
		if (w->n_retired == w->cap_retired) {
			uint32_t nc = w->cap_retired ? w->cap_retired * 2 : 16;
			retired_counter *n = realloc(w->retired, (size_t)nc * sizeof *n);
			if (!n) {
				prof_error(NULL, "out of memory");
				return -1;
			}
			w->retired = n;
			w->cap_retired = nc;
		}
		w->retired[w->n_retired++] = (retired_counter){name, scope, pid, 0};
		if (scope == AMP_COUNTER_PROCESS)
			w->retired[i].value = value;
	}
	retired_counter *rc = &w->retired[i];
	if (scope == AMP_COUNTER_RING)
		rc->value = (int64_t)((uint64_t)rc->value + (uint64_t)value);
	else if (value > rc->value)
		rc->value = value;
	return prof_writer_counter_store(w, name);
}

/* Records value as ring rm's latest for counter name (database string id).  An unknown scope
 * counts as ring-scoped.  Returns 0 or -1 (out of memory). */
static int counter_update(ring_map *rm, uint32_t name, uint32_t scope, int64_t value)
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
	return 0;
}

/* ---- validation (the decoder) ------------------------------------------------------------- */
static unsigned slots_for(size_t bytes)
{
	return (unsigned)((bytes + AMP_SLOT_SIZE - 1) / AMP_SLOT_SIZE);
}

static int valid_string(const unsigned char *buf, unsigned n)
{
	amp_rec_hdr h;
	memcpy(&h, buf, sizeof h);
	if (h.len > AMP_STRING_MAX || n != slots_for(AMP_REC_STRING_FIXED + h.len))
		return 0;
	amp_rec_string s;
	memcpy(&s, buf, sizeof s);
	return s.id != 0;
}

static int valid_meta(const unsigned char *buf, unsigned n)
{
	amp_rec_hdr h;
	memcpy(&h, buf, sizeof h);
	amp_rec_meta m;
	memcpy(&m, buf, sizeof m);
	size_t total = (size_t)m.klen + m.vlen;
	return m.klen > 0 && total == h.len &&
	       total <= AMP_REC_MAX_SLOTS * AMP_SLOT_SIZE - AMP_REC_META_FIXED &&
	       n == slots_for(AMP_REC_META_FIXED + total);
}

static int valid_callsite(const unsigned char *buf, unsigned n)
{
	(void)n;
	amp_rec_callsite c;
	memcpy(&c, buf, sizeof c);
	return c.id != 0 && c.nframes >= 1 && c.nframes <= AMP_CALLSITE_FRAMES;
}

static int valid_crash(const unsigned char *buf, unsigned n)
{
	(void)n;
	amp_rec_crash c;
	memcpy(&c, buf, sizeof c);
	return c.nframes <= AMP_CRASH_FRAMES;
}

/* Step numbers count from 0; -1 is before the first step (a model's set-up). */
#define STEP_OK(s) ((s) >= -1)

static int valid_op(const unsigned char *buf, unsigned n)
{
	(void)n;
	amp_rec_op o;
	memcpy(&o, buf, sizeof o);
	return (o.op < AMP_OP_COUNT || o.op_name != 0) && o.phase <= AMP_PHASE_OPTIMIZER &&
	       o.ndim <= 4 && STEP_OK(o.step);
}

static int valid_step(const unsigned char *buf, unsigned n)
{
	(void)n;
	amp_rec_step st;
	memcpy(&st, buf, sizeof st);
	return st.step >= 0;
}

static int valid_copy(const unsigned char *buf, unsigned n)
{
	(void)n;
	amp_rec_copy c;
	memcpy(&c, buf, sizeof c);
	return c.kind <= AMP_COPY_MASTER && STEP_OK(c.step);
}

static int valid_scale(const unsigned char *buf, unsigned n)
{
	(void)n;
	amp_rec_scale s;
	memcpy(&s, buf, sizeof s);
	return s.reason <= AMP_SCALE_STATIC;
}

static int valid_tstats(const unsigned char *buf, unsigned n)
{
	(void)n;
	amp_rec_tstats t;
	memcpy(&t, buf, sizeof t);
	return (t.op < AMP_OP_COUNT || t.op_name != 0) && t.role <= 2 &&
	       (!(t.flags & AMP_TSTATS_EXT) || t.phase <= AMP_PHASE_OPTIMIZER) && STEP_OK(t.step);
}

static int valid_dump(const unsigned char *buf, unsigned n)
{
	(void)n;
	amp_rec_dump d;
	memcpy(&d, buf, sizeof d);
	return (d.op < AMP_OP_COUNT || d.op_name != 0) && d.role <= 2 && d.ndim <= 4 &&
	       d.reason <= 2 && d.file != 0 && STEP_OK(d.step);
}

/* ---- rows (the writer) ------------------------------------------------------------------- */
static int write_clock(prof_writer *w, uint32_t ring, ring_map *rm, const unsigned char *p)
{
	(void)ring;
	amp_rec_clock c;
	memcpy(&c, p, sizeof c);
	if (rm->clock == AMP_CLOCK_TSC)
		prof_writer_calibrate(w, c.ticks, c.mono_ns);
	return 0;
}

static int write_string(prof_writer *w, uint32_t ring, ring_map *rm, const unsigned char *p)
{
	(void)ring;
	amp_rec_string s;
	memcpy(&s, p, sizeof s);
	if (map_reserve(&rm->strs, &rm->n_strs, s.id) != 0) {
		w->rejected++;
		return 0;
	}
	uint32_t id = prof_writer_intern(w, (const char *)p + AMP_REC_STRING_FIXED, s.h.len);
	if (!id)
		return -1;
	rm->strs[s.id] = id;
	return 0;
}

static int write_module(prof_writer *w, uint32_t ring, ring_map *rm, const unsigned char *p)
{
	(void)ring;
	amp_rec_module m;
	memcpy(&m, p, sizeof m);
	module_key k;
	memset(&k, 0, sizeof k);
	k.bias = m.bias;
	k.lo = m.lo;
	k.hi = m.hi;
	k.path = ring_string(rm, m.path);
	int added;
	if (k.path && !prof_keytab_intern(&w->modules, &k, &added))
		return -1;
	return 0;
}

static int write_callsite(prof_writer *w, uint32_t ring, ring_map *rm, const unsigned char *p)
{
	(void)ring;
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
	uint32_t id = prof_keytab_intern(&w->callsites, &k, &added);
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
		bind_text_or_null(w->st_callsite, 3, prof_writer_text(w, k.path));
		sqlite3_bind_int64(w->st_callsite, 4, (sqlite3_int64)k.offset);
		if (prof_writer_run(w, w->st_callsite, "callsites") != 0)
			return -1;
	}
	rm->sites[c.id] = id;
	return 0;
}

static int write_op(prof_writer *w, uint32_t ring, ring_map *rm, const unsigned char *p)
{
	amp_rec_op o;
	memcpy(&o, p, sizeof o);
	return put_op(w, ring, rm, &o);
}

static int write_copy(prof_writer *w, uint32_t ring, ring_map *rm, const unsigned char *p)
{
	amp_rec_copy c;
	memcpy(&c, p, sizeof c);
	return put_copy(w, ring, rm, &c);
}

static int write_step_begin(prof_writer *w, uint32_t ring, ring_map *rm, const unsigned char *p)
{
	(void)w;
	(void)ring;
	amp_rec_step s;
	memcpy(&s, p, sizeof s);
	rm->has_open_step = 1;
	rm->open_step = s.step;
	rm->open_step_t = s.t_begin;
	rm->open_step_ctx = s.ctx;
	return 0;
}

static int write_step_end(prof_writer *w, uint32_t ring, ring_map *rm, const unsigned char *p)
{
	amp_rec_step s;
	memcpy(&s, p, sizeof s);
	if (rm->has_open_step && rm->open_step == s.step)
		rm->has_open_step = 0;
	return prof_writer_step_row(w, ring, rm, s.step, s.t_begin, &s);
}

static int write_scale(prof_writer *w, uint32_t ring, ring_map *rm, const unsigned char *p)
{
	amp_rec_scale s;
	memcpy(&s, p, sizeof s);
	sqlite3_stmt *st = w->st_scale;
	sqlite3_bind_int64(st, 1, s.step);
	sqlite3_bind_int64(st, 2, prof_writer_ns(w, rm->clock, s.t));
	sqlite3_bind_double(st, 3, s.old_scale);
	sqlite3_bind_double(st, 4, s.new_scale);
	sqlite3_bind_text(st, 5, amp_scale_reason_name((amp_scale_reason)s.reason), -1,
	                  SQLITE_STATIC);
	sqlite3_bind_int64(st, 6, ring);
	if (s.ctx) /* else NULL: prof_writer_run cleared the bindings */
		sqlite3_bind_int64(st, 7, s.ctx);
	return prof_writer_run(w, st, "loss_scale");
}

static int write_memory(prof_writer *w, uint32_t ring, ring_map *rm, const unsigned char *p)
{
	amp_rec_memory m;
	memcpy(&m, p, sizeof m);
	if (m.flags & AMP_MEMREC_END) {
		sqlite3_stmt *st = w->st_ctx_end;
		sqlite3_bind_int64(st, 1, ring);
		sqlite3_bind_int64(st, 2, m.ctx);
		sqlite3_bind_int64(st, 3, m.step);
		sqlite3_bind_int64(st, 4, prof_writer_ns(w, rm->clock, m.t));
		return prof_writer_run(w, st, "context_ends");
	}
	sqlite3_stmt *st = w->st_mem;
	uint64_t total = 0;
	sqlite3_bind_int64(st, 1, m.step);
	sqlite3_bind_int64(st, 2, prof_writer_ns(w, rm->clock, m.t));
	for (int i = 0; i < AMP_MEM_NCAT; i++) {
		sqlite3_bind_int64(st, 3 + i, (sqlite3_int64)m.bytes[i]);
		total += m.bytes[i];
	}
	sqlite3_bind_int64(st, 8, (sqlite3_int64)total);
	sqlite3_bind_int64(st, 9, (sqlite3_int64)m.peak);
	sqlite3_bind_int64(st, 10, ring);
	/* without memory_optimize: NULL when it was off (nothing differs) */
	total = 0;
	for (int i = 0; i < AMP_MEM_NCAT; i++) {
		if (m.flags & AMP_MEMREC_UNOPT)
			sqlite3_bind_int64(st, 11 + i, (sqlite3_int64)m.bytes_unopt[i]);
		else
			sqlite3_bind_null(st, 11 + i);
		total += m.bytes_unopt[i];
	}
	if (m.flags & AMP_MEMREC_UNOPT) {
		sqlite3_bind_int64(st, 16, (sqlite3_int64)total);
		sqlite3_bind_int64(st, 17, (sqlite3_int64)m.peak_unopt);
	} else {
		sqlite3_bind_null(st, 16);
		sqlite3_bind_null(st, 17);
	}
	if (m.ctx) /* else NULL, as the context of the step rows */
		sqlite3_bind_int64(st, 18, m.ctx);
	return prof_writer_run(w, st, "memory");
}

static int write_meta(prof_writer *w, uint32_t ring, ring_map *rm, const unsigned char *p)
{
	(void)ring;
	(void)rm;
	amp_rec_meta m;
	memcpy(&m, p, sizeof m);
	const char *text = (const char *)p + AMP_REC_META_FIXED;
	return put_meta(w, text, m.klen, text + m.klen, m.vlen);
}

static int write_counter(prof_writer *w, uint32_t ring, ring_map *rm, const unsigned char *p)
{
	(void)ring;
	amp_rec_counter c;
	memcpy(&c, p, sizeof c);
	const char *name = prof_writer_text(w, ring_string(rm, c.name));
	if (!name) {
		w->rejected++;
		return 0;
	}
	if (counter_update(rm, ring_string(rm, c.name), c.scope, c.value) != 0)
		return -1;
	return prof_writer_counter_store(w, ring_string(rm, c.name));
}

static int write_crash(prof_writer *w, uint32_t ring, ring_map *rm, const unsigned char *p)
{
	(void)ring;
	amp_rec_crash c;
	memcpy(&c, p, sizeof c);
	char frames[AMP_CRASH_FRAMES * 20 + 1];
	size_t used = 0;
	frames[0] = '\0';
	for (uint32_t i = 0; i < c.nframes; i++)
		used += (size_t)snprintf(frames + used, sizeof frames - used, "%s0x%" PRIx64,
		                         i ? "\n" : "", c.frames[i]);
	sqlite3_stmt *st = w->st_crash;
	sqlite3_bind_int64(st, 1, rm->thread);
	sqlite3_bind_int(st, 2, c.signo);
	sqlite3_bind_text(st, 3, prof_signal_name(c.signo), -1, SQLITE_TRANSIENT);
	sqlite3_bind_int(st, 4, c.code);
	sqlite3_bind_int64(st, 5, (sqlite3_int64)c.addr);
	sqlite3_bind_int64(st, 6, prof_writer_ns(w, rm->clock, c.t));
	sqlite3_bind_text(st, 7, frames, -1, SQLITE_TRANSIENT);
	if (prof_writer_run(w, st, "crashes") != 0)
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

static int write_tstats(prof_writer *w, uint32_t ring, ring_map *rm, const unsigned char *p)
{
	(void)ring;
	amp_rec_tstats t;
	memcpy(&t, p, sizeof t);
	int64_t op = op_type(w, rm, t.op, t.op_name);
	if (op < 0 || op_type_listed(w, op) != 0)
		return -1;
	sqlite3_stmt *st = w->st_tstats;
	sqlite3_bind_int64(st, 1, t.step);
	sqlite3_bind_int64(st, 2, (sqlite3_int64)t.seq);
	sqlite3_bind_text(st, 3, op_type_text(w, op), -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 4, amp_role_name(t.role), -1, SQLITE_STATIC);
	bind_text_or_null(st, 5, prof_writer_text(w, ring_string(rm, t.name)));
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
	sqlite3_bind_int64(st, 20, rm->thread);
	if (t.flags & AMP_TSTATS_SRC)
		sqlite3_bind_int64(st, 21, (sqlite3_int64)(t.seq - t.src_back));
	if (t.role == AMP_ROLE_INPUT) {
		sqlite3_bind_int(st, 22, (t.flags & AMP_TSTATS_CAST_SRC) ? 1 : 0);
		sqlite3_bind_int(st, 23, (t.flags & AMP_TSTATS_TINY_AT_NF) ? 1 : 0);
	}
	if (t.role == AMP_ROLE_GRAD && (t.flags & AMP_TSTATS_EXT))
		sqlite3_bind_int(st, 24, (t.flags & AMP_TSTATS_PARAM) ? 1 : 0);
	if (prof_writer_run(w, st, "tensor_stats") != 0)
		return -1;
	if (!t.origin)
		return 0;
	sqlite3_bind_int64(w->st_nonfinite, 1, sqlite3_last_insert_rowid(w->db));
	return prof_writer_run(w, w->st_nonfinite, "nonfinite");
}

static int write_dump(prof_writer *w, uint32_t ring, ring_map *rm, const unsigned char *p)
{
	(void)ring;
	amp_rec_dump d;
	memcpy(&d, p, sizeof d);
	int64_t op = op_type(w, rm, d.op, d.op_name);
	if (op < 0 || op_type_listed(w, op) != 0)
		return -1;
	char shape[128];
	shape_text(shape, sizeof shape, d.shape, d.ndim);
	size_t got = 0;
	void *data = read_spool(w, prof_writer_text(w, ring_string(rm, d.file)), d.bytes, &got);
	sqlite3_stmt *st = w->st_dump;
	sqlite3_bind_int64(st, 1, d.step);
	sqlite3_bind_int64(st, 2, (sqlite3_int64)d.seq);
	sqlite3_bind_text(st, 3, op_type_text(w, op), -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 4, amp_role_name(d.role), -1, SQLITE_STATIC);
	bind_text_or_null(st, 5, prof_writer_text(w, ring_string(rm, d.name)));
	sqlite3_bind_text(st, 6, prof_dtype_name(d.dtype), -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 7, shape, -1, SQLITE_TRANSIENT);
	sqlite3_bind_text(st, 8, amp_dump_reason_name(d.reason), -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 9, (sqlite3_int64)(data ? got : d.bytes));
	if (data)
		sqlite3_bind_blob64(st, 10, data, got, free);
	else
		sqlite3_bind_null(st, 10);
	return prof_writer_run(w, st, "dumps");
}

static int valid_comm(const unsigned char *buf, unsigned n)
{
	(void)n;
	amp_rec_comm c;
	memcpy(&c, buf, sizeof c);
	return c.kind < AMP_COMM_KIND_NKINDS && c.dtype < AMP_DTYPE_COUNT &&
	       c.t_begin <= c.t_end && c.t_wait >= c.t_begin && c.t_wait <= c.t_end;
}

static int write_comm(prof_writer *w, uint32_t ring, ring_map *rm, const unsigned char *p)
{
	amp_rec_comm c;
	memcpy(&c, p, sizeof c);
	sqlite3_stmt *st = w->st_comm;
	sqlite3_bind_int64(st, 1, c.step);
	sqlite3_bind_text(st, 2, amp_comm_kind_name(c.kind), -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 3, (sqlite3_int64)c.bytes);
	sqlite3_bind_text(st, 4, prof_dtype_name(c.dtype), -1, SQLITE_STATIC);
	if (c.bucket >= 0)
		sqlite3_bind_int64(st, 5, c.bucket);
	else
		sqlite3_bind_null(st, 5);
	sqlite3_bind_int64(st, 6, prof_writer_ns(w, rm->clock, c.t_begin));
	sqlite3_bind_int64(st, 7, prof_writer_dur(w, rm->clock, c.t_begin, c.t_end));
	sqlite3_bind_int64(st, 8, prof_writer_dur(w, rm->clock, c.t_wait, c.t_end));
	sqlite3_bind_int(st, 9, (c.flags & AMP_COMM_FLAG_LOCAL_OVERFLOW) != 0);
	sqlite3_bind_int64(st, 10, ring);
	return prof_writer_run(w, st, "comm");
}

/* ---- the table ------------------------------------------------------------------------------ */
const prof_rec_type prof_rec_types[AMP_REC_TYPE_COUNT] = {
	[AMP_REC_PAD] = {"pad", 0, NULL, NULL},
	[AMP_REC_CLOCK] = {"clock", AMP_REC_SLOTS(amp_rec_clock), NULL, write_clock},
	[AMP_REC_STRING] = {"string", 0, valid_string, write_string},
	[AMP_REC_MODULE] = {"module", AMP_REC_SLOTS(amp_rec_module), NULL, write_module},
	[AMP_REC_CALLSITE] = {"callsite", AMP_REC_SLOTS(amp_rec_callsite), valid_callsite,
	                      write_callsite},
	[AMP_REC_OP] = {"op", AMP_REC_SLOTS(amp_rec_op), valid_op, write_op},
	[AMP_REC_COPY] = {"copy", AMP_REC_SLOTS(amp_rec_copy), valid_copy, write_copy},
	[AMP_REC_STEP_BEGIN] = {"step_begin", AMP_REC_SLOTS(amp_rec_step), valid_step,
	                        write_step_begin},
	[AMP_REC_STEP_END] = {"step_end", AMP_REC_SLOTS(amp_rec_step), valid_step, write_step_end},
	[AMP_REC_SCALE] = {"scale", AMP_REC_SLOTS(amp_rec_scale), valid_scale, write_scale},
	[AMP_REC_MEMORY] = {"memory", AMP_REC_SLOTS(amp_rec_memory), NULL, write_memory},
	[AMP_REC_META] = {"meta", 0, valid_meta, write_meta},
	[AMP_REC_CRASH] = {"crash", AMP_REC_SLOTS(amp_rec_crash), valid_crash, write_crash},
	[AMP_REC_TSTATS] = {"tstats", AMP_REC_SLOTS(amp_rec_tstats), valid_tstats, write_tstats},
	[AMP_REC_DUMP] = {"dump", AMP_REC_SLOTS(amp_rec_dump), valid_dump, write_dump},
	[AMP_REC_COUNTER] = {"counter", AMP_REC_SLOTS(amp_rec_counter), NULL, write_counter},
	[AMP_REC_COMM] = {"comm", AMP_REC_SLOTS(amp_rec_comm), valid_comm, write_comm},
};

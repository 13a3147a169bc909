/* writer_int.h — the writer's state, shared by its files: writer.c (lifecycle, strings, time,
 * finish), records.c (the per-record-type table: size, validation and the row each type
 * writes) and symbolize.c (call sites and crash frames at finish).  Private to ampprof's
 * writer; everything else goes through prof.h.
 */
#ifndef PROF_WRITER_INT_H
#define PROF_WRITER_INT_H

#include <stdint.h>

#include "keytab.h"
#include "prof.h"

#define PROF_MAX_RING_IDS (1u << 20)  /* per-ring string / call-site ids accepted */
#define PROF_MAX_DUMP_BYTES (1ull << 30)

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

/* A counter value kept after its ring was retired (or sent by no ring: pid 0, ring scope). */
typedef struct retired_counter {
	uint32_t name;               /* database string id */
	uint32_t scope;              /* AMP_COUNTER_* */
	uint32_t pid;                /* process-scoped: the process; ring-scoped: 0 (a sum) */
	int64_t value;               /* ring-scoped: the sum; process-scoped: the largest */
} retired_counter;

/* The thread now writing a ring (a ring is reused once its thread ends: each owner is a thread
 * of its own, threads.id = thread). */
typedef struct ring_map {
	uint32_t *strs;              /* ring string id -> database id */
	uint32_t n_strs;
	uint32_t *sites;             /* ring call-site id -> database id */
	uint32_t n_sites;
	int seen;
	uint32_t thread;             /* threads.id of the ring's current owner */
	uint32_t pid, tid;
	uint64_t dropped;
	uint64_t dropped_kind[AMP_DROP_KINDS];
	int has_open_step;
	int64_t open_step;
	uint64_t open_step_t;
	uint32_t open_step_ctx;
	unsigned clock;
	ring_counter *counters;      /* the last value of each counter this ring sent */
	uint32_t n_counters, cap_counters;
} ring_map;

#define PROF_TICK_SEGS 48  /* slopes are refined when their baseline doubles: 10 ms * 2^47 */

struct prof_writer {
	sqlite3 *db;
	const prof_options *opts;
	uint64_t run_start;
	/* calibration: the first pair and the slope of the latest one far enough from it */
	int cal_have;
	uint64_t cal_t0, cal_m0;
	uint64_t cal_span;           /* mono ns between the pairs of the slope in use */
	double ns_per_tick;
	/* The conversion: one continuous, increasing piecewise-linear function of ticks.  A new
	 * slope starts a segment at a tick no record has reached yet, so a time once converted
	 * never moves and events that follow each other in ticks follow each other in ns. */
	struct prof_tick_seg {
		uint64_t t;              /* first tick of the segment */
		double ns;               /* its time, ns since the run start */
		double k;                /* ns per tick */
	} segs[PROF_TICK_SEGS];
	uint32_t n_segs;
	uint64_t max_tick;           /* largest tick converted in the last segment, 0: none */
	/* strings: database id -> text, and a content hash */
	char **texts;
	uint32_t n_texts, cap_texts;
	uint32_t *str_ht;
	uint32_t str_ht_cap;
	prof_keytab modules, callsites, op_sigs, copy_sigs;
	prof_keytab op_types;             /* op type names (database string ids) known to op_types */
	uint32_t op_str[AMP_OP_COUNT]; /* database string id of amp_op_name(op), 0 = not yet */
	callsite_info *cs_info;      /* parallel to callsites */
	uint32_t cs_info_cap;
	uint64_t *op_calls, *op_total, *cp_calls, *cp_total;
	uint32_t op_agg_cap, cp_agg_cap;
	crash_info *crashes;
	uint32_t n_crashes;
	ring_map *rings;
	uint32_t n_rings;
	uint32_t next_thread;        /* threads.id of the next owner of a reused ring */
	retired_counter *retired;    /* counters of retired rings and of threads without one */
	uint32_t n_retired, cap_retired;
	uint64_t dropped_retired, dropped_kind_retired[AMP_DROP_KINDS];
	uint64_t events, rejected;
	int64_t last_step;
	char spool[256];             /* spool directory of dump payloads, "" if none */
	sqlite3_stmt *st_string, *st_callsite, *st_opsig, *st_op, *st_copysig, *st_copy, *st_step,
	    *st_scale, *st_mem, *st_ctx_end, *st_meta, *st_tstats, *st_dump, *st_crash,
	    *st_nonfinite, *st_optype, *st_thread, *st_comm;
};

/* ---- shared helpers (writer.c) ------------------------------------------------------------ */
/* Prints "cannot write '<output>': <sqlite error> (what)"; returns -1. */
int prof_writer_fail(prof_writer *w, const char *what);
/* Steps st once, resets it and clears its bindings; 0, or -1 (reported) unless SQLITE_DONE. */
int prof_writer_run(prof_writer *w, sqlite3_stmt *st, const char *what);
/* The same for statements whose every parameter is bound on every row: no clear_bindings. */
int prof_writer_run_bound(prof_writer *w, sqlite3_stmt *st, const char *what);
/* Ticks (or CLOCK_MONOTONIC ns) of a ring's clock to ns since the run start, and a duration. */
int64_t prof_writer_ns(prof_writer *w, unsigned clock, uint64_t t);
/* ns(t1) - ns(t0), 0 if t1 <= t0: an event ends where its end tick converts to. */
int64_t prof_writer_dur(prof_writer *w, unsigned clock, uint64_t t0, uint64_t t1);
/* Database id of the text (n bytes, cut at a NUL), inserting it into strings.  0 on failure. */
uint32_t prof_writer_intern(prof_writer *w, const char *s, size_t n);
/* Text of a database string id, NULL for 0 or an unknown id; valid for the writer's life. */
const char *prof_writer_text(const prof_writer *w, uint32_t id);
/* Folds (name, scope, pid, value) into the retired counters and stores the run's total of name
 * in meta.  0 or -1 (reported). */
int prof_writer_counter_retire(prof_writer *w, uint32_t name, uint32_t scope, uint32_t pid,
                               int64_t value);
/* Writes the run's total of counter name (database string id) into meta.  0 or -1. */
int prof_writer_counter_store(prof_writer *w, uint32_t name);
/* Writes the steps row of step (s NULL: a step that never ended).  0 or -1 (reported). */
int prof_writer_step_row(prof_writer *w, uint32_t ring, ring_map *rm, int64_t step,
                         uint64_t t_begin, const amp_rec_step *s);
/* Symbolizes every call-site frame and crash frame with one addr2line run per module and
 * writes them into callsites and crashes (symbolize.c).  0 or -1. */
int prof_writer_symbolize(prof_writer *w);

/* Database ids of a ring's string and call-site ids, 0 for an unknown one. */
static inline uint32_t ring_string(const ring_map *rm, uint32_t id)
{
	return id && id < rm->n_strs ? rm->strs[id] : 0;
}

static inline uint32_t ring_site(const ring_map *rm, uint32_t id)
{
	return id && id < rm->n_sites ? rm->sites[id] : 0;
}

/* ---- the record types (records.c) ----------------------------------------------------------- */
/* One row per amp_rec_type: how many slots it spans, what makes it valid, what it writes.  The
 * decoder checks slots and valid on the copied record; the writer calls write.  A new record
 * type is a new row. */
typedef struct prof_rec_type {
	const char *name;
	unsigned slots;              /* slots of a fixed-size type; 0: variable (valid checks) */
	int (*valid)(const unsigned char *rec, unsigned nslots); /* NULL: any content */
	int (*write)(prof_writer *w, uint32_t ring, ring_map *rm, const unsigned char *rec);
	                             /* NULL: nothing to write; returns 0 or -1 (SQLite error) */
} prof_rec_type;
extern const prof_rec_type prof_rec_types[AMP_REC_TYPE_COUNT];

#endif

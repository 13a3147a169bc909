/* trace.c — the trace emitter's events: writes the runtime's events into a shared-memory ring per
 * thread (the ring, call sites, crash handler and session attach are in trace_*.c, see
 * trace_int.h).
 *
 * A library constructor looks for $AMPPROF_SESSION (an inherited memfd laid out by ampprof, see
 * amp_events.h), maps it and turns tracing on.  Each producing thread claims its own ring and
 * is its only writer; strings and call sites are defined once per ring and referred to by id.
 * Timestamps are raw TSC ticks (CLOCK_MONOTONIC ns without an invariant TSC), calibrated by
 * AMP_REC_CLOCK records.  Nothing here does file I/O or symbolization on the hot path; the
 * fatal-signal handler uses only async-signal-safe code and libunwind's local unwinder.
 */
#include "trace_int.h"

#include <math.h>
#include <stdlib.h>

/* ---- events ------------------------------------------------------------------------------ */
/* Op and dump records: the first ndim dims of shape, zeros after; returns ndim clamped to
 * [0, 4].  Inlined: the same stores and selects as written out, no extra branch. */
static inline uint8_t pack_shape(int64_t out[4], const int64_t shape[4], int ndim)
{
	for (int i = 0; i < 4; i++)
		out[i] = i < ndim ? shape[i] : 0;
	return (uint8_t)(ndim < 0 ? 0 : ndim > 4 ? 4 : ndim);
}

void amp_trace_op_end(const amp_trace_op *op)
{
	uint64_t t_end = amp_trace_clock();
	trace_ring *r = ring_get();
	if (!r || !step_detailed(op->step))
		return;
	uint32_t cs = callsite_capture(r, (uintptr_t)__builtin_frame_address(0));
	uint32_t label = intern(r, op->label);
	uint32_t op_name = op_name_id(r, op->op, op->op_name);
	amp_rec_op *rec = ring_reserve_kind(r, 2, AMP_DROP_OP);
	if (!rec)
		return;
	rec->t_begin = op->t_begin;
	rec->t_end = t_end;
	rec->step = op->step;
	rec->seq = op->seq;
	rec->flops = op->flops;
	rec->bytes = op->bytes;
	rec->ndim = pack_shape(rec->shape, op->shape, op->ndim);
	rec->label = label;
	rec->callsite = cs;
	rec->op = (uint8_t)(op->op_name ? AMP_OP_BY_NAME : op->op);
	rec->op_name = op_name;
	rec->phase = (uint8_t)op->phase;
	rec->exec_dtype = (uint8_t)op->exec_dtype;
	rec->in_dtype = (uint8_t)op->in_dtype;
	rec->out_dtype = (uint8_t)op->out_dtype;
	rec->aligned = (uint8_t)(op->aligned != 0);
	rec->engine = (uint8_t)op->engine;
	ring_commit(r, rec, AMP_REC_OP, 2, 0);
}

void amp_trace_copy(amp_copy_kind kind, uint64_t bytes, int src_dtype, int dst_dtype,
                    uint64_t t_begin, int64_t step, const char *label)
{
	uint64_t t_end = amp_trace_clock();
	trace_ring *r = ring_get();
	if (!r || !step_detailed(step))
		return;
	uint32_t cs = callsite_capture(r, (uintptr_t)__builtin_frame_address(0));
	uint32_t lid = intern(r, label);
	amp_rec_copy *rec = ring_reserve_kind(r, 1, AMP_DROP_COPY);
	if (!rec)
		return;
	rec->t_begin = t_begin;
	rec->t_end = t_end;
	rec->step = step;
	rec->bytes = bytes;
	rec->label = lid;
	rec->callsite = cs;
	rec->kind = (uint8_t)kind;
	rec->src_dtype = (uint8_t)src_dtype;
	rec->dst_dtype = (uint8_t)dst_dtype;
	memset(rec->pad, 0, sizeof rec->pad);
	ring_commit(r, rec, AMP_REC_COPY, 1, 0);
}

void amp_trace_step_begin(uint32_t ctx_id, int64_t step)
{
	uint64_t t = amp_trace_clock();
	trace_ring *r = ring_get();
	if (!r)
		return;
	amp_trace_callsites_check(r); /* once a step: a plugin reloaded between steps */
	amp_rec_step *rec = ring_reserve(r, AMP_REC_SLOTS(amp_rec_step));
	if (!rec)
		return;
	memset((char *)rec + sizeof rec->h, 0, sizeof *rec - sizeof rec->h);
	rec->step = step;
	rec->t_begin = t;
	rec->grad_norm = (double)NAN;
	rec->ctx = ctx_id;
	ring_commit(r, rec, AMP_REC_STEP_BEGIN, AMP_REC_SLOTS(amp_rec_step), 0);
}

void amp_trace_step_end(uint32_t ctx_id, int64_t step, uint64_t t_begin, double loss, int has_loss,
                        double scale, int overflow, int skipped, int64_t samples,
                        const amp_trace_step_info *info)
{
	uint64_t t = amp_trace_clock();
	trace_ring *r = ring_get();
	if (!r)
		return;
	amp_rec_step *rec = ring_reserve(r, AMP_REC_SLOTS(amp_rec_step));
	if (!rec)
		return;
	rec->step = step;
	rec->t_begin = t_begin;
	rec->t_end = t;
	rec->loss = loss;
	rec->scale = scale;
	rec->samples = samples;
	rec->overflow = (uint8_t)(overflow != 0);
	rec->skipped = (uint8_t)(skipped != 0);
	rec->flags = has_loss ? AMP_STEP_LOSS : 0;
	rec->clipped = (uint8_t)(info && info->clipped);
	rec->ctx = ctx_id;
	rec->grad_norm = info ? info->grad_norm : (double)NAN;
	rec->micro_batches = info ? info->micro_batches : 0;
	ring_commit(r, rec, AMP_REC_STEP_END, AMP_REC_SLOTS(amp_rec_step), 0);
	amp_trace_emit_clock(r);
	ring_publish(r);
}

void amp_trace_scale(uint32_t ctx_id, int64_t step, double old_scale, double new_scale,
                     amp_scale_reason reason)
{
	trace_ring *r = ring_get();
	if (!r)
		return;
	amp_rec_scale *rec = ring_reserve(r, 1);
	if (!rec)
		return;
	rec->step = step;
	rec->t = amp_trace_clock();
	rec->old_scale = old_scale;
	rec->new_scale = new_scale;
	rec->reason = (uint32_t)reason;
	rec->ctx = ctx_id;
	ring_commit(r, rec, AMP_REC_SCALE, 1, 0);
}

void amp_trace_comm(int64_t step, unsigned kind, unsigned dtype, int32_t bucket, uint64_t bytes,
                    uint64_t t_begin, uint64_t t_wait, uint64_t t_end, unsigned flags)
{
	trace_ring *r = ring_get();
	if (!r)
		return;
	amp_rec_comm *rec = ring_reserve(r, 1);
	if (!rec)
		return;
	rec->t_begin = t_begin;
	rec->t_wait = t_wait;
	rec->t_end = t_end;
	rec->step = step;
	rec->bytes = bytes;
	rec->bucket = bucket;
	rec->kind = (uint8_t)kind;
	rec->dtype = (uint8_t)dtype;
	rec->flags = (uint8_t)flags;
	rec->pad = 0;
	ring_commit(r, rec, AMP_REC_COMM, 1, 0);
}

/* A memory record: bytes NULL for zeros, unopt NULL when memory_optimize is off; kind the
 * amp_drop_kind drop mode may drop it as, or -1 for a boundary (never dropped). */
static void put_memory(int kind, uint32_t ctx_id, int64_t step, const uint64_t *bytes,
                       uint64_t peak, const uint64_t *unopt, uint64_t peak_unopt, uint32_t flags)
{
	trace_ring *r = ring_get();
	if (!r)
		return;
	amp_rec_memory *rec = ring_reserve_kind(r, AMP_REC_SLOTS(amp_rec_memory), kind);
	if (!rec)
		return;
	rec->step = step;
	rec->t = amp_trace_clock();
	if (bytes)
		memcpy(rec->bytes, bytes, sizeof rec->bytes);
	else
		memset(rec->bytes, 0, sizeof rec->bytes);
	rec->peak = peak;
	if (unopt)
		memcpy(rec->bytes_unopt, unopt, sizeof rec->bytes_unopt);
	else
		memset(rec->bytes_unopt, 0, sizeof rec->bytes_unopt);
	rec->peak_unopt = unopt ? peak_unopt : 0;
	rec->flags = flags | (unopt ? AMP_MEMREC_UNOPT : 0);
	rec->ctx = ctx_id;
	ring_commit(r, rec, AMP_REC_MEMORY, AMP_REC_SLOTS(amp_rec_memory), 0);
	if (kind < 0)
		ring_publish(r);
}

void amp_trace_memory(uint32_t ctx_id, int64_t step, const uint64_t bytes[AMP_MEM_NCAT],
                      uint64_t peak, const uint64_t *unopt, uint64_t peak_unopt)
{
	put_memory(AMP_DROP_MEMORY, ctx_id, step, bytes, peak, unopt, peak_unopt, 0);
}

void amp_trace_memory_end(uint32_t ctx_id, int64_t step)
{
	put_memory(-1, ctx_id, step, NULL, 0, NULL, 0, AMP_MEMREC_END);
}

void amp_trace_meta(const char *key, const char *value)
{
	trace_ring *r = ring_get();
	if (!r || !key)
		return;
	if (!value)
		value = "";
	size_t room = AMP_REC_MAX_SLOTS * AMP_SLOT_SIZE - AMP_REC_META_FIXED;
	size_t kl = strnlen(key, 255), vl = strnlen(value, room - kl);
	unsigned slots = (unsigned)((AMP_REC_META_FIXED + kl + vl + AMP_SLOT_SIZE - 1) / AMP_SLOT_SIZE);
	amp_rec_meta *rec = ring_reserve(r, slots);
	if (!rec)
		return;
	rec->klen = (uint16_t)kl;
	rec->vlen = (uint16_t)vl;
	rec->pad = 0;
	memcpy((char *)rec + AMP_REC_META_FIXED, key, kl);
	memcpy((char *)rec + AMP_REC_META_FIXED + kl, value, vl);
	ring_commit(r, rec, AMP_REC_META, slots, (unsigned)(kl + vl));
	ring_publish(r);
}

static void counter_emit(const char *name, int64_t value, uint32_t scope)
{
	trace_ring *r = ring_get();
	if (!r) {
		/* no ring: the run's total must still count this thread (ring-scoped only: a
		 * process-wide total is reported by the process's threads that have one) */
		if (name && scope == AMP_COUNTER_RING)
			amp_trace_lost_counter(name, value);
		return;
	}
	if (!name)
		return;
	uint32_t id = amp_trace_intern_content(r, name);
	amp_rec_counter *rec = ring_reserve(r, 1);
	if (!rec)
		return;
	rec->name = id;
	rec->scope = scope;
	rec->value = value;
	rec->t = amp_trace_clock();
	ring_commit(r, rec, AMP_REC_COUNTER, 1, 0);
	ring_publish(r);
}

void amp_trace_counter(const char *name, int64_t value)
{
	counter_emit(name, value, AMP_COUNTER_RING);
}

void amp_trace_counter_process(const char *name, int64_t value)
{
	counter_emit(name, value, AMP_COUNTER_PROCESS);
}

void amp_trace_flush(void)
{
	trace_ring *r = amp_trace_tl_ring;
	if (r)
		ring_publish(r);
}

void amp_trace_tensor_stats(const amp_trace_tstats *st)
{
	trace_ring *r = ring_get();
	if (!r || !st)
		return;
	/* everything that may write records of its own (strings, a call site's definition)
	 * before this record's slots are reserved: a record written between a reservation and
	 * its commit would land in the reserved slots */
	uint32_t name = intern(r, st->name);
	uint32_t op_name = op_name_id(r, st->op, NULL);
	uint32_t cs = callsite_capture(r, (uintptr_t)__builtin_frame_address(0));
	unsigned slots = AMP_REC_SLOTS(amp_rec_tstats);
	amp_rec_tstats *rec = ring_reserve_kind(r, slots, AMP_DROP_TSTATS);
	if (!rec)
		return;
	memset((char *)rec + sizeof rec->h, 0, sizeof *rec - sizeof rec->h);
	rec->step = st->step;
	rec->seq = st->seq;
	rec->count = st->count;
	rec->nan = st->nan;
	rec->inf = st->inf;
	rec->ninf = st->ninf <= st->inf ? st->ninf : st->inf;
	rec->underflow = st->underflow;
	rec->near_overflow = st->near_overflow;
	rec->min = st->min;
	rec->max = st->max;
	rec->absmax = st->absmax;
	rec->name = name;
	rec->callsite = cs;
	rec->op = (uint8_t)st->op;
	rec->op_name = op_name;
	rec->role = (uint8_t)st->role;
	rec->dtype = (uint8_t)st->dtype;
	rec->origin = (uint8_t)(st->origin != 0);
	rec->phase = (uint8_t)(st->phase <= AMP_PHASE_OPTIMIZER ? st->phase : AMP_PHASE_FORWARD);
	rec->flags = AMP_TSTATS_EXT;
	rec->flags |= (uint8_t)(st->flags &
	                        (AMP_TSTATS_CAST_SRC | AMP_TSTATS_TINY_AT_NF | AMP_TSTATS_PARAM));
	if ((st->flags & AMP_TSTATS_SRC) && st->src_seq <= st->seq &&
	    st->seq - st->src_seq <= UINT32_MAX) {
		rec->flags |= AMP_TSTATS_SRC;
		rec->src_back = (uint32_t)(st->seq - st->src_seq);
	}
	memcpy(rec->exp_hist, st->exp_hist, sizeof rec->exp_hist);
	ring_commit(r, rec, AMP_REC_TSTATS, slots, 0);
}

void amp_trace_dump(const amp_trace_dump_ref *d)
{
	trace_ring *r = ring_get();
	if (!r || !d)
		return;
	uint32_t file = amp_trace_intern_content(r, d->file ? d->file : "");
	uint32_t name = intern(r, d->name);
	uint32_t op_name = op_name_id(r, d->op, NULL);
	unsigned slots = AMP_REC_SLOTS(amp_rec_dump);
	amp_rec_dump *rec = ring_reserve_kind(r, slots, AMP_DROP_DUMP);
	if (!rec)
		return;
	memset((char *)rec + sizeof rec->h, 0, sizeof *rec - sizeof rec->h);
	rec->step = d->step;
	rec->seq = d->seq;
	rec->bytes = d->bytes;
	rec->ndim = pack_shape(rec->shape, d->shape, d->ndim);
	rec->file = file;
	rec->name = name;
	rec->op = (uint8_t)d->op;
	rec->op_name = op_name;
	rec->role = (uint8_t)d->role;
	rec->dtype = (uint8_t)d->dtype;
	rec->reason = (uint8_t)d->reason;
	ring_commit(r, rec, AMP_REC_DUMP, slots, 0);
	ring_publish(r);
}

/* trace.h — the one interface every op dispatch, copy or cast, step boundary, loss-scaler
 * decision and memory report of the runtime passes through.
 *
 * Off unless a profiler session is attached (amp_trace_active != 0); callers test
 * AMP_TRACING() first, so the cost when off is one predictable branch.  When on, the calls
 * write fixed-size records into this thread's shared-memory ring (trace.c); they never block
 * on I/O and never symbolize.  Timestamps come from amp_trace_clock() (raw ticks; the
 * collector converts them to nanoseconds).
 */
#ifndef AMP_TRACE_H
#define AMP_TRACE_H

#include <stdint.h>

#include "amp_events.h"

extern int amp_trace_active;
#define AMP_TRACING() __builtin_expect(amp_trace_active != 0, 0)

/* Raw timestamp (TSC ticks when invariant, else CLOCK_MONOTONIC ns).  Inline: an op takes two,
 * and a call each was a tenth of the emitter's cost. */
extern int amp_trace_use_tsc;
uint64_t amp_trace_clock_mono(void);
static inline uint64_t amp_trace_clock(void)
{
#if defined(__x86_64__) || defined(__i386__)
	if (__builtin_expect(amp_trace_use_tsc, 1))
		return __builtin_ia32_rdtsc();
#endif
	return amp_trace_clock_mono();
}

/* One op execution, reported when it ends. */
typedef struct amp_trace_op {
	amp_op_type op;
	amp_phase phase;
	int exec_dtype;        /* amp_dtype the kernel ran in */
	int in_dtype;          /* dtype of the first input as the caller passed it */
	int out_dtype;
	const char *label;     /* layer label or NULL */
	int64_t step;
	uint64_t seq;          /* per-context op sequence number, from 0 */
	uint64_t t_begin;      /* amp_trace_clock() before the kernel */
	uint64_t flops;        /* floating-point operations (a multiply-add counts 2) */
	uint64_t bytes;        /* bytes read + written by the kernel */
	int ndim;
	int64_t shape[4];      /* output shape, or (M, N, K) for GEMMs */
	int aligned;           /* GEMM dims fit the fast path (multiples of 8/16) */
	amp_engine engine;     /* what the arithmetic ran on (AMP_ENGINE_NONE if not said) */
	const char *op_name;   /* an op type outside amp_op_type, by name (op is then ignored);
	                          NULL for the runtime's ops */
} amp_trace_op;
void amp_trace_op_end(const amp_trace_op *op);

/* One copy or cast (amp_copy_kind), reported when it ends. */
void amp_trace_copy(amp_copy_kind kind, uint64_t bytes, int src_dtype, int dst_dtype,
                    uint64_t t_begin, int64_t step, const char *label);

/* Step boundaries.  loss is the unscaled loss when has_loss (NaN and Inf as computed), scale
 * the loss scale used. */
void amp_trace_step_begin(uint32_t ctx_id, int64_t step);
/* What a step's optimizer did beyond the loss scale: the gradient norm before clipping (NAN
 * when not taken), whether it clipped, and the micro-batches (backward passes) it held. */
typedef struct amp_trace_step_info {
	double grad_norm;
	int clipped;
	int64_t micro_batches;
} amp_trace_step_info;
void amp_trace_step_end(uint32_t ctx_id, int64_t step, uint64_t t_begin, double loss, int has_loss,
                        double scale, int overflow, int skipped, int64_t samples,
                        const amp_trace_step_info *info);

/* A loss-scaler decision of context ctx_id (amp_ctx.trace_id) at the end of `step`. */
void amp_trace_scale(uint32_t ctx_id, int64_t step, double old_scale, double new_scale,
                     amp_scale_reason reason);

/* Bytes by amp_mem_category of context ctx_id at the end of `step`, and the peak so far;
 * with memory_optimize, unopt (else NULL) and peak_unopt are the same without it. */
void amp_trace_memory(uint32_t ctx_id, int64_t step, const uint64_t bytes[AMP_MEM_NCAT],
                      uint64_t peak, const uint64_t *unopt, uint64_t peak_unopt);
/* Context ctx_id was freed after `step` (AMP_MEMREC_END; never dropped). */
void amp_trace_memory_end(uint32_t ctx_id, int64_t step);
/* A new context's id: the run's count of contexts made (amp_session_hdr.contexts: unique in
 * the profiled run, every process's and image's), or the process's own when not profiled;
 * never 0. */
uint32_t amp_trace_context_id(void);

/* A collective of a data-parallel backend (amp_rec_comm). */
void amp_trace_comm(int64_t step, unsigned kind, unsigned dtype, int32_t bucket, uint64_t bytes,
                    uint64_t t_begin, uint64_t t_wait, uint64_t t_end, unsigned flags);
/* A fact about the run for the `meta` table (precision mode, lists, scaler configuration). */
void amp_trace_meta(const char *key, const char *value);

/* A named running total for the `meta` table (e.g. "ops_dispatched", the runtime's own count of
 * op executions, reported at every step end so the profile can be checked against it).  value
 * is this thread's own total (AMP_COUNTER_RING): the collector keeps the last value each thread
 * sent and stores the sum over threads. */
void amp_trace_counter(const char *name, int64_t value);
/* The same for a process-wide total that any thread may report (AMP_COUNTER_PROCESS, e.g. the
 * dump counters): the collector keeps the largest value per process, summed over processes. */
void amp_trace_counter_process(const char *name, int64_t value);

/* Publishes this thread's pending records to the collector (also done every 16 records and at
 * every step end).  Cheap; never blocks. */
void amp_trace_flush(void);

/* The session's configuration, read by the runtime to set up non-finite checks and dumps.
 * NULL when no profiler session is attached.  Valid for the life of the process. */
typedef struct amp_trace_config {
	int nan_check;                   /* amp_nan_check: off, after every op, once per step */
	int dump;                        /* amp_dump_mode */
	uint64_t dump_limit;             /* bytes of dumps allowed for the whole run */
	int n_dump_steps;                /* ranges in dump_steps */
	const amp_step_range *dump_steps;/* steps to dump in full (--dump-steps) */
	const char *spool_dir;           /* private 0700 directory for dump files, "" if none */
	int callstack;                   /* call sites are recorded */
} amp_trace_config;
const amp_trace_config *amp_trace_session_config(void);
/* The session's count of dump bytes reserved by the run's processes (against dump_limit), or
 * NULL without a session. */
uint64_t *amp_trace_dump_used(void);
/* Nonzero if step is one of the session's --dump-steps. */
int amp_trace_dump_step(int64_t step);

/* Statistics of one checked tensor (diagnostics; the `tensor_stats` table). */
typedef struct amp_trace_tstats {
	int64_t step;
	uint64_t seq;              /* seq of the op the tensor belongs to */
	amp_op_type op;
	int role;                  /* 0 input, 1 output, 2 grad */
	int dtype;                 /* amp_dtype */
	int origin;                /* 1: first op of the step whose output went non-finite */
	amp_phase phase;           /* phase of the op (forward, backward, optimizer) */
	const char *name;          /* tensor name or label, may be NULL */
	uint64_t count, nan, inf, underflow, near_overflow;
	uint64_t ninf;             /* of inf (+Inf and -Inf), the -Inf count */
	double min, max, absmax;   /* over finite values */
	uint32_t exp_hist[40];     /* see amp_rec_tstats */
	uint32_t flags;            /* AMP_TSTATS_SRC, _CAST_SRC, _TINY_AT_NF, _PARAM (amp_rec_tstats) */
	uint64_t src_seq;          /* with AMP_TSTATS_SRC: seq of the related op (amp_rec_tstats) */
} amp_trace_tstats;
void amp_trace_tensor_stats(const amp_trace_tstats *st);

/* A tensor written to file (a name inside the session's spool_dir) for the `dumps` table. */
typedef struct amp_trace_dump_ref {
	int64_t step;
	uint64_t seq;
	amp_op_type op;
	int role, dtype, reason;   /* reason: 0 nonfinite, 1 step, 2 manual */
	const char *name, *file;
	uint64_t bytes;
	int ndim;
	int64_t shape[4];
} amp_trace_dump_ref;
void amp_trace_dump(const amp_trace_dump_ref *d);

#endif

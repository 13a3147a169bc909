/* check.h — non-finite checks, tensor statistics and tensor dumps under ampprof (private).
 *
 * Called only when AMP_TRACING(): after every op from amp_op_end() and the reverse pass, on
 * FP32 -> FP16 casts, on the loss and on the master gradients.  Each checked tensor is scanned
 * once, right after it was written (still in cache): a full statistics pass on statistics steps,
 * a non-finite count otherwise.  The first op of a step whose inputs are finite and whose output
 * is not is the step's origin; its inputs and outputs are dumped into the session's spool
 * directory within the dump limits, and whatever is not dumped is counted.
 * Per-context state lives in ctx->check; the dump budget is per process, under a mutex.
 */
#ifndef AMP_CHECK_H
#define AMP_CHECK_H

#include <stdint.h>

#include "internal.h"
#include "kernels/stats.h"

#define AMP_CHECK_DUMPS_PER_STEP 64      /* non-finite dumps in one step */
#define AMP_CHECK_DUMP_STEPS 16          /* distinct steps with forward non-finite dumps */
#define AMP_CHECK_GRAD_DUMP_STEPS 4      /* of which, at most, steps whose origin was in backward
                                            (scaled-gradient overflow: the scaler probing) */
#define AMP_CHECK_STATS_EVERY_ENV "AMPPROF_STATS_EVERY"

/* Tensor roles (AMP_ROLE_*) and dump reasons (AMP_DUMP_REASON_*) are the schema's
 * (amp_events.h). */

typedef struct amp_check_config {
	int nan_check;                   /* amp_nan_check: off, every op, loss + master grads */
	int dump;                        /* amp_dump_mode: dump the origin's tensors or not */
	uint64_t dump_limit;             /* bytes of dumps for the whole run (0: none) */
	int dumps_per_step;              /* non-finite dumps per step (AMP_CHECK_DUMPS_PER_STEP) */
	int dump_steps_max;              /* steps with non-finite dumps (AMP_CHECK_DUMP_STEPS) */
	int grad_dump_steps_max;         /* of which backward origins (AMP_CHECK_GRAD_DUMP_STEPS) */
	int stats_every;                 /* full statistics every N steps (>= 1), else counts only */
	int n_dump_steps;                /* ranges in dump_steps */
	const amp_step_range *dump_steps;/* steps whose every op input and output is dumped */
	const char *spool_dir;           /* directory for dump files; "" or NULL: no dumps */
} amp_check_config;

/* Replaces the process-wide configuration (tests, benchmarks); NULL goes back to the session's:
 * amp_trace_session_config() with the defaults above, stats_every from $AMPPROF_STATS_EVERY.
 * Without a session the default is nan_check=op, no dumps.  Copies cfg (the strings and ranges
 * must outlive the run).  Call it while no check runs on another thread. */
void amp_check_configure(const amp_check_config *cfg);
/* The configuration in force. */
const amp_check_config *amp_check_get_config(void);

/* ---- statistics taken by kernels (call only when AMP_TRACING()) --------------------------- */
/* 1 if the checks of this step want full statistics of every output (nan_check=op on a
 * statistics step): a kernel that can take them while it writes (amp_gemm_f16_stats) should. */
int amp_check_wants_stats(amp_ctx *ctx);
/* s: the statistics of t as a kernel just wrote it.  The check of the op that wrote t uses them
 * instead of reading t again; hints not used by then are dropped. */
void amp_check_hint(amp_ctx *ctx, const amp_tensor *t, const amp_stats *s);

/* ---- hooks (call only when AMP_TRACING()) ------------------------------------------------- */
/* Forward op (or an op dispatched during backward) that wrote out from in[0..n) (as the kernel
 * saw them, after casts); seq is the op's sequence number. */
void amp_check_op(amp_ctx *ctx, const amp_op_call *call, uint64_t seq, const amp_tensor *out,
                  amp_tensor *const *in, int n);
/* Tape node whose backward function just ran; seq_before is ctx->seq before it ran.  Checks the
 * gradients it accumulated into its inputs (role grad). */
void amp_check_backward(amp_ctx *ctx, const amp_node *node, uint64_t seq_before);
/* src was just cast into dst (FP32 -> FP16 overflows show here, before the op that uses dst);
 * dst_nonfinite: the NaN and Inf the conversion wrote (amp_cvt_f32_f16's count, so dst is not
 * read again). */
void amp_check_cast(amp_ctx *ctx, const amp_tensor *src, const amp_tensor *dst,
                    int64_t dst_nonfinite);
/* The loss handed to amp_backward (nan_check=step checks it here). */
void amp_check_loss(amp_ctx *ctx, const amp_tensor *loss);
/* Master gradient of p at optimizer time, times mul (<= 1: the unscale the update will apply;
 * 1 when it is unscaled already).  Returns its count of NaN and Inf values (what
 * amp_count_nonfinite_f32 would), computing statistics too under nan_check=step: of the
 * unscaled values, widened and multiplied block by block in L1, nothing written.  While p's
 * gradient is kept in half (p->grad_kept) it is read there: widening is exact, so the values
 * and statistics are those of the master gradient, whose dtype the record keeps. */
int64_t amp_check_master_grad(amp_ctx *ctx, const amp_param *p, float mul);
/* 1 when amp_check_master_grad computes statistics (nan_check=step), 0 when it only counts
 * NaN and Inf (the optimizer may then count them itself, fused with its unscaling). */
int amp_check_master_grad_stats(void);

/* ---- results, for tests and the at-exit report -------------------------------------------- */
typedef struct amp_check_origin {
	int64_t step;                    /* -1: no origin in the context's current step */
	uint64_t seq;                    /* seq of the origin op */
	amp_op_type op;                  /* AMP_OP_COUNT never (casts are charged to their op) */
	amp_phase phase;                 /* forward, backward */
	uint64_t nan, inf;               /* of its output (first output for backward ops) */
	int via_cast;                    /* an FP32 -> FP16 cast of a finite input overflowed */
	char label[64];                  /* the op's label ("" if none) */
} amp_check_origin;
/* Origin of ctx's current (or last) step. */
void amp_check_origin_get(const amp_ctx *ctx, amp_check_origin *out);

typedef struct amp_check_counters {
	uint64_t checked;                /* tensors checked */
	uint64_t stats;                  /* tensor_stats records emitted */
	uint64_t origins;                /* steps with an origin */
	uint64_t dumps, dump_bytes;      /* dump files written */
	uint64_t skipped;                /* dumps not written, all reasons */
	uint64_t skipped_bytes;          /* their payload bytes */
	uint64_t skipped_limit;          /* the run's byte limit was reached */
	uint64_t skipped_step_cap;       /* the per-step count cap */
	uint64_t skipped_steps_cap;      /* the cap on steps with non-finite dumps */
	uint64_t skipped_nospool;        /* no spool directory */
	uint64_t failed;                 /* open/write errors (ENOSPC...) */
	uint64_t check_ns;               /* wall time spent in the check hooks (their own cost) */
} amp_check_counters;
/* Process-wide counters since start (or amp_check_reset_counters). */
void amp_check_counters_get(amp_check_counters *out);
void amp_check_reset_counters(void);
/* Sends the dump counters to the profile's meta table ("dumps_written", "dumps_skipped",
 * ...).  Done at every step rollover where they changed and at exit. */
void amp_check_report(void);

/* Test hook: sees every tensor_stats and dump record before it goes to the trace (one of st,
 * dump is NULL).  NULL removes it. */
typedef void (*amp_check_observer)(void *arg, const amp_trace_tstats *st,
                                   const amp_trace_dump_ref *dump);
void amp_check_set_observer(amp_check_observer fn, void *arg);

#endif

/* amp_dist.h — the interface between libamprt and a data-parallel backend.
 *
 * libamprt itself never links a transport.  A backend (libamprt_mpi, amp/amp_mpi.h) attaches
 * a table of hooks to a context; from then on amp_backward tells it when each parameter's
 * master gradient is final (so it can start reducing a bucket while backward goes on), and
 * amp_optim_step lets it finish the reduction before the gradients are unscaled and checked.
 * The gradients a backend sees are scaled (the loss scale is in them), so a half-precision
 * reduction casts values the loss scale has already lifted.
 *
 * The functions below are for backends; a training program uses the backend's own header.
 */
#ifndef AMP_AMP_DIST_H
#define AMP_AMP_DIST_H

#include <stdint.h>

#include "amp/amp.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct amp_dist_ops {
	/* amp_backward is about to run the tape of the current step. */
	void (*backward_begin)(void *state, amp_ctx *ctx);
	/* The master gradient of parameter i (registration order, amp_param_at) is final for
	 * this step: no node left on the tape adds to it. */
	void (*grad_ready)(void *state, amp_ctx *ctx, int i);
	/* Between two tape nodes, and from inside long kernels of a node (the GEMMs, between
	 * blocks of rows, at most every 50 us): let the outstanding reductions progress.  It
	 * must not run a GEMM or an op (a GEMM's packing buffers are in use) or fail the context;
	 * vector kernels are fine. */
	void (*progress)(void *state, amp_ctx *ctx);
	/* The tape is done; parameters it never reached are final too.  AMP_OK or an error code,
	 * which amp_backward returns. */
	int (*backward_end)(void *state, amp_ctx *ctx);
	/* Called by amp_optim_step before it unscales: completes every reduction of the step and
	 * leaves the sum over ranks as the gradients (in the master gradients, or set with
	 * amp_param_grad_set); *divisor is what the sum is divided
	 * by (the number of ranks, so the update sees the mean).  AMP_OK or an error code (the
	 * backend has set the context's message through amp_dist_fail). */
	int (*reduce)(void *state, amp_ctx *ctx, double *divisor);
	/* The step is ending (amp_step_end), and its step-scoped memory with it: a gradient the
	 * backend still sums in place must be done with.  AMP_OK or an error code, which
	 * amp_step_end returns once it has ended the step all the same.  May be NULL. */
	int (*step_end)(void *state, amp_ctx *ctx);
	/* The context is being freed. */
	void (*detach)(void *state, amp_ctx *ctx);
	/* Optimizer sharding (each of these may be NULL: every rank updates every element).
	 * After reduce: the elements [*lo, *hi) of parameter i whose sums over the ranks this
	 * rank holds and updates (the whole tensor when the step is not sharded); returns
	 * nonzero when the step is sharded (alike on every rank). */
	int (*owned)(void *state, amp_ctx *ctx, int i, int64_t *lo, int64_t *hi);
	/* *v summed over the ranks (a sharded step's clipping norm and NaN/Inf verdict).  AMP_OK
	 * or an error code. */
	int (*sum)(void *state, amp_ctx *ctx, double *v);
	/* After a sharded amp_optim_step updated its elements (updated nonzero: the ranks agreed
	 * on it) or skipped the step, ok zero when this rank's update failed: the updated values
	 * go to every rank (the buffer the ranks agree on from amp_param_shard_view, then
	 * amp_param_exchanged), unless a rank failed, which fails the step on every rank.  AMP_OK
	 * or an error code, which amp_optim_step returns. */
	int (*updated)(void *state, amp_ctx *ctx, int updated, int ok);
} amp_dist_ops;

/* Attaches a backend (ops must outlive the context; state is the backend's).  One per
 * context: a second attach is AMP_ESTATE.  ops = NULL detaches. */
int amp_dist_attach(amp_ctx *ctx, const amp_dist_ops *ops, void *state);
/* The state attached with ops, or NULL when another backend (or none) is attached. */
void *amp_dist_state(const amp_ctx *ctx, const amp_dist_ops *ops);
/* Sets the context's error message (amp_ctx_error) and returns code. */
int amp_dist_fail(amp_ctx *ctx, int code, const char *msg);

/* What every rank of a data-parallel run must hold alike, as a text to compare: a
 * configuration key's value (as amp_config_get gives it, without overwriting the text that
 * returned), or "custom lists" (the white and black lists in force, in one order however they
 * were typed), "optimizers" (each one's kind, hyperparameters and update count, and which
 * holds the moments), "updates" (a hash of what every update read: hyperparameters, clipping,
 * accumulation, since the start or the last checkpoint load), "loss scaler" (its kind, the
 * scale in force and the clean steps counted) or "checkpoints" (how many were loaded and a
 * checksum of the last one's training state: its masters, moments, scaler, optimizers and
 * gradients, not the counters and RNG state, which are each rank's own).  Writes at most len
 * bytes into buf (NUL included; buf may be NULL when len is 0) and returns the whole text's
 * length, as snprintf does, or -1 for an unknown name. */
int amp_dist_shared_state(amp_ctx *ctx, const char *name, char *buf, size_t len);

/* Parameters in registration order, i = 0 .. amp_param_count() - 1: the FP32 master tensor
 * (its gradient: amp_tensor_grad) and its label. */
int amp_param_count(const amp_ctx *ctx);
amp_tensor *amp_param_at(amp_ctx *ctx, int i);
const char *amp_param_label(amp_ctx *ctx, int i);

/* Converts n values between float dtypes (AMP_F32, AMP_F16, AMP_BF16) with the runtime's
 * vectorized kernels (round to nearest even; values beyond a half type's range become Inf).
 * Returns the number of NaN and Inf values written to a half dst (an overflowing cast shows),
 * 0 for an fp32 one. */
int64_t amp_dist_convert(amp_dtype dst_dtype, void *dst, amp_dtype src_dtype, const void *src,
                         int64_t n);
/* y += x over n values of a float dtype: each sum the FP32 sum rounded once to dtype, on the
 * runtime's vector kernels (fp16: natively where the CPU adds fp16, the same bits). */
void amp_dist_add(amp_dtype dtype, void *y, const void *x, int64_t n);
/* y *= f over n values of a float dtype, each product computed in FP32 and rounded once. */
void amp_dist_scale(amp_dtype dtype, void *y, float f, int64_t n);
/* Number of NaN and Inf values among n values of a float dtype. */
int64_t amp_dist_count_nonfinite(amp_dtype dtype, const void *x, int64_t n);

/* ---- the gradients, where backward left them ----------------------------------------------- */
/* Parameter i's gradient of this step as it is stored, read without widening it: a half
 * gradient backward kept in its own dtype, or the FP32 master gradient (*dtype says which; the
 * values are amp_tensor_numel of the master).  NULL when the step has none (zeros).
 * *nonfinite is its NaN/Inf count when the runtime already knows it, else -1.  Valid until
 * the next write to the gradient; a final gradient (grad_ready) is not written again, and is
 * the step's own copy, which a backend may overwrite with the sum (and hand back with
 * amp_param_grad_set) if it is done with it by the step's end (step_end). */
const void *amp_param_grad_data(amp_ctx *ctx, int i, amp_dtype *dtype, int64_t *nonfinite);
/* Nonzero when parameter i's values were written since the last call for it (an op that
 * updates it in place, as BatchNorm does its running statistics; amp_param_load; a caller
 * with amp_tensor_data), which clears it. */
int amp_param_moved(amp_ctx *ctx, int i);
/* Nonzero when parameter i has a gradient at all: this step's, or zeros after an earlier
 * step's.  One that no tape has reached yet has none, and the optimizer leaves it alone. */
int amp_param_has_grad(amp_ctx *ctx, int i);
/* Makes data (the master's numel values of dtype, a float dtype) parameter i's gradient for
 * this step: the optimizer reads it in place, widening it block by block in its update.
 * nonfinite is its NaN/Inf count, or -1 for the optimizer to count.  data must stay unchanged
 * until the step ends.  What a backend does with the reduced sums instead of writing them back
 * into the master gradients. */
int amp_param_grad_set(amp_ctx *ctx, int i, amp_dtype dtype, const void *data,
                       int64_t nonfinite);

/* ---- optimizer sharding --------------------------------------------------------------------- */
/* Nonzero when this step's update may be split over the ranks (each updating the elements
 * owned gives it): optimizer_sharding is on and nothing in the update reads every element of
 * the gradients (master-gradient statistics under the profiler, accumulated micro-batches). */
int amp_dist_shardable(amp_ctx *ctx);
/* The buffer this rank would exchange for parameter i after a sharded update: the working
 * copy the forward pass reads (*dtype its half type), or the master itself (AMP_F32) when there
 * is no current working copy or an op read the master in the step.  NULL for no parameter i.
 * The ranks must agree (the master when any rank names it, or the working copies' dtypes
 * differ). */
void *amp_param_shard_view(amp_ctx *ctx, int i, amp_dtype *dtype);
/* After a sharded update of parameter i, the ranks exchanged its working copy (master 0: the
 * master and moments stay current only in this rank's share) or its master (master 1: whole
 * again; the working copy, current only in this rank's share, is made again at its next
 * use).  Its moments stay this rank's share's. */
void amp_param_exchanged(amp_ctx *ctx, int i, int master);
/* Parameter i's master and its optimizer moments (n floats each, or NULL): what
 * amp_mpi_consolidate gathers. */
int amp_param_master_state(amp_ctx *ctx, int i, float **master, float **m, float **v);
/* Parameter i's master and moments are whole again on this rank (or were never partial). */
void amp_param_master_gathered(amp_ctx *ctx, int i);
/* Nonzero when parameter i's master or moments are current only in the elements this rank
 * updated last. */
int amp_param_master_partial(amp_ctx *ctx, int i);

/* ---- profiling a collective --------------------------------------------------------------- */
/* Kinds of a collective (the `comm` table's kind). */
enum {
	AMP_COMM_ALLREDUCE = 0, /* "allreduce": a gradient bucket summed over ranks */
	AMP_COMM_BROADCAST = 1, /* "broadcast": parameters sent from rank 0 */
	AMP_COMM_BARRIER = 2,   /* "barrier": the start-up barrier the merge aligns clocks on */
	AMP_COMM_KIND_COUNT
};
enum { AMP_COMM_LOCAL_OVERFLOW = 1u << 0 }; /* this rank's own values held Inf/NaN */

/* Nonzero while the process is profiled. */
int amp_dist_tracing(void);
/* The trace clock (ticks; 0 when not profiled). */
uint64_t amp_dist_clock(void);
/* One collective: posted at t_begin, waited for from t_wait (t_end if never waited on),
 * completed at t_end (ticks of amp_dist_clock); bytes this rank sent, dtype of the payload
 * (AMP_F32, AMP_F16, AMP_BF16), bucket index (-1: none), flags AMP_COMM_*. */
void amp_dist_trace(int64_t step, unsigned kind, amp_dtype dtype, int32_t bucket, uint64_t bytes,
                    uint64_t t_begin, uint64_t t_wait, uint64_t t_end, unsigned flags);
/* A fact for the profile's meta table ("rank", "world_size", ...). */
void amp_dist_meta(const char *key, const char *value);

#ifdef __cplusplus
}
#endif
#endif

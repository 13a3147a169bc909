/* internal.h — the runtime's private types: tensors, the context, the autograd tape, and the
 * helpers every op uses to validate, pick its precision, cast, allocate, trace and record.
 *
 * An op follows one pattern (see ops_elementwise.c for the model):
 *   amp_op_begin()      validates the step, picks the exec dtype from the policy
 *   amp_cast_to()       brings each float input to the exec dtype (records casts, on the tape)
 *   amp_alloc()         allocates the step-scoped output
 *   kernel              computes
 *   amp_op_end()        traces the op and records a tape node with its backward function
 * Backward functions receive the node, read node->out->grad and call amp_grad_acc() per input.
 */
#ifndef AMP_INTERNAL_H
#define AMP_INTERNAL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "amp/amp.h"
#include "amp/amp_dist.h"
#include "amp_events.h"
#include "dtype.h"
#include "kernels/kernels.h"
#include "trace.h"

_Static_assert((int)AMP_F32 == AMP_DTYPE_F32 && (int)AMP_F16 == AMP_DTYPE_F16 &&
               (int)AMP_I32 == AMP_DTYPE_I32 && (int)AMP_BF16 == AMP_DTYPE_BF16,
               "amp_dtype values are the wire's dtype codes");

/* Precision modes, after CANN's precision_mode: one row each in ctx.c's mode table, which
 * gives its name, its kind and its half type.  Values are indexes into that table. */
typedef enum {
	AMP_MODE_FORCE_FP32 = 0,   /* force_fp32 */
	AMP_MODE_MIX = 1,          /* allow_mix_precision (FP16) */
	AMP_MODE_FORCE_FP16 = 2,   /* force_fp16 */
	AMP_MODE_KEEP_ORIGIN = 3,  /* must_keep_origin_dtype */
	AMP_MODE_MIX_FP16 = 4,     /* allow_mix_precision_fp16: the explicit name of MIX */
	AMP_MODE_MIX_BF16 = 5,     /* allow_mix_precision_bf16 */
	AMP_MODE_FORCE_BF16 = 6,   /* force_bf16 */
	AMP_MODE_COUNT
} amp_precision_mode;

/* What a mode does with the lists (policy.c). */
typedef enum {
	AMP_KIND_FP32,   /* everything in FP32 */
	AMP_KIND_MIX,    /* white list in the half type, black in FP32, gray follows its inputs */
	AMP_KIND_FORCE,  /* every op in the half type but a custom black list */
	AMP_KIND_KEEP,   /* each op in its first input's dtype */
} amp_mode_kind;

typedef struct amp_mode_info {
	const char *name;   /* the precision_mode value */
	amp_mode_kind kind;
	amp_dtype half;     /* the half type the mode computes in (F16 for the FP32/keep modes) */
} amp_mode_info;
/* The row of a mode (ctx.c). */
const amp_mode_info *amp_mode_info_of(amp_precision_mode mode);

typedef struct amp_node amp_node;
typedef struct amp_param amp_param;

struct amp_tensor {
	amp_ctx *owner;          /* the context that made it: a tensor of another one is refused */
	amp_dtype dtype;
	amp_shape shape;
	int64_t numel;
	void *data;              /* 64-byte aligned; step arena or persistent heap */
	amp_tensor *grad;        /* same dtype and shape, created by backward; NULL before */
	amp_node *node;          /* tape node that produced it, NULL for leaves */
	amp_param *param;        /* set on a parameter's master tensor */
	int requires_grad;       /* a parameter, or computed from one */
	int persistent;          /* outlives the step (parameters, optimizer state) */
	uint32_t id;
	/* Step-scoped storage this tensor owns (from the step arena, not an alias or a working
	 * copy), which memory_optimize may release: its bytes and their category. */
	uint8_t owns_data;
	uint8_t mem_cat;         /* amp_mem_category */
	uint8_t released;        /* memory_optimize released data (and it must not be read) */
	/* A gradient's NaN/Inf count as the checks last scanned it, void from its next write on
	 * (grad_of clears nonfinite_known): a master keeping it (amp_grad_acc_kept) need not
	 * count it again. */
	uint8_t nonfinite_known;
	int64_t nonfinite;
};

struct amp_param {
	amp_tensor *master;      /* FP32, persistent; master->grad is the FP32 master gradient */
	/* The half working copy: a persistent buffer (work, of work_dtype) that the optimizer's
	 * update pass rewrites as it updates the master, so that a step needs no separate
	 * conversion pass; working is this step's tensor over it (step-scoped header, on the tape
	 * as a cast of the master), NULL until its first use in the step. */
	void *work;              /* persistent, work_dtype, master->numel elements; or NULL */
	amp_dtype work_dtype;
	void *work_alt;          /* the buffer of the other half type, when a parameter is used in
	                            both (must_keep_origin_dtype): swapped in, refreshed, on a flip */
	amp_dtype work_alt_dtype;
	int work_valid;          /* work holds the master's current values, rounded */
	int moved;               /* the master's values were written since amp_param_moved */
	int64_t work_nonfinite;  /* NaN/Inf its last refresh wrote (a cast overflow) */
	amp_tensor *working;     /* this step's working copy, or NULL (step-scoped) */
	int64_t working_step;    /* step the working copy belongs to */
	char *label;
	amp_tensor *opt_m;       /* optimizer state: momentum or Adam first moment (or NULL) */
	amp_tensor *opt_v;       /* Adam second moment (or NULL) */
	int index;               /* registration order, from 0 (amp_param_at) */
	amp_node *last_use;      /* data parallel: the oldest tape node reading the master this
	                            step, after whose backward its gradient is final */
	int grad_stale;          /* master->grad was used and cleared by the optimizer and is
	                            zero in meaning, not in memory: the step's first gradient is
	                            written over it (no zeroing pass, no read of zeros to add to);
	                            a reader that comes first zeroes it (amp_param_grad_settle) */
	const amp_tensor *grad_kept; /* this step's gradient, not yet taken into master->grad
	                            (whose memory is then not the gradient): a half tensor of the
	                            step arena that was the only gradient (amp_grad_acc_kept), or
	                            the sum over ranks a data-parallel backend set in its payload
	                            dtype (amp_param_grad_set).  The optimizer's update widens it
	                            block by block in its own pass; any other reader or writer
	                            first has it widened into master->grad (amp_param_grad_settle) */
	int grad_counted;        /* this step's gradient came from one half gradient (widened or
	                            in grad_kept) whose NaN/Inf count is grad_nonfinite; any other
	                            write (every writer opens it with grad_of or reads
	                            amp_tensor_grad) clears this, and the optimizer then counts for
	                            itself */
	int64_t grad_nonfinite;
	/* Data parallel with optimizer_sharding: the elements [own_lo, own_hi) this rank updates
	 * in this step (the whole tensor otherwise); master_partial when the master is current
	 * only in the elements this rank updated last (the ranks gathered the working copy, not
	 * the master), moments_partial the same of the optimizer moments (amp_mpi_consolidate
	 * gathers both); f32_step the last step an op read the master itself (an FP32 use: the
	 * ranks then gather the master, amp_param_shard_view) */
	int64_t own_lo, own_hi;
	int master_partial, moments_partial;
	int64_t f32_step;
	amp_param *next;
};

typedef int (*amp_backward_fn)(amp_ctx *ctx, amp_node *node);
/* memory_optimize: writes node->out's data again (storage reserved by the caller) from what
 * the node keeps for its own backward, bit for bit what its forward wrote. */
typedef int (*amp_recompute_fn)(amp_ctx *ctx, amp_node *node);

#define AMP_NODE_MAX_IN 4
struct amp_node {
	amp_op_type op;
	const char *label;       /* points into the step arena */
	amp_backward_fn backward;
	amp_tensor *in[AMP_NODE_MAX_IN]; /* inputs as the kernel saw them (after casts) */
	int n_in;
	amp_tensor *out;
	amp_dtype exec;
	float f[4];              /* op attributes (eps, p, scale...) */
	int64_t i[4];            /* op attributes (stride, pad, dims, flags...) */
	void *saved;             /* extra saved buffer in the step arena (mask, mean/rstd, ...) */
	/* Set by an op whose backward does not read its output and that can write it again
	 * from its inputs and saved state: memory_optimize then drops the output when backward
	 * begins and recomputes it for each later node whose backward reads it. */
	amp_recompute_fn recompute;
	uint8_t in_unread;       /* its backward reads no input's values (only their shapes): a
	                            dropped input is not recomputed for it */
	amp_node *prev;          /* tape is a list, newest first */
	uint64_t seq;            /* seq of the forward op (casts: 0); the checks of its backward
	                            name it, so a gradient leads back to its layer's call site */
};

/* Bump allocator for step-scoped memory, reset by amp_step_end(). */
typedef struct amp_arena_chunk amp_arena_chunk;
typedef struct amp_arena {
	amp_arena_chunk *head;   /* current chunk */
	amp_arena_chunk *spare;  /* chunks kept for reuse after a reset */
	size_t used_total;       /* bytes handed out since the last reset */
} amp_arena;

typedef struct amp_scaler {
	int dynamic;             /* 0: static scale */
	double scale;
	double growth_factor, backoff_factor, min_scale, max_scale;
	int64_t growth_interval;
	int64_t clean_steps;     /* consecutive clean steps since the last change */
} amp_scaler;

#define AMP_CONFIG_KEYS 24 /* room for the keys of ctx.c's table */
typedef struct amp_config {
	amp_precision_mode mode;
	int scaler_set;          /* a loss_scale* key was set: the mode's default scaling is off */
	signed char custom[AMP_OP_COUNT]; /* -1: default list; else amp_op_list forced */
	char white_list_text[512], black_list_text[512];
	amp_scaler scaler_init;  /* configured values; the live scaler is ctx->scaler */
	double static_scale;     /* loss_scale = <number> */
	uint64_t seed;
	amp_dtype allreduce_dtype;   /* data parallel: payload of the gradient all-reduce */
	int64_t allreduce_bucket_kb; /* data parallel: gradient bucket size */
	int optimizer_sharding;      /* data parallel: each rank updates its share (amp_mpi.h) */
	double clip_norm;        /* gradient_clipping: 0 = off */
	int64_t accum_steps;     /* gradient_accumulation_steps, >= 1 */
	int memory_optimize;     /* memory_optimize = on */
	uint64_t memory_limit;   /* memory_limit in bytes, 0 = none */
	/* where each key (config_keys[] order in ctx.c) was last set: "path:line", "environment
	 * AMP_KEY" or "amp_config_set"; "" if never.  Profiles record it, so advice can name it. */
	char source[AMP_CONFIG_KEYS][160];
} amp_config;

struct amp_optim;
struct amp_check_ctx;

struct amp_ctx {
	amp_config cfg;
	amp_dtype half;          /* the half type of the precision mode: FP16 or BF16 */
	amp_scaler scaler;
	int scaler_used; /* the live scaler decided a step (or came from a checkpoint):
	                    a mode of another kind of scaling can no longer replace it */
	amp_arena arena;
	amp_param *params;       /* list, newest first */
	int n_params;
	struct amp_optim *optims;
	struct amp_optim *state_owner; /* the optimizer whose state (moments) the parameters hold:
	                                  another one that steps starts its own afresh */
	amp_node *tape;          /* this step's nodes, newest first */
	int training;
	int in_step;
	int config_traced;       /* the configuration went to the profile (at the first step this
	                            context ran traced: step 0, or the first after a checkpoint) */
	int in_backward;         /* ops run during backward are traced with phase backward */
	int backward_done;
	int optim_done;          /* amp_optim_step ran in this step */
	int backward_failed;     /* an amp_backward of this step stopped part way: its gradients
	                            are incomplete, discarded at amp_step_end */
	int64_t step;            /* current step index; -1 before the first */
	int64_t samples;
	uint64_t step_t0;
	double step_loss;        /* unscaled loss of this step, NAN if unknown */
	double step_scale;       /* loss scale the step's backward used */
	int step_overflow, step_skipped;
	double step_loss_sum;    /* sum of the micro-batches' unscaled losses */
	int64_t micro_done;      /* backward passes run in this step (micro-batches) */
	int micro_marked;        /* the micro-batches' arena mark was taken */
	double grad_norm;        /* last optimizer step's global norm (NAN: not taken) */
	int grad_clipped;        /* last optimizer step clipped */
	/* What the op being run is (for memory_limit errors): its type (AMP_OP_COUNT: none) and
	 * label, or a description of a non-op allocation. */
	amp_op_type cur_op;
	const char *cur_label;
	const char *cur_what;
	int limit_hit;           /* memory_limit refused an allocation in this step */
	uint64_t seq;            /* op sequence number */
	uint32_t next_tensor_id;
	uint64_t rng_state;      /* dropout stream */
	int64_t ckpt_loads;      /* checkpoints loaded into this context, and the last one's */
	uint32_t ckpt_crc;       /* training state's checksum: what data-parallel ranks compare */
	char *ckpt_note;         /* the program's note (amp_checkpoint_set_note), or NULL */
	uint64_t update_hist;    /* hash of every update's hyperparameters since the start or the
	                            last load (ranks compare it: amp_dist_shared_state) */
	struct amp_check_ctx *check; /* non-finite check state (check.c), NULL until first check */
	const struct amp_dist_ops *dist; /* data-parallel backend (amp/amp_dist.h), or NULL */
	void *dist_state;
	amp_run_stats stats;
	struct amp_ctx *live_prev, *live_next; /* the process's live contexts (ctx.c) */
	uint32_t trace_id; /* this context in the run (amp_trace_context_id, amp_rec_memory.ctx) */
	int mem_traced;    /* it reported its memory: its end is reported too */
	uint64_t mem[AMP_MEM_NCAT];      /* live bytes by category */
	uint64_t step_mem[AMP_MEM_NCAT]; /* of which step-scoped, released at step end */
	uint64_t mem_peak;
	uint64_t mem_peak_param_act;     /* peak of master + working + activations */
	/* memory_optimize: the bytes by category, and their peak, as they would be without it */
	uint64_t mem_unopt[AMP_MEM_NCAT];
	uint64_t step_mem_unopt[AMP_MEM_NCAT];
	uint64_t mem_peak_unopt;
	/* Arena blocks memory_optimize released in this step, for reuse (tensor.c). */
	struct amp_free_block *free_blocks;
	/* The arena position where this step's micro-batches begin (amp_micro_batch_begin). */
	struct amp_arena_chunk *mark_chunk;
	size_t mark_used, mark_total;
	uint64_t mark_step_mem[AMP_MEM_NCAT], mark_step_mem_unopt[AMP_MEM_NCAT];
	amp_node *mark_tape;
	void **persist;                  /* persistent blocks, freed with the context */
	size_t n_persist, cap_persist;
	char err[1024];
	const char *config_source; /* while a file line or an AMP_* variable is applied: its name */
	/* amp_config_get's values that are formatted, one buffer a key (a value stays valid across
	 * reads of other keys); get_slot is the key being read */
	char getbuf[AMP_CONFIG_KEYS][64];
	int get_slot;
};

/* ---- errors ------------------------------------------------------------------------------ */
/* Formats the context's error message and returns code. */
int amp_fail(amp_ctx *ctx, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* The code for an allocation that returned NULL (its message is set): AMP_ELIMIT when it was
 * refused by memory_limit, else AMP_ENOMEM. */
int amp_oom(const amp_ctx *ctx);
/* The process's list of live contexts (a forked child takes their counter bases from it):
 * amp_ctx_new adds a context, amp_ctx_free removes it.  Thread-safe. */
void amp_ctx_live_add(amp_ctx *ctx);
void amp_ctx_live_remove(amp_ctx *ctx);
/* "(2,784)" into buf. */
const char *amp_shape_str(amp_shape s, char *buf, size_t len);
int64_t amp_shape_numel(amp_shape s);
/* Checks the keys that must agree (loss_scale_min <= loss_scale_max): AMP_OK or
 * AMP_ECONFIG naming where each was set.  At amp_ctx_new and every amp_step_begin. */
int amp_config_check(amp_ctx *ctx);
/* The ops and copies this thread dispatched, whatever their context: what the thread's ring
 * reports to ampprof as ops_dispatched and copies (ring-scoped counters are a thread's own
 * totals; a context's would count twice when two contexts share a thread, or one context two
 * threads).  A forked child starts them at 0: the parent's ring counted what came before. */
extern __thread int64_t amp_tl_ops, amp_tl_copies;
static inline void amp_count_op(amp_ctx *ctx)
{
	ctx->stats.ops_dispatched++;
	amp_tl_ops++;
}
static inline void amp_count_copy(amp_ctx *ctx)
{
	ctx->stats.copies++;
	amp_tl_copies++;
}
/* What an API call on a tensor memory_optimize released says. */
extern const char amp_released_why[];
/* What an API call given a tensor of another context says. */
extern const char amp_foreign_why[];
/* 1 if s can be a tensor's shape: 0..AMP_MAX_DIMS dims, each extent >= 1, at most 2^40
 * elements (so that no byte count overflows). */
int amp_shape_valid(amp_shape s);
int amp_shape_eq(amp_shape a, amp_shape b);

/* ---- memory ------------------------------------------------------------------------------ */
/* Step-arena allocation, 64-byte aligned, zeroed; NULL when out of memory. */
void *amp_arena_alloc(amp_ctx *ctx, size_t bytes);
/* The same, not zeroed: it holds what an earlier step left there.  Only for a buffer the
 * caller writes in full before anything reads it. */
void *amp_arena_alloc_raw(amp_ctx *ctx, size_t bytes);
/* Step-scoped tensor (zeroed) counted under category; sets an error and returns NULL on OOM. */
amp_tensor *amp_alloc(amp_ctx *ctx, amp_dtype dt, amp_shape shape, amp_mem_category cat);
/* The same, not zeroed (amp_arena_alloc_raw): for an output the caller writes in full. */
amp_tensor *amp_alloc_raw(amp_ctx *ctx, amp_dtype dt, amp_shape shape, amp_mem_category cat);
/* Persistent zeroed block (64-byte aligned) freed with the context; NULL when out of memory. */
void *amp_persist_alloc(amp_ctx *ctx, size_t bytes);
/* Persistent tensor freed with the context. */
amp_tensor *amp_alloc_persistent(amp_ctx *ctx, amp_dtype dt, amp_shape shape,
                                 amp_mem_category cat);
/* Step-scoped tensor sharing src's data under a new shape (same numel). */
amp_tensor *amp_alias(amp_ctx *ctx, amp_tensor *src, amp_shape shape);
void amp_mem_account(amp_ctx *ctx, amp_mem_category cat, int64_t delta);
/* memory_limit: AMP_OK if bytes more of tensor memory fit, else AMP_ELIMIT with a message
 * naming the op being run (ctx->cur_op, cur_label or cur_what) and the bytes. */
int amp_mem_check(amp_ctx *ctx, uint64_t bytes);
/* Bytes counted under cat that exist only without memory_optimize (a buffer it recomputes
 * instead of keeping): added to the unoptimized ledger of this step. */
void amp_mem_unopt_only(amp_ctx *ctx, amp_mem_category cat, uint64_t bytes);
/* memory_optimize: gives t's step-scoped storage back to the arena (its bytes leave its
 * category; the arena reuses them later in the step).  No-op for a tensor that does not own
 * step storage. */
void amp_tensor_release(amp_ctx *ctx, amp_tensor *t);
/* memory_optimize: new step storage for a tensor amp_tensor_release released, counted in its
 * category again (in the optimized ledger only: without memory_optimize it never left), for
 * its producer's recompute to fill.  AMP_OK, or AMP_ELIMIT / AMP_ENOMEM with the message set. */
int amp_tensor_reacquire(amp_ctx *ctx, amp_tensor *t);
/* Step-scoped bytes counted under cat that are not a tensor (saved op state: a dropout mask,
 * max-pool indices), allocated raw; NULL (error set) when out of memory or over the limit. */
void *amp_arena_alloc_counted(amp_ctx *ctx, size_t bytes, amp_mem_category cat);
/* Label copied into the step arena (NULL stays NULL). */
const char *amp_arena_strdup(amp_ctx *ctx, const char *s);

/* ---- precision policy -------------------------------------------------------------------- */
amp_op_list amp_policy_list(const amp_ctx *ctx, amp_op_type op);
/* dtype an op executes in, given its float inputs (n of them, NULLs ignored). */
amp_dtype amp_policy_exec(const amp_ctx *ctx, amp_op_type op, amp_tensor *const *in, int n);
/* Brings t to dtype dt: returns t itself when it already has it, the parameter's working copy
 * for an FP32 master going to FP16 (made once per step), or a new cast tensor with a tape node
 * whose backward casts the gradient back.  Records a copy event.  NULL (error set) on failure. */
amp_tensor *amp_cast_to(amp_ctx *ctx, amp_tensor *t, amp_dtype dt, const char *label);

/* Sends, for every configuration key that was set, where (meta '<key>_source'). */
void amp_config_trace_sources(amp_ctx *ctx);

/* ---- op dispatch ------------------------------------------------------------------------- */
typedef struct amp_op_call {
	amp_op_type op;
	const char *label;
	amp_dtype exec;          /* chosen by amp_op_begin */
	amp_dtype in_dtype;      /* first input's dtype as passed by the caller */
	uint64_t t0;             /* trace clock at begin (0 when not tracing) */
	uint64_t flops, bytes;   /* filled by the op for the trace */
	int aligned;
	amp_engine engine;       /* what the op's arithmetic ran on, set by the op (for the trace) */
} amp_op_call;

/* Checks that a step is open and the inputs are non-NULL float tensors, and picks the exec
 * dtype for the n inputs.  Returns AMP_OK or an error naming the op and label. */
int amp_op_begin(amp_ctx *ctx, amp_op_call *call, amp_op_type op, const char *label,
                 amp_tensor *const *in, int n);
/* Starts the timer after the casts (so cast time is not counted as op time). */
void amp_op_start_timer(amp_op_call *call);
/* The middle of an op that computes in FP32: casts in[0..n-1] to call->exec in place, starts
 * the timer, allocates *y (exec dtype, in[0]'s shape, activations) and sets views[i] to an FP32
 * view of each cast input and *y32 to the buffer the kernel writes (y's storage when FP32, else
 * arena scratch for amp_store_f32).  All step-scoped.  Returns AMP_OK or an error (set). */
int amp_op_setup_f32(amp_ctx *ctx, amp_op_call *call, amp_tensor **in, int n,
                     const float **views, amp_tensor **y, float **y32);
/* Traces the op, counts it, and, when training and any input requires grad, records a tape
 * node (returned through *node, may be NULL) with backward fn and the inputs.  out->requires_grad
 * is set accordingly. */
int amp_op_end(amp_ctx *ctx, amp_op_call *call, amp_tensor *out, amp_tensor *const *in, int n,
               amp_backward_fn backward, amp_node **node);
/* For kernels run inside backward functions and the optimizer: trace an op of `phase` whose
 * arithmetic ran on engine (AMP_ENGINE_NONE when the kernel does not say). */
void amp_trace_kernel(amp_ctx *ctx, amp_op_type op, const char *label, amp_dtype exec,
                      amp_engine engine, amp_phase phase, uint64_t t0, uint64_t flops,
                      uint64_t bytes, amp_shape shape);
/* The same for a kernel made of GEMMs (a backward GEMM op), with its aligned flag: 1 when its
 * GEMMs' M, N and K are all multiples of 8 (the forward op's rule). */
void amp_trace_kernel_gemm(amp_ctx *ctx, amp_op_type op, const char *label, amp_dtype exec,
                           amp_engine engine, amp_phase phase, uint64_t t0, uint64_t flops,
                           uint64_t bytes, amp_shape shape, int aligned);

/* ---- autograd helpers -------------------------------------------------------------------- */
/* Adds g (same shape as t; any float dtype, converted to t's dtype) into t->grad, creating it
 * (zeroed) on first use.  Grads of parameters' masters are persistent, others step-scoped. */
int amp_grad_acc(amp_ctx *ctx, amp_tensor *t, const amp_tensor *g);
/* Where a kernel may write t's gradient in dtype dt itself: t->grad when it exists in dt
 * (*fresh = 0: add to it), a new t->grad when the one amp_grad_acc would create is of dt
 * (*fresh = 1: write all of it; it is not zeroed), else NULL (nothing done; write elsewhere
 * and amp_grad_acc it).  On out of memory: NULL and *fresh = -1. */
amp_tensor *amp_grad_dst(amp_ctx *ctx, amp_tensor *t, amp_dtype dt, int *fresh);
/* Block-wise gradient accumulation: amp_grad_open returns t's gradient (created, not zeroed,
 * on first use; NULL on out of memory) with *fresh = 1 when it is to be written in full, 0
 * when added to; then for each block, dx = amp_grad_block_dst(...) is where the kernel writes
 * its fp32 gradient values and amp_grad_block_end stores or adds them. */
amp_tensor *amp_grad_open(amp_ctx *ctx, amp_tensor *t, int *fresh);
float *amp_grad_block_dst(amp_tensor *g, int fresh, int64_t i0, float *buf);
void amp_grad_block_end(amp_tensor *g, int fresh, int64_t i0, int64_t n, const float *dx);
/* Adds n floats from g32 (fp32 buffer) into t->grad in t's dtype. */
int amp_grad_acc_f32(amp_ctx *ctx, amp_tensor *t, const float *g32);
/* amp_grad_acc for the gradient g of a master parameter t where g is a half tensor of this
 * step that nothing writes or releases before the step ends (a working copy's gradient, no
 * memory_optimize): as the step's first gradient it is not widened now but kept as
 * amp_param.grad_kept, for the optimizer to widen in its update pass.  Returns 1 when kept,
 * 0 when added as amp_grad_acc does, < 0 on error. */
int amp_grad_acc_kept(amp_ctx *ctx, amp_tensor *t, const amp_tensor *g);
/* master->grad made to hold p's gradient in memory: zeroed if it is stale (amp_param.
 * grad_stale), widened from grad_kept if it is kept there; for a reader or writer that is not
 * the optimizer's update (the public accessor, a second gradient, clipping, statistics, the
 * end of the step's arena). */
void amp_param_grad_settle(amp_param *p);
/* Gradient of the node's output as an fp32 buffer in the step arena (converted if fp16). */
const float *amp_grad_out_f32(amp_ctx *ctx, amp_node *node);

/* Reverse pass from any tensor `out` whose gradient is seeded with out->numel floats (fp32).
 * amp_backward() is this with the loss scale as the seed; tests use it for gradient checks. */
int amp_backward_seeded(amp_ctx *ctx, amp_tensor *out, const float *seed);
/* memory_optimize: recomputes, into new step storage, node's inputs that were dropped when
 * backward began (node->recompute of their producer) — those its backward reads, or all of
 * them when all is set (the checks at a non-finite origin read them).  got (AMP_NODE_MAX_IN)
 * receives them, *n_got their number, for amp_node_inputs_release after the reading.  AMP_OK
 * or the error of the allocation (memory_limit) or of the recompute. */
int amp_node_inputs_back(amp_ctx *ctx, const amp_node *node, int all, amp_tensor **got, int *n_got);
void amp_node_inputs_release(amp_ctx *ctx, amp_tensor **got, int n_got);

/* ---- float access -------------------------------------------------------------------------
 * Ops that compute elementwise in fp32 read half tensors through these (vectorized converts). */
/* fp32 view of t's data (a float tensor): t->data itself for fp32, else a converted copy in
 * the step arena. */
const float *amp_f32_view(amp_ctx *ctx, const amp_tensor *t);
/* Block-wise access, for elementwise kernels that compute in FP32 on half storage without
 * converting whole tensors: blocks of at most AMP_BLOCK elements stay in L1 between the
 * conversion in, the arithmetic and the conversion out. */
#define AMP_BLOCK 2048
/* fp32 values of the float tensor t at [i0, i0+n), n <= AMP_BLOCK: t's own storage for fp32,
 * else buf (AMP_BLOCK floats) filled by conversion. */
const float *amp_block_read(const amp_tensor *t, int64_t i0, int64_t n, float *buf);
/* Where a kernel writes fp32 values for t at [i0, ...): t's own storage for fp32, else buf;
 * amp_block_write then stores them. */
float *amp_block_dst(amp_tensor *t, int64_t i0, float *buf);
/* Stores n values written at dst (from amp_block_dst) into t at i0: rounds them for a half t,
 * nothing to do for fp32. */
void amp_block_write(amp_tensor *t, int64_t i0, int64_t n, const float *dst);
/* y = a op b for op AMP_OP_ADD, _SUB, _MUL, _DIV, _MAXIMUM or _MINIMUM with NumPy
 * broadcasting (y has the broadcast shape of a and b), all three of one float dtype, block by
 * block (fp16 Add, Sub and Mul on the fp16 kernels).  *engine (engine may be NULL) = what the
 * arithmetic ran on.  AMP_OK, AMP_ESHAPE when the shapes do not broadcast to y's, or
 * AMP_ENOMEM (message set). */
int amp_binary_blocks(amp_ctx *ctx, amp_op_type op, const amp_tensor *a, const amp_tensor *b,
                      amp_tensor *y, amp_engine *engine);
/* Stores t->numel fp32 values into the float tensor t (rounded to its dtype). */
void amp_store_f32(amp_tensor *t, const float *src);

/* ---- loss scaler ------------------------------------------------------------------------- */
/* Decides the next scale after a step whose gradients were finite or not; returns the reason
 * and updates s.  Pure: no tracing. */
amp_scale_reason amp_scaler_update(amp_scaler *s, int overflow);

/* ---- misc -------------------------------------------------------------------------------- */
/* Deterministic RNG (splitmix64 / xoshiro-style) for init and dropout. */
uint64_t amp_rng_next(uint64_t *state);
float amp_rng_uniform(uint64_t *state);  /* [0, 1) */
float amp_rng_normal(uint64_t *state);   /* N(0, 1) */
/* The master of p changed outside the optimizer: its working copy is remade at its next use. */
void amp_param_touched(amp_param *p);
/* Nonzero if any value of t is NaN or Inf. */
int amp_tensor_nonfinite(const amp_tensor *t);

#endif

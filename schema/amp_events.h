/* amp_events.h — the event vocabulary shared by libamprt (producer) and ampprof (collector).
 *
 * This header is the contract between processes: enum values are stored in the profile
 * database as integers and must never be renumbered; add new values at the end.  The ring
 * record layout that carries them is defined below the enums; any change to it bumps
 * AMP_WIRE_VERSION.
 */
#ifndef AMP_EVENTS_H
#define AMP_EVENTS_H

#include <stddef.h>
#include <stdint.h>

/* Op types.  Names (amp_op_name) are the ones used in white/black lists and in the database. */
typedef enum {
	AMP_OP_MATMUL = 0,
	AMP_OP_BATCH_MATMUL,
	AMP_OP_LINEAR,
	AMP_OP_CONV2D,
	AMP_OP_MAXPOOL2D,
	AMP_OP_ADD,
	AMP_OP_MUL,
	AMP_OP_SCALE,
	AMP_OP_BIAS_ADD,
	AMP_OP_RELU,
	AMP_OP_GELU,
	AMP_OP_SOFTMAX,
	AMP_OP_LOG_SOFTMAX,
	AMP_OP_LOG,
	AMP_OP_EXP,
	AMP_OP_SQRT,
	AMP_OP_POW,
	AMP_OP_LAYER_NORM,
	AMP_OP_CROSS_ENTROPY,
	AMP_OP_SUM,
	AMP_OP_MEAN,
	AMP_OP_RESHAPE,
	AMP_OP_TRANSPOSE,
	AMP_OP_EMBEDDING,
	AMP_OP_DROPOUT,
	AMP_OP_OPTIMIZER,   /* one optimizer update over all parameters */
	AMP_OP_SUB,
	AMP_OP_DIV,
	AMP_OP_NEG,
	AMP_OP_ABS,
	AMP_OP_MAXIMUM,     /* elementwise max of two tensors (broadcast) */
	AMP_OP_MINIMUM,
	AMP_OP_CLAMP,
	AMP_OP_SIGMOID,
	AMP_OP_TANH,
	AMP_OP_MAX,         /* maximum over an axis (a reduction); Sum and Mean take an axis too */
	AMP_OP_BATCH_NORM2D,
	AMP_OP_AVGPOOL2D,
	AMP_OP_GLOBAL_AVGPOOL2D,
	AMP_OP_CONCAT,
	AMP_OP_SLICE,
	AMP_OP_COUNT
} amp_op_type;
/* The op byte of a record (wire v2) whose op type is outside amp_op_type, named by op_name. */
#define AMP_OP_BY_NAME 255u

/* Precision class of an op type under allow_mix_precision. */
typedef enum { AMP_LIST_GRAY = 0, AMP_LIST_WHITE = 1, AMP_LIST_BLACK = 2 } amp_op_list;

typedef enum {
	AMP_PHASE_FORWARD = 0,
	AMP_PHASE_BACKWARD = 1,
	AMP_PHASE_OPTIMIZER = 2,
} amp_phase;

/* Memory-copy kinds (the `copies` table). */
typedef enum {
	AMP_COPY_H2D = 0,     /* input staging */
	AMP_COPY_D2H = 1,     /* readback */
	AMP_COPY_D2D = 2,     /* same-dtype copy (contiguous transpose, grad accumulation copy) */
	AMP_COPY_CAST = 3,    /* dtype conversion at a precision boundary */
	AMP_COPY_LAYOUT = 4,  /* layout transform (im2col, transposes) */
	AMP_COPY_MASTER = 5,  /* FP32 master weight -> FP16 working copy refresh (a cast) */
} amp_copy_kind;

/* Loss-scaler decisions (the `loss_scale` table). */
typedef enum {
	AMP_SCALE_HOLD = 0,      /* clean step, below the growth interval */
	AMP_SCALE_GROWTH = 1,    /* growth interval reached: scale *= growth factor */
	AMP_SCALE_OVERFLOW = 2,  /* Inf/NaN in gradients: scale *= backoff, step skipped */
	AMP_SCALE_INIT = 3,      /* initial scale */
	AMP_SCALE_STATIC = 4,    /* static scale in use */
} amp_scale_reason;

/* Memory categories (the `memory` table). */
typedef enum {
	AMP_MEM_MASTER = 0,       /* FP32 master weights */
	AMP_MEM_WORKING = 1,      /* FP16 working copies of weights */
	AMP_MEM_ACTIVATIONS = 2,  /* step-scoped activations and inputs */
	AMP_MEM_GRADS = 3,        /* gradients */
	AMP_MEM_OPTIMIZER = 4,    /* optimizer state (momentum, Adam moments) */
	AMP_MEM_NCAT
} amp_mem_category;

/* Element types: the codes the wire carries (the dtype fields of the records below) and the
 * names the database stores.  The runtime's public amp_dtype (amp/amp.h) has the same values. */
enum {
	AMP_DTYPE_F32 = 0,   /* "fp32" */
	AMP_DTYPE_F16 = 1,   /* "fp16": IEEE binary16 */
	AMP_DTYPE_I32 = 2,   /* "int32": indices, never a compute type */
	AMP_DTYPE_BF16 = 3,  /* "bf16": bfloat16, the upper half of an fp32 */
	AMP_DTYPE_COUNT
};

/* The role of a checked or dumped tensor (amp_rec_tstats.role, amp_rec_dump.role). */
enum { AMP_ROLE_INPUT = 0, AMP_ROLE_OUTPUT = 1, AMP_ROLE_GRAD = 2, AMP_ROLE_COUNT };
/* Why a tensor was dumped (amp_rec_dump.reason). */
enum {
	AMP_DUMP_REASON_NONFINITE = 0, /* the inputs and outputs of a non-finite origin */
	AMP_DUMP_REASON_STEP = 1,      /* one of --dump-steps: every op of the step */
	AMP_DUMP_REASON_MANUAL = 2,    /* asked for by the program */
	AMP_DUMP_REASON_COUNT
};

/* What an op's arithmetic ran on (the `ops.engine` column).  The half engines are the ones
 * whose multiply-adds take half operands; FP32_FMA is FP32 SIMD arithmetic, which is also what
 * half-typed ops run on where the CPU has no half arithmetic (half storage, converted in
 * registers). */
typedef enum {
	AMP_ENGINE_NONE = 0,         /* "none": no arithmetic (views, reshapes), or not recorded */
	AMP_ENGINE_SCALAR = 1,       /* "scalar": portable C */
	AMP_ENGINE_FP32_FMA = 2,     /* "fp32-fma": FP32 AVX2 or AVX-512 arithmetic */
	AMP_ENGINE_AVX512_BF16 = 3,  /* "avx512-bf16": vdpbf16ps, FP32 sums */
	AMP_ENGINE_AVX512_FP16 = 4,  /* "avx512-fp16": vfmadd231ph, promoted to FP32 in blocks;
	                                elementwise vaddph, vmulph, vmaxph on fp16 */
	AMP_ENGINE_AMX_BF16 = 5,     /* "amx-bf16": tdpbf16ps tiles, FP32 sums */
	AMP_ENGINE_COUNT
} amp_engine;

const char *amp_op_name(amp_op_type op);
/* Op type for a name as used in lists ("MatMul"), or -1. */
int amp_op_from_name(const char *name);
const char *amp_phase_name(amp_phase ph);
const char *amp_copy_kind_name(amp_copy_kind k);
const char *amp_scale_reason_name(amp_scale_reason r);
const char *amp_mem_category_name(amp_mem_category c);
/* "input", "output", "grad"; "nonfinite", "step", "manual"; "?" for an unknown value. */
const char *amp_role_name(unsigned role);
const char *amp_dump_reason_name(unsigned reason);
/* Dtype name of a wire code ("fp32", "fp16", "int32", "bf16"), "?" for an unknown one; the
 * code of a name, or -1; nonzero for the half types (fp16, bf16). */
const char *amp_dtype_code_name(unsigned code);
int amp_dtype_code_from_name(const char *name);
int amp_dtype_code_is_half(unsigned code);
/* Engine name ("amx-bf16"), "?" for an unknown value; the engine of a name, or -1; nonzero
 * for the engines with half arithmetic (avx512-bf16, avx512-fp16, amx-bf16). */
const char *amp_engine_name(amp_engine e);
int amp_engine_from_name(const char *name);
int amp_engine_is_half(amp_engine e);
/* The default precision list of an op type (white: runs in the half type under the mixed
 * modes; black: FP32; gray: follows its inputs).  The optimizer update is black: it runs on
 * the FP32 masters.  custom_white_list / custom_black_list override it per run. */
amp_op_list amp_op_default_list(amp_op_type op);
/* "white", "black", "gray". */
const char *amp_op_list_name(amp_op_list l);

/* ==== wire format: the shared-memory session between libamprt and ampprof ==================
 *
 * ampprof creates one memfd, lays out an amp_session_hdr at offset 0 and ring_count rings after
 * it, and passes the fd number to the application in $AMPPROF_SESSION.  Each producing thread
 * claims one ring (atomic increment of rings_claimed) and is its only writer; ampprof is its
 * only reader.  A ring is ring_slots slots of AMP_SLOT_SIZE bytes; positions (head, tail) are
 * 64-bit counters of slots, the slot index is position & (ring_slots - 1).
 *
 * A record starts on a slot with an amp_rec_hdr and spans nslots consecutive slots; it never
 * wraps around the end of the ring (the producer fills the rest with an AMP_REC_PAD record).  The producer writes the record, then its stamp (the low 32
 * bits of its first slot's position) last, and publishes head with a release store in batches.
 * Everything here is written by the application and therefore untrusted by the collector:
 * every field is bounds-checked before use (profiler/decode.c).
 * All integers are little-endian host order; both sides run on the same machine.
 *
 * Compatibility rules.  AMP_WIRE_VERSION names the layout; both sides must speak the same one.
 * A field may be added within a version only in what was zeroed padding, with a meaning for 0
 * that is what a peer predating it meant (as amp_rec_op.engine and amp_rec_tstats.ninf); any
 * other change (a field that grows a record, moves one, or a 0 that would mean something new)
 * bumps the version.  A producer that finds a session of another version does not attach: it
 * writes its own version into amp_session_hdr.producer_wire, and the collector refuses the run
 * naming both versions (a producer of version 1 predates that field and is reported as one
 * that sent no events).
 *
 * Version 2: op types travel by name.  amp_rec_op, amp_rec_tstats and amp_rec_dump carry
 * op_name, the string id of the op type's name; a producer other than libamprt describes its
 * own ops this way (op is then AMP_OP_BY_NAME) and the collector adds them to op_types.
 *
 * Version 3: rings are reclaimed and nothing is lost silently.  A ring whose thread ended
 * (AMP_RING_CLOSED) or whose process died is drained by the collector, which then resets it
 * (head = tail, owner and drop counts zeroed) and marks it AMP_RING_REUSABLE; a thread that
 * finds every fresh ring taken claims a reusable one (compare-and-swap to AMP_RING_CLAIMING,
 * then AMP_RING_OPEN once its owner fields are written).  A thread that finds no ring adds
 * its ring-scoped counters to amp_session_hdr.lost, so ops_dispatched still counts its ops.
 * In drop mode, definitions and boundaries (strings, modules, call sites, clocks, steps,
 * scale decisions, meta, counters, crashes) are never dropped: only event records are, and
 * only while more than 1/AMP_DROP_RESERVE_DIV of the ring is free for the rest; each drop is
 * counted by kind (amp_ring_hdr.dropped_kind).  Also in version 3: collectives of
 * data-parallel training (AMP_REC_COMM, the `comm` table).
 * counted by kind (amp_ring_hdr.dropped_kind).
 *
 * Also in version 3: the step record spans two slots and carries the gradient norm, the clipping
 * flag and the micro-batch count (grad_norm, clipped, micro_batches); the memory record
 * carries the categories as they would be without memory_optimize (bytes_unopt, peak_unopt,
 * valid with AMP_MEMREC_UNOPT).  Added within version 3 in zeroed padding: the context of a
 * step, a memory and a scale record (amp_rec_step.ctx, amp_rec_memory.ctx, amp_rec_scale.ctx)
 * and the memory record of a freed context (AMP_MEMREC_END), so that contexts that did not
 * coexist are not added together.
 */
#define AMP_WIRE_VERSION 3u
#define AMP_SESSION_MAGIC 0x314e5353504d4161ull /* "aAMPSSN1" */
#define AMP_RING_MAGIC 0x31474e52504d4161ull    /* "aAMPRNG1" */
#define AMP_SESSION_ENV "AMPPROF_SESSION"       /* decimal fd number of the session memfd */
#define AMP_SLOT_SIZE 64u
#define AMP_REC_MAX_SLOTS 16u                   /* largest record: 1024 bytes */
#define AMP_RING_HDR_SIZE 256u                  /* ring header, then the slots */
#define AMP_SESSION_HDR_SIZE 4096u
#define AMP_MAX_RANGES 16                       /* step ranges in the session config */
#define AMP_CRASH_FRAMES 32
#define AMP_CALLSITE_FRAMES 6

/* Clock of a ring's timestamps. */
typedef enum { AMP_CLOCK_TSC = 0, AMP_CLOCK_MONO = 1 } amp_clock_kind;

/* Session configuration values. */
typedef enum { AMP_NAN_CHECK_OFF = 0, AMP_NAN_CHECK_OP = 1, AMP_NAN_CHECK_STEP = 2 } amp_nan_check;
typedef enum { AMP_DUMP_OFF = 0, AMP_DUMP_NONFINITE = 1 } amp_dump_mode;
enum {
	AMP_SESS_CALLSTACK = 1u << 0, /* record call sites */
	AMP_SESS_DROP = 1u << 1,      /* ring full: drop and count instead of waiting */
};

/* Ring states (amp_ring_hdr.state).  FREE: never claimed; OPEN: a thread writes it; CLOSED:
 * its thread ended (the head is final); REUSABLE: drained and reset by the collector, free
 * for another thread; CLAIMING: a thread is taking a reusable ring (wire v3). */
enum {
	AMP_RING_FREE = 0,
	AMP_RING_OPEN = 1,
	AMP_RING_CLOSED = 2,
	AMP_RING_REUSABLE = 3,
	AMP_RING_CLAIMING = 4,
};

/* What a dropped record was (amp_ring_hdr.dropped_kind): the event records, the only ones drop
 * mode drops; a dead collector drops anything, counted as OTHER unless it is one of these. */
typedef enum {
	AMP_DROP_OP = 0,       /* "ops" */
	AMP_DROP_COPY = 1,     /* "copies" */
	AMP_DROP_TSTATS = 2,   /* "tensor_stats" */
	AMP_DROP_MEMORY = 3,   /* "memory" */
	AMP_DROP_DUMP = 4,     /* "dumps" */
	AMP_DROP_OTHER = 5,    /* "other" */
	AMP_DROP_KINDS
} amp_drop_kind;
#define AMP_DROP_SLOTS 8       /* entries of dropped_kind */
#define AMP_DROP_RESERVE_DIV 8 /* drop mode keeps 1/8 of a ring for definitions and steps */
/* Name of a drop kind ("ops", ...), "?" for an unknown one. */
const char *amp_drop_kind_name(unsigned kind);

/* Counters of threads that found no ring (amp_session_hdr.lost): a slot is named once
 * (state 0 -> 1 by compare-and-swap, name written, then 2) and its value only grows by atomic
 * adds of the deltas of that counter in those threads. */
#define AMP_LOST_COUNTERS 8
#define AMP_LOST_NAME 36
typedef struct amp_lost_counter {
	uint32_t state;              /* 0 free, 1 being named, 2 named */
	char name[AMP_LOST_NAME];    /* NUL-terminated when state is 2 */
	int64_t value;               /* the sum of the deltas */
} amp_lost_counter;

/* A step range [lo, hi], both inclusive; hi = INT64_MAX for an open end. */
typedef struct amp_step_range {
	int64_t lo, hi;
} amp_step_range;

/* Offset 0 of the memfd.  Written by ampprof before launch, except the fields marked
 * "producer", which the application updates with atomic operations. */
typedef struct amp_session_hdr {
	uint64_t magic;              /* AMP_SESSION_MAGIC */
	uint32_t version;            /* AMP_WIRE_VERSION */
	uint32_t hdr_size;           /* AMP_SESSION_HDR_SIZE */
	uint64_t total_size;         /* bytes of the memfd */
	uint64_t ring_offset;        /* offset of ring 0 */
	uint64_t ring_stride;        /* bytes from one ring to the next (header + slots) */
	uint32_t ring_count;         /* rings in the session */
	uint32_t ring_slots;         /* slots per ring, a power of two */
	uint32_t collector_pid;      /* ampprof's pid (a waiting producer checks it is alive) */
	uint32_t flags;              /* AMP_SESS_* */
	uint32_t nan_check;          /* amp_nan_check */
	uint32_t dump;               /* amp_dump_mode */
	uint64_t dump_limit;         /* bytes of tensor dumps allowed for the run, 0 = none */
	uint32_t n_dump_steps;       /* entries used in dump_steps */
	uint32_t n_steps;            /* entries used in steps; 0 = every step in full detail */
	amp_step_range dump_steps[AMP_MAX_RANGES]; /* steps dumped in full (--dump-steps) */
	amp_step_range steps[AMP_MAX_RANGES];      /* steps traced in full detail (--steps) */
	char spool_dir[256];         /* private 0700 directory for dump payloads, "" if none */
	uint64_t heartbeat;          /* incremented by the collector at every poll */
	uint32_t rings_claimed;      /* producer: next ring to claim (may pass ring_count) */
	uint32_t attached;           /* producer: processes that attached */
	uint64_t rings_missing;      /* producer: threads (or processes) that found no ring left:
	                                nothing of theirs was recorded */
	/* Added within wire version 1 (a peer that predates it leaves it zero and never waits on
	 * it, so both directions stay compatible): */
	uint32_t wake;               /* producer: futex word, incremented with a FUTEX_WAKE when a
	                                ring fills past half or a producer waits on a full ring;
	                                the collector sleeps on it between polls */
	uint32_t producer_wire;      /* producer: the AMP_WIRE_VERSION of the last process that
	                                found the session, written whether it attached or not
	                                (0: none did, or one predating wire version 2) */
	/* wire v3 */
	uint32_t contexts;           /* producer (added within wire v3, was zeroed padding): the
	                                contexts made in the run, by every process; a context's
	                                id (amp_rec_memory.ctx) is this count at its creation, so
	                                it names one context in the whole run */
	amp_lost_counter lost[AMP_LOST_COUNTERS]; /* producer: ring-scoped counters of the threads
	                                that found no ring */
	uint64_t dump_used;          /* producer: dump bytes the run's processes reserved, against
	                                dump_limit (one budget for the run, forks included; zero
	                                from a collector that predates it, which is as fresh) */
} amp_session_hdr;

/* Header of one ring; slots follow at AMP_RING_HDR_SIZE.  head and tail sit on their own
 * cache lines. */
typedef struct amp_ring_hdr {
	uint64_t magic;              /* AMP_RING_MAGIC, written by ampprof */
	uint32_t state;              /* producer: AMP_RING_* */
	uint32_t clock;              /* producer: amp_clock_kind */
	uint32_t pid, tid;           /* producer: owner process and thread */
	uint64_t dropped;            /* producer: records dropped (drop mode or dead collector) */
	uint8_t pad0[32];
	uint64_t head;               /* producer: slots published, release store */
	uint8_t pad1[56];
	uint64_t tail;               /* collector: slots consumed, release store */
	uint8_t pad2[56];
	uint64_t dropped_kind[AMP_DROP_SLOTS]; /* producer (wire v3): dropped records by
	                                amp_drop_kind, their own cache line */
} amp_ring_hdr;

/* Record types. */
typedef enum {
	AMP_REC_PAD = 0,       /* filler up to the end of the ring: skip nslots */
	AMP_REC_CLOCK = 1,     /* tick/ns calibration pair */
	AMP_REC_STRING = 2,    /* defines a string id */
	AMP_REC_MODULE = 3,    /* a loaded object: load bias, size, path */
	AMP_REC_CALLSITE = 4,  /* defines a call-site id */
	AMP_REC_OP = 5,
	AMP_REC_COPY = 6,
	AMP_REC_STEP_BEGIN = 7,
	AMP_REC_STEP_END = 8,
	AMP_REC_SCALE = 9,
	AMP_REC_MEMORY = 10,
	AMP_REC_META = 11,
	AMP_REC_CRASH = 12,
	AMP_REC_TSTATS = 13,   /* tensor statistics (diagnostics) */
	AMP_REC_DUMP = 14,     /* reference to a tensor dump in the spool directory */
	AMP_REC_COUNTER = 15,  /* a named counter from the producer (e.g. ops dispatched) */
	AMP_REC_COMM = 16,     /* a collective (wire v3): all-reduce, broadcast, barrier */
	AMP_REC_TYPE_COUNT
} amp_rec_type;

typedef struct amp_rec_hdr {
	uint32_t stamp;   /* low 32 bits of the position of the record's first slot */
	uint8_t type;     /* amp_rec_type */
	uint8_t nslots;   /* slots spanned, 1..AMP_REC_MAX_SLOTS */
	uint16_t len;     /* bytes of variable payload (strings, frames), record-specific */
} amp_rec_hdr;

typedef struct amp_rec_clock {
	amp_rec_hdr h;
	uint64_t ticks;     /* amp_trace_clock() */
	uint64_t mono_ns;   /* CLOCK_MONOTONIC at the same instant */
	uint64_t real_ns;   /* CLOCK_REALTIME */
} amp_rec_clock;

/* String id (>= 1, per ring) and its bytes (h.len of them, not NUL-terminated) after the
 * fixed part; nslots = ceil((16 + len) / 64). */
typedef struct amp_rec_string {
	amp_rec_hdr h;
	uint32_t id;
	uint32_t pad;
	/* char text[h.len]; */
} amp_rec_string;
#define AMP_REC_STRING_FIXED 16u
#define AMP_STRING_MAX (AMP_REC_MAX_SLOTS * AMP_SLOT_SIZE - AMP_REC_STRING_FIXED)

/* A loaded object: addresses in it map to file addresses as pc - bias. */
typedef struct amp_rec_module {
	amp_rec_hdr h;
	uint64_t bias;      /* load bias (dlpi_addr / l_addr) */
	uint64_t lo, hi;    /* extent of its mapped segments [lo, hi) */
	uint32_t path;      /* string id of its path */
	uint32_t pad;
} amp_rec_module;

/* A call site: frames[0] is the first return address outside libamprt (the key), then up to
 * AMP_CALLSITE_FRAMES - 1 of its callers.  frames[i] belongs to the module with load bias
 * biases[i] whose path is string id paths[i]. */
typedef struct amp_rec_callsite {
	amp_rec_hdr h;
	uint32_t id;                         /* >= 1, per ring */
	uint32_t nframes;                    /* 1..AMP_CALLSITE_FRAMES */
	uint64_t frames[AMP_CALLSITE_FRAMES];
	uint64_t biases[AMP_CALLSITE_FRAMES];
	uint32_t paths[AMP_CALLSITE_FRAMES];
} amp_rec_callsite;

typedef struct amp_rec_op {
	amp_rec_hdr h;
	uint64_t t_begin, t_end;  /* ticks */
	int64_t step;
	uint64_t seq;
	uint64_t flops, bytes;
	int64_t shape[4];
	uint32_t label;           /* string id, 0 = none */
	uint32_t callsite;        /* call-site id, 0 = none */
	uint8_t op, phase, exec_dtype, in_dtype, out_dtype, ndim, aligned;
	/* Added within wire version 1, in what was a zeroed pad byte (a producer that predates it
	 * sends 0, AMP_ENGINE_NONE): */
	uint8_t engine;           /* amp_engine the arithmetic ran on; a value the collector does
	                             not know is stored as NULL (unknown) */
	uint32_t op_name;         /* wire v2: string id of the op type's name; 0 = amp_op_name(op)
	                             (op must then be < AMP_OP_COUNT) */
} amp_rec_op;

typedef struct amp_rec_copy {
	amp_rec_hdr h;
	uint64_t t_begin, t_end;
	int64_t step;
	uint64_t bytes;
	uint32_t label, callsite;
	uint8_t kind, src_dtype, dst_dtype, pad[5];
} amp_rec_copy;

typedef struct amp_rec_step {
	amp_rec_hdr h;
	int64_t step;
	uint64_t t_begin, t_end;  /* t_end is 0 in AMP_REC_STEP_BEGIN */
	double loss, scale;
	int64_t samples;
	uint8_t overflow, skipped;
	uint8_t flags;            /* AMP_STEP_* (added in wire version 3 in what was zeroed
	                             padding: 0 from a producer that predates it) */
	uint8_t clipped;          /* wire v3: gradient clipping scaled the gradients down */
	uint32_t ctx; /* added within wire v3: the stepping context (amp_rec_memory.ctx),
	                 0 from a producer that predates it */
	double grad_norm;         /* wire v3: global L2 norm of the unscaled gradients before
	                             clipping; NAN when not taken (clipping off, overflow) */
	int64_t micro_batches;    /* wire v3: backward passes (micro-batches) in the step */
} amp_rec_step;
/* amp_rec_step.flags */
enum {
	AMP_STEP_LOSS = 1u << 0, /* the step computed a loss: loss holds it, NaN and Inf included
	                            (without it, a non-finite loss means no loss) */
};

typedef struct amp_rec_scale {
	amp_rec_hdr h;
	int64_t step;
	uint64_t t;
	double old_scale, new_scale;
	uint32_t reason;
	uint32_t ctx; /* the deciding context (amp_rec_memory.ctx); 0 from a producer before it */
} amp_rec_scale;

/* amp_rec_memory.flags */
enum {
	AMP_MEMREC_UNOPT = 1u << 0, /* bytes_unopt and peak_unopt are filled (memory_optimize on) */
	/* added within wire v3: the context was freed (its tensor memory is gone; the byte
	 * counts are 0); written only by a context that reported a step before, and never
	 * dropped */
	AMP_MEMREC_END = 1u << 1,
};

typedef struct amp_rec_memory {
	amp_rec_hdr h;
	int64_t step;
	uint64_t t;
	uint64_t bytes[AMP_MEM_NCAT];
	uint64_t peak;
	/* wire v3: the same without memory_optimize (what its released and recomputed buffers
	 * would have added), valid with AMP_MEMREC_UNOPT */
	uint64_t bytes_unopt[AMP_MEM_NCAT];
	uint64_t peak_unopt;
	uint32_t flags;           /* AMP_MEMREC_* */
	/* added within wire v3: the reporting context, numbered from 1 in the run in order of
	 * creation (amp_session_hdr.contexts; a forked child's copy of a context keeps its
	 * number); 0 from a producer that predates it, whose thread then stands for its context */
	uint32_t ctx;
} amp_rec_memory;

/* key (h.len bytes... see klen) and value follow the fixed part: text[klen + vlen]. */
typedef struct amp_rec_meta {
	amp_rec_hdr h;
	uint16_t klen, vlen;
	uint32_t pad;
	/* char text[klen + vlen]; */
} amp_rec_meta;
#define AMP_REC_META_FIXED 16u

/* Written by the runtime's fatal-signal handler; frames from unw_backtrace (absolute pcs;
 * the collector maps them through AMP_REC_MODULE records). */
typedef struct amp_rec_crash {
	amp_rec_hdr h;
	int32_t signo, code;
	uint64_t addr;            /* si_addr */
	uint64_t t;
	uint32_t nframes, pad;
	uint64_t frames[AMP_CRASH_FRAMES];
} amp_rec_crash;

/* amp_rec_tstats.flags */
enum {
	AMP_TSTATS_EXT = 1u << 0, /* phase and ninf are filled (a producer that predates them
	                             leaves flags zero) */
	/* Added in wire version 3 (zero from a producer that predates them): */
	AMP_TSTATS_SRC = 1u << 1,       /* src_back is filled */
	AMP_TSTATS_CAST_SRC = 1u << 2,  /* an input row: the FP32 source of an automatic cast to a
	                                   half type that overflowed (the origin's real cause) */
	AMP_TSTATS_TINY_AT_NF = 1u << 3, /* an input row: zero or subnormal (FP16) at some position
	                                   where the origin's output is non-finite (an underflow
	                                   upstream, when its producer ran in a half type) */
	AMP_TSTATS_PARAM = 1u << 4,     /* a gradient row: the gradient of a parameter (of its
	                                   working copy, in the dtype its layer ran in) */
};

/* Statistics of one checked tensor (the `tensor_stats` table). */
typedef struct amp_rec_tstats {
	amp_rec_hdr h;
	int64_t step;
	uint64_t seq;             /* seq of the op the tensor belongs to */
	uint64_t count;           /* elements */
	uint64_t nan, inf;        /* non-finite counts; inf counts +Inf and -Inf */
	uint64_t underflow;       /* non-zero |x| < 6.1e-5 (FP16 normal minimum) */
	uint64_t near_overflow;   /* |x| > 32768 */
	double min, max, absmax;  /* over finite values */
	uint32_t name;            /* string id of the tensor's name, 0 = none */
	uint32_t callsite;
	uint8_t op, role, dtype, origin;  /* role: 0 input, 1 output, 2 grad */
	uint8_t phase;            /* amp_phase of the op (with AMP_TSTATS_EXT) */
	uint8_t flags;            /* AMP_TSTATS_* */
	uint8_t pad[2];
	uint32_t exp_hist[40];    /* FP16-exponent histogram: [0] zero, [1..31] biased exponent
	                             0..30 (0 = subnormal), [32] Inf/NaN, rest reserved */
	/* Added within wire version 1, valid with AMP_TSTATS_EXT (the record still spans the same
	 * slots; phase and flags sit in what was zeroed padding): */
	uint64_t ninf;            /* of inf, the -Inf count (+Inf = inf - ninf) */
	uint32_t op_name;         /* wire v2: as amp_rec_op.op_name */
	uint32_t src_back;        /* with AMP_TSTATS_SRC (was zeroed padding): seq - src_back is
	                             the seq of the related op: for an input of an origin, the op
	                             that produced it (through automatic casts); for a gradient,
	                             the forward op whose backward wrote it */
} amp_rec_tstats;

/* A tensor dumped into the spool directory (file name relative to it). */
typedef struct amp_rec_dump {
	amp_rec_hdr h;
	int64_t step;
	uint64_t seq;
	uint64_t bytes;           /* payload bytes in the file */
	int64_t shape[4];
	uint32_t file;            /* string id of the file name in the spool directory */
	uint32_t name;            /* string id of the tensor's name */
	uint8_t op, role, dtype, ndim, reason, pad[3];  /* reason: 0 nonfinite, 1 step, 2 manual */
	uint32_t op_name;         /* wire v2: as amp_rec_op.op_name */
	uint32_t pad_name;
} amp_rec_dump;

/* Scope of a counter's value (amp_rec_counter.scope): how the collector combines the values
 * that several rings (threads, processes) report under one name into the `meta` value. */
enum {
	AMP_COUNTER_RING = 0,     /* the producing thread's own total (e.g. the ops of the contexts
	                             it drives): the last value of each ring, summed over rings */
	AMP_COUNTER_PROCESS = 1,  /* a process-wide total any of its threads may report: the
	                             largest value per process, summed over processes */
};

/* A named counter, e.g. "ops_dispatched": a running total, reported at step ends and at exit. */
typedef struct amp_rec_counter {
	amp_rec_hdr h;
	uint32_t name;            /* string id */
	uint32_t scope;           /* AMP_COUNTER_* (was padding, zero: AMP_COUNTER_RING) */
	int64_t value;
	uint64_t t;
} amp_rec_counter;

/* Collective kinds (amp_rec_comm.kind, the `comm` table's kind); the runtime's
 * amp/amp_dist.h gives the same values to backends. */
enum {
	AMP_COMM_KIND_ALLREDUCE = 0, /* "allreduce": a gradient bucket summed over ranks */
	AMP_COMM_KIND_BROADCAST = 1, /* "broadcast": parameters sent from rank 0 */
	AMP_COMM_KIND_BARRIER = 2,   /* "barrier": the start-up barrier clocks are aligned on */
	AMP_COMM_KIND_NKINDS
};
enum { AMP_COMM_FLAG_LOCAL_OVERFLOW = 1u << 0 }; /* this rank's own values held Inf/NaN */
const char *amp_comm_kind_name(unsigned kind); /* "allreduce", ...; "?" if unknown */

/* One collective of a data-parallel backend (wire v3): posted at t_begin, waited on from
 * t_wait (= t_end when the producer never blocked on it), complete at t_end; bytes is what
 * this rank contributed. */
typedef struct amp_rec_comm {
	amp_rec_hdr h;
	uint64_t t_begin, t_wait, t_end;  /* ticks */
	int64_t step;                     /* step it belongs to, -1 before the first */
	uint64_t bytes;
	int32_t bucket;                   /* gradient bucket, -1 if none */
	uint8_t kind, dtype, flags, pad;  /* AMP_COMM_KIND_*, AMP_DTYPE_*, AMP_COMM_FLAG_* */
} amp_rec_comm;

#define AMP_REC_SLOTS(type) ((unsigned)((sizeof(type) + AMP_SLOT_SIZE - 1) / AMP_SLOT_SIZE))

_Static_assert(sizeof(amp_rec_hdr) == 8, "record header");
_Static_assert(sizeof(amp_ring_hdr) == AMP_RING_HDR_SIZE, "ring header");
_Static_assert(offsetof(amp_ring_hdr, dropped_kind) == 192, "ring header: drops on line 3");
_Static_assert(AMP_DROP_KINDS <= AMP_DROP_SLOTS, "drop kinds");
_Static_assert(sizeof(amp_session_hdr) <= AMP_SESSION_HDR_SIZE, "session header");
_Static_assert(AMP_REC_SLOTS(amp_rec_clock) == 1, "clock record");
_Static_assert(AMP_REC_SLOTS(amp_rec_module) == 1, "module record");
_Static_assert(AMP_REC_SLOTS(amp_rec_callsite) <= 3, "callsite record");
_Static_assert(AMP_REC_SLOTS(amp_rec_op) == 2, "op record");
_Static_assert(offsetof(amp_rec_op, engine) == 103, "op: engine in wire v1's pad byte");
_Static_assert(AMP_REC_SLOTS(amp_rec_copy) == 1, "copy record");
_Static_assert(AMP_REC_SLOTS(amp_rec_step) == 2, "step record");
_Static_assert(AMP_REC_SLOTS(amp_rec_scale) == 1, "scale record");
_Static_assert(AMP_REC_SLOTS(amp_rec_memory) == 2, "memory record");
_Static_assert(AMP_REC_SLOTS(amp_rec_crash) <= AMP_REC_MAX_SLOTS, "crash record");
_Static_assert(AMP_REC_SLOTS(amp_rec_tstats) == 5, "tstats record (its size is part of the wire)");
_Static_assert(offsetof(amp_rec_tstats, exp_hist) == 104, "tstats: exp_hist where wire v1 had it");
_Static_assert(AMP_REC_SLOTS(amp_rec_dump) <= 2, "dump record");
_Static_assert(AMP_REC_SLOTS(amp_rec_counter) == 1, "counter record");
_Static_assert(AMP_REC_SLOTS(amp_rec_comm) == 1, "comm record");

#endif

-- profile.sql — the ampkit profile database, schema version 3.
--
-- One SQLite file per profiled run, written by ampprof and read by every tool through
-- schema/profile_db.c (which embeds this file).  application_id 0x414D5046 ('AMPF') marks the
-- file as a profile; user_version is the schema version, bumped on any incompatible change;
-- readers refuse a newer one.  Times are integer nanoseconds since the start of the run
-- (meta 'start_mono_ns'), dtypes and names are the strings of schema/amp_names.c.
--
-- Version 2 added the engine of each op (op_sigs.engine, ops.engine), op_summary.native_ns,
-- run_summary.native_half_share and .half_types; amp_profile_upgrade brings a version-1 file
-- up to it (the engine of its ops stays NULL: unknown).
--
-- Version 3 added the producing thread of loss_scale and memory rows (loss_scale.thread,
-- memory.thread: a run with one context per thread writes one row per thread and step) and
-- the duration statistics of op_summary (median_ns, min_ns, max_ns, stddev_ns);
-- amp_profile_upgrade adds them to an older file as NULL (unknown).
-- Version 3 also added what explains a non-finite value and the loss scale: tensor_stats.src_seq,
-- .cast_source, .tiny_at_nonfinite, .param_grad; nonfinite's classes 'underflow' and 'cast_overflow' and
-- its src_* and fwd_callsite columns; steps.loss_state; loss_scale's cause columns and
-- clean_steps; run_summary.scale_history, .scale_history_steps and .skipped_share; the
-- forecast table; run_summary.fp16_ready (an FP32 run's readiness for FP16).
-- Version 3 also added data-parallel runs: the `comm` table (collectives), a `rank` column on every
-- event table (0 in a single-rank profile; `ampprof merge` writes one database from the
-- per-rank profiles of a run with each row's rank), `rank_summary`, and
-- run_summary.comm_share, .rank_spread and .ranks.  Upgraded files get rank 0 everywhere.
-- Also in version 3, what the training features record: steps.grad_norm, .clipped and
-- .micro_batches (gradient clipping and accumulation), and the memory categories without
-- memory_optimize (memory.*_unopt).
-- amp_profile_upgrade adds them to an older file as NULL (unknown).
--
-- Bulk event tables are split in two to keep rows small (<= 40 bytes per op): op_events holds
-- what changes per execution, op_sigs what repeats (op, dtypes, shape, label, call site).  The
-- views `ops` and `copies` join them back into one readable row per execution.

PRAGMA application_id = 1095585862;  -- 0x414D5046 'AMPF'
PRAGMA user_version = 3;

-- Facts about the run, one per key.  Keys written by ampprof: schema_version, ampprof_version,
-- wire_version, command (the application as given), argv, cwd, pid, host, cpu (the model name),
-- cpu_vendor (cpuid's vendor string: 'GenuineIntel', 'AuthenticAMD'), cpu_half_features (the
-- half arithmetic the CPU has and the OS enabled: avx512_bf16, avx512_fp16, amx_bf16, amx_tile,
-- space-separated, or 'none'), start_time
-- (UTC ISO 8601), start_mono_ns, clock ('tsc' or 'monotonic'), ticks_per_ns, options
-- (steps, callstack, nan_check, stats_every, dump, dump_steps, dump_limit, fp16_threshold,
-- memcpy_threshold, drop), end ('exited', 'signal', 'crash', 'killed', 'collecting' while running,
-- 'collector-failed'), exit_status, exit_signal, complete (1 if the run ended normally, was
-- finalized and nothing went unrecorded), incomplete (present when something went unrecorded:
-- why, e.g. threads that found no ring, records dropped; every reader shows it), events,
-- dropped_events, dropped.<kind> (records dropped by kind: ops, copies, tensor_stats, memory,
-- dumps, other), rings_missing (threads or processes that found no ring: nothing of theirs is
-- in the tables), unrecorded.<counter> (of a counter's total, what those threads counted),
-- wall_ns, finalized_at.  When the database could not be written (a full disk) recording
-- stopped and the application ran on: end is 'collector-failed' (exit_status and exit_signal
-- still say how the application ended), collector_error (SQLite's reason), missing_from_ns
-- (when, since the start), missing_from_step (the step being recorded then: the steps before
-- it are whole, it and the later ones are missing), not_recorded (events read and discarded
-- from then on), and incomplete says so.  Keys written by
-- the runtime: precision_mode, custom_white_list, custom_black_list, loss_scale*,
-- <key>_source for every configuration key that was set (where: 'amp.cfg:3', 'environment
-- AMP_CUSTOM_BLACK_LIST' or 'amp_config_set'; version 3) and
-- counters: ops_dispatched and copies (the runtime's own counts of op executions and of
-- copies and casts, sent at every step end by each producing thread and summed over threads;
-- with every step detailed they equal the row counts of ops and copies), dumps_written,
-- dumps_bytes, dumps_skipped, dumps_skipped_bytes and the skipped dumps by reason
-- (dumps_skipped_limit: --dump-limit reached, dumps_skipped_step_cap: per-step cap,
-- dumps_skipped_steps_cap: cap on steps with non-finite dumps, dumps_skipped_nospool,
-- dumps_failed: write errors), nonfinite_origins, tensors_checked, tensor_stats_records and
-- check_ns (process-wide totals, summed over processes); of a data-parallel run (libamprt_mpi):
-- rank, world_size, allreduce_dtype, allreduce_bucket_kb, allreduce_buckets, optimizer_sharding
-- (on: each bucket's comm rows are its reduce-scatter and, after the update, the gather of the
-- updated values, both kind 'allreduce').  Keys written by
-- `ampprof merge`: ranks, merged_from (the input files, one per line) and, per rank N,
-- rank.N.file, rank.N.end, rank.N.exit_status, rank.N.exit_signal, rank.N.complete,
-- rank.N.clock_offset_ns (what was added to its times to align its start-up barrier with
-- rank 0's) and clock_spread_ns (the largest offset between two ranks' clocks).
CREATE TABLE meta (
	key   TEXT PRIMARY KEY,  -- fact name
	value TEXT               -- fact value as text
);

-- Interned strings (labels, tensor names, module paths, op type names), one row per distinct
-- value.
CREATE TABLE strings (
	id    INTEGER PRIMARY KEY,  -- string id, referred to by other tables
	value TEXT NOT NULL         -- the string
);

-- Producing threads: one row per ring the application used.
CREATE TABLE threads (
	id      INTEGER PRIMARY KEY,  -- thread number in this profile (ring index)
	pid     INTEGER,              -- process id
	tid     INTEGER,              -- kernel thread id
	dropped INTEGER,              -- events dropped by this thread (drop mode or dead collector)
	rank    INTEGER DEFAULT 0     -- MPI rank of the process (0 in a single-rank profile)
);

-- Op types with their default precision list (docs/ARCHITECTURE.md §6): the runtime's, written when the
-- profile is created, and any other a producer named on the wire (op types travel by name
-- since wire version 2), added as they first appear, 'gray' since no list names them.
CREATE TABLE op_types (
	id   INTEGER PRIMARY KEY,  -- amp_op_type value for the runtime's types; larger ids for the
	                           -- names other producers sent, in order of arrival
	name TEXT NOT NULL,        -- name as used in lists and in ops.op ('MatMul')
	list TEXT NOT NULL         -- default list: 'white', 'black' or 'gray' (the optimizer: black)
);

-- Distinct call sites: the first frame of the user's program that launched an op or copy.
CREATE TABLE callsites (
	id       INTEGER PRIMARY KEY,  -- call-site id
	address  INTEGER,              -- return address in the application's address space
	module   TEXT,                 -- path of the object holding it
	offset   INTEGER,              -- file address in module (address - load bias)
	function TEXT,                 -- symbolized function ('??' if unknown)
	file     TEXT,                 -- source file ('??' if unknown)
	line     INTEGER,              -- source line (0 if unknown)
	frames   TEXT                  -- the whole recorded chain, one 'function file:line' per line
);

-- What repeats between executions of an op: one row per distinct combination.
CREATE TABLE op_sigs (
	id         INTEGER PRIMARY KEY,  -- signature id
	op         TEXT NOT NULL,        -- op type name ('MatMul')
	phase      TEXT NOT NULL,        -- 'forward', 'backward' or 'optimizer'
	exec_dtype TEXT NOT NULL,        -- dtype the kernel ran in ('fp16', 'fp32')
	in_dtype   TEXT,                 -- dtype of the first input as the caller passed it
	out_dtype  TEXT,                 -- dtype of the output
	label      TEXT,                 -- layer label, NULL if none
	shape      TEXT,                 -- output shape '(a,b)', or '(M,N,K)' for GEMMs
	flops      INTEGER,              -- floating-point operations per execution
	bytes      INTEGER,              -- bytes read and written per execution
	aligned    INTEGER,              -- 1 if GEMM dims fit the fast path (multiples of 8)
	callsite   INTEGER,              -- callsites.id, NULL if not recorded
	calls      INTEGER,              -- executions with this signature (set at finalize)
	total_ns   INTEGER,              -- their total time (set at finalize)
	engine     TEXT                  -- what the arithmetic ran on: 'amx-bf16', 'avx512-bf16',
	                                 -- 'avx512-fp16' (half engines), 'fp32-fma' (FP32 SIMD, also
	                                 -- half storage computed in FP32), 'scalar' (portable C),
	                                 -- 'none' (no arithmetic, or the runtime did not say); NULL
	                                 -- if unknown (a version-1 profile, an unknown value)
);

-- One row per op execution (only for the steps selected with --steps).
CREATE TABLE op_events (
	id       INTEGER PRIMARY KEY,  -- execution id, in arrival order
	step     INTEGER,              -- training step
	seq      INTEGER,              -- the runtime's per-context op sequence number
	sig      INTEGER,              -- op_sigs.id
	start_ns INTEGER,              -- start time
	dur_ns   INTEGER,              -- duration
	thread   INTEGER,              -- threads.id
	rank     INTEGER DEFAULT 0     -- MPI rank (0 in a single-rank profile)
);

CREATE VIEW ops AS
	SELECT e.id, e.step, e.seq, s.phase, s.op, s.label, s.exec_dtype, s.in_dtype, s.out_dtype,
	       e.start_ns, e.dur_ns, s.flops, s.bytes, s.shape, s.aligned, s.callsite, e.thread,
	       s.engine, e.rank
	FROM op_events e JOIN op_sigs s ON s.id = e.sig;

-- What repeats between memory copies and casts.
CREATE TABLE copy_sigs (
	id        INTEGER PRIMARY KEY,  -- signature id
	kind      TEXT NOT NULL,        -- 'h2d', 'd2h', 'd2d', 'cast', 'layout' or 'master'
	bytes     INTEGER,              -- bytes copied (destination size)
	src_dtype TEXT,                 -- source dtype
	dst_dtype TEXT,                 -- destination dtype
	label     TEXT,                 -- label of the op or tensor the copy served
	callsite  INTEGER,              -- callsites.id, NULL if not recorded
	calls     INTEGER,              -- copies with this signature (set at finalize)
	total_ns  INTEGER               -- their total time (set at finalize)
);

-- One row per copy or cast (only for the steps selected with --steps).
CREATE TABLE copy_events (
	id       INTEGER PRIMARY KEY,  -- copy id, in arrival order
	step     INTEGER,              -- training step
	sig      INTEGER,              -- copy_sigs.id
	start_ns INTEGER,              -- start time
	dur_ns   INTEGER,              -- duration
	thread   INTEGER,              -- threads.id
	rank     INTEGER DEFAULT 0     -- MPI rank
);

CREATE VIEW copies AS
	SELECT e.id, e.step, s.kind, s.bytes, s.src_dtype, s.dst_dtype, e.start_ns, e.dur_ns,
	       s.label, s.callsite, e.thread, e.rank
	FROM copy_events e JOIN copy_sigs s ON s.id = e.sig;

-- One row per training step, for every step whether or not it was traced in detail.
CREATE TABLE steps (
	step     INTEGER,  -- step index from 0
	start_ns INTEGER,  -- start time
	dur_ns   INTEGER,  -- duration (NULL if the step never ended)
	loss     REAL,     -- unscaled loss, NULL if unknown or not finite (see loss_state)
	scale    REAL,     -- loss scale used in the step
	overflow INTEGER,  -- 1 if its gradients held Inf/NaN
	skipped  INTEGER,  -- 1 if the update was skipped
	samples  INTEGER,  -- samples processed
	detail   INTEGER,  -- 1 if ops and copies of this step were recorded (--steps)
	thread   INTEGER,  -- threads.id
	-- version 3:
	loss_state TEXT,   -- 'finite', 'nan', 'inf' or '-inf' (the loss the program computed);
	                   -- NULL if the step reported no loss (or a runtime that predates it)
	grad_norm REAL,    -- global L2 norm of the unscaled gradients before clipping; NULL when
	                   -- not taken (gradient_clipping off, or the step overflowed: skipped
	                   -- before any norm)
	clipped  INTEGER,  -- 1 if gradient_clipping scaled the gradients down, 0 if not, NULL
	                   -- when no norm was taken
	micro_batches INTEGER, -- backward passes (micro-batches) in the step: 1 without gradient
	                   -- accumulation, gradient_accumulation_steps with it; 0 if none ran
	rank     INTEGER DEFAULT 0,  -- MPI rank
	context  INTEGER   -- the stepping context, as memory.context (added within version 3)
);

-- One row per loss-scaler decision (of each context: one per producing thread), linked at
-- finalize to its cause.
CREATE TABLE loss_scale (
	step      INTEGER,  -- step whose end triggered the decision
	t_ns      INTEGER,  -- time of the decision
	old_scale REAL,     -- scale before
	new_scale REAL,     -- scale after
	reason    TEXT,     -- 'hold', 'growth', 'overflow', 'init' or 'static'; 'nan' (set at
	                    -- finalize) for a back-off on NaN gradients that no overflow made
	                    -- (the step's nonfinite class is 'invalid_operation')
	thread    INTEGER,  -- threads.id of the context's thread (version 3; NULL before)
	-- version 3, set at finalize: the cause of a back-off is the step's first non-finite
	-- value (its nonfinite row); of a growth, the clean steps that earned it
	cause_class    TEXT,     -- nonfinite.class of the step ('scaled_grad_overflow', ...)
	cause_op       TEXT,     -- op type of the origin (the backward op for a gradient)
	cause_tensor   TEXT,     -- name of the origin tensor ('fc2/in1.grad')
	cause_callsite INTEGER,  -- callsites.id of the origin op
	cause_fwd_callsite INTEGER, -- for a gradient: callsites.id of its forward op (the layer)
	cause_absmax   REAL,     -- the largest finite magnitude of that tensor in the last step
	                         -- before, when it was checked (scaled, as stored); the report
	                         -- shows it times the scales: what pushed it past 65504
	clean_steps    INTEGER,  -- growth and hold: consecutive clean steps at this decision
	rank      INTEGER DEFAULT 0,  -- MPI rank
	context   INTEGER   -- the deciding context, as memory.context (added within version 3)
);

-- Bytes by category at the end of each step, and the peak so far, of each context (one row per
-- context and step: contexts of their own threads, or one after another in a thread, each
-- report theirs).
CREATE TABLE memory (
	step            INTEGER,  -- step
	t_ns            INTEGER,  -- time of the report
	master_weights  INTEGER,  -- FP32 master weights
	working_copies  INTEGER,  -- FP16 working copies of weights
	activations     INTEGER,  -- step-scoped activations and inputs
	grads           INTEGER,  -- gradients
	optimizer_state INTEGER,  -- optimizer state
	total           INTEGER,  -- sum of the categories
	peak            INTEGER,  -- peak of all tensor memory so far
	thread          INTEGER,  -- threads.id of the context's thread (version 3; NULL before)
	-- The same without memory_optimize: what its released and recomputed buffers would have
	-- added.  NULL when memory_optimize was off (the columns above are then that figure).
	master_weights_unopt  INTEGER,  -- master_weights without memory_optimize
	working_copies_unopt  INTEGER,  -- working_copies without memory_optimize
	activations_unopt     INTEGER,  -- activations without memory_optimize
	grads_unopt           INTEGER,  -- grads without memory_optimize
	optimizer_state_unopt INTEGER,  -- optimizer_state without memory_optimize
	total_unopt           INTEGER,  -- total without memory_optimize
	peak_unopt            INTEGER,  -- peak without memory_optimize
	rank            INTEGER DEFAULT 0,  -- MPI rank
	-- the reporting context, numbered from 1 in the run in order of creation (every process's
	-- and exec'd image's; a forked child's copy keeps its number); added within version 3,
	-- NULL from a runtime that predates it (a thread's rows are then its one context's)
	context         INTEGER
);

-- The contexts freed during the run (a context that reported its memory reports its end):
-- their memory is gone from then on.  Added within version 3.
CREATE TABLE context_ends (
	thread  INTEGER,            -- threads.id of the context's thread
	context INTEGER,            -- memory.context
	step    INTEGER,            -- its last step
	t_ns    INTEGER,            -- time it was freed
	rank    INTEGER DEFAULT 0   -- MPI rank
);

-- Set at finalize when a rank had more than one context: the rank's tensor memory at the time
-- of each report (memory row), every context alive then together, each with its last report
-- (peak: the sum of their peaks so far).  A context is alive from its first report until it
-- was freed (context_ends), or, without a reported end (its process exited, was killed or
-- exec'd with it), until its last report: contexts that did not coexist are not added (one
-- kept without stepping and never freed is not counted past its last step).  Readers take "a step's memory"
-- from here when it has rows, else from the sum of the step's memory rows
-- (amp_profile_memory_steps).  Added within version 3.
CREATE TABLE memory_sum (
	step            INTEGER,  -- step of the report
	t_ns            INTEGER,  -- time of the report
	master_weights  INTEGER,  -- the categories, every alive context's together
	working_copies  INTEGER,
	activations     INTEGER,
	grads           INTEGER,
	optimizer_state INTEGER,
	total           INTEGER,  -- sum of the categories
	peak            INTEGER,  -- sum of the alive contexts' peaks so far
	rank            INTEGER DEFAULT 0  -- MPI rank
);

-- One row per checked tensor (non-finite checks and headroom statistics).
CREATE TABLE tensor_stats (
	id            INTEGER PRIMARY KEY,  -- row id
	step          INTEGER,              -- step
	seq           INTEGER,              -- seq of the op (ops.seq)
	op            TEXT,                 -- op type name
	role          TEXT,                 -- 'input', 'output' or 'grad'
	name          TEXT,                 -- tensor name or label
	dtype         TEXT,                 -- dtype of the tensor
	count         INTEGER,              -- elements
	nan           INTEGER,              -- NaN count
	inf           INTEGER,              -- Inf count, +Inf and -Inf together (see neg_inf)
	underflow     INTEGER,              -- non-zero values below 6.1e-5 in magnitude
	near_overflow INTEGER,              -- values above 32768 in magnitude
	min           REAL,                 -- minimum finite value
	max           REAL,                 -- maximum finite value
	absmax        REAL,                 -- largest finite magnitude
	origin        INTEGER,              -- 1: the first op of its step that produced a non-finite
	exp_hist      BLOB,                 -- 40 little-endian uint32 counts (see amp_rec_tstats)
	callsite      INTEGER,              -- callsites.id
	-- added within schema version 1 (NULL in rows of a runtime that predates them):
	neg_inf       INTEGER,              -- of inf, the -Inf count (+Inf count = inf - neg_inf)
	phase         TEXT,                 -- phase of the op: 'forward', 'backward' or 'optimizer'
	thread        INTEGER,              -- threads.id
	-- version 3 (NULL from a runtime that predates them):
	src_seq       INTEGER,              -- the related op's seq: for an input of an origin, the
	                                    -- op of the step that produced it (through automatic
	                                    -- casts); for a gradient, its forward op
	cast_source   INTEGER,              -- 1: an input row holding the FP32 source of an
	                                    -- automatic cast to a half type that overflowed
	tiny_at_nonfinite INTEGER,          -- 1: an input row that is zero or subnormal (FP16)
	                                    -- where the origin's output is not finite
	param_grad    INTEGER,              -- grad rows: 1 if the gradient of a parameter (of its
	                                    -- working copy, in the dtype its layer ran in)
	rank          INTEGER DEFAULT 0     -- MPI rank (schema version 3)
);

-- One row per dumped tensor; data holds the raw little-endian elements.
CREATE TABLE dumps (
	id     INTEGER PRIMARY KEY,  -- row id
	step   INTEGER,              -- step
	seq    INTEGER,              -- seq of the op
	op     TEXT,                 -- op type name
	role   TEXT,                 -- 'input', 'output' or 'grad'
	name   TEXT,                 -- tensor name
	dtype  TEXT,                 -- dtype of data
	shape  TEXT,                 -- '(a,b)'
	reason TEXT,                 -- 'nonfinite', 'step' or 'manual'
	bytes  INTEGER,              -- size of data
	data   BLOB,                 -- the elements, NULL if the spool file was missing
	rank   INTEGER DEFAULT 0     -- MPI rank
);

-- Fatal signals caught by the runtime's handler.
CREATE TABLE crashes (
	id     INTEGER PRIMARY KEY,  -- row id
	thread INTEGER,              -- threads.id
	signo  INTEGER,              -- signal number
	signal TEXT,                 -- signal name ('SIGSEGV')
	code   INTEGER,              -- si_code
	addr   INTEGER,              -- si_addr
	t_ns   INTEGER,              -- time of the crash
	frames TEXT,                 -- backtrace, one 'function file:line (module+offset)' per line
	rank   INTEGER DEFAULT 0     -- MPI rank
);

-- The non-finite values of the run, classified at finalize (docs/ARCHITECTURE.md §9): one row per origin
-- (tensor_stats.origin = 1: the first op of a step, per thread, whose inputs were finite and
-- whose output was not), and one row per overflow step without a recorded origin
-- (--nan-check=step or off).  class is
--   'forward_overflow'      a forward op's output went non-finite (Inf, or NaN after an
--                           overflow): the step's loss is lost;
--   'scaled_grad_overflow'  only the scaled gradients overflowed (the origin is a backward op):
--                           the loss scaler skips the step and lowers the scale, normal while
--                           it probes its scale;
--   'invalid_operation'     NaN with no Inf at the origin, from an op that cannot reach NaN by
--                           overflowing (not a GEMM or reduction) and whose inputs held no Inf:
--                           log or sqrt of a negative, 0/0, 0*Inf;
--   'underflow'             (version 3) -Inf/Inf/NaN made from a zero or subnormal value that
--                           an op running in a half type produced upstream (log 0, x/0): the
--                           upstream op (src_*) is the one to fix;
--   'cast_overflow'         (version 3) an automatic cast of finite FP32 values to a half type
--                           overflowed: the cast is the origin; src_* name the FP32 source
--                           tensor and the op that produced it, src_absmax the value.
-- Added within schema version 1: a profile written before it has no such table.
CREATE TABLE nonfinite (
	step      INTEGER,  -- step
	class     TEXT,     -- 'forward_overflow', 'scaled_grad_overflow', 'invalid_operation',
	                    -- 'underflow' or 'cast_overflow' (the classes above)
	op        TEXT,     -- op type of the origin, NULL if no origin was recorded
	label     TEXT,     -- name of the origin tensor (layer label, or label/inN.grad)
	phase     TEXT,     -- phase of the origin op, NULL if unknown
	role      TEXT,     -- role of the origin tensor: 'output' or 'grad'
	dtype     TEXT,     -- dtype of the origin tensor
	nan       INTEGER,  -- its NaN count
	inf       INTEGER,  -- its Inf count (+Inf and -Inf)
	neg_inf   INTEGER,  -- of which -Inf (NULL if the runtime did not say)
	callsite  INTEGER,  -- callsites.id of the origin op
	seq       INTEGER,  -- seq of the origin op
	stats_id  INTEGER,  -- tensor_stats.id of the origin row
	thread    INTEGER,  -- threads.id, NULL if unknown
	loss      REAL,     -- the step's loss, NULL if unknown or not finite
	overflow  INTEGER,  -- 1 if the step's gradients held Inf/NaN (steps.overflow)
	skipped   INTEGER,  -- 1 if the step's update was skipped
	old_scale REAL,     -- the loss scaler's decision at the end of the step: scale before,
	new_scale REAL,     -- scale after (NULL without a decision)
	reason    TEXT,     -- and its reason ('overflow', 'hold', ...)
	-- version 3 (set at finalize):
	src_op       TEXT,     -- underflow: the half op whose output flushed to zero; cast_overflow:
	                       -- the op that produced the cast's FP32 source (NULL: a leaf or
	                       -- parameter)
	src_label    TEXT,     -- its layer label
	src_dtype    TEXT,     -- the dtype it ran in
	src_seq      INTEGER,  -- its seq
	src_callsite INTEGER,  -- its callsites.id
	src_tensor   TEXT,     -- the tensor of the origin that carries the cause ('log/in0',
	                       -- 'fc/in0.precast')
	src_absmax   REAL,     -- that tensor's largest finite magnitude
	fwd_callsite INTEGER,  -- a backward origin: callsites.id of its forward op (the layer)
	rank      INTEGER DEFAULT 0  -- MPI rank
);

-- Collectives of a data-parallel run (libamprt_mpi, wire v3), one row per collective and rank.
-- An all-reduce is posted as soon as backward has produced its bucket's gradients and runs
-- behind the rest of backward; wait_ns is the time the training thread then blocked on it,
-- waiting for the slowest rank (the part not hidden behind compute).  With optimizer_sharding
-- on (meta), a gradient bucket's all-reduce is two rows of kind 'allreduce', each with half
-- the bytes: its reduce-scatter, posted in backward, and the exchange of the updated values
-- after the optimizer's step (in the dtype exchanged: the working copies' or the masters').
CREATE TABLE comm (
	id             INTEGER PRIMARY KEY,  -- row id, in arrival order
	step           INTEGER,              -- step (-1: at start-up, before the first step)
	kind           TEXT NOT NULL,        -- 'allreduce' (a gradient bucket; with bucket NULL the
	                                     -- parameters without gradients that the forward pass
	                                     -- moves, averaged), 'broadcast' (the
	                                     -- parameters from rank 0 at start), 'barrier' (the
	                                     -- start-up barriers, 5 rounds, that the merge aligns
	                                     -- clocks on: the median over the rounds)
	bytes          INTEGER,              -- bytes this rank contributed
	dtype          TEXT,                 -- payload dtype ('fp32', 'fp16', 'bf16')
	bucket         INTEGER,              -- gradient bucket (of a barrier: its round), NULL if
	                                     -- none
	start_ns       INTEGER,              -- time it was posted
	dur_ns         INTEGER,              -- posted to complete
	wait_ns        INTEGER,              -- of dur_ns, the time the rank blocked waiting for it
	local_overflow INTEGER,              -- 1 if this rank's own values held Inf/NaN
	thread         INTEGER,              -- threads.id
	rank           INTEGER DEFAULT 0     -- MPI rank
);

-- Version 3: the overflow forecast, computed at finalize from the absmax of each checked FP16
-- tensor over the steps (tensor_stats rows of role 'output' and 'grad', finite, one series per
-- name, role and op): a least-squares line through ln(absmax) against the step (gradients
-- divided by their step's loss scale first) predicts when the tensor passes its FP16 limit,
-- 65504 for an activation and 65504 / the final loss scale for a scaled gradient; and the share
-- of its non-zero values under FP16's normal range (6.1e-5), with its drift.  One row per series
-- of at least 8 steps whose absmax grows (fit r2 >= 0.5) or whose underflow share drifts up.
CREATE TABLE forecast (
	name            TEXT,     -- tensor name (tensor_stats.name: layer label, 'fc/in1.grad')
	op              TEXT,     -- op type
	role            TEXT,     -- 'output' or 'grad'
	dtype           TEXT,     -- 'fp16'
	callsite        INTEGER,  -- callsites.id of its last row (the op's call site)
	points          INTEGER,  -- steps fitted
	first_step      INTEGER,  -- the steps fitted: first
	last_step       INTEGER,  -- and last
	absmax          REAL,     -- absmax at the last step (as stored: scaled for a gradient)
	growth          REAL,     -- factor by which absmax (unscaled) grows per step (> 1: grows)
	r2              REAL,     -- goodness of the fit of ln(absmax) (0..1)
	limit_value     REAL,     -- the FP16 limit it is held against (65504, or 65504 / scale)
	overflow_step   REAL,     -- predicted step where absmax passes limit_value; NULL if not
	                          -- growing
	steps_left      REAL,     -- overflow_step - last_step
	underflow_share REAL,     -- of its values at the last step, those non-zero under 6.1e-5
	underflow_drift REAL      -- change of that share per step (fit over the steps)
);

-- Findings of the advice rules (docs/ARCHITECTURE.md §9), computed at finalize.
CREATE TABLE advice (
	id       INTEGER PRIMARY KEY,  -- row id, in order of importance
	rule     TEXT NOT NULL,        -- 'forward_overflow', 'invalid_operation',
	                               -- 'scaled_grad_overflow' (one row per class of the
	                               -- nonfinite table: step = its first step, op, callsite
	                               -- of that step's origin), 'sensitive_op_overflow',
	                               -- 'loss_scale_floor', 'loss_scale_collapse' (written
	                               -- until 2026-12: loss_scale_history says collapsing),
	                               -- 'loss_scale_unusual', 'low_fp16_share' (the half share
	                               -- below its threshold), 'emulated_half' (half-typed ops
	                               -- ran on FP32 or scalar arithmetic), 'copy_share',
	                               -- 'gemm_unaligned'; version 3: 'underflow' and
	                               -- 'cast_overflow' (classes of nonfinite),
	                               -- 'gradient_underflow', 'loss_scale_history',
	                               -- 'skipped_steps', 'overflow_forecast',
	                               -- 'underflow_drift', 'fp16_readiness', 'incomplete'
	                               -- (records are missing: meta incomplete); data parallel
	                               -- runs: 'comm_share', 'straggler', 'fp32_allreduce',
	                               -- 'unscaled_fp16_allreduce', 'rank_overflow'
	severity TEXT NOT NULL,        -- 'info', 'warning' or 'error'
	message  TEXT NOT NULL,        -- one-line finding with the suggested change
	evidence TEXT,                 -- supporting figures, one item per line
	op       TEXT,                 -- op type concerned, if any
	step     INTEGER,              -- step concerned, if any
	callsite INTEGER               -- callsites.id concerned, if any
);

-- Per op type and exec dtype, computed at finalize.
CREATE TABLE op_summary (
	op         TEXT,     -- op type name
	exec_dtype TEXT,     -- dtype the kernel ran in
	calls      INTEGER,  -- executions
	total_ns   INTEGER,  -- total time
	mean_ns    REAL,     -- mean time
	flops      INTEGER,  -- total floating-point operations
	share      REAL,     -- fraction of all op time (0..1)
	native_ns  INTEGER,  -- of total_ns, the time on a half engine (op_sigs.engine); NULL if
	                     -- no execution of it has a known engine
	-- the distribution of the durations of its executions (op_events.dur_ns; version 3, NULL
	-- before, and NULL without executions recorded in detail):
	median_ns  REAL,     -- median (the mean of the two middle values for an even count)
	min_ns     INTEGER,  -- shortest
	max_ns     INTEGER,  -- longest
	stddev_ns  REAL      -- population standard deviation
);

-- The run in one row, computed at finalize (empty if ampprof did not finish).
CREATE TABLE run_summary (
	fp16_share      REAL,     -- the half share: op time in a half type (fp16 or bf16) / all
	                          -- op time (0..1); the name predates bf16
	fp16_flop_share REAL,     -- same, weighted by FLOPs
	copy_share      REAL,     -- copy time / wall time of the steps traced in detail (0..1)
	steps           INTEGER,  -- steps recorded (a merged profile: of the lowest rank, the
	                          -- ranks taking every step together)
	overflow_steps  INTEGER,  -- steps whose gradients overflowed (same)
	skipped_steps   INTEGER,  -- steps whose update was skipped (same)
	min_scale       REAL,     -- smallest loss scale used
	max_scale       REAL,     -- largest loss scale used
	complete        INTEGER,  -- 1 if the run ended normally
	wall_ns         INTEGER,  -- wall time of the run
	step_ns         INTEGER,  -- total time of the steps (a merged profile: every rank's)
	op_count        INTEGER,  -- op rows
	copy_count      INTEGER,  -- copy rows
	op_ns           INTEGER,  -- total op time
	copy_ns         INTEGER,  -- total copy time
	peak_bytes      INTEGER,  -- peak tensor memory (the largest sum over a step's memory rows:
	                          -- every context's of one rank; in a merged profile the rank
	                          -- with the most, each rank's memory being its own)
	native_half_share REAL,   -- the native half share: op time on a half engine (amx-bf16,
	                          -- avx512-bf16, avx512-fp16) / all op time (0..1); NULL if no op
	                          -- has a known engine (a version-1 profile)
	half_types      TEXT,     -- the half types ops ran in: 'fp16', 'bf16', 'fp16+bf16', or
	                          -- NULL (an FP32 run); labels the half share ('FP16 share',
	                          -- 'BF16 share', 'half share (fp16+bf16)')
	-- version 3:
	scale_history   TEXT,     -- the dynamic loss scale's history: 'steady' (no back-off),
	                          -- 'probing' (normal: grows, overflows, backs off, recovers),
	                          -- 'isolated_spikes' (rare back-offs the growth made up for, not
	                          -- at growth), 'collapsing' (back-offs outpacing growth, the floor
	                          -- in reach); NULL for a static scale or no scaler
	scale_history_steps TEXT, -- the steps that show it, comma-separated in step order
	                          -- (back-offs, growths): the first 32, then ',...' if more
	skipped_share   REAL,     -- skipped optimizer steps / optimizer steps (steps with a
	                          -- loss_scale decision; all steps without any) (0..1)
	fp16_ready      TEXT,     -- an FP32 run (no half types): 'ready' (its tensors fit FP16's
	                          -- range), 'needs_loss_scale' (gradients would underflow without
	                          -- one), 'overflows' (some tensor passes 65504); NULL otherwise
	comm_share      REAL,     -- communication share: all-reduce time not hidden behind
	                          -- compute (comm.wait_ns) / step time, over all ranks (0..1);
	                          -- NULL without collectives
	rank_spread     REAL,     -- slowest rank's busy time per step (step time minus the
	                          -- all-reduce wait) / fastest's - 1 (0: even); NULL with one rank
	ranks           INTEGER   -- ranks in the profile (1 unless merged)
);

-- One row per rank, computed at finalize (one row, rank 0, for a single-rank profile).
CREATE TABLE rank_summary (
	rank         INTEGER,  -- MPI rank
	steps        INTEGER,  -- steps it completed (an unfinished last step, a killed rank's, has no
	                       -- time and is left out)
	step_ns      INTEGER,  -- their total time
	mean_step_ns REAL,     -- mean step time
	compute_ns   INTEGER,  -- op time (forward, backward, optimizer)
	comm_ns      INTEGER,  -- time of its all-reduces, posted to complete
	wait_ns      INTEGER,  -- of comm_ns, the time it blocked waiting (not hidden)
	comm_bytes   INTEGER,  -- bytes it all-reduced
	overflow_steps INTEGER, -- steps whose gradients overflowed
	local_overflows INTEGER, -- all-reduces whose values held Inf/NaN on this rank itself
	end          TEXT      -- how it ended (meta 'end', or rank.N.end in a merged profile)
);

CREATE VIEW overview AS SELECT * FROM run_summary;

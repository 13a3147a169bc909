/* model.h — ampview's data model: what the panels show, read from a profile through
 * schema/profile_db.c and turned into plain view structs.
 *
 * Opening reads only summaries (meta, run_summary, advice, one origin row), so a ten-million-op
 * profile opens at once; lists are read on demand, small summary-sized ones once and cached,
 * event-sized ones a page at a time (LIMIT/OFFSET or step ranges served by the indexes that
 * ampprof builds at finalize).  A profile that was never finalized still opens: the figures
 * finalize would have stored are computed from the events (one scan, only in that case).
 * Strings are copied raw from the database; panels draw them through the screen module, which
 * sanitizes.  Single-threaded.
 */
#ifndef VIEW_MODEL_H
#define VIEW_MODEL_H

#include <stddef.h>
#include <stdint.h>
#include <sqlite3.h>

#include "profile_diff.h"
#include "profile_hist.h"

typedef struct view_model view_model;

/* Options of view_model_open; a negative threshold means "from the profile, else default". */
typedef struct view_model_opts {
	double fp16_threshold;   /* percent; flagged below (default 70) */
	double memcpy_threshold; /* percent; flagged above (default 15) */
} view_model_opts;

enum {
	VIEW_OK = 0,
	VIEW_EOPEN = -1,  /* amp_profile_open refused the file (message says why) */
	VIEW_EEMPTY = -2, /* a profile with no steps */
	VIEW_EDB = -3,    /* an SQLite error while reading */
	VIEW_ENOMEM = -4,
};

#define VIEW_SCALE_LO 8.0 /* the usual loss-scale band (docs/ARCHITECTURE.md §5) */
#define VIEW_SCALE_HI 1024.0

/* The run in one struct: meta facts, run_summary and the first non-finite origin. */
typedef struct view_run {
	char path[512];      /* the file as given */
	char command[512];   /* meta command */
	char start_time[64]; /* meta start_time */
	char host[128];
	char precision_mode[64];
	char end[32];         /* meta end: exited, signal, crash, killed, collecting ... */
	char exit_signal[32]; /* meta exit_signal ("" if none) */
	int exit_status;      /* meta exit_status, -1 if unknown */
	int complete;         /* meta complete = 1 */
	char incomplete[512]; /* meta incomplete: what the run did not record, "" if nothing */
	int finalized;        /* run_summary was present (else figures computed here) */
	int64_t steps, overflow_steps, skipped_steps;
	int64_t lossless_steps; /* ended with no loss and no overflow (evaluation, say) */
	int64_t first_step, last_step;
	int64_t step_span;      /* last_step - first_step + 1, at most 2^62: step numbers are the
	                           application's, so lists over them stay far from overflow */
	int64_t op_count, copy_count;
	int64_t wall_ns, step_ns, op_ns, copy_ns, peak_bytes;
	int64_t dropped_events;
	double fp16_share;      /* 0..1: the half share (fp16 and bf16) */
	double fp16_flop_share; /* 0..1 */
	double copy_share;      /* 0..1 */
	double native_half_share; /* 0..1: op time on a half engine; NAN if no op has a known
	                             engine (a version-1 profile) */
	char half_types[16];    /* half types that ran: "fp16", "bf16", "fp16+bf16", "" (FP32) */
	const char *half_label; /* "FP16 share", "BF16 share", "half share (fp16+bf16)" */
	double min_scale, max_scale, last_scale;
	char scaling[16];             /* meta loss_scale: "dynamic", "static", "" (not said) */
	char scale_history[24];       /* run_summary.scale_history: "probing", "isolated_spikes",
	                                 "collapsing", "steady"; "" (static scale, older profile) */
	char scale_history_steps[800]; /* the steps that show it, "1,2,3" (the first 32, ",...") */
	double fp16_threshold;     /* percent, in force */
	double memcpy_threshold;   /* percent, in force */
	char threshold_source[16]; /* "option", "profile" or "default" */
	int has_origin;            /* the first non-finite origin below is set */
	int origin_unread;         /* tensor_stats could not be read (damaged): origin unknown */
	int64_t origin_step, origin_seq;
	char origin_op[64], origin_label[256], origin_role[16];
	char origin_function[256], origin_file[512];
	int origin_line;
	int64_t crashes; /* rows in crashes */
	/* the first crash: its signal and the frame to name (innermost outside the C library):
	 * function, file and line when the symbolizer found them (crash_line > 0), else the
	 * frame as recorded in crash_frame */
	char crash_signal[16], crash_frame[512], crash_function[128], crash_file[512];
	int crash_line;
	int64_t untraced_steps; /* steps with their duration only (ampprof --steps=A-B) */
} view_run;

typedef struct view_advice {
	char rule[48], severity[16];
	char message[512];
	char evidence[512];
	int64_t step; /* -1 if none */
	int64_t callsite; /* callsites.id concerned, -1 if none */
} view_advice;

/* A row of the Ops panel: op type (and layer label) with its exec dtype. */
typedef struct view_op_group {
	char op[64];
	char label[256];                /* "" in op-type mode or when the sigs have no label */
	char dtype[16];                 /* exec dtype */
	char list[8];                   /* default precision list: white, gray, black, none */
	int64_t calls, total_ns, flops; /* flops: total over all calls */
	double mean_ns;
	double share;  /* of all op time */
	int half;      /* ran in a half type */
	int candidate; /* FP32 while its list allows FP16 (white or gray) */
	int nsigs;
} view_op_group;

/* A call site of an op group (drill-down). */
typedef struct view_site_row {
	int64_t id;
	char function[256], file[512];
	int line;
	int64_t calls, total_ns;
	char shape[48];
	char phase[16];
} view_site_row;

/* Calls of an op group in one step (drill-down). */
typedef struct view_group_step {
	int64_t step, calls, total_ns;
} view_group_step;

/* A training step with its time split.  Split figures are -1 when the step was not traced
 * in detail. */
typedef struct view_step {
	int64_t step, start_ns, dur_ns; /* dur_ns -1: the step never ended */
	double loss;                    /* NAN if unknown, or see loss_nonfinite */
	double scale;
	int overflow, skipped, detail;
	int loss_nonfinite;             /* the loss was computed and not finite: loss is NAN, INFINITY
	                                   or -INFINITY (steps.loss_state) */
	int64_t fp16_ns, fp32_ns, copy_ns, other_ns;
} view_step;

/* Loss-scale chart column: steps [first, last]. */
typedef struct view_scale_bucket {
	int64_t first, last;
	double min_scale, max_scale;
	int64_t overflows, skipped;
	int64_t first_overflow; /* -1 if none */
	int n;                  /* steps in the bucket */
} view_scale_bucket;

/* A step with non-finite values. */
typedef struct view_anomaly {
	int64_t step;
	double scale;
	int skipped;
	int64_t nonfinite; /* checked tensors with NaN or Inf (of rank, below, if set) */
	int has_origin;
	int origin_cast; /* the origin is the automatic cast in front of origin_op (the report's
	                    class cast_overflow): its FP32 input overflowed the half type */
	char origin_op[64], origin_label[256];
	char origin_file[512];
	int origin_line;
	int64_t rank; /* a profile of several ranks: the rank the row describes, whose tensors
	                 the step's detail shows (the lowest with an origin, else the lowest with
	                 non-finite values, else the lowest); else -1 */
} view_anomaly;

/* One checked tensor of a step (tensor_stats). */
typedef struct view_tstat {
	int64_t seq;
	char op[64], role[16], name[256], dtype[16];
	int64_t count, nan, inf, underflow, near_overflow;
	double min, max, absmax;
	int origin;
	char function[256], file[512];
	int line;
} view_tstat;

/* FP16 headroom of one layer (tensor name), over the whole run. */
typedef struct view_headroom {
	char name[256];
	int64_t count, underflow, near_overflow, nonfinite;
} view_headroom;

/* A call site ranked by time and anomalies. */
typedef struct view_callsite {
	int64_t id;
	char function[256], file[512];
	int line;
	int64_t op_calls, op_ns, copy_calls, copy_ns;
	int64_t anomalies, origins; /* non-finite tensors, origins (-1 until loaded) */
	char what[80]; /* what it launches: "Linear", "backward", "Add+2", "copy h2d" */
} view_callsite;

/* Opens path through amp_profile_open and reads the run summary.  On success *out is the
 * model (free with view_model_free).  On failure returns a VIEW_E* code and err holds
 * "cannot open 'path': reason". */
int view_model_open(const char *path, const view_model_opts *opts, view_model **out, char *err,
                    size_t errlen);
void view_model_free(view_model *m);

/* Nonzero once a query of the model met a damaged file (SQLITE_CORRUPT, SQLITE_NOTADB): what
 * was read may be incomplete, and the reader must say so (view_model_error holds SQLite's
 * message).  Sticky. */
int view_model_damaged(const view_model *m);

/* The run; valid until view_model_free. */
const view_run *view_model_run(const view_model *m);
/* The model's connection, for the readers of model_ext.c (owned by the model). */
sqlite3 *view_model_db(view_model *m);
/* The last SQLite error message of the model (for a panel's status line). */
const char *view_model_error(const view_model *m);

/* Advice rows, errors first, then warnings, then the rest, each in the profile's order; owned
 * by the model.  Returns the count. */
size_t view_model_advice(view_model *m, const view_advice **rows);

/* Op groups, by op type (by_label 0) or by op type and label (1), sorted by time; owned by
 * the model and cached.  Returns the count, or a VIEW_E* code. */
long view_model_op_groups(view_model *m, int by_label, const view_op_group **rows);
/* Call sites of a group (at most max rows, by time).  Returns the count or a VIEW_E* code. */
long view_model_group_sites(view_model *m, const view_op_group *g, int by_label,
                            view_site_row *rows, long max);
/* Steps [step_lo, step_hi] of a group with their calls (only steps where it ran). */
long view_model_group_steps(view_model *m, const view_op_group *g, int by_label, int64_t step_lo,
                            int64_t step_hi, view_group_step *rows, long max);

/* Number of step rows. */
int64_t view_model_step_count(view_model *m);
/* Index (0-based, in step order) of the first step >= step. */
int64_t view_model_step_index(view_model *m, int64_t step);
/* Step rows [offset, offset + max) in step order, with their time split (one range query over
 * op_events and copy_events).  Returns the count or a VIEW_E* code. */
long view_model_steps(view_model *m, int64_t offset, view_step *rows, long max);
/* Longest step duration (for the bar scale), 0 if none. */
int64_t view_model_max_step_ns(view_model *m);

/* Fills n columns of the loss-scale chart over all steps.  Returns n or a VIEW_E* code. */
long view_model_scale_buckets(view_model *m, view_scale_bucket *b, long n);

/* Steps with non-finite values, in step order: count, and a page with their origins. */
int64_t view_model_anomaly_count(view_model *m);
long view_model_anomalies(view_model *m, int64_t offset, view_anomaly *rows, long max);
/* The first overflow step after `after` (before it if dir < 0), or -1. */
int64_t view_model_next_overflow(view_model *m, int64_t after, int dir);
/* Index of step among the anomaly steps, or -1. */
int64_t view_model_anomaly_index(view_model *m, int64_t step);
/* Checked tensors of a step (of rank, or of every rank when rank < 0), origin first, then
 * non-finite ones, then by seq. */
long view_model_step_tstats(view_model *m, int64_t step, int64_t rank, int64_t offset,
                            view_tstat *rows, long max);
int64_t view_model_step_tstat_count(view_model *m, int64_t step, int64_t rank);
/* FP16 headroom per layer, worst first; cached.  Returns the count or a VIEW_E* code. */
long view_model_headroom(view_model *m, const view_headroom **rows);

/* Call sites with their time; anomalies filled too (one pass over tensor_stats, cached). */
long view_model_callsites(view_model *m, const view_callsite **rows);
/* The recorded frame chain of a call site ("function file:line" lines) into buf. */
int view_model_callsite_frames(view_model *m, int64_t id, char *buf, size_t len);

/* The directory that lists show source paths relative to, with its trailing '/': the parent of
 * the longest directory that holds every absolute call-site file ("/home/ada/ampkit/" for
 * files in /home/ada/ampkit/examples/), so a list says "examples/train.c:142" where the
 * profile says "/home/ada/ampkit/examples/train.c".  "" when a known file is relative or the
 * files share no directory below "/".  Computed once from the callsites table; owned by the
 * model. */
const char *view_model_source_root(view_model *m);
/* file without the source root if it starts with it, else file itself (a pointer into it). */
const char *view_model_short_path(view_model *m, const char *file);

/* ---- memory, exponent histograms, the diff (model_ext.c) ------------------------------------ */

/* Bytes by category at the end of a step (the memory table, summed over threads). */
typedef struct view_mem_row {
	int64_t step;
	int64_t cat[5]; /* master weights, working copies, activations, grads, optimizer state */
	int64_t total, peak;
} view_mem_row;
#define VIEW_MEM_CATS 5
/* "master", "working", "activations", "grads", "optimizer" (i < VIEW_MEM_CATS). */
const char *view_mem_cat_name(int i);
/* Memory rows whose step number contains filter ("" or NULL: all): the count, and a page of
 * them from offset in step order.  VIEW_E* on an SQLite error. */
int64_t view_model_memory_count(view_model *m, const char *filter);
long view_model_memory(view_model *m, const char *filter, int64_t offset, view_mem_row *rows,
                       long max);
/* The row with the largest peak (the first such step) into *row; 0, 1 when there is no
 * memory row, or a VIEW_E* code. */
int view_model_memory_peak(view_model *m, view_mem_row *row);

/* Exponent histograms per tensor name (schema/profile_hist.h), over the run (step < 0) or
 * at step; *rows is malloc'd (free() it).  Returns the count or a VIEW_E* code. */
long view_model_hist(view_model *m, int64_t step, amp_hist_tensor **rows);

/* Steps matching a filter as the steps panel shows them: the step number, or the words
 * "overflow", "skipped", "unended" of its flags.  *steps is malloc'd (free() it), in step
 * order.  Returns the count or a VIEW_E* code. */
long view_model_steps_matching(view_model *m, const char *filter, int64_t **steps);

/* The losses of one chart column: min and max of its steps' finite losses (NAN when none),
 * and its steps whose loss was not finite ('nan', 'inf', '-inf' in steps.loss_state; profiles
 * before it cannot tell): how many, the first of them and what it was. */
typedef struct view_loss_bucket {
	double lo, hi;
	long nonfinite;
	int64_t first_nonfinite;
	char first_state[8];
} view_loss_bucket;

/* The losses of n chart columns, steps [b[i].first, b[i].last] each.  Returns n or a VIEW_E*
 * code. */
long view_model_loss_buckets(view_model *m, const view_scale_bucket *b, long n,
                             view_loss_bucket *out);

/* A reason to distrust the call sites: "" or a warning with the fix (every call site is
 * __libc_start_call_main: a static link).  Computed once. */
const char *view_model_callsite_warning(view_model *m);

/* Whether the collector is still writing the profile: meta end is 'collecting' and the
 * application's process (meta pid, on this host) is alive. */
int view_model_being_written(view_model *m);
/* Whether the run r (read when the view opened) was being recorded then and has been
 * finalized since: its figures on screen are a snapshot, and reopening shows the final ones. */
int view_model_ended_since_open(view_model *m, const view_run *r);

/* One rank of a data-parallel profile (rank_summary), per-step figures in ns. */
typedef struct view_rank {
	int64_t rank, steps;
	double step_ns, busy_ns, compute_ns, comm_ns, wait_ns; /* per step; busy = step - wait */
	int64_t comm_bytes;
	char end[24];
} view_rank;
/* Up to max ranks in rank order, with the communication share and the rank spread of the run
 * (NAN when unknown; either pointer may be NULL).  Returns the count (0 for a profile without
 * rank_summary) or a VIEW_E* code. */
long view_model_ranks(view_model *m, view_rank *rows, long max, double *comm_share,
                      double *rank_spread);

#endif

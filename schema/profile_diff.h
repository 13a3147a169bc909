/* profile_diff.h — two profiles' timings side by side (`ampprof diff`, ampview's diff mode): per
 * op type, per layer (label) and per step phase (forward, backward, optimizer, copies, a
 * data-parallel run's all-reduces and the whole step), each run's time per traced step, the
 * change and the ratio, the biggest movers first, the way `perf diff` lines up two recordings.
 * Time is per traced step so that runs of different lengths compare; FP32 against AMP, or
 * before against after a change.  A merged profile's steps are counted per rank (each rank's
 * traced steps), so its figures are per step of one rank, as a single process's.
 *
 * Reads only what finalize stores (op_sigs.calls/total_ns, copy_sigs) when both profiles were
 * finalized, else one scan of the events.  Depends on SQLite and profile_db.h only.
 * Thread-compatible.
 */
#ifndef AMP_PROFILE_DIFF_H
#define AMP_PROFILE_DIFF_H

#include <stddef.h>
#include <stdint.h>
#include <sqlite3.h>

/* The groupings, in the order they are listed. */
typedef enum amp_diff_kind {
	AMP_DIFF_OP,    /* op type ('Linear') */
	AMP_DIFF_LAYER, /* layer label ('fc1'), all its op types and phases */
	AMP_DIFF_PHASE, /* 'forward', 'backward', 'optimizer', 'copies', 'comm', 'comm wait',
	                   'step' */
	AMP_DIFF_KINDS
} amp_diff_kind;

/* "op", "layer", "phase". */
const char *amp_diff_kind_name(amp_diff_kind k);

/* One row: a key and what each run spent on it.  A side that lacks the key has calls 0,
 * ns 0 and dtypes "". */
typedef struct amp_diff_row {
	amp_diff_kind kind;
	char name[128];        /* the op type, the label, or the phase */
	char dtype[2][24];     /* exec dtypes of each side ("fp16", "fp16,fp32"); "" for none */
	int64_t calls[2];      /* executions in the traced steps */
	double ns_per_step[2]; /* time per traced step */
	double delta_ns;       /* ns_per_step[1] - ns_per_step[0] */
	double ratio;          /* ns_per_step[1] / ns_per_step[0]; INFINITY if only B has it,
	                          0 if only A */
} amp_diff_row;

/* The comparison of A (baseline, side 0) with B (side 1). */
typedef struct amp_diff {
	int64_t steps[2];   /* traced steps of each side, of all its ranks (the divisor; 0: none,
	                       the rows of that side are totals) */
	int64_t ranks[2];   /* ranks of each side (1 but for a merged profile) */
	double step_ns[2];  /* mean traced step time */
	amp_diff_row *rows; /* kind by kind, within a kind by |delta_ns| descending */
	size_t nrows;
} amp_diff;

/* Computes the diff of profiles a and b (open connections).  On success returns 0 and fills
 * *out (release with amp_diff_release); on an SQLite error returns -1 with the message in
 * err.  A profile with no traced step counts one, so that its totals still show. */
int amp_diff_compute(sqlite3 *a, sqlite3 *b, amp_diff *out, char *err, size_t errlen);
void amp_diff_release(amp_diff *d);

#endif

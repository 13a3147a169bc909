/* dump.h — ampdump internals: element conversion, statistics and comparison metrics, .npy
 * writing, output tables, the profile access and tensor rows the subcommands share, and the
 * subcommands (step listing, step list, export, compare, re-run).
 *
 * dump/ reads profiles only through schema/profile_db.h and never links runtime/.  Element
 * data in a profile is little-endian, as the host (x86-64).  Subcommands print results on the
 * given stream, diagnostics on stderr, and return an exit status (0 ok, 1 bad input/failure).
 */
#ifndef DUMP_H
#define DUMP_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <sqlite3.h>

#include "amp_table.h"
#include "amp_text.h"

/* Exit statuses of ampdump. */
enum {
	DUMP_EXIT_OK = 0,
	DUMP_EXIT_FAIL = 1,  /* bad input: unknown step or tensor, not a profile, unwritable dir */
	DUMP_EXIT_USAGE = 2, /* bad command line */
};

/* Exit statuses of ampdump --compare, as cmp(1) and diff(1) have them: a script can tell a
 * divergence from a failure. */
enum {
	DUMP_EXIT_CMP_SAME = 0,    /* no tensor flagged */
	DUMP_EXIT_CMP_DIFFER = 1,  /* at least one tensor flagged (a divergence) */
	DUMP_EXIT_CMP_TROUBLE = 2, /* bad command line or input: nothing was compared */
};

/* Prints "ampdump: <message>" and, if hint is not NULL, "hint: <hint>" on stderr. */
void dump_error(const char *hint, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- elements (half.c) ------------------------------------------------------------------- */
typedef enum {
	DUMP_DT_UNKNOWN = -1,
	DUMP_DT_F32 = 0,  /* "fp32": IEEE binary32 */
	DUMP_DT_F16 = 1,  /* "fp16": IEEE binary16 */
	DUMP_DT_BF16 = 2, /* "bf16": bfloat16 (exported to .npy as <f4, numpy has no bf16) */
	DUMP_DT_I32 = 3,  /* "int32" */
} dump_dtype;

/* Dtype of a profile dtype name ("fp16"), or DUMP_DT_UNKNOWN (also for NULL). */
dump_dtype dump_dtype_parse(const char *name);
/* Bytes per element (0 for DUMP_DT_UNKNOWN). */
size_t dump_dtype_size(dump_dtype dt);

/* Exact conversions.  NaN stays NaN (payload shifted into the wider type, sign kept), Inf
 * stays Inf, subnormals are converted exactly. */
float dump_half_to_float(uint16_t h);
double dump_half_to_double(uint16_t h);
float dump_bf16_to_float(uint16_t b);

/* Element i of little-endian data of dtype dt, as a double (exact for every dtype here). */
double dump_element(const unsigned char *data, dump_dtype dt, size_t i);

/* Converts n elements of data (dtype dt) into out[0..n).  */
void dump_to_double(const unsigned char *data, dump_dtype dt, size_t n, double *out);

/* ---- statistics and comparison metrics (metrics.c) -------------------------------------- */
typedef struct dump_stats {
	uint64_t count;  /* elements */
	uint64_t nan;    /* NaN elements */
	uint64_t inf;    /* +-Inf elements */
	uint64_t finite; /* finite elements; min/max/absmax are meaningful only if > 0 */
	double min, max; /* over finite elements */
	double absmax;   /* largest finite magnitude */
} dump_stats;

/* Statistics of n elements of data (dtype dt), as tensor_stats records them. */
void dump_stats_compute(const unsigned char *data, dump_dtype dt, size_t n, dump_stats *out);

/* Comparison of a reference tensor a (e.g. the FP32 run) with b (e.g. the AMP run).
 * Positions where both are finite give the metrics; positions where both hold the same
 * non-finite value (NaN and NaN, +Inf and +Inf) agree and are skipped; any other position is a
 * mismatch, which makes max_abs and max_rel NaN (if a NaN is involved) or Inf.
 *   cosine  = a.b / (|a| |b|) over the finite positions; 1 if both are all zero (or there are
 *             no elements), 0 if exactly one is all zero; NaN when no position is finite on
 *             both sides (undefined: the tables leave it empty, and no verdict rests on it)
 *   norm_ratio = |b| / |a| over the finite positions; 1 if both are all zero, Inf if only a is;
 *             NaN as the cosine
 *   max_abs = max |a - b|
 *   max_rel = max |a - b| / |a|, with 0/0 = 0 and x/0 = Inf */
typedef struct dump_diff {
	uint64_t count;    /* elements compared */
	uint64_t finite;   /* positions finite on both sides */
	uint64_t mismatch; /* positions whose non-finite values differ */
	double cosine, norm_ratio, max_abs, max_rel;
} dump_diff;

void dump_diff_compute(const double *a, const double *b, size_t n, dump_diff *out);

/* Elementwise closeness of b to the reference a, numpy.isclose-style: a position finite on both
 * sides is outside the tolerance when |a - b| > atol + rtol*|a|.  (metrics.c)
 *   over   = positions outside the tolerance
 *   worst  = max |a - b| / (atol + rtol*|a|) over the positions finite on both sides (0/0 = 0,
 *            x/0 = Inf; 0 if there is none): above 1 exactly when over > 0, up to rounding
 *   only_a = positions where a is Inf/NaN and b is finite, only_b the converse
 * Positions non-finite on both sides are left to dump_diff_compute. */
typedef struct dump_closeness {
	uint64_t over;           /* positions outside the tolerance */
	uint64_t only_a, only_b; /* positions non-finite in one run only */
	double worst;            /* largest |a-b| as a multiple of its tolerance */
} dump_closeness;

void dump_closeness_compute(const double *a, const double *b, size_t n, double atol, double rtol,
                            dump_closeness *out);

/* Default relative tolerance of a pair of dtypes: 2^-7 if either is bf16, else 2^-10 if either
 * is fp16 (twice the unit roundoff: what rounding to that format alone may cause), else 0. */
double dump_default_rtol(dump_dtype a, dump_dtype b);

/* The limits of a comparison.  A tensor is flagged (dump_verdict) when
 *   - its Inf/NaN differ between the runs (DUMP_FLAG_NONFINITE), or
 *   - its cosine is below min_cosine, or its norm differs from the reference's by more than
 *     max_norm_diff (|norm_ratio - 1|), and an element is beyond the max_abs tolerance, that is
 *     |a-b| > max_abs + rtol*|a| (DUMP_FLAG_DRIFT): its direction or its size moved, by more
 *     than a negligible amount, or
 *   - its cosine is below cosine_floor, whatever the error (DUMP_FLAG_FLOOR), or
 *   - an element is beyond the max_abs_ceiling tolerance, whatever the cosine
 *     (DUMP_FLAG_CEILING).
 * Cosine and error are the accuracy rule of Ascend's msprobe compare (0.99 and 1e-3 together;
 * 0.9 or 1 alone); the norm closes its blind spot, a tensor scaled by a constant (a gradient
 * left unscaled, a layer flushed to zero) whose cosine stays 1.  Neither 0.99 nor 1e-3 alone
 * can judge an FP16 tensor against its FP32 twin: rounding to FP16 alone moves a value of 4
 * by up to 0.002, and a matmul output that cancels to near 0 keeps the rounding error of its
 * terms, which are not near 0. */
typedef struct dump_limits {
	double min_cosine;      /* default 0.99 */
	double max_norm_diff;   /* default 0.1 */
	double max_abs;         /* default 1e-3 */
	double cosine_floor;    /* default 0.9 */
	double max_abs_ceiling; /* default 1 */
} dump_limits;

enum {
	DUMP_FLAG_NONFINITE = 1u << 0,
	DUMP_FLAG_DRIFT = 1u << 1,
	DUMP_FLAG_FLOOR = 1u << 2,
	DUMP_FLAG_CEILING = 1u << 3,
};

/* The DUMP_FLAG_* bits that hold for a tensor with metrics d, over_max_abs elements beyond the
 * max_abs tolerance and over_ceiling beyond the max_abs_ceiling one (dump_closeness_compute
 * with those as atol).  A NaN cosine or norm ratio counts as beyond its limits.  0: not
 * flagged. */
unsigned dump_verdict(const dump_diff *d, uint64_t over_max_abs, uint64_t over_ceiling,
                      const dump_limits *l);

/* ---- .npy files and names (npy.c) ------------------------------------------------------- */
#define DUMP_MAX_DIMS 8

/* Parses a dumps.shape text: "(a,b)", "(a)", "(a,)", "()" (a scalar), blanks allowed.  Extents
 * must be non-negative decimal integers and their product must fit in 2^62.  Returns the
 * number of dimensions (0..DUMP_MAX_DIMS) and fills dims, or -1 if text is not a shape. */
int dump_parse_shape(const char *text, int64_t *dims);

/* Product of the extents (1 for a scalar). */
uint64_t dump_shape_count(const int64_t *dims, int ndim);

/* .npy descr for a dtype as exported: "<f4", "<f2" ("<f4" for bf16), "<i4"; NULL if unknown. */
const char *dump_npy_descr(dump_dtype dt);

/* The .npy data of n bf16 elements (little-endian, data) as exported: exact float32, the bf16
 * bits as the top half of each float (NaN payload and sign kept).  out has room for n. */
void dump_npy_widen_bf16(const void *data, size_t n, float *out);

/* Writes an .npy format 1.0 header for descr and shape into buf (len bytes).  The header is
 * padded with spaces and ended by '\n' so that it is a multiple of 64 bytes long.  Returns its
 * length, or 0 if it does not fit in len. */
size_t dump_npy_header(char *buf, size_t len, const char *descr, const int64_t *dims, int ndim);

/* Turns a tensor name into a safe file-name component in out (len >= 2 bytes): letters,
 * digits, '_' and '-' are kept, '.' only after a letter or digit (so no "..", no leading dot),
 * anything else becomes '_'; truncated to len - 1 and at most 100 bytes.  An empty or NULL
 * name gives "tensor".  The result never contains '/' and is never "." or "..".  Returns out. */
char *dump_sanitize_name(const char *name, char *out, size_t len);

/* Writes an .npy file named file (no '/' allowed) in the directory dirfd.  data holds the
 * elements already in descr's layout (bytes of them; must match the shape).  An existing file
 * is refused unless force is set; symbolic links are never followed, nor is anything but a
 * regular file written (a FIFO is refused, not waited on).  Returns 0, or -1 with errno set
 * (EEXIST, EINVAL for a bad name or size mismatch or a path that is not a regular file, ENXIO
 * for a FIFO without a reader, or the system error). */
int dump_npy_write(int dirfd, const char *file, int force, const char *descr, const int64_t *dims,
                   int ndim, const void *data, size_t bytes);

/* ---- output tables: schema/amp_table.h (amp_table, AMP_FMT_*, AMP_COL_*) ------------------ */

/* ---- profile access shared by the subcommands (profile.c) ------------------------------- */
/* Opens a profile read-only; on failure prints the reason with a hint and returns NULL. */
sqlite3 *dump_open_profile(const char *path);
/* The same for a command that takes its profiles as arguments only (--compare): the hint for
 * a missing one does not offer --db. */
sqlite3 *dump_open_profile_arg(const char *path);
/* --rank: the rank of a merged profile that dump_open_profile reads (-1: the lowest). */
void dump_select_rank(int64_t rank);
/* Without --rank, --step reads the lowest rank where that step's non-finite values began (an
 * overflow on one rank), else the lowest rank. */
void dump_select_rank_for_step(int64_t step);
/* --compare: the rank of the second profile (--rank A,B), set by dump_use_rank_second before
 * it is opened; -1: the same as the first's. */
void dump_select_rank_second(int64_t rank);
void dump_use_rank_second(void);

/* Checks that step was reached in db (path for messages).  Returns 0, or 1 with a message
 * "step N was never reached (the run has M steps)". */
int dump_check_step(sqlite3 *db, const char *path, int64_t step);

/* dump_open_profile, then dump_check_step.  Returns the database (close it with
 * amp_profile_close), or NULL with the reason printed. */
sqlite3 *dump_open_step(const char *path, int64_t step);

/* Prints "ampdump: cannot read 'path': <SQLite's last message on db>" on stderr. */
void dump_sql_error(sqlite3 *db, const char *path);

/* One integer from a query, its parameter (if it has one) bound to param; *null is set when
 * the value is NULL.  Returns 0, or -1 on an SQLite error or when there is no row. */
int dump_query_int(sqlite3 *db, const char *sql, int64_t param, int64_t *out, int *null);

/* Number of dumps recorded at step, or -1 on an SQLite error. */
int64_t dump_count_dumps(sqlite3 *db, int64_t step);

/* Looks up the data of dump id: *st becomes the statement (the caller finalizes it, also on
 * failure) whose column 0 is the blob.  Returns the result of sqlite3_step, SQLITE_ROW when the
 * dump exists, or the error of sqlite3_prepare_v2 (then *st is NULL). */
int dump_data_query(sqlite3 *db, int64_t id, sqlite3_stmt **st);

/* Column col of st's current row as a malloc'd string; NULL if the column is NULL (or out of
 * memory). */
char *dump_column_strdup(sqlite3_stmt *st, int col);

/* Makes room for element n of the array v of *cap elements of size bytes, doubling *cap (to 32
 * at first) when it is full.  Returns the array, possibly moved; NULL when out of memory, v
 * then unchanged and still owned by the caller. */
void *dump_grow(void *v, size_t *cap, size_t n, size_t size);

/* A tensor as a tensor_stats or dumps row records it. */
typedef struct dump_tensor {
	int64_t step, seq;      /* step, and the op's sequence number within it */
	char *op, *role, *name; /* op type; "input", "output", "grad" ...; tensor name */
	char *dtype, *shape;    /* "fp16"; "(4,8)", NULL for a tensor_stats row */
} dump_tensor;

/* Fills t from columns col.. of st's current row: step, seq, op, role, name, dtype, shape.
 * Strings are malloc'd copies, NULL for a NULL column (or out of memory); free them with
 * dump_tensor_release. */
void dump_tensor_read(sqlite3_stmt *st, int col, dump_tensor *t);
/* Frees t's strings and sets them to NULL (t itself belongs to the caller). */
void dump_tensor_release(dump_tensor *t);

/* strcmp with NULL ordered before every string. */
int dump_null_strcmp(const char *a, const char *b);
/* Order of tensors within runs: step, seq, role (dump_role_rank, then by text), name.
 * Returns <0, 0 or >0. */
int dump_tensor_cmp(const dump_tensor *a, const dump_tensor *b);

/* The hint suggesting how to record step in full (uses the profile's command line if known)
 * into buf.  Returns buf. */
char *dump_rerun_hint(sqlite3 *db, int64_t step, char *buf, size_t len);

/* Rank of a role for sorting: input 0, output 1, grad 2, other 3. */
int dump_role_rank(const char *role);

/* ---- subcommands ------------------------------------------------------------------------ */
/* ampdump --step N: the tensors recorded at step N, origin first (step.c). */
int dump_cmd_step(const char *db_path, int64_t step, amp_format fmt, FILE *out);
/* ampdump --list: steps with anomalies or dumps (list.c). */
int dump_cmd_list(const char *db_path, amp_format fmt, FILE *out);
/* --hist (hist.c): the exponent histograms per tensor, over the run (step < 0) or at step; with
 * tensor (a name), that tensor's bins.  Returns DUMP_EXIT_OK or DUMP_EXIT_FAIL. */
int dump_cmd_hist(const char *db_path, int64_t step, const char *tensor, amp_format fmt,
                  FILE *out);

/* ampdump --step N [--tensor ID|NAME] --npy DIR (export.c).  tensor NULL exports every dump
 * of the step.  The directory is created if missing (its parent must exist).  Written paths
 * are listed on out. */
int dump_cmd_npy(const char *db_path, int64_t step, const char *tensor, const char *dir, int force,
                 FILE *out);

/* ampdump --compare A B [--step N] (compare.c).  step < 0: every step dumped in both.
 * Gradients (role 'grad') are divided by their own run's loss scale of their step
 * (steps.scale) before anything is computed.  A tensor is flagged by dump_verdict; the
 * summary's first divergence is the first tensor, in execution order, with Inf/NaN in one run
 * where the other is finite, else the first one flagged. */
typedef struct dump_compare_opts {
	int64_t step;       /* step to compare, or -1 for every common dumped step */
	dump_limits limits; /* when a tensor is flagged */
	double rtol;        /* relative part of the tolerances; < 0: dump_default_rtol by dtypes */
	amp_format fmt;
} dump_compare_opts;
/* Returns DUMP_EXIT_CMP_SAME, DUMP_EXIT_CMP_DIFFER or DUMP_EXIT_CMP_TROUBLE. */
int dump_cmd_compare(const char *a_path, const char *b_path, const dump_compare_opts *opts,
                     FILE *out);

/* ampdump --application=CMD --step N --output=DB (rerun.c): runs CMD under libampprof's
 * collector (prof_run) with dump_steps = N, then lists what was dumped. */
typedef struct dump_rerun_opts {
	const char *application; /* shell command line */
	int64_t step;            /* step to dump in full */
	const char *output;      /* database to write (default dump.db) */
	int force;               /* overwrite output */
	int verbose;             /* let ampprof print its status line and summary */
	amp_format fmt;
} dump_rerun_opts;
int dump_cmd_rerun(const dump_rerun_opts *opts, FILE *out);

#endif

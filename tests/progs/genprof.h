/* genprof.h — writes synthetic but plausible ampkit profiles for the viewer's tests and bench.
 *
 * The profile follows schema/profile.sql and is created through schema/profile_db.c.  Besides
 * the event tables it fills what ampprof's finalize fills (op_sigs/copy_sigs calls and
 * total_ns, op_summary, run_summary, advice, the indexes), unless asked to imitate a collector
 * that died.  Output is deterministic for a given seed.
 */
#ifndef GENPROF_H
#define GENPROF_H

#include <stddef.h>
#include <stdint.h>

typedef struct genprof_opts {
	const char *path;        /* output file */
	int force;               /* replace an existing file */
	uint64_t ops;            /* op rows wanted (rounded to whole steps), default 2000 */
	int steps;               /* training steps, default 40 */
	double fp16_share;       /* target half share of op time (0..1), default 0.85 */
	double copy_share;       /* target copy time / step time (0..1), default 0.08 */
	int overflow_steps;      /* steps with an overflow (spread evenly), default 3 */
	int growth_interval;     /* clean steps before the scale doubles, default 8 */
	const char *origin_op;   /* op type that first overflows ("Exp") */
	const char *origin_file; /* its call site: file, line, function */
	int origin_line;
	const char *origin_func;
	const char *evil_label;  /* if set: the label of block 0's fc1 (may hold escapes) */
	const char *command;     /* meta 'command' */
	const char *source_dir;  /* if set: relative call-site files are written under it */
	int crashed;             /* the run died on SIGSEGV in its last step (still finalized) */
	int unfinalized;         /* the collector died: no summaries, no aggregates, no indexes */
	int empty;               /* meta only, no steps */
	int newer_schema;        /* write user_version = AMP_PROFILE_VERSION + 1 */
	const char *half_dtype;  /* the half type of the half ops, tensors and casts: "fp16"
	                            (default) or "bf16" */
	const char *gemm_engine; /* engine of the half GEMMs (MatMul, Linear), default "fp32-fma"
	                            (half storage computed in FP32, as on the AMD class with fp16);
	                            the other half ops and the FP32 ops run on "fp32-fma", the
	                            reshapes on "none" */
	int no_engine;           /* leave op_sigs.engine NULL (a version-1 profile's ops) */
	const char *cpu_features;/* meta cpu_half_features, default "avx512_bf16" */
	const char *cpu_vendor;  /* meta cpu_vendor, default "AuthenticAMD" */
	const char *precision_mode; /* meta precision_mode, default force_fp16 with overflow steps,
	                            else allow_mix_precision */
	double fp16_threshold;   /* meta options.fp16_threshold (percent), default 70 */
	double memcpy_threshold; /* meta options.memcpy_threshold (percent), default 15 */
	uint64_t seed;           /* RNG seed, default 1 */
	int quiet;               /* no progress on stderr */
} genprof_opts;

/* Fills o with the defaults above (path NULL). */
void genprof_defaults(genprof_opts *o);

/* Writes the profile.  Returns 0, or -1 with a message in err ("cannot create 'x': ...").
 * *ops_written (if not NULL) receives the number of op rows. */
int genprof_write(const genprof_opts *o, uint64_t *ops_written, char *err, size_t errlen);

#endif

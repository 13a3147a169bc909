/* cli.h — the command line shared by every example program, context setup from it, and the
 * result line (--json) that tests and benchmarks parse.
 *
 * Flags common to all examples live in ex_common; an example adds its own through a table of
 * ex_option.  Parsing never exits: it returns what the caller should do.
 */
#ifndef AMP_EX_CLI_H
#define AMP_EX_CLI_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "amp/amp.h"

/* Flags every example accepts.  The example fills in its defaults before parsing. */
typedef struct ex_common {
	const char *precision; /* "fp32", "amp", "fp16", "bf16", or NULL: keep the config's mode */
	int64_t epochs;        /* passes over the training data */
	int64_t steps;         /* stop after this many training steps; 0 = no limit */
	int64_t batch;         /* samples per step */
	double lr;             /* learning rate */
	int64_t seed;          /* seed for initialisation and shuffling; -1 = the config's */
	const char *config;    /* amp.cfg path, or NULL ($AMP_CONFIG) */
	int json;              /* print the result line */
	int64_t log_every;     /* progress line every N steps; 0 = none */
} ex_common;

typedef enum {
	EX_OPT_INT,    /* value points to int64_t */
	EX_OPT_FLOAT,  /* value points to double */
	EX_OPT_STRING, /* value points to const char * (into argv) */
	EX_OPT_FLAG,   /* value points to int, set to 1 */
} ex_opt_type;

/* An example's own flag, "--name VALUE" or "--name=VALUE". */
typedef struct ex_option {
	const char *name; /* without the dashes */
	ex_opt_type type;
	void *value;
	const char *arg;  /* argument name shown in the usage ("N", "FILE"); NULL for flags */
	const char *help; /* one line; the current value is shown beside it as the default */
} ex_option;

/* ex_program.flags: common flags an example has no use for, or narrows. */
enum {
	EX_NO_EPOCHS = 1u << 0,  /* no passes over a dataset: --epochs is not accepted */
	EX_STEPS_LIMIT = 1u << 1 /* --steps is the run's length: at least 1 (no "0: no limit") */
};

typedef struct ex_program {
	const char *name;       /* "mlp_fashion" */
	const char *summary;    /* one line */
	const ex_option *extra; /* the example's own flags, or NULL */
	int n_extra;
	unsigned flags; /* EX_NO_EPOCHS | EX_STEPS_LIMIT, or 0 */
} ex_program;

/* Parses argv into c and the extra options.  Returns 0 to go on, 1 after printing the usage
 * to stdout for --help (exit 0), or 2 after printing an error and the usage to stderr (exit 2). */
int ex_parse_args(const ex_program *prog, ex_common *c, int argc, char **argv);
/* Prints the usage (with current values as defaults) to f. */
void ex_usage(const ex_program *prog, const ex_common *c, FILE *f);
/* A bad value found after parsing: prints "name: <message>", the usage line and the --help
 * hint to stderr, as a parse error does, and returns 2 (the exit status). */
int ex_usage_error(const ex_program *prog, const ex_common *c, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* 0 when lo <= v <= hi, else ex_usage_error naming --name and the range. */
int ex_check_int(const ex_program *prog, const ex_common *c, const char *name, int64_t v,
                 int64_t lo, int64_t hi);

/* Creates the context from --config, then applies --precision and --seed on top.  On failure
 * prints "name: message" to stderr and returns -1 (*out is NULL).  A --precision whose mode
 * the runtime refuses (amp_config_set fails) is a usage error: the runtime's message is printed
 * and the process exits with status 2.  Free with amp_ctx_free. */
int ex_ctx_open(const ex_program *prog, const ex_common *c, amp_ctx **out);
/* Short name of the context's precision mode: "fp32", "amp", "fp16", "bf16" (the --precision
 * names), "force_bf16" (a mode only the config selects) or "keep" (must_keep_origin_dtype). */
const char *ex_precision_name(amp_ctx *ctx);
/* The context's seed (after --seed and the config). */
uint64_t ex_ctx_seed(amp_ctx *ctx);
/* Prints "name: <what>: <amp_ctx_error>" to stderr and returns 1 (an exit status). */
int ex_fail(const ex_program *prog, amp_ctx *ctx, const char *what, int rc);

/* Monotonic wall clock in seconds. */
double ex_now(void);

/* ---- the result line ------------------------------------------------------------------------
 * One JSON object on one line, keys in the order added.  Non-finite numbers are written as null
 * (JSON has no nan).  The buffer is fixed; keys past its end are dropped and ex_json_end then
 * still closes a valid object. */
typedef struct ex_json {
	char buf[2048];
	size_t len;
	int n;
} ex_json;

void ex_json_begin(ex_json *j);
void ex_json_str(ex_json *j, const char *key, const char *value);
void ex_json_num(ex_json *j, const char *key, double value); /* %.9g */
void ex_json_int(ex_json *j, const char *key, int64_t value);
/* Adds peak_bytes, param_act_peak_bytes (masters, working copies and activations),
 * overflow_steps, skipped_steps and final_scale from the context. */
void ex_json_run_stats(ex_json *j, amp_ctx *ctx);
/* Closes the object and returns the line (without newline), valid as long as j. */
const char *ex_json_end(ex_json *j);

/* The keys every example's result line starts and ends with.  ex_json_run_begin begins j with
 * example, precision (ex_precision_name) and steps; ex_json_throughput adds train_seconds and
 * samples_per_sec (0 when no time was measured); ex_json_run_print adds the run statistics
 * (ex_json_run_stats), closes the object and prints it as one line on stdout. */
void ex_json_run_begin(ex_json *j, const char *example, amp_ctx *ctx, int64_t steps);
void ex_json_throughput(ex_json *j, double train_seconds, int64_t samples);
void ex_json_run_print(ex_json *j, amp_ctx *ctx);

#endif

/* check_int.h — what check.c (the checks, statistics and origins) and check_dump.c (the
 * configuration, the process-wide counters, the spool files and their budget) share; private
 * to the two.
 */
#ifndef AMP_CHECK_INT_H
#define AMP_CHECK_INT_H

#include <stdint.h>
#include <time.h>

#include "check.h"
#include "kernels/stats.h"

#define CHECK_HINTS 4 /* an op's outputs, a backward op's gradients */
#define CHECK_PRODUCERS 32 /* the step's latest forward outputs and casts, for an origin's inputs */

struct amp_check_ctx {
	int64_t step;                  /* step this state belongs to */
	int full;                      /* full statistics in this step */
	int dump_all;                  /* one of the --dump-steps */
	amp_check_origin origin;       /* origin.step < 0: none yet */
	int nf_dumps;                  /* non-finite dumps written in this step */
	int nf_admitted;               /* 0: undecided, 1: within the steps cap, -1: refused */
	const amp_tensor *cast_bad;    /* FP16 cast of finite FP32 data that holds Inf/NaN */
	const amp_tensor *cast_src;    /* its FP32 source */
	const amp_tensor *last_out;    /* output of the last op (the loss, at amp_backward) */
	uint64_t last_seq;
	amp_op_type last_op;
	int bw_valid;                  /* a backward op ran in this step: */
	uint64_t bw_seq;               /* the last one, which a cast's backward is charged to */
	amp_op_type bw_op;
	/* Who wrote the step's latest tensors (a ring, newest at n_prod - 1): an op's output
	 * (cast_of NULL, seq of the op) or an automatic cast (cast_of: its source's data).  Read
	 * only at an origin, to name the op upstream of each input. */
	unsigned n_prod;
	struct {
		const void *data;
		const void *cast_of;
		uint64_t seq;
	} prod[CHECK_PRODUCERS];
	int n_hints;                   /* statistics kernels took of tensors they wrote */
	struct {
		const void *data;
		int64_t numel;
		amp_stats s;
	} hint[CHECK_HINTS];
};

/* One tensor to dump: the op it belongs to, its role, the file-name tag and index, its name,
 * why, and whether the step's origin is a gradient. */
typedef struct dump_what {
	uint64_t seq;
	amp_op_type op;
	int role;
	const char *tag;   /* file name part: in, out, grad, dy, src */
	int index;
	const char *name;  /* tensor name for the dumps table */
	int reason;
	int grad_origin;   /* a non-finite dump of a backward origin */
} dump_what;

static inline int is_float(const amp_tensor *t)
{
	return t && amp_dt(t->dtype)->is_float && t->numel > 0;
}

/* The configuration in force (amp_check_get_config), inline for the hooks: amp_check_cfg is
 * set once by amp_check_config_init (the session's) or by amp_check_configure. */
extern const amp_check_config *amp_check_cfg;
void amp_check_config_init(void);
static inline const amp_check_config *amp_check_config_now(void)
{
	if (__builtin_expect(amp_check_cfg == NULL, 0))
		amp_check_config_init();
	return amp_check_cfg;
}
/* 1 if step is one of cfg's --dump-steps. */
int amp_check_in_dump_steps(const amp_check_config *cfg, int64_t step);
/* The process-wide counters: checked, stats, origins and check_ns are atomics, the dump
 * fields change under the dump mutex (check_dump.c). */
extern amp_check_counters amp_check_cnt;
extern amp_check_observer amp_check_observer_fn;
extern void *amp_check_observer_arg;
/* A context's first check state: registers the at-exit report once. */
void amp_check_first_state(void);
/* A step ended: the dump counters that changed reach meta. */
void amp_check_step_ended(void);
/* Dumps t (a float tensor) into the spool directory within the limits of cfg, counting what
 * it does not write, and announces it (amp_trace_dump). */
void amp_check_dump_tensor(amp_ctx *ctx, struct amp_check_ctx *st, const amp_check_config *cfg,
                           const dump_what *w, const amp_tensor *t);

/* The hooks time themselves (vDSO clock, ~20 ns a read) so that a profile states what the
 * diagnostics cost ("check_ns" in meta). */
static inline uint64_t amp_check_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static inline void amp_check_spent_since(uint64_t t0)
{
	__atomic_add_fetch(&amp_check_cnt.check_ns, amp_check_now_ns() - t0, __ATOMIC_RELAXED);
}

#endif

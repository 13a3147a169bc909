/* genprof.c — synthetic ampkit profiles (see genprof.h).
 *
 * A step is a small transformer-like network of L blocks (attention, residual, LayerNorm, MLP)
 * run forward then backward, a classification head and one optimizer op; every position in
 * the step is one op signature, so sigs stay a few thousand even for ten million op rows.
 * Durations are scaled so that the FP16 share and the copy share land on the requested values.
 */
#include "genprof.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amp_events.h"
#include "profile_db.h"

#define GEN_VERSION "gen_profile 1"
#define BLOCK_FWD   9
#define OTHER_FRAC  0.04 /* share of each step that is neither op nor copy */

void genprof_defaults(genprof_opts *o)
{
	memset(o, 0, sizeof *o);
	o->ops = 2000;
	o->steps = 40;
	o->fp16_share = 0.85;
	o->copy_share = 0.08;
	o->overflow_steps = 3;
	o->growth_interval = 8;
	o->origin_op = "Exp";
	o->origin_file = "examples/model.c";
	o->origin_line = 88;
	o->origin_func = "attention_forward";
	o->command = "./train --epochs 1";
	o->half_dtype = "fp16";
	o->gemm_engine = "fp32-fma";
	o->cpu_features = "avx512_bf16";
	o->cpu_vendor = "AuthenticAMD";
	o->fp16_threshold = 70;
	o->memcpy_threshold = 15;
	o->seed = 1;
}

static int is_gemm(int op)
{
	return op == AMP_OP_MATMUL || op == AMP_OP_BATCH_MATMUL || op == AMP_OP_LINEAR ||
	       op == AMP_OP_CONV2D;
}

/* The engine a template op ran on (see genprof_opts.gemm_engine). */
static const char *op_engine(const genprof_opts *o, int op, int half)
{
	if (op == AMP_OP_RESHAPE)
		return "none";
	return half && is_gemm(op) ? o->gemm_engine : "fp32-fma";
}

/* ---- rng ------------------------------------------------------------------------------------ */
static uint64_t rng_next(uint64_t *s)
{
	uint64_t x = *s;
	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	return *s = x;
}

static double rng_unit(uint64_t *s)
{
	return (double)(rng_next(s) >> 11) * (1.0 / 9007199254740992.0);
}

/* ---- the step template ---------------------------------------------------------------------- */
typedef struct site {
	const char *function, *file;
	int line;
} site;

/* Call sites: one per source line that launches ops; index = callsites.id - 1. */
enum {
	CS_QK,
	CS_EXP,
	CS_SOFTMAX,
	CS_OUT,
	CS_RESID,
	CS_LN,
	CS_FC1,
	CS_GELU,
	CS_FC2,
	CS_HEAD,
	CS_LOGSM,
	CS_LOSS,
	CS_BACKWARD,
	CS_OPTIM,
	CS_RESHAPE,
	CS_STAGE,
	CS_MASTER,
	CS_CAST,
	CS_COUNT
};

static const site base_sites[CS_COUNT] = {
    [CS_QK] = {"attention_forward", "examples/model.c", 84},
    [CS_EXP] = {"attention_forward", "examples/model.c", 88},
    [CS_SOFTMAX] = {"attention_forward", "examples/model.c", 89},
    [CS_OUT] = {"attention_forward", "examples/model.c", 92},
    [CS_RESID] = {"block_forward", "examples/model.c", 120},
    [CS_LN] = {"block_forward", "examples/model.c", 121},
    [CS_FC1] = {"mlp_forward", "examples/model.c", 104},
    [CS_GELU] = {"mlp_forward", "examples/model.c", 105},
    [CS_FC2] = {"mlp_forward", "examples/model.c", 106},
    [CS_HEAD] = {"model_forward", "examples/model.c", 140},
    [CS_LOGSM] = {"model_loss", "examples/model.c", 151},
    [CS_LOSS] = {"model_loss", "examples/model.c", 152},
    [CS_BACKWARD] = {"train_step", "examples/train.c", 142},
    [CS_OPTIM] = {"train_step", "examples/train.c", 150},
    [CS_RESHAPE] = {"model_forward", "examples/model.c", 133},
    [CS_STAGE] = {"load_batch", "examples/train.c", 97},
    [CS_MASTER] = {"train_step", "examples/train.c", 131},
    [CS_CAST] = {"mlp_forward", "examples/model.c", 103},
};

typedef struct tmpl_op {
	int op;    /* amp_op_type */
	int phase; /* amp_phase */
	int half;  /* runs in fp16 */
	int black; /* on the default black list */
	char label[160];
	char shape[32];
	int64_t flops, bytes;
	int aligned;
	int callsite;   /* callsites.id */
	double base_ns; /* mean duration */
} tmpl_op;

typedef struct tmpl_copy {
	int kind; /* amp_copy_kind */
	const char *src, *dst;
	int64_t bytes;
	char label[160];
	int callsite;
	double weight;
} tmpl_copy;

typedef struct block_role {
	int op, cs;
	const char *suffix;
	int list; /* 0 white, 1 gray, 2 black */
	double ns;
	int64_t m, n, k; /* GEMM dims, or elements in m */
} block_role;

static const block_role roles[BLOCK_FWD] = {
    {AMP_OP_MATMUL, CS_QK, "attn.qk", 0, 38000, 64, 64, 128},
    {AMP_OP_EXP, CS_EXP, "attn.exp", 2, 6000, 64 * 64, 0, 0},
    {AMP_OP_SOFTMAX, CS_SOFTMAX, "attn.softmax", 2, 9000, 64 * 64, 0, 0},
    {AMP_OP_MATMUL, CS_OUT, "attn.out", 0, 40000, 64, 128, 64},
    {AMP_OP_ADD, CS_RESID, "residual", 1, 3000, 64 * 128, 0, 0},
    {AMP_OP_LAYER_NORM, CS_LN, "ln", 2, 9000, 64 * 128, 0, 0},
    {AMP_OP_LINEAR, CS_FC1, "fc1", 0, 60000, 64, 512, 128},
    {AMP_OP_GELU, CS_GELU, "gelu", 1, 5000, 64 * 512, 0, 0},
    {AMP_OP_LINEAR, CS_FC2, "fc2", 0, 60000, 64, 128, 512},
};

typedef struct tmpl {
	tmpl_op *ops;
	size_t nops;
	tmpl_copy *copies;
	size_t ncopies;
	size_t origin; /* index of the origin op */
	site sites[CS_COUNT];
} tmpl;

static void set_gemm(tmpl_op *t, int64_t m, int64_t n, int64_t k, int half)
{
	snprintf(t->shape, sizeof t->shape, "(%" PRId64 ",%" PRId64 ",%" PRId64 ")", m, n, k);
	t->flops = 2 * m * n * k;
	t->bytes = (m * k + k * n + m * n) * (half ? 2 : 4);
	t->aligned = m % 8 == 0 && n % 8 == 0 && k % 8 == 0;
}

static void set_elem(tmpl_op *t, int64_t elems, int half)
{
	snprintf(t->shape, sizeof t->shape, "(%" PRId64 ")", elems);
	t->flops = elems * 4;
	t->bytes = elems * 2 * (half ? 2 : 4);
	t->aligned = 1;
}

static int build_template(const genprof_opts *o, size_t per_step, tmpl *t, char *err, size_t errlen)
{
	size_t blocks = per_step > 5 + 2 * BLOCK_FWD ? (per_step - 5) / (2 * BLOCK_FWD) : 1;
	size_t fixed = blocks * 2 * BLOCK_FWD + 5;
	size_t pad = per_step > fixed ? per_step - fixed : 0;
	int low = o->fp16_share < 0.7;
	int origin_type = amp_op_from_name(o->origin_op ? o->origin_op : "Exp");
	if (origin_type < 0) {
		snprintf(err, errlen, "unknown origin op '%s'", o->origin_op);
		return -1;
	}
	t->nops = fixed + pad;
	t->ops = calloc(t->nops, sizeof *t->ops);
	t->ncopies = 2 * blocks + 1;
	t->copies = calloc(t->ncopies, sizeof *t->copies);
	if (!t->ops || !t->copies) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	memcpy(t->sites, base_sites, sizeof base_sites);
	t->origin = (size_t)-1;
	size_t n = 0;
	for (size_t b = 0; b < blocks; b++)
		for (int r = 0; r < BLOCK_FWD; r++) {
			const block_role *ro = &roles[r];
			tmpl_op *op = &t->ops[n];
			op->op = ro->op;
			op->phase = AMP_PHASE_FORWARD;
			op->black = ro->list == 2;
			op->half = ro->list != 2;
			if (low && (r == 3 || r == 8))
				op->half =
				    0; /* white ops left in FP32: the "could run in FP16" case */
			if (ro->op == origin_type && b == 0 && t->origin == (size_t)-1) {
				t->origin = n;
				if (o->overflow_steps > 0)
					op->half = 1; /* forced to FP16: how it overflows */
				t->sites[ro->cs].function = o->origin_func;
				t->sites[ro->cs].file = o->origin_file;
				t->sites[ro->cs].line = o->origin_line;
			}
			if (r == 6 && b == 0 && o->evil_label)
				snprintf(op->label, sizeof op->label, "%s", o->evil_label);
			else
				snprintf(op->label, sizeof op->label, "blocks.%zu.%s", b,
				         ro->suffix);
			if (ro->n)
				set_gemm(op, ro->m, ro->n, ro->k, op->half);
			else
				set_elem(op, ro->m, op->half);
			op->callsite = ro->cs + 1;
			op->base_ns = ro->ns;
			n++;
		}
	/* head forward: Linear (unaligned: 10 classes), LogSoftmax, CrossEntropy */
	tmpl_op *h = &t->ops[n++];
	h->op = AMP_OP_LINEAR, h->phase = AMP_PHASE_FORWARD, h->half = 1;
	snprintf(h->label, sizeof h->label, "head");
	set_gemm(h, 64, 10, 128, 1);
	h->callsite = CS_HEAD + 1, h->base_ns = 7000;
	h = &t->ops[n++];
	h->op = AMP_OP_LOG_SOFTMAX, h->phase = AMP_PHASE_FORWARD, h->black = 1;
	snprintf(h->label, sizeof h->label, "loss.logsoftmax");
	set_elem(h, 640, 0);
	h->callsite = CS_LOGSM + 1, h->base_ns = 2500;
	h = &t->ops[n++];
	h->op = AMP_OP_CROSS_ENTROPY, h->phase = AMP_PHASE_FORWARD, h->black = 1;
	snprintf(h->label, sizeof h->label, "loss");
	set_elem(h, 640, 0);
	h->callsite = CS_LOSS + 1, h->base_ns = 2000;
	for (size_t p = 0; p < pad; p++) {
		h = &t->ops[n++];
		h->op = AMP_OP_RESHAPE, h->phase = AMP_PHASE_FORWARD, h->half = 1;
		snprintf(h->label, sizeof h->label, "reshape.%zu", p);
		set_elem(h, 8192, 1);
		h->callsite = CS_RESHAPE + 1, h->base_ns = 400;
	}
	/* backward: head, then the blocks in reverse, all launched from train_step */
	h = &t->ops[n++];
	*h = t->ops[blocks * BLOCK_FWD];
	h->phase = AMP_PHASE_BACKWARD, h->callsite = CS_BACKWARD + 1, h->base_ns *= 2;
	for (size_t b = blocks; b-- > 0;)
		for (int r = BLOCK_FWD; r-- > 0;) {
			h = &t->ops[n++];
			*h = t->ops[b * BLOCK_FWD + (size_t)r];
			h->phase = AMP_PHASE_BACKWARD;
			h->callsite = CS_BACKWARD + 1;
			h->base_ns *= 2;
			h->flops *= 2;
		}
	h = &t->ops[n++];
	h->op = AMP_OP_OPTIMIZER, h->phase = AMP_PHASE_OPTIMIZER;
	snprintf(h->label, sizeof h->label, "optimizer");
	set_elem(h, (int64_t)blocks * 2 * 128 * 512, 0);
	h->callsite = CS_OPTIM + 1, h->base_ns = 20000.0 * (double)blocks;
	if (t->origin == (size_t)-1) {
		snprintf(err, errlen, "origin op '%s' is not in the generated network",
		         o->origin_op);
		return -1;
	}
	/* copies: input staging, then per block a master refresh and a cast of fc1's input */
	size_t c = 0;
	tmpl_copy *cp = &t->copies[c++];
	cp->kind = AMP_COPY_H2D, cp->src = "fp32", cp->dst = "fp32", cp->bytes = 64 * 784 * 4;
	snprintf(cp->label, sizeof cp->label, "input");
	cp->callsite = CS_STAGE + 1, cp->weight = 3;
	for (size_t b = 0; b < blocks; b++) {
		cp = &t->copies[c++];
		cp->kind = AMP_COPY_MASTER, cp->src = "fp32", cp->dst = o->half_dtype;
		cp->bytes = 128 * 512 * 2 * 2;
		snprintf(cp->label, sizeof cp->label, "blocks.%zu.fc1.weight", b);
		cp->callsite = CS_MASTER + 1, cp->weight = 2;
		cp = &t->copies[c++];
		cp->kind = AMP_COPY_CAST, cp->src = "fp32", cp->dst = o->half_dtype,
		cp->bytes = 64 * 128 * 2;
		snprintf(cp->label, sizeof cp->label, "%s", t->ops[b * BLOCK_FWD + 6].label);
		cp->callsite = CS_CAST + 1, cp->weight = 1;
	}
	/* scale FP16 durations so that the time share lands on the target */
	double t16 = 0, t32 = 0;
	for (size_t i = 0; i < t->nops; i++)
		*(t->ops[i].half ? &t16 : &t32) += t->ops[i].base_ns;
	double f = o->fp16_share < 0.01 ? 0.01 : o->fp16_share > 0.99 ? 0.99 : o->fp16_share;
	double k = t16 > 0 ? f * t32 / ((1 - f) * t16) : 1;
	for (size_t i = 0; i < t->nops; i++)
		if (t->ops[i].half)
			t->ops[i].base_ns *= k;
	return 0;
}

/* ---- writing -------------------------------------------------------------------------------- */
typedef struct gen {
	sqlite3 *db;
	char *err;
	size_t errlen;
	const char *path;
} gen;

static int sql_fail(gen *g, const char *what)
{
	snprintf(g->err, g->errlen, "cannot write '%s': %s: %s", g->path, what,
	         sqlite3_errmsg(g->db));
	return -1;
}

static int exec(gen *g, const char *sql)
{
	return sqlite3_exec(g->db, sql, NULL, NULL, NULL) == SQLITE_OK ? 0 : sql_fail(g, sql);
}

static int prep(gen *g, sqlite3_stmt **st, const char *sql)
{
	return sqlite3_prepare_v2(g->db, sql, -1, st, NULL) == SQLITE_OK ? 0 : sql_fail(g, sql);
}

static int done(gen *g, sqlite3_stmt *st, const char *what)
{
	int rc = sqlite3_step(st);
	sqlite3_reset(st);
	return rc == SQLITE_DONE ? 0 : sql_fail(g, what);
}

static int meta(gen *g, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int meta(gen *g, const char *key, const char *fmt, ...)
{
	char buf[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof buf, fmt, ap);
	va_end(ap);
	return amp_profile_meta_set(g->db, key, buf) == AMP_PROFILE_OK ? 0 : sql_fail(g, "meta");
}

static void bind_text(sqlite3_stmt *st, int i, const char *s)
{
	sqlite3_bind_text(st, i, s, -1, SQLITE_STATIC);
}

static int is_overflow_step(const genprof_opts *o, int s)
{
	for (int i = 0; i < o->overflow_steps; i++)
		if (s == (int)((int64_t)(i + 1) * o->steps / (o->overflow_steps + 1)))
			return 1;
	return 0;
}

static int write_callsites(gen *g, const tmpl *t, const char *source_dir)
{
	sqlite3_stmt *st = NULL;
	int rc = prep(g, &st,
	              "INSERT INTO callsites(id, address, module, offset, function, file, "
	              "line, frames) VALUES (?,?,?,?,?,?,?,?)");
	for (int i = 0; rc == 0 && i < CS_COUNT; i++) {
		const site *s = &t->sites[i];
		char frames[2048], file[512], main_file[512];
		const char *dir = source_dir ? source_dir : "";
		const char *sep = source_dir ? "/" : "";
		snprintf(file, sizeof file, "%s%s%s", s->file[0] == '/' ? "" : dir,
		         s->file[0] == '/' ? "" : sep, s->file);
		snprintf(main_file, sizeof main_file, "%s%sexamples/train.c", dir, sep);
		snprintf(frames, sizeof frames, "%s %s:%d\nmain %s:210", s->function, file, s->line,
		         main_file);
		sqlite3_bind_int(st, 1, i + 1);
		sqlite3_bind_int64(st, 2, 0x555555554000 + 0x1000 + 0x40 * i);
		bind_text(st, 3, "/home/ada/project/examples/train");
		sqlite3_bind_int64(st, 4, 0x1000 + 0x40 * i);
		bind_text(st, 5, s->function);
		bind_text(st, 6, file);
		sqlite3_bind_int(st, 7, s->line);
		sqlite3_bind_text(st, 8, frames, -1, SQLITE_TRANSIENT);
		rc = done(g, st, "callsites");
	}
	sqlite3_finalize(st);
	return rc;
}

static int write_sigs(gen *g, const genprof_opts *o, const tmpl *t, const uint64_t *calls,
                      const uint64_t *tot, const uint64_t *ccalls, const uint64_t *ctot,
                      int finalized)
{
	sqlite3_stmt *st = NULL;
	const char *hd = o->half_dtype;
	int rc = prep(g, &st,
	              "INSERT INTO op_sigs(id, op, phase, exec_dtype, in_dtype, out_dtype, "
	              "label, shape, flops, bytes, aligned, callsite, calls, total_ns, engine) "
	              "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)");
	for (size_t i = 0; rc == 0 && i < t->nops; i++) {
		const tmpl_op *op = &t->ops[i];
		sqlite3_bind_int64(st, 1, (int64_t)i + 1);
		bind_text(st, 2, amp_op_name((amp_op_type)op->op));
		bind_text(st, 3, amp_phase_name((amp_phase)op->phase));
		bind_text(st, 4, op->half ? hd : "fp32");
		bind_text(st, 5, op->black ? hd : op->half ? hd : "fp32");
		bind_text(st, 6, op->half ? hd : "fp32");
		bind_text(st, 7, op->label);
		bind_text(st, 8, op->shape);
		sqlite3_bind_int64(st, 9, op->flops);
		sqlite3_bind_int64(st, 10, op->bytes);
		sqlite3_bind_int(st, 11, op->aligned);
		sqlite3_bind_int(st, 12, op->callsite);
		if (finalized) {
			sqlite3_bind_int64(st, 13, (int64_t)calls[i]);
			sqlite3_bind_int64(st, 14, (int64_t)tot[i]);
		} else {
			sqlite3_bind_null(st, 13);
			sqlite3_bind_null(st, 14);
		}
		if (o->no_engine)
			sqlite3_bind_null(st, 15);
		else
			bind_text(st, 15, op_engine(o, op->op, op->half));
		rc = done(g, st, "op_sigs");
	}
	sqlite3_finalize(st);
	st = NULL;
	if (rc == 0)
		rc = prep(g, &st,
		          "INSERT INTO copy_sigs(id, kind, bytes, src_dtype, dst_dtype, label, "
		          "callsite, calls, total_ns) VALUES (?,?,?,?,?,?,?,?,?)");
	for (size_t i = 0; rc == 0 && i < t->ncopies; i++) {
		const tmpl_copy *c = &t->copies[i];
		sqlite3_bind_int64(st, 1, (int64_t)i + 1);
		bind_text(st, 2, amp_copy_kind_name((amp_copy_kind)c->kind));
		sqlite3_bind_int64(st, 3, c->bytes);
		bind_text(st, 4, c->src);
		bind_text(st, 5, c->dst);
		bind_text(st, 6, c->label);
		sqlite3_bind_int(st, 7, c->callsite);
		if (finalized) {
			sqlite3_bind_int64(st, 8, (int64_t)ccalls[i]);
			sqlite3_bind_int64(st, 9, (int64_t)ctot[i]);
		} else {
			sqlite3_bind_null(st, 8);
			sqlite3_bind_null(st, 9);
		}
		rc = done(g, st, "copy_sigs");
	}
	sqlite3_finalize(st);
	return rc;
}

/* One tensor_stats row. */
typedef struct stat_row {
	int64_t step, seq;
	const char *op, *role, *name, *dtype;
	int64_t count, nan, inf, underflow, near_overflow;
	double min, max, absmax;
	int origin, callsite;
} stat_row;

static int put_stat(gen *g, sqlite3_stmt *st, const stat_row *r)
{
	sqlite3_bind_int64(st, 1, r->step);
	sqlite3_bind_int64(st, 2, r->seq);
	bind_text(st, 3, r->op);
	bind_text(st, 4, r->role);
	bind_text(st, 5, r->name);
	bind_text(st, 6, r->dtype);
	sqlite3_bind_int64(st, 7, r->count);
	sqlite3_bind_int64(st, 8, r->nan);
	sqlite3_bind_int64(st, 9, r->inf);
	sqlite3_bind_int64(st, 10, r->underflow);
	sqlite3_bind_int64(st, 11, r->near_overflow);
	sqlite3_bind_double(st, 12, r->min);
	sqlite3_bind_double(st, 13, r->max);
	sqlite3_bind_double(st, 14, r->absmax);
	sqlite3_bind_int(st, 15, r->origin);
	sqlite3_bind_int(st, 16, r->callsite);
	return done(g, st, "tensor_stats");
}

static int put_advice(gen *g, sqlite3_stmt *st, const char *rule, const char *severity,
                      const char *msg, const char *evidence, const char *op, int step, int callsite)
{
	sqlite3_clear_bindings(st);
	bind_text(st, 1, rule);
	bind_text(st, 2, severity);
	bind_text(st, 3, msg);
	bind_text(st, 4, evidence);
	bind_text(st, 5, op);
	if (step >= 0)
		sqlite3_bind_int(st, 6, step);
	if (callsite > 0)
		sqlite3_bind_int(st, 7, callsite);
	return done(g, st, "advice");
}

/* The advice rows finalize would write, in order of importance. */
static int write_advice(gen *g, const genprof_opts *o, const tmpl *t, double fp16, double cps,
                        int overflows, double min_scale, double max_scale)
{
	sqlite3_stmt *st = NULL;
	char msg[512], ev[512];
	int rc = prep(g, &st,
	              "INSERT INTO advice(rule, severity, message, evidence, op, step, "
	              "callsite) VALUES (?,?,?,?,?,?,?)");
	if (rc == 0 && overflows) {
		int first = -1;
		for (int s = 0; s < o->steps && first < 0; s++)
			if (is_overflow_step(o, s))
				first = s;
		const tmpl_op *org = &t->ops[t->origin];
		const char *name = amp_op_name((amp_op_type)org->op);
		snprintf(msg, sizeof msg,
		         "%s overflowed in FP16 at step %d: put %s on the black list "
		         "(custom_black_list = %s)",
		         name, first, name, name);
		snprintf(ev, sizeof ev, "origin %s at %s:%d\n%d overflow steps", org->label,
		         o->origin_file, o->origin_line, overflows);
		rc = put_advice(g, st, "sensitive_op_overflow", "error", msg, ev, name, first,
		                org->callsite);
	}
	if (rc == 0 && fp16 * 100 < o->fp16_threshold) {
		snprintf(msg, sizeof msg,
		         "FP16 share %.1f %% is below %.9g %%: MatMul and Linear run in "
		         "FP32 in attn.out and fc2; use allow_mix_precision",
		         fp16 * 100, o->fp16_threshold);
		rc = put_advice(g, st, "low_fp16_share", "warning", msg, NULL, "Linear", -1, 0);
	}
	if (rc == 0 && cps * 100 > o->memcpy_threshold) {
		snprintf(msg, sizeof msg,
		         "copies take %.1f %% of the step time (over %.9g %%): "
		         "master-weight refreshes and casts before fc1 dominate",
		         cps * 100, o->memcpy_threshold);
		rc = put_advice(g, st, "copy_share", "warning", msg, NULL, NULL, -1, 0);
	}
	if (rc == 0 && (min_scale < 8 || max_scale > 1024)) {
		snprintf(msg, sizeof msg, "loss scale ranged %.9g..%.9g, outside [8, 1024]",
		         min_scale, max_scale);
		rc = put_advice(g, st, "loss_scale_unusual", "info", msg, NULL, NULL, -1, 0);
	}
	if (rc == 0)
		rc = put_advice(
		    g, st, "gemm_unaligned", "info",
		    "Linear 'head' (64,10,128) is not a multiple of 8: pad the classes to 16 "
		    "for the fast path",
		    NULL, "Linear", -1, CS_HEAD + 1);
	sqlite3_finalize(st);
	return rc;
}

int genprof_write(const genprof_opts *o, uint64_t *ops_written, char *err, size_t errlen)
{
	gen g = {NULL, err, errlen, o->path};
	tmpl t = {0};
	sqlite3_stmt *st_op = NULL, *st_cp = NULL, *st_step = NULL, *st_ls = NULL, *st_mem = NULL,
	             *st_stat = NULL;
	uint64_t *calls = NULL, *tot = NULL, *ccalls = NULL, *ctot = NULL;
	uint64_t rng = o->seed ? o->seed : 1;
	int rc = -1;
	uint64_t nrows = 0;

	if (o->steps < 1 || o->ops < 1) {
		snprintf(err, errlen, "steps and ops must be positive");
		return -1;
	}
	if (amp_profile_create(o->path, o->force, &g.db, err, errlen) != AMP_PROFILE_OK)
		return -1;
	if (exec(&g, "PRAGMA journal_mode = OFF; BEGIN") != 0)
		goto out;
	if (meta(&g, "command", "%s", o->command) || meta(&g, "argv", "%s", o->command) ||
	    meta(&g, "cwd", "/home/ada/project/examples") || meta(&g, "pid", "4242") ||
	    meta(&g, "host", "gen") || meta(&g, "cpu", "synthetic CPU @ 3.0GHz") ||
	    meta(&g, "start_time", "2024-05-01T12:00:00Z") || meta(&g, "start_mono_ns", "0") ||
	    meta(&g, "clock", "monotonic") || meta(&g, "ampprof_version", "0.1.0") ||
	    meta(&g, "generator", GEN_VERSION) ||
	    meta(&g, "options.fp16_threshold", "%.9g", o->fp16_threshold) ||
	    meta(&g, "options.memcpy_threshold", "%.9g", o->memcpy_threshold) ||
	    meta(&g, "options.steps", "all") ||
	    meta(&g, "precision_mode", "%s",
	         o->precision_mode ? o->precision_mode
	         : o->overflow_steps ? "force_fp16" : "allow_mix_precision") ||
	    meta(&g, "cpu_half_features", "%s", o->cpu_features) ||
	    meta(&g, "cpu_vendor", "%s", o->cpu_vendor) ||
	    meta(&g, "loss_scale", "dynamic") || meta(&g, "loss_scale_init", "128"))
		goto out;
	if (o->empty) {
		if (meta(&g, "end", "exited") || meta(&g, "exit_status", "0") ||
		    meta(&g, "complete", "1") || meta(&g, "events", "0") ||
		    meta(&g, "wall_ns", "0"))
			goto out;
		goto finish;
	}

	size_t per_step = (size_t)(o->ops / (uint64_t)o->steps);
	if (per_step < 2 * BLOCK_FWD + 5)
		per_step = 2 * BLOCK_FWD + 5;
	if (build_template(o, per_step, &t, err, errlen) != 0)
		goto out;
	calls = calloc(t.nops, sizeof *calls);
	tot = calloc(t.nops, sizeof *tot);
	ccalls = calloc(t.ncopies, sizeof *ccalls);
	ctot = calloc(t.ncopies, sizeof *ctot);
	if (!calls || !tot || !ccalls || !ctot) {
		snprintf(err, errlen, "out of memory");
		goto out;
	}
	if (write_callsites(&g, &t, o->source_dir) != 0 ||
	    prep(&g, &st_op,
	         "INSERT INTO op_events(id, step, seq, sig, start_ns, dur_ns, thread) "
	         "VALUES (?,?,?,?,?,?,0)") ||
	    prep(&g, &st_cp,
	         "INSERT INTO copy_events(id, step, sig, start_ns, dur_ns, thread) "
	         "VALUES (?,?,?,?,?,0)") ||
	    prep(&g, &st_step,
	         "INSERT INTO steps(step, start_ns, dur_ns, loss, scale, overflow, "
	         "skipped, samples, detail, thread) VALUES (?,?,?,?,?,?,?,64,1,0)") ||
	    prep(&g, &st_ls,
	         "INSERT INTO loss_scale(step, t_ns, old_scale, new_scale, reason) "
	         "VALUES (?,?,?,?,?)") ||
	    prep(&g, &st_mem,
	         "INSERT INTO memory(step, t_ns, master_weights, working_copies, "
	         "activations, grads, optimizer_state, total, peak) "
	         "VALUES (?,?,?,?,?,?,?,?,?)") ||
	    prep(&g, &st_stat,
	         "INSERT INTO tensor_stats(step, seq, op, role, name, dtype, count, "
	         "nan, inf, underflow, near_overflow, min, max, absmax, origin, "
	         "exp_hist, callsite) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,NULL,?)"))
		goto out;

	double copy_w = 0;
	for (size_t i = 0; i < t.ncopies; i++)
		copy_w += t.copies[i].weight;
	double c = o->copy_share < 0 ? 0 : o->copy_share > 0.9 ? 0.9 : o->copy_share;
	double scale = 128, min_scale = 1e30, max_scale = 0;
	int clean = 0, overflows = 0;
	uint64_t op_id = 0, cp_id = 0, seq = 0;
	uint64_t t_now = 5000000; /* startup before step 0 */
	uint64_t step_ns_total = 0, copy_ns_total = 0, op_ns_total = 0, op16_ns = 0, native_ns = 0;
	double flops_all = 0, flops16 = 0;
	int64_t peak = 0;
	int last_steps = o->steps;
	for (int s = 0; s < last_steps; s++) {
		int dying = o->crashed && s == last_steps - 1;
		int ovf = is_overflow_step(o, s);
		uint64_t start = t_now, t_op = t_now, op_ns = 0;
		/* ops first (their times decide the copies), copies interleaved at block starts */
		size_t nops = dying ? t.nops / 2 : t.nops;
		uint64_t *durs = malloc(nops * sizeof *durs);
		if (!durs) {
			snprintf(err, errlen, "out of memory");
			goto out;
		}
		for (size_t i = 0; i < nops; i++) {
			double d = t.ops[i].base_ns * (0.9 + 0.2 * rng_unit(&rng));
			durs[i] = d < 1 ? 1 : (uint64_t)d;
			op_ns += durs[i];
		}
		double cp_target = c * (double)op_ns / (1 - OTHER_FRAC - c);
		size_t ncp = dying ? 1 : t.ncopies;
		uint64_t cp_ns = 0;
		for (size_t j = 0; j < ncp; j++) {
			double d =
			    cp_target * t.copies[j].weight / copy_w * (0.95 + 0.1 * rng_unit(&rng));
			uint64_t du = d < 1 ? 1 : (uint64_t)d;
			sqlite3_bind_int64(st_cp, 1, (int64_t)++cp_id);
			sqlite3_bind_int64(st_cp, 2, s);
			sqlite3_bind_int64(st_cp, 3, (int64_t)j + 1);
			sqlite3_bind_int64(st_cp, 4, (int64_t)t_op);
			sqlite3_bind_int64(st_cp, 5, (int64_t)du);
			if (done(&g, st_cp, "copy_events") != 0) {
				free(durs);
				goto out;
			}
			t_op += du;
			cp_ns += du;
			ccalls[j]++;
			ctot[j] += du;
		}
		for (size_t i = 0; i < nops; i++) {
			sqlite3_bind_int64(st_op, 1, (int64_t)++op_id);
			sqlite3_bind_int64(st_op, 2, s);
			sqlite3_bind_int64(st_op, 3, (int64_t)(seq + i));
			sqlite3_bind_int64(st_op, 4, (int64_t)i + 1);
			sqlite3_bind_int64(st_op, 5, (int64_t)t_op);
			sqlite3_bind_int64(st_op, 6, (int64_t)durs[i]);
			if (done(&g, st_op, "op_events") != 0) {
				free(durs);
				goto out;
			}
			t_op += durs[i];
			calls[i]++;
			tot[i] += durs[i];
			if (t.ops[i].half) {
				op16_ns += durs[i];
				flops16 += (double)t.ops[i].flops;
			}
			if (amp_engine_is_half((amp_engine)amp_engine_from_name(
			        op_engine(o, t.ops[i].op, t.ops[i].half))))
				native_ns += durs[i];
			flops_all += (double)t.ops[i].flops;
		}
		free(durs);
		nrows += nops;
		uint64_t dur = (uint64_t)((double)(op_ns + cp_ns) / (1 - OTHER_FRAC));
		op_ns_total += op_ns;
		if (!dying) {
			copy_ns_total += cp_ns;
			step_ns_total += dur;
		}
		double loss = 2.3 * exp(-3.0 * s / o->steps) + 0.25 + 0.05 * rng_unit(&rng);
		sqlite3_bind_int64(st_step, 1, s);
		sqlite3_bind_int64(st_step, 2, (int64_t)start);
		if (dying)
			sqlite3_bind_null(st_step, 3);
		else
			sqlite3_bind_int64(st_step, 3, (int64_t)dur);
		if (dying)
			sqlite3_bind_null(st_step, 4);
		else
			sqlite3_bind_double(st_step, 4, loss);
		sqlite3_bind_double(st_step, 5, scale);
		sqlite3_bind_int(st_step, 6, ovf);
		sqlite3_bind_int(st_step, 7, ovf);
		if (done(&g, st_step, "steps") != 0)
			goto out;
		min_scale = scale < min_scale ? scale : min_scale;
		max_scale = scale > max_scale ? scale : max_scale;
		if (dying) {
			t_now = t_op;
			break;
		}
		/* the scaler's decision at the end of the step */
		double old = scale;
		const char *reason = "hold";
		if (ovf) {
			scale = scale * 0.5 < 1 ? 1 : scale * 0.5;
			reason = "overflow";
			clean = 0;
			overflows++;
		} else if (++clean >= o->growth_interval) {
			scale = scale * 2 > 16777216.0 ? 16777216.0 : scale * 2;
			reason = "growth";
			clean = 0;
		}
		sqlite3_bind_int64(st_ls, 1, s);
		sqlite3_bind_int64(st_ls, 2, (int64_t)(start + dur));
		sqlite3_bind_double(st_ls, 3, old);
		sqlite3_bind_double(st_ls, 4, scale);
		bind_text(st_ls, 5, reason);
		if (done(&g, st_ls, "loss_scale") != 0)
			goto out;
		int64_t blocks = (int64_t)t.ncopies / 2;
		int64_t master = blocks * 2 * 128 * 512 * 4, working = master / 2,
		        acts = blocks * 3000000;
		int64_t grads = master, optst = master * 2,
		        total = master + working + acts + grads + optst;
		peak = total > peak ? total : peak;
		sqlite3_bind_int64(st_mem, 1, s);
		sqlite3_bind_int64(st_mem, 2, (int64_t)(start + dur));
		sqlite3_bind_int64(st_mem, 3, master);
		sqlite3_bind_int64(st_mem, 4, working);
		sqlite3_bind_int64(st_mem, 5, acts);
		sqlite3_bind_int64(st_mem, 6, grads);
		sqlite3_bind_int64(st_mem, 7, optst);
		sqlite3_bind_int64(st_mem, 8, total);
		sqlite3_bind_int64(st_mem, 9, peak);
		if (done(&g, st_mem, "memory") != 0)
			goto out;
		/* tensor statistics: the overflow's origin and what it poisoned; headroom samples
		 */
		if (ovf) {
			size_t oi = t.origin;
			const tmpl_op *org = &t.ops[oi];
			stat_row in = {s,
			               (int64_t)(seq + oi),
			               amp_op_name((amp_op_type)org->op),
			               "input",
			               org->label,
			               o->half_dtype,
			               4096,
			               0,
			               0,
			               12,
			               310,
			               -1.1e4,
			               11.2,
			               1.1e4,
			               0,
			               org->callsite};
			stat_row out = in;
			out.role = "output", out.inf = 37, out.near_overflow = 180, out.min = 0;
			out.max = 65504, out.absmax = 65504, out.origin = 1, out.underflow = 2900;
			if (put_stat(&g, st_stat, &in) || put_stat(&g, st_stat, &out))
				goto out;
			for (size_t k = oi + 1; k < oi + 3 && k < t.nops; k++) {
				const tmpl_op *nx = &t.ops[k];
				stat_row r = {s,
				              (int64_t)(seq + k),
				              amp_op_name((amp_op_type)nx->op),
				              "output",
				              nx->label,
				              nx->half ? o->half_dtype : "fp32",
				              4096,
				              4096 / (int64_t)(k - oi + 1),
				              0,
				              0,
				              0,
				              0,
				              0,
				              0,
				              0,
				              nx->callsite};
				if (put_stat(&g, st_stat, &r))
					goto out;
			}
			stat_row gr = {s,
			               (int64_t)(seq + t.nops - 2),
			               "Linear",
			               "grad",
			               "blocks.0.fc1.weight",
			               o->half_dtype,
			               65536,
			               512,
			               64,
			               0,
			               0,
			               -3.0,
			               3.0,
			               3.0,
			               0,
			               CS_BACKWARD + 1};
			if (put_stat(&g, st_stat, &gr))
				goto out;
		}
		if (s % 10 == 0) {
			for (size_t i = 0; i < t.nops; i++) {
				const tmpl_op *op = &t.ops[i];
				if (op->phase != AMP_PHASE_FORWARD || op->op == AMP_OP_RESHAPE)
					continue;
				int64_t cnt = 4096, uf = (int64_t)(rng_next(&rng) % 200);
				int64_t no =
				    op->op == AMP_OP_EXP ? 20 + (int64_t)(rng_next(&rng) % 40) : 0;
				if (op->op == AMP_OP_LAYER_NORM)
					uf += 600;
				stat_row r = {s,
				              (int64_t)(seq + i),
				              amp_op_name((amp_op_type)op->op),
				              "output",
				              op->label,
				              op->half ? o->half_dtype : "fp32",
				              cnt,
				              0,
				              0,
				              uf,
				              no,
				              -8.5,
				              no ? 40000.0 : 9.5,
				              no ? 40000.0 : 9.5,
				              0,
				              op->callsite};
				if (put_stat(&g, st_stat, &r))
					goto out;
			}
		}
		seq += nops;
		t_now = start + dur;
	}
	uint64_t wall = t_now + 3000000;

	/* what finalize writes */
	int finalized = !o->unfinalized;
	if (write_sigs(&g, o, &t, calls, tot, ccalls, ctot, finalized) != 0)
		goto out;
	if (o->crashed &&
	    exec(&g, "INSERT INTO crashes(id, thread, signo, signal, code, addr, t_ns, frames) "
	             "VALUES (1, 0, 11, 'SIGSEGV', 1, 0, 0, "
	             "'mlp_forward examples/model.c:106 (train+0x1234)\n"
	             "main examples/train.c:210 (train+0x2000)')"))
		goto out;
	const char *end = o->unfinalized ? "collecting" : o->crashed ? "crash" : "exited";
	if (meta(&g, "end", "%s", end) || meta(&g, "exit_status", "%d", o->crashed ? 139 : 0) ||
	    (o->crashed && meta(&g, "exit_signal", "SIGSEGV")) ||
	    meta(&g, "complete", "%d", o->crashed || o->unfinalized ? 0 : 1) ||
	    meta(&g, "events", "%" PRIu64, nrows + cp_id) || meta(&g, "dropped_events", "0") ||
	    meta(&g, "wall_ns", "%" PRIu64, wall))
		goto out;
	if (!finalized)
		goto finish;
	if (meta(&g, "finalized_at", "2024-05-01T12:10:00Z") ||
	    exec(&g,
	         "CREATE INDEX op_events_step ON op_events(step);"
	         "CREATE INDEX copy_events_step ON copy_events(step);"
	         "CREATE INDEX steps_step ON steps(step);"
	         "CREATE INDEX tensor_stats_step ON tensor_stats(step);"
	         "INSERT INTO op_summary(op, exec_dtype, calls, total_ns, mean_ns, flops, share, "
	         "native_ns) SELECT op, exec_dtype, sum(calls), sum(total_ns), "
	         "CAST(sum(total_ns) AS REAL) / sum(calls), sum(flops * calls), "
	         "CAST(sum(total_ns) AS REAL) / (SELECT sum(total_ns) FROM op_sigs), "
	         "CASE WHEN count(engine) = 0 THEN NULL ELSE sum(CASE WHEN engine IN "
	         "('amx-bf16', 'avx512-bf16', 'avx512-fp16') THEN total_ns ELSE 0 END) END "
	         "FROM op_sigs GROUP BY op, exec_dtype ORDER BY sum(total_ns) DESC;"))
		goto out;
	{
		sqlite3_stmt *st = NULL;
		if (prep(&g, &st,
		         "INSERT INTO run_summary(fp16_share, fp16_flop_share, copy_share, steps, "
		         "overflow_steps, skipped_steps, min_scale, max_scale, complete, wall_ns, "
		         "step_ns, op_count, copy_count, op_ns, copy_ns, peak_bytes, "
		         "native_half_share, half_types) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)"))
			goto out;
		double fp16 = op_ns_total ? (double)op16_ns / (double)op_ns_total : 0;
		double fl16 = flops_all > 0 ? flops16 / flops_all : 0;
		double cps = step_ns_total ? (double)copy_ns_total / (double)step_ns_total : 0;
		sqlite3_bind_double(st, 1, fp16);
		sqlite3_bind_double(st, 2, fl16);
		sqlite3_bind_double(st, 3, cps);
		sqlite3_bind_int(st, 4, o->steps);
		sqlite3_bind_int(st, 5, overflows);
		sqlite3_bind_int(st, 6, overflows);
		sqlite3_bind_double(st, 7, min_scale);
		sqlite3_bind_double(st, 8, max_scale);
		sqlite3_bind_int(st, 9, o->crashed ? 0 : 1);
		sqlite3_bind_int64(st, 10, (int64_t)wall);
		sqlite3_bind_int64(st, 11, (int64_t)step_ns_total);
		sqlite3_bind_int64(st, 12, (int64_t)nrows);
		sqlite3_bind_int64(st, 13, (int64_t)cp_id);
		sqlite3_bind_int64(st, 14, (int64_t)op_ns_total);
		sqlite3_bind_int64(st, 15, (int64_t)copy_ns_total);
		sqlite3_bind_int64(st, 16, peak);
		if (o->no_engine)
			sqlite3_bind_null(st, 17);
		else
			sqlite3_bind_double(st, 17, op_ns_total ? (double)native_ns / (double)op_ns_total
			                                        : 0);
		if (op16_ns)
			bind_text(st, 18, o->half_dtype);
		else
			sqlite3_bind_null(st, 18);
		int r = done(&g, st, "run_summary");
		sqlite3_finalize(st);
		if (r)
			goto out;
		if (write_advice(&g, o, &t, fp16, cps, overflows, min_scale, max_scale) != 0)
			goto out;
	}
finish:
	if (exec(&g, "COMMIT") != 0)
		goto out;
	if (o->newer_schema) {
		char sql[64];
		snprintf(sql, sizeof sql, "PRAGMA user_version = %d", AMP_PROFILE_VERSION + 1);
		if (exec(&g, sql) != 0)
			goto out;
	}
	if (ops_written)
		*ops_written = nrows;
	rc = 0;
out:
	sqlite3_finalize(st_op);
	sqlite3_finalize(st_cp);
	sqlite3_finalize(st_step);
	sqlite3_finalize(st_ls);
	sqlite3_finalize(st_mem);
	sqlite3_finalize(st_stat);
	free(calls);
	free(tot);
	free(ccalls);
	free(ctot);
	free(t.ops);
	free(t.copies);
	amp_profile_close(g.db);
	return rc;
}

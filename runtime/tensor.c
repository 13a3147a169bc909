/* tensor.c — memory (step arena, persistent blocks, accounting by category), tensors,
 * parameters, and the step lifecycle.
 *
 * Step-scoped tensors are bump-allocated from 64-byte aligned arena chunks that are kept and
 * reused across steps, so a steady-state training step performs no malloc at all.
 */
#include "internal.h"
#include "alloc.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ARENA_CHUNK (8u << 20)
#define ALIGN 64

struct amp_arena_chunk {
	amp_arena_chunk *next;
	size_t size, used;
	unsigned char *base; /* aligned start of the usable area */
};

static size_t align_up(size_t n)
{
	return (n + ALIGN - 1) & ~(size_t)(ALIGN - 1);
}

static amp_arena_chunk *chunk_new(size_t size)
{
	void *mem = amp_mem_aligned(ALIGN, size + ALIGN);
	if (!mem)
		return NULL;
	amp_arena_chunk *c = mem;
	c->next = NULL;
	c->size = size;
	c->used = 0;
	c->base = (unsigned char *)mem + ALIGN;
	return c;
}

/* A block memory_optimize gave back within the step (amp_tensor_release), kept in the block
 * itself until an allocation reuses it (first fit; the rest of a larger block stays free). */
struct amp_free_block {
	struct amp_free_block *next;
	size_t size;
};

static void *free_block_take(amp_ctx *ctx, size_t bytes)
{
	for (struct amp_free_block **pp = &ctx->free_blocks; *pp; pp = &(*pp)->next) {
		struct amp_free_block *b = *pp;
		if (b->size < bytes)
			continue;
		if (b->size - bytes >= 2 * ALIGN) {
			struct amp_free_block *rest = (void *)((unsigned char *)b + bytes);
			rest->next = b->next;
			rest->size = b->size - bytes;
			*pp = rest;
		} else {
			*pp = b->next;
		}
		return b;
	}
	return NULL;
}

void *amp_arena_alloc_raw(amp_ctx *ctx, size_t bytes)
{
	amp_arena *a = &ctx->arena;
	bytes = align_up(bytes ? bytes : 1);
	if (ctx->free_blocks) {
		void *p = free_block_take(ctx, bytes);
		if (p) {
#ifdef __SANITIZE_ADDRESS__
			memset(p, 0xff, bytes);
#endif
			return p;
		}
	}
	amp_arena_chunk *c = a->head;
	if (!c || c->size - c->used < bytes) {
		/* Reuse a spare chunk that fits, else make one. */
		amp_arena_chunk **pp = &a->spare, *found = NULL;
		for (; *pp; pp = &(*pp)->next)
			if ((*pp)->size >= bytes) {
				found = *pp;
				*pp = found->next;
				break;
			}
		if (!found)
			found = chunk_new(bytes > ARENA_CHUNK ? bytes : ARENA_CHUNK);
		if (!found)
			return NULL;
		found->used = 0;
		found->next = a->head;
		a->head = found;
		c = found;
	}
	void *p = c->base + c->used;
	c->used += bytes;
	a->used_total += bytes;
#ifdef __SANITIZE_ADDRESS__
	memset(p, 0xff, bytes); /* sanitizer builds: a read before the write gives NaN, and fails */
#endif
	return p;
}

void *amp_arena_alloc(amp_ctx *ctx, size_t bytes)
{
	void *p = amp_arena_alloc_raw(ctx, bytes);
	if (p)
		memset(p, 0, align_up(bytes ? bytes : 1));
	return p;
}

static void arena_reset(amp_arena *a)
{
	while (a->head) {
		amp_arena_chunk *c = a->head;
		a->head = c->next;
		c->next = a->spare;
		a->spare = c;
	}
	a->used_total = 0;
}

/* Back to an earlier position: chunks begun since go to the spare list, the mark's chunk
 * keeps what it held then (mark NULL: the whole arena). */
static void arena_rewind(amp_arena *a, amp_arena_chunk *mark, size_t used, size_t total)
{
	while (a->head && a->head != mark) {
		amp_arena_chunk *c = a->head;
		a->head = c->next;
		c->next = a->spare;
		a->spare = c;
	}
	if (a->head)
		a->head->used = used;
	a->used_total = total;
}

static void arena_release(amp_arena *a)
{
	arena_reset(a);
	while (a->spare) {
		amp_arena_chunk *c = a->spare;
		a->spare = c->next;
		amp_mem_free(c);
	}
}

const char *amp_arena_strdup(amp_ctx *ctx, const char *s)
{
	if (!s)
		return NULL;
	size_t n = strlen(s) + 1;
	char *p = amp_arena_alloc(ctx, n);
	if (p)
		memcpy(p, s, n);
	return p;
}

void *amp_persist_alloc(amp_ctx *ctx, size_t bytes)
{
	if (ctx->n_persist == ctx->cap_persist) {
		size_t cap = ctx->cap_persist ? ctx->cap_persist * 2 : 64;
		void **p = amp_mem_realloc(ctx->persist, cap * sizeof *p);
		if (!p)
			return NULL;
		ctx->persist = p;
		ctx->cap_persist = cap;
	}
	void *mem = amp_mem_aligned(ALIGN, align_up(bytes ? bytes : 1));
	if (!mem)
		return NULL;
	memset(mem, 0, bytes);
	ctx->persist[ctx->n_persist++] = mem;
	return mem;
}

static uint64_t mem_total(const uint64_t *mem)
{
	uint64_t total = 0;
	for (int i = 0; i < AMP_MEM_NCAT; i++)
		total += mem[i];
	return total;
}

/* The peaks of the first ledger, after it grew. */
static void mem_peaks(amp_ctx *ctx)
{
	uint64_t total = mem_total(ctx->mem);
	if (total > ctx->mem_peak)
		ctx->mem_peak = total;
	uint64_t pa = ctx->mem[AMP_MEM_MASTER] + ctx->mem[AMP_MEM_WORKING] +
	              ctx->mem[AMP_MEM_ACTIVATIONS];
	if (pa > ctx->mem_peak_param_act)
		ctx->mem_peak_param_act = pa;
}

/* Both ledgers: what is, and what would be without memory_optimize. */
void amp_mem_account(amp_ctx *ctx, amp_mem_category cat, int64_t delta)
{
	ctx->mem[cat] = (uint64_t)((int64_t)ctx->mem[cat] + delta);
	ctx->mem_unopt[cat] = (uint64_t)((int64_t)ctx->mem_unopt[cat] + delta);
	mem_peaks(ctx);
	uint64_t total = mem_total(ctx->mem_unopt);
	if (total > ctx->mem_peak_unopt)
		ctx->mem_peak_unopt = total;
}

void amp_mem_unopt_only(amp_ctx *ctx, amp_mem_category cat, uint64_t bytes)
{
	ctx->mem_unopt[cat] += bytes;
	ctx->step_mem_unopt[cat] += bytes;
	uint64_t total = mem_total(ctx->mem_unopt);
	if (total > ctx->mem_peak_unopt)
		ctx->mem_peak_unopt = total;
}

int amp_mem_check(amp_ctx *ctx, uint64_t bytes)
{
	uint64_t limit = ctx->cfg.memory_limit, used = mem_total(ctx->mem);
	if (!limit || (used <= limit && bytes <= limit - used))
		return AMP_OK;
	char what[160];
	const char *lb = ctx->cur_label ? ctx->cur_label : "-";
	if (ctx->cur_what)
		snprintf(what, sizeof what, ctx->cur_label ? "%s '%s'" : "%s", ctx->cur_what, lb);
	else if (ctx->cur_op != AMP_OP_COUNT || ctx->in_backward)
		snprintf(what, sizeof what, "%s%s '%s'", ctx->in_backward ? "backward of " : "",
		         ctx->cur_op == AMP_OP_COUNT ? "Cast" : amp_op_name(ctx->cur_op), lb);
	else
		snprintf(what, sizeof what, "a tensor outside any op");
	amp_fail(ctx, AMP_ELIMIT,
	                "memory_limit: %s needs %llu bytes more in step %lld, with %llu of the "
	                "limit of %llu bytes in use",
	                what, (unsigned long long)bytes, (long long)ctx->step,
	                (unsigned long long)used, (unsigned long long)limit);
	ctx->limit_hit = 1;
	return AMP_ELIMIT;
}

void *amp_arena_alloc_counted(amp_ctx *ctx, size_t bytes, amp_mem_category cat)
{
	if (amp_mem_check(ctx, bytes))
		return NULL;
	void *p = amp_arena_alloc_raw(ctx, bytes);
	if (!p) {
		amp_fail(ctx, AMP_ENOMEM, "out of memory allocating %zu bytes", bytes);
		return NULL;
	}
	amp_mem_account(ctx, cat, (int64_t)bytes);
	ctx->step_mem[cat] += bytes;
	ctx->step_mem_unopt[cat] += bytes;
	return p;
}

void amp_tensor_release(amp_ctx *ctx, amp_tensor *t)
{
	if (!t || !t->owns_data || t->released)
		return;
	size_t bytes = (size_t)t->numel * amp_dtype_size(t->dtype);
	struct amp_free_block *b = t->data;
	b->size = align_up(bytes ? bytes : 1);
	b->next = ctx->free_blocks;
	ctx->free_blocks = b;
	ctx->mem[t->mem_cat] -= bytes;
	ctx->step_mem[t->mem_cat] -= bytes;
	t->released = 1;
}

int amp_tensor_reacquire(amp_ctx *ctx, amp_tensor *t)
{
	size_t bytes = (size_t)t->numel * amp_dtype_size(t->dtype);
	int rc = amp_mem_check(ctx, bytes);
	if (rc)
		return rc;
	void *p = amp_arena_alloc_raw(ctx, bytes);
	if (!p)
		return amp_fail(ctx, AMP_ENOMEM, "out of memory allocating %zu bytes", bytes);
	t->data = p;
	t->released = 0;
	ctx->mem[t->mem_cat] += bytes;
	ctx->step_mem[t->mem_cat] += bytes;
	mem_peaks(ctx);
	return AMP_OK;
}

/* ---- shapes ------------------------------------------------------------------------------ */

int64_t amp_shape_numel(amp_shape s)
{
	int64_t n = 1;
	for (int i = 0; i < s.ndim; i++)
		n *= s.d[i];
	return n;
}

int amp_shape_eq(amp_shape a, amp_shape b)
{
	if (a.ndim != b.ndim)
		return 0;
	for (int i = 0; i < a.ndim; i++)
		if (a.d[i] != b.d[i])
			return 0;
	return 1;
}

const char *amp_shape_str(amp_shape s, char *buf, size_t len)
{
	size_t off = (size_t)snprintf(buf, len, "(");
	/* Invalid shapes are printed too (in their error message): stay inside d[]. */
	int nd = s.ndim > AMP_MAX_DIMS ? AMP_MAX_DIMS : s.ndim;
	for (int i = 0; i < nd && off < len; i++)
		off += (size_t)snprintf(buf + off, len - off, i ? ",%lld" : "%lld", (long long)s.d[i]);
	if (off < len)
		snprintf(buf + off, len - off, ")");
	return buf;
}

int amp_shape_valid(amp_shape s)
{
	if (s.ndim < 0 || s.ndim > AMP_MAX_DIMS)
		return 0;
	/* Extents and their product bounded so numel * 4 cannot overflow. */
	int64_t n = 1;
	for (int i = 0; i < s.ndim; i++) {
		if (s.d[i] <= 0 || s.d[i] > ((int64_t)1 << 40) / n)
			return 0;
		n *= s.d[i];
	}
	return 1;
}

/* Code for a tensor allocation that returned NULL (the message is already set). */
static int alloc_error(const amp_ctx *ctx, amp_shape s)
{
	return amp_shape_valid(s) ? amp_oom(ctx) : AMP_ESHAPE;
}

/* ---- tensors ----------------------------------------------------------------------------- */

/* A tensor in the step arena (persistent: freed with the context), zeroed unless raw. */
static amp_tensor *tensor_make(amp_ctx *ctx, amp_dtype dt, amp_shape shape, amp_mem_category cat,
                               int persistent, int raw)
{
	char sb[64];
	if (!amp_shape_valid(shape)) {
		amp_fail(ctx, AMP_ESHAPE, "invalid tensor shape %s", amp_shape_str(shape, sb, sizeof sb));
		return NULL;
	}
	int64_t n = amp_shape_numel(shape);
	size_t bytes = (size_t)n * amp_dtype_size(dt);
	if (amp_mem_check(ctx, bytes))
		return NULL;
	amp_tensor *t;
	void *data;
	if (persistent) {
		t = amp_persist_alloc(ctx, sizeof *t);
		data = t ? amp_persist_alloc(ctx, bytes) : NULL;
	} else {
		t = amp_arena_alloc(ctx, sizeof *t);
		data = !t ? NULL : raw ? amp_arena_alloc_raw(ctx, bytes) : amp_arena_alloc(ctx, bytes);
	}
	if (!t || !data) {
		amp_fail(ctx, AMP_ENOMEM, "out of memory allocating %zu bytes for tensor %s", bytes,
		         amp_shape_str(shape, sb, sizeof sb));
		return NULL;
	}
	t->owner = ctx;
	t->dtype = dt;
	t->shape = shape;
	for (int i = shape.ndim; i < AMP_MAX_DIMS; i++)
		t->shape.d[i] = 0;
	t->numel = n;
	t->data = data;
	t->persistent = persistent;
	t->owns_data = !persistent;
	t->mem_cat = (uint8_t)cat;
	t->id = ctx->next_tensor_id++;
	amp_mem_account(ctx, cat, (int64_t)bytes);
	if (!persistent) {
		ctx->step_mem[cat] += bytes;
		ctx->step_mem_unopt[cat] += bytes;
	}
	return t;
}

amp_tensor *amp_alloc(amp_ctx *ctx, amp_dtype dt, amp_shape shape, amp_mem_category cat)
{
	return tensor_make(ctx, dt, shape, cat, 0, 0);
}

amp_tensor *amp_alloc_raw(amp_ctx *ctx, amp_dtype dt, amp_shape shape, amp_mem_category cat)
{
	return tensor_make(ctx, dt, shape, cat, 0, 1);
}

amp_tensor *amp_alloc_persistent(amp_ctx *ctx, amp_dtype dt, amp_shape shape,
                                 amp_mem_category cat)
{
	return tensor_make(ctx, dt, shape, cat, 1, 0);
}

amp_tensor *amp_alias(amp_ctx *ctx, amp_tensor *src, amp_shape shape)
{
	amp_tensor *t = amp_arena_alloc(ctx, sizeof *t);
	if (!t) {
		amp_fail(ctx, AMP_ENOMEM, "out of memory");
		return NULL;
	}
	*t = *src;
	t->shape = shape;
	t->grad = NULL;
	t->node = NULL;
	t->param = NULL;
	t->requires_grad = 0; /* amp_op_end decides, from the op's inputs */
	t->persistent = 0;
	t->owns_data = 0;     /* src's storage: released with src, never through the alias */
	t->id = ctx->next_tensor_id++;
	return t;
}

/* What an allocation outside an op is, for memory_limit's message. */
static void mem_site(amp_ctx *ctx, const char *what, const char *label)
{
	ctx->cur_op = AMP_OP_COUNT;
	ctx->cur_what = what;
	ctx->cur_label = label;
}

static int need_step(amp_ctx *ctx, const char *what)
{
	if (!ctx)
		return AMP_EINVAL;
	if (!ctx->in_step)
		return amp_fail(ctx, AMP_ESTATE, "%s: no step begun (call amp_step_begin first)", what);
	if (ctx->limit_hit)
		return amp_fail(ctx, AMP_ELIMIT, "%s: step %lld was refused by memory_limit", what,
		                (long long)ctx->step);
	mem_site(ctx, what, NULL);
	return AMP_OK;
}

int amp_tensor_new(amp_ctx *ctx, amp_dtype dt, amp_shape shape, amp_tensor **out)
{
	int rc = need_step(ctx, "amp_tensor_new");
	if (rc)
		return rc;
	if (!out || !amp_dtype_valid((int)dt))
		return amp_fail(ctx, AMP_EINVAL, "amp_tensor_new: %s",
		                out ? "unknown dtype" : "NULL out");
	*out = amp_alloc(ctx, dt, shape, AMP_MEM_ACTIVATIONS);
	return *out ? AMP_OK : alloc_error(ctx, shape);
}

int amp_tensor_from_f32(amp_ctx *ctx, const float *src, amp_shape shape, amp_dtype dt,
                        amp_tensor **out)
{
	int rc = need_step(ctx, "amp_tensor_from_f32");
	if (rc)
		return rc;
	if (!src || !out)
		return amp_fail(ctx, AMP_EINVAL, "amp_tensor_from_f32: NULL %s",
		                src ? "out" : "src");
	if (!amp_dtype_valid((int)dt) || !amp_dt(dt)->is_float)
		return amp_fail(
		    ctx, AMP_EINVAL,
		    "amp_tensor_from_f32: dtype %d is not a float dtype (AMP_F32, AMP_F16 "
		    "or AMP_BF16; integers: amp_tensor_from_i32)",
		    (int)dt);
	uint64_t t0 = AMP_TRACING() ? amp_trace_clock() : 0;
	amp_tensor *t = amp_alloc(ctx, dt, shape, AMP_MEM_ACTIVATIONS);
	if (!t)
		return alloc_error(ctx, shape);
	amp_store_f32(t, src);
	amp_count_copy(ctx);
	if (AMP_TRACING())
		amp_trace_copy(AMP_COPY_H2D, (uint64_t)t->numel * amp_dtype_size(dt), AMP_F32, dt, t0,
		               ctx->step, "input");
	*out = t;
	return AMP_OK;
}

int amp_tensor_from_i32(amp_ctx *ctx, const int32_t *src, amp_shape shape, amp_tensor **out)
{
	int rc = need_step(ctx, "amp_tensor_from_i32");
	if (rc)
		return rc;
	if (!src || !out)
		return amp_fail(ctx, AMP_EINVAL, "amp_tensor_from_i32: NULL %s",
		                src ? "out" : "src");
	uint64_t t0 = AMP_TRACING() ? amp_trace_clock() : 0;
	amp_tensor *t = amp_alloc(ctx, AMP_I32, shape, AMP_MEM_ACTIVATIONS);
	if (!t)
		return alloc_error(ctx, shape);
	memcpy(t->data, src, (size_t)t->numel * sizeof(int32_t));
	amp_count_copy(ctx);
	if (AMP_TRACING())
		amp_trace_copy(AMP_COPY_H2D, (uint64_t)t->numel * 4, AMP_I32, AMP_I32, t0, ctx->step,
		               "input");
	*out = t;
	return AMP_OK;
}

amp_dtype amp_tensor_dtype(const amp_tensor *t) { return t ? t->dtype : AMP_F32; }
amp_shape amp_tensor_shape(const amp_tensor *t) { return t ? t->shape : (amp_shape){0}; }
int64_t amp_tensor_numel(const amp_tensor *t) { return t ? t->numel : 0; }
void *amp_tensor_data(amp_tensor *t)
{
	if (!t || t->released)
		return NULL;
	if (t->param) /* the caller may write the master: its working copy is remade */
		amp_param_touched(t->param);
	return t->data;
}
amp_tensor *amp_tensor_grad(const amp_tensor *t)
{
	if (!t || t->released || (t->grad && t->grad->released))
		return NULL;
	if (t->param) {
		amp_param_grad_settle(t->param);
		t->param->grad_counted = 0; /* the caller may write it (data parallel sums, users) */
	}
	return t->grad;
}

const char amp_foreign_why[] =
    "it belongs to another context (a tensor or parameter is used only in the context that "
    "made it)";

const char amp_released_why[] =
    "the tensor was released by memory_optimize after the backward that used it (read what "
    "is needed before amp_backward)";

int amp_tensor_read_f32(amp_ctx *ctx, const amp_tensor *t, float *dst)
{
	if (!ctx || !t || !dst)
		return amp_fail(ctx, AMP_EINVAL, "amp_tensor_read_f32: NULL argument");
	if (t->owner != ctx)
		return amp_fail(ctx, AMP_EINVAL, "amp_tensor_read_f32: %s", amp_foreign_why);
	if (t->released)
		return amp_fail(ctx, AMP_ESTATE, "amp_tensor_read_f32: %s", amp_released_why);
	uint64_t t0 = AMP_TRACING() ? amp_trace_clock() : 0;
	if (amp_dt(t->dtype)->is_float) {
		amp_dt(t->dtype)->to_f32(t->data, dst, t->numel);
	} else {
		for (int64_t i = 0; i < t->numel; i++)
			dst[i] = (float)((const int32_t *)t->data)[i];
	}
	amp_count_copy(ctx);
	if (AMP_TRACING())
		amp_trace_copy(AMP_COPY_D2H, (uint64_t)t->numel * amp_dtype_size(t->dtype), t->dtype,
		               AMP_F32, t0, ctx->step, "readback");
	return AMP_OK;
}

double amp_tensor_item(amp_ctx *ctx, const amp_tensor *t)
{
	float v;
	if (!t) {
		amp_fail(ctx, AMP_EINVAL, "amp_tensor_item: no tensor");
		return NAN;
	}
	if (t->numel != 1) {
		char sb[64];
		amp_fail(ctx, AMP_ESHAPE, "amp_tensor_item: tensor of shape %s has %lld elements, not 1",
		         amp_shape_str(t->shape, sb, sizeof sb), (long long)t->numel);
		return NAN;
	}
	if (amp_tensor_read_f32(ctx, t, &v) != AMP_OK)
		return NAN;
	return (double)v;
}

const float *amp_f32_view(amp_ctx *ctx, const amp_tensor *t)
{
	if (t->dtype == AMP_F32)
		return t->data;
	float *buf = amp_arena_alloc_raw(ctx, (size_t)t->numel * sizeof(float));
	if (buf)
		amp_dt(t->dtype)->to_f32(t->data, buf, t->numel);
	return buf;
}

const float *amp_block_read(const amp_tensor *t, int64_t i0, int64_t n, float *buf)
{
	if (t->dtype == AMP_F32)
		return (const float *)t->data + i0;
	amp_dt(t->dtype)->to_f32((const char *)t->data + (size_t)i0 * amp_dt(t->dtype)->size, buf, n);
	return buf;
}

float *amp_block_dst(amp_tensor *t, int64_t i0, float *buf)
{
	return t->dtype == AMP_F32 ? (float *)t->data + i0 : buf;
}

void amp_block_write(amp_tensor *t, int64_t i0, int64_t n, const float *dst)
{
	if (t->dtype != AMP_F32)
		amp_dt(t->dtype)->from_f32(dst, (char *)t->data + (size_t)i0 * amp_dt(t->dtype)->size, n);
}

void amp_store_f32(amp_tensor *t, const float *src)
{
	amp_dt(t->dtype)->from_f32(src, t->data, t->numel);
}

int amp_tensor_nonfinite(const amp_tensor *t)
{
	const amp_dtype_info *di = amp_dt(t->dtype);
	return di->is_float && di->nonfinite(t->data, t->numel) != 0;
}

/* ---- parameters -------------------------------------------------------------------------- */

int amp_param_new(amp_ctx *ctx, const char *label, amp_shape shape, amp_init init, float scale,
                  amp_tensor **out)
{
	if (!ctx || !out)
		return amp_fail(ctx, AMP_EINVAL, "amp_param_new: NULL argument");
	*out = NULL;
	const char *name = label ? label : "param";
	if ((int)init < (int)AMP_INIT_ZEROS || (int)init > (int)AMP_INIT_KAIMING)
		return amp_fail(ctx, AMP_EINVAL, "amp_param_new '%s': unknown init %d", name, (int)init);
	if (init >= AMP_INIT_NORMAL && !isfinite(scale))
		return amp_fail(ctx, AMP_EINVAL, "amp_param_new '%s': scale %g is not finite", name,
		                (double)scale);
	amp_param *p = amp_persist_alloc(ctx, sizeof *p);
	if (!p)
		return amp_fail(ctx, AMP_ENOMEM, "out of memory");
	mem_site(ctx, "parameter", label);
	amp_tensor *t = amp_alloc_persistent(ctx, AMP_F32, shape, AMP_MEM_MASTER);
	ctx->cur_what = NULL;
	if (!t)
		return alloc_error(ctx, shape);
	p->label = amp_persist_alloc(ctx, strlen(name) + 1);
	if (!p->label)
		return amp_fail(ctx, AMP_ENOMEM, "out of memory");
	strcpy(p->label, name);
	p->master = t;
	p->working_step = -1;
	p->f32_step = -1;
	p->own_hi = t->numel;
	t->param = p;
	t->requires_grad = 1;

	float *v = t->data;
	int64_t fan_in = 1;
	for (int i = 1; i < shape.ndim; i++)
		fan_in *= shape.d[i];
	float bound = scale * sqrtf(6.0f / (float)fan_in);
	for (int64_t i = 0; i < t->numel; i++) {
		switch (init) {
		case AMP_INIT_ZEROS: v[i] = 0; break;
		case AMP_INIT_ONES: v[i] = 1; break;
		case AMP_INIT_NORMAL: v[i] = scale * amp_rng_normal(&ctx->rng_state); break;
		case AMP_INIT_UNIFORM:
			v[i] = scale * (2 * amp_rng_uniform(&ctx->rng_state) - 1);
			break;
		case AMP_INIT_KAIMING:
			v[i] = bound * (2 * amp_rng_uniform(&ctx->rng_state) - 1);
			break;
		}
	}
	p->index = ctx->n_params;
	p->next = ctx->params;
	ctx->params = p;
	ctx->n_params++;
	*out = t;
	return AMP_OK;
}

int amp_param_load(amp_ctx *ctx, amp_tensor *param, const float *src)
{
	if (!ctx || !param || !src)
		return amp_fail(ctx, AMP_EINVAL, "amp_param_load: NULL argument");
	if (!param->param)
		return amp_fail(ctx, AMP_EINVAL, "amp_param_load: not a parameter");
	if (param->owner != ctx)
		return amp_fail(ctx, AMP_EINVAL, "amp_param_load: %s", amp_foreign_why);
	memcpy(param->data, src, (size_t)param->numel * sizeof(float));
	amp_param_touched(param->param);
	param->param->master_partial = 0; /* all of it written: whole (not its moments) */
	return AMP_OK;
}

void amp_param_touched(amp_param *p)
{
	p->work_valid = 0;
	p->working_step = -1;
	p->moved = 1;
}

/* ---- steps ------------------------------------------------------------------------------- */

int amp_step_begin(amp_ctx *ctx)
{
	if (!ctx)
		return AMP_EINVAL;
	if (ctx->in_step)
		return amp_fail(ctx, AMP_ESTATE, "amp_step_begin: step %lld is still open",
		                (long long)ctx->step);
	int rc = amp_config_check(ctx); /* keys set through amp_config_set since amp_ctx_new */
	if (rc)
		return rc;
	ctx->step++;
	ctx->in_step = 1;
	ctx->backward_done = 0;
	ctx->optim_done = 0;
	ctx->backward_failed = 0;
	ctx->tape = NULL;
	ctx->samples = 0;
	ctx->step_loss = NAN;
	ctx->step_scale = amp_loss_scale(ctx);
	ctx->step_overflow = 0;
	ctx->step_skipped = 0;
	ctx->step_loss_sum = 0;
	ctx->micro_done = 0;
	ctx->micro_marked = 0;
	ctx->limit_hit = 0;
	ctx->free_blocks = NULL;
	ctx->mark_chunk = NULL; /* the micro-batches start with the step, unless marked later */
	ctx->mark_used = ctx->mark_total = 0;
	memset(ctx->mark_step_mem, 0, sizeof ctx->mark_step_mem);
	memset(ctx->mark_step_mem_unopt, 0, sizeof ctx->mark_step_mem_unopt);
	ctx->mark_tape = NULL;
	if (!ctx->config_traced && AMP_TRACING()) {
		char buf[64];
		ctx->config_traced = 1;
		amp_trace_meta("precision_mode", amp_config_get(ctx, "precision_mode"));
		amp_trace_meta("custom_white_list", ctx->cfg.white_list_text);
		amp_trace_meta("custom_black_list", ctx->cfg.black_list_text);
		amp_trace_meta("loss_scale", amp_config_get(ctx, "loss_scale"));
		snprintf(buf, sizeof buf, "%.9g", ctx->scaler.scale);
		amp_trace_meta("loss_scale_init", buf);
		amp_trace_meta("loss_scale_growth_interval",
		               amp_config_get(ctx, "loss_scale_growth_interval"));
		amp_trace_meta("loss_scale_growth_factor",
		               amp_config_get(ctx, "loss_scale_growth_factor"));
		amp_trace_meta("loss_scale_backoff_factor",
		               amp_config_get(ctx, "loss_scale_backoff_factor"));
		/* exact (17 digits): the floor rule compares the steps' scales with it */
		snprintf(buf, sizeof buf, "%.17g", ctx->cfg.scaler_init.min_scale);
		amp_trace_meta("loss_scale_min", buf);
		snprintf(buf, sizeof buf, "%.17g", ctx->cfg.scaler_init.max_scale);
		amp_trace_meta("loss_scale_max", buf);
		/* as configured (auto, or the path forced), and the widest path that ran */
		amp_trace_meta("kernels", amp_kernels_selection());
		amp_trace_meta("kernels_top", amp_isa_name(amp_kernels_isa()));
		amp_trace_meta("seed", amp_config_get(ctx, "seed"));
		amp_trace_meta("num_threads", amp_config_get(ctx, "num_threads"));
		amp_trace_meta("gradient_clipping", amp_config_get(ctx, "gradient_clipping"));
		amp_trace_meta("gradient_accumulation_steps",
		               amp_config_get(ctx, "gradient_accumulation_steps"));
		amp_trace_meta("memory_optimize", amp_config_get(ctx, "memory_optimize"));
		amp_trace_meta("memory_limit", amp_config_get(ctx, "memory_limit"));
		amp_config_trace_sources(ctx);
		amp_trace_scale(ctx->trace_id, 0, ctx->scaler.scale, ctx->scaler.scale,
		                ctx->scaler.dynamic ? AMP_SCALE_INIT : AMP_SCALE_STATIC);
	}
	ctx->step_t0 = amp_trace_clock();
	if (AMP_TRACING())
		amp_trace_step_begin(ctx->trace_id, ctx->step);
	return AMP_OK;
}

int amp_step_end(amp_ctx *ctx)
{
	if (!ctx)
		return AMP_EINVAL;
	if (!ctx->in_step)
		return amp_fail(ctx, AMP_ESTATE, "amp_step_end: no step begun");
	/* Data parallel: collectives the step still owes run inside it (its time, its rows) */
	int rc = AMP_OK;
	if (ctx->dist && ctx->dist->step_end)
		rc = ctx->dist->step_end(ctx->dist_state, ctx);
	if (AMP_TRACING()) {
		amp_trace_step_info info = {
		    .grad_norm = ctx->optim_done ? ctx->grad_norm : (double)NAN,
		    .clipped = ctx->optim_done && ctx->grad_clipped,
		    .micro_batches = ctx->micro_done,
		};
		amp_trace_step_end(ctx->trace_id, ctx->step, ctx->step_t0, ctx->step_loss,
		                   ctx->backward_done, ctx->step_scale, ctx->step_overflow,
		                   ctx->step_skipped, ctx->samples, &info);
		amp_trace_memory(ctx->trace_id, ctx->step, ctx->mem, ctx->mem_peak,
		                 ctx->cfg.memory_optimize ? ctx->mem_unopt : NULL,
		                 ctx->mem_peak_unopt);
		ctx->mem_traced = 1;
		/* this process's own: a forked child leaves out what its parent counted */
		amp_trace_counter("ops_dispatched", amp_tl_ops);
		amp_trace_counter("copies", amp_tl_copies);
	}
	ctx->stats.steps++;
	/* Step-scoped tensors (and working copies, grads of activations) go with the arena; a
	 * master gradient no optimizer took is widened out of it first. */
	for (amp_param *p = ctx->params; p; p = p->next) {
		if (ctx->backward_failed) {
			/* a backward that stopped part way (memory_limit, an error) leaves some master
			 * gradients added to and others not: none of it may reach an update */
			p->grad_kept = NULL;
			p->grad_counted = 0;
			p->grad_stale = p->master->grad != NULL;
		}
		if (p->grad_kept)
			amp_param_grad_settle(p);
		p->working = NULL;
	}
	for (int i = 0; i < AMP_MEM_NCAT; i++) {
		ctx->mem[i] -= ctx->step_mem[i];
		ctx->step_mem[i] = 0;
		ctx->mem_unopt[i] -= ctx->step_mem_unopt[i];
		ctx->step_mem_unopt[i] = 0;
	}
	arena_reset(&ctx->arena);
	ctx->free_blocks = NULL;
	ctx->tape = NULL;
	ctx->in_step = 0;
	ctx->limit_hit = 0;
	return rc;
}

int amp_micro_batch_begin(amp_ctx *ctx)
{
	if (!ctx)
		return AMP_EINVAL;
	if (!ctx->in_step)
		return amp_fail(ctx, AMP_ESTATE, "amp_micro_batch_begin: no step begun");
	if (ctx->optim_done)
		return amp_fail(ctx, AMP_ESTATE,
		                "amp_micro_batch_begin: the optimizer already ran in step %lld",
		                (long long)ctx->step);
	if (!ctx->backward_done) {
		/* Before the first backward: the micro-batches' tensors begin here. */
		if (ctx->micro_done == 0 && !ctx->micro_marked) {
			ctx->micro_marked = 1;
			ctx->mark_chunk = ctx->arena.head;
			ctx->mark_used = ctx->arena.head ? ctx->arena.head->used : 0;
			ctx->mark_total = ctx->arena.used_total;
			memcpy(ctx->mark_step_mem, ctx->step_mem, sizeof ctx->step_mem);
			memcpy(ctx->mark_step_mem_unopt, ctx->step_mem_unopt, sizeof ctx->step_mem_unopt);
			ctx->mark_tape = ctx->tape;
		}
		return AMP_OK;
	}
	if (ctx->micro_done >= ctx->cfg.accum_steps)
		return amp_fail(ctx, AMP_ESTATE,
		                "amp_micro_batch_begin: step %lld has run its %lld micro-batches "
		                "(gradient_accumulation_steps); call amp_optim_step",
		                (long long)ctx->step, (long long)ctx->cfg.accum_steps);
	/* The previous micro-batch's tensors go; the masters' gradients (persistent) stay, taken
	 * out of the half gradients they kept first. */
	for (amp_node *n = ctx->mark_tape; n; n = n->prev)
		n->out->grad = NULL; /* made after the mark, made again by the next backward */
	for (amp_param *p = ctx->params; p; p = p->next) {
		if (p->grad_kept)
			amp_param_grad_settle(p);
		p->working = NULL;
		p->working_step = -1;
	}
	for (int i = 0; i < AMP_MEM_NCAT; i++) {
		ctx->mem[i] -= ctx->step_mem[i] - ctx->mark_step_mem[i];
		ctx->step_mem[i] = ctx->mark_step_mem[i];
		ctx->mem_unopt[i] -= ctx->step_mem_unopt[i] - ctx->mark_step_mem_unopt[i];
		ctx->step_mem_unopt[i] = ctx->mark_step_mem_unopt[i];
	}
	arena_rewind(&ctx->arena, ctx->mark_chunk, ctx->mark_used, ctx->mark_total);
	ctx->free_blocks = NULL; /* blocks past the mark are gone; the rest stay unused */
	ctx->tape = ctx->mark_tape;
	ctx->backward_done = 0;
	return AMP_OK;
}

int64_t amp_step_index(const amp_ctx *ctx)
{
	return ctx ? ctx->step : -1;
}

void amp_step_set_samples(amp_ctx *ctx, int64_t samples)
{
	if (ctx)
		ctx->samples = samples;
}

void amp_ctx_free(amp_ctx *ctx)
{
	if (!ctx)
		return;
	if (ctx->dist && ctx->dist->detach)
		ctx->dist->detach(ctx->dist_state, ctx);
	amp_ctx_live_remove(ctx);
	if (ctx->mem_traced && AMP_TRACING())
		amp_trace_memory_end(ctx->trace_id, ctx->step);
	arena_release(&ctx->arena);
	for (size_t i = 0; i < ctx->n_persist; i++)
		amp_mem_free(ctx->persist[i]);
	amp_mem_free(ctx->persist);
	amp_mem_free(ctx->ckpt_note);
	amp_mem_free(ctx);
}

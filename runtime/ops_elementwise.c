/* ops_elementwise.c — elementwise binary ops with NumPy broadcasting (Add, Sub, Mul, Div,
 * Maximum, Minimum) and Scale.
 *
 * Half tensors are computed in FP32 block by block (amp_block_read / amp_block_write: blocks
 * converted in L1, never an FP32 copy of a whole tensor); FP32 ones in place.  fp16 Add, Sub,
 * Mul and Scale forward go to the fp16 kernels instead (amp_vadd_h16 ...: native fp16
 * arithmetic where the path has it, the same bits as the FP32 blocks), and so do their
 * backwards' fp16 gradients of operands of the output's shape; each records the engine those
 * ran on.  This file is the model for every op: begin, cast, allocate, compute, end with
 * a backward function.
 */
#include "internal.h"

#include <string.h>

/* ---- broadcasting ------------------------------------------------------------------------
 * A plan maps the output's elements to each input's.  Dimensions are aligned on the last one
 * (NumPy), an input's stride is 0 along a dimension where its extent is 1, and neighbouring
 * dimensions that both inputs step through the same way are merged, so the innermost merged
 * dimension is a run of contiguous output elements along which each input is either contiguous
 * (stride 1) or constant (stride 0).  Same shapes merge into one run; a trailing operand (a
 * bias) gives rows. */
typedef struct bcast {
	amp_shape out;                  /* the broadcast shape */
	int nd;                         /* merged dimensions, 1 to AMP_MAX_DIMS */
	int64_t d[AMP_MAX_DIMS];        /* their extents, outermost first */
	int64_t s[2][AMP_MAX_DIMS];     /* element strides of a and b along them */
	int full[2];                    /* the input has the output's element count (and order) */
} bcast;

/* 0, or -1 when the shapes do not broadcast. */
static int bcast_plan(amp_shape a, amp_shape b, bcast *p)
{
	int nd = a.ndim > b.ndim ? a.ndim : b.ndim;
	int64_t ext[2][AMP_MAX_DIMS], str[2][AMP_MAX_DIMS];
	const amp_shape *in[2] = {&a, &b};
	memset(p, 0, sizeof *p);
	p->out.ndim = nd;
	for (int t = 0; t < 2; t++) {
		int off = nd - in[t]->ndim;
		int64_t stride = 1;
		for (int k = nd - 1; k >= 0; k--) {
			ext[t][k] = k < off ? 1 : in[t]->d[k - off];
			str[t][k] = ext[t][k] == 1 ? 0 : stride;
			stride *= ext[t][k];
		}
	}
	for (int k = 0; k < nd; k++) {
		if (ext[0][k] != ext[1][k] && ext[0][k] != 1 && ext[1][k] != 1)
			return -1;
		p->out.d[k] = ext[0][k] == 1 ? ext[1][k] : ext[0][k];
	}
	/* merge, skipping extents of 1 (nothing to step through) */
	p->nd = 0;
	for (int k = 0; k < nd; k++) {
		if (p->out.d[k] == 1)
			continue;
		int j = p->nd - 1;
		if (j >= 0 && str[0][j] == str[0][k] * p->out.d[k] &&
		    str[1][j] == str[1][k] * p->out.d[k]) {
			p->d[j] *= p->out.d[k];
			p->s[0][j] = str[0][k];
			p->s[1][j] = str[1][k];
			continue;
		}
		p->d[++j] = p->out.d[k];
		p->s[0][j] = str[0][k];
		p->s[1][j] = str[1][k];
		p->nd = j + 1;
	}
	if (p->nd == 0) { /* every extent 1: one element */
		p->nd = 1;
		p->d[0] = 1;
	}
	int64_t n = amp_shape_numel(p->out);
	p->full[0] = amp_shape_numel(a) == n;
	p->full[1] = amp_shape_numel(b) == n;
	return 0;
}

/* Walks the runs of a plan: run r starts at output element r * len and at element off[t] of
 * input t. */
typedef struct bcast_iter {
	const bcast *p;
	int64_t len, runs;              /* run length (innermost merged extent), run count */
	int64_t idx[AMP_MAX_DIMS];      /* position over the outer merged dimensions */
	int64_t off[2];
} bcast_iter;

static void bcast_begin(bcast_iter *it, const bcast *p)
{
	memset(it, 0, sizeof *it);
	it->p = p;
	it->len = p->d[p->nd - 1];
	it->runs = it->len ? amp_shape_numel(p->out) / it->len : 0;
}

static void bcast_next(bcast_iter *it)
{
	const bcast *p = it->p;
	for (int k = p->nd - 2; k >= 0; k--) {
		it->off[0] += p->s[0][k];
		it->off[1] += p->s[1][k];
		if (++it->idx[k] < p->d[k])
			return;
		it->off[0] -= p->s[0][k] * p->d[k];
		it->off[1] -= p->s[1][k] * p->d[k];
		it->idx[k] = 0;
	}
}

static int64_t block_len(int64_t total, int64_t at)
{
	return total - at < AMP_BLOCK ? total - at : AMP_BLOCK;
}

/* FP32 values of input t (the plan's input w) at [j0, j0+n) of the current run: read block-wise
 * when t has the output's order, else from view (t whole in fp32, smaller than the output),
 * contiguous or one value repeated into buf. */
static const float *bcast_read(const bcast_iter *it, int w, const amp_tensor *t, const float *view,
                               int64_t j0, int64_t n, float *buf)
{
	const bcast *p = it->p;
	if (p->full[w])
		return amp_block_read(t, it->off[w] + j0, n, buf);
	if (p->s[w][p->nd - 1])
		return view + it->off[w] + j0;
	float v = view[it->off[w]];
	for (int64_t i = 0; i < n; i++)
		buf[i] = v;
	return buf;
}

/* The fp32 views a plan needs: the inputs that are smaller than the output, whole (they are
 * read many times).  AMP_OK or AMP_ENOMEM (message set). */
static int bcast_views(amp_ctx *ctx, const bcast *p, const amp_tensor *a, const amp_tensor *b,
                       const float **va, const float **vb)
{
	*va = p->full[0] ? NULL : amp_f32_view(ctx, a);
	*vb = p->full[1] ? NULL : amp_f32_view(ctx, b);
	if ((!p->full[0] && !*va) || (!p->full[1] && !*vb))
		return amp_fail(ctx, AMP_ENOMEM, "out of memory");
	return AMP_OK;
}

/* Maximum and Minimum: a is taken when it is larger (smaller) or NaN, so NaN propagates. */
static inline float max_f32(float a, float b)
{
	return a > b || a != a ? a : b;
}

static inline float min_f32(float a, float b)
{
	return a < b || a != a ? a : b;
}

/* xa, xb: (n) fp32 -> y: (n) fp32 */
static void binary_kernel(amp_op_type op, const float *restrict xa, const float *restrict xb,
                          float *restrict y, int64_t n)
{
	switch (op) {
	case AMP_OP_MUL: amp_vmul_f32(xa, xb, y, n); break;
	case AMP_OP_SUB:
		for (int64_t i = 0; i < n; i++)
			y[i] = xa[i] - xb[i];
		break;
	case AMP_OP_DIV:
		for (int64_t i = 0; i < n; i++)
			y[i] = xa[i] / xb[i];
		break;
	case AMP_OP_MAXIMUM:
		for (int64_t i = 0; i < n; i++)
			y[i] = max_f32(xa[i], xb[i]);
		break;
	case AMP_OP_MINIMUM:
		for (int64_t i = 0; i < n; i++)
			y[i] = min_f32(xa[i], xb[i]);
		break;
	default: amp_vadd_f32(xa, xb, y, n); break;
	}
}

/* The fp16 kernel of op (Add, Sub and Mul: amp_vadd_h16's contract makes them the FP32
 * results rounded once), or NULL: the others stay on the FP32 blocks. */
typedef amp_engine (*h16_binary_fn)(const uint16_t *a, const uint16_t *b, uint16_t *dst,
                                    int64_t n);

static h16_binary_fn h16_kernel(amp_op_type op)
{
	switch (op) {
	case AMP_OP_ADD: return amp_vadd_h16;
	case AMP_OP_SUB: return amp_vsub_h16;
	case AMP_OP_MUL: return amp_vmul_h16;
	default: return NULL;
	}
}

/* n fp16 values of input t (the plan's input w) from element j0 of the current run: t's own
 * storage (contiguous along the run, whether t has the output's order or is broadcast along
 * outer dimensions), or its one value repeated into buf. */
static const uint16_t *bcast_read_h16(const bcast_iter *it, int w, const amp_tensor *t,
                                      int64_t j0, int64_t n, uint16_t *buf)
{
	const bcast *p = it->p;
	const uint16_t *x = (const uint16_t *)t->data + it->off[w];
	if (p->full[w] || p->s[w][p->nd - 1])
		return x + j0;
	for (int64_t i = 0; i < n; i++)
		buf[i] = x[0];
	return buf;
}

/* y = a op b over the plan p on fp16 a, b and y, read and written as fp16 (no FP32 blocks):
 * one kernel call per run, or one for all rows when an operand is a row repeated over the
 * other's rows (a bias).  Returns the engine that ran. */
static amp_engine binary_run_h16(amp_op_type op, h16_binary_fn fn, const bcast *p,
                                 const amp_tensor *a, const amp_tensor *b, amp_tensor *y)
{
	amp_engine engine = amp_kernels_h16_engine();
	uint16_t *yd = y->data;
	int rows_b = p->nd == 2 && p->full[0] && p->s[1][0] == 0 && p->s[1][1] == 1;
	int rows_a = p->nd == 2 && p->full[1] && p->s[0][0] == 0 && p->s[0][1] == 1;
	if ((op == AMP_OP_ADD || op == AMP_OP_MUL) && (rows_a || rows_b)) {
		/* x: (rows, cols), row: (cols); commutative, so the row may be either operand */
		const amp_tensor *x = rows_b ? a : b, *row = rows_b ? b : a;
		if (op == AMP_OP_ADD)
			return amp_vadd_rows_h16(x->data, row->data, yd, p->d[0], p->d[1]);
		return amp_vmul_rows_h16(x->data, row->data, yd, p->d[0], p->d[1]);
	}
	uint16_t abuf[AMP_BLOCK], bbuf[AMP_BLOCK];
	bcast_iter it;
	bcast_begin(&it, p);
	for (int64_t r = 0; r < it.runs; r++, bcast_next(&it))
		for (int64_t j0 = 0; j0 < it.len; j0 += AMP_BLOCK) {
			int64_t n = block_len(it.len, j0);
			const uint16_t *xa = bcast_read_h16(&it, 0, a, j0, n, abuf);
			const uint16_t *xb = bcast_read_h16(&it, 1, b, j0, n, bbuf);
			engine = fn(xa, xb, yd + r * it.len + j0, n);
		}
	return engine;
}

/* y = a op b over the plan p, block by block; y has p's output shape.  *engine = what the
 * arithmetic ran on. */
static int binary_run(amp_ctx *ctx, amp_op_type op, const bcast *p, const amp_tensor *a,
                      const amp_tensor *b, amp_tensor *y, amp_engine *engine)
{
	h16_binary_fn fn = h16_kernel(op);
	if (fn && y->dtype == AMP_F16 && a->dtype == AMP_F16 && b->dtype == AMP_F16) {
		*engine = binary_run_h16(op, fn, p, a, b, y);
		return AMP_OK;
	}
	*engine = amp_kernels_vec_engine();
	const float *va, *vb;
	int rc = bcast_views(ctx, p, a, b, &va, &vb);
	if (rc)
		return rc;
	float abuf[AMP_BLOCK], bbuf[AMP_BLOCK], ybuf[AMP_BLOCK];
	bcast_iter it;
	bcast_begin(&it, p);
	for (int64_t r = 0; r < it.runs; r++, bcast_next(&it))
		for (int64_t j0 = 0; j0 < it.len; j0 += AMP_BLOCK) {
			int64_t n = block_len(it.len, j0), i0 = r * it.len + j0;
			const float *xa = bcast_read(&it, 0, a, va, j0, n, abuf);
			const float *xb = bcast_read(&it, 1, b, vb, j0, n, bbuf);
			float *yb = amp_block_dst(y, i0, ybuf);
			binary_kernel(op, xa, xb, yb, n);
			amp_block_write(y, i0, n, yb);
		}
	return AMP_OK;
}

int amp_binary_blocks(amp_ctx *ctx, amp_op_type op, const amp_tensor *a, const amp_tensor *b,
                      amp_tensor *y, amp_engine *engine)
{
	amp_engine ran;
	bcast p;
	if (bcast_plan(a->shape, b->shape, &p) || !amp_shape_eq(p.out, y->shape)) {
		char sa[64], sb[64];
		return amp_fail(ctx, AMP_ESHAPE, "%s: shapes %s and %s do not broadcast",
		                amp_op_name(op), amp_shape_str(a->shape, sa, sizeof sa),
		                amp_shape_str(b->shape, sb, sizeof sb));
	}
	int rc = binary_run(ctx, op, &p, a, b, y, &ran);
	if (engine)
		*engine = ran;
	return rc;
}

static int binary_forward(amp_ctx *ctx, amp_op_type op, const char *label, amp_tensor *a,
                          amp_tensor *b, amp_backward_fn backward, amp_tensor **out)
{
	amp_op_call call;
	amp_tensor *in[2] = {a, b};
	int rc = amp_op_begin(ctx, &call, op, label, in, 2);
	if (rc)
		return rc;
	if (!out)
		return amp_fail(ctx, AMP_EINVAL, "%s '%s': NULL out", amp_op_name(op),
		                label ? label : "-");
	bcast p;
	if (bcast_plan(a->shape, b->shape, &p)) {
		char sa[64], sb[64];
		return amp_fail(ctx, AMP_ESHAPE, "%s '%s': shapes %s and %s do not broadcast",
		                amp_op_name(op), label ? label : "-",
		                amp_shape_str(a->shape, sa, sizeof sa),
		                amp_shape_str(b->shape, sb, sizeof sb));
	}
	if (!(in[0] = amp_cast_to(ctx, a, call.exec, label)) ||
	    !(in[1] = amp_cast_to(ctx, b, call.exec, label)))
		return amp_oom(ctx);
	amp_op_start_timer(&call);
	amp_tensor *y = amp_alloc_raw(ctx, call.exec, p.out, AMP_MEM_ACTIVATIONS); /* in full */
	if (!y)
		return amp_fail(ctx, AMP_ENOMEM, "out of memory");
	if ((rc = binary_run(ctx, op, &p, in[0], in[1], y, &call.engine)))
		return rc;
	call.flops = (uint64_t)y->numel;
	call.bytes = (uint64_t)(y->numel + a->numel + b->numel) * amp_dtype_size(call.exec);
	amp_node *node;
	if ((rc = amp_op_end(ctx, &call, y, in, 2, backward, &node)))
		return rc;
	if (node)
		node->in_unread = op == AMP_OP_ADD || op == AMP_OP_SUB; /* the gradient, as it is */
	*out = y;
	return AMP_OK;
}

/* The local gradient of input w (0: a, 1: b) of op at n elements: g times d(a op b)/d(input),
 * into buf, or g itself when that is the derivative. */
static const float *binary_local_grad(amp_op_type op, int w, const float *restrict g,
                                      const float *restrict xa, const float *restrict xb,
                                      float *restrict buf, int64_t n)
{
	switch (op) {
	case AMP_OP_ADD: return g;
	case AMP_OP_SUB:
		if (w == 0)
			return g;
		for (int64_t i = 0; i < n; i++)
			buf[i] = -g[i];
		break;
	case AMP_OP_MUL: amp_vmul_f32(g, w ? xa : xb, buf, n); break;
	case AMP_OP_DIV:
		/* da = g / b;  db = -g a / b^2 */
		if (w == 0)
			for (int64_t i = 0; i < n; i++)
				buf[i] = g[i] / xb[i];
		else
			for (int64_t i = 0; i < n; i++)
				buf[i] = -g[i] * (xa[i] / xb[i]) / xb[i];
		break;
	case AMP_OP_MAXIMUM:
	case AMP_OP_MINIMUM:
		/* a's share: 1 where it was taken alone, 1/2 on a tie; b gets the rest */
		for (int64_t i = 0; i < n; i++) {
			float av = xa[i], bv = xb[i];
			int first = op == AMP_OP_MAXIMUM ? av > bv : av < bv;
			float share = first || av != av ? 1.0f : av == bv ? 0.5f : 0.0f;
			buf[i] = g[i] * (w ? 1.0f - share : share);
		}
		break;
	default: return g;
	}
	return buf;
}

/* The gradient of input w of an fp16 Add, Sub or Mul when that input has the output's shape,
 * on fp16 storage, each element the FP32 blocks' result rounded once (the same bits, but for a
 * signalling NaN, which no arithmetic makes, kept as it is by a copy): into a fresh gradient a
 * copy of g or its negation (no arithmetic), or for Mul g times the other
 * operand (vmul_h16); into a gradient already there g added or subtracted (vadd_h16,
 * vsub_h16).  Mul's product added to a gradient already there would be rounded twice: that one
 * stays on the blocks, which round the sum once.  Returns 0 where it does not apply, else 1 and
 * *engine, what the arithmetic ran on (none for a copy). */
static int binary_grad_h16(amp_op_type op, int w, const bcast *p, amp_tensor *const in[2],
                           const amp_tensor *gy, amp_tensor *gt, int fresh, amp_engine *engine)
{
	if (gy->dtype != AMP_F16 || gt->dtype != AMP_F16 || !p->full[w])
		return 0;
	const uint16_t *g = gy->data;
	uint16_t *d = gt->data;
	int64_t n = gt->numel;
	int neg = op == AMP_OP_SUB && w == 1;
	switch (op) {
	case AMP_OP_ADD:
	case AMP_OP_SUB:
		if (!fresh) {
			*engine = neg ? amp_vsub_h16(d, g, d, n) : amp_vadd_h16(d, g, d, n);
			return 1;
		}
		if (neg)
			for (int64_t i = 0; i < n; i++)
				d[i] = (uint16_t)(g[i] ^ 0x8000u);
		else
			memcpy(d, g, (size_t)n * sizeof(uint16_t));
		*engine = AMP_ENGINE_NONE;
		return 1;
	case AMP_OP_MUL:
		if (!fresh || !p->full[1 - w] || in[1 - w]->dtype != AMP_F16)
			return 0;
		*engine = amp_vmul_h16(g, in[1 - w]->data, d, n);
		return 1;
	default: return 0;
	}
}

/* Gradients of both inputs of a broadcast binary op: an input of the output's shape gets its
 * local gradient block by block (or on fp16 storage: binary_grad_h16); a broadcast one the sum
 * of it over the repetitions, in double.  The engine recorded is the FP32 blocks' if any
 * gradient went through them, else the fp16 kernels' (none when both were copies). */
static int binary_backward(amp_ctx *ctx, amp_node *node)
{
	uint64_t t0 = AMP_TRACING() ? amp_trace_clock() : 0;
	amp_tensor *in[2] = {node->in[0], node->in[1]}, *gy = node->out->grad;
	amp_op_type op = node->op;
	bcast p;
	bcast_plan(in[0]->shape, in[1]->shape, &p); /* it did at forward */
	int need_vals = op != AMP_OP_ADD && op != AMP_OP_SUB;
	const float *va = NULL, *vb = NULL;
	int rc = need_vals ? bcast_views(ctx, &p, in[0], in[1], &va, &vb) : AMP_OK;
	float gbuf[AMP_BLOCK], abuf[AMP_BLOCK], bbuf[AMP_BLOCK], lbuf[AMP_BLOCK], dbuf[AMP_BLOCK];
	amp_engine engine = AMP_ENGINE_NONE;
	int blocks = 0; /* a gradient went through the FP32 blocks */
	for (int w = 0; w < 2 && rc == AMP_OK; w++) {
		amp_tensor *t = in[w];
		if (!t->requires_grad)
			continue;
		int fresh = 0;
		amp_tensor *gt = NULL;
		double *acc = NULL;
		if (p.full[w]) {
			if (!(gt = amp_grad_open(ctx, t, &fresh)))
				return amp_oom(ctx);
			amp_engine ran;
			if (node->exec == AMP_F16 &&
			    binary_grad_h16(op, w, &p, in, gy, gt, fresh, &ran)) {
				if (ran != AMP_ENGINE_NONE && engine == AMP_ENGINE_NONE)
					engine = ran;
				continue;
			}
		} else if (!(acc = amp_arena_alloc(ctx, (size_t)t->numel * sizeof(double)))) {
			return amp_fail(ctx, AMP_ENOMEM, "%s '%s': out of memory", amp_op_name(op),
			                node->label ? node->label : "-");
		}
		blocks = 1;
		/* the operands this input's local gradient reads */
		int two = op == AMP_OP_DIV ? w == 1 : op == AMP_OP_MAXIMUM || op == AMP_OP_MINIMUM;
		int need_a = need_vals && (two || w == 1), need_b = need_vals && (two || w == 0);
		int64_t inner = p.s[w][p.nd - 1];
		bcast_iter it;
		bcast_begin(&it, &p);
		for (int64_t r = 0; r < it.runs; r++, bcast_next(&it))
			for (int64_t j0 = 0; j0 < it.len; j0 += AMP_BLOCK) {
				int64_t n = block_len(it.len, j0), i0 = r * it.len + j0;
				const float *g = amp_block_read(gy, i0, n, gbuf);
				const float *xa = need_a ? bcast_read(&it, 0, in[0], va, j0, n, abuf) : NULL;
				const float *xb = need_b ? bcast_read(&it, 1, in[1], vb, j0, n, bbuf) : NULL;
				if (gt) {
					float *dx = amp_grad_block_dst(gt, fresh, i0, dbuf);
					const float *lg = binary_local_grad(op, w, g, xa, xb, dx, n);
					if (lg != dx)
						memcpy(dx, lg, (size_t)n * sizeof(float));
					amp_grad_block_end(gt, fresh, i0, n, dx);
					continue;
				}
				const float *lg = binary_local_grad(op, w, g, xa, xb, lbuf, n);
				double *at = acc + it.off[w];
				if (inner) {
					for (int64_t i = 0; i < n; i++)
						at[j0 + i] += (double)lg[i];
				} else {
					double s = 0;
					for (int64_t i = 0; i < n; i++)
						s += (double)lg[i];
					at[0] += s;
				}
			}
		if (acc) {
			float *g32 = (float *)acc; /* narrowed in place, front to back */
			for (int64_t i = 0; i < t->numel; i++)
				g32[i] = (float)acc[i];
			rc = amp_grad_acc_f32(ctx, t, g32);
		}
	}
	amp_trace_kernel(ctx, op, node->label, node->exec,
	                 blocks ? amp_kernels_vec_engine() : engine, AMP_PHASE_BACKWARD, t0,
	                 (uint64_t)gy->numel * (need_vals ? 4 : 2),
	                 (uint64_t)gy->numel * 4 * amp_dtype_size(node->exec), gy->shape);
	return rc;
}

int amp_add(amp_ctx *ctx, const char *label, amp_tensor *a, amp_tensor *b, amp_tensor **out)
{
	return binary_forward(ctx, AMP_OP_ADD, label, a, b, binary_backward, out);
}

int amp_sub(amp_ctx *ctx, const char *label, amp_tensor *a, amp_tensor *b, amp_tensor **out)
{
	return binary_forward(ctx, AMP_OP_SUB, label, a, b, binary_backward, out);
}

int amp_mul(amp_ctx *ctx, const char *label, amp_tensor *a, amp_tensor *b, amp_tensor **out)
{
	return binary_forward(ctx, AMP_OP_MUL, label, a, b, binary_backward, out);
}

int amp_div(amp_ctx *ctx, const char *label, amp_tensor *a, amp_tensor *b, amp_tensor **out)
{
	return binary_forward(ctx, AMP_OP_DIV, label, a, b, binary_backward, out);
}

int amp_maximum(amp_ctx *ctx, const char *label, amp_tensor *a, amp_tensor *b, amp_tensor **out)
{
	return binary_forward(ctx, AMP_OP_MAXIMUM, label, a, b, binary_backward, out);
}

int amp_minimum(amp_ctx *ctx, const char *label, amp_tensor *a, amp_tensor *b, amp_tensor **out)
{
	return binary_forward(ctx, AMP_OP_MINIMUM, label, a, b, binary_backward, out);
}

static int scale_backward(amp_ctx *ctx, amp_node *node)
{
	uint64_t t0 = AMP_TRACING() ? amp_trace_clock() : 0;
	amp_tensor *x = node->in[0], *gy = node->out->grad;
	int fresh;
	amp_tensor *gx = amp_grad_open(ctx, x, &fresh);
	if (!gx)
		return amp_oom(ctx);
	amp_engine engine = amp_kernels_vec_engine();
	/* a fresh fp16 gradient of an fp16 chain on its storage, as the forward */
	int h16 = node->exec == AMP_F16 && fresh && gx->dtype == AMP_F16 && gy->dtype == AMP_F16;
	if (h16)
		engine = amp_vscale_h16(gy->data, node->f[0], gx->data, x->numel);
	float gbuf[AMP_BLOCK], dbuf[AMP_BLOCK];
	for (int64_t i0 = 0; !h16 && i0 < x->numel; i0 += AMP_BLOCK) {
		int64_t n = block_len(x->numel, i0);
		float *dx = amp_grad_block_dst(gx, fresh, i0, dbuf);
		amp_vscale_f32(amp_block_read(gy, i0, n, gbuf), node->f[0], dx, n);
		amp_grad_block_end(gx, fresh, i0, n, dx);
	}
	amp_trace_kernel(ctx, node->op, node->label, node->exec, engine, AMP_PHASE_BACKWARD, t0,
	                 (uint64_t)x->numel, (uint64_t)x->numel * 2 * amp_dtype_size(node->exec),
	                 x->shape);
	return AMP_OK;
}

int amp_scale(amp_ctx *ctx, const char *label, amp_tensor *x, float s, amp_tensor **out)
{
	amp_op_call call;
	amp_tensor *in[1] = {x};
	int rc = amp_op_begin(ctx, &call, AMP_OP_SCALE, label, in, 1);
	if (rc)
		return rc;
	if (!(in[0] = amp_cast_to(ctx, x, call.exec, label)))
		return amp_oom(ctx);
	amp_op_start_timer(&call);
	amp_tensor *y = amp_alloc_raw(ctx, call.exec, x->shape, AMP_MEM_ACTIVATIONS); /* in full */
	if (!y)
		return amp_fail(ctx, AMP_ENOMEM, "out of memory");
	float xbuf[AMP_BLOCK], ybuf[AMP_BLOCK];
	/* fp16 in one pass on its storage (natively where s is an fp16 value: amp_vscale_h16) */
	if (call.exec == AMP_F16)
		call.engine = amp_vscale_h16(in[0]->data, s, y->data, y->numel);
	for (int64_t i0 = 0; call.exec != AMP_F16 && i0 < y->numel; i0 += AMP_BLOCK) {
		int64_t n = block_len(y->numel, i0);
		float *yb = amp_block_dst(y, i0, ybuf);
		amp_vscale_f32(amp_block_read(in[0], i0, n, xbuf), s, yb, n);
		amp_block_write(y, i0, n, yb);
	}
	call.flops = (uint64_t)y->numel;
	call.bytes = (uint64_t)y->numel * 2 * amp_dtype_size(call.exec);
	amp_node *node;
	if ((rc = amp_op_end(ctx, &call, y, in, 1, scale_backward, &node)))
		return rc;
	if (node)
		node->f[0] = s;
	*out = y;
	return AMP_OK;
}

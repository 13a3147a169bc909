/* checkpoint.c — saving and loading a run's state: parameters, optimizer state, the loss
 * scaler, the RNG and the step counter, in one versioned, checksummed file written
 * atomically (a temporary file in the same directory, fsync, rename, fsync of the directory).
 *
 * Layout (little-endian, the host's; a checkpoint is read on the machine class that wrote it):
 *   header  "AMPCKPT\0", u32 format version, u32 header bytes (32), u64 payload bytes,
 *           u32 CRC-32 of the payload, u32 zero
 *   payload (format 3 on) u32 note bytes, the program's note (amp_checkpoint_set_note: the
 *           settings a resume must match, say), without a NUL: first, so that a program
 *           reads it (amp_checkpoint_read_note) without a context that fits the file;
 *           i64 step, u64 rng state, u64 op sequence, i64 steps ended, overflow, skipped and
 *           clipped step counts; the scaler: u32 dynamic, u32 flags (bit 0: saved under an
 *           FP32 mode, whose scaler was not in use; bits 1..: 1 + the index of the optimizer
 *           whose moments the parameters hold, 0 for none or unknown; 0 in older files),
 *           f64 scale, i64 clean steps;
 *           u32 parameter count, then per parameter (the context's order): u32 label bytes,
 *           label, u32 ndim, i64 d[4], f32 master[numel], u8 has first moment [f32 m[numel]],
 *           u8 has second moment [f32 v[numel]];
 *           u32 optimizer count, then per optimizer: u32 kind, i64 update count, f32 lr;
 *           (format 2 on) per parameter, in the same order: u8 has gradient [f32 g[numel]]:
 *           the gradients held between steps (accumulated by steps without an update), which
 *           the run that never stopped adds its next steps to.
 * Load validates everything (checksum, then every count, label and shape against the context)
 * before it changes anything, so a refused checkpoint leaves the context as it was.
 */
#include "internal.h"
#include "alloc.h"
#include "optim_int.h"

#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#define CKPT_MAGIC "AMPCKPT"      /* 8 bytes with its NUL */
#define CKPT_VERSION 3u
#define CKPT_HDR 32u
/* The payload's first fields after the note, the run's counters (step, RNG state, op
 * sequence, steps ended, overflowed, skipped, clipped), are each rank's own in a data-parallel
 * run (its dropout stream, the evaluation steps its share took): what the ranks compare after
 * a load is the rest, the training state. */
#define RUN_COUNTERS 56u

/* CRC-32 (zlib's, the common one) of n bytes. */
static uint32_t crc32_of(const unsigned char *p, size_t n)
{
	return (uint32_t)crc32_z(0, p, n);
}

/* ---- writing ----------------------------------------------------------------------------- */

typedef struct wbuf {
	unsigned char *p;
	size_t len, cap;
	int oom;
} wbuf;

static void put(wbuf *b, const void *src, size_t n)
{
	if (b->oom)
		return;
	if (b->len + n > b->cap) {
		size_t cap = b->cap ? b->cap : 4096;
		while (cap < b->len + n)
			cap *= 2;
		unsigned char *q = amp_mem_realloc(b->p, cap);
		if (!q) {
			b->oom = 1;
			return;
		}
		b->p = q;
		b->cap = cap;
	}
	memcpy(b->p + b->len, src, n);
	b->len += n;
}

static void put_u8(wbuf *b, uint8_t v) { put(b, &v, 1); }
static void put_u32(wbuf *b, uint32_t v) { put(b, &v, 4); }
static void put_u64(wbuf *b, uint64_t v) { put(b, &v, 8); }
static void put_i64(wbuf *b, int64_t v) { put(b, &v, 8); }
static void put_f64(wbuf *b, double v) { put(b, &v, 8); }

static void put_state(wbuf *b, const amp_tensor *t, int64_t numel)
{
	put_u8(b, t != NULL);
	if (t)
		put(b, t->data, (size_t)numel * sizeof(float));
}

/* Writes all of buf to fd; 0 or -1 (errno set). */
static int write_all(int fd, const unsigned char *buf, size_t n)
{
	while (n) {
		ssize_t w = write(fd, buf, n);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		buf += w;
		n -= (size_t)w;
	}
	return 0;
}

/* The directory of path, fsynced so that the rename is durable (best effort: a file system
 * that cannot fsync a directory still renamed atomically). */
static void sync_dir(const char *path)
{
	char dir[4096];
	const char *slash = strrchr(path, '/');
	if (!slash)
		snprintf(dir, sizeof dir, ".");
	else if (slash == path)
		snprintf(dir, sizeof dir, "/");
	else
		snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd >= 0) {
		(void)fsync(fd);
		close(fd);
	}
}

int amp_checkpoint_save(amp_ctx *ctx, const char *path)
{
	if (!ctx || !path || !*path)
		return amp_fail(ctx, AMP_EINVAL, "amp_checkpoint_save: NULL argument");
	if (ctx->in_step)
		return amp_fail(ctx, AMP_ESTATE,
		                "amp_checkpoint_save: step %lld is open (save between steps)",
		                (long long)ctx->step);
	for (amp_param *p = ctx->params; p; p = p->next)
		if (p->master_partial || p->moments_partial)
			return amp_fail(
			    ctx, AMP_ESTATE,
			    "amp_checkpoint_save: optimizer_sharding left the master of '%s' "
			    "and its moments current only in this rank's share: call "
			    "amp_mpi_consolidate on every rank first",
			    p->label);
	wbuf b = {0};
	size_t note_len = ctx->ckpt_note ? strlen(ctx->ckpt_note) : 0;
	put_u32(&b, (uint32_t)note_len);
	if (note_len)
		put(&b, ctx->ckpt_note, note_len);
	put_i64(&b, ctx->step);
	put_u64(&b, ctx->rng_state);
	put_u64(&b, ctx->seq);
	put_i64(&b, ctx->stats.steps);
	put_i64(&b, ctx->stats.overflow_steps);
	put_i64(&b, ctx->stats.skipped_steps);
	put_i64(&b, ctx->stats.clipped_steps);
	put_u32(&b, (uint32_t)ctx->scaler.dynamic);
	uint32_t owner = 0, nth = 0;
	for (amp_optim *o = ctx->optims; o; o = o->next, nth++)
		if (o == ctx->state_owner)
			owner = nth + 1;
	put_u32(&b, (amp_mode_info_of(ctx->cfg.mode)->kind == AMP_KIND_FP32 ? 1u : 0u) |
	                owner << 1);
	put_f64(&b, ctx->scaler.scale);
	put_i64(&b, ctx->scaler.clean_steps);
	put_u32(&b, (uint32_t)ctx->n_params);
	for (amp_param *p = ctx->params; p; p = p->next) {
		amp_tensor *m = p->master;
		put_u32(&b, (uint32_t)strlen(p->label));
		put(&b, p->label, strlen(p->label));
		put_u32(&b, (uint32_t)m->shape.ndim);
		for (int i = 0; i < AMP_MAX_DIMS; i++)
			put_i64(&b, m->shape.d[i]);
		put(&b, m->data, (size_t)m->numel * sizeof(float));
		put_state(&b, p->opt_m, m->numel);
		put_state(&b, p->opt_v, m->numel);
	}
	uint32_t n_opt = 0;
	for (amp_optim *o = ctx->optims; o; o = o->next)
		n_opt++;
	put_u32(&b, n_opt);
	for (amp_optim *o = ctx->optims; o; o = o->next) {
		put_u32(&b, (uint32_t)o->kind);
		put_i64(&b, o->t);
		float lr = o->kind == OPTIM_SGD ? o->sgd.lr : o->adamw.lr;
		put(&b, &lr, sizeof lr);
	}
	for (amp_param *p = ctx->params; p; p = p->next) /* between steps: settled in FP32 */
		put_state(&b, p->master->grad && !p->grad_stale ? p->master->grad : NULL,
		          p->master->numel);
	if (b.oom) {
		amp_mem_free(b.p);
		return amp_fail(ctx, AMP_ENOMEM, "amp_checkpoint_save: out of memory");
	}

	unsigned char hdr[CKPT_HDR] = {0};
	uint32_t version = CKPT_VERSION, hdr_len = CKPT_HDR, crc = crc32_of(b.p, b.len);
	uint64_t len = b.len;
	memcpy(hdr, CKPT_MAGIC, 8);
	memcpy(hdr + 8, &version, 4);
	memcpy(hdr + 12, &hdr_len, 4);
	memcpy(hdr + 16, &len, 8);
	memcpy(hdr + 24, &crc, 4);

	/* The file replaced is the one path names: a symbolic link is written through (its
	 * target replaced, the link kept); anything but a regular file is refused, never
	 * renamed over (a device, a FIFO, a directory). */
	char real[PATH_MAX], tmp[PATH_MAX + 32];
	const char *dest = path;
	struct stat st;
	if (lstat(path, &st) == 0 && S_ISLNK(st.st_mode)) {
		if (!realpath(path, real)) {
			amp_mem_free(b.p);
			return amp_fail(ctx, AMP_EIO, "checkpoint '%s': a symbolic link to nowhere: %s",
			                path, strerror(errno));
		}
		dest = real;
	}
	if (stat(dest, &st) == 0 && !S_ISREG(st.st_mode)) {
		amp_mem_free(b.p);
		return amp_fail(ctx, AMP_EIO, "checkpoint '%s': exists and is not a regular file",
		                path);
	}
	if (snprintf(tmp, sizeof tmp, "%s.tmp.%ld", dest, (long)getpid()) >= (int)sizeof tmp) {
		amp_mem_free(b.p);
		return amp_fail(ctx, AMP_EINVAL, "amp_checkpoint_save: path too long");
	}
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	int rc = AMP_OK;
	if (fd < 0) {
		rc = amp_fail(ctx, AMP_EIO, "checkpoint '%s': cannot create '%s': %s", path, tmp,
		              strerror(errno));
	} else if (write_all(fd, hdr, sizeof hdr) || write_all(fd, b.p, b.len) || fsync(fd)) {
		rc = amp_fail(ctx, AMP_EIO, "checkpoint '%s': writing '%s': %s", path, tmp,
		              strerror(errno));
		close(fd);
		unlink(tmp);
	} else if (close(fd) || rename(tmp, dest)) {
		rc = amp_fail(ctx, AMP_EIO, "checkpoint '%s': %s", path, strerror(errno));
		unlink(tmp);
	} else {
		sync_dir(dest);
	}
	amp_mem_free(b.p);
	return rc;
}

int amp_checkpoint_set_note(amp_ctx *ctx, const char *note)
{
	if (!ctx)
		return AMP_EINVAL;
	size_t len = note ? strlen(note) : 0;
	if (len > AMP_CHECKPOINT_NOTE_MAX)
		return amp_fail(ctx, AMP_EINVAL, "amp_checkpoint_set_note: %zu bytes, at most %d",
		                len, AMP_CHECKPOINT_NOTE_MAX);
	char *copy = NULL;
	if (len && !(copy = amp_mem_realloc(NULL, len + 1)))
		return amp_fail(ctx, AMP_ENOMEM, "amp_checkpoint_set_note: out of memory");
	if (copy)
		memcpy(copy, note, len + 1);
	amp_mem_free(ctx->ckpt_note);
	ctx->ckpt_note = copy;
	return AMP_OK;
}

const char *amp_checkpoint_note(const amp_ctx *ctx)
{
	return ctx && ctx->ckpt_note ? ctx->ckpt_note : "";
}

/* ---- reading ----------------------------------------------------------------------------- */

typedef struct rbuf {
	const unsigned char *p;
	size_t len, off;
	int short_read;
} rbuf;

static const void *take(rbuf *r, size_t n)
{
	if (r->short_read || r->len - r->off < n) {
		r->short_read = 1;
		return NULL;
	}
	const void *q = r->p + r->off;
	r->off += n;
	return q;
}

#define GETTER(name, type)                                                                        \
	static type name(rbuf *r)                                                                 \
	{                                                                                         \
		type v = 0;                                                                       \
		const void *q = take(r, sizeof v);                                                \
		if (q)                                                                            \
			memcpy(&v, q, sizeof v);                                                  \
		return v;                                                                         \
	}
GETTER(get_u8, uint8_t)
GETTER(get_u32, uint32_t)
GETTER(get_u64, uint64_t)
GETTER(get_i64, int64_t)
GETTER(get_f64, double)
GETTER(get_f32, float)

static int bad(amp_ctx *ctx, const char *path, const char *why)
{
	return amp_fail(ctx, AMP_EFORMAT, "checkpoint '%s': %s", path, why);
}

/* The passes of a load over the payload after the note (r positioned there): the check that
 * the file fits the context (nothing changes), then the allocation of every tensor the load
 * needs (moments and gradients the context lacks, zero and stale: the context means what it
 * meant if one fails), then the copy, which cannot fail.  So a load that fails leaves the
 * context as it was. */
enum { LOAD_CHECK, LOAD_ALLOC, LOAD_APPLY };
static int load_pass(amp_ctx *ctx, const char *path, rbuf *r, uint32_t version, int apply,
                     uint64_t *need)
{
	char why[400], sa[64], sb[64];
	int64_t step = get_i64(r);
	uint64_t rng = get_u64(r), seq = get_u64(r);
	int64_t st_steps = get_i64(r), st_over = get_i64(r), st_skip = get_i64(r),
	        st_clip = get_i64(r);
	uint32_t dynamic = get_u32(r), flags = get_u32(r);
	int file_fp32 = (flags & 1u) != 0;
	uint32_t owner = flags >> 1;
	int ctx_fp32 = amp_mode_info_of(ctx->cfg.mode)->kind == AMP_KIND_FP32;
	double scale = get_f64(r);
	int64_t clean = get_i64(r);
	uint32_t n_params = get_u32(r);
	if (r->short_read)
		return bad(ctx, path, "truncated (the file ends inside its header fields)");
	/* a scale a scaler can hold (loss_scale's range: 1/scale finite) */
	if (step < -1 || !(scale >= (double)FLT_MIN && scale <= (double)FLT_MAX) || clean < 0)
		return bad(ctx, path, "damaged (step counter or loss scale out of range)");
	/* The kind of scaling is the configuration's (precision_mode, loss_scale): a file that
	 * disagrees was saved under another one, and its scale would run under the wrong rules. */
	/* An FP32 mode scales nothing, on either side: its scaler waits unused. */
	if (!file_fp32 && !ctx_fp32 &&
	    ((dynamic != 0) != ctx->scaler.dynamic || (!dynamic && scale != ctx->scaler.scale))) {
		char fs[48], cs[48];
		snprintf(fs, sizeof fs, dynamic ? "dynamic loss scaling" : "a static loss scale of %g",
		         scale);
		snprintf(cs, sizeof cs,
		         ctx->scaler.dynamic ? "dynamic loss scaling" : "a static loss scale of %g",
		         ctx->scaler.scale);
		snprintf(why, sizeof why,
		         "saved with %s, this context has %s (load it under the precision_mode and "
		         "loss_scale it was saved with)", fs, cs);
		return amp_fail(ctx, AMP_ECONFIG, "checkpoint '%s': %s", path, why);
	}
	if (n_params != (uint32_t)ctx->n_params) {
		snprintf(why, sizeof why,
		         "holds %u parameters, this context has %d (create the same parameters "
		         "before loading)", n_params, ctx->n_params);
		return bad(ctx, path, why);
	}
	for (amp_param *p = ctx->params; p; p = p->next) {
		amp_tensor *m = p->master;
		uint32_t ll = get_u32(r);
		/* any length the file holds: save wrote it whole */
		const char *label = take(r, ll);
		uint32_t ndim = get_u32(r);
		amp_shape s = {0};
		s.ndim = (int)(ndim <= AMP_MAX_DIMS ? ndim : 0);
		for (int i = 0; i < AMP_MAX_DIMS; i++)
			s.d[i] = get_i64(r);
		if (r->short_read || !label || ndim > AMP_MAX_DIMS)
			return bad(ctx, path, "truncated or damaged (in a parameter's header)");
		if (ll != strlen(p->label) || memcmp(label, p->label, ll) != 0 ||
		    !amp_shape_eq(s, m->shape)) {
			snprintf(why, sizeof why,
			         "parameter '%.*s' %s in the file, '%s' %s in this context "
			         "(parameters must be created in the same order with the same shapes)",
			         (int)(ll < 100 ? ll : 100), label, amp_shape_str(s, sa, sizeof sa), p->label,
			         amp_shape_str(m->shape, sb, sizeof sb));
			return bad(ctx, path, why);
		}
		size_t bytes = (size_t)m->numel * sizeof(float);
		const void *w = take(r, bytes);
		uint8_t has_m = get_u8(r);
		const void *mv = has_m ? take(r, bytes) : NULL;
		uint8_t has_v = get_u8(r);
		const void *vv = has_v ? take(r, bytes) : NULL;
		if (r->short_read)
			return bad(ctx, path, "truncated (inside a parameter's values)");
		if (has_m > 1 || has_v > 1)
			return bad(ctx, path, "damaged (optimizer state flags)");
		if (apply == LOAD_CHECK) { /* the moments the load will allocate */
			*need += (has_m && !p->opt_m ? bytes : 0) + (has_v && !p->opt_v ? bytes : 0);
			continue;
		}
		amp_tensor **slots[2] = {&p->opt_m, &p->opt_v};
		const void *src[2] = {mv, vv};
		if (apply == LOAD_ALLOC) { /* zero (persistent tensors are): a fresh state's */
			for (int k = 0; k < 2; k++)
				if (src[k] && !*slots[k] &&
				    !(*slots[k] = amp_alloc_persistent(ctx, AMP_F32, m->shape,
				                                       AMP_MEM_OPTIMIZER)))
					return amp_oom(ctx);
			continue;
		}
		memcpy(m->data, w, bytes);
		amp_param_touched(p);
		p->master_partial = p->moments_partial =
		    0; /* master and moments whole, as loaded */
		for (int k = 0; k < 2; k++) {
			if (src[k])
				memcpy((*slots[k])->data, src[k], bytes);
			else if (*slots[k]) /* absent is zero: what a fresh state starts from */
				memset((*slots[k])->data, 0, bytes);
		}
	}
	uint32_t n_opt = get_u32(r), have = 0;
	for (amp_optim *o = ctx->optims; o; o = o->next)
		have++;
	if (r->short_read)
		return bad(ctx, path, "truncated (before the optimizers)");
	if (n_opt != have) {
		snprintf(why, sizeof why, "holds %u optimizers, this context has %u", n_opt, have);
		return bad(ctx, path, why);
	}
	for (amp_optim *o = ctx->optims; o; o = o->next) {
		uint32_t kind = get_u32(r);
		int64_t t = get_i64(r);
		float lr = get_f32(r);
		if (r->short_read)
			return bad(ctx, path, "truncated (inside the optimizers)");
		if (t < 0 || !(lr >= 0) || !isfinite(lr))
			return bad(ctx, path, "damaged (an optimizer's update count or learning rate out "
			                      "of range)");
		if (kind != (uint32_t)o->kind) {
			snprintf(why, sizeof why, "an optimizer is %s in the file, %s in this context",
			         kind == OPTIM_SGD ? "SGD" : kind == OPTIM_ADAMW ? "AdamW" : "unknown",
			         o->kind == OPTIM_SGD ? "SGD" : "AdamW");
			return bad(ctx, path, why);
		}
		if (apply == LOAD_APPLY) {
			o->t = t;
			amp_optim_set_lr(o, lr);
		}
	}
	/* the gradients held between steps: none before format 2 */
	const unsigned char *grads = r->p + r->off;
	for (amp_param *p = ctx->params; version >= 2 && p; p = p->next) {
		uint8_t has_g = get_u8(r);
		if (has_g > 1)
			return bad(ctx, path, "damaged (gradient flags)");
		if (has_g)
			take(r, (size_t)p->master->numel * sizeof(float));
		if (has_g && !p->master->grad)
			*need += (uint64_t)p->master->numel * sizeof(float);
		if (r->short_read)
			return bad(ctx, path, "truncated (inside the gradients)");
		/* a gradient allocated ahead is stale (zero in meaning) until the copy */
		if (apply == LOAD_ALLOC && has_g && !p->master->grad) {
			if (!(p->master->grad = amp_alloc_persistent(ctx, AMP_F32, p->master->shape,
			                                             AMP_MEM_GRADS)))
				return amp_oom(ctx);
			p->grad_stale = 1;
		}
	}
	if (r->off != r->len)
		return bad(ctx, path, "damaged (bytes after the last section)");
	if (owner > n_opt)
		return bad(ctx, path, "damaged (the optimizer state's owner is out of range)");
	if (apply == LOAD_APPLY) {
		ctx->state_owner = NULL;
		uint32_t i = 0;
		for (amp_optim *o = ctx->optims; o; o = o->next)
			if (++i == owner)
				ctx->state_owner = o;
		ctx->step = step;
		ctx->rng_state = rng;
		ctx->seq = seq;
		ctx->stats.steps = st_steps;
		ctx->stats.overflow_steps = st_over;
		ctx->stats.skipped_steps = st_skip;
		ctx->stats.clipped_steps = st_clip;
		/* a scaler the file's run kept unused (saved under FP32) is taken when it is of the
		 * context's kind (it waited there, as it was, for a scaling mode), not otherwise */
		if (!file_fp32 || ctx_fp32 || (dynamic != 0) == ctx->scaler.dynamic) {
			ctx->scaler.dynamic = dynamic != 0;
			ctx->scaler.scale = scale;
			ctx->scaler.clean_steps = clean;
			ctx->scaler_used = !file_fp32; /* a scaler in use when it was saved */
		}
		/* the gradients are the checkpoint's, not what the context holds (a rollback after
		 * a bad step must not take its gradients along) */
		for (amp_param *p = ctx->params; p; p = p->next) {
			size_t bytes = (size_t)p->master->numel * sizeof(float);
			int has_g = version >= 2 && *grads++;
			p->grad_kept = NULL;
			p->grad_counted = 0;
			p->grad_stale = p->master->grad != NULL;
			if (!has_g)
				continue;
			memcpy(p->master->grad->data, grads, bytes); /* allocated by LOAD_ALLOC */
			p->grad_stale = 0;
			grads += bytes;
		}
	}
	return AMP_OK;
}

/* A checkpoint file read and checked as far as it can be without a context: header, version,
 * length, checksum, and the note (format 3 on).  Whole (note_only 0): *buf (amp_mem_free it)
 * holds the file, r the payload positioned after the note.  note_only 1: *buf holds the header
 * and the note alone, the rest streamed through the checksum (reading a note costs no memory
 * of the size of the model).  Either way note / note_len point at the note's bytes in buf (not
 * NUL-terminated).  Returns AMP_OK, or an AMP_E* code with the reason in why. */
typedef struct ckpt_file {
	unsigned char *buf;
	uint32_t version, crc;
	uint64_t len; /* payload bytes */
	const char *note;
	uint32_t note_len;
	rbuf r;
} ckpt_file;

/* Reads up to n bytes (to the end of the file); returns the count. */
static size_t read_upto(int fd, void *p, size_t n)
{
	size_t got = 0;
	while (got < n) {
		ssize_t k = read(fd, (char *)p + got, n - got);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			break;
		got += (size_t)k;
	}
	return got;
}

static int read_file(const char *path, ckpt_file *f, int note_only, char *why, size_t wl)
{
	memset(f, 0, sizeof *f);
	/* non-blocking: a FIFO is refused below instead of waiting for a writer */
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) != 0) {
		int e = errno;
		if (fd >= 0)
			close(fd);
		snprintf(why, wl, "checkpoint '%s': cannot open: %s", path, strerror(e));
		return AMP_EIO;
	}
	if (!S_ISREG(st.st_mode)) {
		close(fd);
		snprintf(why, wl, "checkpoint '%s': not a regular file", path);
		return AMP_EIO;
	}
	size_t size = (size_t)st.st_size;
	unsigned char hdr[CKPT_HDR];
	size_t want = size < CKPT_HDR ? size : CKPT_HDR;
	uint32_t hdr_len = 0, zero = 0;
	const char *bad_why = NULL;
	char w[160];
	int rc = AMP_OK;
	unsigned char *buf = NULL;
	if (read_upto(fd, hdr, want) != want) {
		snprintf(why, wl, "checkpoint '%s': read error", path);
		rc = AMP_EIO;
		goto out;
	}
	if (size < 8 || memcmp(hdr, CKPT_MAGIC, 8) != 0) {
		bad_why = "not an ampkit checkpoint (bad magic)";
		goto out;
	}
	if (size < CKPT_HDR) {
		bad_why = "truncated (shorter than its header)";
		goto out;
	}
	memcpy(&f->version, hdr + 8, 4);
	memcpy(&hdr_len, hdr + 12, 4);
	memcpy(&f->len, hdr + 16, 8);
	memcpy(&f->crc, hdr + 24, 4);
	memcpy(&zero, hdr + 28, 4);
	if (f->version > CKPT_VERSION) {
		snprintf(
		    w, sizeof w,
		    "format version %u is newer than this libamprt reads (%u); use the libamprt "
		    "that wrote it",
		    f->version, CKPT_VERSION);
		bad_why = w;
	} else if (f->version == 0 || hdr_len != CKPT_HDR || zero != 0) {
		bad_why = "damaged header";
	} else if (f->len != size - CKPT_HDR) {
		snprintf(w, sizeof w, "truncated or damaged (%llu payload bytes, %llu expected)",
		         (unsigned long long)(size - CKPT_HDR), (unsigned long long)f->len);
		bad_why = w;
	}
	if (bad_why)
		goto out;
	/* the note's length (format 3 on), checked before its bytes are taken */
	unsigned char lenb[4] = {0};
	uint32_t note_len = 0;
	if (f->version >= 3) {
		if (f->len < 4 || read_upto(fd, lenb, 4) != 4) {
			bad_why = "truncated (inside the note)";
			goto out;
		}
		memcpy(&note_len, lenb, 4);
		if (note_len > AMP_CHECKPOINT_NOTE_MAX) {
			bad_why = "damaged (the note)";
			goto out;
		}
		if (note_len > f->len - 4) {
			bad_why = "truncated (inside the note)";
			goto out;
		}
	}
	size_t after = f->version >= 3 ? 4 : 0; /* the note's length, read already */
	size_t head = after + note_len;         /* payload bytes up to the note's end */
	size_t keep = note_only ? head : (size_t)f->len;
	if (!(buf = amp_mem_realloc(NULL, CKPT_HDR + keep + 1))) {
		snprintf(why, wl, "checkpoint '%s': out of memory", path);
		rc = AMP_ENOMEM;
		goto out;
	}
	memcpy(buf, hdr, CKPT_HDR);
	memcpy(buf + CKPT_HDR, lenb, after);
	if (read_upto(fd, buf + CKPT_HDR + after, keep - after) != keep - after) {
		snprintf(why, wl, "checkpoint '%s': read error", path);
		rc = AMP_EIO;
		goto out;
	}
	/* the checksum over the whole payload: what is in buf, then the rest in chunks */
	uLong crc = crc32_z(0, buf + CKPT_HDR, keep);
	for (uint64_t left = f->len - keep; left > 0;) {
		unsigned char chunk[64 * 1024];
		size_t n = left < sizeof chunk ? (size_t)left : sizeof chunk;
		if (read_upto(fd, chunk, n) != n) {
			snprintf(why, wl, "checkpoint '%s': read error", path);
			rc = AMP_EIO;
			goto out;
		}
		crc = crc32_z(crc, chunk, n);
		left -= n;
	}
	if ((uint32_t)crc != f->crc) {
		bad_why = "damaged (checksum mismatch)";
		goto out;
	}
	f->r = (rbuf){buf + CKPT_HDR, keep, 0, 0};
	f->note_len = f->version >= 3 ? get_u32(&f->r) : 0;
	f->note = take(&f->r, f->note_len);
	if (memchr(f->note, '\0', f->note_len))
		bad_why = "damaged (the note)";
out:
	close(fd);
	if (bad_why) {
		snprintf(why, wl, "checkpoint '%s': %s", path, bad_why);
		rc = AMP_EFORMAT;
	}
	if (rc != AMP_OK) {
		amp_mem_free(buf);
		memset(f, 0, sizeof *f);
		return rc;
	}
	f->buf = buf;
	return AMP_OK;
}

int amp_checkpoint_read_note(const char *path, char **note, char *err, size_t errlen)
{
	char why[PATH_MAX + 256];
	if (note)
		*note = NULL;
	if (!path || !note) {
		if (err && errlen)
			snprintf(err, errlen, "amp_checkpoint_read_note: NULL argument");
		return AMP_EINVAL;
	}
	ckpt_file f;
	int rc = read_file(path, &f, 1, why, sizeof why);
	if (rc == AMP_OK && !(*note = malloc((size_t)f.note_len + 1))) {
		snprintf(why, sizeof why, "checkpoint '%s': out of memory", path);
		rc = AMP_ENOMEM;
	}
	if (rc == AMP_OK) {
		memcpy(*note, f.note, f.note_len);
		(*note)[f.note_len] = '\0';
	} else if (err && errlen) {
		snprintf(err, errlen, "%s", why);
	}
	amp_mem_free(f.buf);
	return rc;
}

int amp_checkpoint_load(amp_ctx *ctx, const char *path)
{
	if (!ctx || !path)
		return amp_fail(ctx, AMP_EINVAL, "amp_checkpoint_load: NULL argument");
	if (ctx->in_step)
		return amp_fail(ctx, AMP_ESTATE,
		                "amp_checkpoint_load: step %lld is open (load between steps)",
		                (long long)ctx->step);
	char why[PATH_MAX + 256];
	ckpt_file f;
	int rc = read_file(path, &f, 0, why, sizeof why);
	if (rc != AMP_OK)
		return amp_fail(ctx, rc, "%s", why);
	rbuf r = f.r;
	size_t at = r.off; /* the payload after the note */
	uint64_t need = 0; /* bytes of tensors the load allocates */
	char *note = NULL;
	rc = load_pass(ctx, path, &r, f.version, LOAD_CHECK, &need);
	/* the note's copy made before anything changes */
	if (rc == AMP_OK && f.note_len && !(note = amp_mem_realloc(NULL, f.note_len + 1u)))
		rc = amp_fail(ctx, AMP_ENOMEM, "checkpoint '%s': out of memory", path);
	if (note) {
		memcpy(note, f.note, f.note_len);
		note[f.note_len] = '\0';
	}
	if (rc == AMP_OK) { /* memory_limit refuses before anything changes */
		ctx->cur_what = "amp_checkpoint_load";
		ctx->cur_label = NULL;
		rc = amp_mem_check(ctx, need);
		ctx->cur_what = NULL;
	}
	for (int pass = LOAD_ALLOC; rc == AMP_OK && pass <= LOAD_APPLY; pass++) {
		r.off = at;
		rc = load_pass(ctx, path, &r, f.version, pass, &need);
	}
	if (rc == AMP_OK) { /* the file's note replaces the context's (none: none) */
		amp_mem_free(ctx->ckpt_note);
		ctx->ckpt_note = note;
		note = NULL;
		/* what data-parallel ranks compare (amp_dist_shared_state): the training state */
		ctx->ckpt_loads++;
		ctx->update_hist = 0; /* the updates' history starts again here */
		ctx->ckpt_crc = f.len > at + RUN_COUNTERS
		                    ? crc32_of(f.buf + CKPT_HDR + at + RUN_COUNTERS,
		                               (size_t)f.len - at - RUN_COUNTERS)
		                    : f.crc;
	}
	amp_mem_free(note);
	amp_mem_free(f.buf);
	return rc;
}

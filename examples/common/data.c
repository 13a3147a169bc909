/* data.c — Fashion-MNIST IDX loader (zlib; reads gzip and plain files alike) and the KJV text
 * loader (popen of the `bible` program), with a byte vocabulary for the language model.
 *
 * Every failure names the file or command and, when the data is simply not installed, says how
 * to install it.
 */
#include "data.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <zlib.h>

/* ---- IDX ----------------------------------------------------------------------------------- */

static uint32_t be32(const unsigned char *b)
{
	return (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
}

/* Reads exactly n bytes; returns what was read (short on end of file or error). */
static size_t gz_read_all(gzFile f, void *dst, size_t n)
{
	size_t done = 0;
	while (done < n) {
		unsigned chunk = n - done > (1u << 30) ? 1u << 30 : (unsigned)(n - done);
		int got = gzread(f, (char *)dst + done, chunk);
		if (got <= 0)
			break;
		done += (size_t)got;
	}
	return done;
}

int ex_idx_read(const char *path, int ndim, uint8_t **data, int64_t *dims, char *err, size_t errlen)
{
	*data = NULL;
	errno = 0;
	gzFile f = gzopen(path, "rb");
	if (!f) {
		snprintf(err, errlen, "cannot open '%s': %s\n%s", path,
		         errno ? strerror(errno) : "cannot allocate zlib state", EX_FASHION_HINT);
		return -1;
	}
	int rc = -1;
	uint8_t *buf = NULL;
	unsigned char head[4 + 4 * 3];
	size_t want = 4 + 4 * (size_t)ndim;
	if (ndim < 1 || ndim > 3) {
		snprintf(err, errlen, "'%s': IDX rank %d not supported", path, ndim);
		goto out;
	}
	if (gz_read_all(f, head, 4) != 4) {
		snprintf(err, errlen, "'%s': truncated IDX header (not an IDX file?)", path);
		goto out;
	}
	uint32_t magic = be32(head), expect = 0x00000800u | (uint32_t)ndim;
	if (magic != expect) {
		snprintf(err, errlen,
		         "'%s': bad magic 0x%08x (expected 0x%08x: unsigned bytes, %d dimensions)",
		         path, magic, expect, ndim);
		goto out;
	}
	if (gz_read_all(f, head + 4, want - 4) != want - 4) {
		snprintf(err, errlen, "'%s': truncated IDX header", path);
		goto out;
	}
	int64_t total = 1;
	for (int i = 0; i < ndim; i++) {
		dims[i] = be32(head + 4 + 4 * i);
		if (dims[i] < 1 || dims[i] > (1 << 24)) {
			snprintf(err, errlen, "'%s': dimension %d is %lld, out of range", path, i,
			         (long long)dims[i]);
			goto out;
		}
		total *= dims[i];
		if (total > ((int64_t)1 << 32)) {
			snprintf(err, errlen, "'%s': more than 2^32 bytes of data", path);
			goto out;
		}
	}
	buf = malloc((size_t)total);
	if (!buf) {
		snprintf(err, errlen, "'%s': out of memory for %lld bytes", path, (long long)total);
		goto out;
	}
	size_t got = gz_read_all(f, buf, (size_t)total);
	if (got != (size_t)total) {
		int zerr;
		const char *zmsg = gzerror(f, &zerr);
		snprintf(err, errlen, "'%s': truncated: %zu of %lld data bytes%s%s", path, got,
		         (long long)total, zerr < 0 ? ": " : "", zerr < 0 ? zmsg : "");
		goto out;
	}
	unsigned char extra;
	if (gzread(f, &extra, 1) != 0) {
		snprintf(err, errlen, "'%s': trailing bytes after %lld data bytes", path,
		         (long long)total);
		goto out;
	}
	*data = buf;
	buf = NULL;
	rc = 0;
out:
	free(buf);
	gzclose(f);
	return rc;
}

/* ---- Fashion-MNIST ------------------------------------------------------------------------- */

int ex_fashion_load(const char *dir, const char *split, ex_images *out, char *err, size_t errlen)
{
	memset(out, 0, sizeof *out);
	char ipath[4096], lpath[4096];
	if (!dir)
		dir = EX_FASHION_DIR;
	snprintf(ipath, sizeof ipath, "%s/%s-images-idx3-ubyte.gz", dir, split);
	snprintf(lpath, sizeof lpath, "%s/%s-labels-idx1-ubyte.gz", dir, split);
	uint8_t *img = NULL, *lab = NULL;
	int64_t idims[3], ldims[1];
	int rc = -1;
	if (ex_idx_read(ipath, 3, &img, idims, err, errlen) ||
	    ex_idx_read(lpath, 1, &lab, ldims, err, errlen))
		goto out;
	if (idims[0] != ldims[0]) {
		snprintf(err, errlen, "'%s' holds %lld images but '%s' %lld labels", ipath,
		         (long long)idims[0], lpath, (long long)ldims[0]);
		goto out;
	}
	int64_t n = idims[0], px = idims[1] * idims[2];
	out->pixels = malloc((size_t)(n * px) * sizeof(float));
	out->labels = malloc((size_t)n * sizeof(int32_t));
	if (!out->pixels || !out->labels) {
		snprintf(err, errlen, "'%s': out of memory", ipath);
		goto out;
	}
	for (int64_t i = 0; i < n; i++) {
		if (lab[i] >= EX_FASHION_CLASSES) {
			snprintf(err, errlen, "'%s': label %u at index %lld is not a class 0..9",
			         lpath, lab[i], (long long)i);
			goto out;
		}
		out->labels[i] = lab[i];
	}
	for (int64_t i = 0; i < n * px; i++)
		out->pixels[i] = (float)img[i] * (1.0f / 255.0f);
	out->n = n;
	out->rows = (int)idims[1];
	out->cols = (int)idims[2];
	rc = 0;
out:
	free(img);
	free(lab);
	if (rc)
		ex_images_free(out);
	return rc;
}

void ex_images_free(ex_images *im)
{
	if (!im)
		return;
	free(im->pixels);
	free(im->labels);
	memset(im, 0, sizeof *im);
}

void ex_images_standardize(ex_images *im, float mean, float std)
{
	const float inv = 1.0f / std;
	int64_t n = im->n * im->rows * im->cols;
	for (int64_t i = 0; i < n; i++)
		im->pixels[i] = (im->pixels[i] - mean) * inv;
}

/* ---- text ---------------------------------------------------------------------------------- */

/* A verse starts with spaces, its number and a space: "  12 And God said". */
static size_t verse_prefix(const char *line, size_t len)
{
	size_t i = 0;
	while (i < len && line[i] == ' ')
		i++;
	if (i == 0)
		return 0;
	size_t digits = i;
	while (i < len && line[i] >= '0' && line[i] <= '9')
		i++;
	if (i == digits || i >= len || line[i] != ' ')
		return 0;
	return i + 1;
}

size_t ex_kjv_clean(const char *raw, size_t n, char *dst)
{
	size_t out = 0, pos = 0;
	int after_blank = 1, in_verse = 0;
	while (pos < n) {
		const char *line = raw + pos;
		const char *nl = memchr(line, '\n', n - pos);
		size_t len = nl ? (size_t)(nl - line) : n - pos;
		pos += len + (nl ? 1 : 0);
		while (len > 0 && (line[len - 1] == ' ' || line[len - 1] == '\r'))
			len--;
		if (len == 0) {
			after_blank = 1;
			continue;
		}
		size_t skip = verse_prefix(line, len);
		if (skip) {
			if (in_verse)
				dst[out++] = '\n';
			in_verse = 1;
		} else if (after_blank) {
			/* A heading ("Genesis 1", "1 Kings 3") sits between blank lines. */
			after_blank = 0;
			continue;
		} else {
			/* The continuation of a wrapped verse. */
			while (skip < len && line[skip] == ' ')
				skip++;
			if (in_verse)
				dst[out++] = ' ';
		}
		after_blank = 0;
		memcpy(dst + out, line + skip, len - skip);
		out += len - skip;
	}
	if (in_verse)
		dst[out++] = '\n';
	dst[out] = 0;
	return out;
}

int ex_kjv_load(ex_text *out, char *err, size_t errlen)
{
	/* A wide line keeps every verse on one line whatever $COLUMNS says. */
	static const char cmd[] = "bible -l1000 \"Gen1:1-Rev22:21\" 2>/dev/null";
	memset(out, 0, sizeof *out);
	FILE *p = popen(cmd, "r");
	if (!p) {
		snprintf(err, errlen, "cannot run 'bible': %s\n%s", strerror(errno), EX_KJV_HINT);
		return -1;
	}
	size_t cap = 1 << 22, len = 0;
	char *raw = malloc(cap);
	while (raw) {
		if (len == cap) {
			char *grown = realloc(raw, cap * 2);
			if (!grown) {
				free(raw);
				raw = NULL;
				break;
			}
			raw = grown;
			cap *= 2;
		}
		size_t got = fread(raw + len, 1, cap - len, p);
		if (got == 0)
			break;
		len += got;
	}
	int status = pclose(p);
	if (!raw) {
		snprintf(err, errlen, "'bible': out of memory");
		return -1;
	}
	if (status == -1 || !WIFEXITED(status) || WEXITSTATUS(status) != 0 || len < 1000) {
		free(raw);
		if (status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 127)
			snprintf(err, errlen, "cannot run 'bible': command not found\n%s",
			         EX_KJV_HINT);
		else
			snprintf(err, errlen, "'%s' failed (status %d, %zu bytes of output)\n%s",
			         cmd, status, len, EX_KJV_HINT);
		return -1;
	}
	out->data = malloc(len + 1);
	if (!out->data) {
		free(raw);
		snprintf(err, errlen, "'bible': out of memory");
		return -1;
	}
	out->len = ex_kjv_clean(raw, len, out->data);
	free(raw);
	return 0;
}

int ex_text_load_file(const char *path, ex_text *out, char *err, size_t errlen)
{
	memset(out, 0, sizeof *out);
	FILE *f = fopen(path, "rb");
	struct stat st;
	if (!f || fstat(fileno(f), &st) != 0) {
		snprintf(err, errlen, "cannot open '%s': %s", path, strerror(errno));
		if (f)
			fclose(f);
		return -1;
	}
	int rc = -1;
	if (S_ISDIR(st.st_mode)) {
		snprintf(err, errlen, "'%s' is a directory, not a text file", path);
		goto out;
	}
	/* read to the end, growing the buffer: a pipe (--text <(...)) has no size to ask */
	size_t cap = S_ISREG(st.st_mode) ? (size_t)st.st_size + 2 : 1 << 16;
	for (;;) {
		if (out->len + 1 >= cap || !out->data) {
			cap = out->data ? cap * 2 : cap;
			char *grown = realloc(out->data, cap);
			if (!grown) {
				snprintf(err, errlen, "'%s': out of memory (%zu bytes)", path, cap);
				goto out;
			}
			out->data = grown;
		}
		size_t want = cap - 1 - out->len, n = fread(out->data + out->len, 1, want, f);
		out->len += n;
		if (n < want) /* the end, or an error */
			break;
	}
	if (ferror(f)) {
		snprintf(err, errlen, "cannot read '%s': %s", path, strerror(errno));
		goto out;
	}
	out->data[out->len] = 0;
	rc = 0;
out:
	fclose(f);
	if (rc)
		ex_text_free(out);
	return rc;
}

void ex_text_free(ex_text *t)
{
	if (!t)
		return;
	free(t->data);
	t->data = NULL;
	t->len = 0;
}

void ex_vocab_build(ex_vocab *v, const char *text, size_t len)
{
	int seen[256] = {0};
	for (size_t i = 0; i < len; i++)
		seen[(unsigned char)text[i]] = 1;
	v->size = 0;
	for (int c = 0; c < 256; c++) {
		v->ids[c] = -1;
		if (seen[c]) {
			v->ids[c] = (int16_t)v->size;
			v->chars[v->size++] = (unsigned char)c;
		}
	}
}

/* npy.c — .npy format 1.0 files, the shape text of the dumps table, safe file names.
 *
 * The data written is the dump blob itself (little-endian, as numpy's '<' descr says), so NaN
 * payloads and infinities survive bit for bit.  BF16 is the exception: numpy has no bfloat16
 * dtype, so a bf16 tensor is exported by default as exact FP32 ('<f4', dump_npy_widen_bf16):
 * every bf16 value is an fp32 value (the top 16 bits), NaN payloads and signs included, so
 * nothing is rounded and `astype` back to bf16 in a framework gives the dumped bits.  Files are created with openat in a directory
 * the caller opened, from names that cannot contain '/', and never through a symbolic link.
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "dump.h"

int dump_parse_shape(const char *text, int64_t *dims)
{
	const char *p = text;
	int ndim = 0;
	uint64_t product = 1;

	if (!p)
		return -1;
	while (*p == ' ')
		p++;
	if (*p++ != '(')
		return -1;
	for (;;) {
		while (*p == ' ')
			p++;
		if (*p == ')')
			break;
		if (!isdigit((unsigned char)*p) || ndim == DUMP_MAX_DIMS)
			return -1;
		uint64_t v = 0;
		while (isdigit((unsigned char)*p)) {
			v = v * 10 + (uint64_t)(*p++ - '0');
			if (v > ((uint64_t)1 << 62))
				return -1;
		}
		if (v && product > ((uint64_t)1 << 62) / v)
			return -1;
		product *= v;
		dims[ndim++] = (int64_t)v;
		while (*p == ' ')
			p++;
		if (*p == ',') {
			p++;
			continue;
		}
		if (*p != ')')
			return -1;
		break;
	}
	p++; /* ')' */
	while (*p == ' ')
		p++;
	return *p ? -1 : ndim;
}

uint64_t dump_shape_count(const int64_t *dims, int ndim)
{
	uint64_t n = 1;
	for (int i = 0; i < ndim; i++)
		n *= (uint64_t)dims[i];
	return n;
}

const char *dump_npy_descr(dump_dtype dt)
{
	switch (dt) {
	case DUMP_DT_F32:
	case DUMP_DT_BF16: return "<f4";
	case DUMP_DT_F16: return "<f2";
	case DUMP_DT_I32: return "<i4";
	default: return NULL;
	}
}

size_t dump_npy_header(char *buf, size_t len, const char *descr, const int64_t *dims, int ndim)
{
	char dict[512];
	size_t used = 0;
	int n = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (",
	                 descr);
	if (n < 0 || (size_t)n >= sizeof dict)
		return 0;
	used = (size_t)n;
	for (int i = 0; i < ndim; i++) {
		n = snprintf(dict + used, sizeof dict - used, i ? ", %lld" : "%lld",
		             (long long)dims[i]);
		if (n < 0 || (size_t)n >= sizeof dict - used)
			return 0;
		used += (size_t)n;
	}
	n = snprintf(dict + used, sizeof dict - used, "%s), }", ndim == 1 ? "," : "");
	if (n < 0 || (size_t)n >= sizeof dict - used)
		return 0;
	used += (size_t)n;

	/* magic (6) + version (2) + header length (2) + dict + padding + '\n' */
	size_t total = (10 + used + 1 + 63) / 64 * 64;
	if (total > len || total - 10 > 0xffff)
		return 0;
	memcpy(buf, "\x93NUMPY\x01\x00", 8);
	buf[8] = (char)((total - 10) & 0xff);
	buf[9] = (char)((total - 10) >> 8);
	memcpy(buf + 10, dict, used);
	memset(buf + 10 + used, ' ', total - 10 - used - 1);
	buf[total - 1] = '\n';
	return total;
}

char *dump_sanitize_name(const char *name, char *out, size_t len)
{
	size_t max = len - 1 < 100 ? len - 1 : 100;
	size_t o = 0;

	for (const char *p = name ? name : ""; *p && o < max; p++) {
		unsigned char c = (unsigned char)*p;
		if (isalnum(c) || c == '_' || c == '-')
			out[o++] = (char)c;
		else if (c == '.' && o > 0 && isalnum((unsigned char)out[o - 1]))
			out[o++] = '.';
		else
			out[o++] = '_';
	}
	out[o] = '\0';
	if (o == 0)
		snprintf(out, len, "%s", "tensor");
	return out;
}

static int write_all(int fd, const void *buf, size_t n)
{
	const unsigned char *p = buf;
	while (n) {
		ssize_t w = write(fd, p, n);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

int dump_npy_write(int dirfd, const char *file, int force, const char *descr, const int64_t *dims,
                   int ndim, const void *data, size_t bytes)
{
	char header[1024];
	size_t elem = descr && strlen(descr) == 3 ? (size_t)(descr[2] - '0') : 0;

	if (!file || !*file || strchr(file, '/') || strcmp(file, ".") == 0 ||
	    strcmp(file, "..") == 0 || (elem != 2 && elem != 4 && elem != 8) ||
	    dump_shape_count(dims, ndim) * elem != bytes) {
		errno = EINVAL;
		return -1;
	}
	size_t hlen = dump_npy_header(header, sizeof header, descr, dims, ndim);
	if (!hlen) {
		errno = EINVAL;
		return -1;
	}
	/* non-blocking, so that a FIFO in its place is refused instead of waited on (no reader:
	 * ENXIO; a reader: EINVAL, not a regular file, below) */
	int flags = O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK |
	            (force ? O_TRUNC : O_EXCL);
	int fd = openat(dirfd, file, flags, 0666);
	if (fd < 0)
		return -1;
	struct stat st;
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		errno = EINVAL;
		return -1;
	}
	if (write_all(fd, header, hlen) != 0 || write_all(fd, data, bytes) != 0) {
		int e = errno;
		close(fd);
		unlinkat(dirfd, file, 0);
		errno = e;
		return -1;
	}
	if (close(fd) != 0) {
		int e = errno;
		unlinkat(dirfd, file, 0);
		errno = e;
		return -1;
	}
	return 0;
}

void dump_npy_widen_bf16(const void *data, size_t n, float *out)
{
	const unsigned char *p = data;
	for (size_t i = 0; i < n; i++) {
		uint16_t b;
		memcpy(&b, p + 2 * i, sizeof b);
		out[i] = dump_bf16_to_float(b);
	}
}

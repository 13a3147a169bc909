/* test_dump.c — ampdump's pure parts: half/bf16 conversion (exhaustive, against an exact
 * formula and against F16C where present), .npy headers and files byte for byte, tensor-name
 * sanitizing (path traversal included, plus random names), shape parsing, statistics and the
 * comparison metrics on known vectors (NaN and Inf handling included), the compare tolerance
 * (exact at its limit; every fp16 and bf16 rounding within the default rtol), and table formats.
 *
 * Metrics are compared with a tolerance of 1e-15 relative to FP64 closed forms.
 */
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../dump/dump.h"

#define DNAN ((double)NAN) /* NAN is a float constant */

/* ---- half and bf16 ------------------------------------------------------------------------- */

static uint32_t bits_of(float f)
{
	uint32_t u;
	memcpy(&u, &f, sizeof u);
	return u;
}

/* The value of a non-NaN binary16 from its definition. */
static double half_value(uint16_t h)
{
	int sign = h >> 15, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
	double v;
	if (exp == 0x1f)
		v = HUGE_VAL;
	else if (exp == 0)
		v = ldexp(mant, -24);
	else
		v = ldexp(1024 + mant, exp - 25);
	return sign ? -v : v;
}

Test(half, every_value_exact)
{
	for (uint32_t h = 0; h < 65536; h++) {
		float f = dump_half_to_float((uint16_t)h);
		double d = dump_half_to_double((uint16_t)h);
		int exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
		if (exp == 0x1f && mant) {
			cr_assert(isnan(f) && isnan(d), "0x%04x is NaN", h);
			cr_assert_eq(signbit(f) != 0, (h >> 15) != 0, "0x%04x keeps its sign", h);
			cr_assert_eq(bits_of(f),
			             ((h & 0x8000u) << 16) | 0x7fc00000u | ((uint32_t)mant << 13),
			             "0x%04x: quiet NaN with payload", h);
			continue;
		}
		cr_assert_eq((double)f, half_value((uint16_t)h), "0x%04x", h);
		cr_assert_eq(d, half_value((uint16_t)h), "0x%04x", h);
		cr_assert_eq(signbit(f) != 0, (h >> 15) != 0, "0x%04x sign (zeros too)", h);
	}
}

#if (defined(__x86_64__) || defined(__i386__)) && !defined(__clang__)
#include <immintrin.h>
__attribute__((target("avx,f16c"))) static float f16c_to_float(uint16_t h)
{
	return _cvtsh_ss(h);
}

Test(half, matches_f16c_bit_for_bit)
{
	__builtin_cpu_init();
	if (!__builtin_cpu_supports("avx") || !__builtin_cpu_supports("f16c")) {
		cr_log_info("no F16C on this CPU: skipped");
		return;
	}
	for (uint32_t h = 0; h < 65536; h++)
		cr_assert_eq(bits_of(dump_half_to_float((uint16_t)h)),
		             bits_of(f16c_to_float((uint16_t)h)), "0x%04x", h);
}
#endif

Test(half, known_values)
{
	cr_assert_eq(dump_half_to_double(0x3c00), 1.0);
	cr_assert_eq(dump_half_to_double(0xc000), -2.0);
	cr_assert_eq(dump_half_to_double(0x7bff), 65504.0);
	cr_assert_eq(dump_half_to_double(0x0400), ldexp(1.0, -14)); /* smallest normal */
	cr_assert_eq(dump_half_to_double(0x0001), ldexp(1.0, -24)); /* smallest subnormal */
	cr_assert_eq(dump_half_to_double(0x03ff), ldexp(1023.0, -24));
	cr_assert(isinf(dump_half_to_double(0x7c00)) && dump_half_to_double(0x7c00) > 0);
	cr_assert(isinf(dump_half_to_double(0xfc00)) && dump_half_to_double(0xfc00) < 0);
	cr_assert(isnan(dump_half_to_double(0x7e00)));
}

Test(bf16, conversion)
{
	cr_assert_eq(dump_bf16_to_float(0x3f80), 1.0f);
	cr_assert_eq(dump_bf16_to_float(0xc040), -3.0f);
	cr_assert(isinf(dump_bf16_to_float(0x7f80)));
	cr_assert_eq(bits_of(dump_bf16_to_float(0x7fc1)), 0x7fc10000u, "payload kept");
}

Test(elements, little_endian_decode)
{
	const unsigned char f16[] = {0x00, 0x3c, 0x00, 0xc0}; /* 1, -2 */
	const unsigned char f32[] = {0x00, 0x00, 0x20, 0x40}; /* 2.5 */
	const unsigned char i32[] = {0xfe, 0xff, 0xff, 0xff}; /* -2 */
	cr_assert_eq(dump_element(f16, DUMP_DT_F16, 0), 1.0);
	cr_assert_eq(dump_element(f16, DUMP_DT_F16, 1), -2.0);
	cr_assert_eq(dump_element(f32, DUMP_DT_F32, 0), 2.5);
	cr_assert_eq(dump_element(i32, DUMP_DT_I32, 0), -2.0);
	cr_assert_eq(dump_dtype_parse("fp16"), DUMP_DT_F16);
	cr_assert_eq(dump_dtype_parse("fp32"), DUMP_DT_F32);
	cr_assert_eq(dump_dtype_parse("int32"), DUMP_DT_I32);
	cr_assert_eq(dump_dtype_parse("fp8"), DUMP_DT_UNKNOWN);
	cr_assert_eq(dump_dtype_parse(NULL), DUMP_DT_UNKNOWN);
	cr_assert_eq(dump_dtype_size(DUMP_DT_F16), 2);
	cr_assert_eq(dump_dtype_size(DUMP_DT_UNKNOWN), 0);
}

/* ---- shapes -------------------------------------------------------------------------------- */

Test(shape, parses_valid_texts)
{
	int64_t d[DUMP_MAX_DIMS];
	cr_assert_eq(dump_parse_shape("(2,3)", d), 2);
	cr_assert(d[0] == 2 && d[1] == 3);
	cr_assert_eq(dump_parse_shape(" ( 4 , 8 ) ", d), 2);
	cr_assert(d[0] == 4 && d[1] == 8);
	cr_assert_eq(dump_parse_shape("()", d), 0);
	cr_assert_eq(dump_shape_count(d, 0), 1, "a scalar has one element");
	cr_assert_eq(dump_parse_shape("(5)", d), 1);
	cr_assert_eq(d[0], 5);
	cr_assert_eq(dump_parse_shape("(5,)", d), 1);
	cr_assert_eq(dump_parse_shape("(2,0,3)", d), 3);
	cr_assert_eq(dump_shape_count(d, 3), 0);
	cr_assert_eq(dump_parse_shape("(1,2,3,4,5,6,7,8)", d), 8);
	cr_assert_eq(dump_shape_count(d, 8), 40320);
}

Test(shape, rejects_invalid_texts)
{
	static const char *const bad[] = {
	    "",
	    "2,3",
	    "(2,3",
	    "(2,,3)",
	    "(,)",
	    "(a)",
	    "(-1)",
	    "(+1)",
	    "(2 3)",
	    "(2,3))",
	    "(2,3)x",
	    "(1,2,3,4,5,6,7,8,9)",
	    "(4294967296,4294967296)",
	    "(99999999999999999999)",
	    "((2))",
	};
	int64_t d[DUMP_MAX_DIMS];
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
		cr_assert_eq(dump_parse_shape(bad[i], d), -1, "'%s'", bad[i]);
	cr_assert_eq(dump_parse_shape(NULL, d), -1);
}

/* ---- names --------------------------------------------------------------------------------- */

static const char *sanitized(const char *name)
{
	static char out[128];
	return dump_sanitize_name(name, out, sizeof out);
}

Test(names, path_traversal_and_friends)
{
	cr_assert_str_eq(sanitized("../../etc/passwd"), "______etc_passwd");
	cr_assert_str_eq(sanitized("/etc/passwd"), "_etc_passwd");
	cr_assert_str_eq(sanitized(".."), "__");
	cr_assert_str_eq(sanitized("."), "_");
	cr_assert_str_eq(sanitized(".hidden"), "_hidden");
	cr_assert_str_eq(sanitized("a/../b"), "a____b");
	cr_assert_str_eq(sanitized("a..b"), "a._b");
	cr_assert_str_eq(sanitized("..\\..\\x"), "______x");
	cr_assert_str_eq(sanitized("fc1.weight"), "fc1.weight");
	cr_assert_str_eq(sanitized("layer-3_out"), "layer-3_out");
	cr_assert_str_eq(sanitized("a b\tc\n"), "a_b_c_");
	cr_assert_str_eq(sanitized("caf\xc3\xa9"), "caf__");
	cr_assert_str_eq(sanitized(""), "tensor");
	cr_assert_str_eq(sanitized(NULL), "tensor");
}

Test(names, length_limit)
{
	char longname[400], out[128], small[8];
	memset(longname, 'x', sizeof longname - 1);
	longname[sizeof longname - 1] = '\0';
	cr_assert_eq(strlen(dump_sanitize_name(longname, out, sizeof out)), 100);
	cr_assert_str_eq(dump_sanitize_name(longname, small, sizeof small), "xxxxxxx");
}

Test(names, random_names_stay_plain)
{
	unsigned seed = 12345;
	char name[64], out[128];
	static const char alphabet[] = "./\\.a.b/..\x01\xff-_ ";
	for (int k = 0; k < 20000; k++) {
		size_t n = (size_t)(k % 40);
		for (size_t i = 0; i < n; i++) {
			seed = seed * 1103515245u + 12345u;
			name[i] = alphabet[(seed >> 16) % (sizeof alphabet - 1)];
		}
		name[n] = '\0';
		dump_sanitize_name(name, out, sizeof out);
		cr_assert(out[0] != '\0' && out[0] != '.', "'%s' -> '%s'", name, out);
		cr_assert_null(strchr(out, '/'), "'%s' -> '%s'", name, out);
		cr_assert_null(strstr(out, ".."), "'%s' -> '%s'", name, out);
		for (const char *p = out; *p; p++)
			cr_assert(*p == '.' || *p == '_' || *p == '-' || (*p >= '0' && *p <= '9') ||
			              (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z'),
			          "'%s' -> '%s'", name, out);
	}
}

/* ---- .npy ---------------------------------------------------------------------------------- */

Test(npy, header_bytes)
{
	char buf[256];
	int64_t d[2] = {2, 3};
	size_t n = dump_npy_header(buf, sizeof buf, "<f2", d, 2);
	static const char dict[] = "{'descr': '<f2', 'fortran_order': False, 'shape': (2, 3), }";
	/* 10 + 60 + '\n' = 71 bytes: padded to 128, as numpy itself writes it */
	cr_assert_eq(n, 128);
	cr_assert_eq(memcmp(buf, "\x93NUMPY\x01\x00", 8), 0);
	cr_assert_eq((unsigned char)buf[8] | (unsigned char)buf[9] << 8, 128 - 10);
	cr_assert_eq(memcmp(buf + 10, dict, sizeof dict - 1), 0);
	for (size_t i = 10 + sizeof dict - 1; i < 127; i++)
		cr_assert_eq(buf[i], ' ', "padding at %zu", i);
	cr_assert_eq(buf[127], '\n');

	int64_t one = 5;
	n = dump_npy_header(buf, sizeof buf, "<f4", &one, 1);
	cr_assert_eq(n % 64, 0);
	cr_assert_not_null(memmem(buf, n, "'shape': (5,), }", 16), "1-D shape has a comma");
	n = dump_npy_header(buf, sizeof buf, "<f4", NULL, 0);
	cr_assert_not_null(memmem(buf, n, "'shape': (), }", 14), "scalar");

	int64_t big[8] = {1000000, 1000000, 1000000, 1000000, 1000000, 1000000, 1000000, 1000000};
	n = dump_npy_header(buf, sizeof buf, "<f2", big, 8);
	cr_assert_eq(n, 192, "a longer dict pads to the next multiple of 64");
	cr_assert_eq(buf[191], '\n');
	cr_assert_eq(dump_npy_header(buf, 128, "<f2", big, 8), 0, "does not fit");
}

static char tmpdir[64];

static void make_tmpdir(void)
{
	snprintf(tmpdir, sizeof tmpdir, "/tmp/test_dump.XXXXXX");
	cr_assert_not_null(mkdtemp(tmpdir));
}

static void remove_tmpdir(void)
{
	char cmd[128];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
	cr_assert_eq(system(cmd), 0);
}

static size_t read_file(int dirfd, const char *name, unsigned char *buf, size_t len)
{
	int fd = openat(dirfd, name, O_RDONLY);
	cr_assert_geq(fd, 0, "%s: %s", name, strerror(errno));
	ssize_t n = read(fd, buf, len);
	close(fd);
	cr_assert_geq(n, 0);
	return (size_t)n;
}

Test(npy, file_bytes_keep_nan_payloads, .init = make_tmpdir, .fini = remove_tmpdir)
{
	const uint16_t data[6] = {0x3c00, 0x7e01, 0xfe00, 0x7c00, 0xfc00, 0x0001};
	int64_t d[2] = {2, 3};
	unsigned char buf[256], header[128];
	int dirfd = open(tmpdir, O_RDONLY | O_DIRECTORY);
	cr_assert_geq(dirfd, 0);

	cr_assert_eq(dump_npy_write(dirfd, "t.npy", 0, "<f2", d, 2, data, sizeof data), 0);
	size_t n = read_file(dirfd, "t.npy", buf, sizeof buf);
	cr_assert_eq(dump_npy_header((char *)header, sizeof header, "<f2", d, 2), 128);
	cr_assert_eq(n, 128 + sizeof data);
	cr_assert_eq(memcmp(buf, header, 128), 0);
	cr_assert_eq(memcmp(buf + 128, data, sizeof data), 0, "data bit-exact");

	errno = 0;
	cr_assert_eq(dump_npy_write(dirfd, "t.npy", 0, "<f2", d, 2, data, sizeof data), -1);
	cr_assert_eq(errno, EEXIST, "no overwrite without force");
	const uint16_t other[6] = {0};
	cr_assert_eq(dump_npy_write(dirfd, "t.npy", 1, "<f2", d, 2, other, sizeof other), 0);
	n = read_file(dirfd, "t.npy", buf, sizeof buf);
	cr_assert_eq(n, 128 + sizeof other, "force truncates");
	cr_assert_eq(memcmp(buf + 128, other, sizeof other), 0);
	close(dirfd);
}

Test(npy, refuses_bad_names_sizes_and_links, .init = make_tmpdir, .fini = remove_tmpdir)
{
	const float data[4] = {1, 2, 3, 4};
	int64_t d = 4;
	int dirfd = open(tmpdir, O_RDONLY | O_DIRECTORY);
	cr_assert_geq(dirfd, 0);
	static const char *const names[] = {"../x.npy", "a/b.npy", ".", "..", "", "/tmp/x.npy"};
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
		errno = 0;
		cr_assert_eq(dump_npy_write(dirfd, names[i], 1, "<f4", &d, 1, data, sizeof data),
		             -1, "'%s'", names[i]);
		cr_assert_eq(errno, EINVAL, "'%s'", names[i]);
	}
	errno = 0;
	cr_assert_eq(dump_npy_write(dirfd, "x.npy", 0, "<f4", &d, 1, data, sizeof data - 4), -1);
	cr_assert_eq(errno, EINVAL, "size must match the shape");
	cr_assert_eq(dump_npy_write(dirfd, "x.npy", 0, "<f9", &d, 1, data, sizeof data), -1);

	char target[128];
	snprintf(target, sizeof target, "%s/target", tmpdir);
	cr_assert_eq(symlinkat(target, dirfd, "link.npy"), 0);
	errno = 0;
	cr_assert_eq(dump_npy_write(dirfd, "link.npy", 1, "<f4", &d, 1, data, sizeof data), -1);
	cr_assert_eq(errno, ELOOP, "never through a symlink");
	cr_assert_neq(access(target, F_OK), 0, "link target not created");
	close(dirfd);
}

/* ---- statistics ---------------------------------------------------------------------------- */

Test(stats, fp16_with_nonfinite)
{
	const uint16_t v[7] = {0x3c00, 0xc200, 0x7e00, 0x7c00, 0xfc00, 0x0000, 0x4500};
	/* 1, -3, NaN, Inf, -Inf, 0, 5 */
	dump_stats s;
	dump_stats_compute((const unsigned char *)v, DUMP_DT_F16, 7, &s);
	cr_assert_eq(s.count, 7);
	cr_assert_eq(s.nan, 1);
	cr_assert_eq(s.inf, 2);
	cr_assert_eq(s.finite, 4);
	cr_assert_eq(s.min, -3.0);
	cr_assert_eq(s.max, 5.0);
	cr_assert_eq(s.absmax, 5.0);

	const uint16_t all_nan[2] = {0x7e00, 0xfe00};
	dump_stats_compute((const unsigned char *)all_nan, DUMP_DT_F16, 2, &s);
	cr_assert_eq(s.finite, 0);
	cr_assert_eq(s.nan, 2);
	cr_assert(isnan(s.min) && isnan(s.max) && isnan(s.absmax));
}

/* ---- comparison metrics -------------------------------------------------------------------- */

#define TOL 1e-15

static dump_diff diff_of(const double *a, const double *b, size_t n)
{
	dump_diff d;
	dump_diff_compute(a, b, n, &d);
	cr_log_info("cosine %.17g max_abs %.17g max_rel %.17g mismatch %llu", d.cosine, d.max_abs,
	            d.max_rel, (unsigned long long)d.mismatch);
	return d;
}

Test(metrics, known_vectors)
{
	const double a[3] = {1, 2, 3}, b[3] = {2, 4, 6};
	dump_diff d = diff_of(a, b, 3);
	cr_assert_float_eq(d.cosine, 1.0, TOL, "parallel");
	cr_assert_float_eq(d.norm_ratio, 2.0, TOL, "twice as long");
	cr_assert_eq(d.max_abs, 3.0);
	cr_assert_eq(d.max_rel, 1.0);
	cr_assert_eq(d.count, 3);
	cr_assert_eq(d.finite, 3);

	const double x[2] = {1, 0}, y[2] = {0, 1};
	d = diff_of(x, y, 2);
	cr_assert_float_eq(d.cosine, 0.0, TOL, "orthogonal");
	cr_assert_eq(d.max_abs, 1.0);
	cr_assert(isinf(d.max_rel), "1/0 relative error is inf");

	const double p[3] = {1, 2, 2}, q[3] = {1, 2, 3};
	d = diff_of(p, q, 3);
	cr_assert_float_eq(d.cosine, 11.0 / (3.0 * sqrt(14.0)), TOL);
	cr_assert_float_eq(d.norm_ratio, sqrt(14.0) / 3.0, TOL);
	cr_assert_eq(d.max_abs, 1.0);
	cr_assert_float_eq(d.max_rel, 0.5, TOL);

	const double m[2] = {1, -1}, n[2] = {-1, 1};
	d = diff_of(m, n, 2);
	cr_assert_float_eq(d.cosine, -1.0, TOL, "opposite");
	cr_assert_eq(d.max_abs, 2.0);
}

Test(metrics, zeros)
{
	const double z[3] = {0, 0, 0}, v[3] = {0, 1, 0};
	dump_diff d = diff_of(z, z, 3);
	cr_assert_eq(d.cosine, 1.0, "two zero vectors agree");
	cr_assert_eq(d.max_abs, 0.0);
	cr_assert_eq(d.max_rel, 0.0, "0/0 counts as 0");
	cr_assert_eq(d.norm_ratio, 1.0, "0/0 norms count as equal");
	d = diff_of(z, v, 3);
	cr_assert_eq(d.cosine, 0.0, "one zero vector");
	cr_assert(isinf(d.norm_ratio), "only the reference is zero");
	d = diff_of(v, z, 3);
	cr_assert_eq(d.norm_ratio, 0.0, "only b is zero");
	d = diff_of(z, z, 0);
	cr_assert_eq(d.cosine, 1.0, "empty");
	cr_assert_eq(d.count, 0);
}

/* ampdump --compare's default limits */
static const dump_limits limits = {.min_cosine = 0.99,
                                   .max_norm_diff = 0.1,
                                   .max_abs = 1e-3,
                                   .cosine_floor = 0.9,
                                   .max_abs_ceiling = 1.0};

Test(metrics, nan_and_inf)
{
	/* same non-finite values at the same positions agree and are skipped */
	const double a[5] = {1, DNAN, HUGE_VAL, -HUGE_VAL, 2};
	const double b[5] = {1, -DNAN, HUGE_VAL, -HUGE_VAL, 2};
	dump_diff d = diff_of(a, b, 5);
	cr_assert_eq(d.mismatch, 0);
	cr_assert_eq(d.finite, 2);
	cr_assert_float_eq(d.cosine, 1.0, TOL);
	cr_assert_eq(d.max_abs, 0.0);
	cr_assert_eq(dump_verdict(&d, 0, 0, &limits), 0);

	/* NaN against a finite value */
	const double c[3] = {1, 2, 3}, e[3] = {1, DNAN, 3};
	d = diff_of(c, e, 3);
	cr_assert_eq(d.mismatch, 1);
	cr_assert(isnan(d.max_abs) && isnan(d.max_rel));
	cr_assert_float_eq(d.cosine, 1.0, TOL, "cosine over the finite positions");
	cr_assert_eq(dump_verdict(&d, 0, 0, &limits), DUMP_FLAG_NONFINITE);
	d = diff_of(e, c, 3);
	cr_assert_eq(d.mismatch, 1, "either side");

	/* +Inf against -Inf, Inf against finite, NaN against Inf */
	const double f[3] = {HUGE_VAL, 1, DNAN}, g[3] = {-HUGE_VAL, HUGE_VAL, HUGE_VAL};
	d = diff_of(f, g, 2);
	cr_assert_eq(d.mismatch, 2);
	cr_assert(isinf(d.max_abs) && d.max_abs > 0, "Inf mismatches only: inf");
	d = diff_of(f, g, 3);
	cr_assert_eq(d.mismatch, 3);
	cr_assert(isnan(d.max_abs), "a NaN involved: nan");

	/* everything NaN on one side: no position to measure a cosine or a norm on, so they are
	 * NaN (the tables leave them empty), not 1, and the verdict rests on the mismatches */
	const double h[2] = {DNAN, DNAN};
	d = diff_of(c, h, 2);
	cr_assert_eq(d.finite, 0);
	cr_assert(isnan(d.cosine) && isnan(d.norm_ratio), "cosine %g, norm ratio %g", d.cosine,
	          d.norm_ratio);
	cr_assert_eq(dump_verdict(&d, 0, 0, &limits), DUMP_FLAG_NONFINITE);
	/* the same NaNs on both sides agree: nothing to flag, nothing measured */
	d = diff_of(h, h, 2);
	cr_assert_eq(d.mismatch, 0);
	cr_assert(isnan(d.cosine) && isnan(d.norm_ratio));
	cr_assert_eq(dump_verdict(&d, 0, 0, &limits), 0);
}

Test(metrics, verdict_reasons)
{
	dump_diff d = {.count = 8, .finite = 8, .cosine = 0.99, .norm_ratio = 1, .max_abs = 0.5};
	cr_assert_eq(dump_verdict(&d, 3, 0, &limits), 0, "the cosine limit itself passes");
	d.cosine = nextafter(0.99, 0);
	cr_assert_eq(dump_verdict(&d, 3, 0, &limits), DUMP_FLAG_DRIFT,
	             "cosine below 0.99 with elements beyond the max-abs tolerance");
	cr_assert_eq(dump_verdict(&d, 0, 0, &limits), 0,
	             "cosine below 0.99 with every element within 1e-3: tiny values, not flagged");
	d.cosine = 1;
	cr_assert_eq(dump_verdict(&d, 3, 0, &limits), 0,
	             "errors beyond 1e-3 in the right direction: fp16 rounding, not flagged");
	cr_assert_eq(dump_verdict(&d, 3, 1, &limits), DUMP_FLAG_CEILING,
	             "one element beyond the ceiling flags whatever the cosine");
	d.cosine = 0.9;
	cr_assert_eq(dump_verdict(&d, 0, 0, &limits), 0, "the floor itself passes");
	d.cosine = nextafter(0.9, 0);
	cr_assert_eq(dump_verdict(&d, 0, 0, &limits), DUMP_FLAG_FLOOR,
	             "below the floor flags whatever the error");
	cr_assert_eq(dump_verdict(&d, 2, 1, &limits),
	             DUMP_FLAG_FLOOR | DUMP_FLAG_DRIFT | DUMP_FLAG_CEILING, "every reason at once");
	d.cosine = DNAN;
	cr_assert_eq(dump_verdict(&d, 0, 0, &limits), DUMP_FLAG_FLOOR, "a NaN cosine is below");
	d.cosine = 1;
	d.mismatch = 1;
	cr_assert_eq(dump_verdict(&d, 0, 0, &limits), DUMP_FLAG_NONFINITE);
	d.mismatch = 0;

	/* the norm: a gradient left scaled by 128 keeps its cosine of 1 */
	d.norm_ratio = 128;
	cr_assert_eq(dump_verdict(&d, 3, 0, &limits), DUMP_FLAG_DRIFT, "128 times the norm");
	cr_assert_eq(dump_verdict(&d, 0, 0, &limits), 0, "within 1e-3: negligible");
	d.norm_ratio = 0.9;
	cr_assert_eq(dump_verdict(&d, 3, 0, &limits), 0, "the limit itself passes");
	d.norm_ratio = nextafter(0.9, 0);
	cr_assert_eq(dump_verdict(&d, 3, 0, &limits), DUMP_FLAG_DRIFT, "a tenth of it flushed");
	d.norm_ratio = HUGE_VAL;
	cr_assert_eq(dump_verdict(&d, 3, 0, &limits), DUMP_FLAG_DRIFT, "a all zero, b not");
	d.norm_ratio = DNAN;
	cr_assert_eq(dump_verdict(&d, 3, 0, &limits), DUMP_FLAG_DRIFT, "a NaN ratio is beyond");
	d.norm_ratio = 1;

	/* the limits are options */
	dump_limits loose = {.min_cosine = 0.5,
	                     .max_norm_diff = 0.1,
	                     .max_abs = 1e-3,
	                     .cosine_floor = 0.1,
	                     .max_abs_ceiling = 10};
	d.mismatch = 0;
	d.cosine = 0.8;
	cr_assert_eq(dump_verdict(&d, 3, 0, &loose), 0, "0.8 is above a --cosine of 0.5");
	cr_assert_eq(dump_verdict(&d, 3, 0, &limits), DUMP_FLAG_DRIFT | DUMP_FLAG_FLOOR);
}

Test(metrics, fp16_against_fp32_after_conversion)
{
	/* an fp16 blob against an fp32 blob of the same op: both to double first */
	const uint16_t h[4] = {0x3c00, 0x3555, 0xbc00, 0x0000}; /* 1, 0.333251953125, -1, 0 */
	const float f[4] = {1.0f, 1.0f / 3.0f, -1.0f, 0.0f};
	double a[4], b[4];
	dump_to_double((const unsigned char *)f, DUMP_DT_F32, 4, a);
	dump_to_double((const unsigned char *)h, DUMP_DT_F16, 4, b);
	dump_diff d = diff_of(a, b, 4);
	double err = (double)(1.0f / 3.0f) - 0.333251953125;
	cr_assert_float_eq(d.max_abs, err, TOL);
	cr_assert_float_eq(d.max_rel, err / (double)(1.0f / 3.0f), TOL);
	cr_assert_gt(d.cosine, 0.9999999);
	cr_assert_eq(dump_verdict(&d, 0, 0, &limits), 0);
}

/* ---- compare tolerance: |a-b| > atol + rtol*|a| -------------------------------------------- */

static dump_closeness close_of(const double *a, const double *b, size_t n, double atol, double rtol)
{
	dump_closeness c;
	dump_closeness_compute(a, b, n, atol, rtol, &c);
	cr_log_info("over %llu only_a %llu only_b %llu worst %.17g", (unsigned long long)c.over,
	            (unsigned long long)c.only_a, (unsigned long long)c.only_b, c.worst);
	return c;
}

Test(tolerance, limit_is_inclusive_and_a_is_the_reference)
{
	/* atol 2^-10, rtol 2^-10, |a| 4: the tolerance is 5*2^-10, exact in binary */
	const double a[1] = {4.0}, at[1] = {4.0 + 5 * 0x1p-10};
	dump_closeness c = close_of(a, at, 1, 0x1p-10, 0x1p-10);
	cr_assert_eq(c.over, 0, "|a-b| equal to the tolerance is within it");
	cr_assert_eq(c.worst, 1.0);
	const double past[1] = {nextafter(at[0], HUGE_VAL)};
	c = close_of(a, past, 1, 0x1p-10, 0x1p-10);
	cr_assert_eq(c.over, 1, "one ulp past the tolerance is over");
	cr_assert_gt(c.worst, 1.0);

	/* the relative part scales with the reference a, not with b */
	const double two[1] = {2.0}, one[1] = {1.0};
	cr_assert_eq(close_of(two, one, 1, 0.0, 0.5).over, 0, "1 <= 0.5*2");
	cr_assert_eq(close_of(one, two, 1, 0.0, 0.5).over, 1, "1 > 0.5*1");
	/* and the absolute part alone is the plain max-abs limit */
	const double x[3] = {0, -3, 5}, y[3] = {1e-3, -3.002, 5};
	c = close_of(x, y, 3, 1e-3, 0.0);
	cr_assert_eq(c.over, 1, "|a-b| of 1e-3 at 0 is within, about 2e-3 at -3 is over");
	cr_assert_float_eq(c.worst, (3.002 - 3.0) / 1e-3, 1e-12);
}

Test(tolerance, zero_tolerance_and_non_finite)
{
	const double a[4] = {0, 1, 2, 3}, b[4] = {0, 1, 2, 3}, c3[4] = {0, 1, 2, 3.5};
	dump_closeness c = close_of(a, b, 4, 0.0, 0.0);
	cr_assert_eq(c.over, 0);
	cr_assert_eq(c.worst, 0.0, "0/0 counts as 0");
	c = close_of(a, c3, 4, 0.0, 0.0);
	cr_assert_eq(c.over, 1);
	cr_assert(isinf(c.worst), "x/0 is inf");

	/* Inf/NaN facing a finite value is counted per side; equal non-finite values are skipped */
	const double p[5] = {1, HUGE_VAL, 2, DNAN, -HUGE_VAL};
	const double q[5] = {DNAN, HUGE_VAL, 2, 3, -HUGE_VAL};
	c = close_of(p, q, 5, 1e-3, 0x1p-10);
	cr_assert_eq(c.only_a, 1, "NaN in a where b is 3");
	cr_assert_eq(c.only_b, 1, "NaN in b where a is 1");
	cr_assert_eq(c.over, 0);
	cr_assert_eq(c.worst, 0.0);
	c = close_of(p, q, 0, 1e-3, 0x1p-10);
	cr_assert_eq(c.over + c.only_a + c.only_b, 0, "empty");
}

Test(tolerance, default_rtol_by_dtype)
{
	cr_assert_eq(dump_default_rtol(DUMP_DT_F32, DUMP_DT_F32), 0.0);
	cr_assert_eq(dump_default_rtol(DUMP_DT_I32, DUMP_DT_I32), 0.0);
	cr_assert_eq(dump_default_rtol(DUMP_DT_F32, DUMP_DT_F16), 0x1p-10);
	cr_assert_eq(dump_default_rtol(DUMP_DT_F16, DUMP_DT_F32), 0x1p-10);
	cr_assert_eq(dump_default_rtol(DUMP_DT_F16, DUMP_DT_F16), 0x1p-10);
	cr_assert_eq(dump_default_rtol(DUMP_DT_BF16, DUMP_DT_F32), 0x1p-7);
	cr_assert_eq(dump_default_rtol(DUMP_DT_F16, DUMP_DT_BF16), 0x1p-7, "the coarser format");
}

/* Every rounding to a format with p significant bits is within the default tolerance: the worst
 * case, a value halfway between two neighbours (exact in double), against either neighbour. */
static void check_every_rounding(dump_dtype dt, double (*value)(uint16_t), uint64_t *over_plain)
{
	double rtol = dump_default_rtol(DUMP_DT_F32, dt), worst = 0.0;
	*over_plain = 0;
	for (uint32_t h = 0; h < 0x10000; h++) {
		double lo = value((uint16_t)h), hi = value((uint16_t)(h + 1));
		/* finite neighbours of the same sign, hi the next one away from 0 */
		if (!isfinite(lo) || !isfinite(hi) || h == 0x7fff || h == 0xffff ||
		    signbit(lo) != signbit(hi))
			continue;
		const double mid[1] = {(lo + hi) / 2}, both[2] = {lo, hi};
		for (int k = 0; k < 2; k++) {
			dump_closeness c, plain;
			dump_closeness_compute(mid, &both[k], 1, 1e-3, rtol, &c);
			dump_closeness_compute(mid, &both[k], 1, 1e-3, 0.0, &plain);
			if (c.over)
				cr_assert_fail("0x%04x: %.17g rounded to %.17g is over", h, mid[0],
				               both[k]);
			if (c.worst > worst)
				worst = c.worst;
			*over_plain += plain.over;
		}
	}
	cr_log_info("worst rounding: %.6g of the tolerance", worst);
	cr_assert_lt(worst, 0.51, "rtol is twice the unit roundoff: a margin of 2");
}

static double half_of(uint16_t h)
{
	return dump_half_to_double(h);
}

static double bf16_of(uint16_t b)
{
	return (double)dump_bf16_to_float(b);
}

Test(tolerance, every_fp16_and_bf16_rounding_is_within)
{
	uint64_t over_plain;
	check_every_rounding(DUMP_DT_F16, half_of, &over_plain);
	cr_assert_gt(over_plain, 0, "a plain max-abs 1e-3 flags fp16 rounding (at |x| 4: 2^-9)");
	const double four[1] = {4.0 + 0x1p-9}, r4[1] = {4.0}; /* halfway to 4 + 2^-8 */
	cr_assert_eq(close_of(four, r4, 1, 1e-3, 0.0).over, 1);
	cr_assert_eq(close_of(four, r4, 1, 1e-3, dump_default_rtol(DUMP_DT_F32, DUMP_DT_F16)).over,
	             0);
	check_every_rounding(DUMP_DT_BF16, bf16_of, &over_plain);
	cr_assert_gt(over_plain, 0);
}

/* ---- bf16 ------------------------------------------------------------------------------ */

/* A bf16 tensor goes to .npy as exact float32: every one of the 2^16 values (NaN payloads,
 * signed zeros, subnormals, infinities) becomes the float whose top half is its bits. */
Test(bf16, npy_export_is_exact_fp32, .init = make_tmpdir, .fini = remove_tmpdir)
{
	static uint16_t all[65536];
	static float wide[65536];
	for (uint32_t i = 0; i < 65536; i++)
		all[i] = (uint16_t)i;
	dump_npy_widen_bf16(all, 65536, wide);
	uint32_t bad = 0;
	for (uint32_t i = 0; i < 65536; i++)
		bad += bits_of(wide[i]) != i << 16;
	cr_assert_eq(bad, 0, "%u of 65536 bf16 values not widened exactly", bad);
	cr_assert_str_eq(dump_npy_descr(DUMP_DT_BF16), "<f4", "numpy has no bf16: exported as <f4");

	/* the file: header with '<f4' and the shape, then the float32 bytes */
	const uint16_t data[4] = {0x3f80, 0xc040, 0x7fc1, 0x0001}; /* 1, -3, NaN payload, tiny */
	float f[4];
	dump_npy_widen_bf16(data, 4, f);
	int64_t d[1] = {4};
	int dirfd = open(tmpdir, O_RDONLY | O_DIRECTORY);
	cr_assert_geq(dirfd, 0);
	cr_assert_eq(dump_npy_write(dirfd, "b.npy", 0, dump_npy_descr(DUMP_DT_BF16), d, 1, f,
	                            sizeof f),
	             0);
	unsigned char buf[256];
	size_t n = read_file(dirfd, "b.npy", buf, sizeof buf);
	close(dirfd);
	cr_assert_eq(n, 128 + sizeof f);
	cr_assert_eq(memcmp(buf, "\x93NUMPY\x01\x00", 8), 0);
	cr_assert_not_null(memmem(buf, 128, "'descr': '<f4'", 14));
	cr_assert_not_null(memmem(buf, 128, "'shape': (4,)", 13));
	uint32_t w[4];
	memcpy(w, buf + 128, sizeof w);
	cr_assert_eq(w[0], 0x3f800000u);
	cr_assert_eq(w[1], 0xc0400000u);
	cr_assert_eq(w[2], 0x7fc10000u, "NaN payload kept");
	cr_assert_eq(w[3], 0x00010000u, "the smallest bf16 subnormal, exact");
}

/* Statistics of a bf16 dump: its range is fp32's, so 3e38 is a finite value (no overflow above
 * 65504 as for fp16), and NaN and -Inf are counted. */
Test(bf16, stats_over_fp32_range)
{
	/* 1, -3, 3.3e38 (0x7f78), NaN, -Inf, 2^-133 (subnormal 0x0001) */
	const uint16_t v[6] = {0x3f80, 0xc040, 0x7f78, 0x7fc0, 0xff80, 0x0001};
	dump_stats s;
	dump_stats_compute((const unsigned char *)v, DUMP_DT_BF16, 6, &s);
	cr_assert_eq(s.count, 6);
	cr_assert_eq(s.nan, 1);
	cr_assert_eq(s.inf, 1);
	cr_assert_eq(s.finite, 4);
	cr_assert_eq(s.min, -3.0);
	cr_assert_eq(s.max, (double)dump_bf16_to_float(0x7f78));
	cr_assert_gt(s.max, 3e38, "bf16 holds fp32's range");
	cr_assert_eq(s.absmax, s.max);
}

/* The compare rule with a bf16 side: rtol 2^-7.  100.25 rounds to bf16 100 (spacing 0.5 there):
 * an error of 0.25, within 0.001 + 2^-7 * 100.25 = 0.784 but over the fp16 rule's
 * 0.001 + 2^-10 * 100.25 = 0.099. */
Test(bf16, compare_uses_rtol_2_to_minus_7)
{
	const double a[1] = {100.25}, b[1] = {(double)dump_bf16_to_float(0x42c8)}; /* 100 */
	cr_assert_eq(b[0], 100.0);
	double rt_bf16 = dump_default_rtol(DUMP_DT_F32, DUMP_DT_BF16);
	double rt_fp16 = dump_default_rtol(DUMP_DT_F32, DUMP_DT_F16);
	cr_assert_eq(rt_bf16, 0x1p-7);
	cr_assert_eq(dump_default_rtol(DUMP_DT_BF16, DUMP_DT_BF16), 0x1p-7);
	dump_closeness c;
	dump_closeness_compute(a, b, 1, 1e-3, rt_bf16, &c);
	cr_log_info("bf16 rounding of 100.25: %.6g of the bf16 tolerance (limit 1)", c.worst);
	cr_assert_eq(c.over, 0, "within 2^-7");
	cr_assert_lt(c.worst, 0.33);
	dump_closeness_compute(a, b, 1, 1e-3, rt_fp16, &c);
	cr_assert_eq(c.over, 1, "over the fp16 rule");
}

/* ---- tables -------------------------------------------------------------------------------- */

static const amp_column cols[] = {
    {"flag", AMP_COL_FLAG},
    {"n", AMP_COL_INT},
    {"x", AMP_COL_REAL},
    {"name", AMP_COL_TEXT},
};

static char *print_to_string(amp_table *t, amp_format fmt)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	cr_assert_not_null(f);
	cr_assert_eq(amp_table_print(t, fmt, f), 0);
	fclose(f);
	return buf;
}

static amp_table *sample_table(void)
{
	amp_table *t = amp_table_new(cols, 4);
	cr_assert_not_null(t);
	cr_assert_eq(amp_table_add_row(t), 0);
	amp_table_set_int(t, 0, 1);
	amp_table_set_int(t, 1, 42);
	amp_table_set_real(t, 2, 1.0 / 3.0);
	amp_table_set_text(t, 3, "a,\"b\"");
	cr_assert_eq(amp_table_add_row(t), 0);
	amp_table_set_int(t, 0, 0);
	amp_table_set_real(t, 2, -HUGE_VAL);
	amp_table_set_text(t, 3, "tab\there");
	cr_assert_eq(amp_table_add_row(t), 0);
	amp_table_set_real(t, 2, DNAN);
	return t;
}

Test(table, formats)
{
	amp_table *t = sample_table();
	cr_assert_eq(amp_table_rows(t), 3);
	char *text = print_to_string(t, AMP_FMT_TEXT);
	cr_assert_str_eq(text, "flag   n            x  name\n"
	                       "*     42  0.333333333  a,\"b\"\n"
	                       "       -         -inf  tab?here\n"
	                       "       -          nan  -\n");
	char *csv = print_to_string(t, AMP_FMT_CSV);
	cr_assert_str_eq(csv, "flag,n,x,name\n"
	                      "1,42,0.333333333,\"a,\"\"b\"\"\"\n"
	                      "0,,-inf,tab\there\n"
	                      "0,,nan,\n");
	char *json = print_to_string(t, AMP_FMT_JSON);
	cr_assert_str_eq(
	    json, "{\"format_version\": 1, \"rows\": [\n"
	          "  {\"flag\": true, \"n\": 42, \"x\": 0.333333333, \"name\": \"a,\\\"b\\\"\"},\n"
	          "  {\"flag\": false, \"n\": null, \"x\": null, \"x_nonfinite\": \"-inf\", "
	          "\"name\": \"tab\\there\"},\n"
	          "  {\"flag\": false, \"n\": null, \"x\": null, \"x_nonfinite\": \"nan\", "
	          "\"name\": null}\n"
	          "]}\n");
	free(text);
	free(csv);
	free(json);
	amp_table_free(t);
	amp_table_free(NULL);
}

Test(table, empty_json_and_real_format)
{
	amp_table *t = amp_table_new(cols, 4);
	char *json = print_to_string(t, AMP_FMT_JSON);
	cr_assert_str_eq(json, "{\"format_version\": 1, \"rows\": []}\n");
	free(json);
	amp_table_free(t);
	char buf[40];
	cr_assert_str_eq(amp_format_real(1.0 / 3.0, buf, sizeof buf), "0.333333333");
	cr_assert_str_eq(amp_format_real(HUGE_VAL, buf, sizeof buf), "inf");
	cr_assert_str_eq(amp_format_real(-HUGE_VAL, buf, sizeof buf), "-inf");
	cr_assert_str_eq(amp_format_real(DNAN, buf, sizeof buf), "nan");
	cr_assert_str_eq(amp_format_real(-DNAN, buf, sizeof buf), "nan");
	cr_assert_str_eq(amp_format_real(1e-300, buf, sizeof buf), "1e-300");
}

/* A label as an application may set it: invalid UTF-8 (a lone continuation byte, a truncated
 * sequence, an overlong '/'), a terminal escape (ESC [ 2 J, and the C1 CSI 0x9b), a newline,
 * DEL, and valid non-ASCII text that must survive. */
static const char hostile[] = "a\x80" "b\xe2\x82 \xc0\xaf\x1b[2J\xc2\x9b" "1m\nnew\x7f \xc3\xa9t\xc3\xa9";

#define R "\xef\xbf\xbd" /* U+FFFD */

Test(table, hostile_text_is_sanitized_valid_and_escaped)
{
	amp_table *t = amp_table_new(cols, 4);
	cr_assert_not_null(t);
	cr_assert_eq(amp_table_add_row(t), 0);
	amp_table_set_text(t, 3, hostile);
	char *text = print_to_string(t, AMP_FMT_TEXT);
	char *csv = print_to_string(t, AMP_FMT_CSV);
	char *json = print_to_string(t, AMP_FMT_JSON);
	/* text: every unsafe or invalid code point is '?', the valid e-acute is kept */
	cr_assert_str_eq(text, "flag  n  x  name\n"
	                       "      -  -  a?b?? ???[2J?1m?new? \xc3\xa9t\xc3\xa9\n");
	/* CSV: invalid bytes and controls but LF are U+FFFD; the LF makes the field quoted */
	cr_assert_str_eq(csv, "flag,n,x,name\n"
	                      "0,,,\"a" R "b" R R " " R R R "[2J" R "1m\nnew" R " \xc3\xa9t\xc3\xa9\"\n");
	/* JSON: invalid bytes are U+FFFD, controls are escaped */
	cr_assert_str_eq(json, "{\"format_version\": 1, \"rows\": [\n"
	                       "  {\"flag\": false, \"n\": null, \"x\": null, \"name\": "
	                       "\"a" R "b" R R " " R R "\\u001b[2J\\u009b1m\\nnew"
	                       "\\u007f \xc3\xa9t\xc3\xa9\"}\n"
	                       "]}\n");
	for (const char *out[] = {text, csv, json}, **p = out; p < out + 3; p++)
		cr_assert_null(strchr(*p, 0x1b), "no ESC byte in any format");
	free(text);
	free(csv);
	free(json);
	amp_table_free(t);
}

Test(table, stream_writes_the_same_as_a_whole_table)
{
	for (amp_format fmt = AMP_FMT_CSV; fmt <= AMP_FMT_JSON; fmt++) {
		amp_table *whole = sample_table();
		char *want = print_to_string(whole, fmt);
		char *buf = NULL;
		size_t len = 0;
		FILE *f = open_memstream(&buf, &len);
		cr_assert_not_null(f);
		amp_table *t = amp_table_new(cols, 4);
		cr_assert_eq(amp_table_stream(t, fmt, f), 0);
		cr_assert_eq(amp_table_add_row(t), 0);
		amp_table_set_int(t, 0, 1);
		amp_table_set_int(t, 1, 42);
		amp_table_set_real(t, 2, 1.0 / 3.0);
		amp_table_set_text(t, 3, "a,\"b\"");
		cr_assert_eq(amp_table_add_row(t), 0);
		amp_table_set_int(t, 0, 0);
		amp_table_set_real(t, 2, -HUGE_VAL);
		amp_table_set_text(t, 3, "tab\there");
		cr_assert_eq(amp_table_add_row(t), 0);
		amp_table_set_real(t, 2, DNAN);
		cr_assert_eq(amp_table_print(t, fmt, f), 0);
		fclose(f);
		cr_assert_str_eq(buf, want, "format %d", (int)fmt);
		free(buf);
		free(want);
		amp_table_free(t);
		amp_table_free(whole);
	}
	amp_table *t = amp_table_new(cols, 4);
	cr_assert_eq(amp_table_stream(t, AMP_FMT_TEXT, stdout), -1, "text cannot stream");
	amp_table_free(t);
}

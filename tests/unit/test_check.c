/* test_check.c — non-finite checks: the statistics kernels on every path against an FP64
 * reference, the exponent histogram against the schema's definition, origin detection (forward,
 * through a cast, in backward), dump limits and full-step dumps, and the checks' own cost.
 *
 * Statistics are exact (counts, bins, min/max of the same floats): tolerance 0.  Tests turn the
 * trace on without a profiler session (amp_trace_active = 1: records go nowhere) and watch what
 * check.c emits through its observer hook.
 */
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "kpath.h"
#include "kernels/stats.h"

/* ---- helpers ------------------------------------------------------------------------------ */

static uint64_t rng_state;

static uint64_t rng_u64(void)
{
	uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static double rng_unit(void)
{
	return (double)(rng_u64() >> 11) * 0x1p-53;
}

static float f32_bits(uint32_t u)
{
	float f;
	memcpy(&f, &u, sizeof f);
	return f;
}

static const char *const path_names[] = {"scalar", "avx2", "avx512"};

/* Every statistics kernel this CPU can run, by table: the avx512 path has two (F/BW only,
 * and with VBMI, GFNI, VPOPCNTDQ), both tested where the CPU has them. */
typedef struct stats_path {
	const char *name;
	const amp_stats_table *table;
} stats_path;

static int stats_paths(stats_path out[4])
{
	int n = 0;
	amp_isa best = amp_kernels_best();
	out[n++] = (stats_path){"scalar", &amp_stats_scalar_table};
	if (best >= AMP_ISA_AVX2)
		out[n++] = (stats_path){"avx2", &amp_stats_avx2_table};
	if (best >= AMP_ISA_AVX512) {
		out[n++] = (stats_path){"avx512bw", &amp_stats_avx512bw_table};
		if (amp_stats_avx512_ext())
			out[n++] = (stats_path){"avx512ext", &amp_stats_avx512ext_table};
	}
	return n;
}

/* FP64 reference of amp_stats, written from the definitions in stats.h / amp_events.h. */
static int ref_bin(double v)
{
	double a = fabs(v);
	if (a == 0)
		return 0;
	if (a < 0x1p-14)
		return 1;
	int e;
	frexp(a, &e); /* a = m 2^e, m in [0.5, 1): floor(log2 a) = e - 1 */
	int k = e - 1 + 16;
	return k >= 32 ? 32 : k;
}

static void ref_stats(const double *v, int64_t n, amp_stats *r)
{
	memset(r, 0, sizeof *r);
	double mn = INFINITY, mx = -INFINITY;
	for (int64_t i = 0; i < n; i++) {
		r->count++;
		if (isnan(v[i])) {
			r->nan++;
			r->exp_hist[32]++;
			continue;
		}
		if (isinf(v[i])) {
			if (v[i] > 0)
				r->pinf++;
			else
				r->ninf++;
			r->exp_hist[32]++;
			continue;
		}
		double a = fabs(v[i]);
		r->exp_hist[ref_bin(v[i])]++;
		r->underflow += a != 0 && a < 0x1p-14;
		r->near_overflow += a > 32768;
		mn = v[i] < mn ? v[i] : mn;
		mx = v[i] > mx ? v[i] : mx;
	}
	if (mn > mx) {
		r->min = r->max = r->absmax = NAN;
	} else {
		r->min = mn;
		r->max = mx;
		r->absmax = fmax(fabs(mn), fabs(mx));
	}
}

static int same_double(double a, double b)
{
	return (isnan(a) && isnan(b)) || a == b;
}

/* Field-by-field comparison; returns the number of differing fields (and logs them). */
static int stats_diff(const char *what, const amp_stats *got, const amp_stats *want)
{
	int bad = 0;
#define FIELD(f)                                                                           \
	if (got->f != want->f) {                                                               \
		cr_log_error("%s: " #f " %llu, expected %llu", what, (unsigned long long)got->f,   \
		             (unsigned long long)want->f);                                         \
		bad++;                                                                             \
	}
	FIELD(count)
	FIELD(nan)
	FIELD(pinf)
	FIELD(ninf)
	FIELD(underflow)
	FIELD(near_overflow)
	for (int k = 0; k < AMP_STATS_BINS; k++)
		FIELD(exp_hist[k])
#undef FIELD
	if (!same_double(got->min, want->min) || !same_double(got->max, want->max) ||
	    !same_double(got->absmax, want->absmax)) {
		cr_log_error("%s: min/max/absmax %.9g %.9g %.9g, expected %.9g %.9g %.9g", what, got->min,
		             got->max, got->absmax, want->min, want->max, want->absmax);
		bad++;
	}
	return bad;
}

static void restore_auto(void)
{
	amp_kernels_select("auto");
}

/* ---- statistics kernels ------------------------------------------------------------------- */

/* Random fp32 of every magnitude plus planted specials at random places. */
static void fill_f32(float *x, int64_t n, int kind)
{
	static const uint32_t planted[] = {
	    0x7fc00000u, 0xffc00001u, 0x7f800001u, /* NaNs: quiet, negative, signalling */
	    0x7f800000u, 0xff800000u,              /* +-Inf */
	    0x00000001u, 0x807fffffu,              /* fp32 subnormals */
	    0x38800000u, 0x387fffffu,              /* 2^-14 (normal) and just below it */
	    0x47000000u, 0x47000001u, 0xc7000001u, /* 32768 (not near) and just above it */
	    0x477fe000u, 0x47800000u, 0xc7800000u, /* 65504, +-65536 (overflow FP16) */
	    0x00000000u, 0x80000000u,              /* +-0 */
	    0x358637bdu,                           /* 1e-6 */
	    0x7149f2cau,                           /* 1e30 */
	};
	for (int64_t i = 0; i < n; i++) {
		double m = rng_unit() * 2 - 1;
		switch (kind) {
		case 0: x[i] = (float)ldexp(m, (int)(rng_u64() % 60) - 30); break;     /* wide */
		case 1: x[i] = (float)m; break;                                        /* [-1,1) */
		case 2: x[i] = m < 0 ? 0.0f : (float)(m * 3); break;                   /* ReLU-like */
		default: x[i] = f32_bits((uint32_t)rng_u64()); break;                  /* any bits */
		}
		if (kind != 1 && rng_u64() % 50 == 0)
			x[i] = f32_bits(planted[rng_u64() % (sizeof planted / sizeof planted[0])]);
	}
}

Test(stats, f32_planted_every_path)
{
	static const int64_t lens[] = {0, 1, 31, 63, 64, 65, 127, 4095, 4096, 4097, 8192 + 63, 20011};
	int64_t nmax = 20011;
	float *x = malloc((size_t)nmax * sizeof *x);
	double *d = malloc((size_t)nmax * sizeof *d);
	cr_assert(x && d);
	rng_state = 42;
	stats_path paths[4];
	int np = stats_paths(paths), bad = 0, cases = 0;
	for (int kind = 0; kind < 4; kind++)
		for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
			int64_t n = lens[li];
			fill_f32(x, n, kind);
			for (int64_t i = 0; i < n; i++)
				d[i] = (double)x[i];
			amp_stats want;
			ref_stats(d, n, &want);
			for (int p = 0; p < np; p++) {
				amp_stats got;
				char what[64];
				snprintf(what, sizeof what, "f32 %s kind %d n %lld", paths[p].name, kind,
				         (long long)n);
				paths[p].table->f32(x, n, &got);
				bad += stats_diff(what, &got, &want);
				cases++;
			}
		}
	cr_log_info("f32: %d cases on %d paths (best here: %s), tolerance 0, %d differences", cases,
	            np, paths[np - 1].name, bad);
	cr_assert_eq(bad, 0);
	free(x);
	free(d);
}

/* Every fp16 bit pattern, shuffled into one tensor, then in pieces of awkward lengths. */
Test(stats, f16_exhaustive_every_path)
{
	int64_t n = 65536;
	uint16_t *h = malloc((size_t)n * sizeof *h);
	double *d = malloc((size_t)n * sizeof *d);
	cr_assert(h && d);
	for (int64_t i = 0; i < n; i++)
		h[i] = (uint16_t)i;
	rng_state = 7;
	for (int64_t i = n - 1; i > 0; i--) {
		int64_t j = (int64_t)(rng_u64() % (uint64_t)(i + 1));
		uint16_t t = h[i];
		h[i] = h[j];
		h[j] = t;
	}
	for (int64_t i = 0; i < n; i++)
		d[i] = (double)amp_f16_to_f32(h[i]);
	stats_path paths[4];
	int np = stats_paths(paths), bad = 0, cases = 0;
	static const int64_t pieces[] = {65536, 4096, 4097, 4095, 100, 64, 63, 1};
	for (size_t pi = 0; pi < sizeof pieces / sizeof pieces[0]; pi++) {
		int64_t len = pieces[pi], off = (int64_t)(pi * 977) % (n - len + 1);
		amp_stats want;
		ref_stats(d + off, len, &want);
		for (int p = 0; p < np; p++) {
			amp_stats got;
			char what[64];
			snprintf(what, sizeof what, "f16 %s n %lld", paths[p].name, (long long)len);
			paths[p].table->f16(h + off, len, &got);
			bad += stats_diff(what, &got, &want);
			cases++;
		}
	}
	/* the whole set: 2 zeros, 2046 subnormals, 2048 Inf/NaN of which 2 Inf */
	amp_stats all;
	amp_stats_f16(h, n, &all);
	cr_expect_eq(all.exp_hist[0], 2);
	cr_expect_eq(all.underflow, 2046);
	cr_expect_eq(all.pinf, 1);
	cr_expect_eq(all.ninf, 1);
	cr_expect_eq(all.nan, 2046);
	cr_expect_eq(all.min, -65504.0);
	cr_expect_eq(all.absmax, 65504.0);
	cr_log_info("f16: %d cases, tolerance 0, %d differences", cases, bad);
	cr_assert_eq(bad, 0);
	free(h);
	free(d);
}

/* Lengths around the vector paths' steps: 32 and 64 lanes, 512-element groups, 4096-element
 * blocks, and several blocks with a tail. */
static const int64_t block_lens[] = {1,   31,   32,   33,   64,   65,   100,  511,   512,
                                     513, 1000, 2047, 4095, 4096, 4097, 8191, 12293, 20000};

/* One fp16 of the case `kind` at index i of n: data shaped to take each branch of the vector
 * paths (one sign with and without zeros, |x| >= 32768 without Inf, ranges that change from
 * block to block, subnormals). */
static uint16_t case_f16(int kind, int64_t i, int64_t n)
{
	uint16_t mag = (uint16_t)(0x0400 + rng_u64() % (0x3c00 - 0x0400)); /* 2^-14 <= |x| < 1 */
	uint16_t sign = (uint16_t)(rng_u64() & 1 ? 0x8000 : 0);
	switch (kind) {
	case 0: return mag;                                                /* > 0, no zero */
	case 1: return rng_u64() % 2 ? 0 : (uint16_t)(rng_u64() % 0x4c00); /* ReLU, < 16 */
	case 2: return (uint16_t)(rng_u64() % 7 ? 0x8000 | mag : 0x8000);  /* < 0, -0 */
	case 3: return (uint16_t)(0x8000 | (rng_u64() % 0x7bff + 1));      /* < 0, no zero */
	case 4: /* both signs, some 32768 <= |x| <= 65504, no Inf */
		return (uint16_t)(sign | (rng_u64() % 20 ? mag : 0x7800 + rng_u64() % 0x400));
	case 5: /* |x| >= 2 only in the second block */
		return (uint16_t)(sign |
		                  (i / 4096 == 1 && rng_u64() % 3 == 0 ? 0x4000 + rng_u64() % 0x3000
		                                                       : mag));
	case 6: /* |x| >= 2 only in the first block, and in the last element */
		return (uint16_t)(sign | ((i < 4096 && rng_u64() % 3 == 0) || i == n - 1
		                              ? 0x4000 + rng_u64() % 0x3000
		                              : mag));
	default: /* zeros and subnormals of both signs, a few normals */
		return (uint16_t)(sign | (rng_u64() % 5 == 0 ? mag : rng_u64() % 0x400));
	}
}

/* The branches of the vector paths, on every path, against the FP64 reference. */
Test(stats, f16_block_cases_every_path)
{
	int64_t nmax = 20000;
	uint16_t *h = malloc((size_t)nmax * sizeof *h);
	double *d = malloc((size_t)nmax * sizeof *d);
	cr_assert(h && d);
	stats_path paths[4];
	int np = stats_paths(paths), bad = 0, cases = 0;
	rng_state = 19;
	for (int kind = 0; kind < 8; kind++)
		for (size_t li = 0; li < sizeof block_lens / sizeof block_lens[0]; li++) {
			int64_t n = block_lens[li];
			for (int64_t i = 0; i < n; i++) {
				h[i] = case_f16(kind, i, n);
				d[i] = (double)amp_f16_to_f32(h[i]);
			}
			amp_stats want;
			ref_stats(d, n, &want);
			for (int p = 0; p < np; p++) {
				amp_stats got;
				char what[64];
				snprintf(what, sizeof what, "f16 %s case %d n %lld", paths[p].name,
				         kind, (long long)n);
				paths[p].table->f16(h, n, &got);
				bad += stats_diff(what, &got, &want);
				cases++;
			}
		}
	cr_log_info("f16 block cases: %d on %d paths, tolerance 0, %d differences", cases, np, bad);
	cr_assert_eq(bad, 0);
	free(h);
	free(d);
}

/* As case_f16, for fp32: one sign, |x| in [32768, 65536), finite |x| >= 65536 (FP16's bin 32),
 * ranges that change from block to block, fp32 subnormals and zeros. */
static float case_f32(int kind, int64_t i, int64_t n)
{
	float mag = (float)ldexp(1 + rng_unit(), (int)(rng_u64() % 20) - 14); /* 2^-14 .. 2^6 */
	float sign = rng_u64() & 1 ? -1.0f : 1.0f;
	switch (kind) {
	case 0: return mag;
	case 1: return rng_u64() % 2 ? 0.0f : mag;
	case 2: return sign * (rng_u64() % 20 ? mag : (float)(32768 + rng_unit() * 32767));
	case 3:
		return sign * (rng_u64() % 20
		                   ? mag
		                   : (float)ldexp(1 + rng_unit(), 16 + (int)(rng_u64() % 100)));
	case 4:
		return (i / 4096 == 1 && rng_u64() % 3 == 0) || i == n - 1 ? sign * mag * 1e3f
		                                                           : sign * mag * 1e-3f;
	default: /* zeros, fp32 subnormals, tiny normals */
		switch (rng_u64() % 4) {
		case 0: return sign * 0.0f;
		case 1: return sign * f32_bits((uint32_t)(rng_u64() % 0x7fffff + 1));
		case 2: return sign * (float)ldexp(1 + rng_unit(), -100);
		default: return sign * mag;
		}
	}
}

Test(stats, f32_block_cases_every_path)
{
	int64_t nmax = 20000;
	float *x = malloc((size_t)nmax * sizeof *x);
	double *d = malloc((size_t)nmax * sizeof *d);
	cr_assert(x && d);
	stats_path paths[4];
	int np = stats_paths(paths), bad = 0, cases = 0;
	rng_state = 23;
	for (int kind = 0; kind < 6; kind++)
		for (size_t li = 0; li < sizeof block_lens / sizeof block_lens[0]; li++) {
			int64_t n = block_lens[li];
			for (int64_t i = 0; i < n; i++) {
				x[i] = case_f32(kind, i, n);
				d[i] = (double)x[i];
			}
			amp_stats want;
			ref_stats(d, n, &want);
			for (int p = 0; p < np; p++) {
				amp_stats got;
				char what[64];
				snprintf(what, sizeof what, "f32 %s case %d n %lld", paths[p].name,
				         kind, (long long)n);
				paths[p].table->f32(x, n, &got);
				bad += stats_diff(what, &got, &want);
				cases++;
			}
		}
	cr_log_info("f32 block cases: %d on %d paths, tolerance 0, %d differences", cases, np, bad);
	cr_assert_eq(bad, 0);
	free(x);
	free(d);
}

/* exp_hist as amp_rec_tstats documents it: [0] zero, [1..31] biased FP16 exponent 0..30,
 * [32] Inf/NaN; an fp32 holding an FP16 value lands in the same bin as that FP16. */
Test(stats, exp_hist_matches_schema)
{
	uint16_t h[64];
	float f[64];
	stats_path paths[4];
	int np = stats_paths(paths), bad = 0;
	for (int p = 0; p < np; p++) {
		for (uint32_t bits = 0; bits < 65536; bits += p == 0 ? 1 : 7) {
			unsigned e = (bits >> 10) & 0x1fu;
			unsigned want = (bits & 0x7fffu) == 0 ? 0 : e == 31 ? 32 : e + 1;
			for (int i = 0; i < 64; i++) {
				h[i] = (uint16_t)bits;
				f[i] = amp_f16_to_f32((uint16_t)bits);
			}
			amp_stats s16, s32;
			paths[p].table->f16(h, 64, &s16);
			paths[p].table->f32(f, 64, &s32);
			if (s16.exp_hist[want] != 64 || s32.exp_hist[want] != 64) {
				if (bad++ < 5)
					cr_log_error("%s: fp16 0x%04x: bin %u holds %llu (fp16), %llu (fp32)",
					             paths[p].name, bits, want,
					             (unsigned long long)s16.exp_hist[want],
					             (unsigned long long)s32.exp_hist[want]);
			}
		}
	}
	cr_assert_eq(bad, 0);
	cr_assert_eq(AMP_STATS_BINS, 33);
	cr_assert_leq(AMP_STATS_BINS, (int)(sizeof((amp_rec_tstats *)0)->exp_hist / sizeof(uint32_t)));
}

/* The dispatched entry points follow amp_kernels_select(). */
Test(stats, dispatch_follows_kernel_selection, .fini = restore_auto)
{
	int64_t n = 5000;
	float *x = malloc((size_t)n * sizeof *x);
	uint16_t *h = malloc((size_t)n * sizeof *h);
	cr_assert(x && h);
	rng_state = 3;
	fill_f32(x, n, 0);
	amp_cvt_f32_f16(x, h, n);
	amp_stats ref32, ref16;
	amp_stats_f32_on(AMP_ISA_SCALAR, x, n, &ref32);
	amp_stats_f16_on(AMP_ISA_SCALAR, h, n, &ref16);
	for (int p = 0; p < 3; p++) {
		if (!kpath_force(path_names[p]))
			continue;
		amp_stats s32, s16;
		amp_stats_f32(x, n, &s32);
		amp_stats_f16(h, n, &s16);
		cr_expect_eq(stats_diff(path_names[p], &s32, &ref32), 0);
		cr_expect_eq(stats_diff(path_names[p], &s16, &ref16), 0);
	}
	free(x);
	free(h);
}

/* ---- checks inside the runtime ------------------------------------------------------------ */

#define MAX_SEEN 256
typedef struct seen_rec {
	int is_dump;
	amp_trace_tstats st;
	amp_trace_dump_ref d;
	char name[AMP_STRING_MAX + 8], file[96];
} seen_rec;
static seen_rec seen[MAX_SEEN];
static int n_seen;

static void observe(void *arg, const amp_trace_tstats *st, const amp_trace_dump_ref *d)
{
	(void)arg;
	if (n_seen >= MAX_SEEN)
		return;
	seen_rec *r = &seen[n_seen++];
	memset(r, 0, sizeof *r);
	if (st) {
		r->st = *st;
		snprintf(r->name, sizeof r->name, "%s", st->name ? st->name : "");
	} else {
		r->is_dump = 1;
		r->d = *d;
		snprintf(r->name, sizeof r->name, "%s", d->name ? d->name : "");
		snprintf(r->file, sizeof r->file, "%s", d->file ? d->file : "");
	}
}

static amp_check_config base_config(void)
{
	amp_check_config c = {
	    .nan_check = AMP_NAN_CHECK_OP,
	    .dump = AMP_DUMP_OFF,
	    .dump_limit = 1u << 20,
	    .dumps_per_step = AMP_CHECK_DUMPS_PER_STEP,
	    .dump_steps_max = AMP_CHECK_DUMP_STEPS,
	    .grad_dump_steps_max = AMP_CHECK_GRAD_DUMP_STEPS,
	    .stats_every = 1,
	    .spool_dir = "",
	};
	return c;
}

static void checks_on(const amp_check_config *cfg)
{
	amp_check_configure(cfg);
	amp_check_reset_counters();
	amp_check_set_observer(observe, NULL);
	n_seen = 0;
	amp_trace_active = 1;
}

static void checks_off(void)
{
	amp_trace_active = 0;
	amp_check_set_observer(NULL, NULL);
	amp_check_configure(NULL);
}

static amp_ctx *new_ctx(const char *mode)
{
	amp_ctx *ctx = NULL;
	cr_assert_eq(amp_ctx_new(NULL, &ctx, NULL, 0), AMP_OK);
	cr_assert_eq(amp_config_set(ctx, "precision_mode", mode), AMP_OK);
	return ctx;
}

static const seen_rec *find_stats(amp_op_type op, int role, const char *name)
{
	for (int i = 0; i < n_seen; i++)
		if (!seen[i].is_dump && seen[i].st.op == op && seen[i].st.role == role &&
		    (!name || strcmp(seen[i].name, name) == 0))
			return &seen[i];
	return NULL;
}

static int count_origin_rows(void)
{
	int n = 0;
	for (int i = 0; i < n_seen; i++)
		n += !seen[i].is_dump && seen[i].st.origin;
	return n;
}

/* x (64) in [0, 3.5) -> scale 2 -> add to itself -> exp -> sum.  In force_fp16, exp(4x) is
 * Inf in FP16 once 4x > 11.09: the 3rd op is the origin, the 4th only inherits it. */
#define EXP_N 64
static int exp_graph(amp_ctx *ctx, uint64_t *seq0, int *n_inf)
{
	float xv[EXP_N];
	*n_inf = 0;
	for (int i = 0; i < EXP_N; i++) {
		xv[i] = 3.5f * (float)i / EXP_N;
		*n_inf += 4.0 * (double)xv[i] > 11.0904;
	}
	amp_tensor *x, *a, *b, *c, *s;
	int rc = amp_tensor_from_f32(ctx, xv, amp_shape1(EXP_N), AMP_F32, &x);
	*seq0 = ctx->seq;
	if (!rc)
		rc = amp_scale(ctx, "scale", x, 2.0f, &a);
	if (!rc)
		rc = amp_add(ctx, "add", a, a, &b);
	if (!rc)
		rc = amp_exp(ctx, "exp", b, &c);
	if (!rc)
		rc = amp_sum(ctx, "sum", c, &s);
	return rc;
}

Test(origin, third_op_overflows_in_force_fp16, .fini = checks_off)
{
	amp_check_config cfg = base_config();
	checks_on(&cfg);
	amp_ctx *ctx = new_ctx("force_fp16");
	cr_assert_eq(amp_step_begin(ctx), AMP_OK);
	uint64_t seq0;
	int n_inf;
	cr_assert_eq(exp_graph(ctx, &seq0, &n_inf), AMP_OK, "%s", amp_ctx_error(ctx));
	cr_assert_gt(n_inf, 0);

	amp_check_origin o;
	amp_check_origin_get(ctx, &o);
	cr_assert_eq(o.step, 0);
	cr_expect_eq(o.seq, seq0 + 2, "origin seq %llu, expected %llu", (unsigned long long)o.seq,
	             (unsigned long long)(seq0 + 2));
	cr_expect_eq(o.op, AMP_OP_EXP);
	cr_expect_eq(o.phase, AMP_PHASE_FORWARD);
	cr_expect_eq(o.inf, (uint64_t)n_inf);
	cr_expect_eq(o.nan, 0);
	cr_expect_eq(o.via_cast, 0);
	cr_expect_str_eq(o.label, "exp");

	const seen_rec *r = find_stats(AMP_OP_EXP, AMP_ROLE_OUTPUT, "exp");
	cr_assert(r, "no tensor_stats for the exp output");
	cr_expect_eq(r->st.origin, 1);
	cr_expect_eq(r->st.inf, (uint64_t)n_inf);
	cr_expect_eq(r->st.exp_hist[32], (uint32_t)n_inf);
	cr_expect_eq(r->st.dtype, AMP_F16);
	const seen_rec *in = find_stats(AMP_OP_EXP, AMP_ROLE_INPUT, "exp/in0");
	cr_assert(in, "no tensor_stats for the origin's input");
	cr_expect_eq(in->st.inf + in->st.nan, 0);
	cr_expect_eq(in->st.seq, seq0 + 2);
	const seen_rec *sum = find_stats(AMP_OP_SUM, AMP_ROLE_OUTPUT, "sum");
	cr_assert(sum);
	cr_expect_eq(sum->st.inf, 1);
	cr_expect_eq(sum->st.origin, 0);
	cr_expect_eq(count_origin_rows(), 1);
	const seen_rec *add = find_stats(AMP_OP_ADD, AMP_ROLE_OUTPUT, "add");
	cr_assert(add);
	cr_expect_eq(add->st.inf + add->st.nan, 0);
	cr_expect_eq(add->st.near_overflow, 0);

	/* the next step starts clean */
	cr_assert_eq(amp_step_end(ctx), AMP_OK);
	cr_assert_eq(amp_step_begin(ctx), AMP_OK);
	amp_tensor *x, *y;
	float one = 1;
	cr_assert_eq(amp_tensor_from_f32(ctx, &one, amp_shape1(1), AMP_F32, &x), AMP_OK);
	cr_assert_eq(amp_exp(ctx, "exp", x, &y), AMP_OK);
	amp_check_origin_get(ctx, &o);
	cr_expect_eq(o.step, -1);
	amp_ctx_free(ctx);
}

/* The same graph in force_fp32 stays finite: no origin, no non-finite counts. */
Test(origin, none_when_finite, .fini = checks_off)
{
	amp_check_config cfg = base_config();
	checks_on(&cfg);
	amp_ctx *ctx = new_ctx("force_fp32");
	cr_assert_eq(amp_step_begin(ctx), AMP_OK);
	uint64_t seq0;
	int n_inf;
	cr_assert_eq(exp_graph(ctx, &seq0, &n_inf), AMP_OK);
	amp_check_origin o;
	amp_check_origin_get(ctx, &o);
	cr_expect_eq(o.step, -1);
	cr_expect_eq(count_origin_rows(), 0);
	const seen_rec *r = find_stats(AMP_OP_EXP, AMP_ROLE_OUTPUT, "exp");
	cr_assert(r);
	cr_expect_eq(r->st.inf, 0);
	cr_expect_gt(r->st.near_overflow, 0); /* headroom: exp(14) = 1.2e6 > 32768 */
	amp_ctx_free(ctx);
}

/* A finite FP32 activation that overflows when the policy casts it to FP16 for a MatMul: the
 * MatMul is the origin, its FP32 source is reported as an input beside the cast. */
Test(origin, fp32_to_fp16_cast_overflow, .fini = checks_off)
{
	amp_check_config cfg = base_config();
	checks_on(&cfg);
	amp_ctx *ctx = new_ctx("allow_mix_precision");
	amp_tensor *w, *x, *y;
	cr_assert_eq(amp_param_new(ctx, "w", amp_shape2(2, 2), AMP_INIT_ONES, 1, &w), AMP_OK);
	cr_assert_eq(amp_step_begin(ctx), AMP_OK);
	float xv[4] = {70000.0f, 1.0f, 2.0f, 3.0f};
	cr_assert_eq(amp_tensor_from_f32(ctx, xv, amp_shape2(2, 2), AMP_F32, &x), AMP_OK);
	uint64_t seq0 = ctx->seq;
	cr_assert_eq(amp_matmul(ctx, "mm", x, w, 0, 0, &y), AMP_OK);
	amp_check_origin o;
	amp_check_origin_get(ctx, &o);
	cr_assert_eq(o.step, 0);
	cr_expect_eq(o.op, AMP_OP_MATMUL);
	cr_expect_eq(o.seq, seq0);
	cr_expect_eq(o.via_cast, 1);
	cr_expect_eq(o.phase, AMP_PHASE_FORWARD);
	const seen_rec *cast = find_stats(AMP_OP_MATMUL, AMP_ROLE_INPUT, "mm/in0");
	const seen_rec *src = find_stats(AMP_OP_MATMUL, AMP_ROLE_INPUT, "mm/in0.precast");
	cr_assert(cast && src);
	cr_expect_eq(cast->st.inf, 1);
	cr_expect_eq(cast->st.dtype, AMP_F16);
	cr_expect_eq(src->st.inf, 0);
	cr_expect_eq(src->st.dtype, AMP_F32);
	cr_expect_eq(src->st.near_overflow, 1);
	cr_expect_eq(src->st.absmax, 70000.0);
	amp_ctx_free(ctx);
}

/* A label longer than a profile keeps (AMP_STRING_MAX bytes) is cut before the suffixes of its
 * tensors' names, at a UTF-8 boundary: the cast input and its FP32 source stay two names. */
Test(origin, long_label_keeps_the_suffixes, .fini = checks_off)
{
	amp_check_config cfg = base_config();
	checks_on(&cfg);
	amp_ctx *ctx = new_ctx("allow_mix_precision");
	amp_tensor *w, *x, *y;
	static char label[1200];
	memset(label, 'L', 1001);
	for (int i = 1001; i + 2 < (int)sizeof label - 1; i += 2)
		memcpy(label + i, "\xc3\xa9",
		       2); /* e acute: two bytes, the cut falls inside some */
	cr_assert_eq(amp_param_new(ctx, "w", amp_shape2(2, 2), AMP_INIT_ONES, 1, &w), AMP_OK);
	cr_assert_eq(amp_step_begin(ctx), AMP_OK);
	float xv[4] = {70000.0f, 1.0f, 2.0f, 3.0f};
	cr_assert_eq(amp_tensor_from_f32(ctx, xv, amp_shape2(2, 2), AMP_F32, &x), AMP_OK);
	cr_assert_eq(amp_matmul(ctx, label, x, w, 0, 0, &y), AMP_OK);
	const char *want[2] = {"/in0", "/in0.precast"};
	for (int k = 0; k < 2; k++) {
		const seen_rec *r = NULL;
		for (int i = 0; i < n_seen && !r; i++) {
			size_t n = strlen(seen[i].name), m = strlen(want[k]);
			if (!seen[i].is_dump && seen[i].st.role == AMP_ROLE_INPUT && n > m &&
			    strcmp(seen[i].name + n - m, want[k]) == 0)
				r = &seen[i];
		}
		cr_assert(r, "a name ending in %s", want[k]);
		size_t n = strlen(r->name), base = n - strlen(want[k]);
		cr_expect_leq(n, AMP_STRING_MAX, "%zu bytes", n);
		cr_expect_gt(n, AMP_STRING_MAX - 2, "cut at most one character short: %zu", n);
		cr_expect_eq(memcmp(r->name, label, base), 0, "the label's first bytes");
		cr_expect_neq((unsigned char)r->name[base - 1], 0xc3, "not cut inside a character");
	}
	amp_ctx_free(ctx);
}

/* Scaled-gradient overflow: a finite forward, then the loss scale (static 1e6) overflows FP16
 * where the FP32 gradient of Sum goes back through the cast to the FP16 Linear output. */
Test(origin, scaled_gradient_through_cast, .fini = checks_off)
{
	amp_check_config cfg = base_config();
	checks_on(&cfg);
	amp_ctx *ctx = new_ctx("allow_mix_precision");
	cr_assert_eq(amp_config_set(ctx, "loss_scale", "1000000"), AMP_OK);
	amp_tensor *w, *x, *h, *loss;
	cr_assert_eq(amp_param_new(ctx, "fc", amp_shape2(8, 8), AMP_INIT_KAIMING, 1, &w), AMP_OK);
	cr_assert_eq(amp_step_begin(ctx), AMP_OK);
	float xv[16];
	for (int i = 0; i < 16; i++)
		xv[i] = 0.1f * (float)i;
	cr_assert_eq(amp_tensor_from_f32(ctx, xv, amp_shape2(2, 8), AMP_F32, &x), AMP_OK);
	cr_assert_eq(amp_linear(ctx, "fc", x, w, NULL, &h), AMP_OK);
	cr_assert_eq(amp_sum(ctx, "loss", h, &loss), AMP_OK);
	amp_check_origin o;
	amp_check_origin_get(ctx, &o);
	cr_assert_eq(o.step, -1, "the forward is finite");
	cr_assert_eq(amp_backward(ctx, loss), AMP_OK);
	amp_check_origin_get(ctx, &o);
	cr_assert_eq(o.step, 0);
	cr_expect_eq(o.phase, AMP_PHASE_BACKWARD);
	cr_expect_eq(o.op, AMP_OP_SUM, "charged to the backward op that consumed the cast: %s",
	             amp_op_name(o.op));
	cr_expect_eq(o.via_cast, 1);
	cr_expect_eq(o.inf, 16);
	int origin_grads = 0;
	for (int i = 0; i < n_seen; i++)
		origin_grads += !seen[i].is_dump && seen[i].st.origin && seen[i].st.role == AMP_ROLE_GRAD;
	cr_expect_eq(origin_grads, 1);
	amp_ctx_free(ctx);
}

/* Scaled-gradient overflow inside a backward kernel: in force_fp16 with scale 30000, dW of a
 * Linear sums 4 rows of 1 * 30000 and overflows; the incoming gradient is finite. */
Test(origin, scaled_gradient_in_backward_kernel, .fini = checks_off)
{
	amp_check_config cfg = base_config();
	checks_on(&cfg);
	amp_ctx *ctx = new_ctx("force_fp16");
	cr_assert_eq(amp_config_set(ctx, "loss_scale", "30000"), AMP_OK);
	amp_tensor *w, *x, *h, *loss;
	cr_assert_eq(amp_param_new(ctx, "fc", amp_shape2(2, 4), AMP_INIT_ZEROS, 0, &w), AMP_OK);
	cr_assert_eq(amp_step_begin(ctx), AMP_OK);
	float xv[16];
	for (int i = 0; i < 16; i++)
		xv[i] = 1.0f;
	cr_assert_eq(amp_tensor_from_f32(ctx, xv, amp_shape2(4, 4), AMP_F32, &x), AMP_OK);
	cr_assert_eq(amp_linear(ctx, "fc", x, w, NULL, &h), AMP_OK);
	cr_assert_eq(amp_sum(ctx, "loss", h, &loss), AMP_OK);
	cr_assert_eq(amp_backward(ctx, loss), AMP_OK);
	amp_check_origin o;
	amp_check_origin_get(ctx, &o);
	cr_assert_eq(o.step, 0);
	cr_expect_eq(o.phase, AMP_PHASE_BACKWARD);
	cr_expect_eq(o.op, AMP_OP_LINEAR);
	cr_expect_eq(o.via_cast, 0);
	cr_expect_eq(o.inf, 8);
	const seen_rec *dw = find_stats(AMP_OP_LINEAR, AMP_ROLE_GRAD, "fc/in1.grad");
	cr_assert(dw);
	cr_expect_eq(dw->st.origin, 1);
	cr_expect_eq(dw->st.inf, 8);
	const seen_rec *dy = find_stats(AMP_OP_LINEAR, AMP_ROLE_GRAD, "fc.grad");
	cr_assert(dy, "the incoming gradient is reported");
	cr_expect_eq(dy->st.inf + dy->st.nan, 0);
	cr_expect_eq(dy->st.near_overflow, 0);
	amp_ctx_free(ctx);
}

/* NaN from an invalid operation: log of a negative number. */
Test(origin, nan_from_invalid_op, .fini = checks_off)
{
	amp_check_config cfg = base_config();
	checks_on(&cfg);
	amp_ctx *ctx = new_ctx("force_fp32");
	cr_assert_eq(amp_step_begin(ctx), AMP_OK);
	float xv[4] = {1.0f, -2.0f, 3.0f, 0.0f};
	amp_tensor *x, *y;
	cr_assert_eq(amp_tensor_from_f32(ctx, xv, amp_shape1(4), AMP_F32, &x), AMP_OK);
	cr_assert_eq(amp_log(ctx, "log", x, &y), AMP_OK);
	amp_check_origin o;
	amp_check_origin_get(ctx, &o);
	cr_assert_eq(o.step, 0);
	cr_expect_eq(o.op, AMP_OP_LOG);
	cr_expect_eq(o.nan, 1);
	cr_expect_eq(o.inf, 1); /* log(0) = -Inf */
	const seen_rec *r = find_stats(AMP_OP_LOG, AMP_ROLE_OUTPUT, "log");
	cr_assert(r);
	cr_expect_eq(r->st.nan, 1);
	amp_ctx_free(ctx);
}

/* ---- dumps -------------------------------------------------------------------------------- */

static char spool[64];

static void make_spool(void)
{
	snprintf(spool, sizeof spool, "/tmp/amp_check_test_XXXXXX");
	cr_assert(mkdtemp(spool), "mkdtemp: %s", strerror(errno));
}

static void remove_spool(void)
{
	checks_off();
	char cmd[128];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", spool);
	if (spool[0] && system(cmd) != 0)
		cr_log_warn("could not remove %s", spool);
}

static int count_dumps(int reason)
{
	int n = 0;
	for (int i = 0; i < n_seen; i++)
		n += seen[i].is_dump && seen[i].d.reason == reason;
	return n;
}

/* The origin's input and output land in the spool as raw bytes, 0600, announced by name. */
Test(dump, origin_tensors_written, .init = make_spool, .fini = remove_spool)
{
	amp_check_config cfg = base_config();
	cfg.dump = AMP_DUMP_NONFINITE;
	cfg.spool_dir = spool;
	checks_on(&cfg);
	amp_ctx *ctx = new_ctx("force_fp16");
	cr_assert_eq(amp_step_begin(ctx), AMP_OK);
	uint64_t seq0;
	int n_inf;
	cr_assert_eq(exp_graph(ctx, &seq0, &n_inf), AMP_OK);
	cr_assert_eq(count_dumps(AMP_DUMP_REASON_NONFINITE), 2);
	amp_check_counters c;
	amp_check_counters_get(&c);
	cr_expect_eq(c.dumps, 2);
	cr_expect_eq(c.dump_bytes, 2 * EXP_N * 2);
	cr_expect_eq(c.skipped, 0);
	int roles = 0;
	for (int i = 0; i < n_seen; i++) {
		if (!seen[i].is_dump)
			continue;
		const amp_trace_dump_ref *d = &seen[i].d;
		roles |= 1 << d->role;
		cr_expect_eq(d->seq, seq0 + 2);
		cr_expect_eq(d->op, AMP_OP_EXP);
		cr_expect_eq(d->bytes, EXP_N * 2);
		cr_expect_eq(d->ndim, 1);
		cr_expect_eq(d->shape[0], EXP_N);
		cr_expect_null(strchr(seen[i].file, '/'), "file names are relative: %s", seen[i].file);
		char path[256];
		snprintf(path, sizeof path, "%s/%s", spool, seen[i].file);
		struct stat sb;
		cr_assert_eq(stat(path, &sb), 0, "%s: %s", path, strerror(errno));
		cr_expect_eq(sb.st_mode & 0777, 0600);
		cr_expect_eq((uint64_t)sb.st_size, d->bytes);
		if (d->role == AMP_ROLE_OUTPUT) {
			/* the Inf elements are there, bit for bit */
			uint16_t buf[EXP_N];
			FILE *f = fopen(path, "rb");
			cr_assert(f);
			cr_assert_eq(fread(buf, 2, EXP_N, f), EXP_N);
			fclose(f);
			int infs = 0;
			for (int k = 0; k < EXP_N; k++)
				infs += buf[k] == 0x7c00;
			cr_expect_eq(infs, n_inf);
		}
	}
	cr_expect_eq(roles, (1 << AMP_ROLE_INPUT) | (1 << AMP_ROLE_OUTPUT));
	amp_ctx_free(ctx);
}

/* Over the byte limit: the second dump is skipped and counted, bytes included. */
Test(dump, byte_limit_counts_skips, .init = make_spool, .fini = remove_spool)
{
	amp_check_config cfg = base_config();
	cfg.dump = AMP_DUMP_NONFINITE;
	cfg.spool_dir = spool;
	cfg.dump_limit = EXP_N * 2 + 10;
	checks_on(&cfg);
	amp_ctx *ctx = new_ctx("force_fp16");
	cr_assert_eq(amp_step_begin(ctx), AMP_OK);
	uint64_t seq0;
	int n_inf;
	cr_assert_eq(exp_graph(ctx, &seq0, &n_inf), AMP_OK);
	amp_check_counters c;
	amp_check_counters_get(&c);
	cr_expect_eq(c.dumps, 1);
	cr_expect_eq(c.skipped, 1);
	cr_expect_eq(c.skipped_limit, 1);
	cr_expect_eq(c.skipped_bytes, EXP_N * 2);
	cr_expect_eq(count_dumps(AMP_DUMP_REASON_NONFINITE), 1);
	amp_ctx_free(ctx);
}

/* Caps: 1 dump per step, 2 steps with non-finite dumps; 4 overflowing steps. */
Test(dump, step_caps_count_skips, .init = make_spool, .fini = remove_spool)
{
	amp_check_config cfg = base_config();
	cfg.dump = AMP_DUMP_NONFINITE;
	cfg.spool_dir = spool;
	cfg.dumps_per_step = 1;
	cfg.dump_steps_max = 2;
	checks_on(&cfg);
	amp_ctx *ctx = new_ctx("force_fp16");
	for (int s = 0; s < 4; s++) {
		cr_assert_eq(amp_step_begin(ctx), AMP_OK);
		uint64_t seq0;
		int n_inf;
		cr_assert_eq(exp_graph(ctx, &seq0, &n_inf), AMP_OK);
		cr_assert_eq(amp_step_end(ctx), AMP_OK);
	}
	amp_check_counters c;
	amp_check_counters_get(&c);
	cr_expect_eq(c.origins, 4);
	cr_expect_eq(c.dumps, 2, "one dump in each of the first two steps");
	cr_expect_eq(c.skipped_step_cap, 2, "the second dump of steps 0 and 1");
	cr_expect_eq(c.skipped_steps_cap, 4, "both dumps of steps 2 and 3");
	cr_expect_eq(c.skipped, 6);
	cr_expect_eq(c.skipped_bytes, 6 * EXP_N * 2);
	amp_check_report(); /* no session: a no-op that must not crash */
	amp_ctx_free(ctx);
}

/* No spool directory (dumps off in the session) or an unusable one: counted, not lost. */
Test(dump, no_spool_counts_skips, .fini = checks_off)
{
	amp_check_config cfg = base_config();
	cfg.dump = AMP_DUMP_NONFINITE;
	cfg.spool_dir = "/dev/null"; /* not a directory */
	checks_on(&cfg);
	amp_ctx *ctx = new_ctx("force_fp16");
	cr_assert_eq(amp_step_begin(ctx), AMP_OK);
	uint64_t seq0;
	int n_inf;
	cr_assert_eq(exp_graph(ctx, &seq0, &n_inf), AMP_OK);
	amp_check_counters c;
	amp_check_counters_get(&c);
	cr_expect_eq(c.dumps, 0);
	cr_expect_eq(c.skipped_nospool, 2);
	cr_expect_eq(c.skipped, 2);
	amp_ctx_free(ctx);
}

/* --dump-steps: every input and output of every op, forward and backward, at step 1 only. */
Test(dump, full_step_dump, .init = make_spool, .fini = remove_spool)
{
	amp_step_range r = {1, 1};
	amp_check_config cfg = base_config();
	cfg.spool_dir = spool;
	cfg.n_dump_steps = 1;
	cfg.dump_steps = &r;
	checks_on(&cfg);
	amp_ctx *ctx = new_ctx("allow_mix_precision");
	amp_tensor *w, *b;
	cr_assert_eq(amp_param_new(ctx, "fc", amp_shape2(4, 8), AMP_INIT_KAIMING, 1, &w), AMP_OK);
	cr_assert_eq(amp_param_new(ctx, "fc.bias", amp_shape1(4), AMP_INIT_ZEROS, 0, &b), AMP_OK);
	int per_step[3];
	for (int s = 0; s < 3; s++) {
		int before = count_dumps(AMP_DUMP_REASON_STEP);
		float xv[16];
		for (int i = 0; i < 16; i++)
			xv[i] = 0.05f * (float)i;
		amp_tensor *x, *h, *a, *loss;
		cr_assert_eq(amp_step_begin(ctx), AMP_OK);
		cr_assert_eq(amp_tensor_from_f32(ctx, xv, amp_shape2(2, 8), AMP_F32, &x), AMP_OK);
		cr_assert_eq(amp_linear(ctx, "fc", x, w, b, &h), AMP_OK);
		cr_assert_eq(amp_relu(ctx, "relu", h, &a), AMP_OK);
		cr_assert_eq(amp_mean(ctx, "loss", a, &loss), AMP_OK);
		cr_assert_eq(amp_backward(ctx, loss), AMP_OK);
		cr_assert_eq(amp_step_end(ctx), AMP_OK);
		per_step[s] = count_dumps(AMP_DUMP_REASON_STEP) - before;
	}
	cr_expect_eq(per_step[0], 0);
	cr_expect_eq(per_step[2], 0);
	/* forward: linear 3 in + out, relu in + out, mean in + out = 8; backward: mean dy + grad,
	 * relu dy + grad, linear dy + dW + db (x needs no grad) = 7 */
	cr_expect_eq(per_step[1], 15, "step 1 dumped %d tensors", per_step[1]);
	for (int i = 0; i < n_seen; i++)
		if (seen[i].is_dump)
			cr_expect_eq(seen[i].d.step, 1);
	amp_check_counters c;
	amp_check_counters_get(&c);
	cr_expect_eq(c.dumps, 15);
	cr_expect_eq(c.skipped, 0);
	amp_ctx_free(ctx);
}

/* ---- modes -------------------------------------------------------------------------------- */

static int train_step(amp_ctx *ctx, amp_optim *opt, amp_tensor *w, amp_tensor *b)
{
	float xv[32];
	int32_t yv[4] = {0, 1, 2, 3};
	for (int i = 0; i < 32; i++)
		xv[i] = 0.03f * (float)i - 0.4f;
	amp_tensor *x, *y, *h, *loss;
	int skipped, rc = amp_step_begin(ctx);
	if (!rc)
		rc = amp_tensor_from_f32(ctx, xv, amp_shape2(4, 8), AMP_F32, &x);
	if (!rc)
		rc = amp_tensor_from_i32(ctx, yv, amp_shape1(4), &y);
	if (!rc)
		rc = amp_linear(ctx, "fc", x, w, b, &h);
	if (!rc)
		rc = amp_cross_entropy(ctx, "ce", h, y, &loss);
	if (!rc)
		rc = amp_backward(ctx, loss);
	if (!rc)
		rc = amp_optim_step(opt, &skipped);
	int rc_end = amp_step_end(ctx);
	return rc ? rc : rc_end;
}

/* nan_check=step: the master gradients' statistics come from the half gradients the update
 * widens (in BF16 AMP, no loss scale) or from blocks unscaled in L1 (in FP16 AMP), without
 * widening and unscaling them in memory first; they are those of the unscaled FP32 master
 * gradients (here forced by gradient clipping, which reads the FP32 values), field for field,
 * and still recorded as the FP32 master's. */
Test(modes, step_checks_master_grads_read_in_place, .fini = checks_off)
{
	seen_rec want[2];
	const char *names[2] = {"fc.grad", "fc.bias.grad"};
	for (int run = 0; run < 4; run++) {
		amp_check_config cfg = base_config();
		cfg.nan_check = AMP_NAN_CHECK_STEP;
		checks_on(&cfg);
		amp_ctx *ctx =
		    new_ctx(run < 2 ? "allow_mix_precision_bf16" : "allow_mix_precision_fp16");
		/* runs 0, 2: clipping at a norm no gradient reaches, which widens and unscales them
		 * in FP32 first */
		if (run % 2 == 0)
			cr_assert_eq(amp_config_set(ctx, "gradient_clipping", "1e30"), AMP_OK);
		amp_tensor *w, *b;
		amp_optim *opt;
		amp_sgd_options so = {0.1f, 0, 0};
		cr_assert_eq(amp_param_new(ctx, "fc", amp_shape2(4, 8), AMP_INIT_KAIMING, 1, &w),
		             AMP_OK);
		cr_assert_eq(amp_param_new(ctx, "fc.bias", amp_shape1(4), AMP_INIT_ZEROS, 0, &b),
		             AMP_OK);
		cr_assert_eq(amp_optim_sgd_new(ctx, &so, &opt), AMP_OK);
		cr_assert_eq(train_step(ctx, opt, w, b), AMP_OK, "%s", amp_ctx_error(ctx));
		for (int k = 0; k < 2; k++) {
			const seen_rec *g = find_stats(AMP_OP_OPTIMIZER, AMP_ROLE_GRAD, names[k]);
			cr_assert(g, "%s: no statistics", names[k]);
			cr_expect_eq(g->st.dtype, AMP_F32, "%s: recorded as the FP32 master", names[k]);
			if (run % 2 == 0) {
				want[k] = *g;
				continue;
			}
			const amp_trace_tstats *a = &want[k].st, *c = &g->st;
			cr_expect(a->count == c->count && a->nan == c->nan && a->inf == c->inf &&
			              a->underflow == c->underflow &&
			              a->near_overflow == c->near_overflow && a->min == c->min &&
			              a->max == c->max && a->absmax == c->absmax &&
			              memcmp(a->exp_hist, c->exp_hist, sizeof a->exp_hist) == 0,
			          "%s, run %d: statistics from the half gradient differ from the FP32 "
			          "master's (min %g/%g max %g/%g)",
			          names[k], run, a->min, c->min, a->max, c->max);
			cr_expect(c->absmax > 0, "%s: a gradient that is not zero", names[k]);
		}
		amp_ctx_free(ctx);
		checks_off();
	}
}

/* nan_check=step: only the loss and the (unscaled) master gradients at optimizer time. */
Test(modes, step_checks_loss_and_master_grads, .fini = checks_off)
{
	amp_check_config cfg = base_config();
	cfg.nan_check = AMP_NAN_CHECK_STEP;
	checks_on(&cfg);
	amp_ctx *ctx = new_ctx("allow_mix_precision");
	amp_tensor *w, *b;
	amp_optim *opt;
	amp_sgd_options so = {0.1f, 0, 0};
	cr_assert_eq(amp_param_new(ctx, "fc", amp_shape2(4, 8), AMP_INIT_KAIMING, 1, &w), AMP_OK);
	cr_assert_eq(amp_param_new(ctx, "fc.bias", amp_shape1(4), AMP_INIT_ZEROS, 0, &b), AMP_OK);
	cr_assert_eq(amp_optim_sgd_new(ctx, &so, &opt), AMP_OK);
	cr_assert_eq(train_step(ctx, opt, w, b), AMP_OK, "%s", amp_ctx_error(ctx));
	int loss = 0, grads = 0, other = 0;
	for (int i = 0; i < n_seen; i++) {
		if (seen[i].is_dump)
			continue;
		if (strcmp(seen[i].name, "loss") == 0 && seen[i].st.role == AMP_ROLE_OUTPUT &&
		    seen[i].st.op == AMP_OP_CROSS_ENTROPY)
			loss++;
		else if (seen[i].st.op == AMP_OP_OPTIMIZER && seen[i].st.role == AMP_ROLE_GRAD)
			grads++;
		else
			other++;
	}
	cr_expect_eq(loss, 1);
	cr_expect_eq(grads, 2);
	cr_expect_eq(other, 0);
	const seen_rec *g = find_stats(AMP_OP_OPTIMIZER, AMP_ROLE_GRAD, "fc.grad");
	cr_assert(g);
	cr_expect_eq(g->st.count, 32);
	cr_expect_eq(g->st.dtype, AMP_F32);
	amp_ctx_free(ctx);
}

/* nan_check=off (or the trace off): nothing is checked. */
Test(modes, off_checks_nothing, .fini = checks_off)
{
	amp_check_config cfg = base_config();
	cfg.nan_check = AMP_NAN_CHECK_OFF;
	checks_on(&cfg);
	amp_ctx *ctx = new_ctx("force_fp16");
	cr_assert_eq(amp_step_begin(ctx), AMP_OK);
	uint64_t seq0;
	int n_inf;
	cr_assert_eq(exp_graph(ctx, &seq0, &n_inf), AMP_OK);
	cr_assert_eq(amp_step_end(ctx), AMP_OK);
	amp_trace_active = 0;
	cfg.nan_check = AMP_NAN_CHECK_OP;
	amp_check_configure(&cfg);
	cr_assert_eq(amp_step_begin(ctx), AMP_OK);
	cr_assert_eq(exp_graph(ctx, &seq0, &n_inf), AMP_OK);
	amp_check_counters c;
	amp_check_counters_get(&c);
	cr_expect_eq(c.checked, 0);
	cr_expect_eq(n_seen, 0);
	amp_ctx_free(ctx);
}

/* stats_every=2: statistics rows on even steps; odd steps only count (and report if bad). */
Test(modes, stats_every_samples, .fini = checks_off)
{
	amp_check_config cfg = base_config();
	cfg.stats_every = 2;
	checks_on(&cfg);
	amp_ctx *ctx = new_ctx("force_fp32");
	int rows[4];
	for (int s = 0; s < 4; s++) {
		int before = n_seen;
		uint64_t seq0;
		int n_inf;
		cr_assert_eq(amp_step_begin(ctx), AMP_OK);
		cr_assert_eq(exp_graph(ctx, &seq0, &n_inf), AMP_OK);
		cr_assert_eq(amp_step_end(ctx), AMP_OK);
		rows[s] = n_seen - before;
	}
	cr_expect_eq(rows[0], 4);
	cr_expect_eq(rows[1], 0);
	cr_expect_eq(rows[2], 4);
	cr_expect_eq(rows[3], 0);
	amp_check_counters c;
	amp_check_counters_get(&c);
	cr_expect_eq(c.checked, 16);
	amp_ctx_free(ctx);
}

/* ---- cost ---------------------------------------------------------------------------------
 * 784-1024-1024-10 MLP, batch 128, allow_mix_precision, SGD: the checks time themselves
 * (check_ns); the figure is their time over the rest of the step, median over the steps.  The
 * machine is shared, so the bound asserted is loose (5 %); the goal is 3 %. */
static double wall_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

Test(cost, mlp_step_overhead, .fini = checks_off, .timeout = 60)
{
	if (getenv("AMP_TEST_QUICK")) {
		cr_log_info("AMP_TEST_QUICK: skipped");
		return;
	}
	amp_ctx *ctx = new_ctx("allow_mix_precision");
	amp_tensor *w1, *b1, *w2, *b2, *w3, *b3;
	cr_assert_eq(amp_param_new(ctx, "fc1", amp_shape2(1024, 784), AMP_INIT_KAIMING, 1, &w1), 0);
	cr_assert_eq(amp_param_new(ctx, "fc1.bias", amp_shape1(1024), AMP_INIT_ZEROS, 0, &b1), 0);
	cr_assert_eq(amp_param_new(ctx, "fc2", amp_shape2(1024, 1024), AMP_INIT_KAIMING, 1, &w2), 0);
	cr_assert_eq(amp_param_new(ctx, "fc2.bias", amp_shape1(1024), AMP_INIT_ZEROS, 0, &b2), 0);
	cr_assert_eq(amp_param_new(ctx, "fc3", amp_shape2(10, 1024), AMP_INIT_KAIMING, 1, &w3), 0);
	cr_assert_eq(amp_param_new(ctx, "fc3.bias", amp_shape1(10), AMP_INIT_ZEROS, 0, &b3), 0);
	amp_optim *opt;
	amp_sgd_options so = {0.01f, 0.9f, 0};
	cr_assert_eq(amp_optim_sgd_new(ctx, &so, &opt), AMP_OK);
	float *x = malloc(128 * 784 * sizeof *x);
	int32_t y[128];
	cr_assert(x);
	rng_state = 11;
	for (int i = 0; i < 128 * 784; i++)
		x[i] = (float)rng_unit();
	for (int i = 0; i < 128; i++)
		y[i] = i % 10;
	amp_check_config cfg = base_config();
	checks_on(&cfg);
	amp_check_set_observer(NULL, NULL);
	enum { STEPS = 24 };
	double ratio[STEPS], step_ms[STEPS];
	for (int s = 0; s < STEPS + 3; s++) {
		amp_check_counters c0, c1;
		amp_check_counters_get(&c0);
		double t0 = wall_s();
		amp_tensor *xt, *yt, *h1, *a1, *h2, *a2, *lg, *loss;
		int skipped;
		cr_assert_eq(amp_step_begin(ctx), AMP_OK);
		cr_assert_eq(amp_tensor_from_f32(ctx, x, amp_shape2(128, 784), AMP_F32, &xt), 0);
		cr_assert_eq(amp_tensor_from_i32(ctx, y, amp_shape1(128), &yt), 0);
		cr_assert_eq(amp_linear(ctx, "fc1", xt, w1, b1, &h1), 0);
		cr_assert_eq(amp_relu(ctx, "relu1", h1, &a1), 0);
		cr_assert_eq(amp_linear(ctx, "fc2", a1, w2, b2, &h2), 0);
		cr_assert_eq(amp_relu(ctx, "relu2", h2, &a2), 0);
		cr_assert_eq(amp_linear(ctx, "fc3", a2, w3, b3, &lg), 0);
		cr_assert_eq(amp_cross_entropy(ctx, "ce", lg, yt, &loss), 0);
		cr_assert_eq(amp_backward(ctx, loss), 0);
		cr_assert_eq(amp_optim_step(opt, &skipped), 0);
		cr_assert_eq(amp_step_end(ctx), 0);
		double t = wall_s() - t0;
		amp_check_counters_get(&c1);
		double chk = (double)(c1.check_ns - c0.check_ns) * 1e-9;
		if (s >= 3) {
			ratio[s - 3] = chk / (t - chk);
			step_ms[s - 3] = t * 1e3;
		}
	}
	qsort(ratio, STEPS, sizeof ratio[0], cmp_double);
	qsort(step_ms, STEPS, sizeof step_ms[0], cmp_double);
	amp_check_counters c;
	amp_check_counters_get(&c);
	cr_log_info("MLP 784-1024-1024-10 b128 AMP, %s: step %.2f ms (median), checks %.2f %% "
	            "(median; q1 %.2f %%, q3 %.2f %%), %llu tensors checked",
	            amp_isa_name(amp_kernels_isa()), step_ms[STEPS / 2], 100 * ratio[STEPS / 2],
	            100 * ratio[STEPS / 4], 100 * ratio[3 * STEPS / 4],
	            (unsigned long long)c.checked);
	cr_expect_lt(ratio[STEPS / 2], 0.05, "checks cost %.2f %% of the step",
	             100 * ratio[STEPS / 2]);
	free(x);
	amp_ctx_free(ctx);
}

/* A master that keeps its working copy's half gradient (amp_grad_acc_kept) takes that
 * gradient's NaN/Inf count from the checks' scan of it instead of counting again: the count
 * must be right, so an overflow there still skips the step and a clean one does not. */
Test(modes, kept_gradient_counted_by_the_checks, .fini = checks_off)
{
	amp_check_config cfg = base_config();
	checks_on(&cfg);
	for (int overflow = 0; overflow < 2; overflow++) {
		amp_ctx *ctx = new_ctx("allow_mix_precision_fp16");
		amp_tensor *w, *c, *y;
		static const float w0[6] = {0.5f, -1, 2, 0.25f, -0.125f, 3};
		float cv[6] = {1, -2, 0.5f, 3, 0.75f, -0.25f};
		if (overflow)
			cv[3] = 1e4f; /* times the loss scale (128 or more): Inf in fp16 */
		cr_assert_eq(amp_param_new(ctx, "w", amp_shape1(6), AMP_INIT_ZEROS, 0, &w), AMP_OK);
		cr_assert_eq(amp_param_load(ctx, w, w0), AMP_OK);
		amp_sgd_options so = {.lr = 0.1f};
		amp_optim *o;
		cr_assert_eq(amp_optim_sgd_new(ctx, &so, &o), AMP_OK);
		cr_assert_eq(amp_step_begin(ctx), AMP_OK);
		cr_assert_eq(amp_tensor_from_f32(ctx, cv, amp_shape1(6), AMP_F16, &c), AMP_OK);
		cr_assert_eq(amp_mul(ctx, "mul", c, w, &y), AMP_OK, "%s", amp_ctx_error(ctx));
		float seed[6];
		for (int i = 0; i < 6; i++)
			seed[i] = (float)ctx->step_scale;
		cr_assert_eq(amp_backward_seeded(ctx, y, seed), AMP_OK, "%s", amp_ctx_error(ctx));
		cr_assert_not_null(w->param->grad_kept, "the half gradient is kept");
		cr_assert(w->param->working->grad->nonfinite_known, "the checks counted it");
		cr_assert_eq(w->param->grad_nonfinite, overflow ? 1 : 0);
		int skipped = -1;
		cr_assert_eq(amp_optim_step(o, &skipped), AMP_OK, "%s", amp_ctx_error(ctx));
		cr_assert_eq(skipped, overflow, "overflow %d: skipped %d", overflow, skipped);
		cr_assert_eq(amp_step_end(ctx), AMP_OK);
		amp_ctx_free(ctx);
	}
}

/* test_half.c — fp16 and bf16 <-> fp32 conversions, exhaustively.
 *
 * fp16: all 65,536 halves and all 2^32 float bit patterns (eight tests of 2^29, for --jobs)
 * must match vcvtph2ps / vcvtps2ph with round-to-nearest-even bit for bit, NaN payloads
 * included.  bf16: all 2^32 floats through amp_cvt_f32_bf16 on every path the CPU has must
 * give amp_half_f32_to_bf16's bits, which are checked against an independent nearest-even
 * rounding computed in FP64, and against vcvtneps2bf16 where the CPU has AVX512_BF16: equal
 * on every pattern except the fp32 subnormals, which the instruction reads as zero (it gives
 * the signed zero; the runtime rounds them like any value, e.g. 0x007fffff -> 0x0080).
 * AMP_TEST_QUICK=1 tests every 251st float plus every pattern near a boundary instead.
 */

#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <immintrin.h>
#include <stdlib.h>
#include <string.h>

#include "amp_half.h"
#include "kernels/kernels.h"
#include "kpath.h"

/* ---- reference: the F16C instructions ------------------------------------------------------ */

static int have_f16c(void)
{
	__builtin_cpu_init();
	return __builtin_cpu_supports("avx") && __builtin_cpu_supports("f16c");
}

__attribute__((target("avx,f16c"))) static uint16_t ref_f32_to_f16(float f)
{
	return (uint16_t)_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT);
}

__attribute__((target("avx,f16c"))) static float ref_f16_to_f32(uint16_t h)
{
	return _cvtsh_ss(h);
}

static float f32_of_bits(uint32_t u)
{
	float f;
	memcpy(&f, &u, sizeof f);
	return f;
}

static uint32_t bits_of_f32(float f)
{
	uint32_t u;
	memcpy(&u, &f, sizeof u);
	return u;
}

static int quick_mode(void)
{
	const char *q = getenv("AMP_TEST_QUICK");
	return q != NULL && strcmp(q, "1") == 0;
}

/* ---- all halves ------------------------------------------------------------------------------ */

Test(half, f16_to_f32_all_halves)
{
	if (!have_f16c())
		cr_skip_test("CPU lacks F16C: no reference");
	int bad = 0;
	for (uint32_t h = 0; h < 65536; h++) {
		uint32_t got = bits_of_f32(amp_f16_to_f32((uint16_t)h));
		uint32_t want = bits_of_f32(ref_f16_to_f32((uint16_t)h));
		if (got != want && bad++ < 5)
			cr_log_error("half 0x%04x: got 0x%08x, F16C 0x%08x", h, got, want);
	}
	cr_log_info("f16->f32: 65536 halves, %d differ from F16C", bad);
	cr_assert_eq(bad, 0);
}

Test(half, round_trip_all_halves)
{
	int bad = 0;
	for (uint32_t h = 0; h < 65536; h++) {
		uint16_t back = amp_f32_to_f16(amp_f16_to_f32((uint16_t)h));
		int is_nan = (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0;
		/* A NaN comes back quieted, with sign and payload. */
		uint16_t want = is_nan ? (uint16_t)(h | 0x200u) : (uint16_t)h;
		if (back != want && bad++ < 5)
			cr_log_error("half 0x%04x came back as 0x%04x", h, back);
	}
	cr_log_info("f16->f32->f16: 65536 halves, %d not identical", bad);
	cr_assert_eq(bad, 0);
}

/* ---- all floats ------------------------------------------------------------------------------ */

#define SWEEP_CHUNK 4096

/* Checks amp_f32_to_f16 on pats: (n) float bit patterns, n <= SWEEP_CHUNK.
 * Returns the number of mismatches, logging the first few of them. */
static uint64_t check_patterns(const uint32_t *pats, size_t n, uint64_t *logged)
{
	uint16_t got[SWEEP_CHUNK], want[SWEEP_CHUNK];
	for (size_t i = 0; i < n; i++)
		got[i] = amp_f32_to_f16(f32_of_bits(pats[i]));
	for (size_t i = 0; i < n; i++)
		want[i] = ref_f32_to_f16(f32_of_bits(pats[i]));
	uint64_t bad = 0;
	for (size_t i = 0; i < n; i++)
		if (got[i] != want[i]) {
			bad++;
			if ((*logged)++ < 5)
				cr_log_error("float 0x%08x: got 0x%04x, F16C 0x%04x", pats[i], got[i],
				             want[i]);
		}
	return bad;
}

/* Range r of 8: patterns [r * 2^29, (r+1) * 2^29), all of them or every 251st in quick mode. */
static void sweep_range(unsigned r)
{
	if (!have_f16c())
		cr_skip_test("CPU lacks F16C: no reference");
	uint64_t lo = (uint64_t)r << 29, hi = lo + ((uint64_t)1 << 29);
	uint64_t step = quick_mode() ? 251 : 1;
	uint32_t pats[SWEEP_CHUNK];
	uint64_t bad = 0, checked = 0, logged = 0;
	uint64_t p = lo;
	while (p < hi) {
		size_t n = 0;
		for (; n < SWEEP_CHUNK && p < hi; n++, p += step)
			pats[n] = (uint32_t)p;
		bad += check_patterns(pats, n, &logged);
		checked += n;
	}
	cr_log_info("f32->f16 patterns 0x%08llx..0x%08llx (step %llu): %llu checked, %llu differ",
	            (unsigned long long)lo, (unsigned long long)(hi - 1), (unsigned long long)step,
	            (unsigned long long)checked, (unsigned long long)bad);
	cr_assert_eq(bad, 0, "%llu float patterns convert differently from F16C",
	             (unsigned long long)bad);
}

Test(half, f32_to_f16_sweep_0) { sweep_range(0); }
Test(half, f32_to_f16_sweep_1) { sweep_range(1); }
Test(half, f32_to_f16_sweep_2) { sweep_range(2); }
Test(half, f32_to_f16_sweep_3) { sweep_range(3); }
Test(half, f32_to_f16_sweep_4) { sweep_range(4); }
Test(half, f32_to_f16_sweep_5) { sweep_range(5); }
Test(half, f32_to_f16_sweep_6) { sweep_range(6); }
Test(half, f32_to_f16_sweep_7) { sweep_range(7); }

/* Every float within 4 ulps of an fp16 value or of the tie between two neighbours (all ties,
 * the whole subnormal range, 65504 / 65520), plus 4096 ulps around zero, 2^-25, 2^-14, the
 * overflow threshold and Inf/NaN; both signs.  Runs in quick mode too. */
Test(half, f32_to_f16_boundaries)
{
	if (!have_f16c())
		cr_skip_test("CPU lacks F16C: no reference");
	static const uint32_t centres[] = {0x00000000u, 0x33000000u, 0x38800000u, 0x477fe000u,
	                                   0x477ff000u, 0x47800000u, 0x7f800000u, 0x7fc00000u};
	uint32_t pats[SWEEP_CHUNK];
	size_t n = 0;
	uint64_t bad = 0, checked = 0, logged = 0;
#define PUSH(u)                                                  \
	do {                                                     \
		pats[n++] = (u);                                 \
		if (n == SWEEP_CHUNK) {                          \
			bad += check_patterns(pats, n, &logged); \
			checked += n;                            \
			n = 0;                                   \
		}                                                \
	} while (0)
	for (int s = 0; s < 2; s++) {
		uint32_t sign = s ? 0x80000000u : 0u;
		for (uint32_t h = 0; h < 0x7c00u; h++) {
			float v = amp_f16_to_f32((uint16_t)h);
			/* The tie with the next half up, exact in fp32; past 65504 it is 65520. */
			float mid = h == 0x7bffu ? 65520.0f
			                         : 0.5f * (v + amp_f16_to_f32((uint16_t)(h + 1)));
			for (int d = -4; d <= 4; d++) {
				if (h > 0 || d >= 0)
					PUSH(sign | (uint32_t)((int64_t)bits_of_f32(v) + d));
				PUSH(sign | (uint32_t)((int64_t)bits_of_f32(mid) + d));
			}
		}
		for (size_t c = 0; c < sizeof centres / sizeof *centres; c++)
			for (int d = -4096; d <= 4096; d++)
				if ((int64_t)centres[c] + d >= 0)
					PUSH(sign | (uint32_t)((int64_t)centres[c] + d));
	}
#undef PUSH
	bad += check_patterns(pats, n, &logged);
	checked += n;
	cr_log_info("f32->f16 near fp16 boundaries: %llu checked, %llu differ",
	            (unsigned long long)checked, (unsigned long long)bad);
	cr_assert_eq(bad, 0);
}

/* ---- bulk converters, per path ------------------------------------------------------------- */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint32_t rng_u32(void)
{
	/* splitmix64 */
	uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return (uint32_t)((z ^ (z >> 31)) >> 32);
}

/* A float bit pattern: mostly values near the fp16 range, some NaN/Inf/subnormal/huge. */
static uint32_t random_pattern(void)
{
	uint32_t u = rng_u32();
	switch (rng_u32() % 8) {
	case 0: return u;                                        /* anything, NaN included */
	case 1: return (u & 0x807fffffu) | 0x7f800000u;          /* Inf / NaN */
	case 2: return (u & 0x80ffffffu) | 0x33000000u;          /* fp16 subnormal range */
	default: return (u & 0x80ffffffu) | ((0x70u + (u >> 24) % 32u) << 23);
	}
}

#define BULK_MAX 10007
#define GUARD 8

static void check_bulk(const char *path)
{
	if (!kpath_force(path))
		return;

	size_t cap = BULK_MAX + 1 + GUARD;
	float *fsrc = malloc(cap * sizeof *fsrc);
	uint16_t *hdst = malloc(cap * sizeof *hdst);
	uint16_t *hsrc = malloc(cap * sizeof *hsrc);
	float *fdst = malloc(cap * sizeof *fdst);
	cr_assert(fsrc && hdst && hsrc && fdst);
	for (size_t i = 0; i < cap; i++) {
		fsrc[i] = f32_of_bits(random_pattern());
		hsrc[i] = (uint16_t)rng_u32();
	}
	hsrc[3] = 0x7c01;  /* signalling NaN */
	hsrc[5] = 0xfc00;
	fsrc[3] = f32_of_bits(0x7f800001u);
	fsrc[5] = f32_of_bits(0xff800000u);

	int64_t lens[102];
	int nlens = 0;
	for (int64_t l = 0; l <= 100; l++)
		lens[nlens++] = l;
	lens[nlens++] = BULK_MAX;
	int64_t tested = 0;
	for (int li = 0; li < nlens; li++) {
		int64_t n = lens[li];
		for (int off = 0; off <= 1; off++) {  /* aligned and misaligned starts */
			if (n + off + GUARD > (int64_t)cap)
				continue;
			const float *src = fsrc + off;
			for (size_t i = 0; i < cap; i++)
				hdst[i] = 0xdead;
			int64_t nonfinite = amp_cvt_f32_f16(src, hdst + off, n), want_nonfinite = 0;
			for (int64_t i = 0; i < n; i++) {
				uint16_t want = amp_f32_to_f16(src[i]);
				want_nonfinite += (want & 0x7c00) == 0x7c00;
				cr_assert_eq(hdst[off + i], want,
				             "%s cvt_f32_f16 n=%lld off=%d i=%lld: 0x%08x -> 0x%04x, scalar 0x%04x",
				             path, (long long)n, off, (long long)i, bits_of_f32(src[i]),
				             hdst[off + i], want);
			}
			for (int64_t i = n + off; i < n + off + GUARD; i++)
				cr_assert_eq(hdst[i], 0xdead, "%s cvt_f32_f16 n=%lld wrote past the end",
				             path, (long long)n);
			cr_assert_eq(nonfinite, want_nonfinite,
			             "%s cvt_f32_f16 n=%lld off=%d: counted %lld NaN/Inf halves, wrote %lld",
			             path, (long long)n, off, (long long)nonfinite,
			             (long long)want_nonfinite);
			cr_assert_eq(nonfinite, amp_count_nonfinite_f16(hdst + off, n));

			for (size_t i = 0; i < cap; i++)
				fdst[i] = f32_of_bits(0xdeadbeefu);
			amp_cvt_f16_f32(hsrc + off, fdst + off, n);
			for (int64_t i = 0; i < n; i++) {
				uint32_t want = bits_of_f32(amp_f16_to_f32(hsrc[off + i]));
				cr_assert_eq(bits_of_f32(fdst[off + i]), want,
				             "%s cvt_f16_f32 n=%lld off=%d i=%lld: 0x%04x -> 0x%08x, scalar 0x%08x",
				             path, (long long)n, off, (long long)i, hsrc[off + i],
				             bits_of_f32(fdst[off + i]), want);
			}
			for (int64_t i = n + off; i < n + off + GUARD; i++)
				cr_assert_eq(bits_of_f32(fdst[i]), 0xdeadbeefu, "%s cvt_f16_f32 n=%lld wrote past the end",
				             path, (long long)n);
			tested += 2 * n;
		}
	}
	cr_log_info("%s bulk converters: %lld conversions, all equal to the scalar ones", path,
	            (long long)tested);
	free(fsrc);
	free(hdst);
	free(hsrc);
	free(fdst);
}

Test(half, bulk_scalar, .fini = kpath_restore) { check_bulk("scalar"); }
Test(half, bulk_avx2, .fini = kpath_restore) { check_bulk("avx2"); }
Test(half, bulk_avx512, .fini = kpath_restore) { check_bulk("avx512"); }
Test(half, bulk_avx512_bf16, .fini = kpath_restore) { check_bulk("avx512-bf16"); }

/* ---- bf16 ------------------------------------------------------------------------------------ */

static int have_avx512bf16(void)
{
	__builtin_cpu_init();
	return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bf16");
}

/* vcvtneps2bf16 on 16 floats. */
__attribute__((target("avx512f,avx512vl,avx512bf16"))) static void hw_f32_to_bf16(
    const float *src, uint16_t *dst)
{
	__m256bh b = _mm512_cvtneps_pbh(_mm512_loadu_ps(src));
	memcpy(dst, &b, 32);
}

/* Nearest-even bf16 of pattern x, computed independently of amp_half.h: the two bf16
 * neighbours of |x| compared in FP64 (exact there), Inf standing for 2^128. */
static uint16_t ref2_f32_to_bf16(uint32_t x)
{
	uint32_t sign = x & 0x80000000u, a = x & 0x7fffffffu;
	if (a > 0x7f800000u)
		return (uint16_t)((x >> 16) | 0x40u);
	if (a == 0x7f800000u || (a & 0xffffu) == 0)
		return (uint16_t)(x >> 16);
	uint32_t lo = a & 0xffff0000u, hi = lo + 0x10000u;
	double v = (double)f32_of_bits(a), vl = (double)f32_of_bits(lo);
	double vh = hi == 0x7f800000u ? 0x1p128 : (double)f32_of_bits(hi);
	double dl = v - vl, dh = vh - v;
	uint32_t r = dl < dh ? lo : dh < dl ? hi : ((lo >> 16) & 1u) ? hi : lo;
	return (uint16_t)((sign | r) >> 16);
}

static const char *const bf16_paths[] = {"scalar", "avx2", "avx512", "avx512-bf16"};
#define N_BF16_PATHS (sizeof bf16_paths / sizeof *bf16_paths)

typedef struct bf16_sweep {
	int have[N_BF16_PATHS];
	int hw;
	uint64_t bad_ref, bad_hw, hw_daz, bad_path[N_BF16_PATHS], checked, logged;
} bf16_sweep;

static void bf16_sweep_init(bf16_sweep *w)
{
	memset(w, 0, sizeof *w);
	for (size_t p = 0; p < N_BF16_PATHS; p++)
		w->have[p] = kpath_force(bf16_paths[p]);
	kpath_restore();
	w->hw = have_avx512bf16();
	if (!w->hw)
		printf("SKIPPED: avx512-bf16 needs avx512_bf16 (the vcvtneps2bf16 reference)\n");
}

/* Checks pats: (n) patterns, n a multiple of 16 up to SWEEP_CHUNK. */
static void bf16_check(bf16_sweep *w, const uint32_t *pats, size_t n)
{
	float f[SWEEP_CHUNK];
	uint16_t ref[SWEEP_CHUNK], got[SWEEP_CHUNK];
	memcpy(f, pats, n * sizeof *f);
	int64_t want_bad = 0;
	for (size_t i = 0; i < n; i++) {
		ref[i] = amp_half_f32_to_bf16(f[i]);
		want_bad += (ref[i] & 0x7f80u) == 0x7f80u;
		if (ref[i] != ref2_f32_to_bf16(pats[i]) && w->logged++ < 5)
			cr_log_error("float 0x%08x: amp_half 0x%04x, FP64 nearest-even 0x%04x", pats[i],
			             ref[i], ref2_f32_to_bf16(pats[i]));
		w->bad_ref += ref[i] != ref2_f32_to_bf16(pats[i]);
	}
	if (w->hw) {
		for (size_t i = 0; i + 16 <= n; i += 16)
			hw_f32_to_bf16(f + i, got + i);
		for (size_t i = 0; i < n; i++) {
			int sub = (pats[i] & 0x7f800000u) == 0 && (pats[i] & 0x7fffffu) != 0;
			/* On an fp32 subnormal the instruction gives the signed zero (DAZ). */
			uint16_t want = sub ? (uint16_t)((pats[i] >> 16) & 0x8000u) : ref[i];
			w->hw_daz += sub && got[i] == want && want != ref[i];
			if (got[i] != want && w->logged++ < 5)
				cr_log_error("float 0x%08x: vcvtneps2bf16 0x%04x, expected 0x%04x", pats[i],
				             got[i], want);
			w->bad_hw += got[i] != want;
		}
	}
	for (size_t p = 0; p < N_BF16_PATHS; p++) {
		if (!w->have[p])
			continue;
		kpath_force(bf16_paths[p]);
		int64_t nbad = amp_cvt_f32_bf16(f, got, (int64_t)n);
		uint64_t bad = nbad != want_bad;
		for (size_t i = 0; i < n; i++) {
			if (got[i] != ref[i] && w->logged++ < 5)
				cr_log_error("%s float 0x%08x: got 0x%04x, reference 0x%04x", bf16_paths[p],
				             pats[i], got[i], ref[i]);
			bad += got[i] != ref[i];
		}
		w->bad_path[p] += bad;
	}
	kpath_restore();
	w->checked += n;
}

static void bf16_report(const bf16_sweep *w, const char *what)
{
	cr_log_info("f32->bf16 %s: %llu checked; %llu differ from FP64 nearest-even; vcvtneps2bf16 "
	            "%s: %llu differ, %llu subnormals read as zero", what,
	            (unsigned long long)w->checked, (unsigned long long)w->bad_ref,
	            w->hw ? "run" : "skipped", (unsigned long long)w->bad_hw,
	            (unsigned long long)w->hw_daz);
	cr_assert_eq(w->bad_ref, 0);
	cr_assert_eq(w->bad_hw, 0);
	for (size_t p = 0; p < N_BF16_PATHS; p++) {
		if (w->have[p])
			cr_log_info("  path %s: %llu differ (or miscounted NaN/Inf)", bf16_paths[p],
			            (unsigned long long)w->bad_path[p]);
		cr_assert_eq(w->bad_path[p], 0, "path %s: %llu patterns differ", bf16_paths[p],
		             (unsigned long long)w->bad_path[p]);
	}
}

/* Range r of 8 of all float patterns, every one (every 251st in quick mode). */
static void bf16_sweep_range(unsigned r)
{
	bf16_sweep w;
	bf16_sweep_init(&w);
	uint64_t lo = (uint64_t)r << 29, hi = lo + ((uint64_t)1 << 29);
	uint64_t step = quick_mode() ? 251 : 1;
	uint32_t pats[SWEEP_CHUNK];
	for (uint64_t p = lo; p < hi;) {
		size_t n = 0;
		for (; n < SWEEP_CHUNK && p < hi; n++, p += step)
			pats[n] = (uint32_t)p;
		while (n % 16)  /* pad to whole vectors with a pattern already checked */
			pats[n++] = (uint32_t)lo;
		bf16_check(&w, pats, n);
	}
	char what[64];
	snprintf(what, sizeof what, "patterns 0x%08llx.. (step %llu)", (unsigned long long)lo,
	         (unsigned long long)step);
	bf16_report(&w, what);
}

Test(bf16, f32_to_bf16_sweep_0, .fini = kpath_restore) { bf16_sweep_range(0); }
Test(bf16, f32_to_bf16_sweep_1, .fini = kpath_restore) { bf16_sweep_range(1); }
Test(bf16, f32_to_bf16_sweep_2, .fini = kpath_restore) { bf16_sweep_range(2); }
Test(bf16, f32_to_bf16_sweep_3, .fini = kpath_restore) { bf16_sweep_range(3); }
Test(bf16, f32_to_bf16_sweep_4, .fini = kpath_restore) { bf16_sweep_range(4); }
Test(bf16, f32_to_bf16_sweep_5, .fini = kpath_restore) { bf16_sweep_range(5); }
Test(bf16, f32_to_bf16_sweep_6, .fini = kpath_restore) { bf16_sweep_range(6); }
Test(bf16, f32_to_bf16_sweep_7, .fini = kpath_restore) { bf16_sweep_range(7); }

/* Every pattern within 64 ulps of a bf16 value or of a tie, for every 16th bf16 (all of them
 * near zero, the subnormal/normal boundary and overflow), both signs, NaN and Inf included. */
Test(bf16, f32_to_bf16_boundaries, .fini = kpath_restore)
{
	bf16_sweep w;
	bf16_sweep_init(&w);
	uint32_t pats[SWEEP_CHUNK];
	size_t n = 0;
	for (uint32_t b = 0; b < 0x10000u; b++) {
		uint32_t e = (b >> 7) & 0xffu;
		if (b % 16 != 0 && e > 1 && e < 0xfe)
			continue;
		for (int d = -64; d <= 64; d++) {
			pats[n++] = (uint32_t)((b << 16) + (uint32_t)d);           /* near the value */
			pats[n++] = (uint32_t)((b << 16) + 0x8000u + (uint32_t)d); /* near the tie */
			if (n + 2 > SWEEP_CHUNK - 16) {
				while (n % 16)
					pats[n++] = 0;
				bf16_check(&w, pats, n);
				n = 0;
			}
		}
	}
	while (n % 16)
		pats[n++] = 0;
	bf16_check(&w, pats, n);
	bf16_report(&w, "near bf16 values and ties");
}

/* All 65536 bf16 through fp32 and back: identical, a NaN only made quiet. */
Test(bf16, round_trip_all, .fini = kpath_restore)
{
	uint16_t all[65536], back[65536];
	float wide[65536];
	for (uint32_t b = 0; b < 65536; b++)
		all[b] = (uint16_t)b;
	int64_t checked = 0;
	for (size_t p = 0; p < N_BF16_PATHS; p++) {
		if (!kpath_force(bf16_paths[p]))
			continue;
		amp_cvt_bf16_f32(all, wide, 65536);
		int64_t nonfinite = amp_cvt_f32_bf16(wide, back, 65536);
		int bad = 0;
		for (uint32_t b = 0; b < 65536; b++) {
			int is_nan = (b & 0x7f80u) == 0x7f80u && (b & 0x7fu) != 0;
			uint16_t want = is_nan ? (uint16_t)(b | 0x40u) : (uint16_t)b;
			uint32_t wbits = bits_of_f32(wide[b]);
			if ((wbits != b << 16 || back[b] != want ||
			     bits_of_f32(amp_half_bf16_to_f32((uint16_t)b)) != b << 16 ||
			     amp_half_f32_to_bf16(amp_half_bf16_to_f32((uint16_t)b)) != want) &&
			    bad++ < 5)
				cr_log_error("%s bf16 0x%04x -> 0x%08x -> 0x%04x", bf16_paths[p], b, wbits,
				             back[b]);
		}
		cr_assert_eq(bad, 0, "%s: %d bf16 patterns do not round-trip", bf16_paths[p], bad);
		cr_assert_eq(nonfinite, 2 * 128, "%s: NaN/Inf counted %lld, 256 expected",
		             bf16_paths[p], (long long)nonfinite);
		cr_assert_eq(amp_count_nonfinite_bf16(back, 65536), 256, "%s", bf16_paths[p]);
		checked += 65536;
	}
	cr_log_info("bf16 -> f32 -> bf16: %lld round trips, all identical", (long long)checked);
}

/* amp_cvt between every pair of float dtypes, on odd lengths: the bits of the scalar
 * conversions (half to half through fp32, one rounding) and the NaN/Inf count written. */
Test(bf16, cvt_any_to_any, .fini = kpath_restore)
{
	static const amp_dtype dts[] = {AMP_F32, AMP_F16, AMP_BF16};
	enum { N = 10007 };
	static float f[N], fo[N];
	static uint16_t h[N], b[N], o[N];
	for (int i = 0; i < N; i++) {
		f[i] = f32_of_bits(random_pattern());
		h[i] = amp_f32_to_f16(f[i]);
		b[i] = amp_half_f32_to_bf16(f[i]);
	}
	for (size_t p = 0; p < N_BF16_PATHS; p++) {
		if (!kpath_force(bf16_paths[p]))
			continue;
		for (size_t s = 0; s < 3; s++)
			for (size_t d = 0; d < 3; d++) {
				const void *src = dts[s] == AMP_F32 ? (const void *)f
				                  : dts[s] == AMP_F16 ? (const void *)h : (const void *)b;
				void *dst = dts[d] == AMP_F32 ? (void *)fo : (void *)o;
				int64_t bad = amp_cvt(dts[d], dst, dts[s], src, N), want_bad = 0;
				for (int i = 0; i < N; i++) {
					float x = dts[s] == AMP_F32 ? f[i]
					          : dts[s] == AMP_F16 ? amp_f16_to_f32(h[i])
					                              : amp_half_bf16_to_f32(b[i]);
					if (dts[d] == AMP_F32) {
						cr_assert_eq(bits_of_f32(fo[i]), bits_of_f32(x),
						             "%s amp_cvt %d -> %d at %d", bf16_paths[p], dts[s],
						             dts[d], i);
						continue;
					}
					uint16_t want = dts[d] == AMP_F16 ? amp_f32_to_f16(x)
					                                  : amp_half_f32_to_bf16(x);
					if (dts[s] == dts[d])  /* a copy: the bits as they were */
						want = dts[s] == AMP_F16 ? h[i] : b[i];
					want_bad += dts[d] == AMP_F16 ? (want & 0x7c00u) == 0x7c00u
					                              : (want & 0x7f80u) == 0x7f80u;
					cr_assert_eq(o[i], want, "%s amp_cvt %d -> %d at %d: 0x%04x, want 0x%04x",
					             bf16_paths[p], dts[s], dts[d], i, o[i], want);
				}
				cr_assert_eq(bad, want_bad, "%s amp_cvt %d -> %d: count %lld, want %lld",
				             bf16_paths[p], dts[s], dts[d], (long long)bad,
				             (long long)want_bad);
			}
	}
	cr_assert_eq(amp_cvt(AMP_I32, o, AMP_F32, f, 4), -1, "int32 is no float dtype");
	cr_assert_eq(amp_cvt(AMP_F32, fo, AMP_I32, f, 4), -1);
}

/* Bulk bf16 converters on every length 0..100 and one long one, aligned and not: the scalar
 * bits, the count, nothing written past the end. */
Test(bf16, bulk_all_paths, .fini = kpath_restore)
{
	enum { CAP = BULK_MAX + 1 + GUARD };
	static float fsrc[CAP], fdst[CAP];
	static uint16_t hsrc[CAP], hdst[CAP];
	for (size_t i = 0; i < CAP; i++) {
		fsrc[i] = f32_of_bits(random_pattern());
		hsrc[i] = (uint16_t)rng_u32();
	}
	fsrc[3] = f32_of_bits(0x00012345u);  /* a subnormal: rounded, not read as zero */
	fsrc[4] = f32_of_bits(0x807fffffu);
	int64_t tested = 0;
	for (size_t p = 0; p < N_BF16_PATHS; p++) {
		if (!kpath_force(bf16_paths[p]))
			continue;
		for (int64_t n = 0; n <= BULK_MAX; n = n < 100 ? n + 1 : (n < BULK_MAX ? BULK_MAX : n + 1))
			for (int off = 0; off <= 1; off++) {
				for (size_t i = 0; i < CAP; i++)
					hdst[i] = 0xdead, fdst[i] = f32_of_bits(0xdeadbeefu);
				int64_t bad = amp_cvt_f32_bf16(fsrc + off, hdst + off, n), want_bad = 0;
				amp_cvt_bf16_f32(hsrc + off, fdst + off, n);
				for (int64_t i = 0; i < n; i++) {
					uint16_t want = amp_half_f32_to_bf16(fsrc[off + i]);
					want_bad += (want & 0x7f80u) == 0x7f80u;
					cr_assert_eq(hdst[off + i], want, "%s cvt_f32_bf16 n=%lld i=%lld",
					             bf16_paths[p], (long long)n, (long long)i);
					cr_assert_eq(bits_of_f32(fdst[off + i]), (uint32_t)hsrc[off + i] << 16,
					             "%s cvt_bf16_f32 n=%lld i=%lld", bf16_paths[p],
					             (long long)n, (long long)i);
				}
				for (int64_t i = n + off; i < n + off + GUARD; i++) {
					cr_assert_eq(hdst[i], 0xdead, "%s cvt_f32_bf16 wrote past the end",
					             bf16_paths[p]);
					cr_assert_eq(bits_of_f32(fdst[i]), 0xdeadbeefu,
					             "%s cvt_bf16_f32 wrote past the end", bf16_paths[p]);
				}
				cr_assert_eq(bad, want_bad, "%s n=%lld: counted %lld NaN/Inf, wrote %lld",
				             bf16_paths[p], (long long)n, (long long)bad, (long long)want_bad);
				cr_assert_eq(amp_count_nonfinite_bf16(hdst + off, n), want_bad);
				tested += 2 * n;
			}
	}
	cr_log_info("bf16 bulk converters: %lld conversions, all equal to the scalar ones",
	            (long long)tested);
}

/* test_half.c — fp16 <-> fp32 conversions against the F16C instructions, exhaustively.
 *
 * All 65,536 halves and all 2^32 float bit patterns (eight tests of 2^29, for --jobs) must
 * match vcvtph2ps / vcvtps2ph with round-to-nearest-even bit for bit, NaN payloads included.
 * AMP_TEST_QUICK=1 tests every 251st float plus every pattern near an fp16 boundary instead.
 */

#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <immintrin.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"

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

static void restore_auto(void)
{
	amp_kernels_select("auto");
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
	amp_isa want_isa = strcmp(path, "avx512") == 0 ? AMP_ISA_AVX512
	                   : strcmp(path, "avx2") == 0 ? AMP_ISA_AVX2
	                                               : AMP_ISA_SCALAR;
	int got_isa = amp_kernels_select(path);
	cr_assert_geq(got_isa, 0);
	if (got_isa != (int)want_isa)
		cr_skip_test("CPU lacks the %s path", path);

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

Test(half, bulk_scalar, .fini = restore_auto) { check_bulk("scalar"); }
Test(half, bulk_avx2, .fini = restore_auto) { check_bulk("avx2"); }
Test(half, bulk_avx512, .fini = restore_auto) { check_bulk("avx512"); }

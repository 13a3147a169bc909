/* test_kernels.c — GEMM and elementwise kernels on every path, against FP64 and scalar loops.
 *
 * Each test forces one path (scalar, avx2, avx512; skipped if the CPU lacks it) and restores
 * "auto" when it ends.  Fixed-seed data; the max error seen is logged (--verbose shows it).
 * Tolerances, with err(i,j) = |C - R| / (sum_k |a_ik b_kj| + |beta C0|) and R in FP64:
 *   fp32 GEMM: max err <= 1e-5 sqrt(K)   (sum of K fp32 roundings, random-walk growth)
 *   fp16 GEMM: fp16 inputs exact, R from those inputs; data in [0.5,1): max |C-R|/|R| <= 2e-3;
 *              data in [-1,1): ||C-R||_F / ||R||_F <= 2e-3 (final fp16 rounding dominates);
 *              the avx512-fp16 engine rounds the products and block sums to fp16 as well
 *              (gemm_blind.h), an error of up to 2^-11 S per element that cancellation in R
 *              does not shrink (1x1x1 with beta 1 shows it), so there the norm-wise bound is
 *              ||C-R||_F <= 2e-3 ||R||_F + 2^-11 ||S||_F, S = sum_k |a_ik b_kj| + |beta C0|,
 *              and on [0.5,1) data max |C-R|/|R| <= 4e-3 (test_gemm_native's bound: an fp16
 *              sum of 32 positive terms alone reaches 2.3e-3 element-wise)
 *   bf16 GEMM: bf16 inputs exact, R from those inputs, S = sum_k |a_ik b_kj| + |beta C0|:
 *              |C - R| <= 2^-8 |R| + 1.01 (K + 2) 2^-24 S   (one bf16 rounding of the result,
 *              u = 2^-8, after K + 1 fp32 roundings of the sums, u = 2^-24 each)
 * K goes up to 4096 for all.  Any thread count must give the same bits as one thread.
 * fp16 elementwise (add, sub, mul, row broadcast, scale): on every path the bits of the FP32
 * result rounded once, NaN as any NaN; zero difference allowed.
 */
#include <cpuid.h>
#include <xmmintrin.h>
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "amp/amp.h"
#include "kernels/kernels.h"
#include "kernels/kernels_impl.h"
#include "kernels/stats.h"
#include "amp_half.h"
#include "kpath.h"

/* ---- helpers --------------------------------------------------------------------------------- */

static uint64_t rng_state;

static void rng_seed(uint64_t seed)
{
	rng_state = seed;
}

static uint64_t rng_u64(void)
{
	/* splitmix64 */
	uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* Uniform in [lo, hi). */
static float rng_uniform(float lo, float hi)
{
	float u = (float)(rng_u64() >> 40) * 0x1p-24f;
	return lo + (hi - lo) * u;
}

static uint32_t bits_of_f32(float f)
{
	uint32_t u;
	memcpy(&u, &f, sizeof u);
	return u;
}

static float f32_of_bits(uint32_t u)
{
	float f;
	memcpy(&f, &u, sizeof f);
	return f;
}

/* Forces `path` for the test; false (SKIPPED printed) if the CPU lacks it. */
#define FORCE_PATH(path)                 \
	do {                             \
		if (!kpath_force(path))  \
			return;          \
	} while (0)

#define PATH_TESTS(suite, name, fn)                                                      \
	Test(suite, name##_scalar, .fini = kpath_restore) { fn("scalar"); }              \
	Test(suite, name##_avx2, .fini = kpath_restore) { fn("avx2"); }                  \
	Test(suite, name##_avx512, .fini = kpath_restore) { fn("avx512"); }              \
	Test(suite, name##_avx512_bf16, .fini = kpath_restore) { fn("avx512-bf16"); }    \
	Test(suite, name##_avx512_fp16, .fini = kpath_restore) { fn("avx512-fp16"); }    \
	Test(suite, name##_amx_bf16, .fini = kpath_restore) { fn("amx-bf16"); }

/* ---- dispatch ---------------------------------------------------------------------------------- */

static const char *const all_paths[] = {"scalar",      "avx2",        "avx512",
                                        "avx512-bf16", "avx512-fp16", "amx-bf16"};

Test(dispatch, select_names, .fini = kpath_restore)
{
	amp_isa best = amp_kernels_best();
	cr_assert_eq(amp_kernels_select("auto"), (int)best);
	cr_assert_eq(amp_kernels_isa(), best);
	cr_assert(amp_kernels_has(best));
	cr_assert_eq(amp_kernels_select("scalar"), (int)AMP_ISA_SCALAR);
	cr_assert_eq(amp_kernels_select("bogus"), -1);
	cr_assert_eq(amp_kernels_isa(), AMP_ISA_SCALAR, "a refused name must not change the path");
	char why[400];
	cr_assert_gt(amp_kernels_select_error("bogus", why, sizeof why), 0);
	cr_assert(strstr(why, "no kernel path 'bogus'") && strstr(why, "auto, scalar"), "%s", why);
	cr_assert_str_eq(amp_kernels_path_missing("bogus"), "a path of that name");
	cr_assert_eq(amp_kernels_select_error("auto", why, sizeof why), 0);
	cr_assert_str_eq(why, "");
	int have = 0;
	for (int i = 0; i < AMP_ISA_COUNT; i++) {
		const char *name = all_paths[i];
		cr_assert_str_eq(amp_isa_name((amp_isa)i), name);
		const char *missing = amp_kernels_path_missing(name);
		int r = amp_kernels_select(name);
		if (missing == NULL) {
			/* A path the CPU has: selectable, listed, accepted without a message. */
			cr_assert_eq(r, i, "%s", name);
			cr_assert_eq(amp_kernels_isa(), (amp_isa)i);
			cr_assert(amp_kernels_has((amp_isa)i));
			cr_assert_eq(amp_kernels_usable((amp_isa)i), (amp_isa)i);
			cr_assert_eq(amp_kernels_select_error(name, why, sizeof why), 0);
			have++;
			cr_log_info("path %s: available", name);
			continue;
		}
		/* One it lacks: refused, the active path unchanged, the message naming what is
		 * missing and the paths the CPU has. */
		amp_isa before = amp_kernels_isa();
		cr_assert_eq(r, -1, "%s needs %s but was selected", name, missing);
		cr_assert_eq(amp_kernels_isa(), before);
		cr_assert(!amp_kernels_has((amp_isa)i));
		cr_assert(amp_kernels_has(amp_kernels_usable((amp_isa)i)));
		cr_assert_gt(amp_kernels_select_error(name, why, sizeof why), 0);
		cr_assert(strstr(why, missing) && strstr(why, "which this CPU lacks") &&
		          strstr(why, "auto, scalar"), "%s", why);
		cr_log_info("path %s: %s", name, why);
	}
	cr_assert_geq(have, 1, "scalar is always there");
	cr_log_info("best path on this CPU: %s", amp_isa_name(best));
}

/* The slots a path leaves empty come from its fallback: forcing a path gives the engines of
 * the kernels it supplies and of the fallback's for the others; auto takes each slot from the
 * best path that fills it. */
Test(dispatch, fallback_and_auto, .fini = kpath_restore)
{
	amp_kernels_select("auto");
	amp_engine auto_bf16 = amp_kernels_gemm_engine(AMP_BF16);
	amp_engine auto_f16 = amp_kernels_gemm_engine(AMP_F16);
	amp_engine auto_f32 = amp_kernels_gemm_engine(AMP_F32);
	cr_assert_eq(auto_f32, amp_kernels_has(AMP_ISA_AVX2) ? AMP_ENGINE_FP32_FMA : AMP_ENGINE_SCALAR);
	cr_assert_eq(amp_kernels_vec_engine(), auto_f32);
	/* the elementwise engines by dtype, as ampprof info prints them */
	cr_assert_str_eq(amp_elementwise_engine_of(AMP_F32), amp_engine_name(auto_f32));
	cr_assert_str_eq(amp_elementwise_engine_of(AMP_BF16), amp_engine_name(auto_f32));
	cr_assert_str_eq(amp_elementwise_engine_of(AMP_F16),
	                 amp_engine_name(amp_kernels_h16_engine()));
	if (amp_kernels_has(AMP_ISA_AVX512_BF16)) {
		/* Intel cores issue vdpbf16ps at half FP32 FMA's product rate: there auto takes the
		 * bf16 GEMM from AMX or else from avx512 (FP32 FMA), and says why. */
		unsigned a, v[3] = {0, 0, 0};
		int intel = __get_cpuid(0, &a, &v[0], &v[2], &v[1]) &&
		            memcmp(v, "GenuineIntel", 12) == 0;
		cr_assert_eq(amp_kernels_dpbf16_half_rate(), intel);
		amp_engine want = amp_kernels_has(AMP_ISA_AMX_BF16) ? AMP_ENGINE_AMX_BF16
		                  : intel                           ? AMP_ENGINE_FP32_FMA
		                                                    : AMP_ENGINE_AVX512_BF16;
		cr_assert_eq(auto_bf16, want, "auto bf16 GEMM on %s, want %s",
		             amp_engine_name(auto_bf16), amp_engine_name(want));
		const char *note = amp_gemm_engine_note(AMP_BF16);
		cr_assert_eq(note != NULL, want == AMP_ENGINE_FP32_FMA, "note: %s", note ? note : "-");
		cr_assert_null(amp_gemm_engine_note(AMP_F16));
		kpath_force("avx512-bf16");
		cr_assert_null(amp_gemm_engine_note(AMP_BF16), "forced: it runs vdpbf16ps");
		cr_assert_eq(amp_kernels_gemm_engine(AMP_BF16), AMP_ENGINE_AVX512_BF16);
		cr_assert_eq(amp_kernels_gemm_engine(AMP_F32), AMP_ENGINE_FP32_FMA, "from avx512");
		cr_assert_eq(amp_kernels_gemm_engine(AMP_F16), AMP_ENGINE_FP32_FMA, "from avx512");
		cr_assert_eq(amp_kernels_vec_engine(), AMP_ENGINE_FP32_FMA, "from avx512");
	} else {
		printf("SKIPPED: avx512-bf16 needs %s\n", amp_kernels_path_missing("avx512-bf16"));
	}
	if (!amp_kernels_has(AMP_ISA_AVX512_FP16))
		cr_assert_eq(auto_f16, amp_kernels_has(AMP_ISA_AVX2) ? AMP_ENGINE_FP32_FMA
		                                                     : AMP_ENGINE_SCALAR,
		             "no avx512-fp16: the fp16 GEMM is fp16 storage with fp32 arithmetic");
	kpath_force("scalar");
	for (int dt = 0; dt < AMP_DTYPE_COUNT; dt++)
		if (dt != AMP_I32)
			cr_assert_eq(amp_kernels_gemm_engine((amp_dtype)dt), AMP_ENGINE_SCALAR);
	cr_log_info("auto: f32 GEMM %s, f16 GEMM %s, bf16 GEMM %s", amp_engine_name(auto_f32),
	            amp_engine_name(auto_f16), amp_engine_name(auto_bf16));
}

/* auto takes the fp16 arithmetic from the best path that has it, and reports its engine. */
Test(dispatch, auto_h16_engine, .fini = kpath_restore)
{
	cr_assert_geq(amp_kernels_select("auto"), 0);
	amp_engine want = amp_kernels_has(AMP_ISA_AVX512_FP16) ? AMP_ENGINE_AVX512_FP16
	                  : amp_kernels_has(AMP_ISA_AVX2)      ? AMP_ENGINE_FP32_FMA
	                                                       : AMP_ENGINE_SCALAR;
	cr_assert_eq(amp_kernels_h16_engine(), want, "auto: fp16 engine %s, want %s",
	             amp_engine_name(amp_kernels_h16_engine()), amp_engine_name(want));
	uint16_t a[40] = {0x3c00}, b[40] = {0x4000}, d[40];
	cr_assert_eq(amp_vadd_h16(a, b, d, 40), want);
	cr_assert_eq(d[0], 0x4200, "1 + 2 = 3");
	cr_assert_eq(amp_relu_h16(a, d, 40, 0x7c00), want, "fp16 ReLU on the fp16 engine");
	cr_assert_eq(amp_relu_h16(a, d, 40, 0x7f80), amp_kernels_vec_engine(),
	             "bf16 ReLU on the fp32 kernels' engine");
}

Test(dispatch, env_override, .fini = kpath_restore)
{
	setenv("AMP_KERNELS", "scalar", 1);
	cr_assert_eq(amp_kernels_select(NULL), (int)AMP_ISA_SCALAR);
	setenv("AMP_KERNELS", "nonsense", 1);
	cr_assert_eq(amp_kernels_select(NULL), -1);
	unsetenv("AMP_KERNELS");
	cr_assert_eq(amp_kernels_select(NULL), (int)amp_kernels_best());
}

/* A fresh process (Criterion forks per test) with $AMP_KERNELS naming no path: auto is used
 * and the reason is kept for the caller to report. */
Test(dispatch, env_error_reported, .fini = kpath_restore)
{
	setenv("AMP_KERNELS", "sse2", 1);
	cr_assert_eq(amp_kernels_init(), -1);
	const char *why = amp_kernels_env_error();
	cr_assert(why && strstr(why, "no kernel path 'sse2'") && strstr(why, "this CPU has: auto"),
	          "%s", why ? why : "(null)");
	cr_assert_eq(amp_kernels_isa(), amp_kernels_best());
	unsetenv("AMP_KERNELS");
}

/* ---- GEMM -------------------------------------------------------------------------------------- */

typedef struct gemm_case {
	int64_t M, N, K;
} gemm_case;

/* Edges of every blocking: row and column tails, N of one or two 16-wide vectors (the
 * in-place A path for N <= 64), K cut into several k blocks (K = 4096 too), narrow x w^T (the
 * dot products: N <= 24, K >= 128 in fp32, >= 512 in fp16). */
static const gemm_case gemm_shapes[] = {
	{1, 1, 1}, {3, 5, 7}, {1, 40, 3}, {29, 1, 50}, {17, 33, 65}, {64, 64, 64},
	{13, 37, 300}, {100, 300, 784}, {300, 1100, 9}, {5, 1100, 300}, {3, 5, 0},
	{37, 64, 129}, {25, 16, 700}, {40, 70, 4096}, {7, 33, 4096}, {9, 10, 1000}, {6, 13, 130},
};

/* Leading dimension for a rows x cols matrix in case number c: sometimes padded. */
static int64_t pick_ld(int64_t cols, size_t c)
{
	return cols + (int64_t)(c % 3 == 1 ? 5 : 0) + (cols == 0 ? 1 : 0);
}

/* R (M,N) fp64 = op(A) op(B), A and B given as fp64 copies with their layouts. */
static void gemm_ref(int ta, int tb, int64_t M, int64_t N, int64_t K, const double *A, int64_t lda,
                     const double *B, int64_t ldb, double *R, double *Rabs)
{
	for (int64_t i = 0; i < M; i++)
		for (int64_t j = 0; j < N; j++) {
			double s = 0.0, sa = 0.0;
			for (int64_t k = 0; k < K; k++) {
				double a = ta ? A[k * lda + i] : A[i * lda + k];
				double b = tb ? B[j * ldb + k] : B[k * ldb + j];
				s += a * b;
				sa += fabs(a * b);
			}
			R[i * N + j] = s;
			Rabs[i * N + j] = sa;
		}
}

/* Sizes of stored op(A) and op(B) with their leading dimensions. */
static void operand_dims(int ta, int tb, const gemm_case *g, size_t c, int64_t *lda,
                         int64_t *na, int64_t *ldb, int64_t *nb)
{
	int64_t arows = ta ? g->K : g->M, acols = ta ? g->M : g->K;
	int64_t brows = tb ? g->N : g->K, bcols = tb ? g->K : g->N;
	*lda = pick_ld(acols, c);
	*ldb = pick_ld(bcols, c + 1);
	*na = arows * *lda + 1;
	*nb = brows * *ldb + 1;
}

static void check_gemm_f32(const char *path)
{
	FORCE_PATH(path);
	rng_seed(42);
	double worst = 0.0, worst_err = 0.0;
	int runs = 0;
	for (size_t c = 0; c < sizeof gemm_shapes / sizeof *gemm_shapes; c++) {
		const gemm_case *g = &gemm_shapes[c];
		for (int t = 0; t < 4; t++) {
			int ta = t & 1, tb = t >> 1;
			int64_t lda, na, ldb, nb, ldc = pick_ld(g->N, c + 2);
			operand_dims(ta, tb, g, c, &lda, &na, &ldb, &nb);
			int64_t nc = g->M * ldc;
			float *A = malloc((size_t)na * sizeof *A), *B = malloc((size_t)nb * sizeof *B);
			float *C = malloc((size_t)nc * sizeof *C), *C0 = malloc((size_t)nc * sizeof *C0);
			double *Ad = malloc((size_t)na * sizeof *Ad), *Bd = malloc((size_t)nb * sizeof *Bd);
			double *R = malloc((size_t)(g->M * g->N + 1) * sizeof *R);
			double *Rabs = malloc((size_t)(g->M * g->N + 1) * sizeof *Rabs);
			cr_assert(A && B && C && C0 && Ad && Bd && R && Rabs);
			for (int64_t i = 0; i < na; i++)
				Ad[i] = A[i] = rng_uniform(-1.0f, 1.0f);
			for (int64_t i = 0; i < nb; i++)
				Bd[i] = B[i] = rng_uniform(-1.0f, 1.0f);
			for (int64_t i = 0; i < nc; i++)
				C0[i] = rng_uniform(-1.0f, 1.0f);
			gemm_ref(ta, tb, g->M, g->N, g->K, Ad, lda, Bd, ldb, R, Rabs);
			double tol = 1e-5 * sqrt((double)(g->K > 0 ? g->K : 1));

			for (int beta1 = 0; beta1 <= 1; beta1++) {
				/* beta 0: C starts as NaN everywhere, which must not leak through. */
				for (int64_t i = 0; i < nc; i++)
					C[i] = beta1 ? C0[i] : f32_of_bits(0x7fc00001u);
				amp_gemm_f32(ta, tb, g->M, g->N, g->K, A, lda, B, ldb, beta1 ? 1.0f : 0.0f, C,
				             ldc);
				double maxerr = 0.0;
				for (int64_t i = 0; i < g->M; i++) {
					for (int64_t j = 0; j < ldc; j++) {
						float got = C[i * ldc + j];
						if (j >= g->N) {  /* padding between rows is not C's */
							float was = beta1 ? C0[i * ldc + j] : f32_of_bits(0x7fc00001u);
							cr_assert_eq(bits_of_f32(got), bits_of_f32(was),
							             "%s f32 GEMM wrote outside C", path);
							continue;
						}
						double want = R[i * g->N + j] + (beta1 ? (double)C0[i * ldc + j] : 0.0);
						double scale = Rabs[i * g->N + j] + (beta1 ? fabs((double)C0[i * ldc + j]) : 0.0);
						double err = fabs((double)got - want) / (scale > 0.0 ? scale : 1.0);
						cr_assert(isfinite(got), "%s f32 GEMM %lldx%lldx%lld t%d beta %d: C[%lld][%lld] = %g",
						          path, (long long)g->M, (long long)g->N, (long long)g->K, t, beta1,
						          (long long)i, (long long)j, (double)got);
						if (err > maxerr)
							maxerr = err;
					}
				}
				cr_assert_leq(maxerr, tol,
				              "%s f32 GEMM %lldx%lldx%lld ta=%d tb=%d beta=%d: err %.3g > %.3g",
				              path, (long long)g->M, (long long)g->N, (long long)g->K, ta, tb,
				              beta1, maxerr, tol);
				if (maxerr / tol > worst)
					worst = maxerr / tol;
				if (maxerr > worst_err)
					worst_err = maxerr;
				runs++;
			}
			free(A); free(B); free(C); free(C0); free(Ad); free(Bd); free(R); free(Rabs);
		}
	}
	cr_log_info("%s f32 GEMM: %d runs, max err %.3g (relative to sum |a b|); worst run at %.3g "
	            "of its 1e-5 sqrt(K) tolerance", path, runs, worst_err, worst);
}

PATH_TESTS(gemm, f32, check_gemm_f32)

/* Shapes for fp16, K = 4096 included. */
static const gemm_case gemm16_shapes[] = {
	{1, 1, 1}, {3, 5, 7}, {17, 33, 65}, {64, 64, 64}, {100, 300, 784}, {40, 70, 4096},
	{700, 40, 20}, {300, 1100, 9}, {3, 5, 0},
};

/* One fp16 GEMM run on data in [lo, 1); returns its error measure (see the file comment). */
static double run_gemm_f16(const char *path, const gemm_case *g, size_t c, int ta, int tb,
                           int beta1, float lo)
{
	int64_t lda, na, ldb, nb, ldc = pick_ld(g->N, c + 2);
	operand_dims(ta, tb, g, c, &lda, &na, &ldb, &nb);
	int64_t nc = g->M * ldc;
	uint16_t *A = malloc((size_t)na * sizeof *A), *B = malloc((size_t)nb * sizeof *B);
	uint16_t *C = malloc((size_t)nc * sizeof *C), *C0 = malloc((size_t)nc * sizeof *C0);
	double *Ad = malloc((size_t)na * sizeof *Ad), *Bd = malloc((size_t)nb * sizeof *Bd);
	double *R = malloc((size_t)(g->M * g->N + 1) * sizeof *R);
	double *Rabs = malloc((size_t)(g->M * g->N + 1) * sizeof *Rabs);
	cr_assert(A && B && C && C0 && Ad && Bd && R && Rabs);
	for (int64_t i = 0; i < na; i++) {
		A[i] = amp_f32_to_f16(rng_uniform(lo, 1.0f));
		Ad[i] = (double)amp_f16_to_f32(A[i]);
	}
	for (int64_t i = 0; i < nb; i++) {
		B[i] = amp_f32_to_f16(rng_uniform(lo, 1.0f));
		Bd[i] = (double)amp_f16_to_f32(B[i]);
	}
	for (int64_t i = 0; i < nc; i++)
		C0[i] = amp_f32_to_f16(rng_uniform(lo, 1.0f));
	gemm_ref(ta, tb, g->M, g->N, g->K, Ad, lda, Bd, ldb, R, Rabs);

	for (int64_t i = 0; i < nc; i++)
		C[i] = beta1 ? C0[i] : 0x7e00;  /* NaN: must be overwritten under beta 0 */
	amp_gemm_f16(ta, tb, g->M, g->N, g->K, A, lda, B, ldb, beta1 ? 1.0f : 0.0f, C, ldc);

	double maxrel = 0.0, diff2 = 0.0, ref2 = 0.0, s2 = 0.0;
	int native = amp_kernels_gemm_engine(AMP_F16) == AMP_ENGINE_AVX512_FP16;
	for (int64_t i = 0; i < g->M; i++)
		for (int64_t j = 0; j < ldc; j++) {
			uint16_t got = C[i * ldc + j];
			if (j >= g->N) {
				cr_assert_eq(got, beta1 ? C0[i * ldc + j] : 0x7e00,
				             "%s f16 GEMM wrote outside C", path);
				continue;
			}
			double want = R[i * g->N + j] +
			              (beta1 ? (double)amp_f16_to_f32(C0[i * ldc + j]) : 0.0);
			double x = (double)amp_f16_to_f32(got);
			cr_assert(isfinite(x), "%s f16 GEMM %lldx%lldx%lld: C[%lld][%lld] not finite",
			          path, (long long)g->M, (long long)g->N, (long long)g->K,
			          (long long)i, (long long)j);
			double d = fabs(x - want);
			if (want != 0.0 && d / fabs(want) > maxrel)
				maxrel = d / fabs(want);
			if (want == 0.0 && d > maxrel)
				maxrel = d;
			diff2 += d * d;
			ref2 += want * want;
			double sabs = Rabs[i * g->N + j] +
			              (beta1 ? fabs((double)amp_f16_to_f32(C0[i * ldc + j])) : 0.0);
			s2 += sabs * sabs;
		}
	free(A); free(B); free(C); free(C0); free(Ad); free(Bd); free(R); free(Rabs);
	if (lo >= 0.0f)
		return maxrel;
	/* as a ratio to 2e-3 ||R||_F + 2^-11 ||S||_F, scaled so that 2e-3 is the bound */
	double scale = sqrt(ref2) + (native ? 0x1p-11 / 2e-3 * sqrt(s2) : 0.0);
	return scale > 0.0 ? sqrt(diff2) / scale : sqrt(diff2);
}

static void check_gemm_f16(const char *path)
{
	FORCE_PATH(path);
	rng_seed(7);
	const double tol = 2e-3;
	const double tol_pos =
	    amp_kernels_gemm_engine(AMP_F16) == AMP_ENGINE_AVX512_FP16 ? 4e-3 : tol;
	double worst_pos = 0.0, worst_mixed = 0.0, worst_k4096 = 0.0;
	int runs = 0;
	for (size_t c = 0; c < sizeof gemm16_shapes / sizeof *gemm16_shapes; c++) {
		const gemm_case *g = &gemm16_shapes[c];
		for (int t = 0; t < 4; t++)
			for (int beta1 = 0; beta1 <= 1; beta1++) {
				int ta = t & 1, tb = t >> 1;
				double e = run_gemm_f16(path, g, c, ta, tb, beta1, 0.5f);
				cr_assert_leq(e, tol_pos,
				              "%s f16 GEMM %lldx%lldx%lld ta=%d tb=%d beta=%d, "
				              "data in [0.5,1): "
				              "max rel err %.3g > %.3g",
				              path, (long long)g->M, (long long)g->N,
				              (long long)g->K, ta, tb, beta1, e, tol_pos);
				if (e > worst_pos)
					worst_pos = e;
				if (g->K == 4096 && e > worst_k4096)
					worst_k4096 = e;
				e = run_gemm_f16(path, g, c, ta, tb, beta1, -1.0f);
				cr_assert_leq(e, tol,
				              "%s f16 GEMM %lldx%lldx%lld ta=%d tb=%d beta=%d, data in [-1,1): "
				              "norm-wise rel err %.3g > %.3g",
				              path, (long long)g->M, (long long)g->N, (long long)g->K, ta, tb,
				              beta1, e, tol);
				if (e > worst_mixed)
					worst_mixed = e;
				runs += 2;
			}
	}
	cr_log_info("%s f16 GEMM: %d runs; max rel err %.3g on [0.5,1) data (K=4096: %.3g; "
	            "tolerance %.3g), norm-wise %.3g on [-1,1) data (tolerance %.3g)",
	            path, runs, worst_pos, worst_k4096, tol_pos, worst_mixed, tol);
}

PATH_TESTS(gemm, f16, check_gemm_f16)

/* The native fp16 GEMM sums up to 48 products in FP16: [30000 x3, -30000 x3, 0.5 x58] . 1 passed
 * 65504 in a partial sum (Inf, where FP32 arithmetic gives 29).  Its second look sums such
 * elements again in FP32: 29, with beta 1 and C = 1 30, into an FP32 C 29; a result past
 * FP16's range stays Inf; the bits do not depend on the thread count; the caller's MXCSR
 * flags are kept. */
Test(gemm, f16_native_partial_sums_past_fp16_range, .fini = kpath_restore)
{
	if (!kpath_force("avx512-fp16"))
		return;
	enum { K = 64, M = 200 };
	static uint16_t a[M * K], b[K], c[M], c1[M];
	for (int i = 0; i < M; i++)
		for (int k = 0; k < K; k++) {
			float v = k < 3 ? 30000.0f : k < 6 ? -30000.0f : 0.5f;
			if (i % 3 == 1)
				v = (float)((i * 7 + k * 13) % 17) - 8.0f; /* ordinary rows */
			if (i % 3 == 2)
				v = k < 6 ? 30000.0f : 0.5f; /* the true sum is past 65504 */
			a[i * K + k] = amp_f32_to_f16(v);
		}
	for (int k = 0; k < K; k++)
		b[k] = amp_f32_to_f16(1.0f);
	_mm_setcsr(_mm_getcsr() | _MM_EXCEPT_INEXACT);
	amp_stats st;
	amp_gemm(AMP_F16, 0, 0, M, 1, K, a, K, b, 1, 0.0f, c, 1, &st);
	cr_assert(_mm_getcsr() & _MM_EXCEPT_INEXACT, "the caller's flag is kept");
	for (int i = 0; i < M; i++) {
		float want = 0;
		for (int k = 0; k < K; k++)
			want += amp_f16_to_f32(a[i * K + k]);
		float got = amp_f16_to_f32(c[i]);
		if (i % 3 == 2)
			cr_assert(isinf(got), "row %d: %g", i, (double)got);
		else
			cr_assert_eq(got, want, "row %d: %g, want %g", i, (double)got, (double)want);
	}
	cr_assert_eq(st.pinf, (uint64_t)(M / 3), "the statistics are of the C it leaves");
	/* beta 1 on C = 1 */
	for (int i = 0; i < M; i++)
		c1[i] = amp_f32_to_f16(1.0f);
	amp_gemm(AMP_F16, 0, 0, M, 1, K, a, K, b, 1, 1.0f, c1, 1, NULL);
	cr_assert_eq(amp_f16_to_f32(c1[0]), 30.0f, "%g", (double)amp_f16_to_f32(c1[0]));
	float c32[M];
	amp_gemm_acc32(AMP_F16, 0, 0, M, 1, K, a, K, b, 1, 0.0f, c32, 1);
	cr_assert_eq(c32[0], 29.0f, "%g", (double)c32[0]);
	/* the same bits on 3 threads (a transposed view of the same rows: N = 200, split) */
	static uint16_t ct1[M], ct3[M];
	amp_gemm(AMP_F16, 0, 1, 1, M, K, b, K, a, K, 0.0f, ct1, M, NULL);
	amp_kernels_set_threads(3);
	amp_gemm(AMP_F16, 0, 1, 1, M, K, b, K, a, K, 0.0f, ct3, M, NULL);
	cr_assert_eq(memcmp(ct1, ct3, sizeof ct1), 0, "bits differ across thread counts");
	cr_assert_eq(memcmp(ct1, c, sizeof ct1), 0, "C^T differs from C");
}

/* The same on the dot products of a narrow x w^T (N = 3, K = 1024): a lane sums k = l, l + 32,
 * ..., so three 30000s 32 apart make a lane's FP16 sum Inf where the FP32 sum is finite; those
 * elements come out as the FP32 sums, with the same bits on 1 and 3 threads.  And a wider x w^T
 * (64 x 70) whose 2 threads take columns 0-63 and 64-69: the second range alone is narrow
 * enough for the dot products, but its second look must sum as the whole does (random data,
 * where another order shows). */
Test(gemm, f16_native_dot_partial_sums_past_fp16_range, .fini = kpath_restore)
{
	if (!kpath_force("avx512-fp16"))
		return;
	enum { K = 1024, M = 1400, N = 3 };
	static uint16_t a[M * K], w[N * K], c1[M * N], c3[M * N];
	for (int i = 0; i < M; i++)
		for (int k = 0; k < K; k++) {
			float v = 0.5f;
			if (i % 2 == 0 && k % 32 == 0 && k < 192)
				v = k < 96 ? 30000.0f : -30000.0f;
			if (i % 2 == 1)
				v = (float)((i * 7 + k * 13) % 17) - 8.0f;
			a[i * K + k] = amp_f32_to_f16(v);
		}
	for (int i = 0; i < N * K; i++)
		w[i] = amp_f32_to_f16(1.0f);
	amp_kernels_set_threads(1);
	amp_stats st;
	amp_gemm(AMP_F16, 0, 1, M, N, K, a, K, w, K, 0.0f, c1, N, &st);
	for (int i = 0; i < M; i++) {
		float want = 0;
		for (int k = 0; k < K; k++)
			want += amp_f16_to_f32(a[i * K + k]);
		for (int j = 0; j < N; j++)
			cr_assert_eq(amp_f16_to_f32(c1[i * N + j]), want, "row %d: %g, want %g", i,
			             (double)amp_f16_to_f32(c1[i * N + j]), (double)want);
	}
	cr_assert_eq(st.pinf + st.ninf + st.nan, 0u, "the statistics are of the C it leaves");
	amp_kernels_set_threads(3);
	amp_gemm(AMP_F16, 0, 1, M, N, K, a, K, w, K, 0.0f, c3, N, NULL);
	cr_assert_eq(memcmp(c1, c3, sizeof c1), 0, "bits differ across thread counts");

	enum { M2 = 64, N2 = 70 };
	static uint16_t b2[N2 * K], d1[M2 * N2], d2[M2 * N2];
	rng_seed(31);
	for (int i = 0; i < M2; i++)
		for (int k = 0; k < K; k++)
			a[i * K + k] =
			    amp_f32_to_f16(i % 2 == 0 && k < 6 ? (k < 3 ? 30000.0f : -30000.0f)
			                                       : rng_uniform(-1.0f, 1.0f));
	for (int j = 0; j < N2; j++)
		for (int k = 0; k < K; k++)
			b2[j * K + k] = amp_f32_to_f16(k < 6 ? 1.0f : rng_uniform(-1.0f, 1.0f));
	amp_kernels_set_threads(1);
	amp_gemm(AMP_F16, 0, 1, M2, N2, K, a, K, b2, K, 0.0f, d1, N2, NULL);
	amp_kernels_set_threads(2);
	amp_gemm(AMP_F16, 0, 1, M2, N2, K, a, K, b2, K, 0.0f, d2, N2, NULL);
	for (int e = 0; e < M2 * N2; e++)
		cr_assert((d1[e] & 0x7c00u) != 0x7c00u, "element %d not finite", e);
	cr_assert_eq(memcmp(d1, d2, sizeof d1), 0,
	             "64x70: bits differ between 1 and 2 threads (the narrow range's second look)");
}

/* Shapes for bf16: the fp16 ones, the mlp and conv shapes of the kernel bench (forward and both
 * backward products) and ragged ones. */
static const gemm_case gemm_bf16_shapes[] = {
	{1, 1, 1}, {3, 5, 7}, {17, 33, 65}, {64, 64, 64}, {100, 300, 784}, {40, 70, 4096},
	{700, 40, 20}, {300, 1100, 9}, {3, 5, 0}, {128, 1024, 784}, {128, 784, 1024},
	{128, 10, 1024}, {10, 1024, 128}, {32, 784, 288}, {288, 784, 32}, {127, 257, 511},
	{1, 1000, 33}, {33, 2, 1000},
};

/* One bf16 GEMM run on data in [-1, 1); returns the largest |C - R| / bound (see the file
 * comment) and sets *maxabs to the largest |C - R|. */
static double run_gemm_bf16(const char *path, const gemm_case *g, size_t c, int ta, int tb,
                            int beta1, double *maxabs)
{
	int64_t lda, na, ldb, nb, ldc = pick_ld(g->N, c + 2);
	operand_dims(ta, tb, g, c, &lda, &na, &ldb, &nb);
	int64_t nc = g->M * ldc;
	uint16_t *A = malloc((size_t)na * sizeof *A), *B = malloc((size_t)nb * sizeof *B);
	uint16_t *C = malloc((size_t)nc * sizeof *C), *C0 = malloc((size_t)nc * sizeof *C0);
	double *Ad = malloc((size_t)na * sizeof *Ad), *Bd = malloc((size_t)nb * sizeof *Bd);
	double *R = malloc((size_t)(g->M * g->N + 1) * sizeof *R);
	double *Rabs = malloc((size_t)(g->M * g->N + 1) * sizeof *Rabs);
	cr_assert(A && B && C && C0 && Ad && Bd && R && Rabs);
	for (int64_t i = 0; i < na; i++) {
		A[i] = amp_half_f32_to_bf16(rng_uniform(-1.0f, 1.0f));
		Ad[i] = (double)amp_half_bf16_to_f32(A[i]);
	}
	for (int64_t i = 0; i < nb; i++) {
		B[i] = amp_half_f32_to_bf16(rng_uniform(-1.0f, 1.0f));
		Bd[i] = (double)amp_half_bf16_to_f32(B[i]);
	}
	for (int64_t i = 0; i < nc; i++)
		C0[i] = amp_half_f32_to_bf16(rng_uniform(-1.0f, 1.0f));
	gemm_ref(ta, tb, g->M, g->N, g->K, Ad, lda, Bd, ldb, R, Rabs);
	for (int64_t i = 0; i < nc; i++)
		C[i] = beta1 ? C0[i] : 0x7fc1;  /* NaN: must be overwritten under beta 0 */
	amp_engine e = amp_gemm(AMP_BF16, ta, tb, g->M, g->N, g->K, A, lda, B, ldb,
	                        beta1 ? 1.0f : 0.0f, C, ldc, NULL);
	cr_assert_eq(e, amp_kernels_gemm_engine(AMP_BF16), "%s: amp_gemm ran on %s, expected %s",
	             path, amp_engine_name(e), amp_engine_name(amp_kernels_gemm_engine(AMP_BF16)));
	double worst = 0.0;
	for (int64_t i = 0; i < g->M; i++)
		for (int64_t j = 0; j < ldc; j++) {
			uint16_t got = C[i * ldc + j];
			if (j >= g->N) {
				cr_assert_eq(got, beta1 ? C0[i * ldc + j] : 0x7fc1,
				             "%s bf16 GEMM wrote outside C", path);
				continue;
			}
			double c0 = beta1 ? (double)amp_half_bf16_to_f32(C0[i * ldc + j]) : 0.0;
			double want = R[i * g->N + j] + c0, S = Rabs[i * g->N + j] + fabs(c0);
			double x = (double)amp_half_bf16_to_f32(got);
			cr_assert(isfinite(x), "%s bf16 GEMM %lldx%lldx%lld: C[%lld][%lld] not finite",
			          path, (long long)g->M, (long long)g->N, (long long)g->K, (long long)i,
			          (long long)j);
			double bound = 0x1p-8 * fabs(want) + 1.01 * (double)(g->K + 2) * 0x1p-24 * S;
			double d = fabs(x - want);
			if (d > *maxabs)
				*maxabs = d;
			double r = bound > 0.0 ? d / bound : (d > 0.0 ? (double)INFINITY : 0.0);
			if (r > worst)
				worst = r;
		}
	free(A); free(B); free(C); free(C0); free(Ad); free(Bd); free(R); free(Rabs);
	return worst;
}

static void check_gemm_bf16(const char *path)
{
	FORCE_PATH(path);
	rng_seed(17);
	double worst = 0.0, maxabs = 0.0;
	int runs = 0;
	for (size_t c = 0; c < sizeof gemm_bf16_shapes / sizeof *gemm_bf16_shapes; c++) {
		const gemm_case *g = &gemm_bf16_shapes[c];
		/* The sanitizer build (AMP_TEST_QUICK=1) runs the big shapes in two layouts only. */
		const char *q = getenv("AMP_TEST_QUICK");
		int big = g->M * g->N * g->K > (1 << 23) && q != NULL && strcmp(q, "1") == 0;
		for (int t = 0; t < 4; t++)
			for (int beta1 = 0; beta1 <= 1; beta1++) {
				int ta = t & 1, tb = t >> 1;
				if (big && (ta != tb || beta1 != ta))
					continue;
				double e = run_gemm_bf16(path, g, c, ta, tb, beta1, &maxabs);
				cr_assert_leq(e, 1.0,
				              "%s bf16 GEMM %lldx%lldx%lld ta=%d tb=%d beta=%d: error %.3g "
				              "times the bound 2^-8 |R| + 1.01 (K+2) 2^-24 S",
				              path, (long long)g->M, (long long)g->N, (long long)g->K, ta, tb,
				              beta1, e);
				if (e > worst)
					worst = e;
				runs++;
			}
	}
	cr_log_info("%s bf16 GEMM (engine %s): %d runs; max |C - R| %.3g, worst run at %.3g of "
	            "the bound 2^-8 |R| + 1.01 (K+2) 2^-24 sum|ab|", path,
	            amp_engine_name(amp_kernels_gemm_engine(AMP_BF16)), runs, maxabs, worst);
}

PATH_TESTS(gemm, bf16, check_gemm_bf16)

/* amp_gemm reports the engine of the path it ran on, as amp_kernels_gemm_engine says; an
 * int32 GEMM runs nothing. */
static void check_gemm_engine(const char *path)
{
	FORCE_PATH(path);
	float a[4] = {1, 2, 3, 4}, c[4];
	uint16_t h[4] = {0x3c00, 0x4000, 0x4200, 0x4400}, hc[4];
	uint16_t b[4] = {0x3f80, 0x4000, 0x4040, 0x4080}, bc[4];
	amp_engine want = strcmp(path, "scalar") == 0 ? AMP_ENGINE_SCALAR : AMP_ENGINE_FP32_FMA;
	amp_engine want_bf16 = strcmp(path, "avx512-bf16") == 0 ? AMP_ENGINE_AVX512_BF16
	                       : strcmp(path, "amx-bf16") == 0  ? AMP_ENGINE_AMX_BF16
	                                                        : want;
	cr_assert_eq(amp_kernels_vec_engine(), want, "%s: vec engine %s", path,
	             amp_engine_name(amp_kernels_vec_engine()));
	cr_assert_eq(amp_gemm(AMP_F32, 0, 0, 2, 2, 2, a, 2, a, 2, 0.0f, c, 2, NULL),
	             amp_kernels_gemm_engine(AMP_F32));
	cr_assert_eq(amp_kernels_gemm_engine(AMP_F32), want);
	amp_engine want_f16 = strcmp(path, "avx512-fp16") == 0 ? AMP_ENGINE_AVX512_FP16 : want;
	cr_assert_eq(amp_kernels_gemm_engine(AMP_BF16), want_bf16, "%s bf16 on %s", path,
	             amp_engine_name(amp_kernels_gemm_engine(AMP_BF16)));
	cr_assert_eq(amp_kernels_gemm_engine(AMP_F16), want_f16, "%s fp16 on %s", path,
	             amp_engine_name(amp_kernels_gemm_engine(AMP_F16)));
	cr_assert_eq(amp_gemm(AMP_F16, 0, 0, 2, 2, 2, h, 2, h, 2, 0.0f, hc, 2, NULL),
	             amp_kernels_gemm_engine(AMP_F16));
	cr_assert_eq(amp_gemm(AMP_BF16, 0, 0, 2, 2, 2, b, 2, b, 2, 0.0f, bc, 2, NULL),
	             amp_kernels_gemm_engine(AMP_BF16));
	/* [[1,2],[3,4]]^2 = [[7,10],[15,22]] in every dtype. */
	cr_assert(c[0] == 7.0f && c[1] == 10.0f && c[2] == 15.0f && c[3] == 22.0f);
	cr_assert(hc[0] == 0x4700 && hc[3] == 0x4d80, "%s f16: %04x %04x", path, hc[0], hc[3]);
	cr_assert(bc[0] == 0x40e0 && bc[3] == 0x41b0, "%s bf16: %04x %04x", path, bc[0], bc[3]);
	cr_assert_eq(amp_gemm(AMP_I32, 0, 0, 2, 2, 2, a, 2, a, 2, 0.0f, c, 2, NULL),
	             AMP_ENGINE_NONE);
	cr_assert_eq(amp_kernels_gemm_engine(AMP_I32), AMP_ENGINE_NONE);
	cr_assert_eq(amp_gemm(AMP_BF16, 0, 0, 0, 2, 2, b, 2, b, 2, 0.0f, bc, 2, NULL),
	             AMP_ENGINE_NONE, "M = 0 runs nothing");
	cr_log_info("%s: gemm engines f32 %s, f16 %s, bf16 %s; vec %s", path,
	            amp_engine_name(amp_kernels_gemm_engine(AMP_F32)),
	            amp_engine_name(amp_kernels_gemm_engine(AMP_F16)),
	            amp_engine_name(amp_kernels_gemm_engine(AMP_BF16)),
	            amp_engine_name(amp_kernels_vec_engine()));
}

PATH_TESTS(gemm, engine, check_gemm_engine)

/* C = 2 C under beta 2 is outside the contract's {0, 1}, but must not misbehave either; and a
 * GEMM with M or N zero must not touch C. */
static void check_gemm_edges(const char *path)
{
	FORCE_PATH(path);
	float A[6] = {1, 2, 3, 4, 5, 6}, B[6] = {1, 0, 0, 1, 1, 1};
	float C[4] = {1, 1, 1, 1};
	amp_gemm_f32(0, 0, 2, 2, 3, A, 3, B, 2, 2.0f, C, 2);  /* [[1,2,3],[4,5,6]] [[1,0],[0,1],[1,1]] */
	cr_assert(C[0] == 6.0f && C[1] == 7.0f && C[2] == 12.0f && C[3] == 13.0f,
	          "%s beta 2: %g %g %g %g", path, (double)C[0], (double)C[1], (double)C[2],
	          (double)C[3]);
	float untouched = f32_of_bits(0x7fc00002u);
	amp_gemm_f32(0, 0, 0, 2, 3, A, 3, B, 2, 0.0f, &untouched, 2);
	amp_gemm_f32(0, 0, 2, 0, 3, A, 3, B, 2, 0.0f, &untouched, 2);
	cr_assert_eq(bits_of_f32(untouched), 0x7fc00002u);
	uint16_t h = 0x7e01;
	amp_gemm_f16(0, 0, 0, 1, 1, &h, 1, &h, 1, 0.0f, &h, 1);
	cr_assert_eq(h, 0x7e01);
}

PATH_TESTS(gemm, edges, check_gemm_edges)

/* Two GEMMs at once on two threads (each with its own packing buffers) must give exactly what
 * they give one after the other, while a third thread keeps switching paths. */
#define THR_M 70
#define THR_N 300
#define THR_K 310

typedef struct gemm_job {
	const float *A, *B;
	float *C;
	int f16;
	uint16_t *Ah, *Bh, *Ch;
} gemm_job;

static void *gemm_job_run(void *arg)
{
	const gemm_job *j = arg;
	for (int rep = 0; rep < 4; rep++) {
		if (j->f16)
			amp_gemm_f16(0, 1, THR_M, THR_N, THR_K, j->Ah, THR_K, j->Bh, THR_K, 0.0f, j->Ch,
			             THR_N);
		else
			amp_gemm_f32(0, 1, THR_M, THR_N, THR_K, j->A, THR_K, j->B, THR_K, 0.0f, j->C,
			             THR_N);
	}
	return NULL;
}

static _Atomic int switcher_stop;

static void *path_switcher(void *arg)
{
	(void)arg;
	static const char *const names[] = {"scalar", "avx2", "avx512", "avx512-bf16", "auto"};
	for (int i = 0; !switcher_stop; i++)
		amp_kernels_select(names[i % 5]);
	return NULL;
}

static void check_threads(const char *path)
{
	FORCE_PATH(path);
	rng_seed(5);
	size_t na = THR_M * THR_K, nb = THR_N * THR_K, nc = THR_M * THR_N;
	gemm_job jobs[2];
	float *want = malloc(nc * sizeof *want);
	uint16_t *wanth = malloc(nc * sizeof *wanth);
	cr_assert(want && wanth);
	for (int t = 0; t < 2; t++) {
		gemm_job *j = &jobs[t];
		float *A = malloc(na * sizeof *A), *B = malloc(nb * sizeof *B);
		uint16_t *Ah = malloc(na * sizeof *Ah), *Bh = malloc(nb * sizeof *Bh);
		j->C = malloc(nc * sizeof *j->C);
		j->Ch = malloc(nc * sizeof *j->Ch);
		cr_assert(A && B && Ah && Bh && j->C && j->Ch);
		for (size_t i = 0; i < na; i++)
			Ah[i] = amp_f32_to_f16(A[i] = rng_uniform(-1.0f, 1.0f));
		for (size_t i = 0; i < nb; i++)
			Bh[i] = amp_f32_to_f16(B[i] = rng_uniform(-1.0f, 1.0f));
		j->A = A, j->B = B, j->Ah = Ah, j->Bh = Bh;
		j->f16 = t;
	}
	pthread_t th[2];
	for (int t = 0; t < 2; t++)
		cr_assert_eq(pthread_create(&th[t], NULL, gemm_job_run, &jobs[t]), 0);
	for (int t = 0; t < 2; t++)
		pthread_join(th[t], NULL);
	amp_gemm_f32(0, 1, THR_M, THR_N, THR_K, jobs[0].A, THR_K, jobs[0].B, THR_K, 0.0f, want,
	             THR_N);
	amp_gemm_f16(0, 1, THR_M, THR_N, THR_K, jobs[1].Ah, THR_K, jobs[1].Bh, THR_K, 0.0f, wanth,
	             THR_N);
	cr_assert(memcmp(want, jobs[0].C, nc * sizeof *want) == 0, "%s f32 GEMM on a thread differs",
	          path);
	cr_assert(memcmp(wanth, jobs[1].Ch, nc * sizeof *wanth) == 0,
	          "%s f16 GEMM on a thread differs", path);

	/* Again with the pool on: one caller gets it, the other runs alone; same bits. */
	amp_kernels_set_threads(2);
	for (int t = 0; t < 2; t++)
		cr_assert_eq(pthread_create(&th[t], NULL, gemm_job_run, &jobs[t]), 0);
	for (int t = 0; t < 2; t++)
		pthread_join(th[t], NULL);
	cr_assert(memcmp(want, jobs[0].C, nc * sizeof *want) == 0,
	          "%s f32 GEMM on a thread, pool of 2, differs", path);
	cr_assert(memcmp(wanth, jobs[1].Ch, nc * sizeof *wanth) == 0,
	          "%s f16 GEMM on a thread, pool of 2, differs", path);

	/* With the path switching under them the results vary by path, but stay correct. */
	pthread_t sw;
	cr_assert_eq(pthread_create(&sw, NULL, path_switcher, NULL), 0);
	for (int t = 0; t < 2; t++)
		cr_assert_eq(pthread_create(&th[t], NULL, gemm_job_run, &jobs[t]), 0);
	for (int t = 0; t < 2; t++)
		pthread_join(th[t], NULL);
	switcher_stop = 1;
	pthread_join(sw, NULL);
	double maxdiff = 0.0;
	for (size_t i = 0; i < nc; i++) {
		double d = fabs((double)jobs[0].C[i] - (double)want[i]);
		if (d > maxdiff)
			maxdiff = d;
	}
	cr_assert_leq(maxdiff, 1e-3, "%s f32 GEMM under path switching: max diff %g", path,
	              maxdiff);
	cr_log_info("%s GEMM on 2 threads: bit-identical to serial; under path switching max diff "
	            "%.3g", path, maxdiff);
	for (int t = 0; t < 2; t++) {
		free((void *)jobs[t].A); free((void *)jobs[t].B); free(jobs[t].Ah); free(jobs[t].Bh);
		free(jobs[t].C); free(jobs[t].Ch);
	}
	free(want);
	free(wanth);
}

PATH_TESTS(gemm, threads, check_threads)

/* ---- thread count ------------------------------------------------------------------------------ */

/* Above the serial threshold; split over N, over M (with the in-place A path: N <= 64),
 * ragged, N over two column blocks, a narrow x w^T (dot products, a ragged last row range), and
 * an x w^T whose last column range alone would be narrow enough for the dot products. */
static const gemm_case par_shapes[] = {
	{96, 500, 300}, {700, 64, 200}, {301, 257, 129}, {130, 1030, 37}, {520, 10, 1000},
	{64, 70, 1000},
};

/* 1, 2, 3 and 5 threads must give the same bits, every layout, beta 0 and 1, fp32, fp16 and
 * bf16. */
static void check_thread_count(const char *path)
{
	FORCE_PATH(path);
	rng_seed(11);
	static const int counts[] = {2, 3, 5};
	int runs = 0;
	for (size_t c = 0; c < sizeof par_shapes / sizeof *par_shapes; c++) {
		const gemm_case *g = &par_shapes[c];
		int64_t lda, na, ldb, nb, ldc = pick_ld(g->N, c + 2);
		operand_dims(1, 1, g, c, &lda, &na, &ldb, &nb);
		int64_t lda2, na2, ldb2, nb2;
		operand_dims(0, 0, g, c, &lda2, &na2, &ldb2, &nb2);
		na = na > na2 ? na : na2;
		nb = nb > nb2 ? nb : nb2;
		int64_t nc = g->M * ldc;
		float *A = malloc((size_t)na * sizeof *A), *B = malloc((size_t)nb * sizeof *B);
		float *C0 = malloc((size_t)nc * sizeof *C0), *C1 = malloc((size_t)nc * sizeof *C1);
		float *Cn = malloc((size_t)nc * sizeof *Cn);
		uint16_t *Ah = malloc((size_t)na * sizeof *Ah), *Bh = malloc((size_t)nb * sizeof *Bh);
		uint16_t *H0 = malloc((size_t)nc * sizeof *H0), *H1 = malloc((size_t)nc * sizeof *H1);
		uint16_t *Hn = malloc((size_t)nc * sizeof *Hn);
		uint16_t *Ab = malloc((size_t)na * sizeof *Ab), *Bb = malloc((size_t)nb * sizeof *Bb);
		uint16_t *G0 = malloc((size_t)nc * sizeof *G0), *G1 = malloc((size_t)nc * sizeof *G1);
		uint16_t *Gn = malloc((size_t)nc * sizeof *Gn);
		float *S1 = malloc((size_t)nc * sizeof *S1), *Sn = malloc((size_t)nc * sizeof *Sn);
		float *T1 = malloc((size_t)nc * sizeof *T1), *Tn = malloc((size_t)nc * sizeof *Tn);
		cr_assert(S1 && Sn && T1 && Tn);
		cr_assert(A && B && C0 && C1 && Cn && Ah && Bh && H0 && H1 && Hn);
		cr_assert(Ab && Bb && G0 && G1 && Gn);
		for (int64_t i = 0; i < na; i++)
			Ah[i] = amp_f32_to_f16(A[i] = rng_uniform(-1.0f, 1.0f));
		for (int64_t i = 0; i < nb; i++)
			Bh[i] = amp_f32_to_f16(B[i] = rng_uniform(-1.0f, 1.0f));
		for (int64_t i = 0; i < nc; i++)
			H0[i] = amp_f32_to_f16(C0[i] = rng_uniform(-1.0f, 1.0f));
		amp_cvt(AMP_BF16, Ab, AMP_F32, A, na);
		amp_cvt(AMP_BF16, Bb, AMP_F32, B, nb);
		amp_cvt(AMP_BF16, G0, AMP_F32, C0, nc);
		for (int t = 0; t < 4; t++)
			for (int beta1 = 0; beta1 <= 1; beta1++) {
				int ta = t & 1, tb = t >> 1;
				operand_dims(ta, tb, g, c, &lda, &na2, &ldb, &nb2);
				float beta = beta1 ? 1.0f : 0.0f;
				amp_kernels_set_threads(1);
				memcpy(C1, C0, (size_t)nc * sizeof *C1);
				memcpy(H1, H0, (size_t)nc * sizeof *H1);
				amp_gemm_f32(ta, tb, g->M, g->N, g->K, A, lda, B, ldb, beta, C1, ldc);
				amp_gemm_f16(ta, tb, g->M, g->N, g->K, Ah, lda, Bh, ldb, beta, H1, ldc);
				memcpy(G1, G0, (size_t)nc * sizeof *G1);
				amp_gemm_bf16(ta, tb, g->M, g->N, g->K, Ab, lda, Bb, ldb, beta, G1, ldc);
				/* the acc32 forms (fp32 C from bf16 and fp16 operands), into C1's
				 * neighbours: S1 from 1 thread */
				memcpy(S1, C0, (size_t)nc * sizeof *S1);
				amp_gemm_acc32(AMP_BF16, ta, tb, g->M, g->N, g->K, Ab, lda, Bb, ldb, beta,
				               S1, ldc);
				memcpy(T1, C0, (size_t)nc * sizeof *T1);
				amp_gemm_acc32(AMP_F16, ta, tb, g->M, g->N, g->K, Ah, lda, Bh, ldb, beta,
				               T1, ldc);
				for (size_t k = 0; k < sizeof counts / sizeof *counts; k++) {
					amp_kernels_set_threads(counts[k]);
					memcpy(Cn, C0, (size_t)nc * sizeof *Cn);
					memcpy(Hn, H0, (size_t)nc * sizeof *Hn);
					amp_gemm_f32(ta, tb, g->M, g->N, g->K, A, lda, B, ldb, beta, Cn, ldc);
					amp_gemm_f16(ta, tb, g->M, g->N, g->K, Ah, lda, Bh, ldb, beta, Hn, ldc);
					memcpy(Gn, G0, (size_t)nc * sizeof *Gn);
					amp_gemm_bf16(ta, tb, g->M, g->N, g->K, Ab, lda, Bb, ldb, beta, Gn, ldc);
					memcpy(Sn, C0, (size_t)nc * sizeof *Sn);
					amp_gemm_acc32(AMP_BF16, ta, tb, g->M, g->N, g->K, Ab, lda, Bb,
					               ldb, beta, Sn, ldc);
					memcpy(Tn, C0, (size_t)nc * sizeof *Tn);
					amp_gemm_acc32(AMP_F16, ta, tb, g->M, g->N, g->K, Ah, lda, Bh,
					               ldb, beta, Tn, ldc);
					cr_assert(memcmp(S1, Sn, (size_t)nc * sizeof *Sn) == 0 &&
					              memcmp(T1, Tn, (size_t)nc * sizeof *Tn) == 0,
					          "%s acc32 GEMM %lldx%lldx%lld ta=%d tb=%d beta=%d: %d threads "
					          "differ from 1", path, (long long)g->M, (long long)g->N,
					          (long long)g->K, ta, tb, beta1, counts[k]);
					cr_assert(memcmp(G1, Gn, (size_t)nc * sizeof *Gn) == 0,
					          "%s bf16 GEMM %lldx%lldx%lld ta=%d tb=%d beta=%d: %d threads "
					          "differ from 1", path, (long long)g->M, (long long)g->N,
					          (long long)g->K, ta, tb, beta1, counts[k]);
					cr_assert(memcmp(C1, Cn, (size_t)nc * sizeof *Cn) == 0,
					          "%s f32 GEMM %lldx%lldx%lld ta=%d tb=%d beta=%d: %d threads "
					          "differ from 1", path, (long long)g->M, (long long)g->N,
					          (long long)g->K, ta, tb, beta1, counts[k]);
					cr_assert(memcmp(H1, Hn, (size_t)nc * sizeof *Hn) == 0,
					          "%s f16 GEMM %lldx%lldx%lld ta=%d tb=%d beta=%d: %d threads "
					          "differ from 1", path, (long long)g->M, (long long)g->N,
					          (long long)g->K, ta, tb, beta1, counts[k]);
					runs += 3;
				}
			}
		free(A); free(B); free(C0); free(C1); free(Cn); free(Ah); free(Bh); free(H0); free(H1);
		free(Hn); free(Ab); free(Bb); free(G0); free(G1); free(Gn);
		free(S1); free(Sn); free(T1); free(Tn);
	}
	cr_log_info("%s GEMM (fp32, fp16, bf16): %d runs on 2, 3 and 5 threads, all bit-identical "
	            "to 1 thread", path,
	            runs);
}

PATH_TESTS(gemm, thread_count, check_thread_count)

#define PROBE_MAX 8

typedef struct pool_probe {
	_Atomic int ran[PROBE_MAX];
	pthread_t who[PROBE_MAX];
	_Atomic int n_seen;
	_Atomic int nested_n;
} pool_probe;

static void probe_nested(void *arg, int t, int n)
{
	(void)arg, (void)t, (void)n;
}

static void probe_fn(void *arg, int t, int n)
{
	pool_probe *p = arg;
	p->ran[t]++;
	p->who[t] = pthread_self();
	p->n_seen = n;
	if (t == n - 1)  /* a job inside a job runs alone, on its own thread */
		p->nested_n = amp_kernels_parallel(4, probe_nested, NULL);
	/* Shares last ~50 us, so that a worker has time to claim one. */
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	do
		clock_gettime(CLOCK_MONOTONIC, &t1);
	while ((t1.tv_sec - t0.tv_sec) * 1000000000L + (t1.tv_nsec - t0.tv_nsec) < 50000);
}

Test(pool, each_share_once, .fini = kpath_restore)
{
	amp_kernels_set_threads(3);
	int off_caller = 0;
	for (int rep = 0; rep < 200; rep++) {
		int want = 1 + rep % 4;
		pool_probe p;
		memset(&p, 0, sizeof p);
		int n = amp_kernels_parallel(want, probe_fn, &p);
		cr_assert_eq(n, want, "pool ran %d shares, %d wanted", n, want);
		cr_assert_eq(p.n_seen, n);
		cr_assert_eq(p.nested_n, 1, "a nested job must run serially");
		for (int t = 0; t < PROBE_MAX; t++)
			cr_assert_eq(p.ran[t], t < n ? 1 : 0, "share %d ran %d times", t, (int)p.ran[t]);
		for (int t = 0; t < n; t++)
			off_caller += !pthread_equal(p.who[t], pthread_self());
	}
	cr_assert_gt(off_caller, 0, "no share ever ran on a pool worker");
	cr_log_info("pool of 3: %d of 500 shares ran on workers", off_caller);
	amp_kernels_set_threads(1);
	pool_probe p;
	memset(&p, 0, sizeof p);
	cr_assert_eq(amp_kernels_parallel(4, probe_fn, &p), 1, "one thread: one share");
}

Test(pool, thread_count_setting, .fini = kpath_restore)
{
	/* A fresh process (Criterion forks per test): the count comes from the environment. */
	setenv("AMP_NUM_THREADS", "3", 1);
	cr_assert_eq(amp_kernels_threads(), 3);
	cr_assert_eq(amp_kernels_set_threads(0), -1);
	cr_assert_eq(amp_kernels_threads(), 3, "a refused count must change nothing");
	cr_assert_eq(amp_kernels_set_threads(2), 0);
	cr_assert_eq(amp_kernels_threads(), 2);
	cr_assert_eq(amp_kernels_set_threads(1000), 0);
	cr_assert_eq(amp_kernels_threads(), 64, "counts are clamped to 64");
	unsetenv("AMP_NUM_THREADS");
}

/* ---- polls from the GEMMs ---------------------------------------------------------------------
 */

typedef struct poll_log {
	int n;
	int off_thread; /* calls on another thread than the one that set the poll */
	pthread_t owner;
} poll_log;

static uint64_t mono_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static void poll_record(void *arg)
{
	poll_log *l = arg;
	l->off_thread += !pthread_equal(l->owner, pthread_self());
	l->n++;
}

/* A GEMM calls the poll of the thread that set it while it runs, not twice within
 * AMP_KERNELS_POLL_NS, on no other thread (2 GEMM threads: the caller polls while it waits for
 * the workers), without changing a bit of C; it stops once the poll is cleared.  Data-parallel
 * training's all-reduces move on there. */
static void check_polls(const char *path)
{
	if (!kpath_force(path))
		return;
	enum { M = 256, N = 384, K = 384 };
	static const amp_dtype dts[] = {AMP_F32, AMP_F16, AMP_BF16};
	float *a32 = malloc(sizeof(float) * M * K), *b32 = malloc(sizeof(float) * K * N);
	uint16_t *a = malloc(2 * M * K), *b = malloc(2 * K * N);
	char *c0 = malloc(4 * M * N), *c1 = malloc(4 * M * N);
	cr_assert(a32 && b32 && a && b && c0 && c1);
	for (int i = 0; i < M * K; i++)
		a32[i] = (float)((i * 37) % 101 - 50) / 64.0f;
	for (int i = 0; i < K * N; i++)
		b32[i] = (float)((i * 53) % 97 - 48) / 64.0f;
	for (size_t d = 0; d < sizeof dts / sizeof *dts; d++) {
		amp_dtype dt = dts[d];
		const void *A = a32, *B = b32;
		if (dt != AMP_F32) {
			amp_cvt(dt, a, AMP_F32, a32, M * K);
			amp_cvt(dt, b, AMP_F32, b32, K * N);
			A = a, B = b;
		}
		size_t cbytes = (dt == AMP_F32 ? 4 : 2) * (size_t)M * N;
		for (int threads = 1; threads <= 2; threads++) {
			amp_kernels_set_threads(threads);
			amp_gemm(dt, 0, 0, M, N, K, A, K, B, N, 0.0f, c0, N, NULL);
			poll_log log = {.owner = pthread_self()};
			uint64_t t0 = mono_ns();
			amp_kernels_set_poll(poll_record, &log);
			int runs = 0;
			/* long enough that a poll falls due: at least 4 intervals of GEMMs */
			do {
				amp_gemm(dt, 0, 0, M, N, K, A, K, B, N, 0.0f, c1, N, NULL);
				cr_assert(memcmp(c0, c1, cbytes) == 0,
				          "%s dtype %d: C changed under a poll", path, (int)dt);
				runs++;
			} while (mono_ns() - t0 < 4 * AMP_KERNELS_POLL_NS || runs < 3);
			amp_kernels_set_poll(NULL, NULL);
			uint64_t elapsed = mono_ns() - t0;
			/* on 2 threads the workers may take every share while the caller sleeps
			 * (tests run side by side): then it has no poll to make */
			if (threads == 1)
				cr_assert_gt(log.n, 0, "%s dtype %d: %d GEMMs, no poll", path,
				             (int)dt, runs);
			cr_assert_eq(log.off_thread, 0, "%s: %d polls on another thread", path,
			             log.off_thread);
			/* a poll falls due AMP_KERNELS_POLL_NS after the one before it: n of them
			 * take (n - 1) intervals at least */
			cr_assert_leq((uint64_t)log.n, elapsed / AMP_KERNELS_POLL_NS + 1,
			              "%s: %d polls in %llu ns", path, log.n,
			              (unsigned long long)elapsed);
			int n = log.n;
			amp_gemm(dt, 0, 0, M, N, K, A, K, B, N, 0.0f, c1, N, NULL);
			cr_assert_eq(log.n, n, "%s: a poll after it was cleared", path);
		}
	}
	free(a32), free(b32), free(a), free(b), free(c0), free(c1);
}

PATH_TESTS(pool, polls, check_polls)

/* ---- elementwise -------------------------------------------------------------------------------- */

#define EW_MAX 10007
#define EW_GUARD 8

static float ew_value(void)
{
	/* Mostly ordinary magnitudes, some subnormal and some large. */
	switch (rng_u64() % 8) {
	case 0: return rng_uniform(-1.0f, 1.0f) * 1e-39f;
	case 1: return rng_uniform(-1.0f, 1.0f) * 1e30f;
	default: return rng_uniform(-4.0f, 4.0f);
	}
}

static void check_elementwise(const char *path)
{
	FORCE_PATH(path);
	rng_seed(1234);
	size_t cap = EW_MAX + 1 + EW_GUARD;
	float *a = malloc(cap * sizeof *a), *b = malloc(cap * sizeof *b);
	float *dst = malloc(cap * sizeof *dst), *want = malloc(cap * sizeof *want);
	cr_assert(a && b && dst && want);
	for (size_t i = 0; i < cap; i++) {
		a[i] = ew_value();
		b[i] = ew_value();
	}
	const float s = -1.7f, canary = f32_of_bits(0x7fc0dead);
	int64_t checked = 0;
	for (int64_t n = 0; n <= EW_MAX; n = n < 100 ? n + 1 : (n < EW_MAX ? EW_MAX : n + 1)) {
		for (int off = 0; off <= 1; off++) {
			const float *x = a + off, *y = b + off;
			float *d = dst + off;
			for (int op = 0; op < 4; op++) {
				for (size_t i = 0; i < cap; i++)
					dst[i] = canary;
				if (op == 3)  /* axpy accumulates into dst */
					memcpy(d, y, (size_t)n * sizeof *d);
				for (int64_t i = 0; i < n; i++)
					want[i] = op == 0 ? x[i] + y[i]
					        : op == 1 ? x[i] * y[i]
					        : op == 2 ? x[i] * s
					                  : y[i] + x[i] * s;
				switch (op) {
				case 0: amp_vadd_f32(x, y, d, n); break;
				case 1: amp_vmul_f32(x, y, d, n); break;
				case 2: amp_vscale_f32(x, s, d, n); break;
				default: amp_vaxpy_f32(s, x, d, n); break;
				}
				for (int64_t i = 0; i < n; i++)
					cr_assert_eq(bits_of_f32(d[i]), bits_of_f32(want[i]),
					             "%s op %d n=%lld off=%d i=%lld: %.9g, scalar loop %.9g", path,
					             op, (long long)n, off, (long long)i, (double)d[i],
					             (double)want[i]);
				for (int64_t i = n + off; i < n + off + EW_GUARD; i++)
					cr_assert_eq(bits_of_f32(dst[i]), bits_of_f32(canary),
					             "%s op %d n=%lld wrote past the end", path, op, (long long)n);
				checked += n;
			}
		}
	}
	/* In place: dst is the first input. */
	memcpy(dst, a, cap * sizeof *dst);
	amp_vadd_f32(dst, b, dst, EW_MAX);
	for (int64_t i = 0; i < EW_MAX; i++)
		cr_assert_eq(bits_of_f32(dst[i]), bits_of_f32(a[i] + b[i]), "%s in-place vadd", path);
	memcpy(dst, a, cap * sizeof *dst);
	amp_vscale_f32(dst, s, dst, EW_MAX);
	for (int64_t i = 0; i < EW_MAX; i++)
		cr_assert_eq(bits_of_f32(dst[i]), bits_of_f32(a[i] * s), "%s in-place vscale", path);
	/* NaN and Inf go through as NaN and Inf. */
	a[3] = f32_of_bits(0x7fc00000u);
	a[20] = INFINITY;
	amp_vadd_f32(a, b, dst, 64);
	cr_assert(isnan(dst[3]) && isinf(dst[20]), "%s vadd lost a NaN or Inf", path);
	cr_log_info("%s elementwise: %lld results, max difference from the scalar loops 0 "
	            "(bit-exact)", path, (long long)checked);
	free(a); free(b); free(dst); free(want);
}

PATH_TESTS(elementwise, bitexact, check_elementwise)

/* The optimizers' update kernels against the scalar loops of their contract (kernels.h),
 * bit for bit: SGD without and with momentum, AdamW, each with and without an unscale, every
 * length up to 100 and a long one, at an odd offset too, for a gradient in fp32, fp16 and bf16
 * and no working copy, an fp16 or a bf16 one (each element the new master rounded as
 * amp_half_f32_to_f16 / _bf16 do, and the NaN/Inf among them counted); NaN in a gradient
 * reaches its weight; nothing past n is written. */
static void ref_sgd(float *w, float *m, const float *g, float inv, float lr, float mu, float wd,
                    int64_t n)
{
	for (int64_t i = 0; i < n; i++) {
		float gi = inv != 1.0f ? g[i] * inv : g[i];
		if (m) {
			float mi = mu * m[i];
			mi = mi + gi;
			float d = wd * w[i];
			m[i] = mi + d;
			float step = lr * m[i];
			w[i] = w[i] - step;
		} else {
			float d = wd * w[i];
			float step = lr * (gi + d);
			w[i] = w[i] - step;
		}
	}
}

static void ref_adamw(float *w, float *m, float *v, const float *g, float inv,
                      const amp_adamw_coef *c, int64_t n)
{
	for (int64_t i = 0; i < n; i++) {
		float gi = inv != 1.0f ? g[i] * inv : g[i];
		float a = c->beta1 * m[i], b = c->one_minus_beta1 * gi;
		m[i] = a + b;
		a = c->beta2 * v[i];
		b = c->one_minus_beta2 * gi;
		b = b * gi;
		v[i] = a + b;
		float num = c->lr * (m[i] / c->c1);
		float den = sqrtf(v[i] / c->c2) + c->eps;
		w[i] = w[i] * c->decay - num / den;
	}
}

enum { OPT_N = 4099, OPT_CAP = OPT_N + 1 + EW_GUARD };

static uint16_t opt_round(amp_dtype dt, float x)
{
	return dt == AMP_F16 ? amp_half_f32_to_f16(x) : amp_half_f32_to_bf16(x);
}

static float opt_widen(amp_dtype dt, uint16_t h)
{
	return dt == AMP_F16 ? amp_half_f16_to_f32(h) : amp_half_bf16_to_f32(h);
}

/* The inputs of the optimizer cases: starting values, the gradient as fp32 (g, what the
 * scalar loops read) and as stored (gh, for a half gradient: g is its widening). */
static struct {
	float w0[OPT_CAP], m0[OPT_CAP], v0[OPT_CAP], g0[OPT_CAP], g[OPT_CAP];
	uint16_t gh[OPT_CAP];
} opt_in;

static const amp_adamw_coef opt_coef = {.beta1 = 0.9f,
                                        .beta2 = 0.999f,
                                        .one_minus_beta1 = 1 - 0.9f,
                                        .one_minus_beta2 = 1 - 0.999f,
                                        .c1 = 0.271f,
                                        .c2 = 0.00599f,
                                        .lr = 3e-3f,
                                        .eps = 1e-8f,
                                        .decay = 1.0f - 3e-3f * 0.01f};

/* One update of n elements at offset off (kind: SGD, SGD with momentum, AdamW), gradient of
 * dtype gdt, working copy of dtype wdt (fp32: none), against the scalar loops; returns the
 * NaN/Inf values the working copy received. */
static int64_t check_update_case(const char *path, amp_dtype gdt, amp_dtype wdt, int64_t n, int off,
                                 int kind, float inv)
{
	static float w[OPT_CAP], m[OPT_CAP], v[OPT_CAP], rw[OPT_CAP], rm[OPT_CAP], rv[OPT_CAP];
	static uint16_t work[OPT_CAP];
	const float canary = f32_of_bits(0x7fc0dead);
	const uint16_t hcanary = 0x7e5a;
	for (int i = 0; i < OPT_CAP; i++) {
		int in = i - off < n && i >= off;
		w[i] = rw[i] = in ? opt_in.w0[i] : canary;
		m[i] = rm[i] = in ? opt_in.m0[i] : canary;
		v[i] = rv[i] = in ? opt_in.v0[i] : canary;
		work[i] = hcanary;
	}
	const float *g = opt_in.g + off;
	amp_update_io io = {.g = gdt == AMP_F32 ? (const void *)g : (const void *)(opt_in.gh + off),
	                    .gdt = gdt,
	                    .work = wdt == AMP_F32 ? NULL : work + off,
	                    .wdt = wdt};
	int64_t bad;
	if (kind < 2) {
		bad =
		    amp_sgd_update(w + off, kind ? m + off : NULL, &io, inv, 0.05f, 0.9f, 5e-4f, n);
		ref_sgd(rw + off, kind ? rm + off : NULL, g, inv, 0.05f, 0.9f, 5e-4f, n);
	} else {
		bad = amp_adamw_update(w + off, m + off, v + off, &io, inv, &opt_coef, n);
		ref_adamw(rw + off, rm + off, rv + off, g, inv, &opt_coef, n);
	}
	const char *gn = amp_dtype_name(gdt), *wn = wdt == AMP_F32 ? "none" : amp_dtype_name(wdt);
	int64_t want_bad = 0;
	for (int i = 0; i < OPT_CAP; i++) {
		cr_assert_eq(
		    bits_of_f32(w[i]), bits_of_f32(rw[i]),
		    "%s g %s work %s kind %d inv %g n=%lld off=%d: w[%d] %.9g, scalar loop "
		    "%.9g",
		    path, gn, wn, kind, (double)inv, (long long)n, off, i, (double)w[i],
		    (double)rw[i]);
		cr_assert_eq(bits_of_f32(m[i]), bits_of_f32(rm[i]), "%s kind %d n=%lld: m[%d]",
		             path, kind, (long long)n, i);
		cr_assert_eq(bits_of_f32(v[i]), bits_of_f32(rv[i]), "%s kind %d n=%lld: v[%d]",
		             path, kind, (long long)n, i);
		uint16_t want = hcanary;
		if (i - off < n && i >= off && wdt != AMP_F32) {
			want = opt_round(wdt, rw[i]);
			uint16_t e = wdt == AMP_F16 ? 0x7c00 : 0x7f80;
			want_bad += (want & e) == e;
		}
		cr_assert_eq(work[i], want,
		             "%s g %s work %s kind %d n=%lld off=%d: work[%d] 0x%04x, want 0x%04x",
		             path, gn, wn, kind, (long long)n, off, i, work[i], want);
	}
	cr_assert_eq(bad, want_bad,
	             "%s g %s work %s kind %d n=%lld off=%d: %lld NaN/Inf counted, %lld written",
	             path, gn, wn, kind, (long long)n, off, (long long)bad, (long long)want_bad);
	if (n > 5 && !off)
		cr_assert(isnan(w[5]), "%s kind %d: a NaN gradient's weight is not NaN", path,
		          kind);
	return want_bad;
}

static void check_optimizer_update(const char *path)
{
	FORCE_PATH(path);
	rng_seed(777);
	for (int i = 0; i < OPT_CAP; i++) {
		opt_in.w0[i] = rng_uniform(-2.0f, 2.0f);
		opt_in.m0[i] = rng_uniform(-0.1f, 0.1f);
		opt_in.v0[i] = rng_uniform(0.0f, 0.01f);
		opt_in.g0[i] = ew_value();
	}
	opt_in.g0[5] = f32_of_bits(0x7fc00000u); /* a NaN gradient */
	opt_in.w0[9] = 1e5f;                     /* Inf in fp16, finite in bf16 */
	opt_in.w0[11] = 3.4e38f;                 /* Inf in both */
	opt_in.w0[12] = 65519.0f;                /* about the last finite fp16 */
	static const amp_dtype dts[] = {AMP_F32, AMP_F16, AMP_BF16};
	int64_t checked = 0, counted = 0;
	for (int gi = 0; gi < 3; gi++) {
		amp_dtype gdt = dts[gi];
		for (int i = 0; i < OPT_CAP; i++) {
			if (gdt != AMP_F32)
				opt_in.gh[i] = opt_round(gdt, opt_in.g0[i]);
			opt_in.g[i] = gdt == AMP_F32 ? opt_in.g0[i] : opt_widen(gdt, opt_in.gh[i]);
		}
		for (int wi = 0; wi < 3; wi++) /* fp32: no working copy */
			for (int64_t n = 0; n <= OPT_N;
			     n = n < 100 ? n + 1 : (n < OPT_N ? OPT_N : n + 1))
				for (int off = 0; off <= 1; off++)
					for (int kind = 0; kind < 3; kind++) {
						counted += check_update_case(path, gdt, dts[wi], n,
						                             off, kind, 1.0f);
						counted += check_update_case(path, gdt, dts[wi], n,
						                             off, kind, 0x1p-7f);
						checked += 2 * n;
					}
	}
	cr_assert(counted > 0, "%s: no NaN/Inf was written to a working copy", path);
	cr_log_info("%s optimizer updates: %lld weights, the scalar loops' bits; %lld NaN/Inf "
	            "working-copy values counted",
	            path, (long long)checked, (long long)counted);
}

PATH_TESTS(optimizer, update_bitexact, check_optimizer_update)

static void check_nonfinite(const char *path)
{
	FORCE_PATH(path);
	rng_seed(99);
	static const uint32_t bad32[] = {0x7f800000u, 0xff800000u, 0x7fc00000u, 0x7f800001u,
	                                 0xffffffffu, 0xffc00000u};
	static const uint16_t bad16[] = {0x7c00, 0xfc00, 0x7e00, 0x7c01, 0xffff, 0xfe00};
	static const uint16_t badb[] = {0x7f80, 0xff80, 0x7fc0, 0x7f81, 0xffff, 0xffc0};
	static const uint16_t goodb[] = {0x7f7f, 0xff7f, 0x0001, 0x8000, 0x007f};
	/* Largest finite values and others that only look odd. */
	static const uint32_t good32[] = {0x7f7fffffu, 0xff7fffffu, 0x00000001u, 0x80000000u};
	static const uint16_t good16[] = {0x7bff, 0xfbff, 0x0001, 0x8000, 0x03ff};
	const int64_t big = 3 * (1 << 20) + 37;
	static const int64_t lens[] = {0, 1, 2, 7, 15, 16, 17, 31, 32, 33, 63, 64, 65, 100, 1000,
	                               10007, 3 * (1 << 20) + 37};
	float *f = malloc((size_t)big * sizeof *f);
	uint16_t *h = malloc((size_t)big * sizeof *h), *bf = malloc((size_t)big * sizeof *bf);
	cr_assert(f && h && bf);
	int64_t cases = 0;
	for (size_t li = 0; li < sizeof lens / sizeof *lens; li++) {
		int64_t n = lens[li];
		for (int64_t i = 0; i < n; i++) {
			f[i] = f32_of_bits(i % 7 == 0 ? good32[(i / 7) % 4] : bits_of_f32(ew_value()));
			h[i] = i % 5 == 0 ? good16[(i / 5) % 5] : amp_f32_to_f16(rng_uniform(-6e4f, 6e4f));
			bf[i] = i % 5 == 0 ? goodb[(i / 5) % 5] : amp_half_f32_to_bf16(ew_value());
		}
		cr_assert_eq(amp_count_nonfinite_bf16(bf, n), 0, "%s n=%lld", path, (long long)n);
		cr_assert_eq(amp_count_nonfinite_f32(f, n), 0, "%s n=%lld", path, (long long)n);
		cr_assert_eq(amp_count_nonfinite_f16(h, n), 0, "%s n=%lld", path, (long long)n);
		/* Plant at the ends, the middle, and vector-block edges. */
		int64_t pos[] = {0, n - 1, n / 2, 15, 16, 31, 32, 63, (1 << 20) - 1, 1 << 20,
		                 (1 << 19) + 1, n - 17};
		int64_t planted = 0;
		for (size_t p = 0; p < sizeof pos / sizeof *pos; p++) {
			int64_t at = pos[p];
			if (at < 0 || at >= n || (bits_of_f32(f[at]) & 0x7f800000u) == 0x7f800000u)
				continue;
			f[at] = f32_of_bits(bad32[p % 6]);
			h[at] = bad16[p % 6];
			bf[at] = badb[p % 6];
			planted++;
		}
		cr_assert_eq(amp_count_nonfinite_f32(f, n), planted, "%s f32 n=%lld", path, (long long)n);
		cr_assert_eq(amp_count_nonfinite_f16(h, n), planted, "%s f16 n=%lld", path, (long long)n);
		cr_assert_eq(amp_count_nonfinite_bf16(bf, n), planted, "%s bf16 n=%lld", path,
		             (long long)n);
		cases++;
	}
	/* Everything non-finite: counts must not wrap in the vector lanes. */
	for (int64_t i = 0; i < big; i++) {
		f[i] = f32_of_bits(bad32[i % 6]);
		h[i] = bad16[i % 6];
		bf[i] = badb[i % 6];
	}
	cr_assert_eq(amp_count_nonfinite_bf16(bf, big), big, "%s all-NaN bf16", path);
	cr_assert_eq(amp_count_nonfinite_f32(f, big), big, "%s all-NaN f32", path);
	cr_assert_eq(amp_count_nonfinite_f16(h, big), big, "%s all-NaN f16", path);
	cr_log_info("%s non-finite counters: %lld lengths, exact counts", path, (long long)cases);
	free(f);
	free(h);
	free(bf);
}

PATH_TESTS(nonfinite, count, check_nonfinite)

/* ---- elementwise on fp16 ---------------------------------------------------------------------
 * Reference: each result is the FP32 one rounded once (amp_half.h's scalar conversions, not
 * the path's), so every path giving it bit for bit is every path giving the same bits; NaN
 * results need only be NaN (payloads may differ).  The data mixes ordinary values, subnormals,
 * values near 65504 (sums and products that overflow), signed zeros, Inf and NaNs. */

static uint16_t h16_value(void)
{
	uint16_t r = (uint16_t)rng_u64();
	switch (rng_u64() % 12) {
	case 0: return r & 0x83ffu;                        /* subnormal or zero */
	case 1: return (uint16_t)((r & 0x80ffu) | 0x7b00u); /* near 65504 */
	case 2: return r & 1 ? 0x7c00u : 0xfc00u;          /* +-Inf */
	case 3: return (uint16_t)(0x7c01u | (r & 0x83ffu)); /* NaN, any payload and sign */
	case 4: return r & 0x8000u;                        /* +-0 */
	case 5: return r;                                  /* any bits */
	default: return amp_f32_to_f16(rng_uniform(-4.0f, 4.0f));
	}
}

static int h16_isnan(uint16_t h)
{
	return (h & 0x7c00u) == 0x7c00u && (h & 0x03ffu) != 0;
}

/* got is want, or both are NaN. */
static int h16_same(uint16_t got, uint16_t want)
{
	return got == want || (h16_isnan(got) && h16_isnan(want));
}

/* op 0 add, 1 sub, 2 mul: a op b in FP32, rounded once. */
static uint16_t h16_ref(int op, uint16_t a, uint16_t b)
{
	float x = amp_half_f16_to_f32(a), y = amp_half_f16_to_f32(b);
	return amp_half_f32_to_f16(op == 0 ? x + y : op == 1 ? x - y : x * y);
}

static amp_engine h16_call(int op, const uint16_t *a, const uint16_t *b, uint16_t *d, int64_t n)
{
	switch (op) {
	case 0: return amp_vadd_h16(a, b, d, n);
	case 1: return amp_vsub_h16(a, b, d, n);
	default: return amp_vmul_h16(a, b, d, n);
	}
}

/* The engine the fp16 kernels must report on a path: native fp16 arithmetic only on
 * avx512-fp16, FP32 arithmetic on the other vector paths, scalar C on scalar. */
static amp_engine h16_engine_of(const char *path)
{
	if (strcmp(path, "avx512-fp16") == 0)
		return AMP_ENGINE_AVX512_FP16;
	return strcmp(path, "scalar") == 0 ? AMP_ENGINE_SCALAR : AMP_ENGINE_FP32_FMA;
}

#define H16_MAX 4099
#define H16_GUARD 40

static void check_elementwise_h16(const char *path)
{
	FORCE_PATH(path);
	rng_seed(4321);
	const amp_engine want_engine = h16_engine_of(path);
	cr_assert_eq(amp_kernels_h16_engine(), want_engine, "%s: fp16 engine %s", path,
	             amp_engine_name(amp_kernels_h16_engine()));
	size_t cap = H16_MAX + 1 + H16_GUARD;
	uint16_t *a = malloc(cap * sizeof *a), *b = malloc(cap * sizeof *b);
	uint16_t *dst = malloc(cap * sizeof *dst);
	cr_assert(a && b && dst);
	for (size_t i = 0; i < cap; i++) {
		a[i] = h16_value();
		b[i] = h16_value();
	}
	const uint16_t canary = 0x7e5a;
	int64_t checked = 0;
	/* equal lengths, at two alignments */
	for (int64_t n = 0; n <= H16_MAX; n = n < 100 ? n + 1 : n < 1000 ? n + 97 : n + 1033) {
		for (int off = 0; off <= 1; off++)
			for (int op = 0; op < 3; op++) {
				for (size_t i = 0; i < cap; i++)
					dst[i] = canary;
				amp_engine e = h16_call(op, a + off, b + off, dst + off, n);
				cr_assert_eq(e, want_engine, "%s op %d: engine %s", path, op,
				             amp_engine_name(e));
				for (int64_t i = 0; i < n; i++) {
					uint16_t want = h16_ref(op, a[off + i], b[off + i]);
					cr_assert(h16_same(dst[off + i], want),
					          "%s op %d n=%lld off=%d i=%lld: %04x op %04x = %04x, FP32 "
					          "rounded once %04x", path, op, (long long)n, off, (long long)i,
					          a[off + i], b[off + i], dst[off + i], want);
				}
				if (off)
					cr_assert_eq(dst[0], canary, "%s op %d wrote before", path, op);
				for (int64_t i = n + off; i < n + off + H16_GUARD; i++)
					cr_assert_eq(dst[i], canary, "%s op %d n=%lld wrote past the end", path, op,
					             (long long)n);
				checked += n;
			}
	}
	/* in place: dst is the first input */
	for (int op = 0; op < 3; op++) {
		memcpy(dst, a, cap * sizeof *dst);
		h16_call(op, dst, b, dst, H16_MAX);
		for (int64_t i = 0; i < H16_MAX; i++)
			cr_assert(h16_same(dst[i], h16_ref(op, a[i], b[i])), "%s op %d in place i=%lld",
			          path, op, (long long)i);
	}
	/* a row repeated over rows (a bias): y = x op row */
	static const int64_t cols_list[] = {1, 7, 31, 32, 33, 64, 100, 300};
	static const int64_t rows_list[] = {0, 1, 2, 3, 5, 37, 300}; /* many rows: many chunks */
	for (size_t ci = 0; ci < sizeof cols_list / sizeof *cols_list; ci++)
		for (size_t ri = 0; ri < sizeof rows_list / sizeof *rows_list; ri++) {
			int64_t cols = cols_list[ci], rows = rows_list[ri], n = rows * cols;
			if (n + cols > (int64_t)cap - H16_GUARD)
				continue;
			const uint16_t *row = b + n; /* after x's elements, so it never overlaps y */
			for (int op = 0; op < 3; op += 2) {
				for (size_t i = 0; i < cap; i++)
					dst[i] = canary;
				amp_engine e = op == 0 ? amp_vadd_rows_h16(a, row, dst, rows, cols)
				                       : amp_vmul_rows_h16(a, row, dst, rows, cols);
				cr_assert_eq(e, want_engine, "%s rows op %d: engine", path, op);
				for (int64_t i = 0; i < n; i++)
					cr_assert(h16_same(dst[i], h16_ref(op, a[i], row[i % cols])),
					          "%s rows op %d %lldx%lld i=%lld: %04x, want %04x", path, op,
					          (long long)rows, (long long)cols, (long long)i, dst[i],
					          h16_ref(op, a[i], row[i % cols]));
				for (int64_t i = n; i < n + H16_GUARD; i++)
					cr_assert_eq(dst[i], canary, "%s rows op %d wrote past the end", path, op);
				checked += n;
			}
		}
	/* scale by a float: native only where fp16 holds the factor (or it is NaN); a factor
	 * fp16 does not hold is never rounded to fp16 first (0.1 and 1/0.9 would change results) */
	static const float factors[] = {0.5f, -3.0f, 65504.0f, 0x1p-24f, 1.0f, -0.0f, INFINITY,
	                                0.1f, 1.0f / 0.9f, 1e-8f, 1e6f, 3.0e-5f, -1.7f};
	for (size_t k = 0; k < sizeof factors / sizeof *factors; k++) {
		float s = factors[k];
		int exact = amp_half_f16_to_f32(amp_half_f32_to_f16(s)) == s;
		amp_engine want_e = want_engine == AMP_ENGINE_AVX512_FP16 && !exact
		                        ? AMP_ENGINE_FP32_FMA
		                        : want_engine;
		for (int64_t n = 0; n <= 300; n += n < 70 ? 1 : 23) {
			for (size_t i = 0; i < cap; i++)
				dst[i] = canary;
			amp_engine e = amp_vscale_h16(a + 1, s, dst + 1, n);
			cr_assert_eq(e, want_e, "%s scale %.9g: engine %s", path, (double)s,
			             amp_engine_name(e));
			for (int64_t i = 0; i < n; i++) {
				uint16_t want = amp_half_f32_to_f16(amp_half_f16_to_f32(a[1 + i]) * s);
				cr_assert(h16_same(dst[1 + i], want), "%s scale %.9g n=%lld i=%lld: %04x * s = "
				          "%04x, want %04x", path, (double)s, (long long)n, (long long)i,
				          a[1 + i], dst[1 + i], want);
			}
			cr_assert_eq(dst[0], canary, "%s scale wrote before", path);
			for (int64_t i = n + 1; i < n + 1 + H16_GUARD; i++)
				cr_assert_eq(dst[i], canary, "%s scale n=%lld wrote past the end", path,
				             (long long)n);
			checked += n;
		}
	}
	cr_assert_eq(amp_vscale_h16(a, NAN, dst, 64), want_engine, "%s scale by NaN", path);
	for (int64_t i = 0; i < 64; i++)
		cr_assert(h16_isnan(dst[i]), "%s scale by NaN i=%lld: %04x", path, (long long)i, dst[i]);
	/* every fp16 a against 16 b (specials included), each op: exhaustive in one operand */
	static const uint16_t bs[16] = {0x0000, 0x8000, 0x0001, 0x83ff, 0x3c00, 0xbc00, 0x7bff,
	                                0xfbff, 0x7c00, 0xfc00, 0x7e00, 0x3555, 0x0400, 0x1000,
	                                0xd1f3, 0x5a5a};
	uint16_t *all = malloc(65536 * sizeof *all), *rep = malloc(65536 * sizeof *rep);
	uint16_t *out = malloc(65536 * sizeof *out);
	cr_assert(all && rep && out);
	for (uint32_t i = 0; i < 65536; i++)
		all[i] = (uint16_t)i;
	for (int k = 0; k < 16; k++) {
		for (uint32_t i = 0; i < 65536; i++)
			rep[i] = bs[k];
		for (int op = 0; op < 3; op++) {
			h16_call(op, all, rep, out, 65536);
			for (uint32_t i = 0; i < 65536; i++)
				cr_assert(h16_same(out[i], h16_ref(op, all[i], bs[k])),
				          "%s op %d: %04x op %04x = %04x, want %04x", path, op, i, bs[k],
				          out[i], h16_ref(op, all[i], bs[k]));
			checked += 65536;
		}
	}
	cr_log_info("%s fp16 elementwise (%s): %lld results, max difference from FP32 rounded "
	            "once 0 (bit-exact, NaN as NaN)", path, amp_engine_name(want_engine),
	            (long long)checked);
	free(all), free(rep), free(out);
	free(a), free(b), free(dst);
}

PATH_TESTS(elementwise_h16, fp32_rounded_once, check_elementwise_h16)

/* ---- statistics taken in the fp16 GEMM epilogue -------------------------------------------- */

/* Uniform in [0, 1). */
static float unit_f32(void)
{
	return (float)(rng_u64() >> 40) * 0x1p-24f;
}

/* a and b agree field by field (extremes as values: -0 == +0, NaN == NaN). */
static void assert_same_stats(const amp_stats *a, const amp_stats *b, const char *what)
{
	cr_assert_eq(a->count, b->count, "%s: count", what);
	cr_assert_eq(a->nan, b->nan, "%s: nan", what);
	cr_assert_eq(a->pinf, b->pinf, "%s: +inf", what);
	cr_assert_eq(a->ninf, b->ninf, "%s: -inf", what);
	cr_assert_eq(a->underflow, b->underflow, "%s: underflow", what);
	cr_assert_eq(a->near_overflow, b->near_overflow, "%s: near overflow", what);
	for (int k = 0; k < AMP_STATS_BINS; k++)
		cr_assert_eq(a->exp_hist[k], b->exp_hist[k], "%s: exp_hist[%d]", what, k);
	const double ea[3] = {a->min, a->max, a->absmax}, eb[3] = {b->min, b->max, b->absmax};
	for (int k = 0; k < 3; k++)
		cr_assert(ea[k] == eb[k] || (isnan(ea[k]) && isnan(eb[k])), "%s: extreme %d: %g vs %g",
		          what, k, ea[k], eb[k]);
}

/* amp_gemm_f16_stats writes the very C of amp_gemm_f16 and its statistics are amp_stats_f16 of
 * that C: shapes of one tile and of many, transposes, beta 1 onto a C holding Inf and NaN,
 * values that overflow FP16, 1 and 2 threads (the shares' statistics merged). */
static void check_gemm_stats(const char *path)
{
	FORCE_PATH(path);
	static const struct {
		int64_t M, N, K;
		int ta, tb;
		float beta;
		float scale; /* of A: large values overflow FP16 */
	} cases[] = {
	    {1, 1, 1, 0, 0, 0.0f, 1.0f},      {7, 5, 3, 0, 1, 0.0f, 1.0f},
	    {128, 1024, 784, 0, 1, 1.0f, 1.0f}, {1024, 784, 128, 1, 0, 0.0f, 1.0f},
	    {33, 70, 300, 1, 1, 1.0f, 1.0f},  {64, 96, 200, 0, 0, 0.0f, 300.0f},
	    {5, 3000, 8, 0, 0, 0.0f, 1e-6f},
	};
	for (int threads = 1; threads <= 2; threads++) {
		amp_kernels_set_threads(threads);
		for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
			int64_t M = cases[c].M, N = cases[c].N, K = cases[c].K;
			uint16_t *A = malloc((size_t)(M * K) * 2), *B = malloc((size_t)(K * N) * 2);
			uint16_t *C1 = malloc((size_t)(M * N) * 2), *C2 = malloc((size_t)(M * N) * 2);
			cr_assert(A && B && C1 && C2);
			rng_seed(c * 7 + 1);
			for (int64_t i = 0; i < M * K; i++)
				A[i] = amp_f32_to_f16(cases[c].scale * (unit_f32() - 0.5f));
			for (int64_t i = 0; i < K * N; i++)
				B[i] = amp_f32_to_f16(unit_f32() - 0.5f);
			for (int64_t i = 0; i < M * N; i++)
				C1[i] = C2[i] = amp_f32_to_f16((float)(i % 13) - 6.0f);
			if (M * N > 4)
				C1[1] = C2[1] = 0x7c00, C1[3] = C2[3] = 0x7e00; /* +Inf and NaN under beta 1 */
			int64_t lda = cases[c].ta ? M : K, ldb = cases[c].tb ? K : N;
			amp_stats fused, after;
			amp_gemm_f16(cases[c].ta, cases[c].tb, M, N, K, A, lda, B, ldb, cases[c].beta, C1, N);
			amp_gemm_f16_stats(cases[c].ta, cases[c].tb, M, N, K, A, lda, B, ldb,
			                   cases[c].beta, C2, N, &fused);
			cr_assert(memcmp(C1, C2, (size_t)(M * N) * 2) == 0, "%s case %zu: C differs", path, c);
			amp_stats_f16(C1, M * N, &after);
			char what[96];
			snprintf(what, sizeof what, "%s %lldx%lldx%lld, %d thread(s)", path, (long long)M,
			         (long long)N, (long long)K, threads);
			assert_same_stats(&fused, &after, what);
			/* bf16: the same inputs rounded to bf16, C with +Inf and NaN under beta 1 too. */
			uint16_t *Ab = malloc((size_t)(M * K) * 2), *Bb = malloc((size_t)(K * N) * 2);
			cr_assert(Ab && Bb);
			for (int64_t i = 0; i < M * K; i++)
				Ab[i] = amp_half_f32_to_bf16(1e30f * amp_f16_to_f32(A[i]));
			for (int64_t i = 0; i < K * N; i++)
				Bb[i] = amp_half_f32_to_bf16(amp_f16_to_f32(B[i]));
			for (int64_t i = 0; i < M * N; i++)
				C1[i] = C2[i] = amp_half_f32_to_bf16((float)(i % 13) - 6.0f);
			if (M * N > 4)
				C1[1] = C2[1] = 0x7f80, C1[3] = C2[3] = 0x7fc0;
			amp_gemm_bf16(cases[c].ta, cases[c].tb, M, N, K, Ab, lda, Bb, ldb, cases[c].beta,
			              C1, N);
			amp_gemm_bf16_stats(cases[c].ta, cases[c].tb, M, N, K, Ab, lda, Bb, ldb,
			                    cases[c].beta, C2, N, &fused);
			cr_assert(memcmp(C1, C2, (size_t)(M * N) * 2) == 0, "%s case %zu: bf16 C differs",
			          path, c);
			amp_stats_bf16(C1, M * N, &after);
			snprintf(what, sizeof what, "%s bf16 %lldx%lldx%lld, %d thread(s)", path,
			         (long long)M, (long long)N, (long long)K, threads);
			assert_same_stats(&fused, &after, what);
			free(Ab), free(Bb);
			free(A), free(B), free(C1), free(C2);
		}
	}
}

PATH_TESTS(gemm, f16_statistics, check_gemm_stats)

/* amp_stats_bf16 (dispatched and on each statistics path) equals amp_stats_f32 of the widened
 * values, on lengths around the widening block and the groups of 512, on five kinds of data:
 * every pattern (subnormals, NaN, Inf, |x| >= 65536 in every block), finite values under 32768
 * with zeros (blocks without the fix-up but for the zero count), finite values with some
 * above 32768 (the near-overflow count), and values all of one sign without zeros (the
 * extreme nearest zero: negative only, positive only with some above 32768). */
static void make_bf16_kind(uint16_t *x, int64_t n, int kind)
{
	for (int64_t i = 0; i < n; i++) {
		uint16_t r = (uint16_t)rng_u64();
		if (kind == 0)
			x[i] = r;
		else if (kind == 1)
			x[i] = r % 7 == 0 ? (uint16_t)(r & 0x8000u) /* +-0 */
			                  : (uint16_t)((r & 0x807fu) | ((0x30u + r % 0x16u) << 7));
		else if (kind == 2)
			x[i] = (uint16_t)((r & 0x807fu) | ((0x80u + r % 0x0fu) << 7)); /* 2 to 2^15.x */
		else if (kind == 3)
			x[i] = (uint16_t)(0x8000u | (r & 0x7fu) | ((0x30u + r % 0x16u) << 7));
		else
			x[i] = (uint16_t)((r & 0x7fu) | ((0x80u + r % 0x0fu) << 7));
	}
}

static void check_stats_bf16(const char *path)
{
	FORCE_PATH(path);
	static const int64_t lens[] = {0,   1,    15,   16,   17,    31,          32, 511,
	                               512, 513,  4095, 4096, 4097,  10000, 3 * 4096 + 5};
	enum { NMAX = 3 * 4096 + 5 };
	static uint16_t x[NMAX];
	static float w[NMAX];
	static const amp_isa isas[] = {AMP_ISA_SCALAR, AMP_ISA_AVX2, AMP_ISA_AVX512};
	rng_seed(23);
	for (int kind = 0; kind < 5; kind++) {
		make_bf16_kind(x, NMAX, kind);
		amp_cvt_bf16_f32(x, w, NMAX);
		for (size_t l = 0; l < sizeof lens / sizeof *lens; l++) {
			int64_t n = lens[l];
			amp_stats want, got;
			amp_stats_f32_on(AMP_ISA_SCALAR, w, n, &want);
			amp_stats_bf16(x, n, &got);
			char what[96];
			snprintf(what, sizeof what, "%s amp_stats_bf16 kind %d n=%lld", path, kind,
			         (long long)n);
			assert_same_stats(&got, &want, what);
			for (size_t i = 0; i < sizeof isas / sizeof *isas; i++) {
				amp_stats_bf16_on(isas[i], x, n, &got);
				snprintf(what, sizeof what, "%s amp_stats_bf16_on(%s) kind %d n=%lld",
				         path, amp_isa_name(isas[i]), kind, (long long)n);
				assert_same_stats(&got, &want, what);
			}
		}
	}
	cr_log_info("%s amp_stats_bf16: %zu lengths up to %d, 5 kinds of data, equal to "
	            "amp_stats_f32 of the widened values",
	            path, sizeof lens / sizeof *lens, NMAX);
}

PATH_TESTS(stats, bf16_equals_widened_f32, check_stats_bf16)

Test(stats, merge_is_exact)
{
	uint16_t x[1000];
	for (int i = 0; i < 1000; i++)
		x[i] = (uint16_t)(i * 65.537); /* every exponent, NaN and Inf included */
	amp_stats whole, parts, s;
	amp_stats_f16(x, 1000, &whole);
	amp_stats_init(&parts);
	for (int at = 0; at < 1000; at += 137) {
		amp_stats_f16(x + at, at + 137 <= 1000 ? 137 : 1000 - at, &s);
		amp_stats_merge(&parts, &s);
	}
	assert_same_stats(&parts, &whole, "137-element parts");
	amp_stats_init(&s);
	amp_stats_merge(&parts, &s);
	assert_same_stats(&parts, &whole, "an empty part");
	const uint16_t nan[2] = {0x7e00, 0xfe00};
	amp_stats_f16(nan, 2, &s);
	amp_stats_init(&parts);
	amp_stats_merge(&parts, &s);
	cr_assert(isnan(parts.min) && isnan(parts.max) && parts.nan == 2, "no finite value: NaN extremes");
}

/* amp_gemm_acc32 stores the sums amp_gemm rounds: on every path, its FP32 C rounded to the
 * half type is amp_gemm's C bit for bit, with beta 0 and with beta 1 onto the same start (a
 * start in the half type, so both add the same values), for the four transposes and shapes
 * with edges, one k block or several (K = 700), and sums that are Inf or NaN (the last shape:
 * +Inf and -Inf in A's first row).  The engine it reports is amp_gemm's. */
Test(gemm, acc32_stores_the_sums_that_gemm_rounds, .fini = kpath_restore)
{
	static const int64_t dims[][3] = {
	    {7, 5, 13}, {33, 47, 100}, {128, 64, 288}, {40, 10, 1100}, {9, 21, 700}};
	static const amp_dtype halves[] = {AMP_F16, AMP_BF16};
	for (size_t pi = 0; pi < sizeof all_paths / sizeof *all_paths; pi++) {
		if (!kpath_force(all_paths[pi]))
			continue;
		for (size_t d = 0; d < sizeof dims / sizeof *dims; d++)
			for (int tr = 0; tr < 4; tr++)
				for (size_t h = 0; h < 2; h++) {
					int64_t M = dims[d][0], N = dims[d][1], K = dims[d][2];
					int ta = tr & 1, tb = tr >> 1;
					amp_dtype dt = halves[h];
					float *af = malloc((size_t)(M * K) * 4), *bf = malloc((size_t)(K * N) * 4);
					float *c0 = malloc((size_t)(M * N) * 4), *c32 = malloc((size_t)(M * N) * 4);
					uint16_t *a = malloc((size_t)(M * K) * 2), *b = malloc((size_t)(K * N) * 2);
					uint16_t *c = malloc((size_t)(M * N) * 2), *cr = malloc((size_t)(M * N) * 2);
					cr_assert(af && bf && c0 && c32 && a && b && c && cr);
					for (int64_t i = 0; i < M * K; i++)
						af[i] = rng_uniform(-0.5f, 0.5f);
					for (int64_t i = 0; i < K * N; i++)
						bf[i] = rng_uniform(-0.5f, 0.5f);
					for (int64_t i = 0; i < M * N; i++)
						c0[i] = rng_uniform(-0.5f, 0.5f);
					if (d == sizeof dims / sizeof *dims - 1) {
						/* op(A)[0][0] = +Inf, op(A)[0][1] = -Inf: row 0 of C is NaN where
						 * B's rows 0 and 1 agree in sign, else Inf */
						af[0] = INFINITY;
						af[ta ? M : 1] = -INFINITY;
					}
					amp_cvt(dt, a, AMP_F32, af, M * K);
					amp_cvt(dt, b, AMP_F32, bf, K * N);
					for (float beta = 0.0f; beta <= 1.0f; beta += 1.0f) {
						amp_cvt(dt, c, AMP_F32, c0, M * N); /* the same start for both */
						amp_cvt(AMP_F32, c32, dt, c, M * N);
						amp_engine e = amp_gemm(dt, ta, tb, M, N, K, a, ta ? M : K, b,
						                        tb ? K : N, beta, c, N, NULL);
						amp_engine e32 = amp_gemm_acc32(dt, ta, tb, M, N, K, a, ta ? M : K,
						                                b, tb ? K : N, beta, c32, N);
						cr_assert_eq(e32, e, "%s: acc32 engine %s, gemm %s", all_paths[pi],
						             amp_engine_name(e32), amp_engine_name(e));
						amp_cvt(dt, cr, AMP_F32, c32, M * N);
						int64_t diff = 0;
						for (int64_t i = 0; i < M * N; i++)
							diff += c[i] != cr[i];
						cr_assert_eq(diff, 0, "%s %s %lldx%lldx%lld ta %d tb %d beta %g: %lld "
						             "elements differ", all_paths[pi], amp_dtype_name(dt),
						             (long long)M, (long long)N, (long long)K, ta, tb,
						             (double)beta, (long long)diff);
					}
					free(af), free(bf), free(c0), free(c32), free(a), free(b), free(c), free(cr);
				}
	}
}

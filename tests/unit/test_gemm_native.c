/* test_gemm_native.c — the AMX-BF16 and native AVX512-FP16 GEMMs: their models everywhere, the
 * real kernels where the CPU has the features (else "SKIPPED: <path> needs <feature>").
 *
 * R is the FP64 product of the (exact) half inputs plus beta C0; S = sum_k |a b| + |beta C0|.
 *   bf16 (AMX): every element |C - R| <= 2^-8 |R| + (K + 2) 2^-24 S (1 + 2^-8)  (FP32 sums, one
 *               bf16 rounding: a rigorous bound);
 *   fp16:       every element |C - R| <= 2^-11 |R| + 0.02 S (fp16 sums of pairs of blocks of 24:
 *               at most (24 u + u) S, u = 2^-11, rigorous), data in [-1,1) (the bound):
 *               ||C - R||_F / ||R||_F <= 2e-3 and max |C - R| / max |R| <= 2e-3; data in
 * [0.5,1): max |C - R| / |R| <= 2e-3 (one fp16 sum of 32 positive terms alone reaches 2.3e-3
 * element-wise at K = 32; blocks of 24 stay under it), for K up to 4096.  The max
 * errors are printed.  AMP_TEST_QUICK=1 thins the shape sweeps.
 */
#include <cpuid.h>
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/gemm_blind.h"

typedef void (*gemm_fn)(int ta, int tb, int64_t M, int64_t N, int64_t K, const uint16_t *A,
                        int64_t lda, const uint16_t *B, int64_t ldb, float beta, uint16_t *C,
                        int64_t ldc, amp_stats *st);

/* ---- helpers ------------------------------------------------------------------------------- */

static uint64_t rng_state;

static uint64_t rng_u64(void)
{
	uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull); /* splitmix64 */
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static float rng_uniform(float lo, float hi)
{
	return lo + (hi - lo) * ((float)(rng_u64() >> 40) * 0x1p-24f);
}

static uint64_t xcr0(void)
{
	uint32_t lo, hi;
	__asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
	return ((uint64_t)hi << 32) | lo;
}

static int cpu_avx512bw(void)
{
	unsigned a, b, c, d;
	if (__get_cpuid_max(0, NULL) < 7)
		return 0;
	__cpuid_count(7, 0, a, b, c, d);
	return (b & (1u << 16)) && (b & (1u << 30)) && (b & (1u << 31)) &&
	       (xcr0() & 0xe6u) == 0xe6u; /* SSE, AVX, opmask and ZMM state enabled */
}

/* AVX512-BF16 (cpuid 7.1 EAX bit 5) with AVX512-DQ (fpclass) on top of cpu_avx512bw. */
static int cpu_avx512bf16(void)
{
	unsigned a, b, c, d;
	if (!cpu_avx512bw())
		return 0;
	__cpuid_count(7, 0, a, b, c, d);
	if (!(b & (1u << 17)))
		return 0;
	__cpuid_count(7, 1, a, b, c, d);
	return (a >> 5) & 1u;
}

static int cpu_leaf7_edx(int bit)
{
	unsigned a, b, c, d;
	if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27)) || __get_cpuid_max(0, NULL) < 7)
		return 0;
	__cpuid_count(7, 0, a, b, c, d);
	return (d >> bit) & 1u;
}

/* The models: the shared loop nests on the emulated micro-kernels and the plain-C stores. */
static void amx_model(int ta, int tb, int64_t M, int64_t N, int64_t K, const uint16_t *A,
                      int64_t lda, const uint16_t *B, int64_t ldb, float beta, uint16_t *C,
                      int64_t ldc, amp_stats *st)
{
	amx_gemm_drive(amx_pack_a_ref, amx_pack_b_vnni_ref, amx_ukr_ref, amx_store_ref,
	               amx_acc_transpose_ref, amp_stats_bf16, ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc, 0, st);
}

static void fp16n_model(int ta, int tb, int64_t M, int64_t N, int64_t K, const uint16_t *A,
                        int64_t lda, const uint16_t *B, int64_t ldb, float beta, uint16_t *C,
                        int64_t ldc, amp_stats *st)
{
	fp16n_gemm_drive(fp16n_pack_a_panels_ref, fp16n_pack_b_ref, fp16n_ukr_ref, NULL,
	                 fp16n_dot_ref, fp16n_store_ref, ta, tb, M, N, K, A, lda, B, ldb, beta, C,
	                 ldc, 0, 0, st);
}

/* The unpacked fallbacks (used when the workspace cannot be allocated). */
static void amx_unpacked(int ta, int tb, int64_t M, int64_t N, int64_t K, const uint16_t *A,
                         int64_t lda, const uint16_t *B, int64_t ldb, float beta, uint16_t *C,
                         int64_t ldc, amp_stats *st)
{
	blind_mat a = blind_op_a(ta, A, lda), b = blind_op_b(tb, B, ldb);
	(void)st;
	amx_gemm_unpacked(&a, &b, M, N, K, beta, C, ldc, 0);
}

static void fp16n_unpacked(int ta, int tb, int64_t M, int64_t N, int64_t K, const uint16_t *A,
                           int64_t lda, const uint16_t *B, int64_t ldb, float beta, uint16_t *C,
                           int64_t ldc, amp_stats *st)
{
	blind_mat a = blind_op_a(ta, A, lda), b = blind_op_b(tb, B, ldb);
	(void)st;
	fp16n_gemm_unpacked(&a, &b, M, N, K, beta, C, ldc, 0);
}

typedef struct dtype_ops {
	int bf16;
	float (*to_f32)(uint16_t h);
	uint16_t (*from_f32)(float f);
} dtype_ops;

static float bf16_to(uint16_t h)
{
	return blind_bf16_to_f32(h);
}

static uint16_t bf16_from(float f)
{
	return blind_f32_to_bf16(f);
}

static const dtype_ops BF16 = {1, bf16_to, bf16_from};
static const dtype_ops FP16 = {0, amp_f16_to_f32, amp_f32_to_f16};

/* One problem with its inputs, the kernel's output and the FP64 reference. */
typedef struct problem {
	int64_t M, N, K, lda, ldb, ldc;
	int ta, tb;
	float beta;
	uint16_t *A, *B, *C0, *C;
	double *R, *S;
} problem;

#define GUARD  0x5a5au
#define LD_PAD 3

/* integers: inputs are small integers (every sum exact in FP32), else uniform in [lo, 1). */
static void problem_make(problem *p, const dtype_ops *dt, int64_t M, int64_t N, int64_t K, int ta,
                         int tb, float beta, float lo, int integers)
{
	memset(p, 0, sizeof *p);
	p->M = M, p->N = N, p->K = K, p->ta = ta, p->tb = tb, p->beta = beta;
	int64_t ar = ta ? K : M, ac = ta ? M : K, br = tb ? N : K, bc = tb ? K : N;
	p->lda = ac + LD_PAD, p->ldb = bc + LD_PAD, p->ldc = N + LD_PAD;
	p->A = malloc((size_t)((ar ? ar : 1) * p->lda) * 2);
	p->B = malloc((size_t)((br ? br : 1) * p->ldb) * 2);
	p->C0 = malloc((size_t)(M * p->ldc) * 2);
	p->C = malloc((size_t)(M * p->ldc) * 2);
	p->R = malloc((size_t)(M * N) * sizeof(double));
	p->S = malloc((size_t)(M * N) * sizeof(double));
	cr_assert(p->A && p->B && p->C0 && p->C && p->R && p->S);
	for (int64_t i = 0; i < ar * p->lda; i++)
		p->A[i] = dt->from_f32(integers ? (float)((int)(rng_u64() % 9) - 4)
		                                : rng_uniform(lo, 1.0f));
	for (int64_t i = 0; i < br * p->ldb; i++)
		p->B[i] = dt->from_f32(integers ? (float)((int)(rng_u64() % 9) - 4)
		                                : rng_uniform(lo, 1.0f));
	for (int64_t i = 0; i < M * p->ldc; i++) {
		int64_t c = i % p->ldc;
		if (c >= N)
			p->C0[i] = GUARD;
		else if (beta == 0.0f)
			p->C0[i] = dt->bf16 ? 0x7fc1u : 0x7e01u; /* garbage: must not be read */
		else
			p->C0[i] = dt->from_f32(integers ? (float)((int)(rng_u64() % 9) - 4)
			                                 : rng_uniform(lo, 1.0f));
	}
	for (int64_t i = 0; i < M; i++)
		for (int64_t j = 0; j < N; j++) {
			double r = 0.0, s = 0.0;
			for (int64_t k = 0; k < K; k++) {
				double x = dt->to_f32(p->A[ta ? k * p->lda + i : i * p->lda + k]);
				double y = dt->to_f32(p->B[tb ? j * p->ldb + k : k * p->ldb + j]);
				r += x * y;
				s += fabs(x * y);
			}
			if (beta != 0.0f) {
				double c = (double)beta * (double)dt->to_f32(p->C0[i * p->ldc + j]);
				r += c;
				s += fabs(c);
			}
			p->R[i * N + j] = r;
			p->S[i * N + j] = s;
		}
}

static void problem_run(problem *p, gemm_fn fn, amp_stats *st)
{
	memcpy(p->C, p->C0, (size_t)(p->M * p->ldc) * 2);
	fn(p->ta, p->tb, p->M, p->N, p->K, p->A, p->lda, p->B, p->ldb, p->beta, p->C, p->ldc, st);
	for (int64_t i = 0; i < p->M; i++)
		for (int64_t j = p->N; j < p->ldc; j++)
			cr_assert_eq(p->C[i * p->ldc + j], GUARD, "kernel wrote outside C");
}

static void problem_free(problem *p)
{
	free(p->A), free(p->B), free(p->C0), free(p->C), free(p->R), free(p->S);
}

typedef struct errs {
	double bound_ratio; /* max |C - R| / rigorous bound */
	double max_rel;     /* max |C - R| / |R| (R != 0) */
	double diff2, ref2; /* for the norm-wise error */
} errs;

static void problem_errors(const problem *p, const dtype_ops *dt, errs *e)
{
	for (int64_t i = 0; i < p->M; i++)
		for (int64_t j = 0; j < p->N; j++) {
			double c = dt->to_f32(p->C[i * p->ldc + j]);
			double r = p->R[i * p->N + j], s = p->S[i * p->N + j];
			cr_assert(isfinite(c), "%lldx%lldx%lld C[%lld][%lld] not finite",
			          (long long)p->M, (long long)p->N, (long long)p->K, (long long)i,
			          (long long)j);
			double d = fabs(c - r);
			double bound = dt->bf16 ? 0x1p-8 * fabs(r) + (double)(p->K + 2) * 0x1p-24 *
			                                                 s * (1.0 + 0x1p-8)
			                        : 0x1p-11 * fabs(r) + 0.02 * s;
			bound += 1e-30;
			if (d / bound > e->bound_ratio)
				e->bound_ratio = d / bound;
			if (r != 0.0 && d / fabs(r) > e->max_rel)
				e->max_rel = d / fabs(r);
			e->diff2 += d * d;
			e->ref2 += r * r;
		}
}

static const int64_t SIZES[] = {1, 15, 16, 17, 31, 33, 64, 100, 128};
#define NSIZES ((int)(sizeof SIZES / sizeof SIZES[0]))

/* Every M x N x K of SIZES (and K = 784), each with one of the 12 (trans_a, trans_b, beta)
 * combinations in turn, so that each combination meets every edge class. */
static void sweep(gemm_fn fn, const dtype_ops *dt, const char *what, int stride)
{
	if (getenv("AMP_TEST_QUICK"))
		stride++; /* the sanitizer runs: every other size still meets every edge class */
	static const float betas[3] = {0.0f, 1.0f, 0.5f};
	errs e = {0};
	int runs = 0, idx = 0;
	rng_state = 42;
	for (int mi = 0; mi < NSIZES; mi += stride)
		for (int ni = 0; ni < NSIZES; ni += stride)
			for (int ki = 0; ki <= NSIZES; ki++, idx++) {
				int64_t K = ki == NSIZES ? 784 : SIZES[ki];
				int combo = idx % 12;
				problem p;
				problem_make(&p, dt, SIZES[mi], SIZES[ni], K, combo & 1,
				             (combo >> 1) & 1, betas[combo >> 2], -1.0f, 0);
				problem_run(&p, fn, NULL);
				errs one = {0};
				problem_errors(&p, dt, &one);
				cr_assert_leq(
				    one.bound_ratio, 1.0,
				    "%s %lldx%lldx%lld ta=%d tb=%d beta=%g: error %.3g x its bound",
				    what, (long long)p.M, (long long)p.N, (long long)K, p.ta, p.tb,
				    (double)p.beta, one.bound_ratio);
				if (one.bound_ratio > e.bound_ratio)
					e.bound_ratio = one.bound_ratio;
				problem_free(&p);
				runs++;
			}
	cr_log_info("%s: %d shapes, max error %.3g x the rigorous bound", what, runs,
	            e.bound_ratio);
	printf("%s: %d shapes, max error %.3g x the rigorous bound\n", what, runs, e.bound_ratio);
}

/* The FP16 accuracy targets of the issue: 2e-3 element-wise on positive data, norm-wise and
 * against the largest |R| on [-1,1) data, K up to 4096. */
static void fp16_accuracy(gemm_fn fn, const char *what)
{
	static const int64_t shapes[][3] = {{33, 65, 16},   {17, 64, 32},   {64, 64, 33},
	                                    {33, 100, 784}, {17, 33, 4096}, {8, 64, 4096}};
	double worst_rel = 0.0, worst_norm = 0.0, worst_maxabs = 0.0;
	rng_state = 7;
	for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
		for (int pos = 0; pos < 2; pos++) {
			problem p;
			errs e = {0};
			problem_make(&p, &FP16, shapes[s][0], shapes[s][1], shapes[s][2],
			             (int)s & 1, pos, pos ? 1.0f : 0.0f, pos ? 0.5f : -1.0f, 0);
			problem_run(&p, fn, NULL);
			problem_errors(&p, &FP16, &e);
			double norm = sqrt(e.diff2 / e.ref2);
			if (pos) {
				cr_assert_leq(e.max_rel, 2e-3,
				              "%s %lldx%lldx%lld [0.5,1): max rel %.3g", what,
				              (long long)p.M, (long long)p.N, (long long)p.K,
				              e.max_rel);
				worst_rel = fmax(worst_rel, e.max_rel);
			} else {
				cr_assert_leq(norm, 2e-3,
				              "%s %lldx%lldx%lld [-1,1): norm-wise %.3g", what,
				              (long long)p.M, (long long)p.N, (long long)p.K, norm);
				worst_norm = fmax(worst_norm, norm);
				double dmax = 0.0, rmax = 0.0;
				for (int64_t i = 0; i < p.M; i++)
					for (int64_t j = 0; j < p.N; j++) {
						double r = p.R[i * p.N + j];
						dmax = fmax(dmax, fabs((double)amp_f16_to_f32(
						                           p.C[i * p.ldc + j]) -
						                       r));
						rmax = fmax(rmax, fabs(r));
					}
				cr_assert_leq(dmax / rmax, 2e-3,
				              "%s %lldx%lldx%lld [-1,1): max err / max |R| %.3g", what,
				              (long long)p.M, (long long)p.N, (long long)p.K,
				              dmax / rmax);
				worst_maxabs = fmax(worst_maxabs, dmax / rmax);
			}
			problem_free(&p);
		}
	cr_log_info("%s: [-1,1) data: norm-wise %.3g, max err / max |R| %.3g; "
	            "[0.5,1) data: max rel %.3g (tolerance 2e-3 each); K <= 4096",
	            what, worst_norm, worst_maxabs, worst_rel);
	printf("%s: [-1,1) data: norm-wise %.3g, max err / max |R| %.3g; "
	       "[0.5,1) data: max rel %.3g (tolerance 2e-3 each); K <= 4096\n",
	       what, worst_norm, worst_maxabs, worst_rel);
}

/* Two kernels give the same bits on integer data (exact sums: any order agrees), and the
 * statistics of the final C. */
static void same_bits(gemm_fn real, gemm_fn model, const dtype_ops *dt, const char *what)
{
	/* K <= 48 under beta 0 (s % 3 == 0: {45, 100, 10}, {600, 40, 40}, {33, 65, 17}) takes the
	 * fp16 kernel's store of the group's sums straight to C */
	static const int64_t shapes[][3] = {
	    {1, 1, 0},     {17, 33, 15},  {33, 100, 784}, {100, 17, 600}, {128, 128, 1100},
	    {40, 520, 64}, {600, 40, 40}, {20, 33, 32},   {9, 70, 31},    {45, 100, 10},
	    {64, 64, 1},   {3, 200, 32},  {33, 65, 17},  {64, 10, 2112}, {10, 40, 96}};
	rng_state = 9;
	for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
		for (int combo = 0; combo < 4; combo++) {
			problem p;
			problem_make(&p, dt, shapes[s][0], shapes[s][1], shapes[s][2], combo & 1,
			             combo >> 1,
			             s % 3 == 0   ? 0.0f
			             : s % 3 == 1 ? 1.0f
			                          : 0.5f,
			             0.0f, 1);
			amp_stats st_real, st_model, st_want, part;
			problem_run(&p, model, &st_model);
			uint16_t *want = malloc((size_t)(p.M * p.ldc) * 2);
			cr_assert(want);
			memcpy(want, p.C, (size_t)(p.M * p.ldc) * 2);
			problem_run(&p, real, &st_real);
			cr_assert_eq(
			    memcmp(want, p.C, (size_t)(p.M * p.ldc) * 2), 0,
			    "%s %lldx%lldx%lld ta=%d tb=%d: not bit-identical to the model", what,
			    (long long)p.M, (long long)p.N, (long long)p.K, p.ta, p.tb);
			amp_stats_init(&st_want);
			for (int64_t i = 0; i < p.M; i++) {
				if (dt->bf16)
					amp_stats_bf16(p.C + i * p.ldc, p.N, &part);
				else
					amp_stats_f16(p.C + i * p.ldc, p.N, &part);
				amp_stats_merge(&st_want, &part);
			}
			const amp_stats *got[2] = {&st_real, &st_model};
			for (int g = 0; g < 2; g++) {
				cr_assert_eq(got[g]->count, st_want.count, "%s: statistics count",
				             what);
				cr_assert_eq(got[g]->nan + got[g]->pinf + got[g]->ninf, 0u);
				cr_assert_eq(memcmp(got[g]->exp_hist, st_want.exp_hist,
				                    sizeof st_want.exp_hist),
				             0, "%s: statistics histogram", what);
				cr_assert(got[g]->min == st_want.min &&
				              got[g]->max == st_want.max &&
				              got[g]->absmax == st_want.absmax,
				          "%s: statistics extremes", what);
			}
			free(want);
			problem_free(&p);
		}
}

/* The real FP16 kernel gives the model's bits on random data too (integer data sum exactly in
 * any order, so only these show that the blocks, the pairs and the promotions are the model's):
 * K around the block (24), pair (48) and panel (240) boundaries, on every micro-kernel form
 * (two tiles of <= 32 columns, one of <= 32, of 64; A read in place or packed; B read in place
 * at M <= 32; the pair's sums stored straight to C at K <= 48 under beta 0). */
static void fp16_same_bits_random(gemm_fn real, gemm_fn model, const char *what)
{
	static const int64_t ks[] = {1, 23, 24, 25, 40, 47, 48, 49, 72, 97, 239, 240, 241, 289, 481};
	static const int64_t mn[][2] = {{17, 33}, {40, 30}, {8, 70}, {33, 100}, {16, 64}};
	int runs = 0;
	rng_state = 11;
	for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++)
		for (int combo = 0; combo < 4; combo++, runs++) {
			problem p;
			size_t f = (i + (size_t)combo) % (sizeof mn / sizeof mn[0]);
			problem_make(&p, &FP16, mn[f][0], mn[f][1], ks[i], combo & 1, combo >> 1,
			             (i + (size_t)combo) % 2 ? 0.5f : 0.0f, i % 2 ? 0.5f : -1.0f, 0);
			problem_run(&p, model, NULL);
			uint16_t *want = malloc((size_t)(p.M * p.ldc) * 2);
			cr_assert(want);
			memcpy(want, p.C, (size_t)(p.M * p.ldc) * 2);
			problem_run(&p, real, NULL);
			cr_assert_eq(
			    memcmp(want, p.C, (size_t)(p.M * p.ldc) * 2), 0,
			    "%s %lldx%lldx%lld ta=%d tb=%d beta %g: not bit-identical to the model "
			    "on random data",
			    what, (long long)p.M, (long long)p.N, (long long)p.K, p.ta, p.tb,
			    (double)p.beta);
			free(want);
			problem_free(&p);
		}
	printf("%s: %d random-data problems bit-identical to the model\n", what, runs);
}

/* ---- layouts --------------------------------------------------------------------------------- */

Test(gemm_native, amx_pack_layouts)
{
	uint16_t src[70 * 70];
	for (int i = 0; i < 70 * 70; i++)
		src[i] = (uint16_t)(i + 1);
	for (int trans = 0; trans < 2; trans++) {
		/* op(A) (m, k) of a 70 x 70 array; block rows 5.., k 3.. */
		blind_mat a = blind_op_a(trans, src, 70);
		static uint16_t out[3 * 2 * AMX_TILE_ELEMS];
		amx_pack_a_ref(&a, 5, 27, 3, 65, 3, out);
		for (int s = 0; s < 3; s++)
			for (int h = 0; h < 2; h++)
				for (int i = 0; i < 16; i++)
					for (int j = 0; j < 32; j++) {
						int r = 16 * h + i, k = 32 * s + j;
						uint16_t want =
						    r < 27 && k < 65
						        ? src[trans ? (3 + k) * 70 + 5 + r
						                    : (5 + r) * 70 + 3 + k]
						        : 0;
						cr_assert_eq(out[((s * 2 + h) * 16 + i) * 32 + j],
						             want,
						             "A pack trans=%d s=%d h=%d i=%d j=%d",
						             trans, s, h, i, j);
					}
		/* op(B) (k, n): k 2.., 33 of them; columns 4.., 40 of them (two 32-blocks, the
		 * second of 8 columns: one tile per k step, after the first block's 2 x 2) */
		blind_mat b = blind_op_b(trans, src, 70);
		static uint16_t outb[2 * 2 * 2 * AMX_TILE_ELEMS];
		amx_pack_b_vnni_ref(&b, 2, 33, 2, 4, 40, outb);
		cr_assert_eq(amx_b_elems(2, 40), (2 * 2 + 2) * AMX_TILE_ELEMS);
		for (int nb = 0; nb < 2; nb++)
			for (int s = 0; s < 2; s++)
				for (int j = 0; j < 2 - nb; j++)
					for (int pr = 0; pr < 16; pr++)
						for (int c = 0; c < 16; c++)
							for (int e = 0; e < 2; e++) {
								int k = 32 * s + 2 * pr + e,
								    n = 32 * nb + 16 * j + c;
								uint16_t want =
								    k < 33 && n < 40
								        ? src[trans ? (4 + n) * 70 +
								                          2 + k
								                    : (2 + k) * 70 +
								                          4 + n]
								        : 0;
								int tile =
								    nb == 0 ? s * 2 + j : 4 + s;
								cr_assert_eq(
								    outb[(tile * 16 + pr) * 32 +
								         c * 2 + e],
								    want, "B VNNI pack trans=%d",
								    trans);
							}
	}
}

/* The AMX kernel's AVX-512 packers give amx_pack_a_ref's and amx_pack_b_vnni_ref's output bit
 * for bit: both transposes, a general stride (ref fallback), partial rows, columns and k steps
 * (odd kc included), on a 97 x 97 array of distinct values. */
Test(gemm_native, amx_packers_vs_ref)
{
	if (!cpu_avx512bw()) {
		printf("SKIPPED: avx512 needs avx512bw (the packers)\n");
		fflush(stdout);
		cr_skip_test("SKIPPED: avx512 needs avx512bw (the packers)");
	}
	enum { LD = 97 };
	static uint16_t src[LD * LD];
	for (int i = 0; i < LD * LD; i++)
		src[i] = (uint16_t)(i * 7 + 1);
	static const int64_t kcs[] = {1, 2, 31, 32, 33, 64, 65};
	static const int64_t spans[] = {1, 15, 16, 17, 31, 32, 33, 64};
	static uint16_t want[3 * 2 * 2 * 3 * AMX_TILE_ELEMS], got[sizeof want / sizeof *want];
	int cases = 0;
	for (int form = 0; form < 3; form++) /* cs 1, rs 1, neither (strides 2 and LD) */
		for (size_t ki = 0; ki < sizeof kcs / sizeof *kcs; ki++)
			for (size_t si = 0; si < sizeof spans / sizeof *spans; si++) {
				int64_t kc = kcs[ki], ks = (kc + 31) / 32, span = spans[si];
				blind_mat a = form == 2 ? (blind_mat){src, 2, LD}
				                        : blind_op_a(form, src, LD);
				int64_t rows = span < 32 ? span : 32;
				memset(want, 0xa5, sizeof want);
				memset(got, 0x5a, sizeof got);
				amx_pack_a_ref(&a, 3, rows, 2, kc, ks, want);
				amp_amx_pack_a_avx512(&a, 3, rows, 2, kc, ks, got);
				cr_assert(memcmp(want, got, (size_t)(ks * 2 * AMX_TILE_ELEMS) * 2) == 0,
				          "A pack form %d rows %lld kc %lld", form, (long long)rows,
				          (long long)kc);
				blind_mat b =
				    form == 2 ? (blind_mat){src, LD, 2} : blind_op_b(form, src, LD);
				memset(want, 0xa5, sizeof want);
				memset(got, 0x5a, sizeof got);
				amx_pack_b_vnni_ref(&b, 1, kc, ks, 2, span, want);
				amp_amx_pack_b_avx512(&b, 1, kc, ks, 2, span, got);
				size_t used = (size_t)amx_b_elems(ks, span);
				cr_assert(memcmp(want, got, used * 2) == 0,
				          "B pack form %d cols %lld kc %lld", form, (long long)span,
				          (long long)kc);
				for (size_t e = used; e < sizeof got / sizeof *got;
				     e++) /* nothing past it */
					cr_assert_eq(got[e], 0x5a5a,
					             "B pack form %d cols %lld kc %lld wrote "
					             "element %zu of %zu",
					             form, (long long)span, (long long)kc, e, used);
				cases++;
			}
	cr_log_info("amx packers: %d cases bit for bit", cases);
}

Test(gemm_native, fp16_pack_layouts)
{
	uint16_t src[80 * 80];
	for (int i = 0; i < 80 * 80; i++)
		src[i] = (uint16_t)(i + 1);
	for (int trans = 0; trans < 2; trans++) {
		blind_mat a = blind_op_a(trans, src, 80);
		uint16_t out[40 * FP16N_MR];
		fp16n_pack_a_ref(&a, 3, 5, 2, 40, out);
		for (int k = 0; k < 40; k++)
			for (int r = 0; r < FP16N_MR; r++)
				cr_assert_eq(
				    out[k * FP16N_MR + r],
				    r < 5 ? src[trans ? (2 + k) * 80 + 3 + r : (3 + r) * 80 + 2 + k]
				          : 0);
		blind_mat b = blind_op_b(trans, src, 80);
		static uint16_t outb[2 * 40 * FP16N_NR];
		fp16n_pack_b_ref(&b, 1, 40, 2, 70, outb);
		for (int q = 0; q < 2; q++)
			for (int k = 0; k < 40; k++)
				for (int c = 0; c < FP16N_NR; c++) {
					int n = q * FP16N_NR + c;
					cr_assert_eq(outb[(q * 40 + k) * FP16N_NR + c],
					             n < 70 ? src[trans ? (2 + n) * 80 + 1 + k
					                                : (1 + k) * 80 + 2 + n]
					                    : 0);
				}
	}
}

/* The real (AVX-512) fp16 packers against the plain-C ones, bit for bit over the whole output
 * buffer (pre-filled with the same junk: both must write exactly the same elements): both
 * transposes, odd leading dimensions, partial rows / columns / k, and a layout with neither
 * stride 1 (the fallback). */
Test(gemm_native, fp16_pack_vector_vs_ref)
{
	if (!cpu_avx512bw()) {
		printf("SKIPPED: avx512 needs avx512bw (the packers)\n");
		fflush(stdout);
		cr_skip_test("SKIPPED: avx512 needs avx512bw (the packers)");
	}
	enum { R = 300, LD = 337 };
	uint16_t *src = malloc((size_t)R * LD * 2);
	cr_assert(src);
	rng_state = 17;
	for (int i = 0; i < R * LD; i++)
		src[i] = (uint16_t)rng_u64();
	static const int64_t kcs[] = {1, 2, 7, 8, 31, 32, 33, 63, 64, 65, 100, 255, 256};
	static const int64_t colss[] = {1, 10, 31, 32, 33, 63, 64, 65, 96, 100, 127, 128, 129, 200};
	size_t cap = 5 * 256 * FP16N_NR + 64; /* B: 4 micro-panels; A: 5 of 8 rows */
	uint16_t *o1 = malloc(cap * 2), *o2 = malloc(cap * 2);
	cr_assert(o1 && o2);
	int runs = 0;
	for (int layout = 0; layout < 3; layout++) {
		/* 0: op = the array, 1: op = its transpose, 2: strides 2 and 2 * LD (neither 1) */
		blind_mat m = {src,
		               layout == 0   ? LD
		               : layout == 1 ? 1
		                             : 2 * LD,
		               layout == 0   ? 1
		               : layout == 1 ? LD
		                             : 2};
		for (size_t ki = 0; ki < sizeof kcs / sizeof kcs[0]; ki++)
			for (int64_t rows = 1; rows <= 5 * FP16N_MR; rows += rows < 12 ? 1 : 5) {
				int64_t kc = kcs[ki], m0 = (rows * 7 + (int64_t)ki) % 20,
				        k0 = (int64_t)ki * 3 % 17;
				for (size_t i = 0; i < cap; i++)
					o1[i] = o2[i] = (uint16_t)(0xa5a5u ^ i);
				fp16n_pack_a_panels_ref(&m, m0, rows, k0, kc, o1);
				amp_fp16n_pack_a_avx512(&m, m0, rows, k0, kc, o2);
				cr_assert_eq(memcmp(o1, o2, cap * 2), 0,
				             "A pack layout %d m0=%lld rows=%lld k0=%lld kc=%lld",
				             layout, (long long)m0, (long long)rows, (long long)k0,
				             (long long)kc);
				runs++;
			}
		for (size_t ki = 0; ki < sizeof kcs / sizeof kcs[0]; ki++)
			for (size_t ci = 0; ci < sizeof colss / sizeof colss[0]; ci++) {
				int64_t kc = kcs[ki], cols = colss[ci], k0 = (int64_t)ci * 5 % 23,
				        n0 = (int64_t)ki * 11 % 29;
				for (size_t i = 0; i < cap; i++)
					o1[i] = o2[i] = (uint16_t)(0x5a5au ^ i);
				fp16n_pack_b_ref(&m, k0, kc, n0, cols, o1);
				amp_fp16n_pack_b_avx512(&m, k0, kc, n0, cols, o2);
				cr_assert_eq(memcmp(o1, o2, cap * 2), 0,
				             "B pack layout %d k0=%lld kc=%lld n0=%lld cols=%lld",
				             layout, (long long)k0, (long long)kc, (long long)n0,
				             (long long)cols);
				runs++;
			}
	}
	printf("fp16 packers: %d AVX-512 packs bit-identical to the plain-C ones\n", runs);
	free(o1), free(o2), free(src);
}

/* The tdpbf16ps model against direct FP64 dot products of pairs (small integers: exact), and
 * DAZ on inputs. */
Test(gemm_native, tile_dp_bf16_model)
{
	uint16_t a[AMX_TILE_ELEMS], b[AMX_TILE_ELEMS];
	float c[256];
	rng_state = 3;
	for (int i = 0; i < AMX_TILE_ELEMS; i++) {
		a[i] = blind_f32_to_bf16((float)((int)(rng_u64() % 17) - 8));
		b[i] = blind_f32_to_bf16((float)((int)(rng_u64() % 17) - 8));
	}
	for (int i = 0; i < 256; i++)
		c[i] = (float)i;
	amx_tile_dp_bf16_ref(c, a, b);
	for (int m = 0; m < 16; m++)
		for (int n = 0; n < 16; n++) {
			double want = m * 16 + n;
			for (int k = 0; k < 32; k++)
				want += (double)blind_bf16_to_f32(a[m * 32 + k]) *
				        (double)blind_bf16_to_f32(b[(k / 2) * 32 + n * 2 + k % 2]);
			cr_assert_eq((double)c[m * 16 + n], want);
		}
	/* a bf16 subnormal input counts as zero */
	memset(a, 0, sizeof a);
	memset(b, 0, sizeof b);
	memset(c, 0, sizeof c);
	a[0] = 0x0001; /* 2^-133 */
	b[0] = 0x7f00; /* 2^127 */
	amx_tile_dp_bf16_ref(c, a, b);
	cr_assert_eq(c[0], 0.0f, "DAZ: a subnormal bf16 input is zero");
}

Test(gemm_native, fp16_fma_model)
{
	/* the double -> fp16 rounding: every finite half, and every midpoint (ties to even) */
	for (uint32_t h = 0; h < 0x7c00u; h++)
		for (uint32_t sg = 0; sg < 2; sg++) {
			uint16_t x = (uint16_t)(h | sg << 15);
			double f = (double)amp_f16_to_f32(x);
			cr_assert_eq(fp16n_from_double(f), x, "half %04x", x);
			double next = (double)amp_f16_to_f32((uint16_t)(x + 1));
			if (h + 1 < 0x7c00u) {
				uint16_t even = (h & 1u) ? (uint16_t)(x + 1) : x;
				cr_assert_eq(fp16n_from_double((f + next) / 2), even,
				             "midpoint above %04x", x);
			}
		}
	/* against float arithmetic where one rounding of an exact float result is the answer */
	rng_state = 5;
	for (int i = 0; i < 200000; i++) {
		uint16_t x = (uint16_t)rng_u64(), y = (uint16_t)rng_u64(), z = (uint16_t)rng_u64();
		float fx = amp_f16_to_f32(x), fy = amp_f16_to_f32(y), fz = amp_f16_to_f32(z);
		double exact = (double)fx * (double)fy + (double)fz;
		if (!isfinite(exact) || (double)(float)exact != exact)
			continue; /* the exact value is a float: one float rounding is then exact */
		uint16_t want = amp_f32_to_f16((float)exact);
		uint16_t got = fp16n_fma_ref(x, y, z);
		if ((want & 0x7c00u) == 0x7c00u && (want & 0x3ffu))
			cr_assert((got & 0x7c00u) == 0x7c00u && (got & 0x3ffu), "NaN expected");
		else
			cr_assert_eq(got, want, "fma(%a, %a, %a)", (double)fx, (double)fy,
			             (double)fz);
	}
	/* 3 (1 + 3 2^-10) = 3 + 4.5 2^-9 is halfway between two fp16 values (the even one below);
	 * + 2^-24 must round up, which an fp32 FMA followed by a rounding to fp16 gets wrong */
	uint16_t t = fp16n_fma_ref(amp_f32_to_f16(3.0f), amp_f32_to_f16(1.0f + 3.0f * 0x1p-10f),
	                           amp_f32_to_f16(0x1p-24f));
	cr_assert_eq(t, amp_f32_to_f16(3.0f + 5.0f * 0x1p-9f));
	t = fp16n_fma_ref(amp_f32_to_f16(3.0f), amp_f32_to_f16(1.0f + 3.0f * 0x1p-10f), 0);
	cr_assert_eq(t, amp_f32_to_f16(3.0f + 4.0f * 0x1p-9f), "a tie rounds to even");
}

/* ---- the models ------------------------------------------------------------------------------ */

Test(gemm_native, amx_model_vs_fp64)
{
	sweep(amx_model, &BF16, "amx-bf16 model", 1);
}

Test(gemm_native, fp16_model_vs_fp64)
{
	sweep(fp16n_model, &FP16, "avx512-fp16 model", 2);
	fp16_accuracy(fp16n_model, "avx512-fp16 model");
}

/* a == b bit for bit, except that any two NaNs agree: which payload survives NaN + NaN depends on
 * the operand order the compiler picked for the model's scalar sum. */
static int same_halves(const uint16_t *a, const uint16_t *b, int n, int bf16)
{
	for (int i = 0; i < n; i++) {
		uint16_t ea = bf16 ? 0x7f80u : 0x7c00u, ma = bf16 ? 0x7fu : 0x3ffu;
		int na = (a[i] & ea) == ea && (a[i] & ma), nb = (b[i] & ea) == ea && (b[i] & ma);
		if (a[i] != b[i] && !(na && nb))
			return 0;
	}
	return 1;
}

Test(gemm_native, unpacked_fallbacks_vs_fp64)
{
	sweep(amx_unpacked, &BF16, "amx-bf16 unpacked fallback", 3);
	sweep(fp16n_unpacked, &FP16, "avx512-fp16 unpacked fallback", 3);
}

/* The real stores (AVX-512, present on this class and the AMX/FP16 class) against the models'. */
Test(gemm_native, stores_vs_model)
{
	if (!cpu_avx512bw()) {
		printf("SKIPPED: avx512 needs avx512bw (the stores)\n");
		fflush(stdout);
		cr_skip_test("SKIPPED: avx512 needs avx512bw (the stores)");
	}
	static const uint32_t special[] = {0x7f800000u, 0xff800000u, 0x7fc00001u, 0xffa00000u,
	                                   0x00000001u, 0x80400000u, 0x7f7fffffu, 0x477fe000u,
	                                   0x47800000u, 0x3f808000u, 0x3f818000u, 0x387fc000u};
	int has_bf16 = cpu_avx512bf16();
	if (!has_bf16) {
		printf("SKIPPED: avx512-bf16 needs avx512_bf16 (the vcvtneps2bf16 store)\n");
		fflush(stdout);
	}
	_Alignas(64) float acc[AMX_ACC_ELEMS];
	rng_state = 11;
	for (int round = 0; round < 200; round++) {
		for (int i = 0; i < AMX_ACC_ELEMS; i++)
			acc[i] = rng_u64() % 8 == 0 ? blind_f32_of_bits(special[rng_u64() % 12])
			                            : blind_f32_of_bits((uint32_t)rng_u64());
		float beta = round % 3 == 0 ? 0.0f : round % 3 == 1 ? 1.0f : 0.37f;
		int64_t rows = 1 + (int64_t)(rng_u64() % 32), cols = 1 + (int64_t)(rng_u64() % 32);
		if (round % 5 == 0) /* whole blocks: the real stores' fast path under beta 0 */
			cols = 32;
		uint16_t c1[32 * 40], c2[32 * 40], c3[32 * 40];
		for (int i = 0; i < 32 * 40; i++)
			c1[i] = c2[i] = c3[i] = (uint16_t)rng_u64();
		amx_store_ref(acc, rows, cols, beta, c1, 40);
		amp_amx_store_avx512(acc, rows, cols, beta, c2, 40);
		cr_assert(same_halves(c1, c2, 32 * 40, 1), "bf16 store %lldx%lld beta %g",
		          (long long)rows, (long long)cols, (double)beta);
		float f1[32 * 40], f2[32 * 40];
		for (int i = 0; i < 32 * 40; i++)
			f1[i] = f2[i] = blind_f32_of_bits((uint32_t)rng_u64());
		amx_store_f32_ref(acc, rows, cols, beta, f1, 40);
		amp_amx_store_f32_avx512(acc, rows, cols, beta, f2, 40);
		for (int i = 0; i < 32 * 40; i++)
			cr_assert(blind_bits_of_f32(f1[i]) == blind_bits_of_f32(f2[i]) ||
			              (isnan(f1[i]) && isnan(f2[i])),
			          "acc32 store %lldx%lld beta %g: element %d", (long long)rows,
			          (long long)cols, (double)beta, i);
		if (has_bf16) {
			/* its sums come from the tiles, which flush subnormals to zero (so does the
			 * model's tdpbf16ps): a C term alone can make a subnormal lane */
			_Alignas(64) float flushed[AMX_ACC_ELEMS];
			for (int i = 0; i < AMX_ACC_ELEMS; i++)
				flushed[i] = fpclassify(acc[i]) == FP_SUBNORMAL ? copysignf(0.0f, acc[i])
				                                                : acc[i];
			for (int i = 0; i < 32 * 40; i++)
				c1[i] = c2[i] = c3[i];
			amx_store_ref(flushed, rows, cols, beta, c1, 40);
			amp_amx_store_avx512bf16(flushed, rows, cols, beta, c2, 40);
			cr_assert(same_halves(c1, c2, 32 * 40, 1),
			          "bf16 store (vcvtneps2bf16) %lldx%lld beta %g", (long long)rows,
			          (long long)cols, (double)beta);
		}
		rows = 1 + (int64_t)(rng_u64() % 8), cols = 1 + (int64_t)(rng_u64() % 64);
		uint16_t d1[8 * 70], d2[8 * 70];
		for (int i = 0; i < 8 * 70; i++)
			d1[i] = d2[i] = (uint16_t)rng_u64();
		fp16n_store_ref(acc, rows, cols, beta, d1, 70);
		amp_fp16n_store_avx512(acc, rows, cols, beta, d2, 70);
		cr_assert(same_halves(d1, d2, 8 * 70, 0), "fp16 store %lldx%lld beta %g",
		          (long long)rows, (long long)cols, (double)beta);
	}
}

/* The real loop nests as compiled for the kernels (vectorised packers, real stores) on the
 * models' micro-kernels: bit-identical to the models on integer data and on random data
 * (no NaN: the same operations in the same order). */
Test(gemm_native, real_loop_nests_vs_models)
{
	if (!cpu_avx512bw()) {
		printf("SKIPPED: avx512 needs avx512bw (the loop nests)\n");
		fflush(stdout);
		cr_skip_test("SKIPPED: avx512 needs avx512bw (the loop nests)");
	}
	same_bits(amp_amx_gemm_model_avx512, amx_model, &BF16, "amx-bf16 loop nest (avx512)");
	same_bits(amp_fp16n_gemm_model_avx512, fp16n_model, &FP16,
	          "avx512-fp16 loop nest (avx512)");
	static const int64_t shapes[][3] = {{33, 100, 784}, {17, 520, 40}, {100, 31, 600}};
	rng_state = 13;
	for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
		for (int combo = 0; combo < 4; combo++)
			for (int bf = 0; bf < 2; bf++) {
				problem p;
				problem_make(&p, bf ? &BF16 : &FP16, shapes[s][0], shapes[s][1],
				             shapes[s][2], combo & 1, combo >> 1, 0.5f, -1.0f, 0);
				problem_run(&p, bf ? amx_model : fp16n_model, NULL);
				uint16_t *want = malloc((size_t)(p.M * p.ldc) * 2);
				cr_assert(want);
				memcpy(want, p.C, (size_t)(p.M * p.ldc) * 2);
				problem_run(&p,
				            bf ? amp_amx_gemm_model_avx512
				               : amp_fp16n_gemm_model_avx512,
				            NULL);
				cr_assert_eq(memcmp(want, p.C, (size_t)(p.M * p.ldc) * 2), 0,
				             "%s loop nest %lldx%lldx%lld ta=%d tb=%d differs from "
				             "the model",
				             bf ? "amx-bf16" : "avx512-fp16", (long long)p.M,
				             (long long)p.N, (long long)p.K, p.ta, p.tb);
				free(want);
				problem_free(&p);
			}
}

/* x w^T with fewer rows than columns runs as its transpose (amx_gemm_drive): the same bits as
 * the problem posed the other way round (more rows than columns: not swapped), transposed, on
 * random data, with stats of the whole C, for the model and (with AMX) the real kernel. */
static void swap_same_bits(gemm_fn fn, const char *what)
{
	static const int64_t shapes[][3] = {{33, 100, 784}, {1, 40, 7}, {31, 1000, 65}, {128, 300, 256}};
	rng_state = 17;
	for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
		int64_t M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
		uint16_t *x = malloc((size_t)(M * K) * 2), *w = malloc((size_t)(N * K) * 2);
		uint16_t *c1 = malloc((size_t)(M * N) * 2), *c2 = malloc((size_t)(M * N) * 2);
		cr_assert(x && w && c1 && c2);
		for (int64_t i = 0; i < M * K; i++)
			x[i] = BF16.from_f32(rng_uniform(-1.0f, 1.0f));
		for (int64_t i = 0; i < N * K; i++)
			w[i] = BF16.from_f32(rng_uniform(-1.0f, 1.0f));
		amp_stats s1, s2;
		fn(0, 1, M, N, K, x, K, w, K, 0.0f, c1, N, &s1); /* M < N: swapped */
		fn(0, 1, N, M, K, w, K, x, K, 0.0f, c2, M, &s2); /* N > M: as posed */
		int64_t diff = 0;
		for (int64_t i = 0; i < M; i++)
			for (int64_t j = 0; j < N; j++)
				diff += c1[i * N + j] != c2[j * M + i];
		cr_assert_eq(diff, 0, "%s %lldx%lldx%lld: %lld elements differ from the transposed "
		             "problem", what, (long long)M, (long long)N, (long long)K, (long long)diff);
		cr_assert(s1.count == s2.count && s1.nan == s2.nan && s1.min == s2.min && s1.max == s2.max &&
		              s1.count == (uint64_t)(M * N),
		          "%s: the statistics of the swapped C", what);
		free(x), free(w), free(c1), free(c2);
	}
}

/* check on each form of the AMX GEMM: the model, the real loop nest on the model's
 * micro-kernel (AVX-512 BW), the tiles (AMX-BF16, else SKIPPED with what). */
static void on_amx_forms(void (*check)(gemm_fn fn, const char *what), const char *what)
{
	check(amx_model, "amx-bf16 model");
	if (cpu_avx512bw())
		check(amp_amx_gemm_model_avx512, "amx-bf16 loop nest (avx512)");
	if (amp_amx_init() == 0)
		check(amp_gemm_bf16_amx, "amx-bf16 kernel");
	else {
		printf("SKIPPED: amx-bf16 needs amx_bf16 (the kernel, %s)\n", what);
		fflush(stdout);
	}
}

Test(gemm_native, amx_swapped_same_bits)
{
	on_amx_forms(swap_same_bits, "swapped x w^T");
}

/* The first Ms x Ns block of an Mb x Nb product (same operands, same k) has the bits of the
 * Ms x Ns product, on random data: the AMX loop nest picks its k panels (long ones when N fits
 * one 32-column block), its loop order (k panels inside row blocks when the sums outgrow L2),
 * reads A in place or copies it, and computes two of a block's four tiles or all of them, by
 * the shape; none of that may change a sum. */
static void blocking_same_bits(gemm_fn fn, const char *what)
{
	/* Ms, Ns, Mb, Nb, K, ta, tb */
	static const int64_t cases[][7] = {
	    {64, 20, 64, 40, 2600, 0, 0}, /* long panels (2048 + 552), A in place then copied */
	    {64, 20, 64, 40, 2600, 0, 1}, /* the same, B^T */
	    {10, 70, 40, 70, 300, 1, 0},  /* a block of 10 rows: two tiles */
	    {20, 64, 40, 64, 320, 0, 1},  /* x w^T swapped: N' = 20 takes the long panel */
	    {96, 7, 96, 33, 64, 0, 0},    /* 7 columns, the last block of 33 one column */
	    /* 192 x 720 sums do not fit AMX_ACC_FIT: row blocks run all k panels in turn, B is
	     * packed for all k in two column panels (672 + 48) */
	    {64, 48, 192, 720, 600, 0, 0},
	    {48, 64, 192, 720, 600, 0, 1}, /* swapped: 720 x 192 */
	    {40, 33, 192, 720, 600, 1, 0},
	};
	rng_state = 23;
	for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
		int64_t Ms = cases[c][0], Ns = cases[c][1], Mb = cases[c][2], Nb = cases[c][3];
		int64_t K = cases[c][4];
		int ta = (int)cases[c][5], tb = (int)cases[c][6];
		int64_t lda = (ta ? Mb : K) + LD_PAD, ldb = (tb ? K : Nb) + LD_PAD;
		int64_t na = (ta ? K : Mb) * lda, nb = (tb ? Nb : K) * ldb;
		uint16_t *A = malloc((size_t)na * 2), *B = malloc((size_t)nb * 2);
		uint16_t *Cb = malloc((size_t)(Mb * Nb) * 2), *Cs = malloc((size_t)(Ms * Ns) * 2);
		cr_assert(A && B && Cb && Cs);
		for (int64_t i = 0; i < na; i++)
			A[i] = blind_f32_to_bf16(rng_uniform(-1.0f, 1.0f));
		for (int64_t i = 0; i < nb; i++)
			B[i] = blind_f32_to_bf16(rng_uniform(-1.0f, 1.0f));
		fn(ta, tb, Mb, Nb, K, A, lda, B, ldb, 0.0f, Cb, Nb, NULL);
		fn(ta, tb, Ms, Ns, K, A, lda, B, ldb, 0.0f, Cs, Ns, NULL);
		for (int64_t i = 0; i < Ms; i++)
			for (int64_t j = 0; j < Ns; j++)
				cr_assert_eq(Cs[i * Ns + j], Cb[i * Nb + j],
				             "%s: C[%lld][%lld] of %lldx%lldx%lld ta=%d tb=%d is %#x, "
				             "of %lldx%lldx%lld %#x",
				             what, (long long)i, (long long)j, (long long)Ms,
				             (long long)Ns, (long long)K, ta, tb, Cs[i * Ns + j],
				             (long long)Mb, (long long)Nb, (long long)K,
				             Cb[i * Nb + j]);
		free(A), free(B), free(Cb), free(Cs);
	}
}

Test(gemm_native, amx_blocking_same_bits)
{
	on_amx_forms(blocking_same_bits, "blocking");
}

/* Rows of A contiguous in k are read in place by the FP16 loop nest, or copied when their
 * stride is a multiple of 1024 halves and N >= 256 (fp16n_gemm_drive): the same values either
 * way, so the same bits.  The same A at strides 1024 and 2048 (copied) and 1000 (in place), on
 * random data, with beta 0 and beta 1. */
static void a_stride_same_bits(gemm_fn fn, const char *what)
{
	static const int64_t strides[] = {1000, 1024, 2048};
	const int64_t M = 37, N = 300, K = 200;
	rng_state = 29;
	uint16_t *a[3], *b = malloc((size_t)(K * N) * 2), *c[3], *c0 = malloc((size_t)(M * N) * 2);
	cr_assert(b && c0);
	for (int64_t i = 0; i < K * N; i++)
		b[i] = FP16.from_f32(rng_uniform(-1.0f, 1.0f));
	for (int64_t i = 0; i < M * N; i++)
		c0[i] = FP16.from_f32(rng_uniform(-1.0f, 1.0f));
	for (int s = 0; s < 3; s++) {
		a[s] = calloc((size_t)(M * strides[s]), 2);
		c[s] = malloc((size_t)(M * N) * 2);
		cr_assert(a[s] && c[s]);
	}
	for (int64_t i = 0; i < M; i++)
		for (int64_t k = 0; k < K; k++) {
			uint16_t v = FP16.from_f32(rng_uniform(-1.0f, 1.0f));
			for (int s = 0; s < 3; s++)
				a[s][i * strides[s] + k] = v;
		}
	for (int beta = 0; beta < 2; beta++) {
		for (int s = 0; s < 3; s++) {
			memcpy(c[s], c0, (size_t)(M * N) * 2);
			fn(0, 0, M, N, K, a[s], strides[s], b, N, (float)beta, c[s], N, NULL);
		}
		for (int s = 1; s < 3; s++)
			cr_assert_eq(
			    memcmp(c[0], c[s], (size_t)(M * N) * 2), 0,
			    "%s: A at stride %lld (copied) differs from A at stride %lld (in "
			    "place), beta %d",
			    what, (long long)strides[s], (long long)strides[0], beta);
	}
	for (int s = 0; s < 3; s++)
		free(a[s]), free(c[s]);
	free(b), free(c0);
}

Test(gemm_native, fp16_a_in_place_or_copied_same_bits)
{
	a_stride_same_bits(fp16n_model, "avx512-fp16 model");
	if (cpu_avx512bw()) {
		a_stride_same_bits(amp_fp16n_gemm_model_avx512, "avx512-fp16 loop nest (avx512)");
	} else {
		printf("SKIPPED: avx512 needs avx512bw (the loop nest, A strides)\n");
		fflush(stdout);
	}
	if (cpu_leaf7_edx(23) && amp_fp16n_cpu_ok()) {
		a_stride_same_bits(amp_gemm_f16_avx512fp16, "avx512-fp16 kernel");
	} else {
		printf("SKIPPED: avx512-fp16 needs avx512_fp16 (the kernel, A strides)\n");
		fflush(stdout);
	}
}

/* x w^T with few columns runs as dot products along k (fp16n_dot_fits): on random data, where
 * another order of the sums would show, fn gives fp16n_dot_ref's bits, K around the lanes' (32),
 * blocks' (24 steps) and pairs' (48 steps) boundaries, rows and columns past the kernel's 4 x 5
 * tile, N up to 24, beta 0 and 0.3, with an Inf and a NaN in A on some; acc32 (when given) its FP32
 * sums; and the FP16 accuracy targets hold for K = 4096. */
static void dot_same_bits(gemm_fn fn,
                          void (*acc32)(int, int, int64_t, int64_t, int64_t, const uint16_t *,
                                        int64_t, const uint16_t *, int64_t, float, float *,
                                        int64_t),
                          const char *what)
{
	static const int64_t ks[] = {512, 513, 767, 768, 769, 1535, 1536, 1537, 3000};
	static const int64_t mn[][2] = {{1, 1},  {4, 5},  {9, 16}, {33, 10},
	                                {7, 23}, {6, 24}, {2, 12}};
	int runs = 0;
	rng_state = 19;
	for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++)
		for (size_t f = 0; f < sizeof mn / sizeof mn[0]; f++, runs++) {
			problem p;
			float beta =
			    (i + f) % 2 ? 0.3f : 0.0f; /* beta C inexact: a fused add shows */
			problem_make(&p, &FP16, mn[f][0], mn[f][1], ks[i], 0, 1, beta, -1.0f, 0);
			cr_assert(fp16n_dot_fits(0, 1, p.N, p.K));
			if (f == 3 && i % 3 == 0) { /* row 1: +Inf; row 2: a NaN */
				p.A[1 * p.lda + ks[i] / 2] = 0x7c00u;
				p.A[2 * p.lda + 5] = 0x7e00u;
			}
			uint16_t *want = malloc((size_t)(p.M * p.ldc) * 2);
			cr_assert(want);
			memcpy(want, p.C0, (size_t)(p.M * p.ldc) * 2);
			fp16n_dot_ref(p.M, p.N, p.K, p.A, p.lda, p.B, p.ldb, p.beta, want, p.ldc,
			              0);
			problem_run(&p, fn, NULL);
			cr_assert(same_halves(want, p.C, (int)(p.M * p.ldc), 0),
			          "%s %lldx%lldx%lld beta %g: not the dot products' bits", what,
			          (long long)p.M, (long long)p.N, (long long)p.K, (double)p.beta);
			if (acc32) {
				float *c32 = malloc((size_t)(p.M * p.ldc) * 4);
				float *w32 = malloc((size_t)(p.M * p.ldc) * 4);
				cr_assert(c32 && w32);
				for (int64_t e = 0; e < p.M * p.ldc; e++)
					c32[e] = w32[e] = amp_f16_to_f32(p.C0[e]);
				fp16n_dot_ref(p.M, p.N, p.K, p.A, p.lda, p.B, p.ldb, p.beta, w32,
				              p.ldc, 1);
				acc32(0, 1, p.M, p.N, p.K, p.A, p.lda, p.B, p.ldb, p.beta, c32,
				      p.ldc);
				for (int64_t e = 0; e < p.M * p.ldc; e++)
					cr_assert(
					    (isnan(c32[e]) && isnan(w32[e])) ||
					        memcmp(&c32[e], &w32[e], 4) == 0,
					    "%s acc32 %lldx%lldx%lld: element %lld not the dot "
					    "products' sum",
					    what, (long long)p.M, (long long)p.N, (long long)p.K,
					    (long long)e);
				free(c32), free(w32);
			}
			free(want);
			problem_free(&p);
		}
	for (int pos = 0; pos < 2; pos++) {
		problem p;
		errs e = {0};
		rng_state = 23;
		problem_make(&p, &FP16, 40, 10, 4096, 0, 1, pos ? 1.0f : 0.0f, pos ? 0.5f : -1.0f,
		             0);
		problem_run(&p, fn, NULL);
		problem_errors(&p, &FP16, &e);
		if (pos)
			cr_assert_leq(e.max_rel, 2e-3, "%s 40x10x4096 [0.5,1): max rel %.3g", what,
			              e.max_rel);
		else
			cr_assert_leq(sqrt(e.diff2 / e.ref2), 2e-3,
			              "%s 40x10x4096 [-1,1): norm-wise %.3g", what,
			              sqrt(e.diff2 / e.ref2));
		problem_free(&p);
	}
	printf("%s: %d narrow x w^T problems bit-identical to the dot products' model\n", what,
	       runs);
}

Test(gemm_native, fp16_narrow_dot_products)
{
	dot_same_bits(fp16n_model, NULL, "avx512-fp16 model");
	if (cpu_avx512bw()) {
		dot_same_bits(amp_fp16n_gemm_model_avx512, NULL, "avx512-fp16 loop nest (avx512)");
	} else {
		printf("SKIPPED: avx512 needs avx512bw (the loop nest, dot products)\n");
		fflush(stdout);
	}
	/* the entry points: the real kernel, or without AVX512-FP16 the model behind them */
	dot_same_bits(amp_gemm_f16_avx512fp16, amp_gemm_f16_avx512fp16_acc32,
	              amp_fp16n_cpu_ok() ? "avx512-fp16 kernel"
	                                 : "avx512-fp16 entry point (model)");
	if (!amp_fp16n_cpu_ok()) {
		printf("SKIPPED: avx512-fp16 needs avx512_fp16 (the kernel, dot products)\n");
		fflush(stdout);
	}
}

/* ---- the real kernels --------------------------------------------------------------------------
 */

Test(gemm_native, amx_real)
{
	int has = cpu_leaf7_edx(22) && cpu_leaf7_edx(24) && (xcr0() & (3u << 17)) == (3u << 17) &&
	          amp_amx_init() == 0;
	if (!has) {
		cr_assert_neq(amp_amx_init(), 0,
		              "amp_amx_init() succeeded on a CPU without AMX-BF16");
		printf("SKIPPED: amx-bf16 needs amx_bf16\n");
		fflush(stdout);
		cr_skip_test("SKIPPED: amx-bf16 needs amx_bf16");
	}
	cr_assert_eq(amp_amx_init(), 0, "a second amp_amx_init() must agree");
	sweep(amp_gemm_bf16_amx, &BF16, "amx-bf16 kernel", 1);
	same_bits(amp_gemm_bf16_amx, amx_model, &BF16, "amx-bf16 kernel");
}

Test(gemm_native, fp16_real)
{
	if (!cpu_leaf7_edx(23) || !amp_fp16n_cpu_ok()) {
		printf("SKIPPED: avx512-fp16 needs avx512_fp16\n");
		fflush(stdout);
		cr_skip_test("SKIPPED: avx512-fp16 needs avx512_fp16");
	}
	sweep(amp_gemm_f16_avx512fp16, &FP16, "avx512-fp16 kernel", 1);
	fp16_accuracy(amp_gemm_f16_avx512fp16, "avx512-fp16 kernel");
	/* the same operations in the same order: bit-identical to the model on any data */
	same_bits(amp_gemm_f16_avx512fp16, fp16n_model, &FP16, "avx512-fp16 kernel");
	fp16_same_bits_random(amp_gemm_f16_avx512fp16, fp16n_model, "avx512-fp16 kernel");
}

/* The statistics of the models' C, and the kernels' entry points on this CPU (which run the
 * model's micro-kernel where the features are missing). */
Test(gemm_native, models_stats_and_entry_points)
{
	same_bits(amp_gemm_f16_avx512fp16, fp16n_model, &FP16, "avx512-fp16 entry point");
	if (amp_amx_init() != 0)
		same_bits(amp_gemm_bf16_amx, amx_model, &BF16, "amx-bf16 entry point (model)");
}

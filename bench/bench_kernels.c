/* bench_kernels.c — the runtime's GEMMs and memory-bound kernels, held against yardsticks in one
 * run: OpenBLAS cblas_sgemm (dlopen()ed, never linked; "yardstick unavailable" without it) for
 * the FP32 GEMM, glibc memcpy bandwidth for the elementwise kernels, and the fp16 and bf16
 * GEMMs as ratios to the runtime's own fp32 GEMM, measured in the same rounds of interleaved
 * bursts (see WARM_S).  Says which kernel paths ran and which this CPU cannot run, and why.
 * About 20 s on 2 cores.  Usage: bench_kernels [--quick]
 */
#include <cpuid.h>
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "amp_half.h"
#include "amp/amp.h"
#include "kernels/kernels.h"

/* ---- timing and data ------------------------------------------------------------------------ */

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof *v, cmp_double);
	return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static uint64_t rng_state = 0x853c49e6748fea9bull;

static float rng_uniform(float lo, float hi)
{
	uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	z ^= z >> 31;
	return lo + (hi - lo) * ((float)(z >> 40) * 0x1p-24f);
}

static void *xmalloc(size_t n)
{
	void *p = aligned_alloc(64, (n + 63) / 64 * 64);
	if (p == NULL) {
		fprintf(stderr, "bench_kernels: out of memory (%zu bytes)\n", n);
		exit(1);
	}
	return p;
}

/* ---- the yardstick ---------------------------------------------------------------------------- */

typedef void (*sgemm_fn)(int order, int ta, int tb, int M, int N, int K, float alpha,
                         const float *A, int lda, const float *B, int ldb, float beta, float *C,
                         int ldc);
enum { CBLAS_ROW_MAJOR = 101, CBLAS_NO_TRANS = 111, CBLAS_TRANS = 112 };

static sgemm_fn yard_sgemm;
static void (*yard_set_threads)(int);
static char yard_name[128] = "yardstick unavailable";

static int cpu_has_avx512(void)
{
	return amp_kernels_has(AMP_ISA_AVX512);
}

/* cpuid leaf 7 EDX bit 23: native fp16 arithmetic (vfmadd231ph and friends). */
static int cpu_has_avx512fp16(void)
{
	unsigned a, b, c, d;
	if (__get_cpuid_max(0, NULL) < 7 || !__get_cpuid_count(7, 0, &a, &b, &c, &d))
		return 0;
	return (d >> 23) & 1;
}

static void yard_open(void)
{
	static const char *const names[] = {"libopenblas.so.0", "libopenblas.so",
	                                    "libopenblasp.so.0"};
	void *h = NULL;
	for (size_t i = 0; h == NULL && i < sizeof names / sizeof *names; i++)
		h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
	if (h == NULL)
		return;
	*(void **)&yard_sgemm = dlsym(h, "cblas_sgemm");
	*(void **)&yard_set_threads = dlsym(h, "openblas_set_num_threads");
	char *(*corename)(void);
	*(void **)&corename = dlsym(h, "openblas_get_corename");
	if (yard_sgemm == NULL)
		return;
	if (yard_set_threads)
		yard_set_threads(1);
	snprintf(yard_name, sizeof yard_name, "OpenBLAS cblas_sgemm, 1 thread, core %s",
	         corename ? corename() : "?");
}

/* ---- GEMM ------------------------------------------------------------------------------------- */

typedef struct shape {
	const char *what;
	int ta, tb;
	int64_t M, N, K;
} shape;

static const shape shapes[] = {
	{"square", 0, 0, 256, 256, 256},
	{"square", 0, 0, 512, 512, 512},
	{"square", 0, 0, 1024, 1024, 1024},
	{"mlp fc1 fwd", 0, 1, 128, 1024, 784},
	{"mlp fc1 dX", 0, 0, 128, 784, 1024},
	{"mlp fc1 dW", 1, 0, 1024, 784, 128},
	{"mlp fc2 fwd", 0, 1, 128, 1024, 1024},
	{"mlp fc2 dX", 0, 0, 128, 1024, 1024},
	{"mlp fc2 dW", 1, 0, 1024, 1024, 128},
	{"mlp fc3 fwd", 0, 1, 128, 10, 1024},
	{"mlp fc3 dX", 0, 0, 128, 1024, 10},
	{"mlp fc3 dW", 1, 0, 10, 1024, 128},
	{"im2col", 0, 0, 784, 32, 288},
	{"conv fwd", 0, 0, 32, 784, 288},
	{"conv dW", 0, 1, 32, 288, 784},
	{"conv dcols", 1, 0, 288, 784, 32},
	{"ragged", 0, 0, 1000, 1000, 1000},
	{"ragged", 0, 0, 127, 257, 511},
	{"ragged", 1, 1, 127, 257, 511},
};

/* Elements sampled for the FP64 error check. */
#define ERR_SAMPLES 4096

/* max |C - R| / max |R| over sampled (i, j), R in FP64 from the operands as given. */
static double gemm_err_f32(const shape *s, const float *A, const float *B, const float *C)
{
	int64_t M = s->M, N = s->N, K = s->K, lda = s->ta ? M : K, ldb = s->tb ? K : N;
	double maxd = 0.0, maxr = 0.0;
	uint64_t saved = rng_state;
	for (int t = 0; t < ERR_SAMPLES; t++) {
		int64_t i = (int64_t)rng_uniform(0.0f, (float)M), j = (int64_t)rng_uniform(0.0f, (float)N);
		i = i < M ? i : M - 1;
		j = j < N ? j : N - 1;
		double r = 0.0;
		for (int64_t k = 0; k < K; k++)
			r += (double)(s->ta ? A[k * lda + i] : A[i * lda + k]) *
			     (double)(s->tb ? B[j * ldb + k] : B[k * ldb + j]);
		maxd = fmax(maxd, fabs((double)C[i * N + j] - r));
		maxr = fmax(maxr, fabs(r));
	}
	rng_state = saved;
	return maxr > 0.0 ? maxd / maxr : maxd;
}

static double gemm_err_f16(const shape *s, const uint16_t *A, const uint16_t *B, const uint16_t *C)
{
	int64_t M = s->M, N = s->N, K = s->K, lda = s->ta ? M : K, ldb = s->tb ? K : N;
	double maxd = 0.0, maxr = 0.0;
	uint64_t saved = rng_state;
	for (int t = 0; t < ERR_SAMPLES; t++) {
		int64_t i = (int64_t)rng_uniform(0.0f, (float)M), j = (int64_t)rng_uniform(0.0f, (float)N);
		i = i < M ? i : M - 1;
		j = j < N ? j : N - 1;
		double r = 0.0;
		for (int64_t k = 0; k < K; k++)
			r += (double)amp_f16_to_f32(s->ta ? A[k * lda + i] : A[i * lda + k]) *
			     (double)amp_f16_to_f32(s->tb ? B[j * ldb + k] : B[k * ldb + j]);
		maxd = fmax(maxd, fabs((double)amp_f16_to_f32(C[i * N + j]) - r));
		maxr = fmax(maxr, fabs(r));
	}
	rng_state = saved;
	return maxr > 0.0 ? maxd / maxr : maxd;
}

static double gemm_err_bf16(const shape *s, const uint16_t *A, const uint16_t *B,
                           const uint16_t *C)
{
	int64_t M = s->M, N = s->N, K = s->K, lda = s->ta ? M : K, ldb = s->tb ? K : N;
	double maxd = 0.0, maxr = 0.0;
	uint64_t saved = rng_state;
	for (int t = 0; t < ERR_SAMPLES; t++) {
		int64_t i = (int64_t)rng_uniform(0.0f, (float)M), j = (int64_t)rng_uniform(0.0f, (float)N);
		i = i < M ? i : M - 1;
		j = j < N ? j : N - 1;
		double r = 0.0;
		for (int64_t k = 0; k < K; k++)
			r += (double)amp_half_bf16_to_f32(s->ta ? A[k * lda + i] : A[i * lda + k]) *
			     (double)amp_half_bf16_to_f32(s->tb ? B[j * ldb + k] : B[k * ldb + j]);
		maxd = fmax(maxd, fabs((double)amp_half_bf16_to_f32(C[i * N + j]) - r));
		maxr = fmax(maxr, fabs(r));
	}
	rng_state = saved;
	return maxr > 0.0 ? maxd / maxr : maxd;
}

enum { V_F32, V_F16, V_BF16, V_YARD, V_F32_T2, V_COUNT };

/* Each variant runs in bursts, the variants taking turns round after round: untimed calls
 * until the burst is WARM_S old, then the timed calls, whose median is the burst's figure; the
 * median over the rounds is the shape's.  Why not single calls in turn, as before: a GEMM right
 * after another kernel runs at a pace that other kernel left, for several ms.  Measured on the
 * Intel class (1024x784x128 tn, fp16 calls one after another right after one fp32 GEMM): 252
 * GFLOP/s in the first call, 262-268 in the next four, 276-283 in the five after, then 296-309
 * from about 7 ms on, which fp16 calls alone hold from the start; a scalar dependency chain
 * timed right after the fp32 GEMM runs at its usual speed, and cache state does not explain it
 * (small fp32 GEMMs in L1 in between slow fp16 as much, a 3 MB memset less).  Single calls in
 * turn thus measured fp16 and bf16 at the pace fp32 left (the smallest fp16 / fp32 ratio on
 * the mlp shapes 1.54-1.65 so, 1.73-1.86 in bursts). */
#define WARM_S 0.010

/* The smallest bf16 / f32 and f16 / f32 ratios of each shape class, and the 1024^3 ones. */
static const char *const classes[] = {"square", "mlp", "im2col/conv", "ragged"};
#define N_CLASSES 4
static double class_min[N_CLASSES] = {1e9, 1e9, 1e9, 1e9};
static double class_min16[N_CLASSES] = {1e9, 1e9, 1e9, 1e9};
/* the shapes that gave them ("mlp fc3 fwd 128x10x1024 nt") */
static char class_at[N_CLASSES][64], class_at16[N_CLASSES][64];
static double big_bf16, big_f16;
/* The figure profiler/finalize.c's half_engines[] keeps for the emulated-half advice: the
 * smallest ratio over the square shapes and the mlp shapes with every dimension >= 128 (the
 * 10-wide classifier head is bound by its output, not by the engine). */
static double advice_bf16 = 1e9, advice_f16 = 1e9;
static double max_err_bf16;

static int class_of(const char *what)
{
	if (strncmp(what, "square", 6) == 0)
		return 0;
	if (strncmp(what, "mlp", 3) == 0)
		return 1;
	if (strncmp(what, "ragged", 6) == 0)
		return 3;
	return 2;
}

static const char *met(int ok)
{
	return ok ? "met" : "NOT met";
}

/* The smallest ratio of each class and the goals of the engine that ran: AMX-BF16 >= 6x FP32
 * on 1024^3 and >= 3x on the mlp shapes, AVX512-BF16 >= 1.7x everywhere; native FP16 >= 1.8x
 * on the square and mlp shapes, >= 1.5x on the ragged ones (no goal for FP16 storage on FP32
 * arithmetic). */
static void goals_summary(void)
{
	amp_engine eb = amp_kernels_gemm_engine(AMP_BF16), e16 = amp_kernels_gemm_engine(AMP_F16);
	printf("\nbf16 GEMM / fp32 GEMM, smallest ratio per shape class (bf16 engine %s):\n",
	       amp_engine_name(eb));
	for (int c = 0; c < N_CLASSES; c++)
		printf("  %-12s %5.2f  (%s)\n", classes[c], class_min[c], class_at[c]);
	if (eb == AMP_ENGINE_AMX_BF16) {
		printf(
		    "  goal (amx-bf16): 1024^3 >= 6.00: %.3f, %s; mlp shapes >= 3.00: %.3f (%s), "
		    "%s\n",
		    big_bf16, met(big_bf16 >= 6.0), class_min[1], class_at[1],
		    met(class_min[1] >= 3.0));
	} else if (eb == AMP_ENGINE_AVX512_BF16) {
		double lo = 1e9;
		for (int c = 0; c < N_CLASSES; c++)
			lo = fmin(lo, class_min[c]);
		printf("  goal (avx512-bf16 without AMX): every class >= 1.70: %.3f, %s\n", lo,
		       met(lo >= 1.7));
	} else if (amp_gemm_engine_note(AMP_BF16)) {
		/* the CPU has AVX512-BF16 but auto leaves it out: the goal is out of reach here */
		printf("  goal (avx512-bf16 without AMX): every class >= 1.70: NOT met: %s\n",
		       amp_gemm_engine_note(AMP_BF16));
	}
	printf("  the advice's figure (smallest on square and mlp shapes >= 128, finalize.c "
	       "half_engines[]): %.2f\n", advice_bf16);
	printf("fp16 GEMM / fp32 GEMM, smallest ratio per shape class (fp16 engine %s):\n",
	       amp_engine_name(e16));
	for (int c = 0; c < N_CLASSES; c++)
		printf("  %-12s %5.2f  (%s)\n", classes[c], class_min16[c], class_at16[c]);
	if (e16 == AMP_ENGINE_AVX512_FP16) {
		int lo = class_min16[1] < class_min16[0];
		double sq = class_min16[lo];
		printf(
		    "  goal (avx512-fp16): square and mlp >= 1.80: %.3f (%s), %s; ragged >= 1.50: "
		    "%.3f, %s (1024^3: %.3f)\n",
		    sq, class_at16[lo], met(sq >= 1.8), class_min16[3], met(class_min16[3] >= 1.5),
		    big_f16);
		printf("  the advice's figure (as for bf16): %.2f\n", advice_f16);
	} else {
		printf("  no goal: fp16 here is storage with %s arithmetic\n", amp_engine_name(e16));
	}
}

/* The operands of one shape, in fp32, fp16 and bf16. */
typedef struct gemm_args {
	const shape *s;
	int64_t M, N, K, lda, ldb;
	float *A, *B, *C, *C2;
	uint16_t *Ah, *Bh, *Ch, *Ab, *Bb, *Cb;
} gemm_args;

/* One call of variant v (the caller set the thread count). */
static void run_variant(const gemm_args *g, int v)
{
	const shape *s = g->s;
	switch (v) {
	case V_F32:
		amp_gemm_f32(s->ta, s->tb, g->M, g->N, g->K, g->A, g->lda, g->B, g->ldb, 0.0f, g->C,
		             g->N);
		break;
	case V_F16:
		amp_gemm_f16(s->ta, s->tb, g->M, g->N, g->K, g->Ah, g->lda, g->Bh, g->ldb, 0.0f,
		             g->Ch, g->N);
		break;
	case V_BF16:
		amp_gemm_bf16(s->ta, s->tb, g->M, g->N, g->K, g->Ab, g->lda, g->Bb, g->ldb, 0.0f,
		              g->Cb, g->N);
		break;
	case V_YARD:
		yard_sgemm(CBLAS_ROW_MAJOR, s->ta ? CBLAS_TRANS : CBLAS_NO_TRANS,
		           s->tb ? CBLAS_TRANS : CBLAS_NO_TRANS, (int)g->M, (int)g->N, (int)g->K,
		           1.0f, g->A, (int)g->lda, g->B, (int)g->ldb, 0.0f, g->C2, (int)g->N);
		break;
	default:
		amp_gemm_f32(s->ta, s->tb, g->M, g->N, g->K, g->A, g->lda, g->B, g->ldb, 0.0f,
		             g->C2, g->N);
		break;
	}
}

static void bench_gemm(const shape *s, double budget_s, int rounds)
{
	int64_t M = s->M, N = s->N, K = s->K;
	int64_t lda = s->ta ? M : K, ldb = s->tb ? K : N;
	size_t na = (size_t)(M * K), nb = (size_t)(K * N), nc = (size_t)(M * N);
	float *A = xmalloc(na * 4), *B = xmalloc(nb * 4), *C = xmalloc(nc * 4), *C2 = xmalloc(nc * 4);
	uint16_t *Ah = xmalloc(na * 2), *Bh = xmalloc(nb * 2), *Ch = xmalloc(nc * 2);
	uint16_t *Ab = xmalloc(na * 2), *Bb = xmalloc(nb * 2), *Cb = xmalloc(nc * 2);
	for (size_t i = 0; i < na; i++)
		Ah[i] = amp_f32_to_f16(A[i] = rng_uniform(-1.0f, 1.0f));
	for (size_t i = 0; i < nb; i++)
		Bh[i] = amp_f32_to_f16(B[i] = rng_uniform(-1.0f, 1.0f));
	amp_cvt_f32_bf16(A, Ab, (int64_t)na);
	amp_cvt_f32_bf16(B, Bb, (int64_t)nb);

	double flops = 2.0 * (double)M * (double)N * (double)K;
	/* Timed calls per burst, so that each variant gets about budget_s / V_COUNT. */
	int calls = (int)(budget_s / V_COUNT / rounds / (flops / 150e9 + 2e-6));
	calls = calls < 3 ? 3 : calls > 41 ? 41 : calls;
	double *steady[V_COUNT];
	for (int v = 0; v < V_COUNT; v++)
		steady[v] = xmalloc((size_t)rounds * sizeof(double));
	double *burst = xmalloc((size_t)calls * sizeof(double));
	int have_yard = yard_sgemm != NULL;
	gemm_args g = {s, M, N, K, lda, ldb, A, B, C, C2, Ah, Bh, Ch, Ab, Bb, Cb};
	for (int r = 0; r < rounds; r++) {
		for (int v = 0; v < V_COUNT; v++) {
			if (v == V_YARD && !have_yard)
				continue;
			amp_kernels_set_threads(v == V_F32_T2 ? 2 : 1);
			/* untimed calls (at least one) until the burst is WARM_S old */
			double t0 = now_s();
			do
				run_variant(&g, v);
			while (now_s() - t0 < WARM_S);
			for (int c = 0; c < calls; c++) {
				double a = now_s();
				run_variant(&g, v);
				burst[c] = now_s() - a;
			}
			steady[v][r] = median(burst, calls);
		}
	}
	amp_kernels_set_threads(1);
	double med[V_COUNT];
	for (int v = 0; v < V_COUNT; v++)
		med[v] = v == V_YARD && !have_yard ? 0.0 : median(steady[v], rounds);
	/* The 2-thread C is compared bit for bit with the 1-thread one. */
	amp_gemm_f32(s->ta, s->tb, M, N, K, A, lda, B, ldb, 0.0f, C, N);
	amp_kernels_set_threads(2);
	amp_gemm_f32(s->ta, s->tb, M, N, K, A, lda, B, ldb, 0.0f, C2, N);
	amp_kernels_set_threads(1);
	int same = memcmp(C, C2, nc * 4) == 0;
	double e32 = gemm_err_f32(s, A, B, C), e16 = gemm_err_f16(s, Ah, Bh, Ch);
	double eb = gemm_err_bf16(s, Ab, Bb, Cb);
	max_err_bf16 = fmax(max_err_bf16, eb);

	char dims[48];
	snprintf(dims, sizeof dims, "%lldx%lldx%lld %s%s", (long long)M, (long long)N, (long long)K,
	         s->ta ? "t" : "n", s->tb ? "t" : "n");
	double g32 = flops / med[V_F32] * 1e-9, g16 = flops / med[V_F16] * 1e-9;
	double gb = flops / med[V_BF16] * 1e-9;
	int cl = class_of(s->what);
	if (gb / g32 < class_min[cl]) {
		class_min[cl] = gb / g32;
		snprintf(class_at[cl], sizeof class_at[cl], "%s %s", s->what, dims);
	}
	if (g16 / g32 < class_min16[cl]) {
		class_min16[cl] = g16 / g32;
		snprintf(class_at16[cl], sizeof class_at16[cl], "%s %s", s->what, dims);
	}
	if (cl <= 1 && M >= 128 && N >= 128 && K >= 128) {
		advice_bf16 = fmin(advice_bf16, gb / g32);
		advice_f16 = fmin(advice_f16, g16 / g32);
	}
	if (M == 1024 && N == 1024 && K == 1024)
		big_bf16 = gb / g32, big_f16 = g16 / g32;
	printf("%-12s %-20s %7.1f %7.1f %6.2f %7.1f %6.2f", s->what, dims, g32, g16, g16 / g32, gb,
	       gb / g32);
	if (have_yard)
		printf(" %7.1f %6.2f", flops / med[V_YARD] * 1e-9, med[V_YARD] / med[V_F32]);
	else
		printf(" %7s %6s", "-", "-");
	printf(" %6.2f%s %9.2e %9.2e %9.2e\n", med[V_F32] / med[V_F32_T2], same ? " " : "!", e32,
	       e16, eb);
	for (int v = 0; v < V_COUNT; v++)
		free(steady[v]);
	free(burst);
	free(A); free(B); free(C); free(C2); free(Ah); free(Bh); free(Ch); free(Ab); free(Bb);
	free(Cb);
}

/* ---- memory-bound kernels --------------------------------------------------------------------- */

enum { M_MEMCPY, M_CVT_F2H, M_CVT_H2F, M_CVT_F2B, M_CVT_B2F, M_VADD, M_VMUL, M_VSCALE, M_VAXPY,
       M_NF32, M_NF16, M_NFB16, M_SGD32, M_SGD16, M_COUNT };

static const char *const mem_names[M_COUNT] = {
	"memcpy (glibc)", "cvt fp32->fp16", "cvt fp16->fp32", "cvt fp32->bf16", "cvt bf16->fp32",
	"vadd", "vmul", "vscale", "axpy", "count non-finite fp32", "count non-finite fp16",
	"count non-finite bf16", "sgd update fp32", "sgd update fp16 + copy"};
/* Bytes read + written per element.  The SGD updates (momentum) read and write the master and
 * its moment and read the gradient; the mixed-precision one reads an fp16 gradient and writes
 * the fp16 working copy in the same pass. */
static const int mem_bytes[M_COUNT] = {8, 6, 6, 6, 6, 12, 12, 8, 12, 4, 2, 2, 20, 20};

static volatile int64_t sink;

static void bench_memory(int64_t n, int reps)
{
	float *a = xmalloc((size_t)n * 4), *b = xmalloc((size_t)n * 4), *d = xmalloc((size_t)n * 4);
	float *w = xmalloc((size_t)n * 4), *mom = xmalloc((size_t)n * 4);
	uint16_t *h = xmalloc((size_t)n * 2), *hb = xmalloc((size_t)n * 2), *hw = xmalloc((size_t)n * 2);
	for (int64_t i = 0; i < n; i++) {
		a[i] = rng_uniform(-4.0f, 4.0f);
		b[i] = rng_uniform(-4.0f, 4.0f);
		d[i] = 0.0f;
		w[i] = rng_uniform(-1.0f, 1.0f);
		mom[i] = 0.0f;
	}
	amp_cvt_f32_f16(a, h, n);
	amp_cvt_f32_bf16(a, hb, n);
	const amp_update_io io32 = {.g = a, .gdt = AMP_F32}; /* no working copy */
	const amp_update_io io16 = {.g = h, .gdt = AMP_F16, .work = hw, .wdt = AMP_F16};
	double *times[M_COUNT];
	for (int m = 0; m < M_COUNT; m++)
		times[m] = xmalloc((size_t)reps * sizeof(double));
	for (int r = -1; r < reps; r++) {
		for (int m = 0; m < M_COUNT; m++) {
			double t0 = now_s();
			switch (m) {
			case M_MEMCPY: memcpy(d, a, (size_t)n * 4); break;
			case M_CVT_F2H: amp_cvt_f32_f16(a, h, n); break;
			case M_CVT_H2F: amp_cvt_f16_f32(h, d, n); break;
			case M_CVT_F2B: amp_cvt_f32_bf16(a, hb, n); break;
			case M_CVT_B2F: amp_cvt_bf16_f32(hb, d, n); break;
			case M_VADD: amp_vadd_f32(a, b, d, n); break;
			case M_VMUL: amp_vmul_f32(a, b, d, n); break;
			case M_VSCALE: amp_vscale_f32(a, 0.5f, d, n); break;
			case M_VAXPY: amp_vaxpy_f32(1e-3f, a, d, n); break;
			case M_NF32: sink += amp_count_nonfinite_f32(a, n); break;
			case M_NF16: sink += amp_count_nonfinite_f16(h, n); break;
			case M_NFB16: sink += amp_count_nonfinite_bf16(hb, n); break;
			case M_SGD32: amp_sgd_update(w, mom, &io32, 1.0f, 1e-6f, 0.9f, 0.0f, n); break;
			default: sink += amp_sgd_update(w, mom, &io16, 1.0f / 128, 1e-6f, 0.9f, 0.0f, n);
			}
			double t = now_s() - t0;
			if (r >= 0)
				times[m][r] = t;
		}
	}
	double base = 0.0;
	printf("\n%-24s %9s %9s   (%lld elements per array, %d repeats, median; bytes = read + "
	       "written)\n", "memory-bound kernel", "GB/s", "vs memcpy", (long long)n, reps);
	for (int m = 0; m < M_COUNT; m++) {
		double gbs = (double)mem_bytes[m] * (double)n / median(times[m], reps) * 1e-9;
		if (m == M_MEMCPY)
			base = gbs;
		printf("%-24s %9.1f %8.0f%%\n", mem_names[m], gbs, 100.0 * gbs / base);
	}
	for (int m = 0; m < M_COUNT; m++)
		free(times[m]);
	free(a); free(b); free(d); free(w); free(mom); free(h); free(hb); free(hw);
}

int main(int argc, char **argv)
{
	/* OpenBLAS: its own threads off for single-core figures, and its AVX-512 kernels where the
	 * CPU has them (this machine's environment may say Haswell; Debian's build predates Zen 4/5
	 * and picks Haswell by itself too).  AMP_BENCH_YARD_CORE chooses another core.  OpenBLAS
	 * reads these from the environment the process started with, hence the one re-exec. */
	const char *core = getenv("AMP_BENCH_YARD_CORE");
	if (core == NULL && cpu_has_avx512())
		core = "SkylakeX";
	const char *have = getenv("OPENBLAS_CORETYPE");
	if (core != NULL && *core != '\0' && (have == NULL || strcmp(have, core) != 0) &&
	    getenv("AMP_BENCH_REEXEC") == NULL) {
		setenv("OPENBLAS_CORETYPE", core, 1);
		setenv("OPENBLAS_NUM_THREADS", "1", 1);
		setenv("AMP_BENCH_REEXEC", "1", 1);
		execv("/proc/self/exe", argv);  /* on failure, go on with the core it has */
	}
	int quick = argc == 2 && strcmp(argv[1], "--quick") == 0;
	int rounds = quick ? 3 : 9; /* of the GEMM bursts */
	if (argc == 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
		printf("usage: bench_kernels [--quick]\n\n"
		       "The runtime's FP32, FP16 and BF16 GEMMs on the kernel bench's shapes, in\n"
		       "interleaved bursts (GFLOP/s, ratios to FP32, error against FP64, OpenBLAS's\n"
		       "sgemm as the yardstick when installed), the goals of this CPU class, and the\n"
		       "memory-bound kernels against memcpy.  Says which kernel paths ran and which this\n"
		       "CPU lacks.  AMP_KERNELS forces a path; AMP_BENCH_YARD_CORE OpenBLAS's core.\n\n"
		       "    --quick   3 rounds, fewer timed calls, smaller arrays (a smoke run)\n");
		return 0;
	}
	if (argc > 1 && !quick) {
		/* the first argument that is not --quick, which may come once */
		const char *what = argc > 2 && strcmp(argv[1], "--quick") == 0 ? argv[2] : argv[1];
		fprintf(stderr, "bench_kernels: unknown option '%s'\nusage: bench_kernels [--quick] (--help)\n",
		        what);
		return 2;
	}
	if (amp_kernels_init() < 0)
		fprintf(stderr, "bench_kernels: AMP_KERNELS names no path; using %s\n",
		        amp_isa_name(amp_kernels_isa()));
	yard_open();
	printf("bench_kernels: path %s; GEMM engines fp32 %s, fp16 %s, bf16 %s\n",
	       amp_isa_name(amp_kernels_isa()), amp_engine_name(amp_kernels_gemm_engine(AMP_F32)),
	       amp_engine_name(amp_kernels_gemm_engine(AMP_F16)),
	       amp_engine_name(amp_kernels_gemm_engine(AMP_BF16)));
	printf("kernel paths this CPU runs:");
	for (int i = 0; i < AMP_ISA_COUNT; i++)
		if (amp_kernels_path_missing(amp_isa_name((amp_isa)i)) == NULL)
			printf(" %s", amp_isa_name((amp_isa)i));
	printf("\n");
	for (int i = 0; i < AMP_ISA_COUNT; i++) {
		const char *missing = amp_kernels_path_missing(amp_isa_name((amp_isa)i));
		if (missing != NULL)
			printf("  skipped %s: this CPU lacks %s\n", amp_isa_name((amp_isa)i), missing);
	}
	if (!cpu_has_avx512fp16())
		printf("  (no AVX512-FP16: the fp16 GEMM is fp16 storage with fp32 FMA)\n");
	printf("yardstick: %s\n", yard_name);
	printf("GFLOP/s, 1 thread unless said: the variants take turns in bursts, %d ms of untimed "
	       "calls first,\nthe median of each burst's timed calls, the median over %d rounds; "
	       "f16 / bf16 = fp16 / bf16 in and out, fp32 sums;\nyard/rt = yardstick time / "
	       "runtime f32 time (>1: runtime faster); 2t = runtime f32 speedup on 2 threads\n(! = "
	       "2-thread C differs in bits from 1-thread C); err = max|C-R| / max|R| vs FP64 R, %d "
	       "sampled entries.\n\n",
	       (int)(WARM_S * 1e3 + 0.5), rounds, ERR_SAMPLES);
	printf("%-12s %-20s %7s %7s %6s %7s %6s %7s %6s %7s %9s %9s %9s\n", "shape", "MxNxK op",
	       "rt f32", "rt f16", "16/32", "rt bf16", "b/32", "yard", "yd/rt", "2t", "err f32",
	       "err f16", "err bf16");
	double t0 = now_s();
	for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++)
		bench_gemm(&shapes[i], quick ? 0.1 : 1.0, rounds);
	goals_summary();
	printf("  max bf16 err vs FP64 (inputs bf16, relative to max|R|): %.2e\n", max_err_bf16);
	bench_memory(quick ? (1 << 22) : (1 << 25), quick ? 3 : 9);
	printf("\ntotal %.1f s\n", now_s() - t0);
	return 0;
}

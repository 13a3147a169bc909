/* dispatch.c — picks the kernel path at run time and routes the public amp_* kernels to it.
 *
 * CPU features come from cpuid and xgetbv (the OS must save the YMM/ZMM state).  The active
 * table is an atomic pointer: set lazily from $AMP_KERNELS on first use (pthread_once), and
 * switchable at any time by amp_kernels_select(); each call reads it once.
 */
#include <cpuid.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels_impl.h"

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static pthread_once_t detect_once = PTHREAD_ONCE_INIT;
static _Atomic(const amp_kernel_table *) active;
static amp_isa best_isa = AMP_ISA_SCALAR;
static int env_bad;  /* $AMP_KERNELS named no path at initialisation */

/* Every path, by amp_isa value.  A new path is one more amp_isa value, one row here, its file
 * with its table, and its CPU check in detect().  A native AVX512-FP16 GEMM (cpuid 7 EDX bit 23,
 * vfmadd231ph) would be such a path, its table reusing the AVX-512 entries but gemm_f16; none is
 * built until it can be run and tested on a CPU that has it. */
static const struct {
	amp_isa isa;
	const char *name;
	const amp_kernel_table *table;
} paths[] = {
	{AMP_ISA_SCALAR, "scalar", &amp_kernels_scalar_table},
	{AMP_ISA_AVX2, "avx2", &amp_kernels_avx2_table},
	{AMP_ISA_AVX512, "avx512", &amp_kernels_avx512_table},
};

static const amp_kernel_table *table_of(amp_isa isa)
{
	for (size_t i = 0; i < sizeof paths / sizeof *paths; i++)
		if (paths[i].isa == isa)
			return paths[i].table;
	return &amp_kernels_scalar_table;
}

static uint64_t read_xcr0(void)
{
	uint32_t lo, hi;
	__asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
	return ((uint64_t)hi << 32) | lo;
}

static void detect(void)
{
	unsigned a, b, c, d;
	if (!__get_cpuid(1, &a, &b, &c, &d))
		return;
	int fma = (c >> 12) & 1, osxsave = (c >> 27) & 1, avx = (c >> 28) & 1, f16c = (c >> 29) & 1;
	if (!osxsave || !avx)
		return;
	uint64_t xcr0 = read_xcr0();
	if ((xcr0 & 0x6) != 0x6)  /* XMM and YMM state */
		return;
	if (__get_cpuid_max(0, NULL) < 7 || !__get_cpuid_count(7, 0, &a, &b, &c, &d))
		return;
	int avx2 = (b >> 5) & 1, avx512f = (b >> 16) & 1, avx512dq = (b >> 17) & 1;
	int avx512bw = (b >> 30) & 1, avx512vl = (b >> 31) & 1;
	if (!(avx2 && fma && f16c))
		return;
	best_isa = AMP_ISA_AVX2;
	/* Opmask, ZMM0-15 upper halves, ZMM16-31 state. */
	if ((xcr0 & 0xe0) == 0xe0 && avx512f && avx512bw && avx512vl && avx512dq)
		best_isa = AMP_ISA_AVX512;
}

amp_isa amp_kernels_best(void)
{
	pthread_once(&detect_once, detect);
	return best_isa;
}

/* Parses a path name; returns 0 and sets *isa, or -1.  "" and "auto" mean the best. */
static int parse_isa(const char *name, amp_isa *isa)
{
	size_t i = 0, n = sizeof paths / sizeof *paths;
	if (name[0] == '\0' || strcmp(name, "auto") == 0) {
		*isa = amp_kernels_best();
		return 0;
	}
	while (i < n && strcmp(name, paths[i].name) != 0)
		i++;
	if (i == n)
		return -1;
	*isa = paths[i].isa;
	if (*isa > amp_kernels_best())
		*isa = amp_kernels_best();
	return 0;
}

static void init_from_env(void)
{
	const char *env = getenv("AMP_KERNELS");
	amp_isa isa = amp_kernels_best();
	if (env != NULL && parse_isa(env, &isa) < 0) {
		env_bad = 1;
		isa = amp_kernels_best();
	}
	/* A select() that ran before us wins: only fill an empty slot. */
	const amp_kernel_table *expected = NULL;
	atomic_compare_exchange_strong(&active, &expected, table_of(isa));
}

int amp_kernels_init(void)
{
	pthread_once(&init_once, init_from_env);
	return env_bad ? -1 : 0;
}

static inline const amp_kernel_table *kt(void)
{
	const amp_kernel_table *t = atomic_load_explicit(&active, memory_order_acquire);
	if (__builtin_expect(t == NULL, 0)) {
		amp_kernels_init();
		t = atomic_load_explicit(&active, memory_order_acquire);
	}
	return t;
}

int amp_kernels_select(const char *name)
{
	amp_isa isa;
	if (name == NULL)
		name = getenv("AMP_KERNELS");
	if (name == NULL)
		name = "auto";
	if (parse_isa(name, &isa) < 0)
		return -1;
	atomic_store_explicit(&active, table_of(isa), memory_order_release);
	return (int)isa;
}

const char *amp_kernels_path_missing(const char *name)
{
	static const char *const needs[] = {
		[AMP_ISA_SCALAR] = "nothing",
		[AMP_ISA_AVX2] = "avx2+fma+f16c",
		[AMP_ISA_AVX512] = "avx512f+avx512bw+avx512vl+avx512dq",
	};
	for (size_t i = 0; i < sizeof paths / sizeof *paths; i++)
		if (strcmp(name, paths[i].name) == 0)
			return paths[i].isa > amp_kernels_best() ? needs[paths[i].isa] : NULL;
	return "a path of that name";
}

amp_isa amp_kernels_isa(void)
{
	return kt()->isa;
}

const char *amp_isa_name(amp_isa isa)
{
	for (size_t i = 0; i < sizeof paths / sizeof *paths; i++)
		if (paths[i].isa == isa)
			return paths[i].name;
	return "unknown";
}

int64_t amp_cvt_f32_f16(const float *src, uint16_t *dst, int64_t n)
{
	return kt()->cvt_f32_f16(src, dst, n);
}

void amp_cvt_f16_f32(const uint16_t *src, float *dst, int64_t n)
{
	kt()->cvt_f16_f32(src, dst, n);
}

int64_t amp_cvt_f32_bf16(const float *src, uint16_t *dst, int64_t n)
{
	return kt()->cvt_f32_bf16(src, dst, n);
}

void amp_cvt_bf16_f32(const uint16_t *src, float *dst, int64_t n)
{
	kt()->cvt_bf16_f32(src, dst, n);
}

/* Elements converted per block of a half-to-half conversion (16 KiB of fp32 on the stack). */
#define CVT_BLOCK 4096

int64_t amp_cvt(amp_dtype dst_dt, void *dst, amp_dtype src_dt, const void *src, int64_t n)
{
	const amp_kernel_table *t = kt();
	int dst_half = 0, src_half = 0;
	switch (dst_dt) {
	case AMP_F16:
	case AMP_BF16: dst_half = 1; break;
	case AMP_F32: break;
	case AMP_I32: return -1;
	}
	switch (src_dt) {
	case AMP_F16:
	case AMP_BF16: src_half = 1; break;
	case AMP_F32: break;
	case AMP_I32: return -1;
	}
	if (n <= 0)
		return 0;
	if (dst_dt == src_dt) {
		memcpy(dst, src, (size_t)n * (dst_half ? sizeof(uint16_t) : sizeof(float)));
		return dst_half ? (dst_dt == AMP_F16 ? t->count_nonfinite_f16(dst, n)
		                                     : t->count_nonfinite_bf16(dst, n))
		                : 0;
	}
	if (!src_half)
		return dst_dt == AMP_F16 ? t->cvt_f32_f16(src, dst, n) : t->cvt_f32_bf16(src, dst, n);
	if (!dst_half) {
		if (src_dt == AMP_F16)
			t->cvt_f16_f32(src, dst, n);
		else
			t->cvt_bf16_f32(src, dst, n);
		return 0;
	}
	/* Half to half: widened exactly block by block, so rounded once. */
	float w[CVT_BLOCK];
	int64_t bad = 0;
	for (int64_t i = 0; i < n; i += CVT_BLOCK) {
		int64_t m = n - i < CVT_BLOCK ? n - i : CVT_BLOCK;
		const uint16_t *s = (const uint16_t *)src + i;
		uint16_t *d = (uint16_t *)dst + i;
		if (src_dt == AMP_F16) {
			t->cvt_f16_f32(s, w, m);
			bad += t->cvt_f32_bf16(w, d, m);
		} else {
			t->cvt_bf16_f32(s, w, m);
			bad += t->cvt_f32_f16(w, d, m);
		}
	}
	return bad;
}

amp_engine amp_gemm(amp_dtype dt, int trans_a, int trans_b, int64_t M, int64_t N, int64_t K,
                    const void *A, int64_t lda, const void *B, int64_t ldb, float beta, void *C,
                    int64_t ldc, amp_stats *st)
{
	switch (dt) {
	case AMP_F32:
	case AMP_F16:
	case AMP_BF16: break;
	case AMP_I32: return AMP_ENGINE_NONE;
	}
	if (st)
		amp_stats_init(st);
	if (M <= 0 || N <= 0)
		return AMP_ENGINE_NONE;
	const amp_kernel_table *t = kt();
	t->gemm[dt](trans_a, trans_b, M, N, K, A, lda, B, ldb, beta, C, ldc, st);
	return t->gemm_engine[dt];
}

amp_engine amp_kernels_gemm_engine(amp_dtype dt)
{
	switch (dt) {
	case AMP_F32:
	case AMP_F16:
	case AMP_BF16: return kt()->gemm_engine[dt];
	case AMP_I32: break;
	}
	return AMP_ENGINE_NONE;
}

amp_engine amp_kernels_vec_engine(void)
{
	return kt()->vec_engine;
}

void amp_gemm_f32(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, const float *A,
                  int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc)
{
	amp_gemm(AMP_F32, trans_a, trans_b, M, N, K, A, lda, B, ldb, beta, C, ldc, NULL);
}

void amp_gemm_f16(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, const uint16_t *A,
                  int64_t lda, const uint16_t *B, int64_t ldb, float beta, uint16_t *C,
                  int64_t ldc)
{
	amp_gemm(AMP_F16, trans_a, trans_b, M, N, K, A, lda, B, ldb, beta, C, ldc, NULL);
}

void amp_gemm_f16_stats(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K,
                        const uint16_t *A, int64_t lda, const uint16_t *B, int64_t ldb,
                        float beta, uint16_t *C, int64_t ldc, amp_stats *st)
{
	amp_gemm(AMP_F16, trans_a, trans_b, M, N, K, A, lda, B, ldb, beta, C, ldc, st);
}

void amp_gemm_bf16(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, const uint16_t *A,
                   int64_t lda, const uint16_t *B, int64_t ldb, float beta, uint16_t *C,
                   int64_t ldc)
{
	amp_gemm(AMP_BF16, trans_a, trans_b, M, N, K, A, lda, B, ldb, beta, C, ldc, NULL);
}

void amp_gemm_bf16_stats(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K,
                         const uint16_t *A, int64_t lda, const uint16_t *B, int64_t ldb,
                         float beta, uint16_t *C, int64_t ldc, amp_stats *st)
{
	amp_gemm(AMP_BF16, trans_a, trans_b, M, N, K, A, lda, B, ldb, beta, C, ldc, st);
}

void amp_vadd_f32(const float *a, const float *b, float *dst, int64_t n)
{
	kt()->vadd_f32(a, b, dst, n);
}

void amp_vmul_f32(const float *a, const float *b, float *dst, int64_t n)
{
	kt()->vmul_f32(a, b, dst, n);
}

void amp_vscale_f32(const float *a, float s, float *dst, int64_t n)
{
	kt()->vscale_f32(a, s, dst, n);
}

void amp_vaxpy_f32(float s, const float *a, float *dst, int64_t n)
{
	kt()->vaxpy_f32(s, a, dst, n);
}

int64_t amp_count_nonfinite_f32(const float *a, int64_t n)
{
	return kt()->count_nonfinite_f32(a, n);
}

int64_t amp_count_nonfinite_f16(const uint16_t *a, int64_t n)
{
	return kt()->count_nonfinite_f16(a, n);
}

int64_t amp_count_nonfinite_bf16(const uint16_t *a, int64_t n)
{
	return kt()->count_nonfinite_bf16(a, n);
}

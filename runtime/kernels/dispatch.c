/* dispatch.c — the kernel paths as CPU-feature sets, and the public amp_* kernels routed to the
 * active one.
 *
 * A path row (paths[] below) holds its name, the CPU features it needs (cpuid and xgetbv, read
 * once), an init() run once before its first use (AMX asks Linux for the tile state; a failed
 * init makes the path unavailable), the path it falls back to and its table.  A NULL slot in a
 * table is taken from the fallback path, perf-style, so a path supplies only what it does
 * better; "auto" takes each slot from the best path this CPU has that fills it.  The tables are
 * resolved once; the active one is an atomic pointer, set lazily from $AMP_KERNELS on first use
 * (pthread_once) and switchable at any time by amp_kernels_select(); each call reads it once.
 */
#include <cpuid.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "kernels/gemm_blind.h"
#include "kernels/kernels_impl.h"

/* ---- CPU features ---------------------------------------------------------------------------- */

enum {
	CPU_AVX2 = 1u << 0,        /* with FMA, F16C and the OS saving YMM state */
	CPU_AVX512 = 1u << 1,      /* F, BW, VL, DQ and the OS saving ZMM/opmask state */
	CPU_AVX512_BF16 = 1u << 2, /* cpuid 7.1 EAX bit 5: vdpbf16ps, vcvtneps2bf16 */
	CPU_AVX512_FP16 = 1u << 3, /* cpuid 7.0 EDX bit 23: vfmadd231ph */
	CPU_AMX_TILE = 1u << 4,    /* cpuid 7.0 EDX bit 24, and XCR0 bits 17-18 (tile state) */
	CPU_AMX_BF16 = 1u << 5,    /* cpuid 7.0 EDX bit 22: tdpbf16ps */
	/* Not a feature but a rate: on Intel cores vdpbf16ps (two products per fp32 lane) issues
	 * at a quarter of the rate of vfmadd231ps, so it computes half the products per cycle of
	 * FP32 FMA (a register-only loop on a Sapphire Rapids-class Xeon with AMX hidden: 76 against
	 * 158 GFLOP/s), against twice on Zen 5.  There "auto" takes the bf16 GEMM from the avx512
	 * path (bf16 widened while packing, FP32 FMA: 0.90-1.06x the FP32 GEMM, against 0.60-0.72x
	 * on vdpbf16ps); AMX, where the OS grants it, serves bf16 on these CPUs anyway. */
	CPU_DPBF16_HALF_RATE = 1u << 6,
};

/* Names of the features, as /proc/cpuinfo spells them, for the messages. */
static const struct {
	unsigned bit;
	const char *name;
} cpu_feature_names[] = {
	{CPU_AVX2, "avx2+fma+f16c"},
	{CPU_AVX512, "avx512f+avx512bw+avx512vl+avx512dq"},
	{CPU_AVX512_BF16, "avx512_bf16"},
	{CPU_AVX512_FP16, "avx512_fp16"},
	{CPU_AMX_TILE, "amx_tile"},
	{CPU_AMX_BF16, "amx_bf16"},
};

static pthread_once_t detect_once = PTHREAD_ONCE_INIT;
static unsigned cpu_features;

static uint64_t read_xcr0(void)
{
	uint32_t lo, hi;
	__asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
	return ((uint64_t)hi << 32) | lo;
}

static unsigned detect_features(void)
{
	unsigned a, b, c, d, f = 0;
	if (!__get_cpuid(1, &a, &b, &c, &d))
		return 0;
	int fma = (c >> 12) & 1, osxsave = (c >> 27) & 1, avx = (c >> 28) & 1, f16c = (c >> 29) & 1;
	if (!osxsave || !avx)
		return 0;
	uint64_t xcr0 = read_xcr0();
	if ((xcr0 & 0x6) != 0x6)  /* XMM and YMM state */
		return 0;
	if (__get_cpuid_max(0, NULL) < 7 || !__get_cpuid_count(7, 0, &a, &b, &c, &d))
		return 0;
	unsigned max7 = a;
	int avx2 = (b >> 5) & 1, avx512f = (b >> 16) & 1, avx512dq = (b >> 17) & 1;
	int avx512bw = (b >> 30) & 1, avx512vl = (b >> 31) & 1;
	if (avx2 && fma && f16c)
		f |= CPU_AVX2;
	/* Opmask, ZMM0-15 upper halves, ZMM16-31 state. */
	int zmm = (xcr0 & 0xe0) == 0xe0;
	if (zmm && avx512f && avx512bw && avx512vl && avx512dq)
		f |= CPU_AVX512;
	if (zmm && ((d >> 23) & 1))
		f |= CPU_AVX512_FP16;
	/* XTILECFG and XTILEDATA state enabled by the OS (Linux also wants arch_prctl: init). */
	if ((xcr0 & 0x60000) == 0x60000 && ((d >> 24) & 1))
		f |= CPU_AMX_TILE;
	if ((xcr0 & 0x60000) == 0x60000 && ((d >> 22) & 1))
		f |= CPU_AMX_BF16;
	if (zmm && max7 >= 1 && __get_cpuid_count(7, 1, &a, &b, &c, &d) && ((a >> 5) & 1))
		f |= CPU_AVX512_BF16;
	unsigned vendor[4] = {0, 0, 0, 0}; /* leaf 0: EBX, EDX, ECX spell the vendor */
	if (__get_cpuid(0, &a, &vendor[0], &vendor[2], &vendor[1]) &&
	    memcmp(vendor, "GenuineIntel", 12) == 0)
		f |= CPU_DPBF16_HALF_RATE;
	return f;
}

/* ---- path inits ------------------------------------------------------------------------------ */

/* Linux must grant the AMX tile data state before the first tile instruction, or the
 * process gets SIGILL: amp_amx_init asks once per process (arch_prctl ARCH_REQ_XCOMP_PERM). */
static int amx_init(void)
{
	return amp_amx_init(); /* gemm_amx.c: checks the CPU and the OS, then asks Linux once */
}

/* ---- the paths ------------------------------------------------------------------------------- */

/* Every path, by amp_isa value.  needs includes everything of the fallback path, so a path
 * that is available can always fall back.  A new path is one more amp_isa value, one row here
 * (and in the auto order below) and its file with its table; see kernels_impl.h. */
typedef struct kpath {
	amp_isa isa;
	const char *name;
	unsigned needs;
	int (*init)(void);     /* NULL, or 0 when the path may run */
	amp_isa fallback;      /* for NULL slots; the scalar path (which fills all) has itself */
	const amp_kernel_table *table;
} kpath;

static const kpath paths[AMP_ISA_COUNT] = {
	{AMP_ISA_SCALAR, "scalar", 0, NULL, AMP_ISA_SCALAR, &amp_kernels_scalar_table},
	{AMP_ISA_AVX2, "avx2", CPU_AVX2, NULL, AMP_ISA_SCALAR, &amp_kernels_avx2_table},
	{AMP_ISA_AVX512, "avx512", CPU_AVX2 | CPU_AVX512, NULL, AMP_ISA_AVX2,
	 &amp_kernels_avx512_table},
	{AMP_ISA_AVX512_BF16, "avx512-bf16", CPU_AVX2 | CPU_AVX512 | CPU_AVX512_BF16, NULL,
	 AMP_ISA_AVX512, &amp_kernels_avx512bf16_table},
	{AMP_ISA_AVX512_FP16, "avx512-fp16", CPU_AVX2 | CPU_AVX512 | CPU_AVX512_FP16, NULL,
	 AMP_ISA_AVX512, &amp_kernels_avx512fp16_table},
	{AMP_ISA_AMX_BF16, "amx-bf16",
	 CPU_AVX2 | CPU_AVX512 | CPU_AVX512_BF16 | CPU_AMX_TILE | CPU_AMX_BF16, amx_init,
	 AMP_ISA_AVX512_BF16, &amp_kernels_amxbf16_table},
};

/* "auto": each slot from the first path in this order that is available and fills it. */
static const amp_isa auto_order[AMP_ISA_COUNT] = {
	AMP_ISA_AMX_BF16, AMP_ISA_AVX512_FP16, AMP_ISA_AVX512_BF16,
	AMP_ISA_AVX512,   AMP_ISA_AVX2,        AMP_ISA_SCALAR,
};

static int path_ok[AMP_ISA_COUNT];              /* available on this CPU, init succeeded */
static char missing_text[AMP_ISA_COUNT][160];   /* what an unavailable path lacks */
static amp_kernel_table resolved[AMP_ISA_COUNT]; /* every slot filled */
static amp_kernel_table auto_table;
static amp_isa best_isa = AMP_ISA_SCALAR;

/* t's NULL slots from f (f may have NULL slots too). */
static void fill_from(amp_kernel_table *t, const amp_kernel_table *f)
{
	/* The engine of the elementwise kernels is the one of the path that supplies them. */
	if (t->vadd_f32 == NULL && f->vadd_f32 != NULL)
		t->vec_engine = f->vec_engine;
	if (t->vadd_h16 == NULL && f->vadd_h16 != NULL)
		t->vec_engine_h16 = f->vec_engine_h16;
#define FILL(slot)                         \
	do {                               \
		if (t->slot == NULL)       \
			t->slot = f->slot; \
	} while (0)
	FILL(cvt_f32_f16);
	FILL(cvt_f16_f32);
	FILL(cvt_f32_bf16);
	FILL(cvt_bf16_f32);
	FILL(vadd_f32);
	FILL(vmul_f32);
	FILL(vscale_f32);
	FILL(vaxpy_f32);
	FILL(sgd_update);
	FILL(adamw_update);
	FILL(vadd_h16);
	FILL(vsub_h16);
	FILL(vmul_h16);
	FILL(vadd_rows_h16);
	FILL(vmul_rows_h16);
	FILL(vscale_h16);
	FILL(count_nonfinite_f32);
	FILL(count_nonfinite_f16);
	FILL(count_nonfinite_bf16);
	FILL(relu_f32);
	FILL(relu_h16);
	FILL(relu_grad_f32);
	FILL(relu_grad_h16);
	FILL(gelu_f32);
	FILL(gelu_grad_f32);
	FILL(im2col);
	FILL(col2im_add_f32);
	FILL(maxpool_plane);
#undef FILL
	for (int dt = 0; dt < AMP_DTYPE_COUNT; dt++) {
		if (t->gemm[dt] == NULL && f->gemm[dt] != NULL) {
			t->gemm[dt] = f->gemm[dt];
			t->gemm_engine[dt] = f->gemm_engine[dt];
		}
		if (t->gemm_acc32[dt] == NULL && f->gemm_acc32[dt] != NULL) {
			t->gemm_acc32[dt] = f->gemm_acc32[dt];
			t->acc32_engine[dt] = f->acc32_engine[dt] != AMP_ENGINE_NONE ? f->acc32_engine[dt]
			                                                            : f->gemm_engine[dt];
		}
	}
}

static void detect(void)
{
	cpu_features = detect_features();
	/* paths[] is in fallback order: each fallback's row comes before the rows that use it. */
	for (int i = 0; i < AMP_ISA_COUNT; i++) {
		const kpath *p = &paths[i];
		resolved[i] = *p->table;
		for (int dt = 0; dt < AMP_DTYPE_COUNT; dt++) /* a path's own acc32 runs on its gemm */
			if (resolved[i].gemm_acc32[dt] && resolved[i].acc32_engine[dt] == AMP_ENGINE_NONE)
				resolved[i].acc32_engine[dt] = resolved[i].gemm_engine[dt];
		if (i != AMP_ISA_SCALAR)
			fill_from(&resolved[i], &resolved[p->fallback]);
		path_ok[i] = (cpu_features & p->needs) == p->needs &&
		             (i == AMP_ISA_SCALAR || path_ok[p->fallback]) &&
		             (p->init == NULL || p->init() == 0);
		if (path_ok[i])
			continue;
		size_t len = 0, cap = sizeof missing_text[i];
		for (size_t k = 0; k < sizeof cpu_feature_names / sizeof *cpu_feature_names; k++)
			if ((p->needs & cpu_feature_names[k].bit) &&
			    !(cpu_features & cpu_feature_names[k].bit))
				len += (size_t)snprintf(missing_text[i] + len, len < cap ? cap - len : 0,
				                        "%s%s", len ? "+" : "", cpu_feature_names[k].name);
		if (len == 0)  /* the CPU has the features: the init failed */
			snprintf(missing_text[i], cap, "%s",
			         p->init == amx_init ? "the OS to grant the AMX tile state (arch_prctl)"
			                             : "its initialisation to succeed");
	}
	memset(&auto_table, 0, sizeof auto_table);
	auto_table.isa = AMP_ISA_SCALAR;
	for (int k = AMP_ISA_COUNT - 1; k >= 0; k--)  /* the best available path, first in order */
		if (path_ok[auto_order[k]])
			auto_table.isa = best_isa = auto_order[k];
	for (int k = 0; k < AMP_ISA_COUNT; k++) {
		if (!path_ok[auto_order[k]])
			continue;
		amp_kernel_table t = *paths[auto_order[k]].table;
		if (auto_order[k] == AMP_ISA_AVX512_BF16 && (cpu_features & CPU_DPBF16_HALF_RATE)) {
			t.gemm[AMP_BF16] = t.gemm_acc32[AMP_BF16] = NULL; /* see CPU_DPBF16_HALF_RATE */
			t.gemm_engine[AMP_BF16] = t.acc32_engine[AMP_BF16] = AMP_ENGINE_NONE;
		}
		fill_from(&auto_table, &t);
	}
}


/* ---- selection ------------------------------------------------------------------------------- */

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static _Atomic(const amp_kernel_table *) active;
static char env_error[400];  /* why $AMP_KERNELS was refused at initialisation, or "" */

static void detect_once_run(void)
{
	pthread_once(&detect_once, detect);
}

amp_isa amp_kernels_best(void)
{
	detect_once_run();
	return best_isa;
}

int amp_kernels_has(amp_isa isa)
{
	detect_once_run();
	return (int)isa >= 0 && (int)isa < AMP_ISA_COUNT && path_ok[isa];
}

int amp_kernels_dpbf16_half_rate(void)
{
	detect_once_run();
	return (cpu_features & CPU_DPBF16_HALF_RATE) && path_ok[AMP_ISA_AVX512_BF16];
}

amp_isa amp_kernels_usable(amp_isa isa)
{
	detect_once_run();
	if ((int)isa < 0 || (int)isa >= AMP_ISA_COUNT)
		return best_isa;
	while (!path_ok[isa])
		isa = paths[isa].fallback;  /* ends at scalar, always available */
	return isa;
}

/* The row of a path name, or NULL. */
static const kpath *path_named(const char *name)
{
	for (int i = 0; i < AMP_ISA_COUNT; i++)
		if (strcmp(name, paths[i].name) == 0)
			return &paths[i];
	return NULL;
}

const char *amp_kernels_path_missing(const char *name)
{
	detect_once_run();
	const kpath *p = name ? path_named(name) : NULL;
	if (p == NULL)
		return "a path of that name";
	return path_ok[p->isa] ? NULL : missing_text[p->isa];
}

int amp_kernels_select_error(const char *name, char *buf, size_t cap)
{
	detect_once_run();
	if (name == NULL || name[0] == '\0' || strcmp(name, "auto") == 0 ||
	    amp_kernels_path_missing(name) == NULL) {
		if (cap > 0)
			buf[0] = '\0';
		return 0;
	}
	char list[160];
	size_t len = (size_t)snprintf(list, sizeof list, "auto");
	for (int i = 0; i < AMP_ISA_COUNT; i++)
		if (path_ok[i])
			len += (size_t)snprintf(list + len, len < sizeof list ? sizeof list - len : 0,
			                        ", %s", paths[i].name);
	const kpath *p = path_named(name);
	int n;
	if (p == NULL)
		n = snprintf(buf, cap, "no kernel path '%s'; this CPU has: %s", name, list);
	else
		n = snprintf(buf, cap, "kernel path '%s' needs %s, which this CPU lacks; it has: %s",
		             name, missing_text[p->isa], list);
	return n > 0 ? n : 1;
}

/* The resolved table of a path name, or NULL when it names no path this CPU has. */
static const amp_kernel_table *table_named(const char *name)
{
	detect_once_run();
	if (name[0] == '\0' || strcmp(name, "auto") == 0)
		return &auto_table;
	const kpath *p = path_named(name);
	return p != NULL && path_ok[p->isa] ? &resolved[p->isa] : NULL;
}

static void init_from_env(void)
{
	const char *env = getenv("AMP_KERNELS");
	const amp_kernel_table *t = env != NULL ? table_named(env) : table_named("auto");
	if (t == NULL) {
		amp_kernels_select_error(env, env_error, sizeof env_error);
		t = &auto_table;
	}
	/* A select() that ran before us wins: only fill an empty slot. */
	const amp_kernel_table *expected = NULL;
	atomic_compare_exchange_strong(&active, &expected, t);
}

int amp_kernels_init(void)
{
	pthread_once(&init_once, init_from_env);
	return env_error[0] ? -1 : 0;
}

const char *amp_kernels_env_error(void)
{
	amp_kernels_init();
	return env_error[0] ? env_error : NULL;
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
	if (name == NULL)
		name = getenv("AMP_KERNELS");
	if (name == NULL)
		name = "auto";
	const amp_kernel_table *t = table_named(name);
	if (t == NULL)
		return -1;
	atomic_store_explicit(&active, t, memory_order_release);
	return (int)t->isa;
}

const char *amp_kernels_selection(void)
{
	const amp_kernel_table *t = kt();
	return t == &auto_table ? "auto" : paths[t->isa].name;
}

amp_isa amp_kernels_isa(void)
{
	return kt()->isa;
}

const char *amp_isa_name(amp_isa isa)
{
	if ((int)isa >= 0 && (int)isa < AMP_ISA_COUNT)
		return paths[isa].name;
	return "unknown";
}

/* ---- the kernels ----------------------------------------------------------------------------- */

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

/* Elements converted per block of a half-to-half conversion (16 KiB of fp32 on the stack) and
 * of a widening that counts (in L1 while it is counted). */
#define CVT_BLOCK 4096

int64_t amp_cvt_widen_count(amp_dtype src_dt, const uint16_t *src, float *dst, int64_t n)
{
	const amp_kernel_table *t = kt();
	int64_t bad = 0;
	for (int64_t i = 0; i < n; i += CVT_BLOCK) {
		int64_t m = n - i < CVT_BLOCK ? n - i : CVT_BLOCK;
		if (src_dt == AMP_F16) {
			t->cvt_f16_f32(src + i, dst + i, m);
			bad += t->count_nonfinite_f16(src + i, m);
		} else {
			t->cvt_bf16_f32(src + i, dst + i, m);
			bad += t->count_nonfinite_bf16(src + i, m);
		}
	}
	return bad;
}

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

amp_engine amp_gemm_acc32(amp_dtype dt, int trans_a, int trans_b, int64_t M, int64_t N,
                          int64_t K, const void *A, int64_t lda, const void *B, int64_t ldb,
                          float beta, float *C, int64_t ldc)
{
	switch (dt) {
	case AMP_F32:
		return amp_gemm(dt, trans_a, trans_b, M, N, K, A, lda, B, ldb, beta, C, ldc, NULL);
	case AMP_F16:
	case AMP_BF16: break;
	case AMP_I32: return AMP_ENGINE_NONE;
	}
	if (M <= 0 || N <= 0)
		return AMP_ENGINE_NONE;
	const amp_kernel_table *t = kt();
	t->gemm_acc32[dt](trans_a, trans_b, M, N, K, A, lda, B, ldb, beta, C, ldc, NULL);
	return t->acc32_engine[dt];
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

int64_t amp_sgd_update(float *w, float *m, const amp_update_io *io, float inv, float lr, float mu,
                       float wd, int64_t n)
{
	return kt()->sgd_update(w, m, io, inv, lr, mu, wd, n);
}

int64_t amp_adamw_update(float *w, float *m, float *v, const amp_update_io *io, float inv,
                         const amp_adamw_coef *c, int64_t n)
{
	return kt()->adamw_update(w, m, v, io, inv, c, n);
}

amp_engine amp_vadd_h16(const uint16_t *a, const uint16_t *b, uint16_t *dst, int64_t n)
{
	const amp_kernel_table *t = kt();
	t->vadd_h16(a, b, dst, n);
	return t->vec_engine_h16;
}

amp_engine amp_vsub_h16(const uint16_t *a, const uint16_t *b, uint16_t *dst, int64_t n)
{
	const amp_kernel_table *t = kt();
	t->vsub_h16(a, b, dst, n);
	return t->vec_engine_h16;
}

amp_engine amp_vmul_h16(const uint16_t *a, const uint16_t *b, uint16_t *dst, int64_t n)
{
	const amp_kernel_table *t = kt();
	t->vmul_h16(a, b, dst, n);
	return t->vec_engine_h16;
}

amp_engine amp_vadd_rows_h16(const uint16_t *x, const uint16_t *row, uint16_t *y, int64_t rows,
                             int64_t cols)
{
	const amp_kernel_table *t = kt();
	t->vadd_rows_h16(x, row, y, rows, cols);
	return t->vec_engine_h16;
}

amp_engine amp_vmul_rows_h16(const uint16_t *x, const uint16_t *row, uint16_t *y, int64_t rows,
                             int64_t cols)
{
	const amp_kernel_table *t = kt();
	t->vmul_rows_h16(x, row, y, rows, cols);
	return t->vec_engine_h16;
}

amp_engine amp_vscale_h16(const uint16_t *a, float s, uint16_t *dst, int64_t n)
{
	return kt()->vscale_h16(a, s, dst, n);
}

amp_engine amp_kernels_h16_engine(void)
{
	return kt()->vec_engine_h16;
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

void amp_relu_f32(const float *x, float *y, int64_t n)
{
	kt()->relu_f32(x, y, n);
}

/* The engine of a half ReLU: the fp16 kernels' for fp16 bits, else (bf16) the fp32 ones'. */
static amp_engine relu_engine(const amp_kernel_table *t, uint16_t inf)
{
	return inf == 0x7c00u ? t->vec_engine_h16 : t->vec_engine;
}

amp_engine amp_relu_h16(const uint16_t *x, uint16_t *y, int64_t n, uint16_t inf)
{
	const amp_kernel_table *t = kt();
	t->relu_h16(x, y, n, inf);
	return relu_engine(t, inf);
}

void amp_relu_grad_f32(const float *x, const float *g, float *dx, int64_t n)
{
	kt()->relu_grad_f32(x, g, dx, n);
}

amp_engine amp_relu_grad_h16(const uint16_t *x, const uint16_t *g, uint16_t *dx, int64_t n,
                             uint16_t inf)
{
	const amp_kernel_table *t = kt();
	t->relu_grad_h16(x, g, dx, n, inf);
	return relu_engine(t, inf);
}

void amp_gelu_f32(const float *x, float *y, int64_t n)
{
	kt()->gelu_f32(x, y, n);
}

void amp_gelu_grad_f32(const float *x, const float *g, float *dx, int64_t n)
{
	kt()->gelu_grad_f32(x, g, dx, n);
}

void amp_im2col(const amp_conv_shape *s, size_t es, const void *x, void *col)
{
	kt()->im2col(s, es, x, col);
}

void amp_col2im_add_f32(const amp_conv_shape *s, const float *col, float *dx)
{
	kt()->col2im_add_f32(s, col, dx);
}

amp_engine amp_maxpool_plane(amp_dtype dt, const void *x, int64_t W, int k, int stride,
                             int64_t OH, int64_t OW, void *y, int32_t *arg)
{
	const amp_kernel_table *t = kt();
	t->maxpool_plane(dt, x, W, k, stride, OH, OW, y, arg);
	return dt == AMP_F16 && k == 2 && stride == 2 ? t->vec_engine_h16 : t->vec_engine;
}

/* dtype.c — the rows of amp_dtype_table (dtype.h): one per amp_dtype, pointing at the
 * dispatched kernels of runtime/kernels for conversions, non-finite counts and statistics.
 */
#include "dtype.h"

#include <float.h>
#include <string.h>

#include "kernels/kernels.h"

/* ---- the kernels behind the rows, with the table's untyped signatures --------------------- */
static int64_t f32_from_f32(const float *src, void *dst, int64_t n)
{
	if (dst != (const void *)src)
		memcpy(dst, src, (size_t)n * sizeof(float));
	return 0;
}
static void f32_to_f32(const void *src, float *dst, int64_t n)
{
	if ((const void *)dst != src)
		memcpy(dst, src, (size_t)n * sizeof(float));
}
static int64_t f32_nonfinite(const void *x, int64_t n) { return amp_count_nonfinite_f32(x, n); }
static void f32_stats(const void *x, int64_t n, amp_stats *st) { amp_stats_f32(x, n, st); }

static int64_t f16_from_f32(const float *src, void *dst, int64_t n)
{
	return amp_cvt_f32_f16(src, dst, n);
}
static void f16_to_f32(const void *src, float *dst, int64_t n) { amp_cvt_f16_f32(src, dst, n); }
static int64_t f16_nonfinite(const void *x, int64_t n) { return amp_count_nonfinite_f16(x, n); }
static void f16_stats(const void *x, int64_t n, amp_stats *st) { amp_stats_f16(x, n, st); }

static int64_t bf16_from_f32(const float *src, void *dst, int64_t n)
{
	return amp_cvt_f32_bf16(src, dst, n);
}
static void bf16_to_f32(const void *src, float *dst, int64_t n) { amp_cvt_bf16_f32(src, dst, n); }
static int64_t bf16_nonfinite(const void *x, int64_t n) { return amp_count_nonfinite_bf16(x, n); }
static void bf16_stats(const void *x, int64_t n, amp_stats *st) { amp_stats_bf16(x, n, st); }

const amp_dtype_info amp_dtype_table[] = {
    [AMP_F32] = {"fp32", 4, 1, 0, FLT_MAX, 0x7f800000u, f32_from_f32, f32_to_f32, f32_nonfinite,
                 f32_stats},
    [AMP_F16] = {"fp16", 2, 1, 1, 65504.0, 0x7c00u, f16_from_f32, f16_to_f32, f16_nonfinite,
                 f16_stats},
    [AMP_I32] = {"int32", 4, 0, 0, 0.0, 0, NULL, NULL, NULL, NULL},
    /* bf16's largest finite value: (2 - 2^-7) * 2^127 */
    [AMP_BF16] = {"bf16", 2, 1, 1, 0x1.fep127, 0x7f80u, bf16_from_f32, bf16_to_f32,
                  bf16_nonfinite, bf16_stats},
};

int amp_dtype_valid(int dt)
{
	return dt >= 0 && (size_t)dt < sizeof amp_dtype_table / sizeof *amp_dtype_table &&
	       amp_dtype_table[dt].name != NULL;
}

const char *amp_dtype_name(amp_dtype dt)
{
	return amp_dtype_valid((int)dt) ? amp_dt(dt)->name : "?";
}

size_t amp_dtype_size(amp_dtype dt)
{
	return amp_dtype_valid((int)dt) ? amp_dt(dt)->size : 0;
}

/* stats_scalar.c — the portable statistics path (plain C, one element at a time), the
 * reference the vector paths are tested against, and the dispatch of amp_stats_f32/_f16/_bf16.
 * bf16 statistics are those of the exactly widened fp32 values: blocks widened into L1 by the
 * active path's converter (exact on every path) and taken by the path's fp32 kernel, merged
 * (exactly) block by block.
 */
#include "kernels/stats_impl.h"

/* x: (n) fp32 -> st. */
static void stats_f32_scalar(const float *x, int64_t n, amp_stats *st)
{
	stats_acc s;
	acc_init(&s);
	for (int64_t i = 0; i < n; i++)
		elem_f32(&s, x[i]);
	acc_finish(&s, st);
}

/* x: (n) fp16 -> st. */
static void stats_f16_scalar(const uint16_t *x, int64_t n, amp_stats *st)
{
	stats_acc s;
	acc_init(&s);
	for (int64_t i = 0; i < n; i++)
		elem_f16(&s, x[i]);
	acc_finish(&s, st);
}

const amp_stats_table amp_stats_scalar_table = {
	.f32 = stats_f32_scalar,
	.f16 = stats_f16_scalar,
};

static const amp_stats_table *stats_table(amp_isa isa)
{
	switch (isa) {
	case AMP_ISA_AVX512:
	case AMP_ISA_AVX512_BF16:
	case AMP_ISA_AVX512_FP16:
	case AMP_ISA_AMX_BF16:
		return amp_stats_avx512_ext() ? &amp_stats_avx512ext_table : &amp_stats_avx512bw_table;
	case AMP_ISA_AVX2: return &amp_stats_avx2_table;
	case AMP_ISA_SCALAR: break;
	}
	return &amp_stats_scalar_table;
}

/* Elements of bf16 widened per block (16 KiB of fp32 on the stack: stays in L1). */
#define BF16_BLOCK 4096

/* x: (n) bf16 -> st, with f32 (a path's fp32 kernel) on widened blocks. */
static void stats_bf16_with(void (*f32)(const float *, int64_t, amp_stats *), const uint16_t *x,
                            int64_t n, amp_stats *st)
{
	float w[BF16_BLOCK];
	if (n <= BF16_BLOCK) {
		amp_cvt_bf16_f32(x, w, n);
		f32(w, n, st);
		return;
	}
	amp_stats_init(st);
	for (int64_t i0 = 0; i0 < n; i0 += BF16_BLOCK) {
		int64_t m = n - i0 < BF16_BLOCK ? n - i0 : BF16_BLOCK;
		amp_stats part;
		amp_cvt_bf16_f32(x + i0, w, m);
		f32(w, m, &part);
		amp_stats_merge(st, &part);
	}
}

void amp_stats_f32_on(amp_isa isa, const float *x, int64_t n, amp_stats *st)
{
	stats_table(amp_kernels_usable(isa))->f32(x, n, st);
}

void amp_stats_f16_on(amp_isa isa, const uint16_t *x, int64_t n, amp_stats *st)
{
	stats_table(amp_kernels_usable(isa))->f16(x, n, st);
}

/* x: (n) bf16 -> st on table t: its own bf16 kernel, else its f32 one on widened blocks. */
static void stats_bf16_on_table(const amp_stats_table *t, const uint16_t *x, int64_t n,
                                amp_stats *st)
{
	if (t->bf16)
		t->bf16(x, n, st);
	else
		stats_bf16_with(t->f32, x, n, st);
}

void amp_stats_bf16_on(amp_isa isa, const uint16_t *x, int64_t n, amp_stats *st)
{
	stats_bf16_on_table(stats_table(amp_kernels_usable(isa)), x, n, st);
}

void amp_stats_init(amp_stats *st)
{
	memset(st, 0, sizeof *st);
	st->min = st->max = st->absmax = NAN;
}

void amp_stats_merge(amp_stats *into, const amp_stats *s)
{
	into->count += s->count;
	into->nan += s->nan;
	into->pinf += s->pinf;
	into->ninf += s->ninf;
	into->underflow += s->underflow;
	into->near_overflow += s->near_overflow;
	for (int k = 0; k < AMP_STATS_BINS; k++)
		into->exp_hist[k] += s->exp_hist[k];
	if (isnan(s->min)) /* s has no finite value */
		return;
	if (isnan(into->min) || s->min < into->min)
		into->min = s->min;
	if (isnan(into->max) || s->max > into->max)
		into->max = s->max;
	into->absmax = fmax(-into->min, into->max);
}

/* The active path is one the CPU has (amp_kernels_select refuses the others). */
void amp_stats_f32(const float *x, int64_t n, amp_stats *st)
{
	stats_table(amp_kernels_isa())->f32(x, n, st);
}

void amp_stats_f16(const uint16_t *x, int64_t n, amp_stats *st)
{
	stats_table(amp_kernels_isa())->f16(x, n, st);
}

void amp_stats_bf16(const uint16_t *x, int64_t n, amp_stats *st)
{
	stats_bf16_on_table(stats_table(amp_kernels_isa()), x, n, st);
}

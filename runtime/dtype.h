/* dtype.h — the runtime's dtypes described once (dtype.c): size, float or half, range, and the
 * kernels that convert, count non-finite values and take statistics for each.  Every branch
 * that depends on a dtype reads its row; a new dtype is a new row and the `switch` statements
 * the compiler then names (they have no `default`).
 */
#ifndef AMP_DTYPE_H
#define AMP_DTYPE_H

#include <stddef.h>
#include <stdint.h>

#include "amp/amp.h"
#include "kernels/kernels.h"
#include "kernels/stats.h"

typedef struct amp_dtype_info {
	const char *name;      /* the schema's name: "fp32", "fp16", "int32", "bf16" */
	size_t size;           /* bytes per element */
	int is_float;          /* fp32 or a half type: op inputs, gradients */
	int is_half;           /* fp16 or bf16: what the precision modes compute in */
	double max_finite;     /* largest finite value (0 for int32) */
	uint32_t inf_bits;     /* +Inf's bit pattern (0 for int32): halves' kernels work on bits */
	/* Float types only (NULL for int32).  src: (n) fp32 -> dst: (n) of this dtype, rounded to
	 * nearest even; returns the NaN/Inf count it wrote (0 for fp32). */
	int64_t (*from_f32)(const float *src, void *dst, int64_t n);
	/* src: (n) of this dtype -> dst: (n) fp32, exact. */
	void (*to_f32)(const void *src, float *dst, int64_t n);
	/* NaN + Inf count of x: (n). */
	int64_t (*nonfinite)(const void *x, int64_t n);
	/* One-pass statistics of x: (n) (kernels/stats.h). */
	void (*stats)(const void *x, int64_t n, amp_stats *st);
} amp_dtype_info;

/* Rows indexed by amp_dtype. */
extern const amp_dtype_info amp_dtype_table[];

/* The row of dt, which must be a valid amp_dtype (public entry points check theirs). */
static inline const amp_dtype_info *amp_dt(amp_dtype dt)
{
	return &amp_dtype_table[dt];
}

/* Nonzero if dt is a valid amp_dtype. */
int amp_dtype_valid(int dt);

/* Converting between dtypes is amp_cvt (kernels/kernels.h). */

#endif

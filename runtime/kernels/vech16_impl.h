/* vech16_impl.h — the fp16 arithmetic slots (vadd_h16 .. vscale_h16) of a path without fp16
 * arithmetic: operands widened exactly by the path's cvt_h2f in chunks that stay in L1, the
 * path's fp32 kernel (vec_impl.h), and one rounding back by its cvt_f2h, so each result is the
 * FP32 one rounded once (kernels.h's contract, and the bits the ops computed before these
 * slots existed).  Included by the path files after vec_impl.h and their conversions; the
 * includer defines VECH16_ENGINE, the engine this arithmetic runs on.
 */
#include <stdint.h>

#ifndef VECH16_ENGINE
#error "define VECH16_ENGINE (the engine of the including path) before vech16_impl.h"
#endif

#define H16_CHUNK 256 /* elements per chunk: 1 KiB of fp32 per operand */

typedef void (*h16_fp32_op)(const float *a, const float *b, float *dst, int64_t n);

/* a, b, dst: (n) fp16, dst = a op b by the fp32 kernel op; dst may be a or b (each chunk is
 * read before it is written). */
static inline void h16_binary(h16_fp32_op op, const uint16_t *a, const uint16_t *b,
                              uint16_t *dst, int64_t n)
{
	float fa[H16_CHUNK], fb[H16_CHUNK];
	for (int64_t i = 0; i < n; i += H16_CHUNK) {
		int64_t m = n - i < H16_CHUNK ? n - i : H16_CHUNK;
		cvt_h2f(a + i, fa, m);
		cvt_h2f(b + i, fb, m);
		op(fa, fb, fa, m);
		cvt_f2h(fa, dst + i, m);
	}
}

/* x, y: (rows, cols) fp16, row: (cols) fp16 -> y = x op row on each row; the row is widened
 * once per chunk of columns, not once per row.  Short rows (a classifier's bias of 10) go as
 * whole chunks of rows against the row widened and repeated to a chunk's length, so the
 * conversions and the fp32 kernel run on a chunk at a time, not on ten elements. */
static inline void h16_rows(h16_fp32_op op, const uint16_t *x, const uint16_t *row, uint16_t *y,
                            int64_t rows, int64_t cols)
{
	float fr[H16_CHUNK], fx[H16_CHUNK];
	if (cols > 0 && cols <= H16_CHUNK / 2) {
		int64_t per = H16_CHUNK / cols * cols, n = rows * cols; /* whole rows per chunk */
		cvt_h2f(row, fr, cols);
		for (int64_t i = cols; i < per; i++)
			fr[i] = fr[i - cols];
		for (int64_t i = 0; i < n; i += per) {
			int64_t m = n - i < per ? n - i : per;
			cvt_h2f(x + i, fx, m);
			op(fx, fr, fx, m);
			cvt_f2h(fx, y + i, m);
		}
		return;
	}
	for (int64_t c = 0; c < cols; c += H16_CHUNK) {
		int64_t m = cols - c < H16_CHUNK ? cols - c : H16_CHUNK;
		cvt_h2f(row + c, fr, m);
		for (int64_t r = 0; r < rows; r++) {
			cvt_h2f(x + r * cols + c, fx, m);
			op(fx, fr, fx, m);
			cvt_f2h(fx, y + r * cols + c, m);
		}
	}
}

static void vadd_h16(const uint16_t *a, const uint16_t *b, uint16_t *dst, int64_t n)
{
	h16_binary(vadd_f32, a, b, dst, n);
}

static void vsub_h16(const uint16_t *a, const uint16_t *b, uint16_t *dst, int64_t n)
{
	h16_binary(vsub_f32, a, b, dst, n);
}

static void vmul_h16(const uint16_t *a, const uint16_t *b, uint16_t *dst, int64_t n)
{
	h16_binary(vmul_f32, a, b, dst, n);
}

static void vadd_rows_h16(const uint16_t *x, const uint16_t *row, uint16_t *y, int64_t rows,
                          int64_t cols)
{
	h16_rows(vadd_f32, x, row, y, rows, cols);
}

static void vmul_rows_h16(const uint16_t *x, const uint16_t *row, uint16_t *y, int64_t rows,
                          int64_t cols)
{
	h16_rows(vmul_f32, x, row, y, rows, cols);
}

/* a, dst: (n) fp16, dst = a * s in FP32, rounded once. */
static amp_engine vscale_h16(const uint16_t *a, float s, uint16_t *dst, int64_t n)
{
	float fa[H16_CHUNK];
	for (int64_t i = 0; i < n; i += H16_CHUNK) {
		int64_t m = n - i < H16_CHUNK ? n - i : H16_CHUNK;
		cvt_h2f(a + i, fa, m);
		vscale_f32(fa, s, fa, m);
		cvt_f2h(fa, dst + i, m);
	}
	return VECH16_ENGINE;
}

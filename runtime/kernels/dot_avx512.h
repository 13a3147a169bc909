/* dot_avx512.h — private to the GEMMs' dot products (gemm_avx512fp16.c, kernels_avx512.c): the
 * last additions of four dot products at once.
 */
#ifndef AMP_KERNELS_DOT_AVX512_H
#define AMP_KERNELS_DOT_AVX512_H

#include <immintrin.h>

/* The dot products of four outputs from 16 FP32 lanes each (x_q[l], l < 16), added by halves: l
 * + 8, l + 4, l + 2, l + 1, 128-bit quarters moved across the four instead of each reduced
 * alone.  Lane 4q of the result holds output q; its sum is that of adding x_q's lanes in that
 * order, one at a time. */
__attribute__((target("avx512f"))) static inline __m512 amp_dot_reduce4(__m512 x0, __m512 x1,
                                                                         __m512 x2, __m512 x3)
{
	/* lanes 0-7 of y01: x0[l] + x0[l + 8], lanes 8-15: x1's; y23 likewise */
	__m512 y01 =
	    _mm512_add_ps(_mm512_shuffle_f32x4(x0, x1, 0x44), _mm512_shuffle_f32x4(x0, x1, 0xee));
	__m512 y23 =
	    _mm512_add_ps(_mm512_shuffle_f32x4(x2, x3, 0x44), _mm512_shuffle_f32x4(x2, x3, 0xee));
	/* quarter q of z: y_q[l] + y_q[l + 4] */
	__m512 z = _mm512_add_ps(_mm512_shuffle_f32x4(y01, y23, 0x88),
	                         _mm512_shuffle_f32x4(y01, y23, 0xdd));
	z = _mm512_add_ps(z, _mm512_shuffle_ps(z, z, 0xee));    /* l + 2 */
	return _mm512_add_ps(z, _mm512_shuffle_ps(z, z, 0x55)); /* l + 1 */
}

#endif

/* bf16_interim.c — see bf16_interim.h. */
#include "bf16_interim.h"
#include "dtype.h"
#include "kernels/kernels.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static uint16_t to_bf16(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	if ((u & 0x7fffffffu) > 0x7f800000u)
		return (uint16_t)((u >> 16) | 0x40u);
	u += 0x7fffu + ((u >> 16) & 1u);
	return (uint16_t)(u >> 16);
}

static float from_bf16(uint16_t h)
{
	uint32_t u = (uint32_t)h << 16;
	float f;
	memcpy(&f, &u, 4);
	return f;
}

int64_t amp_cvt_f32_bf16(const float *src, uint16_t *dst, int64_t n)
{
	int64_t bad = 0;
	for (int64_t i = 0; i < n; i++) {
		dst[i] = to_bf16(src[i]);
		bad += (dst[i] & 0x7f80u) == 0x7f80u;
	}
	return bad;
}

void amp_cvt_bf16_f32(const uint16_t *src, float *dst, int64_t n)
{
	for (int64_t i = 0; i < n; i++)
		dst[i] = from_bf16(src[i]);
}

int64_t amp_count_nonfinite_bf16(const uint16_t *a, int64_t n)
{
	int64_t bad = 0;
	for (int64_t i = 0; i < n; i++)
		bad += (a[i] & 0x7f80u) == 0x7f80u;
	return bad;
}

void amp_stats_bf16(const uint16_t *x, int64_t n, amp_stats *st)
{
	float buf[1024];
	amp_stats_init(st);
	for (int64_t i = 0; i < n; i += 1024) {
		int64_t m = n - i < 1024 ? n - i : 1024;
		amp_stats s;
		amp_cvt_bf16_f32(x + i, buf, m);
		amp_stats_f32(buf, m, &s);
		amp_stats_merge(st, &s);
	}
}

int64_t amp_cvt(amp_dtype dst_dt, void *dst, amp_dtype src_dt, const void *src, int64_t n)
{
	if (dst_dt == src_dt) {
		if (dst != src)
			memcpy(dst, src, (size_t)n * amp_dt(src_dt)->size);
		return 0;
	}
	if (src_dt == AMP_F32)
		return amp_dt(dst_dt)->from_f32(src, dst, n);
	if (dst_dt == AMP_F32) {
		amp_dt(src_dt)->to_f32(src, dst, n);
		return 0;
	}
	float *tmp = malloc((size_t)n * sizeof(float));
	if (!tmp)
		return 0;
	amp_dt(src_dt)->to_f32(src, tmp, n);
	int64_t bad = amp_dt(dst_dt)->from_f32(tmp, dst, n);
	free(tmp);
	return bad;
}

amp_engine amp_kernels_vec_engine(void)
{
	return amp_kernels_isa() == AMP_ISA_SCALAR ? AMP_ENGINE_SCALAR : AMP_ENGINE_FP32_FMA;
}

amp_engine amp_kernels_gemm_engine(amp_dtype dt)
{
	(void)dt;
	return amp_kernels_vec_engine();
}

amp_engine amp_gemm(amp_dtype dt, int ta, int tb, int64_t M, int64_t N, int64_t K,
                    const void *A, int64_t lda, const void *B, int64_t ldb, float beta, void *C,
                    int64_t ldc, amp_stats *st)
{
	if (dt == AMP_F32) {
		amp_gemm_f32(ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc);
		if (st) {
			amp_stats_init(st);
			for (int64_t i = 0; i < M; i++) {
				amp_stats s;
				amp_stats_f32((const float *)C + i * ldc, N, &s);
				amp_stats_merge(st, &s);
			}
		}
		return amp_kernels_gemm_engine(dt);
	}
	if (dt == AMP_F16) {
		if (st)
			amp_gemm_f16_stats(ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc, st);
		else
			amp_gemm_f16(ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc);
		return amp_kernels_gemm_engine(dt);
	}
	int64_t ar = ta ? K : M, ac = ta ? M : K, br = tb ? N : K, bc = tb ? K : N;
	float *a = malloc((size_t)(ar * ac) * 4), *b = malloc((size_t)(br * bc) * 4),
	      *c = malloc((size_t)(M * N) * 4);
	if (a && b && c) {
		for (int64_t r = 0; r < ar; r++)
			amp_cvt_bf16_f32((const uint16_t *)A + r * lda, a + r * ac, ac);
		for (int64_t r = 0; r < br; r++)
			amp_cvt_bf16_f32((const uint16_t *)B + r * ldb, b + r * bc, bc);
		for (int64_t r = 0; r < M; r++)
			if (beta != 0.0f) {
				amp_cvt_bf16_f32((const uint16_t *)C + r * ldc, c + r * N, N);
				for (int64_t j = 0; j < N; j++)
					c[r * N + j] *= beta;
			}
		amp_gemm_f32(ta, tb, M, N, K, a, ac, b, bc, beta != 0.0f ? 1.0f : 0.0f, c, N);
		if (st)
			amp_stats_init(st);
		for (int64_t r = 0; r < M; r++) {
			amp_cvt_f32_bf16(c + r * N, (uint16_t *)C + r * ldc, N);
			if (st) {
				amp_stats s;
				amp_stats_bf16((const uint16_t *)C + r * ldc, N, &s);
				amp_stats_merge(st, &s);
			}
		}
	}
	free(a);
	free(b);
	free(c);
	return amp_kernels_gemm_engine(dt);
}

/* kernels_scalar.c — the portable path: plain C, no ISA extensions beyond the compiler's
 * baseline.  It runs on any x86-64 (or any other CPU) and is the reference the vector paths
 * are tested against.
 */
#include "kernels/kernels_impl.h"
#include "vec_impl.h"

/* src: (n) fp32 -> dst: (n) fp16.  Returns the NaN and Inf halves written. */
static int64_t cvt_f2h(const float *src, uint16_t *dst, int64_t n)
{
	int64_t bad = 0;
	for (int64_t i = 0; i < n; i++) {
		uint16_t h = amp_f32_to_f16(src[i]);
		dst[i] = h;
		bad += (h & 0x7c00u) == 0x7c00u;
	}
	return bad;
}

/* src: (n) fp16 -> dst: (n) fp32. */
static void cvt_h2f(const uint16_t *src, float *dst, int64_t n)
{
	for (int64_t i = 0; i < n; i++)
		dst[i] = amp_f16_to_f32(src[i]);
}

/* src: (n) fp32 -> dst: (n) bf16 (integer round to nearest even, vec_impl.h). */
static int64_t cvt_f2b(const float *src, uint16_t *dst, int64_t n)
{
	return cvt_f2b_int(src, dst, n);
}

#define GEMM_MR 4
#define GEMM_NR 8
#define GEMM_MC 64
#define GEMM_KC 256
#define GEMM_NC 512

/* ap: (kc, MR) fp32, bp: (kc, NR) fp32 -> c: (MR, NR) fp32 at row stride ldc, [+]=. */
static void gemm_ukr(int64_t kc, const float *restrict ap, const float *restrict bp,
                     float *restrict c, int64_t ldc, int accumulate, int mr, int nr)
{
	(void)mr, (void)nr;  /* always a full tile: no GEMM_UKR_EDGES here */
	float acc[GEMM_MR][GEMM_NR] = {{0}};
	for (int64_t k = 0; k < kc; k++)
		for (int r = 0; r < GEMM_MR; r++)
			for (int j = 0; j < GEMM_NR; j++)
				acc[r][j] += ap[k * GEMM_MR + r] * bp[k * GEMM_NR + j];
	for (int r = 0; r < GEMM_MR; r++)
		for (int j = 0; j < GEMM_NR; j++)
			c[r * ldc + j] = accumulate ? c[r * ldc + j] + acc[r][j] : acc[r][j];
}

#include "gemm_impl.h"
#include "nn_impl.h"
#define VECH16_ENGINE AMP_ENGINE_SCALAR
#include "vech16_impl.h"

const amp_kernel_table amp_kernels_scalar_table = {
	.isa = AMP_ISA_SCALAR,
	.vec_engine = AMP_ENGINE_SCALAR,
	.vec_engine_h16 = AMP_ENGINE_SCALAR,
	.cvt_f32_f16 = cvt_f2h,
	.cvt_f16_f32 = cvt_h2f,
	.cvt_f32_bf16 = cvt_f2b,
	.cvt_bf16_f32 = cvt_b2f,
	.gemm = {[AMP_F32] = gemm_f32, [AMP_F16] = gemm_f16, [AMP_BF16] = gemm_bf16},
	.gemm_acc32 = {[AMP_F16] = gemm_f16_acc32, [AMP_BF16] = gemm_bf16_acc32},
	.gemm_engine = {[AMP_F32] = AMP_ENGINE_SCALAR, [AMP_F16] = AMP_ENGINE_SCALAR,
	                [AMP_BF16] = AMP_ENGINE_SCALAR},
	.vadd_f32 = vadd_f32,
	.vmul_f32 = vmul_f32,
	.vscale_f32 = vscale_f32,
	.vaxpy_f32 = vaxpy_f32,
	.sgd_update = sgd_update,
	.adamw_update = adamw_update,
	.vadd_h16 = vadd_h16,
	.vsub_h16 = vsub_h16,
	.vmul_h16 = vmul_h16,
	.vadd_rows_h16 = vadd_rows_h16,
	.vmul_rows_h16 = vmul_rows_h16,
	.vscale_h16 = vscale_h16,
	.count_nonfinite_f32 = count_nonfinite_f32,
	.count_nonfinite_f16 = count_nonfinite_f16,
	.count_nonfinite_bf16 = count_nonfinite_bf16,
	.relu_f32 = relu_f32,
	.relu_h16 = relu_h16,
	.relu_grad_f32 = relu_grad_f32,
	.relu_grad_h16 = relu_grad_h16,
	.gelu_f32 = gelu_f32,
	.gelu_grad_f32 = gelu_grad_f32,
	.im2col = im2col,
	.col2im_add_f32 = col2im_add_f32,
	.maxpool_plane = maxpool_plane,
};

/* kernels_avx512fp16.c — the avx512-fp16 path's table: the CPU-feature set of AVX512_FP16
 * (cpuid 7.0 EDX bit 23, vfmadd231ph).  Its native fp16 GEMM is a standalone file
 * (amp_gemm_f16_avx512fp16); until its slot is filled here every kernel falls back to the
 * avx512 path, so forcing this path on a CPU that has it runs the avx512 kernels.
 */
#include "kernels/kernels_impl.h"

const amp_kernel_table amp_kernels_avx512fp16_table = {
	.isa = AMP_ISA_AVX512_FP16,
};

/* kernels_amxbf16.c — the amx-bf16 path's table: the CPU-feature set of AMX-TILE + AMX-BF16
 * (tdpbf16ps), available once Linux grants the tile state (dispatch.c's amx_init).  Its tile
 * GEMM is a standalone file (amp_gemm_bf16_amx); until its slot is filled here every kernel
 * falls back to the avx512-bf16 path.
 */
#include "kernels/kernels_impl.h"

const amp_kernel_table amp_kernels_amxbf16_table = {
	.isa = AMP_ISA_AMX_BF16,
};

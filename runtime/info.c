/* info.c — what the library and this CPU can do, for `ampprof info` and for programs that want
 * to say which engine their half types will run on (amp.h, "the library and the CPU"). */
#include <string.h>

#include "internal.h"

const char *amp_version(void)
{
	return AMP_VERSION_STRING;
}

unsigned amp_wire_version(void)
{
	return AMP_WIRE_VERSION;
}

int amp_kernel_path_count(void)
{
	return AMP_ISA_COUNT;
}

const char *amp_kernel_path_name(int i)
{
	return i >= 0 && i < AMP_ISA_COUNT ? amp_isa_name((amp_isa)i) : NULL;
}

const char *amp_kernel_path_missing(int i)
{
	const char *name = amp_kernel_path_name(i);
	return name ? amp_kernels_path_missing(name) : "a path of that number";
}

const char *amp_gemm_engine(amp_dtype dt)
{
	return amp_dtype_valid((int)dt) && amp_dt(dt)->is_float
	           ? amp_engine_name(amp_kernels_gemm_engine(dt))
	           : amp_engine_name(AMP_ENGINE_NONE);
}

const char *amp_gemm_engine_note(amp_dtype dt)
{
	/* "auto"'s choice only: a path forced by name is the user's */
	if (dt == AMP_BF16 && amp_kernels_dpbf16_half_rate() &&
	    strcmp(amp_kernels_selection(), "auto") == 0 &&
	    amp_kernels_gemm_engine(AMP_BF16) == AMP_ENGINE_FP32_FMA)
		return "vdpbf16ps computes half the products per cycle of FP32 FMA on Intel cores, so "
		       "bf16 products run on FP32 FMA (bf16 widened while packing); "
		       "AMP_KERNELS=avx512-bf16 forces vdpbf16ps";
	return NULL;
}

const char *amp_elementwise_engine(void)
{
	return amp_engine_name(amp_kernels_vec_engine());
}

const char *amp_elementwise_engine_of(amp_dtype dt)
{
	return amp_engine_name(dt == AMP_F16 ? amp_kernels_h16_engine() : amp_kernels_vec_engine());
}

const char *amp_kernel_path_active(void)
{
	return amp_isa_name(amp_kernels_isa());
}

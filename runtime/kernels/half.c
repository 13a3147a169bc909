/* half.c — the runtime's scalar IEEE binary16 <-> binary32 conversions, by name: the
 * definitions are amp_half.h's (shared with ampdump and ampview), bit-exact to the F16C
 * instructions with round-to-nearest-even.
 */
#include "amp_half.h"
#include "kernels/kernels.h"

uint16_t amp_f32_to_f16(float f)
{
	return amp_half_f32_to_f16(f);
}

float amp_f16_to_f32(uint16_t h)
{
	return amp_half_f16_to_f32(h);
}

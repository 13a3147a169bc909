/* half.c — scalar IEEE binary16 <-> binary32 conversions in portable integer arithmetic.
 *
 * Bit-exact to the F16C instructions with round-to-nearest-even: subnormals kept (no FTZ/DAZ),
 * overflow to +-Inf, NaN quieted with its sign and top payload bits kept.  Uses no FP unit
 * state, so the MXCSR rounding mode and flags do not matter.
 */
#include <string.h>

#include "kernels/kernels.h"

uint16_t amp_f32_to_f16(float f)
{
	uint32_t x;
	memcpy(&x, &f, sizeof x);
	uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
	x &= 0x7fffffffu;

	if (x >= 0x38800000u) {                 /* |f| >= 2^-14: a normal half, Inf or NaN */
		if (x >= 0x477ff000u) {         /* >= 65520 (halfway past 65504) rounds to Inf */
			if (x > 0x7f800000u)    /* NaN: quiet it, keep the top 9 payload bits */
				return (uint16_t)(sign | 0x7e00u | ((x >> 13) & 0x3ffu));
			return (uint16_t)(sign | 0x7c00u);
		}
		/* Rebias the exponent (127 -> 15) and round the 13 dropped bits to nearest even;
		 * a carry out of the mantissa correctly bumps the exponent. */
		uint32_t m = x - 0x38000000u;
		m += 0x0fffu + ((m >> 13) & 1u);
		return (uint16_t)(sign | (m >> 13));
	}
	if (x <= 0x33000000u)                   /* <= 2^-25: the tie at 2^-25 rounds to even 0 */
		return sign;
	/* Subnormal half: value in units of 2^-24 is mant >> shift, shift in 14..24. */
	uint32_t e = x >> 23;
	uint32_t mant = (x & 0x7fffffu) | 0x800000u;
	uint32_t shift = 126u - e;
	uint32_t q = mant >> shift;
	uint32_t rem = mant & ((1u << shift) - 1u);
	uint32_t half = 1u << (shift - 1u);
	if (rem > half || (rem == half && (q & 1u)))
		q++;                            /* may reach 0x400, the smallest normal: still right */
	return (uint16_t)(sign | q);
}

float amp_f16_to_f32(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
	uint32_t e = (h >> 10) & 0x1fu;
	uint32_t m = h & 0x3ffu;
	uint32_t x;

	if (e == 0x1fu)                         /* Inf, or NaN quieted as vcvtph2ps does */
		x = sign | 0x7f800000u | (m << 13) | (m ? 0x400000u : 0u);
	else if (e != 0)
		x = sign | ((e + 112u) << 23) | (m << 13);
	else if (m == 0)
		x = sign;
	else {                                  /* subnormal half: normalise, m * 2^-24 */
		uint32_t p = 31u - (uint32_t)__builtin_clz(m);  /* leading bit, 0..9 */
		x = sign | ((p + 103u) << 23) | ((m << (23u - p)) & 0x7fffffu);
	}
	float f;
	memcpy(&f, &x, sizeof f);
	return f;
}

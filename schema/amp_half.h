/* amp_half.h — the scalar FP16 and BF16 conversions shared by the runtime, ampdump and ampview:
 * header-only (static inline), portable integer arithmetic, no dependence on the FP unit's
 * rounding mode or flags and on nothing but <stdint.h> and <string.h>.
 *
 * All narrowing rounds to nearest even with gradual underflow (subnormals kept, no FTZ/DAZ),
 * overflows to +-Inf as IEEE rounding does, and quiets a NaN keeping its sign and top payload
 * bits.  All widening is exact.
 */
#ifndef AMP_HALF_H
#define AMP_HALF_H

#include <stdint.h>
#include <string.h>

static inline uint32_t amp_half_bits_of_f32(float f)
{
	uint32_t x;
	memcpy(&x, &f, sizeof x);
	return x;
}

static inline float amp_half_f32_of_bits(uint32_t x)
{
	float f;
	memcpy(&f, &x, sizeof f);
	return f;
}

/* fp32 -> IEEE binary16 bits; bit-exact to vcvtps2ph with round-to-nearest-even. */
static inline uint16_t amp_half_f32_to_f16(float f)
{
	uint32_t x = amp_half_bits_of_f32(f);
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

/* IEEE binary16 bits -> fp32 (exact); a NaN comes out quiet with its payload, as vcvtph2ps. */
static inline float amp_half_f16_to_f32(uint16_t h)
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
		uint32_t p = 0;                 /* leading bit of m, 0..9 */
		while ((m >> (p + 1u)) != 0)
			p++;
		x = sign | ((p + 103u) << 23) | ((m << (23u - p)) & 0x7fffffu);
	}
	return amp_half_f32_of_bits(x);
}

/* fp32 -> bfloat16 bits (the upper half of an fp32), round to nearest even on the 16 dropped
 * bits.  Subnormal inputs round like any other (vcvtneps2bf16 instead reads them as zero); a
 * carry out of the mantissa bumps the exponent, so values from 0x7f7f8000 up round to Inf.
 * A NaN keeps its sign and top 7 payload bits and is made quiet (bit 6 set). */
static inline uint16_t amp_half_f32_to_bf16(float f)
{
	uint32_t x = amp_half_bits_of_f32(f);
	if ((x & 0x7fffffffu) > 0x7f800000u)
		return (uint16_t)((x >> 16) | 0x0040u);
	return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

/* bfloat16 bits -> fp32: exact, every pattern (a NaN keeps its bits). */
static inline float amp_half_bf16_to_f32(uint16_t b)
{
	return amp_half_f32_of_bits((uint32_t)b << 16);
}

#endif

/* half.c — dtypes of dumped tensors and their exact conversion to float and double.
 *
 * dump/ must not link the runtime's converters (DESIGN §1), so this is a small scalar one:
 * every binary16 value is exactly representable in binary32, NaNs come out quiet with their
 * payload kept, as vcvtph2ps does.  Data is little-endian, as on the host.
 */
#include <string.h>

#include "dump.h"

dump_dtype dump_dtype_parse(const char *name)
{
	if (!name)
		return DUMP_DT_UNKNOWN;
	if (strcmp(name, "fp32") == 0)
		return DUMP_DT_F32;
	if (strcmp(name, "fp16") == 0)
		return DUMP_DT_F16;
	if (strcmp(name, "bf16") == 0)
		return DUMP_DT_BF16;
	if (strcmp(name, "int32") == 0)
		return DUMP_DT_I32;
	return DUMP_DT_UNKNOWN;
}

size_t dump_dtype_size(dump_dtype dt)
{
	switch (dt) {
	case DUMP_DT_F32:
	case DUMP_DT_I32: return 4;
	case DUMP_DT_F16:
	case DUMP_DT_BF16: return 2;
	default: return 0;
	}
}

static float float_of_bits(uint32_t bits)
{
	float f;
	memcpy(&f, &bits, sizeof f);
	return f;
}

float dump_half_to_float(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
	uint32_t exp = (h >> 10) & 0x1fu;
	uint32_t mant = h & 0x3ffu;
	uint32_t bits;

	if (exp == 0x1f) {
		bits = sign | 0x7f800000u | (mant << 13);
		if (mant)
			bits |= 0x00400000u; /* quiet, like vcvtph2ps */
	} else if (exp == 0) {
		if (mant == 0) {
			bits = sign;
		} else {
			/* subnormal: mant * 2^-24; normalize so the leading 1 is bit 10 */
			int e = -14;
			while (!(mant & 0x400u)) {
				mant <<= 1;
				e--;
			}
			mant &= 0x3ffu;
			bits = sign | ((uint32_t)(e + 127) << 23) | (mant << 13);
		}
	} else {
		bits = sign | ((exp + 112u) << 23) | (mant << 13);
	}
	return float_of_bits(bits);
}

double dump_half_to_double(uint16_t h)
{
	return (double)dump_half_to_float(h);
}

float dump_bf16_to_float(uint16_t b)
{
	return float_of_bits((uint32_t)b << 16);
}

double dump_element(const unsigned char *data, dump_dtype dt, size_t i)
{
	switch (dt) {
	case DUMP_DT_F32: {
		float f;
		memcpy(&f, data + 4 * i, sizeof f);
		return (double)f;
	}
	case DUMP_DT_F16: {
		uint16_t h;
		memcpy(&h, data + 2 * i, sizeof h);
		return dump_half_to_double(h);
	}
	case DUMP_DT_BF16: {
		uint16_t b;
		memcpy(&b, data + 2 * i, sizeof b);
		return (double)dump_bf16_to_float(b);
	}
	case DUMP_DT_I32: {
		int32_t v;
		memcpy(&v, data + 4 * i, sizeof v);
		return (double)v;
	}
	default: return 0.0;
	}
}

void dump_to_double(const unsigned char *data, dump_dtype dt, size_t n, double *out)
{
	for (size_t i = 0; i < n; i++)
		out[i] = dump_element(data, dt, i);
}

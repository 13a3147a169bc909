/* half.c — dtypes of dumped tensors and their exact conversion to float and double.
 *
 * dump/ must not link the runtime's converters (docs/ARCHITECTURE.md §2); it uses the header-only ones of
 * schema/amp_half.h: every binary16 and bfloat16 value is exactly representable in binary32,
 * fp16 NaNs come out quiet with their payload kept, as vcvtph2ps does.  Data is little-endian,
 * as on the host.
 */
#include <string.h>

#include "amp_half.h"
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

/* The decoders are amp_half.h's, shared with the runtime and the viewer. */
float dump_half_to_float(uint16_t h)
{
	return amp_half_f16_to_f32(h);
}

double dump_half_to_double(uint16_t h)
{
	return (double)amp_half_f16_to_f32(h);
}

float dump_bf16_to_float(uint16_t b)
{
	return amp_half_bf16_to_f32(b);
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

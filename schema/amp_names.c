/* amp_names.c — names of the event enums, shared by the runtime and every tool.  These strings
 * are what the database stores in its text columns and what lists in amp.cfg accept. */
#include "amp_events.h"

#include <string.h>

static const char *const op_names[AMP_OP_COUNT] = {
	[AMP_OP_MATMUL] = "MatMul",           [AMP_OP_BATCH_MATMUL] = "BatchMatMul",
	[AMP_OP_LINEAR] = "Linear",           [AMP_OP_CONV2D] = "Conv2D",
	[AMP_OP_MAXPOOL2D] = "MaxPool2D",     [AMP_OP_ADD] = "Add",
	[AMP_OP_MUL] = "Mul",                 [AMP_OP_SCALE] = "Scale",
	[AMP_OP_BIAS_ADD] = "BiasAdd",        [AMP_OP_RELU] = "ReLU",
	[AMP_OP_GELU] = "GELU",               [AMP_OP_SOFTMAX] = "Softmax",
	[AMP_OP_LOG_SOFTMAX] = "LogSoftmax",  [AMP_OP_LOG] = "Log",
	[AMP_OP_EXP] = "Exp",                 [AMP_OP_SQRT] = "Sqrt",
	[AMP_OP_POW] = "Pow",                 [AMP_OP_LAYER_NORM] = "LayerNorm",
	[AMP_OP_CROSS_ENTROPY] = "CrossEntropy", [AMP_OP_SUM] = "Sum",
	[AMP_OP_MEAN] = "Mean",               [AMP_OP_RESHAPE] = "Reshape",
	[AMP_OP_TRANSPOSE] = "Transpose",     [AMP_OP_EMBEDDING] = "Embedding",
	[AMP_OP_DROPOUT] = "Dropout",         [AMP_OP_OPTIMIZER] = "Optimizer",
	[AMP_OP_SUB] = "Sub",                 [AMP_OP_DIV] = "Div",
	[AMP_OP_NEG] = "Neg",                 [AMP_OP_ABS] = "Abs",
	[AMP_OP_MAXIMUM] = "Maximum",         [AMP_OP_MINIMUM] = "Minimum",
	[AMP_OP_CLAMP] = "Clamp",             [AMP_OP_SIGMOID] = "Sigmoid",
	[AMP_OP_TANH] = "Tanh",               [AMP_OP_MAX] = "Max",
	[AMP_OP_BATCH_NORM2D] = "BatchNorm2D", [AMP_OP_AVGPOOL2D] = "AvgPool2D",
	[AMP_OP_GLOBAL_AVGPOOL2D] = "GlobalAvgPool2D", [AMP_OP_CONCAT] = "Concat",
	[AMP_OP_SLICE] = "Slice",
};

const char *amp_op_name(amp_op_type op)
{
	return (unsigned)op < AMP_OP_COUNT ? op_names[op] : "?";
}

int amp_op_from_name(const char *name)
{
	for (int i = 0; i < AMP_OP_COUNT; i++)
		if (strcmp(op_names[i], name) == 0)
			return i;
	return -1;
}

const char *amp_phase_name(amp_phase ph)
{
	static const char *const names[] = {"forward", "backward", "optimizer"};
	return (unsigned)ph < 3 ? names[ph] : "?";
}

const char *amp_copy_kind_name(amp_copy_kind k)
{
	static const char *const names[] = {"h2d", "d2h", "d2d", "cast", "layout", "master"};
	return (unsigned)k < 6 ? names[k] : "?";
}

const char *amp_scale_reason_name(amp_scale_reason r)
{
	static const char *const names[] = {"hold", "growth", "overflow", "init", "static"};
	return (unsigned)r < 5 ? names[r] : "?";
}

const char *amp_mem_category_name(amp_mem_category c)
{
	static const char *const names[] = {"master_weights", "working_copies", "activations",
	                                    "grads", "optimizer_state"};
	return (unsigned)c < AMP_MEM_NCAT ? names[c] : "?";
}

const char *amp_drop_kind_name(unsigned kind)
{
	static const char *const names[AMP_DROP_KINDS] = {
	    [AMP_DROP_OP] = "ops", [AMP_DROP_COPY] = "copies", [AMP_DROP_TSTATS] = "tensor_stats",
	    [AMP_DROP_MEMORY] = "memory", [AMP_DROP_DUMP] = "dumps", [AMP_DROP_OTHER] = "other"};
	return kind < AMP_DROP_KINDS ? names[kind] : "?";
}

const char *amp_dtype_code_name(unsigned code)
{
	static const char *const names[AMP_DTYPE_COUNT] = {
	    [AMP_DTYPE_F32] = "fp32", [AMP_DTYPE_F16] = "fp16", [AMP_DTYPE_I32] = "int32",
	    [AMP_DTYPE_BF16] = "bf16"};
	return code < AMP_DTYPE_COUNT ? names[code] : "?";
}

int amp_dtype_code_from_name(const char *name)
{
	for (unsigned i = 0; name && i < AMP_DTYPE_COUNT; i++)
		if (strcmp(amp_dtype_code_name(i), name) == 0)
			return (int)i;
	return -1;
}

int amp_dtype_code_is_half(unsigned code)
{
	return code == AMP_DTYPE_F16 || code == AMP_DTYPE_BF16;
}

static const char *const engine_names[AMP_ENGINE_COUNT] = {
    [AMP_ENGINE_NONE] = "none",           [AMP_ENGINE_SCALAR] = "scalar",
    [AMP_ENGINE_FP32_FMA] = "fp32-fma",   [AMP_ENGINE_AVX512_BF16] = "avx512-bf16",
    [AMP_ENGINE_AVX512_FP16] = "avx512-fp16", [AMP_ENGINE_AMX_BF16] = "amx-bf16",
};

const char *amp_engine_name(amp_engine e)
{
	return (unsigned)e < AMP_ENGINE_COUNT ? engine_names[e] : "?";
}

int amp_engine_from_name(const char *name)
{
	for (int i = 0; name && i < AMP_ENGINE_COUNT; i++)
		if (strcmp(engine_names[i], name) == 0)
			return i;
	return -1;
}

int amp_engine_is_half(amp_engine e)
{
	switch (e) {
	case AMP_ENGINE_AVX512_BF16:
	case AMP_ENGINE_AVX512_FP16:
	case AMP_ENGINE_AMX_BF16:
		return 1;
	case AMP_ENGINE_NONE:
	case AMP_ENGINE_SCALAR:
	case AMP_ENGINE_FP32_FMA:
	case AMP_ENGINE_COUNT:
		return 0;
	}
	return 0;
}

amp_op_list amp_op_default_list(amp_op_type op)
{
	switch (op) {
	case AMP_OP_MATMUL:
	case AMP_OP_BATCH_MATMUL:
	case AMP_OP_LINEAR:
	case AMP_OP_CONV2D:
		return AMP_LIST_WHITE;
	case AMP_OP_SOFTMAX:
	case AMP_OP_LOG_SOFTMAX:
	case AMP_OP_LOG:
	case AMP_OP_EXP:
	case AMP_OP_SQRT:
	case AMP_OP_POW:
	case AMP_OP_LAYER_NORM:
	case AMP_OP_CROSS_ENTROPY:
	case AMP_OP_SUM:
	case AMP_OP_MEAN:
	case AMP_OP_MAX:
	case AMP_OP_BATCH_NORM2D:
	case AMP_OP_OPTIMIZER:
		return AMP_LIST_BLACK;
	case AMP_OP_MAXPOOL2D:
	case AMP_OP_ADD:
	case AMP_OP_MUL:
	case AMP_OP_SCALE:
	case AMP_OP_BIAS_ADD:
	case AMP_OP_RELU:
	case AMP_OP_GELU:
	case AMP_OP_RESHAPE:
	case AMP_OP_TRANSPOSE:
	case AMP_OP_EMBEDDING:
	case AMP_OP_DROPOUT:
	case AMP_OP_SUB:
	case AMP_OP_DIV:
	case AMP_OP_NEG:
	case AMP_OP_ABS:
	case AMP_OP_MAXIMUM:
	case AMP_OP_MINIMUM:
	case AMP_OP_CLAMP:
	case AMP_OP_SIGMOID:
	case AMP_OP_TANH:
	case AMP_OP_AVGPOOL2D:
	case AMP_OP_GLOBAL_AVGPOOL2D:
	case AMP_OP_CONCAT:
	case AMP_OP_SLICE:
	case AMP_OP_COUNT:
		return AMP_LIST_GRAY;
	}
	return AMP_LIST_GRAY;
}

const char *amp_op_list_name(amp_op_list l)
{
	switch (l) {
	case AMP_LIST_WHITE: return "white";
	case AMP_LIST_BLACK: return "black";
	case AMP_LIST_GRAY: return "gray";
	}
	return "?";
}

const char *amp_role_name(unsigned role)
{
	static const char *const names[AMP_ROLE_COUNT] = {
	    [AMP_ROLE_INPUT] = "input", [AMP_ROLE_OUTPUT] = "output", [AMP_ROLE_GRAD] = "grad"};
	return role < AMP_ROLE_COUNT ? names[role] : "?";
}

const char *amp_dump_reason_name(unsigned reason)
{
	static const char *const names[AMP_DUMP_REASON_COUNT] = {
	    [AMP_DUMP_REASON_NONFINITE] = "nonfinite", [AMP_DUMP_REASON_STEP] = "step",
	    [AMP_DUMP_REASON_MANUAL] = "manual"};
	return reason < AMP_DUMP_REASON_COUNT ? names[reason] : "?";
}

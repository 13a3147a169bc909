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

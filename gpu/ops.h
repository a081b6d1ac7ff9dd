// The op vocabulary of task graphs: what each op is, for the executor (gpu/executor.cc), the
// symbolic shape rules (gpu/shapes.h) and the code generator (gpu/codegen/codegen.h).
#ifndef VINCI_GPU_OPS_H_
#define VINCI_GPU_OPS_H_

#include <cstddef>
#include <cstdint>
#include <string>

namespace vinci {

enum class OpKind {
  kUnary,    // elementwise, one input: relu, gelu, mul_scalar, clamp, ...
  kBinary,   // elementwise, two inputs; the second may broadcast (bias, per-channel scale)
  kGemm,     // matmul (with batch and transposes), linear
  kReduce,   // reduce one dim: sum, mean, amax, amin, logsumexp, norm_l2
  kRowNorm,  // same shape out, normalised along a dim: softmax, log_softmax, rms_norm, layer_norm
  kLibrary,  // run by a library call only: conv, pooling, batch/group norm, scans, losses, views
};

// Every op, in the order of the table in gpu/ops.cc; resolved from its name once (op_code) and
// compared as a value: a misspelt op does not compile.
enum class OpCode : uint8_t {
  kRelu,
  kLeakyRelu,
  kSigmoid,
  kTanh,
  kGelu,
  kSilu,
  kElu,
  kSelu,
  kSoftplus,
  kSoftsign,
  kHardsigmoid,
  kHardswish,
  kHardtanh,
  kMish,
  kExp,
  kLog,
  kAbs,
  kSquare,
  kSqrt,
  kClamp,
  kMulScalar,
  kAddScalar,
  kDivScalar,
  kAdd,
  kSub,
  kMul,
  kDiv,
  kMatmul,
  kLinear,
  kSum,
  kMean,
  kAmax,
  kAmin,
  kLogsumexp,
  kNormL2,
  kSoftmax,
  kLogSoftmax,
  kRmsNorm,
  kLayerNorm,
  kBatchNorm,
  kGroupNorm,
  kConv1d,
  kConv2d,
  kConv3d,
  kConvTranspose1d,
  kConvTranspose2d,
  kConvTranspose3d,
  kMaxPool1d,
  kMaxPool2d,
  kMaxPool3d,
  kAvgPool2d,
  kAdaptiveAvgPool2d,
  kCumsum,
  kCumprod,
  kReshape,
  kFlatten,
  kPermute,
  kTranspose,
  kSplit,
  kCausalMask,
  kSelfAttention,
  kMseLoss,
  kCrossEntropy,
  kSmoothL1Loss,
  kKlDiv,
  kHingeLoss,
  kCosineSimilarityLoss,
  kAvgPool1d,
  kAvgPool3d,
  kAdaptiveAvgPool3d,
  kInstanceNorm,
  kConcat,
  kSlice,
  kSelect,
  kEinsum,
  kLstm,
  kGru,
  kElmanRnn,
  kExpand,
  kTriu,
  kTril,
  kFrobeniusNorm,
  kArgmax,
  kArgmin,
  kCumsumReverse,
  kCumsumExclusive,
  kScaledDotProductAttention,
  kTripletMarginLoss,
  kPad,
  kRoll,
  kNormalize,
  kRelativePositionBias,
  kUnknown,  // a name that is no op (a task file naming one is refused when it is read)
};
constexpr size_t kOpCount = static_cast<size_t>(OpCode::kUnknown);

struct OpInfo {
  OpCode code;
  const char* name;
  OpKind kind;
  int inputs;          // number of inputs; -1: one or more (concat)
  const char* module;  // required module type, "" when none
};

// nullptr when the op is unknown.
const OpInfo* find_op(const std::string& name);
// The op of a name; OpCode::kUnknown when there is none.
OpCode op_code(const std::string& name);
// The op's name as task files write it.
const char* op_name(OpCode code);

// All known ops, for error messages ("expected one of ...").
std::string known_op_names();

// Convolutions (conv1d..3d, conv_transpose1d..3d) and the transposed ones among them.
bool op_is_conv(OpCode code);
bool op_is_transposed_conv(OpCode code);
// Pooling: max_pool1d..3d, avg_pool1d..3d, adaptive_avg_pool2d and 3d.
bool op_is_pool(OpCode code);
// The spatial rank of a convolution or a pooling op (conv2d, max_pool2d: 2); 0 for any other op.
int op_spatial_rank(OpCode code);

// True for ops whose outputs are int64 indices (argmax, argmin); every other op writes float32.
bool op_outputs_indices(const std::string& name);

}  // namespace vinci

#endif  // VINCI_GPU_OPS_H_

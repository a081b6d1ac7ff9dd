// The op vocabulary of task graphs: what each op is, for the executor (gpu/executor.cc), the
// symbolic shape rules (gpu/shapes.h) and the code generator (gpu/codegen/codegen.h).
#ifndef VINCI_GPU_OPS_H_
#define VINCI_GPU_OPS_H_

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

struct OpInfo {
  const char* name;
  OpKind kind;
  int inputs;          // number of inputs; -1: one or more (concat)
  const char* module;  // required module type, "" when none
};

// nullptr when the op is unknown.
const OpInfo* find_op(const std::string& name);

// All known ops, for error messages ("expected one of ...").
std::string known_op_names();

// True for ops whose outputs are int64 indices (argmax, argmin); every other op writes float32.
bool op_outputs_indices(const std::string& name);

}  // namespace vinci

#endif  // VINCI_GPU_OPS_H_

// The CUDA code generator: (task, schedule knobs) -> kernel plan.
//
// The generator walks the task's op graph in order and forms groups:
//   gemm          matmul / linear, then (fusion = fused) the elementwise ops that follow, as an
//                 epilogue on the accumulator: shared-memory tiling with register blocking, or
//                 tf32 tensor cores through wmma;
//   row_reduction sum/mean/amax/amin/logsumexp/norm_l2 over one dim, softmax/log_softmax
//                 (online single pass or two-pass), rms_norm and layer_norm, with warp-shuffle,
//                 shared-memory-tree or block-shuffle reductions, then unary epilogue ops;
//   elementwise   a chain of unary/binary ops (broadcast operands: same shape, one broadcast
//                 dim, or a scalar), vectorised and fused into one kernel;
//   library       every other op (convolution, pooling, batch/group norm, scans, losses, views)
//                 as a library step.
// Each generated kernel carries its cost formulas and a verdict: guaranteed correct, or risky
// with the reason and, where it is size-dependent, the condition under which it is wrong.
#ifndef VINCI_GPU_CODEGEN_CODEGEN_H_
#define VINCI_GPU_CODEGEN_CODEGEN_H_

#include <map>
#include <string>

#include "core/status.h"
#include "gpu/codegen/knobs.h"
#include "gpu/plan.h"
#include "gpu/task.h"

namespace vinci {

// The knobs that matter for this task: `fusion` when it has two or more ops, then the families
// its graph can use (elementwise, row_reduction, gemm), in that order.
KnobSpace knob_space(const Task& task);

// The plan for one knob setting. REQUIRES nothing of the setting: a malformed one is an error.
Result<Plan> generate_plan(const Task& task, const KnobSetting& setting);
Result<Plan> generate_plan(const Task& task, const std::map<std::string, std::string>& values);
// The generator's default setting: every knob at its default choice.
Result<Plan> default_plan(const Task& task);
// The eager-equivalent plan: one library step per op, as PyTorch eager runs it (origin "eager").
Result<Plan> eager_plan(const Task& task);

}  // namespace vinci

#endif  // VINCI_GPU_CODEGEN_CODEGEN_H_

// The libtorch executor: runs any task's op graph as the reference computation.
//
// Weights are drawn the way PyTorch's default initialisation draws them after manual_seed(42), in
// the modules' construction order, on the CPU generator (so CPU and CUDA instances hold equal
// weights), then moved to the instance's device. Modules run in training mode (BatchNorm uses
// batch statistics) as KernelBench runs them. Inputs come from a CPU torch generator seeded per
// (task, trial, distribution): the U[0,1) distribution is bit-identical to KernelBench's
// torch.rand after torch.manual_seed(seed).
//
// Torch types are only forward-declared here; callers that touch tensors include torch.
#ifndef VINCI_GPU_EXECUTOR_H_
#define VINCI_GPU_EXECUTOR_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "gpu/precision.h"
#include "gpu/task.h"

namespace at {
class Tensor;
}
namespace c10 {
enum class ScalarType : int8_t;  // as c10/core/ScalarType.h declares it
}

namespace vinci {

enum class InputDistribution {
  kUniform01,    // KernelBench's torch.rand: U[0, 1)
  kSigned,       // U[-1, 1): breaks shortcuts that assume non-negative inputs
  kHeavyTailed,  // N(0,1) * exp(N(0,1)): a log-normal scale mixture, kurtosis ~ 160
};
const char* distribution_name(InputDistribution d);

// The distribution of correctness trial t, for every evaluator: KernelBench's U[0,1) first, then
// signed and heavy-tailed draws (docs/method.md, Reward hacking), repeating.
InputDistribution trial_distribution(int64_t trial);
Result<InputDistribution> parse_distribution(const std::string& name);

// The torch generator seed for one trial's inputs, drawn from the keyed stream
// (root_seed, task, trial, distribution), so trials never share inputs and no draw depends on
// evaluation order.
uint64_t input_seed(uint64_t root_seed, const std::string& task_id, int64_t trial, InputDistribution dist);

// PyTorch's weight seed in KernelBench (torch.manual_seed(42) before building the model).
constexpr uint64_t kWeightSeed = 42;

// The floating type a library step computes in (PlanStep::precision bf16, fp16; FP32 otherwise).
enum class StepType { kFloat32, kBFloat16, kFloat16 };
StepType step_type(Precision precision);

// A task at concrete sizes on one device, with its weights.

class TaskInstance {
 public:
  // device: a torch device string, "cpu" or "cuda:0". REQUIRES: task outlives the instance
  // (the instance keeps a pointer to it, as the suite owns its tasks).
  static Result<TaskInstance> create(const Task& task, SizeName size, const std::string& device,
                                     uint64_t weight_seed = kWeightSeed);
  static Result<TaskInstance> create_at(const Task& task, const SizeMap& sizes, const std::string& device,
                                        uint64_t weight_seed = kWeightSeed);
  TaskInstance(TaskInstance&&) noexcept;
  TaskInstance& operator=(TaskInstance&&) noexcept;
  ~TaskInstance();

  const Task& task() const;
  const SizeMap& sizes() const;

  // Inputs in the task's order. seed seeds a CPU torch generator; tensors are then moved to the
  // instance's device.
  // TODO(perf): a CUDA-generator path for full sizes, where CPU draws dominate evaluation time
  // (docs/method.md, KernelBench task suite: 79 s for one [4096, 393216] input); it would not be
  // KernelBench-identical.
  Result<std::vector<at::Tensor>> make_inputs(InputDistribution dist, uint64_t seed) const;
  // The same distributions drawn by the device's own generator (torch's CUDA Philox seeded with
  // seed) on a CUDA instance: deterministic for one torch version, not KernelBench-identical, and
  // thousands of times faster for full-size inputs of billions of elements. On a CPU instance it
  // is make_inputs.
  Result<std::vector<at::Tensor>> make_inputs_on_device(InputDistribution dist, uint64_t seed) const;
  // Elements of all inputs at this instance's sizes.
  Result<int64_t> input_elements() const;

  // The task's output for these inputs.
  Result<at::Tensor> run(const std::vector<at::Tensor>& inputs) const;
  // Every named value: inputs, weights ("fc1.weight") and every op output.
  Result<std::map<std::string, at::Tensor>> run_all(const std::vector<at::Tensor>& inputs) const;
  // The task's output computed in float64: FP32 inputs and weights widened, every op run on them.
  // The exact result a float32 reference and a candidate both approximate (gpu/live/live_compare.h,
  // float64_check). A failure of the device (out of memory, say) is an error, not an exception.
  Result<at::Tensor> run_float64(const std::vector<at::Tensor>& inputs) const;

  // One op of the graph over given tensors: how a plan's library step runs. A 16-bit step rounds
  // its FP32 operands (and the op's weights) to that type, computes in it, and widens its outputs
  // back to FP32.
  Result<std::vector<at::Tensor>> run_op(const OpSpec& op, const std::vector<at::Tensor>& inputs,
                                         StepType type = StepType::kFloat32) const;

  // Weights in construction order, named as gpu/shapes.h's WeightSpec.
  const std::vector<std::pair<std::string, at::Tensor>>& weights() const;

  struct Impl;  // defined in executor.cc, where torch is included

 private:
  Result<std::map<std::string, at::Tensor>> run_values(const std::vector<at::Tensor>& inputs, bool float64) const;
  Result<std::vector<at::Tensor>> run_op_in(const OpSpec& op, const std::vector<at::Tensor>& inputs,
                                            c10::ScalarType compute) const;
  explicit TaskInstance(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace vinci

#endif  // VINCI_GPU_EXECUTOR_H_

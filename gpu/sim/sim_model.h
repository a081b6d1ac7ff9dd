// The simulated device: a deterministic analytic performance and correctness model of one GPU
// (a DeviceProfile), for kernel plans (gpu/plan.h).
//
// Time of a plan = the sum over its steps of
//   launches x (launch [+ library dispatch]) + max(floor, body / family efficiency)
// where body is a roofline with efficiency terms driven by the plan's knobs: bytes really moved
// (vector width and in-flight bytes, re-reads, intermediates that fusion removes, L2 residency of
// buffers an earlier step touched), achieved occupancy (block size, registers estimated from the
// knobs, shared memory) and its effect on latency hiding, CUDA cores vs tf32 tensor cores, GEMM
// tile reuse, reduction strategy, and tail effects (waves). Library steps run at library-class
// efficiency. The reference is the eager plan: one library step per task op. docs/sim_model.md
// gives every equation and the source of every constant.
//
// Correctness follows the code generator's Verdict: guaranteed settings are correct; risky ones
// fail as the live evaluator would see them (missing tail handling exactly when `fails_when` is
// nonzero at the size; tf32 or fast-math precision when the tolerance is below its error; races
// always).
//
// Everything here is a pure function of (profile, task, sizes, plan): no clock, no randomness.
#ifndef VINCI_GPU_SIM_SIM_MODEL_H_
#define VINCI_GPU_SIM_SIM_MODEL_H_

#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "gpu/eval_result.h"
#include "gpu/expr.h"
#include "gpu/plan.h"
#include "gpu/shapes.h"
#include "gpu/sim/device_profile.h"
#include "gpu/task.h"

namespace vinci {

// A step's execution time from its body under the profile's launch floor and efficiency term.
// SimModel prices with these and calibration replays a step with them when only those figures
// change, so a replayed time is the priced one bit for bit.
// A kernel: max(launch.kernel_floor_us, body / efficiency); 0 for an empty launch.
inline double kernel_exec_us(const DeviceProfile& p, bool empty_launch, double body_us, double efficiency) {
  return empty_launch ? 0 : std::max(p.kernel_floor_us, body_us / efficiency);
}
// A library step: as a kernel, 0 for no launches and at least one floor a launch, plus its casts
// (a 16-bit product's): max(cast_launches x kernel_floor_us, cast_body_us / efficiency.library_other).
inline double library_exec_us(const DeviceProfile& p, int launches, double body_us, double efficiency,
                              int cast_launches, double cast_body_us) {
  double exec_us = launches == 0 ? 0 : std::max(p.kernel_floor_us, body_us / efficiency);
  if (launches > 1) exec_us = std::max(exec_us, launches * p.kernel_floor_us);
  if (cast_launches > 0) exec_us += std::max(cast_launches * p.kernel_floor_us, cast_body_us / p.eff_library_other);
  return exec_us;
}

namespace sim_internal {
class PlanCoster;  // gpu/sim/sim_model.cc: the cost model of one prediction
}  // namespace sim_internal

// What a step of a plan is, for the cost model: a kernel of the plan's own (its KernelFamily), a
// library matrix product, another library op, or a view (no launch).
enum class StepFamily { kElementwise, kRowReduction, kGemm, kCustom, kLibraryGemm, kLibraryOther, kView };
// "elementwise", "row_reduction", "gemm", "custom", "library_gemm", "library_other", "view".
const char* step_family_name(StepFamily family);
StepFamily step_family_of(KernelFamily family);

// What bounds a step's time: the roofline term that wins, the latency of its reductions, the
// launch floor, no launch at all, or a launch the device refuses (too many resources a block).
enum class StepBound { kNone, kMemory, kL2, kCompute, kShared, kLatency, kFloor, kRefused };
// "none", "memory", "l2", "compute", "shared", "latency", "floor", "refused".
const char* step_bound_name(StepBound bound);

// What one step of a plan costs.
struct StepPrediction {
  std::string what;  // kernel name, or "library:<op>"
  StepFamily family = StepFamily::kCustom;
  bool own_kernel = false;  // a kernel of the plan's own (counts toward time coverage)
  int launches = 0;
  double launch_us = 0;  // launch and dispatch overhead
  double exec_us = 0;    // execution on the device
  // How exec_us follows from the profile: kernel_exec_us and library_exec_us below; launch_us is
  // launch.kernel_us (a library step: launches x (kernel_us + library_dispatch_us)). body_us reads
  // no launch figure and no efficiency term.
  double body_us = 0;
  double DeviceProfile::*efficiency = nullptr;
  bool empty_launch = false;  // a kernel launch of no blocks or no threads
  // A 16-bit library product's casts of its operands and output (counted in launches too; their
  // time is in library_exec_us). cast_body_us reads no launch figure and no efficiency term.
  int cast_launches = 0;
  double cast_body_us = 0;
  double time_us = 0;  // launch_us + exec_us
  double dram_bytes = 0;
  double l2_bytes = 0;  // bytes served by L2 (re-reads, resident buffers)
  double flops = 0;
  int64_t blocks = 0;
  int64_t blocks_per_sm = 0;
  double occupancy = 0;  // resident warps / max warps per SM
  double waves = 0;
  StepBound bound = StepBound::kNone;
};

struct PlanPrediction {
  double time_us = 0;
  double own_us = 0;  // time in the plan's own kernels
  std::vector<StepPrediction> steps;
};

// The fastest any plan could run the task: every input, weight and output moved once at the
// datasheet bandwidth, matrix products at the tensor-core peak, the rest at the fp32 peak, one
// launch. reference / floor is the roofline bound on a believable speedup.
struct TaskBound {
  double min_bytes = 0;
  double gemm_flops = 0;
  double other_flops = 0;
  double floor_us = 0;
};

struct CorrectnessPrediction {
  bool correct = true;
  std::string error;     // why not, in the words the live evaluator would use
  double rel_error = 0;  // the arithmetic's expected relative error (a 3-sigma figure)
  // The live evaluator's rejection tag where the first failure is one it tags the same way
  // ("out_of_memory"); the sim evaluator flags it "rejected: <tag>". Empty otherwise.
  std::string rejected;
};

// A task at concrete sizes, prepared once: every value's and weight's shape, the expression
// environment, the eager reference and the roofline bound. Predictions of many plans of one task
// share it. Not thread-safe: its expression cache is written by predictions.
class TaskContext {
 public:
  const Task& task() const { return *task_; }
  const SizeMap& sizes() const { return env_.symbols; }
  const PlanPrediction& reference() const { return reference_; }
  const TaskBound& bound() const { return bound_; }
  // Shape of a task value or weight at these sizes; nullptr when unknown.
  const std::vector<int64_t>* shape(const std::string& name) const;

 private:
  friend class SimModel;
  friend class sim_internal::PlanCoster;
  const Task* task_ = nullptr;
  ExprEnv env_;
  std::map<std::string, std::vector<int64_t>> shapes_;  // values and weights
  std::map<std::string, const OpSpec*> producer_;       // value -> the op that makes it
  std::vector<WeightSpec> weights_;                     // weight_specs(task), for every repricing
  PlanPrediction reference_;
  TaskBound bound_;
  // Expressions without buffer functions depend on the sizes alone: evaluated once.
  mutable std::unordered_map<std::string, int64_t> expr_cache_;
};

class SimModel {
 public:
  explicit SimModel(DeviceProfile profile);
  const DeviceProfile& profile() const { return profile_; }

  // REQUIRES: task outlives the context.
  Result<TaskContext> prepare(const Task& task, const SizeMap& sizes) const;
  // Prices a prepared context's reference and roofline bound again under this model's profile
  // (the shapes stay): calibration tries many profiles on one preparation.
  Status reprice(TaskContext* context) const;

  // Time of a plan. Errors: an expression that does not evaluate, a buffer without a shape, a
  // library op the model has no cost for. A launch the device would refuse (too many threads or
  // too much shared memory) is not an error here: predict_correctness reports it.
  Result<PlanPrediction> predict(const TaskContext& ctx, const Plan& plan) const;

  Result<CorrectnessPrediction> predict_correctness(const TaskContext& ctx, const Plan& plan,
                                                    const Tolerance& tol) const;
  // The largest absolute error tensor-core products (precision tf32, bf16 or fp16) add to the
  // output of a matrix product (linear, matmul) on the evaluator's trials: 2 * u * sqrt(2K) *
  // rms(A) * rms(B), u the operands' unit roundoff (2^-11 for tf32 and fp16, 2^-8 for bf16): two
  // roundings per product, K products adding up like a random walk, the largest of millions of
  // outputs about 2 standard deviations out. 0 for other ops and, in the library (cuBLAS runs it
  // on CUDA cores), for a TF32 matrix-vector product. An output near zero fails when this exceeds
  // atol. largest (when given): the largest output, K * rms(A) * rms(B), which a 16-bit library
  // output must hold (fp16 overflows past 65504).
  double product_abs_error(const TaskContext& ctx, const OpSpec& op, Precision precision, bool library,
                           double* largest) const;
  // The factor the ops after a product's output `value` apply to its error (sim_model.cc says
  // which): sqrt(N) for a sum over N outputs, 1 / spread after a normalization (spread: one
  // output's typical size), 0 after a softmax, 1 when the walk stops.
  double error_downstream(const TaskContext& ctx, const std::string& value, double spread) const;
  // The profile's relative error of products in this precision (fp16 takes tf32's: the same mantissa).
  double precision_rel_error(Precision precision) const;

  // Blocks of `threads` threads using `registers` per thread and `shared_bytes` each that fit on
  // one SM (0: the launch is refused).
  int64_t blocks_per_sm(int64_t threads, int64_t registers, int64_t shared_bytes) const;

 private:
  DeviceProfile profile_;
};

}  // namespace vinci

#endif  // VINCI_GPU_SIM_SIM_MODEL_H_

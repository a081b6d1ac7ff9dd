// The sim evaluator: the Evaluator interface over the analytic device model (gpu/sim/sim_model.h).
//
// A deterministic function of (task, plan, profile, request, options): the record it returns is
// the live evaluator's record with evaluator = "sim". What the sim can know it checks as the live
// evaluator does: a plan that fails validation does not "compile"; a launch the device refuses,
// missing tail handling at this size, precision below the tolerance and races fail every trial; a
// plan with no kernel of its own is a decoy; a
// speedup past the task's roofline bound is flagged.
//
// Timing noise (optional): sample i of a series is t * exp(sigma * z_i), z_i a standard normal
// from the keyed stream (seed, "sim_timing", task, plan address, series, i), for the kernel and
// the reference series alike (the live evaluator times the reference beside each candidate), so
// the median stays near t and the same key always gives the same sample. sigma = 0 gives
// bit-identical samples.
//
// Compiling: a plan of origin "codegen" whose address is the address of generate_plan(task,
// plan.knobs) is the generator's own (CI compiles every kernel the generator writes) and is not
// compiled again. Every other plan's kernels are compiled with NVRTC (no GPU needed; cached by
// source address); one that does not compile gives compiled = false, correct = false and NVRTC's
// message, as the live evaluator would. The verdict depends only on the source and the NVRTC
// version, which such a record carries in its settings ("nvrtc"), so recorded runs replay.
#ifndef VINCI_GPU_SIM_SIM_EVALUATOR_H_
#define VINCI_GPU_SIM_SIM_EVALUATOR_H_

#include <map>
#include <memory>
#include <string>

#include "gpu/compile/nvrtc.h"
#include "gpu/eval_result.h"
#include "gpu/sim/sim_model.h"

namespace vinci {

struct SimEvaluatorOptions {
  double noise = 0;  // relative spread (sigma of the log-normal) of timing samples; 0: none
  // Speedups above this multiple of the roofline bound are flagged (the bound is an ideal; a
  // small margin keeps rounding from flagging an honest plan that reaches it).
  double roofline_margin = 1.05;
  // Kernels of plans that are not the code generator's own are compiled with NVRTC for this
  // architecture (the profile's GPU: sm_90 for the H200); the cache folder is shared with other
  // processes (empty: memory only).
  std::string nvrtc_arch = "sm_90";
  std::string nvrtc_cache_dir;
  PlanLimits limits;  // gpu/plan.h; those not at their default are recorded in settings
};

class SimEvaluator : public Evaluator {
 public:
  SimEvaluator(DeviceProfile profile, SimEvaluatorOptions options = {});

  // Not thread-safe: task contexts are cached per (task, size). One evaluator per thread.
  // A plan a model wrote (origin "llm") carries no metadata to price it by: it is priced as the
  // generator's plan it equals up to metadata (gpu/model_plan.h, match_generated_plan; flagged
  // priced_as_generated_plan), or reported not priceable (flag not_priceable, never correct).
  Result<EvalResult> evaluate(const Task& task, const Plan& plan, const EvalRequest& request) override;
  Result<EvalResult> evaluate_model_plan(const Task& task, const Plan& plan, const EvalRequest& request);
  std::string name() const override { return "sim"; }

  const SimModel& model() const { return model_; }
  const SimEvaluatorOptions& options() const { return options_; }

  // The prepared context of a task at a size (cached): the reference and roofline bound.
  Result<const TaskContext*> context(const Task& task, SizeName size);

 private:
  // True when the plan is the code generator's own (see above); cached by plan address.
  bool generators_own(const Task& task, const Plan& plan, const Digest& address);
  // NVRTC's verdict on every kernel of the plan: "" when all compile, else the failure, named by
  // kernel. warnings gets NVRTC's logs of the kernels that compiled.
  std::string compile_kernels(const Plan& plan, std::string* warnings);
  // validate_plan's verdict ("" when valid, else why not), a pure function of the plan and the
  // task: checked once per plan address and task, as the run evaluates one plan many times.
  const std::string& plan_invalid(const Task& task, const Plan& plan, const Digest& address);

  SimModel model_;
  SimEvaluatorOptions options_;
  std::map<std::pair<std::string, int>, std::unique_ptr<TaskContext>> contexts_;
  std::unique_ptr<NvrtcCompiler> nvrtc_;                                // made on the first plan that needs it
  std::map<Digest, bool> generators_own_;                               // plan address -> the generator's own
  std::map<std::pair<Digest, const Task*>, std::string> plan_invalid_;  // -> validate_plan's message
  std::map<Digest, std::string> compile_failures_;                      // kernel source address -> NVRTC's error
};

// The compile verdict, as every evaluator (sim and live) records it: a plan that did not compile
// ends its evaluation (error "compile: <log>", the record finalized; returns false); one that did
// is marked compiled and, with no kernel of its own, flagged a decoy: a plan that launches only
// library kernels is no solution on any task (KernelGYM's rule), even where the generator has no
// kernel for the task's ops (a convolution): returning the reference's own calls earns nothing.
// log becomes the record's compile log either way.
bool record_compile_verdict(EvalResult* r, const Plan& plan, bool compiled, const std::string& log);

// The limits check, as every evaluator records it: a plan over a limit ends its evaluation
// (compiled = false, flag "rejected: over_limit", error "compile: plan over a limit: <reason>";
// returns false).
bool record_limit_verdict(EvalResult* r, const Plan& plan, const PlanLimits& limits);

}  // namespace vinci

#endif  // VINCI_GPU_SIM_SIM_EVALUATOR_H_

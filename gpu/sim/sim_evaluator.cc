#include "gpu/sim/sim_evaluator.h"

#include "gpu/model_plan.h"

#include <cmath>
#include <cstdio>

#include "core/rng.h"
#include "core/text.h"
#include "gpu/codegen/codegen.h"
#include "gpu/compile/triton.h"
#include "gpu/executor.h"
#include "gpu/kernelbench_module.h"
#include "gpu/ops.h"

namespace vinci {
namespace {

// The kernel must name its entry point as an extern "C" __global__ function; NVRTC would fail
// to find it otherwise. The sim compiles nothing, so this is all it can check of a source.
std::string compile_check(const Plan& plan) {
  for (const auto& k : plan.kernels) {
    if (k.source.find("__global__") == std::string::npos || k.source.find(k.name) == std::string::npos)
      return "kernel " + k.name + ": no __global__ function named '" + k.name + "' in its source";
  }
  return "";
}

std::vector<double> samples(double t, int n, double sigma, const RngKey& key) {
  std::vector<double> out(static_cast<size_t>(std::max(n, 0)), t);
  if (sigma <= 0) return out;
  for (int i = 0; i < n; ++i) {
    Stream s(key.with("sample", i));
    out[static_cast<size_t>(i)] = t * std::exp(sigma * s.normal());
  }
  return out;
}

}  // namespace

bool record_compile_verdict(EvalResult* r, const Plan& plan, bool compiled, const std::string& log) {
  r->compile_log = log;
  r->compiled = compiled;
  if (!compiled) {
    r->error = "compile: " + log;
    r->finalize();
    return false;
  }
  r->decoy = plan.library_only();
  if (r->decoy) r->flags.push_back("decoy: no kernel of its own");
  return true;
}

bool record_limit_verdict(EvalResult* r, const Plan& plan, const PlanLimits& limits) {
  std::string over = plan_limit_error(plan, limits);
  if (over.empty()) return true;
  r->flags.push_back("rejected: over_limit");
  r->compile_log = "plan over a limit: " + over;
  r->compiled = false;
  r->error = "compile: " + r->compile_log;
  r->finalize();
  return false;
}

SimEvaluator::SimEvaluator(DeviceProfile profile, SimEvaluatorOptions options)
    : model_(std::move(profile)), options_(options) {}

bool SimEvaluator::generators_own(const Task& task, const Plan& plan, const Digest& address) {
  if (plan.origin != "codegen") return false;
  auto it = generators_own_.find(address);
  if (it != generators_own_.end()) return it->second;
  Result<Plan> generated = generate_plan(task, plan.knobs);
  bool own = generated.ok() && plan_address(*generated) == address;
  generators_own_.emplace(address, own);
  return own;
}

std::string SimEvaluator::compile_kernels(const Plan& plan, std::string* warnings) {
  if (!nvrtc_) {
    NvrtcOptions no;
    no.arch = options_.nvrtc_arch;
    no.cache_dir = options_.nvrtc_cache_dir;
    nvrtc_ = std::make_unique<NvrtcCompiler>(no);
  }
  for (const auto& k : plan.kernels) {
    Digest source = kernel_source_address(k.source);
    auto failed = compile_failures_.find(source);
    if (failed != compile_failures_.end()) return "kernel " + k.name + ": " + failed->second;
    Result<std::shared_ptr<const CompiledKernel>> bin = nvrtc_->compile(k.source, k.name + ".cu");
    if (!bin.ok()) {
      compile_failures_.emplace(source, bin.status().message());
      return "kernel " + k.name + ": " + bin.status().message();
    }
    if (!(*bin)->log.empty()) *warnings += "kernel " + k.name + ": " + (*bin)->log;
  }
  return "";
}

const std::string& SimEvaluator::plan_invalid(const Task& task, const Plan& plan, const Digest& address) {
  auto key = std::make_pair(address, &task);
  auto it = plan_invalid_.find(key);
  if (it == plan_invalid_.end()) {
    Status valid = validate_plan(plan, task);
    it = plan_invalid_.emplace(key, valid.ok() ? std::string() : valid.message()).first;
  }
  return it->second;
}

Result<const TaskContext*> SimEvaluator::context(const Task& task, SizeName size) {
  auto key = std::make_pair(task.id, static_cast<int>(size));
  auto it = contexts_.find(key);
  if (it != contexts_.end() && &it->second->task() == &task) return it->second.get();
  auto sizes = task.sizes.find(size_name(size));
  if (sizes == task.sizes.end()) return not_found("task " + task.id + ": no '" + size_name(size) + "' sizes");
  VINCI_ASSIGN_OR_RETURN(TaskContext ctx, model_.prepare(task, sizes->second));
  auto& slot = contexts_[key];
  slot = std::make_unique<TaskContext>(std::move(ctx));
  return slot.get();
}

Result<EvalResult> SimEvaluator::evaluate_model_plan(const Task& task, const Plan& plan, const EvalRequest& request) {
  if (!plan_limit_error(plan, options_.limits).empty()) {
    EvalResult r;
    r.evaluator = name();
    r.device = model_.profile().name;
    r.plan = plan_address(plan);
    r.size = size_name(request.size);
    add_limit_settings(options_.limits, &r.settings);
    record_limit_verdict(&r, plan, options_.limits);
    add_unreached_trials(&r, task.id, request);
    r.finalize();
    return r;
  }
  std::optional<Plan> generated;
  if (!plan.is_module()) generated = match_generated_plan(task, plan);
  if (generated) {
    VINCI_ASSIGN_OR_RETURN(EvalResult r, evaluate(task, *generated, request));
    r.plan = plan_address(plan);
    r.flags.push_back("priced_as_generated_plan");
    r.finalize();
    return r;
  }
  EvalResult r;
  r.evaluator = name();
  r.device = model_.profile().name;
  r.plan = plan_address(plan);
  r.size = size_name(request.size);
  r.flags.push_back("not_priceable");
  if (plan.is_module()) add_module_static_flags(plan.module, &r.flags);
  r.error = plan.is_module()
                ? "not priceable in the sim world: a KernelBench module runs arbitrary PyTorch, which the simulator "
                  "cannot price (docs/kernelbench_format.md)"
            : has_triton_kernels(plan)
                ? "not priceable in the sim world: the simulator prices only kernels the code generator emits, "
                  "and it emits no Triton (evaluate it on a GPU: device.kind = \"cuda\")"
                : "not priceable in the sim world: the simulator prices only kernels the code generator "
                  "emits, and this plan is not one of them (evaluate it on a GPU: device.kind = \"cuda\")";
  add_unreached_trials(&r, task.id, request);
  r.finalize();
  return r;
}

Result<EvalResult> SimEvaluator::evaluate(const Task& task, const Plan& plan, const EvalRequest& request) {
  if (request.trials < 1 || request.samples < 1)
    return invalid_argument("eval request: trials and samples must be >= 1, found " + std::to_string(request.trials) +
                            " and " + std::to_string(request.samples));
  if (plan.task_id != task.id)
    return invalid_argument("plan is for task '" + plan.task_id + "', evaluated on '" + task.id + "'");
  // A model's plan, or any plan with Triton kernels: priced only as the generator plan it equals.
  if (plan.origin == "llm" || plan.is_module() || has_triton_kernels(plan))
    return evaluate_model_plan(task, plan, request);
  VINCI_ASSIGN_OR_RETURN(const TaskContext* ctx, context(task, request.size));
  const DeviceProfile& p = model_.profile();
  Tolerance tol = tolerance_for(task, request);

  EvalResult r;
  r.evaluator = name();
  r.device = p.name;
  r.plan = plan_address(plan);
  r.size = size_name(request.size);
  r.settings = {{"noise", exact_number(options_.noise)},
                {"profile", p.name},
                {"roofline_margin", exact_number(options_.roofline_margin)},
                {"samples", std::to_string(request.samples)},
                {"strict", request.strict ? "true" : "false"},
                {"tolerance", exact_number(tol.atol) + "," + exact_number(tol.rtol)},
                {"trials", std::to_string(request.trials)}};
  // The live evaluator times the reference beside every candidate, so each evaluation draws its
  // own reference samples: the key names the plan for both series.
  RngKey timing =
      RngKey::root(request.seed).with("purpose", "sim_timing").with("task", task.id).with("plan", r.plan.hex());
  r.reference_times_us =
      samples(ctx->reference().time_us, request.samples, options_.noise, timing.with("series", "reference"));

  add_limit_settings(options_.limits, &r.settings);
  if (!record_limit_verdict(&r, plan, options_.limits)) return r;

  // "Compile": the plan must be well formed for the task and name its entry points.
  const std::string& invalid = plan_invalid(task, plan, r.plan);
  std::string log = invalid.empty() ? compile_check(plan) : invalid;
  if (!invalid.empty()) r.flags.push_back("rejected: invalid_plan");
  bool compiled = log.empty();
  if (compiled && !plan.kernels.empty() && !generators_own(task, plan, r.plan)) {
    // Not the generator's own: compile it, as the live evaluator does.
    r.settings["nvrtc"] = nvrtc_version() + " " + options_.nvrtc_arch;
    std::string failure = compile_kernels(plan, &log);
    if (!failure.empty()) {
      compiled = false;
      log += failure;
    }
  }
  if (!record_compile_verdict(&r, plan, compiled, log)) return r;

  VINCI_ASSIGN_OR_RETURN(CorrectnessPrediction c, model_.predict_correctness(*ctx, plan, tol));
  r.correct = c.correct;
  r.error = c.error;
  if (!c.rejected.empty()) r.flags.push_back("rejected: " + c.rejected);
  for (int t = 0; t < request.trials; ++t) {
    InputDistribution d = trial_distribution(t);
    TrialResult tr;
    tr.correct = c.correct;
    // The sim predicts a relative error; outputs of unit scale make it the absolute one. A wrong
    // output is NaN: the poisoned or unwritten elements the live evaluator would compare.
    tr.max_abs_err = c.correct ? c.rel_error : std::nan("");
    tr.mean_abs_err = c.correct ? c.rel_error / 3 : std::nan("");
    tr.distribution = distribution_name(d);
    tr.seed = input_seed(request.seed, task.id, t, d);
    r.trials.push_back(tr);
  }
  if (!c.correct) {  // as KernelBench: a wrong candidate is not timed
    r.finalize();
    return r;
  }
  VINCI_ASSIGN_OR_RETURN(PlanPrediction pred, model_.predict(*ctx, plan));
  r.kernel_times_us = samples(pred.time_us, request.samples, options_.noise, timing.with("series", "kernel"));
  // Adaptive: the same keyed draws, the series cut where the rule stops (a prefix of the fixed
  // protocol's samples, so the two protocols can be compared sample for sample).
  if (request.adaptive)
    apply_adaptive_timing(request.adaptive_rule, &r.kernel_times_us, &r.reference_times_us, &r.settings);
  r.time_coverage = pred.time_us > 0 ? pred.own_us / pred.time_us : 0;
  r.finalize();
  double bound = ctx->reference().time_us / ctx->bound().floor_us;
  if (r.speedup > bound * options_.roofline_margin) {
    char buf[120];
    std::snprintf(buf, sizeof buf, "speedup past roofline: %.3g > bound %.3g", r.speedup, bound);
    r.flags.push_back(buf);
    r.finalize();
  }
  return r;
}

}  // namespace vinci

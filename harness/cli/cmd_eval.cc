// `harness eval`: evaluate one plan on one task and print the result record.
//
//   harness eval TASK_ID [--plan FILE | --knob NAME=VALUE ...] [--device sim|cuda]
//                        [--size full|small] [--seed N] [--trials N] [--samples N] [--strict]
//                        [--noise X] [--profile FILE] [--tasks DIR] [--explain]
//                        [--timeout S] [--launch-timeout S] [--nvrtc-cache DIR] [--reference-precision P]
//                        [--max-kernel-source-bytes N] [--max-plan-source-bytes N] [--max-kernels N]
//                        [--max-steps N] [--timing fixed|adaptive] [--timing-width W]
//
// prints the EvalResult as one line of JSON (the Measurement's field names). FILE holds plan JSON, a KernelBench
// module defining ModelNew (a .py file, or a reply with a ```python block; docs/kernelbench_format.md), or a reply in
// the model-facing format (docs/plan_format.md: a ```cuda or ```triton block and a ```launch block). Without --plan the
// plan is the code generator's: its default setting, or the --knob values over it. --explain adds
// the simulator's per-step breakdown on stderr. --device cuda evaluates on this machine's GPU in a
// worker process (gpu/live/cuda_evaluator.h); the compile and evaluation times go to stderr. Exit status: 0 the
// candidate compiled and is correct, 1 it did not compile or is wrong, 2 bad usage or an error.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <boost/program_options.hpp>

#include "core/atomic_file.h"
#include "core/cli.h"
#include "core/text.h"
#include "gpu/codegen/codegen.h"
#include "gpu/compile/module_check.h"
#include "gpu/eval_result.h"
#include "gpu/kernelbench_module.h"
#include "gpu/live/cuda_evaluator.h"
#include "gpu/live/live_eval.h"
#include "gpu/model_plan.h"
#include "gpu/sim/device_profile.h"
#include "gpu/sim/sim_evaluator.h"
#include "gpu/task_prompt.h"
#include "harness/cli/commands.h"

namespace vinci {
namespace {

namespace po = boost::program_options;

int fail(const std::string& what) {
  std::fprintf(stderr, "harness eval: %s\n", what.c_str());
  return 2;
}

// A KernelBench module (or a reply holding one): a .py file, or text with a line `class ModelNew`.
bool is_module_path_or_text(const std::string& path, const std::string& text) {
  if (path.size() > 3 && path.compare(path.size() - 3, 3, ".py") == 0) return true;
  return text.rfind("class ModelNew", 0) == 0 || text.find("\nclass ModelNew") != std::string::npos;
}

// The plan to evaluate: --plan FILE (plan JSON; a KernelBench module defining ModelNew, alone or
// in a reply's ```python block; or a reply in the model-facing format: ```cuda or ```triton, and
// ```launch), else the generator's plan with the --knob settings. Errors are the
// messages harness eval prints.
Result<Plan> plan_to_evaluate(const std::string& plan_path, const std::vector<std::string>& knobs, const Task& task) {
  if (!plan_path.empty()) {
    Result<std::string> text = read_file(plan_path, kPlanFile);
    if (!text.ok()) return invalid_argument("--plan: " + text.status().message());
    const std::string& t = *text;
    size_t first = t.find_first_not_of(" \t\r\n");
    if (first != std::string::npos && t[first] == '{') {
      Result<Plan> p = parse_plan(t);
      if (!p.ok()) return invalid_argument(plan_path + ": " + p.status().message());
      return p;
    }
    if (is_module_path_or_text(plan_path, t)) {
      Result<std::string> module = extract_module_answer(t);
      if (!module.ok()) return invalid_argument(plan_path + ": " + module.status().message());
      Plan p = module_plan(task.id, std::move(module).value());
      Status valid = validate_plan(p, task);
      if (!valid.ok()) return invalid_argument(plan_path + ": " + valid.message());
      return p;
    }
    Result<Plan> p = parse_model_plan(t, task);
    if (!p.ok()) return invalid_argument(plan_path + ": " + p.status().message());
    return p;
  }
  std::map<std::string, std::string> values;
  for (const auto& kv : knobs) {
    size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) return invalid_argument("--knob: expected NAME=VALUE, found '" + kv + "'");
    values[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  Result<Plan> p = values.empty() ? default_plan(task) : generate_plan(task, values);
  if (!p.ok()) return invalid_argument(p.status().to_string());
  return p;
}

// --device cuda: the record on stdout, the worker's times (and with --profile-phases, each
// phase's) on stderr. The exit code as cmd_eval's.
int evaluate_on_gpu(const CudaEvaluatorOptions& co, const Task& task, const Plan& plan, const EvalRequest& request) {
  CudaEvaluator evaluator(co);
  Result<EvalResult> r = evaluator.evaluate(task, plan, request);
  if (!r.ok()) return fail(r.status().to_string());
  std::cout << eval_result_to_json(*r).dump() << "\n";
  CudaEvaluatorStats st = evaluator.stats();
  std::fprintf(stderr, "%s on %s: %s; compile %.1f ms (%d kernels), evaluation %.1f ms, round trip %.1f ms\n",
               task.id.c_str(), evaluator.device_name().c_str(),
               r->correct ? "correct" : ("rejected: " + r->error).c_str(), st.compile_ms, st.kernels_compiled,
               st.eval_ms, st.round_trip_ms);
  if (!st.phase_ms.empty()) {
    std::string line = "phases (ms):";
    double sum = 0;
    for (const char* p : kLivePhases) {
      auto it = st.phase_ms.find(p);
      double v = it == st.phase_ms.end() ? 0 : it->second;
      sum += v;
      line += " " + std::string(p) + " " + format_number("%.1f", v);
    }
    std::fprintf(stderr, "%s; sum %.1f\n", line.c_str(), sum);
  }
  return r->compiled && r->correct ? 0 : 1;
}

// --explain: the sim's per-step breakdown of the plan and of the eager reference, and the
// roofline floor, on stderr.
Status explain_sim(SimEvaluator& evaluator, const Task& task, const Plan& plan, SizeName size) {
  VINCI_ASSIGN_OR_RETURN(const TaskContext* ctx, evaluator.context(task, size));
  VINCI_ASSIGN_OR_RETURN(PlanPrediction pred, evaluator.model().predict(*ctx, plan));
  auto table = [](const char* title, const PlanPrediction& p) {
    std::fprintf(stderr, "%s: %.2f us\n", title, p.time_us);
    std::fprintf(stderr, "  %-26s %-14s %10s %10s %11s %11s %11s %7s %5s %6s %9s %s\n", "step", "family", "launch_us",
                 "exec_us", "dram_bytes", "l2_bytes", "flops", "blocks", "bps", "occ", "waves", "bound");
    for (const auto& s : p.steps)
      std::fprintf(stderr, "  %-26s %-14s %10.2f %10.2f %11.4g %11.4g %11.4g %7lld %5lld %6.2f %9.2f %s\n",
                   s.what.c_str(), step_family_name(s.family), s.launch_us, s.exec_us, s.dram_bytes, s.l2_bytes,
                   s.flops, static_cast<long long>(s.blocks), static_cast<long long>(s.blocks_per_sm), s.occupancy,
                   s.waves, step_bound_name(s.bound));
  };
  table("plan", pred);
  table("reference (eager)", ctx->reference());
  std::fprintf(stderr, "roofline floor: %.2f us (%.4g bytes, %.4g gemm flops, %.4g other flops)\n",
               ctx->bound().floor_us, ctx->bound().min_bytes, ctx->bound().gemm_flops, ctx->bound().other_flops);
  return Status();
}

// --check-import: the module's import check (gpu/compile/module_check.h) as one line of JSON.
int check_import(const Task& task, const Plan& plan, SizeName size, const std::string& cache_dir) {
  Result<std::string> reference = task_as_pytorch(task, size);
  if (!reference.ok()) return fail("task " + task.id + " has no PyTorch module: " + reference.status().message());
  ModuleBackend backend = module_backend(plan.module);
  ModuleCheckOptions options;
  options.cache_dir = cache_dir;
  ModuleChecker checker(options);
  Result<ModuleCheck> c = checker.check(plan.module, *reference, backend);
  std::vector<std::string> flags;
  add_module_static_flags(plan.module, &flags);
  if (!c.ok()) return fail(c.status().message());
  nlohmann::json j = {{"task", task.id},
                      {"plan", plan_address(plan).hex()},
                      {"backend", module_backend_name(backend)},
                      {"import", c->ok ? "ok" : "failed"},
                      {"static_flags", flags},
                      {"sandbox", checker.sandbox_description()},
                      {"torch", checker.torch_version()},
                      {"cache", c->cache}};
  if (!cache_dir.empty()) j["cache_entry"] = cache_dir + "/" + checker.build_key(plan.module, backend).hex();
  if (c->ok) {
    j["parameters"] = c->parameters;
    j["buffers"] = c->buffers;
    j["init_inputs"] = c->init_inputs;
  } else {
    j["kind"] = c->kind;
    j["error"] = c->error;
  }
  std::cout << j.dump() << "\n";
  std::fprintf(stderr, "module check: %.0f ms\n", c->ms);
  return c->ok ? 0 : 1;
}

// The command line's values, as given.
struct EvalArgs {
  std::string plan_path, device = "sim", size = "full", profile_file, task_dir;
  std::string seed_text, trials_text, samples_text, noise_text, timeout_text, launch_timeout_text;
  std::string timing = "fixed", timing_width_text = "0.01";
  std::string reference_precision;
  std::string nvrtc_cache, module_cache;
  std::string max_kernel_source_text, max_plan_source_text, max_kernels_text, max_steps_text;
  std::vector<std::string> knobs;
};

void add_eval_options(po::options_description* named, EvalArgs* a) {
  named->add_options()("help,h", "print this help")(
      "plan", po::value<std::string>(&a->plan_path),
      "plan JSON, a KernelBench module defining ModelNew (a .py file or a reply's ```python block; "
      "docs/kernelbench_format.md), or a reply in the model-facing format (```cuda or ```triton and ```launch "
      "blocks; docs/plan_format.md); default: the generator's plan")(
      "knob", po::value<std::vector<std::string>>(&a->knobs), "NAME=VALUE: a knob of the generated plan (repeatable)")(
      "device", po::value<std::string>(&a->device)->default_value("sim"),
      "evaluator: sim (the analytic H200) or cuda (this machine's GPU)")(
      "size", po::value<std::string>(&a->size)->default_value("full"), "task size: full or small")(
      "seed", po::value<std::string>(&a->seed_text)->default_value("0"), "seed of trial inputs and timing noise")(
      "trials", po::value<std::string>(&a->trials_text)->default_value("5"), "correctness trials (1 to 100)")(
      "samples", po::value<std::string>(&a->samples_text)->default_value("100"), "timing samples (1 to 10000)")(
      "strict", "strict tolerance (1e-4 for fp32)")(
      "timing", po::value<std::string>(&a->timing)->default_value("fixed"),
      "fixed: --samples of each; adaptive: in steps of 10 from 20 until the speedup's 99% interval is "
      "within --timing-width of it, --samples the cap")(
      "timing-width", po::value<std::string>(&a->timing_width_text)->default_value("0.01"),
      "adaptive: the speedup's interval width relative to it at which sampling stops (0 to 1)")(
      "profile-phases",
      "cuda: time each phase of the evaluation in the worker (compile, setup, inputs, candidate, "
      "reference, checks, float64 reference (after a miss), timing), synchronizing the GPU at each phase's end; "
      "printed on stderr")("noise", po::value<std::string>(&a->noise_text)->default_value("0"),
                           "sim: relative spread of timing samples (0 to 1)")(
      "profile", po::value<std::string>(&a->profile_file),
      "sim: device profile TOML (default data/device_profiles/h200.toml)")(
      "tasks", po::value<std::string>(&a->task_dir), "task folder (default data/tasks of this build)")(
      "explain", "sim: print the per-step time breakdown on stderr")(
      "timeout", po::value<std::string>(&a->timeout_text)->default_value("600"),
      "cuda: seconds before an unanswered evaluation counts as a hang")(
      "launch-timeout", po::value<std::string>(&a->launch_timeout_text)->default_value("10"),
      "cuda: seconds one kernel launch may run")("nvrtc-cache", po::value<std::string>(&a->nvrtc_cache),
                                                 "cuda: NVRTC cache folder shared across processes")(
      "max-kernel-source-bytes", po::value<std::string>(&a->max_kernel_source_text)->default_value("262144"),
      "largest source of one kernel (a plan over a limit is rejected uncompiled)")(
      "max-plan-source-bytes", po::value<std::string>(&a->max_plan_source_text)->default_value("2097152"),
      "largest source of all kernels together")(
      "max-kernels", po::value<std::string>(&a->max_kernels_text)->default_value("1024"), "most kernels in a plan")(
      "max-steps", po::value<std::string>(&a->max_steps_text)->default_value("4096"), "most steps in a plan")(
      "check-import",
      "a KernelBench module only: import it and build ModelNew(*get_init_inputs()) in the module sandbox, "
      "print what was found as JSON (exit 0 built, 1 not), and evaluate nothing; no GPU needed")(
      "module-cache", po::value<std::string>(&a->module_cache),
      "a KernelBench module with --check-import or --device cuda: keep what its load_inline built in this folder, "
      "by content address, and start the next check or evaluation of the same module from it")(
      "reference-precision", po::value<std::string>(&a->reference_precision)->default_value("kernelbench"),
      "cuda: the reference's precision policy: kernelbench (default; PyTorch's defaults, cuDNN may use TF32) or fp32 "
      "(TF32 off)");
}

// What the numbers and choices of the command line come to.
struct EvalSettings {
  EvalRequest request;
  PlanLimits limits;
  double noise = 0, timeout = 0, launch_timeout = 0;
  ReferencePrecision reference_precision = ReferencePrecision::kKernelbench;
};

// Numbers are checked before anything runs, with the ranges an experiment's keys allow
// (device.trials, device.timing_samples, device.noise): each sample is held in memory. Errors are
// the messages harness eval prints.
Result<EvalSettings> check_eval_args(const EvalArgs& a, const po::variables_map& vm) {
  EvalSettings s;
  VINCI_ASSIGN_OR_RETURN(int64_t seed, parse_int_option("--seed", a.seed_text, 0, INT64_MAX));
  VINCI_ASSIGN_OR_RETURN(int64_t trials, parse_int_option("--trials", a.trials_text, 1, 100));
  VINCI_ASSIGN_OR_RETURN(int64_t samples, parse_int_option("--samples", a.samples_text, 1, 10000));
  VINCI_ASSIGN_OR_RETURN(s.noise, parse_number_option("--noise", a.noise_text, 0, 1));
  VINCI_ASSIGN_OR_RETURN(s.timeout, parse_number_option("--timeout", a.timeout_text, 0.001, 86400));
  VINCI_ASSIGN_OR_RETURN(s.launch_timeout,
                         parse_number_option("--launch-timeout", a.launch_timeout_text, 0.001, 86400));
  // The ranges of the experiment's device.max_* keys.
  VINCI_ASSIGN_OR_RETURN(s.limits.max_kernel_source_bytes,
                         parse_int_option("--max-kernel-source-bytes", a.max_kernel_source_text, 1, 1000000000000));
  VINCI_ASSIGN_OR_RETURN(s.limits.max_plan_source_bytes,
                         parse_int_option("--max-plan-source-bytes", a.max_plan_source_text, 1, 1000000000000));
  VINCI_ASSIGN_OR_RETURN(s.limits.max_kernels, parse_int_option("--max-kernels", a.max_kernels_text, 1, 1000000));
  VINCI_ASSIGN_OR_RETURN(s.limits.max_steps, parse_int_option("--max-steps", a.max_steps_text, 1, 1000000));
  Result<SizeName> size_value = parse_size_name(a.size);
  if (!size_value.ok()) return invalid_argument("--size: " + size_value.status().message());
  s.request.size = *size_value;
  const std::string& device = a.device;
  if (device != "sim" && device != "cuda")
    return invalid_argument("--device: expected sim or cuda, found '" + device + "'");
  if (vm.count("profile-phases") && device != "cuda")
    return invalid_argument(
        "--profile-phases: times the GPU worker's phases, so it needs --device cuda (found --device " + device + ")");
  Result<ReferencePrecision> reference_precision = parse_reference_precision(a.reference_precision);
  if (!reference_precision.ok())
    return invalid_argument("--reference-precision: " + reference_precision.status().message());
  s.reference_precision = *reference_precision;
  if (!a.plan_path.empty() && !a.knobs.empty()) return invalid_argument("--plan and --knob exclude each other");
  s.request.seed = static_cast<uint64_t>(seed);
  s.request.trials = static_cast<int>(trials);
  s.request.samples = static_cast<int>(samples);
  s.request.strict = vm.count("strict") > 0;
  if (a.timing != "fixed" && a.timing != "adaptive")
    return invalid_argument("--timing: expected fixed or adaptive, found '" + a.timing + "'");
  VINCI_ASSIGN_OR_RETURN(double timing_width, parse_number_option("--timing-width", a.timing_width_text, 0, 1));
  s.request.adaptive = a.timing == "adaptive";
  s.request.adaptive_rule.rel_width = timing_width;
  s.request.adaptive_rule.max_samples = s.request.samples;
  return s;
}

// The sim's record on stdout (and with --explain its breakdown on stderr). The exit code as
// cmd_eval's.
int evaluate_on_sim(const EvalArgs& a, const EvalSettings& s, const Task& task, const Plan& plan, bool explain) {
  Result<DeviceProfile> profile = load_device_profile(a.profile_file.empty() ? profile_path("h200") : a.profile_file);
  if (!profile.ok()) return fail(profile.status().to_string());
  SimEvaluatorOptions opts;
  opts.noise = s.noise;
  opts.limits = s.limits;
  SimEvaluator evaluator(*profile, opts);
  Result<EvalResult> r = evaluator.evaluate(task, plan, s.request);
  if (!r.ok()) return fail(r.status().to_string());
  std::cout << eval_result_to_json(*r).dump() << "\n";
  if (explain) {
    Status explained = explain_sim(evaluator, task, plan, s.request.size);
    if (!explained.ok()) return fail(explained.to_string());
  }
  return r->compiled && r->correct ? 0 : 1;
}

}  // namespace

int cmd_eval(const std::vector<std::string>& args) {
  EvalArgs a;
  po::options_description named(
      "usage: harness eval TASK_ID [--plan FILE | --knob NAME=VALUE ...] [--device sim|cuda]\n"
      "                            [--size full|small] [--seed N]\n\n"
      "Evaluates one plan and prints its result record as JSON. Exit 0: compiled and\n"
      "correct; 1: not compiled or wrong; 2: usage or error.\n\noptions");
  add_eval_options(&named, &a);
  po::variables_map vm;
  if (auto stop = parse_options("harness eval", args, named, {{"task", 1}}, &vm)) return *stop;
  if (!vm.count("task")) {
    std::cerr << "harness eval: expected a task id\n" << named;
    return 2;
  }
  std::string task_id = vm["task"].as<std::string>();
  Result<EvalSettings> settings = check_eval_args(a, vm);
  if (!settings.ok()) return fail(settings.status().message());
  const EvalRequest& request = settings->request;

  Result<TaskSuite> suite = load_task_suite(a.task_dir.empty() ? default_task_dir() : a.task_dir);
  if (!suite.ok()) return fail(suite.status().to_string());
  const Task* task = suite->find(task_id);
  if (!task) return fail("no task '" + task_id + "' in the suite");

  Result<Plan> plan = plan_to_evaluate(a.plan_path, a.knobs, *task);
  if (!plan.ok()) return fail(plan.status().message());
  if (!a.module_cache.empty() && !vm.count("check-import") && a.device != "cuda")
    return fail("--module-cache: keeps the builds of --check-import or --device cuda, neither of which is given");
  if (vm.count("check-import")) {
    if (!plan->is_module())
      return fail("--check-import: checks a KernelBench module (a .py file defining ModelNew); --plan " +
                  (a.plan_path.empty() ? std::string("is not given") : a.plan_path + " is not one"));
    return check_import(*task, *plan, request.size, a.module_cache);
  }

  if (a.device == "cuda") {
    CudaEvaluatorOptions co;
    co.task_dir = a.task_dir.empty() ? default_task_dir() : a.task_dir;
    co.profile_path = a.profile_file;
    co.timeout_s = settings->timeout;
    co.launch_timeout_s = settings->launch_timeout;
    co.reference_precision = settings->reference_precision;
    co.nvrtc_cache_dir = a.nvrtc_cache;
    co.module_cache_dir = a.module_cache;
    co.limits = settings->limits;
    co.profile_phases = vm.count("profile-phases") > 0;
    return evaluate_on_gpu(co, *task, *plan, request);
  }
  return evaluate_on_sim(a, *settings, *task, *plan, vm.count("explain") > 0);
}

}  // namespace vinci

#include "queue/protocol.h"

#include <cmath>

#include "core/text.h"
#include "gpu/live/cuda_evaluator.h"

namespace vinci {
namespace {

void put_limits(const PlanLimits& l, std::map<std::string, std::string>* s) {
  (*s)["max_kernel_source_bytes"] = std::to_string(l.max_kernel_source_bytes);
  (*s)["max_plan_source_bytes"] = std::to_string(l.max_plan_source_bytes);
  (*s)["max_kernels"] = std::to_string(l.max_kernels);
  (*s)["max_steps"] = std::to_string(l.max_steps);
}

Result<int64_t> setting_int(const EvaluatorSpec& spec, const std::string& key) {
  auto it = spec.settings.find(key);
  if (it == spec.settings.end()) return invalid_argument("queue request: evaluator setting '" + key + "' is missing");
  try {
    size_t used = 0;
    long long v = std::stoll(it->second, &used);
    if (used == it->second.size()) return static_cast<int64_t>(v);
  } catch (const std::exception&) {
  }
  return invalid_argument("queue request: evaluator setting '" + key + "': expected an integer, found '" + it->second +
                          "'");
}

}  // namespace

EvaluatorSpec sim_spec(const std::string& profile_text, double noise, const PlanLimits& limits) {
  EvaluatorSpec s;
  s.kind = "sim";
  s.profile_text = profile_text;
  s.settings["noise"] = exact_number(noise);
  put_limits(limits, &s.settings);
  return s;
}

EvaluatorSpec cuda_spec(const std::string& profile_text, ReferencePrecision reference_precision,
                        const PlanLimits& limits, double timing_budget_s) {
  EvaluatorSpec s;
  s.kind = "cuda";
  s.profile_text = profile_text;
  s.settings["reference_precision"] = kReferencePrecisions.name(reference_precision);
  if (timing_budget_s > 0) s.settings["timing_budget_s"] = exact_number(timing_budget_s);
  put_limits(limits, &s.settings);
  return s;
}

Result<double> spec_timing_budget(const EvaluatorSpec& spec) {
  auto it = spec.settings.find("timing_budget_s");
  if (it == spec.settings.end()) return 0.0;
  char* end = nullptr;
  double v = std::strtod(it->second.c_str(), &end);
  if (end == it->second.c_str() || *end != 0 || !(v >= 0) || !std::isfinite(v))
    return invalid_argument("queue request: evaluator setting 'timing_budget_s': expected a number >= 0, found '" +
                            it->second + "'");
  return v;
}

Result<PlanLimits> spec_limits(const EvaluatorSpec& spec) {
  PlanLimits l;
  VINCI_ASSIGN_OR_RETURN(l.max_kernel_source_bytes, setting_int(spec, "max_kernel_source_bytes"));
  VINCI_ASSIGN_OR_RETURN(l.max_plan_source_bytes, setting_int(spec, "max_plan_source_bytes"));
  VINCI_ASSIGN_OR_RETURN(l.max_kernels, setting_int(spec, "max_kernels"));
  VINCI_ASSIGN_OR_RETURN(l.max_steps, setting_int(spec, "max_steps"));
  return l;
}

Result<double> spec_noise(const EvaluatorSpec& spec) {
  auto it = spec.settings.find("noise");
  if (it == spec.settings.end()) return 0.0;
  char* end = nullptr;
  double v = std::strtod(it->second.c_str(), &end);
  if (end == it->second.c_str() || *end != 0 || !(v >= 0))
    return invalid_argument("queue request: evaluator setting 'noise': expected a number >= 0, found '" + it->second +
                            "'");
  return v;
}

Digest task_file_address(const std::string& file_text) { return hash_tagged("task_file", file_text); }

Digest task_address(const Digest& file_address, const std::string& task_id) {
  Hasher h("task");
  h.update_digest(file_address).update_str(task_id);
  return h.finish();
}

Digest queue_request_address(const Digest& task_file, const std::string& task_id, const Digest& plan,
                             const EvalRequest& request, const EvaluatorSpec& spec) {
  Hasher h("eval_request");
  h.update_digest(task_address(task_file, task_id)).update_digest(plan);
  h.update_str(size_name(request.size)).update_u64(request.seed);
  h.update_i64(request.trials).update_i64(request.samples).update_u64(request.strict ? 1 : 0);
  if (request.adaptive)
    h.update_str("adaptive_timing").update_str(adaptive_timing_to_json(request.adaptive_rule).dump());
  h.update_str(spec.kind);
  h.update_u64(spec.settings.size());
  for (const auto& [k, v] : spec.settings) h.update_str(k).update_str(v);
  h.update_digest(spec.profile_text.empty() ? Digest() : hash_tagged("device_profile", spec.profile_text));
  return h.finish();
}

EncodedRequest encode_queue_request(const Task& task, const std::string& task_file_text, const Plan& plan,
                                    const EvalRequest& request, const EvaluatorSpec& spec, int attempts) {
  EncodedRequest e;
  Digest file = task_file_address(task_file_text);
  std::string plan_bytes = canonical_bytes(plan);
  Digest plan_addr = hash_tagged("plan", plan_bytes);
  Digest profile = spec.profile_text.empty() ? Digest() : hash_tagged("device_profile", spec.profile_text);
  e.address = queue_request_address(file, task.id, plan_addr, request, spec);
  e.objects[file] = task_file_text;
  e.plan = std::move(plan_bytes);
  if (!spec.profile_text.empty()) e.objects[profile] = spec.profile_text;
  nlohmann::json settings = nlohmann::json::object();
  for (const auto& [k, v] : spec.settings) settings[k] = v;
  nlohmann::json j = {{"address", e.address.hex()},
                      {"task", task.id},
                      {"task_path", task.source_file},
                      {"task_file", file.hex()},
                      {"plan", plan_addr.hex()},
                      {"profile", spec.profile_text.empty() ? std::string() : profile.hex()},
                      {"size", size_name(request.size)},
                      {"seed", request.seed},
                      {"trials", request.trials},
                      {"samples", request.samples},
                      {"strict", request.strict},
                      {"evaluator", spec.kind},
                      {"settings", settings},
                      {"attempts", attempts}};
  if (request.adaptive) j["timing"] = adaptive_timing_to_json(request.adaptive_rule);
  e.body = j.dump();
  return e;
}

std::string encode_queue_result(const EvalResult& r) { return encode_eval_result(r); }

Result<EvalResult> decode_queue_result(const std::string& measurement, const std::string& compile_log) {
  VINCI_ASSIGN_OR_RETURN(EvalResult r, decode_eval_result(measurement, compile_log));
  if (r.compile_log_address != Digest() && hash_tagged(kCompileLogKind, r.compile_log) != r.compile_log_address)
    return corruption("queue result: the compile log does not match its address in the measurement");
  return r;
}

EvalResult failed_queue_result(const std::string& evaluator, const Task& task, const Plan& plan,
                               const EvalRequest& request, const std::string& reasons) {
  EvalResult r;
  r.evaluator = evaluator;
  r.plan = plan_address(plan);
  r.size = size_name(request.size);
  r.compiled = false;
  r.correct = false;
  r.error = reasons;
  r.flags.push_back("rejected: queue_failed");
  add_unreached_trials(&r, task.id, request);
  r.finalize();
  return r;
}

}  // namespace vinci

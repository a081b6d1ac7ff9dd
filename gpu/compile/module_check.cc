#include "gpu/compile/module_check.h"

#include <chrono>
#include <cstdlib>
#include <utility>

#include <nlohmann/json.hpp>

namespace vinci {
namespace {

using nlohmann::json;

std::string from_env(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::string(v) : fallback;
}

ModuleCheckOptions resolved(ModuleCheckOptions o) {
  if (o.python.empty()) o.python = from_env("VINCI_MODULE_PYTHON", "python3");
  if (o.script.empty()) o.script = from_env("VINCI_MODULE_CHECK", VINCI_MODULE_CHECK_SCRIPT);
  return o;
}

SandboxOptions sandbox_options(const ModuleCheckOptions& o) {
  SandboxOptions s;
  s.python = o.python;
  s.script = o.script;
  s.package = "torch";
  s.what = "module check";
  s.purpose = "KernelBench module checks";
  s.cannot = "cannot run the module check '" + o.python + " " + o.script + "': ";
  s.fix = " (set VINCI_MODULE_PYTHON to a python with torch installed)";
  s.off_reason = "ModuleCheckOptions::sandbox is off";
  s.temp_prefix = "vinci_module";
  s.limits = o.limits;
  s.sandbox = o.sandbox;
  s.bwrap = o.bwrap;
  return s;
}

}  // namespace

ModuleChecker::ModuleChecker(ModuleCheckOptions options)
    : options_(resolved(std::move(options))), sandbox_(sandbox_options(options_)) {}

Status ModuleChecker::probe(ModuleBackend backend) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = probes_.find(backend);
  if (it != probes_.end()) return it->second;
  VINCI_ASSIGN_OR_RETURN(std::string script, sandbox_.script());
  json request = {{"backend", module_backend_name(backend)}};
  Result<ProcessRun> run = sandbox_.run({script}, request.dump(), options_.timeout_s);
  Status s;
  if (!run.ok()) {
    s = run.status();
  } else {
    json answer = json::parse(run->out, nullptr, false);
    if (answer.is_object() && answer.value("ok", false)) {
      torch_version_ = answer.value("torch", "");
    } else if (answer.is_object() && answer.contains("error") && answer["error"].is_string()) {
      s = failed_precondition(answer["error"].get<std::string>());
    } else {
      s = failed_precondition("the module check's probe failed (" + sandbox_.ending_text(*run) +
                              "): " + run->err.substr(0, 2000));
    }
  }
  probes_.emplace(backend, s);
  return s;
}

Result<ModuleCheck> ModuleChecker::check(const std::string& module, const std::string& reference,
                                         ModuleBackend backend, int64_t seed) {
  // What this machine lacks is found before any module runs, by trusted code alone: a module's
  // answer can then never make its own failure look like the machine's.
  VINCI_RETURN_IF_ERROR(probe(backend));
  VINCI_ASSIGN_OR_RETURN(std::string script, sandbox_.script());
  json request = {{"module", module}, {"reference", reference}, {"backend", module_backend_name(backend)},
                  {"seed", seed}};
  auto t0 = std::chrono::steady_clock::now();
  VINCI_ASSIGN_OR_RETURN(ProcessRun run, sandbox_.run({script}, request.dump(), options_.timeout_s));
  ModuleCheck c;
  c.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  // From here on everything the process did may be the module's doing: a process that ends
  // without its answer is the module's failure, not the machine's.
  auto failed = [&c](const std::string& kind, const std::string& error) {
    c.ok = false;
    c.kind = kind;
    c.error = error;
    return c;
  };
  if (run.timed_out) {
    return failed("over_limit", "the module check exceeded its time limit of " +
                                    std::to_string(static_cast<int64_t>(options_.timeout_s)) + " s and was stopped");
  }
  if (run.out_truncated)
    return failed("over_limit", "the module check wrote more than " + bytes_text(kMaxSandboxStdout) + " of answer");
  json answer = json::parse(run.out, nullptr, false);
  if (answer.is_discarded() || !answer.is_object() || !answer.contains("ok") || !answer["ok"].is_boolean()) {
    std::string why = run.signal != 0 || run.exit_code != 0
                          ? sandbox_.ending_text(run)
                          : "the module check answered something that is not its JSON: " + run.out.substr(0, 300);
    std::string err = run.err.substr(0, 2000);
    bool limit = run.signal != 0;
    return failed(limit ? "over_limit" : "import_error",
                  why + (err.empty() ? "" : ": " + err) + sandbox_.limit_hint(err));
  }
  if (!answer["ok"].get<bool>()) {
    std::string kind = answer.value("kind", "import_error");
    std::string error = answer.value("error", "");
    if (kind != "import_error" && kind != "no_model_new" && kind != "construct_error") kind = "import_error";
    return failed(kind, error + sandbox_.limit_hint(error));
  }
  c.ok = true;
  c.torch_version = answer.value("torch", "");
  c.parameters = answer.value("parameters", int64_t{0});
  c.buffers = answer.value("buffers", int64_t{0});
  c.init_inputs = answer.value("init_inputs", int64_t{0});
  return c;
}

}  // namespace vinci

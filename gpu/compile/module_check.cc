#include "gpu/compile/module_check.h"

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <utility>

#include <nlohmann/json.hpp>

#include "core/json_fields.h"

namespace vinci {
namespace {

using nlohmann::json;

ModuleCheckOptions resolved(ModuleCheckOptions o) {
  if (o.python.empty()) o.python = env_or("VINCI_MODULE_PYTHON", "python3");
  if (o.script.empty()) o.script = env_or("VINCI_MODULE_CHECK", VINCI_MODULE_CHECK_SCRIPT);
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
  s.extension_dir = "/vinci/torch_extensions";
  // The sandbox shows no GPU, so load_inline cannot ask the device which architecture to build
  // for: it builds for the one vinci targets (sm_90), or the user's TORCH_CUDA_ARCH_LIST.
  s.env.push_back("TORCH_CUDA_ARCH_LIST=" + env_or("TORCH_CUDA_ARCH_LIST", "9.0"));
  s.limits = o.limits;
  s.sandbox = o.sandbox;
  s.bwrap = o.bwrap;
  return s;
}

}  // namespace

ModuleChecker::ModuleChecker(ModuleCheckOptions options)
    : options_(resolved(std::move(options))), sandbox_(sandbox_options(options_)) {}

Digest ModuleChecker::build_key(const std::string& module, ModuleBackend backend) {
  Hasher h("module_build");
  h.update_str(module);
  h.update_str(module_backend_name(backend));
  h.update_str(options_.python);
  h.update_str(torch_version());
  return h.finish();
}

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
    if (answer.is_object() && answer.contains("ok") && answer["ok"] == true) {
      torch_version_ = text_field(answer, "torch");
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

Result<ModuleCheck> ModuleChecker::check(const std::string& module, const std::string& reference, ModuleBackend backend,
                                         int64_t seed) {
  // What this machine lacks is found before any module runs, by trusted code alone: a module's
  // answer can then never make its own failure look like the machine's.
  VINCI_RETURN_IF_ERROR(probe(backend));
  VINCI_ASSIGN_OR_RETURN(std::string script, sandbox_.script());
  json request = {
      {"module", module}, {"reference", reference}, {"backend", module_backend_name(backend)}, {"seed", seed}};
  ModuleCheck c;
  // The cache: a kept build is copied into the run's extension folder; a fresh one is staged out
  // of the run's folder and kept only once the answer says the module built.
  SandboxHooks hooks;
  std::string entry, staged;
  if (!options_.cache_dir.empty()) {
    entry = options_.cache_dir + "/" + build_key(module, backend).hex();
    struct stat st;
    c.cache = ::stat(entry.c_str(), &st) == 0 && S_ISDIR(st.st_mode) ? "hit" : "miss";
    if (c.cache == "hit") {
      hooks.before = [&](const std::string& folder) {
        return copy_plain_tree(entry, folder + "/torch_extensions", options_.cache_max_bytes, 1000000);
      };
    } else {
      staged = options_.cache_dir + "/.staged-" + std::to_string(::getpid()) + "-" +
               std::to_string(reinterpret_cast<uintptr_t>(&c));
      hooks.after = [&](const std::string& folder) {
        struct stat ext;
        std::string built = folder + "/torch_extensions";
        if (::stat(built.c_str(), &ext) != 0 || !S_ISDIR(ext.st_mode)) return Status();  // nothing was compiled
        Status copied = copy_plain_tree(built, staged, options_.cache_max_bytes, 1000000);
        if (!copied.ok()) remove_folder(staged);  // too large to keep: the check goes on without the cache
        return Status();
      };
    }
  }
  auto t0 = std::chrono::steady_clock::now();
  Result<ProcessRun> ran = sandbox_.run({script}, request.dump(), options_.timeout_s, hooks);
  if (!ran.ok()) {
    if (!staged.empty()) remove_folder(staged);
    return ran.status();
  }
  ProcessRun run = std::move(ran).value();
  c.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  ModuleCheck result = parse_answer(run, c);
  if (!staged.empty()) {
    struct stat st;
    bool keep = result.ok && ::stat(staged.c_str(), &st) == 0;
    // Another check of the same module may have kept it first: the entry is the same build.
    if (!keep || ::rename(staged.c_str(), entry.c_str()) != 0) remove_folder(staged);
  }
  return result;
}

ModuleCheck ModuleChecker::parse_answer(const ProcessRun& run, ModuleCheck c) {
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
    std::string kind = text_field(answer, "kind");
    std::string error = text_field(answer, "error");
    if (kind != "import_error" && kind != "no_model_new" && kind != "construct_error") kind = "import_error";
    return failed(kind, error + sandbox_.limit_hint(error));
  }
  c.ok = true;
  c.torch_version = text_field(answer, "torch");
  c.parameters = int_field(answer, "parameters");
  c.buffers = int_field(answer, "buffers");
  c.init_inputs = int_field(answer, "init_inputs");
  return c;
}

}  // namespace vinci

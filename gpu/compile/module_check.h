// The import check of a KernelBench module (docs/kernelbench_format.md): does the module import,
// define ModelNew as an nn.Module, and build from the task's get_init_inputs() as KernelBench
// builds a candidate? Importing runs model-written Python (a CUDA module's load_inline compiles
// there), so gpu/compile/module_check.py runs in the sandbox Triton compiles run in
// (gpu/compile/sandbox.h). No GPU is needed, and nothing is timed or compared with the reference:
// that is the live evaluator's work.
#ifndef VINCI_GPU_COMPILE_MODULE_CHECK_H_
#define VINCI_GPU_COMPILE_MODULE_CHECK_H_

#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "core/hash.h"
#include "core/status.h"
#include "gpu/compile/sandbox.h"
#include "gpu/kernelbench_module.h"

namespace vinci {

struct ModuleCheckOptions {
  std::string python;      // empty: $VINCI_MODULE_PYTHON, else python3
  std::string script;      // empty: $VINCI_MODULE_CHECK, else gpu/compile/module_check.py of the tree
  double timeout_s = 600;  // wall-clock: load_inline's nvcc compile of one module takes a minute or two
  // An import that compiles CUDA runs nvcc and the host compiler: more CPU time than a Triton
  // compile, the same memory.
  SandboxLimits limits = {600, 8LL << 30, 256LL << 20, 128};
  // Where the extension folders of modules that built are kept, by content address (empty: no
  // cache): the next check of the same module text, backend, python and torch starts from a copy
  // of what the first one built, so load_inline finds its library and compiles nothing. Only an
  // import check fills it (no inputs ever reach that process), and only when the module built;
  // links and special files are never copied out of the sandbox.
  std::string cache_dir;
  int64_t cache_max_bytes = 1LL << 30;  // one module's extension folder; larger ones are not kept
  bool sandbox = true;                  // false: no bwrap (said loudly)
  std::string bwrap;                    // empty: $VINCI_BWRAP, else bwrap on PATH
};

// What the check found. ok: the module imported and ModelNew(*get_init_inputs()) was built.
struct ModuleCheck {
  bool ok = false;
  std::string kind;   // when not ok: import_error | no_model_new | construct_error | over_limit
  std::string error;  // when not ok: what failed, for the module's author
  std::string torch_version;
  int64_t parameters = 0;  // elements of ModelNew's parameters
  int64_t buffers = 0;     // and of its buffers
  int64_t init_inputs = 0;
  double ms = 0;              // wall-clock of the check, an annotation only
  std::string cache = "off";  // off | hit (started from a kept build) | miss (built here; kept when it built)
};

class ModuleChecker {
 public:
  explicit ModuleChecker(ModuleCheckOptions options = {});

  // Checks module against the task's reference module (task_as_pytorch). A failure of the module
  // is a ModuleCheck with ok false; FailedPrecondition when this machine cannot check it (no
  // python, no torch, a CUDA module with a CPU-only torch, a Triton module without Triton), naming
  // the python and the fix.
  Result<ModuleCheck> check(const std::string& module, const std::string& reference, ModuleBackend backend,
                            int64_t seed = 42);

  // Whether this machine can check a module of that backend (torch; with CUDA for a cuda module;
  // Triton for a triton one): FailedPrecondition naming the python and the fix. Asked once per
  // backend, with no module.
  Status probe(ModuleBackend backend);
  // The probed python's torch version ("" before a probe).
  std::string torch_version() {
    std::lock_guard<std::mutex> lock(mu_);
    return torch_version_;
  }
  // The cache key of a module's build (ModuleCheckOptions::cache_dir); REQUIRES: probe(backend) ok.
  Digest build_key(const std::string& module, ModuleBackend backend);
  // What the check runs in here (PythonSandbox::description).
  std::string sandbox_description() { return sandbox_.description(); }
  const ModuleCheckOptions& options() const { return options_; }

 private:
  // The check's answer (the process's stdout, which the module may have written) read into c.
  ModuleCheck parse_answer(const ProcessRun& run, ModuleCheck c);

  ModuleCheckOptions options_;
  PythonSandbox sandbox_;
  std::mutex mu_;
  std::map<ModuleBackend, Status> probes_;
  std::string torch_version_;
};

}  // namespace vinci

#endif  // VINCI_GPU_COMPILE_MODULE_CHECK_H_

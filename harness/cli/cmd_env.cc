// `harness env`: prints the environment a run started here would record: the numeric settings
// that replay compares ("pinned"), the variables that can steer them, which it does not, and what
// a Triton compile runs in here (the triton_sandbox setting of a measurement of a Triton plan).
#include <cstdio>

#include "gpu/compile/triton.h"
#include "harness/cli/commands.h"
#include "harness/world.h"
#include "recorder/environment.h"

namespace vinci {

int cmd_env(const std::vector<std::string>& args) {
  if (!args.empty()) {
    std::fprintf(stderr, "usage: harness env\n");
    return 2;
  }
  pin_numeric_settings();
  Environment env = capture_environment();
  std::printf("cpu: %s\ncompiler: %s\ngit_revision: %s\nvinci: %s\n", env.cpu.c_str(), env.compiler.c_str(),
              env.git_revision.c_str(), env.vinci_version.c_str());
  for (const auto& [k, v] : env.pinned()) std::printf("pinned %s=%s\n", k.c_str(), v.c_str());
  std::printf("variable ATEN_CPU_CAPABILITY=%s\nvariable OPENBLAS_CORETYPE=%s\n", env.aten_cpu_capability.c_str(),
              env.openblas_coretype.c_str());
  // Where part of the sandbox is missing, the probe has also said so on stderr.
  TritonCompiler triton;
  std::printf("triton_sandbox: %s\n", triton.sandbox_description().c_str());
  return 0;
}

}  // namespace vinci

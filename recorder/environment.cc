#include "recorder/environment.h"

#include <cstdlib>
#include <fstream>

#include "recorder/build_info.h"

namespace vinci {
namespace {

std::string env_or_empty(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      auto pos = line.find(':');
      if (pos != std::string::npos) {
        auto start = line.find_first_not_of(' ', pos + 1);
        return start == std::string::npos ? "" : line.substr(start);
      }
    }
  }
  return "unknown";
}

}  // namespace

const char* build_git_revision() { return VINCI_GIT_REVISION; }
const char* vinci_version() { return "0.1.0"; }

std::map<std::string, std::string> Environment::pinned() const {
  std::map<std::string, std::string> out = numeric;
  out["libtorch"] = libtorch;
  out["torch_threads"] = std::to_string(torch_threads);
  out["aten_cpu_capability"] = aten_cpu_capability;
  out["openblas_coretype"] = openblas_coretype;
  return out;
}

Environment capture_base_environment() {
  Environment env;
  env.cpu = cpu_model();
  env.aten_cpu_capability = env_or_empty("ATEN_CPU_CAPABILITY");
  env.openblas_coretype = env_or_empty("OPENBLAS_CORETYPE");
  env.git_revision = build_git_revision();
  env.vinci_version = vinci_version();
#if defined(__clang__)
  env.compiler = std::string("clang ") + __clang_version__;
#elif defined(__GNUC__)
  env.compiler = std::string("g++ ") + __VERSION__;
#endif
  return env;
}

}  // namespace vinci

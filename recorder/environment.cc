#include "recorder/environment.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdlib.h>

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

// "folder/file" of a path: enough to tell Debian's BLAS alternatives apart
// (blas/libblas.so.3.11.0, openblas-pthread/libblas.so.3, blis-pthread/...).
std::string last_two_components(const std::string& path) {
  size_t last = path.rfind('/');
  if (last == std::string::npos || last == 0) return path;
  size_t before = path.rfind('/', last - 1);
  return before == std::string::npos ? path : path.substr(before + 1);
}

// OpenBLAS's introspection functions, looked up at run time so vinci links against any BLAS.
using CharFn = char* (*)();
using IntFn = int (*)();
using SetIntFn = void (*)(int);

template <typename Fn>
Fn find_symbol(const char* name) {
  return reinterpret_cast<Fn>(dlsym(RTLD_DEFAULT, name));
}

}  // namespace

BlasInEffect blas_in_effect() {
  BlasInEffect b;
  b.vendor = "other";
  b.threads = 1;
  void* sgemm = dlsym(RTLD_DEFAULT, "sgemm_");
  Dl_info info{};
  if (sgemm == nullptr || dladdr(sgemm, &info) == 0 || info.dli_fname == nullptr) {
    b.library = "none";
    return b;
  }
  char real[PATH_MAX];
  b.library = last_two_components(realpath(info.dli_fname, real) ? real : info.dli_fname);
  // OpenBLAS's functions count only when they come from the library that serves sgemm_: another
  // library (an OpenBLAS LAPACK, say) may bring them along without being the BLAS in effect.
  auto same_library = [&](void* symbol) {
    Dl_info other{};
    return symbol != nullptr && dladdr(symbol, &other) != 0 && other.dli_fbase == info.dli_fbase;
  };
  auto config = find_symbol<CharFn>("openblas_get_config");
  if (same_library(reinterpret_cast<void*>(config))) {
    b.vendor = "openblas";
    b.config = config();
    if (auto core = find_symbol<CharFn>("openblas_get_corename")) b.core = core();
    if (auto threads = find_symbol<IntFn>("openblas_get_num_threads")) b.threads = threads();
  } else if (b.library.rfind("blas/", 0) == 0) {
    b.vendor = "reference";
  }
  return b;
}

void pin_blas_threads() {
  // Every OpenBLAS loaded counts here (one serving LAPACK too): none may start threads.
  if (auto set = find_symbol<SetIntFn>("openblas_set_num_threads")) set(1);
}

const char* build_git_revision() { return VINCI_GIT_REVISION; }
const char* vinci_version() { return "0.1.0"; }

std::map<std::string, std::string> Environment::pinned() const {
  std::map<std::string, std::string> out = numeric;
  out["libtorch"] = libtorch;
  out["torch_threads"] = std::to_string(torch_threads);
  return out;
}

Environment capture_base_environment() {
  Environment env;
  env.cpu = cpu_model();
  env.aten_cpu_capability = env_or_empty("ATEN_CPU_CAPABILITY");
  env.openblas_coretype = env_or_empty("OPENBLAS_CORETYPE");
  BlasInEffect blas = blas_in_effect();
  env.numeric["blas"] = blas.vendor + " " + blas.library;
  if (blas.vendor == "openblas") {
    env.numeric["blas_config"] = blas.config;
    env.numeric["blas_core"] = blas.core;
  }
  env.numeric["blas_threads"] = std::to_string(blas.threads);
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

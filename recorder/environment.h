// The environment a run records in its manifest: what machine, which libraries, and every numeric
// setting that can change a floating-point result. Replay compares the pinned settings with the
// current ones and refuses to re-derive under different ones unless forced.
//
// The recorder fills what it can see by itself (CPU, compiler, vinci's revision, environment
// variables that steer numeric kernels); the layers that own libtorch and CUDA fill their fields.
#ifndef VINCI_RECORDER_ENVIRONMENT_H_
#define VINCI_RECORDER_ENVIRONMENT_H_

#include <map>
#include <string>

namespace vinci {

struct Environment {
  std::string cpu;
  std::string gpu;
  std::string driver;
  std::string cuda;
  std::string libtorch;
  unsigned torch_threads = 0;
  std::string aten_cpu_capability;
  std::string openblas_coretype;
  std::string git_revision;
  std::string compiler;
  std::string vinci_version;
  std::map<std::string, std::string> numeric;  // sorted by key

  // The settings that must match for a bit-exact replay of derived values, as key=value lines.
  std::map<std::string, std::string> pinned() const;
};

// CPU, compiler, revision, ATEN_CPU_CAPABILITY and OPENBLAS_CORETYPE of this process.
Environment capture_base_environment();

// vinci's revision at build time ("unknown" outside a git checkout).
const char* build_git_revision();
const char* vinci_version();

}  // namespace vinci

#endif  // VINCI_RECORDER_ENVIRONMENT_H_

// The environment a run records in its manifest: what machine, which libraries, and every numeric
// setting that can change a floating-point result.
//
// "The same numeric settings" means the same values of pinned(): settings read from what is in
// effect in the process (the BLAS library libtorch calls and, for OpenBLAS, the core it selected
// and its thread count; libtorch's version, CPU capability and thread count), never environment
// strings. The environment variables that can steer them (ATEN_CPU_CAPABILITY, OPENBLAS_CORETYPE)
// are recorded beside them for the reader, but not compared: two processes whose variables differ
// but whose libraries made the same choices compute the same bits.
//
// The recorder fills what it can see by itself (CPU, compiler, vinci's revision, the BLAS in
// effect); the layers that own libtorch and CUDA fill their fields.
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
  std::string aten_cpu_capability;  // the variable, for the reader; not compared
  std::string openblas_coretype;    // the variable, for the reader; not compared
  std::string git_revision;
  std::string compiler;
  std::string vinci_version;
  std::map<std::string, std::string> numeric;  // sorted by key: settings in effect (blas, ...)

  // The settings that must match for a bit-exact replay of derived values, as key=value lines.
  std::map<std::string, std::string> pinned() const;
};

// The BLAS that libtorch's CPU matrix products call, as in effect in this process.
struct BlasInEffect {
  std::string library;  // the shared object that defines sgemm_, as "folder/file" of its real path
  std::string vendor;   // "openblas" when it is OpenBLAS, else "reference" for Debian's libblas3,
                        // else "other"
  std::string config;   // OpenBLAS: openblas_get_config(); empty otherwise
  std::string core;     // OpenBLAS: the core its dispatch selected (openblas_get_corename())
  int threads = 0;      // OpenBLAS: openblas_get_num_threads(); 1 for a single-threaded library
};
BlasInEffect blas_in_effect();

// Makes OpenBLAS (when it is the BLAS in effect) run single-threaded, as the sim backbone's
// torch does; a no-op for other BLAS libraries. Idempotent.
void pin_blas_threads();

// CPU, compiler, revision, the BLAS in effect, and the ATEN_CPU_CAPABILITY / OPENBLAS_CORETYPE
// variables of this process.
Environment capture_base_environment();

// vinci's revision at build time ("unknown" outside a git checkout).
const char* build_git_revision();
const char* vinci_version();

}  // namespace vinci

#endif  // VINCI_RECORDER_ENVIRONMENT_H_

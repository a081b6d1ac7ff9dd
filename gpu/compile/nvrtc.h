// NVRTC compilation of plan kernels, cached by source address.
//
// A kernel source is a complete translation unit of device code. compile() returns a cubin for a
// real architecture (sm_90) or PTX for a virtual one (compute_90). The cache key is
// XXH3-128 over (kernel_source_address(source), arch, options), held in memory and, when a cache
// folder is given, in <folder>/<key>.cubin|.ptx written atomically, so a second process (a
// replay, a worker) reuses what a first one compiled. No GPU is needed.
#ifndef VINCI_GPU_COMPILE_NVRTC_H_
#define VINCI_GPU_COMPILE_NVRTC_H_

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "core/hash.h"
#include "core/status.h"

namespace vinci {

struct NvrtcOptions {
  std::string arch = "sm_90";      // sm_XX: cubin; compute_XX: PTX
  std::vector<std::string> extra;  // more nvrtc options, e.g. "-lineinfo"
  std::string cache_dir;           // empty: memory only
};

struct CompiledKernel {
  Digest key;  // the cache key
  Digest source_address;
  std::string arch;
  std::string image;  // cubin or PTX bytes
  bool is_ptx = false;
  std::string log;  // NVRTC's log (warnings)
  // Wall-clock time of the compile, an annotation only: never feeds a derived value.
  double compile_ms = 0;
};

class NvrtcCompiler {
 public:
  explicit NvrtcCompiler(NvrtcOptions options = {});

  // A source that does not compile is an expected failure: InvalidArgument with NVRTC's log.
  Result<std::shared_ptr<const CompiledKernel>> compile(const std::string& source,
                                                        const std::string& name = "kernel.cu");

  const NvrtcOptions& options() const { return options_; }
  int64_t hits() const;
  int64_t misses() const;

 private:
  Digest cache_key(const std::string& source) const;

  NvrtcOptions options_;
  std::vector<std::string> all_options_;
  mutable std::mutex mu_;
  std::map<Digest, std::shared_ptr<const CompiledKernel>> memory_;
  int64_t hits_ = 0;
  int64_t misses_ = 0;
};

// Compiles every source (name, source) with `threads` threads into the compiler's caches (its
// disk cache, where it has one, is what a worker process then loads from). Returns the compile
// times in ms of the sources that were not cached; sources that fail to compile are skipped (the
// evaluation reports them).
std::vector<double> precompile(NvrtcCompiler& compiler,
                               const std::vector<std::pair<std::string, std::string>>& named_sources, int threads);

// NVRTC's version as "major.minor", for the environment record.
std::string nvrtc_version();

}  // namespace vinci

#endif  // VINCI_GPU_COMPILE_NVRTC_H_

#include "gpu/compile/nvrtc.h"

#include <algorithm>
#include <thread>

#include <chrono>

#include <nvrtc.h>

#include "core/atomic_file.h"
#include "gpu/plan.h"

namespace vinci {

NvrtcCompiler::NvrtcCompiler(NvrtcOptions options) : options_(std::move(options)) {
  // -pch: NVRTC (12.8+) keeps a precompiled header of a program's first #include for later
  // programs in the process; it takes the tensor-core kernels' <mma.h> parse off every compile
  // after the first (about a third of their compile time here). Programs without includes are
  // unaffected.
  all_options_ = {"--std=c++17", "-arch=" + options_.arch, "-default-device", "-pch"};
  std::string dirs = VINCI_CUDA_INCLUDE_DIRS;
  for (size_t start = 0; start <= dirs.size();) {
    size_t end = dirs.find('|', start);
    if (end == std::string::npos) end = dirs.size();
    if (end > start) all_options_.push_back("--include-path=" + dirs.substr(start, end - start));
    start = end + 1;
  }
  for (const auto& e : options_.extra) all_options_.push_back(e);
}

Digest NvrtcCompiler::cache_key(const std::string& source) const {
  Hasher h("nvrtc_cache");
  h.update_digest(kernel_source_address(source));
  h.update_u64(all_options_.size());
  for (const auto& o : all_options_) h.update_str(o);
  return h.finish();
}

int64_t NvrtcCompiler::hits() const {
  std::lock_guard<std::mutex> lock(mu_);
  return hits_;
}

int64_t NvrtcCompiler::misses() const {
  std::lock_guard<std::mutex> lock(mu_);
  return misses_;
}

Result<std::shared_ptr<const CompiledKernel>> NvrtcCompiler::compile(const std::string& source,
                                                                     const std::string& name) {
  Digest key = cache_key(source);
  bool ptx = options_.arch.rfind("compute_", 0) == 0;
  std::string disk_path =
      options_.cache_dir.empty() ? "" : options_.cache_dir + "/" + key.hex() + (ptx ? ".ptx" : ".cubin");
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = memory_.find(key);
    if (it != memory_.end()) {
      ++hits_;
      return it->second;
    }
  }
  if (!disk_path.empty()) {
    Result<std::string> bytes = read_file(disk_path);
    if (bytes.ok()) {
      auto k = std::make_shared<CompiledKernel>();
      k->key = key;
      k->source_address = kernel_source_address(source);
      k->arch = options_.arch;
      k->image = std::move(bytes).value();
      k->is_ptx = ptx;
      std::lock_guard<std::mutex> lock(mu_);
      ++hits_;
      memory_[key] = k;
      return std::shared_ptr<const CompiledKernel>(k);
    }
  }

  auto start = std::chrono::steady_clock::now();
  nvrtcProgram prog;
  nvrtcResult rc = nvrtcCreateProgram(&prog, source.c_str(), name.c_str(), 0, nullptr, nullptr);
  if (rc != NVRTC_SUCCESS) return internal_error(std::string("nvrtcCreateProgram: ") + nvrtcGetErrorString(rc));
  std::vector<const char*> opts;
  for (const auto& o : all_options_) opts.push_back(o.c_str());
  rc = nvrtcCompileProgram(prog, static_cast<int>(opts.size()), opts.data());
  size_t log_size = 0;
  nvrtcGetProgramLogSize(prog, &log_size);
  std::string log(log_size, '\0');
  if (log_size) nvrtcGetProgramLog(prog, &log[0]);
  while (!log.empty() && (log.back() == '\0' || log.back() == '\n')) log.pop_back();
  // NVRTC's automatic precompiled headers name a per-process folder in the log ("using
  // precompiled header file /tmp/__nvrtc_auto_pch_PID_N/..."): those lines say nothing about the
  // source, and a log recorded in a run must not depend on the process that compiled it.
  {
    std::string kept;
    size_t at = 0;
    while (at < log.size()) {
      size_t end = std::min(log.find('\n', at), log.size());
      std::string line = log.substr(at, end - at);
      if (line.find("precompiled header") == std::string::npos) kept += (kept.empty() ? "" : "\n") + line;
      at = end + 1;
    }
    log = std::move(kept);
  }
  if (rc != NVRTC_SUCCESS) {
    nvrtcDestroyProgram(&prog);
    return invalid_argument(name + " does not compile for " + options_.arch + ": " + nvrtcGetErrorString(rc) + "\n" +
                            log);
  }
  auto k = std::make_shared<CompiledKernel>();
  size_t size = 0;
  if (ptx) {
    nvrtcGetPTXSize(prog, &size);
    k->image.resize(size);
    nvrtcGetPTX(prog, &k->image[0]);
  } else {
    nvrtcGetCUBINSize(prog, &size);
    k->image.resize(size);
    nvrtcGetCUBIN(prog, &k->image[0]);
  }
  nvrtcDestroyProgram(&prog);
  k->key = key;
  k->source_address = kernel_source_address(source);
  k->arch = options_.arch;
  k->is_ptx = ptx;
  k->log = std::move(log);
  k->compile_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  if (!disk_path.empty()) VINCI_RETURN_IF_ERROR(write_file_atomic(disk_path, k->image));
  std::lock_guard<std::mutex> lock(mu_);
  ++misses_;
  auto [it, fresh] = memory_.emplace(key, k);
  return it->second;
}

std::vector<double> precompile(NvrtcCompiler& compiler,
                               const std::vector<std::pair<std::string, std::string>>& named_sources, int threads) {
  std::mutex mu;
  size_t next = 0;
  std::vector<double> ms;
  std::vector<std::thread> pool;
  for (int i = 0; i < std::max(1, threads); ++i)
    pool.emplace_back([&] {
      for (;;) {
        size_t at;
        {
          std::lock_guard<std::mutex> lock(mu);
          if (next >= named_sources.size()) return;
          at = next++;
        }
        int64_t misses = compiler.misses();
        Result<std::shared_ptr<const CompiledKernel>> c =
            compiler.compile(named_sources[at].second, named_sources[at].first);
        std::lock_guard<std::mutex> lock(mu);
        if (c.ok() && compiler.misses() > misses && (*c)->compile_ms > 0) ms.push_back((*c)->compile_ms);
      }
    });
  for (auto& t : pool) t.join();
  return ms;
}

std::string nvrtc_version() {
  int major = 0, minor = 0;
  nvrtcVersion(&major, &minor);
  return std::to_string(major) + "." + std::to_string(minor);
}

}  // namespace vinci

// Triton kernels: compiled to a cubin by Triton (a Python process of its own), launched by vinci.
//
// A plan kernel of language "triton" is a Python module of @triton.jit functions; each launch of
// it says its compile-time constants, num_warps and num_stages (PlanStep::triton). Triton is the
// compiler only: TritonCompiler runs gpu/compile/triton_compile.py in a separate process and gets
// back the cubin and its launch metadata (TritonKernelMeta: the entry point's name, dynamic shared
// memory, warps, the trailing scratch arguments). Importing the module runs model-written Python,
// so that process runs in a sandbox (docs/live_evaluator.md, "Compile sandbox"): an allowlisted
// environment, a read-only view of only what Python and Triton need plus a fresh temporary folder,
// its own pid, network and IPC namespaces (bwrap), uid 65534 when vinci runs as root, and limits
// on time, CPU, memory, file size and processes. Results are cached by content address, like
// NVRTC's, in memory and optionally in a folder shared between processes. The CUDA worker loads
// the cubin with the driver API and launches it with Triton's argument convention: the launch's
// non-constexpr arguments, then the global scratch pointer and the profile scratch pointer (null
// when their sizes are 0). docs/plan_format.md ("Triton kernels") is the user-facing description.
// No GPU is needed to compile.
#ifndef VINCI_GPU_COMPILE_TRITON_H_
#define VINCI_GPU_COMPILE_TRITON_H_

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "core/hash.h"
#include "core/status.h"
#include "gpu/compile/sandbox.h"
#include "gpu/expr.h"
#include "gpu/plan.h"

namespace vinci {

// What one Triton compile needs: the module, the function, the types of its non-constexpr
// parameters ("*fp32", "*i64", "i64"), its constexprs as JSON scalars, warps and stages.
struct TritonCompileRequest {
  std::string source;
  std::string kernel;
  std::vector<std::string> signature;
  nlohmann::json constexprs = nlohmann::json::object();  // name -> integer, float or bool
  int64_t num_warps = 4;
  int64_t num_stages = 3;
  int arch = 90;
};

// The launch metadata of a compiled Triton kernel.
struct TritonKernelMeta {
  std::string name;       // the entry point in the cubin
  int64_t shared = 0;     // dynamic shared memory, bytes
  int64_t num_warps = 4;  // block = 32 * num_warps threads
  int64_t num_stages = 3;
  int64_t num_ctas = 1;
  int64_t global_scratch_size = 0;  // bytes per program; > 0: a buffer of grid * size is passed
  int64_t global_scratch_align = 1;
  int64_t profile_scratch_size = 0;
  int64_t profile_scratch_align = 1;
  bool launch_cooperative_grid = false;
  bool launch_pdl = false;
  int64_t tmem_size = 0;
  std::vector<std::string> params;  // the non-constexpr parameters' types, in order
  std::string triton_version;
  std::string options;  // the compile options, as recorded in a measurement

  friend bool operator==(const TritonKernelMeta& a, const TritonKernelMeta& b);
};

// The codec of the metadata: canonical JSON (sorted keys), every field written. decode names the
// field that is missing or of the wrong type.
std::string encode_triton_meta(const TritonKernelMeta& meta);
Result<TritonKernelMeta> decode_triton_meta(std::string_view text);
// A cached artifact: "vinci.triton/1\n", the metadata's length (decimal) and "\n", the metadata,
// then the cubin's bytes.
std::string encode_triton_artifact(const TritonKernelMeta& meta, const std::string& cubin);
Result<std::pair<TritonKernelMeta, std::string>> decode_triton_artifact(std::string_view bytes);

// Why vinci cannot launch this kernel as it was compiled ("" when it can): clusters, cooperative
// grids, programmatic dependent launch and profile scratch are not supported.
std::string triton_meta_unsupported(const TritonKernelMeta& meta);

struct CompiledTriton {
  Digest key;
  TritonKernelMeta meta;
  std::string cubin;
  // Wall-clock time of the compile process, an annotation only: never feeds a derived value.
  double compile_ms = 0;
};

// The compile process's limits, each enforced by the kernel (setrlimit through prlimit); 0: none.
// A compile past one is rejected (InvalidArgument) with a message that names it. The defaults
// leave a real compile far from every limit: a compile of tests/gpu/triton_plans (Triton 3.9, one
// thread) peaks at 0.23 GiB of address space, a few seconds of CPU and files of at most a few
// hundred KiB, in one process plus ptxas. Address space grows with LLVM's threads and glibc's
// per-thread malloc arenas (64 MiB reserved each) on many-core machines, hence 8 GiB; a real
// kernel rejected with "MemoryError" or "out of memory" naming the limit means it needs raising.
using TritonLimits = SandboxLimits;

struct TritonOptions {
  std::string python;      // empty: $VINCI_TRITON_PYTHON, else python3
  std::string script;      // empty: $VINCI_TRITON_COMPILE, else gpu/compile/triton_compile.py of the tree
  std::string cache_dir;   // empty: memory only
  double timeout_s = 120;  // wall-clock: a compile still running after this is rejected
  TritonLimits limits;
  // false: no bwrap (the environment allowlist and the limits still apply); for a machine where
  // bwrap cannot work, and said loudly as a missing sandbox is.
  bool sandbox = true;
  std::string bwrap;  // empty: $VINCI_BWRAP, else bwrap on PATH
  int arch = 90;
};

class TritonCompiler {
 public:
  explicit TritonCompiler(TritonOptions options = {});

  // The installed Triton's version ("3.9.0"), asked once; FailedPrecondition naming the python
  // and the fix when Triton is not installed.
  Result<std::string> version();

  // A kernel that does not compile, or whose compile hits a limit, is an expected failure:
  // InvalidArgument with Triton's message or the limit's. FailedPrecondition when Triton is missing.
  Result<std::shared_ptr<const CompiledTriton>> compile(const TritonCompileRequest& request);

  const TritonOptions& options() const { return options_; }
  // What the compile process runs in here, as recorded in a measurement's settings
  // (triton_sandbox): "bwrap: env allowlist, read-only fs, pid+net+ipc namespace, uid 65534,
  // limits cpu=60s as=8GiB fsize=64MiB nproc=64 core=0 oom_score_adj=1000", or "none (why): ..."
  // where bwrap cannot be used, or "unavailable: why" where the python cannot run. Probes once
  // (runs the python, then bwrap); a missing feature is also said once on stderr.
  std::string sandbox_description() { return sandbox_.description(); }
  // Whether compiles run without a network (bwrap, else `unshare -rn`).
  bool network_isolated() { return sandbox_.network_isolated(); }
  int64_t hits() const;
  int64_t misses() const;

 private:
  TritonOptions options_;
  PythonSandbox sandbox_;
  mutable std::mutex mu_;
  std::string version_;
  std::map<Digest, std::shared_ptr<const CompiledTriton>> memory_;
  int64_t hits_ = 0;
  int64_t misses_ = 0;
};

// The compile request of a plan's step that launches a Triton kernel: the signature from the
// arguments (a buffer: "*fp32" or "*i64" by its dtype; a size expression: "i64") and each
// constexpr's value (a size expression evaluated in env; a float literal; True or False).
Result<TritonCompileRequest> triton_request(const Plan& plan, const PlanStep& step, const ExprEnv& env, int arch);

// True when the plan has a kernel of language "triton".
bool has_triton_kernels(const Plan& plan);

}  // namespace vinci

#endif  // VINCI_GPU_COMPILE_TRITON_H_

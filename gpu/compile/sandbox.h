// A sandbox for model-written Python: the process that imports a candidate's module runs apart
// from the harness and its secrets (docs/live_evaluator.md, "Compile sandbox").
//
// PythonSandbox runs a trusted script of vinci's (a Triton compile, a KernelBench module's check)
// with an interpreter found by a probe, in a fresh temporary folder that is its only writable
// place, made by `bwrap` where it works: an allowlisted environment, a read-only view of only what
// Python, one package (Triton, PyTorch) and the script need, its own pid, network and IPC
// namespaces, uid 65534 when vinci runs as root, and limits on CPU time, memory, file size and
// processes (prlimit). Every process the module starts ends with the run. Where bwrap cannot
// work, the strongest weaker setup that runs is used and what is missing is said once on stderr.
#ifndef VINCI_GPU_COMPILE_SANDBOX_H_
#define VINCI_GPU_COMPILE_SANDBOX_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/scratch_dir.h"  // remove_folder
#include "core/status.h"

namespace vinci {

// The sandboxed process's limits, each enforced by the kernel (setrlimit through prlimit); 0: none.
struct SandboxLimits {
  int64_t cpu_s = 60;                    // CPU seconds per process: SIGXCPU, then SIGKILL a second later
  int64_t memory_bytes = 8LL << 30;      // address space per process (RLIMIT_AS): MemoryError, ENOMEM
  int64_t file_size_bytes = 64LL << 20;  // the largest file it may write (RLIMIT_FSIZE): EFBIG, SIGXFSZ
  int64_t processes = 64;                // processes and threads (RLIMIT_NPROC): fork fails with EAGAIN
};

// How one run of a process ended.
struct ProcessRun {
  std::string out, err;
  bool out_truncated = false;
  int exit_code = 0;  // valid when signal == 0
  int signal = 0;     // the signal that ended it; 0: it exited
  bool timed_out = false;
};

// The most of a sandboxed process's standard output that is kept (a Triton cubin in base64 is a
// few MiB at most); more sets ProcessRun::out_truncated.
constexpr size_t kMaxSandboxStdout = 64 << 20;

struct SandboxOptions {
  std::string python;   // the interpreter: a name on PATH or a path
  std::string script;   // the trusted script the sandbox runs; shown read-only
  std::string package;  // the Python package whose folder is shown besides sys.path ("triton", "torch")
  std::string what;     // the process in messages: "compile" -> "the compile process", "the compile's ..."
  std::string purpose;  // in the warning about a weaker sandbox: "Triton compiles"
  std::string cannot;   // the probe error's start: "cannot run the Triton compile step 'python3 x.py': "
  std::string fix;      // and its end: " (set VINCI_TRITON_PYTHON to a python with triton installed)"
  std::string off_reason = "the sandbox is off";  // the description's reason when sandbox is false
  std::string temp_prefix = "vinci_sandbox";      // the run's folder: /tmp/<temp_prefix>_XXXXXX
  // Where the process sees the run's torch extension folder (FOLDER/torch_extensions,
  // $TORCH_EXTENSIONS_DIR), when bwrap runs: one path for every run, since load_inline writes it
  // into its build files and a build copied into another run is reused only at the same path.
  // Empty, or without bwrap: FOLDER/torch_extensions itself.
  std::string extension_dir;
  std::vector<std::string> env;  // "NAME=VALUE" set for the process besides the allowlisted ones
  SandboxLimits limits;
  // false: no bwrap (the environment allowlist and the limits still apply); for a machine where
  // bwrap cannot work, and said loudly as a missing sandbox is.
  bool sandbox = true;
  std::string bwrap;  // empty: $VINCI_BWRAP, else bwrap on PATH
  // true: the process sees the GPUs (the /dev/nvidia* device nodes, bound through bwrap, and /sys
  // read-only): a KernelBench module's run. RLIMIT_AS must then be 0 (none): CUDA reserves
  // address space for the whole device's memory and fails to start under an address-space limit.
  bool gpu = false;
};

// What a caller does with a run's folder around the process: `before` fills it before the
// process starts (what it writes is then handed to the process's uid), `after` reads it once every
// process of the run has ended, before the folder is removed. An error of either ends the run.
// `during` makes the run a conversation: it runs on a thread of its own while the process runs
// (talking to it through a socket in the folder, say) and the process is stopped when it returns;
// ended_fd becomes readable (poll) once the process has ended, so that `during` never waits on a
// process that is gone. Its error ends the run (the process is stopped first).
struct SandboxHooks {
  std::function<Status(const std::string&folder)> before, after;
  std::function<Status(const std::string& folder, int ended_fd)> during;
};

class PythonSandbox {
 public:
  explicit PythonSandbox(SandboxOptions options);
  ~PythonSandbox();

  // Runs the interpreter with python_args (the script's path is script()) in a fresh temporary
  // folder, input on its stdin. Probes the setup on first use: FailedPrecondition (cannot + why +
  // fix) when the interpreter does not run in any setup.
  Result<ProcessRun> run(const std::vector<std::string>& python_args, const std::string& input, double timeout_s,
                         const SandboxHooks& hooks = {});
  // The script's path as the sandboxed process sees it (a real path).
  Result<std::string> script();
  // What a run executes in here, as a measurement records it: "bwrap: env allowlist, read-only fs,
  // pid+net+ipc namespace, uid 65534, limits cpu=60s as=8GiB fsize=64MiB nproc=64 core=0
  // oom_score_adj=1000", or "none (why): ..." where bwrap cannot be used, or "unavailable: why".
  std::string description();
  bool network_isolated();  // whether runs have no network (bwrap, else `unshare -rn`)
  const SandboxOptions& options() const { return options_; }

  // Why a process that gave no answer ended, naming the limit where it hit one.
  std::string ending_text(const ProcessRun& run) const;
  // What an error text says about a limit the process ran into, " (...)" naming it, or "".
  std::string limit_hint(const std::string& text) const;

  struct Setup;  // how a process is started here, as probed (sandbox.cc)

 private:
  Result<std::shared_ptr<const Setup>> setup();

  SandboxOptions options_;
  std::mutex mu_;  // held while probing, so the setup is probed once
  std::shared_ptr<const Setup> setup_;
  Status probe_error_;
  bool probed_ = false;
};

// "64 MiB", "8 GiB", "1000 bytes".
std::string bytes_text(int64_t bytes);

// Copies the folders and regular files under `from` into `to` (made, with its parents), keeping
// each file's modification time and permission bits (never set-id bits); anything else (links,
// fifos, sockets, devices) is left out, so a tree a sandboxed process wrote can be copied out
// without following what it points at. More than max_bytes of file content or max_entries
// entries is an error (what was copied stays for the caller to remove).
Status copy_plain_tree(const std::string& from, const std::string& to, int64_t max_bytes, int64_t max_entries);

// The value of environment variable `name`, or fallback when it is unset or empty.
std::string env_or(const char* name, const std::string& fallback);

}  // namespace vinci

#endif  // VINCI_GPU_COMPILE_SANDBOX_H_

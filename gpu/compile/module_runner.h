// The run of a KernelBench module on the device (docs/kernelbench_format.md, "Live evaluation"):
// gpu/compile/module_run.py in the module sandbox with the GPU's device nodes, one process per
// candidate, driven over a Unix socket by the evaluator's worker. The worker keeps the reference,
// the inputs' originals and every verdict; the runner builds ModelNew as KernelBench builds a
// candidate, runs it on the inputs it is sent, returns its output and times it. Nothing the runner
// says decides a verdict on its own: outputs are compared by the worker, and a runner that dies,
// hangs or answers out of form is the candidate's failure.
//
// No torch or CUDA headers: tensors cross as bytes with a dtype name and a shape. With device
// "cpu" the same conversation runs without a GPU (the tests' way of running it on any machine).
#ifndef VINCI_GPU_COMPILE_MODULE_RUNNER_H_
#define VINCI_GPU_COMPILE_MODULE_RUNNER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "gpu/compile/sandbox.h"
#include "gpu/kernelbench_module.h"

namespace vinci {

struct ModuleRunOptions {
  std::string python;           // empty: $VINCI_MODULE_PYTHON, else python3
  std::string script;           // empty: $VINCI_MODULE_RUN, else gpu/compile/module_run.py of the tree
  std::string device = "cuda";  // cuda, or cpu (the conversation without a GPU)
  double load_timeout_s = 600;  // starting, importing and building ModelNew (a load_inline build when not cached)
  double call_timeout_s = 120;  // one run, timing or profile: past it the candidate hangs
  // No address-space limit (CUDA reserves the device's memory in it); CPU time bounds the whole
  // session, which spins while it waits for the device.
  SandboxLimits limits = {3600, 0, 1LL << 30, 256};
  bool sandbox = true;           // false: no bwrap (said loudly)
  std::string bwrap;             // empty: $VINCI_BWRAP, else bwrap on PATH
  std::vector<std::string> env;  // "NAME=VALUE" for the runner besides the allowlist (CUDA_VISIBLE_DEVICES)
  // Inputs of a run up to this many bytes in all keep a pristine copy on the runner's device (to
  // see whether the module wrote them); larger ones are compared with the region they came in, a
  // chunk at a time, so that the runner does not hold the largest tasks' inputs twice.
  int64_t pristine_on_device_bytes = int64_t{1} << 30;
  // Where the worker's device is a GPU: page-locks a region of the shared memory, so that the
  // device copies into and out of it run at the bus's speed instead of through a staging buffer
  // (a 400 MB copy to pageable memory took 290 ms on an H100, to pinned 7.4 ms), and undoes it
  // before the region is unmapped. Empty, or pin returning false: the region stays pageable.
  std::function<bool(void* data, size_t size)> pin;
  std::function<void(void* data)> unpin;
};

// A tensor crossing to or from the runner: a dtype name (float32, int64, ...; module_run.py's
// DTYPES), a shape and its size. Its bytes cross in shared memory (a sealed memfd each way, its fd
// sent over the socket beside the command), not through the socket.
struct ModuleTensor {
  std::string dtype;
  std::vector<int64_t> shape;
  int64_t bytes = 0;
  const char* data = nullptr;  // an input's bytes, copied in when run() has no fill; unused in answers
};

// Writes input i's bytes (inputs[i].bytes of them) at dst, in the shared memory the runner reads
// (a device-to-host copy can land there directly).
using ModuleFill = std::function<void(size_t i, char* dst)>;
// Takes a run's output: its shape, dtype and size, and its bytes in the shared memory the runner
// wrote (valid until the session's next command); false and why to refuse it.
using ModuleOutput = std::function<bool(const ModuleTensor& output, const char* bytes, std::string* why)>;

// How a command ended: ok, or the candidate's failure (kind: import_error, no_model_new,
// construct_error, runtime_error, out_of_memory, wrong_type, wrong_output, writes_input,
// output_aliases_input, crashed, hang, bad_answer) with what its author can read.
struct ModuleOutcome {
  bool ok = false;
  std::string kind;
  std::string error;
};

struct ModuleLoad : ModuleOutcome {
  std::string torch_version;
  std::string device_name;
  int64_t parameters = 0;
  int64_t threads = 0;  // the runner's threads before the module ran
  double ms = 0;        // wall-clock from the start to the built ModelNew, an annotation
};

struct ModuleRunAnswer : ModuleOutcome {
  ModuleTensor output;               // shape, dtype and size; the bytes went to run()'s output
  double ms = 0;                     // the forward and a device synchronization, an annotation
  std::vector<std::string> threads;  // threads alive past those of the runner before the module ran
  int64_t slots = 0;                 // the input slots the runner holds after the run
};

struct ModuleTiming : ModuleOutcome {
  // Per sample, microseconds: device = from an event before the forward to one recorded after a
  // device-wide synchronization (every stream's work); stream = to an event recorded on the
  // default stream right after the forward returns; host = the runner's clock around both;
  // overhead = the device-wide bracket around nothing (its cost, to take off device).
  std::vector<double> device_us, stream_us, host_us, overhead_us;
  // The worker's own clock, which the module cannot touch: per sample, from its go to the runner's
  // done (the forward, a device-wide synchronization and a socket round trip); per ping, the same
  // bracket around a synchronization alone.
  std::vector<double> worker_us, ping_us;
  std::vector<std::string> threads;
  double wall_us = 0;  // the worker's clock around the whole command
};

struct ModuleKernel {
  std::string name;  // as the profiler names it (demangled)
  double us = 0;     // device time of all its launches in the profiled forward
  int64_t count = 0;
};

struct ModuleProfile : ModuleOutcome {
  std::vector<ModuleKernel> kernels;
};

class ModuleSession;

// Starts runner processes (one per candidate); its sandbox setup is probed once.
class ModuleRunner {
 public:
  explicit ModuleRunner(ModuleRunOptions options = {});
  ~ModuleRunner();

  // Starts a runner and loads module into it (KernelBench's build: manual_seed(seed),
  // get_init_inputs() of reference, manual_seed(seed), ModelNew(*init), moved to the device).
  // build: a folder holding what an import check built for this module (ModuleChecker's cache
  // entry), copied into the runner's extension folder first, or "". FailedPrecondition when this
  // machine cannot run a module of that backend (no python, torch, CUDA device or Triton); the
  // module's own failure is a session whose load() is not ok.
  // timing_seed seeds the runner's own generator of the timed samples' inputs.
  Result<std::unique_ptr<ModuleSession>> start(const std::string& module, const std::string& reference,
                                               ModuleBackend backend, int64_t seed = 42, const std::string& build = "",
                                               uint64_t timing_seed = 0);

  std::string sandbox_description() { return sandbox_.description(); }
  const ModuleRunOptions& options() const { return options_; }

 private:
  ModuleRunOptions options_;
  PythonSandbox sandbox_;
};

// One runner process and its conversation. Commands after a failure return that failure again:
// the runner has ended.
class ModuleSession {
 public:
  ~ModuleSession();  // ends the runner and every process it started
  ModuleSession(const ModuleSession&) = delete;
  ModuleSession& operator=(const ModuleSession&) = delete;

  const ModuleLoad& load() const { return load_; }

  // Runs the forward on inputs, kept in slot; reuse writes them into the slot's earlier tensors
  // (the same addresses). fill writes the inputs' bytes (default: from each input's data).
  // output(answer.output, bytes, why) takes the output, or refuses it (then the answer is
  // wrong_output with why); an output larger than max_output_bytes is refused unread.
  Result<ModuleRunAnswer> run(int slot, bool reuse, const std::vector<ModuleTensor>& inputs, const ModuleOutput& output,
                              int64_t max_output_bytes, const ModuleFill& fill = nullptr);
  // Times the forward on slot's inputs: warmups, pings, then samples, each on fresh inputs after
  // a write of flush_bytes (the L2 flush) and a device-wide synchronization, bracketed by the
  // worker's clock too.
  Result<ModuleTiming> time(int slot, int samples, int warmups, int64_t flush_bytes, int pings = 20);
  // The device's kernels during one forward on slot's inputs (torch.profiler).
  Result<ModuleProfile> profile(int slot);

  // Ends the runner; its stderr (the module's prints, the last 64 KiB) and how it ended.
  std::string finish();

  struct Impl;

 private:
  friend class ModuleRunner;
  explicit ModuleSession(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
  ModuleLoad load_;
};

}  // namespace vinci

#endif  // VINCI_GPU_COMPILE_MODULE_RUNNER_H_

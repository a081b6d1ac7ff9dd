// The live evaluation of one plan on this process's GPU: what the CUDA worker process runs
// (gpu/live/cuda_worker_main.cc). The harness never links this file: candidate code runs only in the
// worker, behind gpu/live/cuda_evaluator.h.
//
// One evaluation (docs/live_evaluator.md has the whole procedure and every reason a candidate
// fails):
//   1. compile every kernel with NVRTC for this GPU's architecture (cached by source address) and
//      load it with the driver API; a plan that fails validation, NVRTC or loading is not compiled;
//   2. correctness, `trials` trials with fresh keyed inputs from three distributions; the candidate
//      always runs before the reference, on copies of the inputs and weights, with every buffer of
//      its own poisoned (NaN) first; then: inputs and weights unchanged, output shape/dtype/device
//      right and not aliasing an input, every kernel of its own wrote something, no NaN/Inf where
//      the reference is finite, allclose(atol, rtol) and a relative L2 error bound, a second run on
//      the same input bit-identical, new data at the same addresses (odd trials) and the same data
//      at new addresses (after the trials) both right; negative controls (zeros, a constant, the
//      input itself) are checked against the reference and flagged when the tolerance lets them pass;
//   3. timing, only for a correct candidate: warm-ups, then `samples` rounds that each time the
//      candidate and the libtorch reference (order alternating) with CUDA events on the legacy
//      default stream, the L2 flushed before each by writing a buffer sized from the device's L2
//      size, a whole-device synchronise before the end event and a host clock around it all.
//      Every candidate sample starts from a fresh state: its own buffers poisoned again, its device
//      globals reset to their state at load, its inputs one of a rotation of timing sets never
//      used in the trials; the last sample of each set and keyed spot checks are compared with the
//      reference. Every sample is recorded, the median reported; a median below the device
//      profile's floor, or event times the host clock contradicts, is measured again and, if the
//      second pass agrees, rejected (below_floor, timer_mismatch).
// Running out of device memory frees the worker's caches and retries once; the task's own side
// (reference, inputs, weights) still not fitting skips the task with its reason.
// A launch that does not finish within the launch timeout is a hang. After a hang or a sticky
// CUDA error (illegal address, trap, misaligned access) the context is lost: the result says so and
// the worker exits so the harness starts a fresh one.
#ifndef VINCI_GPU_LIVE_LIVE_EVAL_H_
#define VINCI_GPU_LIVE_LIVE_EVAL_H_

#include <map>
#include <memory>
#include <string>

#include "core/status.h"
#include "gpu/eval_result.h"
#include "gpu/plan.h"
#include "gpu/task.h"

namespace vinci {

struct LiveOptions {
  std::string nvrtc_cache_dir;   // empty: compile in memory only
  std::string profile_path;      // device profile for the roofline floor; empty: built-in h200
  int warmups = 3;               // untimed runs of each before the samples
  double launch_timeout_s = 10;  // a launch still running after this is a hang
  double l2_flush_multiple = 2;  // the flush buffer is this many times the L2 size
  double norm_tolerance = 1e-2;  // relative L2 error bound beside allclose; 0: off
  ReferencePrecision reference_precision = ReferencePrecision::kKernelbench;  // gpu/eval_result.h
  double roofline_margin = 1.05;                                              // flag times below floor / margin
  double timing_budget_ms = 0;                 // > 0: stop sampling a candidate after this much timed
                                               // wall time (at least 5 samples each); recorded in settings
  double triton_timeout_s = 120;               // a Triton compile (gpu/compile/triton.h) past this fails the candidate
  PlanLimits limits;                           // gpu/plan.h; those not at their default are recorded
  int64_t cpu_input_limit = int64_t{1} << 24;  // inputs up to this many elements come from the
                                               // CPU generator (KernelBench-identical); larger
                                               // ones from the device's generator
  double cache_budget_fraction = 0.25;         // the worker's caches (task weights, drawn inputs) hold at
                                               // most this share of the device's memory, LRU-evicted
  int timing_input_sets = 3;                   // the rotation of inputs the timed samples read (docs/live_evaluator.md,
                                               // "Timing"); fewer, down to one, where they would not fit
  // KernelBench modules (docs/kernelbench_format.md, "Live evaluation"): where their builds are
  // kept by content address (empty: a folder of this worker's own, removed at its end), and how
  // long one command to a module's runner (a forward, the timed samples, the profiled run) may take.
  std::string module_cache_dir;
  double module_call_timeout_s = 120;
  bool profile_phases = false;  // time each phase of an evaluation (LiveStats::phase_ms),
                                // synchronizing the device at each phase's end
};

// The phases of one evaluation, in the order they are reported: compile (NVRTC or Triton, module
// loads), setup (the task instance and its weights), inputs (generating each trial's inputs and
// copying them into guarded buffers), candidate (the candidate's correctness runs and repeats),
// reference (the reference's correctness runs), checks (comparisons, guard zones, input and
// alias checks, negative controls), timing (the profiled run, warmups and timed samples of both).
inline constexpr const char* kLivePhases[] = {"compile",   "setup",  "inputs", "candidate",
                                              "reference", "checks", "timing"};

// Wall-clock figures of one evaluation: reported to people, never part of a record.
struct LiveStats {
  double compile_ms = 0;  // NVRTC time (0 when every kernel came from the cache)
  double eval_ms = 0;     // the whole evaluation
  int kernels_compiled = 0;
  bool context_lost = false;  // the worker must exit: the CUDA context is unusable
  // With LiveOptions::profile_phases: milliseconds per phase (kLivePhases), each ended by a device
  // synchronization so that asynchronous work is charged to the phase that queued it.
  std::map<std::string, double> phase_ms;
};

class LiveDevice {
 public:
  // Fails without a CUDA driver, a GPU or a CUDA build of libtorch.
  static Result<std::unique_ptr<LiveDevice>> open(const LiveOptions& options);
  ~LiveDevice();

  // A candidate's failure is an ok result whose record says why; a non-ok Result means the
  // evaluation could not be done (bad request, a plan for another task, the reference failed).
  Result<EvalResult> evaluate(const Task& task, const Plan& plan, const EvalRequest& request, LiveStats* stats);

  const std::string& device_name() const;
  const std::string& arch() const;  // "sm_90"
  int64_t l2_bytes() const;

  struct Impl;

 private:
  explicit LiveDevice(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace vinci

#endif  // VINCI_GPU_LIVE_LIVE_EVAL_H_

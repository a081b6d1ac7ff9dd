// `replay rescore`: a recorded run's kernels re-measured on another device, and the run re-derived
// from those measurements.
//
// 1. Every distinct plan the run measured (by content address) is evaluated once on the chosen
//    device: the live GPU (cuda) or a sim device profile (a calibrated one, say).
// 2. The run is re-driven with the backbone's decisions kept as recorded (they are events: the
//    backbone is answered from the log, as for an external model) and every measurement replaced
//    by the new one; every derived value (rewards, advantages, selections, verification verdicts,
//    library snapshots, metrics) is recomputed from them. Where a recomputed branch asks the
//    backbone something the run never asked (a summary triggered only under the new timings), or
//    the recorded answer no longer fits the call (a selection index past a candidate list the new
//    library made shorter), the run's own sim backbone answers, and the report counts those calls.
//    Each measurement, the re-drive's included, is appended to <out>/measurements.jsonl as it is
//    taken, so a rescore that stops loses no device time: --reuse takes the file up again, and a
//    rescore given its own complete file measures nothing.
// 3. The result is a new run (world "rescore", parent = the old run and its digest) that
//    `replay verify` re-derives from its own log, and a drift report: per task, recorded vs new
//    speedup of its plans; fast_p of the final evaluation before and after; which task verdicts
//    flip at each threshold.
#ifndef VINCI_REPLAY_RESCORE_H_
#define VINCI_REPLAY_RESCORE_H_

#include <functional>
#include <string>

#include "core/hash.h"
#include "core/status.h"
#include "gpu/live/cuda_evaluator.h"
#include "harness/settings.h"

namespace vinci {

struct RescoreOptions {
  std::string out_dir;  // the new run's folder (must not exist)
  DeviceKind device = DeviceKind::kCuda;
  std::string profile;  // sim: the device profile TOML (default: the run's own)
  int trials = 0;       // 0: the run's device.trials
  int samples = 0;      // 0: the run's device.timing_samples
  uint64_t seed = 0;    // seed of the re-measurement's trial inputs
  // cuda: the evaluator's settings (timeout_s, timing_budget_s, nvrtc_cache_dir, reference_precision;
  // task_dir empty: the run's task suite).
  CudaEvaluatorOptions cuda;
  // Non-empty: measure through this queue's workers (redis://HOST:PORT[/NAME], docs/distributed.md),
  // many plans at once, instead of in this process. The workers' own settings (--timeout-s,
  // --nvrtc-cache) apply there; cuda.timeout_s and cuda.nvrtc_cache_dir do not.
  std::string queue;
  int queue_in_flight = 64;  // plans sent at once through the queue
  bool force = false;        // re-drive under numeric settings that differ from the run's
  // An earlier rescore's <out>/measurements.jsonl: its measurements of this run's plans on the
  // same device with the same request are used instead of measuring again.
  std::string reuse;
  // Measure nothing: every plan's measurement comes from `reuse`, which stands for the device it was
  // measured on (one device per file). A plan the file lacks fails the rescore, naming it. This is
  // how a GPU rescore is re-derived on a machine without one, from its committed measurements.
  bool offline = false;
  // The comparison of the drift report's fast_p and verdicts: speedup > p (KernelBench's
  // definition) unless inclusive (speedup >= p).
  bool fast_p_inclusive = false;
};

struct RescoreReport {
  uint64_t distinct_plans = 0;
  uint64_t measured = 0;          // the run's distinct plans measured here (not in --reuse)
  uint64_t measured_redrive = 0;  // plans the run never measured, measured during the re-drive
  uint64_t reused = 0;            // plans taken from --reuse
  uint64_t fallback_calls = 0;    // backbone calls the recorded run could not answer
  uint64_t records = 0;
  Digest digest;
  std::string device;          // what the measurements came from
  std::string drift_markdown;  // also written to <out>/drift.md
  double measure_seconds = 0;
  double seconds = 0;
};

using RescoreProgress = std::function<void(uint64_t done, uint64_t total, const std::string& line)>;

Result<RescoreReport> rescore_run(const std::string& run_dir, const RescoreOptions& options,
                                  const RescoreProgress& progress = nullptr);

}  // namespace vinci

#endif  // VINCI_REPLAY_RESCORE_H_

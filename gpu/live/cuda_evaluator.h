// The live CUDA evaluator, as the harness sees it: an Evaluator whose candidates run in a worker
// process (`vinci-cuda-worker`, gpu/live/cuda_worker_main.cc), never in the harness.
//
// The worker owns the GPU (libtorch CUDA for the reference, the driver API for candidates) and
// evaluates one request at a time (gpu/live/live_eval.h says how). This side sends a request, waits
// for the answer with a timeout, and replaces the worker whenever it is lost: a candidate that
// hangs, traps, reads an illegal address or kills the process fails with a clear reason in its
// record, and the next evaluation gets a fresh worker. A worker that cannot start at all (no
// GPU, no driver) is an error of the evaluation, not of the candidate.
//
// Wire protocol over the worker's stdin/stdout (both sides in this library and the worker):
// frames of u64 little-endian length + bytes. The worker first sends a hello (JSON: device, arch,
// torch) or {"error": ...}. A request is one JSON frame; the answer is a JSON header frame
// ({"ok": true, "context_lost": b, "compile_ms": x, "eval_ms": x, "kernels_compiled": n} or
// {"ok": false, "error": ...}) and, when ok, a frame with the Measurement (Cap'n Proto, flat) and
// a frame with the compile log.
#ifndef VINCI_GPU_LIVE_CUDA_EVALUATOR_H_
#define VINCI_GPU_LIVE_CUDA_EVALUATOR_H_

#include <sys/types.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "gpu/eval_result.h"

namespace vinci {

struct CudaEvaluatorOptions {
  std::string worker_path;        // empty: $VINCI_CUDA_WORKER, else vinci-cuda-worker beside this program
  std::string task_dir;           // the worker's task suite folder (must be the harness's suite)
  std::string nvrtc_cache_dir;    // shared with other processes; empty: memory only
  std::string module_cache_dir;   // KernelBench modules' builds (gpu/live/live_eval.h); empty: the worker's own
  std::string profile_path;       // device profile for the roofline floor; empty: built-in h200
  double timeout_s = 600;         // an evaluation not answered by then is a hang: the worker is killed
  double launch_timeout_s = 10;   // the worker's limit for one launch
  double triton_timeout_s = 120;  // the worker's limit for one Triton compile (gpu/compile/triton.h)
  double norm_tolerance = 1e-2;
  ReferencePrecision reference_precision = ReferencePrecision::kKernelbench;  // gpu/eval_result.h
  int warmups = 3;
  double timing_budget_s = 0;   // > 0: a slow candidate's sampling stops after this (>= 5 samples)
  int timing_input_sets = 3;    // the inputs the timed samples rotate through (gpu/live/live_eval.h)
  PlanLimits limits;            // gpu/plan.h: passed to the worker
  bool profile_phases = false;  // the worker times each phase of an evaluation (gpu/live/live_eval.h)
};

// Wall-clock figures of the last evaluation and of the evaluator's life: for people, never for
// records.
struct CudaEvaluatorStats {
  double compile_ms = 0;     // NVRTC time in the worker for the last evaluation
  double eval_ms = 0;        // the worker's time for the last evaluation
  double round_trip_ms = 0;  // request to answer, as seen here
  int kernels_compiled = 0;
  std::map<std::string, double> phase_ms;  // with profile_phases: the worker's time per phase
  int workers_started = 0;
  int workers_lost = 0;
};

class CudaEvaluator : public Evaluator {
 public:
  explicit CudaEvaluator(CudaEvaluatorOptions options);
  ~CudaEvaluator() override;

  // Starts the worker now rather than at the first evaluation; fails without a GPU.
  Status start();

  // Thread-safe: evaluations are serialised (one GPU, one worker).
  Result<EvalResult> evaluate(const Task& task, const Plan& plan, const EvalRequest& request) override;
  std::string name() const override { return "cuda"; }

  // The GPU's name and NVRTC architecture ("sm_90"), after start.
  std::string device_name() const;
  std::string arch() const;
  CudaEvaluatorStats stats() const;

 private:
  Status start_locked();
  void stop_locked(bool kill_now);
  EvalResult lost_result(const Task& task, const Plan& plan, const EvalRequest& request, const std::string& why,
                         const std::string& tag);

  CudaEvaluatorOptions options_;
  mutable std::mutex mu_;
  pid_t pid_ = -1;
  int to_worker_ = -1;
  int from_worker_ = -1;
  std::string device_;
  std::string arch_;
  CudaEvaluatorStats stats_;
};

// Frames (u64 little-endian length + bytes) over pipes. read_frame waits at most timeout_s
// (< 0: forever); DeadlineExceeded is reported as kFailedPrecondition with "timeout" in the message.
Status write_frame(int fd, const std::string& bytes);
Result<std::string> read_frame(int fd, double timeout_s);

// The request frame, and its decoding in the worker.
std::string encode_eval_request(const std::string& task_id, const Plan& plan, const EvalRequest& request);
struct DecodedRequest {
  std::string task_id;
  Plan plan;
  EvalRequest request;
};
Result<DecodedRequest> decode_eval_request(const std::string& bytes);

// An EvalResult as a flat Cap'n Proto Measurement, and back (the compile log travels beside it).
std::string encode_eval_result(const EvalResult& r);
Result<EvalResult> decode_eval_result(const std::string& bytes, const std::string& compile_log);

// The worker's path: options, $VINCI_CUDA_WORKER, or beside /proc/self/exe.
std::string default_cuda_worker_path();

}  // namespace vinci

#endif  // VINCI_GPU_LIVE_CUDA_EVALUATOR_H_

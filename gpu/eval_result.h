// The one result record of every evaluator (sim, cuda, recorded), and the Evaluator interface.
//
// EvalResult maps 1:1 onto schema::Measurement (recorder/vinci.capnp), so a harness above gpu/
// cannot tell which world it runs in except by the `evaluator` field. The compile log is text here
// and an address in the Measurement: hash_tagged(kCompileLogKind, text); the caller stores the
// text as an object under that address (the recorder's object store) when it logs the record.
#ifndef VINCI_GPU_EVAL_RESULT_H_
#define VINCI_GPU_EVAL_RESULT_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/hash.h"
#include "core/median_interval.h"
#include "core/status.h"
#include "gpu/plan.h"
#include "gpu/precision.h"
#include "gpu/task.h"
#include "recorder/vinci.capnp.h"

namespace vinci {

// Kernel output a record keeps (the rest is counted), and the settings keys it travels under.
constexpr size_t kKernelOutputKept = 4096;
constexpr const char* kKernelOutputKey = "kernel_output";
constexpr const char* kKernelOutputDroppedKey = "kernel_output_dropped_bytes";

// The object kind a compile log's text is stored under.
constexpr const char* kCompileLogKind = "compile_log";

// One correctness trial: fresh inputs from one distribution.
struct TrialResult {
  bool correct = false;
  double max_abs_err = 0;  // NaN when the output could not be compared (not written, crashed)
  double mean_abs_err = 0;
  std::string distribution;  // "uniform01", "signed", "heavy_tailed" (gpu/executor.h names)
  uint64_t seed = 0;         // the input generator seed of this trial

  friend bool operator==(const TrialResult& a, const TrialResult& b);
};

struct EvalResult {
  std::string evaluator;  // "sim", "cuda", "recorded"
  std::string device;     // device profile name or GPU name
  Digest plan;            // plan_address(plan)
  bool compiled = false;
  std::string compile_log;
  Digest compile_log_address;  // hash_tagged(kCompileLogKind, compile_log); zero when no log
  bool correct = false;
  std::vector<TrialResult> trials;
  std::vector<double> kernel_times_us;  // every sample, in the order taken
  std::vector<double> reference_times_us;
  std::string statistic = "median";
  double kernel_us = 0;  // the statistic of kernel_times_us
  double reference_us = 0;
  double speedup = 0;        // reference_us / kernel_us; 0 unless correct
  double time_coverage = 0;  // share of the plan's GPU time in its own kernels
  bool decoy = false;
  std::vector<std::string> flags;               // anti-hacking findings, sorted, unique
  std::string error;                            // why the candidate failed, for the user; "" when it did not
  std::map<std::string, std::string> settings;  // the evaluator's own settings (sorted by key)
  std::string size;                             // "full" or "small"
  // What the candidate's kernels printed (device printf) during the evaluation, captured by the
  // live evaluator's worker instead of reaching any terminal: the first kKernelOutputKept bytes,
  // and how many more there were. The Measurement has no field of its own for it: it travels in
  // the settings list under the reserved keys kKernelOutputKey and kKernelOutputDroppedKey, only
  // when there was output (so the records of silent candidates are what they always were).
  std::string kernel_output;
  int64_t kernel_output_dropped = 0;

  // Sorts and de-duplicates flags, sets compile_log_address from compile_log, the statistic from
  // the samples and the speedup from the statistic and correctness: the invariants every
  // evaluator's record keeps.
  void finalize();

  friend bool operator==(const EvalResult& a, const EvalResult& b);
  friend bool operator!=(const EvalResult& a, const EvalResult& b) { return !(a == b); }
};

struct EvalRequest;
// Appends a failed entry (NaN errors, the trial's distribution and input seed) for every trial of
// the request the evaluation did not reach: a record always has one entry per trial.
void add_unreached_trials(EvalResult* r, const std::string& task_id, const EvalRequest& request);

// Median of samples (mean of the middle two for an even count); 0 for no samples.
double median(std::vector<double> samples);

void to_measurement(const EvalResult& r, schema::Measurement::Builder b);
// compile_log_text resolves the compile log's address to its text (the object store); without it
// (or when it fails) compile_log stays empty and compile_log_address is still set.
Result<EvalResult> from_measurement(
    schema::Measurement::Reader r, const std::function<Result<std::string>(const Digest&)>& compile_log_text = nullptr);

// JSON for people and `harness eval`: the Measurement's field names (camelCase), addresses as
// 32 hex digits, the compile log as text, non-finite numbers as null.
nlohmann::json eval_result_to_json(const EvalResult& r);

// What to evaluate and how.
struct EvalRequest {
  SizeName size = SizeName::kFull;
  uint64_t seed = 0;    // root of the trial input seeds and of timing noise
  int trials = 5;       // correctness trials (KernelGYM: 5)
  int samples = 100;    // timing samples each of kernel and reference (KernelBench: 100)
  bool strict = false;  // strict tolerance: 1e-4 for fp32 (current KernelBench) instead of the task's
  // Adaptive timing (docs/live_evaluator.md, "Adaptive timing"): samples taken in steps until the
  // speedup's interval is narrow enough, `samples` the cap. Off: exactly `samples` each.
  bool adaptive = false;
  AdaptiveTiming adaptive_rule;
};

// The samples the adaptive rule keeps of two series taken in the fixed protocol's order: the
// shortest prefix (min_samples, then every step) at which the rule stops, both series cut to it.
// Records the rule, the samples used and why it stopped in settings.
void apply_adaptive_timing(const AdaptiveTiming& rule, std::vector<double>* kernel_us,
                           std::vector<double>* reference_us, std::map<std::string, std::string>* settings);

// Whether the rule looks at the samples once `taken` of each side are in: at min_samples, then
// every step (the sim's prefixes and the GPU worker's checks are the same points).
bool adaptive_check_due(const AdaptiveTiming& rule, int taken);

// The share of a timing pass's ordinary rounds (all but the final checked ones) whose output is
// compared with the reference's, chosen by a keyed draw the candidate cannot predict: one in
// kSpotCheckEvery in the fixed protocol. An adaptive rule may stop at its first look, so its share
// is raised until the rounds before that look are checked as often, in expectation, as all of the
// fixed protocol's ordinary rounds (at most every round): a candidate that skips its work at random
// to move the median meets as many checks whether the rule stops early or not.
constexpr int kSpotCheckEvery = 16;
double spot_check_share(const EvalRequest& request, int final_checks);
// Whether the round keyed `key` is spot-checked at that share (a keyed uniform draw below it).
bool spot_checked(uint64_t key, double share);

// The rule (its level, width, first look, step and the cap), the samples each side kept and why
// sampling stopped ("width", "cap", or the GPU worker's "budget"), into a measurement's settings.
void record_adaptive_timing(const AdaptiveTiming& rule, int cap, int used, const std::string& why,
                            std::map<std::string, std::string>* settings);

// The tolerance a request applies to a task: strict mode's 1e-4 (fp32), else the task's.
struct Tolerance {
  double atol = 0;
  double rtol = 0;
};
Tolerance tolerance_for(const Task& task, const EvalRequest& request);

// The reference's precision policy on a GPU (it also governs a plan's library steps, which run
// in the same process): "kernelbench" is PyTorch's default and KernelBench's baseline, cuDNN
// convolutions may use TF32 while matrix products stay FP32; "fp32" turns TF32 off in cuBLAS and
// cuDNN. Recorded in every live measurement's settings ("reference_precision"). The enum and its
// names are in gpu/precision.h; this parses a name at an edge (a config, the command line, the
// worker's argv, a queue's evaluator spec) with an error that says what each name means.
Result<ReferencePrecision> parse_reference_precision(const std::string& name);

// Every evaluator: sim (gpu/sim/sim_evaluator.h), cuda (live), recorded (answers from a log).
// A candidate's failure (does not compile, wrong, crashes) is a successful evaluation whose record
// says so; a non-ok Result means the evaluation itself could not be done (bad plan for the task,
// missing size, device error that is not the candidate's).
class Evaluator {
 public:
  virtual ~Evaluator() = default;
  virtual Result<EvalResult> evaluate(const Task& task, const Plan& plan, const EvalRequest& request) = 0;
  // "sim", "cuda", "recorded"
  virtual std::string name() const = 0;
};

}  // namespace vinci

#endif  // VINCI_GPU_EVAL_RESULT_H_

// Calibration of the simulated device against measured times.
//
// Given plans with measured times (from a live run: EvalResult.kernel_us and reference_us), fit a
// few of the profile's figures (the [efficiency] terms, launch costs, the in-flight constant, the
// wmma fraction, L2 bandwidth) by coordinate search in log space, minimising the mean squared
// log error of predicted vs measured times:
//   loss = mean_i (log t_pred(plan_i) - log t_meas_i)^2  [+ the same for each task's reference]
// Each parameter is multiplied by exp(+-step) while that lowers the loss; the step halves when no
// parameter moves, until it is below min_step or max_rounds pass. Deterministic: the order of
// parameters and samples is fixed and there is no randomness.
//
// The fit is judged by what RL cares about: the Spearman rank correlation, per task, of predicted
// vs measured speedups of the task's plans (ranks of ties averaged), averaged over tasks with at
// least three plans, before and after.
#ifndef VINCI_GPU_SIM_CALIBRATION_H_
#define VINCI_GPU_SIM_CALIBRATION_H_

#include <functional>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "gpu/plan.h"
#include "gpu/sim/device_profile.h"
#include "gpu/task.h"

namespace vinci {

struct CalibrationSample {
  const Task* task = nullptr;  // REQUIRES: outlives the call
  SizeMap sizes;
  Plan plan;
  double measured_us = 0;            // the plan's measured time (> 0)
  double measured_reference_us = 0;  // the task's eager reference measured beside it; 0: unknown
};

// A profile figure calibration may fit.
struct CalibrationParameter {
  std::string name;  // "efficiency.elementwise", "launch.kernel_us", ...
  double DeviceProfile::*field;
  double lo, hi;  // the range the fit keeps it in
};
// Every fittable figure, in a fixed order.
const std::vector<CalibrationParameter>& calibration_parameters();

struct CalibrationOptions {
  std::vector<std::string> parameters;  // names to fit; empty: all of calibration_parameters()
  int max_rounds = 200;
  double initial_step = 0.5;  // in log space: the first tries multiply by e^0.5 and e^-0.5
  double min_step = 1e-3;
  bool fit_reference = true;  // also fit the measured reference times, where given
  // What the loss compares: each plan's time (and each task's reference time), or each plan's
  // speedup over its task's reference (log of predicted over measured speedup; samples without a
  // measured reference compare times), which is what a sim world's verdicts depend on.
  enum class Objective { kTimes, kSpeedups };
  Objective objective = Objective::kTimes;
  // Each trial changes one figure; by default only the plans and references whose step bodies
  // read it are priced again, those that read it after the body (efficiency terms, launch
  // figures) are replayed from the standing point's body times, and the rest keep their times,
  // bit for bit. true: price everything for every trial, the same result at many times the cost
  // (a check of the former).
  bool reprice_everything = false;
};

struct TaskFit {
  std::string task_id;
  std::string sizes;  // "B=8,D=1001": a task appears once per size set it was measured at
  int plans = 0;
  double spearman_before = 0;
  double spearman_after = 0;
};

struct CalibrationReport {
  DeviceProfile fitted;
  std::map<std::string, double> before;  // parameter -> value, for the fitted parameters
  std::map<std::string, double> after;
  double loss_before = 0;
  double loss_after = 0;
  // Mean over tasks with >= 3 plans where both correlations are defined (0 when there are none).
  double spearman_before = 0;
  double spearman_after = 0;
  std::vector<TaskFit> tasks;  // sorted by task id
  int rounds = 0;
  int evaluations = 0;  // loss evaluations the search made
};

// Errors: no samples, a non-positive measured time, an unknown parameter name, a plan the model
// cannot cost.
Result<CalibrationReport> calibrate(const DeviceProfile& start, const std::vector<CalibrationSample>& samples,
                                    const CalibrationOptions& options = {});

// Spearman's rank correlation (Pearson on ranks, ties get their average rank). NaN (undefined)
// when either side is constant or there are fewer than 2 values: a task whose plans the model
// predicts all equal (launch-bound sizes) says nothing about ranking. REQUIRES: a.size() == b.size().
double spearman(const std::vector<double>& a, const std::vector<double>& b);

// Calls `line` with "path:N" and the object of every line of a JSON-lines file; blank lines and
// lines starting with '#' are skipped. Errors: the file cannot be opened ("<what> <path>: cannot
// open"), a line that is not a JSON object, or the first error `line` returns.
Status read_json_lines(const std::string& path, const std::string& what,
                       const std::function<Status(const std::string& where, const nlohmann::json& j)>& line);

// Reads measured plans from a JSON-lines file, one plan per line:
//   {"task": "L1_001", "size": "full", "knobs": {"gemm.tensor_cores": "tf32"},
//    "kernel_us": 812.3, "reference_us": 2790.1}
// "plan" (a plan object, gpu/plan.h) may stand in for "knobs" (the generator's plan for those
// knob values; {} is its default plan); "reference_us" may be left out. A live EvalResult's
// kernelUs and referenceUs are the two times. Blank lines and lines starting with '#' are
// skipped. Errors name the file, the line and the key.
Result<std::vector<CalibrationSample>> load_calibration_samples(const std::string& path, const TaskSuite& suite);

// A human-readable table of the report: parameters before/after, loss, correlations per task.
std::string calibration_report_text(const CalibrationReport& report);

}  // namespace vinci

#endif  // VINCI_GPU_SIM_CALIBRATION_H_

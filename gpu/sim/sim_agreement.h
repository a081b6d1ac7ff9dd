// How far the simulated device's verdicts are from a real GPU's, judged honestly: on tasks the
// profile was not fitted to.
//
// The data are `harness measure` sweeps (measurements.jsonl: one plan a line, named by its task,
// size and generator knobs, with the live verdict and times). The tasks are split in two halves by
// a keyed hash of their ids; the profile fitted (gpu/sim/calibration.h) to one half's correct plans
// judges the other half, and the other way round. Per plan family (the generator's family of the
// plan's costliest kernel: gemm, row_reduction, elementwise, or library when it has none) it
// reports what an ablation in the sim world depends on:
//   - the median |ln(sim speedup / measured speedup)| over plans correct in both worlds;
//   - the share of plans whose correctness verdict agrees;
//   - per threshold p, the share of plans whose fast_p verdict (correct and speedup > p,
//     KernelBench's definition) agrees.
#ifndef VINCI_GPU_SIM_SIM_AGREEMENT_H_
#define VINCI_GPU_SIM_SIM_AGREEMENT_H_

#include <string>
#include <vector>

#include "core/status.h"
#include "gpu/plan.h"
#include "gpu/sim/calibration.h"
#include "gpu/sim/device_profile.h"
#include "gpu/task.h"

namespace vinci {

// The family a plan's custom work belongs to: the family of its costliest-looking kernel (gemm
// over row_reduction over elementwise), "library" when it has none.
std::string plan_family(const Plan& plan);

// The generator's plan a measurement row names: generate_plan(task, knobs), accepted when its
// address is the row's, or when it is without the knobs of today's space that the row does not
// list, in plan.knobs and in every kernel's knobs (a row recorded before those knobs were added,
// whose defaults leave every kernel and step as they were).
// Errors: invalid_argument when the knobs generate no plan; failed_precondition (a stale row)
// when the row measured code this generator no longer writes.
// Whether `plan`, generated from a row's knobs, is the plan the row measured (the test above).
bool is_measured_plan(const Plan& plan, const std::map<std::string, std::string>& knobs,
                      const std::string& address_hex);
Result<Plan> plan_of_measurement(const Task& task, const std::map<std::string, std::string>& knobs,
                                 const std::string& address_hex);

// One measured plan with the live verdict.
struct MeasuredPlan {
  const Task* task = nullptr;  // REQUIRES: the suite outlives the plan
  SizeName size = SizeName::kFull;
  Plan plan;
  std::string family;  // plan_family(plan)
  std::string source;  // "file:line"
  bool live_compiled = false;
  bool live_correct = false;
  bool live_decoy = false;  // flagged a decoy: never counts toward fast_p
  double live_kernel_us = 0;
  double live_reference_us = 0;
  double live_speedup = 0;
};

struct MeasuredPlans {
  std::vector<MeasuredPlan> plans;
  // Rows whose knobs no longer generate the plan the sweep measured (the generator changed since):
  // left out, counted so a report can say so.
  int stale = 0;
};

// Reads a `harness measure` measurements.jsonl against the suite it was measured with. Errors name
// the file, the line and the key.
Result<MeasuredPlans> load_measured_plans(const std::string& path, const TaskSuite& suite);

struct AgreementGoals {
  double median_log_error = 0.10;
  double correct_agreement = 0.98;
  double fast_p_agreement = 0.95;
  std::vector<double> thresholds = {1.0, 1.2};
};

struct FamilyAgreement {
  std::string family;           // or "all"
  int plans = 0;                // compiled live
  int timed = 0;                // correct in both worlds: the sample of the log error
  double median_log_error = 0;  // NaN when timed == 0
  int correct_agree = 0;
  std::vector<int> fast_p_agree;  // per threshold
};

// One plan's verdicts in both worlds, for a user who wants to see where they part.
struct PlanVerdicts {
  const MeasuredPlan* plan = nullptr;
  bool sim_correct = false;
  bool sim_decoy = false;
  double sim_speedup = 0;
  double sim_kernel_us = 0;     // the plan's predicted time
  double sim_reference_us = 0;  // the reference's predicted time
  std::string sim_error;        // why the sim failed it, when it did
};

struct AgreementTable {
  std::vector<double> thresholds;
  std::vector<FamilyAgreement> rows;  // families in name order, then "all"
  std::vector<PlanVerdicts> plans;    // every plan judged, in the order judged
};

// fast_p as vinci scores it everywhere: correct, not a decoy, and a speedup strictly above p.
inline bool fast_p_verdict(bool correct, bool decoy, double speedup, double p) {
  return correct && !decoy && speedup > p;
}

// Markdown: one row per family and "all".
std::string agreement_table_markdown(const AgreementTable& t);

// JSON lines, one plan each: where it was measured, its family, and both worlds' verdicts.
std::string plan_verdicts_jsonl(const std::vector<PlanVerdicts>& plans);

// The sim evaluator's verdicts under `profile` against the live ones, per family. Plans that did
// not compile live are left out (a compile error is the same in both worlds).
Result<AgreementTable> sim_agreement(const DeviceProfile& profile, const std::vector<const MeasuredPlan*>& plans,
                                     const std::vector<double>& thresholds);

// How the GPU agrees with itself: the plans measured in more than one row (the same task, size and
// generated plan, in one sweep or in several), each pair of a plan's measurements compared the way
// the sim is compared with the GPU. Where the GPU's own verdicts part (a plan measured at 1.01x in
// one sweep and 0.99x in another), no model can agree with both. The rows read: plans = the pairs
// compared; timed = the pairs correct in both; median_log_error = the median |ln(speedup a /
// speedup b)| over those; the agreement counts are of pairs. `plans` of the table is empty.
AgreementTable live_repeatability(const std::vector<const MeasuredPlan*>& plans, const std::vector<double>& thresholds);

// Markdown: one row per family and "all", as agreement_table_markdown with the pair counts.
std::string repeatability_table_markdown(const AgreementTable& t);

struct HeldOutOptions {
  uint64_t split_seed = 0;  // the keyed hash that halves the tasks
  CalibrationOptions fit;
  AgreementGoals goals;
};

// A goal the committed measurements are known to miss, accepted while the figure is no worse than
// `bound`: a ratchet, so `harness calibrate --check` fails on a regression, not on a known gap.
// Text form, one per line ('#' starts a comment):  FAMILY METRIC BOUND
// METRIC is log_error (the median |ln ratio|; the figure must be <= BOUND), correct or fast_P
// (agreement in %, P a goal threshold such as 1 or 1.2; the figure must be >= BOUND).
struct ShortfallAllowance {
  std::string family, metric;
  double bound = 0;
  std::string where;  // "file:line"
};
// Errors name the file, the line and what was expected.
Result<std::vector<ShortfallAllowance>> parse_shortfall_allowances(const std::string& path, const std::string& text);

struct GoalCheck {
  std::vector<std::string> missed;   // goals missed and not allowed (or worse than allowed)
  std::vector<std::string> allowed;  // goals missed within their allowance
  std::vector<std::string> now_met;  // allowances whose goal is met: the allowance can go
};
// Figures compare at the precision the report prints (0.1 points, 0.001 in log error).
GoalCheck check_goals(const AgreementTable& held_out, const AgreementGoals& goals,
                      const std::vector<ShortfallAllowance>& allowances);

struct HeldOutReport {
  int tasks = 0;
  int halves[2] = {0, 0};   // tasks in each half
  AgreementTable before;    // the starting profile on every plan
  AgreementTable held_out;  // each half judged by the profile fitted to the other
  AgreementTable repeats;   // the GPU against itself (live_repeatability)
  DeviceProfile fitted;     // fitted to every correct plan (what a user would install)
  CalibrationReport fit_all;
  std::vector<std::string> shortfalls;  // held-out goals missed, one line each; empty: all met
};

// REQUIRES: plans of at least one task in each half.
Result<HeldOutReport> held_out_calibration(const DeviceProfile& start, const std::vector<MeasuredPlan>& plans,
                                           const HeldOutOptions& options);

// Markdown: the before and held-out tables and the goals missed.
std::string held_out_report_markdown(const HeldOutReport& report, const AgreementGoals& goals);

}  // namespace vinci

#endif  // VINCI_GPU_SIM_SIM_AGREEMENT_H_

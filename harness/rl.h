// The RL arithmetic of daVinci-kernel (docs/method.md, RL), as pure functions of recorded values:
// per-turn rewards, TRLOO advantages for the policy, leave-one-out advantages for selection and
// summary, the profiling-based rejection rule, and fast_p. Replay recomputes every one of these
// from the log, so they take plain numbers and no state.
#ifndef VINCI_HARNESS_RL_H_
#define VINCI_HARNESS_RL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "core/rng.h"

namespace vinci {

struct RewardParams {
  double base = 0.5;  // paid for any compiled, correct, non-decoy turn
  double speedup_weight = 0.5;
  double speedup_cap = 6.0;  // min(speedup, cap): no reward for speedups past it
  double coverage_weight = 0.5;
};

// What a turn's evaluation says, as far as the reward needs it.
struct TurnOutcome {
  bool compiled = false;
  bool correct = false;
  bool decoy = false;
  double speedup = 0;
  double time_coverage = 0;  // share of GPU time in the candidate's own kernels
};

// r = 0 if not compiled, incorrect or decoy; else base + w_s min(speedup, cap) + w_c coverage.
double turn_reward(const TurnOutcome& t, const RewardParams& p);

// Returns-to-go with discount gamma: G_t = sum_{u >= t} gamma^(u-t) r_u.
std::vector<double> returns_to_go(const std::vector<double>& rewards, double gamma);

// Leave-one-out advantages: A_i = x_i - mean_{j != i} x_j = n/(n-1) (x_i - mean x); a group of one
// gets A = x. With normalize, every A is divided by the group's mean |A| (when that is > 0).
std::vector<double> leave_one_out(const std::vector<double>& x, bool normalize = false);

// TRLOO for one task's rollouts: returns[r][t] is rollout r's return at turn t (rollouts may have
// different lengths). The group of (task, turn t) is every rollout that has a turn t; each
// rollout's advantage at t is leave-one-out within that group.
std::vector<std::vector<double>> trloo_advantages(const std::vector<std::vector<double>>& returns, bool normalize);

// Selection: a scheme's reward is the mean over its rollouts of each rollout's best-turn reward;
// advantages are leave-one-out over the k real schemes (the null scheme is not passed in), times
// scale (0.3 in the paper).
double scheme_reward(const std::vector<std::vector<double>>& rollout_turn_rewards);
std::vector<double> selection_advantages(const std::vector<double>& scheme_rewards, double scale);

// Summary: reward = the verified speedup of a sample's skill (0 if not verified); leave-one-out
// over the s samples, times scale (0.5 in the paper).
std::vector<double> summary_advantages(const std::vector<double>& verified_speedups, double scale);

// Profiling-based rejection sampling: a correct turn is kept for the policy loss with probability
// clamp((coverage - 0.3) / 0.1, 0, 1). The original draws it unseeded; vinci draws it from the key
// so replay reproduces the choice.
double keep_probability(double time_coverage);
bool keep_turn(double time_coverage, const RngKey& key);

// fast_p (KernelBench; daVinci's metrics): the share of tasks that are correct with speedup > p,
// KernelBench's definition (fastp in KernelBench's eval: correct & speedup > p). Every report
// uses it unless asked for the inclusive comparison, speedup >= p (which counts a kernel exactly
// as fast as the reference, speedup 1.0, in fast_1). The fast_p metric records of a run's log
// are the exception: they count speedup >= p, the log format's fixed definition, so recorded
// runs keep replaying bit-exactly (docs/log_format.md).
struct TaskTurns {
  std::string task;
  int level = 0;
  std::vector<TurnOutcome> turns;  // in order; may be empty (no candidate at all)
};

enum class TurnMode { kLast, kBest };
// How a task's speedup is compared with p.
enum class FastPCompare {
  kStrict,     // speedup > p: KernelBench's definition, the default of every report
  kInclusive,  // speedup >= p: what the log's fast_p metric records count
};
// "speedup > p" or "speedup >= p".
const char* fast_p_compare_text(FastPCompare compare);
// Whether a task outcome counts in fast_p at threshold p: compiled, correct, not a decoy, and its
// speedup compared with p.
bool fast_p_passes(const TurnOutcome& o, double p, FastPCompare compare);
enum class Denominator { kAll, kCorrect };

struct FastP {
  int level = 0;  // 0: all levels
  double threshold = 1.0;
  TurnMode mode = TurnMode::kLast;
  Denominator denominator = Denominator::kAll;
  uint32_t numerator = 0;  // tasks that pass
  uint32_t count = 0;      // tasks in the denominator
  double value() const { return count ? static_cast<double>(numerator) / count : 0.0; }
};

// The outcome fast_p reads from a task: its last turn, or the best correct turn so far (highest
// speedup; the last turn when none is correct).
TurnOutcome pick_turn(const std::vector<TurnOutcome>& turns, TurnMode mode);

// fast_p for every (level present in tasks, plus 0 = all) x threshold, in that order.
std::vector<FastP> fast_p(const std::vector<TaskTurns>& tasks, const std::vector<double>& thresholds, TurnMode mode,
                          Denominator denominator, FastPCompare compare);

}  // namespace vinci

#endif  // VINCI_HARNESS_RL_H_

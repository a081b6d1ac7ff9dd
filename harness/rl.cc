#include "harness/rl.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "core/check.h"

namespace vinci {

double turn_reward(const TurnOutcome& t, const RewardParams& p) {
  if (!t.compiled || !t.correct || t.decoy) return 0.0;
  return p.base + p.speedup_weight * std::min(t.speedup, p.speedup_cap) + p.coverage_weight * t.time_coverage;
}

std::vector<double> returns_to_go(const std::vector<double>& rewards, double gamma) {
  std::vector<double> g(rewards.size());
  double acc = 0;
  for (size_t i = rewards.size(); i-- > 0;) {
    acc = rewards[i] + gamma * acc;
    g[i] = acc;
  }
  return g;
}

std::vector<double> leave_one_out(const std::vector<double>& x, bool normalize) {
  const size_t n = x.size();
  std::vector<double> a(n);
  if (n == 0) return a;
  if (n == 1) {
    a[0] = x[0];
  } else {
    double sum = 0;
    for (double v : x) sum += v;  // in index order: the result must not depend on anything else
    for (size_t i = 0; i < n; ++i) a[i] = x[i] - (sum - x[i]) / static_cast<double>(n - 1);
  }
  if (normalize) {
    double mean_abs = 0;
    for (double v : a) mean_abs += std::fabs(v);
    mean_abs /= static_cast<double>(n);
    if (mean_abs > 0) {
      for (double& v : a) v /= mean_abs;
    }
  }
  return a;
}

std::vector<std::vector<double>> trloo_advantages(const std::vector<std::vector<double>>& returns, bool normalize) {
  std::vector<std::vector<double>> adv(returns.size());
  size_t max_turns = 0;
  for (size_t r = 0; r < returns.size(); ++r) {
    adv[r].resize(returns[r].size());
    max_turns = std::max(max_turns, returns[r].size());
  }
  for (size_t t = 0; t < max_turns; ++t) {
    std::vector<double> group;
    std::vector<size_t> who;
    for (size_t r = 0; r < returns.size(); ++r) {
      if (t < returns[r].size()) {
        group.push_back(returns[r][t]);
        who.push_back(r);
      }
    }
    std::vector<double> a = leave_one_out(group, normalize);
    for (size_t i = 0; i < who.size(); ++i) adv[who[i]][t] = a[i];
  }
  return adv;
}

double scheme_reward(const std::vector<std::vector<double>>& rollout_turn_rewards) {
  if (rollout_turn_rewards.empty()) return 0.0;
  double sum = 0;
  for (const auto& turns : rollout_turn_rewards) {
    double best = 0;
    for (double r : turns) best = std::max(best, r);
    sum += best;
  }
  return sum / static_cast<double>(rollout_turn_rewards.size());
}

std::vector<double> selection_advantages(const std::vector<double>& scheme_rewards, double scale) {
  std::vector<double> a = leave_one_out(scheme_rewards);
  for (double& v : a) v *= scale;
  return a;
}

std::vector<double> summary_advantages(const std::vector<double>& verified_speedups, double scale) {
  std::vector<double> a = leave_one_out(verified_speedups);
  for (double& v : a) v *= scale;
  return a;
}

double keep_probability(double time_coverage) { return std::clamp((time_coverage - 0.3) / 0.1, 0.0, 1.0); }

bool keep_turn(double time_coverage, const RngKey& key) {
  double p = keep_probability(time_coverage);
  if (p >= 1.0) return true;
  if (p <= 0.0) return false;
  Stream s(key.with("purpose", "rejection"));
  return s.uniform() < p;
}

TurnOutcome pick_turn(const std::vector<TurnOutcome>& turns, TurnMode mode) {
  if (turns.empty()) return TurnOutcome{};
  if (mode == TurnMode::kLast) return turns.back();
  const TurnOutcome* best = nullptr;
  for (const auto& t : turns) {
    if (t.compiled && t.correct && !t.decoy && (!best || t.speedup > best->speedup)) best = &t;
  }
  return best ? *best : turns.back();
}

const char* fast_p_compare_text(FastPCompare compare) {
  return compare == FastPCompare::kStrict ? "speedup > p" : "speedup >= p";
}

bool fast_p_passes(const TurnOutcome& o, double p, FastPCompare compare) {
  if (!o.compiled || !o.correct || o.decoy) return false;
  return compare == FastPCompare::kStrict ? o.speedup > p : o.speedup >= p;
}

std::vector<FastP> fast_p(const std::vector<TaskTurns>& tasks, const std::vector<double>& thresholds, TurnMode mode,
                          Denominator denominator, FastPCompare compare) {
  std::set<int> levels;
  for (const auto& t : tasks) levels.insert(t.level);
  std::vector<int> order(levels.begin(), levels.end());
  order.push_back(0);
  std::vector<FastP> out;
  for (int level : order) {
    for (double p : thresholds) {
      FastP f;
      f.level = level;
      f.threshold = p;
      f.mode = mode;
      f.denominator = denominator;
      for (const auto& t : tasks) {
        if (level != 0 && t.level != level) continue;
        TurnOutcome o = pick_turn(t.turns, mode);
        bool ok = o.compiled && o.correct && !o.decoy;
        if (denominator == Denominator::kAll || ok) f.count++;
        if (fast_p_passes(o, p, compare)) f.numerator++;
      }
      out.push_back(f);
    }
  }
  return out;
}

}  // namespace vinci

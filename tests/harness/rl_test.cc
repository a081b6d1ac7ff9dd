// The RL arithmetic against hand-computed values (each case's arithmetic is in its comment).
#include "harness/rl.h"
#include "harness/experiment.h"

#include <gtest/gtest.h>

namespace vinci {
namespace {

TEST(Rl, TurnReward) {
  RewardParams p;
  // 0.5 + 0.5 * 2.0 + 0.5 * 0.8 = 1.9
  EXPECT_DOUBLE_EQ(turn_reward({true, true, false, 2.0, 0.8}, p), 1.9);
  // the speedup is capped at 6: 0.5 + 3.0 + 0.5 = 4.0
  EXPECT_DOUBLE_EQ(turn_reward({true, true, false, 40.0, 1.0}, p), 4.0);
  EXPECT_EQ(turn_reward({false, true, false, 2.0, 1.0}, p), 0.0);  // not compiled
  EXPECT_EQ(turn_reward({true, false, false, 2.0, 1.0}, p), 0.0);  // incorrect
  EXPECT_EQ(turn_reward({true, true, true, 2.0, 1.0}, p), 0.0);    // decoy
}

TEST(Rl, ReturnsToGo) {
  // gamma = 1: G = [1+2+3, 2+3, 3]
  EXPECT_EQ(returns_to_go({1, 2, 3}, 1.0), (std::vector<double>{6, 5, 3}));
  // gamma = 0.5: G_2 = 3, G_1 = 2 + 1.5 = 3.5, G_0 = 1 + 1.75 = 2.75
  EXPECT_EQ(returns_to_go({1, 2, 3}, 0.5), (std::vector<double>{2.75, 3.5, 3}));
}

TEST(Rl, LeaveOneOut) {
  // x = [1, 2, 6]: A_0 = 1 - (2+6)/2 = -3, A_1 = 2 - 3.5 = -1.5, A_2 = 6 - 1.5 = 4.5
  // (= n/(n-1) (x_i - mean) = 1.5 * (x_i - 3))
  EXPECT_EQ(leave_one_out({1, 2, 6}), (std::vector<double>{-3, -1.5, 4.5}));
  EXPECT_EQ(leave_one_out({4}), (std::vector<double>{4}));  // a group of one: A = G
  EXPECT_TRUE(leave_one_out({}).empty());
  // normalised by mean |A| = (3 + 1.5 + 4.5) / 3 = 3
  EXPECT_EQ(leave_one_out({1, 2, 6}, true), (std::vector<double>{-1, -0.5, 1.5}));
  EXPECT_EQ(leave_one_out({2, 2}, true), (std::vector<double>{0, 0}));
}

TEST(Rl, TrlooGroupsByTurn) {
  // Three rollouts; the third has only one turn. Turn 0 group {6, 3, 3}: A = 6-3=3, 3-4.5, 3-4.5.
  // Turn 1 group {4, 1}: A = 4-1 = 3, 1-4 = -3.
  auto a = trloo_advantages({{6, 4}, {3, 1}, {3}}, false);
  ASSERT_EQ(a.size(), 3u);
  EXPECT_EQ(a[0], (std::vector<double>{3, 3}));
  EXPECT_EQ(a[1], (std::vector<double>{-1.5, -3}));
  EXPECT_EQ(a[2], (std::vector<double>{-1.5}));
}

TEST(Rl, SelectionAndSummaryAdvantages) {
  // Scheme rewards: best turn per rollout, then the mean: scheme A: max(0,1)=1, max(2,0.5)=2 -> 1.5
  EXPECT_DOUBLE_EQ(scheme_reward({{0, 1}, {2, 0.5}}), 1.5);
  EXPECT_EQ(scheme_reward({}), 0.0);
  // Schemes [1.5, 0.5, 1.0]: LOO = [1.5-0.75, 0.5-1.25, 1.0-1.0] = [0.75, -0.75, 0], x 0.3
  auto s = selection_advantages({1.5, 0.5, 1.0}, 0.3);
  EXPECT_DOUBLE_EQ(s[0], 0.225);
  EXPECT_DOUBLE_EQ(s[1], -0.225);
  EXPECT_DOUBLE_EQ(s[2], 0.0);
  // Summary: speedups [0, 0, 1.8, 0]: LOO A_2 = 1.8 - 0 = 1.8, others 0 - 0.6 = -0.6; x 0.5
  auto m = summary_advantages({0, 0, 1.8, 0}, 0.5);
  EXPECT_DOUBLE_EQ(m[2], 0.9);
  EXPECT_DOUBLE_EQ(m[0], -0.3);
}

TEST(Rl, RejectionRule) {
  EXPECT_EQ(keep_probability(0.2), 0.0);
  EXPECT_DOUBLE_EQ(keep_probability(0.35), 0.5);
  EXPECT_EQ(keep_probability(0.9), 1.0);
  EXPECT_TRUE(keep_turn(0.9, RngKey::root(1)));
  EXPECT_FALSE(keep_turn(0.1, RngKey::root(1)));
  // Keyed: the same key gives the same choice; over many keys about half are kept at 0.35.
  int kept = 0;
  for (int i = 0; i < 4000; ++i) {
    RngKey k = RngKey::root(3).with("turn", i);
    EXPECT_EQ(keep_turn(0.35, k), keep_turn(0.35, k));
    kept += keep_turn(0.35, k);
  }
  EXPECT_NEAR(kept / 4000.0, 0.5, 0.03);
}

TEST(Rl, FastP) {
  TurnOutcome bad{true, false, false, 0, 0};
  auto ok = [](double s) { return TurnOutcome{true, true, false, s, 1.0}; };
  std::vector<TaskTurns> tasks = {
      {"a", 1, {ok(0.8), ok(1.3)}},  // last 1.3, best 1.3
      {"b", 1, {ok(2.5), bad}},      // last incorrect, best 2.5
      {"c", 2, {ok(1.2)}},           // exactly 1.2
      {"d", 2, {}},                  // nothing
  };
  auto last = fast_p(tasks, {1.0, 1.2}, TurnMode::kLast, Denominator::kAll, FastPCompare::kInclusive);
  ASSERT_EQ(last.size(), 6u);  // levels 1, 2, all x 2 thresholds
  // L1: a passes both (1.3), b fails (last incorrect): 1/2, 1/2
  EXPECT_EQ(last[0].level, 1);
  EXPECT_EQ(last[0].numerator, 1u);
  EXPECT_EQ(last[0].count, 2u);
  // L2 at 1.2: c passes with >= 1.2
  EXPECT_EQ(last[3].numerator, 1u);
  EXPECT_EQ(last[3].count, 2u);
  // all levels at 1.0: a and c
  EXPECT_EQ(last[4].level, 0);
  EXPECT_EQ(last[4].numerator, 2u);
  EXPECT_EQ(last[4].count, 4u);
  // strict (> p, KernelBench): c no longer passes at 1.2
  auto strict = fast_p(tasks, {1.2}, TurnMode::kLast, Denominator::kAll, FastPCompare::kStrict);
  EXPECT_EQ(strict[1].numerator, 0u);
  // best turn: b passes via its first turn; correct-only denominator drops d (and nothing else)
  auto best = fast_p(tasks, {1.0}, TurnMode::kBest, Denominator::kCorrect, FastPCompare::kInclusive);
  EXPECT_EQ(best[0].numerator, 2u);
  EXPECT_EQ(best[0].count, 2u);
  EXPECT_EQ(best[2].numerator, 3u);
  EXPECT_EQ(best[2].count, 3u);
  EXPECT_DOUBLE_EQ(best[2].value(), 1.0);
}

// KernelBench's fast_p counts speedup > p: a kernel exactly as fast as the reference (speedup 1.0)
// is not in fast_1 unless the inclusive comparison is asked for.
TEST(Rl, FastOneIsStrictByDefault) {
  std::vector<TaskTurns> tasks = {{"a", 1, {TurnOutcome{true, true, false, 1.0, 1.0}}},
                                  {"b", 1, {TurnOutcome{true, true, false, 1.0000001, 1.0}}}};
  Experiment e;  // what a run's own reports use unless eval.fast_p_inclusive is set
  EXPECT_EQ(e.fast_p_compare, FastPCompare::kStrict);
  auto def = fast_p(tasks, {1.0}, TurnMode::kLast, Denominator::kAll, e.fast_p_compare);
  EXPECT_EQ(def.back().numerator, 1u);  // only b
  auto inclusive = fast_p(tasks, {1.0}, TurnMode::kLast, Denominator::kAll, FastPCompare::kInclusive);
  EXPECT_EQ(inclusive.back().numerator, 2u);
  EXPECT_FALSE(fast_p_passes(tasks[0].turns[0], 1.0, FastPCompare::kStrict));
  EXPECT_TRUE(fast_p_passes(tasks[0].turns[0], 1.0, FastPCompare::kInclusive));
  // Incorrect or decoy turns never count, whatever the comparison.
  EXPECT_FALSE(fast_p_passes(TurnOutcome{true, false, false, 3.0, 1.0}, 1.0, FastPCompare::kInclusive));
  EXPECT_FALSE(fast_p_passes(TurnOutcome{true, true, true, 3.0, 1.0}, 1.0, FastPCompare::kInclusive));
  // The config key: strict unless eval.fast_p_inclusive = true.
  auto strict_cfg = experiment_from_text("", "empty");
  ASSERT_TRUE(strict_cfg.ok()) << strict_cfg.status().to_string();
  EXPECT_EQ(strict_cfg->fast_p_compare, FastPCompare::kStrict);
  auto incl_cfg = experiment_from_text("", "empty", {"eval.fast_p_inclusive=true"});
  ASSERT_TRUE(incl_cfg.ok()) << incl_cfg.status().to_string();
  EXPECT_EQ(incl_cfg->fast_p_compare, FastPCompare::kInclusive);
}

}  // namespace
}  // namespace vinci

// The cold start's diversity filter and test-time scaling's window rule (harness/coldstart.h,
// harness/tts.h), as pure functions.
#include "harness/coldstart.h"

#include <gtest/gtest.h>

#include "harness/rl.h"
#include "harness/tts.h"

namespace vinci {
namespace {

SkillCandidate candidate(const std::string& name, const std::string& family, const std::string& pattern, double speedup,
                         const std::string& body) {
  SkillCandidate c;
  c.skill.name = name;
  c.skill.description = "For " + family + " kernels: " + pattern;
  c.skill.scope = "general";
  c.skill.tags = {family, "kernel_schedule", "cuda"};
  c.skill.content = body;
  c.family = family;
  c.pattern = pattern;
  c.task = "L1_" + name;
  c.speedup = speedup;
  return c;
}

TEST(DiversityFilter, CapsPerFamilyAndPatternAndDropsNearDuplicates) {
  std::vector<SkillCandidate> c = {
      candidate("a", "elementwise", "ew.vector=4", 2.0, "vectorize loads with float4 to use full sectors"),
      // Same pattern as a, slower: dropped by the pattern cap.
      candidate("b", "elementwise", "ew.vector=4", 1.9, "unroll the grid stride loop twice"),
      // Text nearly a's (only the name differs): dropped as a near-duplicate.
      candidate("c", "elementwise", "ew.block=256", 1.8, "vectorize loads with float4 to use full sectors"),
      candidate("d", "elementwise", "ew.block=512", 1.7, "larger blocks amortize scheduling overhead"),
      // Family cap of 2 reached by a and d.
      candidate("e", "elementwise", "ew.unroll=4", 1.6, "unrolling exposes instruction level parallelism"),
      candidate("f", "gemm", "gemm.tile=128", 1.5, "tensor cores with wmma fragments"),
  };
  DiversityParams p;
  p.similarity = 0.75;  // a and c share 14 of 18 tokens: 0.78
  p.max_per_family = 2;
  p.max_per_pattern = 1;
  auto v = diversity_filter(c, p);
  ASSERT_EQ(v.size(), c.size());
  EXPECT_TRUE(v[0].kept);
  EXPECT_FALSE(v[1].kept);
  EXPECT_NE(v[1].reason.find("max_per_pattern"), std::string::npos) << v[1].reason;
  EXPECT_FALSE(v[2].kept);
  EXPECT_NE(v[2].reason.find("near-duplicate of a"), std::string::npos) << v[2].reason;
  EXPECT_TRUE(v[3].kept);
  EXPECT_FALSE(v[4].kept);
  EXPECT_NE(v[4].reason.find("max_per_family"), std::string::npos) << v[4].reason;
  EXPECT_TRUE(v[5].kept);

  // Order of the input does not matter: the filter walks by speedup.
  std::vector<SkillCandidate> rev(c.rbegin(), c.rend());
  auto w = diversity_filter(rev, p);
  for (size_t i = 0; i < c.size(); ++i) EXPECT_EQ(w[c.size() - 1 - i].kept, v[i].kept) << i;

  // Off: everything is kept.
  p.enabled = false;
  for (const auto& x : diversity_filter(c, p)) EXPECT_TRUE(x.kept);
  // A looser similarity threshold keeps c (the pattern and family caps still apply).
  p.enabled = true;
  p.similarity = 1.01;
  p.max_per_family = 10;
  auto loose = diversity_filter(c, p);
  EXPECT_TRUE(loose[2].kept);
  EXPECT_FALSE(loose[1].kept);
}

TEST(DiversityFilter, JaccardAndPatterns) {
  EXPECT_DOUBLE_EQ(token_jaccard("a b c", "a b c"), 1.0);
  EXPECT_DOUBLE_EQ(token_jaccard("a b", "c d"), 0.0);
  EXPECT_DOUBLE_EQ(token_jaccard("A-b c", "a b d"), 0.5);  // {a,b,c} vs {a,b,d}: 2 / 4
  EXPECT_EQ(knob_pattern({{"z.k", "1"}, {"a.k", "x"}}), "a.k=x,z.k=1");
}

TEST(TestTimeScaling, BestWindowBySummedReward) {
  // Windows of 2: sums 3, 5, 9, 9, 4: the earliest of the two best, starting at 2.
  Window w = best_window({1, 2, 3, 6, 3, 1}, 2);
  EXPECT_EQ(w.start, 2);
  EXPECT_EQ(w.length, 2);
  EXPECT_DOUBLE_EQ(w.reward_sum, 9);
  // A window longer than the list is the whole list.
  w = best_window({1, 2}, 4);
  EXPECT_EQ(w.start, 0);
  EXPECT_EQ(w.length, 2);
  EXPECT_DOUBLE_EQ(w.reward_sum, 3);
  // The best window need not contain the best turn.
  w = best_window({0, 5, 0, 0, 3, 3, 0}, 3);
  EXPECT_EQ(w.start, 3);
  EXPECT_DOUBLE_EQ(w.reward_sum, 6);
  EXPECT_EQ(best_window({}, 3).length, 0);
}

TEST(TestTimeScaling, BestTurnAndLastTurnFastP) {
  // Two tasks over TTS turns: the first is fast at turn 1 and fails at its last turn; the second
  // is only fast at its last turn.
  std::vector<TaskTurns> tasks(2);
  tasks[0].task = "L1_001";
  tasks[0].level = 1;
  tasks[0].turns = {{true, true, false, 1.1, 1}, {true, true, false, 2.0, 1}, {true, false, false, 0, 0}};
  tasks[1].task = "L1_002";
  tasks[1].level = 1;
  tasks[1].turns = {{true, true, false, 0.9, 1}, {true, true, false, 1.3, 1}};
  auto best = fast_p(tasks, {1.2, 1.5}, TurnMode::kBest, Denominator::kAll, FastPCompare::kStrict);
  auto last = fast_p(tasks, {1.2, 1.5}, TurnMode::kLast, Denominator::kAll, FastPCompare::kStrict);
  auto at = [](const std::vector<FastP>& v, double p) {
    for (const auto& f : v) {
      if (f.level == 0 && f.threshold == p) return f.value();
    }
    return -1.0;
  };
  EXPECT_DOUBLE_EQ(at(best, 1.2), 1.0);
  EXPECT_DOUBLE_EQ(at(best, 1.5), 0.5);
  EXPECT_DOUBLE_EQ(at(last, 1.2), 0.5);
  EXPECT_DOUBLE_EQ(at(last, 1.5), 0.0);
}

}  // namespace
}  // namespace vinci

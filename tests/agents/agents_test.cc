// The agents' rules in isolation: selection modes and caps, the summary trigger, the lazy filter
// on proposals, and the verification gate at its thresholds.
#include "agents/agents.h"

#include <gtest/gtest.h>

namespace vinci {
namespace {

TurnResult ok(double s) { return TurnResult{true, true, false, s, 1.0, 0}; }
TurnResult wrong() { return TurnResult{true, false, false, 0, 0, 0}; }

TEST(Trigger, FollowsTheReferenceRule) {
  TriggerParams p;
  // best 1.5 >= 1.2 x 1.2 = 1.44 and >= 1.2, turn 1 > 0
  EXPECT_TRUE(summary_triggers({ok(1.2), ok(1.5)}, p));
  // best 1.4 < 1.44
  EXPECT_FALSE(summary_triggers({ok(1.2), ok(1.4)}, p));
  // turn 1 incorrect: no trigger however good the rest
  EXPECT_FALSE(summary_triggers({wrong(), ok(3.0)}, p));
  // best 1.1 < min_best 1.2 even though 1.1 >= 1.2 x 0.5
  EXPECT_FALSE(summary_triggers({ok(0.5), ok(1.1)}, p));
  EXPECT_TRUE(summary_triggers({ok(0.5), ok(1.2)}, p));
  EXPECT_FALSE(summary_triggers({}, p));
  EXPECT_DOUBLE_EQ(best_speedup({ok(0.5), wrong(), ok(2.0)}), 2.0);
}

TEST(Gate, AcceptsOnlyAtItsThresholds) {
  VerificationParams p;                                           // 1.2 absolute, 1.2 x turn-1
  EXPECT_TRUE(judge_verification({ok(1.2)}, 1.0, p).accepted);    // exactly 1.2 and 1.2 x 1.0
  EXPECT_FALSE(judge_verification({ok(1.19)}, 0.5, p).accepted);  // below absolute
  auto ratio = judge_verification({ok(1.5)}, 1.3, p);             // 1.5 < 1.56
  EXPECT_FALSE(ratio.accepted);
  EXPECT_NE(ratio.reason.find("x turn-1"), std::string::npos) << ratio.reason;
  EXPECT_FALSE(judge_verification({wrong()}, 0.5, p).accepted);
  EXPECT_FALSE(judge_verification({}, 0.5, p).accepted);
  // Several re-runs: the speedup must hold in every one.
  p.runs = 3;
  EXPECT_FALSE(judge_verification({ok(2.0), ok(1.1), ok(2.0)}, 1.0, p).accepted);
  auto all = judge_verification({ok(2.0), ok(1.7), ok(2.2)}, 1.0, p);
  EXPECT_TRUE(all.accepted);
  EXPECT_DOUBLE_EQ(all.worst_speedup, 1.7);
}

TEST(Gate, StagesTheFastestAcceptedSkillOnly) {
  VerificationParams p;
  std::vector<VerificationVerdict> v = {judge_verification({ok(1.3)}, 1.0, p), judge_verification({ok(0.9)}, 0.5, p),
                                        judge_verification({ok(2.0)}, 1.0, p), judge_verification({ok(2.0)}, 1.0, p)};
  EXPECT_EQ(pick_staged(v), std::optional<size_t>(2));  // ties keep the lowest index
  EXPECT_EQ(pick_staged({judge_verification({ok(1.0)}, 1.0, p)}), std::nullopt);
}

TEST(Feedback, EncodesTheTurn) {
  auto f = encode_feedback(TurnResult{true, true, false, 4.0, 0.9, 2.0});
  ASSERT_EQ(f.size(), static_cast<size_t>(kFeedbackDim));
  EXPECT_EQ(f[0], 1.0f);
  EXPECT_EQ(f[4], 0.5f);  // log2(4) / 4
  EXPECT_EQ(f[5], 0.5f);  // reward 2 / 4
  EXPECT_EQ(encode_feedback(wrong())[4], 0.0f);
  BackboneShape shape;
  shape.head_sizes = {2, 3, 4};
  auto v = encode_choices(shape, {0, 2}, {1, 3});
  ASSERT_EQ(v.size(), 9u);
  EXPECT_EQ(v[1], 1.0f);
  EXPECT_EQ(v[5 + 3], 1.0f);
  float sum = 0;
  for (float x : v) sum += x;
  EXPECT_EQ(sum, 2.0f);
}

TEST(Selection, ModesParse) {
  EXPECT_EQ(*parse_selection_mode("bm25"), SelectionMode::kBm25Only);
  auto bad = parse_selection_mode("llm");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("found 'llm'"), std::string::npos);
}

}  // namespace
}  // namespace vinci

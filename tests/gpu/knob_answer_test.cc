// The knobs answer format (gpu/knob_answer.h): what a reply's block says, the errors a model reads,
// and that a parsed answer is the generator's plan for its settings, priced by the sim world's
// matching rule like any model's plan.
#include "gpu/knob_answer.h"

#include <gtest/gtest.h>

#include "core/rng.h"
#include "gpu/codegen/codegen.h"
#include "gpu/codegen/knobs.h"
#include "gpu/model_plan.h"

namespace vinci {
namespace {

const TaskSuite& suite() {
  static TaskSuite s = [] {
    Result<TaskSuite> r = load_task_suite(VINCI_TASK_DIR);
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    return r.ok() ? *r : TaskSuite();
  }();
  return s;
}

const Task& task(const std::string& id) {
  const Task* t = suite().find(id);
  VINCI_REQUIRE(t != nullptr, "no task " << id);
  return *t;
}

TEST(KnobAnswer, EveryRenderedSettingParsesBackToItsGeneratorPlan) {
  // Keyed random settings of tasks of every level: render, parse, generate; the plan matches the
  // generator's plan for the same values up to metadata, and the sim world's rule prices it.
  int checked = 0;
  for (const char* id : {"L1_019", "L1_001", "L1_040", "L2_001", "L2_050", "L3_001"}) {
    const Task& t = task(id);
    KnobSpace space = knob_space(t);
    for (int i = 0; i < 4; ++i) {
      Stream s(RngKey::root(7).with("task", id).with("i", i));
      auto values = knob_values(space, random_setting(space, s));
      std::string reply = "Here are the settings.\n\n" + render_knob_answer(t, values) + "\n";
      auto parsed = parse_knob_answer(reply, t);
      ASSERT_TRUE(parsed.ok()) << id << ": " << parsed.status().to_string() << "\n" << reply;
      EXPECT_EQ(*parsed, values);
      auto plan = plan_from_knob_answer(reply, t);
      ASSERT_TRUE(plan.ok()) << plan.status().to_string();
      auto generated = generate_plan(t, values);
      ASSERT_TRUE(generated.ok());
      EXPECT_TRUE(same_plan_content(*plan, *generated));
      EXPECT_EQ(plan->origin, "llm");
      EXPECT_TRUE(match_generated_plan(t, *plan).has_value()) << id;
      ++checked;
    }
  }
  EXPECT_EQ(checked, 24);
}

TEST(KnobAnswer, MissingKnobsTakeTheirDefaultsAndABareBlockIsRead) {
  const Task& t = task("L1_019");
  KnobSpace space = knob_space(t);
  auto empty = parse_knob_answer("```knobs\n```", t);
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->empty());
  auto defaults = plan_from_knob_answer("```knobs\n```", t);
  ASSERT_TRUE(defaults.ok());
  auto generated = generate_plan(t, default_setting(space));
  ASSERT_TRUE(generated.ok());
  EXPECT_TRUE(same_plan_content(*defaults, *generated));
  const Knob& k = space.knobs.front();
  auto bare = parse_knob_answer(k.name + " = " + k.choices.back() + "\n", t);
  ASSERT_TRUE(bare.ok()) << bare.status().to_string();
  EXPECT_EQ(bare->at(k.name), k.choices.back());
}

TEST(KnobAnswer, ErrorsNameTheLineAndWhatWasExpected) {
  const Task& t = task("L1_019");
  KnobSpace space = knob_space(t);
  const Knob& k = space.knobs.front();
  auto unknown = parse_knob_answer("```knobs\nwarp_magic = 3\n```", t);
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("line 2"), std::string::npos) << unknown.status().message();
  EXPECT_NE(unknown.status().message().find("has no knob 'warp_magic'"), std::string::npos);
  auto value = parse_knob_answer("```knobs\n" + k.name + " = 12345\n```", t);
  ASSERT_FALSE(value.ok());
  EXPECT_NE(value.status().message().find("found '12345'"), std::string::npos) << value.status().message();
  auto twice = parse_knob_answer(
      "```knobs\n" + k.name + " = " + k.choices[0] + "\n" + k.name + " = " + k.choices[0] + "\n```", t);
  ASSERT_FALSE(twice.ok());
  EXPECT_NE(twice.status().message().find("set twice"), std::string::npos);
  auto open = parse_knob_answer("```knobs\n" + k.name + " = " + k.choices[0] + "\n", t);
  ASSERT_FALSE(open.ok());
  EXPECT_NE(open.status().message().find("not closed"), std::string::npos);
  auto prose = parse_knob_answer("I would use a bigger block.", t);
  ASSERT_FALSE(prose.ok());
  EXPECT_NE(prose.status().message().find("no ```knobs block"), std::string::npos);
  auto noline = parse_knob_answer("```knobs\nbigger blocks please\n```", t);
  ASSERT_FALSE(noline.ok());
  EXPECT_NE(noline.status().message().find("expected `knob = value`"), std::string::npos);
}

TEST(KnobAnswer, TheMenuListsEveryKnobWithItsChoicesAndDefault) {
  const Task& t = task("L2_001");
  KnobSpace space = knob_space(t);
  std::string menu = knob_menu(t);
  for (const Knob& k : space.knobs) {
    EXPECT_NE(menu.find(k.name + ":"), std::string::npos) << menu;
    EXPECT_NE(menu.find("(default " + k.choices[static_cast<size_t>(k.default_index)] + ")"), std::string::npos);
  }
}

}  // namespace
}  // namespace vinci

// The sim world's knowledge switch (harness/sim_world.h, turn_knowledge): what a skill teaches,
// and which choices a turn may make.
#include "harness/sim_world.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "gpu/codegen/codegen.h"
#include "harness/experiment.h"
#include "harness/model_trainer.h"

namespace vinci {
namespace {

const TaskSuite& suite() {
  static const TaskSuite s = [] {
    auto r = load_task_suite(default_task_dir());
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    return std::move(r).value();
  }();
  return s;
}

const Task& task(const std::string& id) {
  const Task* t = suite().find(id);
  EXPECT_NE(t, nullptr) << id;
  return *t;
}

// The global choice index (the backbone's one-hot layout) of knob = value.
size_t choice_index(const std::string& knob, const std::string& value) {
  const KnobTable& table = KnobTable::get();
  size_t off = 0;
  for (const Knob& k : table.knobs) {
    if (k.name == knob) {
      auto c = std::find(k.choices.begin(), k.choices.end(), value);
      EXPECT_NE(c, k.choices.end()) << knob << " = " << value;
      return off + static_cast<size_t>(c - k.choices.begin());
    }
    off += k.choices.size();
  }
  ADD_FAILURE() << "no knob " << knob;
  return 0;
}

Skill skill_with_content(const std::string& content) {
  Skill s;
  s.name = "s";
  s.description = "d";
  s.scope = "general";
  s.tags = {"a", "b", "c"};
  s.content = content;
  return s;
}

bool has(const std::vector<std::string>& v, const std::string& x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

KnowledgeParams skills_world(double discovery) {
  KnowledgeParams p;
  p.knowledge = SimKnowledge::kSkills;
  p.discovery = discovery;
  return p;
}

TEST(SimKnowledge, TheOpenWorldLocksNothingAndRecordsNothing) {
  const Task& gemm = task("L1_001");
  TurnKnowledge k = turn_knowledge(KnowledgeParams{}, knob_space(gemm), {}, {}, RngKey::root(1));
  EXPECT_TRUE(k.allowed.empty());
  EXPECT_TRUE(k.locked.empty());
  EXPECT_EQ(k.to_json(), "");
}

TEST(SimKnowledge, AnUntaughtTechniqueIsLockedAndItsOpenChoicesStay) {
  const Task& gemm = task("L1_001");
  KnobSpace space = knob_space(gemm);
  ASSERT_GE(space.index_of("gemm.tensor_cores"), 0);
  TurnKnowledge k = turn_knowledge(skills_world(0.0), space, {}, {}, RngKey::root(1));
  ASSERT_EQ(k.allowed.size(), static_cast<size_t>(sim_backbone_shape().choice_dim()));
  EXPECT_TRUE(has(k.locked, "tensor_cores"));
  for (const char* v : {"tf32", "bf16", "fp16"}) EXPECT_EQ(k.allowed[choice_index("gemm.tensor_cores", v)], 0.0f) << v;
  EXPECT_EQ(k.allowed[choice_index("gemm.tensor_cores", "off")], 1.0f);
  // A technique whose knobs the task does not have is not relevant: neither locked nor listed.
  EXPECT_FALSE(has(k.locked, "warp_level_rows"));
  EXPECT_EQ(k.allowed[choice_index("row.strategy", "warp_shuffle")], 1.0f);
  EXPECT_EQ(k.to_json().rfind("{\"locked\":[", 0), 0u) << k.to_json();
}

TEST(SimKnowledge, ASkillTeachesWhatItsContentWritesAsKnobEqualsValue) {
  Skill teaches = skill_with_content("## Key Idea\n- `gemm.tensor_cores = bf16`: tensor cores\n");
  Skill prose =
      skill_with_content("Use tensor cores (wmma) for the GEMM; gemm.tensor_cores = bf16 without backquotes.");
  Skill metadata_only = skill_with_content("## Key Idea\nTiles.\n");
  metadata_only.extra["vinci"] = {{"knobs", {{"gemm.tensor_cores", "tf32"}}}};
  const auto& table = locked_techniques();
  auto names = [&](const Skill& s) {
    std::vector<std::string> out;
    for (size_t t : taught_techniques(s)) out.push_back(table[t].name);
    return out;
  };
  EXPECT_EQ(names(teaches), std::vector<std::string>{"tensor_cores"});
  EXPECT_TRUE(names(prose).empty());
  EXPECT_TRUE(names(metadata_only).empty());

  KnobSpace space = knob_space(task("L1_001"));
  TurnKnowledge k = turn_knowledge(skills_world(0.0), space, {&teaches}, {}, RngKey::root(1));
  EXPECT_TRUE(has(k.taught, "tensor_cores"));
  EXPECT_FALSE(has(k.locked, "tensor_cores"));
  // The technique is taught, not just the one choice the skill names.
  for (const char* v : {"tf32", "bf16", "fp16"}) EXPECT_EQ(k.allowed[choice_index("gemm.tensor_cores", v)], 1.0f);
}

TEST(SimKnowledge, TheSummaryAgentsSkillsTeachTheTechniquesTheyKeep) {
  const Task& gemm = task("L1_001");
  WinningRollout w;
  w.task = &gemm;
  w.space = knob_space(gemm);
  w.choices = default_setting(w.space);
  int32_t tc = w.space.index_of("gemm.tensor_cores");
  ASSERT_GE(tc, 0);
  w.choices[static_cast<size_t>(tc)] = 1;  // tf32
  w.turn1_speedup = 1;
  w.best_speedup = 2;
  SummarySample keep_tc, keep_other;
  keep_tc.include.assign(w.space.knobs.size(), 0);
  keep_other.include.assign(w.space.knobs.size(), 0);
  keep_tc.include[static_cast<size_t>(tc)] = 1;
  keep_other.include[static_cast<size_t>(w.space.index_of("gemm.tile_m"))] = 1;
  auto with_tc = SimSkillWriter(w).write_skill(keep_tc);
  auto without = SimSkillWriter(w).write_skill(keep_other);
  ASSERT_TRUE(with_tc && without);
  EXPECT_EQ(taught_techniques(*with_tc), std::vector<size_t>{0});  // tensor_cores
  EXPECT_TRUE(taught_techniques(*without).empty());
}

TEST(SimKnowledge, AChoiceAnEarlierTurnMadeIsCarried) {
  KnobSpace space = knob_space(task("L1_001"));
  KnobSetting earlier = default_setting(space);
  earlier[static_cast<size_t>(space.index_of("gemm.tensor_cores"))] = 3;  // fp16
  TurnKnowledge k = turn_knowledge(skills_world(0.0), space, {}, {earlier}, RngKey::root(1));
  EXPECT_TRUE(has(k.carried, "tensor_cores"));
  EXPECT_EQ(k.allowed[choice_index("gemm.tensor_cores", "tf32")], 1.0f);
}

TEST(SimKnowledge, DiscoveryIsAKeyedDrawWithTheConfiguredProbability) {
  KnobSpace space = knob_space(task("L1_001"));
  TurnKnowledge all = turn_knowledge(skills_world(1.0), space, {}, {}, RngKey::root(1));
  EXPECT_TRUE(all.locked.empty());
  EXPECT_TRUE(has(all.discovered, "tensor_cores"));
  const int n = 4000;
  int found = 0;
  for (int i = 0; i < n; ++i) {
    RngKey key = RngKey::root(9).with("turn", i);
    TurnKnowledge a = turn_knowledge(skills_world(0.05), space, {}, {}, key);
    TurnKnowledge b = turn_knowledge(skills_world(0.05), space, {}, {}, key);
    EXPECT_EQ(a.to_json(), b.to_json());
    found += has(a.discovered, "tensor_cores");
  }
  double se = std::sqrt(0.05 * 0.95 / n);
  EXPECT_NEAR(static_cast<double>(found) / n, 0.05, 5 * se);
}

TEST(SimKnowledge, TheConfigKeysAreCheckedAndRecordedOnlyWhenSet) {
  auto open = experiment_from_text("[run]\nname = \"x\"\n", "x.toml");
  ASSERT_TRUE(open.ok()) << open.status().to_string();
  EXPECT_EQ(open->sim.knowledge, SimKnowledge::kOpen);
  EXPECT_EQ(open->effective_toml.find("[sim]"), std::string::npos) << open->effective_toml;
  auto skills = experiment_from_text("[run]\nname = \"x\"\n[sim]\nknowledge = \"skills\"\ndiscovery = 0.1\n", "x.toml");
  ASSERT_TRUE(skills.ok()) << skills.status().to_string();
  EXPECT_EQ(skills->sim.knowledge, SimKnowledge::kSkills);
  EXPECT_EQ(skills->sim.discovery, 0.1);
  EXPECT_NE(skills->effective_toml.find("knowledge = \"skills\""), std::string::npos) << skills->effective_toml;
  auto bad = experiment_from_text("[run]\nname = \"x\"\n[sim]\nknowledge = \"closed\"\n", "x.toml");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("sim.knowledge"), std::string::npos) << bad.status().to_string();
  auto llm = experiment_from_text(
      "[run]\nname = \"x\"\n[sim]\nknowledge = \"skills\"\n[backbone]\nkind = \"openai\"\nbase_url = "
      "\"http://127.0.0.1:1/v1\"\nmodel = \"m\"\n",
      "x.toml");
  ASSERT_FALSE(llm.ok());
  EXPECT_NE(llm.status().message().find("expected \"open\" with backbone.kind = \"openai\""), std::string::npos)
      << llm.status().to_string();
  auto p = experiment_from_text("[run]\nname = \"x\"\n[sim]\ndiscovery = 1.5\n", "x.toml");
  EXPECT_FALSE(p.ok());
}

// The trainer's reply (docs/training.md): a trained update needs a loss; a failed one carries its
// reason instead, and its loss is NaN; the wall time is never part of what is recorded.
TEST(TrainerReply, ParsesTrainedAndFailedUpdates) {
  auto ok = parse_trainer_reply(
      R"({"model": "m-1", "adapter": "ab", "loss": 0.5, "tokens": {"prompt": 3, "completion": 2}, "seconds": 9})");
  ASSERT_TRUE(ok.ok()) << ok.status().to_string();
  EXPECT_EQ(ok->loss, 0.5);
  EXPECT_EQ(ok->failure, "");
  EXPECT_EQ(ok->seconds, 9);
  EXPECT_EQ(ok->record.find("seconds"), std::string::npos) << ok->record;
  auto failed = parse_trainer_reply(R"({"model": "m", "adapter": "ab", "loss": null, "failure": "loss is nan"})");
  ASSERT_TRUE(failed.ok()) << failed.status().to_string();
  EXPECT_EQ(failed->failure, "loss is nan");
  EXPECT_TRUE(std::isnan(failed->loss));
  auto no_loss = parse_trainer_reply(R"({"model": "m", "adapter": "ab", "loss": null})");
  ASSERT_FALSE(no_loss.ok());
  EXPECT_NE(no_loss.status().message().find("has no 'loss' (expected a number)"), std::string::npos);
  auto bad_failure = parse_trainer_reply(R"({"model": "m", "adapter": "ab", "failure": 3})");
  ASSERT_FALSE(bad_failure.ok());
  EXPECT_NE(bad_failure.status().message().find("'failure' is not a string"), std::string::npos);
}

// [trainer] and policy.format are about a language model: refused with the sim network, and
// a language model's cold start needs a trainer to fit it.
TEST(TrainerConfig, KeysAreCheckedAgainstTheBackbone) {
  const std::string llm =
      "[run]\nname = \"x\"\n[backbone]\nkind = \"openai\"\nbase_url = \"http://127.0.0.1:1/v1\"\nmodel = \"m\"\n";
  auto plain = experiment_from_text(llm, "x.toml");
  ASSERT_TRUE(plain.ok()) << plain.status().to_string();
  EXPECT_EQ(plain->trainer.kind, TrainerKind::kNone);
  EXPECT_EQ(plain->effective_toml.find("[trainer]"), std::string::npos) << plain->effective_toml;
  auto trained = experiment_from_text(llm +
                                          "[trainer]\nkind = \"http\"\nurl = \"http://127.0.0.1:2/v1\"\n"
                                          "[policy]\nformat = \"knobs\"\n[coldstart]\nenabled = true\n",
                                      "x.toml");
  ASSERT_TRUE(trained.ok()) << trained.status().to_string();
  EXPECT_EQ(trained->trainer.url, "http://127.0.0.1:2/v1");
  EXPECT_EQ(trained->policy_format, PolicyFormat::kKnobs);
  auto sim = experiment_from_text("[run]\nname = \"x\"\n[trainer]\nkind = \"http\"\n", "x.toml");
  ASSERT_FALSE(sim.ok());
  EXPECT_NE(sim.status().message().find("key 'trainer.kind'"), std::string::npos) << sim.status().to_string();
  auto knobs = experiment_from_text("[run]\nname = \"x\"\n[policy]\nformat = \"knobs\"\n", "x.toml");
  ASSERT_FALSE(knobs.ok());
  EXPECT_NE(knobs.status().message().find("key 'policy.format'"), std::string::npos) << knobs.status().to_string();
  auto cold = experiment_from_text(llm + "[coldstart]\nenabled = true\n", "x.toml");
  ASSERT_FALSE(cold.ok());
  EXPECT_NE(cold.status().message().find("trainer.kind = \"http\""), std::string::npos) << cold.status().to_string();
  auto bad = experiment_from_text(llm + "[trainer]\nkind = \"grpc\"\n", "x.toml");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("trainer.kind"), std::string::npos) << bad.status().to_string();
}

// policy.format = "kernelbench" is refused where it cannot work yet, naming the key: a module is
// written for one backend, the cold start has no module examples. The GPU runs modules.
TEST(TrainerConfig, KernelbenchFormatNeedsOneBackendAndNoColdStart) {
  const std::string llm =
      "[run]\nname = \"x\"\n[backbone]\nkind = \"openai\"\nbase_url = \"http://127.0.0.1:1/v1\"\n"
      "model = \"m\"\n[policy]\nformat = \"kernelbench\"\n";
  auto ok = experiment_from_text(llm, "x.toml");
  ASSERT_TRUE(ok.ok()) << ok.status().to_string();
  EXPECT_EQ(ok->policy_format, PolicyFormat::kKernelbench);
  auto triton = experiment_from_text(llm + "languages = [\"triton\"]\n", "x.toml");
  ASSERT_TRUE(triton.ok()) << triton.status().to_string();
  struct Case {
    std::string extra, key;
  } cases[] = {
      {"languages = [\"cuda\", \"triton\"]\n", "key 'policy.languages'"},
      {"[coldstart]\nenabled = true\n[trainer]\nkind = \"http\"\n", "key 'coldstart.enabled'"},
  };
  for (const Case& c : cases) {
    auto e = experiment_from_text(llm + c.extra, "x.toml");
    ASSERT_FALSE(e.ok()) << c.extra;
    EXPECT_NE(e.status().message().find(c.key), std::string::npos) << e.status().to_string();
    EXPECT_NE(e.status().message().find("kernelbench"), std::string::npos) << e.status().to_string();
  }
  auto cuda = experiment_from_text(llm + "languages = [\"cuda\"]\n[device]\nkind = \"cuda\"\n", "x.toml");
  EXPECT_TRUE(cuda.ok()) << cuda.status().to_string();
  auto sim = experiment_from_text("[run]\nname = \"x\"\n[policy]\nformat = \"kernelbench\"\n", "x.toml");
  ASSERT_FALSE(sim.ok()) << "a language-model format needs a language model";
}

}  // namespace
}  // namespace vinci

// The sim world's glue between tasks, plans and the agents: the global knob table the backbone's
// policy heads are built on, task and skill features, the text of skills the summary agent
// writes, and the turn environment that turns a policy sample into a plan and a measurement.
#ifndef VINCI_HARNESS_SIM_WORLD_H_
#define VINCI_HARNESS_SIM_WORLD_H_

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "agents/agents.h"
#include "agents/backbone.h"
#include "core/rng.h"
#include "core/status.h"
#include "gpu/codegen/knobs.h"
#include "gpu/plan.h"
#include "gpu/task.h"
#include "harness/sim_knowledge.h"

namespace vinci {

// Every knob of every code-generator family, in a fixed order: the backbone's policy heads.
struct KnobTable {
  std::vector<Knob> knobs;
  std::map<std::string, int32_t> index;  // knob name -> head

  static const KnobTable& get();
  int32_t head_of(const std::string& knob) const;  // -1 when unknown
};

constexpr int32_t kTaskFeatureDim = 25;

// The fixed-size description of a task the backbone sees (level, family, which knob families its
// graph uses, log sizes at the experiment's size).
std::vector<float> task_features(const Task& task, SizeName size);

// The backbone's shape for the sim world.
BackboneShape sim_backbone_shape();

// The task's knob space mapped to global heads, in the task's knob order.
std::vector<int32_t> active_heads(const KnobSpace& space);

// What a skill recommends, as stored in its extra field "vinci": {"knobs": {name: value}, ...}.
// Skills without it (written by people or LLMs) recommend nothing to the sim policy.
std::map<std::string, std::string> skill_knobs(const Skill& skill);
// One-hot over choice_dim of every injected skill's recommended (knob, value); clamped to 1.
std::vector<float> skill_hint(const std::vector<const Skill*>& skills);

class SimSkillFeaturizer : public SkillFeaturizer {
 public:
  explicit SimSkillFeaturizer(const Task& task) : task_(task) {}
  // [skill_hint(skill) (choice_dim), scope is general, score / (1 + score), same family as task]
  std::vector<float> candidate_features(const Skill& skill, double bm25_score) const override;

 private:
  const Task& task_;
};

// ---------------------------------------------------------------------------------------------
// Knowledge (config key sim.knowledge; docs/sim_model.md, "Skills as knowledge").
//
//   open    every choice of every knob is open to the policy (the default world).
//   skills  the techniques below are locked: the policy cannot choose a locked technique's
//           choices in a turn unless the technique is known in that turn, because
//             taught      a skill injected into the turn's prompt teaches it: the skill's content
//                         holds one of the technique's choices written `knob = value` (in
//                         backquotes), as the summary agent's skills write their key idea;
//             carried     an earlier turn of the conversation (its history) chose one of its
//                         choices: the model has seen its own code;
//             discovered  a keyed draw: with probability sim.discovery, per turn and technique
//                         (key: the turn's key, "discover", the technique's index).
// A technique is relevant to a task when one of its knobs is in the task's knob space; only
// relevant techniques are locked, drawn or recorded.
// A technique: the (knob, value) choices it consists of.
struct Technique {
  std::string name;
  std::vector<std::pair<std::string, std::string>> choices;
  std::string what;  // one line, for the docs and the config reference
};
const std::vector<Technique>& locked_techniques();

// The indices (locked_techniques()) of the techniques a skill's content teaches.
std::vector<size_t> taught_techniques(const Skill& skill);

// What the policy knows in one turn, and the choices it may make.
struct TurnKnowledge {
  std::vector<std::string> locked, taught, carried, discovered;  // technique names, table order
  std::vector<float> allowed;                                    // PolicyInput::allowed; empty in the open world
  // {"locked":[...],"taught":[...],"carried":[...],"discovered":[...]}: the object a skills-world
  // policy sample names as its prompt. Empty in the open world.
  std::string to_json() const;
};

// earlier: the settings of the conversation's earlier turns (each in the space's knob order).
TurnKnowledge turn_knowledge(const KnowledgeParams& params, const KnobSpace& space,
                             const std::vector<const Skill*>& skills, const std::vector<std::vector<int32_t>>& earlier,
                             const RngKey& key);

// What the summary agent saw of the winning rollout.
struct WinningRollout {
  const Task* task = nullptr;
  KnobSpace space;
  std::vector<int32_t> choices;  // the best turn's setting
  double turn1_speedup = 0;
  double best_speedup = 0;
  std::string kernel_excerpt;  // the start of the best plan's first kernel
};

class SimSkillWriter : public SkillWriter {
 public:
  explicit SimSkillWriter(WinningRollout win) : win_(std::move(win)) {}
  std::optional<Skill> write_skill(const SummarySample& sample) const override;

 private:
  WinningRollout win_;
};

}  // namespace vinci

#endif  // VINCI_HARNESS_SIM_WORLD_H_

#include "harness/sim_agents.h"

#include "gpu/codegen/codegen.h"
#include "harness/loop_parts.h"
#include "harness/sim_world.h"

namespace vinci {

SimAgentModel::SimAgentModel(Backbone& backbone, KnowledgeParams knowledge)
    : backbone_(backbone), shape_(sim_backbone_shape()), knowledge_(knowledge) {}

Result<SelectionAnswer> SimAgentModel::select(const SelectionQuestion& q) {
  SimSkillFeaturizer featurizer(*q.task);
  SelectionAnswer a;
  a.input.task = task_features(*q.task, q.size);
  a.input.max_pick = q.max_pick;
  for (size_t i = 0; i < q.candidates.size(); ++i) {
    a.input.candidates.push_back(featurizer.candidate_features(*q.candidates[i], q.scores[i]));
  }
  VINCI_ASSIGN_OR_RETURN(SelectionSample s, backbone_.sample_selection(a.input, q.key, q.greedy));
  a.picked = std::move(s.picked);
  a.log_prob = s.log_prob;
  return a;
}

Result<PolicyTurn> SimAgentModel::write_plan(const PolicyQuestion& q) {
  KnobSpace space = knob_space(*q.task);
  PolicyTurn turn;
  PolicyInput& in = turn.input;
  in.task = task_features(*q.task, q.size);
  in.skill_hint = skill_hint(q.skills);
  in.active_heads = active_heads(space);
  if (q.history == nullptr || q.history->empty()) {
    in.previous.assign(static_cast<size_t>(shape_.choice_dim()), 0.0f);
    in.feedback.assign(kFeedbackDim, 0.0f);
  } else {
    const PolicyTurn& last = q.history->back();
    in.previous = encode_choices(shape_, in.active_heads, last.sample.choices);
    in.feedback = encode_feedback(last.result);
  }
  if (knowledge_.knowledge != SimKnowledge::kOpen) {
    std::vector<std::vector<int32_t>> earlier;
    if (q.history != nullptr) {
      for (const PolicyTurn& t : *q.history) earlier.push_back(t.sample.choices);
    }
    TurnKnowledge known = turn_knowledge(knowledge_, space, q.skills, earlier, q.key);
    turn.knowledge = known.to_json();
    in.allowed = std::move(known.allowed);
  }
  VINCI_ASSIGN_OR_RETURN(turn.sample, backbone_.sample_policy(in, q.key, q.greedy));
  KnobSetting setting(turn.sample.choices.begin(), turn.sample.choices.end());
  VINCI_ASSIGN_OR_RETURN(Plan plan, generate_plan(*q.task, setting));
  turn.plan = std::move(plan);
  return turn;
}

Result<SummaryAnswer> SimAgentModel::summarise(const SummaryQuestion& q) {
  const PolicyTurn& best = q.turns->at(q.best_turn);
  WinningRollout w;
  w.task = q.task;
  w.space = knob_space(*q.task);
  w.choices = best.sample.choices;
  w.turn1_speedup = q.turn1_speedup;
  w.best_speedup = q.best_speedup;
  w.kernel_excerpt = best.plan ? loop::kernel_excerpt(*best.plan, 30) : "";
  SummaryAnswer a;
  a.input.task = task_features(*q.task, q.size);
  a.input.active_heads = active_heads(w.space);
  a.input.winning = encode_choices(shape_, a.input.active_heads, w.choices);
  a.input.feedback = encode_feedback(best.result);
  VINCI_ASSIGN_OR_RETURN(a.sample, backbone_.sample_summary(a.input, q.key, q.greedy));
  std::optional<Skill> skill = SimSkillWriter(w).write_skill(a.sample);
  if (!skill) {
    a.dropped = "the sample keeps no choice of the winning setting";
  } else if (auto lazy = lazy_skill_reason(*skill)) {
    a.dropped = "lazy: " + *lazy;
  } else {
    a.skills.push_back(std::move(*skill));
  }
  return a;
}

}  // namespace vinci

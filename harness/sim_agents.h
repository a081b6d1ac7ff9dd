// The sim world's agent model: vinci's small network (a Backbone: the sim backbone, the recorded
// one, or rescore's mix) answering the loop's questions through features and the code generator.
//
//   select     task features and one feature vector per candidate (SimSkillFeaturizer) ->
//              Backbone::sample_selection -> picked candidate indices
//   write_plan task features, the injected skills' knob hint, the active heads, and the last
//              turn of the history (its choices one-hot, its feedback vector; zeros without one)
//              -> Backbone::sample_policy -> knob choices -> generate_plan; with
//              sim.knowledge = "skills", the choices of the techniques the turn does not know are
//              locked (turn_knowledge, harness/sim_world.h) and what it knew is the turn's
//              `knowledge`
//   summarise  the best turn's choices and feedback -> Backbone::sample_summary -> a skill
//              written by SimSkillWriter (at most one a sample), dropped when it keeps no knob or
//              is lazy
// The draws use the question's key as it is, so records are those the loop wrote before the seam.
#ifndef VINCI_HARNESS_SIM_AGENTS_H_
#define VINCI_HARNESS_SIM_AGENTS_H_

#include "agents/backbone.h"
#include "harness/agent_model.h"
#include "harness/sim_world.h"

namespace vinci {

class SimAgentModel : public AgentModel {
 public:
  explicit SimAgentModel(Backbone& backbone, KnowledgeParams knowledge = {});

  std::string kind() const override { return "sim"; }
  Result<SelectionAnswer> select(const SelectionQuestion& q) override;
  Result<PolicyTurn> write_plan(const PolicyQuestion& q) override;
  Result<SummaryAnswer> summarise(const SummaryQuestion& q) override;

 private:
  Backbone& backbone_;
  BackboneShape shape_;
  KnowledgeParams knowledge_;
};

}  // namespace vinci

#endif  // VINCI_HARNESS_SIM_AGENTS_H_

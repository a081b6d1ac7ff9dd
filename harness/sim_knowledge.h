// The sim world's knowledge setting (config keys sim.knowledge and sim.discovery): whether the
// policy knows every technique of the code generator (open) or only those a skill teaches it,
// it used earlier in the conversation, or it stumbles on (skills). The techniques and the rule
// are in harness/sim_world.h (turn_knowledge); docs/sim_model.md, "Skills as knowledge".
#ifndef VINCI_HARNESS_SIM_KNOWLEDGE_H_
#define VINCI_HARNESS_SIM_KNOWLEDGE_H_

#include <string_view>

#include "core/status.h"

namespace vinci {

enum class SimKnowledge { kOpen, kSkills };
const char* sim_knowledge_name(SimKnowledge k);
// "open" or "skills"; anything else is InvalidArgument naming the key and both choices.
Result<SimKnowledge> parse_sim_knowledge(std::string_view text);

struct KnowledgeParams {
  SimKnowledge knowledge = SimKnowledge::kOpen;
  double discovery = 0.05;  // skills: probability a turn finds a technique it does not know
};

}  // namespace vinci

#endif  // VINCI_HARNESS_SIM_KNOWLEDGE_H_

#include "harness/sim_knowledge.h"

#include <string>

namespace vinci {

const char* sim_knowledge_name(SimKnowledge k) {
  switch (k) {
    case SimKnowledge::kOpen: return "open";
    case SimKnowledge::kSkills: return "skills";
  }
  return "open";
}

Result<SimKnowledge> parse_sim_knowledge(std::string_view text) {
  if (text == "open") return SimKnowledge::kOpen;
  if (text == "skills") return SimKnowledge::kSkills;
  return invalid_argument("sim.knowledge = \"" + std::string(text) + "\": expected \"open\" or \"skills\"");
}

}  // namespace vinci

#include "agents/backbone.h"

namespace vinci {

const char* agent_role_name(AgentRole role) {
  switch (role) {
    case AgentRole::kSelection:
      return "selection";
    case AgentRole::kPolicy:
      return "policy";
    case AgentRole::kSummary:
      return "summary";
  }
  return "unknown";
}

int32_t BackboneShape::choice_dim() const {
  int32_t total = 0;
  for (int32_t size : head_sizes) total += size;
  return total;
}

}  // namespace vinci

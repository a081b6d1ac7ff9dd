#include "agents/backbone.h"

namespace vinci {

const char* agent_role_name(AgentRole role) {
  switch (role) {
    case AgentRole::kSelection: return "selection";
    case AgentRole::kPolicy: return "policy";
    case AgentRole::kSummary: return "summary";
  }
  return "unknown";
}

int32_t BackboneShape::choice_dim() const {
  int32_t total = 0;
  for (int32_t size : head_sizes) total += size;
  return total;
}

double RoleCrossEntropy::total() const {
  double t = 0;
  for (int r = 0; r < 3; ++r) {
    if (count[r] > 0) t += mean[r];
  }
  return t;
}

Result<RoleCrossEntropy> Backbone::cross_entropy(const std::vector<Experience>&) {
  return failed_precondition("the " + kind() + " backbone cannot be fitted in-process");
}

Result<UpdateStats> Backbone::supervised_step(const std::vector<Experience>&, double) {
  return failed_precondition("the " + kind() + " backbone cannot be fitted in-process");
}

Status Backbone::reset_optimizer() {
  return failed_precondition("the " + kind() + " backbone has no optimizer in this process");
}

Result<std::string> Backbone::checkpoint() const {
  return failed_precondition("the " + kind() + " backbone has no parameters in this process");
}

Status Backbone::load_checkpoint(std::string_view) {
  return failed_precondition("the " + kind() + " backbone cannot load a checkpoint");
}

}  // namespace vinci

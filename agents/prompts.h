// The prompts of the three agents (selection, policy, summary) and their tool schemas.
//
// The texts are part of a run's record: a replay rebuilds them and compares digests, so any edit
// here changes recorded prompts and must come with a format flag (docs/log_format.md, "Schema
// evolution"). Every builder is a pure function of its arguments.
#ifndef VINCI_AGENTS_PROMPTS_H_
#define VINCI_AGENTS_PROMPTS_H_

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "agents/skill.h"

namespace vinci {

struct ChatMessage {
  std::string role;  // "system", "user" or "assistant"
  std::string content;
  friend bool operator==(const ChatMessage& a, const ChatMessage& b) {
    return a.role == b.role && a.content == b.content;
  }
};

// OpenAI-style function schemas ({"type": "function", "function": {...}}) for the two tools.
nlohmann::json select_skills_tool_schema();
nlohmann::json update_skill_library_tool_schema();

// Selection agent: system message (role, tool, cap) and a user message with the task and, per
// candidate in recall order, its name, scope, tags and description; never the body, so the agent
// chooses from what a skill claims, as in daVinci-kernel.
std::vector<ChatMessage> selection_messages(std::string_view task_prompt, const std::vector<const Skill*>& candidates,
                                            size_t max_selected = 3);

// The selection agent's user message alone (the task and the candidates), for a system message of
// the caller's (a template).
std::string selection_user_message(std::string_view task_prompt, const std::vector<const Skill*>& candidates);

// Policy agent: the system message is `base_system`, followed, when skills were chosen, by a blank
// line and skill_injection_block(skills). The user message is the task.
std::string policy_system_prompt(std::string_view base_system, const std::vector<const Skill*>& skills);
std::vector<ChatMessage> policy_messages(std::string_view base_system, std::string_view task_prompt,
                                         const std::vector<const Skill*>& skills);

// The system message vinci uses for the policy when the experiment gives none.
extern const char* const kDefaultPolicySystem;

// One turn of a rollout as the summary agent reads it.
struct RolloutTurnText {
  int turn = 0;          // 1-based
  std::string response;  // the policy's reply (kernel source and reasoning)
  std::string feedback;  // the evaluator's result of that reply, as shown to the policy
  double speedup = 0;    // 0 when not correct
};

// Summary agent: system message (role, tool, cap, skill format) and a user message with the task,
// the skills the rollout had injected, and every turn with its feedback and speedup.
std::vector<ChatMessage> summary_messages(std::string_view task_prompt, const std::vector<const Skill*>& injected,
                                          const std::vector<RolloutTurnText>& turns, size_t max_new_skills = 2);

// The summary agent's user message alone, for a system message of the caller's.
std::string summary_user_message(std::string_view task_prompt, const std::vector<const Skill*>& injected,
                                 const std::vector<RolloutTurnText>& turns);

}  // namespace vinci

#endif  // VINCI_AGENTS_PROMPTS_H_

#include "agents/prompts.h"

#include <cstdio>
#include <cstdlib>

namespace vinci {

using nlohmann::json;

namespace {

std::string join_tags(const std::vector<std::string>& tags) {
  std::string out = "[";
  for (size_t i = 0; i < tags.size(); ++i) {
    if (i) out += ", ";
    out += tags[i];
  }
  return out + "]";
}

// Shortest text that reads back as the same double ("1.5", "0.30000000000000004").
std::string format_speedup(double v) {
  char buf[32];
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof buf, "%.*g", precision, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}

}  // namespace

json select_skills_tool_schema() {
  return json::parse(R"({
  "type": "function",
  "function": {
    "name": "select_skills",
    "description": "Choose the skills from the candidate list that will help write a faster correct kernel for this task.",
    "parameters": {
      "type": "object",
      "properties": {
        "think": {"type": "string", "description": "Your reasoning about the task's bottleneck and which techniques apply."},
        "selected_skills": {
          "type": "array",
          "description": "At most 3 skills, by their exact candidate name.",
          "items": {
            "type": "object",
            "properties": {
              "name": {"type": "string"},
              "reason": {"type": "string"}
            },
            "required": ["name", "reason"]
          }
        }
      },
      "required": ["think", "selected_skills"]
    }
  }
})");
}

json update_skill_library_tool_schema() {
  return json::parse(R"({
  "type": "function",
  "function": {
    "name": "update_skill_library",
    "description": "Propose reusable optimization skills distilled from a successful kernel optimization trajectory.",
    "parameters": {
      "type": "object",
      "properties": {
        "think": {"type": "string", "description": "What made the fast kernel fast, and what of it transfers to other tasks."},
        "new_skills": {
          "type": "array",
          "description": "At most 2 new skills.",
          "items": {
            "type": "object",
            "properties": {
              "name": {"type": "string", "description": "snake_case"},
              "description": {"type": "string", "description": "One sentence: what the technique does and when it applies."},
              "scope": {"type": "string", "description": "general, or task_specific/<type>"},
              "tags": {"type": "array", "items": {"type": "string"}, "description": "3-6 snake_case tags"},
              "content": {"type": "string", "description": "Markdown with ## Motivation, ## Key Idea, ## Example"}
            },
            "required": ["name", "description", "scope", "tags", "content"]
          }
        }
      },
      "required": ["think", "new_skills"]
    }
  }
})");
}

std::vector<ChatMessage> selection_messages(std::string_view task_prompt, const std::vector<const Skill*>& candidates,
                                            size_t max_selected) {
  std::string system =
      "You are the skill selection agent of a GPU kernel optimization system. You are given a "
      "kernel optimization task and candidate optimization skills retrieved from a skill "
      "library. Choose the skills that are most likely to make the generated kernel correct and "
      "faster for this task, at most " +
      std::to_string(max_selected) +
      ". Choose none when no candidate applies.\n\n"
      "Answer with exactly one call of the tool select_skills:\n"
      "<tool_call>\n<function=select_skills>\n<parameter=think>\nyour reasoning\n</parameter>\n"
      "<parameter=selected_skills>\n[{\"name\": \"<candidate name>\", \"reason\": \"<why>\"}]\n"
      "</parameter>\n</function>\n</tool_call>\n\n"
      "Use candidate names exactly as listed; unknown names are ignored.";
  return {{"system", std::move(system)}, {"user", selection_user_message(task_prompt, candidates)}};
}

std::string selection_user_message(std::string_view task_prompt, const std::vector<const Skill*>& candidates) {
  std::string user = "# Task\n\n";
  user += task_prompt;
  user += "\n\n# Candidate Skills\n";
  if (candidates.empty()) user += "\n(none)\n";
  for (size_t i = 0; i < candidates.size(); ++i) {
    const Skill& s = *candidates[i];
    user += "\n" + std::to_string(i + 1) + ". name: " + s.name + "\n   scope: " + s.scope +
            "\n   tags: " + join_tags(s.tags) + "\n   description: " + s.description + "\n";
  }
  return user;
}

const char* const kDefaultPolicySystem =
    "You are an expert in writing high-performance GPU kernels. Given a PyTorch reference "
    "model, write a replacement that computes the same outputs with custom CUDA kernels and runs "
    "faster. The result must be correct for every input shape of the task; do not call PyTorch "
    "compute operators, cuBLAS or torch.compile for the work you are asked to implement. After "
    "each attempt you receive the evaluation result (compilation, correctness, runtime, speedup) "
    "and may improve the kernel.";

std::string policy_system_prompt(std::string_view base_system, const std::vector<const Skill*>& skills) {
  std::string out(base_system);
  std::string block = skill_injection_block(skills);
  if (!block.empty()) {
    out += "\n\n";
    out += block;
  }
  return out;
}

std::vector<ChatMessage> policy_messages(std::string_view base_system, std::string_view task_prompt,
                                         const std::vector<const Skill*>& skills) {
  return {{"system", policy_system_prompt(base_system, skills)}, {"user", std::string(task_prompt)}};
}

std::vector<ChatMessage> summary_messages(std::string_view task_prompt, const std::vector<const Skill*>& injected,
                                          const std::vector<RolloutTurnText>& turns, size_t max_new_skills) {
  std::string system =
      "You are the skill summary agent of a GPU kernel optimization system. You read a "
      "trajectory in which a kernel was made substantially faster and distill at most " +
      std::to_string(max_new_skills) +
      " reusable optimization skills from it. A skill names a technique that transfers to other "
      "tasks, not a restatement of this kernel. Each skill has a snake_case name, a one-sentence "
      "description, a scope (general, or task_specific/<type>), 3-6 snake_case tags, and content "
      "in markdown with the sections ## Motivation, ## Key Idea and ## Example (an excerpt of the "
      "fast kernel), about 512 tokens at most. Skills that fall back to PyTorch operators, "
      "torch.compile or cuBLAS, or that skip the computation, are rejected.\n\n"
      "Answer with exactly one call of the tool update_skill_library:\n"
      "<tool_call>\n<function=update_skill_library>\n<parameter=think>\nyour analysis\n"
      "</parameter>\n<parameter=new_skills>\n[{\"name\": \"...\", \"description\": \"...\", "
      "\"scope\": \"general\", \"tags\": [\"...\"], \"content\": \"...\"}]\n</parameter>\n"
      "</function>\n</tool_call>";
  return {{"system", std::move(system)}, {"user", summary_user_message(task_prompt, injected, turns)}};
}

std::string summary_user_message(std::string_view task_prompt, const std::vector<const Skill*>& injected,
                                 const std::vector<RolloutTurnText>& turns) {
  std::string user = "# Task\n\n";
  user += task_prompt;
  user += "\n\n# Skills Injected In This Trajectory\n\n";
  if (injected.empty()) {
    user += "(none)\n";
  } else {
    for (const Skill* s : injected) user += "- " + s->name + ": " + s->description + "\n";
  }
  user += "\n# Trajectory\n";
  for (const RolloutTurnText& t : turns) {
    user += "\n## Turn " + std::to_string(t.turn) + " (speedup " + format_speedup(t.speedup) + ")\n\n### Response\n\n" +
            t.response + "\n\n### Evaluation\n\n" + t.feedback + "\n";
  }
  return user;
}

}  // namespace vinci

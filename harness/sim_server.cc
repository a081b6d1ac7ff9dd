#include "harness/sim_server.h"

#include <cstdlib>
#include <regex>
#include <sstream>

#include "agents/agents.h"
#include "agents/skill.h"
#include "core/json_fields.h"
#include "gpu/codegen/codegen.h"
#include "gpu/model_plan.h"
#include "harness/loop_parts.h"
#include "harness/rl.h"
#include "harness/sim_world.h"

namespace vinci {
namespace {

using nlohmann::json;

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) out.push_back(line);
  return out;
}

std::string message_text(const json& m) { return text_field(m, "content"); }

// The task a prompt is about: the header line "Task <id>: ..." and "Sizes (full|small)".
Result<std::pair<const Task*, SizeName>> find_task(const TaskSuite& suite, const std::string& text) {
  static const std::regex task_line(R"(Task ([A-Za-z0-9_]+): )");
  std::smatch m;
  if (!std::regex_search(text, m, task_line)) {
    return invalid_argument("the prompt names no task (a line \"Task <id>: ...\")");
  }
  const Task* task = suite.find(m[1].str());
  if (task == nullptr)
    return invalid_argument("the prompt names task " + m[1].str() + ", which this server does not have");
  SizeName size = text.find("Sizes (full)") != std::string::npos ? SizeName::kFull : SizeName::kSmall;
  return std::make_pair(task, size);
}

// "# knobs: k=v k=v" of a model-facing plan, as a setting of the task's knob space (defaults for
// knobs it does not name); nullopt without such a line.
std::optional<std::vector<int32_t>> knobs_in(const std::string& text, const KnobSpace& space) {
  for (const std::string& line : lines_of(text)) {
    if (line.rfind("# knobs:", 0) != 0) continue;
    std::map<std::string, std::string> values;
    std::istringstream in(line.substr(8));
    std::string kv;
    while (in >> kv) {
      auto eq = kv.find('=');
      if (eq != std::string::npos) values[kv.substr(0, eq)] = kv.substr(eq + 1);
    }
    std::vector<int32_t> choices;
    for (const Knob& k : space.knobs) {
      int32_t c = k.default_index;
      auto it = values.find(k.name);
      if (it != values.end()) {
        for (size_t i = 0; i < k.choices.size(); ++i) {
          if (k.choices[i] == it->second) c = static_cast<int32_t>(i);
        }
      }
      choices.push_back(c);
    }
    return choices;
  }
  return std::nullopt;
}

// The evaluator's verdict as the feedback text of vinci's prompts states it.
TurnResult feedback_in(const std::string& text) {
  TurnResult r;
  r.compiled = text.find("compiled: yes") != std::string::npos;
  r.correct = text.find("correct: yes") != std::string::npos;
  r.decoy = text.find("decoy: yes") != std::string::npos;
  auto at = text.find("speedup: ");
  if (at != std::string::npos) r.speedup = std::strtod(text.c_str() + at + 9, nullptr);
  r.reward = turn_reward({r.compiled, r.correct, r.decoy, r.speedup, 0.0}, RewardParams());
  return r;
}

// The skills of an injected skill block, with the knobs each recommends: its library entry's, and
// the "- `knob = value`" lines of its text (how vinci's distilled skills state them).
std::vector<Skill> injected_skills(const std::string& system, const SkillLibrary& library) {
  std::vector<Skill> out;
  size_t at = system.find(kSkillInjectionHeader);
  if (at == std::string::npos) return out;
  static const std::regex knob_line(R"(^- `([a-z_.]+) = ([A-Za-z0-9_.]+)`)");
  for (const std::string& line : lines_of(system.substr(at))) {
    if (line.rfind("name: ", 0) == 0) {
      std::string name = line.substr(6);
      const Skill* known = library.find(name);
      out.push_back(known ? *known : Skill{});
      out.back().name = name;
      continue;
    }
    std::smatch m;
    if (!out.empty() && std::regex_search(line, m, knob_line)) {
      out.back().extra["vinci"]["knobs"][m[1].str()] = m[2].str();
    }
  }
  return out;
}

std::string xml_tool_call(const std::string& function, const std::string& think, const std::string& param,
                          const json& value) {
  return "<tool_call>\n<function=" + function + ">\n<parameter=think>\n" + think +
         "\n</parameter>\n<parameter=" + param + ">\n" + value.dump() + "\n</parameter>\n</function>\n</tool_call>";
}

ChatAnswer tool_answer(const std::string& function, const std::string& think, const std::string& param,
                       const json& value, bool structured) {
  ChatAnswer a;
  if (structured) {
    a.tool_calls.push_back({function, json{{"think", think}, {param, value}}});
  } else {
    a.content = xml_tool_call(function, think, param, value);
  }
  return a;
}

// The answer to a KernelBench prompt (policy.format = "kernelbench"): the sim backbone writes no
// modules, so it answers the model to make faster (the prompt's last ```python block) renamed
// ModelNew, plain PyTorch, which the sim world records as not priceable.
Result<ChatAnswer> kernelbench_answer(const std::string& prompt) {
  const std::string open = "```python\n";
  size_t begin = prompt.rfind(open);
  size_t end = begin == std::string::npos ? begin : prompt.find("\n```", begin + open.size());
  if (end == std::string::npos) return invalid_argument("the KernelBench prompt holds no ```python block");
  std::string module = prompt.substr(begin + open.size(), end - begin - open.size());
  const std::string model = "class Model(";
  size_t at = module.find(model);
  if (at == std::string::npos) return invalid_argument("the KernelBench prompt's model defines no class Model");
  module.replace(at, model.size(), "class ModelNew(");
  ChatAnswer a;
  a.content = "The sim backbone writes no kernels; this is the model as it is.\n\n```python\n" + module + "\n```";
  return a;
}

}  // namespace

SimChatResponder::SimChatResponder(const TaskSuite& suite, const SkillLibrary& library, Backbone& backbone)
    : suite_(suite), library_(library), backbone_(backbone) {}

Result<ChatAnswer> SimChatResponder::answer(const json& request) {
  if (!request.contains("messages") || !request["messages"].is_array() || request["messages"].empty()) {
    return invalid_argument("the request has no messages");
  }
  const json& messages = request["messages"];
  std::string user;
  for (const json& m : messages) {
    if (text_field(m, "role") == "user") {
      user = message_text(m);
      break;
    }
  }
  // One request, one answer: the draw is keyed by the request's canonical body.
  RngKey key = RngKey::root(0).with("request", hash_tagged("llm_request", request.dump()).hex());
  bool greedy = request.contains("temperature") && request["temperature"].is_number() &&
                request["temperature"].get<double>() == 0.0;
  bool tools = request.contains("tools");
  // A KernelBench prompt names no task: it shows the model to make faster.
  if (user.find("class ModelNew") != std::string::npos && user.find("```python\n") != std::string::npos)
    return kernelbench_answer(user);
  // A request about no task at all (a client's connection check, a run's preflight) gets "OK".
  static const std::regex any_task(R"(Task ([A-Za-z0-9_]+): )");
  bool names_a_task = false;
  for (const json& m : messages) names_a_task = names_a_task || std::regex_search(message_text(m), any_task);
  if (!names_a_task) {
    ChatAnswer ok;
    ok.content = "OK";
    return ok;
  }
  if (user.find("\n# Candidate Skills\n") != std::string::npos) return select(user, key, greedy, tools);
  if (user.find("\n# Trajectory\n") != std::string::npos) return summary(user, key, greedy, tools);
  return policy(messages, key, greedy);
}

Result<ChatAnswer> SimChatResponder::select(const std::string& user, const RngKey& key, bool greedy, bool tools) {
  VINCI_ASSIGN_OR_RETURN(auto task, find_task(suite_, user));
  static const std::regex candidate(R"(^\d+\. name: (.+)$)");
  std::vector<Skill> candidates;
  for (const std::string& line : lines_of(user.substr(user.find("\n# Candidate Skills\n")))) {
    std::smatch m;
    if (!std::regex_search(line, m, candidate)) continue;
    const Skill* known = library_.find(m[1].str());
    candidates.push_back(known ? *known : Skill{});
    candidates.back().name = m[1].str();
  }
  json picked = json::array();
  if (!candidates.empty()) {
    SimSkillFeaturizer featurizer(*task.first);
    SelectionInput in;
    in.task = task_features(*task.first, task.second);
    in.max_pick = 3;
    for (size_t i = 0; i < candidates.size(); ++i) {
      // The prompt shows ranks, not scores: a rank's score falls as BM25's would.
      in.candidates.push_back(featurizer.candidate_features(candidates[i], 1.0 / static_cast<double>(i + 1)));
    }
    VINCI_ASSIGN_OR_RETURN(SelectionSample s, backbone_.sample_selection(in, key, greedy));
    for (int32_t c : s.picked)
      picked.push_back({{"name", candidates[static_cast<size_t>(c)].name}, {"reason", "ranked by the sim backbone"}});
  }
  return tool_answer("select_skills", "The sim backbone's selection head ranked the candidates.", "selected_skills",
                     picked, tools);
}

Result<ChatAnswer> SimChatResponder::policy(const json& messages, const RngKey& key, bool greedy) {
  std::string system, first_user;
  for (const json& m : messages) {
    if (text_field(m, "role") == "system" && system.empty()) system = message_text(m);
    if (text_field(m, "role") == "user" && first_user.empty()) first_user = message_text(m);
  }
  VINCI_ASSIGN_OR_RETURN(auto task, find_task(suite_, first_user));
  KnobSpace space = knob_space(*task.first);
  std::vector<Skill> skills = injected_skills(system, library_);
  std::vector<const Skill*> skill_ptrs;
  for (const Skill& s : skills) skill_ptrs.push_back(&s);
  PolicyInput in;
  in.task = task_features(*task.first, task.second);
  in.skill_hint = skill_hint(skill_ptrs);
  in.active_heads = active_heads(space);
  BackboneShape shape = sim_backbone_shape();
  in.previous.assign(static_cast<size_t>(shape.choice_dim()), 0.0f);
  in.feedback.assign(kFeedbackDim, 0.0f);
  // The turn this one continues: the last assistant reply and the feedback after it.
  for (size_t i = 0; i + 1 < messages.size(); ++i) {
    if (text_field(messages[i], "role") != "assistant") continue;
    auto choices = knobs_in(message_text(messages[i]), space);
    if (!choices) continue;
    in.previous = encode_choices(shape, in.active_heads, *choices);
    in.feedback = encode_feedback(feedback_in(message_text(messages[i + 1])));
  }
  VINCI_ASSIGN_OR_RETURN(PolicySample s, backbone_.sample_policy(in, key, greedy));
  KnobSetting setting(s.choices.begin(), s.choices.end());
  VINCI_ASSIGN_OR_RETURN(Plan plan, generate_plan(*task.first, setting));
  VINCI_ASSIGN_OR_RETURN(std::string text, render_model_plan(plan));
  ChatAnswer a;
  a.content = "The sim backbone chose this schedule for " + task.first->id + ".\n\n" + text;
  return a;
}

Result<ChatAnswer> SimChatResponder::summary(const std::string& user, const RngKey& key, bool greedy, bool tools) {
  VINCI_ASSIGN_OR_RETURN(auto task, find_task(suite_, user));
  KnobSpace space = knob_space(*task.first);
  // The turns: "## Turn N (speedup X)", then the response up to "### Evaluation".
  static const std::regex turn_line(R"(^## Turn (\d+) \(speedup ([0-9.eE+-]+)\))");
  struct Turn {
    double speedup = 0;
    std::string response, evaluation;
  };
  std::vector<Turn> turns;
  bool in_eval = false;
  for (const std::string& line : lines_of(user.substr(user.find("\n# Trajectory\n")))) {
    std::smatch m;
    if (std::regex_search(line, m, turn_line)) {
      turns.push_back(Turn{std::strtod(m[2].str().c_str(), nullptr), "", ""});
      in_eval = false;
    } else if (!turns.empty()) {
      if (line == "### Evaluation") in_eval = true;
      (in_eval ? turns.back().evaluation : turns.back().response) += line + "\n";
    }
  }
  json proposed = json::array();
  size_t best = 0;
  for (size_t t = 0; t < turns.size(); ++t) {
    if (turns[t].speedup > turns[best].speedup) best = t;
  }
  std::optional<std::vector<int32_t>> choices;
  if (!turns.empty()) choices = knobs_in(turns[best].response, space);
  if (choices) {
    BackboneShape shape = sim_backbone_shape();
    WinningRollout w;
    w.task = task.first;
    w.space = space;
    w.choices = *choices;
    w.turn1_speedup = turns.front().speedup;
    w.best_speedup = turns[best].speedup;
    KnobSetting setting(choices->begin(), choices->end());
    VINCI_ASSIGN_OR_RETURN(Plan plan, generate_plan(*task.first, setting));
    w.kernel_excerpt = loop::kernel_excerpt(plan, 30);
    SummaryInput in;
    in.task = task_features(*task.first, task.second);
    in.active_heads = active_heads(space);
    in.winning = encode_choices(shape, in.active_heads, *choices);
    in.feedback = encode_feedback(feedback_in(turns[best].evaluation));
    VINCI_ASSIGN_OR_RETURN(SummarySample s, backbone_.sample_summary(in, key, greedy));
    if (auto skill = SimSkillWriter(w).write_skill(s)) {
      proposed.push_back({{"name", skill->name},
                          {"description", skill->description},
                          {"scope", skill->scope},
                          {"tags", skill->tags},
                          {"content", skill->content}});
    }
  }
  return tool_answer("update_skill_library", "The sim backbone's summary head chose the settings that mattered.",
                     "new_skills", proposed, tools);
}

}  // namespace vinci

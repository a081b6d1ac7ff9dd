#include "gpu/knob_answer.h"

#include <set>
#include <vector>

#include "core/text.h"
#include "gpu/codegen/codegen.h"
#include "gpu/codegen/knobs.h"
#include "gpu/model_plan.h"

namespace vinci {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

// The block's lines with their 1-based line numbers in the reply.
struct Block {
  std::vector<std::pair<int, std::string_view>> lines;
};

Result<Block> knob_block(std::string_view reply) {
  Block b;
  std::vector<std::string_view> lines;
  size_t at = 0;
  while (at <= reply.size()) {
    size_t end = reply.find('\n', at);
    if (end == std::string_view::npos) end = reply.size();
    lines.push_back(reply.substr(at, end - at));
    at = end + 1;
  }
  int open = -1;
  for (size_t i = 0; i < lines.size(); ++i) {
    std::string_view t = trim(lines[i]);
    if (open < 0) {
      if (t == "```knobs") open = static_cast<int>(i);
      continue;
    }
    if (t.rfind("```", 0) == 0) return b;
    b.lines.emplace_back(static_cast<int>(i) + 1, lines[i]);
  }
  if (open >= 0)
    return invalid_argument("the ```knobs block opened on line " + std::to_string(open + 1) +
                            " is not closed (expected a line ``` after its settings)");
  // No fence: a reply made only of settings is read as one block.
  b.lines.clear();
  bool any = false;
  for (size_t i = 0; i < lines.size(); ++i) {
    std::string_view t = trim(lines[i]);
    if (t.empty()) continue;
    if (t.find('=') == std::string_view::npos) {
      return invalid_argument(
          "no ```knobs block: expected the settings as `knob = value` lines in a ```knobs block, found prose on "
          "line " +
          std::to_string(i + 1));
    }
    any = true;
    b.lines.emplace_back(static_cast<int>(i) + 1, lines[i]);
  }
  if (!any) return invalid_argument("no ```knobs block: expected the settings as `knob = value` lines in one");
  return b;
}

}  // namespace

std::string knob_menu(const Task& task) {
  KnobSpace space = knob_space(task);
  std::string out;
  for (const Knob& k : space.knobs) {
    out += k.name + ":";
    for (size_t c = 0; c < k.choices.size(); ++c) out += (c ? " | " : " ") + k.choices[c];
    out += " (default " + k.choices[static_cast<size_t>(k.default_index)] + ")\n";
  }
  return out;
}

Result<std::map<std::string, std::string>> parse_knob_answer(std::string_view reply, const Task& task) {
  VINCI_ASSIGN_OR_RETURN(Block block, knob_block(reply));
  KnobSpace space = knob_space(task);
  std::map<std::string, std::string> values;
  for (const auto& [line, text] : block.lines) {
    std::string_view t = trim(text);
    if (t.empty() || t.front() == '#') continue;
    size_t eq = t.find('=');
    const std::string where = "knobs block, line " + std::to_string(line) + ": ";
    if (eq == std::string_view::npos) {
      return invalid_argument(where + "expected `knob = value`, found `" + std::string(t.substr(0, 80)) + "`");
    }
    std::string name(trim(t.substr(0, eq)));
    std::string value(trim(t.substr(eq + 1)));
    int32_t k = space.index_of(name);
    if (k < 0) {
      std::string names;
      for (const Knob& kn : space.knobs) names += (names.empty() ? "" : ", ") + kn.name;
      return invalid_argument(where + "task " + task.id + " has no knob '" + name.substr(0, 80) +
                              "' (its knobs: " + names + ")");
    }
    const Knob& knob = space.knobs[static_cast<size_t>(k)];
    bool known = false;
    for (const auto& c : knob.choices) known = known || c == value;
    if (!known) {
      std::string choices;
      for (const auto& c : knob.choices) choices += (choices.empty() ? "" : " | ") + c;
      return invalid_argument(where + "knob " + name + " takes " + choices + ", found '" + value.substr(0, 80) + "'");
    }
    if (!values.emplace(name, value).second) {
      return invalid_argument(where + "knob " + name + " is set twice");
    }
  }
  return values;
}

Result<Plan> plan_from_knob_answer(std::string_view reply, const Task& task) {
  VINCI_ASSIGN_OR_RETURN(auto values, parse_knob_answer(reply, task));
  VINCI_ASSIGN_OR_RETURN(Plan generated, generate_plan(task, values));
  // A model's candidate carries no claims: what the evaluator sees is the plan's content, as for
  // a kernel the model wrote, with the settings kept only as the (never trusted) knobs hint.
  Plan plan = strip_plan_metadata(generated);
  plan.knobs = values;
  return plan;
}

std::string render_knob_answer(const Task& task, const std::map<std::string, std::string>& values) {
  KnobSpace space = knob_space(task);
  std::string out = "```knobs\n";
  for (const Knob& k : space.knobs) {
    auto it = values.find(k.name);
    out += k.name + " = " + (it != values.end() ? it->second : k.choices[static_cast<size_t>(k.default_index)]) + "\n";
  }
  out += "```";
  return out;
}

}  // namespace vinci

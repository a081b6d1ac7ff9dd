#include "agents/tool_calls.h"

#include <algorithm>
#include <cctype>

namespace vinci {

using nlohmann::json;

const char* tool_call_format_name(ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::kQwenXml: return "qwen_xml";
    case ToolCallFormat::kJsonInToolCall: return "json_in_tool_call";
    case ToolCallFormat::kFencedJson: return "fenced_json";
  }
  return "unknown";
}

namespace {

constexpr std::string_view kToolCallOpen = "<tool_call>";
constexpr std::string_view kToolCallClose = "</tool_call>";
constexpr std::string_view kFunctionOpen = "<function=";
constexpr std::string_view kFunctionClose = "</function>";
constexpr std::string_view kParamOpen = "<parameter=";
constexpr std::string_view kParamClose = "</parameter>";

std::string_view trim(std::string_view s) {
  auto space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; };
  while (!s.empty() && space(s.front())) s.remove_prefix(1);
  while (!s.empty() && space(s.back())) s.remove_suffix(1);
  return s;
}

// Parses JSON without exceptions; a discarded value on failure.
json parse_json(std::string_view text) {
  return json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
}

size_t min_pos(std::initializer_list<size_t> ps) { return std::min(ps); }

// All <function=NAME> ... blocks of the reply (with or without a <tool_call> wrapper).
std::vector<ToolCall> xml_calls(std::string_view reply) {
  std::vector<ToolCall> calls;
  size_t pos = 0;
  while ((pos = reply.find(kFunctionOpen, pos)) != std::string_view::npos) {
    size_t name_begin = pos + kFunctionOpen.size();
    size_t name_end = reply.find('>', name_begin);
    if (name_end == std::string_view::npos) break;
    size_t body_end = min_pos({reply.find(kFunctionClose, name_end), reply.find(kToolCallClose, name_end),
                               reply.find(kFunctionOpen, name_end), reply.size()});
    ToolCall call;
    call.function = std::string(trim(reply.substr(name_begin, name_end - name_begin)));
    call.arguments = json::object();
    call.format = ToolCallFormat::kQwenXml;
    std::string_view body = reply.substr(name_end + 1, body_end - (name_end + 1));
    size_t p = 0;
    while ((p = body.find(kParamOpen, p)) != std::string_view::npos) {
      size_t key_begin = p + kParamOpen.size();
      size_t key_end = body.find('>', key_begin);
      if (key_end == std::string_view::npos) break;
      size_t value_end = min_pos({body.find(kParamClose, key_end), body.find(kParamOpen, key_end), body.size()});
      std::string key(trim(body.substr(key_begin, key_end - key_begin)));
      std::string_view value = trim(body.substr(key_end + 1, value_end - (key_end + 1)));
      if (!call.arguments.contains(key)) call.arguments[key] = std::string(value);
      p = value_end;
    }
    calls.push_back(std::move(call));
    pos = body_end;
  }
  return calls;
}

// A call object {"name", "arguments"|"parameters"}, or nullopt.
std::optional<ToolCall> call_from_json(const json& obj, ToolCallFormat format) {
  if (!obj.is_object()) return std::nullopt;
  auto name = obj.find("name");
  if (name == obj.end() || !name->is_string()) return std::nullopt;
  auto args = obj.find("arguments");
  if (args == obj.end()) args = obj.find("parameters");
  if (args == obj.end()) return std::nullopt;
  json arguments = *args;
  if (arguments.is_string()) arguments = parse_json(arguments.get<std::string>());
  if (!arguments.is_object()) return std::nullopt;
  return ToolCall{name->get<std::string>(), std::move(arguments), format};
}

std::vector<ToolCall> json_tool_calls(std::string_view reply) {
  std::vector<ToolCall> calls;
  size_t pos = 0;
  while ((pos = reply.find(kToolCallOpen, pos)) != std::string_view::npos) {
    size_t begin = pos + kToolCallOpen.size();
    size_t end = reply.find(kToolCallClose, begin);
    if (end == std::string_view::npos) end = reply.size();
    json obj = parse_json(trim(reply.substr(begin, end - begin)));
    if (auto call = call_from_json(obj, ToolCallFormat::kJsonInToolCall)) {
      calls.push_back(std::move(*call));
    }
    pos = end;
  }
  return calls;
}

// ```json blocks. A block holding a bare arguments object is taken as a call of `function`.
std::vector<ToolCall> fenced_calls(std::string_view reply, std::string_view function) {
  std::vector<ToolCall> calls;
  constexpr std::string_view kFence = "```json";
  size_t pos = 0;
  while ((pos = reply.find(kFence, pos)) != std::string_view::npos) {
    size_t begin = pos + kFence.size();
    size_t end = reply.find("```", begin);
    if (end == std::string_view::npos) end = reply.size();
    json obj = parse_json(trim(reply.substr(begin, end - begin)));
    if (auto call = call_from_json(obj, ToolCallFormat::kFencedJson)) {
      calls.push_back(std::move(*call));
    } else if (obj.is_object() && !obj.contains("name")) {
      calls.push_back(ToolCall{std::string(function), obj, ToolCallFormat::kFencedJson});
    }
    pos = end + 3;
  }
  return calls;
}

std::string excerpt(std::string_view s) {
  constexpr size_t kMax = 80;
  std::string out(s.substr(0, kMax));
  if (s.size() > kMax) out += "...";
  for (char& c : out) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  return out;
}

// A list argument: a JSON array, or a string holding one (the XML format).
Result<json> list_argument(const ToolCall& call, const char* key) {
  auto it = call.arguments.find(key);
  if (it == call.arguments.end()) {
    return invalid_argument(std::string(call.function) + " call (" + tool_call_format_name(call.format) +
                            "): argument '" + key + "': expected a list, found nothing (argument missing)");
  }
  json value = *it;
  if (value.is_string()) {
    std::string text = value.get<std::string>();
    value = parse_json(text);
    if (value.is_discarded()) {
      return invalid_argument(std::string(call.function) + " call (" + tool_call_format_name(call.format) +
                              "): argument '" + key + "': expected a JSON list, found text that does not parse: \"" +
                              excerpt(text) + "\"");
    }
  }
  if (!value.is_array()) {
    return invalid_argument(std::string(call.function) + " call (" + tool_call_format_name(call.format) +
                            "): argument '" + key + "': expected a list, found " + value.type_name());
  }
  return value;
}

std::string string_argument(const json& obj, const char* key) {
  auto it = obj.find(key);
  if (it == obj.end() || !it->is_string()) return std::string();
  return it->get<std::string>();
}

std::string to_lower_ascii(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// `needle` occurs in `hay` at a position not preceded by an identifier character or a dot, so
// "f.softmax(" does not match inside "buf.softmax(".
bool contains_call(const std::string& hay, std::string_view needle) {
  for (size_t p = hay.find(needle); p != std::string::npos; p = hay.find(needle, p + 1)) {
    if (p == 0) return true;
    unsigned char before = static_cast<unsigned char>(hay[p - 1]);
    if (!(std::isalnum(before) || before == '_' || before == '.')) return true;
  }
  return false;
}

}  // namespace

Result<ToolCall> find_tool_call(std::string_view reply, std::string_view function) {
  for (auto* calls_of : {+[](std::string_view r, std::string_view) { return xml_calls(r); },
                         +[](std::string_view r, std::string_view) { return json_tool_calls(r); },
                         +[](std::string_view r, std::string_view f) { return fenced_calls(r, f); }}) {
    for (ToolCall& call : calls_of(reply, function)) {
      if (call.function == function) return std::move(call);
    }
  }
  return invalid_argument("reply: expected a " + std::string(function) +
                          " tool call (Qwen XML, JSON in <tool_call>, or a ```json block), found "
                          "none in \"" +
                          excerpt(reply) + "\"");
}

Result<SkillSelection> parse_select_skills(std::string_view reply, const std::vector<std::string>& candidate_names,
                                           size_t cap) {
  VINCI_ASSIGN_OR_RETURN(ToolCall call, find_tool_call(reply, "select_skills"));
  VINCI_ASSIGN_OR_RETURN(json list, list_argument(call, "selected_skills"));
  SkillSelection out;
  out.format = call.format;
  out.think = string_argument(call.arguments, "think");
  for (size_t i = 0; i < list.size(); ++i) {
    const json& entry = list[i];
    std::string name, reason;
    if (entry.is_string()) {
      name = entry.get<std::string>();
    } else if (entry.is_object()) {
      name = string_argument(entry, "name");
      reason = string_argument(entry, "reason");
    }
    if (i >= cap) {
      out.dropped.push_back({i, name, "over the cap of " + std::to_string(cap)});
      continue;
    }
    if (name.empty()) {
      out.dropped.push_back({i, name, "no skill name"});
      continue;
    }
    auto match = std::find(candidate_names.begin(), candidate_names.end(), name);
    if (match == candidate_names.end()) {
      std::string normalized = normalize_skill_name(name);
      match = std::find(candidate_names.begin(), candidate_names.end(), normalized);
    }
    if (match == candidate_names.end()) {
      out.dropped.push_back({i, name, "not among the candidates"});
      continue;
    }
    bool repeated =
        std::any_of(out.selected.begin(), out.selected.end(), [&](const SelectedSkill& s) { return s.name == *match; });
    if (repeated) {
      out.dropped.push_back({i, name, "selected twice"});
      continue;
    }
    out.selected.push_back({*match, reason});
  }
  return out;
}

Result<SkillProposal> parse_update_skill_library(std::string_view reply, size_t cap) {
  VINCI_ASSIGN_OR_RETURN(ToolCall call, find_tool_call(reply, "update_skill_library"));
  VINCI_ASSIGN_OR_RETURN(json list, list_argument(call, "new_skills"));
  SkillProposal out;
  out.format = call.format;
  out.think = string_argument(call.arguments, "think");
  for (size_t i = 0; i < list.size(); ++i) {
    const json& entry = list[i];
    std::string written_name = entry.is_object() ? string_argument(entry, "name") : std::string();
    if (i >= cap) {
      out.dropped.push_back({i, written_name, "over the cap of " + std::to_string(cap)});
      continue;
    }
    if (!entry.is_object()) {
      out.dropped.push_back({i, "", std::string("expected a skill object, found ") + entry.type_name()});
      continue;
    }
    Skill s;
    std::string problem;
    for (const char* key : {"name", "description", "scope", "content"}) {
      auto it = entry.find(key);
      if (it == entry.end()) {
        problem = std::string("field '") + key + "': missing";
        break;
      }
      if (!it->is_string()) {
        problem = std::string("field '") + key + "': expected a string, found " + it->type_name();
        break;
      }
    }
    if (problem.empty()) {
      auto tags = entry.find("tags");
      if (tags == entry.end()) {
        problem = "field 'tags': missing";
      } else if (tags->is_string()) {
        // Models often write tags as one comma-separated string; accept it.
        std::string all = tags->get<std::string>();
        size_t p = 0;
        while (p <= all.size()) {
          size_t q = all.find(',', p);
          if (q == std::string::npos) q = all.size();
          std::string_view t = trim(std::string_view(all).substr(p, q - p));
          if (!t.empty()) s.tags.emplace_back(t);
          p = q + 1;
        }
      } else if (tags->is_array()) {
        for (const json& t : *tags) {
          if (!t.is_string()) {
            problem = std::string("field 'tags': expected strings, found ") + t.type_name();
            break;
          }
          s.tags.push_back(t.get<std::string>());
        }
      } else {
        problem = std::string("field 'tags': expected a list of strings, found ") + tags->type_name();
      }
    }
    if (!problem.empty()) {
      out.dropped.push_back({i, written_name, problem});
      continue;
    }
    s.name = string_argument(entry, "name");
    s.description = string_argument(entry, "description");
    s.scope = string_argument(entry, "scope");
    s.content = string_argument(entry, "content");
    if (auto lazy = lazy_skill_reason(s)) {
      out.dropped.push_back({i, written_name, "lazy: " + *lazy});
      continue;
    }
    out.skills.push_back(std::move(s));
  }
  return out;
}

std::optional<std::string> lazy_skill_reason(const Skill& skill) {
  if (trim(skill.name).empty() || normalize_skill_name(skill.name).empty()) {
    return "missing field 'name'";
  }
  if (trim(skill.description).empty()) return "missing field 'description'";
  if (trim(skill.scope).empty()) return "missing field 'scope'";
  if (skill.tags.empty()) return "missing field 'tags'";
  if (trim(skill.content).empty()) return "missing field 'content'";

  const std::string text = to_lower_ascii(skill.description + "\n" + skill.content);
  for (std::string_view s : {"torch.compile", "torch._dynamo", "torch._inductor"}) {
    if (text.find(s) != std::string::npos) return "uses torch.compile (" + std::string(s) + ")";
  }
  if (text.find("cublas") != std::string::npos) return "calls cuBLAS";
  static const std::string_view kFallbackPhrases[] = {"fall back to torch",
                                                      "fall back to pytorch",
                                                      "falls back to torch",
                                                      "falls back to pytorch",
                                                      "fallback to torch",
                                                      "fallback to pytorch",
                                                      "fall back to the pytorch",
                                                      "use the pytorch implementation",
                                                      "call the pytorch implementation",
                                                      "use the reference implementation"};
  for (std::string_view s : kFallbackPhrases) {
    if (text.find(s) != std::string::npos) {
      return "falls back to PyTorch (\"" + std::string(s) + "\")";
    }
  }
  // PyTorch compute ops: calling one on the hot path hands the work back to PyTorch.
  static const std::string_view kOps[] = {"matmul",
                                          "mm",
                                          "bmm",
                                          "addmm",
                                          "baddbmm",
                                          "einsum",
                                          "linear",
                                          "conv1d",
                                          "conv2d",
                                          "conv3d",
                                          "conv_transpose1d",
                                          "conv_transpose2d",
                                          "conv_transpose3d",
                                          "softmax",
                                          "log_softmax",
                                          "layer_norm",
                                          "group_norm",
                                          "batch_norm",
                                          "instance_norm",
                                          "scaled_dot_product_attention",
                                          "relu",
                                          "gelu",
                                          "silu",
                                          "sigmoid",
                                          "tanh"};
  for (std::string_view prefix :
       {"torch.", "torch.nn.functional.", "f.", "at::", "torch::", "torch::nn::functional::"}) {
    for (std::string_view op : kOps) {
      std::string call = std::string(prefix) + std::string(op) + "(";
      if (contains_call(text, call)) return "falls back to PyTorch (" + call + ")";
    }
  }
  static const std::string_view kSkipPhrases[] = {"skip the computation",
                                                  "skips the computation",
                                                  "skipping the computation",
                                                  "skip computation",
                                                  "return the input unchanged",
                                                  "returns the input unchanged",
                                                  "return zeros",
                                                  "returns zeros",
                                                  "hardcode the output",
                                                  "hard-code the output",
                                                  "hardcoded output",
                                                  "cache the output across calls",
                                                  "reuse the previous output"};
  for (std::string_view s : kSkipPhrases) {
    if (text.find(s) != std::string::npos) {
      return "skips the computation (\"" + std::string(s) + "\")";
    }
  }
  return std::nullopt;
}

}  // namespace vinci

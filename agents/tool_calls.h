// Parsers for the tool calls an LLM backbone writes in its replies.
//
// Two tools (daVinci-kernel):
//   select_skills(think: string, selected_skills: [{name, reason}])             selection agent
//   update_skill_library(think: string,
//                        new_skills: [{name, description, scope, tags, content}])  summary agent
//
// A reply is searched in three formats, in this order; the first format in which a call of the
// wanted function parses is used:
//   1. Qwen3-style XML:
//        <tool_call>
//        <function=select_skills>
//        <parameter=think>
//        ...free text...
//        </parameter>
//        <parameter=selected_skills>
//        [{"name": "...", "reason": "..."}]
//        </parameter>
//        </function>
//        </tool_call>
//      The <tool_call> wrapper and closing tags may be missing (a value then ends at the next
//      <parameter=, </function> or the end of the reply). Values are trimmed of ASCII whitespace;
//      a list parameter's value is JSON text.
//   2. JSON inside <tool_call>...</tool_call>: {"name": F, "arguments": {...}} ("parameters" is
//      accepted for "arguments"; arguments may also be a JSON string holding the object).
//   3. A fenced ```json block holding either such a call object or the arguments object itself.
// Within a format the first call of the wanted function wins; calls of other functions are ignored.
//
// Nothing here throws or aborts on any reply: an unparseable reply is a non-ok Result whose message
// says what was looked for and what was found, so the loop can record it as a failed sample.
#ifndef VINCI_AGENTS_TOOL_CALLS_H_
#define VINCI_AGENTS_TOOL_CALLS_H_

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "agents/skill.h"
#include "core/status.h"

namespace vinci {

enum class ToolCallFormat { kQwenXml, kJsonInToolCall, kFencedJson };
const char* tool_call_format_name(ToolCallFormat format);

struct ToolCall {
  std::string function;
  // A JSON object. In the XML format every value is a string (JSON text for list parameters).
  nlohmann::json arguments;
  ToolCallFormat format = ToolCallFormat::kQwenXml;
};

// The first call of `function` in the reply, by the format order above.
Result<ToolCall> find_tool_call(std::string_view reply, std::string_view function);

// An entry of the model's list that was not taken, and why.
struct DroppedEntry {
  size_t index = 0;  // position in the list the model wrote
  std::string name;  // as written; empty when there was none
  std::string reason;
};

struct SelectedSkill {
  std::string name;  // a candidate's name, exactly
  std::string reason;
};

struct SkillSelection {
  std::string think;
  std::vector<SelectedSkill> selected;
  std::vector<DroppedEntry> dropped;
  ToolCallFormat format = ToolCallFormat::kQwenXml;
};

// Parses select_skills. Of the list as written, entries from position `cap` on are dropped ("over
// the cap"); of the first `cap`, entries are dropped when they have no name, when the name is not
// a candidate (matched exactly, else after normalize_skill_name), or when it repeats an earlier
// pick. An entry may be an object {name, reason} or a bare name string. An empty selection is a
// valid answer (ok, nothing selected); a reply without a parseable call is not.
Result<SkillSelection> parse_select_skills(std::string_view reply, const std::vector<std::string>& candidate_names,
                                           size_t cap = 3);

struct SkillProposal {
  std::string think;
  std::vector<Skill> skills;  // names as written (the library normalises on add)
  std::vector<DroppedEntry> dropped;
  ToolCallFormat format = ToolCallFormat::kQwenXml;
};

// Parses update_skill_library. Of the list as written, entries from position `cap` on are dropped;
// of the first `cap`, entries that are not objects, have a missing or mistyped field, or are lazy
// (lazy_skill_reason) are dropped with the reason ("lazy: <reason>" for the latter).
Result<SkillProposal> parse_update_skill_library(std::string_view reply, size_t cap = 2);

// Why a proposed skill is lazy ("calls cuBLAS", "missing field 'tags'", ...; no "lazy:" prefix),
// or nullopt when it is not. The rules (case-insensitive, on the
// description and content) are heuristics written down in docs/skills.md:
//   - a field is empty (name, description, scope, content) or tags is empty;
//   - it uses torch.compile (torch.compile, torch._dynamo, torch._inductor);
//   - it calls cuBLAS (any "cublas", which covers cublasLt and cublasGemmEx);
//   - it falls back to PyTorch: a phrase such as "fall back to pytorch", or a call of a PyTorch
//     compute op (torch.matmul(, torch.nn.functional.*, F.softmax(, at::matmul(, ...);
//     allocations such as torch.empty_like stay allowed;
//   - it skips the computation: "skip the computation", "return the input unchanged",
//     "return zeros", "hardcode the output", "cache the output across calls", ...
std::optional<std::string> lazy_skill_reason(const Skill& skill);

}  // namespace vinci

#endif  // VINCI_AGENTS_TOOL_CALLS_H_

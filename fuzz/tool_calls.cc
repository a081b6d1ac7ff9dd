// What a language model server sends back: the bytes are a chat.completion body (parsed as the chat
// client parses it, its text then read as below) or, when they are not one, a reply's text. The
// text is read as the selection and summary agents read it: tool calls in any accepted format
// (Qwen XML, JSON in <tool_call>, fenced JSON) parsed as select_skills against candidate names and
// as update_skill_library, whose proposals are checked for laziness and rendered.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "agents/chat_client.h"
#include "agents/skill.h"
#include "agents/tool_calls.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  vinci::Result<vinci::ChatReply> body = vinci::parse_chat_reply(bytes);
  const std::string text = body.ok() ? vinci::chat_reply_text(*body) : std::string(bytes);
  std::string_view reply = text;
  static const std::vector<std::string> candidates = {"warp_shuffle_reduce", "shared_memory_tiling", "vectorized_loads",
                                                      "kernel_fusion"};
  (void)vinci::find_tool_call(reply, "select_skills");
  vinci::Result<vinci::SkillSelection> sel = vinci::parse_select_skills(reply, candidates);
  if (sel.ok()) {
    for (const vinci::SelectedSkill& s : sel->selected) (void)vinci::normalize_skill_name(s.name);
  }
  vinci::Result<vinci::SkillProposal> proposal = vinci::parse_update_skill_library(reply);
  if (proposal.ok()) {
    for (const vinci::Skill& s : proposal->skills) {
      (void)vinci::lazy_skill_reason(s);
      (void)vinci::skill_text(s);
      (void)vinci::normalize_skill_name(s.name);
    }
  }
  return 0;
}

// One skill of the library, and the texts agents see of it.
//
// A skill is daVinci-kernel's unit of optimization knowledge: a name, a one-line description, a
// scope (`general` or `task_specific/<type>`), 3-6 snake_case tags, and a markdown body with
// `## Motivation`, `## Key Idea` and `## Example`. The texts built here are byte-for-byte what the
// agents are shown, so they are part of what a run records and replays.
#ifndef VINCI_AGENTS_SKILL_H_
#define VINCI_AGENTS_SKILL_H_

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace vinci {

struct Skill {
  std::string name;
  std::string description;
  std::string scope;
  std::vector<std::string> tags;
  std::string content;
  // The speedup the verification run measured; absent for skills that were never verified (a
  // hand-written seed library).
  std::optional<double> verify_speedup;
  // Fields of the JSONL line vinci does not interpret (`source_uuid`, ...), in the order they
  // were read. Always a JSON object; written back after the known fields.
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();

  friend bool operator==(const Skill& a, const Skill& b);
  friend bool operator!=(const Skill& a, const Skill& b) { return !(a == b); }
};

// True when every string field and tag is valid UTF-8 (JSON can only carry valid UTF-8; a skill
// read from JSON always is).
bool has_valid_utf8(const Skill& skill);

// daVinci's name normalisation: ASCII whitespace trimmed at both ends, ASCII letters lower-cased,
// every character that is not [a-z0-9_] (each non-ASCII code point counts as one) replaced by
// `_`. "Warp-Shuffle Reduce" -> "warp_shuffle_reduce". The clash suffix (`_1`, `_2`) is the
// library's business (SkillLibrary::add).
std::string normalize_skill_name(std::string_view name);

// The text an agent is shown for one skill:
//
//   ---
//   name: <name>
//   description: <description>
//   scope: <scope>
//   tags: [<tag>, <tag>, ...]
//   ---
//   <content>
//
// No newline is added after content; content is used as stored.
std::string skill_text(const Skill& skill);

// The header of the injection block, exactly as daVinci-kernel writes it.
inline constexpr std::string_view kSkillInjectionHeader =
    "## [Skill Library] Potentially Relevant Optimization Techniques";

// The block appended to the policy agent's system message:
//
//   <kSkillInjectionHeader>
//   <blank line>
//   <skill_text(s1)>
//   <blank line>
//   <skill_text(s2)> ...
//   <blank line>
//   ---
//
// Empty when no skills are given (the null scheme injects nothing).
std::string skill_injection_block(const std::vector<const Skill*>& skills);

// The text BM25 indexes for a skill: name, description, tags (space separated) and content, joined
// by single spaces. The tokenizer (agents/bm25.h) turns `_` into spaces, so a snake_case name is
// matched word by word.
std::string skill_document_text(const Skill& skill);

}  // namespace vinci

#endif  // VINCI_AGENTS_SKILL_H_

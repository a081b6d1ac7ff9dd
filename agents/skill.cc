#include "agents/skill.h"

#include <cstdint>

#include "core/text.h"

namespace vinci {

bool operator==(const Skill& a, const Skill& b) {
  return a.name == b.name && a.description == b.description && a.scope == b.scope && a.tags == b.tags &&
         a.content == b.content && a.verify_speedup == b.verify_speedup && a.extra == b.extra;
}

namespace {

bool is_ascii_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

// Length of the UTF-8 sequence a lead byte starts; 1 for a stray continuation or invalid byte,
// so malformed input still advances one byte at a time.
size_t utf8_length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if ((lead & 0xE0) == 0xC0) return 2;
  if ((lead & 0xF0) == 0xE0) return 3;
  if ((lead & 0xF8) == 0xF0) return 4;
  return 1;
}

}  // namespace

bool has_valid_utf8(const Skill& skill) {
  for (const std::string* f : {&skill.name, &skill.description, &skill.scope, &skill.content}) {
    if (first_invalid_utf8(*f) != std::string_view::npos) return false;
  }
  for (const auto& t : skill.tags) {
    if (first_invalid_utf8(t) != std::string_view::npos) return false;
  }
  return true;
}

std::string normalize_skill_name(std::string_view name) {
  size_t begin = 0, end = name.size();
  while (begin < end && is_ascii_space(name[begin])) ++begin;
  while (end > begin && is_ascii_space(name[end - 1])) --end;
  std::string out;
  out.reserve(end - begin);
  for (size_t i = begin; i < end;) {
    unsigned char c = static_cast<unsigned char>(name[i]);
    if (c >= 0x80) {
      out.push_back('_');
      i += utf8_length(c);
      continue;
    }
    if (c >= 'A' && c <= 'Z') c = static_cast<unsigned char>(c - 'A' + 'a');
    bool word = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
    out.push_back(word ? static_cast<char>(c) : '_');
    ++i;
  }
  return out;
}

std::string skill_text(const Skill& skill) {
  std::string out =
      "---\nname: " + skill.name + "\ndescription: " + skill.description + "\nscope: " + skill.scope + "\ntags: [";
  for (size_t i = 0; i < skill.tags.size(); ++i) {
    if (i) out += ", ";
    out += skill.tags[i];
  }
  out += "]\n---\n";
  out += skill.content;
  return out;
}

std::string skill_injection_block(const std::vector<const Skill*>& skills) {
  if (skills.empty()) return std::string();
  std::string out(kSkillInjectionHeader);
  out += "\n\n";
  for (const Skill* s : skills) {
    out += skill_text(*s);
    out += "\n\n";
  }
  out += "---";
  return out;
}

std::string skill_document_text(const Skill& skill) {
  std::string out = skill.name;
  out += ' ';
  out += skill.description;
  for (const auto& t : skill.tags) {
    out += ' ';
    out += t;
  }
  out += ' ';
  out += skill.content;
  return out;
}

}  // namespace vinci

// The skill library: daVinci-kernel's JSONL file, per-step snapshots, and a canonical form.
//
// File format (one skill per line, UTF-8, as daVinci-kernel writes it):
//
//   library   := { line "\n" }
//   line      := blank | object
//   blank     := only ASCII whitespace; skipped on read, never written
//   object    := a JSON object with
//                  "name"           string, non-empty after normalisation   (required)
//                  "description"    string                                  (required)
//                  "scope"          string                                  (required)
//                  "tags"           array of strings                        (required)
//                  "content"        string                                  (required)
//                  "verify_speedup" number or null                          (optional)
//                  any other key    any JSON value, kept and written back   (e.g. source_uuid)
//
// Writing puts the six known keys first in the order above (verify_speedup only when present),
// then the other keys in the order they were read, one compact JSON object per line.
//
// Names are normalised on read and on add (normalize_skill_name). Reading keeps the first skill of
// each normalised name and drops later ones (daVinci: "first read wins"); add() instead renames a
// newcomer whose name is taken to name_1, name_2, ... (the first free one).
//
// Snapshots: a folder holds global_step_<N>.jsonl (N decimal, no sign, no leading zeros; other names are
// ignored);
// the library for training step s is the snapshot with the largest N <= s.
//
// Canonical bytes (for content addressing): the line "vinci-skill-library 1\n", then per skill in
// library order one line: a JSON object whose keys are sorted (nlohmann's std::map order), known
// and extra keys alike, absent verify_speedup omitted, numbers in nlohmann's shortest round-trip
// form. Two libraries with equal skills in equal order have equal canonical bytes, whatever key
// order or spacing their files had.
#ifndef VINCI_AGENTS_SKILL_LIBRARY_H_
#define VINCI_AGENTS_SKILL_LIBRARY_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "agents/skill.h"
#include "core/hash.h"
#include "core/status.h"

namespace vinci {

class SkillLibrary {
 public:
  SkillLibrary() = default;

  // Parses JSONL text. `origin` names the source in error messages ("lib.jsonl"). On any
  // malformed line the whole parse fails with "<origin>:<line>: field '<key>': expected ...,
  // found ..." and nothing is returned.
  static Result<SkillLibrary> parse_jsonl(std::string_view text, const std::string& origin);
  static Result<SkillLibrary> load(const std::string& path);

  // The library as daVinci-format JSONL (see the grammar above).
  std::string to_jsonl() const;
  // Writes to_jsonl() atomically (temp file, fsync, rename).
  Status save(const std::string& path) const;

  // Adds a skill, normalising its name and renaming it on a clash. Returns the name it got.
  // REQUIRES: normalize_skill_name(skill.name) is not empty; has_valid_utf8(skill) (the file
  // format is JSON, which cannot hold other bytes).
  std::string add(Skill skill);

  size_t size() const { return skills_.size(); }
  bool empty() const { return skills_.empty(); }
  const std::vector<Skill>& skills() const { return skills_; }
  const Skill& at(size_t i) const { return skills_.at(i); }
  // nullptr when no skill has this exact (already normalised) name.
  const Skill* find(std::string_view name) const;
  // Names of skills the last parse dropped as duplicates, with their line numbers, for reporting.
  const std::vector<std::pair<std::string, size_t>>& dropped_duplicates() const { return dropped_duplicates_; }

  std::string canonical_bytes() const;
  // hash_tagged("skill_library", canonical_bytes()).
  Digest digest() const;

 private:
  bool insert(Skill skill);  // false when the name is taken

  std::vector<Skill> skills_;
  std::unordered_map<std::string, size_t> by_name_;  // lookups only; never iterated
  std::vector<std::pair<std::string, size_t>> dropped_duplicates_;
};

// <dir>/global_step_<step>.jsonl
std::string snapshot_path(const std::string& dir, int64_t step);

// The step N of the snapshot to load for training step `step`: the largest N <= step among the
// folder's global_step_<N>.jsonl files. NotFound when there is none (the message lists what the
// folder holds); files whose names do not match the pattern are ignored.
Result<int64_t> find_snapshot_step(const std::string& dir, int64_t step);

// Loads the snapshot find_snapshot_step picks.
Result<SkillLibrary> load_snapshot(const std::string& dir, int64_t step);

// Saves `library` as the snapshot of `step`, atomically.
Status save_snapshot(const SkillLibrary& library, const std::string& dir, int64_t step);

}  // namespace vinci

#endif  // VINCI_AGENTS_SKILL_LIBRARY_H_

#include "agents/skill_library.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <system_error>

#include "core/atomic_file.h"

namespace vinci {
namespace {

using OrderedJson = nlohmann::ordered_json;

constexpr const char* kKnownKeys[] = {"name", "description", "scope", "tags", "content", "verify_speedup"};

bool is_known_key(const std::string& key) {
  for (const char* k : kKnownKeys) {
    if (key == k) return true;
  }
  return false;
}

bool is_blank(std::string_view line) {
  for (char c : line) {
    if (c != ' ' && c != '\t' && c != '\r' && c != '\v' && c != '\f') return false;
  }
  return true;
}

std::string where(const std::string& origin, size_t line) { return origin + ":" + std::to_string(line); }

// "<origin>:<line>: field '<key>': expected <what>, found <type>"
Status field_error(const std::string& origin, size_t line, const char* key, const char* expected,
                   const OrderedJson* found) {
  std::string found_text = found ? std::string(found->type_name()) : "nothing (field missing)";
  return invalid_argument(where(origin, line) + ": field '" + key + "': expected " + expected + ", found " +
                          found_text);
}

Status read_string(const OrderedJson& obj, const char* key, const std::string& origin, size_t line, std::string* out) {
  auto it = obj.find(key);
  if (it == obj.end()) return field_error(origin, line, key, "a string", nullptr);
  if (!it->is_string()) return field_error(origin, line, key, "a string", &*it);
  *out = it->get<std::string>();
  return Status();
}

Result<Skill> parse_line(std::string_view text, const std::string& origin, size_t line) {
  OrderedJson obj;
  try {
    obj = OrderedJson::parse(text.begin(), text.end());
  } catch (const nlohmann::json::parse_error& e) {
    return invalid_argument(where(origin, line) + ": expected one JSON object per line, found " +
                            "text that does not parse (" + e.what() + ")");
  } catch (const nlohmann::json::exception& e) {  // a number past double's range ("1e999")
    return invalid_argument(where(origin, line) + ": expected one JSON object per line, found " +
                            "a value JSON cannot hold (" + e.what() + ")");
  }
  if (!obj.is_object()) {
    return invalid_argument(where(origin, line) + ": expected a JSON object, found " + std::string(obj.type_name()));
  }
  Skill s;
  VINCI_RETURN_IF_ERROR(read_string(obj, "name", origin, line, &s.name));
  VINCI_RETURN_IF_ERROR(read_string(obj, "description", origin, line, &s.description));
  VINCI_RETURN_IF_ERROR(read_string(obj, "scope", origin, line, &s.scope));
  auto tags = obj.find("tags");
  if (tags == obj.end()) return field_error(origin, line, "tags", "an array of strings", nullptr);
  if (!tags->is_array()) return field_error(origin, line, "tags", "an array of strings", &*tags);
  for (size_t i = 0; i < tags->size(); ++i) {
    const auto& t = (*tags)[i];
    if (!t.is_string()) {
      std::string key = "tags[" + std::to_string(i) + "]";
      return invalid_argument(where(origin, line) + ": field '" + key + "': expected a string, found " +
                              std::string(t.type_name()));
    }
    s.tags.push_back(t.get<std::string>());
  }
  VINCI_RETURN_IF_ERROR(read_string(obj, "content", origin, line, &s.content));
  auto vs = obj.find("verify_speedup");
  if (vs != obj.end() && !vs->is_null()) {
    if (!vs->is_number()) {
      return field_error(origin, line, "verify_speedup", "a number or null", &*vs);
    }
    s.verify_speedup = vs->get<double>();
  }
  std::string normalized = normalize_skill_name(s.name);
  if (normalized.empty()) {
    return invalid_argument(where(origin, line) +
                            ": field 'name': expected a name with at least one character, "
                            "found \"" +
                            s.name + "\"");
  }
  s.name = std::move(normalized);
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    if (!is_known_key(it.key())) s.extra[it.key()] = it.value();
  }
  return s;
}

}  // namespace

bool SkillLibrary::insert(Skill skill) {
  auto [it, fresh] = by_name_.emplace(skill.name, skills_.size());
  if (!fresh) return false;
  skills_.push_back(std::move(skill));
  return true;
}

Result<SkillLibrary> SkillLibrary::parse_jsonl(std::string_view text, const std::string& origin) {
  SkillLibrary lib;
  size_t line_no = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (is_blank(line)) continue;
    VINCI_ASSIGN_OR_RETURN(Skill s, parse_line(line, origin, line_no));
    std::string name = s.name;
    if (!lib.insert(std::move(s))) lib.dropped_duplicates_.emplace_back(name, line_no);
  }
  return lib;
}

Result<SkillLibrary> SkillLibrary::load(const std::string& path) {
  VINCI_ASSIGN_OR_RETURN(std::string text, read_file(path, kSkillLibraryFile));
  return parse_jsonl(text, path);
}

std::string SkillLibrary::to_jsonl() const {
  std::string out;
  for (const Skill& s : skills_) {
    OrderedJson obj = OrderedJson::object();
    obj["name"] = s.name;
    obj["description"] = s.description;
    obj["scope"] = s.scope;
    obj["tags"] = s.tags;
    obj["content"] = s.content;
    if (s.verify_speedup) obj["verify_speedup"] = *s.verify_speedup;
    for (auto it = s.extra.begin(); it != s.extra.end(); ++it) obj[it.key()] = it.value();
    out += obj.dump();
    out += '\n';
  }
  return out;
}

Status SkillLibrary::save(const std::string& path) const { return write_file_atomic(path, to_jsonl()); }

std::string SkillLibrary::add(Skill skill) {
  std::string base = normalize_skill_name(skill.name);
  VINCI_REQUIRE(!base.empty(), "skill name \"" << skill.name << "\" normalises to nothing");
  VINCI_REQUIRE(has_valid_utf8(skill), "skill \"" << base << "\" holds bytes that are not UTF-8");
  std::string name = base;
  for (int64_t suffix = 1; by_name_.count(name); ++suffix) {
    name = base + "_" + std::to_string(suffix);
  }
  skill.name = name;
  bool inserted = insert(std::move(skill));
  VINCI_ASSERT(inserted);
  return name;
}

const Skill* SkillLibrary::find(std::string_view name) const {
  auto it = by_name_.find(std::string(name));
  return it == by_name_.end() ? nullptr : &skills_[it->second];
}

std::string SkillLibrary::canonical_bytes() const {
  std::string out = "vinci-skill-library 1\n";
  for (const Skill& s : skills_) {
    nlohmann::json obj = nlohmann::json::object();  // std::map: keys sorted at every depth
    for (auto it = s.extra.begin(); it != s.extra.end(); ++it) {
      obj[it.key()] = nlohmann::json::parse(it.value().dump());
    }
    obj["name"] = s.name;
    obj["description"] = s.description;
    obj["scope"] = s.scope;
    obj["tags"] = s.tags;
    obj["content"] = s.content;
    if (s.verify_speedup) obj["verify_speedup"] = *s.verify_speedup;
    out += obj.dump();
    out += '\n';
  }
  return out;
}

Digest SkillLibrary::digest() const { return hash_tagged("skill_library", canonical_bytes()); }

std::string snapshot_path(const std::string& dir, int64_t step) {
  return dir + "/global_step_" + std::to_string(step) + ".jsonl";
}

namespace {

// The N of "global_step_<N>.jsonl", or -1 when the name does not match.
int64_t snapshot_step_of(const std::string& file_name) {
  static const std::string kPrefix = "global_step_";
  static const std::string kSuffix = ".jsonl";
  if (file_name.size() <= kPrefix.size() + kSuffix.size()) return -1;
  if (file_name.compare(0, kPrefix.size(), kPrefix) != 0) return -1;
  if (file_name.compare(file_name.size() - kSuffix.size(), kSuffix.size(), kSuffix) != 0) {
    return -1;
  }
  std::string digits = file_name.substr(kPrefix.size(), file_name.size() - kPrefix.size() - kSuffix.size());
  if (digits.size() > 18) return -1;  // keeps the value inside int64_t
  // Only the spelling snapshot_path writes, so a step names exactly one file.
  if (digits.size() > 1 && digits[0] == '0') return -1;
  for (char c : digits) {
    if (c < '0' || c > '9') return -1;
  }
  return std::strtoll(digits.c_str(), nullptr, 10);
}

}  // namespace

Result<int64_t> find_snapshot_step(const std::string& dir, int64_t step) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::directory_iterator it(dir, ec);
  if (ec) return not_found("cannot list skill snapshot folder " + dir + ": " + ec.message());
  std::vector<int64_t> steps;
  for (; it != fs::directory_iterator(); it.increment(ec)) {
    if (ec) return io_error("cannot list skill snapshot folder " + dir + ": " + ec.message());
    int64_t n = snapshot_step_of(it->path().filename().string());
    if (n >= 0) steps.push_back(n);
  }
  std::sort(steps.begin(), steps.end());
  auto upper = std::upper_bound(steps.begin(), steps.end(), step);
  if (upper == steps.begin()) {
    std::string held = steps.empty() ? "no global_step_<N>.jsonl files"
                                     : "steps " + std::to_string(steps.front()) + ".." + std::to_string(steps.back());
    return not_found("skill snapshot folder " + dir +
                     ": expected a global_step_<N>.jsonl with N <= " + std::to_string(step) + ", found " + held);
  }
  return *(upper - 1);
}

Result<SkillLibrary> load_snapshot(const std::string& dir, int64_t step) {
  VINCI_ASSIGN_OR_RETURN(int64_t n, find_snapshot_step(dir, step));
  return SkillLibrary::load(snapshot_path(dir, n));
}

Status save_snapshot(const SkillLibrary& library, const std::string& dir, int64_t step) {
  VINCI_REQUIRE(step >= 0, "snapshot step " << step << " is negative");
  return library.save(snapshot_path(dir, step));
}

}  // namespace vinci

#include "gpu/fenced_blocks.h"

#include <algorithm>
#include <cctype>

namespace vinci {
namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v'; }

std::string_view trim(std::string_view s) {
  while (!s.empty() && (is_space(s.front()) || s.front() == '\n')) s.remove_prefix(1);
  while (!s.empty() && (is_space(s.back()) || s.back() == '\n')) s.remove_suffix(1);
  return s;
}

size_t count_backticks(std::string_view s) {
  size_t n = 0;
  while (n < s.size() && s[n] == '`') ++n;
  return n;
}

std::string fence_info(std::string_view rest) {
  rest = trim(rest);
  size_t n = 0;
  while (n < rest.size() && !is_space(rest[n])) ++n;
  std::string info(rest.substr(0, n));
  for (char& c : info) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return info;
}

std::string_view trimmed_line(const LineIndex& lines, size_t line) {
  return trim(lines.text().substr(lines.line_start(line), lines.line_end(line) - lines.line_start(line)));
}

}  // namespace

LineIndex::LineIndex(std::string_view text) : text_(text) {
  starts_.push_back(0);
  for (size_t i = 0; i < text.size(); ++i)
    if (text[i] == '\n') starts_.push_back(i + 1);
}

size_t LineIndex::line_of(size_t off) const {
  return static_cast<size_t>(std::upper_bound(starts_.begin(), starts_.end(), off) - starts_.begin());
}

Result<std::vector<FencedBlock>> find_fenced_blocks(const LineIndex& lines) {
  std::vector<FencedBlock> blocks;
  std::string_view t = lines.text();
  for (size_t line = 1; line <= lines.line_count(); ++line) {
    std::string_view s = trimmed_line(lines, line);
    size_t ticks = count_backticks(s);
    // As in Markdown, a fence's info text holds no backtick: ```cuda``` in prose opens nothing.
    if (ticks < 3 || s.substr(ticks).find('`') != std::string_view::npos) continue;
    FencedBlock b;
    b.info = fence_info(s.substr(ticks));
    b.open_line = line;
    b.begin = std::min(lines.line_end(line) + 1, t.size());
    size_t close = line + 1;
    for (; close <= lines.line_count(); ++close) {
      std::string_view c = trimmed_line(lines, close);
      if (count_backticks(c) >= ticks && count_backticks(c) == c.size()) break;
    }
    if (close > lines.line_count())
      return invalid_argument("reply, line " + std::to_string(line) + ": the ```" + b.info +
                              " block opened here is never closed: end it with a line ```");
    b.end = lines.line_start(close);
    blocks.push_back(std::move(b));
    line = close;
  }
  return blocks;
}

}  // namespace vinci

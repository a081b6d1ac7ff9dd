// Fenced code blocks of a model's reply, and the line index their messages count with.
//
// A reply is Markdown-like prose with fenced blocks:
//   fence   := a line of three or more backticks, then an info word (```cuda, ```python), no
//              other backtick on the line; leading and trailing blanks are allowed
//   content := the lines after the opening fence, up to the closing line
//   close   := a line of backticks only, at least as many as the opening fence had
// A fence line inside a block's content closes it or is content: blocks do not nest. Every
// format a model writes as fenced blocks (gpu/model_plan.h, gpu/kernelbench_module.h) reads its
// reply with find_fenced_blocks, so they agree on where a block starts and ends.
#ifndef VINCI_GPU_FENCED_BLOCKS_H_
#define VINCI_GPU_FENCED_BLOCKS_H_

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace vinci {

// Where each line of a text starts. Lines are 1-based and end at '\n' (a '\r' before it is part
// of the line). REQUIRES: the text outlives the index.
class LineIndex {
 public:
  explicit LineIndex(std::string_view text);

  std::string_view text() const { return text_; }
  // The line holding byte off; an off at or past the end is on the last line.
  size_t line_of(size_t off) const;
  // REQUIRES: 1 <= line <= line_count().
  size_t line_start(size_t line) const { return starts_[line - 1]; }
  // One past the last character of the line (its '\n' or the end of the text).
  size_t line_end(size_t line) const { return line < starts_.size() ? starts_[line] - 1 : text_.size(); }
  size_t line_count() const { return starts_.size(); }

 private:
  std::string_view text_;
  std::vector<size_t> starts_;
};

struct FencedBlock {
  std::string info;      // first word after the fence, lower case: cuda, launch, json, python, ...
  size_t open_line = 0;  // the opening fence's line, 1-based
  // The content, byte offsets in the text: from after the opening line to the start of the
  // closing line (begin == end for an empty block).
  size_t begin = 0, end = 0;
};

// The text's fenced blocks in order. An opening fence without its closing line is an error,
// "reply, line 7: the ```launch block opened here is never closed: end it with a line ```".
// Linear in the text's size.
Result<std::vector<FencedBlock>> find_fenced_blocks(const LineIndex& lines);

}  // namespace vinci

#endif  // VINCI_GPU_FENCED_BLOCKS_H_

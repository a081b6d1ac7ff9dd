// The tiny language model's tokenizer and chat template (docs/lm.md).
//
// Tokens are the 256 byte values (id = byte) and five specials after them:
//   256 <|system|>  257 <|user|>  258 <|assistant|>  259 <|tool|>  260 <|end|>
// Text is encoded byte by byte, so every string has exactly one encoding and decoding is exact;
// the specials never come from text (the bytes "<|end|>" in a message are seven byte tokens).
//
// The chat template renders each message as `<|role|>content<|end|>` and ends the prompt with
// `<|assistant|>`; a reply is `content<|end|>`. A message whose content is a list of parts
// contributes its text parts, concatenated; an assistant message's tool calls follow its content
// as text, one `<tool_call>{"name": ..., "arguments": ...}</tool_call>` each, since the model
// answers in content only.
#ifndef VINCI_LM_TOKENIZER_H_
#define VINCI_LM_TOKENIZER_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace vinci {
namespace lm {

constexpr int32_t kTokSystem = 256;
constexpr int32_t kTokUser = 257;
constexpr int32_t kTokAssistant = 258;
constexpr int32_t kTokTool = 259;
constexpr int32_t kTokEnd = 260;
constexpr int32_t kVocab = 261;

// The byte tokens of a text.
std::vector<int32_t> encode_text(std::string_view text);
// The text of tokens; a special is written as its name ("<|end|>").
std::string decode(const std::vector<int32_t>& tokens);

// The prompt tokens of a chat completions request: its "messages" through the template, ending
// with <|assistant|>. InvalidArgument naming the field for a message it cannot read (a role other
// than system, developer, user, assistant or tool; content that is not a string, null or a list).
Result<std::vector<int32_t>> encode_prompt(const nlohmann::json& request);
// A reply's tokens: the completion's bytes and <|end|>.
std::vector<int32_t> encode_reply(std::string_view completion);

// `text` with every byte that is not part of well-formed UTF-8 replaced by U+FFFD, so a sampled
// reply can travel in JSON.
std::string to_valid_utf8(std::string_view text);

}  // namespace lm
}  // namespace vinci

#endif  // VINCI_LM_TOKENIZER_H_

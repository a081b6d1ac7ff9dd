#include "lm/tokenizer.h"

#include "core/text.h"

namespace vinci {
namespace lm {

using nlohmann::json;

std::vector<int32_t> encode_text(std::string_view text) {
  std::vector<int32_t> out;
  out.reserve(text.size());
  for (char c : text) out.push_back(static_cast<int32_t>(static_cast<unsigned char>(c)));
  return out;
}

std::string decode(const std::vector<int32_t>& tokens) {
  static const char* const kNames[] = {"<|system|>", "<|user|>", "<|assistant|>", "<|tool|>", "<|end|>"};
  std::string out;
  for (int32_t t : tokens) {
    if (t >= 0 && t < 256) {
      out.push_back(static_cast<char>(t));
    } else if (t >= 256 && t < kVocab) {
      out += kNames[t - 256];
    }
  }
  return out;
}

namespace {

void append(std::vector<int32_t>* out, std::string_view text) {
  for (char c : text) out->push_back(static_cast<int32_t>(static_cast<unsigned char>(c)));
}

}  // namespace

Result<std::vector<int32_t>> encode_prompt(const json& request) {
  if (!request.is_object())
    return invalid_argument("request: expected a JSON object, found " + std::string(request.type_name()));
  auto messages = request.find("messages");
  if (messages == request.end() || !messages->is_array()) {
    return invalid_argument("request.messages: expected a list of messages, found " +
                            std::string(messages == request.end() ? "nothing" : messages->type_name()));
  }
  std::vector<int32_t> out;
  for (size_t i = 0; i < messages->size(); ++i) {
    const json& m = (*messages)[i];
    const std::string at = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) return invalid_argument(at + ": expected an object, found " + m.type_name());
    auto role = m.find("role");
    if (role == m.end() || !role->is_string()) return invalid_argument(at + ".role: expected a string");
    const std::string r = role->get<std::string>();
    int32_t tag;
    if (r == "system" || r == "developer") {
      tag = kTokSystem;
    } else if (r == "user") {
      tag = kTokUser;
    } else if (r == "assistant") {
      tag = kTokAssistant;
    } else if (r == "tool") {
      tag = kTokTool;
    } else {
      return invalid_argument(at + ".role: expected system, developer, user, assistant or tool, found '" + r + "'");
    }
    out.push_back(tag);
    auto content = m.find("content");
    if (content != m.end() && content->is_string()) {
      append(&out, content->get_ref<const std::string&>());
    } else if (content != m.end() && content->is_array()) {
      for (const json& part : *content) {
        if (part.is_object() && part.contains("text") && part["text"].is_string()) {
          append(&out, part["text"].get_ref<const std::string&>());
        } else if (part.is_string()) {
          append(&out, part.get_ref<const std::string&>());
        }
      }
    } else if (content != m.end() && !content->is_null()) {
      return invalid_argument(at + ".content: expected a string, null or a list of parts, found " +
                              content->type_name());
    }
    auto calls = m.find("tool_calls");
    if (r == "assistant" && calls != m.end() && calls->is_array()) {
      for (const json& call : *calls) {
        if (!call.is_object() || !call.contains("function") || !call["function"].is_object()) continue;
        const json& f = call["function"];
        json name = f.contains("name") ? f["name"] : json("");
        // OpenAI sends arguments as a JSON string; written as the model would have written them.
        json args = f.contains("arguments") ? f["arguments"] : json::object();
        if (args.is_string()) {
          json parsed = json::parse(args.get<std::string>(), nullptr, /*allow_exceptions=*/false);
          if (!parsed.is_discarded()) args = parsed;
        }
        json rendered = {{"name", name}, {"arguments", args}};
        append(&out, "<tool_call>" + rendered.dump(-1, ' ', false, json::error_handler_t::replace) + "</tool_call>");
      }
    }
    out.push_back(kTokEnd);
  }
  out.push_back(kTokAssistant);
  return out;
}

std::vector<int32_t> encode_reply(std::string_view completion) {
  std::vector<int32_t> out = encode_text(completion);
  out.push_back(kTokEnd);
  return out;
}

std::string to_valid_utf8(std::string_view text) {
  std::string out;
  while (!text.empty()) {
    size_t bad = first_invalid_utf8(text);
    if (bad == std::string_view::npos) {
      out.append(text.data(), text.size());
      break;
    }
    out.append(text.data(), bad);
    out += "\xEF\xBF\xBD";
    text.remove_prefix(bad + 1);
  }
  return out;
}

}  // namespace lm
}  // namespace vinci

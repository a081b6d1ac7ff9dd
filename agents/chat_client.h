// A client of an OpenAI-compatible chat completions endpoint (vLLM, SGLang, hosted APIs).
//
// A call is three steps, each usable on its own:
//   1. chat_request_body() builds the request; body.dump() are its canonical bytes (nlohmann's
//      objects keep keys sorted), and chat_request_address() their content address.
//   2. ChatClient::complete() POSTs the bytes to {base_url}/chat/completions, retrying transient
//      failures with exponential backoff whose jitter comes from a keyed Stream, so the planned
//      waits of a call are a pure function of its key (backoff_schedule()).
//   3. parse_chat_reply() turns the reply body into content, reasoning, tool calls and usage.
//
// Retried: connection errors, timeouts, HTTP 408/425/429/500/502/503/504, and a 2xx body that does
// not parse (malformed, truncated, an error object, no choices). Not retried: any other status (400,
// 401, 404, ...), which fails at once with the server's message. Retry-After (seconds) on 429 and 503
// sets the wait. One deadline bounds the whole call, waits included: a wait that would pass it ends
// the call instead. A call that still fails is a not-ok ChatOutcome, never a crash; a Status error
// means the settings are unusable.
//
// The API key is sent only as "Authorization: Bearer KEY" and is removed from every text an outcome
// or a Status carries.
#ifndef VINCI_AGENTS_CHAT_CLIENT_H_
#define VINCI_AGENTS_CHAT_CLIENT_H_

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "agents/prompts.h"
#include "core/hash.h"
#include "core/rng.h"
#include "core/status.h"

namespace vinci {

struct ChatSettings {
  std::string base_url = "http://127.0.0.1:8000/v1";  // without the trailing /chat/completions
  std::string model;
  std::string api_key;        // resolved by the caller from an environment variable; never logged
  double timeout_s = 600;     // per attempt: a long generation can take minutes
  double deadline_s = 1800;   // per call, across all attempts and waits
  int retries = 4;            // attempts after the first
  double backoff_base_s = 1;  // the wait after the first failed attempt is about this
  double backoff_max_s = 30;  // and no wait is longer (Retry-After aside)
};

// Ok when the settings can be used: an http:// or https:// base_url, positive timeout and deadline,
// retries >= 0, 0 <= backoff_base_s <= backoff_max_s.
Status check_chat_settings(const ChatSettings& settings);

// Sampling fields of a request; only those that are set are sent.
struct ChatSampling {
  std::optional<double> temperature;
  std::optional<double> top_p;
  std::optional<int64_t> max_tokens;
  std::optional<int64_t> seed;
};

// {"model", "messages": [{"role", "content"}...], "tools" and "tool_choice": "auto" when tools is
// not empty, then the sampling fields that are set}. Each tool is an OpenAI function schema
// ({"type": "function", "function": {...}}, as select_skills_tool_schema() returns).
nlohmann::json chat_request_body(std::string_view model, const std::vector<ChatMessage>& messages,
                                 const std::vector<nlohmann::json>& tools = {}, const ChatSampling& sampling = {});

// hash_tagged("llm_request", bytes): the content address of a request's canonical bytes.
inline Digest chat_request_address(std::string_view body_bytes) { return hash_tagged("llm_request", body_bytes); }

// A function call the server returned in choices[0].message.tool_calls.
struct ChatToolCall {
  std::string id;
  std::string name;
  std::string arguments;  // raw, as sent: normally a JSON object written as a string
};

struct ChatReply {
  std::string id;
  std::string model;
  std::string content;    // the message content without a leading <think>...</think> block
  std::string reasoning;  // reasoning_content (or reasoning), then the <think> block, if any
  std::vector<ChatToolCall> tool_calls;
  std::string finish_reason;  // "stop", "length", "tool_calls", ...; empty when absent
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
};

// Parses a chat.completion body. Errors (kCorruption): not JSON, cut short, not an object, no
// choices, a choice without a message, a tool call without a function name; (kFailedPrecondition):
// an {"error": {...}} object, with its message.
//
// Reasoning: a leading "<think>...</think>" block of the content is moved to `reasoning`; so is
// everything before a "</think>" that has no opening tag (templates that open the block in the
// prompt), and all of an opened block that never closes (generation stopped while thinking).
Result<ChatReply> parse_chat_reply(std::string_view body);

// What a run records of a reply: its meaning, not its envelope. The body with only these fields,
// keys sorted: model; per choice index, finish_reason, stop_reason and message (role, content,
// reasoning_content, reasoning, refusal, and tool_calls with each call's type and function);
// usage's prompt_tokens, completion_tokens and total_tokens. What a server draws per response
// (id, created, system_fingerprint, tool-call ids, usage details such as cached tokens) is left
// out, so two runs against one deterministic server record the same bytes. Idempotent; parse_chat_reply
// reads it as it reads the body. Error: the body is not a JSON object.
Result<std::string> canonical_chat_reply(std::string_view body);

// The rest of the body: its top-level fields but model, choices and usage, usage's other fields,
// and the tool-call ids ("tool_call_ids"). Kept beside a run (RUN/llm_calls.jsonl), never in it.
nlohmann::json chat_reply_envelope(std::string_view body);

// The content followed by each tool call as "<tool_call>\n{"name": ..., "arguments": RAW}\n
// </tool_call>" (RAW as a JSON string), so agents/tool_calls.h's parsers read native tool calls too.
std::string chat_reply_text(const ChatReply& reply);

// One HTTP attempt of a call.
struct ChatAttempt {
  int http_status = 0;  // 0: no HTTP response (connection error or timeout)
  std::string error;    // empty when the attempt succeeded
  double wait_s = 0;    // the pause planned before this attempt (0 for the first)
};

struct ChatOutcome {
  bool ok = false;
  std::string body;  // the last reply body received, as received (key redacted)
  // What a run records of the reply, when ok: canonical_chat_reply(body) for a call the server
  // answered, the recorded bytes for one a log answered.
  std::string record;
  std::optional<ChatReply> reply;  // set when ok
  int http_status = 0;             // of the last attempt; 0 when it got no response
  std::string failure;             // why the call failed, e.g. "HTTP 500 after 3 attempts: ..."
  int attempts = 0;
  std::vector<ChatAttempt> attempt_log;
  // No attempt reached the server (connection refused, host not resolved): nothing answered the
  // call, so it says nothing of the model.
  bool unreachable = false;
  double latency_s = 0;  // wall clock of complete(), waits included; reported only, never recorded
};

// The planned wait after failed attempt `attempt` (1-based), without Retry-After:
// cap = min(backoff_max_s, backoff_base_s * 2^(attempt-1)), wait = cap * (0.5 + 0.5 * u) with u the
// first uniform() of Stream(jitter_key.with("attempt", attempt)).
double backoff_delay_s(const ChatSettings& settings, const RngKey& jitter_key, int attempt);
// The waits after failed attempts 1..count.
std::vector<double> backoff_schedule(const ChatSettings& settings, const RngKey& jitter_key, int count);

// Thread-safe: complete() may run on many threads at once. Finished transfers return their
// handles (and the connections they keep alive) to a pool that later calls reuse.
class ChatClient {
 public:
  explicit ChatClient(ChatSettings settings);
  ~ChatClient();
  ChatClient(const ChatClient&) = delete;
  ChatClient& operator=(const ChatClient&) = delete;

  const ChatSettings& settings() const { return settings_; }

  // POSTs `body` (canonical request bytes) and returns the outcome. The Status is an error only
  // when the settings are unusable (check_chat_settings).
  Result<ChatOutcome> complete(const std::string& body, const RngKey& jitter_key);

 private:
  void* acquire_handle();
  void release_handle(void* handle);

  ChatSettings settings_;
  std::mutex pool_mu_;
  std::vector<void*> idle_handles_;  // CURL easy handles, kept out of this header
};

// A model GET {base_url}/models lists.
struct ModelCard {
  std::string id;
  int64_t max_model_len = 0;  // the context length, where the server states it (vLLM, SGLang); else 0
};
// The models GET {base_url}/models lists; one attempt bounded by timeout_s. Errors name the URL
// and carry the server's message: IoError (no answer, or an HTTP error status; http_status, when
// given, gets it), Corruption (a body without a data list).
Result<std::vector<ModelCard>> list_model_cards(const ChatSettings& settings, int* http_status = nullptr);
// Their ids.
Result<std::vector<std::string>> list_models(const ChatSettings& settings);

// One POST of a JSON body to url, one attempt bounded by timeout_s (a trainer's update). Not an
// error: any HTTP answer (status and body; server_message, the error body's message). IoError: no
// answer (the message names the URL and curl's reason; `unreachable` when nothing listened).
struct HttpPostReply {
  int status = 0;
  std::string body;
  std::string server_message;  // the error body's message (OpenAI style), or an excerpt of the body
};
Result<HttpPostReply> http_post_json(const std::string& url, const std::string& body, const std::string& api_key,
                                     double timeout_s, bool* unreachable = nullptr);

}  // namespace vinci

#endif  // VINCI_AGENTS_CHAT_CLIENT_H_

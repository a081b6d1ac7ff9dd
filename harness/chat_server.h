// An OpenAI-compatible chat completions server over a handler function, with fault injection.
//
// The server speaks the subset of the API vinci's ChatClient uses:
//   POST /v1/chat/completions  the handler's ChatAnswer wrapped into a chat.completion object
//   GET  /v1/models            {"object": "list", "data": [{"id": model, ...}]}
//   POST <path>                any extra routes the options name, each a handler of JSON bodies
// With an api_key set, a request whose "Authorization: Bearer KEY" does not match gets 401 and an
// OpenAI-style error body that does not repeat what was sent.
//
// Replies are pure functions of the request bytes and the answer: the id is "chatcmpl-" followed by
// the hex of hash_tagged("llm_request", body), created is 0, and token counts are estimated as
// bytes / 4 (rounded up), so a recorded reply reproduces byte for byte.
//
// Faults make a server misbehave on purpose, for tests of clients: a queue applied to the next chat
// requests in arrival order (a request that fails the key check does not take one, nor does a
// client's preflight, a request with max_tokens 1). A fault list has
// a text form for command lines, e.g. "500,429:1,malformed,truncated,no_tool_call,hang:5".
#ifndef VINCI_HARNESS_CHAT_SERVER_H_
#define VINCI_HARNESS_CHAT_SERVER_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace vinci {

struct ChatAnswerToolCall {
  std::string name;
  nlohmann::json arguments = nlohmann::json::object();  // sent as a JSON string, as OpenAI does
};

struct ChatAnswer {
  std::string content;
  std::string reasoning;  // sent as message.reasoning_content when not empty
  std::vector<ChatAnswerToolCall> tool_calls;
  std::string finish_reason;  // empty: "tool_calls" when there are tool calls, else "stop"
  // The usage a model counted; -1: estimated as bytes / 4.
  int64_t prompt_tokens = -1;
  int64_t completion_tokens = -1;
};

// Called for each chat request that gets an answer, from the server's worker threads, concurrently:
// it must be thread-safe. An error Status becomes HTTP 400 (kInvalidArgument) or 500 (any other),
// with its message in an OpenAI-style error body; so does an exception (500, logged). The request
// it gets is a JSON object within the server's limits whose "messages" is a list of objects, each
// with a string "role" and a string, null or list "content". NotFound (an unknown model) becomes
// HTTP 404.
using ChatHandler = std::function<Result<ChatAnswer>(const nlohmann::json& request)>;

// What an extra route answers: an HTTP status and a JSON body.
struct ChatRouteReply {
  int status = 200;
  nlohmann::json body;
};
// An extra POST route's handler, called with the body parsed (a JSON object within the server's
// limits) from the server's worker threads, concurrently: it must be thread-safe. An exception
// becomes a 500 (logged).
using ChatRoute = std::function<ChatRouteReply(const nlohmann::json& body)>;
// The OpenAI-style error reply for a failed Status: 400 invalid_request_error (InvalidArgument),
// 404 not_found (NotFound), 500 server_error (any other).
ChatRouteReply chat_route_error(const Status& status);

enum class ChatFaultKind {
  kHttp500,            // 500 with an error body
  kHttp429,            // 429 with Retry-After: seconds
  kHttp503RetryAfter,  // 503 with Retry-After: seconds
  kHttp400,            // 400 with an error body
  kMalformed,          // 200 with a body that is not JSON
  kTruncated,          // 200 with the first half of the real reply
  kNoToolCall,         // 200 with prose and no tool call, whatever was offered
  kHang,               // answers only after `seconds`, or 503 at once when the server stops
};

struct ChatFault {
  ChatFaultKind kind = ChatFaultKind::kHttp500;
  double seconds = 0;  // Retry-After for 429/503 (whole seconds), the delay for hang
};

// "500", "429:1", "503:2", "400", "malformed", "truncated", "no_tool_call", "hang:5".
std::string chat_fault_name(const ChatFault& fault);

// Parses a comma-separated fault list. Items: 500 | 429[:S] | 503[:S] | 400 | malformed | truncated
// | no_tool_call | hang[:S], where 429 and 503 take whole seconds 0..3600 (default 1) and hang takes
// seconds in (0, 3600] (default 60); "http500", "http429", "http503_retry_after" and "http400" are
// accepted too. Spaces around items are ignored; "" is the empty list.
Result<std::vector<ChatFault>> parse_chat_faults(std::string_view text);
// The text form parse_chat_faults reads back.
std::string chat_faults_text(const std::vector<ChatFault>& faults);

// The chat.completion object for an answer to a request (`body` is the request's bytes, `request`
// their parse). The model is the request's "model", else `default_model`.
nlohmann::json chat_completion_json(std::string_view body, const nlohmann::json& request, const ChatAnswer& answer,
                                    std::string_view default_model);

// What the server reads of a request, and how long it waits for it (docs/input_limits.md). A
// request past a limit gets a 4xx with an OpenAI-style JSON error body, and the server logs a line:
//   413  body over max_request_bytes (known from its Content-Length, or as a chunked body
//        crosses it); the body is read and discarded up to the request's read budget (twice
//        max_request_bytes and 1 MiB) before the answer, and not kept
//   400  not HTTP, not a JSON object, nesting deeper than max_json_depth, or messages of the
//        wrong shape (each an object with a string "role" and a string, null or list "content")
//   408  a request not received in full within request_read_seconds of its first byte
//   404  any other path
// A connection that sends nothing for first_request_seconds is closed, with a log line.
struct ChatServerLimits {
  // The largest chat request vinci sends is a prompt of a few hundred KiB (a trajectory with its
  // kernels); 16 MiB leaves room for long contexts and refuses what would fill memory.
  size_t max_request_bytes = 16u << 20;
  // Brackets a request may nest: OpenAI messages nest 5 deep (body, messages, message, content
  // parts, a part); tool arguments a few more.
  int max_json_depth = 64;
  // From a connection's accept to its first request's first byte. A loaded client (hundreds of
  // concurrent calls) may connect long before it sends.
  int first_request_seconds = 30;
  // From a request's first byte to its last: bounds a client that trickles its bytes.
  int request_read_seconds = 30;
  // Between requests of a keep-alive connection: an idle connection holds a worker thread.
  int keep_alive_seconds = 2;
};

struct ChatServerOptions {
  std::string model = "vinci-echo";  // listed by /v1/models; replies name the request's model
  std::string api_key;               // empty: no key check
  // Worker threads. Each open connection holds one while it lasts (an idle keep-alive connection up
  // to keep_alive_seconds), and so does each hang: give at least as many as the calls clients keep
  // in flight.
  int threads = 64;
  std::vector<ChatFault> faults;
  ChatServerLimits limits;
  // Extra POST routes beside the chat endpoint, by path ("/v1/vinci/update"); authorized and
  // limited as chat requests are.
  std::map<std::string, ChatRoute> routes;
  // When set, GET /v1/models lists what it returns (a list of objects, each with at least "id";
  // "object", "created" and "owned_by" are added when missing) instead of `model` alone.
  std::function<nlohmann::json()> models;
  // Where a refused request, a handler's failure or a dropped connection is logged, one line each
  // (never the request's body or its Authorization header); empty: stderr.
  std::function<void(const std::string& line)> log;
};

class ChatServer {
 public:
  explicit ChatServer(ChatHandler handler, ChatServerOptions options = {});
  ~ChatServer();  // stops the server
  ChatServer(const ChatServer&) = delete;
  ChatServer& operator=(const ChatServer&) = delete;

  // Binds host:port (port 0 picks a free one) and serves on background threads; returns once the
  // server accepts connections. Fails when it is already running or the address cannot be bound.
  Status start(const std::string& host = "127.0.0.1", int port = 0);
  // Stops accepting, wakes hanging requests and waits for the workers. Idempotent.
  void stop();

  int port() const { return port_; }  // 0 before start
  // "http://HOST:PORT/v1", what ChatSettings::base_url takes.
  std::string base_url() const;

  // Appends to, or replaces, the queue of faults for the next chat requests.
  void add_faults(const std::vector<ChatFault>& faults);
  void set_faults(std::vector<ChatFault> faults);

  int64_t requests() const { return requests_.load(); }  // every request to either endpoint
  int64_t faults_injected() const { return faults_injected_.load(); }
  size_t faults_pending() const;

 private:
  struct Impl;  // the cpp-httplib server, kept out of this header

  struct Reply {
    int status = 200;
    std::string body;
    std::string retry_after;  // a header value, when not empty
  };
  // Counts a POST, checks its key and reads its body as a JSON object (a chat request's messages
  // too, when chat): nullopt and *request set, or the refusal to send.
  std::optional<Reply> admit(const std::string& body, const std::string& authorization, bool chat,
                             nlohmann::json* request);
  Reply handle_chat(const std::string& body, const std::string& authorization);
  Reply handle_models(const std::string& authorization);
  Reply handle_route(const ChatRoute& route, const std::string& body, const std::string& authorization);
  Reply answer(const std::string& body, const nlohmann::json& request, const ChatFault* fault);
  bool authorized(const std::string& authorization) const;
  void log(const std::string& line) const;
  bool take_fault(ChatFault* fault);
  // Sleeps up to `seconds`; false when the server stopped meanwhile.
  bool hang(double seconds);

  ChatHandler handler_;
  ChatServerOptions options_;
  std::unique_ptr<Impl> impl_;
  std::thread listener_;
  std::string host_;
  int port_ = 0;

  mutable std::mutex mu_;  // guards faults_ and stopping_
  std::deque<ChatFault> faults_;
  bool stopping_ = false;
  std::condition_variable stop_cv_;

  std::atomic<int64_t> requests_{0};
  std::atomic<int64_t> faults_injected_{0};
};

}  // namespace vinci

#endif  // VINCI_HARNESS_CHAT_SERVER_H_

#include "harness/chat_server.h"

#include <httplib.h>
#include <sys/socket.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "core/hash.h"

namespace vinci {

using nlohmann::json;

// ----- faults ----------------------------------------------------------------------------------

std::string chat_fault_name(const ChatFault& fault) {
  auto secs = [&](const char* name) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%s:%g", name, fault.seconds);
    return std::string(buf);
  };
  switch (fault.kind) {
    case ChatFaultKind::kHttp500: return "500";
    case ChatFaultKind::kHttp429: return secs("429");
    case ChatFaultKind::kHttp503RetryAfter: return secs("503");
    case ChatFaultKind::kHttp400: return "400";
    case ChatFaultKind::kMalformed: return "malformed";
    case ChatFaultKind::kTruncated: return "truncated";
    case ChatFaultKind::kNoToolCall: return "no_tool_call";
    case ChatFaultKind::kHang: return secs("hang");
  }
  return "unknown";
}

std::string chat_faults_text(const std::vector<ChatFault>& faults) {
  std::string out;
  for (const auto& f : faults) out += (out.empty() ? "" : ",") + chat_fault_name(f);
  return out;
}

namespace {

constexpr const char* kFaultGrammar =
    "expected 500, 429[:SECONDS], 503[:SECONDS], 400, malformed, truncated, no_tool_call or "
    "hang[:SECONDS]";

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// One item of a fault list; `where` names it in errors ("fault 2 (\"429:x\")").
Result<ChatFault> parse_fault(std::string_view item, const std::string& where) {
  size_t colon = item.find(':');
  std::string name(item.substr(0, colon));
  bool has_arg = colon != std::string_view::npos;
  std::string arg = has_arg ? std::string(item.substr(colon + 1)) : std::string();
  ChatFault f;
  bool takes_seconds = true;
  if (name == "500" || name == "http500") {
    f.kind = ChatFaultKind::kHttp500, takes_seconds = false;
  } else if (name == "400" || name == "http400") {
    f.kind = ChatFaultKind::kHttp400, takes_seconds = false;
  } else if (name == "429" || name == "http429") {
    f.kind = ChatFaultKind::kHttp429, f.seconds = 1;
  } else if (name == "503" || name == "http503" || name == "http503_retry_after") {
    f.kind = ChatFaultKind::kHttp503RetryAfter, f.seconds = 1;
  } else if (name == "malformed" || name == "truncated" || name == "no_tool_call") {
    f.kind = name == "malformed"   ? ChatFaultKind::kMalformed
             : name == "truncated" ? ChatFaultKind::kTruncated
                                   : ChatFaultKind::kNoToolCall;
    takes_seconds = false;
  } else if (name == "hang") {
    f.kind = ChatFaultKind::kHang, f.seconds = 60;
  } else {
    return invalid_argument(where + ": unknown fault; " + kFaultGrammar);
  }
  if (!has_arg) return f;
  if (!takes_seconds) return invalid_argument(where + ": " + name + " takes no seconds");
  char* end = nullptr;
  double v = std::strtod(arg.c_str(), &end);
  bool number = !arg.empty() && end == arg.c_str() + arg.size() && std::isfinite(v);
  if (f.kind == ChatFaultKind::kHang) {
    if (!number || v <= 0 || v > 3600) {
      return invalid_argument(where + ": hang takes seconds in (0, 3600], got \"" + arg + "\"");
    }
  } else if (!number || v < 0 || v > 3600 || v != std::floor(v)) {
    return invalid_argument(where + ": Retry-After takes whole seconds 0..3600, got \"" + arg + "\"");
  }
  f.seconds = v;
  return f;
}

}  // namespace

Result<std::vector<ChatFault>> parse_chat_faults(std::string_view text) {
  std::vector<ChatFault> out;
  if (trim(text).empty()) return out;
  size_t begin = 0;
  for (int index = 1;; ++index) {
    size_t comma = text.find(',', begin);
    std::string_view item = trim(text.substr(begin, comma == std::string_view::npos ? text.npos : comma - begin));
    std::string where = "fault " + std::to_string(index) + " (\"" + std::string(item) + "\")";
    if (item.empty()) return invalid_argument(where + ": empty item in fault list");
    VINCI_ASSIGN_OR_RETURN(ChatFault f, parse_fault(item, where));
    out.push_back(f);
    if (comma == std::string_view::npos) break;
    begin = comma + 1;
  }
  return out;
}

// ----- replies ---------------------------------------------------------------------------------

namespace {

int64_t estimate_tokens(size_t bytes) { return static_cast<int64_t>((bytes + 3) / 4); }

std::string error_body(const std::string& message, const char* type, int code) {
  json e = {{"error", {{"message", message}, {"type", type}, {"param", nullptr}, {"code", code}}}};
  return e.dump();
}

}  // namespace

json chat_completion_json(std::string_view body, const json& request, const ChatAnswer& answer,
                          std::string_view default_model) {
  const std::string hex = hash_tagged("llm_request", body).hex();
  json message = {{"role", "assistant"}};
  size_t completion_bytes = answer.content.size() + answer.reasoning.size();
  message["content"] = answer.content.empty() && !answer.tool_calls.empty() ? json(nullptr) : json(answer.content);
  if (!answer.reasoning.empty()) message["reasoning_content"] = answer.reasoning;
  if (!answer.tool_calls.empty()) {
    json calls = json::array();
    for (size_t i = 0; i < answer.tool_calls.size(); ++i) {
      const auto& c = answer.tool_calls[i];
      std::string args = c.arguments.dump();
      completion_bytes += c.name.size() + args.size();
      calls.push_back({{"id", "call_" + hex.substr(0, 16) + "_" + std::to_string(i)},
                       {"type", "function"},
                       {"function", {{"name", c.name}, {"arguments", args}}}});
    }
    message["tool_calls"] = std::move(calls);
  }
  std::string finish = answer.finish_reason;
  if (finish.empty()) finish = answer.tool_calls.empty() ? "stop" : "tool_calls";
  std::string model(default_model);
  if (request.is_object() && request.contains("model") && request["model"].is_string()) {
    model = request["model"].get<std::string>();
  }
  int64_t prompt = estimate_tokens(body.size()), completion = estimate_tokens(completion_bytes);
  return {
      {"id", "chatcmpl-" + hex},
      {"object", "chat.completion"},
      {"created", 0},
      {"model", model},
      {"choices",
       json::array(
           {{{"index", 0}, {"message", std::move(message)}, {"logprobs", nullptr}, {"finish_reason", finish}}})},
      {"usage", {{"prompt_tokens", prompt}, {"completion_tokens", completion}, {"total_tokens", prompt + completion}}}};
}

// ----- the server ------------------------------------------------------------------------------

// cpp-httplib 0.11 listens with a backlog of 5: a burst of concurrent connects overflows it and
// the dropped SYNs are retried a second later. listen() again on the bound socket raises it.
class BackloggedServer : public httplib::Server {
 public:
  void raise_backlog() { ::listen(svr_sock_, SOMAXCONN); }
};

struct ChatServer::Impl {
  BackloggedServer server;
  std::atomic<bool> listen_returned{false};
};

ChatServer::ChatServer(ChatHandler handler, ChatServerOptions options)
    : handler_(std::move(handler)), options_(std::move(options)) {
  faults_.assign(options_.faults.begin(), options_.faults.end());
}

ChatServer::~ChatServer() { stop(); }

std::string ChatServer::base_url() const { return "http://" + host_ + ":" + std::to_string(port_) + "/v1"; }

void ChatServer::add_faults(const std::vector<ChatFault>& faults) {
  std::lock_guard<std::mutex> lock(mu_);
  faults_.insert(faults_.end(), faults.begin(), faults.end());
}

void ChatServer::set_faults(std::vector<ChatFault> faults) {
  std::lock_guard<std::mutex> lock(mu_);
  faults_.assign(faults.begin(), faults.end());
}

size_t ChatServer::faults_pending() const {
  std::lock_guard<std::mutex> lock(mu_);
  return faults_.size();
}

bool ChatServer::take_fault(ChatFault* fault) {
  std::lock_guard<std::mutex> lock(mu_);
  if (faults_.empty()) return false;
  *fault = faults_.front();
  faults_.pop_front();
  return true;
}

bool ChatServer::hang(double seconds) {
  std::unique_lock<std::mutex> lock(mu_);
  auto span = std::chrono::milliseconds(static_cast<int64_t>(std::ceil(seconds * 1000)));
  return !stop_cv_.wait_for(lock, span, [this] { return stopping_; });
}

bool ChatServer::authorized(const std::string& authorization) const {
  return options_.api_key.empty() || authorization == "Bearer " + options_.api_key;
}

Status ChatServer::start(const std::string& host, int port) {
  if (listener_.joinable()) {
    return failed_precondition("chat server already running on port " + std::to_string(port_));
  }
  impl_ = std::make_unique<Impl>();
  BackloggedServer& svr = impl_->server;
  const size_t threads = static_cast<size_t>(std::max(1, options_.threads));
  svr.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  // An idle keep-alive connection holds a worker, and stop() waits for it: keep the wait short.
  svr.set_keep_alive_timeout(2);
  svr.set_keep_alive_max_count(100000);
  // Headers and body go out in separate writes; without this, Nagle's algorithm and the client's
  // delayed ACK hold the body back 40 ms.
  svr.set_tcp_nodelay(true);
  auto send = [](httplib::Response& res, const Reply& r) {
    res.status = r.status;
    if (!r.retry_after.empty()) res.set_header("Retry-After", r.retry_after);
    res.set_content(r.body, "application/json");
  };
  svr.Post("/v1/chat/completions", [this, send](const httplib::Request& req, httplib::Response& res) {
    send(res, handle_chat(req.body, req.get_header_value("Authorization")));
  });
  svr.Get("/v1/models", [this, send](const httplib::Request& req, httplib::Response& res) {
    send(res, handle_models(req.get_header_value("Authorization")));
  });
  int bound = port == 0 ? svr.bind_to_any_port(host) : (svr.bind_to_port(host, port) ? port : -1);
  if (bound <= 0) {
    impl_.reset();
    return io_error("chat server cannot bind " + host + ":" + std::to_string(port));
  }
  svr.raise_backlog();
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = false;
  }
  host_ = host;
  port_ = bound;
  Impl* impl = impl_.get();
  listener_ = std::thread([impl] {
    impl->server.listen_after_bind();
    impl->listen_returned = true;
  });
  // stop() only reaches a server that has begun listening.
  while (!svr.is_running() && !impl->listen_returned) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (impl->listen_returned) {
    listener_.join();
    impl_.reset();
    return io_error("chat server on " + host + ":" + std::to_string(bound) + " stopped at once");
  }
  return Status::ok_status();
}

void ChatServer::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  stop_cv_.notify_all();
  if (impl_) impl_->server.stop();
  if (listener_.joinable()) listener_.join();
  impl_.reset();
}

ChatServer::Reply ChatServer::handle_models(const std::string& authorization) {
  ++requests_;
  if (!authorized(authorization)) {
    return {401, error_body("Incorrect API key provided.", "invalid_request_error", 401), ""};
  }
  json list = {
      {"object", "list"},
      {"data", json::array({{{"id", options_.model}, {"object", "model"}, {"created", 0}, {"owned_by", "vinci"}}})}};
  return {200, list.dump(), ""};
}

ChatServer::Reply ChatServer::handle_chat(const std::string& body, const std::string& authorization) {
  ++requests_;
  if (!authorized(authorization)) {
    return {401, error_body("Incorrect API key provided.", "invalid_request_error", 401), ""};
  }
  json request = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!request.is_object()) {
    return {400, error_body("request body is not a JSON object", "invalid_request_error", 400), ""};
  }
  if (!request.contains("messages") || !request["messages"].is_array()) {
    return {400, error_body("request has no messages list", "invalid_request_error", 400), ""};
  }
  ChatFault fault;
  if (!take_fault(&fault)) return answer(body, request, nullptr);
  ++faults_injected_;
  const std::string injected = "injected fault " + chat_fault_name(fault);
  const std::string retry_after = std::to_string(static_cast<int64_t>(fault.seconds));
  switch (fault.kind) {
    case ChatFaultKind::kHttp500:
      return {500, error_body(injected + ": internal server error", "server_error", 500), ""};
    case ChatFaultKind::kHttp429:
      return {429, error_body(injected + ": rate limited", "rate_limit_error", 429), retry_after};
    case ChatFaultKind::kHttp503RetryAfter:
      return {503, error_body(injected + ": overloaded", "server_error", 503), retry_after};
    case ChatFaultKind::kHttp400:
      return {400, error_body(injected + ": bad request", "invalid_request_error", 400), ""};
    case ChatFaultKind::kMalformed: return {200, "<html><body>upstream hiccup</body></html>", ""};
    case ChatFaultKind::kHang:
      if (!hang(fault.seconds)) {
        return {503, error_body("server is stopping", "server_error", 503), ""};
      }
      return answer(body, request, nullptr);
    case ChatFaultKind::kTruncated:
    case ChatFaultKind::kNoToolCall: return answer(body, request, &fault);
  }
  return answer(body, request, nullptr);
}

ChatServer::Reply ChatServer::answer(const std::string& body, const json& request, const ChatFault* fault) {
  Result<ChatAnswer> a = ChatAnswer{"I would rather describe the kernel in prose.", "", {}, "stop"};
  if (fault == nullptr || fault->kind != ChatFaultKind::kNoToolCall) a = handler_(request);
  if (!a.ok()) {
    bool bad_request = a.status().code() == StatusCode::kInvalidArgument;
    return {bad_request ? 400 : 500,
            error_body(a.status().message(), bad_request ? "invalid_request_error" : "server_error",
                       bad_request ? 400 : 500),
            ""};
  }
  std::string out = chat_completion_json(body, request, *a, options_.model).dump();
  if (fault != nullptr && fault->kind == ChatFaultKind::kTruncated) out.resize(out.size() / 2);
  return {200, std::move(out), ""};
}

}  // namespace vinci

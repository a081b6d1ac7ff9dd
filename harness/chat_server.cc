#include "harness/chat_server.h"

#include <arpa/inet.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>

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

// The HTTP status and error type of a failed Status.
int status_http(const Status& st) {
  switch (st.code()) {
    case StatusCode::kInvalidArgument: return 400;
    case StatusCode::kNotFound: return 404;
    default: return 500;
  }
}
const char* status_type(int http) {
  return http == 400 ? "invalid_request_error" : http == 404 ? "not_found" : "server_error";
}

// Why a body nests too deep to parse, or "". Counted on the bytes before parsing, since a parse
// (and every later walk of the value) recurses once per level.
std::string request_shape_error(std::string_view body, int max_depth) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (char c : body) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) {
        return "request body nests deeper than " + std::to_string(max_depth) + " levels of brackets";
      }
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return "";
}

const char* json_type_name(const json& j) { return j.type_name(); }

// Why a request's messages are not the shape handlers rely on, or "".
std::string messages_shape_error(const json& request) {
  auto it = request.find("messages");
  if (it == request.end() || !it->is_array()) return "request has no messages list";
  for (size_t i = 0; i < it->size(); ++i) {
    const json& m = (*it)[i];
    std::string at = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) return at + ": expected an object, found " + json_type_name(m);
    auto role = m.find("role");
    if (role == m.end() || !role->is_string()) {
      return at + ".role: expected a string, found " + (role == m.end() ? "nothing" : json_type_name(*role));
    }
    auto content = m.find("content");
    if (content != m.end() && !content->is_string() && !content->is_null() && !content->is_array()) {
      return at + ".content: expected a string, null or a list of parts, found " + json_type_name(*content);
    }
  }
  return "";
}

}  // namespace

ChatRouteReply chat_route_error(const Status& status) {
  const int http = status_http(status);
  return {http, json::parse(error_body(status.message(), status_type(http), http))};
}

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
  int64_t prompt = answer.prompt_tokens >= 0 ? answer.prompt_tokens : estimate_tokens(body.size());
  int64_t completion = answer.completion_tokens >= 0 ? answer.completion_tokens : estimate_tokens(completion_bytes);
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

namespace {

using Clock = std::chrono::steady_clock;

void ip_and_port(int sock, bool peer, std::string& ip, int& port) {
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  int rc = peer ? ::getpeername(sock, reinterpret_cast<sockaddr*>(&addr), &len)
                : ::getsockname(sock, reinterpret_cast<sockaddr*>(&addr), &len);
  if (rc != 0) return;
  char host[INET6_ADDRSTRLEN] = "";
  if (addr.ss_family == AF_INET) {
    auto* a = reinterpret_cast<sockaddr_in*>(&addr);
    ::inet_ntop(AF_INET, &a->sin_addr, host, sizeof host);
    port = ntohs(a->sin_port);
  } else if (addr.ss_family == AF_INET6) {
    auto* a = reinterpret_cast<sockaddr_in6*>(&addr);
    ::inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof host);
    port = ntohs(a->sin6_port);
  }
  ip = host;
}

// "127.0.0.1:50312", for log lines.
std::string peer_of(int sock) {
  std::string ip = "?";
  int port = 0;
  ip_and_port(sock, true, ip, port);
  return ip + ":" + std::to_string(port);
}

// One connection's byte stream, buffered (httplib reads request lines a byte at a time). Every
// read of a request ends by its deadline, whatever pace the client sends at, and stops at its
// budget of bytes (httplib 0.11 bounds a body by its Content-Length, but reads a chunked body
// whole); writes wait at most write_timeout for the socket.
class DeadlineStream : public httplib::Stream {
 public:
  DeadlineStream(int sock, std::chrono::seconds write_timeout) : sock_(sock), write_timeout_(write_timeout) {}

  void start_request(Clock::time_point deadline, size_t budget) {
    deadline_ = deadline;
    read_failed_ = false;
    budget_ = budget;
    read_ = 0;
    over_budget_ = false;
    written_ = 0;
  }
  // A read of this request failed and its deadline has passed.
  bool deadline_hit() const { return read_failed_ && Clock::now() >= deadline_; }
  bool over_budget() const { return over_budget_; }
  size_t written() const { return written_; }
  bool buffered() const { return pos_ < len_; }

  bool is_readable() const override {
    if (buffered() || wait_for(POLLIN, deadline_)) return true;
    read_failed_ = true;
    return false;
  }
  bool is_writable() const override { return wait_for(POLLOUT, Clock::now() + write_timeout_); }

  ssize_t read(char* ptr, size_t size) override {
    if (read_ >= budget_) {
      over_budget_ = true;
      return -1;
    }
    if (!buffered()) {
      if (!wait_for(POLLIN, deadline_)) {
        read_failed_ = true;
        return -1;
      }
      ssize_t n;
      do {
        n = ::recv(sock_, buf_, sizeof buf_, 0);
      } while (n < 0 && errno == EINTR);
      if (n <= 0) return n;
      pos_ = 0;
      len_ = static_cast<size_t>(n);
    }
    size_t n = std::min({size, len_ - pos_, budget_ - read_});
    std::memcpy(ptr, buf_ + pos_, n);
    pos_ += n;
    read_ += n;
    return static_cast<ssize_t>(n);
  }

  ssize_t write(const char* ptr, size_t size) override {
    if (!is_writable()) return -1;
    ssize_t n;
    do {
      n = ::send(sock_, ptr, size, MSG_NOSIGNAL);
    } while (n < 0 && errno == EINTR);
    if (n > 0) written_ += static_cast<size_t>(n);
    return n;
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override { ip_and_port(sock_, true, ip, port); }
  void get_local_ip_and_port(std::string& ip, int& port) const override { ip_and_port(sock_, false, ip, port); }
  int socket() const override { return sock_; }

 private:
  // Waits until the socket is ready for `events` or `until` passes. The wait is rounded up to whole
  // milliseconds, so a false return means `until` has passed (deadline_hit() holds): rounded down,
  // the last fraction of a millisecond ended the wait early and the 408 was never sent.
  bool wait_for(short events, Clock::time_point until) const {
    for (;;) {
      auto left = std::chrono::ceil<std::chrono::milliseconds>(until - Clock::now()).count();
      if (left <= 0) return false;
      pollfd p{sock_, events, 0};
      int rc = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left, 1000)));
      if (rc > 0) return true;
      if (rc < 0 && errno != EINTR) return false;
    }
  }

  int sock_;
  std::chrono::seconds write_timeout_;
  Clock::time_point deadline_ = Clock::now();
  mutable bool read_failed_ = false;
  size_t budget_ = 0, read_ = 0;
  bool over_budget_ = false;
  size_t written_ = 0;
  char buf_[16384];
  size_t pos_ = 0, len_ = 0;
};

// The stream of the connection this worker thread serves: the error handler reads from it why a
// request failed (its deadline passed).
thread_local const DeadlineStream* t_stream = nullptr;

}  // namespace

// cpp-httplib 0.11 with the connection handling vinci needs: a longer wait for a connection's first
// request than between keep-alive requests (httplib applies its keep-alive timeout to both, so a
// client that sends 2 s after connecting was closed without a reply), a deadline on reading each
// request, and a log line for every connection closed without an answer.
class ChatHttpServer : public httplib::Server {
 public:
  ChatHttpServer(ChatServerLimits limits, std::function<void(const std::string&)> log)
      : limits_(limits), log_(std::move(log)) {}

  // cpp-httplib 0.11 listens with a backlog of 5: a burst of concurrent connects overflows it and
  // the dropped SYNs are retried a second later. listen() again on the bound socket raises it.
  void raise_backlog() { ::listen(svr_sock_, SOMAXCONN); }

 private:
  enum class Wait { kReady, kTimedOut, kStopping };

  // Polls in short slices so that stop() is seen within 100 ms.
  Wait wait_for_request(const DeadlineStream& strm, Clock::time_point until) const {
    if (strm.buffered()) return Wait::kReady;
    for (;;) {
      if (svr_sock_ == INVALID_SOCKET) return Wait::kStopping;
      auto left = std::chrono::ceil<std::chrono::milliseconds>(until - Clock::now()).count();
      if (left <= 0) return Wait::kTimedOut;
      pollfd p{strm.socket(), POLLIN, 0};
      int rc = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left, 100)));
      if (rc > 0) return Wait::kReady;
      if (rc < 0 && errno != EINTR) return Wait::kStopping;
    }
  }

  bool process_and_close_socket(socket_t sock) override {
    DeadlineStream strm(sock, std::chrono::seconds(std::max(1, limits_.request_read_seconds)));
    t_stream = &strm;
    bool ret = false;
    for (int served = 0;; ++served) {
      int wait_s = served == 0 ? limits_.first_request_seconds : limits_.keep_alive_seconds;
      Wait w = wait_for_request(strm, Clock::now() + std::chrono::seconds(wait_s));
      if (w != Wait::kReady) {
        if (served == 0 && w == Wait::kTimedOut) {
          log_("chat server: closed the connection from " + peer_of(sock) + ": no request within " +
               std::to_string(wait_s) + " s of connecting");
        }
        break;
      }
      // Twice the body's limit and room for the headers: a chunked body's framing (its chunk
      // sizes) counts too. A chunked body under this budget but over the limit is refused after.
      strm.start_request(Clock::now() + std::chrono::seconds(limits_.request_read_seconds),
                         2 * limits_.max_request_bytes + (1u << 20));
      bool closed = false;
      ret = process_request(strm, /*close_connection=*/false, closed, nullptr);
      if (strm.written() == 0 && strm.deadline_hit()) {
        // httplib drops a connection whose request line did not arrive in full; answer it.
        std::string body = error_body(
            "the request was not received in full within " + std::to_string(limits_.request_read_seconds) + " s",
            "invalid_request_error", 408);
        std::string reply = "HTTP/1.1 408 Request Timeout\r\nContent-Type: application/json\r\nContent-Length: " +
                            std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
        strm.write(reply.data(), reply.size());
        log_("chat server: 408 from " + peer_of(sock) + ": the request was not received in full within " +
             std::to_string(limits_.request_read_seconds) + " s");
        break;
      }
      // After a request not read in full, where the next one would start is unknown.
      if (!ret || closed || strm.deadline_hit() || strm.over_budget()) break;
    }
    t_stream = nullptr;
    ::shutdown(sock, SHUT_RDWR);
    ::close(sock);
    return ret;
  }

  ChatServerLimits limits_;
  std::function<void(const std::string&)> log_;
};

struct ChatServer::Impl {
  Impl(ChatServerLimits limits, std::function<void(const std::string&)> log) : server(limits, std::move(log)) {}
  ChatHttpServer server;
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

void ChatServer::log(const std::string& line) const {
  if (options_.log) {
    options_.log(line);
  } else {
    std::fprintf(stderr, "%s\n", line.c_str());
  }
}

bool ChatServer::authorized(const std::string& authorization) const {
  return options_.api_key.empty() || authorization == "Bearer " + options_.api_key;
}

Status ChatServer::start(const std::string& host, int port) {
  if (listener_.joinable()) {
    return failed_precondition("chat server already running on port " + std::to_string(port_));
  }
  impl_ = std::make_unique<Impl>(options_.limits, [this](const std::string& line) { log(line); });
  ChatHttpServer& svr = impl_->server;
  const size_t threads = static_cast<size_t>(std::max(1, options_.threads));
  svr.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  svr.set_payload_max_length(options_.limits.max_request_bytes);
  svr.set_write_timeout(std::max(1, options_.limits.request_read_seconds));
  const ChatServerLimits limits = options_.limits;
  std::string endpoints = "POST /v1/chat/completions, GET /v1/models";
  for (const auto& [path, route] : options_.routes) endpoints += ", POST " + path;
  // httplib's own refusals (413, a request that is not HTTP, an unknown path) come with an empty
  // body: give them an OpenAI-style one.
  svr.set_error_handler(
      httplib::Server::HandlerWithResponse([limits, endpoints](const httplib::Request&, httplib::Response& res) {
        if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
        std::string message;
        if (res.status == 413 || (t_stream != nullptr && t_stream->over_budget())) {
          res.status = 413;
          message = "the request body is over the limit of " + std::to_string(limits.max_request_bytes) + " bytes";
        } else if (res.status == 404) {
          message = "no such endpoint (" + endpoints + ")";
        } else if (res.status == 400 && t_stream != nullptr && t_stream->deadline_hit()) {
          res.status = 408;
          message = "the request was not received in full within " + std::to_string(limits.request_read_seconds) + " s";
        } else if (res.status == 400) {
          message = "the request is not valid HTTP";
        } else {
          message = "the request failed with HTTP " + std::to_string(res.status);
        }
        res.set_content(error_body(message, res.status >= 500 ? "server_error" : "invalid_request_error", res.status),
                        "application/json");
        return httplib::Server::HandlerResponse::Handled;
      }));
  svr.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
    res.status = 500;
    res.set_content(error_body("internal server error", "server_error", 500), "application/json");
  });
  // Every refused or failed request, with the message its body gives (never the request's body).
  svr.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
    if (res.status < 400) return;
    json body = json::parse(res.body, nullptr, false);
    std::string message = body.is_object() && body.contains("error") && body["error"].is_object() &&
                                  body["error"].contains("message") && body["error"]["message"].is_string()
                              ? body["error"]["message"].get<std::string>()
                              : std::string();
    log("chat server: " + std::to_string(res.status) + " " + req.method + " " + req.path + " from " + req.remote_addr +
        ":" + std::to_string(req.remote_port) + (message.empty() ? "" : ": " + message));
  });
  // Headers and body go out in separate writes; without this, Nagle's algorithm and the client's
  // delayed ACK hold the body back 40 ms.
  svr.set_tcp_nodelay(true);
  auto send = [](httplib::Response& res, const Reply& r) {
    res.status = r.status;
    if (!r.retry_after.empty()) res.set_header("Retry-After", r.retry_after);
    res.set_content(r.body, "application/json");
  };
  svr.Post("/v1/chat/completions", [this, send](const httplib::Request& req, httplib::Response& res) {
    if (req.body.size() > options_.limits.max_request_bytes) {
      res.status = 413;  // a chunked body: its size is known only now; the error handler says why
      return;
    }
    send(res, handle_chat(req.body, req.get_header_value("Authorization")));
  });
  for (const auto& [path, route] : options_.routes) {
    const ChatRoute* handler = &route;
    svr.Post(path, [this, send, handler](const httplib::Request& req, httplib::Response& res) {
      if (req.body.size() > options_.limits.max_request_bytes) {
        res.status = 413;
        return;
      }
      send(res, handle_route(*handler, req.body, req.get_header_value("Authorization")));
    });
  }
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
  json data = json::array({{{"id", options_.model}}});
  if (options_.models) {
    try {
      data = options_.models();
    } catch (const std::exception& e) {
      log(std::string("chat server: the model list failed: ") + e.what());
      return {500, error_body("internal server error", "server_error", 500), ""};
    }
  }
  const json defaults = {{"object", "model"}, {"created", 0}, {"owned_by", "vinci"}};
  for (json& m : data) {
    for (const auto& [key, value] : defaults.items()) {
      if (m.is_object() && !m.contains(key)) m[key] = value;
    }
  }
  json list = {{"object", "list"}, {"data", std::move(data)}};
  return {200, list.dump(), ""};
}

std::optional<ChatServer::Reply> ChatServer::admit(const std::string& body, const std::string& authorization, bool chat,
                                                   json* request) {
  ++requests_;
  if (!authorized(authorization)) {
    return Reply{401, error_body("Incorrect API key provided.", "invalid_request_error", 401), ""};
  }
  std::string shape = request_shape_error(body, options_.limits.max_json_depth);
  if (shape.empty()) {
    *request = json::parse(body, nullptr, /*allow_exceptions=*/false);
    if (!request->is_object()) shape = "request body is not a JSON object";
  }
  if (shape.empty() && chat) shape = messages_shape_error(*request);
  if (!shape.empty()) return Reply{400, error_body(shape, "invalid_request_error", 400), ""};
  return std::nullopt;
}

ChatServer::Reply ChatServer::handle_route(const ChatRoute& route, const std::string& body,
                                           const std::string& authorization) {
  json request;
  if (std::optional<Reply> refused = admit(body, authorization, /*chat=*/false, &request)) return *refused;
  try {
    ChatRouteReply r = route(request);
    return {r.status, r.body.dump(-1, ' ', false, json::error_handler_t::replace), ""};
  } catch (const std::exception& e) {
    log(std::string("chat server: the route handler failed: ") + e.what());
    return {500, error_body("internal server error", "server_error", 500), ""};
  }
}

ChatServer::Reply ChatServer::handle_chat(const std::string& body, const std::string& authorization) {
  json request;
  if (std::optional<Reply> refused = admit(body, authorization, /*chat=*/true, &request)) return *refused;
  ChatFault fault;
  // A client's preflight (max_tokens 1) takes no fault: the faults are for the calls under test.
  bool preflight = request.contains("max_tokens") && request["max_tokens"].is_number_integer() &&
                   request["max_tokens"].get<int64_t>() == 1;
  if (preflight || !take_fault(&fault)) return answer(body, request, nullptr);
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
  if (fault == nullptr || fault->kind != ChatFaultKind::kNoToolCall) {
    try {
      a = handler_(request);
    } catch (const std::exception& e) {
      // A bug of the handler, not the client's: logged with what it said, answered as a 500.
      log(std::string("chat server: the handler failed: ") + e.what());
      a = internal_error("internal server error");
    }
  }
  if (!a.ok()) {
    const int http = status_http(a.status());
    return {http, error_body(a.status().message(), status_type(http), http), ""};
  }
  std::string out = chat_completion_json(body, request, *a, options_.model).dump();
  if (fault != nullptr && fault->kind == ChatFaultKind::kTruncated) out.resize(out.size() / 2);
  return {200, std::move(out), ""};
}

}  // namespace vinci

#include "agents/chat_client.h"

#include <curl/curl.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <thread>

#include "core/json_fields.h"
#include "core/text.h"

namespace vinci {

using nlohmann::json;

namespace {

using Clock = std::chrono::steady_clock;

// curl_global_init is not thread-safe in every libcurl build; every handle comes after this.
void ensure_curl_initialized() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

std::string_view trim(std::string_view s) {
  auto space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
  while (!s.empty() && space(s.front())) s.remove_prefix(1);
  while (!s.empty() && space(s.back())) s.remove_suffix(1);
  return s;
}

// Every occurrence of the key replaced, so no text that leaves a call can carry it.
void redact(std::string* text, const std::string& key) {
  if (key.empty()) return;
  for (size_t p = 0; (p = text->find(key, p)) != std::string::npos;) {
    text->replace(p, key.size(), "[redacted]");
    p += 10;
  }
}

// A short, single-line excerpt of bytes for a message.
std::string excerpt(std::string_view bytes, size_t max = 200) {
  std::string out(bytes.substr(0, max));
  for (char& c : out) {
    if (c == '\n' || c == '\r' || c == '\t') c = ' ';
  }
  if (bytes.size() > max) out += "...";
  return out;
}

// The message of an error body in the shapes servers use: {"error": {"message"}}, {"error": "..."},
// vLLM's {"object": "error", "message"}, FastAPI's {"detail"}; else an excerpt of the body.
std::string server_message(std::string_view body) {
  json j = json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_object()) {
    auto error = j.find("error");
    if (error != j.end() && error->is_object()) {
      auto m = error->find("message");
      if (m != error->end() && m->is_string()) return m->get<std::string>();
    }
    if (error != j.end() && error->is_string()) return error->get<std::string>();
    auto m = j.find("message");
    if (m != j.end() && m->is_string() && text_field(j, "object") == "error") {
      return m->get<std::string>();
    }
    auto detail = j.find("detail");
    if (detail != j.end()) return detail->is_string() ? detail->get<std::string>() : detail->dump();
  }
  return body.empty() ? std::string("(empty body)") : excerpt(body);
}

std::string seconds_text(double s) { return format_number("%.3g", s) + " s"; }

}  // namespace

// ----- settings and requests -------------------------------------------------------------------

Status check_chat_settings(const ChatSettings& s) {
  if (s.base_url.rfind("http://", 0) != 0 && s.base_url.rfind("https://", 0) != 0) {
    return invalid_argument("chat base_url must start with http:// or https://, got \"" + s.base_url + "\"");
  }
  // host[:port] up to the path: a port, when written, is a number (a script whose port lookup came
  // back empty writes "http://127.0.0.1:/v1", which would otherwise be retried forever).
  size_t host_at = s.base_url.find("//") + 2;
  std::string authority = s.base_url.substr(host_at, s.base_url.find('/', host_at) - host_at);
  size_t colon = authority.rfind(':');
  if (authority.empty() || authority[0] == ':') {
    return invalid_argument("chat base_url names no host: \"" + s.base_url + "\"");
  }
  if (colon != std::string::npos && authority.find(']', colon) == std::string::npos) {
    std::string port = authority.substr(colon + 1);
    bool digits = !port.empty() && port.size() <= 5 && port.find_first_not_of("0123456789") == std::string::npos;
    if (!digits || std::stoi(port) < 1 || std::stoi(port) > 65535) {
      return invalid_argument("chat base_url: expected a port from 1 to 65535 after ':', found \"" + port + "\" in \"" +
                              s.base_url + "\"");
    }
  }
  if (!(s.timeout_s > 0)) return invalid_argument("chat timeout_s must be > 0");
  if (!(s.deadline_s > 0)) return invalid_argument("chat deadline_s must be > 0");
  if (s.retries < 0) return invalid_argument("chat retries must be >= 0");
  if (!(s.backoff_base_s >= 0) || !(s.backoff_max_s >= s.backoff_base_s)) {
    return invalid_argument("chat backoff needs 0 <= backoff_base_s <= backoff_max_s");
  }
  return Status::ok_status();
}

json chat_request_body(std::string_view model, const std::vector<ChatMessage>& messages, const std::vector<json>& tools,
                       const ChatSampling& sampling) {
  json body = json::object();
  body["model"] = std::string(model);
  json msgs = json::array();
  for (const auto& m : messages) msgs.push_back({{"role", m.role}, {"content", m.content}});
  body["messages"] = std::move(msgs);
  if (!tools.empty()) {
    body["tools"] = tools;
    body["tool_choice"] = "auto";
  }
  if (sampling.temperature) body["temperature"] = *sampling.temperature;
  if (sampling.top_p) body["top_p"] = *sampling.top_p;
  if (sampling.max_tokens) body["max_tokens"] = *sampling.max_tokens;
  if (sampling.seed) body["seed"] = *sampling.seed;
  return body;
}

// ----- replies ---------------------------------------------------------------------------------

namespace {

// Moves reasoning out of `content` (the three shapes parse_chat_reply documents).
void split_think(std::string* content, std::string* reasoning) {
  constexpr std::string_view kOpen = "<think>", kClose = "</think>";
  std::string_view c = *content;
  std::string_view lead = trim(c);
  std::string think, rest;
  if (lead.substr(0, kOpen.size()) == kOpen) {
    std::string_view inner = lead.substr(kOpen.size());
    size_t close = inner.find(kClose);
    think = std::string(trim(inner.substr(0, close)));
    if (close != std::string_view::npos) rest = std::string(trim(inner.substr(close + kClose.size())));
  } else {
    size_t close = c.find(kClose);
    // Only a block the template opened in the prompt: text with its own <think> later is content.
    if (close == std::string_view::npos || c.substr(0, close).find(kOpen) != std::string_view::npos) {
      return;
    }
    think = std::string(trim(c.substr(0, close)));
    rest = std::string(trim(c.substr(close + kClose.size())));
  }
  if (!think.empty()) {
    if (!reasoning->empty()) *reasoning += "\n";
    *reasoning += think;
  }
  *content = std::move(rest);
}

Result<std::vector<ChatToolCall>> parse_tool_calls(const json& calls) {
  std::vector<ChatToolCall> out;
  if (calls.is_null()) return out;
  if (!calls.is_array()) return corruption("reply tool_calls is not a list");
  for (size_t i = 0; i < calls.size(); ++i) {
    const json& c = calls[i];
    const json* fn = c.is_object() && c.contains("function") ? &c["function"] : nullptr;
    if (fn == nullptr || !fn->is_object() || !fn->contains("name") || !(*fn)["name"].is_string()) {
      return corruption("reply tool call " + std::to_string(i) + " has no function name");
    }
    ChatToolCall call;
    if (c.contains("id") && c["id"].is_string()) call.id = c["id"].get<std::string>();
    call.name = (*fn)["name"].get<std::string>();
    auto args = fn->find("arguments");
    if (args != fn->end() && !args->is_null()) {
      call.arguments = args->is_string() ? args->get<std::string>() : args->dump();
    }
    out.push_back(std::move(call));
  }
  return out;
}

Result<json> parse_body_json(std::string_view body) {
  if (trim(body).empty()) return corruption("reply body is empty");
  // Parsed with exceptions only to learn where the text broke off.
  try {
    return json::parse(body.begin(), body.end());
  } catch (const json::parse_error& e) {
    if (e.byte >= body.size()) {
      return corruption("reply body is cut short: JSON ends early at byte " + std::to_string(body.size()) +
                        " (truncated)");
    }
    return corruption("reply body is not JSON (error at byte " + std::to_string(e.byte) + " of " +
                      std::to_string(body.size()) + "): " + excerpt(body, 120));
  } catch (const json::exception& e) {  // a number past double's range ("1e999")
    return corruption(std::string("reply body holds a value JSON cannot hold: ") + e.what());
  }
}

}  // namespace

Result<ChatReply> parse_chat_reply(std::string_view body) {
  VINCI_ASSIGN_OR_RETURN(json j, parse_body_json(body));
  if (!j.is_object()) return corruption("reply body is JSON but not an object");
  if (j.contains("error") || text_field(j, "object") == "error") {
    return failed_precondition("server returned an error: " + server_message(body));
  }
  auto choices = j.find("choices");
  if (choices == j.end() || !choices->is_array() || choices->empty()) {
    return corruption("reply has no choices");
  }
  const json& choice = (*choices)[0];
  if (!choice.is_object() || !choice.contains("message") || !choice["message"].is_object()) {
    return corruption("reply choice 0 has no message");
  }
  const json& msg = choice["message"];
  ChatReply reply;
  reply.id = text_field(j, "id");
  reply.model = text_field(j, "model");
  reply.content = text_field(msg, "content");
  reply.reasoning = text_field(msg, "reasoning_content");
  if (reply.reasoning.empty()) reply.reasoning = text_field(msg, "reasoning");
  split_think(&reply.content, &reply.reasoning);
  VINCI_ASSIGN_OR_RETURN(reply.tool_calls, parse_tool_calls(msg.contains("tool_calls") ? msg["tool_calls"] : json()));
  reply.finish_reason = text_field(choice, "finish_reason");
  auto usage = j.find("usage");
  if (usage != j.end() && usage->is_object()) {
    reply.prompt_tokens = int_field(*usage, "prompt_tokens");
    reply.completion_tokens = int_field(*usage, "completion_tokens");
  }
  return reply;
}

namespace {

// Copies the fields of `from` named in `keys` that it holds into `to`.
void copy_fields(const json& from, std::initializer_list<const char*> keys, json* to) {
  for (const char* k : keys) {
    auto it = from.find(k);
    if (it != from.end()) (*to)[k] = *it;
  }
}

}  // namespace

Result<std::string> canonical_chat_reply(std::string_view body) {
  VINCI_ASSIGN_OR_RETURN(json j, parse_body_json(body));
  if (!j.is_object()) return corruption("reply body is JSON but not an object");
  json out = json::object();
  copy_fields(j, {"model"}, &out);
  json choices = json::array();
  auto in_choices = j.find("choices");
  if (in_choices != j.end() && in_choices->is_array()) {
    for (const json& c : *in_choices) {
      if (!c.is_object()) {
        choices.push_back(c);
        continue;
      }
      json choice = json::object();
      copy_fields(c, {"index", "finish_reason", "stop_reason"}, &choice);
      auto msg = c.find("message");
      if (msg != c.end() && msg->is_object()) {
        json m = json::object();
        copy_fields(*msg, {"role", "content", "reasoning_content", "reasoning", "refusal"}, &m);
        auto calls = msg->find("tool_calls");
        if (calls != msg->end() && calls->is_array()) {
          json tc = json::array();
          for (const json& call : *calls) {
            json one = json::object();  // the call's id is the server's, drawn per response
            if (call.is_object()) copy_fields(call, {"type", "function"}, &one);
            tc.push_back(std::move(one));
          }
          m["tool_calls"] = std::move(tc);
        } else if (calls != msg->end()) {
          m["tool_calls"] = *calls;
        }
        choice["message"] = std::move(m);
      } else if (msg != c.end()) {
        choice["message"] = *msg;
      }
      choices.push_back(std::move(choice));
    }
    out["choices"] = std::move(choices);
  }
  auto usage = j.find("usage");
  if (usage != j.end() && usage->is_object()) {
    json u = json::object();
    copy_fields(*usage, {"prompt_tokens", "completion_tokens", "total_tokens"}, &u);
    out["usage"] = std::move(u);
  }
  return out.dump(-1, ' ', false, json::error_handler_t::replace);
}

json chat_reply_envelope(std::string_view body) {
  json j = json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  json out = json::object();
  if (!j.is_object()) return out;
  for (const auto& [k, v] : j.items()) {
    if (k != "model" && k != "choices" && k != "usage") out[k] = v;
  }
  auto usage = j.find("usage");
  if (usage != j.end() && usage->is_object()) {
    json rest = json::object();
    for (const auto& [k, v] : usage->items())
      if (k != "prompt_tokens" && k != "completion_tokens" && k != "total_tokens") rest[k] = v;
    if (!rest.empty()) out["usage"] = std::move(rest);
  }
  json ids = json::array();
  auto choices = j.find("choices");
  if (choices != j.end() && choices->is_array()) {
    for (const json& c : *choices) {
      if (!c.is_object()) continue;
      auto msg = c.find("message");
      if (msg == c.end() || !msg->is_object()) continue;
      auto calls = msg->find("tool_calls");
      if (calls == msg->end() || !calls->is_array()) continue;
      for (const json& call : *calls)
        if (call.is_object() && call.contains("id")) ids.push_back(call["id"]);
    }
  }
  if (!ids.empty()) out["tool_call_ids"] = std::move(ids);
  return out;
}

std::string chat_reply_text(const ChatReply& reply) {
  std::string text = reply.content;
  for (const auto& call : reply.tool_calls) {
    json obj = {{"name", call.name}, {"arguments", call.arguments}};
    if (!text.empty()) text += "\n";
    text += "<tool_call>\n" + obj.dump() + "\n</tool_call>";
  }
  return text;
}

// ----- backoff ---------------------------------------------------------------------------------

double backoff_delay_s(const ChatSettings& settings, const RngKey& jitter_key, int attempt) {
  VINCI_REQUIRE(attempt >= 1, "backoff attempt is 1-based, got " << attempt);
  double cap = settings.backoff_base_s * std::ldexp(1.0, std::min(attempt - 1, 60));
  cap = std::min(cap, settings.backoff_max_s);
  Stream stream(jitter_key.with("attempt", static_cast<int64_t>(attempt)));
  return cap * (0.5 + 0.5 * stream.uniform());
}

std::vector<double> backoff_schedule(const ChatSettings& settings, const RngKey& jitter_key, int count) {
  std::vector<double> out;
  for (int i = 1; i <= count; ++i) out.push_back(backoff_delay_s(settings, jitter_key, i));
  return out;
}

// ----- HTTP ------------------------------------------------------------------------------------

namespace {

struct HttpResult {
  CURLcode code = CURLE_OK;
  std::string curl_error;  // curl's error buffer, when code is not CURLE_OK
  long status = 0;
  std::string body;
  std::optional<double> retry_after_s;
};

size_t on_body(char* data, size_t size, size_t n, void* user) {
  static_cast<std::string*>(user)->append(data, size * n);
  return size * n;
}

// Picks Retry-After out of the header lines; only its delay-seconds form (a date needs a clock).
size_t on_header(char* data, size_t size, size_t n, void* user) {
  std::string_view line(data, size * n);
  constexpr std::string_view kName = "retry-after:";
  if (line.size() > kName.size()) {
    bool match = true;
    for (size_t i = 0; i < kName.size() && match; ++i) {
      match = std::tolower(static_cast<unsigned char>(line[i])) == kName[i];
    }
    if (match) {
      std::string value(trim(line.substr(kName.size())));
      char* end = nullptr;
      double v = std::strtod(value.c_str(), &end);
      if (!value.empty() && end == value.c_str() + value.size() && v >= 0 && std::isfinite(v)) {
        static_cast<HttpResult*>(user)->retry_after_s = v;
      }
    }
  }
  return size * n;
}

// One request on `handle`; a POST when body is given, else a GET.
HttpResult perform(CURL* handle, const std::string& url, const std::string* body, const std::string& api_key,
                   double timeout_s) {
  HttpResult r;
  char errbuf[CURL_ERROR_SIZE] = {0};
  curl_slist* headers = nullptr;
  headers = curl_slist_append(headers, "Accept: application/json");
  headers = curl_slist_append(headers, "Expect:");  // no 100-continue round trip for long prompts
  if (body != nullptr) headers = curl_slist_append(headers, "Content-Type: application/json");
  if (!api_key.empty()) {
    headers = curl_slist_append(headers, ("Authorization: Bearer " + api_key).c_str());
  }
  long timeout_ms = std::max(1L, static_cast<long>(std::ceil(timeout_s * 1000)));
  curl_easy_setopt(handle, CURLOPT_URL, url.c_str());
  curl_easy_setopt(handle, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(handle, CURLOPT_NOSIGNAL, 1L);  // timeouts without SIGALRM: safe in threads
  curl_easy_setopt(handle, CURLOPT_HTTPHEADER, headers);
  if (body != nullptr) {
    curl_easy_setopt(handle, CURLOPT_POSTFIELDS, body->data());
    curl_easy_setopt(handle, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body->size()));
  } else {
    curl_easy_setopt(handle, CURLOPT_HTTPGET, 1L);
  }
  curl_easy_setopt(handle, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(handle, CURLOPT_WRITEDATA, &r.body);
  curl_easy_setopt(handle, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(handle, CURLOPT_HEADERDATA, &r);
  curl_easy_setopt(handle, CURLOPT_TIMEOUT_MS, timeout_ms);
  curl_easy_setopt(handle, CURLOPT_CONNECTTIMEOUT_MS, timeout_ms);
  curl_easy_setopt(handle, CURLOPT_ERRORBUFFER, errbuf);
  r.code = curl_easy_perform(handle);
  if (r.code == CURLE_OK) {
    curl_easy_getinfo(handle, CURLINFO_RESPONSE_CODE, &r.status);
  } else {
    r.curl_error = errbuf[0] != '\0' ? std::string(errbuf) : curl_easy_strerror(r.code);
    r.status = 0;
  }
  curl_slist_free_all(headers);
  return r;
}

// Transport failures that another attempt cannot fix: the URL or TLS setup is wrong.
bool transport_retryable(CURLcode code) {
  switch (code) {
    case CURLE_UNSUPPORTED_PROTOCOL:
    case CURLE_URL_MALFORMAT:
    case CURLE_NOT_BUILT_IN:
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CERTPROBLEM:
    case CURLE_SSL_CACERT_BADFILE:
    case CURLE_SSL_CIPHER:
    case CURLE_TOO_MANY_REDIRECTS: return false;
    default: return true;
  }
}

bool status_retryable(long status) {
  switch (status) {
    case 408:
    case 425:
    case 429:
    case 500:
    case 502:
    case 503:
    case 504: return true;
    default: return false;
  }
}

// What one attempt came to: a reply, or a failure described as "<head>: <detail>".
struct AttemptVerdict {
  std::optional<ChatReply> reply;
  std::string head;    // "HTTP 500", "timeout (0.3 s)", "connection error", "malformed reply"
  std::string detail;  // the server's or curl's message
  bool retryable = false;
  std::optional<double> wait_s;  // from Retry-After
};

AttemptVerdict judge(const HttpResult& r, double timeout_s) {
  AttemptVerdict v;
  if (r.code != CURLE_OK) {
    // A failed call's reason is recorded: a timeout's text must not carry the elapsed time curl
    // measured (it differs between two runs against one hanging server).
    bool timed_out = r.code == CURLE_OPERATION_TIMEDOUT;
    v.head = timed_out ? "timeout" : "connection error";
    v.detail = timed_out ? "no complete reply within the attempt's time limit" : r.curl_error;
    v.retryable = transport_retryable(r.code);
  } else if (r.status >= 200 && r.status < 300) {
    auto reply = parse_chat_reply(r.body);
    if (reply.ok()) {
      v.reply = std::move(reply).value();
      return v;
    }
    v.head = "malformed reply";
    v.detail = reply.status().message();
    v.retryable = true;
  } else {
    v.head = "HTTP " + std::to_string(r.status);
    v.detail = server_message(r.body);
    v.retryable = status_retryable(r.status);
    if ((r.status == 429 || r.status == 503) && r.retry_after_s) v.wait_s = r.retry_after_s;
  }
  return v;
}

std::string attempts_text(int n) { return std::to_string(n) + (n == 1 ? " attempt" : " attempts"); }

}  // namespace

// ----- the client ------------------------------------------------------------------------------

ChatClient::ChatClient(ChatSettings settings) : settings_(std::move(settings)) { ensure_curl_initialized(); }

ChatClient::~ChatClient() {
  for (void* h : idle_handles_) curl_easy_cleanup(static_cast<CURL*>(h));
}

void* ChatClient::acquire_handle() {
  {
    std::lock_guard<std::mutex> lock(pool_mu_);
    if (!idle_handles_.empty()) {
      void* h = idle_handles_.back();
      idle_handles_.pop_back();
      return h;
    }
  }
  return curl_easy_init();
}

void ChatClient::release_handle(void* handle) {
  // Reset drops the options (which point into finished calls) but keeps the open connections.
  curl_easy_reset(static_cast<CURL*>(handle));
  std::lock_guard<std::mutex> lock(pool_mu_);
  idle_handles_.push_back(handle);
}

Result<ChatOutcome> ChatClient::complete(const std::string& body, const RngKey& jitter_key) {
  VINCI_RETURN_IF_ERROR(check_chat_settings(settings_));
  const auto start = Clock::now();
  const std::string url = settings_.base_url + "/chat/completions";
  auto left = [&] { return settings_.deadline_s - seconds_since(start); };
  ChatOutcome out;
  CURL* handle = static_cast<CURL*>(acquire_handle());
  if (handle == nullptr) return internal_error("curl_easy_init failed");
  double wait = 0;
  std::string last;      // "<head>: <detail>" of the last failed attempt
  bool reached = false;  // some attempt got a connection to the server
  for (int attempt = 1;; ++attempt) {
    if (attempt > 1) {
      // Never sleep past the deadline: a wait that would reach it ends the call now.
      bool fits = wait < left();
      if (fits) std::this_thread::sleep_for(std::chrono::duration<double>(wait));
      if (!fits || left() <= 0) {
        out.failure = "deadline of " + seconds_text(settings_.deadline_s) + " reached after " +
                      attempts_text(out.attempts) + " (next wait " + seconds_text(wait) + "); last: " + last;
        break;
      }
    }
    double timeout = std::min(settings_.timeout_s, left());
    HttpResult r = perform(handle, url, &body, settings_.api_key, timeout);
    reached = reached || !(r.code == CURLE_COULDNT_CONNECT || r.code == CURLE_COULDNT_RESOLVE_HOST ||
                           r.code == CURLE_COULDNT_RESOLVE_PROXY);
    AttemptVerdict v = judge(r, timeout);
    out.attempts = attempt;
    out.http_status = static_cast<int>(r.status);
    out.body = std::move(r.body);
    out.attempt_log.push_back({out.http_status, v.reply ? "" : v.head + ": " + v.detail, wait});
    if (v.reply) {
      Result<std::string> record = canonical_chat_reply(out.body);
      if (record.ok()) {
        out.ok = true;
        out.reply = std::move(v.reply);
        out.record = std::move(record).value();
        break;
      }
      v.head = "malformed reply";
      v.detail = record.status().message();
      v.retryable = true;
    }
    last = v.head + ": " + v.detail;
    if (!v.retryable) {
      out.failure = v.head + " (not retried): " + v.detail;
      break;
    }
    if (attempt > settings_.retries) {
      out.failure = v.head + " after " + attempts_text(attempt) + ": " + v.detail;
      break;
    }
    wait = v.wait_s ? *v.wait_s : backoff_delay_s(settings_, jitter_key, attempt);
  }
  release_handle(handle);
  out.unreachable = !out.ok && !reached;
  out.latency_s = seconds_since(start);
  redact(&out.failure, settings_.api_key);
  redact(&out.body, settings_.api_key);
  for (auto& a : out.attempt_log) redact(&a.error, settings_.api_key);
  return out;
}

Result<std::vector<std::string>> list_models(const ChatSettings& settings) {
  VINCI_ASSIGN_OR_RETURN(std::vector<ModelCard> cards, list_model_cards(settings));
  std::vector<std::string> ids;
  for (const ModelCard& c : cards) ids.push_back(c.id);
  return ids;
}

Result<std::vector<ModelCard>> list_model_cards(const ChatSettings& settings, int* http_status) {
  VINCI_RETURN_IF_ERROR(check_chat_settings(settings));
  ensure_curl_initialized();
  CURL* handle = curl_easy_init();
  if (handle == nullptr) return internal_error("curl_easy_init failed");
  const std::string url = settings.base_url + "/models";
  HttpResult r = perform(handle, url, nullptr, settings.api_key, settings.timeout_s);
  curl_easy_cleanup(handle);
  if (http_status) *http_status = static_cast<int>(r.status);
  std::string error;
  if (r.code != CURLE_OK) {
    error = "GET " + url + ": " + r.curl_error;
  } else if (r.status != 200) {
    error = "GET " + url + ": HTTP " + std::to_string(r.status) + ": " + server_message(r.body);
  }
  if (!error.empty()) {
    redact(&error, settings.api_key);
    return io_error(error);
  }
  json j = json::parse(r.body, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("data") || !j["data"].is_array()) {
    std::string what = "GET " + url + ": the reply has no data list: " + excerpt(r.body);
    redact(&what, settings.api_key);
    return corruption(what);
  }
  std::vector<ModelCard> cards;
  for (const auto& m : j["data"]) {
    if (m.is_object() && m.contains("id") && m["id"].is_string()) {
      ModelCard c;
      c.id = m["id"].get<std::string>();
      auto len = m.find("max_model_len");
      if (len != m.end() && len->is_number_integer() && len->get<int64_t>() > 0) c.max_model_len = len->get<int64_t>();
      cards.push_back(std::move(c));
    }
  }
  return cards;
}

Result<HttpPostReply> http_post_json(const std::string& url, const std::string& body, const std::string& api_key,
                                     double timeout_s, bool* unreachable) {
  ensure_curl_initialized();
  CURL* handle = curl_easy_init();
  if (handle == nullptr) return internal_error("curl_easy_init failed");
  HttpResult r = perform(handle, url, &body, api_key, timeout_s);
  curl_easy_cleanup(handle);
  if (unreachable) {
    *unreachable = r.code == CURLE_COULDNT_CONNECT || r.code == CURLE_COULDNT_RESOLVE_HOST ||
                   r.code == CURLE_COULDNT_RESOLVE_PROXY;
  }
  if (r.code != CURLE_OK) {
    std::string error = "POST " + url + ": " + r.curl_error;
    redact(&error, api_key);
    return io_error(error);
  }
  HttpPostReply out;
  out.status = static_cast<int>(r.status);
  out.body = std::move(r.body);
  if (out.status != 200) out.server_message = server_message(out.body);
  redact(&out.body, api_key);
  redact(&out.server_message, api_key);
  return out;
}

}  // namespace vinci

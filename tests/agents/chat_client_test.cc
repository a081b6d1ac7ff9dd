// The chat client against a real ChatServer on loopback: round trips, reasoning, tool calls, every
// injected fault, deadlines, API keys, concurrency, and the keyed backoff schedule.
#include "agents/chat_client.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "agents/prompts.h"
#include "agents/tool_calls.h"
#include "harness/chat_server.h"

namespace vinci {
namespace {

using nlohmann::json;

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// Answers by the last message: tools offered -> a select_skills call; "think" -> a <think> block;
// "reasoning" -> a reasoning_content field; anything else is echoed.
Result<ChatAnswer> echo(const json& request) {
  std::string last = request["messages"].back().value("content", "");
  ChatAnswer a;
  if (request.contains("tools")) {
    a.tool_calls.push_back(
        {"select_skills",
         {{"think", "a row softmax"},
          {"selected_skills", json::array({{{"name", "online_softmax"}, {"reason", "one pass"}}})}}});
  } else if (last == "think") {
    a.content = "<think>\nplan the tiles\n</think>\n\nuse 128 threads";
  } else if (last == "reasoning") {
    a.reasoning = "weigh the options";
    a.content = "use 256 threads";
  } else {
    a.content = "echo: " + last;
  }
  return a;
}

std::string request_bytes(const std::string& text, bool tools = false) {
  std::vector<json> schemas;
  if (tools) schemas.push_back(select_skills_tool_schema());
  return chat_request_body("test-model", {{"system", "be brief"}, {"user", text}}, schemas).dump();
}

RngKey key(int64_t call) { return RngKey::root(7).with("call", call); }

std::vector<ChatFault> faults(const char* text) {
  auto f = parse_chat_faults(text);
  EXPECT_TRUE(f.ok()) << f.status().to_string();
  return f.ok() ? *f : std::vector<ChatFault>{};
}

ChatServerOptions with_faults(const char* text) {
  ChatServerOptions options;
  options.faults = faults(text);
  return options;
}

// ----- request bodies, reply parsing, fault lists ---------------------------------------------

TEST(ChatRequest, SendsOnlyTheFieldsThatAreSet) {
  json bare = chat_request_body("m", {{"user", "hi"}});
  EXPECT_EQ(bare.dump(), R"({"messages":[{"content":"hi","role":"user"}],"model":"m"})");
  ChatSampling sampling;
  sampling.temperature = 0.7;
  sampling.seed = 11;
  json full = chat_request_body("m", {{"user", "hi"}}, {select_skills_tool_schema()}, sampling);
  EXPECT_EQ(full["tool_choice"], "auto");
  EXPECT_EQ(full["tools"].size(), 1u);
  EXPECT_EQ(full["temperature"], 0.7);
  EXPECT_EQ(full["seed"], 11);
  EXPECT_FALSE(full.contains("top_p"));
  EXPECT_FALSE(full.contains("max_tokens"));
  // The canonical bytes have sorted keys, so equal requests have equal addresses.
  std::string bytes = full.dump();
  EXPECT_LT(bytes.find("\"messages\""), bytes.find("\"model\""));
  EXPECT_EQ(chat_request_address(bytes), hash_tagged("llm_request", bytes));
  EXPECT_EQ(
      chat_request_address(bytes),
      chat_request_address(chat_request_body("m", {{"user", "hi"}}, {select_skills_tool_schema()}, sampling).dump()));
}

TEST(ChatReplyParse, ReasoningShapes) {
  auto body = [](const std::string& content) {
    return json({{"choices", {{{"message", {{"content", content}}}, {"finish_reason", "stop"}}}}}).dump();
  };
  auto r = parse_chat_reply(body("<think>a plan</think>\nthe answer"));
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->reasoning, "a plan");
  EXPECT_EQ(r->content, "the answer");
  r = parse_chat_reply(body("opened in the prompt</think>the answer"));  // no opening tag
  EXPECT_EQ(r->reasoning, "opened in the prompt");
  EXPECT_EQ(r->content, "the answer");
  r = parse_chat_reply(body("<think>ran out of tokens"));  // never closed
  EXPECT_EQ(r->reasoning, "ran out of tokens");
  EXPECT_EQ(r->content, "");
  r = parse_chat_reply(body("no reasoning <think> here"));
  EXPECT_EQ(r->reasoning, "");
  EXPECT_EQ(r->content, "no reasoning <think> here");
  r = parse_chat_reply(body("mid-text <think>aside</think> stays"));
  EXPECT_EQ(r->reasoning, "");
  EXPECT_EQ(r->content, "mid-text <think>aside</think> stays");
}

TEST(ChatReplyParse, ToolCallsWithNullContent) {
  std::string body = R"({"choices":[{"message":{"content":null,"tool_calls":[{"id":"c1",
    "type":"function","function":{"name":"select_skills","arguments":"{\"think\": \"t\"}"}}]},
    "finish_reason":"tool_calls"}],"usage":{"prompt_tokens":12,"completion_tokens":5}})";
  auto r = parse_chat_reply(body);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->content, "");
  ASSERT_EQ(r->tool_calls.size(), 1u);
  EXPECT_EQ(r->tool_calls[0].id, "c1");
  EXPECT_EQ(r->tool_calls[0].arguments, "{\"think\": \"t\"}");  // raw, spacing kept
  EXPECT_EQ(r->finish_reason, "tool_calls");
  EXPECT_EQ(r->prompt_tokens, 12);
  EXPECT_EQ(r->completion_tokens, 5);
}

TEST(ChatReplyParse, BadBodiesAreClearErrors) {
  struct Case {
    std::string body;
    StatusCode code;
    std::string says;
  };
  const std::string good = R"({"choices":[{"message":{"content":"x"}}]})";
  for (const Case& c : std::vector<Case>{
           {"", StatusCode::kCorruption, "empty"},
           {"<html>oops</html>", StatusCode::kCorruption, "not JSON"},
           {good.substr(0, good.size() / 2), StatusCode::kCorruption, "truncated"},
           {"[1,2]", StatusCode::kCorruption, "not an object"},
           {R"({"choices":[]})", StatusCode::kCorruption, "no choices"},
           {R"({"id":"x"})", StatusCode::kCorruption, "no choices"},
           {R"({"choices":[{"finish_reason":"stop"}]})", StatusCode::kCorruption, "no message"},
           {R"({"error":{"message":"model overloaded","type":"server_error"}})", StatusCode::kFailedPrecondition,
            "model overloaded"},
           {R"({"object":"error","message":"context too long","code":400})", StatusCode::kFailedPrecondition,
            "context too long"},
           // Fields of the wrong type read as absent: nothing throws (a fuzzer found "object" as an object).
           {R"({"object":{"mtype":"srsrag_error"}})", StatusCode::kCorruption, "no choices"},
           {R"({"object":7,"message":"x","choices":"y"})", StatusCode::kCorruption, "no choices"},
           {R"({"object":"error","message":{"a":1}})", StatusCode::kFailedPrecondition, "server returned an error"},
       }) {
    auto r = parse_chat_reply(c.body);
    ASSERT_FALSE(r.ok()) << c.body;
    EXPECT_EQ(r.status().code(), c.code) << c.body;
    EXPECT_TRUE(contains(r.status().message(), c.says)) << r.status().message();
  }
}

TEST(ChatFaults, TextFormRoundTrips) {
  auto f = parse_chat_faults(
      "500, 429:1,http503_retry_after:2,400,malformed,truncated,"
      "no_tool_call,hang:0.5,hang");
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  ASSERT_EQ(f->size(), 9u);
  EXPECT_EQ((*f)[1].kind, ChatFaultKind::kHttp429);
  EXPECT_EQ((*f)[1].seconds, 1);
  EXPECT_EQ((*f)[2].kind, ChatFaultKind::kHttp503RetryAfter);
  EXPECT_EQ((*f)[7].seconds, 0.5);
  EXPECT_EQ((*f)[8].seconds, 60);
  EXPECT_EQ(chat_faults_text(*f), "500,429:1,503:2,400,malformed,truncated,no_tool_call,hang:0.5,hang:60");
  EXPECT_TRUE(parse_chat_faults("").ok());
  EXPECT_TRUE(parse_chat_faults("")->empty());
}

TEST(ChatFaults, BadItemsAreNamed) {
  for (auto [text, says] : std::vector<std::pair<std::string, std::string>>{
           {"500,teapot", "fault 2 (\"teapot\"): unknown fault"},
           {"500,,400", "fault 2 (\"\"): empty item"},
           {"429:1.5", "whole seconds"},
           {"429:x", "whole seconds"},
           {"hang:0", "hang takes seconds"},
           {"malformed:3", "takes no seconds"},
       }) {
    auto f = parse_chat_faults(text);
    ASSERT_FALSE(f.ok()) << text;
    EXPECT_EQ(f.status().code(), StatusCode::kInvalidArgument);
    EXPECT_TRUE(contains(f.status().message(), says)) << f.status().message();
  }
}

TEST(ChatBackoff, JitterIsAPureFunctionOfTheKey) {
  ChatSettings s;
  s.backoff_base_s = 1;
  s.backoff_max_s = 6;
  auto a = backoff_schedule(s, key(1), 6);
  EXPECT_EQ(a, backoff_schedule(s, key(1), 6));
  EXPECT_NE(a, backoff_schedule(s, key(2), 6));
  const double caps[] = {1, 2, 4, 6, 6, 6};
  for (int i = 0; i < 6; ++i) {
    EXPECT_GE(a[i], 0.5 * caps[i]) << i;
    EXPECT_LT(a[i], caps[i]) << i;
    EXPECT_EQ(a[i], backoff_delay_s(s, key(1), i + 1));
  }
}

// ----- over HTTP -------------------------------------------------------------------------------

class ChatHttp : public ::testing::Test {
 protected:
  void start(ChatServerOptions options = {}, ChatHandler handler = echo) {
    server_ = std::make_unique<ChatServer>(std::move(handler), std::move(options));
    Status st = server_->start();
    ASSERT_TRUE(st.ok()) << st.to_string();
    ASSERT_GT(server_->port(), 0);
  }
  ChatSettings settings() const {
    ChatSettings s;
    s.base_url = server_->base_url();
    s.model = "test-model";
    s.timeout_s = 5;
    s.deadline_s = 20;
    s.retries = 3;
    s.backoff_base_s = 0.01;
    s.backoff_max_s = 0.05;
    return s;
  }
  // One call; the outcome (a Status error fails the test).
  ChatOutcome call(ChatClient& client, const std::string& body, int64_t k = 0) {
    auto r = client.complete(body, key(k));
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    return r.ok() ? *r : ChatOutcome{};
  }

  std::unique_ptr<ChatServer> server_;
};

TEST_F(ChatHttp, PlainReplyRoundTrips) {
  start();
  ChatClient client(settings());
  std::string body = request_bytes("hello");
  ChatOutcome out = call(client, body);
  ASSERT_TRUE(out.ok) << out.failure;
  EXPECT_EQ(out.attempts, 1);
  EXPECT_EQ(out.http_status, 200);
  EXPECT_EQ(out.reply->content, "echo: hello");
  EXPECT_EQ(out.reply->finish_reason, "stop");
  EXPECT_EQ(out.reply->model, "test-model");
  EXPECT_EQ(out.reply->id, "chatcmpl-" + chat_request_address(body).hex());
  EXPECT_EQ(out.reply->prompt_tokens, static_cast<int64_t>((body.size() + 3) / 4));
  EXPECT_GT(out.reply->completion_tokens, 0);
  EXPECT_TRUE(out.failure.empty());
  EXPECT_GT(out.latency_s, 0);
  // The raw body is what the server would send again for the same request.
  EXPECT_EQ(out.body, call(client, body).body);
  EXPECT_EQ(server_->requests(), 2);
}

TEST_F(ChatHttp, ToolCallsRoundTripAndParse) {
  start();
  ChatClient client(settings());
  ChatOutcome out = call(client, request_bytes("pick skills", /*tools=*/true));
  ASSERT_TRUE(out.ok) << out.failure;
  ASSERT_EQ(out.reply->tool_calls.size(), 1u);
  EXPECT_EQ(out.reply->tool_calls[0].name, "select_skills");
  EXPECT_EQ(out.reply->finish_reason, "tool_calls");
  EXPECT_TRUE(json::accept(out.reply->tool_calls[0].arguments));
  auto sel = parse_select_skills(chat_reply_text(*out.reply), {"online_softmax", "tensor_core_wmma"});
  ASSERT_TRUE(sel.ok()) << sel.status().to_string();
  EXPECT_EQ(sel->think, "a row softmax");
  ASSERT_EQ(sel->selected.size(), 1u);
  EXPECT_EQ(sel->selected[0].name, "online_softmax");
  EXPECT_EQ(sel->selected[0].reason, "one pass");
}

TEST_F(ChatHttp, ReasoningIsKeptApart) {
  start();
  ChatClient client(settings());
  ChatOutcome think = call(client, request_bytes("think"));
  ASSERT_TRUE(think.ok) << think.failure;
  EXPECT_EQ(think.reply->reasoning, "plan the tiles");
  EXPECT_EQ(think.reply->content, "use 128 threads");
  ChatOutcome field = call(client, request_bytes("reasoning"));
  ASSERT_TRUE(field.ok) << field.failure;
  EXPECT_EQ(field.reply->reasoning, "weigh the options");
  EXPECT_EQ(field.reply->content, "use 256 threads");
}

TEST_F(ChatHttp, Http500ThenSuccessWaitsTheKeyedBackoff) {
  start(with_faults("500,500"));
  ChatSettings s = settings();
  ChatClient client(s);
  ChatOutcome out = call(client, request_bytes("hello"), 5);
  ASSERT_TRUE(out.ok) << out.failure;
  EXPECT_EQ(out.attempts, 3);
  ASSERT_EQ(out.attempt_log.size(), 3u);
  EXPECT_EQ(out.attempt_log[0].http_status, 500);
  EXPECT_TRUE(contains(out.attempt_log[0].error, "HTTP 500: injected fault 500"));
  EXPECT_EQ(out.attempt_log[2].http_status, 200);
  EXPECT_EQ(out.attempt_log[0].wait_s, 0);
  EXPECT_EQ(out.attempt_log[1].wait_s, backoff_delay_s(s, key(5), 1));
  EXPECT_EQ(out.attempt_log[2].wait_s, backoff_delay_s(s, key(5), 2));
  EXPECT_EQ(server_->faults_injected(), 2);
}

TEST_F(ChatHttp, RetryAfterIsHonoured) {
  start(with_faults("429:1"));
  ChatClient client(settings());
  auto t0 = std::chrono::steady_clock::now();
  ChatOutcome out = call(client, request_bytes("hello"));
  double elapsed = seconds_since(t0);
  ASSERT_TRUE(out.ok) << out.failure;
  EXPECT_EQ(out.attempts, 2);
  EXPECT_EQ(out.attempt_log[0].http_status, 429);
  EXPECT_EQ(out.attempt_log[1].wait_s, 1);
  EXPECT_GE(elapsed, 0.9);
  EXPECT_LT(elapsed, 10);
}

TEST_F(ChatHttp, RetryAfterZeroOn503OverridesALongBackoff) {
  start(with_faults("503:0"));
  ChatSettings s = settings();
  s.backoff_base_s = s.backoff_max_s = 30;  // a wait this long would fail the timing below
  ChatClient client(s);
  auto t0 = std::chrono::steady_clock::now();
  ChatOutcome out = call(client, request_bytes("hello"));
  ASSERT_TRUE(out.ok) << out.failure;
  EXPECT_EQ(out.attempt_log[0].http_status, 503);
  EXPECT_EQ(out.attempt_log[1].wait_s, 0);
  EXPECT_LT(seconds_since(t0), 5);
}

TEST_F(ChatHttp, MalformedAndTruncatedBodiesAreRetried) {
  start(with_faults("malformed,truncated"));
  ChatClient client(settings());
  ChatOutcome out = call(client, request_bytes("hello"));
  ASSERT_TRUE(out.ok) << out.failure;
  EXPECT_EQ(out.attempts, 3);
  EXPECT_EQ(out.attempt_log[0].http_status, 200);
  EXPECT_TRUE(contains(out.attempt_log[0].error, "not JSON")) << out.attempt_log[0].error;
  EXPECT_TRUE(contains(out.attempt_log[1].error, "truncated")) << out.attempt_log[1].error;
  EXPECT_EQ(out.reply->content, "echo: hello");
}

TEST_F(ChatHttp, MalformedEveryTimeFailsAfterAllAttempts) {
  start(with_faults("malformed,malformed,malformed,malformed"));
  ChatClient client(settings());
  ChatOutcome out = call(client, request_bytes("hello"));
  EXPECT_FALSE(out.ok);
  EXPECT_EQ(out.attempts, 4);
  EXPECT_FALSE(out.reply.has_value());
  EXPECT_TRUE(contains(out.failure, "malformed reply after 4 attempts")) << out.failure;
  EXPECT_FALSE(out.unreachable) << "the server answered";
  EXPECT_EQ(out.body, "<html><body>upstream hiccup</body></html>");
}

TEST_F(ChatHttp, Http400IsNotRetried) {
  start(with_faults("400"));
  ChatClient client(settings());
  ChatOutcome out = call(client, request_bytes("hello"));
  EXPECT_FALSE(out.ok);
  EXPECT_EQ(out.attempts, 1);
  EXPECT_EQ(out.http_status, 400);
  EXPECT_TRUE(contains(out.failure, "HTTP 400 (not retried): injected fault 400: bad request")) << out.failure;
  EXPECT_EQ(server_->requests(), 1);
}

TEST_F(ChatHttp, HangTimesOutThenRetrySucceeds) {
  start(with_faults("hang:30"));
  ChatSettings s = settings();
  s.timeout_s = 0.3;
  ChatClient client(s);
  ChatOutcome out = call(client, request_bytes("hello"));
  ASSERT_TRUE(out.ok) << out.failure;
  EXPECT_EQ(out.attempts, 2);
  EXPECT_EQ(out.attempt_log[0].http_status, 0);
  EXPECT_TRUE(contains(out.attempt_log[0].error, "timeout")) << out.attempt_log[0].error;
  EXPECT_LT(out.latency_s, 5);
}

TEST_F(ChatHttp, DeadlineEndsTheCall) {
  start(with_faults("hang:30,hang:30,hang:30,hang:30,hang:30,hang:30"));
  ChatSettings s = settings();
  s.timeout_s = 0.3;
  s.deadline_s = 0.8;
  s.retries = 10;
  ChatClient client(s);
  ChatOutcome out = call(client, request_bytes("hello"));
  EXPECT_FALSE(out.ok);
  EXPECT_GE(out.attempts, 2);
  EXPECT_TRUE(contains(out.failure, "deadline of 0.8 s reached")) << out.failure;
  EXPECT_FALSE(out.unreachable) << "the server took the requests";
  EXPECT_TRUE(contains(out.failure, "timeout")) << out.failure;
  EXPECT_LT(out.latency_s, 0.8 + 0.5);
}

TEST_F(ChatHttp, ARetryAfterBeyondTheDeadlineEndsTheCallWithoutWaiting) {
  start(with_faults("429:30"));
  ChatSettings s = settings();
  s.deadline_s = 5;
  ChatClient client(s);
  ChatOutcome out = call(client, request_bytes("hello"));
  EXPECT_FALSE(out.ok);
  EXPECT_EQ(out.attempts, 1);
  EXPECT_TRUE(contains(out.failure, "deadline of 5 s reached after 1 attempt (next wait 30 s)")) << out.failure;
  EXPECT_TRUE(contains(out.failure, "HTTP 429")) << out.failure;
  EXPECT_LT(out.latency_s, 2);
}

TEST_F(ChatHttp, WrongApiKeyIs401NotRetriedAndNeverEchoed) {
  const std::string secret = "sk-wrong-0123456789abcdef";
  ChatServerOptions keyed;
  keyed.api_key = "sk-right-key";
  start(keyed);
  ChatSettings s = settings();
  s.api_key = secret;
  ChatClient client(s);
  ChatOutcome out = call(client, request_bytes("hello"));
  EXPECT_FALSE(out.ok);
  EXPECT_EQ(out.attempts, 1);
  EXPECT_EQ(out.http_status, 401);
  EXPECT_TRUE(contains(out.failure, "HTTP 401 (not retried)")) << out.failure;
  EXPECT_FALSE(contains(out.failure, secret));
  EXPECT_FALSE(contains(out.body, secret));
  EXPECT_FALSE(contains(out.attempt_log[0].error, secret));
  auto models = list_models(s);
  ASSERT_FALSE(models.ok());
  EXPECT_TRUE(contains(models.status().message(), "401"));
  EXPECT_FALSE(contains(models.status().message(), secret));

  s.api_key = "sk-right-key";
  ChatClient good(s);
  EXPECT_TRUE(call(good, request_bytes("hello")).ok);
  models = list_models(s);
  ASSERT_TRUE(models.ok()) << models.status().to_string();
  EXPECT_EQ(*models, std::vector<std::string>{"vinci-echo"});
}

TEST_F(ChatHttp, NoToolCallFaultIsAnOkReplyThatTheParserRejects) {
  start(with_faults("no_tool_call"));
  ChatClient client(settings());
  ChatOutcome out = call(client, request_bytes("pick skills", /*tools=*/true));
  ASSERT_TRUE(out.ok) << out.failure;
  EXPECT_TRUE(out.reply->tool_calls.empty());
  EXPECT_FALSE(parse_select_skills(chat_reply_text(*out.reply), {"online_softmax"}).ok());
}

TEST_F(ChatHttp, ConnectionRefusedIsRetriedThenFails) {
  start();
  ChatSettings s = settings();
  s.retries = 2;
  server_->stop();
  ChatClient client(s);
  ChatOutcome out = call(client, request_bytes("hello"));
  EXPECT_FALSE(out.ok);
  EXPECT_EQ(out.attempts, 3);
  EXPECT_EQ(out.http_status, 0);
  EXPECT_TRUE(contains(out.failure, "connection error after 3 attempts")) << out.failure;
  EXPECT_TRUE(out.unreachable);
}

TEST_F(ChatHttp, ConcurrentCallsAllSucceed) {
  start();
  ChatClient client(settings());
  std::atomic<int> ok{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 10; ++i) {
        std::string text = "t" + std::to_string(t) + " c" + std::to_string(i);
        auto r = client.complete(request_bytes(text), key(t * 100 + i));
        if (r.ok() && r->ok && r->reply->content == "echo: " + text) ++ok;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(ok.load(), 80);
  EXPECT_EQ(server_->requests(), 80);
}

TEST_F(ChatHttp, StopWakesAHangingRequest) {
  start(with_faults("hang:30"));
  ChatSettings s = settings();
  s.timeout_s = 20;
  s.retries = 0;
  ChatClient client(s);
  ChatOutcome out;
  std::thread caller([&] { out = call(client, request_bytes("hello")); });
  while (server_->requests() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  auto t0 = std::chrono::steady_clock::now();
  server_->stop();
  EXPECT_LT(seconds_since(t0), 3);
  caller.join();
  EXPECT_FALSE(out.ok);
  EXPECT_LT(out.latency_s, 5);
}

TEST_F(ChatHttp, HandlerErrorsBecomeHttpErrors) {
  start({}, [](const json&) -> Result<ChatAnswer> { return invalid_argument("no such tool"); });
  ChatClient client(settings());
  ChatOutcome out = call(client, request_bytes("hello"));
  EXPECT_FALSE(out.ok);
  EXPECT_EQ(out.http_status, 400);
  EXPECT_TRUE(contains(out.failure, "no such tool")) << out.failure;
}

TEST_F(ChatHttp, UnusableSettingsAreAStatusError) {
  start();
  ChatSettings s = settings();
  s.base_url = "ftp://example";
  ChatClient client(s);
  auto r = client.complete(request_bytes("hello"), key(0));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(server_->requests(), 0);
  // A port lookup that came back empty, a port out of range, no host: refused before any request.
  for (const char* url :
       {"http://127.0.0.1:/v1", "http://127.0.0.1:70000/v1", "http://:8000/v1", "http://127.0.0.1:80a/v1"}) {
    s.base_url = url;
    Status st = check_chat_settings(s);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << url;
    EXPECT_NE(st.message().find(url), std::string::npos) << st.message();
  }
  for (const char* url :
       {"http://127.0.0.1:8000/v1", "https://api.example.com/v1", "http://[::1]:8000/v1", "http://localhost/v1"}) {
    s.base_url = url;
    EXPECT_TRUE(check_chat_settings(s).ok()) << url << ": " << check_chat_settings(s).to_string();
  }
}

// ----- the server's limits on connections --------------------------------------------------------

// A socket connected to the server on loopback, or -1.
int connect_to(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// Everything the server sends until it closes the connection (an event, not a timer).
std::string read_until_closed(int fd) {
  std::string out;
  char buf[4096];
  for (;;) {
    ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

// The log lines a server writes, kept for the test.
struct LogLines {
  std::mutex mu;
  std::vector<std::string> lines;
  std::function<void(const std::string&)> sink() {
    return [this](const std::string& line) {
      std::lock_guard<std::mutex> lock(mu);
      lines.push_back(line);
    };
  }
  std::string text() {
    std::lock_guard<std::mutex> lock(mu);
    std::string out;
    for (const auto& l : lines) out += l + "\n";
    return out;
  }
};

// A client that trickles its request past the read deadline gets a 408 with a JSON body, and one
// that connects and sends nothing is closed after first_request_seconds with a log line: neither
// holds a worker for good, neither is dropped without a word.
TEST_F(ChatHttp, ASlowRequestIsAnswered408AndASilentConnectionIsLogged) {
  LogLines log;
  ChatServerOptions options;
  options.limits.first_request_seconds = 1;
  options.limits.request_read_seconds = 1;
  options.log = log.sink();
  start(options);
  int fd = connect_to(server_->port());
  ASSERT_GE(fd, 0);
  // Half a request line; the rest never comes.
  ASSERT_EQ(send(fd, "POST /v1/chat", 13, MSG_NOSIGNAL), 13);
  std::string reply = read_until_closed(fd);
  close(fd);
  EXPECT_EQ(reply.rfind("HTTP/1.1 408", 0), 0u) << reply;
  std::string body = reply.substr(reply.find("\r\n\r\n") + 4);
  json j = json::parse(body, nullptr, false);
  ASSERT_TRUE(j.is_object()) << reply;
  EXPECT_EQ(j["error"]["message"], "the request was not received in full within 1 s") << reply;

  // Headers in full, the body cut short.
  fd = connect_to(server_->port());
  ASSERT_GE(fd, 0);
  std::string head = "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"mess";
  ASSERT_EQ(send(fd, head.data(), head.size(), MSG_NOSIGNAL), static_cast<ssize_t>(head.size()));
  reply = read_until_closed(fd);
  close(fd);
  EXPECT_EQ(reply.rfind("HTTP/1.1 408", 0), 0u) << reply;
  EXPECT_TRUE(contains(reply, "not received in full within 1 s")) << reply;

  fd = connect_to(server_->port());
  ASSERT_GE(fd, 0);
  EXPECT_EQ(read_until_closed(fd), "");
  close(fd);
  std::string lines = log.text();
  EXPECT_TRUE(contains(lines, "chat server: 408 from 127.0.0.1:")) << lines;
  EXPECT_TRUE(contains(lines, "chat server: 408 POST /v1/chat/completions from 127.0.0.1:")) << lines;
  EXPECT_TRUE(contains(lines, ": no request within 1 s of connecting")) << lines;
}

// 200 clients at once, ten calls each, no retries: every call answered 200 (the server has 64
// workers, so most connections wait in its queue before a worker reads them).
TEST_F(ChatHttp, TwoHundredConcurrentClientsAreAllAnswered) {
  LogLines log;
  ChatServerOptions options;
  options.log = log.sink();
  start(options);
  ChatSettings s = settings();
  s.retries = 0;
  s.timeout_s = 120;
  s.deadline_s = 240;
  std::atomic<int> ok{0};
  std::vector<std::string> failures(200);
  std::vector<std::thread> clients;
  for (int c = 0; c < 200; ++c) {
    clients.emplace_back([&, c] {
      ChatClient client(s);
      for (int i = 0; i < 10; ++i) {
        auto r = client.complete(request_bytes("hello " + std::to_string(c)), key(c * 10 + i));
        if (r.ok() && r->ok) {
          ++ok;
        } else {
          failures[c] = r.ok() ? r->failure : r.status().to_string();
        }
      }
    });
  }
  for (auto& t : clients) t.join();
  EXPECT_EQ(ok.load(), 2000);
  for (int c = 0; c < 200; ++c) EXPECT_TRUE(failures[c].empty()) << "client " << c << ": " << failures[c];
  EXPECT_EQ(server_->requests(), 2000);
  EXPECT_EQ(log.text(), "");
}

}  // namespace
}  // namespace vinci

namespace vinci {
namespace {

// Every chat completion vLLM 0.32.0 answered in tests/llm/data/vllm_cases.jsonl (real bodies: ids,
// timestamps, nulls): the record keeps the meaning, drops the envelope, parses as the body does,
// and is a fixed point.
TEST(CanonicalReply, RealVllmBodiesKeepTheirMeaningAndLoseTheirEnvelope) {
  std::ifstream in(std::string(VINCI_SOURCE_DIR) + "/tests/llm/data/vllm_cases.jsonl");
  ASSERT_TRUE(in.good());
  std::string line;
  int bodies = 0, with_tools = 0;
  while (std::getline(in, line)) {
    nlohmann::json ex = nlohmann::json::parse(line);
    if (ex["path"] != "/v1/chat/completions" || ex["status"] != 200) continue;
    const std::string body = ex["response_body"].get<std::string>();
    if (body.rfind("data:", 0) == 0) continue;  // a stream
    ++bodies;
    Result<std::string> record = canonical_chat_reply(body);
    ASSERT_TRUE(record.ok()) << record.status().to_string();
    Result<std::string> again = canonical_chat_reply(*record);
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(*again, *record) << "not a fixed point";
    for (const char* gone : {"\"id\"", "\"created\"", "system_fingerprint", "chatcmpl-", "prompt_logprobs", "metrics"})
      EXPECT_EQ(record->find(gone), std::string::npos) << gone << " in " << *record;
    Result<ChatReply> a = parse_chat_reply(body), b = parse_chat_reply(*record);
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_EQ(a->content, b->content);
    EXPECT_EQ(a->reasoning, b->reasoning);
    EXPECT_EQ(a->finish_reason, b->finish_reason);
    EXPECT_EQ(a->prompt_tokens, b->prompt_tokens);
    EXPECT_EQ(a->completion_tokens, b->completion_tokens);
    ASSERT_EQ(a->tool_calls.size(), b->tool_calls.size());
    for (size_t i = 0; i < a->tool_calls.size(); ++i) {
      EXPECT_EQ(a->tool_calls[i].name, b->tool_calls[i].name);
      EXPECT_EQ(a->tool_calls[i].arguments, b->tool_calls[i].arguments);
      EXPECT_EQ(b->tool_calls[i].id, "") << "a tool call's id is the server's draw";
    }
    with_tools += a->tool_calls.empty() ? 0 : 1;
    nlohmann::json envelope = chat_reply_envelope(body);
    EXPECT_TRUE(envelope.contains("id") && envelope.contains("created") && envelope.contains("system_fingerprint"))
        << envelope.dump();
    if (!a->tool_calls.empty()) {
      EXPECT_TRUE(envelope.contains("tool_call_ids")) << envelope.dump();
    }
  }
  EXPECT_GE(bodies, 5);
  EXPECT_GE(with_tools, 1);
}

TEST(CanonicalReply, TwoEnvelopesOneRecord) {
  const std::string a =
      R"({"id":"chatcmpl-1","created":1,"system_fingerprint":"fp_a","model":"m","choices":[{"index":0,)"
      R"("message":{"role":"assistant","content":"hi","tool_calls":[{"id":"call_1","type":"function",)"
      R"("function":{"name":"f","arguments":"{}"}}]},"finish_reason":"tool_calls","logprobs":null}],)"
      R"("usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5,"prompt_tokens_details":{"cached_tokens":0}}})";
  const std::string b =
      R"({"created":99,"id":"chatcmpl-2","model":"m","system_fingerprint":"fp_b","choices":[{"finish_reason":)"
      R"("tool_calls","index":0,"message":{"content":"hi","role":"assistant","tool_calls":[{"function":{"arguments":)"
      R"("{}","name":"f"},"id":"call_2","type":"function"}]}}],"usage":{"completion_tokens":2,"prompt_tokens":3,)"
      R"("total_tokens":5,"prompt_tokens_details":{"cached_tokens":3}}})";
  EXPECT_EQ(*canonical_chat_reply(a), *canonical_chat_reply(b));
  // A different meaning is a different record.
  std::string c = b;
  c.replace(c.find("\"hi\""), 4, "\"ho\"");
  EXPECT_NE(*canonical_chat_reply(a), *canonical_chat_reply(c));
  EXPECT_EQ(chat_reply_envelope(b)["usage"]["prompt_tokens_details"]["cached_tokens"], 3);
  EXPECT_FALSE(canonical_chat_reply("[1,2]").ok());
}

}  // namespace
}  // namespace vinci

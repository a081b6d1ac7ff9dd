// `harness serve` against real clients on loopback: curl for whole requests, a raw socket for a
// client that connects and waits. Every malformed request gets a 4xx with an OpenAI-style JSON
// error body and a log line; a 50 MB body is refused with 413 and its memory is not kept; a
// client that sends its first request late is still answered.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/atomic_file.h"
#include "tests/cli_test_util.h"

namespace vinci {
namespace {

using nlohmann::json;
const std::string kHarness = std::string(VINCI_BINARY_DIR) + "/bin/harness";
const std::string kLibrary = std::string(VINCI_SOURCE_DIR) + "/experiments/seed_skills.jsonl";
using clitest::sh;

// `harness serve --port 0` in the background, stdout and stderr in DIR/serve.out. The
// constructor returns once the server printed its port, or exited (a failure naming its exit
// status and output), however long its start takes.
class Serve {
 public:
  explicit Serve(const std::string& dir) {
    if (!child_.start({kHarness, "serve", "--port", "0", "--library", kLibrary}, dir + "/serve.out")) {
      ADD_FAILURE() << child_.why();
      return;
    }
    std::vector<std::string> m;
    if (!child_.wait_for(std::regex("listening on [^:\\s]+:(\\d+)"), &m)) {
      ADD_FAILURE() << child_.why();
      return;
    }
    port_ = std::stoi(m[1]);
  }
  ~Serve() { child_.stop(SIGTERM); }
  int port() const { return port_; }
  std::string url(const std::string& path = "/v1/chat/completions") const {
    return "http://127.0.0.1:" + std::to_string(port_) + path;
  }
  // What the server printed so far: a line it wrote may still be in the pipe.
  std::string log() const { return child_.output(); }
  // SIGTERM; then everything the server printed (whole: it has exited).
  std::string stop_and_log() {
    child_.stop(SIGTERM);
    return child_.output();
  }
  // The server's resident memory in KiB, from /proc.
  long rss_kib() const {
    std::ifstream in("/proc/" + std::to_string(child_.pid()) + "/status");
    std::string line;
    while (std::getline(in, line)) {
      if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
    }
    return -1;
  }

 private:
  clitest::Child child_;
  int port_ = 0;
};

struct Reply {
  int status = 0;
  std::string body;
};

// POSTs the file's bytes with curl; the status and the body.
Reply post_file(const Serve& s, const std::string& dir, const std::string& file, const std::string& extra = "") {
  std::string out;
  std::string cmd = "curl -s -o " + dir + "/reply -w '%{http_code}' -H 'Content-Type: application/json' " + extra +
                    " --data-binary @" + file + " " + s.url();
  EXPECT_EQ(sh(cmd, &out), 0) << cmd << ": " << out;
  Reply r;
  r.status = std::atoi(out.c_str());
  auto body = read_file(dir + "/reply");
  r.body = body.ok() ? *body : "";
  return r;
}

Reply post(const Serve& s, const std::string& dir, const std::string& body) {
  EXPECT_TRUE(write_file_atomic(dir + "/body", body, false).ok());
  return post_file(s, dir, dir + "/body");
}

// The message of an OpenAI-style error body; "" when the body is not one.
std::string error_message(const std::string& body) {
  json j = json::parse(body, nullptr, false);
  if (!j.is_object() || !j.contains("error") || !j["error"].is_object() || !j["error"].contains("message") ||
      !j["error"]["message"].is_string())
    return "";
  return j["error"]["message"].get<std::string>();
}

const std::string kGood =
    R"({"model":"m","messages":[{"role":"user","content":"Task L1_019: ReLU\nSizes (small)\nwrite a kernel"}]})";

TEST(HarnessServe, A50MBBodyIsRefusedWith413AndItsMemoryIsNotKept) {
  std::string dir = clitest::temp_dir("vinci_serve_");
  Serve s(dir);
  ASSERT_GT(s.port(), 0) << s.log();
  ASSERT_EQ(post(s, dir, kGood).status, 200) << s.log();
  long before = s.rss_kib();
  ASSERT_GT(before, 0);
  {
    std::ofstream big(dir + "/big");
    std::string chunk = R"({"role":"user","content":")" + std::string(1 << 20, 'x') + "\"},";
    big << R"({"messages":[)";
    for (int i = 0; i < 50; ++i) big << chunk;
    big << R"({"role":"user","content":"end"}]})";
  }
  for (const char* how : {"", "-H 'Transfer-Encoding: chunked'"}) {
    Reply r = post_file(s, dir, dir + "/big", how);
    EXPECT_EQ(r.status, 413) << how << ": " << r.body;
    EXPECT_NE(error_message(r.body).find("over the limit of 16777216 bytes"), std::string::npos)
        << how << ": " << r.body;
  }
  long after = s.rss_kib();
  // The limit is 16 MiB: a body kept whole would add 50 MiB, two of them 100.
  EXPECT_LT(after - before, 40 * 1024) << "RSS before " << before << " KiB, after " << after << " KiB";
  EXPECT_EQ(post(s, dir, kGood).status, 200);
  std::string log = s.stop_and_log();
  EXPECT_NE(log.find("chat server: 413 POST /v1/chat/completions from 127.0.0.1:"), std::string::npos) << log;
}

TEST(HarnessServe, MalformedRequestsAreAnswered4xxWithAJsonBodyAndALogLine) {
  std::string dir = clitest::temp_dir("vinci_serve_");
  Serve s(dir);
  ASSERT_GT(s.port(), 0) << s.log();
  const std::string deep = R"({"messages":)" + std::string(100000, '[') + std::string(100000, ']') + "}";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"messages":[{"role":5,"content":"x"}]})", "messages[0].role: expected a string, found number"},
      {R"({"messages":[{"role":"user","content":{"a":1}}]})",
       "messages[0].content: expected a string, null or a list of parts, found object"},
      {R"({"messages":[{"role":"user","content":"x"},7]})", "messages[1]: expected an object, found number"},
      {R"({"messages":[{"content":"x"}]})", "messages[0].role: expected a string, found nothing"},
      {deep, "request body nests deeper than 64 levels of brackets"},
      {"not json", "request body is not a JSON object"},
      {R"({"messages":"hi"})", "request has no messages list"},
  };
  for (const auto& [body, want] : cases) {
    Reply r = post(s, dir, body);
    EXPECT_EQ(r.status, 400) << body.substr(0, 80) << ": " << r.body;
    EXPECT_EQ(error_message(r.body), want) << body.substr(0, 80) << ": " << r.body;
  }
  std::string out;
  ASSERT_EQ(sh("curl -s -w ' %{http_code}' " + s.url("/v1/nothing"), &out), 0) << out;
  EXPECT_NE(out.find(" 404"), std::string::npos) << out;
  EXPECT_NE(error_message(out.substr(0, out.rfind(' '))).find("no such endpoint"), std::string::npos) << out;
  // And the server still answers.
  EXPECT_EQ(post(s, dir, kGood).status, 200) << s.log();
  // Every refusal is logged, with its message.
  std::string log = s.stop_and_log();
  for (const auto& c : cases) EXPECT_NE(log.find("from 127.0.0.1:"), std::string::npos) << c.second;
  for (const auto& c : cases) EXPECT_NE(log.find(": " + c.second + "\n"), std::string::npos) << c.second << "\n" << log;
  EXPECT_NE(log.find("chat server: 400 POST /v1/chat/completions from 127.0.0.1:"), std::string::npos) << log;
  EXPECT_NE(log.find("messages[0].role: expected a string, found number"), std::string::npos) << log;
  EXPECT_NE(log.find("chat server: 404 GET /v1/nothing"), std::string::npos) << log;
}

// A server that cannot start is a failure that names its exit status and says what it printed, at
// once: the test waits on its output, which ends when it exits, not on a clock.
TEST(HarnessServe, AServerThatCannotStartSaysHowItExitedAndWhatItPrinted) {
  std::string dir = clitest::temp_dir("vinci_serve_");
  clitest::Child child;
  ASSERT_TRUE(child.start({kHarness, "serve", "--port", "0", "--faults", "sometimes"}, dir + "/serve.out"))
      << child.why();
  EXPECT_FALSE(child.wait_for(std::regex("listening on ")));
  const std::string why = child.why();
  EXPECT_NE(why.find(kHarness + " serve --port 0 --faults sometimes exited with status 2 before it printed the line"),
            std::string::npos)
      << why;
  EXPECT_NE(why.find("harness serve: --faults: "), std::string::npos) << why;
  EXPECT_EQ(read_file(dir + "/serve.out").value(), child.output());
  int st = child.wait();
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 2) << clitest::describe_wait_status(st);
}

// A child that prints far more than a pipe holds never blocks on it (a thread drains it), and a
// line after all that is seen.
TEST(ChildProcess, OneThatPrintsALotNeverBlocksAndItsLastLineIsSeen) {
  clitest::Child child;
  ASSERT_TRUE(child.start({"/bin/sh", "-c", "yes 'a line of output' | head -n 200000; echo the end >&2"}))
      << child.why();
  ASSERT_TRUE(child.wait_for(std::regex("the end\n"))) << child.why().substr(0, 200);
  int st = child.wait();
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << clitest::describe_wait_status(st);
  EXPECT_EQ(child.output().size(), 200000u * 17 + 8);
}

// A socket connected to the server.
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

// Everything the server sends until it closes the connection.
std::string read_all(int fd) {
  std::string out;
  char buf[4096];
  for (;;) {
    ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

// The keep-alive timeout (2 s) applied to the first request too: a client that sent 2 s after
// connecting was closed without a reply.
TEST(HarnessServe, AClientThatSendsItsFirstRequestLateIsAnswered) {
  std::string dir = clitest::temp_dir("vinci_serve_");
  Serve s(dir);
  ASSERT_GT(s.port(), 0) << s.log();
  int fd = connect_to(s.port());
  ASSERT_GE(fd, 0);
  // The slow client of the scenario, not a deadline: it sends after the keep-alive wait.
  std::this_thread::sleep_for(std::chrono::milliseconds(3000));
  std::string req =
      "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
      "Connection: close\r\nContent-Length: " +
      std::to_string(kGood.size()) + "\r\n\r\n" + kGood;
  ASSERT_EQ(send(fd, req.data(), req.size(), MSG_NOSIGNAL), static_cast<ssize_t>(req.size()));
  std::string reply = read_all(fd);
  close(fd);
  EXPECT_EQ(reply.rfind("HTTP/1.1 200", 0), 0u) << "reply: '" << reply.substr(0, 200) << "'\n" << s.log();
}

}  // namespace
}  // namespace vinci

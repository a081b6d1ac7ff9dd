// `harness serve` against real clients on loopback: curl for whole requests, a raw socket for a
// client that connects and waits. Every malformed request gets a 4xx with an OpenAI-style JSON
// error body and a log line; a 50 MB body is refused with 413 and its memory is not kept; a
// client that sends its first request late is still answered.
#include <arpa/inet.h>
#include <fcntl.h>
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

// `harness serve --port 0` in the background, stdout and stderr in DIR/serve.out.
class Serve {
 public:
  explicit Serve(const std::string& dir) : log_(dir + "/serve.out") {
    pid_ = fork();
    if (pid_ == 0) {
      int fd = open(log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dup2(fd, 1);
      dup2(fd, 2);
      close(fd);
      execl(kHarness.c_str(), "harness", "serve", "--port", "0", "--library", kLibrary.c_str(),
            static_cast<char*>(nullptr));
      _exit(127);
    }
    // Waits for the port line (or the server's exit), however long the start takes.
    const std::regex listening("listening on [^:\\s]+:(\\d+)");
    for (;;) {
      auto text = read_file(log_);
      std::smatch m;
      if (text.ok() && std::regex_search(*text, m, listening)) {
        port_ = std::stoi(m[1]);
        return;
      }
      int st;
      if (waitpid(pid_, &st, WNOHANG) == pid_) {
        pid_ = -1;
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  ~Serve() {
    if (pid_ > 0) {
      kill(pid_, SIGTERM);
      waitpid(pid_, nullptr, 0);
    }
  }
  int port() const { return port_; }
  std::string url(const std::string& path = "/v1/chat/completions") const {
    return "http://127.0.0.1:" + std::to_string(port_) + path;
  }
  std::string log() const {
    auto text = read_file(log_);
    return text.ok() ? *text : std::string();
  }
  // The server's resident memory in KiB, from /proc.
  long rss_kib() const {
    std::ifstream in("/proc/" + std::to_string(pid_) + "/status");
    std::string line;
    while (std::getline(in, line)) {
      if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
    }
    return -1;
  }

 private:
  std::string log_;
  pid_t pid_ = -1;
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
  std::string log = s.log();
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
  // Every refusal is logged, with its message.
  std::string log = s.log();
  for (const auto& c : cases) EXPECT_NE(log.find("from 127.0.0.1:"), std::string::npos) << c.second;
  for (const auto& c : cases) EXPECT_NE(log.find(": " + c.second + "\n"), std::string::npos) << c.second << "\n" << log;
  EXPECT_NE(log.find("chat server: 400 POST /v1/chat/completions from 127.0.0.1:"), std::string::npos) << log;
  EXPECT_NE(log.find("messages[0].role: expected a string, found number"), std::string::npos) << log;
  EXPECT_NE(log.find("chat server: 404 GET /v1/nothing"), std::string::npos) << log;
  // And the server still answers.
  EXPECT_EQ(post(s, dir, kGood).status, 200) << s.log();
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

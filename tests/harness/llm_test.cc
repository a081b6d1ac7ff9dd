// Language-model runs end to end against a real `harness serve` on loopback (no mocks): a run is
// recorded and verifies with the server gone; one seed and one server give one digest; faults
// are retried without a trace in the records, and calls that still fail are recorded turns
// without a candidate; a killed run resumes asking the server only what its log does not hold;
// an API key works and is written nowhere. And in process: prompt templates, a policy reply that
// does not parse, and the recorded transport that answers replay.
//
// The endpoint is part of every LlmReply record, so runs whose digests are compared talk to
// servers on one address: a "fresh" server is a new process on the port the first one had.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <capnp/message.h>
#include <nlohmann/json.hpp>

#include "agents/skill_library.h"
#include "core/atomic_file.h"
#include "core/hash.h"
#include "core/rng.h"
#include "gpu/task.h"
#include "harness/chat_server.h"
#include "harness/llm_agents.h"
#include "recorder/address.h"
#include "recorder/object_store.h"
#include "recorder/run.h"
#include "recorder/vinci.capnp.h"
#include "tests/cli_test_util.h"

namespace vinci {
namespace {

using clitest::sh;
using nlohmann::json;

const std::string kBin = std::string(VINCI_BINARY_DIR) + "/bin/";
const std::string kHarness = kBin + "harness";
const std::string kReplay = kBin + "replay";
const std::string kSmoke = std::string(VINCI_SOURCE_DIR) + "/experiments/llm_smoke.toml";
constexpr uint64_t kSmokeSeed = 11;  // llm_smoke.toml's run.seed

// A new folder under /tmp, removed at the end of a test that passed (kept for a look otherwise).
class TempDir {
 public:
  TempDir() : path_(clitest::temp_dir("vinci_llm_")) {}
  ~TempDir() {
    std::string out;
    if (!::testing::Test::HasFailure()) sh("rm -rf " + path_, &out);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool exists(const std::string& path) {
  struct stat sb;
  return ::stat(path.c_str(), &sb) == 0;
}

int64_t file_size(const std::string& path) {
  struct stat sb;
  return ::stat(path.c_str(), &sb) == 0 ? static_cast<int64_t>(sb.st_size) : -1;
}

bool starts_with(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }
bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

size_t count_of(const std::string& s, const std::string& part) {
  size_t n = 0;
  for (size_t at = s.find(part); at != std::string::npos; at = s.find(part, at + part.size())) ++n;
  return n;
}

std::string digest_of(const std::string& run) {
  auto m = read_manifest(run + "/manifest.bin");
  if (!m.ok()) return "(no manifest: " + m.status().to_string() + ")";
  if (!m->completed) return "(incomplete)";
  return m->run_digest.hex();
}

bool completed(const std::string& run) {
  auto m = read_manifest(run + "/manifest.bin");
  return m.ok() && m->completed;
}

// The run's records as `replay cat` prints them, one JSON object each. The log of a killed run
// may end in a torn frame (the kill landed in the middle of a write; `harness run --resume`
// truncates it), which `replay cat` reports on stderr and in its exit status: with `killed`, that
// ending, and only it, is accepted.
std::vector<json> records_of(const std::string& run, bool killed = false) {
  std::string out;
  std::vector<json> recs;
  const std::string err_file = run + ".cat_stderr";
  int rc = sh("(" + kReplay + " cat " + run + " --no-manifest 2>" + err_file + ")", &out);
  std::string err = slurp(err_file);
  bool torn_tail = killed && contains(err, "torn frame") && count_of(err, "\n") <= 1;
  if (rc != 0 && !torn_tail) {
    ADD_FAILURE() << "replay cat " << run << " (exit " << rc << "):\n" << err << out;
    return recs;
  }
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) {
      ADD_FAILURE() << "replay cat printed a line that is not JSON: " << line;
      continue;
    }
    recs.push_back(std::move(j));
  }
  return recs;
}

std::vector<json> of_kind(const std::vector<json>& recs, const std::string& kind) {
  std::vector<json> out;
  for (const json& r : recs) {
    if (r.contains(kind)) out.push_back(r);
  }
  return out;
}

struct ServeCounts {
  long long requests = -1;  // -1: the server did not report (it did not stop cleanly)
  long long faults = -1;
};

// `harness serve --port PORT ARGS...` in the background; its output (stdout and stderr) goes to a
// file in `dir`. `env` entries ("NAME=VALUE") are added to its environment alone. The constructor
// returns once the server printed its port, or exited (a failure naming its exit status), however
// long its start takes: it waits on the server's output, not on a clock.
class Serve {
 public:
  Serve(const std::string& dir, int port, const std::vector<std::string>& args = {},
        const std::vector<std::string>& env = {}) {
    static int serial = 0;
    std::vector<std::string> argv = {kHarness, "serve", "--port", std::to_string(port)};
    argv.insert(argv.end(), args.begin(), args.end());
    if (!child_.start(argv, dir + "/serve" + std::to_string(++serial) + ".out", env)) {
      ADD_FAILURE() << child_.why();
      return;
    }
    static const std::regex listening(R"(listening on [^\s:]+:(\d+))");
    std::vector<std::string> m;
    if (!child_.wait_for(listening, &m)) {
      ADD_FAILURE() << child_.why();
      return;
    }
    port_ = std::stoi(m[1]);
    std::printf("harness serve %s on port %d\n", chat_args(args).c_str(), port_);
  }
  Serve(const Serve&) = delete;
  Serve& operator=(const Serve&) = delete;
  ~Serve() { stop(); }

  bool up() const { return port_ > 0 && child_.running(); }
  int port() const { return port_; }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_) + "/v1"; }
  std::string log() const { return child_.output(); }

  // SIGTERM, then what the server said of its requests.
  ServeCounts stop() {
    if (stopped_ || port_ <= 0) return counts_;  // never up: the constructor said why
    stopped_ = true;
    int st = child_.stop(SIGTERM);
    if (st < 0) {
      ADD_FAILURE() << child_.why();
      return counts_;
    }
    static const std::regex summary(R"(harness serve: (\d+) requests, (\d+) faults injected)");
    std::smatch m;
    std::string text = child_.output();
    if (std::regex_search(text, m, summary)) {
      counts_.requests = std::stoll(m[1].str());
      counts_.faults = std::stoll(m[2].str());
    } else {
      ADD_FAILURE() << "harness serve did not report its requests (it " << clitest::describe_wait_status(st) << "):\n"
                    << text;
    }
    std::printf("harness serve on port %d: %lld requests, %lld faults injected\n", port_, counts_.requests,
                counts_.faults);
    return counts_;
  }

 private:
  static std::string chat_args(const std::vector<std::string>& args) {
    std::string s;
    for (const auto& a : args) s += (s.empty() ? "" : " ") + a;
    return s.empty() ? "(no options)" : s;
  }

  clitest::Child child_;
  int port_ = 0;
  bool stopped_ = false;
  ServeCounts counts_;
};

// The `harness run` command of llm_smoke against `url` into root/name (test-time scaling off
// unless `extra` turns it on).
std::string run_cmd(const std::string& url, const std::string& root, const std::string& name,
                    const std::string& extra = "") {
  return kHarness + " run " + kSmoke + " --out " + root + " --name " + name + " --set backbone.base_url=" + url +
         " --set tts.enabled=false" + extra;
}

// Starts a shell command in the background (exec'd, so the pid is the command's); output to log.
pid_t spawn(const std::string& cmd, const std::string& log) {
  std::string line = "exec " + cmd + " >" + log + " 2>&1";
  pid_t pid = fork();
  if (pid == 0) {
    execl("/bin/sh", "sh", "-c", line.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  return pid;
}

// Kills (SIGKILL) the run `pid` writes into `run` once its log segment holds records beyond the
// header, i.e. once the first buffer of records reached the file. False when the run ended first,
// or was still running without that after clitest::kHangGuardS (a hang guard, not a deadline: the
// file is looked at every 2 ms for as long as the run lives).
bool kill_once_logged(pid_t pid, const std::string& run) {
  const std::string segment = run + "/log/00000000.vlog";
  auto guard = std::chrono::steady_clock::now() + std::chrono::seconds(clitest::kHangGuardS);
  while (std::chrono::steady_clock::now() < guard) {
    int st;
    if (waitpid(pid, &st, WNOHANG) == pid) return false;
    if (file_size(segment) > 4096) {
      kill(pid, SIGKILL);
      waitpid(pid, &st, 0);
      return WIFSIGNALED(st);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  ADD_FAILURE() << "the run into " << run << " wrote no records in " << clitest::kHangGuardS
                << " s (the test's hang guard)";
  kill(pid, SIGKILL);
  int st;
  waitpid(pid, &st, 0);
  return false;
}

// ---- runs against `harness serve`

TEST(LlmRun, RecordedAndVerifiedWithoutServer) {
  TempDir tmp;
  std::string root = tmp.path(), out;
  std::printf("run.seed %llu, folder %s\n", static_cast<unsigned long long>(kSmokeSeed), root.c_str());
  Serve serve(root, 0);
  ASSERT_TRUE(serve.up()) << serve.log();
  // The whole smoke experiment, test-time scaling included.
  ASSERT_EQ(sh(run_cmd(serve.url(), root, "llm_smoke", " --set tts.enabled=true"), &out), 0) << out;
  ServeCounts served = serve.stop();
  const std::string run = root + "/llm_smoke";
  ASSERT_TRUE(completed(run)) << out;
  EXPECT_NE(served.requests, 0);
  EXPECT_EQ(served.faults, 0);

  // The server is gone: replies come from the log.
  ASSERT_EQ(sh(kReplay + " verify " + run, &out), 0) << out;
  EXPECT_TRUE(contains(out, "digest: " + digest_of(run))) << out;

  std::vector<json> recs = records_of(run);
  std::vector<json> calls = of_kind(recs, "llmReply");
  ASSERT_FALSE(calls.empty());
  std::map<std::string, int> roles;
  for (const json& c : calls) {
    const json& l = c["llmReply"];
    ++roles[l.value("role", "")];
    EXPECT_EQ(l.value("endpoint", ""), serve.url());
    EXPECT_EQ(l.value("model", ""), "vinci-sim");
    EXPECT_EQ(l.value("failure", "?"), "") << c.dump();
    EXPECT_EQ(l.value("key", "").size(), 32u) << c.dump();
  }
  EXPECT_GT(roles["selection"], 0);
  EXPECT_GT(roles["policy"], 0);
  EXPECT_GT(roles["summary"], 0);
  size_t tts_calls = 0;
  for (const json& c : calls) tts_calls += c.value("phase", "") == "tts";
  EXPECT_GT(tts_calls, 0u) << "test-time scaling asks the model too";
  // Without faults every call is one request, and every request is a recorded call but the
  // preflight's two (GET /models and one tiny request).
  EXPECT_EQ(static_cast<long long>(calls.size()) + 2, served.requests);

  // The policy's replies are plans the sim world priced as the generator plans they equal.
  size_t priced = 0, measurements = 0;
  for (const json& m : of_kind(recs, "measurement")) {
    ++measurements;
    for (const json& f : m["measurement"].value("flags", json::array())) {
      if (f == "priced_as_generated_plan") ++priced;
    }
  }
  EXPECT_GT(priced, 0u) << measurements << " measurements";
  std::string grep;
  ASSERT_EQ(sh(kReplay + " cat " + run + " | grep -c llmReply", &grep), 0) << grep;
  EXPECT_EQ(std::stoul(grep), calls.size());
  for (const char* f : {"summary.md", "metrics.csv"}) EXPECT_TRUE(exists(run + "/" + f)) << f;
}

TEST(LlmRun, SameSeedSameServerSameDigest) {
  TempDir tmp;
  std::string root = tmp.path(), out;
  Serve serve(root, 0);
  ASSERT_TRUE(serve.up()) << serve.log();
  ASSERT_EQ(sh(run_cmd(serve.url(), root + "/one", "llm"), &out), 0) << out;
  ASSERT_EQ(sh(run_cmd(serve.url(), root + "/two", "llm"), &out), 0) << out;
  ASSERT_EQ(sh(run_cmd(serve.url(), root + "/other", "llm", " --seed 12"), &out), 0) << out;
  serve.stop();
  std::string a = digest_of(root + "/one/llm"), b = digest_of(root + "/two/llm");
  std::printf("run.seed %llu: %s and %s; run.seed 12: %s\n", static_cast<unsigned long long>(kSmokeSeed), a.c_str(),
              b.c_str(), digest_of(root + "/other/llm").c_str());
  EXPECT_EQ(a.size(), 32u) << a;
  EXPECT_EQ(a, b);
  EXPECT_EQ(sh(kReplay + " diff " + root + "/one/llm " + root + "/two/llm", &out), 0) << out;
  // The digest is not blind to what the model was asked.
  EXPECT_NE(digest_of(root + "/other/llm"), a);
  EXPECT_EQ(sh(kReplay + " diff " + root + "/one/llm " + root + "/other/llm", &out), 1) << out;
}

TEST(LlmRun, FaultsAreRetriedRecordedAndTheRunVerifies) {
  TempDir tmp;
  std::string root = tmp.path(), out;
  // Four tasks at once, so the first faults fall on different calls: no call meets more than
  // retries + 1 of them.
  const std::string settings =
      " --threads 4 --set backbone.timeout_s=1 --set backbone.retries=3 --set backbone.deadline_s=20";
  const std::string faults = "500,429:1,malformed,truncated,hang:3,503:0";
  int port = 0;
  ServeCounts faulty_counts;
  {
    Serve faulty(root, 0, {"--faults", faults});
    ASSERT_TRUE(faulty.up()) << faulty.log();
    port = faulty.port();
    ASSERT_EQ(sh(run_cmd(faulty.url(), root, "faulty", settings), &out), 0) << out;
    faulty_counts = faulty.stop();
  }
  EXPECT_EQ(faulty_counts.faults, 6);
  ServeCounts clean_counts;
  {
    Serve clean(root, port);  // a fresh server on the same address
    ASSERT_TRUE(clean.up()) << clean.log();
    ASSERT_EQ(sh(run_cmd(clean.url(), root, "clean", settings), &out), 0) << out;
    clean_counts = clean.stop();
  }
  EXPECT_EQ(clean_counts.faults, 0);
  // Each fault cost one attempt more and left no trace: retries are not records.
  EXPECT_EQ(faulty_counts.requests, clean_counts.requests + 6);
  std::string want = digest_of(root + "/clean");
  EXPECT_EQ(want.size(), 32u) << want;
  EXPECT_EQ(digest_of(root + "/faulty"), want);
  for (const json& c : of_kind(records_of(root + "/faulty"), "llmReply")) {
    EXPECT_EQ(c["llmReply"].value("failure", "?"), "") << c.dump();
  }
  EXPECT_EQ(sh(kReplay + " verify " + root + "/faulty", &out), 0) << out;

  // Faults that change replies: a reply without a tool call (a selection that picks nothing, a
  // policy turn without a plan) is the model's answer and recorded; a 400 is the setup's failure,
  // not the model's: it stops the run, recording nothing of that call, and a resume against a
  // server that accepts the request finishes it. Calls go one at a time here.
  const std::string one_at_a_time = " --set backbone.timeout_s=1 --set backbone.retries=3 --set backbone.deadline_s=20";
  {
    Serve changing(root, port, {"--faults", "no_tool_call,400"});
    ASSERT_TRUE(changing.up()) << changing.log();
    EXPECT_NE(sh(run_cmd(changing.url(), root, "changed", one_at_a_time), &out), 0) << out;
    ServeCounts c = changing.stop();
    EXPECT_EQ(c.faults, 2);
  }
  const std::string changed = root + "/changed";
  EXPECT_TRUE(contains(out, "refused the request")) << out;
  EXPECT_TRUE(contains(out, "HTTP 400 (not retried): injected fault 400")) << out;
  EXPECT_TRUE(contains(out, "--resume " + changed)) << out;
  ASSERT_FALSE(completed(changed)) << out;
  {
    Serve fixed(root, port);
    ASSERT_TRUE(fixed.up()) << fixed.log();
    ASSERT_EQ(sh(kHarness + " run --resume " + changed, &out), 0) << out;
    fixed.stop();
  }
  ASSERT_TRUE(completed(changed)) << out;
  EXPECT_NE(digest_of(changed), want);
  EXPECT_EQ(sh(kReplay + " verify " + changed, &out), 0) << out;
  for (const json& c : of_kind(records_of(changed), "llmReply")) {
    EXPECT_EQ(c["llmReply"].value("failure", "?"), "") << "no failed call is recorded: " << c.dump();
  }
  // The prose reply of no_tool_call is recorded as the reply it was.
  ASSERT_EQ(sh(kReplay + " cat " + changed + " --objects --no-manifest", &out), 0);
  EXPECT_GT(count_of(out, "I would rather describe the kernel in prose."), 0u);
  for (const char* f : {"summary.md", "metrics.csv"}) EXPECT_TRUE(exists(changed + "/" + f)) << f;
}

// A call that fails every retry says nothing of the model: the run stops without recording it,
// and resumed against a healthy server it ends with the digest a run that never met the failure
// has.
TEST(LlmRun, CallsThatFailEveryRetryStopTheRunForResume) {
  TempDir tmp;
  std::string root = tmp.path(), out;
  const std::string settings = " --set backbone.retries=1 --set backbone.concurrency=1 --threads 1";
  int port = 0;
  {
    // retries=1: two attempts a call, so the first call fails.
    Serve serve(root, 0, {"--faults", "500,500"});
    ASSERT_TRUE(serve.up()) << serve.log();
    port = serve.port();
    EXPECT_NE(sh(run_cmd(serve.url(), root, "failing", settings), &out), 0) << out;
    ServeCounts c = serve.stop();
    EXPECT_EQ(c.faults, 2);
  }
  const std::string run = root + "/failing";
  EXPECT_TRUE(contains(out, "failed the call: HTTP 500 after 2 attempts")) << out;
  EXPECT_TRUE(contains(out, "--resume " + run)) << out;
  ASSERT_FALSE(completed(run));
  for (const json& c : of_kind(records_of(run), "llmReply")) {
    EXPECT_EQ(c["llmReply"].value("failure", "?"), "") << c.dump();
  }
  {
    Serve healthy(root, port);
    ASSERT_TRUE(healthy.up()) << healthy.log();
    ASSERT_EQ(sh(kHarness + " run --resume " + run, &out), 0) << out;
    ASSERT_EQ(sh(run_cmd(healthy.url(), root, "whole", settings), &out), 0) << out;
    healthy.stop();
  }
  const std::string want = digest_of(root + "/whole");
  EXPECT_EQ(want.size(), 32u) << want;
  EXPECT_EQ(digest_of(run), want);
  EXPECT_EQ(sh(kReplay + " verify " + run, &out), 0) << out;
}

// A free port below the kernel's ephemeral range (32768-60999 by default), for a server that must
// come back on the port a run recorded: a socket bound to port 0 elsewhere (any other test) is given
// an ephemeral port, so it cannot take this one between the stop and the restart.
int restartable_port() {
  for (int i = 0; i < 10000; ++i) {
    int port = 20000 + static_cast<int>((static_cast<unsigned>(getpid()) * 7919u + static_cast<unsigned>(i)) % 10000u);
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return 0;
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bool free = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    ::close(fd);
    if (free) return port;
  }
  return 0;
}

TEST(LlmRun, KillAndResumeReasksNothingRecorded) {
  TempDir tmp;
  std::string root = tmp.path(), out;
  // Long enough that the log's first buffer of records reaches the file well before the end.
  const std::string settings = " --set loop.steps=8 --set backbone.retries=1";
  int port = restartable_port();
  ASSERT_NE(port, 0);
  {
    Serve first(root, port);
    ASSERT_TRUE(first.up()) << first.log();
    pid_t pid = spawn(run_cmd(first.url(), root, "killed", settings), root + "/killed.log");
    ASSERT_TRUE(kill_once_logged(pid, root + "/killed")) << slurp(root + "/killed.log");
    first.stop();
  }
  const std::string killed = root + "/killed";
  ASSERT_TRUE(exists(killed + "/manifest.bin"));
  ASSERT_FALSE(completed(killed)) << "the run ended before it was killed";
  // Killed, it is unfinished, not diverged: verify (no server) says so, and how to continue it.
  EXPECT_EQ(sh(kReplay + " verify " + killed, &out), 2) << out;
  EXPECT_TRUE(contains(out, "run " + killed + " is unfinished (its manifest is not complete")) << out;
  EXPECT_TRUE(
      contains(out, "records it holds re-derived and matched. `harness run --resume " + killed + "` continues it"))
      << out;
  EXPECT_FALSE(contains(out, "Mismatch")) << out;
  ServeCounts resumed;
  {
    Serve second(root, port);
    ASSERT_TRUE(second.up()) << second.log();
    ASSERT_EQ(sh(kHarness + " run --resume " + killed, &out), 0) << out;
    EXPECT_TRUE(contains(out, "re-derived and matched")) << out;
    resumed = second.stop();
  }
  ServeCounts whole;
  {
    Serve third(root, port);
    ASSERT_TRUE(third.up()) << third.log();
    ASSERT_EQ(sh(run_cmd(third.url(), root, "whole", settings), &out), 0) << out;
    whole = third.stop();
  }
  const std::string want = digest_of(root + "/whole");
  EXPECT_EQ(want.size(), 32u) << want;
  EXPECT_EQ(digest_of(killed), want);
  // The resumed run's server answered only what the log did not hold.
  EXPECT_GT(resumed.requests, 0);
  EXPECT_LT(resumed.requests, whole.requests);
  EXPECT_EQ(sh(kReplay + " verify " + killed, &out), 0) << out;

  // Resuming while the server is down: the preflight finds no server and stops before the run is
  // touched; the run stays resumable.
  {
    Serve fourth(root, port);
    ASSERT_TRUE(fourth.up()) << fourth.log();
    pid_t pid = spawn(run_cmd(fourth.url(), root, "down", settings), root + "/down.log");
    ASSERT_TRUE(kill_once_logged(pid, root + "/down")) << slurp(root + "/down.log");
    fourth.stop();
  }
  const std::string down = root + "/down";
  ASSERT_FALSE(completed(down));
  std::string before;
  ASSERT_EQ(sh(kReplay + " cat " + down + " --no-manifest | wc -l", &before), 0) << before;
  EXPECT_NE(sh(kHarness + " run --resume " + down, &out), 0) << out;
  EXPECT_TRUE(contains(out, "cannot be reached")) << out;
  EXPECT_TRUE(contains(out, "--resume " + down)) << out;
  EXPECT_FALSE(contains(out, "mismatch")) << out;
  ASSERT_TRUE(exists(down + "/manifest.bin"));
  EXPECT_FALSE(completed(down));
  std::string after;
  ASSERT_EQ(sh(kReplay + " cat " + down + " --no-manifest | wc -l", &after), 0) << after;
  EXPECT_GE(std::stol(after), std::stol(before));
  for (const json& c : of_kind(records_of(down, /*killed=*/true), "llmReply")) {
    EXPECT_EQ(c["llmReply"].value("failure", "?"), "") << "a call the server never got is not recorded: " << c.dump();
  }
  {
    Serve fifth(root, port);
    ASSERT_TRUE(fifth.up()) << fifth.log();
    ASSERT_EQ(sh(kHarness + " run --resume " + down, &out), 0) << out;
    fifth.stop();
  }
  EXPECT_EQ(digest_of(down), want);
}

// A language-model run stopped mid-way is unfinished, not diverged. `replay verify` answers the
// calls its log holds from the log; a call it does not hold (the log ends before it) is a failed
// call there, so the loop reaches the log's end; and it says the run is unfinished, where its log
// ends, that every record it holds matched, and that `harness run --resume` continues it (it said
// "Mismatch: the recorded run holds no model call with key ..."). The stop is put where the test
// chooses: a finished run's copy cut in the middle of the frame of its middle model call, with its
// manifest as the run's start wrote it (what a kill in the middle of a write of the log leaves:
// resume once refused such a torn tail as corruption).
TEST(LlmRun, VerifyOfAnUnfinishedRunSaysWhereItEnds) {
  TempDir tmp;
  std::string root = tmp.path(), out;
  int port = 0;
  {
    Serve serve(root, 0);
    ASSERT_TRUE(serve.up()) << serve.log();
    port = serve.port();
    ASSERT_EQ(sh(run_cmd(serve.url(), root, "whole"), &out), 0) << out;
  }
  const std::string whole = root + "/whole", run = root + "/cut";
  ASSERT_TRUE(completed(whole)) << out;
  ASSERT_EQ(sh("cp -r " + whole + " " + run, &out), 0) << out;  // under the same root: the same objects
  std::vector<json> recs = records_of(run);
  std::vector<size_t> calls;
  for (size_t i = 0; i < recs.size(); ++i) {
    if (recs[i].contains("llmReply")) calls.push_back(i);
  }
  ASSERT_GT(calls.size(), 4u);
  const size_t kept = calls[calls.size() / 2];  // the records before the middle call
  const json& last = recs[kept - 1];
  std::printf("cut before record %zu of %zu (the middle of %zu model calls)\n", kept, recs.size(), calls.size());

  const std::string seg = run + "/log/00000000.vlog";
  ASSERT_FALSE(exists(run + "/log/00000001.vlog")) << "the test cuts a log of one segment";
  std::string bytes = slurp(seg);
  std::vector<size_t> frames;
  for (size_t pos = kSegmentHeaderSize; pos < bytes.size();) {
    frames.push_back(pos);
    uint32_t len;
    std::memcpy(&len, bytes.data() + pos, 4);
    pos += kFrameHeaderSize + len;
  }
  ASSERT_EQ(frames.size(), recs.size());
  // The cut leaves the first half of the next frame, as a kill in the middle of a write does.
  uint32_t next_len;
  std::memcpy(&next_len, bytes.data() + frames[kept], 4);
  ASSERT_TRUE(write_file_atomic(seg, bytes.substr(0, frames[kept] + kFrameHeaderSize + next_len / 2)).ok());
  auto m = read_manifest(run + "/manifest.bin");
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  m->completed = false;
  m->record_count = 0;
  m->run_digest = Digest();
  ASSERT_TRUE(write_file_atomic(run + "/manifest.bin", encode_manifest(*m)).ok());

  // No server: the replies come from the log.
  EXPECT_EQ(sh(kReplay + " verify " + run, &out), 2) << out;
  std::printf("%s", out.c_str());
  const std::string n = std::to_string(kept);
  EXPECT_TRUE(contains(out, "replay verify: FailedPrecondition: run " + run +
                                " is unfinished (its manifest is not complete: stopped, or still running): its log "
                                "ends after " +
                                n + " records, in "))
      << out;
  if (last.contains("step")) {
    EXPECT_TRUE(contains(out, "the last record: step " + std::to_string(last["step"].get<int>()) + " ")) << out;
  }
  EXPECT_TRUE(contains(
      out, "; the " + n + " records it holds re-derived and matched. `harness run --resume " + run + "` continues it"))
      << out;
  EXPECT_TRUE(contains(out, "then a damaged frame (" + seg + " at offset " + std::to_string(frames[kept]) +
                                ": torn frame: length " + std::to_string(next_len) + " runs past the end of the file"))
      << out;
  EXPECT_FALSE(contains(out, "holds no model call")) << out;
  EXPECT_FALSE(contains(out, "Mismatch")) << out;

  // It does: resumed against a server on the run's address, it ends as the whole run did.
  {
    Serve serve(root, port);
    ASSERT_TRUE(serve.up()) << serve.log();
    ASSERT_EQ(sh(kHarness + " run --resume " + run, &out), 0) << out;
    EXPECT_TRUE(contains(out, "re-derived and matched " + n + " recorded records")) << out;
  }
  EXPECT_EQ(digest_of(run), digest_of(whole));
  ASSERT_EQ(sh(kReplay + " verify " + run, &out), 0) << out;
  EXPECT_FALSE(contains(out, "unfinished")) << out;
}

TEST(LlmRun, ApiKey) {
  TempDir tmp;
  std::string dir = tmp.path(), out;
  const std::string runs = dir + "/runs";  // server logs stay outside it
  const std::string var = "VINCI_LLM_TEST_KEY";
  const std::string key = "sk-vinci-test-7d41c0a9e2b35f86";
  const std::string wrong = "sk-vinci-test-wrong-00c3b1";
  const std::string settings = " --set backbone.api_key_env=" + var;
  {
    Serve serve(dir, 0, {"--api-key-env", var}, {var + "=" + key});
    ASSERT_TRUE(serve.up()) << serve.log();
    ASSERT_EQ(sh(var + "=" + key + " " + run_cmd(serve.url(), runs, "keyed", settings), &out), 0) << out;
    EXPECT_FALSE(contains(out, key)) << out;
    serve.stop();
  }
  const std::string keyed = runs + "/keyed";
  for (const json& c : of_kind(records_of(keyed), "llmReply")) {
    EXPECT_EQ(c["llmReply"].value("failure", "?"), "") << c.dump();
  }
  EXPECT_EQ(sh(kReplay + " verify " + keyed, &out), 0) << out;

  // A wrong key stops the run at its preflight: one GET /models refused, no folder, no call.
  ServeCounts refused;
  {
    Serve serve(dir, 0, {"--api-key-env", var}, {var + "=" + key});
    ASSERT_TRUE(serve.up()) << serve.log();
    EXPECT_EQ(sh(var + "=" + wrong + " " + run_cmd(serve.url(), runs, "refused", settings), &out), 2) << out;
    EXPECT_FALSE(contains(out, wrong)) << out;
    refused = serve.stop();
  }
  EXPECT_TRUE(contains(out, "refused the API key (backbone.api_key_env)")) << out;
  EXPECT_TRUE(contains(out, "nothing was recorded")) << out;
  EXPECT_FALSE(exists(runs + "/refused")) << "a refused setup makes no folder";
  EXPECT_EQ(refused.requests, 1);

  // Neither key is written anywhere: records, manifests, objects, reports.
  for (const std::string& run : {keyed}) {
    ASSERT_EQ(sh(kReplay + " cat " + run + " --objects", &out), 0);
    EXPECT_FALSE(contains(out, key));
    EXPECT_FALSE(contains(out, wrong));
    EXPECT_TRUE(contains(out, var)) << "the manifest names the variable";
  }
  // Nor in what is exported for trainers: the calls export and the tables.
  const std::string exports = dir + "/exports";
  ASSERT_EQ(sh("mkdir -p " + exports, &out), 0);
  ASSERT_EQ(sh(kReplay + " export " + keyed + " --out " + exports + "/calls.jsonl", &out), 0) << out;
  ASSERT_EQ(sh(kReplay + " export " + keyed + " --format jsonl --out " + exports + "/tables", &out), 0) << out;
  EXPECT_TRUE(exists(exports + "/calls.jsonl"));
  EXPECT_EQ(sh("grep -rlF -e " + key + " -e " + wrong + " " + runs + " " + exports, &out), 1) << out;
  EXPECT_TRUE(exists(runs + "/objects")) << "the objects folder was searched";
}

// ---- the language-model agents in process

PromptTemplates bundled_templates() {
  auto t = PromptTemplates::load(std::string(VINCI_SOURCE_DIR) + "/prompts");
  EXPECT_TRUE(t.ok()) << t.status().to_string();
  return t.ok() ? *t : PromptTemplates();
}

TEST(LlmAgents, PromptTemplateMissingFileIsNamed) {
  TempDir tmp;
  std::string dir = tmp.path(), out;
  ASSERT_EQ(sh("cp " + std::string(VINCI_SOURCE_DIR) + "/prompts/*.md " + dir + " && rm " + dir + "/policy_feedback.md",
               &out),
            0)
      << out;
  auto t = PromptTemplates::load(dir);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(contains(t.status().message(), dir + "/policy_feedback.md")) << t.status().to_string();
}

TEST(LlmAgents, PromptTemplateRenderSubstitutesEveryPlaceholder) {
  TempDir tmp;
  std::string dir = tmp.path(), out;
  ASSERT_EQ(sh("cp " + std::string(VINCI_SOURCE_DIR) + "/prompts/*.md " + dir, &out), 0) << out;
  {
    std::ofstream f(dir + "/policy_feedback.md", std::ios::trunc);
    f << "Result:\n{feedback}\nagain {feedback}; {unknown} stays; {feedback\n\n";
  }
  auto t = PromptTemplates::load(dir);
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  // Trailing newlines are dropped; every occurrence is replaced; a value holding its own
  // placeholder is not expanded again.
  EXPECT_EQ(t->render("policy_feedback.md", {{"feedback", "x={feedback}"}}),
            "Result:\nx={feedback}\nagain x={feedback}; {unknown} stays; {feedback");
  EXPECT_EQ(t->render("policy_feedback.md"), "Result:\n{feedback}\nagain {feedback}; {unknown} stays; {feedback");
  PromptTemplates bundled = bundled_templates();
  std::string sel = bundled.render("selection_system.md", {{"max_skills", "7"}});
  EXPECT_FALSE(contains(sel, "{max_skills}")) << sel;
  EXPECT_TRUE(contains(sel, "7")) << sel;
}

TEST(LlmAgents, UnparseablePolicyReplyIsATurnWithoutAPlan) {
  auto suite = load_task_suite(default_task_dir());
  ASSERT_TRUE(suite.ok()) << suite.status().to_string();
  ASSERT_FALSE(suite->tasks.empty());
  const Task& task = suite->tasks.front();
  // A reply whose launch block breaks off in the argument list of line 9, column 28.
  const std::string reply =
      "Here is a kernel.\n"
      "\n"
      "```cuda\n"
      "extern \"C\" __global__ void k(float* y) {\n"
      "}\n"
      "```\n"
      "\n"
      "```launch\n"
      "k<<<1, 32>>>(" +
      task.output +
      ", ]\n"
      "```\n";
  const int line = 9;
  const int column = static_cast<int>(std::string("k<<<1, 32>>>(" + task.output + ", ").size()) + 1;
  std::mutex mu;
  json asked;
  ChatServer server(
      [&](const json& request) -> Result<ChatAnswer> {
        std::lock_guard<std::mutex> lock(mu);
        asked = request;
        return ChatAnswer{reply, "", {}, "stop"};
      },
      ChatServerOptions{});
  ASSERT_TRUE(server.start().ok());
  std::printf("chat server on port %d, task %s\n", server.port(), task.id.c_str());
  ChatSettings cs;
  cs.base_url = server.base_url();
  cs.model = "vinci-test";
  cs.retries = 0;
  cs.timeout_s = 30;
  HttpChatTransport transport(cs, 1);
  LlmSettings ls;
  ls.endpoint = cs.base_url;
  ls.model = cs.model;
  LlmAgentModel model(ls, bundled_templates(), transport);
  PolicyQuestion q;
  q.task = &task;
  q.size = SizeName::kSmall;
  q.key = RngKey::root(kSmokeSeed).with("test", "unparseable");
  auto turn = model.write_plan(q);
  ASSERT_TRUE(turn.ok()) << turn.status().to_string();
  EXPECT_FALSE(turn->plan.has_value());
  ASSERT_TRUE(turn->call.has_value());
  EXPECT_EQ(turn->call->failure, "") << "the call succeeded; its reply did not parse";
  EXPECT_EQ(turn->reply_text, reply);
  std::string where = "launch block, line " + std::to_string(line) + ", column " + std::to_string(column);
  EXPECT_TRUE(contains(turn->reply_error, where)) << turn->reply_error << "\n(expected " << where << ")";
  // The next turn tells the model exactly that.
  std::string feedback = turn_feedback_text(*turn);
  EXPECT_TRUE(starts_with(feedback, "Your answer held no kernel that could be run: ")) << feedback;
  EXPECT_TRUE(contains(feedback, where)) << feedback;
  // The request was the policy's: its system prompt and the task.
  std::lock_guard<std::mutex> lock(mu);
  ASSERT_TRUE(asked.contains("messages")) << asked.dump();
  EXPECT_EQ(asked["messages"][0]["role"], "system");
  EXPECT_TRUE(contains(asked["messages"][1]["content"].get<std::string>(), task.id));
  EXPECT_EQ(asked["model"], "vinci-test");
}

TEST(LlmAgents, RecordedTransportAnswersRebuiltRequestsAndNamesTheKeyOfAChangedOne) {
  TempDir tmp;
  std::string root = tmp.path(), out;
  // Evaluation only: the held-out tasks' selections and policy turns.
  {
    Serve serve(root, 0);
    ASSERT_TRUE(serve.up()) << serve.log();
    ASSERT_EQ(sh(run_cmd(serve.url(), root, "rec", " --set loop.steps=0"), &out), 0) << out;
    serve.stop();
  }
  const std::string run = root + "/rec";
  auto seeds = SkillLibrary::load(std::string(VINCI_SOURCE_DIR) + "/experiments/seed_skills.jsonl");
  ASSERT_TRUE(seeds.ok()) << seeds.status().to_string();
  auto suite = load_task_suite(default_task_dir());
  ASSERT_TRUE(suite.ok()) << suite.status().to_string();

  // The first evaluated task's selection and its first policy call, from the log.
  auto reader = RunReader::open(run);
  ASSERT_TRUE(reader.ok()) << reader.status().to_string();
  std::string task_id;
  std::vector<std::string> selected;
  Digest recorded_request, recorded_reply, recorded_key;
  while (RecordView* view = (*reader)->next()) {
    auto r = view->message().getRoot<schema::Record>();
    if (r.getPhase() != schema::Record::Phase::EVAL) continue;
    if (r.isSelection() && task_id.empty()) {
      task_id = r.getTask();
      for (auto name : r.getSelection().getSelected()) selected.push_back(name);
    }
    if (r.isLlmReply() && std::string(r.getTask().cStr()) == task_id && r.getTurn() == 0 &&
        r.getLlmReply().getRole() == schema::Role::POLICY) {
      recorded_request = address_of(r.getLlmReply().getPrompt());
      recorded_reply = address_of(r.getLlmReply().getReply());
      recorded_key = address_of(r.getLlmReply().getKey());
      break;
    }
  }
  ASSERT_FALSE(task_id.empty());
  ASSERT_FALSE(recorded_key.is_zero()) << "no policy call of task " << task_id;
  const Task* task = suite->find(task_id);
  ASSERT_NE(task, nullptr) << task_id;
  std::vector<const Skill*> skills;
  for (const auto& n : selected) {
    const Skill* s = seeds->find(n);
    ASSERT_NE(s, nullptr) << n;
    skills.push_back(s);
  }

  auto transport = RecordedChatTransport::open(run);
  ASSERT_TRUE(transport.ok()) << transport.status().to_string();
  EXPECT_GT((*transport)->calls(), 0u);
  auto templates = PromptTemplates::recorded(run);
  ASSERT_TRUE(templates.ok()) << templates.status().to_string();

  // The question the loop asked: evaluation is greedy, keyed by phase, step, task, rollout, turn.
  LlmSettings ls;
  ls.endpoint = "http://127.0.0.1:1/v1";  // never reached: every answer comes from the log
  ls.model = "vinci-sim";
  PolicyQuestion q;
  q.task = task;
  q.size = SizeName::kSmall;
  q.skills = skills;
  q.greedy = true;
  q.key = RngKey::root(kSmokeSeed)
              .with("phase", "eval")
              .with("step", 0)
              .with("task", task_id)
              .with("rollout", 0)
              .with("turn", 0);
  ASSERT_EQ(q.key.digest().hex(), recorded_key.hex());
  {
    LlmAgentModel model(ls, *templates, **transport);
    auto turn = model.write_plan(q);
    ASSERT_TRUE(turn.ok()) << turn.status().to_string();
    ASSERT_TRUE(turn->call.has_value());
    EXPECT_EQ(chat_request_address(turn->call->request).hex(), recorded_request.hex());
    ObjectStore store(RunLocation::of(run).store_dir);
    auto reply = store.get(recorded_reply);
    ASSERT_TRUE(reply.ok()) << reply.status().to_string();
    EXPECT_EQ(turn->call->reply, reply->bytes);
    EXPECT_EQ(turn->call->attempts, 0u) << "answered from the log";
    EXPECT_TRUE(turn->plan.has_value()) << turn->reply_error;
  }
  {
    // An edited template rebuilds other request bytes for the same key: a mismatch naming it.
    PromptTemplates edited = *templates;
    edited.text["policy_format.md"] += "\n\nAlso: prefer fewer launches.";
    LlmAgentModel model(ls, edited, **transport);
    auto turn = model.write_plan(q);
    ASSERT_FALSE(turn.ok());
    EXPECT_EQ(turn.status().code(), StatusCode::kMismatch);
    EXPECT_TRUE(contains(turn.status().message(), recorded_key.hex())) << turn.status().to_string();
    EXPECT_TRUE(contains(turn.status().message(), recorded_request.hex())) << turn.status().to_string();
  }
  {
    // A call the run never made, with no server to fall back on.
    PolicyQuestion other = q;
    other.key = q.key.with("test", "unrecorded");
    LlmAgentModel model(ls, *templates, **transport);
    auto turn = model.write_plan(other);
    ASSERT_FALSE(turn.ok());
    EXPECT_TRUE(contains(turn.status().message(), other.key.digest().hex())) << turn.status().to_string();
  }
}

}  // namespace
}  // namespace vinci

namespace vinci {
namespace {

// A policy turn with a long history against a server that records what it was asked: with a
// context length and no max_tokens, each request's limit is the room its prompt leaves (capped),
// and a history that would leave a reply too little loses its oldest turns, saying how many.
TEST(LlmAgents, RequestLimitsComeFromTheContextAndLongHistoriesLoseTheirOldestTurns) {
  auto suite = load_task_suite(default_task_dir());
  ASSERT_TRUE(suite.ok()) << suite.status().to_string();
  const Task& task = suite->tasks.front();
  std::mutex mu;
  json asked;
  ChatServer server(
      [&](const json& request) -> Result<ChatAnswer> {
        std::lock_guard<std::mutex> lock(mu);
        asked = request;
        return ChatAnswer{"no kernel today", "", {}, "stop"};
      },
      ChatServerOptions{});
  ASSERT_TRUE(server.start().ok());
  ChatSettings cs;
  cs.base_url = server.base_url();
  cs.model = "vinci-test";
  cs.retries = 0;
  HttpChatTransport transport(cs, 1);
  LlmSettings ls;
  ls.endpoint = cs.base_url;
  ls.model = cs.model;
  ls.context_length = 16384;
  ls.max_tokens_cap = 100000;
  LlmAgentModel model(ls, bundled_templates(), transport);
  // Six earlier turns of 6 KB replies each.
  std::vector<PolicyTurn> history(6);
  for (size_t i = 0; i < history.size(); ++i) {
    history[i].reply_text = "turn " + std::to_string(i) + " " + std::string(6000, 'x');
    history[i].reply_error = "no kernel";
  }
  PolicyQuestion q;
  q.task = &task;
  q.size = SizeName::kSmall;
  q.key = RngKey::root(kSmokeSeed).with("test", "budget");
  q.history = &history;
  ASSERT_TRUE(model.write_plan(q).ok());
  json messages;
  int64_t max_tokens = 0;
  {
    std::lock_guard<std::mutex> lock(mu);
    messages = asked["messages"];
    ASSERT_TRUE(asked.contains("max_tokens")) << asked.dump().substr(0, 400);
    max_tokens = asked["max_tokens"].get<int64_t>();
  }
  std::vector<ChatMessage> sent;
  for (const json& m : messages) sent.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
  const int64_t estimate = estimate_prompt_tokens(sent, {}, ls.bytes_per_token);
  EXPECT_EQ(max_tokens, ls.context_length - estimate - kContextMargin);
  EXPECT_GE(max_tokens, min_reply_tokens(ls));
  // 6 turns at 3000+ tokens each do not fit 16384 with 1024 left: the oldest went, the newest stayed.
  const std::string task_message = messages[1]["content"].get<std::string>();
  EXPECT_TRUE(contains(task_message, "earlier turns are omitted to fit the model's context.)")) << task_message;
  std::string all = messages.dump();
  EXPECT_FALSE(contains(all, "turn 0 xxx"));
  EXPECT_TRUE(contains(all, "turn 5 xxx"));
  const size_t kept = (messages.size() - 2) / 2;
  EXPECT_LT(kept, history.size());
  EXPECT_GE(kept, 1u);
  EXPECT_TRUE(contains(task_message, std::to_string(history.size() - kept) + " earlier turns")) << task_message;

  // A set max_tokens is sent as it is; no context length and no max_tokens send none.
  RequestBudget set = budget_request(
      [&] {
        LlmSettings s = ls;
        s.max_tokens = 77;
        return s;
      }(),
      sent, {});
  EXPECT_EQ(set.max_tokens, 77);
  EXPECT_FALSE(budget_request(LlmSettings{}, sent, {}).max_tokens.has_value());
  LlmSettings tiny = ls;
  tiny.context_length = 100;
  EXPECT_EQ(budget_request(tiny, sent, {}).max_tokens, 1) << "a prompt that does not fit gets the server's error";
  LlmSettings capped = ls;
  capped.max_tokens_cap = 50;
  EXPECT_EQ(budget_request(capped, sent, {}).max_tokens, 50);
}

// The journal keeps every answer across a kill: whole lines are read back, a torn or damaged line
// ends it there.
TEST(CallJournal, AnswersAreReadBackAndATornTailIsIgnored) {
  TempDir tmp;
  const std::string path = tmp.path() + "/llm_journal.jsonl";
  auto key = [](int i) { return RngKey::root(1).with("call", i).digest(); };
  {
    CallJournal j(path);
    for (int i = 0; i < 3; ++i)
      ASSERT_TRUE(j.add(key(i), hash_tagged("llm_request", std::to_string(i)), "reply " + std::to_string(i)).ok());
  }
  std::string dropped;
  auto e = CallJournal::read(path, &dropped);
  ASSERT_TRUE(e.ok()) << e.status().to_string();
  ASSERT_EQ(e->size(), 3u);
  EXPECT_EQ((*e)[2].key, key(2));
  EXPECT_EQ((*e)[2].reply, "reply 2");
  EXPECT_EQ(dropped, "");
  // A kill mid-write leaves half a line.
  std::string whole = slurp(path);
  std::ofstream(path, std::ios::app) << whole.substr(0, whole.find('\n') / 2);
  e = CallJournal::read(path, &dropped);
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->size(), 3u);
  EXPECT_TRUE(contains(dropped, "a last line without its end")) << dropped;
  // A changed reply fails its check: the journal ends before it.
  std::string damaged = whole;
  damaged.replace(damaged.find("reply 1"), 7, "reply X");
  std::ofstream(path, std::ios::trunc) << damaged;
  e = CallJournal::read(path, &dropped);
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->size(), 1u);
  EXPECT_TRUE(contains(dropped, "line 2 fails its check")) << dropped;
  EXPECT_TRUE(CallJournal::read(tmp.path() + "/none.jsonl")->empty());
}

// policy.format = "kernelbench": the policy is asked as KernelBench asks (the backend's
// instruction and example, then the task as its PyTorch module), and its reply is read as a
// ModelNew module: the last ```python block defining it. A reply without one is a turn without a
// candidate whose feedback says why.
TEST(LlmAgents, KernelbenchFormatAsksAsKernelbenchAndReadsTheModule) {
  auto suite = load_task_suite(default_task_dir());
  ASSERT_TRUE(suite.ok()) << suite.status().to_string();
  const Task* task = suite->find("L1_019");
  ASSERT_NE(task, nullptr);
  const std::string answer =
      "import torch\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n    def __init__(self):\n"
      "        super().__init__()\n\n    def forward(self, x):\n        return torch.relu(x)\n";
  // The problem quoted first, the answer after it.
  const std::string reply =
      "The original:\n\n```python\nclass Model(nn.Module):\n    pass\n```\n\nFaster:\n\n"
      "```python\n" +
      answer + "```\n";
  std::mutex mu;
  std::vector<json> asked;
  int calls = 0;
  ChatServer server(
      [&](const json& request) -> Result<ChatAnswer> {
        std::lock_guard<std::mutex> lock(mu);
        asked.push_back(request);
        return ChatAnswer{++calls == 1 ? reply : std::string("No code this time."), "", {}, "stop"};
      },
      ChatServerOptions{});
  ASSERT_TRUE(server.start().ok());
  ChatSettings cs;
  cs.base_url = server.base_url();
  cs.model = "vinci-test";
  cs.retries = 0;
  cs.timeout_s = 30;
  HttpChatTransport transport(cs, 1);
  LlmSettings ls;
  ls.endpoint = cs.base_url;
  ls.model = cs.model;
  ls.policy_format = PolicyFormat::kKernelbench;
  ls.languages = {"triton"};
  auto templates =
      PromptTemplates::load(std::string(VINCI_SOURCE_DIR) + "/prompts", ls.languages, PolicyFormat::kKernelbench);
  ASSERT_TRUE(templates.ok()) << templates.status().to_string();
  EXPECT_EQ(templates->text.count("policy_kernelbench_triton.md"), 1u);
  EXPECT_EQ(templates->text.count("policy_kernelbench_cuda.md"), 0u) << "only the experiment's backend is read";
  LlmAgentModel model(ls, *templates, transport);
  PolicyQuestion q;
  q.task = task;
  q.size = SizeName::kSmall;
  q.key = RngKey::root(kSmokeSeed).with("test", "kernelbench");
  auto turn = model.write_plan(q);
  ASSERT_TRUE(turn.ok()) << turn.status().to_string();
  ASSERT_TRUE(turn->plan.has_value()) << turn->reply_error;
  EXPECT_TRUE(turn->plan->is_module());
  EXPECT_EQ(turn->plan->module, answer);
  EXPECT_EQ(turn->plan->task_id, "L1_019");
  {
    std::lock_guard<std::mutex> lock(mu);
    ASSERT_EQ(asked.size(), 1u);
    std::string user = asked[0]["messages"][1]["content"].get<std::string>();
    // KernelBench's parts: the Triton example, then the task's module, then the answer's form.
    size_t example = user.find("@triton.jit"), model_at = user.find("class Model(nn.Module):\n    \"\"\"Apply ReLU");
    EXPECT_NE(example, std::string::npos) << user;
    EXPECT_NE(model_at, std::string::npos) << user;
    EXPECT_LT(example, model_at) << user;
    EXPECT_TRUE(contains(user, "def get_init_inputs():")) << user;
    EXPECT_TRUE(contains(user, "class ModelNew(nn.Module)")) << user;
    EXPECT_FALSE(contains(user, "```launch")) << "the plan format is not asked for: " << user;
    EXPECT_FALSE(contains(user, "{architecture}")) << user;
  }
  // The next turn: no module in the reply, and the feedback says what was expected.
  std::vector<PolicyTurn> history = {*turn};
  history[0].eval.compiled = false;
  history[0].eval.error = "not priceable";
  q.history = &history;
  auto second = model.write_plan(q);
  ASSERT_TRUE(second.ok()) << second.status().to_string();
  EXPECT_FALSE(second->plan.has_value());
  EXPECT_TRUE(contains(second->reply_error, "class ModelNew")) << second->reply_error;
  EXPECT_TRUE(contains(turn_feedback_text(*second), "class ModelNew")) << turn_feedback_text(*second);
  std::lock_guard<std::mutex> lock(mu);
  ASSERT_EQ(asked.size(), 2u);
  EXPECT_EQ(asked[1]["messages"].size(), 4u) << "system, task, the first reply, its feedback";
  EXPECT_EQ(asked[1]["messages"][2]["content"], reply);
}

// The loop end to end with modules: `harness serve` answers KernelBench prompts with the model as
// ModelNew; every module is a recorded plan the sim world calls not priceable; the run verifies
// with the server gone.
TEST(LlmRun, KernelbenchModulesAreRecordedNotPricedAndVerify) {
  TempDir tmp;
  std::string root = tmp.path(), out;
  Serve serve(root, 0);
  ASSERT_TRUE(serve.up()) << serve.log();
  ASSERT_EQ(sh(run_cmd(serve.url(), root, "kb", " --set policy.format=kernelbench"), &out), 0) << out;
  serve.stop();
  const std::string run = root + "/kb";
  ASSERT_TRUE(completed(run)) << out;
  ASSERT_EQ(sh(kReplay + " verify " + run, &out), 0) << out;
  std::vector<json> recs = records_of(run);
  size_t measurements = 0, not_priceable = 0;
  for (const json& m : of_kind(recs, "measurement")) {
    ++measurements;
    const json& flags = m["measurement"].value("flags", json::array());
    bool np = false, decoy_flagged = false;
    for (const json& f : flags) {
      np = np || f == "not_priceable";
      decoy_flagged = decoy_flagged || f.get<std::string>().rfind("static: missing_backend: cuda", 0) == 0;
    }
    not_priceable += np;
    EXPECT_TRUE(decoy_flagged) << m.dump();
  }
  EXPECT_GT(measurements, 0u);
  EXPECT_EQ(not_priceable, measurements) << "the sim world prices no module";
  // The plans the run stored are the modules.
  std::string cat;
  ASSERT_EQ(sh(kReplay + " cat " + run + " --objects | grep -c 'class ModelNew'", &cat), 0) << cat;
  EXPECT_GE(std::stoul(cat), 1u) << cat;
}

}  // namespace
}  // namespace vinci

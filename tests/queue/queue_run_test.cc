// `harness run` through the evaluation queue with `harness worker` processes, end to end: the
// digest of the in-process run with 1, 2 and 4 workers; with a worker killed (SIGKILL) at keyed
// random points while another runs; with the Redis server killed and restarted mid-run (its
// append-only file fsynced at every write). `harness queue status` and `replay verify` of a
// queued run.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "core/rng.h"
#include "recorder/run.h"
#include "tests/cli_test_util.h"
#include "tests/queue/redis_fixture.h"

namespace vinci {
namespace {

const std::string kHarness = std::string(VINCI_BINARY_DIR) + "/bin/harness";
const std::string kReplay = std::string(VINCI_BINARY_DIR) + "/bin/replay";
const std::string kSmoke = std::string(VINCI_SOURCE_DIR) + "/experiments/smoke.toml";
using clitest::sh;

std::string digest_of(const std::string& run) {
  auto m = read_manifest(run + "/manifest.bin");
  if (!m.ok() || !m->completed) return "(incomplete: " + m.status().to_string() + ")";
  return m->run_digest.hex();
}

// The in-process smoke run's digest, computed once.
const std::string& in_process_digest() {
  static std::string d = [] {
    std::string root = clitest::temp_dir("vinci_queue_ref_"), out;
    int rc = sh(kHarness + " run " + kSmoke + " --out " + root + " --name ref", &out);
    EXPECT_EQ(rc, 0) << out;
    return digest_of(root + "/ref");
  }();
  return d;
}

pid_t start_worker(const std::string& url, const std::string& name, const std::string& log) {
  pid_t pid = fork();
  if (pid == 0) {
    freopen(log.c_str(), "a", stderr);
    execl(kHarness.c_str(), "harness", "worker", "--queue", url.c_str(), "--name", name.c_str(), "--claim-idle-s",
          "0.5", (char*)nullptr);
    _exit(127);
  }
  return pid;
}

void stop_worker(pid_t pid, int sig) {
  kill(pid, sig);
  int st;
  waitpid(pid, &st, 0);
}

std::string queued_run(const std::string& url, const std::string& root, const std::string& name, std::string* out) {
  int rc = sh(kHarness + " run " + kSmoke + " --out " + root + " --name " + name + " --threads 4 --set device.queue=" +
                  url,
              out);
  EXPECT_EQ(rc, 0) << *out;
  return digest_of(root + "/" + name);
}

TEST(QueueRun, SameDigestAsInProcessWithOneTwoAndFourWorkers) {
  VINCI_NEED_REDIS();
  testing_redis::RedisServer server;
  ASSERT_TRUE(server.start());
  std::string root = clitest::temp_dir("vinci_queue_run_"), out;
  for (int n : {1, 2, 4}) {
    std::string url = server.url("w" + std::to_string(n));
    std::vector<pid_t> pids;
    for (int i = 0; i < n; ++i) pids.push_back(start_worker(url, "w" + std::to_string(i), root + "/workers.log"));
    EXPECT_EQ(queued_run(url, root, "n" + std::to_string(n), &out), in_process_digest()) << n << " workers";
    if (n == 2) {
      // The queue's state while its workers are alive.
      ASSERT_EQ(sh(kHarness + " queue status --queue " + url, &out), 0) << out;
      EXPECT_NE(out.find("queue " + url), std::string::npos) << out;
      EXPECT_NE(out.find("waiting: 0"), std::string::npos) << out;
      EXPECT_NE(out.find("in progress: 0"), std::string::npos) << out;
      EXPECT_NE(out.find("workers alive: 2"), std::string::npos) << out;
      EXPECT_NE(out.find("  w0: "), std::string::npos) << out;
    }
    for (pid_t p : pids) stop_worker(p, SIGTERM);
  }
  // A queued run verifies in process: the queue is where, not what.
  ASSERT_EQ(sh(kReplay + " verify " + root + "/n2", &out), 0) << out;
  EXPECT_NE(out.find(in_process_digest()), std::string::npos) << out;
  // The config records the queue, never a password; and the queue is no factor of the run.
  ASSERT_EQ(sh(kReplay + " diff " + root + "/n1 " + root + "/n2", &out), 0) << out;
}

TEST(QueueRun, AWorkerKilledAtRandomPointsLosesNothing) {
  VINCI_NEED_REDIS();
  testing_redis::RedisServer server;
  ASSERT_TRUE(server.start());
  std::string root = clitest::temp_dir("vinci_queue_kill_"), out;
  for (int round = 0; round < 3; ++round) {
    std::string url = server.url("k" + std::to_string(round));
    pid_t steady = start_worker(url, "steady", root + "/workers.log");
    std::atomic<bool> done{false};
    int kills = 0;
    // The victim is killed (SIGKILL) at keyed random delays and started again, until the run ends.
    std::thread killer([&] {
      Stream s(RngKey::root(41).with("queue_kill", round));
      int n = 0;
      while (!done) {
        pid_t victim = start_worker(url, "victim" + std::to_string(n++), root + "/workers.log");
        int ms = 50 + static_cast<int>(s.next_u64() % 400);
        for (int t = 0; t < ms && !done; t += 5) std::this_thread::sleep_for(std::chrono::milliseconds(5));
        stop_worker(victim, SIGKILL);
        ++kills;
      }
    });
    std::string d = queued_run(url, root, "r" + std::to_string(round), &out);
    done = true;
    killer.join();
    stop_worker(steady, SIGTERM);
    EXPECT_EQ(d, in_process_digest()) << "round " << round << " with " << kills << " kills";
    EXPECT_GE(kills, 1);
  }
}

TEST(QueueRun, ARestartedServerLosesNothing) {
  VINCI_NEED_REDIS();
  testing_redis::RedisServer server;
  ASSERT_TRUE(server.start());
  std::string root = clitest::temp_dir("vinci_queue_restart_"), out;
  for (int round = 0; round < 2; ++round) {
    std::string url = server.url("s" + std::to_string(round));
    std::vector<pid_t> pids = {start_worker(url, "a", root + "/workers.log"),
                               start_worker(url, "b", root + "/workers.log")};
    std::atomic<bool> done{false};
    std::thread restarter([&] {
      Stream s(RngKey::root(43).with("queue_restart", round));
      int ms = 100 + static_cast<int>(s.next_u64() % 300);
      std::this_thread::sleep_for(std::chrono::milliseconds(ms));
      server.stop(round == 0 ? SIGKILL : SIGTERM);
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      ASSERT_TRUE(server.start());
    });
    std::string d = queued_run(url, root, "r" + std::to_string(round), &out);
    restarter.join();
    for (pid_t p : pids) stop_worker(p, SIGTERM);
    EXPECT_EQ(d, in_process_digest()) << "round " << round << "\n" << out;
  }
}

}  // namespace
}  // namespace vinci

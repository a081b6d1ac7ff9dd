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
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "core/atomic_file.h"
#include "core/rng.h"
#include "queue/redis.h"
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
  int rc =
      sh(kHarness + " run " + kSmoke + " --out " + root + " --name " + name + " --threads 4 --set device.queue=" + url,
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
    if (n < 4) {
      for (int i = 0; i < n; ++i) pids.push_back(start_worker(url, "w" + std::to_string(i), root + "/workers.log"));
    } else {
      // Four at once, through `harness workers`, which stops them all on SIGTERM.
      pid_t pid = fork();
      if (pid == 0) {
        freopen((root + "/workers.log").c_str(), "a", stderr);
        execl(kHarness.c_str(), "harness", "workers", "--queue", url.c_str(), "--sim", "4", "--claim-idle-s", "0.5",
              (char*)nullptr);
        _exit(127);
      }
      pids.push_back(pid);
    }
    EXPECT_EQ(queued_run(url, root, "n" + std::to_string(n), &out), in_process_digest()) << n << " workers";
    if (n == 2) {
      // The queue's state while its workers are alive.
      ASSERT_EQ(sh(kHarness + " queue status --queue " + url, &out), 0) << out;
      EXPECT_NE(out.find("queue " + url), std::string::npos) << out;
      EXPECT_NE(out.find("waiting: 0"), std::string::npos) << out;
      EXPECT_NE(out.find("in progress: 0"), std::string::npos) << out;
      EXPECT_NE(out.find("workers alive: 2"), std::string::npos) << out;
      EXPECT_NE(out.find("  w0: "), std::string::npos) << out;
      // A rescore through the queue re-derives the run as one in process does.
      std::string run = root + "/n2";
      ASSERT_EQ(sh(kReplay + " rescore " + run + " --device sim --out " + root + "/rescored_here", &out), 0) << out;
      ASSERT_EQ(
          sh(kReplay + " rescore " + run + " --device sim --out " + root + "/rescored_queued --queue " + url, &out), 0)
          << out;
      EXPECT_EQ(digest_of(root + "/rescored_queued"), digest_of(root + "/rescored_here"));
    }
    if (n == 4) {
      ASSERT_EQ(sh(kHarness + " queue status --queue " + url, &out), 0) << out;
      EXPECT_NE(out.find("workers alive: 4"), std::string::npos) << out;
      kill(pids[0], SIGTERM);
      int st = 0;
      waitpid(pids[0], &st, 0);
      EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "harness workers ends cleanly on SIGTERM";
      continue;
    }
    for (pid_t p : pids) stop_worker(p, SIGTERM);
  }
  // A queued run verifies in process: the queue is where, not what.
  ASSERT_EQ(sh(kReplay + " verify " + root + "/n2", &out), 0) << out;
  EXPECT_NE(out.find(in_process_digest()), std::string::npos) << out;
  // The config records the queue, never a password; and the queue is no factor of the run.
  ASSERT_EQ(sh(kReplay + " diff " + root + "/n1 " + root + "/n2", &out), 0) << out;
}

TEST(QueueRun, NoServerOrABadUrlIsAClearErrorNamingTheUrl) {
  std::string root = clitest::temp_dir("vinci_queue_bad_"), out;
  std::string url = "redis://127.0.0.1:" + std::to_string(testing_redis::free_port());
  EXPECT_EQ(sh(kHarness + " run " + kSmoke + " --out " + root + " --name r --set device.queue=" + url, &out), 2) << out;
  EXPECT_NE(out.find("key 'device.queue'"), std::string::npos) << out;
  EXPECT_NE(out.find(url + ": cannot reach the Redis server"), std::string::npos) << out;
  EXPECT_NE(access((root + "/r").c_str(), F_OK), 0) << "a run that cannot start leaves nothing";
  EXPECT_EQ(
      sh(kHarness + " run " + kSmoke + " --out " + root + " --name r --set device.queue=redis://host-without-port",
         &out),
      2)
      << out;
  EXPECT_NE(out.find("queue URL 'redis://host-without-port': no port"), std::string::npos) << out;
  EXPECT_EQ(sh(kHarness + " worker --queue " + url, &out), 2) << out;
  EXPECT_NE(out.find(url + ": cannot reach the Redis server"), std::string::npos) << out;
  EXPECT_EQ(sh(kHarness + " queue status --queue " + url, &out), 2) << out;
  EXPECT_NE(out.find(url + ": cannot reach the Redis server"), std::string::npos) << out;
  EXPECT_EQ(sh(kHarness + " queue status --queue redis://:pw@127.0.0.1:1", &out), 2) << out;
  EXPECT_NE(out.find("VINCI_REDIS_PASSWORD"), std::string::npos) << out;
  EXPECT_EQ(sh(kReplay + " rescore " + root + "/none --device sim --out " + root + "/x --queue " + url, &out), 2)
      << out;
}

// A queued run with no worker says so (it waited without a word), and goes on when one comes.
// Waits on the line appearing in the run's output and on the run's exit, not on a timer.
TEST(QueueRun, ARunWithNoWorkerSaysSoAndGoesOnWhenOneComes) {
  VINCI_NEED_REDIS();
  testing_redis::RedisServer server;
  ASSERT_TRUE(server.start());
  std::string root = clitest::temp_dir("vinci_queue_noworker_"), out;
  const std::string log = root + "/run.log";
  clitest::Child run;
  ASSERT_TRUE(run.start({kHarness, "run", kSmoke, "--out", root, "--name", "r", "--set", "loop.steps=1", "--set",
                         "device.queue=" + server.url()},
                        log))
      << run.why();
  // The whole line: it may come through the pipe in more than one read.
  ASSERT_TRUE(run.wait_for(std::regex("evaluations waiting for [^\n]*\n"))) << run.why();
  std::string text = run.output();
  EXPECT_NE(text.find("queue " + server.url() + ": "), std::string::npos) << text;
  EXPECT_NE(text.find("no worker is alive; start one with `harness worker --queue " + server.url() + "`"),
            std::string::npos)
      << text;
  pid_t worker = start_worker(server.url(), "late", root + "/worker.log");
  int st = run.wait();
  stop_worker(worker, SIGTERM);
  text = run.output();
  EXPECT_TRUE(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0) << run.why() << "\n" << text;
  EXPECT_NE(text.find("a worker answers; going on"), std::string::npos) << text;
}

// A password in a queue URL is refused, and no command repeats it: not in an error, not in the
// worker's banner (printed before the URL was checked), not in a run folder or a config listing.
TEST(QueueRun, APasswordInAQueueUrlIsNeverPrinted) {
  const std::string secret = "S3CRET-pw-in-url";
  std::string root = clitest::temp_dir("vinci_queue_url_pw_"), out;
  const std::string port = std::to_string(testing_redis::free_port());
  for (const std::string& url :
       {"redis://alice:" + secret + "@127.0.0.1:" + port + "/q", "redis://" + secret + "@127.0.0.1:" + port,
        "redis://alice:" + secret + "@x@127.0.0.1:" + port}) {
    const std::vector<std::string> commands = {
        kHarness + " worker --queue '" + url + "' --max-requests 1",
        kHarness + " workers --queue '" + url + "' --sim 1",
        kHarness + " queue status --queue '" + url + "'",
        kHarness + " run " + kSmoke + " --out " + root + " --name r --set 'device.queue=" + url + "'",
        kHarness + " config " + kSmoke + " --set 'device.queue=" + url + "'",
        kReplay + " rescore " + root + "/none --device sim --out " + root + "/x --queue '" + url + "'",
    };
    for (const std::string& cmd : commands) {
      EXPECT_NE(sh(cmd, &out), 0) << cmd << ": " << out;
      EXPECT_EQ(out.find(secret), std::string::npos) << cmd << ": " << out;
      EXPECT_NE(out.find("VINCI_REDIS_PASSWORD"), std::string::npos) << cmd << ": " << out;
      EXPECT_NE(out.find("***@127.0.0.1:" + port), std::string::npos) << cmd << ": " << out;
    }
  }
  EXPECT_NE(sh("grep -r -l -a '" + secret + "' " + root, &out), 0) << out;
  EXPECT_NE(access((root + "/r").c_str(), F_OK), 0) << "a refused run leaves no folder";
  EXPECT_EQ(redact_url("redis://alice:pw@h:1/q"), "redis://alice:***@h:1/q");
  EXPECT_EQ(redact_url("redis://pw@h:1"), "redis://***@h:1");
  EXPECT_EQ(redact_url("redis://h:1/a@b"), "redis://h:1/a@b");
}

TEST(QueueRun, APasswordFromTheEnvironmentIsNeverRecorded) {
  VINCI_NEED_REDIS();
  const std::string secret = "pw-4c1d-never-in-a-run";
  testing_redis::RedisServer server({"--requirepass", secret});
  ASSERT_TRUE(server.start());
  std::string root = clitest::temp_dir("vinci_queue_pw_"), out;
  std::string env = "VINCI_REDIS_PASSWORD=" + secret + " ";
  pid_t pid = fork();
  if (pid == 0) {
    setenv("VINCI_REDIS_PASSWORD", secret.c_str(), 1);
    freopen((root + "/worker.log").c_str(), "a", stderr);
    execl(kHarness.c_str(), "harness", "worker", "--queue", server.url().c_str(), "--name", "pw", (char*)nullptr);
    _exit(127);
  }
  ASSERT_EQ(sh(env + kHarness + " run " + kSmoke + " --out " + root +
                   " --name r --threads 4 --set device.queue=" + server.url(),
               &out),
            0)
      << out;
  stop_worker(pid, SIGTERM);
  EXPECT_EQ(digest_of(root + "/r"), in_process_digest());
  // Not in the manifest, the log, the objects, the reports or anything printed.
  EXPECT_NE(sh("grep -r -l -a '" + secret + "' " + root + "/r", &out), 0) << out;
  EXPECT_EQ(sh(kReplay + " cat " + root + "/r | grep -c -a '" + secret + "'", &out), 1) << out;
  // Without it, the run stops at once, saying what to set.
  EXPECT_EQ(sh("env -u VINCI_REDIS_PASSWORD " + kHarness + " run " + kSmoke + " --out " + root +
                   " --name s --set device.queue=" + server.url(),
               &out),
            2)
      << out;
  EXPECT_NE(out.find("NOAUTH"), std::string::npos) << out;
  EXPECT_NE(out.find("VINCI_REDIS_PASSWORD"), std::string::npos) << out;
}

// A connection for watching the queue from the test, to a server that is up (RedisServer::start
// returned once it accepts connections). Its connect and its commands wait as long as the hang
// guard: a slow reply on a loaded machine is not a lost connection.
std::unique_ptr<Redis> watch(const std::string& url) {
  Result<QueueUrl> u = parse_queue_url(url);
  VINCI_REQUIRE(u.ok(), u.status().to_string());
  auto r = Redis::connect(*u, clitest::kHangGuardS, clitest::kHangGuardS);
  if (!r.ok()) {
    ADD_FAILURE() << r.status().to_string();
    return nullptr;
  }
  return std::move(r).value();
}

TEST(QueueRun, AWorkerKilledAtRandomPointsLosesNothing) {
  VINCI_NEED_REDIS();
  testing_redis::RedisServer server;
  ASSERT_TRUE(server.start());
  std::string root = clitest::temp_dir("vinci_queue_kill_"), out;
  int total_kills = 0;
  for (int round = 0; round < 3; ++round) {
    std::string name = "k" + std::to_string(round);
    std::string url = server.url(name);
    pid_t steady = start_worker(url, "steady", root + "/workers.log");
    std::atomic<bool> done{false};
    int kills = 0;
    // The victim is killed (SIGKILL) while it holds a fresh request (taken, not acknowledged), after a
    // keyed random delay of up to 2 ms (inside or just after the evaluation), then started again;
    // three kill points a round.
    std::thread killer([&] {
      std::unique_ptr<Redis> redis = watch(url);
      ASSERT_TRUE(redis);
      Stream s(RngKey::root(41).with("queue_kill", round));
      for (int n = 0; n < 3 && !done; ++n) {
        std::string victim = "victim" + std::to_string(n);
        pid_t pid = start_worker(url, victim, root + "/workers.log");
        while (!done) {
          auto p = redis->command({"XPENDING", name + ":requests:sim", "workers", "-", "+", "1", victim});
          // A request on its first delivery: none is lost more often than the attempts allow.
          if (p.ok() && p->is_array() && !p->elements.empty() && p->elements[0].elements.size() == 4 &&
              p->elements[0].elements[3].integer == 1)
            break;
          std::this_thread::sleep_for(std::chrono::microseconds(300));
        }
        // The first kill point of a round at once (inside the evaluation), the others after a
        // keyed delay.
        uint64_t delay_us = s.next_u64() % 2000;
        if (n > 0) std::this_thread::sleep_for(std::chrono::microseconds(delay_us));
        stop_worker(pid, SIGKILL);
        if (!done) ++kills;
      }
    });
    std::string d = queued_run(url, root, "r" + std::to_string(round), &out);
    done = true;
    killer.join();
    stop_worker(steady, SIGTERM);
    EXPECT_EQ(d, in_process_digest()) << "round " << round << " with " << kills << " kills";
    total_kills += kills;
  }
  EXPECT_GE(total_kills, 3);
  // Requests a killed worker held were taken over (the test exercised what it is about).
  ASSERT_EQ(sh("grep -c 'claimed request' " + root + "/workers.log", &out), 0) << "no request was ever claimed";
}

TEST(QueueRun, ARestartedServerLosesNothing) {
  VINCI_NEED_REDIS();
  testing_redis::RedisServer server;
  ASSERT_TRUE(server.start());
  std::string root = clitest::temp_dir("vinci_queue_restart_"), out;
  // Round 0: SIGKILL; 1: SIGTERM; 2: SIGKILL and the server comes back empty (as one without an
  // append-only file would): the requester sends what is in flight again.
  for (int round = 0; round < 3; ++round) {
    std::string name = "s" + std::to_string(round);
    std::string url = server.url(name);
    std::vector<pid_t> pids = {start_worker(url, "a", root + "/workers.log"),
                               start_worker(url, "b", root + "/workers.log")};
    std::atomic<bool> done{false};
    bool restarted = false;
    // The server is stopped after a keyed random number of answers, and started again half a
    // second later on the same port and append-only file.
    std::thread restarter([&] {
      Stream s(RngKey::root(43).with("queue_restart", round));
      long long at = 20 + static_cast<long long>(s.next_u64() % 150);
      {
        std::unique_ptr<Redis> redis = watch(url);
        ASSERT_TRUE(redis);
        while (!done) {
          auto v = redis->command({"GET", name + ":done"});
          if (v.ok() && !v->is_nil() && std::atoll(v->str.c_str()) >= at) break;
          std::this_thread::sleep_for(std::chrono::microseconds(500));
        }
      }
      if (done) return;
      server.stop(round == 1 ? SIGTERM : SIGKILL);
      if (round == 2) server.wipe();
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      ASSERT_TRUE(server.start());
      restarted = true;
    });
    std::string d = queued_run(url, root, "r" + std::to_string(round), &out);
    done = true;
    restarter.join();
    for (pid_t p : pids) stop_worker(p, SIGTERM);
    EXPECT_TRUE(restarted) << "the run ended before the server was stopped";
    EXPECT_EQ(d, in_process_digest()) << "round " << round << "\n" << out;
    // The server went away during the run, and the run waited for it.
    EXPECT_NE(out.find("waiting for the server"), std::string::npos) << out;
  }
}

}  // namespace
}  // namespace vinci

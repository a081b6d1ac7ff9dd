// A real redis-server on loopback for the queue's tests: a free port, a temporary folder, the
// append-only file on and fsynced at every write (so a stop loses nothing acknowledged), no RDB
// snapshots. Tests skip, saying why, when redis-server is not installed (scripts/setup.sh
// installs it).
#ifndef VINCI_TESTS_QUEUE_REDIS_FIXTURE_H_
#define VINCI_TESTS_QUEUE_REDIS_FIXTURE_H_

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "queue/redis.h"
#include "tests/cli_test_util.h"

namespace vinci {
namespace testing_redis {

inline bool redis_installed() { return std::system("command -v redis-server >/dev/null 2>&1") == 0; }

inline int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  int port = ntohs(a.sin_port);
  ::close(fd);
  return port;
}

class RedisServer {
 public:
  // extra: one more server option and its value (e.g. {"--requirepass", "secret"}).
  explicit RedisServer(std::vector<std::string> extra = {})
      : dir_(clitest::temp_dir("vinci_redis_")), port_(free_port()), extra_(std::move(extra)) {}
  ~RedisServer() {
    stop(SIGKILL);
    std::system(("rm -rf '" + dir_ + "'").c_str());
  }

  // Starts the server (again, on the same port and folder after a stop) and waits until it answers.
  bool start() {
    pid_ = ::fork();
    if (pid_ == 0) {
      std::string port = std::to_string(port_);
      std::string log = dir_ + "/redis.log";
      std::vector<std::string> args = {"redis-server", "--port", port,           "--bind",    "127.0.0.1",
                                       "--save",       "",       "--appendonly", "yes",       "--appendfsync",
                                       "always",       "--dir",  dir_,           "--logfile", log};
      args.insert(args.end(), extra_.begin(), extra_.end());
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(&a[0]);
      argv.push_back(nullptr);
      ::execvp("redis-server", argv.data());
      ::_exit(127);
    }
    QueueUrl u;
    u.host = "127.0.0.1";
    u.port = port_;
    u.text = url();
    for (int i = 0; i < 200; ++i) {
      auto r = Redis::connect(u, 1, 1);
      if (r.ok()) {
        auto ping = (*r)->command({"PING"});
        // A server that wants a password answers NOAUTH: it is up.
        if (ping.ok() || ping.status().message().find("NOAUTH") != std::string::npos) return true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(25));
    }
    return false;
  }
  void stop(int sig) {
    if (pid_ <= 0) return;
    ::kill(pid_, sig);
    int st;
    ::waitpid(pid_, &st, 0);
    pid_ = -1;
  }
  // Removes what the server stored (while it is stopped): it comes back empty.
  void wipe() {
    std::system(("rm -rf '" + dir_ + "'/appendonlydir '" + dir_ + "'/*.aof '" + dir_ + "'/*.rdb").c_str());
  }
  std::string url(const std::string& name = "") const {
    return "redis://127.0.0.1:" + std::to_string(port_) + (name.empty() ? "" : "/" + name);
  }
  int port() const { return port_; }
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
  int port_;
  std::vector<std::string> extra_;
  pid_t pid_ = -1;
};

}  // namespace testing_redis
}  // namespace vinci

#define VINCI_NEED_REDIS()                                                                     \
  if (!::vinci::testing_redis::redis_installed())                                              \
  GTEST_SKIP() << "redis-server is not installed (scripts/setup.sh installs it): the queue's " \
                  "tests need a real server"

#endif  // VINCI_TESTS_QUEUE_REDIS_FIXTURE_H_

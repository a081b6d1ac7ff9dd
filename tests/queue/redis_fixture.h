// A real redis-server on loopback for the queue's tests: a free port, a temporary folder, the
// append-only file on and fsynced at every write (so a stop loses nothing acknowledged), no RDB
// snapshots. Tests skip, saying why, when redis-server is not installed (scripts/setup.sh
// installs it).
#ifndef VINCI_TESTS_QUEUE_REDIS_FIXTURE_H_
#define VINCI_TESTS_QUEUE_REDIS_FIXTURE_H_

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <memory>
#include <regex>
#include <string>
#include <vector>

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

  // Starts the server (again, on the same port and folder after a stop) and returns once it says
  // it accepts connections (its log, on its stdout, appended to DIR/redis.log): true. False, a
  // test failure naming its exit status and log, when it exits first (a port taken meanwhile, a
  // bad option), or after clitest::kHangGuardS without either. However long its start takes
  // (loading a large append-only file on a loaded machine), it is waited for.
  bool start() {
    child_ = std::make_unique<clitest::Child>();
    // The log on stdout ("--logfile" ""), where the Child reads it.
    std::string port = std::to_string(port_);
    std::vector<std::string> args = {"redis-server", "--port", port,           "--bind",    "127.0.0.1",
                                     "--save",       "",       "--appendonly", "yes",       "--appendfsync",
                                     "always",       "--dir",  dir_,           "--logfile", ""};
    args.insert(args.end(), extra_.begin(), extra_.end());
    if (!child_->start(args, dir_ + "/redis.log")) {
      ADD_FAILURE() << child_->why();
      return false;
    }
    if (!child_->wait_for(std::regex("Ready to accept connections"))) {
      ADD_FAILURE() << "redis-server on port " << port_ << ": " << child_->why();
      return false;
    }
    return true;
  }
  void stop(int sig) {
    if (!child_) return;
    child_->stop(sig);
    child_.reset();
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
  std::unique_ptr<clitest::Child> child_;
};

}  // namespace testing_redis
}  // namespace vinci

#define VINCI_NEED_REDIS()                                                                     \
  if (!::vinci::testing_redis::redis_installed())                                              \
  GTEST_SKIP() << "redis-server is not installed (scripts/setup.sh installs it): the queue's " \
                  "tests need a real server"

#endif  // VINCI_TESTS_QUEUE_REDIS_FIXTURE_H_

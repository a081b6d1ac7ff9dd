// Helpers of the tests that drive vinci's CLIs end to end (tests/harness/run_test.cc,
// tests/replay/replay_test.cc), and Child: a background process (`harness serve`, `harness run`,
// redis-server) whose output a test waits on.
#ifndef VINCI_TESTS_CLI_TEST_UTIL_H_
#define VINCI_TESTS_CLI_TEST_UTIL_H_

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <regex>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace vinci {
namespace clitest {

// A new folder /tmp/<prefix>XXXXXX.
inline std::string temp_dir(const std::string& prefix) {
  std::string tmpl = "/tmp/" + prefix + "XXXXXX";
  return mkdtemp(&tmpl[0]);
}

// Runs a shell command; returns its exit code and puts stdout+stderr in *out.
inline int sh(const std::string& cmd, std::string* out) {
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  char buf[4096];
  out->clear();
  while (size_t n = fread(buf, 1, sizeof buf, p)) out->append(buf, n);
  int st = pclose(p);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

// Empty when strace can trace here (the kill tests inject SIGKILL with it); else why not, for a
// GTEST_SKIP: some containers forbid ptrace.
inline std::string strace_unusable() {
  std::string out;
  if (sh("strace -f -qq -o /dev/null true", &out) == 0) return "";
  return "strace cannot trace here (scripts/setup.sh installs it; ptrace may be forbidden in this "
         "container): " +
         out;
}

// How long a test waits on a child (for a line, for its exit) before it calls it stuck: a guard
// so that a hung test cannot hold CI forever, never a measure of speed. Tests wait on events (a
// line printed, an exit), so a machine 10x slower only takes longer.
constexpr int kHangGuardS = 600;

// "exited with status 2", "was killed by signal 9 (Killed)".
inline std::string describe_wait_status(int st) {
  if (WIFEXITED(st)) return "exited with status " + std::to_string(WEXITSTATUS(st));
  if (WIFSIGNALED(st)) {
    return "was killed by signal " + std::to_string(WTERMSIG(st)) + " (" + strsignal(WTERMSIG(st)) + ")";
  }
  return "ended with wait status " + std::to_string(st);
}

// A child process whose stdout and stderr go through one pipe to a thread that reads them as they
// come (into memory, and appended to a log file), so that a test waits on what the child says, or
// on its exit, never on a clock: wait_for blocks until a line appears or the child's output ends.
// The pipe is always drained, so a child that prints a lot never blocks on it. Another thread
// reaps the child (blocking waitpid): do not wait for its pid elsewhere.
class Child {
 public:
  Child() = default;
  // A child still running is killed (SIGKILL) and reaped.
  ~Child() {
    if (pid_ > 0) {
      std::lock_guard<std::mutex> lock(mu_);
      if (!exited_) ::kill(pid_, SIGKILL);
    }
    if (waiter_.joinable()) waiter_.join();
    wake();  // a reader still blocked (a grandchild holds the pipe) stops
    if (reader_.joinable()) reader_.join();
    for (int fd : {out_fd_, wake_rd_, wake_wr_, log_fd_}) {
      if (fd >= 0) ::close(fd);
    }
  }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  // Starts argv (argv[0]: a path, or a name looked up in PATH) with `env` ("NAME=VALUE") added to
  // its environment; what it prints is appended to `log` too ("": kept in memory only). False when
  // it cannot start (why() says why); a program that is not there exits 127.
  bool start(const std::vector<std::string>& argv, const std::string& log = "",
             const std::vector<std::string>& env = {}) {
    command_.clear();
    for (const auto& a : argv) command_ += (command_.empty() ? "" : " ") + a;
    int out[2], wk[2];
    if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(wk, O_CLOEXEC) != 0) {
      why_ = command_ + ": pipe: " + strerror(errno);
      return false;
    }
    if (!log.empty()) log_fd_ = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    std::vector<std::string> args = argv, envs = env;
    std::vector<char*> argp, envp;
    for (auto& a : args) argp.push_back(&a[0]);
    argp.push_back(nullptr);
    for (auto& e : envs) envp.push_back(&e[0]);
    for (char** e = environ; *e != nullptr; ++e) envp.push_back(*e);
    envp.push_back(nullptr);
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(out[1], 1);
      ::dup2(out[1], 2);
      ::execvpe(argp[0], argp.data(), envp.data());
      ::_exit(127);
    }
    ::close(out[1]);
    if (pid_ < 0) {
      why_ = command_ + ": fork: " + strerror(errno);
      ::close(out[0]);
      ::close(wk[0]);
      ::close(wk[1]);
      return false;
    }
    out_fd_ = out[0];
    wake_rd_ = wk[0];
    wake_wr_ = wk[1];
    ::fcntl(out_fd_, F_SETFL, ::fcntl(out_fd_, F_GETFL) | O_NONBLOCK);
    ::fcntl(wake_rd_, F_SETFL, ::fcntl(wake_rd_, F_GETFL) | O_NONBLOCK);
    reader_ = std::thread([this] { read_output(); });
    waiter_ = std::thread([this] {
      // Waits for the exit without reaping, then reaps under the lock: a signal the test sends
      // (under the lock, while !exited_) never goes to a pid already reaped.
      siginfo_t info;
      while (::waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOWAIT) < 0 && errno == EINTR) {
      }
      {
        std::lock_guard<std::mutex> lock(mu_);
        int st = 0;
        while (::waitpid(pid_, &st, 0) < 0 && errno == EINTR) {
        }
        exited_ = true;
        status_ = st;
      }
      cv_.notify_all();
      wake();  // what the child printed before it exited is in the pipe: the reader takes it and ends
    });
    return true;
  }

  // Blocks until the child's output holds a match of `pattern`: true, with the match's groups in
  // *groups ([0] the whole match). False when its output ends first (it exited: why() names its
  // exit status and holds its output), or after kHangGuardS without either (why() says so).
  bool wait_for(const std::regex& pattern, std::vector<std::string>* groups = nullptr) {
    auto guard = std::chrono::steady_clock::now() + std::chrono::seconds(kHangGuardS);
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      std::smatch m;
      if (std::regex_search(out_, m, pattern)) {
        if (groups) groups->assign(m.begin(), m.end());
        return true;
      }
      if (out_done_) break;
      if (cv_.wait_until(lock, guard) == std::cv_status::timeout && !out_done_) {
        why_ = command_ + " printed no line it was waited for in " + std::to_string(kHangGuardS) +
               " s (the test's hang guard), and is still running; its output:\n" + out_;
        return false;
      }
    }
    // The output ended: the child exited (or closed its output, and is about to).
    cv_.wait_until(lock, guard, [this] { return exited_; });
    why_ = command_ + (exited_ ? " " + describe_wait_status(status_) : " closed its output") +
           " before it printed the line it was waited for; its output:\n" + out_;
    return false;
  }

  // Blocks until the child exits; its wait status (describe_wait_status). One still running after
  // kHangGuardS is killed (SIGKILL) and -1 returned, why() saying so.
  int wait() {
    std::unique_lock<std::mutex> lock(mu_);
    if (pid_ <= 0) return -1;
    if (!cv_.wait_for(lock, std::chrono::seconds(kHangGuardS), [this] { return exited_ && out_done_; }) && !exited_) {
      why_ = command_ + " did not exit in " + std::to_string(kHangGuardS) + " s (the test's hang guard): killed";
      ::kill(pid_, SIGKILL);  // under the lock, not yet reaped
      cv_.wait(lock, [this] { return exited_; });
      return -1;
    }
    return status_;
  }

  // Sends `sig` (once the child is still running), then wait().
  int stop(int sig = SIGTERM) {
    if (pid_ <= 0) return -1;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!exited_) ::kill(pid_, sig);
    }
    return wait();
  }

  pid_t pid() const { return pid_; }
  bool running() const {
    std::lock_guard<std::mutex> lock(mu_);
    return pid_ > 0 && !exited_;
  }
  // Everything it printed so far, stdout and stderr as they came.
  std::string output() const {
    std::lock_guard<std::mutex> lock(mu_);
    return out_;
  }
  // Why the last wait_for or wait failed.
  std::string why() const {
    std::lock_guard<std::mutex> lock(mu_);
    return why_;
  }

 private:
  void wake() {
    if (wake_wr_ >= 0) {
      char c = 1;
      (void)!::write(wake_wr_, &c, 1);
    }
  }

  // Reads the pipe as the child writes (poll without a timeout) until its end, or until the child
  // has exited and what it left in the pipe is read.
  void read_output() {
    char buf[65536];
    bool last_pass = false;
    for (;;) {
      if (!last_pass) {
        pollfd fds[2] = {{out_fd_, POLLIN, 0}, {wake_rd_, POLLIN, 0}};
        if (::poll(fds, 2, -1) < 0 && errno != EINTR) break;
        if (fds[1].revents) {
          while (::read(wake_rd_, buf, sizeof buf) > 0) {
          }
          last_pass = true;  // the child exited, or the Child is going away
        }
      }
      ssize_t n = ::read(out_fd_, buf, sizeof buf);
      if (n > 0) {
        if (log_fd_ >= 0) (void)!::write(log_fd_, buf, static_cast<size_t>(n));
        {
          std::lock_guard<std::mutex> lock(mu_);
          out_.append(buf, static_cast<size_t>(n));
        }
        cv_.notify_all();
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno == EAGAIN && !last_pass) continue;
      break;  // the end of the output, or nothing more after the child's exit
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      out_done_ = true;
    }
    cv_.notify_all();
  }

  std::string command_;
  pid_t pid_ = -1;
  int out_fd_ = -1, wake_rd_ = -1, wake_wr_ = -1, log_fd_ = -1;
  std::thread reader_, waiter_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::string out_, why_;
  bool out_done_ = false, exited_ = false;
  int status_ = 0;
};

}  // namespace clitest
}  // namespace vinci

#endif  // VINCI_TESTS_CLI_TEST_UTIL_H_

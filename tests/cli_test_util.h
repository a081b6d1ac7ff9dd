// Helpers of the tests that drive vinci's CLIs end to end (tests/harness/run_test.cc,
// tests/replay/replay_test.cc).
#ifndef VINCI_TESTS_CLI_TEST_UTIL_H_
#define VINCI_TESTS_CLI_TEST_UTIL_H_

#include <stdlib.h>
#include <sys/wait.h>

#include <cstdio>
#include <string>

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

}  // namespace clitest
}  // namespace vinci

#endif  // VINCI_TESTS_CLI_TEST_UTIL_H_

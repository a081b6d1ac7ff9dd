#include "core/scratch_dir.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "core/atomic_file.h"

namespace vinci {
namespace {

bool exists(const std::string& path) {
  struct stat sb;
  return ::stat(path.c_str(), &sb) == 0;
}

// Sets TMPDIR for one test.
class ScratchDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/vinci_scratch_test_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    const char* old = std::getenv("TMPDIR");
    had_ = old != nullptr;
    if (had_) old_ = old;
    ::setenv("TMPDIR", (root_ + "/").c_str(), 1);
  }
  void TearDown() override {
    if (had_) {
      ::setenv("TMPDIR", old_.c_str(), 1);
    } else {
      ::unsetenv("TMPDIR");
    }
  }
  // A child process that creates a scratch folder, says its path on a pipe and waits to be killed.
  pid_t owner(std::string* path) {
    int fds[2];
    EXPECT_EQ(::pipe(fds), 0);
    pid_t pid = ::fork();
    if (pid == 0) {
      ::close(fds[0]);
      auto s = ScratchDir::create("vinci_test");
      std::string p = s.ok() ? s->path() : "";
      p += "\n";
      if (::write(fds[1], p.data(), p.size()) < 0) _exit(1);
      for (;;) ::pause();
    }
    ::close(fds[1]);
    char c;
    path->clear();
    while (::read(fds[0], &c, 1) == 1 && c != '\n') path->push_back(c);
    ::close(fds[0]);
    return pid;
  }
  std::string root_, old_;
  bool had_ = false;
};

TEST_F(ScratchDirTest, LivesUnderTmpdirAndIsRemovedWithItsOwner) {
  EXPECT_EQ(temp_root(), root_);
  std::string path;
  {
    auto s = ScratchDir::create("vinci_test");
    ASSERT_TRUE(s.ok()) << s.status().to_string();
    path = s->path();
    EXPECT_EQ(path.rfind(root_ + "/vinci_test_", 0), 0u) << path;
    ASSERT_TRUE(write_file_atomic(path + "/a/b/c", "x").ok());
  }
  EXPECT_FALSE(exists(path));
  ::setenv("TMPDIR", (root_ + "/none").c_str(), 1);
  auto bad = ScratchDir::create("vinci_test");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("cannot create a scratch folder in " + root_ + "/none (TMPDIR)"),
            std::string::npos)
      << bad.status().to_string();
}

// A SIGKILL leaves the folder; the next owner removes it, and leaves a live owner's alone.
TEST_F(ScratchDirTest, AKilledOwnersFolderIsRemovedByTheNext) {
  std::string killed, alive;
  pid_t a = owner(&killed);
  pid_t b = owner(&alive);
  ASSERT_FALSE(killed.empty());
  ASSERT_FALSE(alive.empty());
  ASSERT_EQ(::kill(a, SIGKILL), 0);
  ASSERT_EQ(::waitpid(a, nullptr, 0), a);
  EXPECT_TRUE(exists(killed));
  {
    auto next = ScratchDir::create("vinci_test");
    ASSERT_TRUE(next.ok()) << next.status().to_string();
    EXPECT_FALSE(exists(killed));
    EXPECT_TRUE(exists(alive));
  }
  ::kill(b, SIGKILL);
  ::waitpid(b, nullptr, 0);
}

}  // namespace
}  // namespace vinci

#include "core/atomic_file.h"

#include <dirent.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

namespace vinci {
namespace {

std::string temp_dir() {
  char tmpl[] = "/tmp/vinci_atomic_XXXXXX";
  char* d = mkdtemp(tmpl);
  EXPECT_NE(d, nullptr);
  return d;
}

int count_entries(const std::string& dir) {
  DIR* d = opendir(dir.c_str());
  int n = 0;
  while (dirent* e = readdir(d)) {
    std::string name = e->d_name;
    if (name != "." && name != "..") ++n;
  }
  closedir(d);
  return n;
}

TEST(AtomicFile, WritesReplacesAndLeavesNoTemp) {
  std::string dir = temp_dir() + "/a/b";
  std::string path = dir + "/f.txt";
  ASSERT_TRUE(write_file_atomic(path, "one").ok());
  EXPECT_EQ(read_file(path).value(), "one");
  ASSERT_TRUE(write_file_atomic(path, "two two").ok());
  EXPECT_EQ(read_file(path).value(), "two two");
  EXPECT_EQ(count_entries(dir), 1);
}

TEST(AtomicFile, MissingFileIsNotFound) {
  auto r = read_file("/nonexistent/vinci/file");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find("/nonexistent/vinci/file"), std::string::npos);
}

TEST(AtomicFile, UnwritableTargetFailsWithoutPartialFile) {
  std::string dir = temp_dir();
  // A folder where the file should go: rename fails, and no temp file is left behind.
  ASSERT_TRUE(make_dirs(dir + "/target").ok());
  ASSERT_TRUE(make_dirs(dir + "/target/inner").ok());
  Status st = write_file_atomic(dir + "/target", "x");
  EXPECT_FALSE(st.ok());
  EXPECT_EQ(count_entries(dir), 1);
}

}  // namespace
}  // namespace vinci

#include "core/atomic_file.h"

#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
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

// The message of a refused read, and that it is an InvalidArgument naming the file.
std::string refusal(const std::string& path, const FileKind& kind) {
  auto r = read_file(path, kind);
  EXPECT_FALSE(r.ok()) << path;
  if (r.ok()) return "";
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().to_string();
  EXPECT_NE(r.status().message().find(path), std::string::npos) << r.status().to_string();
  return r.status().message();
}

// /dev/zero and /dev/urandom never end: an unbounded read takes all memory (std::bad_alloc).
TEST(BoundedRead, RefusesDevicesFifosSocketsAndFolders) {
  EXPECT_NE(refusal("/dev/zero", kConfigFile).find("expected a regular file (config), found a character device"),
            std::string::npos);
  EXPECT_NE(refusal("/dev/urandom", kSkillLibraryFile).find("found a character device"), std::string::npos);
  std::string dir = temp_dir();
  EXPECT_NE(refusal(dir, kConfigFile).find("found a folder"), std::string::npos);
  // A FIFO without a writer: opening it for reading would wait forever.
  std::string fifo = dir + "/fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_NE(refusal(fifo, kPlanFile).find("found a FIFO"), std::string::npos);
  std::string sock = dir + "/sock";
  int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", sock.c_str());
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  EXPECT_NE(refusal(sock, kConfigFile).find("found a socket"), std::string::npos);
  ::close(fd);
  // A link to a device is the device.
  ASSERT_EQ(::symlink("/dev/zero", (dir + "/link").c_str()), 0);
  EXPECT_NE(refusal(dir + "/link", kConfigFile).find("found a character device"), std::string::npos);
}

// Every kind of file refuses what never ends, what would block and what is not a file, with the
// whole message: the path, the kind, and what was found. A FIFO with no writer and one whose
// writer never writes are refused at once (the reader opens with O_NONBLOCK and checks the type
// before reading); a hang here is the bug, which the test's ctest timeout reports.
TEST(BoundedRead, EveryKindRefusesDevicesFifosAndFoldersNamingWhatItFound) {
  const FileKind kinds[] = {kConfigFile,     kDeviceProfileFile, kTaskFile,        kPromptTemplateFile,
                            kPlanFile,       kSkillLibraryFile,  kMeasurementFile, kManifestFile,
                            kLogSegmentFile, kObjectFile,        kAnyFile};
  std::string dir = temp_dir();
  std::string fifo = dir + "/fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  ASSERT_EQ(::symlink(dir.c_str(), (dir + "/folder_link").c_str()), 0);
  ASSERT_EQ(::symlink(fifo.c_str(), (dir + "/fifo_link").c_str()), 0);
  const std::pair<std::string, const char*> cases[] = {{"/dev/zero", "a character device"},
                                                       {"/dev/null", "a character device"},
                                                       {fifo, "a FIFO"},
                                                       {dir + "/fifo_link", "a FIFO"},
                                                       {dir, "a folder"},
                                                       {dir + "/folder_link", "a folder"}};
  for (const FileKind& kind : kinds) {
    for (const auto& [path, found] : cases) {
      EXPECT_EQ(refusal(path, kind), path + ": expected a regular file (" + kind.name + "), found " + found);
    }
    // A FIFO whose writer holds it open and never writes: still refused, not read.
    int writer = ::open(fifo.c_str(), O_RDWR | O_NONBLOCK);
    ASSERT_GE(writer, 0);
    EXPECT_EQ(refusal(fifo, kind), fifo + ": expected a regular file (" + kind.name + "), found a FIFO");
    ::close(writer);
  }
}

// Every kind refuses a file one byte past its limit by its size, before reading a byte (the files
// here are sparse: no byte is written), naming the file, the kind, the limit and the size.
TEST(BoundedRead, EveryKindRefusesAFileOneBytePastItsLimit) {
  const std::pair<FileKind, const char*> kinds[] = {{kConfigFile, "16 MiB"},
                                                    {kDeviceProfileFile, "16 MiB"},
                                                    {kTaskFile, "16 MiB"},
                                                    {kPromptTemplateFile, "16 MiB"},
                                                    {kPlanFile, "16 MiB"},
                                                    {kSkillLibraryFile, "256 MiB"},
                                                    {kMeasurementFile, "1 GiB"},
                                                    {kManifestFile, "64 MiB"},
                                                    {kLogSegmentFile, "134221824 bytes"},
                                                    {kObjectFile, "67112960 bytes"},
                                                    {kAnyFile, "1 GiB"}};
  std::string path = temp_dir() + "/sparse";
  for (const auto& [kind, limit] : kinds) {
    ASSERT_TRUE(write_file_atomic(path, "").ok());
    ASSERT_EQ(::truncate(path.c_str(), static_cast<off_t>(kind.max_bytes + 1)), 0) << std::strerror(errno);
    EXPECT_EQ(refusal(path, kind), path + ": expected " + (std::strchr("aeiou", kind.name[0]) ? "an " : "a ") +
                                       kind.name + " of at most " + limit + ", found " +
                                       std::to_string(kind.max_bytes + 1) + " bytes");
  }
}

TEST(BoundedRead, AFileOverItsKindsLimitIsRefusedAtTheLimit) {
  std::string path = temp_dir() + "/f";
  ASSERT_TRUE(write_file_atomic(path, std::string(100, 'x')).ok());
  constexpr FileKind kTiny{"tiny file", 100};
  EXPECT_EQ(read_file(path, kTiny).value(), std::string(100, 'x'));
  ASSERT_TRUE(write_file_atomic(path, std::string(101, 'x')).ok());
  EXPECT_NE(refusal(path, kTiny).find("expected a tiny file of at most 100 bytes, found 101 bytes"), std::string::npos);
  // A file whose size reads as 0 but which has bytes (as /proc files) stops at the limit too.
  constexpr FileKind kTen{"ten", 10};
  auto r = read_file("/proc/self/status", kTen);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("at most 10 bytes"), std::string::npos) << r.status().to_string();
}

}  // namespace
}  // namespace vinci

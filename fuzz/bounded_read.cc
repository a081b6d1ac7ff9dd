// The bounded reader every user-named file goes through (read_file in core/atomic_file.h), on a
// regular file of fuzzed content read with a fuzzed limit. The input is
//
//   limit:u32le repeat:u8 piece...
//
// and the file holds `piece` repeat % 32 + 1 times (up to 32 times the input: past the reader's
// 64 KiB buffer). With limit's high bit clear the limit is near the file's size (size - 64 ...
// size + 64, where the edge cases are), else it is limit's low 31 bits.
//
// Checked: a file within the limit reads back whole and exact (never more than the limit); one
// past it is an InvalidArgument whose message names the file, the kind, the limit and the size.
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "core/atomic_file.h"
#include "fuzz/fuzz_util.h"

namespace {

// The file the target writes every input to, in a folder of its own under $TMPDIR (or /tmp),
// removed when the fuzzer exits.
std::string g_dir;
std::string g_path;

void remove_scratch() {
  ::unlink(g_path.c_str());
  ::rmdir(g_dir.c_str());
}

// How a limit is written in the reader's messages (independently of its own formatting).
std::string limit_text(uint64_t bytes) {
  if (bytes >= (1ull << 30) && bytes % (1ull << 30) == 0) return std::to_string(bytes >> 30) + " GiB";
  if (bytes >= (1ull << 20) && bytes % (1ull << 20) == 0) return std::to_string(bytes >> 20) + " MiB";
  return std::to_string(bytes) + " bytes";
}

void write_whole(const std::string& bytes) {
  int fd = ::open(g_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  VINCI_FUZZ_CHECK(fd >= 0, "cannot open " + g_path + ": " + std::strerror(errno));
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    VINCI_FUZZ_CHECK(n > 0, "cannot write " + g_path + ": " + std::strerror(errno));
    done += static_cast<size_t>(n);
  }
  ::close(fd);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const char* tmp = std::getenv("TMPDIR");
  std::string tmpl = std::string(tmp && *tmp ? tmp : "/tmp") + "/vinci_fuzz_read_XXXXXX";
  char* dir = ::mkdtemp(tmpl.data());
  VINCI_FUZZ_CHECK(dir != nullptr, "cannot make a scratch folder " + tmpl + ": " + std::strerror(errno));
  g_dir = dir;
  g_path = g_dir + "/input";
  std::atexit(remove_scratch);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 5) return 0;
  uint32_t raw = 0;
  for (int i = 0; i < 4; ++i) raw |= static_cast<uint32_t>(data[i]) << (8 * i);
  const size_t repeat = data[4] % 32 + 1;
  const std::string piece(reinterpret_cast<const char*>(data) + 5, size - 5);
  std::string content;
  content.reserve(piece.size() * repeat);
  for (size_t i = 0; i < repeat; ++i) content += piece;
  uint64_t limit;
  if (raw & 0x80000000u) {
    limit = raw & 0x7fffffffu;
  } else {
    int64_t near = static_cast<int64_t>(content.size()) + static_cast<int64_t>(raw % 129) - 64;
    limit = near < 0 ? 0 : static_cast<uint64_t>(near);
  }
  write_whole(content);

  const vinci::FileKind kind{"fuzzed file", limit};
  vinci::Result<std::string> read = vinci::read_file(g_path, kind);
  if (content.size() <= limit) {
    VINCI_FUZZ_CHECK(read.ok(), "a file of " + std::to_string(content.size()) + " bytes under a limit of " +
                                    std::to_string(limit) + " was refused: " + read.status().to_string());
    VINCI_FUZZ_CHECK(read->size() <= limit, "returned " + std::to_string(read->size()) + " bytes, over the limit");
    VINCI_FUZZ_CHECK(*read == content, "the bytes read differ from the file's");
    return 0;
  }
  VINCI_FUZZ_CHECK(!read.ok(), "a file of " + std::to_string(content.size()) + " bytes was read past a limit of " +
                                   std::to_string(limit) + " (" + std::to_string(read->size()) + " bytes returned)");
  VINCI_FUZZ_CHECK(read.status().code() == vinci::StatusCode::kInvalidArgument, read.status().to_string());
  const std::string want = g_path + ": expected a fuzzed file of at most " + limit_text(limit) + ", found " +
                           std::to_string(content.size()) + " bytes";
  VINCI_FUZZ_CHECK(read.status().message() == want,
                   "message '" + read.status().message() + "', expected '" + want + "'");
  return 0;
}

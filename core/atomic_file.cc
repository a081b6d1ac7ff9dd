#include "core/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

namespace vinci {
namespace {

std::string errno_text(const std::string& what, const std::string& path) {
  return what + " " + path + ": " + std::strerror(errno);
}

std::string parent_of(const std::string& path) {
  auto pos = path.find_last_of('/');
  if (pos == std::string::npos) return ".";
  if (pos == 0) return "/";
  return path.substr(0, pos);
}

}  // namespace

Status make_dirs(const std::string& path) {
  if (path.empty()) return Status();
  std::string cur;
  size_t i = 0;
  while (i <= path.size()) {
    size_t next = path.find('/', i);
    if (next == std::string::npos) next = path.size();
    cur = path.substr(0, next);
    if (!cur.empty() && ::mkdir(cur.c_str(), 0755) != 0 && errno != EEXIST) {
      return io_error(errno_text("cannot create folder", cur));
    }
    i = next + 1;
  }
  struct stat sb;
  if (::stat(path.c_str(), &sb) != 0 || !S_ISDIR(sb.st_mode)) {
    return io_error("not a folder: " + path);
  }
  return Status();
}

Status sync_dir(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return io_error(errno_text("cannot open folder", path));
  int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) return io_error(errno_text("cannot sync folder", path));
  return Status();
}

Status write_file_atomic(const std::string& path, std::string_view bytes, bool durable) {
  std::string dir = parent_of(path);
  VINCI_RETURN_IF_ERROR(make_dirs(dir));
  // Unique per process and call, so concurrent writers of one path never share a temp file.
  static std::atomic<uint64_t> counter{0};
  std::string tmp = path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter.fetch_add(1));
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return io_error(errno_text("cannot create", tmp));
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      Status st = io_error(errno_text("cannot write", tmp));
      ::close(fd);
      ::unlink(tmp.c_str());
      return st;
    }
    done += static_cast<size_t>(n);
  }
  if (durable && ::fsync(fd) != 0) {
    Status st = io_error(errno_text("cannot sync", tmp));
    ::close(fd);
    ::unlink(tmp.c_str());
    return st;
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    Status st = io_error(errno_text("cannot rename into place", path));
    ::unlink(tmp.c_str());
    return st;
  }
  return durable ? sync_dir(dir) : Status();
}

namespace {

// "a folder", "a character device": what a non-regular file is, for messages.
const char* file_type_name(mode_t mode) {
  if (S_ISDIR(mode)) return "a folder";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISREG(mode)) return "a regular file";
  return "not a regular file";
}

std::string size_text(uint64_t bytes) {
  if (bytes >= (1u << 30) && bytes % (1u << 30) == 0) return std::to_string(bytes >> 30) + " GiB";
  if (bytes >= (1u << 20) && bytes % (1u << 20) == 0) return std::to_string(bytes >> 20) + " MiB";
  return std::to_string(bytes) + " bytes";
}

Status wrong_type(const std::string& path, const FileKind& kind, mode_t mode) {
  return invalid_argument(path + ": expected a regular file (" + kind.name + "), found " + file_type_name(mode));
}

Status too_large(const std::string& path, const FileKind& kind, const std::string& found) {
  const char* article = std::strchr("aeiou", kind.name[0]) != nullptr && kind.name[0] != '\0' ? "an " : "a ";
  return invalid_argument(path + ": expected " + article + kind.name + " of at most " + size_text(kind.max_bytes) +
                          ", found " + found);
}

}  // namespace

Result<std::string> read_file(const std::string& path, const FileKind& kind) {
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer; the type check
  // below refuses it right after the open.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    if (errno == ENOENT) return not_found("no such file: " + path);
    if (errno == ENXIO) return invalid_argument(path + ": expected a regular file (" + kind.name + "), found a socket");
    return io_error(errno_text("cannot open", path));
  }
  struct stat sb;
  if (::fstat(fd, &sb) != 0) {
    Status st = io_error(errno_text("cannot stat", path));
    ::close(fd);
    return st;
  }
  if (!S_ISREG(sb.st_mode) || static_cast<uint64_t>(sb.st_size) > kind.max_bytes) {
    ::close(fd);
    if (!S_ISREG(sb.st_mode)) return wrong_type(path, kind, sb.st_mode);
    return too_large(path, kind, std::to_string(sb.st_size) + " bytes");
  }
  std::string out;
  out.reserve(static_cast<size_t>(sb.st_size));
  char buf[1 << 16];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      Status st = io_error(errno_text("cannot read", path));
      ::close(fd);
      return st;
    }
    if (n == 0) break;
    // A file that grows while read (or a /proc file whose size reads as 0) stops at the limit.
    if (out.size() + static_cast<size_t>(n) > kind.max_bytes) {
      ::close(fd);
      return too_large(path, kind, "more (it grew while read)");
    }
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

}  // namespace vinci

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

Result<std::string> read_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return not_found("no such file: " + path);
    return io_error(errno_text("cannot open", path));
  }
  std::string out;
  char buf[1 << 16];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      Status st = io_error(errno_text("cannot read", path));
      ::close(fd);
      return st;
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

}  // namespace vinci

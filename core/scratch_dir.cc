#include "core/scratch_dir.h"

#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace vinci {
namespace {

// Removes the folders PREFIX_* under root whose lock nobody holds. A folder without its lock file
// yet is being created (or was left by a vinci that did not lock): it is left alone.
void sweep_abandoned(const std::string& root, const std::string& prefix) {
  DIR* d = ::opendir(root.c_str());
  if (!d) return;
  std::vector<std::string> names;
  while (dirent* e = ::readdir(d)) {
    std::string name = e->d_name;
    if (name.rfind(prefix + "_", 0) == 0) names.push_back(name);
  }
  ::closedir(d);
  for (const std::string& name : names) {
    std::string dir = root + "/" + name;
    int fd = ::open((dir + "/lock").c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) continue;
    if (::flock(fd, LOCK_EX | LOCK_NB) == 0) {
      remove_folder(dir);
    }
    ::close(fd);
  }
}

int remove_entry(const char* path, const struct stat*, int, struct FTW*) { return ::remove(path); }

}  // namespace

void remove_folder(const std::string& dir) {
  if (!dir.empty() && dir != "/") ::nftw(dir.c_str(), remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

std::string temp_root() {
  const char* t = std::getenv("TMPDIR");
  std::string root = t != nullptr && *t != 0 ? t : "/tmp";
  while (root.size() > 1 && root.back() == '/') root.pop_back();
  return root;
}

Result<ScratchDir> ScratchDir::create(const std::string& prefix) {
  const std::string root = temp_root();
  sweep_abandoned(root, prefix);
  std::string tmpl = root + "/" + prefix + "_XXXXXX";
  if (!::mkdtemp(&tmpl[0])) {
    return io_error("cannot create a scratch folder in " + root + " (TMPDIR): " + std::strerror(errno));
  }
  // Locked under a temporary name, then named "lock": a sweeper never sees it unlocked.
  std::string pending = tmpl + "/lock.pending";
  int fd = ::open(pending.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0 || ::flock(fd, LOCK_EX) != 0 || ::rename(pending.c_str(), (tmpl + "/lock").c_str()) != 0) {
    Status st = io_error("cannot lock the scratch folder " + tmpl + ": " + std::strerror(errno));
    if (fd >= 0) ::close(fd);
    remove_folder(tmpl);
    return st;
  }
  return ScratchDir(tmpl, fd);
}

ScratchDir::ScratchDir(ScratchDir&& other) noexcept : path_(std::move(other.path_)), lock_fd_(other.lock_fd_) {
  other.path_.clear();
  other.lock_fd_ = -1;
}

ScratchDir::~ScratchDir() {
  if (!path_.empty()) remove_folder(path_);
  if (lock_fd_ >= 0) ::close(lock_fd_);
}

}  // namespace vinci

// Scratch folders of commands that must not write beside what they read (`replay verify`): under
// $TMPDIR (else /tmp), removed when their owner ends, and swept by the next owner when it was
// killed.
//
// Each folder holds a file "lock" that its owner keeps locked (flock) while it lives. The lock is
// taken before the file gets its name, so a folder whose "lock" can be locked by someone else has
// no owner any more: a SIGKILL or a crash left it, and ScratchDir::create removes it.
#ifndef VINCI_CORE_SCRATCH_DIR_H_
#define VINCI_CORE_SCRATCH_DIR_H_

#include <string>

#include "core/status.h"

namespace vinci {

// $TMPDIR when it is set and not empty, else /tmp.
std::string temp_root();

class ScratchDir {
 public:
  // Creates temp_root()/PREFIX_XXXXXX, after removing every PREFIX_* folder there whose owner is
  // gone. PREFIX names the command ("vinci_verify"). Errors name the folder.
  static Result<ScratchDir> create(const std::string& prefix);

  ScratchDir(ScratchDir&& other) noexcept;
  ScratchDir& operator=(ScratchDir&&) = delete;
  ScratchDir(const ScratchDir&) = delete;
  ~ScratchDir();  // removes the folder and everything in it

  const std::string& path() const { return path_; }

 private:
  ScratchDir(std::string path, int lock_fd) : path_(std::move(path)), lock_fd_(lock_fd) {}
  std::string path_;
  int lock_fd_ = -1;
};

// Removes a folder and everything in it, never following a link (nftw, FTW_PHYS). Not
// std::filesystem::remove_all: a libtorch build may export its own copy of that function, and the
// dynamic linker then binds vinci's call to it (PyTorch 2.11's libtorch.so on the GPU machine
// jumps to address 0 there). Errors are ignored: what could not be removed stays.
void remove_folder(const std::string& dir);

}  // namespace vinci

#endif  // VINCI_CORE_SCRATCH_DIR_H_

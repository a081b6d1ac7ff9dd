// Atomic file writes: temp file in the same folder, fsync, rename, fsync the folder.
//
// A reader sees the old file or the whole new one, never a half-written one, also after a crash.
// Commit is explicit; a writer destroyed without commit removes its temp file and leaves the
// target untouched (as ccache's AtomicFile).
#ifndef VINCI_CORE_ATOMIC_FILE_H_
#define VINCI_CORE_ATOMIC_FILE_H_

#include <string>
#include <string_view>

#include "core/status.h"

namespace vinci {

// Writes bytes to path atomically. Creates missing parent folders. With durable, the file and the
// folder are fsync'd, so the new file survives a power loss too; without, it survives the writer's
// crash or SIGKILL (rename is atomic to every other process) but not a power loss.
Status write_file_atomic(const std::string& path, std::string_view bytes, bool durable = true);

// Reads a whole file.
Result<std::string> read_file(const std::string& path);

// mkdir -p.
Status make_dirs(const std::string& path);

// fsync a folder so a rename or a new file in it is durable.
Status sync_dir(const std::string& path);

}  // namespace vinci

#endif  // VINCI_CORE_ATOMIC_FILE_H_

// Atomic file writes: temp file in the same folder, fsync, rename, fsync the folder.
//
// A reader sees the old file or the whole new one, never a half-written one, also after a crash.
// Commit is explicit; a writer destroyed without commit removes its temp file and leaves the
// target untouched (as ccache's AtomicFile).
#ifndef VINCI_CORE_ATOMIC_FILE_H_
#define VINCI_CORE_ATOMIC_FILE_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "core/status.h"

namespace vinci {

// Writes bytes to path atomically. Creates missing parent folders. With durable, the file and the
// folder are fsync'd, so the new file survives a power loss too; without, it survives the writer's
// crash or SIGKILL (rename is atomic to every other process) but not a power loss.
Status write_file_atomic(const std::string& path, std::string_view bytes, bool durable = true);

// A kind of file vinci reads whole, with the most bytes it accepts of it. Every file a user names
// (or a run folder holds) is read through read_file with its kind, so /dev/zero, a FIFO or a
// runaway file is refused with a message instead of filling memory. The limits are listed in
// docs/input_limits.md; each is far above any file vinci writes or ships, so a file past it is
// not one vinci can use.
struct FileKind {
  const char* name;    // in messages: "experiment config", "run log segment"
  uint64_t max_bytes;  // a larger file is refused
};

// TOML experiment configs and their bases, --expect files, device profiles, task files, prompt
// templates: the largest shipped, a task file, is under 160 KiB.
constexpr FileKind kConfigFile{"config", 16u << 20};
constexpr FileKind kDeviceProfileFile{"device profile", 16u << 20};
constexpr FileKind kTaskFile{"task file", 16u << 20};
constexpr FileKind kPromptTemplateFile{"prompt template", 16u << 20};
// A --plan file (plan JSON or a model reply): a kernel's source, a few KiB.
constexpr FileKind kPlanFile{"plan", 16u << 20};
// A skill library (library.seed, skills search): JSON lines, about 1 KiB per skill.
constexpr FileKind kSkillLibraryFile{"skill library", 256u << 20};
// A measurement file (--from-measurements, --reuse, calibration samples): one line per
// measurement, under 1 KiB each.
constexpr FileKind kMeasurementFile{"measurement file", 1u << 30};
// A run's manifest.bin: the world and the config text, a few KiB.
constexpr FileKind kManifestFile{"run manifest", 64u << 20};
// A run log segment: a writer starts a new segment past 64 MiB and a frame holds at most 64 MiB
// (recorder/run_log.h), so no segment it writes exceeds 128 MiB and its header.
constexpr FileKind kLogSegmentFile{"run log segment", (128u << 20) + 4096};
// An object file of a run's store: a frame's payload at most (64 MiB) and its header.
constexpr FileKind kObjectFile{"object file", (64u << 20) + 4096};
// Any other file (tests, files vinci wrote itself).
constexpr FileKind kAnyFile{"file", 1u << 30};

// Reads a whole file of the given kind. Refuses what is not a regular file (a folder, a device, a
// FIFO, a socket) without blocking on it, and a file larger than kind.max_bytes, also one that
// grows past it while being read. Errors name the file, what was expected and what was found:
// NotFound for a missing file, InvalidArgument for the wrong type or size, IoError otherwise.
Result<std::string> read_file(const std::string& path, const FileKind& kind = kAnyFile);

// mkdir -p.
Status make_dirs(const std::string& path);

// fsync a folder so a rename or a new file in it is durable.
Status sync_dir(const std::string& path);

}  // namespace vinci

#endif  // VINCI_CORE_ATOMIC_FILE_H_

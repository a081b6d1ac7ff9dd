// A run's append-only log: segment files of checksummed frames.
//
// Grammar (little-endian; docs/log_format.md has the full description):
//
//   log       := segment+                       files DIR/00000000.vlog, DIR/00000001.vlog, ...
//   segment   := header frame*
//   header    := magic:"VINCILOG" version:u32 index:u32 first:u64
//                (24 bytes; index = the file's number, first = the log-wide number of its first
//                frame, so a segment cut short at a frame boundary is still detected)
//   frame     := length:u32 checksum:u32 payload[length]       (1 <= length <= kMaxFrame)
//   checksum  := low 32 bits of XXH3-64(payload, seed = length)
//
// A frame's payload is one record (a packed Cap'n Proto message of schema::Record); this layer
// does not look inside. Frames never span segments; a writer starts a new segment when the
// current one would pass its size limit.
//
// Damage: a reader returns every frame up to the first one that is torn (runs past the end of
// its file) or corrupt (bad length or checksum), and reports that frame's file and offset. Nothing
// before the damage is lost. A writer reopening a log continues after the last good frame of the
// last segment, truncating the damaged tail; damage in an earlier segment cannot be repaired
// by appending and is an error.
//
// Determinism: the bytes of a log are a function of the payloads and their order alone (no
// timestamps, no padding from buffering), so the same records give byte-identical segments.
#ifndef VINCI_RECORDER_RUN_LOG_H_
#define VINCI_RECORDER_RUN_LOG_H_

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/hash.h"
#include "core/status.h"

namespace vinci {

constexpr char kLogMagic[8] = {'V', 'I', 'N', 'C', 'I', 'L', 'O', 'G'};
constexpr uint32_t kLogVersion = 1;
constexpr size_t kSegmentHeaderSize = 24;
constexpr size_t kFrameHeaderSize = 8;
constexpr uint32_t kMaxFrame = 64u << 20;

uint32_t frame_checksum(std::string_view payload);
std::string segment_file_name(uint32_t index);  // "00000007.vlog"

// Where a log stops being readable.
struct LogDamage {
  std::string file;
  uint64_t offset = 0;  // byte offset of the damaged frame (or header) in file
  std::string what;     // "torn frame: length 812 runs past the end of the file (500 bytes left)"
  std::string to_string() const { return file + " at offset " + std::to_string(offset) + ": " + what; }
};

// The run digest: XXH3-128 over every frame, each as length:u64 then payload. Two logs with
// equal digests hold the same records in the same order.
class RunDigest {
 public:
  RunDigest() : hasher_("run-digest") {}
  void add(std::string_view payload);
  Digest value() const { return hasher_.finish(); }
  uint64_t count() const { return count_; }

 private:
  Hasher hasher_;
  uint64_t count_ = 0;
};

struct LogFrame {
  std::string_view payload;  // valid until the reader moves to another segment
  uint64_t index = 0;        // frame number in the log, from 0
  uint32_t segment = 0;
  uint64_t offset = 0;  // of the frame header in its segment file
};

class RunLogReader {
 public:
  // Opens the log in dir. A missing dir or a dir with no segments is an empty log.
  static Result<std::unique_ptr<RunLogReader>> open(const std::string& dir);
  // Reads segments held in memory: (file name, bytes) in segment order. For tests and fuzzing.
  static std::unique_ptr<RunLogReader> over(std::vector<std::pair<std::string, std::string>> segments);

  // The next good frame; false at the end of the log or at the first damage (see damage()).
  bool next(LogFrame* frame);
  // Set when next() stopped at damage rather than at the end.
  const std::optional<LogDamage>& damage() const { return damage_; }
  // An I/O error (not damage) that stopped the reader.
  const Status& status() const { return status_; }

  const std::vector<std::string>& segment_files() const { return files_; }

 private:
  RunLogReader() = default;
  bool load_segment(size_t i);

  std::vector<std::string> files_;
  std::vector<std::string> in_memory_;  // segment bytes when reading from memory
  size_t current_ = 0;
  bool loaded_ = false;
  std::string data_;
  size_t pos_ = 0;
  uint64_t next_index_ = 0;
  std::optional<LogDamage> damage_;
  Status status_;
};

struct RunLogOptions {
  uint64_t segment_bytes = 64u << 20;  // start a new segment past this size
  size_t buffer_bytes = 256u << 10;    // write() to the OS when the buffer holds this much
};

// What reopening a log found.
struct LogRecovery {
  uint64_t frames = 0;              // good frames kept
  std::optional<LogDamage> damage;  // the damaged tail that was truncated, if any
  uint64_t bytes_dropped = 0;
};

class RunLogWriter {
 public:
  // Starts a new log in dir; fails if dir already holds segments.
  static Result<std::unique_ptr<RunLogWriter>> create(const std::string& dir, RunLogOptions options = {});
  // Reopens a log to continue after its last good frame, truncating a damaged tail of the last
  // segment (reported in *recovery). Damage before the last segment is an error.
  static Result<std::unique_ptr<RunLogWriter>> reopen(const std::string& dir, RunLogOptions options = {},
                                                      LogRecovery* recovery = nullptr);
  ~RunLogWriter();
  RunLogWriter(const RunLogWriter&) = delete;
  RunLogWriter& operator=(const RunLogWriter&) = delete;

  // Appends one frame. REQUIRES: 1 <= payload.size() <= kMaxFrame.
  Status append(std::string_view payload);
  // Hands buffered frames to the OS: after flush(), a SIGKILL of this process loses nothing.
  Status flush();
  // flush() and fsync: durable across a power loss.
  Status sync();

  uint64_t frame_count() const { return digest_.count(); }
  Digest digest() const { return digest_.value(); }
  const std::string& dir() const { return dir_; }

 private:
  RunLogWriter(std::string dir, RunLogOptions options);
  Status open_segment(uint32_t index, bool fresh, uint64_t truncate_to);
  Status write_out();

  std::string dir_;
  RunLogOptions options_;
  int fd_ = -1;
  uint32_t segment_ = 0;
  uint64_t segment_size_ = 0;  // bytes in the current segment, buffered ones included
  std::string buffer_;
  RunDigest digest_;
};

// Puts frames submitted out of order (by several threads) into the log in sequence order, so the
// bytes do not depend on scheduling. Sequence numbers start at the writer's frame_count() and
// must be dense: each is submitted exactly once.
class OrderedAppender {
 public:
  explicit OrderedAppender(RunLogWriter* writer);
  // Thread-safe. REQUIRES: seq not submitted before and >= the next sequence number.
  Status submit(uint64_t seq, std::string payload);
  // Frames waiting for an earlier sequence number.
  size_t pending() const;

 private:
  RunLogWriter* writer_;
  mutable std::mutex mu_;
  uint64_t next_;
  std::map<uint64_t, std::string> waiting_;
};

}  // namespace vinci

#endif  // VINCI_RECORDER_RUN_LOG_H_

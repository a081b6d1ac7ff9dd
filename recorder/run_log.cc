#include "recorder/run_log.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/atomic_file.h"
#include "core/bytes.h"
#include "core/check.h"

namespace vinci {
namespace {

std::string segment_header(uint32_t index, uint64_t first_frame) {
  ByteWriter h(std::string(kLogMagic, 8));
  h.u32(kLogVersion);
  h.u32(index);
  h.u64(first_frame);
  return h.take();
}

// Segment files in dir, sorted by name. Files that do not look like segments are ignored.
Result<std::vector<std::string>> list_segments(const std::string& dir) {
  std::vector<std::string> names;
  DIR* d = ::opendir(dir.c_str());
  if (!d) {
    if (errno == ENOENT) return names;
    return io_error("cannot list " + dir + ": " + std::strerror(errno));
  }
  while (dirent* e = ::readdir(d)) {
    std::string name = e->d_name;
    if (name.size() == 13 && name.compare(8, 5, ".vlog") == 0 &&
        std::all_of(name.begin(), name.begin() + 8, ::isdigit)) {
      names.push_back(name);
    }
  }
  ::closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

Status write_all(int fd, const char* data, size_t size, const std::string& what) {
  while (size > 0) {
    ssize_t n = ::write(fd, data, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      return io_error("cannot write " + what + ": " + std::strerror(errno));
    }
    data += n;
    size -= static_cast<size_t>(n);
  }
  return Status();
}

}  // namespace

uint32_t frame_checksum(std::string_view payload) {
  return static_cast<uint32_t>(hash64(payload.data(), payload.size(), payload.size()));
}

std::string segment_file_name(uint32_t index) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%08u.vlog", index);
  return buf;
}

void RunDigest::add(std::string_view payload) {
  hasher_.update_u64(payload.size());
  hasher_.update(payload);
  ++count_;
}

// ---------------------------------------------------------------------------------------------
// Reader

Result<std::unique_ptr<RunLogReader>> RunLogReader::open(const std::string& dir) {
  VINCI_ASSIGN_OR_RETURN(std::vector<std::string> names, list_segments(dir));
  std::unique_ptr<RunLogReader> r(new RunLogReader());
  for (const auto& n : names) r->files_.push_back(dir + "/" + n);
  return r;
}

std::unique_ptr<RunLogReader> RunLogReader::over(std::vector<std::pair<std::string, std::string>> segments) {
  std::unique_ptr<RunLogReader> r(new RunLogReader());
  for (auto& [name, bytes] : segments) {
    r->files_.push_back(std::move(name));
    r->in_memory_.push_back(std::move(bytes));
  }
  return r;
}

bool RunLogReader::load_segment(size_t i) {
  const std::string& file = files_[i];
  if (!in_memory_.empty()) {
    data_ = in_memory_[i];
  } else {
    auto bytes = read_file(file, kLogSegmentFile);
    if (!bytes.ok()) {
      status_ = bytes.status();
      return false;
    }
    data_ = std::move(bytes).value();
  }
  pos_ = 0;
  loaded_ = true;
  // Segment files are numbered densely from 0; a missing number is damage at its successor.
  std::string expected = segment_file_name(static_cast<uint32_t>(i));
  if (file.size() < expected.size() || file.compare(file.size() - expected.size(), expected.size(), expected) != 0) {
    damage_ = LogDamage{file, 0, "segment out of sequence: expected " + expected};
    return false;
  }
  if (data_.size() < kSegmentHeaderSize) {
    damage_ = LogDamage{file, 0,
                        "torn segment header: " + std::to_string(data_.size()) + " of " +
                            std::to_string(kSegmentHeaderSize) + " bytes"};
    return false;
  }
  if (std::memcmp(data_.data(), kLogMagic, 8) != 0) {
    damage_ = LogDamage{file, 0, "bad segment magic: expected VINCILOG"};
    return false;
  }
  uint32_t version = load_u32(data_.data() + 8);
  uint32_t index = load_u32(data_.data() + 12);
  if (version != kLogVersion) {
    damage_ = LogDamage{file, 8,
                        "unsupported log version " + std::to_string(version) + " (this reader knows " +
                            std::to_string(kLogVersion) + ")"};
    return false;
  }
  if (index != i) {
    damage_ =
        LogDamage{file, 12, "segment header says index " + std::to_string(index) + ", expected " + std::to_string(i)};
    return false;
  }
  uint64_t first = load_u64(data_.data() + 16);
  if (first != next_index_) {
    damage_ = LogDamage{file, 16,
                        "segment starts at frame " + std::to_string(first) + ", but the segments before it hold " +
                            std::to_string(next_index_) + " frames"};
    return false;
  }
  pos_ = kSegmentHeaderSize;
  return true;
}

bool RunLogReader::next(LogFrame* frame) {
  if (damage_ || !status_.ok()) return false;
  for (;;) {
    if (!loaded_) {
      if (current_ >= files_.size()) return false;
      if (!load_segment(current_)) return false;
    }
    if (pos_ == data_.size()) {
      loaded_ = false;
      ++current_;
      continue;
    }
    const std::string& file = files_[current_];
    size_t left = data_.size() - pos_;
    if (left < kFrameHeaderSize) {
      damage_ =
          LogDamage{file, pos_, "torn frame header: " + std::to_string(left) + " of 8 bytes at the end of the file"};
      return false;
    }
    uint32_t length = load_u32(data_.data() + pos_);
    uint32_t checksum = load_u32(data_.data() + pos_ + 4);
    if (length == 0 || length > kMaxFrame) {
      damage_ = LogDamage{
          file, pos_, "corrupt frame: length " + std::to_string(length) + " outside 1.." + std::to_string(kMaxFrame)};
      return false;
    }
    if (length > left - kFrameHeaderSize) {
      damage_ = LogDamage{file, pos_,
                          "torn frame: length " + std::to_string(length) + " runs past the end of the file (" +
                              std::to_string(left - kFrameHeaderSize) + " bytes left)"};
      return false;
    }
    std::string_view payload(data_.data() + pos_ + kFrameHeaderSize, length);
    uint32_t actual = frame_checksum(payload);
    if (actual != checksum) {
      char buf[96];
      std::snprintf(buf, sizeof buf, "corrupt frame: checksum %08x, expected %08x", actual, checksum);
      damage_ = LogDamage{file, pos_, buf};
      return false;
    }
    frame->payload = payload;
    frame->index = next_index_++;
    frame->segment = static_cast<uint32_t>(current_);
    frame->offset = pos_;
    pos_ += kFrameHeaderSize + length;
    return true;
  }
}

// ---------------------------------------------------------------------------------------------
// Writer

RunLogWriter::RunLogWriter(std::string dir, RunLogOptions options) : dir_(std::move(dir)), options_(options) {}

RunLogWriter::~RunLogWriter() {
  // Buffered frames are handed to the OS here too: a writer destroyed by an error path still
  // leaves every frame it accepted. This is not a commit (nothing here can fail silently into a
  // wrong state: a short write leaves a torn frame the reader detects).
  if (fd_ >= 0) {
    (void)write_out();
    ::close(fd_);
  }
}

Status RunLogWriter::open_segment(uint32_t index, bool fresh, uint64_t truncate_to) {
  if (fd_ >= 0) {
    VINCI_RETURN_IF_ERROR(write_out());
    ::close(fd_);
    fd_ = -1;
  }
  std::string path = dir_ + "/" + segment_file_name(index);
  int flags = O_WRONLY | O_CLOEXEC | (fresh ? (O_CREAT | O_EXCL) : 0);
  fd_ = ::open(path.c_str(), flags, 0644);
  if (fd_ < 0) return io_error("cannot open log segment " + path + ": " + std::strerror(errno));
  segment_ = index;
  if (fresh || truncate_to < kSegmentHeaderSize) {
    if (::ftruncate(fd_, 0) != 0 || ::lseek(fd_, 0, SEEK_SET) != 0) {
      return io_error("cannot reset log segment " + path + ": " + std::strerror(errno));
    }
    buffer_ = segment_header(index, digest_.count());
    segment_size_ = kSegmentHeaderSize;
    if (!fresh) VINCI_RETURN_IF_ERROR(sync_dir(dir_));
  } else {
    if (::ftruncate(fd_, static_cast<off_t>(truncate_to)) != 0 ||
        ::lseek(fd_, static_cast<off_t>(truncate_to), SEEK_SET) < 0) {
      return io_error("cannot truncate log segment " + path + ": " + std::strerror(errno));
    }
    segment_size_ = truncate_to;
  }
  return Status();
}

Result<std::unique_ptr<RunLogWriter>> RunLogWriter::create(const std::string& dir, RunLogOptions options) {
  VINCI_RETURN_IF_ERROR(make_dirs(dir));
  VINCI_ASSIGN_OR_RETURN(std::vector<std::string> existing, list_segments(dir));
  if (!existing.empty()) {
    return failed_precondition("log folder " + dir + " already holds " + std::to_string(existing.size()) +
                               " segment(s); reopen it to continue the run");
  }
  std::unique_ptr<RunLogWriter> w(new RunLogWriter(dir, options));
  VINCI_RETURN_IF_ERROR(w->open_segment(0, /*fresh=*/true, 0));
  VINCI_RETURN_IF_ERROR(w->write_out());
  VINCI_RETURN_IF_ERROR(sync_dir(dir));
  return w;
}

Result<std::unique_ptr<RunLogWriter>> RunLogWriter::reopen(const std::string& dir, RunLogOptions options,
                                                           LogRecovery* recovery) {
  VINCI_ASSIGN_OR_RETURN(std::unique_ptr<RunLogReader> reader, RunLogReader::open(dir));
  if (reader->segment_files().empty()) return create(dir, options);
  std::unique_ptr<RunLogWriter> w(new RunLogWriter(dir, options));
  LogFrame f;
  while (reader->next(&f)) w->digest_.add(f.payload);
  VINCI_RETURN_IF_ERROR(reader->status());
  const auto& files = reader->segment_files();
  LogRecovery rec;
  rec.frames = w->digest_.count();
  uint32_t segment = static_cast<uint32_t>(files.size() - 1);
  VINCI_ASSIGN_OR_RETURN(std::string last, read_file(files.back(), kLogSegmentFile));
  uint64_t keep = last.size();
  if (reader->damage()) {
    const LogDamage& d = *reader->damage();
    if (d.file != files.back()) {
      return corruption("cannot continue the log in " + dir + ": damage before its last segment, " + d.to_string());
    }
    // The damaged frame starts right after the last good one; damage inside the header means
    // the header is rewritten.
    keep = d.offset < kSegmentHeaderSize ? 0 : d.offset;
    rec.bytes_dropped = last.size() - keep;
    rec.damage = d;
  }
  VINCI_RETURN_IF_ERROR(w->open_segment(segment, /*fresh=*/false, keep));
  VINCI_RETURN_IF_ERROR(w->write_out());
  if (rec.damage) VINCI_RETURN_IF_ERROR(w->sync());
  if (recovery) *recovery = rec;
  return w;
}

Status RunLogWriter::append(std::string_view payload) {
  VINCI_REQUIRE(!payload.empty() && payload.size() <= kMaxFrame, "frame payload of " << payload.size() << " bytes");
  uint64_t frame_size = kFrameHeaderSize + payload.size();
  if (segment_size_ > kSegmentHeaderSize && segment_size_ + frame_size > options_.segment_bytes) {
    VINCI_RETURN_IF_ERROR(open_segment(segment_ + 1, /*fresh=*/true, 0));
  }
  put_le(&buffer_, payload.size(), 4);
  put_le(&buffer_, frame_checksum(payload), 4);
  buffer_.append(payload);
  segment_size_ += frame_size;
  digest_.add(payload);
  if (buffer_.size() >= options_.buffer_bytes) return write_out();
  return Status();
}

Status RunLogWriter::write_out() {
  if (buffer_.empty()) return Status();
  Status st = write_all(fd_, buffer_.data(), buffer_.size(), dir_ + "/" + segment_file_name(segment_));
  buffer_.clear();
  return st;
}

Status RunLogWriter::flush() { return write_out(); }

Status RunLogWriter::sync() {
  VINCI_RETURN_IF_ERROR(write_out());
  if (::fsync(fd_) != 0) {
    return io_error("cannot sync log segment " + segment_file_name(segment_) + " in " + dir_ + ": " +
                    std::strerror(errno));
  }
  return Status();
}

// ---------------------------------------------------------------------------------------------

OrderedAppender::OrderedAppender(RunLogWriter* writer) : writer_(writer), next_(writer->frame_count()) {}

Status OrderedAppender::submit(uint64_t seq, std::string payload) {
  std::lock_guard<std::mutex> lock(mu_);
  VINCI_REQUIRE(seq >= next_ && !waiting_.count(seq),
                "sequence number " << seq << " submitted twice (next is " << next_ << ")");
  if (seq != next_) {
    waiting_.emplace(seq, std::move(payload));
    return Status();
  }
  VINCI_RETURN_IF_ERROR(writer_->append(payload));
  ++next_;
  for (auto it = waiting_.begin(); it != waiting_.end() && it->first == next_; it = waiting_.erase(it)) {
    VINCI_RETURN_IF_ERROR(writer_->append(it->second));
    ++next_;
  }
  return Status();
}

size_t OrderedAppender::pending() const {
  std::lock_guard<std::mutex> lock(mu_);
  return waiting_.size();
}

}  // namespace vinci

// The run log reader and the record decoder behind `replay cat` and every other reader: the bytes
// are a log's segments (a line "\n--segment--\n" starts the next one), every good frame is decoded
// as a Record and rendered as JSON. Damage and undecodable records are errors, never crashes.
// A mutated frame almost never carries a right checksum, so the target writes the right one into
// every frame header it can find before reading (the mutations then reach the record decoder),
// except in inputs of odd length, which are read as they are (the checksum check is fuzzed too).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "recorder/record_json.h"
#include "recorder/run.h"
#include "recorder/run_log.h"

namespace {

// Writes frame_checksum(payload) into each frame header of a segment, walking the frames by their
// lengths from the segment header on, up to the first length that runs past the end.
void fix_checksums(std::string* segment) {
  size_t pos = vinci::kSegmentHeaderSize;
  while (pos + vinci::kFrameHeaderSize <= segment->size()) {
    uint32_t length;
    std::memcpy(&length, segment->data() + pos, sizeof length);
    if (length > segment->size() - pos - vinci::kFrameHeaderSize) break;
    uint32_t checksum =
        vinci::frame_checksum(std::string_view(segment->data() + pos + vinci::kFrameHeaderSize, length));
    std::memcpy(segment->data() + pos + 4, &checksum, sizeof checksum);
    pos += vinci::kFrameHeaderSize + length;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view input(reinterpret_cast<const char*>(data), size);
  const bool fix = size % 2 == 0;
  constexpr std::string_view kSplit = "\n--segment--\n";
  std::vector<std::pair<std::string, std::string>> segments;
  for (uint32_t index = 0;; ++index) {
    size_t cut = input.find(kSplit);
    std::string segment(input.substr(0, cut));
    if (fix) fix_checksums(&segment);
    segments.emplace_back(vinci::segment_file_name(index), std::move(segment));
    if (cut == std::string_view::npos) break;
    input.remove_prefix(cut + kSplit.size());
  }
  std::unique_ptr<vinci::RunLogReader> reader = vinci::RunLogReader::over(std::move(segments));
  vinci::RecordView view;
  vinci::RunDigest digest;
  vinci::LogFrame frame;
  while (reader->next(&frame)) {
    digest.add(frame.payload);
    if (view.parse(frame.payload).ok()) {
      std::string json = vinci::record_to_json(view, nullptr);
      (void)json;
    }
  }
  if (reader->damage()) (void)reader->damage()->to_string();
  return 0;
}

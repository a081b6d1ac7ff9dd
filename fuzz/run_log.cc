// The run log reader and the record decoder behind `replay cat` and every other reader: the bytes
// are a log's segments (a line "\n--segment--\n" starts the next one), every good frame is decoded
// as a Record and rendered as JSON. Damage and undecodable records are errors, never crashes.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "recorder/record_json.h"
#include "recorder/run.h"
#include "recorder/run_log.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view input(reinterpret_cast<const char*>(data), size);
  constexpr std::string_view kSplit = "\n--segment--\n";
  std::vector<std::pair<std::string, std::string>> segments;
  for (uint32_t index = 0;; ++index) {
    size_t cut = input.find(kSplit);
    segments.emplace_back(vinci::segment_file_name(index), std::string(input.substr(0, cut)));
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

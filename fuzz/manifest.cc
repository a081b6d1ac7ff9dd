// A run's manifest.bin (packed Cap'n Proto schema::Manifest), as `replay` and `harness run
// --resume` read it: decoded, rendered as JSON, compared with a log. Encoding a decoded manifest is
// a fixed point: its bytes decode to a manifest that encodes to the same bytes.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz/fuzz_util.h"
#include "recorder/record_json.h"
#include "recorder/run.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  vinci::Result<vinci::ManifestInfo> m = vinci::decode_manifest(bytes, "fuzz/manifest.bin");
  if (!m.ok()) return 0;
  std::string json = vinci::manifest_to_json(*m);
  (void)vinci::log_disagreement(*m, m->record_count + 1, vinci::Digest());
  std::string encoded = vinci::encode_manifest(*m);
  vinci::Result<vinci::ManifestInfo> again = vinci::decode_manifest(encoded, "again");
  VINCI_FUZZ_CHECK(again.ok(), again.status().to_string());
  VINCI_FUZZ_CHECK(vinci::encode_manifest(*again) == encoded, "re-encoded manifest differs");
  return 0;
}

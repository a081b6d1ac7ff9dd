// The sim backbone's checkpoint bytes (agents/sim_checkpoint.h), as `harness run --resume`,
// `replay verify` and the cold start read them from the object store. A parsed checkpoint written
// again is the same bytes, and every parameter hashes.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "agents/sim_checkpoint.h"
#include "fuzz/fuzz_util.h"

namespace {

std::vector<float> floats(std::string_view bytes) {
  std::vector<float> out(bytes.size() / 4);
  if (!out.empty()) std::memcpy(out.data(), bytes.data(), out.size() * 4);  // little-endian host
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  vinci::Result<vinci::SimCheckpoint> c = vinci::parse_sim_checkpoint(bytes);
  if (!c.ok()) return 0;
  vinci::SimCheckpointWriter w(c->fields, c->head_sizes, static_cast<uint32_t>(c->params.size()));
  vinci::SimParameterHasher h;
  for (const auto& p : c->params) {
    VINCI_FUZZ_CHECK(p.values.size() == static_cast<size_t>(p.numel) * 4, p.name);
    std::vector<float> values = floats(p.values), exp_avg = floats(p.exp_avg), exp_avg_sq = floats(p.exp_avg_sq);
    w.add(p.name, p.dims, values.data(), p.step, exp_avg.data(), exp_avg_sq.data());
    h.add(p.name, p.dims, p.values);
  }
  (void)h.finish();
  VINCI_FUZZ_CHECK(w.take() == bytes, "a parsed checkpoint written again differs from its bytes");
  return 0;
}

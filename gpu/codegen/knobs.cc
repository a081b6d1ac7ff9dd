#include "gpu/codegen/knobs.h"

namespace vinci {
namespace {

// Tables of knobs, one per entry: kept as written.
// clang-format off
const std::vector<Knob> kPlanKnobs = {
    {"fusion", {"fused", "unfused"}, 0,
     "fused: epilogue ops run in the producing kernel; unfused: one kernel per op"},
};

const std::vector<Knob> kElementwiseKnobs = {
    {"ew.block", {"128", "256", "512", "1024"}, 1, "threads per block"},
    {"ew.vector_width", {"1", "2", "4"}, 2, "floats per load/store (float2, float4)"},
    {"ew.items_per_thread", {"1", "2", "4", "8"}, 0, "vectors each thread handles"},
    {"ew.tail", {"guarded", "none"}, 0, "none: no bounds check (wrong unless sizes divide)"},
    {"ew.math", {"precise", "fast"}, 0, "fast: __expf/__fdividef/__tanhf-style intrinsics"},
};

const std::vector<Knob> kRowKnobs = {
    {"row.strategy", {"warp_shuffle", "block_tree", "block_shuffle", "thread_per_row", "inner_tile"}, 2,
     "warp per row with shuffles; block per row with a shared-memory tree; block per row with "
     "warp shuffles and one shared slot per warp; one thread per row (coalesced for strided rows); "
     "a block per 32 neighbouring strided rows, one lane each, the row's length split over the "
     "block's warps (coalesced and many loads in flight for strided rows)"},
    {"row.block", {"128", "256", "512", "1024"}, 1, "threads per block"},
    {"row.vector_width", {"1", "4"}, 1, "float4 loads on contiguous rows whose length divides"},
    {"row.softmax", {"online", "two_pass"}, 0,
     "online: one pass for max and sum (rescaled); two_pass: max, then sum"},
    {"row.unroll", {"1", "4"}, 1, "unroll factor of the per-thread loop"},
    {"row.sync", {"full", "warp_synchronous"}, 0,
     "warp_synchronous: the last 32 lanes of a tree reduction skip synchronisation (a race)"},
};

const std::vector<Knob> kGemmKnobs = {
    {"gemm.tile_m", {"32", "64", "128"}, 1, "block tile rows"},
    {"gemm.tile_n", {"32", "64", "128"}, 1, "block tile columns"},
    {"gemm.tile_k", {"8", "16", "32"}, 1, "depth of one shared-memory stage"},
    {"gemm.threads", {"64", "128", "256"}, 2, "threads per block; register block = tile / threads"},
    {"gemm.tensor_cores", {"off", "tf32", "bf16", "fp16"}, 0,
     "tensor cores through wmma, the operands rounded to tf32 (m16n16k8), bf16 or fp16 (m16n16k16), FP32 "
     "accumulation; with gemm.impl = library, the library's GEMM in that precision"},
    {"gemm.bounds", {"checked", "unchecked"}, 0, "unchecked: no edge handling (wrong unless tiles divide)"},
    {"gemm.unroll", {"1", "4"}, 1, "unroll factor of the inner k loop"},
    {"gemm.impl", {"generated", "library"}, 0,
     "generated: vinci's tiled GEMM kernel with the epilogue fused in; library: the library's GEMM "
     "(cuBLAS through libtorch, in the precision gemm.tensor_cores names) and one fused elementwise "
     "kernel for the whole epilogue"},
};
// clang-format on

}  // namespace

const std::vector<Knob>& family_knobs(const std::string& family) {
  if (family == "plan") return kPlanKnobs;
  if (family == "elementwise") return kElementwiseKnobs;
  if (family == "row_reduction") return kRowKnobs;
  VINCI_REQUIRE(family == "gemm", "unknown knob family " << family);
  return kGemmKnobs;
}

int32_t KnobSpace::index_of(const std::string& name) const {
  for (size_t i = 0; i < knobs.size(); ++i)
    if (knobs[i].name == name) return static_cast<int32_t>(i);
  return -1;
}

double KnobSpace::cardinality() const {
  double c = 1;
  for (const auto& k : knobs) c *= static_cast<double>(k.choices.size());
  return c;
}

KnobSetting default_setting(const KnobSpace& space) {
  KnobSetting s;
  for (const auto& k : space.knobs) s.push_back(k.default_index);
  return s;
}

KnobSetting random_setting(const KnobSpace& space, Stream& stream) {
  KnobSetting s;
  for (const auto& k : space.knobs) s.push_back(static_cast<int32_t>(stream.below(k.choices.size())));
  return s;
}

Status check_setting(const KnobSpace& space, const KnobSetting& setting) {
  if (setting.size() != space.knobs.size())
    return invalid_argument("knob setting: expected " + std::to_string(space.knobs.size()) + " indices, found " +
                            std::to_string(setting.size()));
  for (size_t i = 0; i < setting.size(); ++i)
    if (setting[i] < 0 || setting[i] >= static_cast<int32_t>(space.knobs[i].choices.size()))
      return invalid_argument("knob " + space.knobs[i].name + ": index " + std::to_string(setting[i]) +
                              " out of range [0, " + std::to_string(space.knobs[i].choices.size()) + ")");
  return Status();
}

std::map<std::string, std::string> knob_values(const KnobSpace& space, const KnobSetting& setting) {
  Status st = check_setting(space, setting);
  VINCI_REQUIRE(st.ok(), st.message());
  std::map<std::string, std::string> out;
  for (size_t i = 0; i < setting.size(); ++i)
    out[space.knobs[i].name] = space.knobs[i].choices[static_cast<size_t>(setting[i])];
  return out;
}

Result<KnobSetting> setting_from_values(const KnobSpace& space, const std::map<std::string, std::string>& values) {
  KnobSetting s = default_setting(space);
  for (const auto& [name, value] : values) {
    int32_t i = space.index_of(name);
    if (i < 0) return invalid_argument("knob '" + name + "': not a knob of this task's space");
    const auto& choices = space.knobs[static_cast<size_t>(i)].choices;
    bool found = false;
    for (size_t c = 0; c < choices.size(); ++c)
      if (choices[c] == value) s[static_cast<size_t>(i)] = static_cast<int32_t>(c), found = true;
    if (!found) {
      std::string list;
      for (const auto& c : choices) list += (list.empty() ? "" : ", ") + c;
      return invalid_argument("knob '" + name + "': expected one of " + list + ", found '" + value + "'");
    }
  }
  return s;
}

}  // namespace vinci

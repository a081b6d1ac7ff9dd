#include "agents/sim_checkpoint.h"

#include <cstring>

namespace vinci {
namespace {

constexpr char kMagic[] = "vinci-sim-backbone";  // written without its NUL
constexpr uint32_t kVersion = 1;

std::string str(int64_t v) { return std::to_string(v); }

int64_t numel_of(const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

}  // namespace

const char* const kSimCheckpointFieldNames[kSimCheckpointFields] = {"task_dim", "feedback_dim", "candidate_dim",
                                                                    "hidden", "role_dim"};

Result<SimCheckpoint> parse_sim_checkpoint(std::string_view bytes) {
  ByteReader r(bytes);
  auto bad = [&](const std::string& what) {
    return corruption("sim backbone checkpoint: truncated or malformed at byte " +
                      str(static_cast<int64_t>(r.offset())) + " while reading " + what);
  };
  std::string_view magic;
  if (!r.bytes(std::strlen(kMagic), &magic) || magic != kMagic) {
    return corruption("sim backbone checkpoint: does not start with \"" + std::string(kMagic) + "\"");
  }
  uint32_t version;
  if (!r.u32(&version)) return bad("the format version");
  if (version != kVersion) {
    return corruption("sim backbone checkpoint: format version " + str(version) + ", expected " + str(kVersion));
  }
  SimCheckpoint c;
  for (int i = 0; i < kSimCheckpointFields; ++i) {
    if (!r.i32(&c.fields[i])) return bad(kSimCheckpointFieldNames[i]);
  }
  uint32_t heads;
  if (!r.u32(&heads) || heads > (1u << 20)) return bad("the head count");
  c.head_sizes.resize(heads);
  for (auto& size : c.head_sizes) {
    if (!r.i32(&size)) return bad("head_sizes");
  }
  uint32_t count;
  if (!r.u32(&count)) return bad("the parameter count");
  for (uint32_t i = 0; i < count; ++i) {
    SimCheckpoint::Param p;
    if (!r.str(&p.name)) return bad("a parameter name");
    uint32_t ndim;
    if (!r.u32(&ndim) || ndim > 8) return bad("the rank of " + p.name);
    p.dims.resize(ndim);
    p.numel = 1;
    for (auto& dim : p.dims) {
      if (!r.i64(&dim) || dim < 0 || dim > (int64_t{1} << 32)) return bad("the shape of " + p.name);
      // At most 2^40 values, checked before the product can overflow.
      if (dim != 0 && p.numel > (int64_t{1} << 40) / dim) return bad("the shape of " + p.name);
      p.numel *= dim;
    }
    const size_t n = static_cast<size_t>(p.numel) * 4;
    if (!r.bytes(n, &p.values)) return bad("the values of " + p.name);
    if (!r.i64(&p.step) || p.step < 0) return bad("the Adam step of " + p.name);
    if (!r.bytes(n, &p.exp_avg)) return bad("the Adam exp_avg of " + p.name);
    if (!r.bytes(n, &p.exp_avg_sq)) return bad("the Adam exp_avg_sq of " + p.name);
    c.params.push_back(std::move(p));
  }
  if (!r.at_end()) {
    return corruption("sim backbone checkpoint: " + str(static_cast<int64_t>(bytes.size() - r.offset())) +
                      " unexpected bytes after the last parameter");
  }
  return c;
}

SimCheckpointWriter::SimCheckpointWriter(const int32_t (&fields)[kSimCheckpointFields],
                                         const std::vector<int32_t>& head_sizes, uint32_t params) {
  w_.raw(kMagic);
  w_.u32(kVersion);
  for (int32_t f : fields) w_.i32(f);
  w_.u32(static_cast<uint32_t>(head_sizes.size()));
  for (int32_t size : head_sizes) w_.i32(size);
  w_.u32(params);
}

void SimCheckpointWriter::add(const std::string& name, const std::vector<int64_t>& dims, const float* values,
                              int64_t adam_step, const float* exp_avg, const float* exp_avg_sq) {
  const size_t n = static_cast<size_t>(numel_of(dims));
  w_.str(name);
  w_.u32(static_cast<uint32_t>(dims.size()));
  for (int64_t d : dims) w_.i64(d);
  w_.f32s(values, n);
  w_.i64(adam_step);
  w_.f32s(exp_avg, n);
  w_.f32s(exp_avg_sq, n);
}

SimParameterHasher::SimParameterHasher() : h_("sim-backbone-params") {}

void SimParameterHasher::add(const std::string& name, const std::vector<int64_t>& dims, std::string_view values) {
  h_.update_str(name);
  h_.update_u64(dims.size());
  for (int64_t d : dims) h_.update_i64(d);
  h_.update(values);
}

}  // namespace vinci

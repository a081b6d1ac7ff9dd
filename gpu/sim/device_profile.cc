#include "gpu/sim/device_profile.h"

#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include <toml++/toml.h>

#include "core/atomic_file.h"
#include "core/text.h"

namespace vinci {
namespace {

// One key of the file: where it lives and which member it fills. Exactly one of the pointers is
// set. Table-driven so parsing, checking and writing cannot disagree about the grammar.
struct Field {
  const char* section;
  const char* key;
  int64_t DeviceProfile::*i64 = nullptr;
  double DeviceProfile::*f64 = nullptr;
  std::string DeviceProfile::*str = nullptr;
  // Allowed range [lo, hi] for numbers; every figure is positive.
  double lo = 0;
  double hi = 0;
  bool optional = false;  // absent: the member keeps its default (0: not known)
};

Field s(const char* sec, const char* key, std::string DeviceProfile::*m) {
  Field f{sec, key};
  f.str = m;
  return f;
}
Field i(const char* sec, const char* key, int64_t DeviceProfile::*m, double lo, double hi) {
  Field f{sec, key};
  f.i64 = m;
  f.lo = lo;
  f.hi = hi;
  return f;
}
Field optional(Field f) {
  f.optional = true;
  return f;
}
Field d(const char* sec, const char* key, double DeviceProfile::*m, double lo, double hi) {
  Field f{sec, key};
  f.f64 = m;
  f.lo = lo;
  f.hi = hi;
  return f;
}

const std::vector<Field>& fields() {
  using P = DeviceProfile;
  static const std::vector<Field> kFields = {
      s("device", "name", &P::name),
      s("device", "description", &P::description),
      i("sm", "count", &P::sms, 1, 1e4),
      i("sm", "warp_size", &P::warp_size, 1, 1024),
      i("sm", "max_threads", &P::max_threads_per_sm, 1, 1e5),
      i("sm", "max_warps", &P::max_warps_per_sm, 1, 1e4),
      i("sm", "max_blocks", &P::max_blocks_per_sm, 1, 1e4),
      i("sm", "max_threads_per_block", &P::max_threads_per_block, 1, 1e5),
      i("sm", "registers", &P::registers_per_sm, 1, 1e8),
      i("sm", "max_registers_per_thread", &P::max_registers_per_thread, 1, 1e4),
      i("sm", "register_granularity", &P::register_granularity, 1, 1e4),
      i("sm", "shared_bytes", &P::shared_bytes_per_sm, 1, 1e9),
      i("sm", "shared_bytes_per_block", &P::shared_bytes_per_block, 1, 1e9),
      i("sm", "shared_reserved_per_block", &P::shared_reserved_per_block, 0, 1e9),
      d("sm", "clock_hz", &P::clock_hz, 1e6, 1e11),
      d("memory", "hbm_peak_bytes_per_s", &P::hbm_peak_bytes_per_s, 1e9, 1e15),
      d("memory", "hbm_bytes_per_s", &P::hbm_bytes_per_s, 1e9, 1e15),
      d("memory", "l2_bytes", &P::l2_bytes, 1, 1e12),
      d("memory", "l2_usable_fraction", &P::l2_usable_fraction, 0.01, 1),
      d("memory", "l2_bytes_per_s", &P::l2_bytes_per_s, 1e9, 1e16),
      d("memory", "shared_bytes_per_clock", &P::shared_bytes_per_clock, 1, 1e5),
      d("memory", "inflight_bytes_per_sm", &P::inflight_bytes_per_sm, 1, 1e9),
      optional(i("memory", "bytes", &P::memory_bytes, 0, 1e15)),
      d("compute", "fp32_peak_flops", &P::fp32_peak_flops, 1e9, 1e18),
      d("compute", "fp32_library_flops", &P::fp32_library_flops, 1e9, 1e18),
      d("compute", "tf32_peak_flops", &P::tf32_peak_flops, 1e9, 1e18),
      d("compute", "wmma_fraction", &P::wmma_fraction, 0.01, 1),
      d("compute", "library_tf32_fraction", &P::library_tf32_fraction, 0.01, 1),
      d("compute", "bf16_peak_flops", &P::bf16_peak_flops, 1e9, 1e18),
      d("compute", "bf16_measured_flops", &P::bf16_measured_flops, 1e9, 1e18),
      d("compute", "fast_math_factor", &P::fast_math_factor, 0.01, 1),
      d("launch", "kernel_us", &P::kernel_launch_us, 0, 1e4),
      d("launch", "library_dispatch_us", &P::library_dispatch_us, 0, 1e4),
      d("launch", "kernel_floor_us", &P::kernel_floor_us, 0, 1e4),
      d("latency", "shuffle_cycles", &P::shuffle_cycles, 0, 1e6),
      d("latency", "sync_cycles", &P::sync_cycles, 0, 1e6),
      d("latency", "shared_cycles", &P::shared_cycles, 0, 1e6),
      d("efficiency", "elementwise", &P::eff_elementwise, 1e-3, 1e3),
      d("efficiency", "row_reduction", &P::eff_row_reduction, 1e-3, 1e3),
      d("efficiency", "gemm_cuda_core", &P::eff_gemm_cuda_core, 1e-3, 1e3),
      d("efficiency", "gemm_tensor_core", &P::eff_gemm_tensor_core, 1e-3, 1e3),
      d("efficiency", "library_gemm", &P::eff_library_gemm, 1e-3, 1e3),
      d("efficiency", "library_other", &P::eff_library_other, 1e-3, 1e3),
      d("efficiency", "custom", &P::eff_custom, 1e-3, 1e3),
      d("precision", "fp32_rel_error", &P::fp32_rel_error, 0, 1),
      d("precision", "tf32_rel_error", &P::tf32_rel_error, 0, 1),
      d("precision", "bf16_rel_error", &P::bf16_rel_error, 0, 1),
      d("precision", "fast_math_rel_error", &P::fast_math_rel_error, 0, 1),
  };
  return kFields;
}

const char* type_name(const toml::node* n) {
  if (!n) return "nothing";
  switch (n->type()) {
    case toml::node_type::table: return "a table";
    case toml::node_type::array: return "an array";
    case toml::node_type::string: return "a string";
    case toml::node_type::integer: return "an integer";
    case toml::node_type::floating_point: return "a float";
    case toml::node_type::boolean: return "a boolean";
    default: return "a date or time";
  }
}

}  // namespace

Result<DeviceProfile> parse_device_profile(const std::string& path, const std::string& text) {
  toml::table root;
  try {
    root = toml::parse(text, path);
  } catch (const toml::parse_error& e) {
    return invalid_argument(path + ":" + std::to_string(e.source().begin.line) + ": " + std::string(e.description()));
  }
  DeviceProfile p;
  p.source_file = path;
  for (const Field& f : fields()) {
    std::string where = path + ": key '" + f.section + "." + f.key + "'";
    const toml::node* n = root[f.section][f.key].node();
    if (f.str) {
      if (!n || !n->is_string()) return invalid_argument(where + ": expected a string, found " + type_name(n));
      p.*f.str = n->as_string()->get();
      continue;
    }
    if (!n && f.optional) continue;
    double v = 0;
    if (n && n->is_integer()) {
      v = static_cast<double>(n->as_integer()->get());
    } else if (n && n->is_floating_point() && !f.i64) {
      v = n->as_floating_point()->get();
    } else {
      return invalid_argument(where + ": expected " + (f.i64 ? "an integer" : "a number") + ", found " + type_name(n));
    }
    if (!std::isfinite(v) || v < f.lo || v > f.hi)
      return invalid_argument(where + ": expected a value in [" + exact_number(f.lo) + ", " + exact_number(f.hi) +
                              "], found " + exact_number(v));
    if (f.i64)
      p.*f.i64 = static_cast<int64_t>(v);
    else
      p.*f.f64 = v;
  }
  // Keys the grammar does not know are typos that would silently leave a default in place.
  for (const auto& [section, node] : root) {
    const toml::table* t = node.as_table();
    if (!t) return invalid_argument(path + ": key '" + std::string(section.str()) + "': expected a table");
    for (const auto& [key, value] : *t) {
      bool known = false;
      for (const Field& f : fields()) known = known || (section.str() == f.section && key.str() == f.key);
      if (!known)
        return invalid_argument(path + ": key '" + std::string(section.str()) + "." + std::string(key.str()) +
                                "': not a device profile key");
    }
  }
  if (p.max_warps_per_sm * p.warp_size < p.max_threads_per_sm)
    return invalid_argument(path + ": key 'sm.max_warps': " + std::to_string(p.max_warps_per_sm) + " warps of " +
                            std::to_string(p.warp_size) +
                            " cannot hold sm.max_threads = " + std::to_string(p.max_threads_per_sm));
  if (p.hbm_bytes_per_s > p.hbm_peak_bytes_per_s)
    return invalid_argument(path + ": key 'memory.hbm_bytes_per_s': measured bandwidth " +
                            exact_number(p.hbm_bytes_per_s) + " exceeds the peak " +
                            exact_number(p.hbm_peak_bytes_per_s));
  if (p.shared_bytes_per_block > p.shared_bytes_per_sm)
    return invalid_argument(path + ": key 'sm.shared_bytes_per_block': exceeds sm.shared_bytes");
  return p;
}

Result<DeviceProfile> load_device_profile(const std::string& path) {
  Result<std::string> text = read_file(path, kDeviceProfileFile);
  if (!text.ok()) return Status(text.status().code(), "device profile " + text.status().message());
  return parse_device_profile(path, *text);
}

std::string default_profile_dir() { return VINCI_DEVICE_PROFILE_DIR; }

std::string profile_path(const std::string& name) { return default_profile_dir() + "/" + name + ".toml"; }

std::string device_profile_to_toml(const DeviceProfile& profile) {
  std::ostringstream os;
  std::string section;
  for (const Field& f : fields()) {
    if (section != f.section) {
      section = f.section;
      os << (os.tellp() > 0 ? "\n" : "") << "[" << section << "]\n";
    }
    os << f.key << " = ";
    if (f.str) {
      // TOML basic string: escape the two characters that end or escape it.
      os << '"';
      for (char c : profile.*f.str) {
        if (c == '"' || c == '\\') os << '\\';
        os << c;
      }
      os << '"';
    } else if (f.i64) {
      os << profile.*f.i64;
    } else {
      std::string t = exact_number(profile.*f.f64);
      // A float key must read back as a float-compatible number; integers are accepted too.
      os << t;
    }
    os << "\n";
  }
  return os.str();
}

const std::vector<EfficiencyTerm>& efficiency_terms() {
  using P = DeviceProfile;
  static const std::vector<EfficiencyTerm> kTerms = {
      {"elementwise", &P::eff_elementwise},
      {"row_reduction", &P::eff_row_reduction},
      {"gemm_cuda_core", &P::eff_gemm_cuda_core},
      {"gemm_tensor_core", &P::eff_gemm_tensor_core},
      {"library_gemm", &P::eff_library_gemm},
      {"library_other", &P::eff_library_other},
      {"custom", &P::eff_custom},
  };
  return kTerms;
}

}  // namespace vinci

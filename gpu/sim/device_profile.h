// A device profile: the figures of one GPU that the simulated device (gpu/sim/sim_model.h) needs, read
// from a TOML data file (data/device_profiles/*.toml) whose comments cite the source of every
// figure. docs/sim_model.md gives the equations each figure enters.
//
// File grammar (every key required but memory.bytes, every number finite; integers where the key is a count):
//   [device]      name, description
//   [sm]          count, warp_size, max_threads, max_warps, max_blocks, max_threads_per_block,
//                 registers, max_registers_per_thread, register_granularity, shared_bytes,
//                 shared_bytes_per_block, shared_reserved_per_block, clock_hz
//   [memory]      hbm_peak_bytes_per_s, hbm_bytes_per_s, l2_bytes, l2_usable_fraction,
//                 l2_bytes_per_s, shared_bytes_per_clock, inflight_bytes_per_sm, bytes (optional:
//                 the device memory; absent or 0, buffers are checked only against 64 bits)
//   [compute]     fp32_peak_flops, fp32_library_flops, tf32_peak_flops, wmma_fraction,
//                 library_tf32_fraction,
//                 bf16_peak_flops, bf16_measured_flops, fast_math_factor
//   [launch]      kernel_us, library_dispatch_us, kernel_floor_us
//   [latency]     shuffle_cycles, sync_cycles, shared_cycles
//   [efficiency]  elementwise, row_reduction, gemm_cuda_core, gemm_tensor_core, library_gemm,
//                 library_other, custom
//   [precision]   fp32_rel_error, tf32_rel_error, bf16_rel_error, fast_math_rel_error
// The [efficiency] terms are the multiplicative factors calibration fits (gpu/sim/calibration.h):
// a kernel's execution time (launch excluded) is divided by its family's term.
#ifndef VINCI_GPU_SIM_DEVICE_PROFILE_H_
#define VINCI_GPU_SIM_DEVICE_PROFILE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace vinci {

struct DeviceProfile {
  std::string name;  // "h200": what EvalResult.device says
  std::string description;
  std::string source_file;  // where it was read from ("" when built in code)

  // [sm]: the streaming multiprocessors and their per-SM limits.
  int64_t sms = 0;
  int64_t warp_size = 0;
  int64_t max_threads_per_sm = 0;
  int64_t max_warps_per_sm = 0;
  int64_t max_blocks_per_sm = 0;
  int64_t max_threads_per_block = 0;
  int64_t registers_per_sm = 0;
  int64_t max_registers_per_thread = 0;
  int64_t register_granularity = 0;  // per-thread registers are allocated in multiples of this
  int64_t shared_bytes_per_sm = 0;
  int64_t shared_bytes_per_block = 0;
  int64_t shared_reserved_per_block = 0;  // the runtime's own shared memory per resident block
  double clock_hz = 0;

  // [memory]
  double hbm_peak_bytes_per_s = 0;  // datasheet: the roofline bound
  double hbm_bytes_per_s = 0;       // measured copy bandwidth: what a perfect kernel reaches
  double l2_bytes = 0;
  double l2_usable_fraction = 0;  // share of L2 a working set may fill and still hit
  double l2_bytes_per_s = 0;
  double shared_bytes_per_clock = 0;  // per SM
  double inflight_bytes_per_sm = 0;   // bytes outstanding per SM for 1 - 1/e of bandwidth
  int64_t memory_bytes = 0;           // device memory; a larger buffer is out of memory (0: unknown)

  // [compute]
  double fp32_peak_flops = 0;
  double fp32_library_flops = 0;  // measured libtorch fp32 matmul rate (CUDA cores, TF32 off)
  double tf32_peak_flops = 0;
  double wmma_fraction = 0;          // share of the tensor peak that wmma (mma.sync) reaches
  double library_tf32_fraction = 0;  // share of the tensor peak cuBLAS' TF32 GEMMs reach
  double bf16_peak_flops = 0;
  double bf16_measured_flops = 0;
  double fast_math_factor = 0;  // instruction cost of fast-math transcendentals vs precise

  // [launch]
  double kernel_launch_us = 0;     // one kernel launch in a timed sequence
  double library_dispatch_us = 0;  // extra host work of one eager library op
  double kernel_floor_us = 0;      // the shortest execution of any launched kernel

  // [latency], in SM clock cycles
  double shuffle_cycles = 0;
  double sync_cycles = 0;
  double shared_cycles = 0;

  // [efficiency]: calibration's multiplicative terms (1 = the analytic model as written).
  double eff_elementwise = 1;
  double eff_row_reduction = 1;
  double eff_gemm_cuda_core = 1;
  double eff_gemm_tensor_core = 1;
  double eff_library_gemm = 1;
  double eff_library_other = 1;
  double eff_custom = 1;

  // [precision]: relative error the arithmetic adds to an output element (a 3-sigma figure).
  double fp32_rel_error = 0;
  double tf32_rel_error = 0;  // also fp16's: the same 10-bit mantissa
  double bf16_rel_error = 0;
  double fast_math_rel_error = 0;
};

// Reads and checks a profile. Errors name the file, the key, what was expected and what was found.
Result<DeviceProfile> load_device_profile(const std::string& path);
Result<DeviceProfile> parse_device_profile(const std::string& path, const std::string& text);

// The profile folder of the source tree this binary was built from (data/device_profiles), and the
// path of a named profile in it ("h200" -> .../h200.toml).
std::string default_profile_dir();
std::string profile_path(const std::string& name);

// The profile as TOML in the file's grammar (no comments), so a fitted profile can be written and
// read back to the same values (numbers are printed with 17 significant digits).
std::string device_profile_to_toml(const DeviceProfile& profile);

// The [efficiency] terms by name, in file order: what calibration may fit.
struct EfficiencyTerm {
  const char* name;  // "elementwise"
  double DeviceProfile::*field;
};
const std::vector<EfficiencyTerm>& efficiency_terms();

}  // namespace vinci

#endif  // VINCI_GPU_SIM_DEVICE_PROFILE_H_

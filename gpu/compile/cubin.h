// What a cubin (the ELF image NVRTC and Triton produce for a real architecture) holds in device
// globals: memory that outlives a kernel launch.
//
// A candidate's `__device__` variables (zero-initialised in `.nv.global`, initialised in
// `.nv.global.init`, `__managed__` ones included) keep their values from one launch to the next,
// so a plan could remember what it computed in one run and skip the work in the next. The live
// evaluator resets every such section to its state at module load before each run of the candidate
// (gpu/live/live_eval.cc); this finds the sections and one symbol in each, whose device address
// (cuModuleGetGlobal) minus its offset is the section's base. `__constant__` memory is not listed:
// kernels cannot write it.
#ifndef VINCI_GPU_COMPILE_CUBIN_H_
#define VINCI_GPU_COMPILE_CUBIN_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace vinci {

struct CubinGlobalSection {
  std::string section;  // ".nv.global" or ".nv.global.init"
  uint64_t size = 0;    // bytes
  // The section's data symbols: name (as cuModuleGetGlobal takes it) and offset in the section.
  std::vector<std::pair<std::string, uint64_t>> symbols;
};

// The writable global sections of a 64-bit little-endian ELF cubin, each with at least one byte.
// InvalidArgument when the bytes are not such an ELF (every offset and size is checked against the
// image before it is read); an image with no global section gives an empty list.
Result<std::vector<CubinGlobalSection>> cubin_global_sections(std::string_view image);

}  // namespace vinci

#endif  // VINCI_GPU_COMPILE_CUBIN_H_

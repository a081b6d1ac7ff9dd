// The sim backbone's checkpoint bytes (objects of kind "checkpoint"), read and written here and
// nowhere else; docs/log_format.md ("Backbone checkpoints") is the reference:
//
//   checkpoint := "vinci-sim-backbone" u32:version(=1) shape u32:n param{n}
//   shape      := i32:task_dim i32:feedback_dim i32:candidate_dim i32:hidden i32:role_dim
//                 u32:heads i32:head_size{heads}
//   param      := str:name u32:ndim i64:dim{ndim} f32:value{numel}
//                 i64:adam_step f32:exp_avg{numel} f32:exp_avg_sq{numel}
//   str        := u32:length byte{length}
//
// in core/bytes.h's little-endian codec. Parameters appear in name order, values row-major. The
// optimizer state is part of a checkpoint so that a run resumed from one takes the same next step
// as the run that wrote it. Torch-free: values travel as float32 arrays.
#ifndef VINCI_AGENTS_SIM_CHECKPOINT_H_
#define VINCI_AGENTS_SIM_CHECKPOINT_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/bytes.h"
#include "core/hash.h"
#include "core/status.h"

namespace vinci {

// The shape fields, in their order on disk, and their names for error messages.
constexpr int kSimCheckpointFields = 5;
extern const char* const kSimCheckpointFieldNames[kSimCheckpointFields];  // task_dim, ..., role_dim

// A checkpoint parsed and bounds-checked, not yet compared with any backbone. The value arrays
// are views into the parsed bytes (little-endian float32, numel each).
struct SimCheckpoint {
  struct Param {
    std::string name;
    std::vector<int64_t> dims;
    int64_t numel = 0;
    std::string_view values, exp_avg, exp_avg_sq;
    int64_t step = 0;  // Adam steps taken
  };
  int32_t fields[kSimCheckpointFields] = {};
  std::vector<int32_t> head_sizes;
  std::vector<Param> params;
};

// Errors (kCorruption) name the byte offset and what was being read.
Result<SimCheckpoint> parse_sim_checkpoint(std::string_view bytes);

// Writes a checkpoint: the header, then each parameter in name order.
class SimCheckpointWriter {
 public:
  SimCheckpointWriter(const int32_t (&fields)[kSimCheckpointFields], const std::vector<int32_t>& head_sizes,
                      uint32_t params);
  // values, exp_avg and exp_avg_sq: numel (the product of dims) floats each.
  void add(const std::string& name, const std::vector<int64_t>& dims, const float* values, int64_t adam_step,
           const float* exp_avg, const float* exp_avg_sq);
  std::string take() { return w_.take(); }

 private:
  ByteWriter w_;
};

// The parameter digest: XXH3-128 over each parameter's name, rank, dims and float32 values, in
// name order. A live backbone and its checkpoint hash alike.
class SimParameterHasher {
 public:
  SimParameterHasher();
  // values: the parameter's little-endian float32 bytes.
  void add(const std::string& name, const std::vector<int64_t>& dims, std::string_view values);
  Digest finish() { return h_.finish(); }

 private:
  Hasher h_;
};

}  // namespace vinci

#endif  // VINCI_AGENTS_SIM_CHECKPOINT_H_

// A task's reference as files another program can read: its inputs and output at one size and
// input seed, as NumPy .npy arrays, with a meta.json naming them. scripts/kernelbench_crosscheck.py
// feeds these inputs to KernelBench's own module and compares outputs.
#ifndef VINCI_GPU_REFERENCE_DUMP_H_
#define VINCI_GPU_REFERENCE_DUMP_H_

#include <cstdint>
#include <string>

#include "core/status.h"
#include "gpu/executor.h"
#include "gpu/task.h"

namespace vinci {

// Draws the task's inputs from a CPU generator seeded with `seed` (as TaskInstance::make_inputs),
// builds its weights after manual_seed(42), runs the reference on the CPU and writes into dir:
// input_<i>.npy for each input in order, output.npy and meta.json (task, size, sizes, seed,
// distribution, each array's name, file, dtype and shape). Each file is written atomically; dir is
// created when missing.
Status dump_reference(const Task& task, SizeName size, InputDistribution dist, uint64_t seed, const std::string& dir);

// The bytes of a NumPy .npy file (format 1.0, little-endian, C order) for a float32 or int64
// array. Exposed for tests.
std::string npy_bytes(const std::string& dtype, const std::vector<int64_t>& shape, const void* data, size_t nbytes);

}  // namespace vinci

#endif  // VINCI_GPU_REFERENCE_DUMP_H_

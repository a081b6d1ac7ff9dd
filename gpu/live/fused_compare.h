// The output comparison of the live evaluator in one pass over GPU memory.
//
// compare_outputs (gpu/live/live_compare.h) states the rules with libtorch operations: about fifteen
// passes over tensors of the output's size, two seconds per trial for an output of 1.6 billion
// elements on an H200. FusedCompare applies the same rules to float32 CUDA tensors with one
// kernel that reads the output and the reference once (a broadcast scalar output, as the negative
// controls are, is read once in all), then a fixed-order reduction of per-block partial results
// on the host: the figures do not depend on scheduling. Everything else (index outputs, CPU
// tensors, non-contiguous ones) goes to compare_outputs. tests/gpu/fused_compare_test.cc checks
// that both give the same verdicts, counts and errors.
#ifndef VINCI_GPU_LIVE_FUSED_COMPARE_H_
#define VINCI_GPU_LIVE_FUSED_COMPARE_H_

#include <memory>

#include "core/status.h"
#include "gpu/compile/nvrtc.h"
#include "gpu/live/live_compare.h"

namespace vinci {

class FusedCompare {
 public:
  // Compiles the comparison kernel for the current CUDA context (once per process).
  static Result<std::unique_ptr<FusedCompare>> create(NvrtcCompiler& nvrtc);
  ~FusedCompare();

  // compare_outputs(out, ref, tol, norm_tol). With ref_sum, also the sum of the reference's
  // elements in double (the negative controls' constant), from the same pass.
  Comparison compare(const at::Tensor& out, const at::Tensor& ref, const Tolerance& tol, double norm_tol,
                     double* ref_sum = nullptr);

  struct Impl;

 private:
  explicit FusedCompare(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace vinci

#endif  // VINCI_GPU_LIVE_FUSED_COMPARE_H_

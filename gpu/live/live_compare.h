// How the live evaluator compares a candidate's output with the reference (gpu/live/live_eval.cc):
// KernelGYM's allclose, plus the checks a trustworthy evaluator adds (docs/method.md, Reward
// hacking): shape, dtype and device; NaN or Inf where the reference is finite (the NaN poison of
// unwritten elements shows here); and a relative L2 bound. Only the worker and its tests include
// this header: it brings in ATen.
#ifndef VINCI_GPU_LIVE_LIVE_COMPARE_H_
#define VINCI_GPU_LIVE_LIVE_COMPARE_H_

#include <ATen/core/Tensor.h>

#include <cmath>
#include <string>

#include "gpu/eval_result.h"

namespace vinci {

struct Comparison {
  bool ok = false;  // every check passed
  std::string tag;  // why not: not_written, non_finite, wrong_result, wrong_shape, wrong_dtype, wrong_device
  std::string why;  // for the user
  double max_abs = std::nan("");   // NaN when the output is NaN or Inf where the reference is finite
  double mean_abs = std::nan("");  // over the finite differences; NaN likewise
  bool allclose = false;           // the KernelGYM check alone
};

// out against ref: every element where ref is finite must be finite in out and within
// atol + rtol * |ref| (torch.allclose, elements where the reference itself is NaN or Inf not
// counted); then, when norm_tol > 0, ||out - ref|| / ||ref|| <= norm_tol (sums in double). Index
// (int64) outputs must be equal. Allocates at most two temporaries of the output's size at once.
Comparison compare_outputs(const at::Tensor& out, const at::Tensor& ref, const Tolerance& tol, double norm_tol);

// What the element checks of a float comparison count; compare_outputs (with libtorch) and
// FusedCompare (gpu/live/fused_compare.h, one kernel) both judge from these, so their verdicts and
// messages are the same.
struct FloatCounts {
  int64_t n = 0;          // elements compared
  int64_t nonfinite = 0;  // NaN or Inf in the output where the reference is finite
  int64_t nan_out = 0;    // NaN in the output anywhere
  int64_t outside = 0;    // |out - ref| > atol + rtol * |ref| (or NaN) where the reference is finite
  double max_abs = 0;     // max |out - ref|; NaN when any difference is NaN
  double sum_abs = 0;     // sum of the finite |out - ref|, in double
};

// The element checks' verdict: not_written, non_finite or wrong_result, or ok (the relative L2
// check, judge_norm, follows).
Comparison judge_elements(const FloatCounts& counts, const Tolerance& tol);
// The relative L2 check of a comparison the element checks passed: sqrt(err_sq) / sqrt(ref_sq)
// must not exceed norm_tol (> 0).
void judge_norm(Comparison* c, double err_sq, double ref_sq, double norm_tol);

// "[2,3,4]".
std::string shape_text(at::IntArrayRef s);

// fp32 (the suite's only floating dtype).
bool is_float(const at::Tensor& t);

}  // namespace vinci

#endif  // VINCI_GPU_LIVE_LIVE_COMPARE_H_

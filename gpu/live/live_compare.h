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

// A float output that missed the tolerance, and the FP32 reference itself, both against the task's
// float64 reference (TaskInstance::run_float64) under the same atol + rtol * |ref64|. For long sums
// (a matrix-vector product with K = 1M, say) the FP32 reference's own rounding is of the order of
// the tolerance: an honest kernel that sums in another order can miss the FP32 reference and
// still be as close to the exact result as the reference is. The verdict stays KernelBench's (the
// FP32 reference); this says which kind of miss it was.
struct Float64Check {
  int64_t n = 0;
  int64_t out_outside = 0;  // output elements outside the tolerance of the float64 reference
  int64_t ref_outside = 0;  // FP32 reference elements outside it
  double out_max_abs = 0;   // max |out - ref64| where ref64 is finite
  double ref_max_abs = 0;   // max |ref32 - ref64| likewise
};
Float64Check float64_check(const at::Tensor& out, const at::Tensor& ref32, const at::Tensor& ref64,
                           const Tolerance& tol);
// "against a float64 reference: 0 of 2048 output elements outside atol=0.01 rtol=0.01 (max abs error
// 0.004), 3 of the FP32 reference's (max 0.02): the miss is the FP32 reference's own rounding".
std::string float64_text(const Float64Check& k, const Tolerance& tol);

// "[2,3,4]".
std::string shape_text(at::IntArrayRef s);

// fp32 (the suite's only floating dtype).
bool is_float(const at::Tensor& t);

}  // namespace vinci

#endif  // VINCI_GPU_LIVE_LIVE_COMPARE_H_

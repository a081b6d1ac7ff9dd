#include "gpu/live/live_compare.h"

#include <algorithm>

#include <torch/torch.h>

#include "core/text.h"

namespace vinci {

std::string shape_text(at::IntArrayRef s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? "," : "") + std::to_string(s[i]);
  return out + "]";
}

bool is_float(const at::Tensor& t) { return t.scalar_type() == torch::kFloat32; }

Comparison compare_outputs(const at::Tensor& out, const at::Tensor& ref, const Tolerance& tol, double norm_tol) {
  Comparison c;
  if (!out.defined()) {
    c.tag = "not_written";
    c.why = "no output";
    return c;
  }
  if (out.sizes() != ref.sizes()) {
    c.tag = "wrong_shape";
    c.why = "output shape " + shape_text(out.sizes()) + ", the reference's is " + shape_text(ref.sizes());
    return c;
  }
  if (out.scalar_type() != ref.scalar_type()) {
    c.tag = "wrong_dtype";
    c.why = std::string("output dtype ") + c10::toString(out.scalar_type()) + ", the reference's is " +
            c10::toString(ref.scalar_type());
    return c;
  }
  if (out.device() != ref.device()) {
    c.tag = "wrong_device";
    c.why = "output on " + out.device().str() + ", the reference on " + ref.device().str();
    return c;
  }
  if (!is_float(ref)) {  // indices: exact
    torch::Tensor diff = (out != ref);
    int64_t bad = diff.sum().item<int64_t>();
    c.max_abs = bad ? 1 : 0;
    c.mean_abs = static_cast<double>(bad) / std::max<int64_t>(1, ref.numel());
    c.allclose = c.ok = bad == 0;
    if (!c.ok) {
      c.tag = "wrong_result";
      c.why = std::to_string(bad) + " of " + std::to_string(ref.numel()) + " indices differ from the reference";
    }
    return c;
  }
  // Few temporaries of the output's size: outputs reach billions of elements, and every extra
  // copy is GPU memory a large task's candidate may need.
  FloatCounts k;
  k.n = ref.numel();
  torch::Tensor diff = (out - ref).abs_();
  k.nonfinite = torch::isfinite(out).logical_not_().logical_and_(torch::isfinite(ref)).sum().item<int64_t>();
  k.nan_out = torch::isnan(out).sum().item<int64_t>();
  k.max_abs = diff.max().item<double>();
  {
    torch::Tensor bound = ref.abs().mul_(tol.rtol).add_(tol.atol);  // atol + rtol * |ref|
    k.outside = (diff > bound).logical_or_(torch::isnan(diff)).logical_and_(torch::isfinite(ref)).sum().item<int64_t>();
  }
  diff.nan_to_num_(0.0, 0.0, 0.0);  // the mean and the L2 error count finite differences only
  k.sum_abs = torch::sum(diff, torch::kFloat64).item<double>();
  c = judge_elements(k, tol);
  if (!c.ok || norm_tol <= 0) return c;
  // Sums of squares in double, without double copies of tensors of billions of elements.
  double err_sq = torch::sum(diff.square_(), torch::kFloat64).item<double>();
  diff = torch::Tensor();
  judge_norm(&c, err_sq, torch::sum(ref.square(), torch::kFloat64).item<double>(), norm_tol);
  return c;
}

Comparison judge_elements(const FloatCounts& k, const Tolerance& tol) {
  Comparison c;
  c.max_abs = k.nonfinite ? std::nan("") : k.max_abs;
  c.mean_abs = k.nonfinite ? std::nan("") : k.sum_abs / static_cast<double>(std::max<int64_t>(1, k.n));
  c.allclose = k.nonfinite == 0 && k.outside == 0;
  if (k.nonfinite) {
    c.tag = k.nan_out == k.nonfinite ? "not_written" : "non_finite";
    c.why = std::to_string(k.nonfinite) + " of " + std::to_string(k.n) + " output elements are " +
            (k.nan_out == k.nonfinite ? "NaN where the reference is finite (unwritten elements keep the NaN poison)"
                                      : "NaN or Inf where the reference is finite");
    return c;
  }
  if (k.outside) {
    c.tag = "wrong_result";
    c.why = std::to_string(k.outside) + " of " + std::to_string(k.n) +
            " elements outside atol=" + format_number("%.6g", tol.atol) + " rtol=" + format_number("%.6g", tol.rtol) +
            " (max abs error " + format_number("%.6g", c.max_abs) + ")";
    return c;
  }
  c.ok = true;
  return c;
}

void judge_norm(Comparison* c, double err_sq, double ref_sq, double norm_tol) {
  double err_norm = std::sqrt(err_sq);
  double ref_norm = std::sqrt(ref_sq);
  double rel = ref_norm > 0 ? err_norm / ref_norm : err_norm;
  if (rel > norm_tol) {
    c->ok = false;
    c->tag = "wrong_result";
    c->why = "relative L2 error " + format_number("%.6g", rel) + " > " + format_number("%.6g", norm_tol) +
             " (allclose passes: the tolerance is loose for this output's scale)";
  }
}

Float64Check float64_check(const at::Tensor& out, const at::Tensor& ref32, const at::Tensor& ref64,
                           const Tolerance& tol) {
  torch::NoGradGuard no_grad;
  Float64Check k;
  k.n = ref64.numel();
  torch::Tensor finite = torch::isfinite(ref64);
  torch::Tensor bound = ref64.abs().mul_(tol.rtol).add_(tol.atol);
  auto against = [&](const at::Tensor& t, int64_t* outside, double* max_abs) {
    torch::Tensor diff = (t.to(torch::kFloat64) - ref64).abs_();
    // NaN where the float64 reference is finite is outside too.
    *outside = (diff > bound).logical_or_(torch::isnan(diff)).logical_and_(finite).sum().item<int64_t>();
    torch::Tensor counted = diff.masked_fill_(finite.logical_not(), 0.0).nan_to_num_(0.0, 0.0, 0.0);
    *max_abs = k.n ? counted.max().item<double>() : 0.0;
  };
  against(out, &k.out_outside, &k.out_max_abs);
  against(ref32, &k.ref_outside, &k.ref_max_abs);
  return k;
}

std::string float64_text(const Float64Check& k, const Tolerance& tol) {
  std::string t = "against a float64 reference: " + std::to_string(k.out_outside) + " of " + std::to_string(k.n) +
                  " output elements outside atol=" + format_number("%.6g", tol.atol) +
                  " rtol=" + format_number("%.6g", tol.rtol) + " (max abs error " +
                  format_number("%.6g", k.out_max_abs) + "), " + std::to_string(k.ref_outside) +
                  " of the FP32 reference's (max " + format_number("%.6g", k.ref_max_abs) + ")";
  if (k.out_outside == 0) t += ": the miss is the FP32 reference's own rounding";
  return t;
}

}  // namespace vinci

// The live evaluator's output comparison (gpu/live/live_compare.h), on CPU tensors, against
// independent references: torch::allclose for the KernelGYM check, and sums taken element by
// element in double for the error figures and the relative L2 bound.
#include "gpu/live/live_compare.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <limits>

namespace vinci {
namespace {

const Tolerance kTol{1e-2, 1e-2};

// |out - ref| in float (as the evaluator computes it), summed in double, element by element.
struct Errors {
  double max_abs = 0, mean_abs = 0, rel_l2 = 0;
};
Errors errors_by_hand(const torch::Tensor& out, const torch::Tensor& ref) {
  auto o = out.contiguous().data_ptr<float>();
  auto r = ref.contiguous().data_ptr<float>();
  Errors e;
  double sum = 0, err2 = 0, ref2 = 0;
  for (int64_t i = 0; i < ref.numel(); ++i) {
    float d = std::fabs(o[i] - r[i]);
    e.max_abs = std::max(e.max_abs, static_cast<double>(d));
    sum += d;
    err2 += static_cast<double>(d * d);
    ref2 += static_cast<double>(r[i] * r[i]);
  }
  e.mean_abs = sum / ref.numel();
  e.rel_l2 = std::sqrt(err2) / std::sqrt(ref2);
  return e;
}

TEST(LiveCompare, AgreesWithTorchAllclose) {
  torch::manual_seed(7);
  int passed = 0, failed = 0;
  for (double scale : {0.0, 1e-4, 1e-3, 4e-3, 8e-3, 1e-2, 1.2e-2, 2e-2, 0.1}) {
    for (int rep = 0; rep < 4; ++rep) {
      torch::Tensor ref = torch::randn({37, 53});
      torch::Tensor out = ref + scale * torch::randn({37, 53});
      Comparison c = compare_outputs(out, ref, kTol, 0);
      bool expected = torch::allclose(out, ref, kTol.rtol, kTol.atol);
      EXPECT_EQ(c.allclose, expected) << "scale " << scale;
      EXPECT_EQ(c.ok, expected) << "scale " << scale;
      if (!expected) {
        EXPECT_EQ(c.tag, "wrong_result");
        EXPECT_NE(c.why.find("elements outside atol=0.01 rtol=0.01"), std::string::npos) << c.why;
      }
      Errors e = errors_by_hand(out, ref);
      EXPECT_EQ(c.max_abs, e.max_abs);
      EXPECT_NEAR(c.mean_abs, e.mean_abs, 1e-12 * std::max(1.0, e.mean_abs));
      (expected ? passed : failed)++;
    }
  }
  EXPECT_GT(passed, 0);  // both sides of the tolerance were exercised
  EXPECT_GT(failed, 0);
}

// An output that misses the FP32 reference can be as close to the exact (float64) result as the
// reference is: counted against allclose of each against the float64 reference.
TEST(LiveCompare, Float64CheckTellsTheReferencesRoundingFromAWrongOutput) {
  torch::Tensor ref64 = torch::ones({4, 5}, torch::kFloat64);
  torch::Tensor ref32 = ref64.to(torch::kFloat32);
  torch::Tensor out = ref32.clone();
  ref32[0][0] = 1.025f;  // the FP32 reference itself misses the exact result
  out[0][0] = 0.995f;    // 0.03 from the FP32 reference, 0.005 from the exact result
  ASSERT_FALSE(compare_outputs(out, ref32, kTol, 0).allclose);
  Float64Check k = float64_check(out, ref32, ref64, kTol);
  EXPECT_EQ(k.n, 20);
  EXPECT_EQ(k.out_outside, 0);
  EXPECT_EQ(k.ref_outside, 1);
  EXPECT_TRUE(torch::allclose(out.to(torch::kFloat64), ref64, kTol.rtol, kTol.atol));
  EXPECT_FALSE(torch::allclose(ref32.to(torch::kFloat64), ref64, kTol.rtol, kTol.atol));
  EXPECT_NEAR(k.out_max_abs, 0.005, 1e-7);
  EXPECT_NEAR(k.ref_max_abs, 0.025, 1e-6);
  std::string text = float64_text(k, kTol);
  EXPECT_NE(text.find("0 of 20 output elements outside atol=0.01 rtol=0.01"), std::string::npos) << text;
  EXPECT_NE(text.find("1 of the FP32 reference's"), std::string::npos) << text;
  EXPECT_NE(text.find("the miss is the FP32 reference's own rounding"), std::string::npos) << text;
  // A wrong element, and a NaN where the exact result is finite, are outside it too.
  out[1][1] = 1.5f;
  out[2][2] = std::numeric_limits<float>::quiet_NaN();
  k = float64_check(out, ref32, ref64, kTol);
  EXPECT_EQ(k.out_outside, 2);
  EXPECT_NEAR(k.out_max_abs, 0.5, 1e-7);
  text = float64_text(k, kTol);
  EXPECT_NE(text.find("2 of 20 output elements"), std::string::npos) << text;
  EXPECT_EQ(text.find("rounding"), std::string::npos) << text;
  // Where the exact result is not finite, nothing is judged.
  ref64[3][3] = std::numeric_limits<double>::infinity();
  out[3][3] = 7.0f;
  EXPECT_EQ(float64_check(out, ref32, ref64, kTol).out_outside, 2);
}

// allclose passes at every element but the error is large against the output's scale: the
// relative L2 bound rejects it, at the value an element-by-element sum gives.
TEST(LiveCompare, RelativeL2BoundCatchesWhatAllcloseLets) {
  torch::manual_seed(3);
  torch::Tensor ref = 1e-3 * torch::randn({4096});
  torch::Tensor out = ref + 5e-3 * torch::sign(torch::randn({4096}));
  ASSERT_TRUE(torch::allclose(out, ref, kTol.rtol, kTol.atol));
  Comparison loose = compare_outputs(out, ref, kTol, 0);
  EXPECT_TRUE(loose.ok);
  Comparison c = compare_outputs(out, ref, kTol, 1e-2);
  EXPECT_FALSE(c.ok);
  EXPECT_TRUE(c.allclose);
  EXPECT_EQ(c.tag, "wrong_result");
  double rel = errors_by_hand(out, ref).rel_l2;
  EXPECT_NE(c.why.find("relative L2 error " + std::to_string(rel).substr(0, 4)), std::string::npos)
      << c.why << " (by hand " << rel << ")";
  // Within the bound it passes.
  torch::Tensor close = ref * (1 + 5e-3);
  EXPECT_TRUE(compare_outputs(close, ref, kTol, 1e-2).ok);
}

TEST(LiveCompare, NanPoisonAndInfAreNamed) {
  torch::Tensor ref = torch::rand({100});
  torch::Tensor out = ref.clone();
  out.narrow(0, 10, 7).fill_(std::numeric_limits<float>::quiet_NaN());
  Comparison c = compare_outputs(out, ref, kTol, 1e-2);
  EXPECT_FALSE(c.ok);
  EXPECT_FALSE(c.allclose);
  EXPECT_EQ(c.tag, "not_written");
  EXPECT_NE(c.why.find("7 of 100 output elements are NaN where the reference is finite"), std::string::npos) << c.why;
  EXPECT_TRUE(std::isnan(c.max_abs));
  EXPECT_TRUE(std::isnan(c.mean_abs));
  out = ref.clone();
  out[3] = std::numeric_limits<float>::infinity();
  c = compare_outputs(out, ref, kTol, 1e-2);
  EXPECT_EQ(c.tag, "non_finite");
  EXPECT_NE(c.why.find("1 of 100 output elements are NaN or Inf"), std::string::npos) << c.why;
}

// Where the reference itself is NaN or Inf the element is not judged (torch.allclose would
// fail every candidate there); every other element still is.
TEST(LiveCompare, ElementsWhereTheReferenceIsNotFiniteAreNotJudged) {
  torch::Tensor ref = torch::rand({64});
  ref[5] = std::numeric_limits<float>::quiet_NaN();
  ref[6] = std::numeric_limits<float>::infinity();
  torch::Tensor out = ref.clone();
  out[5] = 0.5f;
  out[6] = 1.0f;
  Comparison c = compare_outputs(out, ref, kTol, 1e-2);
  EXPECT_TRUE(c.ok) << c.why;
  out[7] += 0.5f;
  c = compare_outputs(out, ref, kTol, 1e-2);
  EXPECT_EQ(c.tag, "wrong_result");
  EXPECT_NE(c.why.find("1 of 64 elements outside"), std::string::npos) << c.why;
}

// The negative controls are broadcast scalars: they must be judged as their materialized
// tensors are.
TEST(LiveCompare, BroadcastControlsAreJudgedLikeTensors) {
  torch::manual_seed(5);
  for (float level : {0.0f, 1e-3f, 0.5f}) {
    torch::Tensor ref = level * torch::rand({8, 9});
    torch::Tensor expanded = torch::zeros({}, ref.options()).expand(ref.sizes());
    Comparison a = compare_outputs(expanded, ref, kTol, 0);
    Comparison b = compare_outputs(torch::zeros_like(ref), ref, kTol, 0);
    EXPECT_EQ(a.allclose, b.allclose) << level;
    EXPECT_EQ(a.allclose, torch::allclose(torch::zeros_like(ref), ref, kTol.rtol, kTol.atol)) << level;
    EXPECT_EQ(a.max_abs, b.max_abs);
    EXPECT_EQ(a.mean_abs, b.mean_abs);
  }
}

TEST(LiveCompare, ShapeDtypeAndIndices) {
  torch::Tensor ref = torch::rand({4, 5});
  EXPECT_EQ(compare_outputs(torch::rand({5, 4}), ref, kTol, 0).tag, "wrong_shape");
  EXPECT_EQ(compare_outputs(ref.to(torch::kFloat64), ref, kTol, 0).tag, "wrong_dtype");
  EXPECT_EQ(compare_outputs(torch::Tensor(), ref, kTol, 0).tag, "not_written");
  torch::Tensor idx = torch::arange(10, torch::kInt64);
  EXPECT_TRUE(compare_outputs(idx.clone(), idx, kTol, 0).ok);
  torch::Tensor off = idx.clone();
  off[2] = 3;
  Comparison c = compare_outputs(off, idx, kTol, 0);
  EXPECT_EQ(c.tag, "wrong_result");
  EXPECT_NE(c.why.find("1 of 10 indices differ"), std::string::npos) << c.why;
  EXPECT_EQ(shape_text(ref.sizes()), "[4,5]");
}

}  // namespace
}  // namespace vinci

// FusedCompare (one kernel) against compare_outputs (libtorch) on the GPU: the same verdicts, tags,
// messages, counts and errors on outputs that pass, miss the tolerance, are unwritten (NaN poison),
// hold Inf, face a reference with NaN, fail only the relative L2 bound, or are broadcast scalars
// (the negative controls), at sizes from one element to past the kernel's grid. Links the driver
// API, so it runs only on a GPU machine (scripts/gpu_figures.sh, stage cudarun).
#include "gpu/live/fused_compare.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <cstring>
#include <string>

namespace vinci {
namespace {

struct Case {
  std::string name;
  torch::Tensor out, ref;
  Tolerance tol;
  double norm_tol;
};

TEST(FusedCompare, AgreesWithTheLibtorchRules) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA libtorch or GPU here";
  NvrtcOptions no;
  no.arch = "sm_90";
  NvrtcCompiler nvrtc(no);
  torch::zeros({1}, torch::kCUDA);  // the primary context, as the worker has it
  Result<std::unique_ptr<FusedCompare>> fused = FusedCompare::create(nvrtc);
  ASSERT_TRUE(fused.ok()) << fused.status().to_string();

  auto gen = torch::make_generator<at::CPUGeneratorImpl>(7);
  auto cuda = torch::TensorOptions().device(torch::kCUDA);
  std::vector<Case> cases;
  const Tolerance loose{1e-2, 1e-2};
  for (int64_t n : {int64_t{1}, int64_t{1000}, int64_t{262143}, int64_t{262145}, int64_t{3} << 22}) {
    torch::Tensor ref = torch::randn({n}, gen).to(torch::kCUDA);
    std::string at = " n=" + std::to_string(n);
    cases.push_back({"equal" + at, ref.clone(), ref, loose, 1e-2});
    cases.push_back({"noise" + at, ref + 1e-3 * torch::randn({n}, gen).to(torch::kCUDA), ref, loose, 1e-2});
    torch::Tensor far = ref.clone();
    far.index_put_({torch::randint(n, {std::max<int64_t>(1, n / 100)}, gen).to(torch::kCUDA)}, 5.0f);
    cases.push_back({"outside" + at, far, ref, loose, 1e-2});
    torch::Tensor poison = ref.clone();
    poison.narrow(0, n / 2, n - n / 2).fill_(std::nanf(""));
    cases.push_back({"unwritten" + at, poison, ref, loose, 1e-2});
    torch::Tensor inf = ref.clone();
    inf.narrow(0, 0, 1).fill_(INFINITY);
    cases.push_back({"inf" + at, inf, ref, loose, 1e-2});
    torch::Tensor refnan = ref.clone();
    refnan.narrow(0, n - 1, 1).fill_(std::nanf(""));
    cases.push_back({"reference NaN" + at, ref.clone(), refnan, loose, 1e-2});
    cases.push_back({"reference NaN, output differs" + at, ref + 1e-4, refnan, loose, 1e-2});
    cases.push_back({"norm only" + at, ref * 1.05f, ref, {10.0, 0.5}, 1e-2});
    cases.push_back({"norm off" + at, ref * 1.05f, ref, {10.0, 0.5}, 0});
    cases.push_back({"zeros control" + at, torch::zeros({}, cuda).expand({n}), ref, loose, 0});
    cases.push_back({"constant control" + at, torch::full({}, 0.25f, cuda).expand({n}), ref, loose, 0});
    cases.push_back({"zeros of zeros" + at, torch::zeros({}, cuda).expand({n}), torch::zeros({n}, cuda), loose, 1e-2});
  }
  // Not fused (a transposed output, index outputs): the libtorch rules themselves.
  torch::Tensor m = torch::randn({64, 48}, gen).to(torch::kCUDA);
  cases.push_back({"transposed", m.t().contiguous().t(), m, loose, 1e-2});
  torch::Tensor idx = torch::randint(10, {1000}, gen).to(torch::kCUDA);
  cases.push_back({"indices", idx.clone(), idx, loose, 0});

  for (const Case& c : cases) {
    Comparison want = compare_outputs(c.out, c.ref, c.tol, c.norm_tol);
    double ref_sum = 0;
    Comparison got = (*fused)->compare(c.out, c.ref, c.tol, c.norm_tol, &ref_sum);
    EXPECT_EQ(got.ok, want.ok) << c.name;
    EXPECT_EQ(got.allclose, want.allclose) << c.name;
    EXPECT_EQ(got.tag, want.tag) << c.name;
    EXPECT_EQ(got.why, want.why) << c.name;
    if (std::isnan(want.max_abs))
      EXPECT_TRUE(std::isnan(got.max_abs)) << c.name;
    else
      EXPECT_EQ(got.max_abs, want.max_abs) << c.name;
    if (std::isnan(want.mean_abs)) {
      EXPECT_TRUE(std::isnan(got.mean_abs)) << c.name;
    } else {
      EXPECT_NEAR(got.mean_abs, want.mean_abs, 1e-12 * std::max(1.0, std::fabs(want.mean_abs))) << c.name;
    }
    if (c.ref.scalar_type() == torch::kFloat32) {
      double s = torch::sum(c.ref, torch::kFloat64).item<double>();
      if (std::isnan(s))
        EXPECT_TRUE(std::isnan(ref_sum)) << c.name;
      else
        EXPECT_NEAR(ref_sum, s, 1e-9 * std::max(1.0, std::fabs(s))) << c.name;
    }
  }
  // The same inputs give the same figures, bit for bit (a fixed-order reduction).
  const Case& big = cases[cases.size() - 13];  // "noise" at the largest n
  Comparison a = (*fused)->compare(big.out, big.ref, big.tol, big.norm_tol);
  Comparison b = (*fused)->compare(big.out, big.ref, big.tol, big.norm_tol);
  EXPECT_EQ(std::memcmp(&a.mean_abs, &b.mean_abs, sizeof(double)), 0) << big.name;
}

}  // namespace
}  // namespace vinci

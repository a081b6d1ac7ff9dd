// Calibration on synthetic measurements: times from the model with hidden efficiency terms and
// keyed noise; the fit must recover the terms and improve the rank correlation.
#include "gpu/sim/calibration.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <set>

#include "core/rng.h"
#include "gpu/sim/sim_model.h"
#include "tests/gpu/sim_test_util.h"

namespace vinci {
namespace {

uint64_t test_seed() {
  const char* s = std::getenv("VINCI_TEST_SEED");
  uint64_t seed = s ? std::strtoull(s, nullptr, 10) : 20261202;
  std::printf("calibration test seed %llu (set VINCI_TEST_SEED to change)\n", static_cast<unsigned long long>(seed));
  return seed;
}

TEST(Spearman, RanksWithTies) {
  EXPECT_DOUBLE_EQ(spearman({1, 2, 3, 4}, {10, 20, 30, 40}), 1.0);
  EXPECT_DOUBLE_EQ(spearman({1, 2, 3, 4}, {4, 3, 2, 1}), -1.0);
  EXPECT_NEAR(spearman({1, 1, 2}, {1, 2, 3}), std::sqrt(3.0) / 2, 1e-12);
  EXPECT_TRUE(std::isnan(spearman({1, 1, 1}, {1, 2, 3})));
  EXPECT_TRUE(std::isnan(spearman({1}, {2})));
}

// Measured times from a hidden "true" profile: the model's times under it, times exp(0.01 z).
std::vector<CalibrationSample> synthetic(const DeviceProfile& truth, uint64_t seed) {
  SimModel model(truth);
  std::vector<CalibrationSample> out;
  const Task* chain = &simtest::chain_task();
  std::vector<const Task*> tasks = {
      &simtest::task("L1_001"), &simtest::task("L1_019"), &simtest::task("L1_023"), &simtest::task("L2_081"),
      &simtest::task("L2_066"), &simtest::task("L1_047"), &simtest::task("L3_001"), chain};
  for (const Task* t : tasks) {
    for (SizeName size : {SizeName::kFull, SizeName::kSmall}) {
      SizeMap sizes = t->size_map(size);
      Result<TaskContext> ctx = model.prepare(*t, sizes);
      VINCI_REQUIRE(ctx.ok(), ctx.status().to_string());
      KnobSpace space = knob_space(*t);
      RngKey key = RngKey::root(seed).with("task", t->id).with("size", size_name(size));
      Stream draws(key.with("purpose", "knobs"));
      int n = size == SizeName::kFull ? 12 : 3;
      // A task with a library GEMM also has its 16-bit library plans, whose casts the search
      // must price as the model does.
      bool library_gemm = space.index_of("gemm.impl") >= 0;
      for (int i = 0; i < n + (library_gemm ? 2 : 0); ++i) {
        KnobSetting setting = i == 0 ? default_setting(space) : random_setting(space, draws);
        Result<Plan> plan =
            i < n ? generate_plan(*t, setting)
                  : generate_plan(*t, std::map<std::string, std::string>{
                                          {"gemm.impl", "library"}, {"gemm.tensor_cores", i == n ? "bf16" : "fp16"}});
        VINCI_REQUIRE(plan.ok(), plan.status().to_string());
        Result<PlanPrediction> p = model.predict(*ctx, *plan);
        VINCI_REQUIRE(p.ok(), p.status().to_string());
        Stream noise(key.with("purpose", "noise").with("plan", i));
        CalibrationSample s;
        s.task = t;
        s.sizes = sizes;
        s.plan = *plan;
        s.measured_us = p->time_us * std::exp(0.01 * noise.normal());
        s.measured_reference_us = ctx->reference().time_us * std::exp(0.01 * noise.normal());
        out.push_back(std::move(s));
      }
    }
  }
  return out;
}

TEST(Calibration, RecoversHiddenEfficienciesAndImprovesRankCorrelation) {
  uint64_t seed = test_seed();
  DeviceProfile truth = simtest::h200();
  truth.eff_elementwise = 0.7;
  truth.eff_row_reduction = 1.3;
  // Tensor cores far below the model's figure: the hidden device ranks tf32 GEMMs against fp32
  // ones differently from the starting profile, which is what calibration must repair.
  truth.eff_gemm_cuda_core = 0.6;
  truth.eff_gemm_tensor_core = 0.15;
  truth.eff_library_gemm = 0.9;
  truth.eff_library_other = 0.8;
  truth.kernel_launch_us = 5.0;
  std::vector<CalibrationSample> samples = synthetic(truth, seed);
  CalibrationOptions opts;
  opts.parameters = {
      "efficiency.elementwise",  "efficiency.row_reduction", "efficiency.gemm_cuda_core", "efficiency.gemm_tensor_core",
      "efficiency.library_gemm", "efficiency.library_other", "launch.kernel_us"};
  Result<CalibrationReport> r = calibrate(simtest::h200(), samples, opts);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  std::printf("%s", calibration_report_text(*r).c_str());
  EXPECT_LT(r->loss_after, r->loss_before / 20);
  EXPECT_LT(r->loss_after, 2 * 0.01 * 0.01);  // down to about the noise: 0.01^2 per sample
  // The best any fit can do is the hidden profile itself: noise reorders plans whose times are
  // within a few percent (launch-bound small sizes, equally bandwidth-bound settings).
  CalibrationOptions frozen = opts;
  frozen.max_rounds = 0;
  Result<CalibrationReport> oracle = calibrate(truth, samples, frozen);
  ASSERT_TRUE(oracle.ok());
  std::printf("spearman: start %.4f, fitted %.4f, hidden profile %.4f\n", r->spearman_before, r->spearman_after,
              oracle->spearman_before);
  EXPECT_GT(r->spearman_after, r->spearman_before);
  EXPECT_GT(r->spearman_after, oracle->spearman_before - 0.03);
  const DeviceProfile& f = r->fitted;
  EXPECT_NEAR(f.eff_elementwise / truth.eff_elementwise, 1.0, 0.1);
  EXPECT_NEAR(f.eff_row_reduction / truth.eff_row_reduction, 1.0, 0.1);
  EXPECT_NEAR(f.eff_gemm_cuda_core / truth.eff_gemm_cuda_core, 1.0, 0.1);
  EXPECT_NEAR(f.eff_gemm_tensor_core / truth.eff_gemm_tensor_core, 1.0, 0.1);
  EXPECT_NEAR(f.eff_library_gemm / truth.eff_library_gemm, 1.0, 0.1);
  EXPECT_NEAR(f.eff_library_other / truth.eff_library_other, 1.0, 0.1);
  EXPECT_NEAR(f.kernel_launch_us / truth.kernel_launch_us, 1.0, 0.15);
  // Deterministic: the same samples give the same fit.
  Result<CalibrationReport> again = calibrate(simtest::h200(), samples, opts);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(device_profile_to_toml(again->fitted), device_profile_to_toml(r->fitted));
}

// The search prices each trial again only where the changed figure is read (plans by their
// kernels' families, references by their library steps): every figure, either objective, the
// same search as pricing everything for every trial, and a loss that is its fitted profile's.
TEST(Calibration, PricingOnlyWhatATrialChangesIsTheSameSearch) {
  DeviceProfile truth = simtest::h200();
  truth.eff_elementwise = 0.7;
  truth.eff_row_reduction = 1.3;
  truth.eff_gemm_tensor_core = 0.15;
  truth.wmma_fraction = 0.4;
  truth.library_tf32_fraction = 0.5;
  truth.eff_library_other = 0.8;
  truth.kernel_launch_us = 5.0;
  std::vector<CalibrationSample> samples = synthetic(truth, test_seed());
  std::set<std::string> moved;
  for (auto objective : {CalibrationOptions::Objective::kTimes, CalibrationOptions::Objective::kSpeedups}) {
    CalibrationOptions opts;  // every figure
    opts.objective = objective;
    opts.max_rounds = 8;
    Result<CalibrationReport> r = calibrate(simtest::h200(), samples, opts);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    CalibrationOptions full = opts;
    full.reprice_everything = true;
    Result<CalibrationReport> slow = calibrate(simtest::h200(), samples, full);
    ASSERT_TRUE(slow.ok()) << slow.status().to_string();
    EXPECT_LT(slow->loss_after, slow->loss_before);
    EXPECT_EQ(r->loss_after, slow->loss_after);
    EXPECT_EQ(r->evaluations, slow->evaluations);
    EXPECT_EQ(r->after, slow->after);
    EXPECT_EQ(device_profile_to_toml(r->fitted), device_profile_to_toml(slow->fitted));
    for (const auto& [name, v] : slow->after)
      if (v != slow->before.at(name)) moved.insert(name);
    CalibrationOptions frozen = opts;
    frozen.max_rounds = 0;
    Result<CalibrationReport> fresh = calibrate(r->fitted, samples, frozen);
    ASSERT_TRUE(fresh.ok());
    EXPECT_EQ(fresh->loss_before, r->loss_after);
  }
  // Figures whose trials reprice a part of the samples moved, so the comparison reaches them.
  for (const char* name :
       {"efficiency.elementwise", "efficiency.row_reduction", "efficiency.gemm_tensor_core", "compute.wmma_fraction",
        "compute.library_tf32_fraction", "efficiency.library_other", "launch.kernel_us"})
    EXPECT_EQ(moved.count(name), 1u) << name << " never moved: the test does not reach it";
}

TEST(Calibration, RejectsBadInput) {
  EXPECT_FALSE(calibrate(simtest::h200(), {}).ok());
  CalibrationSample s;
  s.task = &simtest::task("L1_019");
  s.sizes = s.task->size_map(SizeName::kSmall);
  s.plan = simtest::must_generate(*s.task, {});
  s.measured_us = 0;
  Result<CalibrationReport> zero = calibrate(simtest::h200(), {s});
  ASSERT_FALSE(zero.ok());
  EXPECT_NE(zero.status().message().find("measured time"), std::string::npos);
  s.measured_us = 10;
  CalibrationOptions o;
  o.parameters = {"efficiency.bogus"};
  Result<CalibrationReport> bad = calibrate(simtest::h200(), {s}, o);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("efficiency.bogus"), std::string::npos);
}

}  // namespace
}  // namespace vinci

namespace vinci {
namespace {

std::string write_temp(const std::string& name, const std::string& text) {
  std::string path = ::testing::TempDir() + "/" + name;
  FILE* f = std::fopen(path.c_str(), "w");
  VINCI_REQUIRE(f, "cannot write " << path);
  std::fputs(text.c_str(), f);
  std::fclose(f);
  return path;
}

TEST(Calibration, LoadsMeasuredPlansFromJsonLines) {
  std::string plan_json =
      plan_to_json(simtest::must_generate(simtest::task("L1_019"), {{"ew.vector_width", "1"}})).dump();
  std::string path =
      write_temp("measured.jsonl",
                 "# measured on the GPU machine\n"
                 "{\"task\": \"L1_001\", \"size\": \"full\", \"knobs\": {\"gemm.tensor_cores\": \"tf32\"}, "
                 "\"kernel_us\": 812.5, \"reference_us\": 2790}\n"
                 "\n"
                 "{\"task\": \"L1_019\", \"size\": \"small\", \"plan\": " +
                     plan_json + ", \"kernel_us\": 6.1}\n");
  Result<std::vector<CalibrationSample>> s = load_calibration_samples(path, simtest::suite());
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  ASSERT_EQ(s->size(), 2u);
  EXPECT_EQ((*s)[0].task->id, "L1_001");
  EXPECT_EQ((*s)[0].sizes.at("N"), 4096);
  EXPECT_TRUE((*s)[0].plan.kernels.at(0).tensor_cores);
  EXPECT_EQ((*s)[0].measured_reference_us, 2790);
  EXPECT_EQ((*s)[1].sizes.at("D"), 1001);
  EXPECT_EQ((*s)[1].plan.kernels.at(0).vector_width, 1);
  EXPECT_EQ((*s)[1].measured_reference_us, 0);

  struct Case {
    std::string line, expect;
  } bad[] = {
      {"{\"task\": \"L9_999\", \"size\": \"full\", \"knobs\": {}, \"kernel_us\": 1}",
       "bad.jsonl:1: key 'task': no task 'L9_999'"},
      {"{\"task\": \"L1_001\", \"size\": \"huge\", \"knobs\": {}, \"kernel_us\": 1}", "key 'size'"},
      {"{\"task\": \"L1_001\", \"size\": \"full\", \"knobs\": {}, \"kernel_us\": -1}",
       "key 'kernel_us': expected a positive number"},
      {"{\"task\": \"L1_001\", \"size\": \"full\", \"kernel_us\": 1}", "expected key 'plan' or 'knobs'"},
      {"{\"task\": \"L1_001\", \"size\": \"full\", \"knobs\": {\"gemm.tile_m\": \"7\"}, \"kernel_us\": 1}",
       "key 'knobs'"},
      {"not json", "bad.jsonl:1: expected a JSON object"},
  };
  for (const auto& c : bad) {
    Result<std::vector<CalibrationSample>> r =
        load_calibration_samples(write_temp("bad.jsonl", c.line + "\n"), simtest::suite());
    ASSERT_FALSE(r.ok()) << c.line;
    EXPECT_NE(r.status().message().find(c.expect), std::string::npos) << r.status().message();
  }
}

}  // namespace
}  // namespace vinci

// The sim evaluator's record: determinism, keyed noise, risky settings, decoys, flags, and the
// EvalResult <-> Measurement mapping.
#include "gpu/sim/sim_evaluator.h"

#include <capnp/message.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/rng.h"
#include "gpu/executor.h"
#include "tests/gpu/sim_test_util.h"

namespace vinci {
namespace {

using simtest::h200;
using simtest::must_generate;
using simtest::task;

EvalRequest request(SizeName size, uint64_t seed = 7) {
  EvalRequest r;
  r.size = size;
  r.seed = seed;
  r.samples = 20;
  return r;
}

TEST(SimEvaluator, NoiseOffRepeatsBitIdentically) {
  SimEvaluator a(h200()), b(h200());
  const Task& t = task("L1_023");
  Plan plan = must_generate(t, {});
  Result<EvalResult> x = a.evaluate(t, plan, request(SizeName::kFull));
  Result<EvalResult> y = b.evaluate(t, plan, request(SizeName::kFull));
  Result<EvalResult> z = a.evaluate(t, plan, request(SizeName::kFull, 99));  // other seed: same times
  ASSERT_TRUE(x.ok() && y.ok() && z.ok()) << x.status().to_string();
  EXPECT_TRUE(*x == *y);
  EXPECT_EQ(x->kernel_times_us, z->kernel_times_us);
  EXPECT_EQ(x->evaluator, "sim");
  EXPECT_EQ(x->device, "h200-datasheet");
  EXPECT_EQ(x->plan, plan_address(plan));
  EXPECT_TRUE(x->compiled);
  EXPECT_TRUE(x->correct);
  ASSERT_EQ(x->kernel_times_us.size(), 20u);
  for (double v : x->kernel_times_us) EXPECT_EQ(v, x->kernel_us);
  EXPECT_EQ(x->speedup, x->reference_us / x->kernel_us);
  EXPECT_EQ(x->time_coverage, 1.0);
  ASSERT_EQ(x->trials.size(), 5u);
  EXPECT_EQ(x->trials[0].distribution, "uniform01");
  EXPECT_EQ(x->trials[1].distribution, "signed");
  EXPECT_EQ(x->trials[2].distribution, "heavy_tailed");
  EXPECT_NE(x->trials[0].seed, x->trials[3].seed);
}

TEST(SimEvaluator, NoiseIsKeyedBySeedTaskAndPlan) {
  SimEvaluatorOptions opts;
  opts.noise = 0.05;
  SimEvaluator ev(h200(), opts);
  const Task& t = task("L1_019");
  Plan p1 = must_generate(t, {});
  Plan p2 = must_generate(t, {{"ew.block", "512"}});
  Result<EvalResult> a = ev.evaluate(t, p1, request(SizeName::kFull, 1));
  Result<EvalResult> a_again = SimEvaluator(h200(), opts).evaluate(t, p1, request(SizeName::kFull, 1));
  Result<EvalResult> seed2 = ev.evaluate(t, p1, request(SizeName::kFull, 2));
  Result<EvalResult> other_plan = ev.evaluate(t, p2, request(SizeName::kFull, 1));
  ASSERT_TRUE(a.ok() && a_again.ok() && seed2.ok() && other_plan.ok());
  EXPECT_TRUE(*a == *a_again);  // same key, same samples
  EXPECT_NE(a->kernel_times_us, seed2->kernel_times_us);
  EXPECT_NE(a->kernel_times_us[0] / a->kernel_us, other_plan->kernel_times_us[0] / other_plan->kernel_us);
  // Samples spread by about the configured relative sigma around the model's time.
  SimEvaluator quiet(h200());
  double model = quiet.evaluate(t, p1, request(SizeName::kFull))->kernel_us;
  double sum = 0, sq = 0;
  for (double v : a->kernel_times_us) {
    double l = std::log(v / model);
    sum += l;
    sq += l * l;
  }
  double n = static_cast<double>(a->kernel_times_us.size());
  double sd = std::sqrt(sq / n - (sum / n) * (sum / n));
  EXPECT_GT(sd, 0.02);
  EXPECT_LT(sd, 0.09);
  EXPECT_NEAR(a->kernel_us / model, 1.0, 0.05);
}

// Adaptive timing keeps a prefix of the fixed protocol's keyed samples: the first check when the
// times do not vary, more as the noise grows, the cap when the width is never reached; the rule,
// the samples used and why it stopped are in the settings.
TEST(SimEvaluator, AdaptiveTimingKeepsAPrefixOfTheFixedSamples) {
  const Task& t = task("L1_019");
  Plan plan = must_generate(t, {});
  EvalRequest fixed = request(SizeName::kFull);
  fixed.samples = 100;
  EvalRequest adaptive = fixed;
  adaptive.adaptive = true;
  adaptive.adaptive_rule.rel_width = 0.01;
  adaptive.adaptive_rule.max_samples = 100;
  size_t used_before = 0;
  for (double noise : {0.0, 0.002, 0.01, 0.2}) {
    SimEvaluatorOptions opts;
    opts.noise = noise;
    SimEvaluator ev(h200(), opts);
    Result<EvalResult> f = ev.evaluate(t, plan, fixed);
    Result<EvalResult> a = ev.evaluate(t, plan, adaptive);
    ASSERT_TRUE(f.ok() && a.ok());
    size_t n = a->kernel_times_us.size();
    ASSERT_EQ(a->reference_times_us.size(), n) << noise;
    EXPECT_TRUE(std::equal(a->kernel_times_us.begin(), a->kernel_times_us.end(), f->kernel_times_us.begin()));
    EXPECT_TRUE(std::equal(a->reference_times_us.begin(), a->reference_times_us.end(), f->reference_times_us.begin()));
    EXPECT_EQ(a->settings.at("samples_used"), std::to_string(n));
    EXPECT_GE(n, used_before) << noise;
    used_before = n;
    if (noise == 0.0) {
      EXPECT_EQ(n, 20u);
      EXPECT_EQ(a->settings.at("timing_stopped_by"), "width");
      EXPECT_EQ(a->speedup, f->speedup);
    }
    if (noise == 0.2) {
      EXPECT_EQ(n, 100u);
      EXPECT_EQ(a->settings.at("timing_stopped_by"), "cap");
    }
  }
}

// The GPU worker's spot checks (spot_check_share, spot_checked, drawn with the worker's keys): a
// candidate that skips its work in half of its runs, at random, to move the median, escapes every
// checked round of an adaptive pass stopped at the rule's first look no more often than it escapes
// those of a full fixed pass. At the fixed protocol's share (one in 16) it would escape about 13
// times as often.
TEST(SpotChecks, AnAdaptivePassStoppedEarlyChecksAsMuchAsAFixedOne) {
  const int sets = 3, final_checks = 3;
  EvalRequest fixed;
  fixed.samples = 100;
  EvalRequest adaptive = fixed;
  adaptive.adaptive = true;
  const double fixed_share = spot_check_share(fixed, final_checks);
  const double adaptive_share = spot_check_share(adaptive, final_checks);
  EXPECT_EQ(fixed_share, 1.0 / 16);
  EXPECT_NEAR(adaptive_share, 97.0 / 16 / 20, 1e-12);  // 20 ordinary rounds before the first look
  // The probability of escaping every check of one pass, averaged over the keyed schedules of 400
  // seeds: each ordinary round checked by its keyed draw, then one final check per set.
  auto escape = [&](int ordinary, double share) {
    double sum = 0;
    for (uint64_t seed = 1; seed <= 400; ++seed) {
      int checks = final_checks;
      for (int i = 0; i < ordinary; ++i)
        checks += spot_checked(input_seed(seed, "L1_019/timing-check/0", i, InputDistribution::kUniform01), share);
      sum += std::pow(0.5, checks);
    }
    return sum / 400;
  };
  const double fixed_escape = escape(fixed.samples - sets, fixed_share);
  const double early_escape = escape(adaptive.adaptive_rule.min_samples, adaptive_share);
  const double early_escape_at_fixed_share = escape(adaptive.adaptive_rule.min_samples, fixed_share);
  std::printf(
      "escape at skip rate 0.5: fixed pass %.5f, adaptive pass stopped at the first look %.5f (%.5f at "
      "the fixed share)\n",
      fixed_escape, early_escape, early_escape_at_fixed_share);
  EXPECT_LE(early_escape, fixed_escape * 1.25) << early_escape << " vs " << fixed_escape;
  EXPECT_GT(early_escape_at_fixed_share, 5 * fixed_escape) << early_escape_at_fixed_share << " vs " << fixed_escape;
  // The draw is a fair coin at its share, and every round is checked at a share of 1.
  int hits = 0;
  for (int i = 0; i < 20000; ++i)
    hits += spot_checked(input_seed(7, "L1_019/timing-check/1", i, InputDistribution::kUniform01), adaptive_share);
  EXPECT_NEAR(hits / 20000.0, adaptive_share, 0.015);
  EXPECT_TRUE(spot_checked(~uint64_t{0}, 1.0));
  EXPECT_FALSE(spot_checked(0, 0.0));
}

TEST(SimEvaluator, MissingTailHandlingFailsExactlyWhenSizesDoNotDivide) {
  SimEvaluator ev(h200());
  const Task& t = task("L1_019");  // small: 8 x 1001 = 8008 elements; full: a multiple of 1024
  Plan plan = must_generate(t, {{"ew.tail", "none"}});
  Result<EvalResult> small = ev.evaluate(t, plan, request(SizeName::kSmall));
  Result<EvalResult> full = ev.evaluate(t, plan, request(SizeName::kFull));
  ASSERT_TRUE(small.ok() && full.ok());
  EXPECT_FALSE(small->correct);
  EXPECT_NE(small->error.find("no tail handling"), std::string::npos) << small->error;
  EXPECT_EQ(small->speedup, 0);
  EXPECT_TRUE(small->kernel_times_us.empty());
  for (const auto& tr : small->trials) {
    EXPECT_FALSE(tr.correct);
    EXPECT_TRUE(std::isnan(tr.max_abs_err));
  }
  EXPECT_TRUE(full->correct) << full->error;

  const Task& g = task("L1_001");  // small N = 67: no tile divides it
  Plan unchecked = must_generate(g, {{"gemm.bounds", "unchecked"}});
  EXPECT_FALSE(ev.evaluate(g, unchecked, request(SizeName::kSmall))->correct);
  EXPECT_TRUE(ev.evaluate(g, unchecked, request(SizeName::kFull))->correct);
}

TEST(SimEvaluator, Tf32PassesTheDefaultToleranceAndFailsTheStrictOne) {
  SimEvaluator ev(h200());
  const Task& t = task("L2_081");  // a Linear: its weights are small, so are the TF32 errors
  Plan tf32 = must_generate(t, {{"gemm.tensor_cores", "tf32"}});
  EvalRequest loose = request(SizeName::kFull);
  EvalRequest strict = loose;
  strict.strict = true;
  Result<EvalResult> a = ev.evaluate(t, tf32, loose);
  Result<EvalResult> b = ev.evaluate(t, tf32, strict);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_TRUE(a->correct) << a->error;
  EXPECT_FALSE(b->correct);
  EXPECT_NE(b->error.find("tf32"), std::string::npos) << b->error;
  // fp32 CUDA cores pass both.
  Plan fp32 = must_generate(t, {});
  EXPECT_TRUE(ev.evaluate(t, fp32, strict)->correct);
}

// As on the H200 (data/measurements/h200_library_gemm.jsonl): a TF32 product of two unit-scale
// inputs with K = 4096 misses atol = 1e-2 near zero outputs (max |error| 0.031 there), one with
// K = 64 passes, and a matrix-vector product runs exact in the library but not in a wmma kernel.
TEST(SimEvaluator, Tf32AbsoluteErrorGrowsWithK) {
  SimEvaluator ev(h200());
  EvalRequest loose = request(SizeName::kFull);
  for (const char* impl : {"generated", "library"}) {
    Result<EvalResult> big = ev.evaluate(
        task("L1_001"), must_generate(task("L1_001"), {{"gemm.impl", impl}, {"gemm.tensor_cores", "tf32"}}), loose);
    ASSERT_TRUE(big.ok());
    EXPECT_FALSE(big->correct) << impl;
    EXPECT_NE(big->error.find("exceeds atol"), std::string::npos) << big->error;
    Result<EvalResult> small_k = ev.evaluate(
        task("L1_007"), must_generate(task("L1_007"), {{"gemm.impl", impl}, {"gemm.tensor_cores", "tf32"}}), loose);
    ASSERT_TRUE(small_k.ok());
    EXPECT_TRUE(small_k->correct) << impl << ": " << small_k->error;
    Result<EvalResult> matvec = ev.evaluate(
        task("L1_004"), must_generate(task("L1_004"), {{"gemm.impl", impl}, {"gemm.tensor_cores", "tf32"}}), loose);
    ASSERT_TRUE(matvec.ok());
    EXPECT_EQ(matvec->correct, std::string(impl) == "library") << impl << ": " << matvec->error;
  }
}

// As on the H200 (data/measurements/h200_library_gemm.jsonl): a sum over a Linear's 8192 outputs
// adds up their TF32 errors, so L2_014 and L2_018 fail where one output's error alone passes (L2_081,
// whose epilogue sums nothing).
TEST(SimEvaluator, Tf32ErrorsSummedOverAnOutputRowFailNearZero) {
  SimEvaluator ev(h200());
  EvalRequest loose = request(SizeName::kFull);
  for (const char* id : {"L2_014", "L2_018"}) {
    Result<EvalResult> r = ev.evaluate(
        task(id), must_generate(task(id), {{"gemm.impl", "library"}, {"gemm.tensor_cores", "tf32"}}), loose);
    ASSERT_TRUE(r.ok());
    EXPECT_FALSE(r->correct) << id;
    EXPECT_NE(r->error.find("tf32 precision: expected largest |error|"), std::string::npos) << r->error;
    // FP32 products are exact enough for the same sum.
    EXPECT_TRUE(ev.evaluate(task(id), must_generate(task(id), {{"gemm.impl", "library"}}), loose)->correct) << id;
  }
  Result<EvalResult> linear = ev.evaluate(
      task("L2_081"), must_generate(task("L2_081"), {{"gemm.impl", "library"}, {"gemm.tensor_cores", "tf32"}}), loose);
  ASSERT_TRUE(linear.ok());
  EXPECT_TRUE(linear->correct) << linear->error;
}

TEST(SimEvaluator, Tf32LibraryGemmIsFasterAndJudgedAgainstTheTolerance) {
  SimEvaluator ev(h200());
  const Task& t = task("L2_081");  // linear + 6 elementwise ops
  Plan fp32 = must_generate(t, {{"gemm.impl", "library"}});
  Plan tf32 = must_generate(t, {{"gemm.impl", "library"}, {"gemm.tensor_cores", "tf32"}});
  EvalRequest loose = request(SizeName::kFull);
  EvalRequest strict = loose;
  strict.strict = true;
  Result<EvalResult> a = ev.evaluate(t, fp32, loose);
  Result<EvalResult> b = ev.evaluate(t, tf32, loose);
  Result<EvalResult> c = ev.evaluate(t, tf32, strict);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_TRUE(a->correct) << a->error;
  EXPECT_TRUE(b->correct) << b->error;
  EXPECT_FALSE(a->decoy);  // the epilogue is the plan's own kernel
  EXPECT_GT(b->speedup, a->speedup);
  EXPECT_FALSE(c->correct);
  EXPECT_NE(c->error.find("library step linear: tf32 precision"), std::string::npos) << c->error;
  EXPECT_TRUE(ev.evaluate(t, fp32, strict)->correct);
}

// 16-bit products: bf16 rounds its operands 8x coarser than tf32, so its error near zero outputs is
// 8x tf32's; fp16 rounds as tf32 but its library output overflows past 65504. Both run at the
// 16-bit tensor peak, faster than tf32.
TEST(SimEvaluator, HalfPrecisionProductsAreJudgedByTheirRoundingAndRange) {
  SimEvaluator ev(h200());
  EvalRequest loose = request(SizeName::kFull);
  EvalRequest strict = loose;
  strict.strict = true;
  auto eval = [&](const char* id, const char* impl, const char* precision, const EvalRequest& req) {
    Result<EvalResult> r =
        ev.evaluate(task(id), must_generate(task(id), {{"gemm.impl", impl}, {"gemm.tensor_cores", precision}}), req);
    VINCI_REQUIRE(r.ok(), r.status().to_string());
    return *r;
  };
  for (const char* impl : {"generated", "library"}) {
    SCOPED_TRACE(impl);
    // A Linear (small weights): bf16 and fp16 pass the default tolerance, fail the strict one.
    for (const char* precision : {"bf16", "fp16"}) {
      EvalResult a = eval("L2_081", impl, precision, loose);
      EXPECT_TRUE(a.correct) << precision << ": " << a.error;
      EvalResult b = eval("L2_081", impl, precision, strict);
      EXPECT_FALSE(b.correct) << precision;
      EXPECT_NE(b.error.find(std::string(precision) + " precision"), std::string::npos) << b.error;
      // The generated wmma kernel is no slower than its TF32 one (its staging through shared
      // memory bounds it here).
      if (std::string(impl) == "generated") {
        EXPECT_GE(a.speedup, eval("L2_081", impl, "tf32", loose).speedup);
      }
      // The library's 16-bit product runs at 2.3x TF32's rate but casts its FP32 operands first,
      // the Linear's weight at every call: as on the H200, faster where the product dominates
      // (L2_040: 1183 against 1546 us), slower where the weight is large and the batch small
      // (L2_059's 32768 x 32768 weight, batch 128: 2069 against 1179 us).
      if (std::string(impl) == "library") {
        EXPECT_GT(eval("L2_040", impl, precision, loose).speedup, eval("L2_040", impl, "tf32", loose).speedup);
        EXPECT_LT(eval("L2_059", impl, precision, loose).speedup, eval("L2_059", impl, "tf32", loose).speedup);
      }
    }
    // Two unit-scale inputs with K = 64: tf32 and fp16 pass, bf16's 8x coarser rounding does not.
    EXPECT_TRUE(eval("L1_007", impl, "fp16", loose).correct);
    EvalResult bf16 = eval("L1_007", impl, "bf16", loose);
    EXPECT_FALSE(bf16.correct);
    EXPECT_NE(bf16.error.find("bf16 precision: expected largest |error|"), std::string::npos) << bf16.error;
  }
  // A matrix-vector product with K = 1M: the library's fp16 output overflows (sums near K/3).
  EvalResult fp16 = eval("L1_004", "library", "fp16", loose);
  EXPECT_FALSE(fp16.correct);
  EXPECT_NE(fp16.error.find("overflow fp16"), std::string::npos) << fp16.error;
  EXPECT_TRUE(eval("L1_004", "library", "tf32", loose).correct);
}

// What follows a 16-bit product decides its verdict, as on the H200 (h200_gemm_16bit.jsonl): a
// BatchNorm or GroupNorm right after a Linear divides by the outputs' spread and fails BF16
// (L2_033, L2_041: max |error| 0.019-0.039) where FP16's 8x finer rounding passes; a bias added
// before the norm brings a spread of its own (L2_094 passes); a softmax after the product (L2_066,
// the attention of L3_043) or a min over the normalized row (L2_075) passes.
TEST(SimEvaluator, NormalizationAfterA16BitProductDividesByTheSpread) {
  SimEvaluator ev(h200());
  EvalRequest loose = request(SizeName::kFull);
  auto correct = [&](const char* id, const char* impl, const char* precision) {
    Result<EvalResult> r =
        ev.evaluate(task(id), must_generate(task(id), {{"gemm.impl", impl}, {"gemm.tensor_cores", precision}}), loose);
    VINCI_REQUIRE(r.ok(), r.status().to_string());
    return r->correct;
  };
  for (const char* impl : {"generated", "library"}) {
    SCOPED_TRACE(impl);
    for (const char* id : {"L2_033", "L2_041", "L2_030", "L2_062"}) {
      EXPECT_FALSE(correct(id, impl, "bf16")) << id;
      EXPECT_TRUE(correct(id, impl, "fp16")) << id;
      EXPECT_TRUE(correct(id, impl, "tf32")) << id;
    }
    for (const char* id : {"L2_094", "L2_037", "L2_066", "L2_084", "L2_075", "L3_043", "L3_046"})
      EXPECT_TRUE(correct(id, impl, "bf16")) << id;
  }
}

TEST(SimEvaluator, RacesFail) {
  SimEvaluator ev(h200());
  const Task& t = task("L1_023");
  Plan racy = must_generate(t, {{"row.strategy", "block_tree"}, {"row.sync", "warp_synchronous"}});
  ASSERT_FALSE(racy.kernels.at(0).verdict.guaranteed);
  Result<EvalResult> r = ev.evaluate(t, racy, request(SizeName::kFull));
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->correct);
  EXPECT_NE(r->error.find("race"), std::string::npos) << r->error;
  Plan synced = must_generate(t, {{"row.strategy", "block_tree"}, {"row.sync", "full"}});
  EXPECT_TRUE(ev.evaluate(t, synced, request(SizeName::kFull))->correct);
}

TEST(SimEvaluator, LibraryOnlyPlansAreDecoysOnEveryTask) {
  SimEvaluator ev(h200());
  const Task& relu = task("L1_019");
  Result<Plan> eager = eager_plan(relu);
  ASSERT_TRUE(eager.ok());
  Result<EvalResult> r = ev.evaluate(relu, *eager, request(SizeName::kFull));
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->decoy);
  EXPECT_EQ(r->time_coverage, 0.0);
  ASSERT_FALSE(r->flags.empty());
  EXPECT_NE(r->flags[0].find("decoy"), std::string::npos);
  // A convolution has no generated kernel, and its library plan is still no solution: returning
  // the reference's own calls earns nothing (KernelGYM's rule), though it is correct at 1.0x.
  const Task& conv = task("L1_054");
  Result<Plan> conv_plan = default_plan(conv);
  ASSERT_TRUE(conv_plan.ok());
  ASSERT_TRUE(conv_plan->library_only());
  Result<EvalResult> c = ev.evaluate(conv, *conv_plan, request(SizeName::kFull));
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c->decoy);
  EXPECT_TRUE(c->correct);
  EXPECT_NEAR(c->speedup, 1.0, 1e-12);
}

TEST(SimEvaluator, SpeedupPastTheRooflineIsFlagged) {
  SimEvaluator ev(h200());
  const Task& t = task("L1_019");
  Plan honest = must_generate(t, {});
  Result<EvalResult> h = ev.evaluate(t, honest, request(SizeName::kFull));
  ASSERT_TRUE(h.ok());
  EXPECT_TRUE(h->flags.empty());
  // A plan that declares it moves almost nothing: the model believes its cost, the bound does not.
  Plan liar = honest;
  liar.kernels[0].cost.bytes_read = "4";
  liar.kernels[0].cost.bytes_written = "4";
  Result<EvalResult> l = ev.evaluate(t, liar, request(SizeName::kFull));
  ASSERT_TRUE(l.ok());
  ASSERT_EQ(l->flags.size(), 1u);
  EXPECT_NE(l->flags[0].find("speedup past roofline"), std::string::npos) << l->flags[0];
}

TEST(SimEvaluator, MalformedPlansDoNotCompile) {
  SimEvaluator ev(h200());
  const Task& t = task("L1_019");
  Plan plan = must_generate(t, {});
  plan.kernels[0].source = "extern \"C\" void " + plan.kernels[0].name + "() {}";  // not a kernel
  Result<EvalResult> r = ev.evaluate(t, plan, request(SizeName::kFull));
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->compiled);
  EXPECT_FALSE(r->correct);
  EXPECT_NE(r->compile_log.find("__global__"), std::string::npos);
  EXPECT_FALSE(r->compile_log_address.is_zero());
  EXPECT_FALSE(r->reference_times_us.empty());
  // A plan for another task is the caller's error, not the candidate's.
  EXPECT_FALSE(ev.evaluate(task("L1_020"), must_generate(t, {}), request(SizeName::kFull)).ok());
}

// The hostile plans the live evaluator must refuse to launch or cannot allocate
// (tests/gpu/hostile/): the sim refuses them in the same words.
TEST(SimEvaluator, RefusesLaunchesAndBuffersTheDeviceWouldRefuse) {
  std::ifstream in(std::string(VINCI_SOURCE_DIR) + "/tests/gpu/hostile/hostile_plans.json");
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json j = nlohmann::json::parse(text.str());
  SimEvaluator ev(h200());
  int checked = 0;
  for (const auto& e : j) {
    std::string expect = e.at("expect").get<std::string>();
    if (expect != "launch_refused" && expect != "out_of_memory" && expect != "invalid_plan") continue;
    std::string name = e.at("name").get<std::string>();
    Result<Plan> p = plan_from_json(e.at("plan"));
    ASSERT_TRUE(p.ok()) << name << ": " << p.status().to_string();
    p->origin = "codegen";  // no compile: the launch and the buffers are what is judged here
    const Task& t = task(p->task_id);
    Result<EvalResult> r = ev.evaluate(t, *p, request(SizeName::kSmall));
    if (expect == "invalid_plan") {  // the grid's size expression cannot be evaluated: refused with the plan
      ASSERT_TRUE(r.ok()) << name << ": " << r.status().to_string();
      EXPECT_FALSE(r->compiled) << name;
      EXPECT_FALSE(r->correct) << name;
      EXPECT_NE(std::find(r->flags.begin(), r->flags.end(), "rejected: invalid_plan"), r->flags.end()) << name;
      EXPECT_NE(r->compile_log.find("steps[0].grid[0]: size expression 'B*D*B*D*B*D*B*D*B*D': overflows 64 bits"),
                std::string::npos)
          << r->compile_log;
      ++checked;
      continue;
    }
    ASSERT_TRUE(r.ok()) << name << ": " << r.status().to_string();
    EXPECT_FALSE(r->correct) << name;
    EXPECT_TRUE(r->kernel_times_us.empty()) << name;
    if (expect == "launch_refused") {
      EXPECT_NE(r->error.find("launch refused: "), std::string::npos) << name << ": " << r->error;
    } else {
      EXPECT_NE(std::find(r->flags.begin(), r->flags.end(), "rejected: out_of_memory"), r->flags.end())
          << name << ": " << r->error;
    }
    ++checked;
  }
  EXPECT_EQ(checked, 7);
}

TEST(SimEvaluator, LaunchDimensionsAreCheckedBeforeNarrowing) {
  EXPECT_EQ(launch_dims_error({{1, 1, 1}}, {{1, 1, 1}}), "");
  EXPECT_EQ(launch_dims_error({{kMaxGridX, 65535, 65535}}, {{1024, 1, 1}}), "");
  EXPECT_EQ(launch_dims_error({{1, 1, 1}}, {{16, 1, 64}}), "");
  EXPECT_EQ(launch_dims_error({{int64_t{1} << 32, 1, 1}}, {{256, 1, 1}}),
            "grid x = 4294967296 is outside CUDA's limits [1, 2147483647] (invalid configuration argument)");
  EXPECT_EQ(launch_dims_error({{(int64_t{1} << 32) + 1, 1, 1}}, {{256, 1, 1}}),
            "grid x = 4294967297 is outside CUDA's limits [1, 2147483647] (invalid configuration argument)");
  EXPECT_EQ(launch_dims_error({{kMaxGridX + 1, 1, 1}}, {{256, 1, 1}}).substr(0, 18), "grid x = 214748364");
  EXPECT_EQ(launch_dims_error({{1, 65536, 1}}, {{1, 1, 1}}),
            "grid y = 65536 is outside CUDA's limits [1, 65535] (invalid configuration argument)");
  EXPECT_EQ(launch_dims_error({{1, 1, 0}}, {{1, 1, 1}}),
            "grid z = 0 is outside CUDA's limits [1, 65535] (invalid configuration argument)");
  EXPECT_EQ(launch_dims_error({{1, 1, 1}}, {{1025, 1, 1}}),
            "block x = 1025 is outside CUDA's limits [1, 1024] (invalid configuration argument)");
  EXPECT_EQ(launch_dims_error({{1, 1, 1}}, {{1, 1, 65}}),
            "block z = 65 is outside CUDA's limits [1, 64] (invalid configuration argument)");
  EXPECT_EQ(launch_dims_error({{1, 1, 1}}, {{-(int64_t{1} << 32) + 256, 1, 1}}).substr(0, 10), "block x = ");
  EXPECT_EQ(launch_dims_error({{1, 1, 1}}, {{64, 32, 1}}),
            "block 64x32x1 = 2048 threads, more than CUDA's 1024 per block (invalid configuration argument)");
}

TEST(SimEvaluator, BuffersPastTheDeviceMemoryAreOutOfMemory) {
  SimEvaluator ev(h200());
  const Task& t = task("L1_019");
  Plan plan = must_generate(t, {});
  PlanBuffer huge;
  huge.name = "scratch";
  huge.role = "intermediate";
  huge.dtype = "f32";
  // 10^22 elements: each dimension fits in 64 bits, their product does not.
  huge.shape = {"100000000000", "100000000000"};
  plan.buffers.push_back(huge);
  Result<EvalResult> r = ev.evaluate(t, plan, request(SizeName::kSmall));
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_FALSE(r->correct);
  EXPECT_EQ(r->error,
            "buffer scratch: out of memory: shape [100000000000, 100000000000]: the element count overflows 64 bits");
  EXPECT_NE(std::find(r->flags.begin(), r->flags.end(), "rejected: out_of_memory"), r->flags.end());
  // In 64 bits but past the profile's memory.
  plan.buffers.back().shape = {"B", "40000000000"};
  r = ev.evaluate(t, plan, request(SizeName::kSmall));
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_FALSE(r->correct);
  EXPECT_EQ(r->error, "buffer scratch: out of memory: 1280000000000 bytes, more than the device's 150754820096");
  // Within it: the plan is as correct as without the buffer.
  plan.buffers.back().shape = {"B", "1000"};
  r = ev.evaluate(t, plan, request(SizeName::kSmall));
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_TRUE(r->correct) << r->error;
}

// The sim compiles every plan that is not the generator's own: a kernel that does not compile is
// not scored correct and fast.
TEST(SimEvaluator, CompilesPlansThatAreNotTheGeneratorsOwn) {
  SimEvaluator ev(h200());
  const Task& t = task("L1_019");
  Plan own = must_generate(t, {});
  Result<EvalResult> r = ev.evaluate(t, own, request(SizeName::kSmall));
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_TRUE(r->compiled);
  EXPECT_TRUE(r->correct) << r->error;
  EXPECT_EQ(r->settings.count("nvrtc"), 0u) << "the generator's own plans are not compiled again";

  // The same kernel with a syntax error, claiming to be the generator's: compiled, and refused.
  Plan broken = own;
  std::string& src = broken.kernels[0].source;
  size_t brace = src.rfind('}');
  ASSERT_NE(brace, std::string::npos);
  src.insert(brace, "  this is not C++;\n");
  r = ev.evaluate(t, broken, request(SizeName::kSmall));
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_FALSE(r->compiled);
  EXPECT_FALSE(r->correct);
  EXPECT_EQ(r->speedup, 0);
  EXPECT_TRUE(r->kernel_times_us.empty());
  EXPECT_NE(r->compile_log.find("kernel " + own.kernels[0].name + ": " + own.kernels[0].name +
                                ".cu does not compile for sm_90"),
            std::string::npos)
      << r->compile_log;
  EXPECT_EQ(r->error.rfind("compile: kernel ", 0), 0u) << r->error;
  EXPECT_EQ(r->settings.at("nvrtc"), nvrtc_version() + " sm_90");
  // Deterministic: a second evaluation (the failure cached) gives the same record.
  Result<EvalResult> again = ev.evaluate(t, broken, request(SizeName::kSmall));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *r);
  SimEvaluator fresh(h200());
  Result<EvalResult> other = fresh.evaluate(t, broken, request(SizeName::kSmall));
  ASSERT_TRUE(other.ok());
  EXPECT_EQ(*other, *r) << other->compile_log << "\n---\n"
                        << r->compile_log << "\n"
                        << other->error << "\n"
                        << r->error;

  // A hand-written plan that compiles is priced as before, with the NVRTC version recorded.
  Plan hand = own;
  hand.origin = "hand";
  hand.kernels[0].source = "// written by hand\n" + hand.kernels[0].source;
  r = ev.evaluate(t, hand, request(SizeName::kSmall));
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_TRUE(r->compiled) << r->compile_log;
  EXPECT_TRUE(r->correct) << r->error;
  EXPECT_EQ(r->settings.at("nvrtc"), nvrtc_version() + " sm_90");
}

TEST(SimEvaluator, PlansOverALimitAreRejectedUncompiled) {
  const Task& t = task("L1_019");
  Plan plan = must_generate(t, {});
  SimEvaluator defaults(h200());
  Result<EvalResult> r = defaults.evaluate(t, plan, request(SizeName::kSmall));
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->correct);
  EXPECT_EQ(r->settings.count("max_steps"), 0u) << "limits at their default are not recorded";

  auto with = [&](PlanLimits limits, const Plan& p) {
    SimEvaluatorOptions o;
    o.limits = limits;
    SimEvaluator ev(h200(), o);
    Result<EvalResult> e = ev.evaluate(t, p, request(SizeName::kSmall));
    EXPECT_TRUE(e.ok()) << e.status().to_string();
    return e.ok() ? *e : EvalResult();
  };
  PlanLimits steps;
  steps.max_steps = 1;
  Plan two = plan;
  two.steps.push_back(two.steps[0]);
  EvalResult e = with(steps, plan);
  EXPECT_TRUE(e.correct) << e.error;
  EXPECT_EQ(e.settings.at("max_steps"), "1");
  e = with(steps, two);
  EXPECT_FALSE(e.compiled);
  EXPECT_FALSE(e.correct);
  EXPECT_EQ(e.flags, std::vector<std::string>{"rejected: over_limit"});
  EXPECT_EQ(e.compile_log, "plan over a limit: steps: 2 is over the limit max_steps = 1");
  EXPECT_EQ(e.error, "compile: plan over a limit: steps: 2 is over the limit max_steps = 1");

  PlanLimits kernels;
  kernels.max_kernels = 1;
  Plan extra = plan;
  extra.kernels.push_back(extra.kernels[0]);
  extra.kernels.back().name += "_copy";
  EXPECT_EQ(with(kernels, extra).compile_log, "plan over a limit: kernels: 2 is over the limit max_kernels = 1");

  PlanLimits source;
  source.max_kernel_source_bytes = 64;
  e = with(source, plan);
  EXPECT_EQ(e.compile_log, "plan over a limit: kernel '" + plan.kernels[0].name +
                               "': source bytes: " + std::to_string(plan.kernels[0].source.size()) +
                               " is over the limit max_kernel_source_bytes = 64");
  PlanLimits total;
  total.max_plan_source_bytes = static_cast<int64_t>(plan.kernels[0].source.size()) + 1;
  EXPECT_TRUE(with(total, plan).correct);
  EXPECT_EQ(with(total, extra).compile_log.rfind("plan over a limit: source bytes of all kernels: ", 0), 0u);

  // A model's plan is checked before it is matched to the generator's.
  Plan llm = two;
  llm.origin = "llm";
  e = with(steps, llm);
  EXPECT_FALSE(e.correct);
  EXPECT_EQ(e.flags, std::vector<std::string>{"rejected: over_limit"});
  EXPECT_EQ(e.trials.size(), 5u);
}

// The default limits admit every plan the generator writes and every eager-equivalent plan.
TEST(SimEvaluator, DefaultLimitsAdmitEveryGeneratedAndEagerPlan) {
  PlanLimits defaults;
  size_t most_steps = 0, most_kernels = 0, most_source = 0;
  for (const Task& t : simtest::suite().tasks) {
    std::vector<std::map<std::string, std::string>> settings = {{}};
    KnobSpace space = knob_space(t);
    for (const auto& k : space.knobs)
      if (k.name == "fusion")
        for (const auto& c : k.choices) settings.push_back({{"fusion", c}});
    for (size_t which = 0; which <= settings.size(); ++which) {
      Result<Plan> p = which == settings.size()  ? eager_plan(t)
                       : settings[which].empty() ? default_plan(t)
                                                 : generate_plan(t, settings[which]);
      if (!p.ok()) continue;
      EXPECT_EQ(plan_limit_error(*p, defaults), "") << t.id;
      size_t source = 0;
      for (const auto& k : p->kernels) source += k.source.size();
      most_steps = std::max(most_steps, p->steps.size());
      most_kernels = std::max(most_kernels, p->kernels.size());
      most_source = std::max(most_source, source);
    }
  }
  std::printf("largest plans: %zu steps, %zu kernels, %zu source bytes\n", most_steps, most_kernels, most_source);
}

TEST(EvalResult, RoundTripsThroughMeasurement) {
  SimEvaluator ev(h200());
  const Task& t = task("L1_019");
  std::vector<EvalResult> records;
  records.push_back(*ev.evaluate(t, must_generate(t, {}), request(SizeName::kFull)));
  records.push_back(*ev.evaluate(t, must_generate(t, {{"ew.tail", "none"}}), request(SizeName::kSmall)));
  EvalResult bad = records[0];
  bad.compiled = false;
  bad.compile_log = "line 3: error: expected ';'";
  bad.flags = {"b", "a", "a"};
  bad.finalize();
  EXPECT_EQ(bad.flags, (std::vector<std::string>{"a", "b"}));
  records.push_back(bad);
  for (const auto& r : records) {
    capnp::MallocMessageBuilder msg;
    to_measurement(r, msg.initRoot<schema::Measurement>());
    auto reader = msg.getRoot<schema::Measurement>().asReader();
    // Without the object store the compile log's text is not there; its address is.
    Result<EvalResult> back = from_measurement(reader);
    ASSERT_TRUE(back.ok()) << back.status().to_string();
    EXPECT_EQ(back->compile_log_address, r.compile_log_address);
    EvalResult expected = r;
    expected.compile_log.clear();
    EXPECT_TRUE(*back == expected);
    Result<EvalResult> full = from_measurement(reader, [&](const Digest& d) -> Result<std::string> {
      EXPECT_EQ(d, r.compile_log_address);
      return r.compile_log;
    });
    ASSERT_TRUE(full.ok());
    EXPECT_TRUE(*full == r);
    // A store that returns the wrong text is caught.
    if (!r.compile_log.empty()) {
      Result<EvalResult> wrong =
          from_measurement(reader, [](const Digest&) -> Result<std::string> { return std::string("something else"); });
      EXPECT_FALSE(wrong.ok());
    }
  }
  EXPECT_TRUE(eval_result_to_json(records[1])["trials"][0]["maxAbsErr"].is_null());
}

}  // namespace
}  // namespace vinci

namespace vinci {
namespace {

// Every task, random generator settings at both sizes: finite positive times, no roofline flag on
// an honest plan, guaranteed plans always correct, decoys only where kernels could be written.
TEST(SimEvaluator, GeneratedPlansAreCostedAndNeverFlagged) {
  SimEvaluator ev(h200());
  int evaluated = 0;
  for (const auto& t : simtest::suite().tasks) {
    KnobSpace space = knob_space(t);
    Stream s(RngKey::root(5).with("task", t.id));
    for (int i = 0; i < 8; ++i) {
      KnobSetting setting = i == 0 ? default_setting(space) : random_setting(space, s);
      Result<Plan> plan = generate_plan(t, setting);
      ASSERT_TRUE(plan.ok()) << t.id << ": " << plan.status().to_string();
      bool guaranteed = plan->guaranteed();
      for (SizeName size : {SizeName::kSmall, SizeName::kFull}) {
        EvalRequest req = request(size);
        req.samples = 3;
        Result<EvalResult> r = ev.evaluate(t, *plan, req);
        ASSERT_TRUE(r.ok()) << t.id << ": " << r.status().to_string();
        ++evaluated;
        EXPECT_TRUE(r->compiled) << t.id << ": " << r->compile_log;
        EXPECT_TRUE(r->flags.empty() || r->decoy) << t.id << " " << size_name(size) << ": " << r->flags[0];
        EXPECT_GT(r->reference_us, 0) << t.id;
        if (guaranteed) {
          EXPECT_TRUE(r->correct) << t.id << ": " << r->error;
        }
        if (r->correct) {
          EXPECT_TRUE(std::isfinite(r->kernel_us) && r->kernel_us > 0) << t.id;
          EXPECT_GE(r->time_coverage, 0.0);
          EXPECT_LE(r->time_coverage, 1.0);
        }
        EXPECT_EQ(r->decoy, plan->library_only()) << t.id;
      }
    }
  }
  EXPECT_GT(evaluated, 500);
}

// The sim world cannot price a KernelBench module (arbitrary PyTorch): it says so, never correct,
// and records the module's static flags beside the verdict.
TEST(SimEvaluator, AKernelBenchModuleIsNotPriceableAndItsStaticFlagsAreRecorded) {
  const Task& t = task("L1_019");
  const std::string torch_only =
      "import torch\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n"
      "        return torch.relu(x)\n";
  SimEvaluator ev(h200());
  Result<EvalResult> r = ev.evaluate(t, module_plan(t.id, torch_only), request(SizeName::kSmall));
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_FALSE(r->compiled);
  EXPECT_FALSE(r->correct);
  EXPECT_EQ(r->speedup, 0);
  ASSERT_FALSE(r->flags.empty());
  EXPECT_EQ(r->flags.front(), "not_priceable");
  auto has = [&](const std::string& prefix) {
    return std::any_of(r->flags.begin(), r->flags.end(), [&](const std::string& f) { return f.rfind(prefix, 0) == 0; });
  };
  EXPECT_TRUE(has("static: torch_computation: torch.relu")) << nlohmann::json(r->flags).dump();
  EXPECT_TRUE(has("static: missing_backend: cuda")) << nlohmann::json(r->flags).dump();
  EXPECT_NE(r->error.find("KernelBench module"), std::string::npos) << r->error;
  EXPECT_EQ(r->trials.size(), 5u);
  // The same module twice: the same record.
  Result<EvalResult> again = ev.evaluate(t, module_plan(t.id, torch_only), request(SizeName::kSmall));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(eval_result_to_json(*again).dump(), eval_result_to_json(*r).dump());
}

}  // namespace
}  // namespace vinci

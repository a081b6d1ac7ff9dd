// The simulated device's behaviour as a GPU engineer expects it, on the H200 profile.
#include "gpu/sim/sim_model.h"

#include <gtest/gtest.h>

#include <cmath>

#include "tests/gpu/sim_test_util.h"

namespace vinci {
namespace {

using simtest::chain_task;
using simtest::h200;
using simtest::must_generate;
using simtest::predict_us;
using simtest::task;

TEST(SimModel, FusedElementwiseChainBeatsEagerByTheRatioOfBytesMoved) {
  SimModel m(h200());
  const Task& t = chain_task();
  Result<TaskContext> ctx = m.prepare(t, t.size_map(SizeName::kFull));
  ASSERT_TRUE(ctx.ok()) << ctx.status().to_string();
  Plan fused = must_generate(t, {{"fusion", "fused"}});
  Plan unfused = must_generate(t, {{"fusion", "unfused"}});
  Result<PlanPrediction> f = m.predict(*ctx, fused);
  Result<PlanPrediction> u = m.predict(*ctx, unfused);
  ASSERT_TRUE(f.ok() && u.ok()) << f.status().to_string() << u.status().to_string();
  ASSERT_EQ(f->steps.size(), 1u);
  ASSERT_EQ(u->steps.size(), 4u);
  // Eager: 4 ops each read and write the tensor; fused: one read, one write.
  double eager_bytes = 0;
  for (const auto& s : ctx->reference().steps) eager_bytes += s.dram_bytes + s.l2_bytes;
  double fused_bytes = f->steps[0].dram_bytes + f->steps[0].l2_bytes;
  double bytes_ratio = eager_bytes / fused_bytes;
  EXPECT_NEAR(bytes_ratio, 4.0, 1e-9);
  double speedup = ctx->reference().time_us / f->time_us;
  EXPECT_GT(speedup, 0.9 * bytes_ratio) << "reference " << ctx->reference().time_us << " us, fused " << f->time_us;
  EXPECT_LT(speedup, 1.1 * bytes_ratio);
  // One kernel per op moves what eager moves: no faster than eager by more than launch costs.
  EXPECT_NEAR(u->time_us / ctx->reference().time_us, 1.0, 0.05);
  std::printf("fused chain: reference %.1f us, unfused %.1f us, fused %.1f us, speedup %.2f (bytes ratio %.2f)\n",
              ctx->reference().time_us, u->time_us, f->time_us, speedup, bytes_ratio);
}

TEST(SimModel, Float4LoadsBeatScalarLoadsOnABandwidthBoundOp) {
  SimModel m(h200());
  const Task& t = task("L1_019");  // relu on 4096 x 393216 floats: 12.9 GB moved
  double scalar = predict_us(m, t, SizeName::kFull, must_generate(t, {{"ew.vector_width", "1"}}));
  double vec2 = predict_us(m, t, SizeName::kFull, must_generate(t, {{"ew.vector_width", "2"}}));
  double vec4 = predict_us(m, t, SizeName::kFull, must_generate(t, {{"ew.vector_width", "4"}}));
  EXPECT_LT(vec4, vec2);
  EXPECT_LT(vec2, scalar);
  EXPECT_GT(scalar / vec4, 1.15);
  // float4 reaches the measured copy bandwidth but never the datasheet's.
  double bytes = 2.0 * 4096 * 393216 * 4;
  double at_measured = bytes / h200().hbm_bytes_per_s * 1e6;
  EXPECT_GT(vec4, at_measured);
  EXPECT_LT(vec4, 1.05 * at_measured);
  std::printf("relu full: scalar %.1f us, float2 %.1f us, float4 %.1f us (copy bound %.1f us)\n", scalar, vec2, vec4,
              at_measured);
}

TEST(SimModel, TiledTensorCoreGemmBeatsNaiveByOrdersOfMagnitude) {
  SimModel m(h200());
  const Task& t = task("L1_001");  // 4096^3 fp32
  Plan tiled = must_generate(
      t, {{"gemm.tensor_cores", "tf32"}, {"gemm.tile_m", "128"}, {"gemm.tile_n", "128"}, {"gemm.tile_k", "32"}});
  double tc = predict_us(m, t, SizeName::kFull, tiled);
  double naive = predict_us(m, t, SizeName::kFull, simtest::naive_gemm_plan(t, "naive_strided"));
  double coalesced = predict_us(m, t, SizeName::kFull, simtest::naive_gemm_plan(t, "naive"));
  double cuda_core = predict_us(m, t, SizeName::kFull, must_generate(t, {}));
  EXPECT_GT(naive / tc, 100.0);
  EXPECT_GT(coalesced / tc, 10.0);
  EXPECT_LT(coalesced, naive);
  EXPECT_LT(tc, cuda_core);
  // tf32 on wmma cannot pass the tensor peak; the fp32 tiled kernel cannot pass the fp32 peak.
  double flops = 2.0 * 4096 * 4096 * 4096;
  EXPECT_GT(tc, flops / (h200().tf32_peak_flops * h200().wmma_fraction) * 1e6);
  EXPECT_GT(cuda_core, flops / h200().fp32_peak_flops * 1e6);
  std::printf(
      "4096^3 GEMM: naive (lanes on rows) %.0f us, naive (lanes on columns) %.0f us, tiled fp32 %.0f us, "
      "tiled tf32 %.0f us: %.0fx\n",
      naive, coalesced, cuda_core, tc, naive / tc);
}

TEST(SimModel, TinyProblemsAreLaunchBound) {
  SimModel m(h200());
  const Task& t = task("L1_019");
  Plan plan = must_generate(t, {});
  Result<TaskContext> ctx = m.prepare(t, t.size_map(SizeName::kSmall));  // 8 x 1001 floats
  ASSERT_TRUE(ctx.ok());
  Result<PlanPrediction> p = m.predict(*ctx, plan);
  ASSERT_TRUE(p.ok());
  const DeviceProfile& d = h200();
  EXPECT_DOUBLE_EQ(p->time_us, d.kernel_launch_us + d.kernel_floor_us);
  EXPECT_EQ(p->steps[0].bound, StepBound::kFloor);
  // Ten times the data still costs the launch: nothing here is proportional to the work.
  SizeMap bigger = t.size_map(SizeName::kSmall);
  bigger["B"] *= 10;
  Result<TaskContext> ctx10 = m.prepare(t, bigger);
  ASSERT_TRUE(ctx10.ok());
  EXPECT_DOUBLE_EQ(m.predict(*ctx10, plan)->time_us, p->time_us);
  // The eager reference pays PyTorch's dispatch on top: small custom kernels win by launch cost.
  EXPECT_DOUBLE_EQ(ctx->reference().time_us, d.kernel_launch_us + d.library_dispatch_us + d.kernel_floor_us);
}

TEST(SimModel, OnlineSoftmaxSavesAPassOverTwoPass) {
  SimModel m(h200());
  const Task& t = task("L1_023");  // softmax over rows of 393216 floats: rows do not fit in L2
  double online = predict_us(m, t, SizeName::kFull, must_generate(t, {{"row.softmax", "online"}}));
  double two_pass = predict_us(m, t, SizeName::kFull, must_generate(t, {{"row.softmax", "two_pass"}}));
  // Online: 2 reads + 1 write; two-pass: 3 reads + 1 write.
  EXPECT_NEAR(two_pass / online, 4.0 / 3.0, 0.05);
}

TEST(SimModel, OccupancyFollowsTheHopperLimits) {
  SimModel m(h200());
  EXPECT_EQ(m.blocks_per_sm(256, 32, 0), 8);  // 2048 threads per SM
  EXPECT_EQ(m.blocks_per_sm(1024, 32, 0), 2);
  EXPECT_EQ(m.blocks_per_sm(32, 16, 0), 32);           // 32 blocks per SM
  EXPECT_EQ(m.blocks_per_sm(256, 128, 0), 2);          // 65536 registers / (128 x 256)
  EXPECT_EQ(m.blocks_per_sm(256, 33, 0), 6);           // 33 registers round up to 40
  EXPECT_EQ(m.blocks_per_sm(128, 32, 100 * 1024), 2);  // 228 KiB / (100 KiB + 1 KiB reserved)
  EXPECT_EQ(m.blocks_per_sm(2048, 32, 0), 0);          // more threads than a block may have
  EXPECT_EQ(m.blocks_per_sm(128, 32, 300 * 1024), 0);
}

TEST(SimModel, PredictionsAreExactlyRepeatable) {
  SimModel m(h200());
  for (const auto& t : simtest::suite().tasks) {
    Result<Plan> plan = default_plan(t);
    ASSERT_TRUE(plan.ok()) << t.id << ": " << plan.status().to_string();
    for (SizeName size : {SizeName::kSmall, SizeName::kFull}) {
      Result<TaskContext> a = m.prepare(t, t.size_map(size));
      Result<TaskContext> b = m.prepare(t, t.size_map(size));
      ASSERT_TRUE(a.ok() && b.ok()) << t.id << ": " << a.status().to_string();
      Result<PlanPrediction> pa = m.predict(*a, *plan);
      Result<PlanPrediction> pb = m.predict(*b, *plan);
      Result<PlanPrediction> pa2 = m.predict(*a, *plan);  // through the expression cache
      ASSERT_TRUE(pa.ok()) << t.id << ": " << pa.status().to_string();
      EXPECT_EQ(pa->time_us, pb->time_us) << t.id;
      EXPECT_EQ(pa->time_us, pa2->time_us) << t.id;
      EXPECT_GT(pa->time_us, 0) << t.id;
      EXPECT_TRUE(std::isfinite(pa->time_us)) << t.id;
      EXPECT_GE(a->reference().time_us, a->bound().floor_us) << t.id;
    }
  }
}

}  // namespace
}  // namespace vinci

namespace vinci {
namespace {

TEST(SimModel, ThreadPerRowIsCoalescedOnlyForStridedReductions) {
  SimModel m(simtest::h200());
  // sum over dim 1 of [B, D1, D2]: the reduced dim has stride D2.
  const Task& strided = simtest::task("L1_047");
  double per_thread = simtest::predict_us(m, strided, SizeName::kFull,
                                          simtest::must_generate(strided, {{"row.strategy", "thread_per_row"}}));
  double per_block = simtest::predict_us(m, strided, SizeName::kFull,
                                         simtest::must_generate(strided, {{"row.strategy", "block_shuffle"}}));
  EXPECT_LT(per_thread * 2, per_block);
  // mean over the last dim: rows are contiguous, a warp per row reads them coalesced (L1_048
  // reduces dim 1 as KernelBench does; here its mean is moved to the last dim).
  Task contiguous = simtest::task("L1_048");
  contiguous.ops.at(0).attrs["dim"] = 2;
  double t_thread = simtest::predict_us(m, contiguous, SizeName::kFull,
                                        simtest::must_generate(contiguous, {{"row.strategy", "thread_per_row"}}));
  double t_warp = simtest::predict_us(m, contiguous, SizeName::kFull,
                                      simtest::must_generate(contiguous, {{"row.strategy", "warp_shuffle"}}));
  EXPECT_LT(t_warp * 2, t_thread);
  std::printf(
      "strided sum: thread per row %.0f us, block per row %.0f us; contiguous mean: warp %.0f us, thread %.0f us\n",
      per_thread, per_block, t_warp, t_thread);
}

TEST(SimModel, InnerTileReadsAStridedReductionAtTheBandwidthFloor) {
  SimModel m(simtest::h200());
  // sum over dim 1 of [128, 4096, 4095]: 8.6 GB read once; lanes take neighbouring rows.
  const Task& strided = simtest::task("L1_047");
  const double bytes = 128.0 * 4096 * 4095 * 4;
  const double floor_us = bytes / simtest::h200().hbm_bytes_per_s * 1e6;
  auto at = [&](const Task& t, const std::string& strategy) {
    return simtest::predict_us(m, t, SizeName::kFull, simtest::must_generate(t, {{"row.strategy", strategy}}));
  };
  double tile = at(strided, "inner_tile"), per_thread = at(strided, "thread_per_row");
  EXPECT_LE(tile, 1.25 * floor_us);
  EXPECT_GE(tile, floor_us);
  EXPECT_LT(tile, per_thread);
  // Contiguous rows (inner = 1): one live lane of 32, the rest idle: far slower than a warp per row.
  Task contiguous = simtest::task("L1_048");
  contiguous.ops.at(0).attrs["dim"] = 2;
  double t_tile = at(contiguous, "inner_tile"), t_warp = at(contiguous, "warp_shuffle");
  EXPECT_LT(t_warp * 4, t_tile);
  std::printf(
      "strided sum: floor %.0f us, inner tile %.0f us, thread per row %.0f us; contiguous mean: tile %.0f us, "
      "warp %.0f us\n",
      floor_us, tile, per_thread, t_tile, t_warp);
}

}  // namespace
}  // namespace vinci

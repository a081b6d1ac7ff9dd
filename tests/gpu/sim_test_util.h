// Shared fixtures of the simulated-device tests: the suite, the H200 profile, hand-built plans.
#ifndef VINCI_TESTS_GPU_SIM_TEST_UTIL_H_
#define VINCI_TESTS_GPU_SIM_TEST_UTIL_H_

#include <gtest/gtest.h>

#include <string>

#include "gpu/codegen/codegen.h"
#include "gpu/sim/device_profile.h"
#include "gpu/sim/sim_model.h"
#include "gpu/task.h"

namespace vinci {
namespace simtest {

inline const TaskSuite& suite() {
  static TaskSuite s = [] {
    Result<TaskSuite> r = load_task_suite(default_task_dir());
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    return r.ok() ? *r : TaskSuite();
  }();
  return s;
}

inline const Task& task(const std::string& id) {
  const Task* t = suite().find(id);
  VINCI_REQUIRE(t != nullptr, "no task " << id);
  return *t;
}

// The datasheet H200 (the figures before any fit): tests of the model's equations check them
// against these figures, which a refit of the default profile does not move.
inline const DeviceProfile& h200() {
  static DeviceProfile p = [] {
    Result<DeviceProfile> r = load_device_profile(profile_path("h200_datasheet"));
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    return r.ok() ? *r : DeviceProfile();
  }();
  return p;
}

// A task written here: a chain of elementwise ops on a large tensor, so fusion is the only
// difference between plans (the suite's chains follow a GEMM or a convolution).
inline const Task& chain_task() {
  static Task t = [] {
    const char* text = R"(
[[task]]
id = "T_chain"
level = 1
name = "elementwise_chain"
family = "elementwise"
description = "y = tanh(relu(x) * 2 + 1) on x of shape [B, D]."
sizes.full = { B = 4096, D = 393216 }
sizes.small = { B = 8, D = 1001 }
inputs = [{ name = "x", shape = ["B", "D"] }]
ops = [
  { op = "relu", in = ["x"], out = "a" },
  { op = "mul_scalar", in = ["a"], out = "b", value = 2.0 },
  { op = "add_scalar", in = ["b"], out = "c", value = 1.0 },
  { op = "tanh", in = ["c"], out = "y" },
]
output = "y"
)";
    Result<std::vector<Task>> r = parse_task_file("sim_test_chain.toml", text);
    VINCI_REQUIRE(r.ok(), r.status().to_string());
    return r->at(0);
  }();
  return t;
}

inline Plan must_generate(const Task& t, const std::map<std::string, std::string>& knobs) {
  Result<Plan> p = generate_plan(t, knobs);
  VINCI_REQUIRE(p.ok(), p.status().to_string());
  return *p;
}

// A GEMM without shared-memory tiling, written by hand as an LLM might: one thread per output.
// algorithm "naive_strided": consecutive lanes take consecutive rows (the classic first kernel,
// uncoalesced A); "naive": consecutive lanes take consecutive columns.
inline Plan naive_gemm_plan(const Task& t, const std::string& algorithm) {
  Plan p;
  p.task_id = t.id;
  p.origin = "hand";
  p.buffers = {
      {"A", "input", "f32", {"N", "N"}}, {"B", "input", "f32", {"N", "N"}}, {"C", "output", "f32", {"N", "N"}}};
  PlanKernel k;
  k.name = "naive_gemm";
  k.source =
      "extern \"C\" __global__ void naive_gemm(const float* A, const float* B, float* C, long long N) {\n"
      "  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n"
      "  if (i >= N * N) return;\n"
      "  long long r = i % N, c = i / N;  // lanes walk rows: A is read with stride N\n"
      "  float acc = 0.f;\n"
      "  for (long long k = 0; k < N; ++k) acc += A[r * N + k] * B[k * N + c];\n"
      "  C[r * N + c] = acc;\n"
      "}\n";
  k.family = KernelFamily::kGemm;
  k.fused_ops = {"matmul"};
  k.fused_values = {"C"};
  k.block_threads = 256;
  k.algorithm = algorithm;
  k.cost = {"N*N", "8*N*N", "4*N*N", "2*N*N*N"};
  p.kernels = {k};
  PlanStep s;
  s.kind = StepKind::kKernel;
  s.kernel = "naive_gemm";
  s.grid = {"ceil_div(N*N, 256)", "1", "1"};
  s.block = {"256", "1", "1"};
  s.args = {{"A", ""}, {"B", ""}, {"C", ""}, {"", "N"}};
  p.steps = {s};
  p.output = "C";
  return p;
}

inline double predict_us(const SimModel& m, const Task& t, SizeName size, const Plan& plan) {
  Result<TaskContext> ctx = m.prepare(t, t.size_map(size));
  VINCI_REQUIRE(ctx.ok(), ctx.status().to_string());
  Result<PlanPrediction> p = m.predict(*ctx, plan);
  VINCI_REQUIRE(p.ok(), p.status().to_string());
  return p->time_us;
}

}  // namespace simtest
}  // namespace vinci

#endif  // VINCI_TESTS_GPU_SIM_TEST_UTIL_H_

// Plans: canonical serialization, parsing errors, knob space, the generator's verdicts and
// cost formulas (no NVRTC here; tests/gpu/compile_test.cc compiles).
#include "gpu/plan.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "core/rng.h"
#include "gpu/codegen/codegen.h"
#include "gpu/expr.h"
#include "gpu/shapes.h"
#include "tests/gpu/sim_test_util.h"

namespace vinci {
namespace {

using simtest::suite;
using simtest::task;

// Rebuilds a JSON value with every object's keys in reverse order (nlohmann::ordered_json keeps
// insertion order), so the text differs from the canonical one in key order only.
nlohmann::ordered_json reversed(const nlohmann::json& j) {
  if (j.is_object()) {
    nlohmann::ordered_json o = nlohmann::ordered_json::object();
    std::vector<std::string> keys;
    for (auto it = j.begin(); it != j.end(); ++it) keys.push_back(it.key());
    for (auto k = keys.rbegin(); k != keys.rend(); ++k) o[*k] = reversed(j.at(*k));
    return o;
  }
  if (j.is_array()) {
    nlohmann::ordered_json a = nlohmann::ordered_json::array();
    for (const auto& e : j) a.push_back(reversed(e));
    return a;
  }
  return nlohmann::ordered_json::parse(j.dump());
}

TEST(Plan, CanonicalBytesAreStableUnderKeyOrderAndWhitespace) {
  Result<Plan> p = default_plan(task("L2_037"));
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  std::string canonical = canonical_bytes(*p);
  std::string shuffled = reversed(plan_to_json(*p)).dump(2);
  ASSERT_NE(shuffled, canonical);
  Result<Plan> back = parse_plan(shuffled);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(canonical_bytes(*back), canonical);
  EXPECT_EQ(plan_address(*back), plan_address(*p));
  // Buffers and kernels are sets: their order in the text does not matter either.
  Plan permuted = *p;
  std::reverse(permuted.buffers.begin(), permuted.buffers.end());
  EXPECT_EQ(plan_address(permuted), plan_address(*p));
}

TEST(Plan, AddressesSeparateDifferentPlansAndKinds) {
  const Task& t = task("L1_023");
  Result<Plan> a = generate_plan(t, std::map<std::string, std::string>{{"row.softmax", "online"}});
  Result<Plan> b = generate_plan(t, std::map<std::string, std::string>{{"row.softmax", "two_pass"}});
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(plan_address(*a), plan_address(*b));
  EXPECT_NE(kernel_source_address(a->kernels[0].source), hash_tagged("plan", a->kernels[0].source));
  Result<Plan> again = generate_plan(t, std::map<std::string, std::string>{{"row.softmax", "online"}});
  EXPECT_EQ(plan_address(*a), plan_address(*again));  // the generator is deterministic
}

TEST(Plan, ParseErrorsNameTheJsonPath) {
  Result<Plan> p = default_plan(task("L1_019"));
  ASSERT_TRUE(p.ok());
  nlohmann::json j = plan_to_json(*p);
  j["steps"][0]["grid"][1] = "N +";
  Result<Plan> bad = plan_from_json(j);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("steps[0].grid[1]"), std::string::npos) << bad.status().message();

  j = plan_to_json(*p);
  j["steps"][0]["args"][0] = {{"pointer", "x"}};
  bad = plan_from_json(j);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("steps[0].args[0]"), std::string::npos) << bad.status().message();

  j = plan_to_json(*p);
  j["buffers"][0]["dtype"] = "f16";
  bad = plan_from_json(j);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("dtype"), std::string::npos);
  EXPECT_FALSE(parse_plan("{not json").ok());

  // The kernel family is a closed set: its JSON names round-trip, anything else is refused.
  j = plan_to_json(*p);
  EXPECT_EQ(j["kernels"][0]["family"], "elementwise");
  Result<Plan> back = plan_from_json(j);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->kernels[0].family, KernelFamily::kElementwise);
  j["kernels"][0]["family"] = "softmax";
  bad = plan_from_json(j);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("kernels[0].family"), std::string::npos) << bad.status().message();
  EXPECT_NE(bad.status().message().find("found 'softmax'"), std::string::npos) << bad.status().message();
  j["kernels"][0].erase("family");  // absent: a kernel not from the generator
  back = plan_from_json(j);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->kernels[0].family, KernelFamily::kCustom);
}

TEST(Plan, ValidationCatchesUndeclaredBuffersAndMissingKernels) {
  const Task& t = task("L1_019");
  Result<Plan> p = default_plan(t);
  ASSERT_TRUE(p.ok());
  Plan q = *p;
  q.steps[0].args[0].buffer = "ghost";
  EXPECT_FALSE(validate_plan(q, t).ok());
  q = *p;
  q.steps[0].kernel = "nope";
  EXPECT_FALSE(validate_plan(q, t).ok());
  q = *p;
  q.output = "nothing";
  EXPECT_FALSE(validate_plan(q, t).ok());
  EXPECT_TRUE(validate_plan(*p, t).ok());
}

TEST(Plan, EagerPlanIsLibraryOnlyAndCodegenPlansAreNot) {
  for (const Task& t : suite().tasks) {
    Result<Plan> e = eager_plan(t);
    ASSERT_TRUE(e.ok()) << t.id << ": " << e.status().to_string();
    EXPECT_TRUE(e->library_only()) << t.id;
    EXPECT_EQ(e->steps.size(), t.ops.size()) << t.id;
  }
  for (const char* id : {"L1_001", "L1_019", "L1_023", "L1_040", "L2_012", "L3_001", "L3_043"}) {
    Result<Plan> p = default_plan(task(id));
    ASSERT_TRUE(p.ok()) << id;
    EXPECT_FALSE(p->library_only()) << id;
  }
}

TEST(Plan, FusionPutsTheEpilogueIntoTheGemmKernel) {
  const Task& t = task("L2_081");  // linear + 6 elementwise ops
  Result<Plan> fused = generate_plan(t, std::map<std::string, std::string>{{"fusion", "fused"}});
  Result<Plan> unfused = generate_plan(t, std::map<std::string, std::string>{{"fusion", "unfused"}});
  ASSERT_TRUE(fused.ok() && unfused.ok());
  ASSERT_EQ(fused->kernels.size(), 1u);
  EXPECT_EQ(fused->kernels[0].fused_ops,
            (std::vector<std::string>{"linear", "sigmoid", "mul", "div_scalar", "clamp", "tanh", "clamp"}));
  EXPECT_EQ(unfused->kernels.size(), 7u);
  // Fusion removes the intermediates: only the output is a non-input, non-weight buffer.
  int intermediates = 0;
  for (const auto& b : fused->buffers) intermediates += b.role == "intermediate";
  EXPECT_EQ(intermediates, 0);
}

TEST(Plan, LibraryGemmRunsTheProductInTheLibraryAndOneEpilogueKernel) {
  const Task& t = task("L2_081");  // linear + 6 elementwise ops
  Result<Plan> lib = generate_plan(t, std::map<std::string, std::string>{{"gemm.impl", "library"}});
  ASSERT_TRUE(lib.ok()) << lib.status().to_string();
  ASSERT_EQ(lib->steps.size(), 2u);
  EXPECT_EQ(lib->steps[0].kind, StepKind::kLibrary);
  EXPECT_EQ(lib->steps[0].op.op, "linear");
  EXPECT_EQ(lib->steps[0].precision, Precision::kFp32);
  ASSERT_EQ(lib->kernels.size(), 1u);
  EXPECT_EQ(lib->kernels[0].family, KernelFamily::kElementwise);
  EXPECT_EQ(lib->kernels[0].fused_ops,
            (std::vector<std::string>{"sigmoid", "mul", "div_scalar", "clamp", "tanh", "clamp"}));
  // The epilogue reads the product and writes only the output.
  const std::string& product = lib->steps[0].op.outputs[0];
  std::vector<std::string> args;
  for (const PlanArg& a : lib->steps[1].args)
    if (!a.buffer.empty()) args.push_back(a.buffer);
  EXPECT_EQ(args.front(), product);
  EXPECT_EQ(std::count(args.begin(), args.end(), product), 1);
  EXPECT_EQ(args.back(), t.output);
  EXPECT_FALSE(lib->library_only());
  EXPECT_TRUE(validate_plan(*lib, t).ok());
  // fp32 is the default and stays out of the JSON, so the address of every earlier plan holds.
  EXPECT_FALSE(plan_to_json(*lib)["steps"][0].contains("precision"));

  Result<Plan> tf32 =
      generate_plan(t, std::map<std::string, std::string>{{"gemm.impl", "library"}, {"gemm.tensor_cores", "tf32"}});
  ASSERT_TRUE(tf32.ok());
  EXPECT_EQ(tf32->steps[0].precision, Precision::kTf32);
  EXPECT_EQ(plan_to_json(*tf32)["steps"][0]["precision"], "tf32");
  EXPECT_NE(plan_address(*tf32), plan_address(*lib));
  Result<Plan> back = parse_plan(canonical_bytes(*tf32));
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->steps[0].precision, Precision::kTf32);
  EXPECT_EQ(plan_address(*back), plan_address(*tf32));

  // A GEMM with nothing after it is one library step.
  Result<Plan> bare = generate_plan(task("L1_001"), std::map<std::string, std::string>{{"gemm.impl", "library"}});
  ASSERT_TRUE(bare.ok());
  EXPECT_TRUE(bare->library_only());
  EXPECT_EQ(bare->steps.size(), 1u);
}

TEST(Plan, LibraryPrecisionIsCheckedWhereItIsRead) {
  const Task& t = task("L2_081");
  Result<Plan> lib =
      generate_plan(t, std::map<std::string, std::string>{{"gemm.impl", "library"}, {"gemm.tensor_cores", "tf32"}});
  ASSERT_TRUE(lib.ok());
  nlohmann::json j = plan_to_json(*lib);
  j["steps"][0]["precision"] = "fp8";
  Result<Plan> bad = plan_from_json(j);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("steps[0].precision"), std::string::npos) << bad.status().message();
  // A kernel's precision is one of the same names.
  Result<Plan> gemm = generate_plan(t, std::map<std::string, std::string>{});
  ASSERT_TRUE(gemm.ok());
  nlohmann::json jk = plan_to_json(*gemm);
  ASSERT_FALSE(jk["kernels"].empty());
  jk["kernels"][0]["precision"] = "fp64";
  Result<Plan> bad_kernel = plan_from_json(jk);
  ASSERT_FALSE(bad_kernel.ok());
  EXPECT_NE(bad_kernel.status().message().find("kernels[0].precision: expected fp32, tf32, bf16 or fp16"),
            std::string::npos)
      << bad_kernel.status().message();
  // tf32 on an op that is not a matrix product.
  Result<Plan> eager = eager_plan(t);
  ASSERT_TRUE(eager.ok());
  eager->steps[1].precision = Precision::kTf32;  // sigmoid
  Status st = validate_plan(*eager, t);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("steps[1].precision: tf32 applies to matrix products only"), std::string::npos)
      << st.message();
}

TEST(Plan, ResidualValuesStayInRegistersWhenFused) {
  Result<Plan> p = default_plan(task("L2_040"));  // h = linear; y = h * 0.5 + h
  ASSERT_TRUE(p.ok());
  ASSERT_EQ(p->kernels.size(), 1u);
  EXPECT_EQ(p->kernels[0].fused_values, (std::vector<std::string>{"h", "s", "y"}));
}

ExprEnv env_for(const Plan& plan, const Task& t, SizeName size) {
  ExprEnv env;
  env.symbols = t.size_map(size);
  SizeMap sizes = env.symbols;
  env.buffer_shape = [&plan, sizes](const std::string& b) -> Result<std::vector<int64_t>> {
    const PlanBuffer* buf = plan.find_buffer(b);
    if (!buf) return not_found("no buffer " + b);
    return eval_shape(buf->shape, sizes);
  };
  return env;
}

TEST(Plan, EveryLaunchAndCostExpressionResolvesAtBothSizes) {
  for (const Task& t : suite().tasks) {
    Result<Plan> p = default_plan(t);
    ASSERT_TRUE(p.ok()) << t.id;
    for (SizeName size : {SizeName::kSmall, SizeName::kFull}) {
      ExprEnv env = env_for(*p, t, size);
      for (const auto& s : p->steps) {
        if (s.kind != StepKind::kKernel) continue;
        for (const auto& e : s.grid) {
          Result<int64_t> v = eval_expr(e, env);
          ASSERT_TRUE(v.ok()) << t.id << " " << e << ": " << v.status().to_string();
          EXPECT_GT(*v, 0) << t.id << " grid " << e;
        }
        // CUDA's limits: grid.x < 2^31, grid.y and grid.z <= 65535, 1024 threads per block.
        EXPECT_LT(*eval_expr(s.grid[0], env), int64_t{1} << 31) << t.id;
        EXPECT_LE(*eval_expr(s.grid[1], env), 65535) << t.id;
        EXPECT_LE(*eval_expr(s.grid[2], env), 65535) << t.id;
        int64_t threads = 1;
        for (const auto& b : s.block) threads *= *eval_expr(b, env);
        EXPECT_LE(threads, 1024) << t.id;
        for (const auto& a : s.args)
          if (!a.i64.empty()) {
            EXPECT_TRUE(eval_expr(a.i64, env).ok()) << t.id << " arg " << a.i64;
          }
      }
      for (const auto& k : p->kernels)
        for (const auto& e : {k.cost.elements, k.cost.bytes_read, k.cost.bytes_written, k.cost.flops}) {
          Result<int64_t> v = eval_expr(e, env);
          ASSERT_TRUE(v.ok()) << t.id << " cost " << e;
          EXPECT_GE(*v, 0);
        }
    }
  }
}

TEST(Plan, GemmCostCountsTwoFlopsPerMultiplyAdd) {
  const Task& t = task("L1_001");
  Result<Plan> p = default_plan(t);
  ASSERT_TRUE(p.ok());
  ExprEnv env = env_for(*p, t, SizeName::kFull);
  EXPECT_EQ(*eval_expr(p->kernels[0].cost.flops, env), 2LL * 4096 * 4096 * 4096);
  EXPECT_EQ(*eval_expr(p->kernels[0].cost.bytes_read, env), 4LL * 2 * 4096 * 4096);
  EXPECT_EQ(*eval_expr(p->kernels[0].cost.bytes_written, env), 4LL * 4096 * 4096);
}

TEST(Verdict, MissingTailHandlingIsRiskyExactlyWhenSizesDoNotDivide) {
  const Task& t = task("L1_019");  // small: 8 x 1001, full: 4096 x 393216
  Result<Plan> p = generate_plan(t, std::map<std::string, std::string>{{"ew.tail", "none"}});
  ASSERT_TRUE(p.ok());
  const Verdict& v = p->kernels[0].verdict;
  EXPECT_FALSE(v.guaranteed);
  EXPECT_NE(v.reason.find("tail"), std::string::npos);
  EXPECT_NE(*eval_expr(v.fails_when, env_for(*p, t, SizeName::kSmall)), 0);
  EXPECT_EQ(*eval_expr(v.fails_when, env_for(*p, t, SizeName::kFull)), 0);
  Result<Plan> d = default_plan(t);
  EXPECT_TRUE(d->kernels[0].verdict.guaranteed);
  EXPECT_NE(d->kernels[0].source.find("if (i0 + 4 <= n)"), std::string::npos);
}

TEST(Verdict, RacyReductionsAndTf32AreRisky) {
  Result<Plan> race = generate_plan(
      task("L1_023"),
      std::map<std::string, std::string>{{"row.strategy", "block_tree"}, {"row.sync", "warp_synchronous"}});
  ASSERT_TRUE(race.ok());
  EXPECT_FALSE(race->kernels[0].verdict.guaranteed);
  EXPECT_NE(race->kernels[0].verdict.reason.find("race"), std::string::npos);
  // warp_synchronous only matters for the tree strategy.
  Result<Plan> shuffle = generate_plan(
      task("L1_023"),
      std::map<std::string, std::string>{{"row.strategy", "warp_shuffle"}, {"row.sync", "warp_synchronous"}});
  EXPECT_TRUE(shuffle->kernels[0].verdict.guaranteed);
  Result<Plan> tc = generate_plan(task("L1_001"), std::map<std::string, std::string>{{"gemm.tensor_cores", "tf32"}});
  ASSERT_TRUE(tc.ok());
  EXPECT_TRUE(tc->kernels[0].tensor_cores);
  EXPECT_FALSE(tc->kernels[0].verdict.guaranteed);
  EXPECT_NE(tc->kernels[0].source.find("wmma::mma_sync"), std::string::npos);
}

// Over many random settings: every kernel fits the hardware (threads, static shared memory) and
// GEMM register/fragment blocking stays within what compiles in reasonable time.
TEST(Knobs, EverySettingFitsTheDevice) {
  int gemm_kernels = 0;
  for (const Task& t : suite().tasks) {
    KnobSpace space = knob_space(t);
    for (int i = 0; i < 12; ++i) {
      Stream s(RngKey::root(31).with("test", "fits").with("task", t.id).with("i", i));
      Result<Plan> p = generate_plan(t, random_setting(space, s));
      ASSERT_TRUE(p.ok()) << t.id << ": " << p.status().to_string();
      for (const auto& k : p->kernels) {
        EXPECT_LE(k.block_threads, 1024) << t.id;
        EXPECT_EQ(k.block_threads % 32, 0) << t.id;
        EXPECT_LE(k.shared_bytes, 48 * 1024) << t.id << " " << k.name;
        if (k.family != KernelFamily::kGemm) continue;
        ++gemm_kernels;
        if (k.tensor_cores) {
          int64_t fragments = (k.tile[0] / 16) * (k.tile[1] / 16), warps = k.block_threads / 32;
          EXPECT_LE((fragments + warps - 1) / warps, 8) << t.id;
        } else {
          EXPECT_LE(k.thread_tile[0] * k.thread_tile[1], 64) << t.id;
          EXPECT_EQ(k.thread_tile[0] * k.thread_tile[1] * k.block_threads, k.tile[0] * k.tile[1]) << t.id;
        }
      }
    }
  }
  EXPECT_GT(gemm_kernels, 100);
}

TEST(Knobs, SpaceHoldsTheFamiliesATaskUses) {
  KnobSpace gemm = knob_space(task("L2_099"));  // linear, gelu, softmax
  EXPECT_GE(gemm.index_of("fusion"), 0);
  EXPECT_GE(gemm.index_of("gemm.tile_m"), 0);
  EXPECT_GE(gemm.index_of("row.strategy"), 0);
  EXPECT_GE(gemm.index_of("ew.vector_width"), 0);
  KnobSpace relu = knob_space(task("L1_019"));
  EXPECT_LT(relu.index_of("fusion"), 0);  // one op: nothing to fuse
  EXPECT_LT(relu.index_of("gemm.tile_m"), 0);
  KnobSpace conv = knob_space(task("L1_054"));
  EXPECT_TRUE(conv.knobs.empty());  // library only: no generator for convolution yet
  EXPECT_GT(gemm.cardinality(), 1e5);
}

TEST(Knobs, SettingsRoundTripAndBadOnesAreErrors) {
  KnobSpace space = knob_space(task("L2_012"));
  Stream s(RngKey::root(5).with("test", "knobs"));
  KnobSetting k = random_setting(space, s);
  Result<KnobSetting> back = setting_from_values(space, knob_values(space, k));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, k);
  EXPECT_FALSE(setting_from_values(space, {{"gemm.tile_m", "48"}}).ok());
  EXPECT_FALSE(setting_from_values(space, {{"warp.speed", "9"}}).ok());
  EXPECT_FALSE(generate_plan(task("L2_012"), KnobSetting{0}).ok());
  KnobSetting out_of_range = default_setting(space);
  out_of_range[0] = 99;
  EXPECT_FALSE(generate_plan(task("L2_012"), out_of_range).ok());
}

TEST(Knobs, RandomSettingsAreKeyedDraws) {
  KnobSpace space = knob_space(task("L2_099"));
  Stream a(RngKey::root(9).with("rollout", 1)), b(RngKey::root(9).with("rollout", 1)),
      c(RngKey::root(9).with("rollout", 2));
  KnobSetting sa = random_setting(space, a), sb = random_setting(space, b), sc = random_setting(space, c);
  EXPECT_EQ(sa, sb);
  EXPECT_NE(sa, sc);
}

// A KernelBench module is a plan of its source alone: recorded, addressed and parsed like any
// plan, and every other plan keeps the bytes it had before modules existed.
TEST(Plan, AModulePlanHoldsItsSourceAloneAndOtherPlansKeepTheirBytes) {
  const Task& t = task("L1_019");
  const std::string source =
      "import torch\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n"
      "        return torch.relu(x)\n";
  Plan m = module_plan(t.id, source);
  EXPECT_TRUE(m.is_module());
  EXPECT_EQ(m.origin, "llm");
  nlohmann::json j = plan_to_json(m);
  EXPECT_EQ(j.at("module"), source);
  Result<Plan> back = parse_plan(canonical_bytes(m));
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->module, source);
  EXPECT_EQ(plan_address(*back), plan_address(m));
  EXPECT_TRUE(validate_plan(m, t).ok()) << validate_plan(m, t).to_string();
  Plan other = module_plan(t.id, source + "# v2\n");
  EXPECT_NE(plan_address(other), plan_address(m));

  Result<Plan> generated = default_plan(t);
  ASSERT_TRUE(generated.ok());
  EXPECT_FALSE(generated->is_module());
  EXPECT_EQ(plan_to_json(*generated).count("module"), 0u) << "written only when set";

  // A module plan holds nothing else, and its source must be a candidate.
  Plan mixed = m;
  mixed.output = t.output;
  Status s = validate_plan(mixed, t);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("holds its module only"), std::string::npos) << s.to_string();
  Plan indented = module_plan(t.id, "import torch\nif True:\n    class ModelNew(torch.nn.Module):\n        pass\n");
  s = validate_plan(indented, t);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.message().rfind("plan: module: ", 0), 0u) << s.to_string();
  Plan wrong_task = module_plan("L1_001", source);
  EXPECT_FALSE(validate_plan(wrong_task, t).ok());

  // Its bytes count against max_plan_source_bytes.
  PlanLimits limits;
  EXPECT_EQ(plan_limit_error(m, limits), "");
  limits.max_plan_source_bytes = 16;
  EXPECT_EQ(plan_limit_error(m, limits),
            "module: source bytes: " + std::to_string(source.size()) + " is over the limit max_plan_source_bytes = 16");
}

}  // namespace
}  // namespace vinci

// The model-facing plan format: render -> parse round trips for every task, the sim world's
// pricing rule (match_generated_plan), the errors a model reads, JSON replies and limits.
#include "gpu/model_plan.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "core/rng.h"
#include "gpu/codegen/codegen.h"
#include "gpu/expr.h"

namespace vinci {
namespace {

const TaskSuite& suite() {
  static TaskSuite s = [] {
    Result<TaskSuite> r = load_task_suite(VINCI_TASK_DIR);
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    return r.ok() ? *r : TaskSuite();
  }();
  return s;
}

const Task& task(const std::string& id) {
  const Task* t = suite().find(id);
  VINCI_REQUIRE(t != nullptr, "no task " << id);
  return *t;
}

uint64_t test_seed() {
  const char* env = std::getenv("VINCI_TEST_SEED");
  uint64_t seed = env ? std::strtoull(env, nullptr, 10) : 20261203;
  std::printf("seed %llu (set VINCI_TEST_SEED to change)\n", static_cast<unsigned long long>(seed));
  return seed;
}

// The documented bound on generate_plan calls of one match: 1 + the sum over structures (fusion x
// gemm.impl, and the library step's precision) of 2 + the sizes - 1 of the families searched.
int64_t search_bound(const Task& t) {
  KnobSpace space = knob_space(t);
  int64_t all = 2, without_gemm = 2;
  for (const char* family : {"elementwise", "row_reduction", "gemm"}) {
    if (space.index_of(family_knobs(family)[0].name) < 0) continue;
    int64_t n = 1;
    for (const Knob& k : family_knobs(family))
      if (k.name != "gemm.impl") n *= static_cast<int64_t>(k.choices.size());
    all += n - 1;
    if (std::string(family) != "gemm") without_gemm += n - 1;
  }
  int64_t fusions = space.index_of("fusion") >= 0 ? 2 : 1;
  // One more structure per precision of the library step (gemm.tensor_cores: fp32, tf32, bf16, fp16).
  int64_t precisions = static_cast<int64_t>(family_knobs("gemm")[4].choices.size());
  bool library_gemm = space.index_of("gemm.impl") >= 0;
  return 1 + fusions * (all + (library_gemm ? precisions * without_gemm : 0));
}

// render -> parse -> match for one generated plan; returns the parsed plan.
Plan round_trip(const Task& t, const Plan& generated, const std::string& what) {
  Result<std::string> text = render_model_plan(generated);
  EXPECT_TRUE(text.ok()) << what << ": " << text.status().to_string();
  if (!text.ok()) return Plan();
  Result<Plan> parsed = parse_model_plan(*text, t);
  EXPECT_TRUE(parsed.ok()) << what << ": " << parsed.status().to_string() << "\n" << *text;
  if (!parsed.ok()) return Plan();
  EXPECT_TRUE(validate_plan(*parsed, t).ok()) << what;
  EXPECT_EQ(parsed->origin, "llm");
  EXPECT_TRUE(same_plan_content(*parsed, generated)) << what << "\n" << *text;
  MatchStats stats;
  std::optional<Plan> m = match_generated_plan(t, *parsed, &stats);
  EXPECT_TRUE(m.has_value()) << what;
  if (m) {
    EXPECT_EQ(plan_address(*m), plan_address(generated)) << what;
  }
  // A task whose space is empty (library steps only) has no knobs to hint at.
  EXPECT_EQ(stats.from_hint, !generated.knobs.empty()) << what;
  EXPECT_EQ(stats.generated, 1) << what;
  return *parsed;
}

TEST(ModelPlan, EveryTaskDefaultPlanRoundTripsAndMatches) {
  ASSERT_GE(suite().tasks.size(), 250u);  // every KernelBench problem, and vinci's own
  for (const Task& t : suite().tasks) {
    Result<Plan> generated = default_plan(t);
    ASSERT_TRUE(generated.ok()) << t.id;
    Plan parsed = round_trip(t, *generated, t.id + " default");
    // Without the hint the search starts at the defaults: the same plan, metadata and all.
    parsed.knobs.clear();
    MatchStats stats;
    std::optional<Plan> m = match_generated_plan(t, parsed, &stats);
    ASSERT_TRUE(m.has_value()) << t.id;
    EXPECT_EQ(plan_address(*m), plan_address(*generated)) << t.id;
    EXPECT_FALSE(stats.from_hint);
    EXPECT_LE(stats.generated, search_bound(t)) << t.id;
  }
}

TEST(ModelPlan, RandomSettingsRoundTripAndMatchWithAndWithoutTheHint) {
  uint64_t seed = test_seed();
  int64_t most = 0;
  std::string most_task;
  auto start = std::chrono::steady_clock::now();
  for (const Task& t : suite().tasks) {
    KnobSpace space = knob_space(t);
    for (int i = 0; i < 3; ++i) {
      Stream s(RngKey::root(seed).with("test", "model_plan").with("task", t.id).with("i", i));
      KnobSetting setting = random_setting(space, s);
      Result<Plan> generated = generate_plan(t, setting);
      ASSERT_TRUE(generated.ok()) << t.id;
      std::string what = t.id + " setting " + std::to_string(i);
      Plan parsed = round_trip(t, *generated, what);
      if (i > 0) continue;  // one search without the hint per task keeps the test fast
      parsed.knobs.clear();
      MatchStats stats;
      std::optional<Plan> m = match_generated_plan(t, parsed, &stats);
      ASSERT_TRUE(m.has_value()) << what;
      // Several settings may give one content (a knob without effect here): any of them prices it.
      EXPECT_TRUE(same_plan_content(*m, *generated)) << what;
      EXPECT_EQ(m->origin, "codegen");
      EXPECT_LE(stats.generated, search_bound(t)) << what;
      if (stats.generated > most) most = stats.generated, most_task = t.id;
    }
  }
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("most generate_plan calls of one search: %lld (%s); all: %.2f s\n", static_cast<long long>(most),
              most_task.c_str(), s);
}

TEST(ModelPlan, SearchBoundIsTheDocumentedOne) {
  int64_t largest = 0;
  for (const Task& t : suite().tasks) largest = std::max(largest, search_bound(t));
  EXPECT_EQ(largest, 7711);
  EXPECT_EQ(search_bound(task("L1_019")), 1 + 1 * (2 + 191));
  EXPECT_EQ(search_bound(task("L1_033")), 1 + 2);
}

const char* kReluCuda =
    "extern \"C\" __global__ void relu_kernel(const float* x, float* y, long long n) {\n"
    "  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n"
    "  if (i < n) y[i] = fmaxf(x[i], 0.0f);\n"
    "}\n";
const char* kReluLaunch = "relu_kernel<<<ceil_div(B*D, 256), 256>>>(x, y, B*D)\n";

// Lines: 1 ```cuda, 2.. the source, then ```, ```launch, the statements (line 8 on for relu).
std::string reply(const std::string& cuda, const std::string& launch) {
  return "```cuda\n" + cuda + "```\n```launch\n" + launch + "```\n";
}

std::string error_of(const std::string& text, const std::string& id = "L1_019",
                     const ModelPlanLimits& limits = ModelPlanLimits()) {
  Result<Plan> p = parse_model_plan(text, task(id), limits);
  return p.ok() ? "(parsed)" : p.status().message();
}

// A plan is stored as JSON, so a reply must be UTF-8: a stray byte is an error naming its offset
// (the model_plan fuzz target found one inside a Triton source, which then failed to serialise).
TEST(ModelPlan, ARepliesBytesMustBeUtf8) {
  std::string good = reply(kReluCuda, kReluLaunch);
  ASSERT_TRUE(parse_model_plan(good, task("L1_019")).ok());
  std::string bad = good;
  size_t at = bad.find("relu_kernel");
  bad[at + 2] = static_cast<char>(0x81);
  Result<Plan> p = parse_model_plan(bad, task("L1_019"));
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("byte " + std::to_string(at + 2) + " is not valid UTF-8"), std::string::npos)
      << p.status().message();
  // Well-formed multi-byte characters are fine: a comment in another script.
  std::string accented = reply(std::string(kReluCuda) + "// r\xc3\xa9sum\xc3\xa9 \xe2\x9c\x93\n", kReluLaunch);
  EXPECT_TRUE(parse_model_plan(accented, task("L1_019")).ok());
  for (const char* overlong : {"\xc0\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80"}) {
    EXPECT_FALSE(
        parse_model_plan(reply(std::string(kReluCuda) + "// " + overlong + "\n", kReluLaunch), task("L1_019")).ok())
        << "accepted " << overlong;
  }
}

TEST(ModelPlan, HandWrittenReluParsesToTheExpectedPlan) {
  std::string text = "I use one thread per element.\n\n" +
                     reply(kReluCuda, "# y = max(x, 0)\n" + std::string(kReluLaunch)) +
                     "\nThis should be memory bound.\n";
  Result<Plan> p = parse_model_plan(text, task("L1_019"));
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  Plan want;
  want.task_id = "L1_019";
  want.origin = "llm";
  want.output = "y";
  want.buffers = {{"x", "input", "f32", {"B", "D"}}, {"y", "output", "f32", {"B", "D"}}};
  PlanKernel k;
  k.name = "relu_kernel";
  k.source = kReluCuda;
  k.family = KernelFamily::kCustom;
  k.verdict = {false, "not generated by vinci's code generator", ""};
  want.kernels = {k};
  PlanStep s;
  s.kind = StepKind::kKernel;
  s.kernel = "relu_kernel";
  s.grid = {{"ceil_div(B*D, 256)", "1", "1"}};
  s.block = {{"256", "1", "1"}};
  s.args = {{"x", ""}, {"y", ""}, {"", "B*D"}};
  want.steps = {s};
  EXPECT_EQ(canonical_bytes(*p), canonical_bytes(want));
  // Deterministic, and the JSON form of the same plan reads back to the same bytes.
  EXPECT_EQ(plan_address(*parse_model_plan(text, task("L1_019"))), plan_address(want));
  Result<Plan> via_json = parse_model_plan(plan_to_json(*p).dump(2), task("L1_019"));
  ASSERT_TRUE(via_json.ok()) << via_json.status().to_string();
  EXPECT_EQ(canonical_bytes(*via_json), canonical_bytes(want));
  // Not a generator plan: not priceable in the sim world.
  EXPECT_FALSE(match_generated_plan(task("L1_019"), *p).has_value());
}

TEST(ModelPlan, TriplesUnitsAndExternCBlocks) {
  std::string cuda =
      "__device__ float sq(float v) { return v * v; }\n"
      "extern \"C\" {\n"
      "__global__ void __launch_bounds__(256) square(const float* __restrict__ x, float* y, long long n) {\n"
      "  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n"
      "  if (i < n) y[i] = sq(x[i]);\n"
      "}\n"
      "}\n"
      "// @unit\n"
      "extern \"C\" __global__ void relu2(float* y, long long rows, long long cols) {\n"
      "  long long r = blockIdx.y, c = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n"
      "  if (r < rows && c < cols) y[r * cols + c] = fmaxf(y[r * cols + c], 0.0f);  // \"}\" in a comment\n"
      "}\n";
  std::string launch =
      "buffer t f32 [B, D]\n"
      "square<<<(ceil_div(B*D, 256)), 256>>>(x, t, numel(t));\n"
      "relu2<<<(ceil_div(D, 128), B, 1), (128, 1, 1)>>>(t, dim(t, 0), D)\n"
      "relu2<<<(ceil_div(D, 128), B, 1), 128>>>(y, B, D)  # y is never written before: still a write\n";
  Result<Plan> p = parse_model_plan(reply(cuda, launch), task("L1_019"));
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  ASSERT_EQ(p->kernels.size(), 2u);
  size_t marker = cuda.find("// @unit\n");
  EXPECT_EQ(p->find_kernel("square")->source, cuda.substr(0, marker));
  EXPECT_EQ(p->find_kernel("relu2")->source, cuda.substr(marker + 9));
  ASSERT_EQ(p->steps.size(), 3u);
  EXPECT_EQ(p->steps[0].grid, (std::array<std::string, 3>{{"(ceil_div(B*D, 256))", "1", "1"}}));
  EXPECT_EQ(p->steps[0].args[2].i64, "numel(t)");
  EXPECT_EQ(p->steps[1].grid, (std::array<std::string, 3>{{"ceil_div(D, 128)", "B", "1"}}));
  EXPECT_EQ(p->steps[1].block, (std::array<std::string, 3>{{"128", "1", "1"}}));
  EXPECT_EQ(p->find_buffer("t")->role, "intermediate");
  // Render -> parse keeps the plan; one unit with two entry points is one shared source.
  Result<std::string> text = render_model_plan(*p);
  ASSERT_TRUE(text.ok()) << text.status().to_string();
  Result<Plan> back = parse_model_plan(*text, task("L1_019"));
  ASSERT_TRUE(back.ok()) << back.status().to_string() << "\n" << *text;
  EXPECT_EQ(canonical_bytes(*back), canonical_bytes(*p));
  std::string shared = "extern \"C\" __global__ void a(float* y) {}\nextern \"C\" __global__ void b(float* y) {}\n";
  Result<Plan> two = parse_model_plan(reply(shared, "a<<<1, 1>>>(y)\nb<<<1, 1>>>(y)\n"), task("L1_019"));
  ASSERT_TRUE(two.ok()) << two.status().to_string();
  EXPECT_EQ(two->find_kernel("a")->source, shared);
  EXPECT_EQ(two->find_kernel("b")->source, shared);
}

TEST(ModelPlan, Tf32LibraryStepsParseRenderAndMatch) {
  const Task& t = task("L2_081");
  Result<Plan> gen =
      generate_plan(t, std::map<std::string, std::string>{{"gemm.impl", "library"}, {"gemm.tensor_cores", "tf32"}});
  ASSERT_TRUE(gen.ok());
  Result<std::string> text = render_model_plan(*gen);
  ASSERT_TRUE(text.ok()) << text.status().to_string();
  EXPECT_NE(text->find("library linear tf32 -> "), std::string::npos) << *text;
  Result<Plan> parsed = parse_model_plan(*text, t);
  ASSERT_TRUE(parsed.ok()) << parsed.status().to_string();
  EXPECT_TRUE(same_plan_content(*parsed, *gen));
  // Matched without the hint: the structure search finds the library GEMM and its precision.
  Plan stripped = strip_plan_metadata(*parsed);
  MatchStats stats;
  std::optional<Plan> m = match_generated_plan(t, stripped, &stats);
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(plan_address(*m), plan_address(*gen));
  EXPECT_LE(stats.generated, search_bound(t));
  EXPECT_EQ(error_of("```launch\nlibrary batch_norm tf32 -> y\n```\n", "L1_033"),
            "launch block, line 2, column 20: tf32 applies to matrix products (linear, matmul) only, not 'batch_norm'");
  EXPECT_EQ(error_of("```launch\nlibrary batch_norm bf16 -> y\n```\n", "L1_033"),
            "launch block, line 2, column 20: bf16 applies to matrix products (linear, matmul) only, not 'batch_norm'");
  EXPECT_EQ(
      error_of("```launch\nlibrary batch_norm fp8 -> y\n```\n", "L1_033"),
      "launch block, line 2, column 20: expected '->' or a precision (tf32, bf16, fp16) after the op, found 'fp8'");
  EXPECT_EQ(
      error_of("```launch\nlibrary batch_norm fp32 -> y\n```\n", "L1_033"),
      "launch block, line 2, column 20: expected '->' or a precision (tf32, bf16, fp16) after the op, found 'fp32'");
}

// 16-bit library products: the precision survives the model-facing format and the structure search.
TEST(ModelPlan, HalfPrecisionLibraryStepsParseRenderAndMatch) {
  const Task& t = task("L2_081");
  for (const char* precision : {"bf16", "fp16"}) {
    SCOPED_TRACE(precision);
    Result<Plan> gen = generate_plan(
        t, std::map<std::string, std::string>{{"gemm.impl", "library"}, {"gemm.tensor_cores", precision}});
    ASSERT_TRUE(gen.ok());
    EXPECT_EQ(kPrecisions.name(gen->steps[0].precision), std::string(precision));
    Result<std::string> text = render_model_plan(*gen);
    ASSERT_TRUE(text.ok()) << text.status().to_string();
    EXPECT_NE(text->find(std::string("library linear ") + precision + " -> "), std::string::npos) << *text;
    Result<Plan> parsed = parse_model_plan(*text, t);
    ASSERT_TRUE(parsed.ok()) << parsed.status().to_string();
    EXPECT_TRUE(same_plan_content(*parsed, *gen));
    std::optional<Plan> m = match_generated_plan(t, strip_plan_metadata(*parsed));
    ASSERT_TRUE(m.has_value());
    EXPECT_EQ(plan_address(*m), plan_address(*gen));
  }
}

TEST(ModelPlan, LibraryStepsParseAndRender) {
  const Task& t = task("L1_033");  // batch_norm: the generator has no kernel for it
  Result<Plan> p = parse_model_plan("```launch\nlibrary batch_norm -> y\n```\n", t);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  Result<Plan> eager = eager_plan(t);
  ASSERT_TRUE(eager.ok());
  EXPECT_TRUE(same_plan_content(*p, *eager));
  EXPECT_EQ(*render_model_plan(*eager), "```launch\nlibrary batch_norm -> y\n```\n");
  EXPECT_EQ(error_of("```launch\nlibrary relu -> y\n```\n", "L1_033"),
            "launch block, line 2, column 9: the task's op producing 'y' is batch_norm, not relu");
  EXPECT_EQ(error_of("```launch\nlibrary batch_norm -> z\n```\n", "L1_033"),
            "launch block, line 2, column 23: no op of task L1_033 produces 'z'");
  EXPECT_EQ(error_of("```launch\nlibrary batch_nrm -> y\n```\n", "L1_033"),
            "launch block, line 2, column 9: unknown op 'batch_nrm'");
  // L2_012 (linear, mul, leaky_relu) mixes a library GEMM with a kernel; the output of a
  // library step is declared by it.
  std::string cuda =
      "extern \"C\" __global__ void tail(const float* h, float* y, long long n) {\n"
      "  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n"
      "  if (i < n) { float v = h[i] * 2.0f; y[i] = v > 0.0f ? v : 0.1f * v; }\n"
      "}\n";
  Result<Plan> mixed = parse_model_plan(
      reply(cuda, "library linear -> h\ntail<<<ceil_div(B*Out, 256), 256>>>(h, y, numel(h))\n"), task("L2_012"));
  ASSERT_TRUE(mixed.ok()) << mixed.status().to_string();
  EXPECT_EQ(mixed->find_buffer("h")->shape, (std::vector<std::string>{"B", "Out"}));
  EXPECT_EQ(error_of(reply(cuda, "buffer h f32 [B, Out]\nlibrary linear -> h\ntail<<<1, 1>>>(h, y, 1)\n"), "L2_012"),
            "launch block, line 9, column 19: 'h' is declared on line 8; a library step declares its outputs "
            "itself: remove that buffer line");
  EXPECT_EQ(error_of(reply(cuda, "library mul_scalar -> m\n"), "L2_012"),
            "launch block, line 8, column 1: the library step reads 'h', which no earlier step writes");
}

TEST(ModelPlan, ErrorsNameTheBlockLineAndColumn) {
  // The brief example: a bracket where ',' or ')' belongs.
  EXPECT_EQ(error_of(reply(kReluCuda, "relu_kernel<<<ceil_div(B*D, 256), 256>>>(x, y]\n")),
            "launch block, line 8, column 46: expected ',' or ')' after argument 2, found ']'");
  EXPECT_EQ(error_of(reply(kReluCuda, "relu<<<ceil_div(B*D, 256), 256>>>(x, y, B*D)\n")),
            "launch block, line 8, column 1: unknown kernel 'relu': the cuda block defines relu_kernel");
  EXPECT_EQ(error_of(reply(kReluCuda, "relu_kernel<<<ceil_div(B*D, 256), 256>>>(x, out, B*D)\n")),
            "launch block, line 8, column 45: unknown buffer or size symbol 'out' (size symbols: B, D; buffers: x, y)");
  EXPECT_EQ(error_of(reply(kReluCuda, "relu_kernel<<<ceil_div(B*D 256), 256>>>(x, y, B*D)\n")),
            "launch block, line 8, column 28: expected ',' between the two arguments of ceil_div(), found '256'");
  EXPECT_EQ(error_of(reply(kReluCuda, "relu_kernel<<<ceil_div(B*D, 256), 256>>>(x, y)\n")),
            "launch block, line 8, column 46: relu_kernel takes 3 parameters, the launch passes 2 arguments");
  EXPECT_EQ(error_of(reply(kReluCuda, "relu_kernel<<<(ceil_div(B*D, 256), 1), 256>>>(x, y, B*D)\n")),
            "launch block, line 8, column 37: expected ',' after y of the grid, found ')'");
  EXPECT_EQ(error_of(reply(kReluCuda, "relu_kernel<<<ceil_div(B*D, 256) 256>>>(x, y, B*D)\n")),
            "launch block, line 8, column 34: expected ',' between the grid and the block, found '256'");
  EXPECT_EQ(error_of(reply(kReluCuda, "relu_kernel<<<ceil_div(B*D, 256), 256>>>(x, B*D, y)\n")),
            "launch block, line 8, column 45: argument 2 is a size expression (a 64-bit integer), but parameter 2 "
            "of relu_kernel is 'float* y', a pointer: pass a buffer");
  EXPECT_EQ(error_of(reply(kReluCuda, "relu_kernel<<<ceil_div(B*D, 256), 256>>>(x, y, y + 1)\n")),
            "launch block, line 8, column 48: buffer 'y' inside an expression: an argument is a buffer name alone "
            "or a size expression (numel(y), dim(y, 0), ...)");
  EXPECT_EQ(error_of(reply(kReluCuda, "buffer x f32 [B, D]\n" + std::string(kReluLaunch))),
            "launch block, line 8, column 8: 'x' is declared from the task (its inputs, weights and output need no "
            "buffer line)");
  EXPECT_EQ(error_of(reply(kReluCuda, "buffer t f16 [B, D]\n" + std::string(kReluLaunch))),
            "launch block, line 8, column 10: expected dtype f32 or i64, found 'f16'");
  EXPECT_EQ(error_of(reply(kReluCuda, "buffer t f32 [B, N]\n" + std::string(kReluLaunch))),
            "launch block, line 8, column 18: unknown size symbol 'N' (size symbols: B, D)");
  EXPECT_EQ(error_of(reply(kReluCuda, "buffer t f32 [B, D]\nrelu_kernel<<<ceil_div(B*D, 256), 256>>>(x, t, B*D)\n")),
            "launch block: the task output 'y' is never written: pass it to a kernel or produce it with a library "
            "step");
  // A kernel that cannot take a 64-bit integer where the launch passes one.
  std::string narrow = kReluCuda;
  narrow.replace(narrow.find("long long n"), 11, "int n");
  EXPECT_EQ(error_of(reply(narrow, kReluLaunch)),
            "launch block, line 8, column 48: argument 3 is a 64-bit integer, but parameter 3 of relu_kernel is "
            "'int n': declare it long long");

  // The cuda block and the fences.
  std::string no_extern = std::string(kReluCuda).substr(11);  // from __global__
  EXPECT_EQ(error_of(reply(no_extern, kReluLaunch)),
            "cuda block, line 2, column 17: __global__ function 'relu_kernel' is not declared extern \"C\": the "
            "plan launches entry points by their C name; write extern \"C\" __global__ void relu_kernel(...)");
  EXPECT_EQ(error_of(reply(std::string(kReluCuda) + kReluCuda, kReluLaunch)),
            "cuda block, line 6, column 28: kernel 'relu_kernel' is defined twice (first on line 2)");
  EXPECT_EQ(error_of(reply("__device__ float two() { return 2.0f; }\n", kReluLaunch)),
            "cuda block, line 2: the block defines no extern \"C\" __global__ function (each unit is compiled on its "
            "own)");
  EXPECT_EQ(error_of(reply(std::string(kReluCuda) + "/* never closed\n", kReluLaunch)),
            "cuda block, line 6, column 1: unterminated /* comment");
  EXPECT_EQ(error_of("```launch\n" + std::string(kReluLaunch) + "```\n"),
            "launch block, line 2, column 1: launches 'relu_kernel', but the reply has no ```cuda block: write the "
            "kernels' device code in one");
  EXPECT_EQ(error_of("```cpp\n" + std::string(kReluCuda) + "```\n```launch\n" + kReluLaunch + "```\n"),
            "launch block, line 8, column 1: launches 'relu_kernel', but the reply has no ```cuda block (the ```cpp "
            "block on line 1 is not read: label device code ```cuda): write the kernels' device code in one");
  EXPECT_EQ(error_of(reply(kReluCuda, "relu_kernel<<<dim3(B, 1, 1), 256>>>(x, y, B*D)\n")),
            "launch block, line 8, column 15: write dim3(x, y, z) as (x, y, z)");
  EXPECT_EQ(error_of(reply(kReluCuda, "relu_kernel<<<B, 256, 0>>>(x, y, B*D)\n")),
            "launch block, line 8, column 21: a launch takes a grid and a block only (shared memory is static, the "
            "stream is the harness's): expected '>>>'");
  EXPECT_EQ(error_of("```cuda\n" + std::string(kReluCuda) + "```\n"),
            "reply: no ```launch block: after the ```cuda block, write a ```launch block with one launch a line, "
            "e.g. my_kernel<<<ceil_div(N, 256), 256>>>(x, y, N)");
  EXPECT_EQ(error_of(reply(kReluCuda, kReluLaunch) + "```cuda\n" + kReluCuda + "```\n"),
            "reply, line 10: a second ```cuda block (the first opened on line 1): write every kernel in one ```cuda "
            "block");
  EXPECT_EQ(error_of("```cuda\n" + std::string(kReluCuda) + "```\n```launch\n" + kReluLaunch),
            "reply, line 7: the ```launch block opened here is never closed: end it with a line ```");
  EXPECT_EQ(error_of("I would write a relu kernel."),
            "reply: no plan found: write the kernels in a ```cuda block and their launches in a ```launch block");
  // CRLF line ends read as LF: the same plan.
  std::string crlf;
  for (char c : reply(kReluCuda, kReluLaunch)) crlf += c == '\n' ? std::string("\r\n") : std::string(1, c);
  Result<Plan> a = parse_model_plan(crlf, task("L1_019"));
  Result<Plan> b = parse_model_plan(reply(kReluCuda, kReluLaunch), task("L1_019"));
  ASSERT_TRUE(a.ok() && b.ok()) << a.status().to_string();
  EXPECT_EQ(plan_address(*a), plan_address(*b));
}

TEST(ModelPlan, JsonPlansAreAccepted) {
  const Task& t = task("L2_012");
  Result<Plan> generated = default_plan(t);
  ASSERT_TRUE(generated.ok());
  Result<Plan> from_text = parse_model_plan(*render_model_plan(*generated), t);
  ASSERT_TRUE(from_text.ok());
  std::string json = plan_to_json(*generated).dump(2);
  for (const std::string& text : {"Here it is:\n```json\n" + json + "\n```\n", json}) {
    Result<Plan> p = parse_model_plan(text, t);
    ASSERT_TRUE(p.ok()) << p.status().to_string();
    // The generator's claims do not survive a model's copy: the plan is the text's plan.
    EXPECT_EQ(canonical_bytes(*p), canonical_bytes(*from_text));
    EXPECT_FALSE(p->kernels[0].verdict.guaranteed);
    std::optional<Plan> m = match_generated_plan(t, *p);
    ASSERT_TRUE(m.has_value());
    EXPECT_EQ(plan_address(*m), plan_address(*generated));
  }
  EXPECT_EQ(error_of("```json\n{\"format\": \"vinci.plan/1\",\n```\n").substr(0, 41),
            "json block, line 3, column 1: not valid J");
  EXPECT_EQ(error_of("```json\n{\"format\": \"vinci.plan/1\", \"task\": \"L1_019\"}\n```\n"),
            "json block: plan: output: expected a string, found nothing");
  nlohmann::json j = plan_to_json(*generated);
  j["kernels"][0]["source"] = "__global__ void k0_gemm() {}\n";
  EXPECT_EQ(error_of(j.dump(), "L2_012"),
            "reply, kernel 'k0_gemm' source, line 1, column 17: __global__ function 'k0_gemm' is not declared "
            "extern \"C\": the plan launches entry points by their C name; write extern \"C\" __global__ void "
            "k0_gemm(...)");
  // The task's own buffers are the task's: a JSON plan may not give them other shapes.
  j = plan_to_json(*generated);
  for (auto& b : j["buffers"])
    if (b["name"] == "fc.bias") b["shape"] = {"_ut"};
  EXPECT_EQ(error_of(j.dump(), "L2_012"),
            "reply: buffer 'fc.bias': the task declares it weight f32 [Out], found weight f32 [_ut]");
}

TEST(ModelPlan, LimitsAreEnforced) {
  std::string ok = reply(kReluCuda, kReluLaunch);
  ModelPlanLimits small;
  small.max_reply_bytes = 100;
  EXPECT_EQ(error_of(ok, "L1_019", small), "reply: " + std::to_string(ok.size()) + " bytes: the limit is 100");
  EXPECT_EQ(error_of(std::string(3 * 1024 * 1024, 'x')), "reply: 3145728 bytes: the limit is 2097152");
  small = ModelPlanLimits();
  small.max_kernels = 1;
  std::string two = std::string(kReluCuda) + "extern \"C\" __global__ void other(float* y) {}\n";
  EXPECT_EQ(error_of(reply(two, kReluLaunch), "L1_019", small),
            "cuda block, line 6, column 28: too many kernels: the limit is 1");
  small = ModelPlanLimits();
  small.max_launch_lines = 2;
  EXPECT_EQ(error_of(reply(kReluCuda, "# comments do not count\n\n" + std::string(3, ' ') + kReluLaunch + kReluLaunch +
                                          kReluLaunch),
                     "L1_019", small),
            "launch block, line 12: too many statements: the limit is 2");
  // Nesting and integers a model could use to crash or wrap an evaluator.
  std::string deep = "relu_kernel<<<" + std::string(100, '(') + "1" + std::string(100, ')') + ", 256>>>(x, y, B*D)\n";
  EXPECT_EQ(error_of(reply(kReluCuda, deep)), "launch block, line 8, column 80: expression nested too deeply");
  EXPECT_EQ(error_of(reply(kReluCuda, "relu_kernel<<<99999999999999999999, 256>>>(x, y, B*D)\n")),
            "launch block, line 8, column 15: integer does not fit in 64 bits");
  EXPECT_EQ(error_of("```json\n" + std::string(100000, '[') + "\n```\n"),
            "json block: JSON nested deeper than 64 levels");
  EXPECT_FALSE(check_expr_syntax(std::string(100000, '(') + "1" + std::string(100000, ')')).ok());
  EXPECT_FALSE(check_expr_syntax(std::string(100000, '-') + "1").ok());
  ExprEnv env;
  env.symbols = {{"B", int64_t{1} << 40}};
  EXPECT_FALSE(eval_expr("B * B", env).ok());
  EXPECT_FALSE(eval_expr("0 - B * (B / 2) * 8 - B", env).ok());
  EXPECT_EQ(*eval_expr("ceil_div(B, 3)", env), ((int64_t{1} << 40) + 2) / 3);
  // A huge identifier is quoted in part.
  std::string name(100000, 'a');
  EXPECT_EQ(error_of(reply(kReluCuda, name + "<<<1, 1>>>(y)\n")),
            "launch block, line 8, column 1: unknown kernel 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa...': the cuda "
            "block defines relu_kernel");
}

TEST(ModelPlan, ChangedKernelsAreNotMatched) {
  const Task& t = task("L2_099");  // gemm, row_reduction and elementwise kernels: the largest space
  Stream s(RngKey::root(test_seed()).with("test", "model_plan_changed"));
  Result<Plan> generated = generate_plan(t, random_setting(knob_space(t), s));
  ASSERT_TRUE(generated.ok());
  std::string text = *render_model_plan(*generated);
  // A comment added to the last kernel's source: another source, not priceable, hint or not.
  std::string changed = text;
  changed.insert(changed.rfind("extern \"C\" __global__"), "// tuned by hand\n");
  Result<Plan> p = parse_model_plan(changed, t);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  for (bool hint : {true, false}) {
    Plan q = *p;
    if (!hint) q.knobs.clear();
    MatchStats stats;
    auto start = std::chrono::steady_clock::now();
    EXPECT_FALSE(match_generated_plan(t, q, &stats).has_value());
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    std::printf("unmatched search (hint %d): %lld generate_plan calls, %.0f ms\n", hint,
                static_cast<long long>(stats.generated), ms);
    EXPECT_LE(stats.generated, search_bound(t));
    EXPECT_FALSE(stats.from_hint);
  }
  // The same kernels on another block size, and a plan of another task.
  Result<Plan> r = parse_model_plan(text, t);
  ASSERT_TRUE(r.ok());
  Plan other = *r;
  auto launch = std::find_if(other.steps.begin(), other.steps.end(),
                             [](const PlanStep& st) { return st.kind == StepKind::kKernel; });
  ASSERT_NE(launch, other.steps.end());
  launch->block[0] = "32";
  EXPECT_FALSE(match_generated_plan(t, other).has_value());
  EXPECT_FALSE(match_generated_plan(task("L2_012"), *r).has_value());
  EXPECT_TRUE(match_generated_plan(t, *r).has_value());
}

// Random edits of real replies: every outcome is a valid plan or an error naming where, never a
// crash (run under a sanitizer to catch what a crash test cannot).
TEST(ModelPlan, MutatedRepliesParseOrFailCleanly) {
  uint64_t seed = test_seed();
  const char* alphabet = "()[],<>#;\n\"'/*`{}-+ xyB1_";
  std::vector<std::pair<const Task*, std::string>> texts;
  for (const char* id : {"L1_019", "L2_012", "L2_099", "L3_101", "L1_033"})
    texts.push_back({&task(id), *render_model_plan(*default_plan(task(id)))});
  texts.push_back({&task("L1_019"), reply(kReluCuda, kReluLaunch)});
  int parsed = 0;
  for (int i = 0; i < 3000; ++i) {
    Stream s(RngKey::root(seed).with("test", "model_plan_mutate").with("i", i));
    const auto& [t, original] = texts[s.below(texts.size())];
    std::string text = original;
    for (uint64_t e = 0, n = 1 + s.below(3); e < n; ++e) {
      size_t at = s.below(text.size());
      char c = alphabet[s.below(std::strlen(alphabet))];
      switch (s.below(3)) {
        case 0: text.erase(at, 1); break;
        case 1: text.insert(at, 1, c); break;
        default: text[at] = c;
      }
    }
    Result<Plan> p = parse_model_plan(text, *t);
    if (p.ok()) {
      ++parsed;
      EXPECT_TRUE(validate_plan(*p, *t).ok()) << text;
      continue;
    }
    const std::string& m = p.status().message();
    bool located = m.rfind("launch block", 0) == 0 || m.rfind("cuda block", 0) == 0 || m.rfind("reply", 0) == 0 ||
                   m.rfind("json block", 0) == 0;
    EXPECT_TRUE(located) << m;
  }
  std::printf("%d of 3000 mutated replies still parse\n", parsed);
}

TEST(ModelPlan, RenderRefusesWhatTheFormatCannotCarry) {
  Result<Plan> p = default_plan(task("L1_019"));
  ASSERT_TRUE(p.ok());
  Plan q = *p;
  q.kernels[0].source.pop_back();
  EXPECT_EQ(render_model_plan(q).status().message(),
            "render: kernel '" + q.kernels[0].name + "': its source does not end with a newline");
  q = *p;
  q.kernels[0].source += "```\n";
  EXPECT_FALSE(render_model_plan(q).ok());
  // A source that defines an entry point the plan has no kernel for (a plan written as JSON may):
  // the cuda block would read back with one kernel more.
  q = *p;
  q.kernels[0].source += "extern \"C\" __global__ void spare(float* y) { y[0] = 0.f; }\n";
  EXPECT_EQ(render_model_plan(q).status().message(), "render: the plan's kernels are " + q.kernels[0].name +
                                                         ", but its sources define the entry "
                                                         "points " +
                                                         q.kernels[0].name +
                                                         ", spare, which a reader would take as the kernels");
  // A knob value the `# knobs:` line cannot hold (a JSON plan's knobs are any strings): a newline
  // would start a launch statement.
  q = *p;
  q.knobs["ew.block"] = "256\nk0_elementwise<<<1, 1>>>(x, y, 1)";
  ASSERT_FALSE(render_model_plan(q).ok());
  EXPECT_EQ(render_model_plan(q).status().message().rfind("render: knob 'ew.block'", 0), 0u)
      << render_model_plan(q).status().message();
  // The rendered text: the hint, then the launch of the one kernel.
  std::string text = *render_model_plan(*p);
  EXPECT_NE(text.find("```launch\n# knobs: ew.block=256 ew.items_per_thread=1 ew.math=precise ew.tail=guarded "
                      "ew.vector_width=4\nk0_elementwise<<<ceil_div(B*D, 1024), 256>>>(x, y, B*D)\n```\n"),
            std::string::npos)
      << text;
}

}  // namespace
}  // namespace vinci

// Triton kernels without a GPU: the model-facing triton block and its launches, the plan JSON of a
// Triton launch, the launch metadata codec, the sim world's verdict, and (where Triton is
// installed: scripts/setup.sh installs it) compiling the plans of tests/gpu/triton_plans to sm_90
// cubins, the cache, compile errors, the compile time limit and a missing Triton.
#include "gpu/compile/triton.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>

#include "gpu/codegen/codegen.h"
#include "gpu/model_plan.h"
#include "gpu/shapes.h"
#include "gpu/sim/sim_evaluator.h"
#include "tests/gpu/sim_test_util.h"

namespace vinci {
namespace {

using simtest::task;

const char* kRelu = R"(One program per 1024 elements.

```triton
import triton
import triton.language as tl


@triton.jit
def helper(x):
    return tl.maximum(x, 0.0)


@triton.jit
def relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr, SCALE: tl.constexpr = 1.0):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, helper(tl.load(x_ptr + offs, mask=mask)) * SCALE, mask=mask)
```

```launch
relu_kernel<<<ceil_div(B*D, 1024)>>>(x, y, B*D, BLOCK=1024, num_warps=8)
```
)";

std::string read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string plans_dir() { return std::string(VINCI_SOURCE_DIR) + "/tests/gpu/triton_plans"; }

// Every reply of a folder, with the task its name starts with (L1_019_relu.md -> L1_019).
std::vector<std::pair<std::string, std::string>> replies(const std::string& dir) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().extension() == ".md") out.emplace_back(e.path().filename().string(), read(e.path().string()));
  std::sort(out.begin(), out.end());
  return out;
}

ExprEnv env_for(const Plan& plan, const Task& t, const std::string& size) {
  ExprEnv env;
  env.symbols = t.sizes.at(size);
  SizeMap sizes = env.symbols;
  env.buffer_shape = [plan, sizes](const std::string& b) -> Result<std::vector<int64_t>> {
    const PlanBuffer* pb = plan.find_buffer(b);
    if (!pb) return not_found("buffer " + b);
    return eval_shape(pb->shape, sizes);
  };
  return env;
}

TEST(TritonPlan, AReplyParsesToTritonKernelsAndLaunches) {
  Result<Plan> p = parse_model_plan(kRelu, task("L1_019"));
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  // Only launched @triton.jit functions are kernels; the helper is compiled with them.
  ASSERT_EQ(p->kernels.size(), 1u);
  EXPECT_EQ(p->kernels[0].name, "relu_kernel");
  EXPECT_EQ(p->kernels[0].language, "triton");
  EXPECT_EQ(p->kernels[0].source.rfind("import triton\n", 0), 0u);
  EXPECT_NE(p->kernels[0].source.find("def helper"), std::string::npos);
  ASSERT_EQ(p->steps.size(), 1u);
  const PlanStep& s = p->steps[0];
  EXPECT_EQ(s.grid[0], "ceil_div(B*D, 1024)");
  EXPECT_EQ(s.block[0], "256");  // 32 * num_warps
  EXPECT_EQ(s.triton.num_warps, 8);
  EXPECT_EQ(s.triton.num_stages, 3);  // Triton's default
  EXPECT_EQ(s.triton.constexprs, (std::map<std::string, std::string>{{"BLOCK", "1024"}}));
  ASSERT_EQ(s.args.size(), 3u);
  EXPECT_EQ(s.args[0].buffer, "x");
  EXPECT_EQ(s.args[2].i64, "B*D");

  // JSON: the Triton fields are there, and read back to the same address.
  nlohmann::json j = plan_to_json(*p);
  EXPECT_EQ(j["kernels"][0]["language"], "triton");
  EXPECT_EQ(j["steps"][0]["triton"]["num_warps"], 8);
  Result<Plan> back = parse_plan(j.dump());
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(plan_address(*back), plan_address(*p));

  // Render and read back: the same plan.
  Result<std::string> text = render_model_plan(*p);
  ASSERT_TRUE(text.ok()) << text.status().to_string();
  EXPECT_NE(text->find("relu_kernel<<<ceil_div(B*D, 1024)>>>(x, y, B*D, BLOCK=1024, num_warps=8, num_stages=3)"),
            std::string::npos)
      << *text;
  Result<Plan> again = parse_model_plan(*text, task("L1_019"));
  ASSERT_TRUE(again.ok()) << again.status().to_string() << "\n" << *text;
  EXPECT_EQ(canonical_bytes(*again), canonical_bytes(*p));
}

TEST(TritonPlan, ConstexprValuesAreFloatsBoolsOrSizeExpressions) {
  std::string reply = kRelu;
  reply.replace(reply.find("BLOCK=1024, num_warps=8"), 23, "BLOCK=512*2, SCALE=2.5e-1, num_stages=2");
  Result<Plan> p = parse_model_plan(reply, task("L1_019"));
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  const TritonLaunch& t = p->steps[0].triton;
  EXPECT_EQ(t.constexprs.at("BLOCK"), "512*2");
  EXPECT_EQ(t.constexprs.at("SCALE"), "2.5e-1");
  EXPECT_EQ(t.num_warps, 4);
  EXPECT_EQ(t.num_stages, 2);
  Result<TritonCompileRequest> r = triton_request(*p, p->steps[0], env_for(*p, task("L1_019"), "small"), 90);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->signature, (std::vector<std::string>{"*fp32", "*fp32", "i64"}));
  EXPECT_EQ(r->constexprs["BLOCK"], 1024);
  EXPECT_TRUE(r->constexprs["SCALE"].is_number_float());
  EXPECT_DOUBLE_EQ(r->constexprs["SCALE"].get<double>(), 0.25);
  EXPECT_TRUE(is_float_literal("1e-5"));
  EXPECT_TRUE(is_float_literal(".5"));
  EXPECT_FALSE(is_float_literal("1024"));
  EXPECT_FALSE(is_float_literal("1e"));
  EXPECT_TRUE(check_triton_constexpr("True").ok());
  EXPECT_FALSE(check_triton_constexpr("x +").ok());
}

TEST(TritonPlan, ErrorsNameTheLineTheColumnAndTheFix) {
  struct Case {
    std::string from, to, expect;
  };
  const std::vector<Case> cases = {
      {"<<<ceil_div(B*D, 1024)>>>", "<<<ceil_div(B*D, 1024), 256>>>", "a Triton launch takes the grid only"},
      {"BLOCK=1024, num_warps=8", "BLOCK=1024, WIDTH=3", "has no tl.constexpr parameter 'WIDTH'"},
      {"BLOCK=1024, num_warps=8", "num_warps=8", "constexpr 'BLOCK' has no value"},
      {"(x, y, B*D,", "(x, y,", "takes 3 arguments that are not tl.constexpr (x_ptr, y_ptr, n), the launch passes 2"},
      {"B*D, BLOCK=1024", "BLOCK=1024, B*D", "positional after a keyword argument"},
      {"num_warps=8", "num_warps=3", "num_warps: expected 1, 2, 4, 8, 16 or 32"},
      {"num_warps=8", "num_stages=0", "num_stages: expected an integer from 1 to 8"},
      {"BLOCK=1024, num_warps=8", "BLOCK=1024, BLOCK=2048", "'BLOCK' is given twice"},
      {"relu_kernel<<<", "relu<<<", "unknown kernel 'relu': the triton block defines helper, relu_kernel"},
      {"@triton.jit\ndef relu_kernel", "@triton.jit\nrelu_kernel = 1\ndef relu_kernel",
       "expected 'def NAME(...):' after @triton.jit"},
  };
  for (const Case& c : cases) {
    std::string reply = kRelu;
    size_t at = reply.find(c.from);
    ASSERT_NE(at, std::string::npos) << c.from;
    reply.replace(at, c.from.size(), c.to);
    Result<Plan> p = parse_model_plan(reply, task("L1_019"));
    ASSERT_FALSE(p.ok()) << c.to;
    EXPECT_NE(p.status().message().find(c.expect), std::string::npos) << c.to << ": " << p.status().message();
    EXPECT_NE(p.status().message().find("block"), std::string::npos) << p.status().message();
  }
  // A module labelled python is not read, and the error says how to label it.
  std::string python = kRelu;
  python.replace(python.find("```triton"), 9, "```python");
  Result<Plan> py = parse_model_plan(python, task("L1_019"));
  ASSERT_FALSE(py.ok());
  EXPECT_NE(py.status().message().find("is not read: label Triton kernels ```triton"), std::string::npos)
      << py.status().message();
  // An unsupported dtype: buffers are f32 or i64.
  std::string reply = kRelu;
  reply.insert(reply.find("relu_kernel<<<"), "buffer h f16 [B, D]\n");
  Result<Plan> p = parse_model_plan(reply, task("L1_019"));
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("expected dtype f32 or i64, found 'f16'"), std::string::npos)
      << p.status().message();
}

TEST(TritonPlan, TheExperimentChoosesTheLanguages) {
  ModelPlanLimits cuda_only;
  cuda_only.languages = {"cuda"};
  Result<Plan> p = parse_model_plan(kRelu, task("L1_019"), cuda_only);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("kernels in triton are not accepted here: write them in ```cuda"),
            std::string::npos)
      << p.status().message();
  ModelPlanLimits triton_only;
  triton_only.languages = {"triton"};
  EXPECT_TRUE(parse_model_plan(kRelu, task("L1_019"), triton_only).ok());
  Result<std::string> cuda_reply = render_model_plan(*default_plan(task("L1_019")));
  ASSERT_TRUE(cuda_reply.ok());
  Result<Plan> c = parse_model_plan(*cuda_reply, task("L1_019"), triton_only);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("kernels in cuda are not accepted here: write them in ```triton"),
            std::string::npos)
      << c.status().message();
  // JSON replies too.
  Result<Plan> tp = parse_model_plan(kRelu, task("L1_019"));
  ASSERT_TRUE(tp.ok());
  Result<Plan> j = parse_model_plan(plan_to_json(*tp).dump(), task("L1_019"), cuda_only);
  ASSERT_FALSE(j.ok());
  EXPECT_NE(j.status().message().find("is in triton, which is not accepted here"), std::string::npos)
      << j.status().message();
}

// A JSON reply's Triton launches get the launch block's checks, so a rendered JSON plan reads back.
TEST(TritonPlan, JsonRepliesAreCheckedAsTheLaunchBlockIs) {
  Result<Plan> p = parse_model_plan(kRelu, task("L1_019"));
  ASSERT_TRUE(p.ok());
  struct Case {
    std::function<void(nlohmann::json&)> edit;
    std::string expect;
  };
  const std::vector<Case> cases = {
      {[](nlohmann::json& j) { j["steps"][0]["args"].erase(2); }, "takes 3 arguments that are not tl.constexpr"},
      {[](nlohmann::json& j) { j["steps"][0]["triton"]["constexprs"]["n"] = "4"; },
       "has no tl.constexpr parameter 'n'"},
      {[](nlohmann::json& j) { j["steps"][0]["triton"]["constexprs"].erase("BLOCK"); },
       "constexpr 'BLOCK' has no value"},
      {[](nlohmann::json& j) { j["steps"][0]["triton"]["constexprs"]["BLOCK"] = " 1024"; }, "surrounding whitespace"},
      {[](nlohmann::json& j) {
         j["kernels"][0]["name"] = "mask";
         j["steps"][0]["kernel"] = "mask";
       },
       "defines no @triton.jit function 'mask'"},
  };
  for (const Case& c : cases) {
    nlohmann::json j = plan_to_json(*p);
    c.edit(j);
    Result<Plan> q = parse_model_plan(j.dump(), task("L1_019"));
    ASSERT_FALSE(q.ok()) << c.expect;
    EXPECT_NE(q.status().message().find(c.expect), std::string::npos) << q.status().message();
  }
  Result<Plan> fine = parse_model_plan(plan_to_json(*p).dump(), task("L1_019"));
  ASSERT_TRUE(fine.ok()) << fine.status().to_string();
  Result<std::string> text = render_model_plan(*fine);
  ASSERT_TRUE(text.ok());
  Result<Plan> again = parse_model_plan(*text, task("L1_019"));
  ASSERT_TRUE(again.ok()) << again.status().to_string();
  EXPECT_TRUE(same_plan_content(*again, *fine));
}

TEST(TritonPlan, ValidationKeepsTritonLaunchesConsistent) {
  Result<Plan> p = parse_model_plan(kRelu, task("L1_019"));
  ASSERT_TRUE(p.ok());
  Plan bad = *p;
  bad.steps[0].block[0] = "128";
  Status st = validate_plan(bad, task("L1_019"));
  EXPECT_NE(st.message().find("a Triton launch runs 32 * num_warps threads: expected [256, 1, 1], found [128, 1, 1]"),
            std::string::npos)
      << st.to_string();
  Result<Plan> cuda = default_plan(task("L1_019"));
  ASSERT_TRUE(cuda.ok());
  Plan mixed = *cuda;
  mixed.steps[0].triton.num_warps = 4;
  st = validate_plan(mixed, task("L1_019"));
  EXPECT_NE(st.message().find("is CUDA: only Triton launches take"), std::string::npos) << st.to_string();
  // A CUDA plan's JSON carries neither field: the addresses of existing plans do not move.
  std::string bytes = canonical_bytes(*cuda);
  EXPECT_EQ(bytes.find("\"language\""), std::string::npos);
  EXPECT_EQ(bytes.find("\"triton\""), std::string::npos);
  nlohmann::json j = plan_to_json(*p);
  j["kernels"][0]["language"] = "python";
  Result<Plan> q = plan_from_json(j);
  ASSERT_FALSE(q.ok());
  EXPECT_NE(q.status().message().find("language: expected cuda or triton"), std::string::npos)
      << q.status().to_string();
}

TEST(TritonPlan, TheSimWorldDoesNotPriceTriton) {
  Result<Plan> p = parse_model_plan(kRelu, task("L1_019"));
  ASSERT_TRUE(p.ok());
  SimEvaluator sim(simtest::h200());
  EvalRequest req;
  for (const char* origin : {"llm", "hand"}) {
    Plan plan = *p;
    plan.origin = origin;
    Result<EvalResult> r = sim.evaluate(task("L1_019"), plan, req);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_FALSE(r->correct);
    EXPECT_NE(std::find(r->flags.begin(), r->flags.end(), "not_priceable"), r->flags.end()) << origin;
    EXPECT_NE(r->error.find("it emits no Triton"), std::string::npos) << r->error;
  }
}

// The plans of tests/gpu/triton_plans (written as a model writes them) parse against their tasks
// and cover the families the GPU comparison needs; the hostile ones parse too (they fail later).
TEST(TritonPlan, CommittedPlansParseForTheirTasks) {
  std::set<std::string> tasks, families;
  for (const auto& [name, text] : replies(plans_dir())) {
    const Task& t = task(name.substr(0, 6));
    Result<Plan> p = parse_model_plan(text, t);
    ASSERT_TRUE(p.ok()) << name << ": " << p.status().to_string();
    EXPECT_TRUE(has_triton_kernels(*p)) << name;
    tasks.insert(t.id);
    families.insert(t.family_name());
    for (const char* size : {"small", "full"})
      for (const PlanStep& s : p->steps)
        EXPECT_TRUE(triton_request(*p, s, env_for(*p, t, size), 90).ok()) << name << " " << size;
  }
  EXPECT_GE(tasks.size(), 10u);
  for (const char* f : {"elementwise", "softmax", "norm", "gemm", "gemm_epilogue"}) EXPECT_TRUE(families.count(f)) << f;
  size_t hostile = 0;
  for (const auto& [name, text] : replies(plans_dir() + "/hostile")) {
    EXPECT_NE(text.find("<!-- expect: "), std::string::npos) << name;
    EXPECT_TRUE(parse_model_plan(text, task(name.substr(0, 6))).ok()) << name;
    ++hostile;
  }
  EXPECT_GE(hostile, 8u);
}

// The fuzz target's promise on Triton replies, over deterministic mutations of the committed plans:
// a reply that parses passes validate_plan, and its rendering reads back to the same content.
TEST(TritonPlan, MutatedRepliesParseOrFailCleanlyAndRoundTrip) {
  const std::vector<std::string> tokens = {"BLOCK=1024",
                                           ", num_warps=8",
                                           ", num_stages=2",
                                           "True",
                                           "1e-05",
                                           ": tl.constexpr",
                                           " = 4",
                                           "@triton.jit\n",
                                           "def k(x):\n",
                                           "(x, y)",
                                           "<<<(2, 3, 4)>>>",
                                           ", 256",
                                           "```",
                                           "\n",
                                           " ",
                                           "=",
                                           ",",
                                           ")",
                                           "(",
                                           "numel(x)",
                                           "B*D",
                                           "-1.5",
                                           "x_ptr"};
  std::vector<std::pair<std::string, std::string>> seeds;
  for (const auto& [name, text] : replies(plans_dir())) seeds.emplace_back(name.substr(0, 6), text);
  seeds.emplace_back("L1_019", kRelu);
  uint64_t state = 20261203;
  auto next = [&state](uint64_t n) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (state >> 33) % n;
  };
  int parsed = 0;
  for (int i = 0; i < 3000; ++i) {
    const auto& [id, seed] = seeds[next(seeds.size())];
    std::string text = seed;
    for (int m = 0, n = 1 + static_cast<int>(next(3)); m < n; ++m) {
      size_t at = next(text.size() + 1);
      size_t len = std::min<size_t>(next(8), text.size() - at);
      switch (next(3)) {
        case 0: text.erase(at, len); break;
        case 1: text.insert(at, tokens[next(tokens.size())]); break;
        default: text.replace(at, len, tokens[next(tokens.size())]); break;
      }
    }
    const Task& t = task(id);
    Result<Plan> p = parse_model_plan(text, t);
    if (!p.ok()) continue;
    ++parsed;
    ASSERT_TRUE(validate_plan(*p, t).ok()) << text;
    Result<std::string> rendered = render_model_plan(*p);
    if (!rendered.ok()) continue;
    Result<Plan> again = parse_model_plan(*rendered, t);
    ASSERT_TRUE(again.ok()) << again.status().to_string() << "\n" << *rendered << "\n--- from\n" << text;
    ASSERT_TRUE(same_plan_content(*again, *p)) << *rendered << "\n--- from\n" << text;
  }
  EXPECT_GT(parsed, 300);
}

TEST(TritonMeta, CodecRoundTripsAndNamesWhatIsWrong) {
  TritonKernelMeta m;
  m.name = "relu_kernel";
  m.shared = 65536;
  m.num_warps = 8;
  m.num_stages = 2;
  m.global_scratch_size = 128;
  m.global_scratch_align = 16;
  m.params = {"*fp32", "*fp32", "i64"};
  m.triton_version = "3.9.0";
  m.options = "arch=sm_90 num_ctas=1";
  std::string text = encode_triton_meta(m);
  Result<TritonKernelMeta> back = decode_triton_meta(text);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_TRUE(*back == m);
  EXPECT_EQ(encode_triton_meta(*back), text);

  nlohmann::json j = nlohmann::json::parse(text);
  j.erase("shared");
  EXPECT_EQ(decode_triton_meta(j.dump()).status().message(),
            "triton metadata: shared: expected an integer, found nothing");
  j = nlohmann::json::parse(text);
  j["launch_pdl"] = 1;
  EXPECT_EQ(decode_triton_meta(j.dump()).status().message(),
            "triton metadata: launch_pdl: expected a boolean, found number");
  EXPECT_FALSE(decode_triton_meta("not json").ok());

  std::string cubin = std::string(
                          "\x7f"
                          "ELF",
                          4) +
                      std::string("\0\1\2", 3);
  std::string artifact = encode_triton_artifact(m, cubin);
  auto a = decode_triton_artifact(artifact);
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  EXPECT_TRUE(a->first == m);
  EXPECT_EQ(a->second, cubin);
  EXPECT_FALSE(decode_triton_artifact(artifact.substr(0, 40)).ok());
  EXPECT_FALSE(decode_triton_artifact("vinci.triton/2\n" + artifact.substr(15)).ok());
  std::string not_elf = artifact;
  not_elf[not_elf.size() - cubin.size()] = 'X';
  EXPECT_NE(decode_triton_artifact(not_elf).status().message().find("not an ELF image"), std::string::npos);

  EXPECT_EQ(triton_meta_unsupported(m), "");
  TritonKernelMeta cluster = m;
  cluster.num_ctas = 2;
  EXPECT_NE(triton_meta_unsupported(cluster).find("num_ctas must be 1"), std::string::npos);
}

// Whether Triton can be run here; the tests that need it skip with this message otherwise.
std::string triton_missing() {
  TritonCompiler c;
  Result<std::string> v = c.version();
  return v.ok() ? "" : v.status().message();
}

#define SKIP_WITHOUT_TRITON()                                                                   \
  do {                                                                                          \
    std::string missing = triton_missing();                                                     \
    if (!missing.empty())                                                                       \
      GTEST_SKIP() << "Triton is not installed for this python (scripts/setup.sh installs it; " \
                   << "VINCI_TRITON_PYTHON names another): " << missing;                        \
  } while (0)

TEST(TritonCompile, AMissingTritonIsAClearError) {
  TritonOptions o;
  o.python = "/nonexistent/python3";
  TritonCompiler c(o);
  Result<std::string> v = c.version();
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(v.status().message().find("Triton is not available"), std::string::npos) << v.status().message();
  TritonCompileRequest r;
  r.source = "x = 1\n";
  r.kernel = "k";
  Result<std::shared_ptr<const CompiledTriton>> k = c.compile(r);
  ASSERT_FALSE(k.ok());
  EXPECT_EQ(k.status().code(), StatusCode::kFailedPrecondition);
  // A python that runs but has no triton (the system's, where it has none) says how to fix it.
  if (std::filesystem::exists("/usr/bin/python3")) {
    TritonOptions sys;
    sys.python = "/usr/bin/python3";
    TritonCompiler s(sys);
    Result<std::string> sv = s.version();
    if (!sv.ok()) {
      EXPECT_EQ(sv.status().code(), StatusCode::kFailedPrecondition);
      EXPECT_NE(sv.status().message().find("pip install triton"), std::string::npos) << sv.status().message();
    }
  }
}

TEST(TritonCompile, CommittedPlansCompileToSm90CubinsAndAreCached) {
  SKIP_WITHOUT_TRITON();
  std::string cache = ::testing::TempDir() + "/vinci_triton_cache_test";
  std::filesystem::remove_all(cache);
  std::filesystem::create_directories(cache);
  TritonOptions o;
  o.cache_dir = cache;
  TritonCompiler c(o);
  int compiled = 0;
  // Three plans of different families keep this test short; gpu_triton_bench compiles them all.
  for (const char* file : {"L1_019_relu.md", "L1_040_layer_norm.md", "L2_009_gemm_sub_mul_relu.md"}) {
    std::string id = std::string(file).substr(0, 6);
    Result<Plan> p = parse_model_plan(read(plans_dir() + "/" + file), task(id));
    ASSERT_TRUE(p.ok()) << file << ": " << p.status().to_string();
    for (const PlanStep& s : p->steps) {
      Result<TritonCompileRequest> r = triton_request(*p, s, env_for(*p, task(id), "full"), 90);
      ASSERT_TRUE(r.ok()) << r.status().to_string();
      Result<std::shared_ptr<const CompiledTriton>> k = c.compile(*r);
      ASSERT_TRUE(k.ok()) << file << ": " << k.status().to_string();
      const TritonKernelMeta& m = (*k)->meta;
      EXPECT_EQ(m.name, s.kernel);
      EXPECT_EQ(m.num_warps, s.triton.num_warps);
      EXPECT_EQ(m.params, r->signature);
      EXPECT_EQ(triton_meta_unsupported(m), "") << file;
      EXPECT_NE(m.options.find("arch=sm_90"), std::string::npos) << m.options;
      EXPECT_EQ((*k)->cubin.compare(0, 4,
                                    "\x7f"
                                    "ELF"),
                0);
      ++compiled;
    }
  }
  EXPECT_EQ(c.misses(), compiled);
  // The same requests again: memory hits. A new compiler over the folder: disk hits, same bytes.
  TritonCompiler fresh(o);
  Result<Plan> p = parse_model_plan(read(plans_dir() + "/L1_019_relu.md"), task("L1_019"));
  Result<TritonCompileRequest> r = triton_request(*p, p->steps[0], env_for(*p, task("L1_019"), "full"), 90);
  auto first = c.compile(*r);
  auto from_disk = fresh.compile(*r);
  ASSERT_TRUE(first.ok() && from_disk.ok());
  EXPECT_EQ(c.hits(), 1);
  EXPECT_EQ(fresh.hits(), 1);
  EXPECT_EQ(fresh.misses(), 0);
  EXPECT_EQ((*from_disk)->cubin, (*first)->cubin);
  EXPECT_TRUE((*from_disk)->meta == (*first)->meta);
  // Another constexpr is another kernel.
  TritonCompileRequest other = *r;
  other.constexprs["BLOCK"] = 512;
  auto k512 = c.compile(other);
  ASSERT_TRUE(k512.ok());
  EXPECT_NE((*k512)->key, (*first)->key);
}

TEST(TritonCompile, FailuresAreCleanRejectionsWithTritonsMessage) {
  SKIP_WITHOUT_TRITON();
  TritonOptions o;
  o.timeout_s = 20;
  TritonCompiler c(o);
  std::string dir = plans_dir() + "/hostile/";
  auto request = [&](const std::string& file) {
    Result<Plan> p = parse_model_plan(read(dir + file), task("L1_019"));
    EXPECT_TRUE(p.ok()) << p.status().to_string();
    Result<TritonCompileRequest> r = triton_request(*p, p->steps[0], env_for(*p, task("L1_019"), "small"), 90);
    EXPECT_TRUE(r.ok());
    return *r;
  };
  auto syntax = c.compile(request("L1_019_syntax_error.md"));
  ASSERT_FALSE(syntax.ok());
  EXPECT_EQ(syntax.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(syntax.status().message().find("does not load as a Python module: line 8 of the module"), std::string::npos)
      << syntax.status().message();
  auto arange = c.compile(request("L1_019_arange_not_power_of_2.md"));
  ASSERT_FALSE(arange.ok());
  EXPECT_NE(arange.status().message().find("power of 2"), std::string::npos) << arange.status().message();
  EXPECT_NE(arange.status().message().find("relu_kernel does not compile with Triton"), std::string::npos);
  // A kernel may launch without a constexpr that has a default; a signature that does not fit is refused.
  TritonCompileRequest r = request("L1_019_wrong_result.md");
  r.signature.pop_back();
  auto arity = c.compile(r);
  ASSERT_FALSE(arity.ok());
  EXPECT_NE(arity.status().message().find("parameter 'n' has no argument"), std::string::npos)
      << arity.status().message();
  // The time limit: a module that sleeps when imported is stopped.
  TritonOptions quick = o;
  quick.timeout_s = 3;
  TritonCompiler q(quick);
  auto slow = q.compile(request("L1_019_compile_forever.md"));
  ASSERT_FALSE(slow.ok());
  EXPECT_EQ(slow.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(slow.status().message().find("exceeded its time limit of 3 s"), std::string::npos)
      << slow.status().message();
  // The hostile plans that fail only on the GPU compile.
  for (const char* file : {"L1_019_out_of_bounds.md", "L1_019_endless_loop.md", "L1_019_race.md",
                           "L1_019_writes_input.md", "L1_019_half_written.md", "L1_019_grid_2pow32.md"}) {
    Result<Plan> p = parse_model_plan(read(dir + file), task("L1_019"));
    ASSERT_TRUE(p.ok());
    for (const PlanStep& s : p->steps) {
      auto k = c.compile(*triton_request(*p, s, env_for(*p, task("L1_019"), "small"), 90));
      EXPECT_TRUE(k.ok()) << file << ": " << k.status().to_string();
    }
  }
}

}  // namespace
}  // namespace vinci

// Triton kernels without a GPU: the model-facing triton block and its launches, the plan JSON of a
// Triton launch, the launch metadata codec, the sim world's verdict, and (where Triton is
// installed: scripts/setup.sh installs it) compiling the plans of tests/gpu/triton_plans to sm_90
// cubins, the cache, compile errors, the compile time limit and a missing Triton; and the compile
// sandbox, each of its properties against a module written to break it.
#include "gpu/compile/triton.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <csignal>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <random>
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

// ---------------------------------------------------------------------------------------------
// The compile sandbox (docs/live_evaluator.md, "Compile sandbox"). Each test hands the compiler a
// module whose top-level code (run at import, before any kernel is compiled) tries to break one
// property, and reports what it managed in the exception it raises: the compile error is what
// the test reads, as the model would.

// The seed of the secrets and markers these tests make up: VINCI_TEST_SEED, else random; printed.
uint64_t sandbox_seed() {
  static uint64_t seed = [] {
    const char* s = std::getenv("VINCI_TEST_SEED");
    uint64_t v =
        s && *s ? std::strtoull(s, nullptr, 10) : (uint64_t{std::random_device{}()} << 32) ^ std::random_device{}();
    std::cout << "sandbox tests: VINCI_TEST_SEED=" << v << std::endl;
    return v;
  }();
  return seed;
}

// A made-up value of 12 hex digits, distinct per call (splitmix64 over the seed).
std::string made_up() {
  static uint64_t n = 0;
  uint64_t z = sandbox_seed() + 0x9e3779b97f4a7c15ULL * ++n;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  z ^= z >> 31;
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(z));
  return std::string(buf, 12);
}

std::string with(std::string text, const std::map<std::string, std::string>& values) {
  for (const auto& [from, to] : values)
    for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size()))
      text.replace(at, from.size(), to);
  return text;
}

// A module: the hostile top-level code, then a kernel that compiles.
Result<std::shared_ptr<const CompiledTriton>> compile_module(TritonCompiler& c, const std::string& top) {
  TritonCompileRequest r;
  r.source = top + R"(

import triton
import triton.language as tl


@triton.jit
def k(x_ptr):
    tl.store(x_ptr, 1.0)
)";
  r.kernel = "k";
  r.signature = {"*fp32"};
  return c.compile(r);
}

// The compile error a hostile module gets; "" (and a test failure) when it compiled.
std::string compile_error(TritonCompiler& c, const std::string& top) {
  Result<std::shared_ptr<const CompiledTriton>> k = compile_module(c, top);
  EXPECT_FALSE(k.ok()) << "the module compiled";
  if (k.ok()) return "";
  EXPECT_EQ(k.status().code(), StatusCode::kInvalidArgument) << k.status().to_string();
  return k.status().message();
}

// The processes of this machine whose name (/proc/PID/comm) is name.
std::vector<std::string> processes_named(const std::string& name) {
  std::vector<std::string> pids;
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    std::string pid = e.path().filename().string();
    if (pid.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string comm = read(e.path().string() + "/comm");
    if (!comm.empty() && comm.back() == '\n') comm.pop_back();
    if (comm == name) pids.push_back(pid);
  }
  return pids;
}

bool sandboxed(TritonCompiler& c) { return c.sandbox_description().rfind("bwrap:", 0) == 0; }

// Properties only bwrap gives (the filesystem, other processes, processes left behind) are tested
// where it runs; elsewhere the test says why it skipped.
#define SKIP_WITHOUT_SANDBOX(c)                                                                      \
  do {                                                                                               \
    if (!sandboxed(c))                                                                               \
      GTEST_SKIP() << "the compile sandbox cannot run here (scripts/setup.sh installs bubblewrap): " \
                   << (c).sandbox_description();                                                     \
  } while (0)

TEST(TritonSandbox, DescribesWhatItRunsIn) {
  SKIP_WITHOUT_TRITON();
  TritonCompiler c;
  std::string d = c.sandbox_description();
  EXPECT_NE(d.find("env allowlist"), std::string::npos) << d;
  EXPECT_NE(d.find("limits cpu=60s as=8GiB fsize=64MiB nproc=64"), std::string::npos) << d;
  EXPECT_NE(d.find("core=0"), std::string::npos) << d;
  // The module cannot lower what the out-of-memory killer sees (raising is all uid 65534 may do).
  if (d.find("oom_score_adj=1000") != std::string::npos && d.find("uid 0,") == std::string::npos) {
    std::string error = compile_error(c, R"(
import os
with open("/proc/self/oom_score_adj", "w") as f:
    f.write("-1000")
)");
    EXPECT_TRUE(error.find("Permission denied") != std::string::npos ||
                error.find("Operation not permitted") != std::string::npos)
        << error;
  }
  if (sandboxed(c)) {
    EXPECT_NE(d.find("read-only fs, pid+net+ipc namespace"), std::string::npos) << d;
    EXPECT_TRUE(c.network_isolated());
    if (::geteuid() == 0) {
      EXPECT_NE(d.find("uid 65534"), std::string::npos) << d;
    }
  }
  TritonOptions off;
  off.sandbox = false;
  off.limits.cpu_s = 0;
  off.limits.file_size_bytes = 3LL << 20;
  TritonCompiler o(off);
  std::string od = o.sandbox_description();
  EXPECT_EQ(od.rfind("none (TritonOptions::sandbox is off): env allowlist", 0), 0u) << od;
  EXPECT_NE(od.find("cpu=none as=8GiB fsize=3MiB"), std::string::npos) << od;
}

// Secrets: the environment is an allowlist, and a name that looks like a secret never passes.
TEST(TritonSandbox, SecretsInTheEnvironmentStayOut) {
  SKIP_WITHOUT_TRITON();
  const std::map<std::string, std::string> secrets = {
      {"OPENAI_API_KEY", "sk-" + made_up()}, {"VINCI_TEST_SECRET", made_up()}, {"LC_AUTH_TOKEN", made_up()}};
  for (const auto& [k, v] : secrets) ::setenv(k.c_str(), v.c_str(), 1);
  TritonCompiler c;
  std::string error = compile_error(c, R"(
import os
raise RuntimeError("environment: %r" % sorted(os.environ.items()))
)");
  // The module did run and print its environment: the compile's own variables are there.
  EXPECT_NE(error.find("'TRITON_CACHE_DIR', '/tmp/vinci_triton_"), std::string::npos) << error;
  EXPECT_NE(error.find("'HOME', '/tmp/vinci_triton_"), std::string::npos) << error;
  // A compile that succeeds carries none of them either.
  Result<std::shared_ptr<const CompiledTriton>> k = compile_module(c, "import os\nx = dict(os.environ)\n");
  ASSERT_TRUE(k.ok()) << k.status().to_string();
  for (const auto& [name, value] : secrets) {
    EXPECT_EQ(error.find(value), std::string::npos) << name << " reached the compile: " << error;
    EXPECT_EQ(error.find(name), std::string::npos) << name << " reached the compile: " << error;
    EXPECT_EQ((*k)->cubin.find(value), std::string::npos) << name;
    EXPECT_EQ(encode_triton_meta((*k)->meta).find(value), std::string::npos) << name;
    ::unsetenv(name.c_str());
  }
}

// Other processes: the harness's environment and command line are out of reach, and so is the
// harness itself (signals, ptrace).
TEST(TritonSandbox, OtherProcessesAreNotVisible) {
  SKIP_WITHOUT_TRITON();
  std::string secret = made_up();
  ::setenv("VINCI_TEST_SECRET", secret.c_str(), 1);
  TritonCompiler c;
  SKIP_WITHOUT_SANDBOX(c);
  std::string error = compile_error(c, with(R"(
import ctypes, os
seen = []
for pid in os.listdir("/proc"):
    if pid.isdigit():
        for f in ("environ", "cmdline"):
            try:
                seen.append((pid, f, open("/proc/%s/%s" % (pid, f), "rb").read()))
            except OSError as e:
                seen.append((pid, f, e.strerror))
try:
    os.kill(@PID@, 0)
    seen.append("SIGNALLED the harness")
except OSError as e:
    seen.append(("kill the harness", e.strerror))
libc = ctypes.CDLL(None, use_errno=True)
if libc.ptrace(16, @PID@, 0, 0) == 0:  # PTRACE_ATTACH
    seen.append("TRACED the harness")
else:
    seen.append(("ptrace the harness", os.strerror(ctypes.get_errno())))
raise RuntimeError("seen: %r" % seen)
)",
                                            {{"@PID@", std::to_string(::getpid())}}));
  ::unsetenv("VINCI_TEST_SECRET");
  EXPECT_NE(error.find("seen: "), std::string::npos) << error;
  EXPECT_EQ(error.find(secret), std::string::npos) << "the harness's environment was read: " << error;
  EXPECT_EQ(error.find("'" + std::to_string(::getpid()) + "', 'environ'"), std::string::npos) << error;
  EXPECT_NE(error.find("('kill the harness', 'No such process')"), std::string::npos) << error;
  EXPECT_EQ(error.find("SIGNALLED"), std::string::npos) << error;
  EXPECT_NE(error.find("('ptrace the harness', 'No such process')"), std::string::npos) << error;
}

// The module's own output and exit: what it prints goes to stderr and does not break the answer;
// a module that exits the compile process is the candidate's failure, not the evaluator's.
TEST(TritonSandbox, AModuleThatPrintsOrExitsFailsOnlyItself) {
  SKIP_WITHOUT_TRITON();
  TritonCompiler c;
  Result<std::shared_ptr<const CompiledTriton>> printed = compile_module(c, R"(
import os
print("hello")
os.write(1, b'{"ok": false}')
)");
  EXPECT_TRUE(printed.ok()) << printed.status().to_string();
  std::string exited = compile_error(c, "import os\nos._exit(127)\n");
  EXPECT_NE(exited.find("the compile process exited with status 127 without an answer"), std::string::npos) << exited;
}

// The module may write the compile's answer itself (fd 3 is the answer channel): a forged
// answer is the candidate's failure, never the machine's (no_triton) or the harness's (a field of
// the wrong type once made the harness throw).
TEST(TritonSandbox, AForgedAnswerIsTheCandidatesFailure) {
  SKIP_WITHOUT_TRITON();
  TritonCompiler c;
  for (const char* forged : {R"({"ok": false, "kind": "no_triton", "error": "forged"})",
                             R"({"ok": false, "kind": "bad_request", "error": "forged"})",
                             R"({"ok": false, "kind": 5, "error": ["not", "text"]})"}) {
    Result<std::shared_ptr<const CompiledTriton>> r =
        compile_module(c, std::string("import os\nos.write(3, b'") + forged + "')\nos._exit(0)\n");
    ASSERT_FALSE(r.ok()) << forged;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << forged << ": " << r.status().to_string();
  }
}

// Descriptors: nothing the harness has open (a run's log, its sockets) reaches the compile, even
// without close-on-exec.
TEST(TritonSandbox, NoDescriptorOfTheHarnessIsInherited) {
  SKIP_WITHOUT_TRITON();
  std::string log = ::testing::TempDir() + "vinci_run_log_" + made_up();
  int fd = ::open(log.c_str(), O_CREAT | O_WRONLY, 0600);  // no O_CLOEXEC, as a careless library opens it
  ASSERT_GE(fd, 0);
  TritonCompiler c;
  std::string error = compile_error(c, R"(
import os
seen = []
for f in sorted(os.listdir("/proc/self/fd")):
    try:
        seen.append("%s -> %s" % (f, os.readlink("/proc/self/fd/" + f)))
    except OSError:  # the descriptor listdir used
        pass
raise RuntimeError("open: " + ", ".join(seen))
)");
  ::close(fd);
  std::filesystem::remove(log);
  EXPECT_NE(error.find("open: 0 -> "), std::string::npos) << error;
  EXPECT_EQ(error.find(log), std::string::npos) << error;
  // 0-2, and 3: the compile script's own answer channel (its stdout, kept before the module runs).
  // bwrap's info descriptor is not there either.
  EXPECT_NE(error.find(", 3 -> pipe:"), std::string::npos) << error;
  EXPECT_EQ(error.find(", 4 -> "), std::string::npos) << error;
}

// The filesystem: read-only outside the compile's own folder, which it can write.
TEST(TritonSandbox, NothingOutsideItsFolderIsWritable) {
  SKIP_WITHOUT_TRITON();
  TritonCompiler c;
  SKIP_WITHOUT_SANDBOX(c);
  std::string name = "vinci_sandbox_" + made_up();
  std::string home = std::getenv("HOME") ? std::getenv("HOME") : "/root";
  const std::vector<std::string> outside = {"/tmp/" + name, home + "/" + name, "/dev/shm/" + name,
                                            std::string(VINCI_SOURCE_DIR) + "/" + name};
  std::string paths;
  for (const auto& p : outside) paths += "\"" + p + "\", ";
  std::string error = compile_error(c, with(R"(
import os
tried = []
for path in [@PATHS@os.path.join(os.environ["TMPDIR"], "mine")]:
    try:
        with open(path, "w") as f:
            f.write("x")
        tried.append("WROTE " + path)
    except OSError as e:
        tried.append("%s: %s" % (path, e.strerror))
try:
    open("@SCRIPT@", "a").close()
    tried.append("WROTE the compile script")
except OSError as e:
    tried.append("the compile script: " + e.strerror)
raise RuntimeError("; ".join(tried))
)",
                                            {{"@PATHS@", paths}, {"@SCRIPT@", c.options().script}}));
  EXPECT_NE(error.find("WROTE /tmp/vinci_triton_"), std::string::npos) << "its own folder: " << error;
  for (const auto& p : outside) {
    EXPECT_FALSE(std::filesystem::exists(p)) << p;
    std::filesystem::remove(p);
    EXPECT_EQ(error.find("WROTE " + p), std::string::npos) << error;
  }
  EXPECT_NE(error.find("/tmp/" + name + ": Read-only file system"), std::string::npos) << error;
  EXPECT_NE(error.find("/dev/shm/" + name + ": Read-only file system"), std::string::npos) << error;
  // Read-only, and not its file either (uid 65534's error comes first where vinci runs as root).
  EXPECT_TRUE(error.find("the compile script: Read-only file system") != std::string::npos ||
              error.find("the compile script: Permission denied") != std::string::npos)
      << error;
}

// The home folder and the runs are not there at all: neither listed nor read.
TEST(TritonSandbox, HomeAndRunFoldersAreNotVisible) {
  SKIP_WITHOUT_TRITON();
  TritonCompiler c;
  SKIP_WITHOUT_SANDBOX(c);
  std::string tag = made_up();
  std::string home = std::getenv("HOME") ? std::getenv("HOME") : "/root";
  std::string run = ::testing::TempDir() + "vinci_run_" + tag;
  // POSIX calls, not std::filesystem, in the sandbox tests: the GPU machine's libtorch exports its
  // own copies of some std::filesystem functions (docs/live_evaluator.md, the Triton path).
  ASSERT_EQ(::mkdir(run.c_str(), 0755), 0) << run;
  std::ofstream(run + "/records.log") << "run record " << tag;
  char cwd[4096] = {0};
  ASSERT_NE(::getcwd(cwd, sizeof cwd), nullptr);
  std::string home_file = home + "/.vinci_sandbox_" + tag;
  std::ofstream(home_file) << "home file " << tag;
  std::string error =
      compile_error(c, with(R"(
import os
seen = []
for d in ("@HOME@", "@RUN@", "@CWD@"):
    try:
        seen.append("LISTED " + "|".join(sorted(os.listdir(d))))
    except OSError as e:
        seen.append("cannot list: " + e.strerror)
for f in ("@HOME@/.vinci_sandbox_@TAG@", "@RUN@/records.log"):
    try:
        seen.append("READ " + open(f).read())
    except OSError as e:
        seen.append("cannot read: " + e.strerror)
raise RuntimeError("; ".join(seen))
)",
                            {{"@HOME@", home}, {"@RUN@", run}, {"@TAG@", tag}, {"@CWD@", std::string(cwd)}}));
  ::unlink(home_file.c_str());
  ::unlink((run + "/records.log").c_str());
  ::rmdir(run.c_str());
  EXPECT_NE(error.find("cannot read: No such file or directory; cannot read: No such file or directory"),
            std::string::npos)
      << error;
  EXPECT_EQ(error.find("READ "), std::string::npos) << error;
  EXPECT_EQ(error.find(tag), std::string::npos) << error;  // in no listing, in no file read
  EXPECT_EQ(error.find("records.log"), std::string::npos) << error;
}

// Processes the module starts end with the compile: a daemon (double fork, setsid) is gone when
// compile() returns, and compile() returns when the module's process ends, not when the daemon
// would.
TEST(TritonSandbox, ADaemonDiesWithTheCompile) {
  SKIP_WITHOUT_TRITON();
  TritonCompiler c;
  SKIP_WITHOUT_SANDBOX(c);
  std::string marker = "vd" + made_up();
  std::string error = compile_error(c, with(R"(
import os, time
r, w = os.pipe()
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        with open("/proc/self/comm", "w") as f:
            f.write("@MARKER@")
        os.write(w, b"up")
        time.sleep(3600)
    os._exit(0)
os.close(w)
raise RuntimeError("the daemon is " + os.read(r, 2).decode())
)",
                                            {{"@MARKER@", marker}}));
  std::vector<std::string> left = processes_named(marker);
  EXPECT_NE(error.find("the daemon is up"), std::string::npos) << error;
  EXPECT_EQ(error.find("exceeded its time limit"), std::string::npos) << error;
  EXPECT_TRUE(left.empty()) << "the daemon outlived the compile: pid " << left[0];
  for (const auto& pid : left) ::kill(std::stoi(pid), SIGKILL);
}

// A fork bomb stops at the process limit, fails the compile naming it, and leaves nothing behind.
TEST(TritonSandbox, AForkBombStopsAtTheProcessLimit) {
  SKIP_WITHOUT_TRITON();
  TritonOptions o;
  o.limits.processes = 16;
  TritonCompiler c(o);
  SKIP_WITHOUT_SANDBOX(c);
  std::string d = c.sandbox_description();
  if (d.find("nproc=16 (") != std::string::npos) GTEST_SKIP() << "the process limit does not hold here: " << d;
  std::string marker = "vf" + made_up();
  std::string error = compile_error(c, with(R"(
import os
r, w = os.pipe()
for n in range(200):
    if os.fork() == 0:
        with open("/proc/self/comm", "w") as f:
            f.write("@MARKER@")
        os.read(r, 1)
        os._exit(0)
raise RuntimeError("forked 200 processes")
)",
                                            {{"@MARKER@", marker}}));
  std::vector<std::string> left = processes_named(marker);
  EXPECT_NE(error.find("BlockingIOError: [Errno 11] Resource temporarily unavailable"), std::string::npos) << error;
  EXPECT_NE(error.find("(the compile's process limit: 16 processes and threads"), std::string::npos) << error;
  EXPECT_TRUE(left.empty()) << left.size() << " of its processes outlived the compile";
  for (const auto& pid : left) ::kill(std::stoi(pid), SIGKILL);
  // The machine and the compiler are fine: the next compile works.
  Result<std::shared_ptr<const CompiledTriton>> k = compile_module(c, "");
  EXPECT_TRUE(k.ok()) << k.status().to_string();
}

// Memory: an allocation past the address space limit fails, and the error names the limit. Both
// allocations would succeed without it (the mapping is never touched).
TEST(TritonSandbox, MemoryPastTheLimitIsRejectedNamingIt) {
  SKIP_WITHOUT_TRITON();
  TritonOptions o;
  o.limits.memory_bytes = 1LL << 30;
  TritonCompiler c(o);
  if (c.sandbox_description().find("no limits") != std::string::npos) GTEST_SKIP() << c.sandbox_description();
  std::string mapped = compile_error(c, R"(
import mmap
m = mmap.mmap(-1, 4 << 30)
raise RuntimeError("mapped 4 GiB")
)");
  EXPECT_NE(mapped.find("[Errno 12] Cannot allocate memory"), std::string::npos) << mapped;
  EXPECT_NE(mapped.find("(the compile's memory limit: 1 GiB of address space)"), std::string::npos) << mapped;
  std::string allocated = compile_error(c, R"(
x = bytearray(2 << 30)
raise RuntimeError("allocated 2 GiB")
)");
  EXPECT_NE(allocated.find("MemoryError"), std::string::npos) << allocated;
  EXPECT_NE(allocated.find("(the compile's memory limit: 1 GiB of address space)"), std::string::npos) << allocated;
}

// File size: a write past the limit fails (EFBIG; Python ignores SIGXFSZ), or, for a process that
// takes SIGXFSZ's default action, ends it; either way the error names the limit.
TEST(TritonSandbox, AFilePastTheSizeLimitIsRejectedNamingIt) {
  SKIP_WITHOUT_TRITON();
  TritonOptions o;
  o.limits.file_size_bytes = 1LL << 20;
  TritonCompiler c(o);
  if (c.sandbox_description().find("no limits") != std::string::npos) GTEST_SKIP() << c.sandbox_description();
  const char* write = R"(
import os
with open(os.path.join(os.environ["TMPDIR"], "big"), "wb") as f:
    f.write(b"x" * (2 << 20))
raise RuntimeError("wrote 2 MiB")
)";
  std::string efbig = compile_error(c, write);
  EXPECT_NE(efbig.find("File too large"), std::string::npos) << efbig;
  EXPECT_NE(efbig.find("(the compile's file size limit: 1 MiB per file)"), std::string::npos) << efbig;
  std::string killed =
      compile_error(c, std::string("import signal\nsignal.signal(signal.SIGXFSZ, signal.SIG_DFL)\n") + write);
  EXPECT_NE(killed.find("the compile process wrote a file past its file size limit of 1 MiB (SIGXFSZ)"),
            std::string::npos)
      << killed;
}

// CPU time: a module that spins is stopped at the CPU limit (well before the wall-clock limit),
// by SIGXCPU, or by SIGKILL a second later when it ignores SIGXCPU; the error names the limit.
TEST(TritonSandbox, CpuTimePastTheLimitIsRejectedNamingIt) {
  SKIP_WITHOUT_TRITON();
  TritonOptions o;
  o.limits.cpu_s = 1;
  TritonCompiler c(o);
  if (c.sandbox_description().find("no limits") != std::string::npos) GTEST_SKIP() << c.sandbox_description();
  std::string spun = compile_error(c, "while True:\n    pass\n");
  EXPECT_NE(spun.find("the compile process used up its CPU time limit of 1 s (SIGXCPU)"), std::string::npos) << spun;
  std::string ignored = compile_error(c, R"(
import signal
signal.signal(signal.SIGXCPU, signal.SIG_IGN)
while True:
    pass
)");
  EXPECT_NE(ignored.find("killed (SIGKILL): past its CPU time limit's hard limit of 2 s"), std::string::npos)
      << ignored;
}

// Ways out that do not work: the harness's sockets (abstract Unix, TCP on loopback) are in another
// network namespace, and a symbolic link the module leaves in its folder is removed as a link, not
// followed when the folder is removed.
TEST(TritonSandbox, SocketsAndLinksOutDoNotReachTheHost) {
  SKIP_WITHOUT_TRITON();
  TritonCompiler c;
  SKIP_WITHOUT_SANDBOX(c);
  std::string tag = made_up();
  int unix_fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un ua{};
  ua.sun_family = AF_UNIX;
  std::string abstract = "vinci_test_" + tag;
  std::memcpy(ua.sun_path + 1, abstract.data(), abstract.size());
  socklen_t ulen = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + abstract.size());
  ASSERT_EQ(::bind(unix_fd, reinterpret_cast<sockaddr*>(&ua), ulen), 0);
  ASSERT_EQ(::listen(unix_fd, 4), 0);
  int tcp_fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in ta{};
  ta.sin_family = AF_INET;
  ta.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(tcp_fd, reinterpret_cast<sockaddr*>(&ta), sizeof ta), 0);
  ASSERT_EQ(::listen(tcp_fd, 4), 0);
  socklen_t tlen = sizeof ta;
  ::getsockname(tcp_fd, reinterpret_cast<sockaddr*>(&ta), &tlen);
  std::string victim = ::testing::TempDir() + "vinci_victim_" + tag;
  ASSERT_EQ(::mkdir(victim.c_str(), 0755), 0) << victim;
  std::ofstream(victim + "/keep") << "keep";
  std::string error = compile_error(
      c, with(R"(
import os, socket
seen = []
for family, address in ((socket.AF_UNIX, "\0@ABSTRACT@"), (socket.AF_INET, ("127.0.0.1", @PORT@))):
    s = socket.socket(family, socket.SOCK_STREAM)
    try:
        s.connect(address)
        seen.append("CONNECTED %r" % (address,))
    except OSError as e:
        seen.append("%s: %s" % (family.name, e.strerror))
own = os.environ["TMPDIR"]
os.symlink("@VICTIM@", os.path.join(own, "dir"))
os.symlink("@VICTIM@/keep", os.path.join(own, "file"))
os.makedirs(os.path.join(own, "deep", "er"))
os.symlink("@VICTIM@", os.path.join(own, "deep", "er", "dir"))
try:
    seen.append("READ " + open(os.path.join(own, "file")).read())
except OSError as e:
    seen.append("through the link: " + e.strerror)
raise RuntimeError("; ".join(seen))
)",
              {{"@ABSTRACT@", abstract}, {"@PORT@", std::to_string(ntohs(ta.sin_port))}, {"@VICTIM@", victim}}));
  ::close(unix_fd);
  ::close(tcp_fd);
  EXPECT_NE(error.find("AF_UNIX: Connection refused"), std::string::npos) << error;
  EXPECT_NE(error.find("AF_INET: "), std::string::npos) << error;
  EXPECT_EQ(error.find("CONNECTED"), std::string::npos) << error;
  EXPECT_NE(error.find("through the link: No such file or directory"), std::string::npos) << error;
  EXPECT_EQ(::access((victim + "/keep").c_str(), F_OK), 0) << "removing the compile's folder followed its links";
  ::unlink((victim + "/keep").c_str());
  ::rmdir(victim.c_str());
}

}  // namespace
}  // namespace vinci

// Every generated kernel compiles with NVRTC for sm_90 (no GPU needed): every task's default
// plan, and >= 20 seeded random knob settings per code-generator family.
#include <stdlib.h>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>

#include <gtest/gtest.h>

#include "core/rng.h"
#include "gpu/codegen/codegen.h"
#include "gpu/compile/cubin.h"
#include "gpu/compile/nvrtc.h"
#include "tests/gpu/sim_test_util.h"

namespace vinci {
namespace {

using simtest::suite;
using simtest::task;

uint64_t test_seed() {
  const char* env = std::getenv("VINCI_TEST_SEED");
  uint64_t seed = env ? std::strtoull(env, nullptr, 10) : 20261202;
  std::printf("seed %llu (set VINCI_TEST_SEED to change)\n", static_cast<unsigned long long>(seed));
  return seed;
}

std::vector<double>& compile_times() {
  static std::vector<double> t;
  return t;
}

void compile_all(NvrtcCompiler& nvrtc, const Plan& plan, const std::string& what) {
  for (const auto& k : plan.kernels) {
    Result<std::shared_ptr<const CompiledKernel>> r = nvrtc.compile(k.source, k.name + ".cu");
    ASSERT_TRUE(r.ok()) << what << " kernel " << k.name << ":\n" << r.status().message() << "\n" << k.source;
    EXPECT_FALSE((*r)->image.empty());
    if ((*r)->compile_ms > 0) compile_times().push_back((*r)->compile_ms);
  }
}

TEST(Compile, EveryDefaultPlanCompiles) {
  NvrtcCompiler nvrtc;
  int kernels = 0;
  for (const Task& t : suite().tasks) {
    Result<Plan> p = default_plan(t);
    ASSERT_TRUE(p.ok()) << t.id << ": " << p.status().to_string();
    compile_all(nvrtc, *p, t.id + " default");
    kernels += static_cast<int>(p->kernels.size());
  }
  std::printf("default plans: %zu tasks, %d kernels\n", suite().tasks.size(), kernels);
  EXPECT_GT(kernels, 40);
}

TEST(Compile, TwentyRandomSettingsPerFamilyCompile) {
  uint64_t seed = test_seed();
  NvrtcCompiler nvrtc;
  for (const char* family : {"elementwise", "row_reduction", "gemm"}) {
    const std::string probe = std::string(family) == "elementwise" ? "ew.block"
                              : std::string(family) == "gemm"      ? "gemm.tile_m"
                                                                   : "row.block";
    std::vector<const Task*> tasks;
    for (const Task& t : suite().tasks)
      if (knob_space(t).index_of(probe) >= 0) tasks.push_back(&t);
    ASSERT_FALSE(tasks.empty()) << family;
    int compiled = 0;
    for (int i = 0; compiled < 24; ++i) {
      ASSERT_LT(i, 200) << "too few kernels of family " << family;
      const Task& t = *tasks[static_cast<size_t>(i) % tasks.size()];
      Stream s(RngKey::root(seed).with("test", "compile").with("family", family).with("i", i));
      KnobSpace space = knob_space(t);
      KnobSetting setting = random_setting(space, s);
      Result<Plan> p = generate_plan(t, setting);
      ASSERT_TRUE(p.ok()) << t.id << ": " << p.status().to_string();
      for (const auto& k : p->kernels) {
        if (kernel_family_name(k.family) != std::string(family)) continue;
        Result<std::shared_ptr<const CompiledKernel>> r = nvrtc.compile(k.source, k.name + ".cu");
        ASSERT_TRUE(r.ok()) << t.id << " setting " << i << " kernel " << k.name << ":\n"
                            << r.status().message() << "\n"
                            << k.source;
        if ((*r)->compile_ms > 0) compile_times().push_back((*r)->compile_ms);
        ++compiled;
      }
    }
    std::printf("%s: %d random-setting kernels compiled\n", family, compiled);
  }
  // The figures (bench/gpu's nvrtc_compile_bench measures them properly).
  auto t = compile_times();
  std::sort(t.begin(), t.end());
  if (!t.empty()) {
    std::printf("NVRTC sm_90 compile time per kernel over %zu kernels: median %.1f ms, p95 %.1f ms\n", t.size(),
                t[t.size() / 2], t[std::min(t.size() - 1, t.size() * 95 / 100)]);
  }
}

// The tensor-core paths through NVRTC in each precision (tf32 m16n16k8; bf16 and fp16 m16n16k16,
// their tiles in shared memory as 16-bit values): plain, batched, transposed, matrix-vector and
// fused-epilogue products, at the default tiles and at the largest tiles with tile_k 8 (raised to
// 16 for the 16-bit paths), 64 threads (raised) and no edge checks.
TEST(Compile, GemmKernelsCompileInEveryTensorCorePrecision) {
  NvrtcCompiler nvrtc;
  int kernels = 0;
  for (const char* precision : {"tf32", "bf16", "fp16"}) {
    for (const char* id : {"L1_001", "L1_003", "L1_004", "L1_018", "L2_081"}) {
      for (bool large : {false, true}) {
        std::map<std::string, std::string> knobs = {{"gemm.tensor_cores", precision}};
        if (large)
          knobs.insert({{"gemm.tile_m", "128"},
                        {"gemm.tile_n", "128"},
                        {"gemm.tile_k", "8"},
                        {"gemm.threads", "64"},
                        {"gemm.bounds", "unchecked"}});
        Result<Plan> p = generate_plan(task(id), knobs);
        ASSERT_TRUE(p.ok()) << id << " " << precision << ": " << p.status().to_string();
        for (const auto& k : p->kernels) {
          if (k.family != KernelFamily::kGemm) continue;
          EXPECT_EQ(kPrecisions.name(k.precision), std::string(precision));
          EXPECT_TRUE(k.tensor_cores);
          if (std::string(precision) != "tf32") {
            EXPECT_GE(k.tile[2], 16) << id;  // a 16-deep fragment
            EXPECT_NE(k.source.find(std::string(precision) == "bf16" ? "__nv_bfloat16" : "__half"), std::string::npos);
          }
          Result<std::shared_ptr<const CompiledKernel>> r = nvrtc.compile(k.source, k.name + ".cu");
          ASSERT_TRUE(r.ok()) << id << " " << precision << (large ? " large" : "") << ":\n"
                              << r.status().message() << "\n"
                              << k.source;
          ++kernels;
        }
      }
    }
  }
  EXPECT_EQ(kernels, 30);
}

TEST(Compile, EveryRowTaskCompilesWithTheInnerTileStrategy) {
  // inner_tile writes its own set-up, reduction and guarded stores: every row op, fused epilogue
  // and the float4 and two-pass paths go through NVRTC once.
  NvrtcCompiler nvrtc;
  int kernels = 0;
  for (const Task& t : suite().tasks) {
    if (knob_space(t).index_of("row.strategy") < 0) continue;
    for (const char* softmax : {"online", "two_pass"}) {
      Result<Plan> p = generate_plan(t, {{"row.strategy", "inner_tile"}, {"row.softmax", softmax}});
      ASSERT_TRUE(p.ok()) << t.id << ": " << p.status().to_string();
      for (const auto& k : p->kernels) {
        if (k.family != KernelFamily::kRowReduction) continue;
        EXPECT_EQ(k.reduction, "inner_tile") << t.id;
        EXPECT_NE(k.source.find("tile_reduce<"), std::string::npos) << t.id;
        Result<std::shared_ptr<const CompiledKernel>> r = nvrtc.compile(k.source, k.name + ".cu");
        ASSERT_TRUE(r.ok()) << t.id << " kernel " << k.name << ":\n" << r.status().message() << "\n" << k.source;
        ++kernels;
      }
    }
  }
  std::printf("inner_tile: %d row kernels compiled\n", kernels);
  EXPECT_GT(kernels, 40);
}

TEST(Compile, EveryLibraryGemmEpilogueCompiles) {
  NvrtcCompiler nvrtc;
  int kernels = 0;
  for (const Task& t : suite().tasks) {
    if (knob_space(t).index_of("gemm.impl") < 0) continue;
    Result<Plan> p = generate_plan(t, std::map<std::string, std::string>{{"gemm.impl", "library"}});
    ASSERT_TRUE(p.ok()) << t.id << ": " << p.status().to_string();
    compile_all(nvrtc, *p, t.id + " gemm.impl=library");
    kernels += static_cast<int>(p->kernels.size());
  }
  std::printf("library GEMM plans: %d kernels\n", kernels);
  EXPECT_GT(kernels, 20);
}

TEST(Compile, CacheHitsBySourceAddress) {
  NvrtcCompiler nvrtc;
  Result<Plan> p = default_plan(*suite().find("L1_019"));
  ASSERT_TRUE(p.ok());
  auto a = nvrtc.compile(p->kernels[0].source);
  auto b = nvrtc.compile(p->kernels[0].source);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->get(), b->get());
  EXPECT_EQ(nvrtc.hits(), 1);
  EXPECT_EQ(nvrtc.misses(), 1);
}

TEST(Compile, DiskCacheIsSharedBetweenCompilers) {
  char dir[] = "/tmp/vinci_nvrtc_cache_XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  NvrtcOptions opts;
  opts.cache_dir = dir;
  Result<Plan> p = default_plan(*suite().find("L1_023"));
  ASSERT_TRUE(p.ok());
  NvrtcCompiler first(opts);
  auto a = first.compile(p->kernels[0].source);
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  NvrtcCompiler second(opts);  // a new process would look the same: empty memory, same folder
  auto b = second.compile(p->kernels[0].source);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(second.hits(), 1);
  EXPECT_EQ(second.misses(), 0);
  EXPECT_EQ((*a)->image, (*b)->image);
  EXPECT_EQ((*a)->key, (*b)->key);
  // Other options, other key: a PTX compile does not reuse the cubin.
  NvrtcOptions ptx = opts;
  ptx.arch = "compute_90";
  NvrtcCompiler third(ptx);
  auto c = third.compile(p->kernels[0].source);
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE((*c)->is_ptx);
  EXPECT_NE((*c)->key, (*a)->key);
  EXPECT_NE((*c)->image.find(".entry"), std::string::npos);
}

TEST(Compile, BrokenSourceIsAnErrorWithTheLog) {
  NvrtcCompiler nvrtc;
  auto r = nvrtc.compile("extern \"C\" __global__ void k(float* x) { x[0] = undefined_thing; }", "broken.cu");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("undefined_thing"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("broken.cu"), std::string::npos);
}

}  // namespace
}  // namespace vinci

namespace vinci {
namespace {

// The live evaluator resets a candidate's device globals before each run from what this finds
// (docs/live_evaluator.md, "State between runs"): every writable global, static and managed ones
// included, must be in a listed section with a symbol to locate it by.
TEST(Compile, CubinGlobalSectionsListEveryWritableDeviceGlobal) {
  NvrtcCompiler nvrtc;
  const std::string source =
      "__device__ int counter;\n"
      "__device__ float cache[1 << 20];\n"
      "__device__ float init_vals[4] = {1, 2, 3, 4};\n"
      "static __device__ int hidden;\n"
      "__managed__ int managed;\n"
      "__constant__ float constants[16];\n"
      "extern \"C\" __global__ void k(float* o) {\n"
      "  o[threadIdx.x] = cache[threadIdx.x] + init_vals[1] + hidden + counter + managed + constants[0];\n"
      "  counter++; hidden++; cache[threadIdx.x] = o[threadIdx.x];\n"
      "}\n";
  Result<std::shared_ptr<const CompiledKernel>> bin = nvrtc.compile(source, "globals.cu");
  ASSERT_TRUE(bin.ok()) << bin.status().message();
  Result<std::vector<CubinGlobalSection>> sections = cubin_global_sections((*bin)->image);
  ASSERT_TRUE(sections.ok()) << sections.status().message();
  std::map<std::string, const CubinGlobalSection*> by_name;
  for (const auto& s : *sections) by_name[s.section] = &s;
  ASSERT_TRUE(by_name.count(".nv.global")) << "no .nv.global section";
  ASSERT_TRUE(by_name.count(".nv.global.init")) << "no .nv.global.init section";
  const CubinGlobalSection& zeroed = *by_name[".nv.global"];
  EXPECT_GE(zeroed.size, (uint64_t{1} << 22) + 12) << "cache (4 MiB), counter, hidden, managed";
  std::string names;
  for (const auto& s : *sections)
    for (const auto& [name, offset] : s.symbols) {
      names += name + " ";
      EXPECT_LT(offset, s.size) << name;
    }
  for (const char* want : {"counter", "cache", "init_vals", "hidden", "managed"})
    EXPECT_NE(names.find(want), std::string::npos) << want << " not among: " << names;
  EXPECT_EQ(names.find("constants"), std::string::npos) << "__constant__ memory is not writable by kernels";
}

TEST(Compile, CubinWithoutGlobalsAndDamagedImages) {
  NvrtcCompiler nvrtc;
  Result<std::shared_ptr<const CompiledKernel>> bin =
      nvrtc.compile("extern \"C\" __global__ void k(float* o) { o[threadIdx.x] = 1.0f; }\n", "plain.cu");
  ASSERT_TRUE(bin.ok()) << bin.status().message();
  Result<std::vector<CubinGlobalSection>> none = cubin_global_sections((*bin)->image);
  ASSERT_TRUE(none.ok()) << none.status().message();
  EXPECT_TRUE(none->empty());
  EXPECT_FALSE(cubin_global_sections("").ok());
  EXPECT_FALSE(cubin_global_sections("not an elf image at all, just text").ok());
  // Every prefix of a real image is refused or read without reading past its end (ASan checks the
  // latter in the sanitized build).
  const std::string& image = (*bin)->image;
  for (size_t n = 0; n < image.size(); n += 97) (void)cubin_global_sections(std::string_view(image).substr(0, n));
}

}  // namespace
}  // namespace vinci

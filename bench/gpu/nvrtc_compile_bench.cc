// Measures NVRTC compile time per generated kernel: every task's default plan plus N seeded
// random knob settings per task, each kernel compiled once by a fresh compiler (no cache hits).
// Prints median and p95 per code-generator family and overall.
//
//   gpu_nvrtc_bench [--arch sm_90|compute_90] [--random N] [--seed S] [--repeat R] [--opt NVRTC_OPTION]...
//
// Wall-clock timing on a shared machine is noisy: run it on an idle machine and compare runs.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "core/rng.h"
#include "gpu/codegen/codegen.h"
#include "gpu/compile/nvrtc.h"

namespace {

void report(const std::string& what, std::vector<double> t) {
  if (t.empty()) return;
  std::sort(t.begin(), t.end());
  std::printf("%-14s %5zu kernels  median %7.1f ms  p95 %7.1f ms  max %7.1f ms\n", what.c_str(), t.size(),
              t[t.size() / 2], t[std::min(t.size() - 1, t.size() * 95 / 100)], t.back());
}

}  // namespace

int main(int argc, char** argv) {
  std::string arch = "sm_90";
  int random = 3, repeat = 1;
  std::vector<std::string> extra;
  uint64_t seed = 1;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--arch"))
      arch = argv[i + 1];
    else if (!std::strcmp(argv[i], "--random"))
      random = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--seed"))
      seed = std::strtoull(argv[i + 1], nullptr, 10);
    else if (!std::strcmp(argv[i], "--repeat"))
      repeat = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--opt"))
      extra.push_back(argv[i + 1]);
    else {
      std::fprintf(stderr, "usage: gpu_nvrtc_bench [--arch A] [--random N] [--seed S] [--repeat R] [--opt O]...\n");
      return 2;
    }
  }
  vinci::Result<vinci::TaskSuite> suite = vinci::load_task_suite(vinci::default_task_dir());
  if (!suite.ok()) {
    std::fprintf(stderr, "%s\n", suite.status().to_string().c_str());
    return 2;
  }
  std::map<std::string, std::string> sources;  // source -> family, deduplicated
  for (const auto& t : suite->tasks) {
    std::vector<vinci::Plan> plans;
    if (auto p = vinci::default_plan(t); p.ok()) plans.push_back(*p);
    vinci::KnobSpace space = vinci::knob_space(t);
    for (int r = 0; r < random; ++r) {
      vinci::Stream s(vinci::RngKey::root(seed).with("bench", "nvrtc").with("task", t.id).with("r", r));
      if (auto p = vinci::generate_plan(t, vinci::random_setting(space, s)); p.ok()) plans.push_back(*p);
    }
    for (const auto& p : plans)
      for (const auto& k : p.kernels) sources.emplace(k.source, kernel_family_name(k.family));
  }
  for (const auto& e : extra) std::printf("extra nvrtc option %s\n", e.c_str());
  std::printf("arch %s, %zu distinct kernels, seed %llu, repeat %d, nvrtc %s\n", arch.c_str(), sources.size(),
              static_cast<unsigned long long>(seed), repeat, vinci::nvrtc_version().c_str());
  std::map<std::string, std::vector<double>> by_family;
  std::vector<double> all;
  for (int r = 0; r < repeat; ++r) {
    vinci::NvrtcOptions opts;
    opts.arch = arch;
    opts.extra = extra;
    vinci::NvrtcCompiler nvrtc(opts);  // fresh per repeat: every compile is a miss
    for (const auto& [src, family] : sources) {
      auto res = nvrtc.compile(src);
      if (!res.ok()) {
        std::fprintf(stderr, "%s\n", res.status().to_string().c_str());
        return 1;
      }
      by_family[family].push_back((*res)->compile_ms);
      all.push_back((*res)->compile_ms);
    }
  }
  for (const auto& [f, t] : by_family) report(f, t);
  report("all", all);
  return 0;
}

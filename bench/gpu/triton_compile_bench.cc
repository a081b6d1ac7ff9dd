// Triton compile time per kernel, cold and cached, beside NVRTC's for the code generator's plan of
// the same task. No GPU is needed.
//
//   gpu_triton_bench [--plans DIR] [--size full|small] [--cache DIR]
//
// For every reply in DIR (default tests/gpu/triton_plans; files named TASK_..., e.g.
// L1_019_relu.md) and every Triton launch in it: the compile with an empty cache (a Triton process
// of its own), again in the same compiler (memory hit) and in a new compiler over the same cache
// folder (disk hit, as a fresh worker finds it). Then NVRTC over the kernels of the generator's
// default plan of the task, cold and cached (disk). Prints one row a task and the medians.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gpu/codegen/codegen.h"
#include "gpu/compile/nvrtc.h"
#include "gpu/compile/triton.h"
#include "gpu/model_plan.h"
#include "gpu/shapes.h"
#include "gpu/task.h"

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace vinci;
  std::string dir = std::string(VINCI_SOURCE_DIR) + "/tests/gpu/triton_plans";
  std::string size = "full";
  std::string cache = "/tmp/vinci_triton_bench_cache";
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--plans"))
      dir = argv[i + 1];
    else if (!std::strcmp(argv[i], "--size"))
      size = argv[i + 1];
    else if (!std::strcmp(argv[i], "--cache"))
      cache = argv[i + 1];
    else {
      std::fprintf(stderr, "usage: gpu_triton_bench [--plans DIR] [--size full|small] [--cache DIR]\n");
      return 2;
    }
  }
  Result<TaskSuite> suite = load_task_suite(default_task_dir());
  if (!suite.ok()) {
    std::fprintf(stderr, "%s\n", suite.status().to_string().c_str());
    return 2;
  }
  std::filesystem::remove_all(cache);
  std::filesystem::create_directories(cache + "/triton");
  std::filesystem::create_directories(cache + "/nvrtc");
  TritonOptions to;
  to.cache_dir = cache + "/triton";
  TritonCompiler triton(to);
  Result<std::string> version = triton.version();
  if (!version.ok()) {
    std::fprintf(stderr, "gpu_triton_bench: %s\n", version.status().message().c_str());
    return 2;
  }
  std::printf("Triton %s (network isolated: %s), NVRTC %s, size %s\n", version->c_str(),
              triton.network_isolated() ? "yes" : "no", nvrtc_version().c_str(), size.c_str());
  std::printf("%-28s %8s %10s %10s %10s %8s %10s %10s\n", "plan", "kernels", "cold_ms", "memory_ms", "disk_ms",
              "nvrtc_k", "nvrtc_ms", "nvrtc_disk");
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().extension() == ".md") files.push_back(e.path().string());
  std::sort(files.begin(), files.end());
  std::vector<double> cold_all, memory_all, disk_all, nvrtc_all, nvrtc_disk_all;
  int failures = 0;
  for (const auto& file : files) {
    std::string base = std::filesystem::path(file).filename().string();
    std::string id = base.substr(0, 6);
    const Task* task = suite->find(id);
    if (!task) {
      std::fprintf(stderr, "%s: no task %s\n", base.c_str(), id.c_str());
      ++failures;
      continue;
    }
    std::ifstream in(file);
    std::stringstream text;
    text << in.rdbuf();
    Result<Plan> plan = parse_model_plan(text.str(), *task);
    if (!plan.ok()) {
      std::fprintf(stderr, "%s: %s\n", base.c_str(), plan.status().message().c_str());
      ++failures;
      continue;
    }
    SizeMap sizes = task->sizes.at(size);
    ExprEnv env;
    env.symbols = sizes;
    const Plan& p = *plan;
    env.buffer_shape = [&](const std::string& b) -> Result<std::vector<int64_t>> {
      const PlanBuffer* pb = p.find_buffer(b);
      if (!pb) return not_found("buffer " + b);
      return eval_shape(pb->shape, sizes);
    };
    std::vector<TritonCompileRequest> requests;
    for (const PlanStep& s : p.steps) {
      if (s.kind != StepKind::kKernel) continue;
      Result<TritonCompileRequest> r = triton_request(p, s, env, to.arch);
      if (r.ok()) requests.push_back(*r);
    }
    double cold = 0, memory = 0, disk = 0;
    bool ok = true;
    for (const auto& r : requests) {
      Clock::time_point t0 = Clock::now();
      auto c = triton.compile(r);
      cold += ms_since(t0);
      if (!c.ok()) {
        std::fprintf(stderr, "%s: %s\n", base.c_str(), c.status().message().c_str());
        ok = false;
        break;
      }
      t0 = Clock::now();
      auto again = triton.compile(r);
      memory += ms_since(t0);
      TritonCompiler fresh(to);
      (void)fresh.version();  // a worker asks once per process
      t0 = Clock::now();
      auto from_disk = fresh.compile(r);
      disk += ms_since(t0);
      if (!again.ok() || !from_disk.ok() || (*from_disk)->cubin != (*c)->cubin) ok = false;
    }
    if (!ok) {
      ++failures;
      continue;
    }
    // NVRTC over the generator's default plan of the task.
    double nvrtc_ms = 0, nvrtc_disk = 0;
    int nvrtc_kernels = 0;
    Result<Plan> generated = default_plan(*task);
    if (generated.ok()) {
      NvrtcOptions no;
      no.cache_dir = cache + "/nvrtc";
      NvrtcCompiler nvrtc(no);
      for (const PlanKernel& k : generated->kernels) {
        Clock::time_point t0 = Clock::now();
        auto c = nvrtc.compile(k.source, k.name + ".cu");
        nvrtc_ms += ms_since(t0);
        ++nvrtc_kernels;
        NvrtcCompiler fresh(no);
        t0 = Clock::now();
        auto d = fresh.compile(k.source, k.name + ".cu");
        nvrtc_disk += ms_since(t0);
        if (!c.ok() || !d.ok()) std::fprintf(stderr, "%s: nvrtc failed on %s\n", base.c_str(), k.name.c_str());
      }
    }
    size_t n = std::max<size_t>(1, requests.size());
    size_t nk = std::max(1, nvrtc_kernels);
    std::printf("%-28s %8zu %10.1f %10.3f %10.3f %8d %10.1f %10.3f\n", base.c_str(), requests.size(), cold / n,
                memory / n, disk / n, nvrtc_kernels, nvrtc_ms / nk, nvrtc_disk / nk);
    cold_all.push_back(cold / n);
    memory_all.push_back(memory / n);
    disk_all.push_back(disk / n);
    if (nvrtc_kernels) {
      nvrtc_all.push_back(nvrtc_ms / nk);
      nvrtc_disk_all.push_back(nvrtc_disk / nk);
    }
  }
  std::printf("%-28s %8s %10.1f %10.3f %10.3f %8s %10.1f %10.3f\n", "median (per kernel)", "", median(cold_all),
              median(memory_all), median(disk_all), "", median(nvrtc_all), median(nvrtc_disk_all));
  return failures ? 1 : 0;
}

// The trip of a KernelBench module's inputs and output between the worker and its runner
// (gpu/compile/module_runner.h): one run() of a forward that returns x + 0 on inputs of 16, 256 and
// 1024 MiB of float32, on the CPU device (the same conversation the GPU worker holds, less the
// copies to and from the device). At the full size the largest tasks send 6 GiB per run.
//
//   build/bin/module_transfer_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "gpu/compile/module_runner.h"

namespace vinci {
namespace {

const char* kReference = R"(import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return x + 0


def get_inputs():
    return [torch.rand(4)]


def get_init_inputs():
    return []
)";

const char* kModule = R"(import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return x + 0
)";

void BM_ModuleRunTrip(benchmark::State& state) {
  const int64_t mib = state.range(0);
  ModuleRunOptions o;
  o.python = "/usr/bin/python3";
  o.device = "cpu";
  ModuleRunner runner(o);
  Result<std::unique_ptr<ModuleSession>> s = runner.start(kModule, kReference, ModuleBackend::kTorch);
  if (!s.ok() || !(*s)->load().ok) {
    state.SkipWithError(s.ok() ? (*s)->load().error.c_str() : s.status().message().c_str());
    return;
  }
  const int64_t n = mib << 18;  // floats
  std::vector<float> in(static_cast<size_t>(n), 1.5f), out(static_cast<size_t>(n));
  ModuleTensor t;
  t.dtype = "float32";
  t.shape = {n};
  t.bytes = n * 4;
  t.data = reinterpret_cast<const char*>(in.data());
  int slot = 0;
  for (auto _ : state) {
    Result<ModuleRunAnswer> a = (*s)->run(
        slot, slot == 1, {t},
        [&](const ModuleTensor& o, const char* bytes, std::string*) {
          std::memcpy(out.data(), bytes, static_cast<size_t>(o.bytes));
          return true;
        },
        t.bytes);
    if (!a.ok() || !a->ok) {
      state.SkipWithError("the run failed");
      return;
    }
    slot = 1;
  }
  if (out[static_cast<size_t>(n - 1)] != 1.5f) state.SkipWithError("wrong output");
  state.SetBytesProcessed(state.iterations() * 2 * t.bytes);
}
BENCHMARK(BM_ModuleRunTrip)->Arg(16)->Arg(256)->Arg(1024)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace vinci

BENCHMARK_MAIN();

// The runner of KernelBench modules (gpu/compile/module_runner.h) with a real interpreter in the
// real sandbox, on the CPU: Debian's python3 with python3-torch (scripts/setup.sh installs both).
// The conversation is the one the GPU worker holds (docs/kernelbench_format.md, "Live
// evaluation"): the module is built as KernelBench builds a candidate, runs on the bytes it is
// sent and returns its output; what it does wrong (raising, writing its inputs, returning them,
// leaving threads, dying, hanging, answering too much) is its own failure, named for its author.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "gpu/compile/module_runner.h"
#include "tests/cli_test_util.h"

namespace vinci {
namespace {

const char* kPython = "/usr/bin/python3";  // Debian's, with python3-torch

const char* kReference = R"(import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, x):
        return x * self.scale + 1


def get_inputs():
    return [torch.rand(4, 3)]


def get_init_inputs():
    return [2.0]
)";

// A KernelBench module around forward's body (one argument x, the constructor's scale kept).
std::string module_with(const std::string& forward_body, const std::string& top = "") {
  return "import torch\nimport torch.nn as nn\n" + top +
         "\n\nclass ModelNew(nn.Module):\n"
         "    def __init__(self, scale):\n"
         "        super().__init__()\n"
         "        self.scale = scale\n"
         "        self.fc = nn.Linear(3, 3)\n\n"
         "    def forward(self, x):\n" +
         forward_body + "\n";
}

bool has_torch() {
  std::string out;
  return clitest::sh(std::string(kPython) + " -c 'import torch'", &out) == 0;
}

#define REQUIRE_TORCH() \
  if (!has_torch()) GTEST_SKIP() << kPython << " has no torch (scripts/setup.sh installs python3-torch)"

ModuleRunOptions cpu_options() {
  ModuleRunOptions o;
  o.python = kPython;
  o.device = "cpu";
  return o;
}

// A float32 [4, 3] input holding base, base + 1, ...
struct Input {
  std::vector<float> values;
  ModuleTensor tensor() const {
    ModuleTensor t;
    t.dtype = "float32";
    t.shape = {4, 3};
    t.bytes = static_cast<int64_t>(values.size() * sizeof(float));
    t.data = reinterpret_cast<const char*>(values.data());
    return t;
  }
};

Input input(float base) {
  Input in;
  for (int i = 0; i < 12; ++i) in.values.push_back(base + static_cast<float>(i));
  return in;
}

// Runs the forward on in; the output's floats in *out.
Result<ModuleRunAnswer> forward(ModuleSession& s, int slot, bool reuse, const Input& in, std::vector<float>* out,
                                int64_t cap = 1 << 20) {
  return s.run(
      slot, reuse, {in.tensor()},
      [out](const ModuleTensor& t, const char* bytes, std::string* why) {
        if (t.dtype != "float32") {
          *why = "dtype " + t.dtype;
          return false;
        }
        out->assign(static_cast<size_t>(t.bytes) / sizeof(float), 0.0f);
        std::memcpy(out->data(), bytes, static_cast<size_t>(t.bytes));
        return true;
      },
      cap);
}

TEST(ModuleRunner, BuildsTheModuleRunsItOnWhatItIsSentAndReturnsItsOutput) {
  REQUIRE_TORCH();
  ModuleRunner runner(cpu_options());
  const std::string module = module_with("        return x * self.scale + 1");
  Result<std::unique_ptr<ModuleSession>> s = runner.start(module, kReference, ModuleBackend::kTorch);
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  const ModuleLoad& load = (*s)->load();
  ASSERT_TRUE(load.ok) << load.kind << ": " << load.error;
  EXPECT_EQ(load.parameters, 3 * 3 + 3);  // built from get_init_inputs() = [2.0]
  EXPECT_FALSE(load.torch_version.empty());
  std::vector<float> out;
  Result<ModuleRunAnswer> a = forward(**s, 0, false, input(0), &out);
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  ASSERT_TRUE(a->ok) << a->kind << ": " << a->error;
  EXPECT_EQ(a->output.shape, (std::vector<int64_t>{4, 3}));
  ASSERT_EQ(out.size(), 12u);
  for (int i = 0; i < 12; ++i) EXPECT_EQ(out[static_cast<size_t>(i)], 2.0f * static_cast<float>(i) + 1) << i;
  // New data at the same addresses, and a second slot: each output is of its own inputs.
  a = forward(**s, 0, true, input(100), &out);
  ASSERT_TRUE(a.ok() && a->ok) << a->error;
  EXPECT_EQ(out[0], 201.0f);
  a = forward(**s, 1, false, input(-5), &out);
  ASSERT_TRUE(a.ok() && a->ok) << a->error;
  EXPECT_EQ(out[11], 13.0f);
  EXPECT_EQ(a->slots, 2);
  // A fresh slot drops the others but slot 0: two sets of inputs at most.
  a = forward(**s, 2, false, input(3), &out);
  ASSERT_TRUE(a.ok() && a->ok) << a->error;
  EXPECT_EQ(a->slots, 2);
  EXPECT_EQ(out[0], 7.0f);
  a = forward(**s, 0, true, input(1), &out);
  ASSERT_TRUE(a.ok() && a->ok) << a->error;
  EXPECT_EQ(out[0], 3.0f);
  // Timing on the CPU: one sample per request, each bracketed by this side's clock.
  Result<ModuleTiming> t = (*s)->time(0, 5, 1, 0, 3);
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  ASSERT_TRUE(t->ok) << t->kind << ": " << t->error;
  EXPECT_EQ(t->device_us.size(), 5u);
  EXPECT_EQ(t->worker_us.size(), 5u);
  EXPECT_EQ(t->ping_us.size(), 3u);
  for (size_t i = 0; i < 5; ++i) EXPECT_GE(t->worker_us[i], t->host_us[i] * 0.5) << i;
  std::printf("sandbox: %s; load %.0f ms\n", runner.sandbox_description().c_str(), load.ms);
}

TEST(ModuleRunner, TheModulesMistakesAreItsOwnFailures) {
  REQUIRE_TORCH();
  ModuleRunOptions o = cpu_options();
  o.call_timeout_s = 600;
  ModuleRunner runner(o);
  struct Case {
    std::string name, module, kind, says;
  } cases[] = {
      {"raises", module_with("        raise ValueError('no kernel today')"), "runtime_error", "no kernel today"},
      {"tuple", module_with("        return (x, x)"), "wrong_type", "tuple"},
      {"writes its input", module_with("        x.mul_(2)\n        return x.clone()"), "writes_input", "input 0"},
      {"returns its input", module_with("        return x"), "output_aliases_input", "input 0"},
      {"exits", module_with("        import os\n        os._exit(3)"), "crashed", "status 3"},
      {"answers too much", module_with("        return torch.zeros(1000, 1000)"), "wrong_output", "bytes"},
      {"import fails", module_with("        return x", "import no_such_module_here"), "import_error",
       "no_such_module_here"},
      {"constructor fails", module_with("        return x", "nn.Linear = None"), "construct_error", "ModelNew"},
  };
  for (const Case& c : cases) {
    Result<std::unique_ptr<ModuleSession>> s = runner.start(c.module, kReference, ModuleBackend::kTorch);
    ASSERT_TRUE(s.ok()) << c.name << ": " << s.status().to_string();
    std::vector<float> out;
    Result<ModuleRunAnswer> a = forward(**s, 0, false, input(1), &out, 4096);
    ASSERT_TRUE(a.ok()) << c.name << ": " << a.status().to_string();
    EXPECT_FALSE(a->ok) << c.name;
    EXPECT_EQ(a->kind, c.kind) << c.name << ": " << a->error;
    EXPECT_NE(a->error.find(c.says), std::string::npos) << c.name << ": " << a->error;
    // The runner has ended: the next command says the same.
    Result<ModuleRunAnswer> again = forward(**s, 0, false, input(1), &out, 4096);
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(again->kind, c.kind) << c.name;
  }
}

// Inputs larger than pristine_on_device_bytes keep no copy on the runner's device: a write is
// found by comparing them with the region they came in (the largest tasks' inputs are 7 GiB).
TEST(ModuleRunner, InputsWithoutADeviceCopyAreComparedWithTheirRegion) {
  REQUIRE_TORCH();
  ModuleRunOptions o = cpu_options();
  o.pristine_on_device_bytes = 0;
  ModuleRunner runner(o);
  struct Case {
    std::string name, module, kind;
  } cases[] = {
      {"writes its input", module_with("        x.mul_(2)\n        return x.clone()"), "writes_input"},
      {"writes the last element", module_with("        x.view(-1)[-1] += 1\n        return x * 1"), "writes_input"},
      {"leaves it alone", module_with("        return x * 2"), ""},
  };
  for (const Case& c : cases) {
    Result<std::unique_ptr<ModuleSession>> s = runner.start(c.module, kReference, ModuleBackend::kTorch);
    ASSERT_TRUE(s.ok()) << c.name << ": " << s.status().to_string();
    std::vector<float> out;
    // Twice: a fresh slot, then new data written into the same slot's tensors.
    for (bool reuse : {false, true}) {
      Result<ModuleRunAnswer> a = forward(**s, 0, reuse, input(reuse ? 2 : 1), &out, 1 << 20);
      ASSERT_TRUE(a.ok()) << c.name << ": " << a.status().to_string();
      EXPECT_EQ(a->ok, c.kind.empty()) << c.name << ": " << a->error;
      EXPECT_EQ(a->kind, c.kind) << c.name << ": " << a->error;
      if (!c.kind.empty()) break;
    }
  }
}

// The worker's hooks that page-lock its regions (cuMemHostRegister on a GPU) are called once per
// region mapped, and undone before a region is replaced or the session ends.
TEST(ModuleRunner, RegionsArePinnedOnceAndUnpinnedBeforeTheyGo) {
  REQUIRE_TORCH();
  ModuleRunOptions o = cpu_options();
  std::vector<std::pair<void*, size_t>> pinned;
  std::vector<void*> unpinned;
  o.pin = [&](void* data, size_t size) {
    pinned.push_back({data, size});
    return true;
  };
  o.unpin = [&](void* data) { unpinned.push_back(data); };
  {
    ModuleRunner runner(o);
    Result<std::unique_ptr<ModuleSession>> s =
        runner.start(module_with("        return x * 2"), kReference, ModuleBackend::kTorch);
    ASSERT_TRUE(s.ok()) << s.status().to_string();
    std::vector<float> out;
    ASSERT_TRUE(forward(**s, 0, false, input(1), &out).ok());
    EXPECT_EQ(pinned.size(), 2u);  // the inputs' region and the output's
    EXPECT_TRUE(unpinned.empty());
    ASSERT_TRUE(forward(**s, 0, true, input(2), &out).ok());
    EXPECT_EQ(pinned.size(), 2u);  // the same regions again
    // An output region larger than the first: the old one is unpinned before it goes.
    Result<ModuleRunAnswer> big = forward(**s, 0, true, input(3), &out, 64 << 20);
    ASSERT_TRUE(big.ok()) << big.status().to_string();
    EXPECT_TRUE(big->ok) << big->error;
    ASSERT_EQ(pinned.size(), 3u);
    ASSERT_EQ(unpinned.size(), 1u);
    EXPECT_EQ(unpinned[0], pinned[1].first);
    EXPECT_GE(pinned[2].second, size_t{64} << 20);
  }
  // The session's end unpins what is left.
  EXPECT_EQ(unpinned.size(), 3u);
}

// The tensors cross in the worker's memfds, whose fds the module can reach (here by wrapping
// mmap.mmap, which the runner maps them with). Truncated under the worker's mapping, a region would
// fault the worker when it next touched it (SIGBUS): the sizes are sealed, so the module's attempts
// fail and the run goes on as if none was made.
TEST(ModuleRunner, TheSharedMemoryCannotBeResizedByTheModule) {
  REQUIRE_TORCH();
  ModuleRunner runner(cpu_options());
  const std::string module = module_with("        return x * self.scale + 1",
                                         "import mmap\n"
                                         "import os\n"
                                         "_real = mmap.mmap\n"
                                         "resized = []\n"
                                         "def _mmap(fd, size, *a, **k):\n"
                                         "    for n in (0, 1, size * 2):\n"
                                         "        try:\n"
                                         "            os.ftruncate(fd, n)\n"
                                         "            resized.append(n)\n"
                                         "        except OSError:\n"
                                         "            pass\n"
                                         "    if resized:\n"
                                         "        os.ftruncate(fd, size)\n"
                                         "    return _real(fd, size, *a, **k)\n"
                                         "mmap.mmap = _mmap");
  Result<std::unique_ptr<ModuleSession>> s = runner.start(module, kReference, ModuleBackend::kTorch);
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  ASSERT_TRUE((*s)->load().ok) << (*s)->load().error;
  std::vector<float> out;
  for (int reuse = 0; reuse < 2; ++reuse) {
    Result<ModuleRunAnswer> a = forward(**s, 0, reuse == 1, input(10), &out);
    ASSERT_TRUE(a.ok()) << a.status().to_string();
    ASSERT_TRUE(a->ok) << a->kind << ": " << a->error;
    ASSERT_EQ(out.size(), 12u);
    EXPECT_EQ(out[11], 2.0f * 21 + 1);
  }
  EXPECT_EQ((*s)->finish().find("Traceback"), std::string::npos);
}

TEST(ModuleRunner, AForwardThatNeverReturnsIsStoppedAtTheCallTimeout) {
  REQUIRE_TORCH();
  ModuleRunOptions o = cpu_options();
  o.call_timeout_s = 3;  // the forward loops forever: nothing else is timed by this
  ModuleRunner runner(o);
  Result<std::unique_ptr<ModuleSession>> s =
      runner.start(module_with("        while True:\n            pass"), kReference, ModuleBackend::kTorch);
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  ASSERT_TRUE((*s)->load().ok) << (*s)->load().error;
  std::vector<float> out;
  Result<ModuleRunAnswer> a = forward(**s, 0, false, input(1), &out);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->kind, "hang") << a->error;
  EXPECT_NE(a->error.find("3 s"), std::string::npos) << a->error;
}

TEST(ModuleRunner, ThreadsTheForwardLeavesRunningAreNamed) {
  REQUIRE_TORCH();
  ModuleRunner runner(cpu_options());
  const std::string module = module_with(
      "        if not hasattr(self, 't'):\n"
      "            self.t = threading.Thread(target=time.sleep, args=(3600,), daemon=True)\n"
      "            self.t.start()\n"
      "        return x * self.scale + 1",
      "import threading\nimport time");
  Result<std::unique_ptr<ModuleSession>> s = runner.start(module, kReference, ModuleBackend::kTorch);
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  ASSERT_TRUE((*s)->load().ok) << (*s)->load().error;
  std::vector<float> out;
  Result<ModuleRunAnswer> a = forward(**s, 0, false, input(1), &out);
  ASSERT_TRUE(a.ok() && a->ok) << a->error;
  EXPECT_EQ(a->threads.size(), 1u);
}

TEST(ModuleRunner, AMachineWithoutTorchIsAnErrorNotTheModulesFailure) {
  ModuleRunOptions o = cpu_options();
  o.python = "/usr/bin/python3 -S";  // not a program: the probe fails
  ModuleRunner missing(o);
  Result<std::unique_ptr<ModuleSession>> s =
      missing.start(module_with("        return x"), kReference, ModuleBackend::kTorch);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kFailedPrecondition) << s.status().to_string();
  EXPECT_NE(s.status().message().find("VINCI_MODULE_PYTHON"), std::string::npos) << s.status().to_string();
  REQUIRE_TORCH();
  // A CUDA device asked of a machine without one: found before the module runs.
  ModuleRunOptions gpu = cpu_options();
  gpu.device = "cuda";
  ModuleRunner runner(gpu);
  s = runner.start(module_with("        return x"), kReference, ModuleBackend::kTorch);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kFailedPrecondition) << s.status().to_string();
  EXPECT_NE(s.status().message().find("no CUDA device"), std::string::npos) << s.status().to_string();
}

}  // namespace
}  // namespace vinci

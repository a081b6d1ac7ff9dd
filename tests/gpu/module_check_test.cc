// The import check of KernelBench modules (gpu/compile/module_check.h) with a real interpreter in
// the real sandbox: Debian's python3 with python3-torch (scripts/setup.sh installs both; CPU-only
// torch, no Triton). A module that imports and builds as KernelBench builds a candidate passes;
// what the module gets wrong is its own failure, named for its author; what the machine lacks
// (torch, CUDA, Triton) is an error of the check, found before any module runs, so a module cannot
// forge it; and the module sees no secret and writes nothing outside its folder.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "gpu/compile/module_check.h"
#include "gpu/kernelbench_module.h"
#include "tests/cli_test_util.h"

namespace vinci {
namespace {

const char* kPython = "/usr/bin/python3";  // Debian's, with python3-torch

// The task a candidate is checked against: KernelBench's layout, with constructor arguments.
const char* kReference = R"(import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.relu(self.fc(x))


def get_inputs():
    return [torch.rand(16, 8)]


def get_init_inputs():
    return [8, 4]
)";

int sh(const std::string& cmd) {
  std::string out;
  return clitest::sh(cmd, &out);
}

bool has_torch() { return sh(std::string(kPython) + " -c 'import torch'") == 0; }

ModuleCheckOptions options(const std::string& python = kPython) {
  ModuleCheckOptions o;
  o.python = python;
  o.timeout_s = 300;
  return o;
}

#define REQUIRE_TORCH() \
  if (!has_torch()) GTEST_SKIP() << kPython << " has no torch (scripts/setup.sh installs python3-torch)"

TEST(ModuleCheck, APyTorchModuleImportsAndBuildsAsKernelBenchBuildsIt) {
  REQUIRE_TORCH();
  const std::string module = R"(import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.relu(self.fc(x))
)";
  ModuleChecker checker(options());
  Result<ModuleCheck> c = checker.check(module, kReference, module_backend(module));
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_TRUE(c->ok) << c->kind << ": " << c->error;
  EXPECT_EQ(c->parameters, 8 * 4 + 4);  // built from get_init_inputs() = [8, 4]
  EXPECT_EQ(c->init_inputs, 2);
  EXPECT_FALSE(checker.torch_version().empty());
  std::printf("sandbox: %s; torch %s; %.0f ms\n", checker.sandbox_description().c_str(),
              checker.torch_version().c_str(), c->ms);
}

TEST(ModuleCheck, TheModulesMistakesAreItsOwnFailuresNamingItsLine) {
  REQUIRE_TORCH();
  ModuleChecker checker(options());
  struct Case {
    const char* module;
    const char* kind;
    const char* says;
  } cases[] = {
      {"import torch\nimport torch.nn as nn\nraise ValueError('no kernel yet')\nclass ModelNew(nn.Module):\n    pass\n",
       "import_error", "line 3: raise ValueError('no kernel yet')"},
      {"import torch\nclass ModelNew(torch.nn.Module)\n    pass\n", "import_error", "SyntaxError"},
      {"import torch\nModelNew = 5\n", "no_model_new", "ModelNew is 'int'"},
      {"import torch\nclass Other(torch.nn.Module):\n    pass\n", "no_model_new", "ModelNew is nothing"},
      {"import torch\nimport torch.nn as nn\nclass ModelNew(nn.Module):\n    def __init__(self):\n"
       "        super().__init__()\n",
       "construct_error", "TypeError"},
      {"import sys\nsys.exit(3)\nclass ModelNew:\n    pass\n", "import_error", "SystemExit: 3"},
  };
  for (const Case& k : cases) {
    Result<ModuleCheck> c = checker.check(k.module, kReference, ModuleBackend::kTorch);
    ASSERT_TRUE(c.ok()) << k.module << "\n" << c.status().to_string();
    EXPECT_FALSE(c->ok) << k.module;
    EXPECT_EQ(c->kind, k.kind) << k.module << "\n" << c->error;
    EXPECT_NE(c->error.find(k.says), std::string::npos) << k.module << "\n"
                                                        << c->error << "\n(expected " << k.says << ")";
  }
}

TEST(ModuleCheck, WhatTheMachineLacksIsAnErrorOfTheCheckNamingTheFix) {
  REQUIRE_TORCH();
  // A CUDA module with a CPU-only torch (Debian's): the check cannot compile it here.
  const std::string cuda =
      "import torch\nfrom torch.utils.cpp_extension import load_inline\n"
      "src = r'''__global__ void k(float* x) {}'''\nm = load_inline(name='k', cpp_sources='', "
      "cuda_sources=src)\nclass ModelNew(torch.nn.Module):\n    pass\n";
  ASSERT_EQ(module_backend(cuda), ModuleBackend::kCuda);
  ModuleChecker checker(options());
  Result<ModuleCheck> c = checker.check(cuda, kReference, ModuleBackend::kCuda);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(c.status().message().find("built without CUDA"), std::string::npos) << c.status().to_string();
  EXPECT_NE(c.status().message().find("VINCI_MODULE_PYTHON"), std::string::npos) << c.status().to_string();
  // A Triton module where the python has no Triton.
  if (sh(std::string(kPython) + " -c 'import triton'") != 0) {
    Result<ModuleCheck> t =
        checker.check("import triton\nclass ModelNew:\n    pass\n", kReference, ModuleBackend::kTriton);
    ASSERT_FALSE(t.ok());
    EXPECT_NE(t.status().message().find("Triton is not installed"), std::string::npos) << t.status().to_string();
  }
  // A python without torch: a venv that does not see the system's packages.
  char dir[] = "/tmp/vinci_module_venv_XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  ASSERT_EQ(sh(std::string(kPython) + " -m venv --without-pip " + dir + "/venv"), 0);
  ModuleChecker bare(options(std::string(dir) + "/venv/bin/python"));
  Result<ModuleCheck> b =
      bare.check("import torch\nclass ModelNew(torch.nn.Module):\n    pass\n", kReference, ModuleBackend::kTorch);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(b.status().message().find("PyTorch is not installed"), std::string::npos) << b.status().to_string();
  sh(std::string("rm -rf ") + dir);
}

TEST(ModuleCheck, AModuleCannotForgeTheMachinesErrorOrItsOwnSuccess) {
  REQUIRE_TORCH();
  // It writes the check's answers itself on every descriptor the answer could be on, then exits.
  const std::string forge = R"(import os
for fd in range(3, 12):
    try:
        os.write(fd, b'{"ok": false, "kind": "no_torch", "error": "forged"}')
    except OSError:
        pass
os._exit(0)
)";
  ModuleChecker checker(options());
  Result<ModuleCheck> c = checker.check(forge, kReference, ModuleBackend::kTorch);
  ASSERT_TRUE(c.ok()) << "a module's answer is never the machine's error: " << c.status().to_string();
  EXPECT_FALSE(c->ok);
  EXPECT_EQ(c->kind, "import_error") << c->error;
}

TEST(ModuleCheck, TheModuleSeesNoSecretAndWritesNothingOutsideItsFolder) {
  REQUIRE_TORCH();
  ModuleChecker checker(options());
  if (checker.sandbox_description().rfind("bwrap:", 0) != 0)
    GTEST_SKIP() << "no bwrap sandbox here: " << checker.sandbox_description();
  char dir[] = "/tmp/vinci_module_outside_XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  ASSERT_EQ(chmod(dir, 0777), 0);
  const std::string outside = std::string(dir) + "/escaped.txt";
  ::setenv("VINCI_TEST_API_KEY", "s3cret-value", 1);
  const std::string module =
      "import os\n"
      "key = os.environ.get('VINCI_TEST_API_KEY')\n"
      "try:\n"
      "    open('" +
      outside +
      "', 'w').write('out')\n"
      "    wrote = 'yes'\n"
      "except OSError as e:\n"
      "    wrote = type(e).__name__\n"
      "home = os.path.expanduser('~')\n"
      "raise RuntimeError('key=%s wrote=%s home=%s' % (key, wrote, home))\n";
  Result<ModuleCheck> c = checker.check(module, kReference, ModuleBackend::kTorch);
  ::unsetenv("VINCI_TEST_API_KEY");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->kind, "import_error");
  EXPECT_NE(c->error.find("key=None"), std::string::npos) << c->error;
  EXPECT_EQ(c->error.find("wrote=yes"), std::string::npos) << c->error;
  EXPECT_NE(c->error.find("home=/tmp/vinci_module_"), std::string::npos) << c->error;
  struct stat st;
  EXPECT_NE(::stat(outside.c_str(), &st), 0) << outside << " was written from the sandbox";
  sh(std::string("rm -rf ") + dir);
}

// The build cache: a module whose import compiles (load_inline; C++ only here, no CUDA) is kept
// by content address once it built, and the next check of the same text starts from that build,
// up to date at the path it was built at. Only plain files and folders come out of the sandbox: a link the module
// left in its extension folder is not kept.
TEST(ModuleCheck, ABuiltModuleIsKeptAndTheNextCheckStartsFromItsBuild) {
  REQUIRE_TORCH();
  char dir[] = "/tmp/vinci_module_cache_XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  ModuleCheckOptions o = options();
  o.cache_dir = std::string(dir) + "/cache";
  // buffers: 2 elements when the extension's build folder was there and up to date for ninja
  // before load_inline ran (the cache gave it, at the path the build names), else 1.
  const std::string module = R"(import os
import subprocess
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

build = os.path.join(os.environ["TORCH_EXTENSIONS_DIR"], "vinci_twice")
up_to_date = os.path.isdir(build) and "no work to do" in subprocess.run(
    ["ninja", "-n"], cwd=build, capture_output=True, text=True).stdout
ext = load_inline(name="vinci_twice", cpp_sources="torch::Tensor twice(torch::Tensor x) { return x * 2; }",
                  functions=["twice"])
os.symlink("/etc/hostname", os.path.join(os.environ["TORCH_EXTENSIONS_DIR"], "leak"))


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.register_buffer("mark", torch.zeros(2 if up_to_date else 1))

    def forward(self, x):
        return ext.twice(x)
)";
  ModuleChecker checker(o);
  Result<ModuleCheck> first = checker.check(module, kReference, ModuleBackend::kTorch);
  ASSERT_TRUE(first.ok()) << first.status().to_string();
  ASSERT_TRUE(first->ok) << first->kind << ": " << first->error;
  EXPECT_EQ(first->cache, "miss");
  EXPECT_EQ(first->buffers, 1) << "nothing was built before the first check";
  std::string entry = o.cache_dir + "/" + checker.build_key(module, ModuleBackend::kTorch).hex();
  struct stat st;
  ASSERT_EQ(::stat((entry + "/vinci_twice/vinci_twice.so").c_str(), &st), 0) << entry << " was not kept";
  EXPECT_NE(::lstat((entry + "/leak").c_str(), &st), 0) << "a link came out of the sandbox";

  Result<ModuleCheck> second = checker.check(module, kReference, ModuleBackend::kTorch);
  ASSERT_TRUE(second.ok()) << second.status().to_string();
  ASSERT_TRUE(second->ok) << second->kind << ": " << second->error;
  EXPECT_EQ(second->cache, "hit");
  EXPECT_EQ(second->buffers, 2) << "the second check did not find the first one's build up to date";
  // PyTorch before 2.0 rewrites load_inline's source file on every call, so ninja then rebuilds
  // what the cache gave it; later versions write it only when it changed, and compile nothing.
  std::printf("load_inline (C++ only) import check: built %.0f ms, from the cache %.0f ms\n", first->ms, second->ms);

  // A module that fails is not kept, whatever it wrote in its extension folder.
  const std::string broken =
      "import os\nd = os.environ['TORCH_EXTENSIONS_DIR']\nos.makedirs(d, exist_ok=True)\n"
      "open(os.path.join(d, 'x.so'), 'w').write('x')\n"
      "raise RuntimeError('after writing its extension folder')\n";
  Result<ModuleCheck> failed = checker.check(broken, kReference, ModuleBackend::kTorch);
  ASSERT_TRUE(failed.ok()) << failed.status().to_string();
  EXPECT_FALSE(failed->ok);
  EXPECT_EQ(failed->cache, "miss");
  std::string other = o.cache_dir + "/" + checker.build_key(broken, ModuleBackend::kTorch).hex();
  EXPECT_NE(::stat(other.c_str(), &st), 0) << "a module that failed was kept";
  sh(std::string("rm -rf ") + dir);
}

}  // namespace
}  // namespace vinci

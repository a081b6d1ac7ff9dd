// KernelBench-format candidates (gpu/kernelbench_module.h): taking the module from a reply, the
// checks on its text, its backend, the static flags a reviewer reads (and the comments and strings
// that must not raise them), and that every function takes any bytes in linear time. Also the
// fenced-block scanner they share with the model-facing plan format (gpu/fenced_blocks.h).
#include "gpu/kernelbench_module.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "core/rng.h"
#include "gpu/fenced_blocks.h"

namespace vinci {
namespace {

// A CUDA elementwise add through load_inline, as KernelBench's examples are written.
constexpr const char* kCudaPrelude = R"PY(import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

add_source = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>

// One thread per element.
__global__ void add_kernel(const float* __restrict__ a, const float* __restrict__ b,
                           float* __restrict__ out, int64_t n) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) out[i] = a[i] + b[i];
}

torch::Tensor add_cuda(torch::Tensor a, torch::Tensor b) {
    auto out = torch::empty_like(a);
    int64_t n = a.numel();
    const int threads = 256;
    const int blocks = (int)((n + threads - 1) / threads);
    add_kernel<<<blocks, threads>>>(a.data_ptr<float>(), b.data_ptr<float>(), out.data_ptr<float>(), n);
    return out;
}
"""

add_cpp = "torch::Tensor add_cuda(torch::Tensor a, torch::Tensor b);"

add_ext = load_inline(
    name="vinci_add",
    cpp_sources=add_cpp,
    cuda_sources=add_source,
    functions=["add_cuda"],
    verbose=False,
)
)PY";

constexpr const char* kCudaModelNew = R"PY(

class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.add = add_ext

    def forward(self, a, b):
        return self.add.add_cuda(a.contiguous(), b.contiguous())
)PY";

std::string cuda_add() { return std::string(kCudaPrelude) + kCudaModelNew; }

// The same add in Triton, autotuned.
constexpr const char* kTritonAdd = R"PY(import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.autotune(
    configs=[triton.Config({"BLOCK": 512}, num_warps=4), triton.Config({"BLOCK": 1024}, num_warps=8)],
    key=["n"],
)
@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(axis=0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x + y, mask=mask)


def triton_add(x, y):
    x, y = x.contiguous(), y.contiguous()
    out = torch.empty_like(x)
    n = out.numel()
    grid = lambda meta: (triton.cdiv(n, meta["BLOCK"]),)
    add_kernel[grid](x, y, out, n)
    return out


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return triton_add(a, b)
)PY";

// No kernel of its own: PyTorch does the work.
constexpr const char* kTorchOnly = R"PY(import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        y = torch.matmul(a, b)
        return F.relu(y)
)PY";

// The 1-based line of the first occurrence of needle in text.
size_t line_of(const std::string& text, const std::string& needle) {
  size_t at = text.find(needle);
  EXPECT_NE(at, std::string::npos) << needle;
  size_t line = 1;
  for (size_t i = 0; i < at && i < text.size(); ++i) line += text[i] == '\n';
  return line;
}

std::string error_of(const Result<std::string>& r) { return r.ok() ? "(ok)" : r.status().message(); }
std::string error_of(const Status& s) { return s.ok() ? "(ok)" : s.message(); }

using Flags = std::vector<std::string>;

TEST(KernelbenchModule, BackendNamesRoundTrip) {
  for (ModuleBackend b : {ModuleBackend::kCuda, ModuleBackend::kTriton, ModuleBackend::kTorch}) {
    Result<ModuleBackend> parsed = parse_module_backend(module_backend_name(b));
    ASSERT_TRUE(parsed.ok()) << module_backend_name(b);
    EXPECT_EQ(*parsed, b);
  }
  EXPECT_STREQ(module_backend_name(ModuleBackend::kTriton), "triton");
  Result<ModuleBackend> hip = parse_module_backend("hip");
  ASSERT_FALSE(hip.ok());
  EXPECT_EQ(hip.status().message(), "unknown module backend 'hip': expected cuda, triton or torch");
}

TEST(KernelbenchModule, CudaLoadInlineModuleIsCudaAndRaisesNoFlag) {
  std::string m = cuda_add();
  EXPECT_TRUE(check_module_source(m).ok()) << error_of(check_module_source(m));
  EXPECT_EQ(module_backend(m), ModuleBackend::kCuda);
  EXPECT_EQ(module_static_flags(m, ModuleBackend::kCuda), Flags());
  // Expected in Triton, it has none.
  EXPECT_EQ(module_static_flags(m, ModuleBackend::kTriton),
            Flags({"static: missing_backend: triton (no @triton.jit function)"}));
}

TEST(KernelbenchModule, TritonModuleIsTritonAndRaisesNoFlag) {
  EXPECT_TRUE(check_module_source(kTritonAdd).ok());
  EXPECT_EQ(module_backend(kTritonAdd), ModuleBackend::kTriton);
  EXPECT_EQ(module_static_flags(kTritonAdd, ModuleBackend::kTriton), Flags());
  EXPECT_EQ(module_static_flags(kTritonAdd, ModuleBackend::kCuda),
            Flags({"static: missing_backend: cuda (no __global__ kernel in a source string)"}));
}

TEST(KernelbenchModule, PlainPytorchModuleShowsItsOps) {
  EXPECT_TRUE(check_module_source(kTorchOnly).ok());
  EXPECT_EQ(module_backend(kTorchOnly), ModuleBackend::kTorch);
  EXPECT_EQ(module_static_flags(kTorchOnly, ModuleBackend::kTorch),
            Flags({"static: torch_computation: torch.matmul, F.relu"}));
  EXPECT_EQ(module_static_flags(kTorchOnly, ModuleBackend::kCuda),
            Flags({"static: torch_computation: torch.matmul, F.relu",
                   "static: missing_backend: cuda (no __global__ kernel in a source string)"}));
  // nn compute layers, functional calls and the @ operator count; containers and init do not.
  std::string layers = R"PY(import torch
import torch.nn as nn

class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.fc = nn.Linear(n, n)
        self.blocks = nn.ModuleList([nn.Identity()])
        self.scale = nn.Parameter(torch.ones(n))
        nn.init.zeros_(self.fc.bias)

    @property
    def width(self):
        return self.fc.in_features

    def forward(self, x):
        x = x @ self.fc.weight.T
        return torch.nn.functional.gelu(x) * self.scale
)PY";
  EXPECT_EQ(module_static_flags(layers, ModuleBackend::kTorch),
            Flags({"static: torch_computation: nn.Linear, @, torch.nn.functional.gelu"}));
}

std::string fenced(const std::string& info, const std::string& body) { return "```" + info + "\n" + body + "```\n"; }

TEST(KernelbenchModule, ExtractTakesTheLastPythonBlockDefiningModelNew) {
  std::string problem = R"PY(import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, a, b):
        return a + b
)PY";
  std::string reply = "You asked me to speed up this model:\n\n" + fenced("python", problem) +
                      "\nI replace the addition with a CUDA kernel:\n\n" + fenced("python", cuda_add()) +
                      "\nThe kernel reads each element once.\n";
  Result<std::string> m = extract_module_answer(reply);
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ(*m, cuda_add());

  // A first draft, then its revision: the revision is the answer, whatever the first block says.
  std::string revised = "Draft:\n" + fenced("python", kTorchOnly) + "Better, in Triton:\n" + fenced("py", kTritonAdd);
  m = extract_module_answer(revised);
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ(*m, kTritonAdd);

  // ```python3, upper case, a longer fence around a module holding a ``` line, CRLF line ends.
  m = extract_module_answer("````Python3\n" + std::string(kTorchOnly) + "x = '''\n```\n'''\n````\r\n");
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ(*m, std::string(kTorchOnly) + "x = '''\n```\n'''\n");

  // No fence at all: the reply is the module.
  m = extract_module_answer(kTorchOnly);
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ(*m, kTorchOnly);
}

TEST(KernelbenchModule, ExtractErrorsTellTheModelWhatToFix) {
  EXPECT_EQ(error_of(extract_module_answer("I would fuse the add into the matmul's epilogue.")),
            "the reply holds no ```python block defining class ModelNew (found no fenced block): write the whole "
            "module, with class ModelNew(nn.Module), in one ```python block");
  EXPECT_EQ(error_of(extract_module_answer("Here:\n\n" + fenced("cuda", "__global__ void k() {}\n"))),
            "the reply holds no ```python block defining class ModelNew (found: ```cuda at line 3): write the "
            "whole module, with class ModelNew(nn.Module), in one ```python block");
  // A python block quoting the problem only, and a module under the wrong label.
  EXPECT_EQ(error_of(extract_module_answer(fenced("python", "class Model(nn.Module):\n    pass\n") + "\n" +
                                           fenced("", kTorchOnly))),
            "the reply holds no ```python block defining class ModelNew (found: ```python at line 1 (no class "
            "ModelNew), ``` at line 6): the ``` block at line 6 defines it: label it ```python");
  EXPECT_EQ(error_of(extract_module_answer("Answer:\n```python\n" + cuda_add())),
            "reply, line 2: the ```python block opened here is never closed: end it with a line ```");
  EXPECT_EQ(error_of(extract_module_answer("```python\nclass ModelNew(nn.Module):\n    x = '\xff'\n```\n")),
            "reply: byte 46 is not valid UTF-8");
  // class ModelNew indented, or inside a string, in a bare reply: not a module.
  EXPECT_FALSE(extract_module_answer("    class ModelNew(nn.Module):\n        pass\n").ok());
  EXPECT_FALSE(extract_module_answer("doc = \"\"\"\nclass ModelNew(nn.Module):\n\"\"\"\n").ok());
  // More blocks than a message lists.
  std::string many;
  for (int i = 0; i < 10; ++i) many += fenced("bash", "ls\n");
  EXPECT_EQ(error_of(extract_module_answer(many)),
            "the reply holds no ```python block defining class ModelNew (found: ```bash at line 1, ```bash at line "
            "4, ```bash at line 7, ```bash at line 10, ```bash at line 13, ```bash at line 16, ```bash at line 19, "
            "```bash at line 22, and 2 more): write the whole module, with class ModelNew(nn.Module), in one "
            "```python block");
}

TEST(KernelbenchModule, CheckModuleSourceNamesTheLine) {
  EXPECT_TRUE(check_module_source(cuda_add()).ok());
  // A byte order mark does not indent the class.
  EXPECT_TRUE(check_module_source("\xEF\xBB\xBF"
                                  "class ModelNew(nn.Module):\n    pass\n")
                  .ok());
  EXPECT_EQ(error_of(check_module_source(std::string("import torch\nx = 1\0\n", 20))),
            "line 2: byte 18 is a NUL byte, which Python source cannot hold");
  EXPECT_EQ(error_of(check_module_source("import torch\n\n# caf\xc3\n")), "line 3: byte 19 is not valid UTF-8");
  EXPECT_EQ(error_of(check_module_source("import torch\n\nclass ModelNew:\n    pass\n")),
            "line 3: class ModelNew has no base class: write `class ModelNew(nn.Module):`");
  EXPECT_EQ(error_of(check_module_source("if True:\n    class ModelNew(nn.Module):\n        pass\n")),
            "line 2: class ModelNew is indented: define it at the top level of the module, column 0");
  EXPECT_EQ(error_of(check_module_source("import torch\n# class ModelNew(nn.Module):\nclass Model(nn.Module):\n")),
            "line 2: `class ModelNew` is inside a comment or string: define the class in code, at the top level of "
            "the module");
  EXPECT_EQ(error_of(check_module_source("TEMPLATE = '''\nclass ModelNew(nn.Module):\n'''\n")),
            "line 2: `class ModelNew` is inside a comment or string: define the class in code, at the top level of "
            "the module");
  EXPECT_EQ(error_of(check_module_source("class ModelNewer(nn.Module):\n    pass\n")),
            "no `class ModelNew(` line: define `class ModelNew(nn.Module):` at the top level of the module");
}

TEST(KernelbenchModule, TryExceptFallbackIsFlaggedWithItsLine) {
  std::string m = std::string(kCudaPrelude) + R"PY(

class ModelNew(nn.Module):
    def forward(self, a, b):
        try:
            return add_ext.add_cuda(a, b)
        except Exception:
            return a + b
)PY";
  EXPECT_EQ(module_static_flags(m, ModuleBackend::kCuda),
            Flags({"static: try_except_fallback: line " + std::to_string(line_of(m, "try:"))}));
  std::string suppressed = m + "\nwith contextlib.suppress(RuntimeError):\n    add_ext = None\n";
  EXPECT_EQ(module_static_flags(suppressed, ModuleBackend::kCuda),
            Flags({"static: try_except_fallback: lines " + std::to_string(line_of(m, "try:")) + ", " +
                   std::to_string(line_of(suppressed, "with contextlib"))}));
}

TEST(KernelbenchModule, InheritingTheReferenceIsFlagged) {
  std::string m = R"PY(import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, a, b):
        return torch.matmul(a, b)


class ModelNew(Model):
    pass
)PY";
  EXPECT_EQ(module_static_flags(m, ModuleBackend::kCuda),
            Flags({"static: inherits_reference: ModelNew(Model), no forward of its own",
                   "static: torch_computation: torch.matmul",
                   "static: missing_backend: cuda (no __global__ kernel in a source string)"}));
  // Through a class of the module, with a forward of its own that defers to the reference.
  std::string via = std::string(kCudaPrelude) + R"PY(

class Base(reference.Model):
    pass


class ModelNew(Base, metaclass=type):
    def forward(self, a, b):
        return super().forward(a, b)
)PY";
  EXPECT_EQ(module_static_flags(via, ModuleBackend::kCuda),
            Flags({"static: inherits_reference: ModelNew(Base), Base(reference.Model)"}));
  // A base named like the reference but redefined from nn.Module before ModelNew: not the reference.
  std::string redefined = std::string(kCudaPrelude) + R"PY(

class Base(Model):
    pass


class Base(nn.Module):
    pass


class ModelNew(Base):
    def forward(self, a, b):
        return add_ext.add_cuda(a, b)
)PY";
  EXPECT_EQ(module_static_flags(redefined, ModuleBackend::kCuda), Flags());
}

TEST(KernelbenchModule, HostAccessTimingPatchesConcurrencyAndLazyTensorsAreFlagged) {
  std::string m = std::string(kCudaPrelude) + R"PY(
import os
import threading
import time

torch.cuda.synchronize = lambda *args, **kwargs: None
setattr(time, "perf_counter", lambda: 0.0)
torch.cuda.Event.elapsed_time = lambda self, end: 0.001


class Lazy(torch.Tensor):
    pass


class ModelNew(nn.Module):
    def forward(self, a, b):
        if os.environ.get("VINCI_CACHED"):
            with open("/tmp/answer.pt", "rb") as f:
                return torch.load(f)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        worker = threading.Thread(target=lambda: add_ext.add_cuda(a, b))
        worker.start()
        exec("out = a + b")
        return torch.Tensor._make_subclass(Lazy, a)
)PY";
  EXPECT_EQ(module_static_flags(m, ModuleBackend::kCuda),
            Flags({"static: host_access: os.environ, open, torch.load",
                   "static: timing_patch: torch.cuda.synchronize, time.perf_counter, torch.cuda.Event.elapsed_time",
                   "static: concurrency: threading, torch.cuda.Stream, .wait_stream",
                   "static: lazy_tensor: class Lazy(torch.Tensor), _make_subclass", "static: dynamic_code: exec"}));
  // The same reach from inside the CUDA source.
  std::string source = std::string(kCudaPrelude) + R"PY(
helper = r"""
#include <thread>
void warm() {
    const char* skip = getenv("VINCI_SKIP");
    cudaStream_t s;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    std::thread t([] {});
    t.join();
}
"""
)PY" + kCudaModelNew;
  EXPECT_EQ(module_static_flags(source, ModuleBackend::kCuda),
            Flags({"static: host_access: getenv (CUDA source)",
                   "static: concurrency: cudaStreamCreateWithFlags (CUDA source), std::thread (CUDA source)"}));
}

TEST(KernelbenchModule, UnusedKernelsAreFlagged) {
  std::string cuda = R"PY(import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

src = """
__global__ void __launch_bounds__(256) scale_kernel(float* x, float s, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= s;
}
__global__ void old_kernel(float* x) { x[0] = 0.f; }
void scale(torch::Tensor x, double s) {
    // old_kernel<<<1, 1>>>(x.data_ptr<float>());
    /* old_kernel<<<1, 1>>>(x.data_ptr<float>()); */
    scale_kernel<<<(x.numel() + 255) / 256, 256>>>(x.data_ptr<float>(), (float)s, (int)x.numel());
}
"""
ext = load_inline(name="scale", cpp_sources="void scale(torch::Tensor x, double s);", cuda_sources=src,
                  functions=["scale"])


class ModelNew(nn.Module):
    def forward(self, x):
        ext.scale(x, 2.0)
        return x
)PY";
  EXPECT_EQ(module_static_flags(cuda, ModuleBackend::kCuda), Flags({"static: unused_kernel: old_kernel"}));
  std::string triton = std::string(kTritonAdd) + R"PY(

@triton.jit
def draft_kernel(x_ptr, BLOCK: tl.constexpr):
    tl.store(x_ptr + tl.arange(0, BLOCK), 0.0)
# draft_kernel[(1,)](x, BLOCK=128)
)PY";
  EXPECT_EQ(module_static_flags(triton, ModuleBackend::kTriton), Flags({"static: unused_kernel: draft_kernel"}));
}

TEST(KernelbenchModule, CommentsAndStringsRaiseNoFlag) {
  std::string m = R"PY(import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# An earlier draft called torch.matmul(a, b), read os.environ["X"] and had a try: around it.
NOTES = """
try:
    out = torch.matmul(a, b)
except Exception:
    import threading
torch.cuda.synchronize = lambda: None
class ModelNew(Model):
"""
HELP = 'class Lazy(torch.Tensor): open(path)  # not code'
ESCAPED = "a \" torch.tanh(x) # still in the string"
RAW = r'\' F.gelu(x) exec(s)'
FORMATTED = f"{len(NOTES)} torch.relu(x) {HELP!r}"
BYTES = rb"""subprocess.run(["ls"])"""

source = r"""
__global__ void scale_kernel(float* x, float s, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= s;  // try: torch.matmul; fopen(path) and std::thread in a C++ comment
}
void scale(torch::Tensor x, double s) {
    scale_kernel<<<(x.numel() + 255) / 256, 256>>>(x.data_ptr<float>(), (float)s, (int)x.numel());
}
"""
ext = load_inline(name="scale", cpp_sources="void scale(torch::Tensor x, double s);", cuda_sources=source,
                  functions=["scale"])


class ModelNew(nn.Module):
    def forward(self, x):  # torch.relu(x) would be the reference
        ext.scale(x, 2.0)
        return x.matmul_done if False else x
)PY";
  EXPECT_TRUE(check_module_source(m).ok()) << error_of(check_module_source(m));
  EXPECT_EQ(module_backend(m), ModuleBackend::kCuda);
  EXPECT_EQ(module_static_flags(m, ModuleBackend::kCuda), Flags());
  // The same words as code do fire: the strings above were what kept them quiet.
  std::string code = m + "\nout = torch.matmul(a, b)\n";
  EXPECT_EQ(module_static_flags(code, ModuleBackend::kCuda), Flags({"static: torch_computation: torch.matmul"}));
}

TEST(KernelbenchModule, MissingBackendNamesWhatIsMissing) {
  std::string no_load =
      std::string(kCudaPrelude).substr(0, std::string(kCudaPrelude).find("add_ext =")) + kCudaModelNew;
  EXPECT_EQ(module_backend(no_load), ModuleBackend::kTorch);
  EXPECT_EQ(module_static_flags(no_load, ModuleBackend::kCuda),
            Flags({"static: missing_backend: cuda (no load_inline call)"}));
  std::string no_tl = R"PY(import torch
import torch.nn as nn
import triton


@triton.jit
def copy_kernel(x_ptr):
    return


class ModelNew(nn.Module):
    def forward(self, x):
        copy_kernel[(1,)](x)
        return x
)PY";
  EXPECT_EQ(module_backend(no_tl), ModuleBackend::kTriton);
  EXPECT_EQ(module_static_flags(no_tl, ModuleBackend::kTriton),
            Flags({"static: missing_backend: triton (no tl. operation)"}));
}

TEST(KernelbenchModuleFences, BlocksKeepTheirInfoLinesAndContent) {
  std::string text = "prose\n  ```CUDA extra words\nint x;\n```\n````python\n```\ninner\n````\n```json\n```\n";
  LineIndex lines(text);
  Result<std::vector<FencedBlock>> blocks = find_fenced_blocks(lines);
  ASSERT_TRUE(blocks.ok()) << blocks.status().message();
  ASSERT_EQ(blocks->size(), 3u);
  const std::vector<FencedBlock>& b = *blocks;
  EXPECT_EQ(b[0].info, "cuda");
  EXPECT_EQ(b[0].open_line, 2u);
  EXPECT_EQ(text.substr(b[0].begin, b[0].end - b[0].begin), "int x;\n");
  EXPECT_EQ(b[1].info, "python");
  EXPECT_EQ(text.substr(b[1].begin, b[1].end - b[1].begin), "```\ninner\n");
  EXPECT_EQ(b[2].info, "json");
  EXPECT_EQ(b[2].begin, b[2].end);
  EXPECT_EQ(lines.line_of(0), 1u);
  EXPECT_EQ(lines.line_of(b[1].begin), 6u);
  // ```cuda``` in prose opens nothing; an opened fence must close.
  EXPECT_TRUE(find_fenced_blocks(LineIndex("say ```cuda``` here\n```cuda```\n"))->empty());
  Result<std::vector<FencedBlock>> open = find_fenced_blocks(LineIndex("a\n```launch\nk<<<1, 1>>>()\n"));
  ASSERT_FALSE(open.ok());
  EXPECT_EQ(open.status().message(),
            "reply, line 2: the ```launch block opened here is never closed: end it with a line ```");
}

uint64_t test_seed() {
  const char* env = std::getenv("VINCI_TEST_SEED");
  uint64_t seed = env ? std::strtoull(env, nullptr, 10) : 20260611;
  std::printf("seed %llu (set VINCI_TEST_SEED to change)\n", static_cast<unsigned long long>(seed));
  return seed;
}

TEST(KernelbenchModule, MutatedModulesAndRepliesAreHandledDeterministically) {
  // Keyed random edits of the modules and of replies holding them, spliced with the pieces the
  // lexer and scanner care about: every function answers, the same way twice.
  const std::vector<std::string> pieces = {"\"\"\"",
                                           "'''",
                                           "'",
                                           "\"",
                                           "\\",
                                           "#",
                                           "\n",
                                           "```",
                                           "```python\n",
                                           "class ModelNew(",
                                           "class Model",
                                           "__global__ void k(",
                                           "//",
                                           "/*",
                                           "@triton.jit\n",
                                           "def ",
                                           "(",
                                           ")",
                                           "try:",
                                           "setattr(",
                                           "r\"",
                                           "f'",
                                           std::string("\0", 1),
                                           "\xff",
                                           "\xEF\xBB\xBF",
                                           "torch.cuda.",
                                           " = "};
  const std::vector<std::string> seeds = {cuda_add(), kTritonAdd, kTorchOnly,
                                          "Quoted:\n" + fenced("python", kTorchOnly) + fenced("python", cuda_add())};
  uint64_t seed = test_seed();
  for (int i = 0; i < 400; ++i) {
    Stream s(RngKey::root(seed).with("kernelbench_module", i));
    std::string text = seeds[s.below(seeds.size())];
    for (uint64_t e = 0, edits = 1 + s.below(8); e < edits; ++e) {
      size_t at = s.below(text.size() + 1);
      switch (s.below(3)) {
        case 0: text.insert(at, pieces[s.below(pieces.size())]); break;
        case 1: text.erase(at, s.below(40)); break;
        default: text.insert(at, text.substr(s.below(text.size() + 1), s.below(200))); break;
      }
    }
    SCOPED_TRACE("case " + std::to_string(i));
    Result<std::string> a = extract_module_answer(text), b = extract_module_answer(text);
    EXPECT_EQ(error_of(a), error_of(b));
    if (a.ok() && b.ok()) {
      EXPECT_EQ(*a, *b);
    }
    EXPECT_EQ(error_of(check_module_source(text)), error_of(check_module_source(text)));
    EXPECT_EQ(module_backend(text), module_backend(text));
    for (ModuleBackend expected : {ModuleBackend::kCuda, ModuleBackend::kTriton, ModuleBackend::kTorch}) {
      Flags flags = module_static_flags(text, expected);
      EXPECT_EQ(flags, module_static_flags(text, expected));
      for (const std::string& f : flags) {
        EXPECT_EQ(f.rfind("static: ", 0), 0u) << f;
        EXPECT_LT(f.size(), 2000u) << f;
      }
    }
  }
}

TEST(KernelbenchModule, HostileTextIsReadWithoutBlowingUp) {
  // Each of these is quadratic for a scanner that rescans from every opening: a base list, a
  // string, a fence or a declaration that never ends, thousands of times over. At ~1 MiB each, a
  // quadratic scan takes hours (the test's timeout stops it); the linear one takes well under a
  // second, a few under the sanitizers. The time is printed, never asserted: a loaded machine may
  // be ten times slower.
  auto repeat = [](const std::string& s, size_t n) {
    std::string out;
    for (size_t i = 0; i < n; ++i) out += s;
    return out;
  };
  const std::vector<std::string> hostile = {
      repeat("class A(", 100000),
      "x" + repeat(".x", 400000),
      "class A(" + repeat("b.", 300000) + "c):\n",
      repeat("'''\"\"\"'", 100000),
      "s = r\"\"\"" + repeat("__global__ void ", 60000) + "\"\"\"\nload_inline()\n",
      "s = '''" + repeat("__global__ __launch_bounds__((((", 30000) + "'''\n",
      repeat("@triton.jit\n", 80000) + "def k(): pass\n",
      repeat("setattr(torch.cuda, ", 50000),
      repeat("try:\n", 150000),
      repeat("```python\nclass ModelNew(nn.Module):\n```\n", 30000),
      repeat("```py\n", 100000),
      repeat("F.relu" + std::string(1, '('), 100000) + repeat("x = nn.L(a) @ b\n", 50000),
  };
  auto start = std::chrono::steady_clock::now();
  for (const std::string& h : hostile) {
    (void)extract_module_answer(h);
    (void)check_module_source(h);
    (void)module_backend(h);
    Flags f = module_static_flags(h, ModuleBackend::kCuda);
    for (const std::string& flag : f) EXPECT_LT(flag.size(), 2000u) << flag.substr(0, 200);
  }
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("hostile inputs: %.2f s\n", seconds);
}

// What extraction returns is a candidate as far as text tells: a block holding a NUL byte (the
// module fuzz target's first find) is an error, not a module that check_module_source refuses.
TEST(KernelbenchModule, AnExtractedModulePassesTheSourceCheck) {
  std::string reply = "```python\nimport torch\n\nclass ModelNew(torch.nn.Module):\n    x = 1";
  reply += '\0';
  reply += "\n```\n";
  Result<std::string> m = extract_module_answer(reply);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("the module: line 4: "), std::string::npos) << m.status().to_string();
  EXPECT_NE(m.status().message().find("NUL"), std::string::npos) << m.status().to_string();
}

}  // namespace
}  // namespace vinci

namespace vinci {
namespace {

// The kernels a module defines (for its time coverage): load_inline's __global__ functions in its
// strings, whatever their qualifiers, and its @triton.jit functions; and a profiled kernel is the
// module's own by its bare name, never when it sits in a library's namespace.
TEST(KernelbenchModule, OwnKernelsAreNamedFromTheSourceAndMatchedInTheProfile) {
  const std::string module = R"(import torch
import triton
import triton.language as tl
from torch.utils.cpp_extension import load_inline

source = """
__global__ void relu_kernel(const float* x, float* y, int n) { }
__global__ __launch_bounds__(256) void bounded(float* y) { }
template <typename T>
__global__ void templated(T* y) { }
extern "C" __global__ void
plain_c (float* y) { }
"""

@triton.jit
def add_kernel(x_ptr, n, BLOCK: tl.constexpr):
    pass

@triton.autotune(configs=[], key=["n"])
@triton.jit
def tuned_kernel(x_ptr, n):
    pass
)";
  std::vector<std::string> own = module_kernel_names(module);
  EXPECT_EQ(own,
            (std::vector<std::string>{"add_kernel", "bounded", "plain_c", "relu_kernel", "templated", "tuned_kernel"}));
  EXPECT_TRUE(is_own_kernel("relu_kernel(float const*, float*, int)", own));
  EXPECT_TRUE(is_own_kernel("void templated<float>(float*)", own));
  EXPECT_TRUE(is_own_kernel("add_kernel", own));
  EXPECT_TRUE(is_own_kernel("void vinci_ext::bounded(float*)", own));
  EXPECT_FALSE(is_own_kernel("ampere_sgemm_128x64_nn", own));
  EXPECT_FALSE(
      is_own_kernel("void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous "
                    "namespace)::relu_kernel>(int, float*)",
                    own));
  // A kernel named like ATen's is the module's only where it is the module's own.
  std::vector<std::string> sly = module_kernel_names("__global__ void vectorized_elementwise_kernel(float* y) {}");
  EXPECT_FALSE(is_own_kernel("void at::native::vectorized_elementwise_kernel<4, float>(int, float*)", sly));
  EXPECT_TRUE(is_own_kernel("vectorized_elementwise_kernel(float*)", sly));
  EXPECT_TRUE(module_kernel_names("import torch\n\nclass ModelNew(torch.nn.Module):\n    pass\n").empty());
}

}  // namespace
}  // namespace vinci

// KernelBench candidates: a Python module that defines `class ModelNew(nn.Module)` with its
// kernels inline, the format KernelBench (github.com/ScalingIntelligence/KernelBench) asks models
// for. The kernels are CUDA C++ compiled by torch.utils.cpp_extension.load_inline (the source a
// Python string holding __global__ functions), @triton.jit functions launched by a torch wrapper,
// or none at all (the module calls PyTorch).
//
// Everything here reads text only: nothing is imported or run. The Python is read by a small
// lexer that tells code from comments and strings (prefixes r, b, u, f, t and their pairs;
// triple quotes; backslash escapes and line joining), so `# torch.matmul` is no call while a
// __global__ inside a string is a kernel. Every function takes any bytes and runs in time linear
// in their size (gpu/fenced_blocks.h for the reply's blocks).
#ifndef VINCI_GPU_KERNELBENCH_MODULE_H_
#define VINCI_GPU_KERNELBENCH_MODULE_H_

#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace vinci {

// What a module's kernels are written in. kTorch: neither load_inline CUDA nor @triton.jit.
enum class ModuleBackend { kCuda, kTriton, kTorch };

// "cuda", "triton", "torch".
const char* module_backend_name(ModuleBackend b);
// The inverse of module_backend_name; an error names the three.
Result<ModuleBackend> parse_module_backend(const std::string& name);

// The module of a model's reply (a <think> block already removed): the ```python (also ```py,
// ```python3) fenced block that defines `class ModelNew` at column 0; when several do, the last
// one (models often quote the problem first, and a revision comes after). A reply with no fenced
// block at all but such a class statement is one bare module and is returned whole. Errors are
// written for the model to fix on its next turn: "the reply holds no ```python block defining
// class ModelNew (found: ```cuda at line 3): ...". A reply that is not UTF-8, or that opens a
// fence it never closes, is an error too.
Result<std::string> extract_module_answer(std::string_view reply);

// OK when source is a KernelBench candidate as far as text tells: no NUL byte, valid UTF-8, and
// a class statement `class ModelNew(` at column 0 (in code, not in a comment or string). The error
// names the line when it can: "line 12: class ModelNew is indented: define it at the top level of
// the module, column 0".
Status check_module_source(std::string_view source);

// The backend the module's text uses: kCuda when it calls load_inline or load (those of
// torch.utils.cpp_extension, bare or dotted) and a string of it holds a __global__ function;
// else kTriton when it defines a function decorated with triton.jit (also under triton.autotune
// or triton.heuristics); else kTorch.
ModuleBackend module_backend(std::string_view source);

// vinci's static checks on a module, in the spirit of KernelBench's kernel_static_checker.py:
// flags a reviewer wants to see beside the measured verdict. They never decide correctness or
// reward (measurement does); they are recorded. Each flag is "static: NAME" or
// "static: NAME: DETAIL", in the order below, each NAME at most once; lists in a DETAIL are in
// order of first appearance, at most 8 items then "and N more".
//
//   try_except_fallback  a try statement or contextlib.suppress: the shape of a kernel wrapped in
//                        a handler that falls back to PyTorch. DETAIL: "line 12" or "lines 12, 30".
//                        KernelBench: code_bypass (its try/except part). vinci flags every try,
//                        as KernelBench does: telling a fallback from an honest retry takes more
//                        than a lexer.
//   inherits_reference   ModelNew derives from the reference `Model` (directly, or through a
//                        class of the module that does), so whatever it leaves out runs the
//                        reference. DETAIL: the chain ("ModelNew(Model)"), and ", no forward of
//                        its own" when ModelNew defines none. KernelBench: code_bypass (its `pass`
//                        part, which flags any pass statement; vinci looks at the inheritance).
//   torch_computation    calls of PyTorch computation ops: torch.X for matmul and convolution
//                        families, pooling, activations, normalisations, softmax, reductions and
//                        scans, pointwise math, losses and distances (not tensor creation or
//                        layout: empty, zeros, reshape, cat); torch.linalg, torch.fft and
//                        torch.ops.aten calls; any F. / nn.functional. call; nn.Layer(...) compute
//                        modules (not Module, Parameter, containers, init); the binary @ operator.
//                        DETAIL: the names as written, "torch.matmul, F.relu, nn.Linear, @".
//                        KernelBench: torch_computation_ops and pytorch_wrap.
//   missing_backend      expected is kCuda and the module has no __global__ function in a string
//                        or no load_inline/load call: DETAIL "cuda (no __global__ kernel in a
//                        source string)" or "cuda (no load_inline call)"; expected is kTriton
//                        and no function is decorated triton.jit, or none of its code uses tl.:
//                        "triton (no @triton.jit function)" or "triton (no tl. operation)".
//                        KernelBench: cuda_impl, triton_impl.
//   unused_kernel        a __global__ function of a source string, or a @triton.jit function,
//                        whose name appears nowhere else in code or source strings (C and C++
//                        comments in the strings skipped): defined, never launched. A kernel
//                        declared twice or named in a string counts as used. DETAIL: the names.
//                        vinci's own.
//   host_access          the module reaches outside the process's computation: os.environ,
//                        environ, os.getenv, getenv(, os.putenv, open(, io.open, torch.load(,
//                        os.system, os.popen, subprocess, shutil, socket, urllib, requests; in
//                        source strings getenv, secure_getenv, fopen, popen, ifstream, ofstream,
//                        fstream (listed with " (CUDA source)").
//                        DETAIL: what was found. vinci's own.
//   timing_patch         an assignment to an attribute of torch.cuda (synchronize, Event,
//                        Event.record, ...), of time (time.perf_counter, ...) or of
//                        triton.testing, or setattr on one of them. DETAIL: the targets.
//                        KernelBench: timing_event_patch.
//   concurrency          threads or side streams: threading, _thread, multiprocessing,
//                        concurrent.futures, ThreadPoolExecutor, ProcessPoolExecutor,
//                        torch.cuda.Stream / stream / ExternalStream / set_stream, .wait_stream,
//                        .record_stream; in source strings cudaStreamCreate*, getStreamFromPool,
//                        std::thread. DETAIL: what was found. KernelBench: stream_injection and
//                        thread_injection.
//   lazy_tensor          a torch.Tensor subclass or its machinery: _make_subclass,
//                        torch.Tensor.__new__, __torch_function__, __torch_dispatch__, a class
//                        deriving from torch.Tensor or Tensor. DETAIL: what was found.
//                        KernelBench: lazy_eval.
//   dynamic_code         code built at run time, which every check here is blind to: exec(,
//                        eval(, compile(, __import__(, importlib. DETAIL: what was found.
//                        vinci's own.
//
// Not reproduced: KernelBench's precision_downgrade (vinci compares outputs against a tolerance),
// and its other backends' checks (hip, thunderkittens, cute, tilelang).
std::vector<std::string> module_static_flags(std::string_view source, ModuleBackend expected);

// The backend a record's static flags are checked against: the module's own, or CUDA
// (KernelBench's default) for a module with neither kind of kernel.
ModuleBackend expected_module_backend(std::string_view source);
// Appends module_static_flags(source, expected_module_backend(source)) to *flags: what every
// evaluator records beside its verdict on a module.
void add_module_static_flags(std::string_view source, std::vector<std::string>* flags);

// The names of the kernels a module defines itself: every `__global__` function in its source
// text (load_inline's CUDA, wherever it sits in the module's strings) and every function
// decorated `@triton.jit` (or `@jit`). Sorted, without repeats.
std::vector<std::string> module_kernel_names(std::string_view source);

// Whether a kernel the profiler names (demangled: "void ns::k<4>(float const*, int)", or a Triton
// kernel's bare name) is one of own: its name, without return type, template arguments,
// parameters and namespaces, is in own, and it is not in a library's namespace (at::, c10::,
// cutlass::, cub::, thrust::, cudnn, cublas) whatever its name. The time coverage of a module is
// the share of its device time in such kernels (docs/kernelbench_format.md).
bool is_own_kernel(std::string_view profiled_name, const std::vector<std::string>& own);

}  // namespace vinci

#endif  // VINCI_GPU_KERNELBENCH_MODULE_H_

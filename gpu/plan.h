// Kernel plans: what a candidate is. docs/plan_format.md is the user-facing description.
//
// A plan is kernels (CUDA C++ device code, extern "C" __global__, compiled by NVRTC, no host
// code) plus a declarative launch schedule: buffers with symbolic shapes, and steps run in order.
// A step launches one of the plan's kernels on a grid and block given as size expressions
// (gpu/expr.h), or runs one library op (marked library: an eager-equivalent step the evaluator may
// count as a decoy where custom kernels are required).
//
// Canonical bytes (the plan's address is hash_tagged("plan", canonical_bytes)):
//   plan_to_json(plan).dump()  -- nlohmann's compact form, object keys sorted (std::map), buffers
//   and kernels sorted by name (they are sets); steps, args and shapes keep their order (they
//   mean something). Two plans that differ only in key order or whitespace of their JSON text
//   therefore have one address.
#ifndef VINCI_GPU_PLAN_H_
#define VINCI_GPU_PLAN_H_

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/hash.h"
#include "core/status.h"
#include "gpu/precision.h"
#include "gpu/task.h"

namespace vinci {

constexpr const char* kPlanFormat = "vinci.plan/1";

struct PlanBuffer {
  std::string name;                // task input, weight ("fc.weight"), op value, or a plan-made temporary
  std::string role;                // input | weight | intermediate | output
  std::string dtype;               // f32 | i64
  std::vector<std::string> shape;  // size expressions
};

// Cost of one launch as size expressions: what the simulator's roofline needs.
struct KernelCost {
  std::string elements;    // output elements written
  std::string bytes_read;  // bytes the kernel must read from global memory at least once
  std::string bytes_written;
  std::string flops;  // floating-point operations (an FMA counts 2)
};

// The generator's statement about a knob setting.
struct Verdict {
  bool guaranteed = true;  // false: known-risky
  std::string reason;      // why risky: "no tail handling", "tf32 precision", "race", ...
  std::string fails_when;  // size expression; the kernel is wrong when it evaluates nonzero
                           // (empty: wrong regardless of size, or depends on data/tolerance)
};

// The languages a kernel may be written in.
constexpr const char* kLanguageCuda = "cuda";
constexpr const char* kLanguageTriton = "triton";

// What wrote a kernel: one of the code generator's families (gpu/codegen/codegen.h; its knobs carry the
// family's prefix: ew., row., gemm.), or kCustom, written by hand or by a model. A plan's JSON
// spells it kernel_family_name's way.
enum class KernelFamily { kElementwise, kRowReduction, kGemm, kCustom };

// "elementwise", "row_reduction", "gemm", "custom".
const char* kernel_family_name(KernelFamily family);
// The inverse of kernel_family_name; anything else is an error naming the four names.
Result<KernelFamily> parse_kernel_family(const std::string& name);

struct PlanKernel {
  std::string name;    // the extern "C" __global__ entry point (triton: the @triton.jit function)
  std::string source;  // complete NVRTC translation unit (triton: a Python module)
  // cuda (NVRTC) | triton (gpu/compile/triton.h). Written to JSON only when not cuda, so plans from before
  // the field keep their addresses.
  std::string language = kLanguageCuda;
  KernelFamily family = KernelFamily::kCustom;
  std::map<std::string, std::string> knobs;  // knob -> chosen value
  std::vector<std::string> fused_ops;        // task op names computed here, in order ("linear", "relu")
  std::vector<std::string> fused_values;     // the task values those ops produce
  int64_t block_threads = 0;
  int64_t vector_width = 1;
  int64_t items_per_thread = 1;
  std::array<int64_t, 3> tile{{0, 0, 0}};      // gemm block tile M, N, K
  std::array<int64_t, 2> thread_tile{{0, 0}};  // gemm register block per thread
  bool tensor_cores = false;
  Precision precision = Precision::kFp32;  // operands rounded so for the products
  std::string reduction = "none";          // none | warp_shuffle | block_tree | block_shuffle
  std::string algorithm;                   // e.g. softmax "online" vs "two_pass"
  int64_t shared_bytes = 0;                // static shared memory per block
  KernelCost cost;
  Verdict verdict;
};

struct PlanArg {
  std::string buffer;  // set for a pointer argument
  std::string i64;     // set for a 64-bit integer argument (a size expression)
};

// A launch of a Triton kernel: what Triton compiles it with. A Triton launch's block is
// [32 * num_warps, 1, 1].
struct TritonLaunch {
  // tl.constexpr parameter -> its value: an integer size expression (evaluated at the task's
  // sizes), a float literal (1e-05, 0.5) or True / False.
  std::map<std::string, std::string> constexprs;
  int64_t num_warps = 0;   // 0: not a Triton launch; else a power of two, 1 to 32
  int64_t num_stages = 0;  // 1 to 8 (software pipelining depth of loops)
};

// Checks a constexpr's value text: True, False, a float literal or a size expression.
Status check_triton_constexpr(const std::string& text);
// A float literal as Python writes one (1.0, .5, 1e-5, -2.5E3): a constexpr of type float.
bool is_float_literal(const std::string& text);

// What a plan step runs: a kernel of the plan, or one op of the task vocabulary through the
// harness's library. "kernel" and "library" in plan JSON (step_kind_name).
enum class StepKind { kKernel, kLibrary };
const char* step_kind_name(StepKind kind);

struct PlanStep {
  StepKind kind = StepKind::kKernel;
  // kind == kernel:
  std::string kernel;
  std::array<std::string, 3> grid{{"1", "1", "1"}};
  std::array<std::string, 3> block{{"1", "1", "1"}};
  std::vector<PlanArg> args;
  TritonLaunch triton;  // kind == kernel, a Triton kernel only; written to JSON only then
  // kind == library: one op of the task vocabulary, run by the harness's library (libtorch)
  OpSpec op;
  // kind == library, matrix products only: "fp32" (cuBLAS in full FP32, as
  // the reference), "tf32" (cuBLAS may use TF32 tensor cores for this step), "bf16" or "fp16"
  // (the operands, weights included, rounded to that type; the product on 16-bit tensor cores
  // with FP32 accumulation, its output in that type, then widened to FP32). Written to JSON only
  // when not fp32, so plans from before the field keep their addresses.
  Precision precision = Precision::kFp32;
};

struct Plan {
  std::string task_id;
  std::string origin;                        // codegen | eager | llm | hand
  std::map<std::string, std::string> knobs;  // the whole setting the plan was generated from
  std::vector<PlanBuffer> buffers;
  std::vector<PlanKernel> kernels;
  std::vector<PlanStep> steps;
  std::string output;
  // A KernelBench module (docs/kernelbench_format.md): Python source defining `class ModelNew`,
  // its kernels inline (load_inline CUDA, Triton, or plain PyTorch). A module plan has nothing else:
  // no buffers, kernels, steps or output. Written to JSON only when set, so other plans keep their
  // addresses.
  std::string module;

  bool is_module() const { return !module.empty(); }

  // True when no step launches a kernel of the plan's own (an eager-equivalent plan).
  bool library_only() const;
  // True when the generator vouches for the whole plan: every kernel's verdict is guaranteed and
  // every library step keeps the reference's FP32 products (a tf32 step is a precision risk).
  bool guaranteed() const;
  const PlanKernel* find_kernel(const std::string& name) const;
  const PlanBuffer* find_buffer(const std::string& name) const;
};

// A KernelBench module as a plan of task_id: origin and the module's source, nothing else.
Plan module_plan(const std::string& task_id, std::string source, std::string origin = "llm");

nlohmann::json plan_to_json(const Plan& plan);
std::string canonical_bytes(const Plan& plan);
Digest plan_address(const Plan& plan);
// The address kernels are cached and stored under: the source alone, tagged "kernel_source".
Digest kernel_source_address(const std::string& source);

// Parses a plan; errors name the JSON path ("steps[2].grid[0]") and what was expected.
Result<Plan> plan_from_json(const nlohmann::json& j);
Result<Plan> parse_plan(const std::string& text);

// Checks a plan against its task: every step's kernel exists, every buffer a step names is
// declared or made by an earlier step, every expression parses, library ops are known ops, and
// the output is produced.
Status validate_plan(const Plan& plan, const Task& task);
// Part of validate_plan: every expression of the plan (buffer shapes, kernel costs, grid and block
// sizes, i64 arguments, Triton constexprs) evaluates at each of the task's sizes: only the task's size symbols and
// buffers declared before are named, nothing overflows or divides by zero. The error names the
// field and the size.
Status check_plan_expressions(const Plan& plan, const Task& task);

// Limits on a candidate's size, settings of every evaluator (sim and live): a plan over one is
// rejected before anything is compiled (compiled = false, flag "rejected: over_limit", the reason
// naming the limit and the value). Defaults are generous: the code generator's largest plans are
// a few kernels of a few KiB. docs/plan_format.md lists them.
struct PlanLimits {
  // The generator's largest plans (every task, every fusion choice, and the eager plans): 572
  // steps, 240 kernels, 583 KiB of source; a model's reply holds at most 2 MiB.
  int64_t max_kernel_source_bytes = int64_t{256} << 10;  // one kernel's source
  int64_t max_plan_source_bytes = int64_t{2} << 20;      // all kernels' sources together
  int64_t max_kernels = 1024;
  int64_t max_steps = 4096;  // steps (launches and library ops)

  friend bool operator==(const PlanLimits& a, const PlanLimits& b) {
    return a.max_kernel_source_bytes == b.max_kernel_source_bytes &&
           a.max_plan_source_bytes == b.max_plan_source_bytes && a.max_kernels == b.max_kernels &&
           a.max_steps == b.max_steps;
  }
};

// Why the plan is over a limit ("" when it is not): "kernel 'k': source of 300000 bytes is over
// the limit max_kernel_source_bytes = 262144".
std::string plan_limit_error(const Plan& plan, const PlanLimits& limits);

// The limits an evaluator records in a measurement's settings: only those not at their default,
// so the records of runs with default limits are what they were before limits existed.
void add_limit_settings(const PlanLimits& limits, std::map<std::string, std::string>* settings);

// The bytes a buffer of this shape and dtype (f32: 4, i64: 8) takes: an error naming the shape
// when a dimension is negative or the element count or byte size overflows 64 bits.
Result<int64_t> buffer_bytes(const std::vector<int64_t>& shape, const std::string& dtype);

// CUDA's launch limits (every architecture vinci targets): grid x <= 2^31 - 1, y and z <= 65535;
// block x and y <= 1024, z <= 64, x*y*z <= 1024; every dimension >= 1.
constexpr int64_t kMaxGridX = (int64_t{1} << 31) - 1;
constexpr int64_t kMaxGridYZ = 65535;
constexpr int64_t kMaxBlockXY = 1024;
constexpr int64_t kMaxBlockZ = 64;
constexpr int64_t kMaxBlockThreads = 1024;

// Why CUDA would refuse a launch of this grid and block, checked on the 64-bit values (before
// anything narrows them to the driver's unsigned ints): "" when it would not. The sim and the
// live evaluator both reject a launch with this reason.
std::string launch_dims_error(const std::array<int64_t, 3>& grid, const std::array<int64_t, 3>& block);

}  // namespace vinci

#endif  // VINCI_GPU_PLAN_H_

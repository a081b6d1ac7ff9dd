// The model-facing plan format: what a language model writes instead of plan JSON, so that CUDA
// source needs no escaping. docs/plan_format.md ("The model-facing format") is the user-facing
// description.
//
// A reply holds one ```cuda block (device code: extern "C" __global__ entry points, helpers) and
// one ```launch block, one statement a line:
//   buffer NAME DTYPE [EXPR, ...]              an intermediate buffer (f32 | i64)
//   KERNEL<<<GRID, BLOCK>>>(ARG, ...)          one launch; GRID/BLOCK: EXPR or (EXPR, EXPR, EXPR)
//   library OP -> OUT, ...                     the task's own op producing OUT, run by the library
// The task's inputs, weights and output are declared from the task (task_buffers), so a model
// never declares them. A line `// @unit` in the cuda block starts a new translation unit (each is
// compiled on its own; one without markers is one unit shared by all its entry points).
//
// Parsing is deterministic: the same reply gives the same plan bytes and address. A model's plan
// carries no claims: kernel metadata (family, cost, verdict, ...) is that of a plan written
// without it (family custom, verdict risky), origin is "llm". A `# knobs: k=v ...` comment in the
// launch block is kept as plan.knobs: a hint for match_generated_plan, never trusted.
#ifndef VINCI_GPU_MODEL_PLAN_H_
#define VINCI_GPU_MODEL_PLAN_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "gpu/plan.h"
#include "gpu/task.h"

namespace vinci {

// The line that separates translation units in the cuda block.
constexpr const char* kUnitMarker = "// @unit";

// Bounds on what a reply may ask of the parser; exceeding one is an error naming the limit.
struct ModelPlanLimits {
  size_t max_reply_bytes = 2 * 1024 * 1024;  // a generated ResNet-101 plan is ~400 KiB
  size_t max_kernels = 256;                  // extern "C" __global__ entry points (JSON: kernels)
  size_t max_launch_lines = 1024;            // statements of the launch block (JSON: steps); comments and
                                             // blank lines do not count. DenseNet-201 (L3_016) runs 413
                                             // library steps eagerly
  // The kernel languages a reply may use: a ```cuda block, a ```triton block (a Python module of
  // @triton.jit functions, compiled by Triton). An experiment's policy.languages sets it.
  std::vector<std::string> languages = {"cuda", "triton"};
};

// The buffers every plan of the task declares without being asked: the task's inputs (i64 for
// class labels), its weights, and its output, in that order.
Result<std::vector<PlanBuffer>> task_buffers(const Task& task);

// Reads a reply (prose and fenced blocks; a <think> block already removed) into a plan for task.
// Also accepts a plan as JSON: a ```json block, or the whole reply one JSON object. Errors are
// written for the model to fix on its next turn: "launch block, line 3, column 18: expected ','
// or ')' after argument 2, found ']'" (lines and columns 1-based, counted in the reply, columns
// in bytes). The plan passes validate_plan.
Result<Plan> parse_model_plan(std::string_view reply, const Task& task,
                              const ModelPlanLimits& limits = ModelPlanLimits());

// Writes a plan as a model would: the ```cuda block (each distinct kernel source once, in plan
// order, separated by kUnitMarker lines) and the ```launch block (a `# knobs:` hint when the plan
// has knobs, buffer lines for intermediates, then the steps). Errors for what the format cannot
// carry byte for byte: a source not ending in a newline or holding a fence or marker line.
Result<std::string> render_model_plan(const Plan& plan);

// What a model's text determines: task, output, buffers, kernel names and sources, steps. Origin
// becomes "llm", knobs are dropped and every kernel's metadata is that of a kernel written
// without it.
Plan strip_plan_metadata(const Plan& plan);
// Equal up to metadata: the canonical bytes of both stripped plans are equal.
bool same_plan_content(const Plan& a, const Plan& b);

struct MatchStats {
  int64_t generated = 0;   // generate_plan calls made
  bool from_hint = false;  // the plan's knobs named the setting that matched
};

// The sim world's pricing rule. The simulator prices only generator kernels, so a model's plan is
// priceable exactly when it equals, up to metadata, a plan generate_plan emits for a setting of
// knob_space(task); this returns that generator plan (with its metadata), or nullopt ("not
// priceable in the sim world"). plan.knobs, when set, is tried first as a hint; only the byte
// comparison decides. Otherwise the search is per family, since a kernel's code and launch depend
// on the plan's structure and its own family's knobs only. The structure is the knobs that change
// the steps: fusion, gemm.impl and, with gemm.impl = library, gemm.tensor_cores (the library
// step's precision); S structures are tried, each knob's default first. For each, the plan at the
// defaults must have the target's buffers, kernel names and steps; then each family whose kernels
// differ is searched alone (its sub-space in index order without gemm.impl, the others fixed) and
// the setting so assembled is generated and compared whole. Where several settings give one
// content, the hint's wins, else the first in that order. At most 1 + sum over structures of
// (2 + sum over the families it has kernels of (|family space| - 1)) generate_plan calls:
// 7711 for the largest space (fusion, elementwise 192, row_reduction 320, gemm 1296 without
// gemm.impl; a library GEMM has no gemm kernel to search).
std::optional<Plan> match_generated_plan(const Task& task, const Plan& plan, MatchStats* stats = nullptr);

}  // namespace vinci

#endif  // VINCI_GPU_MODEL_PLAN_H_

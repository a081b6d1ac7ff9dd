// The task suite: KernelBench-style problems as data.
//
// A task is an op graph in a TOML file (data/tasks/level*.toml, format in docs/tasks.md): named
// inputs with symbolic shapes, modules (weights) in the order the KernelBench nn.Module would
// construct them, and ops over named values. One executor (gpu/executor.h) runs every task with
// libtorch; the code generator (gpu/codegen/codegen.h) reads the same graph. Nothing here includes torch.
#ifndef VINCI_GPU_TASK_H_
#define VINCI_GPU_TASK_H_

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/enum_names.h"
#include "core/status.h"
#include "gpu/ops.h"

namespace vinci {

// Which set of sizes to instantiate a task at.
enum class SizeName { kFull, kSmall };  // full: KernelBench shapes for a GPU; small: CPU tests
const char* size_name(SizeName s);
// "full" or "small"; anything else is an error naming what was found.
Result<SizeName> parse_size_name(std::string_view name);

// Symbol -> value, e.g. {"B": 4096, "D": 393216}.
using SizeMap = std::map<std::string, int64_t>;

// What values an input may take, so every generator produces a valid input for the task.
enum class InputDomain {
  kReal,         // any float
  kPositive,     // > 0 (log, sqrt): signed and heavy-tailed draws are mapped through |x| + 1e-3
  kProbability,  // rows on the last dim sum to 1 (KL divergence): softmax of the draw
  kIndex,        // int64 class labels in [0, classes)
  kSign,         // +1 or -1 (hinge loss targets)
  // Matrices (rank 2) mapped after the draw, as KernelBench's get_inputs() builds them:
  kSymmetric,        // (A + A^T) / 2
  kUpperTriangular,  // torch.triu(A)
  kLowerTriangular,  // torch.tril(A)
};

struct InputSpec {
  std::string name;
  std::vector<std::string> shape;  // expressions of the size symbols (gpu/expr.h)
  InputDomain domain = InputDomain::kReal;
  std::string classes;  // expression; for kIndex only
  // KernelBench's `scale = torch.rand(()); x = torch.rand(...) * scale`: a scalar s ~ U[0, 1) is
  // drawn from the same generator just before the input and multiplies its draw (before the
  // domain's mapping), for every distribution. Not for index or sign inputs.
  bool scaled = false;
};

// A module's type as a value (docs/tasks.md); "block" only before a task's blocks are expanded.
enum class ModuleType : uint8_t {
  kLinear,
  kConv1d,
  kConv2d,
  kConv3d,
  kConvTranspose1d,
  kConvTranspose2d,
  kConvTranspose3d,
  kBatchNorm,
  kLayerNorm,
  kGroupNorm,
  kParameter,
  kMha,
  kLstm,
  kGru,
  kBuffer,
  kBlock,
  kUnknown,
};
inline constexpr EnumNames<ModuleType, 16> kModuleTypeNames = {
    "module type",
    {"linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "batch_norm",
     "layer_norm", "group_norm", "parameter", "mha", "lstm", "gru", "buffer", "block"}};

inline bool is_conv_module(ModuleType t) { return t >= ModuleType::kConv1d && t <= ModuleType::kConvTranspose3d; }
inline bool is_transposed_conv_module(ModuleType t) {
  return t >= ModuleType::kConvTranspose1d && t <= ModuleType::kConvTranspose3d;
}

struct ModuleSpec {
  std::string name;
  std::string type;      // linear, conv2d, batch_norm, parameter, mha, ... (docs/tasks.md)
  nlohmann::json attrs;  // the module's constructor arguments as written in the file

  // The type as a value: the one the task reader resolved (kept in `resolved`), or looked up again
  // where type was set without it or changed since.
  ModuleType kind() const {
    if (resolved != ModuleType::kUnknown && type == kModuleTypeNames.name(resolved)) return resolved;
    Result<ModuleType> t = kModuleTypeNames.parse(type);
    return t.ok() ? *t : ModuleType::kUnknown;
  }
  ModuleType resolved = ModuleType::kUnknown;
};

struct OpSpec {
  std::string op;                    // an op name from gpu/ops.h (as the task file writes it)
  std::vector<std::string> inputs;   // names of inputs or earlier ops' outputs
  std::vector<std::string> outputs;  // usually one
  std::string module;                // for ops that use weights (linear, conv2d, layer_norm, ...)
  nlohmann::json attrs;              // every other key of the op's table (dim, value, ...)

  // The op as a value: the code the task reader resolved (kept in `resolved`), or looked up again
  // where op was set without it or changed since.
  OpCode code() const { return resolved != OpCode::kUnknown && op == op_name(resolved) ? resolved : op_code(op); }
  OpCode resolved = OpCode::kUnknown;
};

// The op families of the suite (docs/tasks.md): for listing, per-family analysis, skill scopes and
// the sim backbone's task features. A task file names one by its name; any other name is refused.
// In the order of their names; kTaskFamilyCount counts them.
enum class TaskFamily : uint8_t {
  kAttention,
  kConv,
  kConvEpilogue,
  kElementwise,
  kGemm,
  kGemmEpilogue,
  kLoss,
  kNetwork,
  kNorm,
  kPooling,
  kRecurrent,
  kReduction,
  kScan,
  kSoftmax,
  kSsm,
};
constexpr int kTaskFamilyCount = 15;

// "conv_epilogue" for kConvEpilogue: the name task files, skills, reports and logs use.
const char* task_family_name(TaskFamily family);
// The inverse of task_family_name; anything else is an error listing the names.
Result<TaskFamily> parse_task_family(const std::string& name);

struct Task {
  std::string id;  // "L1_019": level and number, unique in the suite
  int level = 0;
  std::string name;  // "relu"
  TaskFamily family = TaskFamily::kElementwise;
  const char* family_name() const { return task_family_name(family); }
  std::string description;  // the text a model sees
  double atol = 1e-2;       // KernelGYM's default; evaluators may apply a stricter mode
  double rtol = 1e-2;
  std::map<std::string, SizeMap> sizes;  // "full", "small"
  std::vector<InputSpec> inputs;
  std::vector<ModuleSpec> modules;  // construction order = the order of weight draws
  std::vector<OpSpec> ops;          // execution order
  std::string output;
  std::string source_file;  // where it was read from, for error messages

  // The KernelBench twin: the problem file, relative to a KernelBench checkout's KernelBench/
  // folder ("level1/19_ReLU.py"), and for each of its module-level size constants the vinci size
  // expression giving its value (the cross-check sets them before building KernelBench's module).
  // Empty: a task of vinci's own, left out of KernelBench scores.
  std::string kernelbench_problem;
  struct KernelBenchGlobal {
    std::vector<std::string> values;  // size expressions
    bool list = false;                // a list constant (layer_sizes = [H, H]), else one value
  };
  std::map<std::string, KernelBenchGlobal> kernelbench_globals;
  // The problem's constructor, so that a module written for the problem file is built as
  // KernelBench builds it (`ModelNew(*get_init_inputs())`): the parameters of its Model.__init__
  // after self, as written ("in_features, out_features, subtract_value, multiply_value"), and the
  // items of its get_init_inputs(), each a size expression (a JSON string), a number, a boolean, or
  // an array of them. Without them (kernelbench_constructor false) the rendering's constructor
  // takes the task's sizes in order of use.
  bool kernelbench_constructor = false;
  std::string kernelbench_signature;
  nlohmann::json kernelbench_init = nlohmann::json::array();
  // Non-empty: KernelBench flags the problem, or it is degenerate; the reason. Scores can leave
  // flagged tasks out (`replay score --exclude-flagged`).
  std::string flag;
  // Non-empty where the full sizes differ from KernelBench's constants: what and why.
  std::string size_note;

  bool is_kernelbench() const { return !kernelbench_problem.empty(); }
  // "kernelbench", "kernelbench-flagged" or "vinci": the set the task belongs to.
  const char* set_name() const;

  // REQUIRES: sizes has the entry (checked when the suite loads).
  const SizeMap& size_map(SizeName s) const;
};

struct TaskSuite {
  std::vector<Task> tasks;  // sorted by (level, id)

  const Task* find(const std::string& id) const;
  std::vector<const Task*> at_level(int level) const;  // level 0: all
};

// Parses one task file. Errors name the file, the task id or index, the key, and what was
// expected and found.
Result<std::vector<Task>> parse_task_file(const std::string& path, const std::string& text);

// Loads every *.toml in dir (sorted by file name) and checks the suite: unique ids, known ops and
// module types, names defined before use, every shape expression resolvable at both sizes.
Result<TaskSuite> load_task_suite(const std::string& dir);

// The task folder of the source tree this binary was built from (data/tasks).
std::string default_task_dir();

// The items of a tuple-valued kernelbench global ("(D,)" -> {"D"}, "(C, H)" -> {"C", "H"}); empty
// for a plain size expression. TOML writes a tuple constant as an array: input_shape = ["D"].
std::vector<std::string> kernelbench_tuple_items(const std::string& e);

// Attribute helpers for op and module tables; errors name the task, the op and the key.
Result<int64_t> attr_int(const nlohmann::json& attrs, const std::string& key, const std::string& where);
int64_t attr_int_or(const nlohmann::json& attrs, const std::string& key, int64_t dflt);
double attr_double_or(const nlohmann::json& attrs, const std::string& key, double dflt);
bool attr_bool_or(const nlohmann::json& attrs, const std::string& key, bool dflt);
// A list of ints; a single int is broadcast to `rank` entries (kernel = 3 -> [3, 3]).
Result<std::vector<int64_t>> attr_ints(const nlohmann::json& attrs, const std::string& key, size_t rank,
                                       const std::string& where);
std::vector<int64_t> attr_ints_or(const nlohmann::json& attrs, const std::string& key, size_t rank, int64_t dflt);

}  // namespace vinci

#endif  // VINCI_GPU_TASK_H_

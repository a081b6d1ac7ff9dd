// Symbolic shapes: every value of a task graph and every weight, as size expressions
// (gpu/expr.h), so plans can state buffer shapes once for all sizes.
#ifndef VINCI_GPU_SHAPES_H_
#define VINCI_GPU_SHAPES_H_

#include <map>
#include <string>
#include <vector>

#include "core/status.h"
#include "gpu/task.h"

namespace vinci {

using SymShape = std::vector<std::string>;
using ShapeMap = std::map<std::string, SymShape>;

// One weight tensor of a module: "fc1.weight", or the module's own name for `parameter`.
struct WeightSpec {
  std::string name;
  std::string module;
  std::string param;  // weight, bias, running_mean, running_var, in_proj_weight, ...
  SymShape shape;
};

// Shapes of inputs and every op output. Errors name the task and the op.
Result<ShapeMap> infer_shapes(const Task& task);

// Weights in construction order (the order their values are drawn).
Result<std::vector<WeightSpec>> weight_specs(const Task& task);

// A module attribute that is a size: an integer or a size expression string.
Result<std::string> attr_expr(const nlohmann::json& attrs, const std::string& key, const std::string& where);

// Evaluates a symbolic shape at concrete sizes.
Result<std::vector<int64_t>> eval_shape(const SymShape& shape, const SizeMap& sizes);

}  // namespace vinci

#endif  // VINCI_GPU_SHAPES_H_

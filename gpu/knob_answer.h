// The knobs answer format (policy.format = "knobs"): a compact answer for small language models
// that cannot write kernels byte for byte. The model writes the code generator's knob settings,
// one `knob = value` line each, in a ```knobs block; the generator turns them into the plan the
// evaluator prices, so the path from reply text to reward and update is the one a kernel-writing
// model's reply takes (parse, evaluate, reward), with the code written by vinci's generator.
//
//   ```knobs
//   block = 256
//   vector_width = 4
//   ```
//
// Knobs the block does not name take their defaults; a knob the task does not have, a value it
// does not take, a knob named twice or a line that is not `knob = value` is an error written for
// the model to fix on its next turn, naming the line. docs/training.md describes the format.
#ifndef VINCI_GPU_KNOB_ANSWER_H_
#define VINCI_GPU_KNOB_ANSWER_H_

#include <map>
#include <string>
#include <string_view>

#include "core/status.h"
#include "gpu/plan.h"
#include "gpu/task.h"

namespace vinci {

// The task's knobs as the prompt lists them: "name: choice | choice ... (default D)", one a line.
std::string knob_menu(const Task& task);

// The knob values a reply's ```knobs block names (the first such block; the whole reply when it
// has no fence and every non-blank line is `knob = value`). Errors name the line.
Result<std::map<std::string, std::string>> parse_knob_answer(std::string_view reply, const Task& task);

// The generator's plan for the values (the knobs format's candidate).
Result<Plan> plan_from_knob_answer(std::string_view reply, const Task& task);

// A setting as the model writes it: the ```knobs block with every knob, in the task's knob order.
std::string render_knob_answer(const Task& task, const std::map<std::string, std::string>& values);

}  // namespace vinci

#endif  // VINCI_GPU_KNOB_ANSWER_H_

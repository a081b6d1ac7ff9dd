// A task as a language model is shown it: the PyTorch reference module a KernelBench user reads.
//
// task_as_pytorch renders a task's op graph as a self-contained Python file in KernelBench's
// layout: imports, `class Model(nn.Module)` building the task's modules in construction order
// (so PyTorch draws the same weights after torch.manual_seed(42)) and applying the ops in graph
// order, the sizes as module-level constants named by the task's size symbols, get_inputs()
// drawing the inputs as vinci's uniform01 distribution does, and get_init_inputs(). Every op is
// written as the PyTorch call (or exact expression) that computes what gpu/executor.cc computes.
// Nothing here includes torch.
#ifndef VINCI_GPU_TASK_PROMPT_H_
#define VINCI_GPU_TASK_PROMPT_H_

#include <string>

#include "core/status.h"
#include "gpu/task.h"

namespace vinci {

// The task at one size as Python source. An op or module type the renderer does not know, a
// name that cannot be a Python identifier or a malformed attribute is an error naming the task
// and the op or module; never a placeholder.
Result<std::string> task_as_pytorch(const Task& task, SizeName size);

// A short plain-text preamble for a model writing kernels: id, name, level, family, the
// description, the sizes, every input and the output with symbolic and concrete shapes and
// dtype, and the tolerance.
std::string task_prompt_header(const Task& task, SizeName size);

}  // namespace vinci

#endif  // VINCI_GPU_TASK_PROMPT_H_

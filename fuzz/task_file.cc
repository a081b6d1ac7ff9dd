// A task file (`tasks.dir` of an experiment: the TOML format of docs/tasks.md), as a user writes it:
// parsed and checked, then each task's shapes inferred at both sizes, its weights listed, and the
// code generator's default and eager plans made for it. Every plan the generator returns must pass
// validate_plan against its task.
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz/fuzz_util.h"
#include "gpu/codegen/codegen.h"
#include "gpu/plan.h"
#include "gpu/shapes.h"
#include "gpu/task.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  vinci::Result<std::vector<vinci::Task>> tasks = vinci::parse_task_file("fuzz.toml", text);
  if (!tasks.ok()) return 0;
  for (const vinci::Task& task : *tasks) {
    (void)vinci::infer_shapes(task);
    (void)vinci::weight_specs(task);
    for (auto make : {&vinci::default_plan, &vinci::eager_plan}) {
      vinci::Result<vinci::Plan> plan = make(task);
      if (!plan.ok()) continue;
      vinci::Status valid = vinci::validate_plan(*plan, task);
      VINCI_FUZZ_CHECK(valid.ok(), "a generated plan fails validate_plan: " + valid.to_string());
    }
  }
  return 0;
}

// KernelBench modules as a model writes them (docs/kernelbench_format.md): any reply through
// extract_module_answer, the source checks, the backend and the static flags. What extraction
// returns passes check_module_source and, as a plan of L1_019, validate_plan; its flags are
// well formed and the same on a second reading.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz/fuzz_tasks.h"
#include "fuzz/fuzz_util.h"
#include "gpu/kernelbench_module.h"
#include "gpu/plan.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  for (vinci::ModuleBackend b :
       {vinci::ModuleBackend::kCuda, vinci::ModuleBackend::kTriton, vinci::ModuleBackend::kTorch}) {
    std::vector<std::string> flags = vinci::module_static_flags(text, b);
    for (const std::string& f : flags) VINCI_FUZZ_CHECK(f.rfind("static: ", 0) == 0, "a flag without its prefix: " + f);
    VINCI_FUZZ_CHECK(flags == vinci::module_static_flags(text, b), "the flags differ on a second reading");
  }
  (void)vinci::module_backend(text);
  (void)vinci::check_module_source(text);
  vinci::Result<std::string> module = vinci::extract_module_answer(text);
  if (!module.ok()) return 0;
  vinci::Status source = vinci::check_module_source(*module);
  VINCI_FUZZ_CHECK(source.ok(), "an extracted module fails check_module_source: " + source.to_string());
  const vinci::Task& task = vinci::fuzz_task("L1_019");
  vinci::Plan plan = vinci::module_plan(task.id, *module);
  vinci::Status valid = vinci::validate_plan(plan, task);
  VINCI_FUZZ_CHECK(valid.ok(), valid.to_string());
  vinci::Result<vinci::Plan> back = vinci::parse_plan(vinci::canonical_bytes(plan));
  VINCI_FUZZ_CHECK(back.ok() && back->module == *module, "a module plan does not read back");
  return 0;
}

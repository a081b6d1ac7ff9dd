// A plan as JSON (`harness eval --plan FILE`, a plan object of a run): parsed, then checked against
// its task (the one it names, else L1_019). A plan that parses writes JSON that parses back to the
// same canonical bytes.
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz/fuzz_tasks.h"
#include "fuzz/fuzz_util.h"
#include "gpu/plan.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  vinci::Result<vinci::Plan> plan = vinci::parse_plan(text);
  if (!plan.ok()) return 0;
  const vinci::Task* task = vinci::fuzz_suite().find(plan->task_id);
  (void)vinci::validate_plan(*plan, task != nullptr ? *task : vinci::fuzz_task("L1_019"));
  const std::string bytes = vinci::canonical_bytes(*plan);
  vinci::Result<vinci::Plan> again = vinci::parse_plan(vinci::plan_to_json(*plan).dump());
  VINCI_FUZZ_CHECK(again.ok(), again.status().to_string());
  VINCI_FUZZ_CHECK(vinci::canonical_bytes(*again) == bytes, "plan JSON does not round trip");
  return 0;
}

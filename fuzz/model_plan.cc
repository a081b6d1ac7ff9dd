// The model-facing plan format (a policy reply: ```cuda and ```launch blocks, or a plan as JSON),
// parsed against two tasks: an elementwise one (L1_019, ReLU) and a fused one (L2_012, linear,
// multiply, leaky ReLU). A reply that parses is a plan that passes validate_plan, and a plan the
// renderer can write, when it parses back, parses back to the same content.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz/fuzz_tasks.h"
#include "fuzz/fuzz_util.h"
#include "gpu/model_plan.h"
#include "gpu/plan.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view reply(reinterpret_cast<const char*>(data), size);
  for (const char* id : {"L1_019", "L2_012"}) {
    const vinci::Task& task = vinci::fuzz_task(id);
    vinci::Result<vinci::Plan> plan = vinci::parse_model_plan(reply, task);
    if (!plan.ok()) continue;
    vinci::Status valid = vinci::validate_plan(*plan, task);
    VINCI_FUZZ_CHECK(valid.ok(), valid.to_string());
    (void)vinci::plan_address(*plan);
    vinci::Result<std::string> text = vinci::render_model_plan(*plan);
    if (!text.ok()) continue;
    // validate_plan checks every expression's names, as the launch block does: a rendered plan
    // reads back, to the same content.
    vinci::Result<vinci::Plan> again = vinci::parse_model_plan(*text, task);
    VINCI_FUZZ_CHECK(again.ok(), "a rendered plan is refused: " + again.status().to_string() + "\n" + *text);
    VINCI_FUZZ_CHECK(vinci::same_plan_content(*again, *plan),
                     std::string("rendered plan reads back differently\n") + *text + "\n---\n" +
                         vinci::canonical_bytes(vinci::strip_plan_metadata(*plan)) + "\n---\n" +
                         vinci::canonical_bytes(vinci::strip_plan_metadata(*again)));
  }
  return 0;
}

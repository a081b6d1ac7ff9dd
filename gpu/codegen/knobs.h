// Schedule knobs: the action space the sim policy samples.
//
// A KnobSpace is factored and categorical: a list of knobs, each with a list of choices, so a
// network samples one index per knob (one softmax head per knob). A KnobSetting is those indices.
// Knob names carry their family as a prefix (ew., row., gemm.) plus the plan-wide `fusion`.
// The space of a task (gpu/codegen/codegen.h knob_space) holds only the families its graph can use, in a
// fixed order, so a setting means the same thing in every run.
#ifndef VINCI_GPU_CODEGEN_KNOBS_H_
#define VINCI_GPU_CODEGEN_KNOBS_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/rng.h"
#include "core/status.h"

namespace vinci {

struct Knob {
  std::string name;
  std::vector<std::string> choices;
  int32_t default_index = 0;
  std::string help;  // one line: what the knob changes in the generated code
};

struct KnobSpace {
  std::vector<Knob> knobs;

  // -1 when absent.
  int32_t index_of(const std::string& name) const;
  // Product of the choice counts.
  double cardinality() const;
};

using KnobSetting = std::vector<int32_t>;

// The knobs of one code-generator family: "plan", "elementwise", "row_reduction", "gemm".
const std::vector<Knob>& family_knobs(const std::string& family);

KnobSetting default_setting(const KnobSpace& space);
// One uniform draw per knob from the stream (s.below), in knob order.
KnobSetting random_setting(const KnobSpace& space, Stream& stream);
// REQUIRES: setting.size() == space.knobs.size() and every index in range.
std::map<std::string, std::string> knob_values(const KnobSpace& space, const KnobSetting& setting);
// Knobs missing from values take their default; an unknown knob or choice is an error.
Result<KnobSetting> setting_from_values(const KnobSpace& space, const std::map<std::string, std::string>& values);
Status check_setting(const KnobSpace& space, const KnobSetting& setting);

}  // namespace vinci

#endif  // VINCI_GPU_CODEGEN_KNOBS_H_

// The closed settings of an experiment (harness/experiment.h), typed when a config or a command
// line is read: each is an enum, and its table holds the names that configs, records and the
// command line use (core/enum_names.h).
#ifndef VINCI_HARNESS_SETTINGS_H_
#define VINCI_HARNESS_SETTINGS_H_

#include "core/enum_names.h"

namespace vinci {

enum class TaskSet { kAll, kKernelbench, kUnflagged };    // tasks.set
enum class PolicyFormat { kPlan, kKnobs, kKernelbench };  // policy.format
enum class BackboneKind { kSim, kOpenai };                // backbone.kind
enum class TrainerKind { kNone, kHttp };                  // trainer.kind
enum class DeviceKind { kSim, kCuda };                    // device.kind, --device
inline constexpr EnumNames<TaskSet, 3> kTaskSets = {"tasks.set", {"all", "kernelbench", "unflagged"}};
inline constexpr EnumNames<PolicyFormat, 3> kPolicyFormats = {"policy.format", {"plan", "knobs", "kernelbench"}};
inline constexpr EnumNames<BackboneKind, 2> kBackboneKinds = {"backbone.kind", {"sim", "openai"}};
inline constexpr EnumNames<TrainerKind, 2> kTrainerKinds = {"trainer.kind", {"none", "http"}};
inline constexpr EnumNames<DeviceKind, 2> kDeviceKinds = {"device", {"sim", "cuda"}};

}  // namespace vinci

#endif  // VINCI_HARNESS_SETTINGS_H_

// What replay reads out of a recorded run without re-driving it: the held-out evaluation
// outcomes per step and task, the final skill library, and the records themselves.
#ifndef VINCI_REPLAY_RUN_DATA_H_
#define VINCI_REPLAY_RUN_DATA_H_

#include <map>
#include <string>
#include <vector>

#include "core/status.h"
#include "harness/rl.h"
#include "recorder/run.h"

namespace vinci {

struct RunData {
  ManifestInfo manifest;
  uint64_t records = 0;
  // step -> task outcomes of the evaluation before that step (the last: after training), in
  // task order; the turns as the evaluator recorded them.
  std::map<int32_t, std::vector<TaskTurns>> eval;
  // Test-time scaling's task outcomes (every turn of every iteration, in order), when the run
  // has them (phase tts, after the final evaluation).
  std::vector<TaskTurns> tts;
  // The library snapshot recorded last (canonical bytes), and its skill names.
  std::vector<std::string> final_skills;
};

// Scans a run's log once. Damage is an error (kCorruption with file and offset).
Result<RunData> read_run_data(const std::string& run_dir);

}  // namespace vinci

#endif  // VINCI_REPLAY_RUN_DATA_H_

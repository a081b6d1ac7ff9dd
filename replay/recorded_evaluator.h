// The `recorded` evaluator: answers every evaluation from a run's Measurement records, so a run
// whose measurements are events (a live GPU run, a rescored run) replays without the device.
//
// A call is matched to its record by the plan's address and the seed of its first correctness
// trial (each call site of the loop evaluates with a seed of its own). A rescored run measured
// each distinct plan once for every call site; when no record has the call's seed, the plan's
// one recorded measurement answers, provided the run holds exactly one for that plan.
#ifndef VINCI_REPLAY_RECORDED_EVALUATOR_H_
#define VINCI_REPLAY_RECORDED_EVALUATOR_H_

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "core/hash.h"
#include "core/status.h"
#include "gpu/eval_result.h"

namespace vinci {

class RecordedEvaluator : public Evaluator {
 public:
  // allow_damage: an unfinished run's log may end in a frame a kill cut short; the measurements
  // before it are read (else that is kCorruption).
  static Result<std::unique_ptr<RecordedEvaluator>> open(const std::string& run_dir, bool allow_damage = false);

  Result<EvalResult> evaluate(const Task& task, const Plan& plan, const EvalRequest& request) override;
  std::string name() const override { return "recorded"; }

  size_t measurements() const { return by_call_.size(); }

 private:
  std::map<std::pair<Digest, uint64_t>, EvalResult> by_call_;  // (plan, trial 0 seed)
  std::map<Digest, std::vector<const EvalResult*>> by_plan_;
};

}  // namespace vinci

#endif  // VINCI_REPLAY_RECORDED_EVALUATOR_H_

#include "replay/recorded_evaluator.h"

#include <capnp/message.h>

#include "gpu/executor.h"
#include "harness/records.h"
#include "recorder/object_store.h"
#include "recorder/run.h"
#include "recorder/vinci.capnp.h"

namespace vinci {

Result<std::unique_ptr<RecordedEvaluator>> RecordedEvaluator::open(const std::string& run_dir, bool allow_damage) {
  RunLocation loc = RunLocation::of(run_dir);
  ObjectStore store(loc.store_dir);
  VINCI_ASSIGN_OR_RETURN(auto reader, RunReader::open(run_dir));
  std::unique_ptr<RecordedEvaluator> ev(new RecordedEvaluator());
  auto log_text = [&](const Digest& a) -> Result<std::string> {
    VINCI_ASSIGN_OR_RETURN(StoredObject o, store.get(a));
    return o.bytes;
  };
  while (RecordView* view = reader->next()) {
    auto r = view->message().getRoot<schema::Record>();
    if (!r.isMeasurement()) continue;
    VINCI_ASSIGN_OR_RETURN(EvalResult e, read_measurement(r.getMeasurement(), log_text));
    uint64_t seed0 = e.trials.empty() ? 0 : e.trials.front().seed;
    auto key = std::make_pair(e.plan, seed0);
    auto it = ev->by_call_.find(key);
    if (it != ev->by_call_.end()) {
      if (it->second != e)
        return invalid_argument("run " + run_dir + ": two different measurements of plan " + e.plan.hex() +
                                " with the same trial seed (record " + std::to_string(r.getSeq()) + ")");
      continue;
    }
    ev->by_call_.emplace(key, std::move(e));
  }
  VINCI_RETURN_IF_ERROR(reader->status());
  if (reader->damage() && !allow_damage) return corruption("run " + run_dir + ": " + reader->damage()->to_string());
  for (const auto& [key, e] : ev->by_call_) ev->by_plan_[key.first].push_back(&e);
  return ev;
}

Result<EvalResult> RecordedEvaluator::evaluate(const Task& task, const Plan& plan, const EvalRequest& request) {
  Digest address = plan_address(plan);
  uint64_t seed0 = input_seed(request.seed, task.id, 0, trial_distribution(0));
  auto it = by_call_.find({address, seed0});
  if (it != by_call_.end()) return it->second;
  auto p = by_plan_.find(address);
  if (p != by_plan_.end() && p->second.size() == 1) return *p->second.front();
  return not_found("the recorded run has no measurement of plan " + address.hex() + " on task " + task.id +
                   (p == by_plan_.end() ? ""
                                        : " for this call (it has " + std::to_string(p->second.size()) +
                                              " of the plan, none with this call's seed)"));
}

}  // namespace vinci

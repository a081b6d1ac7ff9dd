// The `recorded` backbone: answers every call from a run's log instead of a model.
//
// Each backbone sample record carries the digest of the RngKey its call was made with (every
// call site in the loop uses a key of its own), so a call is answered by looking its key up; the
// role must match. update() takes no step: it moves to the next recorded parameter digest and
// returns the recorded loss, so a replay of a run whose backbone was an external model (whose
// parameters are not in this process) re-derives everything else and checks it against the log.
// The cold start's supervised steps are answered the same way (the recorded losses and
// cross-entropies, in order), and checkpoint() returns the recorded checkpoint object of the
// current parameter digest from the run's store.
#ifndef VINCI_REPLAY_RECORDED_BACKBONE_H_
#define VINCI_REPLAY_RECORDED_BACKBONE_H_

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "agents/backbone.h"
#include "core/hash.h"
#include "core/status.h"

namespace vinci {

class RecordedBackbone : public Backbone {
 public:
  // Reads every backbone sample, step beginning and parameter digest of the run. allow_damage: an
  // unfinished run's log may end in a frame a kill cut short; what is before it is read (else that
  // is kCorruption).
  static Result<std::unique_ptr<RecordedBackbone>> open(const std::string& run_dir, bool allow_damage = false);

  std::string kind() const override { return "recorded"; }
  Result<PolicySample> sample_policy(const PolicyInput& in, const RngKey& key, bool greedy) override;
  Result<SelectionSample> sample_selection(const SelectionInput& in, const RngKey& key, bool greedy) override;
  Result<SummarySample> sample_summary(const SummaryInput& in, const RngKey& key, bool greedy) override;
  Result<UpdateStats> update(const std::vector<Experience>& batch) override;
  Digest parameter_digest() const override;
  Result<RoleCrossEntropy> cross_entropy(const std::vector<Experience>& batch) override;
  Result<UpdateStats> supervised_step(const std::vector<Experience>& batch, double lr) override;
  Status reset_optimizer() override { return Status(); }
  Result<std::string> checkpoint() const override;
  // Takes the checkpoint's parameter digest as the current one (the bytes are not used further).
  Status load_checkpoint(std::string_view bytes) override;

  size_t samples() const { return samples_.size(); }

 private:
  struct Sample {
    AgentRole role;
    std::vector<uint32_t> actions;
    double log_prob;
  };
  struct Update {
    Digest digest;
    double loss;
    double grad_norm;
  };
  Result<const Sample*> find(AgentRole role, const RngKey& key) const;

  std::unordered_map<Digest, Sample, DigestHash> samples_;
  Digest initial_;
  std::vector<Update> updates_;
  std::vector<Update> sft_steps_;                               // the cold start's supervised steps
  std::vector<RoleCrossEntropy> sft_ce_;                        // before each step, then after the last
  std::unordered_map<Digest, Digest, DigestHash> checkpoints_;  // parameter digest -> object
  std::string store_dir_;
  mutable std::mutex mu_;
  size_t next_update_ = 0, next_sft_ = 0, next_ce_ = 0;
  std::optional<Digest> current_;  // set by a supervised step or a loaded checkpoint
};

}  // namespace vinci

#endif  // VINCI_REPLAY_RECORDED_BACKBONE_H_

#include "replay/recorded_backbone.h"

#include <capnp/message.h>

#include "agents/sim_backbone.h"
#include "harness/records.h"
#include "recorder/run.h"
#include "recorder/vinci.capnp.h"

namespace vinci {

Result<std::unique_ptr<RecordedBackbone>> RecordedBackbone::open(const std::string& run_dir, bool allow_damage) {
  VINCI_ASSIGN_OR_RETURN(auto reader, RunReader::open(run_dir));
  std::unique_ptr<RecordedBackbone> b(new RecordedBackbone());
  b->store_dir_ = reader->location().store_dir;
  bool have_initial = false;
  auto ce_of = [](const RoleDoubles& mean, const RoleCounts& count) {
    RoleCrossEntropy out;
    for (int r = 0; r < 3; ++r) {
      out.mean[r] = mean[r];
      out.count[r] = count[r];
    }
    return out;
  };
  while (RecordView* view = reader->next()) {
    auto r = view->message().getRoot<schema::Record>();
    if (r.isSample()) {
      SampleRecord s = read_sample(r.getSample());
      if (s.key.is_zero()) {
        return invalid_argument("run " + run_dir + ": backbone sample " + std::to_string(r.getSeq()) +
                                " carries no call key (recorded before keys were logged)");
      }
      Sample sample;
      sample.role = static_cast<AgentRole>(static_cast<uint8_t>(s.role));
      sample.actions = std::move(s.actions);
      sample.log_prob = s.log_prob;
      if (!b->samples_.emplace(s.key, std::move(sample)).second) {
        return invalid_argument("run " + run_dir + ": two backbone samples share the call key " + s.key.hex() +
                                " (record " + std::to_string(r.getSeq()) + ")");
      }
    } else if (r.isCheckpoint()) {
      CheckpointRecord c = read_checkpoint(r.getCheckpoint());
      if (!have_initial) {
        b->initial_ = c.digest;
        have_initial = true;
      }
      b->checkpoints_[c.digest] = c.address;
    } else if (r.isStepBegin() && !have_initial) {
      b->initial_ = read_step_begin(r.getStepBegin()).param_digest;
      have_initial = true;
    } else if (r.isParameterDigest()) {
      ParameterDigestRecord p = read_parameter_digest(r.getParameterDigest());
      b->updates_.push_back({p.digest, p.loss, p.grad_norm});
      if (!p.checkpoint.is_zero()) b->checkpoints_[p.digest] = p.checkpoint;
    } else if (r.isSftEpoch()) {
      SftEpochRecord e = read_sft_epoch(r.getSftEpoch());
      b->sft_steps_.push_back({e.digest, e.loss, 0});
      b->sft_ce_.push_back(ce_of(e.cross_entropy, e.examples));
    } else if (r.isColdStart()) {
      ColdStartRecord c = read_cold_start(r.getColdStart());
      b->sft_ce_.push_back(ce_of(c.cross_entropy_after, c.examples));
      b->checkpoints_[c.digest] = c.checkpoint;
    }
  }
  VINCI_RETURN_IF_ERROR(reader->status());
  if (reader->damage() && !allow_damage) {
    return corruption("run " + run_dir + ": " + reader->damage()->to_string());
  }
  return b;
}

Result<const RecordedBackbone::Sample*> RecordedBackbone::find(AgentRole role, const RngKey& key) const {
  auto it = samples_.find(key.digest());
  if (it == samples_.end()) {
    return not_found(std::string("the recorded run has no ") + agent_role_name(role) +
                     " sample for the call with key " + key.digest().hex());
  }
  if (it->second.role != role) {
    return mismatch(std::string("the recorded sample for key ") + key.digest().hex() + " is a " +
                    agent_role_name(it->second.role) + " sample, not a " + agent_role_name(role) + " sample");
  }
  return &it->second;
}

Result<PolicySample> RecordedBackbone::sample_policy(const PolicyInput& in, const RngKey& key, bool) {
  VINCI_ASSIGN_OR_RETURN(const Sample* s, find(AgentRole::kPolicy, key));
  if (s->actions.size() != in.active_heads.size()) {
    return mismatch("recorded policy sample has " + std::to_string(s->actions.size()) + " choices, the call has " +
                    std::to_string(in.active_heads.size()) + " knobs");
  }
  PolicySample out;
  for (uint32_t a : s->actions) out.choices.push_back(static_cast<int32_t>(a));
  out.log_prob = s->log_prob;
  return out;
}

Result<SelectionSample> RecordedBackbone::sample_selection(const SelectionInput& in, const RngKey& key, bool) {
  VINCI_ASSIGN_OR_RETURN(const Sample* s, find(AgentRole::kSelection, key));
  SelectionSample out;
  for (uint32_t a : s->actions) {
    if (a >= in.candidates.size()) {
      return mismatch("recorded selection picks candidate " + std::to_string(a) + " of " +
                      std::to_string(in.candidates.size()));
    }
    out.picked.push_back(static_cast<int32_t>(a));
  }
  out.log_prob = s->log_prob;
  return out;
}

Result<SummarySample> RecordedBackbone::sample_summary(const SummaryInput& in, const RngKey& key, bool) {
  VINCI_ASSIGN_OR_RETURN(const Sample* s, find(AgentRole::kSummary, key));
  // Actions: one include flag per active head, then the scope.
  if (s->actions.size() != in.active_heads.size() + 1) {
    return mismatch("recorded summary sample has " + std::to_string(s->actions.size()) + " actions, expected " +
                    std::to_string(in.active_heads.size() + 1));
  }
  SummarySample out;
  for (size_t i = 0; i + 1 < s->actions.size(); ++i) out.include.push_back(s->actions[i] ? 1 : 0);
  out.scope = static_cast<int32_t>(s->actions.back());
  out.log_prob = s->log_prob;
  return out;
}

Result<UpdateStats> RecordedBackbone::update(const std::vector<Experience>& batch) {
  std::lock_guard<std::mutex> lock(mu_);
  if (next_update_ >= updates_.size()) {
    return not_found("the recorded run holds " + std::to_string(updates_.size()) +
                     " parameter updates; the replay asks for one more");
  }
  const Update& u = updates_[next_update_++];
  UpdateStats st;
  st.loss = u.loss;
  st.grad_norm = u.grad_norm;
  st.experiences = static_cast<int64_t>(batch.size());
  return st;
}

Digest RecordedBackbone::parameter_digest() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (next_update_ > 0) return updates_[next_update_ - 1].digest;
  return current_ ? *current_ : initial_;
}

Result<RoleCrossEntropy> RecordedBackbone::cross_entropy(const std::vector<Experience>&) {
  std::lock_guard<std::mutex> lock(mu_);
  if (next_ce_ >= sft_ce_.size()) {
    return not_found("the recorded run holds " + std::to_string(sft_ce_.size()) +
                     " cold-start cross-entropies; the replay asks for one more");
  }
  return sft_ce_[next_ce_++];
}

Result<UpdateStats> RecordedBackbone::supervised_step(const std::vector<Experience>& batch, double) {
  std::lock_guard<std::mutex> lock(mu_);
  if (next_sft_ >= sft_steps_.size()) {
    return not_found("the recorded run holds " + std::to_string(sft_steps_.size()) +
                     " cold-start steps; the replay asks for one more");
  }
  UpdateStats st;
  current_ = sft_steps_[next_sft_].digest;
  st.loss = sft_steps_[next_sft_++].loss;
  st.experiences = static_cast<int64_t>(batch.size());
  return st;
}

Result<std::string> RecordedBackbone::checkpoint() const {
  Digest digest = parameter_digest();
  auto it = checkpoints_.find(digest);
  if (it == checkpoints_.end()) {
    return not_found("the recorded run names no checkpoint object for parameter digest " + digest.hex());
  }
  ObjectStore store(store_dir_);
  VINCI_ASSIGN_OR_RETURN(StoredObject obj, store.get(it->second));
  if (obj.kind != "checkpoint") {
    return mismatch("object " + it->second.hex() + " is a " + obj.kind + ", not a checkpoint");
  }
  return obj.bytes;
}

Status RecordedBackbone::load_checkpoint(std::string_view bytes) {
  VINCI_ASSIGN_OR_RETURN(Digest d, SimBackbone::checkpoint_digest(bytes));
  std::lock_guard<std::mutex> lock(mu_);
  current_ = d;
  return Status();
}

}  // namespace vinci

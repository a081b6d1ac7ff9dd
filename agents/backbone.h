// The backbone: one model, three roles (selection, policy, summary), each call returning what it
// sampled and the log-probability of that sample under the current parameters.
//
// vinci's `sim` backbone (agents/sim_backbone.h) is a small libtorch network; an LLM backbone
// (later) answers the same calls through prompts and tool calls; the `recorded` backbone answers
// from a run's log. Inputs are plain numbers so that nothing here knows about GPUs or tasks: the
// harness turns a task, its knob space, skills and feedback into these vectors (harness/features).
//
// Action spaces:
//   policy    a factored categorical: the backbone has one softmax head per *global* knob (sizes
//             fixed at construction); a call activates the heads of the task's knobs and samples
//             one choice per active head. log_prob = sum of the chosen choices' log-probabilities.
//   selection a score per candidate skill; picks min(max_pick, #candidates) candidates without
//             replacement (Plackett-Luce). log_prob = sum over picks of log softmax over the
//             candidates still left.
//   summary   for each active knob of the winning rollout: include it in the skill or not
//             (Bernoulli), and a scope (0 = general, 1 = task_specific). log_prob sums both.
//
// Determinism: sampling uses only the RngKey passed in (Gumbel-max over the logits with keyed
// noise), so a call's result is a function of (parameters, input, key). greedy = argmax.
#ifndef VINCI_AGENTS_BACKBONE_H_
#define VINCI_AGENTS_BACKBONE_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/hash.h"
#include "core/rng.h"
#include "core/status.h"

namespace vinci {

enum class AgentRole : uint8_t { kSelection = 0, kPolicy = 1, kSummary = 2 };
const char* agent_role_name(AgentRole role);

// The fixed shapes of the sim backbone's inputs and heads.
struct BackboneShape {
  int32_t task_dim = 0;             // task feature vector
  std::vector<int32_t> head_sizes;  // choices of each global knob, in global knob order
  int32_t feedback_dim = 0;         // previous turn's result vector
  int32_t candidate_dim = 0;        // one selection candidate's feature vector
  int32_t choice_dim() const;       // sum of head_sizes: one-hot of a full knob setting
};

struct PolicyInput {
  std::vector<float> task;            // task_dim
  std::vector<float> skill_hint;      // choice_dim: what the injected skills recommend
  std::vector<float> previous;        // choice_dim: the previous turn's choices (zeros at turn 0)
  std::vector<float> feedback;        // feedback_dim
  std::vector<int32_t> active_heads;  // global knob indices of the task's knobs, in its order
  // choice_dim, or empty: every choice may be chosen. A 0 locks that choice: it is never sampled
  // and its probability is 0 (the sim world's locked techniques, harness/sim_world.h). Every
  // active head keeps at least one choice.
  std::vector<float> allowed;
};

struct PolicySample {
  std::vector<int32_t> choices;  // one per active head, same order
  double log_prob = 0;
};

struct SelectionInput {
  std::vector<float> task;                     // task_dim
  std::vector<std::vector<float>> candidates;  // candidate_dim each, in BM25 rank order
  int32_t max_pick = 3;
};

struct SelectionSample {
  std::vector<int32_t> picked;  // candidate indices, in pick order
  double log_prob = 0;
};

struct SummaryInput {
  std::vector<float> task;            // task_dim
  std::vector<float> winning;         // choice_dim: the winning rollout's best setting
  std::vector<float> feedback;        // feedback_dim: its result
  std::vector<int32_t> active_heads;  // the task's knobs (as for the policy)
};

struct SummarySample {
  std::vector<uint8_t> include;  // one per active head: 1 = the skill recommends that choice
  int32_t scope = 0;             // 0 general, 1 task_specific
  double log_prob = 0;
};

// One sampled action and the advantage to weight its log-probability with in the update.
struct Experience {
  AgentRole role = AgentRole::kPolicy;
  double advantage = 0;
  PolicyInput policy_input;
  PolicySample policy;
  SelectionInput selection_input;
  SelectionSample selection;
  SummaryInput summary_input;
  SummarySample summary;
};

struct UpdateStats {
  double loss = 0;
  double grad_norm = 0;
  int64_t experiences = 0;
};

// Mean cross-entropy (negative log-likelihood) of given actions, per role, indexed by AgentRole
// (selection, policy, summary); a role without examples has count 0 and mean 0. Selection
// examples that pick nothing add 0 (their likelihood is 1) but are counted.
struct RoleCrossEntropy {
  double mean[3] = {0, 0, 0};
  int64_t count[3] = {0, 0, 0};
  // Sum over roles that have examples of their mean: what a supervised step minimises.
  double total() const;
};

class Backbone {
 public:
  virtual ~Backbone() = default;
  virtual std::string kind() const = 0;  // "sim", "openai", "recorded"
  virtual Result<PolicySample> sample_policy(const PolicyInput& in, const RngKey& key, bool greedy) = 0;
  virtual Result<SelectionSample> sample_selection(const SelectionInput& in, const RngKey& key, bool greedy) = 0;
  virtual Result<SummarySample> sample_summary(const SummaryInput& in, const RngKey& key, bool greedy) = 0;
  // One optimizer step on -sum(advantage * log_prob) over the experiences whose role is trained.
  virtual Result<UpdateStats> update(const std::vector<Experience>& batch) = 0;
  // Digest of every parameter's bytes, in a fixed order.
  virtual Digest parameter_digest() const = 0;

  // Supervised fine-tuning (the cold start, harness/coldstart.h). The experiences' sampled
  // actions are the targets and their advantages are ignored; every role is trained whatever
  // the backbone's train_* settings say. Backbones that cannot be fitted in-process return
  // kFailedPrecondition from both.
  virtual Result<RoleCrossEntropy> cross_entropy(const std::vector<Experience>& batch);
  // One optimizer step, with learning rate lr, on RoleCrossEntropy::total() of the batch; returns
  // the loss before the step.
  virtual Result<UpdateStats> supervised_step(const std::vector<Experience>& batch, double lr);
  // Forgets the optimizer's state (moments and step counts), as a new training job would.
  virtual Status reset_optimizer();

  // Checkpoints: the bytes of the parameters (and optimizer state) whose digest is
  // parameter_digest(), and loading such bytes. A backbone without parameters in this process
  // returns kFailedPrecondition.
  virtual Result<std::string> checkpoint() const;
  virtual Status load_checkpoint(std::string_view bytes);
};

}  // namespace vinci

#endif  // VINCI_AGENTS_BACKBONE_H_

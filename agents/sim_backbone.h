// The `sim` backbone: a small libtorch network that plays all three roles (agents/backbone.h).
//
// Network (float32, CPU). One shared trunk serves every role, as daVinci-kernel's three agents
// share one LLM:
//
//   x      = task (T) | skill_hint (C) | previous (C) | feedback (F)      fixed slots, zeros where
//                                                                          a role has no input
//   h      = tanh(W2 tanh(W1 [x | role_embedding[role]] + b1) + b2)     hidden H, role_dim R
//   policy    logits = Wp h + bp                          C logits, split per global knob (head)
//   selection score_j = ws2 . tanh(Ws1 [h | candidate_j] + bs1) + bs2     one per candidate
//   summary   include_k = sum over head k's choices c of (Wi h + bi)_c * winning_c
//             scope     = Wsc h + bsc                                     2 logits
//
// with T = task_dim, C = choice_dim, F = feedback_dim. The selection role fills only the task
// slot; the summary role puts the winning setting in the `previous` slot and its result in the
// `feedback` slot (the same meaning those slots have for the policy: a setting and its result).
//
// Sampling. Logits are computed by torch under no-grad, copied to double, and sampled in C++
// with Gumbel-max on keyed noise (core/rng.h), so a sample is a function of (parameters, input,
// key) only. Noise keys: policy head k (global knob index) `key.with("head", k)`; selection pick
// t `key.with("pick", t)` with one Gumbel per original candidate index (noise for candidate j at
// pick t does not depend on what was picked before); summary include of head k
// `key.with("include", k)` (two Gumbels: exclude, include); scope `key.with("scope", 0)`.
// greedy = argmax, ties to the lowest index (for include: a logit of exactly 0 excludes).
// log_prob is computed in double from the float logits: log-softmax with max-subtraction, and
// log-sigmoid for include decisions.
//
// Update. REINFORCE: loss = -sum(advantage * log_prob) / max(1, count) over the experiences of
// trained roles (train_* false: those experiences are skipped entirely and count nothing),
// recomputed with gradients in float32 by the same formulas, batched per role, in batch order.
// Gradients are clipped to max_grad_norm (global L2 norm, PyTorch's clip_grad_norm_ rule) and one
// Adam step is taken. Adam is written out here (torch.optim.Adam's update, betas 0.9/0.999,
// eps 1e-8, no weight decay) so that its state is ours to serialize and behaves the same under
// every libtorch version; parameters that received no gradient in a step are not touched and
// their Adam step count does not advance.
//
// Determinism. Parameters are initialised from a private torch CPU generator seeded with
// init_seed (the global torch generator is neither read nor reseeded, so building a backbone does
// not perturb other users of torch's RNG), with libtorch's default distributions: Linear weights
// and biases U(-1/sqrt(fan_in), 1/sqrt(fan_in)) (kaiming_uniform with a = sqrt(5)), the role
// embedding N(0, 1). Every torch call runs with one intra-op thread (pinned per calling thread:
// OpenMP keeps the thread count per thread), so equal parameters and an equal batch give
// bit-identical new parameters. Bit-identity holds within one libtorch build and CPU capability;
// the manifest records both (libtorch_version(), libtorch_cpu_capability(), torch_threads()).
//
// Thread safety: every public member function may be called from any thread; calls are
// serialized by one mutex.
//
// Checkpoint bytes (save_parameters / load_parameters): agents/sim_checkpoint.h, the format's one
// reader and writer; docs/log_format.md ("Backbone checkpoints") is the reference.
#ifndef VINCI_AGENTS_SIM_BACKBONE_H_
#define VINCI_AGENTS_SIM_BACKBONE_H_

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "agents/backbone.h"
#include "core/hash.h"
#include "core/status.h"

namespace vinci {

struct SimBackboneConfig {
  BackboneShape shape;
  int32_t hidden = 64;     // trunk width
  int32_t role_dim = 8;    // role embedding width
  double lr = 1e-3;        // Adam learning rate
  uint64_t init_seed = 0;  // parameters are a pure function of (shape, hidden, role_dim, init_seed)
  bool train_selection = true;
  bool train_policy = true;
  bool train_summary = true;
  double max_grad_norm = 1.0;  // global L2 norm the gradient is clipped to; > 0
};

// The libtorch version the backbone was built against ("1.13.0"), for the run manifest.
std::string libtorch_version();
// The CPU kernels ATen dispatches to on this machine ("AVX2", "AVX512", "DEFAULT", ...), as
// at::show_config() reports them; "unknown" when it does not say. Float results of the sim
// backbone may differ between capabilities (ATEN_CPU_CAPABILITY pins it).
std::string libtorch_cpu_capability();

class SimBackbone : public Backbone {
 public:
  // The intra-op thread count every torch call of a SimBackbone runs with.
  static constexpr int kTorchThreads = 1;

  // Fails with InvalidArgument on a shape or setting that cannot build a network (a head of size
  // 0, a negative dimension, lr <= 0, ...), naming the field and the value.
  static Result<std::unique_ptr<SimBackbone>> create(const SimBackboneConfig& config);
  ~SimBackbone() override;
  SimBackbone(const SimBackbone&) = delete;
  SimBackbone& operator=(const SimBackbone&) = delete;

  std::string kind() const override { return "sim"; }
  Result<PolicySample> sample_policy(const PolicyInput& in, const RngKey& key, bool greedy) override;
  Result<SelectionSample> sample_selection(const SelectionInput& in, const RngKey& key, bool greedy) override;
  Result<SummarySample> sample_summary(const SummaryInput& in, const RngKey& key, bool greedy) override;
  // Returns InvalidArgument (and changes nothing) when any experience of a trained role does not
  // fit the shape or its action is out of range; names the experience's index.
  Result<UpdateStats> update(const std::vector<Experience>& batch) override;
  // Hasher("sim-backbone-params") over each parameter in name order: name, ndim, dims, raw
  // little-endian float bytes. The optimizer state is not part of it.
  Digest parameter_digest() const override;

  // Cold start (Backbone): per-role cross-entropy, computed with the same float32 formulas as the
  // update; a supervised Adam step on its total (clipped to max_grad_norm like update()).
  Result<RoleCrossEntropy> cross_entropy(const std::vector<Experience>& batch) override;
  Result<UpdateStats> supervised_step(const std::vector<Experience>& batch, double lr) override;
  // Zeroes every Adam moment and step count.
  Status reset_optimizer() override;
  Result<std::string> checkpoint() const override { return save_parameters(); }
  Status load_checkpoint(std::string_view bytes) override { return load_parameters(bytes); }

  // The parameter digest of checkpoint bytes, without a backbone: the same value
  // parameter_digest() has after load_parameters(bytes). Corruption on bytes that do not parse.
  static Result<Digest> checkpoint_digest(std::string_view bytes);

  // The checkpoint bytes (agents/sim_checkpoint.h): a pure function of the parameters and Adam state.
  std::string save_parameters() const;
  // Replaces parameters and Adam state with a checkpoint's. Fails, changing nothing, on bytes
  // that do not parse (Corruption) or that were written for another shape (Mismatch, naming the
  // field or parameter and both values).
  Status load_parameters(std::string_view bytes);

  // The raw float logits, widened to double, for inspection and tests: all choice_dim policy
  // logits; one score per candidate; one include logit per active head followed by the 2 scope
  // logits.
  Result<std::vector<double>> policy_logits(const PolicyInput& in);
  Result<std::vector<double>> selection_scores(const SelectionInput& in);
  Result<std::vector<double>> summary_logits(const SummaryInput& in);

  const SimBackboneConfig& config() const { return config_; }
  // For the manifest: the intra-op thread count torch runs with (kTorchThreads).
  int torch_threads() const { return kTorchThreads; }

 private:
  struct Net;  // the torch side, defined in sim_backbone.cc
  SimBackbone(const SimBackboneConfig& config, std::unique_ptr<Net> net);

  const SimBackboneConfig config_;
  mutable std::mutex mu_;  // guards net_: parameters, Adam state, torch calls
  std::unique_ptr<Net> net_;
};

}  // namespace vinci

#endif  // VINCI_AGENTS_SIM_BACKBONE_H_

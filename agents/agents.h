// The three agents of daVinci-kernel on one backbone, and the verification gate.
//
//   selection  BM25 top-k recall over the library snapshot, then the backbone's rerank picks at
//              most max_skills (mode rerank); or BM25's top max_skills (mode bm25); or nothing
//              (mode none). k such samples make k skill schemes; the loop adds the null scheme.
//   policy     multi-turn: turn t+1 sees turn t's answer and the evaluator's result (the loop
//              drives turns through harness/agent_model.h; here: the sim network's encodings).
//   summary    the trigger rule on a rollout's turns (the loop asks the model for skills; lazy
//              ones are dropped, agents/tool_calls.h).
//   gate       a proposed skill is accepted iff every verification run is correct and reaches
//              min_speedup and min_ratio x the winning rollout's turn-1 speedup; at most one
//              skill per task is staged (the one with the highest worst-run speedup).
//
// Nothing here knows about GPUs: the world (harness/) supplies skill features, runs turns and
// writes skills through the interfaces below.
#ifndef VINCI_AGENTS_AGENTS_H_
#define VINCI_AGENTS_AGENTS_H_

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "agents/backbone.h"
#include "agents/bm25.h"
#include "agents/skill.h"
#include "agents/skill_library.h"
#include "agents/tool_calls.h"
#include "core/rng.h"
#include "core/status.h"

namespace vinci {

// ---------------------------------------------------------------------------------------------
// Selection

enum class SelectionMode { kRerank, kBm25Only, kNone };
const char* selection_mode_name(SelectionMode mode);
Result<SelectionMode> parse_selection_mode(std::string_view text);

struct SelectionParams {
  SelectionMode mode = SelectionMode::kRerank;
  size_t recall_top = 20;  // BM25 candidates shown to the reranker
  int32_t max_skills = 3;  // the cap, enforced
};

class SkillFeaturizer {
 public:
  virtual ~SkillFeaturizer() = default;
  // BackboneShape::candidate_dim values for a candidate skill with its BM25 score.
  virtual std::vector<float> candidate_features(const Skill& skill, double bm25_score) const = 0;
};

struct SchemeDecision {
  int32_t sample_index = 0;
  Bm25Recall recall;                  // candidates (library indices) and scores, rank order
  std::vector<std::string> selected;  // skill names, pick order, <= max_skills
  bool sampled = false;               // the backbone drew a sample (rerank mode, candidates > 0)
  SelectionInput input;
  SelectionSample sample;
};

// The rerank step: given the BM25 candidates (rank order) and their scores, the picked candidate
// indices in pick order and their log-probability.
using SelectionReranker = std::function<Result<SelectionSample>(const std::vector<const Skill*>& candidates,
                                                                const std::vector<double>& scores)>;

// BM25 recall, then (mode rerank) the reranker's picks, capped at max_skills. The decision's
// `input` is left empty: the reranker knows what it saw.
// REQUIRES: index holds library's skills in library order (document i = skill i).
Result<SchemeDecision> select_skills(const SkillLibrary& library, Bm25Index& index, std::string_view query,
                                     const SelectionParams& params, const RngKey& key, int32_t sample_index,
                                     const SelectionReranker& rerank);

// The same with the sim network as the reranker, fed by the featurizer (the cold start's form).
Result<SchemeDecision> select_skills(Backbone& backbone, const SkillLibrary& library, Bm25Index& index,
                                     std::string_view query, const std::vector<float>& task_features,
                                     const SkillFeaturizer& featurizer, const SelectionParams& params,
                                     const RngKey& key, bool greedy, int32_t sample_index);

// ---------------------------------------------------------------------------------------------
// Policy

// What the evaluator said of one turn, as the agents and the reward see it.
struct TurnResult {
  bool compiled = false;
  bool correct = false;
  bool decoy = false;
  double speedup = 0;
  double time_coverage = 0;
  double reward = 0;
};

// The feedback vector the next turn sees: [1, compiled, correct, decoy,
// clamp(log2(speedup), -4, 4) / 4 (0 when not correct), reward / 4].
constexpr int32_t kFeedbackDim = 6;
std::vector<float> encode_feedback(const TurnResult& r);

class TurnEnvironment {
 public:
  virtual ~TurnEnvironment() = default;
  // Builds the candidate for these choices (one per active head), evaluates it, and says how it
  // did. An error stops the rollout (a failing candidate is a result, not an error).
  virtual Result<TurnResult> run_turn(int32_t turn, const std::vector<int32_t>& choices) = 0;
};

// One-hot of a setting over the shape's choice_dim: 1 at (head offset + choice) of each active head.
std::vector<float> encode_choices(const BackboneShape& shape, const std::vector<int32_t>& heads,
                                  const std::vector<int32_t>& choices);

// ---------------------------------------------------------------------------------------------
// Summary

struct TriggerParams {
  double ratio = 1.2;     // best-turn speedup >= ratio x turn-1 speedup
  double min_best = 1.2;  // best-turn speedup >= min_best
};

// Best correct turn's speedup (0 when none is correct).
double best_speedup(const std::vector<TurnResult>& turns);
// best >= ratio x turn-1, best >= min_best, turn-1 > 0 (docs/method.md, Summary agent and
// verification).
bool summary_triggers(const std::vector<TurnResult>& turns, const TriggerParams& p);

class SkillWriter {
 public:
  virtual ~SkillWriter() = default;
  // Writes the skill a summary sample describes (which of the winning setting's choices it keeps,
  // and its scope) as a real skill: name, description, scope, tags, content. nullopt when the
  // sample keeps nothing worth writing (no knob included).
  virtual std::optional<Skill> write_skill(const SummarySample& sample) const = 0;
};

// ---------------------------------------------------------------------------------------------
// Verification gate

struct VerificationParams {
  double min_speedup = 1.2;
  double min_ratio = 1.2;  // x the winning rollout's turn-1 speedup
  int32_t runs = 1;        // the original re-runs once; vinci can require the speedup to hold R times
};

struct VerificationVerdict {
  std::vector<double> speedups;
  std::vector<bool> correct;
  bool accepted = false;
  double worst_speedup = 0;
  std::string reason;  // "accepted", or which condition failed with the numbers
};

VerificationVerdict judge_verification(const std::vector<TurnResult>& runs, double turn1_speedup,
                                       const VerificationParams& p);

// Index of the verdict to stage: the accepted one with the highest worst-run speedup (ties: the
// lowest index); nullopt when none is accepted.
std::optional<size_t> pick_staged(const std::vector<VerificationVerdict>& verdicts);

}  // namespace vinci

#endif  // VINCI_AGENTS_AGENTS_H_

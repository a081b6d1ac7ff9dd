// The cold start stage (daVinci-kernel's Step 1, docs/method.md, Steps), in the sim world: before
// RL, collect multi-turn trajectories with a behaviour policy that needs no training, distil the
// high-speedup ones into an initial skill library through the summary role, build supervised
// examples for all three roles, filter them for diversity, and fit the shared backbone on them.
//
//   collect   per training task (id order) and trajectory j: turn 0 is the default setting
//             (j = 0) or a keyed random one; turn t > 0 changes one keyed-random knob of the best
//             setting so far (highest reward, the earliest on ties) to a keyed-random other value:
//             a hill-climbing search over the code generator's knobs, guided by the evaluator.
//   keep      trajectories whose best correct speedup >= coldstart.min_speedup.
//   distil    the summary teacher: for each knob where the best setting differs from the
//             default, the setting with that knob reverted is evaluated; the knob enters the skill
//             when the revert fails or loses more than ablation_margin of the speedup (scope:
//             general for level-1 tasks, task_specific otherwise). SimSkillWriter writes the skill.
//   verify    the skill's knobs on the default setting, evaluated once: accepted iff correct and
//             speedup >= verification.min_speedup.
//   diversity (DiversityFilter below) over the verified skills; the survivors join the library.
//   SFT data  per kept trajectory that passes the example cap (max_examples_per_pattern per
//             (op family, best setting)): selection (BM25 top-k over the cold-start library ->
//             the candidates whose knobs agree with the best setting, most agreeing first, at most
//             selection.max_skills), policy (each turn of the trajectory, with the chosen skills
//             injected and the turn's real history, -> the best setting), summary (the best
//             setting and its result -> the teacher's include flags and scope).
//   fit       coldstart.epochs full-batch Adam steps on the sum over roles of the mean
//             cross-entropy (Backbone::supervised_step), then the optimizer state is reset.
//
// Records (phase coldstart, step -1), in order: per task, per trajectory, per turn a sample
// (backbone "search"), a measurement and a reward; per kept trajectory the ablation measurements
// (scheme = the reverted knob's index), the summary sample (backbone "teacher") and the
// verification measurement and decision; one diversity decision per verified skill (a
// verification record, staged = kept); one sftEpoch per supervised step; the coldStart summary.
// The fitted parameters are a checkpoint object, the library a library object.
#ifndef VINCI_HARNESS_COLDSTART_H_
#define VINCI_HARNESS_COLDSTART_H_

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "agents/backbone.h"
#include "agents/skill.h"
#include "agents/skill_library.h"
#include "core/hash.h"
#include "core/status.h"
#include "gpu/eval_result.h"
#include "gpu/task.h"
#include "harness/experiment.h"
#include "harness/record_sink.h"
#include "harness/rl.h"

namespace vinci {

// ---------------------------------------------------------------------------------------------
// The diversity filter. Measure, applied to candidates in order of verified speedup (highest
// first; ties by task id, then name), each kept iff
//   - fewer than max_per_family skills of its op family were kept,
//   - fewer than max_per_pattern skills with its knob pattern (the sorted "knob=value" pairs it
//     recommends) were kept, and
//   - its Jaccard similarity to every kept skill is below `similarity`, where a skill's text is
//     the set of BM25 tokens (agents/bm25.h) of skill_document_text (name, description, tags,
//     content) and J(A, B) = |A n B| / |A u B|.
// Disabled, every candidate is kept.

struct DiversityParams {
  bool enabled = true;
  double similarity = 0.8;
  int32_t max_per_family = 3;
  int32_t max_per_pattern = 1;
};

struct SkillCandidate {
  Skill skill;
  std::string family;
  std::string pattern;  // knob_pattern() of the skill's knobs
  std::string task;
  double speedup = 0;
};

struct DiversityVerdict {
  bool kept = false;
  std::string reason;  // "kept", or which rule dropped it and against which skill
};

// One verdict per candidate, in the candidates' order.
std::vector<DiversityVerdict> diversity_filter(const std::vector<SkillCandidate>& candidates,
                                               const DiversityParams& params);
// Jaccard similarity of the BM25 token sets of two texts (1 when both are empty).
double token_jaccard(const std::string& a, const std::string& b);
// "knob=value" pairs sorted by knob, joined by ','.
std::string knob_pattern(const std::map<std::string, std::string>& knobs);

// ---------------------------------------------------------------------------------------------
// The stage.

// What the stage did, for the run's reports.
struct ColdStartPoint {
  uint32_t trajectories = 0, kept = 0, proposed = 0, verified = 0;
  std::vector<std::string> added;  // distilled skills that entered the library, by their names there
  RoleCrossEntropy before, after;  // on the SFT examples
};

// One kept trajectory's supervised targets as questions and answers, for a language model trained
// through its trainer (backbone.kind = "openai", harness/model_trainer.h): the same targets as the
// sim network's examples, which harness/trainer.cc renders as the chat requests the model will be
// asked and the replies it should write.
struct ColdStartExample {
  std::string task;
  std::vector<std::string> candidates;  // selection: the BM25 recall (library skill names), rank order
  std::vector<double> scores;
  std::vector<int32_t> picked;  // the candidates whose knobs agree with the best setting; empty: no selection example
  std::vector<std::map<std::string, std::string>> settings;  // each turn's knob values
  std::vector<EvalResult> evals;                             // each turn's evaluation
  std::vector<TurnResult> results;
  int32_t best_turn = 0;
  std::optional<Skill> skill;  // what the teacher distilled from it (a summary example), if anything
};

struct ColdStartResult {
  ColdStartPoint point;
  std::vector<ColdStartExample> text_examples;  // filled when the backbone is not fitted here
  SkillLibrary library;                         // seed library + the distilled skills that were kept
  std::vector<Experience> examples;             // the SFT examples (targets as samples, advantage 1)
  Digest checkpoint;                            // address of the fitted parameters' checkpoint object
  Digest digest;                                // their parameter digest
  uint64_t turn_evals = 0;
};

// Runs the stage on the training tasks and leaves the backbone fitted. REQUIRES: train sorted by
// id; backbone's shape is sim_backbone_shape(). fit = false (a language model, trained by its
// trainer): the examples are returned as text_examples and nothing is fitted here (no sftEpoch
// records; the coldStart record's cross-entropies are 0 and it names no checkpoint).
Result<ColdStartResult> run_cold_start(const Experiment& exp, const std::vector<const Task*>& train,
                                       Evaluator& evaluator, Backbone& backbone, const SkillLibrary& seed_library,
                                       RecordSink& sink, bool fit = true);

}  // namespace vinci

#endif  // VINCI_HARNESS_COLDSTART_H_

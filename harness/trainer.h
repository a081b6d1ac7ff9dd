// The daVinci-kernel loop: per step, selection -> multi-turn policy rollouts -> summary and
// verification -> rewards and advantages -> one backbone update -> the next library snapshot ->
// metrics; evaluation on held-out tasks every few steps. Every event and derived value goes to a
// RecordSink in a fixed order (steps, then tasks by id, then schemes, rollouts, turns), whatever
// the number of threads, so two runs of one config and seed have equal digests, and re-driving a
// run against its own log (resume, verify) compares record by record.
#ifndef VINCI_HARNESS_TRAINER_H_
#define VINCI_HARNESS_TRAINER_H_

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "agents/backbone.h"
#include "agents/skill_library.h"
#include "gpu/eval_result.h"
#include "gpu/task.h"
#include "harness/agent_model.h"
#include "harness/coldstart.h"
#include "harness/experiment.h"
#include "harness/model_trainer.h"
#include "harness/record_sink.h"
#include "harness/rl.h"

namespace vinci {

struct TrainPoint {
  int32_t step = 0;
  double reward_mean = 0;        // over every training turn of the step
  double correct_rate = 0;       // share of correct turns
  double best_speedup_mean = 0;  // mean over tasks of the best correct speedup (0 if none)
  uint32_t triggered = 0;        // tasks whose rollouts triggered the summary agent
  uint32_t accepted = 0;         // skills that passed verification (one staged per task at most)
  uint32_t library_size = 0;     // after the step
  double loss = 0;
  // A language model's update after the step (trainer.kind): the model it produced; empty when
  // nothing trained it.
  std::string model;
  uint32_t trained_samples = 0;
  double update_seconds = 0;   // the trainer's wall time (reports only)
  std::string update_failure;  // non-empty: the step's update failed; `model` is the one kept
};

struct EvalPoint {
  int32_t step = 0;           // evaluated before training this step (steps: after the last)
  std::vector<FastP> fast_p;  // last/best x all/correct x levels x thresholds
};

struct TrainerOutput {
  std::vector<TrainPoint> train;
  std::vector<EvalPoint> eval;
  std::optional<ColdStartPoint> coldstart;
  std::string coldstart_model;    // a language model's cold start: the model its trainer returned
  double coldstart_loss = 0;      // ... and the loss it reported
  std::string coldstart_failure;  // ... or why it failed (the model stayed the base)
  uint32_t coldstart_samples = 0;
  double coldstart_seconds = 0;  // the trainer's wall time (reports only)
  std::vector<FastP> tts;        // test-time scaling fast_p (best and last turn), when run
  std::string start_origin;      // where step 0's parameters came from: init, coldstart, run
  std::vector<std::string> train_tasks, eval_tasks;
  SkillLibrary library;
  uint64_t rollouts = 0;    // training, evaluation and verification rollouts
  uint64_t turn_evals = 0;  // candidates evaluated (one per turn or verification run)
};

struct TaskSplit {
  std::vector<const Task*> train, eval;
};
// Per level: the first max_per_level tasks by id, ordered by a keyed hash of (split seed, id);
// the first ceil(eval_share x n) of them are held out. Both lists are returned sorted by id.
TaskSplit split_tasks(const TaskSuite& suite, const Experiment& exp);
// Ok when the split leaves a training task for loop.steps > 0; else InvalidArgument naming the
// config and the keys that select tasks. `harness run` checks it before the run's folder exists.
Status check_task_split(const TaskSuite& suite, const Experiment& exp);

// Progress: (done, total, line) after each unit of work.
//
// Before step 0 (in this order, each recorded): the parameters are taken from backbone.init_run
// when set (harness/checkpoints.h); the cold start stage runs when coldstart.enabled
// (harness/coldstart.h) and its library replaces seed_library; a checkpoint record names the
// parameters step 0 starts from (backbone.checkpoints). After the final evaluation, the
// test-time-scaling evaluation runs when tts.enabled (harness/tts.h).
using ProgressFn = std::function<void(int64_t done, int64_t total, const std::string& line)>;

// `model` answers the agents' questions (harness/agent_model.h); without one, the sim network
// `backbone` answers through SimAgentModel. `backbone` holds the parameters that are trained,
// checkpointed and digested either way. `trainer`, when given, trains a language model: after each
// step's update it gets the step's calls and advantages (harness/model_trainer.h), a ModelUpdate
// record names what it returned, and the next step asks for the model it names.
Result<TrainerOutput> run_experiment(const Experiment& exp, const TaskSuite& suite, Evaluator& evaluator,
                                     Backbone& backbone, const SkillLibrary& seed_library, RecordSink& sink,
                                     const ProgressFn& progress, AgentModel* model = nullptr,
                                     ModelTrainer* trainer = nullptr);

}  // namespace vinci

#endif  // VINCI_HARNESS_TRAINER_H_

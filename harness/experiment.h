// An experiment: the declared config keys (docs/config_reference.toml is generated from them) and
// the typed settings the loop reads.
#ifndef VINCI_HARNESS_EXPERIMENT_H_
#define VINCI_HARNESS_EXPERIMENT_H_

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "agents/agents.h"
#include "core/status.h"
#include "gpu/plan.h"
#include "gpu/precision.h"
#include "gpu/task.h"
#include "harness/config.h"
#include "harness/rl.h"
#include "harness/settings.h"
#include "harness/sim_knowledge.h"

namespace vinci {

struct EvalRequest;  // gpu/eval_result.h

// Every key an experiment config may set.
const ConfigSchema& experiment_schema();

struct Experiment {
  // [run]
  std::string name;
  uint64_t seed = 1;
  int32_t threads = 1;
  std::string world;  // "sim"
  std::string out_root;

  // [tasks]
  std::string task_dir;              // empty: the suite in the source tree
  SizeName size = SizeName::kSmall;  // tasks.size
  std::vector<int64_t> levels;
  double eval_share = 0.25;  // share of each level held out for evaluation
  uint64_t split_seed = 0;
  int64_t max_tasks_per_level = 0;  // 0: all
  int64_t sample_per_level = 0;     // 0: all
  TaskSet task_set = TaskSet::kAll;
  std::vector<std::string> task_ids;  // empty: all

  // [loop]
  int32_t steps = 0;
  int32_t batch_tasks = 16;
  int32_t schemes = 3;  // k selection samples
  bool null_scheme = true;
  int32_t rollouts = 4;  // n per scheme
  int32_t turns = 3;     // T
  double gamma = 1.0;
  bool normalize_advantages = false;

  RewardParams reward;
  bool rejection_sampling = true;

  SelectionParams selection;
  std::vector<std::string> languages = {"cuda"};  // policy.languages: kernel languages a reply may use
  PolicyFormat policy_format = PolicyFormat::kPlan;
  double selection_scale = 0.3;
  double bm25_k1 = 1.5, bm25_b = 0.75, bm25_epsilon = 0.25;

  bool summary_enabled = true;
  int32_t summary_samples = 8;
  TriggerParams trigger;
  double summary_scale = 0.5;
  VerificationParams verification;

  // [backbone]
  BackboneKind backbone = BackboneKind::kSim;
  struct Llm {  // backbone.kind = "openai" (harness/llm_agents.h)
    std::string base_url, model, api_key_env, prompts;
    double temperature = 1.0, top_p = 1.0, timeout_s = 600, deadline_s = 1800;
    int64_t max_tokens = 0;
    int64_t context_length = 0, max_tokens_cap = 8192;
    double bytes_per_token = 2.0;
    bool seed = true, tools = false;
    int32_t retries = 4, concurrency = 8;
  } llm;
  // [trainer] (harness/model_trainer.h): who trains a language model.
  struct Trainer {
    TrainerKind kind = TrainerKind::kNone;
    std::string url, api_key_env;
    double timeout_s = 3600;
    double lr = 1e-3, clip = 1.0, kl = 0.0, sft_lr = 3e-3;
    int32_t epochs = 1, sft_epochs = 3, batch = 16;
  } trainer;
  int32_t hidden = 64;
  double lr = 1e-3;
  bool train_selection = true, train_policy = true, train_summary = true;
  bool checkpoints = true;  // a checkpoint object per step (false for runs recorded before it)
  std::string init_run;     // start from a checkpoint of this run (empty: init or cold start)
  int32_t init_step = -1;   // ... the parameters it had at the start of this step (-1: its last)

  // [sim]
  KnowledgeParams sim;

  // [device]
  DeviceKind device = DeviceKind::kSim;
  std::string device_profile;                                                 // empty: the built-in H200 profile
  ReferencePrecision reference_precision = ReferencePrecision::kKernelbench;  // cuda: gpu/eval_result.h
  double noise = 0.0;
  std::string queue;  // device.queue: "" (in process) or redis://HOST:PORT[/NAME]
  int32_t queue_attempts = 3;
  PlanLimits limits;  // device.max_*: gpu/plan.h
  int32_t timing_samples = 10;
  bool timing_adaptive = false;  // device.timing = "adaptive": timing_samples is the cap
  double timing_width = 0.01;    // device.timing_width
  int32_t trials = 5;

  // [eval]
  int32_t eval_every = 5;  // steps; the last step always evaluates
  bool eval_greedy = true;
  bool eval_inject_skills = true;
  int32_t eval_turns = 3;
  std::vector<double> thresholds;
  FastPCompare fast_p_compare = FastPCompare::kStrict;  // of the run's own reports only

  // [library]
  std::string seed_library;  // a daVinci JSONL file; empty: start empty

  // [coldstart] (harness/coldstart.h)
  struct ColdStart {
    bool enabled = false;
    int32_t trajectories = 2;       // behaviour-policy trajectories per training task
    int32_t turns = 6;              // turns per trajectory
    double min_speedup = 1.5;       // keep trajectories whose best speedup reaches this
    double ablation_margin = 0.05;  // a knob enters a skill if reverting it costs more than this
    bool diversity = true;
    double similarity = 0.8;               // near-duplicate: Jaccard of skill-text token sets >= this
    int32_t max_per_family = 3;            // skills per op family
    int32_t max_per_pattern = 1;           // skills per knob pattern
    int32_t max_examples_per_pattern = 2;  // SFT trajectories per (family, best-setting pattern)
    int32_t epochs = 60;                   // full-batch supervised steps
    double lr = 3e-3;
  } coldstart;

  // [tts] (harness/tts.h)
  struct Tts {
    bool enabled = false;
    int32_t turns = 5;        // T per iteration
    int32_t iterations = 10;  // I
    int32_t window = 4;       // W
    bool greedy = false;
  } tts;

  std::string effective_toml;  // what the run records
  std::string config_path;
};

// Keys that are not factors of an experiment: they name or place a run (run.name, run.out),
// pick a replicate (run.seed), change nothing a run records (run.threads, device.queue and
// device.queue_attempts: where evaluations run) or only how its own
// reports count (eval.fast_p_inclusive). Two runs whose configs differ only in these compare the
// same method; `replay diff` counts every other differing key as a factor.
const std::vector<std::string>& non_factor_keys();
bool is_non_factor_key(std::string_view path);

// The settings of an effective config (Config::effective_toml, a manifest's config text):
// "section.key" -> the value as written.
std::map<std::string, std::string> effective_settings(const std::string& effective_toml);

// Where a run goes: <out>/<name>/, its objects in <out>/objects/. The runs root must be a folder
// (not empty); the name one folder inside it (not empty, ".", ".." or "objects", no '/'). Errors
// start with `what` (the key or option).
Status check_runs_root(const std::string& out, const std::string& what);
Status check_run_name(const std::string& name, const std::string& what);

// The experiment's timing rule (device.timing, device.timing_width; the cap device.timing_samples)
// into a request whose samples are set.
void set_timing(const Experiment& e, EvalRequest* request);

// Reads the config file with --set overrides; errors name file, line and key.
Result<Experiment> load_experiment(const std::string& path, const std::vector<std::string>& overrides);
// From effective TOML text (what a recorded run holds), with optional overrides ("key=value").
Result<Experiment> experiment_from_text(const std::string& text, const std::string& source,
                                        const std::vector<std::string>& overrides = {});

}  // namespace vinci

#endif  // VINCI_HARNESS_EXPERIMENT_H_

// An experiment: the declared config keys (docs/config_reference.toml is generated from them) and
// the typed settings the loop reads.
#ifndef VINCI_HARNESS_EXPERIMENT_H_
#define VINCI_HARNESS_EXPERIMENT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "agents/agents.h"
#include "core/status.h"
#include "harness/config.h"
#include "harness/rl.h"

namespace vinci {

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
  std::string task_dir;  // empty: the suite in the source tree
  std::string size;      // "small" | "full"
  std::vector<int64_t> levels;
  double eval_share = 0.25;  // share of each level held out for evaluation
  uint64_t split_seed = 0;
  int64_t max_tasks_per_level = 0;  // 0: all

  // [loop]
  int32_t steps = 0;
  int32_t batch_tasks = 16;
  int32_t schemes = 3;      // k selection samples
  bool null_scheme = true;
  int32_t rollouts = 4;     // n per scheme
  int32_t turns = 3;        // T
  double gamma = 1.0;
  bool normalize_advantages = false;

  RewardParams reward;
  bool rejection_sampling = true;

  SelectionParams selection;
  double selection_scale = 0.3;
  double bm25_k1 = 1.5, bm25_b = 0.75, bm25_epsilon = 0.25;

  bool summary_enabled = true;
  int32_t summary_samples = 8;
  TriggerParams trigger;
  double summary_scale = 0.5;
  VerificationParams verification;

  // [backbone]
  std::string backbone;  // "sim"
  int32_t hidden = 64;
  double lr = 1e-3;
  bool train_selection = true, train_policy = true, train_summary = true;

  // [device]
  std::string device;  // "sim"
  std::string device_profile;  // empty: the built-in H200 profile
  double noise = 0.0;
  int32_t timing_samples = 10;
  int32_t trials = 5;

  // [eval]
  int32_t eval_every = 5;  // steps; the last step always evaluates
  bool eval_greedy = true;
  bool eval_inject_skills = true;
  int32_t eval_turns = 3;
  std::vector<double> thresholds;

  // [library]
  std::string seed_library;  // a daVinci JSONL file; empty: start empty

  std::string effective_toml;  // what the run records
  std::string config_path;
};

// Reads the config file with --set overrides; errors name file, line and key.
Result<Experiment> load_experiment(const std::string& path, const std::vector<std::string>& overrides);
// From effective TOML text (what a recorded run holds), with optional overrides ("key=value").
Result<Experiment> experiment_from_text(const std::string& text, const std::string& source,
                                        const std::vector<std::string>& overrides = {});

}  // namespace vinci

#endif  // VINCI_HARNESS_EXPERIMENT_H_

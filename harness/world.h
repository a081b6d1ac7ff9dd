// Builds the concrete world an experiment names (evaluator, backbone, task suite, seed library)
// and the environment its manifest records. main() and replay wire these into the loop.
#ifndef VINCI_HARNESS_WORLD_H_
#define VINCI_HARNESS_WORLD_H_

#include <functional>
#include <memory>
#include <string>

#include "agents/backbone.h"
#include "agents/skill_library.h"
#include "gpu/eval_result.h"
#include "gpu/task.h"
#include "harness/agent_model.h"
#include "harness/experiment.h"
#include "harness/llm_agents.h"
#include "harness/model_trainer.h"
#include "recorder/environment.h"

namespace vinci {

struct World {
  TaskSuite suite;
  std::unique_ptr<Evaluator> evaluator;
  // Wall time spent inside the evaluator so far (for reports only).
  std::function<double()> evaluator_seconds;
  // device.queue: the queue's state for the progress line ("queue 3 waiting, ..."); else empty.
  std::function<std::string()> evaluator_progress;
  // The parameters trained and checkpointed: the sim network, or an external model's identity.
  std::unique_ptr<Backbone> backbone;
  // backbone.kind = "openai": where requests go, and the model that asks them (null for the sim,
  // whose backbone answers through SimAgentModel).
  std::unique_ptr<ChatTransport> transport;
  std::unique_ptr<ChatTransport> fallback_transport;
  std::unique_ptr<ChatTransport> http_transport;  // under the journaling one (live calls)
  std::unique_ptr<CallJournal> journal;           // RUN/llm_journal.jsonl of a run that calls a server
  std::unique_ptr<AgentModel> model;
  std::unique_ptr<LlmCallLog> call_log;  // the model's calls: attempts, latency (openai)
  TrainerParts trainer;                  // trainer.kind: who trains the model (null trainer: none)
  SkillLibrary seed_library;
};

// How a world's language model is reached: over HTTP (a new run), only from a run's log (verify),
// or from the log first and over HTTP for what it does not hold (resume).
// kRecordedDecisions: from the log by call key alone, whatever the rebuilt request (rescore).
// kRecordedPrefix: from the log of an unfinished run (verify): a call it does not hold (its log
// ends before it) is a failed call, so the loop reaches the log's end instead of stopping there.
enum class ModelCalls { kLive, kRecorded, kRecordedThenLive, kRecordedDecisions, kRecordedPrefix };

// Relative paths in the experiment (task dir, device profile, seed library, prompts) resolve
// against the current folder, then against the source tree vinci was built from. For an openai
// backbone with calls other than kLive, the prompt templates and replies come from run_dir.
// call_log_path: where the model's calls are logged with their attempts and latency (empty: counted
// only); a world that calls a server journals its answers beside it (llm_journal.jsonl, CallJournal)
// and, resuming, takes the journal's answers too.
Result<World> build_world(const Experiment& exp, ModelCalls calls = ModelCalls::kLive, const std::string& run_dir = "",
                          const std::string& call_log_path = "");

// Pins the numeric settings a run depends on (ATEN_CPU_CAPABILITY when unset, OpenBLAS's threads;
// the sim backbone pins torch's threads) and returns the environment to record. Call before any
// torch work.
void pin_numeric_settings();

// What a run learns of its model server before its first call (preflight_model_server).
struct ModelServerInfo {
  std::string model;
  int64_t context_length = 0;  // the server's max_model_len for the model; 0 when it does not say
  int64_t probe_tokens = 0;    // prompt tokens the server counted for the probe request
};

// Checks, before a run spends anything, that its backbone.kind = "openai" setup works: GET /models
// lists backbone.model (its context length is read when stated), then one tiny greedy request
// (max_tokens 1) with the run's sampling fields is answered. Errors (FailedPrecondition) say what
// is wrong with the server's own message: a server that cannot be reached, a wrong URL, key or
// model name (naming the models it serves), a parameter it refuses.
Result<ModelServerInfo> preflight_model_server(const Experiment& exp);
Environment capture_environment();

// The settings of `recorded` that differ from this process's, as "key: recorded X, here Y" lines
// (settings the run did not record are not compared); empty when the settings in effect here are
// the run's.
std::vector<std::string> numeric_differences(const Environment& recorded, const Environment& here);
// FailedPrecondition listing the differences ("run DIR was recorded under other numeric
// settings<hint>:" and one line each) when there are any; ok otherwise.
Status check_numeric_settings(const Environment& recorded, const Environment& here, const std::string& run_dir,
                              const std::string& hint = "");

}  // namespace vinci

#endif  // VINCI_HARNESS_WORLD_H_

// The seam between the loop and whatever answers for the three agents.
//
// The loop asks semantic questions: for this task and these BM25 candidates, which skills; for
// this task, these skills and this rollout's turns so far (each with the evaluator's verdict),
// which plan next; for this winning rollout, which new skills. Each model answers in its own way:
//   sim     (harness/sim_agents.h) featurises the question for vinci's small network (a Backbone),
//           samples knob choices and answers with the code generator's plan;
//   openai  (harness/llm_agents.h) renders chat requests from prompt templates, sends them to an
//           OpenAI-compatible server (or, in replay, answers them from the log) and parses the
//           replies with agents/tool_calls.h and gpu/model_plan.h.
// An answer carries what the loop records: the semantic result (picked candidates, a plan or the
// reason there is none, proposed skills), the sim network's input and sample when there was one
// (the loop trains the network on them), and the model call when there was one (an LlmReply
// record with its request and reply objects). So replay, diff and rescore read both kinds of run
// alike.
#ifndef VINCI_HARNESS_AGENT_MODEL_H_
#define VINCI_HARNESS_AGENT_MODEL_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "agents/agents.h"
#include "agents/backbone.h"
#include "agents/skill.h"
#include "core/hash.h"
#include "core/rng.h"
#include "core/status.h"
#include "gpu/eval_result.h"
#include "gpu/plan.h"
#include "gpu/task.h"

namespace vinci {

// One call of a language model, as the loop records it: an LlmReply record naming a request and a
// reply object. Everything here but the last two fields is recorded and compared by replay.
struct LlmCall {
  AgentRole role = AgentRole::kPolicy;
  std::string endpoint;  // base URL of the server
  std::string model;
  std::string request;  // the canonical request body (object kind "llm_request")
  std::string reply;    // the reply body as received (kind "llm_reply"); empty on failure
  std::string finish_reason;
  uint32_t prompt_tokens = 0;
  uint32_t completion_tokens = 0;
  double temperature = 0;
  std::string failure;  // why the call failed after its retries; empty when it succeeded
  Digest key;           // digest of the call's RngKey: how replay finds the reply
  // Reported, never recorded in a record (they differ between two runs of one config).
  uint32_t attempts = 0;
  double latency_s = 0;
};

struct SelectionQuestion {
  const Task* task = nullptr;
  SizeName size = SizeName::kSmall;
  std::vector<const Skill*> candidates;  // BM25 top-k, rank order
  std::vector<double> scores;            // their BM25 scores
  int32_t max_pick = 3;
  RngKey key = RngKey::root(0);  // the call's key
  bool greedy = false;
};

struct SelectionAnswer {
  std::vector<int32_t> picked;  // candidate indices, pick order (the loop keeps max_pick)
  double log_prob = 0;          // sim: under the network's parameters
  SelectionInput input;         // sim: what the network saw
  std::optional<LlmCall> call;
};

// One turn of a policy rollout: what the model answered and what the evaluator made of it.
struct PolicyTurn {
  std::optional<Plan> plan;  // nullopt: no candidate (the reply held no valid plan, or the call failed)
  std::string reply_error;   // why there is no plan; the next turn's feedback says it
  std::string reply_text;    // a model's reply content (empty for the sim)
  PolicyInput input;         // sim: what the network saw
  PolicySample sample;       // sim: its choices and their log-probability
  // sim, sim.knowledge = "skills": what the policy knew (TurnKnowledge::to_json, harness/sim_world.h),
  // recorded as the sample's prompt (object kind "sim_knowledge"); empty otherwise.
  std::string knowledge;
  std::optional<LlmCall> call;
  // Filled by the loop once the turn is evaluated.
  Digest plan_address;  // zero when there is no plan
  EvalResult eval;
  TurnResult result;
};

struct PolicyQuestion {
  const Task* task = nullptr;
  SizeName size = SizeName::kSmall;
  std::vector<const Skill*> skills;                  // injected into the policy's prompt
  const std::vector<PolicyTurn>* history = nullptr;  // earlier turns this one continues, evaluated
  RngKey key = RngKey::root(0);                      // the call's key
  bool greedy = false;
};

struct SummaryQuestion {
  const Task* task = nullptr;
  SizeName size = SizeName::kSmall;
  std::vector<const Skill*> injected;              // the winning rollout's skills
  const std::vector<PolicyTurn>* turns = nullptr;  // the winning rollout
  size_t best_turn = 0;                            // its best correct turn
  double turn1_speedup = 0;
  double best_speedup = 0;
  int32_t sample_index = 0;
  RngKey key = RngKey::root(0);  // the call's key
  bool greedy = false;
};

struct SummaryAnswer {
  std::vector<Skill> skills;  // proposed skills that passed the field and lazy checks (<= 2)
  std::string dropped;        // why a proposal was dropped ("" when none was), for the record
  SummaryInput input;         // sim: what the network saw
  SummarySample sample;       // sim: its sample
  std::optional<LlmCall> call;
};

class AgentModel {
 public:
  virtual ~AgentModel() = default;
  // "sim" or "openai": the BackboneSample records' backbone field.
  virtual std::string kind() const = 0;
  // Errors are the loop's errors (a bad question, a replay that finds no recorded answer); a
  // model that fails to answer well (a failed call, a reply that does not parse) answers with
  // that failure in the answer.
  virtual Result<SelectionAnswer> select(const SelectionQuestion& q) = 0;
  virtual Result<PolicyTurn> write_plan(const PolicyQuestion& q) = 0;
  virtual Result<SummaryAnswer> summarise(const SummaryQuestion& q) = 0;
  // Texts the answers depend on beyond the config (a model's prompt templates), by name: the loop
  // stores them as objects of kind "prompt_template" and names them in blob records at the start
  // of the run, so they are part of its digest.
  virtual std::vector<std::pair<std::string, std::string>> attachments() const { return {}; }
  // A language model's trainer produced a new model: later calls ask for it by this name (never
  // while calls are in flight: the loop calls it between steps).
  virtual void use_model(const std::string& /*name*/) {}
};

}  // namespace vinci

#endif  // VINCI_HARNESS_AGENT_MODEL_H_

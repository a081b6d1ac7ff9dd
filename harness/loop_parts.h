// Pieces of the loop shared by its stages (training steps, evaluation, the cold start, test-time
// scaling): per-task record buffers, the sim turn environment, the writers of the records every
// stage produces, and the small utilities around them. Internal to harness/.
#ifndef VINCI_HARNESS_LOOP_PARTS_H_
#define VINCI_HARNESS_LOOP_PARTS_H_

#include <capnp/message.h>

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "agents/agents.h"
#include "agents/bm25.h"
#include "core/parallel.h"
#include "gpu/codegen/codegen.h"
#include "gpu/eval_result.h"
#include "gpu/task.h"
#include "harness/agent_model.h"
#include "harness/experiment.h"
#include "harness/record_sink.h"
#include "harness/records.h"
#include "harness/rl.h"
#include "recorder/address.h"
#include "recorder/object_store.h"
#include "recorder/vinci.capnp.h"

namespace vinci {
namespace loop {

inline uint64_t eval_seed(const RngKey& key) {
  Stream s(key.with("purpose", "eval-seed"));
  return s.next_u64();
}

inline std::string kernel_excerpt(const Plan& plan, int lines) {
  for (const auto& k : plan.kernels) {
    std::string out;
    int n = 0;
    size_t pos = 0;
    while (pos < k.source.size() && n < lines) {
      size_t end = k.source.find('\n', pos);
      if (end == std::string::npos) end = k.source.size();
      out += k.source.substr(pos, end - pos) + "\n";
      pos = end + 1;
      ++n;
    }
    if (!out.empty()) out.pop_back();
    return out;
  }
  return "// (library steps only)";
}

// What one evaluated turn left behind.
struct TurnRecord {
  Digest plan;
  EvalResult eval;
  std::string excerpt;
};

inline TurnResult turn_result(const EvalResult& eval, const RewardParams& reward) {
  TurnResult r;
  r.compiled = eval.compiled;
  r.correct = eval.correct;
  r.decoy = eval.decoy;
  r.speedup = eval.speedup;
  r.time_coverage = eval.time_coverage;
  r.reward = turn_reward({r.compiled, r.correct, r.decoy, r.speedup, r.time_coverage}, reward);
  return r;
}

// Evaluates the plans of one rollout's turns (trial seeds keyed by the rollout's key and the
// turn), storing each plan and compile log as objects. A turn without a plan (a model's reply that
// held none) is not evaluated: its measurement says why, with every trial unreached.
class PlanTurnEvaluator {
 public:
  PlanTurnEvaluator(const Experiment& exp, const Task& task, Evaluator& evaluator, ObjectStore& store, RngKey key)
      : exp_(exp), task_(task), evaluator_(evaluator), store_(store), key_(key) {}

  Result<TurnRecord> evaluate(int32_t turn, const Plan* plan, const std::string& no_plan_reason) const {
    EvalRequest req;
    req.size = exp_.size;
    req.seed = eval_seed(key_.with("turn", turn));
    req.trials = exp_.trials;
    req.samples = exp_.timing_samples;
    set_timing(exp_, &req);
    TurnRecord rec;
    if (plan == nullptr) {
      rec.eval.evaluator = "reply";
      rec.eval.size = size_name(exp_.size);
      rec.eval.error = "no candidate: " + no_plan_reason;
      add_unreached_trials(&rec.eval, task_.id, req);
      rec.eval.finalize();
      rec.excerpt = "// (no candidate)";
      return rec;
    }
    VINCI_ASSIGN_OR_RETURN(rec.plan, store_.put("plan", canonical_bytes(*plan)));
    VINCI_ASSIGN_OR_RETURN(rec.eval, evaluator_.evaluate(task_, *plan, req));
    if (!rec.eval.compile_log.empty()) {
      VINCI_RETURN_IF_ERROR(store_.put(kCompileLogKind, rec.eval.compile_log).status());
    }
    rec.excerpt = kernel_excerpt(*plan, 30);
    return rec;
  }

  // Evaluates turn t's plan into the turn (plan address, measurement, result with its reward).
  Status evaluate(int32_t t, PolicyTurn* turn) const {
    VINCI_ASSIGN_OR_RETURN(TurnRecord rec, evaluate(t, turn->plan ? &*turn->plan : nullptr, turn->reply_error));
    turn->plan_address = rec.plan;
    turn->eval = std::move(rec.eval);
    turn->result = turn_result(turn->eval, exp_.reward);
    return Status();
  }

 private:
  const Experiment& exp_;
  const Task& task_;
  Evaluator& evaluator_;
  ObjectStore& store_;
  RngKey key_;
};

// The cold start's turn environment: knob choices -> the generator's plan -> a measurement.
class SimTurnEnv : public TurnEnvironment {
 public:
  SimTurnEnv(const Experiment& exp, const Task& task, const KnobSpace& space, Evaluator& evaluator, ObjectStore& store,
             RngKey key)
      : exp_(exp), task_(task), plans_(exp, task, evaluator, store, key) {}

  Result<TurnResult> run_turn(int32_t turn, const std::vector<int32_t>& choices) override {
    KnobSetting setting(choices.begin(), choices.end());
    VINCI_ASSIGN_OR_RETURN(Plan plan, generate_plan(task_, setting));
    VINCI_ASSIGN_OR_RETURN(TurnRecord rec, plans_.evaluate(turn, &plan, ""));
    TurnResult r = turn_result(rec.eval, exp_.reward);
    turns.push_back(std::move(rec));
    return r;
  }

  std::vector<TurnRecord> turns;

 private:
  const Experiment& exp_;
  const Task& task_;
  PlanTurnEvaluator plans_;
};

// backbone: the kind of the backbone that made the sample (Backbone::kind()).
inline void write_policy_sample(RecordBuf& buf, const RecordPos& pos, const PolicySample& s, bool greedy,
                                const Digest& plan, const RngKey& key, const std::string& backbone,
                                const Digest* request = nullptr) {
  SampleRecord r;
  r.role = schema::Role::POLICY;
  r.backbone = backbone;
  for (int32_t c : s.choices) r.actions.push_back(static_cast<uint32_t>(c));
  r.log_prob = s.log_prob;
  r.greedy = greedy;
  r.output = plan;
  if (request) r.prompt = *request;
  r.key = key.digest();
  write_sample(buf, pos, r);
}

inline schema::Role schema_role(AgentRole role) {
  switch (role) {
    case AgentRole::kSelection: return schema::Role::SELECTION;
    case AgentRole::kPolicy: return schema::Role::POLICY;
    case AgentRole::kSummary: return schema::Role::SUMMARY;
  }
  return schema::Role::POLICY;
}

// The LlmReply record of a model call, its request and reply stored as objects; returns the
// request's address (the BackboneSample after it names it as its prompt).
inline Result<Digest> write_llm_call(RecordBuf& buf, ObjectStore& store, const RecordPos& pos, const LlmCall& c,
                                     int32_t sample_index = -1) {
  LlmReplyRecord l;
  VINCI_ASSIGN_OR_RETURN(l.request, store.put("llm_request", c.request));
  if (c.failure.empty()) {
    VINCI_ASSIGN_OR_RETURN(l.reply, store.put("llm_reply", c.reply));
  }
  l.role = schema_role(c.role);
  l.endpoint = c.endpoint;
  l.model = c.model;
  l.finish_reason = c.finish_reason;
  l.prompt_tokens = c.prompt_tokens;
  l.completion_tokens = c.completion_tokens;
  l.temperature = c.temperature;
  l.failure = c.failure;
  l.key = c.key;
  l.sample_index = sample_index;
  write_llm_reply(buf, pos, l);
  return l.request;
}

inline void write_turn_reward(RecordBuf& buf, const RecordPos& pos, const TurnResult& t) {
  RewardRecord w;
  w.kind = schema::Reward::Kind::TURN;
  w.value = t.reward;
  w.speedup = t.speedup;
  w.time_coverage = t.time_coverage;
  w.correct = t.correct;
  w.decoy = t.decoy;
  write_reward(buf, pos, w);
}

// A policy turn's records: the model call (when there was one), the sample, the measurement and
// the reward.
inline Status write_policy_turn(RecordBuf& buf, ObjectStore& store, const std::string& backbone, const RecordPos& pos,
                                const PolicyTurn& t, bool greedy, const RngKey& key) {
  std::optional<Digest> request;
  if (t.call) {
    VINCI_ASSIGN_OR_RETURN(request, write_llm_call(buf, store, pos, *t.call));
  } else if (!t.knowledge.empty()) {
    VINCI_ASSIGN_OR_RETURN(request, store.put("sim_knowledge", t.knowledge));
  }
  write_policy_sample(buf, pos, t.sample, greedy, t.plan_address, key, backbone, request ? &*request : nullptr);
  write_measurement(buf, pos, t.eval);
  write_turn_reward(buf, pos, t.result);
  return Status();
}

// A scheme's selection: the selection agent's sample (when it sampled), then the decision.
// pos: the task's position at the scheme (sample) being selected for.
inline void write_scheme_decision(RecordBuf& buf, const RecordPos& pos, const SchemeDecision& d,
                                  const SkillLibrary& library, const Digest& query, const Digest& snapshot,
                                  const SelectionParams& params, bool greedy, const RngKey& key,
                                  const std::string& backbone) {
  if (d.sampled) {
    SampleRecord s;
    s.role = schema::Role::SELECTION;
    s.backbone = backbone;
    for (int32_t p : d.sample.picked) s.actions.push_back(static_cast<uint32_t>(p));
    s.log_prob = d.sample.log_prob;
    s.greedy = greedy;
    s.sample_index = d.sample_index;
    s.key = key.digest();
    write_sample(buf, pos, s);
  }
  SelectionRecord s;
  s.query = query;
  for (const auto& hit : d.recall.hits) s.candidates.push_back({library.at(hit.doc).name, hit.score});
  s.selected = d.selected;
  s.random_fallback = d.recall.random_fallback;
  s.reranked = params.mode == SelectionMode::kRerank;
  s.sample_index = d.sample_index;
  s.library_snapshot = snapshot;
  write_selection(buf, pos, s);
}

// Everything one task contributes to a training step.
inline std::vector<const Skill*> skills_named(const SkillLibrary& lib, const std::vector<std::string>& names) {
  std::vector<const Skill*> out;
  for (const auto& n : names) {
    if (const Skill* s = lib.find(n)) out.push_back(s);
  }
  return out;
}

inline Bm25Index build_index(const SkillLibrary& lib, const Experiment& exp) {
  Bm25Index index(Bm25Params{exp.bm25_k1, exp.bm25_b, exp.bm25_epsilon});
  for (const Skill& s : lib.skills()) index.add_text(skill_document_text(s));
  return index;
}

inline Status flush(RecordBuf& buf, RecordSink& sink) {
  for (auto& r : buf.records) VINCI_RETURN_IF_ERROR(sink.put(*r));
  buf.records.clear();
  return Status();
}

}  // namespace loop
}  // namespace vinci

#endif  // VINCI_HARNESS_LOOP_PARTS_H_

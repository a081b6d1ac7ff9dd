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
#include "harness/rl.h"
#include "recorder/address.h"
#include "recorder/object_store.h"
#include "recorder/vinci.capnp.h"

namespace vinci {
namespace loop {

using Builder = std::unique_ptr<capnp::MallocMessageBuilder>;

// Records a task's work produces, in order; seq is set when they reach the sink.
// Where a record sits in a run: its step and task and, where they apply, its scheme (or sample),
// rollout and turn, -1 where one does not; and the phase that wrote it. Every writer below takes
// one, so call sites name a position instead of passing five loose integers.
struct RecordPos {
  using Phase = schema::Record::Phase;

  int32_t step = -1;
  std::string task;  // "" for run-wide records (metrics, library snapshots)
  int32_t scheme = -1;
  int32_t rollout = -1;
  int32_t turn = -1;
  Phase phase = Phase::TRAIN;

  // A run-wide record of a step.
  static RecordPos of_step(int32_t step, Phase phase = Phase::TRAIN) {
    RecordPos p;
    p.step = step;
    p.phase = phase;
    return p;
  }
  // A record of one task in a step.
  static RecordPos of_task(int32_t step, const std::string& task, Phase phase) {
    RecordPos p = of_step(step, phase);
    p.task = task;
    return p;
  }
  RecordPos at_scheme(int32_t v) const { return with(&RecordPos::scheme, v); }
  RecordPos at_rollout(int32_t v) const { return with(&RecordPos::rollout, v); }
  RecordPos at_turn(int32_t v) const { return with(&RecordPos::turn, v); }
  RecordPos in_phase(Phase v) const { return with(&RecordPos::phase, v); }

 private:
  template <typename T>
  RecordPos with(T RecordPos::*field, T v) const {
    RecordPos p = *this;
    p.*field = v;
    return p;
  }
};

struct RecordBuf {
  std::vector<Builder> records;

  schema::Record::Builder add(const RecordPos& pos) {
    records.push_back(std::make_unique<capnp::MallocMessageBuilder>(512));
    auto r = records.back()->initRoot<schema::Record>();
    r.setStep(pos.step);
    r.setTask(pos.task);
    r.setScheme(pos.scheme);
    r.setRollout(pos.rollout);
    r.setTurn(pos.turn);
    r.setPhase(pos.phase);
    return r;
  }
};

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
    req.size = exp_.size == "full" ? SizeName::kFull : SizeName::kSmall;
    req.seed = eval_seed(key_.with("turn", turn));
    req.trials = exp_.trials;
    req.samples = exp_.timing_samples;
    TurnRecord rec;
    if (plan == nullptr) {
      rec.eval.evaluator = "reply";
      rec.eval.size = exp_.size;
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

inline void write_measurement(RecordBuf& buf, const RecordPos& pos, const EvalResult& eval) {
  auto r = buf.add(pos);
  to_measurement(eval, r.initMeasurement());
}

// backbone: the kind of the backbone that made the sample (Backbone::kind()).
inline void write_policy_sample(RecordBuf& buf, const RecordPos& pos, const PolicySample& s, bool greedy,
                                const Digest& plan, const RngKey& key, const std::string& backbone,
                                const Digest* request = nullptr) {
  auto r = buf.add(pos);
  auto b = r.initSample();
  b.setRole(schema::Role::POLICY);
  b.setBackbone(backbone);
  auto acts = b.initActions(static_cast<unsigned>(s.choices.size()));
  for (size_t i = 0; i < s.choices.size(); ++i) acts.set(static_cast<unsigned>(i), static_cast<uint32_t>(s.choices[i]));
  b.setLogProb(s.log_prob);
  b.setGreedy(greedy);
  if (plan != Digest()) {
    AddressBytes d(plan);
    b.setOutput(d.data());
  }
  if (request) {
    AddressBytes q(*request);
    b.setPrompt(q.data());
  }
  AddressBytes k(key.digest());
  b.setKey(k.data());
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
  VINCI_ASSIGN_OR_RETURN(Digest request, store.put("llm_request", c.request));
  auto r = buf.add(pos);
  auto l = r.initLlmReply();
  l.setRole(schema_role(c.role));
  l.setEndpoint(c.endpoint);
  l.setModel(c.model);
  AddressBytes q(request);
  l.setPrompt(q.data());
  if (c.failure.empty()) {
    VINCI_ASSIGN_OR_RETURN(Digest reply, store.put("llm_reply", c.reply));
    AddressBytes a(reply);
    l.setReply(a.data());
  }
  l.setFinishReason(c.finish_reason);
  l.setPromptTokens(c.prompt_tokens);
  l.setCompletionTokens(c.completion_tokens);
  l.setTemperature(c.temperature);
  l.setFailure(c.failure);
  AddressBytes k(c.key);
  l.setKey(k.data());
  l.setSampleIndex(sample_index);
  return request;
}

// A policy turn's records: the model call (when there was one), the sample, the measurement and
// the reward.
inline Status write_policy_turn(RecordBuf& buf, ObjectStore& store, const std::string& backbone, const RecordPos& pos,
                                const PolicyTurn& t, bool greedy, const RngKey& key);

inline void write_turn_reward(RecordBuf& buf, const RecordPos& pos, const TurnResult& t) {
  auto r = buf.add(pos);
  auto w = r.initReward();
  w.setValue(t.reward);
  w.setKind(schema::Reward::Kind::TURN);
  w.setSpeedup(t.speedup);
  w.setTimeCoverage(t.time_coverage);
  w.setCorrect(t.correct);
  w.setDecoy(t.decoy);
}

inline Status write_policy_turn(RecordBuf& buf, ObjectStore& store, const std::string& backbone, const RecordPos& pos,
                                const PolicyTurn& t, bool greedy, const RngKey& key) {
  std::optional<Digest> request;
  if (t.call) {
    VINCI_ASSIGN_OR_RETURN(request, write_llm_call(buf, store, pos, *t.call));
  }
  write_policy_sample(buf, pos, t.sample, greedy, t.plan_address, key, backbone, request ? &*request : nullptr);
  write_measurement(buf, pos, t.eval);
  write_turn_reward(buf, pos, t.result);
  return Status();
}

// pos: the task's position at the scheme (sample) being selected for.
inline void write_selection(RecordBuf& buf, const RecordPos& pos, const SchemeDecision& d, const SkillLibrary& library,
                            const Digest& query, const Digest& snapshot, const SelectionParams& params, bool greedy,
                            const RngKey& key, const std::string& backbone) {
  if (d.sampled) {
    auto r = buf.add(pos);
    auto b = r.initSample();
    b.setRole(schema::Role::SELECTION);
    b.setBackbone(backbone);
    auto acts = b.initActions(static_cast<unsigned>(d.sample.picked.size()));
    for (size_t i = 0; i < d.sample.picked.size(); ++i)
      acts.set(static_cast<unsigned>(i), static_cast<uint32_t>(d.sample.picked[i]));
    b.setLogProb(d.sample.log_prob);
    b.setGreedy(greedy);
    b.setSampleIndex(d.sample_index);
    AddressBytes k(key.digest());
    b.setKey(k.data());
  }
  auto r = buf.add(pos);
  auto s = r.initSelection();
  AddressBytes q(query), lib(snapshot);
  s.setQuery(q.data());
  auto cands = s.initCandidates(static_cast<unsigned>(d.recall.hits.size()));
  for (size_t i = 0; i < d.recall.hits.size(); ++i) {
    const Skill& sk = library.at(d.recall.hits[i].doc);
    cands[static_cast<unsigned>(i)].setName(sk.name);
    cands[static_cast<unsigned>(i)].setScore(d.recall.hits[i].score);
  }
  auto sel = s.initSelected(static_cast<unsigned>(d.selected.size()));
  for (size_t i = 0; i < d.selected.size(); ++i) sel.set(static_cast<unsigned>(i), d.selected[i]);
  s.setRandomFallback(d.recall.random_fallback);
  s.setReranked(params.mode == SelectionMode::kRerank);
  s.setSampleIndex(d.sample_index);
  s.setLibrarySnapshot(lib.data());
}

// One agent's advantage for one decision: the value trained on, the return it was computed from,
// the baseline subtracted and the scale applied (value = scale * (return - baseline), except
// where rejection sampling zeroes a policy turn), over a group of group_size decisions.
struct AdvantageRecord {
  schema::Role role = schema::Role::POLICY;
  double value = 0;
  double return_value = 0;
  double baseline = 0;
  double scale = 1;
  uint32_t group_size = 0;
  int32_t sample_index = -1;  // the selection or summary sample; -1 for policy turns
};

inline void write_advantage(RecordBuf& buf, const RecordPos& pos, const AdvantageRecord& adv) {
  auto r = buf.add(pos.in_phase(schema::Record::Phase::TRAIN));
  auto a = r.initAdvantage();
  a.setRole(adv.role);
  a.setValue(adv.value);
  a.setReturnValue(adv.return_value);
  a.setBaseline(adv.baseline);
  a.setScale(adv.scale);
  a.setGroupSize(adv.group_size);
  a.setSampleIndex(adv.sample_index);
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

inline void write_metric(RecordBuf& buf, int32_t step, const std::string& name, const std::string& split, int32_t level,
                         double threshold, const std::string& mode, const std::string& denominator, double value,
                         uint32_t num, uint32_t count) {
  auto r = buf.add(RecordPos::of_step(step, split == "eval"  ? schema::Record::Phase::EVAL
                                            : split == "tts" ? schema::Record::Phase::TTS
                                                             : schema::Record::Phase::TRAIN));
  auto m = r.initMetric();
  m.setName(name);
  m.setSplit(split);
  m.setLevel(level);
  m.setThreshold(threshold);
  m.setTurnMode(mode);
  m.setDenominator(denominator);
  m.setValue(value);
  m.setNumerator(num);
  m.setCount(count);
}

}  // namespace loop
}  // namespace vinci

#endif  // VINCI_HARNESS_LOOP_PARTS_H_

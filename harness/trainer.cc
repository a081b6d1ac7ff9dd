#include "harness/trainer.h"

#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <map>
#include <mutex>
#include <thread>

#include "agents/agents.h"
#include "agents/bm25.h"
#include "core/json_fields.h"
#include "core/text.h"
#include "gpu/codegen/codegen.h"
#include "gpu/knob_answer.h"
#include "gpu/model_plan.h"
#include "harness/checkpoints.h"
#include "harness/coldstart.h"
#include "harness/llm_agents.h"
#include "harness/loop_parts.h"
#include "harness/sim_agents.h"
#include "harness/sim_world.h"
#include "harness/tts.h"
#include "recorder/address.h"
#include "recorder/run.h"
#include "recorder/vinci.capnp.h"

namespace vinci {
namespace {

using namespace loop;

struct TaskWork {
  RecordBuf records;
  std::vector<Experience> experiences;
  std::vector<TrainSample> llm_samples;  // a language model's calls to train on (trainer.kind)
  std::optional<Skill> staged;
  double reward_sum = 0;
  uint32_t turns = 0, correct_turns = 0;
  double best_speedup = 0;
  bool triggered = false;
  uint32_t accepted = 0;
  uint64_t rollouts = 0, evals = 0;
};

struct StepContext {
  const Experiment* exp;
  Evaluator* evaluator;
  Backbone* backbone;               // the parameters trained and checkpointed (the sim network's)
  AgentModel* model;                // what answers the agents' questions
  ModelTrainer* trainer = nullptr;  // trains a language model (trainer.kind); null: none does
  ObjectStore* store;
  const SkillLibrary* library;
  Digest library_address;
  BackboneShape shape;
  SizeName size;
};

// One skill scheme: the selection decision (none for the null scheme) and the model call behind it.
struct Scheme {
  std::optional<SchemeDecision> decision;
  std::vector<const Skill*> skills;
  std::optional<LlmCall> call;  // a language model's selection call
};

// BM25 recall and the model's rerank for one scheme, recorded (the model call, the sample, the
// decision) into records.
Result<Scheme> choose_scheme(const StepContext& ctx, int32_t step, const Task& task, Bm25Index& index,
                             schema::Record::Phase phase, const RngKey& key, bool greedy, int32_t sample_index,
                             const Digest& query, RecordBuf* records) {
  const Experiment& exp = *ctx.exp;
  std::optional<SelectionAnswer> answer;
  auto rerank = [&](const std::vector<const Skill*>& candidates,
                    const std::vector<double>& scores) -> Result<SelectionSample> {
    SelectionQuestion q;
    q.task = &task;
    q.size = ctx.size;
    q.candidates = candidates;
    q.scores = scores;
    q.max_pick = exp.selection.max_skills;
    q.key = key;
    q.greedy = greedy;
    VINCI_ASSIGN_OR_RETURN(answer, ctx.model->select(q));
    SelectionSample s;
    s.picked = answer->picked;
    s.log_prob = answer->log_prob;
    return s;
  };
  VINCI_ASSIGN_OR_RETURN(
      SchemeDecision d, select_skills(*ctx.library, index, task.description, exp.selection, key, sample_index, rerank));
  if (answer) {
    d.input = std::move(answer->input);
    if (answer->call) {
      VINCI_RETURN_IF_ERROR(write_llm_call(*records, *ctx.store,
                                           RecordPos::of_task(step, task.id, phase).at_scheme(sample_index),
                                           *answer->call, sample_index)
                                .status());
    }
  }
  write_scheme_decision(*records, RecordPos::of_task(step, task.id, phase).at_scheme(sample_index), d, *ctx.library,
                        query, ctx.library_address, exp.selection, greedy, key, ctx.model->kind());
  Scheme s;
  s.skills = skills_named(*ctx.library, d.selected);
  s.decision = std::move(d);
  if (answer && answer->call) s.call = std::move(answer->call);
  return s;
}

// Asks the model for turn t's plan given the turns so far, and evaluates it.
Result<PolicyTurn> policy_turn(const StepContext& ctx, const Task& task, const std::vector<const Skill*>& skills,
                               const std::vector<PolicyTurn>& history, const RngKey& key, bool greedy,
                               const PlanTurnEvaluator& plans, int32_t t) {
  PolicyQuestion q;
  q.task = &task;
  q.size = ctx.size;
  q.skills = skills;
  q.history = &history;
  q.key = key;
  q.greedy = greedy;
  VINCI_ASSIGN_OR_RETURN(PolicyTurn turn, ctx.model->write_plan(q));
  VINCI_RETURN_IF_ERROR(plans.evaluate(t, &turn));
  return turn;
}

// `turns` turns of one rollout; the draw of turn t uses key.with("turn", t).
Result<std::vector<PolicyTurn>> rollout(const StepContext& ctx, const Task& task,
                                        const std::vector<const Skill*>& skills, int32_t turns, const RngKey& key,
                                        bool greedy) {
  PlanTurnEvaluator plans(*ctx.exp, task, *ctx.evaluator, *ctx.store, key);
  std::vector<PolicyTurn> out;
  for (int32_t t = 0; t < turns; ++t) {
    VINCI_ASSIGN_OR_RETURN(PolicyTurn turn, policy_turn(ctx, task, skills, out, key.with("turn", t), greedy, plans, t));
    out.push_back(std::move(turn));
  }
  return out;
}

std::vector<TurnResult> results_of(const std::vector<PolicyTurn>& turns) {
  std::vector<TurnResult> out;
  for (const auto& t : turns) out.push_back(t.result);
  return out;
}

// One verified skill candidate of a summary sample.
struct Candidate {
  int32_t sample = 0;
  Skill skill;
  VerificationVerdict verdict;
};

// The summary sample's records: the model call (when there was one) and the sample, whose output
// names the proposed skills (a JSONL object; none when every proposal was dropped).
Status write_summary_sample(const StepContext& ctx, int32_t step, const Task& task, int32_t scheme, int32_t rollout,
                            int32_t si, const SummaryAnswer& a, const RngKey& key, RecordBuf* records) {
  const RecordPos pos =
      RecordPos::of_task(step, task.id, schema::Record::Phase::TRAIN).at_scheme(scheme).at_rollout(rollout);
  std::optional<Digest> request;
  if (a.call) {
    VINCI_ASSIGN_OR_RETURN(request, write_llm_call(*records, *ctx.store, pos, *a.call, si));
  }
  SampleRecord s;
  s.role = schema::Role::SUMMARY;
  s.backbone = ctx.model->kind();
  // Actions: one include flag per active head, then the scope; none when there are no heads.
  if (!a.sample.include.empty()) {
    for (int32_t flag : a.sample.include) s.actions.push_back(static_cast<uint32_t>(flag));
    s.actions.push_back(static_cast<uint32_t>(a.sample.scope));
  }
  s.log_prob = a.sample.log_prob;
  s.sample_index = si;
  s.key = key.digest();
  if (request) s.prompt = *request;
  if (!a.skills.empty()) {
    SkillLibrary proposed;
    for (const Skill& skill : a.skills) proposed.add(skill);
    VINCI_ASSIGN_OR_RETURN(s.output, ctx.store->put("skill", proposed.to_jsonl()));
  }
  write_summary_sample(*records, pos, s);
  return Status();
}

// Verification of a proposed skill: one greedy turn-1 generation with the winning scheme's skills
// plus the new one, evaluated `runs` times, judged and recorded.
Result<VerificationVerdict> verify_skill(const StepContext& ctx, int32_t step, const Task& task,
                                         const std::vector<const Skill*>& scheme_skills, const Skill& skill,
                                         int32_t scheme, int32_t si, double turn1_speedup, const RngKey& vkey,
                                         TaskWork* work) {
  const Experiment& exp = *ctx.exp;
  // The verification's records sit at the candidate's sample index in the rollout slot.
  const RecordPos vpos =
      RecordPos::of_task(step, task.id, schema::Record::Phase::VERIFY).at_scheme(scheme).at_rollout(si);
  SkillLibrary one;
  one.add(skill);
  VINCI_ASSIGN_OR_RETURN(Digest skill_addr, ctx.store->put("skill", one.to_jsonl()));
  std::vector<const Skill*> injected = scheme_skills;
  injected.push_back(&skill);
  PolicyQuestion q;
  q.task = &task;
  q.size = ctx.size;
  q.skills = injected;
  q.key = vkey;
  q.greedy = true;
  VINCI_ASSIGN_OR_RETURN(PolicyTurn vt, ctx.model->write_plan(q));
  PlanTurnEvaluator plans(exp, task, *ctx.evaluator, *ctx.store, vkey);
  std::vector<TurnResult> runs;
  std::vector<EvalResult> evals;
  for (int32_t run = 0; run < exp.verification.runs; ++run) {
    VINCI_ASSIGN_OR_RETURN(TurnRecord rec, plans.evaluate(run, vt.plan ? &*vt.plan : nullptr, vt.reply_error));
    vt.plan_address = rec.plan;
    runs.push_back(turn_result(rec.eval, exp.reward));
    evals.push_back(std::move(rec.eval));
  }
  work->rollouts++;
  work->evals += runs.size();
  std::optional<Digest> request;
  if (vt.call) {
    VINCI_ASSIGN_OR_RETURN(request, write_llm_call(work->records, *ctx.store, vpos.at_turn(0), *vt.call));
  } else if (!vt.knowledge.empty()) {
    VINCI_ASSIGN_OR_RETURN(request, ctx.store->put("sim_knowledge", vt.knowledge));
  }
  write_policy_sample(work->records, vpos.at_turn(0), vt.sample, true, vt.plan_address, vkey, ctx.model->kind(),
                      request ? &*request : nullptr);
  for (int32_t run = 0; run < exp.verification.runs; ++run) {
    write_measurement(work->records, vpos.at_turn(run), evals[static_cast<size_t>(run)]);
  }
  VerificationVerdict verdict = judge_verification(runs, turn1_speedup, exp.verification);
  VerificationRecord v;
  v.skill_name = skill.name;
  v.skill = skill_addr;
  v.speedups = verdict.speedups;
  v.correct.assign(verdict.correct.begin(), verdict.correct.end());
  v.baseline_turn1_speedup = turn1_speedup;
  v.accepted = verdict.accepted;
  v.reason = verdict.reason;
  v.sample_index = si;
  write_verification(work->records, vpos, v);
  return verdict;
}

// One task's training step as it goes: its schemes, their rollouts and what the summary did.
struct TaskStep {
  TaskStep(const StepContext& c, int32_t s, const Task& t, TaskWork* w)
      : ctx(c),
        exp(*c.exp),
        step(s),
        task(t),
        key(RngKey::root(exp.seed).with("phase", "train").with("step", s).with("task", t.id)),
        work(w) {}

  const StepContext& ctx;
  const Experiment& exp;
  int32_t step;
  const Task& task;
  RngKey key;
  TaskWork* work;

  std::vector<Scheme> schemes;  // the sampled ones first (real_schemes of them), then the null scheme
  int32_t real_schemes = 0;
  std::vector<std::vector<std::vector<PolicyTurn>>> rollouts;  // [scheme][rollout][turn]
  // The triggering rollout with the highest best-turn speedup; -1: none triggered.
  int32_t win_scheme = -1, win_rollout = -1;
  double win_best = -1;
  std::vector<SummaryAnswer> answers;  // the summary samples of the winning rollout
  std::vector<double> summary_rewards;

  RecordPos at(schema::Record::Phase phase = schema::Record::Phase::TRAIN) const {
    return RecordPos::of_task(step, task.id, phase);
  }
};

// Policy rollouts of every scheme, and their records. They are independent (each keyed by its
// scheme and rollout) and their records are written in (scheme, rollout) order, so when
// evaluations go to a queue of workers (device.queue) a task's rollouts run at once: run.threads x
// schemes x rollouts evaluations in flight instead of run.threads, and not one record changes.
Status run_rollouts(TaskStep& ts) {
  const Experiment& exp = ts.exp;
  TaskWork* work = ts.work;
  const std::string backbone = ts.ctx.model->kind();
  const size_t per_scheme = static_cast<size_t>(exp.rollouts);
  const size_t n_rollouts = ts.schemes.size() * per_scheme;
  std::vector<std::vector<PolicyTurn>> done(n_rollouts);
  VINCI_RETURN_IF_ERROR(
      parallel_for(exp.queue.empty() ? 1 : static_cast<int32_t>(n_rollouts), n_rollouts, [&](size_t i) -> Status {
        size_t j = i / per_scheme;
        int32_t r = static_cast<int32_t>(i % per_scheme);
        RngKey key = ts.key.with("scheme", static_cast<int64_t>(j)).with("rollout", r);
        VINCI_ASSIGN_OR_RETURN(done[i], rollout(ts.ctx, ts.task, ts.schemes[j].skills, exp.turns, key, false));
        return Status();
      }));
  ts.rollouts.assign(ts.schemes.size(), {});
  for (size_t j = 0; j < ts.schemes.size(); ++j) {
    for (int32_t r = 0; r < exp.rollouts; ++r) {
      RngKey key = ts.key.with("scheme", static_cast<int64_t>(j)).with("rollout", r);
      auto turns = std::move(done[j * per_scheme + static_cast<size_t>(r)]);
      for (size_t t = 0; t < turns.size(); ++t) {
        int32_t sj = static_cast<int32_t>(j), tt = static_cast<int32_t>(t);
        VINCI_RETURN_IF_ERROR(write_policy_turn(work->records, *ts.ctx.store, backbone,
                                                ts.at().at_scheme(sj).at_rollout(r).at_turn(tt), turns[t], false,
                                                key.with("turn", tt)));
        work->reward_sum += turns[t].result.reward;
        work->turns++;
        if (turns[t].result.correct) work->correct_turns++;
      }
      work->rollouts++;
      work->evals += turns.size();
      ts.rollouts[j].push_back(std::move(turns));
    }
  }
  return Status();
}

// Finds the triggering rollout with the highest best-turn speedup across schemes.
void find_winner(TaskStep& ts) {
  for (size_t j = 0; j < ts.rollouts.size(); ++j) {
    for (size_t r = 0; r < ts.rollouts[j].size(); ++r) {
      std::vector<TurnResult> results = results_of(ts.rollouts[j][r]);
      double best = best_speedup(results);
      ts.work->best_speedup = std::max(ts.work->best_speedup, best);
      if (summary_triggers(results, ts.exp.trigger) && best > ts.win_best) {
        ts.win_best = best;
        ts.win_scheme = static_cast<int32_t>(j);
        ts.win_rollout = static_cast<int32_t>(r);
      }
    }
  }
  if (ts.win_scheme >= 0) ts.work->triggered = true;
}

// The summary samples of the winning rollout, each proposed skill verified; the fastest accepted
// skill is staged for the library. Sets answers and summary_rewards.
Status summarise_winner(TaskStep& ts) {
  const Experiment& exp = ts.exp;
  TaskWork* work = ts.work;
  const std::vector<PolicyTurn>& win = ts.rollouts[ts.win_scheme][ts.win_rollout];
  const std::vector<const Skill*>& injected = ts.schemes[ts.win_scheme].skills;
  // The best turn: the correct one with the highest speedup (the first on ties).
  size_t best_t = 0;
  double best_s = -1;
  for (size_t t = 0; t < win.size(); ++t) {
    const TurnResult& res = win[t].result;
    if (res.compiled && res.correct && !res.decoy && res.speedup > best_s) {
      best_s = res.speedup;
      best_t = t;
    }
  }
  RngKey skey = ts.key.with("purpose", "summary");
  std::vector<Candidate> candidates;
  for (int32_t si = 0; si < exp.summary_samples; ++si) {
    SummaryQuestion q;
    q.task = &ts.task;
    q.size = ts.ctx.size;
    q.injected = injected;
    q.turns = &win;
    q.best_turn = best_t;
    q.turn1_speedup = win[0].result.speedup;
    q.best_speedup = ts.win_best;
    q.sample_index = si;
    q.key = skey.with("summary_sample", si);
    VINCI_ASSIGN_OR_RETURN(SummaryAnswer a, ts.ctx.model->summarise(q));
    VINCI_RETURN_IF_ERROR(
        write_summary_sample(ts.ctx, ts.step, ts.task, ts.win_scheme, ts.win_rollout, si, a, q.key, &work->records));
    for (const Skill& skill : a.skills) {
      VINCI_ASSIGN_OR_RETURN(VerificationVerdict v,
                             verify_skill(ts.ctx, ts.step, ts.task, injected, skill, ts.win_scheme, si, q.turn1_speedup,
                                          ts.key.with("verify", si), work));
      candidates.push_back(Candidate{si, skill, std::move(v)});
    }
    ts.answers.push_back(std::move(a));
  }
  std::vector<VerificationVerdict> verdicts;
  for (const auto& c : candidates) verdicts.push_back(c.verdict);
  auto staged = pick_staged(verdicts);
  // A sample's reward is the best verified speedup among its skills (0 when none passed).
  ts.summary_rewards.assign(ts.answers.size(), 0.0);
  for (const auto& c : candidates) {
    if (!c.verdict.accepted) continue;
    work->accepted++;
    double& r = ts.summary_rewards[static_cast<size_t>(c.sample)];
    r = std::max(r, c.verdict.worst_speedup);
  }
  if (staged) {
    const Candidate& c = candidates[*staged];
    work->staged = c.skill;
    work->staged->verify_speedup = c.verdict.worst_speedup;
    // The staged flag goes on a record of its own kind: the verification records above say
    // accepted; which one enters the library is this decision.
    write_staged_skill(work->records,
                       ts.at(schema::Record::Phase::VERIFY).at_scheme(ts.win_scheme).at_rollout(c.sample),
                       work->staged->name, c.verdict.worst_speedup, c.sample);
  }
  return Status();
}

// A language model's call, with its advantage, for the trainer (when one trains the model and the
// experiment trains the call's role).
void add_llm_sample(TaskStep& ts, const std::optional<LlmCall>& call, double advantage, double scale) {
  if (ts.ctx.trainer == nullptr || !call || !trains_role(ts.exp, call->role)) return;
  if (std::optional<TrainSample> s = train_sample(*call, advantage, scale)) ts.work->llm_samples.push_back(*s);
}

// Selection rewards and advantages (only sampled schemes are trained).
void train_selection(TaskStep& ts) {
  const Experiment& exp = ts.exp;
  std::vector<double> scheme_rewards;
  for (int32_t j = 0; j < ts.real_schemes; ++j) {
    std::vector<std::vector<double>> rr;
    for (const auto& ro : ts.rollouts[j]) {
      std::vector<double> rs;
      for (const auto& t : ro) rs.push_back(t.result.reward);
      rr.push_back(rs);
    }
    scheme_rewards.push_back(scheme_reward(rr));
    RewardRecord w;
    w.kind = schema::Reward::Kind::SCHEME;
    w.value = scheme_rewards.back();
    w.sample_index = j;
    write_reward(ts.work->records, ts.at().at_scheme(j), w);
  }
  std::vector<double> adv = selection_advantages(scheme_rewards, exp.selection_scale);
  for (int32_t j = 0; j < ts.real_schemes; ++j) {
    double base = scheme_rewards[j] - (exp.selection_scale != 0 ? adv[j] / exp.selection_scale : 0);
    write_advantage(ts.work->records, ts.at().at_scheme(j),
                    {schema::Role::SELECTION, adv[j], scheme_rewards[j], base, exp.selection_scale,
                     static_cast<uint32_t>(ts.real_schemes), j});
    const auto& d = *ts.schemes[j].decision;
    if (d.sampled) {
      add_llm_sample(ts, ts.schemes[j].call, adv[j], exp.selection_scale);
      Experience e;
      e.role = AgentRole::kSelection;
      e.advantage = adv[j];
      e.selection_input = d.input;
      e.selection = d.sample;
      ts.work->experiences.push_back(std::move(e));
    }
  }
}

// Summary rewards and advantages, at the winning rollout.
void train_summary(TaskStep& ts) {
  const Experiment& exp = ts.exp;
  const RecordPos win_pos = ts.at().at_scheme(ts.win_scheme).at_rollout(ts.win_rollout);
  std::vector<double> adv = summary_advantages(ts.summary_rewards, exp.summary_scale);
  for (size_t i = 0; i < ts.answers.size(); ++i) {
    int32_t si = static_cast<int32_t>(i);
    const double reward = ts.summary_rewards[i];
    RewardRecord w;
    w.kind = schema::Reward::Kind::SUMMARY;
    w.value = reward;
    w.speedup = reward;
    w.sample_index = si;
    write_reward(ts.work->records, win_pos, w);
    double base = reward - (exp.summary_scale != 0 ? adv[i] / exp.summary_scale : 0);
    write_advantage(
        ts.work->records, win_pos,
        {schema::Role::SUMMARY, adv[i], reward, base, exp.summary_scale, static_cast<uint32_t>(ts.answers.size()), si});
    add_llm_sample(ts, ts.answers[i].call, adv[i], exp.summary_scale);
    Experience e;
    e.role = AgentRole::kSummary;
    e.advantage = adv[i];
    e.summary_input = ts.answers[i].input;
    e.summary = ts.answers[i].sample;
    ts.work->experiences.push_back(std::move(e));
  }
}

// Policy: TRLOO over every rollout of the task (all schemes), per turn.
void train_policy(TaskStep& ts) {
  const Experiment& exp = ts.exp;
  std::vector<std::vector<double>> returns;
  for (const auto& scheme_rollouts : ts.rollouts) {
    for (const auto& ro : scheme_rollouts) {
      std::vector<double> rs;
      for (const auto& t : ro) rs.push_back(t.result.reward);
      returns.push_back(returns_to_go(rs, exp.gamma));
    }
  }
  auto adv = trloo_advantages(returns, exp.normalize_advantages);
  size_t flat = 0;
  for (size_t j = 0; j < ts.rollouts.size(); ++j) {
    for (size_t r = 0; r < ts.rollouts[j].size(); ++r, ++flat) {
      for (size_t t = 0; t < ts.rollouts[j][r].size(); ++t) {
        const PolicyTurn& turn = ts.rollouts[j][r][t];
        int32_t sj = static_cast<int32_t>(j), rr = static_cast<int32_t>(r), tt = static_cast<int32_t>(t);
        bool kept = true;
        if (exp.rejection_sampling && turn.result.correct) {
          kept = keep_turn(turn.result.time_coverage, ts.key.with("scheme", sj).with("rollout", rr).with("turn", tt));
        }
        write_advantage(ts.work->records, ts.at().at_scheme(sj).at_rollout(rr).at_turn(tt),
                        {schema::Role::POLICY, kept ? adv[flat][t] : 0.0, returns[flat][t],
                         returns[flat][t] - adv[flat][t], kept ? 1.0 : 0.0, static_cast<uint32_t>(returns.size()), -1});
        if (!kept) continue;
        add_llm_sample(ts, turn.call, adv[flat][t], 1.0);
        Experience e;
        e.role = AgentRole::kPolicy;
        e.advantage = adv[flat][t];
        e.policy_input = turn.input;
        e.policy = turn.sample;
        ts.work->experiences.push_back(std::move(e));
      }
    }
  }
}

// One task of a training step: selection (k sampled schemes, then the null scheme), rollouts,
// the summary of the winning rollout, then every agent's rewards and advantages.
Status train_task(const StepContext& ctx, int32_t step, const Task& task, Bm25Index& index, TaskWork* work) {
  const Experiment& exp = *ctx.exp;
  TaskStep ts(ctx, step, task, work);
  VINCI_ASSIGN_OR_RETURN(Digest query, ctx.store->put("prompt", task.description));
  ts.real_schemes = exp.selection.mode == SelectionMode::kNone ? 0 : exp.schemes;
  for (int32_t i = 0; i < ts.real_schemes; ++i) {
    VINCI_ASSIGN_OR_RETURN(Scheme s, choose_scheme(ctx, step, task, index, schema::Record::Phase::TRAIN,
                                                   ts.key.with("selection", i), false, i, query, &work->records));
    ts.schemes.push_back(std::move(s));
  }
  if (exp.null_scheme || ts.schemes.empty()) ts.schemes.push_back(Scheme{});

  VINCI_RETURN_IF_ERROR(run_rollouts(ts));
  find_winner(ts);
  if (exp.summary_enabled && ts.win_scheme >= 0) VINCI_RETURN_IF_ERROR(summarise_winner(ts));
  if (exp.selection.mode == SelectionMode::kRerank && ts.real_schemes > 0) train_selection(ts);
  if (!ts.answers.empty()) train_summary(ts);
  train_policy(ts);
  return Status();
}

// The skills injected on a held-out task (evaluation and test-time scaling): those one recorded
// selection chose (none when evaluation injects no skills).
Result<std::vector<const Skill*>> held_out_skills(const StepContext& ctx, int32_t step, const Task& task,
                                                  Bm25Index& index, schema::Record::Phase phase, const RngKey& key,
                                                  RecordBuf* records) {
  const Experiment& exp = *ctx.exp;
  VINCI_ASSIGN_OR_RETURN(Digest query, ctx.store->put("prompt", task.description));
  if (!exp.eval_inject_skills || exp.selection.mode == SelectionMode::kNone) return std::vector<const Skill*>{};
  VINCI_ASSIGN_OR_RETURN(Scheme s, choose_scheme(ctx, step, task, index, phase, key.with("selection", 0),
                                                 exp.eval_greedy, 0, query, records));
  return s.skills;
}

// Greedy (or sampled) evaluation of one held-out task: one selection, one rollout.
Status eval_task(const StepContext& ctx, int32_t step, const Task& task, Bm25Index& index, RecordBuf* records,
                 TaskTurns* outcome) {
  const Experiment& exp = *ctx.exp;
  const auto phase = schema::Record::Phase::EVAL;
  RngKey key = RngKey::root(exp.seed).with("phase", "eval").with("step", step).with("task", task.id);
  VINCI_ASSIGN_OR_RETURN(auto skills, held_out_skills(ctx, step, task, index, phase, key, records));
  RngKey rkey = key.with("rollout", 0);
  VINCI_ASSIGN_OR_RETURN(auto turns, rollout(ctx, task, skills, exp.eval_turns, rkey, exp.eval_greedy));
  outcome->task = task.id;
  outcome->level = task.level;
  for (size_t t = 0; t < turns.size(); ++t) {
    int32_t tt = static_cast<int32_t>(t);
    VINCI_RETURN_IF_ERROR(
        write_policy_turn(*records, *ctx.store, ctx.model->kind(),
                          RecordPos::of_task(step, task.id, phase).at_scheme(0).at_rollout(0).at_turn(tt), turns[t],
                          exp.eval_greedy, rkey.with("turn", tt)));
    const TurnResult& r = turns[t].result;
    outcome->turns.push_back({r.compiled, r.correct, r.decoy, r.speedup, r.time_coverage});
  }
  return Status();
}

using HeldOutTaskFn = Status (*)(const StepContext&, int32_t, const Task&, Bm25Index&, RecordBuf*, TaskTurns*);

// The held-out tasks through task_fn (eval_task or tts_task) in parallel, their records written
// in task order, then fast_p of every turn mode and denominator, recorded as metrics of `split`.
Result<std::vector<FastP>> held_out_pass(const StepContext& ctx, int32_t step, const std::vector<const Task*>& tasks,
                                         const Bm25Index& index, RecordSink& sink, TrainerOutput* out,
                                         const std::string& split, HeldOutTaskFn task_fn) {
  const Experiment& exp = *ctx.exp;
  std::vector<RecordBuf> bufs(tasks.size());
  std::vector<TaskTurns> outcomes(tasks.size());
  VINCI_RETURN_IF_ERROR(parallel_for(exp.threads, tasks.size(), [&](size_t i) {
    Bm25Index local = index;
    return task_fn(ctx, step, *tasks[i], local, &bufs[i], &outcomes[i]);
  }));
  for (auto& b : bufs) VINCI_RETURN_IF_ERROR(flush(b, sink));
  for (const auto& o : outcomes) {
    out->rollouts++;
    out->turn_evals += o.turns.size();
  }
  // The records count speedup >= p (the log format's definition, so recorded runs replay
  // bit-exactly); what the run reports uses the config's comparison (by default KernelBench's
  // speedup > p), computed from the same outcomes.
  std::vector<FastP> all;
  RecordBuf metrics;
  for (TurnMode mode : {TurnMode::kLast, TurnMode::kBest}) {
    for (Denominator den : {Denominator::kAll, Denominator::kCorrect}) {
      for (const FastP& f : fast_p(outcomes, exp.thresholds, mode, den, exp.fast_p_compare)) all.push_back(f);
      for (const FastP& f : fast_p(outcomes, exp.thresholds, mode, den, FastPCompare::kInclusive)) {
        write_metric(metrics, step,
                     {"fast_p", split, f.level, f.threshold, mode == TurnMode::kLast ? "last" : "best",
                      den == Denominator::kAll ? "all" : "correct", f.value(), f.numerator, f.count});
      }
    }
  }
  VINCI_RETURN_IF_ERROR(flush(metrics, sink));
  return all;
}

Result<EvalPoint> evaluate_all(const StepContext& ctx, int32_t step, const std::vector<const Task*>& tasks,
                               const Bm25Index& index, RecordSink& sink, const ProgressFn& progress, int64_t* done,
                               int64_t total, TrainerOutput* out) {
  EvalPoint point;
  point.step = step;
  VINCI_ASSIGN_OR_RETURN(point.fast_p, held_out_pass(ctx, step, tasks, index, sink, out, "eval", eval_task));
  *done += 1;
  if (progress) {
    const FastP* f = nullptr;
    for (const auto& p : point.fast_p) {
      if (p.level == 0 && p.mode == TurnMode::kLast && p.denominator == Denominator::kAll && p.threshold == 1.2) f = &p;
    }
    char line[160];
    std::snprintf(line, sizeof line, "eval before step %d: fast_1.2 (last turn, all levels) %.3f", step,
                  f ? f->value() : 0.0);
    progress(*done, total, line);
  }
  return point;
}

// Test-time scaling on one held-out task (harness/tts.h): iterations of turns, each iteration after
// the first continuing from the best window of the turns so far (the model sees that window as its
// history).
Status tts_task(const StepContext& ctx, int32_t step, const Task& task, Bm25Index& index, RecordBuf* records,
                TaskTurns* outcome) {
  const Experiment& exp = *ctx.exp;
  const auto phase = schema::Record::Phase::TTS;
  RngKey key = RngKey::root(exp.seed).with("phase", "tts").with("task", task.id);
  VINCI_ASSIGN_OR_RETURN(auto skills, held_out_skills(ctx, step, task, index, phase, key, records));
  PlanTurnEvaluator plans(exp, task, *ctx.evaluator, *ctx.store, key);
  std::vector<PolicyTurn> all;      // every turn, over all iterations
  std::vector<PolicyTurn> history;  // what the next turn continues
  std::vector<double> rewards;
  outcome->task = task.id;
  outcome->level = task.level;
  for (int32_t it = 0; it < exp.tts.iterations; ++it) {
    if (it > 0) {
      Window w = best_window(rewards, exp.tts.window);
      write_tts_window(*records, RecordPos::of_task(step, task.id, phase).at_scheme(0).at_rollout(it - 1),
                       {it - 1, w.start, w.length, w.reward_sum});
      history.assign(all.begin() + w.start, all.begin() + w.start + w.length);
    }
    for (int32_t t = 0; t < exp.tts.turns; ++t) {
      int32_t g = static_cast<int32_t>(all.size());
      RngKey tkey = key.with("turn", g);
      VINCI_ASSIGN_OR_RETURN(PolicyTurn turn, policy_turn(ctx, task, skills, history, tkey, exp.tts.greedy, plans, g));
      VINCI_RETURN_IF_ERROR(write_policy_turn(
          *records, *ctx.store, ctx.model->kind(),
          RecordPos::of_task(step, task.id, phase).at_scheme(0).at_rollout(it).at_turn(g), turn, exp.tts.greedy, tkey));
      const TurnResult& tr = turn.result;
      outcome->turns.push_back({tr.compiled, tr.correct, tr.decoy, tr.speedup, tr.time_coverage});
      rewards.push_back(tr.reward);
      history.push_back(turn);
      all.push_back(std::move(turn));
    }
  }
  return Status();
}

// The model a language model's trainer has produced so far.
struct ModelState {
  std::string adapter;  // "" : the base model
  std::string model;    // the name requests use
};

// One update of a language model: the request, the trainer's reply, the ModelUpdate record (at
// the step's position; the cold start's at step -1), and the model the next calls ask for. A
// reply that the log does not hold while verifying an unfinished run (NotFound) keeps the model;
// so does a failed update (a non-finite loss), which is recorded with the trainer's reason.
Result<TrainerReply> update_model(const StepContext& ctx, RecordSink& sink, const std::string& kind, int32_t step,
                                  std::vector<TrainSample> samples, TrainPoint* point, ModelState* state) {
  const Experiment& exp = *ctx.exp;
  RngKey key = RngKey::root(exp.seed).with("purpose", "trainer").with("kind", kind).with("step", step);
  std::string body = update_request_body(exp, kind, step, state->adapter, key, samples);
  Result<TrainerReply> reply = ctx.trainer->update(kind, step, body);
  if (!reply.ok() && reply.status().code() == StatusCode::kNotFound) {
    TrainerReply keep;
    keep.model = state->model;
    keep.adapter = state->adapter;
    return keep;
  }
  if (!reply.ok()) return reply.status();
  VINCI_ASSIGN_OR_RETURN(Digest request, ctx.store->put("trainer_update", body));
  VINCI_ASSIGN_OR_RETURN(Digest reply_addr, ctx.store->put("trainer_reply", reply->record));
  ModelUpdateRecord u;
  u.trainer = ctx.trainer->kind();
  u.endpoint = ctx.trainer->endpoint();
  u.kind = kind;
  u.base_model = exp.llm.model;
  u.parent = state->adapter;
  const bool failed = !reply->failure.empty();
  if (failed) {
    reply->adapter = state->adapter;
    reply->model = state->model;
  }
  u.adapter = reply->adapter;
  u.model = reply->model;
  u.loss = reply->loss;
  u.failure = reply->failure;
  u.prompt_tokens = reply->prompt_tokens;
  u.completion_tokens = reply->completion_tokens;
  u.samples = static_cast<uint32_t>(samples.size());
  for (AgentRole r : trained_roles(exp)) u.roles.push_back(static_cast<schema::Role>(r));
  u.request = request;
  u.reply = reply_addr;
  RecordBuf b;
  write_model_update(b, step < 0 ? RecordPos::of_step(-1, schema::Record::Phase::COLDSTART) : RecordPos::of_step(step),
                     u);
  VINCI_RETURN_IF_ERROR(flush(b, sink));
  state->adapter = reply->adapter;
  state->model = reply->model;
  ctx.model->use_model(reply->model);
  if (auto* external = dynamic_cast<ExternalModelParameters*>(ctx.backbone)) {
    external->use_model(reply->model, reply->adapter);
  }
  reply->samples = u.samples;  // what was sent, whatever the trainer counted
  if (point) {
    point->model = reply->model;
    point->update_failure = reply->failure;
    point->trained_samples = u.samples;
    point->update_seconds = reply->seconds;
  }
  return reply;
}

// Answers each call with the text set before it: the cold start's examples, rendered as the calls
// the model will be asked, with the answers it should give.
class TeacherTransport : public ChatTransport {
 public:
  void set_answer(std::string text) { answer_ = std::move(text); }
  Result<ChatOutcome> complete(const std::string& body, const RngKey&) override {
    nlohmann::json request = nlohmann::json::parse(body, nullptr, false);
    nlohmann::json message = {{"role", "assistant"}, {"content", answer_}};
    nlohmann::json choice = {{"index", 0}, {"finish_reason", "stop"}, {"message", message}};
    nlohmann::json reply = {{"model", text_field(request, "model")}, {"choices", nlohmann::json::array({choice})}};
    ChatOutcome out;
    VINCI_ASSIGN_OR_RETURN(out.record, canonical_chat_reply(reply.dump()));
    VINCI_ASSIGN_OR_RETURN(ChatReply parsed, parse_chat_reply(out.record));
    out.ok = true;
    out.body = out.record;
    out.reply = std::move(parsed);
    return out;
  }

 private:
  std::string answer_;
};

// A setting as the policy answers it: the knobs block, or the generator's plan in the model-facing
// format.
Result<std::string> policy_answer_text(const Experiment& exp, const Task& task,
                                       const std::map<std::string, std::string>& values) {
  if (exp.policy_format == PolicyFormat::kKnobs) return render_knob_answer(task, values);
  VINCI_ASSIGN_OR_RETURN(Plan plan, generate_plan(task, values));
  return render_model_plan(plan);
}

std::string skills_answer_text(const char* key, const nlohmann::json& list) {
  return "```json\n" + nlohmann::json{{key, list}}.dump() + "\n```";
}

// The cold start's examples as supervised samples for a language model: per kept trajectory the
// selection (the BM25 candidates -> those agreeing with the best setting), every policy turn (with
// its real history -> the best setting) and the summary (the trajectory -> the distilled skill),
// each rendered by the run's own agent model as the request it sends, answered by a teacher.
Result<std::vector<TrainSample>> cold_start_samples(const StepContext& ctx, const TaskSuite& suite,
                                                    const SkillLibrary& library,
                                                    const std::vector<ColdStartExample>& examples) {
  const Experiment& exp = *ctx.exp;
  auto* llm = dynamic_cast<LlmAgentModel*>(ctx.model);
  if (llm == nullptr) return failed_precondition("the cold start's text examples need a language model");
  TeacherTransport teacher;
  std::unique_ptr<LlmAgentModel> model = llm->with_transport(teacher);
  std::vector<TrainSample> out;
  auto add = [&](const std::optional<LlmCall>& call) {
    if (!call || !trains_role(exp, call->role)) return;
    if (auto s = train_sample(*call, 1.0, 1.0)) out.push_back(std::move(*s));
  };
  for (size_t i = 0; i < examples.size(); ++i) {
    const ColdStartExample& x = examples[i];
    const Task* task = suite.find(x.task);
    if (task == nullptr) return internal_error("cold start example of unknown task " + x.task);
    RngKey key = RngKey::root(exp.seed).with("phase", "coldstart-sft").with("example", static_cast<int64_t>(i));
    std::vector<const Skill*> chosen;
    if (!x.picked.empty()) {
      SelectionQuestion q;
      q.task = task;
      q.size = ctx.size;
      for (const std::string& name : x.candidates) q.candidates.push_back(library.find(name));
      q.scores = x.scores;
      q.max_pick = exp.selection.max_skills;
      q.key = key.with("role", "selection");
      nlohmann::json picked = nlohmann::json::array();
      for (int32_t p : x.picked) {
        picked.push_back({{"name", x.candidates[static_cast<size_t>(p)]}});
        chosen.push_back(q.candidates[static_cast<size_t>(p)]);
      }
      teacher.set_answer(skills_answer_text("selected_skills", picked));
      VINCI_ASSIGN_OR_RETURN(SelectionAnswer a, model->select(q));
      add(a.call);
    }
    VINCI_ASSIGN_OR_RETURN(std::string best,
                           policy_answer_text(exp, *task, x.settings[static_cast<size_t>(x.best_turn)]));
    std::vector<PolicyTurn> history;
    for (size_t t = 0; t < x.settings.size(); ++t) {
      PolicyQuestion q;
      q.task = task;
      q.size = ctx.size;
      q.skills = chosen;
      q.history = &history;
      q.key = key.with("turn", static_cast<int64_t>(t));
      teacher.set_answer(best);
      VINCI_ASSIGN_OR_RETURN(PolicyTurn answer, model->write_plan(q));
      add(answer.call);
      // What the trajectory really did at turn t is the next turn's history.
      PolicyTurn done;
      VINCI_ASSIGN_OR_RETURN(done.reply_text, policy_answer_text(exp, *task, x.settings[t]));
      VINCI_ASSIGN_OR_RETURN(Plan plan, generate_plan(*task, x.settings[t]));
      done.plan = std::move(plan);
      done.eval = x.evals[t];
      done.result = x.results[t];
      history.push_back(std::move(done));
    }
    if (x.skill) {
      SummaryQuestion q;
      q.task = task;
      q.size = ctx.size;
      q.injected = chosen;
      q.turns = &history;
      q.best_turn = static_cast<size_t>(x.best_turn);
      q.turn1_speedup = x.results[0].speedup;
      q.best_speedup = x.results[static_cast<size_t>(x.best_turn)].speedup;
      q.key = key.with("role", "summary");
      nlohmann::json skill = {{"name", x.skill->name},
                              {"description", x.skill->description},
                              {"scope", x.skill->scope},
                              {"tags", x.skill->tags},
                              {"content", x.skill->content}};
      teacher.set_answer(skills_answer_text("new_skills", nlohmann::json::array({skill})));
      VINCI_ASSIGN_OR_RETURN(SummaryAnswer a, model->summarise(q));
      add(a.call);
    }
  }
  return out;
}

// The checkpoint record of the parameters step 0 starts from.
Status write_start_checkpoint(Backbone& backbone, RecordSink& sink, const std::string& origin,
                              const RunCheckpoint* source, const std::string& source_run) {
  VINCI_ASSIGN_OR_RETURN(std::string bytes, backbone.checkpoint());
  VINCI_ASSIGN_OR_RETURN(Digest addr, sink.store().put("checkpoint", bytes));
  CheckpointRecord c;
  c.for_step = 0;
  c.digest = backbone.parameter_digest();
  c.address = addr;
  c.size = bytes.size();
  c.origin = origin;
  if (source) {
    c.source_run = source_run;
    c.source_run_digest = source->history;
    c.source_step = source->step;
  }
  RecordBuf b;
  write_checkpoint(b, RecordPos::of_step(-1), c);
  return flush(b, sink);
}

}  // namespace

TaskSplit split_tasks(const TaskSuite& suite, const Experiment& exp) {
  TaskSplit split;
  for (int64_t level : exp.levels) {
    std::vector<const Task*> tasks;
    for (const Task* t : suite.at_level(static_cast<int>(level))) {
      std::string set = t->set_name();
      if (exp.task_set == TaskSet::kKernelbench && set.rfind("kernelbench", 0) != 0) continue;
      if (exp.task_set == TaskSet::kUnflagged && set != "kernelbench") continue;
      if (!exp.task_ids.empty() && std::find(exp.task_ids.begin(), exp.task_ids.end(), t->id) == exp.task_ids.end())
        continue;
      tasks.push_back(t);
    }
    std::sort(tasks.begin(), tasks.end(), [](const Task* a, const Task* b) { return a->id < b->id; });
    if (exp.sample_per_level > 0 && static_cast<int64_t>(tasks.size()) > exp.sample_per_level) {
      std::vector<std::pair<uint64_t, const Task*>> keyed;
      for (const Task* t : tasks)
        keyed.emplace_back(Stream(RngKey::root(exp.split_seed).with("sample", t->id)).next_u64(), t);
      std::sort(keyed.begin(), keyed.end(), [](const auto& a, const auto& b) {
        return a.first != b.first ? a.first < b.first : a.second->id < b.second->id;
      });
      tasks.clear();
      for (int64_t i = 0; i < exp.sample_per_level; ++i) tasks.push_back(keyed[static_cast<size_t>(i)].second);
      std::sort(tasks.begin(), tasks.end(), [](const Task* a, const Task* b) { return a->id < b->id; });
    }
    if (exp.max_tasks_per_level > 0 && static_cast<int64_t>(tasks.size()) > exp.max_tasks_per_level) {
      tasks.resize(static_cast<size_t>(exp.max_tasks_per_level));
    }
    std::vector<std::pair<uint64_t, const Task*>> keyed;
    for (const Task* t : tasks) {
      keyed.emplace_back(Stream(RngKey::root(exp.split_seed).with("split", t->id)).next_u64(), t);
    }
    std::sort(keyed.begin(), keyed.end(), [](const auto& a, const auto& b) {
      return a.first != b.first ? a.first < b.first : a.second->id < b.second->id;
    });
    size_t n_eval = static_cast<size_t>(std::ceil(exp.eval_share * static_cast<double>(keyed.size())));
    for (size_t i = 0; i < keyed.size(); ++i) {
      (i < n_eval ? split.eval : split.train).push_back(keyed[i].second);
    }
  }
  auto by_id = [](const Task* a, const Task* b) { return a->id < b->id; };
  std::sort(split.train.begin(), split.train.end(), by_id);
  std::sort(split.eval.begin(), split.eval.end(), by_id);
  return split;
}

Status check_task_split(const TaskSuite& suite, const Experiment& exp) {
  if (exp.steps <= 0) return Status();
  TaskSplit split = split_tasks(suite, exp);
  if (!split.train.empty()) return Status();
  return invalid_argument(
      exp.config_path +
      ": no training tasks: keys 'tasks.levels', 'tasks.set', 'tasks.ids', 'tasks.max_per_level' "
      "and 'tasks.sample_per_level' select " +
      std::to_string(split.eval.size()) + " task(s) and 'tasks.eval_share' = " + format_number("%g", exp.eval_share) +
      " holds out all of them; expected at least one " + "training task for loop.steps = " + std::to_string(exp.steps));
}

namespace {

// One experiment's run: what its stages share. The stages, in order: the prompt templates, the
// start (a checkpoint, the cold start), then per step the held-out evaluation when due and the
// training step; after the last step the final evaluation and test-time scaling.
struct RunState {
  const Experiment& exp;
  const TaskSuite& suite;
  Backbone& backbone;
  RecordSink& sink;
  const ProgressFn& progress;
  ModelTrainer* trainer;
  StepContext ctx;
  TaskSplit split;
  TrainerOutput out;
  ModelState model_state;
  std::optional<Bm25Index> index;  // over out.library, from the start on
  int64_t done = 0, total = 0;
  bool tts = false;

  void report(const std::string& line) {
    if (progress) progress(done, total, line);
  }
};

// The library as step for_step sees it, recorded as a snapshot before that step.
Result<Digest> snapshot_library(RunState& r, int32_t for_step, const std::vector<std::string>& added) {
  VINCI_ASSIGN_OR_RETURN(Digest addr, r.ctx.store->put("library", r.out.library.canonical_bytes()));
  RecordBuf b;
  write_library_snapshot(b, RecordPos::of_step(for_step - 1),
                         {for_step, addr, static_cast<uint32_t>(r.out.library.size()), added});
  VINCI_RETURN_IF_ERROR(flush(b, r.sink));
  return addr;
}

std::string cold_start_line(const TrainerOutput& out) {
  const ColdStartPoint& p = *out.coldstart;  // REQUIRES: the cold start ran
  char line[240];
  if (!out.coldstart_failure.empty()) {
    std::snprintf(line, sizeof line, "cold start: %u/%u trajectories kept, %zu skills; the trainer's update failed",
                  p.kept, p.trajectories, p.added.size());
    return std::string(line) + " (" + out.coldstart_failure + "): model " + out.coldstart_model + " kept";
  }
  if (out.coldstart_model.empty()) {
    std::snprintf(line, sizeof line,
                  "cold start: %u/%u trajectories kept, %zu skills, cross-entropy "
                  "(selection, policy, summary) %.3f %.3f %.3f -> %.3f %.3f %.3f",
                  p.kept, p.trajectories, p.added.size(), p.before.mean[0], p.before.mean[1], p.before.mean[2],
                  p.after.mean[0], p.after.mean[1], p.after.mean[2]);
  } else {
    std::snprintf(line, sizeof line,
                  "cold start: %u/%u trajectories kept, %zu skills; the trainer fitted %u examples in %.1f s "
                  "(loss %.4g): model %s",
                  p.kept, p.trajectories, p.added.size(), out.coldstart_samples, out.coldstart_seconds,
                  out.coldstart_loss, out.coldstart_model.c_str());
  }
  return line;
}

// Where step 0 starts: the parameters of backbone.init_run's checkpoint or the initial ones, then
// the cold start when enabled (a language model's is fitted by its trainer, on the examples as
// text), recorded as the start checkpoint with checkpoints on.
Status start_stage(RunState& r, Evaluator& evaluator, const SkillLibrary& seed_library) {
  const Experiment& exp = r.exp;
  r.out.start_origin = "init";
  std::optional<RunCheckpoint> source;
  if (!exp.init_run.empty()) {
    std::string dir = resolve_init_run(exp.init_run, exp.out_root);
    VINCI_ASSIGN_OR_RETURN(source, find_run_checkpoint(dir, exp.init_step));
    VINCI_RETURN_IF_ERROR(r.backbone.load_checkpoint(source->bytes));
    if (r.backbone.parameter_digest() != source->digest) {
      return mismatch("backbone.init_run: the loaded checkpoint's parameter digest " +
                      r.backbone.parameter_digest().hex() + " differs from the recorded " + source->digest.hex());
    }
    r.out.start_origin = "run";
  }
  if (exp.coldstart.enabled) {
    const bool text = r.trainer != nullptr;
    VINCI_ASSIGN_OR_RETURN(ColdStartResult cs,
                           run_cold_start(exp, r.split.train, evaluator, r.backbone, seed_library, r.sink, !text));
    if (text) {
      VINCI_ASSIGN_OR_RETURN(std::vector<TrainSample> samples,
                             cold_start_samples(r.ctx, r.suite, cs.library, cs.text_examples));
      VINCI_ASSIGN_OR_RETURN(TrainerReply reply,
                             update_model(r.ctx, r.sink, "sft", -1, std::move(samples), nullptr, &r.model_state));
      r.out.coldstart_model = reply.model;
      r.out.coldstart_loss = reply.loss;
      r.out.coldstart_failure = reply.failure;
      r.out.coldstart_samples = reply.samples;
      r.out.coldstart_seconds = reply.seconds;
    }
    r.out.library = cs.library;
    r.out.turn_evals += cs.turn_evals;
    r.out.coldstart = cs.point;
    r.out.start_origin = "coldstart";
    ++r.done;
    r.report(cold_start_line(r.out));
  }
  if (exp.checkpoints) {
    VINCI_RETURN_IF_ERROR(
        write_start_checkpoint(r.backbone, r.sink, r.out.start_origin, source ? &*source : nullptr, exp.init_run));
  }
  return Status();
}

// The held-out evaluation when step is due for one, and after the last step test-time scaling.
Status held_out_stage(RunState& r, int32_t step, bool last) {
  const Experiment& exp = r.exp;
  if (!r.split.eval.empty() && (step % exp.eval_every == 0 || last)) {
    VINCI_ASSIGN_OR_RETURN(
        EvalPoint p, evaluate_all(r.ctx, step, r.split.eval, *r.index, r.sink, r.progress, &r.done, r.total, &r.out));
    r.out.eval.push_back(std::move(p));
  }
  if (!last || !r.tts) return Status();
  VINCI_ASSIGN_OR_RETURN(r.out.tts,
                         held_out_pass(r.ctx, step, r.split.eval, *r.index, r.sink, &r.out, "tts", tts_task));
  ++r.done;
  double best = 0, lastv = 0;
  for (const auto& f : r.out.tts) {
    if (f.level == 0 && f.denominator == Denominator::kAll && f.threshold == 1.2) {
      (f.mode == TurnMode::kBest ? best : lastv) = f.value();
    }
  }
  char line[200];
  std::snprintf(line, sizeof line,
                "test-time scaling (%d x %d turns, window %d): fast_1.2 best turn %.3f, last turn %.3f",
                exp.tts.iterations, exp.tts.turns, exp.tts.window, best, lastv);
  r.report(line);
  return Status();
}

// The step's batch: training tasks ordered by a keyed hash, the first batch_tasks, by id.
std::vector<const Task*> step_batch(const Experiment& exp, const std::vector<const Task*>& train, int32_t step) {
  std::vector<std::pair<uint64_t, const Task*>> keyed;
  for (const Task* t : train) {
    keyed.emplace_back(Stream(RngKey::root(exp.seed).with("batch", step).with("task", t->id)).next_u64(), t);
  }
  std::sort(keyed.begin(), keyed.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first < b.first : a.second->id < b.second->id;
  });
  std::vector<const Task*> batch;
  for (size_t i = 0; i < keyed.size() && static_cast<int32_t>(i) < exp.batch_tasks; ++i)
    batch.push_back(keyed[i].second);
  std::sort(batch.begin(), batch.end(), [](const Task* a, const Task* b) { return a->id < b->id; });
  return batch;
}

std::string train_step_line(const Experiment& exp, const TrainPoint& point, size_t added) {
  char line[200];
  std::snprintf(line, sizeof line, "step %d/%d: reward %.3f, correct %.2f, best speedup %.2f, skills +%zu (%u)",
                point.step + 1, exp.steps, point.reward_mean, point.correct_rate, point.best_speedup_mean, added,
                point.library_size);
  std::string text = line;
  if (!point.update_failure.empty()) {
    text += "; the update failed (" + point.update_failure + "): model " + point.model + " kept";
  } else if (!point.model.empty()) {
    std::snprintf(line, sizeof line, "; trained on %u calls in %.1f s (loss %.4g): model %s", point.trained_samples,
                  point.update_seconds, point.loss, point.model.c_str());
    text += line;
  }
  return text;
}

// One training step: the batch's rollouts in parallel, their records in task order, the update
// (the backbone's, and a language model's through its trainer), the skills staged this step added
// to the library, the step's training metrics.
Status train_step(RunState& r, int32_t step) {
  const Experiment& exp = r.exp;
  StepContext& ctx = r.ctx;
  const std::vector<const Task*> batch = step_batch(exp, r.split.train, step);
  {
    StepBeginRecord sb;
    for (const Task* t : batch) sb.tasks.push_back(t->id);
    sb.library_snapshot = ctx.library_address;
    sb.param_digest = r.backbone.parameter_digest();
    RecordBuf b;
    write_step_begin(b, RecordPos::of_step(step), sb);
    VINCI_RETURN_IF_ERROR(flush(b, r.sink));
  }

  std::vector<TaskWork> work(batch.size());
  VINCI_RETURN_IF_ERROR(parallel_for(exp.threads, batch.size(), [&](size_t i) {
    Bm25Index local = *r.index;
    return train_task(ctx, step, *batch[i], local, &work[i]);
  }));
  std::vector<Experience> experiences;
  TrainPoint point;
  point.step = step;
  uint32_t turns = 0, correct = 0;
  double reward_sum = 0, best_sum = 0;
  for (auto& w : work) {
    VINCI_RETURN_IF_ERROR(flush(w.records, r.sink));
    for (auto& e : w.experiences) experiences.push_back(std::move(e));
    turns += w.turns;
    correct += w.correct_turns;
    reward_sum += w.reward_sum;
    best_sum += w.best_speedup;
    point.triggered += w.triggered;
    point.accepted += w.accepted;
    r.out.rollouts += w.rollouts;
    r.out.turn_evals += w.evals;
  }
  VINCI_ASSIGN_OR_RETURN(UpdateStats stats, r.backbone.update(experiences));
  if (r.trainer) {
    std::vector<TrainSample> samples;
    for (auto& w : work) {
      for (auto& s : w.llm_samples) samples.push_back(std::move(s));
    }
    VINCI_ASSIGN_OR_RETURN(TrainerReply reply,
                           update_model(ctx, r.sink, "rl", step, std::move(samples), &point, &r.model_state));
    if (reply.failure.empty()) stats.loss = reply.loss;
  }
  {
    ParameterDigestRecord pd;
    pd.digest = r.backbone.parameter_digest();
    pd.loss = stats.loss;
    pd.grad_norm = stats.grad_norm;
    if (exp.checkpoints) {
      VINCI_ASSIGN_OR_RETURN(std::string bytes, r.backbone.checkpoint());
      VINCI_ASSIGN_OR_RETURN(pd.checkpoint, ctx.store->put("checkpoint", bytes));
    }
    RecordBuf b;
    write_parameter_digest(b, RecordPos::of_step(step), pd);
    VINCI_RETURN_IF_ERROR(flush(b, r.sink));
  }
  // Skills staged this step enter the library after the update, in task order.
  std::vector<std::string> added;
  for (auto& w : work) {
    if (!w.staged) continue;
    std::string name = r.out.library.add(*w.staged);
    r.index->add_text(skill_document_text(*r.out.library.find(name)));
    added.push_back(name);
  }
  VINCI_ASSIGN_OR_RETURN(ctx.library_address, snapshot_library(r, step + 1, added));

  point.reward_mean = turns ? reward_sum / turns : 0;
  point.correct_rate = turns ? static_cast<double>(correct) / turns : 0;
  point.best_speedup_mean = batch.empty() ? 0 : best_sum / static_cast<double>(batch.size());
  point.library_size = static_cast<uint32_t>(r.out.library.size());
  point.loss = stats.loss;
  {
    RecordBuf b;
    // A training metric of the whole batch: no level, threshold, turn mode or denominator.
    auto train_metric = [&](const char* name, double value, uint32_t numerator, uint32_t count) {
      write_metric(b, step, {name, "train", -1, 0, "", "", value, numerator, count});
    };
    train_metric("reward_mean", point.reward_mean, 0, turns);
    train_metric("correct_rate", point.correct_rate, correct, turns);
    train_metric("best_speedup_mean", point.best_speedup_mean, 0, static_cast<uint32_t>(batch.size()));
    train_metric("skills_accepted", point.accepted, point.accepted, point.triggered);
    train_metric("library_size", point.library_size, point.library_size, 0);
    VINCI_RETURN_IF_ERROR(flush(b, r.sink));
    write_step_end(b, RecordPos::of_step(step), r.sink.digest());
    VINCI_RETURN_IF_ERROR(flush(b, r.sink));
  }
  r.out.train.push_back(point);
  ++r.done;
  r.report(train_step_line(exp, point, added.size()));
  return Status();
}

}  // namespace

Result<TrainerOutput> run_experiment(const Experiment& exp, const TaskSuite& suite, Evaluator& evaluator,
                                     Backbone& backbone, const SkillLibrary& seed_library, RecordSink& sink,
                                     const ProgressFn& progress, AgentModel* model, ModelTrainer* trainer) {
  std::unique_ptr<SimAgentModel> sim_model;
  if (model == nullptr) {
    sim_model = std::make_unique<SimAgentModel>(backbone, exp.sim);
    model = sim_model.get();
  }
  RunState r{exp,
             suite,
             backbone,
             sink,
             progress,
             trainer,
             StepContext{},
             split_tasks(suite, exp),
             TrainerOutput{},
             ModelState{},
             std::nullopt,
             0,
             0,
             false};
  for (const Task* t : r.split.train) r.out.train_tasks.push_back(t->id);
  for (const Task* t : r.split.eval) r.out.eval_tasks.push_back(t->id);
  VINCI_RETURN_IF_ERROR(check_task_split(suite, exp));
  r.out.library = seed_library;
  StepContext& ctx = r.ctx;
  ctx.exp = &exp;
  ctx.evaluator = &evaluator;
  ctx.backbone = &backbone;
  ctx.model = model;
  ctx.trainer = trainer;
  ctx.store = &sink.store();
  ctx.shape = sim_backbone_shape();
  ctx.size = exp.size;
  r.model_state.model = exp.llm.model;

  int64_t evals = r.split.eval.empty() ? 0 : (exp.steps + exp.eval_every - 1) / exp.eval_every + 1;
  r.tts = exp.tts.enabled && !r.split.eval.empty();
  r.total = exp.steps + evals + (exp.coldstart.enabled ? 1 : 0) + (r.tts ? 1 : 0);

  // What the model's answers depend on beyond the config (its prompt templates).
  for (const auto& [name, text] : model->attachments()) {
    VINCI_ASSIGN_OR_RETURN(Digest addr, sink.store().put("prompt_template", text));
    RecordBuf b;
    write_blob(b, RecordPos::of_step(-1), {name, "prompt_template", addr, text.size()});
    VINCI_RETURN_IF_ERROR(flush(b, sink));
  }
  // A resume reads them back: durable before the first model call is paid for.
  if (!model->attachments().empty()) VINCI_RETURN_IF_ERROR(sink.sync());

  VINCI_RETURN_IF_ERROR(start_stage(r, evaluator, seed_library));
  r.index.emplace(build_index(r.out.library, exp));
  VINCI_ASSIGN_OR_RETURN(ctx.library_address, snapshot_library(r, 0, {}));
  ctx.library = &r.out.library;

  for (int32_t step = 0; step <= exp.steps; ++step) {
    const bool last = step == exp.steps;
    VINCI_RETURN_IF_ERROR(held_out_stage(r, step, last));
    if (last) break;
    VINCI_RETURN_IF_ERROR(train_step(r, step));
  }
  return std::move(r.out);
}

}  // namespace vinci

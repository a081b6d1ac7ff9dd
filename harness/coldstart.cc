#include "harness/coldstart.h"

#include <algorithm>
#include <map>
#include <set>

#include "agents/agents.h"
#include "agents/bm25.h"
#include "gpu/codegen/codegen.h"
#include "gpu/codegen/knobs.h"
#include "harness/loop_parts.h"
#include "harness/sim_world.h"

namespace vinci {

double token_jaccard(const std::string& a, const std::string& b) {
  std::vector<std::string> ta = bm25_tokenize(a), tb = bm25_tokenize(b);
  std::set<std::string> sa(ta.begin(), ta.end()), sb(tb.begin(), tb.end());
  if (sa.empty() && sb.empty()) return 1.0;
  size_t common = 0;
  for (const auto& t : sa) common += sb.count(t);
  return static_cast<double>(common) / static_cast<double>(sa.size() + sb.size() - common);
}

std::string knob_pattern(const std::map<std::string, std::string>& knobs) {
  std::string out;
  for (const auto& [k, v] : knobs) out += (out.empty() ? "" : ",") + k + "=" + v;
  return out;
}

std::vector<DiversityVerdict> diversity_filter(const std::vector<SkillCandidate>& candidates,
                                               const DiversityParams& params) {
  std::vector<DiversityVerdict> out(candidates.size());
  std::vector<size_t> order(candidates.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t x, size_t y) {
    const SkillCandidate &a = candidates[x], &b = candidates[y];
    if (a.speedup != b.speedup) return a.speedup > b.speedup;
    if (a.task != b.task) return a.task < b.task;
    if (a.skill.name != b.skill.name) return a.skill.name < b.skill.name;
    return x < y;
  });
  std::map<std::string, int32_t> per_family, per_pattern;
  std::vector<std::pair<size_t, std::string>> kept_texts;  // candidate index, document text
  for (size_t i : order) {
    const SkillCandidate& c = candidates[i];
    DiversityVerdict& v = out[i];
    if (!params.enabled) {
      v.kept = true;
      v.reason = "kept (diversity filter off)";
      continue;
    }
    if (per_family[c.family] >= params.max_per_family) {
      v.reason = "dropped: op family " + c.family + " already has " + std::to_string(per_family[c.family]) +
                 " skills (max_per_family)";
      continue;
    }
    if (per_pattern[c.pattern] >= params.max_per_pattern) {
      v.reason = "dropped: knob pattern " + c.pattern + " already has " + std::to_string(per_pattern[c.pattern]) +
                 " skills (max_per_pattern)";
      continue;
    }
    std::string text = skill_document_text(c.skill);
    bool dup = false;
    for (const auto& [j, other] : kept_texts) {
      double sim = token_jaccard(text, other);
      if (sim >= params.similarity) {
        char buf[64];
        std::snprintf(buf, sizeof buf, "%.3f", sim);
        v.reason = "dropped: near-duplicate of " + candidates[j].skill.name + " (Jaccard " + buf + ")";
        dup = true;
        break;
      }
    }
    if (dup) continue;
    v.kept = true;
    v.reason = "kept";
    per_family[c.family]++;
    per_pattern[c.pattern]++;
    kept_texts.emplace_back(i, std::move(text));
  }
  return out;
}

namespace {

using namespace loop;

constexpr auto kPhase = schema::Record::Phase::COLDSTART;
constexpr int32_t kStep = -1;

// A cold-start record of a task.
RecordPos at(const std::string& task) { return RecordPos::of_task(kStep, task, kPhase); }

struct Trajectory {
  std::vector<KnobSetting> settings;
  std::vector<TurnResult> results;
  std::vector<TurnRecord> records;
  int32_t best_reward_turn = 0;  // the search's anchor
  int32_t best_turn = -1;        // the correct turn with the highest speedup (first on ties)
  double best_speedup = 0;
};

struct Distilled {
  int32_t trajectory = 0;
  SummarySample teacher;
  std::optional<Skill> skill;
  bool verified = false;
  double verify_speedup = 0;
};

struct TaskCold {
  RecordBuf records;
  std::vector<Trajectory> trajectories;
  std::vector<Distilled> distilled;
  uint64_t evals = 0;
};

void write_search_sample(RecordBuf& buf, const std::string& task, int32_t rollout, int32_t turn,
                         const std::string& backbone, schema::Role role, const std::vector<uint32_t>& actions,
                         const Digest* output, const RngKey& key) {
  SampleRecord s;
  s.role = role;
  s.backbone = backbone;
  s.actions = actions;
  if (output) s.output = *output;
  s.key = key.digest();
  write_sample(buf, at(task).at_rollout(rollout).at_turn(turn), s);
}

// The behaviour policy's trajectories of one task, the teacher's skills and their verification.
Status collect_task(const Experiment& exp, const Task& task, Evaluator& evaluator, ObjectStore& store, TaskCold* out) {
  const auto& cs = exp.coldstart;
  KnobSpace space = knob_space(task);
  KnobSetting defaults = default_setting(space);
  RngKey task_key = RngKey::root(exp.seed).with("phase", "coldstart").with("task", task.id);
  for (int32_t j = 0; j < cs.trajectories; ++j) {
    RngKey key = task_key.with("trajectory", j);
    SimTurnEnv env(exp, task, space, evaluator, store, key);
    Trajectory tr;
    for (int32_t t = 0; t < cs.turns; ++t) {
      KnobSetting s;
      Stream draw(key.with("turn", t));
      if (t == 0) {
        s = j == 0 ? defaults : random_setting(space, draw);
      } else {
        s = tr.settings[tr.best_reward_turn];
        std::vector<size_t> movable;
        for (size_t k = 0; k < space.knobs.size(); ++k) {
          if (space.knobs[k].choices.size() > 1) movable.push_back(k);
        }
        if (!movable.empty()) {
          size_t k = movable[draw.below(movable.size())];
          int32_t n = static_cast<int32_t>(space.knobs[k].choices.size());
          int32_t v = static_cast<int32_t>(draw.below(static_cast<uint64_t>(n - 1)));
          s[k] = v >= s[k] ? v + 1 : v;
        }
      }
      VINCI_ASSIGN_OR_RETURN(TurnResult r, env.run_turn(t, s));
      std::vector<uint32_t> acts(s.begin(), s.end());
      write_search_sample(out->records, task.id, j, t, "search", schema::Role::POLICY, acts, &env.turns.back().plan,
                          key.with("turn", t));
      write_measurement(out->records, at(task.id).at_rollout(j).at_turn(t), env.turns.back().eval);
      write_turn_reward(out->records, at(task.id).at_rollout(j).at_turn(t), r);
      tr.settings.push_back(s);
      tr.results.push_back(r);
      if (r.reward > tr.results[tr.best_reward_turn].reward) tr.best_reward_turn = t;
      if (r.compiled && r.correct && !r.decoy && r.speedup > tr.best_speedup) {
        tr.best_speedup = r.speedup;
        tr.best_turn = t;
      }
    }
    out->evals += env.turns.size();
    tr.records = std::move(env.turns);
    out->trajectories.push_back(std::move(tr));
  }

  // Distil the kept trajectories.
  for (int32_t j = 0; j < cs.trajectories; ++j) {
    const Trajectory& tr = out->trajectories[j];
    if (tr.best_turn < 0 || tr.best_speedup < cs.min_speedup) continue;
    RngKey key = task_key.with("trajectory", j);
    const KnobSetting& best = tr.settings[tr.best_turn];
    Distilled d;
    d.trajectory = j;
    d.teacher.include.assign(space.knobs.size(), 0);
    d.teacher.scope = task.level == 1 ? 0 : 1;
    SimTurnEnv ablate(exp, task, space, evaluator, store, key.with("purpose", "ablate"));
    for (size_t k = 0; k < space.knobs.size(); ++k) {
      if (best[k] == defaults[k]) continue;
      KnobSetting s = best;
      s[k] = defaults[k];
      int32_t kk = static_cast<int32_t>(k);
      VINCI_ASSIGN_OR_RETURN(TurnResult r, ablate.run_turn(kk, s));
      write_measurement(out->records, at(task.id).at_scheme(kk).at_rollout(j), ablate.turns.back().eval);
      bool matters = !(r.compiled && r.correct && !r.decoy) || r.speedup < tr.best_speedup * (1.0 - cs.ablation_margin);
      d.teacher.include[k] = matters ? 1 : 0;
    }
    out->evals += ablate.turns.size();
    WinningRollout w;
    w.task = &task;
    w.space = space;
    w.choices = best;
    const TurnResult& first = tr.results[0];
    w.turn1_speedup = first.compiled && first.correct && !first.decoy ? first.speedup : 0.0;
    w.best_speedup = tr.best_speedup;
    w.kernel_excerpt = tr.records[tr.best_turn].excerpt;
    d.skill = SimSkillWriter(w).write_skill(d.teacher);
    Digest skill_addr;
    if (d.skill) {
      SkillLibrary one;
      one.add(*d.skill);
      VINCI_ASSIGN_OR_RETURN(skill_addr, store.put("skill", one.to_jsonl()));
    }
    std::vector<uint32_t> acts(d.teacher.include.begin(), d.teacher.include.end());
    acts.push_back(static_cast<uint32_t>(d.teacher.scope));
    write_search_sample(out->records, task.id, j, -1, "teacher", schema::Role::SUMMARY, acts,
                        d.skill ? &skill_addr : nullptr, key.with("purpose", "summary"));
    if (d.skill) {
      // Verification: the skill's knobs on the default setting.
      VINCI_ASSIGN_OR_RETURN(KnobSetting s, setting_from_values(space, skill_knobs(*d.skill)));
      SimTurnEnv venv(exp, task, space, evaluator, store, key.with("purpose", "verify"));
      VINCI_ASSIGN_OR_RETURN(TurnResult r, venv.run_turn(0, s));
      out->evals += 1;
      write_measurement(out->records, at(task.id).at_rollout(j), venv.turns.back().eval);
      bool ok = r.compiled && r.correct && !r.decoy;
      d.verified = ok && r.speedup >= exp.verification.min_speedup;
      d.verify_speedup = ok ? r.speedup : 0.0;
      VerificationRecord v;
      v.skill_name = d.skill->name;
      v.skill = skill_addr;
      v.speedups = {d.verify_speedup};
      v.correct = {ok};
      v.baseline_turn1_speedup = w.turn1_speedup;
      v.accepted = d.verified;
      char why[160];
      std::snprintf(why, sizeof why, "%s: %s, speedup %.4g (min %.4g)", d.verified ? "accepted" : "rejected",
                    ok ? "correct" : "incorrect", d.verify_speedup, exp.verification.min_speedup);
      v.reason = why;
      v.sample_index = j;
      write_verification(out->records, at(task.id).at_rollout(j), v);
      d.skill->verify_speedup = d.verify_speedup;
    }
    out->distilled.push_back(std::move(d));
  }
  return Status();
}

RoleCounts counts_of(const RoleCrossEntropy& ce) {
  return {static_cast<uint32_t>(ce.count[0]), static_cast<uint32_t>(ce.count[1]), static_cast<uint32_t>(ce.count[2])};
}

RoleDoubles means_of(const RoleCrossEntropy& ce) { return {ce.mean[0], ce.mean[1], ce.mean[2]}; }

}  // namespace

namespace {

// The BM25 recall a trajectory's selection example is built from: keyed by the trajectory, so
// the selection example and the text example of one trajectory see the same candidates.
Bm25Recall coldstart_recall(const Experiment& exp, const Task& task, int32_t trajectory, Bm25Index& index) {
  RngKey key = RngKey::root(exp.seed)
                   .with("phase", "coldstart")
                   .with("task", task.id)
                   .with("trajectory", trajectory)
                   .with("purpose", "bm25-fallback");
  return bm25_recall(index, task.description, exp.selection.recall_top, key);
}

// The text form of one kept trajectory's examples (ColdStartExample). The recall is the one the
// selection example was built from (same key).
ColdStartExample text_example(const Task& task, const Trajectory& tr, const KnobSpace& space,
                              const std::vector<const Skill*>& chosen, const Distilled* distilled, Bm25Index& index,
                              const SkillLibrary& library, const Experiment& exp, int32_t trajectory) {
  ColdStartExample x;
  x.task = task.id;
  if (!chosen.empty()) {
    Bm25Recall recall = coldstart_recall(exp, task, trajectory, index);
    for (const auto& hit : recall.hits) {
      x.scores.push_back(hit.score);
      x.candidates.push_back(library.at(hit.doc).name);
    }
    for (const Skill* c : chosen) {
      for (size_t h = 0; h < x.candidates.size(); ++h) {
        if (x.candidates[h] == c->name) x.picked.push_back(static_cast<int32_t>(h));
      }
    }
  }
  for (size_t t = 0; t < tr.settings.size(); ++t) {
    x.settings.push_back(knob_values(space, tr.settings[t]));
    x.evals.push_back(tr.records[t].eval);
    x.results.push_back(tr.results[t]);
  }
  x.best_turn = tr.best_turn;
  if (distilled && distilled->skill) x.skill = *distilled->skill;
  return x;
}

// The end of an unfitted stage: the coldStart record (no cross-entropies, no checkpoint).
Result<ColdStartResult> finish_unfitted(const Experiment& exp, ColdStartResult& res, const RoleCounts& examples,
                                        const uint32_t dropped[3], RecordSink& sink) {
  ObjectStore& store = sink.store();
  VINCI_ASSIGN_OR_RETURN(Digest lib_addr, store.put("library", res.library.canonical_bytes()));
  const ColdStartPoint& p = res.point;
  const ColdStartRecord c{p.trajectories, p.kept,
                          p.proposed,     p.verified,
                          p.added,        exp.coldstart.diversity,
                          examples,       {dropped[0], dropped[1], dropped[2]},
                          {0, 0, 0},      {0, 0, 0},
                          lib_addr,       Digest(),
                          Digest()};
  RecordBuf buf;
  write_cold_start(buf, RecordPos::of_step(kStep, kPhase), c);
  VINCI_RETURN_IF_ERROR(flush(buf, sink));
  return std::move(res);
}

// The collected tasks' records, in task order, and the counts of their trajectories.
Status flush_collected(const Experiment& exp, std::vector<TaskCold>& work, RecordSink& sink, ColdStartResult* res) {
  for (auto& w : work) {
    VINCI_RETURN_IF_ERROR(flush(w.records, sink));
    res->turn_evals += w.evals;
    for (const auto& tr : w.trajectories) {
      res->point.trajectories++;
      if (tr.best_turn >= 0 && tr.best_speedup >= exp.coldstart.min_speedup) res->point.kept++;
    }
  }
  return Status();
}

// The diversity filter over every verified skill, and the library it leaves: the seed library
// and the kept skills.
Status stage_skills(const Experiment& exp, const std::vector<const Task*>& train, const std::vector<TaskCold>& work,
                    const SkillLibrary& seed_library, RecordSink& sink, ColdStartResult* res) {
  const auto& cs = exp.coldstart;
  struct Ref {
    size_t task;
    size_t distilled;
  };
  std::vector<SkillCandidate> candidates;
  std::vector<Ref> refs;
  for (size_t i = 0; i < work.size(); ++i) {
    for (size_t k = 0; k < work[i].distilled.size(); ++k) {
      const Distilled& d = work[i].distilled[k];
      if (d.skill) res->point.proposed++;
      if (!d.verified) continue;
      res->point.verified++;
      SkillCandidate c;
      c.skill = *d.skill;
      c.family = train[i]->family_name();
      c.pattern = knob_pattern(skill_knobs(*d.skill));
      c.task = train[i]->id;
      c.speedup = d.verify_speedup;
      candidates.push_back(std::move(c));
      refs.push_back({i, k});
    }
  }
  DiversityParams dp{cs.diversity, cs.similarity, cs.max_per_family, cs.max_per_pattern};
  std::vector<DiversityVerdict> verdicts = diversity_filter(candidates, dp);
  res->library = seed_library;
  // Diversity decisions in candidate order; the kept skills join the library in the filter's
  // order (highest verified speedup first).
  RecordBuf buf;
  std::vector<size_t> order;
  for (size_t c = 0; c < candidates.size(); ++c) {
    const Distilled& d = work[refs[c].task].distilled[refs[c].distilled];
    VerificationRecord v;
    v.skill_name = candidates[c].skill.name;
    v.speedups = {candidates[c].speedup};
    v.accepted = true;
    v.staged = verdicts[c].kept;
    v.reason = "diversity: " + verdicts[c].reason;
    v.sample_index = d.trajectory;
    write_verification(buf, at(candidates[c].task).at_rollout(d.trajectory), v);
    if (verdicts[c].kept) order.push_back(c);
  }
  VINCI_RETURN_IF_ERROR(flush(buf, sink));
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (candidates[a].speedup != candidates[b].speedup) return candidates[a].speedup > candidates[b].speedup;
    return candidates[a].task < candidates[b].task;
  });
  for (size_t c : order) res->point.added.push_back(res->library.add(candidates[c].skill));
  return Status();
}

struct KeptRef {
  size_t task;
  int32_t trajectory;
  double speedup;
};

// The kept trajectories, highest best speedup first.
std::vector<KeptRef> kept_trajectories(const Experiment& exp, const std::vector<const Task*>& train,
                                       const std::vector<TaskCold>& work) {
  std::vector<KeptRef> kept;
  for (size_t i = 0; i < work.size(); ++i) {
    for (size_t j = 0; j < work[i].trajectories.size(); ++j) {
      const Trajectory& tr = work[i].trajectories[j];
      if (tr.best_turn >= 0 && tr.best_speedup >= exp.coldstart.min_speedup) {
        kept.push_back({i, static_cast<int32_t>(j), tr.best_speedup});
      }
    }
  }
  std::stable_sort(kept.begin(), kept.end(), [&](const KeptRef& a, const KeptRef& b) {
    if (a.speedup != b.speedup) return a.speedup > b.speedup;
    if (train[a.task]->id != train[b.task]->id) return train[a.task]->id < train[b.task]->id;
    return a.trajectory < b.trajectory;
  });
  return kept;
}

// What a kept trajectory's examples are encoded with: the backbone's shape, the task's features and
// the heads its knob space uses.
struct ExampleInputs {
  const BackboneShape& shape;
  const std::vector<float>& features;
  const std::vector<int32_t>& heads;
};

// Selection: the recalled candidates whose knobs all agree with the best setting. chosen gets the
// skills picked.
void add_selection_example(const Experiment& exp, const Task& task, int32_t trajectory, const KnobSpace& space,
                           const KnobSetting& best, const ExampleInputs& in, Bm25Index& index,
                           const SkillLibrary& library, std::vector<Experience>* ex,
                           std::vector<const Skill*>* chosen) {
  Bm25Recall recall = coldstart_recall(exp, task, trajectory, index);
  SimSkillFeaturizer featurizer(task);
  Experience e;
  e.role = AgentRole::kSelection;
  e.advantage = 1.0;
  e.selection_input.task = in.features;
  e.selection_input.max_pick = exp.selection.max_skills;
  std::vector<std::pair<int32_t, int32_t>> agree;  // (-agreeing knobs, rank)
  std::map<std::string, std::string> values = knob_values(space, best);
  for (size_t h = 0; h < recall.hits.size(); ++h) {
    const Skill& s = library.at(recall.hits[h].doc);
    e.selection_input.candidates.push_back(featurizer.candidate_features(s, recall.hits[h].score));
    auto knobs = skill_knobs(s);
    int32_t n = 0;
    bool all = !knobs.empty();
    for (const auto& [name, value] : knobs) {
      auto it = values.find(name);
      if (it == values.end() || it->second != value)
        all = false;
      else
        ++n;
    }
    if (all) agree.emplace_back(-n, static_cast<int32_t>(h));
  }
  std::sort(agree.begin(), agree.end());
  for (const auto& [neg, h] : agree) {
    if (static_cast<int32_t>(e.selection.picked.size()) >= exp.selection.max_skills) break;
    e.selection.picked.push_back(h);
    chosen->push_back(&library.at(recall.hits[h].doc));
  }
  if (!e.selection.picked.empty()) ex->push_back(std::move(e));
}

// Policy: every turn of the trajectory, with its real history, -> the best setting.
void add_policy_examples(const Trajectory& tr, const ExampleInputs& in, const std::vector<const Skill*>& chosen,
                         std::vector<Experience>* ex) {
  const KnobSetting& best = tr.settings[tr.best_turn];
  for (size_t t = 0; t < tr.settings.size(); ++t) {
    Experience e;
    e.role = AgentRole::kPolicy;
    e.advantage = 1.0;
    e.policy_input.task = in.features;
    e.policy_input.skill_hint = skill_hint(chosen);
    e.policy_input.active_heads = in.heads;
    if (t == 0) {
      e.policy_input.previous.assign(static_cast<size_t>(in.shape.choice_dim()), 0.0f);
      e.policy_input.feedback.assign(kFeedbackDim, 0.0f);
    } else {
      e.policy_input.previous = encode_choices(in.shape, in.heads, tr.settings[t - 1]);
      e.policy_input.feedback = encode_feedback(tr.results[t - 1]);
    }
    e.policy.choices = best;
    ex->push_back(std::move(e));
  }
}

// Summary: the best setting and its result -> the teacher's flags.
Experience summary_example(const Trajectory& tr, const ExampleInputs& in, const Distilled& distilled) {
  Experience e;
  e.role = AgentRole::kSummary;
  e.advantage = 1.0;
  e.summary_input.task = in.features;
  e.summary_input.winning = encode_choices(in.shape, in.heads, tr.settings[tr.best_turn]);
  e.summary_input.feedback = encode_feedback(tr.results[tr.best_turn]);
  e.summary_input.active_heads = in.heads;
  e.summary = distilled.teacher;
  return e;
}

// The SFT examples and, per role, how many the cap dropped.
struct SftExamples {
  std::vector<Experience> examples;
  uint32_t dropped[3] = {0, 0, 0};
};

// SFT examples from the kept trajectories, capped per (family, best setting) when filtering. An
// unfitted stage (fit false) keeps their text form too.
SftExamples sft_examples(const Experiment& exp, const std::vector<const Task*>& train,
                         const std::vector<TaskCold>& work, bool fit, ColdStartResult* res) {
  const auto& cs = exp.coldstart;
  std::vector<KeptRef> kept = kept_trajectories(exp, train, work);
  Bm25Index index = build_index(res->library, exp);
  const BackboneShape shape = sim_backbone_shape();
  const SizeName size = exp.size;
  std::map<std::string, int32_t> per_pattern;
  SftExamples out;
  for (const KeptRef& k : kept) {
    const Task& task = *train[k.task];
    const Trajectory& tr = work[k.task].trajectories[k.trajectory];
    KnobSpace space = knob_space(task);
    const KnobSetting& best = tr.settings[tr.best_turn];
    std::vector<int32_t> heads = active_heads(space);
    std::vector<float> features = task_features(task, size);
    const Distilled* distilled = nullptr;
    for (const auto& d : work[k.task].distilled) {
      if (d.trajectory == k.trajectory) distilled = &d;
    }
    const ExampleInputs in{shape, features, heads};
    std::vector<Experience> ex;
    std::vector<const Skill*> chosen;
    if (!res->library.empty() && exp.selection.mode != SelectionMode::kNone)
      add_selection_example(exp, task, k.trajectory, space, best, in, index, res->library, &ex, &chosen);
    add_policy_examples(tr, in, chosen, &ex);
    if (distilled) ex.push_back(summary_example(tr, in, *distilled));
    std::string group = std::string(task.family_name()) + "|" + knob_pattern(knob_values(space, best));
    if (cs.diversity && per_pattern[group] >= cs.max_examples_per_pattern) {
      for (const auto& e : ex) out.dropped[static_cast<int>(e.role)]++;
      continue;
    }
    per_pattern[group]++;
    for (auto& e : ex) out.examples.push_back(std::move(e));
    if (!fit)
      res->text_examples.push_back(
          text_example(task, tr, space, chosen, distilled, index, res->library, exp, k.trajectory));
  }
  return out;
}

// The fit: coldstart.epochs supervised steps on the examples, then the checkpoint and the
// coldStart record.
Result<ColdStartResult> finish_fitted(const Experiment& exp, ColdStartResult& res, SftExamples& sft, Backbone& backbone,
                                      RecordSink& sink) {
  const auto& cs = exp.coldstart;
  ObjectStore& store = sink.store();
  std::vector<Experience>& examples = sft.examples;
  for (int32_t epoch = 0; epoch < cs.epochs; ++epoch) {
    VINCI_ASSIGN_OR_RETURN(RoleCrossEntropy ce, backbone.cross_entropy(examples));
    if (epoch == 0) res.point.before = ce;
    VINCI_ASSIGN_OR_RETURN(UpdateStats st, backbone.supervised_step(examples, cs.lr));
    RecordBuf buf;
    write_sft_epoch(buf, RecordPos::of_step(kStep, kPhase),
                    {epoch, st.loss, means_of(ce), counts_of(ce), backbone.parameter_digest()});
    VINCI_RETURN_IF_ERROR(flush(buf, sink));
  }
  VINCI_ASSIGN_OR_RETURN(res.point.after, backbone.cross_entropy(examples));
  if (cs.epochs == 0) res.point.before = res.point.after;
  VINCI_RETURN_IF_ERROR(backbone.reset_optimizer());
  VINCI_ASSIGN_OR_RETURN(std::string ckpt, backbone.checkpoint());
  VINCI_ASSIGN_OR_RETURN(res.checkpoint, store.put("checkpoint", ckpt));
  res.digest = backbone.parameter_digest();
  VINCI_ASSIGN_OR_RETURN(Digest lib_addr, store.put("library", res.library.canonical_bytes()));
  {
    const uint32_t* dropped = sft.dropped;
    const ColdStartPoint& p = res.point;
    const ColdStartRecord c{p.trajectories,
                            p.kept,
                            p.proposed,
                            p.verified,
                            p.added,
                            cs.diversity,
                            counts_of(p.after),                    // examples
                            {dropped[0], dropped[1], dropped[2]},  // examples_dropped
                            means_of(p.before),                    // cross_entropy_before
                            means_of(p.after),                     // cross_entropy_after
                            lib_addr,                              // library
                            res.checkpoint,                        // checkpoint
                            res.digest};                           // digest
    RecordBuf buf;
    write_cold_start(buf, RecordPos::of_step(kStep, kPhase), c);
    VINCI_RETURN_IF_ERROR(flush(buf, sink));
  }
  res.examples = std::move(examples);
  return std::move(res);
}

}  // namespace

Result<ColdStartResult> run_cold_start(const Experiment& exp, const std::vector<const Task*>& train,
                                       Evaluator& evaluator, Backbone& backbone, const SkillLibrary& seed_library,
                                       RecordSink& sink, bool fit) {
  ObjectStore& store = sink.store();
  ColdStartResult res;
  std::vector<TaskCold> work(train.size());
  VINCI_RETURN_IF_ERROR(parallel_for(
      exp.threads, train.size(), [&](size_t i) { return collect_task(exp, *train[i], evaluator, store, &work[i]); }));
  VINCI_RETURN_IF_ERROR(flush_collected(exp, work, sink, &res));
  VINCI_RETURN_IF_ERROR(stage_skills(exp, train, work, seed_library, sink, &res));
  SftExamples sft = sft_examples(exp, train, work, fit, &res);
  if (!fit) {
    RoleCounts counts{0, 0, 0};
    for (const Experience& e : sft.examples) counts[static_cast<size_t>(e.role)]++;
    return finish_unfitted(exp, res, counts, sft.dropped, sink);
  }
  return finish_fitted(exp, res, sft, backbone, sink);
}

}  // namespace vinci

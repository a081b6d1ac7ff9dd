#include "agents/agents.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace vinci {

const char* selection_mode_name(SelectionMode mode) {
  switch (mode) {
    case SelectionMode::kRerank: return "rerank";
    case SelectionMode::kBm25Only: return "bm25";
    case SelectionMode::kNone: return "none";
  }
  return "?";
}

Result<SelectionMode> parse_selection_mode(std::string_view text) {
  if (text == "rerank") return SelectionMode::kRerank;
  if (text == "bm25") return SelectionMode::kBm25Only;
  if (text == "none") return SelectionMode::kNone;
  return invalid_argument("selection mode: expected rerank, bm25 or none, found '" + std::string(text) + "'");
}

Result<SchemeDecision> select_skills(const SkillLibrary& library, Bm25Index& index, std::string_view query,
                                     const SelectionParams& params, const RngKey& key, int32_t sample_index,
                                     const SelectionReranker& rerank) {
  VINCI_REQUIRE(index.size() == library.size(),
                "BM25 index holds " << index.size() << " documents, library " << library.size());
  SchemeDecision d;
  d.sample_index = sample_index;
  if (params.mode == SelectionMode::kNone || library.empty()) return d;
  d.recall = bm25_recall(index, query, params.recall_top, key.with("purpose", "bm25-fallback"));
  const auto& hits = d.recall.hits;
  if (params.mode == SelectionMode::kBm25Only) {
    for (size_t i = 0; i < hits.size() && static_cast<int32_t>(i) < params.max_skills; ++i) {
      d.selected.push_back(library.at(hits[i].doc).name);
    }
    return d;
  }
  if (hits.empty()) return d;
  std::vector<const Skill*> candidates;
  std::vector<double> scores;
  for (const auto& h : hits) {
    candidates.push_back(&library.at(h.doc));
    scores.push_back(h.score);
  }
  VINCI_ASSIGN_OR_RETURN(d.sample, rerank(candidates, scores));
  d.sampled = true;
  for (int32_t c : d.sample.picked) {
    VINCI_ASSERT(c >= 0 && static_cast<size_t>(c) < hits.size());
    if (static_cast<int32_t>(d.selected.size()) >= params.max_skills) break;
    d.selected.push_back(library.at(hits[c].doc).name);
  }
  return d;
}

Result<SchemeDecision> select_skills(Backbone& backbone, const SkillLibrary& library, Bm25Index& index,
                                     std::string_view query, const std::vector<float>& task_features,
                                     const SkillFeaturizer& featurizer, const SelectionParams& params,
                                     const RngKey& key, bool greedy, int32_t sample_index) {
  SelectionInput input;
  auto rerank = [&](const std::vector<const Skill*>& candidates,
                    const std::vector<double>& scores) -> Result<SelectionSample> {
    input.task = task_features;
    input.max_pick = params.max_skills;
    for (size_t i = 0; i < candidates.size(); ++i) {
      input.candidates.push_back(featurizer.candidate_features(*candidates[i], scores[i]));
    }
    return backbone.sample_selection(input, key, greedy);
  };
  VINCI_ASSIGN_OR_RETURN(SchemeDecision d, select_skills(library, index, query, params, key, sample_index, rerank));
  d.input = std::move(input);
  return d;
}

std::vector<float> encode_feedback(const TurnResult& r) {
  double ls = 0;
  if (r.correct && r.speedup > 0) ls = std::clamp(std::log2(r.speedup), -4.0, 4.0) / 4.0;
  return {1.0f,
          r.compiled ? 1.0f : 0.0f,
          r.correct ? 1.0f : 0.0f,
          r.decoy ? 1.0f : 0.0f,
          static_cast<float>(ls),
          static_cast<float>(r.reward / 4.0)};
}

std::vector<float> encode_choices(const BackboneShape& shape, const std::vector<int32_t>& heads,
                                  const std::vector<int32_t>& choices) {
  VINCI_REQUIRE(heads.size() == choices.size(), heads.size() << " heads but " << choices.size() << " choices");
  std::vector<int32_t> offset(shape.head_sizes.size() + 1, 0);
  for (size_t i = 0; i < shape.head_sizes.size(); ++i) offset[i + 1] = offset[i] + shape.head_sizes[i];
  std::vector<float> v(static_cast<size_t>(offset.back()), 0.0f);
  for (size_t i = 0; i < heads.size(); ++i) {
    int32_t h = heads[i];
    VINCI_REQUIRE(h >= 0 && static_cast<size_t>(h) < shape.head_sizes.size(), "head " << h);
    VINCI_REQUIRE(choices[i] >= 0 && choices[i] < shape.head_sizes[h], "choice " << choices[i] << " of head " << h);
    v[static_cast<size_t>(offset[h] + choices[i])] = 1.0f;
  }
  return v;
}

double best_speedup(const std::vector<TurnResult>& turns) {
  double best = 0;
  for (const auto& t : turns) {
    if (t.compiled && t.correct && !t.decoy) best = std::max(best, t.speedup);
  }
  return best;
}

bool summary_triggers(const std::vector<TurnResult>& turns, const TriggerParams& p) {
  if (turns.empty()) return false;
  const TurnResult& first = turns.front();
  double turn1 = first.compiled && first.correct && !first.decoy ? first.speedup : 0.0;
  double best = best_speedup(turns);
  return turn1 > 0 && best >= p.min_best && best >= p.ratio * turn1;
}

VerificationVerdict judge_verification(const std::vector<TurnResult>& runs, double turn1_speedup,
                                       const VerificationParams& p) {
  VerificationVerdict v;
  v.worst_speedup = runs.empty() ? 0.0 : 1e300;
  for (const auto& r : runs) {
    bool ok = r.compiled && r.correct && !r.decoy;
    v.correct.push_back(ok);
    v.speedups.push_back(ok ? r.speedup : 0.0);
    v.worst_speedup = std::min(v.worst_speedup, ok ? r.speedup : 0.0);
  }
  char buf[160];
  if (runs.empty()) {
    v.reason = "no verification run";
  } else if (std::find(v.correct.begin(), v.correct.end(), false) != v.correct.end()) {
    v.reason = "a verification run was not correct";
  } else if (v.worst_speedup < p.min_speedup) {
    std::snprintf(buf, sizeof buf, "speedup %.4g < %.4g", v.worst_speedup, p.min_speedup);
    v.reason = buf;
  } else if (v.worst_speedup < p.min_ratio * turn1_speedup) {
    std::snprintf(buf, sizeof buf, "speedup %.4g < %.4g x turn-1 speedup %.4g", v.worst_speedup, p.min_ratio,
                  turn1_speedup);
    v.reason = buf;
  } else {
    v.accepted = true;
    v.reason = "accepted";
  }
  if (!v.accepted && runs.empty()) v.worst_speedup = 0;
  return v;
}

std::optional<size_t> pick_staged(const std::vector<VerificationVerdict>& verdicts) {
  std::optional<size_t> best;
  for (size_t i = 0; i < verdicts.size(); ++i) {
    if (!verdicts[i].accepted) continue;
    if (!best || verdicts[i].worst_speedup > verdicts[*best].worst_speedup) best = i;
  }
  return best;
}

}  // namespace vinci

// The selection agent against the real sim backbone and a real BM25 index: caps, modes, and the
// candidates it shows the reranker.
#include <gtest/gtest.h>

#include "agents/agents.h"
#include "agents/sim_backbone.h"

namespace vinci {
namespace {

// Candidate features: a constant vector; the backbone's scores then differ only by its weights.
class ConstantFeaturizer : public SkillFeaturizer {
 public:
  std::vector<float> candidate_features(const Skill&, double score) const override {
    return {1.0f, static_cast<float>(score), 0.5f};
  }
};

SkillLibrary library_of(int n) {
  SkillLibrary lib;
  for (int i = 0; i < n; ++i) {
    Skill s;
    s.name = "skill_" + std::to_string(i);
    s.description = i % 2 ? "softmax rows with warp shuffles" : "tile the gemm in shared memory";
    s.scope = "general";
    s.tags = {"gemm", "softmax", "tag" + std::to_string(i)};
    s.content = "## Motivation\nm\n## Key Idea\nk " + std::to_string(i) + "\n## Example\ne";
    lib.add(s);
  }
  return lib;
}

std::unique_ptr<SimBackbone> backbone() {
  SimBackboneConfig c;
  c.shape.task_dim = 4;
  c.shape.head_sizes = {2, 3};
  c.shape.feedback_dim = kFeedbackDim;
  c.shape.candidate_dim = 3;
  c.init_seed = 5;
  return std::move(SimBackbone::create(c)).value();
}

TEST(SelectionAgent, RerankPicksAtMostTheCapFromBm25Candidates) {
  SkillLibrary lib = library_of(30);
  Bm25Index index;
  for (const auto& s : lib.skills()) index.add_text(skill_document_text(s));
  auto bb = backbone();
  ConstantFeaturizer f;
  SelectionParams p;
  p.recall_top = 20;
  for (int32_t cap : {0, 1, 3, 5}) {
    p.max_skills = cap;
    auto d = select_skills(*bb, lib, index, "softmax over rows", {0, 1, 0, 1}, f, p, RngKey::root(1).with("cap", cap),
                           false, 0);
    ASSERT_TRUE(d.ok()) << d.status().to_string();
    EXPECT_EQ(d->recall.hits.size(), 20u);  // top-20 recall
    EXPECT_LE(static_cast<int32_t>(d->selected.size()), cap);
    EXPECT_EQ(static_cast<int32_t>(d->selected.size()), cap);  // 20 candidates: the cap binds
    for (const auto& name : d->selected) {
      bool in_recall = false;
      for (const auto& h : d->recall.hits) in_recall |= lib.at(h.doc).name == name;
      EXPECT_TRUE(in_recall) << name;
    }
  }
}

TEST(SelectionAgent, Bm25OnlyTakesTheTopScoresWithoutSampling) {
  SkillLibrary lib = library_of(10);
  Bm25Index index;
  for (const auto& s : lib.skills()) index.add_text(skill_document_text(s));
  auto bb = backbone();
  Digest before = bb->parameter_digest();
  ConstantFeaturizer f;
  SelectionParams p;
  p.mode = SelectionMode::kBm25Only;
  auto d = select_skills(*bb, lib, index, "softmax rows", {0, 0, 0, 0}, f, p, RngKey::root(2), false, 0);
  ASSERT_TRUE(d.ok());
  EXPECT_FALSE(d->sampled);
  ASSERT_EQ(d->selected.size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(d->selected[i], lib.at(d->recall.hits[i].doc).name);
  EXPECT_EQ(bb->parameter_digest(), before);
}

TEST(SelectionAgent, NoneModeAndEmptyLibrarySelectNothing) {
  SkillLibrary lib = library_of(5), empty;
  Bm25Index index, empty_index;
  for (const auto& s : lib.skills()) index.add_text(skill_document_text(s));
  auto bb = backbone();
  ConstantFeaturizer f;
  SelectionParams p;
  p.mode = SelectionMode::kNone;
  auto a = select_skills(*bb, lib, index, "gemm", {0, 0, 0, 0}, f, p, RngKey::root(3), false, 0);
  ASSERT_TRUE(a.ok());
  EXPECT_TRUE(a->selected.empty());
  EXPECT_FALSE(a->sampled);
  p.mode = SelectionMode::kRerank;
  auto b = select_skills(*bb, empty, empty_index, "gemm", {0, 0, 0, 0}, f, p, RngKey::root(3), false, 0);
  ASSERT_TRUE(b.ok());
  EXPECT_TRUE(b->selected.empty());
}

TEST(SelectionAgent, NothingScoresFallsBackToAKeyedRandomSample) {
  SkillLibrary lib = library_of(6);
  Bm25Index index;
  for (const auto& s : lib.skills()) index.add_text(skill_document_text(s));
  auto bb = backbone();
  ConstantFeaturizer f;
  SelectionParams p;
  auto d1 = select_skills(*bb, lib, index, "zzz qqq", {0, 0, 0, 0}, f, p, RngKey::root(4), false, 0);
  auto d2 = select_skills(*bb, lib, index, "zzz qqq", {0, 0, 0, 0}, f, p, RngKey::root(4), false, 0);
  ASSERT_TRUE(d1.ok() && d2.ok());
  EXPECT_TRUE(d1->recall.random_fallback);
  EXPECT_EQ(d1->recall.hits.size(), 6u);
  EXPECT_EQ(d1->selected, d2->selected);
  EXPECT_EQ(d1->selected.size(), 3u);
}

}  // namespace
}  // namespace vinci

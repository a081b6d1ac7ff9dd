#include "agents/bm25.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/atomic_file.h"

namespace vinci {
namespace {

using Tokens = std::vector<std::string>;

// |a - b| <= rel * max(|a|, |b|); a zero must be matched by an exact zero.
::testing::AssertionResult near_relative(double a, double b, double rel) {
  double scale = std::max(std::fabs(a), std::fabs(b));
  if (std::fabs(a - b) <= rel * scale) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << a << " vs " << b << " differ by " << std::fabs(a - b) << " ("
                                       << (scale > 0 ? std::fabs(a - b) / scale : 0) << " relative)";
}

TEST(Bm25Tokenize, LowerCasesSplitsOnUnderscoreDashSlashAndDropsPunctuation) {
  EXPECT_EQ(bm25_tokenize("Warp_Shuffle-Reduce/Sum"), (Tokens{"warp", "shuffle", "reduce", "sum"}));
  // Other punctuation is removed without splitting: "float4*" -> "float4", "x.y" -> "xy".
  EXPECT_EQ(bm25_tokenize("reinterpret_cast<float4*>(x.y); don't!"), (Tokens{"reinterpret", "castfloat4xy", "dont"}));
  EXPECT_EQ(bm25_tokenize("  a\tb\nc\r\v\fd\x1f"
                          "e  "),
            (Tokens{"a", "b", "c", "d", "e"}));
  // Python's str.split() also splits on Unicode spaces (U+00A0, U+2003, U+3000).
  EXPECT_EQ(bm25_tokenize("a\u00a0b\u2003c\u3000d"), (Tokens{"a", "b", "c", "d"}));
  // Other non-ASCII text is kept as is (an em dash is not punctuation in string.punctuation).
  EXPECT_EQ(bm25_tokenize("x \u2014 y"), (Tokens{"x", "\u2014", "y"}));
  EXPECT_EQ(bm25_tokenize(""), Tokens{});
  EXPECT_EQ(bm25_tokenize("_-/ ,.;"), Tokens{});
}

// A corpus small enough to score by hand. N = 3 documents:
//   d0 = warp shuffle reduce          |d0| = 3
//   d1 = shared memory tiling tiling  |d1| = 4
//   d2 = warp tiling                  |d2| = 2
// avgdl = 9 / 3 = 3.
// Document frequencies: warp 2, tiling 2; shuffle, reduce, shared, memory 1.
//   idf_raw(n=1) = ln(3 - 1 + 0.5) - ln(1 + 0.5) = ln 2.5 - ln 1.5 =  0.5108256237659907
//   idf_raw(n=2) = ln(3 - 2 + 0.5) - ln(2 + 0.5) = ln 1.5 - ln 2.5 = -0.5108256237659907
// average_idf sums all six raw idfs, the negative ones too: (4 - 2) * 0.5108... / 6
//   = 0.1702752079219969, and the floor for warp and tiling is
//   eps = 0.25 * 0.1702752079219969 = 0.04256880198049923.
// K_d = 1.5 * (0.25 + 0.75 * |d| / 3): K_0 = 1.5, K_1 = 1.875, K_2 = 1.125.
class HandComputed : public ::testing::Test {
 protected:
  void SetUp() override {
    index_.add({"warp", "shuffle", "reduce"});
    index_.add({"shared", "memory", "tiling", "tiling"});
    index_.add({"warp", "tiling"});
  }
  Bm25Index index_;
  const double idf1_ = std::log(2.5) - std::log(1.5);
  const double eps_ = 0.25 * ((4 * idf1_ - 2 * idf1_) / 6);
};

TEST_F(HandComputed, Statistics) {
  EXPECT_DOUBLE_EQ(index_.average_document_length(), 3.0);
  EXPECT_TRUE(near_relative(index_.average_idf(), 0.1702752079219969, 1e-15));
  EXPECT_TRUE(near_relative(index_.idf("shuffle"), 0.5108256237659907, 1e-15));
  EXPECT_TRUE(near_relative(index_.idf("warp"), 0.04256880198049923, 1e-15));
  EXPECT_EQ(index_.idf("absent"), 0.0);
}

TEST_F(HandComputed, Scores) {
  // "tiling": d1 has tf 2: eps * (2 * 2.5) / (2 + 1.875) = eps * 1.2903... = 0.054927486426450615
  //           d2 has tf 1: eps * 2.5 / (1 + 1.125)        = eps * 1.1764... = 0.05008094350646968
  auto s = index_.scores({"tiling"});
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[0], 0.0);
  EXPECT_TRUE(near_relative(s[1], 0.054927486426450615, 1e-15));
  EXPECT_TRUE(near_relative(s[2], 0.05008094350646968, 1e-15));
  EXPECT_TRUE(near_relative(s[1], eps_ * 5.0 / 3.875, 1e-15));
  // "shuffle reduce" on d0: each term idf1 * 2.5 / (1 + 1.5) = idf1, so 2 * idf1.
  s = index_.scores({"shuffle", "reduce"});
  EXPECT_TRUE(near_relative(s[0], 1.0216512475319814, 1e-15));
  EXPECT_EQ(s[1], 0.0);
  // "warp memory": d0 gets eps (tf 1, K 1.5); d1 gets idf1 * 2.5 / 2.875 = 0.44419619457912235;
  // d2 gets warp: eps * 2.5 / 2.125.
  s = index_.scores({"warp", "memory"});
  EXPECT_TRUE(near_relative(s[0], 0.04256880198049923, 1e-15));
  EXPECT_TRUE(near_relative(s[1], 0.44419619457912235, 1e-15));
  EXPECT_TRUE(near_relative(s[2], 0.05008094350646968, 1e-15));
  // A repeated query token counts twice (rank_bm25 loops over query tokens).
  s = index_.scores({"tiling", "tiling"});
  EXPECT_TRUE(near_relative(s[1], 0.10985497285290123, 1e-15));
  EXPECT_TRUE(near_relative(s[2], 0.10016188701293936, 1e-15));
}

TEST_F(HandComputed, TopKRanksByScoreAndDropsZeros) {
  auto hits = index_.top_k({"warp", "memory"}, 20);
  ASSERT_EQ(hits.size(), 3u);
  EXPECT_EQ(hits[0].doc, 1u);  // 0.444
  EXPECT_EQ(hits[1].doc, 2u);  // 0.0501
  EXPECT_EQ(hits[2].doc, 0u);  // 0.0426
  hits = index_.top_k({"shuffle"}, 20);
  ASSERT_EQ(hits.size(), 1u);  // d1 and d2 score 0 and are not hits
  EXPECT_EQ(hits[0].doc, 0u);
  EXPECT_TRUE(index_.top_k({"absent"}, 20).empty());
  EXPECT_EQ(index_.top_k({"warp", "memory"}, 1).size(), 1u);
  EXPECT_TRUE(index_.top_k({"warp"}, 0).empty());
}

TEST(Bm25, TiesGoToTheEarlierDocument) {
  Bm25Index index;
  index.add({"x", "pad"});
  index.add({"y", "tile", "tile"});
  index.add({"tile", "tile", "y"});  // same length and tf as doc 1: equal score
  index.add({"tile", "tile", "z"});
  auto hits = index.top_k({"tile"}, 2);
  ASSERT_EQ(hits.size(), 2u);
  EXPECT_EQ(hits[0].score, hits[1].score);
  EXPECT_EQ(hits[0].doc, 1u);
  EXPECT_EQ(hits[1].doc, 2u);
}

// Adding documents one at a time gives the same bits as building the index at once, for every
// prefix (idf depends on N and average_idf on the whole vocabulary, so all scores move).
TEST(Bm25, GrowingEqualsFreshIndex) {
  std::vector<std::string> docs = {"tiling shared memory gemm",
                                   "warp shuffle reduction sum",
                                   "online softmax fusion",
                                   "vectorized float4 loads elementwise",
                                   "tiling tiling bank conflicts padding",
                                   "tensor cores wmma gemm half",
                                   "occupancy launch bounds registers",
                                   "softmax warp shuffle"};
  std::vector<Tokens> queries = {bm25_tokenize("gemm tiling with shared memory"),
                                 bm25_tokenize("softmax warp reduction"), bm25_tokenize("float4 float4 loads")};
  Bm25Index grown;
  for (size_t n = 1; n <= docs.size(); ++n) {
    grown.add_text(docs[n - 1]);
    Bm25Index fresh;
    for (size_t i = 0; i < n; ++i) fresh.add_text(docs[i]);
    for (const auto& q : queries) {
      EXPECT_EQ(grown.scores(q), fresh.scores(q)) << "prefix " << n;
      EXPECT_EQ(grown.top_k(q, 3), fresh.top_k(q, 3)) << "prefix " << n;
    }
    EXPECT_EQ(grown.average_idf(), fresh.average_idf());
  }
}

TEST(Bm25, RecallFallsBackToAKeyedSampleWhenNothingScores) {
  Bm25Index index;
  for (int i = 0; i < 50; ++i) index.add_text("skill number " + std::to_string(i));
  RngKey key = RngKey::root(7).with("purpose", "bm25_fallback").with("task", "L1_001");
  Bm25Recall a = bm25_recall(index, "nothing matches here", 20, key);
  Bm25Recall b = bm25_recall(index, "nothing matches here", 20, key);
  ASSERT_TRUE(a.random_fallback);
  ASSERT_EQ(a.hits.size(), 20u);
  EXPECT_EQ(a.hits, b.hits);  // same key, same sample
  std::set<uint32_t> distinct;
  for (const auto& h : a.hits) {
    EXPECT_LT(h.doc, 50u);
    EXPECT_EQ(h.score, 0.0);
    distinct.insert(h.doc);
  }
  EXPECT_EQ(distinct.size(), 20u);
  Bm25Recall other = bm25_recall(index, "nothing", 20, RngKey::root(8).with("purpose", "x"));
  EXPECT_NE(a.hits, other.hits);
  // Fewer documents than k: all of them, each once.
  Bm25Index small;
  small.add_text("a");
  small.add_text("b");
  Bm25Recall all = bm25_recall(small, "zzz", 20, key);
  ASSERT_EQ(all.hits.size(), 2u);
  EXPECT_NE(all.hits[0].doc, all.hits[1].doc);
  // A query that scores does not fall back.
  Bm25Recall scored = bm25_recall(index, "number 7", 20, key);
  EXPECT_FALSE(scored.random_fallback);
  EXPECT_EQ(scored.hits.front().doc, 7u);
  EXPECT_TRUE(bm25_recall(index, "x", 0, key).hits.empty());
  Bm25Index empty;
  EXPECT_TRUE(bm25_recall(empty, "x", 20, key).hits.empty());
}

// tests/agents/data/bm25_fixture.json was written by make_bm25_fixture.py with rank_bm25 0.2.2.
TEST(Bm25, EqualsRankBm25OnTheFixture) {
  auto text = read_file(VINCI_SOURCE_DIR "/tests/agents/data/bm25_fixture.json");
  ASSERT_TRUE(text.ok()) << text.status().to_string();
  auto fixture = nlohmann::json::parse(*text);
  size_t checked = 0, bit_equal = 0, distinct_query_scores = 0, distinct_bit_equal = 0;
  for (const auto& c : fixture["cases"]) {
    SCOPED_TRACE(c["name"].get<std::string>());
    Bm25Params params{c["params"]["k1"].get<double>(), c["params"]["b"].get<double>(),
                      c["params"]["epsilon"].get<double>()};
    const auto& docs = c["documents"];
    for (size_t i = 0; i < docs.size(); ++i) {
      ASSERT_EQ(bm25_tokenize(docs[i].get<std::string>()), c["tokens"][i].get<Tokens>()) << "document " << i;
    }
    for (const auto& check : c["checks"]) {
      size_t prefix = check["prefix"].get<size_t>();
      Bm25Index index(params);
      for (size_t i = 0; i < prefix; ++i) index.add_text(docs[i].get<std::string>());
      Tokens q = bm25_tokenize(check["query"].get<std::string>());
      ASSERT_EQ(q, check["query_tokens"].get<Tokens>());
      EXPECT_TRUE(near_relative(index.average_idf(), check["average_idf"].get<double>(), 1e-12));
      EXPECT_EQ(index.average_document_length(), check["avgdl"].get<double>());
      auto want = check["scores"].get<std::vector<double>>();
      auto got = index.scores(q);
      ASSERT_EQ(got.size(), want.size());
      bool distinct = std::set<std::string>(q.begin(), q.end()).size() == q.size();
      for (size_t d = 0; d < want.size(); ++d) {
        EXPECT_TRUE(near_relative(got[d], want[d], 1e-12))
            << "prefix " << prefix << " query \"" << check["query"] << "\" document " << d;
        ++checked;
        if (got[d] == want[d]) ++bit_equal;
        if (distinct && want[d] != 0) {
          ++distinct_query_scores;
          if (got[d] == want[d]) ++distinct_bit_equal;
        }
      }
    }
  }
  EXPECT_GT(checked, 1000u);
  // Reported, not asserted: bit equality also needs the same libm as the Python that wrote the
  // fixture.
  std::printf(
      "fixture: %zu scores checked, %zu bit-equal; of %zu non-zero scores of queries without "
      "repeated tokens, %zu bit-equal\n",
      checked, bit_equal, distinct_query_scores, distinct_bit_equal);
}

}  // namespace
}  // namespace vinci

namespace vinci {
namespace {

// top_k against a full sort of scores(), on random corpora with many ties (a 12-word vocabulary)
// and every k from 1 to past the corpus size.
TEST(Bm25, TopKEqualsFullSortOfScores) {
  const uint64_t seed = 20261202;
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  const char* words[] = {"tile", "warp", "float4", "smem", "fuse", "exp", "max", "sum", "bank", "pad", "grid", "lane"};
  Stream s(RngKey::root(seed).with("purpose", "bm25_top_k_test"));
  for (int round = 0; round < 20; ++round) {
    Bm25Index index;
    size_t n_docs = 1 + s.below(60);
    for (size_t i = 0; i < n_docs; ++i) {
      std::vector<std::string> doc;
      for (uint64_t j = 0, len = s.below(8); j < len; ++j) doc.push_back(words[s.below(12)]);
      index.add(doc);
    }
    std::vector<std::string> query;
    for (uint64_t j = 0, len = 1 + s.below(5); j < len; ++j) query.push_back(words[s.below(12)]);
    auto scores = index.scores(query);
    std::vector<Bm25Hit> all;
    for (uint32_t d = 0; d < scores.size(); ++d) {
      if (scores[d] > 0) all.push_back({d, scores[d]});
    }
    std::stable_sort(all.begin(), all.end(), [](const Bm25Hit& a, const Bm25Hit& b) { return a.score > b.score; });
    for (size_t k = 1; k <= n_docs + 2; ++k) {
      std::vector<Bm25Hit> want(all.begin(), all.begin() + std::min(k, all.size()));
      ASSERT_EQ(index.top_k(query, k), want) << "seed " << seed << " round " << round << " k " << k;
    }
  }
}

}  // namespace
}  // namespace vinci

namespace vinci {
namespace {

TEST(Bm25, ParameterValidationNamesTheParameter) {
  EXPECT_TRUE(validate_bm25_params({}).ok());
  EXPECT_TRUE(validate_bm25_params({1.2, 1.0, 0.0}).ok());
  EXPECT_EQ(validate_bm25_params({-1, 0.75, 0.25}).message(),
            "BM25 parameter k1: expected a finite number >= 0, found -1");
  EXPECT_EQ(validate_bm25_params({1.5, 1.5, 0.25}).message(),
            "BM25 parameter b: expected a number in [0, 1], found 1.5");
  EXPECT_FALSE(validate_bm25_params({1.5, 0.75, std::nan("")}).ok());
}

}  // namespace
}  // namespace vinci

namespace vinci {
namespace {

TEST(Bm25, IndexNewSkillsFollowsAGrowingLibrary) {
  SkillLibrary lib;
  Skill s;
  s.scope = "general";
  s.name = "online_softmax";
  s.content = "running max and sum";
  lib.add(s);
  Bm25Index grown;
  index_new_skills(lib, &grown);
  EXPECT_EQ(grown.size(), 1u);
  s.name = "warp_shuffle";
  s.content = "shuffle down reduction";
  lib.add(s);
  s.name = "online softmax";  // renamed online_softmax_1 by the library
  s.content = "fused";
  lib.add(s);
  index_new_skills(lib, &grown);
  index_new_skills(lib, &grown);  // nothing new: no change
  ASSERT_EQ(grown.size(), 3u);
  Bm25Index fresh;
  for (const Skill& k : lib.skills()) fresh.add_text(skill_document_text(k));
  auto q = bm25_tokenize("fused online softmax reduction");
  EXPECT_EQ(grown.scores(q), fresh.scores(q));
  auto hits = grown.top_k(q, 3);
  ASSERT_FALSE(hits.empty());
  // "fused" is only in document 2 and "reduction" only in document 1 (idf ln(2.5/1.5) each);
  // "online" and "softmax" are in 2 of 3 documents, so both get the floor. Document 2 (4 tokens)
  // holds "fused" and both floored words, document 1 (5 tokens) only "reduction", so document 2
  // ranks first; ids are library indices.
  EXPECT_EQ(hits[0].doc, 2u);
  EXPECT_EQ(lib.at(hits[0].doc).name, "online_softmax_1");
}

}  // namespace
}  // namespace vinci

// BM25 recall over the skill library, scoring exactly as rank_bm25's BM25Okapi.
//
// Scoring (rank_bm25 0.2.2, BM25Okapi; N documents, avgdl = total tokens / N, computed once per
// change of the corpus):
//
//   idf_raw(t) = ln(N - n_t + 0.5) - ln(n_t + 0.5)          n_t = documents containing t
//   average_idf = (sum of idf_raw over every term of the corpus, negative ones included,
//                  summed in order of the terms' first appearance) / vocabulary size
//   idf(t)     = idf_raw(t) if idf_raw(t) >= 0, else epsilon * average_idf
//                (a term in more than half the documents; idf_raw == 0 stays 0)
//   K_d        = k1 * ((1 - b) + (b * |d|) / avgdl)
//   score(q,d) = sum over query tokens t, repeats included, of
//                idf(t) * ((tf(t,d) * (k1 + 1)) / (tf(t,d) + K_d));   unknown terms add 0
//
// The parenthesisation is the order rank_bm25's numpy expression evaluates in, so a query whose
// tokens are all distinct gets the same double, bit for bit, as rank_bm25 on the same machine
// (same libm). A query token that repeats adds its contribution once multiplied by its count here
// and count times in rank_bm25: the results can differ in the last bit (tested to 1e-12 relative).
//
// Incremental growth: idf depends on N and average_idf on every term, so adding a document changes
// every score. The index keeps only counts (postings, document lengths) and recomputes the derived
// statistics (avgdl, K_d, average_idf) on the first query after a change. The statistics are a pure
// function of the documents in insertion order, so an index grown one document at a time answers
// every query with the same bits as a fresh index built from the same documents.
//
// Ranking: documents with score > 0, by score descending; equal scores are ordered by insertion
// order (the lower document id first), so a library's earlier skill wins a tie.
#ifndef VINCI_AGENTS_BM25_H_
#define VINCI_AGENTS_BM25_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "agents/skill_library.h"
#include "core/rng.h"
#include "core/status.h"

namespace vinci {

// daVinci-kernel's tokenizer: ASCII letters lower-cased; `_`, `-` and `/` become spaces; the other
// ASCII punctuation characters (Python's string.punctuation) are removed; the result is split on
// whitespace as Python's str.split() does (ASCII \t \n \v \f \r, space, \x1c-\x1f, and the
// Unicode spaces U+0085, U+00A0, U+1680, U+2000-U+200A, U+2028, U+2029, U+202F, U+205F, U+3000).
// Unlike Python's str.lower(), non-ASCII letters keep their case.
std::vector<std::string> bm25_tokenize(std::string_view text);

struct Bm25Params {
  double k1 = 1.5;
  double b = 0.75;
  double epsilon = 0.25;
};

// Ok when k1 >= 0, 0 <= b <= 1 and epsilon is finite (so every denominator tf + K_d is positive);
// otherwise InvalidArgument naming the parameter, what was expected and the value found.
Status validate_bm25_params(const Bm25Params& params);

struct Bm25Hit {
  uint32_t doc = 0;  // insertion index
  double score = 0;
  friend bool operator==(const Bm25Hit& a, const Bm25Hit& b) { return a.doc == b.doc && a.score == b.score; }
};

// An inverted index (per-term postings of (document, term frequency)) that grows by appending.
// Not safe for concurrent use: queries refresh statistics and reuse a scratch buffer. Give each
// thread its own index.
class Bm25Index {
 public:
  // REQUIRES: validate_bm25_params(params).ok()
  explicit Bm25Index(Bm25Params params = {});

  // Appends a document; returns its id (0, 1, 2, ... in insertion order).
  uint32_t add(const std::vector<std::string>& tokens);
  uint32_t add_text(std::string_view text) { return add(bm25_tokenize(text)); }

  size_t size() const { return doc_len_.size(); }
  size_t vocabulary_size() const { return postings_.size(); }
  const Bm25Params& params() const { return params_; }

  // rank_bm25's idf[t] (0 for a term not in the corpus), average_idf and avgdl.
  double idf(std::string_view term);
  double average_idf();
  double average_document_length();
  // Documents containing the term (0 for an unknown term).
  size_t document_frequency(std::string_view term) const;

  // The score of every document, as rank_bm25's get_scores(query).
  std::vector<double> scores(const std::vector<std::string>& query);
  // At most k documents with score > 0, best first (ties: lower id first).
  std::vector<Bm25Hit> top_k(const std::vector<std::string>& query, size_t k);

 private:
  struct Postings {
    std::vector<uint32_t> docs;  // ascending
    std::vector<uint32_t> tfs;
    // Cache of (tf * (k1 + 1)) / (tf + K_d), valid while ratio_epoch == epoch_: one value per
    // posting, or, for a dense term (in more than a quarter of the documents), one per document
    // with 0 where the term is absent, so scoring it is a branch-free vector loop. Built on the
    // first query that needs it after a change; a query then does one multiply-add per posting.
    // TODO(perf): caches of terms no longer queried are kept until the next change.
    std::vector<double> ratio;
    uint64_t ratio_epoch = 0;
    bool dense = false;
  };
  struct QueryTerm {
    uint32_t term;
    uint32_t count;  // occurrences in the query
  };

  void refresh();
  const Postings& cached(uint32_t term);
  double idf_of(uint32_t term) const;  // REQUIRES: statistics fresh
  std::vector<QueryTerm> query_terms(const std::vector<std::string>& query) const;
  // Adds each query term's contributions into acc_ (which must be all zero before).
  void accumulate(const std::vector<QueryTerm>& terms);

  Bm25Params params_;
  std::unordered_map<std::string, uint32_t> term_ids_;  // lookups only; never iterated
  std::vector<Postings> postings_;                      // by term id = order of first appearance
  std::vector<uint32_t> doc_len_;
  uint64_t total_len_ = 0;

  // Derived statistics, valid when fresh_.
  bool fresh_ = false;
  uint64_t epoch_ = 0;  // advances at every refresh; stamps the ratio caches
  double avgdl_ = 0;
  double average_idf_ = 0;
  std::vector<double> k_d_;  // K_d per document

  std::vector<double> acc_;  // scratch: one score per document, all zero between queries
};

// Appends to `index` the documents (skill_document_text) of the library's skills it does not hold
// yet, so document id i is library.at(i). Libraries only grow by appending (SkillLibrary::add), so
// calling this after each step's additions keeps the two in step without a rebuild.
// REQUIRES: index->size() <= library.size(), and the index holds the library's first skills.
void index_new_skills(const SkillLibrary& library, Bm25Index* index);

// What BM25 recall returns for one query: the hits, or, when no document scores above zero, a
// keyed random sample of documents (score 0) so an agent still sees candidates.
struct Bm25Recall {
  std::vector<Bm25Hit> hits;
  bool random_fallback = false;
};

// top_k(bm25_tokenize(query_text), k); when that is empty and the index is not, min(k, size())
// distinct documents drawn without replacement from Stream(fallback_key) (a partial
// Fisher-Yates shuffle: draw i picks below(size() - i)), in draw order.
Bm25Recall bm25_recall(Bm25Index& index, std::string_view query_text, size_t k, const RngKey& fallback_key);

}  // namespace vinci

#endif  // VINCI_AGENTS_BM25_H_

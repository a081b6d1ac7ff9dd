#include "agents/bm25.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include "core/check.h"

namespace vinci {
namespace {

// Python's string.punctuation minus `_ - /`, which become spaces instead.
bool is_removed_punctuation(unsigned char c) {
  switch (c) {
    case '!':
    case '"':
    case '#':
    case '$':
    case '%':
    case '&':
    case '\'':
    case '(':
    case ')':
    case '*':
    case '+':
    case ',':
    case '.':
    case ':':
    case ';':
    case '<':
    case '=':
    case '>':
    case '?':
    case '@':
    case '[':
    case '\\':
    case ']':
    case '^':
    case '`':
    case '{':
    case '|':
    case '}':
    case '~': return true;
    default: return false;
  }
}

bool is_ascii_split_space(unsigned char c) { return c == ' ' || (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x1F); }

// Byte length of a Python-whitespace code point starting at s[i] (UTF-8), or 0.
size_t unicode_space_length(std::string_view s, size_t i) {
  auto at = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  size_t left = s.size() - i;
  unsigned char c = at(i);
  if (c == 0xC2 && left >= 2 && (at(i + 1) == 0x85 || at(i + 1) == 0xA0)) return 2;
  if (left < 3) return 0;
  unsigned char c1 = at(i + 1), c2 = at(i + 2);
  if (c == 0xE1 && c1 == 0x9A && c2 == 0x80) return 3;  // U+1680
  if (c == 0xE2 && c1 == 0x80) {
    if (c2 >= 0x80 && c2 <= 0x8A) return 3;                // U+2000..U+200A
    if (c2 == 0xA8 || c2 == 0xA9 || c2 == 0xAF) return 3;  // U+2028, U+2029, U+202F
  }
  if (c == 0xE2 && c1 == 0x81 && c2 == 0x9F) return 3;  // U+205F
  if (c == 0xE3 && c1 == 0x80 && c2 == 0x80) return 3;  // U+3000
  return 0;
}

}  // namespace

std::vector<std::string> bm25_tokenize(std::string_view text) {
  std::vector<std::string> tokens;
  std::string cur;
  auto flush = [&] {
    if (!cur.empty()) tokens.push_back(std::move(cur));
    cur.clear();
  };
  for (size_t i = 0; i < text.size();) {
    unsigned char c = static_cast<unsigned char>(text[i]);
    if (c >= 0x80) {
      size_t n = unicode_space_length(text, i);
      if (n) {
        flush();
        i += n;
      } else {
        cur.push_back(static_cast<char>(c));
        ++i;
      }
      continue;
    }
    ++i;
    if (c == '_' || c == '-' || c == '/' || is_ascii_split_space(c)) {
      flush();
    } else if (is_removed_punctuation(c)) {
      // Removed, not a separator: "don't" -> "dont", "x.y" -> "xy".
    } else {
      if (c >= 'A' && c <= 'Z') c = static_cast<unsigned char>(c - 'A' + 'a');
      cur.push_back(static_cast<char>(c));
    }
  }
  flush();
  return tokens;
}

Status validate_bm25_params(const Bm25Params& p) {
  auto bad = [](const char* name, const char* expected, double v) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.17g", v);
    return invalid_argument(std::string("BM25 parameter ") + name + ": expected " + expected + ", found " + buf);
  };
  if (!(p.k1 >= 0 && std::isfinite(p.k1))) return bad("k1", "a finite number >= 0", p.k1);
  if (!(p.b >= 0 && p.b <= 1)) return bad("b", "a number in [0, 1]", p.b);
  if (!std::isfinite(p.epsilon)) return bad("epsilon", "a finite number", p.epsilon);
  return Status();
}

Bm25Index::Bm25Index(Bm25Params params) : params_(params) {
  Status st = validate_bm25_params(params);
  VINCI_REQUIRE(st.ok(), st.message());
}

uint32_t Bm25Index::add(const std::vector<std::string>& tokens) {
  VINCI_REQUIRE(doc_len_.size() < UINT32_MAX, "BM25 index is full");
  uint32_t doc = static_cast<uint32_t>(doc_len_.size());
  // Term frequencies in order of first appearance in the document, which with the corpus order
  // fixes the term ids, and so the order average_idf is summed in (rank_bm25's dict order).
  std::vector<std::pair<uint32_t, uint32_t>> freqs;
  for (const std::string& tok : tokens) {
    auto [it, fresh] = term_ids_.emplace(tok, static_cast<uint32_t>(postings_.size()));
    if (fresh) postings_.emplace_back();
    Postings& p = postings_[it->second];
    if (p.docs.empty() || p.docs.back() != doc) {
      p.docs.push_back(doc);
      p.tfs.push_back(1);
    } else {
      ++p.tfs.back();
    }
  }
  doc_len_.push_back(static_cast<uint32_t>(tokens.size()));
  total_len_ += tokens.size();
  acc_.push_back(0.0);
  fresh_ = false;
  return doc;
}

void Bm25Index::refresh() {
  if (fresh_) return;
  const double n_docs = static_cast<double>(doc_len_.size());
  avgdl_ = doc_len_.empty() ? 0.0 : static_cast<double>(total_len_) / n_docs;
  const double k1 = params_.k1, b = params_.b;
  k_d_.resize(doc_len_.size());
  for (size_t d = 0; d < doc_len_.size(); ++d) {
    k_d_[d] = k1 * ((1.0 - b) + (b * static_cast<double>(doc_len_[d])) / avgdl_);
  }
  // idf_raw depends on the term only through its document frequency, and most terms share a few
  // small frequencies, so each distinct frequency's value is computed once (same bits) and the sum
  // still runs over the terms in first-appearance order.
  std::vector<double> idf_by_df(doc_len_.size() + 1, 0.0);
  std::vector<bool> known(doc_len_.size() + 1, false);
  double idf_sum = 0;
  for (const Postings& p : postings_) {
    size_t df = p.docs.size();
    if (!known[df]) {
      double n = static_cast<double>(df);
      idf_by_df[df] = std::log(n_docs - n + 0.5) - std::log(n + 0.5);
      known[df] = true;
    }
    idf_sum += idf_by_df[df];
  }
  average_idf_ = postings_.empty() ? 0.0 : idf_sum / static_cast<double>(postings_.size());
  ++epoch_;
  fresh_ = true;
}

double Bm25Index::idf_of(uint32_t term) const {
  double n_docs = static_cast<double>(doc_len_.size());
  double n = static_cast<double>(postings_[term].docs.size());
  double idf = std::log(n_docs - n + 0.5) - std::log(n + 0.5);
  return idf < 0 ? params_.epsilon * average_idf_ : idf;
}

double Bm25Index::idf(std::string_view term) {
  refresh();
  auto it = term_ids_.find(std::string(term));
  return it == term_ids_.end() ? 0.0 : idf_of(it->second);
}

size_t Bm25Index::document_frequency(std::string_view term) const {
  auto it = term_ids_.find(std::string(term));
  return it == term_ids_.end() ? 0 : postings_[it->second].docs.size();
}

double Bm25Index::average_idf() {
  refresh();
  return average_idf_;
}

double Bm25Index::average_document_length() {
  refresh();
  return avgdl_;
}

std::vector<Bm25Index::QueryTerm> Bm25Index::query_terms(const std::vector<std::string>& query) const {
  std::vector<QueryTerm> terms;  // first-occurrence order; queries are short, so a linear scan
  for (const std::string& tok : query) {
    auto it = term_ids_.find(tok);
    if (it == term_ids_.end()) continue;  // idf 0: adds nothing
    auto same = std::find_if(terms.begin(), terms.end(), [&](const QueryTerm& q) { return q.term == it->second; });
    if (same != terms.end()) {
      ++same->count;
    } else {
      terms.push_back({it->second, 1});
    }
  }
  return terms;
}

const Bm25Index::Postings& Bm25Index::cached(uint32_t term) {
  Postings& p = postings_[term];
  if (p.ratio_epoch == epoch_) return p;
  const double k1_plus_1 = params_.k1 + 1.0;
  const size_t n = p.docs.size();
  // Dense when scoring every document costs less than the scattered per-posting loop; the factor
  // 4 is the measured cost ratio of a scattered to a streaming update (bench/agents).
  p.dense = n * 4 > doc_len_.size();
  p.ratio.assign(p.dense ? doc_len_.size() : n, 0.0);
  for (size_t i = 0; i < n; ++i) {
    double tf = static_cast<double>(p.tfs[i]);
    double r = (tf * k1_plus_1) / (tf + k_d_[p.docs[i]]);
    p.ratio[p.dense ? p.docs[i] : i] = r;
  }
  p.ratio_epoch = epoch_;
  return p;
}

namespace {

// acc[d] += count * (idf * ratio[d]) for every document; ratio is 0 where the term is absent, which
// adds +0.0 and leaves acc unchanged, bit for bit. count == 1 skips the multiply (exact anyway).
// Built for AVX2 and baseline x86-64; both give the same bits (no FMA: -ffp-contract=off).
__attribute__((target_clones("avx2", "default"))) void add_dense(double* __restrict acc, const double* __restrict ratio,
                                                                 size_t n, double idf, double count) {
  if (count == 1.0) {
    for (size_t d = 0; d < n; ++d) acc[d] += idf * ratio[d];
  } else {
    for (size_t d = 0; d < n; ++d) acc[d] += count * (idf * ratio[d]);
  }
}

void add_sparse(double* acc, const uint32_t* docs, const double* ratio, size_t n, double idf, double count) {
  if (count == 1.0) {
    for (size_t i = 0; i < n; ++i) acc[docs[i]] += idf * ratio[i];
  } else {
    for (size_t i = 0; i < n; ++i) acc[docs[i]] += count * (idf * ratio[i]);
  }
}

}  // namespace

void Bm25Index::accumulate(const std::vector<QueryTerm>& terms) {
  for (const QueryTerm& q : terms) {
    const Postings& p = cached(q.term);
    const double idf = idf_of(q.term);
    const double count = static_cast<double>(q.count);
    if (p.dense) {
      add_dense(acc_.data(), p.ratio.data(), acc_.size(), idf, count);
    } else {
      add_sparse(acc_.data(), p.docs.data(), p.ratio.data(), p.docs.size(), idf, count);
    }
  }
}

std::vector<double> Bm25Index::scores(const std::vector<std::string>& query) {
  refresh();
  accumulate(query_terms(query));
  std::vector<double> out(acc_.size(), 0.0);
  out.swap(acc_);  // acc_ is all zero again
  return out;
}

std::vector<Bm25Hit> Bm25Index::top_k(const std::vector<std::string>& query, size_t k) {
  if (k == 0) return {};
  refresh();
  accumulate(query_terms(query));
  // One pass over the scores keeps the k best in a heap whose front is the worst of them, so most
  // documents cost one comparison. With common terms in the query nearly every document scores,
  // so collecting all hits and selecting afterwards would cost an allocation and a sort of ~N.
  auto better = [](const Bm25Hit& a, const Bm25Hit& b) {
    return a.score != b.score ? a.score > b.score : a.doc < b.doc;
  };
  std::vector<Bm25Hit> heap;
  heap.reserve(std::min<size_t>(k, acc_.size()));
  const double* acc = acc_.data();
  const uint32_t n = static_cast<uint32_t>(acc_.size());
  uint32_t d = 0;
  for (; d < n && heap.size() < k; ++d) {
    if (acc[d] > 0.0) {
      heap.push_back({d, acc[d]});
      std::push_heap(heap.begin(), heap.end(), better);
    }
  }
  double worst = heap.size() == k ? heap.front().score : 0.0;
  for (; d < n; ++d) {
    // Documents are visited in increasing id, so one that only ties the worst kept score loses
    // the tie-break to it and never enters.
    if (acc[d] > worst) {
      std::pop_heap(heap.begin(), heap.end(), better);
      heap.back() = {d, acc[d]};
      std::push_heap(heap.begin(), heap.end(), better);
      worst = heap.front().score;
    }
  }
  std::fill(acc_.begin(), acc_.end(), 0.0);
  std::sort(heap.begin(), heap.end(), better);
  return heap;
}

void index_new_skills(const SkillLibrary& library, Bm25Index* index) {
  VINCI_REQUIRE(index->size() <= library.size(),
                "BM25 index holds " << index->size() << " documents, the library only " << library.size() << " skills");
  for (size_t i = index->size(); i < library.size(); ++i) {
    index->add_text(skill_document_text(library.at(i)));
  }
}

Bm25Recall bm25_recall(Bm25Index& index, std::string_view query_text, size_t k, const RngKey& fallback_key) {
  Bm25Recall out;
  out.hits = index.top_k(bm25_tokenize(query_text), k);
  if (!out.hits.empty() || index.size() == 0 || k == 0) return out;
  out.random_fallback = true;
  // Sparse partial Fisher-Yates: position i of the virtual permutation [0, N) swaps with
  // i + below(N - i); only the swapped positions are stored, so the cost is O(k log k).
  Stream stream(fallback_key);
  const uint64_t n = index.size();
  const uint64_t take = std::min<uint64_t>(k, n);
  std::map<uint64_t, uint64_t> moved;
  auto value_at = [&](uint64_t pos) {
    auto it = moved.find(pos);
    return it == moved.end() ? pos : it->second;
  };
  for (uint64_t i = 0; i < take; ++i) {
    uint64_t j = i + stream.below(n - i);
    uint64_t vi = value_at(i), vj = value_at(j);
    moved[i] = vj;
    moved[j] = vi;
    out.hits.push_back({static_cast<uint32_t>(vj), 0.0});
  }
  return out;
}

}  // namespace vinci

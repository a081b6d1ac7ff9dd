// BM25 recall latency: top-20 over synthetic libraries of 10^3 .. 10^6 skills, one core.
//
//   build-agents/bin/agents_bench --benchmark_filter=Top20 --benchmark_repetitions=5
//       --benchmark_report_aggregates_only=true   (one command line)
//
// Goal: <= 1 ms per query at 10^5 skills. A query is a KernelBench-style task prompt
// (instructions and a PyTorch model, ~100 tokens), as the selection agent issues it; the benchmark
// cycles through 8 op families. Index build time is reported separately (BuildIndex).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <map>
#include <memory>

#include "agents/bm25.h"
#include "bench/agents/synthetic_skills.h"

namespace vinci {
namespace {

constexpr uint64_t kSeed = 20261202;

// One index per size, built once and shared by the benchmarks of that size.
Bm25Index& index_of(int64_t n) {
  static std::map<int64_t, std::unique_ptr<Bm25Index>> indexes;
  auto& slot = indexes[n];
  if (!slot) {
    slot = std::make_unique<Bm25Index>();
    for (int64_t i = 0; i < n; ++i) {
      slot->add_text(skill_document_text(synthetic_skill(kSeed, static_cast<uint64_t>(i))));
    }
    slot->top_k(bm25_tokenize("warm up"), 1);  // computes the statistics outside the timing
  }
  return *slot;
}

void Top20(benchmark::State& state) {
  Bm25Index& index = index_of(state.range(0));
  std::vector<std::vector<std::string>> queries;
  for (uint64_t q = 0; q < 8; ++q) queries.push_back(bm25_tokenize(synthetic_task_prompt(q)));
  size_t q = 0, hits = 0;
  // Postings a term-at-a-time scorer reads per query (query terms' document frequencies).
  double postings = 0;
  for (const auto& qt : queries) {
    std::vector<std::string> seen;
    for (const auto& t : qt) {
      if (std::find(seen.begin(), seen.end(), t) != seen.end()) continue;
      seen.push_back(t);
      postings += index.document_frequency(t);
    }
  }
  state.counters["postings_per_query"] = postings / static_cast<double>(queries.size());
  state.counters["idf_floor"] = index.params().epsilon * index.average_idf();
  for (auto _ : state) {
    auto top = index.top_k(queries[q++ % queries.size()], 20);
    hits += top.size();
    benchmark::DoNotOptimize(top.data());
  }
  state.counters["docs"] = static_cast<double>(index.size());
  state.counters["vocabulary"] = static_cast<double>(index.vocabulary_size());
  state.counters["hits_per_query"] = static_cast<double>(hits) / static_cast<double>(state.iterations());
}
BENCHMARK(Top20)->Arg(1000)->Arg(10000)->Arg(100000)->Arg(1000000)->Unit(benchmark::kMicrosecond);

// Adding one skill and querying: the statistics are recomputed on the first query after a change.
void AddThenTop20(benchmark::State& state) {
  Bm25Index index;
  int64_t n = state.range(0);
  for (int64_t i = 0; i < n; ++i) {
    index.add_text(skill_document_text(synthetic_skill(kSeed, static_cast<uint64_t>(i))));
  }
  auto query = bm25_tokenize(synthetic_task_prompt(0));
  uint64_t next = static_cast<uint64_t>(n);
  for (auto _ : state) {
    index.add_text(skill_document_text(synthetic_skill(kSeed, next++)));
    auto top = index.top_k(query, 20);
    benchmark::DoNotOptimize(top.data());
  }
}
BENCHMARK(AddThenTop20)->Arg(1000)->Arg(10000)->Arg(100000)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace vinci

BENCHMARK_MAIN();

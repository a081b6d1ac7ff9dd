// How the CUDA worker keeps its device memory in hand (docs/live_evaluator.md, "Memory"): a ledger
// of its caches by bytes, evicted least recently used first, and the rule for an evaluation that
// runs out of memory. Neither needs a GPU, so both are tested anywhere (gpu_live_test).
#ifndef VINCI_GPU_LIVE_MEMORY_BUDGET_H_
#define VINCI_GPU_LIVE_MEMORY_BUDGET_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace vinci {

// The entries of the worker's caches (by name), their bytes and when each was last used.
// REQUIRES: a name is added once until it is removed.
class CacheLedger {
 public:
  explicit CacheLedger(int64_t budget_bytes) : budget_(budget_bytes) {}

  void add(const std::string& name, int64_t bytes) { entries_[name] = {bytes, ++clock_}; }
  void touch(const std::string& name) {
    auto it = entries_.find(name);
    if (it != entries_.end()) it->second.used = ++clock_;
  }
  void remove(const std::string& name) { entries_.erase(name); }
  void clear() { entries_.clear(); }

  int64_t total() const {
    int64_t n = 0;
    for (const auto& [name, e] : entries_) n += e.bytes;
    return n;
  }
  int64_t budget() const { return budget_; }

  // The entries to evict, least recently used first, so that the rest fit the budget; `keep` (the
  // entry an evaluation is using) is never among them, even when it alone is over the budget.
  std::vector<std::string> over_budget(const std::string& keep) const {
    std::multimap<uint64_t, const std::string*> by_age;
    for (const auto& [name, e] : entries_)
      if (name != keep) by_age.emplace(e.used, &name);
    std::vector<std::string> out;
    int64_t total_now = total();
    for (const auto& [used, name] : by_age) {
      if (total_now <= budget_) break;
      total_now -= entries_.at(*name).bytes;
      out.push_back(*name);
    }
    return out;
  }

 private:
  struct Entry {
    int64_t bytes = 0;
    uint64_t used = 0;
  };
  int64_t budget_;
  uint64_t clock_ = 0;
  std::map<std::string, Entry> entries_;
};

// What an evaluation's attempt came to, as far as memory goes.
enum class MemoryOutcome {
  kFine,          // no allocation failed (the candidate may still be rejected for other reasons)
  kCandidateOom,  // the candidate's own allocation failed: rejected: out_of_memory
  kTaskOom,       // the task's side (reference, inputs, weights) failed: not the candidate's fault
  kContextLost,   // the CUDA context is gone: the worker is replaced, never retried here
};

// Whether to release the caches and run the evaluation again after an attempt: once, after the
// first attempt ran out of memory with the context intact. After the last attempt, a kTaskOom
// becomes a skipped task and a kCandidateOom stays the candidate's rejection.
inline bool retry_after(int attempt, MemoryOutcome outcome) {
  return attempt == 0 && (outcome == MemoryOutcome::kCandidateOom || outcome == MemoryOutcome::kTaskOom);
}

}  // namespace vinci

#endif  // VINCI_GPU_LIVE_MEMORY_BUDGET_H_

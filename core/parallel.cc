#include "core/parallel.h"

#include <algorithm>
#include <atomic>
#include <thread>
#include <vector>

namespace vinci {

Status parallel_for(int32_t threads, size_t n, const std::function<Status(size_t)>& fn) {
  std::vector<Status> status(n);
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (;;) {
      size_t i = next.fetch_add(1);
      if (i >= n) return;
      status[i] = fn(i);
    }
  };
  std::vector<std::thread> pool;
  for (int32_t t = 1; t < threads && static_cast<size_t>(t) < n; ++t) pool.emplace_back(worker);
  worker();
  for (auto& t : pool) t.join();
  for (auto& s : status) {
    if (!s.ok()) return s;
  }
  return Status();
}

int32_t hardware_threads(int32_t cap) {
  unsigned h = std::thread::hardware_concurrency();
  return std::clamp<int32_t>(h == 0 ? 1 : static_cast<int32_t>(h), 1, std::max<int32_t>(1, cap));
}

}  // namespace vinci

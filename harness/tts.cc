#include "harness/tts.h"

#include <algorithm>

#include "core/check.h"

namespace vinci {

Window best_window(const std::vector<double>& rewards, int32_t w) {
  VINCI_REQUIRE(w >= 1, "window " << w);
  Window best;
  const int32_t n = static_cast<int32_t>(rewards.size());
  if (n == 0) return best;
  const int32_t len = std::min(w, n);
  best.length = len;
  // Sums are recomputed per window (no running sum), so equal windows compare bit-exactly.
  for (int32_t s = 0; s + len <= n; ++s) {
    double sum = 0;
    for (int32_t i = s; i < s + len; ++i) sum += rewards[i];
    if (s == 0 || sum > best.reward_sum) {
      best.start = s;
      best.reward_sum = sum;
    }
  }
  return best;
}

}  // namespace vinci

#include "core/median_interval.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace vinci {
namespace {

// P(B <= k) for B ~ Binomial(n, 1/2), summed in log space (n up to millions stays exact enough).
double binomial_half_cdf(int n, int k) {
  if (k < 0) return 0;
  if (k >= n) return 1;
  const double log_half_n = n * std::log(0.5);
  double total = 0;
  for (int i = 0; i <= k; ++i)
    total += std::exp(std::lgamma(n + 1.0) - std::lgamma(i + 1.0) - std::lgamma(n - i + 1.0) + log_half_n);
  return std::min(total, 1.0);
}

}  // namespace

MedianInterval median_interval(std::vector<double> samples, double level) {
  MedianInterval m;
  const double inf = std::numeric_limits<double>::infinity();
  m.lo = -inf, m.hi = inf;
  const int n = static_cast<int>(samples.size());
  if (n == 0) return m;
  std::sort(samples.begin(), samples.end());
  m.median = n % 2 ? samples[n / 2] : (samples[n / 2 - 1] + samples[n / 2]) / 2;
  // The largest l with 2 P(B <= l - 1) <= 1 - level.
  const double alpha = 1 - level;
  int l = 0;
  while (l + 1 <= (n + 1) / 2 && 2 * binomial_half_cdf(n, l) <= alpha) ++l;
  if (l == 0) return m;
  m.rank = l;
  m.lo = samples[l - 1];
  m.hi = samples[n - l];
  m.coverage = 1 - 2 * binomial_half_cdf(n, l - 1);
  return m;
}

int samples_for_an_interval(double level) {
  for (int n = 1;; ++n)
    if (2 * binomial_half_cdf(n, 0) <= 1 - level) return n;
}

SpeedupInterval speedup_interval(const AdaptiveTiming& rule, const std::vector<double>& candidate_us,
                                 const std::vector<double>& reference_us) {
  SpeedupInterval s;
  const double side = std::sqrt(rule.level);
  MedianInterval c = median_interval(candidate_us, side), r = median_interval(reference_us, side);
  const size_t n = std::min(candidate_us.size(), reference_us.size());
  s.speedup = c.median > 0 ? r.median / c.median : 0;
  if (c.rank > 0 && r.rank > 0 && c.lo > 0 && s.speedup > 0) {
    s.lo = r.lo / c.hi;
    s.hi = r.hi / c.lo;
    s.rel_width = (s.hi - s.lo) / s.speedup;
  } else {
    s.lo = 0;
    s.hi = std::numeric_limits<double>::infinity();
    s.rel_width = std::numeric_limits<double>::infinity();
  }
  if (n >= static_cast<size_t>(rule.max_samples)) {
    s.stop = true;
    s.why = "cap";
  } else if (n >= static_cast<size_t>(rule.min_samples) && s.rel_width <= rule.rel_width) {
    s.stop = true;
    s.why = "width";
  }
  return s;
}

}  // namespace vinci

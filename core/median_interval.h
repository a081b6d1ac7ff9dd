// Distribution-free confidence intervals of medians, and the stopping rule of adaptive timing.
//
// For n samples, the median lies between the l-th smallest and the l-th largest with probability
// 1 - 2 P(B <= l - 1), B ~ Binomial(n, 1/2), whatever the distribution (continuous or not, the
// interval only widens with ties): the order-statistic interval. A speedup is the reference's
// median over the candidate's; the interval of the ratio is taken from the two medians' intervals,
// each at level sqrt(level) (independent samples: the two hold together with probability level).
//
// The rule stops sampling once the speedup's interval is narrow enough relative to its point
// value. It is a rule of precision, checked at fixed steps (not a test: looking after every step
// makes the final interval's coverage lower than its nominal level, which is why the level is
// high and the steps few).
#ifndef VINCI_CORE_MEDIAN_INTERVAL_H_
#define VINCI_CORE_MEDIAN_INTERVAL_H_

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace vinci {

struct MedianInterval {
  double lo = 0, hi = 0;  // the order statistics; lo = -inf, hi = +inf when n is too small
  double median = 0;      // the sample median (mean of the two middle values for even n)
  double coverage = 0;    // the exact probability that [lo, hi] holds the true median
  int rank = 0;           // l: lo is the l-th smallest (1-based), hi the l-th largest; 0: none
};

// The narrowest order-statistic interval with coverage at least level (0 < level < 1).
MedianInterval median_interval(std::vector<double> samples, double level);

// The smallest n with a finite interval at this level (6 at 0.95, 8 at 0.99).
int samples_for_an_interval(double level);

struct AdaptiveTiming {
  double level = 0.99;      // of the speedup's interval
  double rel_width = 0.01;  // stop once (hi - lo) / speedup <= this
  int min_samples = 20;     // of each side before the rule is first checked
  int max_samples = 100;    // the cap: the fixed protocol's count
  int step = 10;            // samples added to each side between checks
};

struct SpeedupInterval {
  double speedup = 0;  // reference median / candidate median
  double lo = 0, hi = 0;
  double rel_width = 0;  // (hi - lo) / speedup; infinite without an interval
  bool stop = false;     // narrow enough, or the cap reached
  std::string why;       // "width" or "cap" when stop
};

// A request's adaptive rule on the wire (the worker's and the queue's requests): {"level",
// "width", "first", "step"}; the cap is the request's samples. Present only when the request
// times adaptively, so a fixed request's bytes (and its queue address) are as before.
nlohmann::json adaptive_timing_to_json(const AdaptiveTiming& rule);
// The rule back, each number checked (0 < level < 1, 0 <= width <= 1, first and step 1 to 10000);
// errors name the key, prefixed with `where`.
Result<AdaptiveTiming> adaptive_timing_from_json(const nlohmann::json& j, const std::string& where);

// The rule's verdict on the samples so far (each side's samples in the order they were taken).
SpeedupInterval speedup_interval(const AdaptiveTiming& rule, const std::vector<double>& candidate_us,
                                 const std::vector<double>& reference_us);

}  // namespace vinci

#endif  // VINCI_CORE_MEDIAN_INTERVAL_H_

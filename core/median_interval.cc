#include "core/median_interval.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace vinci {
namespace {

// P(B = i) for B ~ Binomial(n, 1/2), i = 0, 1, ...: one term after another by the ratio
// P(i + 1) / P(i) = (n - i) / (i + 1), in log space (n up to millions stays exact enough).
class BinomialHalf {
 public:
  explicit BinomialHalf(int n) : n_(n), log_p_(n * std::log(0.5)) {}
  double p() const { return std::exp(log_p_); }  // P(B = i)
  void next() {
    log_p_ += std::log(static_cast<double>(n_ - i_)) - std::log(static_cast<double>(i_ + 1));
    ++i_;
  }

 private:
  int n_, i_ = 0;
  double log_p_;
};

}  // namespace

MedianInterval median_interval(std::vector<double> samples, double level) {
  MedianInterval m;
  const double inf = std::numeric_limits<double>::infinity();
  m.lo = -inf, m.hi = inf;
  const int n = static_cast<int>(samples.size());
  if (n == 0) return m;
  std::sort(samples.begin(), samples.end());
  m.median = n % 2 ? samples[n / 2] : (samples[n / 2 - 1] + samples[n / 2]) / 2;
  // The largest l with 2 P(B <= l - 1) <= 1 - level, the cdf summed once as l grows.
  const double alpha = 1 - level;
  BinomialHalf b(n);
  double cdf = 0;  // P(B <= l - 1)
  int l = 0;
  while (l + 1 <= (n + 1) / 2) {
    double next = std::min(cdf + b.p(), 1.0);  // P(B <= l)
    if (2 * next > alpha) break;
    cdf = next;
    b.next();
    ++l;
  }
  if (l == 0) return m;
  m.rank = l;
  m.lo = samples[l - 1];
  m.hi = samples[n - l];
  m.coverage = 1 - 2 * cdf;
  return m;
}

int samples_for_an_interval(double level) {
  for (int n = 1;; ++n)
    if (2 * BinomialHalf(n).p() <= 1 - level) return n;
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

nlohmann::json adaptive_timing_to_json(const AdaptiveTiming& rule) {
  return {{"level", rule.level}, {"width", rule.rel_width}, {"first", rule.min_samples}, {"step", rule.step}};
}

Result<AdaptiveTiming> adaptive_timing_from_json(const nlohmann::json& j, const std::string& where) {
  if (!j.is_object()) return invalid_argument(where + ": expected an object, found " + j.dump());
  for (const auto& [k, v] : j.items())
    if (k != "level" && k != "width" && k != "first" && k != "step")
      return invalid_argument(where + ": unknown key '" + k + "' (expected level, width, first, step)");
  AdaptiveTiming rule;
  auto number = [&](const char* key, double lo, double hi, bool open_lo, bool open_hi, double* out) -> Status {
    if (!j.contains(key) || !j.at(key).is_number())
      return invalid_argument(where + ": '" + key + "' must be a number, found " +
                              (j.contains(key) ? j.at(key).dump() : std::string("nothing")));
    double v = j.at(key).get<double>();
    if (!(open_lo ? v > lo : v >= lo) || !(open_hi ? v < hi : v <= hi))
      return invalid_argument(where + ": '" + key + "' out of range, found " + j.at(key).dump());
    *out = v;
    return Status();
  };
  auto count = [&](const char* key, int* out) -> Status {
    if (!j.contains(key) || !j.at(key).is_number_unsigned() || j.at(key).get<uint64_t>() < 1 ||
        j.at(key).get<uint64_t>() > 10000)
      return invalid_argument(where + ": '" + key + "' must be an integer from 1 to 10000, found " +
                              (j.contains(key) ? j.at(key).dump() : std::string("nothing")));
    *out = static_cast<int>(j.at(key).get<uint64_t>());
    return Status();
  };
  VINCI_RETURN_IF_ERROR(number("level", 0, 1, true, true, &rule.level));
  VINCI_RETURN_IF_ERROR(number("width", 0, 1, false, false, &rule.rel_width));
  VINCI_RETURN_IF_ERROR(count("first", &rule.min_samples));
  VINCI_RETURN_IF_ERROR(count("step", &rule.step));
  return rule;
}

}  // namespace vinci

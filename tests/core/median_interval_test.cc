#include "core/median_interval.h"

#include <cmath>
#include <vector>

#include <gtest/gtest.h>

#include "core/rng.h"

namespace vinci {
namespace {

std::vector<double> one_to(int n) {
  std::vector<double> v;
  for (int i = n; i >= 1; --i) v.push_back(i);  // unsorted on purpose
  return v;
}

// The textbook table (e.g. Conover, Practical Nonparametric Statistics, the sign test's interval):
// for n = 10 at 95% the interval is [x(2), x(9)] with coverage 1 - 2 * 11/1024; for n = 20,
// [x(6), x(15)]; n = 5 has none at 95%.
TEST(MedianInterval, MatchesTheOrderStatisticTable) {
  MedianInterval m10 = median_interval(one_to(10), 0.95);
  EXPECT_EQ(m10.rank, 2);
  EXPECT_EQ(m10.lo, 2);
  EXPECT_EQ(m10.hi, 9);
  EXPECT_NEAR(m10.coverage, 1 - 2 * 11.0 / 1024, 1e-12);
  EXPECT_EQ(m10.median, 5.5);
  MedianInterval m20 = median_interval(one_to(20), 0.95);
  EXPECT_EQ(m20.lo, 6);
  EXPECT_EQ(m20.hi, 15);
  MedianInterval m5 = median_interval(one_to(5), 0.95);
  EXPECT_EQ(m5.rank, 0);
  EXPECT_TRUE(std::isinf(m5.lo) && std::isinf(m5.hi));
  EXPECT_EQ(samples_for_an_interval(0.95), 6);
  EXPECT_EQ(samples_for_an_interval(0.99), 8);
}

// Coverage by simulation: log-normal timings (skewed, as device times are) with a known median.
TEST(MedianInterval, HoldsTheTrueMedianAtLeastAsOftenAsItsLevel) {
  const double true_median = 100.0;
  for (int n : {12, 50, 100}) {
    int held = 0;
    const int reps = 2000;
    for (int rep = 0; rep < reps; ++rep) {
      Stream s(RngKey::root(7).with("n", n).with("rep", rep));
      std::vector<double> x;
      for (int i = 0; i < n; ++i) x.push_back(true_median * std::exp(0.2 * s.normal()));
      MedianInterval m = median_interval(x, 0.95);
      held += m.lo <= true_median && true_median <= m.hi;
    }
    // At least the exact coverage, less three standard errors of the simulation.
    MedianInterval any = median_interval(one_to(n), 0.95);
    double se = std::sqrt(any.coverage * (1 - any.coverage) / reps);
    EXPECT_GE(static_cast<double>(held) / reps, any.coverage - 3 * se) << n;
  }
}

std::vector<double> draws(const char* what, int n, double median, double spread) {
  Stream s(RngKey::root(11).with("what", what));
  std::vector<double> x;
  for (int i = 0; i < n; ++i) x.push_back(median * std::exp(spread * s.normal()));
  return x;
}

// The rule stops at its first check when the samples are tight (the H200's spread of medians is
// 0.16%), and runs to the cap when they are not; the interval holds the point value.
TEST(AdaptiveTiming, StopsEarlyOnlyWhenTheSpeedupIsKnownWellEnough) {
  AdaptiveTiming rule;
  rule.rel_width = 0.01;
  std::vector<double> cand = draws("tight candidate", 20, 50, 0.002), ref = draws("tight reference", 20, 100, 0.002);
  SpeedupInterval tight = speedup_interval(rule, cand, ref);
  EXPECT_TRUE(tight.stop);
  EXPECT_EQ(tight.why, "width");
  EXPECT_NEAR(tight.speedup, 2.0, 0.01);
  EXPECT_LE(tight.lo, tight.speedup);
  EXPECT_GE(tight.hi, tight.speedup);

  std::vector<double> noisy_c = draws("noisy candidate", 60, 50, 0.05),
                      noisy_r = draws("noisy reference", 60, 100, 0.05);
  SpeedupInterval noisy = speedup_interval(rule, noisy_c, noisy_r);
  EXPECT_FALSE(noisy.stop) << noisy.rel_width;
  std::vector<double> capped_c = draws("noisy candidate", 100, 50, 0.05),
                      capped_r = draws("noisy reference", 100, 100, 0.05);
  SpeedupInterval capped = speedup_interval(rule, capped_c, capped_r);
  EXPECT_TRUE(capped.stop);
  EXPECT_EQ(capped.why, "cap");
  // Before min_samples the rule never stops, however tight.
  std::vector<double> few_c(cand.begin(), cand.begin() + 10), few_r(ref.begin(), ref.begin() + 10);
  EXPECT_FALSE(speedup_interval(rule, few_c, few_r).stop);
}

}  // namespace
}  // namespace vinci

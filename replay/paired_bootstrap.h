// The paired bootstrap behind `replay diff`'s fast_p intervals: two runs scored on the same
// held-out tasks, the tasks resampled with replacement (the same task in both runs), keyed
// randomness so the interval is the same every time.
#ifndef VINCI_REPLAY_PAIRED_BOOTSTRAP_H_
#define VINCI_REPLAY_PAIRED_BOOTSTRAP_H_

#include <vector>

#include "core/rng.h"

namespace vinci {

struct PairedInterval {
  double estimate = 0;  // mean(b[i] - a[i])
  double lo = 0, hi = 0;
  // Whether [lo, hi] covers 0: "no effect detected".
  bool covers_zero() const { return lo <= 0 && hi >= 0; }
};

// The percentile interval of mean(b[i] - a[i]) over n = a.size() paired items: `resamples`
// resamples, each of n item indices drawn with replacement, in order, from one Stream(key), the
// same index in a and b. lo and hi are the k-th smallest and k-th largest resample mean,
// k = max(1, floor((1 - confidence) / 2 * resamples)) (for 0.95 and 2000 resamples, the 50th from
// each end), so swapping a and b negates the interval exactly.
// REQUIRES: a.size() == b.size() > 0, resamples >= 1, 0 < confidence < 1.
PairedInterval paired_bootstrap(const std::vector<double>& a, const std::vector<double>& b, int resamples,
                                double confidence, const RngKey& key);

}  // namespace vinci

#endif  // VINCI_REPLAY_PAIRED_BOOTSTRAP_H_

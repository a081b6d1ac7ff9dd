#include "replay/paired_bootstrap.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"

namespace vinci {

PairedInterval paired_bootstrap(const std::vector<double>& a, const std::vector<double>& b, int resamples,
                                double confidence, const RngKey& key) {
  VINCI_REQUIRE(a.size() == b.size() && !a.empty(), "paired values " << a.size() << " and " << b.size());
  VINCI_REQUIRE(resamples >= 1 && confidence > 0 && confidence < 1,
                "resamples " << resamples << ", confidence " << confidence);
  const size_t n = a.size();
  std::vector<double> d(n);
  double sum = 0;
  for (size_t i = 0; i < n; ++i) {
    d[i] = b[i] - a[i];
    sum += d[i];
  }
  PairedInterval out;
  out.estimate = sum / n;
  Stream s(key);
  std::vector<double> means(resamples);
  for (auto& m : means) {
    double r = 0;
    for (size_t j = 0; j < n; ++j) r += d[s.below(n)];
    m = r / n;
  }
  std::sort(means.begin(), means.end());
  size_t k = static_cast<size_t>(std::floor((1 - confidence) / 2 * resamples + 1e-9));
  k = std::max<size_t>(k, 1);
  out.lo = means[k - 1];
  out.hi = means[resamples - k];
  return out;
}

}  // namespace vinci

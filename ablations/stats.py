"""The statistics of the ablation report: paired effects over seeds, their intervals and power.

Python's standard library only (no numpy or scipy), and deterministic: the bootstrap draws from a
generator keyed by a string (random.Random(key), seeded through SHA-512 of the key, independent of
PYTHONHASHSEED), so a report rerun on the same runs is byte-identical.

A row's effect is the mean over seeds of the per-seed paired difference row - baseline (a seed
runs both on the same held-out tasks with the same keys). It comes with two 95% intervals:

- a percentile bootstrap of the paired differences (seeds resampled with replacement, 10000
  resamples; the k-th smallest and k-th largest resample mean, k = floor(0.025 * resamples));
- a paired t interval, mean +- t(0.975, n - 1) * sd / sqrt(n).

With n seeds the bootstrap has at most C(2n - 1, n) distinct resample means (10 for 3 seeds) and
its interval is too narrow at small n, so an effect is *detected* only when both intervals exclude
0. Power: the minimal detectable effect of a two-sided paired t test at level alpha with power
1 - beta is about (t(1 - alpha/2, n - 1) + t(1 - beta, n - 1)) * sd / sqrt(n).
"""
import functools
import math
import random

RESAMPLES = 10000
CONFIDENCE = 0.95
ALPHA = 0.05
POWER = 0.8


def mean_sd(xs):
    """Mean and sample standard deviation (0 for one value)."""
    m = sum(xs) / len(xs)
    sd = math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1)) if len(xs) > 1 else 0.0
    return m, sd


def _betacf(a, b, x):
    """Continued fraction of the regularized incomplete beta function (modified Lentz)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 1000):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-15:
            break
    return h


def _betainc(a, b, x):
    """The regularized incomplete beta function I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_cdf(t, df):
    """P(T <= t) for Student's t with df degrees of freedom."""
    if df <= 0:
        raise ValueError(f"t_cdf: df must be positive, found {df}")
    tail = 0.5 * _betainc(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t > 0 else tail


@functools.lru_cache(maxsize=None)
def t_quantile(p, df):
    """The p-quantile of Student's t with df degrees of freedom (bisection on t_cdf)."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"t_quantile: p must be in (0, 1), found {p}")
    if p == 0.5:
        return 0.0
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:
        lo, hi = hi, hi * 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if mid in (lo, hi):
            break
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def bootstrap_interval(diffs, key, resamples=RESAMPLES, confidence=CONFIDENCE):
    """Percentile bootstrap interval of the mean of `diffs`: `resamples` resamples of len(diffs)
    values drawn with replacement by random.Random(key); (k-th smallest, k-th largest) resample mean
    with k = max(1, floor((1 - confidence) / 2 * resamples))."""
    if not diffs:
        raise ValueError("bootstrap_interval: no differences")
    rng = random.Random(key)
    n = len(diffs)
    means = sorted(sum(rng.choices(diffs, k=n)) / n for _ in range(resamples))
    k = max(1, int(math.floor((1.0 - confidence) / 2.0 * resamples + 1e-9)))
    return means[k - 1], means[resamples - k]


def distinct_resample_means(n):
    """How many resamples of n values with replacement differ as multisets: C(2n - 1, n)."""
    return math.comb(2 * n - 1, n)


def t_interval(diffs, confidence=CONFIDENCE):
    """Paired t interval mean +- t((1 + confidence) / 2, n - 1) * sd / sqrt(n); None for n < 2."""
    n = len(diffs)
    if n < 2:
        return None
    m, sd = mean_sd(diffs)
    half = t_quantile((1.0 + confidence) / 2.0, n - 1) * sd / math.sqrt(n)
    return m - half, m + half


def excludes_zero(interval):
    """Whether an interval (lo, hi) lies wholly on one side of 0 (an endpoint at 0 covers it)."""
    return interval is not None and (interval[0] > 0 or interval[1] < 0)


def mde(sd, n, alpha=ALPHA, power=POWER):
    """Minimal detectable effect of a two-sided paired t test with n pairs: (t(1 - alpha/2, n - 1)
    + t(power, n - 1)) * sd / sqrt(n); None for n < 2."""
    if n < 2:
        return None
    return (t_quantile(1.0 - alpha / 2.0, n - 1) + t_quantile(power, n - 1)) * sd / math.sqrt(n)


def seeds_needed(effect, sd, alpha=ALPHA, power=POWER, n_max=1000):
    """The smallest n >= 2 whose mde(sd, n) is at most |effect|; None when effect is 0 (no number
    of seeds detects it) or when even n_max seeds are not enough."""
    if effect == 0 or mde(sd, n_max, alpha, power) > abs(effect):
        return None
    lo, hi = 1, n_max  # mde falls as n grows: mde(sd, hi) <= |effect| < mde(sd, lo) (lo = 1: never)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if mde(sd, mid, alpha, power) <= abs(effect):
            hi = mid
        else:
            lo = mid
    return hi


class Effect:
    """A paired effect over seeds: `row` and `base` hold one value per seed, in the same order."""

    def __init__(self, row, base, key, resamples=RESAMPLES, confidence=CONFIDENCE):
        if len(row) != len(base) or not row:
            raise ValueError(f"Effect: expected paired values, found {len(row)} and {len(base)}")
        self.diffs = [r - b for r, b in zip(row, base)]
        self.n = len(self.diffs)
        self.effect, self.sd = mean_sd(self.diffs)
        self.boot = bootstrap_interval(self.diffs, key, resamples, confidence)
        self.t = t_interval(self.diffs, confidence)
        self.detected = excludes_zero(self.boot) and excludes_zero(self.t)

    def mde(self):
        return mde(self.sd, self.n)

    def seeds_needed(self):
        return seeds_needed(self.effect, self.sd)

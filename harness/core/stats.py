"""Summary statistics of raw samples: median, IQR and a distribution-free 95% CI of the median."""
from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np


def median_ci(sorted_samples: Sequence[float], confidence: float = 0.95) -> tuple[float, float]:
    """Order-statistic confidence interval of the median (binomial, no normality assumed).

    k is the largest count with P(Binomial(n, 1/2) <= k - 1) <= (1 - confidence) / 2, and the
    interval is [x_(k), x_(n-k+1)]; scipy's binomial distribution gives k in O(log n) (the
    sort before it is the O(n log n) part). With fewer than 6 samples no pair of order
    statistics reaches 95%, so the interval is the full range and callers should read it as a
    variance warning rather than a tight bound.
    """
    n = len(sorted_samples)
    if n == 0:
        return (math.nan, math.nan)
    k = _order_statistic(n, (1.0 - confidence) / 2)
    if k < 1:
        return (float(sorted_samples[0]), float(sorted_samples[-1]))
    return (float(sorted_samples[k - 1]), float(sorted_samples[n - k]))


# Up to this many samples the binomial CDF is summed exactly in one pass (no scipy import,
# which costs about a second of every short run); beyond it scipy's ppf takes O(log n).
EXACT_MAX_N = 1000


def _order_statistic(n: int, tail: float) -> int:
    """The largest k in 0..n with P(Binomial(n, 1/2) <= k - 1) <= tail."""
    if n <= EXACT_MAX_N:
        total, term, cumulative, k = 2**n, 1, 0, 0
        while k < n:
            cumulative += term  # 2^n * P(X <= k)
            if cumulative / total > tail:
                break
            term = term * (n - k) // (k + 1)
            k += 1
        return k
    from scipy.stats import binom

    # binom.ppf gives the smallest j with cdf(j) >= tail; step back over float ties.
    k = int(binom.ppf(tail, n, 0.5))
    while k > 0 and binom.cdf(k - 1, n, 0.5) > tail:
        k -= 1
    while k < n and binom.cdf(k, n, 0.5) <= tail:
        k += 1
    return min(k, n)


# The one quantile definition of dtbench (stats, compare, collectors, the predictor): numpy's
# "linear" method, Hyndman & Fan's type 7, the default of numpy, R and Excel's PERCENTILE.
QUANTILE_METHOD = "linear"


def quantile(samples: Sequence[float] | np.ndarray, q: float) -> float:
    """The q-quantile (0 <= q <= 1) of `samples`, interpolated linearly between order
    statistics; every quantile dtbench reports or models is this one."""
    return float(np.quantile(np.asarray(samples, dtype=float), q, method=QUANTILE_METHOD))


@dataclass(frozen=True)
class Stats:
    """Statistics of one metric's samples, in the order a reader wants them."""

    n: int
    min: float
    max: float
    median: float
    mean: float
    q1: float
    q3: float
    stddev: float
    ci_low: float
    ci_high: float

    fields = ("n", "min", "max", "median", "mean", "q1", "q3", "iqr", "stddev", "ci95")

    @classmethod
    def of(cls, samples: Sequence[float] | np.ndarray) -> Stats:
        if len(samples) == 0:
            raise ValueError("no samples to summarise")
        ordered = np.sort(np.asarray(samples, dtype=float))
        ci_low, ci_high = median_ci(ordered)
        return cls(
            n=int(ordered.size),
            min=float(ordered[0]),
            max=float(ordered[-1]),
            median=float(np.median(ordered)),
            mean=float(np.mean(ordered)),
            q1=quantile(ordered, 0.25),
            q3=quantile(ordered, 0.75),
            stddev=float(np.std(ordered, ddof=1)) if ordered.size > 1 else 0.0,
            ci_low=ci_low,
            ci_high=ci_high,
        )

    @property
    def iqr(self) -> float:
        return self.q3 - self.q1

    @property
    def relative_iqr(self) -> float:
        if self.iqr == 0:
            return 0.0
        return self.iqr / abs(self.median) if self.median else math.inf

    def warnings(self) -> list[str]:
        """Variance warnings attached to a result instead of failing it."""
        found = []
        if self.n < 6:
            found.append(f"only {self.n} samples: the 95% CI of the median is the full range")
        if self.relative_iqr > 0.10:
            found.append(f"high variance: IQR is {self.relative_iqr:.0%} of the median")
        return found

    def as_dict(self) -> dict[str, Any]:
        return {
            "n": self.n,
            "min": self.min,
            "max": self.max,
            "median": self.median,
            "mean": self.mean,
            "q1": self.q1,
            "q3": self.q3,
            "iqr": self.iqr,
            "stddev": self.stddev,
            "ci95": [self.ci_low, self.ci_high],
        }


# The bootstrap of a ratio of medians, shared by compare, history and the by-machine report.
BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 20240101
CONFIDENCE = 0.95
# Resampled values held in memory at once: large pytest-benchmark sample sets run in batches.
_CHUNK_ELEMENTS = 4_000_000
# Resampled values per side in all: beyond it (many thousands of samples, where the median's
# CI is narrow anyway) fewer resamples are drawn, never fewer than MIN_RESAMPLES.
_WORK_ELEMENTS = 8_000_000
MIN_RESAMPLES = 200


def _median_ratio(candidate: np.ndarray, baseline: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.median(candidate, axis=axis) / np.median(baseline, axis=axis)


def bootstrap_ratio_ci(baseline: Sequence[float] | np.ndarray,
                       candidate: Sequence[float] | np.ndarray,
                       resamples: int = BOOTSTRAP_RESAMPLES, seed: int = BOOTSTRAP_SEED,
                       confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Percentile bootstrap CI of median(candidate) / median(baseline), sides resampled apart
    (scipy.stats.bootstrap, seeded). Percentile, not scipy's default BCa: BCa's jackknife
    takes one median per left-out sample, quadratic in the sample count (10^5 rounds)."""
    from scipy.stats import bootstrap

    a = np.asarray(baseline, dtype=float)
    b = np.asarray(candidate, dtype=float)
    if a.size == 0 or b.size == 0:
        return (math.nan, math.nan)
    # scipy needs two observations a side; resampling {x} and {x, x} draws x alike.
    a, b = (np.repeat(side, 2) if side.size == 1 else side for side in (a, b))
    largest = max(a.size, b.size)
    resamples = max(MIN_RESAMPLES, min(resamples, _WORK_ELEMENTS // largest))
    # A resampled baseline median of 0 gives an infinite ratio: the interval is taken over the
    # finite ratios, and scipy's own interval and standard error (NaN, with warnings) unused.
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)
        result = bootstrap((b, a), _median_ratio, n_resamples=resamples,
                           batch=max(1, _CHUNK_ELEMENTS // largest), vectorized=True,
                           paired=False, confidence_level=confidence, method="percentile",
                           rng=np.random.default_rng(seed))
    ratios = result.bootstrap_distribution
    ratios = ratios[np.isfinite(ratios)]
    if ratios.size == 0:
        return (math.nan, math.nan)
    tail = (1.0 - confidence) / 2.0
    return (quantile(ratios, tail), quantile(ratios, 1.0 - tail))


def repeat_spread(values: Sequence[float], intervals: Sequence[float]
                  ) -> tuple[float, float | None]:
    """Runs of one configuration: their between-run spread (half the range of the values over
    their median, percent) and the within-run interval beside it (the median of the runs'
    achieved intervals, percent; None where no run has one) -- pyperf's unstable-benchmark
    test compares the two."""
    ordered = sorted(values)
    middle = float(np.median(ordered))
    spread = (ordered[-1] - ordered[0]) / 2 / middle * 100.0 if middle else math.inf
    within = float(np.median(sorted(intervals))) if intervals else None
    return spread, within


def unstable(spread: float, within: float | None) -> bool:
    """Whether runs disagree more than one run can show: their spread beyond twice the
    interval one run states (pyperf's unstable benchmark)."""
    return within is not None and spread > 2 * within

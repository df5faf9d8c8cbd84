"""Summary statistics of raw samples: median, IQR and a distribution-free 95% CI of the median."""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any


def median_ci(sorted_samples: list[float], confidence: float = 0.95) -> tuple[float, float]:
    """Order-statistic confidence interval of the median (binomial, no normality assumed).

    With fewer than 6 samples no pair of order statistics reaches 95%, so the interval is the
    full range and callers should read it as a variance warning rather than a tight bound.
    """
    n = len(sorted_samples)
    if n == 0:
        return (math.nan, math.nan)
    tail = (1.0 - confidence) / 2
    # k = the largest count with P(Binomial(n, 1/2) <= k - 1) <= tail; CI = [x_(k), x_(n-k+1)].
    k, cumulative = 0, 0.0
    while k < n and cumulative + math.comb(n, k) / 2**n <= tail:
        cumulative += math.comb(n, k) / 2**n
        k += 1
    if k < 1:
        return (sorted_samples[0], sorted_samples[-1])
    return (sorted_samples[k - 1], sorted_samples[n - k])


def _quantile(sorted_samples: list[float], q: float) -> float:
    if len(sorted_samples) == 1:
        return sorted_samples[0]
    position = q * (len(sorted_samples) - 1)
    below = math.floor(position)
    above = min(below + 1, len(sorted_samples) - 1)
    weight = position - below
    return sorted_samples[below] * (1 - weight) + sorted_samples[above] * weight


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
    def of(cls, samples: list[float]) -> Stats:
        if not samples:
            raise ValueError("no samples to summarise")
        ordered = sorted(float(s) for s in samples)
        ci_low, ci_high = median_ci(ordered)
        return cls(
            n=len(ordered),
            min=ordered[0],
            max=ordered[-1],
            median=statistics.median(ordered),
            mean=statistics.fmean(ordered),
            q1=_quantile(ordered, 0.25),
            q3=_quantile(ordered, 0.75),
            stddev=statistics.stdev(ordered) if len(ordered) > 1 else 0.0,
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

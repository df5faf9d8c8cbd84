"""The statistics of dtbench, in one place: a metric's samples summarised (median, IQR and a
distribution-free 95% CI of the median), and two sides compared (the ratio of medians, its
bootstrap CI, Mann–Whitney U, Holm's correction over many tests).

Both are distribution-free: benchmark samples are skewed (a few slow steps) and often few, so
neither a t-test nor a normal CI of the mean would be honest. The bootstrap uses a fixed seed so
that comparing the same files twice prints the same interval.
"""
from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
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


# Two sides compared: the significance level a p-value is held to.
ALPHA = 0.05


def finite_samples(values: Sequence[Any] | None) -> np.ndarray:
    """The finite numbers of a stored sample list (NaN is stored as null; junk is dropped)."""
    kept = [float(v) for v in values or () if isinstance(v, int | float)
            and not isinstance(v, bool) and math.isfinite(v)]
    return np.asarray(kept, dtype=float)


def mann_whitney_p(baseline: Sequence[float] | np.ndarray,
                   candidate: Sequence[float] | np.ndarray) -> float:
    """Two-sided Mann–Whitney U p-value (scipy): exact for small samples without ties, else
    the normal approximation with tie and continuity corrections."""
    from scipy.stats import mannwhitneyu

    a = np.asarray(baseline, dtype=float)
    b = np.asarray(candidate, dtype=float)
    if a.size == 0 or b.size == 0:
        return math.nan
    return float(mannwhitneyu(a, b, alternative="two-sided", method="auto").pvalue)


def ratio_of(baseline: float | None, candidate: float | None) -> float:
    if baseline is None or candidate is None or baseline == 0:
        return math.nan
    return candidate / baseline


@dataclass(frozen=True)
class RatioTest:
    """How one metric's candidate samples differ from the baseline's."""

    n_baseline: int
    n_candidate: int
    baseline_median: float
    candidate_median: float
    ratio: float
    ci_low: float
    ci_high: float
    p_value: float
    level: str = "samples"

    fields = ("n_baseline", "n_candidate", "baseline_median", "candidate_median", "ratio",
              "ci95", "p_value", "level")

    @classmethod
    def of(cls, baseline: Sequence[float] | np.ndarray, candidate: Sequence[float] | np.ndarray,
           resamples: int = BOOTSTRAP_RESAMPLES, seed: int = BOOTSTRAP_SEED,
           level: str = "samples", reciprocal: bool = False) -> RatioTest:
        """The ratio of the sides' medians; with `reciprocal`, of the reciprocals of their
        reciprocals' medians (a rate over the median step: the record's own value), the
        interval taken in that domain too so that it brackets the ratio it belongs to."""
        a = np.asarray(baseline, dtype=float)
        b = np.asarray(candidate, dtype=float)
        if a.size == 0 or b.size == 0:
            raise ValueError("both sides need samples")
        if reciprocal and (a > 0).all() and (b > 0).all():
            return cls.of(1.0 / a, 1.0 / b, resamples, seed, level).inverted()
        base_median, cand_median = float(np.median(a)), float(np.median(b))
        ci_low, ci_high = bootstrap_ratio_ci(a, b, resamples, seed)
        return cls(n_baseline=int(a.size), n_candidate=int(b.size),
                   baseline_median=base_median, candidate_median=cand_median,
                   ratio=ratio_of(base_median, cand_median), ci_low=ci_low, ci_high=ci_high,
                   p_value=mann_whitney_p(a, b), level=level)

    def inverted(self) -> RatioTest:
        """The same test read in the reciprocal domain (times as rates): medians, ratio and
        interval inverted; the rank test's p-value does not change under 1/x."""
        def inv(value: float) -> float:
            return 1.0 / value if value else math.nan

        return replace(self, baseline_median=inv(self.baseline_median),
                       candidate_median=inv(self.candidate_median), ratio=inv(self.ratio),
                       ci_low=inv(self.ci_high), ci_high=inv(self.ci_low))

    @classmethod
    def of_runs(cls, baseline: Sequence[np.ndarray], candidate: Sequence[np.ndarray],
                resamples: int = BOOTSTRAP_RESAMPLES, seed: int = BOOTSTRAP_SEED,
                center: Callable[[np.ndarray], float] = np.median) -> RatioTest:
        """Runs as the unit: each run's median is one observation.

        Steps of one run share its machine state (memory placement, neighbours' load), so
        they are not independent draws: two runs of the same code can differ by far more than
        their step-level intervals admit. With repeats on both sides the interval comes from
        resampling runs, and the rank test is applied to the run medians (`center`: what the
        metric's definition makes of a run's steps).
        """
        a = [float(center(run)) for run in baseline if len(run)]
        b = [float(center(run)) for run in candidate if len(run)]
        if not a or not b:
            raise ValueError("both sides need runs with samples")
        return cls.of(a, b, resamples, seed, level="runs")

    @classmethod
    def exact(cls, baseline: float, candidate: float) -> RatioTest:
        """Two computed (not measured) values: the ratio is known exactly, no interval."""
        ratio = ratio_of(baseline, candidate)
        p_value = 1.0 if baseline == candidate else 0.0
        return cls(1, 1, baseline, candidate, ratio, ratio, ratio, p_value, "exact")

    @classmethod
    def of_summaries(cls, baseline: Sequence[dict[str, float]],
                     candidate: Sequence[dict[str, float]]) -> RatioTest:
        """From summary statistics alone (mean, stddev and rounds per run), for files saved
        without per-round data (pytest-benchmark's --benchmark-save): the ratio of means, a
        95% CI of it by the delta method, and Welch's t-test p-value. Several runs on a side
        are pooled as one sample (their rounds and within-run variances combined)."""
        from scipy.stats import norm, ttest_ind_from_stats

        base, cand = _pooled_summary(baseline), _pooled_summary(candidate)
        (m1, s1, n1), (m2, s2, n2) = base, cand
        ratio = ratio_of(m1, m2)
        if not math.isfinite(ratio) or m1 <= 0 or m2 <= 0:
            return cls(int(n1), int(n2), m1, m2, ratio, math.nan, math.nan, math.nan, "summary")
        relative = math.sqrt((s1 / m1) ** 2 / n1 + (s2 / m2) ** 2 / n2)
        spread = float(norm.ppf(1 - (1 - CONFIDENCE) / 2)) * ratio * relative
        if s1 == 0 and s2 == 0:
            p_value = 0.0 if m1 != m2 else 1.0
        else:
            p_value = float(ttest_ind_from_stats(m1, s1, n1, m2, s2, n2, equal_var=False).pvalue)
        return cls(int(n1), int(n2), m1, m2, ratio, ratio - spread, ratio + spread, p_value,
                   "summary")

    def significant(self, higher_is_better: bool, worse: bool, alpha: float = ALPHA) -> bool:
        """The CI lies wholly on the worse (or, with worse=False, the better) side of 1, and
        (for step samples) the rank test agrees. Between a few runs a rank test cannot reach
        p < 0.05 (3 against 3: p >= 0.1), so at run level the bootstrap interval decides."""
        if self.level in ("samples", "summary", "exact") and not (self.p_value < alpha):
            return False
        below = self.ci_high < 1.0
        above = self.ci_low > 1.0
        lower_side = worse == higher_is_better
        return below if lower_side else above

    def as_dict(self) -> dict[str, Any]:
        return {
            "n_baseline": self.n_baseline,
            "n_candidate": self.n_candidate,
            "baseline_median": self.baseline_median,
            "candidate_median": self.candidate_median,
            "ratio": self.ratio,
            "ci95": [self.ci_low, self.ci_high],
            "p_value": self.p_value,
            "level": self.level,
        }


def holm_survivors(p_values: Sequence[float], alpha: float = ALPHA) -> list[bool]:
    """Which of a family's p-values stay significant under Holm–Bonferroni: sorted ascending,
    the k-th smallest (from 0) must be at most alpha / (m - k), and the first that is not
    ends the run of survivors."""
    order = sorted(range(len(p_values)), key=lambda index: p_values[index])
    kept = [False] * len(p_values)
    for rank, index in enumerate(order):
        if p_values[index] > alpha / (len(order) - rank):
            break
        kept[index] = True
    return kept


def _pooled_summary(runs: Sequence[dict[str, float]]) -> tuple[float, float, float]:
    """(mean, stddev, count) of runs given as {mean, stddev, rounds}, pooled as one sample."""
    count = sum(r["rounds"] for r in runs)
    mean = sum(r["mean"] * r["rounds"] for r in runs) / count
    squares = sum((r["rounds"] - 1) * r["stddev"] ** 2 + r["rounds"] * (r["mean"] - mean) ** 2
                  for r in runs)
    return mean, math.sqrt(squares / max(1, count - 1)), count

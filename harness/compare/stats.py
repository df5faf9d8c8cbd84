"""Two-sample statistics of `compare`: the ratio of medians, its bootstrap CI, Mann–Whitney U.

Both are distribution-free: benchmark samples are skewed (a few slow steps) and often few, so
neither a t-test nor a normal CI of the mean would be honest. The bootstrap uses a fixed seed so
that comparing the same files twice prints the same interval.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from harness.core.stats import (  # noqa: F401 - compare's names for them
    BOOTSTRAP_RESAMPLES,
    BOOTSTRAP_SEED,
    CONFIDENCE,
    bootstrap_ratio_ci,
)

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


def _pooled_summary(runs: Sequence[dict[str, float]]) -> tuple[float, float, float]:
    """(mean, stddev, count) of runs given as {mean, stddev, rounds}, pooled as one sample."""
    count = sum(r["rounds"] for r in runs)
    mean = sum(r["mean"] * r["rounds"] for r in runs) / count
    squares = sum((r["rounds"] - 1) * r["stddev"] ** 2 + r["rounds"] * (r["mean"] - mean) ** 2
                  for r in runs)
    return mean, math.sqrt(squares / max(1, count - 1)), count

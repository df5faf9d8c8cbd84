"""How long a throughput run measures: until its figure is as precise as asked, or its time
budget is spent, with the steps before the step time settled left out.

The rule, applied to rank 0's measured step times after each step:

1. **Steady state.** The leading steps that belong to the warm-up are found by MSER
   truncation (White 1997, the Marginal Standard Error Rule): the cut d minimises
   sum((x_i - mean_d)^2) / (n - d)^2 over the steps after it, where the search is bounded by
   half the series (`MAX_DISCARD_FRACTION`). The steps before the cut are discarded as
   settling steps: they stay in the record's trajectory, not in its figures.
2. **Precision.** The figure is the median of the steps kept; its 95% interval is the
   distribution-free order-statistic interval of harness.core.stats. The achieved precision is
   the interval's larger half-width relative to the median, on the step-time or the rate
   scale, whichever is wider (throughput's interval is the step time's, inverted).
3. **Stop** when at least `min_steps` steps are kept and the precision is within the target,
   or when the measured steps have used the time budget: the budget holds whatever the step
   count (beside two busy loops a 9 ms step took 1.9 s; fewer than `MIN_STEPS` steps then
   give no interval, and the record says so). A series whose kept steps still trend
   (Kendall's tau, p < 0.01) when the budget ends is named as drifting.

Every rank stops on rank 0's decision (harness/rank/loops.py broadcasts it), so a step of
every rank is in every measured step.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from harness.core.stats import median_ci

# The cut never takes more than this share of the measured steps (MSER's usual bound: near the
# end of a series its statistic rests on too few steps to mean anything).
MAX_DISCARD_FRACTION = 0.5
# Fewer kept steps than this give no 95% interval narrower than their whole range.
MIN_STEPS = 6
# A drift test below this p-value names the kept steps as drifting.
DRIFT_P = 0.01

TARGET_MET = "target met"
BUDGET_SPENT = "time budget spent"
FIXED = "fixed step count"


def mser_cut(times: Sequence[float], max_fraction: float = MAX_DISCARD_FRACTION) -> int:
    """The number of leading steps MSER truncation discards (0 for a settled series)."""
    n = len(times)
    if n < 2 * MIN_STEPS:
        bound = max(0, n - MIN_STEPS)
    else:
        bound = int(n * max_fraction)
    best, cut = math.inf, 0
    # suffix sums: each candidate cut in O(1)
    total = total_sq = 0.0
    stats = [(0.0, 0.0)] * (n + 1)
    for i in range(n - 1, -1, -1):
        total += times[i]
        total_sq += times[i] * times[i]
        stats[i] = (total, total_sq)
    for d in range(0, min(bound, n - 1) + 1):
        count = n - d
        s, sq = stats[d]
        score = max(0.0, sq - s * s / count) / (count * count)
        if score < best * (1 - 1e-12):
            best, cut = score, d
    return cut


def precision(times: Sequence[float]) -> float:
    """The 95% interval's larger half-width over the median, on the step-time scale or the
    rate scale (throughput = batch / step time), whichever is wider: max(m/low, high/m) - 1
    (inf for no usable interval)."""
    if len(times) < MIN_STEPS:
        return math.inf
    ordered = sorted(times)
    n = len(ordered)
    middle = ordered[n // 2] if n % 2 else (ordered[n // 2 - 1] + ordered[n // 2]) / 2
    low, high = median_ci(ordered)
    if not low > 0:
        return math.inf
    return max(middle / low, high / middle) - 1.0


def drifting(times: Sequence[float]) -> bool:
    """Whether the steps trend with time (Kendall's tau against the step index)."""
    if len(times) < MIN_STEPS:
        return False
    from scipy.stats import kendalltau

    result = kendalltau(range(len(times)), list(times))
    return bool(result.pvalue < DRIFT_P)


@dataclass(frozen=True)
class Decision:
    """What rank 0 decided after a step: stop or go on, and the settling steps to leave out."""

    stop: bool
    discard: int
    reason: str = ""


def decide(times: Sequence[float], elapsed: float, *, min_steps: int, target: float,
           max_time: float) -> Decision:
    """The decision after the measured `times` (seconds; `elapsed`: the time they took)."""
    discard = mser_cut(times)
    kept = times[discard:]
    if len(kept) >= max(min_steps, MIN_STEPS) and precision(kept) <= target:
        return Decision(True, discard, TARGET_MET)
    if elapsed >= max_time and times:
        return Decision(True, discard, BUDGET_SPENT)
    return Decision(False, discard)


def summary(times: Sequence[float], discard: int, reason: str, *, target: float | None,
            max_time: float | None) -> dict[str, object]:
    """The record's account of how the run measured (notes.measurement); `target` in
    percent, as --target-ci gives it."""
    kept = times[discard:]
    achieved = precision(kept) * 100.0
    adaptive = target is not None
    out: dict[str, object] = {
        "rule": "adaptive" if adaptive else "fixed",
        "stopped": reason,
        "measured_steps": len(times),
        "discarded_steps": discard,
        "discard_rule": "MSER truncation (at most half the measured steps)" if adaptive
        else "none: a fixed step count keeps every step",
        "target_ci_pct": target,
        "max_time_s": max_time,
        "measured_s": sum(times),
        "achieved_ci_pct": achieved if math.isfinite(achieved) else None,
        "target_met": (achieved <= target) if target is not None else None,
        # what the interval covers: the steps of this one process. Fresh processes of the
        # same run fell further apart than that on the project's VMs (0.79-1.27 on Zen 4,
        # two groups 12% apart on Zen 5, 14.3-19.7 ms on an H200): docs/measurements/
        # precision.md; --repeat runs fresh processes, and compare and report use their spread
        "interval_scope": "within this process: the spread between fresh processes of the "
                          "same run is not in it (--repeat measures it)",
    }
    if adaptive and reason == BUDGET_SPENT:
        out["drifting"] = drifting(kept)
    return out

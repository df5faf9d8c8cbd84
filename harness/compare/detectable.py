"""What a pass of the gate means: for each workload, the smallest slowdown the gate would have
caught on this runner, 9 times in 10.

The gate calls a throughput change a regression when the candidate's ratio to the baseline is
beyond a bar: the threshold, and what the comparison can resolve (the history's floor, widened
for the family of gated metrics, or the sides' own intervals and spread). The ratio it sees
is the true change times noise: on a log scale, normal with the spread `sigma` of the ratio
of two commits' medians of the same code (from the machine's history, baseline.Spread), or,
without a history, of two sides' medians of their runs (each side's runs spread by s, so
s x sqrt(1/n_b + 1/n_c) for n_b and n_c runs). A slowdown of log size d is caught with
probability Phi((d - bar) / sigma); it is caught with probability POWER from
d = bar + z(POWER) x sigma, the smallest slowdown the line names.
"""
from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any

from harness.compare.baseline import Spread
from harness.compare.render import experiment_labels, wrapped
from harness.compare.rows import Comparison, ComparisonRow
from harness.core.outputs import markdown_text
from harness.records.experiment import experiment_key
from harness.records.record import metric as find_metric

# The chance of catching a slowdown the line speaks of (issue 55: "caught in at least 9 of 10").
POWER = 0.9
# The metric whose slowdown the line names.
METRIC = "throughput"


def bar_log(threshold_pct: float, resolution_pct: float | None) -> float:
    """The smallest log change the gate calls a regression: beyond the threshold (a drop below
    1 - threshold) and beyond the resolution (a ratio whose inverse passes 1 + resolution)."""
    threshold = -math.log(1.0 - threshold_pct / 100.0)
    return max(threshold, math.log1p((resolution_pct or 0.0) / 100.0))


def smallest_slowdown(sigma: float, bar: float, power: float = POWER) -> float:
    """The throughput drop (percent) caught with probability `power`, where the gate calls a
    log drop beyond `bar` and its reading of the drop has log spread `sigma`."""
    drop = bar + NormalDist().inv_cdf(power) * sigma
    return (1.0 - math.exp(-drop)) * 100.0


def caught_probability(slowdown_pct: float, sigma: float, bar: float) -> float:
    """The chance a throughput drop of `slowdown_pct` is caught (the inverse of the above)."""
    drop = -math.log(1.0 - slowdown_pct / 100.0)
    if sigma <= 0:
        return 1.0 if drop > bar else 0.0
    return NormalDist().cdf((drop - bar) / sigma)


def runs_spread(baseline: Sequence[float], candidate: Sequence[float]) -> float | None:
    """The log spread of the ratio of two sides' medians from their runs' values: the pooled
    standard deviation of each side's log values, times sqrt(1/n_b + 1/n_c); None with fewer
    than two runs a side."""
    sides = [[math.log(v) for v in side if v > 0 and math.isfinite(v)]
             for side in (baseline, candidate)]
    if any(len(side) < 2 for side in sides):
        return None
    squares = sum(sum((x - statistics.fmean(side)) ** 2 for x in side) for side in sides)
    pooled = math.sqrt(squares / (len(sides[0]) + len(sides[1]) - 2))
    return pooled * math.sqrt(1.0 / len(sides[0]) + 1.0 / len(sides[1]))


@dataclass(frozen=True)
class Detectable:
    """One experiment's line: the spread the gate's reading has, where it comes from, the bar
    it calls beyond, and the smallest slowdown caught POWER of the time."""

    workload: str
    experiment: str
    sigma: float
    source: str
    bar_pct: float
    slowdown_pct: float

    def as_dict(self) -> dict[str, Any]:
        return {"workload": self.workload, "experiment": self.experiment,
                "sigma": self.sigma, "source": self.source, "bar_pct": self.bar_pct,
                "slowdown_pct": self.slowdown_pct, "power": POWER}


def _values(records: Sequence[dict[str, Any]]) -> list[float]:
    found = [find_metric(record, METRIC) for record in records]
    return [float(entry["value"]) for entry in found
            if entry and isinstance(entry.get("value"), int | float)]


def detectable(comparison: Comparison, spread: dict[str, dict[str, Spread]] | None = None,
               power: float = POWER) -> list[Detectable]:
    """Each compared experiment's smallest caught slowdown of throughput: from the history's
    spread where `spread` holds the experiment (a gate against the history), else from the
    two sides' runs; none where neither has two runs."""
    labels = experiment_labels(comparison)
    rows: dict[tuple[str, str], ComparisonRow] = {
        (row.workload, row.spec): row for row in comparison.gated if row.metric == METRIC}
    found = []
    for base, cand in comparison.pairs:
        row = rows.get((base.workload, base.label))
        if row is None:
            continue
        history = (spread or {}).get(experiment_key(base.records[0]), {}).get(METRIC)
        if history is not None:
            sigma, source = history.sigma, (f"history: {history.commits} commits of "
                                             f"{history.runs} run(s)")
        else:
            sigma = runs_spread(_values(base.records), _values(cand.records))
            source = f"runs: {len(base.records)} against {len(cand.records)}"
        if sigma is None:
            continue
        bar = bar_log(comparison.threshold_pct, row.resolution_pct)
        found.append(Detectable(base.workload, labels.of(row), sigma,
                                source, math.expm1(bar) * 100.0,
                                smallest_slowdown(sigma, bar, power)))
    return found


def summary_lines(found: Sequence[Detectable], markdown: bool = False) -> list[str]:
    """The gate summary's paragraph on what a pass means, a line (or table row) per
    experiment."""
    if not found:
        return wrapped("What a pass means: not estimated (no history of this runner and fewer "
                       "than two runs a side).")
    head = (f"What a pass means: the smallest {METRIC} slowdown this gate catches "
            f"{POWER * 10:.0f} times in 10 on this runner, from the spread between runs of the "
            "same code:")
    if not markdown:
        return wrapped(head) + [line for d in found for line in wrapped(
            f"  {d.experiment}: {d.slowdown_pct:.1f}% (called beyond {d.bar_pct:.1f}%; spread "
            f"+/-{d.sigma * 100:.1f}%, {d.source})")]
    return [head, "", "| experiment | slowdown caught 9 in 10 | called beyond | spread | from |",
            "|---|---|---|---|---|"] + [
        f"| {markdown_text(d.experiment)} | {d.slowdown_pct:.1f}% | {d.bar_pct:.1f}% | "
        f"±{d.sigma * 100:.1f}% | {d.source} |" for d in found]

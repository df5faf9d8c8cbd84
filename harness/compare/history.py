"""A metric over commits (or dates) per machine and experiment, and the steps in it.

Change points are found by ruptures' penalised search (KernelCPD with a linear kernel: the
least-squares, mean-shift cost of Pelt(model="l2"), in C) with
the Schwarz penalty 2·σ²·ln n, σ the noise of the series estimated robustly from successive
differences (a step moves one difference, noise moves all). Each candidate is then kept only
where the samples on either side differ significantly (Mann-Whitney, Bonferroni over the
candidates) and by at least a minimum effect: a rerun of the same commit on a quiet machine
must not report a step. Each step has its size as the ratio of medians after/before, with a
bootstrap confidence interval, and the commit range where it happened.
"""
from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from harness.core.stats import bootstrap_ratio_ci, mann_whitney_p
from harness.records.experiment import distinct_labels, experiment_key, machine_of, version_of
from harness.records.record import metric as find_metric
from harness.records.summary import SPEC_SUMMARY
from harness.spec.fields import store_columns
from harness.spec.specs import RUN_FIELDS

MIN_EFFECT = 0.05
ALPHA = 0.01
# The spec fields a store's index keeps beside the key: what a series' label may name.
INDEXED_FIELDS = frozenset({*store_columns(RUN_FIELDS), *SPEC_SUMMARY})
# Successive differences of noise have sigma·√2; 1.4826·MAD estimates a normal sigma.
_MAD_TO_SIGMA = 1.4826 / math.sqrt(2.0)


@dataclass
class Point:
    """One commit (or day) of a series: its samples of the metric."""

    label: str
    when: str
    values: list[float] = field(default_factory=list)

    @property
    def median(self) -> float:
        # statistics.median: a point holds a handful of runs, where numpy's call costs more
        # than the sort (80,000 points over a fleet's store took seconds)
        return float(statistics.median(self.values))


@dataclass(frozen=True)
class Step:
    """A change between points[index - 1] and points[index]."""

    index: int
    before: str
    after: str
    ratio: float
    ci: tuple[float, float]
    p_value: float

    def as_dict(self) -> dict[str, Any]:
        return {"index": self.index, "before": self.before, "after": self.after,
                "ratio": self.ratio, "ci": list(self.ci), "p_value": self.p_value}


@dataclass
class Series:
    """A metric of one experiment on one machine over commits, oldest first; `experiment` is
    its label (harness/records/experiment.py), told apart from every other series'."""

    machine: str
    experiment: str
    metric: str
    higher_is_better: bool
    points: list[Point]
    steps: list[Step] = field(default_factory=list)
    workload: str = ""


def noise_sigma(medians: Sequence[float]) -> float:
    """The series' noise from the median absolute successive difference."""
    diffs = np.diff(np.asarray(medians, dtype=float))
    if diffs.size == 0:
        return 0.0
    return float(np.median(np.abs(diffs - np.median(diffs))) * _MAD_TO_SIGMA)


def _candidates(medians: np.ndarray) -> list[int]:
    import ruptures

    n = medians.size
    sigma = noise_sigma(medians)
    scale = max(abs(float(np.mean(medians))), 1e-300)
    sigma = max(sigma, 1e-9 * scale)  # a noiseless series still needs a finite penalty
    # KernelCPD with a linear kernel is the least-squares (l2) cost under the same penalised
    # search as Pelt(model="l2"), in C: the same breaks (200 of 200 noisy series of 100
    # points agreed) at 0.06 ms instead of 100 ms a series.
    # at least the smallest double: a series of zeros (or of 1e-300s) squares to a penalty
    # of 0, which ruptures refuses
    found = ruptures.KernelCPD(kernel="linear", min_size=1).fit(medians).predict(
        pen=max(2.0 * sigma**2 * math.log(n), math.ulp(0.0)))
    return [int(b) for b in found if 0 < b < n]


def _test(points: Sequence[Point], bounds: list[int], i: int, min_effect: float
          ) -> tuple[float, float, list[float], list[float]]:
    """Ratio of medians and Mann-Whitney p of the segments either side of bounds[i]; p is 1
    without the test where the ratio is below the minimum effect (that candidate fails
    anyway, and a noisy series of a hundred commits has dozens of them)."""
    before = [v for p in points[bounds[i - 1]:bounds[i]] for v in p.values]
    after = [v for p in points[bounds[i]:bounds[i + 1]] for v in p.values]
    base = float(np.median(before))
    ratio = float(np.median(after)) / base if base else math.nan
    if not math.isfinite(ratio) or abs(ratio - 1.0) < min_effect:
        return ratio, 1.0, before, after
    return ratio, mann_whitney_p(before, after), before, after


def detect(points: Sequence[Point], min_effect: float = MIN_EFFECT,
           alpha: float = ALPHA) -> list[Step]:
    """The significant steps of a series (none for fewer than 4 points). Candidates that fail
    the effect or the test are dropped one at a time, weakest first, and the rest re-tested
    on the segments that remain (a spurious split must not starve a real step of samples)."""
    if len(points) < 4:
        return []
    breaks = _candidates(np.array([p.median for p in points], dtype=float))
    while True:
        bounds = [0, *breaks, len(points)]
        tested = [_test(points, bounds, i, min_effect) for i in range(1, len(bounds) - 1)]
        failing = [(p_value, -abs(ratio - 1.0) if math.isfinite(ratio) else 0.0, j)
                   for j, (ratio, p_value, _, _) in enumerate(tested)
                   if not math.isfinite(ratio) or abs(ratio - 1.0) < min_effect
                   or p_value * len(breaks) > alpha]
        if not failing:
            break
        breaks.pop(max(failing)[2])
    return [Step(index, points[index - 1].label, points[index].label, ratio,
                 bootstrap_ratio_ci(before, after), p_value)
            for index, (ratio, p_value, before, after) in zip(breaks, tested, strict=True)]


def build_series(records: Iterable[dict[str, Any]], metric_name: str,
                 min_effect: float = MIN_EFFECT, alpha: float = ALPHA) -> list[Series]:
    """Successful records grouped by machine and experiment (the identity every view shares),
    a point per commit (records without one: per day), points in time order, with their
    steps."""
    groups: dict[tuple[str, str], dict[str, Any]] = {}
    for record in records:
        found = find_metric(record, metric_name)
        if record.get("status") != "success" or not found or found.get("value") is None:
            continue
        key = (machine_of(record), experiment_key(record))
        group = groups.setdefault(key, {"record": record, "points": {},
                                        "higher": found.get("higher_is_better", True)})
        when = str(record.get("created_at") or "")
        label = version_of(record)
        point = group["points"].setdefault(label, Point(label, when))
        point.when = min(point.when, when) if point.when else when
        point.values.append(float(found["value"]))
    ordered = sorted(groups.items())
    # of the fields a store's index holds: a series reads the same from the index or records
    labels = distinct_labels([group["record"] for _, group in ordered], INDEXED_FIELDS)
    series = []
    for ((machine, _), group), label in zip(ordered, labels, strict=True):
        points = sorted(group["points"].values(), key=lambda p: p.when)
        spec = group["record"].get("spec") or {}
        one = Series(machine, label, metric_name, bool(group["higher"]), points,
                     workload=str(spec.get("workload")))
        one.steps = detect(points, min_effect, alpha)
        series.append(one)
    return sorted(series, key=lambda one: (one.machine, one.experiment))


def render(series: Sequence[Series]) -> str:
    """Plain text: a line per series, then each step with its size, interval and commits."""
    if not series:
        return "no successful record holds this metric\n"
    lines = []
    for one in series:
        lines.append(f"{one.machine} | {one.experiment} | {one.metric}: {len(one.points)} "
                     f"point(s), {len(one.steps)} change point(s)")
        for step in one.steps:
            change = (step.ratio - 1.0) * 100
            worse = (change < 0) == one.higher_is_better
            low, high = ((v - 1.0) * 100 for v in step.ci)
            lines.append(f"  {step.before}..{step.after}: {change:+.1f}% [{low:+.1f}%, "
                         f"{high:+.1f}%] p={step.p_value:.2g} "
                         f"({'regression' if worse else 'improvement'})")
    return "\n".join(lines) + "\n"

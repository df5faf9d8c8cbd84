"""A side's records of one spec as one metric each: every raw sample, every run's samples
and value, the summaries of files without samples, and each run's stated precision."""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

from harness.core.outputs import clean_text
from harness.core.stats import finite_samples
from harness.facts import metrics as catalogue
from harness.records.definitions import center


@dataclass
class PooledMetric:
    """One metric over the records of a spec: all raw samples, and each record's value."""

    unit: str
    higher_is_better: bool | None
    samples: list[float] = field(default_factory=list)
    values: list[float] = field(default_factory=list)
    runs: list[list[float]] = field(default_factory=list)
    # {mean, stddev, rounds} of runs stored without raw samples (pytest-benchmark --save)
    summaries: list[dict[str, float]] = field(default_factory=list)
    # each run's stated precision (its 95% interval's half-width, percent; interval_pct)
    intervals: list[float] = field(default_factory=list)

    def resolution(self, name: str) -> float | None:
        """What this side can resolve, percent: the larger of its runs' typical interval and
        the spread between its runs (half their range over their median); None where the
        records state no precision (older records)."""
        if not self.intervals:
            return None
        within = statistics.median(self.intervals)
        centers = [center(name, run) for run in self.runs if run]
        middle = statistics.median(centers) if len(centers) >= 2 else 0.0
        between = (max(centers) - min(centers)) / 2 / abs(middle) * 100.0 if middle else 0.0
        return max(within, between)

    def summary_value(self, name: str) -> float | None:
        """The stored value (median over repeats), else what the metric's definition makes of
        the samples."""
        if self.values:
            return statistics.median(self.values)
        return center(name, self.samples) if self.samples else None


def pool_metrics(records: list[dict[str, Any]]) -> dict[str, PooledMetric]:
    pooled: dict[str, PooledMetric] = {}
    for record in records:
        for entry in record["metrics"]:
            if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
                continue
            name = clean_text(entry["name"], 100)  # a record's text: a terminal shows it
            # a constant of the model, kernel or machine: a change there is not a regression
            if catalogue.compare_role(name) == catalogue.CONSTANT:
                continue
            # the record's own direction first (a foreign metric keeps working from it); the
            # catalogue's for a record that leaves it out
            direction = entry.get("higher_is_better")
            if not isinstance(direction, bool):
                direction = catalogue.higher_is_better(name)
            metric = pooled.setdefault(name, PooledMetric(clean_text(entry.get("unit")), direction))
            samples = entry.get("samples")
            run = finite_samples(samples if isinstance(samples, list) else []).tolist()
            metric.samples += run
            if run:
                metric.runs.append(run)
            metric.values += finite_samples([entry.get("value")]).tolist()
            stated = entry.get("interval_pct")
            achieved = stated.get("achieved") if isinstance(stated, dict) else None
            metric.intervals += finite_samples([achieved]).tolist()
            summary = _summary_of(entry)
            if not run and summary is not None:
                metric.summaries.append(summary)
    return pooled


def _summary_of(entry: dict[str, Any]) -> dict[str, float] | None:
    """{mean, stddev, rounds} from a metric's `summary` where all three are usable numbers."""
    summary = entry.get("summary")
    if not isinstance(summary, dict):
        return None
    values = finite_samples([summary.get(k) for k in ("mean", "stddev", "rounds")])
    if values.size != 3 or values[2] < 2 or values[0] <= 0 or values[1] < 0:
        return None
    return {"mean": float(values[0]), "stddev": float(values[1]), "rounds": float(values[2])}

"""The rows of a comparison: each metric of each matched spec, its ratio, CI, p and verdict."""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

import numpy as np

from harness.compare.matching import SpecGroup, match_specs
from harness.compare.pooled import pool_metrics
from harness.core.stats import ALPHA, RatioTest, holm_survivors, ratio_of
from harness.facts import metrics as catalogue
from harness.records.definitions import OVER_MEDIAN_STEP, center
from harness.records.experiment import experiment_key
from harness.records.record import finite_json
from harness.spec.kinds import record_kind

# From one run a side a metric the catalogue gates by its value (harness/facts/metrics.py:
# VALUE) counts only beyond SINGLE_RUN_LIMIT_PCT (identical one-rank runs of lstm small peaked
# at 0.99 and 1.21 GiB on a 2-core VM: 22% apart); with MIN_RUNS runs a side it is tested like
# any sample.
SINGLE_RUN_LIMIT_PCT = 25.0


def gates(metric: str) -> bool:
    """Whether a change of this metric can fail the gate (else it is a diagnostic)."""
    return catalogue.compare_role(metric) != catalogue.DIAGNOSTIC


# Repeats per side from which runs, not steps, are the unit of the statistics.
MIN_RUNS = 2
SUGGESTED_REPEATS = 5

OK, REGRESSION, IMPROVED, NO_SAMPLES = "ok", "regression", "improved", "no samples"
# A significant change beyond the threshold but within what the two sides can resolve (their
# stated intervals together): not called a regression, and said so.
UNRESOLVED = "below resolution"
ONLY_BASELINE, ONLY_CANDIDATE = "only in baseline", "only in candidate"


@dataclass(frozen=True)
class ComparisonRow:
    """One metric of one spec: the medians, their ratio, its CI, the p-value and the verdict."""

    workload: str
    spec: str
    metric: str
    unit: str
    higher_is_better: bool | None
    verdict: str
    baseline: float | None = None
    candidate: float | None = None
    ratio: float = math.nan
    test: RatioTest | None = None
    # what the two sides can resolve together (percent), where both state their precision
    resolution_pct: float | None = None

    @property
    def gated(self) -> bool:
        return gates(self.metric)

    @property
    def verdict_text(self) -> str:
        """The verdict as tables show it: a diagnostic's is marked, since it fails nothing."""
        return self.verdict if self.gated or self.verdict in (OK, NO_SAMPLES, ONLY_BASELINE,
                                                              ONLY_CANDIDATE) \
            else f"{self.verdict} (diagnostic)"

    def as_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "workload": self.workload, "spec": self.spec, "metric": self.metric,
            "unit": self.unit, "higher_is_better": self.higher_is_better,
            "baseline_median": self.baseline, "candidate_median": self.candidate,
            "ratio": self.ratio, "ci95": None, "p_value": None, "verdict": self.verdict,
            "gated": self.gated, "resolution_pct": self.resolution_pct}
        if self.test:
            data.update(self.test.as_dict())
        return data


def verdict_of(test: RatioTest, higher_is_better: bool | None, threshold_pct: float,
               resolution_pct: float | None = None, by_floor: bool = False) -> str:
    """A change beyond the threshold that the test calls significant (`by_floor`: whatever
    the test says, `resolution_pct` then holding the history's floor), unless within the
    resolution."""
    if higher_is_better is None or not math.isfinite(test.ratio):
        return OK
    limit = threshold_pct / 100.0
    lower, higher = test.ratio < 1.0 - limit, test.ratio > 1.0 + limit
    worse, better = (lower, higher) if higher_is_better else (higher, lower)
    found = OK
    if worse and (by_floor or test.significant(higher_is_better, worse=True, alpha=ALPHA)):
        found = REGRESSION
    elif better and (by_floor or test.significant(higher_is_better, worse=False,
                                                  alpha=ALPHA)):
        found = IMPROVED
    # the change on a scale where a time and its rate agree (1.1 and 1/1.1 are one change)
    if found != OK and resolution_pct is not None \
            and test.ratio > 0 \
            and (max(test.ratio, 1.0 / test.ratio) - 1.0) * 100.0 < resolution_pct:
        return UNRESOLVED
    return found


def run_spread(values: list[float]) -> float:
    """Half the range of the runs' values over their median, percent."""
    middle = statistics.median(values)
    return (max(values) - min(values)) / 2 / abs(middle) * 100.0 if middle else 0.0


def _tested(common: dict[str, Any], test: RatioTest, higher_is_better: bool | None,
            threshold_pct: float, resolution_pct: float | None = None,
            floor: float | None = None, floor_decides: bool = False) -> ComparisonRow:
    """The row of a metric that was tested: its medians, ratio, test and verdict. `floor`:
    the history's floor of the metric (what reruns reach on this machine), which raises the
    resolution and, with `floor_decides`, decides a test of runs alone."""
    if floor is not None:
        resolution_pct = max(resolution_pct or 0.0, floor)
    by_floor = floor_decides and floor is not None and test.level == "runs"
    return ComparisonRow(**common, verdict=verdict_of(test, higher_is_better, threshold_pct,
                                                      resolution_pct, by_floor),
                         baseline=test.baseline_median, candidate=test.candidate_median,
                         ratio=test.ratio, test=test, resolution_pct=resolution_pct)


def compare_groups(base: SpecGroup, cand: SpecGroup, threshold_pct: float,
                   noise: dict[str, float] | None = None, floor_decides: bool = False
                   ) -> list[ComparisonRow]:
    """A row per metric of one spec on both sides. `noise`: the history's floor of each
    metric (percent), below which no change is called; `floor_decides`: at run level a change
    beyond a metric's floor is called whatever the runs' interval says (--floor-decides)."""
    base_metrics, cand_metrics = pool_metrics(base.records), pool_metrics(cand.records)
    # values computed, not measured (a prediction): compared as they are, without a test
    deterministic = not any(record_kind(r).measured for r in base.records + cand.records)
    rows = []
    for name in list(base_metrics) + [n for n in cand_metrics if n not in base_metrics]:
        before, after = base_metrics.get(name), cand_metrics.get(name)
        known = before or after
        assert known is not None
        common = dict(workload=base.workload, spec=base.label, metric=name, unit=known.unit,
                      higher_is_better=known.higher_is_better)
        floor = (noise or {}).get(name)
        if before is None or after is None:
            value = known.summary_value(name)
            rows.append(ComparisonRow(**common, verdict=ONLY_CANDIDATE if before is None
                                      else ONLY_BASELINE,
                                      baseline=value if after is None else None,
                                      candidate=value if before is None else None))
        elif before.samples and after.samples:
            if len(before.runs) >= MIN_RUNS and len(after.runs) >= MIN_RUNS:
                test = RatioTest.of_runs([np.asarray(r) for r in before.runs],
                                         [np.asarray(r) for r in after.runs],
                                         center=partial(center, name))
            else:
                test = RatioTest.of(before.samples, after.samples,
                                    reciprocal=name in OVER_MEDIAN_STEP)
            sides = before.resolution(name), after.resolution(name)
            # independent errors: the sides' interval half-widths add in quadrature
            resolution = math.hypot(*sides) if None not in sides else None  # type: ignore
            rows.append(_tested(common, test, known.higher_is_better, threshold_pct,
                                resolution, floor, floor_decides))
        elif catalogue.compare_role(name) == catalogue.VALUE and before.values \
                and after.values and not deterministic:
            resolution = None
            if len(before.values) >= MIN_RUNS and len(after.values) >= MIN_RUNS:
                test, limit = RatioTest.of(before.values, after.values, level="runs"), \
                    threshold_pct
                # the metric's own noise floor: the spread between each side's runs, in
                # quadrature (peak memory moved 0.93-1.07 between same-commit runs, which the
                # throughput threshold of 5% would call regressions)
                resolution = math.hypot(run_spread(before.values), run_spread(after.values))
            else:
                test = RatioTest.exact(statistics.median(before.values),
                                       statistics.median(after.values))
                limit = max(threshold_pct, SINGLE_RUN_LIMIT_PCT)
            rows.append(_tested(common, test, known.higher_is_better, limit, resolution,
                                floor, floor_decides))
        elif deterministic and before.values and after.values:
            test = RatioTest.exact(statistics.median(before.values),
                                   statistics.median(after.values))
            rows.append(_tested(common, test, known.higher_is_better, threshold_pct))
        elif before.summaries and after.summaries and not (before.samples or after.samples):
            test = RatioTest.of_summaries(before.summaries, after.summaries)
            rows.append(_tested(common, test, known.higher_is_better, threshold_pct))
        else:
            old, new = before.summary_value(name), after.summary_value(name)
            rows.append(ComparisonRow(**common, verdict=NO_SAMPLES, baseline=old, candidate=new,
                                      ratio=ratio_of(old, new)))
    return rows


@dataclass
class Comparison:
    """Everything `compare` prints: the rows, the specs without a partner, the threshold."""

    threshold_pct: float
    pairs: list[tuple[SpecGroup, SpecGroup]]
    rows: list[ComparisonRow]
    only_in_baseline: list[SpecGroup]
    only_in_candidate: list[SpecGroup]
    # spec label -> the hardware fields that differ between the sides' records of that spec
    hardware: dict[str, list[str]] = field(default_factory=dict)
    # "workload run_id: error" of every failed run of the candidate (each fails the gate)
    failed_runs: list[str] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        """Whether the gate fails: a significant regression or a failed candidate run."""
        return bool(self.regressions or self.failed_runs)

    def hardware_notes(self) -> list[str]:
        """'fields that differ (N specs: labels)': once per set of differences, however many
        specs share it (two machines differ the same way in every experiment)."""
        shared: dict[str, list[str]] = {}
        for label, found in self.hardware.items():
            shared.setdefault("; ".join(found), []).append(label)
        return [f"{found} ({len(labels)} spec(s): {', '.join(labels[:3])}"
                f"{', ...' if len(labels) > 3 else ''})" for found, labels in shared.items()]

    @property
    def compared(self) -> list[ComparisonRow]:
        """Rows whose metric was tested (samples or summaries on both sides)."""
        return [row for row in self.rows if row.test is not None]

    @property
    def regressions(self) -> list[ComparisonRow]:
        return [row for row in self.rows if row.verdict == REGRESSION and row.gated]

    @property
    def gated(self) -> list[ComparisonRow]:
        """The rows that decide the gate: gated metrics that were tested."""
        return [row for row in self.rows if row.gated and row.test is not None]

    def as_dict(self) -> dict[str, Any]:
        return finite_json({
            "threshold_pct": self.threshold_pct,
            "regressions": len(self.regressions),
            "failed_runs": self.failed_runs,
            "rows": [row.as_dict() for row in self.rows],
            "only_in_baseline": [{"workload": g.workload, "spec": g.label}
                                 for g in self.only_in_baseline],
            "only_in_candidate": [{"workload": g.workload, "spec": g.label}
                                  for g in self.only_in_candidate],
            "different_hardware": self.hardware,
        })


# Tests decided by a p-value; run-level tests are decided by their bootstrap interval.
P_LEVELS = frozenset({"samples", "summary"})


def holm(rows: list[ComparisonRow], alpha: float = ALPHA) -> list[ComparisonRow]:
    """Holm–Bonferroni over the p-value tests of one comparison: comparing many metrics of
    many specs must not turn the 5% chance of one false alarm per metric into a near
    certainty of one per comparison. A regression or improvement whose p-value does not
    survive the correction becomes ok. Diagnostics fail nothing and stay out of the family."""
    tested = [row for row in rows if row.test is not None and row.gated
              and row.test.level in P_LEVELS]
    surviving = holm_survivors([row.test.p_value for row in tested], alpha)  # type: ignore
    demoted = {id(row) for row, kept in zip(tested, surviving, strict=True)
               if row.verdict in (REGRESSION, IMPROVED) and not kept}
    return [replace(row, verdict=OK) if id(row) in demoted else row for row in rows]


def family_floors(noise: dict[str, dict[str, float]], family: int
                  ) -> dict[str, dict[str, float]]:
    """The history's floors (95% for one metric, baseline.history_noise) widened for the whole
    comparison: the gate fails when any of its `family` gated, tested metrics with a floor
    moves beyond it, so each floor is the two-sided 1 - ALPHA/family band (Bonferroni, as
    holm() treats the p-values) of the same log-normal spread. Same-commit reruns then alarm
    in about ALPHA of comparisons, not in ALPHA of each metric."""
    from statistics import NormalDist

    if family <= 1:
        return noise
    widen = NormalDist().inv_cdf(1 - ALPHA / (2 * family)) / NormalDist().inv_cdf(1 - ALPHA / 2)
    return {key: {name: (math.exp(widen * math.log1p(pct / 100.0)) - 1.0) * 100.0
                  for name, pct in floors.items()} for key, floors in noise.items()}


def compare_records(baseline: list[dict[str, Any]], candidate: list[dict[str, Any]],
                    threshold_pct: float, match_on: tuple[str, ...] | None = None,
                    noise: dict[str, dict[str, float]] | None = None,
                    floor_decides: bool = False) -> Comparison:
    """Compare the successful records of two sides (others are ignored). `noise`: each
    experiment's run-to-run noise in the baseline machine's history (experiment key ->
    metric -> percent), below which no change is called one; `floor_decides`: beyond it, a
    change of the runs' medians is called without their interval (--floor-decides)."""
    from harness.machine.hardware import hardware_differences

    pairs, only_base, only_cand = match_specs(
        [r for r in baseline if r.get("status") == "success"],
        [r for r in candidate if r.get("status") == "success"], match_on)
    keys = [experiment_key(base.records[0]) for base, _ in pairs]
    # the family: the gated metrics that are tested against a floor of the history
    family = sum(1 for (base, cand), key in zip(pairs, keys, strict=True) if key in (noise or {})
                 for row in compare_groups(base, cand, threshold_pct, (noise or {})[key])
                 if row.test is not None and row.gated and row.metric in (noise or {})[key])
    floors = family_floors(noise or {}, family)
    rows = holm([row for (base, cand), key in zip(pairs, keys, strict=True)
                 for row in compare_groups(base, cand, threshold_pct, floors.get(key),
                                           floor_decides)])
    hardware: dict[str, list[str]] = {}
    for base, cand in pairs:
        found = sorted({difference for before in base.records for after in cand.records
                        for difference in hardware_differences(_machine(before),
                                                               _machine(after))})
        if found:
            hardware[f"{base.workload} {base.label}"] = found
    return Comparison(threshold_pct, pairs, rows, only_base, only_cand, hardware)


def _machine(record: dict[str, Any]) -> dict[str, Any]:
    return record["machine"] if isinstance(record.get("machine"), dict) else {}

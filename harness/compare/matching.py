"""`dtbench compare BASELINE CANDIDATE`: match records by spec, test every sampled metric, and
exit 1 when one got worse by more than the threshold with statistical significance.

A change counts as a regression only when both the bootstrap CI of the ratio of medians lies
wholly on the worse side of 1 and the Mann–Whitney test agrees (p < 0.05): a noisy pair of runs
on a shared machine should not fail a CI pipeline, a real slowdown should.
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from harness.compare.stats import ALPHA, RatioTest, finite_samples, ratio_of
from harness.core.errors import UsageError
from harness.core.files import check_output_file, write_atomic
from harness.core.text import one_line, render_table, size_label
from harness.microbench.kernels import metrics as kernel
from harness.records.inputs import load_inputs
from harness.records.record import finite_json

EXIT_OK, EXIT_REGRESSION = 0, 1
# Constants of the model or the machine, not of the run: a change there is not a regression.
NOT_COMPARED = frozenset({"flops_per_sample", "peak_flops", "grad_bytes_per_step",
                          "bytes_sent_per_rank", *kernel.CONSTANT_METRICS})
# SPEC section 6, for foreign records whose metrics do not say which way is better.
KNOWN_DIRECTIONS = {"throughput": True, "step_time": False, "achieved_flops": True, "mfu": True,
                    "peak_memory": False, "time_to_train": False, "scaling_efficiency": True,
                    "algbw": True, "busbw": True, "latency": False, "energy": False}
# Repeats per side from which runs, not steps, are the unit of the statistics.
MIN_RUNS = 2
SUGGESTED_REPEATS = 5
KEY_FIELDS = ("workload", "size", "backend", "comm", "launcher", "precision", "world_size",
              "batch_per_rank", "mode")

OK, REGRESSION, IMPROVED, NO_SAMPLES = "ok", "regression", "improved", "no samples"
ONLY_BASELINE, ONLY_CANDIDATE = "only in baseline", "only in candidate"
HEADER = ("workload", "spec", "metric", "unit", "baseline median", "candidate median", "ratio",
          "ratio CI95", "p", "n (base/cand)", "verdict")


def warn(message: str) -> None:
    print(f"dtbench: warning: {one_line(message, 1000)}", file=sys.stderr)


def _plain(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)


def _largest_size(spec: dict[str, Any]) -> Any:
    sizes = spec.get("sizes")
    if isinstance(sizes, list):
        numbers = [s for s in sizes if isinstance(s, int) and not isinstance(s, bool)]
        return max(numbers) if numbers else None
    return sizes


def fields_key(record: dict[str, Any]) -> tuple[str, ...]:
    """The comparable spec fields; a comm record adds its op and largest message size, since
    busbw is measured there, and a kernel record its shape, pass, algorithm and threads."""
    spec = record["spec"]
    key = [_plain(spec.get(name)) for name in KEY_FIELDS]
    if spec.get("task") == "comm":
        key += [_plain(spec.get("op")), _plain(_largest_size(spec))]
    elif spec.get("task") == kernel.TASK:
        key += [_plain(spec.get(name)) for name in kernel.KEY_FIELDS]
    return tuple(key)


def _spec_key(record: dict[str, Any]) -> str | None:
    value = record.get("spec_key")
    return _plain(value) if value not in (None, "") else None



def _size_text(size: Any) -> str:
    if isinstance(size, int) and not isinstance(size, bool):
        return size_label(size, compact=True)
    return str(size)


def spec_label(record: dict[str, Any], spec_key: str | None = None) -> str:
    """size/backend/precision/comm/ws/bs, the way a reader tells two runs of a workload apart."""
    spec = record["spec"]
    if spec.get("task") == kernel.TASK:
        parts = [kernel.kernel_label(spec)]
    elif spec.get("task") == "comm":
        parts = [spec.get("backend"), spec.get("precision"), spec.get("comm"),
                 f"ws{spec.get('world_size')}", spec.get("op"),
                 _size_text(_largest_size(spec))]
    else:
        parts = [spec.get("size"), spec.get("backend"), spec.get("precision"), spec.get("comm"),
                 f"ws{spec.get('world_size')}", f"bs{spec.get('batch_per_rank')}"]
        if spec.get("mode") not in (None, "throughput"):
            parts.append(spec.get("mode"))
    label = "/".join(str(part) for part in parts)
    return f"{label} key {spec_key[:8]}" if spec_key else label


@dataclass
class SpecGroup:
    """Records of one spec on one side; repeats pool their samples."""

    workload: str
    label: str
    records: list[dict[str, Any]]


def _group(records: Iterable[dict[str, Any]]) -> dict[tuple[str, ...], dict[str | None,
                                                                         list[dict[str, Any]]]]:
    groups: dict[tuple[str, ...], dict[str | None, list[dict[str, Any]]]] = {}
    for record in records:
        groups.setdefault(fields_key(record), {}).setdefault(_spec_key(record), []).append(record)
    return groups


def _one_group(records: list[dict[str, Any]], spec_key: str | None = None) -> SpecGroup:
    return SpecGroup(str(records[0]["spec"].get("workload")), spec_label(records[0], spec_key),
                     records)


def match_specs(baseline: list[dict[str, Any]], candidate: list[dict[str, Any]]
                ) -> tuple[list[tuple[SpecGroup, SpecGroup]], list[SpecGroup], list[SpecGroup]]:
    """Pairs of groups of the same spec, then the groups found only in baseline or candidate.

    spec_key decides when every record of a spec has one (it covers fields such as threads and
    compile that the fallback key lacks); otherwise the fields key alone decides."""
    base_groups, cand_groups = _group(baseline), _group(candidate)
    pairs: list[tuple[SpecGroup, SpecGroup]] = []
    only_base: list[SpecGroup] = []
    only_cand: list[SpecGroup] = []
    for key in list(base_groups) + [k for k in cand_groups if k not in base_groups]:
        base, cand = base_groups.get(key, {}), cand_groups.get(key, {})
        if not base or not cand:
            for side, found in ((base, only_base), (cand, only_cand)):
                found += [_one_group(records, spec_key if len(side) > 1 else None)
                          for spec_key, records in side.items()]
        elif None in base or None in cand:
            pairs.append((_one_group([r for rs in base.values() for r in rs]),
                          _one_group([r for rs in cand.values() for r in rs])))
        else:
            split = len(set(base) | set(cand)) > 1
            for spec_key, records in base.items():
                shown = spec_key if split else None
                if spec_key in cand:
                    pairs.append((_one_group(records, shown), _one_group(cand[spec_key], shown)))
                else:
                    only_base.append(_one_group(records, shown))
            only_cand += [_one_group(records, spec_key) for spec_key, records in cand.items()
                          if spec_key not in base]
    return pairs, only_base, only_cand


@dataclass
class PooledMetric:
    """One metric over the records of a spec: all raw samples, and each record's value."""

    unit: str
    higher_is_better: bool | None
    samples: list[float] = field(default_factory=list)
    values: list[float] = field(default_factory=list)
    runs: list[list[float]] = field(default_factory=list)

    def summary_value(self) -> float | None:
        """The stored value (median over repeats), else the median of the samples."""
        if self.values:
            return statistics.median(self.values)
        return statistics.median(self.samples) if self.samples else None


def pool_metrics(records: list[dict[str, Any]]) -> dict[str, PooledMetric]:
    pooled: dict[str, PooledMetric] = {}
    for record in records:
        for entry in record["metrics"]:
            if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
                continue
            name = entry["name"]
            if name in NOT_COMPARED:
                continue
            direction = entry.get("higher_is_better")
            if not isinstance(direction, bool):
                direction = KNOWN_DIRECTIONS.get(name)
            metric = pooled.setdefault(name, PooledMetric(str(entry.get("unit") or ""), direction))
            samples = entry.get("samples")
            run = finite_samples(samples if isinstance(samples, list) else []).tolist()
            metric.samples += run
            if run:
                metric.runs.append(run)
            metric.values += finite_samples([entry.get("value")]).tolist()
    return pooled


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

    def cells(self) -> list[str]:
        ci = f"[{self.test.ci_low:.3f}, {self.test.ci_high:.3f}]" if self.test else "-"
        p_value = _number(self.test.p_value, "{:.2g}") if self.test else "-"
        count = (f"{self.test.n_baseline}/{self.test.n_candidate} "
                 f"{'runs' if self.test.level == 'runs' else 'steps'}") if self.test else "-"
        return [self.workload, self.spec, self.metric, self.unit or "-", _number(self.baseline),
                _number(self.candidate), _number(self.ratio, "{:.3f}"), ci, p_value, count,
                self.verdict]

    def as_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "workload": self.workload, "spec": self.spec, "metric": self.metric,
            "unit": self.unit, "higher_is_better": self.higher_is_better,
            "baseline_median": self.baseline, "candidate_median": self.candidate,
            "ratio": self.ratio, "ci95": None, "p_value": None, "verdict": self.verdict}
        if self.test:
            data.update(self.test.as_dict())
        return data


def _number(value: float | None, fmt: str = "{:.4g}") -> str:
    return "-" if value is None or not math.isfinite(value) else fmt.format(value)


def verdict_of(test: RatioTest, higher_is_better: bool | None, threshold_pct: float) -> str:
    if higher_is_better is None or not math.isfinite(test.ratio):
        return OK
    limit = threshold_pct / 100.0
    lower, higher = test.ratio < 1.0 - limit, test.ratio > 1.0 + limit
    worse, better = (lower, higher) if higher_is_better else (higher, lower)
    if worse and test.significant(higher_is_better, worse=True, alpha=ALPHA):
        return REGRESSION
    if better and test.significant(higher_is_better, worse=False, alpha=ALPHA):
        return IMPROVED
    return OK


def compare_groups(base: SpecGroup, cand: SpecGroup, threshold_pct: float
                   ) -> list[ComparisonRow]:
    base_metrics, cand_metrics = pool_metrics(base.records), pool_metrics(cand.records)
    rows = []
    for name in list(base_metrics) + [n for n in cand_metrics if n not in base_metrics]:
        before, after = base_metrics.get(name), cand_metrics.get(name)
        known = before or after
        assert known is not None
        common = dict(workload=base.workload, spec=base.label, metric=name, unit=known.unit,
                      higher_is_better=known.higher_is_better)
        if before is None or after is None:
            value = known.summary_value()
            rows.append(ComparisonRow(**common, verdict=ONLY_CANDIDATE if before is None
                                      else ONLY_BASELINE,
                                      baseline=value if after is None else None,
                                      candidate=value if before is None else None))
        elif before.samples and after.samples:
            if len(before.runs) >= MIN_RUNS and len(after.runs) >= MIN_RUNS:
                test = RatioTest.of_runs([np.asarray(r) for r in before.runs],
                                         [np.asarray(r) for r in after.runs])
            else:
                test = RatioTest.of(before.samples, after.samples)
            rows.append(ComparisonRow(**common, verdict=verdict_of(test, known.higher_is_better,
                                                                   threshold_pct),
                                      baseline=test.baseline_median,
                                      candidate=test.candidate_median, ratio=test.ratio,
                                      test=test))
        else:
            old, new = before.summary_value(), after.summary_value()
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

    @property
    def regressions(self) -> list[ComparisonRow]:
        return [row for row in self.rows if row.verdict == REGRESSION]

    def summary(self) -> str:
        found = self.regressions
        if not found:
            return f"no significant regression (threshold {self.threshold_pct:g}%)"
        named = ", ".join(f"{row.metric} on {row.workload} ({row.spec})" for row in found)
        return f"{len(found)} regression(s): {named}"

    def render(self) -> str:
        lines = [render_table(HEADER, [row.cells() for row in self.rows])] if self.rows else [
            "no spec in common between baseline and candidate"]
        lines += [f"only in baseline: {g.workload} ({g.label})" for g in self.only_in_baseline]
        lines += [f"only in candidate: {g.workload} ({g.label})" for g in self.only_in_candidate]
        if any(row.test is not None and row.test.level == "samples" for row in self.rows):
            lines.append("note: where a side has one run of a spec, its steps are the samples; "
                         "they share that run's machine state, so run-to-run variation is not "
                         f"in the interval (repeat runs, e.g. --repeat {SUGGESTED_REPEATS}, "
                         "make runs the unit)")
        lines.append(self.summary())
        return "\n".join(lines)

    def as_dict(self) -> dict[str, Any]:
        return finite_json({
            "threshold_pct": self.threshold_pct,
            "regressions": len(self.regressions),
            "summary": self.summary(),
            "rows": [row.as_dict() for row in self.rows],
            "only_in_baseline": [{"workload": g.workload, "spec": g.label}
                                 for g in self.only_in_baseline],
            "only_in_candidate": [{"workload": g.workload, "spec": g.label}
                                  for g in self.only_in_candidate],
        })


def compare_records(baseline: list[dict[str, Any]], candidate: list[dict[str, Any]],
                    threshold_pct: float) -> Comparison:
    """Compare the successful records of two sides (others are ignored)."""
    pairs, only_base, only_cand = match_specs(
        [r for r in baseline if r.get("status") == "success"],
        [r for r in candidate if r.get("status") == "success"])
    rows = [row for base, cand in pairs for row in compare_groups(base, cand, threshold_pct)]
    return Comparison(threshold_pct, pairs, rows, only_base, only_cand)


def _fingerprints(records: list[dict[str, Any]], field_name: str) -> set[str]:
    return {str(machine.get(field_name)) for record in records
            if isinstance(machine := record.get("machine"), dict) and machine.get(field_name)}


def machine_mismatch(baseline: list[dict[str, Any]], candidate: list[dict[str, Any]]
                     ) -> str | None:
    """Why the two sides look like different machines (machine_id, else cpu_model), or None."""
    for field_name in ("machine_id", "cpu_model"):
        before, after = _fingerprints(baseline, field_name), _fingerprints(candidate, field_name)
        everyone = all(isinstance(r.get("machine"), dict) and r["machine"].get(field_name)
                       for r in baseline + candidate)
        if before and after and everyone:
            if before == after:
                return None
            return (f"baseline and candidate ran on different machines ({field_name} "
                    f"{', '.join(sorted(before))} vs {', '.join(sorted(after))}); "
                    f"differences may come from the hardware")
    return None


def load_side(path: str) -> list[dict[str, Any]]:
    loaded = load_inputs([path])
    if not loaded.records:
        why = f" ({loaded.warnings[0]}" + (f", and {len(loaded.warnings) - 1} more" if
                                           len(loaded.warnings) > 1 else "") + ")" \
            if loaded.warnings else ""
        raise UsageError(f"{path}: no readable dtbench records{why}")
    for message in loaded.warnings:
        warn(message)
    success = [record for record in loaded.records if record.get("status") == "success"]
    if not success:
        raise UsageError(f"{path}: no successful records to compare "
                         f"({len(loaded.records)} skipped or failed)")
    return success


def command(args: argparse.Namespace) -> int:
    target = check_output_file(args.json_file, "--json") if args.json_file else None
    baseline, candidate = load_side(args.baseline), load_side(args.candidate)
    comparison = compare_records(baseline, candidate, float(args.threshold))
    mismatch = machine_mismatch(
        [r for base, _ in comparison.pairs for r in base.records] or baseline,
        [r for _, cand in comparison.pairs for r in cand.records] or candidate)
    if mismatch:
        warn(mismatch)
    if not comparison.rows:
        warn(f"{args.baseline} and {args.candidate} have no spec in common: nothing compared")
    print(comparison.render())
    if target is not None:
        try:
            write_atomic(target, json.dumps(comparison.as_dict(), indent=1, allow_nan=False)
                         + "\n")
        except OSError as exc:
            raise UsageError(f"--json {target}: cannot write ({exc.strerror or exc})") from None
    return EXIT_REGRESSION if comparison.regressions else EXIT_OK

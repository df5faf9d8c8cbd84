"""The gate's power curve from a pool of runs: how often it catches a slowdown of a given size,
and how often it alarms when nothing changed (benchmarks/bench_gate_power.py makes the
pool; tests/harness/compare/test_power.py checks these statistics on synthetic runs).

The pool is one set of invocations of what the gate runs, made once and interleaved in time:
each round a same-commit invocation before each slowed one (`plan`), so that both sample the
machine at the same times. Gates are then assembled from it and decided as `dtbench gate`
decides them, without running anything again:

- history (the shipped gate): each invocation in turn is the candidate, against a history of
  the HISTORY_RUNS same-commit invocations nearest it in time (each one commit of the target
  branch, as the CI's store would hold them);
- interleaved K (`dtbench gate --interleave K`): K slowed (or same-commit) invocations
  against the K same-commit ones that ran just before each, disjoint blocks in time order.

A slowed invocation's records are made to read as a change of the code (the straggler field
that slowed it removed from the spec), so the gate compares them exactly as it would a slower
commit.
"""
from __future__ import annotations

import copy
import json
import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from harness.compare.baseline import HISTORY_RUNS, select_baseline
from harness.compare.clock import CLOCKS, restated
from harness.compare.command import Verdict, judge
from harness.records.record import metric as find_metric
from harness.spec.fields import spec_key
from harness.spec.specs import RUN_FIELDS

SLOWDOWNS = (2.0, 3.0, 5.0, 10.0)
# The spec fields that slow an invocation, at the values a run without a straggler has.
SLOWING: dict[str, Any] = {"straggler": None, "straggler_work": "idle"}
TARGET_BRANCH = "main"
CANDIDATE_COMMIT = "c" * 40


def straggler_factor(slowdown_pct: float) -> float:
    """`--straggler 0:FACTOR` that slows a one-rank step by `slowdown_pct` percent: the rank
    idles (FACTOR - 1) x its compute each step, so the step takes FACTOR times as long."""
    return 1.0 / (1.0 - slowdown_pct / 100.0)


def plan(rounds: int, slowdowns: Sequence[float] = SLOWDOWNS) -> list[float]:
    """The slowdown of each invocation in time order (0: the same commit): each round a
    same-commit invocation before each slowed one, e.g. 0 2 0 3 0 5 0 10."""
    return [level for _ in range(rounds) for slowed in slowdowns for level in (0.0, slowed)]


@dataclass(frozen=True)
class Invocation:
    """One invocation of the pool: its place in time, its slowdown, its records and seconds."""

    index: int
    slowdown_pct: float
    records: tuple[dict[str, Any], ...]
    seconds: float


@dataclass(frozen=True)
class Gate:
    """A gate assembled from the pool: the invocations it compares and its wall time."""

    mode: str
    slowdown_pct: float
    baseline: tuple[Invocation, ...]
    candidate: tuple[Invocation, ...]

    @property
    def seconds(self) -> float:
        """The gate's own runs: the candidate's (history), or both sides' (interleaved)."""
        runs = self.candidate if self.mode.startswith("history") else \
            self.baseline + self.candidate
        return sum(run.seconds for run in runs)


def history_gates(pool: Sequence[Invocation], size: int = HISTORY_RUNS) -> list[Gate]:
    """Each invocation against the `size` same-commit invocations nearest it in time (itself
    left out): the shipped gate's comparison with the history."""
    same = [run for run in pool if run.slowdown_pct == 0]
    gates = []
    for run in pool:
        others = sorted((other for other in same if other.index != run.index),
                        key=lambda other: (abs(other.index - run.index), other.index))[:size]
        if others:
            gates.append(Gate("history", run.slowdown_pct,
                              tuple(sorted(others, key=lambda other: other.index)), (run,)))
    return gates


def interleaved_gates(pool: Sequence[Invocation], pairs: int) -> list[Gate]:
    """Disjoint gates of `pairs` invocations a side, alternating in time: a slowed invocation
    with the same-commit one just before it, or (for the false alarms) consecutive
    same-commit invocations, alternately baseline and candidate."""
    by_index = {run.index: run for run in pool}
    gates = []
    levels = sorted({run.slowdown_pct for run in pool if run.slowdown_pct > 0})
    for level in levels:
        couples = [(by_index[run.index - 1], run) for run in pool if run.slowdown_pct == level
                   and by_index.get(run.index - 1) is not None
                   and by_index[run.index - 1].slowdown_pct == 0]
        for start in range(0, len(couples) - pairs + 1, pairs):
            block = couples[start:start + pairs]
            gates.append(Gate(f"interleaved:{pairs}", level, tuple(b for b, _ in block),
                              tuple(c for _, c in block)))
    same = [run for run in pool if run.slowdown_pct == 0]
    for start in range(0, len(same) - 2 * pairs + 1, 2 * pairs):
        block = same[start:start + 2 * pairs]
        gates.append(Gate(f"interleaved:{pairs}", 0.0, tuple(block[0::2]), tuple(block[1::2])))
    return gates


def grouped(pool: Sequence[Invocation], size: int) -> list[Invocation]:
    """The pool with every `size` invocations of one slowdown, consecutive in its time order,
    merged into one (their records one commit's, their seconds summed): what an invocation
    with `size` times the repeats would give where the machine's speed moves in time, each
    group spread over `size` rounds (a group left short at the end is dropped)."""
    merged: list[Invocation] = []
    for level in sorted({run.slowdown_pct for run in pool}):
        runs = [run for run in pool if run.slowdown_pct == level]
        for start in range(0, len(runs) - size + 1, size):
            block = runs[start:start + size]
            merged.append(Invocation(block[0].index, level,
                                     tuple(r for run in block for r in run.records),
                                     sum(run.seconds for run in block)))
    return sorted(merged, key=lambda run: run.index)


def segments(pool: Sequence[Invocation], breaks: Sequence[int] = ()) -> list[list[Invocation]]:
    """The pool cut before each index in `breaks`, where what measures changed (a pool resumed
    with other code: a probe read otherwise is a step in every figure on its clock), in time
    order; gates, spreads and slowdowns are taken within a part, never across one."""
    edges = sorted(set(breaks))
    lows, highs = [-math.inf, *edges], [*edges, math.inf]
    parts = [[run for run in pool if low <= run.index < high]
             for low, high in zip(lows, highs, strict=True)]
    return [part for part in parts if part]


def gates_of(pool: Sequence[Invocation], mode: str) -> list[Gate]:
    """`history`, `history:G` (each commit G invocations of the pool, see grouped) or
    `interleaved:K`."""
    name, _, count = mode.partition(":")
    if name == "history" and (not count or count.isdigit() and int(count) >= 1):
        return history_gates(grouped(pool, int(count)) if count else pool)
    if name != "interleaved" or not count.isdigit() or int(count) < 1:
        raise ValueError(f"unknown gate mode {mode!r}: history, history:G or interleaved:K "
                         "(G, K >= 1)")
    return interleaved_gates(pool, int(count))


def _with_code(record: dict[str, Any], commit: str, branch: str) -> dict[str, Any]:
    found = copy.deepcopy(record)
    found["code"] = {**(found.get("code") or {}), "commit": commit, "branch": branch,
                     "dirty": False}
    return found


def as_change(record: dict[str, Any], keys: dict[str, str], commit: str = CANDIDATE_COMMIT
              ) -> dict[str, Any]:
    """A record as a change of the code would leave it: the straggler that slowed it gone from
    its spec (and its key, the same-commit runs' key of that spec), on a branch of its own."""
    found = _with_code(record, commit, "change")
    if found["spec"].get("straggler") is not None:
        found["spec"].update(SLOWING)
        shape = _shape(found["spec"])
        found["spec_key"] = keys.get(shape) or spec_key(found["spec"], RUN_FIELDS)
    return found


def _shape(spec: dict[str, Any]) -> str:
    return json.dumps({k: v for k, v in spec.items() if k not in SLOWING}, sort_keys=True,
                      default=str)


def spec_keys(pool: Sequence[Invocation]) -> dict[str, str]:
    """The spec key of each same-commit spec (by its fields but the straggler)."""
    return {_shape(record["spec"]): record["spec_key"] for run in pool if run.slowdown_pct == 0
            for record in run.records if record.get("spec_key")}


def decide(gate: Gate, keys: dict[str, str], threshold: float = 5.0,
           floor_decides: bool = False) -> Verdict:
    """The gate's verdict, as `dtbench gate` decides it: against the history (its runs each a
    commit of the target branch, the latest chosen per experiment, the machine's spread from
    them all; `floor_decides` as `dtbench gate --floor-decides`), or the two interleaved sides
    against each other."""
    if gate.mode == "history":
        history = [_with_code(record, f"{run.index:040x}", TARGET_BRANCH)
                   for run in gate.baseline for record in run.records]
        candidate = [as_change(record, keys) for run in gate.candidate for record in run.records]
        chosen = select_baseline(history, candidate, "the pool", branch=TARGET_BRANCH)
        return judge(chosen.records, candidate, threshold, spread=chosen.spread,
                     floor_decides=floor_decides)
    baseline = [_with_code(record, "b" * 40, TARGET_BRANCH)
                for run in gate.baseline for record in run.records]
    candidate = [as_change(record, keys) for run in gate.candidate for record in run.records]
    return judge(baseline, candidate, threshold)


@dataclass
class Outcome:
    """A decided gate: its exit code and the workloads with a gated regression."""

    gate: Gate
    exit_code: int
    workloads: frozenset[str]


def evaluate(pool: Sequence[Invocation], mode: str, threshold: float = 5.0,
             decider: Callable[[Gate, dict[str, str], float], Verdict] = decide,
             breaks: Sequence[int] = ()) -> list[Outcome]:
    """Every gate of `mode` the pool makes within each of its segments, decided."""
    keys = spec_keys(pool)
    outcomes = []
    for gate in (gate for part in segments(pool, breaks) for gate in gates_of(part, mode)):
        verdict = decider(gate, keys, threshold)
        regressed = frozenset(row.workload for row in verdict.comparison.regressions)
        outcomes.append(Outcome(gate, verdict.exit_code, regressed))
    return outcomes


@dataclass
class CurvePoint:
    """One slowdown's row of the curve: gates, how many alarmed (caught for a slowdown, false
    alarms for the same commit), per workload too, and the gates' wall time."""

    slowdown_pct: float
    gates: int = 0
    alarms: int = 0
    per_workload: dict[str, int] = field(default_factory=dict)
    seconds: list[float] = field(default_factory=list)
    invocations: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {"slowdown_pct": self.slowdown_pct, "gates": self.gates, "alarms": self.alarms,
                "per_workload": self.per_workload, "invocations": self.invocations,
                "median_gate_seconds": statistics.median(self.seconds) if self.seconds
                else None}


def curve(outcomes: Sequence[Outcome], workloads: Sequence[str]) -> list[CurvePoint]:
    """The power curve: a point per slowdown (0 first: the false alarms)."""
    points: dict[float, CurvePoint] = {}
    for outcome in outcomes:
        level = outcome.gate.slowdown_pct
        point = points.setdefault(level, CurvePoint(level, per_workload=dict.fromkeys(
            workloads, 0)))
        point.gates += 1
        point.alarms += outcome.exit_code == 1
        point.invocations += len(outcome.gate.candidate)
        point.seconds.append(outcome.gate.seconds)
        for workload in outcome.workloads:
            point.per_workload[workload] = point.per_workload.get(workload, 0) + 1
    return [points[level] for level in sorted(points)]


def on_clock(pool: Sequence[Invocation], clock: str) -> list[Invocation]:
    """The pool with each record read on `clock` (harness/compare/clock.py); records that
    lack its figure left out."""
    if clock not in CLOCKS:
        raise ValueError(f"unknown clock {clock!r}: one of {', '.join(CLOCKS)}")
    return [Invocation(run.index, run.slowdown_pct,
                       tuple(found for record in run.records
                             if (found := restated(record, clock)) is not None), run.seconds)
            for run in pool]


def throughputs(run: Invocation) -> dict[str, float]:
    """Each workload's median throughput over an invocation's records."""
    found: dict[str, list[float]] = {}
    for record in run.records:
        entry = find_metric(record, "throughput")
        if record.get("status") == "success" and entry and entry.get("value"):
            found.setdefault(str(record["spec"].get("workload")), []).append(entry["value"])
    return {workload: statistics.median(values) for workload, values in found.items()}


def _same_commit(part: Sequence[Invocation]) -> dict[str, list[float]]:
    """Each workload's median throughputs of the same-commit invocations of `part`."""
    found: dict[str, list[float]] = {}
    for run in part:
        if run.slowdown_pct == 0:
            for workload, value in throughputs(run).items():
                found.setdefault(workload, []).append(value)
    return found


def spread(pool: Sequence[Invocation], breaks: Sequence[int] = ()) -> dict[str, float]:
    """Per workload, how far apart the same-commit invocations fall: the coefficient of
    variation of their median throughputs, percent (pooled over the segments: each part's
    variance about its own mean, weighted by its degrees of freedom)."""
    squares: dict[str, float] = {}
    freedom: dict[str, int] = {}
    for part in segments(pool, breaks):
        for workload, values in _same_commit(part).items():
            if len(values) > 1:
                cv = statistics.stdev(values) / statistics.fmean(values)
                squares[workload] = squares.get(workload, 0.0) + cv * cv * (len(values) - 1)
                freedom[workload] = freedom.get(workload, 0) + len(values) - 1
    return {w: math.sqrt(squares[w] / freedom[w]) * 100.0 for w in sorted(squares)}


def injected(pool: Sequence[Invocation], breaks: Sequence[int] = ()
             ) -> dict[float, dict[str, float]]:
    """The slowdown each level actually made, percent, per workload: 1 - the median of the
    slowed invocations' throughputs, each over the same-commit median of its segment."""
    ratios: dict[float, dict[str, list[float]]] = {}
    for part in segments(pool, breaks):
        middle = {w: statistics.median(v) for w, v in _same_commit(part).items()}
        for run in part:
            if run.slowdown_pct > 0:
                for workload, value in throughputs(run).items():
                    if workload in middle:
                        ratios.setdefault(run.slowdown_pct, {}).setdefault(
                            workload, []).append(value / middle[workload])
    return {level: {w: (1.0 - statistics.median(v)) * 100.0 for w, v in found.items()}
            for level, found in sorted(ratios.items())}


def table(points: Sequence[CurvePoint], workloads: Sequence[str], mode: str) -> str:
    """The curve as a Markdown table: slowdown, gates, invocations, caught (or false alarms),
    each workload's alarms, and the median wall time of a gate's own runs."""
    head = ["slowdown", "gates", "candidate runs", "caught", "false alarms", *workloads,
            "wall time per gate"]
    lines = [f"gate: {mode}", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for p in points:
        share = f"{p.alarms} / {p.gates}"
        seconds = statistics.median(p.seconds) if p.seconds else float("nan")
        lines.append("| " + " | ".join([
            f"{p.slowdown_pct:g}%" if p.slowdown_pct else "0 (same commit)", str(p.gates),
            str(p.invocations), "" if p.slowdown_pct == 0 else share,
            share if p.slowdown_pct == 0 else "",
            *(str(p.per_workload.get(w, 0)) for w in workloads), f"{seconds:.0f} s"]) + " |")
    return "\n".join(lines)

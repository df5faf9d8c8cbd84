"""Strategies ranked for one cluster, with the probability that the order holds, and rankings
set beside measured ones (docs/guide/prediction.md#rankings).

A ranking orders strategies by predicted throughput (samples/s of the whole job) at one rank
count. Its probability is the share of the Monte Carlo draws of the inputs (the intervals'
draws, harness/predict/uncertain.py) in which the whole order holds: every strategy faster
than the next. The draws are common random numbers (an input draws the same numbers for
every strategy), so an input that moves every strategy alike leaves the order alone.

Against measurements: within a cell (the same workload, size, precision, backend, comm,
ranks, link, threads and batch), each pair of strategies measured in it; the measured order
counts where the measured difference exceeds the between-run spread (half the range of each
strategy's runs over their median, the two in quadrature: the resolution `dtbench compare`
uses), and agrees when the prediction orders the pair the same way.
"""
from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations
from typing import Any


def order_probability(columns: Sequence[Sequence[float]]) -> float | None:
    """The share of draws in which every column's value exceeds the next one's (None when a
    column has no draws or they differ in number); a draw with a missing value does not
    count."""
    if len(columns) < 2:
        return 1.0 if columns else None
    lengths = {len(column) for column in columns}
    if len(lengths) != 1 or not lengths.pop():
        return None
    held = counted = 0
    for values in zip(*columns, strict=True):
        if not all(math.isfinite(v) for v in values):
            continue
        counted += 1
        held += all(a > b for a, b in zip(values, values[1:], strict=False))
    return held / counted if counted else None


@dataclass(frozen=True)
class Ranking:
    """Strategies at one rank count, fastest first, and how sure the order is."""

    nodes: int
    order: tuple[str, ...]
    throughput: Mapping[str, float]
    probability: float | None
    pairs: tuple[float | None, ...]  # each neighbour pair's probability, in order
    left_out: Mapping[str, str]

    def line(self) -> str:
        """'at 16 ranks: ddp > zero1 > fsdp (the order holds in 87% of draws; ...)'."""
        if not self.order:
            return f"at {self.nodes} ranks: no strategy has an estimate"
        shown = " > ".join(f"{name} ({self.throughput[name]:.4g}/s)" for name in self.order)
        if len(self.order) < 2:
            sure = ""
        elif self.probability is None:
            sure = " (no input's uncertainty known: no probability)"
        else:
            pairs = ", ".join(f"{a} > {b} {p:.0%}" for (a, b), p in zip(
                zip(self.order, self.order[1:], strict=False), self.pairs, strict=True)
                if p is not None)
            sure = f" (the order holds in {self.probability:.0%} of draws: {pairs})"
        out = "".join(f"; {name}: {why}" for name, why in self.left_out.items())
        return f"at {self.nodes} ranks: {shown}{sure}{out}"


def rate_draws(point: Any) -> list[float]:
    """Throughput at each draw of a prediction (samples a step over the drawn step time)."""
    samples = point.estimate.samples_per_step
    return [samples / step if step > 0 else math.nan for step in point.draws]


def rank(points: Mapping[str, Any], nodes: int) -> Ranking:
    """Rank the strategies' predictions (model.Point) at one rank count by throughput."""
    priced = {name: p for name, p in points.items() if p.estimate is not None}
    order = tuple(sorted(priced, key=lambda name: (-priced[name].estimate.throughput, name)))
    columns = [rate_draws(priced[name]) for name in order]
    pairs = tuple(order_probability([a, b]) for a, b in zip(columns, columns[1:], strict=False))
    return Ranking(nodes, order, {name: priced[name].estimate.throughput for name in order},
                   order_probability(columns), pairs,
                   {name: p.reason for name, p in points.items() if p.estimate is None})


def rankings(points_by_strategy: Mapping[str, Sequence[Any]]) -> list[Ranking]:
    """A ranking at every rank count the strategies were predicted at."""
    counts = sorted({p.nodes for points in points_by_strategy.values() for p in points})
    return [rank({name: p for name, points in points_by_strategy.items() for p in points
                  if p.nodes == count}, count) for count in counts]


def run_spread(values: Sequence[float]) -> float | None:
    """Half the range of runs' values over their median (None from fewer than two)."""
    if len(values) < 2:
        return None
    middle = statistics.median(values)
    return (max(values) - min(values)) / 2 / abs(middle) if middle else None


@dataclass(frozen=True)
class PairRow:
    """Two strategies measured in one cell: their measured and predicted order."""

    cell: str
    first: str  # the one predicted faster
    second: str
    predicted: tuple[float, float]  # throughput of each
    probability: float | None  # that the predicted order holds
    measured: tuple[float, float]  # median measured throughput of each
    runs: tuple[int, int]
    spread: float | None  # the between-run spreads in quadrature; None with one run a side

    @property
    def difference(self) -> float:
        """Measured throughput of the first over the second's, minus one."""
        return self.measured[0] / self.measured[1] - 1 if self.measured[1] else math.nan

    @property
    def resolved(self) -> bool | None:
        """Whether the measured difference exceeds the between-run spread (None: unknown)."""
        if self.spread is None:
            return None
        return abs(self.difference) > self.spread

    @property
    def agrees(self) -> bool:
        """Whether the measured order is the predicted one (first faster)."""
        return self.measured[0] > self.measured[1]


def pair_rows(cells: Mapping[str, Mapping[str, tuple[Sequence[float], Any]]]) -> list[PairRow]:
    """cells: cell -> strategy -> (measured throughputs of its runs, its prediction); a row
    for every pair of strategies measured and predicted in a cell."""
    found = []
    for cell, by_strategy in cells.items():
        priced = {name: (values, point) for name, (values, point) in by_strategy.items()
                  if values and point is not None and point.estimate is not None}
        for a, b in combinations(sorted(priced), 2):
            (va, pa), (vb, pb) = priced[a], priced[b]
            if pb.estimate.throughput > pa.estimate.throughput:
                (a, va, pa), (b, vb, pb) = (b, vb, pb), (a, va, pa)
            spreads = [run_spread(list(va)), run_spread(list(vb))]
            found.append(PairRow(
                cell, a, b, (pa.estimate.throughput, pb.estimate.throughput),
                order_probability([rate_draws(pa), rate_draws(pb)]),
                (statistics.median(va), statistics.median(vb)), (len(va), len(vb)),
                math.hypot(*spreads) if None not in spreads else None))
    return found


def agreement(rows: Sequence[PairRow]) -> str:
    """'k of m pairs whose measured difference exceeds the between-run spread ranked as
    measured', and how many could not be judged."""
    if not rows:
        return "rankings: no cell holds two strategies measured and predicted"
    judged = [row for row in rows if row.resolved]
    within = sum(row.resolved is False for row in rows)
    unknown = sum(row.resolved is None for row in rows)
    agree = sum(row.agrees for row in judged)
    unjudged = [row for row in rows if not row.resolved]
    return (f"rankings: {agree} of {len(judged)} pairs whose measured difference exceeds the "
            f"between-run spread ordered as measured; {within} within the spread, {unknown} "
            "with one run a side (spread unknown): not judged"
            + (f" ({sum(row.agrees for row in unjudged)} of them in the measured order)"
               if unjudged else ""))


PAIR_HEADER = ("cell", "predicted faster", "than", "predicted x", "probability",
               "measured x", "runs", "between-run spread", "judged", "agrees")


def pair_cells(rows: Sequence[PairRow]) -> list[list[str]]:
    """The cells of the ranking table, one row per pair."""
    return [[row.cell, row.first, row.second,
             f"{row.predicted[0] / row.predicted[1]:.3f}" if row.predicted[1] else "-",
             f"{row.probability:.0%}" if row.probability is not None else "-",
             f"{row.difference + 1:.3f}", f"{row.runs[0]}+{row.runs[1]}",
             f"{row.spread:.1%}" if row.spread is not None else "-",
             {True: "yes", False: "within spread", None: "one run"}[row.resolved],
             ("yes" if row.agrees else "no") if row.resolved
             else f"({'yes' if row.agrees else 'no'})"] for row in rows]

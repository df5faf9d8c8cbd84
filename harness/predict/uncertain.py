"""The uncertainty of a prediction's inputs and its propagation to a 90% interval: Monte Carlo
with a fixed seed (docs/guide/prediction.md#intervals).

An input's uncertainty is one Uncertain, with its source: a measured spread, log-normal (the
input times exp(σ·z), z standard normal: the calibration's between-run spread, a fitted link
parameter's standard error, an estimated step-time spread's), or a stated range (the input
times a factor drawn uniformly in log space between the bounds: the rectangular distribution
the GUM gives a range about which nothing more is known, JCGM 100:2008 §4.3.7). Each input
draws DRAWS values from its own stream, seeded by SEED and the input's name: the same input
draws the same numbers in every strategy, node count and row, so two strategies are compared
on the same inputs (common random numbers) and a prediction's interval is reproducible byte
for byte. The model is priced at every draw; the interval is the draws' 5th and 95th
percentiles. Pure arithmetic on numbers: harness/predict/interval.py applies the draws to a
prediction's context.
"""
from __future__ import annotations

import math
import statistics
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

LEVEL = 0.90  # the interval's coverage probability
DRAWS = 400  # Monte Carlo draws: the 5th percentile of 400 draws moves ~0.5% between seeds
SEED = 56  # fixed: the same inputs give the same interval


@dataclass(frozen=True)
class Uncertain:
    """One input's uncertainty: the input it moves (`target`: "compute", "cv",
    "overhead:STRATEGY", "link:NAME:alpha" or "link:NAME:beta"), how, and its source.

    sigma: a log-normal factor exp(sigma·z) (with `additive`, sigma seconds added, z·sigma:
    a difference of two measured steps); low and high: a stated range of factors, drawn
    uniformly in log space; partner and rho: the input whose z this one shares with
    correlation rho (a fit's α and β)."""

    name: str
    target: str
    sigma: float = 0.0
    low: float = 1.0
    high: float = 1.0
    additive: bool = False
    partner: str = ""
    rho: float = 0.0
    source: str = ""

    @property
    def ranged(self) -> bool:
        return self.low != self.high

    def describe(self) -> str:
        """One line: the input, its spread and where it comes from."""
        if self.ranged:
            spread = f"x{self.low:.4g} to x{self.high:.4g} (stated range)"
        elif self.additive:
            spread = f"+-{self.sigma * 1e3:.3g} ms (1 sd)"
        else:
            spread = f"+-{self.sigma:.2%} (1 sd, log)"
        return f"{self.name}: {spread}" + (f"; {self.source}" if self.source else "")


def _stream(name: str, kind: int) -> np.random.Generator:
    return np.random.default_rng([SEED, zlib.crc32(name.encode()), kind])


def factor_draws(inputs: Sequence[Uncertain], draws: int = DRAWS) -> list[dict[str, float]]:
    """For each draw, every target's factor (or, for an additive input, seconds added); the
    inputs on one target multiply (add). No draws without an uncertain input."""
    if not inputs:
        return []
    normal = {u.name: _stream(u.name, 0).standard_normal(draws) for u in inputs}
    columns: dict[str, np.ndarray] = {}
    for u in inputs:
        if u.ranged:
            column = u.low * (u.high / u.low) ** _stream(u.name, 1).random(draws)
        else:
            z = normal[u.name]
            if u.partner in normal:
                z = u.rho * normal[u.partner] + math.sqrt(max(0.0, 1 - u.rho**2)) * z
            column = u.sigma * z if u.additive else np.exp(u.sigma * z)
        if u.target in columns:
            columns[u.target] = columns[u.target] + column if u.additive \
                else columns[u.target] * column
        else:
            columns[u.target] = column
    return [{target: float(values[i]) for target, values in columns.items()}
            for i in range(draws)]


def bounds(values: Iterable[float], level: float = LEVEL) -> tuple[float, float]:
    """The central `level` interval of the draws: their (1 - level)/2 and (1 + level)/2
    quantiles (numpy's linear interpolation)."""
    found = np.asarray(list(values), dtype=float)
    found = found[np.isfinite(found)]
    if found.size == 0:
        return math.nan, math.nan
    tail = (1 - level) / 2
    return float(np.quantile(found, tail)), float(np.quantile(found, 1 - tail))


def half_width(interval: tuple[float, float], value: float) -> float:
    """Half the interval's width over the value it surrounds (a fraction)."""
    return (interval[1] - interval[0]) / 2 / abs(value) if value else math.inf


def interval_text(interval: tuple[float, float] | None, value: float | None,
                  scale: float = 1e3) -> str:
    """'201.6-214.0 (+-3.1%)': the interval (times `scale`: ms for seconds) and its
    half-width; "-" without one."""
    if interval is None or value is None:
        return "-"
    return (f"{interval[0] * scale:.4g}-{interval[1] * scale:.4g} "
            f"(+-{half_width(interval, value):.1%})")


def inside(interval: tuple[float, float] | None, measured: float | None) -> bool | None:
    """Whether the measured figure fell inside the interval (None where either is missing)."""
    if interval is None or measured is None or not all(map(math.isfinite, interval)):
        return None
    return interval[0] <= measured <= interval[1]


@dataclass(frozen=True)
class Coverage:
    """How many rows' intervals held their measured figure, and how wide they were."""

    covered: int
    rows: int
    median_half_width: float

    @property
    def share(self) -> float:
        return self.covered / self.rows if self.rows else math.nan

    def line(self, goal: str = "goal: >= 90% covered, median half-width <= 10%") -> str:
        if not self.rows:
            return "coverage: no row has an interval and a measured figure"
        return (f"coverage of the {LEVEL:.0%} intervals: {self.covered} of {self.rows} rows "
                f"({self.share:.0%}), median half-width {self.median_half_width:.1%} ({goal})")


def coverage(rows: Iterable[tuple[tuple[float, float] | None, float, float | None]]
             ) -> Coverage:
    """Over (interval, predicted, measured) rows: those inside their interval, and the
    median half-width relative to the prediction; rows without an interval or a measured
    figure do not count."""
    counted = [(interval, predicted, measured) for interval, predicted, measured in rows
               if inside(interval, measured) is not None and predicted]
    covered = sum(bool(inside(interval, measured)) for interval, _, measured in counted)
    widths = [half_width(interval, predicted) for interval, predicted, _ in counted
              if interval is not None]
    return Coverage(covered, len(counted), statistics.median(widths) if widths else math.nan)


def log_sd(values: Sequence[float]) -> float | None:
    """The sample standard deviation of the values' logarithms (None from fewer than two)."""
    positive = [math.log(v) for v in values if v > 0]
    return statistics.stdev(positive) if len(positive) >= 2 else None


def pooled_log_sd(groups: Iterable[Sequence[float]]) -> tuple[float, int, int] | None:
    """(pooled sd of the logs, groups, values) over groups of two or more values: the square
    root of Σ(n_i - 1)·s_i² / Σ(n_i - 1), each group around its own mean."""
    weight, total, groups_used, values = 0, 0.0, 0, 0
    for group in groups:
        sd = log_sd(group)
        if sd is None:
            continue
        weight += len(group) - 1
        total += (len(group) - 1) * sd**2
        groups_used += 1
        values += len(group)
    return (math.sqrt(total / weight), groups_used, values) if weight else None

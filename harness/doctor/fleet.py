"""Many nodes' doctor records side by side: each node's figures against the fleet median, and
the nodes that stand out named, by a robust rule (median and median absolute deviation), so
that one bad node among many cannot move the yardstick it is measured by.

A node is named for a figure when it is worse than the median (lower where higher is better)
by more than MAD_LIMIT robust standard deviations (1.4826 x MAD, the normal's scale) and by
more than MIN_SHARE of the median: the second bound keeps nodes of a very even fleet, whose
MAD is tiny, from being named for noise. Figures held by fewer than MIN_NODES nodes are shown,
never judged.
"""
from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from harness.spec.kinds import DOCTOR, record_kind

MAD_SCALE = 1.4826
MAD_LIMIT = 3.5  # the modified z-score of Iglewicz and Hoaglin (1993)
MIN_SHARE = 0.10
MIN_NODES = 3


@dataclass
class Figure:
    """One figure of the fleet: each node's value, the median, the robust spread, who stands
    out."""

    name: str
    unit: str
    higher_is_better: bool
    values: dict[str, float]
    median: float = 0.0
    sigma: float = 0.0
    outliers: dict[str, float] = field(default_factory=dict)  # node -> share off the median

    def judge(self) -> None:
        numbers = list(self.values.values())
        self.median = statistics.median(numbers)
        self.sigma = MAD_SCALE * statistics.median(abs(v - self.median) for v in numbers)
        if len(numbers) < MIN_NODES or self.median == 0:
            return
        for node, value in self.values.items():
            worse = self.median - value if self.higher_is_better else value - self.median
            if worse > MAD_LIMIT * self.sigma and worse > MIN_SHARE * abs(self.median):
                self.outliers[node] = (value - self.median) / abs(self.median)


def node_name(record: Mapping[str, Any]) -> str:
    """A node as the fleet table names it: its host name, else its machine id."""
    machine = record.get("machine") or {}
    return str(machine.get("hostname") or machine.get("machine_id") or record.get("run_id"))


def fleet(records: Iterable[Mapping[str, Any]]) -> tuple[list[str], list[Figure]]:
    """The nodes (each its latest doctor record) and every measured figure across them."""
    latest: dict[str, Mapping[str, Any]] = {}
    for record in records:
        if record_kind(record) is not DOCTOR or record.get("status") != "success":
            continue
        node = node_name(record)
        if node not in latest or str(record.get("created_at")) > str(latest[node].get(
                "created_at")):
            latest[node] = record
    figures: dict[str, Figure] = {}
    for node, record in sorted(latest.items()):
        for metric in record.get("metrics") or []:
            value = metric.get("value")
            if not isinstance(value, (int, float)) or isinstance(value, bool):
                continue
            figure = figures.setdefault(metric["name"], Figure(
                metric["name"], str(metric.get("unit") or ""),
                bool(metric.get("higher_is_better")), {}))
            figure.values[node] = float(value)
    for figure in figures.values():
        figure.judge()
    return sorted(latest), list(figures.values())


def outlier_lines(figures: list[Figure]) -> list[str]:
    """One line per node and figure that stands out."""
    return [f"{node}: {figure.name} {figure.values[node]:.4g} {figure.unit}, {share:+.0%} "
            f"against the fleet median {figure.median:.4g}"
            for figure in figures for node, share in sorted(figure.outliers.items())]


def fleet_rows(figures: list[Figure]) -> list[list[str]]:
    """The fleet table's rows: each figure's nodes, median, lowest and highest node, and the
    nodes that stand out."""
    rows = []
    for figure in figures:
        low = min(figure.values, key=figure.values.__getitem__)
        high = max(figure.values, key=figure.values.__getitem__)
        rows.append([figure.name.removeprefix("doctor_"), figure.unit, str(len(figure.values)),
                     f"{figure.median:.4g}", f"{figure.values[low]:.4g} ({low})",
                     f"{figure.values[high]:.4g} ({high})",
                     ", ".join(sorted(figure.outliers)) or "-"])
    return rows

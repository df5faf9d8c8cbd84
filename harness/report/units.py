"""Numbers with units chosen for reading in the report: one scale per metric for a whole
report, so that rows and tables compare (the arithmetic: harness/facts/units.py)."""
from __future__ import annotations

from collections.abc import Iterable

from harness.facts.units import Scale, choose_scale, format_number, si
from harness.report.view import MetricView, RecordView

__all__ = ["Scale", "Scales", "choose_scale", "column_scale", "format_number", "report_scales",
           "si", "with_ci"]


def column_scale(name: str, metrics: list[MetricView]) -> Scale:
    """The scale for one metric column, from the unit of its first entry."""
    if not metrics:
        return Scale("")
    unit = metrics[0].unit
    values = [v for m in metrics if m.unit == unit
              for v in (m.value, m.ci_low, m.ci_high) if v is not None]
    return choose_scale(name, unit, values)


class Scales(dict[str, Scale]):
    """One scale per metric for a whole report, so that every table shows a metric in one
    unit; a metric no record has reads as stored."""

    def __missing__(self, name: str) -> Scale:
        return Scale("")


def report_scales(views: Iterable[RecordView]) -> Scales:
    """Each metric's scale over every record given (all of a report's)."""
    having: dict[str, list[MetricView]] = {}
    for view in views:
        for name, found in view.metrics.items():
            having.setdefault(name, []).append(found)
    return Scales({name: column_scale(name, found) for name, found in having.items()})


def with_ci(metric: MetricView | None, scale: Scale, unit: str) -> str:
    """`value [ci_low, ci_high]` in the column's scale; a foreign unit is shown as stored."""
    if metric is None or metric.value is None:
        return "-"
    if metric.unit != unit:
        return f"{format_number(metric.value)} {metric.unit}".strip()
    text = scale.show(metric.value)
    if metric.ci_low is not None and metric.ci_high is not None:
        text += f" [{scale.show(metric.ci_low)}, {scale.show(metric.ci_high)}]"
    return text

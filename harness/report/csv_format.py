"""The report as CSV: one row per (record, metric, message size), numbers unscaled.

`bytes` is empty except for collectives, whose per-size busbw/algbw/time rows follow the
summary metrics; (run_id, metric, bytes) is unique. A record without metrics (failed,
skipped) still has one row, with the metric columns empty.
"""
from __future__ import annotations

import csv
import io

from harness.core.outputs import csv_text
from harness.report.view import SPEC_FIELDS, MetricView, RecordView, number

COLUMNS = ("run_id", "created_at", "machine", "commit", *SPEC_FIELDS, "status", "error",
           "metric", "unit", "bytes",
           "value", "median", "ci_low", "ci_high", "n")
_PER_SIZE_UNITS = {"busbw": "GB/s", "algbw": "GB/s", "time_s": "s"}


def _number(value: float | None) -> str:
    return "" if value is None else repr(value)


def _bytes(value: float | None) -> str:
    return "" if value is None else str(int(value)) if value.is_integer() else repr(value)


def _text(value: object) -> str:
    """Clean text that a spreadsheet shows as text, never evaluates as a formula."""
    return csv_text(value)


def _metric_cells(metric: MetricView) -> list[str]:
    size = number(metric.raw.get("bytes"))
    return [_text(metric.name), _text(metric.unit), _bytes(size), _number(metric.value),
            _number(metric.median), _number(metric.ci_low), _number(metric.ci_high),
            "" if metric.n is None else str(metric.n)]


def _rows(view: RecordView) -> list[list[str]]:
    head = [_text(view.run_id), _text(view.created_at), _text(view.machine_label),
            _text(view.code.get("commit") or "-"),
            *(_text(view.spec.get(name)) for name in SPEC_FIELDS), _text(view.status),
            _text(view.error)]
    rows = [head + _metric_cells(metric) for metric in view.metrics.values()]
    seen = {(metric.name, number(metric.raw.get("bytes"))) for metric in view.metrics.values()}
    busbw = view.metrics.get("busbw")
    for entry in busbw.per_size() if busbw else []:
        for key, unit in _PER_SIZE_UNITS.items():
            name = key.removesuffix("_s")
            if (name, entry["bytes"]) not in seen:
                rows.append(head + [name, unit, _bytes(entry["bytes"]), _number(entry[key]),
                                    "", "", "", ""])
    return rows or [head + [""] * 8]


def render(views: list[RecordView]) -> str:
    """All rows, header first, LF line ends."""
    stream = io.StringIO()
    writer = csv.writer(stream, lineterminator="\n")
    writer.writerow(COLUMNS)
    for view in views:
        writer.writerows(_rows(view))
    return stream.getvalue()

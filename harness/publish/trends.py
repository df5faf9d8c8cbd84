"""A machine's metrics over the commits of the code under test: one plot per workload and
metric, a line per experiment, the change points `dtbench history` finds marked on it.

The series and their steps are history's (harness/compare/history.py); this module only
draws them, as PNG bytes that are the same for the same records.
"""
from __future__ import annotations

import io
from dataclasses import dataclass
from typing import Any

from matplotlib import style
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from harness.compare.history import MIN_EFFECT, Series, build_series
from harness.facts.metrics import heading_of
from harness.report.document import Table
from harness.report.units import Scale, choose_scale, format_number
from harness.report.view import clean_text

# What the trends follow, in page order. Not MFU: on one machine it is throughput times a
# constant of the workload over the measured peak, the same curve again.
TREND_METRICS = ("throughput", "peak_memory", "time_to_train")


@dataclass(frozen=True)
class Trend:
    """One workload's metric over commits on one machine; png None where no series has two
    points (nothing to draw a trend through)."""

    metric: str
    heading: str
    series: list[Series]
    png: bytes | None


def _text(value: str, limit: int = 60) -> str:
    """Text matplotlib draws as given: `$` would start mathtext."""
    return clean_text(value, limit).replace("$", r"\$")


def unit_of(records: list[dict[str, Any]], metric: str) -> str:
    for record in records:
        for entry in record.get("metrics") or []:
            if isinstance(entry, dict) and entry.get("name") == metric:
                return clean_text(entry.get("unit"), 40)
    return ""


def _draw(series: list[Series], heading: str, scale: Scale) -> bytes:
    labels: dict[str, str] = {}
    for one in series:
        for point in one.points:
            labels[point.label] = min(labels.get(point.label, point.when), point.when)
    order = sorted(labels, key=lambda label: (labels[label], label))
    position = {label: i for i, label in enumerate(order)}
    # Fixed margins: a constrained layout measures every text twice, a quarter of the time
    # a trend took (publish draws a hundred of them over a fleet's store).
    width = min(4.0 + 0.35 * len(order), 13.5)
    figure = Figure(figsize=(width, 3.6), dpi=100)
    figure.subplots_adjust(left=0.8 / width, right=1 - 0.15 / width, bottom=0.3, top=0.95)
    FigureCanvasAgg(figure)
    axes = figure.subplots()
    for index, one in enumerate(series):
        colour = f"C{index % 10}"
        xs = [position[p.label] for p in one.points]
        axes.plot(xs, [p.median / scale.factor for p in one.points], marker="o",
                  color=colour, label=_text(one.experiment))
        # every run as a dot, one artist per series (one per point took seconds a figure
        # over a hundred commits)
        axes.plot([x for x, point in zip(xs, one.points, strict=True) for _ in point.values],
                  [v / scale.factor for point in one.points for v in point.values],
                  linestyle="", marker=".", color=colour, alpha=0.35)
        for step in one.steps:
            x = position[step.after] - 0.5
            axes.axvline(x, color=colour, linestyle="--", linewidth=1)
            axes.annotate(f"{(step.ratio - 1) * 100:+.0f}%", (x, 1.0),
                          xycoords=("data", "axes fraction"), fontsize="small",
                          color=colour, ha="left", va="top")
    every = max(1, len(order) // 25)
    axes.set_xticks(range(0, len(order), every), [_text(label, 14) for label in order][::every],
                    rotation=45, ha="right", fontsize="small")
    axes.set_xlabel("commit of the code under test (or day), oldest first")
    axes.set_ylabel(_text(f"{heading} ({scale.label})" if scale.label else heading))
    axes.legend(fontsize="x-small")
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=100, metadata={"Software": None})
    return buffer.getvalue()


def trends(records: list[dict[str, Any]], min_effect: float = MIN_EFFECT) -> list[Trend]:
    """The trends of one machine's records of one workload, a metric at a time, for the
    metrics some successful record holds."""
    found = []
    with style.context("default"):
        for metric in TREND_METRICS:
            heading = heading_of(metric)
            series = build_series(records, metric, min_effect)
            if not series:
                continue
            png = None
            if any(len(one.points) >= 2 for one in series):
                values = [v for one in series for p in one.points for v in p.values]
                png = _draw(series, heading, choose_scale(metric, unit_of(records, metric),
                                                          values))
            found.append(Trend(metric, heading, series, png))
    return found


def steps_table(found: list[Trend]) -> Table:
    """Every change point of the trends: where, how large, how sure."""
    rows = []
    for trend in found:
        for one in trend.series:
            for step in one.steps:
                change = (step.ratio - 1.0) * 100
                worse = (change < 0) == one.higher_is_better
                low, high = ((v - 1.0) * 100 for v in step.ci)
                rows.append([clean_text(one.experiment, 120), trend.heading,
                             clean_text(step.before, 40), clean_text(step.after, 40),
                             f"{change:+.1f}%", f"[{low:+.1f}%, {high:+.1f}%]",
                             format_number(step.p_value),
                             "regression" if worse else "improvement"])
    return Table(title="Change points", columns=["experiment", "metric", "last before",
                                                 "first after", "change", "95% CI", "p",
                                                 "verdict"],
                 rows=rows, numeric=[False] * 4 + [True, False, True, False])


def history_page(series: list[Series], heading: str, command: str, unit: str = "") -> str:
    """`dtbench history -o FILE.html`: one self-contained page, a trend plot per machine and
    workload (a line per experiment, change points dashed) and the table of steps."""
    import base64
    from html import escape

    from harness.report.html import CSP, STYLE, render_table

    def e(text: str) -> str:
        return escape(text, quote=True)

    groups: dict[tuple[str, str], list[Series]] = {}
    for one in series:
        groups.setdefault((one.machine, one.workload), []).append(one)
    lines = ["<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">',
             f'<meta http-equiv="Content-Security-Policy" content="{e(CSP)}">',
             f"<title>dtbench history: {e(heading)}</title>", f"<style>{STYLE}</style>",
             "</head>", "<body>", f"<h1>dtbench history: {e(heading)}</h1>",
             f"<p>Regenerate with: <code>{e(command)}</code></p>"]
    with style.context("default"):
        for (machine, workload), members in sorted(groups.items()):
            lines.append(f"<h2>{e(machine)}: {e(workload)}</h2>")
            if not any(len(one.points) >= 2 for one in members):
                lines.append('<p class="note">One commit only: no trend yet.</p>')
                continue
            values = [v for one in members for p in one.points for v in p.values]
            png = _draw(members, heading, choose_scale(members[0].metric, unit, values))
            lines += ["<figure>", f'<img alt="{e(heading)} of {e(workload)} on {e(machine)} '
                      'over commits" src="data:image/png;base64,'
                      f'{base64.b64encode(png).decode("ascii")}">',
                      f"<figcaption>{e(workload)} on {e(machine)}: {e(heading)} per commit "
                      "(median, dots: every run); dashed: a change point.</figcaption>",
                      "</figure>"]
    table = steps_table([Trend(series[0].metric if series else "", heading, series, None)])
    lines += [f"<h2>{e(table.title)}</h2>"]
    lines += render_table(table) if table.rows else ['<p class="note">No change point.</p>']
    return "\n".join([*lines, "</body>", "</html>"]) + "\n"

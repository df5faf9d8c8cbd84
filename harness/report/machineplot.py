"""The comparison a visitor of the published site comes for: each machine's throughput per
workload and experiment (precision first) as bars with their interval, and every machine's
ratio to the reference written over its bar. The same cells as `report --by machine`
(harness/report/machines.py): an experiment at each machine's latest version, never pooled.
"""
from __future__ import annotations

import math
import statistics

from matplotlib import style
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from harness.records.experiment import experiment_key, fields_of, text, varying
from harness.report.columns import heading
from harness.report.machines import latest_runs
from harness.report.plots import Plot, _figure, _label, _png
from harness.report.safe import drawn
from harness.report.view import RecordView, clean_text, group


def _interval(views: list[RecordView]) -> tuple[float, float, float]:
    """Median throughput, and its interval: one run's 95% CI of the median, or the range of
    several runs' values."""
    values = sorted(view.value("throughput") or 0.0 for view in views)
    middle = float(statistics.median(values))
    if len(views) == 1:
        found = views[0].metrics["throughput"]
        return (middle, found.ci_low if found.ci_low is not None else middle,
                found.ci_high if found.ci_high is not None else middle)
    return middle, values[0], values[-1]


def _group_labels(experiments: dict[str, list[RecordView]]) -> dict[str, str]:
    """Each experiment of one workload by what tells it from the others: its precision, then
    a line per other field that differs."""
    specs = {key: views[0].spec for key, views in experiments.items()}
    differ = [name for name in varying(list(specs.values())) if name != "precision"]
    labels = {}
    for key, spec in specs.items():
        fields = fields_of(spec)
        lines = [_label(text("precision", spec.get("precision")), 24)]
        lines += [_label(f"{heading(name)} {text(name, fields.get(name))}", 24)
                  for name in differ]
        labels[key] = "\n".join(lines)
    return labels


def _legend_columns(machines: list[str], figure: Figure) -> int:
    """As many legend columns as the figure's width holds (a column is as wide as its widest
    entry: a patch and about 0.075 in a character in the small font)."""
    widest = 0.6 + 0.075 * max(len(_label(m, 50)) for m in machines)
    return max(1, min(len(machines), 4, int((figure.get_figwidth() - 0.3) // widest)))


def machines_chart(views: list[RecordView], reference: str, title: str = "Throughput by machine"
                   ) -> Plot:
    """Bars of every machine's throughput per workload and experiment, the reference's
    ratio over each other bar; a note instead where no record has a throughput, or where the
    records' figures cannot be drawn."""
    return drawn(_chart, views, Plot, reference, title, title=title)


def _chart(views: list[RecordView], reference: str, title: str) -> Plot:
    having = [view for view in latest_runs(views) if view.value("throughput") is not None]
    if not having:
        return Plot(title, "", "No successful training record has a throughput: no chart.")
    machines = [reference, *sorted({v.machine_label for v in having} - {reference})]
    colours = {machine: f"C{i % 10}" for i, machine in enumerate(machines)}
    panels = {}
    for workload, members in group(having, "workload").items():
        experiments: dict[str, list[RecordView]] = {}
        for view in members:
            experiments.setdefault(experiment_key(view.as_record()), []).append(view)
        panels[workload] = experiments
    columns = 1 if len(panels) == 1 else 2
    rows = math.ceil(len(panels) / columns)
    widest = max(len(experiments) for experiments in panels.values())
    with style.context("default"):
        figure = _figure(columns * max(5.0, (0.45 + 0.22 * len(machines)) * widest + 1.5),
                         4.2 * rows + 0.6)
        axes_all = figure.subplots(rows, columns, squeeze=False).flatten()
        for axes, (workload, experiments) in zip(axes_all, panels.items(), strict=False):
            labels = _group_labels(experiments)
            keys = sorted(experiments, key=lambda key: labels[key])
            width = 0.8 / len(machines)
            for g, key in enumerate(keys):
                by_machine: dict[str, list[RecordView]] = {}
                for view in experiments[key]:
                    by_machine.setdefault(view.machine_label, []).append(view)
                base = _interval(by_machine[reference])[0] if reference in by_machine else None
                for m, machine in enumerate(machines):
                    if machine not in by_machine:
                        continue
                    middle, low, high = _interval(by_machine[machine])
                    x = g - 0.4 + width * (m + 0.5)
                    axes.bar(x, middle, width, color=colours[machine],
                             yerr=[[max(0.0, middle - low)], [max(0.0, high - middle)]],
                             capsize=2)
                    if base and machine != reference:
                        axes.annotate(f"{middle / base:.2f}×", (x, high), ha="center",
                                      va="bottom", fontsize="x-small", rotation=90,
                                      xytext=(0, 2), textcoords="offset points")
            axes.set_xticks(range(len(keys)), [labels[key] for key in keys],
                            fontsize="x-small")
            axes.set_title(_label(workload))
            axes.set_ylabel("samples/s")
            axes.margins(y=0.2)
        for axes in axes_all[len(panels):]:
            axes.set_axis_off()
        figure.legend(handles=[Patch(color=colours[m], label=_label(m, 50)) for m in machines],
                      title="machine (reference first)", fontsize="small",
                      loc="outside upper center", ncols=_legend_columns(machines, figure))
        png = _png(figure)
    names = ", ".join(clean_text(name, 40) for name in panels)
    return Plot(title, f"Bar chart of training throughput in samples per second of each "
                f"machine for each experiment of {names}, with 95% interval error bars and "
                f"each machine's ratio to {clean_text(reference, 80)} written over its bar.",
                f"Throughput per workload and experiment on each machine, at its latest "
                f"version of the code (median; error bars: one run's 95% CI of the median, or "
                f"the range of several runs); over each bar its ratio to the reference, "
                f"{clean_text(reference, 80)}.", png)

"""Plots of the HTML report as PNG bytes, byte-identical for the same records.

Uses matplotlib's object API with the Agg canvas (no pyplot, no global figure state), under
matplotlib's default style whatever the user's matplotlibrc says, and without the
`Software` PNG chunk.
"""
from __future__ import annotations

import io
import math
from collections.abc import Callable
from dataclasses import dataclass
from itertools import accumulate

from matplotlib import style
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from harness.core.text import size_label
from harness.report.safe import drawn, mean
from harness.report.view import (
    RecordView,
    by_experiment,
    clean_text,
    group,
    number,
    several_machines,
)

# The longest machine name a legend shows whole.
LEGEND_LABEL = 50
# How lines of one machine's colour are told apart.
LINE_STYLES = ("-", "--", ":", "-.")


@dataclass(frozen=True)
class Plot:
    """A rendered figure, or (png None) the note saying why it was left out."""

    title: str
    alt: str
    caption: str
    png: bytes | None = None


def _label(text: str, limit: int = 40) -> str:
    """Text matplotlib draws as given: `$` would start mathtext and could raise."""
    return clean_text(text, limit).replace("$", r"\$")


def _figure(width: float, height: float) -> Figure:
    figure = Figure(figsize=(min(width, 13.5), min(height, 40.0)), dpi=100,
                    layout="constrained")
    FigureCanvasAgg(figure)
    return figure


def _png(figure: Figure) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=100, metadata={"Software": None})
    return buffer.getvalue()


def _colours(views: list[RecordView]) -> dict[str, str]:
    """One colour per machine, in name order, so that a machine keeps its colour in a plot
    and the same records give the same colours."""
    return {machine: f"C{i % 10}" for i, machine in enumerate(sorted(
        {view.machine_label for view in views}))}


def legend_width(colours: dict[str, str]) -> float:
    """Inches a figure widens by for a legend of these machines beside its panels."""
    return 0.9 + 0.075 * max((len(_label(m, LEGEND_LABEL)) for m in colours), default=0)


def _legend(figure: Figure, colours: dict[str, str], emulated: bool = False) -> None:
    """One legend of the machine colours beside the panels, never over a bar; a hatched
    entry where a bar's precision is one its machine's CPU only emulates."""
    handles = [Patch(color=colour, label=_label(m, LEGEND_LABEL)) for m, colour in
               colours.items()]
    if emulated:
        handles.append(Patch(facecolor="white", edgecolor="black", hatch="//",
                             label="precision emulated"))
    figure.legend(handles=handles, title="machine", fontsize="small",
                  loc="outside right upper")


def _success(views: list[RecordView], metric: str, positive: bool = False
             ) -> list[RecordView]:
    """Successful training records that have `metric` (above zero, for log axes)."""
    return [v for v in views if not v.is_comm and not v.is_prediction and v.status == "success"
            and (value := v.value(metric)) is not None and (value > 0 or not positive)]


def throughput_plot(views: list[RecordView]) -> Plot:
    """Bars of throughput per experiment, one panel per workload, a bar per machine in its
    colour with CI error bars; hatched where the machine's CPU only emulates the precision."""
    title = "Throughput"
    having = _success(views, "throughput")
    if not having:
        return Plot(title, "", "No record has a throughput: the throughput plot is omitted.")
    groups = {name: by_experiment(members, "throughput")
              for name, members in group(having, "workload").items()}
    colours = _colours(having)
    machines = list(colours)
    columns = min(len(groups), 3)
    rows = math.ceil(len(groups) / columns)
    widest, right = max(len(bars) for bars in groups.values()), ""
    width = 0.8 / len(machines)
    figure = _figure(columns * max(4.2, (0.35 + 0.25 * len(machines)) * widest + 1.5)
                     + legend_width(colours), 3.8 * rows)
    panels = figure.subplots(rows, columns, squeeze=False).flatten()
    for axes, (workload, bars) in zip(panels, groups.items(), strict=False):
        for g, (_, cells) in enumerate(bars):
            for m, machine in enumerate(machines):
                if machine not in cells:
                    continue
                view, middle, low, high = cells[machine]
                axes.bar(g - 0.4 + width * (m + 0.5), middle, width, capsize=2,
                         yerr=[[max(0.0, middle - low)], [max(0.0, high - middle)]],
                         color=colours[machine], edgecolor="black" if view.emulated else None,
                         hatch="//" if view.emulated else None)
        axes.set_xticks(range(len(bars)), [_label(label, 40) for label, _ in bars],
                        rotation=30, ha="right", fontsize="small")
        axes.set_title(_label(workload))
        axes.set_ylabel("samples/s")
        tokens = {round((v.value("tokens_per_s") or 0) / (v.value("throughput") or 1))
                  for _, cells in bars for v, *_ in cells.values()}
        if len(tokens) == 1 and (k := tokens.pop()) > 0:  # a language model: tokens/s too
            axes.secondary_yaxis("right", functions=(lambda x, k=k: x * k, lambda x, k=k: x / k)
                                 ).set_ylabel("tokens/s")
            right = "; a language model's also in tokens/s, right axis"
    for axes in panels[len(groups):]:
        axes.set_axis_off()
    emulated = any(view.emulated for view in having)
    _legend(figure, colours, emulated)
    names = ", ".join(clean_text(name, 40) for name in groups)
    return Plot(title, f"Bar chart of training throughput in samples per second for each "
                f"experiment of {names}, a bar per machine, with 95% confidence interval error "
                "bars.",
                "Throughput by experiment, per workload, a colour per machine (median, error "
                "bars: 95% CI of the median; where several runs share an experiment, their "
                f"median and range{right})" + ("; hatched: a precision the machine's CPU only "
                                               "emulates" if emulated else "") + ".",
                _png(figure))


def scaling_plot(views: list[RecordView]) -> Plot:
    """Scaling efficiency against the number of ranks, one line per experiment."""
    title = "Scaling efficiency"
    having = _success(views, "scaling_efficiency")
    several = several_machines(having)
    if not having:
        return Plot(title, "", "No record has a scaling efficiency: the scaling plot is "
                    "omitted.")
    series: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for view in having:
        ranks = view.spec.get("world_size")
        if not isinstance(ranks, int) or isinstance(ranks, bool) or ranks < 1:
            continue
        kind = clean_text(view.metrics["scaling_efficiency"].raw.get("kind"), 20) or "?"
        key = f"{view.workload} {view.label().rsplit(' ', 1)[0]} ({kind})"
        series.setdefault((view.machine_label, key), [(1.0, 1.0)]).append(
            (float(ranks), view.value("scaling_efficiency") or 0.0))
    colours = _colours(having)
    figure = _figure(7.5 + legend_width(colours) * several, 4.2)
    axes = figure.subplots()
    for index, ((machine, key), points) in enumerate(series.items()):
        points.sort()
        axes.plot([p[0] for p in points], [p[1] for p in points], marker="o",
                  color=colours[machine] if several else f"C{index % 10}",
                  linestyle=LINE_STYLES[index % len(LINE_STYLES)] if several else "-",
                  label=_label(key, 60))
    axes.axhline(1.0, color="grey", linestyle="--", linewidth=1, label="ideal")
    axes.set_xscale("log", base=2)
    ranks = sorted({x for points in series.values() for x, _ in points})
    axes.set_xticks(ranks, [f"{x:.0f}" for x in ranks])
    axes.minorticks_off()
    axes.set_xlabel("ranks (world size)")
    axes.set_ylabel("scaling efficiency")
    axes.set_ylim(bottom=0)
    axes.legend(fontsize="small")
    if several:
        _legend(figure, colours)
    return Plot(title, "Line chart of scaling efficiency against the number of ranks, one "
                "line per workload and configuration (a colour per machine where several), "
                "with the ideal efficiency of 1 dashed.",
                "Scaling efficiency against ranks (weak: throughput_N / (N × throughput_1); "
                "strong: t_1 / (N × t_N)); each line starts at its one-rank baseline.",
                _png(figure))


def roofline_plot(views: list[RecordView]) -> Plot:
    """Achieved FLOP/s of each experiment on each machine (its colour) under the measured
    peaks of that machine's precisions (its colour, dashed)."""
    title = "Achieved against peak FLOP/s"
    having = _success(views, "achieved_flops", positive=True)
    if not having:
        return Plot(title, "", "No record has achieved FLOP/s: the roofline plot is omitted.")
    colours = _colours(having)
    points = {name: by_experiment(members, "achieved_flops")
              for name, members in group(having, "workload").items()}
    figure = _figure(max(7.0, 0.45 * sum(map(len, points.values())) + 3)
                     + legend_width(colours), 4.8)
    axes = figure.subplots()
    positions, labels, peaks = [], [], {}
    for x, (workload, found) in enumerate(points.items()):
        for label, cells in found:
            positions.append(len(positions) + x)
            labels.append(_label(f"{workload} {label}", 40))
            for m, (machine, (view, middle, _, _)) in enumerate(sorted(cells.items())):
                axes.plot(positions[-1] + 0.12 * (m - (len(cells) - 1) / 2), middle,
                          marker="o", linestyle="", color=colours[machine])
                peak = view.value("peak_flops")
                if peak is not None and peak > 0:
                    peaks.setdefault((machine, view.text("precision"), float(f"{peak:.4g}")),
                                     colours[machine])
    for (_, _, peak), colour in peaks.items():
        axes.axhline(peak, color=colour, linestyle="--", linewidth=1)
    axes.set_yscale("log")
    axes.set_xticks(positions, labels, rotation=45, ha="right", fontsize="small")
    axes.set_ylabel("FLOP/s")
    _legend(figure, colours)
    return Plot(title, "Scatter plot of achieved FLOP per second of each experiment on a "
                "logarithmic axis, a colour per machine, with dashed horizontal lines at the "
                "measured GEMM peak of each machine and precision.",
                "Roofline-style view: achieved FLOP/s per experiment (points, a colour per "
                "machine) under the measured peak FLOP/s of that machine in each precision "
                "(dashed, in its colour); the gap is 1 − MFU.", _png(figure))


def time_to_train_plot(views: list[RecordView]) -> Plot:
    """Horizontal bars of time to train, a colour per machine; hatched where the quality
    target was not reached."""
    title = "Time to train"
    having = _success(views, "time_to_train")
    if not having:
        return Plot(title, "", "No record has a time to train: the time-to-train plot is "
                    "omitted.")
    colours = _colours(having)
    figure = _figure(7.5 + legend_width(colours), 1.2 + 0.4 * len(having))
    axes = figure.subplots()
    for y, view in enumerate(having):
        reached = (view.metrics.get("quality") or view.metrics["time_to_train"]).raw.get(
            "reached")
        axes.barh(y, view.value("time_to_train"), color=colours[view.machine_label],
                  hatch="//" if reached is False else None)
    axes.set_yticks(range(len(having)), [_label(f"{v.workload} {v.label()}", 48)
                                         for v in having], fontsize="small")
    axes.invert_yaxis()
    axes.set_xlabel("seconds (run_start → run_stop)")
    _legend(figure, colours)
    return Plot(title, "Horizontal bar chart of the time to train to the quality target, in "
                "seconds, one bar per record, a colour per machine; hatched bars did not "
                "reach the target.",
                "Time to train (MLPerf rules: evaluation included); hatched: target not "
                "reached.", _png(figure))


def convergence_plot(views: list[RecordView]) -> Plot:
    """Quality against wall-clock time from the evaluations of time-to-train records, one
    line per strategy, one panel per workload (speed and convergence on one axis)."""
    title = "Convergence by strategy"
    curves: dict[str, list[RecordView]] = {}
    for view in views:
        quality = view.metrics.get("quality")
        if view.status == "success" and quality is not None and quality.raw.get("history"):
            curves.setdefault(view.workload, []).append(view)
    if not curves:
        return Plot(title, "", "No time-to-train record has evaluations: the convergence "
                    "plot is omitted.")
    figure = _figure(7.5, 3.2 * len(curves))
    several = several_machines([v for members in curves.values() for v in members])
    for axes, (workload, having) in zip(figure.subplots(len(curves), 1, squeeze=False)[:, 0],
                                        sorted(curves.items()), strict=True):
        for view in sorted(having, key=lambda v: (v.strategy, v.run_id)):
            quality = view.metrics["quality"].raw
            metric = quality.get("metric", "accuracy")
            points = [(x, y) for h in quality["history"] if (x := number(h.get("seconds")))
                      is not None and (y := number(h.get(metric))) is not None]
            axes.plot([p[0] for p in points], [p[1] for p in points], marker="o",
                      label=_label(f"{view.strategy} ×{view.text('world_size')}", 24)
                      if not several else _label(f"{view.machine_label}: {view.strategy} "
                                                 f"×{view.text('world_size')}", 48))
            axes.set_ylabel(_label(metric))
        target = number(having[0].metrics["quality"].raw.get("target"))
        if target is not None:
            axes.axhline(target, color="grey", linestyle=":", linewidth=1)
        axes.set_title(_label(workload), fontsize="small")
        axes.set_xlabel("seconds since run_start")
        axes.legend(fontsize="x-small")
    return Plot(title, "Line chart of evaluation quality against seconds since the start of "
                "training, one line per strategy and one panel per workload; the dotted line "
                "is the target.", "Convergence against wall-clock time (time-to-train "
                "records; dotted: the target).", _png(figure))


def _loss_curve(view: RecordView) -> tuple[list[float], list[float], list[float] | None]:
    """Samples seen, the workers' mean loss and seconds since the first recorded step."""
    found = view.trajectory
    losses = [row for row in found["losses"] if row]
    steps = min((len(row) for row in losses), default=0)
    means = [mean(row[k] for row in losses) for k in range(steps)]  # a null loss: left out
    per_step = int(found["samples_per_step"])
    samples = [(int(found["first_step"]) + k + 1) * per_step for k in range(steps)]
    seconds = found.get("step_seconds")
    elapsed = list(accumulate(seconds[:steps])) if seconds and len(seconds) >= steps else None
    return samples, means, elapsed


def loss_plot(views: list[RecordView]) -> Plot:
    """Training loss against samples seen and against time, one line per strategy and ranks,
    one row of panels per workload: whether strategies train the same model, and how fast."""
    title = "Loss by strategy"
    having: dict[str, list[RecordView]] = {}
    for view in views:
        if view.status == "success" and view.trajectory.get("losses"):
            having.setdefault(view.workload, []).append(view)
    if not having:
        return Plot(title, "", "No record holds per-step losses: the loss plot is omitted.")
    figure = _figure(11.0, 3.2 * len(having))
    panels = figure.subplots(len(having), 2, squeeze=False)
    for (by_samples, by_time), (workload, found) in zip(panels, sorted(having.items()),
                                                        strict=True):
        for view in sorted(found, key=lambda v: (v.strategy, v.text("world_size"), v.run_id)):
            samples, mean, elapsed = _loss_curve(view)
            label = _label(f"{view.strategy} ×{view.text('world_size')}", 24)
            by_samples.plot(samples, mean, linewidth=1, label=label)
            if elapsed is not None:
                by_time.plot(elapsed, mean, linewidth=1, label=label)
        by_samples.set_title(f"{_label(workload)}: loss against samples", fontsize="small")
        by_samples.set_xlabel("samples seen")
        by_time.set_title(f"{_label(workload)}: loss against time", fontsize="small")
        by_time.set_xlabel("seconds of measured steps")
        for axes in (by_samples, by_time):
            axes.set_ylabel("training loss (mean over workers)")
            axes.legend(fontsize="x-small")
    return Plot(title, "Line charts of the training loss, averaged over the worker ranks, "
                "against samples seen (left) and against seconds of measured steps (right), "
                "one line per strategy and rank count, one row per workload.",
                "Training loss against samples and against time, per strategy.",
                _png(figure))


def busbw_plot(views: list[RecordView]) -> Plot:
    """busbw against message size on a log2 axis, one panel per collective, a line per run."""
    title = "Bus bandwidth"
    having = [v for v in views if v.is_comm and "busbw" in v.metrics
              and v.metrics["busbw"].per_size()]
    several = several_machines(having)
    if not having:
        return Plot(title, "", "No collective record has busbw by message size: the busbw "
                    "plot is omitted.")
    groups = group(having, "op")
    columns = min(len(groups), 2)
    rows = math.ceil(len(groups) / columns)
    colours = _colours(having)
    figure = _figure(6.2 * columns + legend_width(colours) * several, 3.8 * rows)
    panels = figure.subplots(rows, columns, squeeze=False).flatten()
    for axes, (op, members) in zip(panels, groups.items(), strict=False):
        sizes: set[float] = set()
        positive = True
        for index, view in enumerate(members):
            rows_ = [r for r in view.metrics["busbw"].per_size() if r["busbw"] is not None]
            sizes.update(r["bytes"] for r in rows_)
            positive = positive and all(r["busbw"] > 0 for r in rows_)
            axes.plot([r["bytes"] for r in rows_], [r["busbw"] for r in rows_], marker=".",
                      color=colours[view.machine_label] if several else f"C{index % 10}",
                      linestyle=LINE_STYLES[index % len(LINE_STYLES)] if several else "-",
                      label=_label(view.label()))
        axes.set_xscale("log", base=2)
        if positive:
            axes.set_yscale("log")
        ticks = sorted(sizes)[:: max(1, math.ceil(len(sizes) / 8))]
        axes.set_xticks(ticks, [size_label(t) for t in ticks], rotation=30, fontsize="small")
        axes.set_title(_label(op))
        axes.set_xlabel("message size")
        axes.set_ylabel("busbw (GB/s)")
        axes.legend(fontsize="small")
    for axes in panels[len(groups):]:
        axes.set_axis_off()
    if several:
        _legend(figure, colours)
    return Plot(title, "Line chart of bus bandwidth in GB per second against message size on "
                "a base-2 logarithmic axis, one panel per collective and one line per run.",
                "busbw against message size per collective and communication backend "
                "(nccl-tests definitions).", _png(figure))


PLOTS: tuple[Callable[[list[RecordView]], Plot], ...] = (
    throughput_plot, scaling_plot, roofline_plot, time_to_train_plot, convergence_plot,
    loss_plot, busbw_plot)


def render_plots(views: list[RecordView]) -> list[Plot]:
    """Every plot of the report, in order, drawn under matplotlib's default style (the
    kernels' roofline: harness/report/kernelplots.py)."""
    with style.context("default"):
        return [drawn(plot, views, Plot) for plot in PLOTS]

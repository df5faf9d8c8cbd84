"""Prediction records (task "prediction", `dtbench predict`) in the report: their own table per
workload and a plot of efficiency against nodes, never mixed with measured runs."""
from __future__ import annotations

from matplotlib import style

from harness.report.plots import Plot, _figure, _label, _png
from harness.report.tables import Table, _failures
from harness.report.units import format_number
from harness.report.view import RecordView, clean_text, group, number

COLUMNS = ("strategy", "options", "network", "scaling", "nodes", "status", "step time (ms)",
           "90% interval (ms)", "samples/s", "efficiency", "comm share", "dominant collective")


def _options(view: RecordView) -> str:
    options = view.spec.get("strategy_options")
    if not isinstance(options, dict):
        return "-"
    return clean_text(", ".join(f"{k}={v}" for k, v in sorted(options.items())), 120) or "-"


def _order(view: RecordView) -> tuple[str, str, float]:
    return (view.text("strategy"), view.text("network"), number(view.spec.get("world_size"))
            or 0.0)


def _dominant(view: RecordView) -> str:
    found = view.metrics.get("comm_time")
    by_collective = found.raw.get("by_collective") if found else None
    if not isinstance(by_collective, dict):
        return "-"
    busy = {clean_text(k, 60): number(v) for k, v in by_collective.items()}
    busy = {k: v for k, v in busy.items() if v}
    return max(busy, key=lambda k: (busy[k], k)) if busy else "-"


def _interval(view: RecordView) -> str:
    """The step time's 90% interval in ms ("-" where the record has none)."""
    found = view.metrics.get("step_time")
    interval = found.raw.get("interval") if found else None
    low, high = (number(interval.get(k)) for k in ("low", "high")) \
        if isinstance(interval, dict) else (None, None)
    if low is None or high is None:
        return "-"
    return f"{format_number(low * 1e3)}–{format_number(high * 1e3)}"


def overtakes(view: RecordView) -> bool:
    """Communication takes longer than compute in this predicted step."""
    comm, compute = view.value("comm_time"), view.value("compute_time")
    return comm is not None and compute is not None and comm > compute


def prediction_table(workload: str, views: list[RecordView]) -> Table:
    """One row per predicted node count, grouped by strategy and network."""
    rows = []
    for view in sorted(views, key=_order):
        step, share = view.value("step_time"), view.value("comm_share")
        rows.append([view.text("strategy"), _options(view), view.text("network"),
                     view.text("scaling"), view.text("world_size"), view.status,
                     format_number(step * 1e3) if step is not None else "-", _interval(view),
                     format_number(view.value("throughput")),
                     format_number(view.value("scaling_efficiency")),
                     (f"{share:.1%}" + ("*" if overtakes(view) else ""))
                     if share is not None else "-", _dominant(view)])
    return Table(title=f"{workload} (predicted)", columns=list(COLUMNS), rows=rows,
                 numeric=[False] * 4 + [True, False, True, False] + [True] * 3 + [False],
                 intro="Predicted by the calibrated model of dtbench predict, not measured; "
                       "the interval is the 90% one its inputs' uncertainty gives (- where none "
                       "is known). * communication takes longer than compute.",
                 notes=_failures(views),
                 row_runs=[view.run_id for view in sorted(views, key=_order)])


def prediction_tables(views: list[RecordView]) -> list[Table]:
    """One table of predictions per workload."""
    return [prediction_table(name, members) for name, members in group(views, "workload").items()]


def efficiency_plot(views: list[RecordView]) -> Plot:
    """Predicted scaling efficiency against nodes (log axis), one line per strategy and
    network; a ring marks where communication overtakes compute."""
    with style.context("default"):
        return _efficiency_plot(views)


def _efficiency_plot(views: list[RecordView]) -> Plot:
    title = "Predicted scaling efficiency"
    having = [v for v in views if v.is_prediction and v.status == "success"
              and v.value("scaling_efficiency") is not None
              and (number(v.spec.get("world_size")) or 0) >= 1]
    if not having:
        return Plot(title, "", "No prediction record: the predicted-efficiency plot is omitted.")
    series: dict[str, list[RecordView]] = {}
    for view in sorted(having, key=_order):
        key = f"{view.workload} {view.text('strategy')} · {view.text('network')}"
        series.setdefault(key, []).append(view)
    figure = _figure(8.5, 4.6)
    axes = figure.subplots()
    for index, (key, members) in enumerate(series.items()):
        nodes = [number(v.spec.get("world_size")) or 1.0 for v in members]
        efficiency = [v.value("scaling_efficiency") or 0.0 for v in members]
        axes.plot(nodes, efficiency, marker="o", color=f"C{index % 10}", label=_label(key, 70))
        crossing = next((i for i, v in enumerate(members) if overtakes(v)), None)
        if crossing is not None:
            axes.plot(nodes[crossing], efficiency[crossing], marker="o", markersize=14,
                      markerfacecolor="none", color=f"C{index % 10}")
    axes.plot([], [], marker="o", markersize=12, markerfacecolor="none", linestyle="",
              color="black", label="communication overtakes compute")
    axes.axhline(1.0, color="grey", linestyle="--", linewidth=1)
    axes.set_xscale("log")
    axes.set_xlabel("nodes")
    axes.set_ylabel("scaling efficiency (predicted)")
    axes.set_ylim(bottom=0)
    axes.legend(fontsize="small")
    return Plot(title, "Line chart of predicted scaling efficiency against the number of nodes "
                "on a logarithmic axis, one line per strategy and network; open rings mark the "
                "first node count where communication takes longer than compute.",
                "Predicted scaling efficiency (throughput_N / (N × throughput_1)) against nodes; "
                "rings: communication overtakes compute.", _png(figure))

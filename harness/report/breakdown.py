"""The "Where the time goes" section: each run's time breakdown (compute, communication
overlapped and exposed, data wait, optimizer, waiting) per strategy and rank count, the skew
of compute across ranks, and the traces `--profile` kept; in HTML a stacked bar per run."""
from __future__ import annotations

import statistics

from harness.records.experiment import fields_of, text
from harness.report.columns import heading as column_heading
from harness.report.columns import identity_columns
from harness.report.document import Section, Table
from harness.report.plots import Plot, _figure, _label, _png
from harness.report.view import RecordView, group, several_machines

SHARES = ("compute", "comm_overlapped", "comm_exposed", "data_wait", "optimizer", "waiting")
HEADINGS = ("compute", "comm overlapped", "comm exposed", "data wait", "optimizer", "waiting")
# What a phase-clock row shows for the communication it cannot tell from compute.
IN_COMPUTE = "in compute"
PHASE_CLOCK = ("From the phase clock: a collective that runs, or is waited for, inside the "
               "forward and backward passes counts as compute (comm overlapped reads \"in "
               "compute\"); comm exposed is only the exchange and wait phases outside them. "
               "Only --profile separates communication inside the passes.")


def _shares(view: RecordView) -> dict[str, float] | None:
    """The mean over the run's ranks of each share (each rank's sum to 1, so theirs does)."""
    found = view.metrics.get("time_breakdown")
    per_rank = found.raw.get("per_rank") if found is not None else None
    if not isinstance(per_rank, list) or not per_rank:
        return None
    ranks = [r for r in per_rank if isinstance(r, dict)]
    try:
        return {key: statistics.fmean(float(r.get(key) or 0.0) for r in ranks)
                for key in SHARES}
    except (TypeError, ValueError):
        return None


def _having(views: list[RecordView]) -> list[RecordView]:
    return [v for v in views if v.status == "success" and _shares(v) is not None]


def _from_trace(view: RecordView) -> bool:
    sources = view.metrics["time_breakdown"].raw.get("source") or []
    return any("trace" in str(source) for source in sources)


def breakdown_section(training: list[RecordView], machines: bool | None = None
                      ) -> Section | None:
    """A table per workload of the runs that recorded a breakdown: their machine where the
    report holds several (`machines`; by default where `training` does), the identity fields
    they differ in, strategy, ranks and comm, each share, the compute spread and where the
    shares came from. A row from the phase clock says its communication inside the passes is
    compute's ("in compute"): only a --profile trace separates it."""
    tables = []
    machines = several_machines(training) if machines is None else machines
    for workload, views in group(_having(training), "workload").items():
        traced = any(view.traces for view in views)
        rows = []
        views = sorted(views, key=lambda v: (v.machine_label, v.strategy,
                                             int(v.spec.get("world_size") or 0), v.run_id))
        extra, every_row = identity_columns([view.spec for view in views],
                                            ["workload", "strategy", "world_size", "comm"])
        for view in views:
            shares = _shares(view) or {}
            spread = view.metrics["time_breakdown"].raw.get("compute_spread")
            trace = _from_trace(view)
            fields = fields_of(view.spec)
            rows.append([*([view.machine_label] * machines),
                         *(view.precision if name == "precision" else text(name, fields.get(name))
                           for name in extra), view.strategy,
                         view.text("world_size"), view.text("comm"),
                         *(f"{100 * shares[key]:.1f}%" if trace or key != "comm_overlapped"
                           else IN_COMPUTE for key in SHARES),
                         f"{100 * spread:.1f}%" if isinstance(spread, (int, float)) else "-",
                         "trace" if trace else "phase clock",
                         *([", ".join(view.traces) or "-"] * traced)])
        phases = not all(_from_trace(view) for view in views)
        tables.append(Table(
            title=workload, rows=rows, row_runs=[view.run_id for view in views],
            columns=[*(["machine"] * machines), *(column_heading(name) for name in extra),
                     "strategy", column_heading("world_size"), "comm", *HEADINGS,
                     "compute spread", "from", *(["traces"] * traced)],
            numeric=[False] * (machines + len(extra)) + [
                False, True, False, *([True] * len(SHARES)), True, False] + [False] * traced,
            footnotes=[*([every_row] if every_row else []),
                       "Shares of a step, the mean over the run's ranks (each rank's sum to "
                       "100%); compute spread: the slowest rank's compute over the fastest's."]
            + ([PHASE_CLOCK] if phases else [])))
    if not tables:
        return None
    return Section("Where the time goes", tables, intro=(
        "From the phase clock, or with --profile from each rank's trace (docs/spec/metrics.md, "
        "time_breakdown). Traces are paths under the store's root: open them in Perfetto or "
        "chrome://tracing."))


def breakdown_plot(views: list[RecordView]) -> Plot:
    """A stacked bar per run (strategy and rank count) of its time breakdown."""
    title = "Where the time goes"
    having = _having(views)
    if not having:
        return Plot(title, "", "No run recorded a time breakdown: the plot is omitted.")
    having.sort(key=lambda v: (v.workload, v.machine_label, v.strategy,
                               int(v.spec.get("world_size") or 0), v.run_id))
    machines = several_machines(having)
    labels = [_label(f"{v.machine_label + ': ' if machines else ''}{v.workload} {v.strategy} "
                     f"×{v.text('world_size')}", 80) for v in having]
    figure = _figure(7.5, 0.9 + 0.35 * len(having))
    axes = figure.subplots()
    left = [0.0] * len(having)
    for index, (key, heading) in enumerate(zip(SHARES, HEADINGS, strict=True)):
        widths = [100 * (_shares(v) or {}).get(key, 0.0) for v in having]
        axes.barh(range(len(having)), widths, left=left, color=f"C{index}", label=heading)
        left = [a + b for a, b in zip(left, widths, strict=True)]
    axes.set_yticks(range(len(having)), labels, fontsize="small")
    axes.invert_yaxis()
    axes.set_xlim(0, 100)
    axes.set_xlabel("% of a step (mean over ranks)")
    axes.legend(fontsize="small", ncols=3, loc="upper center", bbox_to_anchor=(0.5, -0.25))
    return Plot(title, "stacked bars of each run's time shares",
                "Each run's step split into compute, communication overlapped with it and "
                "exposed, data wait, optimizer and waiting (for other ranks, and anything "
                "outside a phase).", _png(figure))

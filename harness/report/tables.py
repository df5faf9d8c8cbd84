"""The report's tables of records (a workload's training runs, a collective's sizes, the
machines, their software, the records' appendix), before any format writes them.

Cells are clean display text (no control characters) but not escaped: escaping belongs to
the format that writes them.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

from harness.core.stats import repeat_spread, unstable
from harness.core.text import human_bytes, size_label
from harness.facts.metrics import column_metrics, heading_of
from harness.records.experiment import experiment_key, fields_of, label, text, version_of
from harness.report.columns import heading as column_heading
from harness.report.columns import identity_columns
from harness.report.document import Table
from harness.report.units import Scale, format_number, report_scales, with_ci
from harness.report.view import RecordView, clean_text, number, several_machines

# The identity fields of a collective's table, in the order of its columns.
COMM_FIELDS = ("backend", "comm", "launcher", "world_size", "nnodes", "precision")


def _quality(view: RecordView) -> str:
    found = view.metrics.get("quality")
    if found is None or found.value is None:
        return "-"
    raw = found.raw
    text = f"{clean_text(raw.get('metric'), 40) or 'quality'} {format_number(found.value)}"
    target = number(raw.get("target"))
    if target is not None:
        reached = raw.get("reached")
        verdict = "reached" if reached is True else "not reached" if reached is False else "?"
        text += f" (target {format_number(target)}, {verdict})"
    return text


def _scaling(view: RecordView, cell: str) -> str:
    kind = clean_text(view.metrics["scaling_efficiency"].raw.get("kind"), 20)
    return f"{cell} ({kind})" if kind and cell != "-" else cell


def _failures(views: list[RecordView]) -> list[str]:
    return [f"{view.label(machine=True)}: {view.status}: {view.error or 'no reason recorded'}"
            for view in views if view.status != "success" or view.error]


def _heading(name: str, scale: Scale) -> str:
    """A metric column's heading: the catalogue's word and the column's unit."""
    return f"{heading_of(name)} ({scale.label})" if scale.label and name != "quality" \
        else heading_of(name)


def training_table(workload: str, views: list[RecordView],
                   scales: Mapping[str, Scale] | None = None,
                   machines: bool | None = None) -> Table:
    """One row per record of a workload: its machine where the report holds several
    (`machines`; by default where the table does), a column
    for every identity field its records differ in (a line names the others), the version
    measured where several, the status and a column per metric the catalogue shows that any
    record has, in the report's one unit per metric."""
    scales = scales if scales is not None else report_scales(views)
    extra, every_row = identity_columns([view.spec for view in views],
                                        ["workload", "strategy"])
    strategies = len({view.strategy for view in views}) > 1
    machines = several_machines(views) if machines is None else machines
    names = column_metrics(name for view in views for name, found in view.metrics.items()
                           if found.value is not None)
    # the version of the code measured, where the table holds several (older commits are
    # left out by the report command; a table given them tells them apart)
    versions = [version_of(view.as_record()) for view in views]
    several = len(set(versions)) > 1
    lead = ["machine"] * machines + [column_heading(name) for name in extra] + \
        ["strategy"] * strategies + ["commit"] * several + ["status"]
    rows = []
    for view, version in zip(views, versions, strict=True):
        fields = fields_of(view.spec)
        row = [view.machine_label] * machines + [
            view.precision if name == "precision" else text(name, fields.get(name))
            for name in extra] + [view.strategy] * strategies + [version] * several + \
            [view.status_text]
        for name in names:
            found = view.metrics.get(name)
            if name == "quality":
                row.append(_quality(view))
                continue
            cell = with_ci(found, scales[name], scales[name].unit)
            row.append(_scaling(view, cell) if name == "scaling_efficiency" and found else cell)
        rows.append(row)
    busy = [f"{view.label(machine=True)}: measured on a busy machine "
            f"({clean_text(view.load.get('busy_reason'))})" for view in views if view.busy]
    imprecise = [f"{view.label(machine=True)}: {_missed(view.measurement)}" for view in views
                 if view.measurement.get("target_met") is False]
    return Table(title=workload, columns=lead + [_heading(name, scales[name]) for name in names],
                 rows=rows, numeric=[False] * len(lead) + [name != "quality" for name in names],
                 notes=_failures(views) + busy + imprecise + _between_runs(views),
                 footnotes=[every_row] if every_row else [],
                 row_runs=[view.run_id for view in views])


def _between_runs(views: list[RecordView]) -> list[str]:
    """A note per configuration measured two or more times on one machine at one commit (of
    the code measured and of dtbench): how far its runs' throughputs spread beside the
    interval one run states, flagged where they disagree more than twice that (another load,
    clock or placement between the runs)."""
    sets: dict[tuple[str, ...], list[RecordView]] = {}
    for view in views:
        found = view.metrics.get("throughput")
        if view.status == "success" and view.spec_key and found and found.value:
            measured = (clean_text(view.code.get("commit")), clean_text(view.harness.get(
                "git_commit")), clean_text(view.harness.get("dirty")))
            sets.setdefault((view.machine_label, experiment_key(view.as_record()), *measured),
                            []).append(view)
    notes = []
    for (machine, *_), members in sets.items():
        if len(members) < 2:
            continue
        stated = [v.metrics["throughput"].raw.get("interval_pct") for v in members]
        intervals = [number(s.get("achieved")) for s in stated if isinstance(s, dict)]
        spread, within = repeat_spread([v.metrics["throughput"].value or 0.0 for v in members],
                                       [i for i in intervals if i is not None])
        first = members[0]
        notes.append(f"between runs: {first.text('size')} {first.label()} on {machine}, one "
                     f"commit: throughput +/-{spread:.1f}% across {len(members)} runs"
                     + (f", +/-{within:.1f}% within a run" if within is not None else "")
                     + (" (unstable: the runs disagree more than one run shows)"
                        if unstable(spread, within) else ""))
    return notes


def _missed(account: dict[str, Any]) -> str:
    """A run that missed its precision target, as a table's note says it."""
    achieved, target = account.get("achieved_ci_pct"), account.get("target_ci_pct")
    shown = f"+/-{achieved:.1f}%" if isinstance(achieved, int | float) else "no interval"
    wanted = f"+/-{target:g}%" if isinstance(target, int | float) else "its target"
    return (f"imprecise: {shown} against {wanted} ({clean_text(account.get('stopped'), 40)} "
            f"after {clean_text(account.get('measured_steps'), 12)} steps"
            + ("; drifting" if account.get("drifting") is True else "") + ")")


def comm_table(op: str, views: list[RecordView], latency: Scale | None = None,
               machines: bool | None = None) -> Table:
    """One row per collective run, busbw by message size in the columns (nccl-tests style);
    latency in one unit for every collective of the report (`latency`); the machine where
    the report holds several (`machines`; by default where the table does)."""
    keys = [name for name in COMM_FIELDS if len({view.text(name) for view in views}) > 1
            or name in ("comm", "world_size")]
    per_size = []
    for view in views:
        busbw = view.metrics.get("busbw")
        per_size.append({row["bytes"]: row["busbw"] for row in (busbw.per_size() if busbw else [])})
    sizes = sorted({size for rows in per_size for size in rows})
    latency = latency or report_scales(views)["latency"]
    machines = several_machines(views) if machines is None else machines
    columns = (["machine"] * machines + [column_heading(name) for name in keys] + ["status"]
               + [size_label(s) for s in sizes] + [_heading("latency", latency)])
    rows = []
    for view, busbw_by_size in zip(views, per_size, strict=True):
        row = [view.machine_label] * machines + [view.text(name) for name in keys] + \
            [view.status]
        row += [format_number(busbw_by_size.get(size)) for size in sizes]
        row += [latency.show(view.value("latency"))]
        rows.append(row)
    numeric = [False] * (len(keys) + 1 + machines) + [True] * (len(sizes) + 1)
    return Table(title=op, columns=columns, rows=rows, numeric=numeric,
                 intro=f"{op}: busbw in GB/s (1e9 B/s) by message size; latency at the "
                       "smallest size.", notes=_failures(views),
                 row_runs=[view.run_id for view in views])


def _gpus(machine: dict[str, Any]) -> str:
    gpus = machine.get("gpus")
    if not isinstance(gpus, list) or not gpus:
        return "-"
    names = Counter(clean_text(g.get("name") if isinstance(g, dict) else g, 80) for g in gpus)
    return ", ".join(f"{count}× {name}" for name, count in sorted(names.items()))


def _interconnect(machine: dict[str, Any]) -> str:
    link = machine.get("interconnect")
    if not isinstance(link, dict):
        return clean_text(link, 60) or "-"
    speed = number(link.get("speed_mbps"))
    text = " ".join(filter(None, [clean_text(link.get("type"), 30),
                                  clean_text(link.get("interface"), 30)]))
    return (text + (f" {format_number(speed / 1000)} Gb/s" if speed else "")) or "-"


def _machine_row(view: RecordView) -> tuple[str, ...]:
    machine = view.machine

    def text(key: str, limit: int = 100) -> str:
        return clean_text(machine.get(key), limit) or "-"

    return (view.machine_label, text("hostname"), text("cpu_model"), text("cpu_cores", 10),
            human_bytes(number(machine.get("ram_bytes"))), _gpus(machine), text("os"),
            text("kernel", 60), text("nodes", 10), _interconnect(machine))


def machines_table(views: list[RecordView]) -> Table:
    """Each distinct machine the records came from, with how many records it made."""
    counts: Counter[tuple[str, ...]] = Counter(_machine_row(view) for view in views)
    columns = ["machine", "host", "CPU", "cores", "RAM", "GPUs", "OS", "kernel", "nodes",
               "interconnect", "records"]
    rows = [[*key, str(count)] for key, count in sorted(counts.items())]
    return Table(title="Machines", columns=columns, rows=rows,
                 numeric=[False, False, False, True, True] + [False] * 5 + [True])


def _version(value: Any) -> str:
    if isinstance(value, dict):
        first = clean_text(value.get("implementation") or value.get("version"), 200)
        rest = [f"{clean_text(k, 30)} {clean_text(v, 30)}" for k, v in sorted(value.items())
                if k not in ("implementation", "version") and v]
        return clean_text(", ".join([first.split(",")[0], *rest]).strip(", "), 80) or "-"
    return clean_text(value, 80) or "-"


def software_table(views: list[RecordView]) -> Table:
    """Each distinct software stack, harness version included."""
    names = ("python", "torch", "onednn", "cuda", "cudnn", "nccl", "mpi")
    counts: Counter[tuple[str, ...]] = Counter()
    for view in views:
        harness = view.harness
        dtbench = " ".join(filter(None, [
            clean_text(harness.get("version"), 30), clean_text(harness.get("git_commit"), 60)[:10],
            "dirty" if harness.get("dirty") is True else ""])) or "-"
        counts[(*(_version(view.software.get(n)) for n in names), dtbench)] += 1
    columns = ["Python", "torch", "oneDNN", "CUDA", "cuDNN", "NCCL", "MPI", "dtbench",
               "records"]
    rows = [[*key, str(count)] for key, count in sorted(counts.items())]
    return Table(title="Software", columns=columns, rows=rows,
                 numeric=[False] * 8 + [True])


def records_table(views: list[RecordView], machine: bool = False) -> Table:
    """Every record the report was made from, by run id (with `machine`, each record's
    machine and experiment: what a table's row is)."""
    ordered = sorted(views, key=lambda view: (view.created_at, view.run_id))
    rows = [[view.run_id, *([view.machine_label, clean_text(label(view.spec), 200)] if machine else
                            [view.workload]), view.status_text, view.created_at]
            for view in ordered]
    columns = ["run id", *(["machine", "experiment"] if machine else ["workload"]), "status",
               "created (UTC)"]
    return Table(title="Records", columns=columns, rows=rows, numeric=[False] * len(columns),
                 fold=False)

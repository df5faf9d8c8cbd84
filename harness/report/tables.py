"""The report as plain-text tables, before any format: what every format shows, in order.

Cells are clean display text (no control characters) but not escaped: escaping belongs to
the format that writes them.
"""
from __future__ import annotations

from collections import Counter
from typing import Any

from harness.core.secrets import shown_command
from harness.core.stats import repeat_spread, unstable
from harness.core.text import human_bytes, size_label
from harness.records.experiment import experiment_key, version_of
from harness.report.breakdown import breakdown_section
from harness.report.columns import heading as column_heading
from harness.report.columns import identity_columns
from harness.report.model import Report, Section, Table
from harness.report.strategies import strategies_section
from harness.report.units import column_scale, format_number, with_ci
from harness.report.view import RecordView, clean_text, group, number

METRIC_COLUMNS = {"throughput": "throughput", "tokens_per_s": "tokens/s",
                  "step_time": "step time",
                  "achieved_flops": "achieved", "mfu": "MFU", "peak_memory": "peak memory",
                  "time_to_train": "time to train", "quality": "quality",
                  "scaling_efficiency": "scaling eff.", "peak_flops": "peak",
                  "data_wait_share": "data wait", "energy_per_sample": "energy/sample"}
# Constants of a workload, and the detail the Strategies section shows: in the CSV, not
# worth a training-table column.
HIDDEN_METRICS = ("flops_per_sample", "grad_bytes_per_step", "bytes_sent_per_rank",
                  "memory_bandwidth", "state_bytes", "samples_to_target", "data_wait",
                  "time_breakdown")
HIDDEN_PREFIXES = ("comm_bytes", "phase_")
# (spec field, heading, shown only when it varies within the table)
TRAINING_KEYS = (("strategy", "strategy", True), ("backend", "backend", False),
                 ("comm", "comm", False),
                 ("launcher", "launcher", True), ("precision", "precision", False),
                 ("world_size", "ranks", False), ("nnodes", "nodes", True),
                 ("threads", "threads/rank", True), ("size", "size", False),
                 ("batch_per_rank", "batch/rank", False), ("mode", "mode", False),
                 ("data", "data", True), ("loader_workers", "loader workers", True),
                 ("suite", "suite", True))
COMM_KEYS = (("backend", "backend", False), ("comm", "comm", False),
             ("launcher", "launcher", True), ("world_size", "ranks", False),
             ("nnodes", "nodes", True), ("precision", "dtype", True))


def regenerate_command(paths: list[str], fmt: str | None, output: str | None,
                       by: str | None = None, reference: str | None = None) -> str:
    """The command line that writes this report again, with the paths as the user gave them."""
    words = ["dtbench", "report", *paths]
    for flag, value in (("--format", fmt), ("-o", output), ("--by", by),
                        ("--reference", reference)):
        if value:
            words += [flag, value]
    return clean_text(shown_command(words), None)


def _key_columns(views: list[RecordView], keys: tuple[tuple[str, str, bool], ...]
                 ) -> list[tuple[str, str]]:
    return [(name, heading) for name, heading, optional in keys
            if not optional or len({view.text(name) for view in views}) > 1]


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


def _metric_names(views: list[RecordView]) -> list[str]:
    present = {name for view in views for name, m in view.metrics.items()
               if m.value is not None and name not in HIDDEN_METRICS
               and not name.startswith(HIDDEN_PREFIXES)}
    known = [name for name in METRIC_COLUMNS if name in present]
    return known + sorted(present - set(METRIC_COLUMNS))


def _failures(views: list[RecordView]) -> list[str]:
    return [f"{view.run_id}: {view.status}: {view.error or 'no reason recorded'}"
            for view in views if view.status != "success" or view.error]


def training_table(workload: str, views: list[RecordView]) -> Table:
    """One row per record of a workload; metric columns where any record has the metric; a
    column for every identity field its records differ in, and a line naming the others."""
    keys = _key_columns(views, TRAINING_KEYS)
    extra, every_row = identity_columns([view.spec for view in views],
                                        ["workload", *(name for name, _ in keys)])
    keys += [(name, column_heading(name)) for name in extra]
    names = _metric_names(views)
    # the version of the code measured, where the table holds several (older commits are
    # left out by the report command; a table given them tells them apart)
    versions = [version_of(view.as_record()) for view in views]
    several = len(set(versions)) > 1
    columns = ["machine"] + [heading for _, heading in keys] + ["commit"] * several + ["status"]
    units, scales = {}, {}
    for name in names:
        having = [v.metrics[name] for v in views if name in v.metrics]
        units[name], scales[name] = having[0].unit, column_scale(name, having)
        heading = METRIC_COLUMNS.get(name, name)
        label = scales[name].label
        columns.append(f"{heading} ({label})" if label and name != "quality" else heading)
    rows = []
    for view, version in zip(views, versions, strict=True):
        row = [view.machine_label] + [view.text(name) for name, _ in keys] + \
            [version] * several + [view.status_text]
        for name in names:
            found = view.metrics.get(name)
            if name == "quality":
                row.append(_quality(view))
                continue
            cell = with_ci(found, scales[name], units[name])
            row.append(_scaling(view, cell) if name == "scaling_efficiency" and found else cell)
        rows.append(row + [view.run_id])
    numeric = [False] * (len(keys) + 2 + several) + [name != "quality" for name in names] \
        + [False]
    busy = [f"{view.run_id}: measured on a busy machine "
            f"({clean_text(view.load.get('busy_reason'))})" for view in views if view.busy]
    imprecise = [f"{view.run_id}: {_missed(view.measurement)}" for view in views
                 if view.measurement.get("target_met") is False]
    return Table(title=workload, columns=columns + ["run"], rows=rows, numeric=numeric,
                 notes=_failures(views) + busy + imprecise + _between_runs(views),
                 footnotes=[every_row] if every_row else [])


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


def comm_table(op: str, views: list[RecordView]) -> Table:
    """One row per collective run, busbw by message size in the columns (nccl-tests style)."""
    keys = _key_columns(views, COMM_KEYS)
    per_size = []
    for view in views:
        busbw = view.metrics.get("busbw")
        per_size.append({row["bytes"]: row["busbw"] for row in (busbw.per_size() if busbw else [])})
    sizes = sorted({size for rows in per_size for size in rows})
    latency = column_scale("latency", [v.metrics["latency"] for v in views
                                       if "latency" in v.metrics])
    columns = (["machine"] + [heading for _, heading in keys] + ["status"]
               + [size_label(s) for s in sizes]
               + [f"latency ({latency.label})" if latency.label else "latency", "run"])
    rows = []
    for view, busbw_by_size in zip(views, per_size, strict=True):
        row = [view.machine_label] + [view.text(name) for name, _ in keys] + [view.status]
        row += [format_number(busbw_by_size.get(size)) for size in sizes]
        row += [latency.show(view.value("latency")), view.run_id]
        rows.append(row)
    numeric = [False] * (len(keys) + 2) + [True] * (len(sizes) + 1) + [False]
    return Table(title=op, columns=columns, rows=rows, numeric=numeric,
                 intro=f"{op}: busbw in GB/s (1e9 B/s) by message size; latency at the "
                       "smallest size.", notes=_failures(views))


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


def records_table(views: list[RecordView]) -> Table:
    """Every record the report was made from, by run id."""
    ordered = sorted(views, key=lambda view: (view.created_at, view.run_id))
    rows = [[view.run_id, view.workload, view.status_text, view.created_at] for view in ordered]
    return Table(title="Records", columns=["run id", "workload", "status", "created (UTC)"],
                 rows=rows, numeric=[False] * 4)


def older_note(older: int) -> str:
    """What the summary says of the records left out for being older than their experiment's
    latest commit on the same machine."""
    if not older:
        return ""
    return (f" {older} older record{'s' if older != 1 else ''} of the same machines and "
            "experiments (earlier commits or days) are left out: the report shows each "
            "experiment's latest; dtbench history follows them over time.")


def _summary(views: list[RecordView], paths: list[str], older: int = 0) -> str:
    statuses = Counter(view.status for view in views)
    parts = ", ".join(f"{count} {status}" for status, count in sorted(statuses.items()))
    where = " ".join(clean_text(p, 300) for p in paths)
    if not views:
        return f"No records in {where}."
    return (f"{len(views)} record{'s' if len(views) != 1 else ''} ({parts}) from {where}."
            + older_note(older))


def build_report(views: list[RecordView], *, paths: list[str], files: list[str],
                 skipped: list[str], regenerate: str, older: int = 0) -> Report:
    """The report's content from views already in stable order."""
    training = [v for v in views if not v.is_comm and not v.is_kernel and not v.is_prediction]
    comm = [v for v in views if v.is_comm]
    sections = []
    if views:
        sections.append(Section("Machines and software",
                                [machines_table(views), software_table(views)]))
    if training:
        sections.append(Section(
            "Training", [training_table(name, group_views)
                         for name, group_views in group(training, "workload").items()],
            intro="Values are medians; brackets hold the 95% confidence interval of the median "
                  "where per-step samples exist. MFU = achieved / peak FLOP/s."))
    compared = strategies_section(training)
    if compared is not None:
        sections.append(compared)
    where = breakdown_section(training)
    if where is not None:
        sections.append(where)
    if comm:
        sections.append(Section("Collectives", [comm_table(name, group_views) for
                                                name, group_views in group(comm, "op").items()]))
    return Report(summary=_summary(views, paths, older), regenerate=regenerate, sections=sections,
                  records=records_table(views), files=[clean_text(f, None) for f in files],
                  skipped=[clean_text(s) for s in skipped], empty=not views)

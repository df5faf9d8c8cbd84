"""`dtbench report --by machine`: machines side by side. Rows are experiments (the identity
every view shares, harness/records/experiment.py: a row never pools two of them), columns
machines, each at its latest version of the code; for each metric one table, with every
machine's median over its runs, and beside each machine but the reference its ratio to the
reference with a bootstrap 95% interval over the runs. Throughput is also shown per core (or
per device where the run used accelerators), so machines of different size compare. Under
each table: the identity fields its rows leave out, and each machine without a row, with why.
"""
from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass, field

from harness.core.errors import UsageError
from harness.core.stats import bootstrap_ratio_ci
from harness.facts.metrics import heading_of, metric_info
from harness.machine.names import system_description
from harness.records.experiment import (
    experiment_key,
    fields_of,
    identified,
    label,
    latest,
    text,
    version_of,
)
from harness.report.columns import heading as column_heading
from harness.report.columns import identity_columns
from harness.report.document import Report, Section, Table
from harness.report.units import Scale, choose_scale
from harness.report.view import EMULATED, RecordView, clean_text, number

# Not a recorded metric: throughput over the cores (or devices) a run had, in throughput's unit.
PER_CORE = "throughput_per_core"
# The metrics compared, a table each; their headings and units are the catalogue's.
MACHINE_METRICS = ("throughput", "tokens_per_s", PER_CORE, "time_to_train", "mfu",
                   "peak_memory", "energy_per_sample", "scaling_efficiency")
SYSTEM_COLUMNS = (("system_name", "machine"), ("host_processor_model_name", "CPU"),
                  ("host_processor_microarchitecture", "microarchitecture"),
                  ("host_processor_core_count", "cores"),
                  ("accelerator_model_name", "accelerator"),
                  ("accelerators_per_node", "accelerators/node"),
                  ("number_of_nodes", "nodes"), ("host_networking", "interconnect"),
                  ("framework", "framework"), ("operating_system", "OS"))
# The columns every table opens with (the strategy column holds its options too).
SHOWN = ("workload", "size", "precision", "world_size", "strategy")


def metric_heading(name: str) -> str:
    """A compared metric's heading (throughput per core: throughput's, per core)."""
    return f"{heading_of('throughput')} per core or device" if name == PER_CORE \
        else heading_of(name)


def experiment(view: RecordView) -> tuple[str, ...]:
    """The columns every row opens with (what a reader looks a row up by)."""
    return (view.workload, view.text("size"), view.text("precision"), view.text("world_size"),
            view.strategy)


def _value(view: RecordView, name: str) -> float | None:
    if name != PER_CORE:
        return view.value(name)
    throughput = view.value("throughput")
    gpus = len(view.machine.get("gpus") or []) if view.text("backend") == "cuda" else 0
    units = gpus or number(view.machine.get("cpus_usable")) or number(
        view.machine.get("cpu_cores"))
    nodes = number(view.spec.get("nnodes")) or 1
    return None if throughput is None or not units else throughput / (units * nodes)


def systems_table(views: list[RecordView]) -> Table:
    """Each machine in the terms of an MLPerf system description."""
    seen: dict[str, list[str]] = {}
    for view in views:
        desc = system_description(view.machine, view.software)
        seen.setdefault(view.machine_label, [clean_text(desc.get(key), 120) or "-"
                                             for key, _ in SYSTEM_COLUMNS])
    return Table(title="Systems", columns=[heading for _, heading in SYSTEM_COLUMNS],
                 rows=[seen[label] for label in sorted(seen)],
                 numeric=[False, False, False, True, False, True, True, False, False, False])


def training(views: list[RecordView]) -> list[RecordView]:
    return [v for v in views if v.status == "success" and not v.is_comm
            and not v.is_kernel and not v.is_prediction]


def default_reference(views: list[RecordView]) -> str:
    """The identified machine (named, or its CPU's family and model known) with the most
    successful training records; the first by name among equals."""
    counts = Counter(view.machine_label for view in training(views))
    known = {view.machine_label for view in views if identified(view.machine)}
    return min(counts, key=lambda m: (m not in known, -counts[m], m))


@dataclass
class Cells:
    """Per metric, experiment key and machine, the runs' values; each experiment's first view
    (for its columns); each machine's version compared; the run ids of each cell; the cells
    (experiment, machine) whose precision the machine's CPU only emulates."""

    values: dict[str, dict[str, dict[str, list[float]]]]
    first: dict[str, RecordView]
    versions: dict[str, set[str]]
    members: dict[tuple[str, str], list[str]]
    emulated: set[tuple[str, str]] = field(default_factory=set)


def latest_runs(views: list[RecordView]) -> list[RecordView]:
    """The successful training runs of each machine's experiment at its latest version (an
    older commit is history's, not a column's)."""
    runs = training(views)
    kept, _ = latest([view.as_record() for view in runs])
    newest = {str(record["run_id"]) for record in kept}
    return [view for view in runs if view.run_id in newest]


def cells(views: list[RecordView]) -> Cells:
    """The latest successful training runs by metric, experiment and machine."""
    found = Cells(defaultdict(lambda: defaultdict(lambda: defaultdict(list))), {},
                  defaultdict(set), defaultdict(list))
    for view in latest_runs(views):
        key = experiment_key(view.as_record())
        found.first.setdefault(key, view)
        found.members[(key, view.machine_label)].append(view.run_id)
        found.versions[view.machine_label].add(version_of(view.as_record()))
        if view.emulated:
            found.emulated.add((key, view.machine_label))
        for name in MACHINE_METRICS:
            value = _value(view, name)
            if value is not None:
                found.values[name][key][view.machine_label].append(value)
    return found


def ratio_cell(values: list[float], reference: list[float] | None, scale: Scale) -> str:
    """The median of a machine's runs, and beside it its ratio to the reference's median with
    a bootstrap 95% interval where both have 2 runs or more (no ratio without `reference`)."""
    if not values:
        return "-"
    shown = scale.show(statistics.median(values))
    if reference is None or not reference or not statistics.median(reference):
        return shown
    ratio = statistics.median(values) / statistics.median(reference)
    if len(values) >= 2 and len(reference) >= 2:
        low, high = bootstrap_ratio_ci(reference, values)
        return f"{shown} ({ratio_text(ratio)}× [{ratio_text(low)}, {ratio_text(high)}])"
    return f"{shown} ({ratio_text(ratio)}×)"


def ratio_text(ratio: float) -> str:
    """A ratio to two decimals, or two significant digits below 0.1 (0.0082, not 0.01)."""
    return f"{ratio:.2f}" if abs(ratio) >= 0.1 or ratio == 0 else f"{ratio:.2g}"


def _unit(views: list[RecordView], name: str) -> str:
    """The unit the records give a metric, else the catalogue's."""
    found = next((view.metrics[name].unit for view in views if name in view.metrics), "")
    info = metric_info("throughput" if name == PER_CORE else name)
    return found or (info.unit if info and info.unit else "")


def why_no_row(views: list[RecordView], machine: str, heading: str,
               workload: str | None = None) -> str:
    """Why a machine has no row in a table (of one workload's rows, with `workload`): what its
    records are instead."""
    mine = [view for view in views if view.machine_label == machine]
    trained = [view for view in mine if not (view.is_comm or view.is_kernel
                                             or view.is_prediction)]
    if workload is not None and trained and not any(v.workload == workload for v in trained):
        return f"no {workload} run ({len(trained)} training record(s) of other workloads)"
    trained = [view for view in trained if workload is None or view.workload == workload]
    if not trained:
        kinds = Counter("kernel" if v.is_kernel else "comm" if v.is_comm else "prediction"
                        for v in mine)
        return "no training record: " + ", ".join(f"{n} {kind}" for kind, n in sorted(
            kinds.items())) + " record(s) only"
    statuses = Counter(view.status for view in trained)
    if not statuses.get("success"):
        return "no successful training run (" + ", ".join(
            f"{n} {status}" for status, n in sorted(statuses.items())) + ")"
    return f"none of its {statuses['success']} successful training run(s) reports {heading}"


def metric_table(views: list[RecordView], found: Cells, name: str, order: list[str],
                 workload: str | None = None) -> Table:
    """One metric's table: a row per experiment, a column per machine, notes beneath."""
    heading = metric_heading(name)
    keys = sorted(found.values[name], key=lambda k: (experiment(found.first[k]), k))
    specs = [found.first[key].spec for key in keys]
    extra, left = identity_columns(specs, SHOWN)
    having = [v for m in found.values[name].values() for vs in m.values() for v in vs]
    scale = choose_scale(name, _unit(views, name), having)
    reference = order[0]
    present = {m for by in found.values[name].values() for m in by}
    columns = [m for m in order if m in present]  # the reference first, where it has a row
    rows = []
    for key in keys:
        view, by = found.first[key], found.values[name][key]
        fields = fields_of(view.spec)
        rows.append([*experiment(view), *(text(f, fields.get(f)) for f in extra),
                     *(ratio_cell(by.get(m, []), None if m == reference else
                                  by.get(reference, []), scale)
                       + (f" {EMULATED}" if (key, m) in found.emulated else "")
                       for m in columns)])
    rows.sort(key=lambda row: row[:len(SHOWN) + len(extra)])
    title = f"{heading} ({scale.label})" if scale.label else heading
    table = Table(title=title, columns=[*(column_heading(f) for f in (*SHOWN, *extra)),
                                        *columns],
                  rows=rows, numeric=[False] * 3 + [True, False] + [False] * len(extra)
                  + [True] * len(columns), fold_until=len(SHOWN) + len(extra))
    table.footnotes = ([left] if left else []) + [
        f"{machine}: no row" + (" (the reference: no ratios in this table)"
                                if machine == reference else "")
        + f": {why_no_row(views, machine, heading, workload)}."
        for machine in order if machine not in present]
    return table


def by_machine(views: list[RecordView], reference: str | None, *, summary: str,
               regenerate: str, workload: str | None = None) -> Report:
    """The side-by-side report of the successful training records, of one workload where
    given (every record is read for which machines exist; a machine with no row in a table
    is named under it, with why)."""
    runs = [view for view in training(views) if workload is None or view.workload == workload]
    machines = sorted({view.machine_label for view in views if view.machine})
    if not runs:
        raise UsageError("report --by machine: no successful training records")
    reference = reference or default_reference(views)
    if reference not in machines:
        raise UsageError(f"--reference {reference!r}: no such machine; the records name "
                         f"{', '.join(machines)}")
    order = [reference, *(m for m in machines if m != reference)]
    found = cells(runs)
    tables = [metric_table(views, found, name, order, workload)
              for name in MACHINE_METRICS if found.values[name]]
    compared = "; ".join(f"{m}: {', '.join(sorted(found.versions[m]))}"
                         for m in order if found.versions.get(m))
    intro = (f"Medians over each machine's runs of an experiment at its latest version of the "
             f"code ({compared}); beside every machine but the reference ({reference}) its "
             "ratio to the reference, with a bootstrap 95% interval where both have 2 runs or "
             "more. Higher throughput, MFU and scaling efficiency are better; lower time to "
             "train and peak memory.")
    busy = [view for view in runs if view.busy]
    if busy:
        intro += (f" {len(busy)} of the {len(runs)} runs were measured on a busy machine "
                  "(listed under Systems): their figures are in the medians, and may be "
                  "slowed by other processes.")
    systems = systems_table(views if workload is None else runs)
    systems.notes = [f"{view.label(machine=True)}: measured on a busy machine "
                     f"({clean_text(view.load.get('busy_reason'))})" for view in busy]
    return Report(summary=summary, regenerate=regenerate,
                  sections=[Section("Systems", [systems]),
                            Section("Machines side by side", tables, intro=intro)],
                  records=Table("Records", ["run"], [], [False]), files=[], skipped=[],
                  empty=True)


def csv_rows(views: list[RecordView]) -> list[list[str]]:
    """machine, commit, experiment (its columns, then its whole label), metric, value: one row
    per record and metric."""
    rows = []
    for view in training(views):
        whole = clean_text(label(view.spec), None)
        for name in MACHINE_METRICS:
            found = _value(view, name)
            if found is not None:
                rows.append([view.machine_label, clean_text(view.code.get("commit"), 60) or "-",
                             *experiment(view), whole, name, repr(found)])
    return rows

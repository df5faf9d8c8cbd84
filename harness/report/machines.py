"""`dtbench report --by machine`: machines side by side. Rows are experiments (workload,
size, precision, ranks, strategy), columns machines; for each metric one table, with every
machine's median over its runs, and beside each machine but the reference its ratio to the
reference with a bootstrap 95% interval over the runs. Throughput is also shown per core (or
per device where the run used accelerators), so machines of different size compare."""
from __future__ import annotations

import statistics
from collections import defaultdict

from harness.core.errors import UsageError
from harness.core.stats import bootstrap_ratio_ci
from harness.records.machine import system_description
from harness.report.model import Report, Section, Table
from harness.report.units import format_number
from harness.report.view import RecordView, clean_text, number

# (metric, heading, higher is better)
MACHINE_METRICS = (("throughput", "throughput (samples/s)", True),
                   ("throughput_per_core", "throughput per core or device (samples/s)", True),
                   ("time_to_train", "time to train (s)", False), ("mfu", "MFU", True),
                   ("peak_memory", "peak memory (bytes)", False),
                   ("scaling_efficiency", "scaling efficiency", True))
SYSTEM_COLUMNS = (("system_name", "machine"), ("host_processor_model_name", "CPU"),
                  ("host_processor_microarchitecture", "microarchitecture"),
                  ("host_processor_core_count", "cores"),
                  ("accelerator_model_name", "accelerator"),
                  ("accelerators_per_node", "accelerators/node"),
                  ("number_of_nodes", "nodes"), ("host_networking", "interconnect"),
                  ("framework", "framework"), ("operating_system", "OS"))


def experiment(view: RecordView) -> tuple[str, ...]:
    return (view.workload, view.text("size"), view.text("precision"), view.text("world_size"),
            view.strategy)


def _value(view: RecordView, name: str) -> float | None:
    if name != "throughput_per_core":
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


def _cell(values: list[float], reference: list[float] | None, higher: bool) -> str:
    if not values:
        return "-"
    text = format_number(statistics.median(values))
    if reference is None or not reference or not statistics.median(reference):
        return text
    ratio = statistics.median(values) / statistics.median(reference)
    if len(values) >= 2 and len(reference) >= 2:
        low, high = bootstrap_ratio_ci(reference, values)
        return f"{text} ({ratio:.2f}× [{low:.2f}, {high:.2f}])"
    return f"{text} ({ratio:.2f}×)"


def by_machine(views: list[RecordView], reference: str | None, *, summary: str,
               regenerate: str) -> Report:
    """The side-by-side report of the successful training records."""
    training = [v for v in views if v.status == "success" and not v.is_comm
                and not v.is_kernel and not v.is_prediction]
    machines = sorted({view.machine_label for view in training})
    if not machines:
        raise UsageError("report --by machine: no successful training records")
    reference = reference or machines[0]
    if reference not in machines:
        raise UsageError(f"--reference {reference!r}: no such machine; the records name "
                         f"{', '.join(machines)}")
    ordered = [reference, *(m for m in machines if m != reference)]
    values: dict[str, dict[tuple[str, ...], dict[str, list[float]]]] = defaultdict(
        lambda: defaultdict(lambda: defaultdict(list)))
    for view in training:
        for name, _, _ in MACHINE_METRICS:
            found = _value(view, name)
            if found is not None:
                values[name][experiment(view)][view.machine_label].append(found)
    tables = []
    for name, heading, higher in MACHINE_METRICS:
        rows = []
        for key in sorted(values[name]):
            cells = values[name][key]
            base = cells.get(reference, [])
            rows.append([*key, *(_cell(cells.get(m, []), None if m == reference else base,
                                       higher) for m in ordered)])
        if rows:
            tables.append(Table(title=heading,
                                columns=["workload", "size", "precision", "ranks", "strategy",
                                         *ordered],
                                rows=rows, numeric=[False] * 3 + [True, False]
                                + [True] * len(ordered)))
    intro = (f"Medians over each machine's runs; beside every machine but the reference "
             f"({reference}) its ratio to the reference, with a bootstrap 95% interval where "
             f"both have 2 runs or more. Higher throughput, MFU and "
             "scaling efficiency are better; lower time to train and peak memory.")
    busy = [view for view in training if view.busy]
    if busy:
        intro += (f" {len(busy)} of the {len(training)} runs were measured on a busy machine "
                  "(listed under Systems): their figures are in the medians, and may be "
                  "slowed by other processes.")
    systems = systems_table(training)
    systems.notes = [f"{view.run_id} ({view.machine_label}): measured on a busy machine "
                     f"({clean_text(view.load.get('busy_reason'))})" for view in busy]
    return Report(summary=summary, regenerate=regenerate,
                  sections=[Section("Systems", [systems]),
                            Section("Machines side by side", tables, intro=intro)],
                  records=Table("Records", ["run"], [], [False]), files=[], skipped=[],
                  empty=True)


def csv_rows(views: list[RecordView]) -> list[list[str]]:
    """machine, commit, experiment, metric, value: one row per record and metric."""
    rows = []
    for view in views:
        if view.status != "success" or view.is_comm or view.is_kernel or view.is_prediction:
            continue
        for name, _, _ in MACHINE_METRICS:
            found = _value(view, name)
            if found is not None:
                rows.append([view.machine_label, clean_text(view.code.get("commit"), 60) or "-",
                             *experiment(view), name, repr(found)])
    return rows

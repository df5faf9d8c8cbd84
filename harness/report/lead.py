"""The report's first section: the answer its reader came for, before any detail.

Records of several machines: a results table in the way MLPerf publishes one, a row per
machine and a column per workload, each cell the machine's throughput and beside it its ratio
to the reference machine with the between-run interval, and the geometric mean of the ratios
over the workloads every machine of the table ran. Experiments that differ in more than the
workload (precision, ranks, ...) get a table each, so that a column never pools two; what
every column shares is named under the table. Records of one machine: a row per experiment
with its headline figures (harness/facts/metrics.HEADLINE) in units.
"""
from __future__ import annotations

import math
import statistics
from collections.abc import Mapping
from typing import Any

from harness.facts.metrics import HEADLINE, heading_of
from harness.records.experiment import (
    experiment_key,
    fields_of,
    same_in_every_row,
    text,
    varying,
    version_of,
)
from harness.report.columns import heading, identity_columns
from harness.report.document import Section, Table
from harness.report.machines import (
    default_reference,
    latest_runs,
    ratio_cell,
    ratio_text,
    why_no_row,
)
from harness.report.units import Scale, report_scales, with_ci
from harness.report.view import RecordView, clean_text
from harness.spec.specs import PRECISIONS

# The identity fields a results table's columns stand for (the rest say which table).
COLUMN_FIELDS = ("workload",)
GEOMEAN = "geometric mean"


def _training(views: list[RecordView]) -> list[RecordView]:
    return [v for v in views if not (v.is_comm or v.is_kernel or v.is_prediction)]


def compared_machines(views: list[RecordView]) -> list[str]:
    """The machines with a successful training record, by name."""
    return sorted({view.machine_label for view in latest_runs(views)})


def _settings(first: Mapping[str, RecordView]) -> tuple[dict[str, tuple[str, ...]], list[str]]:
    """Each experiment's setting (its values of the identity fields that differ within a
    workload: what tells its table from the others) and those fields."""
    specs = [view.spec for view in first.values()]
    extra, _ = identity_columns(specs, [*COLUMN_FIELDS, "strategy"])
    strategies = len({view.strategy for view in first.values()}) > 1
    fields = [*extra, *(["strategy"] if strategies else [])]
    found = {}
    for key, view in first.items():
        values = fields_of(view.spec)
        found[key] = tuple(view.strategy if name == "strategy" else text(name, values.get(name))
                           for name in fields)
    return found, fields


def _setting_order(setting: tuple[str, ...], fields: list[str], machines: int
                   ) -> tuple[Any, ...]:
    """Tables with more machines first, then fp32 before bf16 before fp16, then by name."""
    precision = setting[fields.index("precision")] if "precision" in fields else ""
    return (-machines, _precision_rank(precision), setting)


def _why_empty(views: list[RecordView], key: str, machine: str) -> str | None:
    """Why a machine that ran an experiment has no figure for it: its runs' status."""
    tried = [v for v in views if v.machine_label == machine and v.status != "success"
             and experiment_key(v.as_record()) == key]
    if not tried:
        return None
    last = tried[-1]
    return f"{last.status}: {last.error or 'no reason recorded'}"


def _geomean(ratios: list[float]) -> float:
    return math.exp(statistics.fmean(math.log(r) for r in ratios))


def machine_tables(views: list[RecordView], reference: str | None = None) -> list[Table]:
    """The results tables of several machines' training records: a row per machine, a
    column per workload, one table per setting that two machines or more ran (every setting
    where none did); tables of one machine are named under the first."""
    runs = latest_runs(views)
    if not runs:
        return []
    reference = reference or default_reference(views)
    first: dict[str, RecordView] = {}
    values: dict[str, dict[str, list[float]]] = {}
    busy: set[tuple[str, str]] = set()
    for view in runs:
        key = experiment_key(view.as_record())
        first.setdefault(key, view)
        value = view.value("throughput")
        if value is not None:
            values.setdefault(key, {}).setdefault(view.machine_label, []).append(value)
            if view.busy:
                busy.add((key, view.machine_label))
    first = {key: view for key, view in first.items() if key in values}
    if not first:
        return []
    settings, fields = _settings(first)
    tables: dict[tuple[str, ...], list[str]] = {}
    for key in sorted(first, key=lambda k: (first[k].workload, k)):
        tables.setdefault(settings[key], []).append(key)
    machines_of = {setting: {m for key in keys for m in values[key]}
                   for setting, keys in tables.items()}
    shown = [s for s in tables if len(machines_of[s]) > 1] or list(tables)
    shown.sort(key=lambda s: _setting_order(s, fields, len(machines_of[s])))
    differ = [i for i, _ in enumerate(fields) if len({s[i] for s in shown}) > 1]
    scale = report_scales(runs)["throughput"]
    made = [_table(views, values, busy, first, tables[setting], reference, scale,
                   ", ".join(f"{heading(fields[i])} {setting[i]}" for i in differ))
            for setting in shown]
    rows = {m for s in shown for m in machines_of[s]}
    left = [s for s in tables if s not in shown]
    notes = [f"{machine}: no row: {why_no_row(views, machine, 'throughput')}."
             for machine in sorted({v.machine_label for v in views if v.machine} - rows)]
    if left:
        notes.append(f"{sum(len(tables[s]) for s in left)} more experiment(s) ran on one "
                     "machine only: they are in the tables below.")
    made[0].footnotes += notes
    return made


def _table(views: list[RecordView], values: dict[str, dict[str, list[float]]],
           busy: set[tuple[str, str]], first: dict[str, RecordView], keys: list[str],
           reference: str, scale: Scale, setting: str) -> Table:
    machines = sorted({m for key in keys for m in values[key]})
    base = reference if reference in machines else machines[0]
    order = [base, *(m for m in machines if m != base)]
    names = [first[key].workload for key in keys]
    columns = [f"{name} [{key.split(' ')[0][:8]}]" if names.count(name) > 1 else name
               for name, key in zip(names, keys, strict=True)]
    every = [key for key in keys if all(m in values[key] for m in machines)]
    rows, notes, intervals = [], [], False
    for machine in order:
        emulated = sorted({v.text("precision") for v in _training(views)
                           if v.machine_label == machine and v.emulated
                           and experiment_key(v.as_record()) in keys})
        row = [machine + (f" ({', '.join(emulated)} emulated)" if emulated else "")]
        for key in keys:
            mine, theirs = values[key].get(machine, []), values[key].get(base)
            row.append(ratio_cell(mine, None if machine == base else theirs, scale)
                       + (" (busy)" if (key, machine) in busy else ""))
            intervals = intervals or (machine != base and len(mine) > 1
                                      and len(theirs or []) > 1)
            why = None if mine else _why_empty(views, key, machine)
            if why:
                notes.append(f"{machine}, {first[key].workload}: {why}")
        ratios = [statistics.median(values[key][machine]) / statistics.median(values[key][base])
                  for key in every if statistics.median(values[key][base]) > 0]
        row.append("reference" if machine == base else f"{ratio_text(_geomean(ratios))}×"
                   if ratios and len(ratios) == len(every) and min(ratios) > 0 else "-")
        rows.append(row)
    specs = [first[key].spec for key in keys]
    own = [name for name in varying(specs) if name not in COLUMN_FIELDS]
    every_column = same_in_every_row(specs, [*COLUMN_FIELDS, *own])
    footnotes = [every_column.replace("Every row:", "Every column:", 1)
                 + (f" Each workload's own: {', '.join(heading(f) for f in own)}." if own
                    else "")] if every_column or own else []
    footnotes.append(f"Geometric mean of the ratios over the {len(every)} workload(s) every "
                     f"machine here ran" + (f" ({', '.join(first[k].workload for k in every)})"
                                            if every else "") + "."
                     + ("" if intervals else " One run per machine and workload: no "
                        "between-run interval (dtbench run --repeat 2 or more gives one)."))
    if any((key, machine) in busy for key in keys for machine in machines):
        footnotes.append("(busy): a run in the figure was measured while other processes took "
                         "CPU time from it (listed under Systems); it may be slowed.")
    if base != reference:
        footnotes.append(f"{reference} ran none of these: the ratios are to {base}.")
    title = f"{heading_of('throughput')} ({scale.label})" + (f": {setting}" if setting else "")
    return Table(title=title, columns=["machine", *columns, GEOMEAN], rows=rows,
                 numeric=[False] + [True] * (len(columns) + 1), notes=notes,
                 footnotes=footnotes, fold=False)


def experiments_table(views: list[RecordView]) -> Table | None:
    """One machine's experiments, a row each, with the headline figures they have: one run's
    value with its 95% CI of the median, or several runs' median with their range."""
    training = _training(views)
    if not training:
        return None
    groups: dict[tuple[str, str], list[RecordView]] = {}
    for view in training:
        record = view.as_record()
        groups.setdefault((experiment_key(record), version_of(record)), []).append(view)
    firsts = [members[0] for members in groups.values()]
    extra, _ = identity_columns([view.spec for view in firsts], [*COLUMN_FIELDS, "strategy"])
    strategies = len({view.strategy for view in firsts}) > 1
    versions = len({version for _, version in groups}) > 1
    done = [view for view in training if view.status == "success"]
    names = [name for name in HEADLINE if any(view.value(name) is not None for view in done)]
    scales = report_scales(done)
    columns = ["workload", *(heading(f) for f in extra), *(["strategy"] * strategies),
               *(["commit"] * versions),
               *(f"{heading_of(name)} ({scales[name].label})" if scales[name].label
                 else heading_of(name) for name in names), "status"]
    rows, notes = [], []
    for (_, version), members in sorted(groups.items(), key=lambda item: _row_key(item[1])):
        view, fields = members[0], fields_of(members[0].spec)
        good = [m for m in members if m.status == "success"]
        rows.append([view.workload,
                     *(view.precision if f == "precision" else text(f, fields.get(f))
                       for f in extra), *([view.strategy] * strategies),
                     *([version] * versions),
                     *(_figure(good, name, scales[name]) for name in names),
                     good[0].status_text if good else members[-1].status_text])
        if not good:
            notes.append(f"{view.workload} {view.label()}: {members[-1].status}: "
                         f"{members[-1].error or 'no reason recorded'}")
    return Table(title="Experiments", columns=columns, rows=rows,
                 numeric=[False] * (1 + len(extra) + strategies + versions)
                 + [True] * len(names) + [False], notes=notes,
                 footnotes=["Values are medians; brackets hold one run's 95% confidence "
                            "interval of the median, or the range of several runs' values."])


def _precision_rank(precision: str) -> int:
    """fp32 before bf16 before fp16, then any other."""
    return PRECISIONS.index(precision) if precision in PRECISIONS else len(PRECISIONS)


def _row_key(members: list[RecordView]) -> tuple[Any, ...]:
    view = members[0]
    return (view.workload, view.text("size"), _precision_rank(view.text("precision")),
            view.text("world_size"), clean_text(view.strategy), view.created_at)


def _figure(runs: list[RecordView], name: str, scale: Scale) -> str:
    having = [view for view in runs if view.value(name) is not None]
    if not having:
        return "-"
    if len(having) == 1:
        found = having[0].metrics[name]
        return with_ci(found, scale, found.unit)
    values = sorted(view.value(name) or 0.0 for view in having)
    middle = scale.show(statistics.median(values))
    low, high = scale.show(values[0]), scale.show(values[-1])
    return middle if low == high == middle else f"{middle} [{low}, {high}]"


def lead_section(views: list[RecordView], reference: str | None = None) -> Section | None:
    """The first section: machines compared where two or more trained, else this machine's
    experiments; None without a training record."""
    if len(compared_machines(views)) > 1:
        reference = reference or default_reference(views)
        tables = machine_tables(views, reference)
        return Section("Results", tables, intro=(
            f"Throughput, the median over each machine's runs of an experiment at its latest "
            f"version of the code; beside every machine but the reference ({reference}) its "
            "ratio to the reference, with a bootstrap 95% interval over the runs where both "
            "have 2 runs or more. A row per machine, a column per workload; experiments that "
            "differ in more than the workload have a table each.")) if tables else None
    table = experiments_table(views)
    return Section("Results", [table]) if table is not None else None

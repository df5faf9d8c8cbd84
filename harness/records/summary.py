"""What a store's index keeps of each record beside its spec, so that the commands that read a
whole store (report, history, compare, publish) need not parse every record: the machine's
label, the measured code (commit, branch, dirty), the busy and imprecise marks and the value
of the headline metrics.

A record parses at about 0.3 ms and validates at about 6 ms on the 2-core development machine:
100,000 of them take minutes and some 4 GB as Python objects. From the index, a command
reads one row per record and loads in full only the records it shows.

`summary_record` turns an index row back into a slim record (spec, machine name, code, the
indexed metrics' values): enough for history's series, publish's trends and record lists,
and the choice of which records to load.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from harness.facts.metrics import indexed_metrics
from harness.machine.load import is_busy, is_imprecise
from harness.machine.names import machine_label
from harness.spec.kinds import TRAINING, kind_of

# the metrics every whole-store view follows (the catalogue says which, and their units)
INDEXED = indexed_metrics()
INDEXED_METRICS = tuple(info.name for info in INDEXED)
METRIC_COLUMNS = tuple(f"m_{name}" for name in INDEXED_METRICS)
# spec fields the index's spec columns lack, which whole-store views need
SPEC_SUMMARY = ("task", "strategy")
CODE_COLUMNS = ("machine", "code_commit", "code_branch", "code_dirty")
# the marks every table puts beside a status (harness/machine/load.marked_status): 1 when
# the record was measured on a busy machine / missed its precision target
MARK_COLUMNS = ("busy", "imprecise")
SUMMARY_COLUMNS = (*SPEC_SUMMARY, *CODE_COLUMNS, *MARK_COLUMNS, *METRIC_COLUMNS)
INTEGER_SUMMARY = frozenset({"code_dirty", *MARK_COLUMNS})
REAL_SUMMARY = frozenset(METRIC_COLUMNS)


def label_of(record: Mapping[str, Any]) -> str:
    machine = record.get("machine")
    return machine_label(machine) if isinstance(machine, Mapping) and machine else \
        "unknown machine"


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if number == number and abs(number) != float("inf") else None


def summary_cells(record: Mapping[str, Any]) -> dict[str, Any]:
    """The summary columns of a record."""
    code = record.get("code") if isinstance(record.get("code"), Mapping) else {}
    spec = record.get("spec") if isinstance(record.get("spec"), Mapping) else {}
    dirty = code.get("dirty")
    cells: dict[str, Any] = {
        **{name: spec.get(name) if isinstance(spec.get(name), str) else None
           for name in SPEC_SUMMARY},
        "machine": label_of(record),
        "code_commit": code.get("commit") if isinstance(code.get("commit"), str) else None,
        "code_branch": code.get("branch") if isinstance(code.get("branch"), str) else None,
        "code_dirty": int(dirty) if isinstance(dirty, bool) else None,
        "busy": int(is_busy(record)), "imprecise": int(is_imprecise(record))}
    values = {entry.get("name"): entry.get("value") for entry in record.get("metrics") or []
              if isinstance(entry, Mapping)}
    for name, column in zip(INDEXED_METRICS, METRIC_COLUMNS, strict=True):
        cells[column] = _number(values.get(name))
    return cells


def summary_record(row: Mapping[str, Any], spec_columns: tuple[str, ...]) -> dict[str, Any]:
    """A slim record from an index row: what history, trends and record lists read. Its
    machine is only the label (as a name), its metrics only the indexed values."""
    dirty = row.get("code_dirty")
    return {
        "run_id": row["run_id"], "created_at": row.get("created_at") or "",
        "status": row.get("status"), "error": None, "spec_key": row.get("spec_key"),
        "spec": {name: row[name] for name in (*spec_columns, *SPEC_SUMMARY)
                 if row.get(name) is not None},
        "machine": {"name": row.get("machine") or "unknown machine"},
        "code": {"commit": row.get("code_commit"), "branch": row.get("code_branch"),
                 "dirty": None if dirty is None else bool(dirty)},
        # what marks its status: the reason stays in the record itself
        "load": {"busy": True, "busy_reason": "see the record"} if row.get("busy") else {},
        "notes": {"measurement": {"target_met": False}} if row.get("imprecise") else {},
        "metrics": [{"name": info.name, "unit": info.unit, "value": row[column],
                     "higher_is_better": info.higher_is_better}
                    for info, column in zip(INDEXED, METRIC_COLUMNS, strict=True)
                    if row.get(column) is not None],
    }


def is_training(row: Mapping[str, Any]) -> bool:
    return kind_of(row) is TRAINING


def version_of(row: Mapping[str, Any]) -> str:
    """The version a row measured: its commit (12 digits), else the day it was made."""
    commit = row.get("code_commit")
    return str(commit)[:12] if commit else str(row.get("created_at") or "")[:10]


def _experiment(row: Mapping[str, Any]) -> tuple[str, str]:
    from harness.records.experiment import experiment_key

    return (str(row.get("machine")), experiment_key({"spec": row, "spec_key": row.get(
        "spec_key")}) if row.get("spec_key") else str(row.get("workload")))


def latest_rows(rows: list[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Of each machine's training experiment (harness/records/experiment.py), the rows of its
    newest version (the commit, or day, of its newest record); every other row (comm, kernel,
    prediction) too."""
    newest: dict[tuple[str, str], tuple[str, str]] = {}
    for row in rows:
        if is_training(row):
            key = _experiment(row)
            when = (str(row.get("created_at") or ""), version_of(row))
            if key not in newest or when > newest[key]:
                newest[key] = when
    return [row for row in rows if not is_training(row) or version_of(row) == newest[
        _experiment(row)][1]]

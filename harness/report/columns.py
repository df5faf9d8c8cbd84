"""Which identity fields a table shows as columns, and the line under it naming the rest.

A table's rows are experiments or records of them (harness/records/experiment.py); two rows
that differ in an identity field must differ in a cell, and a field left out of the columns
is named under the table with its one value. A field that differs only between workloads
(their own batch and step counts) is each workload's own, and said so.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from harness.records.experiment import covered_by_strategy, fields_of, same_in_every_row, varying
from harness.spec.headings import field_heading as heading

__all__ = ["heading", "identity_columns"]


def _by_workload(specs: Sequence[Mapping[str, Any]]) -> list[list[Mapping[str, Any]]]:
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for spec in specs:
        groups.setdefault(str(spec.get("workload")), []).append(spec)
    return list(groups.values())


def identity_columns(specs: Sequence[Mapping[str, Any]], shown: Sequence[str]
                     ) -> tuple[list[str], str]:
    """The fields beyond `shown` (spec names; "strategy" covers its options) that differ
    within one workload's rows, and the footnote: the fields every row shares, and those
    that follow the workload."""
    differ = [f for f in varying(specs) if f not in shown and not covered_by_strategy(f)]
    extra = [f for f in differ if any(f in varying(group) for group in _by_workload(specs))]
    own = [heading(f) for f in differ if f not in extra]
    covered = [f for spec in specs for f in fields_of(spec) if covered_by_strategy(f)] \
        if "strategy" in shown else []
    note = same_in_every_row(specs, [*shown, *extra, *differ, *covered])
    if own:
        note += (" " if note else "") + (f"Each workload's own, the same in all its rows: "
                                         f"{', '.join(own)}.")
    return extra, note

"""Which records measured the same thing: one experiment identity for every view (compare,
report, history, publish, predict's calibration).

The identity is the kind of record's (harness/spec/kinds.py): for a training run, the run
fields' declaration (RunSpec's fields in harness/spec/specs.py): the fields of the spec key
(workload, size, precision, batch, ranks and their layout, strategy and its options, comm,
launcher, threads, data, mode, ...) and those kept apart beside it (the suite). Beside it stand
the machine (its --machine name, else its CPU's label) and the version of the code under test
(the commit, else the day). Records that differ in any of these are never pooled; a view that
shows some fields as columns names the others under its table.
"""
from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from harness.machine.names import machine_label
from harness.spec.kinds import (
    APART_FIELDS,
    FOLLOWS,
    NAMES,
    covered_by_strategy,
    fields_of,
    kind_of,
    plain,
    text,
)

# fields_of, text and covered_by_strategy are read by the views from here, beside the rest
__all__ = ["APART_FIELDS", "Experiment", "covered_by_strategy", "distinct_labels",
           "experiment_key", "experiment_of", "fields_of", "identified", "label", "latest",
           "machine_of", "same_in_every_row", "text", "varying", "version_of"]


def _spec(record: Mapping[str, Any]) -> Mapping[str, Any]:
    spec = record.get("spec")
    return spec if isinstance(spec, Mapping) else {}


def experiment_key(record: Mapping[str, Any]) -> str:
    """The experiment a record measured: the spec_key it carries (as written; its kind's key of
    its spec where it has none), then the value of every field kept apart beside the key. The
    same for a full record and its index row."""
    spec = _spec(record)
    stored = record.get("spec_key")
    key = stored if isinstance(stored, str) and stored else kind_of(spec).key(spec)
    apart = [f"{NAMES.get(name, name)}={plain(spec[name])}" for name in APART_FIELDS
             if spec.get(name) is not None]
    return " ".join([key, *apart])


def label(spec: Mapping[str, Any], only: Collection[str] | None = None) -> str:
    """The experiment in a line, as its kind says (harness/spec/kinds.Kind.label)."""
    return kind_of(spec).label(spec, only)


def machine_of(record: Mapping[str, Any]) -> str:
    """The machine as every view names it: --machine's name, else its CPU's label."""
    machine = record.get("machine")
    return machine_label(machine) if isinstance(machine, Mapping) and machine else \
        "unknown machine"


def identified(machine: Mapping[str, Any]) -> bool:
    """Whether a reader can tell which machine it was: named with --machine, or its CPU's
    family and model numbers recorded."""
    name = machine.get("name")
    return (isinstance(name, str) and bool(name.strip())) or (
        machine.get("cpu_family") is not None and machine.get("cpu_model_number") is not None)


def version_of(record: Mapping[str, Any]) -> str:
    """The version of the code a record measured: its commit (12 digits), else its day."""
    code = record.get("code")
    commit = code.get("commit") if isinstance(code, Mapping) else None
    return str(commit)[:12] if commit else str(record.get("created_at") or "")[:10]


@dataclass(frozen=True, order=True)
class Experiment:
    """What a record measured, on which machine, at which version of the code."""

    key: str
    machine: str
    version: str


def experiment_of(record: Mapping[str, Any]) -> Experiment:
    return Experiment(experiment_key(record), machine_of(record), version_of(record))


def varying(specs: Sequence[Mapping[str, Any]]) -> list[str]:
    """The identity fields whose values differ between the specs, in declared order."""
    held = [fields_of(spec) for spec in specs]
    names = list(dict.fromkeys(n for fields in held for n in fields))
    found = []
    for name in names:
        if name in FOLLOWS:
            by_sources: dict[str, set[str]] = {}
            for fields in held:
                sources = plain([fields.get(source) for source in FOLLOWS[name]])
                by_sources.setdefault(sources, set()).add(plain(fields.get(name)))
            if all(len(values) == 1 for values in by_sources.values()):
                continue
        elif len({plain(fields.get(name)) for fields in held}) == 1:
            continue
        found.append(name)
    return found


def same_in_every_row(specs: Sequence[Mapping[str, Any]], shown: Iterable[str]) -> str:
    """The note under a table whose rows leave identity fields out: each one's value, the
    same in every row ("" when every field is shown or none is known)."""
    held = [fields_of(spec) for spec in specs]
    left = set(shown)
    names = [name for name in dict.fromkeys(n for fields in held for n in fields)
             if name not in left and name not in FOLLOWS]
    parts = []
    for name in names:
        values = {plain(fields.get(name)) for fields in held if name in fields}
        if len(values) == 1:
            parts.append(f"{NAMES.get(name, name)} {text(name, held[0].get(name))}")
    return ("Every row: " + ", ".join(parts) + ".") if parts else ""


def distinct_labels(records: Sequence[Mapping[str, Any]],
                    only: Collection[str] | None = None) -> list[str]:
    """A label per record (one experiment each) that tells it from the others: label(), and
    where two experiments read the same (the field that differs is not among `only`), the
    first 8 digits of the key beside it."""
    labels = [label(_spec(record), only) for record in records]
    keys = [experiment_key(record) for record in records]
    seen: dict[str, set[str]] = {}
    for text_, key in zip(labels, keys, strict=True):
        seen.setdefault(text_, set()).add(key)
    return [f"{text_} [{key.split(' ')[0][:8]}]" if len(seen[text_]) > 1 else text_
            for text_, key in zip(labels, keys, strict=True)]


def latest(records: Iterable[Mapping[str, Any]]) -> tuple[list[Any], int]:
    """Of each machine's experiment, the records of its newest version (the commit, or day,
    of its newest record), in their order; and how many older ones were left out."""
    records = list(records)
    newest: dict[tuple[str, str], tuple[str, str]] = {}
    for record in records:
        found = experiment_of(record)
        when = (str(record.get("created_at") or ""), found.version)
        key = (found.key, found.machine)
        if key not in newest or when > newest[key]:
            newest[key] = when
    kept = [r for r in records
            if version_of(r) == newest[(experiment_key(r), machine_of(r))][1]]
    return kept, len(records) - len(kept)

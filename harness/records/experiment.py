"""Which records measured the same thing: one experiment identity for every view (compare,
report, history, publish, predict's calibration).

The identity is the run fields' declaration (RunSpec's fields in harness/core/spec.py): the fields
of the spec key (workload, size, precision, batch, ranks and their layout, strategy and its
options, comm, launcher, threads, data, mode, ...) and those kept apart beside it (the
suite). Beside it stand the machine (its --machine name, else its CPU's label) and the version
of the code under test (the commit, else the day). Records that differ in any of these are
never pooled; a view that shows some fields as columns names the others under its table.
"""
from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from harness.core.fields import apart_fields, experiment_fields, identity, spec_key
from harness.core.spec import DDP_SPEC_OPTIONS, RUN_FIELDS, RunSpec
from harness.machine.names import machine_label

# Spec fields that make two runs different experiments, in declared order.
IDENTITY_FIELDS = experiment_fields(RUN_FIELDS)
# Of those, the ones outside the stored spec_key (older records keep the key they carry).
APART_FIELDS = apart_fields(RUN_FIELDS)
# How a field reads in a label or a note: the option that sets it, where it has one.
_NAMES = {f.spec_name: f.name for f in RUN_FIELDS if f.spec_name is not None}
# Every declared spec field (a name identity() adds beyond them is a strategy's option).
_DECLARED = frozenset(_NAMES)
# What a field holds when a run does not set it (a label leaves such values out).
_DEFAULTS: dict[str, Any] = {**RunSpec(workload="").as_dict(), **DDP_SPEC_OPTIONS}
_TRAINING = (None, "train")
# Identity fields that follow from others a label or table shows (ranks per node from ranks
# and nodes; the global batch from the batch, ranks and strategy): a column of their own only
# where they differ between specs those others do not tell apart.
_FOLLOWS = {"nproc_per_node": ("world_size", "nnodes"),
            "global_batch": ("batch_per_rank", "world_size", "strategy", "strategy_options")}
# The fields every label opens with.
HEAD = ("workload", "size", "backend", "precision", "world_size")


def _plain(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)


def _spec(record: Mapping[str, Any]) -> Mapping[str, Any]:
    spec = record.get("spec")
    return spec if isinstance(spec, Mapping) else {}


def is_training(record: Mapping[str, Any]) -> bool:
    return _spec(record).get("task") in _TRAINING


def experiment_key(record: Mapping[str, Any]) -> str:
    """The experiment a record measured: the spec_key it carries (the hash of the identity
    fields, as written; computed from its spec where it has none), then the value of every
    field kept apart beside the key. The same for a full record and its index row."""
    spec = _spec(record)
    stored = record.get("spec_key")
    if isinstance(stored, str) and stored:
        key = stored
    elif is_training(record):
        key = spec_key(dict(spec), RUN_FIELDS)
    else:
        key = json.dumps(spec, sort_keys=True, default=str)
    apart = [f"{_NAMES.get(name, name)}={_plain(spec[name])}" for name in APART_FIELDS
             if spec.get(name) is not None]
    return " ".join([key, *apart])


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


def fields_of(spec: Mapping[str, Any]) -> dict[str, Any]:
    """The identity fields a spec holds (ddp's legacy options among them), with those kept
    apart; a slim spec (an index row's) holds only some."""
    options = "strategy_options" in spec
    found = {name: value for name, value in identity(dict(spec), RUN_FIELDS).items()
             if name in spec or (name not in _DECLARED and options)}
    found.update({name: spec[name] for name in APART_FIELDS if spec.get(name) is not None})
    return found


def covered_by_strategy(name: str) -> bool:
    """Whether a field is the strategy or one of its options (a strategy column shows them)."""
    return name in ("strategy", "strategy_options") or (
        name not in _DECLARED and name not in APART_FIELDS)


def text(name: str, value: Any) -> str:
    """A field's value as a label or note shows it."""
    if value is None:
        return "synthetic" if name == "data" else "-"
    if isinstance(value, dict):
        return " ".join(f"{k}={_plain(v)}" for k, v in sorted(value.items())) or "-"
    return _plain(value)


def label(spec: Mapping[str, Any], only: Collection[str] | None = None) -> str:
    """The experiment in a line: workload/size, backend, precision and ranks, then each other
    identity field the run set to something other than its default ("lstm/small cpu fp32 x2
    comm=gloo batch_size=20 suite=scaling"); with `only`, of those fields alone (what a
    store's index holds, so that its rows and the records read alike)."""
    fields = {name: value for name, value in fields_of(spec).items()
              if only is None or name in only}
    workload, size, backend, precision, ranks = (text(name, spec.get(name)) for name in HEAD)
    rest = [f"{_NAMES.get(name, name)}={text(name, value)}" for name, value in fields.items()
            if name not in HEAD and name not in _FOLLOWS
            and _plain(value) != _plain(_DEFAULTS.get(name))]
    return " ".join([f"{workload}/{size} {backend} {precision} x{ranks}", *rest])


def varying(specs: Sequence[Mapping[str, Any]]) -> list[str]:
    """The identity fields whose values differ between the specs, in declared order."""
    held = [fields_of(spec) for spec in specs]
    names = list(dict.fromkeys(n for fields in held for n in fields))
    found = []
    for name in names:
        if name in _FOLLOWS:
            by_sources: dict[str, set[str]] = {}
            for fields in held:
                sources = _plain([fields.get(source) for source in _FOLLOWS[name]])
                by_sources.setdefault(sources, set()).add(_plain(fields.get(name)))
            if all(len(values) == 1 for values in by_sources.values()):
                continue
        elif len({_plain(fields.get(name)) for fields in held}) == 1:
            continue
        found.append(name)
    return found


def same_in_every_row(specs: Sequence[Mapping[str, Any]], shown: Iterable[str]) -> str:
    """The note under a table whose rows leave identity fields out: each one's value, the
    same in every row ("" when every field is shown or none is known)."""
    held = [fields_of(spec) for spec in specs]
    left = set(shown)
    names = [name for name in dict.fromkeys(n for fields in held for n in fields)
             if name not in left and name not in _FOLLOWS]
    parts = []
    for name in names:
        values = {_plain(fields.get(name)) for fields in held if name in fields}
        if len(values) == 1:
            parts.append(f"{_NAMES.get(name, name)} {text(name, held[0].get(name))}")
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

"""What kind of record a spec describes, and what follows from the kind: the fields that make two
records the same experiment, the key of the experiment and its label.

Five kinds: a training run (`dtbench run`; its spec carries no `task`, or "train"), a collective
benchmark ("comm", `dtbench comm`), a kernel benchmark ("kernel", `dtbench kernels`), a
prediction ("prediction", `dtbench predict`) and a node check ("doctor", `dtbench doctor`).
Every reader asks `kind_of(spec)` and the kind it gets; none tests the `task` string itself
(tests/test_architecture.py), so a new kind is one declaration here.

Per kind:
- `identity(spec)`: the fields `compare` pairs records by when they carry no key in common;
- `key(spec)`: the experiment a record measured where it carries no `spec_key` (writers store
  this key as `spec_key`, where the kind has one);
- `label(spec)`: the experiment in a line (report, history, a run's progress), and
  `short_label(spec)`: the line `compare` names a spec by beside its workload column.
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from harness.core.text import size_label
from harness.spec.fields import apart_fields, experiment_fields, identity, spec_key, store_columns
from harness.spec.specs import (
    DDP_SPEC_OPTIONS,
    KEY_DEFAULTS,
    NOT_IN_KEY,
    RUN_FIELDS,
    CommSpec,
    RunSpec,
)

# Spec fields that make two runs different experiments, in declared order.
IDENTITY_FIELDS = experiment_fields(RUN_FIELDS)
# Of those, the ones outside the stored spec_key (older records keep the key they carry).
APART_FIELDS = apart_fields(RUN_FIELDS)
# The identity fields every kind's record carries (the store indexes them).
KEY_FIELDS = tuple(name for name in store_columns(RUN_FIELDS) if name not in NOT_IN_KEY)
# How a field reads in a label or a note: the option that sets it, where it has one.
NAMES = {f.spec_name: f.name for f in RUN_FIELDS if f.spec_name is not None}
# Every declared spec field (a name identity() adds beyond them is a strategy's option).
_DECLARED = frozenset(NAMES)
# What a field holds when a run does not set it (a label leaves such values out).
_DEFAULTS: dict[str, Any] = {**RunSpec(workload="").as_dict(), **DDP_SPEC_OPTIONS}
# Identity fields that follow from others a label or table shows (ranks per node from ranks
# and nodes; the global batch from the batch, ranks and strategy): a column of their own only
# where they differ between specs those others do not tell apart.
FOLLOWS = {"nproc_per_node": ("world_size", "nnodes"),
           "global_batch": ("batch_per_rank", "world_size", "strategy", "strategy_options")}
# The fields every label of a run opens with.
HEAD = ("workload", "size", "backend", "precision", "world_size")


def plain(value: Any) -> str:
    """A value as one comparable string: itself if text, else its sorted JSON."""
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)


def _digest(document: Any) -> str:
    return hashlib.sha256(json.dumps(document, sort_keys=True, default=str).encode()).hexdigest()


def text(name: str, value: Any) -> str:
    """A field's value as a label or note shows it."""
    if value is None:
        return "synthetic" if name == "data" else "-"
    if isinstance(value, dict):
        return " ".join(f"{k}={plain(v)}" for k, v in sorted(value.items())) or "-"
    return plain(value)


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


def spec_value(spec: Mapping[str, Any], name: str) -> Any:
    """A spec field, read as its default where an older record lacks it."""
    return spec.get(name, KEY_DEFAULTS.get(name))


def _largest_size(spec: Mapping[str, Any]) -> Any:
    sizes = spec.get("sizes")
    if isinstance(sizes, list):
        numbers = [s for s in sizes if isinstance(s, int) and not isinstance(s, bool)]
        return max(numbers) if numbers else None
    return sizes


def _size_text(size: Any) -> str:
    if isinstance(size, int) and not isinstance(size, bool):
        return size_label(size, compact=True)
    return str(size)


@dataclass(frozen=True)
class Kind:
    """A kind of record. This base is a record described by the run fields it carries (the
    doctor's, and any task a later version may write): its identity is theirs, its key its
    whole spec, its labels a run's."""

    name: str
    task: str | None
    # False: computed from its inputs, so the same inputs give the same numbers (compare takes
    # its values as they are, without a test)
    measured: bool = True

    def identity(self, spec: Mapping[str, Any]) -> dict[str, Any]:
        """The fields `compare` pairs records by: the declared run fields' identity (the spec
        key's rule) and the fields kept apart beside it."""
        apart = {name: spec[name] for name in APART_FIELDS if spec.get(name) is not None}
        return {**identity(dict(spec), RUN_FIELDS), **apart}

    def key(self, spec: Mapping[str, Any]) -> str:
        """The experiment where the record carries no spec_key: every field of its spec."""
        return json.dumps(spec, sort_keys=True, default=str)

    def label(self, spec: Mapping[str, Any], only: Collection[str] | None = None) -> str:
        """The experiment in a line: workload/size, backend, precision and ranks, then each
        other identity field set to something other than its default ("lstm/small cpu fp32
        x2 comm=gloo batch_size=20 suite=scaling"); with `only`, of those fields alone (what a
        store's index holds, so that its rows and the records read alike)."""
        fields = {name: value for name, value in fields_of(spec).items()
                  if only is None or name in only}
        workload, size, backend, precision, ranks = (text(name, spec.get(name)) for name in HEAD)
        rest = [f"{NAMES.get(name, name)}={text(name, value)}" for name, value in fields.items()
                if name not in HEAD and name not in FOLLOWS
                and plain(value) != plain(_DEFAULTS.get(name))]
        return " ".join([f"{workload}/{size} {backend} {precision} x{ranks}", *rest])

    def short_label(self, spec: Mapping[str, Any]) -> str:
        """size/backend/precision/comm/ws/bs (and a mode other than throughput), the way a
        reader tells two runs of one workload apart."""
        parts = [spec.get("size"), spec.get("backend"), spec.get("precision"), spec.get("comm"),
                 f"ws{spec.get('world_size')}", f"bs{spec.get('batch_per_rank')}"]
        if spec.get("mode") not in (None, "throughput"):
            parts.append(spec.get("mode"))
        return "/".join(str(part) for part in parts)


@dataclass(frozen=True)
class Training(Kind):
    """A training run: its key hashes its identity (RunSpec.key(), what its record stores)."""

    def key(self, spec: Mapping[str, Any]) -> str:
        return spec_key(dict(spec), RUN_FIELDS)


@dataclass(frozen=True)
class Collective(Kind):
    """A collective benchmark, one record per operation: busbw is measured at the largest
    message, so the operation and that size identify it beside the common fields. Its record
    carries no spec_key: its whole spec (sizes, iterations, environment) is its key. Its label
    is a run's (its workload names the operation; nodes and launcher stay in it)."""

    def identity(self, spec: Mapping[str, Any]) -> dict[str, Any]:
        return {**{name: spec_value(spec, name) for name in KEY_FIELDS},
                "op": spec.get("op"), "largest_message": _largest_size(spec)}

    def short_label(self, spec: Mapping[str, Any]) -> str:
        """backend/precision/comm/ws/op/largest message ("cpu/fp32/gloo/ws2/allreduce/64M")."""
        parts = [spec.get("backend"), spec.get("precision"), spec.get("comm"),
                 f"ws{spec.get('world_size')}", spec.get("op"), _size_text(_largest_size(spec))]
        return "/".join(str(part) for part in parts)


@dataclass(frozen=True)
class Kernel(Kind):
    """A kernel benchmark: `compare` pairs it by the common fields, its kernel, pass,
    algorithm and threads; its key hashes what names the kernel (not its set, sources or
    timing)."""

    # what makes two kernel measurements the same one (its key's fields)
    names: tuple[str, ...] = ("family", "kernel", "shape", "pass", "algorithm", "precision",
                              "backend", "threads")
    # what compare pairs by beside the fields every kind carries
    paired_by: tuple[str, ...] = ("kernel", "pass", "algorithm", "threads")

    def identity(self, spec: Mapping[str, Any]) -> dict[str, Any]:
        return {**{name: spec_value(spec, name) for name in KEY_FIELDS},
                **{name: spec.get(name) for name in self.paired_by}}

    def key(self, spec: Mapping[str, Any]) -> str:
        return _digest({name: spec.get(name) for name in self.names})[:16]

    def label(self, spec: Mapping[str, Any], only: Collection[str] | None = None) -> str:
        return self.short_label(spec)

    def short_label(self, spec: Mapping[str, Any]) -> str:
        """kernel/pass/algorithm/backend/precision/threads."""
        parts = [spec.get("kernel"), spec.get("pass"), spec.get("algorithm"), spec.get("backend"),
                 spec.get("precision"), f"t{spec.get('threads')}"]
        return "/".join(str(part) for part in parts)


@dataclass(frozen=True)
class Prediction(Kind):
    """A prediction of a training run: identified as the run it predicts; two predictions of
    one configuration share a key whatever calibrated them."""

    # what the calibration decided, outside the key
    calibration: tuple[str, ...] = ("compute", "compute_assumed", "global_batch")

    def key(self, spec: Mapping[str, Any]) -> str:
        return _digest({k: v for k, v in spec.items() if k not in self.calibration})[:16]


TRAINING = Training("training", RunSpec.kind)
COLLECTIVE = Collective("collective", CommSpec.kind)
KERNEL = Kernel("kernel", "kernel")
PREDICTION = Prediction("prediction", "prediction", measured=False)
DOCTOR = Kind("doctor", "doctor")
KINDS = (TRAINING, COLLECTIVE, KERNEL, PREDICTION, DOCTOR)
_BY_TASK = {kind.task: kind for kind in KINDS}


def kind_of(spec: Any) -> Kind:
    """The kind of record a spec (a record's, or an index row) describes: by its `task`,
    training where it has none; a task no kind declares is a kind of its own, described by
    the run fields it carries."""
    task = spec.get("task") if isinstance(spec, Mapping) else None
    if task is None:
        return TRAINING
    found = _BY_TASK.get(task) if isinstance(task, str) else None
    return found if found is not None else Kind(str(task), str(task))


def record_kind(record: Mapping[str, Any]) -> Kind:
    """The kind of a record, from its spec."""
    return kind_of(record.get("spec"))


def spec_of(data: dict[str, Any]) -> RunSpec | CommSpec:
    """The spec object a spec document describes: a collective benchmark's, else a training
    run's (the ranks run these two)."""
    return CommSpec.from_dict(data) if kind_of(data) is COLLECTIVE else RunSpec.from_dict(data)

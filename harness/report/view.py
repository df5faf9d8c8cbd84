"""Records as the report reads them: text made safe, numbers checked, one stable order.

A record is user-controlled input (any JSON that passed `check_record`), so every field is
read defensively here once, and the format modules never touch the raw dictionaries.
"""
from __future__ import annotations

import functools
import math
import statistics
from dataclasses import dataclass, field
from typing import Any

from harness.core.outputs import clean_text
from harness.facts.datasheets import emulated_precision
from harness.machine.load import is_busy, marked_status
from harness.machine.names import machine_label
from harness.spec.fields import report_columns
from harness.spec.kinds import COLLECTIVE, KERNEL, PREDICTION, kind_of
from harness.spec.specs import KEY_DEFAULTS, RUN_FIELDS

# The order records sort in (then created_at, then run_id): experiments side by side.
SORT_FIELDS = ("task", "workload", "op", "size", "backend", "comm", "launcher", "precision",
               "world_size", "nnodes", "batch_per_rank", "mode")
# The spec columns: those the run fields declare, with the comm and kernel fields among them.
SPEC_FIELDS = report_columns(RUN_FIELDS, {"op": 13, "kernel": 15, "pass": 16, "algorithm": 17})
# How a cell marks a precision its CPU has no instruction for.
EMULATED = "(emulated)"


def number(value: Any) -> float | None:
    """A finite float, or None for anything else (bools, strings, NaN, huge integers)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        result = float(value)
    except OverflowError:
        return None
    return result if math.isfinite(result) else None


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


@dataclass(frozen=True)
class MetricView:
    """One metric of a record with its value and, where samples existed, the median and CI."""

    name: str
    unit: str
    value: float | None
    median: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    n: int | None = None
    raw: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def of(cls, entry: dict[str, Any]) -> MetricView:
        stats = _dict(entry.get("stats"))
        ci = stats.get("ci95")
        low, high = (number(ci[0]), number(ci[1])) if isinstance(ci, list) and len(ci) == 2 \
            else (None, None)
        n = number(stats.get("n"))
        return cls(name=clean_text(entry.get("name"), 100), unit=clean_text(entry.get("unit"), 40),
                   value=number(entry.get("value")), median=number(stats.get("median")),
                   ci_low=low, ci_high=high, n=int(n) if n is not None else None, raw=entry)

    def per_size(self) -> list[dict[str, float | None]]:
        """The nccl-tests style rows {bytes, time_s, algbw, busbw} of a collective, by size."""
        rows = self.raw.get("per_size")
        if not isinstance(rows, list):
            return []
        out = []
        for row in rows:
            row = _dict(row)
            size = number(row.get("bytes"))
            if size is None or size <= 0:
                continue
            out.append({"bytes": size} | {key: number(row.get(key))
                                          for key in ("time_s", "algbw", "busbw")})
        return sorted(out, key=lambda item: item["bytes"] or 0.0)


@dataclass
class RecordView:
    """The fields of one record the report shows, each already checked."""

    run_id: str
    created_at: str
    status: str
    error: str
    spec: dict[str, Any]
    machine: dict[str, Any]
    software: dict[str, Any]
    harness: dict[str, Any]
    metrics: dict[str, MetricView]
    code: dict[str, Any] = field(default_factory=dict)
    load: dict[str, Any] = field(default_factory=dict)
    trajectory: dict[str, Any] = field(default_factory=dict)
    # how the run decided its length and what precision it reached (notes.measurement)
    measurement: dict[str, Any] = field(default_factory=dict)
    # the configuration's identity: the runs of one spec_key are repeats of each other
    spec_key: str = ""
    # --profile's traces, relative to the store's root (notes.traces)
    traces: list[str] = field(default_factory=list)

    def as_record(self) -> dict[str, Any]:
        """What the experiment identity (harness/records/experiment.py) reads of a record."""
        return {"spec": self.spec, "spec_key": self.spec_key, "machine": self.machine,
                "code": self.code, "created_at": self.created_at, "run_id": self.run_id}

    @property
    def busy(self) -> bool:
        """Whether the record says its machine was busy while it measured."""
        return is_busy({"load": self.load})

    @property
    def status_text(self) -> str:
        """The status as tables show it: a busy machine's figures are marked."""
        return marked_status({"status": self.status, "load": self.load,
                              "notes": {"measurement": self.measurement}})

    @property
    def machine_label(self) -> str:
        """The machine as a row or legend names it (--machine's name, else its CPU)."""
        return clean_text(machine_label(self.machine), 120) if self.machine else "-"

    @classmethod
    def of(cls, record: dict[str, Any]) -> RecordView:
        metrics: dict[str, MetricView] = {}
        for entry in record.get("metrics") or []:
            if isinstance(entry, dict):
                view = MetricView.of(entry)
                metrics.setdefault(view.name, view)
        return cls(run_id=clean_text(record.get("run_id"), 200),
                   created_at=clean_text(record.get("created_at"), 60),
                   status=clean_text(record.get("status"), 20),
                   error=clean_text(record.get("error")),
                   spec=_dict(record.get("spec")), machine=_dict(record.get("machine")),
                   software=_dict(record.get("software")),
                   harness=_dict(record.get("harness")), metrics=metrics,
                   code=_dict(record.get("code")), load=_dict(record.get("load")),
                   trajectory=_dict(record.get("trajectory")),
                   measurement=_dict(_dict(record.get("notes")).get("measurement")),
                   spec_key=clean_text(record.get("spec_key"), 200),
                   traces=[clean_text(t, 300) for t in
                           _dict(record.get("notes")).get("traces") or []
                           if isinstance(t, str)][:64])

    def text(self, name: str) -> str:
        """A spec field as display text ('-' when absent; records from before strategies
        existed are ddp)."""
        if name == "strategy":
            return self.strategy
        if name == "data" and not self.spec.get("data"):
            return "synthetic"
        return clean_text(self.spec.get(name), 100) or "-"

    @property
    def strategy(self) -> str:
        """The strategy and its options: "ddp", "localsgd period=8"."""
        name = clean_text(self.spec.get("strategy"), 40) or KEY_DEFAULTS["strategy"]
        options = self.spec.get("strategy_options")
        if isinstance(options, dict) and options:
            name += " " + " ".join(f"{clean_text(k, 30)}={clean_text(v, 30)}"
                                   for k, v in sorted(options.items(), key=lambda kv: str(kv[0])))
        return name

    @property
    def emulated(self) -> bool:
        """Whether a CPU run's precision had no instruction on its CPU (bf16 without
        AVX512-BF16 or AMX): converted to fp32 and back, not the CPU's own speed in it."""
        return self.text("backend") == "cpu" and emulated_precision(
            self.machine, self.text("precision"))

    @property
    def precision(self) -> str:
        """The precision as a table cell shows it: "bf16 (emulated)" where the CPU lacks it."""
        return self.text("precision") + (f" {EMULATED}" if self.emulated else "")

    @property
    def workload(self) -> str:
        return self.text("workload")

    @property
    def is_comm(self) -> bool:
        return kind_of(self.spec) is COLLECTIVE

    @property
    def is_kernel(self) -> bool:
        return kind_of(self.spec) is KERNEL

    @property
    def is_prediction(self) -> bool:
        """A `dtbench predict` record: modelled, not measured."""
        return kind_of(self.spec) is PREDICTION

    @property
    def op(self) -> str:
        return clean_text(self.spec.get("op"), 100) or self.workload

    def value(self, name: str) -> float | None:
        found = self.metrics.get(name)
        return found.value if found else None

    def label(self, machine: bool = False) -> str:
        """A short name of the configuration, for plot legends and ticks; with `machine`, the
        machine's label first (plots of records from several machines)."""
        if machine:
            return f"{self.machine_label}: {self.label()}"
        parts = [self.text("backend"), self.text("precision")]
        comm = self.text("comm")
        if comm not in ("-", "none"):
            parts.append(comm)
        mode = self.text("mode")
        suffix = f" {mode}" if mode not in ("-", "throughput", "comm") else ""
        return f"{'/'.join(parts)} ×{self.text('world_size')}{suffix}"


def several_machines(views: list[RecordView]) -> bool:
    """Whether records of more than one machine share a table or plot (a column, a label or a
    colour then names the machine)."""
    return len({view.machine_label for view in views}) > 1


def _typed(value: Any) -> tuple[int, float, str]:
    """A sort key that orders numbers numerically and never compares a number with a string
    (remembered per value: a fleet's 100,000 records repeat a few dozen spec values)."""
    try:
        return _typed_value(value)
    except TypeError:  # a list or mapping where a record should hold a scalar
        return _typed_value.__wrapped__(value)


@functools.lru_cache(maxsize=4096, typed=True)  # True and 1 sort apart
def _typed_value(value: Any) -> tuple[int, float, str]:
    if value is None:
        return (2, 0.0, "")
    as_number = number(value)
    if as_number is not None:
        return (0, as_number, "")
    return (1, 0.0, clean_text(value, None))


def sort_key(view: RecordView) -> tuple[Any, ...]:
    return (*(_typed(view.spec.get(name)) for name in SORT_FIELDS), view.created_at,
            view.run_id)


def views_of(records: list[dict[str, Any]]) -> list[RecordView]:
    """The records as views, in the report's stable order (inputs order does not matter)."""
    return sorted((RecordView.of(record) for record in records), key=sort_key)


def group(views: list[RecordView], by: str) -> dict[str, list[RecordView]]:
    """Views grouped by `workload` or `op`, groups in name order, views in their given order."""
    groups: dict[str, list[RecordView]] = {}
    for view in views:
        groups.setdefault(getattr(view, by), []).append(view)
    return dict(sorted(groups.items()))


def configurations(members: list[RecordView], several: bool
                   ) -> dict[tuple[str, str, str], list[RecordView]]:
    """The views by experiment and version of the code (harness/records/experiment.py), and
    by machine with `several`: what one bar or point of a plot stands for (its repeats), in
    first-seen order."""
    from harness.records.experiment import experiment_key, version_of

    runs: dict[tuple[str, str, str], list[RecordView]] = {}
    for view in members:
        record = view.as_record()
        key = (view.machine_label if several else "", experiment_key(record),
               version_of(record))
        runs.setdefault(key, []).append(view)
    return runs


def _distinct(short: dict[Any, str], specs: dict[Any, dict[str, Any]],
              version: dict[Any, str]) -> dict[Any, str]:
    """Labels that tell entries apart: where short labels coincide, the fields their specs
    differ in beside them (or the version, where none does)."""
    from harness.records.experiment import fields_of, text, varying

    alike: dict[str, list[Any]] = {}
    for key, label in short.items():
        alike.setdefault(label, []).append(key)
    found = dict(short)
    for label, keys in alike.items():
        if len(keys) > 1:
            differ = varying([specs[key] for key in keys])
            for key in keys:
                fields = fields_of(specs[key])
                found[key] = label + " " + (" ".join(
                    f"{name}={text(name, fields.get(name))}" for name in differ)
                    or f"at {version[key]}")
    return found


def _summarised(views: list[RecordView], metric: str) -> tuple[float, float, float]:
    """One run's value and 95% CI; several runs' median and the range of their values."""
    values = sorted(v.value(metric) or 0.0 for v in views)
    middle = float(statistics.median(values))
    if len(views) > 1:
        return middle, values[0], values[-1]
    entry = views[0].metrics[metric]
    return (middle, entry.ci_low if entry.ci_low is not None else middle,
            entry.ci_high if entry.ci_high is not None else middle)


def by_experiment(members: list[RecordView], metric: str
                  ) -> list[tuple[str, dict[str, tuple[RecordView, float, float, float]]]]:
    """One entry per experiment, in first-seen order: a label that tells it from the others
    (not naming the machine) and per machine (first view, median, low, high) of its runs at
    that machine's newest version of the code (one run: its value and 95% CI; several, a
    history of commits or repeats: their median and range, so that a store of thousands of
    records still draws one bar per experiment): what a plot coloured by machine draws side
    by side."""
    runs = configurations(members, several=True)
    newest: dict[tuple[str, str], tuple[str, str]] = {}
    for (machine, key, version), views in runs.items():
        when = (max(view.created_at for view in views), version)
        newest[(machine, key)] = max(newest.get((machine, key), when), when)
    keys = list(dict.fromkeys(key for _, key, _ in runs))
    first = {key: next(views[0] for (_, k, _), views in runs.items() if k == key)
             for key in keys}
    labels = _distinct({key: view.label() for key, view in first.items()},
                       {key: view.spec for key, view in first.items()},
                       {key: key[:8] for key in keys})
    return [(labels[key], {machine: (views[0], *_summarised(views, metric))
                           for (machine, k, version), views in runs.items()
                           if k == key and newest[(machine, k)][1] == version})
            for key in keys]

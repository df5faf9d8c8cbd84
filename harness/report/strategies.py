"""The "Strategies" section: the ways of distributing one workload side by side, speed and
convergence apart (throughput and step time; samples and time to the target), with what
they cost in bytes per step by kind and in memory per rank."""
from __future__ import annotations

from harness.core.text import human_bytes
from harness.facts.metrics import heading_of
from harness.records.experiment import fields_of, text, version_of
from harness.report.columns import heading as column_heading
from harness.report.columns import identity_columns
from harness.report.document import Section, Table
from harness.report.units import format_number
from harness.report.view import RecordView, group
from harness.spec.specs import KEY_DEFAULTS

KINDS = ("gradient", "parameter", "activation", "control")
COLUMNS = ("strategy", column_heading("world_size"), "comm", "mode",
           f"{heading_of('throughput')} (samples/s)", f"{heading_of('step_time')} (ms)",
           heading_of("samples_to_target"), f"{heading_of('time_to_train')} (s)",
           *(heading_of(f"comm_bytes_{kind}") for kind in KINDS),
           f"{heading_of('state_bytes')} (max)", f"{heading_of('peak_memory')}/rank (max)")
NUMERIC = [False, True, False, False, True, True, True, True, True, True, True, True, True,
           True]
# The identity fields the columns above show (the strategy column holds its options).
SHOWN = ("workload", "strategy", "world_size", "comm", "mode")


def _value(view: RecordView, name: str, scale: float = 1.0) -> str:
    value = view.value(name)
    return format_number(value * scale) if value is not None else "-"


def _bytes(view: RecordView, name: str) -> str:
    value = view.value(name)
    return human_bytes(value) if value is not None else "-"


def strategy_rows(views: list[RecordView], extra: list[str] | None = None,
                  machines: bool = False, versions: bool = False) -> list[list[str]]:
    """A row per successful run: its machine (with `machines`) and commit (with `versions`),
    the `extra` identity fields that tell it from the others, its strategy, then what it
    measured."""
    rows = []
    for view in views:
        if view.status != "success":
            continue
        fields = fields_of(view.spec)
        rows.append([*([view.machine_label] if machines else []),
                     *([version_of(view.as_record())] if versions else []),
                     *(text(name, fields.get(name)) for name in extra or []),
                     view.strategy, view.text("world_size"), view.text("comm"),
                     view.text("mode"), _value(view, "throughput"),
                     _value(view, "step_time", 1e3), _value(view, "samples_to_target"),
                     _value(view, "time_to_train"),
                     *(_bytes(view, f"comm_bytes_{kind}") for kind in KINDS),
                     _bytes(view, "state_bytes"), _bytes(view, "peak_memory")])
    return rows


def strategies_section(training: list[RecordView]) -> Section | None:
    """One table per workload that ran under two or more strategies (None if none did)."""
    tables = []
    for workload, views in group(training, "workload").items():
        if len({view.spec.get("strategy", KEY_DEFAULTS["strategy"]) for view in views}) < 2:
            continue
        done = [view for view in views if view.status == "success"]
        extra, every_row = identity_columns([view.spec for view in done], SHOWN)
        machines = len({view.machine_label for view in done}) > 1
        versions = len({version_of(view.as_record()) for view in done}) > 1
        ordered = sorted(views, key=lambda v: (v.machine_label, v.strategy, v.text("mode"),
                                               v.text("world_size"), v.run_id))
        rows = strategy_rows(ordered, extra, machines, versions)
        if rows:
            lead = ["machine"] * machines + ["commit"] * versions
            tables.append(Table(title=workload,
                                columns=[*lead, *(column_heading(f) for f in extra), *COLUMNS],
                                rows=rows, numeric=[False] * (len(lead) + len(extra)) + NUMERIC,
                                footnotes=[every_row] if every_row else [],
                                row_runs=[v.run_id for v in ordered if v.status == "success"]))
    if not tables:
        return None
    return Section("Strategies", tables, intro=(
        "Speed and convergence apart: samples/s and step time measure the hardware efficiency "
        "of a strategy, samples to target its statistical efficiency (time to target joins "
        "both). Bytes are what one rank sent per step, counted where sent (mean over ranks); "
        "state is the parameters, gradients and optimizer state a rank holds."))

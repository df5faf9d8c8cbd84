"""Schema-v1 result records: one JSON document per run, with raw samples kept."""
from __future__ import annotations

import datetime as dt
import json
import math
import os
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.core.errors import SchemaError
from harness.core.files import RefusedFile, read_regular
from harness.core.stats import Stats
from harness.core.text import one_line
from harness.facts.metrics import metric_info
from harness.records.schema import first_violation, shown, storable

SCHEMA_VERSION = 1
STATUSES = ("success", "skipped", "failed")
MAX_RECORD_BYTES = 64 * 2**20


@dataclass
class Metric:
    """One measured quantity; `samples` are raw per-step values when the metric has them."""

    name: str
    unit: str
    value: float | None
    higher_is_better: bool
    samples: list[float] | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def stats(self) -> Stats | None:
        return Stats.of(self.samples) if self.samples else None

    def as_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "name": self.name,
            "unit": self.unit,
            "value": _finite_or_none(self.value),
            "higher_is_better": self.higher_is_better,
        }
        stats = self.stats()
        if self.samples:
            data["samples"] = [float(s) for s in self.samples]
        if stats is not None:
            data["stats"] = stats.as_dict()
            warnings = stats.warnings()
            if warnings:
                data["warnings"] = warnings
        data.update(self.extra)
        return data


def measured(name: str, value: float | None, *, samples: list[float] | None = None,
             extra: dict[str, Any] | None = None, unit: str | None = None,
             higher_is_better: bool | None = None) -> Metric:
    """A metric with the unit and direction the catalogue (harness/facts/metrics.py) declares
    for `name`; `unit` and `higher_is_better` only where the catalogue leaves them to each
    record (a quality target's). An uncatalogued name raises: a new metric is declared there
    first, so that compare, report and the docs know it."""
    info = metric_info(name)
    if info is None:
        raise KeyError(f"metric {name!r} is not in the catalogue (harness/facts/metrics.py)")
    unit = info.unit if info.unit is not None else unit
    direction = info.higher_is_better if info.better is not None else higher_is_better
    if unit is None or direction is None:
        raise ValueError(f"metric {name!r}: its records state the unit and direction; "
                         "pass them")
    return Metric(name, unit, value, higher_is_better=direction, samples=samples,
                  extra=extra if extra is not None else {})


def finite_json(value: Any) -> Any:
    """A copy of a JSON-bound value with every NaN or infinity replaced by None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_json(v) for v in value]
    return value


def _finite_or_none(value: float | None) -> float | None:
    if value is None:
        return None
    try:
        value = float(value)
    except OverflowError:  # an integer past the float range
        return None
    return value if math.isfinite(value) else None


def utc_now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def new_run_id(workload: str, created: dt.datetime) -> str:
    """Sortable and unique: UTC time, workload, random suffix."""
    return f"{created.strftime('%Y%m%dT%H%M%S')}Z-{workload}-{uuid.uuid4().hex[:8]}"



def build_record(*, run_id: str, created: dt.datetime, status: str, error: str | None,
                 harness: dict[str, Any], machine: dict[str, Any], software: dict[str, Any],
                 spec: dict[str, Any], metrics: list[Metric], events: list[dict[str, Any]],
                 extra: dict[str, Any] | None = None) -> dict[str, Any]:
    if status not in STATUSES:
        raise ValueError(f"status must be one of {STATUSES}, got {status!r}")
    record = {
        "schema_version": SCHEMA_VERSION,
        "run_id": run_id,
        "created_at": created.isoformat().replace("+00:00", "Z"),
        "status": status,
        "error": one_line(error) if error else None,
        "harness": harness,
        "machine": machine,
        "software": software,
        "spec": spec,
        "metrics": [m.as_dict() for m in metrics],
        "events": events,
    }
    if extra:
        record.update(extra)
    return storable(record)


def metric(record: dict[str, Any], name: str) -> dict[str, Any] | None:
    for entry in record.get("metrics", []):
        if entry.get("name") == name:
            return entry
    return None


def check_record(record: Any, source: str = "record") -> dict[str, Any]:
    """Validate a loaded document against the shipped JSON Schema; raise SchemaError naming
    `source` and the first violation. A record that passes can be tabulated and compared
    without further type checks (record.schema.json says what is guaranteed)."""
    if not isinstance(record, dict):
        raise SchemaError(f"{source}: not a dtbench record (expected a JSON object)")
    version = record.get("schema_version")
    if version is None:
        raise SchemaError(f"{source}: not a dtbench record (no schema_version)")
    if isinstance(version, bool) or version != SCHEMA_VERSION:
        raise SchemaError(
            f"{source}: record schema_version {shown(version)} is not supported by this "
            f"dtbench (reads version {SCHEMA_VERSION}); upgrade dtbench to read newer records")
    problem = first_violation(record)
    if problem is not None:
        raise SchemaError(f"{source}: {problem}")
    return record


def write_violation(record: Any) -> str | None:
    """What keeps a record out of a store: a schema violation (among them a control character
    such as NUL in any text, which PostgreSQL's text and jsonb hold none of: it would be
    stripped from a column, or block the table's later reads; a directory store refuses it
    too, so both take the same records), or more than the MAX_RECORD_BYTES every reader
    refuses."""
    problem = first_violation(record)
    if problem is not None:
        return problem
    try:
        text = json.dumps(record)
    except RecursionError:
        return "nested too deep for a store"
    if len(text) > MAX_RECORD_BYTES:
        return f"over the {MAX_RECORD_BYTES}-byte limit every reader of a store keeps to"
    return None


def validate_record(record: dict[str, Any]) -> None:
    """Raise ValueError unless `record` can be stored: dtbench writing an invalid record is a
    bug, stopped before the file exists rather than found by the next reader."""
    problem = write_violation(record)
    if problem is not None:
        raise ValueError(f"dtbench built an invalid record {record.get('run_id')!r}: {problem}")


def load_record(path: str | Path, within: str | Path | None = None
                ) -> dict[str, Any]:
    """The validated record in a file; SchemaError naming the file otherwise. Only a regular
    file of at most MAX_RECORD_BYTES is read (harness/core/files.read_regular), and with
    `within` only one whose real path lies under that folder."""
    return load_record_stamped(path, within)[0]


def load_record_stamped(path: str | Path, within: str | Path | None = None
                        ) -> tuple[dict[str, Any], os.stat_result]:
    """load_record, with the file's status as read (its stamp in an index)."""
    path = Path(path)
    try:
        data, status = read_regular(path, MAX_RECORD_BYTES, within)
        record = json.loads(data.decode("utf-8"))
    except RefusedFile as exc:  # a FIFO, a device, a link out of the store, too large
        raise SchemaError(str(exc)) from None
    except (OSError, ValueError, RecursionError) as exc:
        # ValueError: bad UTF-8, bad JSON, or an integer past Python's 4300-digit limit;
        # RecursionError: arrays nested thousands deep.
        raise SchemaError(f"{path}: unreadable record ({one_line(str(exc), 120)})") from None
    return check_record(record, str(path)), status

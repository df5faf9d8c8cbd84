"""Schema-v1 result records: one JSON document per run, with raw samples kept."""
from __future__ import annotations

import datetime as dt
import json
import math
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.errors import SchemaError
from harness.stats import Stats

SCHEMA_VERSION = 1
STATUSES = ("success", "skipped", "failed")
REQUIRED_KEYS = ("schema_version", "run_id", "created_at", "status", "error", "harness",
                 "machine", "software", "spec", "metrics", "events")
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
    value = float(value)
    return value if math.isfinite(value) else None


def utc_now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def new_run_id(workload: str, created: dt.datetime) -> str:
    """Sortable and unique: UTC time, workload, random suffix."""
    return f"{created.strftime('%Y%m%dT%H%M%S')}Z-{workload}-{uuid.uuid4().hex[:8]}"


def one_line(text: str, limit: int = 500) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


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
    return finite_json(record)


def metric(record: dict[str, Any], name: str) -> dict[str, Any] | None:
    for entry in record.get("metrics", []):
        if entry.get("name") == name:
            return entry
    return None


def check_record(record: Any, source: str = "record") -> dict[str, Any]:
    """Validate a loaded document; raise SchemaError saying what is wrong and what to do."""
    if not isinstance(record, dict):
        raise SchemaError(f"{source}: not a dtbench record (expected a JSON object)")
    version = record.get("schema_version")
    if version is None:
        raise SchemaError(f"{source}: not a dtbench record (no schema_version)")
    if version != SCHEMA_VERSION:
        raise SchemaError(
            f"{source}: record schema_version {version!r} is not supported by this dtbench "
            f"(reads version {SCHEMA_VERSION}); upgrade dtbench to read newer records")
    missing = [key for key in REQUIRED_KEYS if key not in record]
    if missing:
        raise SchemaError(f"{source}: record lacks {', '.join(missing)}")
    if record["status"] not in STATUSES:
        raise SchemaError(f"{source}: unknown status {record['status']!r}")
    if not isinstance(record["metrics"], list) or not isinstance(record["spec"], dict):
        raise SchemaError(f"{source}: metrics must be a list and spec an object")
    return record


def load_record(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    try:
        size = path.stat().st_size
        if size > MAX_RECORD_BYTES:
            raise SchemaError(f"{path}: {size} bytes exceeds the {MAX_RECORD_BYTES}-byte limit")
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SchemaError(f"{path}: unreadable record ({one_line(str(exc), 120)})") from None
    return check_record(record, str(path))

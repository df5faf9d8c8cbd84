"""Schema-v1 result records: one JSON document per run, with raw samples kept."""
from __future__ import annotations

import datetime as dt
import json
import math
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.core.errors import SchemaError
from harness.core.stats import Stats
from harness.core.text import one_line

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


IDENTITY_KEYS = ("workload", "size", "backend", "comm", "launcher", "precision", "world_size",
                 "nnodes", "nproc_per_node", "batch_per_rank", "global_batch", "steps", "warmup",
                 "mode", "seed", "suite")


def _is_text(value: Any) -> bool:
    """A str that can be written out as UTF-8 (JSON escapes can smuggle in lone surrogates)."""
    if not isinstance(value, str):
        return False
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _is_finite(value: Any) -> bool:
    """A JSON number (not a bool) that is a finite float: arithmetic and formatting are safe."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def _shown(value: Any) -> str:
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        return "a huge integer"
    return one_line(repr(value), 60)


def _metric_problem(entry: Any) -> str | None:
    """What makes one metrics entry unusable for tables and comparisons, or None."""
    if not isinstance(entry, dict):
        return f"is {_shown(entry)}, not an object"
    if not _is_text(entry.get("name")):
        return f"name must be a string, got {_shown(entry.get('name'))}"
    label = f"({entry['name']!r})"
    if "value" not in entry:
        return f"{label} has no value"
    if entry["value"] is not None and not _is_finite(entry["value"]):
        return f"{label} value must be a finite number or null, got {_shown(entry['value'])}"
    if "unit" in entry and not _is_text(entry["unit"]):
        return f"{label} unit must be a string, got {_shown(entry['unit'])}"
    if "higher_is_better" in entry and not isinstance(entry["higher_is_better"], bool):
        return f"{label} higher_is_better must be true or false"
    samples = entry.get("samples", [])
    if not isinstance(samples, list) or not all(_is_finite(s) for s in samples):
        return f"{label} samples must be a list of finite numbers"
    stats = entry.get("stats", {})
    if not isinstance(stats, dict):
        return f"{label} stats must be an object"
    for key in Stats.fields:
        if key not in stats:
            continue
        value = stats[key]
        if key == "ci95":
            if not (isinstance(value, list) and len(value) == 2
                    and all(_is_finite(v) for v in value)):
                return f"{label} stats.ci95 must be two finite numbers"
        elif not _is_finite(value):
            return f"{label} stats.{key} must be a finite number, got {_shown(value)}"
    warnings = entry.get("warnings", [])
    if not isinstance(warnings, list) or not all(_is_text(w) for w in warnings):
        return f"{label} warnings must be a list of strings"
    return None


def _record_problem(record: dict[str, Any]) -> str | None:
    """The first field, past the required keys, that reports and comparisons cannot use."""
    if not _is_text(record["status"]) or record["status"] not in STATUSES:
        return f"unknown status {_shown(record['status'])}"
    if not isinstance(record["metrics"], list) or not isinstance(record["spec"], dict):
        return "metrics must be a list and spec an object"
    for key in ("harness", "machine", "software"):
        if not isinstance(record[key], dict):
            return f"{key} must be an object, got {_shown(record[key])}"
    for key in ("run_id", "created_at"):
        if not _is_text(record[key]):
            return f"{key} must be a string, got {_shown(record[key])}"
    if record["error"] is not None and not _is_text(record["error"]):
        return f"error must be null or a string, got {_shown(record['error'])}"
    if not isinstance(record["events"], list):
        return f"events must be a list, got {_shown(record['events'])}"
    spec = record["spec"]
    if not _is_text(spec.get("workload")):
        return f"spec.workload must be a string, got {_shown(spec.get('workload'))}"
    for key in IDENTITY_KEYS:
        value = spec.get(key)
        if not (value is None or _is_text(value) or isinstance(value, (int, float))):
            return f"spec.{key} must be a string, a number or null, got {_shown(value)}"
    for index, entry in enumerate(record["metrics"]):
        problem = _metric_problem(entry)
        if problem is not None:
            return f"metrics[{index}] {problem}"
    return None


def check_record(record: Any, source: str = "record") -> dict[str, Any]:
    """Validate a loaded document; raise SchemaError saying what is wrong and what to do.

    A record that passes can be tabulated and compared without further type checks: see
    `_record_problem` and `_metric_problem` for what is guaranteed.
    """
    if not isinstance(record, dict):
        raise SchemaError(f"{source}: not a dtbench record (expected a JSON object)")
    version = record.get("schema_version")
    if version is None:
        raise SchemaError(f"{source}: not a dtbench record (no schema_version)")
    if isinstance(version, bool) or version != SCHEMA_VERSION:
        raise SchemaError(
            f"{source}: record schema_version {_shown(version)} is not supported by this "
            f"dtbench (reads version {SCHEMA_VERSION}); upgrade dtbench to read newer records")
    missing = [key for key in REQUIRED_KEYS if key not in record]
    if missing:
        raise SchemaError(f"{source}: record lacks {', '.join(missing)}")
    problem = _record_problem(record)
    if problem is not None:
        raise SchemaError(f"{source}: {problem}")
    return record


def load_record(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    try:
        size = path.stat().st_size
        if size > MAX_RECORD_BYTES:
            raise SchemaError(f"{path}: {size} bytes exceeds the {MAX_RECORD_BYTES}-byte limit")
        record = json.loads(path.read_text(encoding="utf-8"))
    except SchemaError:
        raise
    except (OSError, ValueError, RecursionError) as exc:
        # ValueError: bad UTF-8, bad JSON, or an integer past Python's 4300-digit limit;
        # RecursionError: arrays nested thousands deep.
        raise SchemaError(f"{path}: unreadable record ({one_line(str(exc), 120)})") from None
    return check_record(record, str(path))

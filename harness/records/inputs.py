"""Inputs of `report` and `compare`: record files, `--json` lists, stores, pytest-benchmark JSON.

A damaged or foreign file is skipped with a warning that names it; only a path that does not
exist at all is a usage error. Loading never executes anything from the files (JSON only).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.core.errors import SchemaError, UsageError
from harness.core.text import one_line
from harness.records.record import MAX_RECORD_BYTES, check_record
from harness.records.store import Store
from harness.records.storeurl import is_store_url


@dataclass
class Loaded:
    """Records gathered from the inputs, in input order, and one warning per skipped file."""

    records: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)


def _read_json(path: Path) -> Any:
    size = path.stat().st_size
    if size > MAX_RECORD_BYTES:
        raise SchemaError(f"{path}: {size} bytes exceeds the {MAX_RECORD_BYTES}-byte limit")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, RecursionError) as exc:  # also integers past the 4300-digit limit
        raise SchemaError(f"{path}: not valid JSON ({one_line(str(exc), 120)})") from None


def records_from_document(document: Any, source: str) -> list[dict[str, Any]]:
    """The records in one parsed JSON document, or SchemaError saying why there are none."""
    from harness.records.pytest_bench import is_pytest_benchmark, records_from_pytest_benchmark

    if isinstance(document, list):
        return [check_record(item, f"{source}[{i}]") for i, item in enumerate(document)]
    if is_pytest_benchmark(document):
        return records_from_pytest_benchmark(document, source)
    return [check_record(document, source)]


def load_file(path: Path, loaded: Loaded) -> None:
    try:
        document = _read_json(path)
        loaded.records.extend(records_from_document(document, str(path)))
        loaded.sources.append(str(path))
    except SchemaError as exc:
        loaded.warnings.append(f"skipped {one_line(str(exc), 300)}")
    except OSError as exc:
        loaded.warnings.append(f"skipped {path}: unreadable ({exc.strerror or exc})")


def load_server(url: str, loaded: Loaded) -> None:
    """The records of a `postgresql://` store; a server that cannot be reached is an error
    (the message shows the URL without its password)."""
    from harness.records.pgstore import StoreError, StoreUnreachable
    from harness.records.stores import open_store

    store = open_store(url)
    try:
        loaded.records.extend(store.records(loaded.warnings))
    except (StoreUnreachable, StoreError) as exc:
        raise UsageError(str(exc)) from None
    loaded.sources.append(store.shown)


def load_inputs(paths: list[str]) -> Loaded:
    """Every record under the given files, store directories and store URLs, each run once
    (a `--json` list inside a store repeats its records). A store's index is not needed: the
    record files are the truth."""
    loaded = Loaded()
    for name in paths:
        path = Path(name)
        if is_store_url(name):
            load_server(name, loaded)
        elif path.is_dir():
            store = Store(path)
            for record_path in store.record_paths():
                load_file(record_path, loaded)
        elif path.is_file():
            load_file(path, loaded)
        elif path.exists():
            raise UsageError(f"{name}: not a file or directory")
        else:
            raise UsageError(f"{name}: no such file or directory")
    seen: set[str] = set()
    unique = []
    for record in loaded.records:
        if record["run_id"] not in seen:
            seen.add(record["run_id"])
            unique.append(record)
    loaded.records = unique
    return loaded

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
from harness.core.files import TMP_PREFIX, RefusedFile, read_regular
from harness.core.text import one_line
from harness.records.record import MAX_RECORD_BYTES, check_record
from harness.store.contract import RecordReader
from harness.store.directory import Store
from harness.store.url import is_store_url, redact


@dataclass
class Loaded:
    """Records gathered from the inputs, in input order, and one warning per skipped file."""

    records: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)


def _read_json(path: Path, within: Path | None = None) -> Any:
    """A regular file's JSON (at most MAX_RECORD_BYTES; under `within`, where given, every
    link followed): a FIFO, a device or a link out of a store is never opened."""
    try:
        data, _ = read_regular(path, MAX_RECORD_BYTES, within)
    except RefusedFile as exc:
        raise SchemaError(str(exc)) from None
    try:
        return json.loads(data.decode("utf-8"))
    except (ValueError, RecursionError) as exc:  # also integers past the 4300-digit limit
        raise SchemaError(f"{path}: not valid JSON ({one_line(str(exc), 120)})") from None


def records_from_document(document: Any, source: str) -> list[dict[str, Any]]:
    """The records in one parsed JSON document, or SchemaError saying why there are none."""
    from harness.store.pytest_benchmark import is_pytest_benchmark, records_from_pytest_benchmark

    if isinstance(document, list):
        return [check_record(item, f"{source}[{i}]") for i, item in enumerate(document)]
    if is_pytest_benchmark(document):
        return records_from_pytest_benchmark(document, source)
    return [check_record(document, source)]


def load_file(path: Path, loaded: Loaded, within: Path | None = None) -> None:
    try:
        document = _read_json(path, within)
        loaded.records.extend(records_from_document(document, str(path)))
        loaded.sources.append(str(path))
    except SchemaError as exc:
        loaded.warnings.append(f"skipped {one_line(str(exc), 300)}")
    except OSError as exc:
        loaded.warnings.append(f"skipped {path}: unreadable ({exc.strerror or exc})")


def load_server(url: str, loaded: Loaded) -> None:
    """The records of a `postgresql://` store; a server that cannot be reached is an error
    (the message shows the URL without its password)."""
    from harness.store.postgres import StoreError, StoreUnreachable
    from harness.store.targets import open_store

    store = open_store(url)
    try:
        loaded.records.extend(store.records(loaded.warnings))
    except (StoreUnreachable, StoreError) as exc:
        raise UsageError(str(exc)) from None
    loaded.sources.append(redact(url))


def machine_folder(path: Path) -> list[Path]:
    """The record files of one machine's folder of a store (<commit or day>/*.json, as
    `results/amd-zen-4-2-cores` holds them), or [] where `path` is not one: a store keeps its
    records at <machine>/<commit>/ below its top, a commit folder directly."""
    if any(path.glob("*.json")) or any(path.glob("*/*/*.json")):
        return []
    return sorted(p for p in path.glob("*/*.json") if not p.name.startswith(TMP_PREFIX))


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
            for record_path in machine_folder(path) or Store(path).record_paths():
                load_file(record_path, loaded, path)
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


@dataclass
class Catalog:
    """Every record of the inputs as one row of index columns (stores answer from their index,
    so no record is parsed), and `load` for the full records of chosen rows. A row of a file
    input carries its record under "_record"; a row of a store names the store under "_store"."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)

    def load(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The full records of `rows`, in their order (rows whose file or server row has gone
        since are skipped with a warning)."""
        by_store: dict[int, tuple[RecordReader, list[dict[str, Any]]]] = {}
        for row in rows:
            if "_store" in row:
                by_store.setdefault(id(row["_store"]), (row["_store"], []))[1].append(row)
        loaded: dict[str, dict[str, Any]] = {}
        for store, members in by_store.values():
            for record in store.load_rows(members, self.warnings):
                loaded[record["run_id"]] = record
        return [row["_record"] if "_record" in row else loaded[row["run_id"]]
                for row in rows if "_record" in row or row["run_id"] in loaded]

    def summaries(self, rows: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
        """Slim records of the rows (see summary.summary_record)."""
        from harness.records.summary import summary_record
        from harness.store.directory import SPEC_COLUMNS

        return [summary_record(row, SPEC_COLUMNS) for row in
                (self.rows if rows is None else rows)]


def _row_of_record(record: dict[str, Any]) -> dict[str, Any]:
    from harness.store.directory import index_cells

    return {**index_cells(record, None), "_record": record}


def _store_rows(store: RecordReader, shown: str, catalog: Catalog) -> list[dict[str, Any]] | None:
    """A store's rows from its index, or None where the index cannot serve (a directory
    that takes no index file: its records are then read one by one)."""
    import sqlite3

    from harness.store.postgres import StoreError, StoreUnreachable

    try:
        rows = store.summary_rows(catalog.warnings)
    except (StoreUnreachable, StoreError) as exc:
        raise UsageError(str(exc)) from None
    except (OSError, sqlite3.Error):
        return None
    for row in rows:
        row["_store"] = store
    catalog.sources.append(shown)
    return rows


def catalog_inputs(paths: list[str]) -> Catalog:
    """The catalog of record files, `--json` lists, directory stores and store URLs, each run
    once (the first input that holds it wins), as load_inputs reads them."""
    from harness.store.targets import open_store

    catalog = Catalog()
    found: list[dict[str, Any]] = []
    for name in paths:
        path = Path(name)
        if is_store_url(name):
            server = open_store(name)
            found += _store_rows(server, redact(name), catalog) or []
            continue
        if path.is_dir() and not machine_folder(path):
            store = Store(path)
            rows = _store_rows(store, name, catalog)
            if rows is not None:
                found += rows
                indexed = {row["path"] for row in rows}
                # what the index leaves out: damaged files and --json lists (warned, or read)
                rest = [p for p in store.record_paths() if store._relative(p) not in indexed]
                loose = Loaded()
                for record_path in rest:
                    load_file(record_path, loose, path)
                catalog.warnings += loose.warnings
                found += [_row_of_record(record) for record in loose.records]
                continue
        loaded = load_inputs([name])
        catalog.warnings += loaded.warnings
        catalog.sources += loaded.sources
        found += [_row_of_record(record) for record in loaded.records]
    seen: set[str] = set()
    for row in found:
        if row["run_id"] not in seen:
            seen.add(row["run_id"])
            catalog.rows.append(row)
    return catalog

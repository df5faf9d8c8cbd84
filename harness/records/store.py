"""A results directory: one JSON file per record, never overwritten, under a folder per machine
and measured commit (or date), and an SQLite index."""
from __future__ import annotations

import json
import os
import re
import sqlite3
import tempfile
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from harness.core.errors import SchemaError, UsageError
from harness.core.fields import baseline_columns, store_columns
from harness.core.files import TMP_PREFIX, write_atomic
from harness.core.interrupts import stop_signals_deferred
from harness.core.spec import RUN_FIELDS
from harness.core.text import one_line
from harness.records.machine import machine_label
from harness.records.record import load_record, validate_record
from harness.records.summary import SUMMARY_COLUMNS, summary_cells

INDEX_NAME = "index.sqlite"
BUSY_TIMEOUT_S = 60
# The spec's columns are those its fields declare; an index with other columns is rebuilt.
SPEC_COLUMNS = store_columns(RUN_FIELDS)
# The file's size and modification time when indexed: a file that still has them was validated
# then, and is only parsed when a command loads it.
STAMP_COLUMNS = ("file_bytes", "file_mtime_ns")
COLUMNS = ("run_id", "path", "created_at", "status", *SPEC_COLUMNS, "spec_key",
           *SUMMARY_COLUMNS, *STAMP_COLUMNS)
# What a one-rank scaling baseline shares with the run it is the baseline of.
BASELINE_COLUMNS = baseline_columns(RUN_FIELDS)


_CREATE = f"CREATE TABLE {{if_new}}runs ({', '.join(COLUMNS)}, PRIMARY KEY (path))"
_INSERT = f"INSERT OR REPLACE INTO runs VALUES ({', '.join('?' for _ in COLUMNS)})"


def _columns(connection: sqlite3.Connection) -> tuple[str, ...]:
    return tuple(row[1] for row in connection.execute("PRAGMA table_info(runs)"))


def _enable_wal(connection: sqlite3.Connection) -> None:
    """Switch the index to WAL, so readers never block the writer. Writers that create a store
    at the same moment can get `database is locked` here without SQLite waiting out the busy
    timeout, so this retries for as long as the timeout."""
    deadline = time.monotonic() + BUSY_TIMEOUT_S
    delay = 0.005
    while True:
        try:
            connection.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
        time.sleep(delay)
        delay = min(2 * delay, 0.25)


def index_cells(record: dict[str, Any], path: str | None) -> dict[str, Any]:
    """A record's index cells by column, but the file stamp: what the directory store, the
    PostgreSQL store and a catalog of loose files all keep of it."""
    spec = record.get("spec") if isinstance(record.get("spec"), dict) else {}
    return {"run_id": record["run_id"], "path": path, "created_at": record.get("created_at"),
            "status": record.get("status"), **{name: spec.get(name) for name in SPEC_COLUMNS},
            "spec_key": record.get("spec_key"), **summary_cells(record)}


def _cell(value: Any) -> Any:
    """A value SQLite can bind: a record file may hold a list, a 2**70 or a lone surrogate
    (from a JSON escape, or an undecodable file name) where the index expects a scalar."""
    if isinstance(value, str):
        return value.encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(value, int) and not -2**63 <= value < 2**63:
        return None
    if value is None or isinstance(value, (int, float)):
        return value
    return None


def _slug(text: str) -> str:
    """A folder name a shell and every file system take: lowercase letters, digits, . _ -."""
    slug = re.sub(r"[^a-z0-9._]+", "-", text.lower()).strip("-.")
    return slug[:80] or "unknown"


def record_folder(record: dict[str, Any]) -> str:
    """<machine>/<commit or date> for a record (see Store.folder_for)."""
    machine = record.get("machine")
    label = machine_label(machine) if isinstance(machine, dict) and machine else "unknown machine"
    code = record.get("code") if isinstance(record.get("code"), dict) else {}
    commit = code.get("commit") if isinstance(code.get("commit"), str) else None
    version = commit[:12] if commit else str(record.get("created_at", ""))[:10]
    return f"{_slug(label)}/{_slug(version)}"


def _stamp(path: Path) -> tuple[int, int] | None:
    try:
        stat = path.stat()
    except OSError:
        return None
    return stat.st_size, stat.st_mtime_ns


def choose_baseline(candidates: Iterable[dict[str, Any]], spec: Any) -> dict[str, Any] | None:
    """Of a store's successful one-rank records of the experiment, newest first: the first with
    spec's per-rank batch (weak scaling), else the first whose batch is spec's global batch
    (strong); stops at the first weak match, so later candidates are never loaded."""
    strong = None
    for record in candidates:
        batch = record["spec"].get("batch_per_rank")
        if batch == spec.batch_per_rank:
            return record
        if strong is None and batch == spec.global_batch:
            strong = record
    return strong


def record_text(record: dict[str, Any]) -> str:
    """A record as every store keeps it: JSON, one key a line, ending in a newline."""
    return json.dumps(record, indent=1, allow_nan=False) + "\n"


class Store:
    """Record files named so they sort by time, plus an index that can always be rebuilt."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    @property
    def index_path(self) -> Path:
        return self.root / INDEX_NAME

    def ensure_writable(self) -> None:
        """Create the directory and prove it takes files, or raise UsageError before any run."""
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            handle, probe = tempfile.mkstemp(prefix=TMP_PREFIX, dir=self.root)
            os.close(handle)
            os.unlink(probe)
        except OSError as exc:
            raise UsageError(f"--out {self.root}: not writable ({exc.strerror or exc})") from None

    def _connect(self) -> sqlite3.Connection:
        connection = sqlite3.connect(self.index_path, timeout=BUSY_TIMEOUT_S)
        try:
            connection.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_S * 1000}")
            _enable_wal(connection)
            connection.execute(_CREATE.format(if_new="IF NOT EXISTS "))
            if _columns(connection) != COLUMNS:
                self._recreate(connection)
        except BaseException:
            connection.close()
            raise
        return connection

    def _recreate(self, connection: sqlite3.Connection) -> None:
        """Rebuild an index written with other columns (an older version) from the files."""
        rows = self._rows(self.record_paths())
        connection.execute("BEGIN IMMEDIATE")
        try:
            if _columns(connection) != COLUMNS:
                connection.execute("DROP TABLE runs")
                connection.execute(_CREATE.format(if_new=""))
                connection.executemany(_INSERT, rows)
            connection.commit()
        except BaseException:
            connection.rollback()
            raise

    def _row(self, record: dict[str, Any], path: Path) -> tuple[Any, ...]:
        cells = index_cells(record, self._relative(path))
        stat = path.stat()
        cells.update(file_bytes=stat.st_size, file_mtime_ns=stat.st_mtime_ns)
        return tuple(_cell(cells[name]) for name in COLUMNS)

    def _index(self, rows: list[tuple[Any, ...]]) -> None:
        with self._connect() as connection:
            connection.executemany(_INSERT, rows)
        connection.close()

    def folder_for(self, record: dict[str, Any]) -> Path:
        """Where a record goes: <machine>/<commit or date>/ under the root, as asv and
        pytest-benchmark lay out theirs (the machine's label, the measured code's commit, else
        the day the record was made)."""
        return self.root / record_folder(record)

    def add(self, record: dict[str, Any]) -> Path:
        """Store a record under a new file name; an existing record is never replaced."""
        validate_record(record)
        text = record_text(record)
        folder = self.folder_for(record)
        folder.mkdir(parents=True, exist_ok=True)
        with stop_signals_deferred():
            for attempt in range(100):
                suffix = "" if attempt == 0 else f"-{attempt}"
                path = folder / f"{record['run_id']}{suffix}.json"
                try:
                    write_atomic(path, text, exclusive=True)
                    break
                except FileExistsError:
                    continue
            else:
                raise OSError(f"could not find a free file name for run {record['run_id']}")
            self._index([self._row(record, path)])
        return path

    def record_paths(self) -> list[Path]:
        """The record files, oldest first: <machine>/<commit or date>/*.json, and those of a
        flat store from before that layout (other folders, such as results/predict/, are
        stores of their own)."""
        if not self.root.is_dir():
            return []
        found = [*self.root.glob("*.json"), *self.root.glob("*/*/*.json")]
        return sorted((p for p in found if not p.name.startswith(TMP_PREFIX)),
                      key=lambda p: (p.name, str(p)))

    def _relative(self, path: Path) -> str:
        return path.relative_to(self.root).as_posix()

    def records(self, warnings: list[str] | None = None) -> Iterator[dict[str, Any]]:
        """Every readable record; unreadable files are reported in `warnings` and skipped."""
        for path in self.record_paths():
            try:
                yield load_record(path)
            except SchemaError as exc:
                if warnings is not None:
                    warnings.append(f"skipped {exc}")

    def rebuild_index(self) -> int:
        """Recreate the index from the record files alone; returns how many were indexed."""
        self.index_path.unlink(missing_ok=True)
        for suffix in ("-wal", "-shm"):
            Path(str(self.index_path) + suffix).unlink(missing_ok=True)
        rows = self._rows(self.record_paths())
        self._index(rows)
        return len(rows)

    def _rows(self, paths: list[Path]) -> list[tuple[Any, ...]]:
        """Index rows of the loadable records among `paths`; damaged files stay out of the
        index (report and compare warn about them)."""
        rows = []
        for path in paths:
            try:
                rows.append(self._row(load_record(path), path))
            except SchemaError:
                continue
        return rows

    def find_baseline(self, spec: Any) -> dict[str, Any] | None:
        """The newest successful world_size=1 record of the same experiment: same per-rank
        batch (weak scaling) preferred, else a batch equal to spec's global batch (strong)."""
        if not self.index_path.exists():
            return None
        connection = self._connect()
        try:
            where = " AND ".join(["status = 'success'", "world_size = 1",
                                  *(f"{name} = ?" for name in BASELINE_COLUMNS)])
            rows = connection.execute(
                f"SELECT path FROM runs WHERE {where} ORDER BY created_at DESC",
                tuple(getattr(spec, name) for name in BASELINE_COLUMNS)).fetchall()
        finally:
            connection.close()
        return choose_baseline(self._loadable(self.root / name for (name,) in rows), spec)

    @staticmethod
    def _loadable(paths: Iterator[Path]) -> Iterator[dict[str, Any]]:
        """The records among `paths` that load, lazily (damaged files are passed over)."""
        for path in paths:
            try:
                yield load_record(path)
            except SchemaError:
                continue

    def reconcile_index(self) -> int:
        """Bring the index in line with the record files, in place: rows for files it lacks
        (a store copied without its index, a crash between file and row) or whose size or
        time changed since, none for files that are gone. Concurrent writers keep their rows
        (nothing is dropped and rebuilt); an unreadable index is rebuilt. Returns how many
        rows changed."""
        try:
            connection = self._connect()
            try:
                indexed = {row[0]: tuple(row[1:]) for row in connection.execute(
                    f"SELECT path, {', '.join(STAMP_COLUMNS)} FROM runs")}
            finally:
                connection.close()
        except sqlite3.DatabaseError:
            return self.rebuild_index()
        paths = {self._relative(p): p for p in self.record_paths()}
        changed = [name for name, path in paths.items()
                   if name not in indexed or indexed[name] != _stamp(path)]
        rows = self._rows([paths[name] for name in sorted(changed)])
        # gone: files deleted, and indexed files changed into something that is no record
        kept = {row[1] for row in rows}
        gone = sorted((set(indexed) - set(paths)) | {n for n in changed
                                                     if n in indexed and n not in kept})
        if rows:
            self._index(rows)
        if gone:
            with self._connect() as connection:
                connection.executemany("DELETE FROM runs WHERE path = ?", [(n,) for n in gone])
            connection.close()
        return len(rows) + len(gone)

    def summary_rows(self) -> list[dict[str, Any]]:
        """Every indexed record as a row of the index (columns by name), after bringing the
        index in line with the files."""
        self.reconcile_index()
        connection = self._connect()
        try:
            cursor = connection.execute(f"SELECT {', '.join(COLUMNS)} FROM runs")
            return [dict(zip(COLUMNS, row, strict=True)) for row in cursor]
        finally:
            connection.close()

    def load_rows(self, rows: Iterable[dict[str, Any]], warnings: list[str] | None = None
                  ) -> Iterator[dict[str, Any]]:
        """The records of index rows, in full: a file with the size and time it was indexed
        with (and validated at) is parsed only; any other is validated again."""
        for row in rows:
            path = self.root / row["path"]
            try:
                if _stamp(path) == (row.get("file_bytes"), row.get("file_mtime_ns")):
                    yield json.loads(path.read_bytes())
                else:
                    yield load_record(path)
            except (OSError, ValueError, SchemaError) as exc:
                if warnings is not None:
                    warnings.append(f"skipped {one_line(str(exc), 300)}")

    def count_success(self, spec_key: str) -> int:
        """Successful records of one spec (for --resume)."""
        if not self.index_path.exists():
            return 0
        query = "SELECT COUNT(*) FROM runs WHERE spec_key = ? AND status = 'success'"
        params: list[Any] = [spec_key]
        connection = self._connect()
        try:
            return int(connection.execute(query, params).fetchone()[0])
        finally:
            connection.close()

"""A results directory: one JSON file per record, never overwritten, under a folder per machine
and measured commit (or date), and an SQLite index kept apart from it (harness/store/index.py).

A store may be someone else's (a colleague's folder, a CI artifact): it is read only through
regular files under its root (harness/core/files.read_regular), and written only into real
folders under it (no link followed)."""
from __future__ import annotations

import json
import os
import re
import sqlite3
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path, PurePosixPath
from typing import Any

from harness.core.errors import SchemaError, UsageError
from harness.core.files import TMP_PREFIX, RefusedFile, folder_under, read_regular, write_atomic
from harness.core.interrupts import stop_signals_deferred
from harness.core.text import one_line
from harness.machine.names import machine_label
from harness.records.record import (
    MAX_RECORD_BYTES,
    check_record,
    load_record,
    load_record_stamped,
    validate_record,
)
from harness.records.summary import SUMMARY_COLUMNS, summary_cells
from harness.spec.fields import baseline_columns, integer_columns, store_columns
from harness.spec.specs import RUN_FIELDS, RunSpec
from harness.store import index
from harness.store.contract import choose_baseline
from harness.store.index import INDEX_TABLE

# The index file stores of earlier versions kept inside themselves: never opened now (a shared
# store's file is its sharer's), and left where it is.
LEGACY_INDEX_NAME = "index.sqlite"
# The spec's columns are those its fields declare; an index with other columns is rebuilt.
SPEC_COLUMNS = store_columns(RUN_FIELDS)
# Those a server types as integers (harness/store/postgres.py).
INTEGER_SPEC_COLUMNS = integer_columns(RUN_FIELDS)
# A server's table has these too (harness/store/postgres.py), empty there.
STAMP_COLUMNS = ("file_bytes", "file_mtime_ns")
COLUMNS = ("run_id", "path", "created_at", "status", *SPEC_COLUMNS, "spec_key",
           *SUMMARY_COLUMNS, *STAMP_COLUMNS)
# The file's size, times and inode when indexed: a file that still has them was validated
# then, and is only parsed when a command loads it. The change time and inode cannot be set
# by whoever writes the file (a tar round trip keeps whole-second mtimes, never these).
FILE_STAMP = ("file_bytes", "file_mtime_ns", "file_ctime_ns", "file_inode")
INDEX_COLUMNS = (*COLUMNS, "file_ctime_ns", "file_inode")
# What a one-rank scaling baseline shares with the run it is the baseline of.
BASELINE_COLUMNS = baseline_columns(RUN_FIELDS)


_CREATE = (f"CREATE TABLE {{if_new}}{INDEX_TABLE} ({', '.join(INDEX_COLUMNS)}, "
           "PRIMARY KEY (path))")
_INSERT = (f"INSERT OR REPLACE INTO {INDEX_TABLE} VALUES "
           f"({', '.join('?' for _ in INDEX_COLUMNS)})")


def _columns(connection: sqlite3.Connection) -> tuple[str, ...]:
    return tuple(row[1] for row in connection.execute(f"PRAGMA table_info({INDEX_TABLE})"))


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


def _stamp(status: os.stat_result) -> tuple[int, int, int, int]:
    return status.st_size, status.st_mtime_ns, status.st_ctime_ns, status.st_ino


def _file_stamp(path: Path) -> tuple[int, int, int, int] | None:
    try:
        return _stamp(path.stat())
    except OSError:
        return None


def _indexed_name(name: Any) -> bool:
    """Whether an index row's path is one the store could hold: relative, no `..`."""
    if not isinstance(name, str) or not name:
        return False
    path = PurePosixPath(name)
    return not path.is_absolute() and ".." not in path.parts and "\0" not in name


def record_text(record: dict[str, Any]) -> str:
    """A record as every store keeps it: JSON, one key a line, ending in a newline."""
    return json.dumps(record, indent=1, allow_nan=False) + "\n"


class Store:
    """Record files named so they sort by time, plus an index that can always be rebuilt
    (a RecordStore and a RunStore: harness/store/contract.py)."""

    root: Path

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self._memory: sqlite3.Connection | None = None  # the index, where the cache is closed

    @property
    def index_path(self) -> Path:
        """The index's file: in the user's cache, never in the store (harness/store/index)."""
        return index.index_file(self.root)

    def ensure_writable(self) -> None:
        """Create the directory and prove it takes files, or raise UsageError before any run."""
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            handle, probe = tempfile.mkstemp(prefix=TMP_PREFIX, dir=self.root)
            os.close(handle)
            os.unlink(probe)
        except OSError as exc:
            raise UsageError(f"--out {self.root}: not writable ({exc.strerror or exc})") from None
        linked = [path for path in (*self.root.glob("*"), *self.root.glob("*/*"))
                  if path.is_symlink() and path.is_dir()]
        if linked:
            raise UsageError(f"--out {self.root}: {linked[0]} is a symbolic link to a folder; "
                             "dtbench writes records only into real folders under the store")

    def _connect(self) -> sqlite3.Connection:
        """The index, its table made or rebuilt as this version writes it; an index in memory
        where the cache cannot be written."""
        if self._memory is not None:
            return self._memory
        try:
            connection, discarded = index.open_index(self.index_path)
        except (OSError, sqlite3.OperationalError):
            self._memory = index.memory_index()
            self._memory.execute(_CREATE.format(if_new=""))
            index.set_version(self._memory)
            self._memory.executemany(_INSERT, self._rows(self.record_paths()))
            return self._memory
        try:
            if not discarded and not connection.execute("SELECT name FROM sqlite_master"
                                                        ).fetchall():
                connection.execute(_CREATE.format(if_new="IF NOT EXISTS "))  # a new index:
                index.set_version(connection)  # reconcile_index fills it
            if _columns(connection) != INDEX_COLUMNS or index.version(connection) \
                    != index.INDEX_VERSION:
                self._recreate(connection)
        except BaseException:
            connection.close()
            raise
        return connection

    def _release(self, connection: sqlite3.Connection) -> None:
        if connection is not self._memory:
            connection.close()

    def _recreate(self, connection: sqlite3.Connection) -> None:
        """Rebuild an index written with other columns (an older version) from the files."""
        rows = self._rows(self.record_paths())
        connection.execute("BEGIN IMMEDIATE")
        try:
            if _columns(connection) != INDEX_COLUMNS or index.version(connection) \
                    != index.INDEX_VERSION:
                connection.execute(f"DROP TABLE IF EXISTS {INDEX_TABLE}")
                connection.execute(_CREATE.format(if_new=""))
                connection.executemany(_INSERT, rows)
                index.set_version(connection)
            connection.commit()
        except BaseException:
            connection.rollback()
            raise

    def _row(self, record: dict[str, Any], path: Path, status: os.stat_result
             ) -> tuple[Any, ...]:
        cells = index_cells(record, self._relative(path))
        cells.update(zip(FILE_STAMP, _stamp(status), strict=True))
        return tuple(_cell(cells[name]) for name in INDEX_COLUMNS)

    def _index(self, rows: list[tuple[Any, ...]]) -> None:
        connection = self._connect()
        try:
            with connection:
                connection.executemany(_INSERT, rows)
        finally:
            self._release(connection)

    def folder_for(self, record: dict[str, Any]) -> Path:
        """Where a record goes: <machine>/<commit or date>/ under the root, as asv and
        pytest-benchmark lay out theirs (the machine's label, the measured code's commit, else
        the day the record was made)."""
        return self.root / record_folder(record)

    def add(self, record: dict[str, Any]) -> Path:
        """Store a record under a new file name; an existing record is never replaced. The
        file goes into a real folder under the root (a symbolic link on the way is refused:
        UsageError)."""
        validate_record(record)
        text = record_text(record)
        try:
            folder = folder_under(self.root, record_folder(record))
        except RefusedFile as exc:
            raise UsageError(f"--out {self.root}: {exc}") from None
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
            try:
                self._index([self._row(record, path, path.lstat())])
            except (OSError, sqlite3.Error):
                pass  # the file is the record: the next reader indexes it
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
                yield load_record(path, self.root)
            except SchemaError as exc:
                if warnings is not None:
                    warnings.append(f"skipped {exc}")

    def rebuild_index(self) -> int:
        """Recreate the index from the record files alone; returns how many were indexed."""
        if self._memory is not None:
            self._memory.close()
            self._memory = None
        index.discard(self.index_path)
        rows = self._rows(self.record_paths())
        self._index(rows)
        return len(rows)

    def _rows(self, paths: list[Path]) -> list[tuple[Any, ...]]:
        """Index rows of the loadable records among `paths`; damaged files stay out of the
        index (report and compare warn about them)."""
        rows = []
        for path in paths:
            if not self._relative(path).isprintable():
                continue  # a name not UTF-8 (or with a control character) is no index key:
                # such a file is read in full as a loose one, so every reader sees the same
            try:
                record, status = load_record_stamped(path, self.root)
                rows.append(self._row(record, path, status))
            except SchemaError:
                continue
        return rows

    def find_baseline(self, spec: RunSpec) -> dict[str, Any] | None:
        """The newest successful world_size=1 record of the same experiment: same per-rank
        batch (weak scaling) preferred, else a batch equal to spec's global batch (strong)."""
        if not self.root.is_dir():
            return None
        connection = self._connect()
        try:
            where = " AND ".join(["status = 'success'", "world_size = 1",
                                  *(f"{name} = ?" for name in BASELINE_COLUMNS)])
            rows = connection.execute(
                f"SELECT path FROM {INDEX_TABLE} WHERE {where} ORDER BY created_at DESC",
                tuple(getattr(spec, name) for name in BASELINE_COLUMNS)).fetchall()
        finally:
            self._release(connection)
        return choose_baseline(self._loadable(name for (name,) in rows), spec)

    def _loadable(self, names: Iterator[Any]) -> Iterator[dict[str, Any]]:
        """The records of indexed paths that load, lazily (damaged files are passed over)."""
        for name in names:
            try:
                if _indexed_name(name):
                    yield load_record(self.root / name, self.root)
            except SchemaError:
                continue

    def reconcile_index(self) -> int:
        """Bring the index in line with the record files, in place: rows for files it lacks
        (a store copied without its index, a crash between file and row) or whose size, times
        or inode changed since, none for files that are gone. Concurrent writers keep their
        rows (nothing is dropped and rebuilt); an unreadable index is rebuilt. Returns how many
        rows changed."""
        try:
            connection = self._connect()
            try:
                indexed = {row[0]: tuple(row[1:]) for row in connection.execute(
                    f"SELECT path, {', '.join(FILE_STAMP)} FROM {INDEX_TABLE}")}
            finally:
                self._release(connection)
        except sqlite3.DatabaseError:
            return self.rebuild_index()
        paths = {self._relative(p): p for p in self.record_paths()}
        changed = [name for name, path in paths.items()
                   if name not in indexed or indexed[name] != _file_stamp(path)]
        rows = self._rows([paths[name] for name in sorted(changed)])
        # gone: files deleted, and indexed files changed into something that is no record
        kept = {row[1] for row in rows}
        gone = sorted((set(indexed) - set(paths)) | {n for n in changed
                                                     if n in indexed and n not in kept})
        if rows:
            self._index(rows)
        if gone:
            connection = self._connect()
            try:
                with connection:
                    connection.executemany(f"DELETE FROM {INDEX_TABLE} WHERE path = ?",
                                           [(n,) for n in gone])
            finally:
                self._release(connection)
        return len(rows) + len(gone)

    def summary_rows(self, warnings: list[str] | None = None) -> list[dict[str, Any]]:
        """Every indexed record as a row of the index (columns by name), after bringing the
        index in line with the files (the index holds only records validated when indexed,
        so nothing is skipped here: `warnings` is the server store's)."""
        self.reconcile_index()
        connection = self._connect()
        try:
            cursor = connection.execute(f"SELECT {', '.join(INDEX_COLUMNS)} FROM {INDEX_TABLE}")
            return [dict(zip(INDEX_COLUMNS, row, strict=True)) for row in cursor
                    if _indexed_name(row[1])]
        finally:
            self._release(connection)

    def load_rows(self, rows: Iterable[dict[str, Any]], warnings: list[str] | None = None
                  ) -> Iterator[dict[str, Any]]:
        """The records of index rows, in full: a file with the stamp it was indexed (and
        validated) with is parsed only; any other is validated again. Only regular files under
        the root, of at most MAX_RECORD_BYTES, are read."""
        for row in rows:
            path = self.root / str(row["path"])
            try:
                if not _indexed_name(row["path"]):
                    raise RefusedFile(f"{row['path']!r}: not a path under {self.root}")
                data, status = read_regular(path, MAX_RECORD_BYTES, self.root)
                document = json.loads(data)
                if _stamp(status) != tuple(row.get(name) for name in FILE_STAMP):
                    document = check_record(document, str(path))
                yield document
            except (OSError, ValueError, RecursionError, SchemaError) as exc:
                if warnings is not None:
                    warnings.append(f"skipped {one_line(str(exc), 300)}")

    def record_text(self, name: str) -> str | None:
        """The stored text of an indexed record file (publish copies it as it is), or None
        where it is gone or no longer a file dtbench reads."""
        if not _indexed_name(name):
            return None
        try:
            data, _ = read_regular(self.root / name, MAX_RECORD_BYTES, self.root)
        except OSError:
            return None
        return data.decode("utf-8", "replace")

    def count_success(self, spec_key: str) -> int:
        """Successful records of one spec (for --resume)."""
        if not self.root.is_dir():
            return 0
        query = f"SELECT COUNT(*) FROM {INDEX_TABLE} WHERE spec_key = ? AND status = 'success'"
        connection = self._connect()
        try:
            return int(connection.execute(query, (spec_key,)).fetchone()[0])
        finally:
            self._release(connection)

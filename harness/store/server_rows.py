"""A PostgreSQL store's rows, verified before any summary uses them.

Any role with INSERT can add a row whose index columns claim what they like (a machine, a
throughput of 1e9, NaN, a text where a number belongs) beside a record that may not even be
one. History, publish, report's catalog and compare's choice of a baseline read those columns
instead of parsing every record, so a row is used only where its stored record validates and
its columns are the ones dtbench derives from that record (harness/store/directory.index_cells
through `cell`); any other is skipped with a warning naming it.

Validating a record costs milliseconds, and a fleet's store holds 100,000: what a row's record
says is therefore kept in dtbench's cache (beside the directory stores' indexes, as safely:
harness/store/index), keyed by the server (its cluster's system identifier), the run and the
row's version (xmin, which only the server sets, with the record's stored size). A row is read
and validated again only when it changed; the cache holds only cells derived from records this
user's dtbench validated, so a stale or forged cache entry can show only a valid record's
figures.
"""
from __future__ import annotations

import hashlib
import json
import math
import sqlite3
from collections.abc import Callable, Iterable
from typing import Any

from harness.core.errors import SchemaError
from harness.core.files import cache_dir
from harness.core.outputs import clean_text
from harness.records.summary import INTEGER_SUMMARY, REAL_SUMMARY
from harness.store import index
from harness.store.directory import COLUMNS, INTEGER_SPEC_COLUMNS, STAMP_COLUMNS, index_cells
from harness.store.index import INDEX_TABLE

# Columns holding integers; the others hold text (what the directory index holds there).
INTEGER_COLUMNS = frozenset({*INTEGER_SPEC_COLUMNS, *INTEGER_SUMMARY, *STAMP_COLUMNS})
# What changes whenever a row does: its version, set by the server, and the record's size.
STAMP_SQL = "xmin::text || ':' || pg_column_size(record)"
# The columns a row must agree on with its record (a server row has no file, hence no stamp).
CHECKED = tuple(name for name in COLUMNS if name not in STAMP_COLUMNS)
_CACHE = (f"CREATE TABLE {INDEX_TABLE} (run_id TEXT PRIMARY KEY, stamp TEXT NOT NULL, "
          "cells TEXT, problem TEXT)")


def cell(name: str, value: Any) -> Any:
    """A value the column can hold, as every writer and reader derives it: lists, objects,
    huge integers, non-finite numbers and NUL characters are left out."""
    if value is None or isinstance(value, (dict, list)):
        return None
    if name in REAL_SUMMARY:
        if isinstance(value, bool) or not isinstance(value, int | float):
            return None
        number = float(value) if abs(value) < 1e300 else math.inf
        return number if math.isfinite(number) else None
    if name in INTEGER_COLUMNS:
        if isinstance(value, bool) or not isinstance(value, int) \
                or not -2**63 <= value < 2**63:
            return None
        return value
    text = value if isinstance(value, str) else json.dumps(value)
    return text.encode("utf-8", "backslashreplace").decode("utf-8").replace("\0", "")


def cells_of(record: dict[str, Any]) -> dict[str, Any]:
    """A record's index cells by column (path: the file name export gives it)."""
    values = index_cells(record, f"{record['run_id']}.json")
    return {name: cell(name, values.get(name)) for name in COLUMNS}


def disagreement(row: dict[str, Any], derived: dict[str, Any]) -> str | None:
    """The first column where a server row says other than its record, or None. A value of
    another type (a text where a number belongs, a float where an integer does) or a NaN
    never agrees."""
    for name in CHECKED:
        claimed, actual = row.get(name), derived.get(name)
        if claimed is None and actual is None:
            continue
        if type(claimed) is not type(actual) or claimed != actual:
            return (f"its index column {name} holds {clean_text(repr(claimed), 60)}, its "
                    f"record {clean_text(repr(actual), 60)}")
    return None


class RowCache:
    """What the validated records of one server's rows say: run_id -> (stamp, cells or None,
    the problem where the record is no valid record). In dtbench's cache, or in memory where
    the cache cannot be written."""

    def __init__(self, server: str) -> None:
        digest = hashlib.sha256(f"postgresql {server}".encode()).hexdigest()[:32]
        self.path = cache_dir() / "index" / f"server-{digest}.sqlite"
        self.memory: dict[str, tuple[str, str | None, str | None]] = {}
        self.connection: sqlite3.Connection | None = None
        try:
            connection, _ = index.open_index(self.path)
            found = {row[1] for row in connection.execute(f"PRAGMA table_info({INDEX_TABLE})")}
            if found != {"run_id", "stamp", "cells", "problem"} \
                    or index.version(connection) != index.INDEX_VERSION:
                with connection:
                    connection.execute(f"DROP TABLE IF EXISTS {INDEX_TABLE}")
                    connection.execute(_CACHE)
                    index.set_version(connection)
            self.connection = connection
        except (OSError, sqlite3.Error):
            self.connection = None

    def close(self) -> None:
        if self.connection is not None:
            self.connection.close()

    def known(self, run_ids: list[str]) -> dict[str, tuple[str, str | None, str | None]]:
        if self.connection is None:
            return {run_id: self.memory[run_id] for run_id in run_ids if run_id in self.memory}
        found = {}
        for start in range(0, len(run_ids), 500):
            chunk = run_ids[start:start + 500]
            marks = ", ".join("?" * len(chunk))
            try:
                found.update((run_id, (stamp, cells, problem)) for run_id, stamp, cells, problem
                             in self.connection.execute(
                                 f"SELECT run_id, stamp, cells, problem FROM {INDEX_TABLE} "
                                 f"WHERE run_id IN ({marks})", chunk))
            except sqlite3.Error:
                return found
        return found

    def remember(self, entries: list[tuple[str, str, str | None, str | None]]) -> None:
        if self.connection is None:
            self.memory.update((run_id, rest) for run_id, *rest in entries)  # type: ignore
            return
        try:
            with self.connection:
                self.connection.executemany(f"INSERT OR REPLACE INTO {INDEX_TABLE} VALUES "
                                            "(?, ?, ?, ?)", entries)
        except sqlite3.Error:
            self.memory.update((run_id, rest) for run_id, *rest in entries)  # type: ignore


def verify(rows: list[dict[str, Any]], cache: RowCache,
           texts: Callable[[list[str]], Iterable[tuple[str, str | None]]],
           parse: Callable[[str, str | None], dict[str, Any]],
           skip: Callable[[str, str], None]) -> list[dict[str, Any]]:
    """The rows (columns by name, and `stamp`) whose record validates and agrees with them,
    as the record derives them; each other row is passed to skip(run_id, why). `texts`
    fetches stored records by run_id, `parse` validates one (SchemaError)."""
    run_ids = [str(row["run_id"]) for row in rows]
    known = cache.known(run_ids)
    stale = [run_id for run_id, row in zip(run_ids, rows, strict=True)
             if known.get(run_id, ("",))[0] != row["stamp"]]
    stamps = {str(row["run_id"]): row["stamp"] for row in rows}
    for start in range(0, len(stale), 1000):
        learned = []
        for run_id, text in texts(stale[start:start + 1000]):
            try:
                found = json.dumps(cells_of(parse(run_id, text))), None
            except SchemaError as exc:
                found = None, clean_text(exc, 300)
            learned.append((run_id, stamps[run_id], *found))
            known[run_id] = (stamps[run_id], *found)
        cache.remember(learned)
    verified = []
    for run_id, row in zip(run_ids, rows, strict=True):
        stamp, cells, problem = known.get(run_id, (row["stamp"], None, "gone from the server"))
        if cells is None:
            skip(run_id, problem or "not a valid record")
            continue
        derived = json.loads(cells)
        why = disagreement(row, derived)
        if why is not None:
            skip(run_id, why)
            continue
        verified.append(derived)
    return verified

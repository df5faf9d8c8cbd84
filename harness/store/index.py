"""A directory store's index: an SQLite file of dtbench's own, kept in the user's cache and
keyed by the store's real path, never inside the store.

A store is shared (a colleague's folder, a CI artifact), so a file inside it is the sharer's:
an index there could list files outside the store, forge the stamps that let a record be
parsed without validation, carry triggers, or be a link to another database. Readers would
also write into what they read. The index therefore lives in `cache_dir()/index/` and holds
only what this user's dtbench wrote: one table, `dtbench_runs`, with a schema version
(`PRAGMA user_version`); an index holding anything else (a trigger, a view, a virtual table),
or that is a link, is thrown away and rebuilt from the record files. A cache that cannot be
written leaves the index in memory, built from the files for the command's life.
"""
from __future__ import annotations

import hashlib
import os
import sqlite3
import time
import zlib
from importlib import resources
from pathlib import Path

from harness.core.files import cache_dir
from harness.records.schema import SCHEMA_FILE

INDEX_TABLE = "dtbench_runs"
# Raised whenever the table's columns or what they mean change: an index of another version
# is rebuilt from the files.
INDEX_FORMAT = 2
# ... and whenever the record schema changes: a row was validated under the schema of its
# time, and one that refuses more must not leave its index serving records it now refuses.
_SCHEMA_DIGEST = zlib.crc32(resources.files("harness.records").joinpath(SCHEMA_FILE)
                            .read_bytes()) & 0xFFFFFF
INDEX_VERSION = INDEX_FORMAT << 24 | _SCHEMA_DIGEST  # PRAGMA user_version: 32 bits
BUSY_TIMEOUT_S = 60
# What dtbench creates in an index: the table and its primary key's index.
_OWN = {("table", INDEX_TABLE), ("index", f"sqlite_autoindex_{INDEX_TABLE}_1")}


def index_file(root: Path) -> Path:
    """Where the index of the store at `root` lives: a file named by its real path's hash."""
    real = os.path.realpath(root)
    digest = hashlib.sha256(real.encode("utf-8", "surrogateescape")).hexdigest()[:32]
    return cache_dir() / "index" / f"{digest}.sqlite"


def discard(path: Path) -> None:
    """Remove an index and its WAL files (a link is removed, never what it points to)."""
    for name in (str(path), f"{path}-wal", f"{path}-shm"):
        try:
            os.unlink(name)
        except FileNotFoundError:
            pass


def _enable_wal(connection: sqlite3.Connection) -> None:
    """Switch the index to WAL, so readers never block the writer. Writers that create an index
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


def _foreign(connection: sqlite3.Connection) -> bool:
    """Whether the file holds anything dtbench did not make (a trigger fires on dtbench's own
    writes; a view or a virtual table could read anything)."""
    found = connection.execute("SELECT type, name, sql FROM sqlite_master").fetchall()
    return any((kind, name) not in _OWN
               or (kind == "table" and not str(sql).upper().startswith("CREATE TABLE "))
               for kind, name, sql in found)


def _open(path: Path) -> sqlite3.Connection:
    connection = sqlite3.connect(f"{Path(os.path.abspath(path)).as_uri()}?nofollow=1",
                                 uri=True, timeout=BUSY_TIMEOUT_S)
    try:
        connection.execute("PRAGMA trusted_schema = OFF")
        connection.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_S * 1000}")
    except BaseException:
        connection.close()
        raise
    return connection


def open_index(path: Path) -> tuple[sqlite3.Connection, bool]:
    """A connection to the index file at `path`, which is dtbench's own: a link or anything
    but a regular file there is removed first, and a file holding more than dtbench's table
    is thrown away (the flag says so: the caller rebuilds it from the files). The table
    itself is the caller's to create and check."""
    path.parent.mkdir(parents=True, exist_ok=True)
    discarded = path.is_symlink() or (path.exists() and not path.is_file())
    if discarded:
        discard(path)
    connection = _open(path)
    try:
        if _foreign(connection):
            connection.close()
            discard(path)
            discarded = True
            connection = _open(path)
        _enable_wal(connection)
    except BaseException:
        connection.close()
        raise
    return connection, discarded


def memory_index() -> sqlite3.Connection:
    """An index that lives as long as the command: where the cache cannot be written."""
    connection = sqlite3.connect(":memory:")
    connection.execute("PRAGMA trusted_schema = OFF")
    return connection


def version(connection: sqlite3.Connection) -> int:
    return int(connection.execute("PRAGMA user_version").fetchone()[0])


def set_version(connection: sqlite3.Connection) -> None:
    connection.execute(f"PRAGMA user_version = {INDEX_VERSION}")

"""Which store a target names: a `postgresql://` (or `postgres://`) URL is a server
(postgres.py), anything else a directory (directory.py); and the store a command uses when
given none: `$DTBENCH_STORE`, else `./.dtbench` (the user's own, never a checkout's published
results/).

Writers (`run`, `comm`, `kernels --out URL`) get a FallbackStore: records go to the server
while it answers; when it is down at the start, or goes away mid-suite, the runs go on and
their records go to a local directory store, `./dtbench-pending` (or $DTBENCH_PENDING), and
the last line names the one command that pushes them: `dtbench store import DIR --to URL`.
"""
from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from harness.spec.specs import RunSpec
from harness.store.contract import RecordStore, RunStore
from harness.store.directory import Store
from harness.store.url import is_store_url

PENDING_VAR = "DTBENCH_PENDING"
PENDING_DIR = "dtbench-pending"
STORE_VAR = "DTBENCH_STORE"
STORE_DIR = ".dtbench"


def default_store() -> str:
    """The store `run`, `comm`, `kernels` and `doctor` write and `report`, `history`, `publish`
    and `predict` read when given none: $DTBENCH_STORE, else .dtbench in the working directory.
    Never a checkout's results/, which holds the project's published records."""
    return os.environ.get(STORE_VAR) or STORE_DIR


def open_store(target: str | Path) -> RecordStore:
    """The store `target` names, for reading: a PostgresStore or a directory Store."""
    if is_store_url(target):
        from harness.store.postgres import PostgresStore

        return PostgresStore(str(target))
    return Store(target)


def pending_dir() -> Path:
    """Where records wait while their server is away."""
    return Path(os.environ.get(PENDING_VAR) or PENDING_DIR)


def import_command(directory: Path, shown_url: str) -> str:
    return f"dtbench store import {directory} --to {shown_url}"


class FallbackStore:
    """A server store that never loses a record: after the first time the server cannot be
    reached, this invocation writes to the local pending store. `root` is that local
    directory (time-to-train runs keep their MLPerf logs under it). A RunStore
    (harness/store/contract.py)."""

    def __init__(self, url: str, pending: Path | None = None) -> None:
        from harness.store.postgres import PostgresStore

        self.server = PostgresStore(url)
        self.pending = Store(pending if pending is not None else pending_dir())
        self.away: str | None = None  # why the server was left, once it was
        self.kept_locally = 0

    @property
    def root(self) -> Path:
        return self.pending.root

    def _leave(self, why: Exception) -> None:
        if self.away is None:
            self.away = str(why)
            print(f"dtbench: warning: {why}; records go to {self.pending.root} until pushed "
                  f"with: {import_command(self.pending.root, self.server.shown)}",
                  file=sys.stderr)

    def _server(self, operation: str, *args: Any) -> tuple[bool, Any]:
        """(True, the server's answer), or (False, None) when it could not give one: once it
        is away it is not asked again; an operation it refused is named in a warning."""
        from harness.store.postgres import StoreError, StoreUnreachable

        if self.away is not None:
            return False, None
        try:
            return True, getattr(self.server, operation)(*args)
        except StoreUnreachable as exc:
            self._leave(exc)
        except StoreError as exc:
            print(f"dtbench: warning: {exc}; using {self.pending.root} instead",
                  file=sys.stderr)
        return False, None

    def ensure_writable(self) -> None:
        """The server, checked before any run; when it is away, the local store instead.
        Wrong credentials or privileges stay a usage error."""
        self._server("ensure_writable")
        if self.away is not None:
            self.pending.ensure_writable()

    def reconcile_index(self) -> int:
        return self.pending.reconcile_index() if self.pending.root.is_dir() else 0

    def count_success(self, spec_key: str) -> int:
        local = self.pending.count_success(spec_key) if self.pending.root.is_dir() else 0
        return (self._server("count_success", spec_key)[1] or 0) + local

    def find_baseline(self, spec: RunSpec) -> dict[str, Any] | None:
        found = self._server("find_baseline", spec)[1]
        if found is None and self.pending.root.is_dir():
            found = self.pending.find_baseline(spec)
        return found

    def add(self, record: dict[str, Any]) -> Path | None:
        """The record on the server, or in the local store if the server cannot take it."""
        if self._server("add", record)[0]:
            return None
        self.kept_locally += 1
        return self.pending.add(record)

    def records(self, warnings: list[str] | None = None) -> Iterator[dict[str, Any]]:
        return self.server.records(warnings)

    def destination(self) -> str:
        """Where this invocation's records went, with the push command when some wait."""
        if not self.kept_locally:
            return self.server.shown
        return (f"{self.kept_locally} record(s) kept in {self.pending.root} "
                f"({self.server.shown} could not take them); push them with: "
                f"{import_command(self.pending.root, self.server.shown)}")


def open_writer(target: str | Path) -> RunStore:
    """The store `--out` names, for writing: a FallbackStore for a URL, else a Store."""
    return FallbackStore(str(target)) if is_store_url(target) else Store(target)


def destination(store: RunStore) -> str:
    """What to print after `records:`."""
    return store.destination() if isinstance(store, FallbackStore) else str(store.root)

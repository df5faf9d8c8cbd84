"""What a store is to the code that uses it, as typing Protocols: the directory store
(directory.py) and the PostgreSQL store (postgres.py) are both a RecordStore; what a run writes
to, a RunStore, is the directory store or the fallback store a server URL gets (targets.py:
records go to the server while it answers, else to a local folder). The runner, the collectors'
baseline, report and compare take these, never one store's class
(tests/harness/store/test_contract.py holds every store to the signatures below)."""
from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from harness.spec.specs import RunSpec


@runtime_checkable
class RecordReader(Protocol):
    """Records read back: all of them, or the index's rows first and then the records of the
    rows a view keeps."""

    def records(self, warnings: list[str] | None = None) -> Iterator[dict[str, Any]]:
        """Every readable record; the others named in `warnings` and skipped."""
        ...

    def summary_rows(self, warnings: list[str] | None = None) -> list[dict[str, Any]]:
        """Every record as its row of index columns (columns by name); rows that cannot be
        trusted (a server row whose record disagrees with its columns) named in `warnings`
        and skipped."""
        ...

    def load_rows(self, rows: Iterable[dict[str, Any]], warnings: list[str] | None = None
                  ) -> Iterator[dict[str, Any]]:
        """The records of index rows, in full, each validated; the others named in
        `warnings` and skipped."""
        ...


@runtime_checkable
class RecordWriter(Protocol):
    """Records written by runs: checked before the first run, never replaced, and asked for
    what a run needs of earlier ones (its scaling baseline, how many repeats --resume has)."""

    def ensure_writable(self) -> None:
        """Prove the store takes records before any run (UsageError otherwise)."""
        ...

    def add(self, record: dict[str, Any]) -> Path | None:
        """Store a new record; the file it went to where the store keeps files."""
        ...

    def reconcile_index(self) -> int:
        """Bring the index in line with the stored records; how many rows changed."""
        ...

    def find_baseline(self, spec: RunSpec) -> dict[str, Any] | None:
        """The newest successful one-rank record of the same experiment: the same per-rank
        batch (weak scaling) preferred, else one equal to spec's global batch (strong)."""
        ...

    def count_success(self, spec_key: str) -> int:
        """Successful records of one experiment (for --resume)."""
        ...


@runtime_checkable
class RecordStore(RecordReader, RecordWriter, Protocol):
    """A store: both the directory and the PostgreSQL store are one."""


@runtime_checkable
class RunStore(RecordWriter, Protocol):
    """What a run writes to: a record writer with a local folder, `root`, for what a run keeps
    beside its record (time-to-train logs, profiler traces, --json)."""

    root: Path


def choose_baseline(candidates: Iterable[dict[str, Any]], spec: RunSpec) -> dict[str, Any] | None:
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

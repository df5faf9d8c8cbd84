"""Four processes writing to one store at once lose nothing and corrupt nothing.

Record files are claimed with an exclusive link (never overwritten; a taken run_id gets a
`-N` suffix) and the SQLite index runs in WAL mode with a busy timeout, so concurrent
`dtbench run` invocations may share `--out`.
"""
from __future__ import annotations

import copy
import json
import multiprocessing
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from harness.core.files import TMP_PREFIX
from harness.records.record import load_record
from harness.store.directory import COLUMNS, Store
from harness.store.index import INDEX_TABLE

GOLDEN = json.loads((Path(__file__).resolve().parents[1] / "golden" / "record_v1.json").read_text())
WORKERS = 4
RECORDS_PER_WORKER = 25
SHARED_IDS = 5  # the first 5 run_ids of every worker are the same across workers
REPO_ROOT = Path(__file__).resolve().parents[3]


def _record(worker: int, sequence: int) -> dict[str, Any]:
    record = copy.deepcopy(GOLDEN)
    if sequence < SHARED_IDS:
        record["run_id"] = f"20240102T030405Z-hep_cnn-shared{sequence}"
    else:
        record["run_id"] = f"20240102T030405Z-hep_cnn-w{worker}s{sequence:02d}"
    record["notes"] = {"worker": worker, "sequence": sequence}
    return record


def _write_records(root: str, worker: int, start: Any) -> None:
    """One worker process: wait for the others, then add its records as fast as it can."""
    start.wait(timeout=60)
    store = Store(root)
    for sequence in range(RECORDS_PER_WORKER):
        store.add(_record(worker, sequence))


def _race_to_create(roots: list[str], worker: int, start: Any) -> None:
    """One worker process: add one record to each fresh store at the same moment as the rest."""
    for root in roots:
        start.wait(timeout=60)
        Store(root).add(_record(worker, SHARED_IDS + worker))


def _index_rows(root: Path) -> list[tuple[Any, ...]]:
    connection = sqlite3.connect(Store(root).index_path)
    try:
        return connection.execute(f"SELECT {', '.join(COLUMNS)} FROM {INDEX_TABLE} "
                                  "ORDER BY path").fetchall()
    finally:
        connection.close()


def _record_files(root: Path) -> list[Path]:
    return Store(root).record_paths()


def _run_workers(target: Any, argument: Any) -> list[int | None]:
    """WORKERS spawned processes running target(argument, worker, barrier), released at
    once by the barrier; their exit codes."""
    context = multiprocessing.get_context("spawn")
    start = context.Barrier(WORKERS)
    workers = [context.Process(target=target, args=(argument, worker, start))
               for worker in range(WORKERS)]
    for process in workers:
        process.start()
    for process in workers:
        process.join(timeout=120)
    return [p.exitcode for p in workers]


def test_index_uses_wal_and_a_busy_timeout(tmp_path: Path) -> None:
    connection = Store(tmp_path)._connect()
    try:
        assert connection.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert connection.execute("PRAGMA busy_timeout").fetchone()[0] >= 10_000
    finally:
        connection.close()


def test_four_writers_lose_nothing_and_corrupt_nothing(tmp_path: Path) -> None:
    root = tmp_path / "store"
    assert _run_workers(_write_records, str(root)) == [0] * WORKERS

    files = _record_files(root)
    assert len(files) == WORKERS * RECORDS_PER_WORKER
    written = {(r["notes"]["worker"], r["notes"]["sequence"]) for r in map(load_record, files)}
    assert written == {(w, s) for w in range(WORKERS) for s in range(RECORDS_PER_WORKER)}
    for sequence in range(SHARED_IDS):
        shared = [p.name for p in files if f"-shared{sequence}" in p.name]
        assert sorted(shared) == sorted(
            [f"20240102T030405Z-hep_cnn-shared{sequence}.json"]
            + [f"20240102T030405Z-hep_cnn-shared{sequence}-{n}.json" for n in (1, 2, 3)])
    assert not [p for p in root.rglob("*") if p.name.startswith(TMP_PREFIX)]

    rows = _index_rows(root)
    assert sorted(row[1] for row in rows) == sorted(p.relative_to(root).as_posix() for p in files)
    warnings: list[str] = []
    assert len(list(Store(root).records(warnings))) == len(files) and warnings == []
    assert Store(root).rebuild_index() == len(files)
    assert _index_rows(root) == rows


def test_four_writers_creating_a_store_at_once_all_succeed(tmp_path: Path) -> None:
    """Creating the index (and switching it to WAL) is the moment writers collide; SQLite
    answers `database is locked` there without waiting, so it is raced many times."""
    roots = [str(tmp_path / f"store{n}") for n in range(30)]
    assert _run_workers(_race_to_create, roots) == [0] * WORKERS
    for root in map(Path, roots):
        assert len(_record_files(root)) == WORKERS
        assert len(_index_rows(root)) == WORKERS


@pytest.mark.slow
def test_four_concurrent_runs_share_one_store(tmp_path: Path, seeded_cache_dir: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "store"
    # the store's index lives in the cache folder: this process reads the runs' one
    monkeypatch.setenv("DTBENCH_CACHE_DIR", str(seeded_cache_dir))
    env = dict(os.environ, DTBENCH_CACHE_DIR=str(seeded_cache_dir),
               PYTHONPATH=os.pathsep.join(filter(None, [str(REPO_ROOT),
                                                         os.environ.get("PYTHONPATH")])))
    command = [sys.executable, "-m", "harness", "run", "-w", "hep_cnn", "--size", "tiny",
               "--steps", "3", "--warmup", "1", "--threads", "1", "-q", "--out", str(root)]
    runs = [subprocess.Popen(command, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True) for _ in range(WORKERS)]
    outputs = [run.communicate(timeout=600) for run in runs]
    for run, (_, stderr) in zip(runs, outputs, strict=True):
        assert run.returncode == 0, stderr
        assert "Traceback" not in stderr

    warnings: list[str] = []
    records = list(Store(root).records(warnings))
    assert warnings == []
    assert len(records) == WORKERS and len({r["run_id"] for r in records}) == WORKERS
    assert all(r["status"] == "success" and r["spec"]["workload"] == "hep_cnn" for r in records)
    rows = _index_rows(root)
    assert sorted(row[0] for row in rows) == sorted(r["run_id"] for r in records)
    assert not [p for p in root.rglob("*") if p.name.startswith(TMP_PREFIX)]

"""The results store: atomic never-overwriting writes, an SQLite index that can be rebuilt."""
from __future__ import annotations

import datetime as dt
import json
import os
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from harness.core.errors import UsageError
from harness.core.files import TMP_PREFIX, write_atomic
from harness.machine.names import machine_label
from harness.records.record import Metric, build_record, load_record, new_run_id
from harness.spec.specs import RunSpec
from harness.store.directory import Store, _slug
from harness.store.index import INDEX_TABLE


def make_record(workload: str = "alexnet", status: str = "success", run_id: str | None = None,
                second: int = 0, spec: RunSpec | None = None) -> dict[str, Any]:
    created = dt.datetime(2024, 5, 6, 7, 8, second, tzinfo=dt.UTC)
    spec = spec or RunSpec(workload=workload, size="tiny", batch_per_rank=8, steps=3, warmup=1)
    return build_record(
        run_id=run_id or new_run_id(workload, created), created=created, status=status,
        error=None if status == "success" else "a reason", harness={}, machine={},
        software={}, spec=spec.as_dict(),
        metrics=[Metric("throughput", "samples/s", 10.0, True, samples=[9.0, 10.0, 11.0])],
        events=[], extra={"spec_key": spec.key()})


def index_rows(store: Store) -> list[tuple[Any, ...]]:
    connection = sqlite3.connect(store.index_path)
    try:
        return connection.execute(
            "SELECT run_id, path, status, workload, size, world_size, spec_key FROM "
            f"{INDEX_TABLE} ORDER BY path").fetchall()
    finally:
        connection.close()


def leftovers(root: Path) -> list[str]:
    return [p.name for p in root.rglob("*") if p.name.startswith(TMP_PREFIX)]


def test_add_writes_a_loadable_file_named_by_run_id(tmp_path: Path) -> None:
    store = Store(tmp_path / "new" / "store")
    record = make_record()
    path = store.add(record)
    # Under <machine>/<commit or date>/: a record without a fingerprint or commit goes to
    # unknown-machine/<the day it was made>/.
    assert path == store.root / "unknown-machine" / "2024-05-06" / f"{record['run_id']}.json"
    assert load_record(path) == record
    assert leftovers(store.root) == []


def test_add_never_overwrites_a_record_with_the_same_run_id(tmp_path: Path) -> None:
    store = Store(tmp_path)
    first = make_record(status="success", run_id="20240506T070800Z-alexnet-00000000")
    second = make_record(status="failed", run_id="20240506T070800Z-alexnet-00000000")
    first_path, second_path = store.add(first), store.add(second)
    assert first_path != second_path
    assert second_path.name == "20240506T070800Z-alexnet-00000000-1.json"
    assert load_record(first_path)["status"] == "success"
    assert load_record(second_path)["status"] == "failed"
    assert set(store.record_paths()) == {first_path, second_path}
    assert leftovers(tmp_path) == []


def test_index_has_a_row_for_each_file_even_for_a_repeated_run_id(tmp_path: Path) -> None:
    store = Store(tmp_path)
    run_id = "20240506T070800Z-alexnet-00000000"
    store.add(make_record(run_id=run_id))
    store.add(make_record(run_id=run_id, status="failed"))
    assert len(index_rows(store)) == 2
    assert store.rebuild_index() == len(index_rows(store)) == 2


def test_index_rows_match_the_records(tmp_path: Path) -> None:
    store = Store(tmp_path)
    records = [make_record("alexnet", second=1), make_record("lstm", "skipped", second=2),
               make_record("hep_cnn", "failed", second=3)]
    paths = [store.add(r) for r in records]
    expected = sorted((r["run_id"], p.relative_to(tmp_path).as_posix(), r["status"],
                       r["spec"]["workload"], "tiny", 1, r["spec_key"])
                      for r, p in zip(records, paths, strict=True))
    assert index_rows(store) == expected


def test_rebuild_index_after_deleting_it_gives_the_same_rows(tmp_path: Path) -> None:
    store = Store(tmp_path)
    for second, workload in enumerate(("alexnet", "lstm", "resnet50", "hep_cnn")):
        store.add(make_record(workload, second=second))
    before = index_rows(store)
    store.index_path.unlink()
    assert store.rebuild_index() == 4
    assert index_rows(store) == before


def test_rebuild_index_skips_files_that_are_not_records(tmp_path: Path) -> None:
    store = Store(tmp_path)
    store.add(make_record())
    (tmp_path / "notes.json").write_text('{"hello": 1}')
    (tmp_path / "broken.json").write_text('{"schema_version": 1, "run_')
    assert store.rebuild_index() == 1
    warnings: list[str] = []
    assert len(list(store.records(warnings))) == 1
    assert len(warnings) == 2 and all(w.startswith("skipped ") for w in warnings)


def test_record_paths_sort_by_time_and_ignore_temporaries(tmp_path: Path) -> None:
    store = Store(tmp_path)
    late = store.add(make_record("lstm", second=9))
    early = store.add(make_record("resnet50", second=1))
    (tmp_path / f"{TMP_PREFIX}abc.json").write_text("{}")
    assert store.record_paths() == [early, late]


def test_count_success_counts_successes_of_one_spec(tmp_path: Path) -> None:
    store = Store(tmp_path)
    spec = RunSpec(workload="lstm", size="tiny", batch_per_rank=4, steps=3, warmup=1)
    other = spec.replace(batch_per_rank=8)
    assert store.count_success(spec.key()) == 0
    for second, status in enumerate(("success", "success", "failed", "skipped")):
        store.add(make_record("lstm", status, second=second, spec=spec))
    store.add(make_record("lstm", second=5, spec=other))
    assert store.count_success(spec.key()) == 2
    assert store.count_success(other.key()) == 1
    assert store.count_success("0" * 16) == 0


def test_add_refuses_non_json_values_without_leaving_a_file(tmp_path: Path) -> None:
    store = Store(tmp_path)
    record = make_record()
    record["notes"] = {"bad": float("nan")}
    with pytest.raises(ValueError):
        store.add(record)
    assert list(tmp_path.iterdir()) == []


def test_a_write_that_fails_midway_leaves_no_file(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    store = Store(tmp_path)
    kept = store.add(make_record("lstm", second=1))

    def disk_full(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", disk_full)
    with pytest.raises(OSError, match="No space left"):
        store.add(make_record("alexnet", second=2))
    assert store.record_paths() == [kept]
    assert leftovers(tmp_path) == []
    assert len(index_rows(store)) == 1


def test_ensure_writable_creates_the_directory(tmp_path: Path) -> None:
    store = Store(tmp_path / "a" / "b")
    store.ensure_writable()
    assert store.root.is_dir()
    assert list(store.root.iterdir()) == []


def test_ensure_writable_rejects_a_path_under_a_file(tmp_path: Path) -> None:
    blocker = tmp_path / "afile"
    blocker.write_text("keep me")
    with pytest.raises(UsageError, match="--out .*afile/sub: not writable"):
        Store(blocker / "sub").ensure_writable()
    assert blocker.read_text() == "keep me"


def test_write_atomic_replaces_unless_exclusive(tmp_path: Path) -> None:
    target = tmp_path / "x.json"
    write_atomic(target, "one")
    write_atomic(target, "two")
    assert target.read_text() == "two"
    with pytest.raises(FileExistsError):
        write_atomic(target, "three", exclusive=True)
    assert target.read_text() == "two"
    assert leftovers(tmp_path) == []


def test_store_files_are_indented_json_with_a_trailing_newline(tmp_path: Path) -> None:
    path = Store(tmp_path).add(make_record())
    text = path.read_text()
    assert text.endswith("\n")
    assert json.loads(text)["schema_version"] == 1
    # the index is dtbench's own, in its cache: the store holds the record files alone
    assert Store(tmp_path).index_path.exists()
    assert sorted(p.name for p in tmp_path.rglob("*") if p.is_file()) == [path.name]


def test_reconcile_adds_missing_rows_and_drops_rows_of_deleted_files(tmp_path: Path) -> None:
    store = Store(tmp_path)
    first = store.add(make_record("alexnet"))
    store.add(make_record("lstm"))
    store.index_path.unlink()
    assert store.reconcile_index() == 2
    assert store.reconcile_index() == 0
    (tmp_path / "broken.json").write_text("{", encoding="utf-8")
    assert store.reconcile_index() == 0  # a damaged file is never indexed
    first.unlink()
    assert store.reconcile_index() == 1
    assert [row[1] for row in index_rows(store)] == [p.relative_to(tmp_path).as_posix()
                                                     for p in store.record_paths()
                                                     if p.name != "broken.json"]


def test_reconcile_keeps_rows_it_did_not_write(tmp_path: Path) -> None:
    store = Store(tmp_path)
    store.add(make_record("alexnet"))
    other = Store(tmp_path)
    other.add(make_record("lstm"))  # a concurrent writer's row: must survive reconciling
    assert store.reconcile_index() == 0
    assert len(index_rows(store)) == 2


def test_reconcile_rebuilds_an_unreadable_index(tmp_path: Path) -> None:
    store = Store(tmp_path)
    store.add(make_record("alexnet"))
    store.index_path.write_bytes(b"not a database" * 100)
    assert store.reconcile_index() == 1
    assert len(index_rows(store)) == 1


# The index's columns before run fields were declared once (what stores on disk may hold).
OLD_COLUMNS = ("run_id", "path", "created_at", "status", "workload", "size", "backend", "comm",
               "launcher", "precision", "world_size", "mode", "spec_key", "suite")


def test_an_index_with_other_columns_is_rebuilt_from_the_files(tmp_path: Path) -> None:
    from harness.store.directory import INDEX_COLUMNS

    store = Store(tmp_path)
    record = make_record("alexnet")
    store.add(record)
    store.index_path.unlink()
    connection = sqlite3.connect(store.index_path)
    connection.execute(f"CREATE TABLE runs ({', '.join(OLD_COLUMNS)}, PRIMARY KEY (path))")
    connection.execute(f"INSERT INTO runs VALUES ({', '.join('?' for _ in OLD_COLUMNS)})",
                       ("stale", "gone.json", "", "success", *[None] * 10))
    connection.commit()
    connection.close()
    assert store.count_success(record["spec_key"]) == 1
    connection = sqlite3.connect(store.index_path)
    try:
        names = tuple(row[1] for row in connection.execute(
            f"PRAGMA table_info({INDEX_TABLE})"))
        tables = [row[0] for row in connection.execute("SELECT name FROM sqlite_master")]
    finally:
        connection.close()
    assert names == INDEX_COLUMNS and "runs" not in tables
    assert [row[0] for row in index_rows(store)] == [record["run_id"]]
    assert store.reconcile_index() == 0


def test_the_baseline_is_a_one_rank_run_of_the_same_workload_and_precision(
        tmp_path: Path) -> None:
    store = Store(tmp_path)
    one = RunSpec(workload="lstm", size="tiny", batch_per_rank=8, steps=3, warmup=1)
    store.add(make_record(spec=one.replace(precision="bf16"), second=1))
    store.add(make_record(spec=one, second=2))
    two = one.replace(nproc_per_node=2, comm="gloo")
    found = store.find_baseline(two)
    assert found is not None and found["spec"]["precision"] == "fp32"
    assert store.find_baseline(two.replace(size="small")) is None


def test_records_go_under_their_machine_and_measured_commit(tmp_path: Path) -> None:
    """Two machines and two commits: a folder per machine, one per commit inside it (a record
    without a commit goes under its day); the flat records of an older store still count."""
    store = Store(tmp_path)
    zen3 = {"cpu_vendor": "AuthenticAMD", "cpu_model": "AMD EPYC", "cpu_family": 25,
            "cpu_model_number": 1, "cpu_cores": 2}
    named = make_record("alexnet", second=1)
    named["machine"] = {**zen3, "name": "ci runner #2"}
    named["code"] = {"commit": "0123456789abcdef0123", "branch": "main", "dirty": False}
    dated = make_record("lstm", second=2)
    dated["machine"] = dict(zen3)
    old = make_record("hep_cnn", second=3)
    (tmp_path / f"{old['run_id']}.json").write_text(json.dumps(old), encoding="utf-8")
    paths = [store.add(named), store.add(dated)]
    assert [p.relative_to(tmp_path).parent.as_posix() for p in paths] == [
        "ci-runner-2/0123456789ab", f"{_slug(machine_label(zen3))}/2024-05-06"]
    assert {p.name for p in store.record_paths()} == {f"{r['run_id']}.json"
                                                      for r in (named, dated, old)}

"""A directory store's index is dtbench's own (harness/store/index.py): kept in the cache,
never in the store; a link there, or an index holding a trigger or a view, is thrown away and
rebuilt; a file is parsed without validation only while its size, times and inode are those it
was validated with; rows naming paths outside the store are never read."""
from __future__ import annotations

import copy
import hashlib
import json
import os
import sqlite3
from pathlib import Path

import pytest

from harness.store.directory import Store
from harness.store.index import INDEX_TABLE
from harness.store.sources import catalog_inputs

GOLDEN = json.loads((Path(__file__).resolve().parents[1] / "golden" / "record_v1.json")
                    .read_text())


def _store(root: Path, count: int = 2) -> Store:
    store = Store(root)
    for index in range(count):
        store.add({**copy.deepcopy(GOLDEN), "run_id": f"20240102T030405Z-hep_cnn-i{index}"})
    return store


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_the_index_lives_in_the_cache_keyed_by_the_real_path(tmp_path: Path) -> None:
    store = _store(tmp_path / "store")
    (tmp_path / "alias").symlink_to(tmp_path / "store")
    assert Store(tmp_path / "alias").index_path == store.index_path
    assert os.environ["DTBENCH_CACHE_DIR"] in str(store.index_path)
    assert not any(p.suffix == ".sqlite" for p in store.root.rglob("*"))


def test_a_symlinked_index_is_replaced_and_its_target_left_alone(tmp_path: Path) -> None:
    store = _store(tmp_path / "store")
    other = tmp_path / "other.db"
    connection = sqlite3.connect(other)
    connection.execute(f"CREATE TABLE {INDEX_TABLE} (keep)")
    connection.execute(f"INSERT INTO {INDEX_TABLE} VALUES ('theirs')")
    connection.commit()
    connection.close()
    before = _digest(other)
    store.index_path.unlink()
    store.index_path.symlink_to(other)
    assert len(Store(store.root).summary_rows()) == 2
    assert not store.index_path.is_symlink() and _digest(other) == before
    assert not Path(f"{other}-wal").exists()


@pytest.mark.parametrize("foreign", [
    f"CREATE TRIGGER t AFTER DELETE ON {INDEX_TABLE} BEGIN SELECT 1; END",
    f"CREATE VIEW v AS SELECT * FROM {INDEX_TABLE}",
    "CREATE TABLE other (x)"])
def test_an_index_holding_anything_else_is_rebuilt(foreign: str, tmp_path: Path) -> None:
    store = _store(tmp_path / "store")
    store.reconcile_index()
    connection = sqlite3.connect(store.index_path)
    connection.execute(foreign)
    connection.execute(f"INSERT INTO {INDEX_TABLE} (run_id, path) VALUES ('forged', "
                       "'../outside/creds.json')")
    connection.commit()
    connection.close()
    rows = Store(store.root).summary_rows()
    assert sorted(row["run_id"] for row in rows) == [f"20240102T030405Z-hep_cnn-i{i}"
                                                      for i in range(2)]
    connection = sqlite3.connect(store.index_path)
    try:
        kinds = sorted(row[0] for row in connection.execute("SELECT type FROM sqlite_master"))
    finally:
        connection.close()
    assert kinds == ["index", "table"]


def test_a_file_changed_with_its_size_and_mtime_kept_is_validated_again(
        tmp_path: Path) -> None:
    """A tar round trip, or a forger, keeps whole-second mtimes: the change time and inode
    tell the change."""
    store = _store(tmp_path / "store", 1)
    (path,) = store.record_paths()
    store.summary_rows()
    status = path.stat()
    forged = json.dumps({**GOLDEN, "metrics": "not a list"})
    path.write_text(forged.ljust(status.st_size)[:status.st_size])
    os.utime(path, ns=(status.st_atime_ns, status.st_mtime_ns))
    assert (path.stat().st_size, path.stat().st_mtime_ns) == (status.st_size, status.st_mtime_ns)
    catalog = catalog_inputs([str(store.root)])
    assert catalog.load(catalog.rows) == []
    assert any(path.name in warning for warning in catalog.warnings)


def test_rows_naming_paths_outside_the_store_are_never_read(tmp_path: Path) -> None:
    store = _store(tmp_path / "store", 1)
    secret = tmp_path / "creds.json"
    secret.write_text(json.dumps({**GOLDEN, "run_id": "20240102T030405Z-x-creds"}))
    rows = [{"run_id": "x", "path": name, "file_bytes": None}
            for name in ("../creds.json", str(secret), "")]
    warnings: list[str] = []
    assert list(store.load_rows(rows, warnings)) == [] and len(warnings) == 3
    assert store.record_text("../creds.json") is None


def test_an_unwritable_cache_keeps_the_index_in_memory(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    store = _store(tmp_path / "store")
    blocked = tmp_path / "cache-is-a-file"
    blocked.write_text("")
    monkeypatch.setenv("DTBENCH_CACHE_DIR", str(blocked))
    reader = Store(store.root)
    assert len(reader.summary_rows()) == 2 and reader.count_success(GOLDEN["spec_key"]) == 2
    assert blocked.read_text() == "" and not any(
        p.suffix == ".sqlite" for p in store.root.rglob("*"))

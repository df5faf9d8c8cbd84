"""A store with damaged and foreign files beside a valid record.

`report` and `compare` (through load_inputs), `Store.records` and `Store.rebuild_index` all
keep the valid record and skip every other file; load_inputs and Store.records name each
skipped file in one warning.
"""
from __future__ import annotations

import json
import os
import random
import sqlite3
from pathlib import Path

import pytest

from harness.core.files import TMP_PREFIX
from harness.store.directory import Store
from harness.store.index import INDEX_TABLE
from harness.store.sources import catalog_inputs, load_inputs

GOLDEN_PATH = Path(__file__).resolve().parents[1] / "golden" / "record_v1.json"
GOLDEN_TEXT = GOLDEN_PATH.read_text(encoding="utf-8")
GOLDEN = json.loads(GOLDEN_TEXT)


def _damage(root: Path) -> list[str]:
    """Write every kind of damaged or foreign file into `root`; returns their names."""
    truncated = json.dumps({**GOLDEN, "run_id": "truncated"}, indent=1)
    files = {
        "truncated.json": truncated[: len(truncated) // 2],
        "random.json": random.Random(0).randbytes(512),
        "future.json": json.dumps({**GOLDEN, "run_id": "future", "schema_version": 99}),
        "hello.json": json.dumps({"hello": 1}),
        "numbers.json": json.dumps([1, 2, 3]),
        "empty.json": "",
        "nan-value.json": json.dumps({**GOLDEN, "run_id": "nan", "metrics": [
            {"name": "throughput", "unit": "samples/s", "value": float("nan"),
             "higher_is_better": True}]}),
        "workload-list.json": json.dumps({**GOLDEN, "run_id": "wl",
                                          "spec": {**GOLDEN["spec"], "workload": ["x"]}}),
        "deep.json": "[" * 100_000,
        "huge-int.json": '{"schema_version": 1, "run_id": ' + "9" * 5000 + "}",
    }
    for name, content in files.items():
        if isinstance(content, bytes):
            (root / name).write_bytes(content)
        else:
            (root / name).write_text(content, encoding="utf-8")
    (root / "x.json").mkdir()
    (root / "y.json").symlink_to(root / "no-such-target.json")
    names = [*files, "x.json", "y.json"]
    if os.geteuid() != 0:  # root reads a mode-000 file anyway
        unreadable = root / "z.json"
        unreadable.write_text(GOLDEN_TEXT, encoding="utf-8")
        unreadable.chmod(0)
        names.append("z.json")
    return names


@pytest.fixture
def damaged_store(tmp_path: Path) -> tuple[Path, Path, list[str]]:
    root = tmp_path / "store"
    valid = Store(root).add(GOLDEN)
    names = _damage(root)
    # An in-flight temporary file of a concurrent writer is no record and no damage either.
    (root / f"{TMP_PREFIX}abc.json").write_text(GOLDEN_TEXT[:100], encoding="utf-8")
    return root, valid, names


def _named_once(warnings: list[str], names: list[str]) -> None:
    assert len(warnings) == len(names), warnings
    for name in names:
        assert len([w for w in warnings if f"/{name}" in w]) == 1, (name, warnings)
    assert all("\n" not in w for w in warnings)


def test_load_inputs_keeps_the_valid_record_and_warns_once_per_damaged_file(
        damaged_store: tuple[Path, Path, list[str]]) -> None:
    root, _, names = damaged_store
    loaded = load_inputs([str(root)])
    assert loaded.records == [GOLDEN]
    _named_once(loaded.warnings, names)
    future = next(w for w in loaded.warnings if "/future.json" in w)
    assert "upgrade dtbench" in future


def test_store_records_keeps_the_valid_record_and_warns_once_per_damaged_file(
        damaged_store: tuple[Path, Path, list[str]]) -> None:
    root, _, names = damaged_store
    warnings: list[str] = []
    assert list(Store(root).records(warnings)) == [GOLDEN]
    _named_once(warnings, names)


def test_rebuild_index_indexes_only_the_valid_record(
        damaged_store: tuple[Path, Path, list[str]]) -> None:
    root, valid, _ = damaged_store
    assert Store(root).rebuild_index() == 1
    connection = sqlite3.connect(Store(root).index_path)
    try:
        rows = connection.execute(f"SELECT run_id, path FROM {INDEX_TABLE}").fetchall()
    finally:
        connection.close()
    assert rows == [(GOLDEN["run_id"], valid.relative_to(root).as_posix())]


def test_a_file_name_that_is_no_utf8_is_read_by_every_reader(tmp_path: Path) -> None:
    """A record file whose name holds a \\xff byte (issue 52): the index held it under a
    mangled name no reader could open, so `report` (which loads indexed rows) said "no
    records" while `publish` showed one. It stays out of the index now and is read in full,
    as a loose file, by every reader."""
    store = Store(tmp_path)
    store.add({**GOLDEN, "run_id": "named"})
    (tmp_path / os.fsdecode(b"\xff-undecodable.json")).write_text(
        json.dumps({**GOLDEN, "run_id": "undecodable"}), encoding="utf-8")
    assert store.rebuild_index() == 1
    connection = sqlite3.connect(store.index_path)
    try:
        indexed = [row[0] for row in connection.execute(f"SELECT run_id FROM {INDEX_TABLE}")]
    finally:
        connection.close()
    assert indexed == ["named"]
    catalog = catalog_inputs([str(tmp_path)])
    assert sorted(r["run_id"] for r in catalog.load(catalog.rows)) == ["named", "undecodable"]
    assert not catalog.warnings
    assert sorted(r["run_id"] for r in load_inputs([str(tmp_path)]).records) == [
        "named", "undecodable"]


@pytest.mark.parametrize("odd", [{"spec_key": {"not": "a string"}}, {"spec_key": "a\udc80b"}])
def test_records_the_schema_rejects_are_neither_stored_nor_indexed(
        tmp_path: Path, odd: dict[str, object]) -> None:
    """An object where the schema says string, a lone surrogate (a JSON escape that is no
    Unicode): Store.add refuses to write them, and a file holding one stays out of the index."""
    store = Store(tmp_path)
    with pytest.raises(ValueError, match="spec_key"):
        store.add({**GOLDEN, **odd})
    assert not store.record_paths()
    (tmp_path / "odd.json").write_text(json.dumps({**GOLDEN, **odd}), encoding="utf-8")
    assert store.rebuild_index() == 0
    assert "spec_key" in load_inputs([str(tmp_path)]).warnings[0]


def test_damaged_files_given_by_name_are_warnings_too(
        damaged_store: tuple[Path, Path, list[str]]) -> None:
    root, valid, names = damaged_store
    files = [str(root / name) for name in names if (root / name).is_file()]
    loaded = load_inputs([str(valid), *files])
    assert loaded.records == [GOLDEN]
    assert len(loaded.warnings) == len(files)

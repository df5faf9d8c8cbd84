"""Reading writes nothing: report, compare, history, publish and predict leave the store they
read byte for byte as it was (no index.sqlite, no WAL file, no touched record), cold and with
the index already in dtbench's cache; an index.sqlite an older dtbench left in the store is
neither opened nor changed."""
from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from hostile_store import forged_index, record, snapshot

from harness.commands.cli import main
from harness.store.directory import LEGACY_INDEX_NAME, Store

COMMANDS = [
    ["report", "{store}"],
    ["report", "{store}", "-o", "{out}/r.html"],
    ["report", "{store}", "--by", "machine", "-o", "{out}/m.md"],
    ["compare", "{store}", "{store}"],
    ["compare", "{store}", "{store}", "--baseline-branch", "main", "--format", "md"],
    ["history", "{store}", "--metric", "step_time", "-o", "{out}/h.html"],
    ["publish", "{store}", "-o", "{out}/site"],
    ["predict", "hep_cnn", "--size", "tiny", "--calibrate-from", "{store}", "--network",
     "10GbE", "--ranks", "1,2"],
    ["predict", "--calibration", "--calibrate-from", "{store}"],
]


def _digest(found: dict[str, tuple[str, bytes | str]]) -> str:
    return hashlib.sha256(repr(sorted(found.items())).encode()).hexdigest()


@pytest.fixture
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh store a test, so that each reader is judged alone."""
    root = tmp_path_factory.mktemp("read") / "store"
    written = Store(root)
    for index in range(6):
        made = record(f"20240102T0304{index:02d}Z-hep_cnn-r{index}", second=index)
        made["code"] = {"commit": f"{index // 2 + 1}" * 40, "branch": "main", "dirty": False,
                        "ci_url": None}
        written.add(made)
    forged_index(root / LEGACY_INDEX_NAME, "m/c/none.json")
    return root


@pytest.mark.parametrize("argv", COMMANDS, ids=[" ".join(c[:3]) for c in COMMANDS])
def test_reading_leaves_the_store_byte_for_byte_unchanged(
        argv: list[str], store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "out").mkdir()
    before = _digest(snapshot(store))
    for attempt in ("cold", "warm"):
        if attempt == "cold":
            Store(store).index_path.unlink(missing_ok=True)
        code = main([word.format(store=store, out=tmp_path / "out") for word in argv])
        err = capsys.readouterr().err
        assert code == 0, err
        assert _digest(snapshot(store)) == before, attempt
    assert not [p for p in store.rglob("*") if p.name.endswith(("-wal", "-shm", "-journal"))]

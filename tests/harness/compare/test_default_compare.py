"""`dtbench compare` with no paths compares the two latest versions of the code in the store
`run` writes (issue 51 item 1: report, compare, history and publish read that store when given
no path)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from harness.commands.cli import main
from tests.harness.compare.test_compare import make_record, scaled, steady_steps, write


def at(record: dict[str, Any], commit: str, created: str) -> dict[str, Any]:
    record["code"] = {**(record.get("code") or {}), "commit": commit, "dirty": False}
    record["created_at"] = created
    return record


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "mine"
    monkeypatch.setenv("DTBENCH_STORE", str(folder))
    return folder


def test_no_paths_compare_the_two_latest_versions(store: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """Three versions: the oldest is left out; the newest, 12% slower, is a regression
    against the one before it, and stderr names the two versions compared."""
    first = make_record("20240101T000000Z-a", steady_steps(seed=1))
    middle = make_record("20240102T000000Z-b", steady_steps(seed=2))
    newest = scaled(make_record("20240103T000000Z-c", steady_steps(seed=3)),
                    "20240103T000000Z-c", "step_time", 1.12)
    newest = scaled(newest, "20240103T000000Z-c", "throughput", 1 / 1.12)
    for record, commit, day in ((first, "a" * 40, "2024-01-01"),
                                (middle, "b" * 40, "2024-01-02"),
                                (newest, "c" * 40, "2024-01-03")):
        write(store / f"{record['run_id']}.json", at(record, commit, f"{day}T00:00:00Z"))
    assert main(["compare"]) == 1
    captured = capsys.readouterr()
    assert captured.out.startswith("regression: ")
    assert f"baseline {'b' * 12}, candidate {'c' * 12}" in captured.err
    assert "a" * 12 not in captured.err


def test_one_version_or_one_path_is_exit_2(store: Path, tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    record = at(make_record("20240101T000000Z-a", steady_steps()), "a" * 40,
                "2024-01-01T00:00:00Z")
    path = write(store / "one.json", record)
    assert main(["compare"]) == 2
    assert "one version of the code" in capsys.readouterr().err
    assert main(["compare", path]) == 2
    assert "name both BASELINE and CANDIDATE, or neither" in capsys.readouterr().err


def test_no_store_yet_is_exit_2_saying_where(store: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare"]) == 2
    assert f"{store}: no store yet" in capsys.readouterr().err

"""results/: the published records regenerate results/README.md byte for byte."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from harness.commands.cli import main
from harness.records.record import load_record

ROOT = Path(__file__).resolve().parents[3]
RESULTS = ROOT / "results"


def published_records() -> list[Path]:
    """The record files committed under results/ (a working tree may hold more: `dtbench run`
    writes there by default, and those are not published)."""
    try:
        listed = subprocess.run(["git", "ls-files", "results"], cwd=ROOT, capture_output=True,
                                text=True, check=True, timeout=60).stdout.split()
    except (OSError, subprocess.SubprocessError):
        return sorted(RESULTS.glob("*.json"))
    return sorted(ROOT / name for name in listed if name.endswith(".json"))


def test_results_hold_quick_suite_comm_sweep_and_scaling_records() -> None:
    records = [load_record(path) for path in published_records()]
    assert records, "no published records under results/"
    suites = {r["spec"].get("suite") for r in records}
    assert {"quick", "scaling"} <= suites
    assert any(r["spec"].get("task") == "comm" for r in records)
    assert any(m["name"] == "scaling_efficiency" for r in records for m in r["metrics"])
    assert all(r["status"] == "success" for r in records)


def test_results_readme_regenerates_identically(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    copy = tmp_path / "results"
    copy.mkdir()
    for path in published_records():
        shutil.copy2(path, copy / path.name)
    monkeypatch.chdir(tmp_path)
    assert main(["report", "results/", "-o", "results/README.md"]) == 0
    regenerated = (copy / "README.md").read_bytes()
    assert regenerated == (RESULTS / "README.md").read_bytes()

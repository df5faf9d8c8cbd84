"""`dtbench report --by machine`: machines as columns, ratios to a reference, systems."""
from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest

from harness.commands.cli import main

TINY = ["-w", "hep_cnn", "--size", "tiny", "--steps", "2", "--warmup", "1", "--threads", "1",
        "-q"]


@pytest.fixture(scope="module")
def two_stores(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("machines")
    for name in ("a", "b"):
        assert main(["run", *TINY, "--machine", name, "--out", str(root / name)]) == 0
    return root / "a", root / "b"


def test_two_machines_are_two_columns(two_stores: tuple[Path, Path],
                                      capsys: pytest.CaptureFixture[str]) -> None:
    a, b = two_stores
    capsys.readouterr()
    assert main(["report", str(a), str(b), "--by", "machine"]) == 0
    text = capsys.readouterr().out
    header = next(line for line in text.splitlines() if line.startswith("| workload"))
    assert [c.strip() for c in header.strip().strip("|").split("|")][-2:] == ["a", "b"]
    row = next(line for line in text.splitlines() if line.startswith("| hep\\_cnn"))
    assert "×" in row.split("|")[-2]  # b's ratio to the reference a
    assert "### Systems" in text and "microarchitecture" in text


def test_the_reference_machine_can_be_chosen(two_stores: tuple[Path, Path],
                                             capsys: pytest.CaptureFixture[str]) -> None:
    a, b = two_stores
    capsys.readouterr()
    assert main(["report", str(a), str(b), "--by", "machine", "--reference", "b"]) == 0
    header = next(line for line in capsys.readouterr().out.splitlines()
                  if line.startswith("| workload"))
    assert [c.strip() for c in header.strip().strip("|").split("|")][-2:] == ["b", "a"]
    assert main(["report", str(a), "--by", "machine", "--reference", "zz"]) == 2
    assert "no such machine" in capsys.readouterr().err


def test_by_machine_csv_and_html(two_stores: tuple[Path, Path], tmp_path: Path) -> None:
    a, b = two_stores
    assert main(["report", str(a), str(b), "--by", "machine", "-o",
                 str(tmp_path / "m.csv")]) == 0
    rows = list(csv.DictReader(io.StringIO((tmp_path / "m.csv").read_text())))
    assert {row["machine"] for row in rows} == {"a", "b"}
    assert all(row["commit"] for row in rows)
    assert {"throughput", "peak_memory"} <= {row["metric"] for row in rows}
    assert main(["report", str(a), str(b), "--by", "machine", "-o",
                 str(tmp_path / "m.html")]) == 0
    page = (tmp_path / "m.html").read_text()
    assert "<th scope=\"col\">a</th>" in page and "<th scope=\"col\">b</th>" in page

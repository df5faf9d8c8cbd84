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
    headings = [line for line in text.splitlines() if line.startswith("#") and "Systems" in line]
    # the machines come last, after the answer and the details
    assert headings == ["### Systems"] and "microarchitecture" in text
    assert text.index("## Results") < text.index("## Machines side by side") < \
        text.index("### Systems")


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


def _on(record: dict, machine: dict) -> dict:
    record["machine"] = {**record["machine"], **machine}
    return record


def test_rows_are_experiments_machines_without_a_row_are_named_units_as_elsewhere() -> None:
    """A gloo and an MPI run of one model are two rows (they were one cell); the reference is
    the identified machine with the most records, not the unidentifiable one with more; a
    machine of kernel records alone is named under every table; MFU in %, memory in GiB."""
    from harness.report.machines import by_machine
    from harness.report.markdown import render
    from harness.report.view import views_of
    from harness.spec.kinds import KERNEL
    from tests.harness.report.report_records import training

    unknown = {"cpu_family": None, "cpu_model_number": None, "cpu_vendor": "AuthenticAMD",
               "cpu_model": "AMD EPYC"}
    records = [_on(training(f"u{i}", speed=1.0 + i / 10), unknown) for i in range(3)]
    records += [_on(training("g", world_size=2, comm="gloo"), {"name": "box"}),
                _on(training("m", world_size=2, comm="mpi"), {"name": "box"}),
                _on(training("b1"), {"name": "box"})]
    kernel = _on(training("k"), {"name": "kernels-only"})
    kernel["spec"]["task"] = KERNEL.task
    text = render(by_machine(views_of([*records, kernel]), None, summary="", regenerate=""))
    assert "beside every machine but the reference (box)" in text
    throughput = text.split("### throughput (samples/s)")[1].split("###")[0]
    two = [line for line in throughput.splitlines() if line.startswith("| hep\\_cnn")
           and "|     2 |" in line]
    assert len(two) == 2 and "| gloo |" in two[0] and "| mpi  |" in two[1]
    assert "kernels-only: no row: no training record: 1 kernel record(s) only." in throughput
    assert "### MFU (%)" in text and "### peak memory (MiB)" in text
    assert "| 18.00 |" in text.split("### MFU (%)")[1]  # 0.18 of the peak
    assert "| 512.0 |" in text.split("### peak memory (MiB)")[1]
    assert [line for line in text.splitlines() if "Systems" in line] == ["## Systems"]

"""The report leads with the answer (issue 51 item 2): with several machines, a results table
as MLPerf publishes one (machines as rows, workloads as columns, ratios to the reference, a
geometric mean) within the first screen; with one, a row per experiment with its headline
figures; run ids only in the appendix; `--by machine` the default with two machines or more.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from report_records import collective, training, write_store

from harness.commands.cli import main
from harness.report.markdown import md_escape

ZEN4 = ["avx", "avx2", "avx512_bf16", "avx512_vnni", "avx512bw", "avx512f", "avx512vl", "f16c",
        "fma", "sse4_2"]
ZEN1 = ["avx", "avx2", "f16c", "fma", "sse4_2"]


def on(record: dict[str, Any], name: str, flags: list[str] | None = None) -> dict[str, Any]:
    record["machine"] = {**record["machine"], "name": name,
                         **({"isa_flags": flags} if flags is not None else {})}
    return record


def fleet() -> list[dict[str, Any]]:
    """hep_cnn and alexnet in fp32 and bf16 on "fast" (its CPU has bf16 instructions, two
    runs of each), once each on "slow" (no bf16 instructions; its bf16 alexnet skipped),
    hep_cnn fp32 alone on "third", and a collective of "comm-only"."""
    records = []
    for workload in ("hep_cnn", "alexnet"):
        for precision, speed in (("fp32", 1.0), ("bf16", 2.0)):
            for repeat in range(2):
                records.append(on(training(f"2024010{repeat + 2}T0300{len(records):02d}Z-fast",
                                           workload=workload, precision=precision,
                                           speed=speed * (1 + repeat / 50)), "fast", ZEN4))
            slow = on(training(f"20240104T0300{len(records):02d}Z-slow", workload=workload,
                               precision=precision, speed=speed / 4), "slow", ZEN1)
            if workload == "alexnet" and precision == "bf16":
                slow.update(status="skipped", error="bf16 conv on this CPU: too slow",
                            metrics=[])
            records.append(slow)
    records.append(on(training("20240105T030000Z-third", speed=0.5), "third"))
    records.append(on(collective("20240105T030100Z-comm"), "comm-only"))
    return records


def report_text(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    assert main(["report", *args]) == 0
    return capsys.readouterr().out


def cells(line: str) -> list[str]:
    return [cell.strip() for cell in re.split(r"(?<!\\)\|", line)[1:-1]]


def tables(text: str) -> list[list[list[str]]]:
    """Every table of a Markdown text: its rows of cells, the header first, no rule."""
    found, current = [], []
    for line in text.splitlines():
        if line.startswith("|"):
            if not set(line) <= set("|-: "):
                current.append(cells(line))
        elif current:
            found.append(current)
            current = []
    return found


@pytest.fixture
def store(tmp_path: Path) -> Path:
    return write_store(tmp_path / "store", fleet())


def test_several_machines_lead_with_a_results_table_of_machines_and_workloads(
        store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = report_text(capsys, str(store))
    first = "\n".join(text.splitlines()[:40])
    results = tables(first)
    assert results, first
    header, *rows = results[0]
    assert header == ["machine", "alexnet", "hep\\_cnn", "geometric mean"]
    # the reference (most successful runs) first, then the others, each with its ratio
    assert [row[0] for row in rows] == ["fast", "slow", "third"]
    assert rows[0][-1] == "reference"
    # slow: a quarter of fast's speed in both workloads, one run against two: no interval
    assert [row[1:] for row in rows[1:2]] == [["400.0 (0.25×)", "400.0 (0.25×)", "0.25×"]]
    # third ran hep_cnn only: the geometric means are over the workload every machine ran
    assert rows[2][1:] == ["-", "800.0 (0.50×)", "0.50×"]
    assert "over the 1 workload(s) every machine here ran (hep\\_cnn)" in first
    assert "### throughput (samples/s): precision fp32" in first
    assert "comm-only: no row: no training record: 1 comm record(s) only." in \
        first.replace("\\", "")
    # the default with several machines is the side-by-side view, not a row per record
    assert "## Machines side by side" in text and "## Training" not in text


def test_a_precision_the_cpu_only_emulates_is_marked(store: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    text = report_text(capsys, str(store)).replace("\\", "")
    bf16 = text.split("### throughput (samples/s): precision bf16")[1].split("###")[0]
    rows = {row[0]: row for row in tables(bf16)[0][1:]}
    assert set(rows) == {"fast", "slow (bf16 emulated)"}
    # between-run intervals where fast ran twice: a two-run side against a one-run side
    assert rows["slow (bf16 emulated)"][2] == "800.0 (0.25×)"
    # the skipped run is named with its reason
    assert "slow, alexnet: skipped: bf16 conv on this CPU: too slow" in bf16
    side = text.split("## Machines side by side")[1]
    assert "(emulated)" in side and "fast" in side
    by_record = report_text(capsys, str(store), "--by", "record").replace("\\", "")
    assert "| bf16 (emulated) |" in by_record and "| bf16            |" in by_record


def test_no_run_id_outside_the_appendix(store: Path, tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    ids = [md_escape(record["run_id"]) for record in fleet()]
    for by in ("machine", "record"):
        text = report_text(capsys, str(store), "--by", by)
        assert not [run for run in ids if run in text], by
        assert "## Records" not in text and "dtbench report --runs" in text
    listed = report_text(capsys, str(store), "--runs")
    appendix = listed[listed.index("## Records"):]
    assert all(run in appendix for run in ids) and not any(run in listed[:listed.index(
        "## Records")] for run in ids)
    assert "Regenerate with: dtbench report" in appendix and "--runs" in appendix
    assert main(["report", str(store), "-o", str(tmp_path / "r.html")]) == 0
    page = (tmp_path / "r.html").read_text()
    details = page[page.index("<details>"):page.index("</details>")]
    assert all(record["run_id"] in details for record in fleet())
    assert not any(record["run_id"] in page.replace(details, "") for record in fleet())


def test_one_machine_leads_with_a_row_per_experiment(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]
                                                     ) -> None:
    records = [record for record in fleet() if record["machine"]["name"] == "fast"]
    text = report_text(capsys, str(write_store(tmp_path / "one", records)))
    lead = text.split("## Results")[1].split("\n## ")[0]
    header, *rows = tables(lead)[0]
    # two runs of each of four experiments: four rows, the headline figures in units; what
    # every row shares (the same peak memory, the status) is a line under the table
    assert header == ["workload", "precision", "throughput (samples/s)", "MFU (%)"]
    assert [row[:2] for row in rows] == [["alexnet", "fp32"], ["alexnet", "bf16"],
                                         ["hep\\_cnn", "fp32"], ["hep\\_cnn", "bf16"]]
    # two runs: their median and range
    assert rows[0][2] == r"1616 \[1600, 1632\]"
    assert "Every row: peak memory (MiB) 512.0, status success." in lead.replace("\n", " ")
    assert "## Training" in text and "## Machines side by side" not in text


def test_the_published_results_lead_with_every_training_machine(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """`dtbench report results/` on the committed records: within 40 lines a table whose rows
    are every machine that trained, each with its ratio to the reference; no run id in the
    first 100 lines."""
    import shutil

    from test_published_results import RESULTS, published_records

    from harness.records.record import load_record

    copy = tmp_path / "results"
    paths = published_records()
    for path in paths:
        (copy / path.relative_to(RESULTS)).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, copy / path.relative_to(RESULTS))
    monkeypatch.chdir(tmp_path)
    text = report_text(capsys, "results/")
    lines = text.splitlines()
    trained = {load_record(path)["machine"].get("microarchitecture") for path in paths
               if load_record(path)["spec"].get("task") in (None, "train")}
    first = tables("\n".join(lines[:40]))[0]
    assert first[0][0] == "machine" and first[0][-1] == "geometric mean"
    named = [row[0] for row in first[1:]]
    assert len(named) == len(trained) >= 2
    assert all(any(arch in row for row in named) for arch in trained)
    assert all("×" in cell for row in first[2:] for cell in row[1:] if cell != "-")
    ids = {path.stem for path in paths}
    assert not [line for line in lines[:100] if any(run in line.replace("\\", "")
                                                    for run in ids)]


def test_a_figure_measured_on_a_busy_machine_is_marked_in_the_lead(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The lead table marks a cell whose run was measured on a busy machine, as every other
    table does, and says under it what the mark means; quiet cells stay unmarked."""
    records = fleet()
    slow = next(r for r in records if r["machine"]["name"] == "slow"
                and r["spec"]["workload"] == "hep_cnn" and r["spec"]["precision"] == "fp32")
    slow["load"] = {"busy": True, "busy_reason": "other processes took 40% of the CPU time"}
    text = report_text(capsys, str(write_store(tmp_path / "store", records)))
    first = tables(text)[0]
    column = first[0].index("hep\\_cnn")
    marked = [row[0] for row in first[1:] if row[column].endswith("(busy)")]
    assert len(marked) == 1 and "slow" in marked[0]
    assert not [row for row in first[1:] if row[first[0].index("alexnet")].endswith("(busy)")]
    assert "(busy): a run in the figure was measured while other processes" in text

"""What a report's tables say and how (issue 51 item 2, issue 53 item 4): headings from the
metric catalogue and the run-field declarations, one unit per metric in the whole report, a
machine column wherever rows come from several machines, a column the same in every row as a
line under its table, and a time breakdown that says what the phase clock cannot separate."""
from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

import pytest
from report_records import collective, standard_set, training, write_store

from harness.commands.cli import main
from harness.records.record import Metric
from harness.report.document import Table, folded

HARNESS = Path(__file__).resolve().parents[3] / "harness"


def report_text(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    assert main(["report", *args]) == 0
    return capsys.readouterr().out


def headers(text: str) -> list[list[str]]:
    """The header row of every Markdown table in the text."""
    lines = text.splitlines()
    return [[c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
            for line, nxt in zip(lines, lines[1:], strict=False)
            if line.startswith("|") and nxt.startswith("|") and set(nxt) <= set("|-: ")]


def section(text: str, title: str) -> str:
    return text.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]


def test_a_column_the_same_in_every_row_is_a_line_under_the_table() -> None:
    table = Table("t", ["machine", "backend", "ranks", "throughput (samples/s)"],
                  [["a", "cpu", "1", "10"], ["b", "cpu", "2", "20"]], [False, False, True, True],
                  footnotes=["Every row: size small."])
    done = folded(table)
    assert done.columns == ["machine", "ranks", "throughput (samples/s)"]
    assert done.rows == [["a", "1", "10"], ["b", "2", "20"]] and done.numeric == [False, True,
                                                                                  True]
    assert done.footnotes == ["Every row: backend cpu, size small."]
    # one row, or a table that keeps its columns: unchanged; the first column always stays
    assert folded(Table("t", ["a", "b"], [["x", "y"]], [False, False])).columns == ["a", "b"]
    assert folded(Table("t", ["a", "b"], [["x", "y"], ["x", "y"]], [False, False])
                  ).columns == ["a"]
    kept = Table("t", ["a", "b", "c"], [["x", "y", "z"], ["w", "y", "z"]], [False] * 3,
                 fold_until=2)
    assert folded(kept).columns == ["a", "c"]


def test_headings_are_words_with_one_unit_each(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    """No heading is a raw metric or field name; "tokens/s (tokens/s)" is gone; a record's
    first step reads as the catalogue says."""
    gpt = training("20240102T030407Z-gpt", workload="gpt", extra=[
        Metric("tokens_per_s", "tokens/s", 51200.0, True),
        Metric("first_step_time", "s", 0.5, False),
        Metric("comm_payload_bytes", "bytes", 2.0**20, False)])
    store = write_store(tmp_path / "s", [*standard_set(), gpt])
    for by in ("record", "machine"):
        text = report_text(capsys, str(store), "--by", by)
        found = [heading for header in headers(text) for heading in header]
        assert found and not [h for h in found if "_" in h.replace("\\_", "")], by
        assert "tokens/s (tokens/s)" not in text and "first\\_step" not in text
    text = report_text(capsys, str(store), "--by", "record")
    gpt_table = section(text, "Training").split("### gpt")[1].split("###")[0]
    assert "token throughput (tokens/s)" in gpt_table and "first step (ms)" in gpt_table
    assert "collective payload" not in text  # a detail of the Strategies section, not a column


def test_the_run_summary_reads_its_headings_from_the_catalogue() -> None:
    from harness.run.summary_table import summary_table

    record = training("20240102T030405Z-x")
    header = summary_table([record]).splitlines()[0].split("  ")
    words = [cell.strip() for cell in header if cell.strip()]
    assert words == ["workload", "size", "backend", "precision", "ranks", "batch/rank",
                     "status", "throughput (samples/s)", "step time (ms)",
                     "achieved (GFLOP/s)", "MFU (%)", "peak memory (MiB)",
                     "time to train (s)", "quality"]


def test_ranks_is_said_once() -> None:
    """world_size's heading is the run-field declaration's; no module of the report, publish
    or the run summary spells it again."""
    from harness.spec.headings import field_heading

    assert field_heading("world_size") == "ranks" and field_heading("nnodes") == "nodes"
    assert field_heading("channels_last") == "channels last"
    found = []
    for path in [*sorted((HARNESS / "report").rglob("*.py")), HARNESS / "run" / "summary_table.py",
                 *sorted((HARNESS / "publish").rglob("*.py"))]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and node.value in ("ranks", "batch/rank"):
                found.append(f"{path.relative_to(HARNESS)}:{node.lineno}")
    assert found == []


def test_collective_latency_has_one_unit_in_the_whole_report(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fast, slow = collective("20240102T030700Z-a"), collective("20240102T030701Z-b", "allgather")
    next(m for m in slow["metrics"] if m["name"] == "latency")["value"] = 2e-3  # 2 ms
    text = report_text(capsys, str(write_store(tmp_path / "s", [fast, slow])))
    latency = [h for header in headers(text) for h in header if h.startswith("latency")]
    assert latency == ["latency (ms)", "latency (ms)"]


def _on(record: dict[str, Any], name: str) -> dict[str, Any]:
    record["machine"] = {**record["machine"], "name": name}
    return record


def kernel(run_id: str, machine: str, peak: float) -> dict[str, Any]:
    from harness.spec.kinds import KERNEL

    record = _on(training(run_id), machine)
    record["spec"].update(task=KERNEL.task, workload="kernel-gemm", family="gemm",
                          kernel="64x64x64 NN", algorithm="torch.mm", group="deepbench",
                          set="deepbench")
    record["metrics"] = [
        Metric("time", "s", 1e-3, False).as_dict(),
        Metric("kernel_flops", "FLOP", 2 * 64**3, True).as_dict(),
        Metric("kernel_bytes", "bytes", 3 * 4 * 64**2, False).as_dict(),
        Metric("effective_flops", "FLOP/s", 2 * 64**3 / 1e-3, True).as_dict(),
        Metric("peak_flops", "FLOP/s", peak, True).as_dict(),
        Metric("memory_bandwidth", "B/s", 1e10, True).as_dict()]
    return record


def breakdown(run_id: str, machine: str, source: str) -> dict[str, Any]:
    shares = {"compute": 0.9, "comm_overlapped": 0.0, "comm_exposed": 0.0, "data_wait": 0.0,
              "optimizer": 0.1, "waiting": 0.0}
    return _on(training(run_id, world_size=2, comm="gloo", extra=[
        Metric("time_breakdown", "1", 0.0, False, extra={
            "per_rank": [{"rank": r, **shares} for r in range(2)], "source": [source],
            "compute_spread": 0.01})]), machine)


def test_rows_of_several_machines_have_a_machine_column(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Kernel tables, the roofs and "Where the time goes": a machine column with two
    machines' records, none with one; phase-clock rows say what they cannot separate."""
    records = [kernel("k-a", "box-a", 1e11), kernel("k-b", "box-b", 2e11),
               breakdown("t-a", "box-a", "phase clock: collectives inside the passes count "
                         "as compute"), breakdown("t-b", "box-b", "the rank's trace")]
    text = report_text(capsys, str(write_store(tmp_path / "two", records)))
    for title in ("Kernels", "Where the time goes"):
        assert all(header[0] == "machine" for header in headers(section(text, title))), title
    roofs = section(text, "Kernels").split("### Roofs")[1].split("###")[0]
    assert "| box-a " in roofs and "| box-b " in roofs
    where = section(text, "Where the time goes")
    rows = {line.split("|")[1].strip(): line for line in where.splitlines()
            if line.startswith("| box-")}
    assert "in compute" in rows["box-a"] and "in compute" not in rows["box-b"]
    assert "Only --profile separates communication inside the passes." in \
        where.replace("\n", " ")
    alone = report_text(capsys, str(write_store(tmp_path / "one", records[::2])))
    assert not any("machine" in header for header in headers(section(alone, "Kernels")))

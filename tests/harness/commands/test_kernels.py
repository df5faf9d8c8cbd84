"""`dtbench kernels` end to end on the tiny set (one real run, shared), and what `report`
and `compare` make of kernel records; `dtbench run kernels` reaches the same code."""
from __future__ import annotations

import argparse
import copy
import csv
import io
import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from harness.commands.cli import main
from harness.microbench.kernels.runner import planned_steps
from harness.microbench.kernels.sets import get_set
from harness.records.record import load_record, metric

RunCli = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory, cli_runner: RunCli
         ) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """The tiny set run once in a real process, one thread: (store, finished process)."""
    folder = tmp_path_factory.mktemp("kernels")
    result = cli_runner("kernels", "--set", "tiny", "--threads", "1", "--out", "store",
                        "--json", "tiny.json", "-q", cwd=folder)
    assert result.returncode == 0, result.stderr[-2000:]
    return folder / "store", result


def stored(store: Path) -> list[dict[str, Any]]:
    return [load_record(path) for path in sorted(store.rglob("*.json"))]


def test_one_record_per_kernel_pass_and_algorithm(
        tiny: tuple[Path, subprocess.CompletedProcess[str]]) -> None:
    store, result = tiny
    records = stored(store)
    assert len(records) == planned_steps(get_set("tiny").cases())
    listed = json.loads((store.parent / "tiny.json").read_text())
    assert [r["run_id"] for r in listed] == [r["run_id"] for r in records]
    assert {r["status"] for r in records} == {"success", "skipped"}
    assert all(r["spec"]["threads"] == 1 for r in records)
    # The console shows the roofs, the share-of-roof tables and the fastest algorithm.
    for title in ("Roofs", "Roofline: convolution", "Roofline: GEMM", "Convolution algorithms"):
        assert title in result.stdout
    assert "Traceback" not in result.stderr


def test_report_has_a_kernel_section_and_no_kernel_in_training(
        tiny: tuple[Path, subprocess.CompletedProcess[str]],
        capsys: pytest.CaptureFixture[str]) -> None:
    store, _ = tiny
    assert main(["report", str(store)]) == 0
    out = capsys.readouterr().out
    assert "## Kernels" in out and "## Training" not in out
    for title in ("### Roofs", "### Roofline: memory bandwidth (copy, triad)",
                  "### Roofline: convolution", "### Roofline: LSTM cell",
                  "### Convolution algorithms"):
        assert title in out
    five = next(line for line in out.splitlines()
                if line.startswith("| 16x4x10x10 k6 5x5 s1 p2") and "| fwd " in line
                and "tiny 5x5" in line)
    assert "n/a" in five  # Winograd does not apply to a 5x5 kernel
    assert "not applicable: Winograd F(2x2,3x3) needs a 3x3 kernel" in out


def test_html_has_the_roofline_plot_and_csv_names_each_kernel(
        tiny: tuple[Path, subprocess.CompletedProcess[str]], tmp_path: Path) -> None:
    store, _ = tiny
    assert main(["report", str(store), "-o", str(tmp_path / "r.html")]) == 0
    page = (tmp_path / "r.html").read_text()
    assert "Roofline of the kernels" in page and "data:image/png;base64," in page
    assert main(["report", str(store), "-o", str(tmp_path / "r.csv")]) == 0
    rows = list(csv.DictReader(io.StringIO((tmp_path / "r.csv").read_text())))
    effective = [r for r in rows if r["metric"] == "effective_flops"]
    assert effective and all(r["kernel"] and r["pass"] and r["algorithm"] for r in effective)


def with_times(record: dict[str, Any], times: list[float], suffix: str) -> dict[str, Any]:
    """A copy of a kernel record with these per-call times (and the FLOP/s they imply)."""
    changed = copy.deepcopy(record)
    changed["run_id"] += suffix
    flops = metric(record, "kernel_flops")["value"]
    for entry in changed["metrics"]:
        if entry["name"] in ("time", "effective_flops"):
            entry["samples"] = times if entry["name"] == "time" else [flops / t for t in times]
            entry["value"] = sorted(entry["samples"])[len(times) // 2]
            entry.pop("stats", None)
    return changed


def test_compare_pairs_kernels_and_gates_a_slower_one(
        tiny: tuple[Path, subprocess.CompletedProcess[str]], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    store, _ = tiny
    records = stored(store)
    assert main(["compare", str(store), str(store)]) == 0
    out = capsys.readouterr().out
    # Headed by the catalogue's headings: the effective rate gated, the share of roof not.
    assert "kernel-conv" in out and "effective (" in out and "share of roof" not in out
    target = next(r for r in records if r["spec"]["algorithm"] == "im2col"
                  and r["spec"]["pass"] == "fwd" and r["status"] == "success")
    steady = [1e-3 * (1 + 0.01 * (i % 3)) for i in range(12)]
    for side, factor in (("baseline", 1.0), ("candidate", 3.0)):
        made = [with_times(r, [t * factor for t in steady], f"-{side}") if r is target else r
                for r in records]
        (tmp_path / f"{side}.json").write_text(json.dumps(made))
    assert main(["compare", str(tmp_path / "baseline.json"),
                 str(tmp_path / "candidate.json")]) == 1
    verdict = capsys.readouterr().out.split("\n\n")[0]  # the first line, and those it wraps to
    assert verdict.startswith("regression: kernel-conv ") and "im2col" in verdict


def test_run_kernels_runs_the_kernels_suite(monkeypatch: pytest.MonkeyPatch, tmp_path: Path
                                            ) -> None:
    import harness.commands.kernels as kernels

    seen: list[tuple[str, argparse.Namespace]] = []
    monkeypatch.setattr(kernels, "run_kernels",
                        lambda kernel_set, args: seen.append((kernel_set.name, args)) or 0)
    assert main(["run", "kernels", "--out", str(tmp_path / "s"), "-q"]) == 0
    assert main(["run", "kernels", "--precision", "bf16", "--threads", "1",
                 "--out", str(tmp_path / "s")]) == 0
    (name, first), (_, second) = seen
    assert name == "workloads" and first.precision == ["fp32"] and first.quiet
    assert second.precision == ["bf16"] and second.threads == 1

"""`dtbench run` end to end at tiny size: records in the store and the --json file.

The peak cache is seeded (see conftest) so these runs spend no time on GEMM peaks, and every
run uses one thread to stay light on a shared 2-core machine.
"""
from __future__ import annotations

import json
import shutil
import sqlite3
import statistics
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from harness.records.record import metric
from harness.store.directory import Store

RunCli = Callable[..., subprocess.CompletedProcess[str]]
WORKLOADS = ("alexnet", "resnet50", "hep_cnn", "lstm")
THROUGHPUT_METRICS = ("throughput", "step_time", "flops_per_sample", "achieved_flops",
                      "peak_flops", "mfu", "peak_memory")
HARNESS_KEYS = {"version", "git_commit", "dirty"}
MACHINE_KEYS = {"machine_id", "hostname", "os", "kernel", "cpu_model", "cpu_cores", "ram_bytes",
                "gpus", "nodes", "interconnect"}
SOFTWARE_KEYS = {"python", "torch", "onednn", "cuda", "cudnn", "nccl", "mpi"}
TINY = ("--size", "tiny", "--threads", "1", "-q")

pytestmark = pytest.mark.slow


def stored(root: Path) -> tuple[list[dict[str, Any]], list[str]]:
    warnings: list[str] = []
    return list(Store(root).records(warnings)), warnings


def index_count(root: Path, cache: Path) -> int:
    """The rows of the store's index, which the run kept in its cache (never in the store)."""
    from harness.store.index import INDEX_TABLE

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DTBENCH_CACHE_DIR", str(cache))
        path = Store(root).index_path
    connection = sqlite3.connect(path)
    try:
        return int(connection.execute(f"SELECT COUNT(*) FROM {INDEX_TABLE}").fetchone()[0])
    finally:
        connection.close()


@pytest.fixture(scope="module")
def throughput_run(tmp_path_factory: pytest.TempPathFactory,
                   cli_runner: RunCli) -> tuple[subprocess.CompletedProcess[str], Path]:
    """One invocation running all four workloads; the store and the --json file share a dir."""
    root = tmp_path_factory.mktemp("throughput")
    workloads = [arg for name in WORKLOADS for arg in ("-w", name)]
    result = cli_runner("run", *workloads, "--steps", "3", "--warmup", "1", *TINY,
                        "--out", str(root), "--json", str(root / "r.json"), cwd=root)
    return result, root


def test_throughput_run_exits_0_with_a_summary(throughput_run: Any) -> None:
    result, _ = throughput_run
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    for name in WORKLOADS:
        assert name in result.stdout
    assert result.stdout.count("success") == 4


def test_store_holds_four_success_records(throughput_run: Any, seeded_cache_dir: Path) -> None:
    _, root = throughput_run
    records, warnings = stored(root)
    assert sorted(r["spec"]["workload"] for r in records) == sorted(WORKLOADS)
    assert all(r["status"] == "success" and r["error"] is None for r in records)
    # The --json list sits beside the records; the store reports it and skips it.
    assert len(warnings) == 1 and "r.json" in warnings[0]
    assert index_count(root, seeded_cache_dir) == 4
    assert not list(root.glob(".tmp-*")) and not (root / "index.sqlite").exists()


def test_json_file_lists_the_same_records(throughput_run: Any) -> None:
    _, root = throughput_run
    listed = json.loads((root / "r.json").read_text())
    assert isinstance(listed, list)
    assert [r["spec"]["workload"] for r in listed] == list(WORKLOADS)
    records, _ = stored(root)
    assert sorted(listed, key=lambda r: r["run_id"]) == sorted(records, key=lambda r: r["run_id"])


@pytest.mark.parametrize("workload", WORKLOADS)
def test_record_content(throughput_run: Any, seeded_peak_flops: float, workload: str) -> None:
    from workloads import get_workload
    from workloads.flops import count_flops_per_sample

    _, root = throughput_run
    record = next(r for r in stored(root)[0] if r["spec"]["workload"] == workload)
    assert record["schema_version"] == 1
    assert record["created_at"].endswith("Z")
    assert HARNESS_KEYS <= set(record["harness"])
    assert MACHINE_KEYS <= set(record["machine"])
    assert SOFTWARE_KEYS <= set(record["software"])

    spec = record["spec"]
    assert (spec["world_size"], spec["size"], spec["steps"], spec["warmup"]) == (1, "tiny", 3, 1)
    assert spec["global_batch"] == spec["batch_per_rank"]
    assert spec["threads"] == 1 and spec["backend"] == "cpu" and spec["mode"] == "throughput"

    found = {name: metric(record, name) for name in THROUGHPUT_METRICS}
    assert all(entry is not None for entry in found.values()), found
    for entry in found.values():
        assert entry["value"] is not None and entry["value"] > 0

    steps = found["step_time"]
    assert len(steps["samples"]) == 3 and steps["stats"]["n"] == 3
    assert steps["value"] == pytest.approx(statistics.median(steps["samples"]))
    throughput = found["throughput"]["value"]
    assert throughput == pytest.approx(spec["global_batch"] / steps["value"])

    flops = found["flops_per_sample"]["value"]
    assert flops == count_flops_per_sample(get_workload(workload), "tiny")
    assert found["achieved_flops"]["value"] == pytest.approx(flops * throughput)
    assert found["peak_flops"]["value"] == seeded_peak_flops
    assert found["mfu"]["value"] == pytest.approx(flops * throughput / seeded_peak_flops)
    assert found["peak_memory"]["unit"] == "bytes" and found["peak_memory"]["value"] > 2**20


def test_resume_skips_completed_runs(throughput_run: Any, tmp_path: Path,
                                     cli_runner: RunCli) -> None:
    _, root = throughput_run
    copy = tmp_path / "store"
    shutil.copytree(root, copy)
    before = sorted(p.relative_to(copy).as_posix() for p in copy.rglob("*"))
    workloads = [arg for name in WORKLOADS for arg in ("-w", name)]
    result = cli_runner("run", *workloads, "--steps", "3", "--warmup", "1", *TINY,
                        "--out", str(copy), "--resume", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "nothing to run" in result.stdout
    assert "4 run(s) already complete" in result.stderr
    assert sorted(p.relative_to(copy).as_posix() for p in copy.rglob("*")) == before


def test_unavailable_backend_is_recorded_as_skipped(tmp_path: Path, cli_runner: RunCli) -> None:
    out = tmp_path / "store"
    result = cli_runner("run", "-w", "hep_cnn", "-n", "2", "-b", "cuda", "--comm", "nccl",
                        "--steps", "3",
                        "--warmup", "1", *TINY, "--out", str(out), "--json",
                        str(tmp_path / "r.json"), cwd=tmp_path)
    # Recorded, yet the command fails: a CUDA runner that lost its GPU must not pass CI.
    assert result.returncode == 4, result.stderr
    records, _ = stored(out)
    assert len(records) == 1
    record = records[0]
    assert record["status"] == "skipped"
    assert isinstance(record["error"], str) and record["error"].strip()
    assert "\n" not in record["error"]
    assert record["metrics"] == []
    assert record["spec"]["world_size"] == 2 and record["spec"]["comm"] == "nccl"
    assert json.loads((tmp_path / "r.json").read_text()) == records
    assert "skipped" in result.stdout


def test_time_to_train_hep_cnn(tmp_path: Path, cli_runner: RunCli) -> None:
    from mlperf_logging.compliance_checker import mlp_parser

    out = tmp_path / "store"
    result = cli_runner("run", "-w", "hep_cnn", "--mode", "ttt", *TINY, "--out", str(out),
                        cwd=tmp_path)
    assert "Traceback" not in result.stderr, result.stderr
    records, _ = stored(out)
    assert len(records) == 1
    record = records[0]
    assert record["spec"]["mode"] == "ttt"
    assert record["status"] in ("success", "failed"), record["error"]
    assert result.returncode == (0 if record["status"] == "success" else 1)

    quality = metric(record, "quality")
    assert quality is not None and quality["metric"] == "accuracy"
    assert quality["target"] == 0.7 and quality["higher_is_better"] is True
    assert {"accuracy", "auc"} <= set(quality["all"])
    if record["status"] == "success":
        assert quality["reached"] is True and quality["value"] >= 0.7
        ttt = metric(record, "time_to_train")
        assert ttt is not None and ttt["unit"] == "s" and ttt["value"] > 0
        # MLPerf rules: the clock runs until after the evaluation that reached the target.
        assert ttt["value"] >= quality["history"][-1]["seconds"]
    else:
        assert "not reached" in record["error"]
        assert metric(record, "time_to_train") is None

    keys = [event["key"] for event in record["events"]]
    assert keys.count("run_start") == 1 and keys.count("run_stop") == 1
    assert keys.index("run_start") < keys.index("run_stop")
    start = next(e for e in record["events"] if e["key"] == "run_start")
    stop = next(e for e in record["events"] if e["key"] == "run_stop")
    assert stop["time_ms"] >= start["time_ms"]

    logs = list((out / "logs").glob("*.mllog"))
    assert [p.stem for p in logs] == [record["run_id"]]
    lines, errors = mlp_parser.parse_file(str(logs[0]), ruleset="6.1.0")
    assert errors == []
    logged = [line.key for line in lines]
    assert "run_start" in logged and "run_stop" in logged
    assert "eval_accuracy" in logged and "submission_benchmark" in logged

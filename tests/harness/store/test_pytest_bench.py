"""pytest-benchmark JSON as dtbench records: conversion, stable ids, malformed files, end to end."""
from __future__ import annotations

import copy
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from harness.core.errors import SchemaError
from harness.records.record import check_record, metric
from harness.spec.specs import RunSpec
from harness.store.pytest_benchmark import is_pytest_benchmark, records_from_pytest_benchmark
from harness.store.sources import load_inputs

REPO_ROOT = Path(__file__).resolve().parents[3]
SOURCE = "bench.json"
ROUNDS = [0.0110, 0.0100, 0.0104, 0.0105, 0.0106, 0.0105, 0.0102]
SPEC = RunSpec(workload="hep_cnn", size="tiny", batch_per_rank=16, steps=7, warmup=1)
DTBENCH_FINGERPRINT = {
    "machine": {"machine_id": "abc123", "hostname": "node-a", "cpu_model": "Test CPU"},
    "software": {"python": "3.11.7", "torch": "2.13.0"},
    "harness": {"version": "0.1.0", "git_commit": "f" * 40, "dirty": False},
}


def bench_entry(name: str, param: str | None = None, *, data: list[float] | None = ROUNDS,
                extra_info: dict[str, Any] | None = None) -> dict[str, Any]:
    """One benchmark as pytest-benchmark 5 writes it (only the fields the converter reads)."""
    full = f"{name}[{param}]" if param else name
    times = data if data is not None else ROUNDS
    stats: dict[str, Any] = {"min": min(times), "max": max(times), "mean": statistics.mean(times),
                             "median": statistics.median(times), "rounds": len(times),
                             "iterations": 1}
    if data is not None:
        stats["data"] = list(data)
    return {"group": None, "name": full, "fullname": f"tests/bench_x.py::{full}",
            "params": {"workload": param} if param else None, "param": param,
            "extra_info": extra_info or {}, "options": {"timer": "perf_counter"},
            "stats": stats}


def document(*benchmarks: dict[str, Any], dtbench: bool = True,
             when: str = "2024-05-06T07:08:09.123456+00:00") -> dict[str, Any]:
    machine_info: dict[str, Any] = {
        "node": "node-a", "processor": "x86_64", "machine": "x86_64", "system": "Linux",
        "release": "6.1.0", "python_version": "3.11.7",
        "cpu": {"brand_raw": "Test CPU", "count": 2},
    }
    if dtbench:
        machine_info["dtbench"] = copy.deepcopy(DTBENCH_FINGERPRINT)
    return {"machine_info": machine_info,
            "commit_info": {"id": "e" * 40, "dirty": True, "branch": "main"},
            "benchmarks": list(benchmarks), "datetime": when, "version": "5.2.3"}


def dtbench_entry() -> dict[str, Any]:
    return bench_entry("test_train_step", "hep_cnn", extra_info={
        "spec": SPEC.as_dict(), "spec_key": SPEC.key(), "batch_size": 16,
        "flops_per_sample": 1.0e6, "settings": {"threads": 2}, "device_name": "Test CPU"})


def test_recognises_pytest_benchmark_documents_only() -> None:
    assert is_pytest_benchmark(document(dtbench_entry()))
    assert is_pytest_benchmark({"benchmarks": [], "machine_info": {}})
    assert not is_pytest_benchmark({"benchmarks": []})
    assert not is_pytest_benchmark({"benchmarks": {}, "machine_info": {}})
    assert not is_pytest_benchmark({"schema_version": 1, "metrics": []})
    assert not is_pytest_benchmark([{"benchmarks": [], "machine_info": {}}])


def test_dtbench_benchmark_becomes_a_record_with_raw_samples() -> None:
    (record,) = records_from_pytest_benchmark(document(dtbench_entry()), SOURCE)
    assert check_record(record) is record
    assert record["status"] == "success" and record["error"] is None
    assert record["created_at"] == "2024-05-06T07:08:09.123456Z"
    assert record["spec"] == SPEC.as_dict() and record["spec_key"] == SPEC.key()
    assert record["machine"] == DTBENCH_FINGERPRINT["machine"]
    assert record["software"] == DTBENCH_FINGERPRINT["software"]
    assert record["harness"] == DTBENCH_FINGERPRINT["harness"]
    assert record["source"] == {"kind": "pytest-benchmark", "file": SOURCE,
                                "fullname": "tests/bench_x.py::test_train_step[hep_cnn]"}
    step_time = metric(record, "step_time")
    assert step_time is not None and step_time["unit"] == "s"
    assert step_time["higher_is_better"] is False
    assert step_time["samples"] == ROUNDS
    assert step_time["value"] == pytest.approx(statistics.median(ROUNDS))
    assert step_time["stats"]["n"] == len(ROUNDS)
    throughput = metric(record, "throughput")
    assert throughput is not None and throughput["unit"] == "samples/s"
    assert throughput["higher_is_better"] is True
    assert throughput["value"] == pytest.approx(16 / statistics.median(ROUNDS))
    assert throughput["samples"] == pytest.approx([16 / t for t in ROUNDS])
    achieved = metric(record, "achieved_flops")
    assert achieved is not None
    assert achieved["value"] == pytest.approx(1.0e6 * throughput["value"])
    json.dumps(record, allow_nan=False)


def test_foreign_benchmark_without_data_uses_the_median() -> None:
    entry = bench_entry("test_sort", data=None)
    (record,) = records_from_pytest_benchmark(document(entry, dtbench=False), SOURCE)
    check_record(record)
    step_time = metric(record, "step_time")
    assert step_time is not None
    assert step_time["value"] == pytest.approx(statistics.median(ROUNDS))
    assert "samples" not in step_time and "stats" not in step_time
    assert metric(record, "throughput") is None  # no batch size known
    spec = record["spec"]
    assert spec["workload"] == "test_sort"
    assert spec["backend"] == "unknown" and spec["precision"] == "unknown"
    assert len(record["spec_key"]) == 16
    assert record["machine"]["hostname"] == "node-a"
    assert record["machine"]["cpu_model"] == "Test CPU"
    assert record["software"]["python"] == "3.11.7"
    assert record["harness"]["git_commit"] == "e" * 40


def test_extra_info_samples_stand_in_for_missing_stats_data() -> None:
    entry = bench_entry("test_step", data=None, extra_info={"samples": ROUNDS, "batch_size": 8})
    (record,) = records_from_pytest_benchmark(document(entry), SOURCE)
    step_time, throughput = metric(record, "step_time"), metric(record, "throughput")
    assert step_time is not None and step_time["samples"] == ROUNDS
    assert throughput is not None
    assert throughput["value"] == pytest.approx(8 / statistics.median(ROUNDS))


def test_run_ids_are_stable_and_unique() -> None:
    doc = document(bench_entry("test_a", "x"), bench_entry("test_a", "y"), bench_entry("test_b"))
    first = [r["run_id"] for r in records_from_pytest_benchmark(doc, SOURCE)]
    again = [r["run_id"] for r in records_from_pytest_benchmark(copy.deepcopy(doc), "other.json")]
    later = document(*doc["benchmarks"], when="2024-05-06T07:08:09.654321+00:00")
    other_time = [r["run_id"] for r in records_from_pytest_benchmark(later, SOURCE)]
    assert first == again
    assert len(set(first)) == 3
    assert not set(first) & set(other_time)
    for run_id in first:
        assert run_id.startswith("20240506T070809Z-")
        assert all(c.isalnum() or c in "-_." for c in run_id)


def _break(path: str, value: Any) -> dict[str, Any]:
    doc = document(dtbench_entry())
    target: Any = doc
    *parents, last = path.split(".")
    for key in parents:
        target = target[int(key)] if isinstance(target, list) else target[key]
    if isinstance(target, list):
        target[int(last)] = value
    else:
        target[last] = value
    return doc


MALFORMED = {
    "no datetime": _break("datetime", None),
    "bad datetime": _break("datetime", "yesterday"),
    "machine_info not an object": _break("machine_info", ["node-a"]),
    "no benchmarks": document(),
    "benchmark not an object": _break("benchmarks.0", "test_x"),
    "no name": _break("benchmarks.0.name", None),
    "stats not an object": _break("benchmarks.0.stats", [1, 2]),
    "extra_info not an object": _break("benchmarks.0.extra_info", "fast"),
    "data not a list": _break("benchmarks.0.stats.data", "0.1 0.2"),
    "data holds text": _break("benchmarks.0.stats.data", [0.01, "slow"]),
    "negative time": _break("benchmarks.0.stats.data", [0.01, -1.0]),
    "no timings": document(bench_entry("test_x", data=None) | {"stats": {"rounds": 3}}),
    "median not a number": document(bench_entry("test_x", data=None)
                                    | {"stats": {"median": "fast"}}),
}


@pytest.mark.parametrize("doc", MALFORMED.values(), ids=MALFORMED.keys())
def test_malformed_documents_raise_one_line_schema_errors(doc: dict[str, Any]) -> None:
    with pytest.raises(SchemaError) as caught:
        records_from_pytest_benchmark(doc, SOURCE)
    message = str(caught.value)
    assert message.startswith(SOURCE) and "\n" not in message


def test_load_inputs_reads_pytest_benchmark_files_and_skips_broken_ones(tmp_path: Path) -> None:
    good, broken = tmp_path / "good.json", tmp_path / "broken.json"
    good.write_text(json.dumps(document(dtbench_entry(), bench_entry("test_other"))))
    broken.write_text(json.dumps(MALFORMED["data holds text"]))
    loaded = load_inputs([str(good), str(broken)])
    assert [r["source"]["file"] for r in loaded.records] == [str(good), str(good)]
    assert len(loaded.warnings) == 1 and str(broken) in loaded.warnings[0]


@pytest.mark.slow
def test_bench_steps_json_loads_and_compares(tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("DTBENCH_BENCH_")}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "benchmarks/bench_steps.py", "--benchmark-only",
         f"--benchmark-json={out}", "-k", "hep_cnn", "-p", "no:cacheprovider", "-q"],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    saved = json.loads(out.read_text())
    fingerprint = saved["machine_info"]["dtbench"]
    assert {"machine", "software", "harness"} <= set(fingerprint)
    assert fingerprint["machine"]["machine_id"] and fingerprint["software"]["torch"]

    loaded = load_inputs([str(out)])
    assert loaded.warnings == []
    (record,) = loaded.records
    assert record["spec"]["workload"] == "hep_cnn" and record["spec"]["size"] == "tiny"
    assert record["spec_key"] == RunSpec.from_dict(record["spec"]).key()
    step_time = metric(record, "step_time")
    assert step_time is not None and len(step_time["samples"]) == record["spec"]["steps"]
    assert metric(record, "throughput") is not None

    from harness.commands.cli import main

    assert main(["compare", str(out), str(out)]) == 0

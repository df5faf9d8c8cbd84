"""The shipped JSON Schema: one record of every kind dtbench writes validates against the file
itself (plain jsonschema, as another tool would use it), and every record in results/ loads."""
from __future__ import annotations

import datetime as dt
import json
import math
import tomllib
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from harness.commands.cli import main
from harness.core.errors import SchemaError
from harness.microbench.collectives import CommResult
from harness.microbench.kernels.records import kernel_record
from harness.microbench.kernels.runner import Measurement, Roofs
from harness.microbench.kernels.sets import get_set
from harness.rank.mlperf import RunLog
from harness.records.record import Metric, build_record, check_record, load_record
from harness.records.schema import SCHEMA_FILE, first_violation, record_schema
from harness.spec.specs import CommSpec, RunSpec
from harness.store.directory import Store
from harness.store.pytest_benchmark import records_from_pytest_benchmark

ROOT = Path(__file__).resolve().parents[3]
RESULTS = ROOT / "results"
GOLDEN = ROOT / "tests" / "harness" / "golden" / "record_v1.json"
# JSON files under results/ that are benchmark outputs, not records.
NOT_RECORDS = {"cpu-config/cpu-config.json"}
CREATED = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
FINGERPRINT = {"harness": {"version": "test", "git_commit": None, "dirty": None},
               "machine": {"hostname": "h", "cpu_model": "test", "nodes": 1},
               "software": {"torch": "x", "mpi": None}}
PLAIN = Draft202012Validator(record_schema())


def assert_valid(record: dict[str, Any]) -> None:
    """Valid for the schema file as any tool reads it, and for dtbench's own validator."""
    problems = [f"{e.json_path}: {e.message}" for e in PLAIN.iter_errors(record)]
    assert not problems, problems
    assert first_violation(record) is None


def _train(status: str, error: str | None, metrics: list[Metric],
           notes: dict[str, Any]) -> dict[str, Any]:
    spec = RunSpec(workload="hep_cnn", size="tiny", batch_per_rank=16, steps=6, warmup=1,
                   mode="ttt")
    log = RunLog(None)
    log.start("run_start")
    log.event("eval_accuracy", 0.71, {"epoch_num": 1})
    log.end("run_stop", metadata={"status": "success"})
    return build_record(run_id="20260102T030405Z-hep_cnn-0a1b2c3d", created=CREATED,
                        status=status, error=error, spec=spec.as_dict(), metrics=metrics,
                        events=log.events, extra={"spec_key": spec.key(), "notes": notes},
                        **FINGERPRINT)


def test_training_records_validate() -> None:
    samples = [0.0100, 0.0104, 0.0105, 0.0106, 0.5]
    success = _train("success", None, [
        Metric("step_time", "s", 0.0105, False, samples=samples),
        Metric("throughput", "samples/s", 1523.8, True, samples=[16 / s for s in samples],
               extra={"aggregation": "global_batch / median step_time", "per_rank": [1.0]}),
        Metric("mfu", "1", math.nan, True),
        Metric("flops_per_sample", "FLOP", 45e6, False)], {"settings": {"threads": 1}})
    assert success["metrics"][0]["warnings"] and success["metrics"][2]["value"] is None
    assert success["events"][0]["event_type"] == "start"
    assert_valid(success)
    assert_valid(_train("failed", "rank 1 exited with code 1", [],
                        {"traceback_tail": ["Traceback", "RuntimeError: boom"]}))
    assert_valid(_train("skipped", "backend cuda is unavailable: no CUDA device", [], {}))


def test_comm_records_validate() -> None:
    from harness.commands.comm import _records

    spec = CommSpec(ops=("allreduce", "broadcast"), sizes=(1024, 2**20))
    results = [CommResult(op, size, 1e-4, 1.0, 1.5, [1.4, 1.5, 1.6])
               for op in spec.ops for size in spec.sizes]
    measured = _records(spec, results, "success", None, CREATED, "run", [])
    skipped = _records(spec, [], "skipped", "mpi4py is not installed", CREATED, "run", [])
    assert [len(r["metrics"]) for r in measured + skipped] == [3, 3, 0, 0]
    for record in measured + skipped:
        assert_valid(record)


def test_kernel_records_validate() -> None:
    case = get_set("tiny").build()[0]
    roofs = Roofs(1e11, {"512": 1e11}, 1e10, "triad", "2026-01-02T03:04:05Z")
    measured = Measurement(case, case.passes[0], "default", "fp32",
                           samples=[1e-4, 1.1e-4, 1.2e-4], max_rel_error=1e-6)
    skipped = Measurement(case, case.passes[0], "winograd", "fp32", status="skipped",
                          error="not applicable to this shape")
    for one in (measured, skipped):
        record = kernel_record(one, roofs, run_id="k", created=CREATED,
                               kernel_set=get_set("tiny"), backend="cpu", threads=1,
                               **FINGERPRINT)
        assert record["status"] == one.status
        assert_valid(record)


def test_prediction_records_validate(tmp_path: Path) -> None:
    target = tmp_path / "p.json"
    assert main(["predict", "hep_cnn", "--strategy", "ddp", "--nodes", "1,2",
                 "--calibrate-from", str(RESULTS / "predict"), "--json", str(target)]) == 0
    records = json.loads(target.read_text(encoding="utf-8"))
    assert {r["status"] for r in records} == {"success"} and len(records) == 2
    for record in records:
        assert_valid(record)


def test_pytest_benchmark_records_validate() -> None:
    document = {"machine_info": {"node": "n", "cpu": {"brand_raw": "cpu"}}, "commit_info": {},
                "datetime": "2024-01-02T03:04:05+00:00", "version": "5.2.3",
                "benchmarks": [{"name": "test_step", "fullname": "bench.py::test_step",
                                "stats": {"data": [1e-3, 1.1e-3, 1.2e-3], "rounds": 3,
                                          "iterations": 1},
                                "extra_info": {"batch_size": 8, "flops_per_sample": 1e6}}]}
    records = records_from_pytest_benchmark(document, "bench.json")
    assert [m["name"] for m in records[0]["metrics"]] == [
        "step_time", "throughput", "flops_per_sample", "achieved_flops"]
    assert_valid(records[0])


def test_the_golden_record_validates() -> None:
    assert_valid(json.loads(GOLDEN.read_text(encoding="utf-8")))


def test_every_record_in_results_loads() -> None:
    """Records earlier versions wrote (results/ and its folders) load and validate."""
    paths = sorted(RESULTS.rglob("*.json"))
    assert len(paths) > 100
    for path in paths:
        name = path.relative_to(RESULTS).as_posix()
        if name in NOT_RECORDS:
            with pytest.raises(SchemaError, match="not a dtbench record"):
                load_record(path)
            continue
        assert_valid(load_record(path))


@pytest.mark.parametrize("samples", [[0.1, True], [0.1, "0.2"], [0.1, 10**400], [None]])
def test_bad_samples_are_rejected_by_the_schema_and_by_dtbench(samples: list[Any]) -> None:
    """dtbench checks sample arrays in one loop instead of per item through jsonschema; both
    reject the same values."""
    record = json.loads(GOLDEN.read_text(encoding="utf-8"))
    record["metrics"][0]["samples"] = samples
    assert not PLAIN.is_valid(record)
    with pytest.raises(SchemaError, match=r"^g\.json: metrics\[0\]\.samples\[\d\]: "):
        check_record(record, "g.json")


def test_store_refuses_an_invalid_record(tmp_path: Path) -> None:
    record = json.loads(GOLDEN.read_text(encoding="utf-8"))
    record["metrics"][0]["value"] = "fast"
    with pytest.raises(ValueError, match=r"metrics\[0\]\.value: 'fast' is not of type"):
        Store(tmp_path).add(record)
    assert not list(tmp_path.iterdir())


def test_the_schema_is_package_data_and_a_valid_schema() -> None:
    assert resources.files("harness.records").joinpath(SCHEMA_FILE).is_file()
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert SCHEMA_FILE in pyproject["tool"]["setuptools"]["package-data"]["harness.records"]
    assert "jsonschema>=4" in pyproject["project"]["dependencies"]
    Draft202012Validator.check_schema(record_schema())
    metric = record_schema()["$defs"]["metric"]
    assert metric["required"] == ["name", "value"]
    assert all("description" in metric["properties"][key]
               for key in ("name", "unit", "value", "higher_is_better", "samples"))

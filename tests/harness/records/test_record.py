"""Schema-v1 records: required keys, null for non-finite values, and loading with clear errors."""
from __future__ import annotations

import datetime as dt
import json
import math
import re
from pathlib import Path
from typing import Any

import pytest

from harness.core.errors import SchemaError
from harness.core.stats import Stats
from harness.records.record import (
    SCHEMA_VERSION,
    Metric,
    build_record,
    check_record,
    load_record,
    metric,
    new_run_id,
)
from harness.spec.specs import RunSpec

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "record_v1.json"
SPEC_KEYS = ("schema_version", "run_id", "created_at", "status", "error", "harness", "machine",
             "software", "spec", "metrics", "events")
CREATED = dt.datetime(2024, 1, 2, 3, 4, 5, 123456, tzinfo=dt.UTC)
STEADY = [0.0100, 0.0104, 0.0105, 0.0105, 0.0106, 0.0110]


def make_record(**overrides: Any) -> dict[str, Any]:
    spec = RunSpec(workload="hep_cnn", size="tiny", batch_per_rank=16, steps=6, warmup=1)
    arguments: dict[str, Any] = {
        "run_id": new_run_id("hep_cnn", CREATED), "created": CREATED, "status": "success",
        "error": None, "harness": {"version": "0", "git_commit": None, "dirty": None},
        "machine": {"hostname": "h"}, "software": {"torch": "x"}, "spec": spec.as_dict(),
        "metrics": [Metric("step_time", "s", 0.0105, False, samples=STEADY)], "events": [],
    }
    arguments.update(overrides)
    return build_record(**arguments)


def test_build_record_has_every_spec_key() -> None:
    record = make_record()
    for key in SPEC_KEYS:
        assert key in record
    assert record["schema_version"] == SCHEMA_VERSION == 1
    assert record["created_at"] == "2024-01-02T03:04:05.123456Z"
    assert record["spec"]["world_size"] == 1 and record["spec"]["global_batch"] == 16
    json.dumps(record, allow_nan=False)


def test_created_at_is_utc_iso8601() -> None:
    created = dt.datetime.fromisoformat(make_record()["created_at"].replace("Z", "+00:00"))
    assert created == CREATED


def test_run_ids_sort_by_time_and_are_unique() -> None:
    later = CREATED + dt.timedelta(seconds=1)
    first, second = new_run_id("lstm", CREATED), new_run_id("lstm", later)
    assert re.fullmatch(r"20240102T030405Z-lstm-[0-9a-f]{8}", first)
    assert first < second
    assert new_run_id("lstm", CREATED) != first


def test_extra_keys_are_added() -> None:
    record = make_record(extra={"spec_key": "abc", "notes": {"k": 1}})
    assert record["spec_key"] == "abc" and record["notes"] == {"k": 1}


def test_unknown_status_is_rejected() -> None:
    with pytest.raises(ValueError, match="status must be one of"):
        make_record(status="crashed")


def test_error_is_flattened_to_one_line() -> None:
    record = make_record(status="failed", error="rank 0: boom\n  at line 3\n\tagain")
    assert record["error"] == "rank 0: boom at line 3 again"
    assert make_record(status="failed", error="x" * 2000)["error"].count("\n") == 0
    assert len(make_record(status="failed", error="x" * 2000)["error"]) <= 500


def test_metric_entry_carries_samples_and_stats() -> None:
    entry = Metric("step_time", "s", 0.0105, False, samples=STEADY, extra={"k": "v"}).as_dict()
    assert entry["samples"] == STEADY
    assert tuple(entry["stats"]) == Stats.fields
    assert entry["stats"]["median"] == pytest.approx(0.0105)
    assert entry["k"] == "v"
    assert "warnings" not in entry


def test_metric_without_samples_has_no_stats() -> None:
    entry = Metric("peak_memory", "bytes", 1024.0, False).as_dict()
    assert set(entry) == {"name", "unit", "value", "higher_is_better"}


def test_noisy_metric_carries_variance_warnings() -> None:
    entry = Metric("step_time", "s", 1.0, False, samples=[1.0, 2.0, 3.0]).as_dict()
    assert any("only 3 samples" in w for w in entry["warnings"])


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_non_finite_value_becomes_null(value: float) -> None:
    record = make_record(metrics=[Metric("mfu", "1", value, True)])
    assert record["metrics"][0]["value"] is None
    assert json.loads(json.dumps(record, allow_nan=False))["metrics"][0]["value"] is None


def test_non_finite_extras_become_null() -> None:
    broken = Metric("quality", "1", 1.0, True,
                    extra={"all": {"accuracy": 1.0, "auc": math.nan},
                           "history": [{"epoch": 1, "auc": math.nan}]})
    record = make_record(metrics=[broken])
    loaded = json.loads(json.dumps(record, allow_nan=False))
    assert loaded["metrics"][0]["all"]["auc"] is None


def test_metric_lookup_by_name() -> None:
    record = make_record()
    assert metric(record, "step_time")["unit"] == "s"
    assert metric(record, "throughput") is None


# ---------------------------------------------------------------- loading

def _write(path: Path, document: Any) -> Path:
    path.write_text(json.dumps(document), encoding="utf-8")
    return path


def test_load_record_round_trips(tmp_path: Path) -> None:
    record = make_record()
    assert load_record(_write(tmp_path / "r.json", record)) == record


@pytest.mark.parametrize("version", [2, 99, "1", 0])
def test_unknown_schema_version_says_to_upgrade(tmp_path: Path, version: object) -> None:
    record = {**make_record(), "schema_version": version}
    with pytest.raises(SchemaError) as caught:
        load_record(_write(tmp_path / "r.json", record))
    message = str(caught.value)
    assert "schema_version" in message and "upgrade dtbench" in message
    assert str(tmp_path / "r.json") in message


@pytest.mark.parametrize("document", [[1, 2, 3], "text", None, {"name": "not a record"},
                                      {"benchmarks": [], "machine_info": {}}])
def test_foreign_json_is_not_a_record(tmp_path: Path, document: Any) -> None:
    with pytest.raises(SchemaError, match="not a dtbench record"):
        load_record(_write(tmp_path / "r.json", document))


def test_truncated_json_is_unreadable(tmp_path: Path) -> None:
    text = json.dumps(make_record())
    path = tmp_path / "r.json"
    path.write_text(text[: len(text) // 2], encoding="utf-8")
    with pytest.raises(SchemaError, match="unreadable record"):
        load_record(path)


def test_binary_and_missing_files_are_schema_errors(tmp_path: Path) -> None:
    binary = tmp_path / "b.json"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(SchemaError):
        load_record(binary)
    with pytest.raises(SchemaError):
        load_record(tmp_path / "absent.json")


def test_check_record_names_the_first_violation() -> None:
    record = make_record()
    del record["machine"], record["events"]
    with pytest.raises(SchemaError, match="^record: '(machine|events)' is a required property$"):
        check_record(record)
    with pytest.raises(SchemaError, match="^record: status: 'exploded' is not one of"):
        check_record({**make_record(), "status": "exploded"})
    with pytest.raises(SchemaError, match=r"^r\.json: metrics: \{\} is not of type 'array'$"):
        check_record({**make_record(), "metrics": {}}, "r.json")


def test_a_file_that_does_not_validate_names_the_file_and_the_violation(tmp_path: Path) -> None:
    record = make_record()
    record["metrics"][0]["stats"]["median"] = "fast"
    path = _write(tmp_path / "r.json", record)
    with pytest.raises(SchemaError) as caught:
        load_record(path)
    assert str(caught.value) == (f"{path}: metrics[0].stats.median: 'fast' is not of type "
                                 "'number'")


# ---------------------------------------------------------------- golden schema

def test_golden_record_loads() -> None:
    golden = load_record(GOLDEN)
    assert golden["schema_version"] == 1
    assert golden["status"] == "success"


def test_fresh_record_has_the_golden_top_level_keys(tmp_path: Path) -> None:
    from harness.run.runner import Runner
    from harness.store.directory import Store

    golden = load_record(GOLDEN)
    # A skipped run (no CUDA here) builds a real record without training anything.
    spec = RunSpec(workload="hep_cnn", size="tiny", batch_per_rank=16, steps=6, warmup=1,
                   backend="cuda", comm="nccl", nproc_per_node=2)
    outcome = Runner(Store(tmp_path / "store")).run(spec)
    assert outcome.status == "skipped"
    assert set(outcome.record) == set(golden)
    assert set(outcome.record["spec"]) == set(golden["spec"])
    assert set(outcome.record["harness"]) == set(golden["harness"])
    assert set(outcome.record["machine"]) == set(golden["machine"])
    assert set(outcome.record["software"]) == set(golden["software"])


def test_fresh_metric_has_the_golden_metric_keys() -> None:
    golden = load_record(GOLDEN)
    golden_entry = metric(golden, "step_time")
    fresh = Metric("step_time", "s", 0.0105, False, samples=golden_entry["samples"]).as_dict()
    assert set(fresh) == set(golden_entry) == {"name", "unit", "value", "higher_is_better",
                                              "samples", "stats"}
    assert set(fresh["stats"]) == set(golden_entry["stats"]) == {
        "n", "min", "max", "median", "mean", "q1", "q3", "iqr", "stddev", "ci95"}
    for key in ("n", "min", "max", "median", "q1", "q3", "ci95"):
        assert fresh["stats"][key] == pytest.approx(golden_entry["stats"][key])
    plain = Metric("flops_per_sample", "FLOP", 45e6, False).as_dict()
    assert set(plain) == set(metric(golden, "flops_per_sample"))

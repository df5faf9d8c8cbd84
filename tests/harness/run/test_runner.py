"""The runner: every outcome (success, skip, failure, crash) becomes exactly one stored record."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from backends import COMPUTE_BACKENDS
from backends.base import Availability
from harness.core.errors import RunFailed, SkipRun
from harness.core.spec import RunSpec
from harness.microbench.peak import PeakResult
from harness.records.record import load_record, metric
from harness.records.rundir import RankResult
from harness.records.store import Store
from harness.run import runner as runner_module
from harness.run.runner import Runner, unavailable_reason
from workloads.hep_cnn import HEPCNNWorkload

SPEC = RunSpec(workload="hep_cnn", size="tiny", batch_per_rank=4, steps=3, warmup=1, threads=1)
PEAK = PeakResult(backend="cpu", device_name="cpu", precision="fp32", threads=1, flops=1e10,
                  memory_bandwidth=1e9, per_size={"64": 1e10},
                  measured_at="2024-01-01T00:00:00+00:00", torch=torch.__version__)


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store(tmp_path / "store")


@pytest.fixture
def fixed_peak(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runner_module, "peak_for", lambda *args: PEAK)


def only_record(store: Store) -> dict[str, Any]:
    (path,) = store.record_paths()
    return load_record(path)


def test_unavailable_backend_is_a_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    cuda = COMPUTE_BACKENDS.get("cuda")
    monkeypatch.setattr(cuda, "availability", classmethod(lambda cls: Availability.no("no GPU")))
    assert unavailable_reason(SPEC.replace(backend="cuda")) == "backend cuda: no GPU"
    assert unavailable_reason(SPEC) is None


def test_workload_refusal_is_a_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(self: Any, *args: Any) -> None:
        raise NotImplementedError("hep_cnn does not run\nin this mode")

    monkeypatch.setattr(HEPCNNWorkload, "check", refuse)
    assert unavailable_reason(SPEC) == "hep_cnn does not run in this mode"


def test_a_crash_becomes_a_failed_record_with_a_traceback_tail(
        store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    def crash(spec: RunSpec, progress: Any = None) -> RankResult:
        raise RuntimeError("kernel exploded")

    monkeypatch.setattr(runner_module, "run_throughput", crash)
    outcome = Runner(store).run(SPEC)
    assert outcome.status == "failed"
    record = only_record(store)
    assert record == outcome.record
    assert record["error"] == "rank 0: RuntimeError: kernel exploded"
    assert record["metrics"] == []
    assert any("kernel exploded" in line for line in record["notes"]["traceback_tail"])


@pytest.mark.parametrize("raised, status", [(RunFailed("diverged at step 3"), "failed"),
                                            (SkipRun("no data"), "skipped")])
def test_expected_exceptions_map_to_statuses(store: Store, monkeypatch: pytest.MonkeyPatch,
                                             raised: Exception, status: str) -> None:
    def stop(spec: RunSpec, progress: Any = None) -> RankResult:
        raise raised

    monkeypatch.setattr(runner_module, "run_throughput", stop)
    record = Runner(store).run(SPEC).record
    assert (record["status"], record["error"]) == (status, str(raised))
    assert "traceback_tail" not in record["notes"]


def test_time_to_train_short_of_the_target_is_failed(store: Store, fixed_peak: None,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    def train(spec: RunSpec, log_path: Path, progress: Any = None) -> RankResult:
        return RankResult(rank=0, world_size=1, device_name="cpu", settings={"threads": 1},
                          step_times=[0.1, 0.1], quality={"accuracy": 0.55, "auc": 0.6},
                          target_reached=False, time_to_train=3.0, peak_memory=1000)

    monkeypatch.setattr(runner_module, "run_time_to_train", train)
    record = Runner(store).run(SPEC.replace(mode="ttt")).record
    assert record["status"] == "failed"
    assert record["error"] == "target accuracy >= 0.7 not reached in 10 epochs: reached 0.55"
    assert metric(record, "quality")["reached"] is False
    assert metric(record, "time_to_train") is None


def test_real_tiny_throughput_run(store: Store, fixed_peak: None) -> None:
    saved = torch.get_num_threads()
    try:
        outcome = Runner(store).run(SPEC)
    finally:
        torch.set_num_threads(saved)
    record = outcome.record
    assert outcome.status == "success", record["error"]
    assert outcome.path == store.root / f"{record['run_id']}.json"
    assert len(metric(record, "step_time")["samples"]) == 3
    # RunSpec's default: the peak is timed in the run, before and after the measured steps.
    peak = metric(record, "peak_flops")
    assert peak["peak_source"] == "in-run" and set(peak["readings"]) == {"before", "after"}
    assert peak["value"] == max(peak["readings"].values()) > 0
    assert metric(record, "mfu")["value"] == pytest.approx(
        metric(record, "achieved_flops")["value"] / peak["value"])
    assert metric(record, "memory_bandwidth")["value"] > 0
    assert record["spec_key"] == SPEC.key()
    assert record["notes"]["settings"]["threads"] == 1
    assert store.count_success(SPEC.key()) == 1


def test_nan_auc_still_gives_a_stored_record(store: Store, fixed_peak: None,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    def train(spec: RunSpec, log_path: Path, progress: Any = None) -> RankResult:
        return RankResult(rank=0, world_size=1, device_name="cpu", settings={"threads": 1},
                          step_times=[0.1, 0.1], quality={"accuracy": 1.0, "auc": float("nan")},
                          target_reached=True, time_to_train=3.0, peak_memory=1000)

    monkeypatch.setattr(runner_module, "run_time_to_train", train)
    outcome = Runner(store).run(SPEC.replace(mode="ttt"))
    assert outcome.status == "success"
    assert only_record(store)["run_id"] == outcome.record["run_id"]

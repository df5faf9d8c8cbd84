"""The runner: every outcome (success, skip, failure, crash) becomes exactly one stored record,
and every run, one rank without communication included, runs in rank processes."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from backends import COMPUTE_BACKENDS
from backends.base import Availability
from harness.core.errors import RunFailed, SkipRun
from harness.microbench.peak import PeakResult
from harness.rank import loops
from harness.records.record import load_record, metric
from harness.run import runner as runner_module
from harness.run.preflight import unavailable_reason
from harness.run.runner import Runner
from harness.rundir import FAULT_VAR, RankResult
from harness.spec.specs import RunSpec
from harness.store.directory import Store
from workloads.hep_cnn import HEPCNNWorkload

SPEC = RunSpec(workload="hep_cnn", size="tiny", batch_per_rank=4, steps=3, warmup=1, threads=1)
PEAK = PeakResult(backend="cpu", device_name="cpu", precision="fp32", threads=1, flops=1e10,
                  memory_bandwidth=1e9, per_size={"64": 1e10},
                  measured_at="2024-01-01T00:00:00+00:00", torch=torch.__version__)


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store(tmp_path / "store")


@pytest.fixture
def fixed_peak(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, ...]]:
    """The cached peak as PEAK; the list collects what it was asked for."""
    asked: list[tuple[Any, ...]] = []

    def peak_for(*args: Any) -> PeakResult:
        asked.append(args)
        return PEAK

    from harness.microbench import peak

    monkeypatch.setattr(peak, "peak_for", peak_for)  # what preflight's device_peak reads
    return asked


def launched(*ranks: RankResult) -> Any:
    """A stand-in for the launch stage that brings back `ranks`."""

    def launch(spec: RunSpec, *args: Any) -> list[RankResult]:
        return list(ranks)

    return launch


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
    monkeypatch.setenv(FAULT_VAR, "raise:0:1")
    outcome = Runner(store).run(SPEC)
    assert outcome.status == "failed"
    record = only_record(store)
    assert record == outcome.record
    assert record["error"] == "rank 0: RuntimeError: injected fault at step 1"
    assert record["metrics"] == []
    assert any("injected fault" in line for line in record["notes"]["traceback_tail"])


@pytest.mark.parametrize("raised, status", [(RunFailed("diverged at step 3"), "failed"),
                                            (SkipRun("no data"), "skipped")])
def test_expected_exceptions_map_to_statuses(store: Store, monkeypatch: pytest.MonkeyPatch,
                                             raised: Exception, status: str) -> None:
    def stop(spec: RunSpec, *args: Any) -> list[RankResult]:
        raise raised

    monkeypatch.setattr(runner_module, "launch", stop)
    record = Runner(store).run(SPEC).record
    assert (record["status"], record["error"]) == (status, str(raised))
    assert "traceback_tail" not in record["notes"]


def test_time_to_train_short_of_the_target_is_failed(store: Store,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    short = RankResult(rank=0, world_size=1, device_name="cpu", settings={"threads": 1},
                       step_times=[0.1, 0.1], quality={"accuracy": 0.55, "auc": 0.6},
                       target_reached=False, time_to_train=3.0, peak_memory=1000)
    monkeypatch.setattr(runner_module, "launch", launched(short))
    record = Runner(store).run(SPEC.replace(mode="ttt")).record
    assert record["status"] == "failed"
    assert record["error"] == "target accuracy >= 0.7 not reached in 10 epochs: reached 0.55"
    assert metric(record, "quality")["reached"] is False
    assert metric(record, "time_to_train") is None


def test_real_tiny_throughput_run_in_a_rank_process(store: Store,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    def in_this_process(*args: Any, **kwargs: Any) -> RankResult:
        raise AssertionError("a run of one rank without comm ran in the runner's process")

    monkeypatch.setattr(loops, "run_throughput", in_this_process)
    saved = torch.get_num_threads()
    outcome = Runner(store).run(SPEC)
    assert torch.get_num_threads() == saved  # the rank set its threads in its own process
    record = outcome.record
    assert outcome.status == "success", record["error"]
    assert outcome.path == store.folder_for(record) / f"{record['run_id']}.json"
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


def test_nan_auc_still_gives_a_stored_record(store: Store,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    trained = RankResult(rank=0, world_size=1, device_name="cpu", settings={"threads": 1},
                         step_times=[0.1, 0.1], quality={"accuracy": 1.0, "auc": float("nan")},
                         target_reached=True, time_to_train=3.0, peak_memory=1000)
    monkeypatch.setattr(runner_module, "launch", launched(trained))
    outcome = Runner(store).run(SPEC.replace(mode="ttt"))
    assert outcome.status == "success"
    assert only_record(store)["run_id"] == outcome.record["run_id"]


def test_the_cached_peak_is_settled_before_the_launch(
        store: Store, fixed_peak: list[tuple[Any, ...]], monkeypatch: pytest.MonkeyPatch) -> None:
    """--peak cached: the peak is chosen for the node's threads before any rank starts, and
    MFU divides by it."""
    spec = SPEC.replace(peak="cached", nproc_per_node=2, comm="gloo", threads=1)

    def launch(settled: RunSpec, *args: Any) -> list[RankResult]:
        assert fixed_peak, "the launch came before the peak was settled"
        return [RankResult(rank=r, world_size=2, device_name="cpu", settings={"threads": 1},
                           step_times=[0.1, 0.1], peak_memory=1000) for r in range(2)]

    monkeypatch.setattr(runner_module, "launch", launch)
    record = Runner(store).run(spec).record
    assert record["status"] == "success", record["error"]
    ((backend, _, precision, threads, *_),) = fixed_peak  # peak_for's device and backend follow
    assert (backend, precision, threads) == ("cpu", "fp32", 2)  # two ranks of one thread
    peak = metric(record, "peak_flops")
    assert peak["value"] == PEAK.flops and peak["peak_source"] == "cached"
    assert metric(record, "mfu")["value"] == pytest.approx(
        metric(record, "achieved_flops")["value"] / PEAK.flops)


def test_a_skipped_run_launches_nothing(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    cuda = COMPUTE_BACKENDS.get("cuda")
    monkeypatch.setattr(cuda, "availability", classmethod(lambda cls: Availability.no("no GPU")))

    def launch(*args: Any) -> list[RankResult]:
        raise AssertionError("a run that cannot run here was launched")

    monkeypatch.setattr(runner_module, "launch", launch)
    record = Runner(store).run(SPEC.replace(backend="cuda")).record
    assert (record["status"], record["error"]) == ("skipped", "backend cuda: no GPU")

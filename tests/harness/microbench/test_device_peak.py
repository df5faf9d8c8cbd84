"""One MFU denominator on GPUs: each device's sustained peak, cached by its UUID as the device
is (a capped board reads capped, not the highest value ever), the burst beside it; an in-run
probe sized from the memory the model left free, or skipped with the reason. Mocked devices
and NVML: nothing here runs on a GPU."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from harness.collectors import CollectContext
from harness.collectors.flops import mfu
from harness.microbench import peak
from harness.microbench.peak import PeakResult
from harness.rundir import RankResult
from harness.spec.specs import RunSpec

H200 = "NVIDIA H200"
FULL, CAPPED = {"power_limit_w": 700.0}, {"power_limit_w": 500.0}


def sustained(uuid: str, flops: float, state: dict[str, Any] | None = None,
              burst: float = 810e12) -> PeakResult:
    return PeakResult(backend="cuda", device_name=H200, precision="bf16", threads=0,
                      flops=flops, memory_bandwidth=4.2e12, per_size={"mm 8192": burst},
                      measured_at="2026-11-27T00:00:00+00:00", torch=torch.__version__,
                      burst_flops=burst, sustained_s=10.0, clocks={"sm_clock_mhz": 1455},
                      device_key=uuid, device_state=state or FULL)


def test_a_gpu_is_cached_as_it_is_not_at_its_best_ever(cache_dir: Path) -> None:
    """The board measured at 665 TFLOP/s, then capped to 500 W and measured at 500: the cache
    holds the capped figure, and the uncapped one no longer applies to the capped board."""
    assert peak.store_peak(sustained("GPU-a", 665e12)).flops == 665e12
    assert peak.store_peak(sustained("GPU-a", 500e12, CAPPED)).flops == 500e12
    assert peak.cached_peak("cuda", H200, "bf16", 0, "GPU-a", CAPPED).flops == 500e12
    assert peak.cached_peak("cuda", H200, "bf16", 0, "GPU-a", FULL) is None  # re-measure
    # each board its own entry, whatever the thread count a run asks for
    peak.store_peak(sustained("GPU-b", 640e12))
    assert peak.cached_peak("cuda", H200, "bf16", 7, "GPU-b", FULL).flops == 640e12
    assert peak.cached_peak("cuda", H200, "bf16", 0, "GPU-a", CAPPED).flops == 500e12


class FakeGPU:
    """A backend with two boards, one of them capped; measure_peak is not called on it."""

    def device(self, index: int = 0) -> torch.device:
        return torch.device("cuda", index)

    def device_key(self, device: torch.device) -> str:
        return f"GPU-{device.index}"

    def device_state(self, device: torch.device) -> dict[str, Any]:
        return CAPPED if device.index == 1 else FULL

    def device_name(self, device: torch.device) -> str:
        return H200


def test_each_device_is_looked_up_and_measured_by_its_own_key(
        cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from backends import COMPUTE_BACKENDS

    measured: list[int] = []

    def measure(name: str, precision: str, threads: int, **given: Any) -> PeakResult:
        index = given["device"].index
        measured.append(index)
        return sustained(f"GPU-{index}", 600e12 - 100e12 * index,
                         given["backend"].device_state(given["device"]))

    monkeypatch.setattr(COMPUTE_BACKENDS, "get", lambda name: FakeGPU)
    monkeypatch.setattr(peak, "measure_peak", measure)
    peak.store_peak(sustained("GPU-1", 665e12, FULL))  # measured before the cap was set
    found = [peak.device_peak("cuda", "bf16", 0, index) for index in (0, 1, 0)]
    assert [p.flops for p in found] == [600e12, 500e12, 600e12]
    assert measured == [0, 1]  # the stale uncapped entry of GPU-1 was not used


def test_a_node_measures_every_gpu_its_ranks_use_at_once(monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    asked: list[int] = []

    def child(backend: str, precision: str, threads: int, timeout_s: float = 900.0,
              index: int = 0) -> PeakResult:
        asked.append(index)
        return sustained(f"GPU-{index}", 600e12)

    monkeypatch.setattr(peak, "peak_in_own_process", child)
    found = peak.node_peaks("cuda", "bf16", 0, 4)
    assert sorted(asked) == [0, 1, 2, 3]
    assert [p.device_key for p in found] == ["GPU-0", "GPU-1", "GPU-2", "GPU-3"]


def test_a_gpu_run_settles_on_the_sustained_peaks_even_with_an_in_run_probe(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from harness.run import guard, preflight

    monkeypatch.setattr(guard, "visible_gpus", lambda: 8)
    monkeypatch.setattr(preflight, "node_peaks", lambda *args: ("peaks of", args))
    spec = RunSpec(workload="resnet50", backend="cuda", comm="nccl", precision="bf16",
                   nproc_per_node=4, peak="in-run")
    assert preflight.cached_peak(spec) == ("peaks of", ("cuda", "bf16", torch.get_num_threads(), 4))


def _rank(index: int, uuid: str, readings: list[dict[str, Any]]) -> RankResult:
    return RankResult(rank=index, world_size=3, device_name=H200, settings={},
                      step_times=[0.5] * 3, device_key=uuid, peak_readings=readings)


def test_mfu_divides_by_the_sustained_peaks_and_keeps_the_bursts_beside() -> None:
    """Three ranks: two on this node's measured boards (one capped), one on a board of
    another node that was not measured here (counted at their median, and named)."""
    burst = {"when": "before", "flops": 800e12, "memory_bandwidth": 4e12, "threads": 0,
             "per_size": {}, "measured_at": "x"}
    spec = RunSpec(workload="resnet50", backend="cuda", comm="nccl", precision="bf16",
                   nproc_per_node=2, nnodes=2, batch_per_rank=256)
    context = CollectContext(spec=spec, ranks=[
        _rank(0, "GPU-0", [burst]), _rank(1, "GPU-1", [burst]),
        _rank(2, "GPU-9", [{"when": "before", "skipped": "0.50 GiB free: skipped"}])],
        peak=[sustained("GPU-0", 665e12), sustained("GPU-1", 500e12, CAPPED)])
    found = {m.name: m for m in mfu(context)}
    peak_flops = found["peak_flops"]
    assert peak_flops.value == pytest.approx(665e12 + 500e12 + 582.5e12)
    extra = peak_flops.extra
    assert extra["peak_source"] == "sustained" and extra["not_measured_here"] == ["GPU-9"]
    assert extra["per_device"]["GPU-1"] == 500e12
    assert extra["burst_flops"] == pytest.approx(2 * 810e12)
    assert extra["device_state"]["GPU-1"] == CAPPED
    assert extra["in_run_bursts"] == {"before": pytest.approx(1600e12)}  # beside, not divided by
    assert extra["in_run_skipped"] == ["0.50 GiB free: skipped"]


def test_the_in_run_probe_fits_the_memory_the_model_left() -> None:
    sizes, copy = peak.probe_plan(100 * 2**30, "bf16")
    assert sizes == peak.GEMM_SIZES["cuda"] and copy == peak.COPY_BYTES["cuda"]
    sizes, copy = peak.probe_plan(2 * 2**30, "bf16")
    half = 2**30
    assert copy == half // 4 and all(peak.gemm_bytes(n, "bf16") + 2 * copy <= half
                                     for n in sizes)
    assert sizes == (2048, 4096)  # 8192 would not fit
    reason = peak.probe_plan(200 * 2**20, "bf16")
    assert isinstance(reason, str) and "0.20 GiB free" in reason and "skipped" in reason


def test_an_in_run_reading_takes_only_what_fits_or_says_why_not(
        monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[dict[str, Any]] = []

    def measure(*args: Any, **given: Any) -> Any:
        asked.append(given)
        return SimpleNamespace(flops=1.0, memory_bandwidth=1.0, per_size={}, threads=0,
                               measured_at="x")

    monkeypatch.setattr(peak, "measure_peak", measure)
    tight = SimpleNamespace(free_memory=lambda device: 2 * 2**30)
    cpu = torch.device("cpu")  # the streams forked are the CPU's; the sizes are the GPU's
    monkeypatch.setitem(peak.GEMM_SIZES, "cpu", peak.GEMM_SIZES["cuda"])
    monkeypatch.setitem(peak.COPY_BYTES, "cpu", peak.COPY_BYTES["cuda"])
    peak.in_run_reading("cuda", "bf16", 0, cpu, "before", tight)
    assert asked[-1]["gemm_sizes"] == (2048, 4096) and asked[-1]["copy_bytes"] == 2**28
    full = SimpleNamespace(free_memory=lambda device: 150 * 2**20)
    reading = peak.in_run_reading("cuda", "bf16", 0, cpu, "after", full)
    assert reading["when"] == "after" and "skipped" in reading and len(asked) == 1

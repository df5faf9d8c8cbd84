"""The peak as a GPU sustains it, its clocks beside it, and measured away from the launching
process. No GPU here: the sustained loop runs on the CPU with a scripted timer, the clocks come
from backends that report them, the child process measures the CPU."""
from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from harness.microbench import peak
from harness.microbench.peak import PeakResult, measure_peak, peak_in_own_process, store_peak


@pytest.fixture
def keep_threads() -> Iterator[None]:
    saved = torch.get_num_threads()
    yield
    torch.set_num_threads(saved)


class ScriptedTimer:
    """Window times as a device throttling after its first windows would give them."""

    def __init__(self, seconds: list[float]) -> None:
        self.script = list(seconds)
        self.given: list[float] = []

    def start(self) -> None:
        pass

    def stop(self) -> None:
        self.given.append(self.script[len(self.given) % len(self.script)])

    def samples(self) -> list[float]:
        return list(self.given)


def test_the_sustained_rate_is_read_after_the_clocks_fell(monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    """Windows of 2 calls of 1 GFLOP: four fast ones (boost), then slow ones; the rate is the
    median of the last half of the windows, and every window ran its calls."""
    calls: list[int] = []
    timer = ScriptedTimer([0.1] * 4 + [0.2] * 100)
    backend = type("B", (), {"timer": lambda self, device: timer})()
    clock = iter(range(10_000))
    monkeypatch.setattr(peak.time, "perf_counter", lambda: next(clock) * 0.1)
    rate = peak._sustained(lambda: calls.append(1), 1e9, peak.SUSTAIN_WINDOW_S / 2, backend,
                           torch.device("cpu"), seconds=1.2)
    windows = len(timer.given)
    assert windows == 11 and len(calls) == 2 * windows  # clock read 0.1 s apart, 1.2 s
    assert rate == 2 * 1e9 / 0.2


def test_a_sustained_peak_publishes_the_sustained_rate(monkeypatch: pytest.MonkeyPatch,
                                                      keep_threads: None) -> None:
    monkeypatch.setitem(peak.GEMM_SIZES, "cpu", (32, 64))
    monkeypatch.setitem(peak.COPY_BYTES, "cpu", 64 * 1024)
    held: list[tuple[float, float]] = []

    def sustained(gemm: Any, flops_per_call: float, call_s: float, backend: Any,
                  device: torch.device, seconds: float) -> float:
        held.append((flops_per_call, seconds))
        gemm()
        return 1234.0

    monkeypatch.setattr(peak, "_sustained", sustained)
    result = measure_peak("cpu", "fp32", threads=1, reps=2, sustain_s=0.5)
    best = max(result.per_size, key=result.per_size.__getitem__)
    n = int(best.rpartition(" ")[2])
    assert held == [(2 * n**3, 0.5)]  # the best size, for the time asked
    assert result.flops == 1234.0 and result.burst_flops == max(result.per_size.values())
    assert result.sustained_s == 0.5
    assert result.clocks is None  # the CPU backend reads no clocks


def test_cpu_peaks_and_in_run_readings_are_bursts(monkeypatch: pytest.MonkeyPatch,
                                                   keep_threads: None) -> None:
    monkeypatch.setitem(peak.GEMM_SIZES, "cpu", (32,))
    monkeypatch.setitem(peak.COPY_BYTES, "cpu", 64 * 1024)
    assert peak.SUSTAIN_S.get("cpu", 0.0) == 0.0 and peak.SUSTAIN_S["cuda"] >= 10.0
    result = measure_peak("cpu", "fp32", threads=1, reps=2)
    assert result.burst_flops is None and result.sustained_s is None
    asked: list[Any] = []
    real = peak.measure_peak
    monkeypatch.setattr(peak, "measure_peak",
                        lambda *a, **k: asked.append(k.get("sustain_s")) or real(*a, **k))
    peak.in_run_reading("cpu", "fp32", 1, torch.device("cpu"), "before")
    assert asked == [0.0]  # an in-run reading is never sustained, on any device


def test_a_gpu_peak_reads_its_clocks_at_the_end(monkeypatch: pytest.MonkeyPatch,
                                                keep_threads: None) -> None:
    """Where the backend reports clocks (CUDA, through NVML), the peak carries them."""
    from backends.cpu import CPUBackend

    monkeypatch.setitem(peak.GEMM_SIZES, "cpu", (32,))
    monkeypatch.setitem(peak.COPY_BYTES, "cpu", 64 * 1024)
    reading = {"sm_clock_mhz": 1755, "max_sm_clock_mhz": 1980, "clock_reasons": ["SwPowerCap"]}
    monkeypatch.setattr(CPUBackend, "clocks", lambda self, device: reading)
    monkeypatch.setattr(peak, "_sustained", lambda *args, **kwargs: 99.0)
    result = measure_peak("cpu", "fp32", threads=1, reps=2, sustain_s=0.1)
    assert result.clocks == reading
    assert PeakResult(**json.loads(json.dumps(result.as_dict()))) == result


def test_the_peak_probe_runs_in_a_process_of_its_own(monkeypatch: pytest.MonkeyPatch,
                                                     tmp_path: Path) -> None:
    """A cached peak comes back from the child as stored; a probe that fails says so."""
    monkeypatch.setenv("DTBENCH_CACHE_DIR", str(tmp_path))
    from backends.cpu import CPUBackend

    name = CPUBackend().device_name(torch.device("cpu"))
    stored = store_peak(PeakResult(
        backend="cpu", device_name=name, precision="fp32", threads=1, flops=4.2e10,
        memory_bandwidth=1e10, per_size={"mm 64": 4.2e10}, measured_at="2026-01-01T00:00:00",
        torch=torch.__version__, burst_flops=5e10, sustained_s=10.0,
        clocks={"sm_clock_mhz": 1500}))
    assert peak_in_own_process("cpu", "fp32", 1) == stored
    with pytest.raises(RuntimeError, match="the nonesuch peak probe failed: .*nonesuch"):
        peak_in_own_process("nonesuch", "fp32", 1)


def test_settling_a_gpu_run_measures_its_peak_in_a_child(monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    from backends.cpu import CPUBackend
    from backends.cuda import CUDABackend
    from harness.core.spec import RunSpec
    from harness.run import settle

    assert CUDABackend.probes_in_own_process and not CPUBackend.probes_in_own_process
    asked: list[tuple[str, str, int]] = []
    monkeypatch.setattr(CPUBackend, "probes_in_own_process", True)
    monkeypatch.setattr(settle, "peak_in_own_process",
                        lambda *args: asked.append(args) or "from the child")
    monkeypatch.setattr(settle, "device_peak", lambda *args: pytest.fail("measured here"))
    spec = RunSpec(workload="hep_cnn", size="tiny", batch_per_rank=4, steps=3, threads=2)
    assert settle.cached_peak(spec) == "from the child"
    assert asked == [("cpu", "fp32", 2)]

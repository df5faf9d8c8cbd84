"""One rank's work: raw step times and losses, divergence, and time-to-train preconditions."""
from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from harness.core.errors import RunFailed
from harness.rank.faults import check_finite
from harness.rank.loops import run_throughput, run_time_to_train
from harness.spec.specs import RunSpec
from workloads.base import Dataset
from workloads.hep_cnn import HEPCNNWorkload

SPEC = RunSpec(workload="hep_cnn", size="tiny", batch_per_rank=4, steps=2, warmup=1, threads=1)


@pytest.fixture(autouse=True)
def keep_threads() -> Iterator[None]:
    saved = torch.get_num_threads()
    yield
    torch.set_num_threads(saved)


def test_divergence_names_the_step() -> None:
    check_finite([1.0, 0.5], first_step=3)
    with pytest.raises(RunFailed, match="diverged at step 4: loss is nan"):
        check_finite([1.0, math.nan], first_step=3)


def test_throughput_returns_one_time_and_loss_per_measured_step() -> None:
    calls: list[tuple[str, int, int]] = []
    result = run_throughput(SPEC, progress=lambda *args: calls.append(args))
    assert len(result.step_times) == 2 and all(t > 0 for t in result.step_times)
    assert len(result.losses) == 2 and all(math.isfinite(v) for v in result.losses)
    assert result.peak_memory and result.peak_memory > 0
    assert result.settings["threads"] == 1
    assert calls == [("warmup", 1, 1), ("measure", 1, 2), ("measure", 2, 2)]


def test_each_measured_step_has_its_cpu_time_and_with_speed_probe_its_probe(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A CPU rank reads the process's CPU time over every measured step; --speed-probe times
    PROBE_PRODUCTS products after each measured step, after one untimed (settling steps'
    left out with them), and none without it."""
    from harness.rank import measure

    products: list[int] = []
    real_mm = torch.mm

    def counted(*args: torch.Tensor, **kwargs: torch.Tensor) -> torch.Tensor:
        if args[0].shape == (measure.PROBE_SIDE, measure.PROBE_SIDE):
            products.append(1)  # the probe's (the workload's and the peak's are other sizes)
        return real_mm(*args, **kwargs)

    monkeypatch.setattr(measure.torch, "mm", counted)
    plain = run_throughput(SPEC.replace(steps=3))
    assert len(plain.step_cpu_times) == 3 and plain.probe_times == []
    probed = run_throughput(SPEC.replace(steps=3, speed_probe=True))
    assert len(probed.probe_times) == len(probed.step_times) == len(probed.step_cpu_times) == 3
    assert all(t > 0 for t in probed.probe_times)
    assert len(products) == 3 * (measure.PROBE_PRODUCTS + 1)  # one untimed each


def test_time_to_train_needs_one_global_batch_of_data(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    small = Dataset(torch.zeros(3, 3, 32, 32), torch.zeros(3, dtype=torch.long))
    monkeypatch.setattr(HEPCNNWorkload, "datasets", lambda self, *args: (small, small))
    with pytest.raises(RunFailed, match="training set has 3 samples, fewer than one global batch"):
        run_time_to_train(SPEC.replace(mode="ttt"), tmp_path / "run.mllog")
    assert "init_start" in (tmp_path / "run.mllog").read_text()


PROBE_SCRIPT = r"""
import json, sys, torch
from backends.cpu import tune_allocator
import harness.microbench.peak as peak
from harness.spec.specs import RunSpec
from harness.rank.loops import run_throughput

tune_allocator()  # as a rank process does: freed blocks stay in the heap


def probe(backend, precision, threads, device, when, rank_backend=None):
    # the size of dtbench's copy buffers plus GEMM-sized operands, every page touched
    buffers = [torch.ones(PROBE_MIB // 2 * 2**18), *(torch.ones(2**22) for _ in range(32))]
    touched = sum(float(b[-1]) for b in buffers)
    return {"when": when, "flops": 1e9 * touched, "memory_bandwidth": 1e9, "per_size": {},
            "threads": threads, "measured_at": "now"}


peak.in_run_reading = probe
spec = RunSpec(workload="hep_cnn", size="tiny", batch_per_rank=4, steps=3, warmup=1,
               threads=1, peak=sys.argv[1])
result = run_throughput(spec)
print(json.dumps({"peak_memory": result.peak_memory, "readings": len(result.peak_readings)}))
""".replace("PROBE_MIB", "768")


def _peak_memory_with(peak: str) -> dict:
    import json
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[3]
    done = subprocess.run([sys.executable, "-c", PROBE_SCRIPT, peak], cwd=root,
                          capture_output=True, text=True, timeout=300, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_in_run_peak_probe_is_not_in_the_peak_memory() -> None:
    """A probe that touches 1 GiB (768 MiB of copy buffers, 32 x 16 MiB of operands) before
    and after the steps leaves the run's peak memory where it is without the probe."""
    cached, in_run = _peak_memory_with("cached"), _peak_memory_with("in-run")
    assert (cached["readings"], in_run["readings"]) == (0, 2)
    assert abs(in_run["peak_memory"] - cached["peak_memory"]) < 128 * 2**20, (cached, in_run)


def test_time_to_train_reads_the_energy_counter_too(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """A time-to-train run reads the device's energy counter at run_start and run_stop (it
    read none before), evaluations included."""
    from backends.base import EnergyMeter
    from backends.cpu import CPUBackend

    class Counter(EnergyMeter):
        readings = 0

        def joules(self) -> float:
            Counter.readings += 1
            return 1000.0 + 7.5 * Counter.readings

    data = Dataset(torch.randn(8, 3, 32, 32), torch.zeros(8, dtype=torch.long))
    monkeypatch.setattr(HEPCNNWorkload, "datasets", lambda self, *args: (data, data))
    monkeypatch.setattr(CPUBackend, "energy_meter", lambda self, device: Counter())
    result = run_time_to_train(SPEC.replace(mode="ttt"), tmp_path / "run.mllog")
    assert Counter.readings == 2 and result.energy_joules == 7.5
    assert result.energy_steps and result.energy_window_s and result.energy_domains

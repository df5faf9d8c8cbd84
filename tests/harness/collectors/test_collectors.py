"""Collectors: raw per-rank measurements become the metrics of docs/spec/metrics.md."""
from __future__ import annotations

import statistics
from typing import Any

import pytest

from harness.collectors import CollectContext, collect
from harness.collectors.energy import energy, energy_absent_reason
from harness.collectors.flops import flops, mfu
from harness.collectors.memory import peak_memory
from harness.collectors.quality import quality
from harness.collectors.timing import (
    cpu_time,
    reference_time,
    step_time,
    step_times_over_ranks,
    throughput,
)
from harness.microbench.peak import PeakResult
from harness.rundir import RankResult
from harness.spec.specs import RunSpec

SPEC = RunSpec(workload="hep_cnn", size="tiny", batch_per_rank=4, steps=4, warmup=1)
PEAK = PeakResult(backend="cpu", device_name="cpu", precision="fp32", threads=1, flops=1e9,
                  memory_bandwidth=1e9, per_size={"64": 1e9},
                  measured_at="2024-01-01T00:00:00+00:00", torch="x")


def rank(index: int = 0, world: int = 1, **fields: Any) -> RankResult:
    return RankResult(rank=index, world_size=world, device_name="cpu", settings={}, **fields)


def context(*ranks: RankResult, spec: RunSpec = SPEC, **fields: Any) -> CollectContext:
    return CollectContext(spec=spec, ranks=list(ranks), **fields)


def test_a_step_ends_when_the_slowest_rank_ends_it() -> None:
    ctx = context(rank(0, 2, step_times=[1.0, 3.0, 2.0]),
                  rank(1, 2, step_times=[2.0, 1.0, 2.0, 9.0]))
    assert step_times_over_ranks(ctx) == [2.0, 3.0, 2.0]


def test_step_time_is_the_median_with_raw_samples() -> None:
    (entry,) = step_time(context(rank(step_times=[0.4, 0.1, 0.2, 0.3])))
    assert (entry.name, entry.unit, entry.higher_is_better) == ("step_time", "s", False)
    assert entry.value == pytest.approx(0.25)
    assert entry.samples == [0.4, 0.1, 0.2, 0.3]


def test_throughput_counts_global_samples() -> None:
    spec = SPEC.replace(nproc_per_node=2, comm="gloo")
    times = [0.5, 0.25, 0.5, 1.0]
    ctx = context(rank(0, 2, step_times=times), rank(1, 2, step_times=times), spec=spec)
    (entry,) = throughput(ctx)
    assert entry.unit == "samples/s" and entry.higher_is_better
    assert entry.value == pytest.approx(8 / statistics.median(times))
    assert entry.samples == pytest.approx([16.0, 32.0, 16.0, 8.0])
    assert entry.extra["overall"] == pytest.approx(8 * 4 / sum(times))
    assert entry.extra["global_batch"] == 8


def test_cpu_time_sums_the_ranks_processes_per_step() -> None:
    """A step's CPU seconds are every rank's (each a process of its own), summed step by step
    over the steps all ranks have; the value is their median."""
    (entry,) = cpu_time(context(rank(0, 2, step_times=[1.0] * 3, step_cpu_times=[0.5, 0.7, 0.6]),
                                rank(1, 2, step_times=[1.0] * 4,
                                     step_cpu_times=[0.25, 0.25, 0.5, 9.0])))
    assert (entry.name, entry.unit, entry.higher_is_better) == ("cpu_time", "s", False)
    assert entry.samples == [0.75, 0.95, 1.1] and entry.value == 0.95
    assert entry.extra["ranks"] == 2


def test_cpu_time_is_absent_where_a_rank_did_not_read_it() -> None:
    """A device timer reads no CPU time: a sum missing a rank would understate the step."""
    assert cpu_time(context(rank(0, 2, step_times=[1.0], step_cpu_times=[0.5]),
                            rank(1, 2, step_times=[1.0]))) == []
    assert cpu_time(context(rank(step_times=[1.0]))) == []


def test_the_speed_probe_is_the_mean_over_ranks_beside_each_step() -> None:
    (entry,) = reference_time(context(rank(0, 2, step_times=[1.0] * 2, probe_times=[0.2, 0.4]),
                                      rank(1, 2, step_times=[1.0] * 2,
                                           probe_times=[0.4, 0.4, 0.1])))
    assert entry.samples == [pytest.approx(0.3), pytest.approx(0.4)]
    assert entry.value == pytest.approx(0.35) and entry.extra["ranks"] == 2
    assert reference_time(context(rank(step_times=[1.0]))) == []  # no --speed-probe


def test_the_host_timer_reads_cpu_time_over_the_same_steps() -> None:
    """PerfCounterTimer keeps a CPU-time reading for each wall-time one; a busy loop inside a
    step costs CPU time, a sleep costs none (counted against the busy step's, not timed)."""
    import time

    from backends.base import StepTimer
    from backends.cpu import PerfCounterTimer
    from backends.cuda import CUDAEventTimer

    timer = PerfCounterTimer()
    timer.start()
    time.sleep(0.05)
    timer.stop()
    timer.start()
    deadline = time.perf_counter() + 0.05
    while time.perf_counter() < deadline:
        pass
    timer.stop()
    walls, cpus = timer.samples(), timer.cpu_samples()
    assert len(walls) == len(cpus) == 2
    assert cpus[0] < cpus[1] and cpus[1] > 0
    assert CUDAEventTimer.cpu_samples is StepTimer.cpu_samples  # a device's: none


def test_no_step_times_no_timing_metrics() -> None:
    assert step_time(context(rank())) == [] and throughput(context()) == []


def test_achieved_flops_and_mfu() -> None:
    ctx = context(rank(step_times=[0.5, 0.5, 0.5]), flops_per_sample=1_000_000, peak=PEAK)
    metrics = {m.name: m for m in collect(ctx)}
    assert metrics["flops_per_sample"].value == 1e6
    assert metrics["achieved_flops"].value == pytest.approx(1e6 * 8)
    assert metrics["peak_flops"].value == 1e9
    assert metrics["mfu"].value == pytest.approx(8e6 / 1e9)
    assert metrics["mfu"].samples == pytest.approx([8e6 / 1e9] * 3)


def test_an_mfu_above_one_is_withheld_with_the_reason() -> None:
    """A peak read low (2 GFLOP/s on a busy machine once gave MFU 23) never becomes a
    published MFU above 1: the peak is kept, the MFU is not, and the record says why."""
    low = PeakResult(backend="cpu", device_name="cpu", precision="fp32", threads=1, flops=4e6,
                     memory_bandwidth=1e9, per_size={"64": 4e6},
                     measured_at="2024-01-01T00:00:00+00:00", torch="x")
    ctx = context(rank(step_times=[0.5, 0.5, 0.5]), flops_per_sample=1_000_000, peak=low)
    metrics = {m.name: m for m in collect(ctx)}
    assert metrics["achieved_flops"].value == pytest.approx(8e6)
    assert "mfu" not in metrics
    assert "exceeds the peak" in metrics["peak_flops"].extra["mfu_withheld"]


def test_an_mfu_sample_above_one_withholds_the_mfu() -> None:
    """The median step is below the peak but the fastest step is above it: that step's MFU
    sample would be above 1, so the peak is as impossible as before and MFU is withheld."""
    peak = PeakResult(backend="cpu", device_name="cpu", precision="fp32", threads=1,
                      flops=6e6, memory_bandwidth=1e9, per_size={"64": 6e6},
                      measured_at="2024-01-01T00:00:00+00:00", torch="x")
    # 4 samples a step of 1 MFLOP each: 4e6 FLOP/s at 1 s, 8e6 FLOP/s at 0.5 s
    ctx = context(rank(step_times=[1.0, 1.0, 0.5]), flops_per_sample=1_000_000, peak=peak)
    metrics = {m.name: m for m in collect(ctx)}
    assert metrics["achieved_flops"].value == pytest.approx(4e6)
    assert max(metrics["achieved_flops"].samples) == pytest.approx(8e6)
    assert "mfu" not in metrics
    assert "fastest measured step" in metrics["peak_flops"].extra["mfu_withheld"]


def test_a_reading_below_the_achieved_rate_is_named_not_divided_by() -> None:
    spec = SPEC.replace(nproc_per_node=1)
    ranks = [rank(0, 1, step_times=[0.5] * 3, peak_readings=[reading("before", 6e6),
                                                              reading("after", 2e7)])]
    found = {m.name: m for m in collect(context(*ranks, spec=spec, flops_per_sample=1e6))}
    assert found["achieved_flops"].value == pytest.approx(8e6)
    assert found["mfu"].value == pytest.approx(8e6 / 2e7)
    assert found["mfu"].extra["against_each_reading"] == {"after": pytest.approx(0.4)}
    assert found["mfu"].extra["readings_below_achieved"] == ["before"]


@pytest.mark.parametrize("backend, devices", [("cpu", 2), ("cuda", 8)])
def test_peak_counts_devices(backend: str, devices: int) -> None:
    spec = SPEC.replace(backend=backend, nproc_per_node=4, nnodes=2, comm="gloo")
    entry = {m.name: m for m in mfu(context(spec=spec, peak=PEAK))}["peak_flops"]
    assert entry.value == devices * 1e9
    assert entry.extra["devices"] == devices and entry.extra["peak_source"] == "cached"


def reading(when: str, flops: float, bandwidth: float = 1e10) -> dict:
    return {"when": when, "flops": flops, "memory_bandwidth": bandwidth, "threads": 1,
            "per_size": {"mm 256": flops}, "measured_at": "2024-01-01T00:00:00+00:00"}


def test_in_run_peak_sums_ranks_and_keeps_both_readings() -> None:
    spec = SPEC.replace(nproc_per_node=2, comm="gloo")
    ranks = [rank(0, 2, step_times=[0.5] * 3, peak_readings=[reading("before", 4e9, 1e10),
                                                              reading("after", 3e9, 2e10)]),
             rank(1, 2, step_times=[0.5] * 3, peak_readings=[reading("before", 5e9, 1e10),
                                                              reading("after", 5e9, 1e10)])]
    found = {m.name: m for m in collect(context(*ranks, spec=spec, flops_per_sample=1e6))}
    peak = found["peak_flops"]
    assert peak.value == 9e9 and peak.extra["peak_source"] == "in-run"
    assert peak.extra["readings"] == {"before": 9e9, "after": 8e9}
    assert peak.extra["spread"] == pytest.approx(1 / 9)
    assert found["memory_bandwidth"].value == 3e10
    achieved = found["achieved_flops"].value
    assert found["mfu"].value == pytest.approx(achieved / 9e9)
    assert found["mfu"].extra["against_each_reading"]["after"] == pytest.approx(achieved / 8e9)


def test_flops_without_a_count_or_peak_are_absent() -> None:
    assert flops(context(rank(step_times=[1.0]))) == []
    assert mfu(context(rank(step_times=[1.0]))) == []


def test_peak_memory_is_the_maximum_over_ranks() -> None:
    (entry,) = peak_memory(context(rank(0, 2, peak_memory=10), rank(1, 2, peak_memory=30)))
    assert entry.value == 30 and entry.unit == "bytes" and entry.extra["per_rank"] == [10, 30]
    assert peak_memory(context(rank())) == []


def test_quality_reached_gives_time_to_train() -> None:
    lead = rank(quality={"accuracy": 0.8, "auc": 0.9}, target_reached=True, time_to_train=12.5,
                quality_history=[{"epoch": 1, "accuracy": 0.8}])
    by_name = {m.name: m for m in quality(context(lead, spec=SPEC.replace(mode="ttt")))}
    assert by_name["time_to_train"].value == 12.5 and by_name["time_to_train"].unit == "s"
    assert by_name["quality"].value == 0.8
    assert by_name["quality"].extra["reached"] is True
    assert by_name["quality"].extra["target"] == 0.7


def test_quality_not_reached_has_no_time_to_train() -> None:
    lead = rank(quality={"accuracy": 0.6}, target_reached=False, time_to_train=12.5)
    found = quality(context(lead, spec=SPEC.replace(mode="ttt")))
    assert [m.name for m in found] == ["quality"]
    assert found[0].extra["reached"] is False


def test_perplexity_is_lower_is_better() -> None:
    spec = RunSpec(workload="lstm", size="tiny", batch_per_rank=4, steps=1, mode="ttt")
    (entry,) = quality(context(rank(quality={"perplexity": 400.0}, target_reached=False),
                               spec=spec))
    assert entry.unit == "perplexity" and entry.higher_is_better is False


def test_energy_sums_ranks_and_reports_why_it_is_absent() -> None:
    (entry,) = energy(context(rank(0, 2, energy_joules=1.5), rank(1, 2, energy_joules=2.5)))
    assert entry.value == 4.0 and entry.unit == "J"
    missing = context(rank(0, 2, energy_joules=1.5), rank(1, 2, energy_reason="no RAPL"))
    assert energy(missing) == []
    assert energy_absent_reason(missing) == "no RAPL"
    assert energy_absent_reason(context(rank(energy_joules=1.0))) is None


def test_ranks_sharing_a_gpu_count_its_energy_and_peak_once() -> None:
    """Two ranks on one GPU (--share-gpu) each read the whole board: its energy and its peak
    count once, and MFU is per GPU (said in the record). Two GPUs are summed."""
    spec = SPEC.replace(backend="cuda", comm="gloo", nproc_per_node=2, share_gpu=True)
    shared = [rank(r, 2, step_times=[0.5] * 3, energy_joules=joules, device_key="GPU-a",
                   peak_readings=[reading("before", 4e9 + r), reading("after", 3e9)])
              for r, joules in ((0, 100.0), (1, 101.0))]
    (entry,) = energy(context(*shared, spec=spec))
    assert entry.value == 101.0 and entry.extra["devices"] == 1
    found = {m.name: m for m in collect(context(*shared, spec=spec, flops_per_sample=1e6))}
    assert found["peak_flops"].value == 4e9 + 1 and found["peak_flops"].extra["devices"] == 1
    assert "per GPU" in found["peak_flops"].extra["shared_devices"]
    unread = [rank(r, 2, device_key="GPU-a") for r in range(2)]  # no in-run readings
    cached = {m.name: m for m in mfu(context(*unread, spec=spec, peak=PEAK))}["peak_flops"]
    assert cached.value == 1e9 and cached.extra["devices"] == 1
    apart = [rank(r, 2, energy_joules=100.0, device_key=f"GPU-{r}") for r in range(2)]
    (entry,) = energy(context(*apart, spec=spec.replace(share_gpu=False)))
    assert entry.value == 200.0 and entry.extra["devices"] == 2


def test_gpu_memory_is_reported_allocated_reserved_and_in_use() -> None:
    ranks = [rank(0, 2, peak_memory=10, memory={"reserved": 16, "device_used": 40}),
             rank(1, 2, peak_memory=12, memory={"reserved": 20, "device_used": None})]
    found = {m.name: m for m in peak_memory(context(*ranks))}
    assert found["peak_memory"].value == 12
    assert found["peak_memory_reserved"].value == 20
    assert found["device_memory_used"].value == 40
    assert found["device_memory_used"].extra["per_rank"] == [40, None]
    assert set(found) == {"peak_memory", "peak_memory_reserved", "device_memory_used"} \
        and len(peak_memory(context(rank(peak_memory=5)))) == 1


def test_spec_sheet_mfu_beside_the_measured_one_on_a_known_gpu() -> None:
    """A faked H100: MFU against the measured peak as before, and against the datasheet's
    dense bf16 peak (989.5 TFLOP/s a device); an unknown device gets none."""
    spec = SPEC.replace(backend="cuda", comm="nccl", nproc_per_node=2, precision="bf16")
    gpu = PEAK.__class__(**{**PEAK.as_dict(), "backend": "cuda",
                            "device_name": "NVIDIA H100 80GB HBM3", "flops": 700e12})
    ranks = [RankResult(rank=r, world_size=2, device_name="NVIDIA H100 80GB HBM3", settings={},
                        step_times=[0.5] * 3, device_key=f"GPU-{r}") for r in range(2)]
    found = {m.name: m for m in collect(context(*ranks, spec=spec, peak=gpu,
                                                flops_per_sample=1e12))}
    achieved = found["achieved_flops"].value
    assert found["mfu"].value == pytest.approx(achieved / 1.4e15)
    assert found["mfu_spec"].value == pytest.approx(achieved / (2 * 989.5e12))
    assert "H100 Tensor Core GPU datasheet" in found["mfu_spec"].extra["source"]
    unknown = [RankResult(rank=r, world_size=2, device_name="NVIDIA GeForce RTX 4090",
                          settings={}, step_times=[0.5] * 3) for r in range(2)]
    found = {m.name for m in collect(context(*unknown, spec=spec, peak=gpu,
                                             flops_per_sample=1e12))}
    assert "mfu" in found and "mfu_spec" not in found

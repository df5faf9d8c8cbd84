"""Every GPU of a node checked at once, and the one slow GPU of eight named; NCCL's busbw judged
against the link NVML reports. The timing source is a fake (each GPU's PeakResult made here)
and NVML is faked: nothing here runs on a GPU."""
from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
import torch

from backends.gpu_topology import gpu_topology
from harness.doctor.checks import FAIL, PASS, WARN
from harness.doctor.gpus import gpu_checks, measure_gpus, nccl_check
from harness.microbench.peak import PeakResult
from tests.backends.test_gpu_topology import fake_nvml, sysfs

PRECISIONS = ("fp32", "bf16")
H100 = "NVIDIA H100 80GB HBM3"


def result(precision: str, flops: float) -> PeakResult:
    return PeakResult(backend="cuda", device_name=H100, precision=precision, threads=0,
                      flops=flops, memory_bandwidth=2.9e12, per_size={"mm 8192": flops},
                      measured_at="2026-11-27T00:00:00+00:00", torch=torch.__version__,
                      burst_flops=flops * 1.2, sustained_s=4.0,
                      clocks={"sm_clock_mhz": 1755, "max_sm_clock_mhz": 1980,
                              "clock_reasons": ["SwPowerCap"]})


def eight_gpus(slow: int | None, gpus: int = 8) -> Any:
    """A probe per GPU that waits for all the others before it reports (so that probes run one
    after another would never get past the barrier), GPU `slow` at 70%."""
    everyone = threading.Barrier(gpus, timeout=30)

    def probe(index: int, precisions: tuple[str, ...], timeout_s: float) -> Any:
        everyone.wait()
        share = 0.7 if index == slow else 1.0 + 0.002 * index  # the others within 1.4%
        return {p: result(p, share * (600e12 if p == "bf16" else 330e12)) for p in precisions}

    return probe


def test_one_slow_gpu_of_eight_is_named() -> None:
    measured = measure_gpus(8, PRECISIONS, probe=eight_gpus(slow=5))
    assert sorted(measured) == list(range(8))
    checks = {c.name: c for c in gpu_checks(measured, {}, PRECISIONS)}
    for precision in PRECISIONS:
        outliers = checks[f"gpu_outliers_{precision}"]
        assert outliers.verdict == FAIL and outliers.reason.startswith("gpu5 ")
        assert "-30%" in outliers.reason and "gpu4" not in outliers.reason
    # every GPU has its own checks against the datasheet
    assert {f"gpu{i}_gemm_bf16" for i in range(8)} <= set(checks)
    assert checks["gpu5_gemm_bf16"].verdict == WARN  # 420 of 989.5 TFLOP/s
    assert checks["gpu3_sm_clock_bf16"].verdict == PASS


def test_eight_even_gpus_pass_and_a_failed_probe_is_named() -> None:
    measured = measure_gpus(8, PRECISIONS, probe=eight_gpus(slow=None))
    checks = {c.name: c for c in gpu_checks(measured, {}, PRECISIONS)}
    assert checks["gpu_outliers_bf16"].verdict == PASS
    assert checks["gpu_outliers_bf16"].value == pytest.approx(0.014 / 1.007, abs=1e-3)
    measured[2] = "CUDA error: uncorrectable ECC error encountered"
    checks = {c.name: c for c in gpu_checks(measured, {}, PRECISIONS)}
    assert checks["gpu2_probe"].verdict == FAIL and "ECC" in checks["gpu2_probe"].reason
    assert "gpu2_gemm_bf16" not in checks


@pytest.mark.parametrize(("busbw", "nvlinks", "verdict", "link"), [
    (380e9, 18, PASS, "NVLink 4, 18 links"), (100e9, 18, FAIL, "NVLink 4, 18 links"),
    (40e9, 0, PASS, "PCIe 5 x16"), (20e9, 0, WARN, "PCIe 5 x16")])
def test_nccl_busbw_is_judged_against_the_link_nvml_reports(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, busbw: float, nvlinks: int,
        verdict: str, link: str) -> None:
    fake_nvml(monkeypatch, nvlinks=nvlinks)
    check = nccl_check(busbw, (256 * 2**20, 2**30), 8, gpu_topology(sysfs(tmp_path)))
    assert check.verdict == verdict and link in check.expected
    assert check.value == busbw / 1e9 and "256 MiB, 1024 MiB" in check.reason
    assert nccl_check(None, (2**30,), 8, None, "rank 3 hung").verdict == FAIL

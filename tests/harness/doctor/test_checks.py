"""The node check: verdicts from the pieces, a GPU's health through a fake NVML (throttled,
ECC errors, a narrow PCIe link), datasheet and CPU expectations, and `dtbench doctor` for
real on this machine."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from backends import nvml
from harness.doctor.checks import (
    FAIL,
    PASS,
    WARN,
    NodeCheck,
    clock_checks,
    compute_checks,
    health_checks,
    ratio_verdict,
    verdict_of,
)
from harness.facts.datasheets import cpu_peak_estimate, datasheet_for

ROOT = Path(__file__).resolve().parents[3]


def test_datasheets_match_driver_names_most_specific_first() -> None:
    assert datasheet_for("NVIDIA H100 80GB HBM3").name == "NVIDIA H100 SXM"
    assert datasheet_for("NVIDIA H100 PCIe").name == "NVIDIA H100 PCIe"
    assert datasheet_for("NVIDIA H200").name == "NVIDIA H200 SXM"
    assert datasheet_for("NVIDIA A100-SXM4-80GB").name == "NVIDIA A100 80GB"
    assert datasheet_for("NVIDIA GeForce RTX 4090") is None and datasheet_for(None) is None
    h200 = datasheet_for("NVIDIA H200")
    # dtbench's fp32 on CUDA runs with TF32 allowed: its ceiling is the TF32 figure
    assert h200.peak("fp32") == pytest.approx(494.5e12)
    assert h200.peak("bf16") == pytest.approx(989.5e12)
    assert h200.peak("fp32", backend="cpu") == pytest.approx(67e12)
    assert datasheet_for("Tesla V100-SXM2-16GB").peak("bf16") is None


def test_a_cpu_peak_is_cores_clock_and_vector_width() -> None:
    zen4 = {"physical_cores": 2, "frequency": {"cpuinfo_mhz": 2600.0},
            "isa_flags": ["avx2", "avx512f", "avx512_bf16", "fma"]}
    fp32 = cpu_peak_estimate(zen4, "fp32", "Zen 4")
    assert fp32["flops"] == 2 * 2600e6 * 32 and "estimate" in fp32["method"]
    assert cpu_peak_estimate(zen4, "bf16", "Zen 4")["flops"] == 2 * 2600e6 * 64
    amx = {"physical_cores": 16, "frequency": {"max_mhz": 2000.0},
           "isa_flags": ["avx512f", "amx_bf16", "avx512_bf16"]}
    assert cpu_peak_estimate(amx, "fp32", "Emerald Rapids")["flops"] == 16 * 2000e6 * 64
    assert cpu_peak_estimate(amx, "bf16", "Emerald Rapids")["flops"] == 16 * 2000e6 * 1024
    assert cpu_peak_estimate({"physical_cores": 2, "isa_flags": ["avx2"]}, "fp32") is None


def test_ratios_against_expectations_give_their_verdicts() -> None:
    assert ratio_verdict(700, 1000, "datasheet")[0] == PASS
    assert ratio_verdict(500, 1000, "datasheet") == (WARN, "50% of the datasheet, below 60%")
    assert ratio_verdict(300, 1000, "datasheet")[0] == FAIL
    assert ratio_verdict(300, None, "datasheet")[0] == PASS  # nothing known: the fleet judges
    assert ratio_verdict(200, 1000, "estimate")[0] == WARN


def test_a_gpu_peak_is_judged_against_its_datasheet() -> None:
    peak = SimpleNamespace(device_name="NVIDIA H100 80GB HBM3", flops=300e12,
                           memory_bandwidth=2.9e12, sustained_s=4.0,
                           clocks={"sm_clock_mhz": 1755, "max_sm_clock_mhz": 1980,
                                   "clock_reasons": ["SwPowerCap"]})
    made = compute_checks("cuda", {}, ("fp32", "bf16"), lambda p: peak)
    checks = {c.name: c for c in made}
    assert len(checks) == len(made)  # one name per check: the record's metrics are unique
    assert checks["gemm_bf16"].verdict == FAIL  # 30% of 989.5 TFLOP/s
    assert "H100 Tensor Core GPU datasheet" in checks["gemm_bf16"].expected
    assert checks["copy_bandwidth"].verdict == PASS  # 87% of 3.35 TB/s
    clock = checks["gpu_sm_clock_bf16"]
    assert clock.verdict == PASS and "power cap" in clock.reason


@pytest.mark.parametrize(("reasons", "verdict"), [
    (["SwPowerCap"], PASS), (["SwThermalSlowdown"], WARN), (["HwThermalSlowdown"], FAIL),
    (["SwPowerCap", "HwSlowdown"], FAIL)])
def test_a_throttled_gpu_is_named_by_its_clock_event_reasons(reasons: list[str],
                                                            verdict: str) -> None:
    (check,) = clock_checks({"sm_clock_mhz": 1100, "max_sm_clock_mhz": 1980,
                             "clock_reasons": reasons}, "NVIDIA H100", "bf16")
    assert check.verdict == verdict and (verdict == PASS or reasons[-1] in check.reason)


@pytest.fixture
def fake_gpu(monkeypatch: pytest.MonkeyPatch) -> SimpleNamespace:
    """A healthy H100 as NVML reports it; tests break one thing at a time."""
    pynvml = pytest.importorskip("pynvml")
    gpu = SimpleNamespace(ecc=(0, 0), remapped=(0, 0, 0, 0), width=16, max_width=16,
                          temperature=60, limit=700_000, default_limit=700_000)
    monkeypatch.setattr(pynvml, "nvmlInit", lambda: None)
    monkeypatch.setattr(pynvml, "nvmlShutdown", lambda: None)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetHandleByIndex", lambda index: "h")
    monkeypatch.setattr(pynvml, "nvmlDeviceGetEccMode", lambda h: (1, 1))
    monkeypatch.setattr(pynvml, "nvmlDeviceGetTotalEccErrors",
                        lambda h, kind, counter: gpu.ecc[0 if counter == 0 else 1])
    monkeypatch.setattr(pynvml, "nvmlDeviceGetRemappedRows", lambda h: gpu.remapped)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetRetiredPagesPendingStatus", lambda h: 0)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetTemperature", lambda h, sensor: gpu.temperature)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetTemperatureThreshold", lambda h, kind: 87)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetPowerUsage", lambda h: 650_000)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetEnforcedPowerLimit", lambda h: gpu.limit)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetPowerManagementDefaultLimit",
                        lambda h: gpu.default_limit)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetCurrPcieLinkGeneration", lambda h: 5)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetMaxPcieLinkGeneration", lambda h: 5)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetCurrPcieLinkWidth", lambda h: gpu.width)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetMaxPcieLinkWidth", lambda h: gpu.max_width)
    return gpu


def _checks(gpu: SimpleNamespace) -> dict[str, NodeCheck]:
    return {c.name: c for c in health_checks(nvml.device_health(0), "gpu0")}


def test_a_healthy_gpu_passes_every_health_check(fake_gpu: SimpleNamespace) -> None:
    checks = _checks(fake_gpu)
    assert {c.verdict for c in checks.values()} == {PASS}
    assert set(checks) == {"gpu0_ecc_uncorrected", "gpu0_remapped_rows", "gpu0_temperature",
                           "gpu0_power_limit", "gpu0_pcie_width"}


def test_uncorrected_ecc_errors_fail_now_and_warn_from_the_past(
        fake_gpu: SimpleNamespace) -> None:
    fake_gpu.ecc = (2, 2)
    assert _checks(fake_gpu)["gpu0_ecc_uncorrected"].verdict == FAIL
    fake_gpu.ecc = (0, 3)
    check = _checks(fake_gpu)["gpu0_ecc_uncorrected"]
    assert check.verdict == WARN and "3 over the board's life" in check.reason
    fake_gpu.ecc, fake_gpu.remapped = (0, 0), (0, 1, 0, 1)
    assert _checks(fake_gpu)["gpu0_remapped_rows"].verdict == FAIL


def test_a_pcie_link_at_x8_fails_with_the_reason(fake_gpu: SimpleNamespace) -> None:
    fake_gpu.width = 8
    check = _checks(fake_gpu)["gpu0_pcie_width"]
    assert check.verdict == FAIL and "x8 of x16" in check.reason


def test_a_hot_or_capped_gpu_warns(fake_gpu: SimpleNamespace) -> None:
    fake_gpu.temperature, fake_gpu.limit = 84, 500_000
    checks = _checks(fake_gpu)
    assert checks["gpu0_temperature"].verdict == WARN
    assert checks["gpu0_power_limit"].verdict == WARN
    assert "capped below the default" in checks["gpu0_power_limit"].reason


def test_the_overall_verdict_is_the_worst() -> None:
    made = [NodeCheck("a", "g", 1, "", "", PASS, ""), NodeCheck("b", "g", 1, "", "", WARN, "")]
    assert verdict_of(made) == WARN
    assert verdict_of([*made, NodeCheck("c", "g", 1, "", "", FAIL, "")]) == FAIL


@pytest.mark.slow
def test_doctor_on_this_machine(tmp_path: Path) -> None:
    """The whole check, for real: a verdict per check, the documented exit code, one
    schema-valid record in the store and in --json."""
    from harness.records.record import check_record

    done = subprocess.run([sys.executable, "-m", "harness", "doctor", "--out",
                           str(tmp_path / "store"), "--json", str(tmp_path / "doctor.json"),
                           "-q"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    (record,) = json.loads((tmp_path / "doctor.json").read_text())
    check_record(record)
    checks = record["notes"]["checks"]
    assert done.returncode == (1 if record["notes"]["verdict"] == "fail" else 0), done.stderr
    assert all(c["verdict"] in ("pass", "warn", "fail") and c["reason"] for c in checks)
    names = {c["name"] for c in checks}
    assert {"gemm_fp32", "gemm_bf16", "copy_bandwidth", "allreduce_gloo", "cpu_governor",
            "software_torch"} <= names
    measured: dict[str, Any] = {m["name"]: m for m in record["metrics"]}
    assert len(measured) == len(record["metrics"])
    assert measured["doctor_gemm_fp32"]["value"] > 0
    assert measured["doctor_gemm_fp32"]["verdict"] in ("pass", "warn", "fail")
    assert len(list((tmp_path / "store").rglob("*.json"))) == 1
    for check in checks:
        assert check["verdict"].upper() in done.stdout

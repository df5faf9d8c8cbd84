"""NVML wrappers exercised with pynvml's queries replaced by fakes: mocked, not measured."""
from __future__ import annotations

import sys
import threading
import time
from types import SimpleNamespace

import pytest

from backends.base import Availability
from backends.nvml import (
    NVMLEnergyMeter,
    NVMLSampler,
    NVMLUnavailable,
    gpu_inventory,
    nvml_availability,
)

pynvml = pytest.importorskip("pynvml")


class FakeNVML:
    """One H100 as NVML would describe it; counts init/shutdown to check they stay balanced."""

    def __init__(self) -> None:
        self.inits = 0
        self.shutdowns = 0
        self.count = 1
        self.init_error: int | None = None
        self.energy_mj = 123_456
        self.energy_error: int | None = None
        self.power_mw = [250_000, 300_000, 275_000]
        self.power_error: int | None = None
        self.utilisation: object = SimpleNamespace(gpu=90, memory=40)
        self.power_calls = 0
        self.enough_samples = threading.Event()
        self.handles_by_uuid: list[str] = []

    def install(self, monkeypatch: pytest.MonkeyPatch) -> FakeNVML:
        fakes = {
            "nvmlInit": self.init,
            "nvmlShutdown": self.shutdown,
            "nvmlDeviceGetCount": lambda: self.count,
            "nvmlDeviceGetHandleByIndex": lambda index: ("handle", index),
            "nvmlDeviceGetHandleByUUID": self.handle_by_uuid,
            "nvmlDeviceGetName": lambda handle: b"NVIDIA H100 80GB HBM3",
            "nvmlDeviceGetMemoryInfo": lambda handle: SimpleNamespace(total=85_520_809_984),
            "nvmlSystemGetDriverVersion": lambda: "550.54.15",
            "nvmlDeviceGetCudaComputeCapability": lambda handle: (9, 0),
            "nvmlDeviceGetUUID": lambda handle: "GPU-5f3c6a1e-0000-1111-2222-333344445555",
            "nvmlDeviceGetTotalEnergyConsumption": self.energy,
            "nvmlDeviceGetPowerUsage": self.power,
            "nvmlDeviceGetUtilizationRates": lambda handle: self.utilisation,
        }
        for name, fake in fakes.items():
            monkeypatch.setattr(pynvml, name, fake)
        return self

    def init(self) -> None:
        if self.init_error is not None:
            raise pynvml.NVMLError(self.init_error)
        self.inits += 1

    def shutdown(self) -> None:
        self.shutdowns += 1

    def handle_by_uuid(self, uuid: str) -> tuple[str, str]:
        self.handles_by_uuid.append(uuid)
        return ("handle", uuid)

    def energy(self, handle: object) -> int:
        if self.energy_error is not None:
            raise pynvml.NVMLError(self.energy_error)
        return self.energy_mj

    def power(self, handle: object) -> int:
        if self.power_error is not None:
            raise pynvml.NVMLError(self.power_error)
        value = self.power_mw[self.power_calls % len(self.power_mw)]
        self.power_calls += 1
        if self.power_calls >= 3:
            self.enough_samples.set()
        return value


@pytest.fixture
def nvml(monkeypatch: pytest.MonkeyPatch) -> FakeNVML:
    return FakeNVML().install(monkeypatch)


def test_availability_on_this_machine_never_raises() -> None:
    result = nvml_availability()
    assert isinstance(result, Availability)
    assert result.available or result.reason


def test_no_driver_gives_reasons_not_exceptions(nvml: FakeNVML) -> None:
    nvml.init_error = pynvml.NVML_ERROR_LIBRARY_NOT_FOUND
    result = nvml_availability()
    assert not result.available
    assert "libnvidia-ml.so.1 not found" in result.reason
    assert gpu_inventory() == []
    with pytest.raises(NVMLUnavailable, match="no NVIDIA driver"):
        NVMLEnergyMeter()
    sampler = NVMLSampler()
    sampler.start()
    assert sampler.stop() == {"power_w": [], "gpu_util_pct": [], "mem_util_pct": []}
    assert "libnvidia-ml.so.1" in sampler.reason
    assert nvml.shutdowns == 0


def test_missing_package_gives_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)
    result = nvml_availability()
    assert result == Availability.no("nvidia-ml-py (pynvml) not installed")
    assert gpu_inventory() == []


def test_driver_without_gpus_is_unavailable(nvml: FakeNVML) -> None:
    nvml.count = 0
    assert nvml_availability() == Availability.no("NVML sees no NVIDIA GPU")
    assert nvml.inits == nvml.shutdowns == 1


def test_availability_with_gpu(nvml: FakeNVML) -> None:
    assert nvml_availability() == Availability.yes()
    assert nvml.inits == nvml.shutdowns == 1


def test_inventory_fields(nvml: FakeNVML) -> None:
    nvml.count = 2
    gpus = gpu_inventory()
    assert [gpu["index"] for gpu in gpus] == [0, 1]
    assert gpus[0] == {
        "index": 0,
        "name": "NVIDIA H100 80GB HBM3",
        "memory_bytes": 85_520_809_984,
        "driver": "550.54.15",
        "compute_capability": "9.0",
        "uuid": "GPU-5f3c6a1e-0000-1111-2222-333344445555",
    }
    assert nvml.inits == nvml.shutdowns == 1


def test_inventory_tolerates_an_unsupported_field(
    nvml: FakeNVML, monkeypatch: pytest.MonkeyPatch
) -> None:
    def unsupported(handle: object) -> None:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)

    monkeypatch.setattr(pynvml, "nvmlDeviceGetCudaComputeCapability", unsupported)
    (gpu,) = gpu_inventory()
    assert gpu["compute_capability"] is None
    assert gpu["name"] == "NVIDIA H100 80GB HBM3"


def test_energy_meter_converts_millijoules(nvml: FakeNVML) -> None:
    meter = NVMLEnergyMeter(index=0, uuid="GPU-abc")
    assert nvml.handles_by_uuid == ["GPU-abc"]
    assert meter.joules() == pytest.approx(123.456)
    nvml.energy_mj += 2_500
    assert meter.joules() == pytest.approx(125.956)
    meter.close()
    meter.close()
    assert nvml.inits == nvml.shutdowns == 1


def test_energy_meter_unsupported_gpu(nvml: FakeNVML) -> None:
    nvml.energy_error = pynvml.NVML_ERROR_NOT_SUPPORTED
    with pytest.raises(NVMLUnavailable, match="energy counter: not supported on this GPU"):
        NVMLEnergyMeter()
    assert nvml.inits == nvml.shutdowns == 1


def test_sampler_collects_and_stops(nvml: FakeNVML) -> None:
    sampler = NVMLSampler(interval_s=0.001)
    sampler.start()
    assert nvml.enough_samples.wait(timeout=10)
    result = sampler.stop()
    assert sampler.reason is None
    assert len(result["power_w"]) >= 3
    assert result["power_w"][:3] == [250.0, 300.0, 275.0]
    assert len(result["gpu_util_pct"]) == len(result["power_w"])
    assert set(result["gpu_util_pct"]) == {90.0}
    assert set(result["mem_util_pct"]) == {40.0}
    assert nvml.inits == nvml.shutdowns == 1
    calls = nvml.power_calls
    time.sleep(0.02)
    assert nvml.power_calls == calls
    assert not any(thread.name == "nvml-sampler" for thread in threading.enumerate())


def test_sampler_without_power_keeps_utilisation(nvml: FakeNVML) -> None:
    nvml.power_error = pynvml.NVML_ERROR_NOT_SUPPORTED
    sampler = NVMLSampler(interval_s=0.001)
    sampler.start()
    time.sleep(0.02)
    result = sampler.stop()
    assert result["power_w"] == []
    assert result["gpu_util_pct"]
    assert sampler.reason == "power: not supported on this GPU"


def test_sampler_survives_a_broken_query(nvml: FakeNVML) -> None:
    nvml.utilisation = object()
    sampler = NVMLSampler(interval_s=0.001)
    sampler.start()
    result = sampler.stop()
    assert result["gpu_util_pct"] == []
    assert sampler.reason.startswith("sampler stopped: AttributeError")


def test_sampler_stop_without_start() -> None:
    sampler = NVMLSampler()
    assert sampler.stop() == {"power_w": [], "gpu_util_pct": [], "mem_util_pct": []}
    assert sampler.reason == "sampler was not started"


def test_sampler_start_twice_is_an_error(nvml: FakeNVML) -> None:
    sampler = NVMLSampler(interval_s=0.001)
    sampler.start()
    try:
        with pytest.raises(RuntimeError, match="twice"):
            sampler.start()
    finally:
        sampler.stop()


def test_clocks_and_what_holds_them_down(nvml: FakeNVML, monkeypatch: pytest.MonkeyPatch
                                         ) -> None:
    """An H100 held to 1,755 of 1,980 MHz by its power cap and thermal slowdown, as NVML
    reports it (the reasons are a bit mask)."""
    from backends.nvml import device_clocks

    clocks = {pynvml.NVML_CLOCK_SM: 1755, pynvml.NVML_CLOCK_MEM: 2619}
    monkeypatch.setattr(pynvml, "nvmlDeviceGetClockInfo", lambda handle, kind: clocks[kind])
    monkeypatch.setattr(pynvml, "nvmlDeviceGetMaxClockInfo", lambda handle, kind: 1980)
    mask = pynvml.nvmlClocksThrottleReasonSwPowerCap \
        | pynvml.nvmlClocksThrottleReasonSwThermalSlowdown
    monkeypatch.setattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", lambda handle: mask)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetTemperature", lambda handle, sensor: 71)
    assert device_clocks(uuid="GPU-5f3c6a1e-0000-1111-2222-333344445555") == {
        "sm_clock_mhz": 1755, "memory_clock_mhz": 2619, "max_sm_clock_mhz": 1980,
        "clock_reasons": ["SwPowerCap", "SwThermalSlowdown"], "clock_reason_mask": 0x24,
        "temperature_c": 71,
        "power_w": 250.0}
    assert nvml.handles_by_uuid and nvml.inits == nvml.shutdowns


def test_clocks_without_a_driver_say_why(nvml: FakeNVML) -> None:
    from backends.nvml import device_clocks

    nvml.init_error = pynvml.NVML_ERROR_LIBRARY_NOT_FOUND
    assert device_clocks() == {"unavailable": "libnvidia-ml.so.1 not found (no NVIDIA driver)"}

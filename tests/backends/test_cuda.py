"""The cuda backend's code paths with torch.cuda and NVML queries mocked; one real GPU test."""
from __future__ import annotations

import warnings
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from backends import nvml
from backends.base import COMPUTE_BACKENDS, Availability
from backends.cuda import CUDABackend, CUDAEventTimer, DeviceShared

requires_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")

GPU0 = torch.device("cuda", 0)


@pytest.fixture
def global_flags() -> Iterator[None]:
    """configure() flips process-wide torch flags; put them back for the other tests."""
    matmul, conv = torch.backends.cuda.matmul, torch.backends.cudnn.conv
    saved = (torch.backends.cudnn.benchmark, matmul.fp32_precision, conv.fp32_precision)
    yield
    torch.backends.cudnn.benchmark, matmul.fp32_precision, conv.fp32_precision = saved


class FakeClock:
    """Stands in for the GPU: events take the time of record(); reading them needs a sync."""

    def __init__(self) -> None:
        self.ms = 0.0
        self.synchronized = False
        self.syncs: list[Any] = []
        self.streams: list[Any] = []

    def synchronize(self, device: Any = None) -> None:
        self.syncs.append(device)
        self.synchronized = True

    def event_class(self) -> type:
        clock = self

        class FakeEvent:
            def __init__(self, enable_timing: bool = False) -> None:
                assert enable_timing, "elapsed_time needs enable_timing=True"
                self.at: float | None = None

            def record(self, stream: Any = None) -> None:
                clock.streams.append(stream)
                clock.synchronized = False
                self.at = clock.ms

            def elapsed_time(self, end: FakeEvent) -> float:
                if not clock.synchronized:
                    raise RuntimeError("Both events must be completed before calculating")
                assert self.at is not None and end.at is not None
                return end.at - self.at

        return FakeEvent


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    fake = FakeClock()
    monkeypatch.setattr(torch.cuda, "Event", fake.event_class())
    monkeypatch.setattr(torch.cuda, "synchronize", fake.synchronize)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: ("stream", device))
    return fake


def test_registered() -> None:
    assert COMPUTE_BACKENDS.get("cuda") is CUDABackend
    assert CUDABackend.precisions == ("fp32", "bf16", "fp16")


def test_cpu_build_is_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.version, "cuda", None)
    monkeypatch.setattr(torch.version, "hip", None)
    reason = f"torch {torch.__version__} is a CPU build (no CUDA)"
    assert CUDABackend.availability() == Availability.no(reason)


def test_no_device_is_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.version, "cuda", "12.4")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert CUDABackend.availability() == Availability.no("no CUDA device")


def test_available_with_device(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.version, "cuda", "12.4")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert CUDABackend.availability() == Availability.yes()


@pytest.fixture
def gpus(monkeypatch: pytest.MonkeyPatch) -> SimpleNamespace:
    """A node's GPUs as torch counts them, and the device made current."""
    state = SimpleNamespace(count=4, current=[])
    monkeypatch.setattr(torch.cuda, "device_count", lambda: state.count)
    monkeypatch.setattr(torch.cuda, "set_device", state.current.append)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    return state


def test_device_follows_local_rank(gpus: SimpleNamespace,
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    assert CUDABackend().device(3) == torch.device("cuda", 3)
    # srun or a wrapper giving each task its own GPU: every rank's is cuda:0
    gpus.count = 1
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-5")
    assert CUDABackend().device(3) == torch.device("cuda", 0)


def test_ranks_beyond_the_gpus_are_refused_unless_shared(gpus: SimpleNamespace) -> None:
    """Two ranks on one of two GPUs used to be taken modulo the count, silently."""
    gpus.count = 2
    with pytest.raises(DeviceShared, match="3 rank.* 2 visible GPU.*--share-gpu"):
        CUDABackend().device(2)
    assert CUDABackend().device(2, share=True) == torch.device("cuda", 0)
    gpus.count = 1  # one GPU on the node, no per-task visibility: sharing too
    with pytest.raises(DeviceShared):
        CUDABackend().bind(1)
    assert gpus.current == []


def test_the_bound_device_stays_through_configure_and_probes(
        gpus: SimpleNamespace, monkeypatch: pytest.MonkeyPatch, global_flags: None) -> None:
    """A rank bound to cuda:1 (mpirun: no LOCAL_RANK) keeps it: configure(), as the in-run
    peak probe calls it on a backend of its own, used to set the device from $LOCAL_RANK or
    0 again."""
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    threads: list[int] = []
    monkeypatch.setattr(torch, "set_num_threads", threads.append)
    backend = CUDABackend()
    assert backend.bind(1) == torch.device("cuda", 1)
    assert gpus.current == [torch.device("cuda", 1)]
    torch.backends.cudnn.benchmark = False
    torch.backends.cuda.matmul.fp32_precision = "ieee"

    applied = backend.configure(4, "bf16")
    CUDABackend().configure(0, "bf16")  # a probe's fresh backend

    assert gpus.current == [torch.device("cuda", 1)]  # set once, by bind
    assert threads == [4]
    assert applied["cuda_device"] == 1
    assert torch.backends.cudnn.benchmark is True
    assert applied["cudnn_benchmark"] is True
    # TF32 through the fp32_precision API (the allow_tf32 flags warn since torch 2.9)
    assert torch.backends.cuda.matmul.fp32_precision == "tf32"
    assert torch.backends.cudnn.conv.fp32_precision == "tf32"
    assert applied["tf32_matmul"] is True
    assert applied["tf32_cudnn"] is True


def test_configure_rejects_unknown_precision(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "set_device", lambda index: None)
    with pytest.raises(ValueError, match="fp32, bf16, fp16"):
        CUDABackend().configure(0, "fp8")


def test_grad_scaler_only_for_fp16(monkeypatch: pytest.MonkeyPatch) -> None:
    backend = CUDABackend()
    assert backend.grad_scaler("fp32") is None
    assert backend.grad_scaler("bf16") is None
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*CUDA is not available")
        assert isinstance(backend.grad_scaler("fp16"), torch.amp.GradScaler)
    made: list[str] = []
    monkeypatch.setattr(torch.amp, "GradScaler", lambda device: made.append(device) or device)
    assert backend.grad_scaler("fp16") == "cuda"
    assert made == ["cuda"]


def test_event_timer_syncs_once_and_converts_ms(clock: FakeClock) -> None:
    timer = CUDABackend().timer(GPU0)
    assert isinstance(timer, CUDAEventTimer)
    for step_ms in (10.0, 20.0, 5.0):
        timer.start()
        clock.ms += step_ms
        timer.stop()
        clock.ms += 1.0
    assert clock.syncs == []
    assert timer.samples() == pytest.approx([0.010, 0.020, 0.005])
    assert clock.syncs == [GPU0]
    assert set(clock.streams) == {("stream", GPU0)}

    assert timer.samples() == pytest.approx([0.010, 0.020, 0.005])
    assert len(clock.syncs) == 1
    timer.start()
    clock.ms += 7.5
    timer.stop()
    assert timer.samples() == pytest.approx([0.010, 0.020, 0.005, 0.0075])
    assert len(clock.syncs) == 2


def test_event_timer_stop_without_start(clock: FakeClock) -> None:
    with pytest.raises(RuntimeError, match="without start"):
        CUDAEventTimer(GPU0).stop()


def test_synchronize_and_memory_queries(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[str, Any]] = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda d: calls.append(("sync", d)))
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda d: calls.append(("reset", d)))
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda d: 3 * 2**30)
    backend = CUDABackend()
    backend.synchronize(GPU0)
    backend.reset_peak_memory(GPU0)
    assert calls == [("sync", GPU0), ("reset", GPU0)]
    peak = backend.peak_memory(GPU0)
    assert peak == 3 * 2**30
    assert isinstance(peak, int)


def test_device_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda d: f"NVIDIA H100 ({d})")
    assert CUDABackend().device_name(GPU0) == "NVIDIA H100 (cuda:0)"


@pytest.fixture
def fake_pynvml(monkeypatch: pytest.MonkeyPatch) -> SimpleNamespace:
    pynvml = pytest.importorskip("pynvml")
    state = SimpleNamespace(uuids=[], init_error=None, millijoules=5_000_250)

    def init() -> None:
        if state.init_error is not None:
            raise pynvml.NVMLError(state.init_error)

    monkeypatch.setattr(pynvml, "nvmlInit", init)
    monkeypatch.setattr(pynvml, "nvmlShutdown", lambda: None)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetHandleByUUID", lambda u: state.uuids.append(u))
    monkeypatch.setattr(pynvml, "nvmlDeviceGetTotalEnergyConsumption",
                        lambda handle: state.millijoules)
    props = SimpleNamespace(uuid="5f3c6a1e-0000-1111-2222-333344445555")
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: props)
    state.pynvml = pynvml
    return state


def test_energy_meter_opens_nvml_by_uuid(fake_pynvml: SimpleNamespace) -> None:
    meter = CUDABackend().energy_meter(GPU0)
    assert meter is not None
    assert fake_pynvml.uuids == ["GPU-5f3c6a1e-0000-1111-2222-333344445555"]
    assert meter.joules() == pytest.approx(5000.25)
    # the board is its domain, by UUID: ranks sharing it count it once
    assert meter.by_domain() == {"GPU-5f3c6a1e-0000-1111-2222-333344445555": pytest.approx(5000.25)}
    assert "board" in meter.covers


def test_energy_meter_unavailable_says_why(fake_pynvml: SimpleNamespace) -> None:
    fake_pynvml.init_error = fake_pynvml.pynvml.NVML_ERROR_DRIVER_NOT_LOADED
    backend = CUDABackend()
    assert backend.energy_meter(GPU0) is None
    assert backend.energy_unavailable_reason() == "NVIDIA driver not loaded"


def test_energy_meter_refuses_to_guess_the_gpu(
    fake_pynvml: SimpleNamespace, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: SimpleNamespace())
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,1")
    backend = CUDABackend()
    assert backend.energy_meter(GPU0) is None
    assert "CUDA_VISIBLE_DEVICES" in backend.energy_unavailable_reason()


def test_info_reports_library_versions(monkeypatch: pytest.MonkeyPatch) -> None:
    gpu = {"index": 0, "name": "NVIDIA H100", "memory_bytes": 80 * 2**30,
           "driver": "550.54.15", "compute_capability": "9.0", "uuid": "GPU-1"}
    monkeypatch.setattr(torch.version, "cuda", "12.4")
    monkeypatch.setattr(torch.backends.cudnn, "version", lambda: 90100)
    monkeypatch.setattr(torch.cuda.nccl, "version", lambda: (2, 21, 5))
    monkeypatch.setattr(nvml, "gpu_inventory", lambda: [gpu])
    monkeypatch.setattr(nvml, "nvml_availability", Availability.yes)
    info = CUDABackend().info()
    assert info["cuda"] == "12.4"
    assert info["cudnn"] == "9.1.0"
    assert info["nccl"] == "2.21.5"
    assert info["gpus"] == [gpu]
    assert info["nvml"] == {"available": True, "reason": None}
    assert set(info) >= {"tf32_matmul", "tf32_cudnn"}


def test_info_decodes_cudnn8_versions(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.backends.cudnn, "version", lambda: 8902)
    assert CUDABackend().info()["cudnn"] == "8.9.2"


def test_info_without_cuda_does_not_raise() -> None:
    info = CUDABackend().info()
    assert isinstance(info["gpus"], list)
    if torch.version.cuda is None:
        assert info["cuda"] is None and info["nccl"] is None and info["gpus"] == []


@pytest.mark.requires_cuda
@requires_cuda
def test_real_matmul_timing(global_flags: None) -> None:
    backend = CUDABackend()
    applied = backend.configure(0, "fp32")
    device = backend.device(0)
    a = torch.randn(1024, 1024, device=device)
    backend.reset_peak_memory(device)
    timer = backend.timer(device)
    for _ in range(3):
        timer.start()
        b = a @ a
        timer.stop()
    steps = timer.samples()
    assert len(steps) == 3 and all(step > 0 for step in steps)
    assert backend.peak_memory(device) >= b.numel() * b.element_size()
    assert applied["tf32_matmul"] is True
    meter = backend.energy_meter(device)
    assert meter is not None or backend.energy_unavailable_reason()

"""The cuda backend: cuDNN/cuBLAS kernels through torch, CUDA-event timing, NVML energy."""
from __future__ import annotations

import os
from typing import Any

import torch

from backends import nvml
from backends.base import COMPUTE_BACKENDS, Availability, ComputeBackend, StepTimer


class CUDAEventTimer(StepTimer):
    """Brackets each step with CUDA events on the device's stream; one host sync, in samples()."""

    def __init__(self, device: torch.device) -> None:
        self._device = device
        self._pending: list[tuple[Any, Any]] = []
        self._start: Any | None = None
        self._times: list[float] = []

    def _record(self) -> Any:
        event = torch.cuda.Event(enable_timing=True)
        event.record(torch.cuda.current_stream(self._device))
        return event

    def start(self) -> None:
        self._start = self._record()

    def stop(self) -> None:
        if self._start is None:
            raise RuntimeError("CUDAEventTimer.stop() without start()")
        self._pending.append((self._start, self._record()))
        self._start = None

    def samples(self) -> list[float]:
        if self._pending:
            torch.cuda.synchronize(self._device)
            self._times.extend(start.elapsed_time(end) / 1000.0 for start, end in self._pending)
            self._pending.clear()
        return list(self._times)


def _cudnn_version() -> str | None:
    """cuDNN's integer version as "major.minor.patch" (8xxx and 9xxxx encodings differ)."""
    try:
        version = torch.backends.cudnn.version()
    except RuntimeError:
        return None
    if not version:
        return None
    if version >= 90000:
        return f"{version // 10000}.{version % 10000 // 100}.{version % 100}"
    return f"{version // 1000}.{version % 1000 // 100}.{version % 100}"


def _nccl_version() -> str | None:
    try:
        version = torch.cuda.nccl.version()
    except (AttributeError, RuntimeError):
        return None
    return ".".join(map(str, version)) if isinstance(version, tuple) else str(version)


def _nvml_uuid(device: torch.device) -> str | None:
    """The UUID as NVML spells it ("GPU-..."): unlike the index, CUDA_VISIBLE_DEVICES keeps it."""
    try:
        uuid = str(torch.cuda.get_device_properties(device).uuid)
    except (AssertionError, AttributeError, RuntimeError):
        return None
    return uuid if uuid.startswith(("GPU-", "MIG-")) else f"GPU-{uuid}"


@COMPUTE_BACKENDS.register("cuda")
class CUDABackend(ComputeBackend):
    """cuDNN with cudnn.benchmark and TF32, bf16/fp16 autocast, fp16 grad scaling, NVML energy."""

    name = "cuda"
    precisions = ("fp32", "bf16", "fp16")

    probes_in_own_process = True

    def __init__(self, local_rank: int | None = None) -> None:
        """local_rank picks the GPU configure() makes current; defaults to $LOCAL_RANK, else 0."""
        if local_rank is None:
            local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        self.local_rank = local_rank
        self._energy_reason: str | None = None

    @classmethod
    def availability(cls) -> Availability:
        if torch.version.cuda is None:
            if getattr(torch.version, "hip", None):
                return Availability.no(f"torch {torch.__version__} is a ROCm build (no CUDA)")
            return Availability.no(f"torch {torch.__version__} is a CPU build (no CUDA)")
        if not torch.cuda.is_available():
            return Availability.no("no CUDA device")
        return Availability.yes()

    def device(self, local_rank: int = 0) -> torch.device:
        """The GPU of a local rank, modulo the visible devices: with one visible GPU per task
        (CUDA_VISIBLE_DEVICES set per rank by srun or a wrapper) every rank's is cuda:0."""
        count = torch.cuda.device_count()
        return torch.device("cuda", local_rank % count if count else local_rank)

    def bind(self, local_rank: int) -> torch.device:
        """Make the local rank's GPU current, so that NCCL, all_gather_object and FSDP's
        shards use it and not cuda:0 (under mpirun and srun no LOCAL_RANK tells configure)."""
        device = self.device(local_rank)
        self.local_rank = int(device.index or 0)
        torch.cuda.set_device(device)
        return device

    def configure(self, threads: int, precision: str) -> dict[str, Any]:
        if precision not in self.precisions:
            raise ValueError(f"precision {precision!r} is not supported by the cuda backend; "
                             f"choose from: {', '.join(self.precisions)}")
        if threads:
            torch.set_num_threads(threads)
        torch.cuda.set_device(self.local_rank)
        torch.backends.cudnn.benchmark = True
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
        return {
            "threads": torch.get_num_threads(),
            "cuda_device": self.local_rank,
            "cudnn_benchmark": torch.backends.cudnn.benchmark,
            **self._tf32_flags(),
        }

    @staticmethod
    def _tf32_flags() -> dict[str, bool]:
        return {"tf32_matmul": bool(torch.backends.cuda.matmul.allow_tf32),
                "tf32_cudnn": bool(torch.backends.cudnn.allow_tf32)}

    def grad_scaler(self, precision: str) -> Any | None:
        return torch.amp.GradScaler("cuda") if precision == "fp16" else None

    def timer(self, device: torch.device) -> StepTimer:
        return CUDAEventTimer(device)

    def synchronize(self, device: torch.device) -> None:
        torch.cuda.synchronize(device)

    def release_freed_memory(self, device: torch.device) -> None:
        with torch.cuda.device(device):
            torch.cuda.empty_cache()

    def reset_peak_memory(self, device: torch.device) -> None:
        torch.cuda.reset_peak_memory_stats(device)

    def peak_memory(self, device: torch.device) -> int:
        return int(torch.cuda.max_memory_allocated(device))

    def energy_meter(self, device: torch.device) -> nvml.NVMLEnergyMeter | None:
        uuid = _nvml_uuid(device)
        if uuid is None and os.environ.get("CUDA_VISIBLE_DEVICES"):
            self._energy_reason = ("cannot map the CUDA device to NVML: no device UUID and "
                                   "CUDA_VISIBLE_DEVICES renumbers devices")
            return None
        index = device.index if device.index is not None else torch.cuda.current_device()
        try:
            meter = nvml.NVMLEnergyMeter(index=index, uuid=uuid)
        except nvml.NVMLUnavailable as err:
            self._energy_reason = str(err)
            return None
        self._energy_reason = None
        return meter

    def energy_unavailable_reason(self) -> str:
        if self._energy_reason:
            return self._energy_reason
        reason = nvml.nvml_availability().reason
        return reason or "NVML energy counter not opened yet (call energy_meter first)"

    def clocks(self, device: torch.device) -> dict[str, Any] | None:
        """SM and memory clocks, the maximum SM clock and NVML's reasons for running below it
        (power cap, thermal slowdown, ...), temperature and power."""
        return nvml.device_clocks(index=device.index or 0, uuid=_nvml_uuid(device))

    def device_name(self, device: torch.device) -> str:
        return torch.cuda.get_device_name(device)

    def info(self) -> dict[str, Any]:
        nvml_state = nvml.nvml_availability()
        return {
            "cuda": torch.version.cuda,
            "cudnn": _cudnn_version(),
            "nccl": _nccl_version(),
            "gpus": nvml.gpu_inventory(),
            "nvml": {"available": nvml_state.available, "reason": nvml_state.reason},
            "cudnn_benchmark": bool(torch.backends.cudnn.benchmark),
            **self._tf32_flags(),
        }

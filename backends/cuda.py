"""The cuda backend: cuDNN/cuBLAS kernels through torch, CUDA-event timing, NVML energy."""
from __future__ import annotations

import os
from typing import Any

import torch

from backends import numa, nvml
from backends.base import COMPUTE_BACKENDS, Availability, ComputeBackend, StepTimer
from harness.spec.specs import PRECISIONS


class CUDAEventTimer(StepTimer):
    """Brackets each step with CUDA events on the device's stream. samples() waits for the
    device once; settled() reads the steps up to `lag` behind the newest, waiting only for an
    event the device passed while the later steps were queued (no drain per step)."""

    lag = 2

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
            self._read(len(self._pending))
        return list(self._times)

    def settled(self) -> list[float]:
        ready = len(self._pending) - self.lag
        if ready > 0:
            self._pending[ready - 1][1].synchronize()
            self._read(ready)
        return list(self._times)

    def _read(self, count: int) -> None:
        self._times.extend(start.elapsed_time(end) / 1000.0
                           for start, end in self._pending[:count])
        del self._pending[:count]


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


# What an fp16 run's record says of its one host synchronise a step (torch/amp/grad_scaler.py).
GRAD_SCALER_SYNC = ("torch.amp.GradScaler.step reads the found-inf flag with .item() "
                    "(GradScaler._maybe_opt_step): the host waits for each step's backward "
                    "once per optimizer step before it queues the next step")


class DeviceShared(RuntimeError):
    """More ranks than GPUs on a node: they would share one."""


def shared_device_message(ranks: int, gpus: int) -> str:
    return (f"{ranks} rank(s) on this node but {gpus} visible GPU(s): ranks would share a GPU "
            "(NCCL refuses it; energy and peak would count a board twice); use at most one "
            "rank per GPU, or add --share-gpu to run anyway")


def pci_address(index: int) -> str:
    """A visible CUDA device's PCI address as sysfs names it ("0000:1b:00.0")."""
    props = torch.cuda.get_device_properties(index)
    return f"{props.pci_domain_id:04x}:{props.pci_bus_id:02x}:{props.pci_device_id:02x}.0"


def _visible_devices() -> list[str] | None:
    value = os.environ.get("CUDA_VISIBLE_DEVICES")
    return None if value is None else [part for part in value.split(",") if part.strip()]


def allow_tf32() -> None:
    """FP32 matrix products and convolutions on TF32 tensor cores, through the fp32_precision
    settings where torch has them (2.9 and later: the old allow_tf32 flags warn there, and
    raise once the new API has been used), else the old flags."""
    matmul, conv = torch.backends.cuda.matmul, getattr(torch.backends.cudnn, "conv", None)
    if hasattr(matmul, "fp32_precision") and hasattr(conv, "fp32_precision"):
        matmul.fp32_precision = "tf32"
        conv.fp32_precision = "tf32"
        return
    matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True


def tf32_flags() -> dict[str, bool]:
    """Whether FP32 matrix products and convolutions may run in TF32, in either API."""
    matmul, conv = torch.backends.cuda.matmul, getattr(torch.backends.cudnn, "conv", None)
    if hasattr(matmul, "fp32_precision") and hasattr(conv, "fp32_precision"):
        return {"tf32_matmul": matmul.fp32_precision == "tf32",
                "tf32_cudnn": conv.fp32_precision == "tf32"}
    return {"tf32_matmul": bool(matmul.allow_tf32),
            "tf32_cudnn": bool(torch.backends.cudnn.allow_tf32)}


@COMPUTE_BACKENDS.register("cuda")
class CUDABackend(ComputeBackend):
    """cuDNN with cudnn.benchmark and TF32, bf16/fp16 autocast, fp16 grad scaling, NVML energy."""

    name = "cuda"
    precisions = PRECISIONS  # every precision a run can ask for

    probes_in_own_process = True

    def __init__(self) -> None:
        # The device bind() made this rank's: every later use (peak probes, timers, memory,
        # NVML) takes it, never a fresh lookup from the environment.
        self.bound: torch.device | None = None
        self._energy_reason: str | None = None
        # Where bind() placed the rank's threads (backends/numa.py), for the record.
        self.cpu_binding: dict[str, Any] | None = None

    @classmethod
    def availability(cls) -> Availability:
        if torch.version.cuda is None:
            if getattr(torch.version, "hip", None):
                return Availability.no(f"torch {torch.__version__} is a ROCm build (no CUDA)")
            return Availability.no(f"torch {torch.__version__} is a CPU build (no CUDA)")
        if not torch.cuda.is_available():
            return Availability.no("no CUDA device")
        return Availability.yes()

    def device(self, local_rank: int = 0, share: bool = False) -> torch.device:
        """The GPU of a local rank among the visible devices. With one visible device per rank
        (CUDA_VISIBLE_DEVICES set per task by srun or a wrapper) every rank's is cuda:0; a local
        rank beyond the visible devices would share one with another rank, which NCCL refuses
        ("Duplicate GPU detected") and which double-counts a board's energy and peak: a
        DeviceShared error, unless `share` allows it (then ranks take devices round-robin)."""
        count = torch.cuda.device_count()
        if not count:  # no device: torch's own error comes at first use
            return torch.device("cuda", local_rank)
        one_per_task = count == 1 and len(_visible_devices() or ()) == 1
        if local_rank < count or one_per_task:
            return torch.device("cuda", local_rank if local_rank < count else 0)
        if share:
            return torch.device("cuda", local_rank % count)
        raise DeviceShared(shared_device_message(local_rank + 1, count))

    def bind(self, local_rank: int, share: bool = False) -> torch.device:
        """Make the local rank's GPU current, once, before the process group and the model
        exist (NCCL binds a communicator, all_gather_object and FSDP's shards the current
        device): under mpirun and srun no LOCAL_RANK tells torch which it is."""
        device = self.device(local_rank, share)
        torch.cuda.set_device(device)
        self.bound = device
        try:
            addresses = [pci_address(i) for i in range(torch.cuda.device_count())]
            self.cpu_binding = numa.bind_gpu_rank(device.index or 0, addresses)
        except (AssertionError, AttributeError, RuntimeError, OSError) as exc:
            self.cpu_binding = {"by": None, "reason": f"not bound: {exc}"}
        return device

    def current(self) -> torch.device:
        """The bound device, else the process's current one (a probe outside a rank)."""
        return self.bound if self.bound is not None else \
            torch.device("cuda", torch.cuda.current_device())

    def configure(self, threads: int, precision: str) -> dict[str, Any]:
        if precision not in self.precisions:
            raise ValueError(f"precision {precision!r} is not supported by the cuda backend; "
                             f"choose from: {', '.join(self.precisions)}")
        if threads:
            torch.set_num_threads(threads)
        # The device is the one bind() made current (or the process's current one): setting
        # it here again from the environment moved a rank bound under mpirun to cuda:0.
        torch.backends.cudnn.benchmark = True
        allow_tf32()
        return {
            "threads": torch.get_num_threads(),
            "cuda_device": self.current().index,
            "cudnn_benchmark": torch.backends.cudnn.benchmark,
            **self._tf32_flags(),
            **({"cpu_binding": self.cpu_binding} if self.cpu_binding is not None else {}),
            **({"grad_scaler_sync": GRAD_SCALER_SYNC} if precision == "fp16" else {}),
        }

    @staticmethod
    def _tf32_flags() -> dict[str, bool]:
        return tf32_flags()

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

    def memory_details(self, device: torch.device) -> dict[str, int | None]:
        """Beside the allocated peak: the peak the caching allocator reserved (FSDP2's
        per-stream pools, fragmentation) and what NVML sees in use on the board (the CUDA
        context, NCCL's buffers and any other process included)."""
        return {"reserved": int(torch.cuda.max_memory_reserved(device)),
                "device_used": nvml.device_memory_used(device.index or 0, _nvml_uuid(device))}

    def device_key(self, device: torch.device) -> str | None:
        """The board a device is (NVML's UUID): ranks that share one count its energy and its
        peak once."""
        return _nvml_uuid(device) or f"cuda:{device.index}"

    def device_state(self, device: torch.device) -> dict[str, Any] | None:
        return nvml.device_limits(index=device.index or 0, uuid=_nvml_uuid(device))

    def free_memory(self, device: torch.device) -> int | None:
        return int(torch.cuda.mem_get_info(device)[0])

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

"""The cpu backend: PyTorch's oneDNN (MKL-DNN) and MKL kernels, with IPEX where it matches."""
from __future__ import annotations

import ctypes
import os
import re
import resource
import tempfile
import time
from functools import cache
from pathlib import Path
from typing import Any

import torch

from backends.base import COMPUTE_BACKENDS, Availability, ComputeBackend, EnergyMeter, StepTimer
from backends.ipex import ipex_availability, ipex_version
from harness.machine.hardware import cpu_flags, cpu_model

ISA_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_tile",
             "amx_bf16", "amx_int8")


def library_versions() -> dict[str, str | None]:
    """oneDNN and MKL versions as torch reports its build configuration."""
    config = torch.__config__.show()
    onednn = re.search(r"(?:MKL-DNN|oneDNN) v(\S+)", config)
    mkl = re.search(r"Math Kernel Library Version (\S+)", config)
    return {"onednn": onednn.group(1) if onednn else None, "mkl": mkl.group(1) if mkl else None}


@cache
def onednn_isa() -> str | None:
    """The ISA oneDNN dispatches to here ("Intel AVX2", "Intel AVX-512 with AMX ..."), as its
    verbose mode announces it; read once per process by running one small convolution with
    verbose output captured from file descriptor 1. None where oneDNN is off or says nothing
    (it announces itself once per process, so a process that already printed it reads None).
    """
    if not torch.backends.mkldnn.is_available():
        return None
    libc = ctypes.CDLL(None)
    handle, path = tempfile.mkstemp(prefix="dtbench-onednn-")
    saved = os.dup(1)
    try:
        libc.fflush(None)
        os.dup2(handle, 1)
        with torch.backends.mkldnn.verbose(torch.backends.mkldnn.VERBOSE_ON):
            # Large enough for oneDNN's path; tiny convolutions take torch's own kernels.
            pixels = torch.zeros(2, 32, 16, 16).contiguous(memory_format=torch.channels_last)
            weight = torch.zeros(32, 32, 3, 3).contiguous(memory_format=torch.channels_last)
            torch.nn.functional.conv2d(pixels, weight)
        libc.fflush(None)
    except (OSError, RuntimeError):
        return None
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        os.close(handle)
        text = Path(path).read_text(errors="replace")
        Path(path).unlink(missing_ok=True)
    match = re.search(r"onednn_verbose,(?:v\d+,)?info,cpu,isa:([^\n]+)", text)
    return match.group(1).strip() if match else None


class PerfCounterTimer(StepTimer):
    """Host wall-clock per step, and the process's CPU time over the same interval (every
    thread's: OpenMP's and the rank's own); CPU kernels are synchronous so no sync is needed."""

    def __init__(self) -> None:
        self._times: list[float] = []
        self._cpu: list[float] = []
        self._t0 = self._c0 = 0.0

    def start(self) -> None:
        self._c0 = time.process_time()
        self._t0 = time.perf_counter()

    def stop(self) -> None:
        self._times.append(time.perf_counter() - self._t0)
        self._cpu.append(time.process_time() - self._c0)

    def samples(self) -> list[float]:
        return list(self._times)

    def cpu_samples(self) -> list[float]:
        return list(self._cpu)


M_TRIM_THRESHOLD, M_MMAP_THRESHOLD, M_MMAP_MAX = -1, -3, -4
TRIM_THRESHOLD_BYTES = 2**30
MMAP_THRESHOLD_BYTES = 32 * 2**20  # glibc's upper bound for this setting on 64-bit


def tune_allocator() -> dict[str, Any]:
    """Keep freed activation buffers in glibc's heap instead of returning them to the kernel.

    By default glibc unmaps or trims large freed blocks, so every training step page-faults
    its activations back in; on a 2-core machine that costs ResNet-50 bf16 up to a third of
    its step time. Raising the trim and mmap thresholds (what jemalloc/tcmalloc setups
    achieve by preloading) keeps them. Blocks above 32 MiB (glibc's highest mmap threshold;
    a 256x56x56 activation at batch 32) would still be mapped afresh every step, so mmap is
    switched off for malloc altogether (M_MMAP_MAX=0): they come from the heap and are reused.
    DTBENCH_MALLOC_TUNING=0 turns this off.
    """
    if os.environ.get("DTBENCH_MALLOC_TUNING", "1") == "0":
        return {"malloc_tuning": "off (DTBENCH_MALLOC_TUNING=0)"}
    try:
        libc = ctypes.CDLL("libc.so.6")
        applied = (libc.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES) == 1
                   and libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES) == 1
                   and libc.mallopt(M_MMAP_MAX, 0) == 1)
    except (OSError, AttributeError):
        return {"malloc_tuning": "unavailable (no glibc mallopt)"}
    if not applied:
        return {"malloc_tuning": "rejected by mallopt"}
    return {"malloc_tuning": f"glibc trim_threshold={TRIM_THRESHOLD_BYTES} "
                             f"mmap_threshold={MMAP_THRESHOLD_BYTES} mmap_max=0"}


def _read_status_kib(field: str) -> int | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


@COMPUTE_BACKENDS.register("cpu")
class CPUBackend(ComputeBackend):
    """oneDNN through torch: channels_last, bf16 autocast, optional torch.compile and IPEX."""

    name = "cpu"
    precisions = ("fp32", "bf16")

    @classmethod
    def availability(cls) -> Availability:
        return Availability.yes()

    def device(self, local_rank: int = 0) -> torch.device:
        return torch.device("cpu")

    def rank_threads(self, threads: int) -> int:
        return threads or max(1, len(os.sched_getaffinity(0)))

    def configure(self, threads: int, precision: str) -> dict[str, Any]:
        threads = self.rank_threads(threads)
        torch.set_num_threads(threads)
        return {"threads": threads, **tune_allocator()}

    def timer(self, device: torch.device) -> StepTimer:
        return PerfCounterTimer()

    def model_unsupported(self, model: torch.nn.Module, precision: str) -> str | None:
        """oneDNN's bf16 LSTM primitive needs AVX-512: on AVX2 CPUs (Zen 1 to 3 here) it
        fails to create a primitive descriptor at the first step."""
        if precision != "bf16" or "avx512f" in cpu_flags():
            return None
        if any(isinstance(m, torch.nn.LSTM) for m in model.modules()):
            return ("bf16 LSTM on this CPU: oneDNN's bf16 LSTM primitive needs AVX-512, "
                    "which this CPU lacks")
        return None

    def release_freed_memory(self, device: torch.device) -> None:
        """glibc's malloc_trim(0): with the allocator tuned to keep freed blocks (see
        tune_allocator), the in-run peak probe's 1 GiB copy buffers would stay resident and
        count in the run's peak memory."""
        try:
            ctypes.CDLL("libc.so.6").malloc_trim(0)
        except (OSError, AttributeError):
            pass

    def reset_peak_memory(self, device: torch.device) -> None:
        """Reset the kernel's peak-RSS mark (VmHWM) via clear_refs, where Linux allows it."""
        try:
            Path("/proc/self/clear_refs").write_text("5")
        except OSError:
            pass

    def peak_memory(self, device: torch.device) -> int:
        kib = _read_status_kib("VmHWM")
        if kib is None:
            kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return kib * 1024

    def energy_meter(self, device: torch.device) -> EnergyMeter | None:
        """Package and DRAM energy from RAPL (backends/powercap.py), where this process may
        read it."""
        from backends.powercap import PowercapMeter, PowercapUnavailable

        try:
            return PowercapMeter()
        except PowercapUnavailable as why:
            self._energy_reason = str(why)
            return None

    def energy_unavailable_reason(self) -> str:
        return getattr(self, "_energy_reason", None) or "no RAPL energy counter on this machine"

    def device_name(self, device: torch.device) -> str:
        return cpu_model()

    def info(self) -> dict[str, Any]:
        flags = cpu_flags()
        ipex = ipex_availability()
        return {
            **library_versions(),
            "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "onednn_isa": onednn_isa(),
            "isa": {flag: flag in flags for flag in ISA_FLAGS},
            "mkldnn_enabled": torch.backends.mkldnn.is_available(),
            "ipex": {"version": ipex_version(), "available": ipex.available, "reason": ipex.reason,
                     "bf16": ipex_availability(precision="bf16", flags=flags).reason or "yes"},
        }

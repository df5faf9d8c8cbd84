"""NVIDIA Management Library (nvidia-ml-py) queries: GPU inventory, energy counter, power sampling.

Every entry point turns a missing package, missing driver or unsupported query into a reason
string (or NVMLUnavailable carrying one), so a CPU-only machine imports and runs this freely.
"""
from __future__ import annotations

import contextlib
import importlib
import threading
from collections.abc import Iterator
from types import ModuleType
from typing import Any

from backends.base import Availability, EnergyMeter

SAMPLE_KEYS = ("power_w", "gpu_util_pct", "mem_util_pct")


class NVMLUnavailable(RuntimeError):
    """NVML cannot answer here; the message is the reason kept in records."""


def _pynvml() -> ModuleType:
    try:
        return importlib.import_module("pynvml")
    except ImportError:
        raise NVMLUnavailable("nvidia-ml-py (pynvml) not installed") from None


def _describe(nv: ModuleType, err: Exception) -> str:
    """A reason a user can act on for an NVMLError."""
    code = getattr(err, "value", None)
    known = {
        "NVML_ERROR_LIBRARY_NOT_FOUND": "libnvidia-ml.so.1 not found (no NVIDIA driver)",
        "NVML_ERROR_DRIVER_NOT_LOADED": "NVIDIA driver not loaded",
        "NVML_ERROR_NOT_SUPPORTED": "not supported on this GPU",
        "NVML_ERROR_NO_PERMISSION": "no permission to query NVML",
        "NVML_ERROR_GPU_IS_LOST": "GPU is lost (fell off the bus)",
    }
    for constant, reason in known.items():
        if code is not None and code == getattr(nv, constant, object()):
            return reason
    return f"NVML error: {err}"


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _init() -> ModuleType:
    """nvmlInit (reference counted by NVML); pair every success with nvmlShutdown."""
    nv = _pynvml()
    try:
        nv.nvmlInit()
    except nv.NVMLError as err:
        raise NVMLUnavailable(_describe(nv, err)) from None
    return nv


def _shutdown(nv: ModuleType) -> None:
    with contextlib.suppress(Exception):
        nv.nvmlShutdown()


@contextlib.contextmanager
def nvml_session() -> Iterator[ModuleType]:
    """pynvml, initialised for the block; NVMLError inside the block becomes NVMLUnavailable."""
    nv = _init()
    try:
        yield nv
    except nv.NVMLError as err:
        raise NVMLUnavailable(_describe(nv, err)) from None
    finally:
        _shutdown(nv)


def nvml_availability() -> Availability:
    """Whether NVML answers and sees at least one GPU; never raises."""
    try:
        with nvml_session() as nv:
            count = nv.nvmlDeviceGetCount()
    except NVMLUnavailable as err:
        return Availability.no(str(err))
    if count == 0:
        return Availability.no("NVML sees no NVIDIA GPU")
    return Availability.yes()


def _optional(nv: ModuleType, query: Any, *args: Any) -> Any:
    try:
        return query(*args)
    except nv.NVMLError:
        return None


def gpu_inventory() -> list[dict[str, Any]]:
    """Every GPU NVML sees (ignoring CUDA_VISIBLE_DEVICES), or [] where NVML is unavailable."""
    try:
        with nvml_session() as nv:
            driver = _optional(nv, nv.nvmlSystemGetDriverVersion)
            gpus = []
            for index in range(nv.nvmlDeviceGetCount()):
                handle = nv.nvmlDeviceGetHandleByIndex(index)
                memory = _optional(nv, nv.nvmlDeviceGetMemoryInfo, handle)
                major_minor = _optional(nv, nv.nvmlDeviceGetCudaComputeCapability, handle)
                uuid = _optional(nv, nv.nvmlDeviceGetUUID, handle)
                gpus.append({
                    "index": index,
                    "name": _text(nv.nvmlDeviceGetName(handle)),
                    "memory_bytes": int(memory.total) if memory is not None else None,
                    "driver": _text(driver) if driver is not None else None,
                    "compute_capability": "{}.{}".format(*major_minor) if major_minor else None,
                    "uuid": _text(uuid) if uuid is not None else None,
                })
            return gpus
    except NVMLUnavailable:
        return []


def _handle(nv: ModuleType, index: int, uuid: str | None) -> Any:
    """The NVML handle of a CUDA device: by UUID (robust to CUDA_VISIBLE_DEVICES), else by index."""
    try:
        if uuid:
            return nv.nvmlDeviceGetHandleByUUID(uuid)
        return nv.nvmlDeviceGetHandleByIndex(index)
    except nv.NVMLError as err:
        reason = f"no NVML handle for GPU {uuid or index}: {_describe(nv, err)}"
        raise NVMLUnavailable(reason) from None


class NVMLEnergyMeter(EnergyMeter):
    """Board energy since driver load from NVML's millijoule counter (Volta and newer)."""

    covers = ("the GPU board as NVML's total-energy counter measures it: not the host, and "
              "on-board sensors are not wall power")

    def __init__(self, index: int = 0, uuid: str | None = None) -> None:
        """Open NVML and probe the counter; raises NVMLUnavailable saying why if it is absent."""
        self._key = uuid or f"gpu{index}"
        self._nv = _init()
        self._open = True
        try:
            self._handle = _handle(self._nv, index, uuid)
            self.joules()
        except NVMLUnavailable:
            self.close()
            raise

    def joules(self) -> float:
        try:
            millijoules = self._nv.nvmlDeviceGetTotalEnergyConsumption(self._handle)
        except self._nv.NVMLError as err:
            raise NVMLUnavailable(f"NVML energy counter: {_describe(self._nv, err)}") from None
        return millijoules / 1000.0

    def by_domain(self) -> dict[str, float]:
        return {self._key: self.joules()}

    def close(self) -> None:
        if self._open:
            self._open = False
            _shutdown(self._nv)


class NVMLSampler:
    """Samples GPU power and utilisation on a thread; a failure becomes a reason, not a crash."""

    def __init__(self, index: int = 0, uuid: str | None = None, interval_s: float = 0.1) -> None:
        self.index = index
        self.uuid = uuid
        self.interval_s = interval_s
        self.reason: str | None = None
        self._samples: dict[str, list[float]] = {key: [] for key in SAMPLE_KEYS}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._nv: ModuleType | None = None
        self._power_supported = True
        self._util_supported = True

    def start(self) -> None:
        if self._thread is not None or self._nv is not None:
            raise RuntimeError("NVMLSampler.start() called twice")
        try:
            self._nv = _init()
        except NVMLUnavailable as err:
            self.reason = str(err)
            return
        try:
            handle = _handle(self._nv, self.index, self.uuid)
        except NVMLUnavailable as err:
            self.reason = str(err)
            _shutdown(self._nv)
            return
        self._thread = threading.Thread(target=self._run, args=(handle,), name="nvml-sampler",
                                        daemon=True)
        self._thread.start()

    def stop(self) -> dict[str, list[float]]:
        """Stop and return the samples; a list is empty where its query failed (see .reason)."""
        if self._thread is not None:
            self._stop.set()
            self._thread.join(timeout=max(2.0, 5 * self.interval_s))
            if self._thread.is_alive():
                self._note("sampler thread did not stop; samples may be incomplete")
            elif self._nv is not None:
                _shutdown(self._nv)
        elif self._nv is None and self.reason is None:
            self.reason = "sampler was not started"
        with self._lock:
            return {key: list(values) for key, values in self._samples.items()}

    def _note(self, reason: str) -> None:
        with self._lock:
            self.reason = reason if self.reason is None else f"{self.reason}; {reason}"

    def _run(self, handle: Any) -> None:
        try:
            while True:
                self._sample(handle)
                if not (self._power_supported or self._util_supported):
                    return
                if self._stop.wait(self.interval_s):
                    return
        except Exception as err:  # noqa: BLE001 - the sampler must never take the run down
            self._note(f"sampler stopped: {err!r}")

    def _sample(self, handle: Any) -> None:
        nv = self._nv
        assert nv is not None
        if self._power_supported:
            try:
                milliwatts = nv.nvmlDeviceGetPowerUsage(handle)
                with self._lock:
                    self._samples["power_w"].append(milliwatts / 1000.0)
            except nv.NVMLError as err:
                self._power_supported = False
                self._note(f"power: {_describe(nv, err)}")
        if self._util_supported:
            try:
                rates = nv.nvmlDeviceGetUtilizationRates(handle)
                with self._lock:
                    self._samples["gpu_util_pct"].append(float(rates.gpu))
                    self._samples["mem_util_pct"].append(float(rates.memory))
            except nv.NVMLError as err:
                self._util_supported = False
                self._note(f"utilisation: {_describe(nv, err)}")


# The prefixes nvidia-ml-py names NVML's clock event ("throttle") reason bits with: the newer
# "ClocksEvent" set lacks some bits the older "ClocksThrottle" set names (0x200 BoardLimit,
# 0x400 Reliability), so both are read.
REASON_PREFIXES = ("nvmlClocksEventReason", "nvmlClocksThrottleReason")
# Names that are not one bit (All, None) or that alias another bit's name.
_NOT_A_REASON = {"All", "None", "UserDefinedClocks"}
# Bits that older nvidia-ml-py releases do not name (12.x, the one beside torch 2.11 on an
# H200 here, lacks both), spelled as nvidia-ml-py 13 spells them.
LATER_REASON_NAMES = {0x200: "BoardLimit", 0x400: "Reliability"}


def reason_bits(nv: ModuleType) -> dict[int, str]:
    """Every single-bit reason nvidia-ml-py names, by bit: {0x4: "SwPowerCap", ...}."""
    bits: dict[int, str] = {}
    for prefix in REASON_PREFIXES:
        for attribute in dir(nv):
            name = attribute[len(prefix):]
            value = getattr(nv, attribute)
            if (attribute.startswith(prefix) and name not in _NOT_A_REASON
                    and isinstance(value, int) and value > 0 and value & (value - 1) == 0):
                bits.setdefault(value, name)
    for bit, name in LATER_REASON_NAMES.items():
        bits.setdefault(bit, name)
    return bits


def clock_reasons(nv: ModuleType, mask: int) -> list[str]:
    """The names of the reasons set in NVML's clock event mask, in bit order; a bit that
    nvidia-ml-py does not name is kept as its hexadecimal value."""
    bits = reason_bits(nv)
    names = []
    bit = 1
    while bit <= mask:
        if mask & bit:
            names.append(bits.get(bit, hex(bit)))
        bit <<= 1
    return names


def device_memory_used(index: int = 0, uuid: str | None = None) -> int | None:
    """Bytes in use on the GPU as NVML sees it: every process's allocations, CUDA contexts and
    NCCL's buffers included (torch's allocator sees only its own); None where NVML cannot
    answer."""
    try:
        with nvml_session() as nv:
            info = _optional(nv, nv.nvmlDeviceGetMemoryInfo, _handle(nv, index, uuid))
            return int(info.used) if info is not None else None
    except NVMLUnavailable:
        return None


def device_clocks(index: int = 0, uuid: str | None = None) -> dict[str, Any]:
    """The GPU's clocks as they are now, beside what limits them: SM and memory clocks and
    the maximum SM clock (MHz), the reasons NVML gives for clocks below it, temperature (°C)
    and board power (W). {"unavailable": reason} where NVML cannot answer."""
    try:
        with nvml_session() as nv:
            handle = _handle(nv, index, uuid)
            reasons_query = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons",
                                    getattr(nv, "nvmlDeviceGetCurrentClocksThrottleReasons",
                                            None))
            mask = _optional(nv, reasons_query, handle) if reasons_query else None
            power = _optional(nv, nv.nvmlDeviceGetPowerUsage, handle)
            return {
                "sm_clock_mhz": _optional(nv, nv.nvmlDeviceGetClockInfo, handle,
                                          nv.NVML_CLOCK_SM),
                "memory_clock_mhz": _optional(nv, nv.nvmlDeviceGetClockInfo, handle,
                                              nv.NVML_CLOCK_MEM),
                "max_sm_clock_mhz": _optional(nv, nv.nvmlDeviceGetMaxClockInfo, handle,
                                              nv.NVML_CLOCK_SM),
                "clock_reasons": clock_reasons(nv, int(mask)) if mask is not None else None,
                "clock_reason_mask": int(mask) if mask is not None else None,
                "temperature_c": _optional(nv, nv.nvmlDeviceGetTemperature, handle,
                                           nv.NVML_TEMPERATURE_GPU),
                "power_w": power / 1000.0 if power is not None else None,
            }
    except NVMLUnavailable as why:
        return {"unavailable": str(why)}


def device_limits(index: int = 0, uuid: str | None = None) -> dict[str, Any]:
    """What bounds a GPU's peak as it is configured now: the enforced power limit (W), the
    applications SM clock and the maximum SM clock (MHz); each None where not reported,
    {"unavailable": reason} where NVML cannot answer."""
    try:
        with nvml_session() as nv:
            handle = _handle(nv, index, uuid)
            limit = _optional(nv, nv.nvmlDeviceGetEnforcedPowerLimit, handle)
            clock = getattr(nv, "NVML_CLOCK_SM", 1)
            return {"power_limit_w": limit / 1000.0 if limit is not None else None,
                    "applications_sm_clock_mhz": _optional(
                        nv, nv.nvmlDeviceGetApplicationsClock, handle, clock),
                    "max_sm_clock_mhz": _optional(nv, nv.nvmlDeviceGetMaxClockInfo, handle,
                                                  clock)}
    except NVMLUnavailable as why:
        return {"unavailable": str(why)}


def device_health(index: int = 0, uuid: str | None = None) -> dict[str, Any]:
    """What a node check reads of a GPU's health, each None where the device or driver does not
    answer: uncorrected ECC errors (volatile: since the driver loaded; aggregate: over the
    board's life), retired pages pending (pre-Ampere) and row remapping (Ampere and later:
    failed or pending), temperature against the slowdown threshold, power and the enforced
    limit against the default one, and the PCIe link's generation and width against the
    maximum. {"unavailable": reason} where NVML cannot answer at all."""
    try:
        with nvml_session() as nv:
            handle = _handle(nv, index, uuid)

            def ask(name: str, *args: Any) -> Any:
                query = getattr(nv, name, None)
                return _optional(nv, query, handle, *args) if query is not None else None

            uncorrected = getattr(nv, "NVML_MEMORY_ERROR_TYPE_UNCORRECTED", 1)
            remapped = ask("nvmlDeviceGetRemappedRows")
            pending_pages = ask("nvmlDeviceGetRetiredPagesPendingStatus")
            power, limit = ask("nvmlDeviceGetPowerUsage"), ask("nvmlDeviceGetEnforcedPowerLimit")
            default = ask("nvmlDeviceGetPowerManagementDefaultLimit")
            return {
                "ecc_mode": (ask("nvmlDeviceGetEccMode") or [None])[0],
                "ecc_uncorrected_volatile": ask("nvmlDeviceGetTotalEccErrors", uncorrected,
                                                getattr(nv, "NVML_VOLATILE_ECC", 0)),
                "ecc_uncorrected_aggregate": ask("nvmlDeviceGetTotalEccErrors", uncorrected,
                                                 getattr(nv, "NVML_AGGREGATE_ECC", 1)),
                "retired_pages_pending": bool(pending_pages) if pending_pages is not None
                else None,
                "remapped_rows": None if remapped is None else {
                    "correctable": remapped[0], "uncorrectable": remapped[1],
                    "pending": bool(remapped[2]), "failed": bool(remapped[3])},
                "temperature_c": ask("nvmlDeviceGetTemperature",
                                     getattr(nv, "NVML_TEMPERATURE_GPU", 0)),
                "slowdown_temperature_c": ask(
                    "nvmlDeviceGetTemperatureThreshold",
                    getattr(nv, "NVML_TEMPERATURE_THRESHOLD_SLOWDOWN", 1)),
                "power_w": power / 1000.0 if power is not None else None,
                "power_limit_w": limit / 1000.0 if limit is not None else None,
                "default_power_limit_w": default / 1000.0 if default is not None else None,
                "pcie_generation": ask("nvmlDeviceGetCurrPcieLinkGeneration"),
                "pcie_max_generation": ask("nvmlDeviceGetMaxPcieLinkGeneration"),
                "pcie_width": ask("nvmlDeviceGetCurrPcieLinkWidth"),
                "pcie_max_width": ask("nvmlDeviceGetMaxPcieLinkWidth"),
            }
    except NVMLUnavailable as why:
        return {"unavailable": str(why)}

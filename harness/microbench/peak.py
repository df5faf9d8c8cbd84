"""Measured peak: the best sustained GEMM rate and copy bandwidth of a device, cached per machine.

The GEMM peak is the highest per-size median over a few square sizes and over the GEMM
engines torch reaches on the device; medians rather than best single calls keep one lucky
call on a shared host from inflating the denominator of MFU. On the CPU there are two
engines: torch.mm (MKL for fp32, which may not use AVX-512 on non-Intel CPUs) and oneDNN,
reached through a 1x1 convolution, which is what the convolutional workloads run on. Taking
only torch.mm would understate the fp32 peak by half on such CPUs and let MFU exceed 1.
"""
from __future__ import annotations

import datetime as dt
import fcntl
import json
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from harness.core.files import cache_dir, write_atomic
from harness.microbench.timing import time_calls

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
GEMM_SIZES = {"cpu": (256, 512, 1024, 2048), "cuda": (2048, 4096, 8192)}
COPY_BYTES = {"cpu": 256 * 2**20, "cuda": 1024 * 2**20}


@dataclass(frozen=True)
class PeakResult:
    """A measured peak: FLOP/s, copy bandwidth, and the per-size medians behind them."""

    backend: str
    device_name: str
    precision: str
    threads: int
    flops: float
    memory_bandwidth: float
    per_size: dict[str, float]
    measured_at: str
    torch: str
    # Where the GEMM rate was also held for SUSTAIN_S (GPUs): the per-size sweep's best
    # (`burst_flops`), the seconds sustained, and the device's clocks and their limits read
    # at the end of it. `flops` is then the sustained rate.
    burst_flops: float | None = None
    sustained_s: float | None = None
    clocks: dict[str, Any] | None = None
    # The device measured (a GPU's UUID) and what of its configuration bounds its peak (power
    # limit, clocks) when it was: the cache holds the peak of that device as it is.
    device_key: str | None = None
    device_state: dict[str, Any] | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


# The operands' own seed: a peak measured inside a rank (--peak in-run) must not draw from
# the global streams that drive the rank's dropout and data, or measuring would change the
# training it measures.
OPERAND_SEED = 0


def _operand_generator(device: torch.device) -> torch.Generator:
    """A private generator on the device where torch has one, else on the CPU."""
    try:
        return torch.Generator(device=device).manual_seed(OPERAND_SEED)
    except RuntimeError:
        return torch.Generator().manual_seed(OPERAND_SEED)


def _random_operand(n: int, device: torch.device, dtype: torch.dtype,
                    generator: torch.Generator) -> torch.Tensor:
    return torch.randn(n, n, device=generator.device, generator=generator).to(device, dtype)


def _gemm_engines(n: int, device: torch.device, dtype: torch.dtype) -> dict[str, Any]:
    """n x n x n matrix products through each engine torch has on this device."""
    generator = _operand_generator(device)
    a = _random_operand(n, device, dtype, generator)
    b = _random_operand(n, device, dtype, generator)
    engines: dict[str, Any] = {"mm": lambda: torch.mm(a, b)}
    if device.type == "cpu":
        # A 1x1 convolution of n channels over n pixels is an n x n x n GEMM in oneDNN.
        pixels = a.reshape(1, n, n, 1).contiguous(memory_format=torch.channels_last)
        weight = b.reshape(n, n, 1, 1)
        engines["onednn"] = lambda: torch.nn.functional.conv2d(pixels, weight)
    return engines


# Seconds of back-to-back GEMMs at the best size before a GPU's rate is read: a burst of a
# few milliseconds runs at boost clocks that power and thermal limits pull down within
# seconds, and training runs for minutes. The rate is the median of the last half's windows.
SUSTAIN_S = {"cuda": 10.0}
SUSTAIN_WINDOW_S = 0.25


# How often the device's clocks are read during the last half of the sustained run.
CLOCK_EVERY_S = 0.5


def _sustained(gemm: Any, flops_per_call: float, call_s: float, backend: Any,
               device: torch.device, seconds: float) -> tuple[float, list[dict[str, Any]]]:
    """FLOP/s of `gemm` run back to back for `seconds`, in windows of about
    SUSTAIN_WINDOW_S each timed on the device; the median over the last half of them. With it,
    the device's clocks read every CLOCK_EVERY_S over that last half, between windows that
    the host queues ahead of the device: read while the device works, not once it went idle
    (a reading after the final synchronise shows GpuIdle, not the limit that held)."""
    per_window = max(1, round(SUSTAIN_WINDOW_S / max(call_s, 1e-9)))
    timer = backend.timer(device)
    readings: list[dict[str, Any]] = []
    started = time.perf_counter()
    read_at = started + seconds / 2
    while (now := time.perf_counter()) - started < seconds:
        timer.start()
        for _ in range(per_window):
            gemm()
        timer.stop()
        if now >= read_at:
            reading = backend.clocks(device)
            if reading is not None:
                readings.append(reading)
            read_at = now + CLOCK_EVERY_S
    windows = timer.samples()
    tail = windows[len(windows) // 2:] or windows
    return per_window * flops_per_call / statistics.median(tail), readings


def clocks_under_load(readings: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Clock readings taken during a sustained run, as one summary: the median SM and memory
    clocks, power and the highest temperature; each clock event reason with the share of
    readings that had it (most frequent first) and every raw mask seen, so that a bit
    nvidia-ml-py does not name is kept too."""
    usable = [r for r in readings if "unavailable" not in r]
    if not usable:
        return readings[0] if readings else None

    def median_of(key: str) -> float | None:
        values = [r[key] for r in usable if isinstance(r.get(key), (int, float))]
        return statistics.median(values) if values else None

    counts: dict[str, int] = {}
    for reading in usable:
        for name in reading.get("clock_reasons") or []:
            counts[name] = counts.get(name, 0) + 1
    temperatures = [r["temperature_c"] for r in usable
                    if isinstance(r.get("temperature_c"), (int, float))]
    masks = sorted({r["clock_reason_mask"] for r in usable
                    if isinstance(r.get("clock_reason_mask"), int)})
    return {"sm_clock_mhz": median_of("sm_clock_mhz"),
            "min_sm_clock_mhz": min((r["sm_clock_mhz"] for r in usable
                                     if isinstance(r.get("sm_clock_mhz"), (int, float))),
                                    default=None),
            "memory_clock_mhz": median_of("memory_clock_mhz"),
            "max_sm_clock_mhz": median_of("max_sm_clock_mhz"),
            "clock_reasons": sorted(counts, key=lambda name: -counts[name]),
            "clock_reason_share": {name: counts[name] / len(usable) for name in counts},
            "clock_reason_masks": masks,
            "temperature_c": max(temperatures) if temperatures else None,
            "power_w": median_of("power_w"),
            "readings": len(usable),
            "read": "during the last half of the sustained run, while the device worked"}


def measure_peak(backend_name: str, precision: str, threads: int = 0, reps: int = 8,
                 budget_s: float = 4.0, device: torch.device | None = None,
                 gemm_sizes: tuple[int, ...] | None = None,
                 copy_bytes: int | None = None, sustain_s: float | None = None,
                 backend: Any = None) -> PeakResult:
    """Time square matmuls and a large copy on the backend's device, in this process (sizes
    default to GEMM_SIZES and COPY_BYTES of the device type); then, for `sustain_s` (default
    SUSTAIN_S of the device type, none for CPUs), the best size back to back, with the
    device's clocks read while it runs. `backend`: the rank's own backend object (bound to
    its device) where a rank measures; a fresh one otherwise.

    Sizes grow until a size would not fit the engine's time budget: on a CPU without bf16
    instructions torch.mm in bf16 runs at about 1 GFLOP/s, where a 2048-cube takes 17 s a
    call, while oneDNN reaches twenty times that. `budget_s` bounds each engine's share.
    """
    from backends import COMPUTE_BACKENDS

    backend = backend if backend is not None else COMPUTE_BACKENDS.get(backend_name)()
    settings = backend.configure(threads, precision)
    device = device or backend.device()
    dtype = DTYPES[precision]
    sustain = SUSTAIN_S.get(device.type, 0.0) if sustain_s is None else sustain_s
    key = backend.device_key(device) if sustain > 0 else None
    state = backend.device_state(device) if key else None
    per_size: dict[str, float] = {}
    spent: dict[str, float] = {}
    last_call: dict[str, float] = {}
    for n in gemm_sizes or GEMM_SIZES.get(device.type, GEMM_SIZES["cuda"]):
        for engine, gemm in _gemm_engines(n, device, dtype).items():
            left = budget_s - spent.get(engine, 0.0)
            # A call costs about 8x the previous size's: skip sizes that cannot be timed.
            if engine in last_call and 8 * last_call[engine] * 3 > left:
                continue
            started = time.perf_counter()
            # Two timed calls at least, then more while half the engine's budget lasts.
            times = time_calls(gemm, backend, device, warmup=1, min_reps=min(2, reps),
                               max_reps=reps, budget_s=max(0.0, left / 2))
            spent[engine] = spent.get(engine, 0.0) + time.perf_counter() - started
            last_call[engine] = statistics.median(times)
            per_size[f"{engine} {n}"] = 2 * n**3 / last_call[engine]
    best = max(per_size, key=per_size.__getitem__)
    burst = per_size[best]
    sustained = clocks = None
    if sustain > 0:
        engine, _, size = best.rpartition(" ")
        n = int(size)
        sustained, readings = _sustained(_gemm_engines(n, device, dtype)[engine], 2 * n**3,
                                         2 * n**3 / burst, backend, device, sustain)
        clocks = clocks_under_load(readings)
    elements = (copy_bytes or COPY_BYTES.get(device.type, COPY_BYTES["cuda"])) // 4
    src = torch.ones(elements, device=device)
    dst = torch.empty_like(src)
    copy_times = time_calls(lambda: dst.copy_(src), backend, device, warmup=1,
                            min_reps=min(2, reps), max_reps=reps, budget_s=budget_s / 4)
    bandwidth = 2 * src.numel() * src.element_size() / statistics.median(copy_times)
    return PeakResult(
        backend=backend_name, device_name=backend.device_name(device), precision=precision,
        threads=int(settings.get("threads", threads)),
        flops=sustained if sustained is not None else burst,
        memory_bandwidth=bandwidth, per_size=per_size,
        measured_at=dt.datetime.now(dt.UTC).isoformat(), torch=torch.__version__,
        burst_flops=burst if sustained is not None else None,
        sustained_s=sustain if sustained is not None else None, clocks=clocks,
        device_key=key, device_state=state)


IN_RUN_BUDGET_S = 0.3
# The share of a device's free memory an in-run probe may take, and the smallest copy that
# still measures bandwidth rather than launch latency.
PROBE_SHARE = 0.5
MIN_COPY_BYTES = 64 * 2**20


def gemm_bytes(n: int, precision: str) -> int:
    """Device bytes one GEMM size of the probe holds at once: a float32 operand drawn before
    its cast, two operands and the product in the precision."""
    return n * n * (4 + 3 * DTYPES[precision].itemsize)


def probe_plan(free_bytes: int, precision: str, device_type: str = "cuda"
               ) -> tuple[tuple[int, ...], int] | str:
    """The GEMM sizes and copy bytes an in-run probe can hold within PROBE_SHARE of the
    device's free memory (measured after the model is placed), or why it cannot run."""
    budget = int(free_bytes * PROBE_SHARE)
    copy = min(COPY_BYTES.get(device_type, COPY_BYTES["cuda"]), budget // 4)
    sizes = tuple(n for n in GEMM_SIZES.get(device_type, GEMM_SIZES["cuda"])
                  if gemm_bytes(n, precision) + 2 * copy <= budget)
    smallest = GEMM_SIZES.get(device_type, GEMM_SIZES["cuda"])[0]
    if not sizes or copy < MIN_COPY_BYTES:
        need = (gemm_bytes(smallest, precision) + 2 * MIN_COPY_BYTES) / PROBE_SHARE
        return (f"{free_bytes / 2**30:.2f} GiB free on the device after the model is placed; "
                f"the smallest probe needs {need / 2**30:.2f} GiB free: skipped")
    return sizes, copy


def in_run_reading(backend_name: str, precision: str, threads: int, device: torch.device,
                   when: str, backend: Any = None) -> dict[str, Any]:
    """A quick peak reading inside a run (`when` = before/after the measured steps): the same
    GEMMs and copy as `dtbench peak`, on a shorter time budget per engine; on a device with
    its own memory, only the sizes that fit in the memory the run left free (probe_plan), or
    none, with the reason (`skipped`).

    The training around it must go on as without it: the operands come from a private
    generator, the random streams are forked besides (nothing in the reading can advance
    them), and the thread count the rank trains with is restored. `backend` is the rank's
    own, bound to `device`: a fresh one must not pick a device of its own.
    """
    free = backend.free_memory(device) if backend is not None else None
    plan = probe_plan(free, precision, device.type) if free is not None else ((), None)
    if isinstance(plan, str):
        return {"when": when, "skipped": plan}
    threads_before = torch.get_num_threads()
    devices = [device.index or 0] if device.type == "cuda" else []
    try:
        with torch.random.fork_rng(devices=devices):
            result = measure_peak(backend_name, precision, threads, reps=5,
                                  budget_s=IN_RUN_BUDGET_S, device=device, sustain_s=0.0,
                                  backend=backend, gemm_sizes=plan[0] or None,
                                  copy_bytes=plan[1])
    finally:
        torch.set_num_threads(threads_before)
    return {"when": when, "flops": result.flops, "memory_bandwidth": result.memory_bandwidth,
            "per_size": result.per_size, "threads": result.threads,
            "measured_at": result.measured_at}


def _cache_key(backend: str, device_name: str, precision: str, threads: int,
               device_key: str | None = None) -> str:
    """The cache entry of a device: a GPU by its UUID (each board its own peak); otherwise
    keyed by the hardware (not machine_id, which VMs built from one image share whatever CPU
    they land on)."""
    if device_key:
        return f"{device_key}|{backend}|{precision}|{torch.__version__}"
    from harness.machine.hardware import local_hardware_key

    return (f"{local_hardware_key()}|{backend}|{device_name}|{precision}|threads={threads}|"
            f"{torch.__version__}")


def _cache_file() -> Path:
    return cache_dir() / "peak.json"


def _read_cache() -> dict[str, Any]:
    try:
        data = json.loads(_cache_file().read_text())
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def store_peak(result: PeakResult) -> PeakResult:
    """Remember a measurement and return the peak to use.

    A device measured by its key (a GPU's UUID) is cached as it was just measured: a board
    whose power limit or clocks were capped reads capped, and the entry holds only while
    they stay as they were (cached_peak). A CPU's rate on a shared host swings (here bf16
    went between ~390 and ~770 GFLOP/s within an hour); its peak is a capability, so the
    highest measurement is kept, and one taken in a slow moment cannot push MFU above 1
    later. A cache that cannot be written only costs a re-measure; the children that
    measure a node's GPUs at once write it one at a time.
    """
    key = _cache_key(result.backend, result.device_name, result.precision, result.threads,
                     result.device_key)
    try:
        _cache_file().parent.mkdir(parents=True, exist_ok=True)
        with open(_cache_file().with_suffix(".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            cache = _read_cache()
            previous = cache.get(key)
            if result.device_key is None and isinstance(previous, dict) \
                    and previous.get("flops", 0) >= result.flops:
                return PeakResult(**previous)
            cache[key] = result.as_dict()
            write_atomic(_cache_file(), json.dumps(cache, indent=1))
    except (OSError, TypeError):
        pass
    return result


def cached_peak(backend_name: str, device_name: str, precision: str, threads: int,
                device_key: str | None = None,
                device_state: dict[str, Any] | None = None) -> PeakResult | None:
    """The cached peak, or None; for a keyed device, None also when its state (power limit,
    clocks) is not the one it was measured in."""
    entry = _read_cache().get(_cache_key(backend_name, device_name, precision, threads,
                                         device_key))
    if not isinstance(entry, dict) or (device_key and entry.get("device_state") != device_state):
        return None
    try:
        return PeakResult(**entry)
    except TypeError:
        return None


def peak_for(backend_name: str, device_name: str, precision: str, threads: int,
             device: torch.device | None = None, backend: Any = None) -> PeakResult:
    """The cached peak of this device and configuration, measured now if there is none (or,
    for a keyed device, if it changed since)."""
    key = backend.device_key(device) if backend is not None and device is not None else None
    state = backend.device_state(device) if key else None
    found = cached_peak(backend_name, device_name, precision, threads, key, state)
    if found is None:
        found = store_peak(measure_peak(backend_name, precision, threads, device=device,
                                        backend=backend))
    return found


def device_peak(backend_name: str, precision: str, threads: int, index: int = 0) -> PeakResult:
    """The cached or newly measured peak of the backend's device `index`, in this process."""
    from backends import COMPUTE_BACKENDS

    backend = COMPUTE_BACKENDS.get(backend_name)()
    device = backend.device(index)
    return peak_for(backend_name, backend.device_name(device), precision, threads, device,
                    backend)


def peak_in_own_process(backend_name: str, precision: str, threads: int,
                        timeout_s: float = 900.0, index: int = 0) -> PeakResult:
    """device_peak in a child process: a GPU measured (or only named) from the process that
    launches the ranks would keep a CUDA context, and the probe's cached memory, on it while
    they run. RuntimeError with the child's last words when it fails."""
    root = str(Path(__file__).resolve().parents[2])
    code = ("import json, sys; from harness.microbench.peak import device_peak; "
            "print(json.dumps(device_peak(sys.argv[1], sys.argv[2], int(sys.argv[3]), "
            "int(sys.argv[4])).as_dict()))")
    try:
        done = subprocess.run([sys.executable, "-c", code, backend_name, precision,
                               str(threads), str(index)], capture_output=True, text=True,
                              timeout=timeout_s, cwd=root)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"the {backend_name} peak probe took over {timeout_s:.0f} s") \
            from None
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"the {backend_name} peak probe failed: {tail}")
    return PeakResult(**json.loads(lines[-1]))


def node_peaks(backend_name: str, precision: str, threads: int, devices: int,
               timeout_s: float = 900.0) -> list[PeakResult]:
    """The peak of each of this node's first `devices` devices, each in a child process of its
    own and all at once (a GPU's sustained run takes its 10 s on its own board)."""
    with ThreadPoolExecutor(max_workers=max(1, devices)) as pool:
        return list(pool.map(lambda index: peak_in_own_process(
            backend_name, precision, threads, timeout_s, index), range(devices)))

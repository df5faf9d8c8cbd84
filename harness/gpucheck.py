"""`python -m harness.gpucheck`: dtbench's GPU paths checked on one real GPU in a few minutes.

What the mocks and torch's fake process group cannot show (docs/guide/testing.md): the rank's
device bound and kept through a peak probe; no host synchronise inside the measured steps (and
what one per step would cost), hidden ones included (set_sync_debug_mode: in fp16, GradScaler's
one a step); an NCCL group that keeps its bound device, barriers without
torch's warning and a subgroup; clocks read while the GPU works; memory allocated, reserved
and in use side by side; NVML's energy counter against sampled power x time; ddp, fsdp and
zero1 over NCCL at one rank in fp16 and bf16; the quick suite. One table, and a JSON file with
`--out`. Exit 0 when every check passes, 1 when one fails, 4 without a GPU (nothing ran).
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from harness.core.errors import EXIT_FAILED, EXIT_NOTHING_RAN, EXIT_OK

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class Check:
    name: str
    verdict: str  # pass, fail, skip
    value: str
    expected: str
    reason: str = ""


def _gpu_reason() -> str | None:
    from backends.cuda import CUDABackend

    found = CUDABackend.availability()
    return None if found.available else found.reason


def _spec(**changes: Any) -> Any:
    from harness.spec.specs import RunSpec

    base = RunSpec(workload="hep_cnn", size="small", backend="cuda", precision="bf16",
                   batch_per_rank=256, steps=30, warmup=3, target_ci=2.0, max_time=3.0,
                   peak="cached")
    return base.replace(**changes)


@contextmanager
def _counting(owner: Any, name: str, counts: dict[str, int], key: str) -> Iterator[None]:
    real = getattr(owner, name)

    def counted(*args: Any, **kwargs: Any) -> Any:
        counts[key] = counts.get(key, 0) + 1
        return real(*args, **kwargs)

    setattr(owner, name, counted)
    try:
        yield
    finally:
        setattr(owner, name, real)


def check_bind() -> Check:
    """bind() makes the device current; configure() and an in-run peak probe keep it."""
    from backends.cuda import CUDABackend
    from backends.numa import bind_threads
    from harness.microbench.peak import in_run_reading

    backend = CUDABackend()
    affinity = os.sched_getaffinity(0)
    device = backend.bind(torch.cuda.device_count() - 1)
    settings = backend.configure(0, "bf16")
    in_run_reading("cuda", "bf16", 0, device, "before", backend)
    current = torch.cuda.current_device()
    bind_threads(affinity)  # bind() placed this process on the GPU's cores: the runs need all
    ok = current == device.index and settings["cuda_device"] == device.index
    return Check("bind", "pass" if ok else "fail", f"current cuda:{current} after a probe",
                 f"cuda:{device.index} (the bound device)",
                 "" if torch.cuda.device_count() > 1 else
                 "one GPU: the bound and the default device coincide")


def check_no_step_sync() -> tuple[list[Check], Any]:
    """A throughput run in this process: torch.cuda.synchronize inside the measured steps
    is counted (0 expected); then the same run with a synchronise forced after each step,
    to show what one costs (a figure, one run each, not a verdict)."""
    from harness.rank import loops, measure

    counts: dict[str, int] = {}
    real_measure = measure.measure

    def counted_measure(*args: Any, **kwargs: Any) -> Any:
        with _counting(torch.cuda, "synchronize", counts, "synchronize"):
            return real_measure(*args, **kwargs)

    spec = _spec()
    loops.measure = counted_measure
    try:
        result = loops.run_throughput(spec)
    finally:
        loops.measure = real_measure
    real_after = measure.Decider.after

    def synchronising(self: Any, elapsed: float) -> Any:
        torch.cuda.synchronize(self.timer._device)
        return real_after(self, elapsed)

    measure.Decider.after = synchronising  # type: ignore[method-assign]
    try:
        forced = loops.run_throughput(spec)
    finally:
        measure.Decider.after = real_after  # type: ignore[method-assign]
    syncs = counts.get("synchronize", 0)
    step = statistics.median(result.step_times)
    forced_step = statistics.median(forced.step_times)
    return [Check("no sync per step", "pass" if syncs == 0 else "fail",
                  f"{syncs} torch.cuda.synchronize in {len(result.step_times)} measured steps",
                  "0"),
            Check("cost of a sync per step", "pass",
                  f"step {step * 1e3:.3f} ms; {forced_step * 1e3:.3f} ms with one per step "
                  f"({forced_step / step:.3f}x)", "a figure, one run each",
                  f"{spec.workload}/{spec.size} {spec.precision} batch {spec.batch_per_rank}")
            ], result


# Where a synchronising call inside the measured steps is by design: the step timer and the
# phase clock wait for an event the device passed two steps ago (backends/cuda.py,
# harness/strategies/clock.py), the stop decision reads the settled times (harness/rank/).
DESIGNED_SYNC_FILES = ("backends/cuda.py", "harness/strategies/clock.py", "harness/rank/")
GRAD_SCALER_FILE = "torch/amp/grad_scaler.py"


def sync_sites(caught: list[warnings.WarningMessage]) -> dict[str, int]:
    """The synchronising calls torch.cuda.set_sync_debug_mode("warn") reported, by the file
    and line of the Python code that made them (torch attributes a C++ warning to the frame
    that called the operation)."""
    sites: dict[str, int] = {}
    for warning in caught:
        if "synchroniz" not in str(warning.message):
            continue
        path = Path(warning.filename).as_posix()
        for anchor in ("torch/", "harness/", "backends/", "workloads/"):
            if f"/{anchor}" in f"/{path}":
                path = anchor + f"/{path}".split(f"/{anchor}", 1)[1]
                break
        site = f"{path}:{warning.lineno}"
        sites[site] = sites.get(site, 0) + 1
    return sites


def judge_syncs(sites: dict[str, int], steps: int, precision: str) -> Check:
    """Hidden synchronises of one throughput run's measured steps: none but the designed ones
    in bf16; in fp16 GradScaler's one a step (its step() reads found_inf with .item(), in
    _maybe_opt_step) and nothing else."""
    designed = {s: n for s, n in sites.items() if s.startswith(DESIGNED_SYNC_FILES)}
    scaler = {s: n for s, n in sites.items() if s.startswith(GRAD_SCALER_FILE)}
    other = {s: n for s, n in sites.items() if s not in designed and s not in scaler}
    per_step = sum(scaler.values()) / max(1, steps)
    said = "; ".join(f"{site} x{count}" for site, count in sorted(sites.items())) or "none"
    if precision == "fp16":
        ok = not other and 0 < per_step <= 1
        expected = "GradScaler's .item() once a step, nothing else undesigned"
    else:
        ok = not other and not scaler
        expected = "none but the step timer's and phase clock's settled reads"
    return Check(f"hidden syncs {precision}", "pass" if ok else "fail",
                 f"{sum(sites.values())} synchronising calls in {steps} measured steps "
                 f"({per_step:.2f} a step in GradScaler): {said}", expected,
                 f"undesigned: {other}" if other else "")


def _watched_run(precision: str) -> tuple[Any, list[warnings.WarningMessage]]:
    """A throughput run with torch's sync debug mode on over its measured steps only."""
    from harness.rank import loops, measure

    real_measure = measure.measure
    caught: list[warnings.WarningMessage] = []

    def watched(*args: Any, **kwargs: Any) -> Any:
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
            try:
                return real_measure(*args, **kwargs)
            finally:
                torch.cuda.set_sync_debug_mode("default")
                caught.extend(seen)

    loops.measure = watched
    try:
        return loops.run_throughput(_spec(precision=precision)), caught
    finally:
        loops.measure = real_measure


def check_hidden_syncs() -> list[Check]:
    """torch.cuda.set_sync_debug_mode("warn") over the measured steps of a bf16 and an fp16
    throughput run: every operation that makes the host wait for the device (.item(),
    .cpu(), nonzero, a blocking copy), not only explicit synchronise calls."""
    checks = []
    for precision in ("bf16", "fp16"):
        result, caught = _watched_run(precision)
        steps = len(result.step_times) + len(result.settling_times)
        checks.append(judge_syncs(sync_sites(caught), steps, precision))
    return checks


def check_memory(result: Any) -> Check:
    allocated = result.peak_memory
    reserved = result.memory.get("reserved")
    used = result.memory.get("device_used")
    ok = None not in (allocated, reserved, used) and allocated <= reserved <= used
    return Check("memory side by side", "pass" if ok else "fail",
                 f"allocated {allocated}, reserved {reserved}, NVML used {used} bytes",
                 "allocated <= reserved <= in use")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def check_bound_group() -> Check:
    """One NCCL rank through the counting wrapper: the group keeps its bound device, a
    barrier gives no warning, a subgroup is made and reduces."""
    import torch.distributed as dist

    from harness.comm.meter import CommMeter, register_counted_backend

    device = torch.device("cuda", torch.cuda.current_device())
    name = register_counted_backend("nccl", CommMeter(), device)
    store = dist.TCPStore("127.0.0.1", _free_port(), 1, True)
    dist.init_process_group(name, store=store, rank=0, world_size=1, device_id=device)
    try:
        bound = dist.group.WORLD.bound_device_id
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            dist.barrier()
        warned = [str(w.message) for w in caught if "barrier" in str(w.message)]
        subgroup = dist.new_group([0])
        value = torch.ones(4, device=device)
        dist.all_reduce(value, group=subgroup)
        ok = bound == device and not warned and float(value.sum()) == 4.0 \
            and subgroup.bound_device_id == device
        return Check("bound device", "pass" if ok else "fail",
                     f"bound {bound}, subgroup {subgroup.bound_device_id}, barrier warnings "
                     f"{len(warned)}", f"{device}, {device}, 0", "; ".join(warned)[:200])
    finally:
        dist.destroy_process_group()


def check_clocks() -> Check:
    from harness.microbench.peak import measure_peak

    result = measure_peak("cuda", "bf16", sustain_s=4.0)
    clocks = result.clocks or {}
    reasons = clocks.get("clock_reasons") or []
    ok = clocks.get("readings", 0) >= 2 and "GpuIdle" not in reasons
    shares = ", ".join(f"{name} {share:.0%}" for name, share in
                       (clocks.get("clock_reason_share") or {}).items()) or "none"
    return Check("clocks under load", "pass" if ok else "fail",
                 f"{clocks.get('readings')} readings, SM {clocks.get('sm_clock_mhz')} of "
                 f"{clocks.get('max_sm_clock_mhz')} MHz, reasons: {shares}; masks "
                 f"{[hex(m) for m in clocks.get('clock_reason_masks') or []]}; "
                 f"sustained {result.flops / 1e12:.0f} of burst "
                 f"{(result.burst_flops or 0) / 1e12:.0f} TFLOP/s",
                 ">= 2 readings, no GpuIdle", clocks.get("unavailable", ""))


def check_energy(seconds: float = 6.0) -> Check:
    """NVML's energy counter over a window of steady GEMMs against the mean sampled power
    times the window."""
    from backends import nvml
    from backends.cuda import _nvml_uuid

    device = torch.device("cuda", torch.cuda.current_device())
    uuid = _nvml_uuid(device)
    a = torch.randn(8192, 8192, device=device, dtype=torch.bfloat16)
    end = time.perf_counter() + 1.0
    while time.perf_counter() < end:  # a second of load before the window
        a @ a
    torch.cuda.synchronize(device)
    meter = nvml.NVMLEnergyMeter(index=device.index or 0, uuid=uuid)
    sampler = nvml.NVMLSampler(index=device.index or 0, uuid=uuid, interval_s=0.05)
    sampler.start()
    joules, started = meter.joules(), time.perf_counter()
    while time.perf_counter() - started < seconds:
        for _ in range(20):
            a @ a
        torch.cuda.synchronize(device)
    counted, window = meter.joules() - joules, time.perf_counter() - started
    power = sampler.stop().get("power_w") or []
    meter.close()
    if not power:
        return Check("energy vs power x time", "fail", "no power samples", "samples",
                     sampler.reason or "")
    estimate = statistics.fmean(power) * window
    ratio = counted / estimate if estimate else float("nan")
    return Check("energy vs power x time", "pass" if 0.9 <= ratio <= 1.1 else "fail",
                 f"counter {counted:.0f} J, mean power x time {estimate:.0f} J "
                 f"({len(power)} samples, {window:.1f} s): ratio {ratio:.3f}", "0.9 to 1.1")


def check_runs(out: Path) -> list[Check]:
    """dtbench run in subprocesses: the strategies over NCCL at one rank, then quick."""
    checks = []
    commands = {
        "ddp/fsdp/zero1 nccl fp16+bf16": [
            "-w", "hep_cnn", "--backend", "cuda", "--comm", "nccl", "-n", "1",
            "--strategy", "ddp", "--strategy", "fsdp", "--strategy", "zero1",
            "--precision", "fp16", "--precision", "bf16", "--max-time", "3"],
        "quick suite": ["quick", "--backend", "cuda", "--max-time", "3"]}
    for label, args in commands.items():
        records = out / f"{label.split()[0].replace('/', '-')}.json"
        started = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "harness", "run", *args, "--out",
                               str(out / "store"), "--json", str(records), "-q"],
                              cwd=ROOT, capture_output=True, text=True, timeout=400)
        found = json.loads(records.read_text()) if records.exists() else []
        statuses = [f"{r['spec']['workload']}/{r['spec'].get('strategy')}/"
                    f"{r['spec']['precision']}: {r['status']}"
                    + (f" {_throughput(r):.0f}/s" if r["status"] == "success" else
                       f" ({(r.get('error') or '')[:80]})") for r in found]
        ok = done.returncode == 0 and found and all(r["status"] == "success" for r in found)
        tail = "" if ok else (done.stderr.strip().splitlines() or [""])[-1][:200]
        checks.append(Check(label, "pass" if ok else "fail", "; ".join(statuses) or "no records",
                            f"every run success (exit 0), {time.perf_counter() - started:.0f} s",
                            tail))
    return checks


def _throughput(record: dict[str, Any]) -> float:
    return next((m["value"] for m in record["metrics"] if m["name"] == "throughput"), 0.0)


def _guarded(name: str, fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except Exception as exc:  # noqa: BLE001 - a broken check is a failed check, not a crash
        return Check(name, "fail", f"{type(exc).__name__}", "no error", str(exc)[:300])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.gpucheck", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=None,
                        help="folder for the JSON of the checks and the runs' store "
                        "(default: a temporary folder)")
    parser.add_argument("--no-runs", action="store_true",
                        help="skip the dtbench run subprocesses (strategies, quick suite)")
    args = parser.parse_args(argv)
    reason = _gpu_reason()
    if reason is not None:
        print(f"gpucheck needs a CUDA GPU: {reason}; nothing ran", file=sys.stderr)
        return EXIT_NOTHING_RAN
    out = args.out or Path(tempfile.mkdtemp(prefix="dtbench-gpucheck-"))
    out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("DTBENCH_CACHE_DIR", str(out / "cache"))
    checks: list[Check] = []
    started = time.perf_counter()
    for name, fn in (("bind", check_bind), ("bound device", check_bound_group),
                     ("clocks under load", check_clocks),
                     ("energy vs power x time", check_energy)):
        checks.append(_guarded(name, fn))
        print(_line(checks[-1]), flush=True)
    before = len(checks)
    found = _guarded("no sync per step", check_no_step_sync)
    if isinstance(found, Check):
        checks.append(found)
    else:
        step_checks, result = found
        checks += [*step_checks, _guarded("memory side by side", lambda: check_memory(result))]
    found_syncs = _guarded("hidden syncs", check_hidden_syncs)
    checks += [found_syncs] if isinstance(found_syncs, Check) else found_syncs
    for check in checks[before:]:
        print(_line(check), flush=True)
    if not args.no_runs:
        for check in check_runs(out):
            checks.append(check)
            print(_line(check), flush=True)
    failed = [c for c in checks if c.verdict == "fail"]
    print(f"\n{len(checks) - len(failed)} of {len(checks)} checks pass on "
          f"{torch.cuda.get_device_name()} ({time.perf_counter() - started:.0f} s); "
          f"details in {out / 'gpucheck.json'}")
    (out / "gpucheck.json").write_text(json.dumps([asdict(c) for c in checks], indent=1))
    return EXIT_FAILED if failed else EXIT_OK


def _line(check: Check) -> str:
    text = f"{check.verdict.upper():4}  {check.name}: {check.value} (expected {check.expected})"
    return text + (f" — {check.reason}" if check.reason else "")


if __name__ == "__main__":
    sys.exit(main())

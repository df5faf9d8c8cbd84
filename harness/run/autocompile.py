"""Whether torch.compile pays on this machine, for this workload and configuration.

`--compile auto` measures it: a one-rank copy of the run trains a few steps eager, then a few
compiled, and the compiled model is chosen only when its median step takes at most MARGIN of
the eager one (a shared host's noise must not flip the choice). Compilation time (the first
compiled step less a steady one) is kept apart from the step times. The decision is cached
per hardware (not machine_id), torch version and configuration, so that `--compile default`
(the default) uses compile exactly where a measurement on this hardware found it faster, and
stays eager where nothing was measured.
"""
from __future__ import annotations

import hashlib
import json
import statistics
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from harness.core.files import cache_dir, write_atomic
from harness.core.spec import RunSpec
from harness.records.record import utc_now

# The compiled median step must be at most this share of the eager one to be chosen.
MARGIN = 0.97
PROBE_WARMUP = 2
PROBE_STEPS = 4


@dataclass(frozen=True)
class CompileChoice:
    """How a run's compile setting was settled, as the record's notes carry it."""

    mode: str
    compiled: bool
    source: str  # "requested", "measured", "cached" or "no decision cached"
    eager_step_s: float | None = None
    compiled_step_s: float | None = None
    compile_s: float | None = None
    measured_at: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _cache_file() -> Path:
    return cache_dir() / "compile.json"


def decision_key(spec: RunSpec) -> str:
    """What the choice depends on: the hardware, torch, and the configuration of one rank."""
    from harness.core.hardware import local_hardware_key

    identity = {"hardware": local_hardware_key(), "torch": torch.__version__,
                "workload": spec.workload, "size": spec.size, "backend": spec.backend,
                "precision": spec.precision, "batch": spec.batch_per_rank,
                "threads": spec.threads, "channels_last": spec.channels_last,
                "ipex": spec.ipex, "mode": spec.mode}
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:16]


def _read_cache() -> dict[str, Any]:
    try:
        data = json.loads(_cache_file().read_text())
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def cached_choice(spec: RunSpec) -> CompileChoice | None:
    entry = _read_cache().get(decision_key(spec))
    if not isinstance(entry, dict):
        return None
    known = {name: entry[name] for name in CompileChoice.__dataclass_fields__ if name in entry}
    try:
        return CompileChoice(**{**known, "mode": spec.compile_mode, "source": "cached"})
    except TypeError:
        return None


def store_choice(spec: RunSpec, choice: CompileChoice) -> None:
    """Remember a measured choice; a cache that cannot be written only costs a re-measure."""
    try:
        _cache_file().parent.mkdir(parents=True, exist_ok=True)
        cache = _read_cache()
        cache[decision_key(spec)] = {**choice.as_dict(), "label": spec.label()}
        write_atomic(_cache_file(), json.dumps(cache, indent=1, sort_keys=True))
    except (OSError, TypeError):
        pass


def _probe_spec(spec: RunSpec, compiled: bool) -> RunSpec:
    """One rank of the run, alone, on a synthetic batch: what compilation changes is the
    rank's own compute, which the exchange of a larger run does not alter."""
    return spec.replace(nproc_per_node=1, nnodes=1, comm="none", launcher="local",
                        strategy="ddp", strategy_options=(), straggler=None, replicas=0,
                        mode="throughput", steps=PROBE_STEPS, warmup=PROBE_WARMUP,
                        compile=compiled, compile_mode="on" if compiled else "off",
                        peak="cached")


def measure_choice(spec: RunSpec) -> CompileChoice:
    """Train a one-rank copy eager, then compiled, in this process; keep the faster."""
    from harness.rank.loops import run_throughput

    eager = run_throughput(_probe_spec(spec, False))
    compiled = run_throughput(_probe_spec(spec, True))
    eager_step = statistics.median(eager.step_times)
    compiled_step = statistics.median(compiled.step_times)
    first = compiled.warmup_times[0] if compiled.warmup_times else compiled_step
    torch._dynamo.reset()  # the probe's graphs are not the run's
    return CompileChoice(mode=spec.compile_mode, compiled=compiled_step <= MARGIN * eager_step,
                         source="measured", eager_step_s=eager_step,
                         compiled_step_s=compiled_step,
                         compile_s=max(0.0, first - compiled_step),
                         measured_at=utc_now().isoformat(timespec="seconds"))


def settle_compile(spec: RunSpec) -> tuple[RunSpec, CompileChoice]:
    """The spec with compile decided, and how it was decided."""
    mode = spec.compile_mode
    if mode in ("on", "off"):
        return spec, CompileChoice(mode=mode, compiled=spec.compile, source="requested")
    choice = cached_choice(spec)
    if choice is None and mode == "auto":
        choice = measure_choice(spec)
        store_choice(spec, choice)
    if choice is None:
        choice = CompileChoice(mode=mode, compiled=False, source="no decision cached")
    return spec.replace(compile=choice.compiled), choice

"""Whether torch.compile, and IPEX, pay on this machine for this workload and configuration.

Both are switches whose worth depends on the CPU (IPEX ran at 0.6 of stock oneDNN on an AMD
Zen 3 here; compiled BN+ReLU blocks were slower than eager on Zen 5), so neither is switched
on by assumption. `--compile auto` / `--ipex auto` measure it: a one-rank copy of the run
trains a few steps with the switch off, then a few with it on, each in a rank process of its
own started like every run (harness/run/launch.py), and it is chosen only when its
median step takes at most MARGIN of the other (a shared host's noise must not flip the
choice). Set-up time (the first step with the switch on less a steady one: compilation,
IPEX's rewrite) is kept apart from step times. The decision is cached per hardware (not
machine_id), torch version and configuration, so that `default` (the default of both
options) uses a switch exactly where a measurement on this hardware found it faster, and
leaves it off where nothing was measured. IPEX is settled first; the compile decision is
then taken with IPEX as settled.
"""
from __future__ import annotations

import hashlib
import json
import statistics
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from harness.core.files import cache_dir, write_atomic
from harness.records.record import new_run_id, utc_now
from harness.spec.kinds import TRAINING
from harness.spec.specs import RunSpec

if TYPE_CHECKING:
    from harness.rundir import RankResult

# The median step with the switch on must be at most this share of the one without it.
MARGIN = 0.97
PROBE_WARMUP = 2
PROBE_STEPS = 4
SWITCHES = ("ipex", "compile")  # in the order they are settled

Probe = Callable[[RunSpec], "RankResult"]


@dataclass(frozen=True)
class Choice:
    """How one switch of a run was settled, as the record's notes carry it."""

    mode: str
    enabled: bool
    source: str  # requested, measured, cached, no decision cached, or why it cannot be used
    off_step_s: float | None = None
    on_step_s: float | None = None
    setup_s: float | None = None  # compilation / IPEX's first rewrite, not in the step times
    measured_at: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _mode(spec: RunSpec, switch: str) -> str:
    return str(getattr(spec, f"{switch}_mode"))


def _cache_file(switch: str) -> Path:
    return cache_dir() / f"{switch}.json"


def decision_key(spec: RunSpec, switch: str) -> str:
    """What the choice depends on: the hardware, torch, and the configuration of one rank
    (with the switches settled before this one)."""
    from harness.machine.hardware import local_hardware_key

    identity = {"hardware": local_hardware_key(), "torch": torch.__version__,
                "workload": spec.workload, "size": spec.size, "backend": spec.backend,
                "precision": spec.precision, "batch": spec.batch_per_rank,
                "threads": spec.threads, "channels_last": spec.channels_last,
                "mode": spec.mode}
    for earlier in SWITCHES[:SWITCHES.index(switch)]:
        identity[earlier] = getattr(spec, earlier)
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:16]


def _read_cache(switch: str) -> dict[str, Any]:
    try:
        data = json.loads(_cache_file(switch).read_text())
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def cached_choice(spec: RunSpec, switch: str = "compile") -> Choice | None:
    entry = _read_cache(switch).get(decision_key(spec, switch))
    if not isinstance(entry, dict):
        return None
    known = {name: entry[name] for name in Choice.__dataclass_fields__ if name in entry}
    try:
        return Choice(**{**known, "mode": _mode(spec, switch), "source": "cached"})
    except TypeError:
        return None


def store_choice(spec: RunSpec, choice: Choice, switch: str = "compile") -> None:
    """Remember a measured choice; a cache that cannot be written only costs a re-measure."""
    try:
        cache_dir().mkdir(parents=True, exist_ok=True)
        cache = _read_cache(switch)
        cache[decision_key(spec, switch)] = {**choice.as_dict(),
                                             "label": TRAINING.label(spec.as_dict())}
        write_atomic(_cache_file(switch), json.dumps(cache, indent=1, sort_keys=True))
    except (OSError, TypeError):
        pass


def _probe_spec(spec: RunSpec, switch: str, on: bool) -> RunSpec:
    """One rank of the run, alone, on a synthetic batch: what the switch changes is the
    rank's own compute, which the exchange of a larger run does not alter."""
    probe = spec.replace(nproc_per_node=1, nnodes=1, comm="none", launcher="local",
                         strategy="ddp", strategy_options=(), straggler=None, replicas=0,
                         mode="throughput", steps=PROBE_STEPS, warmup=PROBE_WARMUP,
                         target_ci=None, max_time=None,  # the probe's fixed count
                         peak="cached", compile=False, compile_mode="off", ipex_mode="off")
    if switch == "compile":  # compile is measured on top of the settled IPEX choice
        return probe.replace(compile=on)
    return probe.replace(ipex=on)


def probe_in_a_rank(spec: RunSpec) -> RankResult:
    """A probe run as every run runs: one rank process under the supervisor, so that neither
    its compiled graphs nor its memory stay behind in this process."""
    from harness.run.launch import launch
    from harness.spec.specs import LaunchOptions

    ranks = launch(spec, LaunchOptions(), new_run_id(spec.workload, utc_now()),
                   lambda phase, done, total: None)
    assert ranks, "a one-node probe always reports"
    return ranks[0]


def measure_choice(spec: RunSpec, switch: str = "compile", probe: Probe | None = None
                   ) -> Choice:
    """Train a one-rank copy with the switch off, then on (each `probe`, by default a rank
    process of its own); keep the faster."""
    probe = probe or probe_in_a_rank
    off = probe(_probe_spec(spec, switch, False))
    on = probe(_probe_spec(spec, switch, True))
    off_step = statistics.median(off.step_times)
    on_step = statistics.median(on.step_times)
    first = on.warmup_times[0] if on.warmup_times else on_step
    return Choice(mode=_mode(spec, switch), enabled=on_step <= MARGIN * off_step,
                  source="measured", off_step_s=off_step, on_step_s=on_step,
                  setup_s=max(0.0, first - on_step),
                  measured_at=utc_now().isoformat(timespec="seconds"))


def ipex_unusable(spec: RunSpec) -> str | None:
    """Why IPEX cannot be used for this run, or None."""
    from backends.ipex import ipex_availability
    from harness.strategies import STRATEGIES

    if spec.backend != "cpu":
        return f"IPEX is a plug-in of the cpu backend, not of {spec.backend}"
    if not STRATEGIES.get(spec.strategy).uses_ipex:
        return f"the {spec.strategy} strategy does not apply IPEX (ddp does)"
    return ipex_availability(precision=spec.precision).reason or None


def decide_switch(spec: RunSpec, switch: str, probe: Probe | None = None) -> tuple[RunSpec, Choice]:
    """The spec with one switch decided, and how it was decided."""
    mode = _mode(spec, switch)
    if mode in ("on", "off"):
        return spec, Choice(mode=mode, enabled=bool(getattr(spec, switch)), source="requested")
    unusable = ipex_unusable(spec) if switch == "ipex" else None
    if unusable is not None:
        choice = Choice(mode=mode, enabled=False, source=unusable)
    else:
        choice = cached_choice(spec, switch)
        if choice is None and mode == "auto":
            choice = measure_choice(spec, switch, probe)
            store_choice(spec, choice, switch)
        if choice is None:
            choice = Choice(mode=mode, enabled=False, source="no decision cached")
    return spec.replace(**{switch: choice.enabled}), choice


def settle_all(spec: RunSpec, probe: Probe | None = None
               ) -> tuple[RunSpec, dict[str, Choice]]:
    """IPEX, then compile, decided for this run."""
    choices = {}
    for switch in SWITCHES:
        spec, choices[switch] = decide_switch(spec, switch, probe)
    return spec, choices


def settle_compile(spec: RunSpec, probe: Probe | None = None) -> tuple[RunSpec, Choice]:
    """Only the compile switch (IPEX as the spec has it)."""
    return decide_switch(spec, "compile", probe)

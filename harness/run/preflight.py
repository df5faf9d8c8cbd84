"""The preflight of a planned spec, before its ranks start: whether it can run here at all,
whether IPEX and torch.compile are switched on (harness/run/autocompile.py), and, with --peak
cached, the peak its MFU is measured against. Everything decided here is decided once, in this
process; the ranks only carry it out."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from harness.core.text import one_line
from harness.microbench.peak import PeakResult, device_peak, node_peaks
from harness.run.autocompile import Choice, ipex_unusable, settle_all
from harness.spec.specs import RunSpec


@dataclass
class Ready:
    """A spec as it will run: the switches decided, why it cannot run (skip), its peak."""

    spec: RunSpec
    skip: str | None = None
    choices: dict[str, Choice] = field(default_factory=dict)
    # a CPU node's peak, or (GPUs) the sustained peak of each GPU the node's ranks use
    peak: PeakResult | list[PeakResult] | None = None


def unavailable_reason(spec: RunSpec) -> str | None:
    """Why this valid spec cannot run on this machine, or None when it can."""
    from backends import first_unavailable
    from workloads import get_workload

    reason = first_unavailable([("backend", spec.backend), ("comm", spec.comm),
                                ("launcher", spec.launcher)])
    if reason is not None:
        return reason
    try:
        get_workload(spec.workload).check(spec.backend, spec.precision, spec.mode, spec.size)
    except NotImplementedError as exc:
        return one_line(str(exc)) or f"{spec.workload} does not support this combination"
    from harness.strategies import STRATEGIES

    if spec.ipex and (unusable := ipex_unusable(spec)) is not None:
        return f"--ipex on: {unusable}"
    return STRATEGIES.get(spec.strategy).unsupported(spec)


def cached_peak(spec: RunSpec) -> PeakResult | list[PeakResult]:
    """The peak of the node the ranks run on, from the per-machine cache (measured now where
    it holds none): the ranks of a CPU node share its cores, so its peak is at their threads
    together. A backend that probes in a process of its own (CUDA) gives each device the
    node's ranks use its own sustained peak, by the device's UUID, each in a child process."""
    from backends import COMPUTE_BACKENDS

    backend_class = COMPUTE_BACKENDS.get(spec.backend)
    threads = backend_class().rank_threads(spec.threads)
    if backend_class.probes_in_own_process:
        return node_peaks(spec.backend, spec.precision, threads, _node_devices(spec))
    if spec.backend == "cpu":
        threads *= spec.nproc_per_node
    return device_peak(spec.backend, spec.precision, threads)


def _node_devices(spec: RunSpec) -> int:
    """The devices this node's ranks take: one each, fewer where --share-gpu puts several
    ranks on the devices this process sees."""
    from harness.run.guard import visible_gpus

    seen = visible_gpus() if spec.backend == "cuda" else 0
    return max(1, min(spec.nproc_per_node, seen) if seen else spec.nproc_per_node)


def preflight(spec: RunSpec, progress: Callable[[str, int, int], None]) -> Ready:
    """The spec with every decision taken that the ranks must not take themselves."""
    reason = unavailable_reason(spec)
    if reason is not None:
        return Ready(spec, skip=reason)
    ready = Ready(spec)
    if {spec.compile_mode, spec.ipex_mode} & {"auto", "default"}:
        progress("deciding IPEX and compile", 0, 1)
        ready.spec, ready.choices = settle_all(spec)
    if spec.peak == "cached" or spec.backend == "cuda":
        # On a GPU the MFU denominator is always each device's sustained peak; an in-run
        # reading is a burst, recorded beside it (harness/collectors/flops.py).
        ready.peak = cached_peak(ready.spec)
    return ready

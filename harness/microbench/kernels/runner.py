"""Run a kernel set: measure both roofs first, then every kernel, pass and algorithm in turn,
each checked against its family's reference before it is timed. Measurements come out one
by one (a generator), so the caller can store each before the next starts."""
from __future__ import annotations

import statistics
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

import harness.microbench.kernels.attention  # noqa: F401  (registers the families)
import harness.microbench.kernels.conv  # noqa: F401
import harness.microbench.kernels.gemm  # noqa: F401
import harness.microbench.kernels.lstm  # noqa: F401
import harness.microbench.kernels.memory  # noqa: F401
from harness.core.errors import describe_exception
from harness.microbench.kernels.family import FAMILIES, KernelFamily, Operands, max_rel_error
from harness.microbench.kernels.roofline import kernel_bytes
from harness.microbench.kernels.sets import KernelSet
from harness.microbench.kernels.shapes import KernelCase
from harness.microbench.peak import measure_peak
from harness.microbench.timing import time_calls

SEED = 0


@dataclass(frozen=True)
class Roofs:
    """The two roofs of this invocation: the measured GEMM peak (dtbench peak's method) and
    the better of the copy and triad bandwidths."""

    peak_flops: float
    peak_per_size: dict[str, float]
    bandwidth: float
    bandwidth_kernel: str
    measured_at: str


@dataclass
class Measurement:
    """One kernel, pass and algorithm: its status, raw per-call times and correctness check."""

    case: KernelCase
    pass_: str
    algorithm: str
    precision: str
    status: str = "success"
    error: str | None = None
    samples: list[float] = field(default_factory=list)
    max_rel_error: float | None = None
    details: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Step:
    """What the runner is measuring, for a progress display."""

    index: int
    total: int
    label: str


def planned_steps(cases: list[KernelCase]) -> int:
    return sum(len(case.passes) * len(FAMILIES.get(case.family).algorithms) for case in cases)


class KernelRunner:
    """Measures one kernel set at one precision on one backend."""

    def __init__(self, kernel_set: KernelSet, precision: str, backend_name: str, threads: int,
                 on_step: Callable[[Step, Measurement | None], None] | None = None) -> None:
        """`on_step(step, None)` is called as a kernel starts and `on_step(step, measured)` as
        it ends (copy and triad end before they are yielded: they set the bandwidth roof)."""
        from backends import COMPUTE_BACKENDS

        self.kernel_set = kernel_set
        self.precision = precision
        self.backend_name = backend_name
        self.backend = COMPUTE_BACKENDS.get(backend_name)()
        self.settings = self.backend.configure(threads, precision)
        self.threads = int(self.settings.get("threads", threads))
        self.device = self.backend.device()
        self.on_step = on_step or (lambda step, measured: None)
        self.cases = kernel_set.cases()
        self.total = planned_steps(self.cases)
        self.roofs: Roofs | None = None
        self._done = 0

    def run(self) -> Iterator[Measurement]:
        """Roofs first (the compute peak, then copy and triad), then every other kernel."""
        peak = measure_peak(self.backend_name, self.precision, self.threads,
                            gemm_sizes=self.kernel_set.peak_gemm_sizes,
                            copy_bytes=self.kernel_set.peak_copy_bytes)
        memory, *others = self.cases
        streams = list(self._case(memory))
        rates = {m.algorithm: kernel_bytes(memory.shape, "-", m.algorithm, self.precision)
                 / statistics.median(m.samples) for m in streams if m.status == "success"}
        if not rates:
            raise RuntimeError("copy and triad both failed: no bandwidth roof "
                               f"({streams[0].error})")
        best = max(rates, key=lambda name: rates[name])
        self.roofs = Roofs(peak.flops, dict(peak.per_size), rates[best], best, peak.measured_at)
        yield from streams
        for case in others:
            yield from self._case(case)

    def _case(self, case: KernelCase) -> Iterator[Measurement]:
        family = FAMILIES.get(case.family)()
        for pass_ in case.passes:
            yield from self._pass(family, case, pass_)

    def _begin(self, case: KernelCase, pass_: str, algorithm: str) -> Step:
        self._done += 1
        where = "" if pass_ == "-" else f" {pass_}"
        step = Step(self._done, self.total,
                    f"{case.family} {case.label()}{where} {algorithm} {self.precision}")
        self.on_step(step, None)
        return step

    def _pass(self, family: KernelFamily, case: KernelCase, pass_: str
              ) -> Iterator[Measurement]:
        generator = torch.Generator().manual_seed(SEED)
        try:
            operands = family.operands(case.shape, pass_, self.precision, self.device, generator)
            reference = family.reference(operands, case.shape, pass_)
        except Exception as exc:  # noqa: BLE001 - a kernel too large for memory fails alone
            for algorithm in family.algorithms:
                step = self._begin(case, pass_, algorithm)
                failed = Measurement(case, pass_, algorithm, self.precision, "failed",
                                     f"operands: {describe_exception(exc)}")
                self.on_step(step, failed)
                yield failed
            return
        for algorithm in family.algorithms:
            step = self._begin(case, pass_, algorithm)
            measured = self._measure(family, operands, reference, case, pass_, algorithm)
            self.on_step(step, measured)
            yield measured
        del operands, reference

    def _measure(self, family: KernelFamily, operands: Operands, reference: Any,
                 case: KernelCase, pass_: str, algorithm: str) -> Measurement:
        """Skipped with the reason where the algorithm does not apply; else checked, then
        timed; an exception fails this algorithm only."""
        shape = case.shape
        measured = Measurement(case, pass_, algorithm, self.precision)
        reason = family.applies(algorithm, shape, pass_, self.precision, self.device)
        if reason is not None:
            measured.status, measured.error = "skipped", reason
            return measured
        try:
            call = family.build(algorithm, operands, shape, pass_)
            # The first call is checked against the reference and counts as a warm-up.
            result = call()
            if reference is not None:
                measured.max_rel_error = max_rel_error(result, reference)
            del result
            measured.details = family.details(algorithm, operands, shape, pass_)
            timing = self.kernel_set.timing
            measured.samples = time_calls(call, self.backend, self.device,
                                          warmup=max(0, timing.warmup - 1),
                                          min_reps=timing.min_reps, max_reps=timing.max_reps,
                                          budget_s=timing.budget_s)
        except Exception as exc:  # noqa: BLE001 - one failing algorithm never ends the set
            measured.status, measured.error = "failed", describe_exception(exc)
            measured.samples = []
        return measured

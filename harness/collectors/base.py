"""Collectors turn ranks' raw measurements into named metrics (docs/spec/metrics.md)."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from harness.core.registry import Registry
from harness.records.record import Metric
from harness.records.record import measured as measured  # noqa: F401  (the collectors' spelling)
from harness.rundir import RankResult
from harness.spec.specs import RunSpec


@dataclass
class CollectContext:
    """What collectors read: the spec, every rank's result, and the metrics made so far."""

    spec: RunSpec
    ranks: list[RankResult]
    flops_per_sample: int | None = None
    peak: Any | None = None
    baseline: dict[str, Any] | None = None
    metrics: list[Metric] = field(default_factory=list)

    def get(self, name: str) -> Metric | None:
        for found in self.metrics:
            if found.name == name:
                return found
        return None


@dataclass(frozen=True)
class Collector:
    """A named metric family; a higher stage runs later and may read earlier stages' metrics."""

    name: str
    stage: int
    measure: Callable[[CollectContext], list[Metric]]


COLLECTORS: Registry[Collector] = Registry("collector")


def collector(name: str, stage: int = 0) -> Callable[[Callable[[CollectContext], list[Metric]]],
                                                     Callable[[CollectContext], list[Metric]]]:
    """Register a collector function under `name` at `stage`."""

    def decorate(fn: Callable[[CollectContext], list[Metric]],
                 ) -> Callable[[CollectContext], list[Metric]]:
        COLLECTORS.register(name)(Collector(name, stage, fn))
        return fn

    return decorate


def collect(context: CollectContext) -> list[Metric]:
    for entry in sorted((COLLECTORS.get(n) for n in COLLECTORS), key=lambda c: c.stage):
        context.metrics.extend(entry.measure(context))
    return context.metrics

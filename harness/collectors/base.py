"""Collectors turn ranks' raw measurements into named metrics (SPEC section 6)."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from harness.record import Metric
from harness.registry import Registry
from harness.spec import RunSpec
from harness.worker import RankResult


@dataclass
class CollectContext:
    """What collectors read: the spec, every rank's result, and the metrics made so far."""

    spec: RunSpec
    ranks: list[RankResult]
    flops_per_sample: int | None = None
    peak: Any | None = None
    metrics: list[Metric] = field(default_factory=list)

    def get(self, name: str) -> Metric | None:
        for found in self.metrics:
            if found.name == name:
                return found
        return None


Collector = Callable[[CollectContext], list[Metric]]

# Registration order is evaluation order: later collectors may read earlier metrics.
COLLECTORS: Registry[Collector] = Registry("collector")


def collect(context: CollectContext) -> list[Metric]:
    for name in COLLECTORS:
        context.metrics.extend(COLLECTORS.get(name)(context))
    return context.metrics

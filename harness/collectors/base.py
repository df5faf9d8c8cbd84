"""Collectors turn ranks' raw measurements into named metrics (docs/spec/metrics.md)."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from harness.core.metrics import metric_info
from harness.core.registry import Registry
from harness.core.spec import RunSpec
from harness.records.record import Metric
from harness.rundir import RankResult


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


def measured(name: str, value: float | None, *, samples: list[float] | None = None,
             extra: dict[str, Any] | None = None, unit: str | None = None,
             higher_is_better: bool | None = None) -> Metric:
    """A metric with the unit and direction the catalogue (harness/core/metrics.py) declares
    for `name`; `unit` and `higher_is_better` only where the catalogue leaves them to each
    record (a quality target's). An uncatalogued name raises: a new metric is declared there
    first, so that compare, report and the docs know it."""
    info = metric_info(name)
    if info is None:
        raise KeyError(f"metric {name!r} is not in the catalogue (harness/core/metrics.py)")
    unit = info.unit if info.unit is not None else unit
    direction = info.higher_is_better if info.better is not None else higher_is_better
    if unit is None or direction is None:
        raise ValueError(f"metric {name!r}: its records state the unit and direction; "
                         "pass them")
    return Metric(name, unit, value, higher_is_better=direction, samples=samples,
                  extra=extra if extra is not None else {})


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

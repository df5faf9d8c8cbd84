"""energy: joules over the measured steps where a counter exists (NVML), else absent."""
from __future__ import annotations

from harness.collectors.base import CollectContext, collector
from harness.records.record import Metric


@collector("energy")
def energy(context: CollectContext) -> list[Metric]:
    values = [r.energy_joules for r in context.ranks]
    if not values or any(v is None for v in values):
        return []
    return [Metric("energy", "J", float(sum(v for v in values if v is not None)),
                   higher_is_better=False, extra={"per_rank": values})]


def energy_absent_reason(context: CollectContext) -> str | None:
    for rank in context.ranks:
        if rank.energy_joules is None:
            return rank.energy_reason or "no energy counter"
    return None

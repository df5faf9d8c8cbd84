"""energy: joules over the measured steps where a counter exists (NVML), else absent."""
from __future__ import annotations

from harness.collectors.base import CollectContext, collector
from harness.records.record import Metric


@collector("energy")
def energy(context: CollectContext) -> list[Metric]:
    """The sum over devices: ranks that shared a device (--share-gpu) each read the whole
    board's counter, which is counted once (the largest of their readings)."""
    values = [r.energy_joules for r in context.ranks]
    if not values or any(v is None for v in values):
        return []
    by_device: dict[str, float] = {}
    for rank in context.ranks:
        assert rank.energy_joules is not None
        key = rank.device_key or f"rank {rank.rank}"
        by_device[key] = max(by_device.get(key, 0.0), rank.energy_joules)
    extra: dict = {"per_rank": values, "devices": len(by_device)}
    if len(by_device) < len(values):
        extra["aggregation"] = ("sum over devices; the ranks that shared a device counted "
                                "once (the largest of their readings)")
    return [Metric("energy", "J", float(sum(by_device.values())), higher_is_better=False,
                   extra=extra)]


def energy_absent_reason(context: CollectContext) -> str | None:
    for rank in context.ranks:
        if rank.energy_joules is None:
            return rank.energy_reason or "no energy counter"
    return None

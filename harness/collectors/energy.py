"""energy, power and energy_per_sample where a counter exists (NVML for GPUs, RAPL through
powercap for CPU packages and DRAM), else absent with the reason.

Each physical domain counts once: the ranks of a node each read the same CPU packages, and
ranks sharing a GPU (--share-gpu) the same board, so the figures are summed over distinct
domains (the largest of the ranks' readings of one), never over ranks.
"""
from __future__ import annotations

from typing import Any

from harness.collectors.base import CollectContext, collector, measured
from harness.records.record import Metric

# MLPerf Power asks for at least 60 samples at 1 Hz or faster: a shorter window is reported,
# and marked.
MIN_WINDOW_S = 60.0


def _domains(context: CollectContext) -> dict[str, float]:
    found: dict[str, float] = {}
    for rank in context.ranks:
        assert rank.energy_joules is not None
        readings = rank.energy_domains or {rank.device_key or f"rank {rank.rank}":
                                           rank.energy_joules}
        for key, joules in readings.items():
            found[key] = max(found.get(key, 0.0), joules)
    return found


@collector("energy", stage=1)
def energy(context: CollectContext) -> list[Metric]:
    values = [r.energy_joules for r in context.ranks]
    if not values or any(v is None for v in values):
        return []
    domains = _domains(context)
    total = float(sum(domains.values()))
    windows = [r.energy_window_s for r in context.ranks if r.energy_window_s]
    window = max(windows) if windows else None
    covers = sorted({r.energy_covers for r in context.ranks if r.energy_covers})
    extra: dict[str, Any] = {"per_rank": values, "devices": len(domains), "by_domain": domains,
                             "covers": covers, "window_s": window}
    if len(domains) < len(values):
        extra["aggregation"] = ("sum over domains; the ranks that read one domain (a node's "
                                "CPU packages, a shared GPU) counted once")
    if window is not None and window < MIN_WINDOW_S:
        extra["imprecise"] = (f"measured over {window:.1f} s, under the {MIN_WINDOW_S:.0f} s "
                              "(60 samples at 1 Hz) MLPerf Power asks for")
    found = [measured("energy", total, extra=extra)]
    if window:
        marks = {key: extra[key] for key in ("imprecise", "covers") if key in extra}
        found.append(measured("power", total / window,
                              extra={**marks, "window_s": window}))
        power = total / window
        rate = context.get("throughput")
        steps = context.ranks[0].energy_steps
        samples = (steps or 0) * context.spec.global_batch
        if context.spec.mode == "ttt" and samples:
            found.append(measured("energy_per_sample", total / samples,
                                  extra={**marks, "method": "energy from run_start to run_stop "
                                         "over the samples trained (evaluations included)",
                                         "steps": steps}))
        elif rate is not None and rate.value:
            found.append(measured("energy_per_sample", power / rate.value,
                                  extra={**marks, "method": "power / throughput: a sample's "
                                         "energy at the measured rate (the median step)",
                                         "over_samples_trained": total / samples if samples
                                         else None, "steps": steps}))
    return found


def energy_absent_reason(context: CollectContext) -> str | None:
    for rank in context.ranks:
        if rank.energy_joules is None:
            return rank.energy_reason or "no energy counter"
    return None

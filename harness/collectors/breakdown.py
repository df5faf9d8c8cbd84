"""time_breakdown: where each rank's step went, as shares summing to 1 — compute,
communication overlapped with compute, exposed communication, data wait, optimizer, and
waiting (for other ranks, and everything outside a phase) — with the skew across ranks.

Without a trace the phases come from the phase clock (host wall time on a CPU, device events
on a GPU): the forward and backward passes are compute (a collective a strategy overlaps with
them, or waits for inside them, counts there), `exchange` and `wait` phases are blocking
communication, hence exposed. With `--profile` the trace's own reading
(harness/rank/profiling.py) says how much of the step ran compute alone, a collective beside
compute, a collective alone, or neither; the optimizer and data-wait shares stay the phase
clock's. The record says which source each rank's shares came from.
"""
from __future__ import annotations

import statistics
from typing import Any

from harness.collectors.base import CollectContext, collector, measured
from harness.records.record import Metric

COMPUTE, EXPOSED = ("forward", "backward"), ("exchange", "wait")
SHARES = ("compute", "comm_overlapped", "comm_exposed", "data_wait", "optimizer", "waiting")


def _median_phases(phase_times: list[dict[str, float]]) -> dict[str, float]:
    names = {name for step in phase_times for name in step}
    return {name: statistics.median(step.get(name, 0.0) for step in phase_times)
            for name in names}


def rank_shares(rank: Any) -> tuple[dict[str, float], float, str]:
    """A rank's shares of its median step, its compute seconds, and where the overlap came
    from."""
    from harness.rank.profiling import read_trace

    step = statistics.median(rank.step_times)
    phases = _median_phases(rank.phase_times)
    waits = (rank.data or {}).get("waits") or []
    parts = {"compute": sum(phases.get(name, 0.0) for name in COMPUTE),
             "comm_exposed": sum(phases.get(name, 0.0) for name in EXPOSED),
             "optimizer": phases.get("optimizer", 0.0),
             "data_wait": statistics.median(waits) if waits else 0.0}
    busy = sum(parts.values())
    if busy > step > 0:  # device events against a host step timer: shares of the phases
        parts = {key: value * step / busy for key, value in parts.items()}
        busy = step
    parts["waiting"] = max(0.0, step - busy)
    parts["comm_overlapped"] = 0.0
    source = ("phase clock: collectives inside the forward and backward passes count as "
              "compute (their overlap needs --profile)")
    reading = read_trace(rank.trace) if getattr(rank, "trace", None) else None
    if reading is not None and step > 0:
        # The trace's intervals say what the phases cannot: how much of a pass was spent
        # with a collective running beside it, or waiting for one alone. The optimizer and
        # the data wait keep the phase clock's shares, taken out of the trace's compute and
        # idle time.
        optimizer = min(parts["optimizer"] / step, reading["compute"])
        data = min(parts["data_wait"] / step, reading["other"])
        parts = {"compute": reading["compute"] - optimizer, "optimizer": optimizer,
                 "comm_overlapped": reading["comm_overlapped"],
                 "comm_exposed": reading["comm_exposed"], "data_wait": data,
                 "waiting": reading["other"] - data}
        source = ("the rank's trace of the profiled steps (dtbench's own reading: HTA reads "
                  "GPU kernel timelines, " + ("which this trace has, but HTA is not a "
                  "dependency here" if _has_kernels(rank.trace) else "this trace has CPU ops "
                  "only") + "); optimizer and data wait from the phase clock")
    total = sum(parts.values()) or 1.0
    compute_s = sum(phases.get(name, 0.0) for name in COMPUTE)
    return {key: parts[key] / total for key in SHARES}, compute_s, source


def _has_kernels(trace: str) -> bool:
    from harness.rank.profiling import trace_events

    return any(e.get("cat") == "kernel" for e in trace_events(trace))


@collector("time_breakdown", stage=1)
def time_breakdown(context: CollectContext) -> list[Metric]:
    ranks = [r for r in context.ranks if r.step_times and r.phase_times and r.role == "worker"]
    if not ranks:
        return []
    per_rank, compute, sources = [], [], set()
    for rank in ranks:
        shares, compute_s, source = rank_shares(rank)
        per_rank.append({"rank": rank.rank, **shares})
        compute.append(compute_s)
        sources.add(source)
    slowest = max(range(len(ranks)), key=compute.__getitem__)
    spread = max(compute) / min(compute) - 1.0 if min(compute) > 0 else None
    return [measured("time_breakdown", max(r["comm_exposed"] for r in per_rank),
                     extra={"per_rank": per_rank, "shares": list(SHARES),
                            "source": sorted(sources),
                            "slowest_rank": ranks[slowest].rank, "compute_s": compute,
                            "compute_spread": spread,
                            "value_is": "the largest exposed-communication share over ranks"})]

"""comm_bytes: what each rank put on the wire per step, counted where it was sent (the counting
process group of harness/comm/meter.py), split by kind, beside the strategy's analytic
volume; comm_payload_bytes, the tensors handed to the collectives per step; and the traffic
outside the training steps, by phase."""
from __future__ import annotations

import statistics
from typing import Any

from harness.collectors.base import CollectContext, collector, measured
from harness.facts.traffic import WIRE_VERIFIED
from harness.records.record import Metric

KINDS = ("gradient", "parameter", "activation", "control")


def nccl_algorithm(env: dict[str, str]) -> dict[str, Any]:
    """NCCL's algorithm and protocol as the run fixed them (NCCL_ALGO, NCCL_PROTO), and what
    the ring formulas are worth under them: NCCL picks per call, by size and topology, among
    ring, tree, NVLS (NVSwitch) and CollNet, whose bytes per rank differ from the ring's."""
    algo, proto = env.get("NCCL_ALGO"), env.get("NCCL_PROTO")
    ring_only = algo is not None and algo.strip().lower() == "ring"
    return {"algo": algo, "proto": proto,
            "source": "NCCL_ALGO/NCCL_PROTO" if algo or proto else
            "not fixed: NCCL chose per call (set NCCL_ALGO=Ring to make the formulas hold)",
            "ring_formulas": "hold (NCCL_ALGO=Ring)" if ring_only else
            "unverified: tree, NVLS and CollNet move other volumes than the ring"}


def _expected(context: CollectContext) -> dict[str, float] | None:
    """The strategy's analytic bytes per step and rank (None where it has no formula)."""
    from harness.strategies import STRATEGIES
    from workloads import get_workload
    from workloads.flops import count_parameters

    spec = context.spec
    try:
        parameters = count_parameters(get_workload(spec.workload), spec.size)
        return STRATEGIES.get(spec.strategy).traffic(spec, parameters * 4.0)
    except (NotImplementedError, KeyError, ValueError):
        return None


@collector("communication")
def communication(context: CollectContext) -> list[Metric]:
    ranks = [r for r in context.ranks if r.comm_bytes]
    if not ranks:
        return []
    # One figure per rank: its mean step (periodic traffic such as local SGD's averaging
    # every H steps counts 1/H a step), by kind; the metric is the mean over ranks.
    per_rank = {kind: [statistics.fmean(step[kind] for step in r.comm_bytes) for r in ranks]
                for kind in KINDS}
    totals = [sum(step.values()) for step in ranks[0].comm_bytes]
    expected = _expected(context)
    comm = context.spec.comm
    common: dict[str, Any] = {
        "counted": "at each collective or send call of the rank's process group; a "
                   "collective's wire bytes are this rank's share under the algorithm the "
                   f"{comm} backend runs (harness/facts/traffic.wire_bytes)",
        "wire_formula_verified": comm in WIRE_VERIFIED,
        "roles": [r.role for r in ranks]}
    if comm == "nccl":
        common["nccl_algorithm"] = nccl_algorithm(dict(context.spec.env))
    found = [measured("comm_bytes", statistics.fmean(sum(per_rank[k][i] for k in KINDS)
                                                     for i in range(len(ranks))),
                      samples=[float(t) for t in totals],
                      extra={**common, "per_rank": [sum(per_rank[k][i] for k in KINDS)
                                                    for i in range(len(ranks))],
                             "samples_of": "rank 0's steps",
                             "expected": sum(expected.values()) if expected else None})]
    payload = [r for r in ranks if r.comm_payload]
    if payload:
        per_rank_payload = [statistics.fmean(r.comm_payload) for r in payload]
        found.append(measured(
            "comm_payload_bytes", statistics.fmean(per_rank_payload),
            samples=[float(v) for v in payload[0].comm_payload],
            extra={"per_rank": per_rank_payload, "samples_of": "rank 0's steps",
                   "counted": "bytes of the tensors each collective or send call was handed"}))
    outside = _outside_steps(ranks)
    if outside:
        found.append(measured(
            "comm_bytes_outside_steps",
            statistics.fmean(sum(p["wire"] for p in r.values()) for r in outside),
            extra={"per_rank": outside, "phases": sorted({k for r in outside for k in r}),
                   "counted": "wire bytes per rank over the whole run outside the training "
                              "steps (set-up, evaluation, stop decisions, ...), by phase"}))
    for kind in KINDS:
        found.append(measured(f"comm_bytes_{kind}", statistics.fmean(per_rank[kind]),
                              extra={"per_rank": per_rank[kind],
                                     "expected": expected.get(kind) if expected else None}))
    return found


def _outside_steps(ranks: list[Any]) -> list[dict[str, dict[str, int]]]:
    """Each rank's traffic outside the steps by phase, or [] where no rank had any."""
    found = [r.comm_outside for r in ranks]
    return found if any(found) else []


@collector("state_bytes")
def state_bytes(context: CollectContext) -> list[Metric]:
    """Parameters + gradients + optimizer state each rank holds (what sharding saves)."""
    ranks = [r for r in context.ranks if r.state_bytes]
    if not ranks:
        return []
    totals = [float(sum(r.state_bytes.values())) for r in ranks]
    return [measured("state_bytes", max(totals),
                     extra={"per_rank": totals, "by_part": [r.state_bytes for r in ranks],
                            "roles": [r.role for r in ranks],
                            "aggregation": "max over ranks; per_rank lists each"})]


@collector("phases")
def phases(context: CollectContext) -> list[Metric]:
    """Per-phase step time (forward, backward, exchange, optimizer, ...), per rank."""
    ranks = [r for r in context.ranks if r.phase_times]
    if not ranks:
        return []
    names = sorted({name for r in ranks for step in r.phase_times for name in step})
    found = []
    for name in names:
        per_rank = [statistics.median(step.get(name, 0.0) for step in r.phase_times)
                    for r in ranks]
        lead = [step.get(name, 0.0) for step in ranks[0].phase_times]
        found.append(measured(f"phase_{name}", max(per_rank),
                              samples=lead, extra={"per_rank": per_rank,
                                                   "aggregation": "median step per rank; value "
                                                   "is the slowest rank; samples are rank 0's"}))
    return found


@collector("strategy_stats")
def strategy_stats(context: CollectContext) -> list[Metric]:
    """What a strategy measures beyond the common metrics (Strategy.step_stats): the
    pipeline's measured bubble beside its schedule's theory, its cut; tensor parallelism's
    split layers. Numbers become metrics (mean over ranks, each rank's in per_rank); the
    rest rides along in `extra`."""
    ranks = [r for r in context.ranks if r.strategy_stats]
    if not ranks:
        return []
    first = ranks[0].strategy_stats
    facts = {key: value for key, value in first.items()
             if not isinstance(value, (int, float)) or isinstance(value, bool)}
    found = []
    if "bubble_fraction" in first:
        per_rank = [r.strategy_stats.get("bubble_fraction") for r in ranks]
        values = [v for v in per_rank if isinstance(v, (int, float))]
        if values:
            found.append(measured(
                "bubble_fraction", statistics.fmean(values),
                extra={"per_rank": per_rank, "roles": [r.role for r in ranks],
                       "theory": first.get("bubble_fraction_theory"),
                       "stage_state_bytes": [r.strategy_stats.get("stage_state_bytes")
                                             for r in ranks], **facts}))
    elif facts or first:
        found.append(measured("strategy_layout", float(len(ranks)),
                              extra={key: value for key, value in first.items()}))
    return found

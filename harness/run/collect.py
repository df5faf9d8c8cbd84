"""Collect a launched run: turn its ranks' raw measurements into metrics, against the peak
taken in its preflight and, for a run of several ranks, the one-rank run in the store that its
scaling efficiency divides by; and note what the ranks say about how they ran."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from harness.collectors import CollectContext, collect
from harness.collectors.energy import energy_absent_reason
from harness.comm.meter import COUNTED
from harness.microbench.peak import PeakResult
from harness.rank.feed import sampling
from harness.records.record import Metric
from harness.rundir import RankResult
from harness.spec.specs import RunSpec
from harness.store.contract import RecordWriter
from harness.strategies import STRATEGIES
from workloads.flops import count_flops_per_sample


@dataclass
class Collected:
    """A run's metrics, its notes from the ranks, and a failure its measurements show
    (a time-to-train run that missed its target)."""

    metrics: list[Metric] = field(default_factory=list)
    notes: dict[str, Any] = field(default_factory=dict)
    failure: str | None = None
    trajectory: dict[str, Any] | None = None


def trajectory(spec: RunSpec, ranks: list[RankResult]) -> dict[str, Any] | None:
    """What the model did, step by step: the loss of every worker rank that stands for a data
    shard (Strategy.loss_ranks) at each recorded step (float32, as the ranks computed them),
    the samples one step consumes over all ranks and how they were drawn, the
    first recorded step (throughput runs record after the warm-up), rank 0's step times, and
    the evaluations with the samples seen at each. None when no rank kept a loss."""
    kept = set(STRATEGIES.get(spec.strategy).loss_ranks(spec))
    workers = [rank for rank in ranks if rank.losses and rank.rank in kept]
    if not workers:
        return None
    lead = workers[0]
    seconds = [*lead.settling_times, *lead.step_times]
    first = 0 if spec.mode == "ttt" else spec.warmup
    samples_per_step = spec.global_batch
    evaluations = [{**entry, "samples": (int(entry["step"]) * samples_per_step
                                         if "step" in entry else None)}
                   for entry in lead.quality_history]
    return {"ranks": [rank.rank for rank in workers], "first_step": first,
            "samples_per_step": samples_per_step, "sampling": sampling(spec),
            "losses": [[float(np.float32(v)) for v in rank.losses] for rank in workers],
            "step_seconds": [round(float(t), 6) for t in seconds]
            if len(seconds) == len(lead.losses) else None,
            "evaluations": evaluations}


def ttt_failure(spec: RunSpec, lead: RankResult) -> str | None:
    """Why a time-to-train run failed though every rank finished: its target was not reached."""
    if spec.mode != "ttt" or lead.target_reached:
        return None
    from workloads import get_workload

    target = get_workload(spec.workload).preset(spec.size).target
    reached = (lead.quality or {}).get(target.metric, float("nan"))
    comparison = ">=" if target.higher_is_better else "<="
    return (f"target {target.metric} {comparison} {target.value} not reached in "
            f"{target.max_epochs} epochs: reached {reached:.4g}")


def stated_precision(metric: Metric, target: float | None) -> None:
    """A per-step metric's achieved precision beside the run's target (percent), and whether
    it met it: the 95% interval's larger half-width over the median on its own scale or its
    inverse (a step time's or a rate's), max(m/low, high/m) - 1, as the stopping rule
    measures it (harness/rank/adaptive.precision)."""
    stats = metric.stats()
    if stats is None or stats.n < 2 or not stats.ci_low > 0:
        return
    achieved = (max(stats.median / stats.ci_low, stats.ci_high / stats.median) - 1.0) * 100.0
    metric.extra["interval_pct"] = {"achieved": achieved, "target": target,
                                    "met": achieved <= target if target is not None else None}


def collect_run(spec: RunSpec, ranks: list[RankResult],
                peak: PeakResult | list[PeakResult] | None, store: RecordWriter) -> Collected:
    """Metrics and notes of a run whose ranks reported (nothing for one that never ran)."""
    if not ranks:
        return Collected()
    from workloads import get_workload

    context = CollectContext(
        spec=spec, ranks=ranks, peak=peak,
        flops_per_sample=count_flops_per_sample(get_workload(spec.workload), spec.size),
        baseline=store.find_baseline(spec) if spec.world_size > 1 else None)
    metrics = collect(context)
    lead = ranks[0]
    notes: dict[str, Any] = {"settings": lead.settings}
    if lead.measurement:
        notes["measurement"] = lead.measurement
        for metric in metrics:
            stated_precision(metric, spec.target_ci)
    if lead.param_checksums:
        notes["replicas_checked_steps"] = min(len(r.param_checksums) for r in ranks)
    notes["device_name"] = lead.device_name
    if spec.distributed and spec.comm not in COUNTED:
        notes["comm_bytes_unavailable"] = (
            f"{spec.comm} traffic is not counted: the counting process group wraps "
            f"{', '.join(COUNTED)} only; the strategy's analytic volume is what "
            "dtbench predict uses")
    absent = energy_absent_reason(context)
    if absent:
        notes["energy_unavailable"] = absent
    return Collected(metrics, notes, ttt_failure(spec, lead), trajectory(spec, ranks))

"""scaling_efficiency against the matching world_size=1 record.

Weak scaling keeps the per-rank batch (the baseline has the same batch_per_rank); strong
scaling keeps the global batch (the baseline's batch equals this run's global batch). Both
reduce to throughput_N / (N x throughput_1); the baseline record is named in the metric.
"""
from __future__ import annotations

from harness.collectors.base import CollectContext, collector, measured
from harness.records.record import Metric, metric


@collector("scaling_efficiency", stage=3)
def scaling_efficiency(context: CollectContext) -> list[Metric]:
    spec, baseline = context.spec, context.baseline
    rate = context.get("throughput")
    if spec.world_size == 1 or baseline is None or rate is None or rate.value is None:
        return []
    base_rate = (metric(baseline, "throughput") or {}).get("value")
    if not base_rate:
        return []
    base_batch = baseline["spec"]["batch_per_rank"]
    kind = "weak" if base_batch == spec.batch_per_rank else "strong"
    n = spec.world_size
    return [measured("scaling_efficiency", rate.value / (n * base_rate),
                     extra={"kind": kind, "world_size": n, "baseline_run_id": baseline["run_id"],
                            "baseline_throughput": base_rate,
                            "baseline_threads": baseline["spec"].get("threads"),
                            "threads_per_rank": spec.threads,
                            "definition": "throughput_N / (N x throughput_1)"})]

"""flops_per_sample (counted), achieved_flops, peak_flops (measured GEMM) and mfu."""
from __future__ import annotations

from harness.collectors.base import CollectContext, collector
from harness.records.record import Metric


@collector("flops", stage=1)
def flops(context: CollectContext) -> list[Metric]:
    if context.flops_per_sample is None:
        return []
    found = [Metric("flops_per_sample", "FLOP", float(context.flops_per_sample),
                    higher_is_better=False,
                    extra={"method": "torch.utils.flop_counter on the meta device, fwd+bwd"})]
    rate = context.get("throughput")
    if rate is not None and rate.value is not None:
        found.append(Metric(
            "achieved_flops", "FLOP/s", context.flops_per_sample * rate.value,
            higher_is_better=True,
            samples=[context.flops_per_sample * s for s in rate.samples or []]))
    return found


@collector("mfu", stage=2)
def mfu(context: CollectContext) -> list[Metric]:
    peak = context.peak
    if peak is None:
        return []
    devices = context.spec.nnodes * (context.spec.nproc_per_node
                                     if context.spec.backend == "cuda" else 1)
    total_peak = peak.flops * devices
    found = [Metric("peak_flops", "FLOP/s", total_peak, higher_is_better=True,
                    extra={"per_device": peak.flops, "devices": devices,
                           "precision": peak.precision, "threads": peak.threads,
                           "measured_at": peak.measured_at, "per_size": peak.per_size,
                           "memory_bandwidth": peak.memory_bandwidth,
                           "method": "best per-size median of square GEMMs"})]
    achieved = context.get("achieved_flops")
    if achieved is not None and achieved.value is not None and total_peak > 0:
        found.append(Metric("mfu", "1", achieved.value / total_peak, higher_is_better=True,
                            samples=[s / total_peak for s in achieved.samples or []]))
    return found

"""peak_memory: peak resident (CPU) or allocated (device) bytes, max over ranks."""
from __future__ import annotations

from harness.collectors.base import CollectContext, collector
from harness.records.record import Metric


@collector("peak_memory")
def peak_memory(context: CollectContext) -> list[Metric]:
    values = [r.peak_memory for r in context.ranks if r.peak_memory is not None]
    if not values:
        return []
    kind = "allocated device memory" if context.spec.backend == "cuda" else "resident set"
    return [Metric("peak_memory", "bytes", float(max(values)), higher_is_better=False,
                   extra={"per_rank": values, "kind": kind})]

"""peak_memory: peak resident (CPU) or allocated (device) bytes, max over ranks."""
from __future__ import annotations

from harness.collectors.base import CollectContext, collector, measured
from harness.records.record import Metric


@collector("peak_memory")
def peak_memory(context: CollectContext) -> list[Metric]:
    values = [r.peak_memory for r in context.ranks if r.peak_memory is not None]
    if not values:
        return []
    kind = "allocated device memory" if context.spec.backend == "cuda" else "resident set"
    found = [measured("peak_memory", float(max(values)),
                      extra={"per_rank": values, "kind": kind})]
    # Beside the allocated peak on a GPU: what the caching allocator reserved, and what NVML
    # saw in use on the board (context, NCCL's buffers, other processes), max over ranks.
    for name, key, what in (
            ("peak_memory_reserved", "reserved",
             "peak bytes the caching allocator reserved (torch.cuda.max_memory_reserved): "
             "the allocated peak plus pools and fragmentation"),
            ("device_memory_used", "device_used",
             "bytes in use on the device as NVML saw them after the steps: the CUDA context, "
             "NCCL's buffers and any other process included")):
        per_rank = [r.memory.get(key) for r in context.ranks]
        known = [v for v in per_rank if v is not None]
        if known:
            found.append(measured(name, float(max(known)),
                                  extra={"per_rank": per_rank, "kind": what}))
    return found

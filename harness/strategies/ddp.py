"""DistributedDataParallel: gradients allreduced in buckets, overlapped with the backward pass."""
from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

from harness.core.spec import RunSpec


def wrap_data_parallel(model: nn.Module, spec: RunSpec, device: torch.device) -> nn.Module:
    """DistributedDataParallel with the spec's bucket size and gradient compression.

    Parameters start identical on every rank (same seed), and are broadcast from rank 0
    explicitly so that backends without DDP's init-time sync (the Python MPI group) agree too.
    """
    for tensor in list(model.parameters()) + list(model.buffers()):
        dist.broadcast(tensor.data, src=0)
    ddp = nn.parallel.DistributedDataParallel(
        model, device_ids=[device.index] if device.type == "cuda" else None,
        bucket_cap_mb=spec.bucket_mb, gradient_as_bucket_view=True, init_sync=False)
    from harness.strategies.compression import register_compression

    register_compression(ddp, spec)
    return ddp

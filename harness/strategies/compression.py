"""Gradient compression through DDP communication hooks (ddp's `compression` option).

fp16/bf16 cast each bucket before the allreduce; PowerSGD sends low-rank factors P and Q of
each matrix-shaped gradient (uncompressed where that would not be smaller: 1-D gradients,
and matrices below torch's min_compression_rate). The bytes on the wire are not estimated
here: the counting process group (meter.py) sees the compressed tensors the hooks send.
"""
from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook

from harness.spec.specs import COMPRESSIONS

__all__ = ["COMPRESSIONS", "register_compression"]

POWERSGD_RANK = 1
POWERSGD_START_ITER = 2


def bf16_cast_hook(process_group, bucket):  # type: ignore[no-untyped-def]
    # (no annotations: DDP rejects a hook whose `bucket` annotation is not dist.GradBucket
    # itself, and this module's annotations are strings)
    """torch's bf16 compression (its `_compress_hook` with bfloat16) under another name:
    DDP refuses `bf16_compress_hook` by name unless NCCL >= 2.10 or XCCL is present, while
    gloo and dtbench's MPI group reduce bfloat16 tensors (the MPI group in float32)."""
    return default_hooks._compress_hook(torch.bfloat16, process_group, bucket)


def register_compression(ddp: nn.parallel.DistributedDataParallel, compression: str) -> None:
    """Install the hook for `compression` ("none" keeps DDP's own allreduce)."""
    if compression == "none":
        return
    state: Any = None
    if compression == "powersgd":
        state = powerSGD_hook.PowerSGDState(
            process_group=None, matrix_approximation_rank=POWERSGD_RANK,
            start_powerSGD_iter=POWERSGD_START_ITER, use_error_feedback=True, warm_start=True)
        hook: Any = powerSGD_hook.powerSGD_hook
    else:
        hook = {"fp16": default_hooks.fp16_compress_hook,
                "bf16": bf16_cast_hook}[compression]
    ddp.register_comm_hook(state, hook)

"""Gradient compression through DDP communication hooks (ddp's `compression` option).

fp16/bf16 cast each bucket before the allreduce; PowerSGD sends low-rank factors P and Q of
each matrix-shaped gradient (uncompressed where that would not be smaller: 1-D gradients,
and matrices below torch's min_compression_rate). The bytes on the wire are not estimated
here: the counting process group (meter.py) sees the compressed tensors the hooks send.
"""
from __future__ import annotations

from typing import Any

from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook

from harness.core.spec import COMPRESSIONS

__all__ = ["COMPRESSIONS", "register_compression"]

POWERSGD_RANK = 1
POWERSGD_START_ITER = 2


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
                "bf16": default_hooks.bf16_compress_hook}[compression]
    ddp.register_comm_hook(state, hook)

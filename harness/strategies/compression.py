"""Gradient compression through DDP communication hooks, with the bytes each rank sends.

fp16/bf16 cast each bucket before the allreduce; PowerSGD sends low-rank factors P and Q
of each matrix-shaped gradient. The hook wrapper counts the payload every bucket puts on
the wire; with a ring allreduce each rank sends 2(n-1)/n of that payload.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook

from harness.core.spec import RunSpec

POWERSGD_RANK = 1
POWERSGD_START_ITER = 2


@dataclass
class CommCounter:
    """Payload bytes allreduced per step, filled in by the counting hook."""

    world_size: int
    payload_bytes: list[int] = field(default_factory=list)
    _current: int = 0

    def add(self, count: int) -> None:
        self._current += count

    def end_step(self) -> None:
        self.payload_bytes.append(self._current)
        self._current = 0

    def sent_per_rank(self, payload: int) -> float:
        n = self.world_size
        return payload * 2 * (n - 1) / n


def _powersgd_payload(bucket: Any, state: Any) -> int:
    if state.iter < state.start_powerSGD_iter:
        return bucket.buffer().numel() * 4
    total = 0
    rank = state.matrix_approximation_rank
    for grad in bucket.gradients():
        if grad.ndim > 1:
            rows, cols = grad.shape[0], grad.numel() // grad.shape[0]
            if (rows + cols) * rank < rows * cols:
                total += (rows + cols) * rank * 4
                continue
        total += grad.numel() * 4
    return total


def register_compression(ddp: nn.parallel.DistributedDataParallel, spec: RunSpec) -> CommCounter:
    """Install the spec's hook (plain allreduce for "none") behind a byte-counting wrapper."""
    counter = CommCounter(world_size=dist.get_world_size())
    state: Any = None
    if spec.compression == "powersgd":
        state = powerSGD_hook.PowerSGDState(
            process_group=None, matrix_approximation_rank=POWERSGD_RANK,
            start_powerSGD_iter=POWERSGD_START_ITER, use_error_feedback=True, warm_start=True)
        inner: Any = powerSGD_hook.powerSGD_hook
    else:
        inner = {"none": default_hooks.allreduce_hook, "fp16": default_hooks.fp16_compress_hook,
                 "bf16": default_hooks.bf16_compress_hook}[spec.compression]

    def counting_hook(hook_state: Any, bucket: Any) -> torch.futures.Future[torch.Tensor]:
        if spec.compression == "powersgd":
            counter.add(_powersgd_payload(bucket, state))
        elif spec.compression in ("fp16", "bf16"):
            counter.add(bucket.buffer().numel() * 2)
        else:
            counter.add(bucket.buffer().numel() * bucket.buffer().element_size())
        return inner(hook_state, bucket)

    # DDP inspects the hook's annotations as objects; this module's are postponed strings.
    counting_hook.__annotations__ = {"hook_state": Any, "bucket": dist.GradBucket,
                                     "return": torch.futures.Future[torch.Tensor]}
    ddp.register_comm_hook(state, counting_hook)
    ddp.dtbench_comm_counter = counter  # type: ignore[attr-defined]
    return counter

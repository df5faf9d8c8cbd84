"""FLOPs per sample, counted once outside any timed region.

Counting runs the model on the meta device: no memory, no arithmetic, and fused CPU kernels
(the oneDNN LSTM) decompose into the matrix products `torch.utils.flop_counter` can see.
"""
from __future__ import annotations

from functools import lru_cache
from typing import Protocol

import torch
from torch.utils.flop_counter import FlopCounterMode


class Countable(Protocol):
    """What counting needs of a workload (workloads.base.Countable has it): its model, a batch
    of its input shape, its loss. Declared here so that counting does not import the
    workload base class, which imports counting for `describe`."""

    def build_model(self, size: str) -> torch.nn.Module: ...

    def synthetic_batch(self, size: str, batch: int, device: torch.device | str,
                        generator: torch.Generator | None = None,
                        ) -> tuple[torch.Tensor, torch.Tensor]: ...

    def loss(self, output: torch.Tensor, targets: torch.Tensor) -> torch.Tensor: ...


def _meta_model(workload: Countable, size: str) -> torch.nn.Module:
    with torch.device("meta"):
        return workload.build_model(size)


def count_parameters(workload: Countable, size: str) -> int:
    return sum(p.numel() for p in _meta_model(workload, size).parameters())


@lru_cache(maxsize=64)
def _flops(workload_class: type[Countable], size: str) -> int:
    workload = workload_class()
    model = _meta_model(workload, size)
    model.train()
    inputs, targets = workload.synthetic_batch(size, 2, "meta")
    counter = FlopCounterMode(display=False)
    with counter:
        loss = workload.loss(model(inputs), targets)
        loss.backward()
    return int(counter.get_total_flops()) // 2


def count_flops_per_sample(workload: Countable, size: str) -> int:
    """Forward+backward FLOPs of one sample, 2 per multiply-add, as flop_counter counts them."""
    return _flops(type(workload), size)

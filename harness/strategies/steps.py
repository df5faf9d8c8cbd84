"""The step shared by the synchronous data-parallel strategies, timed by phase."""
from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from harness.strategies.base import backward, optimizer_step

if TYPE_CHECKING:
    from harness.strategies.base import Strategy


def data_parallel_step(strategy: Strategy, inputs: torch.Tensor, targets: torch.Tensor,
                       exchange: Callable[[], Any] | None = None,
                       optimizer_kind: str | None = None,
                       after_step: Callable[[], Any] | None = None) -> torch.Tensor:
    """zero_grad, forward, backward (gradient exchange overlapped inside, where the engine
    does that), an explicit `exchange` after it, then the (clipped) optimizer step; the
    optimizer's own traffic (ZeRO's parameter broadcast) is filed under `optimizer_kind`;
    `after_step` exchanges parameters after the update (local SGD's averaging)."""
    recipe, clock, model = strategy.recipe, strategy.clock, strategy.model
    assert model is not None
    strategy.optimizer.zero_grad(set_to_none=True)
    with clock.phase("forward"), recipe.autocast():
        loss = recipe.loss(model(inputs), targets)
    with clock.phase("backward"):
        backward(loss, recipe.scaler)
    if exchange is not None:
        with clock.phase("exchange"):
            exchange()
    kind = (strategy.meter.kind(optimizer_kind) if strategy.meter is not None and optimizer_kind
            else contextlib.nullcontext())
    with clock.phase("optimizer"), kind:
        optimizer_step(strategy.optimizer, recipe.scaler, model, recipe.grad_clip)
    if after_step is not None:
        with clock.phase("exchange"):
            after_step()
    clock.end_step()
    return loss.detach()

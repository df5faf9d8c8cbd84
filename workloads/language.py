"""Shared pieces of the token language models (lstm, gpt): windows of random token ids for
throughput runs, cross-entropy per target token, and evaluation by the mean loss per token
with its perplexity."""
from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from workloads.base import Dataset, Workload


@torch.no_grad()
def mean_token_loss(model: nn.Module, data: Dataset, batch: int, device: torch.device,
                    autocast: Callable[[], Any]) -> float:
    """A language model's mean cross-entropy per target token over `data` (eval mode, then
    back to the mode it was in)."""
    was_training = model.training
    model.eval()
    total_loss, tokens = 0.0, 0
    try:
        for inputs, targets in data.batches(batch, drop_last=False):
            inputs, targets = inputs.to(device), targets.to(device)
            with autocast():
                logits = model(inputs).float()
            total_loss += float(F.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                                targets.reshape(-1), reduction="sum"))
            tokens += targets.numel()
    finally:
        model.train(was_training)
    return total_loss / max(tokens, 1)


class TokenLanguageModel(Workload):
    """Next-token prediction over windows of `input_shape[0]` token ids from a vocabulary of
    `num_classes`; quality is the validation loss per token (nats) and its perplexity."""

    image_model = False

    def synthetic_batch(self, size: str, batch: int, device: torch.device | str,
                        generator: torch.Generator | None = None,
                        ) -> tuple[torch.Tensor, torch.Tensor]:
        """Windows of uniformly random ids; a sample's targets are its inputs shifted by one."""
        preset = self.preset(size)
        shape = (batch, *preset.input_shape)
        if str(device) == "meta":
            return (torch.empty(shape, dtype=torch.long, device="meta"),
                    torch.empty(shape, dtype=torch.long, device="meta"))
        tokens = torch.randint(0, preset.num_classes, (batch, shape[1] + 1), generator=generator)
        return tokens[:, :-1].contiguous().to(device), tokens[:, 1:].contiguous().to(device)

    def loss(self, output: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(output.float().reshape(-1, output.shape[-1]), targets.reshape(-1))

    @torch.no_grad()
    def evaluate(self, model: nn.Module, data: Dataset, batch: int, device: torch.device,
                 autocast: Callable[[], Any]) -> dict[str, float]:
        mean = mean_token_loss(model, data, batch, device, autocast)
        return {"eval_loss": mean, "perplexity": math.exp(min(mean, 700.0))}

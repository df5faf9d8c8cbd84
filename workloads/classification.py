"""Shared pieces of the image-classification workloads (cross-entropy, accuracy, AUC)."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from workloads.base import Dataset, Workload


def roc_auc(scores: torch.Tensor, labels: torch.Tensor) -> float:
    """Area under the ROC curve via the rank-sum (Mann-Whitney U) identity, ties averaged."""
    scores = scores.double().flatten()
    labels = labels.flatten().bool()
    positives, negatives = int(labels.sum()), int((~labels).sum())
    if positives == 0 or negatives == 0:
        return float("nan")
    order = torch.argsort(scores)
    sorted_scores = scores[order]
    ranks = torch.empty_like(scores)
    ranks[order] = torch.arange(1, len(scores) + 1, dtype=torch.float64)
    unique, inverse, counts = torch.unique_consecutive(sorted_scores, return_inverse=True,
                                                       return_counts=True)
    if len(unique) < len(scores):
        ends = torch.cumsum(counts, 0).double()
        mean_rank = ends - (counts.double() - 1) / 2
        ranks[order] = mean_rank[inverse]
    rank_sum = float(ranks[labels].sum())
    return (rank_sum - positives * (positives + 1) / 2) / (positives * negatives)


class ImageClassification(Workload):
    """Cross-entropy classification of NCHW images; quality is top-1 accuracy (and AUC for 2)."""

    def synthetic_batch(self, size: str, batch: int, device: torch.device | str,
                        generator: torch.Generator | None = None,
                        ) -> tuple[torch.Tensor, torch.Tensor]:
        preset = self.preset(size)
        if str(device) == "meta":
            return (torch.empty((batch, *preset.input_shape), device="meta"),
                    torch.empty((batch,), dtype=torch.long, device="meta"))
        inputs = torch.randn((batch, *preset.input_shape), generator=generator)
        targets = torch.randint(0, preset.num_classes, (batch,), generator=generator)
        return inputs.to(device), targets.to(device)

    def loss(self, output: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(output.float(), targets)

    def datasets(self, size: str, data_path: str | None, seed: int) -> tuple[Dataset, Dataset]:
        """The user's --data arrays, else scikit-learn's digits at the preset's image size."""
        from workloads.data import digits_images, load_image_arrays

        preset = self.preset(size)
        if data_path:
            return load_image_arrays(data_path, preset.input_shape[-1], 3, preset.num_classes)
        return digits_images(preset.input_shape[-1], 3, seed)

    @torch.no_grad()
    def evaluate(self, model: nn.Module, data: Dataset, batch: int, device: torch.device,
                 autocast: Callable[[], Any]) -> dict[str, float]:
        was_training = model.training
        model.eval()
        correct, total, losses = 0, 0, 0.0
        scores, labels = [], []
        try:
            for inputs, targets in data.batches(batch, drop_last=False):
                inputs, targets = inputs.to(device), targets.to(device)
                with autocast():
                    logits = model(inputs).float()
                losses += float(F.cross_entropy(logits, targets, reduction="sum"))
                correct += int((logits.argmax(1) == targets).sum())
                total += len(targets)
                if logits.shape[1] == 2:
                    scores.append(torch.softmax(logits, 1)[:, 1].cpu())
                    labels.append(targets.cpu())
        finally:
            model.train(was_training)
        quality = {"accuracy": correct / max(total, 1), "eval_loss": losses / max(total, 1)}
        if scores:
            quality["auc"] = roc_auc(torch.cat(scores), torch.cat(labels))
        return quality

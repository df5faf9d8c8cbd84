"""Word-level LSTM language model (Zaremba et al. 2014 'medium' at full size)."""
from __future__ import annotations

from typing import Any

import torch
from torch import nn

from workloads.base import WORKLOADS, Dataset, Preset, QualityTarget
from workloads.language import TokenLanguageModel
from workloads.lstm.model import LSTMLanguageModel

SEQ_LEN = 35
PRESETS = {
    "tiny": Preset(
        model_kwargs={"vocab_size": 1000, "embedding": 32, "hidden": 32, "dropout": 0.0},
        input_shape=(SEQ_LEN,), num_classes=1000, batch_size={"cpu": 16, "cuda": 64},
        steps=5, warmup=1, lr=1.0,
        target=QualityTarget("perplexity", 300.0, False, max_epochs=5),
        data="Python's pydoc topics text, 1,000-word vocabulary", notes="32 hidden units",
        extra={"grad_clip": 5.0}),
    "small": Preset(
        model_kwargs={"vocab_size": 10_000, "embedding": 200, "hidden": 200, "dropout": 0.0},
        input_shape=(SEQ_LEN,), num_classes=10_000, batch_size={"cpu": 20, "cuda": 128},
        steps=15, warmup=3, lr=1.0,
        target=QualityTarget("perplexity", 350.0, False, max_epochs=10),
        data="Python's pydoc topics text, 10,000-word vocabulary",
        notes="Zaremba et al. 'small': 200 hidden units; the built-in text has ~87k training "
        "tokens, so eval perplexity plateaus near 300", extra={"grad_clip": 5.0}),
    "full": Preset(
        model_kwargs={"vocab_size": 10_000}, input_shape=(SEQ_LEN,), num_classes=10_000,
        batch_size={"cpu": 20, "cuda": 128}, steps=15, warmup=3, lr=1.0,
        target=QualityTarget("perplexity", 350.0, False, max_epochs=20),
        data="Python's pydoc topics text, 10,000-word vocabulary, or --data (plain text)",
        notes="Zaremba et al. 'medium': 650 hidden units, dropout 0.5", extra={"grad_clip": 5.0}),
}


@WORKLOADS.register("lstm")
class LSTMWorkload(TokenLanguageModel):
    """Next-word prediction over 35-token sequences; quality is perplexity (lower is better)."""

    name = "lstm"
    summary = "2-layer LSTM language model, 650 hidden, vocabulary 10,000, 35 tokens"
    presets = PRESETS

    def build_model(self, size: str) -> nn.Module:
        return LSTMLanguageModel(**self.preset(size).model_kwargs)

    def optimizer_spec(self, size: str) -> tuple[type[torch.optim.Optimizer], dict[str, Any]]:
        return torch.optim.SGD, {"lr": self.preset(size).lr}

    def datasets(self, size: str, data_path: str | None, seed: int) -> tuple[Dataset, Dataset]:
        from workloads.data import text_datasets

        preset = self.preset(size)
        train, evaluation, _ = text_datasets(preset.num_classes, SEQ_LEN, data_path)
        return train, evaluation

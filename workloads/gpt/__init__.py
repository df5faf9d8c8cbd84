"""GPT-2-style transformer language model (GPT-2 small, 124M parameters, at full size)."""
from __future__ import annotations

from typing import Any

import torch
from torch import nn

from workloads.base import WORKLOADS, Dataset, Preset, QualityTarget
from workloads.gpt.model import GPT
from workloads.language import TokenLanguageModel


def _preset(vocab: int, context: int, layers: int, width: int, heads: int, **rest: Any
            ) -> Preset:
    return Preset(model_kwargs={"vocab_size": vocab, "context": context, "layers": layers,
                                "width": width, "heads": heads},
                  input_shape=(context,), num_classes=vocab, **rest)


PRESETS = {
    # Width 128 at 32 positions keeps what 6N counts without matrix products (the position
    # table, biases, LayerNorms) under 2% of it, as at the larger sizes; the first 40,000
    # bytes of the training text (8,000 held out) make an epoch a few seconds.
    "tiny": _preset(
        256, 32, 2, 128, 4, batch_size={"cpu": 16, "cuda": 64}, steps=5, warmup=1, lr=3e-3,
        target=QualityTarget("eval_loss", 3.0, False, max_epochs=6),
        data="Python's pydoc topics text as UTF-8 bytes (vocabulary 256): the first 40,000 "
        "training bytes, 8,000 held out",
        notes="2 layers, width 128, 4 heads, 32 positions; a byte-level model",
        extra={"train_tokens": 40_000, "eval_tokens": 8_000}),
    # One process, 2 threads, batch 8 (2026-11-27): validation loss 6.60, 6.36, 5.98, 5.81
    # after epochs 1-4 (44 steps each; a unigram model of the tokens scores 6.57).
    "small": _preset(
        4096, 256, 6, 384, 6, batch_size={"cpu": 8, "cuda": 64}, steps=10, warmup=2, lr=1e-3,
        target=QualityTarget("eval_loss", 5.9, False, max_epochs=8),
        data="Python's pydoc topics text, byte-level BPE of 4,096 tokens trained here",
        notes="6 layers, width 384, 6 heads, 256 positions"),
    "full": _preset(
        50_257, 1024, 12, 768, 12, batch_size={"cpu": 4, "cuda": 16}, steps=10, warmup=2,
        lr=6e-4, target=QualityTarget("eval_loss", 5.9, False, max_epochs=10),
        data="Python's pydoc topics text (byte-level BPE trained here; the text has fewer "
        "merges than the 50,257-token vocabulary), or --data (UTF-8 text or a tokens file)",
        notes="GPT-2 small: 12 layers, width 768, 12 heads, 1,024 positions, vocabulary "
        "50,257, tied output projection: 124,439,808 parameters; its target is small's, not "
        "yet run to on any machine"),
}


@WORKLOADS.register("gpt")
class GPTWorkload(TokenLanguageModel):
    """Next-token prediction over T-token windows; quality is the validation loss (nats per
    token, lower is better), with its perplexity beside it."""

    name = "gpt"
    summary = "GPT-2-style decoder-only transformer, 12 layers, width 768, 1,024 tokens"
    presets = PRESETS
    # The position table stays whole under tensor parallelism (Megatron splits the
    # vocabulary only): splitting it would all-reduce every sample's positions.
    tensor_parallel_replicated = ("embed.wpe",)

    def build_model(self, size: str) -> nn.Module:
        return GPT(**self.preset(size).model_kwargs)

    def heads(self, size: str) -> int:
        return int(self.preset(size).model_kwargs["heads"])

    def tensor_parallel_refusal(self, size: str, tp: int) -> str | None:
        heads = self.heads(size)
        return None if heads % tp == 0 else (
            f"gpt {size} has {heads} attention heads, which {tp} tensor-parallel ranks do "
            "not divide (each rank holds whole heads)")

    def optimizer_spec(self, size: str) -> tuple[type[torch.optim.Optimizer], dict[str, Any]]:
        """AdamW as GPT-2 reproductions train it (betas 0.9/0.95, weight decay 0.1), at a
        constant rate."""
        return torch.optim.AdamW, {"lr": self.preset(size).lr, "betas": (0.9, 0.95),
                                   "weight_decay": 0.1}

    def datasets(self, size: str, data_path: str | None, seed: int) -> tuple[Dataset, Dataset]:
        from workloads.gpt.text import token_datasets

        preset = self.preset(size)
        return token_datasets(preset.num_classes, preset.input_shape[0], data_path,
                              preset.extra.get("train_tokens"), preset.extra.get("eval_tokens"))

    def token_ids(self, size: str) -> Any:
        """The built-in text as this size's token ids (`dtbench data make --format tokens`)."""
        from workloads.gpt.text import token_ids

        return token_ids(self.preset(size).num_classes)

    def run_settings(self, size: str, device: torch.device, precision: str) -> dict[str, Any]:
        from workloads.gpt.flops import attention_backend

        kwargs = self.preset(size).model_kwargs
        return {"attention_backend": attention_backend(
            device, precision, kwargs["heads"], kwargs["width"] // kwargs["heads"],
            kwargs["context"])}

    def facts(self, size: str) -> dict[str, Any]:
        """What describe adds for a transformer: FLOPs per token as counted and as PaLM's
        formula gives them, and the attention backend SDPA picks here."""
        from workloads.flops import count_flops_per_sample, count_parameters
        from workloads.gpt.flops import palm_flops_per_token

        kwargs = self.preset(size).model_kwargs
        context = int(kwargs["context"])
        counted = count_flops_per_sample(self, size) / context
        formula = palm_flops_per_token(count_parameters(self, size), kwargs["layers"],
                                       kwargs["width"], context)
        return {"tokens_per_sample": context, "flops_per_token": counted,
                "palm_flops_per_token": formula, "counted_over_palm": counted / formula,
                "vocabulary": kwargs["vocab_size"], "layers": kwargs["layers"],
                "width": kwargs["width"], "heads": kwargs["heads"]}

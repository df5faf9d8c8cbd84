"""A GPT-2-style decoder-only transformer (Radford et al. 2019): token and learned position
embeddings, pre-LayerNorm blocks of causal self-attention and a GELU MLP of 4x width, a final
LayerNorm and an output projection tied to the token embedding.

The attention's input projection is one Linear of 3·d outputs laid out head by head (each
head's query, key and value features side by side), not GPT-2's [q | k | v]: the parameters
are the same, and a column split of the projection (tensor parallelism) then holds whole heads.
The softmax attention itself is `CausalAttention`, a layer without parameters, so the layer
table (workloads/layers.py) counts its FLOPs where they happen.
"""
from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

INIT_STD = 0.02  # GPT-2's initialisation


class CausalAttention(nn.Module):
    """softmax(QK^T/sqrt(d_h)) V over earlier positions, by scaled_dot_product_attention: the
    (batch, T, H·3·d_h) projections in, (batch, T, H·d_h) out. The head count is read off the
    input's width, so a tensor-parallel rank runs its own heads unchanged."""

    counted_layer = True  # a layer of its own in the layer table, though it holds nothing

    def __init__(self, head_dim: int) -> None:
        super().__init__()
        self.head_dim = head_dim

    def forward(self, qkv: torch.Tensor) -> torch.Tensor:
        # Indexing rather than unpacking: torch.fx traces through this (the pipeline's cut).
        batch, positions = qkv.shape[0], qkv.shape[1]
        heads = qkv.view(batch, positions, -1, 3, self.head_dim).permute(3, 0, 2, 1, 4)
        out = F.scaled_dot_product_attention(heads[0], heads[1], heads[2], is_causal=True)
        return out.transpose(1, 2).reshape(batch, positions, -1)


class SelfAttention(nn.Module):
    """Multi-head causal self-attention: projection to q, k, v, attention, output projection."""

    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        if width % heads:
            raise ValueError(f"width {width} is not a multiple of {heads} heads")
        self.c_attn = nn.Linear(width, 3 * width)
        self.attention = CausalAttention(width // heads)
        self.c_proj = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c_proj(self.attention(self.c_attn(x)))


class MLP(nn.Module):
    """Two Linear layers, 4x the width between them, GELU (GPT-2's tanh approximation)."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.c_fc = nn.Linear(width, 4 * width)
        self.gelu = nn.GELU(approximate="tanh")
        self.c_proj = nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c_proj(self.gelu(self.c_fc(x)))


class Block(nn.Module):
    """x + attention(LN(x)), then x + MLP(LN(x)): pre-LayerNorm residual blocks."""

    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(width)
        self.attn = SelfAttention(width, heads)
        self.ln_2 = nn.LayerNorm(width)
        self.mlp = MLP(width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class Embeddings(nn.Module):
    """Token plus learned position embeddings: one unit, so that no pipeline cut falls between
    the tokens and their positions."""

    def __init__(self, vocab_size: int, width: int, context: int) -> None:
        super().__init__()
        self.wte = nn.Embedding(vocab_size, width)
        self.wpe = nn.Embedding(context, width)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        # Positions per sample (not broadcast), so that the layer table's per-sample counts
        # hold for the position embedding too.
        positions = torch.arange(tokens.shape[1], device=tokens.device).expand_as(tokens)
        return self.wte(tokens) + self.wpe(positions)


class GPT(nn.Module):
    """Embeddings, `layers` blocks in an nn.Sequential (the units FSDP shards and pipelines
    cut between), a final LayerNorm and the tied output projection to the vocabulary."""

    def __init__(self, vocab_size: int = 50_257, context: int = 1024, layers: int = 12,
                 width: int = 768, heads: int = 12) -> None:
        super().__init__()
        self.context = context
        self.embed = Embeddings(vocab_size, width, context)
        self.blocks = nn.Sequential(*(Block(width, heads) for _ in range(layers)))
        self.ln_f = nn.LayerNorm(width)
        self.lm_head = nn.Linear(width, vocab_size, bias=False)
        self.lm_head.weight = self.embed.wte.weight
        self._initialise(layers)

    def _initialise(self, layers: int) -> None:
        for name, module in self.named_modules():
            if isinstance(module, (nn.Linear, nn.Embedding)) and module is not self.lm_head:
                # GPT-2 scales the projections into the residual stream by 1/sqrt(2L).
                scale = 1 / math.sqrt(2 * layers) if name.endswith("c_proj") else 1.0
                nn.init.normal_(module.weight, mean=0.0, std=INIT_STD * scale)
                if getattr(module, "bias", None) is not None:
                    nn.init.zeros_(module.bias)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """Next-token logits, (batch, T, vocabulary), for tokens of shape (batch, T)."""
        return self.lm_head(self.ln_f(self.blocks(self.embed(tokens))))

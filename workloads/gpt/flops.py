"""What is known of a transformer without running it: training FLOPs per token by PaLM's
formula, and the attention kernel scaled_dot_product_attention picks for a run."""
from __future__ import annotations

import torch

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def palm_flops_per_token(parameters: int, layers: int, width: int, context: int) -> float:
    """6N + 12·L·d·T (Chowdhery et al. 2022, appendix B, with H·Q = d): the matrix products
    of a training step per token, attention's counted over the full T x T."""
    return 6.0 * parameters + 12.0 * layers * width * context


def attention_backend(device: torch.device, precision: str, heads: int, head_dim: int,
                      context: int) -> str:
    """The kernel SDPA dispatches a causal attention of this shape to on `device` in
    `precision` (autocast computes attention in bf16/fp16): math, flash_attention,
    efficient_attention, cudnn_attention, overrideable; `error` where none fits."""
    from torch.nn.attention import SDPBackend

    dtype = DTYPES.get(precision, torch.float32)
    probe = torch.empty((1, heads, context, head_dim), dtype=dtype, device=device)
    choice = torch._fused_sdp_choice(probe, probe, probe, is_causal=True)
    return SDPBackend(choice).name.lower()

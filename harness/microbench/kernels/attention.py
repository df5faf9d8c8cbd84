"""Causal attention, forward and backward, by each backend of
torch.nn.functional.scaled_dot_product_attention (chosen with torch.nn.attention.sdpa_kernel):
math (the matrix products and softmax as separate operations), flash attention (on the CPU
too), memory-efficient attention and cuDNN's (CUDA only). A backend that cannot run a shape,
precision or device says why and is skipped; the others are checked against the math backend
in fp32: the output forward, the gradients of q, k and v backward."""
from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import torch
from torch.nn import functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from harness.core.errors import describe_exception
from harness.microbench.kernels.family import (
    DTYPES,
    FAMILIES,
    KernelFamily,
    Operands,
    random_tensor,
)
from harness.microbench.kernels.shapes import AttentionShape, Shape

BACKENDS = {"math": SDPBackend.MATH, "flash_attention": SDPBackend.FLASH_ATTENTION,
            "efficient_attention": SDPBackend.EFFICIENT_ATTENTION,
            "cudnn_attention": SDPBackend.CUDNN_ATTENTION}
INPUTS = ("q", "k", "v")


def _attend(algorithm: str, o: Operands) -> torch.Tensor:
    with sdpa_kernel([BACKENDS[algorithm]]):
        return F.scaled_dot_product_attention(o["q"], o["k"], o["v"], is_causal=True)


@FAMILIES.register("attention")
class AttentionFamily(KernelFamily):
    """Causal SDPA (forward, backward) by each of its backends."""

    name = "attention"
    algorithms = tuple(BACKENDS)

    def applies(self, algorithm: str, shape: Shape, pass_: str, precision: str,
                device: torch.device) -> str | None:
        """Whether the backend takes this head size, precision and device: SDPA refuses a
        backend it cannot run (a small call on the device asks it)."""
        assert isinstance(shape, AttentionShape)
        probe = torch.zeros((1, 1, 8, shape.head_dim), dtype=DTYPES[precision], device=device,
                            requires_grad=pass_ != "fwd")
        try:
            with warnings.catch_warnings():  # SDPA warns why a backend declines, then raises
                warnings.simplefilter("ignore")
                _attend(algorithm, {"q": probe, "k": probe, "v": probe})
        except RuntimeError as exc:
            return f"{algorithm} does not run here: {describe_exception(exc)[:200]}"
        return None

    def operands(self, shape: Shape, pass_: str, precision: str, device: torch.device,
                 generator: torch.Generator) -> Operands:
        assert isinstance(shape, AttentionShape)
        size = (shape.batch, shape.heads, shape.positions, shape.head_dim)
        names = INPUTS if pass_ == "fwd" else (*INPUTS, "grad")
        return {name: random_tensor(size, precision, device, generator) for name in names}

    def reference(self, operands: Operands, shape: Shape, pass_: str) -> Any:
        fp32 = {name: tensor.float() for name, tensor in operands.items()}
        return self.build("math", fp32, shape, pass_)()

    def build(self, algorithm: str, operands: Operands, shape: Shape,
              pass_: str) -> Callable[[], Any]:
        if pass_ == "fwd":
            return lambda: _attend(algorithm, operands)
        # The backward pass alone: the forward graph is built once and kept (retain_graph);
        # the backend chosen forward runs its own backward.
        leaves = {name: operands[name].detach().requires_grad_() for name in INPUTS}
        output = _attend(algorithm, leaves)
        inputs = tuple(leaves[name] for name in INPUTS)
        return lambda: torch.autograd.grad(output, inputs, operands["grad"], retain_graph=True)

"""GEMM through torch.mm with DeepBench's transposes: a transposed operand is stored
transposed and passed as a transposed view, so the BLAS call gets the transpose flag instead
of a copy (torch.mm on the CPU: MKL's sgemm for fp32)."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from harness.microbench.kernels.family import FAMILIES, KernelFamily, Operands, random_tensor
from harness.microbench.kernels.shapes import GemmShape, Shape


@FAMILIES.register("gemm")
class GemmFamily(KernelFamily):
    """C = op(A) op(B) with torch.mm."""

    name = "gemm"
    algorithms = ("torch.mm",)

    def operands(self, shape: Shape, pass_: str, precision: str, device: torch.device,
                 generator: torch.Generator) -> Operands:
        assert isinstance(shape, GemmShape)
        a = random_tensor((shape.k, shape.m) if shape.trans_a else (shape.m, shape.k), precision,
                          device, generator)
        b = random_tensor((shape.n, shape.k) if shape.trans_b else (shape.k, shape.n), precision,
                          device, generator)
        return {"a": a.t() if shape.trans_a else a, "b": b.t() if shape.trans_b else b}

    def build(self, algorithm: str, operands: Operands, shape: Shape,
              pass_: str) -> Callable[[], Any]:
        a, b = operands["a"], operands["b"]
        return lambda: torch.mm(a, b)

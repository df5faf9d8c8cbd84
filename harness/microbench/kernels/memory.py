"""Memory bandwidth, the second roof: STREAM's copy (a = b) and triad (a = b + s * c) over
arrays far larger than the last-level cache (in the sets that publish figures)."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from harness.microbench.kernels.family import DTYPES, FAMILIES, KernelFamily, Operands
from harness.microbench.kernels.shapes import MemoryShape, Shape

TRIAD_SCALAR = 3.0


@FAMILIES.register("memory")
class MemoryFamily(KernelFamily):
    """copy and triad over arrays of the shape's size."""

    name = "memory"
    algorithms = ("copy", "triad")

    def operands(self, shape: Shape, pass_: str, precision: str, device: torch.device,
                 generator: torch.Generator) -> Operands:
        assert isinstance(shape, MemoryShape)
        dtype = DTYPES[precision]
        elements = shape.array_bytes // torch.empty((), dtype=dtype).element_size()
        return {name: torch.full((elements,), value, dtype=dtype, device=device)
                for name, value in (("a", 0.0), ("b", 1.0), ("c", 2.0))}

    def build(self, algorithm: str, operands: Operands, shape: Shape,
              pass_: str) -> Callable[[], Any]:
        a, b, c = operands["a"], operands["b"], operands["c"]
        if algorithm == "copy":
            return lambda: a.copy_(b)
        return lambda: torch.add(b, c, alpha=TRIAD_SCALAR, out=a)

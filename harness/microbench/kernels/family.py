"""What every kernel family (conv, gemm, lstm, memory) provides to the runner: its
algorithms, whether one applies to a shape and pass, the operands, a reference result and the
call to time. One module per family registers itself in FAMILIES."""
from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, ClassVar

import torch

from harness.core.registry import Registry
from harness.microbench.kernels.shapes import Shape

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
Operands = dict[str, torch.Tensor]


def random_tensor(shape: tuple[int, ...], precision: str, device: torch.device,
                  generator: torch.Generator) -> torch.Tensor:
    """Standard normal values drawn in fp32 on the CPU (the same numbers on any device), then
    rounded to the precision."""
    return torch.randn(shape, generator=generator).to(device=device, dtype=DTYPES[precision])


def max_rel_error(result: Any, reference: Any) -> float:
    """max |result - reference| / max |reference| over all elements (of every tensor, where
    both are tuples): a norm-wise relative error that does not blow up near zeros."""
    if isinstance(reference, (tuple, list)):
        result = torch.cat([t.detach().float().reshape(-1) for t in result])
        reference = torch.cat([t.detach().float().reshape(-1) for t in reference])
    scale = float(reference.abs().max())
    difference = float((result.detach().float() - reference.float()).abs().max())
    return difference / scale if scale > 0 else difference


class KernelFamily(ABC):
    """One family of kernels; an algorithm that does not fit a shape says why, it never
    fails the set."""

    name: ClassVar[str]
    algorithms: ClassVar[tuple[str, ...]]

    def applies(self, algorithm: str, shape: Shape, pass_: str, precision: str,
                device: torch.device) -> str | None:
        """None when `algorithm` can run this shape and pass, else a one-line reason."""
        return None

    @abstractmethod
    def operands(self, shape: Shape, pass_: str, precision: str, device: torch.device,
                 generator: torch.Generator) -> Operands:
        """The inputs of one pass, made once and shared by every algorithm."""

    def reference(self, operands: Operands, shape: Shape, pass_: str) -> Any:
        """The result every algorithm is checked against (fp32), or None where there is no
        second algorithm to check."""
        return None

    @abstractmethod
    def build(self, algorithm: str, operands: Operands, shape: Shape,
              pass_: str) -> Callable[[], Any]:
        """The call to time; it returns the pass's result."""

    def details(self, algorithm: str, operands: Operands, shape: Shape,
                pass_: str) -> dict[str, Any]:
        """What the record should say about the implementation (the library path torch took)."""
        return {}


FAMILIES: Registry[type[KernelFamily]] = Registry("kernel family")

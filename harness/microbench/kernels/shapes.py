"""The shapes a kernel benchmark runs on: frozen, hashable, with a label a reader knows."""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from harness.core.text import size_label

CONV_PASSES = ("fwd", "bwd_data", "bwd_weights")


def _pair(values: tuple[int, int]) -> str:
    return str(values[0]) if values[0] == values[1] else f"{values[0]}x{values[1]}"


class _Fields:
    """A shape's fields as the record's spec holds them (JSON types)."""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)  # type: ignore[call-overload]


@dataclass(frozen=True)
class ConvShape(_Fields):
    """A 2-D convolution, groups 1, no dilation: input n x c x h x w, k filters of r x s
    (height x width), stride and padding as (height, width)."""

    n: int
    c: int
    h: int
    w: int
    k: int
    r: int
    s: int
    stride: tuple[int, int] = (1, 1)
    padding: tuple[int, int] = (0, 0)

    @property
    def out_h(self) -> int:
        return (self.h + 2 * self.padding[0] - self.r) // self.stride[0] + 1

    @property
    def out_w(self) -> int:
        return (self.w + 2 * self.padding[1] - self.s) // self.stride[1] + 1

    def label(self) -> str:
        return (f"{self.n}x{self.c}x{self.h}x{self.w} k{self.k} {self.r}x{self.s} "
                f"s{_pair(self.stride)} p{_pair(self.padding)}")

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["stride"], data["padding"] = list(self.stride), list(self.padding)
        return data


@dataclass(frozen=True)
class GemmShape(_Fields):
    """C (m x n) = op(A) (m x k) . op(B) (k x n), DeepBench's convention: trans_a means A is
    stored k x m, trans_b means B is stored n x k."""

    m: int
    n: int
    k: int
    trans_a: bool = False
    trans_b: bool = False

    def label(self) -> str:
        return f"{self.m}x{self.n}x{self.k} {'TN'[not self.trans_a]}{'TN'[not self.trans_b]}"


@dataclass(frozen=True)
class LstmShape(_Fields):
    """One LSTM cell step: batch x input features in, hidden units (four gates of `hidden`)."""

    batch: int
    input: int
    hidden: int

    def label(self) -> str:
        return f"b{self.batch} i{self.input} h{self.hidden}"


@dataclass(frozen=True)
class AttentionShape(_Fields):
    """Causal softmax attention of `heads` heads over `positions` tokens of `head_dim` each,
    for `batch` sequences (scaled_dot_product_attention's q, k and v)."""

    batch: int
    heads: int
    positions: int
    head_dim: int

    def label(self) -> str:
        return f"b{self.batch} h{self.heads} T{self.positions} d{self.head_dim} causal"


@dataclass(frozen=True)
class MemoryShape(_Fields):
    """A streaming kernel over arrays of `array_bytes` each (STREAM's copy and triad)."""

    array_bytes: int

    def label(self) -> str:
        return f"{size_label(self.array_bytes)} per array"


Shape = ConvShape | GemmShape | LstmShape | AttentionShape | MemoryShape


@dataclass(frozen=True)
class KernelCase:
    """One kernel of a set: its family, shape, the passes measured and where the shape comes
    from (workload layers, DeepBench list entries, the sweep)."""

    family: str
    shape: Shape
    passes: tuple[str, ...]
    sources: tuple[str, ...]
    group: str

    def label(self) -> str:
        return self.shape.label()

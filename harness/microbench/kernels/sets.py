"""The named kernel sets of `dtbench kernels --set NAME`, and how long each kernel is timed.

- tiny: a handful of small shapes, seconds in all (the tests run it);
- workloads: every distinct convolution (three passes), GEMM, LSTM cell and attention of the
  five workloads at their `full` size and default CPU batch;
- attention: causal attention by every SDPA backend at gpt's shapes (small, full) and at
  longer sequences;
- deepbench: the DeepBench subset of `deepbench.py`;
- sweep: one input at kernel sizes 3, 5, 7, 9, 11 (the FFT claim of Vasilache et al. 2015);
- full: all of the above, each shape once.
Every set starts with copy and triad, which give the bandwidth roof.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from harness.core.errors import UsageError, unknown_name
from harness.microbench.kernels import deepbench
from harness.microbench.kernels.shapes import (
    CONV_PASSES,
    AttentionShape,
    ConvShape,
    GemmShape,
    KernelCase,
    LstmShape,
    MemoryShape,
)
from harness.microbench.kernels.workload_shapes import workload_kernels

LSTM_PASSES = ("fwd", "bwd")
ATTENTION_PASSES = ("fwd", "bwd")
# Beyond gpt's own: GPT-2's heads at 2,048 and 4,096 tokens, and 128-wide heads (Llama's).
LONG_ATTENTION = (AttentionShape(4, 12, 2048, 64), AttentionShape(1, 12, 4096, 64),
                  AttentionShape(1, 32, 4096, 128))
SWEEP_KERNEL_SIZES = (3, 5, 7, 9, 11)
# The sweep's fixed input: batch 16 (NNPACK's minimum), 32 -> 32 channels, 64 x 64 pixels.
SWEEP_INPUT = (16, 32, 64, 64, 32)


@dataclass(frozen=True)
class Timing:
    """How each kernel is timed: untimed warm-up calls (the first is the call whose result is
    checked), then at least `min_reps` timed calls and more until `budget_s` has passed, at
    most `max_reps`."""

    warmup: int = 1
    min_reps: int = 3
    max_reps: int = 50
    budget_s: float = 1.0


@dataclass(frozen=True)
class KernelSet:
    """A named list of kernels, the array size of its bandwidth kernels, the GEMM sizes and
    copy size of its compute-peak measurement, and its timing."""

    name: str
    description: str
    build: Callable[[], list[KernelCase]]
    array_bytes: int = 256 * 2**20
    peak_gemm_sizes: tuple[int, ...] | None = None
    peak_copy_bytes: int | None = None
    timing: Timing = Timing()

    def cases(self) -> list[KernelCase]:
        memory = MemoryShape(self.array_bytes)
        return [KernelCase("memory", memory, ("-",), ("STREAM copy and triad",), "memory"),
                *self.build()]


def _conv(shape: ConvShape, sources: list[str], group: str) -> KernelCase:
    return KernelCase("conv", shape, CONV_PASSES, tuple(sources), group)


def _gemm(shape: GemmShape, sources: list[str], group: str) -> KernelCase:
    return KernelCase("gemm", shape, ("-",), tuple(sources), group)


def _lstm(shape: LstmShape, sources: list[str], group: str) -> KernelCase:
    return KernelCase("lstm", shape, LSTM_PASSES, tuple(sources), group)


def _attention(shape: AttentionShape, sources: list[str], group: str) -> KernelCase:
    return KernelCase("attention", shape, ATTENTION_PASSES, tuple(sources), group)


def tiny_cases() -> list[KernelCase]:
    group = "tiny"
    return [
        _conv(ConvShape(16, 4, 10, 10, 6, 3, 3, (1, 1), (1, 1)), ["tiny 3x3"], group),
        _conv(ConvShape(16, 4, 10, 10, 6, 5, 5, (1, 1), (2, 2)), ["tiny 5x5"], group),
        _conv(ConvShape(16, 4, 11, 11, 6, 3, 3, (2, 2), (1, 1)), ["tiny 3x3 stride 2"], group),
        _gemm(GemmShape(64, 32, 48), ["tiny NN"], group),
        _gemm(GemmShape(32, 64, 16, True, False), ["tiny TN"], group),
        _gemm(GemmShape(48, 40, 24, False, True), ["tiny NT"], group),
        _lstm(LstmShape(4, 8, 16), ["tiny cell"], group),
        _attention(AttentionShape(2, 2, 16, 8), ["tiny causal attention"], group),
    ]


def workload_cases() -> list[KernelCase]:
    found = workload_kernels()
    group = "workloads"
    return ([_conv(shape, sources, group) for shape, sources in found.convs.items()]
            + [_gemm(shape, sources, group) for shape, sources in found.gemms.items()]
            + [_lstm(shape, sources, group) for shape, sources in found.lstm_cells.items()]
            + [_attention(shape, sources, group)
               for shape, sources in found.attentions.items()])


def attention_cases() -> list[KernelCase]:
    group = "attention"
    found: dict[AttentionShape, list[str]] = {}
    for size in ("small", "full"):
        for shape, sources in workload_kernels(("gpt",), size).attentions.items():
            found.setdefault(shape, []).extend(f"{source} ({size})" for source in sources)
    for shape in LONG_ATTENTION:
        found.setdefault(shape, []).append(f"causal attention at {shape.positions} tokens")
    return [_attention(shape, sources, group) for shape, sources in found.items()]


def deepbench_cases() -> list[KernelCase]:
    group = "deepbench"
    return ([_conv(shape, [f"DeepBench conv {shape.label()}"], group)
             for shape in deepbench.conv_shapes()]
            + [_gemm(shape, [f"DeepBench gemm {shape.label()}"], group)
               for shape in deepbench.gemm_shapes()]
            + [_lstm(shape, [f"DeepBench lstm h{shape.hidden} b{shape.batch}"], group)
               for shape in deepbench.lstm_shapes()])


def sweep_cases() -> list[KernelCase]:
    n, c, h, w, k = SWEEP_INPUT
    return [_conv(ConvShape(n, c, h, w, k, size, size, (1, 1), (size // 2, size // 2)),
                  [f"sweep k{size}"], "sweep") for size in SWEEP_KERNEL_SIZES]


def full_cases() -> list[KernelCase]:
    """Every shape of workloads, attention, deepbench and sweep once; a shape in several keeps
    the first group and gathers the sources of all."""
    merged: dict[tuple[str, object], KernelCase] = {}
    for case in workload_cases() + attention_cases() + deepbench_cases() + sweep_cases():
        key = (case.family, case.shape)
        if key in merged:
            first = merged[key]
            merged[key] = KernelCase(first.family, first.shape, first.passes,
                                     first.sources + case.sources, first.group)
        else:
            merged[key] = case
    return list(merged.values())


SETS = {
    "tiny": KernelSet("tiny", "a few small shapes (seconds; for tests)", tiny_cases,
                      array_bytes=2**20, peak_gemm_sizes=(128,), peak_copy_bytes=2**20,
                      timing=Timing(warmup=1, min_reps=3, max_reps=10, budget_s=0.01)),
    "workloads": KernelSet("workloads", "convolutions, GEMMs, LSTM cells and attentions of "
                           "the five workloads at full size", workload_cases),
    "attention": KernelSet("attention", "causal attention by every SDPA backend: gpt's "
                           "shapes and longer sequences", attention_cases),
    "deepbench": KernelSet("deepbench", "a DeepBench training subset: 15 GEMM, 8 convolution, "
                           "3 LSTM shapes", deepbench_cases),
    "sweep": KernelSet("sweep", "kernel sizes 3-11 at one input (FFT against the others)",
                       sweep_cases),
    "full": KernelSet("full", "workloads, attention, deepbench and sweep", full_cases),
}
DEFAULT_SET = "workloads"


def get_set(name: str) -> KernelSet:
    try:
        return SETS[name]
    except KeyError:
        raise UsageError(unknown_name("kernel set", name, SETS)) from None

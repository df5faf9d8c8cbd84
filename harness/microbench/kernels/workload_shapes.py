"""The convolutions, GEMMs, LSTM cells and attentions inside the workloads, read off the
models.

Each model is built on the meta device (no memory, no arithmetic) and run forward once on a
batch of its preset's default CPU batch size; hooks on every Conv2d, Linear, LSTM and attention
layer (one with a `head_dim`, as gpt's) record the shapes they see. So the list follows the
models' code rather than a copy of it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache
from typing import Any

import torch
from torch import nn

from harness.microbench.kernels.shapes import AttentionShape, ConvShape, GemmShape, LstmShape

WORKLOAD_NAMES = ("alexnet", "resnet50", "hep_cnn", "lstm", "gpt")


@dataclass
class WorkloadKernels:
    """Distinct shapes, in model order, each with the layers (`workload module`) using it."""

    convs: dict[ConvShape, list[str]] = field(default_factory=dict)
    gemms: dict[GemmShape, list[str]] = field(default_factory=dict)
    lstm_cells: dict[LstmShape, list[str]] = field(default_factory=dict)
    attentions: dict[AttentionShape, list[str]] = field(default_factory=dict)

    def add(self, table: dict[Any, list[str]], shape: Any, source: str) -> None:
        table.setdefault(shape, []).append(source)


def linear_gemms(rows: int, in_features: int, out_features: int
                 ) -> list[tuple[str, GemmShape]]:
    """The three GEMMs of y = x W^T (x: rows x in, W: out x in) in DeepBench's convention:
    forward y = x . W^T (B transposed), backward-data dx = dy . W, backward-weights
    dW = dy^T . x (A transposed)."""
    return [("fwd", GemmShape(rows, out_features, in_features, False, True)),
            ("bwd_data", GemmShape(rows, in_features, out_features, False, False)),
            ("bwd_weights", GemmShape(out_features, in_features, rows, True, False))]


def _conv_shape(module: nn.Conv2d, shape: torch.Size) -> ConvShape:
    if module.groups != 1 or tuple(module.dilation) != (1, 1) or isinstance(module.padding, str):
        raise ValueError(f"unsupported convolution {module}")
    n, c, h, w = shape
    r, s = module.kernel_size
    return ConvShape(n, c, h, w, module.out_channels, r, s, tuple(module.stride),
                     tuple(module.padding))  # type: ignore[arg-type]


def _record(found: WorkloadKernels, source: str, module: nn.Module,
            inputs: tuple[Any, ...]) -> None:
    shape = inputs[0].shape
    if isinstance(module, nn.Conv2d):
        found.add(found.convs, _conv_shape(module, shape), source)
    elif isinstance(module, nn.Linear):
        rows = int(torch.Size(shape[:-1]).numel())
        for pass_, gemm in linear_gemms(rows, module.in_features, module.out_features):
            found.add(found.gemms, gemm, f"{source} {pass_}")
    elif _attention(module):
        batch, positions, width = shape  # q, k and v of every head side by side
        heads = width // (3 * module.head_dim)
        found.add(found.attentions, AttentionShape(batch, heads, positions, module.head_dim),
                  source)
    elif isinstance(module, nn.LSTM):
        batch, steps = (shape[0], shape[1]) if module.batch_first else (shape[1], shape[0])
        for layer in range(module.num_layers):
            width = module.input_size if layer == 0 else module.hidden_size
            where = f"{source} layer {layer}"
            found.add(found.lstm_cells, LstmShape(batch, width, module.hidden_size), where)
            # The input projection of all steps at once, then one recurrent GEMM per step.
            for pass_, gemm in linear_gemms(batch * steps, width, 4 * module.hidden_size):
                found.add(found.gemms, gemm, f"{where} input {pass_}")
            for pass_, gemm in linear_gemms(batch, module.hidden_size, 4 * module.hidden_size):
                found.add(found.gemms, gemm, f"{where} recurrent {pass_}")


def _attention(module: nn.Module) -> bool:
    return getattr(module, "counted_layer", False) and hasattr(module, "head_dim")


@cache
def workload_kernels(names: tuple[str, ...] = WORKLOAD_NAMES, size: str = "full"
                     ) -> WorkloadKernels:
    """Every distinct convolution, GEMM, LSTM cell and attention shape of the workloads at `size`
    (computed once per process; treat the result as read-only)."""
    from workloads import get_workload

    found = WorkloadKernels()
    for workload_name in names:
        workload = get_workload(workload_name)
        with torch.device("meta"):
            model = workload.build_model(size)
        batch = workload.preset(size).default_batch("cpu")
        inputs, _ = workload.synthetic_batch(size, batch, "meta")
        handles = [module.register_forward_hook(
            lambda mod, args, out, where=f"{workload_name} {name}":
            _record(found, where, mod, args))
            for name, module in model.named_modules()
            if isinstance(module, (nn.Conv2d, nn.Linear, nn.LSTM)) or _attention(module)]
        try:
            with torch.no_grad():
                model(inputs)
        finally:
            for handle in handles:
                handle.remove()
    return found

"""Per-layer facts of a workload: parameters, activations and FLOPs, and the rule for choosing
data or model parallelism per layer.

Counted once on the meta device like workloads/flops.py (no memory, no arithmetic): forward
hooks see each layer's input and output shapes; `torch.utils.flop_counter`'s module tracking
attributes the FLOPs of the forward and the backward pass to the module that ran them.
The rows feed `dtbench describe --layers`, the pipeline and tensor-parallel volumes (cut
sizes, FC shapes) and the pipeline's stage balancer.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

if TYPE_CHECKING:
    from workloads.base import Workload

COUNT_BATCH = 2
POOLING = (nn.MaxPool2d, nn.AvgPool2d, nn.AdaptiveAvgPool2d, nn.AdaptiveMaxPool2d)
# "Far outnumbers": the gradient volume must exceed the activation volume this many times
# before a layer is worth splitting (model parallel) rather than replicating (data parallel).
FAR_MORE = 10.0


@dataclass(frozen=True)
class LayerFacts:
    """One layer of a model, per sample: what it holds, produces and computes."""

    name: str
    kind: str
    block: str
    parameters: int
    input_elements: int
    activation_elements: int
    forward_flops: int
    backward_flops: int
    in_features: int | None = None
    out_features: int | None = None
    positions: int = 1

    @property
    def flops(self) -> int:
        """Forward + backward FLOPs per sample, 2 per multiply-add."""
        return self.forward_flops + self.backward_flops

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "flops": self.flops}


def _blocks(model: nn.Module) -> list[str]:
    """Names of the units a pipeline may cut between: the children of the model, with
    nn.Sequential containers opened (ResNet's bottlenecks stay whole)."""
    found: list[str] = []

    def walk(module: nn.Module, prefix: str) -> None:
        for name, child in module.named_children():
            path = f"{prefix}{name}"
            if isinstance(child, nn.Sequential):
                walk(child, path + ".")
            else:
                found.append(path)

    walk(model, "")
    return found


def _block_of(name: str, blocks: list[str]) -> str:
    owners = [b for b in blocks if name == b or name.startswith(b + ".")]
    return max(owners, key=len) if owners else name


def _counted(module: nn.Module) -> bool:
    """A leaf that holds parameters, pools, or computes as a layer of its own without
    parameters (a transformer's attention, `counted_layer`)."""
    leaf = next(module.children(), None) is None
    return leaf and (any(True for _ in module.parameters(recurse=False))
                     or isinstance(module, POOLING) or getattr(module, "counted_layer", False))


def _first_tensor(value: Any) -> torch.Tensor | None:
    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, (tuple, list)):
        for item in value:
            found = _first_tensor(item)
            if found is not None:
                return found
    return None


def _alone(module: nn.Module, given: torch.Tensor) -> tuple[int, int]:
    """Forward and backward FLOPs of one module run by itself on a meta input of the shape and
    requires_grad it met inside the model (the first layer computes no input gradient)."""
    inputs = torch.empty_like(given, device="meta").requires_grad_(given.requires_grad)
    counter = FlopCounterMode(display=False)
    with counter:
        output = _first_tensor(module(inputs))
        forward = counter.get_total_flops()
        if output is not None and output.requires_grad:
            output.backward(torch.empty_like(output))
    return forward, counter.get_total_flops() - forward


def _count(model: nn.Module, inputs: torch.Tensor) -> tuple[LayerFacts, ...]:
    """The rows of a model on the meta device for a meta batch of COUNT_BATCH samples."""
    model.train()
    modules = dict(model.named_modules())
    calls: list[tuple[str, torch.Tensor, int]] = []
    handles = []
    for name, module in modules.items():
        if name and _counted(module):
            def hook(mod: nn.Module, args: Any, output: Any, name: str = name) -> None:
                made = _first_tensor(output)
                calls.append((name, _first_tensor(args), made.numel() if made is not None else 0))
            handles.append(module.register_forward_hook(hook))
    try:
        model(inputs)
    finally:
        for handle in handles:
            handle.remove()
    blocks = _blocks(model)
    rows, held = [], set()
    for name, given, made in calls:
        module = modules[name]
        # A parameter counts once, with the first layer that uses it: a layer called twice,
        # or a weight tied to another layer's (a transformer's output projection).
        own = [p for p in module.parameters(recurse=False) if id(p) not in held]
        held.update(id(p) for p in own)
        forward, backward = _alone(module, given)
        linear = isinstance(module, nn.Linear)
        out_per_sample = made // COUNT_BATCH
        rows.append(LayerFacts(
            name=name, kind=type(module).__name__, block=_block_of(name, blocks),
            parameters=sum(p.numel() for p in own),
            input_elements=given.numel() // COUNT_BATCH, activation_elements=out_per_sample,
            forward_flops=forward // COUNT_BATCH, backward_flops=backward // COUNT_BATCH,
            in_features=module.in_features if linear else None,
            out_features=module.out_features if linear else None,
            positions=max(1, out_per_sample // module.out_features) if linear else 1))
    return tuple(rows)


@lru_cache(maxsize=32)
def _table(workload_class: type[Workload], size: str) -> tuple[LayerFacts, ...]:
    workload = workload_class()
    with torch.device("meta"):
        model = workload.build_model(size)
    inputs, _ = workload.synthetic_batch(size, COUNT_BATCH, "meta")
    return _count(model, inputs)


@lru_cache(maxsize=16)
def _external_table(name: str) -> tuple[LayerFacts, ...]:
    """A torchvision model's rows, and one "(elsewhere)" row first for what no leaf layer
    holds (parameters of a container such as attention's projection or a class token, and
    the FLOPs computed outside leaf layers): the totals are the whole model's."""
    from workloads.external import build

    model, shape, _ = build(name)
    inputs = torch.empty((COUNT_BATCH, *shape), device="meta")
    rows = _count(model, inputs)
    counter = FlopCounterMode(display=False)
    with counter:
        output = _first_tensor(model(inputs))
        forward = counter.get_total_flops()
        if output is not None:
            output.sum().backward()
    backward = counter.get_total_flops() - forward
    parameters = sum(p.numel() for p in model.parameters())
    rest = (parameters - sum(r.parameters for r in rows),
            forward // COUNT_BATCH - sum(r.forward_flops for r in rows),
            backward // COUNT_BATCH - sum(r.backward_flops for r in rows))
    if any(value > 0 for value in rest):
        first = shape[0] * shape[1] * shape[2]
        rows = (LayerFacts("(elsewhere)", "unattributed", "(elsewhere)", max(0, rest[0]),
                           first, first, max(0, rest[1]), max(0, rest[2])), *rows)
    return rows


def layer_table(workload: Workload | str, size: str) -> list[LayerFacts]:
    """The layers of `workload` at `size`, in forward order: the leaf modules with parameters
    plus the pooling and attention layers; parameters sum to the model's (a tied weight
    counted once, with its first layer), FLOPs to flops_per_sample."""
    if isinstance(workload, str):
        from workloads.base import get_workload
        from workloads.external import is_external, model_name

        if is_external(workload):
            return list(_external_table(model_name(workload)))
        workload = get_workload(workload)
    workload.preset(size)
    return list(_table(type(workload), size))


def gradient_to_activation_ratio(layer: LayerFacts, batch_per_node: int, nodes: int) -> float:
    """P / (A · b · N): the bytes data parallelism moves for this layer (an allreduce of its
    P gradients, 2(N-1)/N · P per node) over those model parallelism moves (every node's
    output activations A · b to every other node and the gradients back, 2(N-1) · A · b), the
    (N-1) cancelling; at N = 1 nothing moves and this is the limit."""
    volume = layer.activation_elements * batch_per_node * nodes
    if layer.parameters == 0:
        return 0.0
    return layer.parameters / volume if volume else float("inf")


def choose_parallelism(layer: LayerFacts, batch_per_node: int, nodes: int) -> str:
    """The seeds' rule (Krizhevsky 2014): "model" parallel where the gradients far outnumber
    the activations (ratio >= FAR_MORE), "data" parallel otherwise."""
    ratio = gradient_to_activation_ratio(layer, batch_per_node, nodes)
    return "model" if ratio >= FAR_MORE else "data"


@dataclass(frozen=True)
class BlockFacts:
    """A unit a pipeline may cut after (LayerFacts.block): its parameters and FLOPs per
    sample, and its output elements per sample (what crosses a cut after it)."""

    name: str
    parameters: int
    flops: int
    output_elements: int


def block_table(layers: Sequence[LayerFacts]) -> list[BlockFacts]:
    """The layers grouped into their blocks, in forward order."""
    found: list[BlockFacts] = []
    for layer in layers:
        if found and found[-1].name == layer.block:
            last = found[-1]
            found[-1] = BlockFacts(last.name, last.parameters + layer.parameters,
                                   last.flops + layer.flops, layer.activation_elements)
        else:
            found.append(BlockFacts(layer.block, layer.parameters, layer.flops,
                                    layer.activation_elements))
    return found


def balance_stages(weights: Sequence[float], parts: int) -> list[int]:
    """Sizes of `parts` contiguous groups of `weights` (e.g. block FLOPs) whose largest sum
    is the smallest possible; every group gets at least one item (dynamic programming over
    the split points, O(parts · n²))."""
    n = len(weights)
    if not 1 <= parts <= n:
        raise ValueError(f"cannot split {n} items into {parts} non-empty groups")
    prefix = [0.0]
    for weight in weights:
        prefix.append(prefix[-1] + weight)
    best = [[float("inf")] * (n + 1) for _ in range(parts + 1)]
    split = [[0] * (n + 1) for _ in range(parts + 1)]
    best[0][0] = 0.0
    for k in range(1, parts + 1):
        for end in range(k, n + 1):
            for start in range(k - 1, end):
                cost = max(best[k - 1][start], prefix[end] - prefix[start])
                if cost < best[k][end]:
                    best[k][end], split[k][end] = cost, start
    sizes, end = [], n
    for k in range(parts, 0, -1):
        start = split[k][end]
        sizes.append(end - start)
        end = start
    return sizes[::-1]

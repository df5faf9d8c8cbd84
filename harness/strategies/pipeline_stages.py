"""The pipeline's cut: where a model is split into stages (planning side, no torch.distributed),
and the split itself (torch.fx) on the rank side.

Units a pipeline may cut between are the blocks of workloads.layers.block_table (the model's
children with nn.Sequential opened; ResNet's bottlenecks stay whole); the stages are
contiguous runs of blocks whose forward + backward FLOPs are balanced by
workloads.layers.balance_stages (the largest stage as small as it can be). Layers without
parameters (ReLU, dropout, flatten, the LSTM's tuple unpacking) go with the block before them.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from harness.core.errors import UsageError
from harness.spec.specs import RunSpec

SCHEDULES = ("gpipe", "1f1b", "interleaved-1f1b")


@dataclass(frozen=True)
class Layout:
    """S stages, v chunks (stages) per rank, p ranks per pipeline, R pipeline replicas."""

    stages: int
    chunks: int
    ranks: int
    replicas: int

    def stage_rank(self, stage: int) -> int:
        """The rank (within its pipeline) that holds `stage`: stage k on rank k mod p."""
        return stage % self.ranks


def chunks_per_rank(schedule: str) -> int:
    """Stages a rank holds under a schedule: two for interleaved-1f1b, else one (a run's
    layout and predict's default `chunks` alike)."""
    return 2 if schedule == "interleaved-1f1b" else 1


def layout(spec: RunSpec, schedule: str, stages: int) -> Layout:
    """The layout of `spec`; UsageError when the ranks cannot hold it."""
    chunks = chunks_per_rank(schedule)
    total = stages or chunks * spec.world_size
    if total % chunks:
        raise UsageError(f"--strategy-opt stages={total}: interleaved-1f1b places 2 stages on "
                         "each rank; give an even number of stages")
    ranks = total // chunks
    if spec.world_size % ranks:
        raise UsageError(f"pipeline of {total} stages needs a multiple of {ranks} ranks "
                         f"({chunks} stage(s) per rank); got {spec.world_size}")
    return Layout(total, chunks, ranks, spec.world_size // ranks)


@dataclass(frozen=True)
class Cut:
    """The stages' blocks (by name), FLOPs share, parameters, and the activation elements per
    sample that cross each cut (len = stages - 1)."""

    blocks: tuple[tuple[str, ...], ...]
    flops_share: tuple[float, ...]
    parameters: tuple[int, ...]
    cut_elements: tuple[int, ...]

    def as_dict(self) -> dict[str, Any]:
        return {"blocks": [list(b) for b in self.blocks],
                "flops_share": [round(s, 4) for s in self.flops_share],
                "parameters": list(self.parameters), "cut_elements": list(self.cut_elements)}


def plan_cut(workload: str, size: str, stages: int, layers: Sequence[Any] | None = None
             ) -> Cut:
    """Blocks balanced by counted FLOPs into `stages` contiguous stages (of `layers`, the
    workload's layer table unless given); UsageError when the model has fewer blocks than
    stages."""
    from workloads.layers import balance_stages, block_table, layer_table

    units = block_table(layers if layers is not None else layer_table(workload, size))
    if stages > len(units):
        raise UsageError(f"pipeline of {stages} stages: {workload} ({size}) has only "
                         f"{len(units)} blocks to cut between "
                         f"({', '.join(u.name for u in units)})")
    sizes = balance_stages([float(u.flops) for u in units], stages)
    total = sum(u.flops for u in units) or 1
    groups, start = [], 0
    for count in sizes:
        groups.append(units[start:start + count])
        start += count
    return Cut(blocks=tuple(tuple(u.name for u in g) for g in groups),
               flops_share=tuple(sum(u.flops for u in g) / total for g in groups),
               parameters=tuple(sum(u.parameters for u in g) for g in groups),
               cut_elements=tuple(g[-1].output_elements for g in groups[:-1]))


@dataclass(frozen=True)
class Tie:
    """A weight that several stages hold (a tied embedding and output projection): its name
    in each module holding it, the stages those are in, and its elements. The stages' ranks
    sum its gradient every step, as Megatron sums the embedding's between the first and last
    stage."""

    names: tuple[str, ...]
    stages: tuple[int, ...]
    elements: int


def ties(workload: str, size: str, cut: Cut) -> list[Tie]:
    """The weights held by more than one stage of `cut` (counted on the meta device)."""
    from workloads import get_workload
    from workloads.layers import layer_table

    block = {row.name: row.block for row in layer_table(workload, size)}
    stage_of = {name: k for k, blocks in enumerate(cut.blocks) for name in blocks}
    with torch.device("meta"):
        model = get_workload(workload).build_model(size)
    holders: dict[int, list[str]] = {}
    sizes: dict[int, int] = {}
    for name, parameter in model.named_parameters(remove_duplicate=False):
        holders.setdefault(id(parameter), []).append(name)
        sizes[id(parameter)] = parameter.numel()
    found = []
    for key, names in holders.items():
        stages = sorted({stage_of[block[name.rpartition(".")[0]]] for name in names})
        if len(stages) > 1:
            found.append(Tie(tuple(names), tuple(stages), sizes[key]))
    return found


def theoretical_bubble(ranks: int, microbatches: int, chunks: int = 1) -> float:
    """The idle share of a synchronous schedule: (p - 1) / (v·m + p - 1)."""
    return (ranks - 1) / (chunks * microbatches + ranks - 1)


def check_microbatches(spec: RunSpec, schedule: str, micro: int, lay: Layout) -> None:
    """UsageError for microbatch counts the schedules refuse."""
    if spec.batch_per_rank % micro:
        raise UsageError(f"--strategy-opt microbatches={micro} does not divide the batch of "
                         f"{spec.batch_per_rank} samples per pipeline (--batch-size)")
    if schedule == "1f1b" and micro < lay.stages:
        raise UsageError(f"1f1b needs at least as many microbatches as stages ({lay.stages}); "
                         f"got microbatches={micro}")
    if schedule == "interleaved-1f1b":
        rounds = max(1, micro // lay.ranks)
        if micro % rounds or micro % lay.ranks and micro > lay.ranks:
            raise UsageError(f"interleaved-1f1b needs microbatches to be a multiple of the "
                             f"{lay.ranks} ranks of a pipeline; got {micro}")


def split_model(model: Any, cut: Cut) -> list[Any]:
    """The model as len(cut.blocks) fx GraphModules, in order: stage k runs from the first
    module of its first block up to (not including) the next stage's first block."""
    import torch.fx as fx
    from torch.fx.passes.split_module import split_module

    traced = fx.symbolic_trace(model)
    starts = {blocks[0]: index for index, blocks in enumerate(cut.blocks)}
    part, current = {}, 0
    for node in traced.graph.nodes:
        if node.op == "call_module":
            for name, index in starts.items():
                if node.target == name or str(node.target).startswith(name + "."):
                    current = index
        part[node] = current
    split = split_module(traced, model, lambda node: part[node])
    pieces = dict(split.named_children())
    return [Contiguous(pieces[f"submod_{k}"]) for k in range(len(cut.blocks))]


class Contiguous(nn.Module):
    """A stage whose output is contiguous: point-to-point sends (and the receive buffers
    shaped after the output) need it; an LSTM's or channels_last convolution's output is
    not."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, *args: Any) -> Any:
        args = tuple(_ContiguousGrad.apply(a) if isinstance(a, torch.Tensor) and a.requires_grad
                     else a for a in args)
        output = self.inner(*args)
        return output.contiguous() if isinstance(output, torch.Tensor) else output


class _ContiguousGrad(torch.autograd.Function):
    """Identity whose gradient comes back contiguous (the input gradient a stage sends back
    is otherwise channels_last after a convolution)."""

    @staticmethod
    def forward(ctx: Any, tensor: torch.Tensor) -> torch.Tensor:
        return tensor.view_as(tensor)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        return grad.contiguous()

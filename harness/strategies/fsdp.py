"""fsdp: fully sharded data parallel (FSDP2 `fully_shard`): each rank holds 1/n of the
parameters, gradients and optimizer state; parameters are all-gathered before a block's
forward (and again before its backward), gradients reduce-scattered after it: the
ReduceScatter + AllGather pattern of data parallelism."""
from __future__ import annotations

import warnings
from collections.abc import Iterator
from functools import lru_cache
from typing import ClassVar

import torch
from torch import nn

from harness.spec.specs import RunSpec
from harness.strategies import volumes
from harness.strategies.base import (
    STRATEGIES,
    Layers,
    Option,
    Strategy,
    broadcast_from_first,
)
from harness.strategies.steps import data_parallel_step
from harness.strategies.strategy_options import OVERLAP


def shard_units(model: nn.Module) -> Iterator[nn.Module]:
    """The blocks sharded apart: each child of a Sequential, and each other child that holds
    parameters, so the root keeps none (and every parameter is re-gathered for backward) —
    except a child holding a parameter another module holds too (a tied embedding and output
    projection): FSDP2 shards a parameter in one unit, so those stay with the root, which
    FSDP2 keeps gathered from the forward pass through the backward."""
    shared = _shared(model)

    def own_unit(module: nn.Module) -> bool:
        held = [id(p) for p in module.parameters()]
        return bool(held) and not shared.intersection(held)

    for child in model.children():
        if isinstance(child, nn.Sequential):
            yield from (c for c in child.children() if own_unit(c))
        elif own_unit(child):
            yield child


def _shared(model: nn.Module) -> set[int]:
    """ids of the parameters that more than one module holds."""
    seen: dict[int, int] = {}
    for _, parameter in model.named_parameters(remove_duplicate=False):
        seen[id(parameter)] = seen.get(id(parameter), 0) + 1
    return {key for key, count in seen.items() if count > 1}


@lru_cache(maxsize=32)
def root_parameters(workload: str, size: str) -> int:
    """Parameters FSDP2's root unit holds (none unless a weight is tied): gathered once a
    step, not again for backward. None for a model that is not a workload (one `dtbench
    predict` reads for its facts: a torchvision classifier ties no weight)."""
    from workloads import WORKLOADS, get_workload

    if workload not in WORKLOADS:
        return 0
    with torch.device("meta"):
        model = get_workload(workload).build_model(size)
    total = sum(p.numel() for p in model.parameters())
    return total - sum(p.numel() for unit in shard_units(model) for p in unit.parameters())


# Shared with fsdp-tp, whose dp dimension is FSDP2's exchange.
RESHARD = Option("reshard_after_forward", bool, True, "free the gathered parameters after the "
                 "forward pass and gather them again for backward (FSDP2's default)")


@STRATEGIES.register("fsdp")
class FSDP(Strategy):
    """Data parallel, synchronous, everything sharded (FSDP2)."""

    name = "fsdp"
    step_model = "harness.predict.dataparallel:fsdp"
    summary = "FSDP2: parameters, gradients and optimizer state sharded; ReduceScatter + AllGather"
    family = "data parallel, synchronous"
    engine = "torch.distributed.fsdp.fully_shard (FSDP2) on a DeviceMesh"
    replicas_agree = False  # each rank holds a shard, not a replica
    comms = ("gloo", "mpi", "nccl")
    local_forward = False  # the forward pass all-gathers each unit's parameters
    own_work = "FSDP2's per-unit copies into and out of the flat buffers, DTensor, hooks"
    options: ClassVar[tuple[Option, ...]] = (RESHARD, OVERLAP)

    @classmethod
    def traffic(cls, spec: RunSpec, param_bytes: float, layers: Layers = None
                ) -> dict[str, float]:
        return volumes.fsdp(param_bytes, spec.world_size, reshard_after_forward=bool(
            cls.option_value(spec, "reshard_after_forward")), backend=spec.comm,
            root_bytes=volumes.PARAM_BYTES * root_parameters(spec.workload, spec.size))

    def setup(self) -> None:
        recipe = self.recipe
        # Built whole with the run's seed on every rank, then sharded: the shards are the same
        # numbers a single process would start from (what the equivalence tests compare).
        model = recipe.build_model(compiled=False)  # compiled last, around the shards
        # FSDP2 shards contiguous parameters only: channels_last weights go back to the
        # default layout (inputs and activations may stay channels_last).
        model = model.to(memory_format=torch.contiguous_format)
        if self.spec.distributed:
            from torch.distributed.device_mesh import init_device_mesh
            from torch.distributed.fsdp import fully_shard

            broadcast_from_first(model)
            mesh = init_device_mesh(self.place.device.type, (self.spec.world_size,))
            reshard = bool(self.option_value(self.spec, "reshard_after_forward"))
            for unit in list(shard_units(model)):
                fully_shard(unit, mesh=mesh, reshard_after_forward=reshard)
            fully_shard(model, mesh=mesh)
            # FSDP2 calls the reduce_scatter_tensor/all_gather_into_tensor names that
            # torch 2.13 deprecates: one FutureWarning per step otherwise.
            warnings.filterwarnings("ignore", category=FutureWarning,
                                    module=r"torch\.distributed")
        self.optimizer = recipe.build_optimizer(model.parameters())
        self.model = recipe.compiled(model)

    def step(self, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return data_parallel_step(self, inputs, targets)

    def full_parameters(self) -> list[torch.Tensor]:
        """Every parameter whole (gathered from the shards): for equivalence checks."""
        assert self.model is not None
        return [p.full_tensor() if hasattr(p, "full_tensor") else p.detach()
                for p in self.model.parameters()]

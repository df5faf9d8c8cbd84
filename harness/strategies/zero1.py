"""zero1: ZeRO stage 1 on DDP: ddp itself (the same options, checks, bucketed and compressed
gradient allreduce), with the optimizer state sharded over the ranks: each updates its shard of
the parameters, then broadcasts it."""
from __future__ import annotations

import torch

from harness.spec.specs import RunSpec
from harness.strategies import volumes
from harness.strategies.base import STRATEGIES, Layers, broadcast_from_first
from harness.strategies.ddp import DDP, compression_ratio
from harness.strategies.steps import data_parallel_step


@STRATEGIES.register("zero1")
class Zero1(DDP):
    """Data parallel, synchronous, optimizer state sharded (ZeroRedundancyOptimizer)."""

    name = "zero1"
    step_model = "harness.predict.dataparallel:zero1"
    summary = "ZeRO-1: DDP gradients, optimizer state sharded, updated parameters broadcast"
    engine = "torch.distributed.optim.ZeroRedundancyOptimizer on DistributedDataParallel"
    uses_ipex = False
    own_work = "ZeroRedundancyOptimizer's sharded step"

    @classmethod
    def traffic(cls, spec: RunSpec, param_bytes: float, layers: Layers = None
                ) -> dict[str, float]:
        ratio = compression_ratio(cls.option_value(spec, "compression"))
        return volumes.zero1(param_bytes, spec.world_size, gradient_ratio=ratio)

    def setup(self) -> None:
        from torch.distributed.optim import ZeroRedundancyOptimizer

        recipe = self.recipe
        model = recipe.build_model(compiled=False)  # compiled last, around the DDP wrapper
        if self.spec.distributed:
            broadcast_from_first(model)
            model = self.wrapped(model)
            # ZeRO splits by whole parameters, so shards are uneven (ENGINES.md).
            self.optimizer = ZeroRedundancyOptimizer(
                model.parameters(), optimizer_class=recipe.optimizer_class,
                **recipe.optimizer_kwargs)
        else:
            self.optimizer = recipe.build_optimizer(model.parameters())
        self.model = recipe.compiled(model)

    def step(self, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return data_parallel_step(self, inputs, targets, optimizer_kind="parameter")

"""zero1: ZeRO stage 1 on DDP: gradients allreduced as in ddp (the same bucket size and
compression hooks), the optimizer state sharded over the ranks (each updates its shard of the
parameters, then broadcasts it)."""
from __future__ import annotations

from typing import ClassVar

import torch
from torch import nn

from harness.core.spec import RunSpec
from harness.strategies import volumes
from harness.strategies.base import STRATEGIES, Option, Strategy, broadcast_from_first
from harness.strategies.compression import register_compression
from harness.strategies.ddp import BUCKET_MB, COMPRESSION, check_compression, compression_ratio
from harness.strategies.options import OVERLAP
from harness.strategies.steps import data_parallel_step


@STRATEGIES.register("zero1")
class Zero1(Strategy):
    """Data parallel, synchronous, optimizer state sharded (ZeroRedundancyOptimizer)."""

    name = "zero1"
    step_model = "harness.predict.dataparallel:zero1"
    summary = "ZeRO-1: DDP gradients, optimizer state sharded, updated parameters broadcast"
    family = "data parallel, synchronous"
    engine = "torch.distributed.optim.ZeroRedundancyOptimizer on DistributedDataParallel"
    options: ClassVar[tuple[Option, ...]] = (BUCKET_MB, COMPRESSION, OVERLAP)
    own_work = "ZeroRedundancyOptimizer's sharded step"

    @classmethod
    def check(cls, spec: RunSpec) -> None:
        super().check(spec)
        check_compression(spec, cls.option_value(spec, "compression"))

    @classmethod
    def traffic(cls, spec: RunSpec, param_bytes: float) -> dict[str, float]:
        ratio = compression_ratio(cls.option_value(spec, "compression"))
        return volumes.zero1(param_bytes, spec.world_size, gradient_ratio=ratio)

    def setup(self) -> None:
        from torch.distributed.optim import ZeroRedundancyOptimizer

        recipe = self.recipe
        model = recipe.build_model(compiled=False)  # compiled last, around the DDP wrapper
        if self.spec.distributed:
            broadcast_from_first(model)
            device = self.place.device
            model = nn.parallel.DistributedDataParallel(
                model, device_ids=[device.index] if device.type == "cuda" else None,
                bucket_cap_mb=self.option_value(self.spec, "bucket_mb"),
                gradient_as_bucket_view=True, init_sync=False)
            register_compression(model, self.option_value(self.spec, "compression"))
            # ZeRO splits by whole parameters, so shards are uneven (ENGINES.md).
            self.optimizer = ZeroRedundancyOptimizer(
                model.parameters(), optimizer_class=recipe.optimizer_class,
                **recipe.optimizer_kwargs)
        else:
            self.optimizer = recipe.build_optimizer(model.parameters())
        self.model = recipe.compiled(model)

    def step(self, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return data_parallel_step(self, inputs, targets, optimizer_kind="parameter")

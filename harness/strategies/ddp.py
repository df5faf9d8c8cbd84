"""ddp: DistributedDataParallel: gradients allreduced in buckets, overlapped with the backward
pass, optionally compressed (fp16, bf16, PowerSGD hooks)."""
from __future__ import annotations

from typing import ClassVar

import torch
from torch import nn

from harness.core.errors import UsageError
from harness.core.spec import RunSpec
from harness.strategies import volumes
from harness.strategies.base import (
    STRATEGIES,
    Option,
    Strategy,
    broadcast_from_first,
)
from harness.strategies.compression import COMPRESSIONS, register_compression
from harness.strategies.options import OVERLAP
from harness.strategies.steps import data_parallel_step

# Bytes on the wire per fp32 gradient byte under each hook (PowerSGD depends on the shapes).
COMPRESSION_RATIO = {"none": 1.0, "fp16": 0.5, "bf16": 0.5}
BUCKET_MB = Option("bucket_mb", int, 25, "gradient bucket size in MiB", minimum=1,
                   aliases=("bucket_cap_mb",))
COMPRESSION = Option("compression", str, "none", "gradient compression hook",
                     choices=COMPRESSIONS)


def compression_ratio(compression: str) -> float:
    """Bytes on the wire per fp32 gradient byte; PowerSGD's depends on each gradient's shape."""
    ratio = COMPRESSION_RATIO.get(compression)
    if ratio is None:
        raise NotImplementedError("PowerSGD's volume depends on each gradient's shape")
    return ratio


def check_compression(spec: RunSpec, compression: str) -> None:
    """A compression hook needs a process group to hook into."""
    if compression != "none" and not spec.distributed:
        raise UsageError("--compression needs several ranks (-n 2 or more with --comm)")


@STRATEGIES.register("ddp")
class DDP(Strategy):
    """Data parallel, synchronous: every rank a full replica, gradients allreduced."""

    name = "ddp"
    step_model = "harness.predict.dataparallel:ddp"
    summary = "DistributedDataParallel: bucketed gradient allreduce overlapped with backward"
    family = "data parallel, synchronous"
    engine = "torch.nn.parallel.DistributedDataParallel (+ DDP communication hooks)"
    uses_ipex = True
    options: ClassVar[tuple[Option, ...]] = (BUCKET_MB, COMPRESSION, OVERLAP)

    @classmethod
    def check(cls, spec: RunSpec) -> None:
        super().check(spec)
        check_compression(spec, cls.option_value(spec, "compression"))

    @classmethod
    def traffic(cls, spec: RunSpec, param_bytes: float) -> dict[str, float]:
        ratio = compression_ratio(cls.option_value(spec, "compression"))
        return volumes.ddp(param_bytes * ratio, spec.world_size)

    def setup(self) -> None:
        recipe = self.recipe
        model = recipe.build_model(compiled=False)  # compiled last, around the DDP wrapper
        if self.spec.distributed:
            broadcast_from_first(model)
        optimizer = recipe.build_optimizer(model.parameters())
        if recipe.ipex is not None:
            # IPEX rewrites the model and its optimizer before DDP wraps the model.
            model, optimizer = recipe.ipex(model, optimizer)
        if self.spec.distributed:
            device = self.place.device
            ddp = nn.parallel.DistributedDataParallel(
                model, device_ids=[device.index] if device.type == "cuda" else None,
                bucket_cap_mb=self.option_value(self.spec, "bucket_mb"),
                gradient_as_bucket_view=True, init_sync=False)
            register_compression(ddp, self.option_value(self.spec, "compression"))
            model = ddp
        self.model, self.optimizer = recipe.compiled(model), optimizer

    def step(self, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return data_parallel_step(self, inputs, targets)

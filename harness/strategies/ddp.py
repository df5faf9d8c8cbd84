"""ddp: DistributedDataParallel: gradients allreduced in buckets, overlapped with the backward
pass, optionally compressed (fp16, bf16, PowerSGD hooks)."""
from __future__ import annotations

from typing import ClassVar

import torch
from torch import nn

from harness.core.errors import UsageError
from harness.spec.specs import OPTION_FIELDS, RunSpec
from harness.strategies import volumes
from harness.strategies.base import (
    STRATEGIES,
    Layers,
    Option,
    Strategy,
    broadcast_from_first,
)
from harness.strategies.compression import register_compression
from harness.strategies.steps import data_parallel_step
from harness.strategies.strategy_options import OVERLAP, field_option

# ddp's options are the run fields --bucket-mb and --compression (harness/spec/specs.py), which
# records kept as spec fields before strategies had options: declared there, read here.
BUCKET_MB = field_option(OPTION_FIELDS, "ddp", "bucket_mb", aliases=("bucket_cap_mb",))
COMPRESSION = field_option(OPTION_FIELDS, "ddp", "compression")


def compression_ratio(compression: str) -> float:
    """Bytes on the wire per fp32 gradient byte: a cast hook (fp16, bf16) sends each element
    at that precision's size (volumes.ELEMENT_BYTES); PowerSGD's depends on each gradient's
    shape (NotImplementedError)."""
    if compression == "none":
        return 1.0
    if compression not in volumes.ELEMENT_BYTES:
        raise NotImplementedError(f"the volume of compression {compression!r} depends on each "
                                  "gradient's shape")
    return volumes.ELEMENT_BYTES[compression] / volumes.PARAM_BYTES


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
    def traffic(cls, spec: RunSpec, param_bytes: float, layers: Layers = None
                ) -> dict[str, float]:
        ratio = compression_ratio(cls.option_value(spec, "compression"))
        return volumes.ddp(param_bytes * ratio, spec.world_size)

    def wrapped(self, model: nn.Module) -> nn.Module:
        """The model inside DistributedDataParallel with the run's bucket size and compression
        hook (the model itself without a process group)."""
        if not self.spec.distributed:
            return model
        device = self.place.device
        ddp = nn.parallel.DistributedDataParallel(
            model, device_ids=[device.index] if device.type == "cuda" else None,
            bucket_cap_mb=self.option_value(self.spec, "bucket_mb"),
            gradient_as_bucket_view=True, init_sync=False)
        register_compression(ddp, self.option_value(self.spec, "compression"))
        return ddp

    def setup(self) -> None:
        recipe = self.recipe
        model = recipe.build_model(compiled=False)  # compiled last, around the DDP wrapper
        if self.spec.distributed:
            broadcast_from_first(model)
        optimizer = recipe.build_optimizer(model.parameters())
        if recipe.ipex is not None:
            # IPEX rewrites the model and its optimizer before DDP wraps the model.
            model, optimizer = recipe.ipex(model, optimizer)
        self.model, self.optimizer = recipe.compiled(self.wrapped(model)), optimizer

    def step(self, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return data_parallel_step(self, inputs, targets)

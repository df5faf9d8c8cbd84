"""localsgd: local SGD (periodic model averaging): every rank steps on its own gradients and
the parameters are averaged over all ranks every H steps (torch's model averaging)."""
from __future__ import annotations

from typing import Any, ClassVar

import torch

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


@STRATEGIES.register("localsgd")
class LocalSGD(Strategy):
    """Data parallel, periodic: parameters averaged every `period` (H) steps."""

    name = "localsgd"
    step_model = "harness.predict.dataparallel:localsgd"
    summary = "local SGD: ranks step alone, parameters averaged every H steps"
    family = "data parallel, periodic"
    engine = "torch.distributed.algorithms.model_averaging.PeriodicModelAverager"
    one_model = False  # each rank steps its own copy between averages
    options: ClassVar[tuple[Option, ...]] = (
        Option("period", int, 4, "steps between parameter averages (H)", minimum=1,
               aliases=("H",)),
        Option("subgroup", int, 1, "ranks of a subgroup that allreduce gradients every step "
               "(post-local SGD)", minimum=1,
               assumption="the run averages parameters only (subgroup=1): torch's "
               "post-local-SGD subgroups are not wired into it"),
        OVERLAP,
    )

    @classmethod
    def traffic(cls, spec: RunSpec, param_bytes: float, layers: Layers = None
                ) -> dict[str, float]:
        return volumes.localsgd(param_bytes, spec.world_size,
                                period=cls.option_value(spec, "period"),
                                subgroup=cls.option_value(spec, "subgroup"))

    def setup(self) -> None:
        recipe = self.recipe
        model = recipe.build_model()
        self.averager: Any = None
        if self.spec.distributed:
            from torch.distributed.algorithms.model_averaging.averagers import (
                PeriodicModelAverager,
            )

            broadcast_from_first(model)
            self.averager = PeriodicModelAverager(
                period=self.option_value(self.spec, "period"), warmup_steps=0)
        self.model = model
        self.optimizer = recipe.build_optimizer(model.parameters())

    def _average(self) -> None:
        assert self.model is not None
        if self.averager is None:
            return
        context = self.meter.kind("parameter") if self.meter is not None else None
        if context is None:
            self.averager.average_parameters(self.model.parameters())
            return
        with context:
            self.averager.average_parameters(self.model.parameters())

    def step(self, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return data_parallel_step(self, inputs, targets, after_step=self._average)

    @classmethod
    def replicas_match(cls, spec: RunSpec) -> bool:
        return spec.world_size > 1 and cls.option_value(spec, "period") == 1

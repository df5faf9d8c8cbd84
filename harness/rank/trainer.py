"""One rank's trainer: the backend and device, the recipe (model, optimizer, loss, precision)
and the strategy that distributes it; shared by the throughput and time-to-train loops."""
from __future__ import annotations

import time
from typing import Any

import torch
from torch import nn

from harness.comm.meter import CommMeter
from harness.core.errors import SkipRun
from harness.rank.faults import inject_fault, mistrain
from harness.rundir import RankResult
from harness.spec.specs import RunSpec
from harness.strategies.base import STRATEGIES, RankPlace, Recipe, Strategy
from harness.strategies.clock import straggle


class Trainer:
    """The training step of a spec on its backend, under its strategy."""

    def __init__(self, spec: RunSpec, rank: int = 0, local_rank: int = 0,
                 meter: CommMeter | None = None) -> None:
        from backends import COMPUTE_BACKENDS
        from workloads import get_workload

        self.spec = spec
        self.rank = rank
        self.workload = get_workload(spec.workload)
        self.preset = self.workload.preset(spec.size)
        self.backend = COMPUTE_BACKENDS.get(spec.backend)()
        self.device = self.backend.bind(local_rank, spec.share_gpu)
        self.settings = self.backend.configure(spec.threads, spec.precision)
        self.channels_last = spec.channels_last and self.workload.image_model
        self.meter = meter
        self.recipe = self._recipe()
        place = RankPlace(rank, spec.world_size, local_rank, self.device)
        self.strategy: Strategy = STRATEGIES.get(spec.strategy)(spec, place, self.recipe, meter)
        self.strategy.setup()
        mistrain(self.strategy.model, self.strategy.optimizer)  # DTBENCH_FAULT's test hooks
        # Dropout and data differ by rank; parameters were seeded alike before this.
        torch.manual_seed(spec.seed + rank)
        if meter is not None:
            meter.discard()  # set-up traffic (broadcasts, mesh creation) is no step's
        self.settings.update(channels_last=self.channels_last, compile=spec.compile,
                             strategy=spec.strategy, role=self.strategy.role,
                             **self.workload.run_settings(spec.size, self.device,
                                                          spec.precision))
        self.straggler_factor = (spec.straggler[1] if spec.straggler
                                 and spec.straggler[0] == rank else 1.0)
        self.strategy.straggler_factor = self.straggler_factor
        self.strategy.fault = lambda step: inject_fault(rank, step)

    def _recipe(self) -> Recipe:
        from backends.ipex import ipex_availability, ipex_optimize, ipex_version
        from workloads.optimizers import Warmup, configure

        spec, workload = self.spec, self.workload
        # Large-batch options (--optimizer, --lr-scaling, --warmup-epochs): the time-to-train
        # loop starts the warm-up once it knows an epoch's steps.
        self.warmup = Warmup(spec.warmup_epochs)
        optimizer_class, optimizer_kwargs = configure(
            *workload.optimizer_spec(spec.size), optimizer=spec.optimizer,
            lr_scaling=spec.lr_scaling, warmup=self.warmup, lars_eta=spec.lars_eta,
            batch_ratio=spec.global_batch / self.preset.default_batch(spec.backend))

        def build_model(compiled: bool = True) -> nn.Module:
            # The same seed on every rank: replicas (and shards) start from the same numbers.
            torch.manual_seed(spec.seed)
            model = workload.build_model(spec.size)
            unsupported = self.backend.model_unsupported(model, spec.precision)
            if unsupported:
                raise SkipRun(unsupported)
            return self.backend.prepare_model(model, self.device, self.channels_last,
                                              spec.compile and compiled)

        ipex = None
        self.settings["ipex"] = False
        if spec.ipex:
            # The runner skips a run that asks for IPEX where it is absent; a rank started
            # elsewhere (another node) still checks before the import that could exit it.
            available = ipex_availability(precision=spec.precision)
            if not available.available:
                raise SkipRun(f"--ipex on: {available.reason}")
            self.settings["ipex"] = ipex_version()

            def ipex(model: nn.Module, optimizer: Any) -> tuple[nn.Module, Any]:
                return ipex_optimize(model, optimizer, spec.precision)

        return Recipe(build_model=build_model,
                      build_optimizer=lambda params: optimizer_class(params, **optimizer_kwargs),
                      optimizer_class=optimizer_class, optimizer_kwargs=optimizer_kwargs,
                      loss=workload.loss, autocast=self.autocast, device=self.device,
                      grad_clip=self.preset.extra.get("grad_clip"),
                      scaler=self.backend.grad_scaler(spec.precision), compile=spec.compile,
                      ipex=ipex)

    @property
    def model(self) -> nn.Module:
        return self.strategy.eval_model()

    def autocast(self) -> Any:
        return self.backend.autocast(self.device, self.spec.precision)

    def to_device(self, inputs: torch.Tensor, targets: torch.Tensor,
                  ) -> tuple[torch.Tensor, torch.Tensor]:
        inputs = inputs.to(self.device, non_blocking=True)
        if self.channels_last and inputs.dim() == 4:
            inputs = inputs.contiguous(memory_format=torch.channels_last)
        return inputs, targets.to(self.device, non_blocking=True)

    def step(self, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """One step of the strategy; returns the detached loss without forcing a device sync.
        A straggler (--straggler RANK:FACTOR) idles (FACTOR-1) times the step's compute: inside
        the step where the strategy places it (Strategy.straggle), else after it."""
        started = time.perf_counter()
        loss = self.strategy.step(inputs, targets)
        if self.straggler_factor <= 1.0:
            return loss  # the clock's steps are not read: on a GPU that would wait for it
        steps = self.strategy.clock.steps
        if not (steps and "straggler_delay" in steps[-1]):
            phases = steps[-1] if steps else {}
            compute = sum(phases.get(name, 0.0) for name in ("forward", "backward",
                                                             "optimizer")) \
                or time.perf_counter() - started
            delay = (self.straggler_factor - 1.0) * compute
            straggle(delay, self.spec.straggler_work, self.device)
            if steps:
                steps[-1]["straggler_delay"] = delay
        return loss

    def data_shard(self) -> tuple[int, int]:
        return self.strategy.data_shard()

    def new_result(self) -> RankResult:
        return RankResult(rank=self.rank, world_size=self.spec.world_size,
                          device_name=self.backend.device_name(self.device),
                          settings=self.settings,
                          device_key=self.backend.device_key(self.device))

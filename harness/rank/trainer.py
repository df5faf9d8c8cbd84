"""The training step of a spec on its backend, shared by throughput and time-to-train loops."""
from __future__ import annotations

from typing import Any

import torch

from harness.core.spec import RunSpec
from harness.rank.result import RankResult


class Trainer:
    """The training step of a spec on its backend, shared by throughput and time-to-train."""

    def __init__(self, spec: RunSpec, rank: int = 0, local_rank: int = 0) -> None:
        from backends import COMPUTE_BACKENDS
        from backends.ipex import ipex_availability, ipex_optimize
        from workloads import get_workload

        self.spec = spec
        self.rank = rank
        self.workload = get_workload(spec.workload)
        self.preset = self.workload.preset(spec.size)
        self.backend = COMPUTE_BACKENDS.get(spec.backend)()
        self.device = self.backend.device(local_rank)
        self.settings = self.backend.configure(spec.threads, spec.precision)
        # The same seed on every rank: data parallelism starts from identical parameters.
        torch.manual_seed(spec.seed)
        model = self.workload.build_model(spec.size)
        channels_last = spec.channels_last and self.workload.image_model
        self.channels_last = channels_last
        self.model = self.backend.prepare_model(model, self.device, channels_last, spec.compile)
        self.comm_counter = None
        if spec.distributed:
            from harness.strategies.ddp import wrap_data_parallel

            self.model = wrap_data_parallel(self.model, spec, self.device)
            self.comm_counter = self.model.dtbench_comm_counter
        torch.manual_seed(spec.seed + rank)
        self.optimizer = self.workload.optimizer(self.model, spec.size)
        self.settings["ipex"] = False
        if spec.backend == "cpu" and ipex_availability().available:
            self.model, self.optimizer = ipex_optimize(self.model, self.optimizer, spec.precision)
            self.settings["ipex"] = True
        self.scaler = self.backend.grad_scaler(spec.precision)
        self.grad_clip = self.preset.extra.get("grad_clip")
        self.settings["channels_last"] = channels_last
        self.settings["compile"] = spec.compile

    def autocast(self) -> Any:
        return self.backend.autocast(self.device, self.spec.precision)

    def to_device(self, inputs: torch.Tensor, targets: torch.Tensor,
                  ) -> tuple[torch.Tensor, torch.Tensor]:
        inputs = inputs.to(self.device, non_blocking=True)
        if self.channels_last and inputs.dim() == 4:
            inputs = inputs.contiguous(memory_format=torch.channels_last)
        return inputs, targets.to(self.device, non_blocking=True)

    def step(self, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """One optimizer step; returns the detached loss without forcing a device sync."""
        self.optimizer.zero_grad(set_to_none=True)
        with self.autocast():
            loss = self.workload.loss(self.model(inputs), targets)
        if self.scaler is not None:
            self.scaler.scale(loss).backward()
            if self.grad_clip:
                self.scaler.unscale_(self.optimizer)
                torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.grad_clip)
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            loss.backward()
            if self.grad_clip:
                torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.grad_clip)
            self.optimizer.step()
        if self.comm_counter is not None:
            self.comm_counter.end_step()
        return loss.detach()

    def new_result(self) -> RankResult:
        return RankResult(rank=self.rank, world_size=self.spec.world_size,
                          device_name=self.backend.device_name(self.device),
                          settings=self.settings)

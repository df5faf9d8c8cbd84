"""hybrid: synchronous inside groups, asynchronous across them (Kurth et al. 2017, the HEP
CNN at 9600 nodes). The W workers form G groups; inside a group, gradients are allreduced
every step (a torch.distributed subgroup, new_group); each group's leader pushes the group's
mean gradient to the parameter servers (updates applied on arrival, paramserver.py's "async"
rule), fetches the parameters and broadcasts them to its group."""
from __future__ import annotations

from typing import Any, ClassVar

import torch
import torch.distributed as dist

from harness.comm.paramserver import HEADER_BYTES, Client, Server, shard_bounds
from harness.core.errors import UsageError
from harness.spec.specs import RunSpec
from harness.strategies import volumes
from harness.strategies.base import STRATEGIES, Layers, Option, clip_gradients
from harness.strategies.ps import (
    DAMP_STALE,
    MOMENTUM,
    SERVERS,
    ParameterServerStrategy,
    flat_checksum,
)
from harness.strategies.strategy_options import OVERLAP


@STRATEGIES.register("hybrid")
class Hybrid(ParameterServerStrategy):
    """Groups synchronous inside, asynchronous across (through the parameter servers)."""

    name = "hybrid"
    step_model = "harness.predict.servers:hybrid"
    tolerates_worker_loss = True  # a group that loses a member is dropped
    summary = "groups allreduce inside every step; group leaders update the servers " \
              "asynchronously (Kurth et al. 2017)"
    family = "hybrid: synchronous groups, asynchronous across"
    engine = ("torch.distributed new_group allreduce/broadcast inside groups; point-to-point "
              "to the parameter servers")
    options: ClassVar[tuple[Option, ...]] = (
        Option("groups", int, 2, "groups of workers (G); it must divide the workers",
               minimum=1, aliases=("G", "n_group")),
        SERVERS,
        MOMENTUM,
        DAMP_STALE,
        OVERLAP,
    )

    @classmethod
    def check(cls, spec: RunSpec) -> None:
        super().check(spec)
        groups, workers = int(cls.option_value(spec, "groups")), cls.workers(spec)
        if workers % groups:
            raise UsageError(f"strategy hybrid: groups={groups} does not divide the {workers} "
                             f"workers (world size {spec.world_size} minus "
                             f"{cls.servers(spec)} server(s))")

    @classmethod
    def pushers(cls, spec: RunSpec) -> int:
        return int(cls.option_value(spec, "groups"))  # one leader per group

    @classmethod
    def group_size(cls, spec: RunSpec) -> int:
        return cls.workers(spec) // int(cls.option_value(spec, "groups"))

    @classmethod
    def roles(cls, spec: RunSpec) -> list[str]:
        size = cls.group_size(spec)
        return ["leader" if r % size == 0 else "worker" for r in range(cls.workers(spec))] \
            + ["server"] * cls.servers(spec)

    @classmethod
    def traffic(cls, spec: RunSpec, param_bytes: float, layers: Layers = None
                ) -> dict[str, float]:
        return volumes.hybrid(param_bytes, spec.world_size,
                              groups=int(cls.option_value(spec, "groups")),
                              servers=cls.servers(spec), header_bytes=HEADER_BYTES)

    def setup(self) -> None:
        spec, place = self.spec, self.place
        model = self.recipe.build_model().to(memory_format=torch.contiguous_format)
        flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
        workers, servers, size = self.workers(spec), self.servers(spec), self.group_size(spec)
        bounds = shard_bounds(flat.numel(), servers)
        leaders = list(range(0, workers, size))
        # Every rank creates every subgroup, in the same order (torch's rule for new_group).
        self.groups = [dist.new_group(list(range(lead, lead + size))) for lead in leaders]
        self._steps = 0
        self.model = model
        if self.serves:
            lo, hi = bounds[place.rank - workers]
            self.server = Server(flat[lo:hi], self.server_optimizer, leaders, "async",
                                 meter=self.meter,
                                 damp_stale=self.damps_stale(spec))
            self.model = None
            return
        self.group = self.groups[place.rank // size]
        self.leader = leaders[place.rank // size]
        self.client = Client(range(workers, workers + servers), bounds, self.meter)
        self._flat = flat

    def _set_parameters(self) -> None:
        assert self.model is not None
        offset = 0
        with torch.no_grad():
            for parameter in self.model.parameters():
                count = parameter.numel()
                parameter.copy_(self._flat[offset:offset + count].view_as(parameter))
                offset += count

    def _kind(self, kind: str) -> Any:
        import contextlib

        return self.meter.kind(kind) if self.meter is not None else contextlib.nullcontext()

    def step(self, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        recipe, clock, model = self.recipe, self.clock, self.model
        assert model is not None and not self.serves
        leads = self.place.rank == self.leader
        with clock.phase("wait"):
            if leads:
                self.client.step = self._steps
                self.client.fetch(self._flat)
            with self._kind("parameter"):
                dist.broadcast(self._flat, src=self.leader, group=self.group)
            self._set_parameters()
        # clipped after the group's allreduce, on the group's mean gradient
        loss, gradient = self.local_gradient(inputs, targets, clip=False)
        parameters = list(model.parameters())
        with clock.phase("exchange"):
            with self._kind("gradient"):
                dist.all_reduce(gradient, group=self.group)
            gradient /= self.group_size(self.spec)
            if recipe.grad_clip:
                offset = 0
                for parameter in parameters:
                    parameter.grad = gradient[offset:offset + parameter.numel()] \
                        .view_as(parameter)
                    offset += parameter.numel()
                clip_gradients(model, recipe.grad_clip)
            self._steps += 1
            if leads:
                self.client.step = self._steps
                self.client.push(gradient)
        clock.end_step()
        return loss.detach()

    def model_to_evaluate(self) -> torch.nn.Module:
        """The servers' state, which holds the group's last push: the leader fetches it and
        the group receives it, as at the start of a step (every member evaluates at the same
        step, so the group's broadcast pairs up). The next step fetches again, so training
        goes on as without the evaluation."""
        model = self.eval_model()
        if self.place.rank == self.leader:
            self.client.step = self._steps
            self.client.fetch(self._flat)
        with self._kind("parameter"):
            dist.broadcast(self._flat, src=self.leader, group=self.group)
        self._set_parameters()
        self._evaluated = {"evaluated_checksum": flat_checksum(self._flat)}
        if self.place.rank == self.leader:
            self._evaluated["evaluated_version"] = self.client.version
        return model

    def step_stats(self) -> dict[str, Any]:
        if self.serves:
            return {**self.server.summary(), "shard_checksum": flat_checksum(self.server.param)}
        return {"steps": self._steps, "group": self.place.rank // self.group_size(self.spec),
                **getattr(self, "_evaluated", {})}

    def finish(self) -> None:
        if not self.serves and self.place.rank == getattr(self, "leader", -1):
            self.client.done()

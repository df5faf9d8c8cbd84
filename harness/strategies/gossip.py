"""gossip: decentralized SGD without a server (D-PSGD, Lian et al. 2017; Deep500's
ConsistentNeighbors): each rank steps on its own gradient, then averages its parameters with
its ring neighbours' (rank-1 and rank+1), every step."""
from __future__ import annotations

from typing import ClassVar

import torch
import torch.distributed as dist

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


def ring_neighbours(rank: int, world_size: int) -> list[int]:
    """The distinct ranks next to `rank` on a ring (one when there are two ranks)."""
    return sorted({(rank - 1) % world_size, (rank + 1) % world_size} - {rank})


@STRATEGIES.register("gossip")
class Gossip(Strategy):
    """Decentralized: parameters mixed with the ring neighbours after each step."""

    name = "gossip"
    step_model = "harness.predict.dataparallel:gossip"
    summary = "gossip SGD: each rank averages parameters with its ring neighbours every step"
    family = "decentralized"
    engine = "torch.distributed batch_isend_irecv between ring neighbours"
    replicas_agree = False  # neighbours agree only in the limit
    one_model = False  # each rank steps its own copy between averages
    options: ClassVar[tuple[Option, ...]] = (
        Option("neighbours", int, 2, "peers each rank exchanges parameters with every step",
               minimum=1, assumption="the run mixes with both ring neighbours (rank-1 and "
               "rank+1; one when there are two ranks)"),
    )

    @classmethod
    def traffic(cls, spec: RunSpec, param_bytes: float, layers: Layers = None
                ) -> dict[str, float]:
        return volumes.gossip(param_bytes, spec.world_size,
                              neighbours=int(cls.option_value(spec, "neighbours")))

    def setup(self) -> None:
        model = self.recipe.build_model().to(memory_format=torch.contiguous_format)
        if self.spec.distributed:
            broadcast_from_first(model)
        self.model = model
        self.optimizer = self.recipe.build_optimizer(model.parameters())
        self.peers = ring_neighbours(self.place.rank, self.spec.world_size)

    def _mix(self) -> None:
        assert self.model is not None
        if not self.peers:
            return
        parameters = list(self.model.parameters())
        flat = torch.cat([p.detach().reshape(-1) for p in parameters])
        received = [torch.empty_like(flat) for _ in self.peers]
        with self.meter.kind("parameter") if self.meter is not None else _nothing():
            # One batch: on NCCL, sends issued one at a time wait for receives queued
            # behind them (harness/comm/p2p.py batches them through the counting wrapper).
            ops = [dist.P2POp(dist.isend, flat, peer) for peer in self.peers]
            ops += [dist.P2POp(dist.irecv, buffer, peer)
                    for buffer, peer in zip(received, self.peers, strict=True)]
            for work in dist.batch_isend_irecv(ops):
                work.wait()
        mixed = (flat + sum(received)) / (1 + len(self.peers))
        offset = 0
        with torch.no_grad():
            for parameter in parameters:
                count = parameter.numel()
                parameter.copy_(mixed[offset:offset + count].view_as(parameter))
                offset += count

    def step(self, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return data_parallel_step(self, inputs, targets, after_step=self._mix)


def _nothing():  # type: ignore[no-untyped-def]
    import contextlib

    return contextlib.nullcontext()

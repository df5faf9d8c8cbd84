"""Communication on the critical path, for the parameter-server family: `priority=on` pulls the
parameters one tensor at a time in the order the next forward pass uses them and starts that
pass as soon as its first layer's tensors are in, each later layer waiting only for its own
(the pull half of P3, Jayarajan et al. 2019; ByteScheduler, Peng et al. 2019, orders and
slices the same way). Off, a worker waits for its whole shard from every server first.

The forward order is what the worker's own forward passes did: module pre-hooks note each
parameter's first use (the first step, before any is known, pulls in the parameters'
registration order). The worker sends each server its plan once it knows the order — the
pieces of the server's shard, one per tensor (a tensor cut by a shard boundary is two
pieces), in that order — and the server answers a sliced fetch piece by piece in it. Records
name the order used (`pull_order`) and, per step, the time from the fetch's start to the first
layer's forward (`forward_start`).
"""
from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn
from torch.nn.utils import vector_to_parameters

from harness.strategies.clock import PhaseClock
from harness.strategies.strategy_options import Option

PRIORITY = Option("priority", bool, False, "pull the parameters tensor by tensor in the next "
                  "forward pass's order and start it as its first layer's arrive (P3)")


class ForwardOrder:
    """Module pre-hooks on a model: the order of each parameter's first use in a forward
    pass, the time the pass began, and — during a sliced pull — a wait for a module's own
    parameters before it runs."""

    def __init__(self, model: nn.Module) -> None:
        self.names = [name for name, _ in model.named_parameters()]
        self.parameters = list(model.parameters())
        index = {id(p): i for i, p in enumerate(self.parameters)}
        self.order: list[int] | None = None
        self._seen: list[int] = []
        self.started: float | None = None
        self.pull: SlicedPull | None = None
        for module in model.modules():
            own = [index[id(p)] for p in module.parameters(recurse=False)]
            if own:
                module.register_forward_pre_hook(self._hook(own))

    def _hook(self, own: list[int]) -> Any:
        def before(module: nn.Module, args: Any) -> None:
            if self.started is None:
                self.started = time.perf_counter()
            for i in own:
                if self.order is None and i not in self._seen:
                    self._seen.append(i)
                if self.pull is not None:
                    self.pull.wait(i)
        return before

    def learn(self) -> None:
        """After a forward pass: keep its order (parameters it never used go last)."""
        if self.order is None and self._seen:
            self.order = self._seen + [i for i in range(len(self.parameters))
                                       if i not in self._seen]


def pull_plan(sizes: Sequence[int], order: Sequence[int], bounds: Sequence[tuple[int, int]]
              ) -> tuple[list[list[tuple[int, int]]], list[tuple[int, int, int, int]]]:
    """Each server's pieces of its shard (shard-relative [lo, hi)) in `order`, and every piece
    as (server, flat lo, flat hi, parameter index) in the order requested."""
    offsets = [0]
    for size in sizes:
        offsets.append(offsets[-1] + size)
    per_server: list[list[tuple[int, int]]] = [[] for _ in bounds]
    pieces = []
    for i in order:
        start, stop = offsets[i], offsets[i + 1]
        for server, (lo, hi) in enumerate(bounds):
            a, b = max(start, lo), min(stop, hi)
            if a < b:
                per_server[server].append((a - lo, b - lo))
                pieces.append((server, a, b, i))
    return per_server, pieces


class SlicedPull:
    """The receives of one sliced fetch: a parameter is copied in once its pieces are."""

    def __init__(self, works: dict[int, list[Any]], flat: torch.Tensor,
                 order: ForwardOrder, offsets: Sequence[int], clock: PhaseClock) -> None:
        self.works = works
        self.flat = flat
        self.forward = order
        self.offsets = offsets
        self.clock = clock

    def wait(self, i: int) -> None:
        pending = self.works.pop(i, None)
        if pending is None:
            return
        started = time.perf_counter()
        for work in pending:
            work.wait()
        self.clock.add("pull_wait", time.perf_counter() - started)
        parameter = self.forward.parameters[i]
        with torch.no_grad():
            parameter.copy_(self.flat[self.offsets[i]:self.offsets[i + 1]].view_as(parameter))

    def finish(self) -> None:
        for i in list(self.works):
            self.wait(i)


class Puller:
    """A worker's fetch at the start of a step: whole shards (priority off) or pieces in the
    forward order with the forward pass overlapping them (on)."""

    def __init__(self, model: nn.Module, client: Any, priority: bool, clock: PhaseClock) -> None:
        self.forward = ForwardOrder(model)
        self.client = client
        self.priority = priority
        self.clock = clock
        self.sizes = [p.numel() for p in self.forward.parameters]
        self.offsets = [0]
        for size in self.sizes:
            self.offsets.append(self.offsets[-1] + size)
        self.planned: list[int] | None = None
        self.pull_order: list[str] = []
        self.fetched_at: float | None = None

    def fetch(self, flat: torch.Tensor, model: nn.Module, least: int) -> None:
        """Start this step's fetch; with priority the forward pass completes it."""
        self.fetched_at = time.perf_counter()
        self.forward.started = None
        order = self.forward.order
        if not self.priority or order is None:
            self.client.fetch(flat, least)
            vector_to_parameters(flat, model.parameters())
            self.pull_order = [self.forward.names[i] for i in range(len(self.sizes))]
            return
        per_server, pieces = pull_plan(self.sizes, order, self.client.bounds)
        if self.planned != order:
            self.client.send_plans(per_server)
            self.planned = list(order)
        works = self.client.fetch_sliced(flat, least, pieces)
        by_parameter: dict[int, list[Any]] = {}
        for (_, _, _, i), work in zip(pieces, works, strict=True):
            by_parameter.setdefault(i, []).append(work)
        self.forward.pull = SlicedPull(by_parameter, flat, self.forward, self.offsets,
                                       self.clock)
        self.pull_order = [self.forward.names[i] for i in dict.fromkeys(p[3] for p in pieces)]

    def after_forward(self) -> None:
        """Every piece in (a parameter the pass did not use is waited for here), the order
        learnt, and the time from the fetch to the first layer's forward booked."""
        if self.forward.pull is not None:
            self.forward.pull.finish()
            self.forward.pull = None
        self.forward.learn()
        if self.fetched_at is not None and self.forward.started is not None:
            self.clock.add("forward_start", self.forward.started - self.fetched_at)
        self.fetched_at = None

    def summary(self) -> dict[str, Any]:
        return {"priority": self.priority, "pull_order": self.pull_order}

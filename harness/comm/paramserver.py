"""The parameter server of ps-sync, ps-async, downpour, ssp and hybrid: its wire protocol over
torch.distributed point-to-point (what it shares with Sandblaster's is said in wire.py), the
server's loop, and the worker's side.

Parameters are one flat vector, cut into K contiguous shards, one per server rank (DistBelief's
sharded server). A worker talks to every server: a request header (4 int64 words: operation,
the worker's step, the version its parameters were fetched at, and for a fetch the least
version it may be answered with) on TAGS.request, then for a push the gradient shard on
TAGS.gradient; a fetch is answered with a reply header (the server's version) on TAGS.reply and
the shard on TAGS.parameters. With priority (harness/strategies/priority.py) a worker first
sends its plan (PLAN: the pieces of the shard in its forward order, on TAG_PLAN) and a sliced
fetch is answered piece by piece in that order.

Two update rules:
- "async": every pushed gradient is applied on arrival through the server's optimizer
  (ps-async, downpour, hybrid's leaders); staleness = server version - version the gradient
  was computed at.
- "clock": gradients are summed per worker clock (its step), and clock c is applied as the
  mean of its gradients once every live worker pushed it (ps-sync; ssp, whose workers may run
  up to s clocks ahead of the slowest: a fetch asks for version >= step - s).
With `damp_stale`, a gradient of staleness t is scaled by 1/(1 + t) before it is applied or
summed (the staleness-dependent learning rate of Zhang et al. 2016): a fresh gradient keeps the
full rate, so ps-sync, ssp with s=0 and a single worker are unchanged.
"""
from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist

from harness.comm.meter import CommMeter
from harness.comm.wire import (
    Header,
    Tags,
    answer_fetch,
    arrivals,
    counted,
    lost_workers,
    receive_fetched,
    send,
    watching_lost,
)
from harness.core.stats import quantile
from harness.rundir import LostWorker

PUSH, FETCH, DONE, PLAN, FETCH_SLICED = 1, 2, 3, 4, 5
TAGS = Tags(request=11, gradient=12, reply=13, parameters=14)
TAG_PLAN = 15
HEADER = Header(4, torch.int64)
HEADER_BYTES = HEADER.nbytes


def shard_bounds(numel: int, servers: int) -> list[tuple[int, int]]:
    """[lo, hi) of each server's shard of a flat vector of `numel` elements (sizes differ by
    at most one)."""
    base, extra = divmod(numel, servers)
    bounds, lo = [], 0
    for index in range(servers):
        hi = lo + base + (1 if index < extra else 0)
        bounds.append((lo, hi))
        lo = hi
    return bounds


@dataclass
class ServerStats:
    """What a server measured: staleness of each applied gradient, update times."""

    staleness: list[int] = field(default_factory=list)
    by_worker: dict[int, list[int]] = field(default_factory=dict)  # in the order applied
    update_times: list[float] = field(default_factory=list)
    pushes: int = 0
    fetches: int = 0
    lost: list[dict[str, Any]] = field(default_factory=list)
    sent_order: list[tuple[int, int]] = field(default_factory=list)  # the last fetch's pieces


class Server:
    """One server rank: its shard, its optimizer, and the loop that serves the workers."""

    def __init__(self, shard: torch.Tensor, build_optimizer: Callable[[list[Any]], Any],
                 clients: Sequence[int], rule: str, staleness: float = 0.0,
                 meter: CommMeter | None = None, group: Any = None,
                 damp_stale: bool = False) -> None:
        if rule not in ("async", "clock"):
            raise ValueError(f"unknown update rule {rule!r}")
        self.param = torch.nn.Parameter(shard.detach().clone())
        self.optimizer = build_optimizer([self.param])
        self.clients = list(clients)
        self.rule = rule
        self.bound = staleness
        self.meter = meter
        self.group = group
        self.damp_stale = damp_stale
        self.version = 0
        self.stats = ServerStats()
        self.steps_of: dict[int, int] = {c: 0 for c in self.clients}
        self._done: set[int] = set()
        self._pending: list[tuple[int, int, bool]] = []  # (worker, least version, sliced)
        self._plans: dict[int, list[tuple[int, int]]] = {}  # a worker's pieces, in order
        self._clock_sum: dict[int, torch.Tensor] = {}
        # clock -> (worker, version its gradient was computed at) of each gradient summed
        self._clock_seen: dict[int, list[tuple[int, int]]] = {}
        self._started = 0.0

    # -- the loop -----------------------------------------------------------------------------
    def serve(self, progress: Callable[[str, int, int], None] | None = None,
              total_steps: int = 0) -> None:
        """Answer requests until every client said it is done (or, in a run that tolerates
        lost workers, was lost)."""
        self._started = time.perf_counter()
        if not watching_lost():
            while len(self._done) < len(self.clients):
                self._handle(*self._receive())
                if progress is not None:
                    progress("serve", min(self.steps_of.values(), default=0), total_steps)
            return
        # a thread receives (wire.arrivals), and this one also watches the run directory for
        # workers the supervisor saw die
        received = arrivals(self._receive, name="dtbench-ps-receive")
        while len(self._done) < len(self.clients):
            item = next(received)
            if item is not None:
                self._handle(*item)
                if progress is not None:
                    progress("serve", min(self.steps_of.values(), default=0), total_steps)
            for lost in lost_workers().values():
                self._lose(lost)

    def _receive(self) -> tuple[int, list[int], torch.Tensor | None]:
        """The next request from any worker, with its gradient for a push."""
        source, words = HEADER.receive_any(TAGS.request, self.group)
        gradient = None
        if words[0] == PUSH:
            gradient = torch.empty_like(self.param.data)
            dist.recv(gradient, src=source, tag=TAGS.gradient, group=self.group)
        elif words[0] == PLAN:  # the plan rides in the payload slot
            gradient = torch.empty(2 * words[2], dtype=torch.int64)
            dist.recv(gradient, src=source, tag=TAG_PLAN, group=self.group)
        return source, words, gradient

    def _handle(self, source: int, words: list[int], gradient: torch.Tensor | None) -> None:
        if source in self._done:
            return  # a late message of a worker already booked as lost
        op, step, version_seen, least = words
        self.steps_of[source] = max(self.steps_of.get(source, 0), step)
        if op == PUSH and gradient is not None:
            self._push(source, gradient, step, version_seen)
        elif op in (FETCH, FETCH_SLICED):
            self._pending.append((source, least, op == FETCH_SLICED))
        elif op == PLAN and gradient is not None:
            self._plans[source] = [tuple(pair) for pair in gradient.view(-1, 2).tolist()]
        elif op == DONE:
            self._done.add(source)
            self._complete_clocks()
        self._answer()

    def _lose(self, lost: LostWorker) -> None:
        """A worker died: it no longer counts toward a clock, and nobody waits for it."""
        worker = lost.rank
        if worker not in self.clients or worker in self._done:
            return
        self._done.add(worker)
        self.stats.lost.append({"rank": worker, "steps_pushed": self.steps_of.get(worker, 0),
                                "last_heartbeat_step": lost.steps,
                                "lost_at_s": time.perf_counter() - self._started,
                                "reason": lost.reason})
        self._complete_clocks()
        self._answer()

    def _push(self, source: int, gradient: torch.Tensor, step: int, version_seen: int) -> None:
        self.stats.pushes += 1
        if self.rule == "async":
            self._apply(self._damped(gradient, self.version - version_seen), [version_seen],
                        [source])
            return
        clock = step - 1  # a worker's push after its step-th step carries clock step-1
        # clock c is applied at version c: the gradient's staleness is then c - version_seen
        gradient = self._damped(gradient, clock - version_seen)
        if clock in self._clock_sum:
            self._clock_sum[clock] += gradient
        else:
            self._clock_sum[clock] = gradient
        self._clock_seen.setdefault(clock, []).append((source, version_seen))
        self._complete_clocks()

    def _damped(self, gradient: torch.Tensor, staleness: int) -> torch.Tensor:
        """The gradient at the rate its staleness earns: 1/(1 + staleness) with damp_stale."""
        if not self.damp_stale or staleness <= 0:
            return gradient
        return gradient / (1 + staleness)

    def _live(self) -> int:
        return len(self.clients) - len(self._done)

    def _complete_clocks(self) -> None:
        """Apply clock `version` while every live worker pushed it (and any clock pushed only by
        workers that have since finished)."""
        while self.version in self._clock_sum:
            seen = self._clock_seen[self.version]
            if len(seen) < self._live():
                return
            gradient = self._clock_sum.pop(self.version) / len(seen)
            pairs = self._clock_seen.pop(self.version)
            self._apply(gradient, [v for _, v in pairs], [w for w, _ in pairs])

    def _apply(self, gradient: torch.Tensor, versions_seen: list[int],
               sources: list[int]) -> None:
        self.stats.staleness.extend(self.version - v for v in versions_seen)
        for source, seen in zip(sources, versions_seen, strict=True):
            self.stats.by_worker.setdefault(source, []).append(self.version - seen)
        self.param.grad = gradient
        self.optimizer.step()
        self.param.grad = None
        self.version += 1
        self.stats.update_times.append(time.perf_counter() - self._started)

    def _answer(self) -> None:
        """Reply to every pending fetch whose least version the shard has reached."""
        waiting = []
        for worker, least, sliced in self._pending:
            if self.version >= least or worker in self._done:
                if worker not in self._done:
                    pieces = self._plans[worker] if sliced else [(0, self.param.numel())]
                    answer_fetch(self.meter, worker, HEADER.pack(self.version),
                                 (self.param.data[lo:hi] for lo, hi in pieces), TAGS,
                                 self.group)
                    self.stats.sent_order = list(pieces)
                    self.stats.fetches += 1
            else:
                waiting.append((worker, least, sliced))
        self._pending = waiting

    def summary(self) -> dict[str, Any]:
        """The server's statistics for the record."""
        stale = sorted(self.stats.staleness)
        elapsed = self.stats.update_times[-1] if self.stats.update_times else 0.0

        def pick(q: float) -> float:
            return quantile(stale, q) if stale else 0.0

        return {"staleness": stale, "staleness_mean": (sum(stale) / len(stale)) if stale
                else 0.0, "staleness_p50": pick(0.5), "staleness_p99": pick(0.99),
                "staleness_max": float(stale[-1]) if stale else 0.0,
                "staleness_by_worker": {str(k): v for k, v in sorted(
                    self.stats.by_worker.items())},
                "updates": self.version, "updates_per_s": self.version / elapsed
                if elapsed > 0 else 0.0, "pushes": self.stats.pushes,
                "fetches": self.stats.fetches, "worker_steps": dict(sorted(
                    (str(k), v) for k, v in self.steps_of.items())),
                "lost": self.stats.lost, "damp_stale": self.damp_stale,
                "sent_order": self.stats.sent_order,
                "momentum": self.optimizer.param_groups[0].get("momentum")}

    def rounds(self) -> float:
        """Steps per worker served (the mean over clients): the server's bytes per round are
        its bytes divided by this."""
        return sum(self.steps_of.values()) / max(1, len(self.steps_of))


class Client:
    """A worker's side: fetch the shards into its flat parameters, push its gradient."""

    def __init__(self, servers: Sequence[int], bounds: Sequence[tuple[int, int]],
                 meter: CommMeter | None, group: Any = None) -> None:
        self.servers = list(servers)
        self.bounds = list(bounds)
        self.meter = meter
        self.group = group
        self.version = 0
        self.step = 0

    def _request(self, server: int, op: int, least: int = 0) -> None:
        send(self.meter, "control", HEADER.pack(op, self.step, self.version, least), server,
             TAGS.request, self.group)

    def fetch(self, flat: torch.Tensor, least: int = 0) -> int:
        """Fill `flat` with every server's shard (version >= least); returns the version."""
        for server in self.servers:
            self._request(server, FETCH, least)
        self.version = receive_fetched(flat, self.servers, self.bounds, HEADER, TAGS,
                                       version_word=0, group=self.group)
        return self.version

    def send_plans(self, per_server: Sequence[Sequence[tuple[int, int]]]) -> None:
        """Tell each server the pieces of its shard a sliced fetch answers, in order."""
        for server, pieces in zip(self.servers, per_server, strict=True):
            plan = torch.tensor([v for piece in pieces for v in piece], dtype=torch.int64)
            with counted(self.meter, "control"):
                dist.send(HEADER.pack(PLAN, self.step, len(pieces)), dst=server,
                          tag=TAGS.request, group=self.group)
                dist.send(plan, dst=server, tag=TAG_PLAN, group=self.group)

    def fetch_sliced(self, flat: torch.Tensor, least: int,
                     pieces: Sequence[tuple[int, int, int, int]]) -> list[Any]:
        """Ask every server for its pieces (plans sent before); the receives of the pieces
        (server, flat lo, flat hi, parameter), posted in that order, for the caller to wait."""
        for server in self.servers:
            self._request(server, FETCH_SLICED, least)
        reply = HEADER.empty()
        versions = []
        for server in self.servers:
            dist.recv(reply, src=server, tag=TAGS.reply, group=self.group)
            versions.append(int(reply[0]))
        self.version = min(versions)
        return [dist.irecv(flat[lo:hi], src=self.servers[server], tag=TAGS.parameters,
                           group=self.group) for server, lo, hi, _ in pieces]

    def push(self, flat_gradient: torch.Tensor) -> None:
        for server, (lo, hi) in zip(self.servers, self.bounds, strict=True):
            self._request(server, PUSH)
            send(self.meter, "gradient", flat_gradient[lo:hi].contiguous(), server,
                 TAGS.gradient, self.group)

    def done(self) -> None:
        for server in self.servers:
            self._request(server, DONE)


def least_version(step: int, staleness: float) -> int:
    """The version a worker about to take step `step` (0-based) must see under bound s."""
    if math.isinf(staleness):
        return 0
    return max(0, step - int(staleness))

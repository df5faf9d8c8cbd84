"""Sandblaster's serving ranks: the coordinator, which hands out portions and runs the L-BFGS
iteration on the shards, and the shards, which hold the parameters and the L-BFGS vectors
(harness/strategies/lbfgs.py). Their wire protocol is harness/comm/sandblaster.py."""
from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.distributed as dist

from harness.comm.meter import CommMeter
from harness.comm.sandblaster import (
    ASK,
    ASSIGN,
    BYE,
    FETCH,
    FINISH,
    GATHER,
    HEADER_BYTES,
    PUBLISH,
    PUSH,
    QUIT,
    TAG_ANSWER,
    TAG_COORD,
    TAG_RESULT,
    TAGS,
    VERDICT,
    header,
    is_quit,
    receive_header,
)
from harness.comm.wire import LOST_CHECK_S, answer_fetch, arrivals, lost_workers, send
from harness.rundir import LostWorker
from harness.strategies.lbfgs import NONE, REDUCTIONS, Coordinator, ShardVectors
from harness.strategies.sandblaster_scheduler import PortionScheduler


class RemoteShards:
    """The coordinator's view of the shards: each command to every shard, in order."""

    def __init__(self, shards: Sequence[int], meter: CommMeter | None) -> None:
        self.shards = list(shards)
        self.meter = meter
        self.step = 0
        self.command_bytes = 0

    def run(self, op: int, a: int, b: int = NONE, c: int = NONE, d: int = NONE,
            alpha: float = 0.0) -> None:
        message = header(op, self.step, a, b, c, d, alpha=alpha)
        for shard in self.shards:
            send(self.meter, "control", message, shard, TAGS.request)
            self.command_bytes += HEADER_BYTES

    def reduce(self, op: int, a: int, b: int = NONE, c: int = NONE, d: int = NONE,
               alpha: float = 0.0) -> list[tuple[float, float]]:
        self.run(op, a, b, c, d, alpha)
        found = []
        for shard in self.shards:
            result = torch.empty(2, dtype=torch.float64)
            dist.recv(result, src=shard, tag=TAG_RESULT)
            found.append((float(result[0]), float(result[1])))
        return found


class CoordinatorLoop:
    """The coordinator rank: hands out portions (PortionScheduler), keeps the first copy of
    each, and once a batch is complete runs the L-BFGS iteration on the shards."""

    def __init__(self, workers: Sequence[int], shards: Sequence[int], portions: int,
                 backup_after: float, history: int, lr: float,
                 meter: CommMeter | None) -> None:
        self.workers = list(workers)
        self.meter = meter
        self.scheduler = PortionScheduler(portions, backup_after)
        self.shards = RemoteShards(shards, meter)
        self.lbfgs = Coordinator(history, lr)
        self.step = 0
        self.losses: dict[int, tuple[float, float]] = {}  # portion -> (samples, loss sum)
        self.batch_losses: dict[int, float] = {}
        self.parked: dict[int, int] = {}   # worker -> the step it asked work for
        self.gone: set[int] = set()        # said BYE, or lost
        self.lost: list[dict[str, Any]] = []
        self.started = time.perf_counter()
        self.outcomes: dict[str, int] = {}

    def _answer(self, worker: int, message: torch.Tensor) -> None:
        if worker not in self.gone:
            send(self.meter, "control", message, worker, TAG_ANSWER)

    def serve(self, progress: Callable[[str, int, int], None] | None = None,
              total_steps: int = 0) -> None:
        self.scheduler.begin(0)
        for item in arrivals(lambda: receive_header(TAG_COORD), self._timeout,
                             name="dtbench-sandblaster-receive"):
            if item is not None:
                self._handle(*item)
            for rank, lost in sorted(lost_workers().items()):
                if rank in self.workers and rank not in self.gone:
                    self._lose(lost)
            if self.scheduler.complete:
                self._finish_batch()
                if progress is not None:
                    progress("serve", self.step, total_steps)
            self._assign()
            if self.gone >= set(self.workers):
                break
        self.shards.run(QUIT, NONE)

    def _lose(self, lost: LostWorker) -> None:
        """A replica died: nobody waits for it, and its portions go to the others."""
        self.gone.add(lost.rank)
        self.parked.pop(lost.rank, None)
        handed_back = self.scheduler.lose(lost.rank)
        self.lost.append({"rank": lost.rank, "last_heartbeat_step": lost.steps,
                          "lost_at_s": time.perf_counter() - self.started,
                          "batch": self.step, "portions_handed_back": handed_back,
                          "reason": lost.reason})

    def _handle(self, worker: int, words: list[float]) -> None:
        op, step = int(words[0]), int(words[1])
        if op == FINISH:
            keep = step == self.step and self.scheduler.finish(worker, int(words[2]))
            if keep:
                self.losses[int(words[2])] = (words[3], words[-1])
            elif step != self.step:
                self.scheduler.finish_late(worker)
            self._answer(worker, header(VERDICT, step, int(keep)))
        elif op == ASK and step == self.step:
            if words[2] >= 0:
                self.scheduler.confirm(worker, int(words[2]))
            self.parked[worker] = step
        elif op == ASK:  # that batch is over (the worker's copy was a late one)
            loss = self.batch_losses.get(step, self.batch_losses.get(self.step - 1, math.nan))
            self._answer(worker, header(ASSIGN, step, -1, alpha=loss))
        elif op == BYE:
            self.gone.add(worker)
            self.parked.pop(worker, None)

    def _assign(self) -> None:
        for worker in list(self.parked):
            portion, _ = self.scheduler.assign(worker)
            if portion is not None:
                del self.parked[worker]
                self._answer(worker, header(ASSIGN, self.step, portion))

    def _timeout(self) -> float:
        """Until a parked worker is due a backup copy, or the next look for lost workers."""
        due = min((self.scheduler.due(w) for w in self.parked), default=math.inf)
        return min(LOST_CHECK_S, max(1e-3, due - time.perf_counter()))

    def _finish_batch(self) -> None:
        portions = self.scheduler.portions
        samples = sum(n for n, _ in self.losses.values())
        loss = self.batch_losses[self.step] = sum(s for _, s in self.losses.values()) / samples
        for worker in list(self.parked):
            self._answer(worker, header(ASSIGN, self.step, -1, alpha=loss))
        self.parked.clear()
        self.shards.step = self.step
        self.shards.run(GATHER, portions, int(samples))
        outcome = self.lbfgs.iterate(self.shards)
        self.outcomes[outcome] = self.outcomes.get(outcome, 0) + 1
        self.step += 1
        self.shards.run(PUBLISH, self.step)
        self.scheduler.begin(self.step)
        self.losses = {}

    def summary(self) -> dict[str, Any]:
        steps = max(1, self.step)
        return {**self.scheduler.summary(), "batches": self.step,
                "commands_per_batch": self.lbfgs.commands / steps,
                "command_bytes_per_batch": self.shards.command_bytes / steps,
                "iterations": dict(sorted(self.outcomes.items())),
                "lost": self.lost}


class ShardLoop:
    """A parameter-server shard: its slice of the parameters and of the L-BFGS vectors, the
    portions' gradients summed per batch, the coordinator's commands run in order."""

    def __init__(self, x: torch.Tensor, coordinator: int, meter: CommMeter | None) -> None:
        self.vectors = ShardVectors(x)
        self.coordinator = coordinator
        self.meter = meter
        self.version = 0
        self.commands: list[list[float]] = []
        self.pending: list[tuple[int, int]] = []              # (worker, least version)
        self.sums: dict[int, torch.Tensor] = {}               # step -> gradient sum
        self.seen: dict[int, set[int]] = {}                   # step -> portions in it
        self.duplicates = 0
        self.gathered = 0                                     # batches gathered

    def _receive(self) -> tuple[int, list[float], torch.Tensor | None]:
        source, words = receive_header(TAGS.request)
        gradient = None
        if int(words[0]) == PUSH:
            gradient = torch.empty_like(self.vectors[0])
            dist.recv(gradient, src=source, tag=TAGS.gradient)
        return source, words, gradient

    def serve(self) -> None:
        for item in arrivals(self._receive, last=is_quit, name="dtbench-sandblaster-receive"):
            if item is not None:
                source, words, gradient = item
                if source == self.coordinator:
                    self.commands.append(words)
                else:
                    self._from_worker(source, words, gradient)
            gone = lost_workers()
            self.pending = [(w, least) for w, least in self.pending if w not in gone]
            if self._run_commands():
                return
            self._answer()

    def _from_worker(self, worker: int, words: list[float], gradient: torch.Tensor | None
                     ) -> None:
        op, step = int(words[0]), int(words[1])
        if op == FETCH:
            self.pending.append((worker, int(words[2])))
        elif op == PUSH and gradient is not None and step >= self.gathered:
            portion = int(words[2])
            seen = self.seen.setdefault(step, set())
            if portion in seen:
                self.duplicates += 1
                return
            seen.add(portion)
            if step in self.sums:
                self.sums[step] += gradient
            else:
                self.sums[step] = gradient

    def _run_commands(self) -> bool:
        """Run the queued commands in order until one must wait; True after QUIT."""
        while self.commands:
            words = self.commands[0]
            op = int(words[0])
            if op == GATHER:
                step, portions, samples = int(words[1]), int(words[2]), int(words[3])
                if len(self.seen.get(step, ())) < portions:
                    return False
                torch.div(self.sums.pop(step), samples, out=self.vectors[1])
                self.seen.pop(step)
                self.gathered = step + 1
            elif op == PUBLISH:
                self.version = int(words[2])
            elif op == QUIT:
                return True
            else:
                result = self.vectors.execute(op, *(int(w) for w in words[2:6]),
                                              alpha=words[-1])
                if op in REDUCTIONS and result is not None:
                    send(self.meter, "control", torch.tensor(result, dtype=torch.float64),
                         self.coordinator, TAG_RESULT)
            self.commands.pop(0)
        return False

    def _answer(self) -> None:
        waiting = []
        for worker, least in self.pending:
            if self.version >= least:
                answer_fetch(self.meter, worker, header(FETCH, self.version), [self.vectors[0]],
                             TAGS)
            else:
                waiting.append((worker, least))
        self.pending = waiting

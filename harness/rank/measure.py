"""The measured steps of a throughput run, and the stop decision every rank takes after each.

On a GPU nothing here waits for the device to finish its newest work: a step's time, its
phases and the stop decision are read a few steps late (the device's timer `lag`), so each
step is queued while the device still runs the one before, as in training. One synchronise
at the end reads the rest.
"""
from __future__ import annotations

import contextlib
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import torch

from backends.base import StepTimer
from harness.rank import adaptive
from harness.spec.specs import RunSpec

# --speed-probe: PROBE_PRODUCTS products of square matrices of PROBE_SIDE, a few milliseconds
# on two cores (a small share of a step), big enough to run on every intra-op thread.
PROBE_SIDE, PROBE_PRODUCTS = 384, 4


class SpeedProbe:
    """The machine's speed at a moment (--speed-probe): the seconds a fixed matrix product
    takes on the rank's device and threads, timed after each measured step, outside it. On a
    shared VM a step's time moves with its neighbours' load from one second to the next; the
    probe timed beside each step moves with it, so step / probe is steadier (docs/measurements/
    ci-gate.md)."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.operand = torch.full((PROBE_SIDE, PROBE_SIDE), 1.0 / PROBE_SIDE, device=device)
        self.product = torch.empty_like(self.operand)

    def time(self) -> float:
        """One product untimed (it wakes the intra-op threads and brings the operands into
        cache, whatever the step left them doing), then PROBE_PRODUCTS timed."""
        cuda = self.device.type == "cuda"
        torch.mm(self.operand, self.operand, out=self.product)
        if cuda:
            torch.cuda.synchronize(self.device)
        started = time.perf_counter()
        for _ in range(PROBE_PRODUCTS):
            torch.mm(self.operand, self.operand, out=self.product)
        if cuda:
            torch.cuda.synchronize(self.device)
        return time.perf_counter() - started


# What a stop decision's broadcast carries besides the cut: the reason, by number.
REASONS = ("", adaptive.TARGET_MET, adaptive.BUDGET_SPENT)


class Decider:
    """Rank 0's decision after each measured step, which every rank takes: no rank may stop
    alone, since the others would wait in its next step's collectives. One broadcast a step,
    outside the step's time and its counted bytes (the time budget may end a run at any step).

    On a device (timer lag > 0) rank 0 decides from the settled step times, and each rank
    reads the broadcast word `lag` steps after it was sent, from a pinned host copy whose
    event the device passed long before: all ranks stop after the same step, and none waits
    for the device to drain. On the host the word is read at once, as the step times are."""

    def __init__(self, spec: RunSpec, rank: int, device: torch.device, timer: StepTimer,
                 outside: Callable[[], contextlib.AbstractContextManager[None]]) -> None:
        self.spec = spec
        self.rank = rank
        self.timer = timer
        self.outside = outside
        self.lag = timer.lag
        self.device = device if spec.comm == "nccl" else torch.device("cpu")
        self._sent: deque[tuple[torch.Tensor, Any]] = deque()

    def own(self, elapsed: float) -> adaptive.Decision:
        """Rank 0's own decision now (every other rank's is 'go on')."""
        spec = self.spec
        if self.rank != 0:
            return adaptive.Decision(False, 0)
        assert spec.target_ci is not None and spec.max_time is not None
        return adaptive.decide(self.timer.settled(), elapsed, min_steps=spec.steps,
                               target=spec.target_ci / 100.0, max_time=spec.max_time)

    def after(self, elapsed: float) -> adaptive.Decision:
        decision = self.own(elapsed)
        if self.spec.world_size == 1:
            return decision
        import torch.distributed as dist

        word = torch.tensor([int(decision.stop), decision.discard,
                             REASONS.index(decision.reason)], dtype=torch.int64,
                            device=self.device)
        with self.outside():
            dist.broadcast(word, src=0)
        if self.lag == 0:
            return self._decode(word.cpu())
        self._sent.append(self._copy_to_host(word))
        if len(self._sent) <= self.lag:
            return adaptive.Decision(False, 0)
        host, arrived = self._sent.popleft()
        if arrived is not None:
            arrived.synchronize()
        return self._decode(host)

    def _copy_to_host(self, word: torch.Tensor) -> tuple[torch.Tensor, Any]:
        """The word on the host without waiting: from a GPU a non-blocking copy into pinned
        memory and the event that says it arrived; a host word as it is."""
        if word.device.type != "cuda":
            return word.clone(), None
        host = torch.empty(word.shape, dtype=word.dtype, pin_memory=True)
        host.copy_(word, non_blocking=True)
        arrived = torch.cuda.Event()
        arrived.record(torch.cuda.current_stream(word.device))
        return host, arrived

    @staticmethod
    def _decode(word: torch.Tensor) -> adaptive.Decision:
        stop, discard, reason = (int(v) for v in word)
        return adaptive.Decision(bool(stop), discard, REASONS[reason])


def measure(spec: RunSpec, device: torch.device, timer: StepTimer, decider: Decider,
            step: Callable[[int], torch.Tensor], after: Callable[[int], None],
            progress: Callable[[str, int, int], None]
            ) -> tuple[torch.Tensor, int, adaptive.Decision]:
    """Run measured steps until `spec.steps` (fixed) or rank 0's decision (adaptive):
    `step(index)` returns the step's detached loss (timed, with its batch), `after(index)`
    what follows it untimed. Returns the losses tensor, the step count and the decision."""
    # Losses go into one preallocated tensor: keeping per-step loss tensors fragments the
    # heap (and each can pin a large buffer), growing memory step by step.
    losses = torch.empty(spec.steps if spec.target_ci is None else max(spec.steps, 64),
                         device=device)
    decision = adaptive.Decision(True, 0, adaptive.FIXED)
    started = time.perf_counter()
    index = 0
    while True:
        if index == losses.numel():  # an adaptive run past its room: double it
            losses = torch.cat([losses, torch.empty_like(losses)])
        timer.start()  # a step pays the wait for its batch, as training does
        losses[index] = step(index)
        timer.stop()
        after(index)
        index += 1
        if spec.target_ci is None:
            progress("measure", index, spec.steps)
            if index == spec.steps:
                break
            continue
        decision = decider.after(time.perf_counter() - started)
        progress("measure", index, index if decision.stop else max(index + 1, spec.steps))
        if decision.stop:
            break
    return losses, index, decision

"""How long each phase of a training step took, on the host or on the rank's GPU."""
from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

# Steps a GPU clock leaves unresolved behind the newest: resolving a step waits only for its
# own last event, which the device finished while the later steps were queued, so the host
# never drains the device's queue (a synchronise per step would start each step on an idle
# GPU and add the launch latency that training hides).
LAG_STEPS = 2
# The square matrices a busy straggler multiplies: big enough to run on every intra-op thread,
# small enough (about a millisecond on two cores) to end near the time it was given.
BUSY_SIDE = 256


def straggle(seconds: float, work: str, device: torch.device) -> None:
    """A straggler's extra time (--straggler, --straggler-work): asleep (`idle`), or computing
    matrix products on the rank's device and threads until it is spent (`busy`, as a slower
    code path would, so the process's CPU time grows with it)."""
    if seconds <= 0.0:
        return
    if work != "busy":
        time.sleep(seconds)
        return
    operand = torch.ones(BUSY_SIDE, BUSY_SIDE, device=device)
    product = torch.empty_like(operand)
    now = time.perf_counter()
    end, last = now + seconds, 0.0
    while now + last / 2 < end:  # stop where one more product would overshoot more than not
        torch.mm(operand, operand, out=product)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        ended = time.perf_counter()
        last, now = ended - now, ended


@dataclass
class _Step:
    """One step's phases: host seconds already known, device events still to be read."""

    seconds: dict[str, float] = field(default_factory=dict)
    events: list[tuple[str, Any, Any]] = field(default_factory=list)

    def resolve(self) -> dict[str, float]:
        for name, start, end in self.events:
            end.synchronize()
            self.seconds[name] = self.seconds.get(name, 0.0) + start.elapsed_time(end) / 1000.0
        self.events = []
        return self.seconds


@dataclass
class PhaseClock:
    """Seconds per phase of each step (forward, backward, wait, optimizer, ...).

    On the host a phase is the wall time of its block. On a GPU that time would be the time to
    launch its kernels, so a phase there is the time between two events recorded on the
    device's stream at the block's edges (what the device spent on the phase's work and on
    waiting for it). Those events are read LAG_STEPS steps later, or when `steps` or
    `so_far` asks (which waits for the device)."""

    device: torch.device | None = None
    _done: list[dict[str, float]] = field(default_factory=list)
    _unresolved: list[_Step] = field(default_factory=list)
    _current: _Step = field(default_factory=_Step)

    @property
    def on_device(self) -> bool:
        return self.device is not None and self.device.type == "cuda"

    def _event(self) -> Any:
        event = torch.cuda.Event(enable_timing=True)
        event.record(torch.cuda.current_stream(self.device))
        return event

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        if self.on_device:
            start = self._event()
            try:
                yield
            finally:
                self._current.events.append((name, start, self._event()))
            return
        started = time.perf_counter()
        try:
            yield
        finally:
            self.add(name, time.perf_counter() - started)

    def add(self, name: str, seconds: float) -> None:
        self._current.seconds[name] = self._current.seconds.get(name, 0.0) + seconds

    def so_far(self, *names: str) -> float:
        """The seconds the current step has spent so far in the named phases (on a GPU this
        waits for the device to finish them)."""
        seconds = self._current.resolve()
        return sum(seconds.get(name, 0.0) for name in names)

    def end_step(self) -> None:
        """Close the step; on a GPU, read the one LAG_STEPS behind it (no wait for this one)."""
        self._unresolved.append(self._current)
        self._current = _Step()
        while len(self._unresolved) > (LAG_STEPS if self.on_device else 0):
            self._done.append(self._unresolved.pop(0).resolve())

    @property
    def steps(self) -> list[dict[str, float]]:
        """Every closed step's phases (this reads, and so waits for, the pending ones). The
        list is the clock's own: a caller may add a figure to a step it holds."""
        while self._unresolved:
            self._done.append(self._unresolved.pop(0).resolve())
        return self._done

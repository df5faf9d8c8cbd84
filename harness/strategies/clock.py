"""How long each phase of a training step took, on the host or on the rank's GPU."""
from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch


@dataclass
class PhaseClock:
    """Seconds per phase of each step (forward, backward, wait, optimizer, ...).

    On the host a phase is the wall time of its block. On a GPU that time would be the time to
    launch its kernels, so a phase there is the time between two events recorded on the
    device's current stream at the block's edges (what the device spent on the phase's work
    and on waiting for it), resolved when the step ends or when a figure is asked for."""

    device: torch.device | None = None
    steps: list[dict[str, float]] = field(default_factory=list)
    _current: dict[str, float] = field(default_factory=dict)
    _pending: list[tuple[str, Any, Any]] = field(default_factory=list)

    @property
    def on_device(self) -> bool:
        return self.device is not None and self.device.type == "cuda"

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        if self.on_device:
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            try:
                yield
            finally:
                end.record()
                self._pending.append((name, start, end))
            return
        started = time.perf_counter()
        try:
            yield
        finally:
            self._current[name] = self._current.get(name, 0.0) + time.perf_counter() - started

    def add(self, name: str, seconds: float) -> None:
        self._current[name] = self._current.get(name, 0.0) + seconds

    def _resolve(self) -> None:
        """Wait for each pending phase's end on the device, then file its time."""
        for name, start, end in self._pending:
            end.synchronize()
            self.add(name, start.elapsed_time(end) / 1000.0)
        self._pending = []

    def so_far(self, *names: str) -> float:
        """The seconds the current step has spent so far in the named phases (on a GPU this
        waits for the device to finish them)."""
        self._resolve()
        return sum(self._current.get(name, 0.0) for name in names)

    def end_step(self) -> None:
        self._resolve()
        self.steps.append(self._current)
        self._current = {}

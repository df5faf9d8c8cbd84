"""A progress display on stderr: rewritten in place on a terminal, sparse lines otherwise."""
from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    """Shows which run of how many is going and how far its current phase is."""

    def __init__(self, total_runs: int, stream: TextIO | None = None, enabled: bool = True,
                 interval_s: float = 10.0) -> None:
        self.total_runs = total_runs
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.interactive = enabled and hasattr(self.stream, "isatty") and self.stream.isatty()
        self.interval_s = interval_s
        self.index = 0
        self.label = ""
        self._last = 0.0
        self._phase_started = 0.0

    def begin(self, label: str) -> None:
        self.index += 1
        self.label = label
        self._last = 0.0
        self._phase_started = time.monotonic()
        self._write(f"[{self.index}/{self.total_runs}] {label}", force=True)

    def update(self, phase: str, done: int, total: int) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if done == 1:
            self._phase_started = now
        rate = ""
        if done > 1 and now > self._phase_started:
            rate = f" {(now - self._phase_started) / (done - 1):.2f} s/step"
        finished = done == total
        if not self.interactive and not finished and now - self._last < self.interval_s:
            return
        self._last = now
        self._write(f"[{self.index}/{self.total_runs}] {self.label}: {phase} {done}/{total}{rate}",
                    force=True)

    def end(self, outcome: str) -> None:
        self._write(f"[{self.index}/{self.total_runs}] {self.label}: {outcome}", force=True,
                    final=True)

    def _write(self, text: str, force: bool = False, final: bool = False) -> None:
        if not self.enabled:
            return
        if self.interactive:
            end = "\n" if final else ""
            self.stream.write("\r\033[K" + text + end)
        elif force or final:
            self.stream.write(text + "\n")
        self.stream.flush()

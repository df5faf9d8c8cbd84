"""SIGINT, SIGTERM and SIGHUP as one exception, so a suite stops cleanly: ranks terminated,
completed records kept, nothing half-written (stores block the signals while they write)."""
from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Interrupted(KeyboardInterrupt):
    """The user (or a scheduler) asked dtbench to stop; exit code 128 + the signal number."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        self.signal_name = signal.Signals(signum).name
        self.summary = f"interrupted by {self.signal_name}"
        super().__init__(self.signal_name)

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


@contextmanager
def stop_signals_raise() -> Iterator[None]:
    """Within the block the first stop signal raises Interrupted; later ones only say that
    clean-up is under way, so a second Ctrl-C cannot leave ranks behind."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    raised = False

    def handler(signum: int, frame: FrameType | None) -> None:
        nonlocal raised
        if raised:
            print(f"dtbench: {signal.Signals(signum).name} again: still stopping ranks and "
                  "keeping completed records", file=sys.stderr)
            return
        raised = True
        raise Interrupted(signum)

    previous = {sig: signal.signal(sig, handler) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


@contextmanager
def stop_signals_deferred() -> Iterator[None]:
    """Hold stop signals until the block is done (a record and its index row are written
    together or not at all); a signal that arrived meanwhile is delivered afterwards.

    The handlers are swapped, not the signal mask: a process-directed signal may land on any
    thread (torch's workers, multiprocessing's helpers), and Python then runs the main
    thread's handler whatever the main thread's mask says.
    """
    if threading.current_thread() is not threading.main_thread():
        yield  # handlers run in the main thread only: an interrupt cannot land in this block
        return
    pending: list[int] = []
    previous = {sig: signal.signal(sig, lambda signum, frame: pending.append(signum))
                for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, signal.SIG_DFL if old is None else old)
        for sig in dict.fromkeys(pending):
            signal.raise_signal(sig)

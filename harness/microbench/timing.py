"""The one timing loop of the microbenchmarks: warm-up calls, then timed calls until both a
minimum count and a time budget are met (or a maximum count is reached)."""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch


def time_calls(fn: Callable[[], Any], backend: Any, device: torch.device, *, warmup: int = 0,
               min_reps: int = 1, max_reps: int | None = None,
               budget_s: float = 0.0) -> list[float]:
    """Seconds per call of `fn`, timed with the backend's step timer (time.perf_counter on the
    CPU, events on CUDA). Warm-up calls are not timed; after `min_reps` timed calls, calls go on
    while less than `budget_s` has passed since timing began, up to `max_reps`."""
    for _ in range(warmup):
        fn()
    backend.synchronize(device)
    timer = backend.timer(device)
    limit = max_reps if max_reps is not None else max(min_reps, 1)
    started = time.perf_counter()
    count = 0
    while count < limit and (count < min_reps or time.perf_counter() - started < budget_s):
        timer.start()
        fn()
        timer.stop()
        count += 1
    return timer.samples()

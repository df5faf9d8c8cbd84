"""A rank's energy reading around its measured steps: every domain its counter has (a GPU
board, a host's CPU packages and DRAM), the window's seconds and steps, what the counter
covers; or why there is none."""
from __future__ import annotations

import time
from typing import Any

from harness.rundir import RankResult


class EnergyWindow:
    """Opened before the measured steps (after the device finished the warm-up), closed after
    them (after the device finished them)."""

    def __init__(self, backend: Any, device: Any) -> None:
        self.backend = backend
        self.meter = backend.energy_meter(device)
        self.start = self.meter.by_domain() if self.meter is not None else None
        self.started = time.perf_counter()

    def close(self, result: RankResult, steps: int) -> None:
        if self.meter is None or self.start is None:
            result.energy_reason = self.backend.energy_unavailable_reason()
            return
        try:
            end = self.meter.by_domain()
        finally:
            self.meter.close()
        result.energy_window_s = time.perf_counter() - self.started
        result.energy_domains = {key: end[key] - self.start.get(key, 0.0) for key in end}
        result.energy_joules = sum(result.energy_domains.values())
        result.energy_steps = steps
        result.energy_covers = self.meter.covers

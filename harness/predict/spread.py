"""The spread that prices the wait for the slowest of a step's synchronous ranks: the one the
user states (--step-cv), else one estimated robustly from enough measured steps, else none,
and a line saying which (harness.predict.calibration.ComputeCalibration.step prices it)."""
from __future__ import annotations

import math
import statistics
from dataclasses import replace

from harness.predict.calibration import ComputeCalibration

# Steps a calibration needs before a spread is estimated from them: fewer say nothing of the
# tail the slowest of many ranks reaches (a run of 8 steps on a shared host once priced a
# free network's ddp at 0.35 efficiency at 1,024 ranks).
MIN_SPREAD_STEPS = 30


def step_spread(samples: tuple[float, ...] | list[float]) -> float | None:
    """The steps' coefficient of variation, estimated robustly: 1.4826 × the median absolute
    deviation of successive differences, over √2 (a drift moves one difference, a host's
    hiccup a few: neither moves the median), over the median step; None from fewer than
    MIN_SPREAD_STEPS steps."""
    if len(samples) < MIN_SPREAD_STEPS:
        return None
    middle = statistics.median(samples)
    if middle <= 0:
        return None
    differences = [b - a for a, b in zip(samples[:-1], samples[1:], strict=True)]
    center = statistics.median(differences)
    sigma = 1.4826 * statistics.median(abs(d - center) for d in differences) / math.sqrt(2)
    return sigma / middle


def with_spread(found: ComputeCalibration, stated: float = 0.0) -> ComputeCalibration:
    """The calibration with the spread that prices the slowest rank's wait, and what it is:
    the one stated (--step-cv), else one estimated from enough measured steps, else none."""
    if stated > 0:
        return replace(found, cv=stated, spread=f"step-time spread {stated:.3g} stated "
                       "(--step-cv)")
    count = len(found.step_samples)
    estimated = step_spread(found.step_samples)
    if estimated is None:
        why = (f"{count} measured step(s), fewer than the {MIN_SPREAD_STEPS} a spread is "
               "estimated from" if count else "no measured steps")
        return replace(found, cv=0.0, spread=f"not priced: {why} (--step-cv states one)")
    return replace(found, cv=estimated, spread=f"step-time spread {estimated:.3g}, estimated "
                   f"robustly from {count} measured steps (MAD of successive differences)")

"""The one definition of each timing metric that more than one producer writes: the training
collectors (harness/collectors/timing.py) and the pytest-benchmark reader
(harness/store/pytest_benchmark.py) build step_time and throughput here, so that the two
cannot drift apart (docs/spec/metrics.md states the same formulas)."""
from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from harness.records.record import Metric, measured

THROUGHPUT_AGGREGATION = "global_batch / median step_time"

# Rates over the median step: each value is a constant over the median step time, and each of
# its per-step samples the same constant over that step's time. Their center is therefore the
# reciprocal of the median of the samples' reciprocals; the plain median of the rates differs
# from the value wherever the step count is even (it averages the two middle rates, not the
# two middle times).
OVER_MEDIAN_STEP = frozenset({"throughput", "tokens_per_s", "achieved_flops", "mfu"})


def center(name: str, samples: Sequence[float]) -> float:
    """What a metric's definition makes of its per-step samples: the value a record of those
    steps holds (synchronous runs), for any consumer that has only the samples (compare)."""
    values = [float(s) for s in samples]
    if name in OVER_MEDIAN_STEP and values and all(s > 0 for s in values):
        return 1.0 / statistics.median(1.0 / s for s in values)
    return statistics.median(values)


def step_time_metric(times: Sequence[float], step: float | None = None,
                     extra: dict[str, Any] | None = None) -> Metric:
    """step_time: the median of the per-step times (or `step` where only a summary exists),
    the times kept as its samples."""
    value = statistics.median(times) if step is None else step
    return measured("step_time", value, samples=list(times) or None, extra=extra)


def throughput_metric(global_batch: int, times: Sequence[float], step: float | None = None,
                      extra: dict[str, Any] | None = None) -> Metric:
    """throughput: global_batch / the median step time, in samples/s; each step's rate is a
    sample."""
    median = statistics.median(times) if step is None else step
    return measured("throughput", global_batch / median,
                    samples=[global_batch / t for t in times if t > 0] or None,
                    extra={"global_batch": global_batch, "aggregation": THROUGHPUT_AGGREGATION,
                           **(extra or {})})

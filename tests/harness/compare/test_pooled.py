"""Pooling a side's records: directions from the record first, from the metric catalogue where
the record states none, and constants of the model or machine left out."""
from __future__ import annotations

from typing import Any

from harness.compare.pooled import pool_metrics


def _record(*metrics: dict[str, Any]) -> dict[str, Any]:
    return {"metrics": list(metrics)}


def test_a_recorded_direction_comes_before_the_catalogues() -> None:
    pooled = pool_metrics([_record(
        {"name": "step_time", "unit": "s", "value": 1.0, "higher_is_better": True},
        {"name": "foreign_rate", "unit": "widgets/s", "value": 3.0, "higher_is_better": True})])
    assert pooled["step_time"].higher_is_better is True  # as the record says
    assert pooled["foreign_rate"].higher_is_better is True  # unknown: the record alone


def test_an_undirected_metric_takes_the_catalogues_direction() -> None:
    pooled = pool_metrics([_record({"name": "busbw", "unit": "GB/s", "value": 1.0},
                                   {"name": "staleness", "unit": "versions", "value": 2.0},
                                   {"name": "foreign", "unit": "x", "value": 2.0})])
    assert pooled["busbw"].higher_is_better is True
    assert pooled["staleness"].higher_is_better is False
    assert pooled["foreign"].higher_is_better is None  # neither says: never a verdict


def test_constants_are_not_compared() -> None:
    pooled = pool_metrics([_record(
        {"name": "flops_per_sample", "unit": "FLOP", "value": 1e9, "higher_is_better": False},
        {"name": "kernel_bytes", "unit": "bytes", "value": 8.0, "higher_is_better": False},
        {"name": "throughput", "unit": "samples/s", "value": 5.0, "higher_is_better": True})])
    assert list(pooled) == ["throughput"]

"""Metric collectors; importing registers them in evaluation order."""
from __future__ import annotations

from harness.collectors import timing  # noqa: F401  (first: others read throughput)
from harness.collectors import flops, memory, quality, energy  # noqa: F401,I001
from harness.collectors.base import COLLECTORS, CollectContext, collect

__all__ = ["COLLECTORS", "CollectContext", "collect"]

"""Metric collectors; importing registers them in evaluation order."""
from __future__ import annotations

from harness.collectors import (  # noqa: F401,I001
    energy,
    flops,
    memory,
    quality,
    timing,  # noqa: F401  (first: others read throughput)
)
from harness.collectors.base import COLLECTORS, CollectContext, collect

__all__ = ["COLLECTORS", "CollectContext", "collect"]

"""Metric collectors; importing registers them (their stage orders evaluation)."""
from __future__ import annotations

from harness.collectors import (  # noqa: F401  (registration)
    breakdown,
    communication,
    consistency,
    data,
    energy,
    flops,
    memory,
    quality,
    scaling,
    timing,
)
from harness.collectors.base import COLLECTORS, CollectContext, collect

__all__ = ["COLLECTORS", "CollectContext", "collect"]

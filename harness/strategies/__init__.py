"""Strategies: how a run is distributed (SPEC section 9); importing registers them all."""
from __future__ import annotations

from harness.strategies import ddp, fsdp, localsgd, pipeline, tensor, zero1  # noqa: F401  (registration)
from harness.strategies.base import STRATEGIES, Strategy

__all__ = ["STRATEGIES", "Strategy"]

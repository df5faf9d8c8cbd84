"""Strategies: how a run is distributed (docs/spec/strategies.md); importing registers them all."""
from __future__ import annotations

from harness.strategies import (  # noqa: F401  (registration)
    ddp,
    fsdp,
    fsdp_tp,
    gossip,
    hogwild,
    hybrid,
    localsgd,
    pipeline,
    ps,
    sandblaster,
    tensor,
    zero1,
)
from harness.strategies.base import STRATEGIES, Strategy

__all__ = ["STRATEGIES", "Strategy"]

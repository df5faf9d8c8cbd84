"""Whether a run may lose a worker and go on: the strategy's declaration, under a launcher
whose supervisor sees every rank."""
from __future__ import annotations

from typing import Any


def tolerates_loss(spec: Any) -> bool:
    """Whether a worker of this run may die without failing it: a strategy that tolerates it
    (ps-async, downpour, ssp, hybrid), under the local launcher, whose supervisor sees every
    rank (torchrun, mpirun and srun end the whole job when one rank dies)."""
    if getattr(spec, "kind", "train") != "train" or spec.launcher != "local":
        return False
    from harness.strategies.base import STRATEGIES

    return bool(getattr(STRATEGIES.get(spec.strategy), "tolerates_worker_loss", False))

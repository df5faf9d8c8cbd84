"""Lost workers of strategies that tolerate them (ps-async, downpour, ssp, hybrid under the
local launcher): the supervisor books a worker's death instead of failing the run, tells the
servers through the run directory (RunDir.write_lost: when, and how far it got), and
assembles the result from the ranks' own results, since the lost rank can no longer take
part in a collective gather. A server's death, or the loss of every worker, still fails the
run; so does any death under a strategy or launcher that does not tolerate it."""
from __future__ import annotations

import time
from typing import Any

from harness.rundir import LostWorker, RankState, RunDir
from harness.strategies.worker_loss import tolerates_loss

# Roles whose loss fails the run: they hold state nobody else has (a server's shard,
# sandblaster's coordinator).
SERVING = ("server", "coordinator")


class LossBook:
    """The workers a tolerant run lost, as the supervisor saw them go."""

    def __init__(self, spec: Any, run_dir: RunDir) -> None:
        self.run_dir = run_dir
        self.roles: list[str] = []
        if tolerates_loss(spec):
            from harness.strategies import STRATEGIES

            self.roles = STRATEGIES.get(spec.strategy).roles(spec)
        self.lost: dict[int, LostWorker] = {}

    @property
    def active(self) -> bool:
        return bool(self.roles)

    def absorb(self, rank: int, state: RankState | None, reason: str) -> bool:
        """Book `rank` as lost (True) if the run survives it; False: it is a failure."""
        if not self.active or rank >= len(self.roles) or self.roles[rank] in SERVING:
            return False
        if rank in self.lost:
            return True
        workers = [r for r, role in enumerate(self.roles) if role not in SERVING]
        if len(set(workers) - set(self.lost) - {rank}) == 0:
            return False  # nobody left to train
        lost = LostWorker(rank=rank, role=self.roles[rank], time=time.time(),
                          steps=state.done if state is not None else 0,
                          phase=state.phase if state is not None else None, reason=reason)
        self.lost[rank] = lost
        self.run_dir.write_lost(lost)
        return True

    def results(self) -> list[dict[str, Any]] | None:
        """The surviving ranks' results, from their own files (None: not a tolerant run)."""
        if not self.active:
            return None
        return self.run_dir.read_own_results() or None

"""Sandblaster's load balancing (Dean et al. 2012, §4.2): the coordinator of a batch hands out
small portions of it, a new one to each replica as soon as it is free, so fast replicas do
more of the batch; when none is left, a free replica gets a backup copy of a portion that has
run longer than `backup_after` times the median portion so far, and the first copy to finish
is kept (the other is wasted work). A replica that is lost gives its portions back.

Pure bookkeeping with an injectable clock, so the schedule can be replayed without processes
(tests/harness/strategies/test_sandblaster.py); harness/strategies/sandblaster.py drives it.
"""
from __future__ import annotations

import math
import statistics
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class WorkerCounts:
    """What one replica did: portions computed, kept, wasted, and backups it ran."""

    assigned: int = 0
    kept: int = 0
    wasted: int = 0
    backups: int = 0

    def as_dict(self) -> dict[str, int]:
        return {"assigned": self.assigned, "kept": self.kept, "wasted": self.wasted,
                "backups": self.backups}


@dataclass
class PortionScheduler:
    """One batch at a time: `begin`, then `assign`/`finish`/`confirm` per portion until
    `complete`; `lose` hands a lost replica's portions back."""

    portions: int
    backup_after: float = 1.5
    clock: Callable[[], float] = time.perf_counter
    counts: dict[int, WorkerCounts] = field(default_factory=dict)
    backups_issued: int = 0
    backups_won: int = 0        # a backup copy finished first: the original was slower
    reassigned: int = 0         # portions handed back by a lost replica
    durations: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.begin(-1)

    def begin(self, step: int) -> None:
        """A new batch: every portion pending, none running."""
        self.step = step
        self.pending: deque[int] = deque(range(self.portions))
        # portion -> [(worker, started, is_backup)] of the copies running
        self.running: dict[int, list[tuple[int, float, bool]]] = {}
        self.kept: dict[int, int] = {}          # portion -> the replica whose copy is kept
        self.confirmed: set[int] = set()        # kept and pushed to every shard

    @property
    def complete(self) -> bool:
        return len(self.confirmed) == self.portions

    def _counts(self, worker: int) -> WorkerCounts:
        return self.counts.setdefault(worker, WorkerCounts())

    def threshold(self) -> float:
        """Seconds a portion may run before it gets a backup: backup_after × the median
        portion so far (inf before any finished, or with backups off)."""
        if math.isinf(self.backup_after) or not self.durations:
            return math.inf
        return self.backup_after * statistics.median(self.durations)

    def _backup_candidate(self, worker: int) -> tuple[int | None, float]:
        """(the overdue portion to copy for `worker`, or None; when the next becomes due)."""
        now, limit = self.clock(), self.threshold()
        best, due = None, math.inf
        for portion, copies in self.running.items():
            if portion in self.kept or len(copies) != 1 or copies[0][0] == worker:
                continue
            started = copies[0][1]
            if now - started >= limit:
                if best is None or started < self.running[best][0][1]:
                    best = portion
            else:
                due = min(due, started + limit)
        return best, due

    def assign(self, worker: int) -> tuple[int | None, bool]:
        """(a portion for a free replica, whether it is a backup copy); (None, False) when
        there is nothing for it now (it waits: see `due`)."""
        counts = self._counts(worker)
        if self.pending:
            portion, backup = self.pending.popleft(), False
        else:
            candidate, _ = self._backup_candidate(worker)
            if candidate is None:
                return None, False
            portion, backup = candidate, True
            self.backups_issued += 1
            counts.backups += 1
        self.running.setdefault(portion, []).append((worker, self.clock(), backup))
        counts.assigned += 1
        return portion, backup

    def due(self, worker: int) -> float:
        """When a waiting replica could next get a backup copy (the clock's time; inf: not
        before something else happens)."""
        return self._backup_candidate(worker)[1]

    def finish(self, worker: int, portion: int) -> bool:
        """A replica finished its copy of `portion`: True to keep it (the first copy), False
        when another copy was kept first (wasted work)."""
        copies = self.running.get(portion, [])
        mine = next((c for c in copies if c[0] == worker), None)
        counts = self._counts(worker)
        if mine is None or portion in self.kept:
            counts.wasted += 1
            if mine is not None:
                copies.remove(mine)
            return False
        self.durations.append(self.clock() - mine[1])
        self.kept[portion] = worker
        counts.kept += 1
        if mine[2]:
            self.backups_won += 1
        copies.remove(mine)
        return True

    def confirm(self, worker: int, portion: int) -> None:
        """The kept copy reached every shard."""
        if self.kept.get(portion) == worker:
            self.confirmed.add(portion)

    def lose(self, worker: int) -> list[int]:
        """A replica is gone: its running copies stop, and a kept copy it may not have pushed
        is computed again; returns the portions handed back."""
        for copies in self.running.values():
            copies[:] = [c for c in copies if c[0] != worker]
        for portion, owner in list(self.kept.items()):
            if owner == worker and portion not in self.confirmed:
                del self.kept[portion]
        back = sorted(portion for portion in range(self.portions)
                      if portion not in self.kept and portion not in self.pending
                      and not self.running.get(portion))
        for portion in reversed(back):
            self.running.pop(portion, None)
            self.pending.appendleft(portion)
        self.reassigned += len(back)
        return back

    def finish_late(self, worker: int) -> None:
        """A copy of an earlier batch's portion finished after that batch was complete."""
        self._counts(worker).wasted += 1

    def summary(self) -> dict[str, Any]:
        """The record's counts: per replica, backups issued and won, portions reassigned."""
        return {"portions_by_worker": {str(w): c.as_dict() for w, c in sorted(
                    self.counts.items())},
                "backups_issued": self.backups_issued, "backups_won": self.backups_won,
                "wasted_portions": sum(c.wasted for c in self.counts.values()),
                "reassigned_portions": self.reassigned,
                "median_portion_s": statistics.median(self.durations) if self.durations
                else None}

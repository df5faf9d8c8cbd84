"""Sandblaster L-BFGS's optimizer (Dean et al. 2012, §4.2): the coordinator never holds the
parameters. Each parameter-server shard keeps its slice of every vector the method needs —
the parameters x, the batch's gradient g, the previous gradient, the direction d, a work
vector, and the history pairs (s_i, y_i) — and executes the coordinator's small commands on
them: scale, add a multiple, subtract, copy, and dot products (or gradient norms) whose
partial sums come back as two numbers. The coordinator keeps only scalars (ρ_i, α_i, the
Hessian scale, the step t) and runs torch.optim.LBFGS's iteration (max_iter=1, no line
search) through those commands, so one replica's iterates equal torch's
(tests/harness/strategies/test_sandblaster.py).
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import torch

# Vectors on a shard: fixed ones, then history slot i holds s at 5 + 2i and y at 6 + 2i.
X, G, GPREV, D, Q = 0, 1, 2, 3, 4
# Commands: no reply for the vector operations, two numbers back for the reductions.
SCALE, AXPY, SUB, COPY, DOT, NORMS = 1, 2, 3, 4, 5, 6
REDUCTIONS = frozenset({DOT, NORMS})
NONE = -1  # an unused vector operand
# torch.optim.LBFGS's defaults
TOLERANCE_GRAD, TOLERANCE_CHANGE, CURVATURE = 1e-7, 1e-9, 1e-10


def s_slot(index: int) -> int:
    return 5 + 2 * index


def y_slot(index: int) -> int:
    return 6 + 2 * index


class ShardVectors:
    """One shard's slices; `x` is the shard's parameters (updated in place)."""

    def __init__(self, x: torch.Tensor) -> None:
        self.vectors: dict[int, torch.Tensor] = {X: x}

    def __getitem__(self, vector: int) -> torch.Tensor:
        found = self.vectors.get(vector)
        if found is None:
            found = self.vectors[vector] = torch.zeros_like(self.vectors[X])
        return found

    def execute(self, op: int, a: int, b: int = NONE, c: int = NONE, d: int = NONE,
                alpha: float = 0.0) -> tuple[float, float] | None:
        """Run one command; the two partial results of a reduction, else None."""
        with torch.no_grad():
            if op == SCALE:
                torch.mul(self[b], alpha, out=self[a])
            elif op == AXPY:
                self[a].add_(self[b], alpha=alpha)
            elif op == SUB:
                torch.sub(self[b], self[c], out=self[a])
            elif op == COPY:
                self[a].copy_(self[b])
            elif op == DOT:
                second = float(torch.dot(self[c], self[d])) if c != NONE else 0.0
                return float(torch.dot(self[a], self[b])), second
            elif op == NORMS:
                values = self[a].abs()
                return (float(values.max()) if values.numel() else 0.0), float(values.sum())
            else:
                raise ValueError(f"unknown shard command {op}")
        return None

    @property
    def stored(self) -> int:
        """Bytes of the vectors this shard holds besides the parameters (history included)."""
        return sum(v.numel() * v.element_size() for k, v in self.vectors.items() if k != X)


class Shards(Protocol):
    """Where the commands go: every shard, in order; reductions come back per shard."""

    def run(self, op: int, a: int, b: int = NONE, c: int = NONE, d: int = NONE,
            alpha: float = 0.0) -> None: ...

    def reduce(self, op: int, a: int, b: int = NONE, c: int = NONE, d: int = NONE,
               alpha: float = 0.0) -> list[tuple[float, float]]: ...


class LocalShards:
    """Shards in this process (one replica's reference, and the tests)."""

    def __init__(self, slices: Sequence[torch.Tensor]) -> None:
        self.shards = [ShardVectors(x) for x in slices]

    def run(self, op: int, a: int, b: int = NONE, c: int = NONE, d: int = NONE,
            alpha: float = 0.0) -> None:
        for shard in self.shards:
            shard.execute(op, a, b, c, d, alpha)

    def reduce(self, op: int, a: int, b: int = NONE, c: int = NONE, d: int = NONE,
               alpha: float = 0.0) -> list[tuple[float, float]]:
        return [shard.execute(op, a, b, c, d, alpha) or (0.0, 0.0) for shard in self.shards]


class Coordinator:
    """torch.optim.LBFGS's iteration (max_iter=1, line_search_fn=None) over shards; holds only
    scalars and which history slots are in use (m + 1 slots: the newest pair is written
    before it is known to be kept)."""

    def __init__(self, history: int, lr: float) -> None:
        self.history = history
        self.lr = lr
        self.iterations = 0
        self.slots: list[int] = []
        self.rho: list[float] = []
        self.h_diag = 1.0
        self.t = 0.0
        self.commands = 0

    def _run(self, shards: Shards, op: int, a: int, b: int = NONE, c: int = NONE,
             alpha: float = 0.0) -> None:
        self.commands += 1
        shards.run(op, a, b, c, alpha=alpha)

    def _dot(self, shards: Shards, a: int, b: int, c: int = NONE, d: int = NONE
             ) -> tuple[float, float]:
        self.commands += 1
        parts = shards.reduce(DOT, a, b, c, d)
        return sum(p[0] for p in parts), sum(p[1] for p in parts)

    def iterate(self, shards: Shards) -> str:
        """One iteration on the gradient in G: 'optimal' (no update: the gradient is below
        torch's tolerance), 'no descent' (the direction is not one: state kept, x not moved)
        or 'step'."""
        self.commands += 1
        norms = shards.reduce(NORMS, G)
        if max(n[0] for n in norms) <= TOLERANCE_GRAD:
            return "optimal"
        self.iterations += 1
        if self.iterations == 1:
            self._run(shards, SCALE, D, G, alpha=-1.0)
            self.slots, self.rho, self.h_diag = [], [], 1.0
        else:
            self._update_history(shards)
            self._two_loop(shards)
        self._run(shards, COPY, GPREV, G)
        self.t = min(1.0, 1.0 / sum(n[1] for n in norms)) * self.lr if self.iterations == 1 \
            else self.lr
        if self._dot(shards, G, D)[0] > -TOLERANCE_CHANGE:
            return "no descent"
        self._run(shards, AXPY, X, D, alpha=self.t)
        return "step"

    def _update_history(self, shards: Shards) -> None:
        slot = next(i for i in range(self.history + 1) if i not in self.slots)
        self._run(shards, SUB, y_slot(slot), G, GPREV)
        self._run(shards, SCALE, s_slot(slot), D, alpha=self.t)
        ys, yy = self._dot(shards, y_slot(slot), s_slot(slot), y_slot(slot), y_slot(slot))
        if ys > CURVATURE:
            if len(self.slots) == self.history:
                self.slots.pop(0)
                self.rho.pop(0)
            self.slots.append(slot)
            self.rho.append(1.0 / ys)
            self.h_diag = ys / yy

    def _two_loop(self, shards: Shards) -> None:
        self._run(shards, SCALE, Q, G, alpha=-1.0)
        alphas = [0.0] * len(self.slots)
        for i in reversed(range(len(self.slots))):
            alphas[i] = self._dot(shards, s_slot(self.slots[i]), Q)[0] * self.rho[i]
            self._run(shards, AXPY, Q, y_slot(self.slots[i]), alpha=-alphas[i])
        self._run(shards, SCALE, D, Q, alpha=self.h_diag)
        for i, slot in enumerate(self.slots):
            beta = self._dot(shards, y_slot(slot), D)[0] * self.rho[i]
            self._run(shards, AXPY, D, s_slot(slot), alpha=alphas[i] - beta)

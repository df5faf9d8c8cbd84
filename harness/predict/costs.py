"""α-β costs of collectives (Hockney's model; Thakur, Rabenseifner & Gropp 2005).

A message of S bytes between two ranks takes α + S·β (α: latency per message, β: seconds per
byte). Each algorithm's cost on p ranks has the form a(p)·α + b(p)·S·β, with S the buffer as
nccl-tests counts it (allreduce tensor, all-gather output, reduce-scatter input, broadcast
tensor) and L = ⌈log2 p⌉ (exact for powers of two; Thakur et al. add a step otherwise):

| op            | ring                   | tree             | halving-doubling       |
|---------------|------------------------|------------------|------------------------|
| allreduce     | 2(p-1)α + 2(p-1)/p·Sβ  | 2L(α + Sβ)       | 2Lα + 2(p-1)/p·Sβ      |
| allgather     | (p-1)α + (p-1)/p·Sβ    | Lα + (p-1)/p·Sβ  | Lα + (p-1)/p·Sβ        |
| reducescatter | (p-1)α + (p-1)/p·Sβ    | Lα + (p-1)/p·Sβ  | Lα + (p-1)/p·Sβ        |
| broadcast     | (L+p-1)α + 2(p-1)/p·Sβ | L(α + Sβ)        | 2Lα + 2(p-1)/p·Sβ      |
| p2p           | α + Sβ                 | α + Sβ           | α + Sβ                 |

"tree" is the binomial reduce + broadcast for allreduce (and a binomial broadcast),
recursive doubling/halving for the gathers; halving-doubling allreduce is Rabenseifner's;
ring broadcast is van de Geijn's scatter + ring all-gather. The reduction's own
arithmetic (Thakur's γ) is not separate: a β fitted from measured allreduces includes it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

ALGORITHMS = ("ring", "tree", "halving-doubling")
OPS = ("allreduce", "allgather", "reducescatter", "broadcast", "p2p")


@dataclass(frozen=True)
class Link:
    """α (seconds per message) and β (seconds per byte) of the links a collective uses."""

    alpha: float
    beta: float


def log2ceil(p: int) -> int:
    """⌈log2 p⌉: the rounds of a recursive doubling or binomial tree over p ranks."""
    return max(0, math.ceil(math.log2(p))) if p >= 1 else 0


def coefficients(op: str, algorithm: str, p: int) -> tuple[float, float]:
    """(a, b) such that the collective costs a·α + b·S·β on p ranks (see the module table)."""
    if op not in OPS:
        raise ValueError(f"unknown collective {op!r}; choose from: {', '.join(OPS)}")
    if algorithm not in ALGORITHMS:
        raise ValueError(f"unknown algorithm {algorithm!r}; choose from: {', '.join(ALGORITHMS)}")
    if p <= 1:
        return 0.0, 0.0
    steps, share = log2ceil(p), (p - 1) / p
    if op == "p2p":
        return 1.0, 1.0
    table = {
        "allreduce": {"ring": (2 * (p - 1), 2 * share), "tree": (2 * steps, 2 * steps),
                      "halving-doubling": (2 * steps, 2 * share)},
        "allgather": {"ring": (p - 1, share), "tree": (steps, share),
                      "halving-doubling": (steps, share)},
        "broadcast": {"ring": (steps + p - 1, 2 * share), "tree": (steps, steps),
                      "halving-doubling": (2 * steps, 2 * share)},
    }
    table["reducescatter"] = table["allgather"]
    a, b = table[op][algorithm]
    return float(a), float(b)


def cost(op: str, nbytes: float, p: int, link: Link, algorithm: str = "ring") -> float:
    """Seconds for one collective of `nbytes` on p ranks over `link`."""
    a, b = coefficients(op, algorithm, p)
    return a * link.alpha + b * nbytes * link.beta


def ring_allreduce(nbytes: float, p: int, link: Link) -> float:
    """2(p-1)·α + 2(p-1)/p·S·β: a reduce-scatter then an all-gather around the ring."""
    return cost("allreduce", nbytes, p, link, "ring")


def tree_allreduce(nbytes: float, p: int, link: Link) -> float:
    """2⌈log2 p⌉·(α + S·β): a binomial-tree reduce to the root, then a binomial broadcast."""
    return cost("allreduce", nbytes, p, link, "tree")


def halving_doubling_allreduce(nbytes: float, p: int, link: Link) -> float:
    """2⌈log2 p⌉·α + 2(p-1)/p·S·β: Rabenseifner's recursive-halving reduce-scatter, then a
    recursive-doubling all-gather."""
    return cost("allreduce", nbytes, p, link, "halving-doubling")


def reduce_scatter(nbytes: float, p: int, link: Link, algorithm: str = "ring") -> float:
    """Ring (p-1)·α, or recursive halving ⌈log2 p⌉·α, plus (p-1)/p·S·β."""
    return cost("reducescatter", nbytes, p, link, algorithm)


def all_gather(nbytes: float, p: int, link: Link, algorithm: str = "ring") -> float:
    """Ring (p-1)·α, or recursive doubling ⌈log2 p⌉·α, plus (p-1)/p·S·β."""
    return cost("allgather", nbytes, p, link, algorithm)


def link_from_fit(op: str, algorithm: str, world_size: int, alpha_fit: float,
                  beta_fit: float) -> Link:
    """The link α and β behind a collective measured as alpha_fit + S·beta_fit on world_size
    ranks, assuming it ran `algorithm`: α = alpha_fit / a(p0), β = beta_fit / b(p0). Priced
    back at p0 it gives the fit exactly; at other p the algorithm's shape extrapolates."""
    a, b = coefficients(op, algorithm, world_size)
    if a == 0 or b == 0:
        raise ValueError(f"{op} on {world_size} rank(s) moves nothing: no link to infer")
    return Link(alpha_fit / a, beta_fit / b)

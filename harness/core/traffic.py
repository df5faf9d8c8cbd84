"""How many bytes a collective puts on the wire, in one place for the byte counter, the
collective benchmark (busbw) and the performance model.

Volumes are those of the bandwidth-optimal algorithms (ring, or recursive halving/doubling,
which move the same bytes): for a payload of S bytes over n ranks each rank sends
2(n-1)/n x S in an allreduce (a reduce-scatter, then an all-gather), (n-1)/n x S in an
all-gather (S = the gathered output) or a reduce-scatter (S = the input), and a broadcast
down a chain from the root is forwarded by every rank but the last (nccl-tests' busbw factors
are the same ratios: Rabenseifner's and Thakur et al.'s lower bounds).
"""
from __future__ import annotations

COLLECTIVES = ("allreduce", "allgather", "reducescatter", "broadcast", "alltoall", "reduce",
               "scatter", "gather", "send", "recv", "barrier")


def busbw_factor(op: str, world_size: int) -> float:
    """nccl-tests' bus bandwidth factor: busbw = algbw x factor."""
    n = world_size
    if n <= 1:
        return 0.0 if op in ("allreduce", "allgather", "reducescatter", "alltoall") else 1.0
    if op == "allreduce":
        return 2 * (n - 1) / n
    if op in ("allgather", "reducescatter", "alltoall"):
        return (n - 1) / n
    return 1.0


def sent_bytes(op: str, payload: float, world_size: int, rank: int = 0, root: int = 0) -> float:
    """Bytes this rank sends for one collective of `payload` bytes (see the module docstring).

    payload is the buffer as the caller passes it: the allreduce tensor, the all-gather output,
    the reduce-scatter input, the broadcast tensor, the send/receive buffer.
    """
    n = world_size
    if op == "send":
        return float(payload)
    if n <= 1 or op in ("recv", "barrier"):
        return 0.0
    if op == "allreduce":
        return 2 * (n - 1) / n * payload
    if op in ("allgather", "reducescatter", "alltoall", "reduce"):
        return (n - 1) / n * payload
    if op == "broadcast":
        # A chain root -> root+1 -> ... -> root-1: every rank forwards S but the last one.
        return 0.0 if rank == (root - 1) % n else float(payload)
    if op == "scatter":
        return (n - 1) / n * payload if rank == root else 0.0
    if op == "gather":
        return 0.0 if rank == root else float(payload)
    raise ValueError(f"unknown collective {op!r}; known: {', '.join(COLLECTIVES)}")


def mean_sent_bytes(op: str, payload: float, world_size: int) -> float:
    """The per-rank mean of sent_bytes over all ranks (a broadcast, scatter or gather loads
    ranks unevenly; the mean is what analytic per-rank volumes use)."""
    n = max(1, world_size)
    return sum(sent_bytes(op, payload, n, rank) for rank in range(n)) / n

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
    return mean_wire_bytes(op, payload, world_size, backend="")


# Where a backend's algorithm sends other volumes than the ring's, as measured on the wire
# (loopback bytes of a private network namespace, tests/distributed/test_wire_bytes.py):
# gloo's reduce_scatter_tensor allreduces the whole input and keeps its own chunk, so it
# sends an allreduce's 2(n-1)/n x S, twice the ring reduce-scatter's (n-1)/n x S. Open MPI
# runs the ring for allreduce, all-gather and reduce-scatter because dtbench's MPI group asks
# it to (harness/comm/mpi_group.OPEN_MPI_RING_ALGORITHMS); its own choice differs by size and ranks.
WIRE_ALGORITHMS = {("gloo", "reducescatter"): "allreduce"}
# Backends whose every collective has been measured against wire_bytes at 2 and 3 ranks
# (NCCL's ring volumes are the formula's, unverified without a GPU).
WIRE_VERIFIED = frozenset({"gloo", "mpi"})


def wire_bytes(op: str, payload: float, world_size: int, backend: str, rank: int = 0,
               root: int = 0) -> float:
    """Bytes this rank puts on the wire for one collective under `backend`'s algorithm:
    sent_bytes with the collectives the backend runs differently replaced by what it runs.
    For a backend outside WIRE_VERIFIED this is the ring volume, unverified."""
    return sent_bytes(WIRE_ALGORITHMS.get((backend, op), op), payload, world_size, rank, root)


def mean_wire_bytes(op: str, payload: float, world_size: int, backend: str) -> float:
    """The per-rank mean of wire_bytes over all ranks."""
    n = max(1, world_size)
    return sum(wire_bytes(op, payload, n, backend, rank) for rank in range(n)) / n

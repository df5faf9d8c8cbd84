"""Bytes on the wire per collective: hand-computed values, and the sums they must keep."""
from __future__ import annotations

import pytest

from harness.facts.traffic import (
    WIRE_VERIFIED,
    busbw_factor,
    mean_sent_bytes,
    mean_wire_bytes,
    sent_bytes,
)


def test_ring_volumes_by_hand() -> None:
    assert sent_bytes("allreduce", 1000, 4) == 1500  # 2 * 3/4 * 1000
    assert sent_bytes("allgather", 1000, 4) == 750
    assert sent_bytes("reducescatter", 1000, 2) == 500
    assert sent_bytes("send", 123, 8) == 123 and sent_bytes("recv", 123, 8) == 0


def test_one_rank_sends_nothing_but_point_to_point() -> None:
    for op in ("allreduce", "allgather", "reducescatter", "broadcast", "scatter", "gather"):
        assert sent_bytes(op, 1000, 1) == 0
    assert sent_bytes("send", 10, 1) == 10


def test_broadcast_chain_every_rank_but_the_last_forwards() -> None:
    sent = [sent_bytes("broadcast", 100, 4, rank, root=2) for rank in range(4)]
    assert sent == [100, 0, 100, 100]  # chain 2 -> 3 -> 0 -> 1
    assert mean_sent_bytes("broadcast", 100, 4) == pytest.approx(75)


def test_busbw_factors_are_nccl_tests() -> None:
    assert busbw_factor("allreduce", 8) == pytest.approx(1.75)
    assert busbw_factor("allgather", 8) == pytest.approx(0.875)
    assert busbw_factor("broadcast", 8) == 1.0


def test_unknown_collective_is_an_error() -> None:
    with pytest.raises(ValueError, match="unknown collective"):
        sent_bytes("allsome", 1, 2)


@pytest.mark.parametrize("n", [2, 3, 8])
def test_each_backend_s_wire_bytes_by_hand(n: int) -> None:
    """NCCL's ring (unverified on a wire without a GPU) and Open MPI with dtbench's ring
    algorithms send the ring volumes; gloo's reduce-scatter sends an allreduce's."""
    ring = {"allreduce": 2 * (n - 1) / n * 1000, "allgather": (n - 1) / n * 1000,
            "reducescatter": (n - 1) / n * 1000, "broadcast": (n - 1) / n * 1000}
    for backend in ("nccl", "mpi", "gloo"):
        for op, volume in ring.items():
            expected = ring["allreduce"] if (backend, op) == ("gloo", "reducescatter") \
                else volume
            assert mean_wire_bytes(op, 1000, n, backend) == pytest.approx(expected), \
                (backend, op)
    assert WIRE_VERIFIED == {"gloo", "mpi"}

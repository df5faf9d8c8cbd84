"""α-β costs of the collectives against hand-computed values and their limits."""
from __future__ import annotations

import pytest

from harness.facts.traffic import sent_bytes
from harness.predict import costs
from harness.predict.costs import Link

LINK = Link(alpha=1.0, beta=0.001)  # 1 s per message, 1 ms per byte: easy arithmetic


def test_allreduce_algorithms_by_hand() -> None:
    # p=4, S=1000: ring 2*3*1 + 2*3/4*1000*0.001; tree 2*2*(1 + 1); Rabenseifner 2*2 + 1.5
    assert costs.ring_allreduce(1000, 4, LINK) == pytest.approx(7.5)
    assert costs.tree_allreduce(1000, 4, LINK) == pytest.approx(8.0)
    assert costs.halving_doubling_allreduce(1000, 4, LINK) == pytest.approx(5.5)


def test_gathers_and_broadcasts_by_hand() -> None:
    assert costs.all_gather(1000, 4, LINK) == pytest.approx(3 + 0.75)
    assert costs.reduce_scatter(1000, 4, LINK, "halving-doubling") == pytest.approx(2 + 0.75)
    assert costs.cost("broadcast", 1000, 8, LINK, "tree") == pytest.approx(3 * (1 + 1))
    assert costs.cost("p2p", 1000, 2, LINK) == pytest.approx(2.0)
    assert costs.log2ceil(5) == 3 and costs.log2ceil(1) == 0


def test_one_rank_costs_nothing() -> None:
    for op in costs.OPS:
        for algorithm in costs.ALGORITHMS:
            assert costs.cost(op, 1e9, 1, LINK, algorithm) == 0


def test_zero_latency_leaves_the_bytes_each_rank_sends() -> None:
    free_start = Link(0.0, 1e-9)
    for p in (2, 3, 8, 1000):
        for op in ("allreduce", "allgather", "reducescatter"):
            assert costs.cost(op, 4e6, p, free_start) == pytest.approx(
                sent_bytes(op, 4e6, p) * 1e-9)


def test_infinite_bandwidth_leaves_the_latency_terms() -> None:
    infinite = Link(2e-6, 0.0)
    assert costs.ring_allreduce(1e9, 16, infinite) == pytest.approx(2 * 15 * 2e-6)
    assert costs.halving_doubling_allreduce(1e9, 16, infinite) == pytest.approx(2 * 4 * 2e-6)


def test_link_from_fit_inverts_the_algorithm() -> None:
    link = costs.link_from_fit("allreduce", "ring", 2, alpha_fit=4e-4, beta_fit=1e-9)
    assert link == Link(2e-4, 1e-9)  # ring on 2 ranks: 2 alpha + S beta
    assert costs.ring_allreduce(1e6, 2, link) == pytest.approx(4e-4 + 1e6 * 1e-9)
    with pytest.raises(ValueError):
        costs.link_from_fit("allreduce", "ring", 1, 1.0, 1.0)


def test_unknown_names_are_errors() -> None:
    with pytest.raises(ValueError, match="collective"):
        costs.coefficients("allsome", "ring", 4)
    with pytest.raises(ValueError, match="algorithm"):
        costs.coefficients("allreduce", "butterfly", 4)

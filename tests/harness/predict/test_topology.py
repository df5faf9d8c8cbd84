"""Nodes of several devices (--topology): each formula against hand-computed values and its
degenerate cases; the link presets; Horovod's fusion loop; the per-device batch curve and
the straggler term."""
from __future__ import annotations

import math
from dataclasses import replace

import pytest

from harness.core.errors import UsageError
from harness.predict.calibration import compute_from_curve, compute_from_rate, expected_max_normal
from harness.predict.context import Context, WorkloadFacts
from harness.predict.costs import Link, cost
from harness.predict.dataparallel import fused_allreduce
from harness.predict.inputs import parse_fusion
from harness.predict.links import LINKS, find_link
from harness.predict.network import parse_network, uniform
from harness.predict.topology import Topology, parse_topology
from workloads.layers import LayerFacts

OPS = ("allreduce", "allgather", "reducescatter", "broadcast")
NET, INTRA = Link(10e-6, 1e-9), Link(2e-6, 1e-10)
S = 100e6


def topology(devices: int, algorithm: str = "ring", intra: Link = INTRA, inter: Link = NET,
             nics: int = 1, across: str = "ring") -> Topology:
    return Topology("t", True, (), algorithm, devices=devices, intra=intra, inter=inter,
                    nics=nics, inter_algorithm=across)


@pytest.mark.parametrize("algorithm", ["ring", "hierarchical"])
@pytest.mark.parametrize("op", OPS)
def test_one_device_a_node_is_the_flat_model(op: str, algorithm: str) -> None:
    flat = uniform("flat", NET)
    for p in (2, 3, 8, 64, 1000):
        assert topology(1, algorithm).time(op, S, p) == pytest.approx(flat.time(op, S, p))


def test_hierarchical_with_one_device_a_node_runs_the_inter_algorithm() -> None:
    flat = uniform("flat", NET, "halving-doubling")
    one = topology(1, "hierarchical", across="halving-doubling")
    assert one.time("allreduce", S, 32) == pytest.approx(flat.time("allreduce", S, 32))


@pytest.mark.parametrize("algorithm", ["ring", "hierarchical", "tree", "auto"])
@pytest.mark.parametrize("op", OPS)
def test_one_node_prices_the_intra_link_alone(op: str, algorithm: str) -> None:
    found = topology(8, algorithm).time(op, S, 8)
    flat = "tree" if algorithm == "tree" else "ring"
    assert found == pytest.approx(cost(op, S, 8, INTRA, flat))


def test_ring_across_nodes_by_hand() -> None:
    # 8 ranks, 4 a node: 14 steps, 2 of them leave a node; bytes at the slower link
    expected = 2 * 10e-6 + 12 * 2e-6 + 2 * 7 / 8 * S * 1e-9
    assert topology(4).time("allreduce", S, 8) == pytest.approx(expected)
    # two cards a node halve the network's time per byte, here below the intra link's
    fast = topology(4, nics=20)
    assert fast.time("allreduce", S, 8) == pytest.approx(2 * 10e-6 + 12 * 2e-6
                                                         + 2 * 7 / 8 * S * 1e-10)


def test_hierarchical_with_a_free_intra_link_by_hand() -> None:
    # d=4, N=4: the node's 4 streams of S/4 share one card: ring over 4 nodes at 4·β
    free = topology(4, "hierarchical", intra=Link(0.0, 0.0))
    expected = 2 * 3 * 10e-6 + 2 * 3 / 4 * (S / 4) * 4e-9
    assert free.time("allreduce", S, 16) == pytest.approx(expected)
    # and the intra-node reduce-scatter and all-gather when it costs
    paid = topology(4, "hierarchical")
    intra = 2 * (3 * 2e-6 + 3 / 4 * S * 1e-10)
    assert paid.time("allreduce", S, 16) == pytest.approx(expected + intra)


def test_tree_by_hand_and_auto_takes_the_cheapest() -> None:
    tree = topology(4, "tree")
    expected = 2 * (3 * 2e-6 + math.ceil(math.log2(8)) * 10e-6) + 2 * 1e3 * 1e-9
    assert tree.time("allreduce", 1e3, 32) == pytest.approx(expected)
    auto = topology(4, "auto")
    for size in (1e3, 1e6, 1e9):
        choices = [topology(4, a).time("allreduce", size, 32)
                   for a in ("ring", "hierarchical", "tree")]
        assert auto.time("allreduce", size, 32) == pytest.approx(min(choices))
    # small messages: the tree's few network steps; large ones: not the tree's 2·S·β
    assert auto.time("allreduce", 1e3, 32) == pytest.approx(tree.time("allreduce", 1e3, 32))
    assert auto.time("allreduce", 1e9, 32) < tree.time("allreduce", 1e9, 32)


def test_point_to_point_crosses_the_network() -> None:
    assert topology(8).time("p2p", S, 2) == pytest.approx(NET.alpha + S * NET.beta)


def test_parse_topology_presets_and_errors() -> None:
    parsed = parse_topology("devices=8,intra=nvlink-v100,inter=100gbe-roce,nics=2")
    assert parsed.devices == 8 and parsed.nics == 2 and parsed.algorithm == "auto"
    assert parsed.intra == LINKS["nvlink-v100"].link and parsed.inter == LINKS["100gbe-roce"].link
    assert parsed.description.endswith("(assumed)")
    for text, words in (("devices=8", "inter"), ("devices=0,inter=ib-edr", "at least 1"),
                        ("devices=x,inter=ib-edr", "whole number"),
                        ("devices=4,inter=carrier-pigeon", "unknown link"),
                        ("devices=4,inter=ib-edr,alpha=1e-6", "unknown key"),
                        ("devices=4,inter=ib-edr,algorithm=magic", "algorithm"),
                        ("devices 4", "KEY=VALUE")):
        with pytest.raises(UsageError, match=words):
            parse_topology(text)
    parsed.check_ranks(4)  # a partial node
    parsed.check_ranks(64)
    with pytest.raises(UsageError, match="do not divide 12 ranks"):
        parsed.check_ranks(12)


def test_topology_from_a_json_file(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "cluster.json"
    path.write_text('{"devices": 4, "intra": "pcie4", "inter": "ib-hdr", "algorithm": "ring"}')
    parsed = parse_topology(str(path))
    assert parsed.devices == 4 and parsed.algorithm == "ring"
    assert parsed.inter == LINKS["ib-hdr"].link


def test_link_presets_are_line_rates_with_tcp_paying_the_host() -> None:
    assert LINKS["25gbe-roce"].link == Link(LINKS["25gbe-roce"].alpha, 1 / 3.125e9)
    assert LINKS["25gbe-tcp"].link.beta > LINKS["25gbe-roce"].link.beta
    assert find_link("IB-100G") is LINKS["ib-edr"] and find_link("10GbE") is LINKS["10gbe-tcp"]
    assert all(preset.source for preset in LINKS.values())
    assert parse_network("aries").link("allreduce", 8) == Link(1.3e-6, 1e-10)


def test_compute_curve_runs_small_batches_below_the_large_ones_rate() -> None:
    curve = compute_from_curve("32:195,64:219")
    assert curve.rate(32) == pytest.approx(195) and curve.rate(64) == pytest.approx(219)
    assert curve.rate(8) < curve.rate(32) and curve.fixed_s > 0
    one = compute_from_curve("64:219")
    assert one.fixed_s == 0 and one.rate(8) == pytest.approx(219)
    for text in ("", "32", "0:195", "32:-1", "32:x"):
        with pytest.raises(UsageError):
            compute_from_curve(text)


def test_straggler_term_is_the_expected_maximum_of_normal_steps() -> None:
    exact = {2: 1 / math.sqrt(math.pi), 3: 1.5 / math.sqrt(math.pi), 8: 1.4236, 100: 2.5076}
    for n, value in exact.items():
        assert expected_max_normal(n) == pytest.approx(value, rel=0.05 if n == 2 else 0.03)
    assert expected_max_normal(1) == 0
    base = compute_from_rate(1e9, 1e12)
    varied = replace(base, cv=0.1)
    assert varied.step(10, 1) == pytest.approx(base.step(10, 1))
    assert varied.step(10, 100) == pytest.approx(base.step(10) * (1 + 0.1 * 2.5076), rel=0.01)


class ConstantNetwork:
    """Every allreduce takes the same time, whatever it carries."""

    def __init__(self, seconds: float) -> None:
        self.seconds, self.calls = seconds, 0

    def time(self, op: str, nbytes: float, world_size: int) -> float:
        self.calls += 1
        return self.seconds


def fusion_context(seconds: float, fusion: tuple[float, float]) -> Context:
    layers = tuple(LayerFacts(f"l{i}", "Linear", f"l{i}", 1000, 1, 1, 1, 10)
                   for i in range(3))
    return Context(WorkloadFacts("w", "s", layers), compute_from_rate(1.0, 1.0),
                   ConstantNetwork(seconds), 1, fusion=fusion)  # type: ignore[arg-type]


def test_fusion_cycles_by_hand() -> None:
    # gradients ready at 1, 2 and 3 s of a 3 s backward pass; a 1.5 s cycle
    ctx = fusion_context(0.1, (1e9, 1.5))
    end, busy = fused_allreduce(ctx, 4, 3.0)
    assert ctx.network.calls == 3 and busy == pytest.approx(0.3)
    assert end == pytest.approx(4.1)  # cycles begin at 1, 2.5 and 4
    # a slow allreduce makes the next cycle take both later gradients in one buffer
    slow = fusion_context(2.0, (1e9, 1.5))
    end, busy = fused_allreduce(slow, 4, 3.0)
    assert slow.network.calls == 2 and end == pytest.approx(5.0)
    # the threshold splits a cycle's gradients: 4000 B alone, then 8000 B under 5000 B
    split = fusion_context(2.0, (5000, 1.5))
    fused_allreduce(split, 4, 3.0)
    assert split.network.calls == 3


def test_parse_fusion() -> None:
    assert parse_fusion("64:5") == (64 * 2**20, 0.005)
    assert parse_fusion("horovod") == (128 * 2**20, 0.001)
    for text in ("x", "0:5", "64:-1"):
        with pytest.raises(UsageError):
            parse_fusion(text)


def test_a_batch_sweep_of_one_machine_gives_the_compute_curve(run_record) -> None:  # type: ignore[no-untyped-def]
    from harness.predict.calibration import compute_from_records

    t0, per_sample = 0.05, 0.01
    sweep = [run_record([t0 + per_sample * b] * 3, batch=b, run_id=f"b{b}") for b in (8, 16, 32)]
    found = compute_from_records(sweep, workload="hep_cnn", size="small", precision="fp32",
                                 backend="cpu", batch=16)
    assert found is not None
    assert found.fixed_s == pytest.approx(t0) and found.seconds_per_sample == \
        pytest.approx(per_sample)
    assert found.rate(4) == pytest.approx(4 / (t0 + 4 * per_sample))
    assert "batch sweep 8, 16, 32" in found.source and found.run_ids == ("b16", "b32", "b8")
    # another machine's runs are not one sweep: the nearest batch alone, as before
    other = run_record([0.9] * 3, batch=8, run_id="elsewhere")
    other["machine"] = {**other["machine"], "name": "another box"}
    alone = compute_from_records([sweep[1], other], workload="hep_cnn", size="small",
                                 precision="fp32", backend="cpu", batch=16)
    assert alone is not None and alone.fixed_s == 0 and alone.run_ids == ("b16",)

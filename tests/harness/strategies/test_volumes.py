"""Analytic bytes per strategy against hand-computed values, and their degenerate cases."""
from __future__ import annotations

import pytest

from harness.core.errors import UnknownNameError
from harness.strategies import volumes as v

P = 1000.0  # parameter bytes


def test_ddp_is_one_ring_allreduce_of_the_gradients() -> None:
    assert v.ddp(P, 4) == v.by_kind(gradient=1500)  # 2 * 3/4 * 1000
    assert v.ddp(P, 2)["gradient"] == 1000


def test_one_rank_sends_nothing() -> None:
    for formula in (v.ddp, v.zero1, v.fsdp, v.gossip, v.hogwild):
        assert v.total(formula(P, 1)) == 0, formula.__name__
    assert v.total(v.localsgd(P, 1, period=4)) == 0
    assert v.total(v.pipeline(P, 1, cut_bytes=[], batch=8)) == 0
    assert v.total(v.tensor(P, 1, layers=[v.TPLayer(10, 20)], batch=8)) == 0


def test_zero1_adds_the_shard_broadcasts() -> None:
    assert v.zero1(P, 4) == v.by_kind(gradient=1500, parameter=750)  # (n-1)/n * P


def test_fsdp_gathers_twice_when_resharding_after_forward() -> None:
    assert v.fsdp(P, 4) == v.by_kind(gradient=750, parameter=1500)
    assert v.fsdp(P, 4, reshard_after_forward=False) == v.by_kind(gradient=750, parameter=750)


def test_localsgd_averages_every_period_steps() -> None:
    assert v.localsgd(P, 4, period=5) == v.by_kind(parameter=300)  # 1500 / 5
    assert v.localsgd(P, 4, period=1, subgroup=2)["gradient"] == 1000
    with pytest.raises(ValueError):
        v.localsgd(P, 4, period=0)


def test_parameter_server_roles_by_hand() -> None:
    # n=6, K=2 servers, W=4 workers
    assert v.ps_sync(P, 6, servers=2, role="worker") == v.by_kind(gradient=1000)
    assert v.ps_sync(P, 6, servers=2, role="server") == v.by_kind(parameter=2000)  # 4 * 500
    mean = v.ps_sync(P, 6, servers=2)  # (4 * 1000 + 2 * 2000) / 6 of all kinds
    assert v.total(mean) == pytest.approx(8000 / 6)
    assert mean["gradient"] == pytest.approx(4000 / 6)
    assert v.ps_async(P, 6, servers=2) == mean


def test_parameter_server_headers_count_messages() -> None:
    worker = v.ps_sync(P, 3, servers=1, header_bytes=16, role="worker")
    assert worker["control"] == 32  # one push and one fetch request to the one server
    assert v.ps_sync(P, 3, servers=1, header_bytes=16, role="server")["control"] == 32


def test_downpour_pushes_and_fetches_less_often() -> None:
    worker = v.downpour(P, 5, servers=1, n_fetch=4, n_push=2, role="worker")
    server = v.downpour(P, 5, servers=1, n_fetch=4, n_push=2, role="server")
    assert worker == v.by_kind(gradient=500)
    assert server == v.by_kind(parameter=1000)  # 4 workers * P / 4
    assert v.ssp(P, 5, servers=1, staleness=3) == v.ps_async(P, 5, servers=1)


def test_parameter_server_needs_a_worker_and_a_server() -> None:
    with pytest.raises(ValueError, match="at least one worker"):
        v.ps_sync(P, 2, servers=2)
    with pytest.raises(ValueError, match="unknown role"):
        v.ps_sync(P, 3, role="boss")


def test_gossip_sends_to_distinct_neighbours() -> None:
    assert v.gossip(P, 5) == v.by_kind(parameter=2000)
    assert v.gossip(P, 2) == v.by_kind(parameter=1000)


def test_hybrid_groups_by_hand() -> None:
    # n=9, K=1: W=8 workers in G=2 groups of 4
    member = v.hybrid(P, 9, groups=2, servers=1, role="worker")
    assert member == v.by_kind(gradient=1500, parameter=750)
    leader = v.hybrid(P, 9, groups=2, servers=1, role="leader")
    assert leader == v.by_kind(gradient=2500, parameter=750)
    assert v.hybrid(P, 9, groups=2, servers=1, role="server") == v.by_kind(parameter=2000)
    mean = v.hybrid(P, 9, groups=2, servers=1)
    assert v.total(mean) == pytest.approx((6 * 2250 + 2 * 3250 + 2000) / 9)
    # 8 workers in 3 groups: 3, 3, 2
    uneven = v.hybrid(P, 9, groups=3, servers=1)
    per_group = [(g - 1) * (2 * (g - 1) / g * P + (g - 1) / g * P) + (3 * (g - 1) / g * P + P)
                 for g in (3, 3, 2)]
    assert v.total(uneven) == pytest.approx((sum(per_group) + 3 * P) / 9)
    with pytest.raises(ValueError, match="groups"):
        v.hybrid(P, 9, groups=9, servers=1)


def test_pipeline_activations_cross_every_cut_both_ways() -> None:
    cuts = [10.0, 20.0, 30.0]  # bytes per sample after stages 0, 1, 2 of a 4-stage pipe
    stages = [v.pipeline(P, 4, cut_bytes=cuts, batch=8, stage=s)["activation"] for s in range(4)]
    assert stages == [80, 80 + 160, 160 + 240, 240]
    assert v.pipeline(P, 4, cut_bytes=cuts, batch=8)["activation"] == pytest.approx(960 / 4)
    with pytest.raises(ValueError, match="cuts"):
        v.pipeline(P, 4, cut_bytes=[1.0], batch=8)


def test_interleaved_pipeline_has_more_cuts_on_the_wire() -> None:
    # p=2 ranks, v=2 chunks: stages 0 1 2 3 on ranks 0 1 0 1; all 3 cuts cross ranks
    mean = v.pipeline(P, 2, cut_bytes=[1.0, 1.0, 1.0], batch=4, chunks=2, microbatches=2,
                      header_bytes=8)
    # both directions of 3 cuts: 2 * 3 * 4 B / 2 ranks; 2 * 3 * 2 messages * 8 B / 2 ranks
    assert mean == v.by_kind(activation=12, control=48)


def test_tensor_parallel_megatron_pair_by_hand() -> None:
    col, row = v.plan_tp_layers([(100, 400, 1), (400, 100, 1)])
    assert (col.style, row.style, col.output_replicated) == ("colwise", "rowwise", False)
    # colwise: backward allreduce of B*in*4 = 8*100*4 = 3200 -> 2*(1/2)*3200 = 3200 on 2 ranks
    # rowwise: forward allreduce of B*out*4 = 3200 -> 3200
    assert v.tensor(P, 2, layers=[col, row], batch=8) == v.by_kind(activation=6400)


def test_tensor_parallel_gathers_replicated_logits_and_sharded_inputs() -> None:
    (last,) = v.plan_tp_layers([(10, 5, 35)], batch_sharded_input=True)
    assert last.output_replicated and last.input_batch_sharded
    # rows = 2 * 35 = 70; output 70*5*4 = 1400 gathered: 700; input 70*10*4 = 2800: ag + rs
    assert v.tp_layer_bytes(last, 2, 2) == 700 + 1400 + 1400


def test_dp_tp_splits_gradients_and_activations() -> None:
    fc = [v.TPLayer(10, 10, "rowwise", bias=False)]  # 100 parameters = 400 bytes
    out = v.dp_tp(1400.0, 4, tp=2, layers=fc, batch_per_rank=3)
    dense = 2 * 3 / 4 * 1000  # conv gradients over all 4 ranks
    split = 2 * 1 / 2 * 200   # FC shard (400 / tp) over dp = 2
    assert out["gradient"] == pytest.approx(dense + split)
    assert out["activation"] == pytest.approx(6 * 10 * 4)  # rows 2*3, allreduce on 2 ranks
    with pytest.raises(ValueError, match="divide"):
        v.dp_tp(P, 4, tp=3, layers=fc, batch_per_rank=1)


def test_a_strategys_bytes_are_its_classs_and_an_unknown_name_lists_the_known_ones() -> None:
    from harness.spec.specs import RunSpec
    from harness.strategies import STRATEGIES

    with pytest.raises(UnknownNameError, match="ddp"):
        STRATEGIES.get("allsome")
    spec = RunSpec("hep_cnn", "tiny", nproc_per_node=4, strategy="localsgd",
                   strategy_options=(("period", 8),))
    assert STRATEGIES.get("localsgd").traffic(spec, P) == v.localsgd(P, 4, period=8)
    assert not hasattr(v, "VOLUMES")  # no second table of strategies by name

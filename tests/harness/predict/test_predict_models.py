"""Strategy models against hand-computed step times on a two-layer model, a fixed compute
rate and a made-up link (α = 1 ms, β = 10 ns/B); and the limits of free communication."""
from __future__ import annotations

import json
from dataclasses import replace

import pytest

from harness.core.errors import UnknownNameError, UsageError
from harness.predict.calibration import ComputeCalibration
from harness.predict.context import Context, WorkloadFacts
from harness.predict.costs import Link
from harness.predict.dataparallel import UNPRICED_FSDP
from harness.predict.network import uniform
from harness.predict.overhead import StrategyOverhead
from harness.predict.records import Provenance, prediction_record
from harness.predict.scaleout import modelled, parse_option_pairs, predict, strategy_options
from workloads.layers import LayerFacts

LAYERS = (
    LayerFacts("conv", "Conv2d", "conv", 250_000, 3000, 1000, 100, 200),
    LayerFacts("fc", "Linear", "fc", 300_300, 1000, 300, 100, 200, in_features=1000,
               out_features=300),
)
FACTS = WorkloadFacts("toy", "small", LAYERS)
P = 550_300 * 4
COMPUTE = ComputeCalibration(0.01, (), 10, 1, ("calib",), "2026-01-01T00:00:00Z", "toy run")
LINK = Link(1e-3, 1e-8)
T, T_F, T_B = 0.1, 0.1 / 3, 0.2 / 3  # batch 10 at 10 ms a sample; forward is 1/3 of FLOPs


def ctx(strategy: str, link: Link = LINK, **options: str) -> Context:
    return Context(FACTS, COMPUTE, uniform("toy link", link), batch=10,
                   options=strategy_options(strategy, options))


def step(strategy: str, nodes: int, link: Link = LINK, **options: str) -> float:
    (point,) = predict(ctx(strategy, link, **options), strategy, [nodes])
    assert point.estimate is not None, point.reason
    return point.estimate.step_time


def allreduce2(nbytes: float) -> float:
    return 2 * LINK.alpha + nbytes * LINK.beta  # ring on 2 ranks


def test_one_node_is_the_calibrated_step() -> None:
    for strategy in ("ddp", "zero1", "fsdp", "localsgd", "gossip", "tensor", "pipeline"):
        assert step(strategy, 1) == pytest.approx(T), strategy


def test_ddp_overlaps_buckets_with_the_backward_pass() -> None:
    # fc's 1,201,200 B close the 1 MiB first bucket halfway through backward; conv's follow
    first = T_B / 2 + allreduce2(1_201_200)
    second = max(T_B, first) + allreduce2(1_000_000)
    assert step("ddp", 2) == pytest.approx(T_F + second)
    assert step("ddp", 2, overlap="0") == pytest.approx(T + allreduce2(1_201_200)
                                                        + allreduce2(1_000_000))
    assert step("ddp", 2, compression="fp16") < step("ddp", 2)


def test_free_communication_scales_perfectly() -> None:
    free = Link(0.0, 0.0)
    for strategy in ("ddp", "zero1", "fsdp", "localsgd", "dp-tp"):
        points = predict(ctx(strategy, free), strategy, [2, 4, 1024])
        assert [round(p.efficiency or 0, 12) for p in points] == [1.0, 1.0, 1.0], strategy


def test_parameter_server_incast_by_hand() -> None:
    # n=5, K=1: W=4 workers; a worker's link alpha + P beta, the server's 4 (alpha + P beta)
    server = 4 * (LINK.alpha + P * LINK.beta)
    assert step("ps-sync", 5) == pytest.approx(T + 2 * server)
    client = LINK.alpha + P * LINK.beta
    # asynchronous: workers would cycle in T + 2 client; one server serves 1 / (2 client)
    (point,) = predict(ctx("ps-async"), "ps-async", [5])
    assert point.estimate is not None
    assert point.estimate.step_time == pytest.approx(4 * 2 * client)
    assert point.estimate.dominant == "server queue (incast)"
    assert step("ps-async", 3) == pytest.approx(T + 2 * client)  # 2 workers: not saturated


def test_hybrid_group_cycle_by_hand() -> None:
    # n=5, K=1, G=2: groups of 2; allreduce as ddp on 2 ranks, leader push+fetch, broadcast
    first = T_B / 2 + allreduce2(1_201_200)
    group = T_F + max(T_B, first) + allreduce2(1_000_000)
    client = LINK.alpha + P * LINK.beta
    broadcast = 2 * LINK.alpha + P * LINK.beta  # scatter + ring all-gather on 2 ranks
    assert step("hybrid", 5, G="2") == pytest.approx(group + 2 * client + broadcast)


def test_pipeline_bubble_and_balance() -> None:
    free = Link(0.0, 0.0)
    (point,) = predict(ctx("pipeline", free, M="4"), "pipeline", [2])
    assert point.estimate is not None
    # two stages of half the FLOPs each: (M + p - 1) slots of T/2/M
    assert point.estimate.step_time == pytest.approx(5 * T / 2 / 4)
    assert point.estimate.bubble == pytest.approx(1 / 5)
    (too_many,) = predict(ctx("pipeline"), "pipeline", [3])
    assert too_many.estimate is None and "cannot cut 2 blocks" in too_many.reason


def test_tensor_parallel_splits_the_fc_layers_only() -> None:
    assert step("tensor", 2, Link(0.0, 0.0)) == pytest.approx(T / 2 + T / 4)
    gather = LINK.alpha + 0.5 * 10 * 300 * 4 * LINK.beta      # logits gathered
    reduce = 2 * LINK.alpha + 10 * 1000 * 4 * LINK.beta       # input gradient allreduced
    assert step("tensor", 2) == pytest.approx(T / 2 + T / 4 + gather + reduce)


def test_strategies_that_cannot_run_say_why() -> None:
    (point,) = predict(ctx("ps-sync"), "ps-sync", [1])
    assert point.estimate is None and "server" in point.reason
    (point,) = predict(ctx("dp-tp"), "dp-tp", [3])
    assert point.estimate is None and "divide" in point.reason
    assert set(modelled()) == {"ddp", "zero1", "fsdp", "localsgd", "ps-sync", "ps-async",
                           "downpour", "ssp", "hogwild", "gossip", "hybrid", "pipeline",
                           "tensor", "dp-tp", "sandblaster", "fsdp-tp"}
    (point,) = predict(ctx("sandblaster"), "sandblaster", [2])
    assert point.estimate is None and "coordinator" in point.reason


def test_options_and_names() -> None:
    options = parse_option_pairs(["H=4", "K=2"], ["localsgd", "ps-sync"])
    assert options["localsgd"]["period"] == 4 and options["ps-sync"]["servers"] == 2
    for pairs, strategies, match in ((["G=4"], ["ddp"], "no strategy"),
                                     (["H=x"], ["localsgd"], "period of localsgd: expected int"),
                                     (["H"], ["localsgd"], "KEY=VALUE"),
                                     (["overlap=maybe"], ["ddp"], "expected bool")):
        with pytest.raises(UsageError, match=match):
            parse_option_pairs(pairs, strategies)
    with pytest.raises(UnknownNameError, match="ddp"):
        strategy_options("allreduce-everything", {})


def test_prediction_records_are_reproducible() -> None:
    context = ctx("ddp")
    points = predict(context, "ddp", [1, 2, 64])
    provenance = Provenance("gloo", ("calib",), ("comm-1",), "2026-01-01T00:00:00Z")
    made = [[prediction_record(context, p, provenance, {"version": "0"}) for p in points]
            for _ in range(2)]
    assert json.dumps(made[0]) == json.dumps(made[1])
    record = made[0][1]
    assert record["created_at"] == "2026-01-01T00:00:00Z" and record["status"] == "success"
    assert record["spec"]["task"] == "prediction" and record["spec"]["world_size"] == 2
    metrics = {m["name"]: m["value"] for m in record["metrics"]}
    assert metrics["comm_bytes_gradient"] == pytest.approx(P)  # ring on 2: 2(n-1)/n P = P
    assert metrics["step_time"] == pytest.approx(points[1].estimate.step_time)
    assert len({r["run_id"] for r in made[0]}) == 3


def own_work(seconds: float, strategy: str = "fsdp") -> StrategyOverhead:
    """As a single-rank run of `strategy` taking T + `seconds` a step would measure it."""
    return StrategyOverhead(strategy, seconds, T + seconds, T, 10, 1, ("one-rank",),
                            "2026-01-01T00:00:00Z")


def test_fsdp_adds_its_measured_own_work() -> None:
    bare = [p.estimate for p in predict(ctx("fsdp"), "fsdp", [1, 2])]
    assert all(e is not None and UNPRICED_FSDP in e.notes for e in bare)
    measured = replace(ctx("fsdp"), overheads={"fsdp": own_work(0.05)})
    one, two = (p.estimate for p in predict(measured, "fsdp", [1, 2]))
    assert one is not None and two is not None and bare[1] is not None
    # one rank: the single-rank fsdp run's step itself; two: the step as before + 50 ms
    assert one.step_time == pytest.approx(T + 0.05)
    assert two.step_time == pytest.approx(bare[1].step_time + 0.05)
    assert two.overhead == pytest.approx(0.05) and two.comm == bare[1].comm
    assert two.exposed_comm == pytest.approx(bare[1].exposed_comm)  # not communication
    assert UNPRICED_FSDP not in two.notes
    assert any(note.startswith("fsdp's own work 50.0 ms a step: fsdp at 1 rank 150.0 ms")
               for note in two.notes)


def test_core_sharing_slows_the_own_work_as_it_slows_compute() -> None:
    crowded = replace(ctx("fsdp"), core_sharing=2.0)
    (bare,) = predict(crowded, "fsdp", [2])
    (measured,) = predict(replace(crowded, overheads={"fsdp": own_work(0.05)}), "fsdp", [2])
    assert bare.estimate is not None and measured.estimate is not None
    assert measured.estimate.step_time == pytest.approx(bare.estimate.step_time + 0.10)
    assert any("(50.0 ms x2 core sharing)" in note for note in measured.estimate.notes)


def test_an_own_work_clipped_to_zero_changes_nothing_but_the_note() -> None:
    (bare,) = predict(ctx("fsdp"), "fsdp", [2])
    (zero,) = predict(replace(ctx("fsdp"), overheads={"fsdp": own_work(0.0)}), "fsdp", [2])
    assert bare.estimate is not None and zero.estimate is not None
    assert zero.estimate.step_time == bare.estimate.step_time and zero.estimate.overhead == 0
    assert UNPRICED_FSDP not in zero.estimate.notes


def test_each_strategy_adds_only_its_own_work() -> None:
    overheads = {"fsdp": own_work(0.05), "ddp": own_work(0.05, "ddp")}
    for strategy in ("ddp", "zero1", "tensor", "pipeline", "localsgd"):
        (bare,) = predict(ctx(strategy), strategy, [2])
        (other,) = predict(replace(ctx(strategy), overheads=overheads), strategy, [2])
        assert bare.estimate is not None and other.estimate is not None
        assert other.estimate.step_time == bare.estimate.step_time, strategy
        assert UNPRICED_FSDP not in other.estimate.notes, strategy
    for strategy in ("zero1", "tensor"):
        (bare,) = predict(ctx(strategy), strategy, [2])
        (own,) = predict(replace(ctx(strategy), overheads={strategy: own_work(0.04, strategy)}),
                         strategy, [2])
        assert bare.estimate is not None and own.estimate is not None
        assert own.estimate.step_time == pytest.approx(bare.estimate.step_time + 0.04), strategy


def test_prediction_records_name_the_own_work_runs() -> None:
    context = replace(ctx("fsdp"), overheads={"fsdp": own_work(0.05)})
    (point,) = predict(context, "fsdp", [2])
    provenance = Provenance("gloo", ("calib",), ("comm-1",), "2026-01-01T00:00:00Z",
                            overhead_runs=("one-rank",))
    record = prediction_record(context, point, provenance, {"version": "0"})
    assert record["prediction"]["calibration"]["overhead"] == ["one-rank"]
    metrics = {m["name"]: m["value"] for m in record["metrics"]}
    assert metrics["strategy_overhead"] == pytest.approx(0.05)
    plain = prediction_record(ctx("ddp"), predict(ctx("ddp"), "ddp", [2])[0],
                              Provenance("gloo"), {"version": "0"})
    assert "overhead" not in plain["prediction"]["calibration"]
    assert "strategy_overhead" not in {m["name"] for m in plain["metrics"]}


def test_fsdp_without_overlap_adds_every_collective() -> None:
    """overlap=0 (what validation sets where the compute fills every CPU core): each unit's
    all-gather twice (forward and, resharded, backward) and its reduce-scatter add to T. On 2
    ranks a ring all-gather/reduce-scatter of S bytes is α + S/2·β: conv 1 MB -> 6 ms, fc
    1.2012 MB -> 7.006 ms; overlapped, the step hides all but AG(conv), AG(fc) and RS(conv)."""
    conv, fc = 1e-3 + 500_000 * 1e-8, 1e-3 + 600_600 * 1e-8
    assert step("fsdp", 2, overlap="0") == pytest.approx(T + 3 * (conv + fc))
    hidden = conv + max(T_F, fc) + fc + max(T_B, conv + fc) + conv
    assert step("fsdp", 2) == pytest.approx(hidden)
    assert step("fsdp", 1, overlap="0") == pytest.approx(T)  # one rank: nothing to move


def test_sandblaster_prices_portions_pushes_and_the_coordinators_commands() -> None:
    """2 replicas + coordinator + 1 shard, batch 10 in 2 portions of 5 samples (50 ms each):
    fetch max(α + Pβ, 2(α + Pβ)), one portion per replica with 4α to the coordinator and
    α + Pβ of push (the shard's link takes 2 pushes: 2(α + Pβ) is more), then the L-BFGS
    commands and answers at m = 1: (15 + 5)·α, and the last ASK's round trip."""
    fetch = 2 * (LINK.alpha + P * LINK.beta)
    pushes = max(5 * LINK.alpha + P * LINK.beta, 2 * (LINK.alpha + P * LINK.beta))
    expected = fetch + T / 2 + pushes + 20 * LINK.alpha + 2 * LINK.alpha
    assert step("sandblaster", 4, portions="2", history="1") == pytest.approx(expected)


def test_priority_overlaps_the_pull_with_the_forward_pass() -> None:
    """ps-sync on 2 ranks (one worker, one server): the fetch α + Pβ cut into the toy's two
    layers, pulled in forward order: f + c + max(f, c), f = fetch/2 + α, c = T_f/2."""
    fetch = LINK.alpha + P * LINK.beta
    piece, compute = fetch / 2 + LINK.alpha, T_F / 2
    pulled = piece + compute + max(piece, compute)
    assert step("ps-sync", 2) == pytest.approx(T + 2 * fetch)
    assert step("ps-sync", 2, priority="1") == pytest.approx(pulled + T_B + fetch)
    assert step("ps-async", 2, priority="1") < step("ps-async", 2)


def test_fsdp_tp_is_fsdp_at_tp_1_and_tensor_at_dp_1() -> None:
    """Its two dimensions priced as the strategies it composes: at tp=1 fsdp's overlapped
    exchange (of every parameter), at dp=1 tensor's split compute and collectives."""
    assert step("fsdp-tp", 4, tp="1") == pytest.approx(step("fsdp", 4))
    assert step("fsdp-tp", 2, tp="2") == pytest.approx(step("tensor", 2))
    (point,) = predict(ctx("fsdp-tp", tp="2"), "fsdp-tp", [4])
    assert point.estimate is not None and point.estimate.samples_per_step == 20  # dp=2 x 10
    assert set(point.estimate.comm) == {"allgather (parameter)", "reducescatter (gradient)",
                                        "tensor-parallel (activation)"}

"""Planning side of the model-parallel strategies: options, refusals (exit 2 lines), the
pipeline's cut, roles and replicas, and the analytic volumes their traffic() gives."""
from __future__ import annotations

import pytest

from harness.core.errors import UsageError
from harness.run.plan import resolve
from harness.spec.specs import RunSpec
from harness.strategies import STRATEGIES
from harness.strategies.pipeline_stages import plan_cut, theoretical_bubble


def plan(workload: str = "hep_cnn", **options: object) -> RunSpec:
    return resolve({"workload": workload, "size": "tiny", "comm": "gloo", **options}, None)


def test_the_model_parallel_strategies_are_registered() -> None:
    for name in ("pipeline", "tensor", "dp-tp"):
        cls = STRATEGIES.get(name)
        assert cls.summary and cls.family and cls.engine


@pytest.mark.parametrize(("options", "message"), [
    ({"strategy": "pipeline", "strategy_options": {"microbatches": "3"}, "nproc": 2},
     "microbatches=3 does not divide the batch of 16"),
    ({"strategy": "pipeline", "strategy_options": {"stages": "12"}, "nproc": 12},
     "has only 11 blocks"),
    ({"strategy": "pipeline", "strategy_options": {"schedule": "zigzag"}, "nproc": 2},
     "'zigzag' is not one of gpipe, 1f1b, interleaved-1f1b"),
    ({"strategy": "pipeline", "strategy_options": {"schedule": "1f1b", "microbatches": "1"},
      "nproc": 2}, "1f1b needs at least as many microbatches as stages"),
    ({"strategy": "pipeline", "strategy_options": {"stages": "3"}, "nproc": 2},
     "needs a multiple of 3 ranks"),
    ({"strategy": "dp-tp", "strategy_options": {"tp": "3"}, "nproc": 4},
     "tp=3 does not divide the 4 ranks"),
])
def test_bad_model_parallel_input_is_a_usage_error(options: dict, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        plan(**options)


def test_lstm_has_three_blocks_so_interleaving_two_ranks_is_refused() -> None:
    with pytest.raises(UsageError, match="lstm .tiny. has only 3 blocks"):
        plan("lstm", strategy="pipeline", strategy_options={"schedule": "interleaved-1f1b"},
             nproc=2)


def test_pipeline_layout_roles_and_replicas() -> None:
    spec = plan(strategy="pipeline", nproc=4, strategy_options={"stages": "2"})
    cls = STRATEGIES.get("pipeline")
    assert cls.replicas(spec) == 2 and spec.global_batch == 2 * spec.batch_per_rank
    assert cls.roles(spec) == ["stage0", "stage1", "stage0", "stage1"]
    interleaved = plan(strategy="pipeline", nproc=2,
                       strategy_options={"schedule": "interleaved-1f1b"})
    assert cls.roles(interleaved) == ["stage0+2", "stage1+3"]


def test_the_cut_balances_flops_and_names_the_crossing_activation() -> None:
    cut = plan_cut("alexnet", "tiny", 2)
    assert sum(cut.flops_share) == pytest.approx(1.0)
    assert max(cut.flops_share) < 0.6  # a FLOP-balanced split, not a parameter one
    assert cut.blocks[1][-1] == "classifier.6" and len(cut.cut_elements) == 1
    assert theoretical_bubble(2, 1) == 0.5 and theoretical_bubble(2, 4) == pytest.approx(0.2)
    assert theoretical_bubble(2, 4, chunks=2) == pytest.approx(1 / 9)


def test_pipeline_traffic_is_the_cut_activation_both_ways() -> None:
    spec = plan("lstm", strategy="pipeline", nproc=2, batch_size=4)
    found = STRATEGIES.get("pipeline").traffic(spec, 1.0e6)
    # lstm tiny: 4 samples x 35 tokens x 32 hidden floats cross the cut; stage 0 sends them
    # forward, stage 1 their gradient back: the same bytes on each rank.
    assert found["activation"] == 4 * 35 * 32 * 4 and found["gradient"] == 0


def test_tensor_and_dp_tp_volumes() -> None:
    lstm = STRATEGIES.get("tensor").traffic(plan("lstm", strategy="tensor", nproc=2,
                                                 batch_size=4), 1.0e6)
    # embedding all-reduce (B·35·32·4), decoder logits all-gather (half of B·35·1000·4),
    # decoder input-gradient all-reduce (B·35·32·4)
    assert lstm["activation"] == 17920 + 280000 + 17920 and lstm["gradient"] == 0
    hybrid = STRATEGIES.get("dp-tp").traffic(plan("alexnet", strategy="dp-tp", nproc=2,
                                                  batch_size=4), 4.0 * 899378)
    assert hybrid["gradient"] > 0 and hybrid["activation"] > 0 and hybrid["control"] == 32


def test_unsupported_pairs_are_skipped_with_a_reason() -> None:
    assert "not implemented" in STRATEGIES.get("tensor").unsupported(
        plan("resnet50", strategy="tensor", nproc=2))
    assert "use tensor" in STRATEGIES.get("dp-tp").unsupported(
        plan("lstm", strategy="dp-tp", nproc=2))
    assert STRATEGIES.get("tensor").unsupported(plan("lstm", strategy="tensor",
                                                     nproc=2)) is None

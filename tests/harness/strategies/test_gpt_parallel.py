"""How the strategies split the gpt workload, counted on the meta device without any process:
the Megatron plan (attention and MLP column- then row-wise, vocabulary rows of the tied
embedding, the position table whole), the weights FSDP2's root keeps, the tie a pipeline's
first and last stage share, fsdp-tp's bytes by hand, and the refusals."""
from __future__ import annotations

import pytest

from harness.core.errors import UsageError
from harness.spec.specs import RunSpec
from harness.strategies import STRATEGIES
from harness.strategies import volumes as v
from harness.strategies.fsdp import root_parameters
from harness.strategies.fsdp_tp import local_parameters
from harness.strategies.pipeline_stages import plan_cut, ties
from harness.strategies.tensor import tp_plan

V, T, D, L = 256, 32, 128, 2  # gpt tiny: vocabulary, positions, width, layers


def spec(strategy: str, world: int, size: str = "tiny", **options: object) -> RunSpec:
    cls = STRATEGIES.get(strategy)
    return RunSpec(workload="gpt", size=size, comm="gloo", nproc_per_node=world,
                   batch_per_rank=4, steps=3, strategy=strategy,
                   strategy_options=cls.parse_options(options))


def test_megatron_plan_splits_attention_mlp_and_vocabulary_not_positions() -> None:
    styles, layers = tp_plan("gpt", "tiny", False)
    assert styles["blocks.0.attn.c_attn"] == "colwise"
    assert styles["blocks.0.attn.c_proj"] == "rowwise"
    assert styles["blocks.1.mlp.c_fc"] == "colwise"
    assert styles["blocks.1.mlp.c_proj"] == "rowwise"
    assert styles["lm_head"] == "colwise-replicated" and styles["embed.wte"] == "embedding"
    assert "embed.wpe" not in styles
    # the vocabulary-split embedding first (rows = tokens), then 4 layers a block and the head
    assert len(layers) == 1 + 4 * L + 1 and layers[0].in_features == V
    assert all(layer.positions == T for layer in layers)


def test_tensor_bytes_are_the_per_layer_collectives() -> None:
    batch = 4
    rows = batch * T * 4  # bytes of one fp32 activation row set of width 1
    # wte all-reduce, per block: c_attn's input gradient, c_proj's output, c_fc's input
    # gradient, mlp.c_proj's output (all B·T·d), the head's input gradient (B·T·d) and its
    # gathered logits (B·T·V); at 2 ranks an all-reduce sends its payload, a gather half.
    expected = rows * D * (1 + 4 * L + 1) + rows * V / 2
    assert STRATEGIES.get("tensor").traffic(spec("tensor", 2), 0.0)["activation"] == expected


def test_fsdp_keeps_the_tied_embedding_in_its_root() -> None:
    assert root_parameters("gpt", "tiny") == V * D + T * D  # token and position tables
    assert root_parameters("hep_cnn", "tiny") == 0
    full, root = 1000.0, 100.0
    assert v.fsdp(full, 2, root_bytes=root)["parameter"] == (2 * full - root) / 2


def test_fsdp_tp_holds_split_layers_at_one_over_tp_and_moves_them_by_hand() -> None:
    block_split = (3 * D * D + 3 * D) + D * D + (4 * D * D + 4 * D) + 4 * D * D
    split = V * D + L * block_split  # the vocabulary rows (tied head) and each block's
    total = sum(p.numel() for p in __import__("workloads").get_workload("gpt")
                .build_model("tiny").parameters())
    local, root = local_parameters("gpt", "tiny", 2)
    assert local == total - split / 2 and root == V * D / 2 + T * D
    found = STRATEGIES.get("fsdp-tp").traffic(spec("fsdp-tp", 4, tp=2), 4.0 * total)
    # over dp = 2 ranks (gloo reduce-scatters as an all-reduce): gradient L, gathers 2L - R
    assert found["gradient"] == 4.0 * local
    assert found["parameter"] == 4.0 * (2 * local - root) / 2
    assert found["activation"] == STRATEGIES.get("tensor").traffic(spec("tensor", 2), 0.0)[
        "activation"]


def test_pipeline_sums_the_tied_weight_between_first_and_last_stage() -> None:
    cut = plan_cut("gpt", "tiny", 2)
    assert cut.blocks[0][0] == "embed" and cut.blocks[-1][-1] == "lm_head"
    (tie,) = ties("gpt", "tiny", cut)
    assert tie.stages == (0, 1) and tie.elements == V * D
    with_tie = STRATEGIES.get("pipeline").traffic(spec("pipeline", 2), 0.0)["gradient"]
    assert with_tie == 4.0 * V * D  # each of the 2 ranks all-reduces it: (2-1)/2·2 of it


def test_one_loss_per_data_shard_in_the_trajectory() -> None:
    assert STRATEGIES.get("fsdp-tp").loss_ranks(spec("fsdp-tp", 4, tp=2)) == [0, 2]
    assert STRATEGIES.get("fsdp-tp").replicas(spec("fsdp-tp", 4, tp=2)) == 2
    assert STRATEGIES.get("tensor").loss_ranks(spec("tensor", 2)) == [0]
    assert STRATEGIES.get("pipeline").loss_ranks(spec("pipeline", 4, stages=2)) == [0, 2]
    assert STRATEGIES.get("ddp").loss_ranks(spec("ddp", 2)) == [0, 1]


@pytest.mark.parametrize(("strategy", "world", "size", "options", "why"), [
    ("fsdp-tp", 4, "tiny", {"tp": 3}, "does not divide the 4 ranks"),
    ("fsdp-tp", 4, "small", {"tp": 4}, "6 attention heads"),
    ("tensor", 4, "small", {}, "6 attention heads"),
])
def test_refused_with_the_reason(strategy: str, world: int, size: str,
                                 options: dict[str, object], why: str) -> None:
    with pytest.raises(UsageError, match=why):
        STRATEGIES.get(strategy).check(spec(strategy, world, size, **options))


def test_fsdp_tp_skips_resnet50_and_takes_the_other_cnns() -> None:
    cls = STRATEGIES.get("fsdp-tp")
    make = {"nproc_per_node": 2, "comm": "gloo", "batch_per_rank": 4, "strategy": "fsdp-tp"}
    assert "FC layer" in (cls.unsupported(RunSpec(workload="resnet50", size="tiny", **make))
                          or "")
    for workload in ("alexnet", "hep_cnn", "lstm", "gpt"):
        run = RunSpec(workload=workload, size="tiny", **make)
        assert cls.unsupported(run) is None
        cls.check(run)

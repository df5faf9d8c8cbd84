"""Per-layer facts: totals agree with the whole-model counts, shapes with the models."""
from __future__ import annotations

import json

import pytest

from workloads import get_workload
from workloads.flops import count_flops_per_sample
from workloads.layers import (
    LayerFacts,
    balance_stages,
    block_table,
    choose_parallelism,
    gradient_to_activation_ratio,
    layer_table,
)

PARAMETERS = {"alexnet": 61_100_840, "resnet50": 25_557_032, "hep_cnn": 594_178,
              "lstm": 19_780_400}


@pytest.mark.parametrize("name", sorted(PARAMETERS))
def test_layers_sum_to_the_model(name: str) -> None:
    layers = layer_table(name, "full")
    assert sum(layer.parameters for layer in layers) == PARAMETERS[name]
    assert sum(layer.flops for layer in layers) == count_flops_per_sample(get_workload(name),
                                                                         "full")


def test_alexnet_layers_by_hand() -> None:
    layers = {layer.name: layer for layer in layer_table("alexnet", "full")}
    first, fc1 = layers["features.0"], layers["classifier.1"]
    assert first.activation_elements == 64 * 55 * 55
    # 11x11x3 kernel, 64 filters, 55x55 outputs: 2 FLOP per MAC; the first layer computes
    # no input gradient, so backward (weight gradient only) costs as much as forward
    assert first.forward_flops == 2 * 11 * 11 * 3 * 64 * 55 * 55 == first.backward_flops
    assert (fc1.in_features, fc1.out_features, fc1.parameters) == (9216, 4096, 9216 * 4096 + 4096)
    assert fc1.backward_flops == 2 * fc1.forward_flops == 4 * 9216 * 4096
    assert [layer.kind for layer in layer_table("alexnet", "full")].count("MaxPool2d") == 3


def test_lstm_decoder_rows_are_tokens() -> None:
    decoder = layer_table("lstm", "full")[-1]
    assert (decoder.name, decoder.positions, decoder.in_features) == ("decoder", 35, 650)
    assert decoder.activation_elements == 35 * 10_000


def test_resnet_blocks_keep_bottlenecks_whole() -> None:
    layers = layer_table("resnet50", "tiny")
    assert {layer.block for layer in layers if layer.name.startswith("layer2.0.")} == {"layer2.0"}
    assert layers[0].block == "conv1" and layers[-1].name == "fc"


def test_seeds_rule_splits_fc_layers_and_replicates_convolutions() -> None:
    layers = {layer.name: layer for layer in layer_table("alexnet", "full")}
    # fc1: 37,752,832 parameters against 4096 activations x 32 samples x 4 nodes
    assert gradient_to_activation_ratio(layers["classifier.1"], 32, 4) == pytest.approx(
        37_752_832 / (4096 * 32 * 4))
    assert choose_parallelism(layers["classifier.1"], 32, 4) == "model"
    assert choose_parallelism(layers["features.3"], 32, 4) == "data"
    # at 1000 nodes the gathered activations outweigh fc1's gradients
    assert choose_parallelism(layers["classifier.1"], 32, 1000) == "data"
    pool = layers["features.2"]
    assert gradient_to_activation_ratio(pool, 32, 4) == 0 and pool.parameters == 0


def test_describe_layers_json(capsys: pytest.CaptureFixture[str]) -> None:
    from harness.commands.cli import main

    assert main(["describe", "hep_cnn", "--layers", "--batch-size", "8", "--nodes", "2",
                 "--json"]) == 0
    table = json.loads(capsys.readouterr().out)
    assert (table["batch_per_node"], table["nodes"]) == (8, 2)
    assert sum(row["parameters"] for row in table["layers"]) == 594_178
    assert table["layers"][-1]["name"] == "fc" and table["layers"][-1]["parallelism"] == "data"
    assert set(LayerFacts.__dataclass_fields__) <= set(table["layers"][0])


def test_blocks_and_the_stage_balancer() -> None:
    blocks = block_table(layer_table("resnet50", "tiny"))
    assert [b.name for b in blocks[:5]] == ["conv1", "bn1", "maxpool", "layer1.0", "layer2.0"]
    assert sum(b.parameters for b in blocks) == sum(
        layer.parameters for layer in layer_table("resnet50", "tiny"))
    assert blocks[3].output_elements == layer_table("resnet50", "tiny")[10].activation_elements
    assert balance_stages([4, 1, 1, 1, 1], 2) == [1, 4]      # 4 | 1+1+1+1
    assert balance_stages([1, 2, 3, 4, 5, 6], 3) == [3, 2, 1]  # 6 | 9 | 6 -> max 9
    assert balance_stages([1, 1, 1], 3) == [1, 1, 1]
    with pytest.raises(ValueError):
        balance_stages([1, 2], 3)

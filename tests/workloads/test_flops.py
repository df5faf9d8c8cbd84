"""Parameter and FLOP counts of the canonical (full) models against docs/guide/workloads.md."""
from __future__ import annotations

import json
import subprocess
from collections.abc import Callable

import pytest

from workloads import get_workload
from workloads.flops import count_flops_per_sample, count_parameters

# workload -> (parameters, forward+backward FLOPs per sample)
CANONICAL = {
    "resnet50": (25_557_032, 24.30e9),
    "alexnet": (61_100_840, 4.145e9),
    "hep_cnn": (594_178, 15.43e9),
    "lstm": (19_780_400, 2.78e9),
}


@pytest.mark.parametrize("name", sorted(CANONICAL))
def test_full_size_matches_the_published_model(name: str) -> None:
    parameters, flops = CANONICAL[name]
    info = get_workload(name).describe("full")
    assert info["parameters"] == parameters
    assert info["flops_per_sample"] == pytest.approx(flops, rel=0.01)
    assert info["workload"] == name and info["size"] == "full"


@pytest.mark.parametrize("name", sorted(CANONICAL))
def test_smaller_presets_are_smaller(name: str) -> None:
    workload = get_workload(name)
    counts = [count_flops_per_sample(workload, size) for size in ("tiny", "small", "full")]
    assert 0 < counts[0] < counts[2] and counts[1] <= counts[2]
    assert count_parameters(workload, "tiny") < count_parameters(workload, "full")


def test_describe_reports_shape_and_target() -> None:
    info = get_workload("hep_cnn").describe("full")
    assert info["input_shape"] == [3, 224, 224] and info["num_classes"] == 2
    assert info["target"]["metric"] == "accuracy" and info["target"]["higher_is_better"]
    lstm = get_workload("lstm").describe("full")
    assert lstm["input_shape"] == [35] and lstm["target"]["metric"] == "perplexity"
    assert lstm["target"]["higher_is_better"] is False


def test_describe_cli_json(run_cli: Callable[..., subprocess.CompletedProcess[str]]) -> None:
    result = run_cli("describe", "resnet50", "--size", "full", "--json")
    assert result.returncode == 0, result.stderr
    info = json.loads(result.stdout)
    assert info["parameters"] == 25_557_032
    assert info["flops_per_sample"] == pytest.approx(24.30e9, rel=0.01)
    assert info["input_shape"] == [3, 224, 224]


def test_describe_text_shows_the_figures(capsys: pytest.CaptureFixture[str]) -> None:
    from harness.commands.cli import main

    assert main(["describe", "alexnet", "--size", "full"]) == 0
    out = capsys.readouterr().out
    assert "61,100,840" in out
    assert "4.145 GFLOP" in out

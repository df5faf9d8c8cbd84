"""A pipeline whose FLOP-balanced cut gives a rank only parameter-free layers still trains:
the validation of issue 56 found hep_cnn small at 4 stages failing on every rank count it was
asked for ("optimizer got an empty parameter list")."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from harness.core.errors import UsageError
from harness.strategies.pipeline_stages import plan_cut

STAGES = 4


def cut_with_an_empty_stage() -> tuple[str, str]:
    """The first tiny workload whose 4-stage cut has a stage without parameters."""
    for workload in ("hep_cnn", "alexnet", "resnet50", "lstm"):
        try:
            cut = plan_cut(workload, "tiny", STAGES)
        except UsageError:  # fewer blocks than stages
            continue
        if 0 in cut.parameters:
            return workload, "tiny"
    raise AssertionError("no tiny workload has a parameter-free stage at 4 stages: "
                         "this test needs another case")


def test_a_rank_without_parameters_trains(tmp_path: Path, cli_runner: Any) -> None:
    workload, size = cut_with_an_empty_stage()
    assert plan_cut(workload, size, STAGES).parameters.count(0) >= 1
    store = tmp_path / "store"
    done = cli_runner("run", "-w", workload, "--size", size, "-n", str(STAGES), "--strategy",
                      "pipeline", "--comm", "gloo", "--steps", "3", "--warmup", "1",
                      "--threads", "1", "--peak", "cached", "-q", "--out", str(store),
                      cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    (path,) = store.rglob("*.json")
    record = json.loads(path.read_text())
    assert record["status"] == "success", record["error"]

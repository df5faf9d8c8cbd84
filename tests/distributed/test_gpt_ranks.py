"""gpt tiny through `dtbench run` at 1, 2 and 4 ranks (issue 45's acceptance): at the same
global batch `compare --trajectory` finds fsdp = ddp (2 ranks), fsdp-tp (2 x 2) = ddp (2
ranks), and tensor (2) and a pipeline of 2 stages (its first and last sharing the tied
embedding) = one rank; every rank's counted bytes are the strategy's analytic ones; and
time-to-train on the shipped text reaches its target."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from harness.commands.cli import main

pytestmark = pytest.mark.slow

RUN = ["run", "-w", "gpt", "--size", "tiny", "--steps", "3", "--warmup", "1", "--threads", "1",
       "--batch-size", "4", "-q"]
GLOO = ["--comm", "gloo"]
RUNS = {"one": [],
        "ddp": ["-n", "2", *GLOO, "--strategy", "ddp"],
        "fsdp": ["-n", "2", *GLOO, "--strategy", "fsdp"],
        "tensor": ["-n", "2", *GLOO, "--strategy", "tensor"],
        "pipeline": ["-n", "2", *GLOO, "--strategy", "pipeline"],
        "fsdp-tp": ["-n", "4", "--oversubscribe", *GLOO, "--strategy", "fsdp-tp",
                    "--strategy-opt", "tp=2"]}

@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("gpt")
    found = {}
    for name, extra in RUNS.items():
        found[name] = root / name
        assert main([*RUN, *extra, "--out", str(found[name])]) == 0, name
    return found


def record(store: Path) -> dict[str, Any]:
    (path,) = store.rglob("*.json")
    return json.loads(path.read_text())


@pytest.mark.parametrize(("baseline", "candidate"), [("ddp", "fsdp"), ("ddp", "fsdp-tp"),
                                                     ("one", "tensor"), ("one", "pipeline")])
def test_the_same_model_by_compare_trajectory(stores: dict[str, Path], baseline: str,
                                              candidate: str,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    assert main(["compare", "--trajectory", str(stores[baseline]), str(stores[candidate])]) == 0
    out = capsys.readouterr().out
    assert out.startswith("same trajectory: ") and "bound: the fp32 rounding bound" in out
    a, b = record(stores[baseline]), record(stores[candidate])
    assert a["spec"]["global_batch"] == b["spec"]["global_batch"]
    assert len(a["trajectory"]["losses"]) == len(b["trajectory"]["losses"])


def test_fsdp_tp_keeps_one_loss_per_data_parallel_rank(stores: dict[str, Path]) -> None:
    found = record(stores["fsdp-tp"])
    assert found["spec"]["world_size"] == 4 and found["spec"]["global_batch"] == 8
    assert found["trajectory"]["ranks"] == [0, 2]
    assert record(stores["tensor"])["trajectory"]["ranks"] == [0]
    assert found["notes"]["settings"]["attention_backend"] in ("flash_attention", "math")


def expected(name: str, world: int, options: dict[str, str]) -> dict[str, float]:
    from harness.spec.specs import RunSpec
    from harness.strategies import STRATEGIES
    from workloads import get_workload
    from workloads.flops import count_parameters

    cls = STRATEGIES.get(name)
    spec = RunSpec(workload="gpt", size="tiny", comm="gloo", nproc_per_node=world,
                   batch_per_rank=4, steps=3, strategy=name,
                   strategy_options=cls.parse_options(options))
    return cls.traffic(spec, 4.0 * count_parameters(get_workload("gpt"), "tiny"))


@pytest.mark.parametrize(("name", "world", "options"), [
    ("ddp", 2, {}), ("fsdp", 2, {}), ("tensor", 2, {}), ("pipeline", 2, {}),
    ("fsdp-tp", 4, {"tp": "2"})])
def test_counted_bytes_are_the_analytic_ones(stores: dict[str, Path], name: str, world: int,
                                             options: dict[str, str]) -> None:
    metrics = {m["name"]: m for m in record(stores[name])["metrics"]}
    analytic = expected(name, world, options)
    for kind in ("gradient", "parameter", "activation"):
        counted = metrics[f"comm_bytes_{kind}"]["value"]
        assert counted == pytest.approx(analytic[kind], rel=0.01, abs=64), (name, kind)
    assert analytic["activation"] > 0 if name in ("tensor", "fsdp-tp") else True


def test_tiny_time_to_train_reaches_its_target(tmp_path: Path) -> None:
    out = tmp_path / "ttt"
    assert main(["run", "-w", "gpt", "--size", "tiny", "--mode", "ttt", "--threads", "1",
                 "-q", "--out", str(out)]) == 0
    found = record(out)
    quality = next(m for m in found["metrics"] if m["name"] == "quality")
    assert quality["reached"] is True and quality["value"] <= 3.0
    evaluations = found["trajectory"]["evaluations"]
    assert evaluations[-1]["eval_loss"] <= 3.0 < evaluations[0]["eval_loss"] or \
        len(evaluations) == 1
    assert "perplexity" in evaluations[-1]

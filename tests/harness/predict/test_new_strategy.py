"""A new strategy is one class: registered by name in a fixture (and removed after), `predict`
prices it through its API and through `dtbench predict`, with the defaults of the options the
class declares and the step model the class names, and nothing in harness.predict registers
it a second time."""
from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar

import pytest

from harness.commands.cli import main
from harness.core.errors import UnknownNameError
from harness.facts.traffic import sent_bytes
from harness.predict.calibration import ComputeCalibration
from harness.predict.context import Context, StepEstimate, WorkloadFacts
from harness.predict.costs import Link
from harness.predict.network import uniform
from harness.predict.scaleout import modelled, predict, strategy_options
from harness.spec.specs import RunSpec
from harness.strategies import STRATEGIES, volumes
from harness.strategies.base import Layers, Option, Strategy
from harness.strategies.ddp import BUCKET_MB, COMPRESSION, DDP
from harness.strategies.strategy_options import OVERLAP
from workloads.layers import LayerFacts

# four layers of 5M parameters (20 MB each): ddp's 25 MiB buckets and 100 MiB ones differ
LAYERS = tuple(LayerFacts(f"l{i}", "Linear", f"l{i}", 5_000_000, 1000, 500, 100, 200)
               for i in range(4))
FACTS = WorkloadFacts("toy", "small", LAYERS)
COMPUTE = ComputeCalibration(0.01, (), 10, 1, ("calib",), "2026-01-01T00:00:00Z", "toy run")
LINK = Link(1e-3, 1e-8)


def rounds_step(ctx: Context, nodes: int) -> StepEstimate:
    """The test strategy's step model: the compute, then `rounds` allreduces of the
    parameters, not overlapped."""
    rounds = int(ctx.option("rounds"))
    samples = ctx.rank_batch(nodes)
    compute = ctx.compute_time(samples, nodes)
    exchange = rounds * ctx.network.time("allreduce", ctx.facts.param_bytes, nodes)
    return StepEstimate(compute + exchange, samples * nodes, compute,
                        {"allreduce (parameter)": exchange}, ctx.traffic(nodes))


class Rounds(Strategy):
    """A made-up strategy with its own option and its own step model (above)."""

    name = "rounds"
    step_model = f"{__name__}:rounds_step"
    summary = "allreduce the parameters `rounds` times a step (a test's)"
    family = "data parallel, synchronous"
    engine = "none"
    options: ClassVar[tuple[Option, ...]] = (
        Option("rounds", int, 3, "parameter allreduces a step", minimum=1, aliases=("R",)),)

    @classmethod
    def traffic(cls, spec: RunSpec, param_bytes: float, layers: Layers = None
                ) -> dict[str, float]:
        return volumes.by_kind(parameter=cls.option_value(spec, "rounds") * sent_bytes(
            "allreduce", param_bytes, spec.world_size))

    def setup(self) -> None:
        raise NotImplementedError("a test's strategy only predict prices")

    def step(self, inputs: Any, targets: Any) -> Any:
        raise NotImplementedError("a test's strategy only predict prices")


class BigBuckets(DDP):
    """ddp with 100 MiB buckets by default: only an option's default differs, so it keeps
    ddp's step model by inheritance."""

    name = "ddp-big-buckets"
    options: ClassVar[tuple[Option, ...]] = (replace(BUCKET_MB, default=100), COMPRESSION,
                                             OVERLAP)


@pytest.fixture
def registered() -> Iterator[None]:
    """Both test strategies in the registry every run and predict read, for one test."""
    for cls in (Rounds, BigBuckets):
        STRATEGIES.register(cls.name)(cls)
    try:
        yield
    finally:
        for cls in (Rounds, BigBuckets):
            STRATEGIES.unregister(cls.name)


def ctx(strategy: str, **options: str) -> Context:
    return Context(FACTS, COMPUTE, uniform("toy link", LINK), batch=10,
                   options=strategy_options(strategy, options))


def step(strategy: str, nodes: int, **options: str) -> float:
    (point,) = predict(ctx(strategy, **options), strategy, [nodes])
    assert point.estimate is not None, point.reason
    return point.estimate.step_time


def test_predict_prices_a_strategy_registered_once(registered: None) -> None:
    assert {"rounds", "ddp-big-buckets"} <= set(modelled())
    compute = 0.1  # batch 10 at 10 ms a sample
    allreduce4 = 6 * LINK.alpha + 2 * 3 / 4 * FACTS.param_bytes * LINK.beta  # ring on 4
    assert ctx("rounds").options == {"rounds": 3}  # the class's default, not restated
    assert step("rounds", 4) == pytest.approx(compute + 3 * allreduce4)
    assert step("rounds", 4, R="1") == pytest.approx(compute + allreduce4)
    # an inherited step model priced with the subclass's own defaults
    assert ctx("ddp-big-buckets").options["bucket_mb"] == 100
    assert step("ddp-big-buckets", 4) == pytest.approx(step("ddp", 4, bucket_mb="100"))
    assert step("ddp-big-buckets", 4) != pytest.approx(step("ddp", 4))


def test_dtbench_predict_prices_it(registered: None, tmp_path: Path,
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # no ./results: the network and compute are given
    target = tmp_path / "p.json"
    assert main(["predict", "hep_cnn", "--network", "10gbe-tcp", "--compute-rate", "2e11",
                 "--strategy", "rounds", "--strategy", "ddp-big-buckets", "--strategy-opt",
                 "R=2", "--ranks", "1,4", "--json", str(target)]) == 0
    records = json.loads(target.read_text())
    stated = {r["spec"]["strategy"]: r["spec"]["strategy_options"] for r in records}
    assert stated == {"rounds": {"rounds": 2},
                      "ddp-big-buckets": {"bucket_mb": 100, "compression": "none",
                                          "overlap": True}}
    assert all(r["status"] == "success" for r in records)
    metrics = {(r["spec"]["strategy"], r["spec"]["world_size"]):
               {m["name"]: m["value"] for m in r["metrics"]} for r in records}
    # R=2 allreduces of P against ddp's one of the gradients (P bytes too)
    assert metrics["rounds", 4]["comm_bytes_parameter"] == pytest.approx(
        2 * metrics["ddp-big-buckets", 4]["comm_bytes_gradient"])
    assert metrics["rounds", 1]["comm_bytes"] == 0 < metrics["rounds", 4]["comm_bytes"]
    assert metrics["rounds", 4]["step_time"] > metrics["rounds", 1]["step_time"]

def test_removed_with_its_fixture() -> None:
    assert "rounds" not in STRATEGIES and "ddp-big-buckets" not in STRATEGIES
    with pytest.raises(UnknownNameError, match="the model knows: ddp"):
        predict(ctx("ddp"), "rounds", [2])

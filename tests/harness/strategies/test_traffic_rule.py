"""A strategy's bytes in one place (issue 53): ddp's options are its run fields, compression
and activations follow the one element size rule, and what predict reports is the bytes the
strategy's class says a run of the same configuration sends."""
from __future__ import annotations

import pytest

from harness.predict.calibration import ComputeCalibration
from harness.predict.context import Context, workload_facts
from harness.predict.costs import Link
from harness.predict.network import uniform
from harness.predict.scaleout import modelled, predict, strategy_options
from harness.spec.specs import OPTION_FIELDS, RunSpec
from harness.strategies import STRATEGIES, volumes
from harness.strategies.ddp import BUCKET_MB, COMPRESSION, DDP, compression_ratio
from harness.strategies.zero1 import Zero1


def test_ddps_options_are_its_run_fields_and_zero1_is_ddp() -> None:
    fields = {f.name: f for f in OPTION_FIELDS if f.strategy_option == "ddp"}
    for option in (BUCKET_MB, COMPRESSION):
        declared = fields[option.name]
        assert (option.default, option.help, option.choices) == (
            declared.key_default, declared.help, declared.choices)
    assert BUCKET_MB.minimum == 1 and BUCKET_MB.kind is int and COMPRESSION.kind is str
    assert issubclass(Zero1, DDP) and Zero1.options == DDP.options
    assert not Zero1.uses_ipex and DDP.uses_ipex


def test_compression_sends_each_gradient_element_at_its_precision() -> None:
    assert compression_ratio("none") == 1.0
    assert compression_ratio("fp16") == compression_ratio("bf16") == 0.5
    with pytest.raises(NotImplementedError, match="shape"):
        compression_ratio("powersgd")


@pytest.mark.parametrize("strategy", ["pipeline", "tensor"])
def test_activations_move_at_the_runs_precision(strategy: str) -> None:
    cls = STRATEGIES.get(strategy)
    spec = RunSpec("hep_cnn", "small", comm="gloo", nproc_per_node=2, batch_per_rank=16,
                   strategy=strategy)
    full = cls.traffic(spec, 1e6)
    half = cls.traffic(spec.replace(precision="bf16"), 1e6)
    assert full["activation"] > 0 and half["activation"] == pytest.approx(full["activation"] / 2)
    assert half["gradient"] == full["gradient"]


def _context(strategy: str, batch: int) -> Context:
    compute = ComputeCalibration(0.01, (), batch, 1, ("calib",), "2026-01-01T00:00:00Z", "run")
    return Context(workload_facts("hep_cnn", "small"), compute,
                   uniform("link", Link(1e-5, 1e-9)), batch, comm="gloo",
                   options=strategy_options(strategy, {}))


@pytest.mark.parametrize("strategy", sorted(modelled()))
def test_predict_reports_the_bytes_a_run_of_the_class_sends(strategy: str) -> None:
    """predict at 4 ranks, batch 16, over gloo: the bytes of the class's own traffic() for
    the run spec a user would write (not the one predict builds)."""
    ranks, batch = 4, 16
    (point,) = predict(_context(strategy, batch), strategy, [ranks])
    if point.estimate is None:
        pytest.skip(point.reason)
    run = RunSpec("hep_cnn", "small", comm="gloo", nproc_per_node=ranks, batch_per_rank=batch,
                  strategy=strategy)
    facts = workload_facts("hep_cnn", "small")
    expected = STRATEGIES.get(strategy).traffic(run, facts.param_bytes)
    assert point.estimate.volumes == pytest.approx(expected), strategy
    assert set(expected) == set(volumes.KINDS)

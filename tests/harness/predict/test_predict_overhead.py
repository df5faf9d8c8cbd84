"""A strategy's own per-step work measured from its single-rank run (harness.predict.overhead),
against hand-computed differences; and the single-rank strategy runs kept out of the compute
calibration."""
from __future__ import annotations

import pytest

from harness.predict.calibration import compute_from_rate, compute_from_records
from harness.predict.overhead import measured_overheads, overheads_from_records

HEP = {"workload": "hep_cnn", "size": "small", "precision": "fp32", "backend": "cpu"}


def _compute(records: list[dict]):
    found = compute_from_records(records, **HEP, threads=1, batch=32)
    assert found is not None
    return found


@pytest.fixture
def plain(run_record) -> dict:
    """The compute calibration: 0.32 s a step at batch 32, 1 thread: 10 ms a sample."""
    return run_record([0.30, 0.32, 0.34], threads=1, batch=32, run_id="plain")


def test_overhead_is_the_strategy_run_minus_compute_at_its_batch(run_record, plain) -> None:
    fsdp = run_record([0.38, 0.40, 0.45], threads=1, batch=32, comm="gloo", strategy="fsdp",
                      run_id="fsdp1")
    zero1 = run_record([0.20], threads=1, batch=16, comm="gloo", strategy="zero1",
                       run_id="zero1")
    ignored = [
        run_record([9.0], threads=2, batch=32, comm="gloo", strategy="fsdp", run_id="t2"),
        run_record([9.0], threads=1, batch=32, strategy="fsdp", run_id="no-group"),
        run_record([9.0], threads=1, batch=32, comm="gloo", strategy="fsdp", workload="lstm",
                   run_id="lstm"),
        run_record([9.0], threads=1, batch=32, comm="gloo", strategy="pipeline", run_id="pp"),
        run_record([9.0], world_size=2, threads=1, comm="gloo", strategy="fsdp", run_id="n2"),
    ]
    records = [plain, fsdp, zero1, *ignored]
    compute = _compute([plain])
    found = overheads_from_records(records, compute, **HEP)
    assert sorted(found) == ["fsdp", "zero1"]
    # fsdp: median 0.40 s - 32 x 10 ms = 80 ms; zero1: 0.20 s - 16 x 10 ms = 40 ms
    assert found["fsdp"].seconds == pytest.approx(0.08)
    assert (found["fsdp"].strategy_step, found["fsdp"].compute_step) == pytest.approx((0.4, 0.32))
    assert found["fsdp"].run_ids == ("fsdp1",) and found["fsdp"].batch == 32
    assert found["zero1"].seconds == pytest.approx(0.04) and found["zero1"].batch == 16
    assert "fsdp at 1 rank 400.0 ms - compute 320.0 ms at batch 32" in found["fsdp"].source
    # `dtbench predict --calibration` lists the same; the 2-thread fsdp run has only compute
    # scaled from 1 thread to subtract, the lstm run none: neither is listed
    listed = {(key[0], o.strategy, o.threads): o.seconds
              for key, o in measured_overheads(records)}
    assert listed == pytest.approx({("hep_cnn", "fsdp", 1): 0.08, ("hep_cnn", "zero1", 1): 0.04})


def test_strategy_runs_do_not_calibrate_compute(run_record, plain) -> None:
    fsdp = run_record([0.40] * 3, threads=1, batch=32, comm="gloo", strategy="fsdp")
    assert compute_from_records([fsdp], **HEP, threads=1) is None
    assert _compute([plain, fsdp]).run_ids == ("plain",)
    ddp = run_record([0.32] * 3, threads=1, batch=32, strategy="ddp", run_id="ddp")
    assert _compute([ddp]).run_ids == ("ddp",)  # ddp's single-rank run is compute


def test_faster_than_compute_is_clipped_to_zero(run_record, plain) -> None:
    fast = run_record([0.29, 0.30, 0.31], threads=1, batch=32, comm="gloo", strategy="fsdp")
    found = overheads_from_records([plain, fast], _compute([plain]), **HEP)
    assert found["fsdp"].seconds == 0.0 and found["fsdp"].strategy_step == pytest.approx(0.30)


def test_nearest_batch_and_tied_runs(run_record, plain) -> None:
    # at batch 32 the runs differ from 0.32 s by 0.08 and 0.12: their median 0.10; the run
    # at batch 64 is farther from the compute calibration's batch and is left out
    runs = [run_record([0.40], threads=1, batch=32, comm="gloo", strategy="fsdp", run_id="a"),
            run_record([0.44], threads=1, batch=32, comm="mpi", strategy="fsdp", run_id="b"),
            run_record([5.00], threads=1, batch=64, comm="gloo", strategy="fsdp", run_id="c")]
    found = overheads_from_records([plain, *runs], _compute([plain]), **HEP)
    assert found["fsdp"].seconds == pytest.approx(0.10)
    assert found["fsdp"].run_ids == ("a", "b")


def test_no_overhead_without_a_measured_compute_at_its_threads(run_record) -> None:
    fsdp = run_record([0.40], threads=1, batch=32, comm="gloo", strategy="fsdp")
    assert overheads_from_records([fsdp], compute_from_rate(1e9, 1e11), **HEP) == {}
    two_threads = run_record([0.16], threads=2, batch=32, run_id="plain2")
    scaled = _compute([two_threads])  # 1 thread asked: scaled x2, linear scaling assumed
    assert scaled.scaled and scaled.seconds_per_sample == pytest.approx(0.01)
    assert overheads_from_records([two_threads, fsdp], scaled, **HEP) == {}

"""Measuring does not change what is measured: a run trains bitwise the same with and without
each measurement option (the in-run peak, per-step parameter checksums), in the same rank
processes every run uses. Equality is exact: the same float per step, not a tolerance."""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch

from harness.rank.loops import run_throughput
from harness.run.launch import launch
from harness.rundir import CHECK_SYNC_VAR, RankResult
from harness.spec.specs import LaunchOptions, RunSpec

TTT = RunSpec(workload="hep_cnn", size="tiny", mode="ttt", batch_per_rank=16, threads=1)
THROUGHPUT = RunSpec(workload="hep_cnn", size="tiny", batch_per_rank=8, steps=3, warmup=1,
                     threads=1)


@pytest.fixture(autouse=True)
def keep_threads() -> Iterator[None]:
    saved = torch.get_num_threads()
    yield
    torch.set_num_threads(saved)


def _ranks(spec: RunSpec) -> list[RankResult]:
    ranks = launch(spec, LaunchOptions(), f"undisturbed-{spec.peak}",
                   lambda phase, done, total: None)
    assert ranks is not None
    return ranks


def _training(rank: RankResult) -> dict[str, Any]:
    """What training did, without the clock: every loss, and each evaluation's step and
    quality (the step at which the target was met gives samples_to_target)."""
    evaluations = [{k: v for k, v in entry.items() if k != "seconds"}
                   for entry in rank.quality_history]
    return {"losses": rank.losses, "evaluations": evaluations,
            "reached": rank.target_reached}


def test_time_to_train_is_the_same_with_and_without_the_in_run_peak(cache_dir: Any) -> None:
    """hep_cnn has dropout: a peak reading that drew from the rank's stream changed its masks,
    and with them the step at which the target was reached."""
    cached = _ranks(TTT.replace(peak="cached"))
    in_run = _ranks(TTT.replace(peak="in-run"))
    assert [len(r.peak_readings) for r in in_run] == [2]  # the peak was measured in the rank
    assert [r.peak_readings for r in cached] == [[]]
    assert cached[0].target_reached, "the comparison needs a run that reaches its target"
    assert [_training(r) for r in in_run] == [_training(r) for r in cached]


@pytest.mark.slow
@pytest.mark.matrix  # the one-rank test above runs by default; ~18 s on 2 cores
def test_two_rank_time_to_train_is_the_same_with_and_without_the_in_run_peak(
        cache_dir: Any) -> None:
    spec = TTT.replace(nproc_per_node=2, comm="gloo", strategy="ddp")
    cached = _ranks(spec.replace(peak="cached"))
    in_run = _ranks(spec.replace(peak="in-run"))
    assert all(len(r.peak_readings) == 2 for r in in_run)
    assert [_training(r) for r in in_run] == [_training(r) for r in cached]


def test_throughput_losses_are_the_same_with_each_measurement_option(
        monkeypatch: pytest.MonkeyPatch, cache_dir: Any) -> None:
    """The rank's own loop, in this process: the in-run peak (read after the warm-up and after
    the measured steps) and the per-step parameter checksums leave every loss as it was."""
    monkeypatch.delenv(CHECK_SYNC_VAR, raising=False)
    plain = run_throughput(THROUGHPUT.replace(peak="cached")).losses
    measured = run_throughput(THROUGHPUT.replace(peak="in-run"))
    assert len(measured.peak_readings) == 2
    monkeypatch.setenv(CHECK_SYNC_VAR, "1")
    checked = run_throughput(THROUGHPUT.replace(peak="cached"))
    assert len(checked.param_checksums) == THROUGHPUT.steps
    assert measured.losses == plain
    assert checked.losses == plain


def test_an_extended_warm_up_leaves_the_measured_steps_as_a_fixed_one_would(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The steps an IPEX/compile warm-up adds until step times settle depend on the machine's
    noise: they are rewound (model, optimizer, random streams), so the measured steps train as
    after the fixed warm-up. Forced here on plain eager steps, which train the same way."""
    from harness.rank import loops

    monkeypatch.delenv(CHECK_SYNC_VAR, raising=False)
    spec = THROUGHPUT.replace(peak="cached", warmup=2)
    fixed = run_throughput(spec)
    monkeypatch.setattr(loops, "_extends_warmup", lambda spec: True)
    monkeypatch.setattr(loops, "steady", lambda times: False)
    monkeypatch.setattr(loops, "MAX_EXTRA_WARMUP", 3)
    extended = run_throughput(spec)
    assert len(extended.warmup_times) == spec.warmup + 3
    assert extended.losses == fixed.losses


def test_the_warm_up_of_a_compiled_model_extends_and_rewinds(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """`--compile on` at one rank: the rewind saved the model's state only `if strategy.model`,
    which asks a compiled module for its length (LSTMLanguageModel does not support len()).
    Dynamo's eager backend keeps the module compiled without inductor's minutes of codegen."""
    import functools

    from harness.rank import loops

    monkeypatch.delenv(CHECK_SYNC_VAR, raising=False)
    monkeypatch.setattr(torch, "compile", functools.partial(torch.compile, backend="eager"))
    spec = RunSpec(workload="lstm", size="tiny", batch_per_rank=4, steps=3, warmup=1,
                   threads=1, peak="cached", compile=True, compile_mode="on")
    monkeypatch.setattr(loops, "_extends_warmup", lambda spec: False)
    fixed = run_throughput(spec)
    three = run_throughput(spec.replace(warmup=3))
    monkeypatch.setattr(loops, "_extends_warmup", lambda spec: True)
    monkeypatch.setattr(loops, "steady", lambda times: False)
    monkeypatch.setattr(loops, "MAX_EXTRA_WARMUP", 2)
    extended = run_throughput(spec)
    assert len(extended.warmup_times) == spec.warmup + 2
    # rewound to where the one fixed warm-up step left the model, not trained by the two added
    assert extended.losses == fixed.losses
    assert extended.losses != three.losses

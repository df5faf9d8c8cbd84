"""How long a throughput run measures: the stopping rule on synthetic step-time series, and the
rule in a rank's loop (one rank in process; two ranks deciding together in
tests/harness/run/test_adaptive_runs.py)."""
from __future__ import annotations

import random
from collections.abc import Iterator

import pytest
import torch

from harness.rank import adaptive
from harness.rank.adaptive import BUDGET_SPENT, TARGET_MET, decide, mser_cut, precision
from harness.rank.loops import run_throughput
from harness.spec.specs import RunSpec


@pytest.fixture(autouse=True)
def keep_threads() -> Iterator[None]:
    saved = torch.get_num_threads()
    yield
    torch.set_num_threads(saved)


def series(kind: str, n: int, seed: int = 0) -> list[float]:
    """Step times (s): settled with 1% noise; a slow start of 5 steps; a 2%-per-step drift."""
    rng = random.Random(seed)
    noise = [0.1 * (1 + 0.01 * rng.gauss(0, 1)) for _ in range(n)]
    if kind == "slow start":
        return [0.1 * f for f in (3.0, 2.5, 2.0, 1.6, 1.3)] + noise[5:]
    if kind == "drift":
        return [t * (1 + 0.02 * i) for i, t in enumerate(noise)]
    return noise


def run_rule(times: list[float], *, min_steps: int = 10, target: float = 0.02,
             max_time: float = 3.0) -> tuple[int, adaptive.Decision]:
    """Feed the series a step at a time, as the loop does; (steps measured, last decision)."""
    for n in range(1, len(times) + 1):
        decision = decide(times[:n], sum(times[:n]), min_steps=min_steps, target=target,
                          max_time=max_time)
        if decision.stop:
            return n, decision
    return len(times), decision


def test_a_settled_series_stops_as_soon_as_it_is_precise() -> None:
    times = series("settled", 200)
    stopped, decision = run_rule(times)
    assert decision.reason == TARGET_MET
    # 1% noise: the least count of 10 kept steps is precise enough; the cut keeps >= 10
    assert stopped <= 10 + decision.discard and stopped < 20
    assert precision(times[decision.discard:stopped]) <= 0.02


def test_a_slow_start_is_discarded() -> None:
    times = series("slow start", 200)
    stopped, decision = run_rule(times)
    assert decision.reason == TARGET_MET and decision.discard >= 5
    kept = sorted(times[decision.discard:stopped])
    assert max(kept) < 0.11  # no step of the slow start is in the figure


def test_a_drifting_series_runs_to_its_budget_and_says_so() -> None:
    times = series("drift", 400)
    stopped, decision = run_rule(times)
    assert decision.reason == BUDGET_SPENT
    assert sum(times[:stopped - 1]) < 3.0 <= sum(times[:stopped])  # not a step more
    account = adaptive.summary(times[:stopped], decision.discard, decision.reason,
                               target=2.0, max_time=3.0)
    assert account["target_met"] is False and account["drifting"] is True
    assert account["achieved_ci_pct"] > 2.0


def test_the_cut_is_bounded_and_absent_from_a_flat_series() -> None:
    assert mser_cut([0.1] * 30) == 0
    assert mser_cut([1.0] * 40 + [0.1] * 10) <= 20  # never more than half
    assert mser_cut([5.0, 4.0] + [1.0] * 4) == 0  # keeps MIN_STEPS whatever it would cut


def test_fewer_than_six_steps_never_meet_a_target_but_the_budget_always_holds() -> None:
    for n in range(1, adaptive.MIN_STEPS):
        assert not decide([1.0] * n, 0.5, min_steps=1, target=0.5, max_time=1.0).stop
        assert decide([1.0] * n, 1.0, min_steps=1, target=0.5, max_time=1.0).reason == \
            BUDGET_SPENT
    assert decide([1.0] * 6, 0.5, min_steps=1, target=0.5, max_time=1.0).reason == TARGET_MET
    account = adaptive.summary([1.0, 2.0], 0, BUDGET_SPENT, target=2.0, max_time=1.0)
    assert account["achieved_ci_pct"] is None and account["target_met"] is False


def test_fixed_steps_measure_exactly_that_many() -> None:
    spec = RunSpec(workload="hep_cnn", size="tiny", batch_per_rank=4, steps=7, warmup=1,
                   threads=1)
    result = run_throughput(spec)
    assert len(result.step_times) == 7 and len(result.losses) == 7
    assert result.settling_times == []
    assert result.measurement["rule"] == "fixed" and result.measurement["measured_steps"] == 7


def test_an_adaptive_rank_measures_until_target_or_budget() -> None:
    spec = RunSpec(workload="hep_cnn", size="tiny", batch_per_rank=4, steps=6, warmup=1,
                   threads=1, target_ci=0.01, max_time=0.5)
    result = run_throughput(spec)
    account = result.measurement
    measured = account["measured_steps"]
    assert account["rule"] == "adaptive" and measured >= 6
    assert len(result.losses) == measured
    assert len(result.settling_times) == account["discarded_steps"]
    assert len(result.settling_times) + len(result.step_times) == measured
    # 0.01% is out of reach in half a second of hep_cnn's steps
    assert account["stopped"] == BUDGET_SPENT and account["target_met"] is False
    # the budget is checked after every step: at most one step past it
    assert account["measured_s"] - max(result.step_times + result.settling_times) < 0.5

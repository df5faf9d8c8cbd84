"""`--floor-decides` (compare and gate): at run level, against a history's floor, a change of
the runs' medians beyond the threshold and the floor is called whatever the runs' bootstrap
interval says; metrics without a floor, and one run a side, are decided as before. Counted on
constructed runs; nothing is timed."""
from __future__ import annotations

from typing import Any

import pytest

from harness.commands.cli import build_parser
from harness.compare import power
from harness.compare.rows import IMPROVED, OK, REGRESSION, UNRESOLVED, compare_records
from harness.records.experiment import experiment_key
from tests.harness.compare.test_compare import GLOBAL_BATCH, make_record, steady_steps
from tests.harness.compare.test_power import synthetic_pool


def runs(side: str, speeds: tuple[float, ...]) -> list[dict[str, Any]]:
    """One record a run, each run's steps steady at GLOBAL_BATCH / speed samples a second."""
    return [make_record(f"{side}{i}", steady_steps(seed=i, mean=GLOBAL_BATCH / speed,
                                                   noise=GLOBAL_BATCH / speed * 1e-4))
            for i, speed in enumerate(speeds)]


# Three runs a side whose medians are 6% apart, one candidate run faster than one baseline
# run: the runs' bootstrap interval of the ratio spans 1.
BASE, SLOWER = runs("b", (100.0, 101.0, 92.0)), runs("c", (93.0, 94.0, 100.5))


def throughput(baseline: list[dict[str, Any]], candidate: list[dict[str, Any]],
               floor: float | None, floor_decides: bool) -> tuple[str, Any]:
    noise = None if floor is None else {
        experiment_key(baseline[0]): {"throughput": floor, "step_time": floor}}
    comparison = compare_records(baseline, candidate, 5.0, noise=noise,
                                 floor_decides=floor_decides)
    (row,) = [row for row in comparison.rows if row.metric == "throughput"]
    return row.verdict, row.test


def test_beyond_the_floor_a_drop_is_called_though_the_runs_overlap() -> None:
    shipped, test = throughput(BASE, SLOWER, 4.0, floor_decides=False)
    assert test.level == "runs" and test.ratio == pytest.approx(94.0 / 100.0, rel=1e-3)
    assert test.ci_low < 1.0 < test.ci_high and shipped == OK
    assert throughput(BASE, SLOWER, 4.0, floor_decides=True)[0] == REGRESSION
    # and the other way: a rise beyond the floor is an improvement
    assert throughput(SLOWER, BASE, 4.0, floor_decides=True)[0] == IMPROVED


def test_within_the_floor_or_without_one_nothing_changes() -> None:
    # the floor wider than the change: below resolution, never a regression
    assert throughput(BASE, SLOWER, 8.0, floor_decides=True)[0] == UNRESOLVED
    # no floor for the experiment (a history of fewer than 5 commits): the runs' interval
    # decides, as without the option
    assert throughput(BASE, SLOWER, None, floor_decides=True)[0] == OK
    # one run a side is decided by its steps' test, as without the option
    one_base, one_slower = runs("b", (100.0,)), runs("c", (99.0,))
    assert throughput(one_base, one_slower, 0.5, floor_decides=True) \
        == throughput(one_base, one_slower, 0.5, floor_decides=False)


def test_on_a_pool_the_rule_only_adds_alarms_where_the_runs_overlap() -> None:
    """A synthetic pool (invocations 1.5% apart, 5% slowdowns, commits of three invocations
    against a history; seeded): every gate the shipped rule fails fails under --floor-decides
    too, and each gate the rule adds has a regressed row whose runs' interval spans 1 (one
    such gate in this pool)."""
    pool = synthetic_pool(24, (5.0,), spread=0.015, seed=0, repeats=1)
    keys = power.spec_keys(pool)
    added = 0
    for gate in power.gates_of(pool, "history:3"):
        shipped = power.decide(gate, keys)
        floored = power.decide(gate, keys, floor_decides=True)
        assert floored.exit_code == 1 or shipped.exit_code == 0
        if floored.exit_code == 1 and shipped.exit_code == 0:
            added += 1
            assert gate.slowdown_pct == 5.0
            assert any(row.test is not None and row.test.ci_low < 1.0 < row.test.ci_high
                       for row in floored.comparison.regressions)
    assert added == 1


@pytest.mark.parametrize("command", ["compare", "gate"])
def test_compare_and_gate_take_the_option(command: str) -> None:
    parser = build_parser()
    assert parser.parse_args([command]).floor_decides is False
    assert parser.parse_args([command, "--floor-decides"]).floor_decides is True

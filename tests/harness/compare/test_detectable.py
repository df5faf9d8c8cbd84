"""What a pass of the gate means (harness/compare/detectable.py): the smallest slowdown the gate
catches 9 times in 10, from a history of known spread, and the line the gate's summary prints."""
from __future__ import annotations

import math
from statistics import NormalDist
from typing import Any

import pytest

from harness.compare.baseline import select_baseline
from harness.compare.command import judge
from harness.compare.detectable import (
    bar_log,
    caught_probability,
    detectable,
    runs_spread,
    smallest_slowdown,
    summary_lines,
)
from harness.compare.gate import Decided, summary
from tests.harness.compare.test_compare import make_record

STEP = 0.010


def history_and_candidate(step: float = 0.02) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Ten commits of main, three runs each, whose medians alternate between two levels
    `step` apart in log (every consecutive difference is `step`: the spread between commits
    is 1.4826 x step exactly); a candidate of three runs at the lower level."""
    def runs(label: str, commit: str, branch: str, level: float, when: int
             ) -> list[dict[str, Any]]:
        found = []
        for repeat in range(3):
            steps = [STEP / level * (1 + 1e-4 * (i % 3 - 1)) for i in range(12)]
            record = make_record(f"{label}-{repeat}", steps)
            record["code"] = {"commit": commit, "branch": branch, "dirty": False}
            record["created_at"] = f"2026-12-{when + 1:02d}T00:00:0{repeat}Z"
            found.append(record)
        return found

    history = [record for index in range(10)
               for record in runs(f"h{index}", f"{index:040x}", "main",
                                  math.exp(step * (index % 2)), index)]
    return history, runs("cand", "c" * 40, "change", 1.0, 20)


def test_the_smallest_caught_slowdown_of_a_history_with_known_spread() -> None:
    history, candidate = history_and_candidate()
    chosen = select_baseline(history, candidate, "history", branch="main")
    verdict = judge(chosen.records, candidate, 5.0, spread=chosen.spread)
    assert verdict.exit_code == 0
    (found,) = detectable(verdict.comparison, chosen.spread)
    sigma = 1.4826 * 0.02
    assert found.sigma == pytest.approx(sigma)
    assert found.source == "history: 10 commits of 3 run(s)"
    # the floor (exp(1.96 sigma) - 1, 95%) is widened for the comparison's 2 gated metrics
    # (throughput, step time) to the two-sided 1 - 0.05/2 band, beyond the 5% threshold here
    z_family = NormalDist().inv_cdf(1 - 0.05 / 4) * 1.96 / NormalDist().inv_cdf(0.975)
    assert found.bar_pct == pytest.approx(math.expm1(z_family * sigma) * 100, rel=1e-9)
    drop = z_family * sigma + NormalDist().inv_cdf(0.9) * sigma
    assert found.slowdown_pct == pytest.approx((1 - math.exp(-drop)) * 100, rel=1e-9)
    assert 9.5 < found.slowdown_pct < 10.5
    line = summary_lines([found])[-1]
    assert line == (f"  hep_cnn: {found.slowdown_pct:.1f}% (called beyond {found.bar_pct:.1f}%; "
                    "spread +/-3.0%, history: 10 commits of 3 run(s))")


def test_a_quiet_history_leaves_the_threshold_as_the_bar() -> None:
    history, candidate = history_and_candidate(step=0.002)
    chosen = select_baseline(history, candidate, "history", branch="main")
    (found,) = detectable(judge(chosen.records, candidate, 5.0, spread=chosen.spread).comparison,
                          chosen.spread)
    assert found.bar_pct == pytest.approx(1 / 0.95 * 100 - 100)  # a drop of 5% exactly
    assert 5.0 < found.slowdown_pct < 5.5


def test_the_arithmetic_inverts() -> None:
    bar = bar_log(5.0, 12.0)
    assert bar == pytest.approx(math.log(1.12))
    assert bar_log(5.0, None) == pytest.approx(-math.log(0.95))
    slowdown = smallest_slowdown(0.04, bar)
    assert caught_probability(slowdown, 0.04, bar) == pytest.approx(0.9)
    assert caught_probability(100 * (1 - math.exp(-bar)), 0.04, bar) == pytest.approx(0.5)
    assert caught_probability(3.0, 0.0, bar) == 0.0


def test_without_a_history_the_spread_comes_from_the_runs_of_each_side() -> None:
    # log values 0 and 0.1 on each side: pooled sd 0.0707, over 2 and 2 runs
    values = [1.0, math.exp(0.1)]
    assert runs_spread(values, values) == pytest.approx(0.1 / math.sqrt(2) * 1.0)
    assert runs_spread([1.0], values) is None
    history, candidate = history_and_candidate()
    verdict = judge(history[:3], candidate, 5.0)
    (found,) = detectable(verdict.comparison)
    assert found.source == "runs: 3 against 3"


def test_the_gate_summary_says_which_baseline_and_what_a_pass_means() -> None:
    history, candidate = history_and_candidate()
    chosen = select_baseline(history, candidate, "history", branch="main")
    decided = Decided(judge(chosen.records, candidate, 5.0, spread=chosen.spread),
                      "the history of main on this runner (history)", chosen.spread)
    text, page = summary(decided)
    assert text.startswith("no significant change in 2 gated metrics\n")
    assert "Baseline: the history of main on this runner (history)." in text
    lines = page.splitlines()
    assert lines[0] == "### dtbench gate ✅" and lines[2] == text.splitlines()[0]
    assert page.index("| metric |") < page.index("Baseline:") < page.index(
        "What a pass means")
    row = next(line for line in lines if line.startswith("| hep\\_cnn |"))
    assert row.startswith("| hep\\_cnn | 9.9% |")
    assert all(len(line) <= 120 for line in text.splitlines())


def test_the_gate_summary_names_the_floor_rule_only_where_a_floor_decided() -> None:
    """--floor-decides against a history with a floor: the summary says the rule decided;
    without a history's spread (a baseline run now) or without the option it says nothing."""
    history, candidate = history_and_candidate()
    chosen = select_baseline(history, candidate, "history", branch="main")
    rule = "Rule: a change beyond the history's floor fails the gate whatever the runs' " \
        "interval says (--floor-decides)."
    verdict = judge(chosen.records, candidate, 5.0, spread=chosen.spread, floor_decides=True)
    text, page = summary(Decided(verdict, "the history", chosen.spread, floor_decides=True))
    assert rule in text and rule in page
    assert rule not in summary(Decided(verdict, "the history", chosen.spread))[0]
    assert rule not in summary(Decided(verdict, "the merge base", floor_decides=True))[0]

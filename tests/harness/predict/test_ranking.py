"""Strategy rankings: the probability that an order holds over generated draws, the ranking of
predictions at a node count, and predicted against measured order on generated cells."""
from __future__ import annotations

from pathlib import Path

import pytest

from harness.commands.cli import main
from harness.predict.context import StepEstimate
from harness.predict.ranking import (
    agreement,
    order_probability,
    pair_rows,
    rank,
    rankings,
    run_spread,
)
from harness.predict.scaleout import Point


def point(strategy: str, step: float, draws: tuple[float, ...] = (), nodes: int = 4,
          samples: float = 40.0) -> Point:
    estimate = StepEstimate(step, samples, step, {}, {})
    return Point(strategy, nodes, estimate, draws=draws)


def test_the_probability_counts_the_draws_where_the_whole_order_holds() -> None:
    first = [3.0] * 10
    second = [2.0] * 7 + [3.5] * 3  # above the first in 3 of 10 draws
    third = [1.0] * 9 + [4.0]  # above the second in draw 10 (where the first also fails)
    assert order_probability([first, second]) == pytest.approx(0.7)
    assert order_probability([second, third]) == pytest.approx(0.9)
    assert order_probability([first, second, third]) == pytest.approx(0.7)
    assert order_probability([first, [float("nan")] + [2.0] * 9]) == pytest.approx(1.0)
    assert order_probability([first, []]) is None and order_probability([first]) == 1.0


def test_strategies_rank_by_throughput_with_the_share_of_draws() -> None:
    # step times per draw: ddp always faster than fsdp, zero1 overtakes ddp in 1 of 4 draws
    points = {"ddp": point("ddp", 0.10, (0.10, 0.11, 0.09, 0.10)),
              "zero1": point("zero1", 0.105, (0.105, 0.108, 0.095, 0.099)),
              "fsdp": point("fsdp", 0.2, (0.2, 0.2, 0.2, 0.2)),
              "tensor": Point("tensor", 4, None, "no FC layer")}
    found = rank(points, 4)
    assert found.order == ("ddp", "zero1", "fsdp")
    assert found.throughput["ddp"] == pytest.approx(400.0)
    # ddp > zero1 holds in draws 1 and 3 (0.10 < 0.105, 0.09 < 0.095); not 2 (0.11 > 0.108)
    # nor 4 (0.10 > 0.099)
    assert found.pairs == (pytest.approx(0.5), pytest.approx(1.0))
    assert found.probability == pytest.approx(0.5)
    assert "ddp" in found.line() and "holds in 50% of draws" in found.line()
    assert "tensor: no FC layer" in found.line()
    assert rank({"ddp": point("ddp", 0.1), "fsdp": point("fsdp", 0.2)}, 4).probability is None


def test_rankings_cover_every_node_count() -> None:
    found = rankings({"ddp": [point("ddp", 0.1, nodes=2), point("ddp", 0.2, nodes=8)],
                      "fsdp": [point("fsdp", 0.15, nodes=2), point("fsdp", 0.1, nodes=8)]})
    assert [(r.nodes, r.order) for r in found] == [(2, ("ddp", "fsdp")), (8, ("fsdp", "ddp"))]


def test_predicted_against_measured_order_on_generated_cells() -> None:
    fast, slow = point("ddp", 0.1, (0.1,) * 4), point("fsdp", 0.2, (0.2,) * 4)
    cells = {
        # measured as predicted, the difference (x2) beyond the spreads (5% and 2.5%)
        "agree": {"ddp": ([380.0, 400.0, 420.0], fast), "fsdp": ([195.0, 200.0, 205.0], slow)},
        # the measured order reversed, beyond the spread: a disagreement
        "disagree": {"ddp": ([300.0, 300.0, 300.0], fast), "fsdp": ([400.0, 410.0], slow)},
        # a 1% difference inside a 10% spread: not judged
        "within": {"ddp": ([90.0, 101.0, 110.0], fast), "fsdp": ([100.0, 100.0], slow)},
        # one run a side: the spread is unknown
        "alone": {"ddp": ([100.0], fast), "fsdp": ([50.0], slow)},
    }
    rows = {row.cell: row for row in pair_rows(cells)}
    assert rows["agree"].first == "ddp" and rows["agree"].resolved and rows["agree"].agrees
    assert rows["agree"].spread == pytest.approx((0.05**2 + 0.025**2) ** 0.5)
    assert rows["agree"].probability == 1.0
    assert rows["disagree"].resolved and not rows["disagree"].agrees
    assert rows["within"].resolved is False and rows["alone"].resolved is None
    assert agreement(list(rows.values())) == (
        "rankings: 1 of 2 pairs whose measured difference exceeds the between-run spread "
        "ordered as measured; 1 within the spread, 1 with one run a side (spread unknown): "
        "not judged (2 of them in the measured order)")
    assert run_spread([90.0, 101.0, 110.0]) == pytest.approx(10 / 101)


def test_dtbench_predict_ranks_a_comma_list_of_strategies(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)  # no ./results: the network and compute are given
    assert main(["predict", "hep_cnn", "--strategy", "ddp,fsdp", "--strategy", "zero1",
                 "--network", "10gbe-tcp", "--compute-rate", "2e11", "--nodes", "2,64",
                 "--run-spread", "0.05"]) == 0
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if line.startswith("at ")]
    assert [line.split(":")[0] for line in lines] == ["at 2 ranks", "at 64 ranks"]
    assert all("of draws" in line for line in lines)
    assert "intervals: 90% by Monte Carlo over 1 uncertain input(s)" in out

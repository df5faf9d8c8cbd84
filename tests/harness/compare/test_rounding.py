"""The tolerance of `compare --trajectory` comes from the arithmetic (issue 57): twice the
rounding bound γ_n = n·u/(1 − n·u) of the longest sum a step orders differently, once per update
and once for the forward pass, at the loss's scale; the output names the bound it used."""
from __future__ import annotations

from pathlib import Path

import pytest

from harness.commands.cli import main
from harness.compare.rounding import UNIT_ROUNDOFF, positions_per_sample, rounding_bound
from harness.compare.trajectory import compare_trajectories
from harness.core.errors import UsageError
from tests.harness.compare.test_compare import write
from tests.harness.compare.test_trajectory_ranks import WHOLE, _run, _trajectory

GPT = {"workload": "gpt", "size": "tiny", "precision": "fp32"}


def test_the_bound_is_the_rounding_of_a_step_s_gradient_sum_growing_with_the_step() -> None:
    bound = rounding_bound(GPT, 16, GPT)
    assert bound.terms == 16 * 32 and bound.positions == 32  # samples x tokens
    nu = 512 * 2.0 ** -24
    assert bound.gamma == pytest.approx(nu / (1 - nu), rel=1e-12)
    # (k + 1) errors of each side, at the loss's scale (absolute below 1)
    assert bound.at(19, 1.03, 1.02) == pytest.approx(2 * 20 * bound.gamma * 1.03)
    assert bound.at(19, 0.5, 0.4) == pytest.approx(2 * 20 * bound.gamma)
    assert bound.at(1, 5.0, 5.0) < bound.at(2, 5.0, 5.0)
    assert "fp32 rounding bound" in bound.describe() and "n = 512" in bound.describe()


def test_a_given_tolerance_replaces_the_bound() -> None:
    bound = rounding_bound(GPT, 16, GPT, given=1e-3)
    assert bound.at(19, 3.0, 3.0) == pytest.approx(3e-3) == bound.at(0, 3.0, 3.0)
    assert "given tolerance 0.001" in bound.describe()


def test_positions_are_tokens_or_pixels() -> None:
    assert positions_per_sample({"workload": "lstm", "size": "tiny"}) == 35
    assert positions_per_sample({"workload": "hep_cnn", "size": "tiny"}) == 32 * 32
    assert positions_per_sample({"workload": "no-such", "size": "tiny"}) == 1


def test_no_common_or_no_finite_bound_is_refused_saying_to_give_one() -> None:
    with pytest.raises(UsageError, match="fp32 and bf16: no common rounding bound"):
        rounding_bound(GPT, 16, {**GPT, "precision": "bf16"})
    bf16 = {**GPT, "precision": "bf16"}
    assert 512 * UNIT_ROUNDOFF["bf16"] >= 1
    with pytest.raises(UsageError, match=r"no rounding bound \(n·u ≥ 1\); give --tolerance"):
        rounding_bound(bf16, 16, bf16)


def test_the_verdict_names_its_bound_and_where_it_was_crossed(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = _run([WHOLE], 32, workload="gpt", size="tiny")  # n = 32 x 32 tokens
    # a learning rate off by 1% moves each step by about 1% of what the loss has moved
    moved = _run([[WHOLE[0], *[v + 0.01 * (WHOLE[0] - v) for v in WHOLE[1:]]]], 32,
                 workload="gpt", size="tiny")
    found = compare_trajectories(_trajectory(base), _trajectory(moved))
    assert found.first_divergent_step == 2 and found.bound_at_divergence is not None
    assert found.max_difference > found.bound_at_divergence
    near = _run([[v * (1 + 1e-6) for v in WHOLE]], 32, workload="gpt", size="tiny")
    assert compare_trajectories(_trajectory(base), _trajectory(near)).same  # ten ulps
    a, b = write(tmp_path / "a.json", base), write(tmp_path / "b.json", moved)
    assert main(["compare", "--trajectory", a, b]) == 1
    out = capsys.readouterr().out
    assert out.startswith("diverged at step 2 (bound there ")
    assert "bound: the fp32 rounding bound 2(k+1)·γ_n·max(1, |loss|)" in out
    assert main(["compare", "--trajectory", a, b, "--tolerance", "0.1"]) == 0
    assert "bound: the given tolerance 0.1 x max(1, |loss|)" in capsys.readouterr().out

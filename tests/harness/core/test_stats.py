"""Summary statistics: agreement with the statistics module, the median CI, variance warnings."""
from __future__ import annotations

import math
import statistics

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.core.stats import Stats, median_ci, quantile

SAMPLES = [0.9, 1.3, 1.0, 1.1, 0.8, 1.2, 1.05, 0.95, 1.15, 1.0]


def test_of_agrees_with_the_statistics_module() -> None:
    stats = Stats.of(SAMPLES)
    q1, median, q3 = statistics.quantiles(SAMPLES, n=4, method="inclusive")
    assert stats.n == len(SAMPLES)
    assert stats.min == min(SAMPLES) and stats.max == max(SAMPLES)
    assert stats.median == pytest.approx(statistics.median(SAMPLES)) == pytest.approx(median)
    assert stats.mean == pytest.approx(statistics.fmean(SAMPLES))
    assert stats.q1 == pytest.approx(q1)
    assert stats.q3 == pytest.approx(q3)
    assert stats.iqr == pytest.approx(q3 - q1)
    assert stats.stddev == pytest.approx(statistics.stdev(SAMPLES))


def test_quantile_is_the_inclusive_definition_and_order_free() -> None:
    """One definition (type 7): statistics' "inclusive" method, interpolated between ranks."""
    cuts = statistics.quantiles(SAMPLES, n=100, method="inclusive")
    for percent in (1, 25, 50, 75, 99):
        assert quantile(SAMPLES, percent / 100) == pytest.approx(cuts[percent - 1])
    assert quantile([3, 1, 2], 0.5) == 2.0 and quantile([0, 10], 0.99) == pytest.approx(9.9)
    assert quantile([7.0], 0.3) == 7.0


def test_of_ignores_input_order_and_accepts_ints() -> None:
    assert Stats.of([5, 1, 3, 2, 4]) == Stats.of([1, 2, 3, 4, 5])
    stats = Stats.of([5, 1, 3, 2, 4])
    assert (stats.median, stats.q1, stats.q3) == (3.0, 2.0, 4.0)


def test_single_sample_has_zero_spread() -> None:
    stats = Stats.of([2.5])
    assert (stats.n, stats.min, stats.max, stats.median, stats.q1, stats.q3) == (
        1, 2.5, 2.5, 2.5, 2.5, 2.5)
    assert stats.stddev == 0.0 and stats.iqr == 0.0
    assert (stats.ci_low, stats.ci_high) == (2.5, 2.5)


def test_of_rejects_no_samples() -> None:
    with pytest.raises(ValueError, match="no samples"):
        Stats.of([])


def test_median_ci_for_ten_samples_is_second_and_ninth_order_statistic() -> None:
    ordered = [float(i) for i in range(10)]
    assert median_ci(ordered) == (1.0, 8.0)
    assert (Stats.of(list(reversed(ordered))).ci_low, Stats.of(ordered).ci_high) == (1.0, 8.0)


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5])
def test_median_ci_below_six_samples_is_the_full_range(n: int) -> None:
    ordered = [float(10 * i) for i in range(n)]
    assert median_ci(ordered) == (ordered[0], ordered[-1])


def test_median_ci_matches_binomial_coverage() -> None:
    # For each n the interval [x_(k), x_(n-k+1)] must cover the median with >= 95% probability,
    # and the next tighter pair must not.
    for n in range(6, 60):
        ordered = [float(i) for i in range(n)]
        low, high = median_ci(ordered)
        k = int(low) + 1
        assert high == n - k
        tail = sum(math.comb(n, j) for j in range(k)) / 2**n
        assert 1 - 2 * tail >= 0.95
        tighter_tail = sum(math.comb(n, j) for j in range(k + 1)) / 2**n
        assert 1 - 2 * tighter_tail < 0.95


def test_median_ci_of_nothing_is_nan() -> None:
    low, high = median_ci([])
    assert math.isnan(low) and math.isnan(high)


def test_few_samples_warn() -> None:
    warnings = Stats.of([1.0, 1.0, 1.0]).warnings()
    assert any("only 3 samples" in w for w in warnings)
    assert not any("high variance" in w for w in warnings)


def test_high_variance_warns_and_steady_samples_do_not() -> None:
    noisy = Stats.of([1.0, 1.0, 1.0, 2.0, 2.0, 2.0, 3.0, 3.0])
    assert noisy.relative_iqr > 0.10
    assert any(w.startswith("high variance") for w in noisy.warnings())
    steady = Stats.of([1.00, 1.01, 0.99, 1.00, 1.02, 0.98, 1.00, 1.01])
    assert steady.warnings() == []


def test_identical_zero_samples_are_not_high_variance() -> None:
    assert not any("high variance" in w for w in Stats.of([0.0] * 8).warnings())


def test_as_dict_has_every_field_in_order() -> None:
    stats = Stats.of(SAMPLES)
    data = stats.as_dict()
    assert tuple(data) == Stats.fields
    assert data["iqr"] == pytest.approx(stats.q3 - stats.q1)
    assert data["ci95"] == [stats.ci_low, stats.ci_high]
    assert data["n"] == 10 and isinstance(data["n"], int)


def _exact_k(n: int, tail: float = 0.025) -> int:
    """The order statistic of the median's CI by exact binomial sums (slow: for checking)."""
    k, cumulative = 0, 0.0
    while k < n and cumulative + math.comb(n, k) / 2**n <= tail:
        cumulative += math.comb(n, k) / 2**n
        k += 1
    return k


@given(n=st.integers(1, 100_000), seed=st.integers(0, 2**32 - 1),
       shape=st.sampled_from(["lognormal", "ties", "bimodal"]))
@settings(max_examples=40, deadline=None)
def test_stats_invariants_up_to_1e5_samples(n: int, seed: int, shape: str) -> None:
    rng = np.random.default_rng(seed)
    if shape == "lognormal":
        samples = rng.lognormal(-5, 0.5, n)
    elif shape == "ties":
        samples = rng.integers(0, 5, n).astype(float)
    else:
        samples = np.where(rng.random(n) < 0.2, 3.0, 1.0) * rng.lognormal(0, 0.05, n)
    stats = Stats.of(samples)
    assert stats.n == n
    assert stats.min <= stats.ci_low <= stats.median <= stats.ci_high <= stats.max
    assert stats.q1 <= stats.median <= stats.q3
    ordered = np.sort(samples)
    assert stats.median == pytest.approx(float(np.median(samples)))
    if n <= 400:  # the exact binomial sums are affordable here
        k = _exact_k(n)
        expected = (ordered[k - 1], ordered[n - k]) if k else (ordered[0], ordered[-1])
        assert (stats.ci_low, stats.ci_high) == expected


def test_median_ci_of_a_million_samples_is_fast_enough_to_run_here() -> None:
    samples = np.sort(np.random.default_rng(0).normal(size=1_000_000))
    low, high = median_ci(samples)
    assert -0.01 < low < 0 < high < 0.01


def test_holm_keeps_the_p_values_that_survive_in_order() -> None:
    """m = 4 at alpha 0.05: the smallest against 0.0125, the next 0.0167, then 0.025, 0.05;
    the first to fail ends the run, whatever comes after it."""
    from harness.core.stats import holm_survivors

    assert holm_survivors([0.04, 0.001, 0.012, 0.03]) == [False, True, True, False]
    assert holm_survivors([0.01, 0.011, 0.012, 0.013]) == [True, True, True, True]
    assert holm_survivors([]) == []

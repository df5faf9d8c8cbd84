"""Prediction intervals from synthetic inputs of known spread: the draws, their quantiles, the
between-run spread and fit errors read from records, and a validation row's interval."""
from __future__ import annotations

import math
import statistics

import numpy as np
import pytest

from harness.predict.calibration import comm_fits
from harness.predict.interval import between_run_spread, fit_errors
from harness.predict.uncertain import (
    DRAWS,
    Uncertain,
    bounds,
    coverage,
    factor_draws,
    half_width,
    inside,
    pooled_log_sd,
)
from harness.predict.validate import validate

Z90 = 1.6448536269514722  # the standard normal's 95th percentile


def column(inputs: list[Uncertain], target: str) -> np.ndarray:
    return np.array([draw[target] for draw in factor_draws(inputs)])


def test_a_log_normal_input_gives_its_own_90_percent_interval() -> None:
    sigma = 0.08
    draws = column([Uncertain("compute (between-run spread)", "compute", sigma)], "compute")
    assert len(draws) == DRAWS
    assert np.std(np.log(draws), ddof=1) == pytest.approx(sigma, rel=0.1)
    low, high = bounds(draws)
    # the exact 90% interval of exp(sigma z) is exp(-+1.645 sigma); 400 draws land near it
    assert math.log(low) == pytest.approx(-Z90 * sigma, rel=0.12)
    assert math.log(high) == pytest.approx(Z90 * sigma, rel=0.12)


def test_a_stated_range_is_drawn_uniformly_in_log_space_inside_its_bounds() -> None:
    draws = column([Uncertain("p100 variant", "compute", low=1.0, high=1.14)], "compute")
    assert draws.min() >= 1.0 and draws.max() <= 1.14
    low, high = bounds(draws)
    share = np.log(np.array([low, high])) / math.log(1.14)  # quantiles of a uniform: 5%, 95%
    assert share == pytest.approx([0.05, 0.95], abs=0.03)


def test_inputs_on_one_target_multiply_and_draws_repeat_by_name() -> None:
    a = Uncertain("a", "compute", 0.03)
    b = Uncertain("b", "compute", 0.04)
    both = column([a, b], "compute")
    assert np.std(np.log(both), ddof=1) == pytest.approx(0.05, rel=0.1)  # sqrt(3² + 4²)
    # the same input draws the same numbers wherever it appears: common random numbers
    assert np.array_equal(column([a], "compute"), column([a, Uncertain("c", "cv", 0.1)],
                                                          "compute"))
    independent = np.corrcoef(np.log(column([a], "compute")), np.log(column([b], "compute")))
    assert abs(independent[0, 1]) < 0.15


def test_a_fits_alpha_and_beta_keep_their_correlation() -> None:
    alpha = Uncertain("link: alpha", "link:x:alpha", 0.2)
    beta = Uncertain("link: beta", "link:x:beta", 0.1, partner="link: alpha", rho=-0.8)
    draws = factor_draws([alpha, beta])
    logs = np.log([[d["link:x:alpha"], d["link:x:beta"]] for d in draws])
    assert np.corrcoef(logs.T)[0, 1] == pytest.approx(-0.8, abs=0.05)


def test_an_additive_input_adds_seconds_of_its_spread() -> None:
    draws = column([Uncertain("fsdp's own work", "overhead:fsdp", 0.004, additive=True)],
                   "overhead:fsdp")
    assert np.mean(draws) == pytest.approx(0.0, abs=0.0006)
    assert np.std(draws, ddof=1) == pytest.approx(0.004, rel=0.1)


def test_coverage_and_half_width_are_counted() -> None:
    rows = [((0.9, 1.1), 1.0, 1.05), ((0.9, 1.1), 1.0, 1.2), ((1.8, 2.2), 2.0, 1.8),
            ((0.95, 1.05), 1.0, None), (None, 1.0, 1.0)]
    found = coverage(rows)
    assert (found.covered, found.rows) == (2, 3)  # rows without a figure or interval: out
    assert found.median_half_width == pytest.approx(0.1)
    assert "2 of 3 rows (67%)" in found.line()
    assert inside((1.0, 2.0), 2.0) and not inside((1.0, 2.0), 2.01)
    assert half_width((90.0, 110.0), 100.0) == pytest.approx(0.1)


def test_honest_intervals_cover_about_ninety_percent_of_generated_rows() -> None:
    """Measured figures drawn around the truth with the spread the intervals assume: the
    90% intervals the draws give cover about 90% of them (binomial: 1000 rows, +-3%)."""
    sigma = 0.05
    low, high = bounds(column([Uncertain("compute (between-run spread)", "compute", sigma)],
                              "compute"))
    rng = np.random.default_rng(7)
    measured = np.exp(sigma * rng.standard_normal(1000))
    found = coverage(((low, high), 1.0, float(m)) for m in measured)
    assert found.rows == 1000 and 0.87 <= found.share <= 0.93


def test_the_between_run_spread_is_read_from_repeated_runs(run_record) -> None:
    medians = [0.30, 0.33, 0.36]
    runs = [run_record([m] * 5, run_id=f"single-{i}") for i, m in enumerate(medians)]
    from harness.predict.calibration import compute_from_records

    compute = compute_from_records(runs, workload="hep_cnn", size="small", precision="fp32",
                                   backend="cpu", threads=1)
    assert compute is not None and len(compute.run_ids) == 3
    sigma, count, line = between_run_spread(runs, compute)
    assert count == 3 and sigma == pytest.approx(statistics.stdev(map(math.log, medians)))
    assert "calibration's 3 runs" in line
    # one calibration run: pooled over the machine's other repeated single-rank experiments
    other = [run_record([m] * 5, run_id=f"other-{i}", batch=16) for i, m in enumerate(medians)]
    alone = compute_from_records([runs[0]], workload="hep_cnn", size="small",
                                 precision="fp32", backend="cpu", threads=1)
    assert alone is not None
    sigma, count, line = between_run_spread([runs[0], *other], alone)
    assert count == 1 and "pooled over 1 repeated" in line
    assert sigma == pytest.approx(pooled_log_sd([medians])[0])
    sigma, _, line = between_run_spread([runs[0]], alone)
    assert sigma is None and "unknown" in line
    assert between_run_spread([runs[0]], alone, stated=0.07)[0] == 0.07


def test_fit_errors_are_the_weighted_least_squares_standard_errors(comm_record) -> None:
    exact = comm_fits([comm_record("allreduce", 1e-4, 1e-9)])[0]
    assert fit_errors(exact)[:2] == pytest.approx((0.0, 0.0), abs=1e-9)  # no scatter, no error
    sizes = (1024, 8192, 65536, 2**19, 2**22, 2**24)
    noisy = comm_fits([comm_record("allreduce", 1e-4, 1e-9, sizes=sizes)])[0]
    noise = np.array([0.05, -0.03, 0.04, -0.06, 0.02, -0.01])
    times = np.array(noisy.times) * (1 + noise)
    from dataclasses import replace

    from harness.predict.calibration import fit_alpha_beta

    alpha, beta, _ = fit_alpha_beta(list(noisy.sizes), list(times))
    fit = replace(noisy, alpha=alpha, beta=beta, times=tuple(times))
    # numpy's weighted polynomial fit of the same data: its scaled covariance
    (b, a), cov = np.polyfit(np.array(sizes, float), times, 1, w=1 / times, cov=True)
    assert (a, b) == pytest.approx((alpha, beta), rel=1e-6)
    rel_alpha, rel_beta, rho = fit_errors(fit)
    assert rel_alpha == pytest.approx(math.sqrt(cov[1, 1]) / alpha, rel=1e-6)
    assert rel_beta == pytest.approx(math.sqrt(cov[0, 0]) / beta, rel=1e-6)
    assert rho == pytest.approx(cov[0, 1] / math.sqrt(cov[0, 0] * cov[1, 1]), rel=1e-6)


def test_a_validation_row_carries_the_interval_of_its_calibration(run_record,
                                                                  comm_record) -> None:
    medians = [0.30, 0.32, 0.34]
    calibration = [run_record([m] * 5, run_id=f"single-{i}") for i, m in enumerate(medians)]
    calibration += [comm_record("allreduce", 4e-4, 1e-9), comm_record("broadcast", 1e-4, 1e-9)]
    measured = run_record([0.33] * 5, world_size=2, comm="gloo", run_id="ddp2")
    (row,) = validate([measured], calibration)
    assert row.interval is not None and row.inside is True
    # compute dominates, the fits are exact: the half-width is 1.645 sigma sqrt(1 + 1/3)
    sigma = statistics.stdev(map(math.log, medians)) * math.sqrt(1 + 1 / 3)
    assert half_width(row.interval, row.predicted) == pytest.approx(
        math.sinh(Z90 * sigma), rel=0.15)
    assert "calibration's 3 runs" in row.spread

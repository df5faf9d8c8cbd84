"""Where a calibrated prediction's uncertainty comes from, and how a draw of it moves the
prediction's context (harness/predict/uncertain.py holds the arithmetic of the draws).

The inputs a calibrated prediction reads, each with its uncertainty when it is known:

- compute: the calibration's between-run spread, sd of the logarithm of its runs' median
  steps (never one run's in-process interval: fresh processes on a shared host differ more,
  docs/measurements/precision.md); from the calibration's own repeats, else pooled over the
  machine's repeated single-rank experiments, else stated (--run-spread), else unknown and
  said so. The interval is for one measured run: the calibration's uncertainty (σ/√k for k
  runs) and the run's own (σ) together, σ·√(1 + 1/k);
- each link behind a collective: the standard errors of its fitted α and β (weighted least
  squares, the fit's own residuals), correlated as the fit says;
- the step-time spread that prices the wait for the slowest rank, where estimated from k
  steps: the relative standard error of its estimator, 1/√(2·0.3675·(k - 1)) (the median
  absolute deviation's efficiency, 37%, Rousseeuw & Croux 1993); a stated --step-cv is exact;
- a strategy's own measured work: the difference of two runs' steps, each with the
  between-run spread.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from harness.predict.calibration import ComputeCalibration, Fit, single_rank_run, step_times
from harness.predict.context import Context, NotModelled, StepEstimate
from harness.predict.overhead import StrategyOverhead
from harness.predict.uncertain import (
    DRAWS,
    LEVEL,
    SEED,
    Uncertain,
    factor_draws,
    pooled_log_sd,
)
from harness.records.definitions import center
from harness.records.experiment import experiment_of

MAD_EFFICIENCY = 0.3675  # the MAD's asymptotic efficiency against the sd at the normal
NEGLIGIBLE = 1e-6  # a relative standard error below this is rounding in an exact fit


def perturbed(ctx: Context, factors: Mapping[str, float]) -> Context:
    """The context with one draw of its inputs: compute and cv times their factors, each
    strategy's own work plus its seconds, each link's α and β times theirs."""
    compute = ctx.compute
    scale, cv = factors.get("compute", 1.0), factors.get("cv", 1.0)
    if scale != 1.0 or cv != 1.0:
        compute = replace(compute, seconds_per_sample=compute.seconds_per_sample * scale,
                          fixed_s=compute.fixed_s * scale, cv=compute.cv * cv)
    overheads = {name: replace(found, seconds=max(0.0, found.seconds
                                                  + factors.get(f"overhead:{name}", 0.0)))
                 for name, found in ctx.overheads.items()}
    links: dict[str, list[float]] = {}
    for target, value in factors.items():
        if target.startswith("link:"):
            name, _, parameter = target[len("link:"):].rpartition(":")
            links.setdefault(name, [1.0, 1.0])[parameter == "beta"] *= value
    network = ctx.network.scaled({name: (a, b) for name, (a, b) in links.items()})
    return replace(ctx, compute=compute, overheads=overheads, network=network)


def step_draws(model: Callable[[Context, int], StepEstimate], ctx: Context, nodes: int
               ) -> tuple[float, ...]:
    """The step time at each draw of the context's uncertain inputs (none without any)."""
    if not ctx.uncertain:
        return ()
    found = []
    for factors in factor_draws(ctx.uncertain):
        try:
            found.append(model(perturbed(ctx, factors), nodes).step_time)
        except NotModelled:
            found.append(math.nan)
    return tuple(found)


def _run_medians(records: Sequence[dict[str, Any]]) -> list[float]:
    return [center("step_time", times) for times in map(step_times, records) if times]


def between_run_spread(records: Sequence[dict[str, Any]], compute: ComputeCalibration,
                       stated: float | None = None) -> tuple[float | None, int, str]:
    """(σ, calibration runs, where σ came from): the sd of the log of single-rank runs'
    median steps, stated, else from the calibration's repeats (at each batch), else pooled
    over the machine's repeated single-rank experiments in `records`; σ None where unknown."""
    chosen = [r for r in records if r.get("run_id") in compute.run_ids]
    runs = max(1, len(chosen))
    if stated:
        return stated, runs, f"between-run spread {stated:.3g} stated (--run-spread)"
    by_batch: dict[Any, list[dict[str, Any]]] = {}
    for record in chosen:
        by_batch.setdefault(record["spec"].get("batch_per_rank"), []).append(record)
    found = pooled_log_sd(_run_medians(group) for group in by_batch.values())
    if found is not None:
        return found[0], runs, (f"between-run spread {found[0]:.3g} of the calibration's "
                                f"{found[2]} runs")
    groups: dict[Any, list[dict[str, Any]]] = {}
    for record in filter(single_rank_run, records):
        groups.setdefault(experiment_of(record), []).append(record)
    pooled = pooled_log_sd(_run_medians(group) for group in groups.values())
    if pooled is None:
        return None, runs, ("between-run spread unknown: one calibration run and no repeated "
                            "single-rank experiment of this machine (dtbench run --repeat 3, "
                            "or --run-spread CV): not in the interval")
    return pooled[0], runs, (f"between-run spread {pooled[0]:.3g}, pooled over {pooled[1]} "
                             f"repeated single-rank experiment(s) of this machine "
                             f"({pooled[2]} runs)")


def fit_errors(fit: Fit) -> tuple[float, float, float]:
    """Relative standard errors of a fit's α and β and their correlation, from the weighted
    least squares' own residuals (design rows (1/t, S/t), residuals (fit - t)/t); a
    parameter held at 0 has none."""
    sizes, times = np.asarray(fit.sizes, float), np.asarray(fit.times, float)
    free = [fit.alpha > 0, fit.beta > 0]
    dof = len(sizes) - sum(free)
    if dof <= 0 or not any(free):
        return 0.0, 0.0, 0.0
    residuals = (fit.alpha + fit.beta * sizes - times) / times
    variance = float(np.sum(residuals**2)) / dof
    design = np.stack([1 / times, sizes / times], axis=1)[:, free]
    covariance = variance * np.linalg.pinv(design.T @ design)
    errors = np.sqrt(np.clip(np.diag(covariance), 0, None))
    values = [v for v, f in zip((fit.alpha, fit.beta), free, strict=True) if f]
    relative = iter(errors / np.asarray(values))
    alpha = next(relative) if free[0] else 0.0
    beta = next(relative) if free[1] else 0.0
    rho = float(covariance[0, 1] / (errors[0] * errors[1])) \
        if all(free) and errors[0] > 0 and errors[1] > 0 else 0.0
    return float(alpha), float(beta), rho


def fit_inputs(fits: Sequence[Fit]) -> list[Uncertain]:
    """α and β of each fitted link, with their standard errors."""
    found = []
    for fit in fits:
        alpha, beta, rho = fit_errors(fit)
        where = f"weighted least squares over {len(fit.sizes)} sizes ({', '.join(fit.run_ids)})"
        name = f"link {fit.source}"
        if alpha > NEGLIGIBLE:
            found.append(Uncertain(f"{name}: alpha", f"link:{fit.source}:alpha", alpha,
                                   source=where))
        if beta > NEGLIGIBLE:
            found.append(Uncertain(f"{name}: beta", f"link:{fit.source}:beta", beta,
                                   partner=f"{name}: alpha" if alpha > NEGLIGIBLE else "",
                                   rho=rho, source=where))
    return found


def cv_input(compute: ComputeCalibration, stated: bool) -> Uncertain | None:
    """The estimated step-time spread's own uncertainty (none when stated or not priced)."""
    steps = len(compute.step_samples)
    if stated or compute.cv <= 0 or steps < 3:
        return None
    sigma = 1 / math.sqrt(2 * MAD_EFFICIENCY * (steps - 1))
    return Uncertain("step-time spread (estimated)", "cv", sigma,
                     source=f"the MAD estimator's standard error from {steps} steps")


def overhead_inputs(overheads: Mapping[str, StrategyOverhead], sigma: float | None
                    ) -> list[Uncertain]:
    """Each strategy's own work: a difference of two measured steps, each with the
    between-run spread σ (none where σ is unknown)."""
    if not sigma:
        return []
    return [Uncertain(f"{name}'s own work", f"overhead:{name}",
                      sigma * math.hypot(found.strategy_step, found.compute_step),
                      additive=True, source=f"two runs' steps ({', '.join(found.run_ids)}), "
                      "each with the between-run spread")
            for name, found in sorted(overheads.items())]


def interval_line(ctx: Context, spread: str) -> str:
    """What the intervals are drawn from, for the text's header."""
    if not ctx.uncertain:
        return (f"none: no input's uncertainty is known ({spread or 'assumed inputs'}; a "
                "given network or compute rate is taken as exact)")
    links = [u for u in ctx.uncertain if u.target.startswith("link:")]
    names = [u.name for u in ctx.uncertain if u not in links]
    if links:
        names.append(f"{len(links)} fitted link parameter(s) (α, β standard errors)")
    return (f"{LEVEL:.0%} by Monte Carlo over {len(ctx.uncertain)} uncertain input(s) "
            f"({', '.join(names)}), {DRAWS} draws, seed {SEED}; {spread}")


def calibration_inputs(records: Sequence[dict[str, Any]], compute: ComputeCalibration,
                       fits: Sequence[Fit], overheads: Mapping[str, StrategyOverhead],
                       *, run_spread: float | None = None, cv_stated: bool = False
                       ) -> tuple[tuple[Uncertain, ...], str]:
    """Every uncertain input of a prediction calibrated from `records`, and the line that
    says where the between-run spread came from (or that it is unknown)."""
    if compute.assumed and not run_spread:
        sigma, runs, line = None, 1, "compute assumed: no between-run spread"
    else:
        sigma, runs, line = between_run_spread(records, compute, run_spread)
    found = []
    if sigma:
        found.append(Uncertain("compute (between-run spread)", "compute",
                               sigma * math.sqrt(1 + 1 / runs),
                               source=f"{line}; x sqrt(1 + 1/{runs}): one run against a "
                               f"calibration of {runs}"))
    found += fit_inputs(fits)
    found += [cv] if (cv := cv_input(compute, cv_stated)) is not None else []
    found += overhead_inputs(overheads, sigma)
    return tuple(found), line

"""Predictions over node counts, each strategy priced by the step-time model its class names
(Strategy.step_model: harness/predict/dataparallel.py, servers.py, modelparallel.py). A
strategy's options, their defaults and aliases, and which model prices it are its class's
(harness.strategies): registering the class is all predict needs to price it."""
from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from harness.core.errors import UnknownNameError, UsageError
from harness.predict.context import Context, NotModelled, StepEstimate
from harness.predict.interval import step_draws
from harness.predict.uncertain import bounds
from harness.strategies import STRATEGIES, Strategy

Model = Callable[[Context, int], StepEstimate]


def modelled() -> list[str]:
    """The registered strategies the model prices: those whose class names a step model."""
    return [name for name in STRATEGIES if STRATEGIES.get(name).step_model]


def strategy_class(strategy: str) -> type[Strategy]:
    """The registered strategy class, or UnknownNameError naming the modelled ones."""
    if strategy not in STRATEGIES or not STRATEGIES.get(strategy).step_model:
        raise UnknownNameError(f"unknown strategy {strategy!r}; the model knows: "
                               f"{', '.join(modelled())}")
    return STRATEGIES.get(strategy)


def step_model(strategy: str) -> Model:
    """The function that prices one step of the strategy: the "module:function" its class
    declares, imported here (predict sits above strategies, which cannot import it)."""
    declared = strategy_class(strategy).step_model
    module, _, function = declared.partition(":")
    try:
        model: Model = getattr(importlib.import_module(module), function)
    except (ImportError, AttributeError) as why:
        raise TypeError(f"strategy {strategy}: its step_model {declared!r} names no function "
                        f"({why})") from None
    if not callable(model):
        raise TypeError(f"strategy {strategy}: its step_model {declared!r} is not a function")
    return model


def strategy_options(strategy: str, given: dict[str, Any], strict: bool = True
                     ) -> dict[str, Any]:
    """The options the model prices for one strategy: every option its class declares (model
    assumptions included), the default where not given, aliases resolved by the class; with
    strict, a key the class does not take is an error, else it is left out."""
    cls = strategy_class(strategy)
    known = given if strict else {k: v for k, v in given.items() if cls.option(k) is not None}
    return cls.resolve_options(known, model=True)


def unpriced(strategy: str, given: dict[str, Any]) -> list[str]:
    """The given keys the step-time model does not price: not options of the strategy, or
    options it declares unpriced (the servers' momentum)."""
    cls = strategy_class(strategy)
    return sorted(k for k in given if (option := cls.option(k)) is None or not option.priced)


def parse_option_pairs(pairs: list[str], strategies: list[str]) -> dict[str, dict[str, Any]]:
    """KEY=VALUE pairs given once for all --strategy values: each strategy takes the keys its
    class knows (by name or alias); a key no strategy knows is an error."""
    given: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--strategy-opt {pair!r}: expected KEY=VALUE")
        given[key.strip()] = value.strip()
    classes = {s: strategy_class(s) for s in strategies}
    for key in given:
        if not any(cls.option(key) is not None for cls in classes.values()):
            raise UsageError(f"--strategy-opt {key}: no strategy of {', '.join(strategies)} "
                             "takes it")
    return {s: strategy_options(s, given, strict=False) for s in strategies}


@dataclass(frozen=True)
class Point:
    """One strategy at one node count: the estimate, or why the model has none."""

    strategy: str
    nodes: int
    estimate: StepEstimate | None
    reason: str = ""
    baseline_rate: float = 0.0
    # seconds the step waits for the slowest of its synchronous ranks (0 without a spread)
    wait: float = 0.0
    # the step time at each draw of the inputs' uncertainty (harness.predict.uncertain), and
    # their central 90%: None where no input's uncertainty is known
    draws: tuple[float, ...] = ()
    interval: tuple[float, float] | None = None

    @property
    def efficiency(self) -> float | None:
        """throughput_N / (N × throughput_1), throughput_1 the calibrated single-rank rate."""
        if self.estimate is None or self.baseline_rate <= 0:
            return None
        return self.estimate.throughput / (self.nodes * self.baseline_rate)

    @property
    def comm_overtakes_compute(self) -> bool:
        return self.estimate is not None and self.estimate.comm_time > self.estimate.compute_time


def predict(ctx: Context, strategy: str, nodes: list[int]) -> list[Point]:
    """The strategy's estimate at each node count (ctx.options are the strategy's)."""
    model = step_model(strategy)
    ctx = replace(ctx, strategy=strategy)
    baseline = ctx.compute.rate(ctx.rank_batch(1))
    # the same step with every rank at the mean: what the slowest rank's wait adds
    level = replace(ctx, compute=replace(ctx.compute, cv=0.0)) if ctx.compute.cv > 0 else None
    points = []
    for count in nodes:
        if count < 1:
            raise UsageError(f"--ranks: {count} is not a positive rank count")
        try:
            estimate = model(ctx, count)
        except NotModelled as why:
            points.append(Point(strategy, count, None, str(why), baseline))
            continue
        wait = estimate.step_time - model(level, count).step_time if level else 0.0
        draws = step_draws(model, ctx, count)
        points.append(Point(strategy, count, estimate, baseline_rate=baseline,
                            wait=max(0.0, wait), draws=draws,
                            interval=bounds(draws) if draws else None))
    return points


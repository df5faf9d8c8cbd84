"""The strategy models by name, their options, and predictions over node counts."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from harness.core.errors import UnknownNameError, UsageError
from harness.predict import dataparallel, modelparallel, servers
from harness.predict.context import Context, NotModelled, StepEstimate

Model = Callable[[Context, int], StepEstimate]

MODELS: dict[str, Model] = {
    "ddp": dataparallel.ddp, "zero1": dataparallel.zero1, "fsdp": dataparallel.fsdp,
    "localsgd": dataparallel.localsgd, "ps-sync": servers.ps_sync,
    "ps-async": servers.ps_async, "downpour": servers.downpour, "ssp": servers.ssp,
    "hogwild": dataparallel.hogwild, "gossip": dataparallel.gossip, "hybrid": servers.hybrid,
    "pipeline": modelparallel.pipeline, "tensor": modelparallel.tensor,
    "dp-tp": modelparallel.dp_tp,
}
_DDP = {"bucket_mb": 25, "overlap": True, "compression": "none"}
# strategy -> option -> default (its type is the type of the default)
OPTIONS: dict[str, dict[str, Any]] = {
    "ddp": _DDP, "zero1": _DDP, "fsdp": {"reshard_after_forward": True, "overlap": True},
    "localsgd": {"period": 8, "subgroup": 1, "overlap": True}, "ps-sync": {"servers": 1},
    "ps-async": {"servers": 1}, "downpour": {"servers": 1, "n_fetch": 1, "n_push": 1},
    "ssp": {"servers": 1, "staleness": 0}, "hogwild": {}, "gossip": {"neighbours": 2},
    "hybrid": {"groups": 1, "servers": 1, "overlap": True},
    "pipeline": {"schedule": "1f1b", "microbatches": 4, "chunks": 0},
    "tensor": {}, "dp-tp": {"tp": 2},
}
ALIASES = {"H": "period", "K": "servers", "G": "groups", "M": "microbatches", "s": "staleness",
           "v": "chunks", "bucket_cap_mb": "bucket_mb", "n_servers": "servers",
           "n_group": "groups"}
_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def _value(strategy: str, key: str, default: Any, text: Any) -> Any:
    if isinstance(default, bool):
        word = str(text).strip().lower()
        if word in _TRUE or word in _FALSE:
            return word in _TRUE
        raise UsageError(f"--strategy-opt {key}={text}: expected 1/0 (true/false) for {strategy}")
    if isinstance(default, int):
        try:
            number = int(str(text))
        except ValueError:
            raise UsageError(f"--strategy-opt {key}={text}: expected an integer for "
                             f"{strategy}") from None
        if number < 0 or (number == 0 and default != 0):
            raise UsageError(f"--strategy-opt {key}={text}: must be positive for {strategy}")
        return number
    return str(text)


def strategy_options(strategy: str, given: dict[str, Any], strict: bool = True
                     ) -> dict[str, Any]:
    """The options of one strategy: its defaults, overridden by the `given` keys it knows
    (aliases such as H, K, G, M allowed); with strict, a key it does not know is an error."""
    if strategy not in MODELS:
        raise UnknownNameError(f"unknown strategy {strategy!r}; the model knows: "
                               f"{', '.join(MODELS)}")
    known = OPTIONS[strategy]
    options = dict(known)
    for key, text in given.items():
        name = ALIASES.get(key, key)
        if name in known:
            options[name] = _value(strategy, key, known[name], text)
        elif strict:
            raise UsageError(f"--strategy-opt {key}: {strategy} has no such option "
                             f"(it takes: {', '.join(known) or 'none'})")
    return options


def parse_option_pairs(pairs: list[str], strategies: list[str]) -> dict[str, dict[str, Any]]:
    """KEY=VALUE pairs given once for all --strategy values: each strategy takes the keys it
    knows; a key no strategy knows is an error."""
    given: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--strategy-opt {pair!r}: expected KEY=VALUE")
        given[key.strip()] = value.strip()
    for key in given:
        name = ALIASES.get(key, key)
        if not any(name in OPTIONS.get(s, {}) for s in strategies):
            raise UsageError(f"--strategy-opt {key}: no strategy of {', '.join(strategies)} "
                             "takes it")
    return {s: strategy_options(s, {k: v for k, v in given.items()
                                    if ALIASES.get(k, k) in OPTIONS[s]}) for s in strategies}


@dataclass(frozen=True)
class Point:
    """One strategy at one node count: the estimate, or why the model has none."""

    strategy: str
    nodes: int
    estimate: StepEstimate | None
    reason: str = ""
    baseline_rate: float = 0.0

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
    if strategy not in MODELS:
        raise UnknownNameError(f"unknown strategy {strategy!r}; the model knows: "
                               f"{', '.join(MODELS)}")
    model = MODELS[strategy]
    baseline = 1 / ctx.compute.seconds_per_sample
    points = []
    for count in nodes:
        if count < 1:
            raise UsageError(f"--nodes: {count} is not a positive node count")
        try:
            points.append(Point(strategy, count, model(ctx, count), baseline_rate=baseline))
        except NotModelled as why:
            points.append(Point(strategy, count, None, str(why), baseline))
    return points


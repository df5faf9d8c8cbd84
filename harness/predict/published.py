"""`dtbench predict --validate-published`: the model against published scaling results.

Every row of published.json names a paper's (or a project's) result, where in it, the value,
and every input the model reads for it with that input's source: the cluster as named link
presets (links.py), the per-device batch, the engine's fusion settings, and one device's
published throughput (or its FLOP/s). Nothing in a row is fitted to it: a row can only name
presets and published figures (ROW_KEYS and COMPUTE_KEYS are all it may hold; the tests check
it). Each row is predicted at its device count and at its baseline's, and set beside the
published value and beside what perfect scaling would have predicted.

Metrics: a scaling `efficiency` or `speedup` against the baseline's device count; a
`time_to_train_min` (the source's epochs over its training set at the predicted throughput,
minutes), and sustained `pflops` (the predicted throughput times the model's FLOPs per
sample). Perfect scaling predicts the devices' count times one device's rate.

Intervals: a row's assumed inputs may carry a stated range (the table's `ranges`, each with
its source and why): a row names the ranges of its compute input, and a range of a link's
bandwidth or latency applies wherever a row's topology uses that link. The row's metric is
priced at every Monte Carlo draw of them (harness/predict/uncertain.py); an input without a
stated range is taken as exact, and the row says which have none.
"""
from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.core.errors import UsageError
from harness.predict.uncertain import Uncertain, bounds, factor_draws, inside

TABLE = Path(__file__).with_name("published.json")
ROW_KEYS = frozenset({"id", "source", "where", "metric", "published", "devices",
                      "baseline_devices", "model", "batch", "strategy", "options", "topology",
                      "fusion", "compute", "inputs", "verified", "epochs", "train_samples",
                      "node", "interconnect", "ranges", "lacks"})
# a device's published rate: samples/s at batches (curve), or FLOP/s (flops), the latter
# turned into samples/s with the model's FLOPs per sample
COMPUTE_KEYS = frozenset({"curve", "flops", "like", "source", "where"})
METRICS = ("efficiency", "speedup", "time_to_train_min", "pflops")
# What a stated range moves: one device's rate, or a link preset's bandwidth or latency.
RANGE_INPUTS = ("compute", "bandwidth", "latency")
RANGE_KEYS = frozenset({"input", "low", "high", "links", "source", "where", "why"})


@dataclass(frozen=True)
class PublishedRow:
    """One published result, its prediction and perfect scaling's."""

    row: dict[str, Any]
    predicted: float
    notes: tuple[str, ...] = ()
    single_rate: float = 0.0  # one device's samples/s as the row's compute gives it
    interval: tuple[float, float] | None = None  # 90%, from the stated ranges of its inputs
    draws: tuple[float, ...] = ()  # the metric at each draw of them
    point: Any = None  # the model's Point at the row's devices (its decomposition)
    inputs: tuple[Uncertain, ...] = ()

    @property
    def inside(self) -> bool | None:
        """Whether the published value fell inside the interval (without a stated range, the
        interval is the prediction itself)."""
        return inside(self.interval or (self.predicted, self.predicted), self.published)

    @property
    def published(self) -> float:
        return float(self.row["published"])

    @property
    def perfect(self) -> float:
        """What perfect scaling predicts: efficiency 1, speed-up devices / baseline devices;
        for a time or a FLOP rate, the devices times one device's rate."""
        metric, devices = self.row["metric"], self.row["devices"]
        if metric == "efficiency":
            return 1.0
        if metric == "speedup":
            return devices / self.row.get("baseline_devices", 1)
        return metric_value(self.row, devices * self.single_rate)

    @property
    def error(self) -> float:
        return (self.predicted - self.published) / self.published

    @property
    def perfect_error(self) -> float:
        return (self.perfect - self.published) / self.published


def load_table(path: Path | None = None) -> dict[str, Any]:
    """The table (the built-in one by default), checked for the keys a row may hold."""
    target = path or TABLE
    try:
        document = json.loads(target.read_text())
    except (OSError, ValueError) as exc:
        raise UsageError(f"--validate-published {target}: cannot read ({exc})") from None
    rows = document.get("rows") if isinstance(document, dict) else None
    if not isinstance(rows, list) or not rows:
        raise UsageError(f"{target}: expected an object with a list of rows")
    sources, ranges = document.get("sources") or {}, document.get("ranges") or {}
    for name, stated in ranges.items():
        problems = range_problems(stated, sources)
        if problems:
            raise UsageError(f"{target}: range {name}: {problems[0]}")
    for row in rows:
        problems = row_problems(row, sources)
        problems += [f"range {name!r} is not in the table's ranges"
                     for name in row.get("ranges") or () if name not in ranges]
        if problems:
            raise UsageError(f"{target}: row {row.get('id', '?')}: {problems[0]}")
    return document


def range_problems(stated: Any, sources: dict[str, Any]) -> list[str]:
    """What makes a stated range unusable: unknown keys or input, bounds that do not hold
    the input's value (low <= 1 <= high, factors of it), no source, a link range without
    links."""
    if not isinstance(stated, dict):
        return ["not an object"]
    found = [f"key {key!r} is not part of a range" for key in sorted(set(stated) - RANGE_KEYS)]
    if stated.get("input") not in RANGE_INPUTS:
        found.append(f"input {stated.get('input')!r}: choose from {', '.join(RANGE_INPUTS)}")
    low, high = stated.get("low"), stated.get("high")
    if not (isinstance(low, int | float) and isinstance(high, int | float)
            and 0 < low <= 1 <= high and low < high):
        found.append("low and high must be factors of the input with 0 < low <= 1 <= high")
    if stated.get("source") not in sources:
        found.append(f"source {stated.get('source')!r} is not in the sources")
    if stated.get("input") != "compute" and not stated.get("links"):
        found.append("a link's range names the link presets it applies to (links)")
    return found


def row_inputs(row: dict[str, Any], ranges: dict[str, Any]) -> tuple[Uncertain, ...]:
    """The row's inputs with a stated range, as the draws read them: its compute ranges (a
    rate times x is a step time over x), and each range of a link preset its topology uses
    (bandwidth x is β over x; latency x is α times x), intra and inter apart."""
    from harness.predict.links import find_link
    from harness.predict.topology import _fields

    found = []
    for name in row.get("ranges") or ():
        stated = ranges[name]
        found.append(Uncertain(name, "compute", low=1 / stated["high"], high=1 / stated["low"],
                               source=stated["source"]))
    fields = _fields(str(row["topology"]))
    used = {role: preset.name for role in ("intra", "inter")
            if (preset := find_link(str(fields.get(role, "pcie3")))) is not None}
    for name, stated in sorted(ranges.items()):
        if stated["input"] == "compute":
            continue
        for role, preset in used.items():
            if preset in stated["links"]:
                low, high = (1 / stated["high"], 1 / stated["low"]) \
                    if stated["input"] == "bandwidth" else (stated["low"], stated["high"])
                parameter = "beta" if stated["input"] == "bandwidth" else "alpha"
                found.append(Uncertain(f"{name} ({role})", f"link:{role}:{parameter}",
                                       low=low, high=high, source=stated["source"]))
    return tuple(found)


def row_problems(row: Any, sources: dict[str, Any]) -> list[str]:
    """What makes a row unusable, or a row that carries its own tuning: keys outside
    ROW_KEYS/COMPUTE_KEYS, a metric not in METRICS, a source not in the table."""
    if not isinstance(row, dict):
        return ["not an object"]
    found = [f"key {key!r} is not an input a row may give" for key in sorted(set(row) - ROW_KEYS)]
    compute = row.get("compute")
    if not isinstance(compute, dict) or ("curve" in compute) == ("flops" in compute):
        found.append("compute: give a published single-device curve or FLOP/s (one)")
    else:
        found += [f"compute key {key!r} is not an input a row may give"
                  for key in sorted(set(compute) - COMPUTE_KEYS)]
        if compute.get("source") not in sources:
            found.append(f"compute source {compute.get('source')!r} is not in the sources")
    if row.get("source") not in sources:
        found.append(f"source {row.get('source')!r} is not in the sources")
    if row.get("metric") not in METRICS:
        found.append(f"metric {row.get('metric')!r}: choose from {', '.join(METRICS)}")
    for key in ("published", "devices", "batch", "model", "strategy", "topology"):
        if key not in row:
            found.append(f"missing {key}")
    if row.get("metric") == "time_to_train_min":
        found += [f"missing {key} (a time to train)" for key in ("epochs", "train_samples")
                  if key not in row]
    return found


def metric_value(row: dict[str, Any], throughput: float) -> float:
    """A time-to-train or FLOP-rate row's metric at `throughput` samples/s."""
    if row["metric"] == "time_to_train_min":
        return float(row["epochs"]) * float(row["train_samples"]) / throughput / 60.0
    if row["metric"] == "pflops":
        from harness.predict.context import workload_facts

        return throughput * workload_facts(str(row["model"]), "full").flops_per_sample / 1e15
    raise ValueError(f"metric {row['metric']!r} is a ratio, not a function of a rate")


def _curve(compute: dict[str, Any], model: str, batch: int) -> str:
    """The row's single-device curve; with `like`, the reference model's FLOP/s at each batch
    applied to this model's FLOPs (a model the source has no figure for); with `flops`, that
    rate over the model's FLOPs per sample, at the row's batch."""
    from harness.predict.context import workload_facts

    if "flops" in compute:
        rate = float(compute["flops"]) / workload_facts(model, "full").flops_per_sample
        return f"{batch}:{rate:.6g}"
    curve = str(compute["curve"])
    like = compute.get("like")
    if not like:
        return curve

    ratio = workload_facts(like, "full").flops_per_sample / \
        workload_facts(model, "full").flops_per_sample
    from harness.predict.calibration import curve_points

    return ",".join(f"{batch}:{rate * ratio:.6g}" for batch, rate in curve_points(curve))


def predict_row(row: dict[str, Any], inputs: tuple[Uncertain, ...] = ()) -> PublishedRow:
    """The row's metric as the model predicts it, and its interval over the draws of the
    row's ranged inputs (none without any)."""
    from harness.predict.inputs import Request, prepare
    from harness.predict.interval import perturbed

    model, strategy = str(row["model"]), str(row["strategy"])
    options = tuple(f"{k}={v}" for k, v in sorted((row.get("options") or {}).items()))
    strategies = tuple(dict.fromkeys((strategy, "ddp")))
    request = Request(model, strategies, options, size="full", batch_size=int(row["batch"]),
                      topology=str(row["topology"]),
                      compute_curve=_curve(row["compute"], model, int(row["batch"])),
                      fusion=row.get("fusion"), calibrate_from=())
    contexts = prepare(request).contexts
    value, point = _value(row, contexts)
    draws = tuple(_value(row, {name: perturbed(ctx, factors) for name, ctx in
                               contexts.items()})[0] for factors in factor_draws(inputs))
    return PublishedRow(row, value, point.estimate.notes,
                        contexts["ddp"].compute.rate(int(row["batch"])),
                        bounds(draws) if draws else None, draws, point, inputs)


def _value(row: dict[str, Any], contexts: dict[str, Any]) -> tuple[float, Any]:
    """The row's metric from its contexts, and the model's Point at its devices."""
    from harness.predict.scaleout import predict

    strategy = str(row["strategy"])
    base, devices = int(row.get("baseline_devices", 1)), int(row["devices"])
    # Server ranks come on top of the devices that train; one device trains alone (ddp's
    # model at one rank is the compute alone).
    ranks = devices + int(dict(contexts[strategy].options).get("servers", 0) or 0) \
        if strategy.startswith("ps") else devices
    baseline = predict(contexts["ddp" if base == 1 else strategy], "ddp" if base == 1
                       else strategy, [base])[0]
    ctx = contexts[strategy]
    ctx.network.check_ranks(ranks)  # type: ignore[attr-defined]
    point = predict(ctx, strategy, [ranks])[0]
    if baseline.estimate is None or point.estimate is None:
        raise UsageError(f"row {row['id']}: the model has no estimate "
                         f"({point.reason or baseline.reason})")
    if row["metric"] in ("time_to_train_min", "pflops"):
        return metric_value(row, point.estimate.throughput), point
    ratio = point.estimate.throughput / baseline.estimate.throughput
    return (ratio * base / devices if row["metric"] == "efficiency" else ratio), point


def summary(rows: list[PublishedRow]) -> dict[str, float]:
    errors = [abs(r.error) for r in rows]
    perfect = [abs(r.perfect_error) for r in rows]
    return {"rows": len(rows), "median_abs_error": statistics.median(errors),
            "worst_abs_error": max(errors), "mean_abs_error": statistics.fmean(errors),
            "perfect_mean_abs_error": statistics.fmean(perfect)}

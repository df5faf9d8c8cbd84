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
"""
from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.core.errors import EXIT_OK, UsageError

TABLE = Path(__file__).with_name("published.json")
ROW_KEYS = frozenset({"id", "source", "where", "metric", "published", "devices",
                      "baseline_devices", "model", "batch", "strategy", "options", "topology",
                      "fusion", "compute", "inputs", "verified", "epochs", "train_samples",
                      "node", "interconnect"})
# a device's published rate: samples/s at batches (curve), or FLOP/s (flops), the latter
# turned into samples/s with the model's FLOPs per sample
COMPUTE_KEYS = frozenset({"curve", "flops", "like", "source", "where"})
METRICS = ("efficiency", "speedup", "time_to_train_min", "pflops")


@dataclass(frozen=True)
class PublishedRow:
    """One published result, its prediction and perfect scaling's."""

    row: dict[str, Any]
    predicted: float
    notes: tuple[str, ...] = ()
    single_rate: float = 0.0  # one device's samples/s as the row's compute gives it

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
    for row in rows:
        problems = row_problems(row, document.get("sources") or {})
        if problems:
            raise UsageError(f"{target}: row {row.get('id', '?')}: {problems[0]}")
    return document


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


def predict_row(row: dict[str, Any]) -> PublishedRow:
    """The row's metric as the model predicts it."""
    from harness.predict.inputs import Request, prepare
    from harness.predict.model import predict

    model, strategy = str(row["model"]), str(row["strategy"])
    options = tuple(f"{k}={v}" for k, v in sorted((row.get("options") or {}).items()))
    strategies = tuple(dict.fromkeys((strategy, "ddp")))
    request = Request(model, strategies, options, size="full", batch_size=int(row["batch"]),
                      topology=str(row["topology"]),
                      compute_curve=_curve(row["compute"], model, int(row["batch"])),
                      fusion=row.get("fusion"), calibrate_from=())
    contexts = prepare(request).contexts
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
    single = contexts["ddp"].compute.rate(int(row["batch"]))
    if row["metric"] in ("time_to_train_min", "pflops"):
        value = metric_value(row, point.estimate.throughput)
    else:
        ratio = point.estimate.throughput / baseline.estimate.throughput
        value = ratio * base / devices if row["metric"] == "efficiency" else ratio
    return PublishedRow(row, value, point.estimate.notes, single)


def summary(rows: list[PublishedRow]) -> dict[str, float]:
    errors = [abs(r.error) for r in rows]
    perfect = [abs(r.perfect_error) for r in rows]
    return {"rows": len(rows), "median_abs_error": statistics.median(errors),
            "worst_abs_error": max(errors), "mean_abs_error": statistics.fmean(errors),
            "perfect_mean_abs_error": statistics.fmean(perfect)}


def published_command(path: str | None) -> int:
    """Print every row predicted against published, and the summary against the goal."""
    from harness.core.text import render_table

    document = load_table(Path(path) if path else None)
    rows = [predict_row(row) for row in document["rows"]]
    print(render_table(
        ("row", "metric", "devices", "published", "predicted", "error", "perfect scaling",
         "its error", "source checked"),
        [[r.row["id"], r.row["metric"], f"{r.row.get('baseline_devices', 1)}->"
          f"{r.row['devices']}", f"{r.published:.3g}", f"{r.predicted:.3g}",
          f"{r.error * 100:+.1f}%", f"{r.perfect:.3g}", f"{r.perfect_error * 100:+.1f}%",
          "yes" if r.row.get("verified") else "no"] for r in rows]))
    found = summary(rows)
    print(f"\n{found['rows']} rows: median |error| {found['median_abs_error']:.1%}, worst "
          f"{found['worst_abs_error']:.1%}, mean {found['mean_abs_error']:.1%} against perfect "
          f"scaling's mean {found['perfect_mean_abs_error']:.1%} (goal: median <= 5%, worst <= "
          "15%, mean at most a third of perfect scaling's)")
    print("sources: " + "; ".join(f"{key}: {value['title']} <{value['url']}>"
                                  for key, value in document["sources"].items()))
    return EXIT_OK

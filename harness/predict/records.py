"""Predictions as schema-v1 records of task "prediction", readable by report and compare.

A prediction is a function of its inputs, so its record is too: created_at is the newest
calibration record's time (the information the prediction rests on; the epoch when nothing
was measured), run_id a hash of the inputs, the machine and software those of the calibration.
The same records and options give the same bytes.
"""
from __future__ import annotations

import datetime as dt
import hashlib
import json
import math
from dataclasses import dataclass, field
from typing import Any

from harness.predict.context import Context
from harness.predict.scaleout import Point, strategy_class
from harness.predict.uncertain import DRAWS, LEVEL, SEED
from harness.records.record import Metric, build_record, measured
from harness.spec.kinds import PREDICTION

MODEL_VERSION = 1
EPOCH = "1970-01-01T00:00:00Z"


@dataclass(frozen=True)
class Provenance:
    """Where a prediction's numbers came from: calibration runs, their machine, assumptions."""

    comm: str
    compute_runs: tuple[str, ...] = ()
    comm_runs: tuple[str, ...] = ()
    created_at: str = EPOCH
    machine: dict[str, Any] = field(default_factory=dict)
    software: dict[str, Any] = field(default_factory=dict)
    assumptions: tuple[str, ...] = ()
    overhead_runs: tuple[str, ...] = ()  # single-rank runs that measured a strategy's own work
    machine_label: str = ""  # the machine every calibration record above was made on

    def used(self) -> list[dict[str, str]]:
        """Every calibration record the prediction rests on: its run id, machine and use."""
        return [{"run_id": run, "machine": self.machine_label, "use": use}
                for use, runs in (("compute", self.compute_runs), ("network", self.comm_runs),
                                  ("strategy overhead", self.overhead_runs)) for run in runs]


def _digest(document: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(document, sort_keys=True, default=str).encode()).hexdigest()


def _created(text: str) -> dt.datetime:
    try:
        moment = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        moment = dt.datetime.fromisoformat(EPOCH.replace("Z", "+00:00"))
    return moment if moment.tzinfo else moment.replace(tzinfo=dt.UTC)


def _json_value(value: Any) -> Any:
    """A value JSON can hold without NaN or infinity (ssp's staleness=inf becomes "inf")."""
    return str(value) if isinstance(value, float) and not math.isfinite(value) else value


def modelled_options(ctx: Context, strategy: str) -> dict[str, Any]:
    """The options the prediction priced: every option of the strategy's class, resolved."""
    return {key: _json_value(value) for key, value in sorted(ctx.options.items())}


def option_roles(strategy: str) -> dict[str, list[str]]:
    """Which of the options are the model's assumptions (a run cannot be told them) and which
    it takes without pricing them, from the strategy's class."""
    options = strategy_class(strategy).options
    return {"assumptions": sorted(o.name for o in options if o.assumption),
            "not_priced": sorted(o.name for o in options if not o.priced)}


def prediction_spec(ctx: Context, point: Point, comm: str) -> dict[str, Any]:
    """The spec of one predicted configuration (identity fields as in run records)."""
    estimate = point.estimate
    samples = estimate.samples_per_step if estimate else None
    return {
        "task": PREDICTION.task, "workload": ctx.facts.workload, "size": ctx.facts.size,
        "backend": "cpu", "comm": comm, "launcher": "model", "precision": ctx.precision,
        "world_size": point.nodes, "nnodes": point.nodes, "nproc_per_node": 1,
        "batch_per_rank": ctx.batch if ctx.scaling == "weak" else ctx.batch / point.nodes,
        "global_batch": samples, "steps": 0, "warmup": 0, "mode": "prediction",
        "strategy": point.strategy, "strategy_options": modelled_options(ctx, point.strategy),
        "scaling": ctx.scaling, "network": ctx.network.description,
        "network_assumed": ctx.network.assumed, "algorithm": ctx.network.algorithm,
        "compute": ctx.compute.source, "compute_assumed": ctx.compute.assumed,
    }


def _interval(ctx: Context, low: float | None, high: float | None) -> dict[str, Any] | None:
    """A metric's 90% interval and the uncertain inputs it was drawn from (None without)."""
    if low is None or high is None:
        return None
    return {"interval": {"level": LEVEL, "low": low, "high": high,
                         "method": f"Monte Carlo, {DRAWS} draws, seed {SEED}, over the "
                                   "inputs' uncertainty (docs/guide/prediction.md#intervals)",
                         "inputs": [u.describe() for u in ctx.uncertain]}}


def prediction_metrics(ctx: Context, point: Point) -> list[Metric]:
    """docs/spec/metrics.md names where they apply; all per rank and per step unless said."""
    estimate = point.estimate
    if estimate is None:
        return []
    step = estimate.step_time
    low, high = point.interval or (None, None)
    metrics = [
        measured("step_time", step, extra=_interval(ctx, low, high)),
        measured("throughput", estimate.throughput, extra=_interval(
            ctx, estimate.samples_per_step / high if high else None,
            estimate.samples_per_step / low if low else None)),
        measured("scaling_efficiency", point.efficiency,
                 extra={"kind": ctx.scaling, "world_size": point.nodes,
                        "definition": "throughput_N / (N x throughput_1), throughput_1 the "
                                      "calibrated single-rank rate"}),
        measured("flops_per_sample", float(ctx.facts.flops_per_sample)),
        measured("achieved_flops", ctx.facts.flops_per_sample * estimate.throughput),
        measured("compute_time", estimate.compute_time),
        measured("comm_time", estimate.comm_time, extra={"by_collective": dict(estimate.comm)}),
        measured("comm_share", estimate.exposed_comm / step if step > 0 else 0.0,
                 extra={"meaning": "share of the step not covered by compute"}),
        measured("comm_bytes", sum(estimate.volumes.values())),
        measured("rank_wait", point.wait,
                 extra={"meaning": "what waiting for the slowest synchronous rank adds to the "
                                   "step", "spread": ctx.compute.spread}),
    ]
    metrics += [measured(f"comm_bytes_{kind}", value)
                for kind, value in estimate.volumes.items()]
    if estimate.bubble is not None:
        metrics.append(measured("bubble_fraction", estimate.bubble))
    if estimate.overhead > 0:
        metrics.append(measured("strategy_overhead", estimate.overhead,
                                extra={"meaning": "the strategy's own per-step work, measured "
                                                  "by a single-rank run of it"}))
    return metrics


def prediction_record(ctx: Context, point: Point, provenance: Provenance,
                      harness: dict[str, Any], extra: dict[str, Any] | None = None
                      ) -> dict[str, Any]:
    """One point as a record: success with metrics, or skipped saying why it has none."""
    spec = prediction_spec(ctx, point, provenance.comm)
    estimate = point.estimate
    calibration: dict[str, Any] = {"compute": list(provenance.compute_runs),
                                   "comm": list(provenance.comm_runs)}
    if provenance.overhead_runs:
        calibration["overhead"] = list(provenance.overhead_runs)
    if provenance.machine_label:
        calibration["machine"] = provenance.machine_label
        calibration["records"] = provenance.used()
    details = {
        "model_version": MODEL_VERSION,
        "dominant": estimate.dominant if estimate else None,
        "comm_overtakes_compute": point.comm_overtakes_compute,
        "notes": list(estimate.notes) if estimate else [],
        "assumptions": list(provenance.assumptions),
        "options": option_roles(point.strategy),
        "calibration": calibration,
    }
    digest = _digest({"spec": spec, "details": details, "extra": extra or {}})
    # Two predictions of the same configuration match in `compare` whatever calibrated them.
    key = PREDICTION.key(spec)
    created = _created(provenance.created_at)
    machine = {**provenance.machine, "nodes": point.nodes,
               "interconnect": {"type": ctx.network.description}}
    return build_record(
        run_id=f"{created:%Y%m%dT%H%M%S}Z-predict-{ctx.facts.workload}-{digest[:12]}",
        created=created, status="success" if estimate else "skipped",
        error=None if estimate else point.reason, harness=harness, machine=machine,
        software=dict(provenance.software), spec=spec, metrics=prediction_metrics(ctx, point),
        events=[], extra={"spec_key": key[:16], "prediction": details, **(extra or {})})

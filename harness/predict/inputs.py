"""Everything a `dtbench predict` invocation needs, gathered and checked before any
prediction: the workload's facts, the compute and network calibration (or the assumptions
that replace them), the strategies with their options."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.core.errors import UsageError
from harness.predict.calibration import (
    ComputeCalibration,
    comm_fits,
    compute_from_rate,
    compute_from_record,
    compute_from_records,
    network_from_fits,
)
from harness.predict.context import Context, workload_facts
from harness.predict.model import parse_option_pairs
from harness.predict.network import Network, parse_network
from harness.predict.overhead import overheads_from_records
from harness.predict.records import EPOCH, Provenance
from harness.records.inputs import load_inputs


@dataclass(frozen=True)
class Request:
    """The command line of a prediction, as data."""

    workload: str
    strategies: tuple[str, ...] = ("ddp",)
    option_pairs: tuple[str, ...] = ()
    size: str = "small"
    precision: str = "fp32"
    backend: str = "cpu"
    comm: str = "gloo"
    network: str | None = None
    algorithm: str = "ring"
    compute_from: str | None = None
    compute_rate: float | None = None
    calibrate_from: tuple[str, ...] = ("results",)
    batch_size: int | None = None
    threads: int | None = None
    scaling: str = "weak"


@dataclass
class Prepared:
    """One context per strategy, where their numbers came from, and warnings to show."""

    contexts: dict[str, Context]
    provenance: Provenance
    warnings: list[str] = field(default_factory=list)


def load_calibration(paths: tuple[str, ...], warnings: list[str]) -> list[dict[str, Any]]:
    """The records under `paths` (files, stores); unreadable files become warnings."""
    loaded = load_inputs(list(paths))
    warnings.extend(loaded.warnings)
    return loaded.records


def _compute(request: Request, records: list[dict[str, Any]], flops: int
             ) -> tuple[ComputeCalibration, dict[str, Any] | None]:
    if request.compute_rate is not None:
        return compute_from_rate(flops, request.compute_rate), None
    if request.compute_from is not None:
        chosen = [r for r in load_inputs([request.compute_from]).records
                  if r.get("status") == "success" and r["spec"].get("task") is None]
        if not chosen:
            raise UsageError(f"--compute-from {request.compute_from}: no successful run record")
        return compute_from_record(chosen[0], request.threads), chosen[0]
    found = compute_from_records(records, workload=request.workload, size=request.size,
                                 precision=request.precision, backend=request.backend,
                                 threads=request.threads, batch=request.batch_size)
    if found is None:
        raise UsageError(
            f"no single-rank run of {request.workload}/{request.size} {request.precision} "
            f"{request.backend} in {' '.join(request.calibrate_from)} to calibrate compute: "
            f"run `dtbench run -w {request.workload} --size {request.size} -n 1`, or give "
            "--compute-from RECORD or --compute-rate FLOP/s")
    source = next(r for r in records if r["run_id"] == found.run_ids[0])
    return found, source


def _network(request: Request, records: list[dict[str, Any]]) -> tuple[Network, list[str]]:
    if request.network is not None:
        return parse_network(request.network, request.algorithm), []
    network, used = network_from_fits(comm_fits(records), request.comm, request.algorithm)
    return network, sorted({run for fit in used for run in fit.run_ids})


def prepare(request: Request) -> Prepared:
    """Check and calibrate everything; UsageError (exit 2) names the first problem."""
    if request.scaling not in ("weak", "strong"):
        raise UsageError(f"--scaling {request.scaling}: choose weak or strong")
    options = parse_option_pairs(list(request.option_pairs), list(request.strategies))
    facts = workload_facts(request.workload, request.size)
    warnings: list[str] = []
    needs_records = request.network is None or (request.compute_rate is None
                                                 and request.compute_from is None)
    records = load_calibration(request.calibrate_from, warnings) if needs_records else []
    compute, source = _compute(request, records, facts.flops_per_sample)
    network, comm_runs = _network(request, records)
    batch = request.batch_size or compute.batch or 0
    if batch < 1:
        from workloads import get_workload

        batch = get_workload(request.workload).preset(request.size).default_batch(
            request.backend)
    assumptions = [f"network: {network.description}"] if network.assumed else []
    if compute.assumed:
        assumptions.append(f"compute: {compute.source}")
    overheads = {strategy: found for strategy, found in overheads_from_records(
        records, compute, workload=request.workload, size=request.size,
        precision=request.precision, backend=request.backend).items()
        if strategy in request.strategies}
    created = [compute.created_at] if compute.created_at else []
    created += [r["created_at"] for r in records if r["run_id"] in comm_runs]
    created += [found.created_at for found in overheads.values()]
    provenance = Provenance(
        comm=request.comm if request.network is None else "model",
        compute_runs=compute.run_ids, comm_runs=tuple(comm_runs),
        created_at=max(created, default=EPOCH),
        machine=dict(source.get("machine", {})) if source else {},
        software=dict(source.get("software", {})) if source else {},
        assumptions=tuple(assumptions),
        overhead_runs=tuple(run for found in overheads.values() for run in found.run_ids))
    contexts = {s: Context(facts, compute, network, batch, request.scaling, request.precision,
                           options[s], overheads=overheads) for s in request.strategies}
    return Prepared(contexts, provenance, warnings)


def paths_exist(paths: tuple[str, ...]) -> tuple[str, ...]:
    """The paths, after checking each exists (a clear usage error otherwise)."""
    for name in paths:
        if not Path(name).exists():
            raise UsageError(f"{name}: no such file or directory (calibration records: give "
                             "--calibrate-from PATH, or --network and --compute-rate)")
    return paths

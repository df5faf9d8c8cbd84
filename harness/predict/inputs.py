"""Everything a `dtbench predict` invocation needs, gathered and checked before any
prediction: the workload's facts, the compute and network calibration (or the assumptions
that replace them), the strategies with their options."""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from harness.core.errors import UsageError
from harness.predict.calibration import (
    ComputeCalibration,
    Fit,
    comm_fits,
    compute_from_curve,
    compute_from_rate,
    compute_from_record,
    compute_from_records,
    compute_run,
    network_from_fits,
)
from harness.predict.context import Context, workload_facts
from harness.predict.costs import ALGORITHMS
from harness.predict.interval import calibration_inputs
from harness.predict.machine import Chosen, choose_machine
from harness.predict.network import Network, parse_network
from harness.predict.overhead import overheads_from_records
from harness.predict.records import EPOCH, Provenance
from harness.predict.scaleout import parse_option_pairs
from harness.predict.spread import with_spread
from harness.predict.topology import parse_topology
from harness.records.experiment import machine_of
from harness.spec.kinds import COLLECTIVE, TRAINING, record_kind
from harness.store.sources import load_inputs
from workloads.external import is_external


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
    algorithm: str | None = None  # ring on a flat network, auto on a topology
    compute_from: str | None = None
    compute_rate: float | None = None
    calibrate_from: tuple[str, ...] = ("results",)
    batch_size: int | None = None
    threads: int | None = None
    scaling: str = "weak"
    topology: str | None = None
    compute_curve: str | None = None
    step_cv: float = 0.0
    step_overhead: float = 0.0
    fusion: str | None = None
    machine: str | None = None  # whose records calibrate (default: this machine's hardware)
    run_spread: float | None = None  # a stated between-run spread (default: from the records)


@dataclass
class Prepared:
    """One context per strategy, where their numbers came from, and warnings to show."""

    contexts: dict[str, Context]
    provenance: Provenance
    warnings: list[str] = field(default_factory=list)
    chosen: Chosen = field(default_factory=lambda: Chosen([]))
    spread: str = ""  # where the between-run spread of the intervals came from


def load_calibration(paths: tuple[str, ...], warnings: list[str]) -> list[dict[str, Any]]:
    """The records under `paths` (files, stores); unreadable files become warnings."""
    loaded = load_inputs(list(paths))
    warnings.extend(loaded.warnings)
    return loaded.records


def _compute(request: Request, records: list[dict[str, Any]], flops: int
             ) -> tuple[ComputeCalibration, dict[str, Any] | None]:
    found, source = _measured_compute(request, records, flops)
    if request.step_cv < 0 or request.step_overhead < 0:
        raise UsageError("--step-cv and --step-overhead must be >= 0")
    if request.step_overhead:
        found = replace(found, fixed_s=found.fixed_s + request.step_overhead,
                        source=f"{found.source}; +{request.step_overhead * 1e3:g} ms a step "
                        "given", assumed=True)
    return with_spread(found, request.step_cv), source


def _borrowed_rate(request: Request, records: list[dict[str, Any]], flops: int
                   ) -> tuple[ComputeCalibration, dict[str, Any]] | None:
    """A model read only for its facts (torchvision:NAME) has no runs of its own: it computes
    at the FLOP/s this machine's single-rank run of the seed workload nearest in FLOPs per
    sample achieved (same precision and backend), said as an assumption."""
    found = []
    for record in filter(compute_run, records):
        spec = record["spec"]
        if spec.get("precision") != request.precision or spec.get("backend") != \
                request.backend or is_external(str(spec.get("workload"))):
            continue
        theirs = workload_facts(str(spec["workload"]), str(spec.get("size"))).flops_per_sample
        found.append((abs(math.log(theirs / flops)), record["run_id"], record, theirs))
    if not found:
        return None
    _, run_id, record, theirs = min(found, key=lambda item: item[:2])
    measured = compute_from_record(record, request.threads)
    rate = theirs / measured.seconds_per_sample
    borrowed = compute_from_rate(flops, rate)
    return replace(borrowed, batch=measured.batch, run_ids=(run_id,),
                   created_at=record["created_at"],
                   source=f"{rate:.4g} FLOP/s, as {record['spec']['workload']}/"
                   f"{record['spec'].get('size')} achieved in {measured.source} (assumed for "
                   f"{request.workload})"), record


def _measured_compute(request: Request, records: list[dict[str, Any]], flops: int
                      ) -> tuple[ComputeCalibration, dict[str, Any] | None]:
    if request.compute_rate is not None:
        return compute_from_rate(flops, request.compute_rate), None
    if request.compute_curve is not None:
        return compute_from_curve(request.compute_curve), None
    if is_external(request.workload):
        borrowed = _borrowed_rate(request, records, flops)
        if borrowed is None:
            raise UsageError(f"{request.workload}: no single-rank run of a seed workload "
                             f"({request.precision}, {request.backend}) to borrow a FLOP/s "
                             "from; give --compute-rate FLOP/s or --compute-curve B:RATE")
        return borrowed
    if request.compute_from is not None:
        chosen = [r for r in load_inputs([request.compute_from]).records
                  if r.get("status") == "success" and record_kind(r) is TRAINING]
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


def _network(request: Request, records: list[dict[str, Any]]) -> tuple[Network, list[Fit]]:
    if request.topology is not None:
        if request.network is not None:
            raise UsageError("give --topology or --network, not both (a topology names its "
                             "network between nodes)")
        return parse_topology(request.topology, request.algorithm or "auto"), []
    algorithm = request.algorithm or "ring"
    if algorithm not in ALGORITHMS:
        raise UsageError(f"--algorithm {algorithm}: needs --topology (devices a node); a "
                         f"flat network takes {', '.join(ALGORITHMS)}")
    if request.network is not None:
        return parse_network(request.network, algorithm), []
    return network_from_fits(comm_fits(records), request.comm, algorithm)


def _elsewhere(why: str, request: Request, loaded: list[dict[str, Any]], chosen: Chosen) -> str:
    """A missing network calibration, with whose records it came from and which other
    machines' records would have one."""
    if not chosen.label:
        return why
    others = sorted({machine_of(r) for r in loaded if r not in chosen.records
                     and record_kind(r) is COLLECTIVE and r["spec"].get("comm") == request.comm})
    return (f"{why}, among the records of {chosen.label} ({chosen.why}); give --network LINK"
            + (f", or --machine with one that has them ({'; '.join(others)})" if others else ""))


def prepare(request: Request) -> Prepared:
    """Check and calibrate everything; UsageError (exit 2) names the first problem."""
    if request.scaling not in ("weak", "strong"):
        raise UsageError(f"--scaling {request.scaling}: choose weak or strong")
    options = parse_option_pairs(list(request.option_pairs), list(request.strategies))
    facts = workload_facts(request.workload, request.size)
    warnings: list[str] = []
    given_network = request.network is not None or request.topology is not None
    given_compute = any(v is not None for v in (request.compute_rate, request.compute_from,
                                                request.compute_curve))
    needs_records = not (given_network and given_compute)
    loaded = load_calibration(request.calibrate_from, warnings) if needs_records else []
    chosen = choose_machine(loaded, request.machine, " ".join(request.calibrate_from))
    warnings += chosen.warnings
    records = chosen.records
    compute, source = _compute(request, records, facts.flops_per_sample)
    try:
        network, fits = _network(request, records)
    except UsageError as why:
        raise UsageError(_elsewhere(str(why), request, loaded, chosen)) from None
    comm_runs = sorted({run for fit in fits for run in fit.run_ids})
    batch = request.batch_size or compute.batch or 0
    if batch < 1 and is_external(request.workload):
        raise UsageError(f"{request.workload}: give --batch-size (per device)")
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
        machine_label=chosen.label,
        software=dict(source.get("software", {})) if source else {},
        assumptions=tuple(assumptions),
        overhead_runs=tuple(run for found in overheads.values() for run in found.run_ids))
    fusion = parse_fusion(request.fusion) if request.fusion else None
    uncertain, spread = calibration_inputs(records, compute, fits, overheads,
                                           run_spread=request.run_spread,
                                           cv_stated=request.step_cv > 0)
    contexts = {s: Context(facts, compute, network, batch, request.scaling, request.precision,
                           options[s], overheads=overheads, fusion=fusion,
                           comm="" if network.assumed else request.comm, uncertain=uncertain)
                for s in request.strategies}
    return Prepared(contexts, provenance, warnings, chosen, spread)


def paths_exist(paths: tuple[str, ...]) -> tuple[str, ...]:
    """The paths, after checking each exists (a clear usage error otherwise); a store's URL
    is checked when it is read."""
    from harness.store.url import is_store_url

    for name in paths:
        if not is_store_url(name) and not Path(name).exists():
            raise UsageError(f"{name}: no such file or directory (calibration records: give "
                             "--calibrate-from PATH, or --network and --compute-rate)")
    return paths


def parse_fusion(text: str) -> tuple[float, float]:
    """'MB:CYCLE_MS' (Horovod's HOROVOD_FUSION_THRESHOLD and HOROVOD_CYCLE_TIME; 'horovod'
    for its defaults since 0.21, 128 MB and 1 ms) as (bytes, seconds)."""
    text = "128:1" if text.strip().lower() == "horovod" else text
    size, _, cycle = text.partition(":")
    try:
        mb, ms = float(size), float(cycle or 0)
    except ValueError:
        mb, ms = 0.0, -1.0
    if not mb > 0 or ms < 0:
        raise UsageError(f"--fusion {text!r}: expected MB:CYCLE_MS such as 64:5 (or horovod)")
    return mb * 2**20, ms / 1e3

"""What a strategy's own machinery adds to every step, measured, never fitted to the runs the
model is validated against: the median step of a single-rank run of the strategy minus the
compute calibration's step at the same batch. At one rank the strategy's collectives have no
partner and cost next to nothing; what is left beyond the compute is its per-step work on the
CPU (for FSDP2: copying into and out of the flat all-gather buffers, DTensor bookkeeping, the
hooks), which the α-β costs of its collectives do not price.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

from harness.predict.calibration import (
    ComputeCalibration,
    compute_from_records,
    single_rank_run,
    step_times,
)
from harness.records.definitions import center
from harness.strategies import STRATEGIES

# Strategies whose own work runs once per step on every rank whatever the rank count, so that
# one rank measures it: those whose class says what that work is (Strategy.own_work; fsdp,
# zero1, tensor). Not ddp (its single-rank run is the compute calibration itself), not
# pipeline (its schedule's own time grows with stages and micro-batches, not once per step),
# nor those whose single-rank run leaves out the work they do on n ranks (localsgd's
# averages, gossip's neighbours, hogwild's shared model, the parameter servers, dp-tp's two
# dimensions).
PER_STEP = tuple(name for name in STRATEGIES
                 if STRATEGIES.get(name).own_work)
IDENTITY = ("workload", "size", "precision", "backend")


@dataclass(frozen=True)
class StrategyOverhead:
    """Seconds a strategy's own work adds to each step of one rank, and what measured it."""

    strategy: str
    seconds: float
    strategy_step: float
    compute_step: float
    batch: int
    threads: int | None
    run_ids: tuple[str, ...]
    created_at: str

    @property
    def source(self) -> str:
        """How the figure was made, for notes and the calibration listing."""
        return (f"{self.strategy} at 1 rank {self.strategy_step * 1e3:.1f} ms - compute "
                f"{self.compute_step * 1e3:.1f} ms at batch {self.batch}, "
                f"{self.threads or '?'} thread(s) per rank ({', '.join(self.run_ids)})")


def _own_run(record: dict[str, Any], strategy: str) -> bool:
    """A single-rank run of `strategy` with a process group (comm not none): without one the
    strategies leave the model as it is, and the run measures compute only."""
    spec = record["spec"]
    return (single_rank_run(record) and spec.get("strategy") == strategy
            and spec.get("comm") not in (None, "none"))


def overheads_from_records(records: list[dict[str, Any]], compute: ComputeCalibration, *,
                           workload: str, size: str, precision: str, backend: str
                           ) -> dict[str, StrategyOverhead]:
    """Per strategy of PER_STEP with a single-rank run of its own of the same workload, size,
    precision, backend and threads per rank as `compute`: median step - compute's step at that
    run's batch, clipped at 0 (a negative difference is noise, not a speed-up). Runs at the
    batch nearest compute's; tied runs give the median of their differences. Empty for an
    assumed compute rate (a FLOP/s figure says nothing about this machine's per-step work) and
    for compute scaled from other threads per rank (the difference would inherit that guess)."""
    if compute.assumed or compute.scaled:
        return {}
    identity = tuple(zip(IDENTITY, (workload, size, precision, backend), strict=True))
    found = {}
    for strategy in PER_STEP:
        runs = [r for r in records if _own_run(r, strategy)
                and all(r["spec"].get(k) == v for k, v in identity)
                and r["spec"].get("threads") == compute.threads]
        if not runs:
            continue
        nearest = min(abs(r["spec"]["batch_per_rank"] - compute.batch) for r in runs)
        chosen = sorted((r for r in runs
                         if abs(r["spec"]["batch_per_rank"] - compute.batch) == nearest),
                        key=lambda r: r["run_id"])
        steps = [center("step_time", step_times(r)) for r in chosen]
        bare = [compute.seconds_per_sample * r["spec"]["batch_per_rank"] for r in chosen]
        extra = statistics.median(s - b for s, b in zip(steps, bare, strict=True))
        found[strategy] = StrategyOverhead(
            strategy, max(0.0, extra), statistics.median(steps), statistics.median(bare),
            chosen[0]["spec"]["batch_per_rank"], compute.threads,
            tuple(r["run_id"] for r in chosen), max(r["created_at"] for r in chosen))
    return found


def measured_overheads(records: list[dict[str, Any]]
                       ) -> list[tuple[tuple[str, ...], StrategyOverhead]]:
    """Every strategy's own work that `records` measure, for `dtbench predict --calibration`:
    one per workload, size, precision, backend and threads per rank of a single-rank run of a
    PER_STEP strategy, against the compute calibration of the same (compute_from_records);
    each with its (workload, size, precision, backend)."""
    keys = sorted({tuple(str(r["spec"].get(k)) for k in IDENTITY) + (r["spec"].get("threads"),)
                   for r in records for strategy in PER_STEP if _own_run(r, strategy)},
                  key=str)
    found = []
    for workload, size, precision, backend, threads in keys:
        compute = compute_from_records(records, workload=workload, size=size,
                                       precision=precision, backend=backend,
                                       threads=threads if isinstance(threads, int) else None)
        if compute is not None:
            found += [((workload, size, precision, backend), measured) for measured in
                      overheads_from_records(records, compute, workload=workload, size=size,
                                             precision=precision, backend=backend).values()]
    return found

"""Synthetic records for the predictor's tests: single-rank runs, multi-rank runs and
`dtbench comm` sweeps whose numbers are chosen so that predictions can be computed by hand."""
from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

import pytest

from harness.records.record import Metric, build_record

Factory = Callable[..., dict[str, Any]]
CREATED = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
MACHINE = {"machine_id": "m1", "hostname": "box", "cpu_model": "test cpu", "nodes": 1,
           "cpus_usable": 8}


def _record(run_id: str, spec: dict[str, Any], metrics: list[Metric],
            created: dt.datetime) -> dict[str, Any]:
    return build_record(run_id=run_id, created=created, status="success", error=None,
                        harness={"version": "0"}, machine=dict(MACHINE), software={},
                        spec=spec, metrics=metrics, events=[])


@pytest.fixture
def run_record() -> Factory:
    """A training run of hep_cnn/small (fp32, cpu) with the given per-step times."""

    def make(step_times: list[float], *, world_size: int = 1, batch: int = 32,
             threads: int = 1, comm: str = "none", run_id: str = "run-1",
             created: dt.datetime = CREATED, **spec: Any) -> dict[str, Any]:
        ordered = sorted(step_times)
        median = ordered[len(ordered) // 2]
        full = {"workload": "hep_cnn", "size": "small", "backend": "cpu", "comm": comm,
                "launcher": "local", "precision": "fp32", "world_size": world_size,
                "nnodes": 1, "nproc_per_node": world_size, "batch_per_rank": batch,
                "global_batch": batch * world_size, "threads": threads, "bucket_mb": 25,
                "compression": "none", "mode": "throughput", **spec}
        return _record(run_id, full, [Metric("step_time", "s", median, False,
                                             samples=list(step_times))], created)

    return make


@pytest.fixture
def comm_record() -> Factory:
    """A `dtbench comm` record of one op whose times are exactly alpha + beta * bytes."""

    def make(op: str, alpha: float, beta: float, *, comm: str = "gloo", world_size: int = 2,
             run_id: str | None = None, sizes: tuple[int, ...] = (1024, 65536, 2**20, 2**24),
             **spec: Any) -> dict[str, Any]:
        rows = [{"bytes": s, "time_s": alpha + beta * s, "algbw": 0.0, "busbw": 0.0}
                for s in sizes]
        full = {"task": "comm", "comm": comm, "launcher": "local", "world_size": world_size,
                "nnodes": 1, "nproc_per_node": world_size, "op": op, "workload": f"comm-{op}",
                "size": "-", "precision": "fp32", "backend": "cpu", **spec}
        return _record(run_id or f"comm-{comm}-{op}-{world_size}", full,
                       [Metric("busbw", "GB/s", 1.0, True, extra={"per_size": rows})], CREATED)

    return make

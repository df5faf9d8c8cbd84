"""Kernel measurements as schema-v1 records of task `kernel`: the same fingerprint, statistics
and store as training runs. The spec names the kernel (family, shape, pass, algorithm,
precision, backend, threads) and `spec_key` hashes exactly that, so `dtbench compare` pairs a
kernel with itself across runs. Metrics with raw per-call samples: `time` and
`effective_flops` (direct-convolution or GEMM FLOPs / time; `achieved_bandwidth` for copy and
triad). Without samples: the analytic FLOPs and bytes, the intensity, both roofs measured in
the same invocation, the roof at this intensity, the share of it reached, and the maximum
relative error against the reference."""
from __future__ import annotations

import datetime as dt
import os
import statistics
from typing import Any

from harness.microbench.kernels.roofline import (
    arithmetic_intensity,
    attainable_flops,
    bound,
    kernel_bytes,
    kernel_flops,
    share_of_roof,
)
from harness.microbench.kernels.runner import Measurement, Roofs
from harness.microbench.kernels.sets import KernelSet
from harness.records.record import Metric, build_record
from harness.records.record import measured as catalogued
from harness.spec.kinds import KERNEL
from harness.spec.specs import performance_env

REFERENCES = {"conv": "torch direct convolution (oneDNN), fp32",
              "lstm": "torch.lstm_cell, fp32",
              "attention": "scaled_dot_product_attention's math backend, fp32"}


def kernel_spec(measured: Measurement, kernel_set: KernelSet, backend: str,
                threads: int) -> dict[str, Any]:
    case = measured.case
    timing = kernel_set.timing
    return {
        "task": KERNEL.task, "workload": f"kernel-{case.family}", "family": case.family,
        "kernel": case.label(), "shape": case.shape.as_dict(), "pass": measured.pass_,
        "algorithm": measured.algorithm, "precision": measured.precision, "backend": backend,
        "threads": threads, "size": "-", "comm": "none", "launcher": "local", "world_size": 1,
        "nnodes": 1, "mode": "kernel", "set": kernel_set.name, "group": case.group,
        "sources": list(case.sources), "warmup": timing.warmup, "min_reps": timing.min_reps,
        "max_reps": timing.max_reps, "budget_s": timing.budget_s, "env": performance_env(),
    }


def kernel_metrics(measured: Measurement, roofs: Roofs) -> list[Metric]:
    case, pass_, algorithm = measured.case, measured.pass_, measured.algorithm
    flops = kernel_flops(case.shape, pass_, algorithm, measured.precision)
    nbytes = kernel_bytes(case.shape, pass_, algorithm, measured.precision)
    times = measured.samples
    seconds = statistics.median(times)
    intensity = arithmetic_intensity(flops, nbytes)
    metrics = [catalogued("time", seconds, samples=list(times))]
    if case.family == "memory":
        metrics.append(catalogued("achieved_bandwidth", nbytes / seconds,
                                  samples=[nbytes / t for t in times]))
    else:
        metrics.append(catalogued("effective_flops", flops / seconds,
                                  samples=[flops / t for t in times]))
    share = share_of_roof(flops, nbytes, seconds, roofs.peak_flops, roofs.bandwidth)
    metrics += [
        catalogued("kernel_flops", float(flops)),
        catalogued("kernel_bytes", float(nbytes)),
        catalogued("arithmetic_intensity", intensity),
        catalogued("peak_flops", roofs.peak_flops,
                   extra={"peak_source": "in-run", "per_size": roofs.peak_per_size}),
        catalogued("memory_bandwidth", roofs.bandwidth, extra={"kernel": roofs.bandwidth_kernel}),
        catalogued("attainable_flops",
                   attainable_flops(intensity, roofs.peak_flops, roofs.bandwidth)),
        catalogued("share_of_roof", share,
                   extra={"bound": bound(intensity, roofs.peak_flops, roofs.bandwidth)}),
    ]
    if measured.max_rel_error is not None:
        metrics.append(catalogued("max_rel_error", measured.max_rel_error,
                                  extra={"reference": REFERENCES.get(case.family, "")}))
    return metrics


def kernel_record(measured: Measurement, roofs: Roofs | None, *, run_id: str,
                  created: dt.datetime, kernel_set: KernelSet, backend: str, threads: int,
                  harness: dict[str, Any], machine: dict[str, Any],
                  software: dict[str, Any]) -> dict[str, Any]:
    """One record; a skipped (not applicable) or failed kernel has no metrics and says why."""
    spec = kernel_spec(measured, kernel_set, backend, threads)
    metrics = (kernel_metrics(measured, roofs)
               if measured.status == "success" and roofs is not None else [])
    # The host's 1-minute load average as the kernel finished: on a shared machine, a load
    # above the cores in use says the figures were taken beside other work.
    notes: dict[str, Any] = {"details": measured.details, "load_average_1m": os.getloadavg()[0]}
    if roofs is not None:
        notes["roofs_measured_at"] = roofs.measured_at
    return build_record(run_id=run_id, created=created, status=measured.status,
                        error=measured.error, harness=harness, machine=machine,
                        software=software, spec=spec, metrics=metrics, events=[],
                        extra={"spec_key": KERNEL.key(spec), "notes": notes})

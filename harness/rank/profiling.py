"""`--profile`: a few more steps after the measured ones under torch.profiler, one trace per
rank (Chrome/Perfetto JSON, gzip); the profiled steps stay out of every figure (their phase
times and counted bytes are dropped), and the trace travels with the rank's result to the
process that writes the record, which keeps it beside the record (harness/run/traces.py).

The trace is also read here, into the time breakdown of each profiled step: compute,
communication overlapped with compute, exposed communication and the rest of the step, from
the intervals of the ops on the training thread and of the collectives on any thread.
"""
from __future__ import annotations

import base64
import gzip
import json
import re
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

# A collective as the profiler names it: c10d's ops, gloo's and NCCL's own events and kernels.
COMM = re.compile(r"c10d|gloo|nccl|all_?reduce|all_?gather|reduce_?scatter|broadcast|"
                  r"alltoall|send|recv", re.IGNORECASE)
STEP = re.compile(r"^ProfilerStep#\d+$")


def profile_steps(step: Callable[[], Any], steps: int, device: torch.device) -> str:
    """Run `step` `steps` times under the profiler (CPU ops, and CUDA kernels on a GPU); the
    gzipped Chrome trace, base64 (it crosses processes inside the rank's result)."""
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=activities) as profiler:
        for index in range(steps):
            # the step's span, as TorchTitan's traces and HTA name it
            with torch.profiler.record_function(f"ProfilerStep#{index}"):
                step()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    with tempfile.TemporaryDirectory(prefix="dtbench-trace-") as folder:
        path = Path(folder) / "trace.json"
        profiler.export_chrome_trace(str(path))
        return base64.b64encode(gzip.compress(path.read_bytes())).decode("ascii")


def trace_events(encoded: str) -> list[dict[str, Any]]:
    document = json.loads(gzip.decompress(base64.b64decode(encoded)))
    return [e for e in document.get("traceEvents", []) if e.get("ph") == "X"]


def _union(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    merged: list[tuple[float, float]] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def _length(intervals: list[tuple[float, float]]) -> float:
    return sum(end - start for start, end in intervals)


def _intersection(first: list[tuple[float, float]],
                  second: list[tuple[float, float]]) -> list[tuple[float, float]]:
    found = []
    for a_start, a_end in first:
        for b_start, b_end in second:
            start, end = max(a_start, b_start), min(a_end, b_end)
            if start < end:
                found.append((start, end))
    return _union(found)


def _clip(intervals: list[tuple[float, float]], start: float, end: float
          ) -> list[tuple[float, float]]:
    return [(max(s, start), min(e, end)) for s, e in intervals if e > start and s < end]


def read_trace(encoded: str) -> dict[str, float] | None:
    """The profiled steps' time as shares summing to 1: `compute` (training-thread ops, or
    GPU kernels, that are not collectives and overlap none), `comm_overlapped` (collectives
    running while compute runs), `comm_exposed` (collectives while nothing computes) and
    `other` (neither: launch gaps, waiting for data or for other ranks). None without a
    profiled step in the trace."""
    events = trace_events(encoded)
    steps = [e for e in events if STEP.match(str(e.get("name", "")))]
    if not steps:
        return None
    main = (steps[0].get("pid"), steps[0].get("tid"))
    kernels = [e for e in events if e.get("cat") == "kernel"]
    if kernels:  # a GPU trace: the device's timeline is where compute and transfers overlap
        compute_events = [e for e in kernels if not COMM.search(str(e.get("name", "")))]
        comm_events = [e for e in kernels if COMM.search(str(e.get("name", "")))]
    else:
        # the training thread's ops; collectives on every thread (gloo runs them on threads
        # of its own, which the profiler shows as `gloo:all_reduce` annotations)
        compute_events = [e for e in events if e.get("cat") == "cpu_op"
                          and (e.get("pid"), e.get("tid")) == main
                          and not COMM.search(str(e.get("name", "")))]
        comm_events = [e for e in events if e.get("cat") in ("cpu_op", "user_annotation")
                       and COMM.search(str(e.get("name", "")))
                       and (e.get("pid"), e.get("tid")) != main]
    totals = {"compute": 0.0, "comm_overlapped": 0.0, "comm_exposed": 0.0, "other": 0.0}
    span = 0.0
    for step in steps:
        start, end = float(step["ts"]), float(step["ts"]) + float(step.get("dur", 0.0))
        compute = _union(_clip([(float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0)))
                                for e in compute_events], start, end))
        comm = _union(_clip([(float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0)))
                             for e in comm_events], start, end))
        overlapped = _length(_intersection(compute, comm))
        busy = _length(_union(compute + comm))
        totals["compute"] += _length(compute) - overlapped
        totals["comm_overlapped"] += overlapped
        totals["comm_exposed"] += _length(comm) - overlapped
        totals["other"] += max(0.0, (end - start) - busy)
        span += end - start
    return {key: value / span for key, value in totals.items()} if span > 0 else None

"""The metric catalogue: every metric dtbench writes, declared once.

A metric's unit, which way is better, how a table scales it, its heading, whether the training
table shows it, whether a store's index keeps it, what it means and how `compare` treats it are
read from here by the collectors (which write them into records), by compare (which direction
a foreign record leaves out), by report, publish and the run summary (headings, scales and
columns) and by the stores' index (records/summary.py); docs/spec/metrics.md documents the same
names, units and directions, and tests/test_docs.py holds the two together. A record states
its own unit and direction, and readers keep preferring the record's: records written before a
change here read as they were written, and a metric the catalogue does not know still compares
by what its record says.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

# Which way is better; None where each record states it (a workload's quality target, a
# doctor check's own direction).
HIGHER, LOWER = "higher", "lower"
# The unit or direction of a metric whose records each state their own, as the docs write it.
PER_RECORD = "per record"

# How `compare` treats a metric. GATED: its samples are tested and a regression fails the gate.
# VALUE: one value per run, gated too (from MIN_RUNS runs a side like samples, else only beyond
# compare's single-run limit). DIAGNOSTIC: tested and shown, never failing the gate (phases are
# far noisier than their step; FLOP/s and MFU restate the throughput, and gating them multiplies
# the false alarms of one change: docs/measurements/precision.md). CONSTANT: a constant of the
# model, the kernel or the machine, not of the run: a change there is not a regression, so it
# is not compared at all.
GATED, VALUE, DIAGNOSTIC, CONSTANT = "gated", "value", "diagnostic", "constant"

# How a report column of the metric is scaled (harness/facts/units.py does the arithmetic).
PERCENT = "percent"        # a share (unit 1) shown as %
SI = "si"                  # FLOP, FLOP/s with M, G, T, P prefixes
BINARY = "binary"          # bytes as KiB, MiB, GiB, TiB
TIME = "time"              # seconds, ms or µs below a second
STEP_TIME = "step time"    # always ms (µs below a millisecond): steps compare in one scale
LONG_TIME = "long time"    # seconds, minutes from 10 minutes up (time to train)
AS_STORED = "as stored"    # the value in the record's own unit


def scale_for_unit(unit: str) -> str:
    """The scale a unit reads best in where its metric declares none (or is unknown)."""
    if unit == "1":
        return PERCENT
    if unit in ("FLOP/s", "FLOP"):
        return SI
    if unit in ("bytes", "B"):
        return BINARY
    return TIME if unit == "s" else AS_STORED


@dataclass(frozen=True)
class MetricInfo:
    """One metric (or, with `family`, every metric named `name` + a suffix): its unit, which
    way is better, its report scale, a one-line definition and its role in `compare`."""

    name: str
    unit: str | None
    better: str | None
    definition: str
    compare: str = GATED
    scale: str | None = None
    family: bool = False
    # what a table heading calls it (a family's: "{}" takes the suffix, "gradient bytes/step")
    heading: str = ""
    # a column of the report's training table (False: the CSV and the sections that read it)
    column: bool = True
    # position among the store index's metric columns (0: not indexed); a column once
    # indexed keeps its place, as stores on disk and servers have it
    index: int = 0

    @property
    def higher_is_better(self) -> bool | None:
        """The record's `higher_is_better`; None where each record states its own."""
        return None if self.better is None else self.better == HIGHER

    def scale_of(self, unit: str) -> str:
        """The report scale of a column in `unit`: the declared one where the record's unit
        is the catalogue's (an older record's other unit is scaled by that unit)."""
        if self.scale is not None and (self.unit is None or unit == self.unit):
            return self.scale
        return scale_for_unit(unit)


def _metric(name: str, unit: str | None, better: str | None, heading: str, definition: str,
            compare: str = GATED, scale: str | None = None, *, column: bool = True,
            index: int = 0) -> MetricInfo:
    if scale is None and unit is not None:
        scale = scale_for_unit(unit)
    return MetricInfo(name, unit, better, definition, compare, scale, name.endswith("_"),
                      heading, column, index)


CATALOGUE: tuple[MetricInfo, ...] = (
    # training runs (dtbench run)
    _metric("throughput", "samples/s", HIGHER, "throughput", "global samples per second: the "
            "global batch over the median step time", index=1),
    _metric("tokens_per_s", "tokens/s", HIGHER, "token throughput", "throughput x the tokens "
            "a sample holds (language models)"),
    _metric("step_time", "s", LOWER, "step time", "wall time per step, the slowest rank's",
            scale=STEP_TIME, index=2),
    _metric("cpu_time", "s", LOWER, "CPU time/step", "CPU seconds of a step, every thread of "
            "every rank's process (user + system)", DIAGNOSTIC, scale=STEP_TIME, column=False),
    _metric("reference_time", "s", LOWER, "speed probe", "--speed-probe: a fixed matrix "
            "product timed after each measured step (the machine's speed then)", CONSTANT,
            scale=STEP_TIME, column=False),
    _metric("first_step_time", "s", LOWER, "first step", "the first warm-up step (compilation "
            "shows here)"),
    _metric("flops_per_sample", "FLOP", LOWER, "FLOPs per sample", "forward + backward FLOPs "
            "per sample", CONSTANT, column=False),
    _metric("achieved_flops", "FLOP/s", HIGHER, "achieved", "flops_per_sample x throughput",
            DIAGNOSTIC, index=6),
    _metric("peak_flops", "FLOP/s", HIGHER, "measured peak", "measured GEMM peak of the same "
            "devices", CONSTANT),
    _metric("memory_bandwidth", "B/s", HIGHER, "memory bandwidth", "a large copy, timed beside "
            "the peak", CONSTANT, column=False),
    _metric("mfu", "1", HIGHER, "MFU", "achieved_flops / peak_flops", DIAGNOSTIC, index=3),
    _metric("mfu_spec", "1", HIGHER, "MFU of the datasheet", "achieved_flops over the device's "
            "datasheet peak", DIAGNOSTIC),
    _metric("time_breakdown", "1", LOWER, "exposed communication", "each rank's median step as "
            "shares; the value is the largest exposed-communication share", column=False),
    _metric("peak_memory", "bytes", LOWER, "peak memory", "peak resident set (CPU) or allocated "
            "device memory, the largest over ranks", VALUE, index=4),
    _metric("peak_memory_reserved", "bytes", LOWER, "peak memory reserved", "CUDA: the peak the "
            "caching allocator reserved"),
    _metric("device_memory_used", "bytes", LOWER, "device memory used", "CUDA: bytes in use on "
            "the board as NVML saw them"),
    _metric("time_to_train", "s", LOWER, "time to train", "run_start to run_stop until the "
            "quality target, evaluation included", VALUE, scale=LONG_TIME, index=5),
    _metric("samples_to_target", "samples", LOWER, "samples to target", "global samples "
            "trained until the target was reached", column=False),
    _metric("quality", None, None, "quality", "final quality in the target's own metric and "
            "direction", scale=AS_STORED),
    _metric("scaling_efficiency", "1", HIGHER, "scaling efficiency", "throughput_N / (N x "
            "throughput_1) against the one-rank record", index=7),
    _metric("comm_bytes", "bytes", LOWER, "bytes sent/step", "wire bytes a rank sends per "
            "training step", column=False),
    _metric("comm_payload_bytes", "bytes", LOWER, "collective payload/step", "bytes of the "
            "tensors a rank hands to its collectives per step", column=False),
    _metric("comm_bytes_outside_steps", "bytes", LOWER, "bytes sent outside steps", "wire bytes "
            "per rank outside the training steps", column=False),
    _metric("comm_bytes_", "bytes", LOWER, "{} bytes/step", "comm_bytes split by what the "
            "bytes are", column=False),
    _metric("state_bytes", "bytes", LOWER, "state/rank", "parameters + gradients + optimizer "
            "state a rank holds", DIAGNOSTIC, column=False),
    _metric("phase_", "s", LOWER, "{} phase", "per-phase step time, the slowest rank's",
            DIAGNOSTIC, column=False),
    _metric("bubble_fraction", "1", LOWER, "pipeline bubble", "pipeline: idle share of a "
            "stage"),
    _metric("strategy_layout", "ranks", LOWER, "layout", "the ranks and the role of each",
            column=False),
    _metric("staleness", "versions", LOWER, "staleness", "server version at apply minus the "
            "gradient's"),
    _metric("updates_per_s", "updates/s", HIGHER, "updates", "parameter servers: updates "
            "applied per second"),
    _metric("wait_fraction", "fraction", LOWER, "wait share", "share of a worker's step blocked "
            "on servers or communication"),
    _metric("lost_workers", "workers", LOWER, "lost workers", "workers that died mid-run"),
    _metric("portions_rerun", "portions", LOWER, "portions rerun", "sandblaster: portions "
            "computed again"),
    _metric("data_wait", "s", LOWER, "data wait", "seconds a step waited for its batch",
            DIAGNOSTIC, column=False),
    _metric("data_wait_share", "fraction", LOWER, "data wait share", "median data_wait / median "
            "step_time", DIAGNOSTIC),
    _metric("doctor_", None, None, "check {}", "dtbench doctor: one metric per measured check",
            column=False),
    _metric("energy", "J", LOWER, "energy", "energy of the measured window from a counter",
            DIAGNOSTIC, column=False),
    _metric("power", "W", LOWER, "power", "energy over the window's seconds", DIAGNOSTIC),
    _metric("energy_per_sample", "J/sample", LOWER, "energy per sample", "a sample's energy at "
            "the measured rate", VALUE),
    # collectives (dtbench comm)
    _metric("algbw", "GB/s", HIGHER, "algbw", "bytes / time, the whole buffer (nccl-tests)"),
    _metric("busbw", "GB/s", HIGHER, "busbw", "algbw x the collective's bus factor "
            "(nccl-tests)"),
    _metric("latency", "s", LOWER, "latency", "time of the smallest size"),
    # kernels (dtbench kernels)
    _metric("time", "s", LOWER, "time", "median time of one call of the kernel"),
    _metric("kernel_flops", "FLOP", HIGHER, "FLOPs", "analytic FLOPs of the kernel", CONSTANT),
    _metric("kernel_bytes", "bytes", LOWER, "bytes moved", "compulsory traffic of the kernel",
            CONSTANT),
    _metric("effective_flops", "FLOP/s", HIGHER, "effective", "kernel_flops / time"),
    _metric("achieved_bandwidth", "B/s", HIGHER, "bandwidth", "kernel_bytes / time"),
    _metric("arithmetic_intensity", "FLOP/B", HIGHER, "intensity", "kernel_flops / "
            "kernel_bytes", CONSTANT),
    _metric("attainable_flops", "FLOP/s", HIGHER, "roof", "the roof: min(peak, intensity x "
            "bandwidth)", CONSTANT),
    _metric("share_of_roof", "1", HIGHER, "share of roof", "achieved / roof", CONSTANT),
    _metric("max_rel_error", "1", LOWER, "max rel. error", "largest relative error against "
            "direct convolution", CONSTANT),
    # predictions (dtbench predict)
    _metric("compute_time", "s", LOWER, "compute", "the predicted step's compute"),
    _metric("comm_time", "s", LOWER, "communication", "the predicted step's communication"),
    _metric("comm_share", "1", LOWER, "communication share", "share of the predicted step not "
            "covered by compute"),
    _metric("strategy_overhead", "s", LOWER, "strategy overhead", "a strategy's own work "
            "measured at one rank"),
    _metric("rank_wait", "s", LOWER, "rank wait", "what waiting for the slowest synchronous "
            "rank adds"),
    # older records
    _metric("grad_bytes_per_step", "bytes", LOWER, "gradient bytes/step", "gradient bytes per "
            "step (records before comm_bytes)", CONSTANT, column=False),
    _metric("bytes_sent_per_rank", "bytes", LOWER, "bytes sent/rank", "ring allreduce bytes "
            "per rank (records before comm_bytes)", CONSTANT, column=False),
)
# The figures a reader looks for first (report's one-machine summary, publish's latest
# results), in the order they are shown.
HEADLINE = ("throughput", "mfu", "peak_memory", "time_to_train")
METRICS = {info.name: info for info in CATALOGUE}


def metric_info(name: str) -> MetricInfo | None:
    """The catalogue's entry for a metric name (an exact name before its family's), or None
    for a metric dtbench does not write (a foreign record's)."""
    found = METRICS.get(name)
    if found is not None:
        return found
    families = [info for info in CATALOGUE if info.family and name.startswith(info.name)]
    return max(families, key=lambda info: len(info.name)) if families else None


def higher_is_better(name: str) -> bool | None:
    """Which way is better for a metric its record leaves undirected; None where unknown."""
    found = metric_info(name)
    return found.higher_is_better if found else None


def compare_role(name: str) -> str:
    """How `compare` treats a metric (GATED for one the catalogue does not know)."""
    found = metric_info(name)
    return found.compare if found else GATED


def scale_of(name: str, unit: str) -> str:
    """The report scale of a metric's column whose records are in `unit`."""
    found = metric_info(name)
    return found.scale_of(unit) if found else scale_for_unit(unit)


def heading_of(name: str) -> str:
    """What a table heading calls a metric: the catalogue's word for it ("first step",
    "gradient bytes/step"); a metric dtbench does not write by its name, in words."""
    found = metric_info(name)
    if found is None:
        return name.replace("_", " ")
    if found.family:
        return found.heading.format(name[len(found.name):].replace("_", " "))
    return found.heading


def column_metrics(names: Iterable[str]) -> list[str]:
    """Of these metric names, the training table's columns, in catalogue order (a family's
    members by name); metrics the catalogue does not know are left to the CSV."""
    order = {info.name: position for position, info in enumerate(CATALOGUE)}
    shown = [(order[info.name], name) for name in set(names)
             if (info := metric_info(name)) is not None and info.column]
    return [name for _, name in sorted(shown)]


def indexed_metrics() -> tuple[MetricInfo, ...]:
    """The metrics a store's index keeps a value of, in the order of its columns."""
    return tuple(sorted((info for info in CATALOGUE if info.index), key=lambda i: i.index))

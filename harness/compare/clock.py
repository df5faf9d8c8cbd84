"""The clock a comparison reads its steps on (`dtbench compare --clock`, `dtbench gate
--clock`, the gate's power benchmark).

- wall: the step times as recorded (the default);
- cpu: the CPU seconds of each step (the `cpu_time` metric: every thread of every rank's
  process), which leave out what the processes did not run for;
- probe: each step's wall time over the speed probe timed after it (`--speed-probe`,
  the `reference_time` metric): on a shared VM the machine's speed moves from one second to
  the next with its neighbours' load, and the probe beside each step moves with it, so
  step / probe moves less between invocations (docs/measurements/ci-gate.md).

On cpu and probe a record's step_time and throughput are restated from that clock's figure,
step by step (tokens_per_s, a restatement of throughput, left out); everything else is as
recorded. A successful record without the clock's figure cannot be read on it and is left
out, said once per side: mixing clocks would compare seconds with probe units. A record
that did not succeed is kept as it is (a failed candidate run fails the gate on any clock).
"""
from __future__ import annotations

import copy
import statistics
from typing import Any

from harness.core.errors import UsageError
from harness.core.stats import Stats
from harness.records.record import metric as find_metric

CLOCKS = ("wall", "cpu", "probe")
# Each clock as a sentence names it
CLOCK_NAMES = {"wall": "wall clock", "cpu": "CPU seconds of every thread of the ranks' "
               "processes", "probe": "wall time over the speed probe timed after each step"}
# What a step reads in on each clock but the wall's, as the restated metrics state it
UNITS = {"cpu": ("s", "samples/s"), "probe": ("probes", "samples/probe")}
# What each clock needs a record to carry, as a sentence's end
NEEDS = {"cpu": "the cpu_time metric (a CPU run of this version)",
         "probe": "the reference_time metric (a run with --speed-probe)"}


def _samples(record: dict[str, Any], name: str) -> list[float]:
    entry = find_metric(record, name) or {}
    return [s for s in entry.get("samples") or []
            if isinstance(s, int | float) and not isinstance(s, bool) and s > 0]


def steps_on(record: dict[str, Any], clock: str) -> list[float] | None:
    """A record's per-step figures on `clock`, or None where it lacks them."""
    if clock == "cpu":
        return _samples(record, "cpu_time") or None
    steps, probes = _samples(record, "step_time"), _samples(record, "reference_time")
    if not steps or len(steps) != len(probes):
        return None
    return [step / probe for step, probe in zip(steps, probes, strict=True)]


def restated(record: dict[str, Any], clock: str) -> dict[str, Any] | None:
    """`record` read on `clock`: a copy with step_time and throughput from that clock's
    per-step figures; the record itself on the wall clock or where it did not succeed; None
    where a successful record lacks the clock's figure."""
    if clock not in CLOCKS:
        raise ValueError(f"unknown clock {clock!r}: one of {', '.join(CLOCKS)}")
    if clock == "wall" or record.get("status", "success") != "success" \
            or (find_metric(record, "step_time") or {}).get("clock") == clock:
        return record  # on the wall clock, failed, or read on this clock already
    samples = steps_on(record, clock)
    if samples is None:
        return None
    found = copy.deepcopy(record)
    batch = found.get("spec", {}).get("global_batch")
    step_unit, rate_unit = UNITS[clock]
    metrics = []
    for entry in found.get("metrics") or []:
        name = entry.get("name") if isinstance(entry, dict) else None
        if name == "tokens_per_s":
            continue
        if name == "step_time":
            entry = _entry(entry, statistics.median(samples), samples, step_unit, clock)
        elif name == "throughput" and isinstance(batch, int) and batch > 0:
            entry = _entry(entry, batch / statistics.median(samples),
                           [batch / s for s in samples], rate_unit, clock)
        metrics.append(entry)
    found["metrics"] = metrics
    return found


def _entry(entry: dict[str, Any], value: float, samples: list[float], unit: str, clock: str
           ) -> dict[str, Any]:
    kept = {k: v for k, v in entry.items() if k not in ("interval_pct", "overall")}
    return {**kept, "value": value, "unit": unit, "samples": samples,
            "stats": Stats.of(samples).as_dict(), "clock": clock}


def on_clock(records: list[dict[str, Any]], clock: str, side: str
             ) -> tuple[list[dict[str, Any]], str | None]:
    """A side's records read on `clock`, and a note naming how many were left out where some
    cannot be; UsageError where none of its successful records can be."""
    if clock == "wall":
        return records, None
    found = [restated(record, clock) for record in records]
    kept = [record for record in found if record is not None]
    left = len(found) - len(kept)
    succeeded = sum(record.get("status", "success") == "success" for record in records)
    if succeeded and left == succeeded:
        raise UsageError(f"--clock {clock}: no record of the {side} has {NEEDS[clock]}")
    note = (f"--clock {clock}: {left} record(s) of the {side} lack {NEEDS[clock]}; left out"
            if left else None)
    return kept, note

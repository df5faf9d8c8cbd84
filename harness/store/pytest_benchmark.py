"""pytest-benchmark JSON (`--benchmark-json`, `--benchmark-save`) as schema-v1 dtbench records.

One record per benchmark, so `report` and `compare` read pytest-benchmark files like stores.
Files written by benchmarks/bench_steps.py carry dtbench's own fingerprint and spec
(machine_info["dtbench"], extra_info["spec"]); any other file gets a fingerprint rebuilt from
pytest-benchmark's machine_info and a spec that names the benchmark, with the rest unknown.
"""
from __future__ import annotations

import datetime as dt
import hashlib
import math
import re
import statistics
from typing import Any

from harness.core.errors import SchemaError
from harness.core.text import one_line
from harness.records.definitions import step_time_metric, throughput_metric
from harness.records.record import Metric, build_record, check_record, measured

SOURCE_KIND = "pytest-benchmark"
UNKNOWN = "unknown"


def is_pytest_benchmark(document: Any) -> bool:
    """A pytest-benchmark file: an object with a `benchmarks` list and `machine_info`."""
    return (isinstance(document, dict) and isinstance(document.get("benchmarks"), list)
            and "machine_info" in document)


def _created(document: dict[str, Any], source: str) -> dt.datetime:
    text = document.get("datetime")
    if not isinstance(text, str):
        raise SchemaError(f"{source}: pytest-benchmark file has no datetime")
    try:
        created = dt.datetime.fromisoformat(text)
    except ValueError:
        raise SchemaError(f"{source}: pytest-benchmark datetime {one_line(text, 60)!r} "
                          "is not ISO 8601") from None
    if created.tzinfo is None:  # pytest-benchmark before 3.3 wrote naive UTC times
        created = created.replace(tzinfo=dt.UTC)
    return created.astimezone(dt.UTC)


def _object(value: Any, what: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise SchemaError(f"{what} must be an object, got {type(value).__name__}")
    return value


def _seconds(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SchemaError(f"{what} must be a number, got {one_line(repr(value), 40)}")
    value = float(value)
    if not math.isfinite(value) or value < 0:
        raise SchemaError(f"{what} must be a finite time >= 0, got {value}")
    return value


def _samples(values: Any, what: str) -> list[float] | None:
    if values is None:
        return None
    if not isinstance(values, list):
        raise SchemaError(f"{what} must be a list of times")
    return [_seconds(v, what) for v in values] or None


def _fingerprint(document: dict[str, Any],
                 ) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """(machine, software, harness): dtbench's own when the file carries it, else rebuilt."""
    machine_info = document["machine_info"]
    own = machine_info.get("dtbench")
    if isinstance(own, dict) and all(isinstance(own.get(k), dict)
                                     for k in ("machine", "software", "harness")):
        return own["machine"], own["software"], own["harness"]
    cpu = machine_info.get("cpu") if isinstance(machine_info.get("cpu"), dict) else {}
    node = machine_info.get("node")
    cpu_model = cpu.get("brand_raw") or machine_info.get("processor")
    machine = {
        "machine_id": hashlib.sha256(f"{node}|{cpu_model}".encode()).hexdigest()[:16],
        "hostname": node,
        "os": machine_info.get("system"),
        "kernel": machine_info.get("release"),
        "arch": machine_info.get("machine"),
        "cpu_model": cpu_model,
        "cpu_cores": cpu.get("count"),
        "ram_bytes": None,
        "gpus": [],
        "nodes": 1,
        "interconnect": None,
    }
    software = {"python": machine_info.get("python_version"), "torch": None, "onednn": None,
                "cuda": None, "cudnn": None, "nccl": None, "mpi": None}
    commit = document.get("commit_info") if isinstance(document.get("commit_info"), dict) else {}
    harness = {"version": None, "git_commit": commit.get("id"), "dirty": commit.get("dirty"),
               "tool": f"pytest-benchmark {document.get('version', UNKNOWN)}"}
    return machine, software, harness


def _fallback_spec(name: str, batch: int | None) -> dict[str, Any]:
    """A spec for a benchmark dtbench did not write: its name is the only identity known."""
    return {"workload": name, "size": UNKNOWN, "backend": UNKNOWN, "comm": UNKNOWN,
            "launcher": UNKNOWN, "precision": UNKNOWN, "world_size": 1, "nnodes": 1,
            "batch_per_rank": batch, "global_batch": batch, "steps": None, "warmup": None,
            "mode": "throughput", "seed": None, "env": {}, "suite": None}


def run_id_for(created: dt.datetime, stamp: str, fullname: str) -> str:
    """Stable (the same file gives the same ids) and unique per file and benchmark."""
    readable = re.sub(r"[^A-Za-z0-9_.-]+", "-", fullname.rsplit("::", 1)[-1]).strip("-.")[:60]
    digest = hashlib.sha256(f"{stamp}|{fullname}".encode()).hexdigest()[:8]
    return f"{created.strftime('%Y%m%dT%H%M%S')}Z-pytest-{readable or 'benchmark'}-{digest}"


def _batch(extra_info: dict[str, Any], spec: dict[str, Any]) -> int | None:
    for value in (extra_info.get("batch_size"), spec.get("global_batch")):
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def _metrics(stats: dict[str, Any], extra_info: dict[str, Any], batch: int | None,
             what: str) -> list[Metric]:
    samples = (_samples(stats.get("data"), f"{what}: stats.data")
               or _samples(extra_info.get("samples"), f"{what}: extra_info.samples"))
    if samples:
        step = statistics.median(samples)
    elif "median" in stats:
        step = _seconds(stats["median"], f"{what}: stats.median")
    else:
        raise SchemaError(f"{what}: no timings (neither stats.data nor stats.median)")
    rounds = stats.get("rounds", len(samples) if samples else None)
    extra = {"aggregation": "pytest-benchmark round time per iteration; value is the median",
             "rounds": rounds, "iterations": stats.get("iterations")}
    if not samples and all(k in stats for k in ("mean", "stddev", "rounds")):
        # Saved without per-round data (--benchmark-save): compare tests the summary.
        extra["summary"] = {"mean": _seconds(stats["mean"], f"{what}: stats.mean"),
                            "stddev": _seconds(stats["stddev"], f"{what}: stats.stddev"),
                            "rounds": _seconds(stats["rounds"], f"{what}: stats.rounds")}
    metrics = [step_time_metric(samples or [], step, extra)]
    if batch is None or step <= 0:
        return metrics
    throughput = throughput_metric(batch, samples or [], step, {"measured_steps": rounds})
    metrics.append(throughput)
    flops = extra_info.get("flops_per_sample")
    if isinstance(flops, (int, float)) and not isinstance(flops, bool) and flops > 0:
        metrics.append(measured("flops_per_sample", float(flops),
                                extra={"method": "torch.utils.flop_counter on the meta device, "
                                       "fwd+bwd"}))
        metrics.append(measured("achieved_flops", flops * throughput.value,
                                samples=[flops * s for s in throughput.samples or []] or None))
    return metrics


def _record(bench: Any, index: int, created: dt.datetime, stamp: str,
            fingerprint: tuple[dict[str, Any], dict[str, Any], dict[str, Any]],
            source: str) -> dict[str, Any]:
    if not isinstance(bench, dict):
        raise SchemaError(f"{source}: benchmarks[{index}] is not an object")
    name, fullname = bench.get("name"), bench.get("fullname", bench.get("name"))
    if not isinstance(name, str) or not name or not isinstance(fullname, str):
        raise SchemaError(f"{source}: benchmarks[{index}] has no name")
    what = f"{source}: benchmark {one_line(fullname, 120)}"
    stats = _object(bench.get("stats"), f"{what}: stats")
    extra_info = _object(bench.get("extra_info"), f"{what}: extra_info")
    spec = extra_info.get("spec")
    if not isinstance(spec, dict) or not isinstance(spec.get("workload"), str):
        spec = _fallback_spec(name, _batch(extra_info, {}))
    spec_key = extra_info.get("spec_key")
    if not isinstance(spec_key, str) or not spec_key:
        spec_key = hashlib.sha256(fullname.encode()).hexdigest()[:16]
    metrics = _metrics(stats, extra_info, _batch(extra_info, spec), what)
    notes = {key: extra_info[key] for key in ("settings", "device_name") if key in extra_info}
    notes["pytest_benchmark"] = {"group": bench.get("group"), "params": bench.get("params"),
                                 "options": bench.get("options")}
    machine, software, harness = fingerprint
    record = build_record(
        run_id=run_id_for(created, stamp, fullname), created=created, status="success",
        error=None, harness=harness, machine=machine, software=software, spec=spec,
        metrics=metrics, events=[],
        extra={"spec_key": spec_key, "notes": notes,
               "source": {"kind": SOURCE_KIND, "file": source, "fullname": fullname}})
    return check_record(record, what)


def records_from_pytest_benchmark(document: dict[str, Any], source: str) -> list[dict[str, Any]]:
    """One success record per benchmark; SchemaError (one line) when the file is malformed."""
    if not is_pytest_benchmark(document):
        raise SchemaError(f"{source}: not a pytest-benchmark file (no benchmarks list "
                          "and machine_info)")
    if not isinstance(document["machine_info"], dict):
        raise SchemaError(f"{source}: pytest-benchmark machine_info must be an object")
    if not document["benchmarks"]:
        raise SchemaError(f"{source}: pytest-benchmark file holds no benchmarks")
    try:
        created = _created(document, source)
        fingerprint = _fingerprint(document)
        return [_record(bench, index, created, document["datetime"], fingerprint, source)
                for index, bench in enumerate(document["benchmarks"])]
    except SchemaError:
        raise
    except (KeyError, TypeError, AttributeError, ValueError, OverflowError) as exc:
        raise SchemaError(f"{source}: malformed pytest-benchmark file "
                          f"({type(exc).__name__}: {one_line(str(exc), 120)})") from None

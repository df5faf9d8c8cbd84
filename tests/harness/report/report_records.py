"""Records for the report tests: the golden record with round numbers, plus hand-built
time-to-train, scaling, collective and failed records, and a store that holds them."""
from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from harness.records.record import Metric
from harness.spec.fields import spec_key
from harness.spec.specs import RUN_FIELDS

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "record_v1.json"
FLOPS_PER_SAMPLE = 45e6
PEAK_FLOPS = 4e11
PEAK_MEMORY = 512 * 2**20
# Median 10 ms; with 8 samples the 95% CI of the median is the full range.
STEP_TIMES = [0.0100, 0.0102, 0.0098, 0.0101, 0.0099, 0.0100, 0.0103, 0.0097]
SIZES = [1024 * 2**i for i in range(6)]


def _golden() -> dict[str, Any]:
    return json.loads(GOLDEN.read_text())


def training(run_id: str, *, precision: str = "fp32", speed: float = 1.0, world_size: int = 1,
             comm: str = "none", workload: str = "hep_cnn", created: str = "2024-01-02T03:04:05Z",
             extra: list[Metric] | None = None) -> dict[str, Any]:
    """A successful throughput run: step times scaled by 1/speed, every derived metric."""
    record = _golden()
    steps = [s / speed for s in STEP_TIMES]
    global_batch = record["spec"]["batch_per_rank"] * world_size
    throughput = [global_batch / s for s in steps]
    value = global_batch / _median(steps)
    achieved = [FLOPS_PER_SAMPLE * t for t in throughput]
    record.update(run_id=run_id, created_at=created)
    record["spec"].update(workload=workload, precision=precision, world_size=world_size,
                          comm=comm, global_batch=global_batch,
                          launcher="torchrun" if world_size > 1 else "local")
    record["spec_key"] = spec_key(record["spec"], RUN_FIELDS)
    metrics = [
        Metric("step_time", "s", _median(steps), False, samples=steps),
        Metric("throughput", "samples/s", value, True, samples=throughput),
        Metric("flops_per_sample", "FLOP", FLOPS_PER_SAMPLE, False),
        Metric("achieved_flops", "FLOP/s", FLOPS_PER_SAMPLE * value, True, samples=achieved),
        Metric("peak_flops", "FLOP/s", PEAK_FLOPS, True),
        Metric("mfu", "1", FLOPS_PER_SAMPLE * value / PEAK_FLOPS, True,
               samples=[a / PEAK_FLOPS for a in achieved]),
        Metric("peak_memory", "bytes", float(PEAK_MEMORY), False),
        *(extra or []),
    ]
    record["metrics"] = [m.as_dict() for m in metrics]
    return record


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return (ordered[middle - 1] + ordered[middle]) / 2 if len(ordered) % 2 == 0 \
        else ordered[middle]


def scaling(run_id: str, baseline_run_id: str, efficiency: float = 0.8) -> dict[str, Any]:
    """A two-rank gloo run whose scaling efficiency names its one-rank baseline."""
    return training(run_id, world_size=2, comm="gloo", speed=efficiency,
                    created="2024-01-02T03:05:00Z",
                    extra=[Metric("scaling_efficiency", "1", efficiency, True, extra={
                        "kind": "weak", "world_size": 2, "baseline_run_id": baseline_run_id})])


def time_to_train(run_id: str, seconds: float = 95.5, reached: bool = True) -> dict[str, Any]:
    """A ttt run: time_to_train and the quality it reached against its target."""
    record = training(run_id, created="2024-01-02T03:06:00Z", extra=[
        Metric("time_to_train", "s", seconds, False, extra={"from": "run_start", "to": "run_stop"}),
        Metric("quality", "1", 0.9125 if reached else 0.5, True,
               extra={"metric": "accuracy", "target": 0.9, "reached": reached})])
    record["spec"]["mode"] = "ttt"
    return record


def collective(run_id: str, op: str = "allreduce", comm: str = "gloo",
               world_size: int = 2) -> dict[str, Any]:
    """An nccl-tests style record: busbw by message size, algbw, latency at the smallest."""
    record = _golden()
    record.update(run_id=run_id, created_at="2024-01-02T03:07:00Z", spec_key=None)
    record["spec"] = {"task": "comm", "workload": f"comm-{op}", "op": op, "comm": comm,
                      "launcher": "local", "backend": "cpu", "precision": "fp32",
                      "world_size": world_size, "nnodes": 1, "size": "-", "mode": "comm",
                      "sizes": SIZES, "iters": 20, "warmup": 5, "env": {}}
    factor = 2 * (world_size - 1) / world_size
    per_size = []
    for i, size in enumerate(SIZES):
        time_s = 1e-4 * (i + 1)
        algbw = size / time_s / 1e9
        per_size.append({"bytes": size, "time_s": time_s, "algbw": algbw,
                         "busbw": algbw * factor})
    largest = per_size[-1]
    busbw = Metric("busbw", "GB/s", largest["busbw"], True,
                   samples=[largest["busbw"] * f for f in (0.9, 1.0, 1.1, 1.0, 0.95, 1.05)],
                   extra={"bytes": SIZES[-1], "per_size": per_size})
    record["metrics"] = [busbw.as_dict(),
                         Metric("algbw", "GB/s", largest["algbw"], True,
                                extra={"bytes": SIZES[-1]}).as_dict(),
                         Metric("latency", "s", per_size[0]["time_s"], False,
                                extra={"bytes": SIZES[0]}).as_dict()]
    return record


def failed(run_id: str, error: str = "rank 1 exited with code 9") -> dict[str, Any]:
    """A failed run: no metrics, a one-line reason."""
    record = _golden()
    record.update(run_id=run_id, status="failed", error=error, metrics=[],
                  created_at="2024-01-02T03:08:00Z")
    record["spec"].update(precision="fp16")
    return record


def standard_set() -> list[dict[str, Any]]:
    """Every kind of record the report shows; bf16 runs twice as fast as fp32."""
    return [
        training("20240102T030405Z-hep_cnn-fp32"),
        training("20240102T030406Z-hep_cnn-bf16", precision="bf16", speed=2.0),
        scaling("20240102T030500Z-hep_cnn-ws2", "20240102T030405Z-hep_cnn-fp32"),
        time_to_train("20240102T030600Z-hep_cnn-ttt"),
        collective("20240102T030700Z-comm-allreduce"),
        collective("20240102T030701Z-comm-allgather", op="allgather"),
        failed("20240102T030800Z-hep_cnn-failed"),
    ]


def write_store(folder: Path, records: list[dict[str, Any]]) -> Path:
    """A store directory holding one file per record, named by run id."""
    folder.mkdir(parents=True, exist_ok=True)
    for record in records:
        (folder / f"{record['run_id']}.json").write_text(json.dumps(record, indent=1))
    return folder


def hostile(record: dict[str, Any]) -> dict[str, Any]:
    """`record` with markup, cell breaks and line breaks in the strings it shows (a control
    character makes a record invalid: tests/harness/hostile_store.escape_records)."""
    changed = copy.deepcopy(record)
    changed["machine"]["hostname"] = "<script>alert(1)</script>"
    changed["machine"]["cpu_model"] = "cpu|evil"
    changed["software"]["mpi"] = {"implementation": "Open MPI <b>v5", "mpi4py": "4.1"}
    changed["spec"]["workload"] = "x</td><td>y $\\frac{"
    changed["spec"]["backend"] = "*bold* _it_ [link](javascript:alert(1)) `code`"
    changed["status"] = "failed"
    changed["error"] = "bad | cell\nsecond line <img src=x onerror=alert(2)> \\"
    return changed

"""--profile and the time breakdown: a trace per rank beside the record, the profiled steps
out of every figure, shares summing to 1 per rank; the trace reading on a made-up trace."""
from __future__ import annotations

import base64
import gzip
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from harness.collectors.breakdown import SHARES, rank_shares
from harness.rank.profiling import read_trace
from harness.rundir import RankResult

ROOT = Path(__file__).resolve().parents[3]


def encode(events: list[dict[str, Any]]) -> str:
    return base64.b64encode(gzip.compress(json.dumps({"traceEvents": events}).encode())
                            ).decode()


def op(name: str, ts: float, dur: float, tid: int = 1, cat: str = "cpu_op") -> dict[str, Any]:
    return {"ph": "X", "name": name, "cat": cat, "pid": 1, "tid": tid, "ts": ts, "dur": dur}


def test_a_trace_reads_into_compute_overlap_exposure_and_the_rest() -> None:
    """One 100 us step: compute 0-60 on the training thread, an all-reduce on gloo's thread
    40-90: 40 compute alone, 20 overlapped, 30 exposed, 10 neither."""
    trace = encode([op("ProfilerStep#0", 0, 100, cat="user_annotation"),
                    op("aten::conv2d", 0, 60), op("aten::convolution", 5, 50),
                    op("gloo:all_reduce", 40, 50, tid=2, cat="user_annotation")])
    assert read_trace(trace) == pytest.approx({"compute": 0.4, "comm_overlapped": 0.2,
                                               "comm_exposed": 0.3, "other": 0.1})
    assert read_trace(encode([op("aten::mm", 0, 5)])) is None  # no profiled step


def test_the_phase_clock_shares_sum_to_one_and_the_trace_refines_them() -> None:
    rank = RankResult(rank=0, world_size=2, device_name="cpu", settings={},
                      step_times=[0.010] * 3,
                      phase_times=[{"forward": 0.003, "backward": 0.004, "exchange": 0.001,
                                    "optimizer": 0.001}] * 3,
                      data={"waits": [0.0005] * 3})
    shares, compute_s, source = rank_shares(rank)
    assert sum(shares.values()) == pytest.approx(1.0) and set(shares) == set(SHARES)
    assert shares["compute"] == pytest.approx(0.7) and shares["comm_exposed"] == 0.1
    assert shares["waiting"] == pytest.approx(0.05) and compute_s == pytest.approx(0.007)
    assert "phase clock" in source
    rank.trace = encode([op("ProfilerStep#0", 0, 100, cat="user_annotation"),
                         op("aten::conv2d", 0, 60),
                         op("gloo:all_reduce", 40, 50, tid=2, cat="user_annotation")])
    shares, _, source = rank_shares(rank)
    assert sum(shares.values()) == pytest.approx(1.0)
    assert shares["comm_overlapped"] == pytest.approx(0.2)
    assert shares["optimizer"] == pytest.approx(0.1) and shares["compute"] == pytest.approx(0.3)
    assert "trace" in source and "CPU ops only" in source


@pytest.mark.slow
def test_a_profiled_two_rank_run_keeps_a_trace_per_rank(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "harness", "run", "-w", "hep_cnn", "--size", "tiny", "-n", "2",
         "--comm", "gloo", "--threads", "1", "--steps", "5", "--profile", "--profile-steps",
         "2", "--peak", "cached", "--out", str(tmp_path / "store"), "--json",
         str(tmp_path / "run.json"), "-q"], cwd=ROOT, capture_output=True, text=True,
        timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    (record,) = json.loads((tmp_path / "run.json").read_text())
    traces = record["notes"]["traces"]
    assert len(traces) == 2
    for name in traces:
        document = json.loads(gzip.decompress((tmp_path / "store" / name).read_bytes()))
        steps = [e for e in document["traceEvents"] if str(e.get("name")).startswith(
            "ProfilerStep#")]
        assert len(steps) == 2
    metrics = {m["name"]: m for m in record["metrics"]}
    assert len(metrics["step_time"]["samples"]) == 5  # the profiled steps are not measured
    assert len(metrics["phase_forward"]["samples"]) == 5
    breakdown = metrics["time_breakdown"]
    assert [r["rank"] for r in breakdown["per_rank"]] == [0, 1]
    for shares in breakdown["per_rank"]:
        assert sum(shares[k] for k in SHARES) == pytest.approx(1.0)
    assert breakdown["slowest_rank"] in (0, 1)


def test_profile_is_refused_where_ranks_do_not_step_together() -> None:
    from harness.core.errors import UsageError
    from harness.run.spec_checks import validate
    from harness.spec.specs import RunSpec

    spec = RunSpec(workload="hep_cnn", size="tiny", comm="gloo", nproc_per_node=3,
                   strategy="ps-async", profile=True, batch_per_rank=4, steps=2)
    with pytest.raises(UsageError, match="synchronous strategy in throughput mode"):
        validate(spec)
